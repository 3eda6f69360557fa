/* gate_run.c - cases run through their checks (gate_run.h): one, or many on worker threads. */
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "base/progress.h"
#include "ci/checks.h"
#include "ci/gate_case.h"

fc_status gate_run_case(const gate_case *c, const gate_opts *o, gate_rows *rows, fc_err *err)
{
    if (!c->check)
        return gate_case_error(c, o, rows, "case names no check", err);
    char why[REP_WHY_LEN];
    /* A layout's layers differ in cost: its check asks for each layer (ci/checks/layout.c). */
    if (c->layout[0] || !gate_emu_skips(&c->gp, why, sizeof why))
        return c->check->run(c, o, rows, err);
    gate_opts emu = *o, rest = *o;
    emu.nbackends = rest.nbackends = 0;
    for (int i = 0; i < o->nbackends; i++) {
        gate_opts *to = o->backends[i] == GPU_BACKEND_EMU ? &emu : &rest;
        to->backends[to->nbackends++] = o->backends[i];
    }
    fc_status st = emu.nbackends ? gate_case_rows(c, &emu, rows, 1, why, err) : FC_OK;
    return st || !rest.nbackends ? st : c->check->run(c, &rest, rows, err);
}

/* ---- many cases: workers pull them, the calling thread reports progress ---- */

typedef struct run_state {
    const gate_run_all_in *in;
    gate_rows *rows;
    fc_status *st;
    fc_err *errs;
    pthread_mutex_t mu;
    int next, done, failed;
} run_state;

static int stopped(const run_state *rs)
{
    return rs->in->stop && *rs->in->stop;
}

static void *worker(void *arg)
{
    run_state *rs = arg;
    const gate_run_all_in *in = rs->in;
    for (;;) {
        pthread_mutex_lock(&rs->mu);
        int i = rs->next < in->n && !stopped(rs) ? rs->next++ : -1;
        pthread_mutex_unlock(&rs->mu);
        if (i < 0)
            return NULL;
        rs->st[i] = gate_run_case(&in->cases[i], in->opts, &rs->rows[i], &rs->errs[i]);
        int bad = rs->st[i] != FC_OK;
        for (size_t r = 0; r < rs->rows[i].n; r++)
            bad |= rep_row_fails(&rs->rows[i].v[r], in->strict);
        pthread_mutex_lock(&rs->mu);
        rs->done++;
        rs->failed += bad;
        pthread_mutex_unlock(&rs->mu);
    }
}

static void report(run_state *rs, double t0, int final)
{
    if (!rs->in->progress)
        return;
    pthread_mutex_lock(&rs->mu);
    int done = rs->done, failed = rs->failed;
    pthread_mutex_unlock(&rs->mu);
    rs->in->progress(rs->in->ctx, done, rs->in->n, failed, fc_now_s() - t0, final);
}

int gate_run_all(const gate_run_all_in *in, gate_rows *rows, fc_status *st, fc_err *errs,
                 double *elapsed)
{
    run_state rs = {.in = in, .rows = rows, .st = st, .errs = errs};
    pthread_t *th = calloc((size_t)in->jobs, sizeof *th);
    *elapsed = 0;
    if (!th)
        return -1;
    pthread_mutex_init(&rs.mu, NULL);
    double t0 = fc_now_s();
    int started = 0;
    for (int j = 0; j < in->jobs; j++)
        started += pthread_create(&th[j], NULL, worker, &rs) == 0;
    if (started == 0)
        worker(&rs); /* no threads to be had: run inline */
    for (;;) {
        pthread_mutex_lock(&rs.mu);
        int done = rs.done;
        pthread_mutex_unlock(&rs.mu);
        if (done >= in->n || stopped(&rs))
            break;
        report(&rs, t0, 0);
        nanosleep(&(struct timespec){.tv_nsec = 200000000}, NULL);
    }
    for (int j = 0; j < started; j++)
        pthread_join(th[j], NULL);
    report(&rs, t0, 1);
    *elapsed = fc_now_s() - t0;
    pthread_mutex_destroy(&rs.mu);
    free(th);
    return stopped(&rs) ? -2 : 0;
}
