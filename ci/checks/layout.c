/*
 * layout.c - hybrid layer layouts through one shared metadata object (docs/semantics.md
 * section 6, docs/matrix.md M6).
 *
 * Like vLLM's FlexAttention backend, the runner keeps one metadata object (the sequences and a
 * block mask) for consecutive layers and rebuilds the block mask only when a layer's cache key
 * differs from the cached one. The key must hold every parameter the block mask depends on
 * (causal, window, chunk, block sizes, builder; the sequences are the object's own). A layer's
 * score terms and scale (Gemma 2's soft-cap and query_pre_attn_scalar, gpt-oss's sinks) are not
 * in it: they never change which blocks are visited (docs/semantics.md section 7), so a layer
 * that differs from the last only in them shares its block mask, while its own problem, built
 * from its own parameters, carries them into the kernel and the oracle. Each
 * layer's kernel output with the shared mask is judged against that layer's oracle and must be
 * bitwise equal to the output with a freshly built mask. The test-only key modes drop
 * parameters from the key, which reproduces the seed's bug: a window layer's trimmed list reused
 * by a full layer drops keys, a full layer's list reused by a window layer leaks them, and both
 * only show when some sequence is longer than the window or chunk.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ci/checks.h"
#include "ci/gate_case.h"
#include "masks/layout.h"

#define CHECK "layout"
#include "ref/ref.h"

typedef struct meta_key {
    mask_params mask;
    int32_t qb, kb;
    bmask_builder builder;
} meta_key;

typedef struct layer_meta {
    int valid;
    meta_key key;
    bmask bm;
    int rebuilds;
} layer_meta;

/* The key as the runner's mode sees it: the correct one keeps everything. */
static meta_key key_of(gate_cache_key mode, mask_params m, int32_t qb, int32_t kb,
                       bmask_builder builder)
{
    meta_key k;
    memset(&k, 0, sizeof k);
    k.qb = qb;
    k.kb = kb;
    k.builder = builder;
    switch (mode) {
    case GATE_CACHE_FULL: k.mask = m; break;
    case GATE_CACHE_WINDOW_ONLY: k.mask.sliding_window = m.sliding_window; break;
    case GATE_CACHE_CAUSAL_ONLY: k.mask.causal = m.causal; break;
    }
    return k;
}

/* The shared block mask for a layer: the cached one if the key matches, else rebuilt. */
static const bmask *meta_get(layer_meta *meta, const gate_opts *op, mask_params m,
                             const seq_info *s, int32_t qb, int32_t kb, bmask_builder builder,
                             fc_err *err)
{
    meta_key k = key_of(op->cache_key, m, qb, kb, builder);
    if (meta->valid && !memcmp(&k, &meta->key, sizeof k))
        return &meta->bm;
    if (meta->valid)
        bmask_free(&meta->bm);
    meta->valid = 0;
    if (judge_build_mask(&op->run, &meta->bm, builder, m, s, qb, kb, err))
        return NULL;
    meta->valid = 1;
    meta->key = k;
    meta->rebuilds++;
    return &meta->bm;
}

/* A layer no backend runs (too long for the emu, the only one): a skip row, after the shared
 * object has seen the layer as the runner would (its block mask, rebuilt when the key differs),
 * so the next layer meets the object a real run leaves. */
static fc_status skip_layer(const gate_case *c, const gate_opts *op, const fix_gen_params *gp,
                            layer_meta *meta, const char *suffix, const char *why, gate_rows *rows,
                            fc_err *err)
{
    fix_case fc;
    fc_err e;
    memset(&fc, 0, sizeof fc);
    fc.dtype = gp->dtype;
    if (fix_gen_problem(gp, &fc.prob, &e) ||
        !meta_get(meta, op, gp->mask, &fc.prob.seq, c->gp.qb, c->gp.kb, c->builder, &e)) {
        attn_problem_free(&fc.prob);
        return gate_case_error(c, op, rows, e.msg, err);
    }
    for (int i = 0; i < op->nbackends; i++) {
        rep_row *row = gate_rows_push(rows);
        if (!row) {
            attn_problem_free(&fc.prob);
            return gate_rows_oom(err);
        }
        gate_row_identity(row, c, &fc, bmask_builder_name(c->builder), op, op->backends[i],
                          suffix);
        rep_row_set_skip(row, why);
    }
    attn_problem_free(&fc.prob);
    return FC_OK;
}

/* One layer on every backend: a row each. */
static fc_status run_layer(const gate_case *c, const gate_opts *op, int32_t l,
                           const layout_layer *layer, layer_meta *meta, gate_rows *rows,
                           fc_err *err)
{
    gate_case lc = *c;
    lc.gp = fix_gen_layer_params(&c->gp, layer, l); /* its mask, terms, scale and seeds */
    mask_params m = lc.gp.mask;
    fix_case fc;
    judge_bufs b;
    bmask fresh;
    fc_err e;
    char suffix[16], why[REP_WHY_LEN];
    snprintf(suffix, sizeof suffix, "@L%02d", (int)l);
    /* A long global layer among windowed ones (M7's Gemma 3 at 128k) is the emu's to skip. */
    int emu_skip = gate_emu_skips(&lc.gp, why, sizeof why), others = 0;
    for (int i = 0; i < op->nbackends; i++)
        others += op->backends[i] != GPU_BACKEND_EMU;
    if (emu_skip && !others)
        return skip_layer(c, op, &lc.gp, meta, suffix, why, rows, err);
    if (gate_case_inputs(&lc, NULL, &fc, &e))
        return gate_case_error(c, op, rows, e.msg, err);
    judge_case jc = fix_judge_case(&fc);
    fc_status st = judge_bufs_alloc(&b, &jc, err);
    if (st) {
        fix_case_free(&fc);
        return st;
    }
    memset(&fresh, 0, sizeof fresh);
    const bmask *shared = NULL;
    float *of = malloc(sizeof(float) * (attn_o_elems(&fc.prob) + 1));
    float *lf = malloc(sizeof(float) * (judge_rows(&jc) + 1));
    int ok = of && lf &&
             !judge_baseline(&jc, &b.lp, &e) &&
             (shared = meta_get(meta, op, m, &fc.prob.seq, c->gp.qb, c->gp.kb, c->builder,
                                &e)) != NULL &&
             !judge_build_mask(&op->run, &fresh, c->builder, m, &fc.prob.seq, c->gp.qb, c->gp.kb, &e);
    if (!of || !lf)
        snprintf(e.msg, sizeof e.msg, "out of memory");
    for (int i = 0; i < op->nbackends; i++) {
        rep_row *row = gate_rows_push(rows);
        if (!row) {
            st = gate_rows_oom(err);
            break;
        }
        gate_row_identity(row, c, &fc, bmask_builder_name(c->builder), op,
                          op->backends[i], suffix);
        if (!ok) {
            rep_row_set_error(row, e.msg);
            continue;
        }
        if (emu_skip && op->backends[i] == GPU_BACKEND_EMU) {
            rep_row_set_skip(row, why);
            continue;
        }
        judge_run_in in = {.jo = &op->run, .backend = op->backends[i], .jc = &jc, .bm = shared,
                           .lp = &b.lp, .o = b.o, .lse = b.lse, .rerun = 1};
        gate_judge_run(&in, row);
        if (judge_kernel(&op->run, op->backends[i], &jc, &fresh, NULL, 0, of, lf, NULL, &e)) {
            judge_row_fail_check(row, CHECK, "fresh-mask run: %s", e.msg);
            continue;
        }
        size_t r = judge_first_differing_row(&jc, of, lf, b.o, b.lse);
        if (r < judge_rows(&jc)) {
            char at[112];
            attn_row_where(at, sizeof at, jc.prob, r, -1);
            judge_row_fail_check(row, CHECK,
                                 "layer %d: output row %s with the shared block mask differs "
                                 "from a fresh build (stale cache key?)", (int)l, at);
        }
    }
    free(of);
    free(lf);
    bmask_free(&fresh);
    judge_bufs_free(&b);
    fix_case_free(&fc);
    return st;
}

static fc_status run(const gate_case *c, const gate_opts *op, gate_rows *rows, fc_err *err)
{
    layout_layer layers[LAYOUT_MAX_LAYERS];
    int32_t n;
    fc_err e;
    if (layout_get(c->layout, c->nlayers, c->scale_div, layers, LAYOUT_MAX_LAYERS, &n, &e))
        return gate_case_error(c, op, rows, e.msg, err);
    layer_meta meta;
    memset(&meta, 0, sizeof meta);
    fc_status st = FC_OK;
    for (int32_t l = 0; l < n && !st; l++)
        st = run_layer(c, op, l, &layers[l], &meta, rows, err);
    if (meta.valid)
        bmask_free(&meta.bm);
    return st;
}

const gate_check gate_check_layout = {CHECK, "layout equals fresh builds", run};
