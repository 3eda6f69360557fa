/*
 * test_merge.c - reading a report set back (reports/rep_read.c) and `flexcheck report merge`
 * (reports/rep_merge.c, cli/cmd_report.c).
 *
 * - rows written and read back are equal field by field, NaN, infinities, -0 and every
 *   string escape included, and so are the run identity and the check list;
 * - two shards of a real gate run (--quick with a small --filter, FLEXCHECK_BIN) merge into
 *   the unsharded run's rows, in its order, with its totals; synthetic shards given out of
 *   order merge back into case order; check runs merge and list their identities;
 * - every refusal (different seed, matrix, filter, commit or N; a shard twice; shards
 *   missing; the same check run twice; a non-empty --out) exits 2 with one line naming the
 *   directories and the field, and writes nothing;
 * - a rows.json that is truncated, garbled, or has a field missing, of the wrong type, too long
 *   or out of range is refused with one line naming the file and the field, never a crash (also
 *   run under ASan/UBSan: fixtures/module.mk, fixtures-asan).
 */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/test_tmpdir.h"
#include "gpu/gpu.h"
#include "reports/rep_internal.h"

/* The kernel versions a row may name, as text: the CLI hands GPU_MAX_KERNEL to the reader. */
#define KERNELS_STR(x) #x
#define KERNELS_XSTR(x) KERNELS_STR(x)
#define KERNELS KERNELS_XSTR(GPU_MAX_KERNEL)

TEST_TMPDIR("flexcheck-merge")

TestSuite(roundtrip, .init = make_dir, .fini = remove_dir);
TestSuite(merge, .init = make_dir, .fini = remove_dir);
TestSuite(refuse, .init = make_dir, .fini = remove_dir);
TestSuite(hostile, .init = make_dir, .fini = remove_dir);

/* ---- helpers ---------------------------------------------------------------------------------- */

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    cr_assert(f, "%s: cannot open", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    cr_assert(buf && fread(buf, 1, (size_t)n, f) == (size_t)n, "%s: short read", path);
    buf[n] = 0;
    fclose(f);
    if (len)
        *len = (size_t)n;
    return buf;
}

static void spit(const char *path, const char *text, size_t len)
{
    FILE *f = fopen(path, "wb");
    cr_assert(f, "%s: cannot create", path);
    cr_assert_eq(fwrite(text, 1, len, f), len, "%s: short write", path);
    fclose(f);
}

static int exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

static int count_lines(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

/* Output of one run of the CLI. */
typedef struct run_out {
    int status;
    char out[8192], err[4096];
} run_out;

static void read_into(const char *name, char *buf, size_t cap)
{
    char p[128];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *fp = fopen(p, "r");
    size_t n = fp ? fread(buf, 1, cap - 1, fp) : 0;
    buf[n] = 0;
    if (fp)
        fclose(fp);
}

/* Runs `flexcheck ARGS` in the test's directory, stdout and stderr captured. */
static void run_cli(run_out *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void run_cli(run_out *r, const char *fmt, ...)
{
    const char *bin = getenv("FLEXCHECK_BIN");
    if (!bin)
        cr_skip_test("FLEXCHECK_BIN is not set (make test sets it)");
    char args[2048], cmd[4096], abs_bin[1024];
    if (bin[0] != '/') { /* the command runs in dir */
        char cwd[512];
        cr_assert(getcwd(cwd, sizeof cwd), "getcwd failed");
        snprintf(abs_bin, sizeof abs_bin, "%s/%s", cwd, bin);
        bin = abs_bin;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "cd '%s' && OPENBLAS_NUM_THREADS=1 '%s' %s >.stdout 2>.stderr", dir,
             bin, args);
    int st = system(cmd);
    cr_assert(st != -1 && WIFEXITED(st), "%s did not exit normally (a crash?)", cmd);
    r->status = WEXITSTATUS(st);
    read_into(".stdout", r->out, sizeof r->out);
    read_into(".stderr", r->err, sizeof r->err);
}

/* Field by field through the column table, so a column added there is compared here too.
 * Numbers are compared exactly: NaN with NaN, infinities and -0 by sign. */
static void expect_rows_equal(const rep_row *a, const rep_row *b, const char *what, size_t i)
{
    for (size_t c = 0; c < rep_ncols; c++) {
        const rep_col *col = &rep_cols[c];
        if (col->kind == REP_COL_F64) {
            double x, y;
            memcpy(&x, (const char *)a + col->off, sizeof x);
            memcpy(&y, (const char *)b + col->off, sizeof y);
            cr_expect((isnan(x) && isnan(y)) || (x == y && signbit(x) == signbit(y)),
                      "%s: row %zu: %s: %.17g vs %.17g", what, i, col->name, x, y);
            continue;
        }
        char va[REP_WHY_LEN + 32], vb[REP_WHY_LEN + 32];
        rep_val ka = rep_col_value(col, a, va, sizeof va);
        rep_val kb = rep_col_value(col, b, vb, sizeof vb);
        cr_expect(ka == kb && !strcmp(va, vb), "%s: row %zu: %s: '%s' vs '%s'", what, i,
                  col->name, va, vb);
    }
}

static void expect_runs_equal(const rep_run *a, const rep_run *b, const char *what)
{
    for (size_t c = 0; c < rep_run_ncols; c++) {
        char va[REP_CMD_LEN + 32], vb[REP_CMD_LEN + 32];
        rep_val ka = rep_col_value(&rep_run_cols[c], a, va, sizeof va);
        rep_val kb = rep_col_value(&rep_run_cols[c], b, vb, sizeof vb);
        cr_expect(ka == kb && !strcmp(va, vb), "%s: run.%s: '%s' vs '%s'", what,
                  rep_run_cols[c].name, va, vb);
    }
    cr_expect_eq(a->nparts, b->nparts, "%s: parts", what);
    for (size_t i = 0; i < a->nparts && i < b->nparts; i++)
        expect_runs_equal(&a->parts[i], &b->parts[i], what);
}

/* A passing row of case `id`; k varies the metrics. */
static void make_row(rep_row *r, const char *id, fc_dtype dt, int k)
{
    memset(r, 0, sizeof *r);
    rep_set_str(r->case_id, sizeof r->case_id, id);
    rep_set_str(r->group, sizeof r->group, "M1");
    rep_set_str(r->builder, sizeof r->builder, "direct");
    rep_set_str(r->backend, sizeof r->backend, "emu");
    r->b = 1, r->nseq = 1, r->hq = 4, r->hkv = 2, r->lq = 64 + k, r->lk = 128, r->d = r->dv = 32;
    r->mask.causal = 1, r->mask.sliding_window = 16;
    r->q_block = r->kv_block = 64;
    r->kernel = 2;
    r->dtype = dt;
    r->max_err = 1e-3 * (k + 1), r->mean_err = 1e-4 * (k + 1), r->rmse = 2e-4, r->nmse = 1e-9;
    r->e_lp_max = 1.0 / 1024, r->h1_ratio = 0.25 + 0.01 * k, r->floor = 1e-6;
    r->lse_err = 1e-7, r->s1 = 0.5, r->s2 = 0.125;
    r->outcome = REP_ROW_PASS;
    memcpy(r->gates, "PPPPPP-", REP_NGATES + 1);
    rep_set_str(r->reason, sizeof r->reason, "pass");
}

static const rep_check checks[] = {{"window-edge", "window edges differ"},
                                   {"p-round", "P rounded to the input type"}};

static rep_run base_run(void)
{
    rep_run run;
    memset(&run, 0, sizeof run);
    rep_set_str(run.time, sizeof run.time, "2026-11-29T10:04:05Z");
    rep_set_str(run.id, sizeof run.id, "0123456789abcdef");
    rep_set_str(run.version, sizeof run.version, "0.1.0");
    rep_set_str(run.commit, sizeof run.commit, "abc1234");
    rep_set_str(run.command, sizeof run.command, "flexcheck gate --quick --filter m1");
    rep_set_str(run.matrix, sizeof run.matrix, "quick");
    rep_set_str(run.filter, sizeof run.filter, "m1");
    rep_set_str(run.backends, sizeof run.backends, "emu");
    run.kernel = 2;
    run.seed = 1;
    run.shard_i = run.shard_n = 1;
    return run;
}

/* The run of shard i of n, with its own id. */
static rep_run shard_run(int i, int n)
{
    rep_run run = base_run();
    run.shard_i = i, run.shard_n = n;
    snprintf(run.id, sizeof run.id, "00000000000000%02d", i);
    snprintf(run.command, sizeof run.command, "flexcheck gate --quick --filter m1 --shard %d/%d",
             i, n);
    return run;
}

/* Cases c0..c5, two rows each (float32, float16), as the gate deals them to shards: case j
 * to shard j % n + 1. */
#define NCASES 6
static size_t shard_rows(rep_row *rows, int i, int n)
{
    size_t k = 0;
    for (int j = 0; j < NCASES; j++) {
        if (j % n != i - 1)
            continue;
        char id[16];
        snprintf(id, sizeof id, "c%d", j);
        make_row(&rows[k++], id, FC_F32, j);
        make_row(&rows[k++], id, FC_F16, j);
    }
    return k;
}

/* Writes a report set with `run` into dir/name. */
static void write_set(const char *name, const rep_row *rows, size_t n, const rep_run *run)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    fc_err err = {{0}};
    rep_set set = {rows, n, checks, 2, run};
    cr_assert_eq(rep_write_all(path, &set, &err), FC_OK, "%s: %s", path, err.msg);
}

/* Shard i of n with run (its shard fields set here) into dir/name. */
static void write_shard(const char *name, rep_run run, int i, int n)
{
    rep_row rows[2 * NCASES];
    run.shard_i = i, run.shard_n = n;
    size_t nrows = shard_rows(rows, i, n);
    for (size_t k = 0; k < nrows; k++) /* the rows ran the run's kernel */
        rows[k].kernel = run.kernel;
    write_set(name, rows, nrows, &run);
}

static void read_back(const char *name, rep_report *rep)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s/%s", dir, name, REP_FILE_JSON);
    fc_err err = {{0}};
    cr_assert_eq(rep_read_json(path, rep, &err), FC_OK, "%s: %s", path, err.msg);
}

/* ---- round trip ---------------------------------------------------------------------------- */

Test(roundtrip, rows_run_and_checks_read_back_equal_field_by_field)
{
    rep_row rows[7];
    make_row(&rows[0], "m1-plain", FC_F32, 0);
    make_row(&rows[1], "m1-extremes", FC_BF16, 1);
    rows[1].max_err = INFINITY, rows[1].lse_err = -INFINITY, rows[1].rmse = NAN;
    rows[1].mean_err = -0.0, rows[1].nmse = DBL_MAX, rows[1].floor = 5e-324;
    rows[1].s1 = 0.1 + 0.2, rows[1].s2 = -1.0 / 3;
    rows[1].lq = INT32_MIN, rows[1].lk = INT32_MAX, rows[1].mask.chunk_size = 7;
    rows[1].nan_count = INT64_MAX, rows[1].inf_count = 1, rows[1].empty_rows = 0;
    rows[1].degenerate = 1;
    make_row(&rows[2], "m4-\"quoted\"\\ <&> tab\tnl\nctl\x01 caf\xc3\xa9", FC_F16, 2);
    rows[2].outcome = REP_ROW_FAIL;
    rep_set_str(rows[2].first_fail, sizeof rows[2].first_fail, "H1");
    memcpy(rows[2].gates, "PPFPPP-", REP_NGATES + 1);
    rep_set_str(rows[2].reason, sizeof rows[2].reason, "H1 max ratio: \"x\" > 1, line\r\nnext");
    rep_set_str(rows[2].explained, sizeof rows[2].explained, "window W+1 (16 -> 17): 4 of 5");
    rep_set_str(rows[2].producer, sizeof rows[2].producer, "my-engine 1.2");
    make_row(&rows[3], "m2-error", FC_F32, 3);
    rep_row_set_error(&rows[3], "evaluate: O_gold is NaN at row 0 col 0");
    make_row(&rows[4], "m2-skip", FC_F16, 4);
    rep_row_set_skip(&rows[4], "paged K/V: no paged path in kernel 1");
    make_row(&rows[5], "", FC_F32, 5); /* the longest id a row holds, and an empty group */
    memset(rows[5].case_id, 'x', REP_ID_LEN - 1);
    rows[5].case_id[REP_ID_LEN - 1] = 0;
    rows[5].group[0] = 0;
    make_row(&rows[6], "m5-outside", FC_F16, 6);
    rep_verdict ov = {.dtype = FC_F16, .unscaled = 1, .outside = 1, .first_fail = -1};
    rep_set_str(ov.outside_why, sizeof ov.outside_why, "outside-contract: the float16 baseline "
                "is inf at (b, h, q, d) = (0, 0, 0, 0)");
    rep_row_set_verdict(&rows[6], &ov);
    cr_assert_eq(rows[6].outcome, REP_ROW_OUTSIDE);

    rep_run parts[2] = {shard_run(1, 2), shard_run(2, 2)};
    rep_set_str(parts[0].dir, sizeof parts[0].dir, "report-1");
    rep_set_str(parts[1].dir, sizeof parts[1].dir, "report 2 'quoted'");
    rep_run run = base_run();
    rep_set_str(run.command, sizeof run.command, "flexcheck report merge 'a b' --out r");
    run.parts = parts, run.nparts = 2;
    write_set("r", rows, 7, &run);

    rep_report back;
    read_back("r", &back);
    cr_assert_eq(back.n, 7, "rows read back: %zu", back.n);
    for (size_t i = 0; i < 7; i++)
        expect_rows_equal(&rows[i], &back.rows[i], "round trip", i);
    expect_runs_equal(&run, &back.run, "round trip");
    cr_expect_eq(back.nchecks, 2, "checks read back");
    for (size_t i = 0; i < 2 && i < back.nchecks; i++) {
        cr_expect_str_eq(back.checks[i].name, checks[i].name);
        cr_expect_str_eq(back.checks[i].title, checks[i].title);
    }
    rep_report_free(&back);

    /* A run written without an identity (NULL) is not a mergeable report. */
    write_set("none", rows, 1, NULL);
    char path[256];
    snprintf(path, sizeof path, "%s/none/%s", dir, REP_FILE_JSON);
    fc_err err = {{0}};
    cr_expect_eq(rep_read_json(path, &back, &err), FC_EINVAL, "run: null accepted");
    cr_expect(strstr(err.msg, "none/rows.json: field run: null"), "%s", err.msg);
    rep_report_free(&back);
}

/* ---- merging ---------------------------------------------------------------------------------- */

/* The report set's totals line and everything after the run identity block. */
static const char *after_identity(const char *summary)
{
    const char *p = strstr(summary, "\n**");
    cr_assert(p, "summary.md has no totals line:\n%.400s", summary);
    return p;
}

Test(merge, two_gate_shards_equal_the_unsharded_run, .timeout = 300)
{
    /* The quick matrix's one-token cases (M1 design cases, 3 rows each): a fraction of a
     * second each. How many is the matrix's business: counted from --list. */
    static const char filter[] = "*-b1-1x1-*";
    run_out r;
    run_cli(&r, "gate --quick --list --filter '%s'", filter);
    cr_assert_eq(r.status, 0, "list: %s%s", r.out, r.err);
    int ncases = count_lines(r.out);
    cr_assert_gt(ncases, 0, "the filter selects no case");
    char want_merge[128], want_junit[160];
    snprintf(want_merge, sizeof want_merge,
             "report merge: 2 reports, %d rows: %d passed, 0 failed, 0 skipped", 3 * ncases,
             3 * ncases);
    snprintf(want_junit, sizeof want_junit,
             "<testsuites name=\"flexcheck\" tests=\"%d\" failures=\"0\" errors=\"0\" "
             "skipped=\"0\">", ncases);
    run_cli(&r, "gate --quick --filter '%s' --shard 1/2 --report-dir s1", filter);
    cr_assert_eq(r.status, 0, "shard 1/2: %s%s", r.out, r.err);
    run_cli(&r, "gate --quick --filter '%s' --shard 2/2 --report-dir s2", filter);
    cr_assert_eq(r.status, 0, "shard 2/2: %s%s", r.out, r.err);
    run_cli(&r, "gate --quick --filter '%s' --report-dir whole", filter);
    cr_assert_eq(r.status, 0, "unsharded: %s%s", r.out, r.err);
    run_cli(&r, "report merge s2 s1 --out merged"); /* out of order on purpose */
    cr_assert_eq(r.status, 0, "merge: %s%s", r.out, r.err);
    cr_expect(strstr(r.out, want_merge), "%s", r.out);

    rep_report whole, merged, s1;
    read_back("whole", &whole);
    read_back("merged", &merged);
    read_back("s1", &s1);
    cr_assert_eq(merged.n, whole.n, "rows: merged %zu, unsharded %zu", merged.n, whole.n);
    for (size_t i = 0; i < whole.n; i++)
        expect_rows_equal(&whole.rows[i], &merged.rows[i], "merged vs unsharded", i);
    cr_expect_eq(merged.nchecks, whole.nchecks, "checks");

    /* The identity: what the shards share, shard 1/1, the shards as parts in shard order. */
    const rep_run *m = &merged.run;
    cr_expect_str_eq(m->matrix, "quick");
    cr_expect_eq(m->seed, 1);
    cr_expect_str_eq(m->filter, filter);
    cr_expect_str_eq(m->commit, whole.run.commit);
    cr_expect(m->shard_i == 1 && m->shard_n == 1, "merged shard %d/%d", m->shard_i, m->shard_n);
    cr_expect(strstr(m->command, " report merge s2 s1 --out merged"), "%s", m->command);
    cr_assert_eq(m->nparts, 2, "parts");
    cr_expect(!strcmp(m->parts[0].dir, "s1") && m->parts[0].shard_i == 1, "part 1: %s %d",
              m->parts[0].dir, m->parts[0].shard_i);
    cr_expect(!strcmp(m->parts[1].dir, "s2") && m->parts[1].shard_i == 2, "part 2");
    rep_run s1_run = s1.run;
    rep_set_str(s1_run.dir, sizeof s1_run.dir, "s1");
    expect_runs_equal(&s1_run, &m->parts[0], "part 1 is shard 1's identity");
    /* The commit is the binary's, and the gate records its command line quoted for a shell. */
    run_cli(&r, "--version");
    char want[128];
    snprintf(want, sizeof want, "(commit %s)\n", whole.run.commit);
    cr_expect(r.status == 0 && strstr(r.out, want), "--version: %s, report: %s", r.out,
              whole.run.commit);
    cr_expect(strstr(s1.run.command, " gate --quick --filter '*-b1-1x1-*' --shard 1/2 "
                                     "--report-dir s1"),
              "%s", s1.run.command);

    /* Every other file: the same as the unsharded run's but for the identity. */
    char path[256];
    snprintf(path, sizeof path, "%s/whole/%s", dir, REP_FILE_MD);
    char *a = slurp(path, NULL);
    snprintf(path, sizeof path, "%s/merged/%s", dir, REP_FILE_MD);
    char *b = slurp(path, NULL);
    cr_expect_str_eq(after_identity(a), after_identity(b), "summary.md differs");
    free(a), free(b);
    snprintf(path, sizeof path, "%s/whole/%s", dir, REP_FILE_CSV);
    a = slurp(path, NULL);
    snprintf(path, sizeof path, "%s/merged/%s", dir, REP_FILE_CSV);
    b = slurp(path, NULL);
    cr_expect_str_eq(a, b, "rows.csv differs");
    free(a), free(b);
    snprintf(path, sizeof path, "%s/merged/%s", dir, REP_FILE_JUNIT);
    a = slurp(path, NULL);
    cr_expect(strstr(a, want_junit), "junit.xml totals:\n%.300s", a);
    cr_expect(strstr(a, "<property name=\"merged\" value=\"s1: quick matrix, seed 1, shard 1/2"),
              "junit.xml: merged parts");
    free(a);
    rep_report_free(&whole);
    rep_report_free(&merged);
    rep_report_free(&s1);
}

Test(merge, a_check_report_carries_its_run_identity)
{
    run_out r;
    run_cli(&r, "gen --case --lq 8 --d 32 --qb 16 --kb 16 --out a.h5");
    cr_assert_eq(r.status, 0, "%s", r.err);
    run_cli(&r, "check --backend emu --report 'c 1' a.h5");
    cr_assert_eq(r.status, 0, "%s%s", r.out, r.err);
    rep_report c;
    read_back("c 1", &c);
    cr_expect_str_eq(c.run.matrix, "check");
    cr_expect(c.run.seed == -1 && c.run.shard_i == 1 && c.run.shard_n == 1 && !c.run.filter[0],
              "check run: seed %lld shard %d/%d filter '%s'", (long long)c.run.seed,
              c.run.shard_i, c.run.shard_n, c.run.filter);
    cr_expect(strstr(c.run.command, " check --backend emu --report 'c 1' a.h5"), "%s",
              c.run.command);
    cr_expect_eq(strlen(c.run.id), 16, "id '%s'", c.run.id);
    cr_expect(strlen(c.run.time) == 20 && c.run.time[10] == 'T' && c.run.time[19] == 'Z',
              "time '%s'", c.run.time);
    cr_expect_eq(c.n, 2, "rows: the kernel with the stored and the direct block mask");
    rep_report_free(&c);
}

/* Lq = 0 is a case `gen` makes and `check` judges (a pass: nothing to get wrong), so the merge's
 * row checks take it: the lengths' range starts at 0 (attn_problem_check), the head counts' at
 * 1. */
Test(merge, a_check_run_of_an_empty_query_merges)
{
    run_out r;
    run_cli(&r, "gen --case --lq 0 --d 32 --qb 16 --kb 16 --out empty.h5");
    cr_assert_eq(r.status, 0, "%s", r.err);
    run_cli(&r, "check --backend emu --report c0 empty.h5");
    cr_assert_eq(r.status, 0, "%s%s", r.out, r.err);
    rep_report c;
    read_back("c0", &c);
    cr_assert_gt(c.n, 0, "no rows");
    cr_expect(c.rows[0].lq == 0 && c.rows[0].outcome == REP_ROW_PASS, "lq %d, %s",
              (int)c.rows[0].lq, rep_outcome_name(c.rows[0].outcome));
    rep_report_free(&c);
    run_cli(&r, "report merge c0 --out m");
    cr_expect_eq(r.status, 0, "%s%s", r.out, r.err);
}

Test(merge, shards_given_in_any_order_come_back_in_case_order)
{
    for (int i = 1; i <= 3; i++) {
        char name[16];
        snprintf(name, sizeof name, "r%d", i);
        write_shard(name, shard_run(i, 3), i, 3);
    }
    run_out r;
    run_cli(&r, "report merge r3 r1 r2 --out m");
    cr_assert_eq(r.status, 0, "%s%s", r.out, r.err);
    rep_report m;
    read_back("m", &m);
    rep_row want[2 * NCASES];
    cr_assert_eq(m.n, shard_rows(want, 1, 1), "rows: %zu", m.n);
    for (size_t i = 0; i < m.n; i++)
        expect_rows_equal(&want[i], &m.rows[i], "case order", i);
    rep_report_free(&m);
}

Test(merge, a_failing_row_makes_the_merge_exit_1_and_totals_are_sums)
{
    rep_row rows[2 * NCASES];
    rep_run run = shard_run(1, 2);
    size_t n = shard_rows(rows, 1, 2);
    rows[1].outcome = REP_ROW_FAIL;
    rep_set_str(rows[1].first_fail, sizeof rows[1].first_fail, "H3");
    memcpy(rows[1].gates, "PFPPPP-", REP_NGATES + 1); /* H3 (the second gate) failed */
    rep_set_str(rows[1].reason, sizeof rows[1].reason, "H3 non-finite: planted");
    rep_row_set_skip(&rows[2], "planted skip");
    write_set("r1", rows, n, &run);
    write_shard("r2", shard_run(2, 2), 2, 2);
    run_out r;
    run_cli(&r, "report merge r1 r2 --out m");
    cr_expect_eq(r.status, 1, "a failing row: status %d\n%s%s", r.status, r.out, r.err);
    cr_expect(strstr(r.out, "12 rows: 10 passed, 1 failed, 1 skipped"), "%s", r.out);
    char path[256];
    snprintf(path, sizeof path, "%s/m/%s", dir, REP_FILE_JSON);
    char *s = slurp(path, NULL);
    cr_expect(strstr(s, "\"rows_total\": 12, \"pass\": 10, \"fail\": 1, \"error\": 0, "
                        "\"skip\": 1, \"outside\": 0}"),
              "totals");
    free(s);
}

Test(merge, check_runs_merge_and_list_their_identities)
{
    rep_row rows[2];
    rep_run a = base_run(), b = base_run();
    for (rep_run *run = &a; run; run = run == &a ? &b : NULL) {
        rep_set_str(run->matrix, sizeof run->matrix, "check");
        run->seed = -1;
        run->filter[0] = 0;
    }
    rep_set_str(b.id, sizeof b.id, "fedcba9876543210"); /* same second and command: two runs */
    make_row(&rows[0], "dump-a.h5:layer07", FC_F16, 0);
    make_row(&rows[1], "dump-b.h5:layer08", FC_F16, 1);
    write_set("c1", &rows[0], 1, &a);
    write_set("c2", &rows[1], 1, &b);
    run_out r;
    run_cli(&r, "report merge c1 c2 --out m");
    cr_assert_eq(r.status, 0, "%s%s", r.out, r.err);
    rep_report m;
    read_back("m", &m);
    cr_expect_eq(m.n, 2, "rows");
    cr_expect_str_eq(m.run.matrix, "check");
    cr_assert_eq(m.run.nparts, 2, "parts");
    cr_expect(!strcmp(m.run.parts[0].dir, "c1") && !strcmp(m.run.parts[1].dir, "c2"), "dirs");
    cr_expect_str_eq(m.run.parts[1].id, "fedcba9876543210");
    rep_report_free(&m);
    /* A merged report merges on: its parts are listed, not itself. */
    rep_run c = a;
    rep_set_str(c.id, sizeof c.id, "00000000000000c3");
    write_set("c3", &rows[0], 1, &c);
    run_cli(&r, "report merge m c3 --out m2");
    cr_assert_eq(r.status, 0, "%s%s", r.out, r.err);
    read_back("m2", &m);
    cr_expect_eq(m.n, 3, "rows");
    cr_assert_eq(m.run.nparts, 3, "parts: %zu", m.run.nparts);
    cr_expect(!strcmp(m.run.parts[0].dir, "c1") && !strcmp(m.run.parts[2].dir, "c3"), "dirs");
    rep_report_free(&m);
}

Test(merge, force_writes_into_a_non_empty_out)
{
    write_shard("r1", shard_run(1, 1), 1, 1);
    char path[256];
    snprintf(path, sizeof path, "%s/out", dir);
    cr_assert(mkdir(path, 0755) == 0, "mkdir");
    snprintf(path, sizeof path, "%s/out/keep.txt", dir);
    spit(path, "x", 1);
    run_out r;
    run_cli(&r, "report merge r1 --out out");
    cr_expect_eq(r.status, 2, "non-empty --out: %s", r.err);
    cr_expect(strstr(r.err, "flexcheck report merge: --out out: the directory exists and is "
                            "not empty (--force"),
              "%s", r.err);
    cr_expect_eq(count_lines(r.err), 1, "%s", r.err);
    run_cli(&r, "report merge r1 --out out --force");
    cr_expect_eq(r.status, 0, "--force: %s", r.err);
    snprintf(path, sizeof path, "%s/out/%s", dir, REP_FILE_HTML);
    cr_expect(exists(path), "--force: nothing written");
    /* An empty directory is fine without --force. */
    snprintf(path, sizeof path, "%s/empty", dir);
    cr_assert(mkdir(path, 0755) == 0, "mkdir");
    run_cli(&r, "report merge r1 --out empty");
    cr_expect_eq(r.status, 0, "empty --out: %s", r.err);
}

/* ---- refusals: exit 2, one line naming the directories and the field, nothing written -------- */

static void expect_refused(const char *args, const char *want1, const char *want2)
{
    run_out r;
    run_cli(&r, "report merge %s --out out", args);
    cr_expect_eq(r.status, 2, "%s: status %d\n%s%s", args, r.status, r.out, r.err);
    cr_expect_eq(count_lines(r.err), 1, "%s: one line:\n%s", args, r.err);
    cr_expect(!strncmp(r.err, "flexcheck report merge: ", 24), "%s: %s", args, r.err);
    cr_expect(strstr(r.err, want1), "%s: want '%s' in: %s", args, want1, r.err);
    cr_expect(!want2 || strstr(r.err, want2), "%s: want '%s' in: %s", args, want2, r.err);
    char path[256];
    snprintf(path, sizeof path, "%s/out", dir);
    cr_expect(!exists(path), "%s: --out written anyway", args);
}

Test(refuse, shards_of_different_runs)
{
    write_shard("r1", shard_run(1, 2), 1, 2);
    rep_run run = shard_run(2, 2);
    run.seed = 2;
    write_shard("seed2", run, 2, 2);
    expect_refused("r1 seed2", "r1 and seed2 differ in seed: 1 and 2", NULL);
    run = shard_run(2, 2);
    rep_set_str(run.matrix, sizeof run.matrix, "full");
    write_shard("full", run, 2, 2);
    expect_refused("r1 full", "r1 and full differ in matrix: 'quick' and 'full'", NULL);
    run = shard_run(2, 2);
    rep_set_str(run.filter, sizeof run.filter, "m2");
    write_shard("filter", run, 2, 2);
    expect_refused("r1 filter", "r1 and filter differ in filter: 'm1' and 'm2'", NULL);
    run = shard_run(2, 2);
    rep_set_str(run.commit, sizeof run.commit, "def5678");
    write_shard("commit", run, 2, 2);
    expect_refused("r1 commit", "r1 and commit differ in commit: 'abc1234' and 'def5678'", NULL);
    write_shard("n3", shard_run(2, 3), 2, 3);
    expect_refused("r1 n3", "r1 and n3 differ in shard_n: 2 and 3", NULL);
    run = shard_run(2, 2);
    rep_set_str(run.matrix, sizeof run.matrix, "check");
    write_shard("check", run, 2, 2);
    expect_refused("check r1", "check and r1 differ in matrix: 'check' and 'quick'", NULL);
    /* What judged the rows: shards of kernel 1 and kernel 2, of emu and emu+gpu, or of a
     * --strict run and a lenient one are no one run. */
    run = shard_run(2, 2);
    run.kernel = 1;
    write_shard("k1", run, 2, 2);
    expect_refused("r1 k1", "r1 and k1 differ in kernel: 2 and 1", NULL);
    run = shard_run(2, 2);
    rep_set_str(run.backends, sizeof run.backends, "emu+gpu");
    write_shard("gpu", run, 2, 2);
    expect_refused("r1 gpu", "r1 and gpu differ in backends: 'emu' and 'emu+gpu'", NULL);
    run = shard_run(2, 2);
    run.strict = 1;
    write_shard("strict", run, 2, 2);
    expect_refused("r1 strict", "r1 and strict differ in strict: 0 and 1", NULL);
}

/* --out naming an input (by any path) would replace it: refused, --force or not. */
Test(refuse, out_is_an_input)
{
    write_shard("r1", shard_run(1, 2), 1, 2);
    write_shard("r2", shard_run(2, 2), 2, 2);
    char before[1 << 16], after[1 << 16];
    read_into("r1/" REP_FILE_JSON, before, sizeof before);
    static const char *const outs[] = {"r1", "./r1/", "r2/../r1"};
    for (size_t k = 0; k < sizeof outs / sizeof outs[0]; k++) {
        run_out r;
        run_cli(&r, "report merge r1 r2 --out %s --force", outs[k]);
        cr_expect_eq(r.status, 2, "--out %s: status %d %s", outs[k], r.status, r.err);
        cr_expect_eq(count_lines(r.err), 1, "%s", r.err);
        cr_expect(strstr(r.err, "the merge would replace it"), "%s", r.err);
    }
    read_into("r1/" REP_FILE_JSON, after, sizeof after);
    cr_expect_str_eq(after, before, "the input shard changed");
}

/* A --strict run's outside-contract row fails its report and every merge of it: the summary,
 * the JUnit file and the merge's exit status say so, as the run's own exit status did. */
Test(merge, a_strict_runs_outside_rows_fail_its_merge)
{
    for (int strict = 0; strict < 2; strict++) {
        char n1[16], n2[16], args[64];
        snprintf(n1, sizeof n1, "s%da", strict);
        snprintf(n2, sizeof n2, "s%db", strict);
        for (int i = 1; i <= 2; i++) {
            rep_run run = shard_run(i, 2);
            run.strict = strict;
            rep_row rows[2 * NCASES];
            size_t n = shard_rows(rows, i, 2);
            if (i == 2) { /* as rep_row_set_verdict leaves an outside-contract verdict */
                rep_verdict ov = {.dtype = rows[0].dtype, .unscaled = 1, .outside = 1,
                                  .first_fail = -1, .gate = {[REP_H3] = REP_PASS,
                                                             [REP_H4] = REP_PASS}};
                rep_set_str(ov.outside_why, sizeof ov.outside_why, "outside-contract: test");
                rep_row_set_verdict(&rows[0], &ov);
                cr_assert_eq(rows[0].outcome, REP_ROW_OUTSIDE);
            }
            write_set(i == 1 ? n1 : n2, rows, n, &run);
        }
        run_out r;
        snprintf(args, sizeof args, "%s %s", n1, n2);
        run_cli(&r, "report merge %s --out m%d", args, strict);
        cr_expect_eq(r.status, strict ? 1 : 0, "strict %d: %s%s", strict, r.out, r.err);
        cr_expect(strstr(r.out, strict ? "1 failed, 0 skipped;" : "0 failed, 0 skipped, 1 "
                                                                  "outside the contract;"),
                  "strict %d: %s", strict, r.out);
        char name[64], text[1 << 16];
        snprintf(name, sizeof name, "m%d/%s", strict, REP_FILE_MD);
        read_into(name, text, sizeof text);
        cr_expect(strstr(text, strict ? "**FAIL**" : "**PASS**"), "strict %d summary", strict);
        snprintf(name, sizeof name, "m%d/%s", strict, REP_FILE_JUNIT);
        read_into(name, text, sizeof text);
        cr_expect_eq(strstr(text, "<failure type=\"outside-contract\"") != NULL, strict,
                     "strict %d JUnit:\n%s", strict, text);
    }
}

Test(refuse, a_shard_twice)
{
    write_shard("r1", shard_run(1, 3), 1, 3);
    write_shard("r2", shard_run(2, 3), 2, 3);
    write_shard("r3", shard_run(3, 3), 3, 3);
    write_shard("again", shard_run(2, 3), 2, 3);
    expect_refused("r1 r2 again r3", "r2 and again are both shard 2/3", NULL);
    expect_refused("r1 r2 r3 r2", "r2 and r2 are both shard 2/3", NULL);
}

/* A shard given twice is refused wherever the repeat stands, the last argument included, by
 * either name; so is a check run given twice. (A duplicate check that skipped the last argument
 * passed every other test here.) */
Test(refuse, a_shard_twice_as_the_last_argument)
{
    write_shard("r1", shard_run(1, 3), 1, 3);
    write_shard("r2", shard_run(2, 3), 2, 3);
    write_shard("r3", shard_run(3, 3), 3, 3);
    write_shard("again", shard_run(3, 3), 3, 3);
    expect_refused("r1 r2 r3 r3", "r3 and r3 are both shard 3/3", NULL);
    expect_refused("r3 r1 r2 r3", "r3 and r3 are both shard 3/3", NULL);
    expect_refused("r1 r2 r3 r1", "r1 and r1 are both shard 1/3", NULL);
    expect_refused("r2 r1 r3 r2", "r2 and r2 are both shard 2/3", NULL);
    expect_refused("r1 r2 r3 again", "r3 and again are both shard 3/3", NULL);
    expect_refused("r1 r2 again r3", "again and r3 are both shard 3/3", NULL);
    rep_row rows[2];
    rep_run a = base_run(), b = base_run();
    for (rep_run *run = &a; run; run = run == &a ? &b : NULL) {
        rep_set_str(run->matrix, sizeof run->matrix, "check");
        run->seed = -1;
        run->filter[0] = 0;
    }
    rep_set_str(b.id, sizeof b.id, "fedcba9876543210");
    make_row(&rows[0], "dump-a.h5:layer07", FC_F16, 0);
    make_row(&rows[1], "dump-b.h5:layer08", FC_F16, 1);
    write_set("c1", &rows[0], 1, &a);
    write_set("c2", &rows[1], 1, &b);
    expect_refused("c1 c2 c1", "c1 and c1 hold the same run (id 0123456789abcdef", NULL);
    expect_refused("c2 c1 c2", "c2 and c2 hold the same run (id fedcba9876543210", NULL);
}

/* A report that cannot be written (here: a file size limit, as a full disk would, SIGXFSZ
 * ignored so that write() fails with EFBIG) is one line and exit 2, and leaves no report
 * directory behind, not even the empty one check used to make before any work. (The gate
 * writes through the same rep_write_all, whose failures test_report.c makes at every step; it
 * is not run here, where leaks are checked: the emu keeps a worker per thread, fixtures/module.mk
 * says.) */
Test(refuse, a_report_that_cannot_be_written_leaves_no_directory, .timeout = 300)
{
    run_out r;
    run_cli(&r, "gen --case --lq 8 --d 32 --qb 16 --kb 16 --out a.h5");
    cr_assert_eq(r.status, 0, "%s", r.err);
    static const char *const runs[] = {
        "check --backend emu --report out/sub a.h5",
        "check --report out/sub a.h5", /* the reference alone */
    };
    for (size_t k = 0; k < 2; k++) {
        run_cli(&r, "--version"); /* run_cli's checks on FLEXCHECK_BIN */
        const char *bin = getenv("FLEXCHECK_BIN");
        char abs_bin[1024], cwd[512], cmd[4096];
        if (bin[0] != '/') {
            cr_assert(getcwd(cwd, sizeof cwd), "getcwd failed");
            snprintf(abs_bin, sizeof abs_bin, "%s/%s", cwd, bin);
            bin = abs_bin;
        }
        snprintf(cmd, sizeof cmd, "cd '%s' && (trap '' XFSZ; ulimit -f 4; OPENBLAS_NUM_THREADS=1 "
                 "exec '%s' %s) >.stdout 2>.stderr", dir, bin, runs[k]);
        int st = system(cmd);
        cr_assert(st != -1 && WIFEXITED(st), "%s: did not exit", runs[k]);
        read_into(".stderr", r.err, sizeof r.err);
        cr_expect_eq(WEXITSTATUS(st), 2, "%s: status %d: %s", runs[k], WEXITSTATUS(st), r.err);
        cr_expect(strstr(r.err, "File too large"), "%s: %s", runs[k], r.err);
        char path[256];
        snprintf(path, sizeof path, "%s/out", dir);
        cr_expect(!exists(path), "%s: left %s", runs[k], path);
        snprintf(cmd, sizeof cmd, "rm -rf '%s/out'", dir);
        (void)!system(cmd);
    }
}

Test(refuse, missing_shards)
{
    write_shard("r1", shard_run(1, 4), 1, 4);
    write_shard("r3", shard_run(3, 4), 3, 4);
    expect_refused("r3 r1", "missing shards 2, 4 of 4", "given: r1 (1/4), r3 (3/4)");
    expect_refused("r3", "missing shards 1, 2, 4 of 4", "given: r3 (3/4)");
    write_shard("big", shard_run(7, 20), 7, 20);
    expect_refused("big", "missing shards 1, 2, 3, 4, 5, 6, 8, 9, ... of 20", NULL);
}

Test(refuse, the_same_check_run_twice)
{
    rep_row row;
    make_row(&row, "dump.h5:layer07", FC_F16, 0);
    rep_run run = base_run();
    rep_set_str(run.matrix, sizeof run.matrix, "check");
    run.seed = -1;
    run.filter[0] = 0;
    write_set("c1", &row, 1, &run);
    write_set("copy", &row, 1, &run);
    expect_refused("c1 copy", "c1 and copy hold the same run (id 0123456789abcdef", NULL);
}

Test(refuse, bad_arguments)
{
    run_out r;
    run_cli(&r, "report merge --out out");
    cr_expect(r.status == 2 && strstr(r.err, "no report directories given"), "%s", r.err);
    run_cli(&r, "report merge a b");
    cr_expect(r.status == 2 && strstr(r.err, "--out DIR is required"), "%s", r.err);
    run_cli(&r, "report nope");
    cr_expect(r.status == 2 && strstr(r.err, "flexcheck report: unknown subcommand 'nope'"),
              "%s", r.err);
    run_cli(&r, "report merge missing --out out");
    cr_expect(r.status == 2 && strstr(r.err, "missing/rows.json: cannot open"), "%s", r.err);
}

/* ---- rows no run can write ------------------------------------------------------------------- */

/* The rows the table below edits, each as a writer leaves it. */
static void base_row(rep_row *r, const char *base)
{
    make_row(r, "c1", FC_F16, 1); /* a pass: B 1, Hq 4, Hkv 2, Lq 65, Dv 32, kernel 2 */
    if (!strcmp(base, "pass-b2")) { /* a dense batch of two */
        r->b = 2;
    } else if (!strcmp(base, "fail-h1") || !strcmp(base, "fail-check")) {
        /* H1 failed (ratio 2); a failed exactness check names itself (lse_merge.c does so
         * after any gates) */
        r->outcome = REP_ROW_FAIL, r->h1_ratio = 2;
        memcpy(r->gates, "PPPFPP-", REP_NGATES + 1);
        rep_set_str(r->first_fail, sizeof r->first_fail, base[5] == 'h' ? "H1" : "lse-merge");
        rep_set_str(r->reason, sizeof r->reason, "planted");
    } else if (!strcmp(base, "fail-h3")) { /* NaNs in the output */
        r->outcome = REP_ROW_FAIL, r->nan_count = 3;
        memcpy(r->gates, "PFPPPP-", REP_NGATES + 1);
        rep_set_str(r->first_fail, sizeof r->first_fail, "H3");
        rep_set_str(r->reason, sizeof r->reason, "planted");
    } else if (!strcmp(base, "fail-p-round")) { /* an exactness check failed, every gate P */
        r->outcome = REP_ROW_FAIL;
        rep_set_str(r->first_fail, sizeof r->first_fail, "p-round");
        rep_set_str(r->reason, sizeof r->reason, "p-round: planted");
    } else if (!strcmp(base, "outside")) { /* as rep_row_set_verdict leaves one */
        rep_verdict ov = {.dtype = FC_F16, .unscaled = 1, .outside = 1, .first_fail = -1,
                          .gate = {[REP_H3] = REP_PASS, [REP_H4] = REP_PASS}};
        rep_set_str(ov.outside_why, sizeof ov.outside_why, "outside-contract: planted");
        rep_row_set_verdict(r, &ov);
    } else if (!strcmp(base, "skip")) {
        rep_row_set_skip(r, "planted");
    } else if (!strcmp(base, "file-error")) { /* check's row for a file it could not read */
        memset(r, 0, sizeof *r);
        rep_set_str(r->case_id, sizeof r->case_id, "broken.h5");
        rep_set_str(r->group, sizeof r->group, "file");
        rep_set_str(r->backend, sizeof r->backend, "-");
        rep_row_set_error(r, "broken.h5: not an HDF5 file");
    } else if (!strcmp(base, "gate-skip")) { /* the gate's row for a case it could not set up */
        memset(r, 0, sizeof *r);
        rep_set_str(r->case_id, sizeof r->case_id, "m2-paged");
        rep_set_str(r->group, sizeof r->group, "M2");
        rep_set_str(r->backend, sizeof r->backend, "emu");
        rep_set_str(r->builder, sizeof r->builder, "direct");
        r->kernel = 2, r->lq = 102, r->lk = 777;
        rep_row_set_skip(r, "paged K/V: no paged path in kernel 1");
    } else {
        cr_assert(!strcmp(base, "pass"), "no base row '%s'", base);
    }
}

/* Sets column `name` of r to `value`, read as its kind reads (a number, or the text). */
static void set_col(rep_row *r, const char *name, const char *value)
{
    for (size_t c = 0; c < rep_ncols; c++) {
        const rep_col *col = &rep_cols[c];
        if (strcmp(col->name, name))
            continue;
        char *p = (char *)r + col->off;
        if (col->kind == REP_COL_I32) {
            int32_t x = (int32_t)strtol(value, NULL, 10);
            memcpy(p, &x, sizeof x);
        } else if (col->kind == REP_COL_U64) {
            uint64_t x = strtoull(value, NULL, 10);
            memcpy(p, &x, sizeof x);
        } else if (col->kind == REP_COL_F64) {
            double x = strtod(value, NULL);
            memcpy(p, &x, sizeof x);
        } else {
            cr_assert(col->kind == REP_COL_STR || col->kind == REP_COL_GATE, "%s", name);
            rep_set_str(p, col->size, value);
        }
        return;
    }
    cr_assert_fail("no column %s", name);
}

/* One field of one row changed to something no writer produces: `report merge` refuses it
 * with one line naming the file, the row and the field, exit 2, nothing written. want NULL:
 * a value a run does write, merged. Field by field: the shape (attn_problem_check's limits),
 * mask and score terms (mask_params_check, terms_check), block sizes (bmask_block_size_ok),
 * kernel (the CLI's 1..2, or 0), then the verdict against its gates and metrics. */
Test(refuse, rows_no_run_can_write_naming_file_row_and_field)
{
    static const struct {
        const char *base, *field, *value, *want;
    } cases[] = {
        {"pass", "b", "-1", "rows[1].b: -1 is out of range [1, 2147483647]"},
        {"pass", "b", "0", "rows[1].b: 0 is out of range [1, 2147483647]"},
        {"pass", "hq", "0", "rows[1].hq: 0 is out of range [1, 4096]"},
        {"pass", "hq", "4097", "rows[1].hq: 4097 is out of range [1, 4096]"},
        {"pass", "hkv", "3", "rows[1].hkv: Hq 4 is not a multiple of Hkv 3"},
        {"pass", "hkv", "8", "rows[1].hkv: 8 is out of range [1, 4]"},
        {"pass", "lq", "-5", "rows[1].lq: -5 is out of range [0, 268435456]"},
        {"pass", "lk", "268435457", "rows[1].lk: 268435457 is out of range [0, 268435456]"},
        {"pass", "d", "-3", "rows[1].d: -3 is out of range [1, 1024]"},
        {"pass", "dv", "0", "rows[1].dv: 0 is out of range [1, 1024]"},
        {"pass", "window", "-7", "rows[1].window: -7 is out of range [0, 2147483647]"},
        {"pass", "chunk", "-1", "rows[1].chunk: -1 is out of range [0, 2147483647]"},
        {"pass", "causal", "7", "rows[1].causal: 7 is out of range [0, 1]"},
        {"pass", "softcap", "-50", "rows[1].softcap: -50: must be finite and in [0, 1e+06]"},
        {"pass", "softcap", "inf", "rows[1].softcap: inf: must be finite"},
        {"pass", "sinks", "2", "rows[1].sinks: 2 is out of range [0, 1]"},
        {"pass", "q_block", "7", "rows[1].q_block: 7: must be a power of two in [16, 256]"},
        {"pass", "kv_block", "512", "rows[1].kv_block: 512: must be a power of two"},
        {"skip", "q_block", "0", "rows[1].q_block: 0: must be a power of two"},
        {"pass", "kernel", "99", "rows[1].kernel: 99 is out of range [0, " KERNELS "]"},
        {"pass", "kernel", "1", "rows[1].kernel: 1, but the run's kernel is 2"},
        {"pass", "case_id", "", "rows[1].case_id: empty"},
        /* sequences per batch entry: 1 dense, R packed with B = 1 (seq_init_packed), 0 for a
         * row with no case */
        {"pass", "nseq", "0", "rows[1].nseq: 0 is out of range [1, 268435456]"},
        {"pass", "nseq", "268435457", "rows[1].nseq: 268435457 is out of range [1, 268435456]"},
        {"pass-b2", "nseq", "3", "rows[1].nseq: 3 sequences packed, yet B is 2"},
        {"file-error", "nseq", "1", "rows[1].nseq: 1 is out of range [0, 0]"},
        {"pass", "max_err", "-1", "rows[1].max_err: -1: must be >= 0"},
        {"pass", "h1_ratio", "-1", "rows[1].h1_ratio: -1: must be >= 0"},
        {"pass", "nmse", "-inf", "rows[1].nmse: -inf: must be >= 0"},
        {"pass", "lse_err", "-1e-9", "rows[1].lse_err: -1e-09: must be >= 0"},
        {"pass", "lse_err", "nan", "rows[1].lse_err: nan: must be >= 0"},
        {"pass", "h1_ratio", "1e6", "rows[1].h1_ratio: 1e+06, yet H1 passed"},
        {"pass", "h1_ratio", "1.0000000000000002", "rows[1].h1_ratio: 1, yet H1 passed"},
        {"pass", "h1_ratio", "nan", "rows[1].h1_ratio: nan where H1 ran"},
        {"pass", "s1", "nan", "rows[1].s1: nan where H1 ran"},
        {"pass", "nan_count", "5", "rows[1].nan_count: 5, yet H3 passed"},
        {"pass", "empty_rows", "261", "rows[1].empty_rows: 261: more than the 260 the case"},
        {"pass", "inf_count", "8581", "rows[1].inf_count: 8581: more than the 8580 the case"},
        {"pass", "degenerate", "2", "rows[1].degenerate: 2: 0, or 1 where H1 ran"},
        {"pass", "gates", "PPPPPPX", "rows[1].gates: 'PPPPPPX': must be 7 of P, F and -"},
        {"pass", "gates", "PPPPPP", "rows[1].gates: 'PPPPPP': must be 7 of P, F and -"},
        {"pass", "gates", "P-PPPP-", "rows[1].gates: 'P-PPPP-': H3 not run in a pass row"},
        {"pass", "gates", "PPP-PP-", "rows[1].gates: 'PPP-PP-': H2 ran without H1"},
        {"pass", "gates", "PPP---P", "rows[1].gates: 'PPP---P': a pass with H1 not run"},
        {"fail-h1", "h1_ratio", "0.25", "rows[1].h1_ratio: 0.25, yet H1 failed"},
        {"fail-h1", "first_fail", "H2", "rows[1].first_fail: H2, yet gates 'PPPFPP-' show it "
                                        "did not fail"},
        {"fail-h1", "gates", "PFPFPP-", "rows[1].first_fail: H1, yet gates 'PFPFPP-' show an "
                                        "earlier gate failed"},
        {"outside", "gates", "-PPP---", "rows[1].gates: '-PPP---': an outside-contract row "
                                        "with H1 run"},
        {"outside", "max_err", "0.5", "rows[1].max_err: 0.5 where H1 did not run"},
        {"outside", "degenerate", "1", "rows[1].degenerate: 1: 0, or 1 where H1 ran"},
        {"skip", "max_err", "0.5", "rows[1].max_err: 0.5, yet the row is skip: nothing was "
                                   "measured"},
        {"skip", "lse_err", "0", "rows[1].lse_err: 0, yet the row is skip"},
        {"skip", "nan_count", "1", "rows[1].nan_count: 1, yet the row is skip"},
        /* every count of an unjudged row, on a skip and on an error row (check_unjudged's
         * list, one entry each: a count left out of it merged a row claiming 3 infinities) */
        {"skip", "inf_count", "3", "rows[1].inf_count: 3, yet the row is skip: nothing was "
                                   "counted (0)"},
        {"file-error", "inf_count", "3", "rows[1].inf_count: 3, yet the row is error"},
        {"gate-skip", "inf_count", "1", "rows[1].inf_count: 1, yet the row is skip"},
        {"file-error", "nan_count", "2", "rows[1].nan_count: 2, yet the row is error"},
        {"skip", "empty_rows", "4", "rows[1].empty_rows: 4, yet the row is skip"},
        {"file-error", "empty_rows", "1", "rows[1].empty_rows: 1, yet the row is error"},
        {"skip", "degenerate", "1", "rows[1].degenerate: 1, yet the row is skip"},
        {"file-error", "degenerate", "1", "rows[1].degenerate: 1, yet the row is error"},
        {"file-error", "gates", "P------", "rows[1].gates: 'P------', yet the row is error"},
        {"file-error", "hq", "4", "rows[1].b: 0 is out of range [1, 2147483647]"},
        {"file-error", "softcap", "-1", "rows[1].softcap: -1: must be finite"},
        /* What runs do write: merged. */
        {"pass", "lq", "0", NULL}, /* `gen --lq 0` makes such a case; check judges it */
        {"pass", "lk", "0", NULL},
        {"pass", "h1_ratio", "1", NULL},
        {"pass", "h1_ratio", "0", NULL},
        {"pass", "degenerate", "1", NULL},
        {"pass", "inf_count", "8580", NULL},   /* matched infinities pass H3 */
        {"pass", "gates", "-PPP---", NULL},    /* H6, H2 (a design), H5, H7 not run */
        {"pass", "softcap", "50", NULL},
        {"pass", "kernel", "0", NULL},         /* a tested output: no kernel of ours ran */
        {"fail-h1", "nmse", "inf", NULL},      /* a zero oracle with a nonzero output */
        {"fail-h3", "inf_count", "2", NULL},
        {"fail-h3", "gates", "PFPPPF-", NULL},  /* H5 failed too, after H3 */
        {"fail-check", "reason", "lse-merge: even + odd kv tiles: H1", NULL},
        {"fail-p-round", "h1_ratio", "0.5", NULL},
        {"fail-p-round", "h1_ratio", "3", "rows[1].h1_ratio: 3, yet H1 passed"},
        {"fail-h3", "first_fail", "H1", "rows[1].first_fail: H1, yet gates 'PFPPPP-' show it "
                                        "did not fail"},
        {"outside", "lse_err", "0.25", NULL},
        {"skip", "lq", "65", NULL},
        {"file-error", "case_id", "broken.h5", NULL},
        {"gate-skip", "lq", "102", NULL},
        {"pass", "nseq", "5", NULL},           /* packed: B = 1 */
        {"pass", "nseq", "268435456", NULL},
        {"pass-b2", "nseq", "1", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rep_row rows[2];
        make_row(&rows[0], "c0", FC_F32, 0);
        base_row(&rows[1], cases[i].base);
        set_col(&rows[1], cases[i].field, cases[i].value);
        rep_run run = base_run();
        write_set("bad", rows, 2, &run);
        char what[96], out[64];
        snprintf(what, sizeof what, "case %zu (%s, %s = '%s')", i, cases[i].base,
                 cases[i].field, cases[i].value);
        snprintf(out, sizeof out, "out%zu", i);
        run_out r;
        run_cli(&r, "report merge bad --out %s", out);
        char path[256];
        snprintf(path, sizeof path, "%s/%s", dir, out);
        if (!cases[i].want) { /* merged: 0, or 1 for a failing row */
            cr_expect(r.status == (rep_row_failed(&rows[1]) ? 1 : 0) && exists(path),
                      "%s: status %d: %s", what, r.status, r.err);
            continue;
        }
        cr_expect_eq(r.status, 2, "%s: status %d\n%s%s", what, r.status, r.out, r.err);
        cr_expect(count_lines(r.err) == 1 &&
                      strstr(r.err, "flexcheck report merge: bad/rows.json: field rows[1].") &&
                      strstr(r.err, cases[i].want),
                  "%s: want one line with '%s', got: %s", what, cases[i].want, r.err);
        cr_expect(!exists(path), "%s: --out written anyway", what);
    }
}

/* ---- hostile rows.json ---------------------------------------------------------------------- */

/* A valid report's rows.json text (two rows, a run identity), for the edits below. */
static char *valid_json(size_t *len)
{
    rep_row rows[2];
    make_row(&rows[0], "c0", FC_F32, 0);
    make_row(&rows[1], "c1", FC_F16, 1);
    rep_run run = base_run();
    write_set("good", rows, 2, &run);
    char path[256];
    snprintf(path, sizeof path, "%s/good/%s", dir, REP_FILE_JSON);
    return slurp(path, len);
}

/* text with the first `find` after `after` (NULL: from the start) replaced by `repl`. */
static char *edit(const char *text, const char *after, const char *find, const char *repl)
{
    const char *from = after ? strstr(text, after) : text;
    cr_assert(from, "edit: '%s' not in the file", after);
    const char *at = strstr(from, find);
    cr_assert(at, "edit: '%s' not in the file", find);
    size_t head = (size_t)(at - text), fl = strlen(find), rl = strlen(repl);
    char *out = malloc(strlen(text) - fl + rl + 1);
    cr_assert(out, "out of memory");
    memcpy(out, text, head);
    memcpy(out + head, repl, rl);
    strcpy(out + head + rl, at + fl);
    return out;
}

Test(hostile, bad_fields_are_refused_naming_file_and_field)
{
    size_t len;
    char *good = valid_json(&len);
    char longid[300] = "\"case_id\": \"";
    memset(longid + 12, 'x', 200);
    strcpy(longid + 212, "\"");
    static const char *const second = "\"case_id\": \"c1\"";
    const struct {
        const char *after, *find, *repl, *want;
    } edits[] = {
        {second, "\"lk\": 128", "\"lk\": \"128\"", "field rows[1].lk: expected an integer"},
        {second, "\"lk\": 128", "\"lk\": 4294967296",
         "field rows[1].lk: 4294967296 is out of range [-2147483648, 2147483647]"},
        {second, "\"lk\": 128", "\"lk\": 1.5", "field rows[1].lk: expected an integer"},
        {second, "\"dtype\": \"float16\", ", "", "field rows[1].dtype: missing"},
        /* a report written before rows recorded nseq: refused, saying why (its packed rows
         * cannot be told apart, so no value is guessed) */
        {second, "\"nseq\": 1, ", "", "field rows[1].nseq: missing: the file predates the "
                                      "column"},
        {second, "\"dtype\": \"float16\"", "\"dtype\": \"float8\"",
         "field rows[1].dtype: expected \"float32\", \"float16\" or \"bfloat16\""},
        {second, "\"outcome\": \"pass\"", "\"outcome\": \"bogus\"",
         "field rows[1].outcome: expected \"pass\""},
        {second, "\"max_err\": ", "\"max_err\": \"big\", \"x\": ",
         "field rows[1].max_err: expected a number, null, \"inf\" or \"-inf\""},
        {second, "\"nan_count\": 0", "\"nan_count\": -1",
         "field rows[1].nan_count: -1 is out of range"},
        {NULL, "\"case_id\": \"c0\"", longid,
         "field rows[0].case_id: 200 bytes, longer than the field's 127"},
        {second, "\"first_fail\": null", "\"first_fail\": 3",
         "field rows[1].first_fail: expected a string or null"},
        {second, "\"gates\": \"PPPPPP-\"", "\"gates\": \"PPFPPP-\"",
         "field rows[1]: outcome pass, yet gates 'PPFPPP-' and first_fail '' say it failed"},
        {second, "\"first_fail\": null", "\"first_fail\": \"H1\"",
         "field rows[1]: outcome pass, yet gates"},
        {second, "\"outcome\": \"pass\"", "\"outcome\": \"fail\"",
         "field rows[1]: outcome fail with no first_fail"},
        {NULL, "\"pass\": 2", "\"pass\": 3", "field pass: says 3, the rows add up to 2"},
        {NULL, "\"rows_total\": 2, ", "", "field rows_total: missing"},
        {NULL, "\"run\": {", "\"run\": null, \"x\": {", "field run: null"},
        {NULL, "\"shard_i\": 1", "\"shard_i\": 5", "field run.shard_i: shard 5/1"},
        {NULL, "\"commit\": \"abc1234\", ", "", "field run.commit: missing"},
        {NULL, "\"strict\": 0}", "\"strict\": 0, \"merged\": []}",
         "field run.merged: expected a non-empty array"},
        {NULL, "\"checks\": [{", "\"checks\": [7, {", "field checks[0]: expected an object"},
        {NULL, "\"rows\": [", "\"rows\": 5, \"x\": [", "field rows: expected an array"},
        {NULL, "{\"run\"", "[{\"run\"", "does not parse"},
        {second, "\"max_err\": ", "\"max_err\": NaN, \"y\": ", "does not parse"},
        {second, "\"lk\": 128", "\"lk\": 128, \"lk\": 128", "does not parse"},
        {second, "\"reason\": \"pass\"", "\"reason\": \"a\\u0000b\"", "does not parse"},
        {second, "\"reason\": \"pass\"", "\"reason\": \"\xff\xfe\"", "does not parse"},
    };
    char path[256];
    snprintf(path, sizeof path, "%s/bad", dir);
    cr_assert(mkdir(path, 0755) == 0, "mkdir");
    snprintf(path, sizeof path, "%s/bad/%s", dir, REP_FILE_JSON);
    for (size_t i = 0; i < sizeof edits / sizeof edits[0]; i++) {
        char *text = edit(good, edits[i].after, edits[i].find, edits[i].repl);
        spit(path, text, strlen(text));
        free(text);
        run_out r;
        run_cli(&r, "report merge bad --out out");
        cr_expect_eq(r.status, 2, "edit %zu: status %d: %s", i, r.status, r.err);
        cr_expect_eq(count_lines(r.err), 1, "edit %zu: one line:\n%s", i, r.err);
        cr_expect(strstr(r.err, "bad/rows.json: ") && strstr(r.err, edits[i].want),
                  "edit %zu: want '%s' in: %s", i, edits[i].want, r.err);
    }
    /* Cut short, and empty. */
    spit(path, good, len / 2);
    run_out r;
    run_cli(&r, "report merge bad --out out");
    cr_expect(r.status == 2 && strstr(r.err, "bad/rows.json: line ") &&
                  strstr(r.err, "does not parse"),
              "truncated: %s", r.err);
    spit(path, "", 0);
    run_cli(&r, "report merge bad --out out");
    cr_expect(r.status == 2 && strstr(r.err, "does not parse"), "empty: %s", r.err);
    snprintf(path, sizeof path, "%s/out", dir);
    cr_expect(!exists(path), "--out written anyway");
    free(good);
}

/* In-process: every prefix of a valid file, and seeded random byte changes, are read without
 * a crash (and, under ASan/UBSan, without a memory error); a prefix never reads as valid. */
Test(hostile, truncated_and_garbled_files_never_crash_the_reader)
{
    size_t len;
    char *good = valid_json(&len);
    char path[256];
    snprintf(path, sizeof path, "%s/cut.json", dir);
    for (size_t cut = 0; cut + 1 < len; cut += cut < 64 ? 1 : 13) { /* the trailing \n is free */
        spit(path, good, cut);
        rep_report rep;
        fc_err err = {{0}};
        cr_expect_eq(rep_read_json(path, &rep, &err), FC_EINVAL, "cut at %zu read as valid", cut);
        rep_report_free(&rep);
    }
    uint64_t s = 0x9E3779B97F4A7C15u;
    char *text = malloc(len + 1);
    cr_assert(text, "out of memory");
    size_t valid = 0;
    for (int trial = 0; trial < 400; trial++) {
        memcpy(text, good, len + 1);
        for (int k = 0; k < 1 + trial % 4; k++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17; /* xorshift64 */
            text[s % len] = (char)(s >> 32);
        }
        spit(path, text, len);
        rep_report rep;
        fc_err err = {{0}};
        fc_status st = rep_read_json(path, &rep, &err);
        cr_expect(st == FC_OK || st == FC_EINVAL, "trial %d: status %d", trial, (int)st);
        cr_expect(st == FC_OK || strstr(err.msg, "cut.json: "), "trial %d: %s", trial, err.msg);
        valid += st == FC_OK;
        rep_report_free(&rep);
    }
    cr_expect(valid < 400, "no garbled file was refused");
    free(text);
    free(good);
}

/* A report directory's files are replaced only when flexcheck wrote them: an input named
 * rows.csv, someone's own summary.md or a directory under one of the names is refused (and
 * left as it was); a previous report is replaced, as every rerun into the same place does. */
Test(refuse, a_report_never_replaces_a_file_it_did_not_write)
{
    rep_row row;
    make_row(&row, "c0", FC_F32, 0);
    rep_run run = base_run();
    rep_set set = {&row, 1, checks, 2, &run};
    char path[256], sub[512];
    fc_err err = {{0}};
    snprintf(path, sizeof path, "%s/again", dir);
    cr_assert_eq(rep_write_all(path, &set, &err), FC_OK, "%s", err.msg);
    cr_expect_eq(rep_dir_check(path, &err), FC_OK, "a previous report: %s", err.msg);
    cr_expect_eq(rep_write_all(path, &set, &err), FC_OK, "a previous report: %s", err.msg);
    static const char *const names[] = {REP_FILE_MD, REP_FILE_JSON, REP_FILE_CSV,
                                        REP_FILE_JUNIT, REP_FILE_HTML};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        for (int as_dir = 0; as_dir < 2; as_dir++) {
            snprintf(path, sizeof path, "%s/foreign%zu%d", dir, k, as_dir);
            cr_assert(mkdir(path, 0755) == 0, "mkdir");
            snprintf(sub, sizeof sub, "%s/%s", path, names[k]);
            if (as_dir)
                cr_assert(mkdir(sub, 0755) == 0, "mkdir");
            else
                spit(sub, "my notes\n", 9);
            cr_expect_eq(rep_dir_check(path, &err), FC_EINVAL, "%s: checked as writable", sub);
            cr_expect_eq(rep_write_all(path, &set, &err), FC_EINVAL, "%s: replaced", sub);
            cr_expect(strstr(err.msg, names[k]) && strstr(err.msg, "not replaced"), "%s",
                      err.msg);
            if (!as_dir) {
                size_t len;
                char *text = slurp(sub, &len);
                cr_expect(len == 9 && !memcmp(text, "my notes\n", 9), "%s changed", sub);
                free(text);
            }
        }
    }
}
