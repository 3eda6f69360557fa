/*
 * emu_compat.h - the few macros a kernel .cu needs so that one source builds with nvcc (GPU)
 * and with g++ against gpu/emu/emu.h (CPU emulation). Include it from every .cu, in both builds.
 *
 *   EMU_DYNAMIC_SHARED(T, name)  declares `T *name`, this block's dynamic shared memory
 *                                (16-byte aligned on both sides).
 *   GPU_SYM(name)                the C entry point's name for this build: name_emu or name_cuda.
 *   GPU_LAUNCH(k, grid, block, smem, stream, args...)
 *                                cudaLaunchKernelEx in both builds; evaluates to a cudaError_t.
 *   GPU_CHECK(call)              evaluates a CUDA call; on failure prints the call site and the
 *                                error string to stderr and returns the error from the
 *                                enclosing function (which must return cudaError_t or int).
 */
#ifndef FLEXCHECK_EMU_COMPAT_H
#define FLEXCHECK_EMU_COMPAT_H

#include <cstdio>
#include <cstring>
#include <cuda_runtime.h>

#if defined(FLEXCHECK_EMU)
#define EMU_DYNAMIC_SHARED(T, name) T *name = reinterpret_cast<T *>(emu_dyn_smem)
#define GPU_SYM(name) name##_emu
#else
#define EMU_DYNAMIC_SHARED(T, name)                                              \
    extern __shared__ __align__(16) unsigned char emu_dynamic_smem_##name[];     \
    T *name = reinterpret_cast<T *>(emu_dynamic_smem_##name)
#define GPU_SYM(name) name##_cuda
#endif

static inline cudaError_t gpu_launch_config(cudaLaunchConfig_t *c, dim3 grid, dim3 block, size_t smem, cudaStream_t s)
{
    *c = cudaLaunchConfig_t();
    c->gridDim = grid;
    c->blockDim = block;
    c->dynamicSmemBytes = smem;
    c->stream = s;
    return cudaSuccess;
}
#define GPU_LAUNCH(kernel, grid, block, smem, stream, ...)                                    \
    ([&]() -> cudaError_t {                                                                 \
        cudaLaunchConfig_t gpu_cfg_;                                                        \
        gpu_launch_config(&gpu_cfg_, (grid), (block), (smem), (stream));                     \
        return cudaLaunchKernelEx(&gpu_cfg_, (kernel), __VA_ARGS__);                        \
    }())

#define GPU_CHECK(call)                                                                       \
    do {                                                                                    \
        cudaError_t gpu_err_ = (call);                                                      \
        if (gpu_err_ != cudaSuccess) {                                                      \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,                   \
                    cudaGetErrorString(gpu_err_));                                          \
            return gpu_err_;                                                                \
        }                                                                                   \
    } while (0)

#endif
