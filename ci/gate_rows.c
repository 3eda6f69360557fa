/* gate_rows.c - the growable row list (gate_rows.h). */
#include <stdlib.h>
#include <string.h>

#include "ci/gate_rows.h"

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
