/*
 * lowp.h - exact float16 / bfloat16 conversions in portable C (GCC 12 has no __bf16
 * arithmetic and _Float16 is not everywhere): round-to-nearest-even from float32, exact
 * widening back, IEEE handling of ties, subnormals, overflow to infinity and NaN.
 */
#ifndef FLEXCHECK_LOWP_H
#define FLEXCHECK_LOWP_H

#include <stdint.h>
#include "base/fc.h"

#ifdef __cplusplus
extern "C" {
#endif

uint16_t fc_f32_to_f16(float x);   /* RNE; overflow -> +-inf; NaN stays NaN (quiet) */
float fc_f16_to_f32(uint16_t h);   /* exact */
uint16_t fc_f32_to_bf16(float x);  /* RNE; NaN stays NaN (quiet) */
float fc_bf16_to_f32(uint16_t h);  /* exact */

/* x rounded to dt and widened back (identity for FC_F32). */
float fc_round(float x, fc_dtype dt);
/* 1 iff x is exactly representable in dt (NaN/inf count as representable). */
int fc_representable(float x, fc_dtype dt);

#ifdef __cplusplus
}
#endif

#endif
