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

/* H5's bound (reports/tol.c): atol + rtol |gl|, and half an ulp of a float16 / bfloat16 LSE. */
static double lse_lim(const diag_bounds *bd, double gl, float l)
{
    double lim = bd->lse_atol + bd->lse_rtol * fabs(gl);
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

int diag_row_matches(const diag_bounds *bd, const float *o, const float *lse, const double *g,
                     double gl, size_t dv)
{
    if (gl == -INFINITY) { /* no allowed key: exactly 0 and -inf, as H4 */
        for (size_t x = 0; x < dv; x++)
            if (!(o[x] == 0.0f))
                return 0;
        return !lse || *lse == -INFINITY;
    }
    if (bd->row_sq > 0) { /* H2 only: the row's squared error against its share */
        if (!(h2_share_used(bd, o, g, dv) <= 1.0))
            return 0;
        return !lse || fabs((double)*lse - gl) <= lse_lim(bd, gl, *lse);
    }
    for (size_t x = 0; x < dv; x++) {
        double lim = bd->degenerate ? bd->deg_atol + bd->deg_rtol * fabs(g[x]) : bd->h1;
        if (!(fabs((double)o[x] - g[x]) <= lim))
            return 0;
    }
    return !lse || fabs((double)*lse - gl) <= lse_lim(bd, gl, *lse);
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

/* 1 if alternative a explains failing row `row` (*fit: how closely, row_fit), 0 if not, -1 on
 * a reference error. */
static int explains(exam *e, const diag_alt *a, size_t row, double *fit, fc_err *err)
{
    const judge_case *jc = e->in->jc;
    const attn_problem *p = jc->prob;
    diag_key k = key_of(e, a, row);
    size_t lk = (size_t)p->seq.lk, d = (size_t)p->d, dv = (size_t)p->dv;
    if (a->only_empty && jc->lse[row] != -INFINITY)
        return 0; /* the bug leaves rows with keys as they are */
    a->keys(a, &k, e->hkeys);
    int32_t hk = a->kv_head(p, k.h);
    double sink_count = a->sink_count_of ? a->sink_count_of(a, &k) : a->sink_count;
    /* The truth's own computation cannot explain a row that fails against the truth. */
    int truth = memcmp(e->hkeys, e->tkeys, lk) == 0 && a->scale == p->scale &&
                hk == e->truth.kv_head(p, k.h) && a->lse_mul == 1.0 &&
                a->round_scores == FC_F32 && a->softcap == p->terms.softcap &&
                a->sink_mul == 1.0 && sink_count == 1.0 && a->sink_value == 0.0 &&
                a->softmax_dt == FC_F32 && a->lse_round == FC_F32 && !a->lse_free;
    if (truth && !a->ntries)
        return 0;
    size_t kv = ((size_t)k.b * (size_t)p->hkv + (size_t)hk) * lk;
    const float *kk = lk ? jc->k + kv * d : NULL, *vv = lk ? jc->v + kv * dv : NULL;
    double lse;
    ref_row_rule rule = {.scale = a->scale, .round_scores = a->round_scores,
                         .softcap = a->softcap, .sink = terms_sink(&p->terms, k.h) * a->sink_mul,
                         .sink_count = sink_count, .masked_score = a->masked_score,
                         .sink_value = a->sink_value, .softmax_dt = a->softmax_dt};
    const float *o = e->in->o + row * dv, *ol = e->in->lse ? e->in->lse + row : NULL;
    if (a->lse_free) { /* any finite LSE: only O is compared */
        if (ol && !isfinite(*ol))
            return 0;
        ol = NULL;
    }
    /* An online softmax's bug: the same keys and rule computed right come first (unless they
     * are the truth's, which a failing row never matches). A row they already match is not the
     * rescale's doing (it is the block mask's, whose keys these are), so a row whose max never
     * rises is never credited here. Then each of the alternative's tries (tile widths, visit
     * orders: the kernel's own are unknown); a row matching any of them is explained. */
    if (!truth) {
        /* a softmax in the input type: each way an engine writes one (ref.h's REF_LOWP_*) */
        int has_sink = rule.sink_count > 0 && rule.sink > -INFINITY;
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
            int match = diag_row_matches(e->bd, o, ol, e->oref, pl, dv);
            if (match && !a->ntries) {
                *fit = row_fit(e->bd, o, ol, jc->out + row * dv, jc->lse[row], e->oref, pl, dv);
                return 1;
            }
            if (match)
                return 0; /* the same keys computed right: not the rescale's doing */
        }
        if (!a->ntries)
            return 0;
    }
    for (int t = 0; t < a->ntries; t++) {
        size_t nt = a->tiles(a, &k, t, e->tiles);
        if (ref_row_online_f64(jc->q + row * d, kk, vv, p->seq.lk, p->d, p->dv, &rule, key_in,
                               e->hkeys, e->tiles, nt, a->rescale, e->oref, &lse, err))
            return -1;
        if (diag_row_matches(e->bd, o, ol, e->oref, lse * a->lse_mul, dv)) {
            *fit = row_fit(e->bd, o, ol, jc->out + row * dv, jc->lse[row], e->oref,
                           lse * a->lse_mul, dv);
            return 1;
        }
    }
    return 0;
}

/* Tries every applying hypothesis on one failing finite row; *hit[j] says which explain it. */
static fc_status examine(exam *e, diag_report *r, size_t row, uint8_t *hit, fc_err *err)
{
    const attn_problem *p = e->in->jc->prob;
    diag_key k = key_of(e, &e->truth, row);
    e->truth.keys(&e->truth, &k, e->tkeys);
    for (size_t j = 0; j < e->nalts; j++) {
        double fit = 0;
        int x = explains(e, &e->alts[j], row, &fit, err);
        if (x < 0)
            return FC_EINVAL;
        hit[j] = (uint8_t)x;
        if (x)
            r->findings[j].fit += fit; /* a sum here; the mean after the last row (diag_run) */
        if (x && rows_add(&r->findings[j].rows, p, k.b, k.h, k.tq))
            return fc_errf(err, FC_ENOMEM, "diagnosis: out of memory");
    }
    return FC_OK;
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

/* What the report may claim (diag.h): whole causes (every examined row), and without one the
 * heads whose every examined failing row one hypothesis explains (group causes, their rows in
 * group_rows); the examined rows no cause covers go to unexplained. rows[i] is the i-th
 * examined row, hits[i * nalts + j] whether hypothesis j explains it. */
static fc_status classify(const exam *e, diag_report *r, const size_t *rows, const uint8_t *hits,
                          fc_err *err)
{
    const attn_problem *p = e->in->jc->prob;
    size_t na = e->nalts, lq = (size_t)p->seq.lq;
    int whole = 0;
    for (size_t j = 0; j < na; j++)
        whole |= r->examined > 0 && r->findings[j].rows.count == r->examined;
    /* heads are runs of consecutive examined rows (rows come in row order) */
    for (size_t i0 = 0, i1; i0 < r->examined; i0 = i1) {
        size_t head = rows[i0] / lq;
        for (i1 = i0; i1 < r->examined && rows[i1] / lq == head; i1++)
            ;
        int covered = whole;
        for (size_t j = 0; j < na && !whole; j++) {
            size_t n = 0;
            for (size_t i = i0; i < i1; i++)
                n += hits[i * na + j];
            if (n < i1 - i0)
                continue;
            covered = 1;
            diag_finding *f = &r->findings[j];
            f->ngroups++;
            for (size_t i = i0; i < i1; i++)
                if (rows_add(&f->group_rows, p, (int32_t)(rows[i] / lq / (size_t)p->hq),
                             (int32_t)(rows[i] / lq % (size_t)p->hq), (int32_t)(rows[i] % lq)))
                    return fc_errf(err, FC_ENOMEM, "diagnosis: out of memory");
        }
        for (size_t i = i0; i < i1 && !covered; i++)
            if (rows_add(&r->unexplained, p, (int32_t)(rows[i] / lq / (size_t)p->hq),
                         (int32_t)(rows[i] / lq % (size_t)p->hq), (int32_t)(rows[i] % lq)))
                return fc_errf(err, FC_ENOMEM, "diagnosis: out of memory");
    }
    return FC_OK;
}

/* The order findings are reported in: whole causes, group causes, partial fits, then the rest. */
static int rank(const diag_report *r, const diag_finding *f)
{
    return r->examined && f->rows.count == r->examined ? 3 : f->ngroups ? 2 : f->rows.count ? 1
                                                                                            : 0;
}

/* By rank, then most rows (a group cause: most rows in its heads), ties in table order: an
 * insertion sort on (rank, count, table index idx[i]), idx sorted alongside. */
static int before(const diag_report *r, const diag_finding *a, size_t ia, const diag_finding *b,
                  size_t ib)
{
    int ra = rank(r, a), rb = rank(r, b);
    size_t ca = ra == 2 ? a->group_rows.count : a->rows.count;
    size_t cb = rb == 2 ? b->group_rows.count : b->rows.count;
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
    r->nexplaining = r->ncauses = 0;
    while (r->nexplaining < n && r->findings[r->nexplaining].rows.count > 0)
        r->nexplaining++;
    while (r->ncauses < n && rank(r, &r->findings[r->ncauses]) == 3)
        r->ncauses++;
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
           a->only_empty == b->only_empty;
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
    size_t dv = (size_t)p->dv, lq = (size_t)p->seq.lq, nrows = attn_lse_elems(p);
    diag_report *r = calloc(1, sizeof *r);
    size_t *failing = malloc(sizeof(size_t) * (nrows + 1)), nfail = 0;
    uint8_t *hits = NULL; /* [examined][nalts]: which hypotheses explain each examined row */
    exam e;
    memset(&e, 0, sizeof e);
    if (!r || !failing) {
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
            if (rows_add(&r->nonfinite, p, (int32_t)(row / lq / (size_t)p->hq),
                         (int32_t)(row / lq % (size_t)p->hq), (int32_t)(row % lq)))
                st = fc_errf(err, FC_ENOMEM, "diagnosis: out of memory");
        } else if (!diag_row_matches(&bd, o, lse, jc->out + row * dv, jc->lse[row], dv)) {
            r->failing++;
            failing[nfail++] = row;
        }
    }
    /* H2 alone failed: no row is past the H1/H5 bounds, so the rows examined are those that
     * carry the NMSE, each past its share of the squared error H2 allows. */
    if (!st && r->failing == 0 && in->v->gate[REP_H2] == REP_FAIL)
        nfail = h2_rows(in, &bd, r, failing);
    if (!st)
        st = exam_init(&e, in, &bd, r, err);
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
    hits = calloc(r->examined * (e.nalts ? e.nalts : 1) + 1, 1);
    size_t *picked = malloc(sizeof(size_t) * (r->examined + 1));
    if (!hits || !picked) {
        free(picked);
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
            st = examine(&e, r, failing[i], hits + next * e.nalts, err);
            next++;
        } else if (rows_add(&r->skipped, p, (int32_t)(failing[i] / lq / (size_t)p->hq),
                            (int32_t)(failing[i] / lq % (size_t)p->hq),
                            (int32_t)(failing[i] % lq))) {
            st = fc_errf(err, FC_ENOMEM, "diagnosis: out of memory");
        }
    }
    if (!st)
        st = classify(&e, r, picked, hits, err);
    free(picked);
    for (size_t j = 0; !st && j < r->nfindings; j++)
        if (r->findings[j].rows.count)
            r->findings[j].fit /= (double)r->findings[j].rows.count;
    if (!st) {
        sort_findings(r, e.hyp_of);
        pick_closest(r);
    }
done:
    exam_free(&e);
    free(failing);
    free(hits);
    if (st)
        diag_report_free(r);
    else
        *out = r;
    return st;
}

/* ---- printing --------------------------------------------------------------------------- */

void diag_range_text(char *buf, size_t cap, const attn_problem *p, const diag_range *r)
{
    int n = r->q0 == r->q1
                ? snprintf(buf, cap, "(%d, %d, %d)", (int)r->b, (int)r->h, (int)r->q0)
                : snprintf(buf, cap, "(%d, %d, %d..%d)", (int)r->b, (int)r->h, (int)r->q0,
                           (int)r->q1);
    if (n < 0 || (size_t)n >= cap || !p->seq.packed || !p->seq.cu_q || p->seq.nseq < 1)
        return;
    /* rows_add keeps a range inside one sequence */
    int32_t s = seq_find(p->seq.cu_q, p->seq.nseq, r->q0), q0 = p->seq.cu_q[s];
    if (r->q0 == r->q1)
        snprintf(buf + n, cap - (size_t)n, ", sequence %d position %d", (int)s, (int)(r->q0 - q0));
    else
        snprintf(buf + n, cap - (size_t)n, ", sequence %d positions %d..%d", (int)s,
                 (int)(r->q0 - q0), (int)(r->q1 - q0));
}

/* "(b, h, q) = (0, 1, 40..43); (0, 1, 50); and 3 more ranges" */
static void print_ranges(FILE *f, const diag_rows *s, const attn_problem *p)
{
    fputs("(b, h, q) = ", f);
    for (size_t i = 0; i < s->nranges && i < DIAG_PRINT_RANGES; i++) {
        char buf[160];
        diag_range_text(buf, sizeof buf, p, &s->r[i]);
        fprintf(f, "%s%s", i ? "; " : "", buf);
    }
    if (s->nranges > DIAG_PRINT_RANGES)
        fprintf(f, "; and %zu more ranges", s->nranges - DIAG_PRINT_RANGES);
}

static const char *plural(size_t n)
{
    return n == 1 ? "" : "s";
}

/* What "all N failing rows" leaves out: " examined (of M)" when the budget left rows out, and
 * " with a finite output" when non-finite rows (H3's, never tried) fail too. */
static void of_examined(char *buf, size_t cap, const diag_report *r)
{
    buf[0] = '\0';
    fc_fmt(buf, cap, "%s%s", r->nonfinite.count ? " with a finite output" : "", "");
    if (r->not_examined)
        fc_fmt(buf + strlen(buf), cap - strlen(buf), " examined (of %zu)",
               r->examined + r->not_examined);
}

void diag_summary(char *buf, size_t cap, const diag_report *r, const attn_problem *p)
{
    if (!cap)
        return;
    buf[0] = '\0';
    if (r->failing == 0)
        return;
    if (r->nonfinite.count == r->failing) {
        fc_fmt(buf, cap, "all %zu failing row%s non-finite (H3): no hypothesis tried",
               r->failing, r->failing == 1 ? " is" : "s are");
        return;
    }
    char first[96], sample[64];
    of_examined(sample, sizeof sample, r);
    if (r->ncauses) {
        const diag_finding *x = &r->findings[0];
        diag_range_text(first, sizeof first, p, &x->rows.r[0]);
        if (r->ncauses == 1)
            fc_fmt(buf, cap, "%s: all %zu failing row%s%s, (b, h, q) = %s%s", x->title,
                   r->examined, plural(r->examined), sample, first,
                   x->rows.nranges > 1 ? " ..." : "");
        else
            fc_fmt(buf, cap, "one of %s; %s%s (indistinguishable here): all %zu failing rows%s, "
                   "(b, h, q) = %s%s", x->title, r->findings[1].title,
                   r->ncauses > 2 ? "; ..." : "", r->examined, sample, first,
                   x->rows.nranges > 1 ? " ..." : "");
        return;
    }
    if (r->nexplaining && r->findings[0].ngroups) {
        const diag_finding *x = &r->findings[0];
        diag_range_text(first, sizeof first, p, &x->group_rows.r[0]);
        fc_fmt(buf, cap, "in %zu head%s, %s: %zu of %zu failing rows%s, (b, h, q) = %s%s",
               x->ngroups, plural(x->ngroups), x->title, x->group_rows.count, r->examined,
               sample, first, x->group_rows.nranges > 1 ? " ..." : "");
        return;
    }
    if (r->nexplaining)
        fc_fmt(buf, cap, "no hypothesis explains all %zu failing rows%s (partial fits only, the "
               "largest %s on %zu)", r->examined, sample, r->findings[0].title,
               r->findings[0].rows.count);
    else
        fc_fmt(buf, cap, "no hypothesis explains the %zu failing row%s%s", r->examined,
               plural(r->examined), sample);
}

void diag_explain(const diag_in *in, rep_row *row, FILE *f, const char *indent)
{
    diag_report *r;
    fc_err err;
    if (diag_run(in, &r, &err)) {
        if (row)
            fc_fmt(row->explained, sizeof row->explained, "diagnosis not run: %s", err.msg);
        if (f)
            fprintf(f, "%sdiagnosis: not run: %s\n", indent ? indent : "", err.msg);
        return;
    }
    if (row)
        diag_summary(row->explained, sizeof row->explained, r, in->jc->prob);
    if (f)
        diag_print(f, r, in->jc->prob, indent);
    diag_report_free(r);
}

void diag_print(FILE *f, const diag_report *r, const attn_problem *p, const char *indent)
{
    if (!indent)
        indent = "";
    if (r->failing == 0) { /* diag_explain runs on failed outputs: say what failed instead */
        fprintf(f, "%sdiagnosis: every row is within the H1 and H5 bounds of the truth, and no "
                   "row carries more than its share of H2's error: no row to examine\n",
                indent);
        return;
    }
    fprintf(f, "%sdiagnosis: %zu of %zu rows failing (%zu non-finite), %zu examined under %zu "
               "hypotheses\n", indent, r->failing, r->rows, r->nonfinite.count, r->examined,
            r->nfindings);
    if (r->h2_mode)
        fprintf(f, "%sH2 alone failed: the rows examined are those whose squared error passes "
                   "their share of H2's allowance (%.3g each), and a hypothesis explains a row "
                   "whose squared error against it is within that share or within NMSE_tol "
                   "times its own squared sum\n",
                indent, r->h2_row_share);
    char sample[64];
    of_examined(sample, sizeof sample, r);
    if (r->ncauses == 1) {
        const diag_finding *x = &r->findings[0];
        fprintf(f, "%sexplained by %s: all %zu failing row%s%s: ", indent, x->title, r->examined,
                plural(r->examined), sample);
        print_ranges(f, &x->rows, p);
        fputc('\n', f);
        if (r->nalso) {
            fprintf(f, "%salso within the bounds on every failing row, less closely: ", indent);
            for (size_t i = 1; i <= r->nalso; i++)
                fprintf(f, "%s%s (failing values on average %.2g of their bounds away)",
                        i > 1 ? "; " : "", r->findings[i].title, r->findings[i].fit);
            fprintf(f, "; the cause %.2g\n", x->fit);
        }
    } else if (r->ncauses > 1) {
        fprintf(f, "%sexplained by one of %zu hypotheses, each within the bounds on every "
                   "failing row, none %g times closer (indistinguishable here): ", indent,
                r->ncauses, DIAG_CLOSER);
        for (size_t i = 0; i < r->ncauses; i++)
            fprintf(f, "%s%s", i ? "; " : "", r->findings[i].title);
        fprintf(f, ": all %zu failing row%s%s: ", r->examined, plural(r->examined), sample);
        print_ranges(f, &r->findings[0].rows, p);
        fputc('\n', f);
    }
    size_t partial = 0;
    for (size_t i = r->ncauses + r->nalso; i < r->nexplaining; i++) {
        const diag_finding *x = &r->findings[i];
        if (!x->ngroups) {
            partial++;
            continue;
        }
        fprintf(f, "%sexplained in %zu head%s by %s: all %zu failing row%s there: ", indent,
                x->ngroups, plural(x->ngroups), x->title, x->group_rows.count,
                plural(x->group_rows.count));
        print_ranges(f, &x->group_rows, p);
        fputc('\n', f);
    }
    if (partial) {
        fprintf(f, "%spartial fits, no cause: ", indent);
        for (size_t i = r->ncauses + r->nalso, n = 0; i < r->nexplaining; i++)
            if (!r->findings[i].ngroups)
                fprintf(f, "%s%s on %zu of %zu rows", n++ ? "; " : "", r->findings[i].title,
                        r->findings[i].rows.count, r->examined);
        fputc('\n', f);
    }
    if (r->unexplained.count) {
        fprintf(f, "%snot explained: %zu row%s: ", indent, r->unexplained.count,
                plural(r->unexplained.count));
        print_ranges(f, &r->unexplained, p);
        fputc('\n', f);
    }
    if (r->nonfinite.count) {
        fprintf(f, "%snot explained: %zu row%s: ", indent, r->nonfinite.count,
                plural(r->nonfinite.count));
        print_ranges(f, &r->nonfinite, p);
        fputs(" (non-finite output: H3)\n", f);
    }
    if (r->skipped.count) {
        fprintf(f, "%snot examined (work budget of %" PRIu64 " multiply-adds): %zu row%s: ",
                indent, r->budget, r->skipped.count, plural(r->skipped.count));
        print_ranges(f, &r->skipped, p);
        fputc('\n', f);
    }
    if (r->nexplaining < r->nfindings) {
        fprintf(f, "%stried, explaining no row: ", indent);
        for (size_t i = r->nexplaining; i < r->nfindings; i++)
            fprintf(f, "%s%s", i > r->nexplaining ? "; " : "", r->findings[i].title);
        fputc('\n', f);
    }
}

void diag_after_run(const judge_run_in *in, const rep_verdict *v, rep_row *row)
{
    if (row->outcome != REP_ROW_FAIL || v->unscaled)
        return;
    diag_in d = {.jc = in->jc, .o = in->o, .lse = in->lse, .v = v, .bm = in->bm,
                 .budget = DIAG_RUN_BUDGET};
    diag_explain(&d, row, NULL, NULL);
}
