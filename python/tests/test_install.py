"""`pip install ./python` brings libflexcheck.so and the flexcheck command along
(python/setup.py), so that flexcheck.judge and the `flexcheck` console script work from an
installed package; and it says what to do when it cannot. Uses Debian's pip (python3 -m pip
install --target, no network: --no-build-isolation --no-deps) on copies of the package next to
copies of the built files. Skipped without pip or them. The manylinux wheel: test_wheel.py.
"""
import os
import shutil
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.dirname(HERE)  # python/
LIB = os.path.join(os.path.dirname(PKG), "build", "libflexcheck.so")
BIN = os.path.join(os.path.dirname(PKG), "build", "flexcheck")


def pip_ok():
    r = subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True)
    return r.returncode == 0


pytestmark = [pytest.mark.skipif(not pip_ok(), reason="no pip for this python3"),
              pytest.mark.skipif(not os.path.isfile(LIB), reason=f"{LIB} not built"),
              pytest.mark.skipif(not os.path.isfile(BIN), reason=f"{BIN} not built")]


def install(root, target, env=None):
    shutil.copytree(PKG, os.path.join(root, "python"),
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "tests"))
    return subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-build-isolation",
                           "--no-deps", "--target", target, os.path.join(root, "python")],
                          capture_output=True, text=True,
                          env=dict(os.environ, **(env or {}), PIP_DISABLE_PIP_VERSION_CHECK="1"))


def test_the_installed_package_judges_with_the_library_it_brought(tmp_path):
    root, site = str(tmp_path / "checkout"), str(tmp_path / "site")
    os.makedirs(os.path.join(root, "build"))
    shutil.copy2(LIB, os.path.join(root, "build", "libflexcheck.so"))
    shutil.copy2(BIN, os.path.join(root, "build", "flexcheck"))
    r = install(root, site)
    assert r.returncode == 0, r.stdout + r.stderr
    lib = os.path.join(site, "flexcheck", "_lib", "libflexcheck.so")
    assert os.path.isfile(lib)
    code = ("import numpy as np, flexcheck; from flexcheck.judging import _load;"
            "q = np.ones((1, 1, 4, 8), np.float16);"
            "v = flexcheck.judge(q, q, q, q, causal=True);"
            "print(_load()._name, v.outcome)")
    env = {k: v for k, v in os.environ.items() if k not in ("FLEXCHECK_LIB", "PYTHONPATH")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=str(tmp_path), env=dict(env, PYTHONPATH=site))
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [lib, "pass"], out.stdout
    # pytest finds the plugin by the installed entry point (no -p): --flexcheck-report exists
    h = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--help"],
                       capture_output=True, text=True, cwd=str(tmp_path),
                       env=dict(env, PYTHONPATH=site))
    assert h.returncode == 0, h.stderr
    assert "--flexcheck-report=DIR" in h.stdout, h.stdout[-2000:]
    # the console script runs the binary the package brought, with its exit status
    cmd = os.path.join(site, "bin", "flexcheck")
    v = subprocess.run([cmd, "--version"], capture_output=True, text=True, cwd=str(tmp_path),
                       env=dict(env, PYTHONPATH=site))
    assert v.returncode == 0 and v.stdout.startswith("flexcheck "), v.stdout + v.stderr
    assert os.access(os.path.join(site, "flexcheck", "_bin", "flexcheck"), os.X_OK)
    n = subprocess.run([cmd], capture_output=True, text=True, cwd=str(tmp_path),
                       env=dict(env, PYTHONPATH=site))
    assert n.returncode == 2 and "flexcheck" in n.stderr, n.stdout + n.stderr


def test_outside_a_checkout_without_the_library_it_says_what_to_do(tmp_path):
    root, site = str(tmp_path / "elsewhere"), str(tmp_path / "site")
    os.makedirs(root)
    r = install(root, site)
    assert r.returncode != 0
    assert "libflexcheck.so, " in r.stderr + r.stdout, r.stderr
    assert "not built and this is not a flexcheck checkout" in r.stderr + r.stdout, r.stderr
    assert "FLEXCHECK_NO_LIB=1" in r.stderr + r.stdout
    again = str(tmp_path / "again")
    os.makedirs(again)
    r = install(again, site, {"FLEXCHECK_NO_LIB": "1"})
    assert r.returncode == 0, r.stderr
    assert not os.path.exists(os.path.join(site, "flexcheck", "_lib"))
    assert not os.path.exists(os.path.join(site, "flexcheck", "_bin"))
    # its console script says why there is no command, exit 2
    n = subprocess.run([os.path.join(site, "bin", "flexcheck"), "--version"],
                       capture_output=True, text=True, cwd=str(tmp_path),
                       env=dict({k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
                                PYTHONPATH=site))
    assert n.returncode == 2 and "holds no flexcheck command" in n.stderr, n.stdout + n.stderr
