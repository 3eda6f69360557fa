/* terms.c - the score-term table and what it drives (terms.h). */
#include <math.h>
#include <stdio.h>

#include "masks/terms.h"

const score_term_info score_term_table[TERM_COUNT] = {
    [TERM_SOFTCAP] = {TERM_SOFTCAP_NAME, TERM_SOFTCAP_NAME, "cap", "sc",
                      "logit soft-cap c: scores become c * tanh(s / c) (0 = off)"},
    [TERM_SINKS] = {TERM_SINKS_NAME, TERM_SINKS_NAME, "sinks", "sk",
                    "per-head sink logits: SEED draws them in [-5, 10], FILE reads Hq floats"},
};

int terms_used(const score_terms *t)
{
    return t->softcap != 0 || t->sinks != NULL;
}

double terms_value(const score_terms *t, score_term i)
{
    return i == TERM_SOFTCAP ? t->softcap : (t->sinks != NULL);
}

double terms_sink(const score_terms *t, int32_t h)
{
    return t->sinks ? (double)t->sinks[h] : -INFINITY;
}

fc_status terms_check(const score_terms *t, int32_t hq, fc_err *err)
{
    if (!isfinite(t->softcap) || t->softcap < 0 || t->softcap > TERMS_MAX_SOFTCAP)
        return fc_errf(err, FC_EINVAL, "softcap = %g: must be finite and in [0, %g] (0 = off)",
                       t->softcap, TERMS_MAX_SOFTCAP);
    for (int32_t h = 0; t->sinks && h < hq; h++)
        if (!isfinite(t->sinks[h]) || fabs(t->sinks[h]) > TERMS_MAX_SINK)
            return fc_errf(err, FC_EINVAL, "sinks[%d] = %g: must be finite with |sink| <= %g",
                           (int)h, (double)t->sinks[h], TERMS_MAX_SINK);
    return FC_OK;
}

/* Every style from the values alone: the cap, whether sinks are on, and their range. */
static void format(char *buf, size_t cap, double softcap, int sinks, double lo, double hi,
                   mask_text style)
{
    if (!cap)
        return;
    buf[0] = 0;
    const score_term_info *sc = &score_term_table[TERM_SOFTCAP];
    const score_term_info *sk = &score_term_table[TERM_SINKS];
    char a[64] = "", b[96] = "";
    switch (style) {
    case MASK_TEXT_LABEL_EQ:
    case MASK_TEXT_LABEL: {
        const char *eq = style == MASK_TEXT_LABEL_EQ ? "=" : " ";
        if (softcap)
            snprintf(a, sizeof a, " %s%s%g", sc->label, eq, softcap);
        if (sinks)
            snprintf(b, sizeof b, " %s%son", sk->label, eq);
        break;
    }
    case MASK_TEXT_NAME:
        if (softcap)
            snprintf(a, sizeof a, ", %s %g", sc->name, softcap);
        if (sinks)
            snprintf(b, sizeof b, ", %s [%g, %g]", sk->name, lo, hi);
        break;
    case MASK_TEXT_ID:
        if (softcap)
            snprintf(a, sizeof a, "%s%g", sc->tag, softcap);
        if (sinks)
            snprintf(b, sizeof b, "%s", sk->tag);
        break;
    case MASK_TEXT_JSON: /* none: JSON printouts are of block masks, which terms never change */
        break;
    }
    snprintf(buf, cap, "%s%s", a, b);
}

void terms_text(char *buf, size_t cap, const score_terms *t, int32_t hq, mask_text style)
{
    double lo = INFINITY, hi = -INFINITY;
    for (int32_t h = 0; t->sinks && h < hq; h++) {
        lo = fmin(lo, t->sinks[h]);
        hi = fmax(hi, t->sinks[h]);
    }
    format(buf, cap, t->softcap, t->sinks != NULL, lo, hi, style);
}

void terms_id(char *buf, size_t cap, double softcap, int sinks)
{
    format(buf, cap, softcap, sinks, 0, 0, MASK_TEXT_ID);
}
