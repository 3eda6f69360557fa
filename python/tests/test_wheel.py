"""The manylinux wheel (`make wheel`, ci/wheel.sh) as an engine's CI would use it: built, installed
with pip into a fresh venv (no system site packages; numpy and h5py from the package index), and
used from a temporary folder with no PYTHONPATH and nothing of this checkout on sys.path: the
`flexcheck` console command, flexcheck.judge and assert_attention_close on a right and a wrong
output, a fixture written by flexcheck.write_case and judged by `flexcheck check`. Every ELF file
the wheel installed must find each library it needs (ldd) inside the install or as one of the
system libraries auditwheel's policy for the wheel's manylinux tag allows: no Debian -dev
package, nothing else of the build machine.

Run by `make wheel-test` (a make test step), which sets FLEXCHECK_BUILD (the build folder whose
libflexcheck.so and flexcheck go into the wheel). Skipped, saying so, when the package index
cannot be reached: the build tools and numpy/h5py come from it.
"""
import glob
import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
import zipfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BUILD = os.environ.get("FLEXCHECK_BUILD")


def index_unreachable():
    """Why the package index pip uses cannot be reached, or None. An HTTP error is an answer:
    the index is there, and pip's own failure will say what is wrong."""
    url = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple/").rstrip("/") + "/numpy/"
    try:
        urllib.request.urlopen(url).close()
    except urllib.error.HTTPError:
        return None
    except OSError as e:  # URLError: no route, no name, refused
        return f"{url}: {e}"
    return None


def package_version():
    with open(os.path.join(ROOT, "python", "flexcheck", "_version.py")) as fh:
        return re.search(r'__version__ = "([^"]+)"', fh.read()).group(1)


@pytest.fixture(scope="module")
def wheel():
    if not BUILD:
        pytest.skip("FLEXCHECK_BUILD is not set (make wheel-test sets it)")
    why = index_unreachable()
    if why:
        pytest.skip(f"the package index cannot be reached, so no wheel is built or installed: {why}")
    build = os.path.join(ROOT, BUILD)
    r = subprocess.run(["sh", os.path.join(ROOT, "ci", "wheel.sh"), build], cwd=ROOT,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    found = glob.glob(os.path.join(build, "wheel", "*.whl"))
    assert len(found) == 1, found
    return found[0]


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory):
    """A fresh venv with the wheel installed: (its folder, its site-packages)."""
    d = str(tmp_path_factory.mktemp("wheel") / "venv")
    r = subprocess.run([sys.executable, "-m", "venv", d], capture_output=True, text=True,
                       env=clean_env())
    assert r.returncode == 0, r.stderr
    r = subprocess.run([os.path.join(d, "bin", "python"), "-m", "pip", "install", "-q",
                        "--disable-pip-version-check", wheel], capture_output=True, text=True,
                       env=clean_env(d))
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run([os.path.join(d, "bin", "python"), "-c",
                        "import sysconfig; print(sysconfig.get_paths()['platlib'])"],
                       capture_output=True, text=True, env=clean_env(d))
    assert r.returncode == 0, r.stderr
    return d, r.stdout.strip()


def clean_env(venv_dir=None):
    """The environment of a CI job that installed the wheel: none of this checkout's variables,
    the venv's bin/ first on PATH (as `activate` puts it), then the system's."""
    drop = ("PYTHONPATH", "PYTHONHOME", "FLEXCHECK_BIN", "FLEXCHECK_LIB", "LD_LIBRARY_PATH",
            "VIRTUAL_ENV", "PYTHONSTARTUP")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(PYTHONNOUSERSITE="1", OPENBLAS_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1",
               PATH=os.pathsep.join(([os.path.join(venv_dir, "bin")] if venv_dir else [])
                                    + ["/usr/bin", "/bin"]))
    return env


def run_in(venv_dir, cwd, *argv):
    return subprocess.run(list(argv), capture_output=True, text=True, cwd=str(cwd),
                          env=clean_env(venv_dir))


# ---- the wheel file ----

def test_the_wheel_is_manylinux_and_holds_the_library_and_the_command(wheel):
    name = os.path.basename(wheel)
    m = re.fullmatch(r"flexcheck-([^-]+)-py3-none-([^-]+)\.whl", name)
    assert m, name
    assert m.group(1) == package_version()
    machine = os.uname().machine
    for plat in m.group(2).split("."):
        assert re.fullmatch(rf"manylinux(_2_\d+|2014|2010|1)_{machine}", plat), name
    with zipfile.ZipFile(wheel) as z:
        files = {i.filename: i for i in z.infolist()}
        entry = z.read(next(f for f in files if f.endswith(".dist-info/entry_points.txt")))
    mode = files["flexcheck/_bin/flexcheck"].external_attr >> 16
    assert mode & 0o111, oct(mode)
    assert "flexcheck/_lib/libflexcheck.so" in files
    assert any(f.startswith("flexcheck.libs/") for f in files), sorted(files)
    assert "flexcheck = flexcheck._cli:main" in entry.decode().split("[console_scripts]")[1]


# ---- what pip installed ----

def allow_list(wheel):
    """The system libraries every manylinux tag of the wheel allows (auditwheel's policy file, in
    the build venv ci/wheel.sh made)."""
    found = glob.glob(os.path.join(ROOT, BUILD, "wheel-venv", "lib", "python*", "site-packages",
                                   "auditwheel", "policy", "manylinux-policy.json"))
    assert len(found) == 1, found
    with open(found[0]) as fh:
        policies = json.load(fh)
    machine = os.uname().machine
    tags = os.path.basename(wheel)[:-4].split("-")[-1].split(".")
    allowed = None
    for tag in tags:
        names = [p for p in policies
                 if any(f"{n}_{machine}" == tag for n in [p["name"]] + p.get("aliases", []))]
        assert len(names) == 1, (tag, [p["name"] for p in policies])
        libs = set(names[0]["lib_whitelist"])
        allowed = libs if allowed is None else allowed & libs
    assert allowed, tags
    return allowed


def elf_files(site):
    out = []
    for top in glob.glob(os.path.join(site, "flexcheck*")):
        for d, _, names in os.walk(top):
            for n in names:
                p = os.path.join(d, n)
                with open(p, "rb") as fh:
                    if fh.read(4) == b"\x7fELF":
                        out.append(p)
    return out


def test_every_installed_elf_finds_its_libraries_in_the_wheel_or_the_allow_list(wheel, venv):
    _, site = venv
    allowed = allow_list(wheel)
    elfs = elf_files(site)
    pkg = os.path.join(site, "flexcheck")
    libs = os.path.join(site, "flexcheck.libs")
    assert os.path.join(pkg, "_bin", "flexcheck") in elfs
    assert os.path.join(pkg, "_lib", "libflexcheck.so") in elfs
    assert any(p.startswith(libs + os.sep) for p in elfs), elfs
    bad = []
    for elf in elfs:
        r = subprocess.run(["ldd", elf], capture_output=True, text=True, env=clean_env())
        assert r.returncode == 0, (elf, r.stdout, r.stderr)
        for line in r.stdout.splitlines():
            line = line.strip()
            if "=>" not in line:  # the vDSO and the program interpreter (glibc's ld.so)
                assert re.match(r"(linux-vdso|/lib\w*/ld-linux)", line), (elf, line)
                continue
            soname, where = (s.strip() for s in line.split("=>", 1))
            path = where.split(" (")[0]
            inside = os.path.realpath(path).startswith((pkg + os.sep, libs + os.sep))
            if not inside and soname not in allowed:
                bad.append(f"{os.path.relpath(elf, site)}: {soname} => {where}")
    assert not bad, "needed from outside the wheel and not on the allow-list:\n" + "\n".join(bad)


def test_the_command_and_the_library_find_the_bundled_libraries_by_their_own_rpath(venv):
    _, site = venv
    for rel in ("flexcheck/_bin/flexcheck", "flexcheck/_lib/libflexcheck.so"):
        r = subprocess.run(["readelf", "-d", os.path.join(site, rel)], capture_output=True,
                           text=True, env=clean_env())
        assert r.returncode == 0, r.stderr
        paths = re.findall(r"\((?:RPATH|RUNPATH)\).*\[(.*)\]", r.stdout)
        assert paths, (rel, r.stdout)
        for entry in ":".join(paths).split(":"):
            assert entry.startswith("$ORIGIN"), (rel, entry)  # nothing of the build machine
        dirs = [os.path.normpath(e.replace("$ORIGIN", os.path.dirname(os.path.join(site, rel))))
                for e in ":".join(paths).split(":")]
        assert os.path.join(site, "flexcheck.libs") in dirs, (rel, dirs)


# ---- used from outside the checkout ----

def test_the_console_command_runs_the_bundled_binary_with_its_exit_status(venv, tmp_path):
    d, site = venv
    r = run_in(d, tmp_path, "flexcheck", "--version")
    assert r.returncode == 0, r.stderr
    assert re.fullmatch(rf"flexcheck {re.escape(package_version())} \(commit \S+\)\n", r.stdout)
    r = run_in(d, tmp_path, "flexcheck", "--help")
    assert r.returncode == 0, r.stderr
    assert "check" in r.stdout and "gate" in r.stdout
    r = run_in(d, tmp_path, "flexcheck")  # no command: the binary's usage, its exit 2
    assert r.returncode == 2 and r.stdout == "" and "flexcheck" in r.stderr, r
    r = run_in(d, tmp_path, "flexcheck", "check", "no-such-file.h5")
    assert r.returncode == 2 and "no-such-file.h5" in r.stderr, r
    # the console script is a wrapper around the package's binary, which it replaces
    with open(os.path.join(d, "bin", "flexcheck")) as fh:
        assert "flexcheck._cli" in fh.read()


USE = r'''
import os, sys, warnings
import numpy as np
import flexcheck
from flexcheck.judging import _load
from flexcheck.pytest_plugin import find_command
warnings.simplefilter("error", DeprecationWarning)  # a deprecated flexcheck call is ours to fix

root, site, fx = sys.argv[1:4]
assert flexcheck.__file__.startswith(site + os.sep), flexcheck.__file__
assert _load()._name.startswith(site + os.sep), _load()._name
assert find_command() == os.path.join(site, "flexcheck", "_bin", "flexcheck"), find_command()
assert not [p for p in sys.path if os.path.abspath(p or ".").startswith(root)], sys.path

rng = np.random.default_rng(7)
B, H, L, D, W = 1, 2, 64, 16, 8
q, k, v = (rng.standard_normal((B, H, L, D)).astype(np.float16) for _ in range(3))

def attention(window):
    """Causal sliding-window attention in float64 (docs/semantics.md: j <= i, i - j < W)."""
    s = q.astype(np.float64) @ np.swapaxes(k.astype(np.float64), 2, 3) / np.sqrt(D)
    i, j = np.arange(L)[:, None], np.arange(L)[None, :]
    s = np.where((j <= i) & (i - j < window), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True) @ v.astype(np.float64)).astype(np.float16)

right, wrong = attention(W), attention(W + 1)
good = flexcheck.judge(q, k, v, right, causal=True, window=W)
assert good.passed, str(good)
bad = flexcheck.judge(q, k, v, wrong, causal=True, window=W)
assert bad.failed, str(bad)
assert any(title.startswith(f"window W+1 ({W} -> {W + 1})") for title, _ in bad.findings), str(bad)
flexcheck.assert_attention_close(q, k, v, out=right, causal=True, window=W)
try:
    flexcheck.assert_attention_close(q, k, v, out=wrong, causal=True, window=W)
    raise SystemExit("assert_attention_close let the window W+1 output through")
except AssertionError as e:
    assert "window W+1" in str(e), str(e)

flexcheck.write_case(path=fx, name="c0001", q=q, k=k, v=v, causal=True, window=W)
for label, out in (("right", right), ("wrong", wrong)):
    flexcheck.add_tested(path=fx, case="c0001", label=label, out=out,
                         producer="numpy float64 reference, rounded to float16")
print("judged")
'''


def test_judge_assert_and_check_from_the_installed_wheel(venv, tmp_path):
    d, site = venv
    script = tmp_path / "use.py"
    script.write_text(USE)
    fx = str(tmp_path / "layer.h5")
    r = run_in(d, tmp_path, os.path.join(d, "bin", "python"), str(script), ROOT, site, fx)
    assert r.returncode == 0 and r.stdout == "judged\n", r.stdout + r.stderr
    r = run_in(d, tmp_path, "flexcheck", "check", "layer.h5", "--tested", "right")
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.search(r"^PASS layer\.h5 c0001 tested/right ", r.stdout, re.M), r.stdout
    r = run_in(d, tmp_path, "flexcheck", "check", "layer.h5", "--tested", "wrong")
    assert r.returncode == 1, r.stdout + r.stderr
    assert re.search(r"^FAIL layer\.h5 c0001 tested/wrong .*\n(.*\n)*.*window W\+1 \(8 -> 9\)",
                     r.stdout, re.M), r.stdout
