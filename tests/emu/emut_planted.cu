/*
 * emut_planted.cu - kernels with planted bugs, for the emu's sanitizer builds: a missing
 * __syncthreads, a missing __syncwarp (before plain reads, and before ldmatrix, one of the
 * warp-wide instructions of gpu/ptx.cuh), and out-of-bounds writes to global, dynamic shared and
 * static shared memory. emut_planted("clean") runs the same kernels correctly, which is what
 * the sanitizer builds must pass; tests/test_emu.c runs each bug in a child process of the
 * ASan or race build and expects it caught, at the line emut_planted_line() names.
 *
 *   built like emut_kernels.cu; the sanitizer variants by gpu/module.mk (emu-asan, emu-race).
 */
#include <cuda_runtime.h>
#include <string.h>

#include "gpu/emu/emu_compat.h"
#include "gpu/ptx.cuh"
#include "tests/emu/emut.h"

/* Every thread publishes a value and reads its neighbour's: correct only with the barrier. */
__global__ void k_neighbour(int sync, int *out)
{
    __shared__ float s[128];
    int t = threadIdx.x;
    s[t] = 2.0f * t; /* LINE race_block_write */
    if (sync)
        __syncthreads();
    out[t] = (int)s[(t + 1) % blockDim.x]; /* LINE race_block_read */
}

/* Warp-synchronous exchange: on Volta and later it needs __syncwarp between the two. */
__global__ void k_warp_exchange(int sync, int *out)
{
    __shared__ int w[64];
    int t = threadIdx.x;
    w[t] = t * t; /* LINE race_warp_write */
    if (sync)
        __syncwarp();
    out[t] = w[t ^ 1]; /* LINE race_warp_read */
}

/* ldmatrix (gpu/ptx.cuh) loads the rows whose addresses the lanes give; here each row was
 * written by another lane, so it needs the __syncwarp too (the PTX ISA promises no memory
 * ordering for the instruction's own .sync). */
__global__ void k_ldmatrix(int sync, int *out)
{
    __shared__ __align__(16) uint16_t rows[32 * 8];
    int t = threadIdx.x;
    for (int c = 0; c < 8; c++)
        rows[(t + 1) % 32 * 8 + c] = (uint16_t)(t * 8 + c); /* LINE race_ldmatrix_write */
    if (sync)
        __syncwarp();
    uint32_t r[4];
    FC_GPU_NS::ldmatrix_x4(r, rows + t * 8); /* LINE race_ldmatrix_read */
    out[t] = (int)(r[0] ^ r[1] ^ r[2] ^ r[3]);
}

/* n threads write n + extra elements of out. */
__global__ void k_fill(int n, int extra, int *out)
{
    int t = threadIdx.x;
    out[t] = t;
    if (t == n - 1 && extra)
        out[n] = -1; /* LINE oob_global */
}

__global__ void k_dyn(int nints, int extra, int *out)
{
    EMU_DYNAMIC_SHARED(int, d);
    int t = threadIdx.x;
    d[t] = t;
    if (t == 0 && extra)
        d[nints] = 7; /* LINE oob_dynamic_shared */
    __syncthreads();
    out[t] = d[(t + 1) % nints];
}

__global__ void k_static(int idx, int *out)
{
    __shared__ int tile[64];
    int t = threadIdx.x;
    tile[t] = t;
    __syncthreads();
    if (t == 0)
        tile[idx] = 5; /* LINE oob_static_shared */
    __syncthreads();
    out[t] = tile[t];
}

static int run(const char *name, int *d)
{
    int bug_block = !strcmp(name, "race_block"), bug_warp = !strcmp(name, "race_warp");
    int bug_ldm = !strcmp(name, "race_ldmatrix");
    int bug_global = !strcmp(name, "oob_global"), bug_dyn = !strcmp(name, "oob_dynamic_shared");
    int bug_static = !strcmp(name, "oob_static_shared"), clean = !strcmp(name, "clean");
    if (!(bug_block || bug_warp || bug_ldm || bug_global || bug_dyn || bug_static || clean))
        return cudaErrorInvalidValue;
    if (clean || bug_block)
        GPU_CHECK(GPU_LAUNCH(k_neighbour, dim3(2), dim3(128), 0, 0, (int)clean, d));
    if (clean || bug_warp)
        GPU_CHECK(GPU_LAUNCH(k_warp_exchange, dim3(1), dim3(64), 0, 0, (int)clean, d));
    if (clean || bug_ldm)
        GPU_CHECK(GPU_LAUNCH(k_ldmatrix, dim3(1), dim3(32), 0, 0, (int)clean, d));
    if (clean || bug_global)
        GPU_CHECK(GPU_LAUNCH(k_fill, dim3(1), dim3(64), 0, 0, 64, (int)bug_global, d));
    if (clean || bug_dyn)
        GPU_CHECK(GPU_LAUNCH(k_dyn, dim3(1), dim3(64), 64 * sizeof(int), 0, 64, (int)bug_dyn, d));
    if (clean || bug_static)
        GPU_CHECK(GPU_LAUNCH(k_static, dim3(1), dim3(64), 0, 0, bug_static ? 64 : 63, d));
    return cudaDeviceSynchronize();
}

extern "C" int GPU_SYM(emut_planted)(const char *name)
{
    int *d;
    /* Exactly 128 ints: k_fill's planted write lands one past the end of a 64-int buffer. */
    GPU_CHECK(cudaMalloc((void **)&d, (!strcmp(name, "oob_global") ? 64 : 128) * sizeof(int)));
    int e = run(name, d);
    cudaFree(d);
    return e;
}

/* The source line of a planted bug: the line of this file carrying the marker comment. */
extern "C" int GPU_SYM(emut_planted_line)(const char *name)
{
    FILE *f = fopen(__FILE__, "r");
    char line[256], marker[64];
    int n = 0, found = 0;
    snprintf(marker, sizeof marker, "/* LINE %s */", name);
    if (!f)
        return 0;
    while (fgets(line, sizeof line, f)) {
        n++;
        if (strstr(line, marker)) {
            found = n;
            break;
        }
    }
    fclose(f);
    return found;
}
