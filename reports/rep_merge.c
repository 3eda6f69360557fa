/*
 * rep_merge.c - report sets read back from their rows.json merged into one (rep.h, rep_merge):
 * the shards of one gate run, or several check runs.
 *
 * Shards belong together when their identities agree on everything that decides which cases
 * exist and how they are judged (matrix, version, commit, seed, filter, shard count, backends,
 * kernel, strictness) and their shard indices are 1..N, each once. The gate deals the filtered
 * cases to shards round-robin (ci/matrix.c, gate_select), so the merged rows are put back in
 * the unsharded run's order: one case from each shard in turn. Check runs are not shards (each
 * is 1/1 of "check"): they must share the same fields, not repeat a run, and their rows follow
 * one another in the order given.
 */
#include <stdlib.h>
#include <string.h>

#include "reports/rep_internal.h"

/* The identity fields every part must share, as rep_run.c's table names them. */
static const char *const shared_fields[] = {"matrix", "version", "commit", "seed", "filter",
                                            "shard_n", "backends", "kernel", "strict"};

static const rep_col *run_col(const char *name)
{
    for (size_t c = 0; c < rep_run_ncols; c++)
        if (!strcmp(rep_run_cols[c].name, name))
            return &rep_run_cols[c];
    return NULL;
}

/* A field's value as a message shows it: text quoted, a missing value "none". */
static void field_text(const rep_col *c, const rep_run *run, char *buf, size_t cap)
{
    char v[REP_TEXT_LEN + 32];
    rep_val kind = rep_col_value(c, run, v, sizeof v);
    if (kind == REP_VAL_NONE)
        fc_fmt(buf, cap, "none");
    else if (kind == REP_VAL_TEXT)
        fc_fmt(buf, cap, "'%s'", v);
    else
        fc_fmt(buf, cap, "%s", v);
}

static fc_status check_shared(const rep_report *in, size_t n, fc_err *err)
{
    for (size_t f = 0; f < sizeof shared_fields / sizeof shared_fields[0]; f++) {
        const rep_col *c = run_col(shared_fields[f]);
        if (!c)
            return fc_errf(err, FC_EINVAL, "merge: no run field '%s'", shared_fields[f]);
        char a[REP_TEXT_LEN + 40], b[REP_TEXT_LEN + 40];
        field_text(c, &in[0].run, a, sizeof a);
        for (size_t k = 1; k < n; k++) {
            field_text(c, &in[k].run, b, sizeof b);
            if (strcmp(a, b))
                return fc_errf(err, FC_EINVAL, "%s and %s differ in %s: %s and %s",
                               in[0].run.dir, in[k].run.dir, c->name, a, b);
        }
    }
    return FC_OK;
}

/* A shard's index and where it is in in[], sorted by index, ties in the order given. */
typedef struct shard_at {
    int32_t shard;
    size_t k;
} shard_at;

static int by_shard(const void *a, const void *b)
{
    const shard_at *x = a, *y = b;
    if (x->shard != y->shard)
        return (x->shard > y->shard) - (x->shard < y->shard);
    return (x->k > y->k) - (x->k < y->k);
}

/* Up to 8 of the shard indices in 1..N missing from the sorted s[0..n), as "3, 4, ...". */
static void list_missing(const shard_at *s, size_t n, int32_t shards, char *buf, size_t cap)
{
    size_t len = 0, named = 0;
    int64_t expect = 1;
    buf[0] = 0;
    for (size_t k = 0; k <= n; k++) {
        int64_t have = k < n ? s[k].shard : (int64_t)shards + 1;
        for (; expect < have; expect++) {
            if (named++ == 8) {
                snprintf(buf + len, cap - len, ", ...");
                return;
            }
            len += (size_t)snprintf(buf + len, cap - len, "%s%lld", len ? ", " : "",
                                    (long long)expect);
            if (len >= cap)
                return;
        }
        expect = have + 1;
    }
}

/* Shards 1..N each exactly once; order[] gets the indices of in[] by shard. */
static fc_status check_shards(const rep_report *in, size_t n, size_t *order, fc_err *err)
{
    shard_at *s = malloc(n * sizeof *s);
    if (!s)
        return fc_errf(err, FC_ENOMEM, "merge: out of memory");
    for (size_t k = 0; k < n; k++)
        s[k] = (shard_at){in[k].run.shard_i, k};
    qsort(s, n, sizeof *s, by_shard);
    int32_t shards = in[0].run.shard_n;
    fc_status st = FC_OK;
    for (size_t k = 1; k < n && !st; k++)
        if (s[k - 1].shard == s[k].shard)
            st = fc_errf(err, FC_EINVAL, "%s and %s are both shard %d/%d",
                         in[s[k - 1].k].run.dir, in[s[k].k].run.dir, (int)s[k].shard,
                         (int)shards);
    if (!st && (int64_t)n != shards) { /* no duplicates, so fewer than N */
        char missing[128], given[256];
        size_t len = 0;
        list_missing(s, n, shards, missing, sizeof missing);
        given[0] = 0;
        for (size_t k = 0; k < n && len < sizeof given; k++)
            len += (size_t)snprintf(given + len, sizeof given - len, "%s%s (%d/%d)",
                                    k ? ", " : "", in[s[k].k].run.dir, (int)s[k].shard,
                                    (int)shards);
        st = fc_errf(err, FC_EINVAL, "missing shard%s %s of %d; given: %s",
                     shards - (int64_t)n > 1 ? "s" : "", missing, (int)shards, given);
    }
    for (size_t k = 0; k < n; k++)
        order[k] = s[k].k;
    free(s);
    return st;
}

/* The runs merged, in[order[..]] in turn: each input itself, or a merged input's parts. */
static fc_status flatten_parts(const rep_report *in, size_t n, const size_t *order,
                               rep_report *out, fc_err *err)
{
    size_t np = 0;
    for (size_t k = 0; k < n; k++)
        np += in[k].run.nparts ? in[k].run.nparts : 1;
    if (!(out->parts = calloc(np, sizeof *out->parts)))
        return fc_errf(err, FC_ENOMEM, "merge: out of memory");
    size_t p = 0;
    for (size_t k = 0; k < n; k++) {
        const rep_run *run = &in[order[k]].run;
        if (!run->nparts) {
            out->parts[p] = *run;
            out->parts[p++].parts = NULL;
        }
        for (size_t j = 0; j < run->nparts; j++)
            out->parts[p++] = run->parts[j];
    }
    out->run.parts = out->parts;
    out->run.nparts = np;
    return FC_OK;
}

/* Check runs: the same run (its id) must not come twice. */
static fc_status check_distinct_runs(const rep_run *parts, size_t np, fc_err *err)
{
    for (size_t i = 0; i < np; i++)
        for (size_t j = i + 1; j < np; j++)
            if (!strcmp(parts[i].id, parts[j].id))
                return fc_errf(err, FC_EINVAL, "%s and %s hold the same run (id %s, %s, "
                               "command %s)", parts[i].dir, parts[j].dir, parts[i].id,
                               parts[i].time, parts[i].command);
    return FC_OK;
}

/* The checks of every input, each name once, in the order first listed. */
static fc_status union_checks(const rep_report *in, size_t n, rep_report *out, fc_err *err)
{
    size_t cap = 1;
    for (size_t k = 0; k < n; k++)
        cap += in[k].nchecks;
    out->checks = calloc(cap, sizeof *out->checks);
    out->check_text = calloc(cap, sizeof *out->check_text);
    if (!out->checks || !out->check_text)
        return fc_errf(err, FC_ENOMEM, "merge: out of memory");
    for (size_t k = 0; k < n; k++)
        for (size_t i = 0; i < in[k].nchecks; i++) {
            size_t j = 0;
            while (j < out->nchecks && strcmp(out->check_text[j].name, in[k].checks[i].name))
                j++;
            if (j < out->nchecks)
                continue;
            rep_check_text *t = &out->check_text[out->nchecks];
            rep_set_str(t->name, sizeof t->name, in[k].checks[i].name);
            rep_set_str(t->title, sizeof t->title, in[k].checks[i].title);
            out->checks[out->nchecks++] = (rep_check){t->name, t->title};
        }
    return FC_OK;
}

/* End of the rows of the case that starts at row i (a case's rows are consecutive). */
static size_t case_end(const rep_report *r, size_t i)
{
    size_t j = i + 1;
    while (j < r->n && !strcmp(r->rows[j].case_id, r->rows[i].case_id))
        j++;
    return j;
}

/* The rows of in[order[0..n)]: shards one case from each in turn, check runs one whole
 * report after the other. */
static fc_status merge_rows(const rep_report *in, size_t n, const size_t *order, int shards,
                            rep_report *out, fc_err *err)
{
    size_t total = 0;
    for (size_t k = 0; k < n; k++)
        total += in[k].n;
    size_t *at = calloc(n, sizeof *at);
    out->rows = malloc((total ? total : 1) * sizeof *out->rows);
    if (!at || !out->rows) {
        free(at);
        return fc_errf(err, FC_ENOMEM, "merge: out of memory for %zu rows", total);
    }
    for (int more = 1; more;) {
        more = 0;
        for (size_t k = 0; k < n; k++) {
            const rep_report *r = &in[order[k]];
            if (at[k] >= r->n)
                continue;
            size_t end = shards ? case_end(r, at[k]) : r->n;
            memcpy(out->rows + out->n, r->rows + at[k], (end - at[k]) * sizeof *out->rows);
            out->n += end - at[k];
            at[k] = end;
            more = 1;
        }
    }
    free(at);
    return FC_OK;
}

fc_status rep_merge(const rep_report *in, size_t n, const rep_run *self, rep_report *out,
                    fc_err *err)
{
    memset(out, 0, sizeof *out);
    if (n == 0)
        return fc_errf(err, FC_EINVAL, "merge: no reports given");
    size_t *order = calloc(n, sizeof *order);
    if (!order)
        return fc_errf(err, FC_ENOMEM, "merge: out of memory");
    int shards = strcmp(in[0].run.matrix, "check") != 0;
    fc_status st = check_shared(in, n, err);
    if (!st && shards)
        st = check_shards(in, n, order, err);
    for (size_t k = 0; !shards && k < n; k++)
        order[k] = k;
    if (!st) { /* what the parts share, then the merge's own time, id and command line */
        out->run = in[0].run;
        rep_set_str(out->run.time, sizeof out->run.time, self->time);
        rep_set_str(out->run.id, sizeof out->run.id, self->id);
        rep_set_str(out->run.command, sizeof out->run.command, self->command);
        out->run.shard_i = out->run.shard_n = 1;
        out->run.dir[0] = 0;
        st = flatten_parts(in, n, order, out, err);
    }
    if (!st && !shards)
        st = check_distinct_runs(out->parts, out->run.nparts, err);
    if (!st)
        st = union_checks(in, n, out, err);
    if (!st)
        st = merge_rows(in, n, order, shards, out, err);
    free(order);
    return st;
}
