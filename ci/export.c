/* export.c - the gate's matrix as fixture files (export.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ci/checks.h"
#include "ci/export.h"
#include "ci/gate_case.h"
#include "masks/layout.h"
#include "ref/ref.h"

/* At most: three dtypes times three window variants, or a layout's layers. */
#define MAX_FIX_CASES (LAYOUT_MAX_LAYERS > 9 ? LAYOUT_MAX_LAYERS : 9)

typedef struct batch {
    fix_case v[MAX_FIX_CASES];
    int n;
} batch;

static void batch_free(batch *b)
{
    for (int i = 0; i < b->n; i++)
        fix_case_free(&b->v[i]);
    b->n = 0;
}

/* What every fixture case of gate case c carries: its id with the gate's row suffix, the check,
 * the generator, c's block sizes and the slow builder's block mask of the case's own mask. */
static fc_status tag_case(fix_case *fc, const gate_case *c, const char *id_suffix, fc_err *err)
{
    fc_fmt(fc->case_id, sizeof fc->case_id, "%s%s", c->id, id_suffix);
    snprintf(fc->gate_check, sizeof fc->gate_check, "%s", c->check->name);
    fc_fmt(fc->generator, sizeof fc->generator, "flexcheck export (gate matrix case %s)", c->id);
    fc->q_block_size = c->gp.qb;
    fc->kv_block_size = c->gp.kb;
    fc_status st = bmask_build_slow_x(&fc->bm, fc->prob.mask, &fc->prob.seq, fc->prob.xmask,
                                      c->gp.qb, c->gp.kb, err);
    fc->has_bmask = !st;
    return st;
}

/* One fixture case: the gate's inputs for c under mask m in dtype dt, seed `seed`, the slow
 * builder's block mask, its name and the ids that tie it to the matrix. */
static fc_status add_case(batch *b, const gate_case *c, fc_dtype dt, mask_params m, uint64_t seed,
                          const char *name, const char *id_suffix, fc_err *err)
{
    if (b->n >= MAX_FIX_CASES)
        return fc_errf(err, FC_EINVAL, "%s: more than %d fixture cases", c->id, MAX_FIX_CASES);
    gate_case one = *c;
    one.gp.dtype = dt;
    one.gp.seed = seed;
    fix_case *fc = &b->v[b->n];
    fc_status st = gate_case_inputs(&one, &m, fc, err);
    if (st)
        return st;
    b->n++;
    snprintf(fc->name, sizeof fc->name, "%s", name);
    return tag_case(fc, c, id_suffix, err);
}

/* The decode check's second run as a case of its own: the decode query against the last W keys
 * with no mask ("<dt>@slice"), whose oracle equals the windowed row's, so judging a producer's
 * slice output under the gates is ci/checks/decode.c's rule. `full` is the windowed case. */
static fc_status add_slice(batch *b, const gate_case *c, const fix_case *full, fc_err *err)
{
    if (b->n >= MAX_FIX_CASES)
        return fc_errf(err, FC_EINVAL, "%s: more than %d fixture cases", c->id, MAX_FIX_CASES);
    const attn_problem *p = &full->prob;
    int32_t w = p->mask.sliding_window < p->seq.lk ? p->mask.sliding_window : p->seq.lk;
    int32_t off = p->seq.lk - w;
    fix_case *s = &b->v[b->n];
    memset(s, 0, sizeof *s);
    s->prob = *p;
    memset(&s->prob.seq, 0, sizeof s->prob.seq);
    memset(&s->prob.mask, 0, sizeof s->prob.mask);
    s->dtype = full->dtype;
    fc_status st = seq_init_dense(&s->prob.seq, p->seq.batch, p->seq.lq, w, err);
    if (st)
        return st;
    b->n++; /* from here on the batch frees it */
    size_t nbh = (size_t)p->seq.batch * (size_t)p->hkv, d = (size_t)p->d, dv = (size_t)p->dv;
    s->q = malloc(sizeof(float) * (attn_q_elems(p) + 1));
    s->k = malloc(sizeof(float) * (nbh * (size_t)w * d + 1));
    s->v = malloc(sizeof(float) * (nbh * (size_t)w * dv + 1));
    s->out = malloc(sizeof(double) * (attn_o_elems(p) + 1));
    s->lse = malloc(sizeof(double) * (attn_lse_elems(p) + 1));
    if (!s->q || !s->k || !s->v || !s->out || !s->lse)
        return fc_errf(err, FC_ENOMEM, "%s: out of memory for the decode slice", c->id);
    memcpy(s->q, full->q, sizeof(float) * attn_q_elems(p));
    for (size_t bh = 0; bh < nbh; bh++) {
        memcpy(s->k + bh * (size_t)w * d, full->k + (bh * (size_t)p->seq.lk + (size_t)off) * d,
               sizeof(float) * (size_t)w * d);
        memcpy(s->v + bh * (size_t)w * dv, full->v + (bh * (size_t)p->seq.lk + (size_t)off) * dv,
               sizeof(float) * (size_t)w * dv);
    }
    s->has_oracle = 1;
    if ((st = ref_attention_f64(&s->prob, s->q, s->k, s->v, s->out, s->lse, err)))
        return st;
    char base[FIX_NAME_MAX]; /* full is another element of the same batch */
    snprintf(base, sizeof base, "%s", full->name);
    fc_fmt(s->name, sizeof s->name, "%s@slice", base);
    return tag_case(s, c, "@slice", err);
}

/* The p-round check's designed run as a case of its own ("<dt>@design"): inputs built so that
 * rounding P to the input type shows (gate_pround_case), judged by `check` under the gates and
 * under p-round's rule on the output. */
static fc_status add_design(batch *b, const gate_case *c, fc_dtype dt, fc_err *err)
{
    if (b->n >= MAX_FIX_CASES)
        return fc_errf(err, FC_EINVAL, "%s: more than %d fixture cases", c->id, MAX_FIX_CASES);
    gate_case one = *c;
    one.gp.dtype = dt;
    fix_case *fc = &b->v[b->n];
    fc_status st = gate_pround_case(&one, fc, err);
    if (st)
        return st;
    b->n++;
    fc_fmt(fc->name, sizeof fc->name, "%s@design", fc_dtype_name(dt));
    return tag_case(fc, c, "@design", err);
}

/* The layers of a layout case, each the case the layout check runs (fix_gen_layer_params:
 * its mask, score terms, scale and seeds). */
static fc_status layout_cases(batch *b, const gate_case *c, fc_err *err)
{
    layout_layer layers[LAYOUT_MAX_LAYERS];
    int32_t n;
    fc_status st = layout_get(c->layout, c->nlayers, c->scale_div, layers, LAYOUT_MAX_LAYERS, &n,
                              err);
    for (int32_t l = 0; l < n && !st; l++) {
        char name[24], suffix[24]; /* room for any int: no truncation warning */
        snprintf(name, sizeof name, "layer%02d", (int)l);
        snprintf(suffix, sizeof suffix, "@L%02d", (int)l);
        gate_case lc = *c;
        lc.gp = fix_gen_layer_params(&c->gp, &layers[l], l);
        st = add_case(b, &lc, lc.gp.dtype, lc.gp.mask, lc.gp.seed, name, suffix, err);
    }
    return st;
}

/* A case the matrix pages (check "paged": kernel 2 reads its K/V through a page table) is
 * exported paged, as an engine's cache holds it (docs/fixtures.md "Paged K/V"): pages of KB
 * keys (kernel 2's page size) in an order seeded by the case's seed, a few stale pages of
 * NaN and garbage, the table padded with entries never read. A second case "<dt>@prefix"
 * gives every sequence the first page of sequence 0 (its keys and values, as prefix caching
 * shares a prompt's prefix), its oracle recomputed, so that its table shares that page. */
static fc_status page_cases(batch *b, const gate_case *c, fc_err *err)
{
    enum { STALE = 3 };
    fix_case *fc = &b->v[b->n - 1];
    int32_t ps = c->gp.kb;
    fc_status st = fix_paged_from_logical(fc, ps, STALE, c->gp.seed, err);
    if (st || b->n >= MAX_FIX_CASES)
        return st ? st : fc_errf(err, FC_EINVAL, "%s: more than %d fixture cases", c->id,
                                 MAX_FIX_CASES);
    char name[FIX_NAME_MAX];
    fc_fmt(name, sizeof name, "%s@prefix", fc->name);
    if ((st = add_case(b, c, fc->dtype, c->gp.mask, c->gp.seed, name, "@prefix", err)))
        return st;
    fix_case *pc = &b->v[b->n - 1];
    const attn_problem *p = &pc->prob;
    const seq_info *sq = &p->seq;
    int32_t nrows = sq->packed ? sq->nseq : sq->batch;
#define SEQ_LEN(r) (sq->packed ? sq->cu_k[(r) + 1] - sq->cu_k[r] : sq->lk)
#define SEQ_ROW(r, h) /* sequence r's first key of head h, as a row of K */                    \
    (sq->packed ? (size_t)(h) * (size_t)sq->lk + (size_t)sq->cu_k[r]                          \
                : ((size_t)(r) * (size_t)p->hkv + (size_t)(h)) * (size_t)sq->lk)
    /* only whole pages: a shorter sequence holds a partial page of its own */
    for (int32_t r = 1; SEQ_LEN(0) >= ps && r < nrows; r++)
        for (int32_t h = 0; SEQ_LEN(r) >= ps && h < p->hkv; h++) {
            size_t from = SEQ_ROW(0, h), to = SEQ_ROW(r, h);
            memcpy(pc->k + to * (size_t)p->d, pc->k + from * (size_t)p->d,
                   sizeof(float) * (size_t)ps * (size_t)p->d);
            memcpy(pc->v + to * (size_t)p->dv, pc->v + from * (size_t)p->dv,
                   sizeof(float) * (size_t)ps * (size_t)p->dv);
        }
#undef SEQ_LEN
#undef SEQ_ROW
    if ((st = ref_attention_f64(p, pc->q, pc->k, pc->v, pc->out, pc->lse, err)))
        return st;
    return fix_paged_from_logical(pc, ps, STALE, c->gp.seed + 1, err);
}

static fc_status plain_cases(batch *b, const gate_case *c, fc_err *err)
{
    int edge = !strcmp(c->check->name, "window-edge");
    int decode = !strcmp(c->check->name, "decode");
    int design = !strcmp(c->check->name, "p-round");
    int paged = !strcmp(c->check->name, "paged");
    fc_status st = FC_OK;
    for (int dt = FC_F32; dt <= FC_BF16 && !st; dt++) {
        if (!c->all_dtypes && dt != (int)c->gp.dtype)
            continue;
        const char *dn = fc_dtype_name((fc_dtype)dt);
        st = add_case(b, c, (fc_dtype)dt, c->gp.mask, c->gp.seed, dn, "", err);
        if (!st && paged)
            st = page_cases(b, c, err);
        if (!st && decode)
            st = add_slice(b, c, &b->v[b->n - 1], err);
        if (!st && design && dt != FC_F32) /* float32 keeps P in fp32: nothing to design */
            st = add_design(b, c, (fc_dtype)dt, err);
        for (int s = -1; edge && s <= 1 && !st; s += 2) {
            mask_params m = c->gp.mask;
            m.sliding_window += s;
            char name[40], suffix[16]; /* room for any int */
            snprintf(suffix, sizeof suffix, "@W%+d", s);
            snprintf(name, sizeof name, "%s%s", dn, suffix);
            st = add_case(b, c, (fc_dtype)dt, m, c->gp.seed, name, suffix, err);
        }
    }
    return st;
}

/* fix_write wants the cases in processing (byte) order of their names. */
static int by_name(const void *a, const void *b)
{
    return strcmp(((const fix_case *)a)->name, ((const fix_case *)b)->name);
}

fc_status gate_export_case(const gate_case *c, const char *dir, int force, gate_export_stats *st,
                           fc_err *err)
{
    static batch b; /* large (fix_case holds fixed strings); one export at a time */
    char path[1024];
    if (snprintf(path, sizeof path, "%s/%s.h5", dir, c->id) >= (int)sizeof path)
        return fc_errf(err, FC_EINVAL, "%s: path too long", dir);
    int lay = !strcmp(c->check->name, "layout");
    fc_status s = lay ? layout_cases(&b, c, err) : plain_cases(&b, c, err);
    if (!s) {
        qsort(b.v, (size_t)b.n, sizeof b.v[0], by_name);
        s = fix_write(path, lay ? c->layout : NULL, b.v, b.n, force, err);
    }
    if (!s) {
        struct stat sb;
        st->files++;
        st->cases += b.n;
        st->bytes += stat(path, &sb) == 0 ? (size_t)sb.st_size : 0;
    }
    batch_free(&b);
    return s;
}
