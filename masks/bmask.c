/*
 * bmask.c - the block-mask type: allocation, structural validation, soundness against the
 * predicate, set comparison and totals (bmask.h). The builders are in bmask_build.c.
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

static int32_t ceil_div(int32_t a, int32_t b)
{
    return (int32_t)(((int64_t)a + b - 1) / b);
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
    bm->nqb = ceil_div(lq, qb);
    bm->nkb = ceil_div(lk, kb);
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
    bm->kv_indices = malloc((ids + 1) * sizeof(int32_t));
    bm->full_kv_indices = malloc((ids + 1) * sizeof(int32_t));
    if (!bm->kv_num_blocks || !bm->full_kv_num_blocks || !bm->kv_indices ||
        !bm->full_kv_indices) {
        bmask_free(bm);
        return fc_errf(err, FC_ENOMEM, "out of memory for a block mask of %zu ids", ids);
    }
    for (size_t i = 0; i < ids; i++)
        bm->kv_indices[i] = bm->full_kv_indices[i] = -1;
    return FC_OK;
}

void bmask_free(bmask *bm)
{
    free(bm->kv_num_blocks);
    free(bm->kv_indices);
    free(bm->full_kv_num_blocks);
    free(bm->full_kv_indices);
    memset(bm, 0, sizeof *bm);
}

size_t bmask_row(const bmask *bm, int32_t b, int32_t h, int32_t r)
{
    size_t bi = bm->nb == 1 ? 0 : (size_t)b, hi = bm->nh == 1 ? 0 : (size_t)h;
    return (bi * (size_t)bm->nh + hi) * (size_t)bm->nqb + (size_t)r;
}

fc_status bmask_copy_width(const bmask *bm, int32_t width, bmask *out, fc_err *err)
{
    size_t nrows = (size_t)bm->nb * (size_t)bm->nh * (size_t)bm->nqb;
    const int32_t *cnt[2] = {bm->kv_num_blocks, bm->full_kv_num_blocks};
    for (size_t r = 0; r < nrows; r++)
        for (int k = 0; k < 2; k++)
            if (cnt[k][r] < 0 || cnt[k][r] > width) {
                memset(out, 0, sizeof *out);
                return fc_errf(err, FC_EINVAL, "block mask row %zu lists %d blocks: must be in "
                               "[0, %d], the width asked for", r, (int)cnt[k][r], (int)width);
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

/* One bit per kv block: which ids a row lists. Small scratch reused across rows. */
typedef struct rowbits {
    unsigned char *v; /* 0 none, 1 partial, 2 full */
    int32_t n;
} rowbits;

static fc_status rowbits_init(rowbits *rb, int32_t n, fc_err *err)
{
    rb->n = n;
    rb->v = calloc((size_t)n + 1, 1);
    return rb->v ? FC_OK : fc_errf(err, FC_ENOMEM, "out of memory (%d blocks)", (int)n);
}

/* Fills rb from row `row` of bm; bm must have passed bmask_validate. */
static void rowbits_fill(rowbits *rb, const bmask *bm, size_t row)
{
    memset(rb->v, 0, (size_t)rb->n);
    const int32_t *pi = bmask_ids(bm, 0, row), *fi = bmask_ids(bm, 1, row);
    for (int32_t j = 0; j < bm->kv_num_blocks[row]; j++)
        rb->v[pi[j]] = 1;
    for (int32_t j = 0; j < bm->full_kv_num_blocks[row]; j++)
        rb->v[fi[j]] = 2;
}

/* Checks one list of a row (full: 0 partial, 1 full): count within the list's width, ids in
 * range, no id seen before in the row. */
static fc_status validate_list(const bmask *bm, int full, size_t row, int32_t b, int32_t h,
                               int32_t r, unsigned char *seen, fc_err *err)
{
    const char *what = full ? "full_kv" : "kv";
    int32_t n = (full ? bm->full_kv_num_blocks : bm->kv_num_blocks)[row];
    int32_t width = full ? bm->full_width : bm->width;
    const int32_t *ids = bmask_ids(bm, full, row);
    if (n < 0 || n > width)
        return fc_errf(err, FC_EINVAL, "%s_num_blocks[%d][%d][%d] = %d: must be in [0, %d]", what,
                       (int)b, (int)h, (int)r, (int)n, (int)width);
    for (int32_t j = 0; j < n; j++) {
        int32_t id = ids[j];
        if (id < 0 || id >= bm->nkb)
            return fc_errf(err, FC_EINVAL, "%s_indices[%d][%d][%d][%d] = %d: out of range [0, %d)",
                           what, (int)b, (int)h, (int)r, (int)j, (int)id, (int)bm->nkb);
        if (seen[id])
            return fc_errf(err, FC_EINVAL,
                           "%s_indices[%d][%d][%d][%d] = %d: block listed twice in the row", what,
                           (int)b, (int)h, (int)r, (int)j, (int)id);
        seen[id] = 1;
    }
    return FC_OK;
}

fc_status bmask_validate(const bmask *bm, fc_err *err)
{
    if (!bmask_block_size_ok(bm->q_block_size) || !bmask_block_size_ok(bm->kv_block_size))
        return fc_errf(err, FC_EINVAL, "block sizes (%d, %d): must be powers of two in [%d, %d]",
                       (int)bm->q_block_size, (int)bm->kv_block_size, BMASK_MIN_BLOCK,
                       BMASK_MAX_BLOCK);
    if (bm->nqb != ceil_div(bm->lq, bm->q_block_size) ||
        bm->nkb != ceil_div(bm->lk, bm->kv_block_size))
        return fc_errf(err, FC_EINVAL, "block grid %d x %d does not match lengths (%d, %d)",
                       (int)bm->nqb, (int)bm->nkb, (int)bm->lq, (int)bm->lk);
    rowbits seen;
    fc_status st = rowbits_init(&seen, bm->nkb, err);
    for (int32_t b = 0; !st && b < bm->nb; b++)
        for (int32_t h = 0; !st && h < bm->nh; h++)
            for (int32_t r = 0; !st && r < bm->nqb; r++) {
                size_t row = bmask_row(bm, b, h, r);
                memset(seen.v, 0, (size_t)seen.n);
                st = validate_list(bm, 0, row, b, h, r, seen.v, err);
                if (!st)
                    st = validate_list(bm, 1, row, b, h, r, seen.v, err);
            }
    free(seen.v);
    return st;
}

/* Soundness of one stored row against the predicate, element by element (the definition,
 * deliberately brute force: this is the check the builders are held to). */
static fc_status sound_row(const bmask *bm, const rowbits *rb, mask_params m, seq_view v,
                           int32_t b, int32_t h, int32_t r, fc_err *err)
{
    int32_t qb = bm->q_block_size, kb = bm->kv_block_size;
    for (int32_t c = 0; c < bm->nkb; c++) {
        for (int32_t tq = r * qb; tq < (r + 1) * qb; tq++)
            for (int32_t tk = c * kb; tk < (c + 1) * kb; tk++) {
                int ok = mask_pair_allowed(m, v, tq, tk);
                if (ok && rb->v[c] == 0)
                    return fc_errf(err, FC_EFAIL,
                                   "row [%d][%d][%d]: allowed pair (q %d, k %d) lies in kv block "
                                   "%d, which is not listed (keys dropped)",
                                   (int)b, (int)h, (int)r, (int)tq, (int)tk, (int)c);
                if (!ok && rb->v[c] == 2)
                    return fc_errf(err, FC_EFAIL,
                                   "row [%d][%d][%d]: kv block %d is listed full but pair "
                                   "(q %d, k %d) is not allowed (mask skipped, keys leak)",
                                   (int)b, (int)h, (int)r, (int)c, (int)tq, (int)tk);
            }
    }
    return FC_OK;
}

fc_status bmask_check_sound(const bmask *bm, mask_params m, const seq_info *s, fc_err *err)
{
    if (bm->lq != s->lq || bm->lk != s->lk)
        return fc_errf(err, FC_EINVAL, "block mask built for lengths (%d, %d), case has (%d, %d)",
                       (int)bm->lq, (int)bm->lk, (int)s->lq, (int)s->lk);
    rowbits rb;
    fc_status st = rowbits_init(&rb, bm->nkb, err);
    seq_view v = seq_info_view(s);
    for (int32_t b = 0; !st && b < bm->nb; b++)
        for (int32_t h = 0; !st && h < bm->nh; h++)
            for (int32_t r = 0; !st && r < bm->nqb; r++) {
                rowbits_fill(&rb, bm, bmask_row(bm, b, h, r));
                st = sound_row(bm, &rb, m, v, b, h, r, err);
            }
    free(rb.v);
    return st;
}

/* Bit 1: some pair of tile (r, c) is allowed; bit 2: some pair is not (padding included). */
static int tile_kind(const bmask *bm, mask_params m, seq_view v, int32_t r, int32_t c)
{
    int32_t qb = bm->q_block_size, kb = bm->kv_block_size, k = 0;
    for (int32_t tq = r * qb; tq < (r + 1) * qb && k != 3; tq++)
        for (int32_t tk = c * kb; tk < (c + 1) * kb && k != 3; tk++)
            k |= mask_pair_allowed(m, v, tq, tk) ? 1 : 2;
    return k;
}

fc_status bmask_find_defects(const bmask *bm, mask_params m, const seq_info *s, bmask_defects *d,
                             fc_err *err)
{
    memset(d, 0, sizeof *d);
    if (bm->lq != s->lq || bm->lk != s->lk)
        return fc_errf(err, FC_EINVAL, "block mask built for lengths (%d, %d), case has (%d, %d)",
                       (int)bm->lq, (int)bm->lk, (int)s->lq, (int)s->lk);
    rowbits rb;
    fc_status st = rowbits_init(&rb, bm->nkb, err);
    seq_view v = seq_info_view(s);
    for (int32_t b = 0; !st && b < bm->nb; b++)
        for (int32_t h = 0; h < bm->nh; h++)
            for (int32_t r = 0; r < bm->nqb; r++) {
                rowbits_fill(&rb, bm, bmask_row(bm, b, h, r));
                for (int32_t c = 0; c < bm->nkb; c++) {
                    int k = tile_kind(bm, m, v, r, c);
                    bmask_tile t = {b, h, r, c};
                    if ((k & 1) && rb.v[c] == 0 && d->dropped++ == 0)
                        d->first_dropped = t;
                    if ((k & 2) && rb.v[c] == 2 && d->leaked++ == 0)
                        d->first_leaked = t;
                    d->wasted += !(k & 1) && rb.v[c] == 1;
                }
            }
    free(rb.v);
    return st;
}

static int tile_text(char *buf, size_t cap, const bmask *bm, bmask_tile t)
{
    int32_t qb = bm->q_block_size, kb = bm->kv_block_size;
    return snprintf(buf, cap, "(b, h) = (%d, %d) query tile %d [tokens %d, %d) kv block %d "
                    "[keys %d, %d)", (int)t.b, (int)t.h, (int)t.r, (int)(t.r * qb),
                    (int)((t.r + 1) * qb), (int)t.c, (int)(t.c * kb), (int)((t.c + 1) * kb));
}

void bmask_defects_text(char *buf, size_t cap, const bmask *bm, const bmask_defects *d)
{
    char a[160], b[160];
    tile_text(a, sizeof a, bm, d->first_dropped);
    tile_text(b, sizeof b, bm, d->first_leaked);
    char w[96] = "";
    if (d->wasted)
        snprintf(w, sizeof w, "; %lld listed partial tiles hold no allowed key (wasted work)",
                 (long long)d->wasted);
    if (!d->dropped && !d->leaked)
        snprintf(buf, cap, "sound%s", w);
    else if (d->dropped && d->leaked)
        snprintf(buf, cap, "NOT SOUND: drops keys: %lld tiles with allowed keys are listed "
                 "nowhere (first: %s); leaks keys: %lld tiles listed full hold masked pairs "
                 "(first: %s)%s", (long long)d->dropped, a, (long long)d->leaked, b, w);
    else if (d->dropped)
        snprintf(buf, cap, "NOT SOUND: drops keys: %lld tiles with allowed keys are listed "
                 "nowhere (first: %s)%s", (long long)d->dropped, a, w);
    else
        snprintf(buf, cap, "NOT SOUND: leaks keys: %lld tiles listed full hold masked pairs "
                 "(first: %s)%s", (long long)d->leaked, b, w);
}

static int32_t max_i32(int32_t a, int32_t b)
{
    return a > b ? a : b;
}

fc_status bmask_compare(const bmask *a, const bmask *b, fc_err *err)
{
    if (a->q_block_size != b->q_block_size || a->kv_block_size != b->kv_block_size ||
        a->nqb != b->nqb || a->nkb != b->nkb)
        return fc_errf(err, FC_EFAIL, "block grids differ: (%d x %d blocks of %dx%d) vs "
                       "(%d x %d blocks of %dx%d)", (int)a->nqb, (int)a->nkb,
                       (int)a->q_block_size, (int)a->kv_block_size, (int)b->nqb, (int)b->nkb,
                       (int)b->q_block_size, (int)b->kv_block_size);
    if ((a->nb != b->nb && a->nb != 1 && b->nb != 1) || (a->nh != b->nh && a->nh != 1 && b->nh != 1))
        return fc_errf(err, FC_EINVAL, "block mask leading dims [%d, %d] and [%d, %d] do not "
                       "broadcast", (int)a->nb, (int)a->nh, (int)b->nb, (int)b->nh);
    rowbits ra, rb;
    fc_status st = rowbits_init(&ra, a->nkb, err);
    if (st)
        return st;
    st = rowbits_init(&rb, b->nkb, err);
    int32_t nb = max_i32(a->nb, b->nb), nh = max_i32(a->nh, b->nh);
    static const char *const kind[] = {"empty", "partial", "full"};
    for (int32_t bi = 0; !st && bi < nb; bi++)
        for (int32_t h = 0; !st && h < nh; h++)
            for (int32_t r = 0; !st && r < a->nqb; r++) {
                rowbits_fill(&ra, a, bmask_row(a, bi, h, r));
                rowbits_fill(&rb, b, bmask_row(b, bi, h, r));
                for (int32_t c = 0; c < a->nkb; c++)
                    if (ra.v[c] != rb.v[c]) {
                        st = fc_errf(err, FC_EFAIL, "row [%d][%d][%d], kv block %d: %s vs %s",
                                     (int)bi, (int)h, (int)r, (int)c, kind[ra.v[c]],
                                     kind[rb.v[c]]);
                        break;
                    }
            }
    free(ra.v);
    free(rb.v);
    return st;
}

static int64_t sum_counts(const bmask *bm, const int32_t *cnt)
{
    int64_t t = 0;
    size_t rows = (size_t)bm->nb * (size_t)bm->nh * (size_t)bm->nqb;
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
