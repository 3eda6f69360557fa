/*
 * test_emu_gpu.c - the emu self-test kernels built by nvcc and run natively, held to the same
 * checks as the emulation (tests/emu/emut_check.c with -DEMUT_CUDA). Every test skips,
 * saying why, when nvcc was missing at build time or no CUDA device is present.
 *
 *   make test   (gpu/module.mk links this against the nvcc objects and libcudart)
 */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>

#include <stdio.h>

#include "tests/emu/emut.h"

/* Skips are silent in Criterion's summary; say once, on stderr, why nothing ran. */
ReportHook(PRE_ALL)(struct criterion_test_set *set)
{
    (void)set;
#ifdef EMUT_NO_NVCC
    fprintf(stderr, "test_emu_gpu: SKIP all: nvcc was not found at build time\n");
#else
    char why[256] = "";
    if (EMUT(emut_device_count)(why, (int)sizeof why) <= 0)
        fprintf(stderr, "test_emu_gpu: SKIP all: no CUDA device (%s)\n", why);
#endif
}

#ifdef EMUT_NO_NVCC
Test(emu_gpu, primitive_matches_documented_meaning_on_the_gpu)
{
    cr_skip("nvcc was not found at build time: the native build of the self-test kernels does not exist");
}
#else
ParameterizedTestParameters(emu_gpu, primitive_matches_documented_meaning_on_the_gpu)
{
    static int idx[64];
    for (int i = 0; i < emut_nchecks && i < 64; i++)
        idx[i] = i;
    return cr_make_param_array(int, idx, (size_t)emut_nchecks);
}

ParameterizedTest(int *i, emu_gpu, primitive_matches_documented_meaning_on_the_gpu)
{
    char why[1024] = "";
    if (EMUT(emut_device_count)(why, (int)sizeof why) <= 0)
        cr_skip("%s: no CUDA device (%s)", emut_checks[*i].name, why);
    if (emut_checks[*i].emu_only)
        cr_skip("%s: emu only (undefined behaviour on a GPU)", emut_checks[*i].name);
    int bad = emut_checks[*i].fn(why, sizeof why);
    cr_assert(!bad, "%s: %s", emut_checks[*i].name, why);
}
#endif
