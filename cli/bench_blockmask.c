/*
 * bench_blockmask.c - 'flexcheck bench blockmask': slow vs direct block-mask builders side by
 * side in one run. Slow is O(Lq*Lk) and runs once per configuration; direct is O(listed
 * blocks) and repeats until 0.2 s have passed, reporting the mean. Both are checked equal
 * before any time is printed, so a fast wrong builder cannot win.
 *   flexcheck bench blockmask [--quick] [--l N]
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "masks/bmask.h"
#include "cli/cli.h"
#include "masks/seq.h"

static const char *const CMD = "bench blockmask";

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
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

static int run_one(int32_t l, const bench_mask *bm)
{
    seq_info s;
    fc_err err;
    bmask slow, direct;
    if (seq_init_dense(&s, 1, l, l, &err))
        return cli_usage_error(CMD, "%s", err.msg);
    double t0 = now_s();
    if (bmask_build_slow(&slow, bm->m, &s, 128, 128, &err)) {
        seq_free(&s);
        return cli_usage_error(CMD, "%s", err.msg);
    }
    double t_slow = now_s() - t0;
    int reps = 0;
    double t_direct = 0;
    memset(&direct, 0, sizeof direct);
    t0 = now_s();
    do {
        bmask_free(&direct); /* the previous repeat's (a no-op the first time) */
        if (bmask_build_direct(&direct, bm->m, &s, 128, 128, &err)) {
            bmask_free(&slow);
            seq_free(&s);
            return cli_usage_error(CMD, "%s", err.msg);
        }
        reps++;
        t_direct = now_s() - t0;
    } while (t_direct < 0.2);
    t_direct /= reps;
    fc_status st = bmask_compare(&slow, &direct, &err);
    if (st)
        printf("%7d  %-15s  DIRECT != SLOW: %s\n", (int)l, bm->name, err.msg);
    else
        printf("%7d  %-15s  %8lld  %12.3f  %12.3f  %10.0fx\n", (int)l, bm->name,
               (long long)(bmask_count_partial(&direct) + bmask_count_full(&direct)),
               t_slow * 1e3, t_direct * 1e6, t_slow / t_direct);
    fflush(stdout);
    bmask_free(&slow);
    bmask_free(&direct);
    seq_free(&s);
    return st ? CLI_FAIL : CLI_PASS;
}

/* The lengths to run: ls[0..nl). */
typedef struct lengths {
    int32_t ls[3];
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
    lengths l = {{4096, 16384, 65536}, 3};
    const cli_opt opts[] = {
        CLI_FLAG("quick", "L = 4k and 16k only", &l.nl, 2),
        CLI_FN("l", "N", "one length", parse_l, &l),
    };
    const cli_spec spec = {
        .cmd = CMD,
        .usage = "usage: flexcheck bench blockmask [--quick] [--l N]\n",
        .intro = "Slow vs direct builders, blocks 128x128, L in {4k, 16k, 64k}, four masks; the\n"
                 "two are checked equal before any time is printed.\n",
        .opts = opts,
        .nopts = sizeof opts / sizeof opts[0],
        .unknown = "unknown option '%s'",
        .exit_status = "exit status: 0 measured, 1 the builders disagree, 2 bad input.",
    };
    int nops, prc = cli_parse(&spec, argc, argv, &nops);
    if (prc != CLI_GO)
        return prc;
    printf("block-mask builders, blocks 128x128 (slow once, direct mean of repeats >= 0.2 s)\n");
    printf("%7s  %-15s  %8s  %12s  %12s  %11s\n", "L", "mask", "listed", "slow ms",
           "direct us", "slow/direct");
    int rc = CLI_PASS;
    for (int i = 0; i < l.nl; i++)
        for (size_t j = 0; j < sizeof masks / sizeof masks[0]; j++) {
            int r = run_one(l.ls[i], &masks[j]);
            if (r > rc)
                rc = r;
        }
    return rc;
}
