/*
 * cmd_fill.c - 'flexcheck fill IN (--out OUT | --in-place)': the expected outputs of a file that
 * holds inputs only (an engine's dump, a file written by the Python package), computed by our
 * float64 oracle. Everything else in the file is kept byte for byte (fix_fill).
 */
#include <stdio.h>

#include "cli/cli.h"
#include "fixtures/fix.h"

static const char *const CMD = "fill";

int cmd_fill(int argc, char **argv)
{
    const char *out = NULL;
    int in_place = 0, force = 0;
    const cli_opt table[] = {
        CLI_STR("out", "OUT", "write the filled file to OUT (refused if it exists)", &out),
        CLI_FLAG("in-place", "replace IN itself, atomically", &in_place, 1),
        CLI_FLAG("force", "with --out: replace an existing OUT", &force, 1),
    };
    const cli_spec spec = {
        .cmd = CMD,
        .usage = "usage: flexcheck fill IN (--out OUT | --in-place) [--force]\n",
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
    const char *in = argv[1];
    fix_fill_result r;
    fc_err err;
    if (fix_fill(in, out, force, &r, &err))
        return cli_usage_error(CMD, "%s", err.msg);
    if (in_place && r.filled == 0)
        printf("fill: %s: %d cases, every one already has out/lse: nothing written\n", in,
               r.cases);
    else
        printf("fill: %s: %d cases, %d filled, %d already had out/lse -> %s\n", in, r.cases,
               r.filled, r.had_oracle, out ? out : in);
    return CLI_PASS;
}
