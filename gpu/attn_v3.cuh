/*
 * attn_v3.cuh - flex-attention forward, version 3: FlashAttention-2's structure for fp16 and
 * bf16 (the contract of docs/semantics.md section 5, as versions 1 and 2).
 *
 * What it does differently from version 2 (gpu/attn_v2.cuh), whose helpers it uses (the kv
 * cursor, the cp.async staging, the rows' setup, Q K^T, the quad reductions, the masked score
 * loops, the P.V step and the epilogue; the two kernels' outputs stay their own bits):
 *   - 128-row query tiles (64 for head dims above 128) on 4 warps, each warp owning two m16
 *     tiles (MT = 2, 32 rows): every K and V fragment read from shared memory by ldmatrix feeds
 *     four tensor-core products instead of two; the Q fragments are re-read from shared memory
 *     per 16-wide d chunk (as FlashAttention-2 does for D = 128), except for D * MT <= 64,
 *     where they stay in registers;
 *   - 32- or 64-key tiles (v3_bk; 16 where KB is smaller), one K and one V buffer, two
 *     barriers a tile (FlashAttention-2's schedule): at the top of a tile its K has landed and
 *     every warp is past the previous P.V, so V streams in while S = Q K^T runs; in the middle
 *     V has landed and every warp is past Q K^T, so the next K streams in while the softmax and
 *     P.V run (version 2 has three barriers a tile);
 *   - tiles that need no mask run a loop of their own: a tile from the row's full list, wholly
 *     below Lk, in a query tile wholly below Lq, has every (query, key) pair allowed, so its
 *     scores are neither compared against the rows' intervals nor filled, and its V fragments
 *     are never zeroed (no key of it can be masked); without a soft-cap the scale is folded
 *     into the exponent (FlashAttention's exp2(s * scale * log2 e - m * log2 e), one fused
 *     multiply-add and one exp2 an element; the running max is taken over the raw scores and
 *     scaled once a row: scale > 0 and rounding is monotone, so it is the max of the scaled
 *     scores, bit for bit). Partial tiles, the last tile below Lk and every tile with a bias
 *     (an explicit term) run version 2's masked loop (v2_scores, v2_scores_x) and zero the V
 *     fragments of keys masked on a whole m16 tile, so poison in masked keys stays out as in
 *     version 2;
 *   - P = exp2f((x - m) * log2 e), CUDA's exp2f (2 ulp; one MUFU.EX2 with its range fix-up)
 *     rather than the accurate expf (several instructions more); under the emu glibc's
 *     exp2f, as expf is glibc's there: both within a few ulp of e^(x - m), not the same bits;
 *   - the query tiles are scheduled last first (blockIdx.x counts down), so under a causal
 *     mask the tiles with the most keys start first and the grid's tail is short.
 * The arithmetic is otherwise version 2's: fp32 S and online softmax per row over the four
 * lanes of a quad, P rounded to the input type before P.V (the S accumulators of two n8 key
 * tiles are the A fragment of the P.V product), l summing the fp32 P, the sink as each row's
 * starting max with its e^0 in one lane's share, empty rows 0 with LSE -inf, a NaN l NaN.
 *
 * fp32 has no tensor-core path here (FlashAttention-2 has none either): the launcher runs
 * version 2's fp32 instances for kernel 3 (gpu/attn_launch.cu), which docs/status.md says.
 *
 * Template parameters: T (__half, __nv_bfloat16), D and DV (v2_head_dims_ok's pairs), BK (16,
 * or v3_bk's 32 or 64 keys a tile), MT (m16 tiles a warp: 2, or 1 for 16-row blocks and head
 * dims above 128) and X (explicit mask or bias, BK = 16; with a bias the masked loop on every
 * tile).
 */
#ifndef FLEXCHECK_ATTN_V3_CUH
#define FLEXCHECK_ATTN_V3_CUH

#include "gpu/attn_v2.cuh"

namespace FC_GPU_NS {

#define V3_LOG2E 1.4426950408889634f

/* Query rows a block at most: 128 (4 warps of 32 rows); 64 for head dims above 128 (4 warps
 * of 16 rows: two m16 tiles' accumulators of 256 columns would not fit in registers). */
template <int D, int DV> __host__ __device__ constexpr int v3_bq_cap()
{
    return D > 128 || DV > 128 ? 64 : 128;
}
template <int D, int DV> __host__ __device__ inline int v3_block_q(int qb)
{
    return qb < v3_bq_cap<D, DV>() ? qb : v3_bq_cap<D, DV>();
}

/* Keys a tile for blocks of two m16 tiles a warp: 64 where the accumulators leave room (D + Dv
 * <= 160), else 32: at D = Dv = 128 two m16 tiles' O (128 registers) and 64 keys' S (64) spill
 * 132 bytes on sm_90 (ptxas, CUDA 13.0, 2026-12-07), 32 keys none. */
template <int D, int DV> __host__ __device__ constexpr int v3_bk()
{
    return D + DV <= 160 ? 64 : 32;
}

/* Dynamic shared memory: Q [bq] rows, one K and one V buffer [BK] rows, each row padded by 16
 * bytes (conflict-free ldmatrix). fp16 D = 128, bq = 128, BK = 32: 52,224 bytes. */
template <typename T, int D, int DV, int BK> __host__ __device__ constexpr size_t v3_smem_bytes(int bq)
{
    constexpr int pad = v2_traits<T>::pad;
    return ((size_t)bq * (D + pad) + (size_t)BK * (D + pad + DV + pad)) * sizeof(T);
}

/* At most 128 threads (4 warps), one block an SM at least: ptxas may use up to 255 registers a
 * thread, which still lets two blocks (8 warps) share an SM's 64K registers. */
template <typename T, int D, int DV, int BK, int MT, bool X>
__global__ void __launch_bounds__(128, 1) attn_v3_kernel(attn_args a)
{
    static_assert(v2_traits<T>::tensor_cores, "kernel 3 is fp16/bf16; fp32 runs kernel 2's path");
    static_assert(D % 16 == 0 && DV % 16 == 0 && BK % 16 == 0, "tile shapes the fragment loops assume");
    constexpr int SROW = D + v2_traits<T>::pad, VROW = DV + v2_traits<T>::pad;
    constexpr int NJ = BK / 8, ND = DV / 8, NR = 2 * MT;
    /* Q's fragments in registers only where they are few: at D = 64 with two m16 tiles (32
     * registers) the 64-key instance spilled 16 bytes on sm_90; re-read from shared memory per
     * d chunk otherwise, as FlashAttention-2 does. */
    constexpr bool q_in_regs = D * MT <= 64;

    const int lane = (int)threadIdx.x & 31, warp = (int)threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int bq = (int)blockDim.x / 32 * 16 * MT;
    /* last query tile first: the tiles with the most keys under a causal mask start first */
    const int32_t q0 = (int32_t)(gridDim.x - 1 - blockIdx.x) * bq;
    const int32_t h = (int32_t)blockIdx.y, b = (int32_t)blockIdx.z;
    const int32_t hk = h / (a.hq / a.hkv);
    const int64_t row = attn_bmask_row(a, b, h, q0 / a.qb); /* bq divides qb: one mask row */
    mask_params mask = a.mask;
    mutant_window(mask); /* seam: window off by one */

    EMU_DYNAMIC_SHARED(T, smem);
    T *sq = smem, *sk = sq + bq * SROW, *sv = sk + BK * SROW;
    v2_stage_rows<T, D, SROW>(sq, (const T *)a.q + (((int64_t)b * a.hq + h) * a.lq + q0) * D,
                              bq, a.lq - q0);
    cp_async_commit();

    /* This lane's rows (v2_rows_init, kernel 2's layout) */
    int32_t tq[NR], lo[NR], hi[NR];
    bool valid[NR];
    float m[NR], l[NR], acc[MT][ND][4];
    const float sink = mutant_sink(attn_sink(a, h), a.scale); /* seam: sink scaled */
    v2_rows_init<MT, ND>(a, mask, q0, warp, g, t, sink, tq, lo, hi, valid, m, l, acc);

    /* Every (query, key) pair of a full tile is allowed where its rows and keys exist. */
    const bool rows_exist = q0 + bq <= a.lq;
    v2_cursor cur = {0, 0, -1, 0};
    bool have = v2_next(cur, a, row, BK);
    if (have)
        v2_stage_rows<T, D, SROW>(sk, v2_kv_rows<T, D>(a, a.k, b, hk, cur.k0), BK, a.lk - cur.k0);
    cp_async_commit();

    uint32_t qa[q_in_regs ? D / 16 : 1][MT][4];
    const T *q_frag_row =
        sq + (warp * 16 * MT + ((lane >> 3) & 1) * 8 + (lane & 7)) * SROW + (lane >> 4) * 8;
    bool q_loaded = false;

    while (have) {
        cp_async_wait<0>(); /* this tile's K (and Q, the first time) has landed */
        __syncthreads();    /* ... visible to all; every warp is past the previous P.V */
        v2_stage_rows<T, DV, VROW>(sv, v2_kv_rows<T, DV>(a, a.v, b, hk, cur.k0), BK, a.lk - cur.k0);
        cp_async_commit();
        /* The next tile's place in the lists (global reads of the block mask, uniform across
         * the block), looked up now so that their latency hides behind Q K^T. */
        v2_cursor nxt = cur;
        const bool more = v2_next(nxt, a, row, BK);
        if constexpr (q_in_regs) {
            if (!q_loaded) {
                V2_UNROLL
                for (int kc = 0; kc < D / 16; kc++)
                    V2_UNROLL
                    for (int mt = 0; mt < MT; mt++)
                        ldmatrix_x4(qa[kc][mt], q_frag_row + mt * 16 * SROW + kc * 16);
                q_loaded = true;
            }
        }

        /* S = Q K^T, fp32; each K fragment serves the warp's MT m16 tiles. */
        float s[MT][NJ][4];
        v2_qk<T, D, BK, MT, q_in_regs>(s, qa, q_frag_row, sk, lane);

        /* The scores. An unmasked tile (see above) takes no compare; without a soft-cap its
         * maxima are the raw scores', scaled once, and the scale goes into the exponent's
         * factor kx. Every other tile: kernel 2's masked loop, scores scaled and soft-capped,
         * masked ones filled. x then stands for the scaled score either way: P = 2^(x kx - m
         * log2 e). */
        const bool full = mutant_tile_is_full(cur.pass != 0); /* seam: partial block as full */
        /* with explicit terms only without a bias: a full tile vouches for every pair's bit,
         * not for a bias to add */
        const bool unmasked = (!X || !a.xbias.vals) && full && rows_exist && cur.k0 + BK <= a.lk;
        float tile_max[MT][2];
        float kx = V3_LOG2E;
        V2_UNROLL
        for (int mt = 0; mt < MT; mt++)
            tile_max[mt][0] = tile_max[mt][1] = -INFINITY;
        if (unmasked && !(a.softcap > 0.0f)) {
            V2_UNROLL
            for (int mt = 0; mt < MT; mt++)
                V2_UNROLL
                for (int j = 0; j < NJ; j++)
                    V2_UNROLL
                    for (int e = 0; e < 4; e++)
                        tile_max[mt][e >> 1] = fmaxf(tile_max[mt][e >> 1], s[mt][j][e]);
            V2_UNROLL
            for (int mt = 0; mt < MT; mt++)
                V2_UNROLL
                for (int i = 0; i < 2; i++)
                    tile_max[mt][i] *= a.scale;
            kx = a.scale * V3_LOG2E;
        } else if (unmasked) {
            V2_UNROLL
            for (int mt = 0; mt < MT; mt++)
                V2_UNROLL
                for (int j = 0; j < NJ; j++)
                    V2_UNROLL
                    for (int e = 0; e < 4; e++) {
                        s[mt][j][e] = attn_softcap(s[mt][j][e] * a.scale, a.softcap);
                        tile_max[mt][e >> 1] = fmaxf(tile_max[mt][e >> 1], s[mt][j][e]);
                    }
        } else {
            V2_UNROLL
            for (int mt = 0; mt < MT; mt++) {
                int32_t klo[2], khi[2];
                V2_UNROLL
                for (int i = 0; i < 2; i++) {
                    const int r = 2 * mt + i;
                    klo[i] = full ? 0 : lo[r];
                    khi[i] = full ? (valid[r] ? a.lk : 0) : hi[r];
                }
                if constexpr (X) {
                    const uint8_t *bits[2];
                    const float *bias[2];
                    V2_UNROLL
                    for (int i = 0; i < 2; i++) {
                        const int r = 2 * mt + i;
                        bits[i] = !full && valid[r] ? attn_xmask_row(a, b, h, tq[r]) : NULL;
                        bias[i] = valid[r] ? attn_xbias_row(a, b, h, tq[r]) : NULL;
                    }
                    v2_scores_x<NJ>(s[mt], tile_max[mt], klo, khi, cur.k0 + 2 * t, a.scale,
                                    a.softcap, bits, bias);
                } else if (a.softcap > 0.0f) {
                    v2_scores<NJ, true>(s[mt], tile_max[mt], klo, khi, cur.k0 + 2 * t, a.scale,
                                        a.softcap);
                } else {
                    v2_scores<NJ, false>(s[mt], tile_max[mt], klo, khi, cur.k0 + 2 * t, a.scale,
                                         a.softcap);
                }
            }
        }

        cp_async_wait<0>(); /* this tile's V has landed */
        __syncthreads();    /* ... visible to all; every warp is past Q K^T */
        if (more) /* the next K streams in while the softmax and P V run */
            v2_stage_rows<T, D, SROW>(sk, v2_kv_rows<T, D>(a, a.k, b, hk, nxt.k0), BK,
                                      a.lk - nxt.k0);
        cp_async_commit();

        /* Online softmax, per row, in base 2: m stays the max of the scaled scores (natural
         * units, for the LSE); while it is -inf nothing was accumulated (alpha taken as 0) and
         * it is taken as 0 in the exponent, where every x is then -inf or NaN: exp2f(-inf) = +0
         * on both CUDA and glibc, so a masked score gives p = 0 exactly, with no branch. */
        V2_UNROLL
        for (int r = 0; r < NR; r++) {
            const int mt = r >> 1, i = r & 1;
            const float m_new = fmaxf(m[r], v2_quad_max(tile_max[mt][i]));
            /* seam: no online-softmax rescale */
            const float alpha =
                m[r] == -INFINITY ? 0.0f : mutant_rescale(exp2f((m[r] - m_new) * V3_LOG2E));
            l[r] *= alpha;
            if (t == 0)
                mutant_tile_sink(l[r], sink, m_new); /* seam: sink counted in every tile */
            V2_UNROLL
            for (int n = 0; n < ND; n++) {
                acc[mt][n][2 * i] *= alpha;
                acc[mt][n][2 * i + 1] *= alpha;
            }
            const float off = -(m_new == -INFINITY ? 0.0f : m_new) * V3_LOG2E;
            V2_UNROLL
            for (int j = 0; j < NJ; j++)
                V2_UNROLL
                for (int c = 0; c < 2; c++) {
                    float &x = s[mt][j][2 * i + c];
                    x = exp2f(fmaf(x, kx, off));
                    l[r] += x; /* the normaliser sums the fp32 P */
                }
            m[r] = m_new;
        }

        /* O += P V, P in the input type */
        if (unmasked)
            v2_pv<T, DV, BK, MT, false>(acc, s, sv, lane);
        else
            v2_pv<T, DV, BK, MT, true>(acc, s, sv, lane);
        cur = nxt;
        have = more;
    }

    v2_store_rows<T, DV, MT>(a, b, h, t, tq, valid, m, l, acc);
}

} /* namespace FC_GPU_NS */

#endif
