/*
 * ptx.cuh - the only inline PTX of flexcheck's kernels, in small named wrappers, each with a CPU
 * twin written from the PTX ISA's documented fragment layouts so the emu backend runs the same
 * kernel source (gpu/emu/emu.h rule 6):
 *
 *   mma_m16n8k16<T>(acc, a, b)   mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.f32
 *   ldmatrix_x4(r, row)          ldmatrix.sync.aligned.m8n8.x4.shared.b16
 *   ldmatrix_x4_trans(r, row)    ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16
 *   cp_async_16(dst, src, pred)  cp.async.cg.shared.global, 16 bytes, zero-fill when !pred
 *   cp_async_commit(), cp_async_wait<N>()
 *
 * Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16", 16-bit types), per lane with
 * g = lane >> 2 (groupID) and t = lane & 3 (threadID_in_group); a register holds two 16-bit
 * elements, the lower column (or row) index in the low half:
 *   A (16x16, row):  a[0] = A[g][2t..2t+1]    a[1] = A[g+8][2t..2t+1]
 *                    a[2] = A[g][2t+8..2t+9]  a[3] = A[g+8][2t+8..2t+9]
 *   B (16x8, col):   b[0] = B[2t..2t+1][g]    b[1] = B[2t+8..2t+9][g]
 *   C/D (16x8, f32): c[0..1] = C[g][2t..2t+1] c[2..3] = C[g+8][2t..2t+1]
 *   ldmatrix .x4: lanes 8i..8i+7 give the row addresses of matrix i; r[i] = M_i[g][2t..2t+1]
 *                 (.trans: M_i[2t][g] in the low half, M_i[2t+1][g] in the high half).
 *
 * The twins of mma and ldmatrix are warp-wide instructions of the emu (emu_warp_exec): every lane
 * of the warp must call them together, as the .sync.aligned instructions demand, and the last
 * lane to arrive computes the result of the whole warp at once. They need whole warps; the emu
 * stops a launch that calls them from a partial one. For the race checker each lane reads the
 * row it gives ldmatrix itself, before the instruction: a row another lane wrote needs a
 * __syncwarp (or __syncthreads) first, as on the GPU, where the PTX ISA promises memory ordering
 * for bar.warp.sync but not for the .sync of these instructions.
 *
 * Precision of the mma twin: products of two f16 (or bf16) values are exact in fp32, and the
 * twin adds them to the fp32 accumulator one by one, k = 0..15, each addition rounded
 * (fmaf of an exact product; a plain multiply-add where the product provably is exact). The
 * hardware's internal accumulation order and intermediate precision are not specified by the
 * ISA, so twin and tensor core agree within a few fp32 ulps of the largest partial sum, not
 * bitwise; tests/test_kernel_v2_ptx.c checks the twin against a
 * scalar product here, and the GPU check script holds twin and hardware to that tolerance.
 */
#ifndef FLEXCHECK_PTX_CUH
#define FLEXCHECK_PTX_CUH

#include "gpu/gpu_rt.h"

#include <stdint.h>
#include <string.h>

#include <algorithm>
#include <type_traits>

namespace FC_GPU_NS {

/* ---- 16-bit element packing (portable, no PTX) ---- */

static __host__ __device__ inline uint16_t bits16(__half x) { return __half_as_ushort(x); }
static __host__ __device__ inline uint16_t bits16(__nv_bfloat16 x) { return __bfloat16_as_ushort(x); }
template <typename T> __host__ __device__ inline float f32_of_bits(uint16_t u);
template <> __host__ __device__ inline float f32_of_bits<__half>(uint16_t u)
{
    return __half2float(__ushort_as_half(u));
}
template <> __host__ __device__ inline float f32_of_bits<__nv_bfloat16>(uint16_t u)
{
    return __bfloat162float(__ushort_as_bfloat16(u));
}

/* Two floats rounded to T (round to nearest even), lo in the low half: one mma A register. */
template <typename T> __host__ __device__ inline uint32_t pack2_rn(float lo, float hi);
template <> __host__ __device__ inline uint32_t pack2_rn<__half>(float lo, float hi)
{
    return (uint32_t)bits16(__float2half_rn(lo)) | ((uint32_t)bits16(__float2half_rn(hi)) << 16);
}
template <> __host__ __device__ inline uint32_t pack2_rn<__nv_bfloat16>(float lo, float hi)
{
    return (uint32_t)bits16(__float2bfloat16_rn(lo)) |
           ((uint32_t)bits16(__float2bfloat16_rn(hi)) << 16);
}

#ifdef FLEXCHECK_EMU
/* ---- the CPU twins (emu build only) ----
 * Each is one warp-wide instruction of the emu (emu_warp_exec, gpu/emu/emu.h): every lane hands
 * in its operands, and the last lane to arrive computes the instruction for the whole warp from
 * the layouts above, as the hardware does, then every lane goes on with its registers. */

struct mma_operands {
    float *acc;
    const uint32_t *a, *b;
};

/* How mma_exec may sum the products of a row of A or a column of B that holds x: MMA_PLAIN when
 * x times any such value is an exact normal fp32 number (bf16: 0 or a magnitude in [2^-60,
 * 2^60]; halves always, their products lying in 2^-48 .. 2^32), MMA_DOUBLE for other finite
 * values, MMA_FMAF for infinities and NaN. */
enum { MMA_PLAIN, MMA_DOUBLE, MMA_FMAF };
template <typename T> static inline int mma_class(float x)
{
    if (std::is_same<T, __half>::value)
        return MMA_PLAIN;
    x = fabsf(x);
    if (x == 0.0f || (x >= 0x1p-60f && x <= 0x1p60f))
        return MMA_PLAIN;
    return x <= 0x1.fffffep127f ? MMA_DOUBLE : MMA_FMAF; /* FLT_MAX; NaN fails */
}

/* One element of D: s plus the products x[k] y[ks] (k = 0..15) in order, each addition rounded
 * once to fp32 and each product exact, i.e. fmaf(x, y, s) step by step, computed the cheapest
 * way that gives fmaf's bits (mma_class). MMA_PLAIN: the product is exact in fp32, so s + x * y
 * rounds once. MMA_DOUBLE: the product is exact in double (at most 16 significant bits and any
 * exponent of two bf16), and so is the sum unless the addends lie more than 53 - 24 binary
 * places apart; then the smaller one is under 2^-29 of the larger, too small to carry the sum to
 * a rounding boundary of fp32, so rounding to double and then to fp32 is the correctly rounded
 * sum. MMA_FMAF: fmaf itself, the NaN it returns included. ks: B's stride. */
static inline float mma_sum16(int cls, float s, const float *x, const float *y, int ks)
{
    if (cls == MMA_PLAIN)
        for (int k = 0; k < 16; k++)
            s = s + x[k] * y[k * ks];
    else if (cls == MMA_DOUBLE)
        for (int k = 0; k < 16; k++)
            s = (float)((double)s + (double)x[k] * (double)y[k * ks]);
    else
        for (int k = 0; k < 16; k++)
            s = fmaf(x[k], y[k * ks], s);
    return s;
}

/* D = A B + C for the warp: A [16][16] and B [16][8] (b[k][n]) gathered from the lanes'
 * fragments, each element of D by mma_sum16 in the class of its row of A and column of B. */
template <typename T> static void mma_exec(void *const *lanes)
{
    static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "a register's low half at the lower address");
    uint16_t Ar[16][16], Br[16][8]; /* the elements as the lanes hold them */
    float A[16][16], B[16][8], C[16][8];
    for (int lane = 0; lane < 32; lane++) {
        const mma_operands *op = (const mma_operands *)lanes[lane];
        const int g = lane >> 2, t = lane & 3;
        /* a[i] = A[g + 8(i&1)][2t + 8(i>>1) + {0,1}]: one store, the low half first */
        for (int i = 0; i < 4; i++)
            memcpy(&Ar[g + 8 * (i & 1)][2 * t + 8 * (i >> 1)], &op->a[i], 4);
        for (int i = 0; i < 2; i++) { /* b[i] = B[2t + 8i + {0,1}][g] */
            Br[2 * t + 8 * i][g] = (uint16_t)(op->b[i] & 0xffffu);
            Br[2 * t + 8 * i + 1][g] = (uint16_t)(op->b[i] >> 16);
        }
        for (int e = 0; e < 4; e++) /* c[e] = C[g + 8(e>>1)][2t + (e&1)] */
            C[g + 8 * (e >> 1)][2 * t + (e & 1)] = op->acc[e];
    }
    for (int i = 0; i < 256; i++) /* in one loop, which vectorises */
        (&A[0][0])[i] = f32_of_bits<T>((&Ar[0][0])[i]);
    for (int i = 0; i < 128; i++)
        (&B[0][0])[i] = f32_of_bits<T>((&Br[0][0])[i]);
    int row_cls[16], col_cls[8], cols = MMA_PLAIN;
    for (int n = 0; n < 8; n++) {
        col_cls[n] = MMA_PLAIN;
        for (int k = 0; k < 16; k++)
            col_cls[n] = std::max(col_cls[n], mma_class<T>(B[k][n]));
        cols = std::max(cols, col_cls[n]);
    }
    for (int m = 0; m < 16; m++) {
        row_cls[m] = MMA_PLAIN;
        for (int k = 0; k < 16; k++)
            row_cls[m] = std::max(row_cls[m], mma_class<T>(A[m][k]));
    }
    for (int m0 = 0; m0 < 16; m0 += 4) {
        int rows = MMA_PLAIN;
        for (int m = m0; m < m0 + 4; m++)
            rows = std::max(rows, row_cls[m]);
        if (rows == MMA_PLAIN && cols == MMA_PLAIN) {
            /* the common case, four rows at a time in vector registers, k outer: each sum
             * still adds in k order, so the bits are mma_sum16's */
            typedef float v4f __attribute__((vector_size(16)));
            v4f s[4][2];
            memcpy(s, C[m0], sizeof s);
            for (int k = 0; k < 16; k++) {
                v4f b[2];
                memcpy(b, B[k], sizeof b);
#pragma GCC unroll 4 /* constant indices, so s stays in registers */
                for (int i = 0; i < 4; i++) {
                    const float a = A[m0 + i][k];
                    s[i][0] = s[i][0] + a * b[0];
                    s[i][1] = s[i][1] + a * b[1];
                }
            }
            memcpy(C[m0], s, sizeof s);
            continue;
        }
        for (int m = m0; m < m0 + 4; m++)
            for (int n = 0; n < 8; n++)
                C[m][n] = mma_sum16(std::max(row_cls[m], col_cls[n]), C[m][n], A[m], &B[0][n], 8);
    }
    for (int lane = 0; lane < 32; lane++) {
        const mma_operands *op = (const mma_operands *)lanes[lane];
        const int g = lane >> 2, t = lane & 3;
        for (int e = 0; e < 4; e++)
            op->acc[e] = C[g + 8 * (e >> 1)][2 * t + (e & 1)];
    }
}

template <typename T>
__device__ __forceinline__ void mma_twin(float acc[4], const uint32_t a[4], const uint32_t b[2])
{
    mma_operands op = {acc, a, b};
    emu_warp_exec(mma_exec<T>, &op);
}

/* ldmatrix: each lane loads the row its address names (8 b16 elements, 16 bytes) itself, so
 * the race checker sees that lane read it; the instruction then hands the elements out. */
struct ldmatrix_operands {
    uint16_t row[8];
    uint32_t *r;
};
/* Lane l's r[i]: .x4 M_i[g][2t..2t+1], row g of matrix i from lane 8i + g; .trans M_i[2t][g]
 * and M_i[2t+1][g], from lanes 8i + 2t and 8i + 2t + 1. */
template <bool TRANS> static void ldmatrix_exec(void *const *lanes)
{
    const ldmatrix_operands *const *op = (const ldmatrix_operands *const *)lanes;
    for (int lane = 0; lane < 32; lane++) {
        const int g = lane >> 2, t = lane & 3;
        for (int i = 0; i < 4; i++) {
            const uint16_t lo = TRANS ? op[8 * i + 2 * t]->row[g] : op[8 * i + g]->row[2 * t];
            const uint16_t hi = TRANS ? op[8 * i + 2 * t + 1]->row[g] : op[8 * i + g]->row[2 * t + 1];
            op[lane]->r[i] = (uint32_t)lo | ((uint32_t)hi << 16);
        }
    }
}
template <bool TRANS> __device__ __forceinline__ void ldmatrix_twin(uint32_t r[4], const void *smem_row)
{
    ldmatrix_operands op;
    const uint16_t *src = (const uint16_t *)smem_row;
    for (int c = 0; c < 8; c++)
        op.row[c] = src[c];
    op.r = r;
    emu_warp_exec(ldmatrix_exec<TRANS>, &op);
}
#endif /* FLEXCHECK_EMU */

/* ---- mma.sync m16n8k16, fp32 accumulate: acc += A * B ---- */

/* T = __half or __nv_bfloat16. */
template <typename T> __device__ inline void mma_m16n8k16(float acc[4], const uint32_t a[4],
                                                          const uint32_t b[2])
{
#ifdef __CUDA_ARCH__
    if constexpr (std::is_same<T, __half>::value)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                     "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                     "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#elif defined(FLEXCHECK_EMU)
    mma_twin<T>(acc, a, b);
#endif
}

/* ---- ldmatrix .x4 (and .trans): four 8x8 b16 matrices from shared memory ---- */

/* smem_row: this lane's row address (16-byte aligned), see the layout at the top. */
static __device__ inline void ldmatrix_x4(uint32_t r[4], const void *smem_row)
{
#ifdef __CUDA_ARCH__
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem_row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
#elif defined(FLEXCHECK_EMU)
    ldmatrix_twin<false>(r, smem_row);
#endif
}
static __device__ inline void ldmatrix_x4_trans(uint32_t r[4], const void *smem_row)
{
#ifdef __CUDA_ARCH__
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem_row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
#elif defined(FLEXCHECK_EMU)
    ldmatrix_twin<true>(r, smem_row);
#endif
}

/* ---- cp.async: 16 bytes global -> shared, asynchronous; zero-fill (nothing read) if !pred.
 * The twin copies at once: a group is then complete as soon as it is committed, one of the
 * orders the hardware may produce; the kernel's barriers are what make the data visible. ---- */

static __device__ inline void cp_async_16(void *smem, const void *gmem, bool pred)
{
#ifdef __CUDA_ARCH__
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    const int n = pred ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(n));
#else
    if (pred)
        memcpy(smem, gmem, 16);
    else
        memset(smem, 0, 16);
#endif
}
static __device__ inline void cp_async_commit()
{
#ifdef __CUDA_ARCH__
    asm volatile("cp.async.commit_group;\n" ::);
#endif
}
/* Waits until at most N of this thread's committed groups are still in flight. */
template <int N> __device__ inline void cp_async_wait()
{
#ifdef __CUDA_ARCH__
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

} /* namespace FC_GPU_NS */

#endif
