# python/hf.mk - `make hf-gate`: Hugging Face transformers' attention functions (eager, sdpa,
# flex_attention on the CPU) fed the masks transformers builds for each model's config, judged
# by flexcheck's gates (python/flexcheck/hf_attention.py, ci/hf_gate.sh). Not part of `make
# test` (it downloads PyTorch and transformers); make test runs the runner against a numpy
# stand-in (python/tests/test_hf_attention.py). Included by python/module.mk.
#
#   make hf-gate                                  venv, export --quick, every implementation,
#                                                 all dtypes, check; report in build/hf-gate/report/
#   make hf-gate HF_SPEC='torch transformers==4.57.1'   another release (the venv is rebuilt)
#   make hf-gate HF_GATE_ARGS='--impl eager --dtype float32'
#
# The venv (build/hf-venv) is made by ci/hf_venv.sh and kept between runs; the runner comes
# from the tree (PYTHONPATH=python). Nothing is downloaded but the packages: the models are
# one-layer configs built by the runner. The steps and their exit status are ci/hf_gate.sh's
# (export and check: ci/engine_gate.sh).
HF_SPEC ?= torch transformers
HF_VENV ?= $(BUILD)/hf-venv
HF_GATE_DIR ?= $(BUILD)/hf-gate
HF_GATE_SIZE ?= --quick
HF_GATE_ARGS ?=

.PHONY: hf-gate hf-venv
hf-venv:
	@if [ "$$(cat $(HF_VENV)/.flexcheck-spec 2>/dev/null)" != "$(HF_SPEC)" ]; then \
	    PYTHON3=$(PYTHON3) sh ci/hf_venv.sh $(HF_VENV) $(HF_SPEC) && \
	    echo "$(HF_SPEC)" >$(HF_VENV)/.flexcheck-spec; \
	else echo "hf-gate: $(HF_VENV) has $(HF_SPEC) (delete it to reinstall)"; fi

hf-gate: $(BIN) hf-venv
	@BIN=$(BIN) PY=$(HF_VENV)/bin/python DIR=$(HF_GATE_DIR) SIZE="$(HF_GATE_SIZE)" \
	    RUNNER_ARGS="$(HF_GATE_ARGS)" bash ci/hf_gate.sh
