/*
 * emut_bench.c - `make emu-bench`: the emu backend's speed, as numbers to compare, never a
 * pass/fail: fiber switches per second (gpu/emu/emu_bench.h) for a few block sizes, and the
 * small flash-attention kernel of emut_kernels.cu at S=512, D=64, one head (set EMU_THREADS=1
 * for the one-core figure).
 */
#include "gpu/emu/emu_bench.h"
#include "tests/emu/emut.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

int main(void)
{
    static const int threads[] = {32, 128, 256, 1024};
    for (int i = 0; i < 4; i++) {
        double best = 0;
        for (int rep = 0; rep < 3; rep++) {
            double r = emu_bench_switches_per_sec(threads[i], 20000 * 128 / threads[i]);
            best = r > best ? r : best;
        }
        printf("emu fiber switches: block %4d threads: %6.1f M/s (%.1f ns per switch)\n", threads[i], best / 1e6,
               best > 0 ? 1e9 / best : 0.0);
    }
    enum { S = 512, H = 1 };
    size_t n = (size_t)S * H * 64;
    float *q = malloc(n * 4), *k = malloc(n * 4), *v = malloc(n * 4), *o = malloc(n * 4);
    for (size_t i = 0; i < n; i++)
        q[i] = k[i] = v[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
    double best = 1e30;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = now();
        if (emut_attention_emu(S, H, q, k, v, o) != 0)
            return 1;
        double t = now() - t0;
        best = t < best ? t : best;
    }
    const char *th = getenv("EMU_THREADS");
    printf("emu flash-attention forward S=%d D=64 H=%d fp32: %.1f ms (EMU_THREADS=%s)\n", S, H, best * 1e3, th ? th : "nproc");
    free(q); free(k); free(v); free(o);
    return 0;
}
