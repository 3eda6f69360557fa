/* judge_run.c - a kernel run judged (judge.h: judge_kernel, judge_run, judge_case_run): the
 * gate's and check's path, which reaches gpu/ (the emu, CUDA). Apart from judge.c so that the
 * public library, which judges outputs it is given, holds none of it. */
#include <stdlib.h>
#include <string.h>

#include "judge/judge.h"

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
    size_t rows = judge_rows(jc), no = judge_o_elems(jc);
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
            memcpy(o, b.o, sizeof(float) * judge_o_elems(jc));
        if (lse)
            memcpy(lse, b.lse, sizeof(float) * judge_rows(jc));
    }
    judge_bufs_free(&b);
    return pass;
}
