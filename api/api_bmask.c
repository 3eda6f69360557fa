/*
 * api_bmask.c - a producer's block mask through the public API (API version 5; include/
 * flexcheck.h, docs/semantics.md section 4): PyTorch's BlockMask tensors as int32 arrays,
 * copied into the handle in bmask.h's rectangular layout and validated there (every count
 * within its list's width, every listed id in range and once in its row), so that a bad one is
 * refused where it was made. flexcheck_judge holds it to the full predicate, the families AND
 * the explicit mask (check/output.c, bmask_find_defects_x): a list that drops an allowed tile
 * or marks full a tile with a masked element fails the verdict, named.
 */
#include <stdlib.h>
#include <string.h>

#include "api/api_internal.h"

#define CALL "set_block_mask"

/* The [nb, nh, nqb] dims against p's shape, one message naming the first that does not fit. */
static flexcheck_status check_dims(flexcheck_problem *p, int32_t qb, int32_t kb, int32_t nb,
                                   int32_t nh, int32_t nqb, int32_t width, int32_t full_width)
{
    if (!bmask_block_size_ok(qb) || !bmask_block_size_ok(kb))
        return fail(p, FLEXCHECK_EINVAL, CALL ": block sizes (%d, %d): must be powers of two in "
                    "[%d, %d] (PyTorch's BLOCK_SIZE)", (int)qb, (int)kb, BMASK_MIN_BLOCK,
                    BMASK_MAX_BLOCK);
    if (nb != 1 && nb != p->b)
        return fail(p, FLEXCHECK_EINVAL, CALL ": nb = %d: must be 1 (one for every batch entry) "
                    "or B = %d", (int)nb, (int)p->b);
    if (nh != 1 && nh != p->hq)
        return fail(p, FLEXCHECK_EINVAL, CALL ": nh = %d: must be 1 (one for every head) or "
                    "Hq = %d", (int)nh, (int)p->hq);
    if (nqb != bmask_nblocks(p->lq, qb))
        return fail(p, FLEXCHECK_EINVAL, CALL ": nqb = %d query tiles: Lq = %d in tiles of %d "
                    "makes %d", (int)nqb, (int)p->lq, (int)qb, (int)bmask_nblocks(p->lq, qb));
    if (width < 0 || full_width < 0)
        return fail(p, FLEXCHECK_EINVAL, CALL ": %s = %d: must be >= 0",
                    width < 0 ? "width" : "full_width", (int)(width < 0 ? width : full_width));
    return FLEXCHECK_OK;
}

/* One list's counts [rows] within [0, width] and [0, NKB] (a row lists distinct tiles), copied
 * with their rows (width ids apart in the caller's array) into bm's list. */
static flexcheck_status copy_list(flexcheck_problem *p, bmask *bm, int full, const int32_t *cnt,
                                  const int32_t *ids, int32_t width)
{
    const char *what = full ? "full_kv" : "kv";
    size_t rows = bmask_nrows(bm), per = (size_t)bm->nh * (size_t)bm->nqb;
    int32_t *out = full ? bm->full_kv_num_blocks : bm->kv_num_blocks;
    int32_t most = width < bm->nkb ? width : bm->nkb;
    for (size_t r = 0; cnt && r < rows; r++) {
        if (cnt[r] < 0 || cnt[r] > most)
            return fail(p, FLEXCHECK_EINVAL, CALL ": %s_num_blocks[%zu][%zu][%zu] = %d: must be "
                        "in [0, %d] (the width of %s_indices is %d, and a row lists at most NKB "
                        "= %d distinct tiles)", what, r / per,
                        r / (size_t)bm->nqb % (size_t)bm->nh, r % (size_t)bm->nqb, (int)cnt[r],
                        (int)most, what, (int)width, (int)bm->nkb);
        out[r] = cnt[r];
        if (cnt[r]) /* never NULL + 0: a list of width 0 may come without an array */
            memcpy(bmask_ids(bm, full, r), ids + r * (size_t)width, (size_t)cnt[r] * sizeof *ids);
    }
    return FLEXCHECK_OK;
}

EXPORT flexcheck_status flexcheck_problem_set_block_mask(
    flexcheck_problem *p, int32_t q_block_size, int32_t kv_block_size, int32_t nb, int32_t nh,
    int32_t nqb, const int32_t *kv_num_blocks, const int32_t *kv_indices, int32_t width,
    const int32_t *full_kv_num_blocks, const int32_t *full_kv_indices, int32_t full_width)
{
    API_ENTER(p);
    if (!kv_num_blocks && !kv_indices && !full_kv_num_blocks && !full_kv_indices) {
        bmask_free(&p->bm);
        p->has_bm = 0;
        return ok(p);
    }
    if (!p->shaped)
        return fail(p, FLEXCHECK_EINVAL, CALL ": no shape: call flexcheck_problem_set_shape "
                    "first");
    /* NULL indices only for a list with no slots; the full lists go together */
    if (!kv_num_blocks || (!kv_indices && width > 0))
        return fail(p, FLEXCHECK_EINVAL, CALL ": %s is NULL", kv_num_blocks ? "kv_indices"
                                                                            : "kv_num_blocks");
    if ((full_kv_num_blocks && !full_kv_indices && full_width > 0) ||
        (!full_kv_num_blocks && full_kv_indices))
        return fail(p, FLEXCHECK_EINVAL, CALL ": %s is NULL: give both full lists or neither "
                    "(no full blocks, PyTorch's full_kv_num_blocks None)",
                    full_kv_num_blocks ? "full_kv_indices" : "full_kv_num_blocks");
    if (!full_kv_num_blocks && full_width)
        return fail(p, FLEXCHECK_EINVAL, CALL ": full_width = %d with no full lists: must be 0",
                    (int)full_width);
    flexcheck_status st = check_dims(p, q_block_size, kv_block_size, nb, nh, nqb, width,
                                     full_width);
    if (st)
        return st;
    bmask bm;
    fc_err err;
    /* a row holds at most NKB ids (copy_list holds counts to it): a wider caller's array is
     * padding, and is not copied */
    int32_t nkb = bmask_nblocks(p->lk, kv_block_size);
    int32_t w = width > full_width ? width : full_width;
    w = w < nkb ? w : nkb;
    fc_status fs = bmask_alloc(&bm, q_block_size, kv_block_size, p->lq, p->lk, nb, nh, w, &err);
    if (fs)
        return fail(p, fs == FC_ENOMEM ? FLEXCHECK_ENOMEM : FLEXCHECK_EINVAL, CALL ": %s",
                    err.msg);
    if ((st = copy_list(p, &bm, 0, kv_num_blocks, kv_indices, width)) ||
        (st = copy_list(p, &bm, 1, full_kv_num_blocks, full_kv_indices, full_width))) {
        bmask_free(&bm);
        return st;
    }
    if ((fs = bmask_validate(&bm, &err))) { /* ids in [0, NKB), once a row across both lists */
        bmask_free(&bm);
        return fail(p, fs == FC_ENOMEM ? FLEXCHECK_ENOMEM : FLEXCHECK_EINVAL, CALL ": %s (NKB "
                    "= %d kv tiles for Lk = %d)", err.msg, (int)nkb, (int)p->lk);
    }
    bmask_free(&p->bm);
    p->bm = bm;
    p->has_bm = 1;
    return ok(p);
}

flexcheck_status api_bmask_fits(flexcheck_problem *p, uint64_t *bytes)
{
    *bytes = 0;
    if (!p->has_bm)
        return FLEXCHECK_OK;
    const bmask *bm = &p->bm;
    size_t rows = bmask_nrows(bm);
    /* counts and offsets a row, each list's slots */
    *bytes = (uint64_t)(rows + 1) * 2 * (sizeof(int32_t) + sizeof(int64_t)) +
             (uint64_t)(bm->kv_offsets[rows] + bm->full_kv_offsets[rows]) * sizeof(int32_t);
    if (bm->lq != p->lq || bm->lk != p->lk || (bm->nb != 1 && bm->nb != p->b) ||
        (bm->nh != 1 && bm->nh != p->hq))
        return fail(p, FLEXCHECK_EINVAL, "block mask: set for Lq %d, Lk %d, [nb, nh] = [%d, %d]; "
                    "the shape is now Lq %d, Lk %d, B %d, Hq %d: set it again", (int)bm->lq,
                    (int)bm->lk, (int)bm->nb, (int)bm->nh, (int)p->lq, (int)p->lk, (int)p->b,
                    (int)p->hq);
    return FLEXCHECK_OK;
}
