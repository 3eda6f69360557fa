/*
 * checks.h - what the gate can check on a case: one entry per check, one table of them
 * (ci/checks.c). A check is one file under ci/checks/ exporting a gate_check; adding one is
 * that file plus one line in the table, and matrix cases that name it.
 *
 * "numeric" judges the kernel against the oracle under the hard gates alone; every other
 * entry is an exactness check of docs/tolerance.md (or an M3/M4/M6 invariant of
 * docs/matrix.md): a case's rows carry the tolerance verdict of its main run, and a failed
 * check fails the row under the check's own name, which is what reports show.
 */
#ifndef FLEXCHECK_CI_CHECKS_H
#define FLEXCHECK_CI_CHECKS_H

#include <stddef.h>

#include "ci/gate_run.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Judges case c on every backend of op and appends its rows; FC_OK even when a row failed,
 * an error status only for out-of-memory (rows then describe what could not be run). */
typedef fc_status (*gate_check_fn)(const gate_case *c, const gate_opts *op, gate_rows *rows,
                                   fc_err *err);

typedef struct gate_check {
    const char *name;  /* in case ids, and the failing gate a row names ("window-edge") */
    const char *title; /* what it holds, for the reports ("window edges differ"); NULL for
                        * "numeric", which fails rows under the hard gates only */
    gate_check_fn run;
} gate_check;

/* The table, in report order; gate_nchecks <= GATE_MAX_CHECKS entries. */
#define GATE_MAX_CHECKS 32
extern const gate_check *const gate_checks[];
extern const size_t gate_nchecks;

/* The check named `name`, or NULL. */
const gate_check *gate_check_find(const char *name);

/* The exactness checks (entries with a title) as reports list them, into out[GATE_MAX_CHECKS];
 * returns how many were written. */
size_t gate_check_report_list(rep_check *out);

/* p-round's design for `export` (ci/checks/pround.c): the designed case of p-round case c, a
 * float16 or bfloat16 case with c's shapes, sequences and mask whose q, k, v make P's rounding
 * show, scale 1, no score terms, and its float64 oracle. Its rule is judge_pround
 * (judge/exact.h). */
fc_status gate_pround_case(const gate_case *c, fix_case *out, fc_err *err);

#ifdef __cplusplus
}
#endif

#endif
