/*
 * attn_common.cuh - what every flex-attention kernel version shares: the argument block (plain
 * data, passed by value to the kernel) and the dtype helpers. Compiled by nvcc for the device
 * and by g++ against gpu/emu/ (gpu_rt.h picks which).
 */
#ifndef FLEXCHECK_ATTN_COMMON_CUH
#define FLEXCHECK_ATTN_COMMON_CUH

#include "gpu/gpu_rt.h"

#include "masks/bmask.h"
#include "gpu/gpu.h"
#include "masks/mask.h"
#include "masks/xterms.h"

namespace FC_GPU_NS {

/* Device pointers and sizes of one call. Offsets into q/k/v/o are formed in int64. */
struct attn_args {
    const void *q, *k, *v; /* [B,Hq,Lq,D], [B,Hkv,Lk,D], [B,Hkv,Lk,Dv] in the input type */
    void *o;               /* [B,Hq,Lq,Dv] in the input type */
    float *lse;            /* [B,Hq,Lq] */
    int32_t batch, hq, hkv, lq, lk, d, dv;
    float scale;
    mask_params mask;
    seq_view seq; /* cu_q / cu_k point to device memory */
    /* Block mask, device memory (masks/bmask.h): a row's ids start at its offset. */
    const int32_t *kv_num, *kv_idx, *full_num, *full_idx;
    const int64_t *kv_off, *full_off;
    int32_t bm_nb, bm_nh, nqb, qb, kb;
    /* Paged K/V (kernels 2 and 3; NULL: k and v are contiguous). k and v then point to caches
     * [num_pages, Hkv, KB, D] and page_table[b * pt_width + j] is the page holding keys
     * [j * KB, (j + 1) * KB) of batch entry b (gpu.h, gpu_call.page_table). */
    const int32_t *page_table;
    int32_t pt_width;
    /* Score terms (docs/semantics.md section 7, masks/terms.h): the soft-cap (0 off) and the
     * per-head sinks, device memory [Hq] (NULL off). */
    float softcap;
    const float *sinks;
    /* Explicit terms (docs/semantics.md section 8, masks/xterms.h): the packed mask and the
     * float32 bias [Bm, Hm, Lq, Lk], device memory; bits / vals NULL: off. */
    attn_xmask xmask;
    attn_xbias xbias;
};

/* Row of the block mask for (b, h, r), honouring broadcast of nb / nh == 1. */
static __host__ __device__ inline int64_t attn_bmask_row(const attn_args &a, int32_t b, int32_t h,
                                                         int32_t r)
{
    int64_t bi = a.bm_nb == 1 ? 0 : b, hi = a.bm_nh == 1 ? 0 : h;
    return (bi * a.bm_nh + hi) * a.nqb + r;
}

/* The partial (full = 0) or full (1) ids of block-mask row `row`: masks/bmask.h's bmask_ids on
 * the device copy. */
static __host__ __device__ inline const int32_t *attn_bmask_ids(const attn_args &a, int full,
                                                                int64_t row)
{
    return full ? a.full_idx + a.full_off[row] : a.kv_idx + a.kv_off[row];
}

static __host__ __device__ inline float to_f32(float x) { return x; }
static __host__ __device__ inline float to_f32(__half x) { return __half2float(x); }
static __host__ __device__ inline float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T> __host__ __device__ inline T from_f32(float x);
template <> __host__ __device__ inline float from_f32<float>(float x) { return x; }
template <> __host__ __device__ inline __half from_f32<__half>(float x)
{
    return __float2half_rn(x);
}
template <> __host__ __device__ inline __nv_bfloat16 from_f32<__nv_bfloat16>(float x)
{
    return __float2bfloat16_rn(x);
}

/* x rounded to T and widened back (round-to-nearest-even). */
template <typename T> __host__ __device__ inline float round_like(float x)
{
    return to_f32(from_f32<T>(x));
}

/* The soft-cap of a scaled score, c * tanh(s / c), in fp32 with the accurate tanhf (CUDA's:
 * 2 ulp; glibc's under emu), never tanh.approx.f32: its ~2^-11 relative error moves a logit by
 * 0.02 at c = 50, which fails H1 for float16. c = 0: off. The division (not s * (1/c)) is what
 * Hugging Face's Gemma 2 and PyTorch score_mods write. */
static __host__ __device__ inline float attn_softcap(float s, float c)
{
    return c > 0.0f ? c * tanhf(s / c) : s;
}

/* Head h's sink, -inf without sinks: the online softmax starts from it as its running max and
 * with its term e^0 = 1 in the sum; -inf starts it empty, as without sinks. */
static __host__ __device__ inline float attn_sink(const attn_args &a, int32_t h)
{
    return a.sinks ? a.sinks[h] : -INFINITY;
}

/* Row (b, h, tq) of the explicit mask and of the bias (NULL where that term is off). A
 * kernel reads them only at keys below Lk that the families allow (xterms.h's layout). */
static __host__ __device__ inline const uint8_t *attn_xmask_row(const attn_args &a, int32_t b,
                                                                int32_t h, int32_t tq)
{
    return a.xmask.bits ? xmask_row(a.xmask, b, h, tq) : NULL;
}
static __host__ __device__ inline const float *attn_xbias_row(const attn_args &a, int32_t b,
                                                              int32_t h, int32_t tq)
{
    return a.xbias.vals ? xbias_row(a.xbias, b, h, tq) : NULL;
}

/* The test-only defects (ATTN_MUTANT) the gate self-test seeds into the kernels, and the hooks
 * the kernels call for them, are in gpu/attn_mutants.cuh. */

} /* namespace FC_GPU_NS */

#endif
