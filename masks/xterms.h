/*
 * xterms.h - the explicit terms of docs/semantics.md section 8: a boolean mask and an additive
 * score bias given element by element, [Bm, Hm, Lq, Lk] with Bm in {1, B} and Hm in {1, Hq}
 * (1 = one for all batch entries / heads, PyTorch's broadcast). They are what FlexAttention's
 * mask_mod and an additive score_mod compute, stored: any mask, any bias. The families of
 * mask.h (causal, window, chunk) stay the fast paths; an explicit mask is ANDed with them.
 *
 * Plain data and MASK_HD functions only (the rules of mask.h: <stdint.h>, no allocation), so the
 * kernels and the block-mask builders can read the same layout the reference reads. Validation,
 * sizes and costs are host code: attn_problem_check and attn_case_cost (problem.h).
 *
 * Layout (the fixture format and the C API will store exactly this):
 *   mask  rows of ceil(Lk / 8) bytes, row r = (sb * Hm + sh) * Lq + tq, sb = Bm > 1 ? b : 0,
 *         sh = Hm > 1 ? h : 0; key token tk is bit (tk & 7) of byte tk >> 3, least significant
 *         bit first (numpy.packbits(..., bitorder="little")). 1 = allowed. The bits of the last
 *         byte past Lk are never read. Bit-packed because a mask is the one term that can be as
 *         large as the attention matrix itself: 32k x 32k x 32 heads is 4 GiB packed, 32 GiB as
 *         bytes (the budget counts it either way, problem.h).
 *   bias  float32 rows of Lk values, the same row numbering. float32 because the kernels add it
 *         to a float32 score (FlexAttention's score_mod runs in the score's float32), the
 *         inputs q, k, v are float32 arrays already, and the float64 oracle widens a float32
 *         exactly: float64 storage would double the largest term for bits no kernel can use.
 * Both pointers are the caller's (not owned, like score_terms.sinks); NULL switches the term
 * off and then no other field is read. Token indices are the stored ones: for a packed batch
 * (B = 1) the packed query and key axes, whose sequences still never see each other (section
 * 8); paging never changes them.
 */
#ifndef FLEXCHECK_MASK_XTERMS_H
#define FLEXCHECK_MASK_XTERMS_H

#include <stdint.h>

#include "masks/mask.h"

typedef struct attn_xmask {
    const uint8_t *bits;  /* [Bm * Hm * Lq * ceil(Lk / 8)] packed rows, or NULL: off */
    int32_t bm, hm;       /* 1 or B, 1 or Hq */
    int32_t lq, lk;       /* the problem's Lq and Lk (checked: a mask of another grid is refused) */
} attn_xmask;

typedef struct attn_xbias {
    const float *vals;    /* [Bm * Hm * Lq * Lk], finite, |value| <= XTERMS_MAX_BIAS; NULL: off */
    int32_t bm, hm;       /* 1 or B, 1 or Hq */
    int32_t lq, lk;       /* the problem's Lq and Lk */
} attn_xbias;

/* Largest |bias| accepted. A bias is a logit shift: ALiBi's largest slope (1/2) at a million
 * tokens is 5e5. Far below float's range, so score + bias never overflows in float32, and a
 * "minus infinity" bias (HF's finfo.min additive masks) is refused: masking is the explicit
 * mask's job, where a masked key is out of the softmax exactly (section 8). */
#define XTERMS_MAX_BIAS 1e6

/* Bytes of one packed mask row of lk keys. */
MASK_HD int64_t xmask_row_bytes(int32_t lk)
{
    return ((int64_t)lk + 7) / 8;
}

/* The row of a [bm, hm, lq, *] term that (batch entry b, query head h, query token tq) reads:
 * broadcast dims of 1 read index 0. */
MASK_HD int64_t xterm_row(int32_t bm, int32_t hm, int32_t lq, int32_t b, int32_t h, int32_t tq)
{
    return ((int64_t)(bm > 1 ? b : 0) * hm + (hm > 1 ? h : 0)) * lq + tq;
}

/* The packed mask row of (b, h, tq), and whether it allows key token tk (0 <= tk < lk). */
MASK_HD const uint8_t *xmask_row(attn_xmask m, int32_t b, int32_t h, int32_t tq)
{
    return m.bits + xterm_row(m.bm, m.hm, m.lq, b, h, tq) * xmask_row_bytes(m.lk);
}

MASK_HD int xmask_bit(const uint8_t *row, int32_t tk)
{
    return (row[tk >> 3] >> (tk & 7)) & 1;
}

/* The bias row of (b, h, tq): value tk is the bias of key token tk. */
MASK_HD const float *xbias_row(attn_xbias x, int32_t b, int32_t h, int32_t tq)
{
    return x.vals + xterm_row(x.bm, x.hm, x.lq, b, h, tq) * (int64_t)x.lk;
}

/* The first key token in [lo, hi) that row allows, hi when none (0 <= lo, hi <= lk). Whole
 * zero bytes are skipped eight keys at a time. */
MASK_HD int32_t xmask_first(const uint8_t *row, int32_t lo, int32_t hi)
{
    int32_t j = lo;
    while (j < hi) {
        if ((j & 7) == 0 && hi - j >= 8 && row[j >> 3] == 0) {
            j += 8;
            continue;
        }
        if (xmask_bit(row, j))
            return j;
        j++;
    }
    return hi;
}

/* One past the last key token in [lo, hi) that row allows, lo when none. */
MASK_HD int32_t xmask_end(const uint8_t *row, int32_t lo, int32_t hi)
{
    int32_t j = hi;
    while (j > lo) {
        if ((j & 7) == 0 && j - lo >= 8 && row[(j >> 3) - 1] == 0) {
            j -= 8;
            continue;
        }
        if (xmask_bit(row, j - 1))
            return j;
        j--;
    }
    return lo;
}

/* THE predicate with an explicit mask (section 8): the families allow the pair (mask.h's
 * mask_pair_allowed, which refuses tokens out of range and of other sequences first, so the
 * mask is never read out of bounds) AND the explicit mask does (x.bits NULL: no explicit
 * mask). */
MASK_HD int mask_pair_allowed_x(mask_params m, seq_view v, attn_xmask x, int32_t b, int32_t h,
                                int32_t tq, int32_t tk)
{
    if (!mask_pair_allowed(m, v, tq, tk))
        return 0;
    return !x.bits || xmask_bit(xmask_row(x, b, h, tq), tk);
}

#endif
