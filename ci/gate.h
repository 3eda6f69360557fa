/*
 * gate.h - the gate: the test matrix of docs/matrix.md (M1-M8) and the runner that judges each
 * case on each backend under docs/tolerance.md.
 *
 * A case has a stable id that spells its parameters (so a failure can be rerun alone with
 * `flexcheck gate --filter ID`) and the check it runs (ci/checks.h). The matrix is a seeded
 * pairwise design over the M1 factors plus the listed edge cases and the M2-M8 groups; the same
 * size and seed always give the same cases in the same order.
 */
#ifndef FLEXCHECK_GATE_H
#define FLEXCHECK_GATE_H

#include <stdint.h>

#include "masks/bmask.h"
#include "base/fc.h"
#include "ci/xcases.h"
#include "fixtures/fix.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum gate_size { GATE_QUICK = 0, GATE_DEFAULT = 1, GATE_FULL = 2 } gate_size;

typedef enum gate_input {
    GI_NORMAL = 0,   /* standard normal */
    GI_UNIFORM,      /* uniform [-1, 1] */
    GI_NEG_LOGITS,   /* valid scores around -1e5: q and k share a large common offset */
    GI_PEAKED,       /* Q scaled by 12: near one-hot softmax */
    GI_OUTLIERS,     /* 0.1% of entries times 10 */
    GI_FP16_LIMIT,   /* V near the fp16 range limit */
    GI_BEYOND_CAP,   /* scores shifted 2 soft-caps down (even rows) or up (odd rows) */
    GI_FAR_LOGITS,   /* scores around -1e9, past what float32 resolves (its ulp there is 64):
                      * no baseline holds a row, outside the contract */
    GI_NINPUTS
} gate_input;

const char *gate_input_name(gate_input in);
const char *gate_size_name(gate_size s);

#define GATE_ID_MAX 128

typedef struct gate_case {
    char id[GATE_ID_MAX];
    char group[4];      /* "M1" ... "M8" */
    const struct gate_check *check; /* what is checked (ci/checks.h) */
    fix_gen_params gp;  /* shapes, dtype, mask, block sizes, packing, seed (name unused) */
    int all_dtypes;     /* run in float32, float16 and bfloat16 (gp.dtype ignored): one row
                         * per dtype under the same id, so reports can pair them */
    bmask_builder builder;
    gate_input input;
    char layout[32];    /* the layout check: layout name */
    int32_t nlayers, scale_div;
    xcase_spec xc;      /* M8: the explicit terms' rule (ci/xcases.h); XR_NONE: none */
} gate_case;

/* The matrix for `size` and `seed` (cases are malloc'ed; free with free()). *dropped_pairs (may
 * be NULL) = M1 factor pairs no case within the size's work budget can hold. */
fc_status gate_matrix(gate_size size, uint64_t seed, gate_case **cases, int *ncases,
                      int *dropped_pairs, fc_err *err);

/* Keeps, in order, the cases whose id matches `filter` (NULL: all; a substring, or a glob when
 * it holds * ? [; a filter without those that is a whole case id, or a report row's id
 * "ID@...", selects that case alone, so rerunning one case never drags in ids it prefixes)
 * and that fall in shard
 * `shard_i` of `shard_n` (1-based; by position among the filtered cases, so the shards of one
 * filter partition it exactly). Returns the new count; the array is compacted in place. */
int gate_select(gate_case *cases, int n, const char *filter, int shard_i, int shard_n);

/* 1 iff case id matches pattern: shell glob (fnmatch) or, without glob characters, substring. */
int gate_id_matches(const char *id, const char *pattern);

#ifdef __cplusplus
}
#endif

#endif
