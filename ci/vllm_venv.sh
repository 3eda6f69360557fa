#!/bin/sh
# ci/vllm_venv.sh VENV [PIP_SPEC...] - a fresh virtual environment at VENV with vLLM (PIP_SPEC,
# default vllm==0.33.0), numpy, h5py and pytest, for vLLM's FlexAttention runner
# (python -m flexcheck.vllm_flex, make vllm-gate). The flexcheck package itself is not installed:
# it runs from the tree (PYTHONPATH=python).
#
# VLLM_TARGET_DEVICE=cpu is exported for pip (a build from source would target the CPU; PyPI's
# wheel is taken as it is) and the runner sets it at run time, so that vLLM picks its CPU
# platform on a machine without a GPU. The wheel pins its torch (vllm 0.33.0: torch 2.14.0, the
# CUDA build with its nvidia-* libraries: about 9.5 GB in all, 5 to 10 minutes from PyPI). The
# venv is made by Debian's python3 (PYTHON3), without system site packages; python3-venv is
# installed when missing, as ci/torch_venv.sh does.
set -eu
[ $# -ge 1 ] || { echo "usage: ci/vllm_venv.sh VENV [PIP_SPEC...]" >&2; exit 2; }
venv=$1
shift
[ $# -gt 0 ] || set -- vllm==0.33.0
PY=${PYTHON3:-python3}
[ -x /usr/bin/python3 ] && [ -z "${PYTHON3:-}" ] && PY=/usr/bin/python3

if ! "$PY" -c "import ensurepip, venv" 2>/dev/null; then
    echo "ci/vllm_venv.sh: installing python3-venv" >&2
    SUDO=""
    if [ "$(id -u)" != "0" ]; then
        command -v sudo >/dev/null 2>&1 || {
            echo "ci/vllm_venv.sh: need root (or sudo) to install python3-venv" >&2; exit 2; }
        SUDO=sudo
    fi
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
fi

rm -rf "$venv"
"$PY" -m venv "$venv"
echo "ci/vllm_venv.sh: pip install $* numpy h5py pytest into $venv (vLLM, torch and the CUDA libraries: about 9.5 GB, minutes)" >&2
VLLM_TARGET_DEVICE=cpu "$venv/bin/python" -m pip install -q --disable-pip-version-check "$@" numpy h5py pytest
VLLM_TARGET_DEVICE=cpu "$venv/bin/python" -c "import sys, vllm, torch, numpy, h5py; print('ci/vllm_venv.sh: vllm', vllm.__version__, 'torch', torch.__version__, 'numpy', numpy.__version__, 'h5py', h5py.__version__, 'Python', sys.version.split()[0])" 2>/dev/null
