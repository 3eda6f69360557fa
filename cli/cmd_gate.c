/*
 * cmd_gate.c - 'flexcheck gate': run the matrix (ci/matrix.c) on every available backend,
 * show progress, write the report (Markdown, JSON, CSV, HTML) and JUnit XML, and exit 0 only if
 * every hard gate and exactness check held. The run itself is library code (ci/gate_run.h:
 * worker threads over the cases); this command parses, picks the backends, shows progress,
 * catches SIGINT/SIGTERM and prints the verdict lines.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/progress.h"
#include "cli/cli.h"
#include "ci/gate.h"
#include "ci/checks.h"
#include "ci/gate_run.h"
#include "reports/rep.h"

static const char *const CMD = "gate";

typedef struct gate_cfg {
    int size; /* gate_size */
    const char *filter, *report_dir;
    int32_t shard[2], jobs, kernel, seed; /* shard: I, N */
    int list, strict;
    int quick, full; /* given: they exclude each other */
    const char *backend;
} gate_cfg;

static int parse_backend(const char *cmd, const char *opt, const char *v, void *dst)
{
    if (strcmp(v, "emu") && strcmp(v, "gpu") && strcmp(v, "all"))
        return cli_usage_error(cmd, "%s '%s': emu, gpu or all", opt, v), -1;
    *(const char **)dst = v;
    return 0;
}

/* Returns CLI_GO or the exit status (help printed, or bad input). */
static int parse(int argc, char **argv, gate_cfg *g)
{
    memset(g, 0, sizeof *g);
    g->size = GATE_DEFAULT;
    g->report_dir = "build/reports";
    g->shard[0] = g->shard[1] = 1;
    g->jobs = 1;
    g->kernel = GPU_DEFAULT_KERNEL;
    g->seed = 1;
    const cli_opt opts[] = {
        {.name = "quick", .help = "the quick matrix (default: the default size)",
         .kind = CLI_K_FLAG, .dst = &g->size, .lo = GATE_QUICK, .seen = &g->quick},
        {.name = "full", .help = "the full matrix (default: the default size)",
         .kind = CLI_K_FLAG, .dst = &g->size, .lo = GATE_FULL, .seen = &g->full},
        CLI_STR("filter", "PATTERN", "a case id (or a report row's, ID@...): that case alone;\n"
                "else the ids containing it, or matching it as a glob (* ? [])",
                &g->filter),
        CLI_FN("shard", "I/N", "the I-th of N disjoint parts (1 <= I <= N <= "
               CLI_TEXT(CLI_SHARD_MAX) "), for fan-out", cli_parse_shard, g->shard),
        CLI_FN("backend", "B", "emu | gpu | all (default: every backend present)",
               parse_backend, &g->backend),
        CLI_INT("kernel", "K", "kernel version, 1, 2 or 3 (default 2)", &g->kernel, 1,
                GPU_MAX_KERNEL),
        CLI_INT("jobs", "N", "cases run in parallel (default 1)", &g->jobs, 1, 256),
        CLI_INT("seed", "S", "matrix seed (default 1)", &g->seed, 0, INT32_MAX),
        CLI_STR("report-dir", "DIR", "where the report goes (default build/reports)",
                &g->report_dir),
        CLI_FLAG("list", "print the selected case ids and exit", &g->list, 1),
        CLI_FLAG("strict", "rows outside the contract (docs/tolerance.md) fail the run too",
                 &g->strict, 1),
    };
    const cli_spec spec = {
        .cmd = CMD,
        .usage = "usage: flexcheck gate [options]\n",
        .opts = opts,
        .nopts = sizeof opts / sizeof opts[0],
        .unknown = "unknown option '%s' (--help lists them)",
        .exit_status = "exit status: 0 every gate held, 1 a case failed, 2 bad input.",
    };
    int nops, rc = cli_parse(&spec, argc, argv, &nops);
    return rc != CLI_GO ? rc : cli_exclusive(CMD, "--quick", g->quick, "--full", g->full);
}

/* Backends to run: the one asked for, or every one present. */
static int pick_backends(const gate_cfg *g, gate_opts *o)
{
    fc_err err;
    o->nbackends = 0;
    int want_gpu = !g->backend || strcmp(g->backend, "emu") != 0;
    int want_emu = !g->backend || strcmp(g->backend, "gpu") != 0;
    if (want_emu)
        o->backends[o->nbackends++] = GPU_BACKEND_EMU;
    if (want_gpu) {
        if (gpu_backend_available(GPU_BACKEND_CUDA, &err))
            o->backends[o->nbackends++] = GPU_BACKEND_CUDA;
        else if (g->backend) /* asked for by name: say it cannot run */
            return cli_usage_error(CMD, "--backend %s: %s", g->backend, err.msg), -1;
        else
            cli_say("gate", "gpu backend skipped: %s", err.msg);
    }
    return 0;
}

int cli_select_cases(const char *cmd, gate_case *all, int nall, const char *matrix,
                     const char *filter, const int32_t shard[2], int say_why)
{
    int n = gate_select(all, nall, filter, shard[0], shard[1]);
    if (n > 0 || !say_why)
        return n;
    /* Nothing was kept, so all[] is as it was: count what the filter alone selects. */
    int matched = gate_select(all, nall, filter, 1, 1);
    if (matched == 0)
        cli_usage_error(cmd, "no case of the %s matrix matches --filter '%s'", matrix,
                        filter ? filter : "");
    else if (filter && *filter)
        cli_usage_error(cmd, "--shard %d/%d holds no case: only %d case%s of the %s matrix "
                        "match%s --filter '%s' (use N <= %d)", (int)shard[0], (int)shard[1],
                        matched, matched == 1 ? "" : "s", matrix, matched == 1 ? "es" : "",
                        filter, matched);
    else
        cli_usage_error(cmd, "--shard %d/%d holds no case: the %s matrix has only %d case%s "
                        "(use N <= %d)", (int)shard[0], (int)shard[1], matrix, matched,
                        matched == 1 ? "" : "s", matched);
    return 0;
}

/* SIGINT/SIGTERM: workers finish the case they hold and take no other; nothing is written. */
static volatile sig_atomic_t stop_signal;

static void on_stop(int sig)
{
    stop_signal = sig;
}

/* One status line: overwritten in place on a terminal, a plain line every 10 s otherwise. The
 * time left is estimated from the cases done, so none is printed before the first is done (an
 * estimate of 0 s there was a false line: the M7 group runs minutes before its first case). */
typedef struct progress_state {
    int tty;
    double last;
} progress_state;

static void progress(void *ctx, int done, int n, int failed, double el, int final)
{
    progress_state *ps = ctx;
    char left[48] = "";
    if (done > 0 && done < n)
        snprintf(left, sizeof left, ", ~%.0f s left", el / done * (n - done));
    if (ps->tty)
        fprintf(stderr, "\r[%d/%d] %d failed, %.0f s elapsed%s   %s", done, n, failed, el, left,
                final ? "\n" : "");
    else if (final || el - ps->last >= 10) {
        fprintf(stderr, "gate: %d/%d cases done, %d failed, %.0f s elapsed%s\n", done, n, failed,
                el, left);
        ps->last = el;
    }
}

/* The cases run (gate_run_all) into rows: 0, 1 when some case could not be run (each said),
 * -1 out of memory (said), -2 stopped by a signal. */
static int run_all(const gate_case *cases, int n, const gate_opts *opts, int jobs, int strict,
                   gate_rows *rows, double *elapsed)
{
    fc_err *errs = calloc((size_t)n + 1, sizeof *errs);
    fc_status *st = calloc((size_t)n + 1, sizeof *st);
    progress_state ps = {.tty = isatty(STDERR_FILENO)};
    gate_run_all_in in = {.cases = cases, .n = n, .opts = opts, .jobs = jobs, .strict = strict,
                          .stop = &stop_signal, .progress = progress, .ctx = &ps};
    int rc = errs && st ? gate_run_all(&in, rows, st, errs, elapsed) : -1;
    if (rc == -1)
        cli_say("gate", "out of memory");
    for (int i = 0; rc == 0 && i < n; i++)
        if (st[i]) {
            cli_say("gate", "%s: %s", cases[i].id, errs[i].msg);
            rc = 1;
        }
    free(errs);
    free(st);
    return rc;
}

int cmd_gate(int argc, char **argv)
{
    gate_cfg g;
    gate_opts opts;
    int rc = parse(argc, argv, &g);
    if (rc != CLI_GO)
        return rc;
    if (g.filter && strlen(g.filter) >= REP_TEXT_LEN) /* the report's run identity holds it */
        return cli_usage_error(CMD, "--filter: longer than %d characters", REP_TEXT_LEN - 1);
    memset(&opts, 0, sizeof opts);
    opts.run.kernel = g.kernel;
    opts.cache_key = GATE_CACHE_FULL;
    gate_case *all;
    int nall, dropped;
    fc_err err;
    if (gate_matrix((gate_size)g.size, (uint64_t)g.seed, &all, &nall, &dropped, &err))
        return cli_usage_error(CMD, "%s", err.msg);
    int n = cli_select_cases(CMD, all, nall, gate_size_name((gate_size)g.size), g.filter,
                             g.shard, !g.list);
    if (g.list) {
        for (int i = 0; i < n; i++)
            printf("%s\n", all[i].id);
        free(all);
        return CLI_PASS;
    }
    if (n == 0) { /* the message is out */
        free(all);
        return CLI_BADINPUT;
    }
    /* From here a stop is caught: the run then ends at once and writes nothing. */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    /* The report directory is shown writable before any case runs, so an hour's run does not
     * end on a directory it cannot write; nothing is made until the report is written
     * (rep_dir_check makes nothing, rep_write_all removes what it made when it fails). */
    fc_err derr;
    struct stat sb;
    int existed = stat(g.report_dir, &sb) == 0;
    if (rep_dir_check(g.report_dir, &derr)) {
        free(all);
        return cli_usage_error(CMD, "%s", derr.msg);
    }
    if (pick_backends(&g, &opts)) { /* the message is out */
        free(all);
        return CLI_BADINPUT;
    }
    cli_say("gate", "%s matrix, seed %llu, shard %d/%d: %d cases on %s%s "
            "(kernel %d)%s", gate_size_name((gate_size)g.size), (unsigned long long)g.seed,
            (int)g.shard[0], (int)g.shard[1], n, gpu_backend_name(opts.backends[0]),
            opts.nbackends > 1 ? "+gpu" : "", g.kernel,
            dropped ? "; some M1 factor pairs exceed this size's work budget" : "");
    gate_rows *rows = calloc((size_t)n, sizeof *rows);
    if (!rows) {
        free(all);
        return cli_usage_error(CMD, "out of memory");
    }
    double elapsed = 0;
    fc_progress_set(NULL, NULL, 0); /* the gate shows its own progress, per case */
    int hard = run_all(all, n, &opts, g.jobs, g.strict, rows, &elapsed);
    if (hard == -2) {
        int done = 0;
        for (int i = 0; i < n; i++)
            done += rows[i].n > 0;
        cli_say("gate", "stopped by %s after %d of %d cases: no report written%s%s"
                "%s", stop_signal == SIGTERM ? "SIGTERM" : "SIGINT", done, n,
                existed ? ", the previous one in " : "", existed ? g.report_dir : "",
                existed ? "/ is untouched" : "");
        for (int i = 0; i < n; i++)
            gate_rows_free(&rows[i]);
        free(rows);
        free(all);
        return 128 + (int)stop_signal;
    }
    /* Rows in case order, whatever order the workers finished in. */
    gate_rows flat = {0};
    size_t failed = 0, skipped = 0, outside = 0;
    for (int i = 0; i < n && hard >= 0; i++)
        for (size_t r = 0; r < rows[i].n; r++) {
            rep_row *row = gate_rows_push(&flat);
            if (!row) {
                cli_say("gate", "out of memory");
                hard = -1;
                break;
            }
            *row = rows[i].v[r];
            failed += rep_row_fails(row, g.strict);
            skipped += row->outcome == REP_ROW_SKIP;
            outside += row->outcome == REP_ROW_OUTSIDE && !g.strict;
        }
    rc = CLI_PASS;
    rep_check checks[GATE_MAX_CHECKS];
    rep_run run; /* what a merge of shards checks them against */
    cli_run_identity(&run, gate_size_name((gate_size)g.size));
    run.seed = g.seed;
    run.shard_i = g.shard[0];
    run.shard_n = g.shard[1];
    rep_set_str(run.filter, sizeof run.filter, g.filter);
    fc_fmt(run.backends, sizeof run.backends, "%s%s", gpu_backend_name(opts.backends[0]),
           opts.nbackends > 1 ? "+gpu" : "");
    run.kernel = g.kernel;
    run.strict = g.strict;
    rep_set set = {.rows = flat.v, .n = flat.n, .checks = checks, .run = &run};
    set.nchecks = gate_check_report_list(checks);
    if (hard < 0) { /* out of memory, said */
        rc = CLI_BADINPUT;
    } else {
        /* The verdict first: a report that cannot be written must not hide it. A skip is
         * printed with its reason too: a row not run is never silent. */
        for (size_t r = 0; r < flat.n; r++) {
            const rep_row *row = &flat.v[r];
            int out = row->outcome == REP_ROW_OUTSIDE, skip = row->outcome == REP_ROW_SKIP;
            if (rep_row_fails(row, g.strict) || out || skip)
                printf("%s %s [%s %s]: %s\n", rep_row_fails(row, g.strict) ? "FAIL"
                                                : skip ? "SKIP" : "OUTSIDE",
                       row->case_id, row->backend, fc_dtype_name(row->dtype), row->reason);
        }
        printf("gate: %zu rows from %d cases in %.1f s: %zu passed, %zu failed, %zu skipped",
               flat.n, n, elapsed, flat.n - failed - skipped - outside, failed, skipped);
        if (outside)
            printf(", %zu outside the contract (H1/H2 not run; --strict fails them)", outside);
        printf("; report in %s/\n", fc_esc(g.report_dir).s);
        fflush(stdout);
        rc = failed || hard ? CLI_FAIL : CLI_PASS;
        if (rep_write_all(g.report_dir, &set, &err)) {
            cli_say("gate", "the report could not be written: %s", err.msg);
            rc = CLI_BADINPUT;
        }
    }
    for (int i = 0; i < n; i++)
        gate_rows_free(&rows[i]);
    free(rows);
    gate_rows_free(&flat);
    free(all);
    return rc;
}
