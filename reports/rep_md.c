/*
 * rep_md.c - the Markdown summary: the run identity, totals, per dtype and backend the
 * pass/fail counts and the H1 ratio distribution, the failing rows with their first failing
 * gate, the H1 ratio against Lk per mask family, max|err| against Lk and against W, and the
 * fp16/fp32 and bf16/fp32 error ratios.
 */
#include <math.h>

#include "reports/rep_internal.h"

static void group_label(FILE *f, const rep_group *g)
{
    fputs(fc_dtype_name(g->dtype), f);
    fputc('/', f);
    rep_put_md(f, g->backend);
}

/* One line of the run identity's block: "- key: value". */
static void put_run_item(void *ctx, const char *key, const char *value)
{
    FILE *f = ctx;
    fprintf(f, "- %s: ", key);
    rep_put_md(f, value);
    fputc('\n', f);
}

static void write_groups(FILE *f, const rep_summary *s)
{
    fputs("## Per dtype and backend\n\n"
          "| dtype | backend | rows | pass | fail | error | skip | outside | H1 median | H1 p95 "
          "| H1 max | S1 flagged | S2 flagged |\n"
          "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n", f);
    for (size_t k = 0; k < s->ngroups; k++) {
        const rep_group *g = &s->groups[k];
        fprintf(f, "| %s | ", fc_dtype_name(g->dtype));
        rep_put_md(f, g->backend);
        fprintf(f, " | %zu | %zu | %zu | %zu | %zu | %zu | ", g->rows, g->pass, g->fail, g->error,
                g->skip, g->outside);
        rep_put_num(f, g->h1_median);
        fputs(" | ", f);
        rep_put_num(f, g->h1_p95);
        fputs(" | ", f);
        rep_put_num(f, g->h1_max);
        fprintf(f, " | %zu | %zu |\n", g->s1_flags, g->s2_flags);
    }
    fputc('\n', f);
}

/* Which rows a listing shows: failures and errors together, the skipped ones, or those
 * outside the contract. */
typedef enum listing { LIST_FAILED, LIST_SKIPPED, LIST_OUTSIDE } listing;

static int listed(const rep_row *r, listing which)
{
    switch (which) {
    case LIST_FAILED: return rep_row_failed(r);
    case LIST_SKIPPED: return r->outcome == REP_ROW_SKIP;
    case LIST_OUTSIDE: return r->outcome == REP_ROW_OUTSIDE;
    }
    return 0;
}

static void write_listed(FILE *f, const rep_row *rows, size_t n, listing which,
                         const char *title)
{
    fprintf(f, "## %s\n\n"
               "| case | dtype | backend | builder | gate | reason | explained by |\n"
               "|---|---|---|---|---|---|---|\n",
            title);
    for (size_t i = 0; i < n; i++) {
        const rep_row *r = &rows[i];
        if (!listed(r, which))
            continue;
        fputs("| ", f);
        rep_put_md(f, r->case_id);
        fprintf(f, " | %s | ", fc_dtype_name(r->dtype));
        char lab[REP_NAME_LEN];
        rep_row_backend_label(r, lab);
        rep_put_md(f, lab);
        if (r->producer[0]) { /* another producer's output: say whose */
            fputs(" (", f);
            rep_put_md(f, r->producer);
            fputc(')', f);
        }
        fputs(" | ", f);
        rep_put_md(f, r->builder);
        fprintf(f, " | %s | ",
                r->outcome == REP_ROW_FAIL ? r->first_fail
                                           : rep_outcome_name(r->outcome));
        rep_put_md(f, r->reason);
        fputs(" | ", f);
        rep_put_md(f, r->explained);
        fputs(" |\n", f);
    }
    fputc('\n', f);
}

static void write_axis(FILE *f, const rep_summary *s, const rep_axis *a, const char *title,
                       const char *axis)
{
    fprintf(f, "## %s\n\n", title);
    if (!a->nvals) {
        fputs("No rows.\n\n", f);
        return;
    }
    fprintf(f, "max|err| of the rows with each %s.\n\n| %s |", axis, axis);
    for (size_t k = 0; k < s->ngroups; k++) {
        fputc(' ', f);
        group_label(f, &s->groups[k]);
        fputs(" |", f);
    }
    fputs("\n|---:|", f);
    for (size_t k = 0; k < s->ngroups; k++)
        fputs("---:|", f);
    fputc('\n', f);
    for (size_t v = 0; v < a->nvals; v++) {
        fprintf(f, "| %ld |", (long)a->vals[v]);
        for (size_t k = 0; k < s->ngroups; k++) {
            fputc(' ', f);
            rep_put_num(f, a->cell[v * s->ngroups + k]);
            fputs(" |", f);
        }
        fputc('\n', f);
    }
    fputc('\n', f);
}

/* Per dtype and backend, one line per power-of-two Lk bucket with a measured row, one column
 * per mask family the group has: "median / max (rows)" of the H1 ratio. */
static void write_h1_by_lk(FILE *f, const rep_summary *s)
{
    fputs("## H1 ratio against Lk\n\n"
          "Per dtype and backend, the H1 ratio of the rows where H1 ran, by Lk (power-of-two "
          "buckets) and mask family (docs/tolerance.md): each cell median / max (rows); the "
          "limit is 1.\n\n", f);
    if (!s->ngroups)
        fputs("No rows.\n\n", f);
    for (size_t k = 0; k < s->ngroups; k++) {
        const rep_group *g = &s->groups[k];
        fputs("### ", f);
        group_label(f, g);
        fputs("\n\n", f);
        if (!g->measured) {
            fputs("No row where H1 ran.\n\n", f);
            continue;
        }
        int has_fam[REP_NFAMILIES], has_bucket[REP_NBUCKETS];
        rep_h1cell_present(g, has_fam, has_bucket);
        fputs("| Lk |", f);
        for (int fam = 0; fam < REP_NFAMILIES; fam++)
            if (has_fam[fam])
                fprintf(f, " %s |", rep_family_name((rep_family)fam));
        fputs("\n|---:|", f);
        for (int fam = 0; fam < REP_NFAMILIES; fam++)
            if (has_fam[fam])
                fputs("---:|", f);
        fputc('\n', f);
        for (int b = 0; b < REP_NBUCKETS; b++) {
            if (!has_bucket[b])
                continue;
            char lab[48];
            rep_lk_bucket_label(lab, sizeof lab, b);
            fprintf(f, "| %s |", lab);
            for (int fam = 0; fam < REP_NFAMILIES; fam++) {
                if (!has_fam[fam])
                    continue;
                char cell[96];
                rep_h1cell_text(cell, sizeof cell, &g->by_lk[b * REP_NFAMILIES + fam]);
                fprintf(f, " %s |", cell);
            }
            fputc('\n', f);
        }
        fputc('\n', f);
    }
}

static void write_pairs(FILE *f, const rep_summary *s)
{
    fputs("## Error ratios across dtypes\n\n", f);
    if (!s->npairs) {
        fputs("No case ran in both a low-precision dtype and float32.\n\n", f);
        return;
    }
    fputs("max|err| of a case in the low-precision dtype over max|err| of the same case "
          "(id, backend, builder) in float32.\n\n"
          "| backend | ratio | pairs | median | max | float32 error 0 |\n"
          "|---|---|---:|---:|---:|---:|\n", f);
    for (size_t k = 0; k < s->npairs; k++) {
        const rep_pairs *p = &s->pairs[k];
        fputs("| ", f);
        rep_put_md(f, p->backend);
        fprintf(f, " | %s/float32 | %zu | ", fc_dtype_name(p->lp), p->n);
        rep_put_num(f, p->median);
        fputs(" | ", f);
        rep_put_num(f, p->max);
        fprintf(f, " | %zu |\n", p->zero_ref);
    }
    fputc('\n', f);
}

fc_status rep_write_markdown(FILE *f, const rep_set *set, fc_err *err)
{
    const rep_row *rows = set->rows;
    size_t n = set->n;
    rep_summary s;
    fc_status st = rep_summarize(rows, n, &s, err);
    if (st != FC_OK)
        return st;
    fputs("# flexcheck tolerance report\n\n", f);
    if (set->run) { /* which run this is, before what it found */
        rep_run_each(set->run, put_run_item, f);
        fputc('\n', f);
    }
    int strict = set->run && set->run->strict;
    fprintf(f, "**%s**: %zu rows, %zu pass, %zu fail, %zu error, %zu skipped",
            rep_set_failed(set, &s) ? "FAIL" : "PASS", s.rows, s.pass, s.fail, s.error, s.skip);
    if (s.outside) /* apart from pass and fail: docs/tolerance.md */
        fprintf(f, ", %zu outside the contract%s", s.outside,
                strict ? " (failing: the run is --strict)" : "");
    fputs(".\n\n", f);
    rep_put_gate_order(f, set, rep_put_md);
    fputs("\n\n", f);
    write_groups(f, &s);
    if (s.fail || s.error)
        write_listed(f, rows, n, LIST_FAILED, "Failures and errors");
    if (s.skip)
        write_listed(f, rows, n, LIST_SKIPPED, "Skipped");
    if (s.outside)
        write_listed(f, rows, n, LIST_OUTSIDE,
                     strict ? "Outside the contract (failing: the run is --strict)"
                            : "Outside the contract (H1 and H2 not run)");
    write_h1_by_lk(f, &s);
    write_axis(f, &s, &s.by_lk, "Max error against Lk", "Lk");
    write_axis(f, &s, &s.by_w, "Max error against W", "W");
    write_pairs(f, &s);
    rep_summary_free(&s);
    return ferror(f) ? fc_errf(err, FC_EIO, "markdown report: write failed") : FC_OK;
}
