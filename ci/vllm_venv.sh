#!/bin/sh
# ci/vllm_venv.sh VENV [PIP_SPEC...] - a fresh virtual environment at VENV with vLLM (PIP_SPEC,
# default vllm==0.33.0), numpy, h5py and pytest, for vLLM's FlexAttention runner
# (python -m flexcheck.vllm_flex, make vllm-gate); made by ci/py_venv.sh.
#
# VLLM_TARGET_DEVICE=cpu is exported for pip (a build from source would target the CPU; PyPI's
# wheel is taken as it is) and the runner sets it at run time, so that vLLM picks its CPU
# platform on a machine without a GPU. The wheel pins its torch (vllm 0.33.0: torch 2.14.0, the
# CUDA build with its nvidia-* libraries: about 9.5 GB in all, 5 to 10 minutes from PyPI).
set -eu
[ $# -ge 1 ] || { echo "usage: ci/vllm_venv.sh VENV [PIP_SPEC...]" >&2; exit 2; }
venv=$1
shift
[ $# -gt 0 ] || set -- vllm==0.33.0
export VLLM_TARGET_DEVICE=cpu
PY_VENV_NAME=ci/vllm_venv.sh exec sh "$(dirname "$0")/py_venv.sh" "$venv" "vllm torch" "$@" pytest
