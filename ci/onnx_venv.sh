#!/bin/sh
# ci/onnx_venv.sh ENGINE VENV [PIP_SPEC...] - a fresh virtual environment at VENV for the ONNX
# attention runners (make ort-gate, make openvino-gate): ENGINE `ort` installs onnxruntime
# (PIP_SPEC, default `onnxruntime`), `openvino` installs openvino (default `openvino`); both with
# the `onnx` package (the runners build their one-node models with it), numpy, h5py and pytest
# (for python/tests/test_onnx_runners.py's real-engine tests); made by ci/py_venv.sh. Wheels
# only, a few minutes from PyPI on this machine.
set -eu
[ $# -ge 2 ] || { echo "usage: ci/onnx_venv.sh ort|openvino VENV [PIP_SPEC...]" >&2; exit 2; }
engine=$1
venv=$2
shift 2
case $engine in
    ort) module=onnxruntime ;;
    openvino) module=openvino ;;
    *) echo "ci/onnx_venv.sh: engine '$engine': must be ort or openvino" >&2; exit 2 ;;
esac
[ $# -gt 0 ] || set -- "$module"
PY_VENV_NAME=ci/onnx_venv.sh exec sh "$(dirname "$0")/py_venv.sh" "$venv" "$module onnx" "$@" \
    onnx pytest
