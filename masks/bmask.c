/*
 * bmask.c - the block-mask type: names, allocation, PyTorch's layout, totals (bmask.h). The
 * builders are in bmask_build.c, the checks (validation, soundness, defects, exactness,
 * comparison) in bmask_check.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "masks/bmask.h"

static const char *const builder_names[] = {"slow", "direct", "superset", "superset-trim"};

const char *bmask_builder_name(bmask_builder b)
{
    return (unsigned)b < 4 ? builder_names[b] : "?";
}

fc_status bmask_builder_parse(const char *s, bmask_builder *out)
{
    for (int i = 0; i < 4; i++)
        if (s && !strcmp(s, builder_names[i])) {
            *out = (bmask_builder)i;
            return FC_OK;
        }
    return FC_EINVAL;
}

int bmask_block_size_ok(int32_t b)
{
    return b >= BMASK_MIN_BLOCK && b <= BMASK_MAX_BLOCK && (b & (b - 1)) == 0;
}

fc_status bmask_alloc(bmask *bm, int32_t qb, int32_t kb, int32_t lq, int32_t lk, int32_t nb,
                      int32_t nh, int32_t width, fc_err *err)
{
    memset(bm, 0, sizeof *bm);
    if (!bmask_block_size_ok(qb))
        return fc_errf(err, FC_EINVAL, "q_block_size = %d: must be a power of two in [%d, %d]",
                       (int)qb, BMASK_MIN_BLOCK, BMASK_MAX_BLOCK);
    if (!bmask_block_size_ok(kb))
        return fc_errf(err, FC_EINVAL, "kv_block_size = %d: must be a power of two in [%d, %d]",
                       (int)kb, BMASK_MIN_BLOCK, BMASK_MAX_BLOCK);
    if (lq < 0 || lq > MASK_MAX_LEN || lk < 0 || lk > MASK_MAX_LEN)
        return fc_errf(err, FC_EINVAL, "block mask lengths (%d, %d): must be in [0, %d]", (int)lq,
                       (int)lk, MASK_MAX_LEN);
    if (nb < 1 || nh < 1 || width < 0)
        return fc_errf(err, FC_EINVAL, "block mask dims nb = %d, nh = %d, width = %d: invalid",
                       (int)nb, (int)nh, (int)width);
    bm->q_block_size = qb;
    bm->kv_block_size = kb;
    bm->lq = lq;
    bm->lk = lk;
    bm->nqb = bmask_nblocks(lq, qb);
    bm->nkb = bmask_nblocks(lk, kb);
    bm->nb = nb;
    bm->nh = nh;
    bm->width = bm->full_width = width;
    size_t rows, ids;
    if (fc_mul3_size((size_t)nb, (size_t)nh, (size_t)bm->nqb, &rows) ||
        fc_mul_size(rows, (size_t)width, &ids) || ids > SIZE_MAX / sizeof(int32_t))
        return fc_errf(err, FC_ENOMEM, "block mask of %d x %d x %d rows x %d ids is too large",
                       (int)nb, (int)nh, (int)bm->nqb, (int)width);
    /* +1: never malloc(0), so an empty grid still has valid pointers. */
    bm->kv_num_blocks = calloc(rows + 1, sizeof(int32_t));
    bm->full_kv_num_blocks = calloc(rows + 1, sizeof(int32_t));
    bm->kv_offsets = calloc(rows + 1, sizeof(int64_t));
    bm->full_kv_offsets = calloc(rows + 1, sizeof(int64_t));
    bm->kv_indices = malloc((ids + 1) * sizeof(int32_t));
    bm->full_kv_indices = malloc((ids + 1) * sizeof(int32_t));
    if (!bm->kv_num_blocks || !bm->full_kv_num_blocks || !bm->kv_offsets ||
        !bm->full_kv_offsets || !bm->kv_indices || !bm->full_kv_indices) {
        bmask_free(bm);
        return fc_errf(err, FC_ENOMEM, "out of memory for a block mask of %zu ids", ids);
    }
    for (size_t i = 0; i <= rows; i++)
        bm->kv_offsets[i] = bm->full_kv_offsets[i] = (int64_t)(i * (size_t)width);
    for (size_t i = 0; i < ids; i++)
        bm->kv_indices[i] = bm->full_kv_indices[i] = -1;
    return FC_OK;
}

void bmask_free(bmask *bm)
{
    free(bm->kv_num_blocks);
    free(bm->kv_offsets);
    free(bm->kv_indices);
    free(bm->full_kv_num_blocks);
    free(bm->full_kv_offsets);
    free(bm->full_kv_indices);
    memset(bm, 0, sizeof *bm);
}

fc_status bmask_xmask_check(const seq_info *s, attn_xmask x, fc_err *err)
{
    if (!x.bits)
        return FC_OK;
    if (x.lq != s->lq || x.lk != s->lk)
        return fc_errf(err, FC_EINVAL, "explicit mask: its grid is %d x %d, the block mask's "
                       "lengths (%d, %d)", (int)x.lq, (int)x.lk, (int)s->lq, (int)s->lk);
    if ((x.bm != 1 && x.bm != s->batch) || x.hm < 1)
        return fc_errf(err, FC_EINVAL, "explicit mask: [Bm, Hm] = [%d, %d]: Bm must be 1 or B = "
                       "%d, Hm at least 1", (int)x.bm, (int)x.hm, (int)s->batch);
    return FC_OK;
}

size_t bmask_row(const bmask *bm, int32_t b, int32_t h, int32_t r)
{
    size_t bi = bm->nb == 1 ? 0 : (size_t)b, hi = bm->nh == 1 ? 0 : (size_t)h;
    return (bi * (size_t)bm->nh + hi) * (size_t)bm->nqb + (size_t)r;
}

fc_status bmask_copy_width(const bmask *bm, int32_t width, bmask *out, fc_err *err)
{
    size_t nrows = bmask_nrows(bm);
    const int32_t *cnt[2] = {bm->kv_num_blocks, bm->full_kv_num_blocks};
    for (size_t r = 0; r < nrows; r++)
        for (int k = 0; k < 2; k++)
            if (cnt[k][r] < 0 || cnt[k][r] > width || cnt[k][r] > bmask_capacity(bm, k, r)) {
                memset(out, 0, sizeof *out);
                return fc_errf(err, FC_EINVAL, "block mask row %zu lists %d blocks: must be in "
                               "[0, %d], the width asked for, and within its %lld slots", r,
                               (int)cnt[k][r], (int)width, (long long)bmask_capacity(bm, k, r));
            }
    fc_status st = bmask_alloc(out, bm->q_block_size, bm->kv_block_size, bm->lq, bm->lk, bm->nb,
                               bm->nh, width, err);
    if (st)
        return st;
    int32_t *ocnt[2] = {out->kv_num_blocks, out->full_kv_num_blocks};
    for (int k = 0; k < 2; k++) {
        memcpy(ocnt[k], cnt[k], nrows * sizeof(int32_t));
        for (size_t r = 0; r < nrows; r++)
            memcpy(bmask_ids(out, k, r), bmask_ids(bm, k, r), (size_t)cnt[k][r] * sizeof(int32_t));
    }
    return FC_OK;
}

static int64_t sum_counts(const bmask *bm, const int32_t *cnt)
{
    int64_t t = 0;
    size_t rows = bmask_nrows(bm);
    for (size_t i = 0; i < rows; i++)
        t += cnt[i];
    return t;
}

int64_t bmask_count_partial(const bmask *bm)
{
    return sum_counts(bm, bm->kv_num_blocks);
}

int64_t bmask_count_full(const bmask *bm)
{
    return sum_counts(bm, bm->full_kv_num_blocks);
}
