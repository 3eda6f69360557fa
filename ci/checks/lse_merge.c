/*
 * lse_merge.c - LSE merge: even and odd kv tiles of the block mask, merged by their LSEs.
 * With sinks the sink belongs to the row, not to a tile: the even half runs with it and the
 * odd half without, so the merge counts it once (a kernel that counts it per tile fails).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/lowp.h"
#include "ci/checks.h"
#include "ci/gate_case.h"

#define CHECK "lse-merge"


/* The listed tiles of `bm` whose kv id has parity `par`, as a block mask of the same shape
 * (rectangular, as wide as bm's longest list). */
static fc_status split_mask(const bmask *bm, int par, bmask *out, fc_err *err)
{
    size_t nrows = bmask_nrows(bm);
    int32_t w = 0;
    for (size_t r = 0; r < nrows; r++) {
        w = bm->kv_num_blocks[r] > w ? bm->kv_num_blocks[r] : w;
        w = bm->full_kv_num_blocks[r] > w ? bm->full_kv_num_blocks[r] : w;
    }
    fc_status st = bmask_alloc(out, bm->q_block_size, bm->kv_block_size, bm->lq, bm->lk, bm->nb,
                               bm->nh, w, err);
    if (st)
        return st;
    for (size_t r = 0; r < nrows; r++) {
        const int32_t *cnt[2] = {bm->kv_num_blocks, bm->full_kv_num_blocks};
        int32_t *ocnt[2] = {out->kv_num_blocks, out->full_kv_num_blocks};
        for (int l = 0; l < 2; l++) {
            const int32_t *ids = bmask_ids(bm, l, r);
            int32_t *oids = bmask_ids(out, l, r);
            for (int32_t j = 0; j < cnt[l][r]; j++)
                if (ids[j] % 2 == par)
                    oids[ocnt[l][r]++] = ids[j];
        }
    }
    return FC_OK;
}

static fc_status run(const gate_case *c, const gate_opts *op, gate_rows *rows,
                             fc_err *err)
{
    gate_setup s;
    if (gate_setup_make(&s, op, c, c->gp.mask, c->builder))
        return gate_case_error(c, op, rows, s.e.msg, err);
    const attn_problem *p = &s.fc.prob;
    size_t no = attn_o_elems(p), nl = judge_rows(&s.jc), dv = (size_t)p->dv;
    bmask half[2];
    memset(half, 0, sizeof half);
    float *o[2] = {malloc(sizeof(float) * (no + 1)), malloc(sizeof(float) * (no + 1))};
    float *l[2] = {malloc(sizeof(float) * (nl + 1)), malloc(sizeof(float) * (nl + 1))};
    float *om = malloc(sizeof(float) * (no + 1)), *lm = malloc(sizeof(float) * (nl + 1));
    fc_status st = FC_OK;
    fc_err e;
    attn_problem nosink = *p; /* shares p's sequences; only the terms differ */
    nosink.terms.sinks = NULL;
    judge_case halves[2] = {s.jc, s.jc};
    halves[1].prob = &nosink;
    if (!o[0] || !o[1] || !l[0] || !l[1] || !om || !lm ||
        (st = split_mask(&s.bm, 0, &half[0], err)) || (st = split_mask(&s.bm, 1, &half[1], err))) {
        st = st ? st : fc_errf(err, FC_ENOMEM, "out of memory for the LSE merge");
        goto done;
    }
    for (int i = 0; i < op->nbackends; i++) {
        rep_row *row = gate_rows_push(rows);
        if (!row) {
            st = gate_rows_oom(err);
            goto done;
        }
        gate_row_identity(row, c, &s.fc, bmask_builder_name(c->builder), op,
                          op->backends[i], NULL);
        int ran = 1;
        for (int t = 0; t < 2 && ran; t++)
            if (judge_kernel(&op->run, op->backends[i], &halves[t], &half[t], NULL, 0, o[t], l[t],
                             NULL, &e)) {
                rep_row_set_error(row, e.msg);
                ran = 0;
            }
        if (!ran)
            continue;
        /* Merge in double: l = log(e^la + e^lb), o = oa e^(la-l) + ob e^(lb-l). */
        for (size_t r = 0; r < nl; r++) {
            double la = l[0][r], lb = l[1][r], mx = la > lb ? la : lb;
            if (mx == -INFINITY) {
                lm[r] = -INFINITY;
                for (size_t j = 0; j < dv; j++)
                    om[r * dv + j] = 0.0f;
                continue;
            }
            double lt = mx + log(exp(la - mx) + exp(lb - mx));
            double wa = exp(la - lt), wb = exp(lb - lt);
            lm[r] = (float)lt;
            for (size_t j = 0; j < dv; j++)
                om[r * dv + j] = (float)(wa * o[0][r * dv + j] + wb * o[1][r * dv + j]);
        }
        rep_verdict v;
        int pass = judge_outputs(&s.jc, om, lm, &s.b.lp, &v, &e);
        if (pass < 0) {
            rep_row_set_error(row, e.msg);
            continue;
        }
        rep_row_set_verdict(row, &v);
        if (!pass && !v.outside) {
            row->first_fail[0] = 0;
            row->outcome = REP_ROW_PASS; /* re-fail under the merge check's own name */
            judge_row_fail_check(row, CHECK, "even + odd kv tiles merged by LSE: %s",
                                rep_verdict_reason(&v));
        }
    }
done:
    bmask_free(&half[0]);
    bmask_free(&half[1]);
    free(o[0]);
    free(o[1]);
    free(l[0]);
    free(l[1]);
    free(om);
    free(lm);
    gate_setup_free(&s);
    return st;
}

const gate_check gate_check_lse_merge = {CHECK, "LSE merge", run};
