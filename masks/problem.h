/*
 * problem.h - the shape of one attention call (docs/semantics.md section 1), shared by ref/,
 * gpu/ and fixtures/: q [B, Hq, Lq, D], k [B, Hkv, Lk, D], v [B, Hkv, Lk, Dv],
 * o [B, Hq, Lq, Dv], lse [B, Hq, Lq], all row-major. Query head h reads kv head
 * h / (Hq / Hkv) (repeat_interleave).
 */
#ifndef FLEXCHECK_PROBLEM_H
#define FLEXCHECK_PROBLEM_H

#include "base/fc.h"
#include "masks/mask.h"
#include "masks/params.h"
#include "masks/seq.h"
#include "masks/terms.h"
#include "masks/xterms.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct attn_problem {
    seq_info seq;     /* B, Lq, Lk and the sequences; owned */
    int32_t hq, hkv;  /* query heads, kv heads; hq % hkv == 0 */
    int32_t d, dv;    /* head dims of q/k and of v/o */
    double scale;     /* softmax scale, finite and > 0 (default 1/sqrt(d)) */
    mask_params mask;
    score_terms terms; /* soft-cap and sinks (terms.h); zero = off */
    /* The explicit terms (xterms.h, docs/semantics.md section 8); zero = off, not owned. A pair
     * is allowed iff the families of `mask` allow it AND xmask does; xbias is added to the
     * (soft-capped) score of every allowed pair. */
    attn_xmask xmask;
    attn_xbias xbias;
} attn_problem;

/* Largest head dim accepted by the checks (kernels may support fewer). */
#define ATTN_MAX_HEAD_DIM 1024
#define ATTN_MAX_HEADS 4096

/* Checks every field and that every tensor's element count fits in size_t and int64
 * (64-bit offsets), with a message naming the field and its value. The explicit terms: Bm in
 * {1, B}, Hm in {1, Hq}, their Lq and Lk the problem's, their byte counts within size_t and
 * int64, and every bias value finite with |value| <= XTERMS_MAX_BIAS (one pass over the bias:
 * O(its size), 1/(D + Dv) of the reference's work on it). */
fc_status attn_problem_check(const attn_problem *p, fc_err *err);
/* The explicit terms' part of it (xterms.c), for a problem whose other fields passed. */
fc_status attn_xterms_check(const attn_problem *p, fc_err *err);

/* Element counts (valid after attn_problem_check succeeded). */
size_t attn_q_elems(const attn_problem *p);
size_t attn_k_elems(const attn_problem *p);
size_t attn_v_elems(const attn_problem *p);
size_t attn_o_elems(const attn_problem *p);
size_t attn_lse_elems(const attn_problem *p);

/* Query rows the reference takes together (ref/: one panel's scores at a time, over the hull
 * of the panel's allowed keys). */
#define ATTN_PANEL_ROWS 128

/* What judging one case costs, from its shapes alone (before anything is allocated): bytes for
 * its inputs (as float), the float64 oracle, the judge's buffers (two kernel runs and the
 * baseline), three block masks of [Lq / qb, Lk / kb] tiles (a bound: the slow builder's
 * arrays; the others list fewer), and the reference's scratch for two workers (ref.h's
 * formula); work in multiply-adds of the score and value products the reference computes:
 * for every panel of ATTN_PANEL_ROWS query tokens, its rows times the hull of their allowed
 * keys (mask_token_range), times B * Hq * (D + Dv). Without the sequences (cu_q NULL) a packed
 * problem is counted dense, Lq * Lk: an upper bound. Saturates at UINT64_MAX rather than
 * wrapping. */
typedef struct attn_cost {
    uint64_t bytes, work;
    uint64_t explicit_bytes; /* of bytes: the explicit mask's and bias's (attn_xterms_bytes) */
} attn_cost;
/* The explicit terms count whole (a sample's reader holds every row of them too): the packed
 * mask's Bm * Hm * Lq * ceil(Lk / 8) bytes and the bias's Bm * Hm * Lq * Lk * 4; their work, one
 * bias add and one mask test per pair the products cover (B * Hq * the hull's pairs). The
 * hull is the families' (the mask's values are not read here: the estimate comes before the
 * values are): an upper bound, the whole Lq x Lk for an explicit mask alone. */
attn_cost attn_case_cost(const attn_problem *p, int32_t qb, int32_t kb);
/* The same for the rows of n query tokens of every (b, h) (a sample, ref_tokens; n >= Lq is the
 * whole): q, the oracle and the outputs hold those rows, k and v stay whole; the work is twice
 * the whole's share of n rows, the most a sample's panels compute (capped at the whole's). */
attn_cost attn_case_cost_rows(const attn_problem *p, int32_t qb, int32_t kb, int32_t n);

/* Where output row `row` (= (b * Hq + h) * Lq + q, the order of o and lse) sits, in the one
 * convention every message and report uses: "(b, h, q, d) = (0, 1, 40, 5)", without d when
 * d < 0 ("(b, h, q) = (0, 1, 40)"), and for a packed batch the query's sequence and its
 * position in it: "..., sequence 2 position 8". Always terminated; truncated to cap. */
void attn_row_where(char *buf, size_t cap, const attn_problem *p, size_t row, int64_t d);

/* The named length thresholds long-context bugs cross (fixtures/fix_sample.c's header: 2^13
 * .. 2^17, 46,341, 2^31 / (H * D) for Hq and Hkv, 2^32 / Lk, 65,535 x qb and 65,535 x 1), each
 * with what crosses it: the sample places tokens on both sides of each, and the diagnosis
 * names the one a failing onset matches (diag/diag.h). Into out[ATTN_MAX_THRESHOLDS]; returns
 * how many (some may lie past Lq). qb (the query tile's rows) <= 0: 128. */
#define ATTN_MAX_THRESHOLDS 16
typedef struct attn_threshold {
    int64_t at;
    char what[96];
} attn_threshold;
int attn_thresholds(const attn_problem *p, int32_t qb, attn_threshold *out);

/* Bytes of the explicit mask (packed) and bias, from their dims alone; saturating. 0 when both
 * are off. */
uint64_t attn_xterms_bytes(const attn_problem *p);

/* What a budget refusal adds about the explicit terms: "; of which the explicit mask [1, 32,
 * 32768, 32768] (bit-packed) 4 GiB and the explicit bias [1, 32, 32768, 32768] (float32) 128
 * GiB" with the terms that are on, "" when none is. Always terminated; truncated to cap. */
void attn_xterms_text(char *buf, size_t cap, const attn_problem *p);

/* Packs `rows` rows of lk booleans (dense, one byte each, nonzero = allowed: a numpy bool or
 * uint8 array [Bm, Hm, Lq, Lk]) into the explicit mask's layout (xterms.h): bits gets rows *
 * ceil(lk / 8) bytes, the bits past lk zero. The caller sized both arrays. */
void attn_xmask_pack(const uint8_t *dense, size_t rows, int32_t lk, uint8_t *bits);

/* Releases the owned seq_info. */
void attn_problem_free(attn_problem *p);

#ifdef __cplusplus
}
#endif

#endif
