/*
 * bmask_build.c - the three block-mask builders of docs/semantics.md section 4.
 *
 *   slow      evaluates mask_pair_allowed on every element of the padded grid and classifies
 *             each tile exactly. O(Lq * Lk). The reference the others are held to.
 *   direct    derives the same lists from sequence metadata and mask parameters alone. Every
 *             row's allowed keys are one interval [lo, hi) (mask_token_range), and within one
 *             sequence both bounds are non-decreasing in the row, while the rows with an empty
 *             interval form a prefix of the sequence (only rows at negative positions can be
 *             empty). So per (query tile, sequence segment) binary searches answer "does any
 *             row reach this kv tile" and "do all rows cover it", visiting only kv tiles inside
 *             the segment's reach: O(listed blocks * log QB). Must equal slow exactly.
 *   superset  vLLM's direct build: every kv tile holding keys of a sequence the query tile
 *             touches, all marked partial; with trim, tiles wholly below the window's lower
 *             edge (p_k < p_q - (W-1) for the tile's first row of that sequence) are dropped.
 *             Sound, not exact: it exercises the kernel's masked path.
 *
 * All three write nb = nh = 1 (the mask never depends on batch entry or head), width = nkb,
 * ids ascending, unused slots -1.
 */
#include <stdlib.h>
#include <string.h>

#include "base/progress.h"
#include "masks/bmask.h"
#include "masks/problem.h"

/* Every builder starts here: checked parameters, an empty mask of the right shape. */
static fc_status build_alloc(bmask *out, mask_params m, const seq_info *s, int32_t qb,
                             int32_t kb, fc_err *err)
{
    memset(out, 0, sizeof *out);
    fc_status st = mask_params_check(&m, err);
    if (st)
        return st;
    if (!bmask_block_size_ok(kb))
        return fc_errf(err, FC_EINVAL, "kv_block_size = %d: must be a power of two in [%d, %d]",
                       (int)kb, BMASK_MIN_BLOCK, BMASK_MAX_BLOCK);
    int32_t nkb = (int32_t)(((int64_t)s->lk + kb - 1) / kb);
    return bmask_alloc(out, qb, kb, s->lq, s->lk, 1, 1, nkb, err);
}

/* Appends id to row r's partial or full list (ids arrive ascending; a repeat is ignored). */
static void row_push(bmask *bm, int32_t r, int32_t id, int full)
{
    int32_t *cnt = full ? bm->full_kv_num_blocks : bm->kv_num_blocks;
    int32_t *ids = (full ? bm->full_kv_indices : bm->kv_indices) + (size_t)r * bm->width;
    if (cnt[r] > 0 && ids[cnt[r] - 1] == id)
        return;
    ids[cnt[r]++] = id;
}

fc_status bmask_build_slow(bmask *out, mask_params m, const seq_info *s, int32_t qb, int32_t kb,
                           fc_err *err)
{
    fc_status st = build_alloc(out, m, s, qb, kb, err);
    if (st)
        return st;
    int32_t *allowed = calloc((size_t)out->nkb + 1, sizeof(int32_t));
    if (!allowed) {
        bmask_free(out);
        return fc_errf(err, FC_ENOMEM, "out of memory (%d blocks)", (int)out->nkb);
    }
    seq_view v = seq_info_view(s);
    int32_t tile = qb * kb;
    fc_progress pr; /* Lq x Lk predicate calls: minutes at long lengths */
    fc_progress_start(&pr, "slow block-mask builder", (uint64_t)out->nqb);
    for (int32_t r = 0; r < out->nqb; r++) {
        fc_progress_step(&pr, 1, 1);
        memset(allowed, 0, sizeof(int32_t) * (size_t)out->nkb);
        /* Padding rows and columns (past lq / lk) are evaluated too: the predicate says no. */
        for (int32_t tq = r * qb; tq < (r + 1) * qb; tq++)
            for (int32_t tk = 0; tk < out->nkb * kb; tk++)
                allowed[tk / kb] += mask_pair_allowed(m, v, tq, tk);
        for (int32_t c = 0; c < out->nkb; c++)
            if (allowed[c] == tile)
                row_push(out, r, c, 1);
            else if (allowed[c] > 0)
                row_push(out, r, c, 0);
    }
    free(allowed);
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

typedef void (*segment_fn)(bmask *bm, mask_params m, seq_view v, const segment *sg, int trim);

/* Calls fn for every segment of every query tile, in row and sequence order. */
static void each_segment(bmask *bm, mask_params m, seq_view v, int trim, segment_fn fn)
{
    int32_t qb = bm->q_block_size;
    for (int32_t r = 0; r < bm->nqb; r++) {
        int32_t q0 = r * qb, q1 = q0 + qb < v.lq ? q0 + qb : v.lq;
        for (int32_t sq = seq_find(v.cu_q, v.nseq, q0); sq < v.nseq && v.cu_q[sq] < q1; sq++) {
            segment sg = {r, sq, v.cu_q[sq] > q0 ? v.cu_q[sq] : q0,
                          v.cu_q[sq + 1] < q1 ? v.cu_q[sq + 1] : q1, 0};
            if (sg.a >= sg.b)
                continue; /* a zero-length sequence */
            sg.whole = sg.a == q0 && sg.b == q0 + qb;
            fn(bm, m, v, &sg, trim);
        }
    }
}

/* Direct: the kv tiles the segment's rows reach, full where every row covers the tile. */
static void direct_segment(bmask *bm, mask_params m, seq_view v, const segment *sg, int trim)
{
    (void)trim;
    int32_t kb = bm->kv_block_size, a = sg->a, b = sg->b;
    /* Rows with an empty range form a prefix; skip it. */
    int32_t f = first_nonempty(m, v, a, b);
    if (f == b)
        return;
    range first = row_range(m, v, f), last = row_range(m, v, b - 1);
    for (int32_t c = first.lo / kb; c <= (last.hi - 1) / kb; c++) {
        int32_t k0 = c * kb, k1 = k0 + kb; /* k1 may pass lk: those keys are never in a range */
        /* Rows whose range ends past k0 form a suffix (hi non-decreasing); the first of them
         * has the smallest lo, so the tile is reached iff that lo is below k1. */
        int32_t g = first_reaching(m, v, f, b, k0);
        if (g == b || row_range(m, v, g).lo >= k1)
            continue;
        /* Full iff every row covers [k0, k1): the largest lo is the last row's, the smallest
         * hi the first row's. Ragged tiles (k1 > lk, or fewer than qb rows) never are. */
        int full = sg->whole && f == a && k1 <= v.lk && last.lo <= k0 && first.hi >= k1;
        row_push(bm, sg->r, c, full);
    }
}

fc_status bmask_build_direct(bmask *out, mask_params m, const seq_info *s, int32_t qb,
                             int32_t kb, fc_err *err)
{
    fc_status st = build_alloc(out, m, s, qb, kb, err);
    if (!st)
        each_segment(out, m, seq_info_view(s), 0, direct_segment);
    return st;
}

/* Superset: every kv tile holding keys of the segment's sequence, partial; with trim, only
 * from the window's lower edge on. */
static void superset_segment(bmask *bm, mask_params m, seq_view v, const segment *sg, int trim)
{
    int32_t kb = bm->kv_block_size, sq = sg->sq;
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
    for (int32_t c = k0 / kb; k0 < k1 && c <= (k1 - 1) / kb; c++)
        row_push(bm, sg->r, c, 0);
}

fc_status bmask_build_superset(bmask *out, mask_params m, const seq_info *s, int32_t qb,
                               int32_t kb, int trim, fc_err *err)
{
    fc_status st = build_alloc(out, m, s, qb, kb, err);
    if (!st)
        each_segment(out, m, seq_info_view(s), trim, superset_segment);
    return st;
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
