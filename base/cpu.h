/*
 * cpu.h - the x86-64 instruction-set extensions this build's C code was compiled to assume
 * (its -m / -march flags, read from the compiler's predefined macros), and what the CPU it
 * runs on has, so that a CPU without what the code needs is an error returned by the first call
 * (the public library's calls, include/flexcheck.h) rather than an illegal instruction, and so
 * that code choosing a vector path at run time (ref/ref_vec.c) asks one place.
 *
 * The default build assumes baseline x86-64 alone (no -m flags: fc_cpu_required() is 0), so on
 * any x86-64 CPU the check passes and ref_vec.c takes its portable path where AVX2 or FMA is
 * missing. The check matters for a build with flags of its own (make OPT="-O2 -march=native").
 *
 * A test hook, read from the environment at every call (so a test forces it in its own
 * process): FLEXCHECK_TEST_CPU_HIDE=avx2,fma makes those features missing from this CPU as
 * flexcheck sees it, FLEXCHECK_TEST_CPU_REQUIRE=avx2 adds them to what the build assumes. The
 * names are the table's; an unknown one is refused by fc_cpu_check, naming it.
 */
#ifndef FLEXCHECK_CPU_H
#define FLEXCHECK_CPU_H

#include "base/fc.h"

/* One bit a feature (the table in cpu.c names them as __builtin_cpu_supports does: "sse3",
 * "ssse3", "sse4.1", "sse4.2", "popcnt", "avx", "avx2", "fma", "bmi", "bmi2", "avx512f");
 * the two ref_vec.c asks for: */
#define FC_CPU_AVX2 (1u << 6)
#define FC_CPU_FMA (1u << 7)

/* The features this build's code assumes (the compiler's macros; with the test hook's). */
unsigned fc_cpu_required(void);
/* The features this CPU has, less those the test hook hides; 0 off x86-64. */
unsigned fc_cpu_have(void);
/* 1 iff this CPU has every feature in mask (fc_cpu_have). */
int fc_cpu_has(unsigned mask);
/* FC_OK when this CPU has every feature the build assumes; else FC_EUNSUP and a message naming
 * the missing ones and the way out (a build without those flags). FC_EINVAL for a test hook
 * naming a feature the table does not know. */
fc_status fc_cpu_check(fc_err *err);

#endif
