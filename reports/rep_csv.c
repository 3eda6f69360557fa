/*
 * rep_csv.c - the rows as CSV (RFC 4180): a header of the column names of rep_row.c, then one
 * line per row. Non-finite numbers are written nan, inf, -inf; the gate of a passing row is
 * empty. Lines end in CRLF as the RFC says, which every CSV reader accepts.
 */
#include "reports/rep_internal.h"

fc_status rep_write_csv(FILE *f, const rep_set *set, fc_err *err)
{
    const rep_row *rows = set->rows;
    size_t n = set->n;
    char buf[REP_WHY_LEN + 32];
    for (size_t c = 0; c < rep_ncols; c++) {
        if (c)
            fputc(',', f);
        rep_put_csv(f, rep_cols[c].name);
    }
    fputs("\r\n", f);
    for (size_t i = 0; i < n; i++) {
        for (size_t c = 0; c < rep_ncols; c++) {
            if (c)
                fputc(',', f);
            rep_col_value(&rep_cols[c], &rows[i], buf, sizeof buf);
            rep_put_csv(f, buf);
        }
        fputs("\r\n", f);
    }
    return ferror(f) ? fc_errf(err, FC_EIO, "CSV report: write failed") : FC_OK;
}
