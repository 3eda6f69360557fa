/*
 * diag_internal.h - what the run (diag_run.c), the evaluator (diag_eval.c), the claims (diag_claims.c) and the
 * hypotheses (hyps.c) share. Not part of
 * the public API.
 *
 * A hypothesis is an alternative way of computing a row: another key set (a mask with changed
 * parameters or positions, a block mask), another scale, another kv head, an LSE in another
 * base. Its setup function describes that alternative in a diag_alt; the evaluator asks the
 * alternative for each examined row's key set and recomputes the row with ref_row_f64 (or,
 * for a kernel's online softmax, ref_row_online_f64).
 */
#ifndef FLEXCHECK_DIAG_INTERNAL_H
#define FLEXCHECK_DIAG_INTERNAL_H

#include "diag/diag.h"
#include "ref/ref.h"

/* The bounds of diag.h's match rule, the truth verdict's. */
typedef struct diag_bounds {
    int degenerate;
    double h1;                 /* c * e_lp_max + floor */
    double deg_atol, deg_rtol; /* element-wise H1 */
    double lse_atol, lse_rtol; /* H5 */
    double lse_add;            /* H5's c * e_lse_lp_max (the baseline's own LSE error) */
    double row_sq;             /* > 0 (H2 only, diag.h): a row matches when its squared error
                                * is at most this, in place of the element bounds... */
    double row_nmse;           /* ...or, when > 0 (a hypothesis's row), at most this times the
                                * reference row's own squared sum, if that is more */
    fc_dtype lse_dtype;        /* the tested LSE's stored type: H5's bound adds half its ulp */
} diag_bounds;

/* Does the tested row (o [dv], lse or NULL) MATCH the reference row (g [dv], gl), as diag.h
 * defines it? Every comparison written `!(x <= limit)`, so a NaN anywhere (tested or reference)
 * never matches: a diagnosis never credits a hypothesis with a row it cannot judge. */
int diag_row_matches(const diag_bounds *bd, const float *o, const float *lse, const double *g,
                     double gl, size_t dv);

/* One row being examined, as a key-set function sees it. */
typedef struct diag_key {
    const diag_in *in;
    const attn_problem *p; /* in->jc->prob */
    int32_t b, h, tq;      /* batch entry, query head, query token of the batch entry's axis */
    mask_row row;          /* mask_row_of(alt->view, tq): the sequence's keys [k0, k1) and p_q */
    int32_t i;             /* tq's index in that sequence (p_q = i + nk - nq) */
} diag_key;

typedef struct diag_alt diag_alt;

/* Where the failing rows start (diag_run.c, before the setups): hi, the first failing query
 * token judged (over every batch entry and head; -1 when none fails), and lo, the last token
 * judged before it (-1 when none): on a sample the true onset lies in (lo, hi]. The length
 * hypotheses (hyps_length.c) fit their index to it. */
typedef struct diag_onset {
    int32_t lo, hi;
} diag_onset;

/* Fills allowed[0, Lk) (Lk = p->seq.lk, the keys of one kv head of one batch entry): 1 for
 * each key the row uses under the alternative, 2 for a masked key it uses with the
 * alternative's masked_score (ref_key_fn), 0 for the others. */
typedef void (*diag_keys_fn)(const diag_alt *a, const diag_key *k, uint8_t *allowed);
/* The kv head query head h reads. */
typedef int32_t (*diag_kv_fn)(const attn_problem *p, int32_t h);

/* An alternative computation. diag_alt_init sets every field to the truth's; a setup changes
 * what its bug changes. The struct is not moved after setup (view may point into cu). */
struct diag_alt {
    char title[DIAG_TITLE_LEN];
    mask_params mask;  /* the mask the key set is built from */
    seq_view view;     /* the sequences the positions come from */
    double scale;
    diag_kv_fn kv_head;
    double lse_mul;    /* the predicted LSE is the recomputed one times this */
    fc_dtype round_scores; /* FC_F32: scores in double; else rounded to it (ref_row_f64) */
    double softcap;    /* the soft-cap applied (0 off) */
    double sink_mul;   /* the sink used is the head's sink times this */
    double sink_count; /* and it enters the softmax's sum this many times (ref_row_rule) */
    /* or, when set, as many times as this says for the row (e.g. once per kv tile visited) */
    double (*sink_count_of)(const diag_alt *a, const diag_key *k);
    double masked_score; /* the score of the keys `keys` marks 2 */
    double sink_value;   /* every element of the sink's value vector (0: none, the truth) */
    diag_keys_fn keys; /* default diag_keys_mask */
    /* ntries > 0: the row is a kernel's online softmax (ref_row_online_f64, rescaling as
     * `rescale` says), tried ntries ways: try t's tiles, in the kernel's order, written by
     * tiles() as key ranges (at most DIAG_MAX_TILES of them). 0: ref_row_f64. */
    int ntries;
    size_t (*tiles)(const diag_alt *a, const diag_key *k, int t, int32_t *tiles);
    ref_rescale rescale;
    int32_t cu[4];     /* storage for a made-up view: cu_q = cu, cu_k = cu + 2 */
    fc_dtype softmax_dt; /* FC_F32: the truth's softmax; else one in this type (ref.h), tried
                          * each way an engine writes one (REF_LOWP_*) */
    fc_dtype lse_round;  /* FC_F32: the LSE as computed; else rounded to this type */
    int lse_free;        /* the LSE is a fill value nobody can predict: any finite one */
    int only_empty;      /* the bug changes only rows with no allowed key (the truth's O 0,
                          * LSE -inf): it is tried on those alone */
    /* The sink query head h uses: head (h / sink_div + sink_shift) mod Hq's (diag_sink_head);
     * 1 and 0, its own, for the truth. Numbers rather than a function, so that two mappings
     * that send every head to the same sink on a case (the previous and the next head when
     * Hq = 2) compare equal and merge (diag_run.c merge_same). */
    int32_t sink_div, sink_shift;
    /* Length bugs (hyps_length.c), 0 for the truth: keys from key_end on dropped (keys_fn
     * reads it); key j >= key_wrap read as key j - key_wrap
     * (its K and V; the mask still sees j); the keys split at split_at into [0, split_at) and
     * the rest, the two partial results merged in base 2 (weights 2^LSE_i, the LSE log2 of
     * their sum). */
    int32_t key_end, key_wrap, split_at;
    int fitted;               /* an index fitted to the failing rows' onset (diag.h's tie rule) */
    const diag_onset *onset;  /* set before the setup (exam_init); NULL: unknown */
    /* The explicit terms (masks/xterms.h, docs/semantics.md section 8) as the alternative reads
     * them; the truth reads the problem's as stored. The mask (bits NULL: none, or ignored):
     * row tq's bit tk read at row tq + x_dq, key tk + x_dk, each held to the grid (a shift
     * brings in the edge's own bit), at (tk, tq) when x_transposed, of head xmask_head(h). */
    attn_xmask xmask;
    int32_t x_dq, x_dk;
    int x_transposed;
    diag_kv_fn xmask_head;
    /* The bias (vals NULL: none, or ignored) of head xbias_head(h), multiplied by bias_mul,
     * added before the soft-cap when bias_before_cap (ref_row_rule's fields of those names) */
    attn_xbias xbias;
    diag_kv_fn xbias_head;
    double bias_mul;
    int bias_before_cap;
    int fill_biased; /* the keys `keys` marks 2 score masked_score plus their bias */
    /* Paged K/V (diag_in.paged; hyps_paged.c): sequence pg_seq (-1: none, the truth) reads its
     * logical page pg_j from physical page pg_page, or, with pg_j -1, its every page through
     * table row pg_row instead of its own. */
    int32_t pg_seq, pg_j, pg_page, pg_row;
};

/* The paged hypotheses that may explain the failing rows (state[row] ROW_FAIL: a page read
 * from the wrong slot), at most cap of them, into a[] (each from diag_alt_init, title set);
 * how many. hyps_paged.c. */
size_t diag_paged_alts(const diag_in *in, const uint8_t *state, diag_alt *a, size_t cap,
                       const char **names);
#define DIAG_PAGED_MAX 64
/* Whether a's paged bug changes the K/V of row k's keys `keys` (kv head hk); with wk and wv
 * given, the row's keys and values as a reads them into wk [Lk * D] and wv [Lk * Dv] (kk, vv:
 * the truth's of that kv head; NaN where a reads a page out of the cache: such a row never
 * matches). */
int diag_paged_row(const diag_alt *a, const diag_key *k, int32_t hk, const uint8_t *keys,
                   const float *kk, const float *vv, float *wk, float *wv);

/* The head whose sink query head h reads under alternative a (0 <= sink_shift < Hq). */
static inline int32_t diag_sink_head(const diag_alt *a, int32_t hq, int32_t h)
{
    return (h / a->sink_div + a->sink_shift) % hq;
}

/* A setup: 1 and *a filled when the hypothesis applies to the case and can differ from the
 * truth, 0 otherwise. a arrives initialised by diag_alt_init. */
typedef int (*diag_setup_fn)(const diag_in *in, diag_alt *a);

typedef struct diag_hyp {
    const char *name; /* stable id */
    diag_setup_fn setup;
} diag_hyp;

/* The length hypotheses' setups (hyps_length.c), listed in hyps.c's table. */
int diag_keys_dropped(const diag_in *in, diag_alt *a);
int diag_keys_wrapped(const diag_in *in, diag_alt *a);
int diag_ring_cache(const diag_in *in, diag_alt *a);
int diag_merge_base2(const diag_in *in, diag_alt *a);
/* "2^16 (where a 16-bit index wraps)" when t is one of the named thresholds for this case
 * (attn_thresholds, with the block mask's query tile rows, 128 without one) or a power of two,
 * else "": into buf (always terminated). 1 iff named. */
int diag_threshold_name(char *buf, size_t cap, const diag_in *in, int64_t t);
/* The named thresholds t with lo < t <= hi, "; "-joined into buf (always terminated); how many. */
int diag_thresholds_in(char *buf, size_t cap, const diag_in *in, int64_t lo, int64_t hi);

/* The table, in tie-break order (hyps.c); at most DIAG_MAX_HYPS entries (a test holds it). */
#define DIAG_MAX_HYPS 96
extern const diag_hyp diag_hyps[];
extern const size_t diag_nhyps;

/* The truth as an alternative: the problem's mask, sequences, scale and kv heads. */
void diag_alt_init(const diag_in *in, diag_alt *a);
/* The most tiles a diag_alt's tiles() writes for keys [0, lk) and a block mask of nkb kv
 * blocks (0 without one): tiles of 16 keys or more, one more per listed block (or for the
 * row's sequence) for a ragged end. */
#define DIAG_MAX_TILES(lk, nkb) ((lk) / 16 + (nkb) + 2)
/* The key set of a->mask on a->view (mask_row_allows): the truth's, under the truth's alt. */
void diag_keys_mask(const diag_alt *a, const diag_key *k, uint8_t *allowed);

/* ---- shared by the run, the evaluator (diag_eval.c) and the claims (diag_claims.c) --------------------- */

/* Scratch of one examination: the truth's and a hypothesis's key sets, a reference row. */
typedef struct diag_exam {
    const diag_in *in;
    const diag_bounds *bd;
    diag_alt truth;
    diag_alt *alts;   /* [nalts]: the hypotheses that apply */
    size_t *hyp_of;   /* [nalts]: their index in diag_hyps */
    size_t nalts;
    uint8_t *tkeys, *hkeys; /* [Lk] */
    double *oref;           /* [Dv] */
    int32_t *tiles;         /* [2 * DIAG_MAX_TILES(Lk, NKB)]: an online try's key ranges */
    diag_onset onset;       /* the failing rows' onset (the setups' a->onset) */
    float *wk, *wv;         /* [Lk * D], [Lk * Dv]: a wrapped row's keys and values (only with a
                             * key_wrap alternative) */
    uint8_t *pkeys;         /* [Lk]: one part of a split row's keys (only with split_at) */
    double *oref2;          /* [Dv]: the other part's output */
} diag_exam;

/* What alternative a computes for row `row`, against the tested row. */
enum {
    ALT_SAME = 0,  /* the truth's own row: a changes nothing there */
    ALT_MATCH = 1, /* the tested row matches one of a's references (*fit: how closely) */
    ALT_RIGHT = 2, /* an online softmax's bug whose keys computed right match the tested row: a
                    * row its bug leaves alone, or the keys' (the block mask's) doing; a
                    * softmax in the input type matched only where it is scores-rounded's row */
    ALT_DIFF = 3,  /* a changes the row and the tested row matches none of its references */
};

/* A row's standing: it passes against the truth, fails with a finite output, or is non-finite. */
enum { ROW_PASS = 0, ROW_FAIL = 1, ROW_NONFINITE = 2 };

/* Row `row` under alternative a: ALT_* (*fit how closely when it
 * matches), or -1 on a reference error; e->tkeys must hold the truth's keys of the row
 * (diag_truth_keys). */
int diag_alt_vs_row(diag_exam *e, const diag_alt *a, size_t row, double *fit, fc_err *err);
/* e->tkeys: the truth's keys of row `row`. */
void diag_truth_keys(diag_exam *e, size_t row);
/* Row `row` (a flat index) into s; rows arrive in row order. */
fc_status diag_add_row(diag_rows *s, const judge_case *jc, size_t row);
void diag_rows_free(diag_rows *s);
/* How closely reference row (g, gl) reproduces the tested row's failing values (those outside
 * the bounds of the truth (gold, gold_l)), in units of their bounds. */
double diag_row_fit(const diag_bounds *bd, const float *o, const float *lse, const double *gold,
                    double gold_l, const double *g, double gl, size_t dv);
/* Reference rows hypothesis a computes per row besides its online tries (the ways). */
uint64_t diag_ref_rows_of(const diag_alt *a, int has_sink);

/* diag_claims.c: state[row] is each row's ROW_*; rows/hits/fits/tfits as diag_run keeps them. */
fc_status diag_classify(diag_exam *e, diag_report *r, const uint8_t *state, const size_t *rows,
                        const uint8_t *hits, const double *fits, const double *tfits, fc_err *err);
void diag_sort_findings(diag_report *r, size_t *idx);
void diag_pick_closest(diag_report *r);
size_t diag_nan_empty_rows(const diag_in *in, const diag_report *r, const uint8_t *state);
void diag_gather_evidence(const diag_exam *e, diag_report *r, uint8_t *state);

#endif
