/*
 * attn_v1.cuh - flex-attention forward, version 1: the second opinion.
 *
 * Deliberately plain: one CUDA thread per query row, one thread block per (query tile, head,
 * batch entry), so a block's threads walk exactly the lists of their block-mask row. Each
 * thread keeps its q row and output accumulator in per-thread arrays, reads K and V straight
 * from global memory, and runs the online softmax of docs/semantics.md section 5 in fp32:
 *   - partial blocks first, the mask evaluated per element (mask_pair_allowed, the one
 *     definition in masks/mask.h, AND the explicit mask's bit when there is one,
 *     masks/xterms.h), then full blocks with no mask (keys past Lk still masked);
 *   - per kv tile: scores, tile max, rescale by exp(m_old - m_new) guarded so a row whose
 *     running max is still -inf never computes (-inf) - (-inf);
 *   - for fp16/bf16, P is rounded to the input type before P.V (FlexAttention's
 *     `p.to(dtype)` before `tl.dot`), while the normaliser l sums the fp32 P as FlexAttention
 *     does; the output is rounded to the input type;
 *   - score terms (docs/semantics.md section 7): the soft-cap on the fp32 scaled score before
 *     the mask (attn_softcap), the head's sink as the online softmax's start (running max =
 *     the sink, l = e^0 = 1, no value), so nothing else changes;
 *   - the explicit bias (docs/semantics.md section 8) added to every allowed score after the
 *     soft-cap, on partial and full blocks alike; a masked key's score, bias, K and V are
 *     never read;
 *   - rows with no allowed key write 0 and LSE = -inf (the sink, with sinks).
 * No shared memory and no barriers: nothing here can race, and under the emu backend each
 * thread runs start to finish without a fiber switch.
 *
 * The mutant_*() calls are the seams where the gate's self-test seeds a defect
 * (gpu/attn_mutants.cuh); in every real build each is the identity or nothing.
 */
#ifndef FLEXCHECK_ATTN_V1_CUH
#define FLEXCHECK_ATTN_V1_CUH

#include "gpu/attn_common.cuh"
#include "gpu/attn_mutants.cuh"

namespace FC_GPU_NS {

template <typename T>
__global__ void attn_v1_kernel(attn_args a)
{
    const int32_t r = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int32_t tq = r * a.qb + (int32_t)threadIdx.x;
    if (tq >= a.lq)
        return; /* rows past Lq are never stored */
    const int32_t hk = h / (a.hq / a.hkv);
    const T *q = (const T *)a.q + (((int64_t)b * a.hq + h) * a.lq + tq) * a.d;
    const T *k = (const T *)a.k + ((int64_t)b * a.hkv + hk) * a.lk * a.d;
    const T *v = (const T *)a.v + ((int64_t)b * a.hkv + hk) * a.lk * a.dv;

    float qf[GPU_V1_MAX_HEAD_DIM], acc[GPU_V1_MAX_HEAD_DIM], s[BMASK_MAX_BLOCK];
    for (int32_t i = 0; i < a.d; i++)
        qf[i] = to_f32(q[i]);
    const float sink = mutant_sink(attn_sink(a, h), a.scale); /* seam: sink scaled */
    float m = sink, l = sink == -INFINITY ? 0.0f : 1.0f;
    for (int32_t j = 0; j < a.dv; j++)
        acc[j] = mutant_acc_start(l); /* seam: sink with a value */

    mask_params mask = a.mask;
    mutant_window(mask); /* seam: window off by one */
    const int64_t row = attn_bmask_row(a, b, h, r);
    /* the explicit terms' rows of this query (NULL: off), read only at keys below Lk */
    const uint8_t *xbits = attn_xmask_row(a, b, h, tq);
    const float *xbias = attn_xbias_row(a, b, h, tq);
    for (int pass = 0; pass < 2; pass++) {
        /* partial blocks first, then full ones */
        const int full = mutant_tile_is_full(pass == 1); /* seam: partial block as full */
        const int32_t n = (pass == 1 ? a.full_num : a.kv_num)[row];
        const int32_t *ids = attn_bmask_ids(a, pass == 1, row);
        for (int32_t t = 0; t < n; t++) {
            const int32_t k0 = ids[t] * a.kb;
            const int32_t nk = min(a.kb, a.lk - k0); /* keys past Lk are never loaded */
            float tile_max = -INFINITY;
            for (int32_t j = 0; j < nk; j++) {
                const int32_t tk = k0 + j;
                if (!full && !(mask_pair_allowed(mask, a.seq, tq, tk) &&
                               (!xbits || xmask_bit(xbits, tk)))) {
                    s[j] = mutant_masked_score(a.softcap); /* seam: soft-cap after the fill */
                    continue;
                }
                float dot = 0.0f;
                /* fmaf: what nvcc emits for a*b+c anyway, written out so the emu build (no fp
                 * contraction) computes the same bits as the GPU. */
                for (int32_t i = 0; i < a.d; i++)
                    dot = fmaf(qf[i], to_f32(k[(int64_t)tk * a.d + i]), dot);
                s[j] = attn_softcap(dot * a.scale, a.softcap);
                if (xbias) /* after the soft-cap, full tiles too (section 8; seam: negated) */
                    s[j] += mutant_bias(xbias[tk]);
                tile_max = fmaxf(tile_max, s[j]);
            }
            if (tile_max == -INFINITY)
                continue; /* nothing allowed in this tile: m, l and acc stay as they are */
            const float m_new = fmaxf(m, tile_max);
            /* m == -inf means nothing was accumulated yet: alpha is irrelevant, use 0 rather
             * than exp(-inf - m_new) so no NaN can appear even if m_new were -inf (seam: no
             * online-softmax rescale). */
            const float alpha = m == -INFINITY ? 0.0f : mutant_rescale(expf(m - m_new));
            l *= alpha;
            mutant_tile_sink(l, sink, m_new); /* seam: sink counted in every tile */
            for (int32_t i = 0; i < a.dv; i++)
                acc[i] *= alpha;
            for (int32_t j = 0; j < nk; j++) {
                if (s[j] == -INFINITY)
                    continue;
                const float p = expf(s[j] - m_new);
                l += p;
                /* P in the input type before P.V (seam: P not rounded) */
                const float pr = mutant_p(p, round_like<T>(p));
                const T *vr = v + (int64_t)(k0 + j) * a.dv;
                for (int32_t i = 0; i < a.dv; i++)
                    acc[i] = fmaf(pr, to_f32(vr[i]), acc[i]);
            }
            m = m_new;
        }
    }

    T *o = (T *)a.o + (((int64_t)b * a.hq + h) * a.lq + tq) * a.dv;
    /* empty row: exactly 0 (seam: empty row yields NaN) */
    const float inv = mutant_inv_l(l == 0.0f ? 0.0f : 1.0f / l, l); /* a NaN l stays NaN */
    for (int32_t i = 0; i < a.dv; i++)
        o[i] = from_f32<T>(acc[i] * inv);
    mutant_write_past_end(o, a.dv, a, b, h, tq, true); /* seam: write past the end */
    a.lse[((int64_t)b * a.hq + h) * a.lq + tq] = l == 0.0f ? -INFINITY : m + logf(l);
}

} /* namespace FC_GPU_NS */

#endif
