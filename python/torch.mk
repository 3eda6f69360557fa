# python/torch.mk - `make torch-gate`: PyTorch's flex_attention judged by flexcheck's gates, its
# first outside kernel; `make sdpa-gate`: PyTorch's scaled_dot_product_attention on the CPU, each
# backend that runs there (python/flexcheck/torch_sdpa.py, ci/sdpa_gate.sh; same venv);
# `make bench-torch-blockmask`: PyTorch's create_block_mask beside our
# direct builder. Not part of `make test` (they download PyTorch, ~5 GB with the CUDA
# libraries PyPI's wheel depends on). Included by python/module.mk.
#
#   make torch-gate                              export --quick, PyTorch on the CPU (eager, all
#                                                dtypes), check; report in build/torch-gate/report/
#   make torch-gate TORCH_SPEC='torch==2.7.1'    another PyTorch (the venv is rebuilt when it changes)
#   make torch-gate TORCH_GATE_SIZE=--default TORCH_GATE_ARGS='--dtype float16'
#
# The venv (build/torch-venv) is made by ci/torch_venv.sh and kept between runs; the runner
# and the fixture package come from the tree (PYTHONPATH=python). The steps and their exit
# status are ci/torch_gate.sh's.
TORCH_SPEC ?= torch
TORCH_VENV ?= $(BUILD)/torch-venv
TORCH_GATE_DIR ?= $(BUILD)/torch-gate
TORCH_GATE_SIZE ?= --quick
TORCH_GATE_ARGS ?=

.PHONY: torch-gate torch-venv
torch-venv:
	@if [ "$$(cat $(TORCH_VENV)/.flexcheck-torch-spec 2>/dev/null)" != "$(TORCH_SPEC)" ]; then \
	    PYTHON3=$(PYTHON3) sh ci/torch_venv.sh $(TORCH_VENV) $(TORCH_SPEC) && \
	    echo "$(TORCH_SPEC)" >$(TORCH_VENV)/.flexcheck-torch-spec; \
	else echo "torch-gate: $(TORCH_VENV) has $(TORCH_SPEC) (delete it to reinstall)"; fi

torch-gate: $(BIN) torch-venv
	@BIN=$(BIN) PY=$(TORCH_VENV)/bin/python DIR=$(TORCH_GATE_DIR) SIZE="$(TORCH_GATE_SIZE)" \
	    RUNNER_ARGS="$(TORCH_GATE_ARGS)" bash ci/torch_gate.sh

# make sdpa-gate: export --quick, torch_sdpa (math and flash on the CPU, every dtype), check;
# report in build/sdpa-gate/report/. SDPA_GATE_ARGS: more runner options (--backend math,
# --dtype float32, --window-offset 1 for the negative control).
SDPA_GATE_DIR ?= $(BUILD)/sdpa-gate
SDPA_GATE_SIZE ?= --quick
SDPA_GATE_ARGS ?=

.PHONY: sdpa-gate
sdpa-gate: $(BIN) torch-venv
	@BIN=$(BIN) PY=$(TORCH_VENV)/bin/python DIR=$(SDPA_GATE_DIR) SIZE="$(SDPA_GATE_SIZE)" \
	    RUNNER_ARGS="$(SDPA_GATE_ARGS)" bash ci/sdpa_gate.sh

# make bench-torch-blockmask: PyTorch's create_block_mask on the CPU, compiled (and uncompiled
# where its L x L intermediates fit), beside `flexcheck bench blockmask` in one run at
# TORCH_BENCH_LENGTHS for causal W=1024, causal and causal C=8192, block sets checked identical
# and ratios printed (python/flexcheck/bench_torch_blockmask.py; exit 1 only when a block set
# differs). The run is capped at TORCH_BENCH_MEM_KB of address space (ulimit -v, 14 GiB): the
# uncompiled call takes 3.25 GB at 16k and grows as L^2.
TORCH_BENCH_LENGTHS ?= 16384,65536
TORCH_BENCH_MEM_KB ?= 14680064
TORCH_BENCH_ARGS ?=

.PHONY: bench-torch-blockmask
bench-torch-blockmask: $(BIN) torch-venv
	@ulimit -v $(TORCH_BENCH_MEM_KB) && PYTHONPATH=python PYTHONDONTWRITEBYTECODE=1 \
	    $(TORCH_VENV)/bin/python -m flexcheck.bench_torch_blockmask --bin $(BIN) \
	    --l $(TORCH_BENCH_LENGTHS) $(TORCH_BENCH_ARGS)
