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
 * The twins exchange fragments through a per-warp scratch in shared memory ordered by
 * __syncwarp (two per call: after the writes, and before the scratch is reused), so they are
 * warp collectives like the instructions: every lane of the warp must call them together.
 * They assume a block whose threads form whole warps.
 *
 * Precision of the mma twin: products of two f16 (or bf16) values are exact in fp32, and the
 * twin adds them to the fp32 accumulator one by one, k = 0..15, each addition rounded
 * (fmaf of an exact product; a plain multiply-add where the product provably is exact). The
 * hardware's internal accumulation order and intermediate precision are not specified by the
 * ISA, so twin and tensor core agree within a few fp32 ulps of the largest partial sum, not
 * bitwise; tests/test_kernel_v2.c checks the twin against a
 * scalar product here, and the GPU check script holds twin and hardware to that tolerance.
 */
#ifndef FLEXCHECK_PTX_CUH
#define FLEXCHECK_PTX_CUH

#include "gpu/gpu_rt.h"

#include <stdint.h>
#include <string.h>

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
template <typename T> __host__ __device__ inline float lo_f32(uint32_t r)
{
    return f32_of_bits<T>((uint16_t)(r & 0xffffu));
}
template <typename T> __host__ __device__ inline float hi_f32(uint32_t r)
{
    return f32_of_bits<T>((uint16_t)(r >> 16));
}

#ifndef __CUDA_ARCH__
/* ---- the CPU twins (absent from nvcc's device pass) ----
 * Their exchange area: one slot of 8 words per lane, per warp of the block. */
enum { PTX_TWIN_WORDS = 8, PTX_MAX_WARPS = 32 };
static __device__ inline uint32_t *ptx_twin_slot(int lane_of_warp)
{
    __shared__ uint32_t scratch[PTX_MAX_WARPS][32][PTX_TWIN_WORDS];
    const unsigned tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    return scratch[tid / 32][lane_of_warp];
}
static __device__ inline int ptx_lane(void)
{
    return (int)((threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) & 31u);
}

/* The twin gathers its two rows of A (g, g + 8) from its quad's slots and its two columns of B
 * (2t, 2t + 1) from the slots of lanes 4n .. 4n + 3, by the layouts above, then sums. */
template <typename T> __device__ inline void mma_twin(float acc[4], const uint32_t a[4],
                                                      const uint32_t b[2])
{
    const int lane = ptx_lane(), g = lane >> 2, t = lane & 3;
    uint32_t *warp_slots = ptx_twin_slot(0); /* lane l's slot is warp_slots + l * PTX_TWIN_WORDS */
    uint32_t *mine = warp_slots + lane * PTX_TWIN_WORDS;
    for (int i = 0; i < 4; i++)
        mine[i] = a[i];
    mine[4] = b[0];
    mine[5] = b[1];
    __syncwarp();
    float ar[2][16], bc[2][16];
    for (int q = 0; q < 4; q++)     /* lane q of a quad holds k = 2q, 2q+1 (and + 8) */
        for (int h = 0; h < 2; h++) /* h = 1: k >= 8 */
            for (int i = 0; i < 2; i++) {
                const uint32_t wa = warp_slots[(4 * g + q) * PTX_TWIN_WORDS + i + 2 * h];
                ar[i][8 * h + 2 * q] = lo_f32<T>(wa);
                ar[i][8 * h + 2 * q + 1] = hi_f32<T>(wa);
                const uint32_t wb = warp_slots[(4 * (2 * t + i) + q) * PTX_TWIN_WORDS + 4 + h];
                bc[i][8 * h + 2 * q] = lo_f32<T>(wb);
                bc[i][8 * h + 2 * q + 1] = hi_f32<T>(wb);
            }
    /* Each addition rounds once to fp32 and each product is exact, i.e. fmaf(a, b, s). A product
     * of two halves is always a normal fp32 number (2^-48 .. 2^32), so s + a * b is that very
     * fmaf, without the libm call; bf16 shares fp32's exponent range, so there the shortcut
     * holds only while every input is 0 or in [2^-60, 2^60]. */
    bool plain = std::is_same<T, __half>::value;
    if (!plain) {
        plain = true;
        for (int i = 0; i < 2; i++)
            for (int k = 0; k < 16; k++) {
                const float x = fabsf(ar[i][k]), y = fabsf(bc[i][k]);
                plain = plain && (x == 0.0f || (x >= 0x1p-60f && x <= 0x1p60f)) &&
                        (y == 0.0f || (y >= 0x1p-60f && y <= 0x1p60f));
            }
    }
    for (int e = 0; e < 4; e++) {
        const float *x = ar[e >> 1], *y = bc[e & 1];
        float s = acc[e];
        if (plain)
            for (int k = 0; k < 16; k++)
                s = s + x[k] * y[k];
        else
            for (int k = 0; k < 16; k++)
                s = fmaf(x[k], y[k], s);
        acc[e] = s;
    }
    __syncwarp(); /* every lane has read the scratch before anyone reuses it */
}

/* Row `row` (0..7) of matrix i: the address lane 8i + row gave. */
static __device__ inline const uint16_t *twin_row(int i, int row)
{
    const uint32_t *s = ptx_twin_slot(8 * i + row);
    const uint64_t p = (uint64_t)s[0] | ((uint64_t)s[1] << 32);
    return (const uint16_t *)(uintptr_t)p;
}
static __device__ inline void ldmatrix_twin(uint32_t r[4], const void *smem_row, int trans)
{
    const int lane = ptx_lane(), g = lane >> 2, t = lane & 3;
    uint32_t *mine = ptx_twin_slot(lane);
    const uint64_t p = (uint64_t)(uintptr_t)smem_row;
    mine[0] = (uint32_t)p;
    mine[1] = (uint32_t)(p >> 32);
    __syncwarp();
    for (int i = 0; i < 4; i++) {
        uint16_t lo, hi;
        if (!trans) {
            lo = twin_row(i, g)[2 * t];
            hi = twin_row(i, g)[2 * t + 1];
        } else {
            lo = twin_row(i, 2 * t)[g];
            hi = twin_row(i, 2 * t + 1)[g];
        }
        r[i] = (uint32_t)lo | ((uint32_t)hi << 16);
    }
    __syncwarp();
}
#endif /* !__CUDA_ARCH__ */

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
#else
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
#else
    ldmatrix_twin(r, smem_row, 0);
#endif
}
static __device__ inline void ldmatrix_x4_trans(uint32_t r[4], const void *smem_row)
{
#ifdef __CUDA_ARCH__
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem_row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
#else
    ldmatrix_twin(r, smem_row, 1);
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
