/*
 * ref_internal.h - what ref.c (validation, scratch, the panel loop) shares with the per-head
 * pipelines ref_f32.c (fp32 and the fp16/bf16 baseline) and ref_f64.c (the oracle).
 * Not part of the public API.
 */
#ifndef FLEXCHECK_REF_INTERNAL_H
#define FLEXCHECK_REF_INTERNAL_H

#include <stdint.h>

#include "base/progress.h"
#include "ref/ref.h"

/* Query rows per panel. Large enough that both gemms run near the machine's sgemm rate,
 * small enough that a panel of scores stays a few MB even at Lk = 64k. */
#define REF_PANEL_ROWS ATTN_PANEL_ROWS /* masks/problem.h: the cost estimate counts the same */

/* Threads: at most this many workers, and only for calls of at least this many
 * multiply-adds (B * Hq * Lq * Lk * (D + Dv)). */
#define REF_MAX_THREADS 64
#define REF_THREAD_MIN_WORK (1 << 24)

/* One query row's allowed keys as indices into its panel's hull: [lo, hi), empty when
 * lo == hi (then both 0). */
typedef struct ref_span {
    int32_t lo, hi;
} ref_span;

/* One panel of query rows [r0, r0 + rows) of the call's rows (the query tokens r0 .. r0 + rows
 * - 1, or with a token list tq[r0 .. r0 + rows - 1]) with their allowed keys on key tokens
 * [k0, k0 + n). The families' mask does not depend on the batch entry or the head, so it is
 * found once per panel and reused for every (b, h). A row's keys allowed by the families are
 * always one interval (every term of docs/semantics.md section 2 allows one), so a row's mask
 * is two numbers. With an explicit mask (section 8), which may differ by (b, h) and need not be
 * an interval, span[i] is the hull of the row's allowed keys over every (b, h) slice of the
 * mask (the family span narrowed to the first and last key some slice allows), and each head
 * narrows it again to its own slice and filters the keys inside (ref_row_x): an explicit mask
 * equal to a family's leaves every span, the hull and so every product unchanged. */
typedef struct ref_panel {
    int32_t r0, rows;
    const int32_t *tq;              /* the call's token list, or NULL: row i is token r0 + i */
    int32_t k0, n;                  /* the hull of the rows' spans (n = 0: every row empty) */
    ref_span span[REF_PANEL_ROWS];  /* row i may see hull keys [span[i].lo, span[i].hi) */
    const uint8_t *seen;            /* [n]: 1 iff some row's span holds key k0 + j */
    int all_seen;                   /* every key of the hull is seen by some row */
} ref_panel;

/* A panel as a range of the call's rows: [r0, r0 + rows). */
typedef struct ref_prange {
    int32_t r0, rows;
} ref_prange;

/* The query token of row i of panel pn. */
static inline int32_t ref_token(const ref_panel *pn, int32_t i)
{
    return pn->tq ? pn->tq[pn->r0 + i] : pn->r0 + i;
}

/* One reference call: the checked problem, its inputs and outputs, and scratch sized for
 * one panel (see ref.h for the bound). Exactly one of o32 / o64 is set. */
typedef struct ref_call {
    const attn_problem *p;
    const int32_t *tq;      /* the query tokens computed (ref_tokens), or NULL: all of them */
    int32_t nrows;          /* rows per (b, h) in q, o and lse: Lq, or the tokens' count */
    const ref_prange *panels; /* the panels, in row order */
    int32_t npanels;
    seq_view view;
    const float *q, *k, *v;
    fc_dtype dt; /* rounding points of the float pipeline; FC_F32 means none */
    int scores32; /* dt != FC_F32: scores kept in fp32 (K neither pre-scaled nor rounded, S not
                   * rounded), only P and O rounded to dt: ref_attention_lp32s */
    float *o32, *lse32;
    double *o64, *lse64;
    void *s;    /* scores, then probabilities: [REF_PANEL_ROWS x Lk] float or double */
    void *qbuf; /* [REF_PANEL_ROWS x D]: the f64 copy of the query panel */
    void *kbuf; /* [Lk x D]: the f64 copy, or the lp scaled-and-rounded copy, of the keys */
    void *vbuf; /* [Lk x Dv]: values with keys no panel row may see zeroed */
    fc_progress *progress; /* panels done, shared by the call's workers */
} ref_call;

/* Offsets (in rows) of the first query row of the panel for (b, h) and of key k0 for the
 * kv head that h reads. Multiply by D or Dv for element offsets. */
static inline size_t ref_q_row(const ref_call *c, const ref_panel *pn, int32_t b, int32_t h)
{
    const attn_problem *p = c->p;
    return ((size_t)b * (size_t)p->hq + (size_t)h) * (size_t)c->nrows + (size_t)pn->r0;
}

static inline size_t ref_k_row(const ref_call *c, const ref_panel *pn, int32_t b, int32_t h)
{
    const attn_problem *p = c->p;
    size_t hk = (size_t)(h / (p->hq / p->hkv)); /* repeat_interleave: consecutive heads share */
    return ((size_t)b * (size_t)p->hkv + hk) * (size_t)p->seq.lk + (size_t)pn->k0;
}

/* Row i of panel pn as head h of batch entry b sees it: its span (relative to the hull)
 * narrowed to the first and last key (b, h)'s explicit mask allows, the mask row to filter the
 * keys between them, the bias row at hull key 0. Without explicit terms: the panel's span and
 * two NULLs. */
typedef struct ref_rowx {
    ref_span sp;
    const uint8_t *bits; /* the explicit mask row of (b, h, token), indexed by key token; or NULL */
    int32_t k0;          /* hull key j is key token k0 + j */
    const float *bias;   /* the bias row of (b, h, token) from key token k0 on; or NULL */
} ref_rowx;

static inline ref_rowx ref_row_x(const ref_call *c, const ref_panel *pn, int32_t b, int32_t h,
                                 int32_t i)
{
    const attn_problem *p = c->p;
    ref_rowx x = {pn->span[i], NULL, pn->k0, NULL};
    int32_t tq = ref_token(pn, i);
    if (p->xbias.vals)
        x.bias = xbias_row(p->xbias, b, h, tq) + pn->k0;
    if (p->xmask.bits && x.sp.lo < x.sp.hi) {
        x.bits = xmask_row(p->xmask, b, h, tq);
        int32_t lo = xmask_first(x.bits, pn->k0 + x.sp.lo, pn->k0 + x.sp.hi);
        int32_t hi = xmask_end(x.bits, lo, pn->k0 + x.sp.hi);
        x.sp.lo = lo < hi ? lo - pn->k0 : 0;
        x.sp.hi = lo < hi ? hi - pn->k0 : 0;
    }
    return x;
}

/* May row x use hull key j of its span? The explicit mask's bit (every key, without one). */
static inline int ref_rowx_allows(const ref_rowx *x, int32_t j)
{
    return !x->bits || xmask_bit(x->bits, x->k0 + j);
}

/* The first hull key at or after j inside row x's span that its explicit mask refuses, the
 * span's end when none (always the end without a mask). Whole bytes of allowed keys are skipped
 * eight at a time: the filter costs about a byte test per eight keys of a dense mask. */
static inline int32_t ref_rowx_next_refused(const ref_rowx *x, int32_t j)
{
    if (!x->bits)
        return x->sp.hi;
    for (; j < x->sp.hi; j++) {
        int32_t t = x->k0 + j;
        if ((t & 7) == 0 && j + 8 <= x->sp.hi && x->bits[t >> 3] == 0xFF)
            j += 7;
        else if (!xmask_bit(x->bits, t))
            return j;
    }
    return x->sp.hi;
}

/* Per-head pipelines: fill o/lse rows [r0, r0 + rows) of head h of batch entry b. */
void ref_head_f32(ref_call *c, const ref_panel *pn, int32_t b, int32_t h);
void ref_head_f64(ref_call *c, const ref_panel *pn, int32_t b, int32_t h);

/* The fp32 softmax's loops over one row's allowed scores x[0, m) (ref_vec.c): the maximum
 * (-inf for m = 0; NaN never wins), x = exp(x - mx) returning their sum (NaN in, NaN sum),
 * and x *= a. */
typedef struct ref_vec_ops {
    const char *name; /* which exp (ref_f32_exp_name) */
    float (*max)(const float *x, int32_t m);
    float (*exp_sum)(float *x, int32_t m, float mx);
    void (*scale)(float *x, int32_t m, float a);
} ref_vec_ops;

/* The fastest implementation this CPU runs (SLEEF's AVX2 expf where it has AVX2 and FMA),
 * and the portable one (libm) every machine runs; tests/test_ref.c holds them together. */
const ref_vec_ops *ref_vec_ops_here(void);
const ref_vec_ops *ref_vec_ops_portable(void);

#endif
