/*
 * emu_bench.cc - emu_bench_switches_per_sec (gpu/emu/emu_bench.h): a kernel written against
 * gpu/emu/emu.h directly, launched on one block so that one OS thread does all the work.
 *
 *   g++ -std=c++17 -O2 -Igpu/emu -c gpu/emu/emu_bench.cc   (part of build/libflexcheck.a)
 */
#include "gpu/emu/emu.h"
#include "gpu/emu/emu_bench.h"

#include <time.h>

static void k_barriers(int rounds, int *out)
{
    int acc = 0;
    for (int r = 0; r < rounds; r++) {
        acc += r;
        __syncthreads();
    }
    if (threadIdx.x == 0)
        *out = acc;
}

double emu_bench_switches_per_sec(int threads, int rounds)
{
    int *d;
    if (cudaMalloc((void **)&d, sizeof(int)) != cudaSuccess)
        return 0;
    cudaLaunchConfig_t cfg = cudaLaunchConfig_t();
    cfg.gridDim = dim3(1);
    cfg.blockDim = dim3((unsigned)threads);
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    cudaError_t e = cudaLaunchKernelEx(&cfg, k_barriers, rounds, d);
    clock_gettime(CLOCK_MONOTONIC, &b);
    cudaFree(d);
    if (e != cudaSuccess)
        return 0;
    /* Per round, every thread but the last arriver suspends and is resumed: 2 switches. */
    double sw = 2.0 * (threads - 1) * (double)rounds;
    return sw / ((double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec));
}
