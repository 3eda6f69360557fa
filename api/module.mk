# api/module.mk - the public C API's test suites (tests/test_api.c, tests/test_api_param.c),
# linked against the shared library as a caller links it (not the static one every other suite
# uses), test_api again under ASan/UBSan against the sanitized static library (wrong counts must
# never be read past); and lean-lib, the shared library's exports and dependencies held to
# include/flexcheck.h's promise (ci/check_lean.py).
API_TESTS := $(BUILD)/tests/test_api $(BUILD)/tests/test_api_param
API_ASAN_DIR := $(BUILD)/asan

# OpenBLAS too: the suite sets and reads the process-wide thread count a judge must not clobber.
API_TEST_BLAS = $(shell pkg-config --libs openblas)
$(API_TESTS): $(BUILD)/tests/%: tests/%.c include/flexcheck.h $(SHLIB) | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -o $@ $< -L$(BUILD) -Wl,-rpath,'$$ORIGIN/..' \
	    -l:libflexcheck.so $(BUILD)/obj/base/lowp.o $(CRITERION_LIBS) $(API_TEST_BLAS) \
	    -lpthread -lm

# (make test's loop runs $(API_TESTS) with every other suite: this rule, explicit, is what
# builds them.)

# nm -D, readelf -d, ldd and the initialisers of the built library: only flexcheck_* (and the
# version nodes) exported, every call of include/flexcheck.h among them, SONAME
# libflexcheck.so.1, no library but libc, libm, OpenBLAS (with what Debian's pulls) and SLEEF.
.PHONY: lean-lib
TEST_STEPS += lean-lib
lean-lib: $(SHLIB) | $(DEPS_STAMP)
	$(PYTHON3) ci/check_lean.py $(SHLIB) include/flexcheck.h
.PHONY: api-asan
TEST_STEPS += api-asan

# After fixtures-asan: both build into $(API_ASAN_DIR), one recursive make at a time.
api-asan: | $(DEPS_STAMP) fixtures-asan
	$(MAKE) --no-print-directory CI= BUILD=$(API_ASAN_DIR) OPT="-O1 -g $(SAN_FLAGS)" \
	    $(API_ASAN_DIR)/tests/test_api.static
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 OPENBLAS_NUM_THREADS=1 \
	    $(API_ASAN_DIR)/tests/test_api.static --jobs 2 > $(API_ASAN_DIR)/test_api.log 2>&1; \
	st=$$?; cat $(API_ASAN_DIR)/test_api.log; \
	if grep -qE "Sanitizer|runtime error" $(API_ASAN_DIR)/test_api.log; then \
	    echo "api-asan: sanitizer report above" >&2; exit 1; fi; exit $$st

# The same suite against the static library (what the sanitized build links).
$(BUILD)/tests/test_api.static: tests/test_api.c include/flexcheck.h $(LIB) | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -o $@ $< $(LIB) $(CRITERION_LIBS) $(LDLIBS)
