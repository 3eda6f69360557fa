/*
 * attn_v2.cuh - flex-attention forward, version 2: tiled flash attention over the block mask.
 *
 * Honours the same contract as version 1 (docs/semantics.md section 5, gpu/attn_v1.cuh), with
 * the work laid out as in FlashAttention-2:
 *   - one thread block per (query tile of BQ rows, head, batch entry); BQ = min(QB, V2_BQ_MAX)
 *     (V2_BQ_MAX 64 by default; 32 for fp32 with a 256 head dim) divides the block mask's QB,
 *     so a block walks exactly one block-mask row; BQ/16 warps, each owns 16 query rows (one
 *     m16 tile; MT = 2 tiles, 32 rows, in a V2_WARP_ROWS=32 build);
 *   - the row's partial kv blocks, then its full ones, in list order, each split into sub-tiles
 *     of BK keys (BK divides KB; sub-tiles wholly past Lk are skipped);
 *   - Q, K and V tiles staged in shared memory by cp.async (rows past Lq / Lk zero-filled, never
 *     read); K and V of a sub-tile are two commit groups, so V is still in flight while S is
 *     computed, and the next K is fetched while P.V runs (a V2_STAGES=2 build double-buffers
 *     K and V instead: the next sub-tile's both fetched while this one computes);
 *   - fp16/bf16: S = Q K^T and O += P V on tensor cores (mma.sync m16n8k16, fragments through
 *     ldmatrix; gpu/ptx.cuh); the S accumulator of two n8 key tiles is, register for register,
 *     the A fragment of the P.V product, so P never leaves registers. fp32: the same fragment
 *     layout computed on CUDA cores from shared memory, P staged per warp in shared memory;
 *   - masked keys never reach the output, whatever K/V hold there (NaN, inf), as long as no
 *     other row of the same m16 tile sees them: their scores are set to -inf, their P to
 *     exactly 0, and a key whose P is 0 on all 16 rows of an m16 tile has its V fragment zeroed
 *     before the tensor-core product (fp32 skips a zero P outright); a NaN V at a key one row
 *     of the tile may see reaches the others' sums as 0 * NaN;
 *   - fp32 online softmax per row, the row spread over the four lanes of a quad (max and sum
 *     reduced with two xor-shuffles); P rounded to the input type before P.V, the normaliser
 *     l sums the fp32 P; output rounded to the input type; empty rows (l == 0) 0 with LSE
 *     -inf, a NaN l stays NaN in O and LSE;
 *   - score terms (docs/semantics.md section 7): the soft-cap on the fp32 scaled score before
 *     the mask (attn_softcap); the head's sink is each row's starting running max, its term
 *     e^0 = 1 held by the quad's lane t = 0 (l is summed over the quad at the end), no value;
 *     empty rows then end with l = 1, output 0 and LSE = the sink;
 *   - explicit terms (docs/semantics.md section 8, masks/xterms.h): on partial tiles a key is
 *     allowed iff it is in the row's family interval AND its explicit mask bit is 1 (full
 *     tiles test nothing: the block mask, built from the families AND the mask, says every
 *     pair is allowed); the bias is added to every allowed score after the soft-cap, on
 *     partial and full tiles; mask bits and bias are read only at allowed keys below Lk, so a
 *     masked key stays -inf whatever its bias, and poison there stays out as above. They take
 *     instances of their own (template flag X), so the family instances hold none of their
 *     code: a runtime branch instead cost those up to 29 registers (sm_90, fp16 D = 32: 84 ->
 *     113, one block an SM fewer). With the flag the family instances' PTX is what it was
 *     before the terms, except fp32 with D = Dv >= 80, where nvcc pairs a few shared loads of
 *     the CUDA-core Q K^T loop into 64-bit ones differently (the same fmas; the cause is the X
 *     instance beside it in the translation unit, without which the PTX is the same); ptxas
 *     gives the fp32 instances +-4 registers, no spills, the fp16/bf16 ones the same
 *     registers as before; make emu-nvcc and nvcc -ptx, 2026-12-07;
 *   - paged K/V (attn_args.page_table): a sub-tile never crosses a kv block, so its base is one
 *     page-table lookup; the values staged are the same, so the output is bitwise the same;
 *   - offsets into Q/K/V/O in int64; rows past Lq are never stored.
 *
 * Per-lane fragment coordinates (PTX ISA m16n8k16; g = lane/4, t = lane%4): accumulator element
 * e of n8 tile j is row g + 8*(e/2) of its m16 tile's 16, column 8j + 2t + e%2.
 *
 * Template parameters, picked by a plain switch in gpu/attn_launch.cu: T (float, __half,
 * __nv_bfloat16), D and DV (head dims of q/k and of v/o, multiples of 16: the (D, Dv) pairs of
 * v2_head_dims_ok), BK (16, or v2_traits<T>::bk_max = 64 for fp16/bf16 when KB >= 64 and both
 * head dims are at most 128), ST (K/V stages, v2_stages), MT (m16 tiles a warp, 1, or 2 with
 * V2_WARP_ROWS=32) and X (explicit mask or bias on; instantiated with BK = 16 and MT = 1
 * only, so the terms add one instance per (T, D, DV), 21 in all, not one per instance). Q
 * fragments live in registers for D * MT <= 128 and are re-read from shared memory (ldmatrix)
 * otherwise, which keeps D = 256 free of register spills.
 *
 * The mutant_*() calls are the seams where the gate's self-test seeds a defect
 * (gpu/attn_mutants.cuh); in every real build each is the identity or nothing.
 */
#ifndef FLEXCHECK_ATTN_V2_CUH
#define FLEXCHECK_ATTN_V2_CUH

#include <type_traits>

#include "gpu/attn_common.cuh"
#include "gpu/attn_mutants.cuh"
#include "gpu/ptx.cuh"

namespace FC_GPU_NS {

/* Loops over fragment registers must unroll, or nvcc moves the arrays to local memory. */
#ifdef __CUDA_ARCH__
#define V2_UNROLL _Pragma("unroll")
#else
#define V2_UNROLL
#endif

/* Query rows per block at most: BQ/(16 MT) warps, each with MT m16 tiles of 16 rows (MT = 1
 * by default, 2 with V2_WARP_ROWS=32). The rows are independent
 * (each warp walks the same kv sub-tiles in the same order), so BQ changes no output bit, only
 * how many rows share each K/V tile staged in shared memory. 64 by default; a variant build
 * (Makefile FC_DEFINES=-DV2_BQ_MAX=128, ci/gpu_bundle.sh) lets a GPU run time 128 beside it. */
#ifndef V2_BQ_MAX
#define V2_BQ_MAX 64
#endif
static_assert(V2_BQ_MAX == 32 || V2_BQ_MAX == 64 || V2_BQ_MAX == 128,
              "V2_BQ_MAX: 32, 64 or 128 rows (2 to 8 warps)");
/* Query rows a warp owns: 16 (one m16 tile) by default; 32 in a variant build
 * (FC_DEFINES=-DV2_WARP_ROWS=32), for fp16/bf16, head dims up to 128 and blocks of a multiple
 * of 32 rows (gpu/attn_launch.cu): two m16 tiles
 * share every K and V fragment loaded from shared memory, half the loads per tensor-core
 * product (FlashAttention-2's layout for D = 128). Each row is computed by the same
 * instructions on the same values either way, and a V fragment is zeroed per m16 tile as
 * before, so no output bit changes. */
#ifndef V2_WARP_ROWS
#define V2_WARP_ROWS 16
#endif
static_assert(V2_WARP_ROWS == 16 || V2_WARP_ROWS == 32, "V2_WARP_ROWS: 16 or 32 rows a warp");
template <typename T> struct v2_traits {
    static constexpr bool tensor_cores = !std::is_same<T, float>::value;
    /* fp32: S and O both in registers on CUDA cores; 16 keys keep them under the limit */
    static constexpr int bk_max = tensor_cores ? 64 : 16;
    static constexpr int pad = 16 / (int)sizeof(T); /* 16 bytes per smem row: no ldmatrix bank conflicts */
};

/* Query rows per block at most: V2_BQ_MAX; 32 for fp32 with a 256 head dim, whose tiles would
 * otherwise pass the 99 KiB of shared memory that sm_86/sm_89 allow. */
template <typename T, int D, int DV> __host__ __device__ constexpr int v2_bq_cap()
{
    return !v2_traits<T>::tensor_cores && (D > 128 || DV > 128) ? 32 : V2_BQ_MAX;
}
/* Query rows per block: the cap, fewer when the block mask's QB is smaller. */
template <typename T, int D, int DV> __host__ __device__ inline int v2_block_q(int qb)
{
    return qb < v2_bq_cap<T, D, DV>() ? qb : v2_bq_cap<T, D, DV>();
}

/* The (D, Dv) pairs version 2 is compiled for (the switch in gpu/attn_launch.cu). */
static __host__ __device__ inline int v2_head_dims_ok(int32_t d, int32_t dv)
{
    if (d == 96 && dv == 64)
        return 1;
    return d == dv && (d == 32 || d == 64 || d == 80 || d == 96 || d == 128 || d == 256);
}

/* K/V stages: 1 by default (the next tile's K streams in while P V runs, its V while the next
 * S does); 2 in a variant build (FC_DEFINES=-DV2_STAGES=2): two K/V buffers, the next tile's
 * K and V fetched at the top of a tile while it computes from the other, one barrier a tile
 * instead of three. The stages change when data arrives, never which data or what is computed
 * from it, so no output bit; a GPU run times the variant beside the default (ci/gpu_check.sh). */
#ifndef V2_STAGES
#define V2_STAGES 1
#endif
static_assert(V2_STAGES == 1 || V2_STAGES == 2, "V2_STAGES: 1 or 2 K/V buffers");

/* Dynamic shared memory of one block: Q [BQ] rows of D + pad elements, ST stages of K [BK] rows
 * of D + pad and V [BK] rows of DV + pad, and for fp32 the per-warp P tiles [BQ/16][16][BK + 4]. */
template <typename T, int D, int DV, int BK, int ST>
__host__ __device__ constexpr size_t v2_smem_bytes(int bq)
{
    constexpr int pad = v2_traits<T>::pad;
    return ((size_t)bq * (D + pad) + (size_t)ST * BK * (D + pad + DV + pad)) * sizeof(T) +
           (v2_traits<T>::tensor_cores ? 0 : (size_t)bq * (BK + 4) * sizeof(float));
}

/* Stages a configuration gets: V2_STAGES where its largest block stays within V2_SMEM_MAX
 * bytes of shared memory, else 1. By default the 99 KiB sm_86/sm_89 allow (as v2_block_q's cap
 * does for one stage); a build that will run on A100/H100-class devices only may raise it
 * (163 / 227 KiB), e.g. for two
 * stages of 128-row blocks at D = 128 (104,448 bytes, 102 KiB). */
#ifndef V2_SMEM_MAX
#define V2_SMEM_MAX (99 * 1024)
#endif
template <typename T, int D, int DV, int BK> __host__ __device__ constexpr int v2_stages()
{
    return v2_smem_bytes<T, D, DV, BK, V2_STAGES>(v2_bq_cap<T, D, DV>()) <= (size_t)(V2_SMEM_MAX)
               ? V2_STAGES
               : 1;
}

/* Position in the row's kv work: list (0 partial, 1 full), slot, BK sub-tile; k0 its first key. */
struct v2_cursor {
    int32_t pass, slot, sub, k0;
};

/* Advances to the next sub-tile holding keys below Lk; false when the lists are exhausted. */
static __device__ inline bool v2_next(v2_cursor &c, const attn_args &a, int64_t row, int bk)
{
    for (;;) {
        if (++c.sub * bk >= a.kb) {
            c.sub = 0;
            c.slot++;
        }
        while (c.pass < 2 && c.slot >= (c.pass ? a.full_num : a.kv_num)[row]) {
            c.pass++;
            c.slot = 0;
            c.sub = 0;
        }
        if (c.pass == 2)
            return false;
        const int32_t id = attn_bmask_ids(a, c.pass, row)[c.slot];
        c.k0 = id * a.kb + c.sub * bk;
        if (c.k0 < a.lk)
            return true;
    }
}

/* First element of key row k0 of kv head hk, batch entry b, in a K or V tensor (or cache). */
template <typename T, int D>
__device__ inline const T *v2_kv_rows(const attn_args &a, const void *base, int32_t b, int32_t hk,
                                      int32_t k0)
{
    if (!a.page_table)
        return (const T *)base + (((int64_t)b * a.hkv + hk) * a.lk + k0) * D;
    /* cache [num_pages, Hkv, KB, D]: the page of kv block k0 / KB, row k0 % KB inside it */
    const int64_t page = a.page_table[(int64_t)b * a.pt_width + k0 / a.kb];
    return (const T *)base + ((page * a.hkv + hk) * a.kb + k0 % a.kb) * D;
}

/* Stages n rows of D elements from src (rows valid while row < nvalid, else zero-filled) into
 * smem rows of stride SROW, 16 bytes per cp.async, all threads of the block sharing the work. */
template <typename T, int D, int SROW>
__device__ inline void v2_stage_rows(T *dst, const T *src, int n, int32_t nvalid)
{
    constexpr int per16 = 16 / (int)sizeof(T), chunks = D / per16;
    for (int i = (int)threadIdx.x; i < n * chunks; i += (int)blockDim.x) {
        const int row = i / chunks, c = i % chunks;
        const bool ok = row < nvalid;
        cp_async_16(dst + row * SROW + c * per16, ok ? src + (int64_t)row * D + c * per16 : src, ok);
    }
}

/* Sum (or max) of x over the four lanes of a quad: the lanes holding one row's columns. */
static __device__ inline float v2_quad_max(float x)
{
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
static __device__ inline float v2_quad_sum(float x)
{
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

/* Scores of one tile, in place: s[j][e] (key tk0 + 8j + (e&1), row e/2 of the lane's two)
 * scaled and soft-capped where the key is in [klo, khi) of its row, else the masked score; the
 * rows' maxima into tile_max. CAP says whether softcap > 0, so the test is made once a tile. */
template <int NJ, bool CAP>
__device__ inline void v2_scores(float (&s)[NJ][4], float (&tile_max)[2], const int32_t (&klo)[2],
                                 const int32_t (&khi)[2], int32_t tk0, float scale, float softcap)
{
    V2_UNROLL
    for (int j = 0; j < NJ; j++)
        V2_UNROLL
        for (int e = 0; e < 4; e++) {
            const int i = e >> 1;
            const int32_t tk = tk0 + j * 8 + (e & 1);
            const float x = s[j][e] * scale;
            /* seam: soft-cap after the fill */
            s[j][e] = tk >= klo[i] && tk < khi[i] ? (CAP ? attn_softcap(x, softcap) : x)
                                                   : mutant_masked_score(softcap);
            tile_max[i] = fmaxf(tile_max[i], s[j][e]);
        }
}

/* v2_scores with the explicit terms (masks/xterms.h) of the lane's two rows: bits[i] the mask
 * row of row i (NULL on full tiles, where the block mask vouches for every pair, or without a
 * mask), bias[i] its bias row (NULL without a bias). A key in [klo, khi) whose bit is 0 is
 * masked; an allowed one gets its bias after the soft-cap (attn_softcap: the identity at
 * softcap 0, so no CAP flag). Bits and bias are read only for keys in [klo, khi), which lies
 * below Lk: never past a row's end, never at a key the families mask. */
template <int NJ>
__device__ inline void v2_scores_x(float (&s)[NJ][4], float (&tile_max)[2],
                                   const int32_t (&klo)[2], const int32_t (&khi)[2], int32_t tk0,
                                   float scale, float softcap, const uint8_t *const (&bits)[2],
                                   const float *const (&bias)[2])
{
    V2_UNROLL
    for (int j = 0; j < NJ; j++)
        V2_UNROLL
        for (int e = 0; e < 4; e++) {
            const int i = e >> 1;
            const int32_t tk = tk0 + j * 8 + (e & 1);
            bool in = tk >= klo[i] && tk < khi[i];
            if (in && bits[i])
                in = xmask_bit(bits[i], tk);
            float y = attn_softcap(s[j][e] * scale, softcap);
            if (in && bias[i])
                y += mutant_bias(bias[i][tk]); /* seam: bias negated */
            s[j][e] = in ? y : mutant_masked_score(softcap); /* seam: soft-cap after the fill */
            tile_max[i] = fmaxf(tile_max[i], s[j][e]);
        }
}

/* The state of this lane's query rows, set up once a block (kernels 2 and 3): r = 2 mt + i
 * is row g + 8i of the warp's m16 tile mt (the warp owns 16 MT rows from q0 + warp * 16 MT);
 * tq its token, valid whether it is below Lq (rows past Lq take part in every collective but
 * see no key and are never stored), [lo, hi) its allowed keys, one interval of stored tokens
 * (masks/mask.h: partial tiles test each key against it, so no key costs a mask evaluation),
 * m and l the online softmax's running max and this lane's share of the normaliser (the
 * quad's shares are summed at the end, so the sink's e^0 is one lane's), acc the output
 * accumulators (ND n8 tiles a m16 tile). */
template <int MT, int ND>
__device__ __forceinline__ void v2_rows_init(const attn_args &a, const mask_params &mask,
                                             int32_t q0, int warp, int g, int t, float sink,
                                             int32_t (&tq)[2 * MT], int32_t (&lo)[2 * MT],
                                             int32_t (&hi)[2 * MT], bool (&valid)[2 * MT],
                                             float (&m)[2 * MT], float (&l)[2 * MT],
                                             float (&acc)[MT][ND][4])
{
    V2_UNROLL
    for (int r = 0; r < 2 * MT; r++) {
        tq[r] = q0 + warp * 16 * MT + 16 * (r >> 1) + g + 8 * (r & 1);
        valid[r] = tq[r] < a.lq;
        lo[r] = hi[r] = 0;
        if (valid[r])
            mask_token_range(mask, a.seq, tq[r], &lo[r], &hi[r]);
        m[r] = sink;
        l[r] = t == 0 && sink != -INFINITY ? 1.0f : 0.0f;
    }
    V2_UNROLL
    for (int mt = 0; mt < MT; mt++)
        V2_UNROLL
        for (int n = 0; n < ND; n++)
            V2_UNROLL
            for (int e = 0; e < 4; e++) /* seam: sink with a value */
                acc[mt][n][e] = mutant_acc_start(sink != -INFINITY ? 1.0f : 0.0f);
}

/* S = Q K^T for the warp's MT m16 tiles and BK keys of the tile at tks, fp32, on tensor cores
 * (kernels 2 and 3); each K fragment serves the MT tiles. Q's A fragments come from qa when
 * QREGS (loaded once a block), else from shared memory (q_frag_row, this lane's ldmatrix row). */
template <typename T, int D, int BK, int MT, bool QREGS, int QN>
__device__ __forceinline__ void v2_qk(float (&s)[MT][BK / 8][4], const uint32_t (&qa)[QN][MT][4],
                                      const T *q_frag_row, const T *tks, int lane)
{
    constexpr int SROW = D + v2_traits<T>::pad, NJ = BK / 8;
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
            if constexpr (QREGS) {
                V2_UNROLL
                for (int c = 0; c < 4; c++)
                    qf[mt][c] = qa[kc][mt][c];
            } else {
                ldmatrix_x4(qf[mt], q_frag_row + mt * 16 * SROW + kc * 16);
            }
        }
        V2_UNROLL
        for (int jp = 0; jp < NJ / 2; jp++) {
            /* B fragments of key tiles 2jp (kf[0..1]) and 2jp + 1 (kf[2..3]) */
            uint32_t kf[4];
            ldmatrix_x4(kf, tks + (jp * 16 + (lane >> 4) * 8 + (lane & 7)) * SROW + kc * 16 +
                                ((lane >> 3) & 1) * 8);
            V2_UNROLL
            for (int mt = 0; mt < MT; mt++) {
                mma_m16n8k16<T>(s[mt][2 * jp], qf[mt], kf);
                mma_m16n8k16<T>(s[mt][2 * jp + 1], qf[mt], kf + 2);
            }
        }
    }
}

/* The epilogue (kernels 2 and 3): each row's l summed over its quad; empty rows (l == 0) write
 * exactly 0 and LSE -inf, a NaN l stays NaN (tested for == 0, not > 0); rows past Lq are never
 * stored. fp16/bf16 store two elements (32 bits) a store (DV and 2t are even). */
template <typename T, int DV, int MT>
__device__ __forceinline__ void v2_store_rows(const attn_args &a, int32_t b, int32_t h, int t,
                                              const int32_t (&tq)[2 * MT],
                                              const bool (&valid)[2 * MT],
                                              const float (&m)[2 * MT], const float (&l)[2 * MT],
                                              const float (&acc)[MT][DV / 8][4])
{
    V2_UNROLL
    for (int r = 0; r < 2 * MT; r++) {
        const int mt = r >> 1, i = r & 1;
        const float lsum = v2_quad_sum(l[r]);
        if (!valid[r])
            continue;
        /* seam: empty row yields NaN */
        const float inv = mutant_inv_l(lsum == 0.0f ? 0.0f : 1.0f / lsum, lsum);
        T *o = (T *)a.o + (((int64_t)b * a.hq + h) * a.lq + tq[r]) * DV;
        V2_UNROLL
        for (int n = 0; n < DV / 8; n++) {
            const float x0 = acc[mt][n][2 * i] * inv, x1 = acc[mt][n][2 * i + 1] * inv;
            if constexpr (v2_traits<T>::tensor_cores) {
                *(uint32_t *)(o + n * 8 + 2 * t) = pack2_rn<T>(x0, x1);
            } else {
                o[n * 8 + 2 * t] = from_f32<T>(x0);
                o[n * 8 + 2 * t + 1] = from_f32<T>(x1);
            }
        }
        mutant_write_past_end(o, DV, a, b, h, tq[r], t == 0); /* seam: write past the end */
        if (t == 0)
            a.lse[((int64_t)b * a.hq + h) * a.lq + tq[r]] =
                lsum == 0.0f ? -INFINITY : m[r] + logf(lsum);
    }
}

/* O += P V over one tile of BK keys on tensor cores (kernels 2 and 3), P in s (fp32, the S
 * accumulator layout: key 8j + 2t + (e & 1), row g + 8 (e >> 1) of m16 tile mt), rounded to T;
 * the S accumulators of n8 tiles 2kk and 2kk + 1 are the A fragment of key chunk kk, so P never
 * leaves registers. ZERO (kernel 2 always, kernel 3's masked loop): a key whose P is 0 on all
 * 16 rows of an m16 tile gets its V fragment zeroed for that tile's product, because the
 * tensor core would turn 0 * NaN (a masked, poisoned V) into NaN; live bit 4kk + c stands for
 * key 16kk + 2t + (c & 1) + 8 (c >> 1), exactly the keys of this lane's V fragment; for finite
 * V that changes nothing (0 * v adds +-0). Without ZERO every key of the tile is allowed for
 * every row. */
template <typename T, int DV, int BK, int MT, bool ZERO>
__device__ __forceinline__ void v2_pv(float (&acc)[MT][DV / 8][4], float (&s)[MT][BK / 8][4],
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

/* At most 2 * V2_BQ_MAX / MT threads (128 by default), at least V2_MIN_BLOCKS blocks per SM (1
 * by default): ptxas may then use up to 255 registers a thread, and the resource report (make
 * emu-nvcc) shows no spills in any configuration of the default build; with the first bound
 * alone its heuristics stop at 128 and spill a few bytes for some. The fp16/bf16 D = 128
 * instance takes 186 registers on sm_90, so 2 blocks (8 warps) an SM; a variant build with
 * -DV2_MIN_BLOCKS=3 caps it at 168 for 12 warps, at the cost of 20 bytes of spills (sm_90,
 * 2026-11-30), for a GPU run to time. */
#ifndef V2_MIN_BLOCKS
#define V2_MIN_BLOCKS 1
#endif
template <typename T, int D, int DV, int BK, int ST, int MT, bool X>
__global__ void __launch_bounds__(2 * V2_BQ_MAX / MT, V2_MIN_BLOCKS) attn_v2_kernel(attn_args a)
{
    typedef v2_traits<T> tr;
    constexpr int SROW = D + tr::pad, VROW = DV + tr::pad, NJ = BK / 8, ND = DV / 8, NR = 2 * MT;
    constexpr bool q_in_regs = tr::tensor_cores && D * MT <= 128;
    static_assert(D % 16 == 0 && DV % 16 == 0 && BK % 16 == 0, "tile shapes the fragment loops assume");
    static_assert(MT == 1 || (MT == 2 && tr::tensor_cores), "two m16 tiles a warp: tensor cores only");

    const int lane = (int)threadIdx.x & 31, warp = (int)threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int bq = (int)blockDim.x / 32 * 16 * MT;
    const int32_t q0 = (int32_t)blockIdx.x * bq, h = (int32_t)blockIdx.y, b = (int32_t)blockIdx.z;
    const int32_t hk = h / (a.hq / a.hkv);
    const int64_t row = attn_bmask_row(a, b, h, q0 / a.qb); /* bq divides qb: one mask row */
    mask_params mask = a.mask;
    mutant_window(mask); /* seam: window off by one */

    EMU_DYNAMIC_SHARED(T, smem);
    /* Q, then ST stages of K and V (stage st at sk + st * STAGE, its V BK rows after its K) */
    constexpr int STAGE = BK * (SROW + VROW);
    T *sq = smem, *sk = sq + bq * SROW, *sv = sk + BK * SROW;
    /* fp32: the warp's P tile */
    float *sp = tr::tensor_cores ? NULL : (float *)(sk + ST * STAGE) + warp * 16 * (BK + 4);

    v2_stage_rows<T, D, SROW>(sq, (const T *)a.q + (((int64_t)b * a.hq + h) * a.lq + q0) * D,
                              bq, a.lq - q0);
    cp_async_commit();

    /* This lane's rows (v2_rows_init) */
    int32_t tq[NR], lo[NR], hi[NR];
    bool valid[NR];
    float m[NR], l[NR], acc[MT][ND][4];
    const float sink = mutant_sink(attn_sink(a, h), a.scale); /* seam: sink scaled */
    v2_rows_init<MT, ND>(a, mask, q0, warp, g, t, sink, tq, lo, hi, valid, m, l, acc);

    v2_cursor cur = {0, 0, -1, 0};
    bool have = v2_next(cur, a, row, BK);
    /* One stage: groups in flight at the top of every tile are its K, then its V (empty groups
     * when the row has no tile, so the counts below hold on every path). Two: the tile's K and
     * V, one group, waited for whole. */
    if (have)
        v2_stage_rows<T, D, SROW>(sk, v2_kv_rows<T, D>(a, a.k, b, hk, cur.k0), BK, a.lk - cur.k0);
    if constexpr (ST == 1)
        cp_async_commit();
    if (have)
        v2_stage_rows<T, DV, VROW>(sv, v2_kv_rows<T, DV>(a, a.v, b, hk, cur.k0), BK, a.lk - cur.k0);
    cp_async_commit();
    if constexpr (ST == 1)
        cp_async_wait<1>(); /* Q and the first K; the first V may still be in flight */
    else
        cp_async_wait<0>();
    __syncthreads();

    /* Q fragments (A of m16n8k16, one per m16 tile and 16-wide d chunk) stay in registers for
     * the whole row of kv tiles when D * MT <= 128, else are re-read from shared memory. */
    uint32_t qa[q_in_regs ? D / 16 : 1][MT][4];
    const T *q_frag_row =
        sq + (warp * 16 * MT + ((lane >> 3) & 1) * 8 + (lane & 7)) * SROW + (lane >> 4) * 8;
    if constexpr (q_in_regs) {
        V2_UNROLL
        for (int kc = 0; kc < D / 16; kc++)
            V2_UNROLL
            for (int mt = 0; mt < MT; mt++)
                ldmatrix_x4(qa[kc][mt], q_frag_row + mt * 16 * SROW + kc * 16);
    }

    int st = 0; /* the tile's stage */
    while (have) {
        v2_cursor nxt = cur;
        bool more = false;
        if constexpr (ST == 1) {
            cp_async_wait<1>(); /* K of this tile has landed (V may still be in flight) */
            __syncthreads();
        } else {
            cp_async_wait<0>(); /* K and V of this tile have landed */
            __syncthreads();    /* ... visible to all; every warp is done with the other stage */
            more = v2_next(nxt, a, row, BK);
            if (more) { /* the next tile's K and V stream in while this one computes */
                T *nk = sk + (st ^ 1) * STAGE;
                v2_stage_rows<T, D, SROW>(nk, v2_kv_rows<T, D>(a, a.k, b, hk, nxt.k0), BK,
                                          a.lk - nxt.k0);
                v2_stage_rows<T, DV, VROW>(nk + BK * SROW, v2_kv_rows<T, DV>(a, a.v, b, hk, nxt.k0),
                                           BK, a.lk - nxt.k0);
            }
            cp_async_commit();
        }
        const T *tks = sk + st * STAGE, *tvs = tks + BK * SROW; /* this tile's K and V */

        /* S = Q K^T for the warp's rows and the tile's BK keys, fp32; each K fragment serves
         * the warp's MT m16 tiles. */
        float s[MT][NJ][4];
        if constexpr (tr::tensor_cores) {
            v2_qk<T, D, BK, MT, q_in_regs>(s, qa, q_frag_row, tks, lane);
        } else {
            V2_UNROLL
            for (int j = 0; j < NJ; j++)
                V2_UNROLL
                for (int e = 0; e < 4; e++)
                    s[0][j][e] = 0.0f;
            /* d outer, so the NJ x 4 sums stay in registers; each still adds its products in
             * ascending d, with fmaf: the same bits under nvcc and the emu. (MT is 1 here.) */
            const T *q0r = sq + (warp * 16 + g) * SROW, *q1r = q0r + 8 * SROW;
            for (int i = 0; i < D; i++) {
                const float qv[2] = {to_f32(q0r[i]), to_f32(q1r[i])};
                V2_UNROLL
                for (int j = 0; j < NJ; j++)
                    V2_UNROLL
                    for (int e = 0; e < 4; e++)
                        s[0][j][e] = fmaf(qv[e >> 1],
                                          to_f32(tks[(j * 8 + 2 * t + (e & 1)) * SROW + i]),
                                          s[0][j][e]);
            }
        }

        /* Scale, then the mask: on partial tiles the keys of the row's interval, on full ones
         * every key below Lk (a full tile never holds rows past Lq); rows past Lq see none. A
         * masked score is -inf whatever K held there, so NaN or inf in masked keys cannot
         * reach the max or the sum. The soft-cap test is hoisted out of the element loop
         * (same expression either way, attn_softcap), which keeps the loop free of branches. */
        const bool partial = !mutant_tile_is_full(cur.pass != 0); /* seam: partial block as full */
        int32_t klo[MT][2], khi[MT][2];
        float tile_max[MT][2];
        V2_UNROLL
        for (int r = 0; r < NR; r++) {
            klo[r >> 1][r & 1] = partial ? lo[r] : 0;
            khi[r >> 1][r & 1] = partial ? hi[r] : valid[r] ? a.lk : 0;
            tile_max[r >> 1][r & 1] = -INFINITY;
        }
        V2_UNROLL
        for (int mt = 0; mt < MT; mt++) {
            if constexpr (X) {
                /* the rows' pointers formed per tile: none live across the loop */
                const uint8_t *bits[2];
                const float *bias[2];
                V2_UNROLL
                for (int i = 0; i < 2; i++) {
                    const int r = 2 * mt + i;
                    bits[i] = partial && valid[r] ? attn_xmask_row(a, b, h, tq[r]) : NULL;
                    bias[i] = valid[r] ? attn_xbias_row(a, b, h, tq[r]) : NULL;
                }
                v2_scores_x<NJ>(s[mt], tile_max[mt], klo[mt], khi[mt], cur.k0 + 2 * t, a.scale,
                                a.softcap, bits, bias);
            } else if (a.softcap > 0.0f) {
                v2_scores<NJ, true>(s[mt], tile_max[mt], klo[mt], khi[mt], cur.k0 + 2 * t, a.scale,
                                    a.softcap);
            } else {
                v2_scores<NJ, false>(s[mt], tile_max[mt], klo[mt], khi[mt], cur.k0 + 2 * t,
                                     a.scale, a.softcap);
            }
        }

        /* Online softmax, per row. m == -inf means nothing was accumulated yet, so alpha is
         * irrelevant and taken as 0 rather than exp(-inf - m_new); masked scores give p = 0
         * exactly, never exp(-inf - (-inf)): e^(x - m_new) with m_new taken as 0 while it is
         * -inf (then every x is -inf or NaN), and expf(-inf) = +0 on both CUDA and glibc, so
         * the loop needs no branch per element. */
        V2_UNROLL
        for (int r = 0; r < NR; r++) {
            const int mt = r >> 1, i = r & 1;
            const float m_new = fmaxf(m[r], v2_quad_max(tile_max[mt][i]));
            /* seam: no online-softmax rescale */
            const float alpha = m[r] == -INFINITY ? 0.0f : mutant_rescale(expf(m[r] - m_new));
            l[r] *= alpha;
            if (t == 0)
                mutant_tile_sink(l[r], sink, m_new); /* seam: sink counted in every tile */
            V2_UNROLL
            for (int n = 0; n < ND; n++) {
                acc[mt][n][2 * i] *= alpha;
                acc[mt][n][2 * i + 1] *= alpha;
            }
            const float m_sub = m_new == -INFINITY ? 0.0f : m_new;
            V2_UNROLL
            for (int j = 0; j < NJ; j++)
                V2_UNROLL
                for (int c = 0; c < 2; c++) {
                    float &x = s[mt][j][2 * i + c];
                    x = expf(x - m_sub);
                    l[r] += x; /* the normaliser sums the fp32 P */
                }
            m[r] = m_new;
        }

        if constexpr (ST == 1) {
            cp_async_wait<0>(); /* V of this tile */
            __syncthreads();    /* ... visible to all; and every warp is done reading K */
            more = v2_next(nxt, a, row, BK);
            if (more) /* the next K streams in while P V runs */
                v2_stage_rows<T, D, SROW>(sk, v2_kv_rows<T, D>(a, a.k, b, hk, nxt.k0), BK,
                                          a.lk - nxt.k0);
            cp_async_commit();
        }

        /* O += P V, P in the input type. */
        if constexpr (tr::tensor_cores) {
            v2_pv<T, DV, BK, MT, true>(acc, s, tvs, lane);
        } else {
            /* fp32: the warp's P through its own smem tile, then each lane its accumulators,
             * keys in order; a zero P is skipped, never multiplied (V may be NaN there). */
            V2_UNROLL
            for (int j = 0; j < NJ; j++)
                V2_UNROLL
                for (int e = 0; e < 4; e++)
                    sp[(g + 8 * (e >> 1)) * (BK + 4) + j * 8 + 2 * t + (e & 1)] = s[0][j][e];
            __syncwarp();
            for (int j = 0; j < BK; j++) { /* keys in order, for every accumulator */
                const float pj[2] = {sp[g * (BK + 4) + j], sp[(g + 8) * (BK + 4) + j]};
                const T *vr = tvs + j * VROW + 2 * t;
                V2_UNROLL
                for (int n = 0; n < ND; n++)
                    V2_UNROLL
                    for (int e = 0; e < 4; e++)
                        if (pj[e >> 1] != 0.0f)
                            acc[0][n][e] = fmaf(pj[e >> 1], to_f32(vr[n * 8 + (e & 1)]),
                                                acc[0][n][e]);
            }
            __syncwarp(); /* the P tile is read before the next tile rewrites it */
        }

        if constexpr (ST == 1) {
            __syncthreads(); /* every warp is done reading V */
            if (more)
                v2_stage_rows<T, DV, VROW>(sv, v2_kv_rows<T, DV>(a, a.v, b, hk, nxt.k0), BK,
                                          a.lk - nxt.k0);
            cp_async_commit();
        }
        cur = nxt;
        have = more;
        if constexpr (ST == 2)
            st ^= 1;
    }

    v2_store_rows<T, DV, MT>(a, b, h, t, tq, valid, m, l, acc);
}

} /* namespace FC_GPU_NS */

#endif
