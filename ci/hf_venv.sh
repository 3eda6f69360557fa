#!/bin/sh
# ci/hf_venv.sh VENV [PIP_SPEC...] - a fresh virtual environment at VENV with PyTorch and Hugging
# Face transformers (PIP_SPEC, default `torch transformers`: what pip gives today), numpy and
# h5py, for the transformers runner (python -m flexcheck.hf_attention, make hf-gate); made by
# ci/py_venv.sh. The PyPI torch wheel is the CUDA build (see ci/torch_venv.sh); the runs use
# the CPU. No model weights are downloaded: the runner builds tiny random-weight configs.
set -eu
[ $# -ge 1 ] || { echo "usage: ci/hf_venv.sh VENV [PIP_SPEC...]" >&2; exit 2; }
venv=$1
shift
[ $# -gt 0 ] || set -- torch transformers
PY_VENV_NAME=ci/hf_venv.sh exec sh "$(dirname "$0")/py_venv.sh" "$venv" "torch transformers" "$@"
