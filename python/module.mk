# python/module.mk - make test step of python/: the fixture package's tests (pytest), with
# FLEXCHECK_BIN so that what the package writes is also read and judged by `flexcheck check`.
#
# Debian's python3, where there is one: the installer's python3-pytest, python3-numpy and
# python3-h5py are installed for it, and a python3 found first on PATH (pyenv, a venv) would
# not see them. The package runs from the tree (PYTHONPATH), without being installed; no
# bytecode or pytest cache in the tree. Tests that need torch skip without it.
PYTHON3 ?= $(or $(wildcard /usr/bin/python3),python3)
.PHONY: python-tests
TEST_STEPS += python-tests
python-tests: $(BIN)
	PYTHONDONTWRITEBYTECODE=1 PYTHONPATH=python FLEXCHECK_BIN=$(BIN) OPENBLAS_NUM_THREADS=1 \
	    $(PYTHON3) -m pytest -q -rs -p no:cacheprovider --ignore=python/tests/test_wheel.py \
	    python/tests

# make wheel: the package as a manylinux wheel holding libflexcheck.so and the flexcheck command,
# the libraries they need bundled by auditwheel (ci/wheel.sh), in $(BUILD)/wheel/.
.PHONY: wheel wheel-test
wheel: $(BIN) $(SHLIB)
	sh ci/wheel.sh $(BUILD)

# make test step: that wheel built, installed into a fresh venv (numpy and h5py from PyPI) and
# used from outside the checkout (python/tests/test_wheel.py; skipped, saying so, when PyPI
# cannot be reached). PYTHONPATH is pytest's own (conftest.py imports the tree's package); what
# the test runs in the venv gets none, and no checkout path.
TEST_STEPS += wheel-test
wheel-test: $(BIN) $(SHLIB)
	PYTHONDONTWRITEBYTECODE=1 PYTHONPATH=python FLEXCHECK_BUILD=$(BUILD) OPENBLAS_NUM_THREADS=1 \
	    $(PYTHON3) -m pytest -q -rs -p no:cacheprovider python/tests/test_wheel.py

# make torch-gate (PyTorch's flex_attention under the gates; not part of make test).
include python/torch.mk

# make vllm-gate (vLLM's own FlexAttention backend under the gates; not part of make test).
include python/vllm.mk

# make ort-gate, make openvino-gate (ONNX Runtime's and OpenVINO's attention ops under the gates;
# not part of make test).
include python/onnx.mk

# make ggml-gate (ggml's ggml_flash_attn_ext, llama.cpp's attention op, under the gates; not
# part of make test).
include python/ggml.mk

# make hf-gate (Hugging Face transformers' attention under the gates; not part of make test).
include python/hf.mk
