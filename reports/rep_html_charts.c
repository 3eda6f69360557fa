/*
 * rep_html_charts.c - the charts of report.html (rep_html.c writes the rest of the page): the
 * H1 ratio distribution per dtype and backend, the H1 ratio against Lk (one panel per dtype and
 * backend on shared axes, markers by mask family, each panel's bucket table folded under it),
 * max|err| against Lk and against W, and the dtype error ratios. Inline SVG (rep_svg.c).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "reports/rep_internal.h"

#define LABEL_LEN (REP_NAME_LEN + 24)
#define TIP_LEN (REP_ID_LEN + 2 * REP_NAME_LEN + 96)

static void group_label(char *buf, size_t cap, const rep_group *g)
{
    snprintf(buf, cap, "%s/%s", fc_dtype_name(g->dtype), g->backend);
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
        /* h1 holds the measured rows' ratios only: a judged row whose H1 never ran (a failed
         * outside-contract case) has no dot */
        st[k] = (rep_strip){.label = lab[k], .v = s->groups[k].h1, .n = s->groups[k].measured};
    }
    fputs("<h2>H1 ratio distribution</h2>\n<p>One dot per row; the dashed line is the limit "
          "(1). Open circles lie beyond the axis (shown at its end).</p>\n", f);
    rep_svg_strips(f, "chart-h1", "H1 ratio per dtype and backend",
                   "max|O - O_gold| / (c e_lp_max + floor)", st, s->ngroups, 0, 2, 0, 1);
    free(st);
    free(lab);
    return FC_OK;
}

/* The bucket table of one group, as summary.md has it (rep_md.c), folded under its panel. */
static void h1_lk_table(FILE *f, const rep_group *g)
{
    int has_fam[REP_NFAMILIES], has_bucket[REP_NBUCKETS];
    rep_h1cell_present(g, has_fam, has_bucket);
    fputs("<details><summary>H1 ratio by Lk bucket and family: median / max (rows)</summary>\n"
          "<table class=\"h1lk\">\n<tr><th>Lk</th>", f);
    for (int fam = 0; fam < REP_NFAMILIES; fam++)
        if (has_fam[fam])
            fprintf(f, "<th>%s</th>", rep_family_name((rep_family)fam));
    fputs("</tr>\n", f);
    for (int b = 0; b < REP_NBUCKETS; b++) {
        if (!has_bucket[b])
            continue;
        char lab[48];
        rep_lk_bucket_label(lab, sizeof lab, b);
        fprintf(f, "<tr><td class=\"n\">%s</td>", lab);
        for (int fam = 0; fam < REP_NFAMILIES; fam++) {
            if (!has_fam[fam])
                continue;
            char cell[96];
            rep_h1cell_text(cell, sizeof cell, &g->by_lk[b * REP_NFAMILIES + fam]);
            fprintf(f, "<td class=\"n\">%s</td>", cell);
        }
        fputs("</tr>\n", f);
    }
    fputs("</table>\n</details>\n", f);
}

/* H1 ratio against Lk: a panel per group on axes every panel shares, a marker per measured
 * row; a group with none gets a line instead. */
static fc_status chart_h1_lk(FILE *f, const rep_summary *s, const rep_row *rows, size_t n,
                             fc_err *err)
{
    const size_t ng = s->ngroups;
    size_t *start = calloc(ng + 2, sizeof *start), *fill = calloc(ng + 1, sizeof *fill);
    rep_lk_point *pt = malloc((n + 1) * sizeof *pt);
    char (*tip)[TIP_LEN] = malloc((n + 1) * sizeof *tip);
    if (!start || !fill || !pt || !tip) {
        free(start);
        free(fill);
        free(pt);
        free(tip);
        return fc_errf(err, FC_ENOMEM, "HTML report: out of memory");
    }
    for (size_t i = 0; i < n; i++)
        if (rep_row_measured(&rows[i]))
            start[rep_group_of(s, &rows[i]) + 1]++;
    for (size_t k = 0; k <= ng; k++)
        start[k + 1] += start[k];
    for (size_t i = 0; i < n; i++) {
        const rep_row *r = &rows[i];
        if (!rep_row_measured(r))
            continue;
        size_t k = rep_group_of(s, r), j = start[k] + fill[k]++;
        char num[32], blab[REP_NAME_LEN];
        rep_fmt_num(num, sizeof num, isnan(r->h1_ratio) ? INFINITY : r->h1_ratio);
        rep_row_backend_label(r, blab);
        snprintf(tip[j], TIP_LEN, "%s, %s, %s %s: Lk %ld, H1 ratio %s, %s, %s", r->case_id,
                 r->builder, fc_dtype_name(r->dtype), blab, (long)r->lk, num,
                 rep_family_name(rep_row_family(r)), rep_outcome_name(r->outcome));
        pt[j] = (rep_lk_point){(double)r->lk, r->h1_ratio, rep_row_family(r),
                               r->outcome != REP_ROW_PASS, tip[j]};
    }
    rep_lk_axes ax;
    rep_svg_lk_axes(pt, start[ng], &ax);
    fputs("<h2>H1 ratio against Lk</h2>\n<p>Does the error grow with length? One panel per "
          "dtype and backend, all on the same axes; one marker per row where H1 ran, shaped and "
          "coloured by mask family (packed, chunked, sliding, bidir window, causal, none: the "
          "first that holds). An outline with an x is a failed row; the dashed line is the "
          "limit 1; a ringed marker stands in a band beyond its axis (Lk 0, a ratio of 0 or "
          "inf). Under each panel, its rows by power-of-two Lk bucket.</p>\n", f);
    for (size_t k = 0; k < ng; k++) {
        const rep_group *g = &s->groups[k];
        char lab[LABEL_LEN], title[LABEL_LEN + 64], id[32];
        group_label(lab, sizeof lab, g);
        if (!g->measured) {
            fputs("<p class=\"h1lk-none\">", f);
            rep_put_xml(f, lab);
            fputs(": no row where H1 ran.</p>\n", f);
            continue;
        }
        snprintf(title, sizeof title, "H1 ratio against Lk: %s (%zu rows)", lab, g->measured);
        snprintf(id, sizeof id, "chart-h1lk-%zu", k);
        rep_svg_h1_lk(f, id, title, pt + start[k], start[k + 1] - start[k], &ax);
        h1_lk_table(f, g);
    }
    free(start);
    free(fill);
    free(pt);
    free(tip);
    return FC_OK;
}

/* A row the error charts show: measured (the rows rep_summary.c's statistics count); against W
 * only a windowed one. */
static int charted(const rep_row *r, int by_window)
{
    return rep_row_measured(r) && (!by_window || r->mask.sliding_window > 0);
}

/* max|err| against Lk or W as a scatter plot, one marker per charted row, one series per
 * dtype and backend: every row its own point, so rows of unrelated cases are never joined. */
static fc_status chart_axis(FILE *f, const rep_summary *s, const rep_row *rows, size_t n,
                            int by_window, fc_err *err)
{
    const char *what = by_window ? "W" : "Lk";
    const size_t ng = s->ngroups;
    size_t *start = calloc(ng + 2, sizeof *start), *fill = calloc(ng + 1, sizeof *fill);
    rep_points *se = calloc(ng + 1, sizeof *se);
    char (*lab)[LABEL_LEN] = calloc(ng + 1, sizeof *lab);
    double *x = malloc((n + 1) * sizeof *x), *y = malloc((n + 1) * sizeof *y);
    unsigned char *failed = malloc(n + 1);
    char (*tipbuf)[TIP_LEN] = malloc((n + 1) * sizeof *tipbuf);
    const char **tip = malloc((n + 1) * sizeof *tip);
    fc_status st = FC_OK;
    if (!start || !fill || !se || !lab || !x || !y || !failed || !tipbuf || !tip) {
        st = fc_errf(err, FC_ENOMEM, "HTML report: out of memory");
        goto cleanup;
    }
    /* Points grouped by series: counts, then each series' first index, then the points. */
    for (size_t i = 0; i < n; i++)
        if (charted(&rows[i], by_window))
            start[rep_group_of(s, &rows[i]) + 1]++;
    for (size_t k = 0; k <= ng; k++)
        start[k + 1] += start[k];
    fprintf(f, "<h2>Max error against %s</h2>\n", what);
    if (!start[ng + 1]) {
        fprintf(f, "<p>No row was measured against the baseline%s.</p>\n",
                by_window ? " with a sliding window" : "");
        goto cleanup;
    }
    for (size_t i = 0; i < n; i++) {
        const rep_row *r = &rows[i];
        if (!charted(r, by_window))
            continue;
        size_t k = rep_group_of(s, r), j = start[k] + fill[k]++;
        char num[32], blab[REP_NAME_LEN];
        x[j] = by_window ? r->mask.sliding_window : r->lk;
        y[j] = r->max_err;
        failed[j] = r->outcome != REP_ROW_PASS;
        rep_fmt_num(num, sizeof num, r->max_err);
        rep_row_backend_label(r, blab);
        snprintf(tipbuf[j], TIP_LEN, "%s, %s, %s %s: %s %.0f, max|err| %s, %s", r->case_id,
                 r->builder, fc_dtype_name(r->dtype), blab, what, x[j], num,
                 rep_outcome_name(r->outcome));
        tip[j] = tipbuf[j];
    }
    /* Every group a series, empty or not, so a group has the same colour in every chart. */
    for (size_t k = 0; k < ng; k++) {
        group_label(lab[k], LABEL_LEN, &s->groups[k]);
        se[k] = (rep_points){.label = lab[k], .x = x + start[k], .y = y + start[k],
                             .failed = failed + start[k], .tip = tip + start[k],
                             .n = start[k + 1] - start[k]};
    }
    fprintf(f, "<p>One marker per row measured against the baseline%s (%zu rows), coloured by "
               "dtype and backend; an x is a failed row. Rows are not joined by lines: rows "
               "of different cases differ in more than %s. Hover a marker for its case.</p>\n",
            by_window ? " with a sliding window" : "", start[ng + 1], what);
    char title[64], id[16];
    snprintf(title, sizeof title, "max|err| against %s, one marker per row", what);
    snprintf(id, sizeof id, "chart-%s", by_window ? "w" : "lk");
    rep_svg_scatter(f, id, title, by_window ? "W (sliding window), log scale" : "Lk, log scale",
                    "max|O - O_gold|, log scale", se, ng);
cleanup:
    free(start);
    free(fill);
    free(se);
    free(lab);
    free(x);
    free(y);
    free(failed);
    free(tipbuf);
    free(tip);
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
        rep_put_num(f, p->median);
        fputs("</td><td class=\"n\">", f);
        rep_put_num(f, p->max);
        fprintf(f, "</td><td class=\"n\">%zu</td></tr>\n", p->zero_ref);
    }
    fputs("</table>\n", f);
    double lo, hi;
    rep_svg_decades(mn, mx, &lo, &hi);
    rep_svg_strips(f, "chart-ratio", "max|err| ratio to float32, same case", "ratio (log scale)",
                   st, s->npairs, lo, hi, 1, NAN);
    free(st);
    free(lab);
    return FC_OK;
}

fc_status rep_html_charts(FILE *f, const rep_summary *s, const rep_row *rows, size_t n,
                          fc_err *err)
{
    fc_status st = chart_h1(f, s, err);
    if (st == FC_OK)
        st = chart_h1_lk(f, s, rows, n, err);
    if (st == FC_OK)
        st = chart_axis(f, s, rows, n, 0, err);
    if (st == FC_OK)
        st = chart_axis(f, s, rows, n, 1, err);
    if (st == FC_OK)
        st = chart_pairs(f, s, err);
    return st;
}
