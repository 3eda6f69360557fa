/*
 * test_cli_layout.c - the layout-related options of the command line, run as a child process
 * (FLEXCHECK_BIN, set by make test), as test_cli.c runs it: blockmask's --lk follows --lq.
 */
#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>

#include "tests/test_tmpdir.h"

TEST_TMPDIR("clilayout")

TestSuite(cli_layout, .init = make_dir, .fini = remove_dir);

/* Output of one run, big enough for the longest --help. */
typedef struct run_out {
    int status;
    char out[16384], err[4096];
} run_out;

static void slurp(const char *name, char *buf, size_t cap)
{
    char p[128];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *fp = fopen(p, "r");
    size_t n = fp ? fread(buf, 1, cap - 1, fp) : 0;
    buf[n] = '\0';
    if (fp)
        fclose(fp);
}

/* Runs `flexcheck ARGS` with stdout and stderr captured. */
static void run_cli(run_out *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void run_cli(run_out *r, const char *fmt, ...)
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

/* blockmask's key length follows the query length unless given (as gen's does). */
Test(cli_layout, blockmask_lk_defaults_to_lq)
{
    run_out r;
    run_cli(&r, "blockmask --lq 300 --causal --json");
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_expect(strstr(r.out, "\"lq\":300,\"lk\":300,"), "%s", r.out);
    run_cli(&r, "blockmask --lq 300 --lk 1000 --causal --json");
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_expect(strstr(r.out, "\"lq\":300,\"lk\":1000,"), "%s", r.out);
    run_cli(&r, "blockmask --causal --json");
    cr_expect(strstr(r.out, "\"lq\":1024,\"lk\":1024,"), "both default to 1024: %s", r.out);
    run_cli(&r, "blockmask --help");
    cr_expect(strstr(r.out, "key length (dense, default Lq)"), "%s", r.out);
}
