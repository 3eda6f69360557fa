/*
 * test_api_xterms.c - the explicit mask and bias through the public C API (API version 4,
 * include/flexcheck.h, docs/semantics.md section 8): an output computed with a prefix-LM mask
 * and an ALiBi bias passes; one computed without either fails; bad calls are refused with a
 * message naming the argument; a shape changed afterwards and a bad bias value are refused when
 * checked; the budget names the terms. Expected outputs come from a float64 attention written
 * here from the page, not from flexcheck's oracle.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "include/flexcheck.h"
#include "tests/test_rng.h"

enum { HQ = 4, HKV = 2, L = 32, D = 16, PREFIX = 11 };

typedef struct tensors {
    float q[HQ * L * D], k[HKV * L * D], v[HKV * L * D];
    uint8_t mask[L * L];     /* one for every batch entry and head: prefix-LM */
    float bias[HQ * L * L];  /* per head: ALiBi */
    float o[HQ * L * D], lse[HQ * L];
} tensors;

static void inputs(tensors *t)
{
    uint64_t s = 12345;
    float *all[3] = {t->q, t->k, t->v};
    size_t n[3] = {HQ * L * D, HKV * L * D, HKV * L * D};
    for (int a = 0; a < 3; a++)
        for (size_t i = 0; i < n[a]; i++) {
            all[a][i] = (float)(rng_int(&s, 0, 65535) / 32768.0 - 1.0);
        }
    for (int q = 0; q < L; q++)
        for (int k = 0; k < L; k++)
            t->mask[q * L + k] = k < PREFIX || k <= q;
    for (int h = 0; h < HQ; h++)
        for (int q = 0; q < L; q++)
            for (int k = 0; k < L; k++)
                t->bias[(h * L + q) * L + k] = (float)(ldexp(1.0, -(h + 1)) * (k - q));
}

/* Softmax attention in float64 with no mask terms, the explicit mask when use_mask, the bias
 * added to the scaled score when use_bias; outputs rounded to float. */
static void attend(tensors *t, int use_mask, int use_bias)
{
    for (int h = 0; h < HQ; h++)
        for (int i = 0; i < L; i++) {
            const float *qr = t->q + ((size_t)h * L + i) * D;
            const float *kh = t->k + (size_t)(h / (HQ / HKV)) * L * D;
            const float *vh = t->v + (size_t)(h / (HQ / HKV)) * L * D;
            double s[L], m = -INFINITY, l = 0, acc[D] = {0};
            for (int j = 0; j < L; j++) {
                double dot = 0;
                for (int x = 0; x < D; x++)
                    dot += (double)qr[x] * kh[j * D + x];
                s[j] = dot / sqrt((double)D) + (use_bias ? t->bias[(h * L + i) * L + j] : 0);
                if (use_mask && !t->mask[i * L + j])
                    s[j] = -INFINITY;
                m = fmax(m, s[j]);
            }
            for (int j = 0; j < L; j++) {
                double p = exp(s[j] - m);
                l += p;
                for (int x = 0; x < D; x++)
                    acc[x] += p * vh[j * D + x];
            }
            for (int x = 0; x < D; x++)
                t->o[((size_t)h * L + i) * D + x] = (float)(acc[x] / l);
            t->lse[h * L + i] = (float)(m + log(l));
        }
}

static flexcheck_problem *problem(void)
{
    flexcheck_problem *p = flexcheck_problem_new();
    cr_assert(p);
    cr_assert_eq(flexcheck_problem_set_shape(p, 1, HQ, HKV, L, L, D, D), FLEXCHECK_OK);
    return p;
}

static flexcheck_outcome judged(flexcheck_problem *p, const tensors *t, char *diag, size_t cap)
{
    flexcheck_verdict *v = NULL;
    cr_assert_eq(flexcheck_judge(p, t->q, HQ * L * D, t->k, HKV * L * D, t->v, HKV * L * D, t->o,
                                 HQ * L * D, t->lse, HQ * L, &v),
                 FLEXCHECK_OK, "%s", flexcheck_problem_errmsg(p));
    flexcheck_outcome oc = flexcheck_verdict_outcome(v);
    snprintf(diag, cap, "%s", flexcheck_verdict_text(v));
    flexcheck_verdict_free(v);
    return oc;
}

Test(api_xterms, reports_version_4)
{
    cr_assert_geq(flexcheck_api_version(), 4);
}

/* The mask_mod case (no mask terms): prefix-LM for every head, ALiBi per head. The output of
 * that attention passes; the outputs without the mask, or without the bias, fail, and the
 * diagnosis names which term was left out. */
Test(api_xterms, prefix_lm_and_alibi_pass_and_an_output_without_them_fails)
{
    static tensors t;
    inputs(&t);
    flexcheck_problem *p = problem();
    cr_assert_eq(flexcheck_problem_set_explicit_mask(p, t.mask, 1, 1, L * L), FLEXCHECK_OK, "%s",
                 flexcheck_problem_errmsg(p));
    cr_assert_eq(flexcheck_problem_set_bias(p, t.bias, 1, HQ, HQ * L * L), FLEXCHECK_OK, "%s",
                 flexcheck_problem_errmsg(p));
    static char text[8192];
    attend(&t, 1, 1);
    cr_assert_eq(judged(p, &t, text, sizeof text), FLEXCHECK_PASS, "%s", text);
    attend(&t, 0, 1);
    cr_assert_eq(judged(p, &t, text, sizeof text), FLEXCHECK_FAIL, "%s", text);
    cr_assert(strstr(text, "explained by explicit mask ignored (every key of the row's "
                           "sequence): all "), "%s", text);
    attend(&t, 1, 0);
    cr_assert_eq(judged(p, &t, text, sizeof text), FLEXCHECK_FAIL, "%s", text);
    cr_assert(strstr(text, "explained by bias ignored (the explicit bias not added): all "),
              "%s", text);
    /* removed, the terms are gone: the plain output passes */
    cr_assert_eq(flexcheck_problem_set_explicit_mask(p, NULL, 0, 0, 0), FLEXCHECK_OK);
    cr_assert_eq(flexcheck_problem_set_bias(p, NULL, 0, 0, 0), FLEXCHECK_OK);
    attend(&t, 0, 0);
    cr_assert_eq(judged(p, &t, text, sizeof text), FLEXCHECK_PASS, "%s", text);
    flexcheck_problem_free(p);
}

static void refused(flexcheck_problem *p, flexcheck_status st, const char *want)
{
    cr_assert_eq(st, FLEXCHECK_EINVAL, "want a refusal naming \"%s\"", want);
    cr_assert(strstr(flexcheck_problem_errmsg(p), want), "\"%s\" lacks \"%s\"",
              flexcheck_problem_errmsg(p), want);
}

Test(api_xterms, bad_calls_are_refused_naming_the_argument)
{
    static tensors t;
    inputs(&t);
    flexcheck_problem *p = flexcheck_problem_new();
    refused(p, flexcheck_problem_set_explicit_mask(p, t.mask, 1, 1, L * L),
            "set_explicit_mask: no shape: call flexcheck_problem_set_shape first");
    flexcheck_problem_free(p);
    p = problem();
    refused(p, flexcheck_problem_set_explicit_mask(p, t.mask, 1, 1, L * L - 1),
            "set_explicit_mask: n = 1023 elements, [bm, hm, Lq, Lk] = [1, 1, 32, 32] needs 1024");
    refused(p, flexcheck_problem_set_explicit_mask(p, t.mask, 2, 1, 2 * L * L),
            "set_explicit_mask: bm = 2: must be 1 (every batch entry) or B = 1");
    refused(p, flexcheck_problem_set_bias(p, t.bias, 1, HKV, HKV * L * L),
            "set_bias: hm = 2: must be 1 (every head) or Hq = 4");
    refused(p, flexcheck_problem_set_bias(p, NULL, 1, 1, 5), "set_bias: array NULL with n > 0");
    refused(p, flexcheck_problem_set_bias(p, t.bias, 1, 1, 0),
            "set_bias: n = 0 with an array given");
    cr_assert_eq(flexcheck_problem_check(p), FLEXCHECK_OK, "%s", flexcheck_problem_errmsg(p));
    /* a value the page refuses, found when checked */
    t.bias[(2 * L + 5) * L + 7] = -INFINITY;
    cr_assert_eq(flexcheck_problem_set_bias(p, t.bias, 1, HQ, HQ * L * L), FLEXCHECK_OK);
    refused(p, flexcheck_problem_check(p), "explicit bias at (b, h, q, k) = (0, 2, 5, 7) is -inf");
    cr_assert_eq(flexcheck_problem_set_bias(p, NULL, 0, 0, 0), FLEXCHECK_OK);
    /* a mask for a shape set again afterwards */
    cr_assert_eq(flexcheck_problem_set_explicit_mask(p, t.mask, 1, 1, L * L), FLEXCHECK_OK);
    cr_assert_eq(flexcheck_problem_set_shape(p, 1, HQ, HKV, L, L + 1, D, D), FLEXCHECK_OK);
    refused(p, flexcheck_problem_check(p),
            "explicit mask: its grid is Lq x Lk = 32 x 32, the problem's 32 x 33");
    flexcheck_problem_free(p);
}

/* A per-head bias of 4 x 1024 x 1024 floats (16 MiB) over a memory budget the case fits
 * without it: refused before anything is judged, the bias named. */
Test(api_xterms, the_budget_counts_the_bias_and_names_it)
{
    enum { N = 1024 };
    flexcheck_problem *p = flexcheck_problem_new();
    cr_assert_eq(flexcheck_problem_set_shape(p, 1, HQ, HKV, N, N, D, D), FLEXCHECK_OK);
    cr_assert_eq(flexcheck_problem_set_budget(p, 12u << 20, 0), FLEXCHECK_OK);
    cr_assert_eq(flexcheck_problem_check(p), FLEXCHECK_OK, "%s", flexcheck_problem_errmsg(p));
    float *bias = calloc((size_t)HQ * N * N, sizeof *bias);
    cr_assert(bias);
    cr_assert_eq(flexcheck_problem_set_bias(p, bias, 1, HQ, (size_t)HQ * N * N), FLEXCHECK_OK);
    free(bias); /* copied */
    refused(p, flexcheck_problem_check(p),
            "the explicit bias [1, 4, 1024, 1024] (float32) 0.0156 GiB), over the memory budget");
    flexcheck_problem_free(p);
}
