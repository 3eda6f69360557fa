/*
 * progress.h - a line now and then from a single step that can take long (the oracle on a big
 * case, the slow block-mask builder): the library counts work done, the command decides how
 * it is shown. Off until a command installs a sink; then a step reports at most once per
 * interval, and only once it has run longer than the interval, so short steps stay silent.
 *
 *   fc_progress pr;
 *   fc_progress_start(&pr, "reference", npanels);
 *   ... fc_progress_step(&pr, 1, is_first_worker); ...
 */
#ifndef FLEXCHECK_PROGRESS_H
#define FLEXCHECK_PROGRESS_H

#include <stdint.h>
#include <time.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Clock `id`'s reading in seconds: CLOCK_MONOTONIC for elapsed time (fc_now_s), or e.g.
 * CLOCK_THREAD_CPUTIME_ID for this thread's CPU time. The one timer of commands and benches. */
double fc_clock_s(clockid_t id);
double fc_now_s(void);

/* What a command does with a report: fraction in [0, 1], seconds since the step started. */
typedef void (*fc_progress_fn)(void *ctx, const char *what, double fraction, double seconds);

/* Installs the process-wide sink (NULL: off) and the interval between reports. */
void fc_progress_set(fc_progress_fn fn, void *ctx, double interval_s);

typedef struct fc_progress {
    const char *what;
    uint64_t total, done; /* done: added to atomically */
    double t0, last;      /* seconds (monotonic) */
} fc_progress;

void fc_progress_start(fc_progress *p, const char *what, uint64_t total);
/* Adds n units (from any thread); the thread that passes may_report = 1 (one per step) calls
 * the sink when a report is due. */
void fc_progress_step(fc_progress *p, uint64_t n, int may_report);

#ifdef __cplusplus
}
#endif

#endif
