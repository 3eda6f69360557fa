/*
 * cli.h - the flexcheck command: one entry point per subcommand (cli/cmd_<name>.c); their
 * argument parser and help printer are in cli/opts.h. Exit codes: 0 pass, 1 a check or gate
 * failed, 2 bad input (one line on stderr naming what and where).
 */
#ifndef FLEXCHECK_CLI_H
#define FLEXCHECK_CLI_H

#include <stdint.h>
#include <stdio.h>

#include "base/fc.h"
#include "cli/opts.h"

#define CLI_PASS 0
#define CLI_FAIL 1
#define CLI_BADINPUT 2

int cmd_gate(int argc, char **argv);
int cmd_check(int argc, char **argv);
int cmd_repro(int argc, char **argv);
int cmd_fill(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_gen(int argc, char **argv);
int cmd_blockmask(int argc, char **argv);
int cmd_layout(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_report(int argc, char **argv);

/* The run identity of a report (cli/run_id.c). main() keeps the command line as given, before
 * any command's parser moves its arguments; cli_run_identity fills run with the time now
 * (UTC), this binary's version and commit, that command line and `matrix` ("quick", ...,
 * "check"), no seed, shard 1/1 and no filter (a command with those sets them after). */
struct rep_run;
void cli_keep_command_line(int argc, char **argv);
void cli_run_identity(struct rep_run *run, const char *matrix);

/* The cases --filter and --shard select from all[0..nall) of the `matrix` size ("quick", ...),
 * kept in place (gate_select); gate and export. When none is selected and say_why is set, one
 * line says why: no case matches the filter, or the shard is past the cases that match. */
struct gate_case;
int cli_select_cases(const char *cmd, struct gate_case *all, int nall, const char *matrix,
                     const char *filter, const int32_t shard[2], int say_why);

/* 'flexcheck bench <what>' parts, one file each (cli/bench_<what>.c). */
int bench_blockmask(int argc, char **argv);
int bench_ref(int argc, char **argv);
int bench_kernel(int argc, char **argv);
int bench_judge(int argc, char **argv);
int bench_long(int argc, char **argv);

#endif
