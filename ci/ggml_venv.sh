#!/bin/sh
# ci/ggml_venv.sh VENV [PIP_SPEC...] - a fresh virtual environment at VENV for the ggml runner
# (make ggml-gate): ggml-python (PIP_SPEC, default ggml-python==0.0.45, which vendors ggml 0.15.3
# and binds ggml_flash_attn_ext with its logit soft-cap and ggml_flash_attn_ext_add_sinks), numpy,
# h5py and pytest (for python/tests/test_ggml_runner.py's real-engine tests); made by
# ci/py_venv.sh.
#
# PyPI has ggml-python only as an sdist: pip builds ggml's CPU backend from its source with cmake
# and a C/C++ compiler (scikit-build-core, which takes cmake from PyPI where the machine has
# none), several minutes on two cores (CMAKE_BUILD_PARALLEL_LEVEL, default 2). GGML_NATIVE is
# off (CMAKE_ARGS overrides): ggml then builds for its fixed x86-64 set (SSE4.2, AVX, AVX2, BMI2,
# FMA, F16C) instead of -march=native, so every machine with AVX2 runs the same kernels.
set -eu
[ $# -ge 1 ] || { echo "usage: ci/ggml_venv.sh VENV [PIP_SPEC...]" >&2; exit 2; }
venv=$1
shift
[ $# -gt 0 ] || set -- ggml-python==0.0.45
command -v c++ >/dev/null 2>&1 || {
    echo "ci/ggml_venv.sh: no C++ compiler (c++); ggml-python builds ggml from its source (ci/install-deps.sh installs build-essential)" >&2
    exit 2; }
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}"
export CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF -DGGML_CPU_ALL_VARIANTS=OFF -DGGML_BACKEND_DL=OFF}"
PY_VENV_NAME=ci/ggml_venv.sh exec sh "$(dirname "$0")/py_venv.sh" "$venv" ggml "$@" pytest
