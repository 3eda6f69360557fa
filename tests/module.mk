# tests/module.mk - test-only builds (included by the top Makefile).
#
# The gate self-test (tests/test_gate.c) links deliberately broken kernels: gpu/attn_launch.cu
# compiled again for the emu backend with ATTN_MUTANT = 1..6 (see gpu/attn_v1.cuh), each in its
# own namespace with entry point gpu_attention_mutant<N>. They never enter the library.

MUTANTS := 1 2 3 4 5 6
MUTANT_OBJS := $(MUTANTS:%=$(BUILD)/mutants/attn_launch_m%.o)

$(BUILD)/mutants/attn_launch_m%.o: gpu/attn_launch.cu $(EMU_HDRS) $(GPU_HDRS) | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(CXX) $(CPPFLAGS) $(EMU_CUFLAGS) -DATTN_MUTANT=$* -c $< -o $@

$(BUILD)/tests/test_gate: tests/test_gate.c $(MUTANT_OBJS) $(LIB) | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -Itests -MMD -MP -o $@ $< $(MUTANT_OBJS) $(LIB) \
	    $(CRITERION_LIBS) $(LDLIBS)
