/*
 * test_sample.c - judging a sample of query rows (docs/tolerance.md "Judging a sample"): which
 * tokens the stratified sample holds (fixtures/fix_sample.c), the chance it prints, reading a
 * sample's rows by hyperslab, `flexcheck check --rows` and `repro --rows` on a 40,000-token
 * dump whose planted defects a sample must catch (rows past 2^15) or may miss (one token it does
 * not hold), and planted length defects (rows past 2^16, a grid cap, keys wrapping, a ring
 * cache, a base-2 merge) that every sample of 64 tokens must fail and whose diagnosis names
 * each with its threshold (issue 36 items 5 and 8).
 *
 * Expected tokens are derived here from the thresholds' definitions, not from the sampler; the
 * verdicts follow from how each output is built (the same-precision computation is what a
 * correct float32 engine returns; a defect changes named rows).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "tests/test_lines.h"
#include "tests/test_tmpdir.h"
#include "fixtures/fix.h"
#include "fixtures/fix_h5.h"
#include "judge/judge.h"
#include "ref/ref.h"

TEST_TMPDIR("sampletest")

static void make_dir_quiet(void)
{
    make_dir();
    fix_h5_quiet();
}

TestSuite(sample, .init = make_dir_quiet, .fini = remove_dir);

static int has(const fix_sample *s, int64_t t)
{
    for (int32_t i = 0; i < s->n; i++)
        if (s->tq[i] == t)
            return 1;
    return 0;
}

static attn_problem dense(int32_t hq, int32_t hkv, int32_t lq, int32_t lk, int32_t d,
                          mask_params m)
{
    attn_problem p = {.hq = hq, .hkv = hkv, .d = d, .dv = d, .mask = m, .scale = 0.25};
    fc_err err;
    cr_assert_eq(seq_init_dense(&p.seq, 1, lq, lk, &err), FC_OK, "%s", err.msg);
    return p;
}

/* Every token of the sample once, in increasing order, inside [0, Lq); n of them. */
static void expect_well_formed(const fix_sample *s, int32_t n, int32_t lq)
{
    cr_assert_eq(s->n, n);
    cr_assert_eq(s->placed + s->uniform, n, "%d placed + %d uniform != %d", s->placed,
                 s->uniform, n);
    for (int32_t i = 0; i < n; i++) {
        cr_assert(s->tq[i] >= 0 && s->tq[i] < lq, "token %d at %d", s->tq[i], i);
        cr_assert(i == 0 || s->tq[i] > s->tq[i - 1], "not increasing at %d", i);
    }
}

/* A Gemma-3-27B-shaped local layer past 128k: the tokens on both sides of each threshold the
 * header names, worked out from their definitions, the ends, and the first row the window cuts. */
Test(sample, the_stratified_part_holds_every_named_threshold_and_the_ends)
{
    const int32_t lq = 140000, hq = 32, hkv = 16, d = 128, w = 1024;
    attn_problem p = dense(hq, hkv, lq, lq, d, (mask_params){.causal = 1, .sliding_window = w});
    fix_sample s;
    fc_err err;
    cr_assert_eq(fix_sample_tokens(&p, 128, 4096, 7, &s, &err), FC_OK, "%s", err.msg);
    expect_well_formed(&s, 4096, lq);
    int64_t want[] = {0, lq - 1, 1 << 13, 1 << 14, 1 << 15, 1 << 16, 1 << 17,
                      46341,                                     /* 46,341^2 > 2^31 */
                      (int64_t)4294967296LL / lq,                /* 2^32 / Lk = 30678 */
                      w};                                        /* the first row the window cuts
                                                                  * (keys 1 .. 1024, not 0) */
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        for (int64_t dt = -1; dt <= 1; dt++) {
            int64_t t = want[i] + dt;
            if (t >= 0 && t < lq)
                cr_expect(has(&s, t), "token %lld (threshold %lld %+lld) is not in the sample",
                          (long long)t, (long long)want[i], (long long)dt);
        }
    /* 2^31 / (Hq D) = 524,288 and 2^31 / (Hkv D) = 1,048,576 lie past Lq: nothing to place */
    cr_expect(s.placed <= 4096 - 4096 / 2, "placed %d: at most half of the sample", s.placed);
    fix_sample_free(&s);
    seq_free(&p.seq);
}

/* The uniform part comes from the seed alone: the same seed, the same tokens; another seed,
 * the same placed tokens and other uniform ones, spread over the axis (not bunched at one end:
 * the mean of 2,048 uniform draws from [0, 140000) is within 4% of the middle with
 * overwhelming probability, its standard error being 0.6%). */
Test(sample, the_uniform_part_is_reproducible_from_its_seed_and_spread)
{
    const int32_t lq = 140000;
    attn_problem p = dense(4, 2, lq, lq, 64, (mask_params){.causal = 1});
    fix_sample a, b, c;
    fc_err err;
    cr_assert_eq(fix_sample_tokens(&p, 128, 4096, 1, &a, &err), FC_OK, "%s", err.msg);
    cr_assert_eq(fix_sample_tokens(&p, 128, 4096, 1, &b, &err), FC_OK, "%s", err.msg);
    cr_assert_eq(fix_sample_tokens(&p, 128, 4096, 2, &c, &err), FC_OK, "%s", err.msg);
    cr_assert_eq(memcmp(a.tq, b.tq, sizeof *a.tq * 4096), 0, "same seed, other tokens");
    cr_assert(memcmp(a.tq, c.tq, sizeof *a.tq * 4096) != 0, "another seed, the same tokens");
    cr_assert_eq(a.placed, c.placed);
    int32_t common = 0;
    double sum = 0;
    for (int32_t i = 0; i < 4096; i++) {
        common += has(&c, a.tq[i]);
        sum += a.tq[i];
    }
    /* the placed ones in both, and about n_u^2 / (Lq - placed) of the uniform ones by chance */
    cr_expect(common >= a.placed && common < a.placed + 200, "%d in common, %d placed", common,
              a.placed);
    /* the placed tiles' first and last rows are spread evenly too: the whole mean is central */
    cr_expect(fabs(sum / 4096 - lq / 2.0) < 0.04 * lq, "mean token %.0f", sum / 4096);
    fix_sample_free(&a);
    fix_sample_free(&b);
    fix_sample_free(&c);
    seq_free(&p.seq);
}

/* Packed sequences: each sequence's first and last query; a decode sequence (2 queries, 40
 * keys) every query; chunks of 64: both sides of each chunk boundary. */
Test(sample, sequence_ends_decode_rows_and_chunk_boundaries_are_placed)
{
    int32_t cq[] = {0, 300, 302, 1000}, ck[] = {0, 300, 340, 1038};
    attn_problem p = {.hq = 2, .hkv = 1, .d = 16, .dv = 16, .scale = 0.25,
                      .mask = {.causal = 1, .chunk_size = 64}};
    fc_err err;
    cr_assert_eq(seq_init_packed(&p.seq, 3, cq, ck, &err), FC_OK, "%s", err.msg);
    fix_sample s;
    cr_assert_eq(fix_sample_tokens(&p, 128, 200, 3, &s, &err), FC_OK, "%s", err.msg);
    expect_well_formed(&s, 200, 1000);
    int32_t want[] = {0, 1, 299, 298, 300, 301, 302, 303, 999, 998};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        cr_expect(has(&s, want[i]), "token %d is not in the sample", want[i]);
    /* sequence 0's chunks change at queries 64k; sequence 2's (queries 302 .. 999, as many
     * keys: query i at key position i) at queries 302 + 64k */
    for (int32_t t = 64; t < 300; t += 64)
        cr_expect(has(&s, t) && has(&s, t - 1), "chunk boundary at query %d", t);
    for (int32_t pos = 64; pos + 302 < 1000; pos += 64) {
        int32_t t = 302 + pos;
        cr_expect(has(&s, t) && has(&s, t - 1), "chunk boundary at query %d", t);
    }
    fix_sample_free(&s);
    seq_free(&p.seq);
}

Test(sample, a_sample_of_every_token_is_the_axis_and_bad_sizes_are_refused)
{
    attn_problem p = dense(1, 1, 300, 300, 16, (mask_params){.causal = 1, .sliding_window = 8});
    fix_sample s;
    fc_err err;
    cr_assert_eq(fix_sample_tokens(&p, 16, 300, 9, &s, &err), FC_OK, "%s", err.msg);
    expect_well_formed(&s, 300, 300);
    fix_sample_free(&s);
    cr_assert_eq(fix_sample_tokens(&p, 16, 0, 9, &s, &err), FC_EINVAL);
    cr_expect(strstr(err.msg, "a sample of 0 query tokens: must be 1 to Lq = 300"), "%s", err.msg);
    cr_assert_eq(fix_sample_tokens(&p, 16, 301, 9, &s, &err), FC_EINVAL);
    seq_free(&p.seq);
}

/* C(Lq - n, k) / C(Lq, k), against counting the k-subsets that miss the sample by brute force. */
Test(sample, the_escape_chance_is_the_share_of_defects_that_miss_the_sample)
{
    for (int32_t lq = 1; lq <= 12; lq++)
        for (int32_t n = 1; n <= lq; n++)
            for (int32_t k = 1; k <= lq && k <= 4; k++) {
                /* the sample: tokens 0 .. n-1 (any fixed set of n does as well) */
                long miss = 0, all = 0;
                for (unsigned m = 0; m < (1u << lq); m++) {
                    if (__builtin_popcount(m) != k)
                        continue;
                    all++;
                    miss += (m & ((1u << n) - 1)) == 0;
                }
                double want = (double)miss / (double)all;
                cr_expect(fabs(fix_sample_escape(lq, n, k) - want) < 1e-12,
                          "Lq %d n %d k %d: %g, counted %g", lq, n, k,
                          fix_sample_escape(lq, n, k), want);
            }
    /* the printed figures of a 64-token sample of 40,000 */
    cr_expect(fabs(fix_sample_escape(40000, 64, 1) - (1 - 64.0 / 40000)) < 1e-15);
}

/* ---- a 40,000-token dump checked with --rows ---- */

enum { HQ = 2, HKV = 1, L = 40000, D = 16, W = 256, NO = HQ * L * D, NL = HQ * L };

static void base_case(fix_case *c)
{
    fix_gen_params gp = {.name = "c0", .dtype = FC_F32, .b = 1, .hq = HQ, .hkv = HKV, .lq = L,
                         .lk = L, .d = D, .dv = D, .mask = {.causal = 1, .sliding_window = W},
                         .qb = 128, .kb = 128, .seed = 5};
    fc_err err;
    cr_assert_eq(fix_gen_case(&gp, c, &err), FC_OK, "%s", err.msg);
}

static void put(hid_t g, const char *name, int rank, const hsize_t *dims, const float *x)
{
    hid_t sp = H5Screate_simple(rank, dims, NULL);
    hid_t ds = H5Dcreate2(g, name, H5T_IEEE_F32LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    cr_assert(ds >= 0 && H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, x) >= 0,
              "write %s", name);
    H5Dclose(ds);
    H5Sclose(sp);
}

/* The case, with tested/<label> for each of n outputs; without out/lse when !oracle (a dump). */
static const char *write_dump(const char *name, const char *const *labels, float *const *outs,
                              const float *lse, int n, int oracle)
{
    const char *p = path_of(name);
    fix_case c;
    base_case(&c);
    fc_err err;
    cr_assert_eq(fix_write(p, NULL, &c, 1, 0, &err), FC_OK, "%s", err.msg);
    fix_case_free(&c);
    hid_t f = H5Fopen(p, H5F_ACC_RDWR, H5P_DEFAULT);
    cr_assert(f >= 0);
    if (!oracle)
        cr_assert(H5Ldelete(f, "/cases/c0/out", H5P_DEFAULT) >= 0 &&
                  H5Ldelete(f, "/cases/c0/lse", H5P_DEFAULT) >= 0);
    hid_t t = H5Gcreate2(f, "/cases/c0/tested", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    const hsize_t od[4] = {1, HQ, L, D}, ld[3] = {1, HQ, L};
    for (int i = 0; i < n; i++) {
        hid_t g = H5Gcreate2(t, labels[i], H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        cr_assert(H5LTset_attribute_string(g, ".", "producer", "test_sample") >= 0);
        put(g, "out", 4, od, outs[i]);
        put(g, "lse", 3, ld, lse);
        H5Gclose(g);
    }
    H5Gclose(t);
    H5Fclose(f);
    return p;
}

/* The float32 same-precision outputs (a correct float32 engine's, near enough). */
static void correct_outputs(float *o, float *lse)
{
    fix_case c;
    base_case(&c);
    fc_err err;
    cr_assert_eq(ref_attention_lp(&c.prob, c.dtype, c.q, c.k, c.v, o, lse, &err), FC_OK, "%s",
                 err.msg);
    fix_case_free(&c);
}

static int run(const char *args, char *out, size_t cap)
{
    const char *bin = getenv("FLEXCHECK_BIN");
    if (!bin)
        cr_skip_test("FLEXCHECK_BIN is not set (make test sets it)");
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "OPENBLAS_NUM_THREADS=1 %s %s >'%s/o' 2>&1", bin, args, dir);
    int st = system(cmd);
    cr_assert(st != -1 && WIFEXITED(st), "%s", cmd);
    char q[128];
    snprintf(q, sizeof q, "%s/o", dir);
    FILE *fp = fopen(q, "r");
    size_t n = fp ? fread(out, 1, cap - 1, fp) : 0;
    out[n] = 0;
    if (fp)
        fclose(fp);
    return WEXITSTATUS(st);
}

/* Outputs: the correct one; rows 2^15 .. Lq - 1 of head 1 from the row 300 tokens earlier (a
 * position offset past a threshold); and one token (of both heads) the seed-1 64-token sample
 * does not hold, its output negated. */
Test(sample, a_sample_catches_rows_past_a_threshold_and_says_what_it_may_miss)
{
    float *good = malloc(sizeof(float) * NO), *lse = malloc(sizeof(float) * NL);
    float *past = malloc(sizeof(float) * NO), *one = malloc(sizeof(float) * NO);
    correct_outputs(good, lse);
    memcpy(past, good, sizeof(float) * NO);
    memcpy(one, good, sizeof(float) * NO);
    for (size_t q = 1u << 15; q < L; q++)
        memcpy(past + ((size_t)L + q) * D, good + ((size_t)L + q - 300) * D, sizeof(float) * D);
    fix_case c;
    base_case(&c);
    fix_sample s;
    fc_err err;
    cr_assert_eq(fix_sample_tokens(&c.prob, 128, 64, 1, &s, &err), FC_OK, "%s", err.msg);
    int32_t miss = 12345;
    while (has(&s, miss))
        miss++;
    fix_sample_free(&s);
    fix_case_free(&c);
    for (int h = 0; h < HQ; h++)
        for (int d = 0; d < D; d++)
            one[((size_t)h * L + (size_t)miss) * D + d] *= -1;
    const char *labels[] = {"good", "past", "one"};
    float *outs[] = {good, past, one};
    char *out = malloc(1 << 16), args[512], line[2048];
    for (int oracle = 1; oracle >= 0; oracle--) { /* with the oracle stored, and a bare dump */
        const char *p = write_dump(oracle ? "stored.h5" : "dump.h5", labels, outs, lse, 3,
                                   oracle);
        for (uint64_t seed = 1; seed <= 3; seed++) {
            snprintf(args, sizeof args, "check --rows 64 --rows-seed %llu '%s'",
                     (unsigned long long)seed, p);
            cr_expect_eq(run(args, out, 1 << 16), 1, "%s", out);
            cr_expect(strstr(line_of(out, "good", line, sizeof line), "PASS ") == line, "%s",
                      line);
            char want[160];
            snprintf(want, sizeof want, "judged a sample: 64 of 40000 query tokens (every batch "
                     "entry and head), ");
            cr_expect(strstr(line, want), "%s", line);
            snprintf(want, sizeof want, "uniform from seed %llu; a defect on 1 random token "
                     "escapes it with chance 0.998, on 10 0.984, on 100 0.852",
                     (unsigned long long)seed);
            cr_expect(strstr(line, want), "%s", line);
            /* past 2^15: the rows placed at 2^15 and after fail, named at head 1 */
            cr_expect(strstr(line_of(out, "past", line, sizeof line), "FAIL ") == line, "%s",
                      line);
            cr_expect(strstr(line, "(b, h, q, d) = (0, 1, "), "%s", line);
            if (seed == 1) /* the token it does not hold: passes, the chance printed */
                cr_expect(strstr(line_of(out, "one", line, sizeof line), "PASS ") == line,
                          "%s", line);
            cr_expect(strstr(out, oracle ? "1 cases: oracle confirmed in 1, not in 0, 1 judged "
                                           "on a sample of their rows"
                                         : "(1 of them with no stored oracle: computed), 1 judged "
                                           "on a sample of their rows"), "%s", out);
        }
        /* every row: the one token fails too, named */
        snprintf(args, sizeof args, "check --rows all '%s'", p);
        cr_expect_eq(run(args, out, 1 << 16), 1, "%s", out);
        char at[64];
        snprintf(at, sizeof at, "(b, h, q, d) = (0, 0, %d, ", (int)miss);
        cr_expect(strstr(line_of(out, "one", line, sizeof line), "FAIL ") == line, "%s", line);
        cr_expect(strstr(line, at) || strstr(line, "(b, h, q, d) = (0, 1, "), "%s", line);
        cr_expect(!strstr(out, "judged a sample"), "%s", out);
    }
    free(out);
    free(good);
    free(lse);
    free(past);
    free(one);
}

/* Past --max-work the whole case is not refused: the largest sample that fits is judged, and
 * the line says so; --rows all keeps the refusal, naming the flags. */
Test(sample, over_the_work_budget_a_sample_is_judged_unless_every_row_is_asked_for)
{
    float *good = malloc(sizeof(float) * NO), *lse = malloc(sizeof(float) * NL);
    correct_outputs(good, lse);
    const char *labels[] = {"good"};
    float *outs[] = {good};
    const char *p = write_dump("a.h5", labels, outs, lse, 1, 1);
    char *out = malloc(1 << 16), args[512], line[2048];
    snprintf(args, sizeof args, "check --max-work 100M '%s'", p);
    cr_expect_eq(run(args, out, 1 << 16), 0, "%s", out);
    cr_expect(strstr(line_of(out, "good", line, sizeof line), "PASS ") == line, "%s", line);
    int n = 0;
    const char *s = strstr(line, "judged a sample: ");
    cr_assert(s && sscanf(s, "judged a sample: %d of 40000", &n) == 1, "%s", line);
    /* the sample fits 100M = 104,857,600 multiply-adds, twice its rows' share of the whole */
    fix_case c;
    base_case(&c);
    attn_cost whole = attn_case_cost(&c.prob, 128, 128),
              part = attn_case_cost_rows(&c.prob, 128, 128, n);
    fix_case_free(&c);
    cr_expect(part.work <= 104857600 && whole.work > 104857600, "%d rows: %llu of %llu", n,
              (unsigned long long)part.work, (unsigned long long)whole.work);
    cr_expect(n >= FIX_SAMPLE_MIN && n <= FIX_SAMPLE_ROWS, "%d", n);
    snprintf(args, sizeof args, "check --max-work 100M --rows all '%s'", p);
    cr_expect_eq(run(args, out, 1 << 16), 2, "%s", out);
    cr_expect(strstr(out, "multiply-adds, over the work budget of 1.05e+08: raise it with "
                          "--max-work"), "%s", out);
    free(out);
    free(good);
    free(lse);
}

Test(sample, bad_sample_options_are_one_line_each)
{
    char out[4096];
    const char *bad[][2] = {
        {"--rows 0", "--rows '0': a number of query tokens from 1 to 2147483647, all or auto"},
        {"--rows -5", "--rows '-5': a number of query tokens"},
        {"--rows 1.5", "--rows '1.5': a number of query tokens"},
        {"--rows some", "--rows 'some': a number of query tokens"},
        {"--rows-seed x", "--rows-seed 'x': not an unsigned decimal integer"},
        {"--rows-seed 18446744073709551616", "--rows-seed '18446744073709551616': above 2^64 - 1"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char args[256];
        snprintf(args, sizeof args, "check %s /nonexistent.h5", bad[i][0]);
        cr_expect_eq(run(args, out, sizeof out), 2, "%s: %s", bad[i][0], out);
        cr_expect(strstr(out, bad[i][1]), "%s: %s", bad[i][0], out);
        cr_expect(strchr(out, '\n') == out + strlen(out) - 1, "one line: %s", out);
    }
}

/* repro --rows tells a sampled output in full: the sample on its header, the worst row in the
 * whole case's coordinates, the rerun line with the sample's flags; --row must name a sampled
 * token, and --rows applies to a stored output only. */
Test(sample, repro_tells_a_sampled_output_and_refuses_what_it_cannot)
{
    float *good = malloc(sizeof(float) * NO), *lse = malloc(sizeof(float) * NL);
    float *past = malloc(sizeof(float) * NO);
    correct_outputs(good, lse);
    memcpy(past, good, sizeof(float) * NO);
    for (size_t q = 1u << 15; q < L; q++)
        memcpy(past + ((size_t)L + q) * D, good + ((size_t)L + q - 300) * D, sizeof(float) * D);
    const char *labels[] = {"past"};
    float *outs[] = {past};
    const char *p = write_dump("r.h5", labels, outs, lse, 1, 0);
    char *out = malloc(1 << 16), args[512];
    snprintf(args, sizeof args, "repro '%s' --tested past --rows 64 --rows-seed 2", p);
    cr_expect_eq(run(args, out, 1 << 16), 1, "%s", out);
    cr_expect(strstr(out, "\n  judged a sample: 64 of 40000 query tokens"), "%s", out);
    int h = -1, q = -1;
    const char *w = strstr(out, "worst row: b 0, h ");
    cr_assert(w && sscanf(w, "worst row: b 0, h %d (kv head 0), q %d", &h, &q) == 2, "%s", out);
    cr_expect(h == 1 && q >= 32768, "h %d q %d", h, q);
    cr_expect(strstr(out, "--tested past --rows 64 --rows-seed 2\n"), "%s", out);
    /* H1 failed on the sample's bounds: repro says what would judge every row */
    cr_expect(strstr(out, "only gates taken on them failed: --rows all judges every row"), "%s",
              out);
    snprintf(args, sizeof args, "repro '%s' --tested past --rows 64 --row 0,1,12346", p);
    cr_expect_eq(run(args, out, 1 << 16), 2, "%s", out);
    cr_expect(strstr(out, "--row 0,1,12346: query token 12346 is not in the sample (--rows all "
                          "judges every row)"), "%s", out);
    snprintf(args, sizeof args, "repro '%s' --rows 64", p);
    cr_expect_eq(run(args, out, 1 << 16), 2, "%s", out);
    cr_expect(strstr(out, "--rows judges a sample of a stored output (--tested LABEL)"), "%s",
              out);
    free(out);
    free(good);
    free(lse);
    free(past);
}

/* ---- planted length defects (issue 36 item 8) ----
 * Each is a bug of long contexts, planted in a correct float32 output (the same-precision
 * computation): the sampled check (64 tokens, five seeds) must fail every one. Defects that
 * start at a token (a threshold) are caught by the tokens placed around it, whatever the seed;
 * the others change most rows, which any uniform draw meets. */

/* The case (one head, D 8) and tested/<label> for each output (lse may be NULL). */
static const char *write_outputs(const char *name, const fix_case *c, const char *const *labels,
                                 float *const *outs, float *const *lses, int n)
{
    const char *p = path_of(name);
    fc_err err;
    cr_assert_eq(fix_write(p, NULL, c, 1, 0, &err), FC_OK, "%s", err.msg);
    hid_t f = H5Fopen(p, H5F_ACC_RDWR, H5P_DEFAULT);
    cr_assert(f >= 0);
    char grp[256];
    snprintf(grp, sizeof grp, "/cases/%s/tested", c->name);
    hid_t t = H5Gcreate2(f, grp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    const attn_problem *pr = &c->prob;
    const hsize_t od[4] = {1, (hsize_t)pr->hq, (hsize_t)pr->seq.lq, (hsize_t)pr->dv};
    const hsize_t ld[3] = {1, (hsize_t)pr->hq, (hsize_t)pr->seq.lq};
    for (int i = 0; i < n; i++) {
        hid_t g = H5Gcreate2(t, labels[i], H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        cr_assert(H5LTset_attribute_string(g, ".", "producer", "planted") >= 0);
        put(g, "out", 4, od, outs[i]);
        if (lses[i])
            put(g, "lse", 3, ld, lses[i]);
        H5Gclose(g);
    }
    H5Gclose(t);
    H5Fclose(f);
    return p;
}

static void gen_long(fix_case *c, const char *name, int32_t l, int32_t w)
{
    fix_gen_params gp = {.name = name, .dtype = FC_F32, .b = 1, .hq = 1, .hkv = 1, .lq = l,
                         .lk = l, .d = 8, .dv = 8, .mask = {.causal = 1, .sliding_window = w},
                         .qb = 128, .kb = 128, .seed = 9};
    fc_err err;
    cr_assert_eq(fix_gen_case(&gp, c, &err), FC_OK, "%s", err.msg);
}

/* ref_attention_lp of c with another mask and/or other keys and values. */
static void lp_of(const fix_case *c, mask_params m, const float *k, const float *v, float *o,
                  float *lse)
{
    attn_problem p = c->prob;
    p.mask = m;
    fc_err err;
    cr_assert_eq(ref_attention_lp(&p, c->dtype, c->q, k, v, o, lse, &err), FC_OK, "%s", err.msg);
}

/* What each labelled output's diagnosis must say (want, up to 3 strings, NULL-terminated) and
 * must not (deny, or NULL). */
typedef struct diag_says {
    const char *want[4];
    const char *deny;
    int pass; /* a correct output: it passes, so no diagnosis names any cause */
} diag_says;

/* The diagnosis printed under `label`'s line of check's output (up to the next case line). */
static const char *diag_of(const char *out, const char *line, const char **end)
{
    const char *s = strstr(out, line);
    const char *next = s ? strstr(s + 1, "\nPASS ") : NULL;
    const char *f2 = s ? strstr(s + 1, "\nFAIL ") : NULL;
    *end = !next || (f2 && f2 < next) ? f2 : next;
    return s;
}

static int in_diag(const char *s, const char *end, const char *needle)
{
    const char *e = s ? strstr(s, needle) : NULL;
    return e && (!end || e < end);
}

/* Each labelled output fails `check --rows 64` on seeds 1 to 5 (passes, says[i].pass), and its
 * diagnosis says what says[i] asks. The work budget is four samples' worth, so that every row
 * of c is past it, as a 128k layer's is under the default budget: the sample alone decides (a
 * failure on a sample's bounds is otherwise judged again on every row, minutes of float64
 * reference for the 20,000-token global layer, five seeds over). */
static void expect_all_fail(const char *p, const fix_case *c, const char *const *labels,
                            const diag_says *says, int n)
{
    char *out = malloc(1 << 17), args[512], line[4096];
    uint64_t work = 4 * attn_case_cost_rows(&c->prob, 128, 128, 64).work;
    cr_assert_lt(work, attn_case_cost_rows(&c->prob, 128, 128, c->prob.seq.lq).work);
    for (uint64_t seed = 1; seed <= 5; seed++) {
        snprintf(args, sizeof args, "check --rows 64 --rows-seed %llu --max-work %llu '%s'",
                 (unsigned long long)seed, (unsigned long long)work, p);
        cr_expect_eq(run(args, out, 1 << 17), 1, "%s", out);
        for (int i = 0; i < n; i++) {
            cr_expect(strstr(line_of(out, labels[i], line, sizeof line),
                             says[i].pass ? "PASS " : "FAIL ") == line,
                      "seed %llu: %s", (unsigned long long)seed, line);
            const char *end, *s = diag_of(out, line, &end);
            for (int w = 0; says[i].want[w]; w++)
                cr_expect(in_diag(s, end, says[i].want[w]), "seed %llu, %s: no '%s' in its "
                          "diagnosis:\n%s", (unsigned long long)seed, labels[i],
                          says[i].want[w], out);
            if (says[i].deny)
                cr_expect(!in_diag(s, end, says[i].deny), "seed %llu, %s: '%s' in its "
                          "diagnosis:\n%s", (unsigned long long)seed, labels[i], says[i].deny,
                          out);
        }
    }
    free(out);
}

/* 70,000 tokens, causal W 64: rows from 2^16 on shifted by 100 tokens (an index past 2^16);
 * rows from 65,535 on left zero (a grid of 65,535 one-row blocks, the rest never launched);
 * keys from 2^16 on read at j - 2^16 (an index wrapping at 16 bits); the shift from 50,000 on
 * (no threshold, no placed token); and the correct output, which passes every sample. */
Test(sample, length_defects_past_an_index_fail_every_sample)
{
    enum { LL = 70000, DD = 8 };
    fix_case c;
    gen_long(&c, "layer", LL, 64);
    size_t no = (size_t)LL * DD;
    float *good = malloc(sizeof(float) * no), *lse = malloc(sizeof(float) * LL);
    float *shift = malloc(sizeof(float) * no), *zero = malloc(sizeof(float) * no);
    float *wrap = malloc(sizeof(float) * no), *wlse = malloc(sizeof(float) * LL);
    float *k = malloc(sizeof(float) * no), *v = malloc(sizeof(float) * no);
    lp_of(&c, c.prob.mask, c.k, c.v, good, lse);
    memcpy(shift, good, sizeof(float) * no);
    memcpy(zero, good, sizeof(float) * no);
    for (size_t q = 65536; q < LL; q++)
        memcpy(shift + q * DD, good + (q - 100) * DD, sizeof(float) * DD);
    float *mid = malloc(sizeof(float) * no); /* the same shift from 50,000 on: no threshold */
    memcpy(mid, good, sizeof(float) * no);
    for (size_t q = 50000; q < LL; q++)
        memcpy(mid + q * DD, good + (q - 100) * DD, sizeof(float) * DD);
    memset(zero + (size_t)65535 * DD, 0, sizeof(float) * (LL - 65535) * DD);
    for (size_t j = 0; j < LL; j++) { /* key j >= 2^16 read at j - 2^16 */
        size_t from = j >= 65536 ? j - 65536 : j;
        memcpy(k + j * DD, c.k + from * DD, sizeof(float) * DD);
        memcpy(v + j * DD, c.v + from * DD, sizeof(float) * DD);
    }
    lp_of(&c, c.prob.mask, k, v, wrap, wlse);
    const char *labels[] = {"rows-past-2-16", "grid-cap", "keys-wrap-2-16", "rows-past-50000",
                            "correct"};
    float *outs[] = {shift, zero, wrap, mid, good}, *lses[] = {lse, lse, wlse, lse, lse};
    /* Each named with its threshold (the sample places tokens on both sides of each, so the
     * onset is exact); the row shift and the zeroed rows are no computation of the table's,
     * so no cause (a fitted length hypothesis must not be credited with them); the wrap is. */
    const diag_says says[] = {
        {.want = {"every row from q = 65536 on and none before: 2^16 (where a 16-bit index "
                  "wraps)"},
         .deny = "explained by"},
        {.want = {"every row from q = 65535 on and none before: 65,535 x 1 (a launch grid "
                  "capped at 65,535 blocks of 1 query row)",
                  "each with O = 0"},
         .deny = "explained by"},
        {.want = {"explained by keys wrapped at K = 65536, 2^16 (where a 16-bit index wraps): "
                  "key j >= K read as key j - K"},
         .deny = "indistinguishable"},
        /* 50,000 is no placed token: the onset is known only between two judged ones, and
         * no threshold lies there (46,341 and 61,356 = 2^32 / Lk are placed on both sides) */
        {.want = {"so the rows start in q = ", "(no named threshold there)"},
         .deny = "explained by"},
        {.pass = 1}};
    const char *p = write_outputs("index.h5", &c, labels, outs, lses, 5);
    expect_all_fail(p, &c, labels, says, 5);
    fix_case_free(&c);
    free(good), free(lse), free(shift), free(zero), free(wrap), free(wlse), free(k), free(v);
    free(mid);
}

/* 20,000 tokens, causal (a global layer): a ring cache of 4,096 keys (a row sees its last
 * 4,096 keys only: window 4,096), and a split-K merge past 8,192 keys in the wrong base (the
 * two partial outputs weighted 2^LSE_i instead of e^LSE_i). */
Test(sample, a_ring_cache_and_a_base_2_merge_fail_every_sample)
{
    enum { LL = 20000, DD = 8, SPLIT = 8192 };
    fix_case c;
    gen_long(&c, "global", LL, 0);
    size_t no = (size_t)LL * DD;
    float *ring = malloc(sizeof(float) * no), *rlse = malloc(sizeof(float) * LL);
    float *merge = malloc(sizeof(float) * no), *mlse = malloc(sizeof(float) * LL);
    lp_of(&c, (mask_params){.causal = 1, .sliding_window = 4096}, c.k, c.v, ring, rlse);
    lp_of(&c, c.prob.mask, c.k, c.v, merge, mlse);
    const double sc = c.prob.scale;
    double *s = malloc(sizeof(double) * LL);
    for (size_t q = SPLIT; q < LL; q++) { /* keys [0, SPLIT) and [SPLIT, q], merged in base 2 */
        double m[2] = {-INFINITY, -INFINITY}, l[2] = {0, 0}, acc[2][DD] = {{0}};
        for (size_t j = 0; j <= q; j++) {
            double dot = 0;
            for (int d = 0; d < DD; d++)
                dot += (double)c.q[q * DD + d] * c.k[j * DD + d];
            s[j] = dot * sc;
            int part = j >= SPLIT;
            m[part] = fmax(m[part], s[j]);
        }
        for (size_t j = 0; j <= q; j++) {
            int part = j >= SPLIT;
            double e = exp(s[j] - m[part]);
            l[part] += e;
            for (int d = 0; d < DD; d++)
                acc[part][d] += e * c.v[j * DD + d];
        }
        double lse2[2] = {m[0] + log(l[0]), m[1] + log(l[1])}, top = fmax(lse2[0], lse2[1]);
        double w0 = exp2(lse2[0] - top), w1 = exp2(lse2[1] - top);
        for (int d = 0; d < DD; d++)
            merge[q * DD + d] = (float)((w0 * acc[0][d] / l[0] + w1 * acc[1][d] / l[1]) /
                                        (w0 + w1));
        mlse[q] = (float)(top + log(w0 + w1) / log(2.0)); /* merged as base 2 too */
    }
    free(s);
    const char *labels[] = {"ring-4096", "merge-base-2"};
    float *outs[] = {ring, merge}, *lses[] = {rlse, mlse};
    const diag_says says[] = {
        {.want = {"explained by a ring cache of R = 4096 keys"}, .deny = "indistinguishable"},
        {.want = {"explained by a split-K merge in base 2 at S = 8192, 2^13"},
         .deny = "indistinguishable"}};
    const char *p = write_outputs("global.h5", &c, labels, outs, lses, 2);
    expect_all_fail(p, &c, labels, says, 2);
    /* The same as a bare dump, every row: its oracle (3.2e9 multiply-adds, seconds) is computed
     * after the file is read, outside libhdf5's watchdog (1 s here), which once took it for a
     * hung read and killed the check */
    free(c.out);
    free(c.lse);
    c.out = NULL;
    c.lse = NULL;
    c.has_oracle = 0;
    const char *bare = write_outputs("bare.h5", &c, labels, outs, lses, 2);
    char *out = malloc(1 << 16), args[512];
    snprintf(args, sizeof args, "check --rows all '%s'", bare);
    setenv("FLEXCHECK_HDF5_TIMEOUT", "1", 1);
    cr_expect_eq(run(args, out, 1 << 16), 1, "%s", out);
    unsetenv("FLEXCHECK_HDF5_TIMEOUT");
    cr_expect(strstr(out, "oracle computed (none stored)") && !strstr(out, "did not return"),
              "%s", out);
    free(out);
    fix_case_free(&c);
    free(ring), free(rlse), free(merge), free(mlse);
}

/* ---- a sample's bounds are never the last word (docs/tolerance.md "Judging a sample") ----
 * A bfloat16 causal case whose rows outside the seed-1 16-token sample have queries 4 times
 * larger (exact in bfloat16): their scores, rounded to bfloat16, move the baseline more, so the
 * whole case's H1 bound is wider than the sample's. Outputs: the oracle with one value of a
 * sampled row moved between the two bounds ("near": fails the sample's, passes every row's)
 * and past both ("far"). Both bounds are measured here through the reader and the judge. */

enum { TL = 2048, TD = 16, TN = 16 };

static void tight_case(fix_case *c, fix_sample *s)
{
    fix_gen_params gp = {.name = "tight", .dtype = FC_BF16, .b = 1, .hq = 1, .hkv = 1, .lq = TL,
                         .lk = TL, .d = TD, .dv = TD, .mask = {.causal = 1}, .qb = 128,
                         .kb = 128, .seed = 5};
    fc_err err;
    cr_assert_eq(fix_gen_case(&gp, c, &err), FC_OK, "%s", err.msg);
    cr_assert_eq(fix_sample_tokens(&c->prob, 128, TN, 1, s, &err), FC_OK, "%s", err.msg);
    for (int32_t t = 0; t < TL; t++)
        for (int d = 0; d < TD && !has(s, t); d++)
            c->q[(size_t)t * TD + d] *= 4;
    cr_assert_eq(ref_attention_f64(&c->prob, c->q, c->k, c->v, c->out, c->lse, &err), FC_OK,
                 "%s", err.msg);
}

/* The verdict on tested/<label> of p's case read with `rows` (0 every row). */
static rep_verdict verdict_of(const char *p, int32_t rows)
{
    fix_file f;
    fix_case c;
    fc_err err;
    cr_assert_eq(fix_open(p, &f, &err), FC_OK, "%s", err.msg);
    f.budget.rows = rows;
    f.budget.rows_seed = 1;
    cr_assert_eq(fix_read_case(&f, 0, &c, &err), FC_OK, "%s", err.msg);
    cr_assert_eq(c.sample.tq != NULL, rows > 0);
    judge_case jc = fix_judge_case(&c);
    judge_lp lp = {0};
    rep_verdict v;
    cr_assert_eq(judge_baseline(&jc, &lp, &err), FC_OK, "%s", err.msg);
    cr_assert_geq(judge_given(&jc, c.tested[0].out, c.tested[0].lse, NULL, &lp, &v, &err), 0,
                  "%s", err.msg);
    judge_lp_free(&lp);
    fix_case_free(&c);
    fix_close(&f);
    return v;
}

Test(sample, a_failure_on_the_samples_bounds_is_judged_again_on_every_row)
{
    fix_case c;
    fix_sample s;
    tight_case(&c, &s);
    size_t no = (size_t)TL * TD;
    float *gold = malloc(sizeof(float) * no), *lse = malloc(sizeof(float) * TL);
    float *near = malloc(sizeof(float) * no), *far = malloc(sizeof(float) * no);
    for (size_t i = 0; i < no; i++)
        gold[i] = (float)c.out[i];
    for (size_t i = 0; i < TL; i++)
        lse[i] = (float)c.lse[i];
    const char *labels[] = {"gold"};
    float *outs[] = {gold}, *lses[] = {lse};
    const char *p = write_outputs("tight.h5", &c, labels, outs, lses, 1);
    rep_verdict all = verdict_of(p, 0), smp = verdict_of(p, TN);
    cr_assert(all.pass && smp.pass && !all.degenerate && !smp.degenerate);
    cr_assert_gt(all.h1_tol, 1.5 * smp.h1_tol, "every row's H1 bound %g, the sample's %g: the "
                 "case no longer sets them apart", all.h1_tol, smp.h1_tol);
    int32_t t = s.tq[s.n / 2]; /* a sampled token with keys enough */
    cr_assert_gt(t, 64);
    memcpy(near, gold, sizeof(float) * no);
    memcpy(far, gold, sizeof(float) * no);
    near[(size_t)t * TD] = (float)(c.out[(size_t)t * TD] + (all.h1_tol + smp.h1_tol) / 2);
    far[(size_t)t * TD] = (float)(c.out[(size_t)t * TD] + 2 * all.h1_tol);
    const char *two[] = {"near", "far"};
    float *outs2[] = {near, far}, *lses2[] = {lse, lse};
    p = write_outputs("tight2.h5", &c, two, outs2, lses2, 2);
    char *out = malloc(1 << 16), args[512], line[4096];
    /* every row: near passes, far fails */
    snprintf(args, sizeof args, "check --rows all '%s'", p);
    cr_expect_eq(run(args, out, 1 << 16), 1, "%s", out);
    cr_expect(strstr(line_of(out, "near", line, sizeof line), "PASS ") == line, "%s", out);
    cr_expect(strstr(line_of(out, "far", line, sizeof line), "FAIL ") == line, "%s", out);
    /* a sample: near fails H1 there, is judged again on every row and passes; far fails both */
    snprintf(args, sizeof args, "check --rows %d '%s'", TN, p);
    cr_expect_eq(run(args, out, 1 << 16), 1, "%s", out);
    line_of(out, "near", line, sizeof line);
    cr_expect(strstr(line, "PASS ") == line && strstr(line, "failed H1") &&
              strstr(line, "on its own bounds") && strstr(line, "judged again on every row"),
              "%s", out);
    line_of(out, "far", line, sizeof line);
    cr_expect(strstr(line, "FAIL ") == line && strstr(line, "judged again on every row"), "%s",
              out);
    cr_expect(strstr(out, "2 failed on a sample's bounds and were judged again on every row (1 "
                     "pass there)"), "%s", out);
    /* every row past the work budget, the sample within it: the failure stands, unconfirmed */
    uint64_t ws = attn_case_cost_rows(&c.prob, 128, 128, TN).work,
             wa = attn_case_cost_rows(&c.prob, 128, 128, TL).work;
    cr_assert_lt(4 * ws, wa);
    snprintf(args, sizeof args, "check --rows %d --max-work %llu '%s'", TN,
             (unsigned long long)(2 * ws), p);
    cr_expect_eq(run(args, out, 1 << 16), 1, "%s", out);
    line_of(out, "near", line, sizeof line);
    cr_expect(strstr(line, "FAIL ") == line &&
              strstr(line, "failure rests on the sample's bounds") &&
              strstr(line, "not confirmed on every row") && strstr(line, "--max-work"), "%s",
              out);
    cr_expect(strstr(out, "2 fail on a sample's bounds alone"), "%s", out);
    free(out);
    free(gold), free(lse), free(near), free(far);
    fix_sample_free(&s);
    fix_case_free(&c);
}
