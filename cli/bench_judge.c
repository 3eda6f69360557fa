/*
 * bench_judge.c - 'flexcheck bench judge': judging one output in process (include/flexcheck.h,
 * what flexcheck.judge calls from a test suite) next to the float64 oracle alone on the same
 * case, measured in the same run. The target: judging costs at most twice the oracle, so a test
 * suite can judge per test. Judging is the oracle, the same-precision baseline, the gates and
 * the verdict's text; a failed output adds its diagnosis (timed too, not a target).
 *
 *   flexcheck bench judge                   B 1, Hq 8, Hkv 2, L 1024, D 64, float16, causal W 256
 *   flexcheck bench judge --L 4096 --reps 5
 *
 * The output judged is the oracle rounded to float16 (it passes), and for the failing path the
 * oracle of window W + 1 (it fails, and is diagnosed). Best of --reps runs, the sides
 * interleaved, OpenBLAS on one thread. Never pass/fail: machines are shared and noisy.
 */
#include <cblas.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/lowp.h"
#include "cli/cli.h"
#include "include/flexcheck.h"
#include "ref/ref.h"

#define CMD "bench judge"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

typedef struct setup {
    attn_problem p;
    float *q, *k, *v, *o_pass, *o_fail, *lse_pass, *lse_fail;
    double *o64, *l64;
    size_t nq, nk, no, nl;
} setup;

static void setup_free(setup *s)
{
    free(s->q);
    free(s->k);
    free(s->v);
    free(s->o_pass);
    free(s->o_fail);
    free(s->lse_pass);
    free(s->lse_fail);
    free(s->o64);
    free(s->l64);
    attn_problem_free(&s->p);
}

/* Inputs in float16, and the two outputs under test from our oracle (W, then W + 1). */
static int make(setup *s, int32_t l, int32_t w, fc_err *err)
{
    memset(s, 0, sizeof *s);
    if (seq_init_dense(&s->p.seq, 1, l, l, err))
        return -1;
    s->p.hq = 8;
    s->p.hkv = 2;
    s->p.d = s->p.dv = 64;
    s->p.scale = 0.125;
    s->p.mask = (mask_params){.causal = 1, .sliding_window = w};
    s->nq = attn_q_elems(&s->p);
    s->nk = attn_k_elems(&s->p);
    s->no = attn_o_elems(&s->p);
    s->nl = attn_lse_elems(&s->p);
    s->q = malloc(s->nq * sizeof *s->q);
    s->k = malloc(s->nk * sizeof *s->k);
    s->v = malloc(s->nk * sizeof *s->v);
    s->o_pass = malloc(s->no * sizeof(float));
    s->o_fail = malloc(s->no * sizeof(float));
    s->lse_pass = malloc(s->nl * sizeof(float));
    s->lse_fail = malloc(s->nl * sizeof(float));
    s->o64 = malloc(s->no * sizeof(double));
    s->l64 = malloc(s->nl * sizeof(double));
    if (!s->q || !s->k || !s->v || !s->o_pass || !s->o_fail || !s->lse_pass || !s->lse_fail ||
        !s->o64 || !s->l64)
        return fc_errf(err, FC_ENOMEM, "out of memory"), -1;
    uint64_t seed = 42;
    float *in[3] = {s->q, s->k, s->v};
    size_t n[3] = {s->nq, s->nk, s->nk};
    for (int a = 0; a < 3; a++)
        for (size_t i = 0; i < n[a]; i++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            in[a][i] = fc_round((float)((double)(seed >> 40) / (double)(1ull << 23) - 1.0), FC_F16);
        }
    for (int pass = 1; pass >= 0; pass--) {
        s->p.mask.sliding_window = pass ? w : w + 1;
        if (ref_attention_f64(&s->p, s->q, s->k, s->v, s->o64, s->l64, err))
            return -1;
        float *o = pass ? s->o_pass : s->o_fail, *lse = pass ? s->lse_pass : s->lse_fail;
        for (size_t i = 0; i < s->no; i++)
            o[i] = fc_round((float)s->o64[i], FC_F16);
        for (size_t i = 0; i < s->nl; i++)
            lse[i] = (float)s->l64[i];
    }
    s->p.mask.sliding_window = w;
    return 0;
}

/* One judging through the public API: its seconds, and the outcome into *outcome. */
static double judge_once(const setup *s, int32_t l, int32_t w, const float *o, const float *lse,
                         int *outcome, fc_err *err)
{
    flexcheck_problem *p = flexcheck_problem_new();
    flexcheck_verdict *v = NULL;
    double t0 = now(), t = -1;
    if (p && !flexcheck_problem_set_shape(p, 1, 8, 2, l, l, 64, 64) &&
        !flexcheck_problem_set_dtype(p, "float16") && !flexcheck_problem_set_mask(p, 1, w, 0) &&
        !flexcheck_problem_set_scale(p, 0.125) &&
        !flexcheck_judge(p, s->q, s->nq, s->k, s->nk, s->v, s->nk, o, s->no, lse, s->nl, &v)) {
        t = now() - t0;
        *outcome = (int)flexcheck_verdict_outcome(v);
    } else {
        fc_errf(err, FC_EINVAL, "%s", p ? flexcheck_problem_errmsg(p) : "out of memory");
    }
    flexcheck_verdict_free(v);
    flexcheck_problem_free(p);
    return t;
}

int bench_judge(int argc, char **argv)
{
    int32_t l = 1024, w = 256, reps = 5;
    const cli_opt table[] = {
        CLI_INT("L", "N", "sequence length (default 1024)", &l, 16, 65536),
        CLI_INT("window", "W", "sliding window, causal (default 256)", &w, 1, 65536),
        CLI_INT("reps", "N", "best of N runs (default 5)", &reps, 1, 1000),
    };
    const cli_spec spec = {
        .cmd = CMD,
        .usage = "usage: flexcheck bench judge [--L N] [--window W] [--reps N]\n",
        .intro = "Judging one float16 output in process (include/flexcheck.h) next to the\n"
                 "float64 oracle alone, B 1, Hq 8, Hkv 2, D 64, causal window W, in one run.\n",
        .opts = table,
        .nopts = sizeof table / sizeof table[0],
        .exit_status = "exit status: 0 measured, 1 a judgement was not what it must be, 2 bad "
                       "input.",
    };
    int nops, rc = cli_parse(&spec, argc, argv, &nops);
    if (rc != CLI_GO)
        return rc;
    openblas_set_num_threads(1);
    setup s;
    fc_err err;
    if (make(&s, l, w, &err)) {
        setup_free(&s);
        return cli_usage_error(CMD, "%s", err.msg);
    }
    double best[3] = {1e30, 1e30, 1e30}; /* oracle, judge (pass), judge (fail) */
    int outcome[2] = {-1, -1};
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        if (ref_attention_f64(&s.p, s.q, s.k, s.v, s.o64, s.l64, &err))
            break;
        double t = now() - t0;
        best[0] = t < best[0] ? t : best[0];
        for (int f = 0; f < 2; f++) {
            t = judge_once(&s, l, w, f ? s.o_fail : s.o_pass, f ? s.lse_fail : s.lse_pass,
                           &outcome[f], &err);
            if (t < 0)
                break;
            best[1 + f] = t < best[1 + f] ? t : best[1 + f];
        }
    }
    setup_free(&s);
    if (best[0] >= 1e30 || best[1] >= 1e30 || best[2] >= 1e30)
        return cli_usage_error(CMD, "%s", err.msg);
    printf("judge in process, B 1, Hq 8, Hkv 2, L %d, D 64, float16, causal W %d, best of %d, "
           "1 thread:\n", (int)l, (int)w, (int)reps);
    printf("  float64 oracle alone          %9.2f ms\n", 1e3 * best[0]);
    printf("  judge, a passing output       %9.2f ms  %.2fx the oracle (target <= 2x)\n",
           1e3 * best[1], best[1] / best[0]);
    printf("  judge, a failing output       %9.2f ms  %.2fx the oracle (with its diagnosis)\n",
           1e3 * best[2], best[2] / best[0]);
    if (outcome[0] != FLEXCHECK_PASS || outcome[1] != FLEXCHECK_FAIL) {
        printf("bench judge: the right output %s and the W+1 one %s: the timings above judged "
               "something else\n", outcome[0] == FLEXCHECK_PASS ? "passed" : "did not pass",
               outcome[1] == FLEXCHECK_FAIL ? "failed" : "did not fail");
        return CLI_FAIL;
    }
    return CLI_PASS;
}
