/*
 * bmask_check.c - block masks held to the mask and to each other (bmask.h): structural
 * validation, soundness, every defect of a producer's mask, exactness, set comparison.
 *
 * Soundness, defects and exactness classify the tiles of a query tile's row from its rows'
 * allowed key ranges (mask_token_range: every row's allowed keys are one interval, which
 * tests/test_masks.c checks against the predicate by brute force), where scanning every pair
 * cost O(q_block_size * lk) a row (L = 64k: seconds a row of heads, minutes for a mask stored
 * per head). Each stored row then costs O(q_block_size + its listed ids + the tiles its rows
 * reach), never O(nkb): a row's listed ids are marked in a scratch array and unmarked after,
 * and only the reached tiles are classified (the rest are empty by construction), so a
 * windowed mask is checked in O(L + listed) as the direct builder builds it. Comparison marks
 * and unmarks the same way. tests/test_bmask.c holds all of them to a brute-force oracle of
 * its own, pair by pair, on corrupted masks. Every entry validates its masks first
 * (bmask_validate, itself O(rows + listed)), so no input makes them read out of bounds.
 *
 * An explicit mask (the _x entries) is not an interval a row: within each row's family range
 * its bits are counted tile by tile, a byte at a time, and a tile is full only when all
 * q_block_size x kv_block_size of its elements are allowed. Without one the family path below
 * is the one it always was (tests/test_bmask.c), x.bits NULL switching every bit read off;
 * tests/test_bmask_x.c holds the explicit path to a brute-force tile oracle of its own.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "masks/bmask.h"

/* Which ids one row lists: v[c] 0 none, 1 partial, 2 full. Marked for a row, then unmarked
 * id by id, so a row costs what it lists, not nkb. */
typedef struct rowbits {
    unsigned char *v; /* [nkb], all 0 between rows */
} rowbits;

static fc_status rowbits_init(rowbits *rb, int32_t nkb, fc_err *err)
{
    rb->v = calloc((size_t)nkb + 1, 1);
    return rb->v ? FC_OK : fc_errf(err, FC_ENOMEM, "out of memory (%d blocks)", (int)nkb);
}

/* Marks row `row` of bm (set) or unmarks it (!set); bm must have passed bmask_validate. */
static void rowbits_mark(rowbits *rb, const bmask *bm, size_t row, int set)
{
    const int32_t *pi = bmask_ids(bm, 0, row), *fi = bmask_ids(bm, 1, row);
    for (int32_t j = 0; j < bm->kv_num_blocks[row]; j++)
        rb->v[pi[j]] = set ? 1 : 0;
    for (int32_t j = 0; j < bm->full_kv_num_blocks[row]; j++)
        rb->v[fi[j]] = set ? 2 : 0;
}

/* Checks one list of a row (full: 0 partial, 1 full): count within the row's capacity, ids in
 * range, no id seen before in the row (seen: marked here, unmarked by the caller). */
static fc_status validate_list(const bmask *bm, int full, size_t row, int32_t b, int32_t h,
                               int32_t r, unsigned char *seen, fc_err *err)
{
    const char *what = full ? "full_kv" : "kv";
    int32_t n = (full ? bm->full_kv_num_blocks : bm->kv_num_blocks)[row];
    int64_t cap = bmask_capacity(bm, full, row);
    const int32_t *ids = bmask_ids(bm, full, row);
    if (n < 0 || n > cap)
        return fc_errf(err, FC_EINVAL, "%s_num_blocks[%d][%d][%d] = %d: must be in [0, %lld]",
                       what, (int)b, (int)h, (int)r, (int)n, (long long)cap);
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
    /* Offsets are ours (bmask_alloc's or a builder's), never a file's; a bad one is a bug. */
    const int64_t *off[2] = {bm->kv_offsets, bm->full_kv_offsets};
    for (int k = 0; k < 2; k++) {
        if (off[k][0] != 0)
            return fc_errf(err, FC_EINVAL, "%s row offsets start at %lld, not 0",
                           k ? "full_kv" : "kv", (long long)off[k][0]);
        for (size_t i = 0; i < bmask_nrows(bm); i++)
            if (off[k][i + 1] < off[k][i])
                return fc_errf(err, FC_EINVAL, "%s row offsets decrease after stored row %zu "
                               "(of nb x nh x nqb)", k ? "full_kv" : "kv", i);
    }
    rowbits seen;
    fc_status st = rowbits_init(&seen, bm->nkb, err);
    for (int32_t b = 0; !st && b < bm->nb; b++)
        for (int32_t h = 0; !st && h < bm->nh; h++)
            for (int32_t r = 0; !st && r < bm->nqb; r++) {
                size_t row = bmask_row(bm, b, h, r);
                st = validate_list(bm, 0, row, b, h, r, seen.v, err);
                if (!st)
                    st = validate_list(bm, 1, row, b, h, r, seen.v, err);
                if (!st) /* both lists valid: every id was marked once */
                    rowbits_mark(&seen, bm, row, 0);
            }
    free(seen.v);
    return st;
}

/* The tiles of one query tile r: each row's family range [lo, hi) (lo = hi = 0 for padding
 * rows past lq), the kv tiles [c0, c1) some row reaches and their kinds, 1 partial, 2 full
 * (every pair allowed; a ragged edge tile never is, padding being "not allowed"); every other
 * tile is empty (qtile_kind). With an explicit mask (x.bits) a row allows the keys of its
 * range whose bit in x's row for (b, h) is set, and a reached tile may still be empty. */
typedef struct qtile {
    int32_t r, rows; /* rows = q_block_size */
    int32_t lo[BMASK_MAX_BLOCK], hi[BMASK_MAX_BLOCK];
    int32_t c0, c1;
    unsigned char *kind;    /* [nkb], meaningful in [c0, c1) */
    int32_t *reach, *cover; /* [nkb + 1] difference arrays, all 0 between fills; with x.bits,
                             * reach counts each tile's allowed elements */
    attn_xmask x;           /* x.bits NULL: none */
    int32_t b, h;           /* the batch entry and head whose explicit mask rows are read */
} qtile;

static int qtile_kind(const qtile *q, int32_t c)
{
    return c >= q->c0 && c < q->c1 ? q->kind[c] : 0;
}

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

/* The set bits of row among keys [lo, hi): whole bytes by popcount, the ragged ends bit by
 * bit. */
static int32_t xmask_count(const uint8_t *row, int32_t lo, int32_t hi)
{
    int32_t n = 0, j = lo;
    for (; j < hi && (j & 7); j++)
        n += xmask_bit(row, j);
    for (; j + 8 <= hi; j += 8)
        n += __builtin_popcount(row[j >> 3]);
    for (; j < hi; j++)
        n += xmask_bit(row, j);
    return n;
}

/* The explicit mask's fill: each row's allowed elements counted into the tiles its range
 * reaches (reach[c] holds tile c's count, cleared here after use); full when the count is the
 * whole tile. */
static void qtile_fill_x(qtile *q, const bmask *bm)
{
    int32_t kb = bm->kv_block_size;
    for (int32_t i = 0; i < q->rows; i++) {
        int32_t lo = q->lo[i], hi = q->hi[i];
        if (lo >= hi)
            continue;
        const uint8_t *row = xmask_row(q->x, q->b, q->h, q->r * q->rows + i);
        for (int32_t c = lo / kb; c * kb < hi; c++) {
            int32_t a = c * kb > lo ? c * kb : lo, e = (c + 1) * kb < hi ? (c + 1) * kb : hi;
            q->reach[c] += xmask_count(row, a, e);
        }
    }
    int64_t whole = (int64_t)q->rows * kb;
    for (int32_t c = q->c0; c < q->c1; c++) {
        q->kind[c] = q->reach[c] == whole ? 2 : q->reach[c] > 0 ? 1 : 0;
        q->reach[c] = 0;
    }
}

/* Each row adds one to the kv tiles its range reaches and to those it covers whole, by
 * difference arrays over the reached tiles only: a tile is full when all q_block_size rows
 * cover it, partial when some row reaches it. With an explicit mask the ranges only bound the
 * reached tiles, and qtile_fill_x counts their elements. */
static void qtile_fill(qtile *q, const bmask *bm, mask_params m, seq_view v, int32_t r)
{
    int32_t kb = bm->kv_block_size;
    q->r = r;
    q->rows = bm->q_block_size;
    q->c0 = bm->nkb;
    q->c1 = 0;
    for (int32_t i = 0; i < q->rows; i++) {
        int32_t t = r * q->rows + i, lo = 0, hi = 0;
        if (t < v.lq)
            mask_token_range(m, v, t, &lo, &hi);
        q->lo[i] = lo;
        q->hi[i] = hi;
        if (lo >= hi)
            continue;
        int32_t c0 = lo / kb, c1 = (hi - 1) / kb + 1, f0 = (lo + kb - 1) / kb, f1 = hi / kb;
        q->c0 = c0 < q->c0 ? c0 : q->c0;
        q->c1 = c1 > q->c1 ? c1 : q->c1;
        if (q->x.bits)
            continue;
        q->reach[c0]++;
        q->reach[c1]--;
        if (f0 < f1) {
            q->cover[f0]++;
            q->cover[f1]--;
        }
    }
    if (q->x.bits) {
        qtile_fill_x(q, bm);
        return;
    }
    for (int32_t c = q->c0, sr = 0, sc = 0; c < q->c1; c++) {
        sr += q->reach[c];
        sc += q->cover[c];
        q->kind[c] = sc == q->rows ? 2 : sr > 0 ? 1 : 0;
    }
    /* every entry written lies in [c0, c1] (hi <= lk, so c1 <= nkb) */
    for (int32_t c = q->c0; c <= q->c1 && c <= bm->nkb; c++)
        q->reach[c] = q->cover[c] = 0;
}

/* The first key in [a, b) that query row i of q allows (allowed) or refuses (!allowed) within
 * its family range, b when none: without an explicit mask every key of the range is allowed. */
static int32_t qtile_first_key(const qtile *q, int32_t i, int32_t a, int32_t b, int allowed)
{
    if (!q->x.bits)
        return allowed ? a : b;
    const uint8_t *row = xmask_row(q->x, q->b, q->h, q->r * q->rows + i);
    if (allowed)
        return xmask_first(row, a, b);
    while (a < b && xmask_bit(row, a))
        a++;
    return a;
}

/* The first pair of tile c, rows then keys in order, that is allowed (want_allowed) or not;
 * the tile must hold one (its kind says so). */
static void qtile_first_pair(const qtile *q, int32_t kb, int32_t c, int want_allowed,
                             int32_t *tq, int32_t *tk)
{
    int32_t k0 = c * kb, k1 = k0 + kb;
    for (int32_t i = 0; i < q->rows; i++) {
        int32_t lo = q->lo[i], hi = q->hi[i];
        int32_t a = lo > k0 ? lo : k0, b = hi < k1 ? hi : k1; /* the range within the tile */
        *tq = q->r * q->rows + i;
        if (want_allowed && a < b && (*tk = qtile_first_key(q, i, a, b, 1)) < b)
            return;
        if (want_allowed)
            continue;
        if (!(lo <= k0 && k0 < hi)) { /* k0 outside the range (an empty one included) */
            *tk = k0;
            return;
        }
        if ((*tk = qtile_first_key(q, i, k0, b, 0)) < b)
            return;
        if (hi < k1) { /* the range ends inside the tile */
            *tk = hi;
            return;
        }
    }
}

/* One stored row's departures from its query tile's exact tiles, in O(listed + reached):
 * counts, and the first tile (lowest c) of each kind; -1 when there is none. dropped: some
 * pair allowed, listed nowhere; leaked: listed full, not full; wasted: listed partial, empty;
 * first_wrong: the first tile listed as anything but its exact kind (these, and a full tile
 * listed partial). */
typedef struct row_diff {
    int64_t dropped, leaked, wasted;
    int32_t first_dropped, first_leaked, first_wrong;
} row_diff;

/* The lower of first-tile a (-1: none yet) and tile c >= 0. */
static int32_t min_c(int32_t a, int32_t c)
{
    return a < 0 || c < a ? c : a;
}

static void row_diff_of(const bmask *bm, size_t row, const rowbits *rb, const qtile *q,
                        row_diff *d)
{
    memset(d, 0, sizeof *d);
    d->first_dropped = d->first_leaked = d->first_wrong = -1;
    for (int32_t c = q->c0; c < q->c1; c++) { /* the reached tiles */
        if (q->kind[c] != 0 && rb->v[c] == 0) {
            d->dropped++;
            d->first_dropped = min_c(d->first_dropped, c);
        }
        if (q->kind[c] != 0 && rb->v[c] != q->kind[c])
            d->first_wrong = min_c(d->first_wrong, c);
    }
    for (int full = 0; full < 2; full++) { /* the listed ones */
        const int32_t *ids = bmask_ids(bm, full, row);
        int32_t n = (full ? bm->full_kv_num_blocks : bm->kv_num_blocks)[row];
        for (int32_t j = 0; j < n; j++) {
            int32_t c = ids[j], k = qtile_kind(q, c);
            if (full && k != 2) {
                d->leaked++;
                d->first_leaked = min_c(d->first_leaked, c);
            }
            if (!full && k == 0)
                d->wasted++;
            if (k == 0) /* listed, empty: the reached scan above cannot see it */
                d->first_wrong = min_c(d->first_wrong, c);
        }
    }
}

static fc_status check_lengths(const bmask *bm, const seq_info *s, fc_err *err)
{
    if (bm->lq != s->lq || bm->lk != s->lk)
        return fc_errf(err, FC_EINVAL, "block mask built for lengths (%d, %d), case has (%d, %d)",
                       (int)bm->lq, (int)bm->lk, (int)s->lq, (int)s->lk);
    return FC_OK;
}

/* What every stored row of bm is checked against: for each (b, h, r) in order, row_fn(the
 * row's differences from the exact tiles, its listed ids still marked in rb). Stops at the
 * first non-FC_OK. */
typedef fc_status (*row_fn)(const bmask *bm, const row_diff *d, const rowbits *rb,
                            const qtile *q, int32_t b, int32_t h, void *ctx, fc_err *err);

/* The batch entries (heads) a check walks: the stored rows', or with an explicit mask as many
 * as either has (a dim of 1 broadcasting to the other's); FC_EINVAL when neither is 1 and they
 * differ. */
static fc_status walk_dims(const bmask *bm, attn_xmask x, int32_t *nb, int32_t *nh, fc_err *err)
{
    *nb = bm->nb;
    *nh = bm->nh;
    if (!x.bits)
        return FC_OK;
    if ((bm->nb != x.bm && bm->nb != 1 && x.bm != 1) || (bm->nh != x.hm && bm->nh != 1 &&
                                                          x.hm != 1))
        return fc_errf(err, FC_EINVAL, "block mask leading dims [%d, %d] and the explicit "
                       "mask's [%d, %d] do not broadcast (each 1 or the other's)", (int)bm->nb,
                       (int)bm->nh, (int)x.bm, (int)x.hm);
    *nb = x.bm > *nb ? x.bm : *nb;
    *nh = x.hm > *nh ? x.hm : *nh;
    return FC_OK;
}

static fc_status each_row(const bmask *bm, mask_params m, const seq_info *s, attn_xmask x,
                          row_fn fn, void *ctx, fc_err *err)
{
    int32_t nb, nh;
    fc_status st = check_lengths(bm, s, err);
    if (st || (st = bmask_validate(bm, err)) || (st = bmask_xmask_check(s, x, err)) ||
        (st = walk_dims(bm, x, &nb, &nh, err)))
        return st;
    rowbits rb;
    qtile q;
    if ((st = rowbits_init(&rb, bm->nkb, err)))
        return st;
    if ((st = qtile_init(&q, bm, err))) {
        free(rb.v);
        return st;
    }
    q.x = x;
    seq_view v = seq_info_view(s);
    /* The families depend on neither batch entry nor head, but each stored row is held to the
     * mask whatever the others say (and with an explicit mask to every (b, h) it stands for);
     * refilling q a row keeps the (b, h, r) order of "first" and costs nb * nh * lq range
     * lookups. */
    for (int32_t b = 0; !st && b < nb; b++)
        for (int32_t h = 0; !st && h < nh; h++)
            for (int32_t r = 0; !st && r < bm->nqb; r++) {
                size_t row = bmask_row(bm, b, h, r);
                row_diff d;
                q.b = b;
                q.h = h;
                qtile_fill(&q, bm, m, v, r);
                rowbits_mark(&rb, bm, row, 1);
                row_diff_of(bm, row, &rb, &q, &d);
                st = fn(bm, &d, &rb, &q, b, h, ctx, err);
                rowbits_mark(&rb, bm, row, 0);
            }
    qtile_free(&q);
    free(rb.v);
    return st;
}

/* The first defect in kv-tile order: a dropped tile and a leaked one are never the same. */
static fc_status sound_row(const bmask *bm, const row_diff *d, const rowbits *rb,
                           const qtile *q, int32_t b, int32_t h, void *ctx, fc_err *err)
{
    int32_t c = d->first_leaked < 0 ? d->first_dropped : min_c(d->first_dropped,
                                                                d->first_leaked);
    if (c < 0)
        return FC_OK;
    int32_t tq, tk;
    if (c == d->first_dropped) {
        qtile_first_pair(q, bm->kv_block_size, c, 1, &tq, &tk);
        return fc_errf(err, FC_EFAIL, "row [%d][%d][%d]: allowed pair (q %d, k %d) lies in kv "
                       "block %d, which is not listed (keys dropped)", (int)b, (int)h, (int)q->r,
                       (int)tq, (int)tk, (int)c);
    }
    qtile_first_pair(q, bm->kv_block_size, c, 0, &tq, &tk);
    return fc_errf(err, FC_EFAIL, "row [%d][%d][%d]: kv block %d is listed full but pair "
                   "(q %d, k %d) is not allowed (mask skipped, keys leak)", (int)b, (int)h,
                   (int)q->r, (int)c, (int)tq, (int)tk);
}

fc_status bmask_check_sound(const bmask *bm, mask_params m, const seq_info *s, fc_err *err)
{
    return each_row(bm, m, s, (attn_xmask){0}, sound_row, NULL, err);
}

fc_status bmask_check_sound_x(const bmask *bm, mask_params m, const seq_info *s, attn_xmask x,
                              fc_err *err)
{
    return each_row(bm, m, s, x, sound_row, NULL, err);
}

static fc_status defects_row(const bmask *bm, const row_diff *rd, const rowbits *rb,
                             const qtile *q, int32_t b, int32_t h, void *ctx, fc_err *err)
{
    bmask_defects *d = ctx;
    int32_t kb = bm->kv_block_size;
    if (rd->dropped && d->dropped == 0) {
        d->first_dropped = (bmask_tile){b, h, q->r, rd->first_dropped};
        qtile_first_pair(q, kb, rd->first_dropped, 1, &d->dropped_pair.tq, &d->dropped_pair.tk);
    }
    if (rd->leaked && d->leaked == 0) {
        d->first_leaked = (bmask_tile){b, h, q->r, rd->first_leaked};
        qtile_first_pair(q, kb, rd->first_leaked, 0, &d->leaked_pair.tq, &d->leaked_pair.tk);
    }
    d->dropped += rd->dropped;
    d->leaked += rd->leaked;
    d->wasted += rd->wasted;
    return FC_OK;
}

fc_status bmask_find_defects(const bmask *bm, mask_params m, const seq_info *s, bmask_defects *d,
                             fc_err *err)
{
    return bmask_find_defects_x(bm, m, s, (attn_xmask){0}, d, err);
}

fc_status bmask_find_defects_x(const bmask *bm, mask_params m, const seq_info *s, attn_xmask x,
                               bmask_defects *d, fc_err *err)
{
    memset(d, 0, sizeof *d);
    return each_row(bm, m, s, x, defects_row, d, err);
}

static const char *const kind_names[] = {"empty", "partial", "full"};

static fc_status exact_row(const bmask *bm, const row_diff *d, const rowbits *rb,
                           const qtile *q, int32_t b, int32_t h, void *ctx, fc_err *err)
{
    int32_t c = d->first_wrong;
    if (c < 0)
        return FC_OK;
    return fc_errf(err, FC_EFAIL, "row [%d][%d][%d], kv block %d: listed %s, the mask makes it "
                   "%s", (int)b, (int)h, (int)q->r, (int)c, kind_names[rb->v[c]],
                   kind_names[qtile_kind(q, c)]);
}

fc_status bmask_check_exact(const bmask *bm, mask_params m, const seq_info *s, fc_err *err)
{
    return each_row(bm, m, s, (attn_xmask){0}, exact_row, NULL, err);
}

fc_status bmask_check_exact_x(const bmask *bm, mask_params m, const seq_info *s, attn_xmask x,
                              fc_err *err)
{
    return each_row(bm, m, s, x, exact_row, NULL, err);
}

/* A tile as token ranges, and its witness element: "allowed pair (q 130, k 128)" or "masked
 * pair ...". */
static int tile_text(char *buf, size_t cap, const bmask *bm, bmask_tile t, bmask_pair p,
                     const char *what)
{
    int32_t qb = bm->q_block_size, kb = bm->kv_block_size;
    return snprintf(buf, cap, "(b, h) = (%d, %d) query tile %d [tokens %d, %d) kv block %d "
                    "[keys %d, %d), %s pair (q %d, k %d)", (int)t.b, (int)t.h, (int)t.r,
                    (int)(t.r * qb), (int)((t.r + 1) * qb), (int)t.c, (int)(t.c * kb),
                    (int)((t.c + 1) * kb), what, (int)p.tq, (int)p.tk);
}

void bmask_defects_text(char *buf, size_t cap, const bmask *bm, const bmask_defects *d)
{
    char a[200], b[200];
    tile_text(a, sizeof a, bm, d->first_dropped, d->dropped_pair, "allowed");
    tile_text(b, sizeof b, bm, d->first_leaked, d->leaked_pair, "masked");
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
    fc_status st = bmask_validate(a, err);
    if (st || (st = bmask_validate(b, err)))
        return st;
    rowbits ra, rb;
    if ((st = rowbits_init(&ra, a->nkb, err)))
        return st;
    if ((st = rowbits_init(&rb, b->nkb, err))) {
        free(ra.v);
        return st;
    }
    int32_t nb = a->nb > b->nb ? a->nb : b->nb, nh = a->nh > b->nh ? a->nh : b->nh;
    for (int32_t bi = 0; !st && bi < nb; bi++)
        for (int32_t h = 0; !st && h < nh; h++)
            for (int32_t r = 0; !st && r < a->nqb; r++) {
                size_t rowa = bmask_row(a, bi, h, r), rowb = bmask_row(b, bi, h, r);
                rowbits_mark(&ra, a, rowa, 1);
                rowbits_mark(&rb, b, rowb, 1);
                /* the lowest block either lists differently: a tile listed by neither agrees */
                int32_t first = -1;
                const bmask *m2[2] = {a, b};
                size_t row2[2] = {rowa, rowb};
                for (int x = 0; x < 2; x++)
                    for (int full = 0; full < 2; full++) {
                        const int32_t *ids = bmask_ids(m2[x], full, row2[x]);
                        int32_t n = (full ? m2[x]->full_kv_num_blocks
                                          : m2[x]->kv_num_blocks)[row2[x]];
                        for (int32_t j = 0; j < n; j++)
                            if (ra.v[ids[j]] != rb.v[ids[j]])
                                first = min_c(first, ids[j]);
                    }
                if (first >= 0)
                    st = fc_errf(err, FC_EFAIL, "row [%d][%d][%d], kv block %d: %s vs %s",
                                 (int)bi, (int)h, (int)r, (int)first, kind_names[ra.v[first]],
                                 kind_names[rb.v[first]]);
                rowbits_mark(&ra, a, rowa, 0);
                rowbits_mark(&rb, b, rowb, 0);
            }
    free(ra.v);
    free(rb.v);
    return st;
}
