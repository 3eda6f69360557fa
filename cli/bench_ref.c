/*
 * bench_ref.c - 'flexcheck bench ref': the fp32 reference's GFLOP/s next to plain sgemm of
 * the same sizes, measured in the same run, so the ratio says how much the mask and the
 * softmax pass cost on this machine. The targets (one thread, L = 4k, dense and causal): at
 * least 0.80 of the sgemm rate at D = 128 and 0.65 at D = 64, where exp and the mask weigh
 * more against the shorter products. Never pass/fail: machines are shared and noisy.
 *
 *   flexcheck bench ref                     L in {1k, 4k, 16k} x D in {64, 128} x {dense, causal}
 *   flexcheck bench ref --quick             L = 4k, D in {64, 128}, dense and causal
 *   flexcheck bench ref --L 4096 --D 128 --mask dense --reps 5 --threads 2
 *
 * One batch entry, one head, Lq = Lk = L, Dv = D. The sgemm baseline runs the two products
 * of dense attention (S = Q.K^T, then O = S.V) in row blocks of up to 2048 query rows so a
 * 16k x 16k score matrix never has to exist; blocks that size run at the full sgemm rate.
 * Flops: 2 * pairs * (D + Dv), pairs = the allowed (query, key) pairs (L^2 dense,
 * L(L+1)/2 causal), so the causal ratio counts only useful work. Times are the best of
 * --reps runs, the two sides interleaved. Both sides run with the same OpenBLAS thread
 * count: 1 unless --threads is given (the targets are single-threaded; with more, the
 * reference spreads its panels over as many workers). The header names the expf the
 * reference's softmax uses here (SLEEF's AVX2 one, or libm's on other machines).
 */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/progress.h"
#include "cli/cli.h"
#include "masks/problem.h"
#include "ref/ref.h"

#define CMD "bench ref"
#define SGEMM_ROWS 2048

typedef struct bench_cfg {
    int32_t l, d, causal;
} bench_cfg;

typedef struct bench_opts {
    int32_t l, d, reps, threads; /* l, d: 0 = sweep */
    int quick;
    int mask; /* -1 both, 0 dense, 1 causal */
} bench_opts;

/* Uniform in [-1, 1) from a 64-bit LCG: reproducible, and the values do not matter. */
static void fill_random(float *x, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((double)(seed >> 40) / (double)(1ull << 23) - 1.0);
    }
}

typedef struct bench_data {
    float *q, *k, *v, *o, *lse, *s;
} bench_data;

static void free_data(bench_data *b)
{
    free(b->q);
    free(b->k);
    free(b->v);
    free(b->o);
    free(b->lse);
    free(b->s);
}

static int alloc_data(bench_data *b, int32_t l, int32_t d)
{
    size_t ld = (size_t)l * (size_t)d, rows = l < SGEMM_ROWS ? (size_t)l : SGEMM_ROWS;
    memset(b, 0, sizeof *b);
    b->q = malloc(ld * sizeof(float));
    b->k = malloc(ld * sizeof(float));
    b->v = malloc(ld * sizeof(float));
    b->o = malloc(ld * sizeof(float));
    b->lse = malloc((size_t)l * sizeof(float));
    b->s = malloc(rows * (size_t)l * sizeof(float));
    if (!b->q || !b->k || !b->v || !b->o || !b->lse || !b->s) {
        free_data(b);
        return -1;
    }
    fill_random(b->q, ld, 1);
    fill_random(b->k, ld, 2);
    fill_random(b->v, ld, 3);
    return 0;
}

/* The two products of dense attention, nothing else. */
static double time_sgemm(const bench_data *b, int32_t l, int32_t d)
{
    double t0 = fc_now_s();
    for (int32_t r0 = 0; r0 < l; r0 += SGEMM_ROWS) {
        int32_t rows = l - r0 < SGEMM_ROWS ? l - r0 : SGEMM_ROWS;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, l, d, 1.0f,
                    b->q + (size_t)r0 * d, d, b->k, d, 0.0f, b->s, l);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, d, l, 1.0f, b->s, l, b->v,
                    d, 0.0f, b->o + (size_t)r0 * d, d);
    }
    return fc_now_s() - t0;
}

static int time_ref(const attn_problem *p, const bench_data *b, double *secs)
{
    fc_err err = {{0}};
    double t0 = fc_now_s();
    fc_status st = ref_attention_f32(p, b->q, b->k, b->v, b->o, b->lse, &err);
    *secs = fc_now_s() - t0;
    if (st) {
        cli_say(CMD, "reference failed: %s", err.msg);
        return -1;
    }
    return 0;
}

static int run_cfg(const bench_cfg *c, int32_t reps)
{
    attn_problem p = {.hq = 1, .hkv = 1, .d = c->d, .dv = c->d,
                      .scale = 1.0 / sqrt((double)c->d), .mask = {.causal = c->causal}};
    fc_err err = {{0}};
    bench_data b;
    if (seq_init_dense(&p.seq, 1, c->l, c->l, &err)) {
        cli_say(CMD, "%s", err.msg);
        return CLI_BADINPUT;
    }
    if (alloc_data(&b, c->l, c->d)) {
        attn_problem_free(&p);
        cli_say(CMD, "out of memory at L = %d, D = %d", (int)c->l,
                (int)c->d);
        return CLI_FAIL;
    }
    double best_ref = INFINITY, best_gemm = INFINITY;
    int rc = CLI_PASS;
    for (int32_t r = 0; r < reps && rc == CLI_PASS; r++) {
        double t_ref, t_gemm = time_sgemm(&b, c->l, c->d); /* interleaved: same conditions */
        if (time_ref(&p, &b, &t_ref))
            rc = CLI_FAIL;
        best_ref = t_ref < best_ref ? t_ref : best_ref;
        best_gemm = t_gemm < best_gemm ? t_gemm : best_gemm;
    }
    if (rc == CLI_PASS) {
        double l = (double)c->l, pairs = c->causal ? l * (l + 1) / 2 : l * l;
        double gf_ref = 2.0 * pairs * 2.0 * c->d / best_ref * 1e-9;
        double gf_gemm = 2.0 * l * l * 2.0 * c->d / best_gemm * 1e-9;
        printf("%6d %4d %-7s %10.1f %10.1f %10.1f %10.1f %7.2f\n", (int)c->l, (int)c->d,
               c->causal ? "causal" : "dense", best_ref * 1e3, gf_ref, best_gemm * 1e3, gf_gemm,
               gf_ref / gf_gemm);
        fflush(stdout);
    }
    free_data(&b);
    attn_problem_free(&p);
    return rc;
}

static int parse_mask(const char *cmd, const char *opt, const char *v, void *dst)
{
    if (strcmp(v, "dense") && strcmp(v, "causal"))
        return cli_usage_error(cmd, "%s: '%s' is not dense or causal", opt, v), -1;
    *(int *)dst = !strcmp(v, "causal");
    return 0;
}

/* Returns CLI_GO or the exit status (help printed, or bad input). */
static int parse_opts(int argc, char **argv, bench_opts *o)
{
    *o = (bench_opts){.reps = 3, .threads = 1, .mask = -1};
    const cli_opt opts[] = {
        CLI_FLAG("quick", "only L = 4096 (the targets), D = 64 and 128, dense and causal",
                 &o->quick, 1),
        CLI_INT("L", "N", "one sequence length instead of {1024, 4096, 16384}", &o->l, 1,
                1 << 17),
        CLI_INT("D", "N", "one head dim instead of {64, 128}", &o->d, 1, 1024),
        CLI_FN("mask", "M", "dense or causal only (default both)", parse_mask, &o->mask),
        CLI_INT("reps", "N", "best of N runs (default 3)", &o->reps, 1, 1000),
        CLI_INT("threads", "N", "OpenBLAS threads for both sides (default 1)", &o->threads, 1,
                1024),
    };
    const cli_spec spec = {
        .cmd = CMD,
        .usage = "usage: flexcheck bench ref [--quick] [--L N] [--D N] [--mask dense|causal]\n"
                 "                           [--reps N] [--threads N]\n",
        .intro = "fp32 reference attention GFLOP/s next to plain sgemm of the same sizes.\n",
        .opts = opts,
        .nopts = sizeof opts / sizeof opts[0],
        .unknown = "unknown option '%s'",
        .exit_status = "exit status: 0 measured, 1 the reference failed or ran out of memory, "
                       "2 bad input.",
    };
    int nops;
    return cli_parse(&spec, argc, argv, &nops);
}

int bench_ref(int argc, char **argv)
{
    bench_opts o;
    int prc = parse_opts(argc, argv, &o);
    if (prc != CLI_GO)
        return prc;
    int blas_threads = openblas_get_num_threads(); /* restored for the parts after this one */
    openblas_set_num_threads(o.threads);
    static const int32_t sweep_l[] = {1024, 4096, 16384}, sweep_d[] = {64, 128};
    int32_t ls[3], ds[2], nl = 0, nd = 0;
    if (o.l || o.quick)
        ls[nl++] = o.l ? o.l : 4096;
    else
        for (int i = 0; i < 3; i++)
            ls[nl++] = sweep_l[i];
    if (o.d)
        ds[nd++] = o.d;
    else
        for (int i = 0; i < 2; i++)
            ds[nd++] = sweep_d[i];
    printf("bench ref: fp32 reference vs plain sgemm, B = 1, H = 1, best of %d, "
           "OpenBLAS threads %d\n"
           "softmax exp: %s; targets at L = 4096, 1 thread: ratio >= 0.80 (D = 128), "
           ">= 0.65 (D = 64)\n",
           (int)o.reps, openblas_get_num_threads(), ref_f32_exp_name());
    printf("%6s %4s %-7s %10s %10s %10s %10s %7s\n", "L", "D", "mask", "ref ms", "ref GF/s",
           "sgemm ms", "sgemm GF/s", "ratio");
    int rc = CLI_PASS;
    for (int il = 0; il < nl; il++)
        for (int id = 0; id < nd; id++)
            for (int32_t causal = 0; causal <= 1; causal++) {
                if (o.mask >= 0 && causal != o.mask)
                    continue;
                bench_cfg c = {.l = ls[il], .d = ds[id], .causal = causal};
                int r = run_cfg(&c, o.reps);
                rc = r > rc ? r : rc;
            }
    openblas_set_num_threads(blas_threads);
    return rc;
}
