/*
 * exact.h - the exactness rules of docs/tolerance.md that judge outputs rather than run kernels,
 * shared by the gate (ci/checks/) and by `check` (check/), which applies them to outputs other
 * producers stored: p-round's rule on a designed case, and the window-edge rule on the outputs
 * for W and W +- 1.
 */
#ifndef FLEXCHECK_JUDGE_EXACT_H
#define FLEXCHECK_JUDGE_EXACT_H

#include <stddef.h>

#include "judge/judge.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Key tokens per zero-score group of a p-round design (ci/checks/pround.c builds the designs). */
#define JUDGE_PROUND_GROUP 16

/* p-round's rule (judge/pround.c) on output o of a designed case jc: 1 pass, 0 fail, -1 out of
 * memory, -2 jc is not such a design; msg says why. Either of FlexAttention's roundings of P
 * passes (the tiled kernels', the eager path's); P kept in fp32, or a mix, fails. */
int judge_pround(const judge_case *jc, const float *o, char *msg, size_t cap);

/* The window-edge rule (judge/edge.c): jc's rows run under mask w gave (ow, lw), and the same
 * inputs under mask e (w with another window; same shapes and sequences) gave (oe, le); either
 * LSE may be NULL. Returns the first row whose allowed keys differ between w and e while its
 * outputs are identical (judge_row_identical), or judge_rows(jc) when none; *changed (may be
 * NULL) receives how many rows' allowed keys differ, and keys[4] (may be NULL) the returned
 * row's allowed token ranges [lo, hi) under w, then under e. */
size_t judge_window_edge(const judge_case *jc, mask_params w, mask_params e, const float *ow,
                         const float *lw, const float *oe, const float *le, size_t *changed,
                         int32_t keys[4]);

#ifdef __cplusplus
}
#endif

#endif
