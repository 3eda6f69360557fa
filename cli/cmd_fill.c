/*
 * cmd_fill.c - 'flexcheck fill IN (--out OUT | --in-place)': the expected outputs of a file that
 * holds inputs only (an engine's dump, a file written by the Python package), computed by our
 * float64 oracle. Everything else in the file is kept byte for byte (fix_fill).
 */
#include <stdio.h>

#include "cli/cli.h"
#include "cli/isolate.h"
#include "fixtures/fix.h"

static const char *const CMD = "fill";

typedef struct fill_job {
    const char *in, *out;
    int force, in_place;
    fix_budget budget;
} fill_job;

/* The file read, filled and written, in a child (cli/isolate.h): the exit status. */
static int fill_file(void *arg, cli_iso_chan *ch)
{
    (void)ch;
    const fill_job *j = arg;
    fix_fill_result r;
    fc_err err;
    fc_status st = fix_fill(j->in, j->out, j->force, &j->budget, &r, &err);
    if (st) {
        char msg[sizeof err.msg + 96];
        return cli_usage_error(CMD, "%s", cli_iso_errmsg(st, err.msg, msg, sizeof msg));
    }
    if (j->in_place && r.filled == 0)
        printf("fill: %s: %d cases, every one already has out/lse: nothing written\n",
               fc_esc(j->in).s, r.cases);
    else
        printf("fill: %s: %d cases, %d filled, %d already had out/lse -> %s\n", fc_esc(j->in).s,
               r.cases, r.filled, r.had_oracle, fc_esc(j->out ? j->out : j->in).s);
    return CLI_PASS;
}

int cmd_fill(int argc, char **argv)
{
    const char *out = NULL;
    int in_place = 0, force = 0;
    cli_iso iso = {CLI_ISO_DEFAULT_MAX_MEMORY, 0, 0};
    const cli_opt table[] = {
        CLI_STR("out", "OUT", "write the filled file to OUT (refused if it exists)", &out),
        CLI_FLAG("in-place", "replace IN itself, atomically", &in_place, 1),
        CLI_FLAG("force", "with --out: replace an existing OUT", &force, 1),
        CLI_FN("max-memory", "BYTES", "IN is read and filled in a child process limited to\n"
               "this much address space, and a case whose estimate exceeds it is refused (K,\n"
               "M, G, T suffixes)", cli_parse_bytes, &iso.max_memory),
        CLI_FN("max-work", "N", "refuse a case needing more than N multiply-adds (K, M, G, T\n"
               "suffixes, powers of 1024; default 1T = 2^40)", cli_parse_count, &iso.max_work),
    };
    const cli_spec spec = {
        .cmd = CMD,
        .usage = "usage: flexcheck fill IN (--out OUT | --in-place) [--force] "
                 "[--max-memory BYTES] [--max-work N]\n",
        .intro = "Computes out and lse in float64 with flexcheck's oracle for every case of IN that\n"
                 "lacks them, and writes IN with them added (nothing else changes). IN is\n"
                 "validated whole first; on any failure nothing is written.\n",
        .opts = table,
        .nopts = sizeof table / sizeof table[0],
        .max_operands = 1,
        .unknown = "unexpected argument '%s' (--help)",
        .exit_status = "exit status: 0 written (or nothing to fill in place), 2 bad input or a "
                       "failed write.",
    };
    int nops, rc = cli_parse(&spec, argc, argv, &nops);
    if (rc != CLI_GO)
        return rc;
    if (nops != 1)
        return cli_usage_error(CMD, "need one input file (--help)");
    if (!out == !in_place)
        return cli_usage_error(CMD, "give exactly one of --out OUT and --in-place (--help)");
    if (force && in_place)
        return cli_usage_error(CMD, "--force goes with --out");
    fill_job job = {argv[1], out, force, in_place, cli_iso_budget(&iso)};
    cli_iso_result res;
    fc_err err;
    if (cli_isolated(&iso, fill_file, &job, &res, &err))
        return cli_usage_error(CMD, "%s: %s", job.in, err.msg);
    rc = res.status;
    if (!res.finished || res.exit_status > 0) { /* its temporary file, if any, is gone */
        char msg[512];
        cli_iso_describe(&iso, job.in, &res, msg, sizeof msg);
        rc = cli_usage_error(CMD, "%s", msg);
    }
    cli_iso_result_free(&res);
    return rc;
}
