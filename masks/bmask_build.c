/*
 * bmask_build.c - the three block-mask builders of docs/semantics.md section 4.
 *
 *   slow      evaluates mask_pair_allowed on every element of the padded grid and classifies
 *             each tile exactly. O(Lq * Lk). The reference the others are held to.
 *   direct    derives the same lists from sequence metadata and mask parameters alone. Every
 *             row's allowed keys are one interval [lo, hi) (mask_token_range), and within one
 *             sequence both bounds are non-decreasing in the row, while the rows with an empty
 *             interval form a prefix of the sequence (only rows at negative positions can be
 *             empty). So per (query tile, sequence segment) the first and last rows' intervals
 *             bound every tile the segment reaches and decide most of them: the full tiles are
 *             one run between them, written as such; a binary search over the rows decides
 *             the rest (tiles between the two intervals, a window narrower than the query
 *             tile). O(listed blocks + NQB), a log QB factor only for those tiles. Must equal
 *             slow exactly.
 *   superset  vLLM's direct build: every kv tile holding keys of a sequence the query tile
 *             touches, all marked partial; with trim, tiles wholly below the window's lower
 *             edge (p_k < p_q - (W-1) for the tile's first row of that sequence) are dropped.
 *             Sound, not exact: it exercises the kernel's masked path.
 *
 * All three write nb = nh = 1 (the families never depend on batch entry or head), ids
 * ascending, in bmask.h's compact layout (each row exactly as long as its count), so that
 * direct and superset cost what they list: nothing is NQB x NKB unless the mask lists that many
 * tiles. With an explicit mask [Bm, Hm, ..] (bmask_build_x) slow writes nb = Bm, nh = Hm, each
 * (b, h) its own rows; superset ignores the mask (an AND only removes pairs: still sound);
 * direct refuses it, an arbitrary mask having no interval per row to reason from.
 */
#include <stdlib.h>
#include <string.h>

#include "base/progress.h"
#include "masks/bmask.h"
#include "masks/problem.h"

/* A mask being built. Direct and superset walk the segments twice: the sizing pass adds each
 * segment's candidate tiles (the only ones it may list) to its row's bounds, one per list,
 * kept in the counts; each row is then given as many slots as its bound, and the second pass
 * writes each id in place. Slow takes nkb as every bound. build_finish closes the gaps the
 * candidates not listed left, so every row ends exactly as long as its count (bmask.h's
 * compact layout). */
typedef struct build {
    bmask *bm;
    int sizing; /* the sizing pass: segments add to bounds, list nothing */
} build;

/* Every builder starts here: checked parameters, zero counts for every row of the [nb, nh]
 * leading dims (1, 1 but for slow's explicit mask). */
static fc_status build_start(build *b, bmask *out, mask_params m, const seq_info *s,
                             int32_t qb, int32_t kb, int32_t nb, int32_t nh, fc_err *err)
{
    memset(b, 0, sizeof *b);
    memset(out, 0, sizeof *out);
    fc_status st = mask_params_check(&m, err);
    if (st || (st = bmask_alloc(out, qb, kb, s->lq, s->lk, nb, nh, 0, err)))
        return st;
    b->bm = out;
    return FC_OK;
}

/* In the sizing pass, adds npartial and nfull candidate tiles to row r's bounds and returns
 * 1; in the writing pass returns 0. */
static int sized(build *b, size_t r, int32_t npartial, int32_t nfull)
{
    if (b->sizing) {
        b->bm->kv_num_blocks[r] += npartial;
        b->bm->full_kv_num_blocks[r] += nfull;
    }
    return b->sizing;
}

/* Gives each row of both lists as many slots as its bound (the counts hold the bounds) and
 * sets the counts back to zero. On failure the mask is freed. Slots are malloc'd, not
 * initialised: a row's slots past its count are never read, and build_finish drops them. A
 * bound is at most nkb plus one per sequence boundary in the query tile (a tile two sequences
 * share is counted twice), so the totals stay within nqb x (nkb + qb). */
static fc_status build_rows(build *b, fc_err *err)
{
    bmask *bm = b->bm;
    int32_t *cnt[2] = {bm->kv_num_blocks, bm->full_kv_num_blocks};
    int64_t *off[2] = {bm->kv_offsets, bm->full_kv_offsets};
    int32_t **ids[2] = {&bm->kv_indices, &bm->full_kv_indices};
    size_t nrows = bmask_nrows(bm);
    for (int k = 0; k < 2; k++) {
        off[k][0] = 0;
        for (size_t r = 0; r < nrows; r++)
            off[k][r + 1] = off[k][r] + cnt[k][r];
        int32_t *p = malloc(((size_t)off[k][nrows] + 1) * sizeof(int32_t)); /* +1: never 0 */
        if (!p) {
            int64_t n = off[k][nrows];
            bmask_free(bm);
            return fc_errf(err, FC_ENOMEM, "out of memory for a block mask of %lld ids",
                           (long long)n);
        }
        free(*ids[k]);
        *ids[k] = p;
        memset(cnt[k], 0, nrows * sizeof(int32_t));
    }
    b->sizing = 0;
    return FC_OK;
}

/* Appends tiles [c0, c1) to row r's partial or full list. Tiles arrive ascending within a
 * row; a first tile the list already ends with (two sequences sharing a boundary tile) is not
 * repeated. */
static void row_push_range(build *b, size_t r, int32_t c0, int32_t c1, int full)
{
    bmask *bm = b->bm;
    int32_t *cnt = full ? bm->full_kv_num_blocks : bm->kv_num_blocks;
    int32_t *ids = bmask_ids(bm, full, r);
    int32_t n = cnt[r];
    if (c0 < c1 && n > 0 && ids[n - 1] == c0)
        c0++;
    for (int32_t c = c0; c < c1; c++)
        ids[n++] = c;
    cnt[r] = n;
}

static void row_push(build *b, size_t r, int32_t id, int full)
{
    row_push_range(b, r, id, id + 1, full);
}

/* Closes the gaps between rows: each row moves down to the end of the one before, so its
 * capacity becomes its count (rows move in ascending order, never onto a row not yet moved),
 * and each list's width becomes its longest row. */
static void build_finish(build *b)
{
    bmask *bm = b->bm;
    const int32_t *cnt[2] = {bm->kv_num_blocks, bm->full_kv_num_blocks};
    int64_t *off[2] = {bm->kv_offsets, bm->full_kv_offsets};
    int32_t **ids[2] = {&bm->kv_indices, &bm->full_kv_indices};
    int32_t *width[2] = {&bm->width, &bm->full_width};
    size_t nrows = bmask_nrows(bm);
    for (int k = 0; k < 2; k++) {
        int64_t end = 0;
        int32_t w = 0;
        for (size_t r = 0; r < nrows; r++) {
            if (off[k][r] != end)
                memmove(*ids[k] + end, *ids[k] + off[k][r], (size_t)cnt[k][r] * sizeof(int32_t));
            off[k][r] = end;
            end += cnt[k][r];
            w = cnt[k][r] > w ? cnt[k][r] : w;
        }
        if (off[k][nrows] != end) {
            int32_t *p = realloc(*ids[k], ((size_t)end + 1) * sizeof(int32_t));
            if (p) /* else the larger block is kept, as valid */
                *ids[k] = p;
        }
        off[k][nrows] = end;
        *width[k] = w;
    }
}

fc_status bmask_build_slow(bmask *out, mask_params m, const seq_info *s, int32_t qb, int32_t kb,
                           fc_err *err)
{
    return bmask_build_slow_x(out, m, s, (attn_xmask){0}, qb, kb, err);
}

fc_status bmask_build_slow_x(bmask *out, mask_params m, const seq_info *s, attn_xmask x,
                             int32_t qb, int32_t kb, fc_err *err)
{
    build b;
    memset(out, 0, sizeof *out);
    fc_status st = bmask_xmask_check(s, x, err);
    int32_t nb = x.bits ? x.bm : 1, nh = x.bits ? x.hm : 1;
    if (st || (st = build_start(&b, out, m, s, qb, kb, nb, nh, err)))
        return st;
    size_t nrows = bmask_nrows(out);
    for (size_t r = 0; r < nrows; r++) /* every tile a candidate */
        out->kv_num_blocks[r] = out->full_kv_num_blocks[r] = out->nkb;
    if ((st = build_rows(&b, err)))
        return st;
    int32_t *allowed = calloc((size_t)out->nkb + 1, sizeof(int32_t));
    if (!allowed) {
        bmask_free(out);
        return fc_errf(err, FC_ENOMEM, "out of memory (%d blocks)", (int)out->nkb);
    }
    seq_view v = seq_info_view(s);
    int32_t tile = qb * kb;
    fc_progress pr; /* Lq x Lk predicate calls a (b, h): minutes at long lengths */
    fc_progress_start(&pr, "slow block-mask builder", (uint64_t)nrows);
    for (int32_t bi = 0; bi < nb; bi++)
        for (int32_t h = 0; h < nh; h++)
            for (int32_t r = 0; r < out->nqb; r++) {
                size_t row = bmask_row(out, bi, h, r);
                fc_progress_step(&pr, 1, 1);
                memset(allowed, 0, sizeof(int32_t) * (size_t)out->nkb);
                /* Padding rows and columns (past lq / lk) are evaluated too: the predicate
                 * says no (mask_pair_allowed refuses them before the explicit mask is read). */
                for (int32_t tq = r * qb; tq < (r + 1) * qb; tq++)
                    for (int32_t tk = 0; tk < out->nkb * kb; tk++)
                        allowed[tk / kb] += mask_pair_allowed_x(m, v, x, bi, h, tq, tk);
                for (int32_t c = 0; c < out->nkb; c++)
                    if (allowed[c] == tile)
                        row_push(&b, row, c, 1);
                    else if (allowed[c] > 0)
                        row_push(&b, row, c, 0);
            }
    free(allowed);
    build_finish(&b);
    return FC_OK;
}

/* The allowed stored-key range of stored query token t. */
typedef struct range {
    int32_t lo, hi;
} range;

static range row_range(mask_params m, seq_view v, int32_t t)
{
    range x;
    mask_token_range(m, v, t, &x.lo, &x.hi);
    return x;
}

/* First row t in [a, b) whose range is non-empty (b if none): empty rows form a prefix. */
static int32_t first_nonempty(mask_params m, seq_view v, int32_t a, int32_t b)
{
    while (a < b) {
        int32_t t = a + (b - a) / 2;
        range x = row_range(m, v, t);
        if (x.lo < x.hi) b = t; else a = t + 1;
    }
    return a;
}

/* First row t in [a, b) whose range ends past key k0 (b if none): hi is non-decreasing. */
static int32_t first_reaching(mask_params m, seq_view v, int32_t a, int32_t b, int32_t k0)
{
    while (a < b) {
        int32_t t = a + (b - a) / 2;
        if (row_range(m, v, t).hi > k0) b = t; else a = t + 1;
    }
    return a;
}

/* A non-empty run of query tile r's rows that belongs to one sequence: rows [a, b) of
 * sequence sq; `whole` says it is the tile's only run and fills all qb rows. */
typedef struct segment {
    int32_t r, sq, a, b;
    int whole;
} segment;

typedef void (*segment_fn)(build *b, mask_params m, seq_view v, const segment *sg, int trim);

/* Calls fn for every segment of every query tile, in row and sequence order. */
static void each_segment(build *b, mask_params m, seq_view v, int trim, segment_fn fn)
{
    int32_t qb = b->bm->q_block_size;
    for (int32_t r = 0; r < b->bm->nqb; r++) {
        int32_t q0 = r * qb, q1 = q0 + qb < v.lq ? q0 + qb : v.lq;
        for (int32_t sq = seq_find(v.cu_q, v.nseq, q0); sq < v.nseq && v.cu_q[sq] < q1; sq++) {
            segment sg = {r, sq, v.cu_q[sq] > q0 ? v.cu_q[sq] : q0,
                          v.cu_q[sq + 1] < q1 ? v.cu_q[sq + 1] : q1, 0};
            if (sg.a >= sg.b)
                continue; /* a zero-length sequence */
            sg.whole = sg.a == q0 && sg.b == q0 + qb;
            fn(b, m, v, &sg, trim);
        }
    }
}

/* The two passes of direct and superset. */
static fc_status build_segments(bmask *out, mask_params m, const seq_info *s, int32_t qb,
                                int32_t kb, int trim, segment_fn fn, fc_err *err)
{
    build b;
    fc_status st = build_start(&b, out, m, s, qb, kb, 1, 1, err);
    if (st)
        return st;
    b.sizing = 1;
    each_segment(&b, m, seq_info_view(s), trim, fn);
    if ((st = build_rows(&b, err)))
        return st;
    each_segment(&b, m, seq_info_view(s), trim, fn);
    build_finish(&b);
    return FC_OK;
}

/* Direct: the kv tiles the segment's rows reach, full where every row covers the tile. */
static void direct_segment(build *bd, mask_params m, seq_view v, const segment *sg, int trim)
{
    (void)trim;
    int32_t kb = bd->bm->kv_block_size, a = sg->a, b = sg->b;
    /* Rows with an empty range form a prefix; skip it (searched for only when the segment's
     * first row is empty). */
    int32_t f = a;
    range first = row_range(m, v, a);
    if (first.lo >= first.hi) {
        f = first_nonempty(m, v, a + 1, b);
        if (f == b)
            return;
        first = row_range(m, v, f);
    }
    range last = row_range(m, v, b - 1);
    int32_t c0 = first.lo / kb, c1 = (last.hi - 1) / kb;
    /* Full tiles [fa, fb): those every row covers, from the largest lo (the last row's) to
     * the smallest hi (the first row's), written as one run. Only a whole tile of one
     * sequence with no empty row has any (ragged tiles never are; hi <= lk). */
    int32_t fa = c1 + 1, fb = c1 + 1;
    if (sg->whole && f == a && (last.lo + kb - 1) / kb < first.hi / kb) {
        fa = (last.lo + kb - 1) / kb;
        fb = first.hi / kb;
    }
    /* The other candidates may each be partial; the full run is exactly full. */
    if (sized(bd, sg->r, c1 - c0 + 1 - (fb - fa), fb - fa))
        return;
    int32_t g = f; /* first_reaching's answer so far: non-decreasing in the tile */
    for (int32_t c = c0; c <= c1; c++) {
        if (c == fa) {
            row_push_range(bd, sg->r, fa, fb, 1);
            c = fb - 1;
            continue;
        }
        /* A partial candidate. Every tile of the loop starts before the last row's range ends
         * and ends past the first row's start, so the first row reaches it iff k0 < first.hi
         * and the last iff k1 > last.lo. Only a tile between the two ranges needs the rows
         * between: those whose range ends past k0 form a suffix (hi non-decreasing), and the
         * first of them has the smallest lo, so the tile is reached iff that lo is below k1. */
        int32_t k0 = c * kb, k1 = k0 + kb; /* k1 may pass lk: those keys are never in a range */
        if (k0 >= first.hi && k1 <= last.lo) {
            g = first_reaching(m, v, g, b, k0);
            if (g == b || row_range(m, v, g).lo >= k1)
                continue;
        }
        row_push(bd, sg->r, c, 0);
    }
}

fc_status bmask_build_direct(bmask *out, mask_params m, const seq_info *s, int32_t qb,
                             int32_t kb, fc_err *err)
{
    return build_segments(out, m, s, qb, kb, 0, direct_segment, err);
}

/* Superset: every kv tile holding keys of the segment's sequence, partial; with trim, only
 * from the window's lower edge on. */
static void superset_segment(build *b, mask_params m, seq_view v, const segment *sg, int trim)
{
    int32_t kb = b->bm->kv_block_size, sq = sg->sq;
    int32_t k0 = v.cu_k[sq], k1 = v.cu_k[sq + 1];
    if (trim && m.sliding_window > 0) {
        /* The tile's first row of this sequence has the lowest position, so its window edge
         * p_q - (W-1) bounds every row's from below. */
        int32_t nq = v.cu_q[sq + 1] - v.cu_q[sq];
        int64_t edge = (int64_t)mask_q_pos(sg->a - v.cu_q[sq], nq, k1 - k0) -
                       (m.sliding_window - 1);
        if (edge > 0)
            k0 = edge < k1 - k0 ? k0 + (int32_t)edge : k1;
    }
    if (k0 < k1 && !sized(b, sg->r, (k1 - 1) / kb - k0 / kb + 1, 0))
        row_push_range(b, sg->r, k0 / kb, (k1 - 1) / kb + 1, 0);
}

fc_status bmask_build_superset(bmask *out, mask_params m, const seq_info *s, int32_t qb,
                               int32_t kb, int trim, fc_err *err)
{
    return build_segments(out, m, s, qb, kb, trim, superset_segment, err);
}

fc_status bmask_build(bmask *out, bmask_builder builder, mask_params m, const seq_info *s,
                      int32_t qb, int32_t kb, fc_err *err)
{
    memset(out, 0, sizeof *out);
    switch (builder) {
    case BMASK_SLOW: return bmask_build_slow(out, m, s, qb, kb, err);
    case BMASK_DIRECT: return bmask_build_direct(out, m, s, qb, kb, err);
    case BMASK_SUPERSET: return bmask_build_superset(out, m, s, qb, kb, 0, err);
    case BMASK_SUPERSET_TRIM: return bmask_build_superset(out, m, s, qb, kb, 1, err);
    }
    return fc_errf(err, FC_EINVAL, "unknown block-mask builder %d", (int)builder);
}

fc_status bmask_build_x(bmask *out, bmask_builder builder, mask_params m, const seq_info *s,
                        attn_xmask x, int32_t qb, int32_t kb, fc_err *err)
{
    memset(out, 0, sizeof *out);
    if (!x.bits)
        return bmask_build(out, builder, m, s, qb, kb, err);
    fc_status st = bmask_xmask_check(s, x, err);
    if (st)
        return st;
    switch (builder) {
    case BMASK_SLOW: return bmask_build_slow_x(out, m, s, x, qb, kb, err);
    case BMASK_DIRECT:
        return fc_errf(err, FC_EUNSUP, "the direct block-mask builder reads the mask families "
                       "only, not an explicit mask: build it with the slow builder");
    default: return bmask_build(out, builder, m, s, qb, kb, err); /* sound: x only removes */
    }
}
