/*
 * bench_kernel.c - 'flexcheck bench kernel [--backend emu|gpu]': kernel throughput side by side
 * with the reference in one run. Every output is judged under the gates before any time is
 * printed, so a fast wrong kernel cannot win. On the emu backend the figures are correctness
 * throughput on the CPU (EMU_THREADS OS threads, default nproc), never GPU speed, and the
 * process's CPU time of the kernel call is printed next to the wall time: on a machine shared
 * with other jobs it is the figure that still compares across runs (with OPENBLAS_NUM_THREADS=1:
 * OpenBLAS's threads spin for a while after the reference, and that would count). The emu's
 * fiber-switch rate is printed too.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "gpu/emu/emu_bench.h"
#include "fixtures/fix.h"
#include "judge/judge.h"
#include "base/progress.h"
#include "masks/mask.h"
#include "ref/ref.h"

static const char *const CMD = "bench kernel";

typedef struct kshape {
    const char *name;
    int32_t b, h, l, d;
    mask_params m;
    fc_dtype dt;
} kshape;

/* The GPU targets (ci/gpu_check.sh runs them next to PyTorch's compiled
 * flex_attention): far too large for the emu backend. */
static const kshape gpu_shapes[] = {
    {"fp16 causal L=8k D=128 B=1 H=16", 1, 16, 8192, 128, {.causal = 1}, FC_F16},
    {"fp16 causal W=1024 L=16k D=128 B=1 H=16", 1, 16, 16384, 128,
     {.causal = 1, .sliding_window = 1024}, FC_F16},
    {"fp16 dense L=16k D=128 B=1 H=16", 1, 16, 16384, 128, {0}, FC_F16},
};

static const kshape shapes[] = {
    {"S=512 D=64 B=1 H=2 dense", 1, 2, 512, 64, {0}, FC_F32},
    {"S=512 D=64 B=1 H=2 dense fp16", 1, 2, 512, 64, {0}, FC_F16},
    {"S=512 D=64 B=1 H=2 dense bf16", 1, 2, 512, 64, {0}, FC_BF16},
    {"S=512 D=64 B=1 H=2 causal", 1, 2, 512, 64, {.causal = 1}, FC_F32},
    {"S=512 D=64 B=1 H=2 causal fp16", 1, 2, 512, 64, {.causal = 1}, FC_F16},
    {"S=2048 D=128 B=1 H=2 causal W=256 bf16", 1, 2, 2048, 128,
     {.causal = 1, .sliding_window = 256}, FC_BF16},
};

/* The block mask's listed tiles (one head: the bench's masks broadcast), printed on every
 * kernel line: the window's speed-up over dense is judged against their ratio (what skipping
 * blocks allows), ci/bench_torch_flex.py. */
static void print_blocks(const bmask *bm)
{
    long long full = bmask_count_full(bm), partial = bmask_count_partial(bm);
    printf("  %lld blocks (%lld full, %lld partial)\n", full + partial, full, partial);
}

/* One shape: its inputs, oracle, block mask and baselines made once, then each kernel of
 * kernels[0..nk) judged under the gates (two runs: H6, H7) and timed on those same inputs, so
 * kernels side by side differ only in the kernel. 0 measured, 1 a kernel failed the gates
 * (the others still run), 2 bad input. */
static int run_shape(const kshape *s, gpu_backend be, const int *kernels, int nk, int reps)
{
    fix_gen_params gp = {.name = "bench", .dtype = s->dt, .b = s->b, .hq = s->h, .hkv = s->h,
                         .lq = s->l, .lk = s->l, .d = s->d, .dv = s->d, .mask = s->m,
                         .qb = 128, .kb = 128, .seed = 5};
    fix_case fc;
    bmask bm;
    fc_err err;
    if (fix_gen_case(&gp, &fc, &err))
        return cli_usage_error(CMD, "%s", err.msg);
    if (bmask_build(&bm, BMASK_DIRECT, s->m, &fc.prob.seq, 128, 128, &err)) {
        fix_case_free(&fc);
        return cli_usage_error(CMD, "%s", err.msg);
    }
    int rc = CLI_PASS;
    judge_case jc = fix_judge_case(&fc);
    judge_bufs jb;
    if (judge_bufs_alloc(&jb, &jc, &err)) {
        bmask_free(&bm);
        fix_case_free(&fc);
        return cli_usage_error(CMD, "%s", err.msg);
    }
    if (judge_baseline(&jc, &jb.lp, &err)) {
        rc = cli_usage_error(CMD, "%s", err.msg);
        goto done;
    }
    /* emu: the fp32 reference once a shape (best of reps), beside every kernel's time */
    double best_r = 1e30;
    for (int r = 0; be == GPU_BACKEND_EMU && r < reps; r++) {
        double t0 = fc_now_s();
        if (ref_attention_f32(&fc.prob, fc.q, fc.k, fc.v, jb.o, jb.lse, &err)) {
            rc = cli_usage_error(CMD, "%s", err.msg);
            goto done;
        }
        double tr = (fc_now_s() - t0) * 1e3;
        if (tr < best_r)
            best_r = tr;
    }
    for (int i = 0; i < nk; i++) {
        const int kernel = kernels[i];
        judge_opts jo = {.kernel = kernel};
        rep_row row;
        memset(&row, 0, sizeof row);
        judge_run_in in = {.jo = &jo, .backend = be, .jc = &jc, .bm = &bm, .lp = &jb.lp,
                           .o = jb.o, .lse = jb.lse, .rerun = 1};
        if (judge_run(&in, &row) != 1) { /* failed, skipped or in error: row.reason says */
            printf("  %-40s kernel %d FAILS the gates: %s\n", s->name, kernel, row.reason);
            rc = CLI_FAIL;
            continue;
        }
        double best_k = 1e30, best_cpu = 1e30;
        gpu_call call = {.p = &fc.prob, .dtype = fc.dtype, .q = fc.q, .k = fc.k, .v = fc.v,
                         .bm = &bm, .kernel = kernel, .backend = be};
        for (int r = 0; r < reps; r++) {
            gpu_result res;
            const double c0 = fc_clock_s(CLOCK_PROCESS_CPUTIME_ID);
            if (gpu_attention(&call, jb.o, jb.lse, &res, &err)) {
                rc = cli_usage_error(CMD, "%s", err.msg);
                goto done;
            }
            const double cpu = (fc_clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0) * 1e3;
            if (res.kernel_ms < best_k)
                best_k = res.kernel_ms;
            if (cpu < best_cpu)
                best_cpu = cpu;
        }
        printf("  %-40s kernel %d: %9.3f ms", s->name, kernel, best_k);
        if (be == GPU_BACKEND_CUDA) {
            /* TFLOP/s over the allowed pairs only (4 flops per pair and dimension: QK^T and
             * PV), counted as ci/bench_torch_flex.py counts PyTorch's, which prints the
             * ratio. No CPU reference: it says nothing of a GPU's speed (and takes minutes at
             * 16k). */
            double pairs = 0;
            for (int32_t q = 0; q < s->l; q++) {
                int32_t lo, hi;
                mask_row_range(s->m, q, s->l, &lo, &hi);
                pairs += hi > lo ? hi - lo : 0;
            }
            printf("  %8.3f TFLOP/s", 4.0 * s->b * s->h * pairs * s->d / (best_k * 1e-3) / 1e12);
        } else {
            /* emu: the whole call's CPU time; the upload and download are a small part */
            printf(" (CPU %9.2f ms)", best_cpu);
            printf("   fp32 reference: %8.2f ms   kernel/ref %6.1fx", best_r, best_k / best_r);
        }
        print_blocks(&bm);
    }
done:
    judge_bufs_free(&jb);
    bmask_free(&bm);
    fix_case_free(&fc);
    return rc;
}

/* --kernel: one version, or several comma-separated ("2,3"), each at most once, run in that
 * order on each shape. kernels_sel.n == 0: every version. */
typedef struct kernels_sel {
    int n;
    int k[GPU_MAX_KERNEL];
} kernels_sel;

static int parse_kernels(const char *cmd, const char *opt, const char *v, void *dst)
{
    kernels_sel *sel = dst;
    sel->n = 0;
    for (const char *p = v;; p++) {
        size_t len = strcspn(p, ",");
        char buf[16];
        int32_t k;
        if (len == 0 || len >= sizeof buf)
            return cli_usage_error(cmd, "%s '%s': kernel versions 1 to %d, comma-separated", opt,
                                   v, GPU_MAX_KERNEL), -1;
        memcpy(buf, p, len);
        buf[len] = '\0';
        if (cli_parse_i32(cmd, opt, buf, 1, GPU_MAX_KERNEL, &k))
            return -1;
        for (int i = 0; i < sel->n; i++)
            if (sel->k[i] == k)
                return cli_usage_error(cmd, "%s '%s': kernel %d named twice", opt, v, (int)k), -1;
        sel->k[sel->n++] = k; /* at most GPU_MAX_KERNEL distinct versions fit */
        p += len;
        if (!*p)
            return 0;
    }
}

static int parse_backend(const char *cmd, const char *opt, const char *v, void *dst)
{
    if (gpu_backend_parse(v, dst))
        return cli_usage_error(cmd, "%s '%s': emu or gpu", opt, v), -1;
    return 0;
}

int bench_kernel(int argc, char **argv)
{
    gpu_backend be = GPU_BACKEND_EMU;
    kernels_sel sel = {0}; /* none named: every version, side by side */
    int32_t reps = 3;
    int32_t only = 0;             /* 0: every shape of the set */
    int gpu_set = 0;
    fc_err err;
    const cli_opt opts[] = {
        CLI_FN("backend", "B", "emu (default) or gpu", parse_backend, &be),
        CLI_FN("kernel", "K", "a kernel version, 1, 2 or 3, or several comma-separated (2,3):\n"
               "side by side on each shape's one set of inputs (default: every\n"
               "version)", parse_kernels, &sel),
        CLI_INT("reps", "N", "best of N runs (default 3)", &reps, 1, 1000),
        CLI_FLAG("gpu-shapes", "the GPU targets (fp16 causal L=8k D=128; causal W=1024 and\n"
                 "dense at L=16k) instead of the small emu shapes", &gpu_set, 1),
        CLI_INT("shape", "I", "only the I-th shape of the set (1-based; e.g. one shape under\n"
                "a profiler, ci/gpu_check.sh)", &only, 1, 100),
    };
    const cli_spec spec = {
        .cmd = CMD,
        .usage = "usage: flexcheck bench kernel [--backend emu|gpu] [--kernel K[,K...]] [--reps N] "
                 "[--gpu-shapes] [--shape I]\n",
        .intro = "Kernel time (launch + synchronize, best of N), after checking the kernel passes\n"
                 "the gates on the same inputs: on emu next to the fp32 reference, on gpu as\n"
                 "TFLOP/s over the allowed pairs (ci/bench_torch_flex.py puts PyTorch's beside\n"
                 "it).\n",
        .opts = opts,
        .nopts = sizeof opts / sizeof opts[0],
        .unknown = "unknown option '%s'",
        .exit_status = "exit status: 0 measured, 1 a kernel failed the gates, 2 bad input.",
    };
    int nops, prc = cli_parse(&spec, argc, argv, &nops);
    if (prc != CLI_GO)
        return prc;
    const kshape *set = gpu_set ? gpu_shapes : shapes;
    size_t nset = gpu_set ? sizeof gpu_shapes / sizeof gpu_shapes[0]
                          : sizeof shapes / sizeof shapes[0];
    if (only > (int32_t)nset)
        return cli_usage_error(CMD, "--shape %d: the set has %zu shapes", (int)only, nset);
    if (!gpu_backend_available(be, &err))
        return cli_usage_error(CMD, "--backend %s: %s", gpu_backend_name(be), err.msg);
    const char *threads = getenv("EMU_THREADS");
    printf("kernel throughput on backend %s%s%s (best of %d; emu times are CPU times)\n",
           gpu_backend_name(be), be == GPU_BACKEND_EMU ? ", EMU_THREADS=" : "",
           be == GPU_BACKEND_EMU ? (threads ? threads : "nproc") : "", (int)reps);
    int rc = CLI_PASS;
    if (sel.n == 0)
        for (int k = 1; k <= GPU_MAX_KERNEL; k++)
            sel.k[sel.n++] = k;
    for (size_t i = only ? (size_t)only - 1 : 0; i < (only ? (size_t)only : nset); i++) {
        int r = run_shape(&set[i], be, sel.k, sel.n, reps);
        if (r > rc)
            rc = r;
    }
    if (be == GPU_BACKEND_EMU)
        printf("  emu fiber switches: %.1f M/s (block of 256 threads, one OS thread)\n",
               emu_bench_switches_per_sec(256, 2000) / 1e6);
    return rc;
}
