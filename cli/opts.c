/* opts.c - the table-driven argument parser over getopt_long and the --help printer (opts.h). */
#include <errno.h>
#include <float.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "fixtures/fix.h"
#include "masks/params.h"

/* Options of one command after CLI_MASK_OPTS rows are expanded (gen has about 30). */
#define CLI_MAX_OPTS CLI_GIVEN_MAX
/* getopt_long's `val` of option k is CLI_VAL0 + k: clear of 1 (an operand), '?' and ':'. */
#define CLI_VAL0 256
/* The help column: option names wider than this put their help on the next line. */
#define CLI_HELP_COL 24

/* The message for an unknown option or an unexpected operand. */
static int unknown(const cli_spec *s, const char *arg)
{
    return cli_usage_error(s->cmd, s->unknown ? s->unknown : "unknown option '%s'", arg);
}

/* The one way a message line reaches stderr: formatted whole, then every raw control character
 * escaped (fc_esc_ctrl), so a value quoted from the command line (--case $'a\nFAKE') or a path
 * cannot split the line or steer a terminal, and names fc_esc_line already escaped stay as
 * they are. */
static void err_line(const char *cmd, const char *fmt, va_list ap)
{
    va_list again;
    va_copy(again, ap);
    int n = vsnprintf(NULL, 0, fmt, again);
    va_end(again);
    char *msg = n >= 0 ? malloc((size_t)n + 1) : NULL;
    char *out = msg ? malloc(4 * (size_t)n + 1) : NULL;
    if (!out) { /* nothing left to format with: say so rather than print unescaped text */
        fprintf(stderr, "flexcheck%s%s: out of memory while reporting an error\n", cmd ? " " : "",
                cmd ? cmd : "");
        free(msg);
        return;
    }
    vsnprintf(msg, (size_t)n + 1, fmt, ap);
    fc_esc_ctrl(out, 4 * (size_t)n + 1, msg);
    fprintf(stderr, "flexcheck%s%s: %s\n", cmd ? " " : "", cmd ? cmd : "", out);
    free(msg);
    free(out);
}

void cli_say(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    err_line(cmd, fmt, ap);
    va_end(ap);
}

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    err_line(cmd, fmt, ap);
    va_end(ap);
    return CLI_BADINPUT;
}

int cli_exclusive(const char *cmd, const char *a, int a_given, const char *b, int b_given)
{
    if (a_given && b_given)
        return cli_usage_error(cmd, "%s and %s exclude each other: give one (--help)", a, b);
    return CLI_GO;
}

int cli_decimal(const char *s, size_t len, long long *out)
{
    size_t i = len && s[0] == '-';
    if (i == len)
        return -1;
    long long v = 0;
    for (; i < len; i++) {
        int d = s[i] - '0';
        if (d < 0 || d > 9 || v > (CLI_DECIMAL_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    *out = s[0] == '-' ? -v : v;
    return 0;
}

int cli_parse_i32(const char *cmd, const char *opt, const char *s, int32_t lo, int32_t hi,
                  int32_t *out)
{
    long long v;
    if (cli_decimal(s, strlen(s), &v) || v < lo || v > hi) {
        cli_usage_error(cmd, "%s: '%s' is not an integer in [%d, %d]", opt, s, (int)lo, (int)hi);
        return -1;
    }
    *out = (int32_t)v;
    return 0;
}

/* 1 iff s is a decimal number: [-]digits[.digits][e[+-]digits], a digit on at least one side
 * of the point. strtod alone would also take leading space, '+', hex, inf and nan. */
static int decimal_number(const char *s)
{
    s += *s == '-';
    size_t whole = strspn(s, "0123456789");
    s += whole;
    size_t frac = 0;
    if (*s == '.') {
        frac = strspn(s + 1, "0123456789");
        s += 1 + frac;
    }
    if (whole + frac == 0)
        return 0;
    if (*s == 'e' || *s == 'E') {
        s += 1 + (s[1] == '+' || s[1] == '-');
        size_t exp = strspn(s, "0123456789");
        if (exp == 0)
            return 0;
        s += exp;
    }
    return *s == '\0';
}

int cli_parse_f64(const char *cmd, const char *opt, const char *s, double *out)
{
    if (!decimal_number(s)) {
        cli_usage_error(cmd, "%s: '%s' is not a decimal number", opt, s);
        return -1;
    }
    errno = 0;
    double v = strtod(s, NULL);
    /* ERANGE: beyond DBL_MAX, or below the smallest normal double (a subnormal or 0 where the
     * text is not zero); neither is a value any option means. */
    if (!isfinite(v)) {
        cli_usage_error(cmd, "%s: '%s' is out of range (magnitude above %.1e)", opt, s, DBL_MAX);
        return -1;
    }
    if (errno == ERANGE || (v != 0 && fabs(v) < DBL_MIN)) {
        cli_usage_error(cmd, "%s: '%s' is out of range (nonzero magnitude below %.1e, the "
                        "smallest normal double)", opt, s, DBL_MIN);
        return -1;
    }
    *out = v;
    return 0;
}

/* One option as parsed and printed: a table row, or one mask term of a CLI_MASK_OPTS row. */
typedef struct resolved {
    const cli_opt *row;
    int mask_i; /* the MASK_PARAMS entry, -1 for a plain row */
    const char *name, *arg, *help;
} resolved;

/* Expands s's table into r[0..n); returns n, or -1 if it exceeds CLI_MAX_OPTS. */
static int resolve(const cli_spec *s, resolved *r)
{
    int n = 0;
    for (int k = 0; k < s->nopts; k++) {
        const cli_opt *o = &s->opts[k];
        if (o->kind != CLI_K_MASKS) {
            if (n >= CLI_MAX_OPTS)
                return -1;
            r[n++] = (resolved){o, -1, o->name, o->arg, o->help};
            continue;
        }
        for (int i = 0; i < MASK_NPARAMS; i++) {
            const mask_param_info *p = &mask_param_table[i];
            if (n >= CLI_MAX_OPTS)
                return -1;
            r[n++] = (resolved){o, i, p->opt, mask_param_is_flag(i) ? NULL : p->label, p->help};
        }
    }
    return n;
}

/* 1 iff the argument `elem` spells option `name` in full: "--name" or "--name=...". */
static int spelled_out(const char *elem, const char *name)
{
    size_t len = strlen(name);
    return !strncmp(elem, "--", 2) && !strncmp(elem + 2, name, len) &&
           (elem[2 + len] == '\0' || elem[2 + len] == '=');
}

/* Stores option r's value (NULL for a flag). Returns 0, -1 (message printed) or 1 (stop). */
static int store(const cli_spec *s, const resolved *r, const char *value)
{
    char opt[80];
    snprintf(opt, sizeof opt, "--%s", r->name);
    const cli_opt *o = r->row;
    int rc = 0;
    if (r->mask_i >= 0) {
        int32_t v = 1;
        if (value && cli_parse_i32(s->cmd, opt, value, 0, mask_param_table[r->mask_i].max, &v))
            return -1;
        mask_param_set(o->dst, r->mask_i, v);
    } else {
        switch (o->kind) {
        case CLI_K_FLAG:
            *(int *)o->dst = (int)o->lo;
            break;
        case CLI_K_I32:
            rc = cli_parse_i32(s->cmd, opt, value, o->lo, o->hi, o->dst);
            break;
        case CLI_K_STR:
            *(const char **)o->dst = value;
            break;
        case CLI_K_FN:
            rc = o->fn(s->cmd, opt, value, o->dst);
            break;
        case CLI_K_MASKS: /* expanded by resolve() */
            break;
        }
    }
    if (rc >= 0 && o->seen)
        *o->seen = 1;
    return rc;
}

int cli_parse(const cli_spec *s, int argc, char **argv, int *noperands)
{
    /* Help wins wherever it stands, even after a bad option or as an option's value: someone
     * who typed it wants the help, not an error about the rest of the line. */
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            cli_print_help(s, stdout);
            return CLI_PASS;
        }
    resolved r[CLI_MAX_OPTS];
    struct option lo[CLI_MAX_OPTS + 1];
    int n = resolve(s, r);
    if (n < 0)
        return cli_usage_error(s->cmd, "more than %d options (CLI_MAX_OPTS)", CLI_MAX_OPTS);
    for (int k = 0; k < n; k++)
        lo[k] = (struct option){r[k].name, r[k].arg ? required_argument : no_argument, NULL,
                                CLI_VAL0 + k};
    lo[n] = (struct option){0};
    int nops = 0;
    /* "-": operands come back in order as 1, so nothing is permuted and each call reads the
     * element argv[optind] pointed at before it (the argument an error names); ":": a missing
     * value returns ':' instead of '?'. optind = 0 restarts glibc's scanner for each parse. */
    opterr = 0;
    optind = 0;
    for (;;) {
        int at = optind ? optind : 1;
        int c = getopt_long(argc, argv, "-:", lo, NULL);
        if (c == -1)
            break;
        const char *elem = argv[at];
        int k = c - CLI_VAL0;
        if (c == 1) {
            /* "-" (stdin by convention) names nothing a command can read; it stays the
             * unknown option it always was. */
            if (!strcmp(elem, "-") || (s->max_operands != CLI_ANY && nops >= s->max_operands))
                return unknown(s, elem);
            /* Safe: getopt never looks back at slots it has passed. */
            argv[1 + nops++] = (char *)elem;
            continue;
        }
        if (c == ':' && optopt >= CLI_VAL0 && optopt < CLI_VAL0 + n &&
            spelled_out(elem, r[optopt - CLI_VAL0].name))
            return cli_usage_error(s->cmd, "--%s needs a value", r[optopt - CLI_VAL0].name);
        /* getopt's '?' for "--flag=VALUE" names the flag in optopt: the option exists, the
         * value is what is wrong. */
        if (c == '?' && optopt >= CLI_VAL0 && optopt < CLI_VAL0 + n &&
            !r[optopt - CLI_VAL0].arg && spelled_out(elem, r[optopt - CLI_VAL0].name))
            return cli_usage_error(s->cmd, "--%s takes no value: '%s'",
                                   r[optopt - CLI_VAL0].name, elem);
        if (k < 0 || k >= n || !spelled_out(elem, r[k].name))
            return unknown(s, elem);
        int rc = store(s, &r[k], r[k].arg ? optarg : NULL);
        if (rc < 0)
            return CLI_BADINPUT;
        if (s->given) { /* each name once: at most one entry per resolved option */
            int seen = 0;
            for (int g = 0; g < s->given->n && !seen; g++)
                seen = s->given->name[g] == r[k].name;
            if (!seen)
                s->given->name[s->given->n++] = r[k].name;
        }
        if (rc > 0) {
            *noperands = nops;
            return CLI_GO;
        }
    }
    for (int i = optind; i < argc; i++) { /* after "--" */
        if (s->max_operands != CLI_ANY && nops >= s->max_operands)
            return unknown(s, argv[i]);
        argv[1 + nops++] = argv[i];
    }
    *noperands = nops;
    return CLI_GO;
}

/* "  --name ARG" of option r. */
static void left_column(char *buf, size_t cap, const resolved *r)
{
    snprintf(buf, cap, "  --%s%s%s", r->name, r->arg ? " " : "", r->arg ? r->arg : "");
}

/* One help entry: the left column, then the help lines under one another. */
static void print_entry(FILE *f, const char *left, const char *help, int col)
{
    int len = (int)strlen(left);
    if (len > col)
        fprintf(f, "%s\n%*s", left, col + 2, "");
    else
        fprintf(f, "%-*s  ", col, left);
    for (const char *p = help; *p;) {
        size_t line = strcspn(p, "\n");
        fprintf(f, "%.*s\n", (int)line, p);
        p += line;
        if (*p == '\n' && *++p)
            fprintf(f, "%*s", col + 2, "");
    }
}

void cli_print_help(const cli_spec *s, FILE *f)
{
    static const char help_left[] = "  -h, --help";
    resolved r[CLI_MAX_OPTS];
    int n = resolve(s, r);
    if (n < 0)
        n = 0;
    char left[96];
    int col = (int)strlen(help_left);
    for (int k = 0; k < n; k++) {
        left_column(left, sizeof left, &r[k]);
        int len = (int)strlen(left);
        if (len > col && len <= CLI_HELP_COL)
            col = len;
    }
    fputs(s->usage, f);
    if (s->intro)
        fprintf(f, "\n%s", s->intro);
    if (s->more) {
        fputc('\n', f);
        s->more(f);
    }
    fputc('\n', f);
    for (int k = 0; k < n; k++) {
        left_column(left, sizeof left, &r[k]);
        if (r[k].mask_i < 0 && r[k].row->kind == CLI_K_FN && r[k].row->fn == cli_parse_bytes) {
            /* A memory figure's default depends on the machine (fix_default_case_bytes): the
             * help says what it is here, in a form the option takes back. */
            char help[512];
            uint64_t b = fix_default_case_bytes(), gib = (uint64_t)1 << 30;
            snprintf(help, sizeof help, "%s\n(default here %llu%s = %.1f GiB: the lesser of 16G and "
                     "half of this\nmachine's memory, or of its cgroup's memory limit)", r[k].help,
                     (unsigned long long)(b % gib ? b >> 20 : b / gib), b % gib ? "M" : "G",
                     (double)b / (double)gib);
            print_entry(f, left, help, col);
            continue;
        }
        if (r[k].mask_i < 0) {
            print_entry(f, left, r[k].help, col);
            continue;
        }
        /* A mask term's help line comes from MASK_PARAMS; its default is what the command
         * put in the mask before parsing (help is printed before any option is stored). */
        char help[256];
        int32_t v = mask_param_get(r[k].row->dst, r[k].mask_i);
        if (mask_param_is_flag(r[k].mask_i))
            snprintf(help, sizeof help, "%s (default %s)", r[k].help, v ? "on" : "off");
        else
            snprintf(help, sizeof help, "%s (default %d)", r[k].help, (int)v);
        print_entry(f, left, help, col);
    }
    print_entry(f, help_left, "print this help and exit", col);
    fprintf(f, "\n%s\n", s->exit_status);
}

int cli_parse_shard(const char *cmd, const char *opt, const char *s, void *dst)
{
    int32_t *in = dst;
    const char *slash = strchr(s, '/');
    long long i, n;
    /* Digits only on both sides (a '-' cli_decimal takes fails the range): a shard count that
     * wrapped or was read past would select another part of the matrix than asked. */
    if (!slash || cli_decimal(s, (size_t)(slash - s), &i) ||
        cli_decimal(slash + 1, strlen(slash + 1), &n) || i < 1 || i > n || n > CLI_SHARD_MAX)
        return cli_usage_error(cmd, "%s '%s': expected I/N, whole numbers with 1 <= I <= N <= %d",
                               opt, s, CLI_SHARD_MAX), -1;
    in[0] = (int32_t)i;
    in[1] = (int32_t)n;
    return 0;
}

/* What parse_scaled found wrong. */
enum { SCALED_OK, SCALED_SYNTAX, SCALED_TOO_LARGE, SCALED_TOO_SMALL };

/* A decimal integer with an optional K, M, G or T suffix (powers of 1024), at least min, into
 * *out; SCALED_OK, or what is wrong with s. */
static int parse_scaled(const char *s, unsigned long long min, size_t *out)
{
    static const char units[] = "KMGT";
    size_t digits = strspn(s, "0123456789");
    const char *end = s + digits;
    int shift = 0;
    if (*end) {
        const char *u = strchr(units, *end >= 'a' ? *end - 'a' + 'A' : *end);
        if (!u || end[1])
            return SCALED_SYNTAX;
        shift = 10 * (int)(u - units + 1);
    }
    if (digits == 0)
        return SCALED_SYNTAX;
    errno = 0;
    unsigned long long v = strtoull(s, NULL, 10);
    if (errno || v > (SIZE_MAX >> shift))
        return SCALED_TOO_LARGE;
    if ((v << shift) < min)
        return SCALED_TOO_SMALL;
    *out = (size_t)(v << shift);
    return SCALED_OK;
}

int cli_parse_bytes(const char *cmd, const char *opt, const char *s, void *dst)
{
    switch (parse_scaled(s, 512ull << 20, dst)) {
    case SCALED_OK:
        return 0;
    case SCALED_TOO_LARGE:
        return cli_usage_error(cmd, "%s '%s': too large (above 2^%d - 1 bytes)", opt, s,
                               (int)(8 * sizeof(size_t))), -1;
    default:
        return cli_usage_error(cmd, "%s '%s': a size in bytes of at least 512M, with an optional "
                               "suffix K, M, G or T (powers of 1024)", opt, s), -1;
    }
}

int cli_parse_seed(const char *cmd, const char *opt, const char *v, void *dst)
{
    char *end;
    errno = 0;
    if (!v[0] || strspn(v, "0123456789") != strlen(v))
        return cli_usage_error(cmd, "%s '%s': not an unsigned decimal integer", opt, v), -1;
    *(uint64_t *)dst = strtoull(v, &end, 10);
    if (errno)
        return cli_usage_error(cmd, "%s '%s': above 2^64 - 1", opt, v), -1;
    return 0;
}

int cli_parse_rows(const char *cmd, const char *opt, const char *v, void *dst)
{
    int32_t *rows = dst;
    if (!strcmp(v, "all")) {
        *rows = 0;
        return 0;
    }
    if (!strcmp(v, "auto")) {
        *rows = FIX_ROWS_AUTO;
        return 0;
    }
    long long n;
    if (cli_decimal(v, strlen(v), &n) || n < 1 || n > INT32_MAX)
        return cli_usage_error(cmd, "%s '%s': a number of query tokens from 1 to %d, all or auto",
                               opt, v, (int)INT32_MAX), -1;
    *rows = (int32_t)n;
    return 0;
}

int cli_parse_count(const char *cmd, const char *opt, const char *s, void *dst)
{
    switch (parse_scaled(s, 1, dst)) {
    case SCALED_OK:
        return 0;
    case SCALED_TOO_LARGE:
        return cli_usage_error(cmd, "%s '%s': too large (above 2^%d - 1)", opt, s,
                               (int)(8 * sizeof(size_t))), -1;
    default:
        return cli_usage_error(cmd, "%s '%s': a positive count, with an optional suffix K, M, "
                               "G or T (powers of 1024)", opt, s), -1;
    }
}
