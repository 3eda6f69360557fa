/*
 * main.c - flexcheck's front door: dispatch to the subcommands of DESIGN.md.
 *   flexcheck <command> [options]     (flexcheck <command> --help for each)
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/version.h"
#include "base/progress.h"
#include "cli/cli.h"
#include "cli/isolate.h"

typedef struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} command;

static const command commands[] = {
    {"gate", cmd_gate, "run the test matrix on every backend, write the report and JUnit XML"},
    {"check", cmd_check, "verify fixture files: validation, reference vs oracle, block masks"},
    {"repro", cmd_repro, "one case told in full: worst elements, allowed range, block lists"},
    {"export", cmd_export, "write the gate's matrix as fixture files, for an outside kernel"},
    {"fill", cmd_fill, "compute the expected out/lse (float64) of a file that has inputs only"},
    {"gen", cmd_gen, "write fixtures for a matrix group or a single described case"},
    {"blockmask", cmd_blockmask, "print a block mask as a grid or JSON; diff two builders"},
    {"layout", cmd_layout, "the layer plan (causal / window / chunk) of a model layout"},
    {"bench", cmd_bench, "benchmarks: builders, reference, kernels, side by side as ratios"},
    {"report", cmd_report, "report sets: merge the shards of a gate run, or check runs"},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: flexcheck <command> [options]\n\n"
               "flexcheck is a correctness gate for flex-attention kernels.\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\n'flexcheck <command> --help' describes each command; 'flexcheck --version'\n"
               "prints the version and the commit built from.\n"
               "exit status: 0 pass, 1 a check or gate failed, 2 bad input.\n");
}

/* Progress of a long single step (the oracle on a big case, the slow builder), on stderr: a
 * line rewritten in place on a terminal every 2 s, a plain line every 10 s in a log. */
static void show_progress(void *ctx, const char *what, double fraction, double seconds)
{
    int tty = *(const int *)ctx;
    fprintf(stderr, "%sflexcheck: %s %.0f%% done after %.0f s%s", tty ? "\r" : "", what,
            100 * fraction, seconds, tty ? "  " : "\n");
    if (tty && fraction >= 1)
        fputc('\n', stderr);
}

int main(int argc, char **argv)
{
    cli_keep_command_line(argc, argv); /* for reports, before a parser reorders argv */
    static int tty;
    tty = isatty(STDERR_FILENO);
    fc_progress_set(show_progress, &tty, tty ? 2.0 : 10.0);
    if (argc < 2) {
        usage(stderr);
        return CLI_BADINPUT;
    }
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return CLI_PASS;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("flexcheck %s (commit %s)\n", fc_version(), fc_commit());
        return CLI_PASS;
    }
    fc_err err;
    if (cli_iso_watch_env(&err)) { /* the environment, before any command reads a file */
        fprintf(stderr, "flexcheck: %s\n", err.msg);
        return CLI_BADINPUT;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name))
            return commands[i].run(argc - 1, argv + 1);
    return cli_usage_error(NULL, "unknown command '%s' (flexcheck --help lists them)", argv[1]);
}
