/*
 * output.c - outputs other producers stored in a file (tested/<label>), judged (check.h) each
 * through verdict.c against the case's confirmed oracle, a failure on a sample's bounds judged
 * again on every row read anew; and the window-edge rule across an exported triple's outputs.
 */
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check/check_internal.h"
#include "judge/exact.h"

int chk_label_selected(const chk_opts *o, const char *label)
{
    for (int i = 0; i < o->nlabels; i++)
        if (!fnmatch(o->labels[i], label, 0))
            return 1;
    return o->nlabels == 0;
}

int chk_pround_design(const fix_case *c)
{
    const char *at = strrchr(c->name, '@');
    return !strcmp(c->gate_check, "p-round") && at && !strcmp(at, "@design") &&
           (c->dtype == FC_F16 || c->dtype == FC_BF16);
}

/* ---- the outputs under test of a case ---- */

/* A failure on a sample, judged again on every row.
 * A sample's bounds (e_lp_max, NMSE_lp, e_lse_lp_max, max|O_gold|: over the rows judged) can be
 * tighter than the whole case's: over the quick export, 24 of 8,478 outputs that pass on every
 * row failed on a 64-token sample (docs/tolerance.md "Judging a sample"). So an output that
 * fails on a sample only gates whose bounds those are (rep_fails_on_bounds) is judged again on
 * every row when every row fits the budget, and the verdict is every row's: a sample never
 * fails an output on a bound tighter than all-rows judging sets. Past the budget the failure
 * stands and its line says that its bounds are the sample's and what judging every row needs. */
typedef struct whole_case {
    int state; /* 0 not read yet, 1 read and judged ready, -1 cannot be: why says */
    fix_case c;
    judge_case jc;
    judge_lp lp;
    char why[REP_WHY_LEN];
} whole_case;

static void whole_read(whole_case *w, const fix_file *f, int idx, const chk_opts *o)
{
    fix_file g = *f;
    g.budget.rows = 0; /* every row, within the same budgets */
    fc_err err;
    fix_check_result r;
    w->state = -1;
    if (fix_read_case(&g, idx, &w->c, &err)) {
        fc_fmt(w->why, sizeof w->why, "%s", err.msg);
        return;
    }
    if (!w->c.oracle_computed && fix_check_case(&w->c, FIX_BACKEND_REF, o->exact_blocks, &r,
                                                 &err)) {
        fc_fmt(w->why, sizeof w->why, "its oracle on every row could not be confirmed: %s",
               err.msg);
    } else if (!w->c.oracle_computed && !r.oracle_ok) {
        fc_fmt(w->why, sizeof w->why, "the stored out/lse of the rows outside the sample are "
               "not what our float64 oracle computes: %s", r.detail);
    } else {
        w->jc = fix_judge_case(&w->c);
        w->jc.designed = chk_pround_design(&w->c);
        if (judge_baseline(&w->jc, &w->lp, &err))
            fc_fmt(w->why, sizeof w->why, "baseline on every row: %s", err.msg);
        else
            w->state = 1;
        return;
    }
    fix_case_free(&w->c);
}

static void whole_free(whole_case *w)
{
    if (w->state == 1) {
        judge_lp_free(&w->lp);
        fix_case_free(&w->c);
    }
}

static chk_output_in output_in(const fix_tested *tt, const mask_params *prev, const char *why,
                               const chk_opts *o)
{
    fc_dtype stored = FC_F32, lse_stored = FC_F32; /* float32 and float64 alike: finer than any
                                                     * case's dtype */
    if (fc_dtype_parse(tt->encoding, &stored))
        stored = FC_F32;
    if (!tt->lse || fc_dtype_parse(tt->lse_encoding, &lse_stored))
        lse_stored = FC_F32;
    chk_output_in in = {.o = tt->out, .lse = tt->lse, .o_rerun = tt->out_rerun,
                        .bm = tt->has_bmask ? &tt->bm : NULL, .prev = prev,
                        .not_judged = why[0] ? why : NULL, .strict = o->strict,
                        .out_dtype = stored, .lse_dtype = lse_stored,
                        .rounds_like_flex = tt->rounds_like_flex};
    return in;
}

static void result_of(chk_result *res, const char *path, const fix_case *c, const fix_tested *tt)
{
    chk_row_of(&res->row, path, c, "tested");
    char be[REP_NAME_LEN];
    snprintf(be, sizeof be, "tested/%s", tt->label);
    rep_set_str(res->row.backend, sizeof res->row.backend, be);
    rep_set_str(res->row.builder, sizeof res->row.builder, tt->has_bmask ? "producer's" : "-");
    rep_set_str(res->row.producer, sizeof res->row.producer, tt->producer);
}

void chk_case_outputs(const char *path, const fix_file *f, int idx, const fix_case *c,
                      const mask_params *prev, int oracle_ok, const chk_opts *o, chk_tally *t,
                      const chk_emitter *e)
{
    judge_case jc = fix_judge_case(c);
    jc.designed = chk_pround_design(c);
    judge_lp lp = {0};
    fc_err err;
    char why[REP_WHY_LEN] = "";
    if (!oracle_ok)
        fc_fmt(why, sizeof why, "not judged: the stored out/lse are not what our float64 "
               "oracle computes from the inputs (see the case's line)");
    else if (judge_baseline(&jc, &lp, &err))
        fc_fmt(why, sizeof why, "not judged: baseline: %s", err.msg);
    whole_case w = {0};
    for (int i = 0; i < c->ntested; i++) {
        const fix_tested *tt = &c->tested[i];
        if (!chk_label_selected(o, tt->label))
            continue;
        chk_result res;
        result_of(&res, path, c, tt);
        chk_output_in in = output_in(tt, prev, why, o);
        diag_paged pgv = fix_diag_paged(c);
        in.paged = c->paged ? &pgv : NULL;
        chk_judge_output(&jc, &lp, &in, &res);
        fix_sample_text(res.sample, sizeof res.sample, c);
        const fix_case *by = c; /* the case whose rows the verdict is on */
        const judge_case *byj = &jc;
        if (c->sample.tq && res.outcome == CHK_FAILED && res.on_bounds && f) {
            char gates[64];
            chk_failed_gates(gates, sizeof gates, &res.v);
            if (!w.state)
                whole_read(&w, f, idx, o);
            const fix_tested *wt = w.state == 1 && i < w.c.ntested ? &w.c.tested[i] : NULL;
            if (wt && !strcmp(wt->label, tt->label)) {
                chk_result_free(&res);
                result_of(&res, path, &w.c, wt);
                chk_output_in win = output_in(wt, prev, "", o);
                diag_paged wpg = fix_diag_paged(&w.c);
                win.paged = w.c.paged ? &wpg : NULL;
                chk_judge_output(&w.jc, &w.lp, &win, &res);
                chk_sample_confirmed(res.sample, sizeof res.sample, gates, c->sample.n,
                                     c->prob.seq.lq, c->sample_seed);
                t->confirmed++;
                t->overturned += res.outcome == CHK_PASSED;
                by = &w.c;
                byj = &w.jc;
                tt = wt;
            } else {
                chk_sample_unconfirmed(res.sample, sizeof res.sample, gates,
                                       w.state == 1 ? "the case read again differs" : w.why);
                t->unconfirmed++;
            }
        }
        t->tested++;
        t->tested_passed += res.outcome == CHK_PASSED;
        t->tested_outside += res.outcome == CHK_OUTSIDE;
        t->tested_failed += res.outcome == CHK_FAILED || res.outcome == CHK_NOT_JUDGED;
        chk_item it = {.kind = CHK_ITEM_OUTPUT, .path = path, .c = by, .tt = tt, .res = &res,
                       .jc = byj};
        chk_emit(e, &it);
        chk_tally_keep(t, &res.row);
        chk_result_free(&res);
    }
    whole_free(&w);
    judge_lp_free(&lp);
}

/* ---- exactness across exported cases: window edges ----
 * An exported window-edge case comes as three fixture cases, "<dt>", "<dt>@W-1" and "<dt>@W+1"
 * (ci/export.h). A producer that stored an output under the same label in all three is held to
 * the window-edge rule (judge/exact.h): wherever a row's allowed keys differ between W and
 * W +- 1, its outputs (O, and the LSE when both have one) must differ too. */

/* The kept report row of (case c, label), or NULL (rows dropped for memory). */
static rep_row *kept_row(chk_tally *t, const char *path, const fix_case *c, const char *label)
{
    rep_row key;
    chk_row_of(&key, path, c, "tested");
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

/* A row judged before turned into an error or a failure: the counts follow it. */
static void recount(chk_tally *t, rep_outcome was, int strict)
{
    t->tested_passed -= was == REP_ROW_PASS;
    t->tested_outside -= was == REP_ROW_OUTSIDE && !strict;
    t->tested_failed += was == REP_ROW_PASS || (was == REP_ROW_OUTSIDE && !strict);
}

/* The triple is malformed: the file is rejected, and its outputs under test are not judged whole,
 * so their rows say so instead of standing as passed. */
static void malformed(const fix_file *f, const fix_case *w, const char *sfx, const char *why,
                      const chk_opts *o, chk_tally *t, const chk_emitter *e)
{
    char msg[REP_WHY_LEN];
    fc_fmt(msg, sizeof msg, "%s: case %s%s is not case %s with another window (%s): its "
           "window-edge outputs cannot be compared", fc_esc(f->path).s, fc_esc(w->name).s, sfx,
           fc_esc(w->name).s, why);
    chk_item it = {.kind = CHK_ITEM_REJECT, .path = f->path, .text = msg};
    chk_emit(e, &it);
    for (int k = 0; k < w->ntested; k++) {
        if (!chk_label_selected(o, w->tested[k].label))
            continue;
        rep_row *row = kept_row(t, f->path, w, w->tested[k].label);
        if (!row || row->outcome == REP_ROW_ERROR)
            continue;
        rep_outcome was = row->outcome;
        rep_row_set_error(row, msg);
        recount(t, was, o->strict);
    }
}

int chk_window_edges(const fix_file *f, int i, const chk_opts *o, chk_tally *t,
                     const chk_emitter *e)
{
    static const char *const sfx[2] = {"@W-1", "@W+1"};
    int ix[2];
    char name[FIX_NAME_MAX + 8];
    for (int j = 0; j < 2; j++) {
        snprintf(name, sizeof name, "%s%s", f->names[i], sfx[j]);
        if ((ix[j] = fix_find_case(f, name)) < 0)
            return 0;
    }
    fix_case w, ed[2];
    fc_err err;
    /* every row (the rule compares rows across the three cases), outputs alone: no oracle */
    fix_file g = *f;
    g.budget.rows = 0;
    g.oracle_compute = 0;
    g.oracle_optional = 1;
    if (fix_read_case(&g, i, &w, &err))
        return 0;
    int ok = 0, bad = 0;
    for (; ok < 2 && !fix_read_case(&g, ix[ok], &ed[ok], &err); ok++)
        ;
    for (int j = 0; ok == 2 && j < 2 && !bad; j++) {
        char why[64];
        if (!same_shapes(&w.prob, &ed[j].prob, why, sizeof why)) {
            malformed(f, &w, sfx[j], why, o, t, e);
            bad = 1;
        }
    }
    judge_case jc = fix_judge_case(&w);
    size_t n = judge_rows(&jc);
    for (int k = 0; ok == 2 && !bad && k < w.ntested; k++) {
        const fix_tested *tw = &w.tested[k];
        if (!chk_label_selected(o, tw->label))
            continue;
        rep_row *row = kept_row(t, f->path, &w, tw->label);
        for (int j = 0; j < 2 && row; j++) {
            const fix_tested *te = tested_of(&ed[j], tw->label);
            if (!te)
                continue;
            size_t r = judge_window_edge(&jc, w.prob.mask, ed[j].prob.mask, tw->out, tw->lse,
                                         te->out, te->lse, NULL, NULL);
            if (r == n)
                continue;
            char at[112], text[REP_WHY_LEN];
            attn_row_where(at, sizeof at, &w.prob, r, -1);
            rep_outcome was = row->outcome;
            fc_fmt(text, sizeof text, "row %s: allowed keys differ between W and %s (case "
                   "%s%s), yet the outputs are identical", at, sfx[j] + 1, fc_esc(w.name).s,
                   sfx[j]);
            judge_row_fail_check(row, "window-edge", "row %s: allowed keys differ between W and "
                                 "%s, yet the outputs are identical", at, sfx[j] + 1);
            chk_item it = {.kind = CHK_ITEM_EDGE, .path = f->path, .c = &w, .tt = tw,
                           .text = text};
            chk_emit(e, &it);
            if (was == REP_ROW_PASS || (was == REP_ROW_OUTSIDE && !o->strict))
                recount(t, was, 0);
        }
    }
    for (int j = 0; j < ok; j++)
        fix_case_free(&ed[j]);
    fix_case_free(&w);
    return bad ? 2 : 0;
}
