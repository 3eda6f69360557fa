# ci/module.mk - make test steps of ci/: the quick gate (the gate's own suite is tests/test_gate.c),
# once with kernel 2 (the default, the kernel people would ship), once with kernel 1 (the
# second opinion) and once with kernel 3 (FlashAttention-2's structure, gpu/attn_v3.cuh), each
# writing its report under $(BUILD)/ so `make gate`'s stays separate; and
# `arrows`, the module layering checked on every include line (ci/check_arrows.py), and the
# example sharded workflow (ci/examples/github-actions.yml) run locally.

.PHONY: gate-quick gate-quick-k1 gate-quick-k3
TEST_STEPS += gate-quick gate-quick-k1 gate-quick-k3

gate-quick: $(BIN)
	OPENBLAS_NUM_THREADS=1 $(BIN) gate --quick --kernel 2 --jobs 2 --report-dir $(BUILD)/reports-quick

gate-quick-k1: $(BIN)
	OPENBLAS_NUM_THREADS=1 $(BIN) gate --quick --kernel 1 --jobs 2 --report-dir $(BUILD)/reports-quick-k1

gate-quick-k3: $(BIN)
	OPENBLAS_NUM_THREADS=1 $(BIN) gate --quick --kernel 3 --jobs 2 --report-dir $(BUILD)/reports-quick-k3

# The M7 long group alone (docs/matrix.md), what `gate --full` runs of it: its windowed cases on
# the emu, its dense ones on the GPU backend where one is present (skips on the emu, each printed
# with its reason). Not a make test step: minutes to tens of minutes on 2 cores.
.PHONY: gate-long
gate-long: $(BIN)
	OPENBLAS_NUM_THREADS=1 $(BIN) gate --full --filter m7- --jobs $(GATE_JOBS) \
	    --report-dir $(BUILD)/reports-long

# The module layering (base <- masks <- ref, gpu, reports <- judge <- diag <- fixtures, ci <- cli) on
# every include line, and the checker's own tests on small temporary trees; with them the test
# of the example workflow ci/examples/github-actions.yml, which runs its gate and merge
# commands with $(BIN) (FLEXCHECK_BIN). Debian's python3, where there is one: the installer's
# python3-pytest and python3-yaml are installed for it, and a python3 found first on PATH
# (pyenv, a venv) would not see them. No bytecode or pytest cache in the tree.
PYTHON3 ?= $(or $(wildcard /usr/bin/python3),python3)
.PHONY: arrows
TEST_STEPS += arrows
arrows: $(BIN) | $(DEPS_STAMP)
	$(PYTHON3) ci/check_arrows.py
	PYTHONDONTWRITEBYTECODE=1 FLEXCHECK_BIN=$(BIN) OPENBLAS_NUM_THREADS=1 \
	    $(PYTHON3) -m pytest -q -p no:cacheprovider tests/python
