/*
 * test_api_paged.c - paged K/V through the public C API (API version 6, include/flexcheck.h,
 * docs/fixtures.md "Paged K/V"): k and v must be exactly the cache's gather through the table
 * (a k that is not, or a used entry out of the cache, refuses the judge, named); with the cache
 * set, the output of a producer that read one page from the wrong slot fails and its diagnosis
 * names the page; bad calls are refused naming the argument.
 *
 * The cache is laid out here by hand (pages in reverse order, a stale page of NaN), and the
 * outputs come from a float64 attention written here (no mask, one batch entry), not from
 * flexcheck's oracle.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "include/flexcheck.h"
#include "tests/test_rng.h"

enum { HQ = 2, HKV = 1, L = 32, D = 8, PS = 8, NP = L / PS + 1 };

typedef struct tensors {
    float q[HQ * L * D], k[HKV * L * D], v[HKV * L * D];
    float kc[NP * PS * HKV * D], vc[NP * PS * HKV * D];
    int32_t table[NP];
    float o[HQ * L * D], lse[HQ * L];
} tensors;

/* Inputs that are float16 values (multiples of 2^-10 in [-1, 1)); logical page j in physical
 * page NP - 2 - j, page NP - 1 stale (NaN). */
static void inputs(tensors *t)
{
    uint64_t s = 777;
    float *all[3] = {t->q, t->k, t->v};
    size_t n[3] = {HQ * L * D, HKV * L * D, HKV * L * D};
    for (int a = 0; a < 3; a++)
        for (size_t i = 0; i < n[a]; i++) {
            all[a][i] = (float)rng_int(&s, -1024, 1023) / 1024.0f;
        }
    for (size_t i = 0; i < sizeof t->kc / sizeof t->kc[0]; i++)
        t->kc[i] = t->vc[i] = NAN;
    for (int j = 0; j < L / PS; j++) {
        t->table[j] = NP - 2 - j;
        memcpy(t->kc + (size_t)t->table[j] * PS * D, t->k + (size_t)j * PS * D,
               sizeof(float) * PS * D);
        memcpy(t->vc + (size_t)t->table[j] * PS * D, t->v + (size_t)j * PS * D,
               sizeof(float) * PS * D);
    }
    t->table[L / PS] = -1; /* padding, never read */
}

/* Attention of q over keys/values read through `table` (HKV = 1, no mask), float64 -> float. */
static void attend(tensors *t, const int32_t *table)
{
    for (int h = 0; h < HQ; h++)
        for (int i = 0; i < L; i++) {
            const float *qr = t->q + ((size_t)h * L + i) * D;
            double s[L], m = -INFINITY, l = 0, acc[D] = {0};
            for (int j = 0; j < L; j++) {
                const float *kr = t->kc + ((size_t)table[j / PS] * PS + (size_t)(j % PS)) * D;
                double dot = 0;
                for (int x = 0; x < D; x++)
                    dot += (double)qr[x] * kr[x];
                s[j] = dot / sqrt((double)D);
                m = s[j] > m ? s[j] : m;
            }
            for (int j = 0; j < L; j++) {
                const float *vr = t->vc + ((size_t)table[j / PS] * PS + (size_t)(j % PS)) * D;
                double w = exp(s[j] - m);
                l += w;
                for (int x = 0; x < D; x++)
                    acc[x] += w * vr[x];
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
    cr_assert_eq(flexcheck_problem_set_dtype(p, "float16"), FLEXCHECK_OK);
    return p;
}

static flexcheck_status judge(flexcheck_problem *p, tensors *t, flexcheck_verdict **v)
{
    return flexcheck_judge(p, t->q, HQ * L * D, t->k, HKV * L * D, t->v, HKV * L * D, t->o,
                           HQ * L * D, t->lse, HQ * L, v);
}

Test(api_paged, the_right_pages_pass_and_a_page_from_the_wrong_slot_is_named)
{
    static tensors t;
    inputs(&t);
    flexcheck_problem *p = problem();
    cr_assert_eq(flexcheck_problem_set_paged(p, t.kc, t.vc, NP, PS, t.table, 1, NP),
                 FLEXCHECK_OK, "%s", flexcheck_problem_errmsg(p));
    flexcheck_verdict *v = NULL;
    attend(&t, t.table);
    cr_assert_eq(judge(p, &t, &v), FLEXCHECK_OK, "%s", flexcheck_problem_errmsg(p));
    cr_expect_eq(flexcheck_verdict_outcome(v), FLEXCHECK_PASS, "%s", flexcheck_verdict_text(v));
    flexcheck_verdict_free(v);
    int32_t bug[NP];
    memcpy(bug, t.table, sizeof bug);
    bug[1] = t.table[2]; /* logical page 1 read through entry 2 */
    attend(&t, bug);
    cr_assert_eq(judge(p, &t, &v), FLEXCHECK_OK, "%s", flexcheck_problem_errmsg(p));
    cr_expect_eq(flexcheck_verdict_outcome(v), FLEXCHECK_FAIL);
    char want[200];
    snprintf(want, sizeof want, "batch entry 0's page 1 (its keys 8..15) read from physical page "
             "%d, block_table[0][2]'s, instead of page %d", (int)t.table[2], (int)t.table[1]);
    cr_expect(strstr(flexcheck_verdict_diagnosis(v), want), "%s", flexcheck_verdict_text(v));
    flexcheck_verdict_free(v);
    flexcheck_problem_free(p);
}

Test(api_paged, k_that_is_not_the_gather_or_an_entry_out_of_the_cache_is_refused)
{
    static tensors t;
    inputs(&t);
    attend(&t, t.table);
    flexcheck_problem *p = problem();
    cr_assert_eq(flexcheck_problem_set_paged(p, t.kc, t.vc, NP, PS, t.table, 1, NP),
                 FLEXCHECK_OK);
    flexcheck_verdict *v = NULL;
    float keep = t.k[9 * D + 2];
    t.k[9 * D + 2] += 1.0f / 1024;
    cr_assert_eq(judge(p, &t, &v), FLEXCHECK_EINVAL);
    cr_expect(v == NULL);
    char want[128];
    snprintf(want, sizeof want, "k[%d] = %.9g but block_table gathers %.9g from k_cache",
             9 * D + 2, (double)t.k[9 * D + 2], (double)keep);
    cr_expect(strstr(flexcheck_problem_errmsg(p), want), "%s", flexcheck_problem_errmsg(p));
    t.k[9 * D + 2] = keep;
    int32_t bad[NP];
    memcpy(bad, t.table, sizeof bad);
    bad[3] = NP + 4;
    cr_assert_eq(flexcheck_problem_set_paged(p, t.kc, t.vc, NP, PS, bad, 1, NP), FLEXCHECK_OK);
    cr_assert_eq(judge(p, &t, &v), FLEXCHECK_EINVAL);
    cr_expect(strstr(flexcheck_problem_errmsg(p), "block_table[0][3] = 9: sequence 0 reads its "
                     "keys from 24 on through it"), "%s", flexcheck_problem_errmsg(p));
    flexcheck_problem_free(p);
}

Test(api_paged, bad_calls_are_refused_naming_what_to_give)
{
    static tensors t;
    inputs(&t);
    flexcheck_problem *p = flexcheck_problem_new();
    cr_assert_eq(flexcheck_problem_set_paged(p, t.kc, t.vc, NP, PS, t.table, 1, NP),
                 FLEXCHECK_EINVAL);
    cr_expect(strstr(flexcheck_problem_errmsg(p), "set_paged: no shape"));
    flexcheck_problem_free(p);
    p = problem();
    cr_assert_eq(flexcheck_problem_set_paged(p, t.kc, NULL, NP, PS, t.table, 1, NP),
                 FLEXCHECK_EINVAL);
    cr_expect(strstr(flexcheck_problem_errmsg(p), "an array NULL"), "%s",
              flexcheck_problem_errmsg(p));
    cr_assert_eq(flexcheck_problem_set_paged(p, t.kc, t.vc, NP, 0, t.table, 1, NP),
                 FLEXCHECK_EINVAL);
    cr_assert_eq(flexcheck_problem_set_paged(p, t.kc, t.vc, NP, PS, t.table, 2, NP),
                 FLEXCHECK_OK); /* the rows are held to the sequences when judged */
    flexcheck_verdict *v = NULL;
    attend(&t, t.table);
    cr_assert_eq(judge(p, &t, &v), FLEXCHECK_EINVAL);
    cr_expect(strstr(flexcheck_problem_errmsg(p), "block_table has 2 rows: one per sequence, 1"),
              "%s", flexcheck_problem_errmsg(p));
    flexcheck_problem_free(p);
}
