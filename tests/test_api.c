/*
 * test_api.c - the public C API (include/flexcheck.h) as a caller sees it, linked against
 * build/libflexcheck.so: a correct output passes and one computed with a window one too wide
 * fails with "window W+1" named; every bad argument is a status and a message naming it, with no
 * verdict; handles used from several threads at once give the same verdicts. Its expected
 * outputs come from a brute-force float64 attention written here from docs/semantics.md
 * (bottom-right alignment per sequence, causal, window, sinks), not from flexcheck's oracle.
 * `make test` also runs this suite under ASan/UBSan (api/module.mk), wrong counts included.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/lowp.h"
#include "include/flexcheck.h"

/* The test problem: one batch entry or a packed batch of three sequences, Hq 4, Hkv 2, D 16. */
enum { HQ = 4, HKV = 2, D = 16, LQ = 40, LK = 48 };

typedef struct brute {
    int causal, window, packed, sinks;
    int32_t cu_q[4], cu_k[4]; /* packed: three sequences */
    float q[HQ * LQ * D], k[HKV * LK * D], v[HKV * LK * D], sink[HQ];
    float o[HQ * LQ * D], lse[HQ * LQ];
} brute;

static float draw(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return fc_round((float)(((*s >> 8) & 0xFFFF) / 32768.0 - 1.0), FC_F16);
}

/* Inputs drawn from seed, float16 values. */
static void inputs(brute *t, unsigned seed)
{
    for (size_t i = 0; i < sizeof t->q / sizeof *t->q; i++)
        t->q[i] = draw(&seed);
    for (size_t i = 0; i < sizeof t->k / sizeof *t->k; i++)
        t->k[i] = draw(&seed);
    for (size_t i = 0; i < sizeof t->v / sizeof *t->v; i++)
        t->v[i] = draw(&seed);
    for (int h = 0; h < HQ; h++)
        t->sink[h] = fc_round(2.0f * draw(&seed), FC_F16);
    static const int32_t cq[4] = {0, 10, 10, LQ}, ck[4] = {0, 12, 20, LK};
    memcpy(t->cu_q, cq, sizeof cq);
    memcpy(t->cu_k, ck, sizeof ck);
}

/* Attention of docs/semantics.md in float64, window w, written out loop by loop. */
static void attend(brute *t, int w)
{
    int nseq = t->packed ? 3 : 1;
    for (int h = 0; h < HQ; h++)
        for (int s = 0; s < nseq; s++) {
            int q0 = t->packed ? t->cu_q[s] : 0, q1 = t->packed ? t->cu_q[s + 1] : LQ;
            int k0 = t->packed ? t->cu_k[s] : 0, k1 = t->packed ? t->cu_k[s + 1] : LK;
            for (int i = q0; i < q1; i++) {
                long pq = (i - q0) + (k1 - k0) - (q1 - q0); /* bottom-right */
                const float *qr = t->q + ((size_t)h * LQ + i) * D;
                double sc[LK], m = t->sinks ? t->sink[h] : -INFINITY;
                int any = 0;
                for (int j = k0; j < k1; j++) {
                    long pk = j - k0;
                    int ok = (!t->causal || pk <= pq) && (!w || labs(pq - pk) < w);
                    sc[j] = -INFINITY;
                    if (!ok)
                        continue;
                    const float *kr = t->k + ((size_t)(h / (HQ / HKV)) * LK + j) * D;
                    double dot = 0;
                    for (int d = 0; d < D; d++)
                        dot += (double)qr[d] * kr[d];
                    sc[j] = dot / sqrt((double)D);
                    m = fmax(m, sc[j]);
                    any = 1;
                }
                double l = t->sinks ? exp(t->sink[h] - m) : 0, acc[D] = {0};
                for (int j = k0; j < k1; j++) {
                    if (sc[j] == -INFINITY)
                        continue;
                    double p = exp(sc[j] - m);
                    l += p;
                    const float *vr = t->v + ((size_t)(h / (HQ / HKV)) * LK + j) * D;
                    for (int d = 0; d < D; d++)
                        acc[d] += p * vr[d];
                }
                for (int d = 0; d < D; d++)
                    t->o[((size_t)h * LQ + i) * D + d] =
                        any ? fc_round((float)(acc[d] / l), FC_F16) : 0.0f;
                t->lse[(size_t)h * LQ + i] =
                    any || t->sinks ? (float)(m + log(l)) : -INFINITY;
            }
        }
}

static flexcheck_problem *problem_of(const brute *t, int window)
{
    flexcheck_problem *p = flexcheck_problem_new();
    cr_assert(p);
    cr_assert_eq(flexcheck_problem_set_shape(p, 1, HQ, HKV, LQ, LK, D, D), FLEXCHECK_OK, "%s",
                 flexcheck_problem_errmsg(p));
    cr_assert_eq(flexcheck_problem_set_dtype(p, "float16"), FLEXCHECK_OK);
    cr_assert_eq(flexcheck_problem_set_mask(p, t->causal, window, 0), FLEXCHECK_OK);
    if (t->packed)
        cr_assert_eq(flexcheck_problem_set_packed(p, t->cu_q, t->cu_k, 4), FLEXCHECK_OK, "%s",
                     flexcheck_problem_errmsg(p));
    if (t->sinks)
        cr_assert_eq(flexcheck_problem_set_sinks(p, t->sink, HQ), FLEXCHECK_OK);
    return p;
}

static flexcheck_status judge(flexcheck_problem *p, const brute *t, flexcheck_verdict **v)
{
    return flexcheck_judge(p, t->q, HQ * LQ * D, t->k, HKV * LK * D, t->v, HKV * LK * D, t->o,
                           HQ * LQ * D, t->lse, HQ * LQ, v);
}

Test(api, reports_its_version)
{
    cr_expect_eq(flexcheck_api_version(), FLEXCHECK_API_VERSION);
    cr_expect(strstr(flexcheck_version(), "(commit ") != NULL, "%s", flexcheck_version());
}

/* Dense and packed, with and without sinks: the brute-force output passes; the same computed
 * with W + 1 fails, first on H1, its diagnosis naming the window one too wide for every failing
 * row, the worst element inside the problem. */
Test(api, passes_a_right_output_and_names_a_window_one_too_wide)
{
    static const struct {
        int packed, sinks;
    } cases[] = {{0, 0}, {1, 0}, {0, 1}, {1, 1}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        brute *t = calloc(1, sizeof *t);
        inputs(t, 7 + (unsigned)c);
        t->causal = 1;
        t->packed = cases[c].packed;
        t->sinks = cases[c].sinks;
        attend(t, 6);
        flexcheck_problem *p = problem_of(t, 6);
        flexcheck_verdict *v = NULL;
        cr_assert_eq(judge(p, t, &v), FLEXCHECK_OK, "case %zu: %s", c, flexcheck_problem_errmsg(p));
        cr_expect_eq(flexcheck_verdict_outcome(v), FLEXCHECK_PASS, "case %zu: %s", c,
                     flexcheck_verdict_text(v));
        cr_expect(strncmp(flexcheck_verdict_text(v), "PASS output float16: ", 21) == 0, "%s",
                  flexcheck_verdict_text(v));
        cr_expect_str_empty(flexcheck_verdict_diagnosis(v));
        flexcheck_verdict_free(v);

        attend(t, 7);
        cr_assert_eq(judge(p, t, &v), FLEXCHECK_OK, "%s", flexcheck_problem_errmsg(p));
        cr_expect_eq(flexcheck_verdict_outcome(v), FLEXCHECK_FAIL, "case %zu", c);
        const char *name;
        cr_expect_eq(flexcheck_verdict_gate(v, 0, &name, NULL, NULL), FLEXCHECK_GATE_FAIL);
        cr_expect_str_eq(name, "H1");
        cr_expect(strncmp(flexcheck_verdict_reason(v), "H1 max ratio", 12) == 0, "%s",
                  flexcheck_verdict_reason(v));
        size_t rows = 0;
        const char *f0 = flexcheck_verdict_finding(v, 0, &rows);
        cr_expect(f0 && strstr(f0, "window W+1 (6 -> 7)"), "case %zu: %s", c,
                  flexcheck_verdict_text(v));
        cr_expect(strstr(flexcheck_verdict_diagnosis(v), "explained by window W+1 (6 -> 7)"),
                  "%s", flexcheck_verdict_diagnosis(v));
        int32_t w[4];
        double err = flexcheck_verdict_worst(v, w);
        cr_expect(err > 0 && w[0] == 0 && w[1] >= 0 && w[1] < HQ && w[2] >= 0 && w[2] < LQ &&
                      w[3] >= 0 && w[3] < D,
                  "worst %g at (%d, %d, %d, %d)", err, w[0], w[1], w[2], w[3]);
        cr_expect(flexcheck_verdict_metric(v, "h1_ratio") > 1);
        cr_expect(isnan(flexcheck_verdict_metric(v, "no such figure")));
        flexcheck_verdict_free(v);
        flexcheck_problem_free(p);
        free(t);
    }
}

/* A soft-capped problem (docs/semantics.md section 7: the scaled score s becomes c tanh(s / c)
 * before the mask and the softmax): the output computed with the cap passes, and the uncapped
 * output of the same inputs fails, its diagnosis naming the cap as missing; judged without the
 * cap, the verdicts swap. So the cap given to flexcheck_problem_set_softcap is the one judged
 * (a cap dropped on the way passed the uncapped output). The capped output is brute force here,
 * as attend's, on the causal dense problem (row i at position i + Lk - Lq >= 8: never empty). */
Test(api, judges_a_soft_capped_problem_with_its_cap)
{
    const double cap = 0.5; /* most scores here lie within [-1, 1]: the cap bends them all */
    brute *t = calloc(1, sizeof *t), *c = calloc(1, sizeof *c);
    cr_assert(t && c);
    inputs(t, 13);
    t->causal = 1;
    attend(t, 0);
    *c = *t;
    for (int h = 0; h < HQ; h++)
        for (int i = 0; i < LQ; i++) {
            const float *qr = t->q + ((size_t)h * LQ + i) * D;
            int n = i + LK - LQ + 1; /* keys 0 .. position */
            double sc[LK], m = -INFINITY, l = 0, acc[D] = {0};
            for (int j = 0; j < n; j++) {
                const float *kr = t->k + ((size_t)(h / (HQ / HKV)) * LK + j) * D;
                double dot = 0;
                for (int d = 0; d < D; d++)
                    dot += (double)qr[d] * kr[d];
                sc[j] = cap * tanh(dot / sqrt((double)D) / cap);
                m = fmax(m, sc[j]);
            }
            for (int j = 0; j < n; j++) {
                double p = exp(sc[j] - m);
                const float *vr = t->v + ((size_t)(h / (HQ / HKV)) * LK + j) * D;
                l += p;
                for (int d = 0; d < D; d++)
                    acc[d] += p * vr[d];
            }
            for (int d = 0; d < D; d++)
                c->o[((size_t)h * LQ + i) * D + d] = fc_round((float)(acc[d] / l), FC_F16);
            c->lse[(size_t)h * LQ + i] = (float)(m + log(l));
        }
    flexcheck_problem *p = problem_of(t, 0);
    for (int with_cap = 1; with_cap >= 0; with_cap--) {
        cr_assert_eq(flexcheck_problem_set_softcap(p, with_cap ? cap : 0), FLEXCHECK_OK, "%s",
                     flexcheck_problem_errmsg(p));
        const brute *outs[2] = {c, t}; /* computed with the cap, without it */
        for (int k = 0; k < 2; k++) {
            flexcheck_verdict *v = NULL;
            cr_assert_eq(judge(p, outs[k], &v), FLEXCHECK_OK, "%s", flexcheck_problem_errmsg(p));
            int right = (k == 0) == with_cap;
            cr_expect_eq(flexcheck_verdict_outcome(v), right ? FLEXCHECK_PASS : FLEXCHECK_FAIL,
                         "cap %s, output %s: %s", with_cap ? "set" : "off",
                         k ? "uncapped" : "capped", flexcheck_verdict_text(v));
            if (with_cap && k == 1)
                cr_expect(strstr(flexcheck_verdict_diagnosis(v), "explained by soft-cap missing "
                                                                 "(cap 0.5 not applied"),
                          "%s", flexcheck_verdict_text(v));
            flexcheck_verdict_free(v);
        }
    }
    flexcheck_problem_free(p);
    free(t);
    free(c);
}

/* Every bad argument: a status, a message naming it, no verdict, and nothing read past the
 * counts given (the ASan run of this suite holds the library to that). */
typedef enum {
    COUNT_Q_SHORT, COUNT_K_LONG, COUNT_V_ZERO, COUNT_OUT_SHORT, COUNT_LSE_LONG, NULL_Q, NULL_OUT,
    NOT_F16, NAN_K, NO_SHAPE, LSE_COUNT_NO_LSE
} bad_call;

Test(api, refuses_each_bad_argument_naming_it)
{
    static const struct {
        bad_call what;
        const char *says;
    } cases[] = {
        {COUNT_Q_SHORT, "q has 2559 elements; the problem's shape needs 2560"},
        {COUNT_K_LONG, "k has 1537 elements"},
        {COUNT_V_ZERO, "v has 0 elements"},
        {COUNT_OUT_SHORT, "out has 2559 elements"},
        {COUNT_LSE_LONG, "lse has 161 elements"},
        {NULL_Q, "q is NULL"},
        {NULL_OUT, "out has 2560 elements and is NULL"},
        {NOT_F16, "q[5] = 0.100000001 is not representable in the problem's dtype"},
        {NAN_K, "k[3] = nan is not finite"},
        {NO_SHAPE, "no shape: call flexcheck_problem_set_shape first"},
        {LSE_COUNT_NO_LSE, "lse has 160 elements and is NULL"},
    };
    brute *t = calloc(1, sizeof *t);
    inputs(t, 3);
    attend(t, 0);
    size_t nq = HQ * LQ * D, nk = HKV * LK * D, no = HQ * LQ * D, nl = HQ * LQ;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        size_t cq = nq, ck = nk, cv = nk, co = no, cl = nl;
        switch (cases[c].what) {
        case COUNT_Q_SHORT: cq--; break;
        case COUNT_K_LONG: ck++; break;
        case COUNT_V_ZERO: cv = 0; break;
        case COUNT_OUT_SHORT: co--; break;
        case COUNT_LSE_LONG: cl++; break;
        default: break;
        }
        /* Each buffer exactly as long as the count given: a read past it is an ASan report. */
        float *q = calloc(cq + !cq, sizeof *q), *k = calloc(ck, sizeof *k);
        float *v = calloc(cv + !cv, sizeof *v), *o = calloc(co, sizeof *o);
        float *l = calloc(cl, sizeof *l);
        memcpy(q, t->q, (cq < nq ? cq : nq) * sizeof *q);
        memcpy(k, t->k, (ck < nk ? ck : nk) * sizeof *k);
        memcpy(v, t->v, (cv < nk ? cv : nk) * sizeof *v);
        memcpy(o, t->o, (co < no ? co : no) * sizeof *o);
        memcpy(l, t->lse, (cl < nl ? cl : nl) * sizeof *l);
        flexcheck_problem *p = cases[c].what == NO_SHAPE ? flexcheck_problem_new()
                                                          : problem_of(t, 0);
        const float *qp = q, *op = o, *lp = l;
        switch (cases[c].what) {
        case NULL_Q: qp = NULL; break;
        case NULL_OUT: op = NULL; break;
        case NOT_F16: q[5] = 0.1f; break;
        case NAN_K: k[3] = NAN; break;
        case LSE_COUNT_NO_LSE: lp = NULL; break;
        default: break;
        }
        flexcheck_verdict *vd = (flexcheck_verdict *)&cases; /* must come back NULL */
        flexcheck_status st = flexcheck_judge(p, qp, cq, k, ck, v, cv, op, co, lp, cl, &vd);
        cr_expect_eq(st, FLEXCHECK_EINVAL, "case %zu: status %d", c, (int)st);
        cr_expect_null(vd, "case %zu: a verdict came back", c);
        cr_expect(strstr(flexcheck_problem_errmsg(p), cases[c].says), "case %zu: '%s'", c,
                  flexcheck_problem_errmsg(p));
        flexcheck_problem_free(p);
        free(q);
        free(k);
        free(v);
        free(o);
        free(l);
    }
    free(t);
}

Test(api, refuses_a_bad_problem_naming_the_field)
{
    flexcheck_problem *p = flexcheck_problem_new();
    cr_expect_eq(flexcheck_problem_set_shape(p, 1, 3, 2, 8, 8, 16, 16), FLEXCHECK_EINVAL);
    cr_expect(strstr(flexcheck_problem_errmsg(p), "Hq = 3 is not a multiple of Hkv = 2"));
    cr_expect_eq(flexcheck_problem_set_shape(p, 0, 2, 2, 8, 8, 16, 16), FLEXCHECK_EINVAL);
    cr_expect(strstr(flexcheck_problem_errmsg(p), "B = 0, must be at least 1"));
    cr_expect_eq(flexcheck_problem_set_dtype(p, "float8\n"), FLEXCHECK_EINVAL);
    cr_expect(strstr(flexcheck_problem_errmsg(p), "'float8\\n': float32, float16 or bfloat16"),
              "%s", flexcheck_problem_errmsg(p));
    cr_expect_eq(flexcheck_problem_set_mask(p, 2, 0, 0), FLEXCHECK_EINVAL);
    cr_expect_eq(flexcheck_problem_set_mask(p, 1, -4, 0), FLEXCHECK_EINVAL);
    cr_expect(strstr(flexcheck_problem_errmsg(p), "window = -4"));
    cr_expect_eq(flexcheck_problem_set_output_types(p, "float16", "int8"), FLEXCHECK_EINVAL);
    cr_expect(strstr(flexcheck_problem_errmsg(p), "set_output_types: lse 'int8'"), "%s",
              flexcheck_problem_errmsg(p));
    cr_expect_eq(flexcheck_problem_set_output_types(p, NULL, "bfloat16"), FLEXCHECK_OK);
    cr_expect_eq(flexcheck_problem_set_scale(p, NAN), FLEXCHECK_EINVAL);
    cr_expect_eq(flexcheck_problem_set_softcap(p, -1), FLEXCHECK_EINVAL);
    float s[2] = {1, INFINITY};
    cr_expect_eq(flexcheck_problem_set_sinks(p, s, 2), FLEXCHECK_EINVAL);
    cr_expect(strstr(flexcheck_problem_errmsg(p), "sinks[1] = inf is not finite"));
    int32_t cu[2] = {0, 8};
    cr_expect_eq(flexcheck_problem_set_packed(p, cu, NULL, 2), FLEXCHECK_EINVAL);
    /* a packed batch whose offsets end short of Lq is refused at judge time, named */
    cr_assert_eq(flexcheck_problem_set_shape(p, 1, 2, 2, 8, 8, 16, 16), FLEXCHECK_OK);
    int32_t cq[2] = {0, 7}, ck[2] = {0, 8};
    cr_assert_eq(flexcheck_problem_set_packed(p, cq, ck, 2), FLEXCHECK_OK);
    float x[2 * 8 * 16] = {0}, lse[16] = {0};
    flexcheck_verdict *v;
    cr_expect_eq(flexcheck_judge(p, x, 256, x, 256, x, 256, x, 256, lse, 16, &v),
                 FLEXCHECK_EINVAL);
    cr_expect(strstr(flexcheck_problem_errmsg(p), "cu_seqlens end at 7 and 8, not at Lq = 8"),
              "%s", flexcheck_problem_errmsg(p));
    cr_expect_eq(flexcheck_problem_set_sinks(p, s, 1), FLEXCHECK_OK);
    cr_expect_eq(flexcheck_problem_set_packed(p, NULL, NULL, 0), FLEXCHECK_OK);
    cr_expect_eq(flexcheck_judge(p, x, 256, x, 256, x, 256, x, 256, lse, 16, &v),
                 FLEXCHECK_EINVAL);
    cr_expect(strstr(flexcheck_problem_errmsg(p), "sinks: 1 values for Hq = 2 heads"), "%s",
              flexcheck_problem_errmsg(p));
    cr_expect_eq(flexcheck_judge(NULL, x, 256, x, 256, x, 256, x, 256, lse, 16, &v),
                 FLEXCHECK_EINVAL);
    flexcheck_problem_free(p);
    flexcheck_problem_free(NULL);
    flexcheck_verdict_free(NULL);
    cr_expect_eq(flexcheck_verdict_outcome(NULL), FLEXCHECK_FAIL);
}

/* No global state: threads judging at once, each with its own handles, get what one thread
 * alone gets, byte for byte. */
typedef struct job {
    const brute *t;
    int window;
    char *text;
} job;

static void *judge_job(void *arg)
{
    job *j = arg;
    flexcheck_problem *p = problem_of(j->t, j->window);
    flexcheck_verdict *v = NULL;
    if (judge(p, j->t, &v) == FLEXCHECK_OK)
        j->text = strdup(flexcheck_verdict_text(v));
    flexcheck_verdict_free(v);
    flexcheck_problem_free(p);
    return NULL;
}

Test(api, threads_judging_at_once_agree_with_one_alone)
{
    brute *t = calloc(1, sizeof *t);
    inputs(t, 11);
    t->causal = 1;
    attend(t, 7); /* judged as window 6 (fails, diagnosed) and as 7 (passes) */
    job alone[2] = {{t, 6, NULL}, {t, 7, NULL}}, many[8];
    for (int i = 0; i < 2; i++)
        judge_job(&alone[i]);
    cr_assert(alone[0].text && alone[1].text);
    cr_assert(strncmp(alone[0].text, "FAIL", 4) == 0 && strncmp(alone[1].text, "PASS", 4) == 0);
    pthread_t tid[8];
    for (int i = 0; i < 8; i++) {
        many[i] = (job){t, 6 + i % 2, NULL};
        cr_assert_eq(pthread_create(&tid[i], NULL, judge_job, &many[i]), 0);
    }
    for (int i = 0; i < 8; i++) {
        pthread_join(tid[i], NULL);
        cr_expect(many[i].text && !strcmp(many[i].text, alone[i % 2].text), "thread %d", i);
        free(many[i].text);
    }
    free(alone[0].text);
    free(alone[1].text);
    free(t);
}

/* An LSE the producer kept in bfloat16: its rounding fails H5 as float32 (widened), named by the
 * diagnosis; declared as stored in bfloat16, it is judged at that type's resolution and passes. */
Test(api, an_lse_kept_in_bfloat16_is_judged_at_its_resolution)
{
    brute *t = calloc(1, sizeof *t);
    inputs(t, 5);
    t->causal = 1;
    attend(t, 0);
    for (size_t i = 0; i < HQ * LQ; i++)
        t->lse[i] = fc_round(t->lse[i], FC_BF16);
    flexcheck_problem *p = problem_of(t, 0);
    flexcheck_verdict *v = NULL;
    cr_assert_eq(judge(p, t, &v), FLEXCHECK_OK, "%s", flexcheck_problem_errmsg(p));
    cr_expect_eq(flexcheck_verdict_outcome(v), FLEXCHECK_FAIL, "%s", flexcheck_verdict_text(v));
    cr_expect(strstr(flexcheck_verdict_text(v), "H5 LSE"), "%s", flexcheck_verdict_text(v));
    flexcheck_verdict_free(v);
    cr_assert_eq(flexcheck_problem_set_output_types(p, NULL, "bfloat16"), FLEXCHECK_OK);
    cr_assert_eq(judge(p, t, &v), FLEXCHECK_OK, "%s", flexcheck_problem_errmsg(p));
    cr_expect_eq(flexcheck_verdict_outcome(v), FLEXCHECK_PASS, "%s", flexcheck_verdict_text(v));
    cr_expect(strstr(flexcheck_verdict_text(v), "LSE stored as bfloat16, judged at its "
                                                "resolution"), "%s", flexcheck_verdict_text(v));
    flexcheck_verdict_free(v);
    flexcheck_problem_free(p);
    free(t);
}

/* ==== Issue 35: the in-process API against a hostile caller ====
 * The header's promises held to the letter: a NULL handle still clears the verdict, set_shape
 * refuses what the library cannot run, the worst element is a NaN when there is one, a
 * budget refuses before anything is allocated, an interrupt stops a judge, and the host's
 * OpenBLAS thread count is never overwritten. */
#include <cblas.h> /* openblas_{get,set}_num_threads: the process-wide count the judge touches */
#include <time.h>

Test(api35, a_null_problem_still_sets_the_verdict_to_null)
{
    float x[1] = {0};
    flexcheck_verdict *vd = (flexcheck_verdict *)x; /* a caller's stale pointer */
    cr_expect_eq(flexcheck_judge(NULL, x, 1, x, 1, x, 1, x, 1, NULL, 0, &vd), FLEXCHECK_EINVAL);
    cr_expect_null(vd, "the header promises *verdict NULL for every status but OK");
}

/* Each limit refused with the figure and the limit, and the shape set before left as it was:
 * the problem still judges. */
Test(api35, set_shape_refuses_what_the_library_cannot_run_naming_the_limit)
{
    static const struct {
        int32_t b, hq, hkv, lq, lk, d, dv;
        const char *says;
    } cases[] = {
        {1, HQ, HKV, LQ, LK, 2000, D, "set_shape: D = 2000, must be at most 1024"},
        {1, HQ, HKV, LQ, LK, D, 1025, "set_shape: Dv = 1025, must be at most 1024"},
        {1, 8192, 8192, LQ, LK, D, D, "set_shape: Hq = 8192, must be at most 4096"},
        {1, HQ, HKV, (1 << 28) + 1, LK, D, D, "set_shape: Lq = 268435457, must be at most "
                                              "268435456"},
        {1, HQ, HKV, LQ, INT32_MAX, D, D, "set_shape: Lk = 2147483647, must be at most"},
    };
    brute *t = calloc(1, sizeof *t);
    inputs(t, 21);
    attend(t, 0);
    flexcheck_problem *p = problem_of(t, 0);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        cr_expect_eq(flexcheck_problem_set_shape(p, cases[c].b, cases[c].hq, cases[c].hkv,
                                                 cases[c].lq, cases[c].lk, cases[c].d,
                                                 cases[c].dv),
                     FLEXCHECK_EINVAL, "case %zu accepted", c);
        cr_expect(strstr(flexcheck_problem_errmsg(p), cases[c].says), "case %zu: '%s'", c,
                  flexcheck_problem_errmsg(p));
    }
    flexcheck_verdict *v = NULL;
    cr_assert_eq(judge(p, t, &v), FLEXCHECK_OK, "%s", flexcheck_problem_errmsg(p));
    cr_expect_eq(flexcheck_verdict_outcome(v), FLEXCHECK_PASS, "%s", flexcheck_verdict_text(v));
    flexcheck_verdict_free(v);
    flexcheck_problem_free(p);
    free(t);
}

/* A NaN is the worst element even beside a finite error of 100; without a NaN, an infinity. */
Test(api35, the_worst_element_is_the_nan_then_the_infinity)
{
    brute *t = calloc(1, sizeof *t);
    inputs(t, 22);
    attend(t, 0);
    flexcheck_problem *p = problem_of(t, 0);
    size_t big = ((size_t)1 * LQ + 3) * D + 5, odd = ((size_t)2 * LQ + 30) * D + 7;
    t->o[big] += 100.0f;
    static const float planted[2] = {NAN, INFINITY};
    for (int i = 0; i < 2; i++) {
        float keep = t->o[odd];
        t->o[odd] = planted[i];
        flexcheck_verdict *v = NULL;
        cr_assert_eq(judge(p, t, &v), FLEXCHECK_OK, "%s", flexcheck_problem_errmsg(p));
        int32_t w[4] = {-1, -1, -1, -1};
        double err = flexcheck_verdict_worst(v, w);
        cr_expect(w[0] == 0 && w[1] == 2 && w[2] == 30 && w[3] == 7,
                  "%s planted at (0, 2, 30, 7), worst %g at (%d, %d, %d, %d)",
                  i ? "inf" : "NaN", err, w[0], w[1], w[2], w[3]);
        cr_expect(i ? err == INFINITY : isnan(err), "error %g", err);
        flexcheck_verdict_free(v);
        t->o[odd] = keep;
    }
    flexcheck_problem_free(p);
    free(t);
}

/* The CLI's budget and its defaults: the refusal names the estimate, the budget and the
 * parameter that raises it, before any array is read (none is given here). */
Test(api35, a_problem_over_its_budget_is_refused_naming_estimate_budget_and_parameter)
{
    flexcheck_problem *p = flexcheck_problem_new();
    cr_assert_eq(flexcheck_problem_set_shape(p, 1, 8, 8, 1 << 18, 1 << 18, 64, 64), FLEXCHECK_OK);
    const char *work = "B 1, Hq 8, Lq 262144, Lk 262144, D 64, Dv 64 need about 7.04e+13 "
                       "multiply-adds, over the work budget max_work = 1.1e+12 (1099511627776): "
                       "raise max_work to judge it";
    cr_expect_eq(flexcheck_problem_check(p), FLEXCHECK_EINVAL);
    cr_expect(strstr(flexcheck_problem_errmsg(p), work), "'%s'", flexcheck_problem_errmsg(p));
    flexcheck_verdict *v = (flexcheck_verdict *)p;
    cr_expect_eq(flexcheck_judge(p, NULL, 0, NULL, 0, NULL, 0, NULL, 0, NULL, 0, &v),
                 FLEXCHECK_EINVAL);
    cr_expect_null(v);
    cr_expect(strstr(flexcheck_problem_errmsg(p), work), "'%s'", flexcheck_problem_errmsg(p));

    cr_assert_eq(flexcheck_problem_set_budget(p, (uint64_t)1 << 40, (uint64_t)1 << 50),
                 FLEXCHECK_OK);
    cr_expect_eq(flexcheck_problem_check(p), FLEXCHECK_OK, "%s", flexcheck_problem_errmsg(p));
    cr_assert_eq(flexcheck_problem_set_budget(p, 1 << 20, (uint64_t)1 << 50), FLEXCHECK_OK);
    cr_expect_eq(flexcheck_problem_check(p), FLEXCHECK_EINVAL);
    cr_expect(strstr(flexcheck_problem_errmsg(p), "GiB (inputs, oracle, buffers, reference "
                     "scratch), over the memory budget max_memory = 0.000977 GiB (1048576 "
                     "bytes): raise max_memory to judge it"), "'%s'", flexcheck_problem_errmsg(p));
    cr_assert_eq(flexcheck_problem_set_budget(p, 0, 0), FLEXCHECK_OK); /* the defaults again */
    cr_expect_eq(flexcheck_problem_check(p), FLEXCHECK_EINVAL);
    cr_expect(strstr(flexcheck_problem_errmsg(p), work), "'%s'", flexcheck_problem_errmsg(p));
    flexcheck_problem_free(p);
}

/* The budget in force: what was set, else the defaults, the same figures a refusal names. */
Test(api37, get_budget_says_the_budget_a_judge_is_held_to)
{
    flexcheck_problem *p = flexcheck_problem_new();
    uint64_t mem = 0, work = 0;
    cr_assert_eq(flexcheck_problem_set_budget(p, 12345, 678), FLEXCHECK_OK);
    cr_assert_eq(flexcheck_problem_get_budget(p, &mem, &work), FLEXCHECK_OK);
    cr_expect(mem == 12345 && work == 678, "%llu %llu", (unsigned long long)mem,
              (unsigned long long)work);
    cr_assert_eq(flexcheck_problem_set_budget(p, 0, 0), FLEXCHECK_OK);
    cr_assert_eq(flexcheck_problem_get_budget(p, &mem, NULL), FLEXCHECK_OK);
    cr_assert_eq(flexcheck_problem_get_budget(p, NULL, &work), FLEXCHECK_OK);
    cr_expect_eq(work, (uint64_t)1 << 40);
    /* the default memory is the one a refusal names: a problem over it, work not binding */
    cr_assert_eq(flexcheck_problem_set_shape(p, 64, 64, 64, 1 << 18, 1 << 18, 1024, 1024),
                 FLEXCHECK_OK);
    uint64_t huge = (uint64_t)1 << 62;
    cr_assert_eq(flexcheck_problem_set_budget(p, 0, huge), FLEXCHECK_OK);
    cr_expect_eq(flexcheck_problem_check(p), FLEXCHECK_EINVAL);
    char want[80];
    snprintf(want, sizeof want, "(%llu bytes): raise max_memory", (unsigned long long)mem);
    cr_expect(strstr(flexcheck_problem_errmsg(p), want), "'%s' lacks '%s'",
              flexcheck_problem_errmsg(p), want);
    cr_expect_eq(flexcheck_problem_get_budget(NULL, &mem, &work), FLEXCHECK_EINVAL);
    flexcheck_problem_free(p);
}

/* An interrupt requested before the judge stops it at its first check: no verdict, a message
 * naming the call; the handle then judges as before (the request is gone). */
Test(api35, an_interrupt_stops_the_judge_and_the_handle_judges_again)
{
    brute *t = calloc(1, sizeof *t);
    inputs(t, 23);
    attend(t, 0);
    flexcheck_problem *p = problem_of(t, 0);
    cr_assert_eq(flexcheck_problem_interrupt(p), FLEXCHECK_OK);
    flexcheck_verdict *v = (flexcheck_verdict *)t;
    cr_expect_eq(judge(p, t, &v), FLEXCHECK_EINTR);
    cr_expect_null(v);
    /* seen at the first check, between two heads of the float64 oracle's first panel */
    cr_expect(strstr(flexcheck_problem_errmsg(p), "judge: interrupted "
                     "(flexcheck_problem_interrupt) in the reference (the float64 oracle): no "
                     "verdict"), "'%s'", flexcheck_problem_errmsg(p));
    cr_assert_eq(judge(p, t, &v), FLEXCHECK_OK, "%s", flexcheck_problem_errmsg(p));
    cr_expect_eq(flexcheck_verdict_outcome(v), FLEXCHECK_PASS, "%s", flexcheck_verdict_text(v));
    flexcheck_verdict_free(v);
    cr_expect_eq(flexcheck_problem_interrupt(NULL), FLEXCHECK_EINVAL);
    flexcheck_problem_free(p);
    free(t);
}

/* A judge that runs for seconds: B 1, Hq 8, Hkv 2, L 2048, D 64, float32, v = 0 (so the
 * output 0 is right and no diagnosis runs: the time is the oracle's and the baseline's). */
enum { LONG_HQ = 8, LONG_HKV = 2, LONG_L = 2048, LONG_D = 64 };
typedef struct long_judge {
    flexcheck_problem *p;
    float *q, *k, *v, *o;
    flexcheck_status st;
    flexcheck_verdict *vd;
    int done; /* atomics */
} long_judge;

static void long_judge_init(long_judge *j)
{
    size_t nq = (size_t)LONG_HQ * LONG_L * LONG_D, nk = (size_t)LONG_HKV * LONG_L * LONG_D;
    *j = (long_judge){.p = flexcheck_problem_new(), .q = malloc(nq * sizeof(float)),
                      .k = malloc(nk * sizeof(float)), .v = calloc(nk, sizeof(float)),
                      .o = calloc(nq, sizeof(float))};
    cr_assert(j->p && j->q && j->k && j->v && j->o);
    unsigned s = 5;
    for (size_t i = 0; i < nq; i++)
        j->q[i] = draw(&s);
    for (size_t i = 0; i < nk; i++)
        j->k[i] = draw(&s);
    cr_assert_eq(flexcheck_problem_set_shape(j->p, 1, LONG_HQ, LONG_HKV, LONG_L, LONG_L, LONG_D,
                                             LONG_D), FLEXCHECK_OK);
}

static void *long_judge_run(void *arg)
{
    long_judge *j = arg;
    size_t nq = (size_t)LONG_HQ * LONG_L * LONG_D, nk = (size_t)LONG_HKV * LONG_L * LONG_D;
    j->st = flexcheck_judge(j->p, j->q, nq, j->k, nk, j->v, nk, j->o, nq, NULL, 0, &j->vd);
    __atomic_store_n(&j->done, 1, __ATOMIC_SEQ_CST);
    return NULL;
}

static void long_judge_free(long_judge *j)
{
    flexcheck_verdict_free(j->vd);
    flexcheck_problem_free(j->p);
    free(j->q);
    free(j->k);
    free(j->v);
    free(j->o);
}

/* With BLAS set to 2 threads, a judge's reference sets it to 1 while it runs: the sign that the
 * judge is inside the reference. 1 when seen, 0 when the judge ended first. */
static int wait_for_the_reference(long_judge *j)
{
    while (!__atomic_load_n(&j->done, __ATOMIC_SEQ_CST)) {
        if (openblas_get_num_threads() == 1)
            return 1;
        nanosleep(&(struct timespec){0, 200000}, NULL);
    }
    return 0;
}

/* The host sets its own thread count while a judge runs: the judge leaves it; and without
 * interference the count the host had is back after the judge. */
Test(api35, a_judge_never_overwrites_the_hosts_blas_thread_count)
{
    for (int meddle = 0; meddle < 2; meddle++) {
        openblas_set_num_threads(2);
        long_judge j;
        long_judge_init(&j);
        pthread_t tid;
        cr_assert_eq(pthread_create(&tid, NULL, long_judge_run, &j), 0);
        int seen = wait_for_the_reference(&j);
        if (meddle && seen)
            openblas_set_num_threads(3); /* the host's own setting, mid-judge */
        pthread_join(tid, NULL);
        cr_assert(seen, "the judge ended before its reference was seen running");
        cr_expect_eq(j.st, FLEXCHECK_OK, "%s", flexcheck_problem_errmsg(j.p));
        cr_expect_eq(openblas_get_num_threads(), meddle ? 3 : 2,
                     "%s: the count after the judge is %d", meddle ? "set mid-judge to 3"
                                                                   : "2 before the judge",
                     openblas_get_num_threads());
        long_judge_free(&j);
    }
}

/* Interrupted from another thread while its reference runs, a long judge returns
 * FLEXCHECK_EINTR with no verdict (ASan's leak check covers the rest); the handle then judges
 * a small problem as before. */
Test(api35, an_interrupt_from_another_thread_stops_a_running_judge)
{
    openblas_set_num_threads(2);
    long_judge j;
    long_judge_init(&j);
    pthread_t tid;
    cr_assert_eq(pthread_create(&tid, NULL, long_judge_run, &j), 0);
    int seen = wait_for_the_reference(&j);
    cr_expect_eq(flexcheck_problem_interrupt(j.p), FLEXCHECK_OK);
    pthread_join(tid, NULL);
    cr_assert(seen, "the judge ended before its reference was seen running");
    cr_expect_eq(j.st, FLEXCHECK_EINTR, "status %d: %s", (int)j.st,
                 flexcheck_problem_errmsg(j.p));
    /* stopped where it was, inside a reference (the oracle, or the baseline had the oracle
     * just ended), not after the gates */
    cr_expect(strstr(flexcheck_problem_errmsg(j.p), "interrupted (flexcheck_problem_interrupt) "
                     "in the reference ("), "'%s'", flexcheck_problem_errmsg(j.p));
    cr_expect_null(j.vd);
    brute *t = calloc(1, sizeof *t);
    inputs(t, 24);
    attend(t, 0);
    cr_assert_eq(flexcheck_problem_set_shape(j.p, 1, HQ, HKV, LQ, LK, D, D), FLEXCHECK_OK);
    cr_assert_eq(flexcheck_problem_set_dtype(j.p, "float16"), FLEXCHECK_OK);
    flexcheck_verdict *v = NULL;
    cr_assert_eq(judge(j.p, t, &v), FLEXCHECK_OK, "%s", flexcheck_problem_errmsg(j.p));
    cr_expect_eq(flexcheck_verdict_outcome(v), FLEXCHECK_PASS, "%s", flexcheck_verdict_text(v));
    flexcheck_verdict_free(v);
    free(t);
    long_judge_free(&j);
}

/* ---- rows (API version 3): a sample of query tokens ---- */

/* A sample of 8 of the 40 query tokens: the right output passes and its text says what was
 * judged; an output wrong on one token only is caught by the sample that holds the token (the
 * last: placed in every sample) and its worst element is in the whole output's coordinates;
 * rows past Lq and below -1 are refused naming rows. */
Test(api36, a_sample_of_rows_is_judged_and_said)
{
    brute t = {.causal = 1};
    inputs(&t, 11);
    attend(&t, 0);
    flexcheck_problem *p = problem_of(&t, 0);
    cr_assert_eq(flexcheck_problem_set_rows(p, 8, 3), FLEXCHECK_OK);
    flexcheck_verdict *v = NULL;
    cr_assert_eq(judge(p, &t, &v), FLEXCHECK_OK, "%s", flexcheck_problem_errmsg(p));
    cr_expect_eq(flexcheck_verdict_outcome(v), FLEXCHECK_PASS, "%s", flexcheck_verdict_text(v));
    cr_expect(strstr(flexcheck_verdict_text(v), "judged a sample: 8 of 40 query tokens (every "
                     "batch entry and head), "), "%s", flexcheck_verdict_text(v));
    cr_expect(strstr(flexcheck_verdict_text(v), "uniform from seed 3; a defect on 1 random token "
                     "escapes it with chance 0.8,"), "%s", flexcheck_verdict_text(v));
    flexcheck_verdict_free(v);
    for (int d = 0; d < D; d++) /* head 3, the last token */
        t.o[((size_t)3 * LQ + LQ - 1) * D + d] = -t.o[((size_t)3 * LQ + LQ - 1) * D + d] - 0.5f;
    cr_assert_eq(judge(p, &t, &v), FLEXCHECK_OK, "%s", flexcheck_problem_errmsg(p));
    cr_expect_eq(flexcheck_verdict_outcome(v), FLEXCHECK_FAIL, "%s", flexcheck_verdict_text(v));
    int32_t at[4];
    flexcheck_verdict_worst(v, at);
    cr_expect(at[0] == 0 && at[1] == 3 && at[2] == LQ - 1, "(%d, %d, %d, %d)", at[0], at[1],
              at[2], at[3]);
    /* H1 failed on the sample's bounds: judged again on every row (docs/tolerance.md) */
    cr_expect(strstr(flexcheck_verdict_text(v), "a sample of 8 of 40 query tokens (seed 3) "
                     "failed H1") && strstr(flexcheck_verdict_text(v), "judged again on every "
                     "row"), "%s", flexcheck_verdict_text(v));
    flexcheck_verdict_free(v);
    /* the smallest power-of-two work budgets that take the sample, and every row */
    uint64_t ws = 1, wa = 1;
    for (; ws < ((uint64_t)1 << 40); ws *= 2) {
        cr_assert_eq(flexcheck_problem_set_budget(p, 0, ws), FLEXCHECK_OK);
        if (judge(p, &t, &v) == FLEXCHECK_OK)
            break;
    }
    flexcheck_verdict_free(v);
    cr_assert_eq(flexcheck_problem_set_rows(p, 0, 3), FLEXCHECK_OK);
    for (; wa < ((uint64_t)1 << 40); wa *= 2) {
        cr_assert_eq(flexcheck_problem_set_budget(p, 0, wa), FLEXCHECK_OK);
        if (judge(p, &t, &v) == FLEXCHECK_OK)
            break;
    }
    flexcheck_verdict_free(v);
    cr_assert_lt(ws, wa);
    /* every row past the budget: the sample's failure stands, saying it is not confirmed */
    cr_assert_eq(flexcheck_problem_set_rows(p, 8, 3), FLEXCHECK_OK);
    cr_assert_eq(flexcheck_problem_set_budget(p, 0, ws), FLEXCHECK_OK);
    cr_assert_eq(judge(p, &t, &v), FLEXCHECK_OK, "%s", flexcheck_problem_errmsg(p));
    cr_expect_eq(flexcheck_verdict_outcome(v), FLEXCHECK_FAIL, "%s", flexcheck_verdict_text(v));
    cr_expect(strstr(flexcheck_verdict_text(v), "judged a sample: 8 of 40") &&
              strstr(flexcheck_verdict_text(v), "failure rests on the sample's bounds "
                     "(every row's are never tighter), not confirmed on every row: budget: ") &&
              strstr(flexcheck_verdict_text(v), "raise max_work"), "%s",
              flexcheck_verdict_text(v));
    flexcheck_verdict_free(v);
    cr_assert_eq(flexcheck_problem_set_budget(p, 0, 0), FLEXCHECK_OK);
    cr_assert_eq(flexcheck_problem_set_rows(p, LQ + 1, 3), FLEXCHECK_OK);
    cr_expect_eq(judge(p, &t, &v), FLEXCHECK_EINVAL);
    cr_expect(strstr(flexcheck_problem_errmsg(p), "rows = 41: past the problem's 40 query tokens "
                     "(Lq)"), "%s", flexcheck_problem_errmsg(p));
    cr_expect_eq(flexcheck_problem_set_rows(p, -2, 0), FLEXCHECK_EINVAL);
    cr_expect(strstr(flexcheck_problem_errmsg(p), "rows = -2: a number of query tokens"), "%s",
              flexcheck_problem_errmsg(p));
    flexcheck_problem_free(p);
}
