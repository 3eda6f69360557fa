/*
 * poison.c - poisoning: keys no query may see, filled with NaN, huge finite values or
 * infinities. Huge means 1e30 or the dtype's largest finite value if smaller (float16: 65504;
 * 1e30 would round to infinity there, so float16 used to be poisoned with infinities twice and
 * never with a large finite value, the kind a mask applied after the max lets dominate).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/lowp.h"
#include "ci/checks.h"
#include "ci/gate_case.h"

#define CHECK "poison"


/* seen[tk] = 1 iff some query of the batch entry may see key token tk. */
static unsigned char *visible_keys(const fix_case *fc)
{
    seq_view v = seq_info_view(&fc->prob.seq);
    unsigned char *seen = calloc((size_t)v.lk + 1, 1);
    if (!seen)
        return NULL;
    for (int32_t tq = 0; tq < v.lq; tq++) {
        int32_t lo, hi;
        mask_token_range(fc->prob.mask, v, tq, &lo, &hi);
        for (int32_t tk = lo; tk < hi; tk++)
            seen[tk] = 1;
    }
    return seen;
}

/* Copies of k and v with every unseen key's row set to kval / vval (rounded to dtype). */
static void poison(const fix_case *fc, const unsigned char *seen, float kval, float vval,
                   float *k, float *v)
{
    const attn_problem *p = &fc->prob;
    memcpy(k, fc->k, attn_k_elems(p) * sizeof(float));
    memcpy(v, fc->v, attn_v_elems(p) * sizeof(float));
    for (int32_t b = 0; b < p->seq.batch; b++)
        for (int32_t h = 0; h < p->hkv; h++)
            for (int32_t tk = 0; tk < p->seq.lk; tk++) {
                if (seen[tk])
                    continue;
                size_t base = ((size_t)b * p->hkv + h) * p->seq.lk + tk;
                for (int32_t i = 0; i < p->d; i++)
                    k[base * p->d + i] = fc_round(kval, fc->dtype);
                for (int32_t i = 0; i < p->dv; i++)
                    v[base * p->dv + i] = fc_round(vval, fc->dtype);
            }
}

static fc_status run(const gate_case *c, const gate_opts *op, gate_rows *rows, fc_err *err)
{
    gate_setup s;
    if (gate_setup_make(&s, op, c, c->gp.mask, c->builder))
        return gate_case_error(c, op, rows, s.e.msg, err);
    const attn_problem *p = &s.fc.prob;
    size_t no = attn_o_elems(p), nl = judge_rows(&s.jc);
    unsigned char *seen = visible_keys(&s.fc);
    float *k = malloc(sizeof(float) * (attn_k_elems(p) + 1));
    float *v = malloc(sizeof(float) * (attn_v_elems(p) + 1));
    float *o = malloc(sizeof(float) * (no + 1)), *l = malloc(sizeof(float) * (nl + 1));
    fc_status st = FC_OK;
    if (!seen || !k || !v || !o || !l) {
        st = fc_errf(err, FC_ENOMEM, "out of memory for poisoned inputs");
        goto done;
    }
    int32_t unseen = 0;
    for (int32_t tk = 0; tk < p->seq.lk; tk++)
        unseen += !seen[tk];
    const float huge = s.fc.dtype == FC_F16 ? 65504.0f : 1e30f;
    const float poisons[][2] = {{NAN, NAN}, {huge, -huge}, {INFINITY, -INFINITY}};
    static const char *const names[] = {"NaN", "+-huge", "+-inf"};
    for (int i = 0; i < op->nbackends; i++) {
        rep_row *row = gate_main_row(c, op, i, &s, rows, NULL, NULL);
        if (!row) {
            st = gate_rows_oom(err);
            goto done;
        }
        if (unseen == 0)
            judge_row_fail_check(row, CHECK, "every key is visible: nothing to poison");
        for (int t = 0; t < 3 && unseen; t++) {
            judge_case pc = s.jc; /* same problem and q, poisoned k and v */
            pc.k = k;
            pc.v = v;
            poison(&s.fc, seen, poisons[t][0], poisons[t][1], k, v);
            fc_err e;
            if (judge_kernel(&op->run, op->backends[i], &pc, &s.bm, NULL, 0, o, l, NULL, &e)) {
                judge_row_fail_check(row, CHECK, "poisoned run: %s", e.msg);
                continue;
            }
            size_t dv = (size_t)p->dv;
            size_t r = judge_first_differing_row(&s.jc, o, l, s.b.o, s.b.lse);
            if (r < nl) {
                char at[112];
                attn_row_where(at, sizeof at, s.jc.prob, r, -1);
                judge_row_fail_check(row, CHECK, "%s (%g) in %d unseen keys changed row %s: "
                                     "out[0] %g -> %g, lse %g -> %g", names[t],
                                     (double)poisons[t][0], (int)unseen, at, s.b.o[r * dv],
                                     o[r * dv], s.b.lse[r], l[r]);
            }
        }
    }
done:
    free(seen);
    free(k);
    free(v);
    free(o);
    free(l);
    gate_setup_free(&s);
    return st;
}

const gate_check gate_check_poison = {CHECK, "masked-key poisoning", run};
