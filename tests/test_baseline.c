/*
 * test_baseline.c - the same-precision baselines on the gate's own very-negative-logits cases
 * (docs/tolerance.md "When the baseline drowns"): scores around -1e5, where a bfloat16 score
 * has an ulp of 512 and a float16 one overflows. There the baseline that rounds its scores to
 * the input type is as far from the truth as the output itself, so an output judged against it
 * passes whatever it holds. The rows are judged against the float32-score baseline instead: a
 * correct output passes and a GQA head mix-up (query head h reading kv head h % Hkv instead of
 * h / (Hq / Hkv)), which once passed at an H1 ratio of 0.55 (bfloat16) or was "outside the
 * contract" (float16), fails.
 *
 * Expected outcomes follow from the construction: the correct output is the float64 oracle
 * rounded to the dtype (within half an output ulp of the truth), the mix-up is the oracle of
 * another kv head for four of the six query heads (a different answer by the size of the
 * output: NMSE about 0.7).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/lowp.h"
#include "ci/gate.h"
#include "ci/gate_case.h"
#include "fixtures/fix.h"
#include "judge/judge.h"
#include "ref/ref.h"

/* The matrix's M5 neglogits case in dtype dt (quick size). */
static void neglogits_case(fc_dtype dt, fix_case *fc)
{
    gate_case *cases;
    int n;
    fc_err err;
    cr_assert_eq(gate_matrix(GATE_QUICK, 1, &cases, &n, NULL, &err), FC_OK, "%s", err.msg);
    int found = -1;
    for (int i = 0; i < n && found < 0; i++)
        if (cases[i].input == GI_NEG_LOGITS && cases[i].gp.dtype == dt && !cases[i].all_dtypes)
            found = i;
    cr_assert_geq(found, 0, "no neglogits case in %s", fc_dtype_name(dt));
    cr_assert_eq(gate_case_inputs(&cases[found], NULL, fc, &err), FC_OK, "%s", err.msg);
    free(cases);
}

/* O as a kernel that maps query head h to kv head kv(h) computes it, exactly (float64, then
 * rounded to dt): each query head's rows through the oracle of a one-head problem. */
static void oracle_with_heads(const fix_case *fc, int mixup, float *o)
{
    const attn_problem *p = &fc->prob;
    int32_t lq = p->seq.lq, lk = p->seq.lk, d = p->d, dv = p->dv;
    attn_problem one = *p;
    one.hq = one.hkv = 1;
    one.seq.batch = 1;
    one.terms.sinks = NULL;
    double *o64 = malloc(sizeof(double) * (size_t)lq * (size_t)dv);
    double *l64 = malloc(sizeof(double) * (size_t)lq);
    cr_assert(o64 && l64 && p->seq.batch == 1 && !p->terms.sinks);
    for (int32_t h = 0; h < p->hq; h++) {
        int32_t kv = mixup ? h % p->hkv : h / (p->hq / p->hkv);
        fc_err err;
        cr_assert_eq(ref_attention_f64(&one, fc->q + (size_t)h * lq * d,
                                       fc->k + (size_t)kv * lk * d, fc->v + (size_t)kv * lk * dv,
                                       o64, l64, &err), FC_OK, "%s", err.msg);
        for (size_t i = 0; i < (size_t)lq * (size_t)dv; i++)
            o[(size_t)h * lq * dv + i] = fc_round((float)o64[i], fc->dtype);
    }
    free(o64);
    free(l64);
}

static double nmse(const float *o, const double *g, size_t n)
{
    double e = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        e += (o[i] - g[i]) * (o[i] - g[i]);
        s += g[i] * g[i];
    }
    return e / s;
}

static void judged(fc_dtype dt)
{
    fix_case fc;
    neglogits_case(dt, &fc);
    judge_case jc = fix_judge_case(&fc);
    size_t no = attn_o_elems(&fc.prob);
    float *right = malloc(sizeof(float) * no), *mixed = malloc(sizeof(float) * no);
    cr_assert(right && mixed);
    oracle_with_heads(&fc, 0, right);
    oracle_with_heads(&fc, 1, mixed);
    double e = nmse(mixed, fc.out, no);
    cr_assert(e > 0.3, "%s: the mix-up is a different answer (NMSE %g)", fc_dtype_name(dt), e);

    judge_lp lp = {0};
    fc_err err;
    cr_assert_eq(judge_baseline(&jc, &lp, &err), FC_OK, "%s", err.msg);
    cr_assert(lp.o32s, "%s: the dtype's baseline drowns here, so the float32-score one is "
              "computed", fc_dtype_name(dt));
    rep_verdict v;
    int pass = judge_given(&jc, right, NULL, NULL, &lp, &v, &err);
    cr_expect_eq(pass, 1, "%s: the correct output: %s", fc_dtype_name(dt),
                 rep_verdict_reason(&v));
    cr_expect(v.lp32s_rows > 0 && strstr(v.lp_note, "float32-score baseline"), "%s: %zu rows: "
              "%s", fc_dtype_name(dt), v.lp32s_rows, v.lp_note);
    pass = judge_given(&jc, mixed, NULL, NULL, &lp, &v, &err);
    cr_expect(pass == 0 && !v.outside && v.first_fail == REP_H1,
              "%s: the head mix-up (NMSE %.2f) must fail H1: pass %d outside %d: %s",
              fc_dtype_name(dt), e, pass, v.outside, rep_verdict_reason(&v));
    cr_expect(v.h1_ratio > 5, "%s: by a clear margin (ratio %g)", fc_dtype_name(dt),
              v.h1_ratio);
    judge_lp_free(&lp);
    free(right);
    free(mixed);
    fix_case_free(&fc);
}

Test(neglogits, bfloat16_a_head_mixup_fails_where_the_rounded_score_baseline_drowns)
{
    judged(FC_BF16);
}

Test(neglogits, float16_a_head_mixup_fails_where_the_rounded_score_baseline_overflows)
{
    judged(FC_F16);
}

/* float32's baseline keeps its scores in float32 already: it holds every row here (its error
 * is 0.011 of max|O_gold|), and nothing else is computed. */
Test(neglogits, float32_needs_no_second_baseline)
{
    fix_case fc;
    neglogits_case(FC_F32, &fc);
    judge_case jc = fix_judge_case(&fc);
    judge_lp lp = {0};
    fc_err err;
    cr_assert_eq(judge_baseline(&jc, &lp, &err), FC_OK, "%s", err.msg);
    cr_expect(!lp.o32s && !lp.lse32s);
    judge_lp_free(&lp);
    fix_case_free(&fc);
}
