/*
 * rep.h - the tolerance report of docs/tolerance.md "Report": one row per case, dtype and
 * backend, and the writers that turn a run's rows into files a CI system and a kernel author
 * read: a Markdown summary, JSON and CSV rows, JUnit XML and one self-contained HTML page with
 * inline SVG charts (no script, no external asset).
 *
 * rep_write_all() writes every file into a directory (created if missing); each file is
 * written to a temporary name in that directory and renamed into place, so a reader never
 * sees half a report. The rep_write_* writers take an open FILE* (tests, stdout).
 */
#ifndef FLEXCHECK_REP_H
#define FLEXCHECK_REP_H

#include <stdint.h>
#include <stdio.h>

#include "base/fc.h"
#include "masks/mask.h"
#include "reports/tol.h"

#ifdef __cplusplus
extern "C" {
#endif

#define REP_ID_LEN 128
#define REP_NAME_LEN 80 /* fits "tested/" and a 64-character label */
#define REP_TEXT_LEN 256

/* A skipped row is a case the run could not do on purpose (a backend without that feature):
 * it fails nothing, but every report lists it so the gap stays visible. */
typedef enum rep_outcome {
    REP_ROW_PASS = 0,
    REP_ROW_FAIL = 1,
    REP_ROW_ERROR = 2,
    REP_ROW_SKIP = 3,
} rep_outcome;

/* One report row. No pointers, so rows copy and sort freely (and suit Criterion parameters).
 * Strings are NUL-terminated; writers escape them for each format. */
typedef struct rep_row {
    char case_id[REP_ID_LEN];  /* the matrix's stable id, the same across dtypes */
    char group[REP_NAME_LEN];  /* matrix group ("M1", ...): JUnit classname */
    int32_t b, hq, hkv, lq, lk, d, dv;
    mask_params mask;              /* columns named by MASK_PARAMS (masks/mask.h) */
    int32_t q_block, kv_block;
    char builder[REP_NAME_LEN], backend[REP_NAME_LEN];
    char producer[REP_TEXT_LEN];   /* who produced the output judged: "" for our own kernel
                                    * runs, a tested output's producer attribute otherwise */
    int32_t kernel;                /* kernel version that ran (0: none, e.g. the reference) */
    fc_dtype dtype;
    double max_err, mean_err, rmse, nmse, e_lp_max, h1_ratio, floor, lse_err, s1, s2;
    int32_t degenerate;            /* H1 was element-wise (degenerate baseline) */
    uint64_t nan_count, inf_count, empty_rows;
    rep_outcome outcome;
    char first_fail[REP_NAME_LEN]; /* the first failing gate ("H1") or exactness check, "" */
    char gates[REP_NGATES + 1];    /* per gate in rep_gate order: P pass, F fail, - not run */
    char reason[REP_WHY_LEN];      /* one line: the first failing gate's, "pass", or the error */
    char explained[REP_WHY_LEN];   /* the diagnosis of a failed row (diag/): which bug explains
                                    * most of its failing rows; "" when not diagnosed */
} rep_row;

/* Copies the verdict's metrics, gates and reason into row (the identity fields are the
 * caller's). */
void rep_row_set_verdict(rep_row *row, const rep_verdict *v);
/* Marks a row that could not be judged (rep_evaluate or the run itself failed). */
void rep_row_set_error(rep_row *row, const char *msg);
/* Marks a row skipped on purpose; msg says why. */
void rep_row_set_skip(rep_row *row, const char *msg);
/* 1 for a passed or failed row: one whose metrics mean something. */
int rep_row_judged(const rep_row *row);
/* What ran the row, as summaries group and show it: "emu kernel 2", or the backend alone when
 * no kernel version applies. */
void rep_row_backend_label(const rep_row *row, char out[REP_NAME_LEN]);
/* "pass", "fail", "error", "skip". */
const char *rep_outcome_name(rep_outcome o);
/* Safe copy into a fixed field: truncates, always terminates. */
void rep_set_str(char *dst, size_t cap, const char *src);

/* An exactness check that rows may name as their failing gate, with the title the summaries
 * show after the hard gates. */
typedef struct rep_check {
    const char *name, *title;
} rep_check;

/* What a report is written from: the rows, and the exactness checks of the run that made them
 * in the order they are listed. The runner gives the checks (reports know no producer). */
typedef struct rep_set {
    const rep_row *rows;
    size_t n;
    const rep_check *checks;
    size_t nchecks;
} rep_set;

/* Writers: FC_OK, or FC_EIO when the stream reports an error, FC_ENOMEM. */
fc_status rep_write_markdown(FILE *f, const rep_set *set, fc_err *err);
fc_status rep_write_json(FILE *f, const rep_set *set, fc_err *err);
fc_status rep_write_csv(FILE *f, const rep_set *set, fc_err *err);
fc_status rep_write_junit(FILE *f, const rep_set *set, fc_err *err);
fc_status rep_write_html(FILE *f, const rep_set *set, fc_err *err);

typedef fc_status (*rep_writer)(FILE *f, const rep_set *set, fc_err *err);

/* dir/name written atomically (temporary file in dir, then rename); dir created if needed. */
fc_status rep_write_file(const char *dir, const char *name, rep_writer w, const rep_set *set,
                         fc_err *err);

/* The file names rep_write_all uses. */
#define REP_FILE_MD "summary.md"
#define REP_FILE_JSON "rows.json"
#define REP_FILE_CSV "rows.csv"
#define REP_FILE_JUNIT "junit.xml"
#define REP_FILE_HTML "report.html"

/* Every format into dir. */
fc_status rep_write_all(const char *dir, const rep_set *set, fc_err *err);
/* 1 iff the row counts as a gate failure (fail or error). */
int rep_row_failed(const rep_row *row);

#ifdef __cplusplus
}
#endif

#endif
