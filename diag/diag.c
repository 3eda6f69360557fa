/*
 * diag.c - the evaluator and the printout of the diagnosis (diag.h). It knows no bug and no
 * mask rule (those are hyps.c's): it sorts rows into failing and non-finite with the truth
 * verdict's bounds, asks every hypothesis for its alternative, recomputes each examined row
 * under each alternative's key set with ref_row_f64 (an online softmax's bugs: with
 * ref_row_online_f64 over the tiles the alternative gives), and credits the rows that then
 * match. Of
 * the masks it uses only the row's place in its sequence (mask_row_of), which it hands to the
 * key-set functions.
 */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/cancel.h"
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

static void rows_free(diag_rows *s)
{
    free(s->r);
    memset(s, 0, sizeof *s);
}

void diag_report_free(diag_report *r)
{
    if (!r)
        return;
    rows_free(&r->nonfinite);
    rows_free(&r->unexplained);
    rows_free(&r->skipped);
    for (size_t i = 0; i < r->nfindings; i++) {
        rows_free(&r->findings[i].rows);
        rows_free(&r->findings[i].group_rows);
    }
    free(r->findings);
    free(r);
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
static double row_fit(const diag_bounds *bd, const float *o, const float *lse,
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

static int row_nonfinite(const float *o, const float *lse, size_t dv)
{
    for (size_t x = 0; x < dv; x++)
        if (!isfinite(o[x]))
            return 1;
    return lse && (isnan(*lse) || *lse == INFINITY);
}

/* ---- inputs ---------------------------------------------------------------------------- */

static fc_status check_in(const diag_in *in, fc_err *err)
{
    if (!in || !in->jc || !in->jc->prob || !in->v)
        return fc_errf(err, FC_EINVAL, "diagnosis: case or verdict missing");
    const judge_case *jc = in->jc;
    const attn_problem *p = jc->prob;
    fc_status st = attn_problem_check(p, err);
    if (st)
        return st;
    size_t rows = attn_lse_elems(p);
    if (in->v->dtype != jc->dtype)
        return fc_errf(err, FC_EINVAL, "diagnosis: the verdict is for %s, the case is %s",
                       fc_dtype_name(in->v->dtype), fc_dtype_name(jc->dtype));
    if (in->v->rows != rows || in->v->dv != (size_t)p->dv)
        return fc_errf(err, FC_EINVAL, "diagnosis: the verdict is for %zu rows of %zu, the case "
                       "has %zu of %d", in->v->rows, in->v->dv, rows, (int)p->dv);
    if (rows && (!in->o || !jc->out || !jc->lse || !jc->q || (p->seq.lk && (!jc->k || !jc->v))))
        return fc_errf(err, FC_EINVAL, "diagnosis: an output, oracle or input array is NULL");
    if (in->prev && mask_params_check(in->prev, err))
        return FC_EINVAL;
    if (in->bm) {
        const bmask *bm = in->bm;
        if (bmask_validate(bm, err))
            return FC_EINVAL;
        if (bm->lq != p->seq.lq || bm->lk != p->seq.lk || (bm->nb != 1 && bm->nb != p->seq.batch) ||
            (bm->nh != 1 && bm->nh != p->hq))
            return fc_errf(err, FC_EINVAL, "diagnosis: the block mask is for a %d x %d grid of "
                           "%d x %d entries, the case has %d x %d and %d x %d", (int)bm->lq,
                           (int)bm->lk, (int)bm->nb, (int)bm->nh, (int)p->seq.lq,
                           (int)p->seq.lk, (int)p->seq.batch, (int)p->hq);
    }
    return FC_OK;
}

static fc_status bounds_of(const rep_verdict *v, diag_bounds *bd, fc_err *err)
{
    rep_tol t;
    fc_status st = rep_tol_for(v->dtype, &t, err);
    if (st)
        return st;
    *bd = (diag_bounds){.degenerate = v->degenerate, .h1 = v->c * v->e_lp_max + v->floor,
                        .deg_atol = v->deg_atol, .deg_rtol = v->deg_rtol,
                        .lse_atol = t.lse_atol, .lse_rtol = t.lse_rtol,
                        .lse_add = v->c * v->e_lse_lp_max,
                        .lse_dtype = v->lse_dtype};
    return FC_OK;
}

/* ---- the evaluation --------------------------------------------------------------------- */

/* Scratch of one examination: the truth's and a hypothesis's key sets, a reference row. */
typedef struct exam {
    const diag_in *in;
    const diag_bounds *bd;
    diag_alt truth;
    diag_alt *alts;   /* [nalts]: the hypotheses that apply */
    size_t *hyp_of;   /* [nalts]: their index in diag_hyps */
    size_t nalts;
    uint8_t *tkeys, *hkeys; /* [Lk] */
    double *oref;           /* [Dv] */
    int32_t *tiles;         /* [2 * DIAG_MAX_TILES(Lk, NKB)]: an online try's key ranges */
} exam;

static int key_in(void *ctx, int32_t tk)
{
    return ((const uint8_t *)ctx)[tk];
}

/* Row `row`'s context under alternative a. */
static diag_key key_of(const exam *e, const diag_alt *a, size_t row)
{
    const attn_problem *p = e->in->jc->prob;
    size_t lq = (size_t)p->seq.lq;
    diag_key k = {e->in, p, (int32_t)(row / lq / (size_t)p->hq),
                  (int32_t)(row / lq % (size_t)p->hq), (int32_t)(row % lq), {0, 0, 0}, 0};
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
static uint64_t ref_rows_of(const diag_alt *a, int has_sink)
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

/* What alternative a computes for row `row`, against the tested row. */
enum {
    ALT_SAME = 0,  /* the truth's own row: a changes nothing there */
    ALT_MATCH = 1, /* the tested row matches one of a's references (*fit: how closely) */
    ALT_RIGHT = 2, /* an online softmax's bug whose keys computed right match the tested row: a
                    * row its bug leaves alone, or the keys' (the block mask's) doing; a
                    * softmax in the input type matched only where it is scores-rounded's row */
    ALT_DIFF = 3,  /* a changes the row and the tested row matches none of its references */
};

/* alt_vs_row's verdict on row `row` under alternative a (ALT_*), or -1 on a reference error.
 * e->tkeys must hold the truth's keys of the row. */
static int alt_vs_row(exam *e, const diag_alt *a, size_t row, double *fit, fc_err *err)
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
    int truth = memcmp(e->hkeys, e->tkeys, lk) == 0 && a->scale == p->scale &&
                hk == e->truth.kv_head(p, k.h) && a->lse_mul == 1.0 &&
                a->round_scores == FC_F32 && a->softcap == p->terms.softcap &&
                sink == terms_sink(&p->terms, k.h) &&
                a->sink_mul == 1.0 && sink_count == 1.0 && a->sink_value == 0.0 &&
                a->softmax_dt == FC_F32 && a->lse_round == FC_F32 && !a->lse_free;
    if (truth && !a->ntries)
        return ALT_SAME;
    size_t kv = ((size_t)k.b * (size_t)p->hkv + (size_t)hk) * lk;
    const float *kk = lk ? jc->k + kv * d : NULL, *vv = lk ? jc->v + kv * dv : NULL;
    double lse;
    ref_row_rule rule = {.scale = a->scale, .round_scores = a->round_scores,
                         .softcap = a->softcap, .sink = sink * a->sink_mul,
                         .sink_count = sink_count, .masked_score = a->masked_score,
                         .sink_value = a->sink_value, .softmax_dt = a->softmax_dt};
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
            if (ref_row_f64(jc->q + row * d, kk, vv, p->seq.lk, p->d, p->dv, &rule, key_in,
                            e->hkeys, e->oref, &lse, err))
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
            double f = row_fit(e->bd, o, ol, jc->out + row * dv, jc->lse[row], e->oref, pl, dv);
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
            double f = row_fit(e->bd, o, ol, jc->out + row * dv, jc->lse[row], e->oref,
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

/* 1 if alternative a explains failing row `row` (*fit: how closely, row_fit), 0 if not, -1 on
 * a reference error. The truth's own computation cannot explain a row that fails against it. */
static int explains(exam *e, const diag_alt *a, size_t row, double *fit, fc_err *err)
{
    int x = alt_vs_row(e, a, row, fit, err);
    return x < 0 ? -1 : x == ALT_MATCH;
}

/* Row `row` (a flat index) into s. */
static fc_status add_row(diag_rows *s, const attn_problem *p, size_t row)
{
    size_t lq = (size_t)p->seq.lq;
    return rows_add(s, p, (int32_t)(row / lq / (size_t)p->hq), (int32_t)(row / lq % (size_t)p->hq),
                    (int32_t)(row % lq));
}

/* e->tkeys: the truth's keys of row `row`. */
static void truth_keys(exam *e, size_t row)
{
    diag_key k = key_of(e, &e->truth, row);
    e->truth.keys(&e->truth, &k, e->tkeys);
}

/* Tries every applying hypothesis on one failing finite row; hit[j] says which explain it and
 * fits[j] how closely, *tfit how far the row is from the truth in the same units (above 1). */
static fc_status examine(exam *e, diag_report *r, size_t row, uint8_t *hit, double *fits,
                         double *tfit, fc_err *err)
{
    const judge_case *jc = e->in->jc;
    size_t dv = (size_t)jc->prob->dv;
    const float *o = e->in->o + row * dv, *ol = e->in->lse ? e->in->lse + row : NULL;
    const double *g = jc->out + row * dv;
    truth_keys(e, row);
    *tfit = row_fit(e->bd, o, ol, g, jc->lse[row], g, jc->lse[row], dv);
    for (size_t j = 0; j < e->nalts; j++) {
        double fit = 0;
        int x = explains(e, &e->alts[j], row, &fit, err);
        if (x < 0)
            return FC_EINVAL;
        hit[j] = (uint8_t)x;
        fits[j] = x ? fit : 0;
        if (!x)
            continue;
        r->findings[j].fit += fit; /* sums here; the means after the last row (diag_run) */
        r->findings[j].truth_fit += *tfit;
        if (add_row(&r->findings[j].rows, jc->prob, row))
            return fc_errf(err, FC_ENOMEM, "diagnosis: out of memory");
    }
    return FC_OK;
}

/* ---- what makes a fitting hypothesis a cause (diag.h) ---------------------------------- */

/* A row's standing: it passes against the truth, fails with a finite output, or is non-finite. */
enum { ROW_PASS = 0, ROW_FAIL = 1, ROW_NONFINITE = 2 };

typedef struct passing_check {
    size_t passing, checked, contradicted, first;
} passing_check;

/* The passing rows in [r0, r1) held to alternative a: a row a changes (its reference is not the
 * truth's) whose output matches none of a's references contradicts it, since the output is
 * right there. At most a quarter of the budget's work each call; past it a sample spread evenly
 * (pc->checked of pc->passing). */
static fc_status check_passing(exam *e, const diag_report *r, const diag_alt *a,
                               const uint8_t *state, size_t r0, size_t r1, passing_check *pc,
                               fc_err *err)
{
    const attn_problem *p = e->in->jc->prob;
    memset(pc, 0, sizeof *pc);
    for (size_t row = r0; row < r1; row++)
        pc->passing += state[row] == ROW_PASS;
    uint64_t per_row = (uint64_t)(p->seq.lk > 0 ? p->seq.lk : 1) * (uint64_t)p->d *
                       (ref_rows_of(a, p->terms.sinks != NULL) + (uint64_t)a->ntries);
    uint64_t cap = r->budget / 4 / per_row > 0 ? r->budget / 4 / per_row : 1;
    size_t take = (uint64_t)pc->passing < cap ? pc->passing : (size_t)cap;
    for (size_t row = r0, i = 0, next = 0; row < r1 && next < take; row++) {
        if (state[row] != ROW_PASS)
            continue;
        if (next * pc->passing / take == i++) { /* evenly spread, in row order */
            if (fc_cancelled()) /* a caller's interrupt (base/cancel.h), row by row */
                return fc_errf(err, FC_ECANCELED, "in the diagnosis");
            next++;
            pc->checked++;
            double fit;
            truth_keys(e, row);
            int x = alt_vs_row(e, a, row, &fit, err);
            if (x < 0)
                return FC_EINVAL;
            if (x == ALT_DIFF && pc->contradicted++ == 0)
                pc->first = row;
        }
    }
    return FC_OK;
}

/* The whole-case check pc into f: its counts and first contradicting row, as a range. */
static void note_contradiction(diag_finding *f, const attn_problem *p, const passing_check *pc)
{
    size_t lq = (size_t)p->seq.lq;
    if (f->contradicted == 0 && pc->contradicted)
        f->first_contradiction = (diag_range){(int32_t)(pc->first / lq / (size_t)p->hq),
                                              (int32_t)(pc->first / lq % (size_t)p->hq),
                                              (int32_t)(pc->first % lq),
                                              (int32_t)(pc->first % lq)};
    f->contradicted += pc->contradicted;
    f->checked += pc->checked;
    f->passing += pc->passing;
}

/* H2 alone failed (diag.h): the rows past their share of H2's allowed squared error,
 * nmse_tol * sum O_gold^2 over the non-empty rows, into failing; bd matches by that share from
 * now on. 0 rows when the verdict allows no error (a zero oracle). */
static size_t h2_rows(const diag_in *in, diag_bounds *bd, diag_report *r, size_t *failing)
{
    const judge_case *jc = in->jc;
    size_t dv = (size_t)jc->prob->dv, nrows = r->rows, n = 0, nonempty = 0;
    double gold_sq = 0;
    for (size_t row = 0; row < nrows; row++) {
        if (jc->lse[row] == -INFINITY)
            continue; /* H4's */
        nonempty++;
        for (size_t x = 0; x < dv; x++)
            gold_sq += jc->out[row * dv + x] * jc->out[row * dv + x];
    }
    double share = nonempty ? in->v->nmse_tol * gold_sq / (double)nonempty : 0;
    if (!(share > 0))
        return 0;
    r->h2_mode = 1;
    r->h2_row_share = share;
    bd->row_sq = share;
    for (size_t row = 0; row < nrows; row++) {
        const float *lse = in->lse ? in->lse + row : NULL;
        if (jc->lse[row] != -INFINITY &&
            !diag_row_matches(bd, in->o + row * dv, lse, jc->out + row * dv, jc->lse[row], dv))
            failing[n++] = row;
    }
    r->failing = n;
    /* A hypothesis's row is held to H2's own rule restricted to the row when that allows more:
     * squared error within nmse_tol times the row's squared sum. A row of more than average
     * weight carries more than the average share of a correct output's rounding (an output
     * rounded to float16 alone can pass the average share), so without it a hypothesis that
     * reproduces a row up to that rounding would not explain it. The rows selected above keep
     * the average share: they are the rows that carry H2's excess. */
    bd->row_nmse = in->v->nmse_tol;
    return n;
}

/* What the report may claim (diag.h). A whole candidate (it explains every examined row) is the
 * cause unless refuted: it must reproduce the failing values DIAG_CLOSER times more closely than
 * the correct output does (a hypothesis within the bounds of barely failing rows proves
 * nothing), and no passing row may contradict it. Without an unrefuted whole cause, a
 * hypothesis that explains every examined failing row of a head (b, h) is the cause there
 * (a GROUP cause, rows in group_rows) under the same two tests over that head's rows; the
 * examined rows no cause covers go to unexplained. rows[i] is the i-th examined row, hits[i *
 * nalts + j] whether hypothesis j explains it, fits[...] how closely, tfits[i] how far the
 * row is from the truth. f->fit and f->truth_fit are means already. */
static fc_status classify(exam *e, diag_report *r, const uint8_t *state, const size_t *rows,
                          const uint8_t *hits, const double *fits, const double *tfits,
                          fc_err *err)
{
    const attn_problem *p = e->in->jc->prob;
    size_t na = e->nalts, lq = (size_t)p->seq.lq;
    size_t cand[DIAG_MAX_HYPS];
    double cand_fit[DIAG_MAX_HYPS];
    int whole = 0;
    if (na > DIAG_MAX_HYPS)
        return fc_errf(err, FC_EINVAL, "diagnosis: %zu hypotheses, at most %d", na,
                       DIAG_MAX_HYPS);
    for (size_t j = 0; j < na; j++) {
        diag_finding *f = &r->findings[j];
        if (!(r->examined > 0 && f->rows.count == r->examined))
            continue;
        if (!(f->fit * DIAG_CLOSER <= f->truth_fit)) {
            f->refuted = DIAG_REFUTED_CLOSER;
            continue;
        }
        passing_check pc;
        fc_status st = check_passing(e, r, &e->alts[j], state, 0, r->rows, &pc, err);
        if (st)
            return st;
        note_contradiction(f, p, &pc);
        if (pc.contradicted)
            f->refuted = DIAG_REFUTED_PASSING;
        else
            whole = 1;
    }
    /* heads are runs of consecutive examined rows (rows come in row order) */
    for (size_t i0 = 0, i1; i0 < r->examined; i0 = i1) {
        size_t head = rows[i0] / lq;
        for (i1 = i0; i1 < r->examined && rows[i1] / lq == head; i1++)
            ;
        int covered = whole;
        size_t ncand = 0;
        for (size_t j = 0; j < na && !whole; j++) {
            double fit = 0, tfit = 0;
            size_t n = 0;
            for (size_t i = i0; i < i1; i++) {
                n += hits[i * na + j];
                fit += fits[i * na + j];
                tfit += tfits[i];
            }
            if (n < i1 - i0)
                continue;
            diag_finding *f = &r->findings[j];
            passing_check pc = {0};
            fc_status st = fit * DIAG_CLOSER <= tfit
                               ? check_passing(e, r, &e->alts[j], state, head * lq, head * lq + lq,
                                               &pc, err)
                               : FC_OK;
            if (st)
                return st;
            if (!(fit * DIAG_CLOSER <= tfit) || pc.contradicted) {
                f->heads_refuted++;
                continue;
            }
            cand[ncand] = j;
            cand_fit[ncand++] = fit;
        }
        /* Of several causes in the head, one fitting DIAG_CLOSER times more closely than each
         * of the others is the head's cause alone (pick_closest's rule); else all of them. */
        size_t best = 0;
        for (size_t c = 1; c < ncand; c++)
            if (cand_fit[c] < cand_fit[best])
                best = c;
        int alone = ncand > 1;
        for (size_t c = 0; c < ncand; c++)
            alone &= c == best || (cand_fit[c] > 0 && cand_fit[best] * DIAG_CLOSER <= cand_fit[c]);
        for (size_t c = 0; c < ncand; c++) {
            if (alone && c != best)
                continue;
            diag_finding *f = &r->findings[cand[c]];
            covered = 1;
            f->ngroups++;
            for (size_t i = i0; i < i1; i++)
                if (add_row(&f->group_rows, p, rows[i]))
                    return fc_errf(err, FC_ENOMEM, "diagnosis: out of memory");
        }
        for (size_t i = i0; i < i1 && !covered; i++)
            if (add_row(&r->unexplained, p, rows[i]))
                return fc_errf(err, FC_ENOMEM, "diagnosis: out of memory");
    }
    return FC_OK;
}

/* The order findings are reported in: whole causes, group causes, refuted whole candidates,
 * partial fits, then the rest. */
static int rank(const diag_report *r, const diag_finding *f)
{
    int whole = r->examined && f->rows.count == r->examined;
    return whole && !f->refuted ? 4 : f->ngroups ? 3 : whole ? 2 : f->rows.count ? 1 : 0;
}

/* By rank, then most rows (a group cause: most rows in its heads), ties in table order: an
 * insertion sort on (rank, count, table index idx[i]), idx sorted alongside. */
static int before(const diag_report *r, const diag_finding *a, size_t ia, const diag_finding *b,
                  size_t ib)
{
    int ra = rank(r, a), rb = rank(r, b);
    size_t ca = ra == 3 ? a->group_rows.count : a->rows.count;
    size_t cb = rb == 3 ? b->group_rows.count : b->rows.count;
    return ra != rb ? ra > rb : ca != cb ? ca > cb : ia < ib;
}

static void sort_findings(diag_report *r, size_t *idx)
{
    size_t n = r->nfindings;
    for (size_t i = 1; i < n; i++) {
        diag_finding f = r->findings[i];
        size_t h = idx[i], j = i;
        while (j > 0 && before(r, &f, h, &r->findings[j - 1], idx[j - 1])) {
            r->findings[j] = r->findings[j - 1];
            idx[j] = idx[j - 1];
            j--;
        }
        r->findings[j] = f;
        idx[j] = h;
    }
    r->nexplaining = r->ncauses = r->nrefuted = 0;
    while (r->nexplaining < n && r->findings[r->nexplaining].rows.count > 0)
        r->nexplaining++;
    while (r->ncauses < n && rank(r, &r->findings[r->ncauses]) == 4)
        r->ncauses++;
    for (size_t i = 0; i < n; i++)
        r->nrefuted += rank(r, &r->findings[i]) == 2;
}

/* Scales equal up to a float's rounding: a stored float32 scale squared and 1/D. */
static int same_scale(double a, double b)
{
    return fabs(a - b) <= 1e-6 * fabs(b);
}

/* Whether two alternatives compute the same rows: every field but the title. Conservative: a
 * made-up view (it points into its own cu) is never the same as another's. */
static int alt_same(const diag_alt *a, const diag_alt *b)
{
    return memcmp(&a->mask, &b->mask, sizeof a->mask) == 0 && a->view.cu_q == b->view.cu_q &&
           a->view.cu_k == b->view.cu_k && a->view.nseq == b->view.nseq &&
           a->view.lq == b->view.lq && a->view.lk == b->view.lk &&
           same_scale(a->scale, b->scale) && a->kv_head == b->kv_head &&
           a->lse_mul == b->lse_mul && a->round_scores == b->round_scores &&
           a->softcap == b->softcap && a->sink_mul == b->sink_mul &&
           a->sink_count == b->sink_count && a->sink_count_of == b->sink_count_of &&
           a->masked_score == b->masked_score && a->sink_value == b->sink_value &&
           a->keys == b->keys && a->ntries == b->ntries && a->tiles == b->tiles &&
           a->rescale == b->rescale && a->softmax_dt == b->softmax_dt &&
           a->lse_round == b->lse_round && a->lse_free == b->lse_free &&
           a->only_empty == b->only_empty && a->sink_div == b->sink_div &&
           a->sink_shift == b->sink_shift;
}

/* A hypothesis computing what an earlier one computes on this case (window W+1 and 2W at
 * W = 1, the default scale applied twice and 1/D) is not tried twice: it is the same
 * alternative, and its name joins the earlier one's title ("window W+1 (1 -> 2), here the
 * same as window doubled 2W"). Returns 1 when a was merged so. */
static int merge_same(exam *e, diag_report *r, const diag_alt *a)
{
    for (size_t j = 0; j < e->nalts; j++) {
        if (!alt_same(&e->alts[j], a))
            continue;
        diag_finding *f = &r->findings[j];
        size_t n = strlen(f->title), short_len = strcspn(a->title, "(");
        while (short_len > 0 && a->title[short_len - 1] == ' ')
            short_len--;
        fc_fmt(f->title + n, sizeof f->title - n, ", here the same as %.*s", (int)short_len,
               a->title);
        return 1;
    }
    return 0;
}

/* Several whole causes (each explains every examined row, diag.h): when one reproduces the
 * failing values DIAG_CLOSER times more closely than each of the others (its fit, the mean over
 * the rows, against theirs: a mean, so that one row on a rounding boundary does not hide a
 * bit-exact reproduction of the other 499), it is the cause and they fit "less closely"
 * (r->nalso, right after it): an LSE rounded to bfloat16 reproduced to the bit is not "scores
 * rounded to bfloat16", which also lands within H5's bound. Otherwise they stay
 * indistinguishable. */
static void pick_closest(diag_report *r)
{
    if (r->ncauses < 2)
        return;
    size_t best = 0;
    for (size_t i = 1; i < r->ncauses; i++)
        if (r->findings[i].fit < r->findings[best].fit)
            best = i;
    for (size_t i = 0; i < r->ncauses; i++)
        if (i != best && !(r->findings[i].fit > 0 &&
                           r->findings[best].fit * DIAG_CLOSER <= r->findings[i].fit))
            return;
    diag_finding b = r->findings[best];
    memmove(&r->findings[1], &r->findings[0], best * sizeof b);
    r->findings[0] = b;
    r->nalso = r->ncauses - 1;
    r->ncauses = 1;
}

/* The hypotheses that apply, their findings (empty), and the scratch. */
static fc_status exam_init(exam *e, const diag_in *in, const diag_bounds *bd, diag_report *r,
                           fc_err *err)
{
    const attn_problem *p = in->jc->prob;
    memset(e, 0, sizeof *e);
    e->in = in;
    e->bd = bd;
    diag_alt_init(in, &e->truth);
    e->alts = calloc(diag_nhyps, sizeof *e->alts);
    e->hyp_of = calloc(diag_nhyps, sizeof *e->hyp_of);
    r->findings = calloc(diag_nhyps, sizeof *r->findings);
    e->tkeys = malloc((size_t)p->seq.lk + 1);
    e->hkeys = malloc((size_t)p->seq.lk + 1);
    e->oref = malloc(sizeof(double) * (size_t)p->dv);
    /* Sub-tiles of 16 keys or more, one more a listed block for its ragged end. */
    e->tiles = malloc(sizeof(int32_t) * 2 *
                      DIAG_MAX_TILES((size_t)p->seq.lk, in->bm ? (size_t)in->bm->nkb : 0));
    if (!e->alts || !e->hyp_of || !r->findings || !e->tkeys || !e->hkeys || !e->oref ||
        !e->tiles)
        return fc_errf(err, FC_ENOMEM, "diagnosis: out of memory");
    for (size_t h = 0; h < diag_nhyps; h++) {
        diag_alt *a = &e->alts[e->nalts];
        diag_alt_init(in, a);
        if (!diag_hyps[h].setup(in, a) || merge_same(e, r, a))
            continue;
        diag_finding *f = &r->findings[e->nalts];
        f->name = diag_hyps[h].name;
        memcpy(f->title, a->title, sizeof f->title);
        e->hyp_of[e->nalts++] = h;
    }
    r->nfindings = e->nalts;
    return FC_OK;
}

static void exam_free(exam *e)
{
    free(e->alts);
    free(e->hyp_of);
    free(e->tkeys);
    free(e->hkeys);
    free(e->oref);
    free(e->tiles);
}

/* The non-finite rows, when they are exactly the rows with no allowed key and each is wholly
 * NaN: a softmax over no key (0/0), the cause "rows with no allowed key are NaN" (diag.h).
 * Every such row must be so: a row with no key computed right refutes it. 0 otherwise. */
static size_t nan_empty_rows(const diag_in *in, const diag_report *r, const uint8_t *state)
{
    const judge_case *jc = in->jc;
    size_t dv = (size_t)jc->prob->dv, n = 0;
    if (!r->nonfinite.count)
        return 0;
    for (size_t row = 0; row < r->rows; row++) {
        int empty = jc->lse[row] == -INFINITY;
        if (state[row] != ROW_NONFINITE) {
            if (empty)
                return 0;
            continue;
        }
        if (!empty)
            return 0;
        for (size_t x = 0; x < dv; x++)
            if (!isnan(in->o[row * dv + x]))
                return 0;
        n++;
    }
    return n;
}

/* What the failing rows no cause explains are (diag_evidence), from the standing of every row:
 * the rows of group causes are marked explained in state first (ROW_PASS: out of the count). */
static void gather_evidence(const exam *e, diag_report *r, uint8_t *state)
{
    const attn_problem *pp = e->in->jc->prob;
    size_t lqq = (size_t)pp->seq.lq;
    for (size_t i = 0; i < r->nexplaining; i++)
        for (size_t j = 0; j < r->findings[i].group_rows.nranges; j++) {
            const diag_range *x = &r->findings[i].group_rows.r[j];
            size_t head = (size_t)x->b * (size_t)pp->hq + (size_t)x->h;
            for (int32_t q = x->q0; q <= x->q1; q++)
                state[head * lqq + (size_t)q] = ROW_PASS;
        }
    if (r->nan_empty)
        for (size_t row = 0; row < r->rows; row++)
            if (state[row] == ROW_NONFINITE)
                state[row] = ROW_PASS;
    const attn_problem *p = e->in->jc->prob;
    const seq_view v = e->truth.view;
    diag_evidence *ev = &r->ev;
    size_t lq = (size_t)p->seq.lq;
    memset(ev, 0, sizeof *ev);
    ev->heads_total = r->rows / (lq ? lq : 1);
    ev->from_q = -2; /* none seen yet */
    for (size_t head = 0; lq && head < ev->heads_total; head++) {
        int32_t first = -1, all_after = 1;
        for (size_t q = 0; q < lq; q++) {
            size_t row = head * lq + q;
            int fails = state[row] != ROW_PASS;
            int32_t s = seq_find(v.cu_q, v.nseq, (int32_t)q), lo, hi;
            mask_token_range(p->mask, v, (int32_t)q, &lo, &hi);
            int start = (int32_t)q == v.cu_q[s], empty = lo >= hi;
            int decode = v.cu_q[s + 1] - v.cu_q[s] < v.cu_k[s + 1] - v.cu_k[s];
            ev->starts_total += (size_t)start;
            ev->empty_total += (size_t)empty;
            ev->decode_total += (size_t)decode;
            if (!fails) {
                all_after &= first < 0;
                continue;
            }
            if (first < 0)
                first = (int32_t)q;
            ev->starts += (size_t)start;
            ev->empty += (size_t)empty;
            ev->decode += (size_t)decode;
            ev->nonfinite_empty += (size_t)(empty && state[row] == ROW_NONFINITE);
            ev->rows++;
        }
        if (first < 0)
            continue;
        ev->heads++;
        if (ev->from_q == -2)
            ev->from_q = all_after ? first : -1;
        else if (ev->from_q != first || !all_after)
            ev->from_q = -1;
    }
    if (ev->from_q < 0)
        ev->from_q = -1;
}

fc_status diag_run(const diag_in *in, diag_report **out, fc_err *err)
{
    *out = NULL;
    diag_bounds bd;
    fc_status st = check_in(in, err);
    if (!st)
        st = bounds_of(in->v, &bd, err);
    if (st)
        return st;
    const judge_case *jc = in->jc;
    const attn_problem *p = jc->prob;
    size_t dv = (size_t)p->dv, nrows = attn_lse_elems(p);
    diag_report *r = calloc(1, sizeof *r);
    size_t *failing = malloc(sizeof(size_t) * (nrows + 1)), nfail = 0, *picked = NULL;
    uint8_t *state = calloc(nrows + 1, 1); /* ROW_*: every row's standing */
    uint8_t *hits = NULL; /* [examined][nalts]: which hypotheses explain each examined row */
    double *fits = NULL, *tfits = NULL; /* how closely: [examined][nalts], the truth [examined] */
    exam e;
    memset(&e, 0, sizeof e);
    if (!r || !failing || !state) {
        st = fc_errf(err, FC_ENOMEM, "diagnosis: out of memory");
        goto done;
    }
    r->rows = nrows;
    r->budget = in->budget ? in->budget : DIAG_BUDGET;

    /* The failing rows; the non-finite ones go apart. */
    for (size_t row = 0; row < nrows && !st; row++) {
        const float *o = in->o + row * dv, *lse = in->lse ? in->lse + row : NULL;
        if (row_nonfinite(o, lse, dv)) {
            r->failing++;
            state[row] = ROW_NONFINITE;
            if (add_row(&r->nonfinite, p, row))
                st = fc_errf(err, FC_ENOMEM, "diagnosis: out of memory");
        } else if (!diag_row_matches(&bd, o, lse, jc->out + row * dv, jc->lse[row], dv)) {
            r->failing++;
            state[row] = ROW_FAIL;
            failing[nfail++] = row;
        }
    }
    /* H2 alone failed: no row is past the H1/H5 bounds, so the rows examined are those that
     * carry the NMSE, each past its share of the squared error H2 allows. */
    if (!st && r->failing == 0 && in->v->gate[REP_H2] == REP_FAIL) {
        nfail = h2_rows(in, &bd, r, failing);
        for (size_t i = 0; i < nfail; i++)
            state[failing[i]] = ROW_FAIL;
    }
    if (!st) {
        r->nan_empty = nan_empty_rows(in, r, state);
        st = exam_init(&e, in, &bd, r, err);
    }
    if (st)
        goto done;

    /* The budget: each examined row costs about Lk * D per reference row a hypothesis
     * computes: one (one per way for a softmax in the input type, ref_rows_of), and an online
     * softmax's one per try more. */
    uint64_t units = 0;
    for (size_t j = 0; j < e.nalts; j++)
        units += ref_rows_of(&e.alts[j], p->terms.sinks != NULL) + (uint64_t)e.alts[j].ntries;
    uint64_t per_row = (uint64_t)(p->seq.lk > 0 ? p->seq.lk : 1) * (uint64_t)p->d *
                       (units ? units : 1);
    uint64_t cap = r->budget / per_row > 0 ? r->budget / per_row : 1;
    r->examined = (uint64_t)nfail < cap ? nfail : (size_t)cap;
    r->not_examined = nfail - r->examined;
    size_t cells = r->examined * (e.nalts ? e.nalts : 1) + 1;
    hits = calloc(cells, 1);
    fits = calloc(cells, sizeof *fits);
    tfits = calloc(r->examined + 1, sizeof *tfits);
    picked = malloc(sizeof(size_t) * (r->examined + 1));
    if (!hits || !fits || !tfits || !picked) {
        st = fc_errf(err, FC_ENOMEM, "diagnosis: out of memory");
        goto done;
    }
    /* Past the budget, a sample spread evenly over the failing rows (every head and batch
     * entry has its say), still in row order; the rows left out are named, by range. */
    for (size_t i = 0, next = 0; i < nfail && !st; i++) {
        int take = next < r->examined && (r->not_examined ? next * nfail / r->examined : next) == i;
        if (take && fc_cancelled()) { /* a caller's interrupt (base/cancel.h), row by row */
            st = fc_errf(err, FC_ECANCELED, "in the diagnosis");
        } else if (take) {
            picked[next] = failing[i];
            st = examine(&e, r, failing[i], hits + next * e.nalts, fits + next * e.nalts,
                         tfits + next, err);
            next++;
        } else if (add_row(&r->skipped, p, failing[i])) {
            st = fc_errf(err, FC_ENOMEM, "diagnosis: out of memory");
        }
    }
    for (size_t j = 0; !st && j < r->nfindings; j++)
        if (r->findings[j].rows.count) {
            r->findings[j].fit /= (double)r->findings[j].rows.count;
            r->findings[j].truth_fit /= (double)r->findings[j].rows.count;
        }
    if (!st)
        st = classify(&e, r, state, picked, hits, fits, tfits, err);
    if (!st) {
        sort_findings(r, e.hyp_of);
        pick_closest(r);
        if (!r->ncauses)
            gather_evidence(&e, r, state);
    }
done:
    exam_free(&e);
    free(failing);
    free(state);
    free(hits);
    free(fits);
    free(tfits);
    free(picked);
    if (st)
        diag_report_free(r);
    else
        *out = r;
    return st;
}

void diag_after_run(const judge_run_in *in, const rep_verdict *v, rep_row *row)
{
    if (row->outcome != REP_ROW_FAIL || v->unscaled)
        return;
    diag_in d = {.jc = in->jc, .o = in->o, .lse = in->lse, .v = v, .bm = in->bm,
                 .budget = DIAG_RUN_BUDGET};
    diag_explain(&d, row, NULL, NULL);
}
