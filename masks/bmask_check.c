/*
 * bmask_check.c - block masks held to the mask and to each other (bmask.h): structural
 * validation, soundness, every defect of a producer's mask, exactness, set comparison.
 *
 * Soundness, defects and exactness classify each tile of a query tile's row from its rows'
 * allowed key ranges (mask_token_range: every row's allowed keys are one interval, which
 * tests/test_masks.c checks against the predicate by brute force): O(q_block_size + nkb) a
 * stored row, where scanning every pair cost O(q_block_size * lk) (L = 64k: seconds a row of
 * heads, minutes for a mask stored per head). tests/test_bmask.c holds all three to a
 * brute-force oracle of its own, pair by pair, on corrupted masks.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "masks/bmask.h"

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
    if (bm->nqb != bmask_nblocks(bm->lq, bm->q_block_size) ||
        bm->nkb != bmask_nblocks(bm->lk, bm->kv_block_size))
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

/* The tiles of one query tile r: each row's allowed keys [lo, hi) (lo = hi = 0 for padding
 * rows past lq) and each kv tile's kind, 0 empty, 1 partial, 2 full (every pair allowed; a
 * ragged edge tile never is, padding being "not allowed"). */
typedef struct qtile {
    int32_t r, rows; /* rows = q_block_size */
    int32_t lo[BMASK_MAX_BLOCK], hi[BMASK_MAX_BLOCK];
    unsigned char *kind; /* [nkb] */
    int32_t *reach, *cover; /* [nkb + 1] difference arrays, scratch */
} qtile;

static fc_status qtile_init(qtile *q, const bmask *bm, fc_err *err)
{
    memset(q, 0, sizeof *q);
    q->kind = calloc((size_t)bm->nkb + 1, 1);
    q->reach = calloc((size_t)bm->nkb + 1, sizeof(int32_t));
    q->cover = calloc((size_t)bm->nkb + 1, sizeof(int32_t));
    if (q->kind && q->reach && q->cover)
        return FC_OK;
    free(q->kind);
    free(q->reach);
    free(q->cover);
    return fc_errf(err, FC_ENOMEM, "out of memory (%d blocks)", (int)bm->nkb);
}

static void qtile_free(qtile *q)
{
    free(q->kind);
    free(q->reach);
    free(q->cover);
}

/* Each row adds one to the kv tiles its range reaches and to those it covers whole, by
 * difference arrays: a tile is full when all q_block_size rows cover it, partial when some
 * row reaches it. */
static void qtile_fill(qtile *q, const bmask *bm, mask_params m, seq_view v, int32_t r)
{
    int32_t kb = bm->kv_block_size, nkb = bm->nkb;
    memset(q->reach, 0, ((size_t)nkb + 1) * sizeof(int32_t));
    memset(q->cover, 0, ((size_t)nkb + 1) * sizeof(int32_t));
    q->r = r;
    q->rows = bm->q_block_size;
    for (int32_t i = 0; i < q->rows; i++) {
        int32_t t = r * q->rows + i, lo = 0, hi = 0;
        if (t < v.lq)
            mask_token_range(m, v, t, &lo, &hi);
        q->lo[i] = lo;
        q->hi[i] = hi;
        if (lo >= hi)
            continue;
        int32_t c0 = lo / kb, c1 = (hi - 1) / kb, f0 = (lo + kb - 1) / kb, f1 = hi / kb;
        q->reach[c0]++;
        q->reach[c1 + 1]--;
        if (f0 < f1) {
            q->cover[f0]++;
            q->cover[f1]--;
        }
    }
    for (int32_t c = 0, sr = 0, sc = 0; c < nkb; c++) {
        sr += q->reach[c];
        sc += q->cover[c];
        q->kind[c] = sc == q->rows ? 2 : sr > 0 ? 1 : 0;
    }
}

/* The first pair of tile c, rows then keys in order, that is allowed (want_allowed) or not;
 * the tile must hold one (its kind says so). */
static void qtile_first_pair(const qtile *q, int32_t kb, int32_t c, int want_allowed,
                             int32_t *tq, int32_t *tk)
{
    int32_t k0 = c * kb, k1 = k0 + kb;
    for (int32_t i = 0; i < q->rows; i++) {
        int32_t lo = q->lo[i], hi = q->hi[i];
        int reaches = lo < hi && lo < k1 && hi > k0, covers = lo < hi && lo <= k0 && hi >= k1;
        *tq = q->r * q->rows + i;
        if (want_allowed && reaches) {
            *tk = lo > k0 ? lo : k0;
            return;
        }
        if (!want_allowed && !covers) {
            *tk = reaches && lo <= k0 ? hi : k0;
            return;
        }
    }
}

/* The mask's lengths must be the case's. The block sizes and grid are bmask_validate's to
 * check, but qtile's arrays are sized by them, so a caller that skipped it gets FC_EINVAL
 * here rather than writes out of bounds. */
static fc_status check_lengths(const bmask *bm, const seq_info *s, fc_err *err)
{
    if (bm->lq != s->lq || bm->lk != s->lk)
        return fc_errf(err, FC_EINVAL, "block mask built for lengths (%d, %d), case has (%d, %d)",
                       (int)bm->lq, (int)bm->lk, (int)s->lq, (int)s->lk);
    if (!bmask_block_size_ok(bm->q_block_size) || !bmask_block_size_ok(bm->kv_block_size) ||
        bm->nqb != bmask_nblocks(bm->lq, bm->q_block_size) ||
        bm->nkb != bmask_nblocks(bm->lk, bm->kv_block_size))
        return fc_errf(err, FC_EINVAL, "block mask of %d x %d blocks of %dx%d does not fit lengths "
                       "(%d, %d): not validated", (int)bm->nqb, (int)bm->nkb,
                       (int)bm->q_block_size, (int)bm->kv_block_size, (int)bm->lq, (int)bm->lk);
    return FC_OK;
}

/* What every stored row of bm is checked against: for each (b, h, r) in order, row_fn(row's
 * listed kinds, the exact tiles). Stops at the first non-FC_OK. */
typedef fc_status (*row_fn)(const bmask *bm, const rowbits *rb, const qtile *q, int32_t b,
                            int32_t h, void *ctx, fc_err *err);

static fc_status each_row(const bmask *bm, mask_params m, const seq_info *s, row_fn fn,
                          void *ctx, fc_err *err)
{
    fc_status st = check_lengths(bm, s, err);
    if (st)
        return st;
    rowbits rb;
    qtile q;
    if ((st = rowbits_init(&rb, bm->nkb, err)))
        return st;
    if ((st = qtile_init(&q, bm, err))) {
        free(rb.v);
        return st;
    }
    seq_view v = seq_info_view(s);
    /* The mask depends on neither batch entry nor head, but each stored row is held to it
     * whatever the others say; refilling q a row keeps the (b, h, r) order of "first" and
     * costs nb * nh * lq range lookups, small beside the rows' own nkb each. */
    for (int32_t b = 0; !st && b < bm->nb; b++)
        for (int32_t h = 0; !st && h < bm->nh; h++)
            for (int32_t r = 0; !st && r < bm->nqb; r++) {
                qtile_fill(&q, bm, m, v, r);
                rowbits_fill(&rb, bm, bmask_row(bm, b, h, r));
                st = fn(bm, &rb, &q, b, h, ctx, err);
            }
    qtile_free(&q);
    free(rb.v);
    return st;
}

static fc_status sound_row(const bmask *bm, const rowbits *rb, const qtile *q, int32_t b,
                           int32_t h, void *ctx, fc_err *err)
{
    for (int32_t c = 0; c < bm->nkb; c++) {
        int32_t tq, tk;
        if (rb->v[c] == 0 && q->kind[c] != 0) {
            qtile_first_pair(q, bm->kv_block_size, c, 1, &tq, &tk);
            return fc_errf(err, FC_EFAIL, "row [%d][%d][%d]: allowed pair (q %d, k %d) lies in "
                           "kv block %d, which is not listed (keys dropped)", (int)b, (int)h,
                           (int)q->r, (int)tq, (int)tk, (int)c);
        }
        if (rb->v[c] == 2 && q->kind[c] != 2) {
            qtile_first_pair(q, bm->kv_block_size, c, 0, &tq, &tk);
            return fc_errf(err, FC_EFAIL, "row [%d][%d][%d]: kv block %d is listed full but "
                           "pair (q %d, k %d) is not allowed (mask skipped, keys leak)", (int)b,
                           (int)h, (int)q->r, (int)c, (int)tq, (int)tk);
        }
    }
    return FC_OK;
}

fc_status bmask_check_sound(const bmask *bm, mask_params m, const seq_info *s, fc_err *err)
{
    return each_row(bm, m, s, sound_row, NULL, err);
}

static fc_status defects_row(const bmask *bm, const rowbits *rb, const qtile *q, int32_t b,
                             int32_t h, void *ctx, fc_err *err)
{
    bmask_defects *d = ctx;
    for (int32_t c = 0; c < bm->nkb; c++) {
        bmask_tile t = {b, h, q->r, c};
        if (q->kind[c] != 0 && rb->v[c] == 0 && d->dropped++ == 0)
            d->first_dropped = t;
        if (q->kind[c] != 2 && rb->v[c] == 2 && d->leaked++ == 0)
            d->first_leaked = t;
        d->wasted += q->kind[c] == 0 && rb->v[c] == 1;
    }
    return FC_OK;
}

fc_status bmask_find_defects(const bmask *bm, mask_params m, const seq_info *s, bmask_defects *d,
                             fc_err *err)
{
    memset(d, 0, sizeof *d);
    return each_row(bm, m, s, defects_row, d, err);
}

static const char *const kind_names[] = {"empty", "partial", "full"};

static fc_status exact_row(const bmask *bm, const rowbits *rb, const qtile *q, int32_t b,
                           int32_t h, void *ctx, fc_err *err)
{
    for (int32_t c = 0; c < bm->nkb; c++)
        if (rb->v[c] != q->kind[c])
            return fc_errf(err, FC_EFAIL, "row [%d][%d][%d], kv block %d: listed %s, the mask "
                           "makes it %s", (int)b, (int)h, (int)q->r, (int)c,
                           kind_names[rb->v[c]], kind_names[q->kind[c]]);
    return FC_OK;
}

fc_status bmask_check_exact(const bmask *bm, mask_params m, const seq_info *s, fc_err *err)
{
    return each_row(bm, m, s, exact_row, NULL, err);
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
    if ((a->nb != b->nb && a->nb != 1 && b->nb != 1) ||
        (a->nh != b->nh && a->nh != 1 && b->nh != 1))
        return fc_errf(err, FC_EINVAL, "block mask leading dims [%d, %d] and [%d, %d] do not "
                       "broadcast", (int)a->nb, (int)a->nh, (int)b->nb, (int)b->nh);
    rowbits ra, rb;
    fc_status st = rowbits_init(&ra, a->nkb, err);
    if (st)
        return st;
    st = rowbits_init(&rb, b->nkb, err);
    int32_t nb = max_i32(a->nb, b->nb), nh = max_i32(a->nh, b->nh);
    for (int32_t bi = 0; !st && bi < nb; bi++)
        for (int32_t h = 0; !st && h < nh; h++)
            for (int32_t r = 0; !st && r < a->nqb; r++) {
                rowbits_fill(&ra, a, bmask_row(a, bi, h, r));
                rowbits_fill(&rb, b, bmask_row(b, bi, h, r));
                for (int32_t c = 0; c < a->nkb; c++)
                    if (ra.v[c] != rb.v[c]) {
                        st = fc_errf(err, FC_EFAIL, "row [%d][%d][%d], kv block %d: %s vs %s",
                                     (int)bi, (int)h, (int)r, (int)c, kind_names[ra.v[c]],
                                     kind_names[rb.v[c]]);
                        break;
                    }
            }
    free(ra.v);
    free(rb.v);
    return st;
}

