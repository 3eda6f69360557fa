# gpu/module.mk - build rules of gpu/ (included by the top Makefile):
#   - the emu runtime (gpu/emu/) and every gpu/*.cu compiled by g++ against it, into the library;
#   - the emu self-tests: tests/test_emu (emulated) and tests/test_emu_gpu (nvcc, native; skips
#     without nvcc or a device), both over the kernels of tests/emu/;
#   - make test steps: emu-nvcc (nvcc -c of every .cu for sm_80 and sm_90, registers and spills
#     printed; skipped with a message when nvcc is missing) and emu-sanitize (the ASan/UBSan and
#     race-check builds run the self-test kernels and must stay silent);
#   - make emu-bench: fiber switches per second.
# Variables of the top Makefile defined after this file is included (LIB, DEPS_STAMP) are
# spelled out in prerequisites, where make expands them at once.

EMU_DIR    := gpu/emu
EMUT_DIR   := tests/emu
EMU_STAMP  := $(BUILD)/.deps-installed
EMU_LIB    := $(BUILD)/libflexcheck.a
EMU_HDRS   := $(wildcard $(EMU_DIR)/*.h $(EMU_DIR)/include/*.h $(EMUT_DIR)/*.h)
# No fp contraction: g++ must not fuse what the kernel author did not write as fmaf.
EMU_CXXFLAGS = -std=c++17 $(WARN) $(OPT) $(PIC) -ffp-contract=off
# The emulated kernels use the CPU's fma instruction when the build machine (x86-64) has one:
# without it every fmaf() a kernel writes is a call into libm that also pushes the kernel's
# values out of registers, and the fp32 paths spend much of their time there (kernel 1 dense
# fp32 in the bench: 110 -> 25 ms). fmaf is correctly rounded either way, so no result changes;
# a binary built so needs a CPU with FMA (emu.h checks at start-up). EMU_ISA= builds for any
# x86-64.
ifeq ($(origin EMU_ISA),undefined)
EMU_ISA := $(if $(and $(filter x86_64,$(shell uname -m)),$(shell grep -qw fma /proc/cpuinfo 2>/dev/null && echo y)),-mfma)
endif
EMU_CUFLAGS  = $(EMU_CXXFLAGS) $(EMU_ISA) -x c++ -include $(EMU_DIR)/emu.h -I$(EMU_DIR)/include
GPU_CU     := $(wildcard gpu/*.cu)
EMUT_CU    := $(wildcard $(EMUT_DIR)/*.cu)

GPU_HDRS   := $(wildcard gpu/*.h gpu/*.cuh)
NVCC_BIN   := $(or $(shell command -v $(NVCC) 2>/dev/null),$(wildcard $(CUDA_HOME)/bin/nvcc))

# The library gets the emu runtime, the emu build of every gpu/*.cu and gpu/*.c (the kernels'
# C side); with nvcc also the native build of every gpu/*.cu, FLEXCHECK_HAVE_CUDA, and libcudart
# (loading it needs no driver; the CUDA backend asks for a device at run time).
EXTRA_LIB_OBJS += $(BUILD)/obj/gpu/emu/emu_runtime.o $(BUILD)/obj/gpu/emu/emu_bench.o \
                  $(GPU_CU:%.cu=$(BUILD)/obj/%.emu.o) $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard gpu/*.c))
ifneq ($(NVCC_BIN),)
EXTRA_LIB_OBJS += $(patsubst %.cu,$(BUILD)/nvcc/%.o,$(GPU_CU))
CPPFLAGS += -DFLEXCHECK_HAVE_CUDA
LDLIBS += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart
endif
-include $(GPU_CU:%.cu=$(BUILD)/obj/%.emu.d)

$(BUILD)/obj/gpu/emu/%.o: $(EMU_DIR)/%.cc $(EMU_HDRS) $(DEFINES_STAMP) | $(EMU_STAMP)
	@mkdir -p $(@D)
	$(CXX) $(CPPFLAGS) $(EMU_CXXFLAGS) -c $< -o $@

$(BUILD)/obj/%.emu.o: %.cu $(EMU_HDRS) $(GPU_HDRS) $(DEFINES_STAMP) | $(EMU_STAMP)
	@mkdir -p $(@D)
	$(CXX) $(CPPFLAGS) $(EMU_CUFLAGS) -MMD -MP -c $< -o $@

# The toolkit's host half/bf16 code as a reference, when the toolkit is there.
EMU_TOOLKIT_INC := $(if $(wildcard $(CUDA_HOME)/include/cuda_fp16.h),-I$(CUDA_HOME)/include,-DEMUT_NO_TOOLKIT)
$(BUILD)/obj/tests/emu/emut_fp16_ref.o: $(EMUT_DIR)/emut_fp16_ref.cc $(EMU_HDRS) $(DEFINES_STAMP) \
                                        | $(EMU_STAMP)
	@mkdir -p $(@D)
	$(CXX) $(CPPFLAGS) $(EMU_CXXFLAGS) $(EMU_TOOLKIT_INC) -c $< -o $@

EMUT_OBJS := $(EMUT_CU:%.cu=$(BUILD)/obj/%.emu.o) $(BUILD)/obj/tests/emu/emut_check.o \
             $(BUILD)/obj/tests/emu/emut_fp16_ref.o

# ---- sanitizer builds: the same kernels, runtime and checks, in two instrumented variants ----
EMU_ASAN_DIR  := $(BUILD)/emu-asan
EMU_RACE_DIR  := $(BUILD)/emu-race
EMUT_ASAN_BIN := $(EMU_ASAN_DIR)/emut
EMUT_RACE_BIN := $(EMU_RACE_DIR)/emut
EMU_ASAN_FLAGS := -DEMU_ASAN -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
# -fsanitize=thread only to instrument the kernels' memory accesses; emu_race.cc implements
# the hooks and the TSan runtime is never linked.
EMU_RACE_FLAGS := -DEMU_RACE -fsanitize=thread --param=tsan-instrument-func-entry-exit=0

# -MMD: every header a kernel, runtime or check includes (gpu/*.cuh, masks/*.h, ...) rebuilds
# its instrumented object too.
-include $(shell find $(BUILD)/emu-asan $(BUILD)/emu-race -name '*.d' 2>/dev/null)
$(EMU_ASAN_DIR)/%.o: %.cu $(EMU_HDRS) $(DEFINES_STAMP) | $(EMU_STAMP)
	@mkdir -p $(@D)
	$(CXX) $(CPPFLAGS) $(EMU_CUFLAGS) $(EMU_ASAN_FLAGS) -MMD -MP -c $< -o $@
$(EMU_ASAN_DIR)/%.o: %.cc $(EMU_HDRS) $(DEFINES_STAMP) | $(EMU_STAMP)
	@mkdir -p $(@D)
	$(CXX) $(CPPFLAGS) $(EMU_CXXFLAGS) $(EMU_ASAN_FLAGS) -MMD -MP -c $< -o $@
$(EMU_ASAN_DIR)/%.o: %.c $(EMU_HDRS) $(DEFINES_STAMP) | $(EMU_STAMP)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(EMU_ASAN_FLAGS) -MMD -MP -c $< -o $@
$(EMUT_ASAN_BIN): $(addprefix $(EMU_ASAN_DIR)/,$(EMUT_CU:.cu=.o) gpu/emu/emu_runtime.o \
                  tests/emu/emut_check.o tests/emu/emut_main.o) $(BUILD)/obj/tests/emu/emut_fp16_ref.o
	$(CXX) -fsanitize=address,undefined -o $@ $^ -lboost_context -lpthread -lm

$(EMU_RACE_DIR)/%.o: %.cu $(EMU_HDRS) $(DEFINES_STAMP) | $(EMU_STAMP)
	@mkdir -p $(@D)
	$(CXX) $(CPPFLAGS) $(EMU_CUFLAGS) $(EMU_RACE_FLAGS) -MMD -MP -c $< -o $@
$(EMU_RACE_DIR)/%.o: %.cc $(EMU_HDRS) $(DEFINES_STAMP) | $(EMU_STAMP)
	@mkdir -p $(@D)
	$(CXX) $(CPPFLAGS) $(EMU_CXXFLAGS) -DEMU_RACE -MMD -MP -c $< -o $@
$(EMUT_RACE_BIN): $(addprefix $(EMU_RACE_DIR)/,$(EMUT_CU:.cu=.o) gpu/emu/emu_runtime.o gpu/emu/emu_race.o) \
                  $(BUILD)/obj/tests/emu/emut_check.o $(BUILD)/obj/tests/emu/emut_main.o \
                  $(BUILD)/obj/tests/emu/emut_fp16_ref.o
	$(CXX) -o $@ $^ -lboost_context -lpthread -lm

# ---- the Criterion suites ----
$(BUILD)/tests/test_emu: tests/test_emu.c $(EMUT_OBJS) $(EMU_LIB) $(EMUT_ASAN_BIN) $(EMUT_RACE_BIN) | $(EMU_STAMP)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -DEMUT_ASAN_BIN='"$(abspath $(EMUT_ASAN_BIN))"' \
	    -DEMUT_RACE_BIN='"$(abspath $(EMUT_RACE_BIN))"' -MMD -MP -o $@ $< $(EMUT_OBJS) $(EMU_LIB) $(CRITERION_LIBS) $(LDLIBS)

# ---- kernel 2's build variants (gpu/attn_v2_variants.txt) on the emu ----
# Each variant changes how kernel 2 runs, never what it computes, and the GPU run can time it
# beside the default (GPU_VARIANTS=all ci/gpu_bundle.sh, ci/gpu_check.sh); here each one's code paths run on the
# CPU, so a change that breaks one fails make test, not a GPU run later. A variant binary is the
# default library with its one member gpu/attn_launch.cu rebuilt with the variant's -D options
# (ar replaces the member of the same name); its native (nvcc) member stays the default's, so
# these binaries are for the emu only. Its quick gate with kernel 2 must write the default's
# rows.csv byte for byte.
V2_VARIANTS_FILE := gpu/attn_v2_variants.txt
HASH := \#
V2_VARIANTS := $(shell awk '!/^$(HASH)/ && NF { print $$1 }' $(V2_VARIANTS_FILE))
v2_variant_defs = $(shell awk '$$1 == "$(1)" { $$1 = ""; print }' $(V2_VARIANTS_FILE))
V2_VARIANT_DIR := $(BUILD)/emu-variants

-include $(wildcard $(V2_VARIANT_DIR)/*/*.d)
.SECONDARY: $(V2_VARIANTS:%=$(V2_VARIANT_DIR)/%/attn_launch.emu.o) # kept: make test reruns
$(V2_VARIANT_DIR)/%/attn_launch.emu.o: gpu/attn_launch.cu $(EMU_HDRS) $(GPU_HDRS) \
                                       $(V2_VARIANTS_FILE) $(DEFINES_STAMP) | $(EMU_STAMP)
	@mkdir -p $(@D)
	$(CXX) $(CPPFLAGS) $(call v2_variant_defs,$*) $(EMU_CUFLAGS) -MMD -MP -c $< -o $@

$(V2_VARIANT_DIR)/%/flexcheck: $(V2_VARIANT_DIR)/%/attn_launch.emu.o $(CLI_OBJS) $(EMU_LIB)
	cp $(EMU_LIB) $(@D)/libflexcheck.a && ar r $(@D)/libflexcheck.a $<
	$(CC) $(CFLAGS) -o $@ $(CLI_OBJS) $(@D)/libflexcheck.a $(LDLIBS)

# The emu backend only, the default build's included: on a machine with a GPU a variant
# binary's CUDA backend would be the default's code. A build with FC_DEFINES of its own skips
# the step (a variant's -D options could redefine them).
V2_GATE = OPENBLAS_NUM_THREADS=1 $(1) gate --quick --kernel 2 --backend emu --jobs 2 \
	          --report-dir $(2)/reports-quick > $(2)/gate.log 2>&1
.PHONY: gate-quick-variants
TEST_STEPS += gate-quick-variants
ifeq ($(strip $(FC_DEFINES)),)
gate-quick-variants: $(BIN) $(V2_VARIANTS:%=$(V2_VARIANT_DIR)/%/flexcheck)
	@mkdir -p $(V2_VARIANT_DIR)/default
	@$(call V2_GATE,$(BIN),$(V2_VARIANT_DIR)/default) || \
	    { echo "the default build's emu quick gate failed (see $(V2_VARIANT_DIR)/default/gate.log)"; exit 1; }
	@fail=0; for v in $(V2_VARIANTS); do \
	    d=$(V2_VARIANT_DIR)/$$v; \
	    if ! $(call V2_GATE,$$d/flexcheck,$$d); then \
	        echo "variant $$v: its quick gate failed (see $$d/gate.log)"; fail=1; \
	    elif ! cmp -s $(V2_VARIANT_DIR)/default/reports-quick/rows.csv \
	                  $$d/reports-quick/rows.csv; then \
	        echo "variant $$v: rows.csv differs from the default build's"; fail=1; \
	    else echo "variant $$v: quick gate rows identical to the default build's"; fi; \
	done; exit $$fail
else
gate-quick-variants:
	@echo "SKIP gate-quick-variants: FC_DEFINES is set ($(FC_DEFINES))"
endif

# ---- nvcc: compile-only resource report, and the native build of the self-tests ----
NVCC_ARCH := -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=[sm_90,compute_90]
NVCC_OBJS := $(patsubst %.cu,$(BUILD)/nvcc/%.o,$(GPU_CU) $(EMUT_CU))

.PHONY: emu-nvcc emu-sanitize emu-bench
TEST_STEPS += emu-nvcc emu-sanitize

ifneq ($(NVCC_BIN),)
# ptxas -v reports per kernel and architecture; the .res file keeps it for every later run.
$(BUILD)/nvcc/%.o: %.cu $(EMU_HDRS) $(GPU_HDRS) $(DEFINES_STAMP)
	@mkdir -p $(@D)
	@echo "$(NVCC_BIN) -c $< (sm_80, sm_90)"
	@$(NVCC_BIN) -std=c++17 $(CPPFLAGS) $(NVCC_ARCH) -Xcompiler -fPIC -Xptxas -v -c $< -o $@ 2> $@.log || { cat $@.log; exit 1; }
	@grep -E "Compiling entry|registers|spill" $@.log | sed -e "s/ptxas info *: //" | c++filt > $@.res

emu-nvcc: $(NVCC_OBJS)
	@echo "== nvcc resource usage (registers, spills) per kernel"
	@for f in $(NVCC_OBJS:=.res); do echo "-- $$f"; cat $$f; done

$(BUILD)/obj/tests/emu/emut_check.cuda.o: $(EMUT_DIR)/emut_check.c $(EMU_HDRS) $(DEFINES_STAMP) \
                                          | $(EMU_STAMP)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -DEMUT_CUDA -c $< -o $@

$(BUILD)/tests/test_emu_gpu: tests/test_emu_gpu.c $(patsubst %.cu,$(BUILD)/nvcc/%.o,$(EMUT_CU)) \
                             $(BUILD)/obj/tests/emu/emut_check.cuda.o $(BUILD)/obj/tests/emu/emut_fp16_ref.o | $(EMU_STAMP)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -DEMUT_CUDA -MMD -MP -o $@ $< $(filter %.o,$^) $(CRITERION_LIBS) $(LDLIBS)
else
emu-nvcc:
	@echo "SKIP emu-nvcc: nvcc not found (NVCC=$(NVCC), CUDA_HOME=$(CUDA_HOME)); no compile check, no resource report"

$(BUILD)/tests/test_emu_gpu: tests/test_emu_gpu.c | $(EMU_STAMP)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -DEMUT_NO_NVCC -MMD -MP -o $@ $< $(CRITERION_LIBS) $(LDLIBS)
endif

# Kernel 3's machine code (ci/kernel_sass.py): every instance free of spills, stack and local
# memory, holding HMMA, LDSM (plain and .trans), LDGSTS and its two barriers; the table it prints
# is the one committed under reports/. cuobjdump and nvdisasm: the toolkit's where it has them
# (Debian's nvcc install here has neither), else PyPI's nvidia-cuda-cuobjdump and
# nvidia-cuda-nvdisasm wheels, fetched once into $(BUILD)/cuda-tools; without either the step
# says so and skips. The wheels are the newest release (13.5 on 2026-12-07, which read this
# machine's nvcc 13.0 objects).
CUDA_TOOLS := $(BUILD)/cuda-tools
.PHONY: kernel-sass
TEST_STEPS += kernel-sass
ifneq ($(NVCC_BIN),)
kernel-sass: $(BUILD)/nvcc/gpu/attn_launch.o
	@tools=$$(dirname $(NVCC_BIN)); \
	if [ ! -x "$$tools/cuobjdump" ] || [ ! -x "$$tools/nvdisasm" ]; then \
	    tools=$$(ls -d $(CUDA_TOOLS)/nvidia/cu*/bin 2>/dev/null | head -1); \
	    if [ -z "$$tools" ]; then \
	        rm -rf $(CUDA_TOOLS) && mkdir -p $(CUDA_TOOLS)/wheels && \
	        timeout 300 $(PYTHON3) -m pip download -q --no-deps -d $(CUDA_TOOLS)/wheels \
	            nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm >$(CUDA_TOOLS)/pip.log 2>&1 && \
	        for w in $(CUDA_TOOLS)/wheels/*.whl; do $(PYTHON3) -m zipfile -e $$w $(CUDA_TOOLS); done; \
	        chmod +x $(CUDA_TOOLS)/nvidia/cu*/bin/* 2>/dev/null; \
	        tools=$$(ls -d $(CUDA_TOOLS)/nvidia/cu*/bin 2>/dev/null | head -1); \
	    fi; \
	fi; \
	if [ -z "$$tools" ] || [ ! -x "$$tools/cuobjdump" ] || [ ! -x "$$tools/nvdisasm" ]; then \
	    echo "SKIP kernel-sass: no cuobjdump/nvdisasm in the toolkit and PyPI's could not be fetched (see $(CUDA_TOOLS)/pip.log)"; \
	else \
	    echo "== kernel 3's SASS and resources (ci/kernel_sass.py, $$tools/cuobjdump)"; \
	    PATH=$$tools:$$PATH $(PYTHON3) ci/kernel_sass.py --obj $< --cuobjdump $$tools/cuobjdump \
	        > $(BUILD)/kernel-sass.md && tail -1 $(BUILD)/kernel-sass.md; \
	fi
else
kernel-sass:
	@echo "SKIP kernel-sass: nvcc not found; no SASS to check"
endif

emu-sanitize: $(EMUT_ASAN_BIN) $(EMUT_RACE_BIN)
	@echo "== emu ASan/UBSan build over the self-test kernels"
	@$(EMUT_ASAN_BIN) all
	@echo "== emu race-check build over the self-test kernels"
	@$(EMUT_RACE_BIN) all

$(BUILD)/emu/emu-bench: $(EMUT_DIR)/emut_bench.c $(EMUT_OBJS) $(EMU_LIB) | $(EMU_STAMP)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -o $@ $< $(EMUT_OBJS) $(EMU_LIB) $(LDLIBS)
emu-bench: $(BUILD)/emu/emu-bench
	$(BUILD)/emu/emu-bench
