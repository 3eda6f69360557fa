/*
 * test_cli.c - the flexcheck command line (cli/opts.c and every subcommand's option table),
 * run as a child process (FLEXCHECK_BIN, set by make test).
 *
 * Each subcommand's --help must exit 0 and list every option of its table; the mask options of
 * gen and blockmask are expected from mask_param_table, so a term added to MASK_PARAMS is
 * checked here without an edit. Bad input exits 2 with one line on stderr naming the option
 * (unknown, missing value, out of range), options may follow check's files, long names must be
 * spelled in full, --name=VALUE works, and the mask options store what they are given.
 */
#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "tests/test_tmpdir.h"
#include "fixtures/fix.h"
#include "masks/params.h"

TEST_TMPDIR("clitest")

TestSuite(cli, .init = make_dir, .fini = remove_dir);

#include "tests/test_cli_run.h"

/* 1 iff the help text has an option line "  --name" (then " ARG" or the help) for `name`,
 * with metavar `arg` when not NULL. */
static int lists_option(const char *help, const char *name, const char *arg)
{
    char want[96];
    snprintf(want, sizeof want, "\n  --%s%s%s", name, arg ? " " : "", arg ? arg : "");
    size_t len = strlen(want);
    for (const char *p = strstr(help, want); p; p = strstr(p + 1, want))
        if (p[len] == ' ' || p[len] == '\n')
            return 1;
    return 0;
}

/* Every option of each subcommand's table, with its metavar (NULL: a flag). The mask options
 * are not listed: they come from mask_param_table (with_mask). */
typedef struct opt_name {
    const char *name, *arg;
} opt_name;

typedef struct cmd_opts {
    const char *cmd;
    int with_mask;
    opt_name opts[32];
} cmd_opts;

static const cmd_opts commands[] = {
    {"gate", 0, {{"quick", NULL}, {"full", NULL}, {"filter", "PATTERN"}, {"shard", "I/N"},
                 {"backend", "B"}, {"kernel", "K"}, {"jobs", "N"}, {"seed", "S"},
                 {"report-dir", "DIR"}, {"list", NULL}, {"strict", NULL}}},
    {"check", 0, {{"backend", "B"}, {"kernel", "K"}, {"exact-blocks", NULL}, {"case", "NAME"},
                  {"quiet", NULL}, {"report", "DIR"}, {"strict", NULL},
                  {"max-memory", "BYTES"}, {"max-work", "N"}, {"rows", "N|all|auto"},
                  {"rows-seed", "S"}}},
    {"fill", 0, {{"out", "OUT"}, {"in-place", NULL}, {"force", NULL}, {"max-memory", "BYTES"},
                 {"max-work", "N"}}},
    {"export", 0, {{"quick", NULL}, {"full", NULL}, {"filter", "PATTERN"}, {"shard", "I/N"},
                   {"seed", "S"}, {"out", "DIR"}, {"force", NULL}}},
    {"repro", 0, {{"case", "NAME"}, {"backend", "B"}, {"kernel", "K"}, {"builder", "B"},
                  {"dtype", "T"}, {"worst", "N"}, {"tested", "LABEL"}, {"row", "B,H,Q"},
                  {"max-memory", "BYTES"}, {"max-work", "N"}, {"rows", "N|all|auto"},
                  {"rows-seed", "S"}}},
    {"gen", 1, {{"set", "NAME"}, {"case", NULL}, {"out", "FILE"}, {"out-dir", "DIR"},
                {"force", NULL}, {"name", "NAME"}, {"b", "N"}, {"hq", "N"}, {"hkv", "N"},
                {"lq", "N"}, {"lk", "N"}, {"d", "N"}, {"dv", "N"}, {"dtype", "T"}, {"qb", "N"},
                {"kb", "N"}, {"packed", "LIST"}, {"packed-k", "LIST"}, {"scale", "S"},
                {"seed", "N"}, {"no-block-mask", NULL}, {"no-oracle", NULL}, {"layout", "NAME"},
                {"layers", "N"},
                {"scale-div", "N"}, {"max-memory", "BYTES"}, {"max-work", "N"}}},
    {"blockmask", 1, {{"lq", "N"}, {"lk", "N"}, {"cu-q", "LIST"}, {"cu-k", "LIST"},
                      {"qb", "N"}, {"kb", "N"}, {"layout", "NAME"}, {"layer", "I"},
                      {"scale-div", "N"}, {"builder", "B"}, {"diff", "B"}, {"sound", NULL},
                      {"json", NULL}}},
    {"layout", 0, {{"list", NULL}, {"layers", "N"}, {"scale-div", "N"}}},
    {"bench", 0, {{NULL, NULL}}},
    {"bench blockmask", 0, {{"quick", NULL}, {"l", "N"}, {"json", NULL}}},
    {"bench ref", 0, {{"quick", NULL}, {"L", "N"}, {"D", "N"}, {"mask", "M"}, {"reps", "N"},
                      {"threads", "N"}}},
    {"bench kernel", 0, {{"backend", "B"}, {"kernel", "K"}, {"reps", "N"},
                         {"gpu-shapes", NULL}, {"shape", "I"}}},
    {"report", 0, {{NULL, NULL}}},
    {"report merge", 0, {{"out", "DIR"}, {"force", NULL}}},
};
#define NCOMMANDS (sizeof commands / sizeof commands[0])

Test(cli, every_help_exits_0_and_lists_every_option)
{
    run_out r;
    for (size_t c = 0; c < NCOMMANDS; c++) {
        const cmd_opts *co = &commands[c];
        run_cli(&r, "%s --help", co->cmd);
        cr_assert_eq(r.status, 0, "%s --help: status %d\n%s", co->cmd, r.status, r.err);
        cr_assert(!strncmp(r.out, "usage: flexcheck ", 17), "%s --help:\n%s", co->cmd, r.out);
        cr_assert(strstr(r.out, "\nexit status: "), "%s --help names its exit statuses:\n%s",
                  co->cmd, r.out);
        cr_assert(strstr(r.out, "\n  -h, --help "), "%s", r.out);
        for (int k = 0; co->opts[k].name; k++)
            cr_assert(lists_option(r.out, co->opts[k].name, co->opts[k].arg),
                      "%s --help lacks --%s %s:\n%s", co->cmd, co->opts[k].name,
                      co->opts[k].arg ? co->opts[k].arg : "", r.out);
        for (int i = 0; co->with_mask && i < MASK_NPARAMS; i++) {
            const mask_param_info *p = &mask_param_table[i];
            const char *arg = mask_param_is_flag(i) ? NULL : p->label;
            cr_assert(lists_option(r.out, p->opt, arg),
                      "%s --help lacks the mask option --%s:\n%s", co->cmd, p->opt, r.out);
            cr_assert(strstr(r.out, p->help), "%s --help lacks the help of --%s (%s)", co->cmd,
                      p->opt, p->help);
        }
        /* -h is the same, and help wins over a bad option anywhere on the line. */
        char first[sizeof r.out];
        strcpy(first, r.out);
        run_cli(&r, "%s --no-such-option -h", co->cmd);
        cr_assert_eq(r.status, 0, "%s --no-such-option -h: %s", co->cmd, r.err);
        cr_assert_str_eq(r.out, first);
    }
}

Test(cli, an_unknown_option_exits_2_with_one_line_naming_it)
{
    run_out r;
    for (size_t c = 0; c < NCOMMANDS; c++) {
        run_cli(&r, "%s --no-such-option", commands[c].cmd);
        cr_assert_eq(r.status, 2, "%s: status %d\n%s%s", commands[c].cmd, r.status, r.out,
                     r.err);
        cr_assert_eq(count_lines(r.err), 1, "%s: one line:\n%s", commands[c].cmd, r.err);
        cr_assert(strstr(r.err, "'--no-such-option'"), "%s: %s", commands[c].cmd, r.err);
        char prefix[64];
        snprintf(prefix, sizeof prefix, "flexcheck %s: ", commands[c].cmd);
        cr_assert(!strncmp(r.err, prefix, strlen(prefix)), "%s", r.err);
    }
}

Test(cli, a_missing_value_exits_2_naming_the_option)
{
    static const char *const lines[][2] = {
        {"gate --filter", "--filter"},      {"check --case", "--case"},
        {"repro x.h5 --case", "--case"},    {"gen --case --out", "--out"},
        {"blockmask --lq", "--lq"},         {"layout --layers", "--layers"},
        {"bench blockmask --l", "--l"},     {"bench ref --reps", "--reps"},
        {"bench kernel --reps", "--reps"},  {"report merge --out", "--out"},
    };
    run_out r;
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
        run_cli(&r, "%s", lines[i][0]);
        cr_assert_eq(r.status, 2, "%s: status %d\n%s", lines[i][0], r.status, r.err);
        cr_assert_eq(count_lines(r.err), 1, "%s: %s", lines[i][0], r.err);
        char want[64];
        snprintf(want, sizeof want, "%s needs a value", lines[i][1]);
        cr_assert(strstr(r.err, want), "%s: %s", lines[i][0], r.err);
    }
}

Test(cli, an_out_of_range_integer_exits_2_naming_option_value_and_range)
{
    static const char *const lines[][3] = {
        {"gate --jobs 0", "--jobs", "'0' is not an integer in [1, 256]"},
        {"check --kernel 9 x.h5", "--kernel", "'9' is not an integer in [1, "},
        {"repro x.h5 --case c --worst 1001", "--worst", "'1001' is not an integer in [1, 1000]"},
        {"gen --case --out x.h5 --lq -1", "--lq", "'-1' is not an integer in [0, "},
        {"blockmask --qb 12x", "--qb", "'12x' is not an integer in [1, "},
        {"layout gemma3 --scale-div 0", "--scale-div", "'0' is not an integer in [1, "},
        {"bench ref --L 0", "--L", "'0' is not an integer in [1, "},
    };
    run_out r;
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
        run_cli(&r, "%s", lines[i][0]);
        cr_assert_eq(r.status, 2, "%s: status %d\n%s", lines[i][0], r.status, r.err);
        cr_assert_eq(count_lines(r.err), 1, "%s: %s", lines[i][0], r.err);
        cr_assert(strstr(r.err, lines[i][1]) && strstr(r.err, lines[i][2]), "%s: %s",
                  lines[i][0], r.err);
    }
    /* Every valued mask term, in both commands that take them: below 0 is out of range. */
    static const char *const mask_cmds[] = {"gen --case --out x.h5", "blockmask"};
    for (size_t c = 0; c < 2; c++)
        for (int i = 0; i < MASK_NPARAMS; i++) {
            if (mask_param_is_flag(i))
                continue;
            run_cli(&r, "%s --%s -1", mask_cmds[c], mask_param_table[i].opt);
            char want[128];
            snprintf(want, sizeof want, "--%s: '-1' is not an integer in [0, %d]",
                     mask_param_table[i].opt, (int)mask_param_table[i].max);
            cr_assert_eq(r.status, 2, "%s --%s -1: %s", mask_cmds[c], mask_param_table[i].opt,
                         r.err);
            cr_assert(strstr(r.err, want) && count_lines(r.err) == 1, "%s", r.err);
        }
}

Test(cli, long_names_are_spelled_in_full_and_take_name_equals_value)
{
    run_out r;
    run_cli(&r, "gate --qui --list");
    cr_assert_eq(r.status, 2, "an abbreviation is refused: %s", r.err);
    cr_assert(strstr(r.err, "'--qui'") && count_lines(r.err) == 1, "%s", r.err);
    run_cli(&r, "layout gemma3 --layers 3");
    cr_assert_eq(r.status, 0, "%s", r.err);
    char spaced[sizeof r.out];
    strcpy(spaced, r.out);
    run_cli(&r, "layout --layers=3 gemma3");
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert_str_eq(r.out, spaced, "--layers=3 is --layers 3");
    run_cli(&r, "gate --list=1");
    cr_assert_eq(r.status, 2, "a flag takes no value: %s", r.err);
}

Test(cli, bench_kernel_shape_runs_that_one_shape_and_refuses_one_past_the_set)
{
    run_out r;
    run_cli(&r, "bench kernel --shape 7");
    cr_assert_eq(r.status, 2, "%s", r.out);
    cr_assert_eq(count_lines(r.err), 1, "%s", r.err);
    cr_expect(strstr(r.err, "--shape 7: the set has 6 shapes"), "%s", r.err);
    run_cli(&r, "bench kernel --shape 4 --kernel 1 --reps 1");
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_expect(strstr(r.out, "  S=512 D=64 B=1 H=2 causal  ") && strstr(r.out, "kernel 1:"),
              "%s", r.out);
    cr_expect(!strstr(r.out, "dense"), "only the 4th shape (causal fp32): %s", r.out);
}

Test(cli, bench_kernel_runs_listed_kernels_in_order_and_refuses_a_bad_list)
{
    run_out r;
    run_cli(&r, "bench kernel --shape 4 --kernel 2,1 --reps 1");
    cr_assert_eq(r.status, 0, "%s", r.err);
    const char *k2 = strstr(r.out, "kernel 2:"), *k1 = strstr(r.out, "kernel 1:");
    cr_assert(k2 && k1 && k2 < k1, "kernel 2's line, then kernel 1's: %s", r.out);
    cr_expect(!strstr(r.out, "kernel 3"), "%s", r.out);
    /* causal 512 in 128-blocks: query block i lists i full tiles and its diagonal, partial */
    cr_expect(strstr(k2, "  10 blocks (6 full, 4 partial)\n") &&
                  strstr(k1, "  10 blocks (6 full, 4 partial)\n"),
              "each line ends with the block mask's tiles: %s", r.out);
    static const char *const bad[][2] = {
        {"--kernel 2,2", "--kernel '2,2': kernel 2 named twice"},
        {"--kernel 2,", "--kernel '2,': kernel versions 1 to"},
        {"--kernel 2,4", "--kernel: '4' is not an integer in [1, "},
        {"--kernel ,3", "--kernel ',3': kernel versions 1 to"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        run_cli(&r, "bench kernel --shape 4 --reps 1 %s", bad[i][0]);
        cr_assert_eq(r.status, 2, "%s: %s", bad[i][0], r.out);
        cr_assert_eq(count_lines(r.err), 1, "%s: %s", bad[i][0], r.err);
        cr_expect(strstr(r.err, bad[i][1]), "%s: %s", bad[i][0], r.err);
        cr_expect(!strstr(r.out, "kernel 1:"), "%s: nothing runs: %s", bad[i][0], r.out);
    }
}

Test(cli, layout_prints_each_layers_soft_cap_scale_and_sinks)
{
    run_out r;
    run_cli(&r, "layout gemma2-27b --layers 2 --scale-div 64");
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strstr(r.out, "softcap") && strstr(r.out, "scale") && strstr(r.out, "sinks"),
              "the header names the columns: %s", r.out);
    /* 144^-0.5 = 1/12; the cap is not a length and keeps 50 at any --scale-div. */
    cr_expect(strstr(r.out, "    0  local         1      64      0       50  0.08333333    off"),
              "%s", r.out);
    cr_expect(strstr(r.out, "    1  full          1       0      0       50  0.08333333    off"),
              "%s", r.out);
    run_cli(&r, "layout gpt-oss-120b --layers 2");
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_expect(strstr(r.out, "    0  local         1     128      0        0  1/sqrt(D)     on"),
              "%s", r.out);
    cr_expect(strstr(r.out, "    1  full          1       0      0        0  1/sqrt(D)     on"),
              "%s", r.out);
}

Test(cli, check_takes_options_after_its_files)
{
    run_out r;
    run_cli(&r, "gen --case --lq 8 --d 4 --qb 16 --kb 16 --out '%s/a.h5'", dir);
    cr_assert_eq(r.status, 0, "%s", r.err);
    run_cli(&r, "gen --case --lq 9 --d 4 --qb 16 --kb 16 --causal --out '%s/b.h5'", dir);
    cr_assert_eq(r.status, 0, "%s", r.err);
    run_cli(&r, "check --quiet --exact-blocks '%s/a.h5' '%s/b.h5'", dir, dir);
    cr_assert_eq(r.status, 0, "%s%s", r.out, r.err);
    char before[sizeof r.out];
    strcpy(before, r.out);
    cr_assert(strstr(before, "2 files, 0 rejected; 2 cases: oracle confirmed in 2") && !strstr(before, "PASS"),
              "--quiet: the summary only: %s", before);
    run_cli(&r, "check '%s/a.h5' --quiet '%s/b.h5' --exact-blocks", dir, dir);
    cr_assert_eq(r.status, 0, "%s%s", r.out, r.err);
    cr_assert_str_eq(r.out, before, "options after and between the files act the same");
    run_cli(&r, "check '%s/a.h5' --case nope", dir);
    cr_assert_eq(r.status, 2, "--case after the file applies to it: %s%s", r.out, r.err);
    cr_assert(strstr(r.err, "no case named 'nope'"), "%s", r.err);
}

Test(cli, the_mask_options_store_what_they_are_given)
{
    /* blockmask --json prints every mask term by name: each option lands in its own term. */
    run_out r;
    for (int i = 0; i < MASK_NPARAMS; i++) {
        const mask_param_info *p = &mask_param_table[i];
        int flag = mask_param_is_flag(i);
        run_cli(&r, "blockmask --lq 64 --lk 64 --qb 16 --kb 16 --json --%s%s", p->opt,
                flag ? "" : " 7");
        cr_assert_eq(r.status, 0, "--%s: %s", p->opt, r.err);
        for (int j = 0; j < MASK_NPARAMS; j++) {
            char want[96];
            snprintf(want, sizeof want, "\"%s\":%d", mask_param_table[j].name,
                     j != i ? 0 : flag ? 1 : 7);
            cr_assert(strstr(r.out, want), "--%s: want %s in %.300s", p->opt, want, r.out);
        }
    }
}

/* ---- isolation's option and the messages of a missing file, directory or device ---- */

/* A one-case file for the commands below. */
static void gen_small(const char *name)
{
    run_out r;
    run_cli(&r, "gen --case --lq 8 --d 4 --qb 16 --kb 16 --causal --out '%s/%s'", dir, name);
    cr_assert_eq(r.status, 0, "%s", r.err);
}

Test(cli, max_memory_takes_bytes_with_a_suffix_and_refuses_anything_else)
{
    gen_small("a.h5");
    run_out r;
    static const char *const bad[] = {"check --max-memory 12X '%s/a.h5'",
                                      "check --max-memory 100M '%s/a.h5'",
                                      "repro '%s/a.h5' --max-memory 3.5G",
                                      "fill '%s/a.h5' --out x.h5 --max-memory -1G"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        run_cli(&r, bad[i], dir);
        cr_expect_eq(r.status, 2, "%s: status %d", bad[i], r.status);
        cr_expect(count_lines(r.err) == 1 && strstr(r.err, "--max-memory '") &&
                      strstr(r.err, "a size in bytes of at least 512M"),
                  "%s: %s", bad[i], r.err);
    }
    run_cli(&r, "check --max-memory 1g '%s/a.h5'", dir);
    cr_expect_eq(r.status, 0, "lower-case suffix: %s%s", r.out, r.err);
    run_cli(&r, "check --max-memory=17179869184 '%s/a.h5'", dir);
    cr_expect_eq(r.status, 0, "plain bytes: %s%s", r.out, r.err);
}

Test(cli, a_missing_file_is_named_as_missing_by_check_repro_and_fill)
{
    static const char *const lines[] = {"check '%s/nope.h5'", "repro '%s/nope.h5' --case c",
                                        "fill '%s/nope.h5' --in-place"};
    run_out r;
    char want[128];
    snprintf(want, sizeof want, "%s/nope.h5: no such file\n", dir);
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
        run_cli(&r, lines[i], dir);
        cr_expect_eq(r.status, 2, "%s: status %d", lines[i], r.status);
        cr_expect(count_lines(r.err) == 1 && strstr(r.err, want), "%s: %s", lines[i], r.err);
    }
}

Test(cli, writing_into_a_missing_directory_says_it_does_not_exist)
{
    run_out r;
    run_cli(&r, "gen --case --out '%s/no/such/dir/x.h5'", dir);
    cr_expect_eq(r.status, 2);
    char want[160];
    snprintf(want, sizeof want, "the directory %s/no/such/dir does not exist", dir);
    cr_expect(count_lines(r.err) == 1 && strstr(r.err, want), "%s", r.err);
    run_cli(&r, "gen --case --lq 8 --d 4 --qb 16 --kb 16 --out '%s/a.h5'", dir);
    cr_assert_eq(r.status, 0, "%s", r.err);
    run_cli(&r, "fill '%s/a.h5' --out '%s/none/b.h5'", dir, dir);
    cr_expect_eq(r.status, 2);
    snprintf(want, sizeof want, "the directory %s/none does not exist", dir);
    cr_expect(strstr(r.err, want), "fill's --out too: %s", r.err);
    run_cli(&r, "export --quick --filter m4-p-round-f16 --out '%s/none/sub'", dir);
    cr_expect_eq(r.status, 2);
    cr_expect(strstr(r.err, want) && count_lines(r.err) == 1, "export's --out: %s", r.err);
}

Test(cli, repro_of_a_one_case_file_needs_no_case_and_of_several_lists_them)
{
    gen_small("one.h5");
    run_out r;
    run_cli(&r, "repro '%s/one.h5' --kernel 1", dir);
    cr_expect_eq(r.status, 0, "%s%s", r.out, r.err);
    char want[160];
    snprintf(want, sizeof want, "rerun: flexcheck repro %s/one.h5 --case c0001 ", dir);
    cr_expect(strstr(r.out, want), "the case told is named in the rerun line:\n%s", r.out);
    /* 12 layers: the first 10 are named, then how many more. */
    run_cli(&r, "gen --case --lq 9 --d 4 --qb 16 --kb 16 --causal --layout gemma3 --layers 12 "
                "--scale-div 64 --out '%s/layers.h5'", dir);
    cr_assert_eq(r.status, 0, "%s", r.err);
    run_cli(&r, "repro '%s/layers.h5'", dir);
    cr_expect_eq(r.status, 2);
    cr_expect(count_lines(r.err) == 1 &&
                  strstr(r.err, "holds 12 cases: name one with --case NAME") &&
                  strstr(r.err, "(layer00, layer01, ") &&
                  strstr(r.err, "layer09, ... (2 more))") && !strstr(r.err, "layer10"),
              "%s", r.err);
}

Test(cli, no_cuda_device_is_said_so_with_the_drivers_words)
{
    gen_small("a.h5");
    run_out r;
    static const char *const lines[] = {"check --backend gpu '%s/a.h5'",
                                        "repro '%s/a.h5' --backend gpu --kernel 1"};
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
        run_cli(&r, lines[i], dir);
        if (r.status != 2 || strstr(r.err, "this build has no CUDA backend"))
            cr_skip_test("a CUDA device is present, or this build has no CUDA backend: %s",
                         r.err);
        cr_expect(count_lines(r.err) == 1 &&
                      strstr(r.err, "--backend gpu: no CUDA device (driver: ") &&
                      !strstr(r.err, "cudaGetDeviceCount"),
                  "%s: %s", lines[i], r.err);
    }
}

/* The budgets from the command line: a case of B 1, Hq 2, Lq 20, Lk 24, D = Dv = 4 needs
 * 2 * 20 * 24 * 8 = 7680 multiply-adds; check, repro and fill refuse it under --max-work 7K
 * (7168), each with one line naming the figure and the flag, and accept it under 8K. */
Test(cli, the_work_budget_is_the_commands_to_raise_or_lower)
{
    run_out r;
    char f[64];
    snprintf(f, sizeof f, "/tmp/flexcheck-budget-%d.h5", (int)getpid());
    run_cli(&r, "gen --case --out %s --force --hq 2 --hkv 1 --lq 20 --lk 24 --d 4 --dv 4", f);
    cr_assert_eq(r.status, 0, "gen: %s", r.err);
    static const char *const cmds[] = {"check --max-work 7K %s", "repro --max-work 7K %s",
                                       "fill --max-work 7K --in-place %s"};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        run_cli(&r, cmds[i], f);
        cr_expect_eq(r.status, 2, "%s: status %d\n%s%s", cmds[i], r.status, r.out, r.err);
        cr_expect(strstr(r.err, "need about 7.68e+03 multiply-adds, over the work budget of "
                                "7.17e+03: raise it with --max-work"), "%s: %s", cmds[i], r.err);
    }
    run_cli(&r, "check --max-work 8K %s", f);
    cr_expect_eq(r.status, 0, "under 8K: %s%s", r.out, r.err);
    run_cli(&r, "gen --case --out %s --force --lq 64 --lk 64 --max-work 1K", f);
    cr_expect(r.status == 2 && strstr(r.err, "over the work budget of 1.02e+03"), "gen: %s",
              r.err);
    run_cli(&r, "check --max-work 0 %s", f);
    cr_expect(r.status == 2 && strstr(r.err, "--max-work '0': a positive count"), "%s", r.err);
    /* The estimate is the reference's own work, the key hull of each panel of 128 query rows:
     * a packed causal W = 8 case of two 200-token sequences (Hq 2, D = Dv = 4) needs
     * 128 * 128 + 128 * 135 + 128 * 135 + 16 * 23 = 51,312 pairs x 8 x 2 = 820,992
     * multiply-adds (dense: 400 * 400 * 8 * 2 = 2,560,000), so it runs under --max-work 1M,
     * read after its sequences, and is refused under 800K. */
    run_cli(&r, "gen --case --out %s --force --packed 0,200,400 --causal --window 8 --d 4 --dv 4",
            f);
    cr_assert_eq(r.status, 0, "gen: %s", r.err);
    run_cli(&r, "check --max-work 1M %s", f);
    cr_expect_eq(r.status, 0, "under 1M: %s%s", r.out, r.err);
    run_cli(&r, "check --rows all --max-work 800K %s", f);
    cr_expect(r.status == 2 && strstr(r.err, "need about 8.21e+05 multiply-adds"), "%s", r.err);
    /* without --rows all, check judges the largest sample that fits instead (test_sample.c) */
    run_cli(&r, "check --max-work 800K %s", f);
    cr_expect(r.status == 0 && strstr(r.out, "judged a sample: "), "%s%s", r.out, r.err);
    unlink(f);
}

/* ---- numbers on the command line: decimal, nothing around them, messages that say why ---- */

Test(cli, shard_takes_two_plain_whole_numbers_in_range)
{
    /* Each was read as some shard before (sscanf "%d/%d"): N wrapped to 1, spaces and signs
     * skipped, a trailing part ignored. */
    static const char *const bad[] = {"1/4294967297", " 1/8", "1/8 ", "+1/8", "1/+8", "0/4",
                                      "5/4", "1/0", "1/10001", "1/-8", "-1/8", "1/", "/8", "1",
                                      "1/8/2", "1//8", "0x1/8", "1/8x", ""};
    run_out r;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        run_cli(&r, "gate --quick --list --shard '%s'", bad[i]);
        char want[64];
        snprintf(want, sizeof want, "--shard '%s': expected I/N", bad[i]);
        cr_expect(r.status == 2 && count_lines(r.err) == 1 && strstr(r.err, want) && !r.out[0],
                  "--shard '%s': status %d\n%s%.200s", bad[i], r.status, r.err, r.out);
    }
    run_cli(&r, "export --quick --shard 1/4294967297 --out '%s/x'", dir);
    cr_expect(r.status == 2 && strstr(r.err, "--shard '1/4294967297': expected I/N"), "%s",
              r.err);
    /* Shard I of N is the filtered cases at positions I-1, I-1+N, ... of the whole list. */
    run_cli(&r, "gate --quick --list");
    cr_assert_eq(r.status, 0, "%s", r.err);
    char whole[sizeof r.out], want[sizeof r.out] = "";
    strcpy(whole, r.out);
    int k = 0;
    for (char *line = strtok(whole, "\n"); line; line = strtok(NULL, "\n"), k++)
        if (k % 8 == 2)
            strcat(strcat(want, line), "\n");
    run_cli(&r, "gate --quick --list --shard 3/8");
    cr_expect(r.status == 0 && !strcmp(r.out, want), "3/8:\n%s\nwant:\n%s", r.out, want);
    run_cli(&r, "gate --quick --list --shard 03/08");
    cr_expect(r.status == 0 && !strcmp(r.out, want), "leading zeros are still decimal: %s",
              r.err);
}

Test(cli, integer_and_number_options_are_decimal_only)
{
    /* strtol took leading space and '+', strtod hex, inf and nan: now both read only
     * [-]digits (an integer) or [-]digits[.digits][e[+-]digits] (a number). */
    static const char *const ints[][2] = {
        {"gen --case --out '%s/x.h5' --lq ' 10'", "--lq: ' 10' is not an integer in [0, "},
        {"gen --case --out '%s/x.h5' --lq +10", "--lq: '+10' is not an integer in [0, "},
        {"gen --case --out '%s/x.h5' --lq 0x10", "--lq: '0x10' is not an integer in [0, "},
        {"gen --case --out '%s/x.h5' --lq '10 '", "--lq: '10 ' is not an integer in [0, "},
        {"gen --case --out '%s/x.h5' --lq 99999999999999999999",
         "--lq: '99999999999999999999' is not an integer in [0, "},
        {"gate --quick --list --seed ' 5' --report-dir '%s/r'", "--seed: ' 5' is not an integer"},
        {"gen --case --out '%s/x.h5' --scale 0x10", "--scale: '0x10' is not a decimal number"},
        {"gen --case --out '%s/x.h5' --scale ' 1'", "--scale: ' 1' is not a decimal number"},
        {"gen --case --out '%s/x.h5' --scale +1", "--scale: '+1' is not a decimal number"},
        {"gen --case --out '%s/x.h5' --scale inf", "--scale: 'inf' is not a decimal number"},
        {"gen --case --out '%s/x.h5' --scale nan", "--scale: 'nan' is not a decimal number"},
        {"gen --case --out '%s/x.h5' --scale 1e", "--scale: '1e' is not a decimal number"},
        {"gen --case --out '%s/x.h5' --scale .", "--scale: '.' is not a decimal number"},
        {"gen --case --out '%s/x.h5' --softcap 0x1p4", "--softcap: '0x1p4' is not a decimal"},
        {"gen --case --out '%s/x.h5' --scale 1e-320",
         "--scale: '1e-320' is out of range (nonzero magnitude below 2.2e-308"},
        {"gen --case --out '%s/x.h5' --scale 1e-400",
         "--scale: '1e-400' is out of range (nonzero magnitude below 2.2e-308"},
        {"gen --case --out '%s/x.h5' --scale 1e400",
         "--scale: '1e400' is out of range (magnitude above 1.8e+308)"},
    };
    run_out r;
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        run_cli(&r, ints[i][0], dir);
        cr_expect(r.status == 2 && count_lines(r.err) == 1 && strstr(r.err, ints[i][1]),
                  "%s: status %d: %s", ints[i][0], r.status, r.err);
    }
    char f[160];
    snprintf(f, sizeof f, "%s/x.h5", dir);
    cr_expect(access(f, F_OK) != 0, "no file was written");
    /* What a number looks like is still read: a point on either side, a signed exponent. */
    static const char *const good[] = {"--scale .5", "--scale 5.", "--scale 1.25e-1",
                                       "--scale 2E+0", "--softcap 0", "--lq 010"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        run_cli(&r, "gen --case --lq 8 --d 4 --qb 16 --kb 16 --force --out '%s' %s", f, good[i]);
        cr_expect_eq(r.status, 0, "%s: %s", good[i], r.err);
    }
}

Test(cli, a_size_or_count_too_large_is_said_to_be_too_large)
{
    gen_small("a.h5");
    run_out r;
    run_cli(&r, "check --max-memory 99999999999T '%s/a.h5'", dir);
    cr_expect(r.status == 2 && count_lines(r.err) == 1 &&
                  strstr(r.err, "--max-memory '99999999999T': too large (above 2^64 - 1 bytes)"),
              "not 'at least 512M': %s", r.err);
    run_cli(&r, "check --max-work 99999999999999999999 '%s/a.h5'", dir);
    cr_expect(r.status == 2 && strstr(r.err, "--max-work '99999999999999999999': too large"),
              "%s", r.err);
    run_cli(&r, "check --max-memory ' 1G' '%s/a.h5'", dir);
    cr_expect(r.status == 2 && strstr(r.err, "a size in bytes of at least 512M"), "%s", r.err);
    run_cli(&r, "check --max-memory 16777215T '%s/a.h5'", dir);
    cr_expect_eq(r.status, 0, "the largest whole T a size_t holds: %s", r.err);
}

Test(cli, repro_row_takes_three_plain_integers)
{
    gen_small("one.h5");
    static const char *const bad[] = {" 0,0,3", "0,0,+3", "0, 0,3", "0,0", "0,0,3,", "0,,3",
                                      ",0,3", "0,0,3 ", "0x0,0,3"};
    run_out r;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        run_cli(&r, "repro '%s/one.h5' --kernel 1 --row '%s'", dir, bad[i]);
        char want[64];
        snprintf(want, sizeof want, "--row '%s': want B,H,Q (three integers)", bad[i]);
        cr_expect(r.status == 2 && count_lines(r.err) == 1 && strstr(r.err, want), "%s: %s",
                  bad[i], r.err);
    }
    run_cli(&r, "repro '%s/one.h5' --kernel 1 --row 0,1,3", dir);
    cr_expect(r.status == 0 && strstr(r.out, "--row 0,1,3"), "%s", r.err);
}

/* ---- what --filter and --shard select, and what a selection of nothing says ---- */

/* The whole stdout of `flexcheck ARGS` (heap; a matrix's id list outgrows run_out). */
static char *stdout_of(const char *args)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "OPENBLAS_NUM_THREADS=1 %s %s", getenv("FLEXCHECK_BIN"), args);
    FILE *p = popen(cmd, "r");
    cr_assert(p, "%s", cmd);
    size_t n = 0, cap = 1 << 16;
    char *buf = malloc(cap);
    for (size_t got; buf && (got = fread(buf + n, 1, cap - n - 1, p)) > 0;)
        if ((n += got) + 1 == cap)
            buf = realloc(buf, cap *= 2);
    pclose(p);
    cr_assert(buf);
    buf[n] = '\0';
    return buf;
}

Test(cli, a_whole_case_id_filter_selects_that_case_alone)
{
    if (!getenv("FLEXCHECK_BIN"))
        cr_skip_test("FLEXCHECK_BIN is not set (make test sets it)");
    /* The full matrix's ids, one a line; a pair where one id is part of the other. */
    char *all = stdout_of("gate --full --list");
    char *ids[2048];
    int n = 0;
    for (char *line = strtok(all, "\n"); line && n < 2048; line = strtok(NULL, "\n"))
        ids[n++] = line;
    const char *part = NULL;
    for (int i = 0; i < n && !part; i++)
        for (int j = 0; j < n && !part; j++)
            if (i != j && strstr(ids[j], ids[i]))
                part = ids[i];
    if (!part) {
        free(all);
        cr_skip_test("no case id of the full matrix is part of another");
    }
    char args[256], want[160];
    snprintf(want, sizeof want, "%s\n", part);
    static const char *const forms[] = {"%s", "%s@L03", "%s@W-1"};
    for (size_t f = 0; f < sizeof forms / sizeof forms[0]; f++) {
        char filter[160];
        snprintf(filter, sizeof filter, forms[f], part);
        snprintf(args, sizeof args, "gate --full --list --filter '%s'", filter);
        char *got = stdout_of(args);
        cr_expect_str_eq(got, want, "--filter %s selects that case alone", filter);
        free(got);
    }
    /* A glob still selects both, and a part of an id still every id holding it. */
    snprintf(args, sizeof args, "gate --full --list --filter '%s*'", part);
    char *glob = stdout_of(args);
    cr_expect(count_lines(glob) >= 2, "the glob %s*: %s", part, glob);
    free(glob);
    char *sub = stdout_of("gate --quick --list --filter m4-window-edge");
    cr_expect(count_lines(sub) >= 2, "a substring: %s", sub);
    free(sub);
    free(all);
}

Test(cli, an_empty_shard_says_it_is_the_shard_not_the_filter)
{
    run_out r;
    run_cli(&r, "gate --quick --list");
    int total = count_lines(r.out);
    run_cli(&r, "gate --quick --shard %d/%d --report-dir '%s/r1'", total + 1, total + 30, dir);
    char want[160];
    snprintf(want, sizeof want, "--shard %d/%d holds no case: the quick matrix has only %d "
             "cases (use N <= %d)\n", total + 1, total + 30, total, total);
    cr_expect(r.status == 2 && count_lines(r.err) == 1 && strstr(r.err, want), "%s", r.err);
    /* A filter matching one case: its shard 2/2 is empty, and the message counts that case. */
    run_cli(&r, "gate --quick --list --filter m4-window-edge-f32");
    cr_assert(r.status == 0 && count_lines(r.out) == 1, "%s", r.out);
    run_cli(&r, "export --quick --filter m4-window-edge-f32 --shard 2/2 --out '%s/ex'", dir);
    cr_expect(r.status == 2 && count_lines(r.err) == 1 &&
                  strstr(r.err, "--shard 2/2 holds no case: only 1 case of the quick matrix "
                                "matches --filter 'm4-window-edge-f32' (use N <= 1)"),
              "%s", r.err);
    run_cli(&r, "gate --quick --filter nomatch-xyz --report-dir '%s/r1'", dir);
    cr_expect(r.status == 2 && strstr(r.err, "no case of the quick matrix matches --filter "
                                             "'nomatch-xyz'"), "%s", r.err);
    run_cli(&r, "gate --quick --list --shard %d/%d", total + 1, total + 30);
    cr_expect(r.status == 0 && !r.out[0] && !r.err[0], "--list of nothing lists nothing");
}

Test(cli, bad_input_leaves_no_empty_report_or_export_directory)
{
    run_out r;
    char d[160];
    static const char *const lines[] = {
        "gate --quick --filter nomatch-xyz --report-dir '%s'",
        "gate --quick --shard 200/200 --report-dir '%s'",
        "gate --quick --filter m4-window-edge-f32 --shard 2/2 --report-dir '%s'",
        "export --quick --filter nomatch-xyz --out '%s'",
    };
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
        snprintf(d, sizeof d, "%s/rg%zu/sub", dir, i);
        run_cli(&r, lines[i], d);
        cr_expect_eq(r.status, 2, "%s", r.err);
        snprintf(d, sizeof d, "%s/rg%zu", dir, i);
        cr_expect(access(d, F_OK) != 0, "%s: %s was left behind", lines[i], d);
    }
    /* No device: refused before anything is made (skipped where one is present). */
    snprintf(d, sizeof d, "%s/rgpu", dir);
    run_cli(&r, "gate --quick --filter m4-window-edge-f32 --backend gpu --report-dir '%s'", d);
    if (r.status == 2)
        cr_expect(access(d, F_OK) != 0, "--backend gpu without a device: %s left", d);
    /* A directory that was there stays, empty or not. */
    snprintf(d, sizeof d, "%s/there", dir);
    cr_assert_eq(mkdir(d, 0777), 0);
    run_cli(&r, "gate --quick --filter nomatch-xyz --report-dir '%s'", d);
    cr_expect(r.status == 2 && access(d, F_OK) == 0, "%s was removed", d);
}

Test(cli, a_stopped_gate_writes_no_report_and_makes_no_directory)
{
    if (!getenv("FLEXCHECK_BIN"))
        cr_skip_test("FLEXCHECK_BIN is not set (make test sets it)");
    /* Stopped once it runs cases (its first line), it finishes the case it holds and writes
     * nothing: neither of the two missing levels of its report directory is made. */
    char cmd[1024], d[160];
    snprintf(d, sizeof d, "%s/stopped", dir);
    snprintf(cmd, sizeof cmd,
             "e='%s/gate.err'; OPENBLAS_NUM_THREADS=1 %s gate --quick --jobs 1 --report-dir "
             "'%s/a' 2>\"$e\" >/dev/null & p=$!; until grep -q 'cases on' \"$e\"; do "
             "sleep 0.1; kill -0 $p || exit 9; done; kill -INT $p; wait $p",
             dir, getenv("FLEXCHECK_BIN"), d);
    int st = system(cmd);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 130, "status %d", st);
    char err[4096];
    slurp("gate.err", err, sizeof err);
    cr_expect(strstr(err, "stopped by SIGINT after ") && strstr(err, "no report written\n"),
              "%s", err);
    cr_expect(access(d, F_OK) != 0, "%s was left behind", d);
}

/* ---- options that contradict each other are refused, a repeated one keeps its last value ---- */

Test(cli, contradicting_options_are_refused_not_settled_by_order)
{
    static const char *const lines[][2] = {
        {"gate --quick --full --list", "--quick and --full exclude each other"},
        {"gate --full --list --quick", "--quick and --full exclude each other"},
        {"export --quick --full --out '%s/ex'", "--quick and --full exclude each other"},
        {"repro '%s/a.h5' --tested eng --kernel 1", "--kernel does not apply with --tested"},
        {"repro '%s/a.h5' --kernel 2 --tested eng", "--kernel does not apply with --tested"},
        {"repro '%s/a.h5' --tested eng --dtype float16", "--dtype does not apply with --tested"},
        {"repro '%s/a.h5' --tested eng --backend emu", "--backend does not apply with --tested"},
    };
    gen_small("a.h5");
    run_out r;
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
        run_cli(&r, lines[i][0], dir);
        cr_expect(r.status == 2 && count_lines(r.err) == 1 && strstr(r.err, lines[i][1]) &&
                      !r.out[0], "%s: status %d: %s", lines[i][0], r.status, r.err);
    }
    char ex[160];
    snprintf(ex, sizeof ex, "%s/ex", dir);
    cr_expect(access(ex, F_OK) != 0, "export made %s", ex);
    /* The same flag twice is no contradiction; a repeated value keeps the last. */
    run_cli(&r, "gate --quick --quick --list");
    int twice = count_lines(r.out);
    run_cli(&r, "gate --quick --list");
    cr_expect(r.status == 0 && count_lines(r.out) == twice, "%s", r.err);
    run_cli(&r, "layout gemma3 --layers 5 --layers 3");
    char last[sizeof r.out];
    strcpy(last, r.out);
    run_cli(&r, "layout gemma3 --layers 3");
    cr_expect_str_eq(last, r.out, "--layers 5 --layers 3 is --layers 3");
}

/* ---- the message names what is wrong: a value given to a flag, an option before bench's part */

Test(cli, a_flag_given_a_value_is_said_to_take_none)
{
    static const char *const lines[][2] = {
        {"check --quiet=yes x.h5", "--quiet takes no value: '--quiet=yes'"},
        {"gate --list=1", "--list takes no value: '--list=1'"},
        {"blockmask --causal=1 --lq 4", "--causal takes no value: '--causal=1'"},
        {"gate --lis=1", "unknown option '--lis=1'"}, /* an abbreviation stays unknown */
        {"gate --quiet=1", "unknown option '--quiet=1'"},
    };
    run_out r;
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
        run_cli(&r, "%s", lines[i][0]);
        cr_expect(r.status == 2 && count_lines(r.err) == 1 && strstr(r.err, lines[i][1]),
                  "%s: status %d: %s", lines[i][0], r.status, r.err);
    }
}

Test(cli, bench_says_an_option_goes_after_a_part_and_names_the_parts)
{
    static const char *const lines[][2] = {
        {"bench --quick", "unknown option '--quick' for bench: options go after a part"},
        {"bench all --quick", "unknown option '--quick' for bench: options go after a part"},
        {"bench all ref", "all takes no options: 'ref'"},
        {"bench nope", "unknown part 'nope' (one of blockmask, ref, kernel, judge, long, all)"},
    };
    run_out r;
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
        run_cli(&r, "%s", lines[i][0]);
        cr_expect(r.status == 2 && count_lines(r.err) == 1 && strstr(r.err, lines[i][1]) &&
                      !r.out[0], "%s: status %d: %s", lines[i][0], r.status, r.err);
    }
    run_cli(&r, "bench --quick");
    cr_expect(strstr(r.err, "(PART one of blockmask, ref, kernel, judge, long)"), "%s", r.err);
}

/* ---- README's synopses ---- */

Test(cli, readme_synopses_name_every_option_of_gate_check_and_repro)
{
    FILE *f = fopen("README.md", "r");
    if (!f)
        cr_skip_test("README.md is not in the working directory (make test runs from the top)");
    static char text[1 << 20];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    static const char *const cmds[] = {"gate", "check", "repro"};
    for (size_t c = 0; c < sizeof cmds / sizeof cmds[0]; c++) {
        char start[32];
        snprintf(start, sizeof start, "\nflexcheck %s ", cmds[c]);
        const char *line = strstr(text, start);
        cr_assert(line, "README has no synopsis line for %s", cmds[c]);
        line++;
        size_t len = strcspn(line, "\n");
        const cmd_opts *co = NULL;
        for (size_t k = 0; k < NCOMMANDS; k++)
            if (!strcmp(commands[k].cmd, cmds[c]))
                co = &commands[k];
        cr_assert(co);
        for (int k = 0; co->opts[k].name; k++) {
            /* "[--name ...]" or "[--other|--name]": a whole option name, as written. */
            char want[48];
            snprintf(want, sizeof want, "--%s", co->opts[k].name);
            size_t w = strlen(want);
            int found = 0;
            for (const char *h = strstr(line, want); h && h < line + len; h = strstr(h + 1, want))
                found |= (h[-1] == '[' || h[-1] == '|') && strchr("] |", h[w]) && h[w];
            cr_expect(found, "README's %s synopsis lacks --%s: %.*s", cmds[c], co->opts[k].name,
                      (int)len, line);
        }
    }
}

/* ---- the default memory budget in --help (fixtures/fix.h, fix_default_case_bytes) ---- */

/* Every --max-memory help says the figure the command takes by default on this machine, in a
 * form --max-memory takes back: whole GiB as G, else whole MiB as M. */
Test(cli, every_max_memory_help_names_this_machines_default)
{
    uint64_t d = fix_default_case_bytes(), gib = (uint64_t)1 << 30;
    char want[64];
    snprintf(want, sizeof want, "(default here %llu%s = ",
             (unsigned long long)(d % gib ? d >> 20 : d / gib), d % gib ? "M" : "G");
    static const char *const cmds[] = {"check", "repro", "fill", "gen"};
    run_out r;
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        run_cli(&r, "%s --help", cmds[i]);
        const char *opt = strstr(r.out, "\n  --max-memory BYTES");
        const char *next = opt ? strstr(opt + 1, "\n  --") : NULL;
        const char *at = opt ? strstr(opt, want) : NULL;
        cr_expect(at && next && at < next && !strstr(opt, "default 16G"),
                  "%s --help: want '%s' under --max-memory:\n%s", cmds[i], want, r.out);
    }
}

/* ---- a child's exit status (cli/isolate.c) ----
 * The parent reads each child's fate from its wait status: killed by a signal, or exited with a
 * status, and a status other than 0 fails the file even when the child had finished (a
 * sanitizer's report at exit does that). A library preloaded into flexcheck makes its children,
 * and only them (processes whose parent runs the same program), end with a status of their own:
 * 131 at exit, after finishing (its high bit set, so no mask narrower than the status's 8 bits
 * reads it right), or 5 as the child opens the file, before finishing. The STALL variant makes
 * a child's libhdf5 hang between two dataset reads (the watchdog's nested steps, below). */

static const char shim_src[] =
    "#define _GNU_SOURCE\n"
    "#include <dlfcn.h>\n#include <stdio.h>\n#include <string.h>\n#include <unistd.h>\n"
    "static int in_child(void) {\n"
    "    char self[4096], parent[4096], link[64];\n"
    "    ssize_t a = readlink(\"/proc/self/exe\", self, sizeof self);\n"
    "    snprintf(link, sizeof link, \"/proc/%d/exe\", (int)getppid());\n"
    "    ssize_t b = readlink(link, parent, sizeof parent);\n"
    "    return a > 0 && a == b && !memcmp(self, parent, (size_t)a);\n"
    "}\n"
    "#ifdef EARLY\n"
    "int H5Fis_hdf5(const char *name) {\n"
    "    if (in_child()) _exit(5);\n"
    "    int (*real)(const char *) = (int (*)(const char *))dlsym(RTLD_NEXT, \"H5Fis_hdf5\");\n"
    "    return real(name);\n"
    "}\n"
    "#elif defined(STALL)\n"
    "#include <stdint.h>\n#include <stdlib.h>\n#include <time.h>\n"
    "static int reads; /* H5Dread calls returned in this process */\n"
    "int H5Dread(int64_t d, int64_t mt, int64_t ms, int64_t fs, int64_t pl, void *buf) {\n"
    "    int (*real)(int64_t, int64_t, int64_t, int64_t, int64_t, void *) =\n"
    "        (int (*)(int64_t, int64_t, int64_t, int64_t, int64_t, void *))dlsym(RTLD_NEXT,\n"
    "                                                                 \"H5Dread\");\n"
    "    struct timespec t = {STALL_READ_MS / 1000, STALL_READ_MS % 1000 * 1000000L};\n"
    "    while (in_child() && nanosleep(&t, &t) != 0)\n"
    "        ;\n"
    "    int r = real(d, mt, ms, fs, pl, buf);\n"
    "    reads++;\n"
    "    return r;\n"
    "}\n"
    "int H5Lexists(int64_t loc, const char *name, int64_t pl) {\n"
    "    if (in_child() && reads > 0) { /* when it began, then never returns */\n"
    "        struct timespec now;\n"
    "        clock_gettime(CLOCK_MONOTONIC, &now);\n"
    "        FILE *fp = fopen(getenv(\"STALL_AT\"), \"w\");\n"
    "        if (fp) {\n"
    "            fprintf(fp, \"%lld %ld\\n\", (long long)now.tv_sec, now.tv_nsec);\n"
    "            fclose(fp);\n"
    "        }\n"
    "        for (;;)\n"
    "            pause();\n"
    "    }\n"
    "    int (*real)(int64_t, const char *, int64_t) =\n"
    "        (int (*)(int64_t, const char *, int64_t))dlsym(RTLD_NEXT, \"H5Lexists\");\n"
    "    return real(loc, name, pl);\n"
    "}\n"
    "#else\n"
    "__attribute__((destructor)) static void at_exit(void) { if (in_child()) _exit(131); }\n"
    "#endif\n";

/* Builds the shim into dir with `defs` ("", "-DEARLY", "-DSTALL ..."); skips the test without
 * a C compiler. */
static void build_shim(const char *name, const char *defs)
{
    char src[128], cmd[512];
    snprintf(src, sizeof src, "%s/shim.c", dir);
    FILE *fp = fopen(src, "w");
    cr_assert(fp);
    fputs(shim_src, fp);
    fclose(fp);
    if (system("command -v cc >/dev/null 2>&1") != 0)
        cr_skip_test("no C compiler (cc) to build the preloaded library");
    snprintf(cmd, sizeof cmd, "cc -shared -fPIC %s -o '%s/%s' '%s' -ldl", defs, dir, name, src);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
}

/* `flexcheck ARGS` with the shim preloaded and `env` ("" or "NAME=VALUE ...") in its
 * environment, stdout and stderr captured into r. */
static void run_shimmed(run_out *r, const char *shim, const char *env, const char *args)
{
    const char *bin = getenv("FLEXCHECK_BIN");
    if (!bin)
        cr_skip_test("FLEXCHECK_BIN is not set (make test sets it)");
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "LD_PRELOAD='%s/%s' OPENBLAS_NUM_THREADS=1 %s %s %s >'%s/stdout' "
             "2>'%s/stderr'", dir, shim, env, bin, args, dir, dir);
    int st = system(cmd);
    cr_assert(st != -1 && WIFEXITED(st), "%s did not exit normally", cmd);
    r->status = WEXITSTATUS(st);
    slurp("stdout", r->out, sizeof r->out);
    slurp("stderr", r->err, sizeof r->err);
}

Test(cli, a_child_that_exits_nonzero_after_finishing_fails_its_file_with_that_status)
{
    gen_small("a.h5");
    build_shim("late.so", "");
    run_out r;
    char args[256], want[256];
    snprintf(args, sizeof args, "check '%s/a.h5'", dir);
    run_shimmed(&r, "late.so", "", args);
    snprintf(want, sizeof want, "%s/a.h5: the process that checked it exited with status 131 "
             "after finishing", dir);
    cr_expect_eq(r.status, 2, "status %d\n%s%s", r.status, r.out, r.err);
    cr_expect(count_lines(r.err) == 1 && strstr(r.err, want), "want '%s':\n%s", want, r.err);
    /* repro and fill read the child's status the same way */
    static const char *const more[] = {"repro '%s/a.h5'", "fill '%s/a.h5' --out '%s/f.h5'"};
    for (size_t i = 0; i < sizeof more / sizeof more[0]; i++) {
        snprintf(args, sizeof args, more[i], dir, dir);
        run_shimmed(&r, "late.so", "", args);
        cr_expect_eq(r.status, 2, "%s: status %d\n%s%s", args, r.status, r.out, r.err);
        cr_expect(strstr(r.err, "exited with status 131 after finishing"), "%s:\n%s", args,
                  r.err);
    }
}

Test(cli, a_child_that_exits_before_finishing_is_said_to_with_its_status)
{
    gen_small("a.h5");
    build_shim("early.so", "-DEARLY");
    run_out r;
    char args[256], want[256];
    snprintf(args, sizeof args, "check '%s/a.h5'", dir);
    run_shimmed(&r, "early.so", "", args);
    snprintf(want, sizeof want, "%s/a.h5: the HDF5 library crashed reading it (exit status 5 "
             "before finishing)", dir);
    cr_expect_eq(r.status, 2, "status %d\n%s%s", r.status, r.out, r.err);
    cr_expect(count_lines(r.err) == 1 && strstr(r.err, want), "want '%s':\n%s", want, r.err);
}

/* The libhdf5 watchdog's nested steps (fixtures/fix_h5.c, fix_watch_begin/end): a dataset read
 * is a step inside the step that reads the case, and when it ends the enclosing step is armed
 * again, with its whole allowance, under its own name. The STALL shim makes each dataset read
 * of the child take STALL_READ_MS (inside the inner step, well within its allowance), then
 * hangs libhdf5 at its next link lookup (H5Lexists of the case's `sinks`, after the packed
 * case's two cu_seqlens reads): back in the outer step. The child must be stopped by the outer
 * step's alarm, named as the outer step, and no sooner than its allowance (T) after the hang
 * began; an enclosing step not re-armed was stopped T after the last read began (T -
 * STALL_READ_MS into the hang) and named as that dataset read. Alarms never fire early, so the
 * lower bound has a margin of half a second on one side and a second on the other. */
Test(cli, a_stall_after_a_nested_dataset_read_is_stopped_as_the_enclosing_step, .timeout = 120)
{
    enum { T = 3, READ_MS = 1500 };
    run_out r;
    run_cli(&r, "gen --case --packed 0,5,12 --d 4 --qb 16 --kb 16 --causal --out '%s/p.h5'",
            dir);
    cr_assert_eq(r.status, 0, "%s", r.err);
    char defs[64], env[256], args[256], want[256], at[128];
    snprintf(defs, sizeof defs, "-DSTALL -DSTALL_READ_MS=%d", READ_MS);
    build_shim("stall.so", defs);
    snprintf(at, sizeof at, "%s/stall-at", dir);
    /* timeout(1): a hang nothing stops fails here (124) rather than hanging the suite */
    snprintf(env, sizeof env, "STALL_AT='%s' FLEXCHECK_HDF5_TIMEOUT=%d timeout 60", at, T);
    snprintf(args, sizeof args, "check '%s/p.h5'", dir);
    run_shimmed(&r, "stall.so", env, args);
    struct timespec end;
    clock_gettime(CLOCK_MONOTONIC, &end);
    snprintf(want, sizeof want, "%s/p.h5: libhdf5 did not return from reading /cases/c0001 "
             "(attributes, dataset headers, block mask) within %d s (stopped)", dir, T);
    cr_expect_eq(r.status, 2, "status %d\n%s%s", r.status, r.out, r.err);
    cr_expect(count_lines(r.err) == 1 && strstr(r.err, want), "want '%s':\n%s", want, r.err);
    FILE *fp = fopen(at, "r");
    long long sec = 0;
    long nsec = 0;
    cr_assert(fp && fscanf(fp, "%lld %ld", &sec, &nsec) == 2, "the child never hung after a "
              "dataset read (%s)", at);
    fclose(fp);
    double hung = (double)(end.tv_sec - sec) + (double)(end.tv_nsec - nsec) * 1e-9;
    cr_expect(hung >= T - 0.5, "stopped %.2f s into the hang: before the enclosing step's "
              "allowance of %d s", hung, T);
}
