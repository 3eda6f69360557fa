# ci/module.mk - the quick gate as a `make test` step (the gate's own suite is tests/test_gate.c).
# It writes its report under $(BUILD)/reports-quick so `make gate`'s report stays separate.

.PHONY: gate-quick
TEST_STEPS += gate-quick

gate-quick: $(BIN)
	OPENBLAS_NUM_THREADS=1 $(BIN) gate --quick --jobs 2 --report-dir $(BUILD)/reports-quick
