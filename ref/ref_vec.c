/*
 * ref_vec.c - the three loops of the fp32 softmax (ref_f32.c) over one row's allowed scores
 * x[0, m): the maximum, x = exp(x - mx) with the sum, and x *= a. At L = 4k they are what
 * the reference spends beside its two sgemms, most of it in exp.
 *
 * Two implementations with the same arithmetic except for exp, chosen by ref_vec_ops_here()
 * from the CPU's features (base/cpu.h, whose test hook FLEXCHECK_TEST_CPU_HIDE=avx2 forces the
 * portable path on any machine):
 *   avx2:     x86-64 with AVX2 and FMA: eight lanes, exp from SLEEF (Sleef_expf8_u10avx2,
 *             Debian's libsleef-dev);
 *   portable: any machine (aarch64, x86-64 without AVX2): libm's expf, one element at a time.
 * Both keep the sum in eight partial sums, element j in sum j % 8, added up as
 * ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7)), so only exp's last bit tells them apart.
 * (SLEEF 3.5 has no width-generic API; an aarch64 path would name its AdvSIMD variant.)
 *
 * Accuracy. SLEEF's u10 expf is within 1.0 ulp of exp, glibc's expf within 0.502. The fp32
 * reference is O_lp for float32 and, with P rounded to the dtype afterwards, for float16 and
 * bfloat16 (docs/tolerance.md): an honest same-precision computation whose distance from
 * the oracle the gates scale. Half an ulp more on each exp is far below what the fp32 sum
 * over thousands of keys and the two sgemms already contribute (tests/test_ref.c holds every
 * precision to its unchanged bounds against a long-double brute force), and a GPU kernel's
 * exp2 approximation is coarser still (u10 is SLEEF 3.5's only float exp). The bits were
 * never machine-independent (OpenBLAS's sgemm kernels differ by CPU); now exp's differ
 * between the two paths too. The float64 oracle (ref_f64.c) stays on libm's exp: it
 * is the truth the others are judged against, and not where the gate's time goes.
 */
#include <math.h>

#include "base/cpu.h"
#include "ref/ref_internal.h"

/* The eight partial sums added up, in the order both paths use. */
static float sum8(const float acc[8])
{
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/* ---- portable: libm ---- */

/* x > m ? x : m keeps m when x is NaN, so NaN scores never win the max (they reach the
 * sum instead, and make the row NaN there). Eight partial maxima: one running max is a
 * chain of dependent compares. */
static float max_portable(const float *x, int32_t m)
{
    float acc[8];
    for (int t = 0; t < 8; t++)
        acc[t] = -INFINITY;
    for (int32_t j = 0; j < m; j++)
        acc[j & 7] = x[j] > acc[j & 7] ? x[j] : acc[j & 7];
    float mx = -INFINITY;
    for (int t = 0; t < 8; t++)
        mx = acc[t] > mx ? acc[t] : mx;
    return mx;
}

static float exp_sum_portable(float *x, int32_t m, float mx)
{
    float acc[8] = {0};
    for (int32_t j = 0; j < m; j++) {
        x[j] = expf(x[j] - mx);
        acc[j & 7] += x[j];
    }
    return sum8(acc);
}

static void scale_portable(float *x, int32_t m, float a)
{
    for (int32_t j = 0; j < m; j++)
        x[j] *= a;
}

static const ref_vec_ops portable = {
    .name = "libm expf (portable)",
    .max = max_portable,
    .exp_sum = exp_sum_portable,
    .scale = scale_portable,
};

/* ---- avx2: SLEEF ---- */

/* The AVX2 code is compiled for AVX2 and FMA whatever the build's flags (the target pragma;
 * sleef.h declares its __m256 functions only under __AVX__, hence included inside it) and
 * runs only where the CPU has both, so one binary serves every x86-64. The SLEEF variant is
 * named rather than taken from its dispatcher: the loop around it is AVX2 code chosen by our
 * own check, and the bits should not depend on a second choice. Not under clang (the fuzz
 * build, make fuzz): it ignores the target pragma, so sleef.h would hide those declarations;
 * it gets the portable path. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define REF_VEC_AVX2 1
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#include <sleef.h>

/* Lanes [0, r) of a mask, r in [0, 8): the tail of a row that is not a multiple of eight. */
static __m256i tail_mask(int32_t r)
{
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(r), lane);
}

static float max_avx2(const float *x, int32_t m)
{
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    __m256 acc = ninf;
    int32_t j = 0;
    /* max_ps(a, b) returns b when a is NaN: NaN scores never win, as in the portable path */
    for (; j + 8 <= m; j += 8)
        acc = _mm256_max_ps(_mm256_loadu_ps(x + j), acc);
    if (j < m) {
        __m256i mask = tail_mask(m - j);
        __m256 t = _mm256_blendv_ps(ninf, _mm256_maskload_ps(x + j, mask),
                                    _mm256_castsi256_ps(mask));
        acc = _mm256_max_ps(t, acc);
    }
    float a[8];
    _mm256_storeu_ps(a, acc);
    return max_portable(a, 8);
}

static float exp_sum_avx2(float *x, int32_t m, float mx)
{
    const __m256 vmx = _mm256_set1_ps(mx);
    __m256 acc = _mm256_setzero_ps();
    int32_t j = 0;
    for (; j + 8 <= m; j += 8) {
        __m256 e = Sleef_expf8_u10avx2(_mm256_sub_ps(_mm256_loadu_ps(x + j), vmx));
        _mm256_storeu_ps(x + j, e);
        acc = _mm256_add_ps(acc, e);
    }
    if (j < m) { /* lanes past the row are zeroed before they reach the sum */
        __m256i mask = tail_mask(m - j);
        __m256 e = Sleef_expf8_u10avx2(_mm256_sub_ps(_mm256_maskload_ps(x + j, mask), vmx));
        e = _mm256_and_ps(e, _mm256_castsi256_ps(mask));
        _mm256_maskstore_ps(x + j, mask, e);
        acc = _mm256_add_ps(acc, e);
    }
    float a[8]; /* lane t: the partial sum of the elements j % 8 == t, as in the portable path */
    _mm256_storeu_ps(a, acc);
    return sum8(a);
}

static void scale_avx2(float *x, int32_t m, float a)
{
    const __m256 va = _mm256_set1_ps(a);
    int32_t j = 0;
    for (; j + 8 <= m; j += 8)
        _mm256_storeu_ps(x + j, _mm256_mul_ps(_mm256_loadu_ps(x + j), va));
    for (; j < m; j++)
        x[j] *= a;
}

static const ref_vec_ops avx2 = {
    .name = "SLEEF Sleef_expf8_u10avx2 (AVX2)",
    .max = max_avx2,
    .exp_sum = exp_sum_avx2,
    .scale = scale_avx2,
};
#pragma GCC pop_options
#endif

const ref_vec_ops *ref_vec_ops_portable(void)
{
    return &portable;
}

const ref_vec_ops *ref_vec_ops_here(void)
{
#ifdef REF_VEC_AVX2
    if (fc_cpu_has(FC_CPU_AVX2 | FC_CPU_FMA)) /* base/cpu.h: its test hook can hide them */
        return &avx2;
#endif
    return &portable;
}

const char *ref_f32_exp_name(void)
{
    return ref_vec_ops_here()->name;
}
