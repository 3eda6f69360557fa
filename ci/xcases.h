/*
 * xcases.h - the M8 group's masks (docs/matrix.md M8): real masks that are no family, built as
 * explicit terms (masks/xterms.h, docs/semantics.md section 8) from a rule and a few seeded
 * parameters, the same bits for the same case every time:
 *
 *   prefix_lm     PaliGemma / Gemma 3's bidirectional prefix: kv < P[b] or kv <= q, one prefix
 *                 per batch entry (Bm = B); families off.
 *   alibi         the causal family plus a bias -slope_h * (p_q - p_k), slope_h = 2^(-8(h+1)/Hq)
 *                 (the ALiBi paper, BLOOM; Hm = Hq); bottom-right positions p_q = tq + Lk - Lq.
 *   tree          a speculative-decoding draft tree (EAGLE / Medusa as vLLM and SGLang build
 *                 it): Lk = N context keys + T draft tokens, Lq = T draft queries; draft query i
 *                 sees every context key, its ancestors and itself (Bm = B, one tree per entry);
 *                 the causal family on, bottom-right (p_q = i + N), which every ancestor keeps.
 *   doc_window    documents over one dense row (B = 1), a window per document: the causal
 *                 family and same doc and p_q - p_k < W_doc.
 *   gemma3_image  a Gemma 3 local layer over text and image tokens: causal sliding window W OR
 *                 both tokens in the same image span (Bm = B); families off.
 *
 * The bits are the truth the oracle reads; the rule and its parameters also travel as a short
 * JSON text (fixture attribute `mask_rule`, docs/fixtures.md), so an outside engine can write
 * its own mask_mod / score_mod for the rule and be judged against the bits.
 */
#ifndef FLEXCHECK_CI_XCASES_H
#define FLEXCHECK_CI_XCASES_H

#include <stdint.h>

#include "base/fc.h"
#include "fixtures/fix.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum xcase_rule {
    XR_NONE = 0,
    XR_PREFIX_LM,
    XR_ALIBI,
    XR_TREE,
    XR_DOC_WINDOW,
    XR_GEMMA3_IMAGE,
} xcase_rule;

/* A rule and its size parameter; the rest is drawn from the case's seed. */
typedef struct xcase_spec {
    xcase_rule rule;
    int32_t n; /* tree: context keys N (Lq = T, Lk = N + T); gemma3_image: window W; doc_window:
                * documents; otherwise unused */
} xcase_spec;

/* The rule's name in ids and in the JSON ("prefix_lm", ...); "" for XR_NONE. */
const char *xcase_rule_name(xcase_rule r);

/* fix_gen_case for gp with spec x's explicit terms (drawn from gp->seed; gp's own xmask / xbias
 * are ignored) and out->mask_rule set to the rule's JSON. FC_EINVAL when x does not fit gp's
 * shapes (a tree whose N is not Lk - Lq, doc_window with B != 1, a packed gp). */
fc_status xcase_gen_case(const fix_gen_params *gp, const xcase_spec *x, fix_case *out,
                         fc_err *err);

#ifdef __cplusplus
}
#endif

#endif
