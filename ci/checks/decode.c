/*
 * decode.c - decode: a causal window W on one query == dense attention over the last W keys.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/lowp.h"
#include "ci/checks.h"
#include "ci/gate_case.h"

#define CHECK "decode"


static fc_status run(const gate_case *c, const gate_opts *op, gate_rows *rows, fc_err *err)
{
    if (c->gp.lq != 1 || c->gp.nseq || !c->gp.mask.causal || c->gp.mask.sliding_window < 1 ||
        c->gp.mask.chunk_size)
        return gate_case_error(c, op, rows, "decode case needs Lq = 1, dense, causal window",
                               err);
    gate_setup s;
    if (gate_setup_make(&s, op, c, c->gp.mask, c->builder))
        return gate_case_error(c, op, rows, s.e.msg, err);
    const attn_problem *p = &s.fc.prob;
    int32_t w = p->mask.sliding_window < p->seq.lk ? p->mask.sliding_window : p->seq.lk;
    int32_t off = p->seq.lk - w;
    /* The slice problem: same queries, keys/values [Lk - W, Lk), no mask. */
    attn_problem sp = s.fc.prob;
    memset(&sp.seq, 0, sizeof sp.seq); /* its own, set below; never s.fc's */
    judge_case sl = s.jc;
    sl.prob = &sp;
    bmask sbm;
    memset(&sbm, 0, sizeof sbm);
    fc_err e;
    size_t nk = (size_t)p->seq.batch * p->hkv * w;
    float *k = malloc(sizeof(float) * (nk * p->d + 1)), *v = malloc(sizeof(float) * (nk * p->dv + 1));
    float *o = malloc(sizeof(float) * (attn_o_elems(p) + 1));
    float *l = malloc(sizeof(float) * (judge_rows(&s.jc) + 1));
    fc_status st = FC_OK;
    memset(&sp.mask, 0, sizeof sp.mask);
    if (seq_init_dense(&sp.seq, p->seq.batch, 1, w, &e)) {
        st = gate_case_error(c, op, rows, e.msg, err);
        goto done;
    }
    if (!k || !v || !o || !l) {
        st = fc_errf(err, FC_ENOMEM, "out of memory for the decode slice");
        goto done;
    }
    for (size_t bh = 0; bh < (size_t)p->seq.batch * p->hkv; bh++) {
        memcpy(k + bh * w * p->d, s.fc.k + (bh * p->seq.lk + off) * p->d,
               sizeof(float) * (size_t)w * p->d);
        memcpy(v + bh * w * p->dv, s.fc.v + (bh * p->seq.lk + off) * p->dv,
               sizeof(float) * (size_t)w * p->dv);
    }
    sl.k = k;
    sl.v = v;
    if (judge_build_mask(&op->run, &sbm, c->builder, sp.mask, &sp.seq, c->gp.qb, c->gp.kb,
                        &e)) {
        st = gate_case_error(c, op, rows, e.msg, err);
        goto done;
    }
    for (int i = 0; i < op->nbackends; i++) {
        rep_row *row = gate_main_row(c, op, i, &s, rows, NULL, NULL);
        if (!row) {
            st = gate_rows_oom(err);
            goto done;
        }
        if (judge_kernel(&op->run, op->backends[i], &sl, &sbm, NULL, 0, o, l, NULL, &e)) {
            judge_row_fail_check(row, CHECK, "slice run: %s", e.msg);
            continue;
        }
        rep_verdict vd;
        int pass = judge_outputs(&s.jc, o, l, &s.b.lp, &vd, &e);
        if (pass < 0 || (!pass && !vd.outside))
            judge_row_fail_check(row, CHECK, "dense attention over the last %d keys "
                                "differs from the windowed row: %s", (int)w,
                                pass < 0 ? e.msg : rep_verdict_reason(&vd));
    }
done:
    seq_free(&sp.seq);
    bmask_free(&sbm);
    free(k);
    free(v);
    free(o);
    free(l);
    gate_setup_free(&s);
    return st;
}

const gate_check gate_check_decode = {CHECK, "decode equals dense", run};
