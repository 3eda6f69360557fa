/*
 * opts.h - the one argument parser of every subcommand: each command declares a table of its
 * options (cli_opt), cli_parse() reads argv with getopt_long from that table, and the --help
 * text is printed from the same table, so an option cannot exist without its help line.
 *
 * Accepted forms: --name VALUE and --name=VALUE; flags as --name. Long names must be spelled
 * in full: getopt_long would take an unambiguous abbreviation, but a later option sharing the
 * prefix would silently change what an old command line means, so cli_parse refuses them.
 * Options and operands mix freely and are read in order (an error names the first bad
 * argument); "--" ends the options. -h or --help anywhere prints the help and exits 0. A
 * repeated option keeps its last value (--lq 64 --lq 128 is --lq 128), the common convention;
 * two different options that contradict each other are the command's to refuse
 * (cli_exclusive), never settled by their order.
 */
#ifndef FLEXCHECK_CLI_OPTS_H
#define FLEXCHECK_CLI_OPTS_H

#include <stdint.h>
#include <stdio.h>

#include "masks/mask.h"

/* What an option's value is, and where it goes (dst). */
typedef enum cli_kind {
    CLI_K_FLAG,  /* no value: *(int *)dst = val */
    CLI_K_I32,   /* decimal int32 in [lo, hi]: *(int32_t *)dst */
    CLI_K_STR,   /* the text itself: *(const char **)dst (points into argv) */
    CLI_K_FN,    /* fn(cmd, "--name", value, dst) parses and stores; flag when arg is NULL */
    CLI_K_MASKS, /* one option per MASK_PARAMS entry into *(mask_params *)dst, see below */
} cli_kind;

/* A custom parser: value is NULL for a flag. Returns 0 stored, -1 bad (one line printed via
 * cli_usage_error), 1 stored and stop reading the command line (layout --list). */
typedef int (*cli_parse_fn)(const char *cmd, const char *opt, const char *value, void *dst);

typedef struct cli_opt {
    const char *name; /* long name without the dashes */
    const char *arg;  /* metavar shown in --help ("N", "FILE"); NULL: a flag */
    const char *help; /* one line; '\n' continues it, indented under the first */
    cli_kind kind;
    void *dst;
    int32_t lo, hi; /* CLI_K_I32: the accepted range; CLI_K_FLAG: lo is the value stored */
    cli_parse_fn fn;
    int *seen; /* if not NULL, set to 1 when the option is given */
} cli_opt;

/* Table rows, one macro per kind. */
#define CLI_FLAG(name, help, dst, value) {name, NULL, help, CLI_K_FLAG, dst, value, 0, NULL, NULL}
#define CLI_INT(name, arg, help, dst, lo, hi) {name, arg, help, CLI_K_I32, dst, lo, hi, NULL, NULL}
/* An int whose presence matters (an option refused beside another, a default derived when
 * absent): *seen is set to 1 when it is given. */
#define CLI_INT_SEEN(name, arg, help, dst, lo, hi, seen)                                       \
    {name, arg, help, CLI_K_I32, dst, lo, hi, NULL, seen}
#define CLI_STR(name, arg, help, dst) {name, arg, help, CLI_K_STR, dst, 0, 0, NULL, NULL}
#define CLI_FN(name, arg, help, fn, dst) {name, arg, help, CLI_K_FN, dst, 0, 0, fn, NULL}
/* The mask options, driven by mask_param_table (masks/params.h): --<opt> for every entry, a
 * flag when mask_param_is_flag(i) and an int32 in [0, max] otherwise, metavar its label, help
 * its help line plus the value *dst holds before parsing as the default, stored with
 * mask_param_set. A term added to MASK_PARAMS gets its option and help line in every command
 * that lists this row, with no edit here or in the commands. */
#define CLI_MASK_OPTS(dst) {NULL, NULL, NULL, CLI_K_MASKS, dst, 0, 0, NULL, NULL}

/* One command's parse and help. */
typedef struct cli_spec {
    const char *cmd;     /* "gate", "bench ref": the prefix of every message */
    const char *usage;   /* the usage line(s), "usage: flexcheck gate [options]\n" */
    const char *intro;   /* what the command does, or NULL */
    void (*more)(FILE *f); /* text the intro cannot hold (bench: its parts), or NULL */
    const cli_opt *opts;
    int nopts;
    int max_operands;    /* operands accepted: 0, 1, ... or CLI_ANY */
    /* printf format, one %s: an unknown option or an operand beyond max_operands (each
     * command keeps the wording it always had) */
    const char *unknown;
    const char *exit_status; /* the closing line, "exit status: 0 ..., 2 bad input." */
    struct cli_given *given; /* if not NULL, the options the parse stored (cli_given) */
} cli_spec;

/* The options a parse stored, each once, in the order first given: their names without the
 * dashes (the table's strings). For a command whose modes take different options (gen --set
 * takes none of --case's): what was given, read by the parser that knows which arguments are
 * values. */
#define CLI_GIVEN_MAX 64
typedef struct cli_given {
    const char *name[CLI_GIVEN_MAX];
    int n;
} cli_given;

#define CLI_ANY (-1)
/* cli_parse's answer when the command should go on (any other value is its exit status). */
#define CLI_GO (-1)

/* Parses argv[1..argc) against s: stores every option in order, moves the operands to
 * argv[1..*noperands] (in order) and returns CLI_GO; or prints the help to stdout and returns
 * CLI_PASS; or prints one line "flexcheck CMD: ..." to stderr and returns CLI_BADINPUT. */
int cli_parse(const cli_spec *s, int argc, char **argv, int *noperands);

/* The help text, as -h/--help prints it. */
void cli_print_help(const cli_spec *s, FILE *f);

/* CLI_GO, or when options a and b were both given (a_given, b_given) one line saying they
 * exclude each other, and CLI_BADINPUT. */
int cli_exclusive(const char *cmd, const char *a, int a_given, const char *b, int b_given);

/* Prints one line "flexcheck <cmd>: <message>" ("flexcheck: <message>" when cmd is NULL) to
 * stderr, every raw control character of it escaped (fc_esc_ctrl): every message line of the
 * command goes through here. */
void cli_say(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* cli_say, then CLI_BADINPUT. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The most parts --shard divides a matrix into (the full one has under 1000 cases). */
#define CLI_SHARD_MAX 10000
/* A macro's value as a string literal, for help text: CLI_TEXT(CLI_SHARD_MAX) is "10000". */
#define CLI_TEXT(x) CLI_TEXT_(x)
#define CLI_TEXT_(x) #x
/* A cli_parse_fn for --shard I/N into int32_t dst[2] = {I, N}: digits only, nothing around
 * them, 1 <= I <= N <= CLI_SHARD_MAX (gate, export). */
int cli_parse_shard(const char *cmd, const char *opt, const char *s, void *dst);

/* A cli_parse_fn for a size in bytes into size_t dst: a decimal count (digits only) with an
 * optional one-letter suffix K, M, G or T (powers of 1024, either case), at least 512M and at
 * most SIZE_MAX (the message says which bound, or the form, is broken) (flexcheck takes
 * about 350 MiB of address space before it reads anything: libraries, OpenBLAS's buffers).
 * --max-memory of check, repro and fill. */
int cli_parse_bytes(const char *cmd, const char *opt, const char *s, void *dst);
/* A cli_parse_fn for a count (multiply-adds) into size_t dst: a positive integer with an
 * optional K, M, G or T suffix (powers of 1024). */
int cli_parse_count(const char *cmd, const char *opt, const char *s, void *dst);
/* A cli_parse_fn for a full uint64 seed into uint64_t dst: decimal digits only (fixtures record
 * seeds; strtoull alone takes spaces and '+'). */
int cli_parse_seed(const char *cmd, const char *opt, const char *s, void *dst);
/* A cli_parse_fn for --rows into int32_t dst (fix_budget.rows): "all" 0, "auto" FIX_ROWS_AUTO,
 * or a number of query tokens from 1 to INT32_MAX (0, a sign, a fraction: refused). */
int cli_parse_rows(const char *cmd, const char *opt, const char *s, void *dst);

/* Every number on the command line is decimal and nothing else: no leading space, no '+', no
 * hex, no inf or nan (strtol and strtod take all of these), so an integer option and a number
 * option read the same text the same way. */

/* The magnitude beyond which cli_decimal refuses (every option's range is far inside it). */
#define CLI_DECIMAL_MAX 1000000000000000000LL
/* s[0..len) as an optional '-' then digits, nothing else, into *out: 0, or -1 (no message). */
int cli_decimal(const char *s, size_t len, long long *out);
/* Parses a decimal int32 in [lo, hi] for option `opt`; on failure prints one line and returns
 * -1. */
int cli_parse_i32(const char *cmd, const char *opt, const char *s, int32_t lo, int32_t hi,
                  int32_t *out);
/* Parses a decimal number ([-]digits[.digits][e[+-]digits]) for option `opt`, its magnitude 0
 * or a normal double; on failure prints one line (not decimal, or out of range) and returns -1. */
int cli_parse_f64(const char *cmd, const char *opt, const char *s, double *out);

#endif
