/*
 * ref_f32.c - the float pipeline for one (panel, batch entry, head): the fp32 reference
 * (dt = FC_F32) and the same-precision baseline O_lp of docs/tolerance.md (dt = fp16/bf16).
 *   fp32: S = scale * Q.K^T (sgemm), softmax in fp32, O = P.V (sgemm).
 *   lp:   K' = rnd(scale * K); S = rnd(Q.K'^T); P = rnd(softmax(S)); O = rnd(P.V),
 *         gemms accumulating in fp32, rnd = round to nearest even in dt (lowp.h).
 *   lp with scores32 (ref_attention_lp32s): S = scale * Q.K^T as fp32; P = rnd(softmax(S));
 *         O = rnd(P.V).
 * Score terms (docs/semantics.md section 7), where a naive implementation applies them: the
 * soft-cap in fp32 on the fp32 score (lp: on the rounded score), c * tanhf(s / c); the sink in
 * the fp32 softmax, as one more term of the max and the sum with no value.
 * The explicit terms (section 8) as a kernel's score_mod and mask: the bias added in fp32
 * after the soft-cap, the keys the explicit mask refuses set to -inf after that.
 * Keys outside a row's span (ref_internal.h) get probability exactly 0; a row with no allowed
 * key gets output 0 and LSE -inf (the sink, with sinks). The softmax's hot loops (max, exp
 * and sum, scale) are ref_vec.c's, over the span only.
 */
#include <cblas.h>
#include <math.h>
#include <string.h>

#include "base/lowp.h"
#include "ref/ref_internal.h"

/* lp: the keys of the hull, scaled in fp32 and rounded to dt (spec: scale applied to K). */
static const float *scaled_keys(ref_call *c, const float *k, int32_t n)
{
    float *out = c->kbuf, scale = (float)c->p->scale;
    size_t count = (size_t)n * (size_t)c->p->d;
    for (size_t i = 0; i < count; i++)
        out[i] = fc_round(scale * k[i], c->dt);
    return out;
}

/* Values for the P.V gemm. P is exactly 0 at keys no row of the panel may see, but
 * 0 * NaN = NaN, so such keys' values are replaced by zeros: masked-out keys can hold
 * anything without touching the output. */
static const float *visible_values(ref_call *c, const ref_panel *pn, const float *v)
{
    if (pn->all_seen)
        return v;
    float *out = c->vbuf;
    size_t dv = (size_t)c->p->dv;
    for (int32_t j = 0; j < pn->n; j++) {
        if (pn->seen[j])
            memcpy(out + (size_t)j * dv, v + (size_t)j * dv, dv * sizeof *out);
        else
            memset(out + (size_t)j * dv, 0, dv * sizeof *out);
    }
    return out;
}

/* One row's scores s[0, n) over the panel's hull to probabilities in place, in fp32:
 * exactly 0 outside the row's span, a max-shifted softmax inside it. Returns 0 for a row
 * with no allowed key (*lse = the sink or -inf, the row is all zeros). A NaN score never wins
 * the max, but exp(NaN - max) puts NaN into the sum, so the row's probabilities and LSE are
 * NaN: NaN in a visible input is never dropped. softcap 0 is off; sink -inf is no sink. S is
 * rounded to s_dt and P to dt first (FC_F32: not rounded). The explicit bias is added after
 * the soft-cap; keys the explicit mask refuses inside the span become -inf (expf(-inf) = 0 in
 * both of ref_vec.c's paths, tests/test_xmask.c), after everything else, so neither the cap
 * nor the bias brings them back. */
static int softmax_row(float *s, int32_t n, const ref_rowx *rx, fc_dtype s_dt, fc_dtype dt,
                       float softcap, float sink, const ref_vec_ops *vec, float *lse)
{
    ref_span sp = rx->sp;
    /* keys outside the span get probability exactly 0, whatever their score (NaN included) */
    memset(s, 0, (size_t)sp.lo * sizeof *s);
    memset(s + sp.hi, 0, (size_t)(n - sp.hi) * sizeof *s);
    if (sp.lo == sp.hi) {
        *lse = sink;
        return 0;
    }
    float *x = s + sp.lo;
    int32_t m = sp.hi - sp.lo;
    if (s_dt != FC_F32)
        for (int32_t j = 0; j < m; j++)
            x[j] = fc_round(x[j], s_dt); /* lp: S is rounded before the softmax */
    if (softcap > 0) /* libm's tanhf: soft-capped cases are few and small, not the cost */
        for (int32_t j = 0; j < m; j++)
            x[j] = softcap * tanhf(x[j] / softcap);
    if (rx->bias)
        for (int32_t j = 0; j < m; j++)
            x[j] += rx->bias[sp.lo + j];
    for (int32_t j = ref_rowx_next_refused(rx, sp.lo); j < sp.hi;
         j = ref_rowx_next_refused(rx, j + 1))
        s[j] = -INFINITY;
    float mx = vec->max(x, m);
    if (sink > mx)
        mx = sink;
    /* the sink's term joins the sum but has no probability of its own (no value) */
    float sum = vec->exp_sum(x, m, mx) + expf(sink - mx);
    /* sum >= 1 (the max term is exp(0)) unless it is NaN, and then the row is NaN anyway */
    vec->scale(x, m, 1.0f / sum);
    if (dt != FC_F32)
        for (int32_t j = 0; j < m; j++)
            x[j] = fc_round(x[j], dt); /* lp: P is rounded before the P.V product */
    *lse = mx + logf(sum);
    return 1;
}

/* The gemm mixes every key of the hull into every row, so a non-finite value at a key
 * that some other row of the panel sees (0 * inf, 0 * NaN) would leak into this row.
 * Such a row is recomputed from its own allowed keys only; finite inputs never take this
 * path. */
static void recompute_if_nonfinite(float *o, const float *p, const ref_rowx *rx, const float *v,
                                   int32_t dv)
{
    int bad = 0;
    for (int32_t x = 0; x < dv; x++)
        bad |= !isfinite(o[x]);
    if (!bad)
        return;
    for (int32_t x = 0; x < dv; x++) {
        float acc = 0.0f;
        for (int32_t j = rx->sp.lo; j < rx->sp.hi; j++)
            if (ref_rowx_allows(rx, j))
                acc += p[j] * v[(size_t)j * (size_t)dv + (size_t)x];
        o[x] = acc;
    }
}

void ref_head_f32(ref_call *c, const ref_panel *pn, int32_t b, int32_t h)
{
    const attn_problem *p = c->p;
    int32_t rows = pn->rows, n = pn->n, d = p->d, dv = p->dv;
    size_t qr = ref_q_row(c, pn, b, h), kr = ref_k_row(c, pn, b, h);
    float *o = c->o32 + qr * (size_t)dv, *lse = c->lse32 ? c->lse32 + qr : NULL;
    if (n == 0) { /* no row of this panel sees any key */
        memset(o, 0, (size_t)rows * (size_t)dv * sizeof *o);
        for (int32_t i = 0; lse && i < rows; i++)
            lse[i] = (float)terms_sink(&p->terms, h);
        return;
    }
    const float *q = c->q + qr * (size_t)d, *k = c->k + kr * (size_t)d;
    const float *v = c->v + kr * (size_t)dv;
    float alpha = (float)p->scale, *s = c->s;
    fc_dtype s_dt = c->scores32 ? FC_F32 : c->dt; /* where the scores are rounded */
    if (s_dt != FC_F32) {
        k = scaled_keys(c, k, n);
        alpha = 1.0f;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, n, d, alpha, q, d, k, d, 0.0f, s,
                n);
    const ref_vec_ops *vec = ref_vec_ops_here();
    uint8_t nonempty[REF_PANEL_ROWS];
    ref_rowx rx[REF_PANEL_ROWS];
    for (int32_t i = 0; i < rows; i++) {
        float row_lse;
        rx[i] = ref_row_x(c, pn, b, h, i);
        nonempty[i] = (uint8_t)softmax_row(s + (size_t)i * n, n, &rx[i], s_dt, c->dt,
                                           (float)p->terms.softcap,
                                           (float)terms_sink(&p->terms, h), vec, &row_lse);
        if (lse)
            lse[i] = row_lse;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, dv, n, 1.0f, s, n,
                visible_values(c, pn, v), dv, 0.0f, o, dv);
    for (int32_t i = 0; i < rows; i++) {
        float *orow = o + (size_t)i * dv;
        if (!nonempty[i]) { /* exactly 0, whatever the gemm made of masked keys */
            memset(orow, 0, (size_t)dv * sizeof *orow);
            continue;
        }
        recompute_if_nonfinite(orow, s + (size_t)i * n, &rx[i], v, dv);
        for (int32_t x = 0; c->dt != FC_F32 && x < dv; x++)
            orow[x] = fc_round(orow[x], c->dt);
    }
}
