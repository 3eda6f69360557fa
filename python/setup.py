"""setup.py - only to bring libflexcheck.so into the package (flexcheck.judge loads it with
ctypes; nothing is compiled here). Everything else is pyproject.toml's.

`pip install ./python` from a flexcheck checkout copies ../build/libflexcheck.so (what `make`
builds) into flexcheck/_lib/. When it is not built yet, `make -C .. build/libflexcheck.so` is
run (make installs the Debian packages it needs first, as `make test` does). When that cannot
work, the install stops with what to do, unless FLEXCHECK_NO_LIB=1, which installs the package
without the library (fixtures only; flexcheck.judge then looks for $FLEXCHECK_LIB).
"""
import os
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
LIB = os.path.join(ROOT, "build", "libflexcheck.so")


class BuildWithLibrary(build_py):
    def run(self):
        super().run()
        if os.environ.get("FLEXCHECK_NO_LIB") == "1":
            return
        if not os.path.isfile(LIB):
            if not os.path.isfile(os.path.join(ROOT, "Makefile")):
                raise SystemExit(
                    "flexcheck: libflexcheck.so is not built and this is not a flexcheck "
                    f"checkout ({ROOT} has no Makefile): build it with `make` in the checkout and "
                    "install from there, or set FLEXCHECK_NO_LIB=1 to install without it "
                    "(flexcheck.judge then needs FLEXCHECK_LIB)")
            print(f"flexcheck: building {LIB} (make -C {ROOT} build/libflexcheck.so)")
            r = subprocess.run(["make", "-C", ROOT, "build/libflexcheck.so"])
            if r.returncode != 0 or not os.path.isfile(LIB):
                raise SystemExit(
                    f"flexcheck: `make -C {ROOT} build/libflexcheck.so` failed (exit "
                    f"{r.returncode}); build it with `make` in the checkout (it installs its "
                    "Debian packages as root), or set FLEXCHECK_NO_LIB=1 to install without it")
        dst = os.path.join(self.build_lib, "flexcheck", "_lib")
        os.makedirs(dst, exist_ok=True)
        shutil.copy2(LIB, os.path.join(dst, "libflexcheck.so"))


setup(cmdclass={"build_py": BuildWithLibrary})
