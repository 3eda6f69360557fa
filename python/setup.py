"""setup.py - only to bring the native parts into the package (nothing is compiled here):
libflexcheck.so, which flexcheck.judge loads with ctypes, into flexcheck/_lib/, and the
`flexcheck` command into flexcheck/_bin/ (the console script flexcheck._cli runs it). A package
holding them is one platform's: its wheel is tagged py3-none-<platform> (no Python extension
module, so any Python 3), and `make wheel` (ci/wheel.sh) has auditwheel repair it into a
manylinux wheel that carries the libraries both need. Everything else is pyproject.toml's.

`pip install ./python` from a flexcheck checkout copies ../build/libflexcheck.so and
../build/flexcheck (what `make` builds; a symbolic link is followed, the file it points at is
copied under the name the package loads) into the package. When they are not built yet,
`make -C .. build/libflexcheck.so build/flexcheck` is run (make installs the Debian packages it
needs first, as `make test` does). When that cannot work, the install stops with what to do,
unless FLEXCHECK_NO_LIB=1, which installs the package without either (fixtures only; a pure
wheel; flexcheck.judge then looks for $FLEXCHECK_LIB).
"""
import os
import shutil
import subprocess

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

try:  # setuptools >= 70.1 has its own; older ones use the wheel package's
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:
    from wheel.bdist_wheel import bdist_wheel

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
# (what `make` builds under build/, the package folder it goes to)
NATIVE = (("libflexcheck.so", "_lib"), ("flexcheck", "_bin"))
NO_NATIVE = os.environ.get("FLEXCHECK_NO_LIB") == "1"


class BuildWithNative(build_py):
    def run(self):
        super().run()
        if NO_NATIVE:
            return
        srcs = [os.path.join(ROOT, "build", name) for name, _ in NATIVE]
        targets = " ".join(f"build/{name}" for name, _ in NATIVE)
        missing = [s for s in srcs if not os.path.isfile(s)]
        if missing:
            if not os.path.isfile(os.path.join(ROOT, "Makefile")):
                raise SystemExit(
                    f"flexcheck: {', '.join(missing)} not built and this is not a flexcheck "
                    f"checkout ({ROOT} has no Makefile): build them with `make` in the checkout "
                    "and install from there, or set FLEXCHECK_NO_LIB=1 to install without them "
                    "(flexcheck.judge then needs FLEXCHECK_LIB)")
            print(f"flexcheck: building {targets} (make -C {ROOT} {targets})")
            r = subprocess.run(["make", "-C", ROOT] + targets.split())
            if r.returncode != 0 or not all(os.path.isfile(s) for s in srcs):
                raise SystemExit(
                    f"flexcheck: `make -C {ROOT} {targets}` failed (exit {r.returncode}); build "
                    "them with `make` in the checkout (it installs its Debian packages as root), "
                    "or set FLEXCHECK_NO_LIB=1 to install without them")
        for src, (name, folder) in zip(srcs, NATIVE):
            dst = os.path.join(self.build_lib, "flexcheck", folder)
            os.makedirs(dst, exist_ok=True)
            shutil.copy2(src, os.path.join(dst, name))  # follows a link; keeps the x bit


class NativeDistribution(Distribution):
    """ELF files inside: installed as platform files (platlib), not as pure Python."""

    def has_ext_modules(self):
        return not NO_NATIVE


class PlatformWheel(bdist_wheel):
    """One platform's wheel, but no Python ABI: the native parts are reached by ctypes and exec,
    so any Python 3 (py3-none-<platform>, as the cmake and ninja wheels)."""

    def get_tag(self):
        python, abi, plat = super().get_tag()
        return (python, abi, plat) if NO_NATIVE else ("py3", "none", plat)


setup(distclass=NativeDistribution,
      cmdclass={"build_py": BuildWithNative, "bdist_wheel": PlatformWheel})
