/*
 * rep_read.c - a report set read back from its rows.json (rep.h, rep_read_json), for
 * `flexcheck report merge`. The parsing is jansson's (a maintained RFC 8259 parser that keeps
 * integers and reals apart, refuses duplicate keys and reports line and column); what each
 * value means comes from the same column tables the writer uses (rep_row.c, rep_run.c), so a
 * column added there is read back with no edit here.
 *
 * The file may come from anywhere (a CI artifact): every value is checked for its type and
 * range, every string against the size of the field it goes into, and the totals against the
 * rows; the first thing wrong ends the read with one line naming the file and the field. What
 * a field's type admits is more than a run writes (Lq -5, a pass with an H1 ratio of 1e6):
 * rep_report_check, below, holds the rows to what the writers produce, before a merge copies
 * them; the reader alone stays faithful to the file (a round trip of any value).
 */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "masks/bmask.h"   /* bmask_block_size_ok: the block sizes the builders accept */
#include "masks/problem.h" /* ATTN_MAX_HEADS, ATTN_MAX_HEAD_DIM, the mask and term limits */
#include "reports/rep_internal.h"

/* Where a value is, as the messages name it: "rows[3].max_err", "run.merged[0].seed". */
#define WHERE_LEN 160

typedef struct reader {
    const char *path;
    fc_err *err;
} reader;

static fc_status bad(const reader *r, const char *where, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static fc_status bad(const reader *r, const char *where, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return fc_errf(r->err, FC_EINVAL, "%s: field %s: %s", r->path, where, msg);
}

static fc_status no_memory(const reader *r)
{
    return fc_errf(r->err, FC_ENOMEM, "%s: out of memory", r->path);
}

/* A string into a char[cap] field; null gives "" when null_ok. Over-long values are refused,
 * never cut: a cut id or reason would silently be another value. */
static fc_status get_str(const reader *r, const char *where, const json_t *v, char *dst,
                         size_t cap, int null_ok)
{
    if (null_ok && json_is_null(v)) {
        dst[0] = 0;
        return FC_OK;
    }
    if (!json_is_string(v))
        return bad(r, where, "expected a string%s", null_ok ? " or null" : "");
    size_t len = json_string_length(v);
    const char *s = json_string_value(v);
    if (len >= cap)
        return bad(r, where, "%zu bytes, longer than the field's %zu", len, cap - 1);
    if (strlen(s) != len) /* jansson refuses \u0000 unless asked; checked all the same */
        return bad(r, where, "holds a NUL character");
    memcpy(dst, s, len + 1);
    return FC_OK;
}

/* An integer in [lo, hi]. */
static fc_status get_int(const reader *r, const char *where, const json_t *v, json_int_t lo,
                         json_int_t hi, json_int_t *out)
{
    if (!json_is_integer(v))
        return bad(r, where, "expected an integer");
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi)
        return bad(r, where, "%lld is out of range [%lld, %lld]", (long long)x, (long long)lo,
                   (long long)hi);
    *out = x;
    return FC_OK;
}

/* A metric: a number, null (NaN: no value) or "inf" / "-inf", as rep_json.c writes them. */
static fc_status get_f64(const reader *r, const char *where, const json_t *v, double *out)
{
    if (json_is_number(v))
        *out = json_number_value(v);
    else if (json_is_null(v))
        *out = NAN;
    else if (json_is_string(v) && !strcmp(json_string_value(v), "inf"))
        *out = INFINITY;
    else if (json_is_string(v) && !strcmp(json_string_value(v), "-inf"))
        *out = -INFINITY;
    else
        return bad(r, where, "expected a number, null, \"inf\" or \"-inf\"");
    return FC_OK;
}

static fc_status get_outcome(const reader *r, const char *where, const json_t *v,
                             rep_outcome *out)
{
    static const rep_outcome all[] = {REP_ROW_PASS, REP_ROW_FAIL, REP_ROW_ERROR, REP_ROW_SKIP,
                                      REP_ROW_OUTSIDE};
    for (size_t i = 0; json_is_string(v) && i < sizeof all / sizeof all[0]; i++)
        if (!strcmp(json_string_value(v), rep_outcome_name(all[i]))) {
            *out = all[i];
            return FC_OK;
        }
    return bad(r, where, "expected \"pass\", \"fail\", \"error\", \"skip\" or "
               "\"outside-contract\"");
}

/* One column of a table from obj into the struct at base. */
static fc_status get_col(const reader *r, const char *prefix, const json_t *obj,
                         const rep_col *c, void *base)
{
    char where[WHERE_LEN];
    snprintf(where, sizeof where, "%s.%s", prefix, c->name);
    const json_t *v = json_object_get(obj, c->name);
    if (!v && !strcmp(c->name, "nseq")) /* the newest column: say why */
        return bad(r, where, "missing: the file predates the column (sequences per batch "
                   "entry, which tells a packed row apart); write the report again");
    if (!v)
        return bad(r, where, "missing");
    char *p = (char *)base + c->off;
    json_int_t x;
    fc_status st;
    switch (c->kind) {
    case REP_COL_STR:
    case REP_COL_GATE:
        return get_str(r, where, v, p, c->size, c->kind == REP_COL_GATE);
    case REP_COL_I32: {
        if ((st = get_int(r, where, v, INT32_MIN, INT32_MAX, &x)))
            return st;
        int32_t y = (int32_t)x;
        memcpy(p, &y, sizeof y);
        return FC_OK;
    }
    case REP_COL_U64: { /* counts, never near jansson's int64 limit */
        if ((st = get_int(r, where, v, 0, INT64_MAX, &x)))
            return st;
        uint64_t y = (uint64_t)x;
        memcpy(p, &y, sizeof y);
        return FC_OK;
    }
    case REP_COL_SEED: { /* null: no seed, -1 */
        x = -1;
        if (!json_is_null(v) && (st = get_int(r, where, v, 0, INT64_MAX, &x)))
            return st;
        int64_t y = (int64_t)x;
        memcpy(p, &y, sizeof y);
        return FC_OK;
    }
    case REP_COL_F64: {
        double y = NAN;
        if ((st = get_f64(r, where, v, &y)))
            return st;
        memcpy(p, &y, sizeof y);
        return FC_OK;
    }
    case REP_COL_DTYPE: {
        fc_dtype dt = FC_F32;
        if (!json_is_string(v) || fc_dtype_parse(json_string_value(v), &dt))
            return bad(r, where, "expected \"float32\", \"float16\" or \"bfloat16\"");
        memcpy(p, &dt, sizeof dt);
        return FC_OK;
    }
    case REP_COL_OUTCOME: {
        rep_outcome o = REP_ROW_ERROR;
        if ((st = get_outcome(r, where, v, &o)))
            return st;
        memcpy(p, &o, sizeof o);
        return FC_OK;
    }
    }
    return bad(r, where, "unknown column kind");
}

/* Every column of a table from the object at where. */
static fc_status get_cols(const reader *r, const char *where, const json_t *obj,
                          const rep_col *cols, size_t ncols, void *base)
{
    if (!json_is_object(obj))
        return bad(r, where, "expected an object");
    for (size_t c = 0; c < ncols; c++) {
        fc_status st = get_col(r, where, obj, &cols[c], base);
        if (st)
            return st;
    }
    return FC_OK;
}

/* A run identity's own fields, and what rep.h promises of them. */
static fc_status get_run_fields(const reader *r, const char *where, const json_t *obj,
                                rep_run *run)
{
    memset(run, 0, sizeof *run);
    fc_status st = get_cols(r, where, obj, rep_run_cols, rep_run_ncols, run);
    if (st)
        return st;
    char w[WHERE_LEN];
    snprintf(w, sizeof w, "%s.shard_i", where);
    if (run->shard_n < 1 || run->shard_i < 1 || run->shard_i > run->shard_n)
        return bad(r, w, "shard %d/%d: need 1 <= I <= N", (int)run->shard_i, (int)run->shard_n);
    return FC_OK;
}

static fc_status get_run(const reader *r, const json_t *obj, rep_report *out)
{
    if (json_is_null(obj))
        return bad(r, "run", "null: the report was written without a run identity");
    fc_status st = get_run_fields(r, "run", obj, &out->run);
    if (st)
        return st;
    const json_t *merged = json_object_get(obj, "merged");
    if (!merged)
        return FC_OK;
    size_t n = json_array_size(merged);
    if (!json_is_array(merged) || n == 0)
        return bad(r, "run.merged", "expected a non-empty array");
    if (!(out->parts = calloc(n, sizeof *out->parts)))
        return no_memory(r);
    for (size_t i = 0; i < n; i++) {
        char where[WHERE_LEN];
        snprintf(where, sizeof where, "run.merged[%zu]", i);
        const json_t *part = json_array_get(merged, i);
        if ((st = get_run_fields(r, where, part, &out->parts[i])))
            return st;
        if (json_object_get(part, "merged")) /* writers flatten: a part is never merged */
            return bad(r, where, "a merged part holds parts of its own");
    }
    out->run.parts = out->parts;
    out->run.nparts = n;
    return FC_OK;
}

static fc_status get_checks(const reader *r, const json_t *arr, rep_report *out)
{
    if (!json_is_array(arr))
        return bad(r, "checks", "expected an array");
    size_t n = json_array_size(arr);
    out->checks = calloc(n + 1, sizeof *out->checks);
    out->check_text = calloc(n + 1, sizeof *out->check_text);
    if (!out->checks || !out->check_text)
        return no_memory(r);
    for (size_t i = 0; i < n; i++) {
        char where[WHERE_LEN];
        const json_t *c = json_array_get(arr, i);
        rep_check_text *t = &out->check_text[i];
        snprintf(where, sizeof where, "checks[%zu]", i);
        if (!json_is_object(c))
            return bad(r, where, "expected an object");
        fc_status st;
        snprintf(where, sizeof where, "checks[%zu].name", i);
        const json_t *name = json_object_get(c, "name"), *title = json_object_get(c, "title");
        if (!name)
            return bad(r, where, "missing");
        if ((st = get_str(r, where, name, t->name, sizeof t->name, 0)))
            return st;
        snprintf(where, sizeof where, "checks[%zu].title", i);
        if (!title)
            return bad(r, where, "missing");
        if ((st = get_str(r, where, title, t->title, sizeof t->title, 0)))
            return st;
        out->checks[i] = (rep_check){t->name, t->title};
    }
    out->nchecks = n;
    return FC_OK;
}

static fc_status get_rows(const reader *r, const json_t *arr, rep_report *out)
{
    if (!json_is_array(arr))
        return bad(r, "rows", "expected an array");
    size_t n = json_array_size(arr);
    if (!(out->rows = calloc(n + 1, sizeof *out->rows)))
        return no_memory(r);
    for (size_t i = 0; i < n; i++) {
        char where[WHERE_LEN];
        snprintf(where, sizeof where, "rows[%zu]", i);
        fc_status st = get_cols(r, where, json_array_get(arr, i), rep_cols, rep_ncols,
                                &out->rows[i]);
        if (st)
            return st;
        /* A row's verdict agrees with its gates: a row edited to "pass" while a gate shows
         * F (or a failure with nothing named) would merge into a false total. */
        const rep_row *row = &out->rows[i];
        int gate_failed = strchr(row->gates, 'F') != NULL;
        if (row->outcome != REP_ROW_FAIL && (gate_failed || row->first_fail[0]))
            return bad(r, where, "outcome %s, yet gates '%s' and first_fail '%s' say it failed",
                       rep_outcome_name(row->outcome), row->gates, row->first_fail);
        if (row->outcome == REP_ROW_FAIL && !row->first_fail[0])
            return bad(r, where, "outcome fail with no first_fail");
    }
    out->n = n;
    return FC_OK;
}

/* The totals the file states must be what its rows add up to. */
static fc_status check_totals(const reader *r, const json_t *root, const rep_report *rep)
{
    size_t count[5] = {0};
    for (size_t i = 0; i < rep->n; i++)
        count[rep->rows[i].outcome]++; /* get_outcome admits the five values only */
    static const char *const keys[] = {"pass", "fail", "error", "skip", "outside"};
    for (size_t k = 0; k < 6; k++) {
        const char *key = k < 5 ? keys[k] : "rows_total";
        size_t want = k < 5 ? count[k] : rep->n;
        json_int_t x;
        const json_t *v = json_object_get(root, key);
        if (!v)
            return bad(r, key, "missing");
        fc_status st = get_int(r, key, v, 0, INT64_MAX, &x);
        if (st)
            return st;
        if ((size_t)x != want)
            return bad(r, key, "says %lld, the rows add up to %zu", (long long)x, want);
    }
    return FC_OK;
}

/* The top level: run, checks, rows, then the totals against the rows. */
static fc_status get_root(const reader *r, const json_t *root, rep_report *out)
{
    static const char *const parts[] = {"run", "checks", "rows"};
    if (!json_is_object(root))
        return bad(r, "(top level)", "expected an object");
    for (size_t k = 0; k < sizeof parts / sizeof parts[0]; k++)
        if (!json_object_get(root, parts[k]))
            return bad(r, parts[k], "missing");
    fc_status st;
    if ((st = get_run(r, json_object_get(root, "run"), out)) ||
        (st = get_checks(r, json_object_get(root, "checks"), out)) ||
        (st = get_rows(r, json_object_get(root, "rows"), out)))
        return st;
    return check_totals(r, root, out);
}

fc_status rep_read_json(const char *path, rep_report *out, fc_err *err)
{
    memset(out, 0, sizeof *out);
    reader r = {path, err};
    FILE *f = fopen(path, "rb");
    if (!f)
        return fc_errf(err, FC_EIO, "%s: cannot open: %s", path, strerror(errno));
    json_error_t je;
    json_t *root = json_loadf(f, JSON_REJECT_DUPLICATES, &je);
    fclose(f);
    if (!root)
        return fc_errf(err, FC_EINVAL, "%s: line %d column %d: does not parse: %s", path,
                       je.line, je.column, je.text);
    fc_status st = get_root(&r, root, out);
    json_decref(root);
    return st;
}

/* ---- what a run can have written (rep_report_check) -----------------------------------------
 *
 * The reader above takes any value a field's type holds; a merge copies rows into a new report,
 * so it first holds every row to what the writers can produce, traced from where rows are made:
 * judge_row_problem (a validated attn_problem: attn_problem_check, mask_params_check,
 * terms_check), the block sizes of a fixture or the matrix (bmask_block_size_ok), the kernel
 * version the CLI took (1..max_kernel, the caller's GPU_MAX_KERNEL: reports know no kernels;
 * 0 where no kernel ran, else the run's) and rep_row_set_verdict / set_unjudged for the verdict
 * (tol.c decides the gates). Anything else was edited or made by
 * something that is not flexcheck, and a merged report must not pass it on as a measured row.
 *
 * Two kinds of rows (rep_row.c):
 * - measured (pass, fail, outside-contract): from rep_row_set_verdict. Its shape is a real
 *   problem's. H3 and H4 always run. H1 runs unless the baseline overflowed (then H1 and H2
 *   are "-" and every metric measured against the baseline is NaN; outside-contract rows are
 *   exactly those without a failure); where H1 ran those metrics are numbers, and a passed H1
 *   has h1_ratio <= 1 (it passed because max|err| <= its bound, and the ratio is that quotient,
 *   or the largest element-wise one), a failed H1 a ratio that is not (<= 1 fails on NaN). A
 *   passed H3 saw no NaN. A pass has every gate P or "-" (checked by the reader). A fail names
 *   a gate that shows F and is the first F, or an exactness check (which may follow any gates).
 * - skip and error: from set_unjudged, every metric NaN, counts 0, every gate "-". Its shape is
 *   the case's when the case was set up, or unknown (0) when it could not be (a file that did not
 *   read, a case the gate could not build): then b, Hq, Hkv, D, Dv and the block sizes are 0.
 * Metrics are never negative (NaN aside; +inf is a ratio's x/0); counts fit the problem. */

static const char gate_letters[] = "PF-";

/* rows[i].name, as the messages name a field. */
static const char *row_field(char *buf, size_t cap, size_t i, const char *name)
{
    snprintf(buf, cap, "rows[%zu].%s", i, name);
    return buf;
}

/* v in [lo, hi], else the message. */
static fc_status int_in(const reader *r, size_t i, const char *name, int64_t v, int64_t lo,
                        int64_t hi)
{
    char w[WHERE_LEN];
    if (v < lo || v > hi)
        return bad(r, row_field(w, sizeof w, i, name), "%lld is out of range [%lld, %lld]",
                   (long long)v, (long long)lo, (long long)hi);
    return FC_OK;
}

/* a * b, or UINT64_MAX when it does not fit. */
static uint64_t mul_sat(uint64_t a, uint64_t b)
{
    return a && b > UINT64_MAX / a ? UINT64_MAX : a * b;
}

/* The shape, mask, terms, block sizes and kernel: what the case and the run decide. */
static fc_status check_identity(const reader *r, size_t i, const rep_row *row,
                                const rep_run *run, int32_t max_kernel, int measured)
{
    char w[WHERE_LEN];
    fc_status st;
    if (!row->case_id[0])
        return bad(r, row_field(w, sizeof w, i, "case_id"), "empty: every row names its case");
    /* Unknown shape: a skip or error row of a case that could not be set up (all five 0). */
    int shape = measured || row->b || row->hq || row->hkv || row->d || row->dv;
    if (shape) {
        if ((st = int_in(r, i, "b", row->b, 1, INT32_MAX)) ||
            (st = int_in(r, i, "hq", row->hq, 1, ATTN_MAX_HEADS)) ||
            (st = int_in(r, i, "hkv", row->hkv, 1, row->hq)) ||
            (st = int_in(r, i, "d", row->d, 1, ATTN_MAX_HEAD_DIM)) ||
            (st = int_in(r, i, "dv", row->dv, 1, ATTN_MAX_HEAD_DIM)))
            return st;
        if (row->hq % row->hkv != 0)
            return bad(r, row_field(w, sizeof w, i, "hkv"), "Hq %d is not a multiple of Hkv %d",
                       (int)row->hq, (int)row->hkv);
    }
    /* Sequences per batch entry (seq_info.nseq): 1 dense, R packed, which seq_init_packed
     * makes with B = 1; 0 where there is no case. */
    if ((st = int_in(r, i, "nseq", row->nseq, shape, shape ? MASK_MAX_LEN : 0)))
        return st;
    if (row->nseq > 1 && row->b != 1)
        return bad(r, row_field(w, sizeof w, i, "nseq"), "%d sequences packed, yet B is %d "
                   "(a packed batch has B = 1)", (int)row->nseq, (int)row->b);
    if ((st = int_in(r, i, "lq", row->lq, 0, MASK_MAX_LEN)) ||
        (st = int_in(r, i, "lk", row->lk, 0, MASK_MAX_LEN)))
        return st;
    for (int k = 0; k < MASK_NPARAMS; k++)
        if ((st = int_in(r, i, mask_param_table[k].opt, mask_param_get(&row->mask, k), 0,
                         mask_param_table[k].max)))
            return st;
    if (!isfinite(row->softcap) || !(row->softcap >= 0 && row->softcap <= TERMS_MAX_SOFTCAP))
        return bad(r, row_field(w, sizeof w, i, TERM_SOFTCAP_NAME),
                   "%g: must be finite and in [0, %g] (0 = off)", row->softcap,
                   TERMS_MAX_SOFTCAP);
    if ((st = int_in(r, i, TERM_SINKS_NAME, row->sinks, 0, 1)))
        return st;
    const struct {
        const char *name;
        int32_t v;
    } blocks[] = {{"q_block", row->q_block}, {"kv_block", row->kv_block}};
    for (size_t k = 0; k < 2; k++)
        if (!bmask_block_size_ok(blocks[k].v) && (shape || blocks[k].v != 0))
            return bad(r, row_field(w, sizeof w, i, blocks[k].name),
                       "%d: must be a power of two in [%d, %d]%s", (int)blocks[k].v,
                       BMASK_MIN_BLOCK, BMASK_MAX_BLOCK, shape ? "" : " (or 0: no case)");
    if ((st = int_in(r, i, "kernel", row->kernel, 0, max_kernel)))
        return st;
    if (row->kernel != 0 && row->kernel != run->kernel)
        return bad(r, row_field(w, sizeof w, i, "kernel"), "%d, but the run's kernel is %d",
                   (int)row->kernel, (int)run->kernel);
    return FC_OK;
}

/* The metrics a verdict measures against the baseline (all but lse_err), in the column
 * order. */
static const struct {
    const char *name;
    size_t off;
} scaled[] = {
#define METRIC(f) {#f, offsetof(rep_row, f)}
    METRIC(max_err), METRIC(mean_err), METRIC(rmse), METRIC(nmse), METRIC(e_lp_max),
    METRIC(h1_ratio), METRIC(floor), METRIC(s1), METRIC(s2),
#undef METRIC
};

static double metric(const rep_row *row, size_t off)
{
    double x;
    memcpy(&x, (const char *)row + off, sizeof x);
    return x;
}

/* A row nobody judged: set_unjudged's values. */
static fc_status check_unjudged(const reader *r, size_t i, const rep_row *row)
{
    char w[WHERE_LEN];
    const char *o = rep_outcome_name(row->outcome);
    for (size_t k = 0; k < sizeof scaled / sizeof scaled[0]; k++)
        if (!isnan(metric(row, scaled[k].off)))
            return bad(r, row_field(w, sizeof w, i, scaled[k].name),
                       "%g, yet the row is %s: nothing was measured (null)",
                       metric(row, scaled[k].off), o);
    if (!isnan(row->lse_err))
        return bad(r, row_field(w, sizeof w, i, "lse_err"),
                   "%g, yet the row is %s: nothing was measured (null)", row->lse_err, o);
    const struct {
        const char *name;
        uint64_t v;
    } zero[] = {{"nan_count", row->nan_count}, {"inf_count", row->inf_count},
                {"empty_rows", row->empty_rows}, {"degenerate", (uint64_t)row->degenerate}};
    for (size_t k = 0; k < sizeof zero / sizeof zero[0]; k++)
        if (zero[k].v)
            return bad(r, row_field(w, sizeof w, i, zero[k].name),
                       "%llu, yet the row is %s: nothing was counted (0)",
                       (unsigned long long)zero[k].v, o);
    if (strspn(row->gates, "-") != REP_NGATES)
        return bad(r, row_field(w, sizeof w, i, "gates"), "'%s', yet the row is %s: no gate "
                   "ran (every one '-')", row->gates, o);
    return FC_OK;
}

/* A measured row: its gates, metrics and counts as rep_row_set_verdict leaves them. */
static fc_status check_measured(const reader *r, size_t i, const rep_row *row)
{
    char w[WHERE_LEN];
    const char *g = row->gates, *o = rep_outcome_name(row->outcome);
    for (int k = 0; k < REP_NGATES; k++)
        if (g[k] == '-' && (k == REP_H3 || k == REP_H4))
            return bad(r, row_field(w, sizeof w, i, "gates"), "'%s': %s not run in a %s row "
                       "(it always runs)", g, rep_gate_name((rep_gate)k), o);
    int h1 = g[REP_H1] != '-';
    if (!h1 && g[REP_H2] != '-')
        return bad(r, row_field(w, sizeof w, i, "gates"), "'%s': H2 ran without H1 (both "
                   "need the baseline's scale)", g);
    if (row->outcome == REP_ROW_PASS && !h1)
        return bad(r, row_field(w, sizeof w, i, "gates"), "'%s': a pass with H1 not run", g);
    if (row->outcome == REP_ROW_OUTSIDE && h1)
        return bad(r, row_field(w, sizeof w, i, "gates"), "'%s': an outside-contract row with "
                   "H1 run (it is outside because H1 has no scale)", g);
    for (size_t k = 0; k < sizeof scaled / sizeof scaled[0]; k++) {
        double x = metric(row, scaled[k].off);
        if (h1 ? isnan(x) : !isnan(x))
            return bad(r, row_field(w, sizeof w, i, scaled[k].name), "%g where H1 %s", x,
                       h1 ? "ran (a number)" : "did not run (null: nothing was measured)");
        if (!(isnan(x) || x >= 0))
            return bad(r, row_field(w, sizeof w, i, scaled[k].name), "%g: must be >= 0", x);
    }
    if (!(row->lse_err >= 0))
        return bad(r, row_field(w, sizeof w, i, "lse_err"), "%g: must be >= 0", row->lse_err);
    if (g[REP_H1] == 'P' && !(row->h1_ratio <= 1))
        return bad(r, row_field(w, sizeof w, i, "h1_ratio"), "%g, yet H1 passed (gates '%s'): "
                   "a passed H1 has a ratio <= 1", row->h1_ratio, g);
    if (g[REP_H1] == 'F' && row->h1_ratio <= 1)
        return bad(r, row_field(w, sizeof w, i, "h1_ratio"), "%g, yet H1 failed (gates '%s'): "
                   "a failed H1 has a ratio > 1", row->h1_ratio, g);
    if (row->degenerate < 0 || row->degenerate > 1 || (row->degenerate && !h1))
        return bad(r, row_field(w, sizeof w, i, "degenerate"), "%d: 0, or 1 where H1 ran",
                   (int)row->degenerate);
    if (g[REP_H3] == 'P' && row->nan_count)
        return bad(r, row_field(w, sizeof w, i, "nan_count"), "%llu, yet H3 passed (gates "
                   "'%s'): any NaN fails H3", (unsigned long long)row->nan_count, g);
    /* Rows B * Hq * Lq; NaNs and infinities are counted in O and the LSE. */
    uint64_t rows = mul_sat(mul_sat((uint64_t)row->b, (uint64_t)row->hq), (uint64_t)row->lq);
    uint64_t elems = mul_sat(rows, (uint64_t)row->dv + 1);
    const struct {
        const char *name;
        uint64_t v, max;
    } counts[] = {{"nan_count", row->nan_count, elems},
                  {"inf_count", row->inf_count, elems},
                  {"empty_rows", row->empty_rows, rows}};
    for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++)
        if (counts[k].v > counts[k].max)
            return bad(r, row_field(w, sizeof w, i, counts[k].name), "%llu: more than the "
                       "%llu the case holds", (unsigned long long)counts[k].v,
                       (unsigned long long)counts[k].max);
    if (row->outcome == REP_ROW_FAIL) /* the reader saw that a fail names something */
        for (int k = 0; k < REP_NGATES; k++)
            if (!strcmp(row->first_fail, rep_gate_name((rep_gate)k)) &&
                (g[k] != 'F' || strchr(g, 'F') != g + k))
                return bad(r, row_field(w, sizeof w, i, "first_fail"), "%s, yet gates '%s' show "
                           "%s", row->first_fail, g, g[k] != 'F' ? "it did not fail"
                                                                 : "an earlier gate failed");
    return FC_OK;
}

fc_status rep_report_check(const rep_report *rep, const char *path, int32_t max_kernel,
                           fc_err *err)
{
    reader r = {path, err};
    if (rep->run.kernel < 0 || rep->run.kernel > max_kernel)
        return bad(&r, "run.kernel", "%d is out of range [0, %d]", (int)rep->run.kernel,
                   (int)max_kernel);
    for (size_t i = 0; i < rep->n; i++) {
        const rep_row *row = &rep->rows[i];
        char w[WHERE_LEN];
        if (strlen(row->gates) != REP_NGATES || strspn(row->gates, gate_letters) != REP_NGATES)
            return bad(&r, row_field(w, sizeof w, i, "gates"), "'%s': must be %d of P, F "
                       "and - (one per gate, in rep_gate order)", row->gates, (int)REP_NGATES);
        int measured = row->outcome == REP_ROW_PASS || row->outcome == REP_ROW_FAIL ||
                       row->outcome == REP_ROW_OUTSIDE;
        fc_status st = check_identity(&r, i, row, &rep->run, max_kernel, measured);
        if (!st)
            st = measured ? check_measured(&r, i, row) : check_unjudged(&r, i, row);
        if (st)
            return st;
    }
    return FC_OK;
}

void rep_report_free(rep_report *r)
{
    free(r->rows);
    free(r->checks);
    free(r->check_text);
    free(r->parts);
    memset(r, 0, sizeof *r);
}
