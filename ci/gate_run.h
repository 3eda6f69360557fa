/*
 * gate_run.h - running gate cases: the options of a run (backends, kernel, the layout cache's
 * key) and one case judged on every backend through its check
 * (ci/checks.h). Single cases are judged by judge/; this is the matrix side.
 */
#ifndef FLEXCHECK_GATE_RUN_H
#define FLEXCHECK_GATE_RUN_H

#include <signal.h>
#include <stddef.h>

#include "ci/gate.h"
#include "ci/gate_rows.h"
#include "judge/judge.h"
#include "reports/rep.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How the hybrid-layout check keys its shared block-mask cache. Only GATE_CACHE_FULL is
 * correct; the others exist so tests can prove the gate catches a stale cache. */
typedef enum gate_cache_key {
    GATE_CACHE_FULL = 0,     /* every parameter the block mask depends on */
    GATE_CACHE_WINDOW_ONLY,  /* test only: keyed by sliding_window alone */
    GATE_CACHE_CAUSAL_ONLY,  /* test only: keyed by causal alone */
} gate_cache_key;

typedef struct gate_opts {
    judge_opts run;           /* kernel version (and the tests' broken kernels and builders) */
    gpu_backend backends[2];
    int nbackends;
    gate_cache_key cache_key; /* GATE_CACHE_FULL outside tests */
} gate_opts;

/* Judges case c on every backend of o through its check and appends one row per backend (the
 * builders check: one per builder and backend; layouts: one per layer and backend). FC_OK
 * even when a row failed; an error status only for out-of-memory (rows then describe what
 * could not be run). */
fc_status gate_run_case(const gate_case *c, const gate_opts *o, gate_rows *rows, fc_err *err);

/* A run of many cases: `jobs` worker threads pull cases in order (one inline when no thread
 * can be had) while the calling thread reports progress every 200 ms. */
typedef struct gate_run_all_in {
    const gate_case *cases;
    int n;
    const gate_opts *opts;
    int jobs;   /* >= 1 */
    int strict; /* outside-contract rows count as failed (in the progress counts) */
    /* Non-zero (a signal handler sets it): every worker finishes the case it holds and takes no
     * other. NULL: never. */
    const volatile sig_atomic_t *stop;
    /* NULL, or called on the calling thread with the cases done and failed so far, the seconds
     * since the start, and final = 1 once, when every worker has returned. */
    void (*progress)(void *ctx, int done, int n, int failed, double elapsed, int final);
    void *ctx;
} gate_run_all_in;

/* Runs in->cases[i] into rows[i] (n of them, zeroed by the caller; free each with
 * gate_rows_free), with st[i] and errs[i] gate_run_case's status and message. Returns 0 when
 * every case ran, -2 when stopped (the rows of the cases that ran are kept), -1 out of memory
 * (nothing ran). *elapsed: the run's seconds. */
int gate_run_all(const gate_run_all_in *in, gate_rows *rows, fc_status *st, fc_err *errs,
                 double *elapsed);

#ifdef __cplusplus
}
#endif

#endif
