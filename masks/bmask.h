/*
 * bmask.h - block masks in PyTorch's BlockMask convention, forward half
 * (docs/semantics.md section 4), their three builders, the soundness check and comparison.
 *
 * The grid is (stored query index) x (stored key index) of one batch entry; for packed batches
 * that is the packed token axis, so one tile can span sequences. A tile is FULL when every
 * element is allowed (ragged edge tiles never are: padding is "not allowed"), PARTIAL when some
 * are, EMPTY (listed nowhere) when none are.
 *
 * With an explicit mask (masks/xterms.h, docs/semantics.md section 8) the predicate is the
 * families AND that mask, which may differ per batch entry and head: the _x calls below take
 * it (x.bits NULL: none, and then they are exactly the calls without _x).
 *
 * Counts are [nb, nh, nqb]; nb is 1 or B and nh is 1 or Hq (1 broadcasts). Each list's ids
 * are one array of rows laid end to end: row i (bmask_row's index) owns the slots
 * [offsets[i], offsets[i + 1]) of it, its capacity, and lists its first count[i] of them;
 * slots past a row's count are never read (bmask_ids finds a row). Two layouts:
 *   rectangular (bmask_alloc): every row `width` slots, offsets[i] = i * width, -1 in each
 *     slot past a count as allocated (the fixture reader's rows hold what the file had there);
 *     PyTorch's create_block_mask shape with width = nkb, the one fixtures store, made from
 *     any mask by bmask_copy_width.
 *   compact (our builders): each row exactly as long as its count, so a mask costs what it
 *     lists, ids ascending. nb = nh = 1 (the families never depend on batch entry or head);
 *     the slow builder given an explicit mask [Bm, Hm, ..] writes nb = Bm, nh = Hm, as
 *     PyTorch's create_block_mask needs B and H for a mask_mod that reads b or h.
 * Why not rectangular for ours: a window or chunk lists a few tiles a row, and nqb x nkb
 * arrays would cost more than the lists (O(L^2) where they are O(L)); and one long row makes
 * every row long: a ragged last query tile (Lq not a multiple of QB) is never full, so under
 * causal it lists every tile it reaches as partial; with one width for all rows that was nqb x
 * nkb slots to fault in (bench blockmask, 2026-11-30: L = 65,537 in 0.66 ms against 0.063 ms
 * at 65,536), with offsets it is nkb more. `width` and `full_width` are the longest row's
 * capacity of each list (a rectangular mask's width).
 * Readers of other tools' masks must accept any nb/nh/width that validates.
 */
#ifndef FLEXCHECK_BMASK_H
#define FLEXCHECK_BMASK_H

#include "base/fc.h"
#include "masks/mask.h"
#include "masks/seq.h"
#include "masks/xterms.h"

#ifdef __cplusplus
extern "C" {
#endif

#define BMASK_MIN_BLOCK 16
#define BMASK_MAX_BLOCK 256

typedef struct bmask {
    int32_t q_block_size, kv_block_size; /* powers of two in [16, 256] */
    int32_t lq, lk;                      /* grid extents the mask was built for */
    int32_t nqb, nkb;                    /* ceil(lq / q_block_size), ceil(lk / kv_block_size) */
    int32_t nb, nh;                      /* leading dims, 1 = broadcast */
    int32_t width, full_width;           /* longest row capacity of each list */
    int32_t *kv_num_blocks;              /* [nb*nh*nqb] partial counts */
    int64_t *kv_offsets;                 /* [nb*nh*nqb + 1] partial rows' starts */
    int32_t *kv_indices;                 /* [kv_offsets[nb*nh*nqb]] partial ids */
    int32_t *full_kv_num_blocks;         /* [nb*nh*nqb] full counts */
    int64_t *full_kv_offsets;            /* [nb*nh*nqb + 1] full rows' starts */
    int32_t *full_kv_indices;            /* [full_kv_offsets[nb*nh*nqb]] full ids */
} bmask;

/* ceil(l / block): a length's tiles. */
static inline int32_t bmask_nblocks(int32_t l, int32_t block)
{
    return (int32_t)(((int64_t)l + block - 1) / block);
}

/* Row `row` (bmask_row's index) of the partial (full = 0) or full (1) ids. */
static inline int32_t *bmask_ids(const bmask *bm, int full, size_t row)
{
    return full ? bm->full_kv_indices + bm->full_kv_offsets[row]
                : bm->kv_indices + bm->kv_offsets[row];
}

/* Slots row `row` of a list owns: its count may be at most this. */
static inline int64_t bmask_capacity(const bmask *bm, int full, size_t row)
{
    const int64_t *off = full ? bm->full_kv_offsets : bm->kv_offsets;
    return off[row + 1] - off[row];
}

/* Rows of the stored shape: nb * nh * nqb. */
static inline size_t bmask_nrows(const bmask *bm)
{
    return (size_t)bm->nb * (size_t)bm->nh * (size_t)bm->nqb;
}

typedef enum bmask_builder {
    BMASK_SLOW = 0,          /* exact, predicate on every element, O(lq*lk) */
    BMASK_DIRECT = 1,        /* exact, interval arithmetic, O(listed blocks + nqb) */
    BMASK_SUPERSET = 2,      /* vLLM direct build: every tile of the touched sequences, partial */
    BMASK_SUPERSET_TRIM = 3, /* the same, trimmed below the window's lower edge */
} bmask_builder;

/* "slow", "direct", "superset", "superset-trim". */
const char *bmask_builder_name(bmask_builder b);
fc_status bmask_builder_parse(const char *s, bmask_builder *out);

/* 1 iff b is a power of two in [BMASK_MIN_BLOCK, BMASK_MAX_BLOCK]. */
int bmask_block_size_ok(int32_t b);

/* A rectangular mask: zero counts, both lists' rows `width` slots, -1 in each (PyTorch's
 * layout: the fixture reader's, bmask_copy_width's); checks block sizes, lengths and size
 * products. */
fc_status bmask_alloc(bmask *bm, int32_t qb, int32_t kb, int32_t lq, int32_t lk, int32_t nb,
                      int32_t nh, int32_t width, fc_err *err);
void bmask_free(bmask *bm);

/* Row (b, h, r) accessors honouring broadcast of nb/nh == 1. */
size_t bmask_row(const bmask *bm, int32_t b, int32_t h, int32_t r);

/* A rectangular copy of bm, both lists' rows `width` slots: the same ids in the same order, -1
 * past each count. width = bm->nkb gives PyTorch's [.., NQB, NKB] shape, the one fixtures store.
 * FC_EINVAL (naming the row) when a count is negative, more than width or more than its row
 * holds. */
fc_status bmask_copy_width(const bmask *bm, int32_t width, bmask *out, fc_err *err);

fc_status bmask_build(bmask *out, bmask_builder builder, mask_params m, const seq_info *s,
                      int32_t qb, int32_t kb, fc_err *err);
/* The same for the families AND explicit mask x (x.bits NULL: bmask_build itself). slow reads
 * x (nb = x.bm, nh = x.hm); superset and superset-trim ignore it and stay sound, an explicit
 * mask only ever removing pairs; direct has no interval arithmetic for an arbitrary mask and
 * refuses one (FC_EUNSUP, naming slow). x must fit s (x.lq, x.lk its lengths, x.bm 1 or its
 * batch: FC_EINVAL) and hold x.bm * x.hm * lq packed rows (attn_problem_check's rule). */
fc_status bmask_build_x(bmask *out, bmask_builder builder, mask_params m, const seq_info *s,
                        attn_xmask x, int32_t qb, int32_t kb, fc_err *err);
fc_status bmask_build_slow(bmask *out, mask_params m, const seq_info *s, int32_t qb, int32_t kb,
                           fc_err *err);
/* FC_OK when x is off or fits s: its grid is s's lq x lk, x.bm is 1 or s's batch, x.hm >= 1
 * (that it is 1 or Hq, and holds as many rows, is attn_problem_check's: s knows no heads). */
fc_status bmask_xmask_check(const seq_info *s, attn_xmask x, fc_err *err);
/* Every element of every (b < x.bm, h < x.hm) grid through mask_pair_allowed_x: O(x.bm * x.hm *
 * lq * lk), the reference for the families' builders and the explicit mask's only one. */
fc_status bmask_build_slow_x(bmask *out, mask_params m, const seq_info *s, attn_xmask x,
                             int32_t qb, int32_t kb, fc_err *err);
fc_status bmask_build_direct(bmask *out, mask_params m, const seq_info *s, int32_t qb,
                             int32_t kb, fc_err *err);
fc_status bmask_build_superset(bmask *out, mask_params m, const seq_info *s, int32_t qb,
                               int32_t kb, int trim, fc_err *err);

/* Structural validity of a mask from any source: ids in [0, nkb), no duplicate id in a row
 * (across the partial and full lists too), counts in [0, the row's capacity], offsets from 0
 * and non-decreasing. FC_EINVAL names the first offending (b, h, row, slot). */
fc_status bmask_validate(const bmask *bm, fc_err *err);

/* The checks below validate bm first (FC_EINVAL with bmask_validate's message, never a read
 * out of bounds) and cost O(nb * nh * lq + listed + reached tiles), never O(lq * lk).
 *
 * Sound for (m, s): every allowed pair lies in a listed block and every full block is
 * entirely allowed (checked on every (b, h) row the mask stores). FC_EFAIL names the first
 * tile and element that breaks it. */
fc_status bmask_check_sound(const bmask *bm, mask_params m, const seq_info *s, fc_err *err);

/* The _x checks hold bm to the families AND explicit mask x (x.bits NULL: the calls above).
 * A stored row stands for every batch entry and head it broadcasts to (PyTorch's kernel reads
 * it for all of them), so it is held to each one's mask: the rows checked are (b, h) for b <
 * max(nb, x.bm), h < max(nh, x.hm), and a message's [b][h] is that batch entry and head (a
 * one-head list built from head 0 of a per-head mask drops head 3's keys: "row [0][3][..]").
 * nb and x.bm (nh and x.hm) must be equal or one of them 1 (FC_EINVAL otherwise), and x must
 * fit s as for bmask_build_x. The explicit mask costs each row O(q_block_size * its reached
 * keys / 8) more (its bits are counted a byte at a time), never more than the mask's size. */
fc_status bmask_check_sound_x(const bmask *bm, mask_params m, const seq_info *s, attn_xmask x,
                              fc_err *err);
/* Exactly the mask (m, s) defines: every tile of every stored row listed as what its pairs make
 * it, full, partial or nowhere (ids' order aside), as bmask_compare with the slow builder's mask
 * would say, without building it. Exact implies sound. FC_EFAIL names the first tile listed
 * otherwise. */
fc_status bmask_check_exact(const bmask *bm, mask_params m, const seq_info *s, fc_err *err);
fc_status bmask_check_exact_x(const bmask *bm, mask_params m, const seq_info *s, attn_xmask x,
                              fc_err *err);

/* Every way a block mask departs from (m, s), counted over all its stored rows, with the first
 * tile of each kind, so a report can name what a producer's mask gets wrong (often the bug):
 * dropped: a tile with allowed pairs listed nowhere (the kernel never sees those keys);
 * leaked: a tile listed full that holds a pair not allowed (the kernel skips the mask there);
 * wasted: a tile listed partial with no allowed pair (sound, only work for nothing). */
typedef struct bmask_tile {
    int32_t b, h, r, c; /* stored (batch, head) row, query tile, kv block */
} bmask_tile;

/* A witness element of a tile: stored query token tq, key token tk. */
typedef struct bmask_pair {
    int32_t tq, tk;
} bmask_pair;

typedef struct bmask_defects {
    int64_t dropped, leaked, wasted;
    bmask_tile first_dropped, first_leaked;
    bmask_pair dropped_pair, leaked_pair; /* the first tile's first allowed / masked element,
                                           * rows then keys in order */
} bmask_defects;

/* FC_EINVAL when bm does not validate or its lengths are not s's. */
fc_status bmask_find_defects(const bmask *bm, mask_params m, const seq_info *s, bmask_defects *d,
                             fc_err *err);
fc_status bmask_find_defects_x(const bmask *bm, mask_params m, const seq_info *s, attn_xmask x,
                               bmask_defects *d, fc_err *err);
/* One line: "sound" (plus wasted tiles, if any), or what is dropped and what leaks, with the
 * first tile of each as token ranges and its witness element. */
void bmask_defects_text(char *buf, size_t cap, const bmask *bm, const bmask_defects *d);

/* Equal as sets (order within a row ignored) for every row of the broadcast shape; both
 * validated first (FC_EINVAL). FC_EFAIL names the first differing row and block. */
fc_status bmask_compare(const bmask *a, const bmask *b, fc_err *err);

/* Totals over all stored rows. */
int64_t bmask_count_partial(const bmask *bm);
int64_t bmask_count_full(const bmask *bm);

#ifdef __cplusplus
}
#endif

#endif
