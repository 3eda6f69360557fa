/*
 * check.h - what `flexcheck check` does, as library code: judge a fixture file (its oracle
 * confirmed, its block masks, our kernel on its cases, every output another producer stored,
 * window-edge triples, a layout file's layers through one shared metadata object), with the
 * results as data: report rows, verdicts, diagnoses, and the lines check prints, made here so
 * that the CLI, the shared library (include/flexcheck.h) and Python print the same words.
 *
 * One layer above the judge and the fixtures, beside the gate (ci/): the CLI parses, isolates
 * each file in a child process and prints the summary.
 *
 *   chk_tally t = {0};
 *   chk_file("dump.h5", &opts, &t, print_item, NULL);   // one chk_item per line check prints
 *   ... t.failed, t.tested_failed, t.rows (the report rows) ...
 *   chk_tally_free(&t);
 */
#ifndef FLEXCHECK_CHECK_H
#define FLEXCHECK_CHECK_H

#include <stdint.h>
#include <stdio.h>

#include "diag/diag.h"
#include "fixtures/fix.h"
#include "judge/judge.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How a file is checked. */
typedef struct chk_opts {
    int exact_blocks;          /* a stored block mask must equal the slow builder's sets */
    const char *only_case;     /* NULL: every case; else only this one */
    int kernel_backend;        /* 0: reference only; 1: also our kernel on `be` */
    gpu_backend be;
    int32_t kernel;
    int strict;                /* outside-contract rows fail */
    int quiet;                 /* items of passing cases and outputs are not emitted */
    const char *const *labels; /* nlabels > 0: only outputs under test whose label matches one of
                                * these shell patterns (fnmatch) are judged and counted */
    int nlabels;
    fix_budget budget;         /* what a case may cost (zeros: the defaults) */
    void (*on_read)(void);     /* NULL, or called once the file is read and validated whole */
    /* NULL, or the message a file's rejection says for status st (the CLI's isolation tells an
     * out-of-memory under its limit): msg, or buf filled */
    const char *(*errmsg)(fc_status st, const char *msg, char *buf, size_t cap);
} chk_opts;

/* The counters of a tally, one entry each (a child process sends them back as plain data). */
#define CHK_COUNTERS(X)                                                                          \
    X(files) X(rejected) X(cases) X(passed) X(failed) X(skipped)                                 \
    X(tested) X(tested_passed) X(tested_failed) /* outputs under test (tested/<label>) */    \
    X(outside) X(tested_outside) /* cases / outputs outside the contract (docs/tolerance.md) */ \
    X(computed) X(sampled) /* cases with no stored oracle; cases judged on a sample of rows */ \
    X(confirmed) X(overturned) X(unconfirmed) /* outputs that failed a sample's bounds (H1, H2, \
    H5): judged again on every row, of which passed there; past the budget, not judged again */

typedef struct chk_tally {
#define CHK_INT(name) int name;
    CHK_COUNTERS(CHK_INT)
#undef CHK_INT
    rep_row *rows; /* the report rows, in the order judged (heap) */
    size_t nrows, cap;
    int oom;       /* a row could not be kept */
} chk_tally;

void chk_tally_keep(chk_tally *t, const rep_row *row);
/* Adds c's counters and rows (c->rows ignored: rows holds its c->nrows rows). */
void chk_tally_add(chk_tally *t, const chk_tally *c, const rep_row *rows);
void chk_tally_free(chk_tally *t);

/* ---- one output judged ---- */

/* 1 passed, 0 failed, 2 outside the contract, -1 not judged (an error row). */
typedef enum chk_outcome {
    CHK_NOT_JUDGED = -1,
    CHK_FAILED = 0,
    CHK_PASSED = 1,
    CHK_OUTSIDE = 2
} chk_outcome;

/* An output some producer made from a case's inputs. Views: the caller owns them. */
typedef struct chk_output_in {
    const float *o, *lse, *o_rerun; /* lse, o_rerun may be NULL (H5 / H7 not run) */
    const bmask *bm;                /* the producer's own block mask, or NULL */
    const mask_params *prev;        /* the previous layer's mask (layout files), or NULL */
    const char *not_judged;         /* non-NULL: not judged, for this reason (an error row) */
    int strict;                     /* outside the contract fails */
    uint64_t diag_budget;           /* the diagnosis's work (0: DIAG_BUDGET) */
    fc_dtype out_dtype;             /* the type out was stored in (float32 for float64 too) */
    fc_dtype lse_dtype;             /* the type lse was stored in: H5 adds its resolution */
    int rounds_like_flex;           /* the producer claims FlexAttention's rounding of P: on a
                                     * p-round design its rule judges the output; otherwise
                                     * the rule's finding is a note (res->note) */
    const diag_paged *paged;        /* the case's K/V as a paged cache (the diagnosis tries a
                                     * page read from the wrong slot), or NULL */
} chk_output_in;

#define CHK_DETAIL_LEN (REP_WHY_LEN + 160)

typedef struct chk_result {
    chk_outcome outcome;
    rep_row row;                   /* the report row; its identity is the caller's */
    rep_verdict v;                 /* each gate's verdict and reason, the worst element */
    char detail[CHK_DETAIL_LEN];   /* what check prints after the colon */
    char note[REP_WHY_LEN];        /* "" or p-round's finding on a producer that does not claim
                                    * FlexAttention's rounding (check prints it under the line) */
    char bm_text[2 * REP_WHY_LEN]; /* the producer's block mask as found ("" without one): both
                                    * defects with their tiles and elements */
    int32_t bm_qb, bm_kb;          /* its block sizes */
    diag_report *diag;             /* the diagnosis of a failed output (NULL: none ran) */
    char diag_error[REP_WHY_LEN];  /* why the diagnosis could not run ("" when it did) */
    char sample[2 * REP_WHY_LEN];  /* "" or what was judged of a sample (fix_sample_text): check
                                    * ends the verdict line with it */
    int on_bounds;                 /* judged on a sample and failed only gates whose bounds are
                                    * taken over the rows judged (rep_fails_on_bounds): every
                                    * row's bounds, never tighter, may pass it */
} chk_result;

/* 1 when o selects the output under test labelled `label` (chk_opts.labels). */
int chk_label_selected(const chk_opts *o, const char *label);

/* Judges one output of case jc (lp: jc's same-precision baselines) under the gates, the
 * producer's block mask against the case's mask, p-round's rule on a designed case, and
 * diagnoses a failure. res->row's identity (case id, group, backend, builder, producer) must be
 * set before; everything else is filled. Free with chk_result_free. */
void chk_judge_output(const judge_case *jc, const judge_lp *lp, const chk_output_in *in,
                      chk_result *res);
void chk_result_free(chk_result *res);

/* The words of a failure on a sample's bounds (chk_result.on_bounds; docs/tolerance.md "Judging
 * a sample"), for chk_result.sample: judged again on every row (the verdict is every row's;
 * gates: the sample's, chk_failed_gates; n of lq tokens from seed), written into buf; or not,
 * why not appended to buf (which holds the sample's own words). */
void chk_sample_confirmed(char *buf, size_t cap, const char *gates, int32_t n, int32_t lq,
                          uint64_t seed);
void chk_sample_unconfirmed(char *buf, size_t cap, const char *gates, const char *why);
/* The gates v failed, "H1, H2". */
void chk_failed_gates(char *buf, size_t cap, const rep_verdict *v);

/* Who an output is, for its lines: "<VERDICT> <where> <name> tested/<label> <dtype> (<producer>,
 * out stored as <encoding>): <detail>"; where NULL (judged in process, no file):
 * "<VERDICT> <name> <dtype>: <detail>". */
typedef struct chk_who {
    const char *where, *name, *label, *producer, *encoding;
} chk_who;

/* The lines check prints for a judged output: the verdict line, every other failed gate, the
 * producer's block mask, the diagnosis. Names are escaped (fc_esc_line). */
void chk_result_print(FILE *f, const chk_result *res, const chk_who *who,
                      const judge_case *jc);

/* ---- a file ---- */

/* What check reports, one item per printed line (or block of lines). */
typedef enum chk_kind {
    CHK_ITEM_CASE,   /* a case: its oracle, block mask, our kernel */
    CHK_ITEM_OUTPUT, /* an output under test */
    CHK_ITEM_EDGE,   /* a window-edge failure of an output under test */
    CHK_ITEM_LAYOUT, /* a layout file's shared metadata: its block-mask builds */
    CHK_ITEM_REJECT  /* a file (or a malformed triple) that could not be checked: message */
} chk_kind;

typedef struct chk_item {
    chk_kind kind;
    const char *path;
    const fix_case *c;              /* CASE, OUTPUT, EDGE */
    const fix_check_result *check;  /* CASE */
    int skipped;                    /* CASE: 1 the kernel refused it, 2 outside the contract */
    const fix_tested *tt;           /* OUTPUT, EDGE */
    const chk_result *res;          /* OUTPUT */
    const judge_case *jc;           /* OUTPUT */
    const char *text;               /* EDGE, REJECT: the message; LAYOUT: the layout name */
    int builds;                     /* LAYOUT */
} chk_item;

typedef void (*chk_emit_fn)(void *ctx, const chk_item *it);

/* Checks the file at path into t (counters and report rows), emitting an item for every line
 * check prints (emit may be NULL). A file that cannot be read or validated is one REJECT item
 * and an error row. */
void chk_file(const char *path, const chk_opts *o, chk_tally *t, chk_emit_fn emit, void *ctx);

/* A file that could not be checked at all (the CLI's child died): counted as rejected, an error
 * row, a REJECT item. */
void chk_reject(const char *path, const char *msg, chk_tally *t, chk_emit_fn emit, void *ctx);

/* The item as check prints it: to out, or for a REJECT one line "flexcheck check: <msg>" to err
 * (escaped). quiet: a passing case or output prints nothing. opts: what the run did (kernel). */
void chk_print_item(FILE *out, FILE *err, const chk_item *it, const chk_opts *o);

/* The report row's identity for case c of the file at path (c NULL: the file itself): the
 * gate's case id for an exported case (attribute case_id), else "<file name>:<case>". */
void chk_row_of(rep_row *row, const char *path, const fix_case *c, const char *group);

#ifdef __cplusplus
}
#endif

#endif
