# python/onnx.mk - `make ort-gate`: ONNX Runtime's com.microsoft.GroupQueryAttention and ONNX
# Attention judged by flexcheck's gates; `make openvino-gate`: the same ONNX models through
# OpenVINO's ONNX frontend and CPU plugin (python/flexcheck/ort_attention.py,
# openvino_attention.py). Not part of `make test` (they download onnxruntime or openvino);
# make test runs both runners against a numpy stand-in (python/tests/test_onnx_runners.py).
# Included by python/module.mk.
#
#   make ort-gate                                venv, export --quick, both ops on the CPU EP,
#                                                check; report in build/ort-gate/report/
#   make ort-gate ORT_SPEC='onnxruntime==1.22.0' another release (the venv is rebuilt)
#   make openvino-gate OPENVINO_GATE_ARGS='--op gqa --dtype float32'
#
# The venvs (build/ort-venv, build/openvino-venv) are made by ci/onnx_venv.sh and kept between
# runs; the runners come from the tree (PYTHONPATH=python). The steps and their exit status are
# ci/onnx_gate.sh's (export and check: ci/engine_gate.sh).
ORT_SPEC ?= onnxruntime
ORT_VENV ?= $(BUILD)/ort-venv
ORT_GATE_DIR ?= $(BUILD)/ort-gate
ORT_GATE_SIZE ?= --quick
ORT_GATE_ARGS ?=
OPENVINO_SPEC ?= openvino
OPENVINO_VENV ?= $(BUILD)/openvino-venv
OPENVINO_GATE_DIR ?= $(BUILD)/openvino-gate
OPENVINO_GATE_SIZE ?= --quick
OPENVINO_GATE_ARGS ?=

.PHONY: ort-gate ort-venv openvino-gate openvino-venv
ort-venv:
	@if [ "$$(cat $(ORT_VENV)/.flexcheck-spec 2>/dev/null)" != "$(ORT_SPEC)" ]; then \
	    PYTHON3=$(PYTHON3) sh ci/onnx_venv.sh ort $(ORT_VENV) $(ORT_SPEC) && \
	    echo "$(ORT_SPEC)" >$(ORT_VENV)/.flexcheck-spec; \
	else echo "ort-gate: $(ORT_VENV) has $(ORT_SPEC) (delete it to reinstall)"; fi

ort-gate: $(BIN) ort-venv
	@BIN=$(BIN) PY=$(ORT_VENV)/bin/python DIR=$(ORT_GATE_DIR) SIZE="$(ORT_GATE_SIZE)" \
	    RUNNER_ARGS="$(ORT_GATE_ARGS)" bash ci/onnx_gate.sh ort

openvino-venv:
	@if [ "$$(cat $(OPENVINO_VENV)/.flexcheck-spec 2>/dev/null)" != "$(OPENVINO_SPEC)" ]; then \
	    PYTHON3=$(PYTHON3) sh ci/onnx_venv.sh openvino $(OPENVINO_VENV) $(OPENVINO_SPEC) && \
	    echo "$(OPENVINO_SPEC)" >$(OPENVINO_VENV)/.flexcheck-spec; \
	else echo "openvino-gate: $(OPENVINO_VENV) has $(OPENVINO_SPEC) (delete it to reinstall)"; fi

openvino-gate: $(BIN) openvino-venv
	@BIN=$(BIN) PY=$(OPENVINO_VENV)/bin/python DIR=$(OPENVINO_GATE_DIR) \
	    SIZE="$(OPENVINO_GATE_SIZE)" RUNNER_ARGS="$(OPENVINO_GATE_ARGS)" bash ci/onnx_gate.sh openvino
