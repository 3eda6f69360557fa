/*
 * cmd_report.c - 'flexcheck report merge DIR... --out DIR': one report set (every format) from
 * the report sets of the shards of a gate run (`gate --shard I/N` on N CI jobs), or of several
 * check runs. Each input's rows.json is read back and held to what a run writes
 * (reports/rep_read.c, rep_report_check), the inputs are checked to belong together and merged
 * (reports/rep_merge.c); anything wrong is one line naming the
 * directories or the file and the field, exit 2, and nothing is written.
 */
#define _XOPEN_SOURCE 700 /* realpath */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "gpu/gpu.h" /* GPU_MAX_KERNEL: the kernel versions a row can name */
#include "reports/rep.h"

static const char *const MERGE = "report merge";

/* 0: dir can be written into (missing, or an empty directory, or force); else the exit status
 * with the line printed. */
static int check_out_dir(const char *dir, int force)
{
    DIR *d = opendir(dir);
    if (!d)
        return errno == ENOENT ? 0
                               : cli_usage_error(MERGE, "--out %s: %s", dir, strerror(errno));
    int empty = 1;
    for (struct dirent *e; empty && (e = readdir(d));)
        empty = !strcmp(e->d_name, ".") || !strcmp(e->d_name, "..");
    closedir(d);
    if (empty || force)
        return 0;
    return cli_usage_error(MERGE, "--out %s: the directory exists and is not empty (--force "
                                  "writes the report into it)", dir);
}

/* 0 unless --out is one of the inputs (the same directory by any name): merging into a shard's
 * own directory would replace the shard, --force or not. */
static int check_out_not_input(const char *out, char **dirs, int n)
{
    char *o = realpath(out, NULL); /* NULL: --out does not exist yet, so it is no input */
    int rc = 0;
    for (int k = 0; o && k < n && !rc; k++) {
        char *d = realpath(dirs[k], NULL);
        if (d && !strcmp(o, d))
            rc = cli_usage_error(MERGE, "--out %s is the input %s: the merge would replace it",
                                 out, dirs[k]);
        free(d);
    }
    free(o);
    return rc;
}

/* Each directory's rows.json, its run.dir set to the directory as given. */
static int read_all(char **dirs, int n, rep_report *in)
{
    for (int k = 0; k < n; k++) {
        if (strlen(dirs[k]) >= REP_DIR_LEN)
            return cli_usage_error(MERGE, "%.60s...: a directory name longer than %d bytes",
                                   dirs[k], REP_DIR_LEN - 1);
        char path[REP_DIR_LEN + sizeof "/" REP_FILE_JSON];
        snprintf(path, sizeof path, "%s/%s", dirs[k], REP_FILE_JSON);
        fc_err err;
        /* Read, then held to what a run writes: no impossible row is copied into the merge. */
        if (rep_read_json(path, &in[k], &err) ||
            rep_report_check(&in[k], path, GPU_MAX_KERNEL, &err))
            return cli_usage_error(MERGE, "%s", err.msg);
        rep_set_str(in[k].run.dir, sizeof in[k].run.dir, dirs[k]);
    }
    return 0;
}

static int merge(char **dirs, int n, const char *out_dir, int force)
{
    int rc = check_out_not_input(out_dir, dirs, n);
    rc = rc ? rc : check_out_dir(out_dir, force);
    rep_report *in = calloc((size_t)n, sizeof *in);
    rep_report merged = {0};
    if (rc || !in) {
        free(in);
        return rc ? rc : cli_usage_error(MERGE, "out of memory");
    }
    rep_run self; /* the merge's own time and command line */
    cli_run_identity(&self, "");
    fc_err err;
    if (!(rc = read_all(dirs, n, in)) && rep_merge(in, (size_t)n, &self, &merged, &err))
        rc = cli_usage_error(MERGE, "%s", err.msg);
    if (!rc) {
        rep_set set = {.rows = merged.rows, .n = merged.n, .checks = merged.checks,
                       .nchecks = merged.nchecks, .run = &merged.run};
        size_t failed = 0, skipped = 0, outside = 0; /* as the runs counted: --strict kept */
        for (size_t i = 0; i < merged.n; i++) {
            const rep_row *row = &merged.rows[i];
            failed += rep_row_fails(row, merged.run.strict);
            skipped += row->outcome == REP_ROW_SKIP;
            outside += row->outcome == REP_ROW_OUTSIDE && !merged.run.strict;
        }
        char also[64] = "";
        if (outside)
            fc_fmt(also, sizeof also, ", %zu outside the contract", outside);
        if (rep_write_all(out_dir, &set, &err))
            rc = cli_usage_error(MERGE, "%s", err.msg);
        else
            printf("report merge: %d reports, %zu rows: %zu passed, %zu failed, %zu skipped%s; "
                   "report in %s/\n", n, merged.n, merged.n - failed - skipped - outside, failed,
                   skipped, also, fc_esc(out_dir).s);
        rc = rc ? rc : failed ? CLI_FAIL : CLI_PASS;
    }
    for (int k = 0; k < n; k++)
        rep_report_free(&in[k]);
    free(in);
    rep_report_free(&merged);
    return rc;
}

static int cmd_report_merge(int argc, char **argv)
{
    const char *out = NULL;
    int force = 0;
    const cli_opt table[] = {
        CLI_STR("out", "DIR", "where the merged report set goes (required)", &out),
        CLI_FLAG("force", "write into --out even when it is a directory that is not empty",
                 &force, 1),
    };
    const cli_spec spec = {
        .cmd = MERGE,
        .usage = "usage: flexcheck report merge DIR... --out DIR [--force]\n",
        .intro = "Reads the rows.json of each report directory (written by `gate --report-dir`\n"
                 "or `check --report`) and writes one report set of every format into --out:\n"
                 "the shards 1..N of one gate run (same matrix, seed, filter, flexcheck commit\n"
                 "and N; each shard once; rows back in the unsharded run's order), or several\n"
                 "check runs (none twice). Totals are the sums; the merged report's run\n"
                 "identity names the runs merged. Options may follow the directories.\n",
        .opts = table,
        .nopts = sizeof table / sizeof table[0],
        .max_operands = CLI_ANY,
        .unknown = "unknown option '%s' (--help)",
        .exit_status = "exit status: 0 merged and every row passed, 1 merged with failing rows,\n"
                       "2 bad input (the reports do not belong together, a rows.json is bad).",
    };
    int ndirs, rc = cli_parse(&spec, argc, argv, &ndirs);
    if (rc != CLI_GO)
        return rc;
    if (!out)
        return cli_usage_error(MERGE, "--out DIR is required (--help)");
    if (ndirs == 0)
        return cli_usage_error(MERGE, "no report directories given (--help)");
    return merge(argv + 1, ndirs, out, force); /* cli_parse moved them to argv[1..ndirs] */
}

typedef struct report_sub {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} report_sub;

static const report_sub subs[] = {
    {"merge", cmd_report_merge, "one report set from the shards of a gate run, or check runs"},
};
#define NSUBS (sizeof subs / sizeof subs[0])

static void print_subs(FILE *f)
{
    fprintf(f, "subcommands:\n");
    for (size_t i = 0; i < NSUBS; i++)
        fprintf(f, "  %-10s %s\n", subs[i].name, subs[i].summary);
    fprintf(f, "\n'flexcheck report SUBCOMMAND --help' lists each one's options.\n");
}

int cmd_report(int argc, char **argv)
{
    for (size_t i = 0; argc >= 2 && i < NSUBS; i++)
        if (!strcmp(argv[1], subs[i].name))
            return subs[i].run(argc - 1, argv + 1);
    /* Not a subcommand: --help, or a mistake (report has no options of its own). */
    const cli_spec spec = {
        .cmd = "report",
        .usage = "usage: flexcheck report SUBCOMMAND [options]\n",
        .more = print_subs,
        .unknown = "unknown subcommand '%s'",
        .exit_status = "exit status: that of the subcommand; 2 bad input.",
    };
    int nops, rc = cli_parse(&spec, argc, argv, &nops);
    if (rc != CLI_GO)
        return rc;
    if (argc < 2)
        return cli_usage_error("report", "a subcommand is needed (--help lists them)");
    return cli_usage_error("report", "unknown subcommand '%s'", argv[1]);
}
