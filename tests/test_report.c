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
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "reports/rep.h"

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
        r->b = 1, r->hq = 6, r->hkv = 2, r->lq = r->lk = s->lk, r->d = r->dv = 64;
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
        "case_id,group,b,hq,hkv,lq,lk,d,dv,causal,window,chunk,softcap,sinks,q_block,kv_block,"
        "builder,"
        "backend,producer,kernel,dtype,max_err,mean_err,rmse,nmse,e_lp_max,h1_ratio,floor,lse_err,s1,s2,"
        "degenerate,nan_count,inf_count,empty_rows,outcome,first_fail,gates,reason,explained\r\n";
    make_tmpdir();
    write_report(tmpdir);
    char *s = slurp(tmpdir, REP_FILE_CSV);
    cr_expect(!strncmp(s, header, strlen(header)), "rows.csv header:\n%.400s", s);
    cr_expect_eq(csv_records(s, 40, "rows.csv"), NROWS + 1, "rows.csv: record count");
    cr_expect(strstr(s, "\"m4-empty<&\"\"'>,|x\""), "rows.csv: nasty id not quoted");
    cr_expect(strstr(s, "\"H4 empty rows: row 2 \"\"quoted\"\", comma\nsecond line <b>&\""),
              "rows.csv: reason not quoted");
    cr_expect(strstr(s, ",error,,-------,evaluate: O_gold is NaN at row 0 col 0,\r\n"),
              "rows.csv: error row");
    free(s);
    remove_tree(tmpdir);
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

Test(report, html_is_self_contained_with_four_svg_charts)
{
    make_tmpdir();
    write_report(tmpdir);
    char *s = slurp(tmpdir, REP_FILE_HTML);
    cr_expect(!strncmp(s, "<!DOCTYPE html>", 15), "report.html: doctype");
    cr_expect_eq(count_of(s, "<svg "), 4, "report.html: SVG charts");
    cr_expect_eq(count_of(s, "</svg>"), 4, "report.html: SVG charts closed");
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
        cr_expect_eq(sb.st_mode & 0777, 0644, "%s: mode %o", names[i], sb.st_mode & 0777);
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

/* The set is written as a unit: a set that cannot be written whole leaves every previous file
 * as it was and no temporary file; a successful write leaves none either. Refused up front: a
 * directory under a report file's name. Failing midway: the third rename, after two of the new
 * files are in place, which the message counts. */
static int renames;
static int rename_fails_third(const char *from, const char *to)
{
    return ++renames == 3 ? (errno = EACCES, -1) : rename(from, to);
}

Test(report, the_set_is_written_as_a_unit_and_leaves_no_temporary)
{
    make_tmpdir();
    write_report(tmpdir);
    cr_expect_eq(hidden_entries(tmpdir), 0, "temporaries after a successful write");
    char *json_before = slurp(tmpdir, REP_FILE_JSON), *csv_before = slurp(tmpdir, REP_FILE_CSV);
    rep_row rows[NROWS];
    make_rows(rows);
    rows[0].max_err = 42; /* this run's rows differ from the previous run's */
    fc_err err = {{0}};
    renames = 0;
    rep_rename = rename_fails_third;
    fc_status st = rep_write_all(tmpdir, &(rep_set){rows, NROWS, test_checks, 2, &test_run}, &err);
    rep_rename = rename;
    cr_expect_eq(st, FC_EIO);
    cr_expect(strstr(err.msg, "renaming rows.csv into place failed") &&
                  strstr(err.msg, "2 of 5 files are this run's"), "%s", err.msg);
    char *csv_after = slurp(tmpdir, REP_FILE_CSV);
    cr_expect_str_eq(csv_after, csv_before, "rows.csv (not renamed) changed");
    cr_expect_eq(hidden_entries(tmpdir), 0, "temporaries left after a failed rename");
    free(csv_after);
    char *json_after = slurp(tmpdir, REP_FILE_JSON);
    cr_expect(strcmp(json_after, json_before), "rows.json (renamed) is still the previous one");
    free(json_after);

    char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, REP_FILE_MD);
    cr_assert_eq(unlink(path), 0);
    cr_assert_eq(mkdir(path, 0755), 0);
    snprintf(path, sizeof path, "%s/%s/keep", tmpdir, REP_FILE_MD);
    FILE *f = fopen(path, "w");
    cr_assert(f);
    fclose(f);
    json_before = (free(json_before), slurp(tmpdir, REP_FILE_JSON));
    cr_expect_eq(rep_write_all(tmpdir, &(rep_set){rows, NROWS, test_checks, 2, &test_run}, &err),
                 FC_EINVAL);
    cr_expect(strstr(err.msg, "summary.md is not a regular file; not replaced"), "%s", err.msg);
    json_after = slurp(tmpdir, REP_FILE_JSON);
    cr_expect_str_eq(json_after, json_before, "rows.json changed");
    cr_expect_eq(hidden_entries(tmpdir), 0, "temporaries left after a refused write");
    free(json_before), free(csv_before), free(json_after);
}

Test(report, a_report_directory_is_checked_before_any_work)
{
    make_tmpdir();
    fc_err err = {{0}};
    char path[512];
    snprintf(path, sizeof path, "%s/new/deeper", tmpdir);
    cr_expect_eq(rep_dir_check(path, &err), FC_OK, "%s", err.msg);
    cr_expect_eq(hidden_entries(path), 0, "the probe was left behind");
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
