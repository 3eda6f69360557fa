/*
 * file.c - a fixture file checked (check.h): validated whole first (a rejected file is one item
 * naming file, case and field, and none of its cases is reported), then every case: the
 * reference recomputed against the stored oracle, any stored block mask for soundness (and with
 * exact_blocks against the slow builder), our kernel with opts.kernel_backend, every output
 * under test, window-edge triples, and a layout file's layers through one shared metadata
 * object.
 */
#include <stdio.h>
#include <string.h>

#include "check/check_internal.h"

/* Checks every case of an already validated file. Returns 0, or 2 if a read failed anyway or a
 * window-edge triple is malformed (the file is then counted as rejected). */
static int check_cases(const fix_file *f, const chk_opts *o, chk_tally *t, const chk_emitter *e)
{
    chk_layer_meta meta; /* a layout file's shared metadata, across its layers in order */
    memset(&meta, 0, sizeof meta);
    int bad = 0; /* a malformed window-edge triple: the file is rejected after all its cases */
    for (int i = 0; i < f->ncases; i++) {
        if (o->only_case && strcmp(f->names[i], o->only_case) != 0)
            continue;
        mask_params prev; /* the previous layer's mask, in a layout file */
        fc_err pe;
        int has_prev = f->has_layout && i > 0 && !fix_read_mask(f, i - 1, &prev, &pe);
        fix_case c;
        fix_check_result r;
        fc_err err;
        if (fix_read_case(f, i, &c, &err)) {
            chk_item it = {.kind = CHK_ITEM_REJECT, .path = f->path, .text = err.msg};
            chk_emit(e, &it);
            chk_meta_free(&meta);
            return 2;
        }
        fc_status st = fix_check_case(&c, FIX_BACKEND_REF, o->exact_blocks, &r, &err);
        if (st) {
            r.passed = 0;
            snprintf(r.detail, sizeof r.detail, "could not run: %.480s", err.msg);
        }
        int skipped = 0;
        if (o->kernel_backend && r.passed)
            chk_case_kernel(f->path, &c, o, f->has_layout ? &meta : NULL, &r, &skipped, t);
        chk_item it = {.kind = CHK_ITEM_CASE, .path = f->path, .c = &c, .check = &r,
                       .skipped = skipped};
        chk_emit(e, &it);
        if (!r.passed && c.ntested == 0 && !o->kernel_backend) {
            rep_row row; /* the case's own failure must show in the report too */
            chk_row_of(&row, f->path, &c, "check");
            rep_set_str(row.backend, sizeof row.backend, "ref");
            rep_row_set_error(&row, r.detail);
            chk_tally_keep(t, &row);
        }
        chk_case_outputs(f->path, f, i, &c, has_prev ? &prev : NULL, !st && r.oracle_ok, o, t, e);
        t->cases++;
        t->computed += c.oracle_computed;
        t->sampled += c.sample.tq != NULL;
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
        if (edge && chk_window_edges(f, i, o, t, e))
            bad = 2;
    }
    if (meta.rebuilds) {
        chk_item it = {.kind = CHK_ITEM_LAYOUT, .path = f->path, .text = f->layout,
                       .builds = meta.rebuilds};
        chk_emit(e, &it);
    }
    chk_meta_free(&meta);
    return bad;
}

void chk_file(const char *path, const chk_opts *o, chk_tally *t, chk_emit_fn emit, void *ctx)
{
    chk_emitter e = {emit, ctx};
    fix_file f;
    fc_err err;
    t->files++;
    fc_status st = fix_open(path, &f, &err);
    if (!st) {
        f.budget = o->budget;
        f.oracle_compute = 1; /* a dump without out/lse is judged against the oracle computed */
        st = fix_validate(&f, &err);
    }
    if (st) {
        if (f.h5 >= 0)
            fix_close(&f);
        char buf[sizeof err.msg + 96];
        chk_reject(path, o->errmsg ? o->errmsg(st, err.msg, buf, sizeof buf) : err.msg, t, emit,
                   ctx);
        return;
    }
    if (o->on_read)
        o->on_read(); /* read whole: a crash now is not the file's */
    if (o->only_case && fix_find_case(&f, o->only_case) < 0) {
        fc_fmt(err.msg, sizeof err.msg, "%s: no case named '%s'", fc_esc(path).s,
               fc_esc(o->only_case).s);
        chk_reject(path, err.msg, t, emit, ctx);
    } else if (check_cases(&f, o, t, &e)) {
        t->rejected++;
    }
    fix_close(&f);
}
