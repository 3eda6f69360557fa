/*
 * attn_v3.cuh - flex-attention forward, version 3: FlashAttention-2's structure for fp16 and
 * bf16 (the contract of docs/semantics.md section 5, as versions 1 and 2).
 *
 * What it does differently from version 2 (gpu/attn_v2.cuh), whose helpers it uses (the kv
 * cursor, the cp.async staging, the quad reductions, the masked score loops):
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
 *     mask the tiles with the most keys start first and the grid's tail is short;
 *   - the output stored two elements (32 bits) a store.
 * The arithmetic is otherwise version 2's: fp32 S and online softmax per row over the four
 * lanes of a quad, P rounded to the input type before P.V (the S accumulators of two n8 key
 * tiles are the A fragment of the P.V product), l summing the fp32 P, the sink as each row's
 * starting max with its e^0 in one lane's share, empty rows 0 with LSE -inf, a NaN l NaN.
 *
 * fp32 has no tensor-core path here (FlashAttention-2 has none either): the launcher runs
 * version 2's fp32 instances for kernel 3 (gpu/attn_launch.cu), which docs/status.md says.
 *
 * Template parameters: T (__half, __nv_bfloat16), D and DV (v2_head_dims_ok's pairs), BK (16,
 * or v3_bk's 32 or 64 keys a tile), MT (m16 tiles a warp: 2, or 1 for 16-row blocks and head dims above
 * 128) and X (explicit mask or bias, BK = 16; with a bias the masked loop on every tile).
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

/* O += P V over one tile of BK keys, P in s (fp32, the S accumulator layout: key 8j + 2t +
 * (e & 1), row g + 8 (e >> 1) of m16 tile mt), rounded to T. ZERO (the masked loop): a key
 * whose P is 0 on all 16 rows of an m16 tile gets its V fragment zeroed for that tile's
 * product, because the tensor core would turn 0 * NaN (a masked, poisoned V) into NaN; live
 * bit 4kk + c stands for key 16kk + 2t + (c & 1) + 8 (c >> 1), exactly the keys of this lane's
 * V fragment. Without ZERO every key of the tile is allowed for every row. */
template <typename T, int DV, int BK, int MT, bool ZERO>
__device__ __forceinline__ void v3_pv(float (&acc)[MT][DV / 8][4], float (&s)[MT][BK / 8][4],
                                      const T *tvs, int lane)
{
    constexpr int VROW = DV + v2_traits<T>::pad;
    uint32_t pa[MT][BK / 16][4];
    V2_UNROLL
    for (int mt = 0; mt < MT; mt++)
        V2_UNROLL
        for (int kk = 0; kk < BK / 16; kk++)
            V2_UNROLL
            for (int c = 0; c < 4; c++) {
                const float *sj = s[mt][2 * kk + (c >> 1)];
                pa[mt][kk][c] = pack2_rn<T>(sj[2 * (c & 1)], sj[2 * (c & 1) + 1]);
            }
    unsigned live[MT];
    if constexpr (ZERO) {
        V2_UNROLL
        for (int mt = 0; mt < MT; mt++) {
            live[mt] = 0;
            V2_UNROLL
            for (int kk = 0; kk < BK / 16; kk++)
                V2_UNROLL
                for (int c = 0; c < 4; c++) {
                    /* key 2t + (c&1) + 8(c>>1): rows g (register 2(c>>1)) and g + 8 (+1) */
                    const int sh = 16 * (c & 1);
                    const uint32_t r0 = pa[mt][kk][2 * (c >> 1)] >> sh;
                    const uint32_t r1 = pa[mt][kk][2 * (c >> 1) + 1] >> sh;
                    if (((r0 | r1) & 0x7fffu) != 0)
                        live[mt] |= 1u << (4 * kk + c);
                }
            live[mt] |= __shfl_xor_sync(0xffffffffu, live[mt], 4);
            live[mt] |= __shfl_xor_sync(0xffffffffu, live[mt], 8);
            live[mt] |= __shfl_xor_sync(0xffffffffu, live[mt], 16);
        }
    }
    V2_UNROLL
    for (int kk = 0; kk < BK / 16; kk++) {
        uint32_t keep0[MT], keep1[MT]; /* the halves of b[0] (keys 2t, 2t+1) and b[1] (+8) kept */
        V2_UNROLL
        for (int mt = 0; mt < MT; mt++) {
            if constexpr (ZERO) {
                const unsigned lk4 = (live[mt] >> (4 * kk)) & 15u;
                keep0[mt] = ((lk4 & 1u) ? 0xffffu : 0u) | ((lk4 & 2u) ? 0xffff0000u : 0u);
                keep1[mt] = ((lk4 & 4u) ? 0xffffu : 0u) | ((lk4 & 8u) ? 0xffff0000u : 0u);
            }
        }
        V2_UNROLL
        for (int dp = 0; dp < DV / 16; dp++) {
            uint32_t vf[4]; /* B fragments of d tiles 2dp and 2dp + 1 */
            const int vrow = kk * 16 + ((lane >> 3) & 1) * 8 + (lane & 7);
            ldmatrix_x4_trans(vf, tvs + vrow * VROW + dp * 16 + (lane >> 4) * 8);
            V2_UNROLL
            for (int mt = 0; mt < MT; mt++) {
                if constexpr (ZERO) {
                    const uint32_t vm[4] = {vf[0] & keep0[mt], vf[1] & keep1[mt],
                                            vf[2] & keep0[mt], vf[3] & keep1[mt]};
                    mma_m16n8k16<T>(acc[mt][2 * dp], pa[mt][kk], vm);
                    mma_m16n8k16<T>(acc[mt][2 * dp + 1], pa[mt][kk], vm + 2);
                    mutant_p_residual<T>(acc[mt][2 * dp], acc[mt][2 * dp + 1], s[mt][2 * kk],
                                         s[mt][2 * kk + 1], vm); /* seam: P not rounded */
                } else {
                    mma_m16n8k16<T>(acc[mt][2 * dp], pa[mt][kk], vf);
                    mma_m16n8k16<T>(acc[mt][2 * dp + 1], pa[mt][kk], vf + 2);
                    mutant_p_residual<T>(acc[mt][2 * dp], acc[mt][2 * dp + 1], s[mt][2 * kk],
                                         s[mt][2 * kk + 1], vf);
                }
            }
        }
    }
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

    /* This lane's rows: r = 2 mt + i is row g + 8i of the warp's m16 tile mt (kernel 2's
     * layout); rows past Lq take part in every collective but see no key and are never stored. */
    int32_t tq[NR], lo[NR], hi[NR];
    bool valid[NR];
    float m[NR], l[NR];
    const float sink = mutant_sink(attn_sink(a, h), a.scale); /* seam: sink scaled */
    V2_UNROLL
    for (int r = 0; r < NR; r++) {
        tq[r] = q0 + warp * 16 * MT + 16 * (r >> 1) + g + 8 * (r & 1);
        valid[r] = tq[r] < a.lq;
        lo[r] = hi[r] = 0;
        if (valid[r])
            mask_token_range(mask, a.seq, tq[r], &lo[r], &hi[r]);
        m[r] = sink;
        l[r] = t == 0 && sink != -INFINITY ? 1.0f : 0.0f; /* the sink's e^0, one lane's share */
    }
    float acc[MT][ND][4];
    V2_UNROLL
    for (int mt = 0; mt < MT; mt++)
        V2_UNROLL
        for (int n = 0; n < ND; n++)
            V2_UNROLL
            for (int e = 0; e < 4; e++) /* seam: sink with a value */
                acc[mt][n][e] = mutant_acc_start(sink != -INFINITY ? 1.0f : 0.0f);

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
        V2_UNROLL
        for (int mt = 0; mt < MT; mt++)
            V2_UNROLL
            for (int j = 0; j < NJ; j++)
                V2_UNROLL
                for (int e = 0; e < 4; e++)
                    s[mt][j][e] = 0.0f;
        V2_UNROLL
        for (int kc = 0; kc < D / 16; kc++) {
            uint32_t qf[MT][4];
            V2_UNROLL
            for (int mt = 0; mt < MT; mt++) {
                if constexpr (q_in_regs) {
                    V2_UNROLL
                    for (int c = 0; c < 4; c++)
                        qf[mt][c] = qa[kc][mt][c];
                } else {
                    ldmatrix_x4(qf[mt], q_frag_row + mt * 16 * SROW + kc * 16);
                }
            }
            V2_UNROLL
            for (int jp = 0; jp < NJ / 2; jp++) {
                uint32_t kf[4]; /* B fragments of key tiles 2jp (kf[0..1]) and 2jp + 1 */
                ldmatrix_x4(kf, sk + (jp * 16 + (lane >> 4) * 8 + (lane & 7)) * SROW + kc * 16 +
                                    ((lane >> 3) & 1) * 8);
                V2_UNROLL
                for (int mt = 0; mt < MT; mt++) {
                    mma_m16n8k16<T>(s[mt][2 * jp], qf[mt], kf);
                    mma_m16n8k16<T>(s[mt][2 * jp + 1], qf[mt], kf + 2);
                }
            }
        }

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
            v3_pv<T, DV, BK, MT, false>(acc, s, sv, lane);
        else
            v3_pv<T, DV, BK, MT, true>(acc, s, sv, lane);
        cur = nxt;
        have = more;
    }

    /* Epilogue: the row's l summed over its quad; empty rows (l == 0) write exactly 0 and LSE
     * -inf, a NaN l stays NaN (tested for == 0, not > 0); rows past Lq are never stored. */
    V2_UNROLL
    for (int r = 0; r < NR; r++) {
        const int mt = r >> 1, i = r & 1;
        const float lsum = v2_quad_sum(l[r]);
        if (!valid[r])
            continue;
        /* seam: empty row yields NaN */
        const float inv = mutant_inv_l(lsum == 0.0f ? 0.0f : 1.0f / lsum, lsum);
        T *o = (T *)a.o + (((int64_t)b * a.hq + h) * a.lq + tq[r]) * DV;
        V2_UNROLL
        for (int n = 0; n < ND; n++) /* two elements, 32 bits, a store: DV and 2t are even */
            *(uint32_t *)(o + n * 8 + 2 * t) =
                pack2_rn<T>(acc[mt][n][2 * i] * inv, acc[mt][n][2 * i + 1] * inv);
        mutant_write_past_end(o, DV, a, b, h, tq[r], t == 0); /* seam: write past the end */
        if (t == 0)
            a.lse[((int64_t)b * a.hq + h) * a.lq + tq[r]] =
                lsum == 0.0f ? -INFINITY : m[r] + logf(lsum);
    }
}

} /* namespace FC_GPU_NS */

#endif
