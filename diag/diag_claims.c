/*
 * diag_claims.c - what the diagnosis may claim (diag.h), from the rows diag_run.c examined: whole
 * causes and the candidates refuted (by the passing rows, or as no closer than the correct
 * output), group causes per head, their order, the closest of several, rows with no key all
 * NaN, and the evidence about the rows no cause explains.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/cancel.h"
#include "diag/diag_internal.h"

/* ---- what makes a fitting hypothesis a cause (diag.h) ---------------------------------- */


typedef struct passing_check {
    size_t passing, checked, contradicted, first;
} passing_check;

/* The passing rows in [r0, r1) held to alternative a: a row a changes (its reference is not the
 * truth's) whose output matches none of a's references contradicts it, since the output is
 * right there. At most a quarter of the budget's work each call; past it a sample spread evenly
 * (pc->checked of pc->passing). */
static fc_status check_passing(diag_exam *e, const diag_report *r, const diag_alt *a,
                               const uint8_t *state, size_t r0, size_t r1, passing_check *pc,
                               fc_err *err)
{
    const attn_problem *p = e->in->jc->prob;
    memset(pc, 0, sizeof *pc);
    for (size_t row = r0; row < r1; row++)
        pc->passing += state[row] == ROW_PASS;
    uint64_t per_row = (uint64_t)(p->seq.lk > 0 ? p->seq.lk : 1) * (uint64_t)p->d *
                       (diag_ref_rows_of(a, p->terms.sinks != NULL) + (uint64_t)a->ntries);
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
            diag_truth_keys(e, row);
            int x = diag_alt_vs_row(e, a, row, &fit, err);
            if (x < 0)
                return FC_EINVAL;
            if (x == ALT_DIFF && pc->contradicted++ == 0)
                pc->first = row;
        }
    }
    return FC_OK;
}

/* The whole-case check pc into f: its counts and first contradicting row, as a range. */
static void note_contradiction(diag_finding *f, const judge_case *jc, const passing_check *pc)
{
    const attn_problem *p = jc->prob;
    size_t n = judge_per_head(jc);
    int32_t q = judge_row_token(jc, pc->first);
    if (f->contradicted == 0 && pc->contradicted)
        f->first_contradiction = (diag_range){(int32_t)(pc->first / n / (size_t)p->hq),
                                              (int32_t)(pc->first / n % (size_t)p->hq), q, q};
    f->contradicted += pc->contradicted;
    f->checked += pc->checked;
    f->passing += pc->passing;
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
fc_status diag_classify(diag_exam *e, diag_report *r, const uint8_t *state, const size_t *rows,
                          const uint8_t *hits, const double *fits, const double *tfits,
                          fc_err *err)
{
    size_t na = e->nalts, lq = judge_per_head(e->in->jc); /* rows per (b, h) */
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
        note_contradiction(f, e->in->jc, &pc);
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
                if (diag_add_row(&f->group_rows, e->in->jc, rows[i]))
                    return fc_errf(err, FC_ENOMEM, "diagnosis: out of memory");
        }
        for (size_t i = i0; i < i1 && !covered; i++)
            if (diag_add_row(&r->unexplained, e->in->jc, rows[i]))
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

void diag_sort_findings(diag_report *r, size_t *idx)
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

/* Several whole causes (each explains every examined row, diag.h): when one reproduces the
 * failing values DIAG_CLOSER times more closely than each of the others (its fit, the mean over
 * the rows, against theirs: a mean, so that one row on a rounding boundary does not hide a
 * bit-exact reproduction of the other 499), it is the cause and they fit "less closely"
 * (r->nalso, right after it): an LSE rounded to bfloat16 reproduced to the bit is not "scores
 * rounded to bfloat16", which also lands within H5's bound. Otherwise they stay
 * indistinguishable. */
/* The closeness rule on the first n causes: 1 when one is picked (moved first, nalso set). */
static int pick_closest_of(diag_report *r, size_t n)
{
    if (n < 2)
        return 0;
    size_t best = 0;
    for (size_t i = 1; i < n; i++)
        if (r->findings[i].fit < r->findings[best].fit)
            best = i;
    for (size_t i = 0; i < n; i++)
        if (i != best && !(r->findings[i].fit > 0 &&
                           r->findings[best].fit * DIAG_CLOSER <= r->findings[i].fit))
            return 0;
    diag_finding b = r->findings[best];
    memmove(&r->findings[1], &r->findings[0], best * sizeof b);
    r->findings[0] = b;
    r->nalso = n - 1;
    r->ncauses = 1;
    return 1;
}

/* Then, still tied: a cause whose index was fitted to the failing rows (a length hypothesis)
 * against causes that need none (diag.h's tie rule). The fitted index can reproduce what a
 * fixed rule computes (keys wrapped at K = nk - nq computing top-left alignment's rows), and
 * the rule that needed nothing fitted is the one the rows prove: the fitted ones go after the
 * others, not named (nfitted), and the closeness rule runs again on the rest. */
void diag_pick_closest(diag_report *r)
{
    if (r->ncauses < 2 || pick_closest_of(r, r->ncauses))
        return;
    size_t fixed = 0, n = r->ncauses;
    for (size_t i = 0; i < n; i++)
        fixed += !r->findings[i].fitted;
    if (fixed == 0 || fixed == n)
        return;
    diag_finding *tmp = malloc(n * sizeof *tmp);
    if (!tmp) /* left indistinguishable: true, if less precise */
        return;
    for (size_t i = 0, a = 0, b = fixed; i < n; i++)
        tmp[r->findings[i].fitted ? b++ : a++] = r->findings[i];
    memcpy(r->findings, tmp, n * sizeof *tmp);
    free(tmp);
    r->ncauses = fixed;
    r->nfitted = n - fixed;
    pick_closest_of(r, fixed);
}

/* The non-finite rows, when they are exactly the rows with no allowed key and each is wholly
 * NaN: a softmax over no key (0/0), the cause "rows with no allowed key are NaN" (diag.h).
 * Every such row must be so: a row with no key computed right refutes it. 0 otherwise. */
size_t diag_nan_empty_rows(const diag_in *in, const diag_report *r, const uint8_t *state)
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
void diag_gather_evidence(const diag_exam *e, diag_report *r, uint8_t *state)
{
    const judge_case *jc = e->in->jc;
    size_t lq = judge_per_head(jc); /* rows per (b, h) */
    for (size_t i = 0; i < r->nexplaining; i++)
        for (size_t j = 0; j < r->findings[i].group_rows.nranges; j++) {
            const diag_range *x = &r->findings[i].group_rows.r[j];
            size_t head = (size_t)x->b * (size_t)jc->prob->hq + (size_t)x->h;
            for (size_t row = head * lq; row < head * lq + lq; row++) {
                int32_t q = judge_row_token(jc, row);
                if (q >= x->q0 && q <= x->q1)
                    state[row] = ROW_PASS;
            }
        }
    if (r->nan_empty)
        for (size_t row = 0; row < r->rows; row++)
            if (state[row] == ROW_NONFINITE)
                state[row] = ROW_PASS;
    const attn_problem *p = jc->prob;
    const seq_view v = e->truth.view;
    diag_evidence *ev = &r->ev;
    memset(ev, 0, sizeof *ev);
    ev->heads_total = r->rows / (lq ? lq : 1);
    ev->from_q = -2; /* none seen yet */
    ev->from_lo = -1;
    int32_t before = -1; /* the token judged before the first head's first failing row */
    for (size_t head = 0; lq && head < ev->heads_total; head++) {
        int32_t first = -1, all_after = 1;
        for (size_t i = 0; i < lq; i++) {
            size_t row = head * lq + i;
            int32_t q = judge_row_token(jc, row);
            int fails = state[row] != ROW_PASS;
            int32_t s = seq_find(v.cu_q, v.nseq, q), lo, hi;
            mask_token_range(p->mask, v, q, &lo, &hi);
            if (p->xmask.bits && lo < hi) /* the families' keys AND the explicit mask's */
                lo = xmask_first(xmask_row(p->xmask, (int32_t)(head / (size_t)p->hq),
                                           (int32_t)(head % (size_t)p->hq), q), lo, hi);
            int start = q == v.cu_q[s], empty = lo >= hi;
            int decode = v.cu_q[s + 1] - v.cu_q[s] < v.cu_k[s + 1] - v.cu_k[s];
            ev->starts_total += (size_t)start;
            ev->empty_total += (size_t)empty;
            ev->decode_total += (size_t)decode;
            if (!fails) {
                all_after &= first < 0;
                continue;
            }
            if (first < 0) {
                first = q;
                before = i > 0 ? judge_row_token(jc, row - 1) : -1;
            }
            int zero = !empty && state[row] == ROW_FAIL;
            for (int32_t x = 0; zero && x < p->dv; x++)
                zero = e->in->o[row * (size_t)p->dv + (size_t)x] == 0.0f;
            ev->zero += (size_t)zero;
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
    if (ev->from_q > 0) { /* the same tokens in every head: one interval */
        ev->from_lo = before;
        ev->from_named = diag_thresholds_in(ev->from_names, sizeof ev->from_names, e->in,
                                            before, ev->from_q);
    }
}

