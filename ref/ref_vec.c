/*
 * ref_vec.c - the three loops of the fp32 softmax (ref_f32.c) over one row's allowed scores
 * x[0, m): the maximum, x = exp(x - mx) with the sum, and x *= a. At L = 4k they are most of
 * what the reference spends beside its two sgemms, nearly all of it in expf.
 *
 * The sum is kept in eight partial sums, element j in sum j % 8, added up as
 * ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7)): faster than one running sum, and it
 * loses fewer bits on long rows.
 */
#include <math.h>

#include "ref/ref_internal.h"

/* The eight partial sums added up. */
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

const ref_vec_ops *ref_vec_ops_here(void)
{
    return &portable;
}
