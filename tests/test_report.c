/*
 * test_report.c - the report writers (reports/rep.h) on a handful of synthetic rows written
 * into a temporary directory: the JSON parses (a small validating parser below) and carries
 * exact escaped values, the CSV has the header and one record per row, JUnit counts failures
 * per case id, the HTML holds its four SVG charts and one script, the Markdown summary shows
 * the H1 distribution and dtype ratios worked out by hand here, and every format names the run
 * (rep_run: the summary's header block, rows.json's "run", JUnit properties, the HTML header).
 * Reading rows.json back and merging are tests/test_merge.c's.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "reports/rep.h"
#include "reports/rep_internal.h" /* rep_lk_bucket */

/* A name with every character some format must escape. */
#define NASTY_ID "m4-empty<&\"'>,|x"

typedef struct row_spec {
    const char *id, *group, *backend;
    fc_dtype dt;
    int32_t lk, window;
    double max_err, h1;
    rep_outcome outcome;
    int gate;
    const char *reason;
} row_spec;

/* float16/emu H1 ratios {0.1, 0.2, 0.3, 0.4, 1.5}: median 0.3, p95 = 5th of 5 (ceil(4.75)) =
 * 1.5, max 1.5. float32/emu {0.2, 0.4} (the error row is not judged): median (0.2+0.4)/2 =
 * 0.3, p95 = 2nd of 2 (ceil(1.9)) = 0.4.
 * Pairs with float32 (emu, same id and builder): m1-causal-w16 1e-3 / 1e-6 = 1000,
 * m1-dense 4e-3 / 2e-6 = 2000: median 1500, max 2000. bf16: m1-causal-w16 8e-3 / 1e-6 = 8000. */
static const row_spec specs[] = {
    {.id = "m1-causal-w16", .group = "M1", .backend = "emu", .dt = FC_F32, .lk = 128,
     .window = 16, .max_err = 1e-6, .h1 = 0.2, .gate = -1, .reason = "pass"},
    {.id = "m1-causal-w16", .group = "M1", .backend = "emu", .dt = FC_F16, .lk = 128,
     .window = 16, .max_err = 1e-3, .h1 = 0.1, .gate = -1, .reason = "pass"},
    {.id = "m1-causal-w16", .group = "M1", .backend = "emu", .dt = FC_BF16, .lk = 128,
     .window = 16, .max_err = 8e-3, .h1 = 0.5, .gate = -1, .reason = "pass"},
    {.id = "m1-dense", .group = "M1", .backend = "emu", .dt = FC_F32, .lk = 256,
     .max_err = 2e-6, .h1 = 0.4, .gate = -1, .reason = "pass"},
    {.id = "m1-dense", .group = "M1", .backend = "emu", .dt = FC_F16, .lk = 256,
     .max_err = 4e-3, .h1 = 0.2, .gate = -1, .reason = "pass"},
    {.id = "m1-w129", .group = "M1", .backend = "emu", .dt = FC_F16, .lk = 256, .window = 129,
     .max_err = 5e-3, .h1 = 1.5, .outcome = REP_ROW_FAIL, .gate = REP_H1,
     .reason = "H1 max ratio: max|err| 5e-3 at row 3 col 1 > 2 * e_lp_max"},
    {.id = "m1-w129", .group = "M1", .backend = "emu", .dt = FC_F16, .lk = 256, .window = 129,
     .max_err = 2e-3, .h1 = 0.4, .gate = -1, .reason = "pass"},
    {.id = NASTY_ID, .group = "M4", .backend = "emu", .dt = FC_F16, .lk = 64,
     .max_err = 1e-4, .h1 = 0.3, .outcome = REP_ROW_FAIL, .gate = REP_H4,
     .reason = "H4 empty rows: row 2 \"quoted\", comma\nsecond line <b>&"},
    {.id = "m2-broken", .group = "M2", .backend = "emu", .dt = FC_F32, .lk = 512,
     .outcome = REP_ROW_ERROR, .gate = -1, .reason = "evaluate: O_gold is NaN at row 0 col 0"},
    {.id = "m2-paged", .group = "M2", .backend = "emu", .dt = FC_F16, .lk = 512,
     .outcome = REP_ROW_SKIP, .gate = -1, .reason = "paged K/V: no paged path in kernel 1"},
};
#define NROWS (sizeof specs / sizeof specs[0])

static void make_rows(rep_row *rows)
{
    memset(rows, 0, NROWS * sizeof *rows);
    for (size_t i = 0; i < NROWS; i++) {
        const row_spec *s = &specs[i];
        rep_row *r = &rows[i];
        rep_set_str(r->case_id, sizeof r->case_id, s->id);
        rep_set_str(r->group, sizeof r->group, s->group);
        rep_set_str(r->backend, sizeof r->backend, s->backend);
        rep_set_str(r->builder, sizeof r->builder, "direct");
        r->b = 1, r->nseq = 1, r->hq = 6, r->hkv = 2, r->lq = r->lk = s->lk, r->d = r->dv = 64;
        r->mask.causal = 1, r->mask.sliding_window = s->window, r->q_block = r->kv_block = 128;
        r->dtype = s->dt;
        if (s->outcome == REP_ROW_ERROR || s->outcome == REP_ROW_SKIP) {
            (s->outcome == REP_ROW_ERROR ? rep_row_set_error : rep_row_set_skip)(r, s->reason);
            continue;
        }
        r->max_err = s->max_err;
        r->h1_ratio = s->h1;
        r->mean_err = s->max_err / 4;
        r->rmse = s->max_err / 3;
        r->outcome = s->outcome;
        rep_set_str(r->first_fail, sizeof r->first_fail,
                    s->gate >= 0 ? rep_gate_name((rep_gate)s->gate) : "");
        memcpy(r->gates, s->outcome == REP_ROW_FAIL ? "PPFPPP-" : "PPPPPP-", REP_NGATES + 1);
        rep_set_str(r->reason, sizeof r->reason, s->reason);
    }
}

/* The exactness checks a test report lists after the gates (reports take them from the
 * runner; these two stand for the gate's table). */
static const rep_check test_checks[] = {{"window-edge", "window edges differ"},
                                        {"p-round", "P rounded to the input type"}};

/* The run identity the test reports carry: a shard of a filtered quick gate, the filter with
 * a character the command line must quote. */
static const rep_run test_run = {
    .time = "2026-11-29T10:04:05Z", .id = "00000000000000aa", .version = "0.1.0",
    .commit = "abc1234", .command = "flexcheck gate --quick --filter 'm1 x' --shard 2/4",
    .matrix = "quick", .seed = 7, .shard_i = 2, .shard_n = 4, .filter = "m1 x",
    .backends = "emu", .kernel = 2};

static rep_set set_of(const rep_row *rows, size_t n)
{
    rep_set set = {rows, n, test_checks, sizeof test_checks / sizeof test_checks[0], &test_run};
    return set;
}

/* ---- a small temporary directory ------------------------------------------------------- */

static char tmpdir[64];

static void make_tmpdir(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/flexcheck-rep-XXXXXX");
    cr_assert(mkdtemp(tmpdir), "mkdtemp failed");
}

/* Depth-first removal of what the tests created (files and the nested report dirs). */
static void remove_tree(const char *path)
{
    DIR *d = opendir(path);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
                continue;
            char sub[512];
            snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
            remove_tree(sub);
        }
        closedir(d);
        rmdir(path);
    } else {
        unlink(path);
    }
}

static char *slurp(const char *dir, const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    cr_assert(f, "%s: cannot open", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    cr_assert(buf, "%s: out of memory", path);
    cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n, "%s: short read", path);
    buf[n] = 0;
    fclose(f);
    return buf;
}

static size_t count_of(const char *hay, const char *needle)
{
    size_t c = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
        c++;
    return c;
}

static void write_report(const char *dir)
{
    rep_row rows[NROWS];
    make_rows(rows);
    fc_err err = {{0}};
    cr_assert_eq(rep_write_all(dir, &(rep_set){rows, NROWS, test_checks, 2, &test_run}, &err), FC_OK,
                 "rep_write_all: %s", err.msg);
}

/* ---- a validating JSON parser (RFC 8259 grammar, no values kept) ------------------------- */

static const char *json_value(const char *p);

static const char *json_ws(const char *p)
{
    while (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')
        p++;
    return p;
}

static const char *json_string(const char *p)
{
    if (*p++ != '"')
        return NULL;
    while (*p != '"') {
        if ((unsigned char)*p < 0x20)
            return NULL;
        if (*p == '\\') {
            p++;
            if (*p == 'u') {
                for (int i = 1; i <= 4; i++)
                    if (!strchr("0123456789abcdefABCDEF", p[i]) || !p[i])
                        return NULL;
                p += 4;
            } else if (!*p || !strchr("\"\\/bfnrt", *p)) {
                return NULL;
            }
        }
        p++;
    }
    return p + 1;
}

static const char *json_number(const char *p)
{
    const char *s = p;
    if (*p == '-')
        p++;
    if (*p == '0')
        p++;
    else if (*p >= '1' && *p <= '9')
        while (*p >= '0' && *p <= '9')
            p++;
    else
        return NULL;
    if (*p == '.') {
        if (!(*++p >= '0' && *p <= '9'))
            return NULL;
        while (*p >= '0' && *p <= '9')
            p++;
    }
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-')
            p++;
        if (!(*p >= '0' && *p <= '9'))
            return NULL;
        while (*p >= '0' && *p <= '9')
            p++;
    }
    return p > s ? p : NULL;
}

static const char *json_seq(const char *p, char close, int object)
{
    p = json_ws(p + 1);
    if (*p == close)
        return p + 1;
    for (;;) {
        if (object) {
            if (!(p = json_string(json_ws(p))))
                return NULL;
            p = json_ws(p);
            if (*p++ != ':')
                return NULL;
        }
        if (!(p = json_value(p)))
            return NULL;
        p = json_ws(p);
        if (*p == close)
            return p + 1;
        if (*p++ != ',')
            return NULL;
    }
}

static const char *json_value(const char *p)
{
    p = json_ws(p);
    switch (*p) {
    case '{': return json_seq(p, '}', 1);
    case '[': return json_seq(p, ']', 0);
    case '"': return json_string(p);
    case 't': return strncmp(p, "true", 4) ? NULL : p + 4;
    case 'f': return strncmp(p, "false", 5) ? NULL : p + 5;
    case 'n': return strncmp(p, "null", 4) ? NULL : p + 4;
    default: return json_number(p);
    }
}

static int json_valid(const char *s)
{
    const char *end = json_value(s);
    return end && *json_ws(end) == 0;
}

Test(json_checker, rejects_what_json_forbids)
{
    static const char *const bad[] = {"{\"a\": NaN}", "{\"a\": inf}", "[1,]", "{\"a\" 1}",
                                      "\"raw\nnewline\"", "[01]", "{'a': 1}", "[1] x"};
    static const char *const good[] = {"{}", "[]", "{\"a\": [1, -2.5e-3, null, true]}",
                                       "\"\\u00e9\\\"\""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        cr_expect(!json_valid(bad[i]), "checker accepted %s", bad[i]);
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        cr_expect(json_valid(good[i]), "checker rejected %s", good[i]);
}

/* ---- the writers --------------------------------------------------------------------------- */

Test(report, json_parses_and_holds_exact_escaped_values)
{
    make_tmpdir();
    write_report(tmpdir);
    char *s = slurp(tmpdir, REP_FILE_JSON);
    cr_expect(json_valid(s), "rows.json does not parse:\n%s", s);
    cr_expect(strstr(s, "\"case_id\": \"m4-empty<&\\\"'>,|x\""), "rows.json: nasty id not escaped");
    cr_expect(strstr(s, "\"reason\": \"H4 empty rows: row 2 \\\"quoted\\\", comma\\nsecond line "
                        "<b>&\""),
              "rows.json: reason not escaped");
    cr_expect(strstr(s, "\"first_fail\": \"H1\""), "rows.json: no H1 gate");
    cr_expect(strstr(s, "\"first_fail\": null"), "rows.json: passing gate not null");
    cr_expect(strstr(s, "\"h1_ratio\": null"), "rows.json: NaN of the error row not null");
    cr_expect(strstr(s, "\"max_err\": 0.001,"), "rows.json: max_err 1e-3 not exact");
    cr_expect(strstr(s, "\"dtype\": \"bfloat16\""), "rows.json: dtype name");
    cr_expect(strstr(s, "\"rows_total\": 10, \"pass\": 6, \"fail\": 2, \"error\": 1, \"skip\": 1, "
                        "\"outside\": 0}"),
              "rows.json: totals");
    cr_expect_eq(count_of(s, "\"case_id\""), NROWS, "rows.json: row count");
    free(s);
    remove_tree(tmpdir);
}

/* Splits CSV text (RFC 4180) into records; returns the record count and checks that every
 * record has `fields` fields. */
static size_t csv_records(const char *s, size_t fields, const char *what)
{
    size_t records = 0, nf = 1;
    int quoted = 0;
    for (const char *p = s; *p; p++) {
        if (quoted) {
            if (*p == '"' && p[1] == '"')
                p++;
            else if (*p == '"')
                quoted = 0;
        } else if (*p == '"') {
            quoted = 1;
        } else if (*p == ',') {
            nf++;
        } else if (*p == '\r' && p[1] == '\n') {
            p++;
            cr_expect_eq(nf, fields, "%s: record %zu has %zu fields", what, records, nf);
            records++;
            nf = 1;
        }
    }
    cr_expect(!quoted, "%s: unterminated quote", what);
    return records;
}

Test(report, csv_has_the_header_and_one_record_per_row)
{
    static const char header[] =
        "case_id,group,b,hq,hkv,lq,lk,d,dv,nseq,causal,window,chunk,softcap,sinks,q_block,kv_block,"
        "builder,"
        "backend,producer,kernel,dtype,max_err,mean_err,rmse,nmse,e_lp_max,h1_ratio,floor,lse_err,s1,s2,"
        "degenerate,nan_count,inf_count,empty_rows,outcome,first_fail,gates,reason,explained\r\n";
    make_tmpdir();
    write_report(tmpdir);
    char *s = slurp(tmpdir, REP_FILE_CSV);
    cr_expect(!strncmp(s, header, strlen(header)), "rows.csv header:\n%.400s", s);
    cr_expect_eq(csv_records(s, 41, "rows.csv"), NROWS + 1, "rows.csv: record count");
    cr_expect(strstr(s, "\"m4-empty<&\"\"'>,|x\""), "rows.csv: nasty id not quoted");
    /* quoted for the comma and quotes; its newline escaped (a cell is one line) */
    cr_expect(strstr(s, "\"H4 empty rows: row 2 \"\"quoted\"\", comma\\nsecond line <b>&\""),
              "rows.csv: reason not quoted and escaped");
    cr_expect(strstr(s, ",error,,-------,evaluate: O_gold is NaN at row 0 col 0,\r\n"),
              "rows.csv: error row");
    free(s);
    remove_tree(tmpdir);
}

/* Field k of the CSV record at rec, as written (quotes and all), into out; the end of the record
 * (past its CRLF) is returned. */
static const char *csv_raw_field(const char *rec, size_t k, char *out, size_t cap)
{
    size_t nf = 0, len = 0;
    int quoted = 0;
    const char *p = rec;
    for (; *p; p++) {
        if (!quoted && *p == '\r' && p[1] == '\n') {
            p += 2;
            break;
        }
        if (quoted && *p == '"' && p[1] == '"') {
            if (nf == k && len + 2 < cap)
                out[len++] = '"', out[len++] = '"';
            p++;
            continue;
        }
        if (*p == '"')
            quoted = !quoted;
        else if (!quoted && *p == ',') {
            nf++;
            continue;
        }
        if (nf == k && len + 1 < cap)
            out[len++] = *p;
    }
    out[len] = 0;
    return p;
}

/* The index of column `name` in the CSV header line at s. */
static size_t csv_column(const char *s, const char *name)
{
    char cell[64];
    for (size_t k = 0; k < 64; k++) {
        csv_raw_field(s, k, cell, sizeof cell);
        if (!strcmp(cell, name))
            return k;
    }
    cr_assert_fail("no column %s in the header", name);
    return 0;
}

/* rows.csv's text cells that a spreadsheet would run as a formula (= + - @, tab, CR first) get
 * a leading ', and so does one that starts with ' (so one ' dropped gives the value back);
 * numbers that start with '-' and the gates column (P, F and - only) are written as they are. */
Test(report, csv_text_cells_that_would_start_a_formula_get_a_quote)
{
    static const struct {
        const char *value, *cell; /* cell: as it must stand in the file */
    } cases[] = {
        {"=HYPERLINK(\"http://x.example\";\"open\")",
         "\"'=HYPERLINK(\"\"http://x.example\"\";\"\"open\"\")\""},
        {"=1+2", "'=1+2"},
        {"@SUM(A1:A9)", "'@SUM(A1:A9)"},
        {"+1", "'+1"},
        {"-2+3", "'-2+3"},
        {"-", "'-"},
        {"\tcmd", "'\\tcmd"},  /* the tab escaped (no raw control character), and quoted */
        {"\rcmd", "'\\rcmd"},
        {"a\nb\x1b[31m", "a\\nb\\x1b[31m"},
        {"'quoted", "''quoted"},
        {"a=b-c", "a=b-c"},
        {" =x", " =x"},
        {"plain", "plain"},
    };
    static const char *const text_cols[] = {"case_id", "group",  "builder", "backend",
                                            "producer", "first_fail", "reason", "explained"};
    for (size_t t = 0; t < sizeof text_cols / sizeof text_cols[0]; t++)
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            rep_row rows[NROWS];
            make_rows(rows);
            rep_row *r = &rows[0];
            /* One text column takes the value; the numbers and gates below start with '-'. */
            if (!strcmp(text_cols[t], "case_id"))
                rep_set_str(r->case_id, sizeof r->case_id, cases[i].value);
            else if (!strcmp(text_cols[t], "group"))
                rep_set_str(r->group, sizeof r->group, cases[i].value);
            else if (!strcmp(text_cols[t], "builder"))
                rep_set_str(r->builder, sizeof r->builder, cases[i].value);
            else if (!strcmp(text_cols[t], "backend"))
                rep_set_str(r->backend, sizeof r->backend, cases[i].value);
            else if (!strcmp(text_cols[t], "producer"))
                rep_set_str(r->producer, sizeof r->producer, cases[i].value);
            else if (!strcmp(text_cols[t], "first_fail"))
                rep_set_str(r->first_fail, sizeof r->first_fail, cases[i].value);
            else if (!strcmp(text_cols[t], "reason"))
                rep_set_str(r->reason, sizeof r->reason, cases[i].value);
            else
                rep_set_str(r->explained, sizeof r->explained, cases[i].value);
            r->mean_err = -0.0, r->lse_err = -INFINITY, r->s2 = -0.5, r->lq = -5;
            memcpy(r->gates, "-PPPP--", REP_NGATES + 1);
            char *buf = NULL;
            size_t len = 0;
            FILE *f = open_memstream(&buf, &len);
            cr_assert(f, "open_memstream failed");
            fc_err err = {{0}};
            rep_set set = set_of(rows, 1);
            cr_assert_eq(rep_write_csv(f, &set, &err), FC_OK, "%s", err.msg);
            fclose(f);
            const char *rec = csv_raw_field(buf, 0, (char[8]){0}, 8); /* past the header */
            char cell[REP_WHY_LEN * 2 + 8];
            csv_raw_field(rec, csv_column(buf, text_cols[t]), cell, sizeof cell);
            cr_expect_str_eq(cell, cases[i].cell, "%s '%s': written %s", text_cols[t],
                             cases[i].value, cell);
            static const struct {
                const char *col, *cell;
            } as_is[] = {{"mean_err", "-0.0"}, {"lse_err", "-inf"}, {"s2", "-0.5"},
                         {"lq", "-5"},        {"gates", "-PPPP--"}, {"dtype", "float32"}};
            for (size_t k = 0; k < sizeof as_is / sizeof as_is[0]; k++) {
                csv_raw_field(rec, csv_column(buf, as_is[k].col), cell, sizeof cell);
                cr_expect_str_eq(cell, as_is[k].cell, "%s (%s '%s'): written %s", as_is[k].col,
                                 text_cols[t], cases[i].value, cell);
            }
            free(buf);
        }
}

Test(report, junit_has_one_testcase_per_case_id_and_counts_failures)
{
    make_tmpdir();
    write_report(tmpdir);
    char *s = slurp(tmpdir, REP_FILE_JUNIT);
    /* Case ids: m1-causal-w16, m1-dense, m1-w129 (one failing row of two), NASTY (fails),
     * m2-broken (error), m2-paged (skipped). */
    cr_expect(strstr(s, "<testsuites name=\"flexcheck\" tests=\"6\" failures=\"2\" errors=\"1\" "
                        "skipped=\"1\">"),
              "junit.xml totals:\n%s", s);
    cr_expect_eq(count_of(s, "<testcase "), 6, "junit.xml: testcases");
    cr_expect(strstr(s, "<testsuite name=\"M2\" tests=\"2\" failures=\"0\" errors=\"1\" "
                        "skipped=\"1\">"),
              "junit.xml: M2 suite counts");
    cr_expect(strstr(s, "<skipped message=\"paged K/V: no paged path in kernel 1\"/>"),
              "junit.xml: skipped case");
    cr_expect_eq(count_of(s, "<failure "), 2, "junit.xml: failures");
    cr_expect_eq(count_of(s, "<error "), 1, "junit.xml: errors");
    cr_expect_eq(count_of(s, "<testsuite "), 3, "junit.xml: one suite per group");
    cr_expect(strstr(s, "<testsuite name=\"M1\" tests=\"3\" failures=\"1\" errors=\"0\""),
              "junit.xml: M1 suite counts");
    cr_expect(strstr(s, "classname=\"M4\" name=\"m4-empty&lt;&amp;&quot;&#39;&gt;,|x\""),
              "junit.xml: nasty id not escaped");
    cr_expect(strstr(s, "<failure type=\"H1\" message=\"H1 max ratio: max|err| 5e-3 at row 3 "
                        "col 1 &gt; 2 * e_lp_max [float16 emu]\">"),
              "junit.xml: failure message");
    cr_expect(strstr(s, "message=\"H4 empty rows: row 2 &quot;quoted&quot;, comma&#10;second "
                        "line &lt;b&gt;&amp; [float16 emu]\""),
              "junit.xml: newline in an attribute must be a character reference");
    free(s);
    remove_tree(tmpdir);
}

Test(report, html_is_self_contained_with_its_svg_charts)
{
    make_tmpdir();
    write_report(tmpdir);
    char *s = slurp(tmpdir, REP_FILE_HTML);
    cr_expect(!strncmp(s, "<!DOCTYPE html>", 15), "report.html: doctype");
    /* H1 distribution, a panel of H1 against Lk per group (float32, float16, bfloat16 emu),
     * max|err| against Lk and W, the dtype ratios */
    cr_expect_eq(count_of(s, "<svg "), 7, "report.html: SVG charts");
    cr_expect_eq(count_of(s, "</svg>"), 7, "report.html: SVG charts closed");
    /* One inline script (the table sort): none with a source, none from a row. */
    cr_expect_eq(count_of(s, "<script"), 1, "report.html: scripts");
    cr_expect(strstr(s, "<script>"), "report.html: the sort script is not inline");
    cr_expect(!strstr(s, "src="), "report.html: loads an external asset");
    cr_expect(!strstr(s, "href="), "report.html: links an external asset");
    cr_expect(strstr(s, "m4-empty&lt;&amp;&quot;&#39;&gt;,|x"), "report.html: id not escaped");
    cr_expect(!strstr(s, NASTY_ID), "report.html: raw id leaked");
    cr_expect(strstr(s, "</html>\n"), "report.html: not finished");
    free(s);
    remove_tree(tmpdir);
}

Test(report, markdown_summary_shows_hand_computed_statistics)
{
    make_tmpdir();
    write_report(tmpdir);
    char *s = slurp(tmpdir, REP_FILE_MD);
    cr_expect(strstr(s, "**FAIL**: 10 rows, 6 pass, 2 fail, 1 error, 1 skipped."),
              "summary.md totals:\n%s", s);
    cr_expect(strstr(s, "| float16 | emu | 6 | 3 | 2 | 0 | 1 | 0 | 0.3 | 1.5 | 1.5 |"),
              "summary.md: float16/emu H1 distribution:\n%s", s);
    cr_expect(strstr(s, "| float32 | emu | 3 | 2 | 0 | 1 | 0 | 0 | 0.3 | 0.4 | 0.4 |"),
              "summary.md: float32/emu H1 distribution");
    cr_expect(strstr(s, "## Skipped\n"), "summary.md: no skipped section");
    cr_expect(strstr(s, "| m2-paged | float16 | emu | direct | skip | paged K/V: no paged path "
                        "in kernel 1 |"),
              "summary.md: skipped row");
    /* Only judged rows enter the error tables: Lk 512 has an error and a skip only. */
    cr_expect(!strstr(s, "| 512 |"), "summary.md: unjudged rows in the Lk table");
    cr_expect(strstr(s, "| emu | float16/float32 | 2 | 1.5e+03 | 2e+03 | 0 |"),
              "summary.md: fp16/fp32 ratio");
    cr_expect(strstr(s, "| emu | bfloat16/float32 | 1 | 8e+03 | 8e+03 | 0 |"),
              "summary.md: bf16/fp32 ratio");
    /* Against Lk, columns float32/emu, float16/emu, bfloat16/emu: Lk 256 has float32 2e-6,
     * float16 max(4e-3, 5e-3, 2e-3) = 5e-3, no bfloat16 row. */
    cr_expect(strstr(s, "| 256 | 2e-06 | 0.005 | - |"), "summary.md: Lk 256 row");
    /* Against W: only windowed rows; W 16 and 129. */
    cr_expect(strstr(s, "| 16 | 1e-06 | 0.001 | 0.008 |"), "summary.md: W 16 row");
    cr_expect(strstr(s, "| 129 | - | 0.005 | - |"), "summary.md: W 129 row");
    cr_expect(strstr(s, "| m4-empty\\<\\&\"'\\>,\\|x | float16 | emu | direct | H4 | "),
              "summary.md: failure row escaping");
    cr_expect(strstr(s, "comma second line \\<b\\>\\& |"), "summary.md: reason on one line");
    free(s);
    remove_tree(tmpdir);
}

Test(files, are_written_atomically_into_a_created_directory)
{
    make_tmpdir();
    char nested[160];
    snprintf(nested, sizeof nested, "%s/a/b/reports", tmpdir);
    write_report(nested);
    write_report(nested); /* again: renames over the previous files */
    static const char *const names[] = {REP_FILE_MD, REP_FILE_JSON, REP_FILE_CSV,
                                        REP_FILE_JUNIT, REP_FILE_HTML};
    for (size_t i = 0; i < 5; i++) {
        char path[256];
        struct stat sb;
        snprintf(path, sizeof path, "%s/%s", nested, names[i]);
        cr_expect(stat(path, &sb) == 0 && sb.st_size > 0, "%s: missing or empty", names[i]);
    }
    DIR *d = opendir(nested);
    cr_assert(d, "%s: cannot list", nested);
    size_t entries = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            entries++;
            cr_expect(e->d_name[0] != '.', "temporary file left behind: %s", e->d_name);
        }
    closedir(d);
    cr_expect_eq(entries, 5, "report dir holds %zu entries", entries);

    /* A path through a regular file cannot become a directory. */
    char blocked[200];
    snprintf(blocked, sizeof blocked, "%s/%s/sub", nested, REP_FILE_MD);
    rep_row rows[NROWS];
    make_rows(rows);
    fc_err err = {{0}};
    cr_expect_eq(rep_write_all(blocked, &(rep_set){rows, NROWS, test_checks, 2, &test_run}, &err), FC_EIO,
                 "blocked dir: not EIO");
    cr_expect(strstr(err.msg, REP_FILE_MD), "blocked dir: message '%s' names no path", err.msg);
    remove_tree(tmpdir);
}

Test(files, an_empty_run_still_writes_valid_files)
{
    make_tmpdir();
    fc_err err = {{0}};
    cr_assert_eq(rep_write_all(tmpdir, &(rep_set){NULL, 0, test_checks, 2, NULL}, &err), FC_OK,
                 "empty run: %s", err.msg);
    char *s = slurp(tmpdir, REP_FILE_JSON);
    cr_expect(json_valid(s), "empty rows.json does not parse: %s", s);
    free(s);
    s = slurp(tmpdir, REP_FILE_JUNIT);
    cr_expect(strstr(s, "tests=\"0\" failures=\"0\" errors=\"0\""), "empty junit.xml: %s", s);
    free(s);
    s = slurp(tmpdir, REP_FILE_MD);
    cr_expect(strstr(s, "**PASS**: 0 rows"), "empty summary.md: %s", s);
    free(s);
    remove_tree(tmpdir);
}

Test(rows, take_metrics_gates_and_reason_from_a_verdict)
{
    /* One full row, f32, exact output: every evaluated gate passes, H6/H7 not run. */
    float o[2] = {0.5f, 0.25f}, lse[1] = {1.0f}, olp[2] = {0.5f, 0.25f + 1.0f / 1024};
    double og[2] = {0.5, 0.25}, lg[1] = {1.0};
    rep_inputs in = {.dtype = FC_F32, .rows = 1, .dv = 2, .o = o, .lse = lse, .o_gold = og,
                     .lse_gold = lg, .o_lp = olp};
    rep_verdict v;
    fc_err err = {{0}};
    cr_assert_eq(rep_evaluate(&in, &v, &err), FC_OK, "clean row: %s", err.msg);
    rep_row r;
    memset(&r, 0, sizeof r);
    rep_row_set_verdict(&r, &v);
    cr_expect_str_eq(r.gates, "-PPPPP-", "clean row: gates");
    cr_expect_str_eq(r.reason, "pass", "clean row: reason");
    cr_expect_eq(r.outcome, REP_ROW_PASS, "clean row: outcome");
    cr_expect(r.e_lp_max == 1.0 / 1024, "clean row: e_lp_max %g", r.e_lp_max);

    o[1] = NAN;
    cr_assert_eq(rep_evaluate(&in, &v, &err), FC_OK, "NaN row: %s", err.msg);
    rep_row_set_verdict(&r, &v);
    cr_expect_str_eq(r.gates, "-FPPPP-", "NaN row: gates");
    cr_expect_str_eq(r.first_fail, "H3", "NaN row: first gate");
    cr_expect_eq(r.nan_count, 1, "NaN row: nan count");
    cr_expect(!strncmp(r.reason, "H3 non-finite: O is NaN at row 0 col 1", 38), "NaN row: %s",
              r.reason);
}

Test(summary, a_float32_error_of_zero_gives_no_ratio_and_is_counted)
{
    /* Case z: float32 max|err| 0, float16 1e-3: no finite ratio, counted in the last column. */
    rep_row rows[2];
    memset(rows, 0, sizeof rows);
    for (int i = 0; i < 2; i++) {
        rep_set_str(rows[i].case_id, sizeof rows[i].case_id, "z");
        rep_set_str(rows[i].backend, sizeof rows[i].backend, "emu");
        rep_set_str(rows[i].reason, sizeof rows[i].reason, "pass");
        rows[i].first_fail[0] = 0;
        rows[i].lk = 64;
    }
    rows[0].dtype = FC_F32;
    rows[1].dtype = FC_F16;
    rows[1].max_err = 1e-3;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    cr_assert(f, "open_memstream failed");
    fc_err err = {{0}};
    cr_expect_eq(rep_write_markdown(f, &(rep_set){rows, 2, test_checks, 2, NULL}, &err), FC_OK, "zero float32 error: %s", err.msg);
    fclose(f);
    cr_expect(strstr(buf, "| emu | float16/float32 | 0 | - | - | 1 |"),
              "zero float32 error: ratio row:\n%s", buf);
    free(buf);
}

Test(summary, rows_of_two_kernel_versions_are_grouped_apart)
{
    /* The same case on kernels 1 and 2: two groups, one failing row shown with its kernel. */
    rep_row rows[2];
    memset(rows, 0, sizeof rows);
    for (int i = 0; i < 2; i++) {
        rep_set_str(rows[i].case_id, sizeof rows[i].case_id, "k");
        rep_set_str(rows[i].backend, sizeof rows[i].backend, "emu");
        rep_set_str(rows[i].reason, sizeof rows[i].reason, "pass");
        rows[i].first_fail[0] = 0;
        rows[i].dtype = FC_F16;
        rows[i].kernel = i + 1;
        rows[i].lk = 64;
        rows[i].h1_ratio = 0.25 * (i + 1);
    }
    rows[1].outcome = REP_ROW_FAIL;
    rep_set_str(rows[1].first_fail, sizeof rows[1].first_fail, "H1");
    rows[1].h1_ratio = 3.0;
    rep_set_str(rows[1].reason, sizeof rows[1].reason, "H1 max ratio: planted");
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    cr_assert(f, "open_memstream failed");
    fc_err err = {{0}};
    cr_expect_eq(rep_write_markdown(f, &(rep_set){rows, 2, test_checks, 2, NULL}, &err), FC_OK, "two kernels: %s", err.msg);
    fclose(f);
    cr_expect(strstr(buf, "| float16 | emu kernel 1 | 1 | 1 | 0 | 0 | 0 | 0 | 0.25 | 0.25 | 0.25 |"),
              "kernel 1 group:\n%s", buf);
    cr_expect(strstr(buf, "| float16 | emu kernel 2 | 1 | 0 | 1 | 0 | 0 | 0 | 3 | 3 | 3 |"),
              "kernel 2 group:\n%s", buf);
    cr_expect(strstr(buf, "| k | float16 | emu kernel 2 |"), "failing row:\n%s", buf);
    free(buf);
}

Test(files, reject_an_empty_report_directory)
{
    fc_err err = {{0}};
    cr_expect_eq(rep_write_all("", &(rep_set){0}, &err), FC_EINVAL, "empty directory: accepted");
    cr_expect_eq(rep_dir_check("", &err), FC_EINVAL, "empty directory: accepted");
}

Test(summary, lists_the_runners_exactness_checks_after_the_hard_gates)
{
    rep_row rows[NROWS];
    make_rows(rows);
    rep_set set = set_of(rows, NROWS);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    cr_assert(f, "open_memstream failed");
    fc_err err = {{0}};
    cr_assert_eq(rep_write_markdown(f, &set, &err), FC_OK, "markdown: %s", err.msg);
    fclose(f);
    const char *gates = strstr(buf, "H7 determinism; then, on the rows of their cases, the "
                                    "exactness checks window-edge (window edges differ), "
                                    "p-round (P rounded to the input type).");
    cr_expect(gates, "gate order sentence:\n%s", buf);
    free(buf);
    set.nchecks = 0;
    buf = NULL;
    f = open_memstream(&buf, &len);
    cr_assert(f, "open_memstream failed");
    cr_assert_eq(rep_write_markdown(f, &set, &err), FC_OK, "markdown: %s", err.msg);
    fclose(f);
    cr_expect(strstr(buf, "H7 determinism. The H1 ratio") && !strstr(buf, "exactness checks"),
              "no checks given, none listed:\n%s", buf);
    free(buf);
}

/* ---- the run identity ------------------------------------------------------------------------ */

Test(run, every_format_names_the_run)
{
    make_tmpdir();
    write_report(tmpdir);
    char *s = slurp(tmpdir, REP_FILE_MD);
    cr_expect(strstr(s, "# flexcheck tolerance report\n\n"
                        "- run: quick matrix, seed 7, shard 2/4, filter 'm1 x'\n"
                        "- flexcheck: 0.1.0, commit abc1234\n"
                        "- time: 2026-11-29T10:04:05Z\n"
                        "- command: flexcheck gate --quick --filter 'm1 x' --shard 2/4\n\n"
                        "**FAIL**"),
              "summary.md: no run block before the totals:\n%.600s", s);
    free(s);
    s = slurp(tmpdir, REP_FILE_JSON);
    cr_expect(json_valid(s), "rows.json does not parse");
    static const char head[] = "{\"run\": {\"time\": \"2026-11-29T10:04:05Z\", \"id\": "
        "\"00000000000000aa\", \"version\": \"0.1.0\", \"commit\": \"abc1234\", "
        "\"command\": \"flexcheck gate --quick --filter 'm1 x' --shard 2/4\", "
        "\"matrix\": \"quick\", \"seed\": 7, \"shard_i\": 2, \"shard_n\": 4, "
        "\"filter\": \"m1 x\", \"dir\": \"\", \"backends\": \"emu\", \"kernel\": 2, "
        "\"strict\": 0},\n \"checks\": [{\"name\": "
        "\"window-edge\", \"title\": \"window edges differ\"}, {\"name\": "
        "\"p-round\", \"title\": \"P rounded to the input type\"}],\n";
    cr_expect(!strncmp(s, head, strlen(head)), "rows.json: run and checks:\n%.400s", s);
    free(s);
    s = slurp(tmpdir, REP_FILE_JUNIT);
    /* Three suites (M1, M2, M4), each with the identity as properties. */
    cr_expect_eq(count_of(s, "<properties>"), 3, "junit.xml: properties per suite:\n%s", s);
    cr_expect_eq(count_of(s, "<property name=\"commit\" value=\"abc1234\"/>"), 3, "junit.xml");
    cr_expect(strstr(s, "<property name=\"command\" value=\"flexcheck gate --quick --filter "
                        "&#39;m1 x&#39; --shard 2/4\"/>"),
              "junit.xml: command property");
    cr_expect(strstr(s, "<property name=\"seed\" value=\"7\"/>"), "junit.xml: seed property");
    cr_expect(!strstr(s, "name=\"dir\""), "junit.xml: an empty field is left out");
    cr_expect(strstr(s, "skipped=\"1\">\n    <properties>\n"), "junit.xml: properties first");
    free(s);
    s = slurp(tmpdir, REP_FILE_HTML);
    cr_expect(strstr(s, "<table class=\"run\">\n<tr><th>run</th><td>quick matrix, seed 7, "
                        "shard 2/4, filter &#39;m1 x&#39;</td></tr>\n"),
              "report.html: run table");
    cr_expect(strstr(s, "<tr><th>flexcheck</th><td>0.1.0, commit abc1234</td></tr>"),
              "report.html: version and commit");
    free(s);
    remove_tree(tmpdir);
}

Test(run, a_merged_report_lists_its_parts_and_a_check_run_has_no_seed)
{
    rep_run parts[2] = {test_run, test_run};
    parts[0].shard_i = 1, parts[1].shard_i = 2, parts[0].shard_n = parts[1].shard_n = 2;
    rep_set_str(parts[0].dir, sizeof parts[0].dir, "report-1");
    rep_set_str(parts[1].dir, sizeof parts[1].dir, "report-2");
    rep_run merged = test_run;
    merged.shard_i = merged.shard_n = 1;
    merged.parts = parts;
    merged.nparts = 2;
    rep_row rows[NROWS];
    make_rows(rows);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    cr_assert(f, "open_memstream failed");
    fc_err err = {{0}};
    cr_assert_eq(rep_write_markdown(f, &(rep_set){rows, NROWS, test_checks, 2, &merged}, &err),
                 FC_OK, "%s", err.msg);
    fclose(f);
    cr_expect(strstr(buf, "- run: quick matrix, seed 7, filter 'm1 x', merged from 2 runs\n"),
              "merged scope:\n%.900s", buf);
    cr_expect(strstr(buf, "- merged: report-1: quick matrix, seed 7, shard 1/2, filter 'm1 x', "
                          "2026-11-29T10:04:05Z, flexcheck gate --quick --filter 'm1 x' "
                          "--shard 2/4\n"),
              "merged part:\n%.900s", buf);
    free(buf);

    rep_run check = test_run;
    rep_set_str(check.matrix, sizeof check.matrix, "check");
    check.seed = -1;
    check.shard_i = check.shard_n = 1;
    check.filter[0] = 0;
    buf = NULL;
    f = open_memstream(&buf, &len);
    cr_assert(f, "open_memstream failed");
    cr_assert_eq(rep_write_json(f, &(rep_set){rows, NROWS, test_checks, 2, &check}, &err), FC_OK,
                 "%s", err.msg);
    fclose(f);
    cr_expect(strstr(buf, "\"matrix\": \"check\", \"seed\": null, \"shard_i\": 1, "
                          "\"shard_n\": 1, \"filter\": \"\""),
              "check run:\n%.500s", buf);
    free(buf);
}

Test(json, infinities_are_strings_nan_null_and_bad_utf8_a_question_mark)
{
    rep_row rows[NROWS];
    make_rows(rows);
    rows[0].max_err = INFINITY;
    rows[0].lse_err = -INFINITY;
    rows[0].rmse = NAN;
    /* é kept; a lone continuation byte, a cut sequence and an overlong '/' become '?' */
    rep_set_str(rows[0].reason, sizeof rows[0].reason, "caf\xc3\xa9 \x80 \xe2\x82 \xc0\xaf end");
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    cr_assert(f, "open_memstream failed");
    fc_err err = {{0}};
    cr_assert_eq(rep_write_json(f, &(rep_set){rows, NROWS, test_checks, 2, &test_run}, &err),
                 FC_OK, "%s", err.msg);
    fclose(f);
    cr_expect(json_valid(buf), "rows.json does not parse");
    cr_expect(strstr(buf, "\"max_err\": \"inf\""), "+inf:\n%.600s", buf);
    cr_expect(strstr(buf, "\"lse_err\": \"-inf\""), "-inf");
    cr_expect(strstr(buf, "\"rmse\": null"), "NaN");
    cr_expect(strstr(buf, "\"reason\": \"caf\xc3\xa9 ? ?? ?? end\""), "UTF-8:\n%.900s", buf);
    free(buf);
}

/* A row outside the contract (docs/tolerance.md) is counted apart from pass and fail in every
 * format, listed in a section of its own, a skipped testcase in JUnit, and fails nothing. */
Test(report, outside_contract_rows_are_counted_apart_in_every_format)
{
    rep_row rows[2];
    memset(rows, 0, sizeof rows);
    for (int i = 0; i < 2; i++) {
        snprintf(rows[i].case_id, sizeof rows[i].case_id, "m5-case-%d", i);
        rep_set_str(rows[i].group, sizeof rows[i].group, "M5");
        rep_set_str(rows[i].backend, sizeof rows[i].backend, "emu");
        rows[i].dtype = FC_F16;
        memcpy(rows[i].gates, "-PPPPP-", REP_NGATES + 1);
        rep_set_str(rows[i].reason, sizeof rows[i].reason, "pass");
    }
    rep_verdict v = {.dtype = FC_F16, .unscaled = 1, .outside = 1, .first_fail = -1};
    rep_set_str(v.outside_why, sizeof v.outside_why, "outside-contract: the float16 baseline "
                "overflows");
    rep_row_set_verdict(&rows[1], &v);
    make_tmpdir();
    fc_err err = {{0}};
    rep_set set = {.rows = rows, .n = 2, .checks = test_checks, .nchecks = 2};
    cr_assert_eq(rep_write_all(tmpdir, &set, &err), FC_OK, "%s", err.msg);
    char *md = slurp(tmpdir, REP_FILE_MD);
    cr_expect(strstr(md, "**PASS**: 2 rows, 1 pass, 0 fail, 0 error, 0 skipped, 1 outside the "
                         "contract."), "%s", md);
    cr_expect(strstr(md, "| float16 | emu | 2 | 1 | 0 | 0 | 0 | 1 |"), "%s", md);
    cr_expect(strstr(md, "## Outside the contract (H1 and H2 not run)\n") &&
                  strstr(md, "| m5-case-1 | float16 | emu |  | outside-contract | outside-contract:"),
              "%s", md);
    free(md);
    char *js = slurp(tmpdir, REP_FILE_JSON);
    cr_expect(strstr(js, "\"outcome\": \"outside-contract\"") &&
                  strstr(js, "\"pass\": 1, \"fail\": 0, \"error\": 0, \"skip\": 0, \"outside\": 1}"),
              "%s", js);
    free(js);
    char *ju = slurp(tmpdir, REP_FILE_JUNIT);
    cr_expect(strstr(ju, "<skipped message=\"outside-contract: the float16 baseline overflows\"/>")
              && !strstr(ju, "<failure") && !strstr(ju, "<error"), "%s", ju);
    free(ju);
}

/* Entries of dir whose name starts with '.' and is not "." or "..": a writer's temporaries. */
static int hidden_entries(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    cr_assert(d, "%s", dir);
    for (struct dirent *e; (e = readdir(d));)
        n += e->d_name[0] == '.' && strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return n;
}

/* A directory under a report file's name is no previous report: refused, R as it was, no
 * temporary. (Failing or stopping the writer midway: the tests of the files suite below.) */
Test(report, a_directory_under_a_report_files_name_is_refused)
{
    make_tmpdir();
    write_report(tmpdir);
    cr_expect_eq(hidden_entries(tmpdir), 0, "temporaries after a successful write");
    rep_row rows[NROWS];
    make_rows(rows);
    fc_err err = {{0}};
    char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, REP_FILE_MD);
    cr_assert_eq(unlink(path), 0);
    cr_assert_eq(mkdir(path, 0755), 0);
    snprintf(path, sizeof path, "%s/%s/keep", tmpdir, REP_FILE_MD);
    FILE *f = fopen(path, "w");
    cr_assert(f);
    fclose(f);
    char *json_before = slurp(tmpdir, REP_FILE_JSON);
    cr_expect_eq(rep_write_all(tmpdir, &(rep_set){rows, NROWS, test_checks, 2, &test_run}, &err),
                 FC_EINVAL);
    cr_expect(strstr(err.msg, "summary.md is not a regular file; not replaced"), "%s", err.msg);
    char *json_after = slurp(tmpdir, REP_FILE_JSON);
    cr_expect_str_eq(json_after, json_before, "rows.json changed");
    cr_expect_eq(hidden_entries(tmpdir), 0, "temporaries left after a refused write");
    free(json_before), free(json_after);
    remove_tree(tmpdir);
}

Test(report, a_report_directory_is_checked_before_any_work)
{
    make_tmpdir();
    fc_err err = {{0}};
    char path[512];
    snprintf(path, sizeof path, "%s/new/deeper", tmpdir);
    cr_expect_eq(rep_dir_check(path, &err), FC_OK, "%s", err.msg);
    struct stat sb;
    snprintf(path, sizeof path, "%s/new", tmpdir);
    cr_expect(stat(path, &sb) != 0, "the check made %s (only a write makes it)", path);
    cr_expect_eq(hidden_entries(tmpdir), 0, "the probe was left behind");
    snprintf(path, sizeof path, "%s/plain", tmpdir);
    FILE *f = fopen(path, "w");
    cr_assert(f);
    fclose(f);
    snprintf(path, sizeof path, "%s/plain/sub", tmpdir);
    cr_expect_eq(rep_dir_check(path, &err), FC_EIO);
    cr_expect(strstr(err.msg, "is not a directory"), "%s", err.msg);
}

/* A row whose baseline overflowed but which failed another gate (H3 here) is a failure, yet
 * nothing was measured against the baseline: the H1 statistics and the soft-signal counts
 * leave it out instead of counting its missing ratio as infinitely bad. */
Test(summary, an_unscaled_failing_row_stays_out_of_the_h1_statistics)
{
    rep_row rows[2];
    memset(rows, 0, sizeof rows);
    for (int i = 0; i < 2; i++) {
        snprintf(rows[i].case_id, sizeof rows[i].case_id, "m5-case-%d", i);
        rep_set_str(rows[i].backend, sizeof rows[i].backend, "emu");
        rows[i].dtype = FC_F16;
        rows[i].outcome = REP_ROW_PASS;
        rows[i].h1_ratio = 0.5;
        memcpy(rows[i].gates, "-PPPPP-", REP_NGATES + 1);
    }
    rep_verdict v = {.dtype = FC_F16, .unscaled = 1, .first_fail = REP_H3,
                     .gate = {[REP_H3] = REP_FAIL, [REP_H4] = REP_PASS}};
    rep_set_str(v.why[REP_H3], sizeof v.why[REP_H3], "O is NaN at row 0 col 0");
    rep_row_set_verdict(&rows[1], &v);
    cr_assert_eq(rows[1].outcome, REP_ROW_FAIL);
    cr_assert_str_eq(rows[1].gates, "-FP----");
    make_tmpdir();
    fc_err err = {{0}};
    rep_set set = {.rows = rows, .n = 2, .checks = test_checks, .nchecks = 2};
    cr_assert_eq(rep_write_all(tmpdir, &set, &err), FC_OK, "%s", err.msg);
    char *md = slurp(tmpdir, REP_FILE_MD);
    cr_expect(strstr(md, "| float16 | emu | 2 | 1 | 1 | 0 | 0 | 0 | 0.5 | 0.5 | 0.5 | 0 | 0 |"),
              "%s", md);
    free(md);
}

/* ---- H1 ratio against Lk (summary.md tables, report.html panels) ------------------------------ */

typedef struct lk_spec {
    const char *id;
    fc_dtype dt;
    int32_t lk, nseq, causal, window, chunk;
    double h1;
    char kind; /* p pass, f H1 failed, o outside the contract, u failed with H1 not run (H3),
                * s skip, e error */
} lk_spec;

/* Every family, Lk 0, 1, 2, 3, 300, 2^17, 2^18 - 1 and 2^28, an infinite ratio, and rows that
 * must stay out (outside the contract, failed without H1, skipped, errored).
 * The family is the first that holds: packed (nseq >= 2), chunked, sliding (causal and
 * window), bidir window, causal, none; soft-cap and sinks are none. Worked by hand, float16/emu
 * (12 rows where H1 ran), columns packed | chunked | sliding | bidir window | causal | none:
 *   0              none 0                          -> 0 / 0 (1)
 *   1              none 0.5, 0.9                   -> (0.5 + 0.9) / 2 = 0.7 / 0.9 (2)
 *   2-3            causal 0.25 (Lk 2), 0.75 (Lk 3) -> 0.5 / 0.75 (2)
 *   256-511        chunked 0.3 (chunk beats causal and window), sliding 0.1, bidir 0.2,
 *                  none 0.6 (soft-cap 50 and sinks: still none); causal none: the outside,
 *                  H3-failed, skipped and errored rows at Lk 300 (causal) stay out
 *   131072-262143  packed 0.4 (Lk 2^17; its chunk, causal and window lose to packed), 3
 *                  (2^18 - 1, failed) -> 1.7 / 3 (2)
 *   268435456-...  causal inf (Lk 2^28, failed: x/0)
 * float32/emu: causal 0.05 at Lk 1024 (bucket 1024-2047). bfloat16/emu: no row where H1 ran
 * (an outside-contract row and a skip): a line, no panel. */
static const lk_spec lk_specs[] = {
    {"none-0", FC_F16, 0, 1, 0, 0, 0, 0, 'p'},
    {"none-1", FC_F16, 1, 1, 0, 0, 0, 0.5, 'p'},
    {"none-1b", FC_F16, 1, 1, 0, 0, 0, 0.9, 'p'},
    {"causal-2", FC_F16, 2, 1, 1, 0, 0, 0.25, 'p'},
    {"causal-3", FC_F16, 3, 1, 1, 0, 0, 0.75, 'p'},
    {"sliding-300", FC_F16, 300, 1, 1, 64, 0, 0.1, 'p'},
    {"bidir-300", FC_F16, 300, 1, 0, 64, 0, 0.2, 'p'},
    {"chunked-300", FC_F16, 300, 1, 1, 32, 128, 0.3, 'p'},
    {"softcap-sinks-300", FC_F16, 300, 1, 0, 0, 0, 0.6, 'p'},
    {"packed-2^17", FC_F16, 131072, 4, 1, 64, 32, 0.4, 'p'},
    {"packed-2^18-1", FC_F16, 262143, 2, 0, 0, 0, 3.0, 'f'},
    {"causal-2^28", FC_F16, 268435456, 1, 1, 0, 0, INFINITY, 'f'},
    {"outside-300", FC_F16, 300, 1, 1, 0, 0, NAN, 'o'},
    {"h3-failed-300", FC_F16, 300, 1, 1, 0, 0, NAN, 'u'},
    {"skipped-300", FC_F16, 300, 1, 1, 0, 0, NAN, 's'},
    {"errored-300", FC_F16, 300, 1, 1, 0, 0, NAN, 'e'},
    {"f32-causal-1024", FC_F32, 1024, 1, 1, 0, 0, 0.05, 'p'},
    {"bf16-outside", FC_BF16, 300, 1, 1, 0, 0, NAN, 'o'},
    {"bf16-skipped", FC_BF16, 300, 1, 1, 0, 0, NAN, 's'},
};
#define NLK (sizeof lk_specs / sizeof lk_specs[0])

static void make_lk_rows(rep_row *rows)
{
    memset(rows, 0, NLK * sizeof *rows);
    for (size_t i = 0; i < NLK; i++) {
        const lk_spec *s = &lk_specs[i];
        rep_row *r = &rows[i];
        rep_set_str(r->case_id, sizeof r->case_id, s->id);
        rep_set_str(r->group, sizeof r->group, "M9");
        rep_set_str(r->backend, sizeof r->backend, "emu");
        rep_set_str(r->builder, sizeof r->builder, "direct");
        r->b = 1, r->nseq = s->nseq, r->hq = 2, r->hkv = 1, r->lq = 1, r->lk = s->lk;
        r->d = r->dv = 64, r->q_block = r->kv_block = 128;
        r->mask.causal = s->causal, r->mask.sliding_window = s->window;
        r->mask.chunk_size = s->chunk;
        if (!strcmp(s->id, "softcap-sinks-300"))
            r->softcap = 50, r->sinks = 1;
        r->dtype = s->dt;
        if (s->kind == 's' || s->kind == 'e') {
            (s->kind == 'e' ? rep_row_set_error : rep_row_set_skip)(r, "planted");
            continue;
        }
        rep_verdict v = {.dtype = s->dt, .first_fail = -1, .h1_ratio = s->h1, .max_err = 1e-3,
                         .gate = {[REP_H3] = REP_PASS, [REP_H4] = REP_PASS}};
        if (s->kind == 'o' || s->kind == 'u') { /* the baseline overflowed: H1 did not run */
            v.unscaled = 1, v.outside = s->kind == 'o';
            if (s->kind == 'u')
                v.first_fail = REP_H3, v.gate[REP_H3] = REP_FAIL;
            rep_set_str(v.outside_why, sizeof v.outside_why, "outside-contract: planted");
            rep_set_str(v.why[REP_H3], sizeof v.why[REP_H3], "planted");
        } else {
            v.gate[REP_H1] = s->kind == 'f' ? REP_FAIL : REP_PASS;
            v.first_fail = s->kind == 'f' ? REP_H1 : -1;
            v.pass = s->kind == 'p';
            rep_set_str(v.why[REP_H1], sizeof v.why[REP_H1], "planted");
        }
        rep_row_set_verdict(r, &v);
    }
}

static char *write_lk_report(const char *name)
{
    rep_row rows[NLK];
    make_lk_rows(rows);
    cr_assert_eq(rows[13].outcome, REP_ROW_FAIL, "the H3 row must be judged (failed)");
    cr_assert_eq(rows[13].gates[REP_H1], '-', "the H3 row must have H1 not run");
    fc_err err = {{0}};
    cr_assert_eq(rep_write_all(tmpdir, &(rep_set){rows, NLK, test_checks, 2, &test_run}, &err),
                 FC_OK, "rep_write_all: %s", err.msg);
    return slurp(tmpdir, name);
}

Test(h1_lk, summary_tables_per_bucket_and_family_worked_by_hand)
{
    make_tmpdir();
    char *s = write_lk_report(REP_FILE_MD);
    const char *sec = strstr(s, "## H1 ratio against Lk\n");
    cr_assert(sec, "summary.md: no H1 ratio against Lk section:\n%s", s);
    cr_expect(strstr(s, "## Max error against Lk") > sec, "the section comes before max|err|");
    static const char f16[] =
        "### float16/emu\n\n"
        "| Lk | packed | chunked | sliding | bidir window | causal | none |\n"
        "|---:|---:|---:|---:|---:|---:|---:|\n"
        "| 0 | - | - | - | - | - | 0 / 0 (1) |\n"
        "| 1 | - | - | - | - | - | 0.7 / 0.9 (2) |\n"
        "| 2-3 | - | - | - | - | 0.5 / 0.75 (2) | - |\n"
        "| 256-511 | - | 0.3 / 0.3 (1) | 0.1 / 0.1 (1) | 0.2 / 0.2 (1) | - | 0.6 / 0.6 (1) |\n"
        "| 131072-262143 | 1.7 / 3 (2) | - | - | - | - | - |\n"
        "| 268435456-536870911 | - | - | - | - | inf / inf (1) | - |\n\n";
    static const char f32[] = "### float32/emu\n\n| Lk | causal |\n|---:|---:|\n"
                              "| 1024-2047 | 0.05 / 0.05 (1) |\n\n";
    static const char bf16[] = "### bfloat16/emu\n\nNo row where H1 ran.\n\n";
    cr_expect(strstr(sec, f16), "summary.md: float16/emu table, want\n%s\nin\n%s", f16, sec);
    cr_expect(strstr(sec, f32), "summary.md: float32/emu table, want\n%s\nin\n%s", f32, sec);
    cr_expect(strstr(sec, bf16), "summary.md: bfloat16/emu line");
    /* groups in the order of the per-group table: float32, float16, bfloat16 */
    cr_expect(strstr(sec, f32) < strstr(sec, f16) && strstr(sec, f16) < strstr(sec, bf16),
              "summary.md: groups out of order");
    free(s);
    remove_tree(tmpdir);
}

/* The svg element with id `id` in s, as a fresh string ("" when there is none). */
static char *svg_by_id(const char *s, const char *id)
{
    char key[64];
    snprintf(key, sizeof key, "id=\"%s\"", id);
    const char *a = strstr(s, key), *b = a ? strstr(a, "</svg>") : NULL;
    size_t n = a && b ? (size_t)(b - a) : 0;
    char *out = malloc(n + 1);
    cr_assert(out, "out of memory");
    memcpy(out, a ? a : "", n);
    out[n] = 0;
    return out;
}

/* The tick labels of a panel's Lk axis, in order, as one string "1 8 64 ...". */
static void x_labels(const char *svg, char *out, size_t cap)
{
    out[0] = 0;
    for (const char *p = svg; (p = strstr(p, "<text class=\"xt\""));) {
        p = strchr(p, '>') + 1;
        const char *e = strchr(p, '<');
        snprintf(out + strlen(out), cap - strlen(out), "%s%.*s", out[0] ? " " : "",
                 (int)(e - p), p);
    }
}

Test(h1_lk, html_panels_share_axes_one_marker_per_measured_row)
{
    make_tmpdir();
    char *s = write_lk_report(REP_FILE_HTML);
    const char *sec = strstr(s, "<h2>H1 ratio against Lk</h2>");
    cr_assert(sec, "report.html: no H1 ratio against Lk section");
    cr_expect(strstr(s, "<h2>H1 ratio distribution</h2>") < sec &&
                  sec < strstr(s, "<h2>Max error against Lk</h2>"),
              "report.html: the section belongs right after the H1 distribution");
    /* a panel per group with a row where H1 ran (float32 is group 0, float16 group 1), a line
     * for bfloat16 */
    cr_expect_eq(count_of(s, "id=\"chart-h1lk-"), 2, "report.html: panels");
    cr_expect(strstr(s, "<p class=\"h1lk-none\">bfloat16/emu: no row where H1 ran.</p>"),
              "report.html: bfloat16/emu line");
    char *p32 = svg_by_id(s, "chart-h1lk-0"), *p16 = svg_by_id(s, "chart-h1lk-1");
    cr_expect(strstr(p32, "<title>H1 ratio against Lk: float32/emu (1 rows)</title>"),
              "float32 panel title");
    cr_expect(strstr(p16, "<title>H1 ratio against Lk: float16/emu (12 rows)</title>"),
              "float16 panel title");
    /* one marker per row where H1 ran; failed ones outlined with an x; ringed in a band:
     * Lk 0 with ratio 0, and the infinite ratio */
    cr_expect_eq(count_of(p16, "<g class=\"pt "), 12, "float16 markers");
    cr_expect_eq(count_of(p32, "<g class=\"pt "), 1, "float32 markers");
    cr_expect_eq(count_of(p16, " fail\" data") + count_of(p16, " fail edge\" data"), 2,
                 "float16 failed markers");
    cr_expect_eq(count_of(p16, " edge\""), 2, "float16 ringed markers");
    cr_expect(strstr(p16, "<g class=\"pt fam-packed fail\" data-lk=\"262143\" data-ratio=\"3\">"),
              "the failed packed row");
    cr_expect(strstr(p16, "<g class=\"pt fam-causal fail edge\" data-lk=\"268435456\" "
                          "data-ratio=\"inf\">"),
              "the infinite ratio, ringed");
    cr_expect(strstr(p16, "<g class=\"pt fam-none pass edge\" data-lk=\"0\" data-ratio=\"0\">"),
              "Lk 0 with ratio 0, ringed");
    const char *fams[] = {"packed", "chunked", "sliding", "bidir", "causal", "none"};
    const size_t want_fam[] = {2, 1, 1, 1, 3, 4};
    for (size_t k = 0; k < 6; k++) {
        char cls[48];
        snprintf(cls, sizeof cls, "<g class=\"pt fam-%s ", fams[k]);
        cr_expect_eq(count_of(p16, cls), want_fam[k], "float16 %s markers", fams[k]);
    }
    cr_expect(!strstr(p16, "outside-300") && !strstr(p16, "h3-failed-300") &&
                  !strstr(p16, "skipped-300") && !strstr(p16, "errored-300"),
              "a row where H1 did not run has a marker");
    /* The same axes in both panels: Lk 1 .. 2^28, a grid line at each of the 29 powers of two,
     * every third labelled and the last (2^27 dropped: too close to it), ten labels, then the
     * 0 band's; ratios 1e-2 .. 10 (0.05 .. 3 and the limit 1). */
    char l32[512], l16[512];
    x_labels(p32, l32, sizeof l32);
    x_labels(p16, l16, sizeof l16);
    cr_expect_str_eq(l16, "1 8 64 512 4096 32768 262144 2097152 16777216 268435456 0");
    cr_expect_str_eq(l32, l16, "the panels' Lk axes differ");
    cr_expect_eq(count_of(p16, "stroke=\"#e4e4e4\""), 29, "grid lines at the powers of two");
    for (size_t k = 0; k < 2; k++) {
        const char *p = k ? p16 : p32;
        cr_expect(strstr(p, ">1e-2</text>") && strstr(p, ">10</text>") &&
                      !strstr(p, ">1e-3</text>") && !strstr(p, ">100</text>"),
                  "panel %zu: ratio axis not 1e-2 .. 10", k);
        cr_expect(strstr(p, "H1 ratio, log scale (limit 1)") && strstr(p, "Lk (keys), log scale"),
                  "panel %zu: axis titles", k);
        cr_expect_eq(count_of(p, "class=\"limit\""), 1, "panel %zu: the limit line", k);
    }
    /* each panel's bucket table folded under it */
    cr_expect_eq(count_of(s, "<table class=\"h1lk\">"), 2, "bucket tables");
    const char *t16 = strstr(strstr(s, "id=\"chart-h1lk-1\""), "<details>");
    cr_expect(t16 && strstr(t16, "<tr><td class=\"n\">131072-262143</td><td class=\"n\">1.7 / 3 "
                                 "(2)</td>"),
              "float16 bucket table");
    /* The H1 distribution strip: a dot per row where H1 ran, not per judged row (13 float16
     * rows are judged; the H3-failed one has no ratio). */
    char *strip = svg_by_id(s, "chart-h1");
    cr_expect(strstr(strip, "float16/emu (12)</text>"), "strip: float16 count");
    const char *f16row = strstr(strip, "float16/emu (12)</text>");
    const char *next = f16row ? strstr(f16row, "</text>\n<text") : NULL;
    cr_expect(f16row && count_of(f16row, "<circle") - (next ? count_of(next, "<circle") : 0) == 12,
              "strip: float16 dots");
    free(strip);
    free(p32);
    free(p16);
    free(s);
    remove_tree(tmpdir);
}

/* Bucket k >= 1 holds [2^(k-1), 2^k - 1], bucket 0 Lk 0: every edge from 2^0 to 2^28, the
 * powers derived by doubling (not by the shift the code uses). */
Test(h1_lk, bucket_edges_from_doubling)
{
    int64_t x = 1;
    for (int k = 0; k <= 28; k++, x *= 2) {
        cr_expect_eq(rep_lk_bucket((int32_t)x), k + 1, "Lk %lld", (long long)x);
        cr_expect_eq(rep_lk_bucket((int32_t)(x - 1)), k, "Lk %lld", (long long)(x - 1));
        char lab[48], want[48];
        rep_lk_bucket_label(lab, sizeof lab, k + 1);
        if (k == 0)
            snprintf(want, sizeof want, "1");
        else
            snprintf(want, sizeof want, "%lld-%lld", (long long)x, (long long)(2 * x - 1));
        cr_expect_str_eq(lab, want, "bucket %d", k + 1);
    }
    cr_expect_eq(x, 536870912);
    cr_expect(rep_lk_bucket(268435456) < REP_NBUCKETS, "Lk 2^28 has no bucket");
    char lab[48];
    rep_lk_bucket_label(lab, sizeof lab, 0);
    cr_expect_str_eq(lab, "0");
}

/* ---- the set as one unit (rep_file.c) -------------------------------------------------------- */

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Everything a directory holds, hidden entries too, sorted: "name\n<size>\n<bytes>\n" per file,
 * "name -> target\n" per symbolic link, "name/\n" per directory; NULL when dir is missing. Two
 * directories hold the same set exactly when their texts are equal. */
static char *dir_text(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return NULL;
    char *names[64];
    size_t n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            cr_assert_lt(n, 64, "%s: too many entries", dir);
            names[n++] = strdup(e->d_name);
        }
    closedir(d);
    qsort(names, n, sizeof *names, by_name);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    cr_assert(f, "open_memstream failed");
    for (size_t i = 0; i < n; i++) {
        char path[512], target[256];
        struct stat sb;
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        cr_assert_eq(lstat(path, &sb), 0, "%s", path);
        if (S_ISREG(sb.st_mode)) {
            char *s = slurp(dir, names[i]);
            fprintf(f, "%s\n%lld\n%s\n", names[i], (long long)sb.st_size, s);
            free(s);
        } else if (S_ISLNK(sb.st_mode)) {
            ssize_t k = readlink(path, target, sizeof target - 1);
            target[k < 0 ? 0 : k] = 0;
            fprintf(f, "%s -> %s\n", names[i], target);
        } else {
            fprintf(f, "%s/\n", names[i]);
        }
        free(names[i]);
    }
    fclose(f);
    return buf;
}

/* Entries of dir, hidden ones included; their names into list. */
static int entries(const char *dir, char *list, size_t cap)
{
    DIR *d = opendir(dir);
    int n = 0;
    size_t len = 0;
    list[0] = 0;
    cr_assert(d, "%s", dir);
    for (struct dirent *e; (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            n++;
            len += (size_t)snprintf(list + len, len < cap ? cap - len : 0, "%s ", e->d_name);
        }
    closedir(d);
    return n;
}

static int exists(const char *path)
{
    struct stat sb;
    return lstat(path, &sb) == 0;
}

static void put_file(const char *dir, const char *name, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    cr_assert(f, "%s", path);
    fputs(text, f);
    fclose(f);
}

/* The previous run's rows and this run's (one metric differs). */
static void two_runs(rep_row prev[NROWS], rep_row next[NROWS])
{
    make_rows(prev);
    make_rows(next);
    next[0].max_err = 42;
}

static fc_status write_rows(const char *dir, const rep_row *rows)
{
    fc_err err = {{0}};
    fc_status st = rep_write_all(dir, &(rep_set){rows, NROWS, test_checks, 2, &test_run}, &err);
    cr_expect(st == FC_OK, "%s: %s", dir, err.msg);
    return st;
}

/* r holding the set of rows and, beside it, a file and a symbolic link of someone's own, as a
 * CI job's artifact directory might; the file's inode in *ino. */
static void set_up(const char *r, const rep_row *rows, ino_t *ino)
{
    remove_tree(r);
    cr_assert_eq(write_rows(r, rows), FC_OK);
    put_file(r, "notes.txt", "kept across runs\n");
    char path[512];
    snprintf(path, sizeof path, "%s/latest", r);
    cr_assert_eq(symlink(REP_FILE_MD, path), 0, "%s", path);
    struct stat sb;
    snprintf(path, sizeof path, "%s/notes.txt", r);
    cr_assert_eq(stat(path, &sb), 0);
    *ino = sb.st_ino;
}

static int stop_at, stopped; /* the step rep_write_step acts at; set once it did */

static int kill_at_step(int step)
{
    if (step == stop_at)
        raise(SIGKILL);
    return 0;
}

static int fail_at_step(int step)
{
    stopped |= step == stop_at;
    return step == stop_at;
}

/* renameat2 where the filesystem has neither RENAME_EXCHANGE nor RENAME_NOREPLACE. */
static int renameat2_without_flags(int from_dir, const char *from, int to_dir, const char *to,
                                   unsigned flags)
{
    if (flags) {
        errno = EINVAL;
        return -1;
    }
    return renameat(from_dir, from, to_dir, to);
}

/* rep_write_all(dir, rows) in a child with hook set: its wait status. The child exits 0 when the
 * write succeeded, 3 when it failed, 4 when the hook never acted (a fail_at_step past the
 * last step). */
static int write_in_child(const char *dir, const rep_row *rows, int (*hook)(int), int no_flags)
{
    fflush(NULL);
    pid_t pid = fork();
    cr_assert(pid >= 0, "fork");
    if (pid == 0) {
        rep_write_step = hook;
        if (no_flags)
            rep_renameat2 = renameat2_without_flags;
        fc_err err;
        fc_status st = rep_write_all(dir, &(rep_set){rows, NROWS, test_checks, 2, &test_run},
                                     &err);
        _exit(hook == fail_at_step && !stopped ? 4 : st == FC_OK ? 0 : 3);
    }
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid, "waitpid");
    return status;
}

/* Killed (SIGKILL) before each step that changes the filesystem, one step further each time,
 * until a writer finishes: R holds the previous set or the new one, each exactly (byte for byte,
 * the user's file the same inode), never a mix; the next run's rep_dir_check leaves nothing
 * else beside R. Again where the filesystem has no RENAME_EXCHANGE: there R may also be missing
 * (between the two renames), and the next run puts the previous set back. */
Test(files, a_writer_killed_at_any_step_leaves_the_previous_set_or_the_new_one, .timeout = 300)
{
    make_tmpdir();
    rep_row prev[NROWS], next[NROWS];
    two_runs(prev, next);
    char ref[128], parent[128], r[160], list[1024];
    ino_t ino;
    snprintf(ref, sizeof ref, "%s/ref", tmpdir);
    set_up(ref, prev, &ino);
    char *want_prev = dir_text(ref);
    set_up(ref, next, &ino);
    char *want_next = dir_text(ref);
    cr_assert(strcmp(want_prev, want_next), "the two runs' sets are the same");
    snprintf(parent, sizeof parent, "%s/p", tmpdir);
    cr_assert_eq(mkdir(parent, 0755), 0);
    snprintf(r, sizeof r, "%s/R", parent);
    for (int no_flags = 0; no_flags < 2; no_flags++) {
        const char *how = no_flags ? "without RENAME_EXCHANGE" : "with RENAME_EXCHANGE";
        int kills = 0;
        for (stop_at = 1;; stop_at++) {
            set_up(r, prev, &ino);
            int status = write_in_child(r, next, kill_at_step, no_flags);
            char *got = dir_text(r);
            if (WIFEXITED(status)) { /* it finished before step stop_at: every step was tried */
                cr_expect_eq(WEXITSTATUS(status), 0, "%s: the whole write failed", how);
                cr_expect(got && !strcmp(got, want_next), "%s: R after a whole write:\n%s", how,
                          got ? got : "(missing)");
                free(got);
                break;
            }
            cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "%s, step %d: "
                      "status %#x", how, stop_at, status);
            kills++;
            int whole = got && (!strcmp(got, want_prev) || !strcmp(got, want_next));
            cr_expect(whole || (no_flags && !got), "%s, killed at step %d: R holds %s", how,
                      stop_at, got ? got : "nothing");
            char path[512];
            struct stat sb;
            snprintf(path, sizeof path, "%s/notes.txt", r);
            cr_expect(!got || (stat(path, &sb) == 0 && sb.st_ino == ino), "%s, step %d: the "
                      "user's file is not the same file", how, stop_at);
            fc_err err = {{0}};
            cr_expect_eq(rep_dir_check(r, &err), FC_OK, "%s, step %d: %s", how, stop_at, err.msg);
            char *after = dir_text(r);
            cr_expect(after && !strcmp(after, got ? got : want_prev), "%s, step %d: the next "
                      "run made R %s", how, stop_at, after ? after : "missing");
            cr_expect_eq(entries(parent, list, sizeof list), 1, "%s, step %d: beside R: %s", how,
                         stop_at, list);
            free(got);
            free(after);
        }
        /* mkdir, five files, two links, mode, sync, the switch, the old set's seven entries and
         * its rmdir: far more than 12 places to be stopped at. */
        cr_expect_gt(kills, 12, "%s: stopped at %d steps only", how, kills);
    }
    free(want_prev);
    free(want_next);
    remove_tree(tmpdir);
}

/* A step that fails (each in turn, until the write runs out of steps): before the switch, the
 * write fails, R is exactly the previous set and nothing of this run is left, not even the
 * parent directories it made for a new R (a failed check --report or gate leaves no empty report
 * directory); after it (taking the previous set apart), the write stands and the next run
 * clears the rest. */
Test(files, a_write_failing_at_any_step_leaves_the_previous_set_and_nothing_else, .timeout = 300)
{
    make_tmpdir();
    rep_row prev[NROWS], next[NROWS];
    two_runs(prev, next);
    char ref[128], parent[128], r[160], fresh[192], list[1024];
    ino_t ino;
    snprintf(ref, sizeof ref, "%s/ref", tmpdir);
    set_up(ref, prev, &ino);
    char *want_prev = dir_text(ref);
    set_up(ref, next, &ino);
    char *want_next = dir_text(ref);
    remove_tree(ref);
    snprintf(parent, sizeof parent, "%s/p", tmpdir);
    cr_assert_eq(mkdir(parent, 0755), 0);
    snprintf(r, sizeof r, "%s/R", parent);
    snprintf(fresh, sizeof fresh, "%s/q/a/b/R", tmpdir);
    for (int no_flags = 0; no_flags < 2; no_flags++) {
        int failed = 0;
        for (stop_at = 1;; stop_at++) {
            set_up(r, prev, &ino);
            int status = write_in_child(r, next, fail_at_step, no_flags);
            cr_assert(WIFEXITED(status), "step %d: status %#x", stop_at, status);
            if (WEXITSTATUS(status) == 4)
                break;
            char *got = dir_text(r);
            if (WEXITSTATUS(status) == 3) {
                failed++;
                cr_expect(got && !strcmp(got, want_prev), "step %d failed: R holds %s", stop_at,
                          got ? got : "nothing");
                cr_expect_eq(entries(parent, list, sizeof list), 1, "step %d failed: beside R: "
                             "%s", stop_at, list);
            } else {
                cr_expect(got && !strcmp(got, want_next), "step %d failed after the switch: R "
                          "holds %s", stop_at, got ? got : "nothing");
                fc_err err = {{0}};
                cr_expect_eq(rep_dir_check(r, &err), FC_OK, "%s", err.msg);
                cr_expect_eq(entries(parent, list, sizeof list), 1, "step %d, after the next "
                             "run: beside R: %s", stop_at, list);
            }
            free(got);
        }
        cr_expect_gt(failed, 8, "the write failed at %d steps only", failed);
        /* A new R under parents that do not exist yet. */
        for (stop_at = 1;; stop_at++) {
            char q[160];
            snprintf(q, sizeof q, "%s/q", tmpdir);
            remove_tree(q);
            int status = write_in_child(fresh, next, fail_at_step, no_flags);
            cr_assert(WIFEXITED(status), "new R, step %d: status %#x", stop_at, status);
            if (WEXITSTATUS(status) == 4)
                break;
            if (WEXITSTATUS(status) == 3)
                cr_expect(!exists(q), "new R, step %d failed: %s was left", stop_at, q);
            else
                cr_expect(exists(fresh), "new R, step %d: written, yet missing", stop_at);
        }
    }
    free(want_prev);
    free(want_next);
    remove_tree(tmpdir);
}

/* A file someone puts into R while a set is written (before each step in turn) is in R after
 * it: linked into the new set, or moved back out of the previous one; never deleted. */
static char late_dir[160];
static int late_files, late_made[64];

static int add_late_file(int step)
{
    char path[256];
    snprintf(path, sizeof path, "%s/late-%d.txt", late_dir, step);
    FILE *f = step < 64 ? fopen(path, "w") : NULL; /* R may be missing for an instant */
    if (f) {
        fputs("late\n", f);
        fclose(f);
        late_made[step] = 1;
        late_files++;
    }
    return 0;
}

Test(files, a_file_put_into_the_directory_during_the_write_is_kept)
{
    make_tmpdir();
    rep_row prev[NROWS], next[NROWS];
    two_runs(prev, next);
    snprintf(late_dir, sizeof late_dir, "%s/R", tmpdir);
    for (int no_flags = 0; no_flags < 2; no_flags++) {
        ino_t ino;
        set_up(late_dir, prev, &ino);
        memset(late_made, 0, sizeof late_made);
        late_files = 0;
        int (*was)(int, const char *, int, const char *, unsigned) = rep_renameat2;
        rep_write_step = add_late_file;
        if (no_flags)
            rep_renameat2 = renameat2_without_flags;
        write_rows(late_dir, next);
        rep_write_step = NULL;
        rep_renameat2 = was;
        cr_expect_gt(late_files, 12, "files put in at %d steps only", late_files);
        for (int s = 0; s < 64; s++) {
            char path[256];
            snprintf(path, sizeof path, "%s/late-%d.txt", late_dir, s);
            cr_expect(!late_made[s] || exists(path), "no_flags %d: late-%d.txt was lost",
                      no_flags, s);
        }
        char list[2048];
        cr_expect_eq(entries(tmpdir, list, sizeof list), 1, "beside R: %s", list);
    }
    remove_tree(tmpdir);
}

/* Leftovers of a writer whose PID is dead are cleared by the next run (its report files gone,
 * a file of R's that it held a link to kept in R, a file only it held moved into R, a set moved
 * aside put back as R); a live writer's are not: its PID alive, or its directory locked (a
 * writer in another PID namespace), or this very process's; nor a name that only looks alike. */
Test(files, the_next_run_clears_a_dead_writers_leftovers_and_no_live_ones)
{
    make_tmpdir();
    rep_row prev[NROWS];
    make_rows(prev);
    char r[128], path[512], list[2048];
    ino_t ino;
    snprintf(r, sizeof r, "%s/R", tmpdir);
    set_up(r, prev, &ino);
    char *want = dir_text(r);
    pid_t dead = fork();
    if (dead == 0)
        _exit(0);
    cr_assert_eq(waitpid(dead, NULL, 0), dead);
    int ready[2];
    cr_assert_eq(pipe(ready), 0);
    pid_t live = fork();
    if (live == 0) {
        pause();
        _exit(0);
    }
    char locked[160];
    snprintf(locked, sizeof locked, "%s/.R.rep-old.%ld.0000beef", tmpdir, (long)dead);
    cr_assert_eq(mkdir(locked, 0755), 0);
    pid_t locker = fork();
    if (locker == 0) { /* holds the lock as a writer in another PID namespace would */
        int fd = open(locked, O_RDONLY | O_DIRECTORY);
        if (fd < 0 || flock(fd, LOCK_EX) != 0 || write(ready[1], "x", 1) != 1)
            _exit(1);
        pause();
        _exit(0);
    }
    char c;
    cr_assert_eq(read(ready[0], &c, 1), 1, "the locker did not start");
    static const struct {
        const char *fmt;
        int pid; /* 0 dead, 1 live, 2 this process */
        int cleared;
    } left[] = {
        {"%s/.R.rep-new.%ld.0000dead", 0, 1}, {"%s/.R.rep-new.%ld.0000f00d", 0, 1},
        {"%s/.R.rep-new.%ld.0000a11e", 1, 0}, {"%s/.R.rep-new.%ld.0000c0de", 2, 0},
        {"%s/.R.rep-new.%ld.notours", 0, 0},  {"%s/.S.rep-new.%ld.0000dead", 0, 0},
    };
    char names[6][160];
    for (size_t i = 0; i < 6; i++) {
        long pid = left[i].pid == 0 ? dead : left[i].pid == 1 ? live : getpid();
        snprintf(names[i], sizeof names[i], left[i].fmt, tmpdir, pid);
        cr_assert_eq(mkdir(names[i], 0755), 0, "%s", names[i]);
        put_file(names[i], REP_FILE_MD, "# flexcheck tol"); /* cut short by the kill */
    }
    /* The first holds a link to R's notes.txt (carried over), the second a file of its own. */
    char from[512];
    snprintf(from, sizeof from, "%s/notes.txt", r);
    snprintf(path, sizeof path, "%s/notes.txt", names[0]);
    cr_assert_eq(link(from, path), 0);
    put_file(names[1], "mine.txt", "only here\n");
    fc_err err = {{0}};
    cr_expect_eq(rep_dir_check(r, &err), FC_OK, "%s", err.msg);
    for (size_t i = 0; i < 6; i++)
        cr_expect_eq(exists(names[i]), !left[i].cleared, "%s: %s", names[i],
                     left[i].cleared ? "left" : "cleared");
    cr_expect(exists(locked), "a locked directory was cleared");
    snprintf(path, sizeof path, "%s/mine.txt", r);
    char *mine = exists(path) ? slurp(r, "mine.txt") : NULL;
    cr_expect(mine && !strcmp(mine, "only here\n"), "mine.txt not moved into R");
    free(mine);
    cr_assert_eq(unlink(path), 0);
    struct stat sb;
    cr_expect(stat(from, &sb) == 0 && sb.st_ino == ino && sb.st_nlink == 1, "notes.txt");
    char *got = dir_text(r);
    cr_expect_str_eq(got, want, "R changed");
    free(got);
    /* Killed between the two renames of a filesystem without RENAME_EXCHANGE: R is missing,
     * the previous set aside; the next run puts it back before anything else. */
    char aside[160];
    snprintf(aside, sizeof aside, "%s/.R.rep-old.%ld.00000001", tmpdir, (long)dead);
    cr_assert_eq(rename(r, aside), 0);
    cr_expect_eq(rep_dir_check(r, &err), FC_OK, "%s", err.msg);
    got = dir_text(r);
    cr_expect(got && !strcmp(got, want), "R not put back: %s", got ? got : "missing");
    cr_expect(!exists(aside), "the set aside is still there");
    free(got);
    cr_expect_eq(entries(tmpdir, list, sizeof list), 1 + 4 + 1, "beside R: %s", list); /* R, four
                                                                         * kept, the locked */
    kill(live, SIGKILL);
    kill(locker, SIGKILL);
    waitpid(live, NULL, 0);
    waitpid(locker, NULL, 0);
    free(want);
    remove_tree(tmpdir);
}

/* What a set cannot replace whole is refused before any work, R left as it was: a directory or
 * a special file in R (only files are carried over), and names that cannot be renamed. A
 * symbolic link is followed (the link stays); an older flexcheck's temporaries are dropped. */
Test(files, a_directory_that_cannot_be_replaced_whole_is_refused_before_any_work)
{
    make_tmpdir();
    rep_row prev[NROWS], next[NROWS];
    two_runs(prev, next);
    char r[128], path[512];
    ino_t ino;
    snprintf(r, sizeof r, "%s/R", tmpdir);
    static const char *const what[] = {"a directory 'logs'", "a special file 'pipe'"};
    for (int k = 0; k < 2; k++) {
        set_up(r, prev, &ino);
        snprintf(path, sizeof path, "%s/%s", r, k ? "pipe" : "logs");
        cr_assert_eq(k ? mkfifo(path, 0644) : mkdir(path, 0755), 0, "%s", path);
        char *before = dir_text(r);
        fc_err err = {{0}};
        cr_expect_eq(rep_dir_check(r, &err), FC_EINVAL, "%s: checked as fine", what[k]);
        cr_expect(strstr(err.msg, what[k]) && strstr(err.msg, "move it or choose another "
                                                              "directory"), "%s", err.msg);
        cr_expect_eq(rep_write_all(r, &(rep_set){next, NROWS, test_checks, 2, &test_run}, &err),
                     FC_EINVAL, "%s: written", what[k]);
        char *after = dir_text(r);
        cr_expect_str_eq(after, before, "%s: R changed", what[k]);
        free(before), free(after);
        remove(path);
    }
    static const char *const unnamed[] = {".", "..", "/", "x/..", "x/./"};
    for (size_t k = 0; k < sizeof unnamed / sizeof unnamed[0]; k++) {
        fc_err err = {{0}};
        cr_expect_eq(rep_dir_check(unnamed[k], &err), FC_EINVAL, "'%s' accepted", unnamed[k]);
        cr_expect(strstr(err.msg, "name the directory itself"), "%s", err.msg);
    }
    /* A link to R: R replaced, the link still a link to it. */
    set_up(r, prev, &ino);
    char link_path[160];
    snprintf(link_path, sizeof link_path, "%s/current", tmpdir);
    cr_assert_eq(symlink("R", link_path), 0);
    put_file(r, ".rows.json.AbC123", "{\"run\"");    /* an older writer's, killed */
    put_file(r, ".write-test.XyZ789", "");           /* and its probe */
    write_rows(link_path, next);
    struct stat sb;
    cr_expect(lstat(link_path, &sb) == 0 && S_ISLNK(sb.st_mode), "the link was replaced");
    char list[1024];
    cr_expect_eq(entries(r, list, sizeof list), 7, "R holds %s", list); /* 5 + notes, latest */
    cr_expect(!strstr(list, ".rows.json.") && !strstr(list, ".write-test."), "%s", list);
    remove_tree(tmpdir);
}

/* Nothing forces a mode: files get 0666 and directories 0777 less the umask (a umask 077 run's
 * reports stay private), and a replaced R keeps the mode it had. */
Test(files, take_their_modes_from_the_umask)
{
    make_tmpdir();
    rep_row rows[NROWS];
    make_rows(rows);
    static const mode_t masks[] = {077, 022, 002, 027};
    for (size_t k = 0; k < sizeof masks / sizeof masks[0]; k++) {
        mode_t u = masks[k], was = umask(u);
        char r[160], path[512];
        snprintf(r, sizeof r, "%s/u%03o/new/R", tmpdir, (unsigned)u);
        write_rows(r, rows);
        write_rows(r, rows); /* replacing the set: the same modes */
        umask(was);
        struct stat sb;
        cr_expect(stat(r, &sb) == 0 && (sb.st_mode & 07777) == (0777 & ~u), "umask %03o: R "
                  "mode %o", (unsigned)u, (unsigned)(sb.st_mode & 07777));
        snprintf(path, sizeof path, "%s/u%03o/new", tmpdir, (unsigned)u);
        cr_expect(stat(path, &sb) == 0 && (sb.st_mode & 07777) == (0777 & ~u), "umask %03o: a "
                  "parent made for R: mode %o", (unsigned)u, (unsigned)(sb.st_mode & 07777));
        static const char *const names[] = {REP_FILE_MD, REP_FILE_JSON, REP_FILE_CSV,
                                            REP_FILE_JUNIT, REP_FILE_HTML};
        for (size_t i = 0; i < 5; i++) {
            snprintf(path, sizeof path, "%s/%s", r, names[i]);
            cr_expect(stat(path, &sb) == 0 && (sb.st_mode & 07777) == (0666 & ~u), "umask "
                      "%03o: %s mode %o", (unsigned)u, names[i], (unsigned)(sb.st_mode & 07777));
        }
        cr_assert_eq(chmod(r, 0750), 0);
        write_rows(r, rows);
        cr_expect(stat(r, &sb) == 0 && (sb.st_mode & 07777) == 0750, "umask %03o: a replaced "
                  "R's mode 0750 became %o", (unsigned)u, (unsigned)(sb.st_mode & 07777));
    }
    remove_tree(tmpdir);
}
