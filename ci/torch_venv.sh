#!/bin/sh
# ci/torch_venv.sh VENV [PIP_SPEC...] - a fresh virtual environment at VENV with PyTorch (PIP_SPEC,
# default `torch`: what `pip install torch` gives today), numpy and h5py, for the PyTorch runner
# (python -m flexcheck.torch_flex, make torch-gate); made by ci/py_venv.sh.
#
# From PyPI, the Linux x86-64 `torch` wheel is the CUDA build: pip also installs its nvidia-*
# and triton dependencies (about 5 GB in all, minutes), and import torch needs them even on a
# machine without a GPU; the CPU runs use none of them.
set -eu
[ $# -ge 1 ] || { echo "usage: ci/torch_venv.sh VENV [PIP_SPEC...]" >&2; exit 2; }
venv=$1
shift
[ $# -gt 0 ] || set -- torch
PY_VENV_NAME=ci/torch_venv.sh exec sh "$(dirname "$0")/py_venv.sh" "$venv" torch "$@"
