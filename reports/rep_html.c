/*
 * rep_html.c - one self-contained HTML page for the kernel author: the summary tables of the
 * Markdown report and four inline SVG charts (H1 ratio distribution per dtype/backend, max
 * error against Lk, against W, and the dtype error ratios), then every row. No script and
 * no external asset, so the file can be attached to a CI run and opened anywhere.
 */
#include <math.h>
#include <stdlib.h>

#include "reports/rep_internal.h"

#define LABEL_LEN (REP_NAME_LEN + 24)

static void put_num(FILE *f, double x)
{
    char buf[32];
    rep_fmt_num(buf, sizeof buf, x);
    fputs(buf, f);
}

static void group_label(char *buf, size_t cap, const rep_group *g)
{
    snprintf(buf, cap, "%s/%s", fc_dtype_name(g->dtype), g->backend);
}

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
    fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
          "<title>flexcheck tolerance report</title>\n<style>\n"
          "body{font-family:sans-serif;margin:2em;max-width:1100px}\n"
          "table{border-collapse:collapse;margin:1em 0}\n"
          "td,th{border:1px solid #ccc;padding:2px 6px;font-size:13px}\n"
          "td.n{text-align:right}\n.fail{background:#fdd}\n.error{background:#fec}\n.skip{background:#eee}\n"
          "table.run th{text-align:left}\n"
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
            put_num(f, st[i]);
            fputs("</td>", f);
        }
        fprintf(f, "<td class=\"n\">%zu</td><td class=\"n\">%zu</td></tr>\n", g->s1_flags,
                g->s2_flags);
    }
    fputs("</table>\n", f);
}

static fc_status chart_h1(FILE *f, const rep_summary *s, fc_err *err)
{
    rep_strip *st = calloc(s->ngroups + 1, sizeof *st);
    char (*lab)[LABEL_LEN] = calloc(s->ngroups + 1, sizeof *lab);
    if (!st || !lab) {
        free(st);
        free(lab);
        return fc_errf(err, FC_ENOMEM, "HTML report: out of memory");
    }
    for (size_t k = 0; k < s->ngroups; k++) {
        group_label(lab[k], LABEL_LEN, &s->groups[k]);
        st[k] = (rep_strip){.label = lab[k], .v = s->groups[k].h1, .n = s->groups[k].judged};
    }
    fputs("<h2>H1 ratio distribution</h2>\n<p>One dot per row; the dashed line is the limit "
          "(1). Open circles lie beyond the axis (shown at its end).</p>\n", f);
    rep_svg_strips(f, "H1 ratio per dtype and backend", "max|O - O_gold| / (c e_lp_max + floor)",
                   st, s->ngroups, 0, 2, 0, 1);
    free(st);
    free(lab);
    return FC_OK;
}

static fc_status chart_axis(FILE *f, const rep_summary *s, const rep_axis *a, const char *what,
                            fc_err *err)
{
    fprintf(f, "<h2>Max error against %s</h2>\n", what);
    if (!a->nvals) {
        fputs("<p>No rows.</p>\n", f);
        return FC_OK;
    }
    size_t ng = s->ngroups;
    rep_series *se = calloc(ng + 1, sizeof *se);
    char (*lab)[LABEL_LEN] = calloc(ng + 1, sizeof *lab);
    double *x = malloc(a->nvals * sizeof *x), *y = malloc((a->nvals * ng + 1) * sizeof *y);
    fc_status st = FC_OK;
    if (!se || !lab || !x || !y) {
        st = fc_errf(err, FC_ENOMEM, "HTML report: out of memory");
        goto cleanup;
    }
    for (size_t v = 0; v < a->nvals; v++) {
        x[v] = a->vals[v];
        for (size_t k = 0; k < ng; k++)
            y[k * a->nvals + v] = a->cell[v * ng + k];
    }
    for (size_t k = 0; k < ng; k++) {
        group_label(lab[k], LABEL_LEN, &s->groups[k]);
        se[k] = (rep_series){.label = lab[k], .x = x, .y = y + k * a->nvals, .n = a->nvals};
    }
    char title[64];
    snprintf(title, sizeof title, "max|err| against %s", what);
    rep_svg_lines(f, title, what, "max|O - O_gold|", se, ng);
cleanup:
    free(se);
    free(lab);
    free(x);
    free(y);
    return st;
}

static fc_status chart_pairs(FILE *f, const rep_summary *s, fc_err *err)
{
    fputs("<h2>Error ratios across dtypes</h2>\n", f);
    if (!s->npairs) {
        fputs("<p>No case ran in both a low-precision dtype and float32.</p>\n", f);
        return FC_OK;
    }
    rep_strip *st = calloc(s->npairs, sizeof *st);
    char (*lab)[LABEL_LEN] = calloc(s->npairs, sizeof *lab);
    if (!st || !lab) {
        free(st);
        free(lab);
        return fc_errf(err, FC_ENOMEM, "HTML report: out of memory");
    }
    double mn = INFINITY, mx = 0;
    fputs("<table>\n<tr><th>backend</th><th>ratio</th><th>pairs</th><th>median</th><th>max</th>"
          "<th>float32 error 0</th></tr>\n", f);
    for (size_t k = 0; k < s->npairs; k++) {
        const rep_pairs *p = &s->pairs[k];
        snprintf(lab[k], LABEL_LEN, "%s/float32 %s", fc_dtype_name(p->lp), p->backend);
        st[k] = (rep_strip){.label = lab[k], .v = p->ratio, .n = p->n};
        for (size_t i = 0; i < p->n; i++)
            if (p->ratio[i] > 0 && isfinite(p->ratio[i])) {
                mn = fmin(mn, p->ratio[i]);
                mx = fmax(mx, p->ratio[i]);
            }
        fputs("<tr><td>", f);
        rep_put_xml(f, p->backend);
        fprintf(f, "</td><td>%s/float32</td><td class=\"n\">%zu</td><td class=\"n\">",
                fc_dtype_name(p->lp), p->n);
        put_num(f, p->median);
        fputs("</td><td class=\"n\">", f);
        put_num(f, p->max);
        fprintf(f, "</td><td class=\"n\">%zu</td></tr>\n", p->zero_ref);
    }
    fputs("</table>\n", f);
    double lo = mn <= mx ? pow(10, floor(log10(mn))) : 1, hi = mn <= mx ? pow(10, ceil(log10(mx))) : 10;
    if (hi <= lo)
        hi = lo * 10;
    rep_svg_strips(f, "max|err| ratio to float32, same case", "ratio (log scale)", st, s->npairs,
                   lo, hi, 1, NAN);
    free(st);
    free(lab);
    return FC_OK;
}

static void write_rows(FILE *f, const rep_row *rows, size_t n)
{
    fputs("<h2>Rows</h2>\n<table>\n<tr><th>case</th><th>dtype</th><th>backend</th>"
          "<th>builder</th><th>Lq</th><th>Lk</th><th>W</th><th>max|err|</th><th>H1 ratio</th>"
          "<th>NMSE</th><th>LSE err</th><th>gates</th><th>verdict</th></tr>\n", f);
    for (size_t i = 0; i < n; i++) {
        const rep_row *r = &rows[i];
        fprintf(f, "<tr class=\"%s\"><td>", rep_outcome_name(r->outcome));
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
        for (int k = 0; k < 4; k++) {
            fputs("<td class=\"n\">", f);
            put_num(f, m[k]);
            fputs("</td>", f);
        }
        fputs("<td><code>", f);
        rep_put_xml(f, r->gates);
        fputs("</code></td><td>", f);
        rep_put_xml(f, r->outcome == REP_ROW_PASS ? "pass" : r->reason);
        if (r->explained[0]) { /* the diagnosis (diag/) */
            fputs("<br><small>explained by: ", f);
            rep_put_xml(f, r->explained);
            fputs("</small>", f);
        }
        fputs("</td></tr>\n", f);
    }
    fputs("</table>\n", f);
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
    st = chart_h1(f, &s, err);
    if (st == FC_OK)
        st = chart_axis(f, &s, &s.by_lk, "Lk", err);
    if (st == FC_OK)
        st = chart_axis(f, &s, &s.by_w, "W", err);
    if (st == FC_OK)
        st = chart_pairs(f, &s, err);
    if (st == FC_OK) {
        write_rows(f, rows, n);
        fputs("<p>Gates column: H6 H3 H4 H1 H2 H5 H7, P pass, F fail, - not run.</p>\n"
              "</body>\n</html>\n", f);
    }
    rep_summary_free(&s);
    if (st == FC_OK && ferror(f))
        st = fc_errf(err, FC_EIO, "HTML report: write failed");
    return st;
}
