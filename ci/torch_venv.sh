#!/bin/sh
# ci/torch_venv.sh VENV [PIP_SPEC...] - a fresh virtual environment at VENV with PyTorch (PIP_SPEC,
# default `torch`: what `pip install torch` gives today), numpy and h5py, for the PyTorch runner
# (python -m flexcheck.torch_flex, make torch-gate). The flexcheck package itself is not
# installed: it runs from the tree (PYTHONPATH=python), so the runner is always this checkout's.
#
# From PyPI, the Linux x86-64 `torch` wheel is the CUDA build: pip also installs its nvidia-*
# and triton dependencies (about 5 GB in all), and import torch needs them even on a machine
# without a GPU; the CPU runs use none of them. The venv is made by Debian's python3 (PYTHON3),
# without system site packages; Debian ships venv support as python3-venv, installed here when
# missing (as ci/install-deps.sh does: root, or sudo).
set -eu
[ $# -ge 1 ] || { echo "usage: ci/torch_venv.sh VENV [PIP_SPEC...]" >&2; exit 2; }
venv=$1
shift
[ $# -gt 0 ] || set -- torch
PY=${PYTHON3:-python3}
[ -x /usr/bin/python3 ] && [ -z "${PYTHON3:-}" ] && PY=/usr/bin/python3

if ! "$PY" -c "import ensurepip, venv" 2>/dev/null; then
    echo "ci/torch_venv.sh: installing python3-venv" >&2
    SUDO=""
    if [ "$(id -u)" != "0" ]; then
        command -v sudo >/dev/null 2>&1 || {
            echo "ci/torch_venv.sh: need root (or sudo) to install python3-venv" >&2; exit 2; }
        SUDO=sudo
    fi
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
fi

rm -rf "$venv"
"$PY" -m venv "$venv"
echo "ci/torch_venv.sh: pip install $* numpy h5py into $venv (the torch wheel and its CUDA libraries are large: minutes)" >&2
"$venv/bin/pip" install -q --disable-pip-version-check "$@" numpy h5py
"$venv/bin/python" -c "import sys, torch, numpy, h5py; print('ci/torch_venv.sh: torch', torch.__version__, 'numpy', numpy.__version__, 'h5py', h5py.__version__, 'Python', sys.version.split()[0])"
