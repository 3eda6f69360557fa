/*
 * ref_f64.c - the float64 oracle for one (panel, batch entry, head): the fixtures' out and
 * lse. The float inputs are widened exactly to double, S = scale * Q.K^T (dgemm), softmax
 * in double, O = P.V (dgemm); the soft-cap c * tanh(s / c) and the sink in double (docs/
 * semantics.md section 7), and the explicit bias and mask (section 8). Same structure as
 * ref_f32.c, line for line, so a reader can hold both; the only differences are the element
 * type and that inputs are copied to double first.
 */
#include <cblas.h>
#include <math.h>
#include <string.h>

#include "ref/ref_internal.h"

static void widen(double *dst, const float *src, size_t count)
{
    for (size_t i = 0; i < count; i++)
        dst[i] = (double)src[i];
}

/* Values widened to double; keys no row of the panel may see become zeros, because their
 * probability 0 times a NaN or inf value would still be NaN (see ref_f32.c). */
static const double *visible_values(ref_call *c, const ref_panel *pn, const float *v)
{
    double *out = c->vbuf;
    size_t dv = (size_t)c->p->dv;
    for (int32_t j = 0; j < pn->n; j++) {
        if (pn->seen[j])
            widen(out + (size_t)j * dv, v + (size_t)j * dv, dv);
        else
            memset(out + (size_t)j * dv, 0, dv * sizeof *out);
    }
    return out;
}

/* One row's scores s[0, n) over the panel's hull to probabilities in place, in double:
 * exactly 0 outside the row's span, a max-shifted softmax inside it. Returns 0 (and *lse =
 * the sink, -inf without) for a row with no allowed key. NaN scores reach the sum and so
 * every probability and the LSE (see ref_f32.c). softcap 0 is off; sink -inf is no sink. The
 * explicit terms (section 8): the bias added after the soft-cap, then the keys the explicit
 * mask refuses inside the span set to -inf (whatever their score: NaN included), so e^-inf = 0
 * keeps them out of the max, the sum and P.V; the span starts and ends at allowed keys, so the
 * max of a non-empty row is one of them. */
static int softmax_row(double *s, int32_t n, const ref_rowx *rx, double softcap, double sink,
                       double *lse)
{
    ref_span sp = rx->sp;
    memset(s, 0, (size_t)sp.lo * sizeof *s);
    memset(s + sp.hi, 0, (size_t)(n - sp.hi) * sizeof *s);
    if (sp.lo == sp.hi) {
        *lse = sink;
        return 0;
    }
    for (int32_t j = sp.lo; softcap > 0 && j < sp.hi; j++)
        s[j] = softcap * tanh(s[j] / softcap);
    for (int32_t j = sp.lo; rx->bias && j < sp.hi; j++)
        s[j] += (double)rx->bias[j];
    for (int32_t j = ref_rowx_next_refused(rx, sp.lo); j < sp.hi;
         j = ref_rowx_next_refused(rx, j + 1))
        s[j] = -INFINITY;
    double mx = -INFINITY;
    for (int32_t j = sp.lo; j < sp.hi; j++)
        if (s[j] > mx)
            mx = s[j];
    if (sink > mx)
        mx = sink;
    double sum = exp(sink - mx); /* the sink's term: in the sum, no probability of its own */
    for (int32_t j = sp.lo; j < sp.hi; j++) {
        s[j] = exp(s[j] - mx);
        sum += s[j];
    }
    for (int32_t j = sp.lo; j < sp.hi; j++)
        s[j] /= sum;
    *lse = mx + log(sum);
    return 1;
}

/* A row the gemm gave a non-finite value is recomputed from its own allowed keys only, so a
 * NaN or inf value seen by another row of the panel (or refused by this row's explicit mask)
 * cannot leak in (see ref_f32.c). */
static void recompute_if_nonfinite(double *o, const double *p, const ref_rowx *rx,
                                   const float *v, int32_t dv)
{
    int bad = 0;
    for (int32_t x = 0; x < dv; x++)
        bad |= !isfinite(o[x]);
    if (!bad)
        return;
    for (int32_t x = 0; x < dv; x++) {
        double acc = 0.0;
        for (int32_t j = rx->sp.lo; j < rx->sp.hi; j++)
            if (ref_rowx_allows(rx, j))
                acc += p[j] * (double)v[(size_t)j * (size_t)dv + (size_t)x];
        o[x] = acc;
    }
}

void ref_head_f64(ref_call *c, const ref_panel *pn, int32_t b, int32_t h)
{
    const attn_problem *p = c->p;
    int32_t rows = pn->rows, n = pn->n, d = p->d, dv = p->dv;
    size_t qr = ref_q_row(c, pn, b, h), kr = ref_k_row(c, pn, b, h);
    double *o = c->o64 + qr * (size_t)dv, *lse = c->lse64 ? c->lse64 + qr : NULL;
    if (n == 0) { /* no row of this panel sees any key */
        memset(o, 0, (size_t)rows * (size_t)dv * sizeof *o);
        for (int32_t i = 0; lse && i < rows; i++)
            lse[i] = terms_sink(&p->terms, h);
        return;
    }
    const float *v = c->v + kr * (size_t)dv;
    double *q = c->qbuf, *k = c->kbuf, *s = c->s;
    widen(q, c->q + qr * (size_t)d, (size_t)rows * (size_t)d);
    widen(k, c->k + kr * (size_t)d, (size_t)n * (size_t)d);
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, n, d, p->scale, q, d, k, d, 0.0,
                s, n);
    uint8_t nonempty[REF_PANEL_ROWS];
    ref_rowx rx[REF_PANEL_ROWS];
    for (int32_t i = 0; i < rows; i++) {
        double row_lse;
        rx[i] = ref_row_x(c, pn, b, h, i);
        nonempty[i] = (uint8_t)softmax_row(s + (size_t)i * n, n, &rx[i], p->terms.softcap,
                                           terms_sink(&p->terms, h), &row_lse);
        if (lse)
            lse[i] = row_lse;
    }
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, dv, n, 1.0, s, n,
                visible_values(c, pn, v), dv, 0.0, o, dv);
    for (int32_t i = 0; i < rows; i++) {
        double *orow = o + (size_t)i * dv;
        if (!nonempty[i]) { /* exactly 0, whatever the gemm made of masked keys */
            memset(orow, 0, (size_t)dv * sizeof *orow);
            continue;
        }
        recompute_if_nonfinite(orow, s + (size_t)i * n, &rx[i], v, dv);
    }
}
