/*
 * ptx_twin.cu - test kernels for the PTX wrappers of gpu/ptx.cuh: each runs one wrapper on a
 * known input and returns every lane's registers, so tests/test_kernel_v2_ptx.c can check the
 * CPU twin (emu build) and, on a GPU, the instruction (nvcc build) against the PTX ISA's
 * fragment layouts and a scalar product. Not part of the library (gpu/module.mk builds the .cu
 * files directly under gpu/ only); tests/module.mk builds it in both ways.
 */
#include "gpu/attn_common.cuh"
#include "gpu/ptx.cuh"
#include "tests/v2/v2t.h"

namespace FC_GPU_NS {

/* The fragments of lane l straight from row-major matrices (no ldmatrix: the layout alone). */
template <typename T>
__global__ void k_mma(const float *a, const float *b, const float *c, float *d)
{
    const int lane = (int)threadIdx.x, g = lane >> 2, t = lane & 3;
    uint32_t af[4], bf[2];
    for (int i = 0; i < 4; i++) { /* a[i] = A[g + 8(i&1)][2t + 8(i>>1) + {0,1}] */
        const int r = g + 8 * (i & 1), k = 2 * t + 8 * (i >> 1);
        af[i] = pack2_rn<T>(a[r * 16 + k], a[r * 16 + k + 1]);
    }
    for (int i = 0; i < 2; i++) { /* b[i] = B[2t + 8i + {0,1}][g] */
        const int k = 2 * t + 8 * i;
        bf[i] = pack2_rn<T>(b[k * 8 + g], b[(k + 1) * 8 + g]);
    }
    float acc[4];
    for (int e = 0; e < 4; e++) /* c[e] = C[g + 8(e>>1)][2t + (e&1)] */
        acc[e] = c[(g + 8 * (e >> 1)) * 8 + 2 * t + (e & 1)];
    mma_m16n8k16<T>(acc, af, bf);
    for (int e = 0; e < 4; e++)
        d[(g + 8 * (e >> 1)) * 8 + 2 * t + (e & 1)] = acc[e];
}

__global__ void k_ldmatrix(int trans, const uint16_t *m, const int *row, const int *col,
                           uint32_t *out)
{
    __shared__ __align__(16) uint16_t sm[32 * 32];
    const int lane = (int)threadIdx.x;
    for (int i = lane; i < 32 * 32; i += 32)
        sm[i] = m[i];
    __syncwarp();
    uint32_t r[4];
    const uint16_t *addr = sm + row[lane] * 32 + col[lane];
    if (trans)
        ldmatrix_x4_trans(r, addr);
    else
        ldmatrix_x4(r, addr);
    for (int i = 0; i < 4; i++)
        out[lane * 4 + i] = r[i];
}

__global__ void k_cp_async(int n, const uint32_t *src, const int *pred, uint32_t *dst)
{
    __shared__ __align__(16) uint32_t sm[4 * 64];
    const int lane = (int)threadIdx.x, half = n / 2;
    for (int i = lane; i < half; i += 32)
        cp_async_16(sm + 4 * i, src + 4 * i, pred[i] != 0);
    cp_async_commit();
    for (int i = half + lane; i < n; i += 32)
        cp_async_16(sm + 4 * i, pred[i] ? src + 4 * i : src, pred[i] != 0);
    cp_async_commit();
    cp_async_wait<1>();
    cp_async_wait<0>();
    __syncwarp();
    for (int i = lane; i < 4 * n; i += 32)
        dst[i] = sm[i];
}

template <typename T> static cudaError_t upload_n(T **d, const T *h, size_t n)
{
    cudaError_t e = cudaMalloc((void **)d, n * sizeof(T) + 1);
    if (e == cudaSuccess && h)
        e = cudaMemcpy(*d, h, n * sizeof(T), cudaMemcpyHostToDevice);
    return e;
}

} /* namespace FC_GPU_NS */

using namespace FC_GPU_NS;

extern "C" int GPU_SYM(v2t_mma)(int dtype, const float *a, const float *b, const float *c,
                                float *d)
{
    float *da = NULL, *db = NULL, *dc = NULL, *dd = NULL;
    GPU_CHECK(upload_n(&da, a, 256));
    GPU_CHECK(upload_n(&db, b, 128));
    GPU_CHECK(upload_n(&dc, c, 128));
    GPU_CHECK(upload_n<float>(&dd, NULL, 128));
    void (*k)(const float *, const float *, const float *, float *) =
        dtype ? k_mma<__nv_bfloat16> : k_mma<__half>;
    GPU_CHECK(GPU_LAUNCH(k, dim3(1), dim3(32), 0, (cudaStream_t)0, da, db, dc, dd));
    GPU_CHECK(cudaMemcpy(d, dd, 128 * sizeof(float), cudaMemcpyDeviceToHost));
    cudaFree(da);
    cudaFree(db);
    cudaFree(dc);
    return cudaFree(dd);
}

extern "C" int GPU_SYM(v2t_ldmatrix)(int trans, const uint16_t *m, const int *row, const int *col,
                                     uint32_t *out)
{
    uint16_t *dm = NULL;
    int *dr = NULL, *dcol = NULL;
    uint32_t *dout = NULL;
    GPU_CHECK(upload_n(&dm, m, 32 * 32));
    GPU_CHECK(upload_n(&dr, row, 32));
    GPU_CHECK(upload_n(&dcol, col, 32));
    GPU_CHECK(upload_n<uint32_t>(&dout, NULL, 128));
    GPU_CHECK(GPU_LAUNCH(k_ldmatrix, dim3(1), dim3(32), 0, (cudaStream_t)0, trans,
                         (const uint16_t *)dm, (const int *)dr, (const int *)dcol, dout));
    GPU_CHECK(cudaMemcpy(out, dout, 128 * sizeof(uint32_t), cudaMemcpyDeviceToHost));
    cudaFree(dm);
    cudaFree(dr);
    cudaFree(dcol);
    return cudaFree(dout);
}

extern "C" int GPU_SYM(v2t_cp_async)(int n, const uint32_t *src, const int *pred, uint32_t *dst)
{
    uint32_t *ds = NULL, *dd = NULL;
    int *dp = NULL;
    if (n < 0 || n > 64)
        return (int)cudaErrorInvalidValue;
    GPU_CHECK(upload_n(&ds, src, 4 * (size_t)n));
    GPU_CHECK(upload_n(&dp, pred, (size_t)n));
    GPU_CHECK(upload_n<uint32_t>(&dd, NULL, 4 * (size_t)n));
    GPU_CHECK(GPU_LAUNCH(k_cp_async, dim3(1), dim3(32), 0, (cudaStream_t)0, n,
                         (const uint32_t *)ds, (const int *)dp, dd));
    GPU_CHECK(cudaMemcpy(dst, dd, 4 * (size_t)n * sizeof(uint32_t), cudaMemcpyDeviceToHost));
    cudaFree(ds);
    cudaFree(dp);
    return cudaFree(dd);
}
