/*
 * test_lowp.c - float16 / bfloat16 conversions of ref/lowp.h against oracles computed here
 * by other means: decoding from the IEEE field formulas with ldexp, and rounding by picking
 * the nearer of the two neighbouring representable values in exact double arithmetic (ties
 * to the even code). Where the compiler has _Float16 (GCC on x86-64), its conversions are a
 * second, independent oracle for float16.
 *
 *   make BUILD=build build/tests/test_lowp && ./build/tests/test_lowp
 *
 * Loops over many values stop at the first mismatch and report it with the input bits,
 * because Criterion records every passing assertion.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "base/lowp.h"
#include "tests/test_rng.h"

static uint32_t bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static float from_bits(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* ---- independent decoders: the IEEE formulas, in double ---- */

/* float16: 1 sign, 5 exponent (bias 15), 10 mantissa bits. */
static double f16_value(uint16_t h)
{
    int sign = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double mag;
    if (e == 31)
        mag = m ? NAN : INFINITY;
    else if (e == 0)
        mag = ldexp(m, -24); /* subnormal: m * 2^-14 * 2^-10 */
    else
        mag = ldexp(1024 + m, e - 25); /* (1 + m/1024) * 2^(e-15) */
    return sign ? -mag : mag;
}

/* bfloat16: 1 sign, 8 exponent (bias 127), 7 mantissa bits. */
static double bf16_value(uint16_t h)
{
    int sign = h >> 15, e = (h >> 7) & 255, m = h & 127;
    double mag;
    if (e == 255)
        mag = m ? NAN : INFINITY;
    else if (e == 0)
        mag = ldexp(m, -133); /* m * 2^-126 * 2^-7 */
    else
        mag = ldexp(128 + m, e - 134);
    return sign ? -mag : mag;
}

/* ---- independent rounding: nearest of the two neighbours, ties to the even code ---- */

/* The magnitude codes are ordered like the values, so a binary search over codes finds the
 * largest code whose value is <= |x|; code 0x7c00 (inf) stands for 2^16, the value the
 * exponent range would give next, which is what IEEE overflow rounding compares against. */
static double f16_mag_for_rounding(uint16_t code)
{
    return code == 0x7c00 ? 65536.0 : f16_value(code);
}

static uint16_t f16_nearest(float x)
{
    double a = fabs((double)x);
    uint16_t sign = (uint16_t)(bits(x) >> 31 << 15);
    if (a >= 65536.0)
        return sign | 0x7c00;
    uint16_t lo = 0, hi = 0x7c00; /* value(lo) <= a < value(hi) */
    while (hi - lo > 1) {
        uint16_t mid = (uint16_t)((lo + hi) / 2);
        if (f16_mag_for_rounding(mid) <= a) lo = mid; else hi = mid;
    }
    double dlo = a - f16_mag_for_rounding(lo), dhi = f16_mag_for_rounding(hi) - a;
    uint16_t pick = dlo < dhi ? lo : dhi < dlo ? hi : ((lo & 1) ? hi : lo);
    return sign | pick;
}

static double bf16_mag_for_rounding(uint16_t code)
{
    return code == 0x7f80 ? ldexp(1.0, 128) : bf16_value(code);
}

static uint16_t bf16_nearest(float x)
{
    double a = fabs((double)x);
    uint16_t sign = (uint16_t)(bits(x) >> 31 << 15);
    if (isinf(x))
        return sign | 0x7f80;
    uint16_t lo = 0, hi = 0x7f80;
    while (hi - lo > 1) {
        uint16_t mid = (uint16_t)((lo + hi) / 2);
        if (bf16_mag_for_rounding(mid) <= a) lo = mid; else hi = mid;
    }
    double dlo = a - bf16_mag_for_rounding(lo), dhi = bf16_mag_for_rounding(hi) - a;
    uint16_t pick = dlo < dhi ? lo : dhi < dlo ? hi : ((lo & 1) ? hi : lo);
    return sign | pick;
}

/* ---- decoding and round trips over all 65536 codes ---- */

Test(f16, every_bit_pattern_decodes_exactly_and_round_trips)
{
    for (uint32_t c = 0; c < 65536; c++) {
        uint16_t h = (uint16_t)c;
        float f = fc_f16_to_f32(h);
        double want = f16_value(h);
        int is_nan = ((h >> 10) & 31) == 31 && (h & 1023);
        if (is_nan) {
            /* NaN: stays NaN, keeps its sign and payload, comes back quiet */
            uint16_t back = fc_f32_to_f16(f);
            if (!isnan(f) || (bits(f) >> 31) != (c >> 15) || back != (h | 0x200))
                cr_assert_fail("f16 NaN 0x%04x: decoded bits 0x%08x, back 0x%04x", c, bits(f),
                               back);
            continue;
        }
        if (!((double)f == want) || !signbit(f) != !signbit(want))
            cr_assert_fail("f16 0x%04x decodes to %a, want %a", c, (double)f, want);
        if (fc_f32_to_f16(f) != h)
            cr_assert_fail("f16 0x%04x round-trips to 0x%04x", c, fc_f32_to_f16(f));
        if (!fc_representable(f, FC_F16))
            cr_assert_fail("f16 0x%04x: its own value is not representable", c);
    }
}

Test(bf16, every_bit_pattern_decodes_exactly_and_round_trips)
{
    for (uint32_t c = 0; c < 65536; c++) {
        uint16_t h = (uint16_t)c;
        float f = fc_bf16_to_f32(h);
        double want = bf16_value(h);
        int is_nan = ((h >> 7) & 255) == 255 && (h & 127);
        if (is_nan) {
            uint16_t back = fc_f32_to_bf16(f);
            if (!isnan(f) || (bits(f) >> 31) != (c >> 15) || back != (h | 0x40))
                cr_assert_fail("bf16 NaN 0x%04x: decoded bits 0x%08x, back 0x%04x", c, bits(f),
                               back);
            continue;
        }
        if (!((double)f == want) || !signbit(f) != !signbit(want))
            cr_assert_fail("bf16 0x%04x decodes to %a, want %a", c, (double)f, want);
        if (fc_f32_to_bf16(f) != h)
            cr_assert_fail("bf16 0x%04x round-trips to 0x%04x", c, fc_f32_to_bf16(f));
        if (!fc_representable(f, FC_BF16))
            cr_assert_fail("bf16 0x%04x: its own value is not representable", c);
    }
}

/* ---- rounding float32 values ---- */

/* Floats that probe every rounding decision of float16: each code's value, the exact
 * midpoint to the next code (a tie) and the floats one ulp either side of it, both signs;
 * then random float bit patterns. */
static void check_f16_rounding(float x, const char *what)
{
    if (isnan(x))
        return;
    uint16_t got = fc_f32_to_f16(x), want = f16_nearest(x);
    if (got != want)
        cr_assert_fail("f16 rounding of %a (%s, bits 0x%08x): got 0x%04x, want 0x%04x",
                       (double)x, what, bits(x), got, want);
#ifdef __FLT16_MAX__
    _Float16 hw = (_Float16)x;
    uint16_t hwbits;
    memcpy(&hwbits, &hw, sizeof hwbits);
    if (got != hwbits)
        cr_assert_fail("f16 rounding of %a (%s): got 0x%04x, the compiler's _Float16 gives 0x%04x",
                       (double)x, what, got, hwbits);
#endif
}

Test(f16, rounding_matches_nearest_even_at_ties_subnormals_and_overflow)
{
    for (uint32_t c = 0; c < 0x7c00; c++) {
        for (int s = 0; s < 2; s++) {
            double v = f16_value((uint16_t)c), next = f16_mag_for_rounding((uint16_t)(c + 1));
            float mid = (float)((v + next) / 2); /* exact: 12 significant bits at most */
            float sgn = s ? -1.0f : 1.0f;
            check_f16_rounding(sgn * (float)v, "a code's value");
            check_f16_rounding(sgn * mid, "midpoint to the next code");
            check_f16_rounding(sgn * nextafterf(mid, 0.0f), "just below a midpoint");
            check_f16_rounding(sgn * nextafterf(mid, INFINITY), "just above a midpoint");
        }
    }
    uint64_t seed = 16;
    for (int i = 0; i < 1000000; i++)
        check_f16_rounding(from_bits((uint32_t)rng_next(&seed)), "random bits");
    static const struct { const char *name; float x; uint16_t want; } edges[] = {
        {.name = "65504, the largest half", .x = 65504.0f, .want = 0x7bff},
        {.name = "65519.99 rounds down", .x = 65519.996f, .want = 0x7bff},
        {.name = "65520 ties to even: infinity", .x = 65520.0f, .want = 0x7c00},
        {.name = "1e30 overflows", .x = 1e30f, .want = 0x7c00},
        {.name = "-inf", .x = -INFINITY, .want = 0xfc00},
        {.name = "2^-24, the smallest subnormal", .x = 0x1p-24f, .want = 0x0001},
        {.name = "2^-25 ties to even: zero", .x = 0x1p-25f, .want = 0x0000},
        {.name = "just above 2^-25 rounds up", .x = 0x1.000002p-25f, .want = 0x0001},
        {.name = "3 * 2^-25 ties to even: 2 * 2^-24", .x = 0x3p-25f, .want = 0x0002},
        {.name = "-0 keeps its sign", .x = -0.0f, .want = 0x8000},
        {.name = "float subnormal to zero", .x = 0x1p-140f, .want = 0x0000},
        {.name = "1 + 2^-11 ties to even: 1", .x = 0x1.002p0f, .want = 0x3c00},
        {.name = "1 + 3 * 2^-11 ties to even: 1 + 2^-9", .x = 0x1.006p0f, .want = 0x3c02},
    };
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++)
        cr_assert_eq(fc_f32_to_f16(edges[i].x), edges[i].want, "%s: got 0x%04x, want 0x%04x",
                     edges[i].name, fc_f32_to_f16(edges[i].x), edges[i].want);
}

static void check_bf16_rounding(float x, const char *what)
{
    if (isnan(x))
        return;
    uint16_t got = fc_f32_to_bf16(x), want = bf16_nearest(x);
    if (got != want)
        cr_assert_fail("bf16 rounding of %a (%s, bits 0x%08x): got 0x%04x, want 0x%04x",
                       (double)x, what, bits(x), got, want);
}

/* For every bfloat16 code (the float's top half), the low halves that decide the
 * rounding: exact, one above, just under the tie, the tie, just over it, the largest. */
Test(bf16, rounding_matches_nearest_even_at_ties_subnormals_and_overflow)
{
    static const uint32_t lows[] = {0x0000, 0x0001, 0x7fff, 0x8000, 0x8001, 0xffff};
    for (uint32_t c = 0; c < 65536; c++)
        for (size_t i = 0; i < sizeof lows / sizeof lows[0]; i++)
            check_bf16_rounding(from_bits(c << 16 | lows[i]), "code with a chosen low half");
    uint64_t seed = 17;
    for (int i = 0; i < 1000000; i++)
        check_bf16_rounding(from_bits((uint32_t)rng_next(&seed)), "random bits");
    static const struct { const char *name; float x; uint16_t want; } edges[] = {
        {.name = "largest float overflows", .x = 0x1.fffffep127f, .want = 0x7f80},
        {.name = "largest bfloat16 stays", .x = 0x1.fep127f, .want = 0x7f7f},
        {.name = "1 + 2^-8 ties to even: 1", .x = 0x1.01p0f, .want = 0x3f80},
        {.name = "1 + 3 * 2^-8 ties to even: 1 + 2^-6", .x = 0x1.03p0f, .want = 0x3f82},
        {.name = "float subnormal rounds in place", .x = 0x1.8p-133f, .want = 0x0002},
        {.name = "-0 keeps its sign", .x = -0.0f, .want = 0x8000},
    };
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++)
        cr_assert_eq(fc_f32_to_bf16(edges[i].x), edges[i].want, "%s: got 0x%04x, want 0x%04x",
                     edges[i].name, fc_f32_to_bf16(edges[i].x), edges[i].want);
}

Test(lowp, nan_stays_nan_with_its_sign_and_becomes_quiet)
{
    static const struct { const char *name; uint32_t bits; } nans[] = {
        {.name = "quiet NaN", .bits = 0x7fc00000},
        {.name = "signalling NaN, low payload only", .bits = 0x7f800001},
        {.name = "negative NaN with payload", .bits = 0xffa5a5a5},
    };
    for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++) {
        float x = from_bits(nans[i].bits);
        uint16_t h = fc_f32_to_f16(x), b = fc_f32_to_bf16(x);
        cr_assert((h & 0x7c00) == 0x7c00 && (h & 0x0200), "%s: f16 0x%04x is not a quiet NaN",
                  nans[i].name, h);
        cr_assert((b & 0x7f80) == 0x7f80 && (b & 0x0040), "%s: bf16 0x%04x is not a quiet NaN",
                  nans[i].name, b);
        cr_assert_eq(h >> 15, nans[i].bits >> 31, "%s: f16 lost the sign", nans[i].name);
        cr_assert_eq(b >> 15, nans[i].bits >> 31, "%s: bf16 lost the sign", nans[i].name);
        cr_assert(isnan(fc_round(x, FC_F16)) && isnan(fc_round(x, FC_BF16)) &&
                      isnan(fc_round(x, FC_F32)),
                  "%s: fc_round lost the NaN", nans[i].name);
        cr_assert(fc_representable(x, FC_F16) && fc_representable(x, FC_BF16),
                  "%s: NaN counts as representable", nans[i].name);
    }
}

/* fc_round's inline fast path (lowp.h) against the conversions it stands for: the same bits,
 * NaNs included, for every sign and exponent with every value of the 16 low mantissa bits (where
 * every rounding decision lies) under five patterns of the 7 high ones, and for every mantissa
 * of the exponents where the fast path starts and stops (float16's 2^-14 and 65520). (Every
 * float32 pattern passes too; that sweep takes a minute.) */
static void compare_round(uint32_t u, uint64_t bad[2], uint32_t first[2])
{
    float x;
    memcpy(&x, &u, sizeof x);
    float h = fc_f16_to_f32(fc_f32_to_f16(x)), b = fc_bf16_to_f32(fc_f32_to_bf16(x));
    if (bits(fc_round(x, FC_F16)) != bits(h) && !bad[0]++)
        first[0] = u;
    if (bits(fc_round(x, FC_BF16)) != bits(b) && !bad[1]++)
        first[1] = u;
}

Test(lowp, fc_round_is_the_conversions_round_trip)
{
    static const uint32_t hi[] = {0x00, 0x01, 0x3e, 0x55, 0x7f};
    static const uint32_t edge_exp[] = {112, 113, 114, 141, 142, 143};
    uint64_t bad[2] = {0, 0};
    uint32_t first[2] = {0, 0};
    for (uint32_t s = 0; s < 2; s++)
        for (uint32_t e = 0; e < 256; e++) {
            for (size_t h = 0; h < sizeof hi / sizeof hi[0]; h++)
                for (uint32_t lo = 0; lo < 0x10000u; lo++)
                    compare_round(s << 31 | e << 23 | hi[h] << 16 | lo, bad, first);
            for (size_t k = 0; k < sizeof edge_exp / sizeof edge_exp[0]; k++)
                if (e == edge_exp[k])
                    for (uint32_t m = 0; m < 0x800000u; m++)
                        compare_round(s << 31 | e << 23 | m, bad, first);
        }
    cr_assert(!bad[0], "float16: %llu patterns differ, the first 0x%08x",
              (unsigned long long)bad[0], first[0]);
    cr_assert(!bad[1], "bfloat16: %llu patterns differ, the first 0x%08x",
              (unsigned long long)bad[1], first[1]);
}

Test(lowp, round_and_representable_agree_with_the_conversions)
{
    static const struct {
        const char *name;
        float x;
        int f16, bf16; /* representable? */
    } cases[] = {
        {.name = "1", .x = 1.0f, .f16 = 1, .bf16 = 1},
        {.name = "1 + 2^-10 (f16 ulp)", .x = 0x1.004p0f, .f16 = 1, .bf16 = 0},
        {.name = "1 + 2^-7 (bf16 ulp)", .x = 0x1.02p0f, .f16 = 1, .bf16 = 1},
        {.name = "1 + 2^-11", .x = 0x1.002p0f, .f16 = 0, .bf16 = 0},
        {.name = "1e5 overflows f16", .x = 1e5f, .f16 = 0, .bf16 = 0},
        {.name = "65536 exact in bf16", .x = 65536.0f, .f16 = 0, .bf16 = 1},
        {.name = "infinity", .x = INFINITY, .f16 = 1, .bf16 = 1},
        {.name = "2^-24", .x = 0x1p-24f, .f16 = 1, .bf16 = 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        float x = cases[i].x;
        cr_assert_eq(fc_representable(x, FC_F16), cases[i].f16, "%s: f16", cases[i].name);
        cr_assert_eq(fc_representable(x, FC_BF16), cases[i].bf16, "%s: bf16", cases[i].name);
        cr_assert(fc_representable(x, FC_F32), "%s: every float is a float", cases[i].name);
        cr_assert_eq(bits(fc_round(x, FC_F16)), bits(fc_f16_to_f32(fc_f32_to_f16(x))),
                     "%s: fc_round f16", cases[i].name);
        cr_assert_eq(bits(fc_round(x, FC_BF16)), bits(fc_bf16_to_f32(fc_f32_to_bf16(x))),
                     "%s: fc_round bf16", cases[i].name);
        cr_assert_eq(bits(fc_round(x, FC_F32)), bits(x), "%s: fc_round f32", cases[i].name);
    }
}
