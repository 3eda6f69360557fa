/*
 * case.c - our kernel on a fixture case (check.h, `check --backend emu|gpu`): under the gates with
 * the stored block mask as given, with a fresh build's, and for a layer of a layout file
 * with the shared metadata's, which must give bitwise the output of a fresh build.
 */
#include <stdlib.h>
#include <string.h>

#include "check/check_internal.h"
#include "judge/exact.h"

/* ---- layout files: one shared metadata object, as the gate's M6 (docs/semantics.md 6) ---- */

void chk_meta_free(chk_layer_meta *meta)
{
    if (meta->valid) {
        bmask_free(&meta->bm);
        seq_free(&meta->seq);
        free((void *)meta->x.bits);
    }
    memset(meta, 0, sizeof *meta);
}

static int same_seq(const seq_info *a, const seq_info *b)
{
    return a->batch == b->batch && a->nseq == b->nseq && a->lq == b->lq && a->lk == b->lk &&
           a->packed == b->packed &&
           !memcmp(a->cu_q, b->cu_q, sizeof(int32_t) * ((size_t)a->nseq + 1)) &&
           !memcmp(a->cu_k, b->cu_k, sizeof(int32_t) * ((size_t)a->nseq + 1));
}

static size_t xmask_bytes(const attn_xmask *x)
{
    return x->bits ? (size_t)x->bm * (size_t)x->hm * (size_t)x->lq * (size_t)xmask_row_bytes(x->lk)
                   : 0;
}

/* Same explicit mask (both off, or the same dims and bits). */
static int same_xmask(const attn_xmask *a, const attn_xmask *b)
{
    if (!a->bits || !b->bits)
        return !a->bits && !b->bits;
    return a->bm == b->bm && a->hm == b->hm && a->lq == b->lq && a->lk == b->lk &&
           !memcmp(a->bits, b->bits, xmask_bytes(a));
}

/* The block mask of case c's families AND explicit mask: the direct builder's, or with an
 * explicit mask the slow builder's (the only one that reads it, masks/bmask.h). */
static fc_status build_case_mask(bmask *out, const fix_case *c, fc_err *err)
{
    return bmask_build_x(out, c->prob.xmask.bits ? BMASK_SLOW : BMASK_DIRECT, c->prob.mask,
                         &c->prob.seq, c->prob.xmask, c->q_block_size, c->kv_block_size, err);
}

/* The shared block mask for case c's layer: the cached one when the key (the families, the
 * explicit mask, block sizes, sequences) matches. */
static const bmask *meta_get(chk_layer_meta *meta, const fix_case *c, fc_err *err)
{
    if (meta->valid && !memcmp(&meta->m, &c->prob.mask, sizeof meta->m) &&
        meta->qb == c->q_block_size && meta->kb == c->kv_block_size &&
        same_seq(&meta->seq, &c->prob.seq) && same_xmask(&meta->x, &c->prob.xmask))
        return &meta->bm;
    int rebuilds = meta->rebuilds;
    chk_meta_free(meta);
    meta->rebuilds = rebuilds;
    if (seq_copy(&meta->seq, &c->prob.seq, err))
        return NULL;
    meta->x = c->prob.xmask;
    if (c->prob.xmask.bits) {
        uint8_t *bits = malloc(xmask_bytes(&c->prob.xmask) + 1);
        if (!bits) {
            seq_free(&meta->seq);
            fc_errf(err, FC_ENOMEM, "out of memory for the layout's explicit mask");
            return NULL;
        }
        memcpy(bits, c->prob.xmask.bits, xmask_bytes(&c->prob.xmask));
        meta->x.bits = bits;
    }
    if (build_case_mask(&meta->bm, c, err)) {
        seq_free(&meta->seq);
        free((void *)meta->x.bits);
        meta->x.bits = NULL;
        return NULL;
    }
    meta->valid = 1;
    meta->m = c->prob.mask;
    meta->qb = c->q_block_size;
    meta->kb = c->kv_block_size;
    meta->rebuilds++;
    return &meta->bm;
}

/* p-round's rule on output o of a designed case whose row passed the other gates: 1 pass, 0
 * failed under "p-round", -1 not judged (the row an error: the case is no design). */
static int pround_rule(const judge_case *jc, const float *o, rep_row *row)
{
    char msg[REP_WHY_LEN];
    int r = judge_pround(jc, o, msg, sizeof msg);
    if (r < 0)
        rep_row_set_error(row, msg);
    else if (r == 0)
        judge_row_fail_check(row, "p-round", "%s", msg);
    return r < 0 ? -1 : r;
}

/* The kernel on this case under the gates: with the stored block mask as given (if any), with
 * a fresh build's (the direct builder's; the slow one's with an explicit mask), and for a
 * layer of a layout file (meta not NULL) with the shared
 * metadata's, which must also give bitwise the output of the fresh build. The first failure
 * becomes the case's detail; a case outside the contract sets *skipped = 2 (a failure under
 * --strict); a configuration the kernel refuses (FC_EUNSUP) sets *skipped and
 * the reason instead. */
void chk_case_kernel(const char *path, const fix_case *c, const chk_opts *o,
                     chk_layer_meta *meta, fix_check_result *r, int *skipped, chk_tally *t)
{
    if (c->sample.tq) { /* the kernel computes every row: a sample holds q for its own alone */
        *skipped = 1;
        fc_fmt(r->detail, sizeof r->detail, "kernel %d on %s: not run on a sample (it computes "
               "every row; --rows all runs it)", (int)o->kernel, gpu_backend_name(o->be));
        return;
    }
    judge_opts jo = {.kernel = o->kernel};
    judge_case jc = fix_judge_case(c);
    jc.designed = chk_pround_design(c);
    bmask direct;
    fc_err err;
    if (build_case_mask(&direct, c, &err)) {
        r->passed = 0;
        fc_fmt(r->detail, sizeof r->detail, "%s builder: %s",
               c->prob.xmask.bits ? "slow" : "direct", err.msg);
        return;
    }
    const bmask *masks[3] = {c->has_bmask ? &c->bm : NULL, &direct, NULL};
    const int slow = c->prob.xmask.bits != NULL; /* build_case_mask's builder */
    const char *const names[3] = {"stored block mask",
                                  slow ? "slow block mask" : "direct block mask",
                                  "layout's shared block mask"};
    const char *const builders[3] = {"stored", slow ? "slow" : "direct", "shared"};
    judge_bufs b;
    size_t no = attn_o_elems(&c->prob), nl = judge_rows(&jc);
    float *of = malloc(sizeof(float) * (no + 1)), *lf = malloc(sizeof(float) * (nl + 1));
    if (!of || !lf || judge_bufs_alloc(&b, &jc, &err)) {
        r->passed = 0;
        fc_fmt(r->detail, sizeof r->detail, "kernel run: out of memory");
        free(of);
        free(lf);
        bmask_free(&direct);
        return;
    }
    if (judge_baseline(&jc, &b.lp, &err)) { /* once, for every block mask's run */
        r->passed = 0;
        fc_fmt(r->detail, sizeof r->detail, "baseline: %s", err.msg);
    }
    if (meta && !(masks[2] = meta_get(meta, c, &err))) {
        r->passed = 0;
        fc_fmt(r->detail, sizeof r->detail, "layout's shared metadata: %s", err.msg);
    }
    for (int i = 0; i < 3 && r->passed; i++) {
        if (!masks[i])
            continue;
        rep_row row;
        chk_row_of(&row, path, c, "check");
        rep_set_str(row.builder, sizeof row.builder, builders[i]);
        rep_set_str(row.backend, sizeof row.backend, gpu_backend_name(o->be));
        row.kernel = o->kernel;
        judge_run_in in = {.jo = &jo, .backend = o->be, .jc = &jc, .bm = masks[i],
                           .lp = &b.lp, .o = b.o, .lse = b.lse, .rerun = 1};
        rep_verdict v;
        in.verdict = &v;
        int pass = judge_run(&in, &row); /* as the gate runs it: the gates, then the diagnosis */
        if (!pass)
            diag_after_run(&in, &v, &row);
        if (jc.designed && (row.outcome == REP_ROW_PASS || row.outcome == REP_ROW_OUTSIDE))
            pass = pround_rule(&jc, b.o, &row) == 1 ? pass : 0;
        if (i == 1) { /* the fresh build's outputs, for the shared run to equal */
            memcpy(of, b.o, sizeof(float) * no);
            memcpy(lf, b.lse, sizeof(float) * nl);
        } else if (i == 2 && (row.outcome == REP_ROW_PASS || row.outcome == REP_ROW_OUTSIDE)) {
            size_t rr = judge_first_differing_row(&jc, b.o, b.lse, of, lf);
            if (rr < nl) {
                char at[112];
                attn_row_where(at, sizeof at, &c->prob, rr, -1);
                judge_row_fail_check(&row, "layout", "layer %s: row %s with the shared block "
                                     "mask differs from a fresh build (stale metadata?)",
                                     fc_esc(c->name).s, at);
                pass = 0;
            }
        }
        chk_tally_keep(t, &row);
        if (pass == 1)
            continue;
        if (row.outcome == REP_ROW_SKIP || (row.outcome == REP_ROW_OUTSIDE && !o->strict)) {
            *skipped = row.outcome == REP_ROW_SKIP ? 1 : 2;
            fc_fmt(r->detail, sizeof r->detail, "kernel %d on %s: %s", (int)o->kernel,
                   gpu_backend_name(o->be), row.reason);
            if (row.outcome == REP_ROW_SKIP)
                break; /* the kernel refuses the case: no other mask will run it either */
            continue; /* outside: the other masks' runs and the layout comparison still judge */
        }
        r->passed = 0;
        fc_fmt(r->detail, sizeof r->detail, "kernel %d on %s with the %s: %s%s%s",
               (int)o->kernel, gpu_backend_name(o->be), names[i], row.reason,
               row.explained[0] ? "; explained by " : "", row.explained);
    }
    judge_bufs_free(&b);
    free(of);
    free(lf);
    bmask_free(&direct);
}
