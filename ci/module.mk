# ci/module.mk - the quick gate as `make test` steps (the gate's own suite is tests/test_gate.c):
# once with kernel 2 (the default, the kernel people would ship) and once with kernel 1 (the
# second opinion), each writing its report under $(BUILD)/ so `make gate`'s stays separate.

.PHONY: gate-quick gate-quick-k1
TEST_STEPS += gate-quick gate-quick-k1

gate-quick: $(BIN)
	OPENBLAS_NUM_THREADS=1 $(BIN) gate --quick --kernel 2 --jobs 2 --report-dir $(BUILD)/reports-quick

gate-quick-k1: $(BIN)
	OPENBLAS_NUM_THREADS=1 $(BIN) gate --quick --kernel 1 --jobs 2 --report-dir $(BUILD)/reports-quick-k1
