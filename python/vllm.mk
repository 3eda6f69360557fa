# python/vllm.mk - `make vllm-gate`: vLLM's own FlexAttention backend (its metadata builder,
# metadata and FlexAttentionImpl, python/flexcheck/vllm_flex.py) judged by flexcheck's gates.
# Not part of `make test`: it downloads vLLM with its torch (about 9.5 GB). Included by
# python/module.mk.
#
#   make vllm-gate                              venv (VLLM_SPEC), export --quick, the runner on
#                                               the CPU (the direct build on every file, the slow
#                                               one on VLLM_GATE_SLOW's), check; report in
#                                               build/vllm-gate/report/
#   make vllm-gate VLLM_GATE_SLOW='*'           the slow build on every file too (hours here)
#   make vllm-gate VLLM_SPEC='vllm==0.11.0'     another vLLM (the venv is rebuilt when it changes)
#   make vllm-gate VLLM_VENV=/path/to/venv      use an existing venv with vLLM, numpy and h5py
#   make vllm-gate VLLM_GATE_ARGS='--page-size 32'
#
# The venv (build/vllm-venv) is made by ci/vllm_venv.sh and kept between runs; the runner and the
# fixture package come from the tree (PYTHONPATH=python). The steps and their exit status are
# ci/vllm_gate.sh's.
VLLM_SPEC ?= vllm==0.33.0
VLLM_VENV ?= $(BUILD)/vllm-venv
VLLM_GATE_DIR ?= $(BUILD)/vllm-gate
VLLM_GATE_SIZE ?= --quick
VLLM_GATE_ARGS ?=
# The files (a glob on their names) the slow build runs on: every check but the numeric one.
VLLM_GATE_SLOW ?= m[2-6]-*
# Processes for the direct build (the files dealt round-robin); the slow build has one.
VLLM_GATE_JOBS ?= 2

.PHONY: vllm-gate vllm-venv
# A venv named by the caller (VLLM_VENV on the command line or in the environment) is used as it
# is; the default one is made, and remade when VLLM_SPEC changes.
vllm-venv:
	@if [ "$(origin VLLM_VENV)" != "file" ]; then \
	    [ -x "$(VLLM_VENV)/bin/python" ] || { echo "vllm-gate: VLLM_VENV=$(VLLM_VENV) has no bin/python" >&2; exit 2; }; \
	    echo "vllm-gate: using $(VLLM_VENV) as it is"; \
	elif [ "$$(cat $(VLLM_VENV)/.flexcheck-vllm-spec 2>/dev/null)" != "$(VLLM_SPEC)" ]; then \
	    PYTHON3=$(PYTHON3) sh ci/vllm_venv.sh $(VLLM_VENV) $(VLLM_SPEC) && \
	    echo "$(VLLM_SPEC)" >$(VLLM_VENV)/.flexcheck-vllm-spec; \
	else echo "vllm-gate: $(VLLM_VENV) has $(VLLM_SPEC) (delete it to reinstall)"; fi

vllm-gate: $(BIN) vllm-venv
	@BIN=$(BIN) PY=$(VLLM_VENV)/bin/python DIR=$(VLLM_GATE_DIR) SIZE="$(VLLM_GATE_SIZE)" \
	    RUNNER_ARGS="$(VLLM_GATE_ARGS)" SLOW='$(VLLM_GATE_SLOW)' DIRECT_JOBS=$(VLLM_GATE_JOBS) \
	    bash ci/vllm_gate.sh
