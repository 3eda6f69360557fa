/*
 * gate_exact.c - the exactness checks of spec/tolerance.md that no tolerance can replace, as
 * gate cases: window edges, masked-key poisoning, LSE merge of complementary masks, a decode
 * row against dense attention over its last W keys, builder equivalence, paging.
 *
 * Each case yields one report row per backend (builders: per builder and backend) carrying the
 * tolerance verdict of its main run; a failed exactness check fails the row with its own code
 * (REP_X_*) and a reason that names the first offending row.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gate_internal.h"
#include "lowp.h"
#include "ref.h"

/* Inputs, oracle, baseline and block mask of one case under `mask`. */
typedef struct setup {
    fix_case fc;
    gate_bufs b;
    bmask bm;
    int ok;
    fc_err e;
} setup;

static void setup_free(setup *s)
{
    if (s->ok) {
        bmask_free(&s->bm);
        gate_bufs_free(&s->b);
        fix_case_free(&s->fc);
    }
    s->ok = 0;
}

/* 0 on success; on failure s->e says why and nothing needs freeing. */
static int setup_make(setup *s, const gate_opts *op, const gate_case *c, mask_params mask,
                      bmask_builder builder)
{
    memset(s, 0, sizeof *s);
    if (gate_case_inputs(c, &mask, &s->fc, &s->e))
        return -1;
    if (gate_bufs_alloc(&s->b, &s->fc, &s->e)) {
        fix_case_free(&s->fc);
        return -1;
    }
    if (ref_attention_lp(&s->fc.prob, s->fc.dtype, s->fc.q, s->fc.k, s->fc.v, s->b.o_lp, NULL,
                         &s->e) ||
        gate_build_mask(op, &s->bm, builder, mask, &s->fc.prob.seq, c->gp.qb, c->gp.kb, &s->e)) {
        gate_bufs_free(&s->b);
        fix_case_free(&s->fc);
        return -1;
    }
    s->ok = 1;
    return 0;
}

/* The judged main run of a check: a row per backend, outputs left in s->b. */
static rep_row *main_row(const gate_case *c, const gate_opts *op, int i, setup *s,
                         gate_rows *rows, const char *suffix, const char *builder)
{
    rep_row *row = gate_rows_push(rows);
    if (!row)
        return NULL;
    gate_row_identity(row, c, &s->fc, builder ? builder : bmask_builder_name(c->builder), op,
                      op->backends[i], suffix);
    gate_judge_in in = {.op = op, .fc = &s->fc, .bm = &s->bm, .backend = op->backends[i],
                        .o_lp = s->b.o_lp, .o = s->b.o, .lse = s->b.lse, .rerun = 1};
    gate_judge(&in, row);
    return row;
}

static fc_status oom(fc_err *err)
{
    return fc_errf(err, FC_ENOMEM, "out of memory for report rows");
}

/* Position of row i (= (b*Hq + h)*Lq + tq) along the query axis. */
static int32_t row_tq(const fix_case *fc, size_t i)
{
    return (int32_t)(i % (size_t)fc->prob.seq.lq);
}

static int rows_bitwise_equal(const float *a, const float *b, size_t n)
{
    return memcmp(a, b, n * sizeof(float)) == 0;
}

/* ---- window edges: W-1, W, W+1 must differ wherever a row's allowed set changes ---- */

fc_status gate_run_window_edge(const gate_case *c, const gate_opts *op, gate_rows *rows,
                               fc_err *err)
{
    mask_params m[3] = {c->gp.mask, c->gp.mask, c->gp.mask};
    m[0].sliding_window -= 1;
    m[2].sliding_window += 1;
    if (m[0].sliding_window < 1)
        return gate_case_error(c, op, rows, "window-edge case needs W >= 2", err);
    setup s[3];
    for (int j = 0; j < 3; j++)
        if (setup_make(&s[j], op, c, m[j], c->builder)) {
            fc_status st = gate_case_error(c, op, rows, s[j].e.msg, err);
            for (int t = 0; t < j; t++)
                setup_free(&s[t]);
            return st;
        }
    size_t nrows = gate_rows_of(&s[1].fc), dv = (size_t)s[1].fc.prob.dv;
    seq_view v = seq_info_view(&s[1].fc.prob.seq);
    fc_status st = FC_OK;
    for (int i = 0; i < op->nbackends && !st; i++) {
        rep_row *row = main_row(c, op, i, &s[1], rows, NULL, NULL);
        if (!row) {
            st = oom(err);
            break;
        }
        for (int j = 0; j < 3; j += 2) {
            fc_err e;
            const char *name = j ? "W+1" : "W-1";
            if (gate_kernel(op, op->backends[i], &s[j].fc, &s[j].bm, s[j].b.o, s[j].b.lse, NULL,
                            &e)) {
                gate_row_fail_check(row, REP_X_EDGE, "%s run: %s", name, e.msg);
                continue;
            }
            size_t expected = 0;
            for (size_t r = 0; r < nrows; r++) {
                int32_t lo0, hi0, lo1, hi1, tq = row_tq(&s[1].fc, r);
                mask_token_range(m[1], v, tq, &lo0, &hi0);
                mask_token_range(m[j], v, tq, &lo1, &hi1);
                if ((lo0 < hi0 || lo1 < hi1) && (lo0 != lo1 || hi0 != hi1)) {
                    expected++;
                    if (rows_bitwise_equal(s[1].b.o + r * dv, s[j].b.o + r * dv, dv) &&
                        s[1].b.lse[r] == s[j].b.lse[r]) {
                        gate_row_fail_check(row, REP_X_EDGE,
                                            "row %zu (q %d): allowed keys [%d,%d) under W but "
                                            "[%d,%d) under %s, yet output and LSE are identical",
                                            r, tq, lo0, hi0, lo1, hi1, name);
                        break;
                    }
                }
            }
            if (expected == 0)
                gate_row_fail_check(row, REP_X_EDGE, "no row's allowed set changes between W "
                                    "and %s: the case cannot test the edge", name);
        }
    }
    for (int j = 0; j < 3; j++)
        setup_free(&s[j]);
    return st;
}

/* ---- poisoning: keys no query may see, filled with NaN or huge values ---- */

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
                    k[base * p->d + i] = ref_round(kval, fc->dtype);
                for (int32_t i = 0; i < p->dv; i++)
                    v[base * p->dv + i] = ref_round(vval, fc->dtype);
            }
}

fc_status gate_run_poison(const gate_case *c, const gate_opts *op, gate_rows *rows, fc_err *err)
{
    setup s;
    if (setup_make(&s, op, c, c->gp.mask, c->builder))
        return gate_case_error(c, op, rows, s.e.msg, err);
    const attn_problem *p = &s.fc.prob;
    size_t no = attn_o_elems(p), nl = gate_rows_of(&s.fc);
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
    static const float poisons[][2] = {{NAN, NAN}, {1e30f, -1e30f}};
    for (int i = 0; i < op->nbackends; i++) {
        rep_row *row = main_row(c, op, i, &s, rows, NULL, NULL);
        if (!row) {
            st = oom(err);
            goto done;
        }
        if (unseen == 0)
            gate_row_fail_check(row, REP_X_POISON, "every key is visible: nothing to poison");
        for (int t = 0; t < 2 && unseen; t++) {
            fix_case pc = s.fc; /* shallow: same problem and q, poisoned k and v */
            pc.k = k;
            pc.v = v;
            poison(&s.fc, seen, poisons[t][0], poisons[t][1], k, v);
            fc_err e;
            if (gate_kernel(op, op->backends[i], &pc, &s.bm, o, l, NULL, &e)) {
                gate_row_fail_check(row, REP_X_POISON, "poisoned run: %s", e.msg);
                continue;
            }
            for (size_t r = 0; r < nl; r++) {
                size_t dv = (size_t)p->dv;
                if (!rows_bitwise_equal(o + r * dv, s.b.o + r * dv, dv) ||
                    memcmp(&l[r], &s.b.lse[r], sizeof(float))) {
                    gate_row_fail_check(row, REP_X_POISON,
                                        "%s in %d unseen keys changed row %zu (q %d): out[0] "
                                        "%g -> %g, lse %g -> %g", t ? "+-1e30" : "NaN",
                                        (int)unseen, r, row_tq(&s.fc, r), s.b.o[r * dv],
                                        o[r * dv], s.b.lse[r], l[r]);
                    break;
                }
            }
        }
    }
done:
    free(seen);
    free(k);
    free(v);
    free(o);
    free(l);
    setup_free(&s);
    return st;
}

/* ---- LSE merge: even and odd kv tiles of the block mask, merged by their LSEs ---- */

/* The listed tiles of `bm` whose kv id has parity `par`, as a block mask of the same shape. */
static fc_status split_mask(const bmask *bm, int par, bmask *out, fc_err *err)
{
    fc_status st = bmask_alloc(out, bm->q_block_size, bm->kv_block_size, bm->lq, bm->lk, bm->nb,
                               bm->nh, bm->width, err);
    if (st)
        return st;
    size_t nrows = (size_t)bm->nb * bm->nh * bm->nqb;
    for (size_t r = 0; r < nrows; r++) {
        const int32_t *cnt[2] = {bm->kv_num_blocks, bm->full_kv_num_blocks};
        const int32_t *ids[2] = {bm->kv_indices, bm->full_kv_indices};
        int32_t *ocnt[2] = {out->kv_num_blocks, out->full_kv_num_blocks};
        int32_t *oids[2] = {out->kv_indices, out->full_kv_indices};
        for (int l = 0; l < 2; l++)
            for (int32_t j = 0; j < cnt[l][r]; j++) {
                int32_t id = ids[l][r * (size_t)bm->width + j];
                if (id % 2 == par)
                    oids[l][r * (size_t)bm->width + ocnt[l][r]++] = id;
            }
    }
    return FC_OK;
}

fc_status gate_run_lse_merge(const gate_case *c, const gate_opts *op, gate_rows *rows,
                             fc_err *err)
{
    setup s;
    if (setup_make(&s, op, c, c->gp.mask, c->builder))
        return gate_case_error(c, op, rows, s.e.msg, err);
    const attn_problem *p = &s.fc.prob;
    size_t no = attn_o_elems(p), nl = gate_rows_of(&s.fc), dv = (size_t)p->dv;
    bmask half[2];
    memset(half, 0, sizeof half);
    float *o[2] = {malloc(sizeof(float) * (no + 1)), malloc(sizeof(float) * (no + 1))};
    float *l[2] = {malloc(sizeof(float) * (nl + 1)), malloc(sizeof(float) * (nl + 1))};
    float *om = malloc(sizeof(float) * (no + 1)), *lm = malloc(sizeof(float) * (nl + 1));
    fc_status st = FC_OK;
    fc_err e;
    if (!o[0] || !o[1] || !l[0] || !l[1] || !om || !lm ||
        (st = split_mask(&s.bm, 0, &half[0], err)) || (st = split_mask(&s.bm, 1, &half[1], err))) {
        st = st ? st : fc_errf(err, FC_ENOMEM, "out of memory for the LSE merge");
        goto done;
    }
    for (int i = 0; i < op->nbackends; i++) {
        rep_row *row = gate_rows_push(rows);
        if (!row) {
            st = oom(err);
            goto done;
        }
        gate_row_identity(row, c, &s.fc, bmask_builder_name(c->builder), op,
                          op->backends[i], NULL);
        int ran = 1;
        for (int t = 0; t < 2 && ran; t++)
            if (gate_kernel(op, op->backends[i], &s.fc, &half[t], o[t], l[t], NULL, &e)) {
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
        int pass = gate_judge_outputs(&s.fc, om, lm, s.b.o_lp, &v, &e);
        if (pass < 0) {
            rep_row_set_error(row, e.msg);
            continue;
        }
        rep_row_set_verdict(row, &v);
        if (!pass) {
            row->first_fail = -1;
            row->outcome = REP_ROW_PASS; /* re-fail under the merge check's own name */
            gate_row_fail_check(row, REP_X_MERGE, "even + odd kv tiles merged by LSE: %s",
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
    setup_free(&s);
    return st;
}

/* ---- decode: a causal window W on one query == dense attention over the last W keys ---- */

fc_status gate_run_decode(const gate_case *c, const gate_opts *op, gate_rows *rows, fc_err *err)
{
    if (c->gp.lq != 1 || c->gp.nseq || !c->gp.mask.causal || c->gp.mask.sliding_window < 1 ||
        c->gp.mask.chunk_size)
        return gate_case_error(c, op, rows, "decode case needs Lq = 1, dense, causal window",
                               err);
    setup s;
    if (setup_make(&s, op, c, c->gp.mask, c->builder))
        return gate_case_error(c, op, rows, s.e.msg, err);
    const attn_problem *p = &s.fc.prob;
    int32_t w = p->mask.sliding_window < p->seq.lk ? p->mask.sliding_window : p->seq.lk;
    int32_t off = p->seq.lk - w;
    /* The slice problem: same queries, keys/values [Lk - W, Lk), no mask. */
    fix_case sl = s.fc;
    memset(&sl.prob.seq, 0, sizeof sl.prob.seq); /* its own, set below; never s.fc's */
    bmask sbm;
    memset(&sbm, 0, sizeof sbm);
    fc_err e;
    size_t nk = (size_t)p->seq.batch * p->hkv * w;
    float *k = malloc(sizeof(float) * (nk * p->d + 1)), *v = malloc(sizeof(float) * (nk * p->dv + 1));
    float *o = malloc(sizeof(float) * (attn_o_elems(p) + 1));
    float *l = malloc(sizeof(float) * (gate_rows_of(&s.fc) + 1));
    fc_status st = FC_OK;
    memset(&sl.prob.mask, 0, sizeof sl.prob.mask);
    if (seq_init_dense(&sl.prob.seq, p->seq.batch, 1, w, &e)) {
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
    if (gate_build_mask(op, &sbm, c->builder, sl.prob.mask, &sl.prob.seq, c->gp.qb, c->gp.kb,
                        &e)) {
        st = gate_case_error(c, op, rows, e.msg, err);
        goto done;
    }
    for (int i = 0; i < op->nbackends; i++) {
        rep_row *row = main_row(c, op, i, &s, rows, NULL, NULL);
        if (!row) {
            st = oom(err);
            goto done;
        }
        if (gate_kernel(op, op->backends[i], &sl, &sbm, o, l, NULL, &e)) {
            gate_row_fail_check(row, REP_X_DECODE, "slice run: %s", e.msg);
            continue;
        }
        rep_verdict vd;
        int pass = gate_judge_outputs(&s.fc, o, l, s.b.o_lp, &vd, &e);
        if (pass <= 0)
            gate_row_fail_check(row, REP_X_DECODE, "dense attention over the last %d keys "
                                "differs from the windowed row: %s", (int)w,
                                pass < 0 ? e.msg : rep_verdict_reason(&vd));
    }
done:
    seq_free(&sl.prob.seq);
    bmask_free(&sbm);
    free(k);
    free(v);
    free(o);
    free(l);
    setup_free(&s);
    return st;
}

/* ---- builders: slow == direct exactly, supersets sound, outputs within tolerance ---- */

fc_status gate_run_builders(const gate_case *c, const gate_opts *op, gate_rows *rows,
                            fc_err *err)
{
    setup s;
    if (setup_make(&s, op, c, c->gp.mask, BMASK_SLOW))
        return gate_case_error(c, op, rows, s.e.msg, err);
    bmask bms[4];
    int built[4] = {0};
    memset(bms, 0, sizeof bms);
    char exact[REP_WHY_LEN] = "";
    fc_err e;
    fc_status st = FC_OK;
    for (int b = 0; b < 4 && !exact[0]; b++) {
        if (gate_build_mask(op, &bms[b], (bmask_builder)b, s.fc.prob.mask, &s.fc.prob.seq,
                            c->gp.qb, c->gp.kb, &e))
            fc_fmt(exact, sizeof exact, "%s builder: %s", bmask_builder_name((bmask_builder)b),
                     e.msg);
        else
            built[b] = 1;
    }
    if (!exact[0] && bmask_compare(&bms[BMASK_SLOW], &bms[BMASK_DIRECT], &e))
        fc_fmt(exact, sizeof exact, "direct != slow: %s", e.msg);
    for (int b = BMASK_SUPERSET; !exact[0] && b <= BMASK_SUPERSET_TRIM; b++)
        if (bmask_check_sound(&bms[b], s.fc.prob.mask, &s.fc.prob.seq, &e))
            fc_fmt(exact, sizeof exact, "%s unsound: %s", bmask_builder_name((bmask_builder)b),
                     e.msg);
    for (int b = 0; b < 4; b++)
        for (int i = 0; i < op->nbackends; i++) {
            rep_row *row = gate_rows_push(rows);
            if (!row) {
                st = oom(err);
                goto done;
            }
            char suffix[32];
            snprintf(suffix, sizeof suffix, "@%s", bmask_builder_name((bmask_builder)b));
            gate_row_identity(row, c, &s.fc, bmask_builder_name((bmask_builder)b), op,
                              op->backends[i], suffix);
            if (!built[b]) {
                gate_row_fail_check(row, REP_X_BUILDERS, "%s", exact);
                continue;
            }
            gate_judge_in in = {.op = op, .fc = &s.fc, .bm = &bms[b],
                                .backend = op->backends[i], .o_lp = s.b.o_lp, .o = s.b.o,
                                .lse = s.b.lse, .rerun = 0};
            gate_judge(&in, row);
            if (exact[0])
                gate_row_fail_check(row, REP_X_BUILDERS, "%s", exact);
        }
done:
    for (int b = 0; b < 4; b++)
        bmask_free(&bms[b]);
    setup_free(&s);
    return st;
}

/* ---- paging: K/V through a seeded page permutation, bitwise equal to contiguous ---- */

fc_status gate_run_paged(const gate_case *c, const gate_opts *op, gate_rows *rows, fc_err *err)
{
    /* Kernel 1 reads K/V contiguously; the case stays in the matrix, reported as skipped, so
     * the gap is visible when the gate runs kernel 1. */
    if (op->kernel < 2)
        return gate_case_rows(c, op, rows, 1,
                              "paged K/V: kernel 1 has no paged path (run with --kernel 2)", err);
    setup s;
    if (setup_make(&s, op, c, c->gp.mask, c->builder))
        return gate_case_error(c, op, rows, s.e.msg, err);
    const attn_problem *p = &s.fc.prob;
    /* Every (batch entry, kv block) gets a distinct page of a larger pool, in a seeded random
     * order; the spare pages are never mapped (the launcher fills them with NaN). */
    int32_t nkb = s.bm.nkb, used = p->seq.batch * nkb, npages = used + 3;
    int32_t *perm = malloc(sizeof(int32_t) * ((size_t)npages + 1));
    size_t no = attn_o_elems(p), nl = gate_rows_of(&s.fc);
    float *o = malloc(sizeof(float) * (no + 1)), *l = malloc(sizeof(float) * (nl + 1));
    fc_status st = FC_OK;
    if (!perm || !o || !l) {
        st = fc_errf(err, FC_ENOMEM, "out of memory for the page table");
        goto done;
    }
    fix_rng r;
    fix_rng_seed(&r, c->gp.seed ^ 0x9a9eull);
    for (int32_t i = 0; i < npages; i++)
        perm[i] = i;
    for (int32_t i = npages - 1; i > 0; i--) {
        int32_t j = (int32_t)(fix_rng_u64(&r) % (uint64_t)(i + 1)), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (int i = 0; i < op->nbackends; i++) {
        rep_row *row = main_row(c, op, i, &s, rows, NULL, NULL);
        if (!row) {
            st = oom(err);
            goto done;
        }
        fc_err e;
        if (gate_kernel_paged(op, op->backends[i], &s.fc, &s.bm, perm, npages, o, l, NULL, &e)) {
            gate_row_fail_check(row, REP_X_PAGED, "paged run: %s", e.msg);
            continue;
        }
        size_t dv = (size_t)p->dv;
        for (size_t q = 0; q < nl; q++)
            if (!rows_bitwise_equal(o + q * dv, s.b.o + q * dv, dv) ||
                memcmp(&l[q], &s.b.lse[q], sizeof(float))) {
                gate_row_fail_check(row, REP_X_PAGED, "row %zu (q %d) differs between the "
                                    "paged (%d pages) and the contiguous run", q,
                                    row_tq(&s.fc, q), (int)npages);
                break;
            }
    }
done:
    free(perm);
    free(o);
    free(l);
    setup_free(&s);
    return st;
}
