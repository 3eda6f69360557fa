/* gate_run.c - the row list and one case run through its check (gate_run.h). */
#include <stdlib.h>
#include <string.h>

#include "ci/checks.h"
#include "ci/gate_case.h"

void gate_rows_free(gate_rows *r)
{
    free(r->v);
    memset(r, 0, sizeof *r);
}

rep_row *gate_rows_push(gate_rows *r)
{
    if (r->n == r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 64;
        rep_row *v = realloc(r->v, sizeof *v * cap);
        if (!v)
            return NULL;
        r->v = v;
        r->cap = cap;
    }
    rep_row *row = &r->v[r->n++];
    memset(row, 0, sizeof *row);
    return row;
}

fc_status gate_run_case(const gate_case *c, const gate_opts *o, gate_rows *rows, fc_err *err)
{
    if (!c->check)
        return gate_case_error(c, o, rows, "case names no check", err);
    return c->check->run(c, o, rows, err);
}
