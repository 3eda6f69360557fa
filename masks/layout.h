/*
 * layout.h - hybrid layer layouts of real models and the config -> mask and score-term
 * conversions of docs/semantics.md sections 2 and 7. The conversion table lives here and only
 * here.
 */
#ifndef FLEXCHECK_LAYOUT_H
#define FLEXCHECK_LAYOUT_H

#include "base/fc.h"
#include "masks/mask.h"

#ifdef __cplusplus
extern "C" {
#endif

#define LAYOUT_MAX_LAYERS 256

/* What one layer needs beyond the shapes of the case it runs:
 *   mask     its mask terms
 *   global   1 for the model's full-attention layers (no window, no chunk)
 *   softcap  the attention-logit soft-cap c of masks/terms.h (0 off): a model constant, never
 *            scaled with the lengths
 *   scale    the softmax scale the model's formula gives, or 0 for the default 1/sqrt(D) of the
 *            case's own head dim. A nonzero scale does not depend on D (Gemma 2, Gemma 3 and
 *            embeddinggemma: query_pre_attn_scalar^-0.5), so a case run with a smaller head dim
 *            than the model's keeps the model's number; a 0 follows the case's D, as
 *            head_dim^-0.5 does.
 *   sinks    1: learned per-head sinks (gpt-oss). The layout says only that they are on; their
 *            values, like q, k and v, come from the case's seed (fix.h: fix_gen_layer_params). */
typedef struct layout_layer {
    mask_params mask;
    int32_t global;
    int32_t sinks;
    double softcap;
    double scale;
} layout_layer;

typedef struct layout_info {
    const char *name;        /* e.g. "modernbert" */
    const char *model;       /* the checkpoint the numbers come from */
    int32_t default_layers;  /* the model's layer count */
} layout_info;

/* The known layouts, NULL-terminated by count. */
const layout_info *layout_list(int *count);

/*
 * Fills layers[0..nlayers) for layout `name`. nlayers <= 0 means the model's own count, and
 * more than it is refused (the model has no such layers). scale_div >= 1 divides the *config
 * value* (local_attention, sliding_window, attention_chunk_size) before the conversion, so
 * scaled-down layouts keep the model's formula and pattern (e.g. Gemma 2 4096 / 64 -> 64;
 * ModernBERT 128 / 2 -> 64 -> W = 33). It must divide the value exactly, leave at least 2 and,
 * where the conversion halves the value (ModernBERT, embeddinggemma), leave it even; anything
 * else is refused with the divisors that work. The score terms and the scale are not lengths:
 * scale_div leaves them as the model has them.
 */
fc_status layout_get(const char *name, int32_t nlayers, int32_t scale_div, layout_layer *layers,
                     int32_t max_layers, int32_t *out_nlayers, fc_err *err);

/*
 * For a command given both mask options and --layout `name`: FC_EINVAL, naming the option, if a
 * term of `given` is set (nonzero; every term's default is 0, off) and some layer of
 * layers[from..to) has another value, since the layout would replace it. A term the layout
 * sets anyway (--causal with a causal layout) passes.
 */
fc_status layout_check_mask(const char *name, const layout_layer *layers, int32_t from,
                            int32_t to, const mask_params *given, fc_err *err);

/* Config conversions (spec section 2 table; layout.c cites the model code for each). */
int32_t layout_modernbert_window(int32_t local_attention, int legacy); /* la/2+1, legacy la/2 */
int32_t layout_embeddinggemma_window(int32_t stored_sliding_window);   /* sw/2+1 */
int32_t layout_gpt_oss_window(int32_t sliding_window);                 /* sw (W keys) */
double layout_gemma_scale(double query_pre_attn_scalar);  /* qpas^-0.5, Gemma 2 and 3 */

#ifdef __cplusplus
}
#endif

#endif
