# flexcheck - correctness gate for flex-attention kernels.
#
#   make          build build/flexcheck (installs missing Debian packages first, via ci/)
#   make test     build and run every test suite (Criterion), single-threaded OpenBLAS
#   make gate     run the gate on the default backend and write the report under build/
#   make bench    run the benchmarks (ratios, never pass/fail)
#   make wheel    the Python package as a manylinux wheel with the command inside (build/wheel/)
#   make clean    remove build/
#
# Layout: every .c directly under base/ masks/ ref/ judge/ diag/ fixtures/ reports/ check/ ci/ ci/checks/ api/ goes into build/libflexcheck.a,
# cli/*.c into the flexcheck binary, tests/test_*.c each into its own Criterion binary. The
# public shared library build/libflexcheck.so (-> libflexcheck.so.1 -> libflexcheck.so.1.<API>.0)
# holds only LEAN_OBJS, the objects that judge a given output (see its rule). A module with
# rules of its own (gpu/: C++ and CUDA builds) adds them in its module.mk.
# Warnings are errors when CI=true.

# No built-in rules: with them make tries to "remake" each included .d file through the
# link rule `%: %.o`, and build/mutants/attn_launch_m1.d.o matches the mutant pattern rule.
MAKEFLAGS += --no-builtin-rules
.SUFFIXES:

BUILD    ?= build
CC       := gcc
CXX      := g++
NVCC     ?= nvcc
CUDA_HOME ?= /usr/local/cuda

# pkg-config is asked once, lazily, after the installer has run (recursive variables that
# replace themselves on first use).
# jansson: the JSON parser that reads rows.json back (flexcheck report merge); sleef: the
# vectorised expf of the fp32 reference (ref/ref_vec.c).
PKG_DEPS := openblas hdf5 criterion jansson sleef
PKG_CFLAGS = $(eval PKG_CFLAGS := $$(shell pkg-config --cflags $(PKG_DEPS)))$(PKG_CFLAGS)
PKG_LIBS = $(eval PKG_LIBS := $$(shell pkg-config --libs openblas hdf5 jansson sleef))$(PKG_LIBS)
CRITERION_LIBS = $(eval CRITERION_LIBS := $$(shell pkg-config --libs criterion))$(CRITERION_LIBS)

WARN     := -Wall -Wextra -Wshadow -Wno-unused-parameter
ifeq ($(CI),true)
WARN     += -Werror
endif
OPT      ?= -O2 -g
# One include root: every include names its module (#include "masks/mask.h"), so each include
# line shows its arrow (base <- masks <- ref, gpu, reports <- judge <- diag <- fixtures <- check,
# ci <- cli).
# FC_DEFINES: extra -D options for a variant build of the same source (its own BUILD folder),
# e.g. kernel 2 with 128-row query tiles: make BUILD=build-bq128 FC_DEFINES=-DV2_BQ_MAX=128
# (kernel 2's others: V2_STAGES=2 double-buffers K/V, V2_MIN_BLOCKS=3 asks ptxas for 3 blocks
# an SM, V2_WARP_ROWS=32 gives each warp two m16 tiles, V2_SMEM_MAX raises the 99 KiB shared
# memory cap for builds that will run on A100/H100-class devices only: sm_86/89 run the sm_80
# code with 99 KiB and would refuse the launch; gpu/attn_v2.cuh). FC_DEFINES="-DA=1 -DB=2" for
# several. Each variant wants its own BUILD folder (ci/gpu_bundle.sh keeps one a variant); a
# folder built again with other FC_DEFINES recompiles everything: every compile rule depends
# on $(DEFINES_STAMP), a file holding them that is rewritten only when they change.
FC_DEFINES ?=
CPPFLAGS := -I. -D_POSIX_C_SOURCE=200809L $(FC_DEFINES)
DEFINES_STAMP := $(BUILD)/fc-defines
# Position-independent, symbols hidden unless marked: an object may also go into
# build/libflexcheck.so (LEAN_OBJS), which exports the public API alone (include/flexcheck.h).
PIC      := -fPIC -fvisibility=hidden
CFLAGS   = -std=c11 $(WARN) $(OPT) $(PIC) $(PKG_CFLAGS)
CXXFLAGS = -std=c++17 $(WARN) $(OPT) $(PIC) $(PKG_CFLAGS)
# hdf5's .pc names no high-level library; its -L directory holds libhdf5_hl.
LDLIBS   = -lhdf5_hl $(PKG_LIBS) -lboost_context -lstdc++ -lpthread -lm

LIB_SRCS  := $(wildcard base/*.c masks/*.c ref/*.c judge/*.c diag/*.c fixtures/*.c reports/*.c check/*.c ci/*.c ci/checks/*.c api/*.c)
CLI_SRCS  := $(wildcard cli/*.c)
TEST_SRCS := $(wildcard tests/test_*.c)

LIB_OBJS  := $(LIB_SRCS:%.c=$(BUILD)/obj/%.o)
CLI_OBJS  := $(CLI_SRCS:%.c=$(BUILD)/obj/%.o)
TEST_BINS := $(TEST_SRCS:tests/%.c=$(BUILD)/tests/%)

LIB := $(BUILD)/libflexcheck.a
# The public library, named as a Debian library is: the real file libflexcheck.so.1.<API>.0
# (<API>: FLEXCHECK_API_VERSION), its SONAME libflexcheck.so.1 as a link to it (what a program
# linked against it loads), and libflexcheck.so, the link a linker (-lflexcheck) and Python's
# loader (python/flexcheck/judging.py, python/setup.py, which copies the file it points to) use.
FC_API := $(shell sed -n 's/^\#define FLEXCHECK_API_VERSION //p' include/flexcheck.h)
SONAME := libflexcheck.so.1
SHLIB_REAL := $(BUILD)/$(SONAME).$(FC_API).0
SHLIB := $(BUILD)/libflexcheck.so
BIN := $(BUILD)/flexcheck
DEPS_STAMP := $(BUILD)/.deps-installed

.PHONY: all test gate bench clean deps
all: $(BIN) $(SHLIB)

# Modules append C++ objects to EXTRA_LIB_OBJS and phony test steps to TEST_STEPS. Included
# after `all` (the default goal) and the names above, which their rules may use.
EXTRA_LIB_OBJS :=
TEST_STEPS :=
-include $(wildcard */module.mk)

# The installer is idempotent; the stamp only saves re-running dpkg-query on every make.
$(DEPS_STAMP): ci/install-deps.sh
	@sh ci/install-deps.sh
	@mkdir -p $(@D) && touch $@
deps: $(DEPS_STAMP)

# The commit the binary is built from, compiled into base/version.c alone (every report records
# it). The stamp is rewritten only when the commit changes, so a new commit rebuilds that one
# object and relinks, and an unchanged one rebuilds nothing; nothing else embeds it, so the
# build stays reproducible otherwise. "unknown" outside a git checkout, or when the checkout
# found is another project's (its top is not this folder).
FC_GIT_TOP := $(shell git -C $(CURDIR) rev-parse --show-toplevel 2>/dev/null)
FC_COMMIT := $(or $(if $(filter $(CURDIR),$(FC_GIT_TOP)),$(shell git -C $(CURDIR) rev-parse --short HEAD 2>/dev/null)),unknown)
COMMIT_STAMP := $(BUILD)/commit
.PHONY: FORCE
$(COMMIT_STAMP): FORCE
	@mkdir -p $(@D)
	@echo '$(FC_COMMIT)' | cmp -s - $@ 2>/dev/null || echo '$(FC_COMMIT)' > $@
# The stamp holds the code-generation flags too (PIC): objects built without them cannot go into
# the shared library, so a change rebuilds everything.
$(DEFINES_STAMP): FORCE
	@mkdir -p $(@D)
	@echo '$(FC_DEFINES) $(PIC)' | cmp -s - $@ 2>/dev/null || echo '$(FC_DEFINES) $(PIC)' > $@
$(BUILD)/obj/base/version.o: $(COMMIT_STAMP)
$(BUILD)/obj/base/version.o: CPPFLAGS += -DFLEXCHECK_COMMIT='"$(FC_COMMIT)"'

$(BUILD)/obj/%.o: %.c $(DEFINES_STAMP) | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c $< -o $@

$(LIB): $(LIB_OBJS) $(EXTRA_LIB_OBJS)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

$(BIN): $(CLI_OBJS) $(LIB)
	$(CC) $(CFLAGS) -o $@ $(CLI_OBJS) $(LIB) $(LDLIBS)

# The shared library of the public API (include/flexcheck.h, for Python's ctypes and any C
# caller), lean: it judges the outputs it is given (the float64 oracle, the same-precision
# baseline, the gates, the diagnosis) and holds only the objects that needs, LEAN_OBJS below, so
# it links nothing but libc, libm, OpenBLAS and SLEEF: no HDF5 (file reading stays in the command
# and the static library), no kernels (the emu, Boost.Context, libstdc++, the CUDA runtime), no
# Jansson. Loading it runs no initialiser of ours (the emu's FMA check lives in the kernels'
# objects, which it does not hold). -z defs: an object here that comes to call outside the list
# fails this link, naming the symbol; ci/check_lean.sh (make test) holds the result to its
# exports (flexcheck_* alone, the version script) and its libraries. Versioned twice: by SONAME
# (libflexcheck.so.1: an ABI break would be .so.2) and by symbol version nodes, one per API
# version (include/flexcheck.map; flexcheck_api_version() says which the loaded one has).
LEAN_SRCS := $(addprefix base/,cancel.c cpu.c fc.c guard.c lowp.c progress.c version.c) \
             $(addprefix masks/,bmask.c bmask_check.c params.c problem.c seq.c terms.c xterms.c) \
             $(addprefix ref/,ref.c ref_f32.c ref_f64.c ref_row.c ref_vec.c) \
             $(addprefix reports/,rep_row.c tol.c) \
             $(addprefix judge/,judge.c pround.c) \
             $(wildcard diag/*.c) \
             $(addprefix fixtures/,fix_budget.c fix_err.c fix_paged.c fix_rng.c fix_sample.c) \
             check/verdict.c $(wildcard api/*.c)
LEAN_OBJS := $(LEAN_SRCS:%.c=$(BUILD)/obj/%.o)
LEAN_LIBS = $(eval LEAN_LIBS := $$(shell pkg-config --libs openblas sleef))$(LEAN_LIBS) -lm
$(SHLIB_REAL): $(LEAN_OBJS) include/flexcheck.map
	$(CC) -shared -o $@ -Wl,-soname,$(SONAME) -Wl,--version-script=include/flexcheck.map \
	    $(LEAN_OBJS) -Wl,-z,defs -Wl,--as-needed $(LEAN_LIBS)
$(BUILD)/$(SONAME): $(SHLIB_REAL)
	ln -sf $(notdir $<) $@
$(SHLIB): $(BUILD)/$(SONAME)
	ln -sf $(notdir $<) $@

$(BUILD)/tests/%: tests/%.c $(LIB) $(DEFINES_STAMP) | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -o $@ $< $(LIB) $(CRITERION_LIBS) $(LDLIBS)

# Tests run with single-threaded OpenBLAS so results never depend on the thread count.
# Each suite runs even if an earlier one failed; the target fails if any did.
test: $(BIN) $(SHLIB) $(TEST_BINS) $(TEST_STEPS)
	@fail=0; for t in $(TEST_BINS); do \
	    echo "== $$t"; \
	    OPENBLAS_NUM_THREADS=1 FLEXCHECK_BIN=$(BIN) $$t --jobs 2 || fail=1; \
	done; \
	if [ $$fail -ne 0 ]; then echo "make test: FAILED"; exit 1; fi; echo "make test: all suites passed"

GATE_JOBS ?= 2
gate: $(BIN)
	OPENBLAS_NUM_THREADS=1 $(BIN) gate --jobs $(GATE_JOBS) --report-dir $(BUILD)/reports

bench: $(BIN)
	$(BIN) bench

clean:
	rm -rf $(BUILD)

-include $(LIB_OBJS:.o=.d) $(CLI_OBJS:.o=.d) $(TEST_BINS:=.d)
