/* progress.c - occasional progress reports from long steps, and the clock (progress.h). */
#include <time.h>

#include "base/progress.h"

static fc_progress_fn sink;
static void *sink_ctx;
static double sink_interval = 2.0;

void fc_progress_set(fc_progress_fn fn, void *ctx, double interval_s)
{
    sink = fn;
    sink_ctx = ctx;
    sink_interval = interval_s;
}

double fc_clock_s(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double fc_now_s(void)
{
    return fc_clock_s(CLOCK_MONOTONIC);
}

void fc_progress_start(fc_progress *p, const char *what, uint64_t total)
{
    p->what = what;
    p->total = total;
    p->done = 0;
    p->t0 = p->last = sink ? fc_now_s() : 0;
}

void fc_progress_step(fc_progress *p, uint64_t n, int may_report)
{
    uint64_t done = __atomic_add_fetch(&p->done, n, __ATOMIC_RELAXED);
    if (!sink || !may_report)
        return;
    double t = fc_now_s();
    if (t - p->last < sink_interval)
        return;
    p->last = t;
    sink(sink_ctx, p->what, p->total ? (double)done / (double)p->total : 1.0, t - p->t0);
}
