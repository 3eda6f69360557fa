# tests/module.mk - test-only builds (included by the top Makefile).
#
# The gate self-test (tests/test_gate.c) links deliberately broken kernels: gpu/attn_launch.cu
# compiled again for the emu backend with ATTN_MUTANT = 1..11 (see gpu/attn_mutants.cuh; both
# kernels carry each defect), each in its
# own namespace with entry point gpu_attention_mutant<N>. They never enter the library.

MUTANTS := 1 2 3 4 5 6 7 8 9 10 11
MUTANT_OBJS := $(MUTANTS:%=$(BUILD)/mutants/attn_launch_m%.o)

-include $(wildcard $(BUILD)/mutants/*.d)
$(BUILD)/mutants/attn_launch_m%.o: gpu/attn_launch.cu $(EMU_HDRS) $(GPU_HDRS) \
                                   $(DEFINES_STAMP) | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(CXX) $(CPPFLAGS) $(EMU_CUFLAGS) -DATTN_MUTANT=$* -MMD -MP -c $< -o $@

$(BUILD)/tests/test_gate: tests/test_gate.c $(MUTANT_OBJS) $(LIB) | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -o $@ $< $(MUTANT_OBJS) $(LIB) \
	    $(CRITERION_LIBS) $(LDLIBS)

# ---- kernel version 2 (gpu/attn_v2.cuh): the PTX-wrapper test kernels of tests/v2/, built
# for the emu (the CPU twins) and, with nvcc, natively (the instructions, run when a device is
# present), linked into tests/test_kernel_v2_ptx.c. ----
V2T_CU    := $(wildcard tests/v2/*.cu)
V2T_OBJS  := $(V2T_CU:%.cu=$(BUILD)/obj/%.emu.o)
ifneq ($(NVCC_BIN),)
V2T_OBJS  += $(V2T_CU:%.cu=$(BUILD)/nvcc/%.o)
V2T_FLAGS := -DV2T_HAVE_CUDA
endif
-include $(V2T_CU:%.cu=$(BUILD)/obj/%.emu.d)

$(BUILD)/tests/test_kernel_v2_ptx: tests/test_kernel_v2_ptx.c $(V2T_OBJS) $(LIB) | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(V2T_FLAGS) -MMD -MP -o $@ $< $(V2T_OBJS) $(LIB) \
	    $(CRITERION_LIBS) $(LDLIBS)

# Kernel versions 2 and 3 under the emu's ASan/UBSan and race-checker builds (gpu/module.mk's pattern
# rules compile gpu/attn_launch.cu and the runtime for each), driven by
# tests/v2/v2_sanitize_main.c; a make test step.
V2_ASAN_BIN := $(EMU_ASAN_DIR)/v2-sanitize
V2_RACE_BIN := $(EMU_RACE_DIR)/v2-sanitize
# Its plain-build object depends on the headers it includes (fix.h, ...): without this a changed
# struct would link against a stale object (the emu builds' .d files are gpu/module.mk's).
-include $(BUILD)/obj/tests/v2/v2_sanitize_main.d
$(V2_ASAN_BIN): $(EMU_ASAN_DIR)/tests/v2/v2_sanitize_main.o $(EMU_ASAN_DIR)/gpu/attn_launch.o \
                $(EMU_ASAN_DIR)/gpu/emu/emu_runtime.o $(LIB)
	$(CXX) -fsanitize=address,undefined -o $@ $(filter %.o,$^) $(LIB) $(LDLIBS)
$(V2_RACE_BIN): $(BUILD)/obj/tests/v2/v2_sanitize_main.o $(EMU_RACE_DIR)/gpu/attn_launch.o \
                $(EMU_RACE_DIR)/gpu/emu/emu_runtime.o $(EMU_RACE_DIR)/gpu/emu/emu_race.o $(LIB)
	$(CXX) -o $@ $(filter %.o,$^) $(LIB) $(LDLIBS)

# The variant with both of kernel 2's other synchronisation schemes (two K/V stages, two m16
# tiles a warp; gpu/attn_v2_variants.txt) under the race checker too: its quick-gate
# comparison (gpu/module.mk) cannot see a missing barrier, the emu running each thread from
# barrier to barrier.
V2_RACE_VARIANT := w32st2
V2_RACE_VBIN := $(EMU_RACE_DIR)/v2-sanitize-$(V2_RACE_VARIANT)
-include $(wildcard $(EMU_RACE_DIR)/variants/*/*.d)
$(EMU_RACE_DIR)/variants/%/attn_launch.o: gpu/attn_launch.cu $(EMU_HDRS) $(GPU_HDRS) \
                                          $(V2_VARIANTS_FILE) $(DEFINES_STAMP) | $(EMU_STAMP)
	@mkdir -p $(@D)
	$(CXX) $(CPPFLAGS) $(call v2_variant_defs,$*) $(EMU_CUFLAGS) $(EMU_RACE_FLAGS) -MMD -MP \
	    -c $< -o $@
$(V2_RACE_VBIN): $(BUILD)/obj/tests/v2/v2_sanitize_main.o \
                 $(EMU_RACE_DIR)/variants/$(V2_RACE_VARIANT)/attn_launch.o \
                 $(EMU_RACE_DIR)/gpu/emu/emu_runtime.o $(EMU_RACE_DIR)/gpu/emu/emu_race.o $(LIB)
	$(CXX) -o $@ $(filter %.o,$^) $(LIB) $(LDLIBS)

.PHONY: v2-sanitize
TEST_STEPS += v2-sanitize
v2-sanitize: $(V2_ASAN_BIN) $(V2_RACE_BIN) $(V2_RACE_VBIN)
	@echo "== kernels 2 and 3 under the emu ASan/UBSan build"
	@OPENBLAS_NUM_THREADS=1 $(V2_ASAN_BIN)
	@echo "== kernels 2 and 3 under the emu race checker"
	@OPENBLAS_NUM_THREADS=1 $(V2_RACE_BIN)
	@echo "== kernel 2, variant $(V2_RACE_VARIANT), under the emu race checker"
	@OPENBLAS_NUM_THREADS=1 $(V2_RACE_VBIN) 2

# ---- make outsider-eval (not part of make test): an outside numpy attention engine with one
# planted bug per switch (tests/outsider/outsider.py) run on the quick matrix's export, judged by
# `check`, and how often the diagnosis names each planted bug, as tables on stdout and in
# $(BUILD)/outsider/summary.md. The export is written afresh each time: stored outputs only grow
# an HDF5 file. ----
OUTSIDER_DIR := $(BUILD)/outsider
OUTSIDER_JOBS ?= 2
.PHONY: outsider-eval
outsider-eval: $(BIN)
	rm -rf $(OUTSIDER_DIR) && mkdir -p $(OUTSIDER_DIR)
	$(BIN) export --quick --out $(OUTSIDER_DIR)/export
	PYTHONDONTWRITEBYTECODE=1 PYTHONPATH=python OPENBLAS_NUM_THREADS=1 \
	    $(PYTHON3) tests/outsider/outsider.py $(OUTSIDER_DIR)/export --bug all \
	    --jobs $(OUTSIDER_JOBS) --check $(BIN) --summary $(OUTSIDER_DIR)/summary.md \
	    --json $(OUTSIDER_DIR)/records.json
