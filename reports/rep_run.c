/*
 * rep_run.c - a report's run identity (rep.h, rep_run): the table of its fields, which the JSON
 * writer and reader and the JUnit properties share, and its wording in the human formats.
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "reports/rep_internal.h"

#define RUN_COL(name, kind) {#name, kind, offsetof(rep_run, name), sizeof(((rep_run *)0)->name)}

const rep_col rep_run_cols[] = {
    RUN_COL(time, REP_COL_STR),     RUN_COL(id, REP_COL_STR),
    RUN_COL(version, REP_COL_STR),  RUN_COL(commit, REP_COL_STR),
    RUN_COL(command, REP_COL_STR),
    RUN_COL(matrix, REP_COL_STR),   RUN_COL(seed, REP_COL_SEED),
    RUN_COL(shard_i, REP_COL_I32),  RUN_COL(shard_n, REP_COL_I32),
    RUN_COL(filter, REP_COL_STR),   RUN_COL(dir, REP_COL_STR),
    RUN_COL(backends, REP_COL_STR), RUN_COL(kernel, REP_COL_I32),
    RUN_COL(strict, REP_COL_I32),
};
const size_t rep_run_ncols = sizeof rep_run_cols / sizeof rep_run_cols[0];

void rep_run_scope(char *buf, size_t cap, const rep_run *run)
{
    char seed[32] = "", shard[48] = "", merged[64] = "";
    snprintf(merged, sizeof merged, "%s%s", run->strict ? ", strict" : "",
             run->nparts ? ", merged from " : "");
    if (run->nparts)
        snprintf(merged + strlen(merged), sizeof merged - strlen(merged), "%zu runs",
                 run->nparts);
    if (!strcmp(run->matrix, "check")) {
        fc_fmt(buf, cap, "check run%s", merged);
        return;
    }
    if (run->seed >= 0)
        snprintf(seed, sizeof seed, ", seed %lld", (long long)run->seed);
    if (run->shard_n > 1) /* 1/1 is the whole (filtered) matrix: nothing to say */
        snprintf(shard, sizeof shard, ", shard %d/%d", (int)run->shard_i, (int)run->shard_n);
    fc_fmt(buf, cap, "%s matrix%s%s%s%s%s%s", run->matrix, seed, shard,
           run->filter[0] ? ", filter '" : "", run->filter, run->filter[0] ? "'" : "", merged);
}

void rep_run_part_line(char *buf, size_t cap, const rep_run *part)
{
    char scope[2 * REP_TEXT_LEN];
    rep_run_scope(scope, sizeof scope, part);
    fc_fmt(buf, cap, "%s: %s, %s, %s", part->dir, scope, part->time, part->command);
}

void rep_run_each(const rep_run *run, void (*put)(void *ctx, const char *key, const char *value),
                  void *ctx)
{
    if (!run)
        return;
    char item[REP_RUN_PART_LEN];
    rep_run_scope(item, sizeof item, run);
    put(ctx, "run", item);
    fc_fmt(item, sizeof item, "%s, commit %s", run->version, run->commit);
    put(ctx, "flexcheck", item);
    put(ctx, "time", run->time);
    put(ctx, "command", run->command);
    for (size_t i = 0; i < run->nparts; i++) {
        rep_run_part_line(item, sizeof item, &run->parts[i]);
        put(ctx, "merged", item);
    }
}
