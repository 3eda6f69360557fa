/*
 * gate_case.c - what the checks share (gate_case.h): inputs and oracle of a case, row identity,
 * error and skip rows, and the usual setup of one run.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/lowp.h"
#include "ci/gate_case.h"
#include "diag/diag.h"
#include "ref/ref.h"

void gate_row_identity(rep_row *row, const gate_case *c, const fix_case *fc, const char *builder,
                       const gate_opts *op, gpu_backend be, const char *suffix)
{
    const attn_problem *p = &fc->prob;
    snprintf(row->case_id, sizeof row->case_id, "%s%s", c->id, suffix ? suffix : "");
    rep_set_str(row->group, sizeof row->group, c->group);
    judge_row_problem(row, p, fc->dtype);
    row->q_block = c->gp.qb;
    row->kv_block = c->gp.kb;
    rep_set_str(row->builder, sizeof row->builder, builder);
    rep_set_str(row->backend, sizeof row->backend, gpu_backend_name(be));
    row->kernel = op->run.kernel;
}

/* ---- inputs ---- */

static double rng_uniform(fix_rng *r) /* [-1, 1) */
{
    return ((double)(fix_rng_u64(r) >> 11) * 0x1.0p-53) * 2.0 - 1.0;
}

static void round_all(float *x, size_t n, fc_dtype dt)
{
    for (size_t i = 0; i < n; i++)
        x[i] = fc_round(x[i], dt);
}

/* Reshapes the normal inputs into the adversarial distributions of docs/matrix.md M5. */
static void apply_input(const gate_case *c, fix_case *fc)
{
    const attn_problem *p = &fc->prob;
    size_t nq = attn_q_elems(p), nk = attn_k_elems(p), nv = attn_v_elems(p);
    fix_rng r;
    fix_rng_seed(&r, c->gp.seed ^ 0xad5e4ull);
    switch (c->input) {
    case GI_NORMAL:
    case GI_NEG_LOGITS: /* the generator's score offset (gate_case_inputs) */
    case GI_FAR_LOGITS:
    case GI_NINPUTS:
        return;
    case GI_UNIFORM:
        for (size_t i = 0; i < nq; i++) fc->q[i] = (float)rng_uniform(&r);
        for (size_t i = 0; i < nk; i++) fc->k[i] = (float)rng_uniform(&r);
        for (size_t i = 0; i < nv; i++) fc->v[i] = (float)rng_uniform(&r);
        break;
    case GI_PEAKED:
        for (size_t i = 0; i < nq; i++) fc->q[i] *= 12.0f;
        break;
    case GI_OUTLIERS: {
        float *t[3] = {fc->q, fc->k, fc->v};
        size_t n[3] = {nq, nk, nv};
        for (int a = 0; a < 3; a++)
            for (size_t i = 0; i < n[a]; i++)
                if (fix_rng_u64(&r) % 1000 == 0)
                    t[a][i] *= 10.0f;
        break;
    }
    case GI_BEYOND_CAP: {
        /* First coordinate +-a in the queries and -a in every key: a row's scores all shift by
         * -+2 c (even rows down, odd rows up), the differences between them stay normal. */
        double shift = 2.0 * (p->terms.softcap > 0 ? p->terms.softcap : 50.0);
        float a = (float)sqrt(shift / p->scale);
        for (size_t i = 0; i < nq; i += (size_t)p->d) fc->q[i] = (i / (size_t)p->d) % 2 ? -a : a;
        for (size_t i = 0; i < nk; i += (size_t)p->d) fc->k[i] = -a;
        break;
    }
    case GI_FP16_LIMIT: {
        float mx = 0;
        for (size_t i = 0; i < nv; i++) mx = fmaxf(mx, fabsf(fc->v[i]));
        for (size_t i = 0; mx > 0 && i < nv; i++) fc->v[i] *= 60000.0f / mx;
        break;
    }
    }
    round_all(fc->q, nq, fc->dtype);
    round_all(fc->k, nk, fc->dtype);
    round_all(fc->v, nv, fc->dtype);
}

fc_status gate_case_inputs(const gate_case *c, const mask_params *mask, fix_case *fc,
                           fc_err *err)
{
    fix_gen_params gp = c->gp;
    gp.name = "gate";
    if (mask)
        gp.mask = *mask;
    gp.with_bmask = 0;
    /* Every score gains the offset while the differences between scores stay normal. */
    if (c->input == GI_NEG_LOGITS || c->input == GI_FAR_LOGITS)
        gp.score_offset = c->input == GI_NEG_LOGITS ? -1e5 : -1e9;
    fc_status st = c->xc.rule ? xcase_gen_case(&gp, &c->xc, fc, err) : fix_gen_case(&gp, fc, err);
    if (st || c->input == GI_NORMAL || gp.score_offset != 0)
        return st;
    apply_input(c, fc);
    st = ref_attention_f64(&fc->prob, fc->q, fc->k, fc->v, fc->out, fc->lse, err);
    if (st)
        fix_case_free(fc);
    return st;
}


fc_status gate_case_rows(const gate_case *c, const gate_opts *op, gate_rows *rows, int skip,
                         const char *msg, fc_err *err)
{
    for (int i = 0; i < op->nbackends; i++) {
        rep_row *row = gate_rows_push(rows);
        if (!row)
            return fc_errf(err, FC_ENOMEM, "out of memory for report rows");
        snprintf(row->case_id, sizeof row->case_id, "%s", c->id);
        rep_set_str(row->group, sizeof row->group, c->group);
        rep_set_str(row->backend, sizeof row->backend, gpu_backend_name(op->backends[i]));
        row->kernel = op->run.kernel;
        rep_set_str(row->builder, sizeof row->builder, bmask_builder_name(c->builder));
        row->dtype = c->gp.dtype;
        row->lq = c->gp.lq;
        row->lk = c->gp.lk;
        if (skip)
            rep_row_set_skip(row, msg);
        else
            rep_row_set_error(row, msg);
    }
    return FC_OK;
}

int gate_emu_skips(const fix_gen_params *gp, char *why, size_t n)
{
    attn_problem p;
    fc_err e;
    if (fix_gen_problem(gp, &p, &e))
        return 0;
    uint64_t work = attn_case_cost(&p, gp->qb, gp->kb).work;
    attn_problem_free(&p);
    if ((double)work <= GATE_EMU_MAX_WORK)
        return 0;
    snprintf(why, n, "not run on the emu: %.2g multiply-adds a run, past its limit of %.0e "
             "(minutes a run; docs/matrix.md M7): the gpu backend judges it, and check judges "
             "its file from flexcheck export --full", (double)work, GATE_EMU_MAX_WORK);
    return 1;
}

fc_status gate_case_error(const gate_case *c, const gate_opts *op, gate_rows *rows,
                          const char *msg, fc_err *err)
{
    return gate_case_rows(c, op, rows, 0, msg, err);
}

fc_status gate_rows_oom(fc_err *err)
{
    return fc_errf(err, FC_ENOMEM, "out of memory for report rows");
}

int32_t gate_row_tq(const fix_case *fc, size_t i)
{
    return (int32_t)(i % (size_t)fc->prob.seq.lq);
}

void gate_setup_free(gate_setup *s)
{
    if (s->ok) {
        bmask_free(&s->bm);
        judge_bufs_free(&s->b);
        fix_case_free(&s->fc);
    }
    s->ok = 0;
}

int gate_setup_make(gate_setup *s, const gate_opts *op, const gate_case *c, mask_params mask,
                    bmask_builder builder)
{
    memset(s, 0, sizeof *s);
    if (gate_case_inputs(c, &mask, &s->fc, &s->e))
        return -1;
    s->jc = fix_judge_case(&s->fc);
    if (judge_bufs_alloc(&s->b, &s->jc, &s->e)) {
        fix_case_free(&s->fc);
        return -1;
    }
    if (judge_baseline(&s->jc, &s->b.lp, &s->e) ||
        judge_build_mask(&op->run, &s->bm, builder, mask, &s->fc.prob.seq, c->gp.qb, c->gp.kb,
                         &s->e)) {
        judge_bufs_free(&s->b);
        fix_case_free(&s->fc);
        return -1;
    }
    s->ok = 1;
    return 0;
}

rep_row *gate_main_row(const gate_case *c, const gate_opts *op, int i, gate_setup *s,
                       gate_rows *rows, const char *suffix, const char *builder)
{
    rep_row *row = gate_rows_push(rows);
    if (!row)
        return NULL;
    gate_row_identity(row, c, &s->fc, builder ? builder : bmask_builder_name(c->builder), op,
                      op->backends[i], suffix);
    judge_run_in in = {.jo = &op->run, .backend = op->backends[i], .jc = &s->jc, .bm = &s->bm,
                       .lp = &s->b.lp, .o = s->b.o, .lse = s->b.lse, .rerun = 1};
    gate_judge_run(&in, row);
    return row;
}

int gate_judge_run(const judge_run_in *in, rep_row *row)
{
    rep_verdict v;
    judge_run_in run = *in;
    run.verdict = &v;
    int pass = judge_run(&run, row);
    if (in->verdict)
        *in->verdict = v;
    if (!pass)
        diag_after_run(in, &v, row);
    return pass;
}
