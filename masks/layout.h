/*
 * layout.h - hybrid layer layouts of real models and the config -> mask conversions of
 * docs/semantics.md section 2. The conversion table lives here and only here.
 */
#ifndef FLEXCHECK_LAYOUT_H
#define FLEXCHECK_LAYOUT_H

#include "base/fc.h"
#include "masks/mask.h"

#ifdef __cplusplus
extern "C" {
#endif

#define LAYOUT_MAX_LAYERS 256

typedef struct layout_layer {
    mask_params mask;
    int32_t global; /* 1 for the model's full-attention layers (no window, no chunk) */
} layout_layer;

typedef struct layout_info {
    const char *name;        /* e.g. "modernbert" */
    const char *model;       /* the checkpoint the numbers come from */
    int32_t default_layers;  /* the model's layer count */
} layout_info;

/* The known layouts, NULL-terminated by count. */
const layout_info *layout_list(int *count);

/*
 * Fills layers[0..nlayers) for layout `name`. nlayers <= 0 means the model's own count.
 * scale_div >= 1 divides the *config value* (local_attention, sliding_window,
 * attention_chunk_size) before the conversion, so scaled-down layouts keep the model's formula
 * and pattern (e.g. Gemma 2 4096 / 64 -> 64; ModernBERT 128 / 2 -> 64 -> W = 33).
 */
fc_status layout_get(const char *name, int32_t nlayers, int32_t scale_div, layout_layer *layers,
                     int32_t max_layers, int32_t *out_nlayers, fc_err *err);

/* Config conversions (spec section 2 table). */
int32_t layout_modernbert_window(int32_t local_attention, int legacy); /* la/2+1, legacy la/2 */
int32_t layout_embeddinggemma_window(int32_t stored_sliding_window);   /* sw/2+1 */

#ifdef __cplusplus
}
#endif

#endif
