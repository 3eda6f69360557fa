/*
 * hyps.c - the hypotheses of the diagnosis (diag.h): which common bug made the rows fail.
 *
 * THE RULE: a hypothesis is one entry of the table at the bottom (its stable id and its setup)
 * plus ONE setup function. Adding one touches only this file, unless it needs a new field of
 * diag_alt (a new way to compute a row: diag_eval.c's diag_alt_vs_row). A setup looks at the case
 * (diag_in), returns 0 when its bug cannot apply or cannot differ from the truth, and otherwise
 * changes the fields of the diag_alt its bug changes and writes a title with the case's values.
 * The key-set functions in the first section are shared by the setups; a bug that needs a new
 * kind of key set adds one there.
 *
 * Every key set is built from masks/mask.h's definitions (mask_row_allows, mask_allowed,
 * mask_pair_allowed) with changed inputs, never from a re-derivation of the mask: a diagnosis
 * that computed the truth differently from the reference could blame the wrong bug. With an
 * explicit mask (masks/xterms.h) every key set is also ANDed with it as the alternative reads
 * it (x_allows; the truth: as stored), so a family's hypothesis changes the families alone and
 * keeps the case's explicit mask, as the reference's predicate does (mask_pair_allowed_x); the
 * bias enters every row's scores (diag_eval.c) as the alternative reads it.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "diag/diag_internal.h"
#include "masks/params.h"

/* ---- shared pieces: the truth, and the key sets ---------------------------------------- */

/* problem.h: query head h reads kv head h / (Hq / Hkv) (repeat_interleave). */
static int32_t kv_truth(const attn_problem *p, int32_t h)
{
    return h / (p->hq / p->hkv);
}

/* The head of an explicit term query head h reads: its own (the truth), or head 0's. */
static int32_t head_own(const attn_problem *p, int32_t h)
{
    return h;
}

static int32_t head_zero(const attn_problem *p, int32_t h)
{
    return 0;
}

void diag_alt_init(const diag_in *in, diag_alt *a)
{
    const attn_problem *p = in->jc->prob;
    memset(a, 0, sizeof *a);
    a->mask = p->mask;
    a->view = seq_info_view(&p->seq);
    a->scale = p->scale;
    a->kv_head = kv_truth;
    a->lse_mul = 1.0;
    a->softcap = p->terms.softcap;
    a->sink_mul = 1.0;
    a->sink_count = 1.0;
    a->keys = diag_keys_mask;
    a->sink_div = 1;
    a->xmask = p->xmask;
    a->xmask_head = head_own;
    a->xbias = p->xbias;
    a->xbias_head = head_own;
    a->bias_mul = 1.0;
    a->pg_seq = -1;
}

/* i held to [0, n). */
static int32_t to_grid(int64_t i, int32_t n)
{
    return i < 0 ? 0 : i >= n ? n - 1 : (int32_t)i;
}

/* Whether a's explicit mask allows key token tk of row k (1 without one): xterms.h's mask term
 * read as a reads it (diag_alt): moved, transposed, of another head. Indices held to the grid,
 * so a shift never reads outside the mask. */
static int x_allows(const diag_alt *a, const diag_key *k, int32_t tk)
{
    attn_xmask x = a->xmask;
    if (!x.bits)
        return 1;
    int32_t tq = to_grid((int64_t)k->tq + a->x_dq, x.lq), tj = to_grid((int64_t)tk + a->x_dk, x.lk);
    if (a->x_transposed) { /* (setups only with Lq == Lk) */
        int32_t t = tq;
        tq = tj;
        tj = t;
    }
    return xmask_bit(xmask_row(x, k->b, a->xmask_head(k->p, k->h), tq), tj);
}

/* Key tk of row k under families m on mask row r (mask.h) and a's explicit mask. */
static int row_allows(const diag_alt *a, const diag_key *k, mask_params m, mask_row r, int32_t tk)
{
    return mask_row_allows(m, r, tk) && x_allows(a, k, tk);
}

void diag_keys_mask(const diag_alt *a, const diag_key *k, uint8_t *allowed)
{
    for (int32_t tk = 0; tk < k->p->seq.lk; tk++)
        allowed[tk] = (uint8_t)row_allows(a, k, a->mask, k->row, tk);
}

/* Top-left alignment: the query's position is its index, p_q = i, instead of i + nk - nq. */
static void keys_top_left(const diag_alt *a, const diag_key *k, uint8_t *allowed)
{
    mask_row r = k->row;
    r.pq = k->i;
    for (int32_t tk = 0; tk < k->p->seq.lk; tk++)
        allowed[tk] = (uint8_t)row_allows(a, k, a->mask, r, tk);
}

/* Chunks from the query index: the chunk term sees (i, p_k) instead of (p_q, p_k) (p_k = j
 * already is the key's index); causal and window still see the positions. */
static void keys_chunk_from_index(const diag_alt *a, const diag_key *k, uint8_t *allowed)
{
    mask_params rest = a->mask, chunk = {0};
    rest.chunk_size = 0;
    chunk.chunk_size = a->mask.chunk_size;
    for (int32_t tk = 0; tk < k->p->seq.lk; tk++)
        allowed[tk] = (uint8_t)(row_allows(a, k, rest, k->row, tk) &&
                                mask_allowed(chunk, k->i, tk - k->row.k0));
}

/* How keys_listed marks the keys of the row's listed tiles. */
typedef enum listed_mode {
    LISTED_AS_GIVEN,        /* full tiles' keys all, partial tiles' keys by the mask */
    LISTED_PARTIAL_AS_FULL, /* every key (a kernel that skips the mask) */
    LISTED_MASKED_FILLED,   /* as given, and 2 (masked_score) for partial tiles' masked keys */
} listed_mode;

/* The producer's block mask as a kernel applies it (docs/semantics.md section 5): the row's
 * query tile's listed blocks only, full ones' keys all, partial ones' keys as `mode` says.
 * Keys past Lk (a ragged last block) never. */
static void keys_listed(const diag_alt *a, const diag_key *k, uint8_t *allowed,
                        listed_mode mode)
{
    const bmask *bm = k->in->bm;
    int32_t lk = k->p->seq.lk, kb = bm->kv_block_size;
    size_t row = bmask_row(bm, k->b, k->h, k->tq / bm->q_block_size);
    memset(allowed, 0, (size_t)lk);
    for (int full = 0; full < 2; full++) {
        const int32_t *num = full ? bm->full_kv_num_blocks : bm->kv_num_blocks;
        const int32_t *ids = bmask_ids(bm, full, row);
        for (int32_t s = 0; s < num[row]; s++) {
            int64_t t0 = (int64_t)ids[s] * kb;
            int64_t t1 = t0 + kb < lk ? t0 + kb : lk;
            for (int64_t tk = t0; tk < t1; tk++) {
                int ok = full || mode == LISTED_PARTIAL_AS_FULL ||
                         (mask_pair_allowed(a->mask, a->view, k->tq, (int32_t)tk) &&
                          x_allows(a, k, (int32_t)tk));
                allowed[tk] = (uint8_t)(ok ? 1 : mode == LISTED_MASKED_FILLED ? 2 : 0);
            }
        }
    }
}

static void keys_block_mask(const diag_alt *a, const diag_key *k, uint8_t *allowed)
{
    keys_listed(a, k, allowed, LISTED_AS_GIVEN);
}

static void keys_partial_as_full(const diag_alt *a, const diag_key *k, uint8_t *allowed)
{
    keys_listed(a, k, allowed, LISTED_PARTIAL_AS_FULL);
}

/* The row's listed kv tiles, partial and full: the tiles a kernel visits for it. */
static int32_t tiles_visited(const diag_key *k)
{
    const bmask *bm = k->in->bm;
    size_t row = bmask_row(bm, k->b, k->h, k->tq / bm->q_block_size);
    return bm->kv_num_blocks[row] + bm->full_kv_num_blocks[row];
}

/* The keys a kernel uses, and 2 (the alternative's masked_score) for every masked key it
 * visits: with the producer's block mask, the mask as given plus the masked keys of its
 * partial tiles; without one, the truth's keys plus the rest of the row's sequence (a dense
 * kernel; one that skips tiles past the diagonal is not modelled). Keys past Lk never. */
static void keys_masked_filled(const diag_alt *a, const diag_key *k, uint8_t *allowed)
{
    if (k->in->bm) {
        keys_listed(a, k, allowed, LISTED_MASKED_FILLED);
        return;
    }
    diag_keys_mask(a, k, allowed);
    for (int32_t tk = k->row.k0; tk < k->row.k1; tk++)
        allowed[tk] = allowed[tk] ? 1 : 2;
}

/* The last key of the row's sequence never attended (an exclusive end one short). */
static void keys_drop_last(const diag_alt *a, const diag_key *k, uint8_t *allowed)
{
    diag_keys_mask(a, k, allowed);
    if (k->row.k1 > k->row.k0)
        allowed[k->row.k1 - 1] = 0;
}

/* A window whose reach differs on one side of the query: keys after it (p_k > p_q) held to
 * a->mask's window and those at or before it to the truth's (keys_window_after), or the other
 * way round (keys_window_before); causal and chunk as the truth's either way. */
static void keys_window_sides(const diag_alt *a, const diag_key *k, uint8_t *allowed,
                              int after_changed)
{
    for (int32_t tk = 0; tk < k->p->seq.lk; tk++) {
        int after = (int64_t)tk - k->row.k0 > k->row.pq;
        mask_params m = after == after_changed ? a->mask : k->p->mask;
        allowed[tk] = (uint8_t)row_allows(a, k, m, k->row, tk);
    }
}

static void keys_window_after(const diag_alt *a, const diag_key *k, uint8_t *allowed)
{
    keys_window_sides(a, k, allowed, 1);
}

static void keys_window_before(const diag_alt *a, const diag_key *k, uint8_t *allowed)
{
    keys_window_sides(a, k, allowed, 0);
}

/* The query's position moved by `by` in sequences with fewer queries than keys (the decode
 * and chunked-prefill rows), p_q = i + nk - nq + by; other sequences as the truth. */
static void keys_decode_moved(const diag_alt *a, const diag_key *k, uint8_t *allowed,
                              int32_t by)
{
    mask_row r = k->row;
    int32_t s = seq_find(a->view.cu_q, a->view.nseq, k->tq);
    if (a->view.cu_q[s + 1] - a->view.cu_q[s] < r.k1 - r.k0)
        r.pq += by;
    for (int32_t tk = 0; tk < k->p->seq.lk; tk++)
        allowed[tk] = (uint8_t)row_allows(a, k, a->mask, r, tk);
}

static void keys_decode_ahead(const diag_alt *a, const diag_key *k, uint8_t *allowed)
{
    keys_decode_moved(a, k, allowed, 1);
}

static void keys_decode_behind(const diag_alt *a, const diag_key *k, uint8_t *allowed)
{
    keys_decode_moved(a, k, allowed, -1);
}

/* Chunks from position + 1: the chunk term sees (p_q + 1, p_k + 1), every chunk boundary one
 * position early; causal and window still see the positions. */
static void keys_chunk_shifted(const diag_alt *a, const diag_key *k, uint8_t *allowed)
{
    mask_params rest = a->mask, chunk = {0};
    rest.chunk_size = 0;
    chunk.chunk_size = a->mask.chunk_size;
    for (int32_t tk = 0; tk < k->p->seq.lk; tk++)
        allowed[tk] = (uint8_t)(row_allows(a, k, rest, k->row, tk) &&
                                mask_allowed(chunk, k->row.pq + 1, tk - k->row.k0 + 1));
}

/* A sequence's first query also uses the key just before its sequence's keys (the previous
 * sequence's last), whatever the mask says of it: a boundary leak of one key. */
static void keys_boundary_leak(const diag_alt *a, const diag_key *k, uint8_t *allowed)
{
    diag_keys_mask(a, k, allowed);
    if (k->i == 0 && k->row.k0 > 0)
        allowed[k->row.k0 - 1] = 1;
}

/* A row with no allowed key filled as a finite mask value does: every key of its sequence (or,
 * keys_fill_all, of the whole key axis) with the same score, so O is the mean of their values;
 * rows with keys as the truth. */
static void keys_fill(const diag_alt *a, const diag_key *k, uint8_t *allowed, int32_t k0,
                      int32_t k1)
{
    diag_keys_mask(a, k, allowed);
    for (int32_t tk = k->row.k0; tk < k->row.k1; tk++)
        if (allowed[tk])
            return;
    for (int32_t tk = k0; tk < k1; tk++)
        allowed[tk] = 2;
}

static void keys_fill_sequence(const diag_alt *a, const diag_key *k, uint8_t *allowed)
{
    keys_fill(a, k, allowed, k->row.k0, k->row.k1);
}

static void keys_fill_all(const diag_alt *a, const diag_key *k, uint8_t *allowed)
{
    keys_fill(a, k, allowed, 0, k->p->seq.lk);
}

/* 1 iff some row has no allowed key (LSE_gold -inf): the masked-row fills can show there. */
static int some_row_empty(const diag_in *in)
{
    size_t n = judge_rows(in->jc); /* a sample's rows: what jc->lse holds */
    for (size_t r = 0; r < n; r++)
        if (in->jc->lse[r] == -INFINITY)
            return 1;
    return 0;
}

/* GQA with the heads dealt round-robin (h % Hkv) instead of in groups. */
static int32_t kv_modulo(const attn_problem *p, int32_t h)
{
    return h % p->hkv;
}

/* 1 iff some sequence has nq != nk, the only case where p_q and i differ. */
static int some_sequence_unaligned(const attn_problem *p)
{
    for (int32_t s = 0; s < p->seq.nseq; s++)
        if (p->seq.cu_q[s + 1] - p->seq.cu_q[s] != p->seq.cu_k[s + 1] - p->seq.cu_k[s])
            return 1;
    return 0;
}

/* The window set to w, with the title "<what> (W -> w)"; 0 when there is no window or w is
 * no window or the same one. */
static int window_to(diag_alt *a, int64_t w, const char *what)
{
    int32_t W = a->mask.sliding_window;
    if (W < 1 || w < 1 || w > INT32_MAX || w == W)
        return 0;
    a->mask.sliding_window = (int32_t)w;
    fc_fmt(a->title, sizeof a->title, "%s (%d -> %lld)", what, (int)W, (long long)w);
    return 1;
}

/* ---- a key set that is another hypothesis's on the case -------------------------------- */

/* Above this many (query, key) pairs a case's key sets are not compared (same_keys): a few
 * tenths of a second of mask evaluations. */
#define SAME_KEYS_MAX_PAIRS ((uint64_t)1 << 26)

/* 1 iff alternatives a and b (on the truth's view, with key functions that read no block
 * mask) give every query token of the case the same keys: in every batch entry and head the
 * case's explicit mask tells apart (its Bm x Hm; one without it, the families reading neither).
 * 0 when they differ somewhere, when the case is past SAME_KEYS_MAX_PAIRS or memory is short:
 * then both are tried, and where no row tells them apart they are reported as
 * indistinguishable, which is true if less precise. */
static int same_keys(const diag_in *in, const diag_alt *a, const diag_alt *b)
{
    const attn_problem *p = in->jc->prob;
    const seq_info *s = &p->seq;
    int32_t nb = p->xmask.bits ? p->xmask.bm : 1, nh = p->xmask.bits ? p->xmask.hm : 1;
    if ((uint64_t)nb * (uint64_t)nh * (uint64_t)s->lq * (uint64_t)(s->lk > 0 ? s->lk : 1) >
        SAME_KEYS_MAX_PAIRS)
        return 0;
    uint8_t *ka = malloc((size_t)s->lk + 1), *kb = malloc((size_t)s->lk + 1);
    int same = ka && kb;
    for (int32_t bh = 0; same && bh < nb * nh; bh++)
        for (int32_t tq = 0; same && tq < s->lq; tq++) {
            diag_key k = {in, p, bh / nh, bh % nh, tq, mask_row_of(a->view, tq), 0};
            k.i = tq - a->view.cu_q[seq_find(a->view.cu_q, a->view.nseq, tq)];
            a->keys(a, &k, ka);
            b->keys(b, &k, kb);
            same = memcmp(ka, kb, (size_t)s->lk) == 0;
        }
    free(ka);
    free(kb);
    return same;
}

/* For a setup whose bug changes only the key set: 0 when on this case it gives every row the
 * truth's keys (it cannot differ from the truth). When it gives every row the keys of window
 * W-1, W+1 or the last key dropped (other hypotheses of the table), it becomes that
 * alternative, title kept, so that diag_run.c merges the two into one finding titled with both
 * names, the earlier in the table first, instead of reporting two causes no row can tell apart
 * (a decode row's position one ahead under a causal window is window W-1). 1 otherwise. */
static int keys_settled(const diag_in *in, diag_alt *a)
{
    diag_alt other;
    diag_alt_init(in, &other);
    if (same_keys(in, a, &other))
        return 0;
    for (int c = 0; c < 3; c++) { /* window W-1, window W+1, the last key dropped */
        diag_alt_init(in, &other);
        int applies;
        if (c < 2) {
            applies = window_to(&other, (int64_t)other.mask.sliding_window + (c ? 1 : -1), "");
        } else {
            applies = in->jc->prob->seq.lk >= 1;
            other.keys = keys_drop_last;
        }
        if (applies && same_keys(in, a, &other)) {
            memcpy(other.title, a->title, sizeof other.title);
            *a = other;
            return 1;
        }
    }
    return 1;
}

/* 1 iff some sequence has fewer queries than keys (decode, chunked prefill) and more than
 * min_keys keys. */
static int some_sequence_shorter(const attn_problem *p, int32_t min_keys)
{
    for (int32_t s = 0; s < p->seq.nseq; s++) {
        int32_t nk = p->seq.cu_k[s + 1] - p->seq.cu_k[s];
        if (p->seq.cu_q[s + 1] - p->seq.cu_q[s] < nk && nk > min_keys)
            return 1;
    }
    return 0;
}

/* ---- the hypotheses, one setup each ----------------------------------------------------- */

static int window_minus_1(const diag_in *in, diag_alt *a)
{
    return window_to(a, (int64_t)a->mask.sliding_window - 1, "window W-1");
}

static int window_plus_1(const diag_in *in, diag_alt *a)
{
    return window_to(a, (int64_t)a->mask.sliding_window + 1, "window W+1");
}

static int window_halved(const diag_in *in, diag_alt *a)
{
    return window_to(a, a->mask.sliding_window / 2, "window halved W/2");
}

static int window_doubled(const diag_in *in, diag_alt *a)
{
    return window_to(a, 2 * (int64_t)a->mask.sliding_window, "window doubled 2W");
}

/* ModernBERT's local_attention = 128 is W = 128/2 + 1 = 65 (docs/semantics.md section 2): a
 * producer that converted a value that already was W... */
static int window_converted(const diag_in *in, diag_alt *a)
{
    return window_to(a, a->mask.sliding_window / 2 + 1,
                     "window W/2+1, converted as from a local_attention size");
}

/* ...or one that used the config's local_attention size as W, 2(W - 1). */
static int window_unconverted(const diag_in *in, diag_alt *a)
{
    return window_to(a, 2 * ((int64_t)a->mask.sliding_window - 1),
                     "window 2(W-1), the local_attention size unconverted");
}

/* A bidirectional window whose reach on one side of the query is one more or one less than
 * W (a range written -W <= p_q - p_k < W, or the two comparisons of |p_q - p_k| < W with
 * different bounds). Under a causal mask the side after the query is masked anyway and the
 * side before it is window W-1 or W+1: not this. */
static int window_side(const diag_in *in, diag_alt *a, int after, int32_t by)
{
    int32_t W = a->mask.sliding_window;
    if (W < 1 || a->mask.causal || W + by < 1)
        return 0;
    a->mask.sliding_window = W + by;
    a->keys = after ? keys_window_after : keys_window_before;
    fc_fmt(a->title, sizeof a->title, "asymmetric window, W%s %s the query (%d -> %d for keys "
           "%s it, %d %s)", by > 0 ? "+1" : "-1", after ? "after" : "before", (int)W,
           (int)(W + by), after ? "after" : "at or before", (int)W, after ? "before" : "after");
    return keys_settled(in, a);
}

static int window_after_plus_1(const diag_in *in, diag_alt *a)
{
    return window_side(in, a, 1, 1);
}

static int window_after_minus_1(const diag_in *in, diag_alt *a)
{
    return window_side(in, a, 1, -1);
}

static int window_before_plus_1(const diag_in *in, diag_alt *a)
{
    return window_side(in, a, 0, 1);
}

static int window_before_minus_1(const diag_in *in, diag_alt *a)
{
    return window_side(in, a, 0, -1);
}

static int top_left(const diag_in *in, diag_alt *a)
{
    if (!some_sequence_unaligned(in->jc->prob))
        return 0;
    a->keys = keys_top_left;
    fc_fmt(a->title, sizeof a->title, "top-left alignment (p_q = i instead of i + nk - nq)");
    return 1;
}

/* Decode rows one position off: p_q = i + nk - nq + 1 (the context length taken as the new
 * token's position) or - 1, in the sequences with fewer queries than keys. A mask that reads
 * no position (no causal, window or chunk) cannot show it.
 * One behind needs a window shorter than such a sequence's keys: without one, a causal row one
 * behind loses its own key, and on a block's last row that is the sequence's last key, the
 * row that is all drop-last-key changes there. The two would compute the same failing rows on
 * every such output of that bug and tie; with the window, the row one behind also gains key
 * p_q - W, which the window then reaches. */
static int decode_moved(const diag_in *in, diag_alt *a, int32_t by)
{
    const attn_problem *p = in->jc->prob;
    int32_t W = a->mask.sliding_window;
    if (by < 0 ? W < 1 || !some_sequence_shorter(p, W)
               : !some_sequence_shorter(p, 0) ||
                     !(a->mask.causal || W > 0 || a->mask.chunk_size > 0))
        return 0;
    a->keys = by > 0 ? keys_decode_ahead : keys_decode_behind;
    fc_fmt(a->title, sizeof a->title, "decode positions one %s (p_q = i + nk - nq %s 1 where "
           "nq < nk)", by > 0 ? "ahead" : "behind", by > 0 ? "+" : "-");
    return keys_settled(in, a);
}

static int decode_ahead(const diag_in *in, diag_alt *a)
{
    return decode_moved(in, a, 1);
}

static int decode_behind(const diag_in *in, diag_alt *a)
{
    return decode_moved(in, a, -1);
}

static int causal_flipped(const diag_in *in, diag_alt *a)
{
    a->mask.causal = !a->mask.causal;
    fc_fmt(a->title, sizeof a->title, "causal flipped (%s)",
           a->mask.causal ? "bidirectional -> causal" : "causal -> bidirectional");
    return 1;
}

static int chunk_off(const diag_in *in, diag_alt *a)
{
    if (a->mask.chunk_size < 1)
        return 0;
    fc_fmt(a->title, sizeof a->title, "chunking off (C %d -> 0)", (int)a->mask.chunk_size);
    a->mask.chunk_size = 0;
    return 1;
}

static int chunk_from_index(const diag_in *in, diag_alt *a)
{
    if (a->mask.chunk_size < 1 || !some_sequence_unaligned(in->jc->prob))
        return 0;
    a->keys = keys_chunk_from_index;
    fc_fmt(a->title, sizeof a->title,
           "chunks counted from the query index (floor(i / %d) instead of floor(p_q / %d))",
           (int)a->mask.chunk_size, (int)a->mask.chunk_size);
    return 1;
}

/* Chunk ids from 1-based positions, floor((p + 1) / C) for queries and keys alike. */
static int chunk_shifted(const diag_in *in, diag_alt *a)
{
    int32_t C = a->mask.chunk_size;
    if (C < 1)
        return 0;
    a->keys = keys_chunk_shifted;
    fc_fmt(a->title, sizeof a->title, "chunks from position + 1 (floor((p + 1) / %d) instead of "
           "floor(p / %d))", (int)C, (int)C);
    return keys_settled(in, a);
}

static int prev_layer(const diag_in *in, diag_alt *a)
{
    if (!in->prev || memcmp(in->prev, &a->mask, sizeof a->mask) == 0)
        return 0;
    char was[64], now[64];
    mask_params_text(was, sizeof was, &a->mask, MASK_TEXT_LABEL_EQ);
    mask_params_text(now, sizeof now, in->prev, MASK_TEXT_LABEL_EQ);
    a->mask = *in->prev;
    fc_fmt(a->title, sizeof a->title, "the previous layer's mask (%s -> %s)", was, now);
    return 1;
}

static int block_mask(const diag_in *in, diag_alt *a)
{
    if (!in->bm)
        return 0;
    a->keys = keys_block_mask;
    /* Its defects against the case's mask are what makes it a bug: name them. */
    const attn_problem *p = in->jc->prob;
    bmask_defects d;
    fc_err err;
    char what[64] = "";
    /* against the whole predicate, the families AND the explicit mask (the truth's), over every
     * (b, h) a stored row stands for: a list built from the families alone leaks the explicit
     * mask's holes in its full tiles, and those are counted */
    if (!bmask_find_defects_x(in->bm, p->mask, &p->seq, p->xmask, &d, &err) &&
        (d.dropped || d.leaked))
        fc_fmt(what, sizeof what, "; it drops %lld tiles and leaks %lld", (long long)d.dropped,
               (long long)d.leaked);
    fc_fmt(a->title, sizeof a->title,
           "the block mask as given (%lld partial, %lld full blocks of %dx%d%s)",
           (long long)bmask_count_partial(in->bm), (long long)bmask_count_full(in->bm),
           (int)in->bm->q_block_size, (int)in->bm->kv_block_size, what);
    return 1;
}

static int partial_as_full(const diag_in *in, diag_alt *a)
{
    if (!in->bm || bmask_count_partial(in->bm) == 0)
        return 0;
    a->keys = keys_partial_as_full;
    fc_fmt(a->title, sizeof a->title,
           "partial blocks taken as full (%lld partial blocks of %dx%d, mask not applied)",
           (long long)bmask_count_partial(in->bm), (int)in->bm->q_block_size,
           (int)in->bm->kv_block_size);
    return 1;
}

/* The scale set to s, with the title "<what> instead of the stored one (scale -> s)"; 0 when s
 * is the stored scale up to a float's rounding (a stored 1/sqrt(D) is the default already). */
static int scale_to(diag_alt *a, double s, const char *what)
{
    if (fabs(a->scale - s) <= 1e-6 * s)
        return 0;
    fc_fmt(a->title, sizeof a->title, "%s instead of the stored one (%.6g -> %.6g)", what,
           a->scale, s);
    a->scale = s;
    return 1;
}

static int scale_default(const diag_in *in, diag_alt *a)
{
    return scale_to(a, 1.0 / sqrt((double)in->jc->prob->d), "scale 1/sqrt(D)");
}

static int scale_squared(const diag_in *in, diag_alt *a)
{
    double s = a->scale * a->scale;
    if (s == a->scale || !(s > 0) || !isfinite(s))
        return 0;
    fc_fmt(a->title, sizeof a->title, "scale applied twice (%.6g -> %.6g)", a->scale, s);
    a->scale = s;
    return 1;
}

/* 1/D instead of 1/sqrt(D) (the square root forgotten). Where the stored scale is the default
 * this computes what "scale applied twice" does, and diag_run.c names the two together. */
static int scale_one_over_d(const diag_in *in, diag_alt *a)
{
    return scale_to(a, 1.0 / (double)in->jc->prob->d, "scale 1/D");
}

/* ---- score terms (docs/semantics.md section 7) ---------------------------------------- */

/* The soft-cap not applied: raw scaled scores into the softmax. */
static int softcap_missing(const diag_in *in, diag_alt *a)
{
    double c = in->jc->prob->terms.softcap;
    if (!(c > 0))
        return 0;
    a->softcap = 0;
    fc_fmt(a->title, sizeof a->title, "soft-cap missing (cap %g not applied to the scores)", c);
    return 1;
}

/* The soft-cap applied after the mask's -inf fill, as a score_mod run after mask_mod would:
 * every masked key the kernel visits scores c * tanh(-inf / c) = -c instead of dropping out. It
 * shows where allowed scores come near -c (a low cap, or scores well below the row's max).
 * Modelled: a kernel visiting every listed tile of the row's query tile. One that skips a tile
 * where the row has no allowed key matches on the rows whose listed tiles all hold one; keys
 * past Lk that a kernel fills too (the padding of a ragged last tile) are not modelled. With an
 * explicit mask its masked keys are filled too, and with an explicit bias the whole score term
 * runs after the fill: a masked key scores -c plus its bias (a finite bias cannot undo -inf, so
 * without a cap the fill stays -inf and there is no such bug to see). */
static int softcap_after_fill(const diag_in *in, diag_alt *a)
{
    double c = in->jc->prob->terms.softcap;
    if (!(c > 0))
        return 0;
    a->keys = keys_masked_filled;
    a->masked_score = -c;
    a->fill_biased = a->xbias.vals != NULL;
    fc_fmt(a->title, sizeof a->title, "soft-cap applied after the mask's -inf fill (masked keys "
           "of the %s score -%g%s)", in->bm ? "partial tiles" : "sequence", c,
           a->fill_biased ? " plus their bias" : "");
    return 1;
}

/* The soft-cap applied to q.k before the scale: scale * c tanh(q.k / c), which is the
 * truth's formula c' tanh(s / c') on the scaled score s with the cap c' = scale * c. */
static int softcap_before_scale(const diag_in *in, diag_alt *a)
{
    const attn_problem *p = in->jc->prob;
    double c = p->terms.softcap;
    if (!(c > 0) || p->scale == 1.0)
        return 0;
    a->softcap = p->scale * c;
    fc_fmt(a->title, sizeof a->title, "soft-cap before the scale (%.6g * %g tanh(q.k / %g): a "
           "cap of %.6g on the scaled score)", p->scale, c, c, a->softcap);
    return 1;
}

/* The sinks left out of the softmax. */
static int sink_missing(const diag_in *in, diag_alt *a)
{
    if (!in->jc->prob->terms.sinks)
        return 0;
    a->sink_count = 0;
    fc_fmt(a->title, sizeof a->title, "sink missing (the head's sink left out of the softmax)");
    return 1;
}

/* The sink's term in the sum twice (e.g. once as the running max's start and once more at the
 * end). A kernel that adds it per kv tile counts it as often as the row has tiles: rows of
 * two tiles look like this. */
static int sink_twice(const diag_in *in, diag_alt *a)
{
    if (!in->jc->prob->terms.sinks)
        return 0;
    a->sink_count = 2;
    fc_fmt(a->title, sizeof a->title, "sink counted twice in the softmax's sum");
    return 1;
}

static double sink_count_per_tile(const diag_alt *a, const diag_key *k)
{
    return 1.0 + (double)tiles_visited(k);
}

/* The sink's term added again at every kv tile the kernel visits (in the online softmax's
 * tile step as well as at its start), so a row's sum holds it once plus once per tile its
 * query tile lists. Needs the producer's block mask to count them. */
static int sink_per_tile(const diag_in *in, diag_alt *a)
{
    if (!in->jc->prob->terms.sinks || !in->bm)
        return 0;
    a->sink_count_of = sink_count_per_tile;
    fc_fmt(a->title, sizeof a->title, "sink counted again in every kv tile visited (1 + the "
           "row's listed tiles of %dx%d)", (int)in->bm->q_block_size,
           (int)in->bm->kv_block_size);
    return 1;
}

/* The sink treated as a key with a value: its share of the softmax added to every output
 * element, as if its value vector were all ones (e.g. the accumulator started at the sink's
 * weight instead of 0). */
static int sink_valued(const diag_in *in, diag_alt *a)
{
    if (!in->jc->prob->terms.sinks)
        return 0;
    a->sink_value = 1.0;
    fc_fmt(a->title, sizeof a->title, "sink given a value (its share of the softmax added to "
           "every output element, a value vector of ones)");
    return 1;
}

/* The sink treated as a score: multiplied by the softmax scale. */
static int sink_scaled(const diag_in *in, diag_alt *a)
{
    const attn_problem *p = in->jc->prob;
    if (!p->terms.sinks || p->scale == 1.0)
        return 0;
    a->sink_mul = p->scale;
    fc_fmt(a->title, sizeof a->title, "sink multiplied by the softmax scale (%.6g)", p->scale);
    return 1;
}

/* A head's sink read from another head's: the sinks indexed by the kv head (h / (Hq / Hkv),
 * the index the keys and values use) instead of the query head... */
static int sink_kv_head(const diag_in *in, diag_alt *a)
{
    const attn_problem *p = in->jc->prob;
    if (!p->terms.sinks || p->hq == p->hkv)
        return 0;
    a->sink_div = p->hq / p->hkv;
    fc_fmt(a->title, sizeof a->title, "sinks indexed by the kv head (query head h took "
           "sink[h / %d])", (int)a->sink_div);
    return 1;
}

/* ...or by a head index one off, wrapping (Python's sinks[h - 1] reads the last head's at
 * h = 0). At Hq = 2 the previous head is the next one: one alternative, merged by diag_run.c. */
static int sink_head_moved(const diag_in *in, diag_alt *a, int32_t by)
{
    const attn_problem *p = in->jc->prob;
    if (!p->terms.sinks || p->hq < 2)
        return 0;
    a->sink_shift = (by + p->hq) % p->hq;
    fc_fmt(a->title, sizeof a->title, "sink of the %s head (query head h took sink[h %s 1], "
           "head %d sink[%d])", by > 0 ? "next" : "previous", by > 0 ? "+" : "-",
           by > 0 ? (int)p->hq - 1 : 0, by > 0 ? 0 : (int)p->hq - 1);
    return 1;
}

static int sink_prev_head(const diag_in *in, diag_alt *a)
{
    return sink_head_moved(in, a, -1);
}

static int sink_next_head(const diag_in *in, diag_alt *a)
{
    return sink_head_moved(in, a, 1);
}

static int gqa_modulo(const diag_in *in, diag_alt *a)
{
    const attn_problem *p = in->jc->prob;
    if (p->hkv < 2 || p->hq == p->hkv)
        return 0;
    a->kv_head = kv_modulo;
    fc_fmt(a->title, sizeof a->title,
           "GQA kv head h %% Hkv instead of h / (Hq / Hkv) (Hq %d, Hkv %d)", (int)p->hq,
           (int)p->hkv);
    return 1;
}

/* One sequence over the whole token axis: every query at position tq + Lk - Lq. */
static int packed_ignored(const diag_in *in, diag_alt *a)
{
    const seq_info *s = &in->jc->prob->seq;
    if (!s->packed || s->nseq < 2)
        return 0;
    a->cu[0] = 0;
    a->cu[1] = s->lq;
    a->cu[2] = 0;
    a->cu[3] = s->lk;
    a->view = (seq_view){a->cu, a->cu + 2, 1, s->lq, s->lk, 0};
    fc_fmt(a->title, sizeof a->title,
           "packed boundaries ignored (%d sequences as one of %d queries, %d keys)",
           (int)s->nseq, (int)s->lq, (int)s->lk);
    return 1;
}

/* Each packed sequence's first query also sees the previous sequence's last key. */
static int packed_leak(const diag_in *in, diag_alt *a)
{
    const seq_info *s = &in->jc->prob->seq;
    int can = 0;
    for (int32_t n = 1; s->packed && n < s->nseq; n++)
        can |= s->cu_q[n + 1] > s->cu_q[n] && s->cu_k[n] > 0;
    if (!can)
        return 0;
    a->keys = keys_boundary_leak;
    fc_fmt(a->title, sizeof a->title, "packed boundary leak (each sequence's first query also "
           "sees the key before its sequence, the previous sequence's last)");
    return keys_settled(in, a);
}

/* A kernel that computes q.k in the input type rounds every score to it before a float32
 * softmax (PyTorch 2.7's eager flex_attention does, for bfloat16: its LSE is that of the
 * rounded scores). Only float16 and bfloat16 cases. */
static int scores_rounded(const diag_in *in, diag_alt *a)
{
    if (in->jc->dtype == FC_F32)
        return 0;
    a->round_scores = in->jc->dtype;
    fc_fmt(a->title, sizeof a->title, "scores rounded to %s before the softmax (q.k computed in "
           "the input type)", fc_dtype_name(in->jc->dtype));
    return 1;
}

/* An online softmax that forgets part of its rescale when the running max rises
 * (FlashAttention's l *= alpha and acc *= alpha, alpha = exp(m_old - m_new)): the keys of tiles
 * visited before the row's largest score weigh too much. Its tries: every power-of-two tile
 * width from 16 to online_wmax (the kernel's own is unknown) and, without a block mask, both
 * visit orders (online_tiles). Keys: the block mask's, as a kernel applies it. diag_eval.c credits
 * only rows the same keys computed right do not match. Not with sinks: whether a kernel folds
 * the sink in first or last changes what the bug does. */

/* The widest tile tried: the block mask's kv block, 128 without one. */
static int32_t online_wmax(const diag_in *in)
{
    return in->bm ? in->bm->kv_block_size : 128;
}

static int online_widths(const diag_in *in)
{
    int n = 0;
    for (int32_t w = 16; w <= online_wmax(in); w *= 2)
        n++;
    return n;
}

/* Try t's tiles for row k: width 16 << (t % widths). With the producer's block mask, the row's
 * query tile's listed blocks, partial ones first, then full ones, each list in its order
 * (PyTorch's flex_attention and our kernels go so), cut into sub-tiles of that width. Without
 * one, the row's sequence's keys [k0, k1) in tiles of that width from k0, as a varlen kernel
 * tiles a packed batch: ascending for t < widths, else the last first (FlashAttention-2's
 * forward walks its kv blocks so). Keys past Lk never. */
static size_t online_tiles(const diag_alt *a, const diag_key *k, int t, int32_t *tiles)
{
    const bmask *bm = k->in->bm;
    int32_t lk = k->p->seq.lk, nw = online_widths(k->in), w = 16 << (t % nw);
    size_t n = 0;
    (void)a;
    if (!bm) {
        int32_t k0 = k->row.k0, k1 = k->row.k1, last = k1 > k0 ? (k1 - k0 - 1) / w : -1;
        for (int32_t i = 0; i <= last; i++) {
            int32_t j = k0 + (t < nw ? i : last - i) * w;
            tiles[2 * n] = j;
            tiles[2 * n++ + 1] = j + w < k1 ? j + w : k1;
        }
        return n;
    }
    size_t row = bmask_row(bm, k->b, k->h, k->tq / bm->q_block_size);
    int32_t kb = bm->kv_block_size;
    for (int full = 0; full < 2; full++) {
        const int32_t *ids = bmask_ids(bm, full, row);
        int32_t cnt = (full ? bm->full_kv_num_blocks : bm->kv_num_blocks)[row];
        for (int32_t s = 0; s < cnt; s++) {
            int64_t b0 = (int64_t)ids[s] * kb, b1 = b0 + kb < lk ? b0 + kb : lk;
            for (int64_t j = b0; j < b1; j += w) {
                tiles[2 * n] = (int32_t)j;
                tiles[2 * n++ + 1] = (int32_t)(j + w < b1 ? j + w : b1);
            }
        }
    }
    return n;
}

static int online_bug(const diag_in *in, diag_alt *a, ref_rescale how, const char *what)
{
    if (in->jc->prob->terms.sinks || in->jc->prob->seq.lk <= 16)
        return 0; /* (Lk <= 16: one tile a row, the max never rises after it) */
    a->rescale = how;
    a->ntries = online_widths(in) * (in->bm ? 1 : 2);
    a->tiles = online_tiles;
    if (in->bm)
        a->keys = keys_block_mask;
    char widths[32];
    int32_t wmax = online_wmax(in);
    fc_fmt(widths, sizeof widths, wmax > 16 ? "16 to %d" : "%d", (int)wmax);
    fc_fmt(a->title, sizeof a->title, "online softmax %s as the max rises (kv tiles of %s keys%s)",
           what, widths, in->bm ? "" : ", either order");
    return 1;
}

/* Neither the sum nor the accumulator rescaled: the weights and the LSE off. */
static int no_rescale(const diag_in *in, diag_alt *a)
{
    return online_bug(in, a, REF_RESCALE_NONE, "rescale missing, sum and accumulator alike,");
}

/* The sum rescaled, the accumulator not: the weights off, the LSE right. */
static int no_rescale_acc(const diag_in *in, diag_alt *a)
{
    return online_bug(in, a, REF_RESCALE_SUM, "accumulator not rescaled (the sum is)");
}

/* A softmax in the input type (JAX's softmax on bfloat16 logits, a kernel that keeps P and its
 * sum in half precision): each weight and their sum rounded to it (ref.h's softmax_dt; diag_eval.c
 * tries each REF_LOWP_* way: the sum rounded once or after every add, P normalised weight by
 * weight or O divided by the sum at the end, the sink first or last, the scores as computed or
 * rounded to the type first). Only float16 and bfloat16 cases.
 * The scores' rounding is a way, not a hypothesis of its own: the same-precision baseline
 * rounds its scores too, so the bounds hold most of what it moves, and as two hypotheses
 * (issue 35's outsider engines, 2026-12-02) the softmax on rounded scores and the one on
 * unrounded scores tied on 66 of the 364 outputs the two bugs failed, and one was named alone,
 * the other's bug planted, on 14 more. A rounded-scores way is credited only where its row is
 * not scores-rounded's (diag_eval.c lowp_changes_nothing): on scores of -1e5, 512 apart in
 * bfloat16, every weight but the largest vanishes and the two compute the same rows. */
static int softmax_lowp(const diag_in *in, diag_alt *a)
{
    if (in->jc->dtype == FC_F32)
        return 0;
    a->softmax_dt = in->jc->dtype;
    fc_fmt(a->title, sizeof a->title, "softmax in %s (P and its sum rounded to the input type, "
           "on the scores as computed or rounded to it)", fc_dtype_name(in->jc->dtype));
    return 1;
}

/* Each sequence's last key dropped: an exclusive end computed one short (k1 - 1). */
static int drop_last_key(const diag_in *in, diag_alt *a)
{
    if (in->jc->prob->seq.lk < 1)
        return 0;
    a->keys = keys_drop_last;
    fc_fmt(a->title, sizeof a->title, "the last key of each sequence dropped (an end one short)");
    return 1;
}

/* Fully masked rows filled with a finite value instead of -inf (JAX's finite mask fill): the
 * row's softmax is uniform over the keys, O the mean of their values, the LSE the fill plus a
 * log (a number nobody can predict: any finite LSE). Not with sinks (the sink would outweigh
 * the fill). */
static int masked_fill(const diag_in *in, diag_alt *a, int all)
{
    if (in->jc->prob->terms.sinks || !some_row_empty(in) || (all && !in->jc->prob->seq.packed))
        return 0;
    a->keys = all ? keys_fill_all : keys_fill_sequence;
    a->only_empty = 1;
    a->lse_free = 1;
    fc_fmt(a->title, sizeof a->title, "fully masked rows give the mean of V over %s and a finite "
           "LSE (a finite mask fill, not -inf)",
           all ? "every key of the batch" : "their sequence's keys");
    return 1;
}

static int masked_row_mean(const diag_in *in, diag_alt *a)
{
    return masked_fill(in, a, 0);
}

static int masked_row_mean_all(const diag_in *in, diag_alt *a)
{
    return masked_fill(in, a, 1);
}

/* Fully masked rows with O = 0 but a finite LSE (the fill's, not -inf). */
static int masked_row_lse(const diag_in *in, diag_alt *a)
{
    if (!in->lse || in->jc->prob->terms.sinks || !some_row_empty(in))
        return 0;
    a->only_empty = 1;
    a->lse_free = 1;
    fc_fmt(a->title, sizeof a->title, "fully masked rows give O = 0 but a finite LSE (a finite "
           "mask fill, not -inf)");
    return 1;
}

/* The LSE rounded to a lower type and widened again (JAX returns its LSE in the input type). */
static int lse_rounded_to(const diag_in *in, diag_alt *a, fc_dtype dt, const char *why)
{
    if (!in->lse || dt == FC_F32)
        return 0;
    a->lse_round = dt;
    fc_fmt(a->title, sizeof a->title, "LSE rounded to %s (%s)", fc_dtype_name(dt), why);
    return 1;
}

static int lse_rounded(const diag_in *in, diag_alt *a)
{
    return lse_rounded_to(in, a, in->jc->dtype, "the input type");
}

/* ... to the type the output was stored in, when that is another one. */
static int lse_out_type(const diag_in *in, diag_alt *a)
{
    if (in->out_dtype == in->jc->dtype)
        return 0;
    return lse_rounded_to(in, a, in->out_dtype, "the output's type");
}

/* O as the truth's; the LSE written in base 2. */
static int lse_log2(const diag_in *in, diag_alt *a)
{
    if (!in->lse)
        return 0;
    a->lse_mul = 1.0 / log(2.0);
    fc_fmt(a->title, sizeof a->title, "LSE in log2 (the natural-log LSE / ln 2)");
    return 1;
}

/* ---- the explicit terms (masks/xterms.h, docs/semantics.md section 8) ----------------- */

/* The explicit mask read one row or one key off: row q's bits read at row q + dq, key k's at
 * k + dk (a mask built from positions one off, a mask_mod indexing q_idx - 1). Where the moved
 * index leaves the grid the edge's own bit is read (PyTorch's mask[q - 1] at q = 0 reads the last
 * row, a mask_mod at q_idx - 1 computes row -1: no rule is known, so the edge changes nothing and
 * its rows decide nothing either way). The families as the case's. */
static int xmask_moved(const diag_in *in, diag_alt *a, int32_t dq, int32_t dk)
{
    if (!a->xmask.bits)
        return 0;
    a->x_dq = dq;
    a->x_dk = dk;
    int32_t by = dq ? dq : dk;
    const char *what = dq ? "row q" : "key bit k", *ax = dq ? "query" : "key";
    fc_fmt(a->title, sizeof a->title, "explicit mask one %s %s (%s read as %s %s 1)", ax,
           by < 0 ? "back" : "ahead", what, dq ? "row q" : "bit k", by < 0 ? "-" : "+");
    return keys_settled(in, a);
}

static int xmask_q_back(const diag_in *in, diag_alt *a)
{
    return xmask_moved(in, a, -1, 0);
}

static int xmask_q_ahead(const diag_in *in, diag_alt *a)
{
    return xmask_moved(in, a, 1, 0);
}

static int xmask_k_back(const diag_in *in, diag_alt *a)
{
    return xmask_moved(in, a, 0, -1);
}

static int xmask_k_ahead(const diag_in *in, diag_alt *a)
{
    return xmask_moved(in, a, 0, 1);
}

/* Bit (q, k) read at (k, q): a mask stored [Lk, Lq] or built with the two indices swapped. */
static int xmask_transposed(const diag_in *in, diag_alt *a)
{
    if (!a->xmask.bits || a->xmask.lq != a->xmask.lk)
        return 0;
    a->x_transposed = 1;
    fc_fmt(a->title, sizeof a->title, "explicit mask transposed (bit (q, k) read at (k, q))");
    return keys_settled(in, a);
}

/* The explicit mask not applied: the families' keys alone (a mask_mod dropped on the way). */
static int xmask_ignored(const diag_in *in, diag_alt *a)
{
    if (!a->xmask.bits)
        return 0;
    a->xmask.bits = NULL;
    int families = a->mask.causal || a->mask.sliding_window > 0 || a->mask.chunk_size > 0;
    fc_fmt(a->title, sizeof a->title, "explicit mask ignored (%s)",
           families ? "the families' keys alone" : "every key of the row's sequence");
    return keys_settled(in, a);
}

/* A per-head mask (Hm = Hq) read wrongly across the heads: head 0's rows for every head (a
 * broadcast taken for a head dim of 1)... */
static int xmask_head0(const diag_in *in, diag_alt *a)
{
    if (!a->xmask.bits || a->xmask.hm < 2)
        return 0;
    a->xmask_head = head_zero;
    fc_fmt(a->title, sizeof a->title, "explicit mask of head 0 for every head (a per-head mask "
           "of %d heads broadcast as one)", (int)a->xmask.hm);
    return keys_settled(in, a);
}

/* The kv head's index as a head of an explicit term: with one kv head it is head 0's for every
 * head, the same function, so that diag_run.c merges the two hypotheses into one finding. */
static diag_kv_fn kv_head_of(const attn_problem *p)
{
    return p->hkv == 1 ? head_zero : kv_truth;
}

/* ...or indexed by the kv head, as the keys are (query head h reads mask[h / (Hq / Hkv)]). */
static int xmask_kv_head(const diag_in *in, diag_alt *a)
{
    const attn_problem *p = in->jc->prob;
    if (!a->xmask.bits || a->xmask.hm < 2 || p->hq == p->hkv)
        return 0;
    a->xmask_head = kv_head_of(p);
    fc_fmt(a->title, sizeof a->title, "explicit mask indexed by the kv head (query head h read "
           "mask[h / %d])", (int)(p->hq / p->hkv));
    return keys_settled(in, a);
}

/* The bias multiplied by `mul` (0: not added at all), before the soft-cap when before_cap; 0
 * when the case has no bias. */
static int bias_as(diag_alt *a, double mul, int before_cap)
{
    if (!a->xbias.vals)
        return 0;
    if (mul == 0)
        a->xbias.vals = NULL;
    a->bias_mul = mul;
    a->bias_before_cap = before_cap;
    return 1;
}

static int bias_ignored(const diag_in *in, diag_alt *a)
{
    if (!bias_as(a, 0.0, 0))
        return 0;
    fc_fmt(a->title, sizeof a->title, "bias ignored (the explicit bias not added)");
    return 1;
}

static int bias_negated(const diag_in *in, diag_alt *a)
{
    if (!bias_as(a, -1.0, 0))
        return 0;
    fc_fmt(a->title, sizeof a->title, "bias with the wrong sign (score - bias)");
    return 1;
}

static int bias_doubled(const diag_in *in, diag_alt *a)
{
    if (!bias_as(a, 2.0, 0))
        return 0;
    fc_fmt(a->title, sizeof a->title, "bias doubled (score + 2 bias)");
    return 1;
}

static int bias_halved(const diag_in *in, diag_alt *a)
{
    if (!bias_as(a, 0.5, 0))
        return 0;
    fc_fmt(a->title, sizeof a->title, "bias halved (score + bias / 2)");
    return 1;
}

/* The bias added to q.k before the scale: scale (q.k + bias), the bias times the scale (and,
 * the scale coming before the soft-cap, inside the cap). */
static int bias_before_scale(const diag_in *in, diag_alt *a)
{
    const attn_problem *p = in->jc->prob;
    int capped = p->terms.softcap > 0;
    if ((p->scale == 1.0 && !capped) || !bias_as(a, p->scale, capped))
        return 0;
    fc_fmt(a->title, sizeof a->title, "bias added before the scale (%.6g (q.k + bias)%s: the "
           "bias times the softmax scale)", p->scale, capped ? ", then the soft-cap" : "");
    return 1;
}

/* The bias added before the soft-cap instead of after it: c tanh((s + bias) / c). */
static int bias_before_cap(const diag_in *in, diag_alt *a)
{
    double c = in->jc->prob->terms.softcap;
    if (!(c > 0) || !bias_as(a, 1.0, 1))
        return 0;
    fc_fmt(a->title, sizeof a->title, "bias before the soft-cap (%g tanh((s + bias) / %g) "
           "instead of %g tanh(s / %g) + bias)", c, c, c, c);
    return 1;
}

/* A per-head bias (Hm = Hq) read at the wrong head: head 0's for every head... */
static int bias_head0(const diag_in *in, diag_alt *a)
{
    if (!a->xbias.vals || a->xbias.hm < 2)
        return 0;
    a->xbias_head = head_zero;
    fc_fmt(a->title, sizeof a->title, "bias of head 0 for every head (a per-head bias of %d "
           "heads broadcast as one)", (int)a->xbias.hm);
    return 1;
}

/* ...or indexed by the kv head (ALiBi's slopes taken per kv head). */
static int bias_kv_head(const diag_in *in, diag_alt *a)
{
    const attn_problem *p = in->jc->prob;
    if (!a->xbias.vals || a->xbias.hm < 2 || p->hq == p->hkv)
        return 0;
    a->xbias_head = kv_head_of(p);
    fc_fmt(a->title, sizeof a->title, "bias indexed by the kv head (query head h took "
           "bias[h / %d])", (int)(p->hq / p->hkv));
    return 1;
}

/* ---- the table: order breaks ties between hypotheses explaining as many rows ----------- */

const diag_hyp diag_hyps[] = {
    {"window-1", window_minus_1},
    {"window+1", window_plus_1},
    {"window/2", window_halved},
    {"window*2", window_doubled},
    {"window/2+1", window_converted},
    {"window*2-2", window_unconverted},
    {"window-after+1", window_after_plus_1},
    {"window-after-1", window_after_minus_1},
    {"window-before+1", window_before_plus_1},
    {"window-before-1", window_before_minus_1},
    {"top-left", top_left},
    {"decode-ahead", decode_ahead},
    {"decode-behind", decode_behind},
    {"causal-flipped", causal_flipped},
    {"chunk-off", chunk_off},
    {"chunk-from-index", chunk_from_index},
    {"chunk+1", chunk_shifted},
    {"prev-layer", prev_layer},
    {"block-mask", block_mask},
    {"partial-as-full", partial_as_full},
    {"scale-default", scale_default},
    {"scale-squared", scale_squared},
    {"scale-1/D", scale_one_over_d},
    {"softcap-missing", softcap_missing},
    {"softcap-after-fill", softcap_after_fill},
    {"softcap-before-scale", softcap_before_scale},
    {"sink-missing", sink_missing},
    {"sink-twice", sink_twice},
    {"sink-per-tile", sink_per_tile},
    {"sink-valued", sink_valued},
    {"sink-scaled", sink_scaled},
    {"sink-kv-head", sink_kv_head},
    {"sink-prev-head", sink_prev_head},
    {"sink-next-head", sink_next_head},
    {"gqa-modulo", gqa_modulo},
    {"packed-ignored", packed_ignored},
    {"packed-leak", packed_leak},
    {"scores-rounded", scores_rounded},
    {"softmax-lowp", softmax_lowp},
    {"drop-last-key", drop_last_key},
    {"masked-row-mean", masked_row_mean},
    {"masked-row-mean-all", masked_row_mean_all},
    {"masked-row-lse", masked_row_lse},
    {"lse-rounded", lse_rounded},
    {"lse-out-type", lse_out_type},
    {"no-rescale", no_rescale},
    {"no-rescale-acc", no_rescale_acc},
    {"lse-log2", lse_log2},
    /* the explicit terms' (docs/semantics.md section 8) */
    {"xmask-q-1", xmask_q_back},
    {"xmask-q+1", xmask_q_ahead},
    {"xmask-k-1", xmask_k_back},
    {"xmask-k+1", xmask_k_ahead},
    {"xmask-transposed", xmask_transposed},
    {"xmask-ignored", xmask_ignored},
    {"xmask-head0", xmask_head0},
    {"xmask-kv-head", xmask_kv_head},
    {"bias-ignored", bias_ignored},
    {"bias-negated", bias_negated},
    {"bias*2", bias_doubled},
    {"bias/2", bias_halved},
    {"bias-before-scale", bias_before_scale},
    {"bias-before-softcap", bias_before_cap},
    {"bias-head0", bias_head0},
    {"bias-kv-head", bias_kv_head},
    /* the length hypotheses (hyps_length.c), their index fitted to the failing rows: last, so
     * that a hypothesis needing no fitted index wins ties (diag.h) */
    {"keys-dropped", diag_keys_dropped},
    {"keys-wrapped", diag_keys_wrapped},
    {"ring-cache", diag_ring_cache},
    {"merge-base-2", diag_merge_base2},
};
const size_t diag_nhyps = sizeof diag_hyps / sizeof diag_hyps[0];
