/* judge.c - one case judged (judge.h): buffers, the baseline, a given output under the gates,
 * the report row. No kernel here: judge_run.c runs them, so that judging a given output (the
 * public library, include/flexcheck.h) links neither the emu nor the CUDA runtime. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "judge/judge.h"
#include "ref/ref.h"

size_t judge_per_head(const judge_case *jc)
{
    return jc->tokens ? (size_t)jc->tokens->n : (size_t)jc->prob->seq.lq;
}

size_t judge_rows(const judge_case *jc)
{
    return (size_t)jc->prob->seq.batch * (size_t)jc->prob->hq * judge_per_head(jc);
}

int32_t judge_row_token(const judge_case *jc, size_t r)
{
    size_t n = judge_per_head(jc);
    return jc->tokens ? jc->tokens->tq[r % n] : (int32_t)(r % n);
}

size_t judge_full_row(const judge_case *jc, size_t r)
{
    size_t n = judge_per_head(jc);
    return r / n * (size_t)jc->prob->seq.lq + (size_t)judge_row_token(jc, r);
}

size_t judge_o_elems(const judge_case *jc)
{
    return judge_rows(jc) * (size_t)jc->prob->dv;
}

/* One spare element each: a zero-size case still gets distinct, freeable buffers. */
fc_status judge_bufs_alloc(judge_bufs *b, const judge_case *jc, fc_err *err)
{
    size_t no = judge_o_elems(jc) + 1, nl = judge_rows(jc) + 1;
    memset(b, 0, sizeof *b);
    b->o = malloc(sizeof(float) * no);
    b->lse = malloc(sizeof(float) * nl);
    if (!b->o || !b->lse) {
        judge_bufs_free(b);
        return fc_errf(err, FC_ENOMEM, "out of memory for %zu outputs", no);
    }
    return FC_OK;
}

void judge_bufs_free(judge_bufs *b)
{
    free(b->o);
    free(b->lse);
    judge_lp_free(&b->lp);
    memset(b, 0, sizeof *b);
}

void judge_lp_free(judge_lp *lp)
{
    free(lp->o);
    free(lp->lse);
    free(lp->o32s);
    free(lp->lse32s);
    memset(lp, 0, sizeof *lp);
}

void judge_lp_inputs(const judge_lp *lp, rep_inputs *ri)
{
    ri->o_lp = lp->o;
    ri->lse_lp = lp->lse;
    ri->o_lp32s = lp->o32s;
    ri->lse_lp32s = lp->lse32s;
}

fc_status judge_baseline(const judge_case *jc, judge_lp *lp, fc_err *err)
{
    size_t no = judge_o_elems(jc) + 1, nl = judge_rows(jc) + 1;
    judge_lp_free(lp);
    lp->o = malloc(sizeof(float) * no);
    lp->lse = malloc(sizeof(float) * nl);
    if (!lp->o || !lp->lse) {
        judge_lp_free(lp);
        return fc_errf(err, FC_ENOMEM, "out of memory for the baseline of %zu outputs", no);
    }
    fc_status st = ref_attention_lp_at(jc->prob, jc->dtype, jc->tokens, jc->q, jc->k, jc->v,
                                       lp->o, lp->lse, err);
    if (st || jc->dtype == FC_F32 || !jc->out || !jc->lse)
        return st; /* float32's baseline has its scores in float32 already */
    /* The float32-score baseline only where the dtype's drowns a row (docs/tolerance.md). */
    rep_inputs ri = {.dtype = jc->dtype, .rows = judge_rows(jc), .dv = (size_t)jc->prob->dv,
                     .o_gold = jc->out, .lse_gold = jc->lse, .o_lp = lp->o, .lse_lp = lp->lse,
                     .prob = jc->prob, .tokens = jc->tokens ? jc->tokens->tq : NULL,
                     .ntokens = jc->tokens ? jc->tokens->n : 0};
    if (!rep_lp_drowned_rows(&ri))
        return FC_OK;
    lp->o32s = malloc(sizeof(float) * no);
    lp->lse32s = malloc(sizeof(float) * nl);
    if (!lp->o32s || !lp->lse32s) {
        judge_lp_free(lp);
        return fc_errf(err, FC_ENOMEM, "out of memory for the baseline of %zu outputs", no);
    }
    return ref_attention_lp32s_at(jc->prob, jc->dtype, jc->tokens, jc->q, jc->k, jc->v, lp->o32s,
                                  lp->lse32s, err);
}

int judge_outputs(const judge_case *jc, const float *o, const float *lse, const judge_lp *lp,
                  rep_verdict *v, fc_err *err)
{
    return judge_given(jc, o, lse, NULL, lp, v, err);
}

int judge_given(const judge_case *jc, const float *o, const float *lse, const float *o_rerun,
                const judge_lp *lp, rep_verdict *v, fc_err *err)
{
    return judge_given_lse(jc, o, lse, FC_F32, o_rerun, lp, v, err);
}

int judge_given_lse(const judge_case *jc, const float *o, const float *lse, fc_dtype lse_dtype,
                    const float *o_rerun, const judge_lp *lp, rep_verdict *v, fc_err *err)
{
    rep_inputs ri = {
        .dtype = jc->dtype, .rows = judge_rows(jc), .dv = (size_t)jc->prob->dv,
        .o = o, .lse = lse, .o_gold = jc->out, .lse_gold = jc->lse,
        .o_rerun = o_rerun, .prob = jc->prob, .designed = jc->designed,
        .lse_dtype = lse_dtype, .tokens = jc->tokens ? jc->tokens->tq : NULL,
        .ntokens = jc->tokens ? jc->tokens->n : 0,
    };
    judge_lp_inputs(lp, &ri);
    if (rep_evaluate(&ri, v, err))
        return -1;
    return v->pass;
}

void judge_row_problem(rep_row *row, const attn_problem *p, fc_dtype dtype)
{
    row->b = p->seq.batch;
    row->hq = p->hq;
    row->hkv = p->hkv;
    row->lq = p->seq.lq;
    row->lk = p->seq.lk;
    row->d = p->d;
    row->dv = p->dv;
    row->nseq = p->seq.nseq; /* 1 dense, R packed: what tells a packed row apart */
    row->mask = p->mask;
    row->softcap = terms_value(&p->terms, TERM_SOFTCAP);
    row->sinks = (int32_t)terms_value(&p->terms, TERM_SINKS);
    row->dtype = dtype;
}

void judge_row_fail_check(rep_row *row, const char *check, const char *fmt, ...)
{
    if (row->outcome != REP_ROW_PASS && row->outcome != REP_ROW_OUTSIDE)
        return;
    va_list ap;
    char msg[REP_WHY_LEN];
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    row->outcome = REP_ROW_FAIL;
    rep_set_str(row->first_fail, sizeof row->first_fail, check);
    fc_fmt(row->reason, sizeof row->reason, "%s: %s", check, msg);
}

int judge_row_identical(const judge_case *jc, size_t r, const float *oa, const float *la,
                        const float *ob, const float *lb)
{
    size_t dv = (size_t)jc->prob->dv;
    return memcmp(oa + r * dv, ob + r * dv, dv * sizeof(float)) == 0 &&
           (!la || !lb || memcmp(&la[r], &lb[r], sizeof(float)) == 0);
}

size_t judge_first_differing_row(const judge_case *jc, const float *oa, const float *la,
                                 const float *ob, const float *lb)
{
    size_t r = 0, n = judge_rows(jc);
    while (r < n && judge_row_identical(jc, r, oa, la, ob, lb))
        r++;
    return r;
}
