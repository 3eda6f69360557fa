/*
 * tally.c - check's counters and report rows (check.h): what a file's check adds up to, sent back
 * from the CLI's child process as plain data and summed by the parent.
 */
#include <libgen.h>
#include <stdlib.h>
#include <string.h>

#include "check/check_internal.h"

void chk_tally_keep(chk_tally *t, const rep_row *row)
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

void chk_tally_add(chk_tally *t, const chk_tally *c, const rep_row *rows)
{
#define CHK_ADD(name) t->name += c->name;
    CHK_COUNTERS(CHK_ADD)
#undef CHK_ADD
    t->oom |= c->oom;
    for (size_t i = 0; i < c->nrows; i++)
        chk_tally_keep(t, &rows[i]);
}

void chk_tally_free(chk_tally *t)
{
    free(t->rows);
    t->rows = NULL;
    t->nrows = t->cap = 0;
}

void chk_row_of(rep_row *row, const char *path, const fix_case *c, const char *group)
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

void chk_reject(const char *path, const char *msg, chk_tally *t, chk_emit_fn emit, void *ctx)
{
    t->rejected++;
    rep_row row;
    chk_row_of(&row, path, NULL, "file");
    rep_row_set_error(&row, msg);
    chk_tally_keep(t, &row);
    chk_item it = {.kind = CHK_ITEM_REJECT, .path = path, .text = msg};
    if (emit)
        emit(ctx, &it);
}
