# tests/python/test_gpu_check.py - ci/gpu_check.sh --prebuilt run as far as a machine without a
# GPU allows: in a scratch tree whose build/ holds stand-ins for flexcheck and the three test
# binaries (each logs its arguments and the library path it was given; `bench kernel` prints
# kernel lines), with python3 and ncu stand-ins first on PATH. The test reads back what the
# script ran, in what order, with which options (kernels 1-3 gated, kernels 2 and 3 benched in
# one process, PyTorch's bench handed that output, ncu on kernel 3, the long group last) and
# what it wrote (the summary, bench_md.txt); then BUDGET: a step that outruns it is cut at what
# is left, and the steps after it are skipped, never started. The GPU half is untested here.
#
#   python3 -m pytest -q tests/python      (the `arrows` make step)

import os
import re
import shutil
import stat
import subprocess
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")

# A stand-in binary: one line per call, "<name> [LD_LIBRARY_PATH] args"; the one named in
# FAKE_SLEEP_STEP sleeps FAKE_SLEEP_S seconds (default 30, to outrun BUDGET).
STUB = r"""#!/bin/bash
echo "${0##*/} [${LD_LIBRARY_PATH:-}] $*" >>"$CALLS"
[ "${FAKE_SLEEP_STEP:-}" = "${0##*/}" ] && sleep "${FAKE_SLEEP_S:-30}"
if [[ "$*" == "gate --full --filter m7- --list" ]]; then
    echo "m7-numeric-f16-a"; echo "m7-layout-bf16-b"
fi
if [ "$1 $2" = "bench kernel" ]; then
    echo "kernel throughput on backend gpu (best of 5; emu times are CPU times)"
    echo "  fp16 causal L=8k D=128 B=1 H=16          kernel 2:     4.913 ms    55.960 TFLOP/s  2080 blocks (2016 full, 64 partial)"
fi
exit 0
"""
# python3: says PyTorch imports; as ci/bench_torch_flex.py prints its noise and two bench.md lines.
PYTHON = r"""#!/bin/bash
echo "python3 $*" >>"$CALLS"
[ "$1" = -c ] && exit 0
echo "NVIDIA H200"
echo "fp16 causal L=8k D=128 B=1 H=16              out+lse  torch 2.11: 0.825 ms"
echo ""
echo "gpu: kernel 3 / PyTorch compiled, fp16 causal L=8k D=128: 0.550 x"
echo "  target >= 0.5x: met; stretch 1.0x: missed"
"""
NCU = "#!/bin/bash\necho \"ncu $*\" >>\"$CALLS\"\n"


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)


def tree(tmp):
    """A checkout with ci/gpu_check.sh and stand-in binaries; returns (root, fake PATH dir)."""
    root = tmp / "co"
    os.makedirs(root / "ci")
    shutil.copy(os.path.join(ROOT, "ci", "gpu_check.sh"), root / "ci")
    for b in ("flexcheck", "tests/test_emu_gpu", "tests/test_kernel_v2",
              "tests/test_kernel_v2_ptx"):
        write(str(root / "build" / b), STUB)
    fake = tmp / "bin"
    write(str(fake / "python3"), PYTHON)
    write(str(fake / "ncu"), NCU)
    return root, fake


def run(tmp, **env):
    root, fake = tree(tmp)
    calls = tmp / "calls.log"
    e = dict(os.environ, PATH=f"{fake}:{os.environ['PATH']}", CALLS=str(calls),
             OUT=str(tmp / "out"), FLEXCHECK_LIB_DIR="build/gpu-libs")
    e.pop("BUDGET", None)
    e.update(env)
    t0 = time.monotonic()
    r = subprocess.run(["bash", str(root / "ci" / "gpu_check.sh"), "--prebuilt"], cwd=root,
                       env=e, capture_output=True, text=True, timeout=120)
    took = time.monotonic() - t0
    lines = calls.read_text().splitlines() if calls.exists() else []
    return r, lines, tmp / "out", took


def test_the_run_covers_kernels_2_and_3_side_by_side_and_the_long_group_last(tmp_path):
    r, calls, out, _ = run(tmp_path, TORCH_CASES="0", GATE_LONG="1")
    assert r.returncode == 0, r.stdout + r.stderr
    lib = "[build/gpu-libs]"
    assert calls[:-2] == [
        "python3 -c import torch",
        f"test_emu_gpu {lib} ",
        f"test_kernel_v2_ptx {lib} ",
        f"test_kernel_v2 {lib} ",
        f"flexcheck {lib} gate --quick --backend gpu --kernel 1 --report-dir {out}/gate-k1",
        f"flexcheck {lib} gate --quick --backend gpu --kernel 2 --report-dir {out}/gate-k2",
        f"flexcheck {lib} gate --quick --backend gpu --kernel 3 --report-dir {out}/gate-k3",
        f"flexcheck {lib} bench kernel --kernel 2,3 --backend gpu --gpu-shapes --reps 5",
        f"python3 ci/bench_torch_flex.py --flexcheck=default={out}/bench_kernel.txt",
        "ncu --clock-control none -k regex:attn_v3 -c 1 --section SpeedOfLight --section "
        "Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats "
        "--section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis env "
        "LD_LIBRARY_PATH=build/gpu-libs build/flexcheck bench kernel --backend gpu --gpu-shapes "
        "--shape 1 --kernel 3 --reps 1",
        f"flexcheck {lib} gate --full --filter m7- --list",
    ], "\n".join(calls)
    # the long group: a gate a case (run side by side, in any order), each its own report
    assert sorted(calls[-2:]) == [
        f"flexcheck {lib} gate --full --filter m7-{c} --backend gpu --kernel 3 --report-dir "
        f"{out}/gate-long-k3/m7-{c}" for c in ("layout-bf16-b", "numeric-f16-a")]
    md = (out / "bench_md.txt").read_text()
    assert md == ("gpu: kernel 3 / PyTorch compiled, fp16 causal L=8k D=128: 0.550 x\n"
                  "  target >= 0.5x: met; stretch 1.0x: missed\n")
    summary = (out / "summary.txt").read_text()
    assert md in summary and "torch_flex_cuda              skipped: TORCH_CASES=0" in summary
    assert summary.rstrip().endswith("overall: PASS"), summary
    assert "gate_long_gpu_kernel3: 0 of 2 cases reported" in summary, summary  # stand-ins write none
    assert "2080 blocks" in (out / "bench_kernel.txt").read_text()


def test_without_the_long_group_it_is_not_run_and_a_failing_step_fails_the_run(tmp_path):
    # (a STEP_TIMEOUT under 10 s without BUDGET still runs every step)
    r, calls, out, _ = run(tmp_path, TORCH_CASES="0", STEP_TIMEOUT="5")
    assert r.returncode == 0 and not any("m7-" in c for c in calls), calls + [r.stderr]
    assert "skipped: " not in (out / "summary.txt").read_text().replace(
        "skipped: TORCH_CASES=0", "")
    # a stand-in that fails: the gate of kernel 3 exits 1
    bad = tmp_path / "bad"
    os.makedirs(bad)
    root, fake = tree(bad)
    write(str(root / "build" / "flexcheck"), STUB.replace(
        'exit 0', '[[ "$*" == *"--kernel 3 --report-dir"* ]] && exit 1; exit 0'))
    e = dict(os.environ, PATH=f"{fake}:{os.environ['PATH']}", CALLS=str(bad / "calls.log"),
             OUT=str(bad / "out"), TORCH_CASES="0")
    r = subprocess.run(["bash", str(root / "ci" / "gpu_check.sh"), "--prebuilt"], cwd=root,
                       env=e, capture_output=True, text=True, timeout=120)
    summary = (bad / "out" / "summary.txt").read_text()
    assert r.returncode == 1 and "gate_gpu_kernel3             exit 1" in summary, summary
    assert summary.rstrip().endswith("overall: FAIL")


def test_a_step_that_outruns_the_budget_is_cut_and_the_rest_skipped(tmp_path):
    r, calls, out, took = run(tmp_path, BUDGET="11", TORCH_CASES="0", GATE_LONG="1",
                              FAKE_SLEEP_STEP="test_kernel_v2_ptx")
    summary = (out / "summary.txt").read_text()
    assert r.returncode == 1, summary
    assert took < 20, f"the script ran {took:.0f} s past a budget of 11 s"
    assert "test_kernel_v2_ptx           exit 124" in summary, summary
    assert "(timed out after 11 s)" in summary or "(timed out after 10 s)" in summary, summary
    # nothing after it started: each is a line saying it was skipped
    assert [c.split()[0] for c in calls] == ["python3", "test_emu_gpu", "test_kernel_v2_ptx"]
    for step in ("test_kernel_v2", "gate_gpu_kernel1", "bench_kernel", "bench_torch",
                 "gate_long_gpu_kernel3"):
        assert any(ln.startswith(step + " ") and "skipped: " in ln and "BUDGET=11" in ln
                   for ln in summary.splitlines()), (step, summary)


def test_a_step_is_not_started_with_under_10_s_of_the_budget_left(tmp_path):
    # the first step takes 5 s of 14: 9 s left, too few for any step to finish in
    r, calls, out, _ = run(tmp_path, BUDGET="14", TORCH_CASES="0",
                           FAKE_SLEEP_STEP="test_emu_gpu", FAKE_SLEEP_S="5")
    summary = (out / "summary.txt").read_text()
    assert [c.split()[0] for c in calls] == ["python3", "test_emu_gpu"], summary
    # (bash's SECONDS counts whole seconds: 8 or 9 left)
    assert re.search(r"^test_kernel_v2_ptx +skipped: [89] s left of BUDGET=14$", summary,
                     re.M), summary


def test_a_bad_budget_is_one_line_naming_it(tmp_path):
    r, calls, _, _ = run(tmp_path, BUDGET="7m")
    assert r.returncode == 2 and calls == []
    assert r.stderr == "gpu_check: BUDGET = '7m': whole seconds > 0\n"
