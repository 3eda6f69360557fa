/*
 * emu.h - run a CUDA kernel's own .cu source on the CPU (the `emu` backend).
 *
 * The same file is compiled twice: by nvcc for the GPU, and by g++ as C++ with this header
 * forced in front of it:
 *
 *   g++ -std=c++17 -x c++ -include gpu/emu/emu.h -Igpu/emu/include -c k.cu -o k.emu.o
 *   (link with the runtime, gpu/emu/emu_runtime.cc, and -lboost_context -lpthread)
 *
 * gpu/module.mk does this for every .cu under gpu/. Each CUDA thread is a Boost.Context fiber;
 * the fibers of one block run round-robin on one OS thread and switch only at barriers, warp
 * shuffles and votes; blocks are spread over a pool of OS threads. Sanitizer builds:
 * -DEMU_ASAN (with -fsanitize=address,undefined) and -DEMU_RACE (the kernel TU with
 * -fsanitize=thread, linked against gpu/emu/emu_race.cc instead of the TSan runtime).
 *
 * RULES for kernel authors, so that one source serves both builds:
 *  1. Include only <cuda_runtime.h>, <cuda_fp16.h>, <cuda_bf16.h>, <math_constants.h>, the C/C++
 *     standard headers and project headers; gpu/emu/include/ has stand-ins for the CUDA ones.
 *     Include "gpu/emu/emu_compat.h" in both builds (or gpu/gpu_rt.h, which includes it).
 *  2. Launch with cudaLaunchKernelEx (or GPU_LAUNCH from emu_compat.h, which wraps it), never
 *     with <<<...>>>, which g++ cannot parse. Check every launch (GPU_CHECK). Launches here are
 *     synchronous: a kernel error comes back from the launch itself and, once, from the next
 *     cudaDeviceSynchronize; configuration errors come back as the GPU's own codes.
 *  3. Dynamic shared memory only through EMU_DYNAMIC_SHARED(type, name) (not `extern
 *     __shared__`); above 48 KiB set cudaFuncAttributeMaxDynamicSharedMemorySize first, as on
 *     the GPU. Static `__shared__` variables are fine, without initialisers (as in CUDA). On
 *     the GPU static and dynamic shared memory share the 48 KiB: the emu checks the dynamic part
 *     alone, so a kernel with both sets the attribute (to its dynamic size) whenever their sum
 *     passes 48 KiB. A test kernel of 32 + 32 KiB without it ran here and failed on an H200.
 *  4. Threads of a block exchange data only through shared/global memory ordered by
 *     __syncthreads / __syncwarp, or through shuffles and votes. Warp-synchronous code without
 *     __syncwarp is a race on Volta and later, and the race checker says so. Only full-mask
 *     warp collectives count as ordering for the race checker.
 *  5. Warp collectives (*_sync) must name only existing, non-exited lanes (use full warps), all
 *     lanes named must call the same collective with the same mask, and a shuffle must not
 *     read a lane outside the mask: the emu stops the launch with an error (file:line) where
 *     the GPU would be undefined or hang. Shuffles exist for CUDA's own overload types only
 *     (2, 4, 8 bytes: int, unsigned, (unsigned) long (long), float, double, half(2), bf16(2));
 *     shuffle wider values word by word, which works in both builds.
 *  6. Inline PTX (asm) and other device-only code go under `#ifdef __CUDA_ARCH__` with a
 *     portable #else branch (the CPU twin); __CUDA_ARCH__ is never defined here, FLEXCHECK_EMU
 *     is. EMU_ARCH=80|86|89|90 picks the emulated device's limits (default 80).
 *  7. No __noinline__ (libstdc++ spells its attributes with that name, so it cannot be a
 *     macro here); no exceptions escaping a kernel and no `catch (...)` in kernel code (a
 *     failed block's fibers are unwound with an exception).
 *  8. Keep per-thread stack use modest (fiber stacks 256 KiB, 1 MiB under ASan; EMU_STACK_KB).
 *  9. A kernel's C entry points are named with GPU_SYM(name) (name_emu / name_cuda), so both
 *     builds link into one program; the C side sees plain C prototypes. C++ symbols of the two
 *     builds must differ too (put kernels in a namespace that depends on FLEXCHECK_EMU).
 * 10. Floating point: nvcc contracts a*b+c into fma by default, the emu build does not
 *     (-ffp-contract=off); write fmaf() where bitwise agreement matters. __expf & co. follow
 *     the hardware's recipe (ex2.approx of x*log2e), within its documented error bounds.
 *     expf, tanhf & co. are the host libm's, CUDA's on the chip: both within a few ulp, not
 *     the same bits. On an H200 (2026-11-30) the kernels' fp16/bf16 outputs agreed with the
 *     emu's and fp32 ones differed in the last bits, every gate verdict identical.
 * 11. Fresh cudaMalloc memory reads as 0xff bytes (NaN), here only; do not rely on zeros.
 *
 * Not supported (compile error or launch error, never silent): textures/surfaces, cooperative
 * groups, clusters/launch attributes, dynamic parallelism, graphs, __launch_bounds__ checks,
 * the per-kernel static shared size in limit checks (nvcc's resource report covers it).
 */
#ifndef FLEXCHECK_EMU_H
#define FLEXCHECK_EMU_H

#define FLEXCHECK_EMU 1

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <tuple>
#include <type_traits>
#include <utility>

/* ------------------------------------------------------------------------------------------
 * Qualifiers. __shared__ decides where static shared memory lives: per OS thread (one block
 * runs on an OS thread at a time) in the normal build; plain statics in the sanitizer builds,
 * which run blocks one after another, so ASan can put redzones around them and the race
 * checker can find them (section emu_shared, bounded by __start_/__stop_emu_shared).
 * ------------------------------------------------------------------------------------------ */
#define __global__
#define __device__
#define __host__
#define __constant__
#define __managed__
#define __grid_constant__
#define __forceinline__ inline __attribute__((always_inline))
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...)
#if defined(EMU_RACE)
#define __shared__ static __attribute__((section("emu_shared")))
#elif defined(EMU_ASAN)
#define __shared__ static
#else
#define __shared__ static __thread
#endif

/* ------------------------------------------------------------------------------------------
 * Vector types (CUDA's alignments) and dim3.
 * ------------------------------------------------------------------------------------------ */
#define EMU_VEC(T, N, A)                                                                    \
    struct __attribute__((aligned(A))) N##1 { T x; };                                     \
    struct __attribute__((aligned(2 * A))) N##2 { T x, y; };                              \
    struct N##3 { T x, y, z; };                                                           \
    struct __attribute__((aligned(4 * A < 16 ? 4 * A : 16))) N##4 { T x, y, z, w; };     \
    static inline N##1 make_##N##1(T x) { N##1 r; r.x = x; return r; }                    \
    static inline N##2 make_##N##2(T x, T y) { N##2 r; r.x = x; r.y = y; return r; }      \
    static inline N##3 make_##N##3(T x, T y, T z) { N##3 r; r.x = x; r.y = y; r.z = z; return r; } \
    static inline N##4 make_##N##4(T x, T y, T z, T w) { N##4 r; r.x = x; r.y = y; r.z = z; r.w = w; return r; }
EMU_VEC(signed char, char, 1)
EMU_VEC(unsigned char, uchar, 1)
EMU_VEC(short, short, 2)
EMU_VEC(unsigned short, ushort, 2)
EMU_VEC(int, int, 4)
EMU_VEC(unsigned int, uint, 4)
EMU_VEC(long long, longlong, 8)
EMU_VEC(unsigned long long, ulonglong, 8)
EMU_VEC(float, float, 4)
EMU_VEC(double, double, 8)
#undef EMU_VEC
static_assert(sizeof(float4) == 16 && alignof(float4) == 16, "float4 layout");
static_assert(alignof(float2) == 8 && alignof(double2) == 16, "vector alignment");

struct dim3 {
    unsigned int x, y, z;
    constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
    constexpr operator uint3() const { return uint3{x, y, z}; }
};

#include "gpu/emu/emu_fp16.h"

/* ------------------------------------------------------------------------------------------
 * The runtime's side (gpu/emu/emu_runtime.cc).
 * ------------------------------------------------------------------------------------------ */
namespace emu {
enum bar_op { BAR_SYNC, BAR_COUNT, BAR_AND, BAR_OR };
enum warp_op {
    W_SYNC, W_SHFL_IDX, W_SHFL_UP, W_SHFL_DOWN, W_SHFL_XOR, W_BALLOT, W_MATCH_ANY,
    W_RED_ADD, W_RED_MIN_U, W_RED_MAX_U, W_RED_MIN_S, W_RED_MAX_S, W_RED_AND, W_RED_OR, W_RED_XOR,
    W_ACTIVEMASK, W_EXEC
};
/* A warp-wide instruction's work for the whole warp (emu_warp_exec): lanes[l] is lane l's
 * operand pointer. */
typedef void (*warp_fn)(void *const *lanes);
namespace rt {
/* Out of line on purpose: their return address is the call site in the kernel, which is
 * what error and race reports name. */
int bar(int op, int pred);
unsigned long long warp(int op, unsigned mask, unsigned long long v, int arg, int width);
void warp_exec(warp_fn exec, void *operands);
int require_fma();   /* exits with a message on a CPU without the fma instruction; else 1 */
[[noreturn]] void trap(const char *why);
}
} // namespace emu
/* The built-in indices are per-OS-thread variables the scheduler rewrites at every switch
 * (a fiber never leaves its OS thread). Variables, not macros, so that fields named gridDim
 * (cudaLaunchConfig_t) still work. blockDim and gridDim are uint3 (dim3 converts). */
#define EMU_TLS __thread __attribute__((tls_model("initial-exec")))
extern EMU_TLS uint3 threadIdx, blockIdx, blockDim, gridDim;
extern EMU_TLS unsigned char *emu_dyn_smem;
static constexpr int warpSize = 32;

#if defined(__FMA__) && defined(__x86_64__)
/* A kernel built for the fma instruction (gpu/module.mk, EMU_ISA) says so at start-up on a CPU
 * without one, instead of dying of SIGILL in the middle of a run. */
[[maybe_unused]] static const int emu_fma_checked = emu::rt::require_fma();
#endif

#define EMU_DI static inline __attribute__((always_inline))
/* The compiler must not keep shared memory in registers across a switch to another fiber:
 * the calls are opaque anyway, the clobber says so explicitly. */
#define EMU_FENCE() __asm__ __volatile__("" ::: "memory")

/* ---- barriers ---- */
EMU_DI void __syncthreads() { EMU_FENCE(); emu::rt::bar(emu::BAR_SYNC, 0); EMU_FENCE(); }
EMU_DI int __syncthreads_count(int p) { EMU_FENCE(); int r = emu::rt::bar(emu::BAR_COUNT, p); EMU_FENCE(); return r; }
EMU_DI int __syncthreads_and(int p) { EMU_FENCE(); int r = emu::rt::bar(emu::BAR_AND, p); EMU_FENCE(); return r; }
EMU_DI int __syncthreads_or(int p) { EMU_FENCE(); int r = emu::rt::bar(emu::BAR_OR, p); EMU_FENCE(); return r; }
EMU_DI void __syncwarp(unsigned mask = 0xffffffffu) { EMU_FENCE(); emu::rt::warp(emu::W_SYNC, mask, 0, 0, 32); EMU_FENCE(); }
/* Fibers never run concurrently within a block, and blocks only meet through atomics. */
EMU_DI void __threadfence_block() { EMU_FENCE(); }
EMU_DI void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
EMU_DI void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
[[noreturn]] EMU_DI void __trap() { emu::rt::trap("__trap()"); }
EMU_DI unsigned __activemask() { return (unsigned)emu::rt::warp(emu::W_ACTIVEMASK, 0, 0, 0, 32); }

/* ---- warp-wide instructions (not CUDA: the emu's way to write the CPU twin of an instruction
 * such as mma.sync or ldmatrix, gpu/ptx.cuh). All 32 lanes of the warp call emu_warp_exec(exec,
 * &operands) at the same instruction (the same exec), as .sync.aligned requires; the last to
 * arrive runs exec once with every lane's operand pointer, reading the whole warp's inputs and
 * writing every lane's outputs, as the hardware computes the instruction for the warp at once.
 * That costs one round of switches, where exchanging fragments through shared memory costs two
 * __syncwarp, and computes what the lanes share once. exec runs on the last arriver's fiber: it
 * must not call collectives or read threadIdx, and its memory accesses are not the lanes' own
 * (load shared memory in each lane before the call, so the race checker sees who reads what).
 * It is a full-warp collective: it orders the warp's shared-memory accesses like a shuffle
 * (rule 4). ---- */
EMU_DI void emu_warp_exec(emu::warp_fn exec, void *operands)
{
    EMU_FENCE();
    emu::rt::warp_exec(exec, operands);
    EMU_FENCE();
}

/* ---- shuffles: the types CUDA overloads them for (2, 4 and 8 bytes) and nothing else, so a
 * kernel that compiles here compiles under nvcc. Wider values: shuffle them word by word. ---- */
template <class T> struct emu_shfl_ok : std::false_type {};
#define EMU_SHFL_OK(T) template <> struct emu_shfl_ok<T> : std::true_type {};
EMU_SHFL_OK(int) EMU_SHFL_OK(unsigned int) EMU_SHFL_OK(long) EMU_SHFL_OK(unsigned long)
EMU_SHFL_OK(long long) EMU_SHFL_OK(unsigned long long) EMU_SHFL_OK(float) EMU_SHFL_OK(double)
EMU_SHFL_OK(__half) EMU_SHFL_OK(__half2) EMU_SHFL_OK(__nv_bfloat16) EMU_SHFL_OK(__nv_bfloat162)
#undef EMU_SHFL_OK
template <class T> __attribute__((always_inline)) inline T emu_shfl(int op, unsigned mask, T v, int arg, int width)
{
    static_assert(emu_shfl_ok<T>::value, "CUDA has no __shfl*_sync overload for this type");
    unsigned long long u = 0;
    std::memcpy(&u, &v, sizeof(T));
    EMU_FENCE();
    u = emu::rt::warp(op, mask, u, arg, width);
    EMU_FENCE();
    T r;
    std::memcpy(&r, &u, sizeof(T));
    return r;
}
template <class T> __attribute__((always_inline)) inline T __shfl_sync(unsigned mask, T v, int src, int width = warpSize)
{ return emu_shfl(emu::W_SHFL_IDX, mask, v, src, width); }
template <class T> __attribute__((always_inline)) inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = warpSize)
{ return emu_shfl(emu::W_SHFL_UP, mask, v, (int)delta, width); }
template <class T> __attribute__((always_inline)) inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = warpSize)
{ return emu_shfl(emu::W_SHFL_DOWN, mask, v, (int)delta, width); }
template <class T> __attribute__((always_inline)) inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = warpSize)
{ return emu_shfl(emu::W_SHFL_XOR, mask, v, lane_mask, width); }

/* ---- votes and warp reductions (sm_80) ---- */
#define EMU_WARP(op, mask, v) ((unsigned)emu::rt::warp(op, mask, (unsigned long long)(v), 0, 32))
EMU_DI unsigned __ballot_sync(unsigned mask, int p) { return EMU_WARP(emu::W_BALLOT, mask, p != 0); }
EMU_DI int __any_sync(unsigned mask, int p) { return EMU_WARP(emu::W_BALLOT, mask, p != 0) != 0; }
EMU_DI int __all_sync(unsigned mask, int p) { return EMU_WARP(emu::W_BALLOT, mask, p != 0) == mask; }
EMU_DI unsigned __match_any_sync(unsigned mask, unsigned v) { return EMU_WARP(emu::W_MATCH_ANY, mask, v); }
EMU_DI unsigned __match_any_sync(unsigned mask, int v) { return EMU_WARP(emu::W_MATCH_ANY, mask, (unsigned)v); }
EMU_DI unsigned __reduce_add_sync(unsigned mask, unsigned v) { return EMU_WARP(emu::W_RED_ADD, mask, v); }
EMU_DI int __reduce_add_sync(unsigned mask, int v) { return (int)EMU_WARP(emu::W_RED_ADD, mask, (unsigned)v); }
EMU_DI unsigned __reduce_min_sync(unsigned mask, unsigned v) { return EMU_WARP(emu::W_RED_MIN_U, mask, v); }
EMU_DI int __reduce_min_sync(unsigned mask, int v) { return (int)EMU_WARP(emu::W_RED_MIN_S, mask, (unsigned)v); }
EMU_DI unsigned __reduce_max_sync(unsigned mask, unsigned v) { return EMU_WARP(emu::W_RED_MAX_U, mask, v); }
EMU_DI int __reduce_max_sync(unsigned mask, int v) { return (int)EMU_WARP(emu::W_RED_MAX_S, mask, (unsigned)v); }
EMU_DI unsigned __reduce_and_sync(unsigned mask, unsigned v) { return EMU_WARP(emu::W_RED_AND, mask, v); }
EMU_DI unsigned __reduce_or_sync(unsigned mask, unsigned v) { return EMU_WARP(emu::W_RED_OR, mask, v); }
EMU_DI unsigned __reduce_xor_sync(unsigned mask, unsigned v) { return EMU_WARP(emu::W_RED_XOR, mask, v); }
#undef EMU_WARP

/* ---- atomics: real ones (blocks run in parallel), out of line so that the race build's
 * instrumentation never sees them ---- */
namespace emu { namespace rt {
int atomic_add(int *, int); unsigned atomic_add(unsigned *, unsigned);
unsigned long long atomic_add(unsigned long long *, unsigned long long);
float atomic_add(float *, float); double atomic_add(double *, double);
int atomic_exch(int *, int); unsigned atomic_exch(unsigned *, unsigned);
unsigned long long atomic_exch(unsigned long long *, unsigned long long); float atomic_exch(float *, float);
int atomic_min(int *, int); unsigned atomic_min(unsigned *, unsigned);
long long atomic_min(long long *, long long); unsigned long long atomic_min(unsigned long long *, unsigned long long);
int atomic_max(int *, int); unsigned atomic_max(unsigned *, unsigned);
long long atomic_max(long long *, long long); unsigned long long atomic_max(unsigned long long *, unsigned long long);
int atomic_cas(int *, int, int); unsigned atomic_cas(unsigned *, unsigned, unsigned);
unsigned long long atomic_cas(unsigned long long *, unsigned long long, unsigned long long);
unsigned short atomic_cas(unsigned short *, unsigned short, unsigned short);
int atomic_and(int *, int); unsigned atomic_and(unsigned *, unsigned); unsigned long long atomic_and(unsigned long long *, unsigned long long);
int atomic_or(int *, int); unsigned atomic_or(unsigned *, unsigned); unsigned long long atomic_or(unsigned long long *, unsigned long long);
int atomic_xor(int *, int); unsigned atomic_xor(unsigned *, unsigned); unsigned long long atomic_xor(unsigned long long *, unsigned long long);
unsigned atomic_inc(unsigned *, unsigned); unsigned atomic_dec(unsigned *, unsigned);
}}
template <class P, class V> EMU_DI auto atomicAdd(P *p, V v) -> decltype(emu::rt::atomic_add(p, (P)v)) { return emu::rt::atomic_add(p, (P)v); }
template <class P, class V> EMU_DI auto atomicSub(P *p, V v) -> decltype(emu::rt::atomic_add(p, (P)v)) { return emu::rt::atomic_add(p, (P)(0 - (P)v)); }
template <class P, class V> EMU_DI auto atomicExch(P *p, V v) -> decltype(emu::rt::atomic_exch(p, (P)v)) { return emu::rt::atomic_exch(p, (P)v); }
template <class P, class V> EMU_DI auto atomicMin(P *p, V v) -> decltype(emu::rt::atomic_min(p, (P)v)) { return emu::rt::atomic_min(p, (P)v); }
template <class P, class V> EMU_DI auto atomicMax(P *p, V v) -> decltype(emu::rt::atomic_max(p, (P)v)) { return emu::rt::atomic_max(p, (P)v); }
template <class P, class V> EMU_DI auto atomicAnd(P *p, V v) -> decltype(emu::rt::atomic_and(p, (P)v)) { return emu::rt::atomic_and(p, (P)v); }
template <class P, class V> EMU_DI auto atomicOr(P *p, V v) -> decltype(emu::rt::atomic_or(p, (P)v)) { return emu::rt::atomic_or(p, (P)v); }
template <class P, class V> EMU_DI auto atomicXor(P *p, V v) -> decltype(emu::rt::atomic_xor(p, (P)v)) { return emu::rt::atomic_xor(p, (P)v); }
template <class P, class V> EMU_DI auto atomicCAS(P *p, V c, V v) -> decltype(emu::rt::atomic_cas(p, (P)c, (P)v)) { return emu::rt::atomic_cas(p, (P)c, (P)v); }
EMU_DI unsigned atomicInc(unsigned *p, unsigned v) { return emu::rt::atomic_inc(p, v); }
EMU_DI unsigned atomicDec(unsigned *p, unsigned v) { return emu::rt::atomic_dec(p, v); }

/* ---- integer and bit intrinsics ---- */
EMU_DI int __popc(unsigned x) { return __builtin_popcount(x); }
EMU_DI int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
EMU_DI int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
EMU_DI int __clzll(long long x) { return x ? __builtin_clzll((unsigned long long)x) : 64; }
EMU_DI int __ffs(int x) { return __builtin_ffs(x); }
EMU_DI int __ffsll(long long x) { return __builtin_ffsll(x); }
EMU_DI unsigned __brev(unsigned x)
{
    x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
    x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
    x = ((x >> 4) & 0x0f0f0f0fu) | ((x & 0x0f0f0f0fu) << 4);
    return __builtin_bswap32(x);
}
EMU_DI unsigned __byte_perm(unsigned x, unsigned y, unsigned s)
{
    unsigned long long v = ((unsigned long long)y << 32) | x;
    unsigned r = 0;
    for (int i = 0; i < 4; i++)
        r |= (unsigned)((v >> (8 * ((s >> (4 * i)) & 7))) & 0xff) << (8 * i);
    return r;
}
EMU_DI unsigned __funnelshift_l(unsigned lo, unsigned hi, unsigned s)
{ unsigned long long v = ((unsigned long long)hi << 32) | lo; return (unsigned)((v << (s & 31)) >> 32); }
EMU_DI unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned s)
{ unsigned long long v = ((unsigned long long)hi << 32) | lo; return (unsigned)(v >> (s & 31)); }
EMU_DI unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a * b) >> 32); }
EMU_DI int __mulhi(int a, int b) { return (int)(((long long)a * b) >> 32); }
EMU_DI unsigned long long __umul64hi(unsigned long long a, unsigned long long b) { return (unsigned long long)(((unsigned __int128)a * b) >> 64); }
EMU_DI int __mul24(int a, int b) { return (int)(((a << 8) >> 8) * ((b << 8) >> 8)); }
EMU_DI unsigned __umul24(unsigned a, unsigned b) { return (a & 0xffffffu) * (b & 0xffffffu); }

/* CUDA's global min/max overloads. */
#define EMU_MINMAX(T)                                                        \
    EMU_DI T min(T a, T b) { return a < b ? a : b; }                        \
    EMU_DI T max(T a, T b) { return a > b ? a : b; }
EMU_MINMAX(int) EMU_MINMAX(unsigned int) EMU_MINMAX(long) EMU_MINMAX(unsigned long)
EMU_MINMAX(long long) EMU_MINMAX(unsigned long long)
#undef EMU_MINMAX
EMU_DI float min(float a, float b) { return fminf(a, b); }
EMU_DI float max(float a, float b) { return fmaxf(a, b); }
EMU_DI double min(double a, double b) { return fmin(a, b); }
EMU_DI double max(double a, double b) { return fmax(a, b); }
EMU_DI unsigned min(int a, unsigned b) { return min((unsigned)a, b); }
EMU_DI unsigned min(unsigned a, int b) { return min(a, (unsigned)b); }
EMU_DI unsigned max(int a, unsigned b) { return max((unsigned)a, b); }
EMU_DI unsigned max(unsigned a, int b) { return max(a, (unsigned)b); }

/* ---- float intrinsics. The fast ones model the hardware's recipe (ex2.approx / lg2.approx on
 * a product with log2 e), which is where most of the GPU's error comes from. ---- */
EMU_DI float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
EMU_DI int __float_as_int(float f) { int i; std::memcpy(&i, &f, 4); return i; }
EMU_DI float __uint_as_float(unsigned i) { float f; std::memcpy(&f, &i, 4); return f; }
EMU_DI unsigned __float_as_uint(float f) { unsigned i; std::memcpy(&i, &f, 4); return i; }
EMU_DI double __longlong_as_double(long long i) { double f; std::memcpy(&f, &i, 8); return f; }
EMU_DI long long __double_as_longlong(double f) { long long i; std::memcpy(&i, &f, 8); return i; }
EMU_DI float emu_fast__expf(float x) { return exp2f(x * 1.4426950408889634f); }
EMU_DI float emu_fast__exp10f(float x) { return exp2f(x * 3.3219280948873622f); }
EMU_DI float emu_fast__logf(float x) { return log2f(x) * 0.6931471805599453f; }
EMU_DI float emu_fast__log2f(float x) { return log2f(x); }
EMU_DI float emu_fast__log10f(float x) { return log2f(x) * 0.3010299956639812f; }
EMU_DI float emu_fast__powf(float x, float y) { return exp2f(y * log2f(x)); }
EMU_DI float emu_fast__sinf(float x) { return sinf(x); }
EMU_DI float emu_fast__cosf(float x) { return cosf(x); }
EMU_DI float emu_fast__tanf(float x) { return tanf(x); }
EMU_DI void emu_fast__sincosf(float x, float *s, float *c) { *s = sinf(x); *c = cosf(x); }
/* glibc declares these names itself (its own exact expf & co.), hence the macros. */
#define __expf emu_fast__expf
#define __exp10f emu_fast__exp10f
#define __logf emu_fast__logf
#define __log2f emu_fast__log2f
#define __log10f emu_fast__log10f
#define __powf emu_fast__powf
#define __sinf emu_fast__sinf
#define __cosf emu_fast__cosf
#define __tanf emu_fast__tanf
#define __sincosf emu_fast__sincosf
EMU_DI float __fdividef(float a, float b) { return a / b; }
EMU_DI float __frcp_rn(float x) { return 1.0f / x; }
EMU_DI float __fsqrt_rn(float x) { return sqrtf(x); }
EMU_DI float __frsqrt_rn(float x) { return (float)(1.0 / std::sqrt((double)x)); }
EMU_DI float rsqrtf(float x) { return 1.0f / sqrtf(x); }
EMU_DI double rsqrt(double x) { return 1.0 / std::sqrt(x); }
EMU_DI float rcbrtf(float x) { return 1.0f / cbrtf(x); }
EMU_DI float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
EMU_DI float __fadd_rn(float a, float b) { return a + b; }
EMU_DI float __fsub_rn(float a, float b) { return a - b; }
EMU_DI float __fmul_rn(float a, float b) { return a * b; }
EMU_DI float __fdiv_rn(float a, float b) { return a / b; }
EMU_DI double __dadd_rn(double a, double b) { return a + b; }
EMU_DI double __dmul_rn(double a, double b) { return a * b; }
EMU_DI double __fma_rn(double a, double b, double c) { return fma(a, b, c); }
EMU_DI float __saturatef(float x) { return x >= 1.0f ? 1.0f : (x > 0.0f ? x : 0.0f); } /* NaN -> 0 */
EMU_DI int __float2int_rn(float x) { return (int)nearbyintf(x); }
EMU_DI int __float2int_rz(float x) { return (int)x; }
EMU_DI int __float2int_rd(float x) { return (int)floorf(x); }
EMU_DI int __float2int_ru(float x) { return (int)ceilf(x); }
EMU_DI unsigned __float2uint_rn(float x) { return (unsigned)nearbyintf(x); }
EMU_DI float __int2float_rn(int x) { return (float)x; }
EMU_DI float __uint2float_rn(unsigned x) { return (float)x; }
EMU_DI long long clock64() { return (long long)__builtin_ia32_rdtsc(); }

/* Cache-hinted loads and stores are plain ones here. */
template <class T> EMU_DI T __ldg(const T *p) { return *p; }
template <class T> EMU_DI T __ldcg(const T *p) { return *p; }
template <class T> EMU_DI T __ldca(const T *p) { return *p; }
template <class T> EMU_DI T __ldcs(const T *p) { return *p; }
template <class T> EMU_DI T __ldlu(const T *p) { return *p; }
template <class T> EMU_DI void __stcg(T *p, T v) { *p = v; }
template <class T> EMU_DI void __stcs(T *p, T v) { *p = v; }
template <class T> EMU_DI void __stwb(T *p, T v) { *p = v; }

/* ------------------------------------------------------------------------------------------
 * Host API subset. C++ linkage, so these never collide with libcudart's C symbols when the
 * emu and nvcc builds of a kernel are linked into one program.
 * ------------------------------------------------------------------------------------------ */
enum cudaError {
    cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2,
    cudaErrorInitializationError = 3, cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidDevicePointer = 17, cudaErrorInvalidMemcpyDirection = 21,
    cudaErrorInvalidDeviceFunction = 98, cudaErrorNoDevice = 100, cudaErrorInvalidDevice = 101,
    cudaErrorInvalidResourceHandle = 400, cudaErrorNotReady = 600, cudaErrorIllegalAddress = 700,
    cudaErrorLaunchOutOfResources = 701, cudaErrorAssert = 710, cudaErrorIllegalInstruction = 715,
    cudaErrorLaunchFailure = 719, cudaErrorNotSupported = 801, cudaErrorUnknown = 999
};
typedef enum cudaError cudaError_t;
enum cudaMemcpyKind { cudaMemcpyHostToHost = 0, cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2,
                      cudaMemcpyDeviceToDevice = 3, cudaMemcpyDefault = 4 };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
                         cudaFuncAttributePreferredSharedMemoryCarveout = 9 };
enum cudaDeviceAttr { cudaDevAttrMaxThreadsPerBlock = 1, cudaDevAttrMaxSharedMemoryPerBlock = 8,
                      cudaDevAttrWarpSize = 10, cudaDevAttrMultiProcessorCount = 16,
                      cudaDevAttrComputeCapabilityMajor = 75, cudaDevAttrComputeCapabilityMinor = 76,
                      cudaDevAttrMaxSharedMemoryPerBlockOptin = 97 };
struct CUstream_st;
struct CUevent_st;
typedef CUstream_st *cudaStream_t;
typedef CUevent_st *cudaEvent_t;
#define cudaStreamDefault 0x00
#define cudaStreamNonBlocking 0x01
#define cudaEventDefault 0x00
#define cudaEventDisableTiming 0x02

struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem, sharedMemPerBlock, sharedMemPerBlockOptin, sharedMemPerMultiprocessor;
    int regsPerBlock, warpSize, maxThreadsPerBlock, maxThreadsDim[3], maxGridSize[3];
    int major, minor, multiProcessorCount, l2CacheSize, maxThreadsPerMultiProcessor;
};
struct cudaFuncAttributes {
    size_t sharedSizeBytes, constSizeBytes, localSizeBytes;
    int maxThreadsPerBlock, numRegs, ptxVersion, binaryVersion, maxDynamicSharedSizeBytes;
};
struct cudaLaunchAttribute { int id; int val[16]; };
struct cudaLaunchConfig_t {
    dim3 gridDim, blockDim;
    size_t dynamicSmemBytes;
    cudaStream_t stream;
    cudaLaunchAttribute *attrs;
    unsigned int numAttrs;
};

cudaError_t cudaMalloc(void **p, size_t n);
cudaError_t cudaFree(void *p);
cudaError_t cudaMallocHost(void **p, size_t n);
cudaError_t cudaFreeHost(void *p);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind kind, cudaStream_t s = 0);
cudaError_t cudaMemset(void *p, int v, size_t n);
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s = 0);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaDeviceReset();
cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();
const char *cudaGetErrorString(cudaError_t e);
const char *cudaGetErrorName(cudaError_t e);
cudaError_t cudaGetDeviceCount(int *n);
cudaError_t cudaGetDevice(int *d);
cudaError_t cudaSetDevice(int d);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d);
cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr a, int d);
cudaError_t cudaStreamCreate(cudaStream_t *s);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaEventCreate(cudaEvent_t *e);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = 0);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b);
cudaError_t cudaEventDestroy(cudaEvent_t e);

namespace emu { namespace rt {
cudaError_t launch(const void *kernel, dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                   void (*body)(const void *), const void *ctx, cudaError_t bad_config);
cudaError_t func_set_attribute(const void *kernel, cudaFuncAttribute a, int v);
cudaError_t func_get_attributes(cudaFuncAttributes *fa, const void *kernel);
cudaError_t set_error(cudaError_t e);
}}

template <class T> cudaError_t cudaFuncSetAttribute(T *kernel, cudaFuncAttribute a, int v)
{ return emu::rt::func_set_attribute((const void *)kernel, a, v); }
template <class T> cudaError_t cudaFuncGetAttributes(cudaFuncAttributes *fa, T *kernel)
{ return emu::rt::func_get_attributes(fa, (const void *)kernel); }
template <class T> cudaError_t cudaMemcpyToSymbol(T &sym, const void *src, size_t n, size_t off = 0, cudaMemcpyKind = cudaMemcpyHostToDevice)
{
    if (off + n > sizeof(T))
        return emu::rt::set_error(cudaErrorInvalidValue);
    std::memcpy((char *)&sym + off, src, n);
    return cudaSuccess;
}
template <class T> cudaError_t cudaMemcpyFromSymbol(void *dst, const T &sym, size_t n, size_t off = 0, cudaMemcpyKind = cudaMemcpyDeviceToHost)
{
    if (off + n > sizeof(T))
        return emu::rt::set_error(cudaErrorInvalidValue);
    std::memcpy(dst, (const char *)&sym + off, n);
    return cudaSuccess;
}

/* A launch packs the kernel and its converted arguments; every fiber calls the kernel with
 * its own by-value copies, as every GPU thread gets its own parameters. */
namespace emu {
template <class... P> struct launch_pack {
    void (*kernel)(P...);
    std::tuple<std::decay_t<P>...> args;
    static void body(const void *p)
    {
        const launch_pack *lp = static_cast<const launch_pack *>(p);
        std::apply(lp->kernel, lp->args);
    }
};
template <class... P, std::size_t... I>
static inline std::tuple<std::decay_t<P>...> unpack_args(void **a, std::index_sequence<I...>)
{ return std::tuple<std::decay_t<P>...>(*static_cast<std::decay_t<P> *>(a[I])...); }
}

template <class... P, class... A>
cudaError_t cudaLaunchKernelEx(const cudaLaunchConfig_t *cfg, void (*kernel)(P...), A &&...args)
{
    static_assert(sizeof...(P) == sizeof...(A), "argument count differs from the kernel's");
    if (cfg->numAttrs != 0)
        return emu::rt::set_error(cudaErrorNotSupported);
    emu::launch_pack<P...> lp{kernel, std::tuple<std::decay_t<P>...>(std::forward<A>(args)...)};
    /* A block or grid out of range: cudaErrorInvalidValue through cudaLaunchKernelEx, as an
     * H200 with CUDA 13.0 (driver 580) answered (reports/gpu-2026-11-30-h200/README.md). */
    return emu::rt::launch((const void *)kernel, cfg->gridDim, cfg->blockDim, cfg->dynamicSmemBytes,
                           cfg->stream, &emu::launch_pack<P...>::body, &lp, cudaErrorInvalidValue);
}
template <class... P>
cudaError_t cudaLaunchKernel(void (*kernel)(P...), dim3 grid, dim3 block, void **args, size_t smem = 0, cudaStream_t s = 0)
{
    emu::launch_pack<P...> lp{kernel, emu::unpack_args<P...>(args, std::index_sequence_for<P...>{})};
    /* cudaErrorInvalidConfiguration: the runtime's own check on this path (CUDA Runtime API
     * reference); not yet seen on a GPU here, since every flexcheck launch is GPU_LAUNCH's Ex. */
    return emu::rt::launch((const void *)kernel, grid, block, smem, s, &emu::launch_pack<P...>::body, &lp,
                           cudaErrorInvalidConfiguration);
}

#undef EMU_DI
#endif
