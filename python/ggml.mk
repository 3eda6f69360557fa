# python/ggml.mk - `make ggml-gate`: ggml's ggml_flash_attn_ext (llama.cpp's attention op) on
# ggml's CPU backend judged by flexcheck's gates (python/flexcheck/ggml_attention.py). Not part
# of `make test` (it builds ggml-python from its sdist); make test runs the runner against a
# numpy stand-in (python/tests/test_ggml_runner.py). Included by python/module.mk.
#
#   make ggml-gate                                  venv, export --quick, the runner, check;
#                                                   report in build/ggml-gate/report/
#   make ggml-gate GGML_SPEC='ggml-python==0.0.45'  another release (the venv is rebuilt)
#   make ggml-gate GGML_GATE_ARGS='--dtype float16'
#
# The venv (build/ggml-venv) is made by ci/ggml_venv.sh and kept between runs; the runner comes
# from the tree (PYTHONPATH=python). The steps and their exit status are ci/ggml_gate.sh's
# (export and check: ci/engine_gate.sh).
GGML_SPEC ?= ggml-python==0.0.45
GGML_VENV ?= $(BUILD)/ggml-venv
GGML_GATE_DIR ?= $(BUILD)/ggml-gate
GGML_GATE_SIZE ?= --quick
GGML_GATE_ARGS ?=

.PHONY: ggml-gate ggml-venv
ggml-venv:
	@if [ "$$(cat $(GGML_VENV)/.flexcheck-spec 2>/dev/null)" != "$(GGML_SPEC)" ]; then \
	    PYTHON3=$(PYTHON3) sh ci/ggml_venv.sh $(GGML_VENV) $(GGML_SPEC) && \
	    echo "$(GGML_SPEC)" >$(GGML_VENV)/.flexcheck-spec; \
	else echo "ggml-gate: $(GGML_VENV) has $(GGML_SPEC) (delete it to reinstall)"; fi

ggml-gate: $(BIN) ggml-venv
	@BIN=$(BIN) PY=$(GGML_VENV)/bin/python DIR=$(GGML_GATE_DIR) SIZE="$(GGML_GATE_SIZE)" \
	    RUNNER_ARGS="$(GGML_GATE_ARGS)" bash ci/ggml_gate.sh
