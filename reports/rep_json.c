/*
 * rep_json.c - the report set as JSON, everything its other files are written from, so that
 * rep_read.c can read it back (flexcheck report merge):
 *   {"run": {field: value, ..., "merged": [{field: value, ...}, ...]},
 *    "checks": [{"name": ..., "title": ...}, ...],
 *    "rows": [{column: value, ...}, ...],
 *    "rows_total": n, "pass": p, "fail": f, "error": e, "skip": s}
 * Row keys are the column names of rep_row.c (the CSV header), run keys those of rep_run.c;
 * "merged" is there only for a merged report, "run" is null for a set written without one.
 * JSON has no NaN or infinity: a NaN metric (no value) is null, an infinite one the string
 * "inf" or "-inf"; "no failing gate" and "no seed" are null.
 */
#include "reports/rep_internal.h"

/* One object of the columns of a table, from the struct at base. */
static void put_fields(FILE *f, const rep_col *cols, size_t ncols, const void *base)
{
    char buf[REP_CMD_LEN + 32]; /* the longest field, the run's command */
    for (size_t c = 0; c < ncols; c++) {
        rep_val kind = rep_col_value(&cols[c], base, buf, sizeof buf);
        if (c)
            fputs(", ", f);
        rep_put_json(f, cols[c].name);
        fputs(": ", f);
        if (kind == REP_VAL_TEXT)
            rep_put_json(f, buf);
        else
            fputs(kind == REP_VAL_NUMBER ? buf : "null", f);
    }
}

static void put_run(FILE *f, const rep_run *run)
{
    if (!run) {
        fputs("null", f);
        return;
    }
    fputc('{', f);
    put_fields(f, rep_run_cols, rep_run_ncols, run);
    if (run->nparts) {
        fputs(", \"merged\": [", f);
        for (size_t i = 0; i < run->nparts; i++) {
            fputs(i ? ",\n   {" : "\n   {", f);
            put_fields(f, rep_run_cols, rep_run_ncols, &run->parts[i]);
            fputc('}', f);
        }
        fputc(']', f);
    }
    fputc('}', f);
}

static void put_checks(FILE *f, const rep_set *set)
{
    fputc('[', f);
    for (size_t i = 0; i < set->nchecks; i++) {
        fputs(i ? ", {\"name\": " : "{\"name\": ", f);
        rep_put_json(f, set->checks[i].name);
        fputs(", \"title\": ", f);
        rep_put_json(f, set->checks[i].title ? set->checks[i].title : "");
        fputc('}', f);
    }
    fputc(']', f);
}

fc_status rep_write_json(FILE *f, const rep_set *set, fc_err *err)
{
    const rep_row *rows = set->rows;
    size_t n = set->n;
    size_t pass = 0, fail = 0, error = 0, skip = 0, outside = 0;
    fputs("{\"run\": ", f);
    put_run(f, set->run);
    fputs(",\n \"checks\": ", f);
    put_checks(f, set);
    fputs(",\n \"rows\": [", f);
    for (size_t i = 0; i < n; i++) {
        pass += rows[i].outcome == REP_ROW_PASS;
        fail += rows[i].outcome == REP_ROW_FAIL;
        error += rows[i].outcome == REP_ROW_ERROR;
        skip += rows[i].outcome == REP_ROW_SKIP;
        outside += rows[i].outcome == REP_ROW_OUTSIDE;
        fputs(i ? ",\n  {" : "\n  {", f);
        put_fields(f, rep_cols, rep_ncols, &rows[i]);
        fputc('}', f);
    }
    fprintf(f,
            "%s],\n \"rows_total\": %zu, \"pass\": %zu, \"fail\": %zu, \"error\": %zu, "
            "\"skip\": %zu, \"outside\": %zu}\n",
            n ? "\n" : "", n, pass, fail, error, skip, outside);
    return ferror(f) ? fc_errf(err, FC_EIO, "JSON report: write failed") : FC_OK;
}
