/* gate_rows.h - a growable list of report rows, what a gate run collects. */
#ifndef FLEXCHECK_GATE_ROWS_H
#define FLEXCHECK_GATE_ROWS_H

#include <stddef.h>

#include "reports/rep.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gate_rows {
    rep_row *v;
    size_t n, cap;
} gate_rows;

void gate_rows_free(gate_rows *r);
/* Appends a zeroed row (no failing gate); NULL when out of memory. */
rep_row *gate_rows_push(gate_rows *r);

#ifdef __cplusplus
}
#endif

#endif
