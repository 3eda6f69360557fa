/*
 * v2t.h - C entry points of the PTX-wrapper test kernels (tests/v2/ptx_twin.cu), one per
 * wrapper of gpu/ptx.cuh. Each exists once per build: name_emu (the CPU twin, g++ against
 * gpu/emu/) and name_cuda (the instruction, nvcc). They take host buffers and return a
 * cudaError_t as int (0 = success). tests/test_kernel_v2_ptx.c holds both to one meaning.
 */
#ifndef FLEXCHECK_V2T_H
#define FLEXCHECK_V2T_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define V2T_DECL(name, args) int name##_emu args; int name##_cuda args;
/* D = A B + C for one m16n8k16 (dtype 0: f16, 1: bf16): a [16][16], b [16][8] (b[k][n]),
 * c and d [16][8], row-major floats (a, b representable in the dtype). Each lane builds its
 * fragments from a, b, c by the PTX ISA layout and writes its part of d. */
V2T_DECL(v2t_mma, (int dtype, const float *a, const float *b, const float *c, float *d))
/* ldmatrix .x4 (trans 0/1) over a [32][32] b16 matrix m in shared memory: lane l gives the
 * address of element (row[l], col[l]) (col a multiple of 8); out [32 lanes][4] registers. */
V2T_DECL(v2t_ldmatrix, (int trans, const uint16_t *m, const int *row, const int *col,
                        uint32_t *out))
/* cp.async of n 16-byte chunks src -> shared -> dst by 32 threads, chunk i copied iff
 * pred[i] (else zero-filled); two commit groups waited for with wait_group 1 then 0. */
V2T_DECL(v2t_cp_async, (int n, const uint32_t *src, const int *pred, uint32_t *dst))
#undef V2T_DECL

#ifdef __cplusplus
}
#endif

#endif
