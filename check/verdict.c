/*
 * verdict.c - one output judged (check.h: chk_judge_output, chk_result_print): the gates against
 * the case's oracle and baselines, the producer's own block mask against the case's mask,
 * p-round's rule on a designed case, the diagnosis of a failure, and the lines check prints for
 * it. Nothing here reads a file: the public library (include/flexcheck.h) judges the outputs it
 * is handed through this file alone, without the fixture reader (HDF5); output.c judges the
 * outputs a file stores through it.
 */
#include <stdio.h>
#include <string.h>

#include "check/check.h"
#include "judge/exact.h"

/* The producer's own block mask against the case's mask (the families AND its explicit mask),
 * as one line into text: 1 when it drops or leaks keys. */
static int producer_bmask(const judge_case *jc, const bmask *bm, char *text, size_t cap)
{
    bmask_defects d;
    fc_err err;
    if (bmask_find_defects_x(bm, jc->prob->mask, &jc->prob->seq, jc->prob->xmask, &d, &err)) {
        fc_fmt(text, cap, "cannot be checked: %s", err.msg);
        return 0;
    }
    bmask_defects_text(text, cap, bm, &d);
    return d.dropped || d.leaked;
}

/* The outcome of the gates and the checks that follow them; detail and the diagnosis after. */
static chk_outcome judge_it(const judge_case *jc, const judge_lp *lp, const chk_output_in *in,
                            chk_result *res)
{
    rep_row *row = &res->row;
    if (in->not_judged) {
        rep_row_set_error(row, in->not_judged);
        return CHK_NOT_JUDGED;
    }
    fc_err err;
    int pass = judge_given_lse(jc, in->o, in->lse, in->lse_dtype, in->o_rerun, lp, &res->v,
                               &err);
    if (pass < 0) {
        rep_row_set_error(row, err.msg);
        return CHK_NOT_JUDGED;
    }
    rep_row_set_verdict(row, &res->v);
    if (in->bm) {
        res->bm_qb = in->bm->q_block_size;
        res->bm_kb = in->bm->kv_block_size;
    }
    if (in->bm && producer_bmask(jc, in->bm, res->bm_text, sizeof res->bm_text)) {
        judge_row_fail_check(row, "block-mask", "the producer's block mask is %s", res->bm_text);
        return CHK_FAILED;
    }
    /* p-round's design reads every row (a sample of it is no design: not run) */
    if (jc->designed && !jc->tokens &&
        (row->outcome == REP_ROW_PASS || row->outcome == REP_ROW_OUTSIDE)) {
        char msg[REP_WHY_LEN];
        int r = judge_pround(jc, in->o, msg, sizeof msg);
        if (r < 0) {
            rep_row_set_error(row, msg);
            return CHK_NOT_JUDGED;
        }
        /* FlexAttention's rounding of P is a profile a producer claims, not a rule for every
         * producer: one keeping P in float32 is closer to the oracle, and passes the gates. */
        if (r == 0 && in->rounds_like_flex) {
            judge_row_fail_check(row, "p-round", "%s", msg);
            return CHK_FAILED;
        }
        if (r == 0)
            fc_fmt(res->note, sizeof res->note, "note: p-round (not claimed; the producer "
                   "does not say it rounds P as FlexAttention does): %s", msg);
    }
    if (res->v.outside)
        return in->strict ? CHK_FAILED : CHK_OUTSIDE;
    /* only the verdict's gates failed (not the block mask nor p-round), on a sample's rows */
    res->on_bounds = jc->tokens && !pass && rep_fails_on_bounds(&res->v);
    return pass ? CHK_PASSED : CHK_FAILED;
}

void chk_judge_output(const judge_case *jc, const judge_lp *lp, const chk_output_in *in,
                      chk_result *res)
{
    memset(&res->v, 0, sizeof res->v);
    res->bm_text[0] = res->diag_error[0] = res->note[0] = res->sample[0] = '\0';
    res->bm_qb = res->bm_kb = 0;
    res->on_bounds = 0;
    res->diag = NULL;
    chk_outcome oc = res->outcome = judge_it(jc, lp, in, res);
    const rep_verdict *v = &res->v;
    rep_row *row = &res->row;
    if (oc == CHK_OUTSIDE || v->outside || oc == CHK_NOT_JUDGED) {
        fc_fmt(res->detail, sizeof res->detail, "%s", row->reason);
    } else if (oc == CHK_PASSED) {
        char lse_note[64] = "";
        if (!in->lse)
            fc_fmt(lse_note, sizeof lse_note, "; no LSE stored, H5 not run");
        else if (in->lse_dtype != FC_F32)
            fc_fmt(lse_note, sizeof lse_note, "; LSE stored as %s, judged at its resolution",
                   fc_dtype_name(in->lse_dtype));
        fc_fmt(res->detail, sizeof res->detail, "passes the gates (H1 ratio %.3g%s%s)",
               v->h1_ratio, lse_note, in->o_rerun ? "; rerun bitwise equal" : "");
    } else if (v->first_fail >= 0 && v->first_fail != REP_H1 && !v->unscaled) {
        char at[112];
        attn_row_where(at, sizeof at, jc->prob, judge_full_row(jc, v->worst_row),
                       (int64_t)v->worst_col);
        fc_fmt(res->detail, sizeof res->detail, "%s; largest |err| %.3g at %s", row->reason,
               v->max_err, at);
    } else {
        fc_fmt(res->detail, sizeof res->detail, "%s", row->reason);
    }
    /* Which rows fail, which bug explains them: not without a baseline's bounds (unscaled). */
    if (oc == CHK_FAILED && !v->pass && !v->unscaled) {
        diag_in d = {.jc = jc, .o = in->o, .lse = in->lse, .v = v, .bm = in->bm,
                     .prev = in->prev, .budget = in->diag_budget, .out_dtype = in->out_dtype,
                     .paged = in->paged};
        fc_err err;
        if (diag_run(&d, &res->diag, &err)) {
            res->diag = NULL;
            fc_fmt(res->diag_error, sizeof res->diag_error, "%s", err.msg);
            fc_fmt(row->explained, sizeof row->explained, "diagnosis not run: %s", err.msg);
        } else {
            diag_summary(row->explained, sizeof row->explained, res->diag, jc->prob);
        }
    } else if (oc == CHK_FAILED && !v->pass) { /* a failure outside H1's contract: say so */
        fc_fmt(res->diag_error, sizeof res->diag_error, "no %s baseline holds every row of this "
               "case (outside the contract), so there are no H1 bounds to hold the hypotheses' "
               "rows to", fc_dtype_name(jc->dtype));
        fc_fmt(row->explained, sizeof row->explained, "diagnosis not run: %s", res->diag_error);
    }
}

void chk_result_free(chk_result *res)
{
    diag_report_free(res->diag);
    res->diag = NULL;
}

void chk_result_print(FILE *f, const chk_result *res, const chk_who *who, const judge_case *jc)
{
    const rep_verdict *v = &res->v;
    chk_outcome oc = res->outcome;
    const char *verdict = oc == CHK_PASSED ? "PASS" : oc == CHK_OUTSIDE ? "OUTSIDE" : "FAIL";
    const char *sep = res->sample[0] ? "; " : ""; /* a sample says so on the verdict line */
    if (who->where)
        fprintf(f, "%s %s %s tested/%s %s (%s, out stored as %s): %s%s%s\n", verdict,
                fc_esc(who->where).s, fc_esc(who->name).s, fc_esc(who->label).s,
                fc_dtype_name(jc->dtype), fc_esc(who->producer).s, fc_esc(who->encoding).s,
                fc_esc(res->detail).s, sep, res->sample);
    else /* judged in process (include/flexcheck.h): no file, label or stored encoding */
        fprintf(f, "%s %s %s: %s%s%s\n", verdict, fc_esc(who->name).s, fc_dtype_name(jc->dtype),
                fc_esc(res->detail).s, sep, res->sample);
    for (int g = 0; oc == CHK_FAILED && g < REP_NGATES; g++) /* every other failed gate too */
        if (v->gate[g] == REP_FAIL && g != v->first_fail)
            fprintf(f, "    also %s\n", v->why[g]); /* the gates' own words and numbers */
    if (res->bm_text[0])
        fprintf(f, "    its block mask (%dx%d): %s\n", (int)res->bm_qb, (int)res->bm_kb,
                res->bm_text); /* bmask_defects_text's words and numbers */
    if (v->lp_note[0]) /* which baseline judged which rows: the verdict rests on it */
        fprintf(f, "    note: %s\n", v->lp_note);
    if (res->note[0])
        fprintf(f, "    %s\n", fc_esc(res->note).s);
    if (res->diag)
        diag_print(f, res->diag, jc->prob, "    ");
    else if (res->diag_error[0])
        fprintf(f, "    diagnosis: not run: %s\n", fc_esc(res->diag_error).s);
}

void chk_sample_confirmed(char *buf, size_t cap, const char *gates, int32_t n, int32_t lq,
                          uint64_t seed)
{
    fc_fmt(buf, cap, "a sample of %d of %d query tokens (seed %llu) "
           "failed %s on its own bounds (taken over the rows judged, they can be tighter than "
           "every row's): judged again on every row", (int)n, (int)lq,
           (unsigned long long)seed, gates);
}

void chk_sample_unconfirmed(char *buf, size_t cap, const char *gates, const char *why)
{
    size_t n = strnlen(buf, cap);
    fc_fmt(buf + n, cap - n, "; its %s failure rests on the sample's "
           "bounds (every row's are never tighter), not confirmed on every row: %s", gates, why);
}

void chk_failed_gates(char *buf, size_t cap, const rep_verdict *v)
{
    size_t n = 0;
    buf[0] = '\0';
    for (int g = 0; g < REP_NGATES && n < cap; g++)
        if (v->gate[g] == REP_FAIL)
            n += (size_t)snprintf(buf + n, cap - n, "%s%s", n ? ", " : "", rep_gate_name(g));
}
