/*
 * check_internal.h - what the parts of check/ share (not part of the layer's API): the layout
 * file's shared metadata, our kernel on a case, the outputs under test of a case and the
 * window-edge triples.
 */
#ifndef FLEXCHECK_CHECK_INTERNAL_H
#define FLEXCHECK_CHECK_INTERNAL_H

#include "check/check.h"

/* A layout file's shared metadata, across its layers in order (docs/semantics.md section 6):
 * consecutive layers share the sequences and a block mask, rebuilt (direct builder) only when a
 * layer's key differs from the cached one; the key holds everything the block mask depends on:
 * every mask term, the block sizes and the sequences. */
typedef struct chk_layer_meta {
    int valid;
    mask_params m;
    int32_t qb, kb;
    seq_info seq;
    attn_xmask x; /* the explicit mask it was built for; x.bits owned (NULL: none) */
    bmask bm;
    int rebuilds;
} chk_layer_meta;

void chk_meta_free(chk_layer_meta *meta);

/* An item to the caller's emit function, if any. */
typedef struct chk_emitter {
    chk_emit_fn fn;
    void *ctx;
} chk_emitter;

static inline void chk_emit(const chk_emitter *e, const chk_item *it)
{
    if (e->fn)
        e->fn(e->ctx, it);
}

/* A designed p-round case as `export` writes it (ci/export.h): float16 or bfloat16, gate_check
 * "p-round", named "<dtype>@design"; its outputs are judged under the gates but H2, then by
 * p-round's rule (judge/exact.h). */
int chk_pround_design(const fix_case *c);

/* Our kernel on case c under the gates (check/case.c): its rows into t, the first failure into
 * r; *skipped 1 when the kernel refuses the case, 2 when it is outside the contract. meta: the
 * layout file's shared metadata, or NULL. */
void chk_case_kernel(const char *path, const fix_case *c, const chk_opts *o,
                     chk_layer_meta *meta, fix_check_result *r, int *skipped, chk_tally *t);

/* Every output under test of case c (check/output.c), once its oracle is confirmed. c is case
 * idx of f, read again with every row when an output fails on a sample's bounds (f NULL: never). */
void chk_case_outputs(const char *path, const fix_file *f, int idx, const fix_case *c,
                      const mask_params *prev, int oracle_ok, const chk_opts *o, chk_tally *t,
                      const chk_emitter *e);

/* The window-edge rule on the outputs of case i and its "@W-1" / "@W+1" neighbours: 0, or 2 when
 * the neighbours are not case i with another window (a REJECT item; the file is malformed). */
int chk_window_edges(const fix_file *f, int i, const chk_opts *o, chk_tally *t,
                     const chk_emitter *e);

#endif
