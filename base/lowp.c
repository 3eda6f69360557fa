/*
 * lowp.c - float16 / bfloat16 conversions by bit manipulation (lowp.h). Portable C11: no
 * _Float16, no __bf16, no F16C, so the same rounding runs on every host the gate runs on
 * (fc_round's fast path is inline in lowp.h).
 * tests/test_lowp.c checks every 16-bit pattern and the float32 edge cases against
 * independently computed nearest values.
 */
#include <math.h>
#include <string.h>

#include "base/lowp.h"

static uint32_t f32_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static float bits_f32(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* Round the non-negative integer n / 2^shift to the nearest integer, ties to even. */
static uint32_t shift_rne(uint32_t n, int shift)
{
    if (shift <= 0)
        return n;
    if (shift > 31)
        return 0; /* n < 2^24 here, so n / 2^shift < 1/2: rounds to zero */
    uint32_t q = n >> shift, rem = n & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u)))
        q++;
    return q;
}

uint16_t fc_f32_to_f16(float x)
{
    uint32_t u = f32_bits(x);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu, man = a & 0x7fffffu;
    if (a > 0x7f800000u) /* NaN: keep the top payload bits, set the quiet bit */
        return (uint16_t)(sign | 0x7e00u | (man >> 13));
    if (a >= 0x47800000u) /* |x| >= 65536 (inf included): past the largest finite, 65504 */
        return (uint16_t)(sign | 0x7c00u);
    int e = (int)(a >> 23) - 127; /* unbiased exponent; float subnormals give -127 */
    if (e >= -14) {
        /* Normal half: drop 13 mantissa bits. A carry out of the mantissa correctly bumps
         * the exponent, and at 65520 and above it lands exactly on infinity (0x7c00). */
        uint32_t h = ((uint32_t)(e + 15) << 10) | (man >> 13);
        uint32_t rem = man & 0x1fffu;
        if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
            h++;
        return (uint16_t)(sign | h);
    }
    /* Subnormal half: the value is n * 2^-24. With the implicit bit, |x| = mf * 2^(e-23),
     * so n = mf / 2^(-e-1). Float subnormals (e = -127) are far below 2^-25 and give 0.
     * Rounding up to n = 0x400 yields the smallest normal half, which is the right code. */
    uint32_t mf = man | 0x800000u;
    return (uint16_t)(sign | shift_rne(mf, -e - 1));
}

float fc_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (e == 0x1fu) /* inf or NaN; NaNs come back quiet, as IEEE conversions do */
        return bits_f32(sign | 0x7f800000u | (man << 13) | (man ? 0x400000u : 0u));
    if (e == 0) {
        /* zero or subnormal: man * 2^-24, exact in float (man < 2^10) */
        float mag = (float)man * 0x1p-24f;
        return sign ? -mag : mag;
    }
    return bits_f32(sign | ((e - 15u + 127u) << 23) | (man << 13));
}

uint16_t fc_f32_to_bf16(float x)
{
    uint32_t u = f32_bits(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: truncate the payload, set the quiet bit */
        return (uint16_t)((u >> 16) | 0x40u);
    /* bfloat16 is float32's top half, so RNE is "add just under half an ulp, plus one when
     * the kept part is odd, then truncate". The carry handles exponent steps, overflow to
     * infinity and subnormals alike. */
    uint32_t lsb = (u >> 16) & 1u;
    return (uint16_t)((u + 0x7fffu + lsb) >> 16);
}

float fc_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    if ((u & 0x7fffffffu) > 0x7f800000u)
        u |= 0x400000u; /* quiet a signalling NaN, as IEEE conversions do */
    return bits_f32(u);
}

float fc_round_slow(float x, fc_dtype dt)
{
    switch (dt) {
    case FC_F16:
        return fc_f16_to_f32(fc_f32_to_f16(x));
    case FC_BF16:
        return fc_bf16_to_f32(fc_f32_to_bf16(x));
    case FC_F32:
    default:
        return x;
    }
}

int fc_representable(float x, fc_dtype dt)
{
    if (x != x)
        return 1;
    float r = fc_round(x, dt);
    return f32_bits(r) == f32_bits(x);
}

double fc_ulp(double x, fc_dtype dt)
{
    int mant = dt == FC_F16 ? 10 : dt == FC_BF16 ? 7 : 23;
    int e;
    frexp(fabs(x), &e); /* |x| = m 2^e, m in [0.5, 1) */
    int emin = dt == FC_F16 ? -13 : -125; /* exponent e of the smallest normal value */
    if (x == 0.0 || e < emin)
        e = emin;
    return ldexp(1.0, e - 1 - mant);
}
