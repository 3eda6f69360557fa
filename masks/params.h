/*
 * params.h - the mask parameters of mask.h's MASK_PARAMS as a table, for the host code that
 * moves them around: validation, fixture attributes, CLI options, case ids, printouts and
 * report columns all loop over it instead of naming causal / sliding_window / chunk_size.
 */
#ifndef FLEXCHECK_MASK_PARAMS_H
#define FLEXCHECK_MASK_PARAMS_H

#include <stddef.h>
#include <stdint.h>

#include "base/fc.h"
#include "masks/mask.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One entry of MASK_PARAMS (see mask.h for what each field means). */
typedef struct mask_param_info {
    const char *name, *opt, *label, *tag, *off_tag, *help;
    int32_t max;   /* the smallest value is 0 (off) */
    size_t offset; /* of the int32 member in mask_params */
} mask_param_info;

extern const mask_param_info mask_param_table[MASK_NPARAMS];

/* Entry i's value in m, and setting it. */
int32_t mask_param_get(const mask_params *m, int i);
void mask_param_set(mask_params *m, int i, int32_t v);
/* 1 iff the term is a flag (0 or 1). */
int mask_param_is_flag(int i);

/* Every term in [0, max], reserved 0; the message names the term and its value. */
fc_status mask_params_check(const mask_params *m, fc_err *err);

/* The text forms the tools print (truncating, always terminated):
 *   MASK_TEXT_LABEL_EQ  "causal=1 W=17 C=0"                           check's case lines
 *   MASK_TEXT_LABEL     "causal 1 W 17 C 0"                           blockmask
 *   MASK_TEXT_NAME      "causal 1, sliding_window 17, chunk_size 0"   repro
 *   MASK_TEXT_ID        "cw17", "bw64", "cc100", "none"               gate case ids
 *   MASK_TEXT_JSON      "causal":1,"sliding_window":17,"chunk_size":0  (members, no braces) */
typedef enum mask_text {
    MASK_TEXT_LABEL_EQ,
    MASK_TEXT_LABEL,
    MASK_TEXT_NAME,
    MASK_TEXT_ID,
    MASK_TEXT_JSON,
} mask_text;
void mask_params_text(char *buf, size_t cap, const mask_params *m, mask_text style);

#ifdef __cplusplus
}
#endif

#endif
