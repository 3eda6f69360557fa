/*
 * cli.h - the flexcheck command: one entry point per subcommand (cli/cmd_<name>.c) and the
 * small argument helpers they share. Exit codes: 0 pass, 1 a check or gate failed,
 * 2 bad input (one line on stderr naming what and where).
 */
#ifndef FLEXCHECK_CLI_H
#define FLEXCHECK_CLI_H

#include <stdint.h>
#include <stdio.h>

#define CLI_PASS 0
#define CLI_FAIL 1
#define CLI_BADINPUT 2

int cmd_gate(int argc, char **argv);
int cmd_check(int argc, char **argv);
int cmd_repro(int argc, char **argv);
int cmd_gen(int argc, char **argv);
int cmd_blockmask(int argc, char **argv);
int cmd_layout(int argc, char **argv);
int cmd_bench(int argc, char **argv);

/* 'flexcheck bench <what>' parts, one file each (cli/bench_<what>.c). */
int bench_blockmask(int argc, char **argv);
int bench_ref(int argc, char **argv);
int bench_kernel(int argc, char **argv);

/* Prints "flexcheck <cmd>: <message>" to stderr and returns CLI_BADINPUT. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Parses a decimal int32 in [lo, hi] for option `opt`; on failure prints one line and returns -1. */
int cli_parse_i32(const char *cmd, const char *opt, const char *s, int32_t lo, int32_t hi,
                  int32_t *out);
int cli_parse_f64(const char *cmd, const char *opt, const char *s, double *out);

/* 1 iff argv[*i] is `name`; then *val is the next argument (or an error if there is none).
 * Returns 0 no match, 1 match, -1 missing value (message printed). */
int cli_opt(const char *cmd, int argc, char **argv, int *i, const char *name, const char **val);

/* 1 iff any argument is -h or --help. */
int cli_wants_help(int argc, char **argv);

#endif
