/*
 * lowp.h - exact float16 / bfloat16 conversions in portable C (GCC 12 has no __bf16
 * arithmetic and _Float16 is not everywhere): round-to-nearest-even from float32, exact
 * widening back, IEEE handling of ties, subnormals, overflow to infinity and NaN.
 */
#ifndef FLEXCHECK_LOWP_H
#define FLEXCHECK_LOWP_H

#include <stdint.h>
#include <string.h>

#include "base/fc.h"

#ifdef __cplusplus
extern "C" {
#endif

uint16_t fc_f32_to_f16(float x);   /* RNE; overflow -> +-inf; NaN stays NaN (quiet) */
float fc_f16_to_f32(uint16_t h);   /* exact */
uint16_t fc_f32_to_bf16(float x);  /* RNE; NaN stays NaN (quiet) */
float fc_bf16_to_f32(uint16_t h);  /* exact */

/* x rounded to dt and widened back (identity for FC_F32): fc_f16_to_f32(fc_f32_to_f16(x)) and
 * its bfloat16 twin, bit for bit. Inline, because the baseline and the gates round every score
 * and element (a call each cost a third of judging one case): where the result is a normal
 * value of dt (every bfloat16, float16 for 2^-14 <= |x| < 65520) rounding to nearest even is
 * adding just under half an ulp of dt, plus one when the kept part is odd, to the float32 bits
 * and clearing the dropped ones (a carry steps the exponent, as it should); NaN, float16
 * subnormals and overflow take the conversions (fc_round_slow). tests/test_lowp.c holds the two
 * equal over every float32 bit pattern. */
float fc_round_slow(float x, fc_dtype dt);
static inline float fc_round(float x, fc_dtype dt)
{
    uint32_t u, a;
    memcpy(&u, &x, sizeof u);
    a = u & 0x7fffffffu;
    if (dt == FC_BF16 && a <= 0x7f800000u)
        u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    else if (dt == FC_F16 && a >= 0x38800000u && a < 0x477ff000u)
        u = (u + 0xfffu + ((u >> 13) & 1u)) & ~(uint32_t)0x1fffu;
    else
        return dt == FC_F32 ? x : fc_round_slow(x, dt);
    memcpy(&x, &u, sizeof x);
    return x;
}
/* 1 iff x is exactly representable in dt (NaN/inf count as representable). */
int fc_representable(float x, fc_dtype dt);
/* The spacing of dt's values at |x| (one ulp; the subnormal spacing below the normal range). */
double fc_ulp(double x, fc_dtype dt);

#ifdef __cplusplus
}
#endif

#endif
