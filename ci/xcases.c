/* xcases.c - the M8 group's masks as explicit terms, from a rule and a seed (xcases.h). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ci/xcases.h"
#include "masks/xterms.h"

const char *xcase_rule_name(xcase_rule r)
{
    static const char *const n[] = {"", "prefix_lm", "alibi", "tree", "doc_window",
                                    "gemma3_image"};
    return (unsigned)r < sizeof n / sizeof n[0] ? n[r] : "";
}

/* The terms under construction and the rule's JSON text. */
typedef struct xbuild {
    const fix_gen_params *gp;
    fix_rng rng;
    uint8_t *bits;    /* [bm, 1, lq, row bytes] or NULL */
    int32_t bm;
    float *bias;      /* [1, hq, lq, lk] or NULL */
    char *json;
    size_t cap, len;  /* len > cap: the text did not fit */
} xbuild;

static void say(xbuild *x, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    size_t room = x->len < x->cap ? x->cap - x->len : 0;
    int n = vsnprintf(x->json + (room ? x->len : 0), room, fmt, ap);
    va_end(ap);
    x->len += n > 0 ? (size_t)n : 0;
}

static int32_t below(xbuild *x, int32_t n) /* uniform in [0, n), n >= 1 */
{
    return (int32_t)(fix_rng_u64(&x->rng) % (uint64_t)n);
}

static void set_bit(xbuild *x, int32_t b, int32_t tq, int32_t tk)
{
    uint8_t *row = x->bits + xterm_row(x->bm, 1, x->gp->lq, b, 0, tq) * xmask_row_bytes(x->gp->lk);
    row[tk >> 3] |= (uint8_t)(1u << (tk & 7));
}

static fc_status alloc_bits(xbuild *x, int32_t bm, fc_err *err)
{
    x->bm = bm;
    x->bits = calloc((size_t)bm * (size_t)x->gp->lq * (size_t)xmask_row_bytes(x->gp->lk) + 1, 1);
    return x->bits ? FC_OK : fc_errf(err, FC_ENOMEM, "out of memory for an explicit mask");
}

/* Bidirectional over each entry's prefix, causal after (PaliGemma's prefix-LM; HF builds it as
 * an or_mask over the causal one). Every prefix in [1, L - 1]. */
static fc_status prefix_lm(xbuild *x, fc_err *err)
{
    const fix_gen_params *g = x->gp;
    if (g->lq != g->lk || g->lk < 2)
        return fc_errf(err, FC_EINVAL, "prefix_lm: needs Lq = Lk >= 2, not %d x %d", g->lq, g->lk);
    fc_status st = alloc_bits(x, g->b, err);
    say(x, "{\"rule\": \"prefix_lm\", \"prefix\": [");
    for (int32_t b = 0; !st && b < g->b; b++) {
        int32_t p = 1 + below(x, g->lk - 1);
        say(x, "%s%d", b ? ", " : "", (int)p);
        for (int32_t q = 0; q < g->lq; q++)
            for (int32_t k = 0; k < g->lk; k++)
                if (k < p || k <= q)
                    set_bit(x, b, q, k);
    }
    say(x, "]}");
    return st;
}

/* ALiBi's bias over the causal family. The slopes 2^(-8(h+1)/Hq) are powers of two when Hq
 * divides 8, and then every bias value (a slope times an integer below 2^24) is exact in
 * float32: an engine computing slope * (p_k - p_q) in float32 gets the stored bits. */
static fc_status alibi(xbuild *x, fc_err *err)
{
    const fix_gen_params *g = x->gp;
    if (!g->mask.causal || 8 % g->hq || g->lk >= (1 << 24))
        return fc_errf(err, FC_EINVAL, "alibi: needs the causal family, Hq dividing 8 (not %d) "
                       "and Lk < 2^24", g->hq);
    x->bias = malloc(sizeof(float) * ((size_t)g->hq * (size_t)g->lq * (size_t)g->lk + 1));
    if (!x->bias)
        return fc_errf(err, FC_ENOMEM, "out of memory for the ALiBi bias");
    int32_t off = g->lk - g->lq; /* bottom-right: p_q = tq + Lk - Lq */
    say(x, "{\"rule\": \"alibi\", \"q_offset\": %d, \"slopes\": [", (int)off);
    for (int32_t h = 0; h < g->hq; h++) {
        double slope = exp2(-8.0 * (h + 1) / g->hq);
        say(x, "%s%.17g", h ? ", " : "", slope);
        float *row = x->bias + (size_t)h * (size_t)g->lq * (size_t)g->lk;
        for (int32_t q = 0; q < g->lq; q++)
            for (int32_t k = 0; k < g->lk; k++)
                row[(size_t)q * (size_t)g->lk + (size_t)k] = (float)(-slope * (q + off - k));
    }
    say(x, "]}");
    return FC_OK;
}

/* A draft tree per batch entry: node 0 the root (the last accepted token's successor), every
 * later node's parent an earlier node drawn uniformly, so early nodes get several children as
 * EAGLE's top-k expansion gives them. Query i sees the N context keys and key N + j for every j
 * on its path to the root (itself included): vLLM's tree_attn_bias / SGLang's EAGLE tree mask. */
static fc_status tree(xbuild *x, int32_t n, fc_err *err)
{
    const fix_gen_params *g = x->gp;
    int32_t t = g->lq;
    if (n < 0 || g->lk != n + t || t < 1)
        return fc_errf(err, FC_EINVAL, "tree: needs Lk = N + T, Lq = T >= 1 (N %d, %d x %d)",
                       n, g->lq, g->lk);
    int32_t *parent = malloc(sizeof *parent * (size_t)t);
    fc_status st = parent ? alloc_bits(x, g->b, err)
                          : fc_errf(err, FC_ENOMEM, "out of memory for a draft tree");
    say(x, "{\"rule\": \"tree\", \"context\": %d, \"parents\": [", (int)n);
    for (int32_t b = 0; !st && b < g->b; b++) {
        say(x, "%s[", b ? ", " : "");
        for (int32_t i = 0; i < t; i++) {
            parent[i] = i ? below(x, i) : -1;
            say(x, "%s%d", i ? ", " : "", (int)parent[i]);
            for (int32_t k = 0; k < n; k++)
                set_bit(x, b, i, k);
            for (int32_t j = i; j >= 0; j = parent[j])
                set_bit(x, b, i, n + j);
        }
        say(x, "]");
    }
    say(x, "]}");
    free(parent);
    return st;
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* ndocs documents over one dense row (cut points distinct, so none is empty), each with its own
 * window W in [1, 2 * L / ndocs]: some shorter than their document, some longer. */
static fc_status doc_window(xbuild *x, int32_t ndocs, fc_err *err)
{
    const fix_gen_params *g = x->gp;
    if (g->b != 1 || g->lq != g->lk || ndocs < 1 || ndocs > g->lk || ndocs > FIX_GEN_MAX_SEQ)
        return fc_errf(err, FC_EINVAL, "doc_window: needs B = 1, Lq = Lk and 1 <= docs <= "
                       "min(L, %d) (B %d, %d x %d, %d docs)", FIX_GEN_MAX_SEQ, g->b, g->lq,
                       g->lk, ndocs);
    int32_t cut[FIX_GEN_MAX_SEQ + 1], w[FIX_GEN_MAX_SEQ];
    int32_t l = g->lk, nc = 0;
    while (nc < ndocs - 1) { /* distinct cut points in [1, L - 1] */
        int32_t c = 1 + below(x, l - 1), dup = 0;
        for (int32_t i = 0; i < nc; i++)
            dup |= cut[i] == c;
        if (!dup)
            cut[nc++] = c;
    }
    qsort(cut, (size_t)nc, sizeof cut[0], cmp_i32);
    memmove(cut + 1, cut, sizeof cut[0] * (size_t)nc);
    cut[0] = 0;
    cut[ndocs] = l;
    fc_status st = alloc_bits(x, 1, err);
    say(x, "{\"rule\": \"doc_window\", \"doc_lengths\": [");
    for (int32_t d = 0; d < ndocs; d++)
        say(x, "%s%d", d ? ", " : "", (int)(cut[d + 1] - cut[d]));
    say(x, "], \"windows\": [");
    for (int32_t d = 0; d < ndocs; d++) {
        w[d] = 1 + below(x, 2 * l / ndocs);
        say(x, "%s%d", d ? ", " : "", (int)w[d]);
    }
    say(x, "]}");
    for (int32_t d = 0; !st && d < ndocs; d++)
        for (int32_t q = cut[d]; q < cut[d + 1]; q++)
            for (int32_t k = cut[d]; k <= q; k++)
                if (q - k < w[d])
                    set_bit(x, 0, q, k);
    return st;
}

/* Image spans per batch entry (Gemma 3 4b: 256 tokens an image, here scaled down to 1 to 3
 * windows long), separated by text tokens (Gemma 3 wraps every image in <start_of_image> and
 * <end_of_image>: two images are never adjacent, and HF would merge adjacent ones into one
 * group). The rule, as transformers writes it (src/transformers/models/gemma3/modeling_gemma3.py,
 * create_causal_mask_mapping and token_type_ids_mask_function; masking_utils.py's
 * sliding_window_overlay and or_masks): group ids = cumsum(image starts) - 1 on image tokens,
 * -1 on text; a local layer allows (kv <= q and kv > q - W) OR (group[q] == group[kv] and
 * group[q] >= 0). */
static fc_status gemma3_image(xbuild *x, int32_t w, fc_err *err)
{
    const fix_gen_params *g = x->gp;
    int32_t l = g->lk;
    if (g->lq != l || w < 1 || l < 4 * w)
        return fc_errf(err, FC_EINVAL, "gemma3_image: needs Lq = Lk >= 4 W (W %d, %d x %d)", w,
                       g->lq, g->lk);
    int32_t *grp = malloc(sizeof *grp * (size_t)l);
    fc_status st = grp ? alloc_bits(x, g->b, err)
                       : fc_errf(err, FC_ENOMEM, "out of memory for image groups");
    say(x, "{\"rule\": \"gemma3_image\", \"window\": %d, \"image_spans\": [", (int)w);
    for (int32_t b = 0; !st && b < g->b; b++) {
        say(x, "%s[", b ? ", " : "");
        int32_t pos = 1 + below(x, w), ng = 0;
        for (int32_t i = 0; i < l; i++)
            grp[i] = -1;
        while (pos < l - 1) {
            int32_t len = w + below(x, 2 * w + 1);
            if (pos + len > l - 1) /* a text token after the last image too */
                len = l - 1 - pos;
            say(x, "%s[%d, %d]", ng ? ", " : "", (int)pos, (int)(pos + len));
            for (int32_t i = pos; i < pos + len; i++)
                grp[i] = ng;
            ng++;
            pos += len + 1 + below(x, 2 * w); /* at least one text token between images */
        }
        say(x, "]");
        for (int32_t q = 0; q < l; q++)
            for (int32_t k = 0; k < l; k++)
                if ((k <= q && q - k < w) || (grp[q] >= 0 && grp[q] == grp[k]))
                    set_bit(x, b, q, k);
    }
    say(x, "]}");
    free(grp);
    return st;
}

fc_status xcase_gen_case(const fix_gen_params *gp, const xcase_spec *spec, fix_case *out,
                         fc_err *err)
{
    char json[sizeof out->mask_rule];
    xbuild x = {.gp = gp, .json = json, .cap = sizeof json};
    json[0] = '\0';
    fix_rng_seed(&x.rng, gp->seed ^ 0x3c8a5eull); /* a stream of its own: q, k, v unchanged */
    fc_status st = FC_OK;
    if (gp->nseq)
        st = fc_errf(err, FC_EINVAL, "%s: a packed case (the rules hold dense rows)",
                     xcase_rule_name(spec->rule));
    else if (spec->rule == XR_PREFIX_LM)
        st = prefix_lm(&x, err);
    else if (spec->rule == XR_ALIBI)
        st = alibi(&x, err);
    else if (spec->rule == XR_TREE)
        st = tree(&x, spec->n, err);
    else if (spec->rule == XR_DOC_WINDOW)
        st = doc_window(&x, spec->n, err);
    else if (spec->rule == XR_GEMMA3_IMAGE)
        st = gemma3_image(&x, spec->n, err);
    else
        st = fc_errf(err, FC_EINVAL, "explicit-term rule %d: unknown", (int)spec->rule);
    if (!st && x.len >= x.cap)
        st = fc_errf(err, FC_EINVAL, "%s: the rule's JSON text needs %zu bytes, more than %zu",
                     xcase_rule_name(spec->rule), x.len + 1, x.cap);
    if (!st) {
        fix_gen_params g = *gp;
        g.xmask = (attn_xmask){.bits = x.bits, .bm = x.bm, .hm = 1};
        g.xbias = (attn_xbias){.vals = x.bias, .bm = 1, .hm = gp->hq};
        st = fix_gen_case(&g, out, err);
        if (!st) {
            memcpy(out->mask_rule, json, sizeof json);
            out->xmask_intervals = 1; /* written compactly where every row is one interval */
        }
    }
    free(x.bits);
    free(x.bias);
    return st;
}
