/*
 * test_cpu.c - what the public library does on a CPU without the instructions it could use or
 * was built to use (base/cpu.h), forced through the test hook (FLEXCHECK_TEST_CPU_HIDE /
 * FLEXCHECK_TEST_CPU_REQUIRE; Criterion runs each test in a process of its own, so the hook
 * set in one test is gone in the next):
 *   - the default build needs nothing past baseline x86-64: with AVX2 and FMA hidden the fp32
 *     reference takes its portable path and flexcheck_judge still gives the verdict it gives
 *     with them (outcome, every gate, the findings; the float64 oracle's error bitwise);
 *   - a CPU without what a build assumes is FLEXCHECK_EUNSUP from the first call on a problem,
 *     naming what is missing, and the process goes on;
 *   - a hook naming no feature is refused, named.
 * The outputs judged are the float64 oracle's for window W and W + 1, rounded to float16: the
 * test compares two paths of flexcheck with each other, never with a value of its own.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu.h"
#include "base/lowp.h"
#include "include/flexcheck.h"
#include "ref/ref.h"
#include "ref/ref_internal.h"
#include "tests/test_rng.h"

enum { HQ = 4, HKV = 2, D = 16, LQ = 64, LK = 64, W = 16 };
#define NQ (HQ * LQ * D)
#define NK (HKV * LK * D)

typedef struct inputs {
    float q[NQ], k[NK], v[NK];
    float out[NQ], lse[HQ * LQ];
} inputs;

/* Float16 inputs from seed, and out / lse: the float64 oracle of the causal window w,
 * rounded to float16 (lse kept in float32). */
static void make(inputs *t, uint64_t seed, int32_t w)
{
    float *x[3] = {t->q, t->k, t->v};
    size_t n[3] = {NQ, NK, NK};
    for (int a = 0; a < 3; a++)
        for (size_t i = 0; i < n[a]; i++)
            x[a][i] = fc_round((float)((double)(rng_next(&seed) >> 11) * 0x1.0p-52 - 1.0), FC_F16);
    attn_problem p = {0};
    fc_err err;
    cr_assert_eq(seq_init_dense(&p.seq, 1, LQ, LK, &err), FC_OK, "%s", err.msg);
    p.hq = HQ;
    p.hkv = HKV;
    p.d = p.dv = D;
    p.scale = 1.0 / sqrt((double)D);
    p.mask = (mask_params){.causal = 1, .sliding_window = w};
    double *o = malloc(sizeof(double) * NQ), *l = malloc(sizeof(double) * HQ * LQ);
    cr_assert(o && l);
    cr_assert_eq(ref_attention_f64(&p, t->q, t->k, t->v, o, l, &err), FC_OK, "%s", err.msg);
    for (size_t i = 0; i < NQ; i++)
        t->out[i] = fc_round((float)o[i], FC_F16);
    for (size_t i = 0; i < HQ * LQ; i++)
        t->lse[i] = (float)l[i];
    free(o);
    free(l);
    attn_problem_free(&p);
}

/* p (a new problem when NULL) set to the test's shape, float16, causal window W. */
static flexcheck_problem *problem(flexcheck_problem *p)
{
    if (!p)
        p = flexcheck_problem_new();
    cr_assert(p);
    cr_assert_eq(flexcheck_problem_set_shape(p, 1, HQ, HKV, LQ, LK, D, D), FLEXCHECK_OK, "%s",
                 flexcheck_problem_errmsg(p));
    cr_assert_eq(flexcheck_problem_set_dtype(p, "float16"), FLEXCHECK_OK);
    cr_assert_eq(flexcheck_problem_set_mask(p, 1, W, 0), FLEXCHECK_OK);
    return p;
}

static flexcheck_status judge(flexcheck_problem *p, const inputs *t, flexcheck_verdict **v)
{
    return flexcheck_judge(p, t->q, NQ, t->k, NK, t->v, NK, t->out, NQ, t->lse, HQ * LQ, v);
}

/* Two verdicts on the same output: the same outcome, gates, reasons' gates and findings, and
 * the oracle's error (float64, the same on both paths) bit for bit. */
static void same_verdict(const flexcheck_verdict *a, const flexcheck_verdict *b)
{
    cr_assert_eq(flexcheck_verdict_outcome(a), flexcheck_verdict_outcome(b));
    for (int g = 0; g < FLEXCHECK_NGATES; g++) {
        const char *name;
        cr_assert_eq(flexcheck_verdict_gate(a, g, &name, NULL, NULL),
                     flexcheck_verdict_gate(b, g, NULL, NULL, NULL), "gate %s", name);
    }
    cr_assert_eq(flexcheck_verdict_nfindings(a), flexcheck_verdict_nfindings(b));
    for (size_t i = 0; i < flexcheck_verdict_nfindings(a); i++) {
        size_t ra, rb;
        cr_assert_str_eq(flexcheck_verdict_finding(a, i, &ra),
                         flexcheck_verdict_finding(b, i, &rb));
        cr_assert_eq(ra, rb);
    }
    double ea = flexcheck_verdict_metric(a, "max_err"), eb = flexcheck_verdict_metric(b, "max_err");
    cr_assert(memcmp(&ea, &eb, sizeof ea) == 0, "max_err %.17g vs %.17g", ea, eb);
    cr_log_info("e_lp_max: %.9g (vector) vs %.9g (portable)",
                flexcheck_verdict_metric(a, "e_lp_max"), flexcheck_verdict_metric(b, "e_lp_max"));
}

Test(cpu, this_cpu_runs_the_default_build)
{
    fc_err err;
    cr_assert_eq(fc_cpu_check(&err), FC_OK, "%s", err.msg);
    cr_log_info("required 0x%x, have 0x%x", fc_cpu_required(), fc_cpu_have());
}

Test(cpu, hiding_avx2_takes_the_portable_path)
{
    const char *here = ref_f32_exp_name();
    setenv("FLEXCHECK_TEST_CPU_HIDE", "avx2,fma", 1);
    cr_assert_str_eq(ref_f32_exp_name(), ref_vec_ops_portable()->name);
    cr_assert(!fc_cpu_has(FC_CPU_AVX2));
    unsetenv("FLEXCHECK_TEST_CPU_HIDE");
    cr_assert_str_eq(ref_f32_exp_name(), here);
    if (!fc_cpu_has(FC_CPU_AVX2 | FC_CPU_FMA))
        cr_log_warn("this CPU has no AVX2/FMA: both paths were the portable one");
    else
        cr_assert_str_neq(here, ref_vec_ops_portable()->name);
}

Test(cpu, without_avx2_the_verdict_is_the_vector_paths)
{
    static inputs right, wide;
    make(&right, 7, W);
    make(&wide, 7, W + 1); /* a window one too wide: fails, the diagnosis names W+1 */
    const inputs *outs[2] = {&right, &wide};
    for (int o = 0; o < 2; o++) {
        flexcheck_verdict *vec, *port;
        flexcheck_problem *p = problem(NULL);
        unsetenv("FLEXCHECK_TEST_CPU_HIDE");
        cr_assert_eq(judge(p, outs[o], &vec), FLEXCHECK_OK, "%s", flexcheck_problem_errmsg(p));
        setenv("FLEXCHECK_TEST_CPU_HIDE", "avx2,fma", 1);
        cr_assert_eq(judge(p, outs[o], &port), FLEXCHECK_OK, "%s", flexcheck_problem_errmsg(p));
        unsetenv("FLEXCHECK_TEST_CPU_HIDE");
        cr_assert_eq(flexcheck_verdict_outcome(vec), o ? FLEXCHECK_FAIL : FLEXCHECK_PASS, "%s",
                     flexcheck_verdict_text(vec));
        same_verdict(vec, port);
        if (o)
            cr_assert(strstr(flexcheck_verdict_diagnosis(port), "window W+1"), "%s",
                      flexcheck_verdict_diagnosis(port));
        flexcheck_verdict_free(vec);
        flexcheck_verdict_free(port);
        flexcheck_problem_free(p);
    }
}

Test(cpu, a_cpu_without_what_the_build_assumes_is_an_error_from_the_first_call)
{
    static inputs t;
    make(&t, 3, W);
    setenv("FLEXCHECK_TEST_CPU_REQUIRE", "avx2,fma", 1);
    setenv("FLEXCHECK_TEST_CPU_HIDE", "fma", 1);
    flexcheck_problem *p = flexcheck_problem_new();
    cr_assert(p);
    cr_assert_eq(flexcheck_problem_set_shape(p, 1, HQ, HKV, LQ, LK, D, D), FLEXCHECK_EUNSUP);
    cr_assert(strstr(flexcheck_problem_errmsg(p), "this CPU lacks fma,"), "%s",
              flexcheck_problem_errmsg(p));
    cr_assert_eq(flexcheck_problem_set_param(p, "window", W), FLEXCHECK_EUNSUP);
    cr_assert_eq(flexcheck_problem_check(p), FLEXCHECK_EUNSUP);
    flexcheck_verdict *v = (flexcheck_verdict *)&t; /* must come back NULL */
    cr_assert_eq(judge(p, &t, &v), FLEXCHECK_EUNSUP);
    cr_assert_null(v);
    /* the process goes on; with the hook gone the same handle judges */
    unsetenv("FLEXCHECK_TEST_CPU_HIDE");
    unsetenv("FLEXCHECK_TEST_CPU_REQUIRE");
    problem(p);
    cr_assert_eq(judge(p, &t, &v), FLEXCHECK_OK, "%s", flexcheck_problem_errmsg(p));
    cr_assert_eq(flexcheck_verdict_outcome(v), FLEXCHECK_PASS);
    flexcheck_verdict_free(v);
    flexcheck_problem_free(p);
}

Test(cpu, a_hook_naming_no_feature_is_refused_naming_it)
{
    setenv("FLEXCHECK_TEST_CPU_HIDE", "avx2,avx3", 1);
    flexcheck_problem *p = flexcheck_problem_new();
    cr_assert_eq(flexcheck_problem_set_dtype(p, "float16"), FLEXCHECK_EINVAL);
    cr_assert(strstr(flexcheck_problem_errmsg(p),
                     "FLEXCHECK_TEST_CPU_HIDE: unknown CPU feature 'avx3'"), "%s",
              flexcheck_problem_errmsg(p));
    flexcheck_problem_free(p);
}
