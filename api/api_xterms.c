/*
 * api_xterms.c - the explicit mask and bias of the public API (API version 4; include/
 * flexcheck.h, docs/semantics.md section 8): copied into the handle, the mask bit-packed as
 * masks/xterms.h lays it out; attn_problem_check holds them to the shape when the problem is
 * judged or checked (api/flexcheck.c's build).
 */
#include <stdlib.h>
#include <string.h>

#include "api/api_internal.h"
#include "masks/problem.h"

/* The element count [bm, hm, Lq, Lk] of a term for p's shape, into *want; a message naming the
 * call and what is wrong otherwise. The broadcast dims are checked here too, so that a caller
 * hears of a wrong one where it made it (attn_problem_check says the same at judge time, when a
 * shape set later no longer fits). */
static flexcheck_status term_elems(flexcheck_problem *p, const char *call, const void *data,
                                   int32_t bm, int32_t hm, size_t n, size_t *want)
{
    if (!p->shaped)
        return fail(p, FLEXCHECK_EINVAL, "%s: no shape: call flexcheck_problem_set_shape first",
                    call);
    if (!data != !n)
        return fail(p, FLEXCHECK_EINVAL, "%s: %s", call,
                    data ? "n = 0 with an array given" : "array NULL with n > 0");
    if (!data)
        return FLEXCHECK_OK;
    if (bm != 1 && bm != p->b)
        return fail(p, FLEXCHECK_EINVAL, "%s: bm = %d: must be 1 (every batch entry) or B = %d",
                    call, (int)bm, (int)p->b);
    if (hm != 1 && hm != p->hq)
        return fail(p, FLEXCHECK_EINVAL, "%s: hm = %d: must be 1 (every head) or Hq = %d", call,
                    (int)hm, (int)p->hq);
    /* each factor is at most 2^28 (set_shape's limits): the product may still overflow */
    if (fc_mul4_size((size_t)bm, (size_t)hm, (size_t)p->lq, (size_t)p->lk, want) || n != *want)
        return fail(p, FLEXCHECK_EINVAL, "%s: n = %zu elements, [bm, hm, Lq, Lk] = [%d, %d, %d, "
                    "%d] needs %zu", call, n, (int)bm, (int)hm, (int)p->lq, (int)p->lk, *want);
    return FLEXCHECK_OK;
}

EXPORT flexcheck_status flexcheck_problem_set_explicit_mask(flexcheck_problem *p,
                                                            const uint8_t *mask, int32_t bm,
                                                            int32_t hm, size_t n)
{
    API_ENTER(p);
    size_t want = 0;
    flexcheck_status st = term_elems(p, "set_explicit_mask", mask, bm, hm, n, &want);
    if (st)
        return st;
    uint8_t *bits = NULL;
    if (mask) {
        size_t rows = want / (size_t)p->lk; /* want > 0: n > 0, so Lk > 0 */
        bits = malloc(rows * (size_t)xmask_row_bytes(p->lk));
        if (!bits)
            return fail(p, FLEXCHECK_ENOMEM, "set_explicit_mask: out of memory for %zu bits",
                        want);
        attn_xmask_pack(mask, rows, p->lk, bits);
    }
    free(p->xbits);
    p->xbits = bits;
    int32_t dims[4] = {bm, hm, p->lq, p->lk};
    memcpy(p->xmask_dims, dims, sizeof dims);
    return ok(p);
}

EXPORT flexcheck_status flexcheck_problem_set_bias(flexcheck_problem *p, const float *bias,
                                                   int32_t bm, int32_t hm, size_t n)
{
    API_ENTER(p);
    size_t want = 0;
    flexcheck_status st = term_elems(p, "set_bias", bias, bm, hm, n, &want);
    if (st)
        return st;
    float *c = NULL;
    if (bias) {
        size_t bytes;
        if (fc_mul_size(want, sizeof *c, &bytes) || !(c = malloc(bytes)))
            return fail(p, FLEXCHECK_ENOMEM, "set_bias: out of memory for %zu values", want);
        memcpy(c, bias, bytes);
    }
    free(p->xbias);
    p->xbias = c;
    int32_t dims[4] = {bm, hm, p->lq, p->lk};
    memcpy(p->xbias_dims, dims, sizeof dims);
    return ok(p);
}
