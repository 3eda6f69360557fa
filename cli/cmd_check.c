/*
 * cmd_check.c - 'flexcheck check FILE...': verify fixture files from any producer.
 * Each file is validated whole first (a rejected file gets one line naming file, case and
 * field, and none of its cases is reported), then every case is checked: the reference
 * recomputed against the stored oracle, and any stored block mask for soundness and against
 * the slow builder; with --backend emu|gpu also the kernel against the stored oracle under
 * docs/tolerance.md, with the stored block mask (as given) and with the direct builder's.
 * One line per case, a summary, exit 0 all passed, 1 a check failed, 2 a file was rejected
 * (or bad arguments). With --report DIR the judged outputs (tested ones, and our kernel's with
 * --backend emu|gpu) are also written as the gate's report set, one row each; cases and files
 * that could not be judged are error rows there, so the report's totals match the exit status.
 */
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ci/checks.h"
#include "ci/gate_case.h"
#include "cli/cli.h"
#include "cli/isolate.h"
#include "diag/diag.h"
#include "fixtures/fix.h"
#include "judge/judge.h"

static const char *const CMD = "check";

typedef struct opts {
    fix_backend backend;
    int exact_blocks, quiet;
    const char *only_case;
    int kernel_backend; /* 0: reference only; 1: also the kernel on `be` */
    gpu_backend be;
    int32_t kernel;
    const char *report_dir; /* NULL: no report files */
    int strict;             /* outside-contract rows fail; a run that judged nothing fails */
    cli_iso iso;            /* each file in a child under this limit (cli/isolate.h) */
} opts;

/* The counters of a tally, one entry each: a file is checked in a child process, whose counts
 * are added to the parent's through this list (tally_add). */
#define TALLY_COUNTERS(X)                                                                       \
    X(files) X(rejected) X(cases) X(passed) X(failed) X(skipped)                                \
    X(tested) X(tested_passed) X(tested_failed) /* outputs under test (tested/<label>) */   \
    X(outside) X(tested_outside) /* cases / outputs outside the contract (docs/tolerance.md) */

typedef struct tally {
#define TALLY_INT(name) int name;
    TALLY_COUNTERS(TALLY_INT)
#undef TALLY_INT
    rep_row *rows;                            /* the report rows, in the order judged */
    size_t nrows, cap;
    int oom;                                  /* a row could not be kept */
} tally;

static void keep_row(tally *t, const rep_row *row)
{
    if (t->nrows == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 64;
        rep_row *r = realloc(t->rows, cap * sizeof *r);
        if (!r) {
            t->oom = 1;
            return;
        }
        t->rows = r;
        t->cap = cap;
    }
    t->rows[t->nrows++] = *row;
}

/* A row's identity: the gate's case id for an exported case (attribute case_id), else
 * "<file name>:<case>"; the group, and what the case's problem determines. */
static void row_of(rep_row *row, const char *path, const fix_case *c, const char *group)
{
    memset(row, 0, sizeof *row);
    char tmp[1024];
    snprintf(tmp, sizeof tmp, "%s", path);
    rep_set_str(row->group, sizeof row->group, group);
    if (!c) { /* a file that could not be read */
        rep_set_str(row->case_id, sizeof row->case_id, basename(tmp));
        rep_set_str(row->backend, sizeof row->backend, "-");
        return;
    }
    if (c->case_id[0])
        rep_set_str(row->case_id, sizeof row->case_id, c->case_id);
    else
        fc_fmt(row->case_id, sizeof row->case_id, "%s:%s", basename(tmp), c->name);
    judge_row_problem(row, &c->prob, c->dtype);
    row->q_block = c->q_block_size;
    row->kv_block = c->kv_block_size;
}

static void print_case(const char *path, const fix_case *c, const fix_check_result *r,
                       const opts *o, int skipped)
{
    if (r->passed && o->quiet) /* --quiet: failures only; skips are counted in the summary */
        return;
    char mask[128], terms[128];
    mask_params_text(mask, sizeof mask, &c->prob.mask, MASK_TEXT_LABEL_EQ);
    terms_text(terms, sizeof terms, &c->prob.terms, c->prob.hq, MASK_TEXT_LABEL_EQ);
    /* The stored scale too: 1/sqrt(D) or not, it is the case's (and a common bug's) */
    printf("%s %s %s %s %s scale=%.6g%s",
           !r->passed ? "FAIL" : skipped == 2 ? "OUTSIDE" : skipped ? "SKIP" : "PASS", path,
           cli_esc(c->name).s, fc_dtype_name(c->dtype), mask, c->prob.scale, terms);
    if (!r->passed || skipped) {
        printf(": %s\n", r->detail); /* its sources escape what came from the file */
        return;
    }
    printf(": out %.1e lse %.1e", r->out_err, r->lse_err);
    if (r->bmask_checked)
        printf(", block mask sound%s (%lld partial, %lld full)", r->bmask_exact ? ", exact" : "",
               (long long)r->n_partial, (long long)r->n_full);
    if (o->kernel_backend)
        printf(", kernel %d on %s passes the gates", (int)o->kernel, gpu_backend_name(o->be));
    printf("\n");
}

/* ---- layout files: one shared metadata object, as the gate's M6 (docs/semantics.md 6) ----
 * Consecutive layers share the sequences and a block mask, rebuilt (direct builder) only when a
 * layer's key differs from the cached one; the key holds everything the block mask depends on:
 * every mask term, the block sizes and the sequences. */
typedef struct layer_meta {
    int valid;
    mask_params m;
    int32_t qb, kb;
    seq_info seq;
    bmask bm;
    int rebuilds;
} layer_meta;

static void meta_free(layer_meta *meta)
{
    if (meta->valid) {
        bmask_free(&meta->bm);
        seq_free(&meta->seq);
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

/* The shared block mask for case c's layer: the cached one when the key matches. */
static const bmask *meta_get(layer_meta *meta, const fix_case *c, fc_err *err)
{
    if (meta->valid && !memcmp(&meta->m, &c->prob.mask, sizeof meta->m) &&
        meta->qb == c->q_block_size && meta->kb == c->kv_block_size &&
        same_seq(&meta->seq, &c->prob.seq))
        return &meta->bm;
    int rebuilds = meta->rebuilds;
    meta_free(meta);
    meta->rebuilds = rebuilds;
    if (seq_copy(&meta->seq, &c->prob.seq, err))
        return NULL;
    if (bmask_build(&meta->bm, BMASK_DIRECT, c->prob.mask, &c->prob.seq, c->q_block_size,
                    c->kv_block_size, err)) {
        seq_free(&meta->seq);
        return NULL;
    }
    meta->valid = 1;
    meta->m = c->prob.mask;
    meta->qb = c->q_block_size;
    meta->kb = c->kv_block_size;
    meta->rebuilds++;
    return &meta->bm;
}

/* A designed p-round case as `export` writes it (ci/export.h): float16 or bfloat16, gate_check
 * "p-round", named "<dtype>@design". Its outputs are judged as the gate judges its designed
 * run: under the gates but H2 (judge_case.designed), then by p-round's rule, whatever
 * produced them. */
static int pround_design(const fix_case *c)
{
    const char *at = strrchr(c->name, '@');
    return !strcmp(c->gate_check, "p-round") && at && !strcmp(at, "@design") &&
           (c->dtype == FC_F16 || c->dtype == FC_BF16);
}

/* p-round's rule on output o of a designed case whose row passed the other gates: 1 pass, 0
 * failed under "p-round", -1 not judged (the row an error: the case is no design). */
static int pround_rule(const judge_case *jc, const float *o, rep_row *row)
{
    char msg[REP_WHY_LEN];
    int r = gate_pround_judge(jc, o, msg, sizeof msg);
    if (r < 0)
        rep_row_set_error(row, msg);
    else if (r == 0)
        judge_row_fail_check(row, "p-round", "%s", msg);
    return r < 0 ? -1 : r;
}

/* The kernel on this case under the gates: with the stored block mask as given (if any), with
 * the direct builder's, and for a layer of a layout file (meta not NULL) with the shared
 * metadata's, which must also give bitwise the output of the fresh build. The first failure
 * becomes the case's detail; a case outside the contract sets *skipped = 2 (a failure under
 * --strict); a configuration the kernel refuses (FC_EUNSUP) sets *skipped and
 * the reason instead. */
static void check_kernel(const char *path, const fix_case *c, const opts *o, layer_meta *meta,
                         fix_check_result *r, int *skipped, tally *t)
{
    judge_opts jo = {.kernel = o->kernel};
    judge_case jc = fix_judge_case(c);
    jc.designed = pround_design(c);
    bmask direct;
    fc_err err;
    if (bmask_build(&direct, BMASK_DIRECT, c->prob.mask, &c->prob.seq, c->q_block_size,
                    c->kv_block_size, &err)) {
        r->passed = 0;
        fc_fmt(r->detail, sizeof r->detail, "direct builder: %s", err.msg);
        return;
    }
    const bmask *masks[3] = {c->has_bmask ? &c->bm : NULL, &direct, NULL};
    static const char *const names[3] = {"stored block mask", "direct block mask",
                                         "layout's shared block mask"};
    static const char *const builders[3] = {"stored", "direct", "shared"};
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
    if (judge_baseline(&jc, b.o_lp, &err)) { /* once, for every block mask's run */
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
        row_of(&row, path, c, "check");
        rep_set_str(row.builder, sizeof row.builder, builders[i]);
        rep_set_str(row.backend, sizeof row.backend, gpu_backend_name(o->be));
        row.kernel = o->kernel;
        judge_run_in in = {.jo = &jo, .backend = o->be, .jc = &jc, .bm = masks[i],
                           .o_lp = b.o_lp, .o = b.o, .lse = b.lse, .rerun = 1};
        int pass = gate_judge_run(&in, &row); /* the gate's run: gates, then the diagnosis */
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
                                     cli_esc(c->name).s, at);
                pass = 0;
            }
        }
        keep_row(t, &row);
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

/* The producer's own block mask against the case's mask, as one line into text: 1 when it
 * drops or leaks keys. */
static int tested_bmask(const fix_case *c, const fix_tested *tt, char *text, size_t cap)
{
    bmask_defects d;
    fc_err err;
    if (bmask_find_defects(&tt->bm, c->prob.mask, &c->prob.seq, &d, &err)) {
        fc_fmt(text, cap, "cannot be checked: %s", err.msg);
        return 0;
    }
    bmask_defects_text(text, cap, &tt->bm, &d);
    return d.dropped || d.leaked;
}

/* One output under test judged: its report row, 1 pass, 0 fail, -1 not judged, 2 outside the
 * contract. */
static int judge_tested(const char *path, const fix_case *c, const fix_tested *tt,
                        const judge_case *jc, const float *o_lp, const char *not_judged,
                        rep_row *row, rep_verdict *v, char *bm_text, size_t bm_cap)
{
    bm_text[0] = '\0';
    row_of(row, path, c, "tested");
    char be[REP_NAME_LEN];
    snprintf(be, sizeof be, "tested/%s", tt->label);
    rep_set_str(row->backend, sizeof row->backend, be);
    rep_set_str(row->builder, sizeof row->builder, tt->has_bmask ? "producer's" : "-");
    rep_set_str(row->producer, sizeof row->producer, tt->producer);
    if (not_judged) {
        rep_row_set_error(row, not_judged);
        return -1;
    }
    fc_err err;
    int pass = judge_given(jc, tt->out, tt->lse, tt->out_rerun, o_lp, v, &err);
    if (pass < 0) {
        rep_row_set_error(row, err.msg);
        return -1;
    }
    rep_row_set_verdict(row, v);
    if (tt->has_bmask && tested_bmask(c, tt, bm_text, bm_cap)) {
        judge_row_fail_check(row, "block-mask", "the producer's block mask is %s", bm_text);
        return 0;
    }
    if (jc->designed && (row->outcome == REP_ROW_PASS || row->outcome == REP_ROW_OUTSIDE)) {
        int r = pround_rule(jc, tt->out, row);
        if (r != 1)
            return r;
    }
    return v->outside ? 2 : pass;
}

/* Every output under test of case c, judged under the gates against the case's oracle, once
 * that oracle is confirmed (oracle_ok: our float64 reference reproduced the stored out/lse). */
static void check_tested(const char *path, const fix_case *c, const mask_params *prev,
                         int oracle_ok, const opts *o, tally *t)
{
    judge_case jc = fix_judge_case(c);
    jc.designed = pround_design(c);
    float *o_lp = malloc(sizeof(float) * (attn_o_elems(&c->prob) + 1));
    fc_err err;
    char why[REP_WHY_LEN] = "";
    if (!oracle_ok)
        fc_fmt(why, sizeof why, "not judged: the stored out/lse are not what our float64 "
               "oracle computes from the inputs (see the case's line)");
    else if (!o_lp)
        fc_fmt(why, sizeof why, "not judged: out of memory");
    else if (judge_baseline(&jc, o_lp, &err))
        fc_fmt(why, sizeof why, "not judged: baseline: %s", err.msg);
    for (int i = 0; i < c->ntested; i++) {
        const fix_tested *tt = &c->tested[i];
        rep_row row;
        rep_verdict v = {0};
        char bm[REP_WHY_LEN];
        int pass = judge_tested(path, c, tt, &jc, o_lp, why[0] ? why : NULL, &row, &v, bm,
                                sizeof bm);
        if (pass == 2 && o->strict)
            pass = 0; /* --strict: outside the contract fails */
        t->tested++;
        t->tested_passed += pass == 1;
        t->tested_outside += pass == 2;
        t->tested_failed += pass != 1 && pass != 2;
        if (pass == 1 && o->quiet) {
            keep_row(t, &row);
            continue;
        }
        char detail[REP_WHY_LEN + 160];
        if (pass == 2 || v.outside)
            fc_fmt(detail, sizeof detail, "%s", row.reason);
        else if (pass == 1)
            fc_fmt(detail, sizeof detail, "passes the gates (H1 ratio %.3g%s%s)", v.h1_ratio,
                   tt->lse ? "" : "; no LSE stored, H5 not run",
                   tt->out_rerun ? "; rerun bitwise equal" : "");
        else if (pass == 0 && v.first_fail >= 0 && v.first_fail != REP_H1 && !v.unscaled) {
            char at[112];
            attn_row_where(at, sizeof at, &c->prob, v.worst_row, (int64_t)v.worst_col);
            fc_fmt(detail, sizeof detail, "%s; largest |err| %.3g at %s", row.reason, v.max_err,
                   at);
        } else {
            fc_fmt(detail, sizeof detail, "%s", row.reason);
        }
        printf("%s %s %s tested/%s %s (%s, out stored as %s): %s\n",
               pass == 1 ? "PASS" : pass == 2 ? "OUTSIDE" : "FAIL",
               path, cli_esc(c->name).s, cli_esc(tt->label).s, fc_dtype_name(c->dtype),
               cli_esc(tt->producer).s, cli_esc(tt->encoding).s, cli_esc(detail).s);
        for (int g = 0; pass == 0 && g < REP_NGATES; g++) /* every other failed gate too */
            if (v.gate[g] == REP_FAIL && g != v.first_fail)
                printf("    also %s\n", v.why[g]);
        if (bm[0]) /* the producer's block mask, as judge_tested found it */
            printf("    its block mask (%dx%d): %s\n", (int)tt->bm.q_block_size,
                   (int)tt->bm.kv_block_size, bm);
        if (pass == 0 && !v.pass && !v.unscaled) { /* which rows fail, which bug explains them
                                                     * (not without a baseline's bounds) */
            diag_in in = {.jc = &jc, .o = tt->out, .lse = tt->lse, .v = &v,
                          .bm = tt->has_bmask ? &tt->bm : NULL, .prev = prev};
            diag_explain(&in, &row, stdout, "    ");
        }
        keep_row(t, &row);
    }
    free(o_lp);
}

/* ---- exactness across exported cases: window edges ----
 * An exported window-edge case comes as three fixture cases, "<dt>", "<dt>@W-1" and "<dt>@W+1"
 * (ci/export.h). A producer that stored an output under the same label in all three is held to
 * the gate's window-edge rule (ci/checks/window_edge.c): wherever a row's allowed keys differ
 * between W and W +- 1, its outputs (O, and the LSE when both have one) must differ too. */

/* The kept report row of (case c, label), or NULL (rows dropped for memory). */
static rep_row *kept_row(tally *t, const char *path, const fix_case *c, const char *label)
{
    rep_row key;
    row_of(&key, path, c, "tested");
    char be[REP_NAME_LEN];
    snprintf(be, sizeof be, "tested/%s", label);
    for (size_t i = t->nrows; i-- > 0;)
        if (!strcmp(t->rows[i].case_id, key.case_id) && !strcmp(t->rows[i].backend, be))
            return &t->rows[i];
    return NULL;
}

static const fix_tested *tested_of(const fix_case *c, const char *label)
{
    for (int i = 0; i < c->ntested; i++)
        if (!strcmp(c->tested[i].label, label))
            return &c->tested[i];
    return NULL;
}

/* The first row whose allowed keys differ between w and e but whose outputs are identical;
 * judge_rows when none. */
static size_t same_output_row(const fix_case *w, const fix_tested *tw, const fix_case *e,
                              const fix_tested *te)
{
    judge_case jc = fix_judge_case(w);
    seq_view sv = seq_info_view(&w->prob.seq);
    size_t n = judge_rows(&jc), lq = (size_t)w->prob.seq.lq;
    for (size_t r = 0; r < n; r++) {
        int32_t lo0, hi0, lo1, hi1, tq = (int32_t)(r % lq);
        mask_token_range(w->prob.mask, sv, tq, &lo0, &hi0);
        mask_token_range(e->prob.mask, sv, tq, &lo1, &hi1);
        if ((lo0 < hi0 || lo1 < hi1) && (lo0 != lo1 || hi0 != hi1) &&
            judge_row_identical(&jc, r, tw->out, tw->lse, te->out, te->lse))
            return r;
    }
    return n;
}

/* e is w with another window: the same shapes and sequences, so that a row of one is the same
 * row of the other. A file whose W-1 / W+1 cases are not is no window-edge triple; comparing its
 * outputs row by row would read past the smaller one. */
static int same_shapes(const attn_problem *w, const attn_problem *e, char *why, size_t cap)
{
    const seq_info *a = &w->seq, *b = &e->seq;
    const struct {
        const char *what;
        int32_t x, y;
    } f[] = {{"B", a->batch, b->batch}, {"sequences", a->nseq, b->nseq}, {"Lq", a->lq, b->lq},
             {"Lk", a->lk, b->lk},      {"packed", a->packed, b->packed}, {"Hq", w->hq, e->hq},
             {"Hkv", w->hkv, e->hkv},   {"D", w->d, e->d},               {"Dv", w->dv, e->dv}};
    for (size_t k = 0; k < sizeof f / sizeof f[0]; k++)
        if (f[k].x != f[k].y) {
            fc_fmt(why, cap, "%s %d vs %d", f[k].what, (int)f[k].y, (int)f[k].x);
            return 0;
        }
    size_t n = (size_t)a->nseq + 1;
    if (a->packed && (memcmp(a->cu_q, b->cu_q, n * sizeof *a->cu_q) ||
                      memcmp(a->cu_k, b->cu_k, n * sizeof *a->cu_k))) {
        fc_fmt(why, cap, "other cu_seqlens");
        return 0;
    }
    return 1;
}

/* Returns 0, or 2 when the file's W - 1 / W + 1 cases are no neighbours of case i (one line on
 * stderr: the file is malformed, not the producer wrong). */
static int window_edges(const fix_file *f, int i, int strict, tally *t)
{
    static const char *const sfx[2] = {"@W-1", "@W+1"};
    int ix[2];
    char name[FIX_NAME_MAX + 8];
    for (int j = 0; j < 2; j++) {
        snprintf(name, sizeof name, "%s%s", f->names[i], sfx[j]);
        if ((ix[j] = fix_find_case(f, name)) < 0)
            return 0;
    }
    fix_case w, e[2];
    fc_err err;
    if (fix_read_case(f, i, &w, &err))
        return 0;
    int ok = 0, bad = 0;
    for (; ok < 2 && !fix_read_case(f, ix[ok], &e[ok], &err); ok++)
        ;
    for (int j = 0; ok == 2 && j < 2 && !bad; j++) {
        char why[64];
        if (!same_shapes(&w.prob, &e[j].prob, why, sizeof why)) {
            char msg[REP_WHY_LEN];
            fc_fmt(msg, sizeof msg, "%s: case %s%s is not case %s with another window (%s): "
                   "its window-edge outputs cannot be compared", f->path, cli_esc(w.name).s,
                   sfx[j], cli_esc(w.name).s, why);
            fprintf(stderr, "flexcheck check: %s\n", msg);
            bad = 1;
            /* The file is rejected: its outputs under test are not judged whole, so their
             * rows say so instead of standing as passed. */
            for (int k = 0; k < w.ntested; k++) {
                rep_row *row = kept_row(t, f->path, &w, w.tested[k].label);
                if (!row || row->outcome == REP_ROW_ERROR)
                    continue;
                rep_outcome was = row->outcome;
                rep_row_set_error(row, msg);
                t->tested_passed -= was == REP_ROW_PASS;
                t->tested_outside -= was == REP_ROW_OUTSIDE && !strict;
                t->tested_failed += was == REP_ROW_PASS || (was == REP_ROW_OUTSIDE && !strict);
            }
        }
    }
    for (int k = 0; ok == 2 && !bad && k < w.ntested; k++) {
        const fix_tested *tw = &w.tested[k];
        rep_row *row = kept_row(t, f->path, &w, tw->label);
        for (int j = 0; j < 2 && row; j++) {
            const fix_tested *te = tested_of(&e[j], tw->label);
            if (!te)
                continue;
            size_t r = same_output_row(&w, tw, &e[j], te);
            if (r == attn_lse_elems(&w.prob))
                continue;
            char at[112];
            attn_row_where(at, sizeof at, &w.prob, r, -1);
            rep_outcome was = row->outcome;
            judge_row_fail_check(row, "window-edge", "row %s: allowed keys differ between W and "
                                 "%s, yet the outputs are identical", at, sfx[j] + 1);
            printf("FAIL %s %s tested/%s: window-edge: row %s: allowed keys differ between W and "
                   "%s (case %s%s), yet the outputs are identical\n", f->path, cli_esc(w.name).s,
                   cli_esc(tw->label).s, at, sfx[j] + 1, cli_esc(w.name).s, sfx[j]);
            if (was == REP_ROW_PASS || (was == REP_ROW_OUTSIDE && !strict)) {
                t->tested_passed -= was == REP_ROW_PASS;
                t->tested_outside -= was == REP_ROW_OUTSIDE;
                t->tested_failed++;
            }
        }
    }
    for (int j = 0; j < ok; j++)
        fix_case_free(&e[j]);
    fix_case_free(&w);
    return bad ? 2 : 0;
}

/* Checks every case of an already validated file. Returns 0, or 2 if a read failed anyway or
 * a window-edge triple is malformed (the file is then counted as rejected). */
static int check_cases(const fix_file *f, const opts *o, tally *t)
{
    layer_meta meta; /* a layout file's shared metadata, across its layers in order */
    memset(&meta, 0, sizeof meta);
    int bad = 0; /* a malformed window-edge triple: the file is rejected after all its cases */
    for (int i = 0; i < f->ncases; i++) {
        if (o->only_case && strcmp(f->names[i], o->only_case) != 0)
            continue;
        mask_params prev; /* the previous layer's mask, in a layout file */
        fc_err e;
        int has_prev = f->has_layout && i > 0 && !fix_read_mask(f, i - 1, &prev, &e);
        fix_case c;
        fix_check_result r;
        fc_err err;
        if (fix_read_case(f, i, &c, &err)) {
            fprintf(stderr, "flexcheck check: %s\n", err.msg);
            meta_free(&meta);
            return 2;
        }
        fc_status st = fix_check_case(&c, o->backend, o->exact_blocks, &r, &err);
        if (st) {
            r.passed = 0;
            snprintf(r.detail, sizeof r.detail, "could not run: %.480s", err.msg);
        }
        int skipped = 0;
        if (o->kernel_backend && r.passed)
            check_kernel(f->path, &c, o, f->has_layout ? &meta : NULL, &r, &skipped, t);
        print_case(f->path, &c, &r, o, skipped);
        if (!r.passed && c.ntested == 0 && !o->kernel_backend) {
            rep_row row; /* the case's own failure must show in the report too */
            row_of(&row, f->path, &c, "check");
            rep_set_str(row.backend, sizeof row.backend, "ref");
            rep_row_set_error(&row, r.detail);
            keep_row(t, &row);
        }
        check_tested(f->path, &c, has_prev ? &prev : NULL, !st && r.oracle_ok, o, t);
        t->cases++;
        if (!r.passed)
            t->failed++;
        else if (skipped == 2)
            t->outside++;
        else if (skipped)
            t->skipped++;
        else
            t->passed++;
        int edge = !strcmp(c.gate_check, "window-edge") && !strchr(c.name, '@');
        fix_case_free(&c);
        if (edge && window_edges(f, i, o->strict, t))
            bad = 2;
    }
    if (meta.rebuilds) /* meta_free below forgets the count */
        printf("layout %s: %s's layers ran through one shared metadata object: %d block-mask "
               "build%s\n", cli_esc(f->layout).s, f->path, meta.rebuilds,
               meta.rebuilds == 1 ? "" : "s");
    meta_free(&meta);
    return bad;
}

/* A file that could not be checked: one line on stderr and an error row. */
static void reject(const char *path, const char *msg, tally *t)
{
    fprintf(stderr, "flexcheck check: %s\n", msg);
    t->rejected++;
    rep_row row;
    row_of(&row, path, NULL, "file");
    rep_row_set_error(&row, msg);
    keep_row(t, &row);
}

static void check_file(const char *path, const opts *o, tally *t)
{
    fix_file f;
    fc_err err;
    t->files++;
    fc_status st = fix_open(path, &f, &err);
    if (!st) {
        f.budget = cli_iso_budget(&o->iso);
        st = fix_validate(&f, &err);
    }
    if (st) {
        if (f.h5 >= 0)
            fix_close(&f);
        char msg[sizeof err.msg + 96];
        reject(path, cli_iso_errmsg(st, err.msg, msg, sizeof msg), t);
        return;
    }
    cli_iso_set_phase(CLI_ISO_JUDGING); /* read whole: a crash now is not the file's */
    if (o->only_case && fix_find_case(&f, o->only_case) < 0) {
        fc_fmt(err.msg, sizeof err.msg, "%s: no case named '%s'", path, o->only_case);
        reject(path, err.msg, t);
    } else if (check_cases(&f, o, t)) {
        t->rejected++;
    }
    fix_close(&f);
}

/* ---- each file in a child (cli/isolate.h) ----
 * The child checks one file into a tally of its own and sends it back: the counters, then the
 * report rows (plain data). A child that dies is one line and an error row here. */

typedef struct file_job {
    const char *path;
    const opts *o;
} file_job;

static int check_file_child(void *arg, cli_iso_chan *ch)
{
    const file_job *j = arg;
    tally t = {0};
    check_file(j->path, j->o, &t);
    tally head = t;
    head.rows = NULL;
    head.cap = 0;
    int rc = cli_iso_send(ch, &head, sizeof head) ||
             (t.nrows && cli_iso_send(ch, t.rows, t.nrows * sizeof *t.rows));
    free(t.rows);
    return rc ? 2 : 0;
}

static void tally_add(tally *t, const tally *c, const rep_row *rows)
{
#define TALLY_ADD(name) t->name += c->name;
    TALLY_COUNTERS(TALLY_ADD)
#undef TALLY_ADD
    t->oom |= c->oom;
    for (size_t i = 0; i < c->nrows; i++)
        keep_row(t, &rows[i]);
}

static void check_file_isolated(const char *path, const opts *o, tally *t)
{
    file_job job = {path, o};
    cli_iso_result res;
    fc_err err;
    if (cli_isolated(&o->iso, check_file_child, &job, &res, &err)) {
        t->files++;
        fc_fmt(err.msg + strlen(err.msg), sizeof err.msg - strlen(err.msg), " (%s)", path);
        reject(path, err.msg, t);
        return;
    }
    tally c;
    int whole = res.finished && res.status == 0 && res.len >= sizeof c;
    if (whole) {
        memcpy(&c, res.data, sizeof c);
        whole = c.nrows == (res.len - sizeof c) / sizeof(rep_row) &&
                (res.len - sizeof c) % sizeof(rep_row) == 0;
    }
    if (whole) {
        tally_add(t, &c, (const rep_row *)(res.data + sizeof c));
    } else {
        t->files++;
    }
    if (!whole || res.exit_status != 0) { /* it died, or finished with a sanitizer's report */
        char msg[REP_WHY_LEN];
        cli_iso_describe(&o->iso, path, &res, msg, sizeof msg);
        if (whole && c.rejected) /* the file is counted once */
            fprintf(stderr, "flexcheck check: %s\n", msg);
        else
            reject(path, msg, t);
    }
    cli_iso_result_free(&res);
}

/* --backend: ref alone, or emu/gpu (which must be present) to run the kernel too. */
static int parse_backend(const char *cmd, const char *opt, const char *v, void *dst)
{
    opts *o = dst;
    fc_err err;
    if (!gpu_backend_parse(v, &o->be)) {
        if (!cli_backend_available(o->be, &err)) /* CUDA only in the files' children */
            return cli_usage_error(cmd, "%s %s: %s", opt, v, err.msg), -1;
        o->kernel_backend = 1;
    } else if (fix_backend_parse(v, &o->backend)) {
        return cli_usage_error(cmd, "%s '%s': ref, emu or gpu", opt, v), -1;
    }
    return 0;
}

int cmd_check(int argc, char **argv)
{
    opts o = {.backend = FIX_BACKEND_REF, .be = GPU_BACKEND_EMU, .kernel = GPU_DEFAULT_KERNEL,
              .iso = {CLI_ISO_DEFAULT_MAX_MEMORY, 0, 0}};
    const cli_opt table[] = {
        CLI_FN("backend", "B", "ref: the reference checks only (default); emu or gpu: also\n"
               "run the kernel on each case and judge it under the gates", parse_backend, &o),
        CLI_INT("kernel", "K", "kernel version for emu/gpu, 1 or 2 (default 2)", &o.kernel, 1,
                GPU_MAX_KERNEL),
        CLI_FLAG("exact-blocks", "a stored block mask must equal the slow builder's (as sets)",
                 &o.exact_blocks, 1),
        CLI_STR("case", "NAME", "only the case NAME of each file", &o.only_case),
        CLI_FLAG("quiet", "print failures and the summary only", &o.quiet, 1),
        CLI_FLAG("strict", "rows outside the contract (docs/tolerance.md) fail, and so does a\n"
                 "run in which the kernel judged no case", &o.strict, 1),
        CLI_STR("report", "DIR", "also write the judged outputs as a report set in DIR (the\n"
                "gate's files: summary.md, rows.json, rows.csv, junit.xml, report.html)",
                &o.report_dir),
        CLI_FN("max-memory", "BYTES", "each file is read and checked in a child process limited\n"
               "to this much address space, and a case whose estimate exceeds it is refused\n"
               "(K, M, G, T suffixes)", cli_parse_bytes, &o.iso.max_memory),
        CLI_FN("max-work", "N", "refuse a case needing more than N multiply-adds (K, M, G, T\n"
               "suffixes, powers of 1024; default 1T = 2^40)", cli_parse_count, &o.iso.max_work),
    };
    char intro[768];
    snprintf(intro, sizeof intro,
             "Validates each fixture file (docs/fixtures.md), recomputes the float64 reference\n"
             "from its inputs and compares it with the stored out/lse (relative %.0e), and\n"
             "checks any stored block mask: sound for the case's mask always, equal to the slow\n"
             "builder's sets with --exact-blocks. Outputs other producers stored under\n"
             "tested/<label> are judged under the gates against the confirmed oracle, one line\n"
             "each. Each file is read and checked in a child process: a file that crashes\n"
             "libhdf5 or exhausts --max-memory is one line on stderr and rejected, and the\n"
             "next file is still checked. Options may follow the files.\n",
             FIX_CHECK_RTOL);
    const cli_spec spec = {
        .cmd = CMD,
        .usage = "usage: flexcheck check [--backend ref|emu|gpu] [--kernel K] [--exact-blocks] "
                 "[--case NAME] [--quiet] [--strict] [--report DIR] [--max-memory BYTES] "
                 "[--max-work N] FILE...\n",
        .intro = intro,
        .opts = table,
        .nopts = sizeof table / sizeof table[0],
        .max_operands = CLI_ANY,
        .unknown = "unknown option '%s' (--help)",
        .exit_status = "exit status: 0 all passed, 1 a check failed, 2 a file was rejected.",
    };
    int nfiles, rc = cli_parse(&spec, argc, argv, &nfiles);
    if (rc != CLI_GO)
        return rc;
    if (nfiles == 0)
        return cli_usage_error(CMD, "no fixture files given (--help)");
    fc_err derr;
    if (o.report_dir && rep_dir_check(o.report_dir, &derr)) /* before any work, not after it */
        return cli_usage_error(CMD, "%s", derr.msg);
    o.iso.data_limit = o.kernel_backend && o.be == GPU_BACKEND_CUDA;
    tally t = {0};
    for (int i = 1; i <= nfiles; i++) /* cli_parse moved the files to argv[1..nfiles] */
        check_file_isolated(argv[i], &o, &t);
    printf("check: %d files, %d rejected; %d cases, %d passed, %d failed", t.files, t.rejected,
           t.cases, t.passed, t.failed);
    if (t.skipped)
        printf(", %d skipped (the kernel refuses their configuration)", t.skipped);
    if (t.outside)
        printf(", %d outside the contract", t.outside);
    if (t.tested)
        printf("; %d outputs under test, %d passed, %d failed", t.tested, t.tested_passed,
               t.tested_failed);
    if (t.tested_outside)
        printf(", %d outside the contract", t.tested_outside);
    printf("\n");
    /* A run whose every case the kernel refused judged nothing: say so; --strict fails it. */
    int nothing = o.kernel_backend && t.cases > 0 && t.skipped + t.outside == t.cases &&
                  t.tested == 0;
    if (nothing)
        printf("check: the kernel judged none of the %d cases (every one skipped or outside the "
               "contract)%s\n", t.cases, o.strict ? "; --strict fails the run" : "");
    fflush(stdout);
    rc = t.rejected                                          ? CLI_BADINPUT
         : t.failed || t.tested_failed || (o.strict && nothing) ? CLI_FAIL
                                                                : CLI_PASS;
    if (o.report_dir) { /* after the verdict is printed: a report that fails cannot hide it */
        rep_run run;
        cli_run_identity(&run, "check");
        if (o.kernel_backend) {
            rep_set_str(run.backends, sizeof run.backends, gpu_backend_name(o.be));
            run.kernel = o.kernel;
        }
        run.strict = o.strict;
        rep_set set = {.rows = t.rows, .n = t.nrows, .run = &run};
        fc_err err;
        if (t.oom)
            rc = cli_usage_error(CMD, "%s: out of memory for the report rows; not written",
                                 o.report_dir);
        else if (rep_write_all(o.report_dir, &set, &err))
            rc = cli_usage_error(CMD, "%s", err.msg);
        else
            printf("report: %s/%s (%zu rows)\n", o.report_dir, REP_FILE_MD, t.nrows);
    }
    free(t.rows);
    return rc;
}
