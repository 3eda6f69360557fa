/*
 * bench_blockmask.c - 'flexcheck bench blockmask': the direct block-mask builder's time per
 * listed block from 4k to 256k (and one past 64k and 256k: ragged), and the slow builder
 * beside it where that is affordable, in one run. Direct repeats until 0.2 s have passed and
 * reports the medians of its builds' elapsed and CPU times; slow (O(Lq*Lk)) runs once, up to
 * L = 16k. Per-block times and ratios are of CPU time: this thread's (kernel time included:
 * the page faults of fresh arrays are part of a build), which other jobs on a shared machine
 * inflate far less than elapsed time.
 * Direct is checked before any time of it is printed, so a fast wrong builder cannot win:
 * equal to slow where slow runs, else to the tiles every row's allowed range reaches and covers
 * (bmask_check_exact).
 *   flexcheck bench blockmask [--quick] [--l N] [--json]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/progress.h"
#include "masks/bmask.h"
#include "cli/cli.h"
#include "masks/params.h"
#include "masks/seq.h"

static const char *const CMD = "bench blockmask";

/* Blocks 128 x 128, PyTorch's default. */
#define BLOCK 128
/* The slow builder runs where Lq * Lk is at most this (16k x 16k: about a second per mask on
 * the 2-core CI machine; 64k would take 16 times that, 256k 256 times). */
#define SLOW_MAX_PAIRS ((int64_t)1 << 28)

/* Elapsed and this thread's CPU time, seconds. */
typedef struct stamp {
    double wall, cpu;
} stamp;

static stamp now(void)
{
    stamp t = {fc_clock_s(CLOCK_MONOTONIC), fc_clock_s(CLOCK_THREAD_CPUTIME_ID)};
    return t;
}

static stamp since(stamp t0)
{
    stamp t = now();
    t.wall -= t0.wall;
    t.cpu -= t0.cpu;
    return t;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of v[0..n), n >= 1; sorts v in place. */
static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

typedef struct bench_mask {
    const char *name;
    mask_params m;
} bench_mask;

static const bench_mask masks[] = {
    {"causal", {.causal = 1}},
    {"causal W=1024", {.causal = 1, .sliding_window = 1024}},
    {"bidir W=128", {.sliding_window = 128}},
    {"causal C=8192", {.causal = 1, .chunk_size = 8192}},
};
#define NMASKS (sizeof masks / sizeof masks[0])

/* One measured configuration. */
typedef struct result {
    int64_t listed;
    int32_t width, full_width; /* the direct mask's longest partial and full rows */
    stamp direct;      /* medians over the repeats */
    int reps;
    stamp slow;        /* once; wall < 0: not run (unaffordable) */
    const char *check; /* what direct was checked equal to */
} result;

/* Repeats the direct build until 0.2 s have passed: the medians of its times, the last mask. */
static fc_status time_direct(const bench_mask *bmk, const seq_info *s, bmask *direct,
                             result *res, fc_err *err)
{
    double *t[2] = {NULL, NULL};
    int cap = 0;
    fc_status st = FC_OK;
    stamp start = now();
    do {
        if (res->reps == cap) {
            cap = cap ? 2 * cap : 1024;
            double *w = realloc(t[0], (size_t)cap * sizeof(double));
            double *c = w ? realloc(t[1], (size_t)cap * sizeof(double)) : NULL;
            t[0] = w ? w : t[0];
            t[1] = c ? c : t[1];
            if (!c) {
                st = fc_errf(err, FC_ENOMEM, "out of memory");
                break;
            }
        }
        bmask_free(direct); /* the previous repeat's (a no-op the first time) */
        stamp t0 = now();
        if ((st = bmask_build_direct(direct, bmk->m, s, BLOCK, BLOCK, err)))
            break;
        stamp dt = since(t0);
        t[0][res->reps] = dt.wall;
        t[1][res->reps++] = dt.cpu;
    } while (since(start).wall < 0.2);
    if (!st) {
        res->direct.wall = median(t[0], res->reps);
        res->direct.cpu = median(t[1], res->reps);
    }
    free(t[0]);
    free(t[1]);
    return st;
}

/* Builds, times and checks one configuration; FC_EFAIL with the difference in err. */
static fc_status run_one(int32_t l, const bench_mask *bmk, result *res, fc_err *err)
{
    seq_info s;
    bmask slow, direct;
    memset(&slow, 0, sizeof slow);
    memset(&direct, 0, sizeof direct);
    memset(res, 0, sizeof *res);
    res->slow.wall = -1;
    fc_status st = seq_init_dense(&s, 1, l, l, err);
    if (st)
        return st;
    int with_slow = (int64_t)l * l <= SLOW_MAX_PAIRS;
    stamp t0 = now();
    if (with_slow && (st = bmask_build_slow(&slow, bmk->m, &s, BLOCK, BLOCK, err)))
        goto done;
    if (with_slow)
        res->slow = since(t0);
    if ((st = time_direct(bmk, &s, &direct, res, err)))
        goto done;
    res->listed = bmask_count_partial(&direct) + bmask_count_full(&direct);
    res->width = direct.width;
    res->full_width = direct.full_width;
    res->check = with_slow ? "slow" : "row ranges";
    st = with_slow ? bmask_compare(&slow, &direct, err)
                   : bmask_check_exact(&direct, bmk->m, &s, err);
    if (st == FC_EINVAL)
        st = FC_EFAIL; /* a builder's malformed mask is a failed check, not bad input */
done:
    bmask_free(&slow);
    bmask_free(&direct);
    seq_free(&s);
    return st;
}

/* CPU time a listed block. */
static double ns_per_block(const result *r)
{
    return r->direct.cpu * 1e9 / (double)(r->listed > 0 ? r->listed : 1);
}

static void print_header(void)
{
    printf("block-mask builders, blocks %dx%d. direct: medians over repeats >= 0.2 s of the "
           "elapsed (wall) and\nthe thread's CPU time a build, checked before they are "
           "printed (against slow where it\nruns, L <= 16k; else against every row's allowed "
           "range). ns/block: CPU time a listed block,\nand relative to the same mask's first "
           "length in this run. slow: once, CPU time.\n", BLOCK, BLOCK);
    printf("%7s  %-13s  %8s  %11s  %11s  %11s  %8s  %8s  %10s  %11s  %s\n", "L", "mask",
           "listed", "longest p+f", "wall us", "cpu us", "ns/block", "vs first", "slow ms",
           "slow/direct", "checked");
}

static void print_row(int32_t l, const bench_mask *bmk, const result *r, double first_ns)
{
    double ns = ns_per_block(r);
    char slow[32] = "-", ratio[32] = "-", widths[32];
    snprintf(widths, sizeof widths, "%d+%d", (int)r->width, (int)r->full_width);
    if (r->slow.wall >= 0) {
        snprintf(slow, sizeof slow, "%.3f", r->slow.cpu * 1e3);
        snprintf(ratio, sizeof ratio, "%.0fx", r->slow.cpu / r->direct.cpu);
    }
    printf("%7d  %-13s  %8lld  %11s  %11.3f  %11.3f  %8.2f  %7.2fx  %10s  %11s  %s\n", (int)l,
           bmk->name, (long long)r->listed, widths, r->direct.wall * 1e6,
           r->direct.cpu * 1e6, ns, ns / first_ns, slow, ratio, r->check);
}

/* One JSON object a line, for scripts (python/flexcheck/bench_torch_blockmask.py). */
static void print_json(int32_t l, const bench_mask *bmk, const result *r)
{
    char mask[192], slow[64] = "\"slow_ms\":null,\"slow_cpu_ms\":null";
    mask_params_text(mask, sizeof mask, &bmk->m, MASK_TEXT_JSON);
    if (r->slow.wall >= 0)
        snprintf(slow, sizeof slow, "\"slow_ms\":%.6f,\"slow_cpu_ms\":%.6f", r->slow.wall * 1e3,
                 r->slow.cpu * 1e3);
    printf("{\"l\":%d,\"mask\":\"%s\",%s,\"q_block_size\":%d,\"kv_block_size\":%d,"
           "\"listed\":%lld,\"longest\":%d,\"full_longest\":%d,\"direct_us\":%.4f,"
           "\"direct_cpu_us\":%.4f,"
           "\"reps\":%d,\"ns_per_block\":%.4f,%s,\"checked\":\"%s\"}\n", (int)l, bmk->name,
           mask, BLOCK, BLOCK, (long long)r->listed, (int)r->width, (int)r->full_width,
           r->direct.wall * 1e6,
           r->direct.cpu * 1e6, r->reps, ns_per_block(r), slow, r->check);
}

/* The lengths to run: ls[0..nl). */
typedef struct lengths {
    int32_t ls[6];
    int nl;
} lengths;

/* --l N: that one length. Order matters, as it always did: --quick after --l runs N and 16k. */
static int parse_l(const char *cmd, const char *opt, const char *v, void *dst)
{
    lengths *l = dst;
    if (cli_parse_i32(cmd, opt, v, 1, MASK_MAX_LEN, &l->ls[0]))
        return -1;
    l->nl = 1;
    return 0;
}

int bench_blockmask(int argc, char **argv)
{
    /* One past a multiple of the block too: a ragged last query tile lists every tile it
     * reaches as partial (masks/bmask.h), the case per-row offsets keep cheap. */
    lengths l = {{4096, 16384, 65536, 65537, 262144, 262145}, 6};
    int json = 0;
    const cli_opt opts[] = {
        CLI_FLAG("quick", "L = 4k and 16k only", &l.nl, 2),
        CLI_FN("l", "N", "one length", parse_l, &l),
        CLI_FLAG("json", "one JSON object per configuration instead of the table", &json, 1),
    };
    const cli_spec spec = {
        .cmd = CMD,
        .usage = "usage: flexcheck bench blockmask [--quick] [--l N] [--json]\n",
        .intro = "The direct builder's time per listed block, blocks 128x128, L in {4k, 16k, 64k,\n"
                 "64k + 1, 256k, 256k + 1} (one past a multiple of the block: a ragged last\n"
                 "query tile), four masks; the slow builder beside it up to 16k. Direct is\n"
                 "checked (equal to slow, or past 16k to every row's allowed range) before its\n"
                 "time is printed.\n",
        .opts = opts,
        .nopts = sizeof opts / sizeof opts[0],
        .unknown = "unknown option '%s'",
        .exit_status = "exit status: 0 measured, 1 a check failed, 2 bad input.",
    };
    int nops, prc = cli_parse(&spec, argc, argv, &nops);
    if (prc != CLI_GO)
        return prc;
    if (!json)
        print_header();
    int rc = CLI_PASS;
    double first_ns[NMASKS] = {0}; /* each mask's per-block time at its first length */
    for (int i = 0; i < l.nl; i++)
        for (size_t j = 0; j < NMASKS; j++) {
            result r;
            fc_err err;
            fc_status st = run_one(l.ls[i], &masks[j], &r, &err);
            if (st == FC_EFAIL) {
                printf("%7d  %-13s  DIRECT != %s: %s\n", (int)l.ls[i], masks[j].name, r.check,
                       err.msg);
                rc = CLI_FAIL;
            } else if (st) {
                return cli_usage_error(CMD, "%s", err.msg);
            } else if (json) {
                print_json(l.ls[i], &masks[j], &r);
            } else {
                if (first_ns[j] == 0)
                    first_ns[j] = ns_per_block(&r);
                print_row(l.ls[i], &masks[j], &r, first_ns[j]);
            }
            fflush(stdout);
        }
    return rc;
}
