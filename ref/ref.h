/*
 * ref.h - the naive CPU attention every verdict rests on (spec/semantics.md 1-3,
 * spec/tolerance.md "References"). Obviously right rather than clever: scores through BLAS
 * gemm, the mask applied densely from mask.h's predicate (never from a block mask), a
 * max-shifted softmax, P.V through BLAS gemm.
 *
 * Inputs are float arrays laid out as problem.h says; for float16/bfloat16 cases they hold
 * values already representable in that dtype. Rows with no allowed key: output exactly 0,
 * LSE -inf, in every variant. LSE is the natural log of sum(exp(scale * q.k)) over allowed keys.
 */
#ifndef FLEXCHECK_REF_H
#define FLEXCHECK_REF_H

#include "fc.h"
#include "problem.h"

#ifdef __cplusplus
extern "C" {
#endif

/* fp32: cblas_sgemm, fp32 softmax. o [B,Hq,Lq,Dv], lse [B,Hq,Lq] (lse may be NULL). */
fc_status ref_attention_f32(const attn_problem *p, const float *q, const float *k,
                            const float *v, float *o, float *lse, fc_err *err);

/* The float64 oracle (the fixtures' out/lse): cblas_dgemm, double softmax. */
fc_status ref_attention_f64(const attn_problem *p, const float *q, const float *k,
                            const float *v, double *o, double *lse, fc_err *err);

/* The same-precision baseline O_lp of spec/tolerance.md for dt: K pre-scaled and rounded,
 * S = Q.K^T (fp32 accumulate) rounded to dt, P = softmax(S) in fp32 rounded to dt,
 * O = P.V (fp32 accumulate) rounded to dt. For FC_F32 this is ref_attention_f32.
 * lse (may be NULL) is the fp32 LSE of the rounded scores. */
fc_status ref_attention_lp(const attn_problem *p, fc_dtype dt, const float *q, const float *k,
                           const float *v, float *o, float *lse, fc_err *err);

#ifdef __cplusplus
}
#endif

#endif
