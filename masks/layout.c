/*
 * layout.c - model layer layouts and config conversions (docs/semantics.md sections 2 and 7).
 *
 * Choices where the spec is silent, following Hugging Face configs and vLLM:
 * - Gemma 2: layer i slides iff i is even; full layers are causal without a window; every
 *   layer soft-caps at attn_logit_softcapping and scales by query_pre_attn_scalar^-0.5 (below).
 *   26 layers (gemma-2-2b), 42 (9b), 46 (27b).
 * - Gemma 3: full iff (i + 1) % 6 == 0 (sliding_window_pattern 6); 26 layers and window 512 for
 *   gemma-3-1b (the default), 18 layers for 270m, 34 layers and window 1024 for 4b; every layer
 *   scales by query_pre_attn_scalar^-0.5 (below).
 * - gpt-oss: layer i slides iff i is even, causal, learned sinks on every layer, the default
 *   scale, no soft-cap (below). 24 layers (20b), 36 (120b).
 * - Llama 4: layers 3, 7, 11, ... ((i + 1) % 4 == 0) are the full (NoPE) layers, causal with no
 *   chunk; the rest causal + chunk C. 48 layers (Scout).
 * - Mistral 7B v0.1: 32 layers, causal + W on every layer.
 * - ModernBERT gte-reranker-modernbert-base: 22 layers, global iff i % 3 == 0, bidirectional.
 * - embeddinggemma-300m: 24 layers, full iff (i + 1) % 6 == 0, bidirectional, Gemma 3's scale.
 *
 * Gemma 2, from Hugging Face transformers src/transformers/models/gemma2/:
 * - configuration_gemma2.py (Gemma2Config): attn_logit_softcapping defaults to 50.0 and
 *   final_logit_softcapping to 30.0 (that one caps the LM head's logits, not attention: not
 *   here); query_pre_attn_scalar defaults to 256, head_dim to 256, sliding_window to 4096,
 *   num_hidden_layers to 26 (the 2b shape); layer_types, when absent, is "sliding_attention"
 *   for even i and "full_attention" for odd i.
 * - modeling_gemma2.py: Gemma2Attention sets scaling = query_pre_attn_scalar**-0.5 (not
 *   head_dim**-0.5) and softcap = attn_logit_softcapping on every layer; the eager path
 *   multiplies q.k by scaling, then divides by the cap, takes tanh and multiplies by the cap,
 *   before it adds the mask: exactly masks/terms.h's c * tanh(s / c) with c the config value.
 *   Older versions of the file said the same with is_sliding = not bool(layer_idx % 2) and a
 *   sliding mask torch.tril(..., diagonal=-sliding_window), which masks p_k <= p_q - W: causal
 *   + W keys, so W = sliding_window as stored.
 * - The per-checkpoint values: query_pre_attn_scalar is 256 for 2b and 9b (= head_dim) and 144
 *   for 27b (hidden_size / num_attention_heads, with head_dim 128), as in google/gemma_pytorch
 *   gemma/config.py (get_config_for_27b; 9b leaves it unset, which that file defines as
 *   head_dim). The HF conversion script convert_gemma2_weights_to_hf.py still says 224 for 9b;
 *   huggingface/transformers issue #31891 reports that as a mistake the hub config corrected to
 *   256. The checkpoints' own config.json files are not in the material this was written from:
 *   2b uses the config class defaults, 9b and 27b gemma_pytorch's values. All three cap at 50.
 *
 * Gemma 3 and embeddinggemma, from Hugging Face transformers src/transformers/models/gemma3/:
 * - modeling_gemma3.py: Gemma3Attention sets scaling = query_pre_attn_scalar**-0.5 (not
 *   head_dim**-0.5) and hands it to the attention function on every layer, sliding or full;
 *   embeddinggemma is the same Gemma3TextModel with use_bidirectional_attention, so the same
 *   attention class and scale. attn_logit_softcapping is None for all of them: no soft-cap.
 * - The per-checkpoint values: convert_gemma3_weights.py's _VARIANTS give
 *   query_pre_attn_scalar=256 and head_dim=256 for "embedding" (embeddinggemma-300m),
 *   gemma3_270m, gemma3_1b and gemma3_4b, and the gemma-3-1b-it config.json says the same
 *   (query_pre_attn_scalar 256, head_dim 256). The scale equals 1/sqrt(head_dim) of the real
 *   model, but not 1/sqrt(D) of a test case with a smaller head dim, so the layout states it
 *   (gemma3_27b, not a layout here, is where they part: head_dim 128, query_pre_attn_scalar 168).
 *
 * gpt-oss, from Hugging Face transformers src/transformers/models/gpt_oss/ and OpenAI's
 * reference openai/gpt-oss gpt_oss/torch/model.py:
 * - configuration_gpt_oss.py (GptOssConfig): sliding_window 128, head_dim 64,
 *   num_hidden_layers 36 (the 120b shape); layer_types, when absent, "sliding_attention" for
 *   even i and "full_attention" for odd i. The gpt-oss-20b config.json (as mirrored in
 *   EchoCog/gpt-oss-20b) has 24 layers and spells the same alternation out, sliding first.
 * - modeling_gpt_oss.py: GptOssAttention sets scaling = head_dim**-0.5 (the default: scale 0
 *   here), has no soft-cap, and holds sinks = Parameter(num_attention_heads): one logit per
 *   query head, concatenated to the scaled, masked scores before the softmax and dropped after
 *   it (masks/terms.h's sinks), on every layer; only sliding layers get the window.
 * - The window: HF's sliding layers use masking_utils.py create_sliding_window_causal_mask with
 *   config.sliding_window unchanged, whose sliding_window_overlay allows kv_idx > q_idx -
 *   sliding_window; OpenAI's reference sdpa() adds -inf on torch.tril(..., diagonal=
 *   -sliding_window), i.e. masks p_k <= p_q - W, and slides iff layer_idx % 2 == 0. Both: the
 *   key at distance exactly 128 is out, distance 127 in, so causal + W = 128 keys, W =
 *   sliding_window as stored (docs/semantics.md: p_q - p_k < W).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "masks/layout.h"
#include "masks/params.h"

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

int32_t layout_gpt_oss_window(int32_t sliding_window)
{
    /* Causal, p_q - p_k < sliding_window in both HF and OpenAI's reference (above): the stored
     * value is already the number of keys a query sees. */
    return sliding_window;
}

double layout_gemma_scale(double query_pre_attn_scalar)
{
    /* modeling_gemma2.py and modeling_gemma3.py: scaling = query_pre_attn_scalar**-0.5,
     * whatever head_dim is. */
    return 1.0 / sqrt(query_pre_attn_scalar);
}

typedef enum family {
    FAM_MODERNBERT,
    FAM_MODERNBERT_LEGACY,
    FAM_EMBEDDINGGEMMA,
    FAM_GEMMA2,
    FAM_GEMMA3,
    FAM_GPT_OSS,
    FAM_LLAMA4,
    FAM_MISTRAL,
} family;

typedef struct layout_def {
    layout_info info;
    family fam;
    int32_t config_value; /* local_attention, sliding_window or attention_chunk_size */
    double attn_logit_softcapping; /* Gemma 2's (0 for the other families) */
    double query_pre_attn_scalar;  /* the Gemma families' (0: the default 1/sqrt(D)) */
} layout_def;

/* Designated fields: a row names what it sets, the rest is zero. */
static const layout_def defs[] = {
    {.info = {"modernbert", "Alibaba-NLP/gte-reranker-modernbert-base (local_attention 128)", 22},
     .fam = FAM_MODERNBERT, .config_value = 128},
    {.info = {"modernbert-legacy", "the same, older vLLM window (|d| < 64)", 22},
     .fam = FAM_MODERNBERT_LEGACY, .config_value = 128},
    {.info = {"embeddinggemma", "google/embeddinggemma-300m (sliding_window 512, "
              "query_pre_attn_scalar 256)", 24},
     .fam = FAM_EMBEDDINGGEMMA, .config_value = 512, .query_pre_attn_scalar = 256.0},
    {.info = {"gemma2", "google/gemma-2-2b (sliding_window 4096, softcap 50, "
              "query_pre_attn_scalar 256)", 26},
     .fam = FAM_GEMMA2, .config_value = 4096, .attn_logit_softcapping = 50.0,
     .query_pre_attn_scalar = 256.0},
    {.info = {"gemma2-9b", "google/gemma-2-9b (sliding_window 4096, softcap 50, "
              "query_pre_attn_scalar 256)", 42},
     .fam = FAM_GEMMA2, .config_value = 4096, .attn_logit_softcapping = 50.0,
     .query_pre_attn_scalar = 256.0},
    {.info = {"gemma2-27b", "google/gemma-2-27b (sliding_window 4096, softcap 50, "
              "query_pre_attn_scalar 144)", 46},
     .fam = FAM_GEMMA2, .config_value = 4096, .attn_logit_softcapping = 50.0,
     .query_pre_attn_scalar = 144.0},
    {.info = {"gemma3", "google/gemma-3-1b-it (sliding_window 512, query_pre_attn_scalar 256)",
              26},
     .fam = FAM_GEMMA3, .config_value = 512, .query_pre_attn_scalar = 256.0},
    {.info = {"gemma3-270m", "google/gemma-3-270m (sliding_window 512, "
              "query_pre_attn_scalar 256)", 18},
     .fam = FAM_GEMMA3, .config_value = 512, .query_pre_attn_scalar = 256.0},
    {.info = {"gemma3-4b", "google/gemma-3-4b-it (sliding_window 1024, "
              "query_pre_attn_scalar 256)", 34},
     .fam = FAM_GEMMA3, .config_value = 1024, .query_pre_attn_scalar = 256.0},
    {.info = {"llama4", "meta-llama/Llama-4-Scout-17B-16E (attention_chunk_size 8192)", 48},
     .fam = FAM_LLAMA4, .config_value = 8192},
    {.info = {"mistral", "mistralai/Mistral-7B-v0.1 (sliding_window 4096)", 32},
     .fam = FAM_MISTRAL, .config_value = 4096},
    {.info = {"gpt-oss-20b", "openai/gpt-oss-20b (sliding_window 128, sinks)", 24},
     .fam = FAM_GPT_OSS, .config_value = 128},
    {.info = {"gpt-oss-120b", "openai/gpt-oss-120b (sliding_window 128, sinks)", 36},
     .fam = FAM_GPT_OSS, .config_value = 128},
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

/* Layer i of layout d with config value cv (already scaled). */
static layout_layer layer_of(const layout_def *d, int32_t cv, int32_t i)
{
    family fam = d->fam;
    layout_layer l;
    memset(&l, 0, sizeof l);
    switch (fam) {
    case FAM_MODERNBERT:
    case FAM_MODERNBERT_LEGACY:
        l.global = i % 3 == 0;
        l.mask.sliding_window =
            l.global ? 0 : layout_modernbert_window(cv, fam == FAM_MODERNBERT_LEGACY);
        break;
    case FAM_EMBEDDINGGEMMA:
        l.global = (i + 1) % 6 == 0;
        l.mask.sliding_window = l.global ? 0 : layout_embeddinggemma_window(cv);
        l.scale = layout_gemma_scale(d->query_pre_attn_scalar);
        break;
    case FAM_GEMMA2:
        l.global = i % 2 == 1;
        l.mask.causal = 1;
        l.mask.sliding_window = l.global ? 0 : cv;
        l.softcap = d->attn_logit_softcapping;
        l.scale = layout_gemma_scale(d->query_pre_attn_scalar);
        break;
    case FAM_GEMMA3:
        l.global = (i + 1) % 6 == 0;
        l.mask.causal = 1;
        l.mask.sliding_window = l.global ? 0 : cv;
        l.scale = layout_gemma_scale(d->query_pre_attn_scalar);
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
    case FAM_GPT_OSS:
        l.global = i % 2 == 1;
        l.mask.causal = 1;
        l.mask.sliding_window = l.global ? 0 : layout_gpt_oss_window(cv);
        l.sinks = 1;
        break;
    }
    return l;
}

/* The config field a family's config_value is, and whether its conversion halves it (the
 * window is half of it + 1, or half in the legacy reading): then a divided value must stay
 * even, or the halving would drop a position the formula keeps. */
static const char *config_field(family fam)
{
    switch (fam) {
    case FAM_MODERNBERT:
    case FAM_MODERNBERT_LEGACY:
        return "local_attention";
    case FAM_LLAMA4:
        return "attention_chunk_size";
    default:
        return "sliding_window";
    }
}

static int halves(family fam)
{
    return fam == FAM_MODERNBERT || fam == FAM_MODERNBERT_LEGACY || fam == FAM_EMBEDDINGGEMMA;
}

/* Whether dividing d's config value by div keeps the model's formula exactly: a whole result
 * of at least 2 (a window or chunk of one position says nothing of the pattern), even where the
 * conversion halves it. Today's halving configs are powers of two (ModernBERT 128,
 * embeddinggemma 512), so an exact divisor leaving 2 or more is always even and the evenness
 * test cannot fail; it guards a layout added later with another value. */
static int divisor_works(const layout_def *d, int32_t div)
{
    if (div < 1 || d->config_value % div != 0)
        return 0;
    int32_t cv = d->config_value / div;
    return cv >= 2 && (!halves(d->fam) || cv % 2 == 0);
}

static fc_status bad_divisor(const layout_def *d, int32_t div, fc_err *err)
{
    char why[128], ok[256];
    const char *field = config_field(d->fam);
    if (div >= 1 && d->config_value % div == 0)
        snprintf(why, sizeof why, "%s %d / %d = %d %s", field, (int)d->config_value, (int)div,
                 (int)(d->config_value / div),
                 d->config_value / div < 2 ? "is below 2"
                                           : "is odd (the window is half of it)");
    else
        snprintf(why, sizeof why, "%s %d is not a multiple of %d", field, (int)d->config_value,
                 (int)div);
    size_t len = 0;
    ok[0] = '\0';
    for (int32_t k = 1; k <= d->config_value && len < sizeof ok; k++)
        if (divisor_works(d, k))
            len += (size_t)snprintf(ok + len, sizeof ok - len, "%s%d", len ? ", " : "", (int)k);
    return fc_errf(err, FC_EINVAL, "--scale-div %d: layout %s's %s (divisors that work: %s)",
                   (int)div, d->info.name, why, ok);
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
    /* A layer past the model's last would be one the model does not have, its kind made up
     * by extending the pattern. */
    if (nlayers > d->info.default_layers)
        return fc_errf(err, FC_EINVAL, "--layers %d: layout %s has layers 0..%d", (int)nlayers,
                       d->info.name, (int)d->info.default_layers - 1);
    if (nlayers > max_layers || nlayers > LAYOUT_MAX_LAYERS)
        return fc_errf(err, FC_EINVAL, "layers = %d: at most %d", (int)nlayers,
                       (int)(max_layers < LAYOUT_MAX_LAYERS ? max_layers : LAYOUT_MAX_LAYERS));
    if (!divisor_works(d, scale_div))
        return bad_divisor(d, scale_div, err);
    int32_t cv = d->config_value / scale_div;
    for (int32_t i = 0; i < nlayers; i++)
        layers[i] = layer_of(d, cv, i);
    *out_nlayers = nlayers;
    return FC_OK;
}

fc_status layout_check_mask(const char *name, const layout_layer *layers, int32_t from,
                            int32_t to, const mask_params *given, fc_err *err)
{
    for (int i = 0; i < MASK_NPARAMS; i++) {
        int32_t v = mask_param_get(given, i);
        if (v == 0)
            continue;
        for (int32_t l = from; l < to; l++) {
            int32_t lv = mask_param_get(&layers[l].mask, i);
            if (lv == v)
                continue;
            const mask_param_info *t = &mask_param_table[i];
            char given_text[32] = "";
            if (!mask_param_is_flag(i))
                snprintf(given_text, sizeof given_text, " %d", (int)v);
            return fc_errf(err, FC_EINVAL,
                           "--%s%s with --layout %s: the layout sets the mask (layer %d has %s "
                           "%d); drop --%s",
                           t->opt, given_text, name, (int)l, t->opt, (int)lv, t->opt);
        }
    }
    return FC_OK;
}
