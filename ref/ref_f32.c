/*
 * ref_f32.c - the float pipeline for one (panel, batch entry, head): the fp32 reference
 * (dt = FC_F32) and the same-precision baseline O_lp of docs/tolerance.md (dt = fp16/bf16).
 *   fp32: S = scale * Q.K^T (sgemm), softmax in fp32, O = P.V (sgemm).
 *   lp:   K' = rnd(scale * K); S = rnd(Q.K'^T); P = rnd(softmax(S)); O = rnd(P.V),
 *         gemms accumulating in fp32, rnd = round to nearest even in dt (lowp.h).
 * Score terms (docs/semantics.md section 7), where a naive implementation applies them: the
 * soft-cap in fp32 on the fp32 score (lp: on the rounded score), c * tanhf(s / c); the sink in
 * the fp32 softmax, as one more term of the max and the sum with no value.
 * Keys outside the mask get probability exactly 0; a row with no allowed key gets output 0
 * and LSE -inf (the sink, with sinks).
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

/* Masked scores become -inf (so exp gives exactly 0 below) and the row's max is returned.
 * Eight interleaved partial maxima in blocks of eight (a shape the compiler keeps in
 * registers): one running max is a chain of dependent compares, the slowest part of a
 * 4k-key row. The maximum does not depend on the order, and x > m ? x : m keeps m when x
 * is NaN, so NaN scores never win (they reach the sum instead). */
static float mask_and_max(float *s, const uint8_t *allowed, int32_t n)
{
    float acc[8];
    for (int t = 0; t < 8; t++)
        acc[t] = -INFINITY;
    int32_t j = 0;
    for (; j + 8 <= n; j += 8)
        for (int t = 0; t < 8; t++) {
            float x = allowed[j + t] ? s[j + t] : -INFINITY;
            s[j + t] = x;
            acc[t] = x > acc[t] ? x : acc[t];
        }
    for (; j < n; j++) {
        float x = allowed[j] ? s[j] : -INFINITY;
        s[j] = x;
        acc[0] = x > acc[0] ? x : acc[0];
    }
    float mx = -INFINITY;
    for (int t = 0; t < 8; t++)
        mx = acc[t] > mx ? acc[t] : mx;
    return mx;
}

/* s[j] = exp(s[j] - mx) in place; returns their sum, kept in eight interleaved partial sums
 * (faster than one running sum, and it loses fewer bits on long rows). */
static float exp_and_sum(float *s, int32_t n, float mx)
{
    float acc[8] = {0};
    int32_t j = 0;
    for (; j + 8 <= n; j += 8)
        for (int t = 0; t < 8; t++) {
            s[j + t] = expf(s[j + t] - mx);
            acc[t] += s[j + t];
        }
    for (; j < n; j++) {
        s[j] = expf(s[j] - mx);
        acc[0] += s[j];
    }
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/* Scores to probabilities in place, max-shifted, in fp32. Returns 0 for a row with no
 * allowed key (*lse = the sink or -inf, the row is all zeros). A NaN score never wins the
 * max, but exp(NaN - max) puts NaN into the sum, so the row's probabilities and LSE are NaN:
 * NaN in a visible input is never dropped. softcap 0 is off; sink -inf is no sink. */
static int softmax_row(float *s, const uint8_t *allowed, int32_t n, fc_dtype dt, float softcap,
                       float sink, float *lse)
{
    if (!memchr(allowed, 1, (size_t)n)) {
        memset(s, 0, (size_t)n * sizeof *s);
        *lse = sink;
        return 0;
    }
    if (dt != FC_F32)
        for (int32_t j = 0; j < n; j++)
            s[j] = fc_round(s[j], dt); /* lp: S is rounded before the softmax */
    if (softcap > 0) /* before the mask: masked scores become -inf below, never -cap */
        for (int32_t j = 0; j < n; j++)
            s[j] = softcap * tanhf(s[j] / softcap);
    float mx = mask_and_max(s, allowed, n);
    if (sink > mx)
        mx = sink;
    /* the sink's term joins the sum but has no probability of its own (no value) */
    float sum = exp_and_sum(s, n, mx) + expf(sink - mx);
    /* sum >= 1 (the max term is exp(0)) unless it is NaN, and then the row is NaN anyway;
     * masked entries are exp(-inf) = 0 and stay 0. */
    float inv = 1.0f / sum;
    int32_t j = 0;
    for (; j + 8 <= n; j += 8) /* blocks of eight: the compiler emits vector multiplies */
        for (int t = 0; t < 8; t++)
            s[j + t] *= inv;
    for (; j < n; j++)
        s[j] *= inv;
    if (dt != FC_F32)
        for (j = 0; j < n; j++)
            s[j] = fc_round(s[j], dt); /* lp: P is rounded before the P.V product */
    *lse = mx + logf(sum);
    return 1;
}

/* The gemm mixes every key of the hull into every row, so a non-finite value at a key
 * that some other row of the panel sees (0 * inf, 0 * NaN) would leak into this row.
 * Such a row is recomputed from its own allowed keys only; finite inputs never take
 * this path. */
static void recompute_if_nonfinite(float *o, const float *p, const uint8_t *allowed,
                                   const float *v, int32_t n, int32_t dv)
{
    int bad = 0;
    for (int32_t x = 0; x < dv; x++)
        bad |= !isfinite(o[x]);
    if (!bad)
        return;
    for (int32_t x = 0; x < dv; x++) {
        float acc = 0.0f;
        for (int32_t j = 0; j < n; j++)
            if (allowed[j])
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
    if (c->dt != FC_F32) {
        k = scaled_keys(c, k, n);
        alpha = 1.0f;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, n, d, alpha, q, d, k, d, 0.0f, s,
                n);
    uint8_t nonempty[REF_PANEL_ROWS];
    for (int32_t i = 0; i < rows; i++) {
        float row_lse;
        nonempty[i] = (uint8_t)softmax_row(s + (size_t)i * n, pn->allowed + (size_t)i * n, n,
                                           c->dt, (float)p->terms.softcap,
                                           (float)terms_sink(&p->terms, h), &row_lse);
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
        recompute_if_nonfinite(orow, s + (size_t)i * n, pn->allowed + (size_t)i * n, v, n, dv);
        for (int32_t x = 0; c->dt != FC_F32 && x < dv; x++)
            orow[x] = fc_round(orow[x], c->dt);
    }
}
