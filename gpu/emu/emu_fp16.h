/*
 * emu_fp16.h - __half and __nv_bfloat16 for the emu backend (gpu/emu/emu.h includes it; do not
 * include it directly). The CUDA toolkit's cuda_fp16.h / cuda_bf16.h are only partly usable
 * by a host compiler and are absent on machines without the toolkit, so the emu build carries
 * its own: same type names, same storage (one unsigned short), same intrinsic names, and
 * conversions bit-exact with the toolkit's host implementation (round to nearest even, NaN ->
 * 0x7fff, overflow -> inf). tests/test_emu.c compares them over every half and a float sweep.
 *
 * Arithmetic on halves is done in float (double for fma) and rounded once: for +, -, *, / and
 * sqrt, float keeps 2p+2 bits of an 11-bit (or 8-bit) significand, so the double rounding is
 * innocuous and the result equals the hardware's correctly rounded one. The transcendental
 * helpers (hexp, hlog, ...) are correctly rounded from float libm; the hardware's are
 * approximations within a unit or so of the last place.
 */
#ifndef FLEXCHECK_EMU_FP16_H
#define FLEXCHECK_EMU_FP16_H

#include <cmath>
#include <cstdint>
#include <cstring>

namespace emu {
static inline unsigned int f2u(float f) { unsigned int u; std::memcpy(&u, &f, 4); return u; }
static inline float u2f(unsigned int u) { float f; std::memcpy(&f, &u, 4); return f; }

/* float -> binary16, round to nearest even; the toolkit's __internal_float2half step for step. */
static inline unsigned short f32_to_f16_rn(float f)
{
    unsigned int x = f2u(f), u = x & 0x7fffffffu, sign = (x >> 16) & 0x8000u, rem, r;
    if (u >= 0x7f800000u) {
        rem = 0; r = (u == 0x7f800000u) ? (sign | 0x7c00u) : 0x7fffu;
    } else if (u > 0x477fefffu) {           /* rounds to infinity */
        rem = 0x80000000u; r = sign | 0x7bffu;
    } else if (u >= 0x38800000u) {          /* normal */
        rem = u << 19; u -= 0x38000000u; r = sign | (u >> 13);
    } else if (u < 0x33000001u) {           /* rounds to zero */
        rem = u; r = sign;
    } else {                                /* subnormal */
        unsigned int e = u >> 23, shift = 0x7eu - e, m = (u & 0x7fffffu) | 0x800000u;
        rem = m << (32 - shift); r = (sign | (m >> shift)) & 0xffffu;
    }
    if (rem > 0x80000000u || (rem == 0x80000000u && (r & 1u)))
        r++;
    return (unsigned short)r;
}

/* Branch-free (a loop of conversions vectorises): the normal numbers rebiased (15 -> 127), the
 * subnormals as m * 2^-24 (exact), infinities and NaN with the exponent all ones and the payload
 * kept. */
static inline float f16_to_f32(unsigned short h)
{
    const unsigned int x = h & 0x7fffu, sign = (unsigned int)(h & 0x8000u) << 16;
    const unsigned int normal = (x << 13) + (112u << 23), special = (x << 13) | 0x7f800000u;
    const unsigned int sub = f2u((float)(x & 0x3ffu) * 0x1p-24f);
    return u2f(sign | (x >= 0x7c00u ? special : x >= 0x400u ? normal : sub));
}

/* float -> bfloat16, round to nearest even, NaN -> 0x7fff (the toolkit's host path). */
static inline unsigned short f32_to_bf16_rn(float f)
{
    unsigned int x = f2u(f);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return 0x7fffu;
    unsigned int rem = x << 16, r = x >> 16;
    if (rem > 0x80000000u || (rem == 0x80000000u && (r & 1u)))
        r++;
    return (unsigned short)r;
}
static inline float bf16_to_f32(unsigned short b) { return u2f((unsigned int)b << 16); }
} // namespace emu

struct __half_raw { unsigned short x; };
struct __nv_bfloat16_raw { unsigned short x; };

struct __half {
    unsigned short __x;
    __half() = default;
    __half(const __half_raw &r) : __x(r.x) {}
    __half(float f) : __x(emu::f32_to_f16_rn(f)) {}
    __half(double d) : __x(emu::f32_to_f16_rn((float)d)) {}
    __half(int i) : __x(emu::f32_to_f16_rn((float)i)) {}
    __half(unsigned int i) : __x(emu::f32_to_f16_rn((float)i)) {}
    operator float() const { return emu::f16_to_f32(__x); }
    operator __half_raw() const { __half_raw r; r.x = __x; return r; }
};
struct __nv_bfloat16 {
    unsigned short __x;
    __nv_bfloat16() = default;
    __nv_bfloat16(const __nv_bfloat16_raw &r) : __x(r.x) {}
    __nv_bfloat16(float f) : __x(emu::f32_to_bf16_rn(f)) {}
    __nv_bfloat16(double d) : __x(emu::f32_to_bf16_rn((float)d)) {}
    __nv_bfloat16(int i) : __x(emu::f32_to_bf16_rn((float)i)) {}
    operator float() const { return emu::bf16_to_f32(__x); }
    operator __nv_bfloat16_raw() const { __nv_bfloat16_raw r; r.x = __x; return r; }
};
struct alignas(4) __half2 {
    __half x, y;
    __half2() = default;
    __half2(__half a, __half b) : x(a), y(b) {}
};
struct alignas(4) __nv_bfloat162 {
    __nv_bfloat16 x, y;
    __nv_bfloat162() = default;
    __nv_bfloat162(__nv_bfloat16 a, __nv_bfloat16 b) : x(a), y(b) {}
};
static_assert(sizeof(__half) == 2 && sizeof(__half2) == 4, "half layout");
static_assert(sizeof(__nv_bfloat16) == 2 && sizeof(__nv_bfloat162) == 4, "bf16 layout");
typedef __half half;
typedef __half2 half2;
typedef __nv_bfloat16 nv_bfloat16;
typedef __nv_bfloat162 nv_bfloat162;

#define EMU_HI static inline __attribute__((always_inline))

/* ---- bit casts ---- */
EMU_HI unsigned short __half_as_ushort(__half h) { return h.__x; }
EMU_HI short __half_as_short(__half h) { return (short)h.__x; }
EMU_HI __half __ushort_as_half(unsigned short u) { __half h; h.__x = u; return h; }
EMU_HI __half __short_as_half(short s) { __half h; h.__x = (unsigned short)s; return h; }
EMU_HI unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.__x; }
EMU_HI short __bfloat16_as_short(__nv_bfloat16 h) { return (short)h.__x; }
EMU_HI __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) { __nv_bfloat16 h; h.__x = u; return h; }
EMU_HI __nv_bfloat16 __short_as_bfloat16(short s) { __nv_bfloat16 h; h.__x = (unsigned short)s; return h; }

/* ---- half conversions ---- */
EMU_HI __half __float2half(float f) { return __ushort_as_half(emu::f32_to_f16_rn(f)); }
EMU_HI __half __float2half_rn(float f) { return __float2half(f); }
EMU_HI __half __double2half(double d) { return __float2half((float)d); }
EMU_HI float __half2float(__half h) { return emu::f16_to_f32(h.__x); }
EMU_HI __half __int2half_rn(int i) { return __float2half((float)i); }
EMU_HI int __half2int_rz(__half h) { return (int)__half2float(h); }
EMU_HI int __half2int_rn(__half h) { return (int)std::nearbyint(__half2float(h)); }
EMU_HI __half2 __floats2half2_rn(float a, float b) { return __half2(__float2half(a), __float2half(b)); }
EMU_HI __half2 __float2half2_rn(float a) { return __floats2half2_rn(a, a); }
EMU_HI __half2 __halves2half2(__half a, __half b) { return __half2(a, b); }
EMU_HI __half2 __half2half2(__half a) { return __half2(a, a); }
EMU_HI __half __low2half(__half2 h) { return h.x; }
EMU_HI __half __high2half(__half2 h) { return h.y; }
EMU_HI __half2 __lows2half2(__half2 a, __half2 b) { return __half2(a.x, b.x); }
EMU_HI __half2 __highs2half2(__half2 a, __half2 b) { return __half2(a.y, b.y); }
EMU_HI __half2 __low2half2(__half2 a) { return __half2(a.x, a.x); }
EMU_HI __half2 __high2half2(__half2 a) { return __half2(a.y, a.y); }
EMU_HI __half2 __lowhigh2highlow(__half2 a) { return __half2(a.y, a.x); }
EMU_HI float __low2float(__half2 h) { return __half2float(h.x); }
EMU_HI float __high2float(__half2 h) { return __half2float(h.y); }

/* ---- bf16 conversions ---- */
EMU_HI __nv_bfloat16 __float2bfloat16(float f) { return __ushort_as_bfloat16(emu::f32_to_bf16_rn(f)); }
EMU_HI __nv_bfloat16 __float2bfloat16_rn(float f) { return __float2bfloat16(f); }
EMU_HI __nv_bfloat16 __float2bfloat16_rz(float f)
{
    unsigned int x = emu::f2u(f);
    return __ushort_as_bfloat16((x & 0x7fffffffu) > 0x7f800000u ? 0x7fffu : (unsigned short)(x >> 16));
}
EMU_HI __nv_bfloat16 __double2bfloat16(double d) { return __float2bfloat16((float)d); }
EMU_HI float __bfloat162float(__nv_bfloat16 h) { return emu::bf16_to_f32(h.__x); }
EMU_HI __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return __nv_bfloat162(__float2bfloat16(a), __float2bfloat16(b)); }
EMU_HI __nv_bfloat162 __float2bfloat162_rn(float a) { return __floats2bfloat162_rn(a, a); }
EMU_HI __nv_bfloat162 __halves2bfloat162(__nv_bfloat16 a, __nv_bfloat16 b) { return __nv_bfloat162(a, b); }
EMU_HI __nv_bfloat162 __bfloat162bfloat162(__nv_bfloat16 a) { return __nv_bfloat162(a, a); }
EMU_HI __nv_bfloat16 __low2bfloat16(__nv_bfloat162 h) { return h.x; }
EMU_HI __nv_bfloat16 __high2bfloat16(__nv_bfloat162 h) { return h.y; }
EMU_HI float __low2float(__nv_bfloat162 h) { return __bfloat162float(h.x); }
EMU_HI float __high2float(__nv_bfloat162 h) { return __bfloat162float(h.y); }
EMU_HI __nv_bfloat162 __lows2bfloat162(__nv_bfloat162 a, __nv_bfloat162 b) { return __nv_bfloat162(a.x, b.x); }
EMU_HI __nv_bfloat162 __highs2bfloat162(__nv_bfloat162 a, __nv_bfloat162 b) { return __nv_bfloat162(a.y, b.y); }

/* float2 / half2 pairs need float2, defined by emu.h before this header. */
EMU_HI __half2 __float22half2_rn(float2 f) { return __floats2half2_rn(f.x, f.y); }
EMU_HI float2 __half22float2(__half2 h) { float2 r; r.x = __low2float(h); r.y = __high2float(h); return r; }
EMU_HI __nv_bfloat162 __float22bfloat162_rn(float2 f) { return __floats2bfloat162_rn(f.x, f.y); }
EMU_HI float2 __bfloat1622float2(__nv_bfloat162 h) { float2 r; r.x = __low2float(h); r.y = __high2float(h); return r; }

/* ---- arithmetic, scalar and paired, for both types (one rounding each, see top) ---- */
#define EMU_FP16_OPS(T, T2, TOF, FROMF)                                                         \
    EMU_HI T __hadd(T a, T b) { return FROMF(TOF(a) + TOF(b)); }                                \
    EMU_HI T __hsub(T a, T b) { return FROMF(TOF(a) - TOF(b)); }                                \
    EMU_HI T __hmul(T a, T b) { return FROMF(TOF(a) * TOF(b)); }                                \
    EMU_HI T __hdiv(T a, T b) { return FROMF(TOF(a) / TOF(b)); }                                \
    EMU_HI T __hfma(T a, T b, T c) { return FROMF((float)((double)TOF(a) * TOF(b) + TOF(c))); } \
    EMU_HI T __hneg(T a) { T r = a; r.__x ^= 0x8000u; return r; }                               \
    EMU_HI T __habs(T a) { T r = a; r.__x &= 0x7fffu; return r; }                               \
    EMU_HI bool __hisnan(T a) { return std::isnan(TOF(a)); }                                    \
    EMU_HI int __hisinf(T a) { float f = TOF(a); return std::isinf(f) ? (f < 0 ? -1 : 1) : 0; } \
    /* hmax/hmin: NaN loses unless both are NaN (the hardware's max.f16). */                     \
    EMU_HI T __hmax(T a, T b) { return __hisnan(a) ? (__hisnan(b) ? FROMF(NAN) : b) : __hisnan(b) ? a : (TOF(a) >= TOF(b) ? a : b); } \
    EMU_HI T __hmin(T a, T b) { return __hisnan(a) ? (__hisnan(b) ? FROMF(NAN) : b) : __hisnan(b) ? a : (TOF(a) <= TOF(b) ? a : b); } \
    EMU_HI bool __heq(T a, T b) { return TOF(a) == TOF(b); }                                    \
    EMU_HI bool __hne(T a, T b) { return TOF(a) != TOF(b) && !__hisnan(a) && !__hisnan(b); }    \
    EMU_HI bool __hneu(T a, T b) { return !(TOF(a) == TOF(b)); }                                \
    EMU_HI bool __hlt(T a, T b) { return TOF(a) < TOF(b); }                                     \
    EMU_HI bool __hle(T a, T b) { return TOF(a) <= TOF(b); }                                    \
    EMU_HI bool __hgt(T a, T b) { return TOF(a) > TOF(b); }                                     \
    EMU_HI bool __hge(T a, T b) { return TOF(a) >= TOF(b); }                                    \
    EMU_HI T hexp(T a) { return FROMF(std::exp(TOF(a))); }                                      \
    EMU_HI T hexp2(T a) { return FROMF(std::exp2(TOF(a))); }                                    \
    EMU_HI T hlog(T a) { return FROMF(std::log(TOF(a))); }                                      \
    EMU_HI T hlog2(T a) { return FROMF(std::log2(TOF(a))); }                                    \
    EMU_HI T hsqrt(T a) { return FROMF(std::sqrt(TOF(a))); }                                    \
    EMU_HI T hrsqrt(T a) { return FROMF(1.0f / std::sqrt(TOF(a))); }                            \
    EMU_HI T hrcp(T a) { return FROMF(1.0f / TOF(a)); }                                         \
    EMU_HI T operator+(T a, T b) { return __hadd(a, b); }                                       \
    EMU_HI T operator-(T a, T b) { return __hsub(a, b); }                                       \
    EMU_HI T operator*(T a, T b) { return __hmul(a, b); }                                       \
    EMU_HI T operator/(T a, T b) { return __hdiv(a, b); }                                       \
    EMU_HI T operator-(T a) { return __hneg(a); }                                               \
    EMU_HI T &operator+=(T &a, T b) { return a = __hadd(a, b); }                                \
    EMU_HI T &operator-=(T &a, T b) { return a = __hsub(a, b); }                                \
    EMU_HI T &operator*=(T &a, T b) { return a = __hmul(a, b); }                                \
    EMU_HI T &operator/=(T &a, T b) { return a = __hdiv(a, b); }                                \
    EMU_HI bool operator==(T a, T b) { return __heq(a, b); }                                    \
    EMU_HI bool operator!=(T a, T b) { return __hneu(a, b); }                                   \
    EMU_HI bool operator<(T a, T b) { return __hlt(a, b); }                                     \
    EMU_HI bool operator<=(T a, T b) { return __hle(a, b); }                                    \
    EMU_HI bool operator>(T a, T b) { return __hgt(a, b); }                                     \
    EMU_HI bool operator>=(T a, T b) { return __hge(a, b); }                                    \
    EMU_HI T2 __hadd2(T2 a, T2 b) { return T2(__hadd(a.x, b.x), __hadd(a.y, b.y)); }            \
    EMU_HI T2 __hsub2(T2 a, T2 b) { return T2(__hsub(a.x, b.x), __hsub(a.y, b.y)); }            \
    EMU_HI T2 __hmul2(T2 a, T2 b) { return T2(__hmul(a.x, b.x), __hmul(a.y, b.y)); }            \
    EMU_HI T2 __h2div(T2 a, T2 b) { return T2(__hdiv(a.x, b.x), __hdiv(a.y, b.y)); }            \
    EMU_HI T2 __hfma2(T2 a, T2 b, T2 c) { return T2(__hfma(a.x, b.x, c.x), __hfma(a.y, b.y, c.y)); } \
    EMU_HI T2 __hneg2(T2 a) { return T2(__hneg(a.x), __hneg(a.y)); }                            \
    EMU_HI T2 __habs2(T2 a) { return T2(__habs(a.x), __habs(a.y)); }                            \
    EMU_HI T2 __hmax2(T2 a, T2 b) { return T2(__hmax(a.x, b.x), __hmax(a.y, b.y)); }            \
    EMU_HI T2 __hmin2(T2 a, T2 b) { return T2(__hmin(a.x, b.x), __hmin(a.y, b.y)); }            \
    EMU_HI T2 h2exp(T2 a) { return T2(hexp(a.x), hexp(a.y)); }                                  \
    EMU_HI T2 h2exp2(T2 a) { return T2(hexp2(a.x), hexp2(a.y)); }                               \
    EMU_HI T2 h2sqrt(T2 a) { return T2(hsqrt(a.x), hsqrt(a.y)); }                               \
    EMU_HI T2 h2rcp(T2 a) { return T2(hrcp(a.x), hrcp(a.y)); }                                  \
    EMU_HI T2 operator+(T2 a, T2 b) { return __hadd2(a, b); }                                   \
    EMU_HI T2 operator-(T2 a, T2 b) { return __hsub2(a, b); }                                   \
    EMU_HI T2 operator*(T2 a, T2 b) { return __hmul2(a, b); }                                   \
    EMU_HI T2 &operator+=(T2 &a, T2 b) { return a = __hadd2(a, b); }                            \
    EMU_HI T2 &operator*=(T2 &a, T2 b) { return a = __hmul2(a, b); }

EMU_FP16_OPS(__half, __half2, __half2float, __float2half)
EMU_FP16_OPS(__nv_bfloat16, __nv_bfloat162, __bfloat162float, __float2bfloat16)
#undef EMU_FP16_OPS

/* The toolkit's named constants (cuda_fp16.hpp / cuda_bf16.hpp). */
#define CUDART_INF_FP16 __ushort_as_half((unsigned short)0x7C00U)
#define CUDART_NAN_FP16 __ushort_as_half((unsigned short)0x7FFFU)
#define CUDART_MIN_DENORM_FP16 __ushort_as_half((unsigned short)0x0001U)
#define CUDART_MAX_NORMAL_FP16 __ushort_as_half((unsigned short)0x7BFFU)
#define CUDART_NEG_ZERO_FP16 __ushort_as_half((unsigned short)0x8000U)
#define CUDART_ZERO_FP16 __ushort_as_half((unsigned short)0x0000U)
#define CUDART_ONE_FP16 __ushort_as_half((unsigned short)0x3C00U)
#define CUDART_INF_BF16 __ushort_as_bfloat16((unsigned short)0x7F80U)
#define CUDART_NAN_BF16 __ushort_as_bfloat16((unsigned short)0x7FFFU)
#define CUDART_MIN_DENORM_BF16 __ushort_as_bfloat16((unsigned short)0x0001U)
#define CUDART_MAX_NORMAL_BF16 __ushort_as_bfloat16((unsigned short)0x7F7FU)
#define CUDART_NEG_ZERO_BF16 __ushort_as_bfloat16((unsigned short)0x8000U)
#define CUDART_ZERO_BF16 __ushort_as_bfloat16((unsigned short)0x0000U)
#define CUDART_ONE_BF16 __ushort_as_bfloat16((unsigned short)0x3F80U)

#endif
