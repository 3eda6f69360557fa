/*
 * diag_run.c - the diagnosis run (diag.h): it sorts rows into failing and non-finite with the truth
 * verdict's bounds, sets up every hypothesis's alternative (hyps.c), examines the failing rows
 * under the budget (diag_eval.c computes each alternative's row and its fit) and hands the
 * hits to diag_claims.c, which decides what may be claimed.
 */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/cancel.h"
#include "base/lowp.h"
#include "diag/diag_internal.h"
#include "ref/ref.h"

void diag_report_free(diag_report *r)
{
    if (!r)
        return;
    diag_rows_free(&r->nonfinite);
    diag_rows_free(&r->unexplained);
    diag_rows_free(&r->skipped);
    for (size_t i = 0; i < r->nfindings; i++) {
        diag_rows_free(&r->findings[i].rows);
        diag_rows_free(&r->findings[i].group_rows);
    }
    free(r->findings);
    free(r);
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
    size_t rows = judge_rows(jc);
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

/* 1 if alternative a explains failing row `row` (*fit: how closely, row_fit), 0 if not, -1 on
 * a reference error. The truth's own computation cannot explain a row that fails against it. */
static int explains(diag_exam *e, const diag_alt *a, size_t row, double *fit, fc_err *err)
{
    int x = diag_alt_vs_row(e, a, row, fit, err);
    return x < 0 ? -1 : x == ALT_MATCH;
}

/* Tries every applying hypothesis on one failing finite row; hit[j] says which explain it and
 * fits[j] how closely, *tfit how far the row is from the truth in the same units (above 1). */
static fc_status examine(diag_exam *e, diag_report *r, size_t row, uint8_t *hit, double *fits,
                         double *tfit, fc_err *err)
{
    const judge_case *jc = e->in->jc;
    size_t dv = (size_t)jc->prob->dv;
    const float *o = e->in->o + row * dv, *ol = e->in->lse ? e->in->lse + row : NULL;
    const double *g = jc->out + row * dv;
    diag_truth_keys(e, row);
    *tfit = diag_row_fit(e->bd, o, ol, g, jc->lse[row], g, jc->lse[row], dv);
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
        if (diag_add_row(&r->findings[j].rows, jc, row))
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
           a->sink_shift == b->sink_shift && a->key_end == b->key_end &&
           a->key_wrap == b->key_wrap && a->split_at == b->split_at &&
           a->xmask.bits == b->xmask.bits && a->x_dq == b->x_dq && a->x_dk == b->x_dk &&
           a->x_transposed == b->x_transposed && a->xmask_head == b->xmask_head &&
           a->xbias.vals == b->xbias.vals && a->xbias_head == b->xbias_head &&
           a->bias_mul == b->bias_mul && a->bias_before_cap == b->bias_before_cap &&
           a->fill_biased == b->fill_biased && a->pg_seq == b->pg_seq && a->pg_j == b->pg_j &&
           a->pg_page == b->pg_page && a->pg_row == b->pg_row;
}

/* A hypothesis computing what an earlier one computes on this case (window W+1 and 2W at
 * W = 1, the default scale applied twice and 1/D) is not tried twice: it is the same
 * alternative, and its name joins the earlier one's title ("window W+1 (1 -> 2), here the
 * same as window doubled 2W"). Returns 1 when a was merged so. */
static int merge_same(diag_exam *e, diag_report *r, const diag_alt *a)
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

/* The hypotheses that apply, their findings (empty), and the scratch. */
/* Where the failing rows start (diag_onset): the first failing token judged over every (b, h)
 * and the last judged token before it (the tokens judged are the same in every head). */
static diag_onset onset_of(const judge_case *jc, const uint8_t *state, size_t nrows)
{
    size_t per = judge_per_head(jc);
    diag_onset o = {-1, -1};
    size_t first = per; /* the index in a head of the first failing token */
    for (size_t row = 0; row < nrows; row++)
        if (state[row] != ROW_PASS && row % per < first)
            first = row % per;
    if (first < per) {
        o.hi = judge_row_token(jc, first);
        o.lo = first > 0 ? judge_row_token(jc, first - 1) : -1;
    }
    return o;
}

static fc_status exam_init(diag_exam *e, const diag_in *in, const diag_bounds *bd, diag_report *r,
                           const uint8_t *state, fc_err *err)
{
    const attn_problem *p = in->jc->prob;
    memset(e, 0, sizeof *e);
    e->onset = onset_of(in->jc, state, r->rows);
    e->in = in;
    e->bd = bd;
    diag_alt_init(in, &e->truth);
    size_t cap = diag_nhyps + (in->paged ? DIAG_PAGED_MAX : 0);
    e->alts = calloc(cap, sizeof *e->alts);
    e->hyp_of = calloc(cap, sizeof *e->hyp_of);
    r->findings = calloc(cap, sizeof *r->findings);
    e->tkeys = malloc((size_t)p->seq.lk + 1);
    e->hkeys = malloc((size_t)p->seq.lk + 1);
    e->oref = malloc(sizeof(double) * (size_t)p->dv);
    /* Sub-tiles of 16 keys or more, one more a listed block for its ragged end. */
    e->tiles = malloc(sizeof(int32_t) * 2 *
                      DIAG_MAX_TILES((size_t)p->seq.lk, in->bm ? (size_t)in->bm->nkb : 0));
    if (!e->alts || !e->hyp_of || !r->findings || !e->tkeys || !e->hkeys || !e->oref ||
        !e->tiles)
        return fc_errf(err, FC_ENOMEM, "diagnosis: out of memory");
    int wraps = 0, splits = 0;
    for (size_t h = 0; h < diag_nhyps; h++) {
        diag_alt *a = &e->alts[e->nalts];
        diag_alt_init(in, a);
        a->onset = &e->onset;
        if (!diag_hyps[h].setup(in, a) || merge_same(e, r, a))
            continue;
        wraps |= a->key_wrap > 0;
        splits |= a->split_at > 0;
        diag_finding *f = &r->findings[e->nalts];
        f->name = diag_hyps[h].name;
        f->fitted = a->fitted;
        memcpy(f->title, a->title, sizeof f->title);
        e->hyp_of[e->nalts++] = h;
    }
    /* A page read from the wrong slot: candidates from the failing rows (hyps_paged.c), after
     * the table's hypotheses (ties go to those) */
    const char *names[DIAG_PAGED_MAX];
    size_t np = in->paged ? diag_paged_alts(in, state, e->alts + e->nalts, cap - e->nalts, names)
                          : 0;
    for (size_t i = 0; i < np; i++) {
        diag_finding *f = &r->findings[e->nalts];
        f->name = names[i];
        memcpy(f->title, e->alts[e->nalts].title, sizeof f->title);
        e->hyp_of[e->nalts] = diag_nhyps + i;
        e->nalts++;
        wraps = 1; /* the row's keys and values are read into wk, wv */
    }
    r->nfindings = e->nalts;
    /* the length bugs' scratch (diag_eval.c alt_row_f64) */
    size_t lk = (size_t)p->seq.lk;
    if (wraps && (!(e->wk = malloc(sizeof(float) * (lk * (size_t)p->d + 1))) ||
                  !(e->wv = malloc(sizeof(float) * (lk * (size_t)p->dv + 1)))))
        return fc_errf(err, FC_ENOMEM, "diagnosis: out of memory");
    if (splits && (!(e->pkeys = malloc(lk + 1)) ||
                   !(e->oref2 = malloc(sizeof(double) * ((size_t)p->dv + 1)))))
        return fc_errf(err, FC_ENOMEM, "diagnosis: out of memory");
    return FC_OK;
}

static void exam_free(diag_exam *e)
{
    free(e->alts);
    free(e->hyp_of);
    free(e->tkeys);
    free(e->hkeys);
    free(e->oref);
    free(e->tiles);
    free(e->wk);
    free(e->wv);
    free(e->pkeys);
    free(e->oref2);
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
    size_t dv = (size_t)p->dv, nrows = judge_rows(jc);
    diag_report *r = calloc(1, sizeof *r);
    size_t *failing = malloc(sizeof(size_t) * (nrows + 1)), nfail = 0, *picked = NULL;
    uint8_t *state = calloc(nrows + 1, 1); /* ROW_*: every row's standing */
    uint8_t *hits = NULL; /* [examined][nalts]: which hypotheses explain each examined row */
    double *fits = NULL, *tfits = NULL; /* how closely: [examined][nalts], the truth [examined] */
    diag_exam e;
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
            if (diag_add_row(&r->nonfinite, jc, row))
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
        r->nan_empty = diag_nan_empty_rows(in, r, state);
        st = exam_init(&e, in, &bd, r, state, err);
    }
    if (st)
        goto done;

    /* The budget: each examined row costs about Lk * D per reference row a hypothesis
     * computes: one (one per way for a softmax in the input type, ref_rows_of), and an online
     * softmax's one per try more. */
    uint64_t units = 0;
    for (size_t j = 0; j < e.nalts; j++)
        units += diag_ref_rows_of(&e.alts[j], p->terms.sinks != NULL) + (uint64_t)e.alts[j].ntries;
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
        } else if (diag_add_row(&r->skipped, jc, failing[i])) {
            st = fc_errf(err, FC_ENOMEM, "diagnosis: out of memory");
        }
    }
    for (size_t j = 0; !st && j < r->nfindings; j++)
        if (r->findings[j].rows.count) {
            r->findings[j].fit /= (double)r->findings[j].rows.count;
            r->findings[j].truth_fit /= (double)r->findings[j].rows.count;
        }
    if (!st)
        st = diag_classify(&e, r, state, picked, hits, fits, tfits, err);
    if (!st) {
        diag_sort_findings(r, e.hyp_of);
        diag_pick_closest(r);
        if (!r->ncauses)
            diag_gather_evidence(&e, r, state);
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
