# tests/python/test_check_arrows.py - ci/check_arrows.py run on tiny temporary trees: a clean one
# passes, and each kind of breakage (forbidden arrow, file cycle, module cycle, unresolved include)
# is reported with its file and line and fails the run.
#
#   python3 -m pytest -q tests/python          (a `make test` step, with Debian's python3-pytest)
#
# The script is run as a command, the way `make test` runs it, never imported.

import os
import shutil
import subprocess
import sys

import pytest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "ci", "check_arrows.py")

# A small tree that keeps every rule: one file per module, each including what it may.
CLEAN = {
    "base/fc.h": "#ifndef FC_H\n#define FC_H\nint fc(void);\n#endif\n",
    "base/fc.c": '#include "base/fc.h"\n#include <stdio.h>\n',
    "masks/mask.h": '#include "base/fc.h"\n',
    "masks/mask.c": '#include "mask.h"\n',  # beside the file, as the compiler resolves it
    "ref/ref.h": '#include "masks/mask.h"\n#include "base/fc.h"\n',
    "gpu/emu/include/cuda_runtime.h": '#include "gpu/emu/emu.h"\n',
    "gpu/emu/emu.h": "",
    "gpu/gpu.h": '#include "masks/mask.h"\n#include <cuda_runtime.h>\n',
    "reports/rep.h": '#include "base/fc.h"\n',
    "judge/judge.h": '#include "ref/ref.h"\n#include "gpu/gpu.h"\n#include "reports/rep.h"\n',
    "diag/diag.h": '#include "judge/judge.h"\n#include "ref/ref.h"\n',
    "fixtures/fix.h": '#include "judge/judge.h"\n#include "diag/diag.h"\n',
    "ci/gate.h": '#include "fixtures/fix.h"\n',
    "ci/checks/one.c": '#include "ci/gate.h"\n',
    "cli/cli.h": '#include "ci/gate.h"\n',
    "cli/main.c": '#include "cli/cli.h"\n',
    "tests/t.h": "",
    "tests/test_all.c": '#include "cli/cli.h"\n#include "tests/t.h"\n#include "gpu/gpu.h"\n',
    "README.md": '#include "nothing/here.h"\n',  # not a source file: never parsed
    ".ci/run.c": '#include "nothing/here.h"\n',  # .ci/ is not a module
}


def make_tree(root, files):
    for path, text in files.items():
        full = os.path.join(root, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w") as f:
            f.write(text)
    return str(root)


def run(root, *args):
    p = subprocess.run([sys.executable, SCRIPT, "--root", str(root)] + list(args),
                       capture_output=True, text=True)
    return p.returncode, p.stdout.splitlines(), p.stderr


def tree_with(tmp_path, changes):
    """The clean tree plus the files of changes (path: text)."""
    return make_tree(tmp_path, dict(CLEAN, **changes))


def summary(lines):
    assert lines and lines[-1].startswith("arrows: "), lines
    return lines[-1]


def test_clean_tree_passes(tmp_path):
    rc, out, err = run(make_tree(tmp_path, CLEAN))
    assert rc == 0, out + [err]
    assert out == [summary(out)]  # nothing but the summary
    assert " 0 file cycles, 0 module cycles, 0 forbidden, 0 unresolved" in summary(out)
    # 18 sources (README.md and .ci/ not read); 23 include lines: 22 quoted, 1 <cuda_runtime.h>
    assert summary(out).startswith("arrows: 18 files (not a git checkout: walked), 23 include lines, ")


@pytest.mark.parametrize("src, text, expect", [
    ("ref/ref.c", '#include "gpu/gpu.h"\n',
     "ref/ref.c:1: includes gpu/gpu.h: ref may not include gpu (allowed: base, masks)"),
    ("gpu/k.cu", '// the kernel\n#include "ref/ref.h"\n',
     "gpu/k.cu:2: includes ref/ref.h: gpu may not include ref (allowed: base, masks)"),
    ("reports/r.c", '#include "judge/judge.h"\n',
     "reports/r.c:1: includes judge/judge.h: reports may not include judge (allowed: base, masks)"),
    ("base/b.c", '#include "masks/mask.h"\n',
     "base/b.c:1: includes masks/mask.h: base may not include masks (allowed: nothing of ours)"),
    ("fixtures/f.c", '#include "ci/gate.h"\n',
     "fixtures/f.c:1: includes ci/gate.h: fixtures may not include ci "
     "(allowed: base, masks, ref, gpu, reports, judge, diag)"),
    ("ci/checks/c.c", '#include "cli/cli.h"\n',
     "ci/checks/c.c:1: includes cli/cli.h: ci may not include cli "
     "(allowed: base, masks, ref, gpu, reports, judge, diag, fixtures)"),
    # the diagnosis recomputes references, never runs a kernel, and sits below fixtures
    ("diag/d.c", '#include "gpu/gpu.h"\n',
     "diag/d.c:1: includes gpu/gpu.h: diag may not include gpu "
     "(allowed: base, masks, ref, reports, judge)"),
    ("diag/d.c", '#include "fixtures/fix.h"\n',
     "diag/d.c:1: includes fixtures/fix.h: diag may not include fixtures "
     "(allowed: base, masks, ref, reports, judge)"),
    ("judge/j2.c", '#include "diag/diag.h"\n',
     "judge/j2.c:1: includes diag/diag.h: judge may not include diag "
     "(allowed: base, masks, ref, gpu, reports)"),
    ("judge/j.c", '#include "tests/t.h"\n',
     "judge/j.c:1: includes tests/t.h: judge may not include tests "
     "(allowed: base, masks, ref, gpu, reports)"),
    # resolved beside the including file, as the compiler would: still an arrow into gpu
    ("ref/r2.c", '#include "../gpu/gpu.h"\n',
     "ref/r2.c:1: includes gpu/gpu.h: ref may not include gpu (allowed: base, masks)"),
    # the CUDA stand-ins are gpu's, even as system headers
    ("ref/r3.c", "#include <stdio.h>\n#include <cuda_runtime.h>\n",
     "ref/r3.c:2: includes gpu/emu/include/cuda_runtime.h: ref may not include gpu (allowed: base, masks)"),
    # inside an #if block it still counts
    ("masks/m.c", '#ifdef X\n#  include "reports/rep.h"\n#endif\n',
     "masks/m.c:2: includes reports/rep.h: masks may not include reports (allowed: base)"),
])
def test_forbidden_arrow_is_reported(tmp_path, src, text, expect):
    rc, out, _ = run(tree_with(tmp_path, {src: text}))
    assert rc == 1
    assert expect in out
    assert " 1 forbidden, " in summary(out)


@pytest.mark.parametrize("src", ["cli/cmd_repro.c", "cli/cli.h", "cli/isolate.c"])
def test_a_command_may_not_reach_the_layers_that_do_the_work(tmp_path, src):
    rc, out, _ = run(tree_with(tmp_path, {src: '#include "cli/cli.h"\n#include "judge/judge.h"\n'
                                               if src != "cli/cli.h" else '#include "diag/diag.h"\n'}))
    layer = "diag" if src == "cli/cli.h" else "judge"
    line = 1 if src == "cli/cli.h" else 2
    assert rc == 1
    assert ("%s:%d: includes %s/%s.h: a command may not include %s (its work is library code in "
            "check/ or ci/; only cli/bench_*.c time ref/judge/diag)" % (src, line, layer, layer, layer)) in out
    assert " 1 forbidden, " in summary(out)


def test_a_benchmark_may_time_the_layers_below(tmp_path):
    rc, out, _ = run(tree_with(tmp_path, {"cli/bench_x.c": '#include "judge/judge.h"\n#include "ref/ref.h"\n'}))
    assert rc == 0, out
    assert " 0 forbidden, " in summary(out)


def test_every_forbidden_line_is_reported(tmp_path):
    rc, out, _ = run(tree_with(tmp_path, {"ref/a.c": '#include "gpu/gpu.h"\n#include "gpu/gpu.h"\n',
                                          "reports/b.h": '\n\n#include "ref/ref.h"\n'}))
    assert rc == 1
    assert "ref/a.c:1: includes gpu/gpu.h: ref may not include gpu (allowed: base, masks)" in out
    assert "ref/a.c:2: includes gpu/gpu.h: ref may not include gpu (allowed: base, masks)" in out
    assert "reports/b.h:3: includes ref/ref.h: reports may not include ref (allowed: base, masks)" in out
    assert " 3 forbidden, " in summary(out)


def test_commented_out_and_if0_includes_are_not_includes(tmp_path):
    text = ('// #include "gpu/gpu.h"\n'
            '/* old:\n#include "gpu/gpu.h"\n*/\n'
            '#if 0\n#ifdef X\n#include "gpu/gpu.h"\n#endif\n#include "gpu/gpu.h"\n#else\n#include "base/fc.h"\n#endif\n'
            'static const char *s = "/* not a comment";\n'
            '#include "masks/mask.h" /* trailing */\n')
    rc, out, _ = run(tree_with(tmp_path, {"ref/ok.c": text}))
    assert rc == 0, out
    assert ", 25 include lines, " in summary(out)  # the clean tree's 23, plus fc.h and mask.h


def test_file_cycle_is_reported(tmp_path):
    rc, out, _ = run(tree_with(tmp_path, {"masks/a.h": '#include "masks/b.h"\n',
                                          "masks/b.h": '#include "masks/c.h"\n',
                                          "masks/c.h": '#include "base/fc.h"\n#include "masks/a.h"\n'}))
    assert rc == 1
    lines = [l for l in out if l.startswith("file cycle")]
    assert lines == ["file cycle of 3 files (masks/a.h, masks/b.h, masks/c.h): "
                     "masks/a.h -> masks/b.h -> masks/c.h -> masks/a.h"]
    assert " 1 file cycles, 0 module cycles, 0 forbidden, " in summary(out)


def test_self_include_is_a_cycle(tmp_path):
    rc, out, _ = run(tree_with(tmp_path, {"base/self.h": '\n#include "self.h"\n'}))
    assert rc == 1
    assert 'base/self.h:2: includes "self.h": the file includes itself' in out
    assert " 1 file cycles, " in summary(out)


def test_module_cycle_is_reported(tmp_path):
    # masks -> ref is forbidden; with ref -> masks it also closes a module cycle (no file cycle)
    rc, out, _ = run(tree_with(tmp_path, {"masks/x.c": '#include "ref/ref.h"\n'}))
    assert rc == 1
    assert "masks/x.c:1: includes ref/ref.h: masks may not include ref (allowed: base)" in out
    assert "module cycle of 2 modules (masks, ref): masks -> ref -> masks" in out
    assert " 0 file cycles, 1 module cycles, 1 forbidden, " in summary(out)


def test_unresolved_include_is_an_error(tmp_path):
    rc, out, _ = run(tree_with(tmp_path, {"judge/j.c": '#include "judge/judge.h"\n#include "jugde/judge.h"\n'}))
    assert rc == 1
    assert ('judge/j.c:2: includes "jugde/judge.h": resolves to no file '
            "(tried judge/jugde/judge.h, jugde/judge.h)") in out
    assert " 0 forbidden, 1 unresolved" in summary(out)


def test_unknown_module_is_reported(tmp_path):
    rc, out, _ = run(tree_with(tmp_path, {"tools/t.c": '#include "base/fc.h"\n'}))
    assert rc == 1
    assert "tools/t.c:1: includes base/fc.h: module tools is not in the layering table" in out


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
def test_git_checkout_reads_tracked_files_only(tmp_path):
    root = make_tree(tmp_path, CLEAN)
    make_tree(tmp_path, {"gpu/new.h": "", "ref/untracked.c": '#include "gpu/gpu.h"\n',
                         "judge/j.c": '#include "gpu/new.h"\n'})
    subprocess.run(["git", "init", "-q", root], check=True)
    tracked = [p for p in CLEAN if not p.startswith(".ci/")] + ["judge/j.c"]
    subprocess.run(["git", "-C", root, "add", "--"] + tracked, check=True)
    rc, out, _ = run(root)
    assert rc == 1
    # ref/untracked.c (a forbidden arrow) is not read; the include of an untracked header fails
    assert out[:-1] == ['judge/j.c:1: includes "gpu/new.h": resolves to a file git does not track '
                        "(tried judge/gpu/new.h, gpu/new.h)"]
    assert summary(out).startswith("arrows: 19 files, 24 include lines, ")


def test_graph_prints_module_arrows(tmp_path):
    rc, out, _ = run(make_tree(tmp_path, CLEAN), "--graph")
    assert rc == 0
    assert "  judge    -> gpu         1" in out
    assert "  gpu      -> masks       1" in out
    # gpu -> gpu: cuda_runtime.h's "gpu/emu/emu.h" and gpu.h's <cuda_runtime.h>
    assert "within modules: base 1, ci 1, cli 1, gpu 2, masks 1, tests 1" in out


def test_usage_error_exits_2(tmp_path):
    assert run(tmp_path, "--no-such-flag")[0] == 2
    assert run(tmp_path / "missing")[0] == 2
