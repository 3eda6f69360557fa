/*
 * api_paged.c - paged K/V in the public API (API version 6; include/flexcheck.h,
 * docs/fixtures.md "Paged K/V"): the cache and its table copied into the handle, and at judge
 * time held to the logical K/V the caller passes (they must be its gather, bit for bit), so
 * that the diagnosis's page hypotheses (diag/hyps_paged.c) read the very values the verdict
 * was computed from.
 */
#include <stdlib.h>
#include <string.h>

#include "api/api_internal.h"

EXPORT flexcheck_status flexcheck_problem_set_paged(flexcheck_problem *p, const float *k_cache,
                                                    const float *v_cache, int32_t num_pages,
                                                    int32_t page_size,
                                                    const int32_t *block_table, int32_t nrows,
                                                    int32_t max_pages)
{
    API_ENTER(p);
    if (!k_cache) {
        fix_paged_free(&p->pg);
        return ok(p);
    }
    if (!p->shaped)
        return fail(p, FLEXCHECK_EINVAL, "set_paged: no shape: call flexcheck_problem_set_shape "
                    "first");
    if (!v_cache || !block_table || num_pages < 0 || page_size < 1 || nrows < 1 ||
        max_pages < 0 || num_pages > MASK_MAX_LEN || max_pages > MASK_MAX_LEN)
        return fail(p, FLEXCHECK_EINVAL, "set_paged: give k_cache, v_cache and block_table, "
                    "num_pages >= 0, page_size >= 1, nrows >= 1 and max_pages >= 0 (got %d, %d, "
                    "%d, %d%s)", (int)num_pages, (int)page_size, (int)nrows, (int)max_pages,
                    !v_cache || !block_table ? "; an array NULL" : "");
    size_t slots, kb, vb, tb;
    if (fc_mul4_size((size_t)num_pages, (size_t)page_size, (size_t)p->hkv, sizeof(float), &slots) ||
        fc_mul_size(slots, (size_t)p->d, &kb) || fc_mul_size(slots, (size_t)p->dv, &vb) ||
        fc_mul4_size((size_t)nrows, (size_t)max_pages, sizeof(int32_t), 1, &tb))
        return fail(p, FLEXCHECK_EINVAL, "set_paged: the cache's size overflows");
    fix_paged pg = {num_pages, page_size, nrows, max_pages, malloc(tb + 1), malloc(kb + 1),
                    malloc(vb + 1)};
    if (!pg.block_table || !pg.k_cache || !pg.v_cache) {
        fix_paged_free(&pg);
        return fail(p, FLEXCHECK_ENOMEM, "set_paged: out of memory for %zu bytes", kb + vb + tb);
    }
    memcpy(pg.block_table, block_table, tb);
    memcpy(pg.k_cache, k_cache, kb);
    memcpy(pg.v_cache, v_cache, vb);
    fix_paged_free(&p->pg);
    p->pg = pg;
    return ok(p);
}

/* The first element where x and y differ (bitwise), or n. */
static size_t first_diff(const float *x, const float *y, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (memcmp(x + i, y + i, sizeof(float)))
            return i;
    return n;
}

flexcheck_status api_paged_view(flexcheck_problem *p, const attn_problem *a, const float *k,
                                const float *v, diag_paged *view, int *on)
{
    *on = p->pg.k_cache != NULL;
    if (!*on)
        return FLEXCHECK_OK;
    int32_t rows = a->seq.packed ? a->seq.nseq : a->seq.batch;
    if (p->pg.nrows != rows)
        return fail(p, FLEXCHECK_EINVAL, "set_paged: block_table has %d rows: one per sequence, "
                    "%d", (int)p->pg.nrows, (int)rows);
    for (int32_t r = 0; r < rows; r++)
        if (fix_paged_pages_of(a, p->pg.page_size, r) > p->pg.max_pages)
            return fail(p, FLEXCHECK_EINVAL, "set_paged: sequence %d needs %d pages of %d keys, "
                        "block_table's rows have %d", (int)r,
                        (int)fix_paged_pages_of(a, p->pg.page_size, r), (int)p->pg.page_size,
                        (int)p->pg.max_pages);
    size_t nk = attn_k_elems(a), nv = attn_v_elems(a);
    float *gk = malloc(sizeof(float) * (nk + 1)), *gv = malloc(sizeof(float) * (nv + 1));
    flexcheck_status st = FLEXCHECK_OK;
    fc_err err;
    if (!gk || !gv) {
        st = fail(p, FLEXCHECK_ENOMEM, "set_paged: out of memory for the gathered K/V");
    } else if (fix_paged_gather(&p->pg, p->pg.block_table, a, p->dtype, gk, gv, NULL, NULL,
                                &err)) {
        st = fail(p, FLEXCHECK_EINVAL, "set_paged: %s", err.msg);
    } else {
        size_t ik = first_diff(gk, k, nk), iv = ik < nk ? nv : first_diff(gv, v, nv);
        if (ik < nk || iv < nv)
            st = fail(p, FLEXCHECK_EINVAL, "%s[%zu] = %.9g but block_table gathers %.9g from "
                      "%s: k and v must be the paged cache's logical K/V", ik < nk ? "k" : "v",
                      ik < nk ? ik : iv, ik < nk ? (double)k[ik] : (double)v[iv],
                      ik < nk ? (double)gk[ik] : (double)gv[iv], ik < nk ? "k_cache" : "v_cache");
    }
    free(gk);
    free(gv);
    *view = fix_diag_paged_of(&p->pg);
    return st;
}
