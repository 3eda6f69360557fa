/*
 * rep_junit.c - JUnit XML for CI systems: one testsuite per matrix group, one testcase per
 * case id (classname = group), so a CI page lists each case once however many dtypes and
 * backends ran it. A case fails when any of its rows failed; the failure message is the first
 * failing row's gate and reason, the body lists every row that did not pass. A case with no
 * failing row but a row that could not be judged is an <error>; a case whose every row was
 * skipped is <skipped> (a case with some judged rows is decided by those); a row outside the
 * contract counts as skipped, or, in a --strict run, as a failure. Each testsuite carries the
 * run identity as its <properties>.
 */
#include <stdlib.h>
#include <string.h>

#include "reports/rep_internal.h"

static const char *group_of(const rep_row *r)
{
    return r->group[0] ? r->group : "flexcheck";
}

/* By group, then case id, then original order (pointers into one array). */
static int cmp_case(const void *a, const void *b)
{
    const rep_row *x = *(const rep_row *const *)a, *y = *(const rep_row *const *)b;
    int c = strcmp(group_of(x), group_of(y));
    if (!c)
        c = strcmp(x->case_id, y->case_id);
    return c ? c : (x > y) - (x < y);
}

static int same_case(const rep_row *a, const rep_row *b)
{
    return !strcmp(group_of(a), group_of(b)) && !strcmp(a->case_id, b->case_id);
}

enum { CASE_PASS, CASE_FAILURE, CASE_ERROR, CASE_SKIPPED };

/* What a case is; *first is the row that decides it. strict: the run's --strict. */
static int case_state(const rep_row *const *r, size_t n, int strict, const rep_row **first)
{
    *first = r[0];
    size_t skipped = 0;
    for (size_t i = 0; i < n; i++) /* outside the contract (H1/H2 not run): shown as skipped */
        skipped += r[i]->outcome == REP_ROW_SKIP || r[i]->outcome == REP_ROW_OUTSIDE;
    for (size_t i = 0; i < n; i++)
        if (r[i]->outcome == REP_ROW_FAIL ||
            (strict && r[i]->outcome == REP_ROW_OUTSIDE)) {
            *first = r[i];
            return CASE_FAILURE;
        }
    for (size_t i = 0; i < n; i++)
        if (r[i]->outcome == REP_ROW_ERROR) {
            *first = r[i];
            return CASE_ERROR;
        }
    return skipped == n ? CASE_SKIPPED : CASE_PASS;
}

static void put_row_line(FILE *f, const rep_row *r)
{
    char lab[REP_NAME_LEN];
    rep_row_backend_label(r, lab);
    fprintf(f, "%s ", fc_dtype_name(r->dtype));
    rep_put_xml(f, lab);
    fputc(' ', f);
    rep_put_xml(f, r->builder);
    fputs(": ", f);
    rep_put_xml(f, r->reason);
    fputc('\n', f);
}

static void write_case(FILE *f, const rep_row *const *r, size_t n, int strict)
{
    const rep_row *first;
    int state = case_state(r, n, strict, &first);
    fputs("    <testcase classname=\"", f);
    rep_put_xml(f, group_of(r[0]));
    fputs("\" name=\"", f);
    rep_put_xml(f, r[0]->case_id);
    fputs(state != CASE_PASS ? "\" time=\"0\">\n" : "\" time=\"0\"/>\n", f);
    if (state == CASE_PASS)
        return;
    if (state == CASE_SKIPPED) {
        fputs("      <skipped message=\"", f);
        rep_put_xml(f, first->reason);
        fputs("\"/>\n    </testcase>\n", f);
        return;
    }
    const char *tag = state == CASE_FAILURE ? "failure" : "error";
    fprintf(f, "      <%s type=\"%s\" message=\"", tag,
            state != CASE_FAILURE                  ? "error"
            : first->outcome == REP_ROW_OUTSIDE ? rep_outcome_name(REP_ROW_OUTSIDE)
                                                : first->first_fail);
    /* The message opens with the gate ("H1 max ratio: ..."), which is what a CI page shows. */
    rep_put_xml(f, first->reason);
    char lab[REP_NAME_LEN];
    rep_row_backend_label(first, lab);
    fprintf(f, " [%s ", fc_dtype_name(first->dtype));
    rep_put_xml(f, lab);
    fputs("]\">", f);
    for (size_t i = 0; i < n; i++)
        if (r[i]->outcome != REP_ROW_PASS)
            put_row_line(f, r[i]);
    fprintf(f, "</%s>\n    </testcase>\n", tag);
}

static void put_property(FILE *f, const char *name, const char *value)
{
    fputs("      <property name=\"", f);
    rep_put_xml(f, name);
    fputs("\" value=\"", f);
    rep_put_xml(f, value);
    fputs("\"/>\n", f);
}

/* The run identity as the suite's properties, one per field of rep_run.c's table (a field
 * without a value is left out), and one "merged" per part of a merged report. */
static void write_properties(FILE *f, const rep_run *run)
{
    char buf[REP_CMD_LEN + 32];
    fputs("    <properties>\n", f);
    for (size_t c = 0; c < rep_run_ncols; c++)
        if (rep_col_value(&rep_run_cols[c], run, buf, sizeof buf) != REP_VAL_NONE && buf[0])
            put_property(f, rep_run_cols[c].name, buf);
    for (size_t i = 0; i < run->nparts; i++) {
        char line[REP_RUN_PART_LEN];
        rep_run_part_line(line, sizeof line, &run->parts[i]);
        put_property(f, "merged", line);
    }
    fputs("    </properties>\n", f);
}

typedef struct counts {
    size_t cases, fails, errors, skipped;
} counts;

static counts count_suite(const rep_row *const *r, size_t n, int strict)
{
    counts c = {0};
    for (size_t i = 0; i < n;) {
        size_t j = i + 1;
        while (j < n && same_case(r[i], r[j]))
            j++;
        const rep_row *first;
        int state = case_state(r + i, j - i, strict, &first);
        c.cases++;
        c.fails += state == CASE_FAILURE;
        c.errors += state == CASE_ERROR;
        c.skipped += state == CASE_SKIPPED;
        i = j;
    }
    return c;
}

fc_status rep_write_junit(FILE *f, const rep_set *set, fc_err *err)
{
    const rep_row *rows = set->rows;
    size_t n = set->n;
    const rep_row **by = malloc((n ? n : 1) * sizeof *by);
    if (!by)
        return fc_errf(err, FC_ENOMEM, "JUnit report: out of memory");
    for (size_t i = 0; i < n; i++)
        by[i] = &rows[i];
    qsort(by, n, sizeof *by, cmp_case);

    int strict = set->run && set->run->strict;
    counts c = count_suite(by, n, strict);
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<testsuites name=\"flexcheck\" tests=\"%zu\" failures=\"%zu\" errors=\"%zu\" "
               "skipped=\"%zu\">\n",
            c.cases, c.fails, c.errors, c.skipped);
    for (size_t i = 0; i < n;) {
        size_t end = i + 1; /* rows of this group */
        while (end < n && !strcmp(group_of(by[i]), group_of(by[end])))
            end++;
        c = count_suite(by + i, end - i, strict);
        fputs("  <testsuite name=\"", f);
        rep_put_xml(f, group_of(by[i]));
        fprintf(f, "\" tests=\"%zu\" failures=\"%zu\" errors=\"%zu\" skipped=\"%zu\">\n",
                c.cases, c.fails, c.errors, c.skipped);
        if (set->run) /* the schema allows properties on a testsuite only */
            write_properties(f, set->run);
        for (size_t j = i; j < end;) {
            size_t k = j + 1;
            while (k < end && same_case(by[j], by[k]))
                k++;
            write_case(f, by + j, k - j, strict);
            j = k;
        }
        fputs("  </testsuite>\n", f);
        i = end;
    }
    fputs("</testsuites>\n", f);
    free(by);
    return ferror(f) ? fc_errf(err, FC_EIO, "JUnit report: write failed") : FC_OK;
}
