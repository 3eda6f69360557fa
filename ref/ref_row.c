/*
 * ref_row.c - ref_row_f64 (ref.h): the float64 oracle for one row and any key set. Written
 * as the definition reads, one key at a time, because its callers (diag/) ask about a handful
 * of rows under key sets that change from row to row, where the panel machinery of ref.c
 * (one mask for every head, gemms over a hull) buys nothing. And ref_row_online_f64: the same
 * row the way a kernel's online softmax forms it, tile by tile, to model its bugs.
 */
#include <math.h>
#include <string.h>

#include "base/lowp.h"
#include "ref/ref.h"

ref_row_rule ref_row_rule_of(const attn_problem *p, int32_t h)
{
    ref_row_rule r = {.scale = p->scale, .round_scores = FC_F32, .softcap = p->terms.softcap,
                      .sink = terms_sink(&p->terms, h), .sink_count = 1.0, .masked_score = 0.0,
                      .sink_value = 0.0, .softmax_dt = FC_F32, .softmax_how = 0, .bias = NULL,
                      .bias_mul = 1.0, .bias_before_cap = 0, .fill_biased = 0};
    return r;
}

ref_row_rule ref_row_rule_at(const attn_problem *p, int32_t b, int32_t h, int32_t tq)
{
    ref_row_rule r = ref_row_rule_of(p, h);
    if (p->xbias.vals) {
        r.bias = xbias_row(p->xbias, b, h, tq);
        r.bias_mul = 1.0;
    }
    return r;
}

int ref_row_key_allows(void *ctx, int32_t tk)
{
    const ref_row_key *k = ctx;
    const attn_problem *p = k->p;
    return mask_pair_allowed_x(p->mask, seq_info_view(&p->seq), p->xmask, k->b, k->h, k->tq, tk);
}

/* The type the rule rounds every scaled score to (ref.h: round_scores, or a softmax in the
 * input type's REF_LOWP_SCORES way), FC_F32 for none. */
static fc_dtype scores_type(const ref_row_rule *r)
{
    if (r->round_scores != FC_F32)
        return r->round_scores;
    return r->softmax_dt != FC_F32 && (r->softmax_how & REF_LOWP_SCORES) ? r->softmax_dt : FC_F32;
}

/* Key j's score under the rule; kind is the predicate's answer for it (1 or 2). The bias,
 * after the soft-cap (docs/semantics.md section 8), is a kept key's: a filled key's score is
 * what the fill says (plus its bias only under an alternative's fill_biased). */
static double score(const float *q, const float *k, int32_t d, const ref_row_rule *r, int kind,
                    int32_t j)
{
    double bias = r->bias ? r->bias_mul * (double)r->bias[j] : 0.0;
    if (kind == 2)
        return r->bias && r->fill_biased ? r->masked_score + bias : r->masked_score;
    double acc = 0.0;
    for (int32_t x = 0; x < d; x++)
        acc += (double)q[x] * (double)k[x];
    double s = r->scale * acc; /* scaled after the sum, as dgemm's alpha does in ref_f64.c */
    if (scores_type(r) != FC_F32)
        s = (double)fc_round((float)s, scores_type(r));
    if (r->bias && r->bias_before_cap)
        s += bias;
    if (r->softcap > 0)
        s = r->softcap * tanh(s / r->softcap);
    return r->bias && !r->bias_before_cap ? s + bias : s;
}

/* The arguments both row functions take, checked. */
static fc_status row_args_check(const float *q, const float *k, const float *v, int32_t lk,
                                int32_t d, int32_t dv, const ref_row_rule *rule,
                                ref_key_fn allowed, double *o, fc_err *err)
{
    if (d < 1 || dv < 1 || lk < 0)
        return fc_errf(err, FC_EINVAL, "reference row: D = %d, Dv = %d, Lk = %d", (int)d,
                       (int)dv, (int)lk);
    if (!rule || !allowed || !q || !o || (lk > 0 && (!k || !v)))
        return fc_errf(err, FC_EINVAL, "reference row: NULL rule, predicate or array");
    if (!isfinite(rule->scale) || !(rule->scale > 0))
        return fc_errf(err, FC_EINVAL, "reference row: scale = %g: must be finite and > 0",
                       rule->scale);
    if (!isfinite(rule->softcap) || rule->softcap < 0)
        return fc_errf(err, FC_EINVAL, "reference row: softcap = %g: must be finite and >= 0",
                       rule->softcap);
    if (isnan(rule->sink) || rule->sink == INFINITY || !(rule->sink_count >= 0))
        return fc_errf(err, FC_EINVAL, "reference row: sink = %g counted %g times", rule->sink,
                       rule->sink_count);
    if (!isfinite(rule->masked_score) || !isfinite(rule->sink_value))
        return fc_errf(err, FC_EINVAL, "reference row: masked_score = %g, sink_value = %g",
                       rule->masked_score, rule->sink_value);
    if (rule->bias && !isfinite(rule->bias_mul))
        return fc_errf(err, FC_EINVAL, "reference row: bias_mul = %g: must be finite",
                       rule->bias_mul);
    if ((unsigned)rule->softmax_dt > FC_BF16 || rule->softmax_how >= REF_LOWP_WAYS)
        return fc_errf(err, FC_EINVAL, "reference row: softmax_dt = %d, softmax_how = %u",
                       (int)rule->softmax_dt, rule->softmax_how);
    return FC_OK;
}

/* One row's inputs, as both row functions read them. */
typedef struct row_in {
    const float *q, *k, *v;
    int32_t d, dv;
    const ref_row_rule *rule;
    ref_key_fn allowed;
    void *ctx;
} row_in;

/* The largest score of the allowed keys in [j0, j1) (-inf if none); *any: whether any is
 * allowed. A NaN score is skipped here and poisons the sums of add_keys, as in ref_f64.c. */
static double max_score(const row_in *r, int32_t j0, int32_t j1, int *any)
{
    double mx = -INFINITY;
    *any = 0;
    for (int32_t j = j0; j < j1; j++) {
        int kind = r->allowed(r->ctx, j);
        if (!kind)
            continue;
        double s = score(r->q, r->k + (size_t)j * (size_t)r->d, r->d, r->rule, kind, j);
        if (s > mx)
            mx = s;
        /* A score rounded to the input type that overflowed to -inf weighs nothing, as a
         * kernel's -inf mask fill does: a row whose every such score is -inf has no key (a
         * float16 kernel at scores of -1e5 returns 0 and LSE -inf). The truth's scores are not
         * rounded, and a NaN still counts (it poisons the sums). */
        *any |= !(s == -INFINITY && scores_type(r->rule) != FC_F32);
    }
    return mx;
}

/* Adds e^(score - shift) v_j of every allowed key j in [j0, j1) to o[Dv] and each weight to
 * *sum, one at a time: the same scores as max_score's, so the same bits. */
static void add_keys(const row_in *r, int32_t j0, int32_t j1, double shift, double *sum,
                     double *o)
{
    size_t udv = (size_t)r->dv;
    for (int32_t j = j0; j < j1; j++) {
        int kind = r->allowed(r->ctx, j);
        if (!kind)
            continue;
        const float *kj = r->k + (size_t)j * (size_t)r->d;
        double e = exp(score(r->q, kj, r->d, r->rule, kind, j) - shift);
        *sum += e;
        const float *vj = r->v + (size_t)j * udv;
        for (size_t x = 0; x < udv; x++)
            o[x] += e * (double)vj[x];
    }
}

/* Pass 2 of a softmax in the input type (rule->softmax_dt and softmax_how, ref.h): the rounded
 * weights, their rounded sum, then P.V normalised weight by weight or divided once at the end. */
static void add_keys_lowp(const row_in *r, int32_t lk, double mx, double *lse, double *o)
{
    const ref_row_rule *ru = r->rule;
    fc_dtype dt = ru->softmax_dt;
    unsigned how = ru->softmax_how;
    int seq = (how & REF_LOWP_SEQ_SUM) != 0, unnorm = (how & REF_LOWP_UNNORMALISED) != 0;
    size_t udv = (size_t)r->dv;
    int sink = ru->sink_count > 0 && ru->sink > -INFINITY;
    double es = sink ? fc_round((float)(ru->sink_count * exp(ru->sink - mx)), dt) : 0.0;
    int sink_last = seq && (how & REF_LOWP_SINK_LAST);
    double sum = sink_last ? 0.0 : es;
    for (int pass = 0; pass < 2; pass++) {
        for (int32_t j = 0; j < lk; j++) {
            int kind = r->allowed(r->ctx, j);
            if (!kind)
                continue;
            double s = score(r->q, r->k + (size_t)j * (size_t)r->d, r->d, ru, kind, j);
            double e = fc_round((float)exp(s - mx), dt);
            if (pass == 0) {
                sum += e;
                if (seq)
                    sum = fc_round((float)sum, dt);
                continue;
            }
            double p = unnorm ? e : fc_round((float)(e / sum), dt);
            const float *vj = r->v + (size_t)j * udv;
            for (size_t x = 0; x < udv; x++)
                o[x] += p * (double)vj[x];
        }
        if (pass == 0)
            sum = fc_round((float)(sink_last ? sum + es : sum), dt);
    }
    for (size_t x = 0; unnorm && x < udv; x++)
        o[x] /= sum;
    if (lse)
        *lse = mx + log(sum);
}

fc_status ref_row_f64(const float *q, const float *k, const float *v, int32_t lk, int32_t d,
                      int32_t dv, const ref_row_rule *rule, ref_key_fn allowed, void *ctx,
                      double *o, double *lse, fc_err *err)
{
    fc_status st = row_args_check(q, k, v, lk, d, dv, rule, allowed, o, err);
    if (st)
        return st;
    const row_in r = {q, k, v, d, dv, rule, allowed, ctx};
    size_t udv = (size_t)dv;
    /* Pass 1: the largest allowed score. */
    int any;
    double mx = max_score(&r, 0, lk, &any);
    memset(o, 0, udv * sizeof *o);
    int sink = rule->sink_count > 0 && rule->sink > -INFINITY;
    if (!any) {
        /* the sink alone: all the mass, so o is its value; its LSE (log of count e^sink),
         * -inf without a sink */
        for (size_t x = 0; sink && x < udv; x++)
            o[x] = rule->sink_value;
        if (lse)
            *lse = rule->sink_count > 0 ? rule->sink + log(rule->sink_count) : -INFINITY;
        return FC_OK;
    }
    if (rule->sink > mx)
        mx = rule->sink;
    if (rule->softmax_dt != FC_F32) {
        add_keys_lowp(&r, lk, mx, lse, o);
        return FC_OK;
    }
    /* Pass 2: the same scores again, shifted by the max; the sink's term joins the sum, and
     * the output only with a sink_value (0: the truth). */
    double sum = rule->sink_count * exp(rule->sink - mx);
    for (size_t x = 0; rule->sink_value != 0 && x < udv; x++)
        o[x] = sum * rule->sink_value;
    add_keys(&r, 0, lk, mx, &sum, o);
    for (size_t x = 0; x < udv; x++)
        o[x] /= sum;
    if (lse)
        *lse = mx + log(sum);
    return FC_OK;
}

fc_status ref_row_online_f64(const float *q, const float *k, const float *v, int32_t lk,
                             int32_t d, int32_t dv, const ref_row_rule *rule, ref_key_fn allowed,
                             void *ctx, const int32_t *tiles, size_t ntiles, ref_rescale rescale,
                             double *o, double *lse, fc_err *err)
{
    fc_status st = row_args_check(q, k, v, lk, d, dv, rule, allowed, o, err);
    if (st)
        return st;
    if (rule->sink_count > 0 && rule->sink > -INFINITY)
        return fc_errf(err, FC_EINVAL, "online reference row: a sink (%g): not modelled",
                       rule->sink);
    if ((unsigned)rescale > REF_RESCALE_NONE || (ntiles > 0 && !tiles))
        return fc_errf(err, FC_EINVAL, "online reference row: rescale %d, %zu tiles at %p",
                       (int)rescale, ntiles, (const void *)tiles);
    for (size_t t = 0; t < ntiles; t++)
        if (tiles[2 * t] < 0 || tiles[2 * t] > tiles[2 * t + 1] || tiles[2 * t + 1] > lk)
            return fc_errf(err, FC_EINVAL, "online reference row: tile %zu = [%d, %d): not "
                           "within [0, %d)", t, (int)tiles[2 * t], (int)tiles[2 * t + 1],
                           (int)lk);
    const row_in r = {q, k, v, d, dv, rule, allowed, ctx};
    size_t udv = (size_t)dv;
    double m = -INFINITY, l = 0.0;
    memset(o, 0, udv * sizeof *o); /* the accumulator until the end */
    for (size_t t = 0; t < ntiles; t++) {
        int any;
        double mt = max_score(&r, tiles[2 * t], tiles[2 * t + 1], &any);
        if (!any)
            continue; /* nothing allowed: the state stays */
        double mn = mt > m ? mt : m, alpha = exp(m - mn); /* exp(-inf) = 0 on the first */
        if (rescale != REF_RESCALE_NONE) /* (on the first tile l and o are 0 anyway) */
            l *= alpha;
        for (size_t x = 0; rescale == REF_RESCALE_BOTH && x < udv; x++)
            o[x] *= alpha;
        add_keys(&r, tiles[2 * t], tiles[2 * t + 1], mn, &l, o);
        m = mn;
    }
    for (size_t x = 0; l != 0 && x < udv; x++) /* a NaN sum stays NaN, as in ref_row_f64 */
        o[x] /= l;
    if (lse)
        *lse = l != 0 ? m + log(l) : -INFINITY;
    return FC_OK;
}
