/* xterms.c - the host side of the explicit mask and bias (xterms.h): validation, sizes and the
 * words a budget refusal uses for them (problem.h). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "masks/problem.h"

/* The dims every explicit term shares, checked against the problem's: one line naming the term,
 * the dim and both values. *bytes: the term's size (elem bytes per element, or per packed row
 * when packed). */
static fc_status check_dims(const attn_problem *p, const char *what, int32_t bm, int32_t hm,
                            int32_t lq, int32_t lk, int packed, size_t elem, size_t *bytes,
                            fc_err *err)
{
    if (bm != 1 && bm != p->seq.batch)
        return fc_errf(err, FC_EINVAL, "explicit %s: Bm = %d: must be 1 (one for every batch "
                       "entry) or B = %d", what, (int)bm, (int)p->seq.batch);
    if (hm != 1 && hm != p->hq)
        return fc_errf(err, FC_EINVAL, "explicit %s: Hm = %d: must be 1 (one for every head) or "
                       "Hq = %d", what, (int)hm, (int)p->hq);
    if (lq != p->seq.lq || lk != p->seq.lk)
        return fc_errf(err, FC_EINVAL, "explicit %s: its grid is Lq x Lk = %d x %d, the "
                       "problem's %d x %d", what, (int)lq, (int)lk, (int)p->seq.lq,
                       (int)p->seq.lk);
    /* lq, lk are the problem's, checked within [0, MASK_MAX_LEN] before this is called */
    size_t last = packed ? (size_t)xmask_row_bytes(lk) : (size_t)lk;
    if (fc_mul4_size((size_t)bm, (size_t)hm, (size_t)lq, last, bytes) ||
        fc_mul3_size(*bytes, elem, 1, bytes) || *bytes > (size_t)INT64_MAX / 8)
        return fc_errf(err, FC_EINVAL, "explicit %s [%d, %d, %d, %d]: too large to address",
                       what, (int)bm, (int)hm, (int)lq, (int)lk);
    return FC_OK;
}

fc_status attn_xterms_check(const attn_problem *p, fc_err *err)
{
    size_t bytes;
    const attn_xmask *m = &p->xmask;
    if (m->bits) {
        fc_status st = check_dims(p, "mask", m->bm, m->hm, m->lq, m->lk, 1, 1, &bytes, err);
        if (st)
            return st;
    }
    const attn_xbias *x = &p->xbias;
    if (!x->vals)
        return FC_OK;
    fc_status st = check_dims(p, "bias", x->bm, x->hm, x->lq, x->lk, 0, sizeof(float), &bytes,
                              err);
    if (st)
        return st;
    size_t n = bytes / sizeof(float), lk = (size_t)x->lk, lq = (size_t)x->lq;
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x->vals[i]) || fabsf(x->vals[i]) > XTERMS_MAX_BIAS) {
            size_t row = i / lk, hm = (size_t)x->hm;
            return fc_errf(err, FC_EINVAL, "explicit bias at (b, h, q, k) = (%zu, %zu, %zu, %zu) "
                           "is %g: must be finite with |bias| <= %g (mask a key out with the "
                           "explicit mask, not with a bias)", row / lq / hm, row / lq % hm,
                           row % lq, i % lk, (double)x->vals[i], XTERMS_MAX_BIAS);
        }
    return FC_OK;
}

/* a * b and a + b, saturating at UINT64_MAX. */
static uint64_t smul(uint64_t a, uint64_t b)
{
    return a && b > UINT64_MAX / a ? UINT64_MAX : a * b;
}

/* Bytes of a [bm, hm, lq, last] term of elem-byte elements, from dims that may not have been
 * checked yet (negative counts as 0). */
static uint64_t term_bytes(int32_t bm, int32_t hm, int32_t lq, int64_t last, uint64_t elem)
{
    uint64_t d[4] = {(uint64_t)(bm > 0 ? bm : 0), (uint64_t)(hm > 0 ? hm : 0),
                     (uint64_t)(lq > 0 ? lq : 0), (uint64_t)(last > 0 ? last : 0)};
    return smul(smul(smul(d[0], d[1]), smul(d[2], d[3])), elem);
}

static uint64_t mask_bytes(const attn_problem *p)
{
    const attn_xmask *m = &p->xmask;
    return m->bits ? term_bytes(m->bm, m->hm, m->lq, xmask_row_bytes(m->lk > 0 ? m->lk : 0), 1)
                   : 0;
}

static uint64_t bias_bytes(const attn_problem *p)
{
    const attn_xbias *x = &p->xbias;
    return x->vals ? term_bytes(x->bm, x->hm, x->lq, x->lk, sizeof(float)) : 0;
}

uint64_t attn_xterms_bytes(const attn_problem *p)
{
    uint64_t a = mask_bytes(p), b = bias_bytes(p);
    return b > UINT64_MAX - a ? UINT64_MAX : a + b;
}

void attn_xterms_text(char *buf, size_t cap, const attn_problem *p)
{
    const double gib = (double)((uint64_t)1 << 30);
    const attn_xmask *m = &p->xmask;
    const attn_xbias *x = &p->xbias;
    char mt[128] = "", bt[128] = "";
    if (m->bits)
        snprintf(mt, sizeof mt, "the explicit mask [%d, %d, %d, %d] (bit-packed) %.3g GiB",
                 (int)m->bm, (int)m->hm, (int)m->lq, (int)m->lk, (double)mask_bytes(p) / gib);
    if (x->vals)
        snprintf(bt, sizeof bt, "the explicit bias [%d, %d, %d, %d] (float32) %.3g GiB",
                 (int)x->bm, (int)x->hm, (int)x->lq, (int)x->lk, (double)bias_bytes(p) / gib);
    if (cap == 0)
        return;
    if (!*mt && !*bt)
        buf[0] = '\0';
    else
        snprintf(buf, cap, "; of which %s%s%s", mt, *mt && *bt ? " and " : "", bt);
}

void attn_xmask_pack(const uint8_t *dense, size_t rows, int32_t lk, uint8_t *bits)
{
    size_t rb = (size_t)xmask_row_bytes(lk), n = (size_t)(lk > 0 ? lk : 0);
    for (size_t r = 0; r < rows; r++) {
        uint8_t *out = bits + r * rb;
        const uint8_t *in = dense + r * n;
        for (size_t i = 0; i < rb; i++)
            out[i] = 0;
        for (size_t j = 0; j < n; j++)
            out[j >> 3] |= (uint8_t)((in[j] != 0) << (j & 7));
    }
}
