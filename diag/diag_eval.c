/*
 * diag_eval.c - the diagnosis's evaluator primitives (diag.h, diag_internal.h): row sets, the
 * match rule and the fit, and what one alternative computes for one row against the output
 * under test (ref_row_f64 over the alternative's keys in each way it is tried, or
 * ref_row_online_f64 over its tiles). It knows no bug and no mask rule (those are hyps.c's);
 * of the masks it uses only the row's place in its sequence (mask_row_of).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/lowp.h"
#include "diag/diag_internal.h"
#include "ref/ref.h"

/* ---- row sets -------------------------------------------------------------------------- */

/* Appends row (b, h, q); rows arrive in row order, so a row extends the last range when it is
 * the next q of the same (b, h) and, packed, of the same sequence. */
static fc_status rows_add(diag_rows *s, const attn_problem *p, int32_t b, int32_t h, int32_t q)
{
    s->count++;
    if (s->nranges) {
        diag_range *last = &s->r[s->nranges - 1];
        int same_seq = !p->seq.packed ||
                       seq_find(p->seq.cu_q, p->seq.nseq, q) ==
                           seq_find(p->seq.cu_q, p->seq.nseq, last->q1);
        if (last->b == b && last->h == h && last->q1 + 1 == q && same_seq) {
            last->q1 = q;
            return FC_OK;
        }
    }
    /* The capacity is the next power of two: grow when nranges reaches one. */
    if ((s->nranges & (s->nranges - 1)) == 0) {
        size_t cap = s->nranges ? 2 * s->nranges : 1;
        diag_range *r = realloc(s->r, cap * sizeof *r);
        if (!r)
            return FC_ENOMEM;
        s->r = r;
    }
    s->r[s->nranges++] = (diag_range){b, h, q, q};
    return FC_OK;
}

void diag_rows_free(diag_rows *s)
{
    free(s->r);
    memset(s, 0, sizeof *s);
}

/* ---- the match rule of diag.h --------------------------------------------------------- */

/* H5's bound (reports/tol.c): atol + rtol |gl| + c e_lse_lp_max, and half an ulp of a float16 /
 * bfloat16 LSE. */
static double lse_lim(const diag_bounds *bd, double gl, float l)
{
    double lim = bd->lse_atol + bd->lse_rtol * fabs(gl) + bd->lse_add;
    if (bd->lse_dtype != FC_F32 && isfinite(l))
        lim += 0.5 * fc_ulp(l, bd->lse_dtype);
    return lim;
}

/* H2 only: the tested row's squared error against reference row g, as a fraction of what the
 * row is allowed (diag.h): the average share row_sq, or row_nmse times g's own squared sum when
 * that is more. A NaN anywhere gives NaN, which no "<= 1" passes. */
static double h2_share_used(const diag_bounds *bd, const float *o, const double *g, size_t dv)
{
    double sq = 0, own = 0;
    for (size_t x = 0; x < dv; x++) {
        sq += ((double)o[x] - g[x]) * ((double)o[x] - g[x]);
        own += g[x] * g[x];
    }
    double allow = bd->row_nmse * own > bd->row_sq ? bd->row_nmse * own : bd->row_sq;
    return sq / allow;
}

/* The tested LSE (NULL: none stored) against a reference LSE gl: within H5's bound, or the
 * same infinity (an LSE rounded to float16 where the truth is -1e5 is -inf, and so is the
 * rounding hypothesis's: their distance is NaN, their values equal). */
static int lse_matches(const diag_bounds *bd, const float *lse, double gl)
{
    return !lse || (isinf(gl) && (double)*lse == gl) || fabs((double)*lse - gl) <= lse_lim(bd, gl, *lse);
}

int diag_row_matches(const diag_bounds *bd, const float *o, const float *lse, const double *g,
                     double gl, size_t dv)
{
    /* no allowed key (LSE -inf, O all 0): exactly 0 and -inf, as H4; an LSE of -inf with an
     * O that is not 0 is a row with keys whose LSE was rounded past the type's range */
    int empty = gl == -INFINITY;
    for (size_t x = 0; empty && x < dv; x++)
        empty = g[x] == 0;
    if (empty) {
        for (size_t x = 0; x < dv; x++)
            if (!(o[x] == 0.0f))
                return 0;
        return !lse || *lse == -INFINITY;
    }
    if (bd->row_sq > 0) { /* H2 only: the row's squared error against its share */
        if (!(h2_share_used(bd, o, g, dv) <= 1.0))
            return 0;
        return lse_matches(bd, lse, gl);
    }
    for (size_t x = 0; x < dv; x++) {
        double lim = bd->degenerate ? bd->deg_atol + bd->deg_rtol * fabs(g[x]) : bd->h1;
        if (!(fabs((double)o[x] - g[x]) <= lim))
            return 0;
    }
    return lse_matches(bd, lse, gl);
}

/* How closely a matching hypothesis row (g, gl) reproduces the tested row's FAILING values:
 * the largest |tested - g| over the values that fail against the truth (gold, gold_l), each in
 * units of its bound around g; 0 when it reproduces them exactly. H2 only: the row's squared
 * error against g in units of its allowance. Only the failing values: where the truth already
 * fits, every hypothesis that explains the row fits too, and they do not tell hypotheses
 * apart. */
double diag_row_fit(const diag_bounds *bd, const float *o, const float *lse,
                      const double *gold, double gold_l, const double *g, double gl, size_t dv)
{
    if (bd->row_sq > 0)
        return h2_share_used(bd, o, g, dv);
    double fit = 0;
    for (size_t x = 0; x < dv; x++) {
        double lim_gold = bd->degenerate ? bd->deg_atol + bd->deg_rtol * fabs(gold[x]) : bd->h1;
        if (fabs((double)o[x] - gold[x]) <= lim_gold)
            continue;
        double lim = bd->degenerate ? bd->deg_atol + bd->deg_rtol * fabs(g[x]) : bd->h1;
        double d = fabs((double)o[x] - g[x]) / lim;
        fit = d > fit ? d : fit;
    }
    if (lse && isfinite(gl) && !(fabs((double)*lse - gold_l) <= lse_lim(bd, gold_l, *lse))) {
        double d = fabs((double)*lse - gl) / lse_lim(bd, gl, *lse);
        fit = d > fit ? d : fit;
    }
    return fit;
}

static int key_in(void *ctx, int32_t tk)
{
    return ((const uint8_t *)ctx)[tk];
}

/* Row `row`'s context under alternative a. */
static diag_key key_of(const diag_exam *e, const diag_alt *a, size_t row)
{
    const judge_case *jc = e->in->jc;
    const attn_problem *p = jc->prob;
    size_t n = judge_per_head(jc);
    diag_key k = {e->in, p, (int32_t)(row / n / (size_t)p->hq),
                  (int32_t)(row / n % (size_t)p->hq), judge_row_token(jc, row), {0, 0, 0}, 0};
    k.row = mask_row_of(a->view, k.tq);
    k.i = k.tq - a->view.cu_q[seq_find(a->view.cu_q, a->view.nseq, k.tq)];
    return k;
}

/* Whether REF_LOWP_* combination `how` is a way of its own: the sink's place in a running sum
 * matters only with a sink and a running sum. */
static int lowp_way_applies(unsigned how, int has_sink)
{
    return !(how & REF_LOWP_SINK_LAST) || (has_sink && (how & REF_LOWP_SEQ_SUM));
}

/* Reference rows a hypothesis computes per examined row besides its online tries: one, or
 * one per way of a softmax in the input type (with a sink, the sink-last ones too). */
uint64_t diag_ref_rows_of(const diag_alt *a, int has_sink)
{
    if (a->softmax_dt == FC_F32)
        return 1;
    uint64_t n = 0;
    for (unsigned how = 0; how < REF_LOWP_WAYS; how++)
        n += (uint64_t)lowp_way_applies(how, has_sink);
    return n;
}

/* Whether a softmax in the input type on rounded scores (its REF_LOWP_SCORES ways) computes,
 * on this row, what a float64 softmax on the same rounded scores (the scores-rounded
 * hypothesis) computes, o and lse within 1e-12 relative: where every weight but the largest
 * vanishes (scores of -1e5 rounded to bfloat16 lie 512 apart) the input type's softmax changes
 * nothing, and the row is evidence of the rounded scores alone. -1 on a reference error. */
static int lowp_changes_nothing(const float *q, const float *kk, const float *vv,
                                const attn_problem *p, const ref_row_rule *lowp,
                                ref_key_fn keys, void *ctx, const double *o, double lse,
                                fc_err *err)
{
    ref_row_rule f64 = *lowp;
    f64.round_scores = lowp->softmax_dt;
    f64.softmax_dt = FC_F32;
    f64.softmax_how = 0;
    double *g = malloc(sizeof *g * (size_t)p->dv), gl;
    if (!g) {
        fc_errf(err, FC_ENOMEM, "diagnosis: out of memory");
        return -1;
    }
    if (ref_row_f64(q, kk, vv, p->seq.lk, p->d, p->dv, &f64, keys, ctx, g, &gl, err)) {
        free(g);
        return -1;
    }
    int same = gl == lse || fabs(gl - lse) <= 1e-12 * fabs(gl); /* (both -inf: the same) */
    for (int32_t x = 0; same && x < p->dv; x++)
        same = g[x] == o[x] || fabs(g[x] - o[x]) <= 1e-12 * (fabs(g[x]) + fabs(o[x]));
    free(g);
    return same;
}

/* Whether alternative a's length bug (hyps_length.c) touches the row whose keys are `keys`: a
 * key at or past key_wrap, or keys on both sides of split_at. */
static int length_bug_touches(const diag_alt *a, const uint8_t *keys, size_t lk)
{
    int below = 0, above = 0;
    for (size_t tk = 0; a->key_wrap && tk < lk; tk++)
        if (keys[tk] && tk >= (size_t)a->key_wrap)
            return 1;
    for (size_t tk = 0; a->split_at && tk < lk; tk++) {
        below |= keys[tk] && tk < (size_t)a->split_at;
        above |= keys[tk] && tk >= (size_t)a->split_at;
    }
    return below && above;
}

/* A's reference row (e->oref, *lse) over keys e->hkeys with rule, kk and vv the row's kv head:
 * ref_row_f64, with key j >= key_wrap's K and V read at j - key_wrap (e->wk, e->wv, filled for
 * the row's keys alone), and split at split_at: each part's softmax apart, merged in base 2
 * (weights 2^LSE_i relative to the larger, the LSE log2 of their sum). */
static fc_status alt_row_f64(diag_exam *e, const diag_alt *a, size_t row, const float *kk,
                             const float *vv, const ref_row_rule *rule, double *lse, fc_err *err)
{
    const attn_problem *p = e->in->jc->prob;
    size_t lk = (size_t)p->seq.lk, d = (size_t)p->d, dv = (size_t)p->dv;
    const float *q = e->in->jc->q + row * d;
    if (a->key_wrap) {
        for (size_t tk = 0; tk < lk; tk++) {
            if (!e->hkeys[tk])
                continue;
            size_t from = tk >= (size_t)a->key_wrap ? tk - (size_t)a->key_wrap : tk;
            memcpy(e->wk + tk * d, kk + from * d, sizeof(float) * d);
            memcpy(e->wv + tk * dv, vv + from * dv, sizeof(float) * dv);
        }
        kk = e->wk;
        vv = e->wv;
    }
    if (!a->split_at || !length_bug_touches(a, e->hkeys, lk))
        return ref_row_f64(q, kk, vv, p->seq.lk, p->d, p->dv, rule, key_in, e->hkeys, e->oref,
                           lse, err);
    double l[2];
    for (int part = 0; part < 2; part++) {
        for (size_t tk = 0; tk < lk; tk++)
            e->pkeys[tk] = (tk >= (size_t)a->split_at) == part ? e->hkeys[tk] : 0;
        fc_status st = ref_row_f64(q, kk, vv, p->seq.lk, p->d, p->dv, rule, key_in, e->pkeys,
                                   part ? e->oref : e->oref2, &l[part], err);
        if (st)
            return st;
    }
    double top = l[0] > l[1] ? l[0] : l[1];
    double w0 = exp2(l[0] - top), w1 = exp2(l[1] - top);
    for (size_t x = 0; x < dv; x++)
        e->oref[x] = (w0 * e->oref2[x] + w1 * e->oref[x]) / (w0 + w1);
    *lse = top + log2(w0 + w1);
    return FC_OK;
}

/* alt_vs_row's verdict on row `row` under alternative a (ALT_*), or -1 on a reference error.
 * e->tkeys must hold the truth's keys of the row. */
int diag_alt_vs_row(diag_exam *e, const diag_alt *a, size_t row, double *fit, fc_err *err)
{
    const judge_case *jc = e->in->jc;
    const attn_problem *p = jc->prob;
    diag_key k = key_of(e, a, row);
    size_t lk = (size_t)p->seq.lk, d = (size_t)p->d, dv = (size_t)p->dv;
    if (a->only_empty && jc->lse[row] != -INFINITY)
        return ALT_SAME; /* the bug leaves rows with keys as they are */
    a->keys(a, &k, e->hkeys);
    int32_t hk = a->kv_head(p, k.h);
    double sink_count = a->sink_count_of ? a->sink_count_of(a, &k) : a->sink_count;
    double sink = terms_sink(&p->terms, diag_sink_head(a, p->hq, k.h));
    /* the row's explicit bias as a reads it, and as the truth does */
    const float *bias = a->xbias.vals ? xbias_row(a->xbias, k.b, a->xbias_head(p, k.h), k.tq)
                                      : NULL;
    const float *tbias = p->xbias.vals ? xbias_row(p->xbias, k.b, k.h, k.tq) : NULL;
    int truth = memcmp(e->hkeys, e->tkeys, lk) == 0 && a->scale == p->scale &&
                bias == tbias && (!bias || (a->bias_mul == 1.0 && !a->bias_before_cap)) &&
                hk == e->truth.kv_head(p, k.h) && a->lse_mul == 1.0 &&
                a->round_scores == FC_F32 && a->softcap == p->terms.softcap &&
                sink == terms_sink(&p->terms, k.h) &&
                a->sink_mul == 1.0 && sink_count == 1.0 && a->sink_value == 0.0 &&
                a->softmax_dt == FC_F32 && a->lse_round == FC_F32 && !a->lse_free &&
                !length_bug_touches(a, e->hkeys, lk) &&
                !(a->pg_seq >= 0 && diag_paged_row(a, &k, hk, e->hkeys, NULL, NULL, NULL, NULL));
    if (truth && !a->ntries)
        return ALT_SAME;
    size_t kv = ((size_t)k.b * (size_t)p->hkv + (size_t)hk) * lk;
    const float *kk = lk ? jc->k + kv * d : NULL, *vv = lk ? jc->v + kv * dv : NULL;
    if (a->pg_seq >= 0 && diag_paged_row(a, &k, hk, e->hkeys, kk, vv, e->wk, e->wv)) {
        kk = e->wk; /* the row's keys and values as the wrong page gives them */
        vv = e->wv;
    }
    double lse;
    ref_row_rule rule = {.scale = a->scale, .round_scores = a->round_scores,
                         .softcap = a->softcap, .sink = sink * a->sink_mul,
                         .sink_count = sink_count, .masked_score = a->masked_score,
                         .sink_value = a->sink_value, .softmax_dt = a->softmax_dt,
                         .bias = bias, .bias_mul = a->bias_mul,
                         .bias_before_cap = a->bias_before_cap, .fill_biased = a->fill_biased};
    const float *o = e->in->o + row * dv, *ol = e->in->lse ? e->in->lse + row : NULL;
    if (a->lse_free) { /* any finite LSE: only O is compared */
        if (ol && !isfinite(*ol))
            return ALT_DIFF;
        ol = NULL;
    }
    /* An online softmax's bug: the same keys and rule computed right come first (unless they
     * are the truth's, which a failing row never matches). A row they already match is not the
     * rescale's doing (it is the block mask's, whose keys these are), so a row whose max never
     * rises is never credited here. Then each of the alternative's tries (tile widths, visit
     * orders: the kernel's own are unknown); a row matching any of them is explained. */
    /* Of the ways (and tries) that match, the closest gives the fit: the engine computes one of
     * them, and a nearby way within the bounds is not it (the first match's fit could call an
     * exact reproduction a rough one, and the cause no closer than the truth). */
    double best = INFINITY;
    if (!truth) {
        /* a softmax in the input type: each way an engine writes one (ref.h's REF_LOWP_*) */
        int has_sink = rule.sink_count > 0 && rule.sink > -INFINITY, rounded_only = 0;
        for (unsigned how = 0; how < (a->softmax_dt != FC_F32 ? REF_LOWP_WAYS : 1u); how++) {
            if (!lowp_way_applies(how, has_sink))
                continue;
            rule.softmax_how = how;
            if (alt_row_f64(e, a, row, kk, vv, &rule, &lse, err))
                return -1;
            double pl = lse * a->lse_mul;
            if (a->lse_round != FC_F32)
                pl = (double)fc_round((float)pl, a->lse_round);
            if (!diag_row_matches(e->bd, o, ol, e->oref, pl, dv))
                continue;
            if ((how & REF_LOWP_SCORES) && a->round_scores == FC_F32) {
                int same = lowp_changes_nothing(jc->q + row * d, kk, vv, p, &rule, key_in,
                                                e->hkeys, e->oref, lse, err);
                if (same < 0)
                    return -1;
                rounded_only |= same;
                if (same)
                    continue; /* scores-rounded's row: not this way's evidence */
            }
            if (a->ntries)
                return ALT_RIGHT; /* the same keys computed right: not the rescale's doing */
            double f = diag_row_fit(e->bd, o, ol, jc->out + row * dv, jc->lse[row], e->oref, pl, dv);
            best = f < best ? f : best;
        }
        if (best < INFINITY) {
            *fit = best;
            return ALT_MATCH;
        }
        if (!a->ntries) /* a way matched as scores-rounded's row: no evidence either way */
            return rounded_only ? ALT_RIGHT : ALT_DIFF;
    }
    for (int t = 0; t < a->ntries; t++) {
        size_t nt = a->tiles(a, &k, t, e->tiles);
        if (ref_row_online_f64(jc->q + row * d, kk, vv, p->seq.lk, p->d, p->dv, &rule, key_in,
                               e->hkeys, e->tiles, nt, a->rescale, e->oref, &lse, err))
            return -1;
        if (diag_row_matches(e->bd, o, ol, e->oref, lse * a->lse_mul, dv)) {
            double f = diag_row_fit(e->bd, o, ol, jc->out + row * dv, jc->lse[row], e->oref,
                               lse * a->lse_mul, dv);
            best = f < best ? f : best;
        }
    }
    if (best < INFINITY) {
        *fit = best;
        return ALT_MATCH;
    }
    return ALT_DIFF;
}

/* Row `row` (a flat index) into s. */
fc_status diag_add_row(diag_rows *s, const judge_case *jc, size_t row)
{
    const attn_problem *p = jc->prob;
    size_t n = judge_per_head(jc);
    return rows_add(s, p, (int32_t)(row / n / (size_t)p->hq), (int32_t)(row / n % (size_t)p->hq),
                    judge_row_token(jc, row));
}

/* e->tkeys: the truth's keys of row `row`. */
void diag_truth_keys(diag_exam *e, size_t row)
{
    diag_key k = key_of(e, &e->truth, row);
    e->truth.keys(&e->truth, &k, e->tkeys);
}

