/*
 * test_cli_run.h - running the flexcheck binary (FLEXCHECK_BIN) from a test, stdout and stderr
 * captured into the test's directory. Include after TEST_TMPDIR (test_tmpdir.h), which defines
 * the `dir` these use; the command runs in the test's own working directory (the repository
 * root under make test), so relative paths in its arguments are the repository's.
 */
#ifndef FLEXCHECK_TEST_CLI_RUN_H
#define FLEXCHECK_TEST_CLI_RUN_H

#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

/* Output of one run, big enough for the longest --help. */
typedef struct run_out {
    int status;
    char out[16384], err[4096];
} run_out;

/* dir/name's text into buf (empty when missing), always terminated. */
static inline void slurp(const char *name, char *buf, size_t cap)
{
    char p[128];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *fp = fopen(p, "r");
    size_t n = fp ? fread(buf, 1, cap - 1, fp) : 0;
    buf[n] = '\0';
    if (fp)
        fclose(fp);
}

/* Runs `flexcheck ARGS` with stdout and stderr captured; skips the test without the binary. */
static inline void run_cli(run_out *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline void run_cli(run_out *r, const char *fmt, ...)
{
    const char *bin = getenv("FLEXCHECK_BIN");
    if (!bin)
        cr_skip_test("FLEXCHECK_BIN is not set (make test sets it)");
    char args[1024], cmd[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "OPENBLAS_NUM_THREADS=1 %s %s >'%s/stdout' 2>'%s/stderr'", bin,
             args, dir, dir);
    int st = system(cmd);
    cr_assert(st != -1 && WIFEXITED(st), "%s did not exit normally", cmd);
    r->status = WEXITSTATUS(st);
    slurp("stdout", r->out, sizeof r->out);
    slurp("stderr", r->err, sizeof r->err);
}

static inline int count_lines(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

#endif
