/* judge.c - one case judged: buffers, kernel runs, baseline and gates (judge.h). */
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

/* Elements of O: the rows times Dv. */
static size_t o_elems(const judge_case *jc)
{
    return judge_rows(jc) * (size_t)jc->prob->dv;
}

/* One spare element each: a zero-size case still gets distinct, freeable buffers. */
fc_status judge_bufs_alloc(judge_bufs *b, const judge_case *jc, fc_err *err)
{
    size_t no = o_elems(jc) + 1, nl = judge_rows(jc) + 1;
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
    size_t no = o_elems(jc) + 1, nl = judge_rows(jc) + 1;
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

fc_status judge_kernel(const judge_opts *jo, gpu_backend be, const judge_case *jc,
                       const bmask *bm, const int32_t *page_table, int32_t num_pages, float *o,
                       float *lse, gpu_result *res, fc_err *err)
{
    if (jc->tokens) /* the kernel computes whole cases; a sample of rows is for given outputs */
        return fc_errf(err, FC_EUNSUP, "a kernel run on a sample of rows: the kernel runs on "
                       "whole cases only");
    gpu_call call = {
        .p = jc->prob, .dtype = jc->dtype, .q = jc->q, .k = jc->k, .v = jc->v,
        .bm = bm, .kernel = jo->kernel, .backend = be,
        .page_table = page_table, .num_pages = num_pages,
    };
    return (jo->attention_fn ? jo->attention_fn : gpu_attention)(&call, o, lse, res, err);
}

fc_status judge_build_mask(const judge_opts *jo, bmask *out, bmask_builder b, mask_params m,
                           const seq_info *s, int32_t qb, int32_t kb, fc_err *err)
{
    return (jo->bmask_fn ? jo->bmask_fn : bmask_build)(out, b, m, s, qb, kb, err);
}

int judge_run(const judge_run_in *in, rep_row *row)
{
    const judge_case *jc = in->jc;
    size_t rows = judge_rows(jc), no = o_elems(jc);
    float *o2 = malloc(sizeof(float) * (no + 1)), *l2 = malloc(sizeof(float) * (rows + 1));
    fc_err err;
    gpu_result r1, r2;
    int passed = 0;
    if (!o2 || !l2) {
        rep_row_set_error(row, "out of memory");
        goto done;
    }
    fc_status st = judge_kernel(in->jo, in->backend, jc, in->bm, NULL, 0, in->o, in->lse, &r1,
                                &err);
    if (!st && in->rerun)
        st = judge_kernel(in->jo, in->backend, jc, in->bm, NULL, 0, o2, l2, &r2, &err);
    if (st) {
        if (st == FC_EUNSUP)
            rep_row_set_skip(row, err.msg);
        else
            rep_row_set_error(row, err.msg);
        goto done;
    }
    rep_inputs ri = {
        .dtype = jc->dtype, .rows = rows, .dv = (size_t)jc->prob->dv,
        .o = in->o, .lse = in->lse, .o_gold = jc->out, .lse_gold = jc->lse,
        .sentinels = (r1.sentinels_ok && (!in->rerun || r2.sentinels_ok)) ? REP_SENTINELS_INTACT
                                                                          : REP_SENTINELS_DAMAGED,
        .o_rerun = in->rerun ? o2 : NULL, .lse_rerun = in->rerun ? l2 : NULL,
        .prob = jc->prob, .designed = jc->designed,
    };
    judge_lp_inputs(in->lp, &ri);
    rep_verdict v;
    if (rep_evaluate(&ri, &v, &err)) {
        rep_row_set_error(row, err.msg);
        goto done;
    }
    rep_row_set_verdict(row, &v);
    if (in->verdict)
        *in->verdict = v;
    passed = v.pass;
done:
    free(o2);
    free(l2);
    return passed;
}

int judge_case_run(const judge_opts *jo, gpu_backend be, const judge_case *jc,
                   const bmask *bm, rep_row *row, float *o, float *lse, rep_verdict *v)
{
    judge_bufs b;
    fc_err e;
    if (judge_bufs_alloc(&b, jc, &e)) {
        rep_row_set_error(row, e.msg);
        return -1;
    }
    int pass = -1;
    if (judge_baseline(jc, &b.lp, &e)) {
        rep_row_set_error(row, e.msg);
    } else {
        judge_run_in in = {.jo = jo, .backend = be, .jc = jc, .bm = bm, .lp = &b.lp,
                           .o = b.o, .lse = b.lse, .rerun = 1, .verdict = v};
        pass = judge_run(&in, row);
        if (row->outcome == REP_ROW_ERROR || row->outcome == REP_ROW_SKIP)
            pass = -1;
        if (o)
            memcpy(o, b.o, sizeof(float) * o_elems(jc));
        if (lse)
            memcpy(lse, b.lse, sizeof(float) * judge_rows(jc));
    }
    judge_bufs_free(&b);
    return pass;
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
