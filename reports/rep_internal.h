/*
 * rep_internal.h - what the report writers share and nobody else needs: the column table,
 * escaping for each format, the summary statistics and the SVG chart primitives.
 */
#ifndef FLEXCHECK_REP_INTERNAL_H
#define FLEXCHECK_REP_INTERNAL_H

#include <stddef.h>
#include <stdio.h>

#include "reports/rep.h"

/* ---- columns (rep_row.c): one table drives the CSV header, CSV rows, JSON keys and the JSON
 * reader (rep_read.c); the run identity's fields have a table of their own (rep_run.c) ------ */

typedef enum rep_col_kind {
    REP_COL_STR,     /* char[] field */
    REP_COL_I32,
    REP_COL_U64,
    REP_COL_F64,
    REP_COL_DTYPE,   /* fc_dtype, written by name */
    REP_COL_OUTCOME, /* rep_outcome, written by name */
    REP_COL_GATE,    /* first_fail: a gate or check name, or empty/null when none */
    REP_COL_SEED,    /* int64_t, null when negative (none) */
} rep_col_kind;

typedef struct rep_col {
    const char *name;
    rep_col_kind kind;
    size_t off;  /* of the field in its struct (rep_row, rep_run) */
    size_t size; /* of the field: a string read back must fit with its NUL */
} rep_col;

extern const rep_col rep_cols[];
extern const size_t rep_ncols;
extern const rep_col rep_run_cols[]; /* rep_run's fields but parts/nparts */
extern const size_t rep_run_ncols;

/* What a column's value is, as text without any escaping. */
typedef enum rep_val { REP_VAL_TEXT, REP_VAL_NUMBER, REP_VAL_NONE } rep_val;
/* The value of column c of the struct at base (a rep_row for rep_cols). Numbers use %.17g
 * (exact round trip); NaN gives "nan" with REP_VAL_NONE (JSON null: no value), infinities
 * "inf" and "-inf" as REP_VAL_TEXT (JSON has no infinity, and a reader must tell them from
 * NaN). A gate of "" gives "" and REP_VAL_NONE, so does a negative seed. */
rep_val rep_col_value(const rep_col *c, const void *base, char *buf, size_t cap);

/* ---- escaping (rep_esc.c) ----------------------------------------------------------------- */

/* With the quotes. A byte that is not part of well-formed UTF-8 is written '?', so the file
 * is always valid JSON (RFC 8259 requires UTF-8) and keeps its length, whatever a producer
 * attribute or a cut string held. */
void rep_put_json(FILE *f, const char *s);
void rep_put_xml(FILE *f, const char *s);   /* text and attribute values (HTML too) */
void rep_put_csv(FILE *f, const char *s);   /* quoted only when needed (RFC 4180) */
/* rep_put_csv for a text cell: one starting with = + - @ TAB CR or ' gets a leading ' so that
 * a spreadsheet never runs it as a formula (rep_esc.c says why and how to read it back). */
void rep_put_csv_text(FILE *f, const char *s);
void rep_put_md(FILE *f, const char *s);    /* inside a table cell */
/* A short human number: %.3g, or "nan"/"inf", "-" for a missing value (NaN marks those). */
void rep_fmt_num(char *buf, size_t cap, double x);
void rep_put_num(FILE *f, double x); /* rep_fmt_num, written to f */
/* The gates in evaluation order, then the set's exactness checks, as one sentence for the
 * summaries (from tol.c's names and the runner's check list, the names rows carry). */
void rep_put_gate_order(FILE *f, const rep_set *set, void (*put)(FILE *, const char *));

/* A merged part in one line, "DIR: scope, time, command"; REP_RUN_PART_LEN holds any. */
#define REP_RUN_PART_LEN (REP_DIR_LEN + 2 * REP_TEXT_LEN + REP_NAME_LEN + REP_CMD_LEN + 16)
void rep_run_part_line(char *buf, size_t cap, const rep_run *part);

/* The run identity, for the human formats: calls put(ctx, key, value) for "run" (its scope,
 * rep_run_scope), "flexcheck" (version and commit), "time" and "command", then once per merged
 * part "merged" (rep_run_part_line). Nothing when run is NULL. */
void rep_run_each(const rep_run *run, void (*put)(void *ctx, const char *key, const char *value),
                  void *ctx);

/* ---- summary (rep_summary.c) --------------------------------------------------------------- */

/* A judged row measured against the baseline (H1 ran on it): the rows every H1 statistic and
 * error chart counts. Not so a row of a case outside the contract, nor a failed row whose H1
 * did not run (its ratio NaN): they are left out rather than counted as infinitely bad. */
int rep_row_measured(const rep_row *r);

/* The mask family of a row, for "H1 ratio against Lk" (docs/tolerance.md "Report"): the first
 * that holds of packed (nseq >= 2), chunked (chunk > 0), sliding (causal, window > 0), bidir
 * window (window > 0, not causal), causal, none. Soft-cap and sinks are no family. */
typedef enum rep_family {
    REP_FAM_PACKED,
    REP_FAM_CHUNKED,
    REP_FAM_SLIDING,
    REP_FAM_BIDIR,
    REP_FAM_CAUSAL,
    REP_FAM_NONE,
    REP_NFAMILIES
} rep_family;
rep_family rep_row_family(const rep_row *r);
const char *rep_family_name(rep_family f);

/* Power-of-two Lk buckets: 0 holds Lk 0, bucket k >= 1 holds [2^(k-1), 2^k - 1], so Lk up to
 * MASK_MAX_LEN (2^28) needs buckets 0..29. rep_lk_bucket_label: "0", "1", "2-3", "4-7", .... */
#define REP_NBUCKETS 30
int rep_lk_bucket(int32_t lk);
void rep_lk_bucket_label(char *buf, size_t cap, int bucket);

/* The H1 ratios of one group's measured rows in one Lk bucket and family. */
typedef struct rep_h1cell {
    size_t n;
    double median, max; /* NaN when n is 0; a NaN ratio counts as +inf */
} rep_h1cell;
/* A cell as both summaries print it: "median / max (n)", "-" when n is 0. */
void rep_h1cell_text(char *buf, size_t cap, const rep_h1cell *c);
struct rep_group;
/* Which families and Lk buckets of g hold a row: a bucket table's columns and lines. */
void rep_h1cell_present(const struct rep_group *g, int family[REP_NFAMILIES],
                        int bucket[REP_NBUCKETS]);

/* Rows of one dtype and backend. H1 statistics cover the measured rows (rep_row_measured); a
 * NaN ratio counts as +inf. Median of an even count is the mean of the middle two; p95 is
 * nearest-rank (the ceil(0.95 n)-th smallest). */
typedef struct rep_group {
    fc_dtype dtype;
    char backend[REP_NAME_LEN];
    size_t rows, pass, fail, error, skip, outside, s1_flags, s2_flags;
    size_t judged;                 /* pass + fail */
    size_t measured;               /* judged with H1 run (rep_row_measured): h1's length */
    double h1_median, h1_p95, h1_max;
    double *h1;                    /* [measured] ascending */
    rep_h1cell *by_lk;             /* [REP_NBUCKETS][REP_NFAMILIES]: H1 ratio against Lk */
} rep_group;

/* max|err| per group against one axis value (Lk, or W for windowed rows). */
typedef struct rep_axis {
    size_t nvals;
    int32_t *vals;                 /* ascending */
    double *cell;                  /* [nvals][ngroups]; NaN where no row */
} rep_axis;

/* max|err|(lp) / max|err|(float32) over rows of one backend with the same case id and builder.
 * Pairs whose float32 error is exactly 0 have no ratio and are counted as `zero_ref`. */
typedef struct rep_pairs {
    char backend[REP_NAME_LEN];
    fc_dtype lp;                   /* FC_F16 or FC_BF16 */
    size_t n, zero_ref;
    double median, max;
    double *ratio;                 /* [n] ascending */
} rep_pairs;

typedef struct rep_summary {
    size_t rows, pass, fail, error, skip, outside;
    rep_group *groups;             /* sorted by dtype, then backend */
    size_t ngroups;
    rep_axis by_lk, by_w;
    rep_pairs *pairs;              /* sorted by backend, then dtype */
    size_t npairs;
} rep_summary;

fc_status rep_summarize(const rep_row *rows, size_t n, rep_summary *s, fc_err *err);
/* The index of row r's group in s (s->ngroups for a row that was not summarized). */
size_t rep_group_of(const rep_summary *s, const rep_row *r);
/* The set's verdict as its summaries print it: failed when a row failed or could not be judged,
 * or, in a --strict run (set->run->strict), when one is outside the contract. */
int rep_set_failed(const rep_set *set, const rep_summary *s);
void rep_summary_free(rep_summary *s);

/* ---- the charts of report.html (rep_html_charts.c) ---------------------------------------- */

fc_status rep_html_charts(FILE *f, const rep_summary *s, const rep_row *rows, size_t n,
                          fc_err *err);

/* ---- SVG (rep_svg.c) ------------------------------------------------------------------------ */

/* One labelled row of values on a shared horizontal axis. */
typedef struct rep_strip {
    const char *label;
    const double *v;
    size_t n;
} rep_strip;

/* The axis range of a log chart: [lo, hi], powers of ten in [1e-300, 1e300] at least a decade
 * apart, holding [mn, mx] where it can; [1, 10] when there is no positive finite value. */
void rep_svg_decades(double mn, double mx, double *lo, double *hi);

/* Strip plot: one row of dots per strip; values outside [lo, hi] are drawn at the edge as
 * open marks. mark (if finite) draws a dashed reference line (the H1 limit at 1). id is the
 * svg element's id. */
void rep_svg_strips(FILE *f, const char *id, const char *title, const char *xlabel,
                    const rep_strip *s, size_t ns, double lo, double hi, int logx, double mark);

/* One series of a scatter plot: n points (x[i], y[i]), each a marker of its own. */
typedef struct rep_points {
    const char *label;
    const double *x, *y;
    const unsigned char *failed; /* [n] or NULL: 1 draws the point as a failed row's x */
    const char *const *tip;      /* [n] or NULL: each point's hover text (else the label) */
    size_t n;
} rep_points;

/* Log-log scatter plot, one marker per point (an element <g class="pt pass|fail">), series
 * told apart by colour in a legend below it; a value <= 0 or not finite is drawn ringed at
 * the axis's edge (0 at the bottom or left, infinity and NaN at the top). */
void rep_svg_scatter(FILE *f, const char *id, const char *title, const char *xlabel,
                     const char *ylabel, const rep_points *s, size_t ns);

/* One marker of an H1-against-Lk panel: a measured row. */
typedef struct rep_lk_point {
    double lk, ratio;  /* ratio: a NaN counts as +inf */
    rep_family family; /* shape and colour */
    int failed;        /* drawn as its outline with an x */
    const char *tip;   /* hover text */
} rep_lk_point;

/* What every panel of the section shares: Lk from 2^xe0 to 2^xe1, the ratio from ylo to yhi
 * (decades holding 1, the limit), and which families the legend lists. */
typedef struct rep_lk_axes {
    int xe0, xe1;
    double ylo, yhi;
    int family[REP_NFAMILIES];
} rep_lk_axes;

/* The axes that hold every point of every panel (p[0..n)). */
void rep_svg_lk_axes(const rep_lk_point *p, size_t n, rep_lk_axes *ax);
/* One panel: Lk on a log axis (a grid line at every power of two, about ten labels; Lk 0 in a
 * band left of it), the H1 ratio on a log axis with the limit 1 dashed (0 in a band below, inf
 * above); a marker per point (<g class="pt fam-F pass|fail [edge]">), shaped and coloured by
 * family, ringed where it stands in a band. */
void rep_svg_h1_lk(FILE *f, const char *id, const char *title, const rep_lk_point *p, size_t n,
                   const rep_lk_axes *ax);

#endif
