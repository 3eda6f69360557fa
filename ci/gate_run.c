/*
 * gate_run.c - judging one gate case (gate_run.h): inputs and oracle, kernel runs, verdicts.
 * The exactness checks (window edges, poisoning, LSE merge, decode, builders, layouts) build
 * on the helpers here and live in gate_exact.c and gate_layout.c.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gate_internal.h"
#include "ref.h"
#include "lowp.h"

void gate_rows_free(gate_rows *r)
{
    free(r->v);
    memset(r, 0, sizeof *r);
}

rep_row *gate_rows_push(gate_rows *r)
{
    if (r->n == r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 64;
        rep_row *v = realloc(r->v, sizeof *v * cap);
        if (!v)
            return NULL;
        r->v = v;
        r->cap = cap;
    }
    rep_row *row = &r->v[r->n++];
    memset(row, 0, sizeof *row);
    row->first_fail = -1;
    return row;
}

int gate_row_failed(const rep_row *r)
{
    return r->outcome == REP_ROW_FAIL || r->outcome == REP_ROW_ERROR;
}

void gate_row_identity(rep_row *row, const gate_case *c, const fix_case *fc, const char *builder,
                       const gate_opts *op, gpu_backend be, const char *suffix)
{
    const attn_problem *p = &fc->prob;
    snprintf(row->case_id, sizeof row->case_id, "%s%s", c->id, suffix ? suffix : "");
    rep_set_str(row->group, sizeof row->group, c->group);
    row->b = p->seq.batch;
    row->hq = p->hq;
    row->hkv = p->hkv;
    row->lq = p->seq.lq;
    row->lk = p->seq.lk;
    row->d = p->d;
    row->dv = p->dv;
    row->causal = p->mask.causal;
    row->window = p->mask.sliding_window;
    row->chunk = p->mask.chunk_size;
    row->q_block = c->gp.qb;
    row->kv_block = c->gp.kb;
    rep_set_str(row->builder, sizeof row->builder, builder);
    rep_set_str(row->backend, sizeof row->backend, gpu_backend_name(be));
    row->kernel = op->kernel;
    row->dtype = fc->dtype;
}

void gate_row_fail_check(rep_row *row, int check, const char *fmt, ...)
{
    if (row->outcome == REP_ROW_PASS) { /* the first failure names the row */
        va_list ap;
        char msg[REP_WHY_LEN];
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        row->outcome = REP_ROW_FAIL;
        row->first_fail = check;
        fc_fmt(row->reason, sizeof row->reason, "%s: %s", rep_gate_name((rep_gate)check), msg);
    }
}

/* ---- inputs ---- */

static double rng_uniform(fix_rng *r) /* [-1, 1) */
{
    return ((double)(fix_rng_u64(r) >> 11) * 0x1.0p-53) * 2.0 - 1.0;
}

static void round_all(float *x, size_t n, fc_dtype dt)
{
    for (size_t i = 0; i < n; i++)
        x[i] = ref_round(x[i], dt);
}

/* Reshapes the normal inputs into the adversarial distributions of spec/matrix.md M5. */
static void apply_input(const gate_case *c, fix_case *fc)
{
    const attn_problem *p = &fc->prob;
    size_t nq = attn_q_elems(p), nk = attn_k_elems(p), nv = attn_v_elems(p);
    fix_rng r;
    fix_rng_seed(&r, c->gp.seed ^ 0xad5e4ull);
    switch (c->input) {
    case GI_NORMAL:
    case GI_NINPUTS:
        return;
    case GI_UNIFORM:
        for (size_t i = 0; i < nq; i++) fc->q[i] = (float)rng_uniform(&r);
        for (size_t i = 0; i < nk; i++) fc->k[i] = (float)rng_uniform(&r);
        for (size_t i = 0; i < nv; i++) fc->v[i] = (float)rng_uniform(&r);
        break;
    case GI_NEG_LOGITS: {
        /* First coordinate +a in every query and -a in every key: every score gains
         * -a^2 * scale, about -1e5, while the differences between scores stay normal. */
        float a = (float)sqrt(1e5 / p->scale);
        for (size_t i = 0; i < nq; i += (size_t)p->d) fc->q[i] = a;
        for (size_t i = 0; i < nk; i += (size_t)p->d) fc->k[i] = -a;
        break;
    }
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
    fc_status st = fix_gen_case(&gp, fc, err);
    if (st || c->input == GI_NORMAL)
        return st;
    apply_input(c, fc);
    st = ref_attention_f64(&fc->prob, fc->q, fc->k, fc->v, fc->out, fc->lse, err);
    if (st)
        fix_case_free(fc);
    return st;
}

fc_status gate_recompute_oracle(fix_case *fc, fc_err *err)
{
    return ref_attention_f64(&fc->prob, fc->q, fc->k, fc->v, fc->out, fc->lse, err);
}

/* ---- kernel runs and verdicts ---- */

size_t gate_rows_of(const fix_case *fc)
{
    return attn_lse_elems(&fc->prob);
}

fc_status gate_kernel_paged(const gate_opts *op, gpu_backend be, const fix_case *fc,
                            const bmask *bm, const int32_t *page_table, int32_t num_pages,
                            float *o, float *lse, gpu_result *res, fc_err *err)
{
    gpu_call call = {
        .p = &fc->prob, .dtype = fc->dtype, .q = fc->q, .k = fc->k, .v = fc->v,
        .bm = bm, .kernel = op->kernel, .backend = be,
        .page_table = page_table, .num_pages = num_pages,
    };
    return (op->attention_fn ? op->attention_fn : gpu_attention)(&call, o, lse, res, err);
}

fc_status gate_kernel(const gate_opts *op, gpu_backend be, const fix_case *fc, const bmask *bm,
                      float *o, float *lse, gpu_result *res, fc_err *err)
{
    return gate_kernel_paged(op, be, fc, bm, NULL, 0, o, lse, res, err);
}

fc_status gate_build_mask(const gate_opts *op, bmask *out, bmask_builder b, mask_params m,
                          const seq_info *s, int32_t qb, int32_t kb, fc_err *err)
{
    return (op->bmask_fn ? op->bmask_fn : bmask_build)(out, b, m, s, qb, kb, err);
}

int gate_judge(const gate_judge_in *in, rep_row *row)
{
    const fix_case *fc = in->fc;
    size_t rows = gate_rows_of(fc), no = attn_o_elems(&fc->prob);
    float *o2 = malloc(sizeof(float) * (no + 1)), *l2 = malloc(sizeof(float) * (rows + 1));
    fc_err err;
    gpu_result r1, r2;
    int passed = 0;
    if (!o2 || !l2) {
        rep_row_set_error(row, "out of memory");
        goto done;
    }
    fc_status st = gate_kernel(in->op, in->backend, fc, in->bm, in->o, in->lse, &r1, &err);
    if (!st && in->rerun)
        st = gate_kernel(in->op, in->backend, fc, in->bm, o2, l2, &r2, &err);
    if (st) {
        /* A configuration the kernel refuses before launch (a head dim it is not built for)
         * is not a wrong answer: the row is skipped with the kernel's reason. */
        if (st == FC_EUNSUP)
            rep_row_set_skip(row, err.msg);
        else
            rep_row_set_error(row, err.msg);
        goto done;
    }
    rep_inputs ri = {
        .dtype = fc->dtype, .rows = rows, .dv = (size_t)fc->prob.dv,
        .o = in->o, .lse = in->lse, .o_gold = fc->out, .lse_gold = fc->lse, .o_lp = in->o_lp,
        .sentinels = (r1.sentinels_ok && (!in->rerun || r2.sentinels_ok)) ? REP_SENTINELS_INTACT
                                                                          : REP_SENTINELS_DAMAGED,
        .o_rerun = in->rerun ? o2 : NULL, .lse_rerun = in->rerun ? l2 : NULL,
    };
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

int gate_judge_fixture(const gate_opts *op, gpu_backend be, const fix_case *fc, const bmask *bm,
                       rep_row *row, float *o, float *lse, rep_verdict *v)
{
    gate_bufs b;
    fc_err e;
    if (gate_bufs_alloc(&b, fc, &e)) {
        rep_row_set_error(row, e.msg);
        return -1;
    }
    int pass = -1;
    if (ref_attention_lp(&fc->prob, fc->dtype, fc->q, fc->k, fc->v, b.o_lp, NULL, &e)) {
        rep_row_set_error(row, e.msg);
    } else {
        gate_judge_in in = {.op = op, .fc = fc, .bm = bm, .backend = be, .o_lp = b.o_lp,
                            .o = b.o, .lse = b.lse, .rerun = 1, .verdict = v};
        pass = gate_judge(&in, row);
        if (row->outcome == REP_ROW_ERROR || row->outcome == REP_ROW_SKIP)
            pass = -1;
        if (o)
            memcpy(o, b.o, sizeof(float) * attn_o_elems(&fc->prob));
        if (lse)
            memcpy(lse, b.lse, sizeof(float) * gate_rows_of(fc));
    }
    gate_bufs_free(&b);
    return pass;
}

/* Judges tested outputs that are not a plain kernel run (a merge, a decode slice) against the
 * oracle of fc. */
int gate_judge_outputs(const fix_case *fc, const float *o, const float *lse, const float *o_lp,
                       rep_verdict *v, fc_err *err)
{
    rep_inputs ri = {
        .dtype = fc->dtype, .rows = gate_rows_of(fc), .dv = (size_t)fc->prob.dv,
        .o = o, .lse = lse, .o_gold = fc->out, .lse_gold = fc->lse, .o_lp = o_lp,
    };
    if (rep_evaluate(&ri, v, err))
        return -1;
    return v->pass;
}

/* ---- GK_NUMERIC ---- */

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
    gate_bufs b;
    if ((st = gate_bufs_alloc(&b, &fc, err))) {
        fix_case_free(&fc);
        return st;
    }
    st = ref_attention_lp(&fc.prob, fc.dtype, fc.q, fc.k, fc.v, b.o_lp, NULL, &e);
    if (!st)
        st = gate_build_mask(op, &bm, c->builder, fc.prob.mask, &fc.prob.seq, c->gp.qb, c->gp.kb,
                             &e);
    for (int i = 0; i < op->nbackends; i++) {
        if (!(row = gate_rows_push(rows))) {
            st = fc_errf(err, FC_ENOMEM, "out of memory for report rows");
            break;
        }
        gate_row_identity(row, c, &fc, bmask_builder_name(c->builder), op,
                          op->backends[i], NULL);
        if (st) {
            rep_row_set_error(row, e.msg);
            continue;
        }
        gate_judge_in in = {.op = op, .fc = &fc, .bm = &bm, .backend = op->backends[i],
                            .o_lp = b.o_lp, .o = b.o, .lse = b.lse, .rerun = 1};
        gate_judge(&in, row);
    }
    if (st != FC_ENOMEM)
        st = FC_OK;
    bmask_free(&bm);
    gate_bufs_free(&b);
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
        row->kernel = op->kernel;
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

fc_status gate_case_error(const gate_case *c, const gate_opts *op, gate_rows *rows,
                          const char *msg, fc_err *err)
{
    return gate_case_rows(c, op, rows, 0, msg, err);
}

fc_status gate_bufs_alloc(gate_bufs *b, const fix_case *fc, fc_err *err)
{
    size_t no = attn_o_elems(&fc->prob) + 1, nl = gate_rows_of(fc) + 1;
    b->o = malloc(sizeof(float) * no);
    b->lse = malloc(sizeof(float) * nl);
    b->o_lp = malloc(sizeof(float) * no);
    if (!b->o || !b->lse || !b->o_lp) {
        gate_bufs_free(b);
        return fc_errf(err, FC_ENOMEM, "out of memory for %zu outputs", no);
    }
    return FC_OK;
}

void gate_bufs_free(gate_bufs *b)
{
    free(b->o);
    free(b->lse);
    free(b->o_lp);
    memset(b, 0, sizeof *b);
}

fc_status gate_run_case(const gate_case *c, const gate_opts *o, gate_rows *rows, fc_err *err)
{
    switch (c->kind) {
    case GK_NUMERIC: return run_numeric(c, o, rows, err);
    case GK_WINDOW_EDGE: return gate_run_window_edge(c, o, rows, err);
    case GK_POISON: return gate_run_poison(c, o, rows, err);
    case GK_LSE_MERGE: return gate_run_lse_merge(c, o, rows, err);
    case GK_DECODE: return gate_run_decode(c, o, rows, err);
    case GK_BUILDERS: return gate_run_builders(c, o, rows, err);
    case GK_LAYOUT: return gate_run_layout(c, o, rows, err);
    case GK_PAGED: return gate_run_paged(c, o, rows, err);
    case GK_PROUND: return gate_run_pround(c, o, rows, err);
    case GK_NKINDS: break;
    }
    return gate_case_error(c, o, rows, "unknown case kind", err);
}
