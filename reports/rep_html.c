/*
 * rep_html.c - one self-contained HTML page for the kernel author: the summary tables of the
 * Markdown report, the inline SVG charts (rep_html_charts.c: the H1 ratio distribution and the
 * H1 ratio against Lk per dtype/backend, max|err| against Lk and against W, the dtype error
 * ratios), then every row in a table, failed and outside-the-contract rows first with their
 * diagnosis. One small inline script sorts that table by a clicked column; nothing is loaded
 * from anywhere, so the file can be attached to a CI run and opened offline, and it reads the
 * same without script.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "reports/rep_internal.h"

/* Sorts the rows table by the column whose header is clicked (again: reversed; # gives the
 * first order back). Keys come from a cell's data-v, else its text; a missing number sorts
 * last either way and ties keep the order by #. Without script the table keeps the order it
 * was written in, failures first. The Content-Security-Policy in the head allows this script
 * by its hash (SORT_SCRIPT_SHA256) and no other, so a row string that ever escaped its
 * escaping could still run nothing. */
static const char SORT_SCRIPT[] =
    "\n(function () {\n"
    "  var t = document.getElementById('rows-table');\n"
    "  if (!t) return;\n"
    "  var heads = t.tHead.rows[0].cells, body = t.tBodies[0];\n"
    "  function key(tr, c, num) {\n"
    "    var td = tr.cells[c];\n"
    "    var v = td.hasAttribute('data-v') ? td.getAttribute('data-v') : td.textContent;\n"
    "    return num ? (v === '' ? NaN : Number(v)) : v;\n"
    "  }\n"
    "  function sortBy(c) {\n"
    "    var num = heads[c].getAttribute('data-type') === 'num';\n"
    "    var dir = heads[c].getAttribute('aria-sort') === 'ascending' ? -1 : 1;\n"
    "    var rows = Array.prototype.slice.call(body.rows);\n"
    "    rows.sort(function (a, b) {\n"
    "      var x = key(a, c, num), y = key(b, c, num), d;\n"
    "      if (num && (isNaN(x) || isNaN(y))) d = isNaN(x) - isNaN(y);\n"
    "      else d = dir * (x < y ? -1 : x > y ? 1 : 0);\n"
    "      return d || key(a, 0, true) - key(b, 0, true);\n"
    "    });\n"
    "    rows.forEach(function (r) { body.appendChild(r); });\n"
    "    for (var i = 0; i < heads.length; i++)\n"
    "      heads[i].setAttribute('aria-sort',\n"
    "                            i !== c ? 'none' : dir > 0 ? 'ascending' : 'descending');\n"
    "  }\n"
    "  Array.prototype.forEach.call(heads, function (th, c) {\n"
    "    th.tabIndex = 0;\n"
    "    th.classList.add('sortable');\n"
    "    th.addEventListener('click', function () { sortBy(c); });\n"
    "    th.addEventListener('keydown', function (e) {\n"
    "      if (e.key === 'Enter' || e.key === ' ') { e.preventDefault(); sortBy(c); }\n"
    "    });\n"
    "  });\n"
    "  document.getElementById('sort-hint').hidden = false;\n"
    "})();\n";
/* base64 of SHA-256 over SORT_SCRIPT's bytes (CSP Level 2 hash source);
 * python/tests/test_html_report.py recomputes it from the page, so a changed script that
 * forgot it fails there instead of silently not running. */
#define SORT_SCRIPT_SHA256 "1v6Yz1y4hDI7NlqDubJfPSjWszz1ekkPlgnWAx3nMHk="

/* One row of the run identity's table. */
static void put_run_item(void *ctx, const char *key, const char *value)
{
    FILE *f = ctx;
    fprintf(f, "<tr><th>%s</th><td>", key);
    rep_put_xml(f, value);
    fputs("</td></tr>\n", f);
}

static void write_head(FILE *f, const rep_set *set, const rep_summary *s)
{
    /* Nothing may be fetched (the page must read the same offline, from a CI artifact) and
     * no script runs but the table sort, named by its hash. */
    fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
          "<title>flexcheck tolerance report</title>\n" /* up to here rep_file.c's signature */
          "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
          "style-src 'unsafe-inline'; script-src 'sha256-" SORT_SCRIPT_SHA256 "'\">\n"
          "<style>\n"
          "body{font-family:sans-serif;margin:2em;max-width:1200px}\n"
          "table{border-collapse:collapse;margin:1em 0}\n"
          "td,th{border:1px solid #ccc;padding:2px 6px;font-size:13px}\n"
          "td.n{text-align:right}\n.fail{background:#fdd}\n.error{background:#fec}\n"
          ".skip{background:#eee}\n.outside-contract{background:#fff3c4}\n"
          "table.run th{text-align:left}\n"
          "table.rows td{font-size:12px;vertical-align:top}\n"
          "table.rows td.why{max-width:30em}\ntable.rows code{white-space:nowrap}\n"
          "tr.fail td.v,tr.error td.v{color:#a00}\ntr.outside-contract td.v{color:#850}\n"
          "tr.pass td.v{color:#161}\n.diag{color:#333;font-style:italic}\n"
          "th.sortable{cursor:pointer;user-select:none}\n"
          "th[aria-sort=ascending]::after{content:\" \\25B2\"}\n"
          "th[aria-sort=descending]::after{content:\" \\25BC\"}\n"
          "</style>\n</head>\n<body>\n<h1>flexcheck tolerance report</h1>\n", f);
    if (set->run) { /* which run this is, before what it found */
        fputs("<table class=\"run\">\n", f);
        rep_run_each(set->run, put_run_item, f);
        fputs("</table>\n", f);
    }
    fprintf(f, "<p><b class=\"%s\">%s</b>: %zu rows, %zu pass, %zu fail, %zu error, "
               "%zu skipped, %zu outside the contract.</p>\n",
            rep_set_failed(set, s) ? "fail" : "pass", rep_set_failed(set, s) ? "FAIL" : "PASS",
            s->rows, s->pass, s->fail, s->error, s->skip, s->outside);
    fputs("<p>", f);
    rep_put_gate_order(f, set, rep_put_xml);
    fputs("</p>\n", f);
}

static void write_groups(FILE *f, const rep_summary *s)
{
    fputs("<h2>Per dtype and backend</h2>\n<table>\n<tr><th>dtype</th><th>backend</th>"
          "<th>rows</th><th>pass</th><th>fail</th><th>error</th><th>skip</th><th>outside</th>"
          "<th>H1 median</th>"
          "<th>H1 p95</th><th>H1 max</th><th>S1 flagged</th><th>S2 flagged</th></tr>\n", f);
    for (size_t k = 0; k < s->ngroups; k++) {
        const rep_group *g = &s->groups[k];
        fprintf(f, "<tr%s><td>%s</td><td>", g->fail || g->error ? " class=\"fail\"" : "",
                fc_dtype_name(g->dtype));
        rep_put_xml(f, g->backend);
        fprintf(f, "</td><td class=\"n\">%zu</td><td class=\"n\">%zu</td><td class=\"n\">%zu"
                   "</td><td class=\"n\">%zu</td><td class=\"n\">%zu</td>"
                   "<td class=\"n\">%zu</td>",
                g->rows, g->pass, g->fail, g->error, g->skip, g->outside);
        const double st[3] = {g->h1_median, g->h1_p95, g->h1_max};
        for (int i = 0; i < 3; i++) {
            fputs("<td class=\"n\">", f);
            rep_put_num(f, st[i]);
            fputs("</td>", f);
        }
        fprintf(f, "<td class=\"n\">%zu</td><td class=\"n\">%zu</td></tr>\n", g->s1_flags,
                g->s2_flags);
    }
    fputs("</table>\n", f);
}

/* The rows table's first order: what needs the reader first, on top. */
static int verdict_rank(rep_outcome o)
{
    switch (o) {
    case REP_ROW_FAIL: return 0;
    case REP_ROW_ERROR: return 1;
    case REP_ROW_OUTSIDE: return 2;
    case REP_ROW_SKIP: return 3;
    case REP_ROW_PASS: return 4;
    }
    return 1; /* an outcome this writer does not know: with the errors, never hidden */
}

typedef struct ranked {
    int rank;
    size_t i; /* the row's index in the set: ties keep the run's order */
} ranked;

static int cmp_ranked(const void *a, const void *b)
{
    const ranked *x = a, *y = b;
    if (x->rank != y->rank)
        return x->rank < y->rank ? -1 : 1;
    return (x->i > y->i) - (x->i < y->i);
}

/* A numeric cell: the short number shown, the exact one in data-v for the sort (empty for a
 * missing value, which sorts last either way). */
static void num_cell(FILE *f, double x)
{
    fputs("<td class=\"n\" data-v=\"", f);
    if (isinf(x))
        fputs(x > 0 ? "Infinity" : "-Infinity", f);
    else if (!isnan(x))
        fprintf(f, "%.17g", x);
    fputs("\">", f);
    rep_put_num(f, x);
    fputs("</td>", f);
}

/* The verdict as text and colour (the row's class), so that it reads without colour too. */
static const char *verdict_text(rep_outcome o, int strict)
{
    switch (o) {
    case REP_ROW_FAIL: return "FAIL";
    case REP_ROW_ERROR: return "ERROR";
    case REP_ROW_OUTSIDE: return strict ? "OUTSIDE the contract, failing (--strict)"
                                        : "OUTSIDE the contract";
    case REP_ROW_SKIP: return "skipped";
    case REP_ROW_PASS: return "pass";
    }
    return "?";
}

static void write_row(FILE *f, const rep_row *r, size_t pos, int strict)
{
    fprintf(f, "<tr class=\"%s\"><td class=\"n\">%zu</td><td class=\"v\" data-v=\"%d\">"
               "<b>%s</b></td><td>",
            rep_outcome_name(r->outcome), pos, verdict_rank(r->outcome),
            verdict_text(r->outcome, strict));
    rep_put_xml(f, r->case_id);
    fprintf(f, "</td><td>%s</td><td>", fc_dtype_name(r->dtype));
    char lab[REP_NAME_LEN];
    rep_row_backend_label(r, lab);
    rep_put_xml(f, lab);
    if (r->producer[0]) { /* another producer's output: say whose */
        fputs("<br><small>", f);
        rep_put_xml(f, r->producer);
        fputs("</small>", f);
    }
    fputs("</td><td>", f);
    rep_put_xml(f, r->builder);
    fprintf(f, "</td><td class=\"n\">%ld</td><td class=\"n\">%ld</td><td class=\"n\">%ld</td>",
            (long)r->lq, (long)r->lk, (long)r->mask.sliding_window);
    const double m[4] = {r->max_err, r->h1_ratio, r->nmse, r->lse_err};
    for (int k = 0; k < 4; k++)
        num_cell(f, m[k]);
    fputs("<td><code>", f);
    rep_put_xml(f, r->gates);
    fputs("</code></td><td class=\"why\">", f);
    if (r->outcome != REP_ROW_PASS)
        rep_put_xml(f, r->reason);
    if (r->explained[0]) { /* the diagnosis (diag/): which named bug explains the failure */
        fputs("<br><span class=\"diag\">diagnosis: ", f);
        rep_put_xml(f, r->explained);
        fputs("</span>", f);
    } else if (r->outcome == REP_ROW_FAIL) {
        fputs("<br><span class=\"diag\">diagnosis: none recorded</span>", f);
    }
    fputs("</td></tr>\n", f);
}

static const struct {
    const char *name;
    int num; /* sorted as numbers */
} row_cols[] = {
    {"#", 1},      {"verdict", 1}, {"case", 0},    {"dtype", 0},    {"backend", 0},
    {"builder", 0}, {"Lq", 1},     {"Lk", 1},      {"W", 1},        {"max|err|", 1},
    {"H1 ratio", 1}, {"NMSE", 1},  {"LSE err", 1}, {"gates", 0},    {"reason and diagnosis", 0},
};

static fc_status write_rows(FILE *f, const rep_set *set, const rep_summary *s, fc_err *err)
{
    const size_t n = set->n;
    ranked *order = malloc((n ? n : 1) * sizeof *order);
    if (!order)
        return fc_errf(err, FC_ENOMEM, "HTML report: out of memory");
    for (size_t i = 0; i < n; i++)
        order[i] = (ranked){verdict_rank(set->rows[i].outcome), i};
    qsort(order, n, sizeof *order, cmp_ranked);
    int strict = set->run && set->run->strict;
    fprintf(f, "<h2>Rows</h2>\n<p>%zu rows", n);
    if (s->fail || s->error || s->outside)
        fprintf(f, ": failed (%zu), not judged (error, %zu) and outside the contract (%zu%s) "
                   "first, each with its reason and diagnosis; then skipped (%zu) and passed "
                   "(%zu).</p>\n",
                s->fail, s->error, s->outside, strict ? ", failing: the run is --strict" : "",
                s->skip, s->pass);
    else
        fprintf(f, ", none failed, none outside the contract: %zu passed, %zu skipped.</p>\n",
                s->pass, s->skip);
    fputs("<p id=\"sort-hint\" hidden>Click a column header to sort by it, again to reverse; "
          "# gives this order back.</p>\n<table id=\"rows-table\" class=\"rows\">\n"
          "<thead><tr>", f);
    for (size_t c = 0; c < sizeof row_cols / sizeof row_cols[0]; c++) {
        fputs(row_cols[c].num ? "<th data-type=\"num\"" : "<th", f);
        fputs(c == 0 ? " aria-sort=\"ascending\">" : ">", f);
        rep_put_xml(f, row_cols[c].name);
        fputs("</th>", f);
    }
    fputs("</tr></thead>\n<tbody>\n", f);
    for (size_t k = 0; k < n; k++)
        write_row(f, &set->rows[order[k].i], k + 1, strict);
    fputs("</tbody>\n</table>\n<p>Gates column: H6 H3 H4 H1 H2 H5 H7, P pass, F fail, - not "
          "run.</p>\n<script>", f);
    fputs(SORT_SCRIPT, f);
    fputs("</script>\n", f);
    free(order);
    return FC_OK;
}

fc_status rep_write_html(FILE *f, const rep_set *set, fc_err *err)
{
    const rep_row *rows = set->rows;
    size_t n = set->n;
    rep_summary s;
    fc_status st = rep_summarize(rows, n, &s, err);
    if (st != FC_OK)
        return st;
    write_head(f, set, &s);
    write_groups(f, &s);
    st = rep_html_charts(f, &s, rows, n, err);
    if (st == FC_OK)
        st = write_rows(f, set, &s, err);
    if (st == FC_OK)
        fputs("</body>\n</html>\n", f);
    rep_summary_free(&s);
    if (st == FC_OK && ferror(f))
        st = fc_errf(err, FC_EIO, "HTML report: write failed");
    return st;
}
