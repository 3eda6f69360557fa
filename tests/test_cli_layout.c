/*
 * test_cli_layout.c - the layout options of the command line (layout, blockmask --layout,
 * gen --layout), run as a child process (FLEXCHECK_BIN, set by make test), as test_cli.c runs
 * it.
 *
 * The numbers expected here come from the models' configs as docs/semantics.md section 2 states
 * them (gpt-oss's sliding_window 128, Llama 4 Scout's 48 layers, Gemma 3's and embeddinggemma's
 * query_pre_attn_scalar 256), and every derived figure (the scale, the divisors that work) is
 * computed here from them, not copied from the program's output. What is checked: a model's own
 * scale reaches the cases gen writes; a --scale-div that does not divide the config value and a
 * --layers past the model's last layer are refused, one line naming the layout, the value and
 * what works; blockmask's --lk follows --lq; and options that would be ignored or silently
 * replaced are refused with exit 2, while the same commands without them still run.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>

#include "tests/test_tmpdir.h"

TEST_TMPDIR("clilayout")

TestSuite(cli_layout, .init = make_dir, .fini = remove_dir);

#include "tests/test_cli_run.h"

/* The run was refused as bad input: exit 2, one line on stderr holding `want`. */
static void expect_refused(const run_out *r, const char *line, const char *want)
{
    cr_expect_eq(r->status, 2, "%s: status %d\n%s%s", line, r->status, r->out, r->err);
    cr_expect(count_lines(r->err) == 1 && strstr(r->err, want), "%s: want '%s' in one line: %s",
              line, want, r->err);
}

/* The divisors of `value` that leave at least 2, as "1, 2, 4": what the layout options must
 * offer when given another one (docs/semantics.md section 2). */
static void divisors_text(int value, char *buf, size_t cap)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int k = 1; k <= value; k++)
        if (value % k == 0 && value / k >= 2)
            len += (size_t)snprintf(buf + len, cap - len, "%s%d", len ? ", " : "", k);
}

/* gen --layout writes each layer with the model's scale, and check prints it: Gemma 3 and
 * embeddinggemma scale by query_pre_attn_scalar^-0.5 (256 for both, Hugging Face's configs),
 * not by 1/sqrt(D) of the case's head dim (D = 16 here, which would give 0.25). */
Test(cli_layout, gemma3_and_embeddinggemma_cases_carry_the_models_scale)
{
    static const char *const layouts[] = {"gemma3", "embeddinggemma"};
    char want[64], wrong[64];
    snprintf(want, sizeof want, "scale=%g:", pow(256.0, -0.5));
    snprintf(wrong, sizeof wrong, "scale=%g:", 1.0 / sqrt(16.0));
    for (size_t i = 0; i < sizeof layouts / sizeof *layouts; i++) {
        run_out r;
        run_cli(&r, "gen --case --lq 40 --d 16 --qb 16 --kb 16 --layout %s --layers 6 "
                    "--scale-div 16 --out '%s/%s.h5'", layouts[i], dir, layouts[i]);
        cr_assert_eq(r.status, 0, "%s: %s", layouts[i], r.err);
        run_cli(&r, "check '%s/%s.h5'", dir, layouts[i]);
        cr_assert_eq(r.status, 0, "%s: %s%s", layouts[i], r.out, r.err);
        int lines = 0;
        for (const char *p = r.out; (p = strstr(p, "PASS ")) != NULL; p++) {
            const char *eol = strchr(p, '\n'), *s = strstr(p, want);
            lines += s && (!eol || s < eol);
        }
        cr_expect_eq(lines, 6, "%s: every layer at %s\n%s", layouts[i], want, r.out);
        cr_expect(!strstr(r.out, wrong), "%s: no layer at 1/sqrt(16)\n%s", layouts[i], r.out);
    }
}

/* gpt-oss's sliding_window 128 divided by 3 is not whole: the truncated 42 used to be taken.
 * Every command with --scale-div refuses it, naming the layout, the divisor and the ones that
 * work; a divisor that works still runs. */
Test(cli_layout, a_scale_divisor_that_does_not_divide_the_config_value_is_refused)
{
    char ok[128], want[256];
    divisors_text(128, ok, sizeof ok);
    snprintf(want, sizeof want, "--scale-div 3: layout gpt-oss-20b's sliding_window 128 is not "
             "a multiple of 3 (divisors that work: %s)", ok);
    static const char *const lines[] = {
        "layout gpt-oss-20b --scale-div 3",
        "blockmask --layout gpt-oss-20b --layer 0 --scale-div 3",
        "gen --case --lq 8 --d 4 --layout gpt-oss-20b --scale-div 3 --out '%s/g.h5'",
    };
    run_out r;
    for (size_t i = 0; i < sizeof lines / sizeof *lines; i++) {
        run_cli(&r, lines[i], dir);
        expect_refused(&r, lines[i], want);
    }
    char g[128];
    snprintf(g, sizeof g, "%s/g.h5", dir);
    cr_expect_neq(access(g, F_OK), 0, "a refused gen writes no file");
    /* 128 / 128 = 1 divides but leaves a window of one position. */
    run_cli(&r, "layout gpt-oss-20b --scale-div 128");
    expect_refused(&r, "--scale-div 128", "sliding_window 128 / 128 = 1 is below 2");
    run_cli(&r, "layout gpt-oss-20b --scale-div 4 --layers 1");
    cr_expect_eq(r.status, 0, "%s", r.err);
    char row[64];
    snprintf(row, sizeof row, " %d ", 128 / 4);
    cr_expect(strstr(r.out, row), "W = 128/4 on layer 0:\n%s", r.out);
}

/* Llama 4 Scout has 48 layers: --layers 60 used to print made-up layers 48..59. */
Test(cli_layout, layers_past_the_models_last_are_refused)
{
    const char *want = "--layers 60: layout llama4 has layers 0..47";
    run_out r;
    run_cli(&r, "layout llama4 --layers 60");
    expect_refused(&r, "layout --layers 60", want);
    run_cli(&r, "gen --case --lq 8 --d 4 --layout llama4 --layers 60 --scale-div 64 "
                "--out '%s/l.h5'", dir);
    expect_refused(&r, "gen --layers 60", want);
    run_cli(&r, "layout llama4 --layers 49");
    expect_refused(&r, "layout --layers 49", "--layers 49: layout llama4 has layers 0..47");
    run_cli(&r, "layout llama4 --layers 48");
    cr_expect_eq(r.status, 0, "%s", r.err);
    cr_expect_eq(count_lines(r.out), 1 + 48, "a header and 48 layers:\n%s", r.out);
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

/* What would be ignored or silently replaced is refused, one line, exit 2, no file written. */
Test(cli_layout, conflicting_or_ignored_options_are_refused)
{
    static const char *const lines[][2] = {
        {"blockmask --layer 3", "--layer 3 needs --layout NAME"},
        {"blockmask --scale-div 2", "--scale-div 2 needs --layout NAME"},
        {"blockmask --layout gemma3", "--layout gemma3 needs --layer I (its layers are 0..25)"},
        {"blockmask --layout gemma3 --layer 26", "--layer 26: layout gemma3 has layers 0..25"},
        {"blockmask --layout gemma3 --layer 5 --window 32",
         "--window 32 with --layout gemma3: the layout sets the mask (layer 5 has window 0)"},
        {"blockmask --layout gemma3 --layer 0 --chunk 32",
         "--chunk 32 with --layout gemma3: the layout sets the mask (layer 0 has chunk 0)"},
        {"blockmask --layout modernbert --layer 1 --causal",
         "--causal with --layout modernbert: the layout sets the mask (layer 1 has causal 0)"},
        {"blockmask --cu-q 0,10 --cu-k 0,12 --lq 5", "--lq 5 with --cu-q/--cu-k"},
        {"blockmask --cu-q 0,10 --cu-k 0,12 --lk 7", "--lk 7 with --cu-q/--cu-k"},
        {"gen --case --lq 8 --d 4 --layers 3 --out '%s/x.h5'", "--layers 3 needs --layout NAME"},
        {"gen --case --lq 8 --d 4 --scale-div 2 --out '%s/x.h5'",
         "--scale-div 2 needs --layout NAME"},
        {"gen --case --lq 8 --d 4 --layout gemma3 --window 4 --out '%s/x.h5'",
         "--window 4 with --layout gemma3: the layout sets the mask (layer 0 has window 512)"},
        {"gen --case --lq 8 --d 4 --layout llama4 --scale-div 64 --chunk 128 --out '%s/x.h5'",
         "--chunk 128 with --layout llama4: the layout sets the mask (layer 3 has chunk 0)"},
        {"gen --case --d 4 --packed 0,3,7 --b 2 --out '%s/x.h5'", "--b 2 with --packed"},
        {"gen --case --d 4 --packed 0,3,7 --lq 5 --out '%s/x.h5'", "--lq 5 with --packed"},
        {"gen --case --d 4 --packed 0,3,7 --lk 6 --out '%s/x.h5'", "--lk 6 with --packed"},
        {"gen --case --lq 8 --d 4 --out '%s/x.h5' --out-dir /tmp",
         "--out-dir /tmp with --case: a case is written to --out FILE"},
        {"gen --set small --out-dir '%s' --out /tmp/x.h5",
         "--out /tmp/x.h5 with --set: a set is written to --out-dir DIR"},
        {"gen --set small --out-dir '%s' --layout gemma3", "--layout gemma3 with --set"},
    };
    run_out r;
    for (size_t i = 0; i < sizeof lines / sizeof *lines; i++) {
        run_cli(&r, lines[i][0], dir);
        expect_refused(&r, lines[i][0], lines[i][1]);
    }
    char cmd[256];
    snprintf(cmd, sizeof cmd, "test -z \"$(ls -A '%s' | grep -v '^std')\"", dir);
    cr_expect_eq(system(cmd), 0, "no refused gen wrote a file in %s", dir);
}

/* The same commands without the conflicting option run; a mask option the layout sets anyway
 * (--causal with a causal layout) is no conflict. */
Test(cli_layout, the_same_commands_without_the_conflict_run)
{
    static const char *const lines[] = {
        "blockmask --layout gemma3 --layer 5",
        "blockmask --layout gemma3 --layer 1 --causal --scale-div 16 --lq 64",
        "blockmask --layout gemma3 --layer 1 --window 32 --scale-div 16 --lq 64",
        "blockmask --cu-q 0,10 --cu-k 0,12",
        "gen --case --lq 9 --d 4 --qb 16 --kb 16 --causal --layout gemma3 --layers 2 "
        "--scale-div 64 --out '%s/a.h5'",
        "gen --case --d 4 --qb 16 --kb 16 --packed 0,3,7 --b 1 --out '%s/b.h5'", /* B = 1 */
        /* Llama 4's layers 0..2 all have C = 8192/64: the --chunk given is the one they get. */
        "gen --case --lq 8 --d 4 --qb 16 --kb 16 --layout llama4 --layers 3 --scale-div 64 "
        "--chunk 128 --out '%s/c.h5'",
    };
    run_out r;
    for (size_t i = 0; i < sizeof lines / sizeof *lines; i++) {
        run_cli(&r, lines[i], dir);
        cr_expect_eq(r.status, 0, "%s: %s", lines[i], r.err);
    }
}

/* gen reads its own numbers (a 64-bit seed, cu_seqlens lists, a sinks file) as strictly as
 * every other option (cli/opts.h): decimal digits only, and a sinks file must be a file. */
Test(cli_layout, gen_numbers_are_decimal_only)
{
    static const struct {
        const char *args, *want;
    } bad[] = {
        {"--seed ' 5'", "--seed ' 5': not an unsigned decimal integer"},
        {"--seed +5", "--seed '+5': not an unsigned decimal integer"},
        {"--seed 18446744073709551616", "above 2^64 - 1"},
        {"--packed ' 0,5,8'", "--packed ' 0,5,8': need 2 to"},
        {"--packed 0,+5,8", "--packed '0,+5,8': need 2 to"},
        {"--sinks /", "--sinks /: is a directory"},
        {"--sinks HEX", "value 0: '0x10' is not a decimal number"},
    };
    char path[256];
    snprintf(path, sizeof path, "%s/hex.txt", dir);
    FILE *f = fopen(path, "w");
    cr_assert(f);
    fputs("0x10 1\n", f);
    fclose(f);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        run_out r;
        if (!strcmp(bad[i].args, "--sinks HEX"))
            run_cli(&r, "gen --case --out %s/g.h5 --hq 2 --lq 16 --d 16 --sinks %s", dir, path);
        else
            run_cli(&r, "gen --case --out %s/g.h5 --hq 2 --lq 16 --d 16 %s", dir, bad[i].args);
        expect_refused(&r, bad[i].args, bad[i].want);
    }
    run_out r;
    run_cli(&r, "gen --case --out %s/g.h5 --hq 2 --lq 16 --d 16 --seed 18446744073709551615",
            dir);
    cr_expect_eq(r.status, 0, "the largest seed: %s", r.err);
}

/* gen --set writes the committed set as it is: an option describing one --case is refused, not
 * ignored (docs/cli.md: gen refuses what it would ignore). */
Test(cli_layout, gen_set_refuses_case_options)
{
    static const char *const opts[] = {"--lq 5", "--causal", "--layers 3", "--scale-div 2",
                                       "--seed 7", "--dtype float16", "--max-memory 1G"};
    for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++) {
        run_out r;
        run_cli(&r, "gen --set small --out-dir %s %s", dir, opts[i]);
        char want[64];
        snprintf(want, sizeof want, "%.*s with --set: a set's cases are fixed",
                 (int)strcspn(opts[i], " "), opts[i]);
        expect_refused(&r, opts[i], want);
    }
    /* A value that looks like an option is the value: --out-dir --odd names a directory. */
    run_out r;
    run_cli(&r, "gen --set small --out-dir --odd");
    expect_refused(&r, "--out-dir --odd", "the directory --odd does not exist");
}

/* A model's own scale and soft-cap are its layers': gen --layout refuses another --scale or
 * --softcap where the model has one (Gemma 3 scales by 256^-0.5, Gemma 2 caps at 50) instead of
 * replacing it silently, and keeps them for a model without (Mistral has neither). */
Test(cli_layout, gen_layout_refuses_a_scale_or_cap_the_model_sets)
{
    run_out r;
    run_cli(&r, "gen --case --out %s/g.h5 --lq 16 --d 16 --layout gemma3 --layers 2 --scale 0.3",
            dir);
    expect_refused(&r, "gemma3 --scale 0.3",
                   "--scale 0.3 with --layout gemma3: the layout sets the scale (layer 0 has "
                   "0.0625)");
    run_cli(&r, "gen --case --out %s/g.h5 --lq 16 --d 16 --layout gemma2 --layers 2 "
            "--softcap 30", dir);
    expect_refused(&r, "gemma2 --softcap 30", "--softcap 30 with --layout gemma2: the layout "
                   "sets the soft-cap (layer 0 has 50)");
    run_cli(&r, "gen --case --out %s/g.h5 --lq 16 --d 16 --layout gemma2 --layers 2 --softcap 0",
            dir); /* 0 is "off": given, it is refused too, not replaced by 50 */
    expect_refused(&r, "gemma2 --softcap 0", "--softcap 0 with --layout gemma2");
    run_cli(&r, "gen --case --out %s/g27.h5 --lq 16 --d 16 --layout gemma2-27b --layers 2 "
            "--scale 0.0833333", dir); /* 1/12 as the refusal prints it (%g) is accepted */
    cr_expect_eq(r.status, 0, "1/12 to six digits: %s", r.err);
    run_cli(&r, "gen --case --out %s/g.h5 --lq 16 --d 16 --layout gemma3 --layers 2 "
            "--scale 0.0625", dir);
    cr_expect_eq(r.status, 0, "the model's own scale: %s", r.err);
    run_cli(&r, "gen --case --out %s/m.h5 --lq 16 --d 16 --layout mistral --layers 2 "
            "--scale 0.3 --softcap 20", dir);
    cr_expect_eq(r.status, 0, "a model without either keeps them: %s", r.err);
}
