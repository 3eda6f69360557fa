/*
 * rep_csv.c - the rows as CSV (RFC 4180): a header of the column names of rep_row.c, then one
 * line per row. Non-finite numbers are written nan, inf, -inf; the gate of a passing row is
 * empty. Lines end in CRLF as the RFC says, which every CSV reader accepts.
 *
 * Text cells that a spreadsheet would run as a formula (starting with = + - @, a tab or CR)
 * get a leading ' (rep_put_csv_text, rep_esc.c). Which cells: the free-text columns, whatever
 * their value (case_id, group, builder, backend, producer, first_fail, reason, explained): a
 * fixture file, a producer or a rows.json read back by a merge decides what they hold. Not the
 * numbers: "-0.5", "-inf" and "-0.0" are numbers the writer formats itself, and a quote would
 * make a column of numbers text. Not dtype and outcome (words from a fixed list, none starting
 * so) and not gates: its letters are P, F and - only (rep_row_set_verdict writes nothing else,
 * a merge refuses anything else), so a '-' first is a gate not run, never a formula's start,
 * and scripts index the column by gate.
 */
#include <stddef.h>

#include "reports/rep_internal.h"

/* 1 for a column whose value is text some input chose (see above). */
static int free_text(const rep_col *c)
{
    return (c->kind == REP_COL_STR || c->kind == REP_COL_GATE) &&
           c->off != offsetof(rep_row, gates);
}

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
            (free_text(&rep_cols[c]) ? rep_put_csv_text : rep_put_csv)(f, buf);
        }
        fputs("\r\n", f);
    }
    return ferror(f) ? fc_errf(err, FC_EIO, "CSV report: write failed") : FC_OK;
}
