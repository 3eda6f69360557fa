/*
 * numeric.c - the kernel against the float64 oracle under the hard gates H1-H7 alone
 * (docs/matrix.md M1, M2, M5): one row per dtype and backend, a design case in all three
 * dtypes under one id.
 */
#include <string.h>

#include "ci/checks.h"
#include "ci/gate_case.h"

/* One dtype of a numeric case, on every backend. */
static fc_status run_numeric_dtype(const gate_case *c, const gate_opts *op, gate_rows *rows,
                                   fc_err *err)
{
    fix_case fc;
    bmask bm;
    fc_err e;
    rep_row *row;
    memset(&bm, 0, sizeof bm);
    fc_status st = gate_case_inputs(c, NULL, &fc, &e);
    if (st)
        return gate_case_error(c, op, rows, e.msg, err);
    judge_case jc = fix_judge_case(&fc);
    judge_bufs b;
    if ((st = judge_bufs_alloc(&b, &jc, err))) {
        fix_case_free(&fc);
        return st;
    }
    st = judge_baseline(&jc, &b.lp, &e);
    /* An explicit mask (M8) has no builder of its own: the slow builder reads it (bmask.h's
     * bmask_build_x; direct refuses one, naming slow). */
    if (!st && fc.prob.xmask.bits)
        st = bmask_build_x(&bm, c->builder, fc.prob.mask, &fc.prob.seq, fc.prob.xmask, c->gp.qb,
                           c->gp.kb, &e);
    else if (!st)
        st = judge_build_mask(&op->run, &bm, c->builder, fc.prob.mask, &fc.prob.seq, c->gp.qb,
                              c->gp.kb, &e);
    for (int i = 0; i < op->nbackends; i++) {
        if (!(row = gate_rows_push(rows))) {
            st = gate_rows_oom(err);
            break;
        }
        gate_row_identity(row, c, &fc, bmask_builder_name(c->builder), op,
                          op->backends[i], NULL);
        if (st) {
            rep_row_set_error(row, e.msg);
            continue;
        }
        judge_run_in in = {.jo = &op->run, .backend = op->backends[i], .jc = &jc, .bm = &bm,
                           .lp = &b.lp, .o = b.o, .lse = b.lse, .rerun = 1};
        gate_judge_run(&in, row);
    }
    if (st != FC_ENOMEM)
        st = FC_OK;
    bmask_free(&bm);
    judge_bufs_free(&b);
    fix_case_free(&fc);
    return st;
}

static fc_status run_numeric(const gate_case *c, const gate_opts *op, gate_rows *rows,
                             fc_err *err)
{
    if (!c->all_dtypes)
        return run_numeric_dtype(c, op, rows, err);
    fc_status st = FC_OK;
    for (int dt = FC_F32; dt <= FC_BF16 && !st; dt++) {
        gate_case one = *c;
        one.gp.dtype = (fc_dtype)dt;
        st = run_numeric_dtype(&one, op, rows, err);
    }
    return st;
}

const gate_check gate_check_numeric = {"numeric", NULL, run_numeric};
