/*
 * gpu_rt.h - the one include that makes a kernel source compile in both builds: the CUDA
 * runtime and fp16/bf16 headers (under the emu build, gpu/emu/include's stand-ins, with
 * gpu/emu/emu.h forced in front by the compile rule) and emu_compat.h's macros (GPU_LAUNCH,
 * GPU_SYM, EMU_DYNAMIC_SHARED).
 */
#ifndef FLEXCHECK_GPU_RT_H
#define FLEXCHECK_GPU_RT_H

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "gpu/emu/emu_compat.h"

/* Both builds of one source link into one library: their C++ symbols live in different
 * namespaces so template instantiations (weak symbols) can never be merged across builds. */
#define FC_GPU_CAT2(a, b) a##b
#define FC_GPU_CAT(a, b) FC_GPU_CAT2(a, b)
#if defined(ATTN_MUTANT) && ATTN_MUTANT
/* A test-only mutant build (tests/module.mk): its own namespace and entry names. */
#define FC_GPU_NS FC_GPU_CAT(fc_mutant, ATTN_MUTANT)
#define GPU_ENTRY(name) FC_GPU_CAT(FC_GPU_CAT(name, _mutant), ATTN_MUTANT)
#elif defined(FLEXCHECK_EMU)
#define FC_GPU_NS fc_emu
#define GPU_ENTRY(name) GPU_SYM(name)
#else
#define FC_GPU_NS fc_cuda
#define GPU_ENTRY(name) GPU_SYM(name)
#endif

#endif
