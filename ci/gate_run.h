/*
 * gate_run.h - judging gate cases: build the inputs and the float64 oracle, run the kernel on
 * a backend (twice, for determinism), and turn the evidence into report rows through the
 * tolerance gates (reports/tol.h) and the exactness checks of spec/tolerance.md.
 */
#ifndef FLEXCHECK_GATE_RUN_H
#define FLEXCHECK_GATE_RUN_H

#include <stddef.h>

#include "gate.h"
#include "rep.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How the hybrid-layout runner keys its shared block-mask cache. Only GATE_CACHE_FULL is
 * correct; the others exist so tests can prove the gate catches a stale cache. */
typedef enum gate_cache_key {
    GATE_CACHE_FULL = 0,     /* every parameter the block mask depends on */
    GATE_CACHE_WINDOW_ONLY,  /* test only: keyed by sliding_window alone */
    GATE_CACHE_CAUSAL_ONLY,  /* test only: keyed by causal alone */
} gate_cache_key;

/* Test hooks: a deliberately broken kernel or builder, to prove the gate catches it. */
typedef fc_status (*gate_attention_fn)(const gpu_call *c, float *o, float *lse, gpu_result *res,
                                       fc_err *err);
typedef fc_status (*gate_bmask_fn)(bmask *out, bmask_builder builder, mask_params m,
                                   const seq_info *s, int32_t qb, int32_t kb, fc_err *err);

typedef struct gate_opts {
    gpu_backend backends[2];
    int nbackends;
    int kernel;               /* kernel version */
    gate_cache_key cache_key; /* GATE_CACHE_FULL outside tests */
    gate_attention_fn attention_fn; /* NULL outside tests: gpu_attention */
    gate_bmask_fn bmask_fn;         /* NULL outside tests: bmask_build */
} gate_opts;

/* Growable array of report rows. */
typedef struct gate_rows {
    rep_row *v;
    size_t n, cap;
} gate_rows;

void gate_rows_free(gate_rows *r);
/* Appends a zeroed row (first_fail -1); NULL when out of memory. */
rep_row *gate_rows_push(gate_rows *r);

/* Judges case c on every backend of o and appends one row per backend (GK_BUILDERS: one per
 * builder and backend; GK_LAYOUT: one per layer and backend). FC_OK even when a row failed;
 * an error status only for out-of-memory (rows then describe what could not be run). */
fc_status gate_run_case(const gate_case *c, const gate_opts *o, gate_rows *rows, fc_err *err);

/* Judges one fixture case (any producer) on backend `be` with block mask `bm`: the
 * same-precision baseline, two kernel runs (H6 sentinels, H7 determinism) and every gate of
 * tolerance.md. Fills row's verdict columns (the caller fills its identity); o / lse / v (each
 * may be NULL) receive the first run's outputs and the full verdict. 1 pass, 0 fail, -1 the case
 * could not be judged: row->outcome is REP_ROW_SKIP when the kernel refuses the configuration
 * (FC_EUNSUP, e.g. a head dim it is not built for), REP_ROW_ERROR otherwise; row says why. */
int gate_judge_fixture(const gate_opts *op, gpu_backend be, const fix_case *fc, const bmask *bm,
                       rep_row *row, float *o, float *lse, rep_verdict *v);

/* 1 iff the row counts as a gate failure (fail or error). */
int gate_row_failed(const rep_row *r);

#ifdef __cplusplus
}
#endif

#endif
