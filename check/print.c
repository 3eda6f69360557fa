/*
 * print.c - the lines `check` prints (check.h: chk_print_item), made here so that the CLI, the
 * shared library and Python say the same words. Names from files and paths are escaped
 * (fc_esc_line); a message line's raw control characters too (fc_esc_ctrl).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check/check_internal.h"

static void print_case(FILE *f, const chk_item *it, const chk_opts *o)
{
    const fix_case *c = it->c;
    const fix_check_result *r = it->check;
    if (r->passed && o->quiet) /* --quiet: failures only; skips are counted in the summary */
        return;
    char mask[128], terms[128];
    mask_params_text(mask, sizeof mask, &c->prob.mask, MASK_TEXT_LABEL_EQ);
    terms_text(terms, sizeof terms, &c->prob.terms, c->prob.hq, MASK_TEXT_LABEL_EQ);
    /* The stored scale too: 1/sqrt(D) or not, it is the case's (and a common bug's) */
    fprintf(f, "%s %s %s %s %s scale=%.6g%s",
            !r->passed ? "FAIL" : it->skipped == 2 ? "OUTSIDE" : it->skipped ? "SKIP" : "PASS",
            fc_esc(it->path).s, fc_esc(c->name).s, fc_dtype_name(c->dtype), mask, c->prob.scale,
            terms);
    char sample[REP_WHY_LEN];
    fix_sample_text(sample, sizeof sample, c);
    if (!r->passed || it->skipped) {
        fprintf(f, ": %s%s%s\n", r->detail, sample[0] ? "; " : "", sample); /* its sources
                                                            * escape what came from the file */
        return;
    }
    if (r->oracle_computed)
        fprintf(f, ": oracle computed (none stored)");
    else
        fprintf(f, ": out %.1e lse %.1e", r->out_err, r->lse_err);
    if (r->bmask_checked)
        fprintf(f, ", block mask sound%s (%lld partial, %lld full)",
                r->bmask_exact ? ", exact" : "", (long long)r->n_partial, (long long)r->n_full);
    if (o->kernel_backend)
        fprintf(f, ", kernel %d on %s passes the gates", (int)o->kernel,
                gpu_backend_name(o->be));
    fprintf(f, "%s%s\n", sample[0] ? "; " : "", sample);
}

/* One message line on err, its raw control characters escaped. */
static void print_reject(FILE *err, const char *msg)
{
    size_t cap = 4 * strlen(msg) + 1;
    char *e = malloc(cap);
    if (!e) {
        fprintf(err, "flexcheck check: out of memory while reporting an error\n");
        return;
    }
    fc_esc_ctrl(e, cap, msg);
    fprintf(err, "flexcheck check: %s\n", e);
    free(e);
}

void chk_print_item(FILE *out, FILE *err, const chk_item *it, const chk_opts *o)
{
    switch (it->kind) {
    case CHK_ITEM_CASE:
        print_case(out, it, o);
        break;
    case CHK_ITEM_OUTPUT:
        if (it->res->outcome == CHK_PASSED && o->quiet)
            break;
        chk_result_print(out, it->res,
                         &(chk_who){it->path, it->c->name, it->tt->label, it->tt->producer,
                                    it->tt->encoding},
                         it->jc);
        break;
    case CHK_ITEM_EDGE: /* text: escaped where it names the file's case */
        fprintf(out, "FAIL %s %s tested/%s: window-edge: %s\n", fc_esc(it->path).s,
                fc_esc(it->c->name).s, fc_esc(it->tt->label).s, it->text);
        break;
    case CHK_ITEM_LAYOUT:
        fprintf(out, "layout %s: %s's layers ran through one shared metadata object: %d "
                "block-mask build%s\n", fc_esc(it->text).s, fc_esc(it->path).s, it->builds,
                it->builds == 1 ? "" : "s");
        break;
    case CHK_ITEM_REJECT:
        print_reject(err, it->text);
        break;
    }
}
