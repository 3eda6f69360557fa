/*
 * layout.c - model layer layouts and config conversions (docs/semantics.md section 2).
 *
 * Choices where the spec is silent, following Hugging Face configs and vLLM:
 * - Gemma 2: layer i slides iff i is even (HF `layer_types`: "sliding_attention" on even
 *   layers in Gemma2Config); full layers are causal without a window. 26 layers (gemma-2-2b).
 * - Gemma 3: full iff (i + 1) % 6 == 0 (sliding_window_pattern 6); 26 layers and window 512 for
 *   gemma-3-1b (the default), 18 layers for 270m, 34 layers and window 1024 for 4b.
 * - Llama 4: layers 3, 7, 11, ... ((i + 1) % 4 == 0) are the full (NoPE) layers, causal with no
 *   chunk; the rest causal + chunk C. 48 layers (Scout).
 * - Mistral 7B v0.1: 32 layers, causal + W on every layer.
 * - ModernBERT gte-reranker-modernbert-base: 22 layers, global iff i % 3 == 0, bidirectional.
 * - embeddinggemma-300m: 24 layers, full iff (i + 1) % 6 == 0, bidirectional.
 */
#include <string.h>

#include "masks/layout.h"

int32_t layout_modernbert_window(int32_t local_attention, int legacy)
{
    /* HF: a key is visible iff |d| <= local_attention / 2, i.e. W = la/2 + 1. Older vLLM
     * used |d| < la/2, i.e. W = la/2. */
    return legacy ? local_attention / 2 : local_attention / 2 + 1;
}

int32_t layout_embeddinggemma_window(int32_t stored_sliding_window)
{
    /* Bidirectional, |d| <= sw/2 as in HF's bidirectional sliding mask. */
    return stored_sliding_window / 2 + 1;
}

typedef enum family {
    FAM_MODERNBERT,
    FAM_MODERNBERT_LEGACY,
    FAM_EMBEDDINGGEMMA,
    FAM_GEMMA2,
    FAM_GEMMA3,
    FAM_LLAMA4,
    FAM_MISTRAL,
} family;

typedef struct layout_def {
    layout_info info;
    family fam;
    int32_t config_value; /* local_attention, sliding_window or attention_chunk_size */
} layout_def;

static const layout_def defs[] = {
    {{"modernbert", "Alibaba-NLP/gte-reranker-modernbert-base (local_attention 128)", 22},
     FAM_MODERNBERT, 128},
    {{"modernbert-legacy", "the same, older vLLM window (|d| < 64)", 22},
     FAM_MODERNBERT_LEGACY, 128},
    {{"embeddinggemma", "google/embeddinggemma-300m (sliding_window 512)", 24},
     FAM_EMBEDDINGGEMMA, 512},
    {{"gemma2", "google/gemma-2-2b (sliding_window 4096)", 26}, FAM_GEMMA2, 4096},
    {{"gemma3", "google/gemma-3-1b-it (sliding_window 512)", 26}, FAM_GEMMA3, 512},
    {{"gemma3-270m", "google/gemma-3-270m (sliding_window 512)", 18}, FAM_GEMMA3, 512},
    {{"gemma3-4b", "google/gemma-3-4b-it (sliding_window 1024)", 34}, FAM_GEMMA3, 1024},
    {{"llama4", "meta-llama/Llama-4-Scout-17B-16E (attention_chunk_size 8192)", 48},
     FAM_LLAMA4, 8192},
    {{"mistral", "mistralai/Mistral-7B-v0.1 (sliding_window 4096)", 32}, FAM_MISTRAL, 4096},
};
#define NDEFS ((int)(sizeof defs / sizeof defs[0]))

const layout_info *layout_list(int *count)
{
    static layout_info infos[NDEFS];
    for (int i = 0; i < NDEFS; i++)
        infos[i] = defs[i].info;
    *count = NDEFS;
    return infos;
}

/* Layer i of family fam with config value cv (already scaled). */
static layout_layer layer_of(family fam, int32_t cv, int32_t i)
{
    layout_layer l;
    memset(&l, 0, sizeof l);
    switch (fam) {
    case FAM_MODERNBERT:
    case FAM_MODERNBERT_LEGACY:
        l.global = i % 3 == 0;
        l.mask.sliding_window = l.global ? 0 : layout_modernbert_window(cv, fam == FAM_MODERNBERT_LEGACY);
        break;
    case FAM_EMBEDDINGGEMMA:
        l.global = (i + 1) % 6 == 0;
        l.mask.sliding_window = l.global ? 0 : layout_embeddinggemma_window(cv);
        break;
    case FAM_GEMMA2:
        l.global = i % 2 == 1;
        l.mask.causal = 1;
        l.mask.sliding_window = l.global ? 0 : cv;
        break;
    case FAM_GEMMA3:
        l.global = (i + 1) % 6 == 0;
        l.mask.causal = 1;
        l.mask.sliding_window = l.global ? 0 : cv;
        break;
    case FAM_LLAMA4:
        l.global = (i + 1) % 4 == 0;
        l.mask.causal = 1;
        l.mask.chunk_size = l.global ? 0 : cv;
        break;
    case FAM_MISTRAL:
        l.mask.causal = 1;
        l.mask.sliding_window = cv;
        break;
    }
    return l;
}

fc_status layout_get(const char *name, int32_t nlayers, int32_t scale_div, layout_layer *layers,
                     int32_t max_layers, int32_t *out_nlayers, fc_err *err)
{
    const layout_def *d = NULL;
    for (int i = 0; i < NDEFS; i++)
        if (name && !strcmp(name, defs[i].info.name))
            d = &defs[i];
    if (!d)
        return fc_errf(err, FC_EINVAL, "unknown layout '%s' (flexcheck layout --list names them)",
                       name ? name : "(null)");
    if (nlayers <= 0)
        nlayers = d->info.default_layers;
    if (nlayers > max_layers || nlayers > LAYOUT_MAX_LAYERS)
        return fc_errf(err, FC_EINVAL, "layers = %d: at most %d", (int)nlayers,
                       (int)(max_layers < LAYOUT_MAX_LAYERS ? max_layers : LAYOUT_MAX_LAYERS));
    if (scale_div < 1 || scale_div > d->config_value / 2)
        return fc_errf(err, FC_EINVAL, "scale divisor %d for layout %s: must be in [1, %d]",
                       (int)scale_div, d->info.name, (int)(d->config_value / 2));
    int32_t cv = d->config_value / scale_div;
    for (int32_t i = 0; i < nlayers; i++)
        layers[i] = layer_of(d->fam, cv, i);
    *out_nlayers = nlayers;
    return FC_OK;
}
