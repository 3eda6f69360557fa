/*
 * emut.h - C entry points of the emu self-test kernels (tests/emu/emut_kernels.cu,
 * emut_planted.cu) and of their checks (emut_check.c). Each kernel entry point exists once per
 * build: name_emu (g++ against gpu/emu/) and name_cuda (nvcc); EMUT(name) picks the one this
 * translation unit tests (-DEMUT_CUDA for the native build). Entry points return a
 * cudaError_t as int (0 = success) and take host buffers.
 */
#ifndef FLEXCHECK_EMUT_H
#define FLEXCHECK_EMUT_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifdef EMUT_CUDA
#define EMUT(name) name##_cuda
#else
#define EMUT(name) name##_emu
#endif

/* Shuffle operations and value types of emut_shfl. */
enum { EMUT_SHFL_IDX, EMUT_SHFL_UP, EMUT_SHFL_DOWN, EMUT_SHFL_XOR };
enum { EMUT_T_INT, EMUT_T_FLOAT, EMUT_T_DOUBLE, EMUT_T_LL, EMUT_T_HALF, EMUT_T_HALF2, EMUT_T_BF16, EMUT_T_BF162, EMUT_T_COUNT };
/* Fast-math functions of emut_fastmath. */
enum { EMUT_F_EXPF, EMUT_F_EXP2F, EMUT_F_FAST_EXPF, EMUT_F_FAST_LOGF, EMUT_F_RSQRTF, EMUT_F_FDIVIDEF, EMUT_F_COUNT };
/* Kernel misuse the emu must stop (emut_misuse); never run on a GPU (undefined there). */
enum { EMUT_MISUSE_DEADLOCK, EMUT_MISUSE_WIDTH, EMUT_MISUSE_EXITED_LANE, EMUT_MISUSE_MASK_MISMATCH, EMUT_MISUSE_EXEC_MISMATCH,
       EMUT_MISUSE_EXEC_EXITED, EMUT_MISUSE_TRAP, EMUT_MISUSE_COUNT };

#define EMUT_DECL(name, args) int name##_emu args; int name##_cuda args;
EMUT_DECL(emut_indices, (int gx, int gy, int gz, int bx, int by, int bz, unsigned *out))
EMUT_DECL(emut_barrier, (int n, int *out))
EMUT_DECL(emut_reduce, (int n, int *in, long long *out))
EMUT_DECL(emut_shfl, (int op, int type, int arg, int width, unsigned long long *out))
EMUT_DECL(emut_vote, (unsigned mask, unsigned pred, unsigned *out))
EMUT_DECL(emut_syncwarp, (int *out))
/* emu_warp_exec (emu only): 2 warps, `rounds` warp-wide instructions each; out [warp][round][lane],
 * calls [warp] the times the instruction's function ran. */
EMUT_DECL(emut_warp_exec, (int rounds, int *out, int *calls))
EMUT_DECL(emut_dynsmem, (int nbytes, int attr, int *out))
EMUT_DECL(emut_launch, (int bx, int by, int bz, int gx, int gy, int gz, int smem, int attr))
EMUT_DECL(emut_atomics, (int nblocks, int nthreads, int *iout, float *fout, unsigned *uout))
EMUT_DECL(emut_fastmath, (int fn, int n, const float *x, float *out))
EMUT_DECL(emut_convert, (int n, const float *x, unsigned short *h, unsigned short *b, const unsigned short *hin, float *hback, float *bback))
EMUT_DECL(emut_misuse, (int which))
/* Devices present (-1: the runtime failed; why says how) and the opt-in shared memory limit. */
EMUT_DECL(emut_device_count, (char *why, int n))
EMUT_DECL(emut_smem_optin, (void))
EMUT_DECL(emut_switches, (int nblocks, int nthreads, int rounds))
/* A small flash-attention forward (fp32, head dim 64, 64x64 tiles, 4 warps of 16 rows,
 * online softmax, shuffles and shared memory): o[h][i][:] for q, k, v of shape [h][s][64]. */
EMUT_DECL(emut_attention, (int s, int h, const float *q, const float *k, const float *v, float *o))
/* Planted bugs, for the sanitizer builds: "race_block", "race_warp", "race_ldmatrix", "oob_global",
 * "oob_dynamic_shared", "oob_static_shared", and "clean" (the same kernels, correct). */
EMUT_DECL(emut_planted, (const char *name))
EMUT_DECL(emut_planted_line, (const char *name))
#undef EMUT_DECL

/* The toolkit's own host conversions (emut_fp16_ref.cc), when its headers exist. */
int emut_ref_available(void);
unsigned short emut_ref_f2h(float f);
unsigned short emut_ref_f2bf(float f);
float emut_ref_h2f(unsigned short h);

/* Checks shared by the Criterion suites and the sanitizer driver: 0 on success, else 1 with
 * a one-line reason (naming the case) in why. */
typedef int (*emut_check_fn)(char *why, size_t n);
struct emut_check { const char *name; emut_check_fn fn; int emu_only; };
extern const struct emut_check emut_checks[];
extern const int emut_nchecks;
int emut_run_check(const char *name, char *why, size_t n);

#ifdef __cplusplus
}
#endif
#endif
