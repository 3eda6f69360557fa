/*
 * attn_mutants.cuh - the gate self-test's seeded defects, gathered in one place so the kernels
 * (gpu/attn_v1.cuh, gpu/attn_v2.cuh) read as the algorithm with a named hook at each seam.
 *
 * tests/module.mk compiles gpu/attn_launch.cu again with ATTN_MUTANT = one of the values below
 * (each build in its own namespace, gpu_rt.h) to prove the gate catches each defect in either
 * kernel, with the gate tests/test_gate.c expects. Every real build has ATTN_MUTANT = 0: each
 * hook is then the identity or nothing, chosen by a constant condition (if constexpr), and
 * force-inlined, so the production kernels carry no extra branch or register (make emu-nvcc's
 * resource report is the check). Call sites pass only what the kernel holds anyway (its own
 * mask copy by reference; the row's o and Dv, not o + Dv): an argument computed for a hook alone
 * is dead in the real build, yet it still changed the code g++ and nvcc emitted for the kernels.
 */
#ifndef FLEXCHECK_ATTN_MUTANTS_CUH
#define FLEXCHECK_ATTN_MUTANTS_CUH

#include "gpu/attn_common.cuh"
#include "gpu/ptx.cuh"

#ifndef ATTN_MUTANT
#define ATTN_MUTANT 0
#endif

namespace FC_GPU_NS {

enum {
    ATTN_MUT_WINDOW_OFF_BY_ONE = 1, /* the kernel evaluates W + 1 */
    ATTN_MUT_PARTIAL_AS_FULL = 2,   /* partial blocks skip the mask */
    ATTN_MUT_NO_RESCALE = 3,        /* the online softmax forgets to rescale */
    ATTN_MUT_P_NOT_ROUNDED = 4,     /* P stays fp32 before P.V */
    ATTN_MUT_EMPTY_ROW_NAN = 5,     /* an empty row divides 0 by 0 */
    ATTN_MUT_WRITE_PAST_END = 6,    /* the last row writes one element past the output */
    ATTN_MUT_SOFTCAP_AFTER_FILL = 7, /* the soft-cap runs after the mask fill: masked -> -cap */
    ATTN_MUT_SINK_SCALED = 8,       /* the sink is multiplied by the softmax scale */
    ATTN_MUT_SINK_WITH_VALUE = 9,   /* the sink enters the numerator as if its value were 1 */
    ATTN_MUT_SINK_EVERY_TILE = 10,  /* the sink's term is added again for every kv tile */
    ATTN_MUT_BIAS_NEGATED = 11,     /* the explicit bias is subtracted from the score */
};

/* Window off by one: the kernel's copy of the mask evaluates a sliding window W as W + 1; H1
 * must catch it. */
static __host__ __device__ __forceinline__ void mutant_window(mask_params &m)
{
    if constexpr (ATTN_MUTANT == ATTN_MUT_WINDOW_OFF_BY_ONE)
        if (m.sliding_window > 0)
            m.sliding_window += 1;
}

/* Partial block as full: every listed tile is walked as full, its mask skipped; H1 must catch
 * it. */
static __host__ __device__ __forceinline__ bool mutant_tile_is_full(bool full)
{
    if constexpr (ATTN_MUTANT == ATTN_MUT_PARTIAL_AS_FULL)
        return true;
    return full;
}

/* No online-softmax rescale: l and the accumulator keep their scale (alpha = 1) when the
 * running max moves; H1 must catch it. Only reached once something was accumulated. */
static __host__ __device__ __forceinline__ float mutant_rescale(float alpha)
{
    if constexpr (ATTN_MUTANT == ATTN_MUT_NO_RESCALE)
        return 1.0f;
    return alpha;
}

/* P not rounded (kernel 1): P.V takes the fp32 p instead of p rounded to the input type;
 * only the p-round check can catch it (it is closer to the oracle, so H1..H7 pass). */
static __host__ __device__ __forceinline__ float mutant_p(float p, float rounded)
{
    if constexpr (ATTN_MUTANT == ATTN_MUT_P_NOT_ROUNDED)
        return p;
    return rounded;
}

/* P not rounded (kernel 2, tensor cores): P is kept (nearly) fp32 as the rounded P the kernel
 * multiplied plus its rounded residual, added here as a second product with the same V
 * fragments (vf: d tiles 2dp and 2dp + 1, into acc0 and acc1); s0 and s1 are the fp32 P of n8
 * key tiles 2kk and 2kk + 1, from which the kernel packed the A fragment. p-round must catch it. */
template <typename T>
__device__ __forceinline__ void mutant_p_residual(float acc0[4], float acc1[4], const float s0[4],
                                                  const float s1[4], const uint32_t vf[4])
{
    if constexpr (ATTN_MUTANT == ATTN_MUT_P_NOT_ROUNDED) {
        uint32_t plo[4]; /* the A fragment's layout: register c from s[c >> 1], pair c & 1 */
        for (int c = 0; c < 4; c++) {
            const float *sj = c >> 1 ? s1 : s0;
            const float x0 = sj[2 * (c & 1)], x1 = sj[2 * (c & 1) + 1];
            plo[c] = pack2_rn<T>(x0 - round_like<T>(x0), x1 - round_like<T>(x1));
        }
        mma_m16n8k16<T>(acc0, plo, vf);
        mma_m16n8k16<T>(acc1, plo, vf + 2);
    }
}

/* Empty row yields NaN: the reciprocal of the normaliser is taken even when l = 0, so
 * 0 * (1/0) = NaN reaches rows no key may reach; H3 must catch it. */
static __host__ __device__ __forceinline__ float mutant_inv_l(float inv, float l)
{
    if constexpr (ATTN_MUTANT == ATTN_MUT_EMPTY_ROW_NAN)
        return 1.0f / l;
    return inv;
}

/* The score a masked key gets: -inf, so it never reaches the max or the sum. Soft-cap after
 * the mask fill: the cap is applied to the filled score, so a masked key comes back at -cap
 * and weighs as much as an allowed score near -cap; H1 must catch it (M5's beyond-the-cap
 * case). */
static __host__ __device__ __forceinline__ float mutant_masked_score(float c)
{
    if constexpr (ATTN_MUTANT == ATTN_MUT_SOFTCAP_AFTER_FILL)
        return attn_softcap(-INFINITY, c);
    return -INFINITY;
}

/* The sink the online softmax starts from: the head's, unscaled. Sink scaled: multiplied by
 * the softmax scale as if it were a q.k; H1 must catch it where sinks weigh. */
static __host__ __device__ __forceinline__ float mutant_sink(float sink, float scale)
{
    if constexpr (ATTN_MUTANT == ATTN_MUT_SINK_SCALED)
        return sink * scale;
    (void)scale;
    return sink;
}

/* The accumulator's start: 0. Sink with a value: the sink's term is added to the numerator as
 * if its value vector were all ones (start = its share of the sum); H1 must catch it. */
static __host__ __device__ __forceinline__ float mutant_acc_start(float sink_share)
{
    if constexpr (ATTN_MUTANT == ATTN_MUT_SINK_WITH_VALUE)
        return sink_share;
    (void)sink_share;
    return 0.0f;
}

/* Sink in every tile: after each kv tile's rescale the sink's term e^(sink - m) is added to
 * the normaliser l once more (the real kernels add it once, as the softmax's start); H1 must
 * catch it on rows of several tiles. */
static __host__ __device__ __forceinline__ void mutant_tile_sink(float &l, float sink, float m)
{
    if constexpr (ATTN_MUTANT == ATTN_MUT_SINK_EVERY_TILE)
        if (sink != -INFINITY)
            l += expf(sink - m);
    (void)l;
    (void)sink;
    (void)m;
}

/* The explicit bias a score gets (docs/semantics.md section 8). Bias negated: score - bias, as
 * if the bias held the distance's penalty with the wrong sign; H1 must catch it, and the
 * diagnosis name it ("bias with the wrong sign"). */
static __host__ __device__ __forceinline__ float mutant_bias(float bias)
{
    if constexpr (ATTN_MUTANT == ATTN_MUT_BIAS_NEGATED)
        return -bias;
    return bias;
}

/* Write past the end: the last row of the last head and batch entry (o: its dv outputs) stores
 * one more element, o[dv], into the guard bytes after O; H6 must catch it. writer picks the one
 * thread of the row that stores it. */
template <typename T>
__device__ __forceinline__ void mutant_write_past_end(T *o, int32_t dv, const attn_args &a,
                                                      int32_t b, int32_t h, int32_t tq, bool writer)
{
    if constexpr (ATTN_MUTANT == ATTN_MUT_WRITE_PAST_END)
        if (tq == a.lq - 1 && h == a.hq - 1 && b == a.batch - 1 && writer)
            o[dv] = from_f32<T>(0.0f);
}

} /* namespace FC_GPU_NS */

#endif
