/*
 * cmd_check.c - 'flexcheck check FILE...': verify fixture files from any producer. What a file's
 * check does is library code (check/check.h: the oracle confirmed, block masks, our kernel,
 * every output under test, window-edge triples, layout files); this command parses the options,
 * checks each file in a child process (cli/isolate.h), prints each item as it comes and the
 * summary, and writes the report set. Exit 0 all passed, 1 a check failed, 2 a file was
 * rejected (or bad arguments). With --report DIR the judged outputs (tested ones, and our
 * kernel's with --backend emu|gpu) are also written as the gate's report set, one row each; cases
 * and files that could not be judged are error rows there, so the report's totals match the exit
 * status.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check/check.h"
#include "cli/cli.h"
#include "cli/isolate.h"

static const char *const CMD = "check";

#define MAX_LABELS 64

typedef struct opts {
    chk_opts c;             /* what each file's check does */
    const char *labels[MAX_LABELS]; /* --tested, repeatable */
    const char *report_dir; /* NULL: no report files */
    cli_iso iso;            /* each file in a child under this limit (cli/isolate.h) */
    int32_t rows;           /* --rows (fix_budget.rows): FIX_ROWS_AUTO by default */
    uint64_t rows_seed;     /* --rows-seed */
} opts;

/* Each item as check prints it, as it is judged (in the file's child). */
static void print_item(void *ctx, const chk_item *it)
{
    const opts *o = ctx;
    chk_print_item(stdout, stderr, it, &o->c);
}

static void mark_read(void)
{
    cli_iso_set_phase(CLI_ISO_JUDGING); /* read whole: a crash now is not the file's */
}

/* ---- each file in a child (cli/isolate.h) ----
 * The child checks one file into a tally of its own and sends it back: the counters, then the
 * report rows (plain data). A child that dies is one line and an error row here. */

typedef struct file_job {
    const char *path;
    const opts *o;
} file_job;

static int check_file_child(void *arg, cli_iso_chan *ch)
{
    const file_job *j = arg;
    chk_tally t = {0};
    chk_file(j->path, &j->o->c, &t, print_item, (void *)j->o);
    fflush(stdout);
    chk_tally head = t;
    head.rows = NULL;
    head.cap = 0;
    int rc = cli_iso_send(ch, &head, sizeof head) ||
             (t.nrows && cli_iso_send(ch, t.rows, t.nrows * sizeof *t.rows));
    chk_tally_free(&t);
    return rc ? 2 : 0;
}

static void check_file_isolated(const char *path, opts *o, chk_tally *t)
{
    file_job job = {path, o};
    cli_iso_result res;
    fc_err err;
    if (cli_isolated(&o->iso, check_file_child, &job, &res, &err)) {
        t->files++;
        fc_fmt(err.msg + strlen(err.msg), sizeof err.msg - strlen(err.msg), " (%s)", fc_esc(path).s);
        chk_reject(path, err.msg, t, print_item, o);
        return;
    }
    chk_tally c;
    int whole = res.finished && res.status == 0 && res.len >= sizeof c;
    if (whole) {
        memcpy(&c, res.data, sizeof c);
        whole = c.nrows == (res.len - sizeof c) / sizeof(rep_row) &&
                (res.len - sizeof c) % sizeof(rep_row) == 0;
    }
    if (whole) {
        chk_tally_add(t, &c, (const rep_row *)(res.data + sizeof c));
    } else {
        t->files++;
    }
    if (!whole || res.exit_status != 0) { /* it died, or finished with a sanitizer's report */
        char msg[REP_WHY_LEN];
        cli_iso_describe(&o->iso, path, &res, msg, sizeof msg);
        if (whole && c.rejected) /* the file is counted once */
            cli_say(CMD, "%s", msg);
        else
            chk_reject(path, msg, t, print_item, o);
    }
    cli_iso_result_free(&res);
}

/* --backend: ref alone, or emu/gpu (which must be present) to run the kernel too. */
static int parse_backend(const char *cmd, const char *opt, const char *v, void *dst)
{
    chk_opts *o = dst;
    fc_err err;
    fix_backend ref;
    if (!gpu_backend_parse(v, &o->be)) {
        if (!cli_backend_available(o->be, &err)) /* CUDA only in the files' children */
            return cli_usage_error(cmd, "%s %s: %s", opt, v, err.msg), -1;
        o->kernel_backend = 1;
    } else if (fix_backend_parse(v, &ref)) {
        return cli_usage_error(cmd, "%s '%s': ref, emu or gpu", opt, v), -1;
    }
    return 0;
}

/* --tested PATTERN, repeatable: the patterns accumulate (o->c.labels points at o->labels). */
static int parse_label(const char *cmd, const char *opt, const char *v, void *dst)
{
    opts *o = dst;
    if (!v[0])
        return cli_usage_error(cmd, "%s: an empty pattern selects nothing", opt), -1;
    if (o->c.nlabels == MAX_LABELS)
        return cli_usage_error(cmd, "%s: at most %d patterns", opt, MAX_LABELS), -1;
    o->labels[o->c.nlabels++] = v;
    return 0;
}

/* The summary: the cases' own checks (the oracle confirmed, block masks, our kernel) apart from
 * the verdicts on the outputs under test. */
static void print_summary(const chk_tally *t, const chk_opts *o)
{
    printf("check: %d files, %d rejected; %d cases: ", t->files, t->rejected, t->cases);
    if (o->kernel_backend)
        printf("oracle confirmed and kernel %d on %s passed in %d, failed in %d", (int)o->kernel,
               gpu_backend_name(o->be), t->passed, t->failed);
    else
        printf("oracle confirmed in %d, not in %d", t->passed, t->failed);
    if (t->computed) /* "confirmed" above: a computed oracle has nothing to confirm */
        printf(" (%d of them with no stored oracle: computed)", t->computed);
    if (t->sampled)
        printf(", %d judged on a sample of their rows", t->sampled);
    if (t->skipped)
        printf(", %d skipped (the kernel refuses their configuration%s)", t->skipped,
               t->sampled && o->kernel_backend ? ", or does not run on a sample" : "");
    if (t->outside)
        printf(", %d outside the contract", t->outside);
    if (t->tested || o->nlabels)
        printf("; %d outputs under test%s: %d passed, %d failed", t->tested,
               o->nlabels ? " selected by --tested" : "", t->tested_passed, t->tested_failed);
    if (t->tested_outside)
        printf(", %d outside the contract", t->tested_outside);
    if (t->confirmed) /* docs/tolerance.md "Judging a sample": a sample's bounds, confirmed */
        printf("; %d failed on a sample's bounds and were judged again on every row (%d pass "
               "there)", t->confirmed, t->overturned);
    if (t->unconfirmed)
        printf("; %d fail on a sample's bounds alone (not judged again on every row: their "
               "lines say why)", t->unconfirmed);
    printf("\n");
}

int cmd_check(int argc, char **argv)
{
    opts o = {.c = {.be = GPU_BACKEND_EMU, .kernel = GPU_DEFAULT_KERNEL, .on_read = mark_read,
                    .errmsg = cli_iso_errmsg},
              .iso = {CLI_ISO_DEFAULT_MAX_MEMORY, 0, 0}, .rows = FIX_ROWS_AUTO,
              .rows_seed = FIX_ROWS_SEED};
    const cli_opt table[] = {
        CLI_FN("backend", "B", "ref: the reference checks only (default); emu or gpu: also\n"
               "run the kernel on each case and judge it under the gates", parse_backend, &o.c),
        CLI_INT("kernel", "K", "kernel version for emu/gpu, 1, 2 or 3 (default 2)", &o.c.kernel, 1,
                GPU_MAX_KERNEL),
        CLI_FLAG("exact-blocks", "a stored block mask must equal the slow builder's (as sets)",
                 &o.c.exact_blocks, 1),
        CLI_STR("case", "NAME", "only the case NAME of each file", &o.c.only_case),
        CLI_FN("tested", "LABEL", "only the outputs under test labelled LABEL (a shell pattern:\n"
               "'torch-*'); repeatable, an output matching any is judged", parse_label, &o),
        CLI_FLAG("quiet", "print failures and the summary only", &o.c.quiet, 1),
        CLI_FLAG("strict", "rows outside the contract (docs/tolerance.md) fail, and so does a\n"
                 "run in which the kernel judged no case", &o.c.strict, 1),
        CLI_STR("report", "DIR", "also write the judged outputs as a report set in DIR (the\n"
                "gate's files: summary.md, rows.json, rows.csv, junit.xml, report.html)",
                &o.report_dir),
        CLI_FN("max-memory", "BYTES", "each file is read and checked in a child process limited\n"
               "to this much address space, and a case whose estimate exceeds it is refused\n"
               "(K, M, G, T suffixes)", cli_parse_bytes, &o.iso.max_memory),
        CLI_FN("max-work", "N", "refuse a case needing more than N multiply-adds (K, M, G, T\n"
               "suffixes, powers of 1024; default 1T = 2^40)", cli_parse_count, &o.iso.max_work),
        CLI_FN("rows", "N|all|auto", "judge a sample of N query tokens of each case (every batch\n"
               "entry and head; the whole case when N >= Lq), or every row (all); auto, the\n"
               "default: every row when the case fits --max-work and --max-memory, else the\n"
               "largest sample up to " CLI_TEXT(FIX_SAMPLE_ROWS) " tokens that does "
               "(docs/tolerance.md)", cli_parse_rows, &o.rows),
        CLI_FN("rows-seed", "S", "the seed of a sample's uniform part (default "
               CLI_TEXT(FIX_ROWS_SEED) ")", cli_parse_seed, &o.rows_seed),
    };
    char intro[768];
    snprintf(intro, sizeof intro,
             "Validates each fixture file (docs/fixtures.md), recomputes the float64 reference\n"
             "from its inputs and compares it with the stored out/lse (relative %.0e), and\n"
             "checks any stored block mask: sound for the case's mask always, equal to the slow\n"
             "builder's sets with --exact-blocks. Outputs other producers stored under\n"
             "tested/<label> are judged under the gates against the confirmed oracle, one line\n"
             "each. Each file is read and checked in a child process: a file that crashes\n"
             "libhdf5 or exhausts --max-memory is one line on stderr and rejected, and the\n"
             "next file is still checked. Options may follow the files.\n",
             FIX_CHECK_RTOL);
    const cli_spec spec = {
        .cmd = CMD,
        .usage = "usage: flexcheck check [--backend ref|emu|gpu] [--kernel K] [--exact-blocks] "
                 "[--case NAME] [--tested LABEL]... [--quiet] [--strict] [--report DIR] "
                 "[--max-memory BYTES] "
                 "[--max-work N] [--rows N|all|auto] [--rows-seed S] FILE...\n",
        .intro = intro,
        .opts = table,
        .nopts = sizeof table / sizeof table[0],
        .max_operands = CLI_ANY,
        .unknown = "unknown option '%s' (--help)",
        .exit_status = "exit status: 0 all passed, 1 a check failed, 2 a file was rejected.",
    };
    int nfiles, rc = cli_parse(&spec, argc, argv, &nfiles);
    if (rc != CLI_GO)
        return rc;
    if (nfiles == 0)
        return cli_usage_error(CMD, "no fixture files given (--help)");
    fc_err derr;
    if (o.report_dir && rep_dir_check(o.report_dir, &derr)) /* before any work, not after it */
        return cli_usage_error(CMD, "%s", derr.msg);
    o.c.labels = o.labels;
    o.iso.data_limit = o.c.kernel_backend && o.c.be == GPU_BACKEND_CUDA;
    o.c.budget = cli_iso_budget(&o.iso);
    o.c.budget.rows = o.rows;
    o.c.budget.rows_seed = o.rows_seed;
    chk_tally t = {0};
    for (int i = 1; i <= nfiles; i++) /* cli_parse moved the files to argv[1..nfiles] */
        check_file_isolated(argv[i], &o, &t);
    print_summary(&t, &o.c);
    if (o.c.nlabels && t.tested == 0) { /* a selection that selects nothing is a mistake */
        chk_tally_free(&t);
        return cli_usage_error(CMD, "--tested: no output under test of the %d file%s matches %s%s",
                               t.files, t.files == 1 ? "" : "s", o.labels[0],
                               o.c.nlabels > 1 ? " or the other patterns" : "");
    }
    /* A run whose every case the kernel refused judged nothing: say so; --strict fails it. */
    int nothing = o.c.kernel_backend && t.cases > 0 && t.skipped + t.outside == t.cases &&
                  t.tested == 0;
    if (nothing)
        printf("check: the kernel judged none of the %d cases (every one skipped or outside the "
               "contract)%s\n", t.cases, o.c.strict ? "; --strict fails the run" : "");
    fflush(stdout);
    rc = t.rejected                                          ? CLI_BADINPUT
         : t.failed || t.tested_failed || (o.c.strict && nothing) ? CLI_FAIL
                                                                : CLI_PASS;
    if (o.report_dir) { /* after the verdict is printed: a report that fails cannot hide it */
        rep_run run;
        cli_run_identity(&run, "check");
        if (o.c.kernel_backend) {
            rep_set_str(run.backends, sizeof run.backends, gpu_backend_name(o.c.be));
            run.kernel = o.c.kernel;
        }
        run.strict = o.c.strict;
        rep_set set = {.rows = t.rows, .n = t.nrows, .run = &run};
        fc_err err;
        if (t.oom)
            rc = cli_usage_error(CMD, "%s: out of memory for the report rows; not written",
                                 o.report_dir);
        else if (rep_write_all(o.report_dir, &set, &err))
            rc = cli_usage_error(CMD, "%s", err.msg);
        else
            printf("report: %s/%s (%zu rows)\n", fc_esc(o.report_dir).s, REP_FILE_MD, t.nrows);
    }
    chk_tally_free(&t);
    return rc;
}
