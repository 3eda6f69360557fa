/*
 * gpu.h - the C API of flexcheck's flex-attention forward kernels (docs/semantics.md section 5).
 *
 * One call runs one kernel version on one backend over host arrays: inputs are converted to the
 * dtype's storage (float, __half or __nv_bfloat16), copied to the device, the kernel walks the
 * given block mask, and the outputs come back widened to float. Backends:
 *   GPU_BACKEND_EMU  the kernel's own .cu source compiled by g++ against gpu/emu/, on the CPU;
 *   GPU_BACKEND_CUDA the same source compiled by nvcc, on a real device (FC_EUNSUP when the
 *                    build has no CUDA or no device is present; the message says which).
 * Output buffers on the device carry guard bytes before and after (H6 sentinels); the call
 * reports whether they survived. Library code: status codes, never exits.
 */
#ifndef FLEXCHECK_GPU_H
#define FLEXCHECK_GPU_H

#include <stddef.h>

#include "masks/bmask.h"
#include "base/fc.h"
#include "masks/problem.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum gpu_backend { GPU_BACKEND_EMU = 0, GPU_BACKEND_CUDA = 1 } gpu_backend;

const char *gpu_backend_name(gpu_backend b); /* "emu", "gpu" */
fc_status gpu_backend_parse(const char *s, gpu_backend *out);

/* Kernel versions: 1 the plain second opinion, 2 the tiled tensor-core kernel (the default), 3
 * FlashAttention-2's structure for fp16/bf16 (fp32 runs version 2's path). */
#define GPU_MAX_KERNEL 3
#define GPU_DEFAULT_KERNEL 2

/* Largest head dims the version-1 kernel accepts (it keeps a row's q and accumulator in
 * per-thread arrays of this size). */
#define GPU_V1_MAX_HEAD_DIM 256

/* The head dims versions 2 and 3 (gpu/attn_v2.cuh, attn_v3.cuh) are compiled for. */
#define GPU_V2_HEAD_DIMS "D = Dv in {32, 64, 80, 96, 128, 256} and (D, Dv) = (96, 64)"

typedef struct gpu_call {
    const attn_problem *p;
    fc_dtype dtype;
    const float *q, *k, *v; /* host, values representable in dtype */
    const bmask *bm;        /* block mask for p (validated by the caller: bmask_validate) */
    int kernel;             /* version: 1 to GPU_MAX_KERNEL */
    gpu_backend backend;
    /* Paged K/V (kernels 2 and 3; NULL = contiguous K/V). page_table [B * nkb], nkb =
     * ceil(Lk / KB) with KB the block mask's kv_block_size (page size == KB): entry b * nkb + j
     * is the physical page in [0, num_pages) that holds keys [j * KB, (j + 1) * KB) of batch
     * entry b; entries are distinct. The launcher scatters k and v through it into caches
     * [num_pages, Hkv, KB, D] (slots no key maps to hold NaN) and the kernel reads them back
     * through the table; the output is bitwise that of the contiguous run. */
    const int32_t *page_table;
    int32_t num_pages;
} gpu_call;

typedef struct gpu_result {
    int sentinels_ok; /* 1 iff the guard bytes around O and LSE were untouched */
    ptrdiff_t sentinel_bad_offset; /* first changed guard byte, relative to the data */
    double kernel_ms; /* wall time of the launch + synchronize */
} gpu_result;

/* Runs the kernel: o [B,Hq,Lq,Dv] and lse [B,Hq,Lq] (host, float). */
fc_status gpu_attention(const gpu_call *c, float *o, float *lse, gpu_result *res, fc_err *err);

/* 1 iff the backend can run here (CUDA: built with nvcc and a device present); else 0 with the
 * reason in err. */
int gpu_backend_available(gpu_backend b, fc_err *err);

#ifdef __cplusplus
}
#endif

#endif
