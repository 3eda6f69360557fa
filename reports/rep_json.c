/*
 * rep_json.c - the rows as JSON: {"rows": [{column: value, ...}, ...], "rows_total": n,
 * "pass": p, "fail": f, "error": e, "skip": s}. Keys are the column names of rep_row.c (the CSV header);
 * non-finite numbers and "no failing gate" are null, since JSON has no NaN or infinity.
 */
#include "reports/rep_internal.h"

fc_status rep_write_json(FILE *f, const rep_set *set, fc_err *err)
{
    const rep_row *rows = set->rows;
    size_t n = set->n;
    size_t pass = 0, fail = 0, error = 0, skip = 0;
    char buf[REP_WHY_LEN + 32];
    fputs("{\"rows\": [", f);
    for (size_t i = 0; i < n; i++) {
        pass += rows[i].outcome == REP_ROW_PASS;
        fail += rows[i].outcome == REP_ROW_FAIL;
        error += rows[i].outcome == REP_ROW_ERROR;
        skip += rows[i].outcome == REP_ROW_SKIP;
        fputs(i ? ",\n  {" : "\n  {", f);
        for (size_t c = 0; c < rep_ncols; c++) {
            rep_val kind = rep_col_value(&rep_cols[c], &rows[i], buf, sizeof buf);
            if (c)
                fputs(", ", f);
            rep_put_json(f, rep_cols[c].name);
            fputs(": ", f);
            if (kind == REP_VAL_TEXT)
                rep_put_json(f, buf);
            else
                fputs(kind == REP_VAL_NUMBER ? buf : "null", f);
        }
        fputc('}', f);
    }
    fprintf(f,
            "%s],\n \"rows_total\": %zu, \"pass\": %zu, \"fail\": %zu, \"error\": %zu, "
            "\"skip\": %zu}\n",
            n ? "\n" : "", n, pass, fail, error, skip);
    return ferror(f) ? fc_errf(err, FC_EIO, "JSON report: write failed") : FC_OK;
}
