/*
 * diag.h - which bug explains the failing rows of an attention output: the diagnosis that
 * `check` and `repro` print under a failed verdict (ours or another producer's output).
 *
 * For each failing row the float64 reference is recomputed under named hypotheses of common
 * kernel and configuration bugs (diag/hyps.c: window off by one, halved or doubled, ModernBERT's
 * conversion, off by one on one side of the query, top-left alignment, decode rows a position
 * ahead or behind, causal flipped, chunking off, counted from the query index or from p + 1,
 * the previous layer's mask, the producer's block mask applied as a kernel would, partial blocks
 * taken as full, the scale, GQA head mapping, packed boundaries ignored or leaking one key, the
 * score terms (a sink from another head, the soft-cap before the scale, ...), the softmax or the
 * scores in the input type, an online softmax without its rescale, LSE in log2; and the length
 * hypotheses of diag/hyps_length.c: keys from K on dropped, keys wrapped at K (key j >= K read
 * as j - K), a ring cache of R keys, a split-K merge at S in base 2; and the explicit terms'
 * (docs/semantics.md section 8): the explicit mask read one row back or ahead, one key back or
 * ahead, transposed, ignored, or with head 0's rows (or the kv head's) for every head; the bias
 * ignored, negated, doubled, halved, added before the scale or before the soft-cap, or head
 * 0's (or the kv head's) for every head); and for a paged case (diag_in.paged) a page read from
 * the wrong slot (diag/hyps_paged.c: a table entry or a sequence's row off by one, candidates
 * picked from the failing rows), and each hypothesis is credited with the rows it
 * reproduces.
 *
 * EXPLICIT TERMS: every hypothesis's reference is computed under the case's whole predicate and
 * score (the families AND the explicit mask, the bias added after the soft-cap), changing only
 * what the hypothesis names: a window off by one keeps the explicit mask, a mask shift keeps the
 * families, and the soft-cap after the mask's fill fills the explicit mask's keys too (-c plus
 * their bias). A shifted mask reads the edge's own bit where the shift leaves the grid. The
 * length hypotheses are not tried with an explicit mask (their fit reads one key range for every
 * head). The block mask as given reads its partial tiles under the explicit mask too, and its
 * title counts the tiles it drops and leaks against the whole predicate, for every (b, h) a
 * stored row stands for (a list built from the families alone leaks the explicit mask's holes
 * in its full tiles).
 *
 * A length hypothesis's index (K, R, S: at least 1,024) is FITTED to where the failing rows
 * start: the first failing token judged and the last judged before it bound it (on a sample the
 * onset lies between them); it is that interval's only value, or its only named value (a
 * threshold of masks/problem.h attn_thresholds, or a power of two), else the hypothesis is not
 * tried. It is proven like any other (below). THE TIE RULE: a fitted index can make a
 * hypothesis compute what a fixed rule computes (keys dropped from K = Lk - 1 on a causal case
 * is "the last key dropped"); when whole causes tie (none DIAG_CLOSER times closer) and some
 * need no fitted index, the fitted ones are not named (listed after the causes, nfitted), and
 * the closeness rule runs again on the rest.
 *
 *   diag_in in = {.jc = &jc, .o = o, .lse = lse, .v = &verdict, .bm = &bm};
 *   diag_report *r;
 *   if (diag_run(&in, &r, &err) == FC_OK) { diag_print(stdout, r, jc.prob, "  "); diag_report_free(r); }
 *
 * Definitions (the bounds are the truth verdict's, so "failing" here is exactly what made H1 or
 * H5 fail, row by row):
 * - bound of an element with reference value g: non-degenerate verdict: |o - g| <= c * e_lp_max
 *   + floor (rep_verdict's c, e_lp_max, floor: the H1 bound); degenerate verdict (element-wise
 *   H1): |o - g| <= deg_atol + deg_rtol * |g| (the verdict's own). LSE with reference value
 *   l: |lse - l| <= lse_atol + lse_rtol * |l| + c * e_lse_lp_max (H5's, rep_tol_for and the
 *   verdict), or lse equal to an infinite l.
 * - a row MATCHES a reference row (o_ref, lse_ref) when every element is finite and within the
 *   bound of o_ref's, and the LSE, when the output under test has one, is within the LSE bound
 *   of lse_ref. A reference row with no allowed key (LSE -inf) is matched only exactly, as H4
 *   asks: O all 0 and (when given) LSE -inf.
 * - a row is FAILING when it does not match the truth (jc->out, jc->lse);
 * - NON-FINITE when its O holds a NaN or an infinity or its LSE is NaN or +inf: H3's rows. They
 *   are counted among the failing rows, listed apart and never tried, so a NaN row is never
 *   "explained". An LSE of -inf is not counted here: it is how an empty row is written, and a
 *   row a buggy block mask emptied is something a hypothesis can explain.
 * - a hypothesis EXPLAINS a failing finite row when the row matches the hypothesis's float64
 *   reference (ref_row_f64 over the hypothesis's keys, scale and kv head; for the online
 *   softmax's bugs ref_row_online_f64, each kv tile width from 16 to the block and each visit
 *   order tried, and only where the same keys computed right do not match). A hypothesis that
 *   gives a row the truth's own keys, scale and kv head (and LSE) is the truth there and
 *   explains nothing, so coinciding hypotheses never invent rows.
 * - H2 only: when no row fails against the truth's H1/H5 bounds but the verdict failed H2, the
 *   rows examined are those carrying more than their share of H2's allowed squared error
 *   (nmse_tol * sum O_gold^2 / non-empty rows), and a row matches a reference when its squared
 *   error against it is within that share, or within nmse_tol times the reference row's own
 *   squared sum when that is more (and its LSE within H5's bound).
 * - a hypothesis's FIT: on average over the rows it explains, how far the tested row's failing
 *   values (those outside the truth's bounds) lie from its reference, in units of their bounds
 *   (the largest over a row's failing values).
 *
 * What the report CLAIMS (the rest is evidence, never a finding): a hypothesis that explains
 * every examined finite failing row is a whole CANDIDATE; it is the CAUSE unless REFUTED: it
 * must reproduce the failing values DIAG_CLOSER times more closely than the correct output does
 * (its fit against the truth's: a hypothesis within the bounds of barely failing rows proves
 * nothing), and no passing row may contradict it (a row that passes against the truth, which
 * the hypothesis changes, computed from its reference, and which the output does not show
 * changed: applied to the whole case it would fail that row). Hypotheses that compute the same
 * rows on the case are one finding, titled with both names. Of several causes, one that fits
 * DIAG_CLOSER times more closely than each of the others is the cause (the others listed as
 * fitting less closely, with their fits); else they are reported together as
 * indistinguishable on this output. Without a whole cause, a hypothesis that explains every
 * failing row of a head (b, h), under the same two tests on that head's rows, is the cause
 * there (a GROUP cause, heads named; of several in a head, one DIAG_CLOSER times closer
 * alone). Hypotheses that explain some rows only are PARTIAL fits: one line, no claim. Rows no
 * cause covers are "not explained", and then what they are is stated (diag_evidence); rows past
 * the work budget are "not examined", by range. Non-finite rows are never tried; when they are
 * exactly the rows with no allowed key, each NaN, "rows with no allowed key are NaN" is their
 * cause (nan_empty).
 *
 * Work: examining one row under one hypothesis costs about Lk * D multiply-adds; rows are
 * examined while failing rows x Lk x D x hypotheses stays within the budget (diag_in.budget,
 * default DIAG_BUDGET = 2^31; at least one row is always examined): all of them, or past the
 * budget a sample spread evenly over them in row order. The report says how many were examined.
 * Each candidate's check against the passing rows takes at most a quarter of the budget more
 * (a spread sample past it; the refutation says how many were checked).
 *
 * Rows are reported as ranges of consecutive q of one (b, h) (and, for a packed batch, one
 * sequence), in the coordinates of attn_row_where (masks/problem.h).
 */
#ifndef FLEXCHECK_DIAG_H
#define FLEXCHECK_DIAG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/fc.h"
#include "judge/judge.h"
#include "masks/bmask.h"
#include "masks/mask.h"
#include "masks/problem.h"
#include "reports/rep.h"
#include "reports/tol.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DIAG_BUDGET ((uint64_t)1 << 31) /* multiply-adds, see above */
#define DIAG_TITLE_LEN 256
#define DIAG_PRINT_RANGES 8 /* ranges printed per line, then "and N more" */
#define DIAG_CLOSER 4.0     /* how much closer one whole cause must fit than the others to be
                             * named alone (diag_claims.c diag_pick_closest) */

/* The paged cache the producer read K/V from (docs/fixtures.md "Paged K/V"): row r of table is
 * sequence r's pages (a dense batch entry, or a packed sequence), logical key t at slot
 * t % page_size of page table[r][t / page_size]; the case's K/V are what it gathers. The
 * diagnosis tries a page read from the wrong slot (diag/hyps_paged.c). A view. */
typedef struct diag_paged {
    int32_t num_pages, page_size, nrows, max_pages;
    const int32_t *table;            /* [nrows, max_pages] */
    const float *k_cache, *v_cache;  /* [num_pages, page_size, Hkv, D / Dv] */
} diag_paged;

/* What to diagnose. Views: the caller owns everything. */
typedef struct diag_in {
    const judge_case *jc;    /* the truth: problem, inputs, float64 oracle (out and lse) */
    const float *o, *lse;    /* the output under test [B, Hq, Lq, Dv], [B, Hq, Lq]; lse may be NULL */
    const rep_verdict *v;    /* the truth's verdict on (o, lse) (judge_given / judge_case_run) */
    const bmask *bm;         /* the block mask the producer ran with, or NULL */
    const mask_params *prev; /* the previous layer's mask (layout files), or NULL */
    uint64_t budget;         /* multiply-adds; 0: DIAG_BUDGET */
    fc_dtype out_dtype;      /* the type the output was stored in (FC_F32 also for float64):
                              * an LSE rounded to it is one hypothesis */
    const diag_paged *paged; /* the K/V as a paged cache, or NULL: contiguous */
} diag_in;

/* Rows q0..q1 (inclusive) of head h of batch entry b. */
typedef struct diag_range {
    int32_t b, h, q0, q1;
} diag_range;

/* A set of rows, as ranges in row order. */
typedef struct diag_rows {
    size_t count;   /* rows */
    size_t nranges;
    diag_range *r;  /* [nranges], heap */
} diag_rows;

typedef struct diag_finding {
    const char *name;             /* the hypothesis's stable id ("window+1"), static */
    char title[DIAG_TITLE_LEN];   /* with this case's values: "window W+1 (16 -> 17)" */
    diag_rows rows;               /* the failing rows it explains */
    diag_rows group_rows;         /* of those, the rows of heads whose every failing row it
                                   * explains (a group cause; empty when it is a whole cause) */
    size_t ngroups;               /* those heads */
    double fit;                   /* on average over its rows, how far the tested row's failing
                                   * values lie from its reference, in units of their bounds
                                   * (0: exactly) */
    double truth_fit;             /* the same for the correct output over those rows (above 1:
                                   * they fail against it) */
    int refuted;                  /* DIAG_REFUTED_*: it fits every failing row (a whole
                                   * candidate) but is not a cause, and why */
    size_t heads_refuted;         /* heads whose every failing row it fits but where it is
                                   * refuted so (no group cause there) */
    size_t contradicted;          /* passing rows it would change that the output does not show
                                   * (DIAG_REFUTED_PASSING), of the `checked` of `passing` */
    size_t checked, passing;
    diag_range first_contradiction;
    int fitted;                   /* its index was fitted to the failing rows' onset (a length
                                   * hypothesis: hyps_length.c) */
} diag_finding;

/* Why a hypothesis that fits every failing row is not named the cause (diag.h). */
enum {
    DIAG_REFUTED_NO = 0,
    DIAG_REFUTED_CLOSER = 1,  /* it reproduces the failing values no DIAG_CLOSER times more
                               * closely than the correct output does (fit vs truth_fit) */
    DIAG_REFUTED_PASSING = 2, /* passing rows contradict it (contradicted > 0) */
};

/* What the failing rows no cause explains are (when no whole cause explains them all): facts,
 * never a cause. */
typedef struct diag_evidence {
    size_t rows;                       /* those rows (examined or not, non-finite included) */
    size_t heads, heads_total;         /* (b, h) with such a row, of B * Hq */
    int32_t from_q;                    /* >= 0: in each of those heads every row from this q on
                                        * is such a row and none before it; -1: not so */
    int32_t from_lo;                   /* with from_q > 0: the last row judged before it (-1:
                                        * none): on a sample the rows start in (from_lo, from_q] */
    int from_named;                    /* the named thresholds in that interval
                                        * (attn_thresholds, powers of two), words in
                                        * from_names */
    char from_names[DIAG_TITLE_LEN];
    size_t zero;                       /* of the rows, those with O all 0 though the truth's row
                                        * has keys */
    size_t starts, starts_total;       /* of them, a sequence's first query (of the case's) */
    size_t empty, empty_total;         /* with no allowed key */
    size_t decode, decode_total;       /* of sequences with fewer queries than keys (decode,
                                        * chunked prefill) */
    size_t nonfinite_empty;            /* non-finite rows with no allowed key */
} diag_evidence;

typedef struct diag_report {
    size_t rows;           /* rows of the output: B * Hq * Lq */
    size_t failing;        /* failing rows, non-finite ones included */
    diag_rows nonfinite;   /* failing rows with NaN/inf (H3): never tried */
    size_t examined;       /* finite failing rows tried against the hypotheses */
    size_t not_examined;   /* finite failing rows past the budget */
    diag_rows skipped;     /* those rows, by range */
    int h2_mode;           /* no row failed the H1/H5 bounds: the rows carrying H2's error */
    double h2_row_share;   /* then: the squared error each row is allowed */
    uint64_t budget;       /* the budget used */
    /* Every hypothesis that applied to the case, sorted by rows explained (most first; ties in
     * the table's order). The first nexplaining explain at least one row; of them the first
     * ncauses explain every examined row (whole causes); findings with ngroups > 0 after them
     * are group causes; the rest of the first nexplaining are partial fits. */
    size_t nfindings, nexplaining, ncauses;
    size_t nalso;          /* after a single cause, whole causes it fits DIAG_CLOSER times more
                            * closely than: "also within the bounds, less closely" */
    size_t nfitted;        /* after the causes and nalso: whole causes with a fitted index
                            * tied with causes needing none, so not named (diag.h's tie rule) */
    size_t nrefuted;       /* after the causes: whole candidates refuted (their refuted field) */
    diag_finding *findings;
    diag_rows unexplained; /* examined rows no cause (whole or group) explains */
    size_t nan_empty;      /* > 0: the non-finite rows are exactly the rows with no allowed key,
                            * each wholly NaN: "rows with no allowed key are NaN" is their cause
                            * (a softmax over no key computes 0/0) */
    diag_evidence ev;      /* filled when no whole cause explains every examined row */
} diag_report;

/* Diagnoses in; *out receives a heap report (free with diag_report_free). FC_EINVAL for
 * inputs that do not fit together (a verdict of another shape, a block mask for another grid
 * or failing bmask_validate, a NULL array); FC_ENOMEM. */
fc_status diag_run(const diag_in *in, diag_report **out, fc_err *err);
void diag_report_free(diag_report *r);

/* The report, each line starting with indent:
 *   diagnosis: 7 of 192 rows failing (1 non-finite), 6 examined under 12 hypotheses
 *   explained by rows with no allowed key are NaN (...): all 1 non-finite row: ...   (nan_empty)
 *   explained by window W+1 (16 -> 17): all 6 failing rows examined: (b, h, q) = (0, 1, 40..45)
 *   also within the bounds on every failing row, less closely: B (failing values on average
 *   0.6 of their bounds away); the cause 0
 * or, when several hypotheses explain every failing row and none fits DIAG_CLOSER times closer,
 *   explained by one of 2 hypotheses, each within the bounds on every failing row, none 4 times
 *   closer (indistinguishable here): A; B: all 6 failing rows ...
 * or, without a whole cause, per head
 *   explained in 1 head by window W+1 (16 -> 17): all 4 failing rows there: (b, h, q) = ...
 *   fits every failing row, but not the cause: T: 225 of the 280 passing rows checked
 *   contradict it (it changes them, and they are right), the first (b, h, q) = (0, 0, 17)
 *   partial fits, no cause: window W-1 (16 -> 15) on 2 of 6 rows; ...
 *   not explained: 2 rows: (b, h, q) = (0, 0, 60..61)
 *   not explained: 1 row: (b, h, q) = (0, 0, 90) (non-finite output: H3)
 *   not examined (work budget of N multiply-adds): 9 rows: (b, h, q) = ...
 *   no hypothesis of the diagnosis's table explains these rows: the bug lies outside what it
 *   knows; what the 3 rows no cause explains are:
 *   evidence: in 1 of 2 heads (b, h) [, ...]; and one line each for sequence starts, rows
 *   with no allowed key, decode rows and non-finite ones among them, where there are any;
 *   "in each of them every row from q = 65536 on and none before: 2^16 (where a 16-bit index
 *   wraps)" names the thresholds (attn_thresholds, powers of two) at the onset when the row
 *   before it was judged and passed, and on a sample that left a gap "no row in q = A..B was
 *   judged, so the rows start in q = A..C (named thresholds there: ...)"; "each with O = 0,
 *   though each has allowed keys" when the rows were left 0 (a grid that never ran them)
 *   tried, explaining no row: window W-1 (16 -> 15); causal flipped (causal -> bidirectional); ...
 * p is the problem of the report's case (for packed batches ranges name the sequence and the
 * positions in it: "(0, 0, 40..43), sequence 2 positions 8..11"). */
void diag_print(FILE *f, const diag_report *r, const attn_problem *p, const char *indent);

/* One line for a report row, claiming only what diag_print claims: the whole cause with its
 * count and first range ("window W+1 (16 -> 17): all 4 failing rows, (b, h, q) = (0, 1,
 * 40..43)"), "one of A; B (indistinguishable here): all 4 failing rows, ...", a group cause
 * ("in 2 heads, window W+1 (16 -> 17): 4 of 7 failing rows, ..."), "rows with no allowed key
 * are NaN (...): all N failing rows, ...", "no cause: T fits all N failing rows but <why>" (a
 * refuted candidate), "no hypothesis explains all N failing rows (...): outside the diagnosis's
 * table" (with the best partial fit's count), "all N failing rows are non-finite (H3): no
 * hypothesis tried", or "" when no row fails. */
void diag_summary(char *buf, size_t cap, const diag_report *r, const attn_problem *p);

/* The whole diagnosis of one failed output in one call: run, then the summary into
 * row->explained (row may be NULL) and the report printed to f with indent (f may be NULL).
 * A diagnosis that cannot run says so in both places instead. */
void diag_explain(const diag_in *in, rep_row *row, FILE *f, const char *indent);

/* The diagnosis's work budget for a failed kernel run (multiply-adds, about 0.1 s): a broken
 * kernel fails hundreds of rows in one run, and a sample of the failing rows names the bug as
 * well as all of them would. */
#define DIAG_RUN_BUDGET ((uint64_t)1 << 27)

/* After a judged kernel run (judge_run, judge/judge.h: in, its verdict v and its row): a failed
 * row diagnosed into row->explained with the block mask it ran with, under DIAG_RUN_BUDGET; not
 * without the baseline's bounds (v->unscaled). Nothing is printed. What the gate's checks and
 * `check --backend` call after every run. */
void diag_after_run(const judge_run_in *in, const rep_verdict *v, rep_row *row);

/* One range as printed: "(0, 1, 40..43)" or "(0, 1, 40)", plus ", sequence S position(s) P.."
 * for a packed batch. Always terminated. */
void diag_range_text(char *buf, size_t cap, const attn_problem *p, const diag_range *r);

#ifdef __cplusplus
}
#endif

#endif
