/*
 * cpu.c - what this build's code assumes of the CPU, what the CPU has, and the test hook that
 * forces either (cpu.h). GCC's and clang's predefined macros say what the compiler was allowed
 * to emit for this file; every object of the public library is compiled with the same flags
 * (the Makefile's one C rule), so this file's answer is theirs. This file itself must run on
 * any x86-64 (it decides whether the rest may run), hence its functions' baseline target.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define FC_CPU_X86 1
/* GCC's target attribute: this file's code stays baseline x86-64 under any -march. */
#define BASELINE __attribute__((target("arch=x86-64")))
#else
#define BASELINE
#endif

typedef struct feature {
    const char *name;
    unsigned bit;
} feature;

/* Bit i is table[i]; names as __builtin_cpu_supports spells them (those GCC and clang 14 both
 * know: clang's has no f16c, so a build with -mf16c alone is not told apart). */
static const feature table[] = {
    {"sse3", 1u << 0},  {"ssse3", 1u << 1}, {"sse4.1", 1u << 2}, {"sse4.2", 1u << 3},
    {"popcnt", 1u << 4}, {"avx", 1u << 5},   {"avx2", FC_CPU_AVX2}, {"fma", FC_CPU_FMA},
    {"bmi", 1u << 8},   {"bmi2", 1u << 9},  {"avx512f", 1u << 10},
};
#define NFEATURES (sizeof table / sizeof table[0])

/* What the compiler was told it may use here (and so in every object built with these flags). */
static const unsigned compiled = 0
#ifdef __SSE3__
    | 1u << 0
#endif
#ifdef __SSSE3__
    | 1u << 1
#endif
#ifdef __SSE4_1__
    | 1u << 2
#endif
#ifdef __SSE4_2__
    | 1u << 3
#endif
#ifdef __POPCNT__
    | 1u << 4
#endif
#ifdef __AVX__
    | 1u << 5
#endif
#ifdef __AVX2__
    | FC_CPU_AVX2
#endif
#ifdef __FMA__
    | FC_CPU_FMA
#endif
#ifdef __BMI__
    | 1u << 8
#endif
#ifdef __BMI2__
    | 1u << 9
#endif
#ifdef __AVX512F__
    | 1u << 10
#endif
    ;

/* The features a comma-separated list names (env var `var`; unset or empty: none); *bad the
 * first unknown name (NULL when all are known), copied into bad_buf. */
BASELINE static unsigned listed(const char *var, const char **bad, char *bad_buf, size_t cap)
{
    const char *s = getenv(var);
    unsigned m = 0;
    *bad = NULL;
    while (s && *s) {
        size_t n = strcspn(s, ",");
        size_t i = 0;
        while (i < NFEATURES && !(strlen(table[i].name) == n && !strncmp(table[i].name, s, n)))
            i++;
        if (i < NFEATURES) {
            m |= table[i].bit;
        } else if (n && !*bad) {
            snprintf(bad_buf, cap, "%.*s", (int)(n < 64 ? n : 64), s);
            *bad = bad_buf;
        }
        s += n + (s[n] == ',');
    }
    return m;
}

BASELINE static unsigned hook(const char *var)
{
    const char *bad;
    char buf[80];
    return listed(var, &bad, buf, sizeof buf);
}

BASELINE unsigned fc_cpu_required(void)
{
    return compiled | hook("FLEXCHECK_TEST_CPU_REQUIRE");
}

BASELINE unsigned fc_cpu_have(void)
{
    unsigned have = 0;
#ifdef FC_CPU_X86
    __builtin_cpu_init(); /* may run before libgcc's own constructor has */
    /* __builtin_cpu_supports takes a literal: the table's names once more, bit for bit */
    have = (__builtin_cpu_supports("sse3") ? 1u << 0 : 0) |
           (__builtin_cpu_supports("ssse3") ? 1u << 1 : 0) |
           (__builtin_cpu_supports("sse4.1") ? 1u << 2 : 0) |
           (__builtin_cpu_supports("sse4.2") ? 1u << 3 : 0) |
           (__builtin_cpu_supports("popcnt") ? 1u << 4 : 0) |
           (__builtin_cpu_supports("avx") ? 1u << 5 : 0) |
           (__builtin_cpu_supports("avx2") ? FC_CPU_AVX2 : 0) |
           (__builtin_cpu_supports("fma") ? FC_CPU_FMA : 0) |
           (__builtin_cpu_supports("bmi") ? 1u << 8 : 0) |
           (__builtin_cpu_supports("bmi2") ? 1u << 9 : 0) |
           (__builtin_cpu_supports("avx512f") ? 1u << 10 : 0);
#endif
    return have & ~hook("FLEXCHECK_TEST_CPU_HIDE");
}

BASELINE int fc_cpu_has(unsigned mask)
{
    return (fc_cpu_have() & mask) == mask;
}

BASELINE fc_status fc_cpu_check(fc_err *err)
{
    static const char *const vars[2] = {"FLEXCHECK_TEST_CPU_HIDE", "FLEXCHECK_TEST_CPU_REQUIRE"};
    for (int i = 0; i < 2; i++) {
        const char *bad;
        char buf[80];
        listed(vars[i], &bad, buf, sizeof buf);
        if (bad)
            return fc_errf(err, FC_EINVAL, "%s: unknown CPU feature '%s' (the test hook knows "
                           "sse3, ssse3, sse4.1, sse4.2, popcnt, avx, avx2, fma, bmi, bmi2, "
                           "avx512f)", vars[i], fc_esc(buf).s);
    }
    unsigned missing = fc_cpu_required() & ~fc_cpu_have();
    if (!missing)
        return FC_OK;
    char names[128] = "";
    size_t n = 0;
    for (size_t i = 0; i < NFEATURES && n < sizeof names; i++)
        if (missing & table[i].bit)
            n += (size_t)snprintf(names + n, sizeof names - n, "%s%s", n ? ", " : "",
                                  table[i].name);
    return fc_errf(err, FC_EUNSUP, "this CPU lacks %s, which this build of flexcheck was compiled "
                   "to use (its -m or -march flags): rebuild it without them (the default build "
                   "runs on any x86-64)", names);
}
