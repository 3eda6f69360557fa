/*
 * test_emu.c - the emu backend (gpu/emu/): every primitive against its documented meaning
 * (tests/emu/emut_check.c, run on the emulated kernels of tests/emu/), and the
 * sanitizer builds catching planted bugs, each run as a child process so this suite sees the
 * failure: ASan/UBSan on out-of-bounds writes, the race checker on a missing barrier.
 *
 *   make BUILD=build test   (gpu/module.mk builds this suite with its kernels and children)
 */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "tests/emu/emut.h"

ParameterizedTestParameters(emu, primitive_matches_documented_meaning)
{
    static int idx[64];
    for (int i = 0; i < emut_nchecks && i < 64; i++)
        idx[i] = i;
    return cr_make_param_array(int, idx, (size_t)emut_nchecks);
}

ParameterizedTest(int *i, emu, primitive_matches_documented_meaning)
{
    char why[1024] = "";
    int bad = emut_checks[*i].fn(why, sizeof why);
    cr_assert(!bad, "%s: %s", emut_checks[*i].name, why);
}

/* Runs `bin planted bug` and returns its exit status; its stdout+stderr go to out. */
static int run_child(const char *bin, const char *bug, char *out, size_t n)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s' planted %s 2>&1", bin, bug);
    FILE *p = popen(cmd, "r");
    cr_assert(p, "cannot run %s", cmd);
    size_t len = fread(out, 1, n - 1, p);
    out[len] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* The child must fail, print `what`, and name the planted line(s) of emut_planted.cu. */
static void expect_caught(const char *bin, const char *bug, const char *what1, const char *what2, const char *line1,
                          const char *line2)
{
    static char out[1 << 16];
    int st = run_child(bin, bug, out, sizeof out);
    cr_assert(st != 0, "%s: the %s build let the bug through (exit 0):\n%s", bug, bin, out);
    cr_assert(strstr(out, what1) || (what2 && strstr(out, what2)), "%s: no \"%s\" report:\n%s", bug, what1, out);
    const char *lines[2] = {line1, line2};
    for (int k = 0; k < 2; k++) {
        if (!lines[k])
            continue;
        char at[128];
        int ln = emut_planted_line_emu(lines[k]);
        cr_assert(ln > 0, "%s: marker %s not found in emut_planted.cu", bug, lines[k]);
        snprintf(at, sizeof at, "emut_planted.cu:%d", ln);
        cr_assert(strstr(out, at), "%s: report does not name %s (%s):\n%s", bug, at, lines[k], out);
    }
}

Test(emu_asan, catches_out_of_bounds_global_write)
{
    expect_caught(EMUT_ASAN_BIN, "oob_global", "AddressSanitizer: heap-buffer-overflow", NULL, "oob_global", NULL);
}

Test(emu_asan, catches_out_of_bounds_dynamic_shared_write)
{
    expect_caught(EMUT_ASAN_BIN, "oob_dynamic_shared", "AddressSanitizer: heap-buffer-overflow", NULL,
                  "oob_dynamic_shared", NULL);
}

Test(emu_asan, catches_out_of_bounds_static_shared_write)
{
    expect_caught(EMUT_ASAN_BIN, "oob_static_shared", "runtime error: index 64 out of bounds",
                  "AddressSanitizer: global-buffer-overflow", "oob_static_shared", NULL);
}

Test(emu_race, catches_missing_syncthreads)
{
    expect_caught(EMUT_RACE_BIN, "race_block", "emu race", NULL, "race_block_write", "race_block_read");
}

Test(emu_race, catches_missing_syncwarp)
{
    expect_caught(EMUT_RACE_BIN, "race_warp", "emu race", NULL, "race_warp_write", "race_warp_read");
}

Test(emu_race, catches_missing_syncwarp_before_a_warp_wide_instruction)
{
    expect_caught(EMUT_RACE_BIN, "race_ldmatrix", "emu race", NULL, "race_ldmatrix_write", "race_ldmatrix_read");
}

Test(emu_sanitizers, pass_the_same_kernels_when_correct)
{
    static char out[1 << 16];
    const char *bins[2] = {EMUT_ASAN_BIN, EMUT_RACE_BIN};
    for (int k = 0; k < 2; k++) {
        int st = run_child(bins[k], "clean", out, sizeof out);
        cr_assert(st == 0 && !strstr(out, "emu race") && !strstr(out, "Sanitizer"), "%s reported the correct kernels:\n%s",
                  bins[k], out);
    }
}
