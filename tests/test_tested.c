/*
 * test_tested.c - outputs under test from another producer (/cases/<name>/tested/<label>,
 * docs/fixtures.md): the reader's validation and encodings, and `flexcheck check` judging them.
 *
 * The engine's dump of the scenario: a float16 causal window-17 case whose tested outputs are
 * the same-precision naive computation (a correct float16 kernel), the same with rows 40-43 of
 * head 1 computed with W + 1, and the same with a NaN in row 90 of head 0. Expected verdicts
 * follow from the construction, not from running the judge: the correct one passes, the window
 * one fails H1 at a row in 40-43 of head 1, the NaN one fails H3 naming that row.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "tests/test_lines.h"
#include "tests/test_tmpdir.h"
#include "base/lowp.h"
#include "fixtures/fix.h"
#include "fixtures/fix_h5.h"
#include "ref/ref.h"

TEST_TMPDIR("testedtest")

/* HDF5's own error printer off: the tests read the one line we print. */
static void make_dir_quiet(void)
{
    make_dir();
    fix_h5_quiet();
}

TestSuite(tested, .init = make_dir_quiet, .fini = remove_dir);

enum { B = 1, HQ = 2, HKV = 1, L = 96, D = 16, W = 17, NO = B * HQ * L * D, NL = B * HQ * L };

/* The case (inputs and oracle) written by our generator, and its float16 outputs computed the
 * naive same-precision way with window w (what a correct float16 kernel returns, near enough). */
static void base_case(fix_case *c)
{
    fix_gen_params gp = {.name = "c0", .dtype = FC_F16, .b = B, .hq = HQ, .hkv = HKV, .lq = L,
                         .lk = L, .d = D, .dv = D, .mask = {.causal = 1, .sliding_window = W},
                         .qb = 16, .kb = 16, .seed = 21};
    fc_err err;
    cr_assert_eq(fix_gen_case(&gp, c, &err), FC_OK, "%s", err.msg);
}

static void lp_outputs(const fix_case *c, int32_t w, float *o, float *lse)
{
    attn_problem p = c->prob; /* shares the sequences; only the mask differs */
    p.mask.sliding_window = w;
    fc_err err;
    cr_assert_eq(ref_attention_lp(&p, c->dtype, c->q, c->k, c->v, o, lse, &err), FC_OK, "%s",
                 err.msg);
}

static hid_t open_rw(const char *p)
{
    hid_t f = H5Fopen(p, H5F_ACC_RDWR, H5P_DEFAULT);
    cr_assert(f >= 0, "open %s", p);
    return f;
}

static hid_t group(hid_t f, const char *path)
{
    hid_t g = H5Gopen2(f, path, H5P_DEFAULT);
    if (g < 0)
        g = H5Gcreate2(f, path, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    cr_assert(g >= 0, "group %s", path);
    return g;
}

typedef enum store { AS_F16, AS_F32, AS_F64, AS_BF16_BITS, AS_U16_PLAIN } store;

/* Writes n values (dims[rank]) as `name` in group g, stored as `how`. */
static void put(hid_t g, const char *name, int rank, const hsize_t *dims, const float *x,
                store how)
{
    size_t n = 1;
    for (int i = 0; i < rank; i++)
        n *= dims[i];
    hid_t sp = H5Screate_simple(rank, dims, NULL);
    hid_t ds = -1;
    if (how == AS_F32 || how == AS_F64) {
        ds = H5Dcreate2(g, name, how == AS_F32 ? H5T_IEEE_F32LE : H5T_IEEE_F64LE, sp, H5P_DEFAULT,
                        H5P_DEFAULT, H5P_DEFAULT);
        cr_assert(ds >= 0 && H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, x) >= 0,
                  "write %s", name);
    } else {
        uint16_t *bits = malloc(n * sizeof *bits + 1);
        for (size_t i = 0; i < n; i++)
            bits[i] = how == AS_F16 ? fc_f32_to_f16(x[i]) : fc_f32_to_bf16(x[i]);
        hid_t ht = how == AS_F16 ? fix_h5_half_type() : H5Tcopy(H5T_STD_U16LE);
        ds = H5Dcreate2(g, name, ht, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        cr_assert(ds >= 0 && H5Dwrite(ds, how == AS_F16 ? ht : H5T_NATIVE_UINT16, H5S_ALL,
                                      H5S_ALL, H5P_DEFAULT, bits) >= 0, "write %s", name);
        if (how == AS_BF16_BITS)
            cr_assert(H5LTset_attribute_string(g, name, "encoding", "bfloat16") >= 0);
        H5Tclose(ht);
        free(bits);
    }
    H5Dclose(ds);
    H5Sclose(sp);
}

static const hsize_t odims[4] = {B, HQ, L, D}, ldims[3] = {B, HQ, L};

/* tested/<label> with a producer (NULL: none), out (as `how`), optional lse and rerun. */
static void add_tested(const char *p, const char *label, const char *producer, const float *o,
                       store how, const float *lse, const float *rerun, store rerun_how)
{
    hid_t f = open_rw(p);
    hid_t t = group(f, "/cases/c0/tested");
    hid_t g = H5Gcreate2(t, label, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    cr_assert(g >= 0, "label %s", label);
    if (producer)
        cr_assert(H5LTset_attribute_string(g, ".", "producer", producer) >= 0);
    put(g, "out", 4, odims, o, how);
    if (lse)
        put(g, "lse", 3, ldims, lse, AS_F32);
    if (rerun)
        put(g, "out_rerun", 4, odims, rerun, rerun_how);
    H5Gclose(g);
    H5Gclose(t);
    H5Fclose(f);
}

static const char *write_case(const char *name)
{
    const char *p = path_of(name);
    fix_case c;
    base_case(&c);
    fc_err err;
    cr_assert_eq(fix_write(p, NULL, &c, 1, 0, &err), FC_OK, "%s", err.msg);
    fix_case_free(&c);
    return p;
}

/* Runs `flexcheck ARGS` (FLEXCHECK_BIN); stdout and stderr into out/errs. */
static int run_cmd(const char *args, char *out, size_t cap, char *errs, size_t ecap)
{
    const char *bin = getenv("FLEXCHECK_BIN");
    if (!bin)
        cr_skip_test("FLEXCHECK_BIN is not set (make test sets it)");
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "OPENBLAS_NUM_THREADS=1 %s %s >'%s/o' 2>'%s/e'", bin, args, dir,
             dir);
    int st = system(cmd);
    cr_assert(st != -1 && WIFEXITED(st), "%s", cmd);
    const char *names[2] = {"o", "e"};
    char *bufs[2] = {out, errs};
    size_t caps[2] = {cap, ecap};
    for (int i = 0; i < 2; i++) {
        char q[128];
        snprintf(q, sizeof q, "%s/%s", dir, names[i]);
        FILE *fp = fopen(q, "r");
        size_t n = fp ? fread(bufs[i], 1, caps[i] - 1, fp) : 0;
        bufs[i][n] = 0;
        if (fp)
            fclose(fp);
    }
    return WEXITSTATUS(st);
}

static int run_check(const char *p, char *out, size_t cap, char *errs, size_t ecap)
{
    char args[512];
    snprintf(args, sizeof args, "check '%s'", p);
    return run_cmd(args, out, cap, errs, ecap);
}

Test(tested, an_engine_dump_is_judged_and_each_defect_named_by_row)
{
    const char *p = write_case("dump.h5");
    fix_case c;
    base_case(&c);
    static float good[NO], lse[NL], wide[NO], widel[NL], nanrow[NO];
    lp_outputs(&c, W, good, lse);
    lp_outputs(&c, W + 1, wide, widel);
    memcpy(nanrow, good, sizeof nanrow);
    float *win = malloc(sizeof good);
    memcpy(win, good, sizeof good);
    for (int q = 40; q <= 43; q++) /* head 1, rows 40..43 computed with W + 1 */
        memcpy(win + ((size_t)1 * L + q) * D, wide + ((size_t)1 * L + q) * D, D * sizeof(float));
    nanrow[(size_t)90 * D + 3] = NAN; /* head 0, row 90 */
    add_tested(p, "engine-ok", "test engine 1.0, float16", good, AS_F16, lse, good, AS_F16);
    add_tested(p, "engine-window", "test engine 1.0, window W+1 on rows 40-43", win, AS_F16, lse,
               NULL, AS_F16);
    add_tested(p, "engine-nan", "test engine 1.0, NaN in row 90", nanrow, AS_F32, NULL, NULL,
               AS_F32);
    struct stat before, after;
    cr_assert_eq(stat(p, &before), 0);
    char out[8192], errs[2048], ln[1024];
    int rc = run_check(p, out, sizeof out, errs, sizeof errs);
    cr_expect_eq(rc, 1, "a failing tested output exits 1:\n%s\n%s", out, errs);
    cr_log_info("check of the engine dump:\n%s", out);
    cr_expect(strstr(out, "3 outputs under test: 1 passed, 2 failed"), "summary:\n%s", out);

    line_of(out, "engine-ok", ln, sizeof ln);
    cr_expect(!strncmp(ln, "PASS ", 5) && strstr(ln, "rerun bitwise equal") &&
                  strstr(ln, "test engine 1.0, float16") && strstr(ln, "stored as float16"),
              "correct output: %s", ln);

    line_of(out, "engine-window", ln, sizeof ln);
    cr_expect(!strncmp(ln, "FAIL ", 5) && strstr(ln, ": H1 "), "window W+1: %s", ln);
    int b, h, q, d;
    const char *at = strstr(ln, "(b, h, q, d) = (");
    cr_assert(at && sscanf(at, "(b, h, q, d) = (%d, %d, %d, %d)", &b, &h, &q, &d) == 4,
              "window W+1 names no coordinates: %s", ln);
    cr_expect(b == 0 && h == 1 && q >= 40 && q <= 43 && d >= 0 && d < D,
              "window W+1: worst element (%d, %d, %d, %d) outside head 1 rows 40-43: %s", b, h,
              q, d, ln);

    line_of(out, "engine-nan", ln, sizeof ln);
    cr_expect(!strncmp(ln, "FAIL ", 5) && strstr(ln, ": H3 ") && strstr(ln, "O is NaN at (b, h, q, d) = (0, 0, 90, 3)") &&
                  strstr(ln, "no LSE") == NULL,
              "NaN row: %s", ln);
    cr_assert_eq(stat(p, &after), 0);
    cr_expect(before.st_size == after.st_size && before.st_mtime == after.st_mtime,
              "check modified the file");
    free(win);
    fix_case_free(&c);
}

Test(tested, a_correct_output_without_lse_passes_with_h5_not_run)
{
    const char *p = write_case("nolse.h5");
    fix_case c;
    base_case(&c);
    static float good[NO], lse[NL];
    lp_outputs(&c, W, good, lse);
    add_tested(p, "no_lse.1", "test engine", good, AS_F64, NULL, NULL, AS_F64);
    char out[4096], errs[1024], ln[1024];
    cr_expect_eq(run_check(p, out, sizeof out, errs, sizeof errs), 0, "%s\n%s", out, errs);
    line_of(out, "no_lse.1", ln, sizeof ln);
    cr_expect(!strncmp(ln, "PASS ", 5) && strstr(ln, "no LSE stored, H5 not run") &&
                  strstr(ln, "stored as float64"),
              "%s", ln);
    fix_case_free(&c);
}

Test(tested, bfloat16_bit_patterns_decode_exactly)
{
    const char *p = write_case("bits.h5");
    static float x[NO];
    for (size_t i = 0; i < NO; i++) /* every value representable in bfloat16 */
        x[i] = fc_round((float)((double)i * 0.013 - 7.0), FC_BF16);
    x[5] = INFINITY; /* non-finite values are allowed here */
    add_tested(p, "bits", "bit patterns", x, AS_BF16_BITS, NULL, NULL, AS_F32);
    fix_file f;
    fix_case c;
    fc_err err;
    cr_assert_eq(fix_open(p, &f, &err), FC_OK, "%s", err.msg);
    cr_assert_eq(fix_read_case(&f, 0, &c, &err), FC_OK, "%s", err.msg);
    cr_assert_eq(c.ntested, 1);
    cr_expect_str_eq(c.tested[0].label, "bits");
    cr_expect_str_eq(c.tested[0].encoding, "bfloat16");
    cr_expect(c.tested[0].lse == NULL && c.tested[0].out_rerun == NULL, "absent fields");
    size_t bad = NO;
    for (size_t i = 0; i < NO && bad == NO; i++)
        if (memcmp(&c.tested[0].out[i], &x[i], sizeof(float)))
            bad = i;
    cr_expect_eq(bad, NO, "element %zu: %g, wrote %g", bad, (double)c.tested[0].out[bad % NO],
                 (double)x[bad % NO]);
    fix_case_free(&c);
    fix_close(&f);
}

/* ---- bad input: exit 2, one line naming file, case, label and field; file untouched ---- */

typedef struct bad_case {
    const char *name, *label, *producer;
    store how, rerun_how;
    int rerun, wrong_shape;
    const char *expect; /* in the message besides file and case */
} bad_case;

static const bad_case bads[] = {
    {"label with a space", "bad label", "p", AS_F16, AS_F16, 0, 0, "label 'bad label'"},
    {"label too long",
     "L0123456789012345678901234567890123456789012345678901234567890123456789", "p", AS_F16,
     AS_F16, 0, 0, "must match [A-Za-z0-9._-]{1,64}"},
    {"no producer", "np", NULL, AS_F16, AS_F16, 0, 0, "missing required attribute 'producer'"},
    {"wrong shape", "ws", "p", AS_F16, AS_F16, 0, 1, "tested/ws/out: shape [1, 2, 96, 8]"},
    {"uint16 without encoding", "u16", "p", AS_U16_PLAIN, AS_F16, 0, 0,
     "only uint16 bit patterns with attribute encoding"},
    {"rerun stored differently", "rr", "p", AS_F16, AS_F32, 1, 0,
     "out_rerun is float32 but out is float16"},
};

Test(tested, bad_outputs_are_rejected_naming_file_case_label_and_field)
{
    static float x[NO];
    for (size_t k = 0; k < sizeof bads / sizeof bads[0]; k++) {
        char file[64];
        snprintf(file, sizeof file, "bad%zu.h5", k);
        const char *p = write_case(file);
        const bad_case *bc = &bads[k];
        if (bc->wrong_shape) {
            hid_t f = open_rw(p);
            hid_t t = group(f, "/cases/c0/tested");
            hid_t g = H5Gcreate2(t, bc->label, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
            cr_assert(H5LTset_attribute_string(g, ".", "producer", bc->producer) >= 0);
            hsize_t dims[4] = {B, HQ, L, D / 2};
            put(g, "out", 4, dims, x, AS_F16);
            H5Gclose(g);
            H5Gclose(t);
            H5Fclose(f);
        } else {
            add_tested(p, bc->label, bc->producer, x, bc->how, NULL, bc->rerun ? x : NULL,
                       bc->rerun_how);
        }
        struct stat before, after;
        cr_assert_eq(stat(p, &before), 0);
        char out[4096], errs[2048];
        int rc = run_check(p, out, sizeof out, errs, sizeof errs);
        cr_expect_eq(rc, 2, "%s: exit %d, want 2:\n%s%s", bc->name, rc, out, errs);
        cr_expect(strstr(errs, p) && strstr(errs, "/cases/c0/tested") && strstr(errs, bc->expect),
                  "%s: message '%s' lacks file, case/label or '%s'", bc->name, errs, bc->expect);
        cr_expect_eq(strchr(errs, '\n'), errs + strlen(errs) - 1, "%s: one line: %s", bc->name,
                     errs);
        cr_assert_eq(stat(p, &after), 0);
        cr_expect(before.st_size == after.st_size && before.st_mtime == after.st_mtime,
                  "%s: the rejected file was modified", bc->name);
    }
}

/* ---- repro judges only against an oracle it confirmed ---- */

Test(tested, repro_refuses_a_stored_out_that_is_not_the_oracle)
{
    const char *p = write_case("goldswap.h5");
    char args[512], out[8192], errs[2048];
    snprintf(args, sizeof args, "repro '%s' --case c0 --kernel 1", p);
    cr_expect_eq(run_cmd(args, out, sizeof out, errs, sizeof errs), 0,
                 "the untouched case passes:\n%s%s", out, errs);
    /* An engine's float16 output stored as `out`: close to the oracle, yet not it. */
    fix_case c;
    base_case(&c);
    static float eng[NO], lse[NL];
    static double engd[NO];
    lp_outputs(&c, W, eng, lse);
    for (size_t i = 0; i < NO; i++)
        engd[i] = eng[i];
    hid_t f = open_rw(p);
    hid_t d = H5Dopen2(f, "/cases/c0/out", H5P_DEFAULT);
    cr_assert(d >= 0 && H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, engd) >= 0);
    H5Dclose(d);
    H5Fclose(f);
    int rc = run_cmd(args, out, sizeof out, errs, sizeof errs);
    cr_expect_eq(rc, 2, "repro judged against an unconfirmed out (exit %d):\n%s%s", rc, out, errs);
    cr_expect(strstr(errs, "not the float64 oracle") && strstr(errs, "out at (b, h, q, d) = (") && strstr(errs, p),
              "reason: %s", errs);
    cr_expect(!strstr(out, "verdict:"), "a verdict was printed:\n%s", out);
    fix_case_free(&c);
}

/* The producer's own block mask under its label: a correct output whose mask drops a tile the
 * case needs still fails, on the block-mask check, naming the tile; and `check --report` writes
 * one row per output with its producer. */
static void put_i32(hid_t g, const char *name, int rank, const hsize_t *dims, const int32_t *x)
{
    hid_t sp = H5Screate_simple(rank, dims, NULL);
    hid_t ds = H5Dcreate2(g, name, H5T_STD_I32LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    cr_assert(ds >= 0 && H5Dwrite(ds, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, x) >= 0);
    H5Dclose(ds);
    H5Sclose(sp);
}

/* Stores bm under tested/<label> in PyTorch's shape (both lists nkb wide), as producers do. */
static void add_bmask(const char *p, const char *label, const bmask *compact)
{
    bmask wide;
    fc_err err;
    cr_assert_eq(bmask_copy_width(compact, compact->nkb, &wide, &err), FC_OK, "%s", err.msg);
    const bmask *bm = &wide;
    hid_t f = open_rw(p);
    char path[128];
    snprintf(path, sizeof path, "/cases/c0/tested/%s", label);
    hid_t t = H5Gopen2(f, path, H5P_DEFAULT);
    hid_t g = H5Gcreate2(t, "block_mask", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    cr_assert(g >= 0);
    int32_t qb = bm->q_block_size, kb = bm->kv_block_size;
    cr_assert(H5LTset_attribute_int(g, ".", "q_block_size", &qb, 1) >= 0 &&
              H5LTset_attribute_int(g, ".", "kv_block_size", &kb, 1) >= 0);
    hsize_t n[3] = {1, 1, (hsize_t)bm->nqb}, w[4] = {1, 1, (hsize_t)bm->nqb, (hsize_t)bm->width};
    put_i32(g, "kv_num_blocks", 3, n, bm->kv_num_blocks);
    put_i32(g, "kv_indices", 4, w, bm->kv_indices);
    put_i32(g, "full_kv_num_blocks", 3, n, bm->full_kv_num_blocks);
    put_i32(g, "full_kv_indices", 4, w, bm->full_kv_indices);
    H5Gclose(g);
    H5Gclose(t);
    H5Fclose(f);
    bmask_free(&wide);
}

static char *slurp_file(const char *p)
{
    FILE *f = fopen(p, "rb");
    cr_assert(f, "open %s", p);
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    return buf;
}

Test(tested, a_producers_block_mask_is_checked_and_the_report_has_a_row_per_output)
{
    const char *p = write_case("bm.h5");
    fix_case c;
    base_case(&c);
    static float good[NO], lse[NL];
    lp_outputs(&c, W, good, lse);
    add_tested(p, "sound-mask", "engine A", good, AS_F16, lse, NULL, AS_F16);
    add_tested(p, "bad-mask", "engine B", good, AS_F16, lse, NULL, AS_F16);
    bmask bm;
    fc_err err;
    cr_assert_eq(bmask_build(&bm, BMASK_SLOW, c.prob.mask, &c.prob.seq, 16, 16, &err), FC_OK);
    add_bmask(p, "sound-mask", &bm);
    /* Query tile 3 (tokens 48..63): causal window 17 needs kv blocks 2 and 3; drop its last
     * listed partial block (the diagonal one, 3). */
    size_t r3 = bmask_row(&bm, 0, 0, 3);
    int32_t last = bmask_ids(&bm, 0, r3)[bm.kv_num_blocks[r3] - 1];
    cr_assert_eq(last, 3, "the slow builder lists tile 3's diagonal block last");
    bm.kv_num_blocks[r3]--;
    add_bmask(p, "bad-mask", &bm);
    bmask_free(&bm);

    char out[8192], errs[2048], ln[1024], args[512];
    snprintf(args, sizeof args, "check --report '%s/rep' '%s'", dir, p);
    int rc = run_cmd(args, out, sizeof out, errs, sizeof errs);
    cr_expect_eq(rc, 1, "%s\n%s", out, errs);
    line_of(out, "sound-mask", ln, sizeof ln);
    cr_expect(!strncmp(ln, "PASS ", 5), "%s", ln);
    cr_expect(strstr(out, "its block mask (16x16): sound"), "%s", out);
    line_of(out, "bad-mask", ln, sizeof ln);
    cr_expect(!strncmp(ln, "FAIL ", 5) && strstr(ln, "block-mask") &&
                  strstr(ln, "drops keys: 1 tiles") &&
                  strstr(ln, "query tile 3 [tokens 48, 64) kv block 3 [keys 48, 64)"),
              "%s", ln);

    char rp[160];
    snprintf(rp, sizeof rp, "%s/rep/rows.csv", dir);
    const char *csv = slurp_file(rp);
    cr_expect(strstr(csv, ",tested/sound-mask,engine A,0,float16,") &&
                  strstr(csv, ",tested/bad-mask,engine B,0,float16,"), "%s", csv);
    cr_expect(strstr(csv, ",fail,block-mask,"), "%s", csv);
    snprintf(rp, sizeof rp, "%s/rep/junit.xml", dir);
    cr_expect(strstr(slurp_file(rp), "block-mask"), "junit names the check");
    fix_case_free(&c);
}

/* A producer's block mask that does not validate (an id past the grid) rejects the file like
 * any other bad field: exit 2, one line naming file, case, label and field, file untouched. */
Test(tested, a_producers_invalid_block_mask_is_rejected_naming_its_field)
{
    const char *p = write_case("badbm.h5");
    fix_case c;
    base_case(&c);
    static float good[NO], lse[NL];
    lp_outputs(&c, W, good, lse);
    add_tested(p, "e", "engine", good, AS_F16, lse, NULL, AS_F16);
    bmask bm;
    fc_err err;
    cr_assert_eq(bmask_build(&bm, BMASK_SLOW, c.prob.mask, &c.prob.seq, 16, 16, &err), FC_OK);
    bm.kv_indices[0] = bm.nkb; /* past the last kv block */
    add_bmask(p, "e", &bm);
    bmask_free(&bm);
    struct stat before, after;
    cr_assert_eq(stat(p, &before), 0);
    char out[4096], errs[2048];
    int rc = run_check(p, out, sizeof out, errs, sizeof errs);
    cr_expect_eq(rc, 2, "%s%s", out, errs);
    cr_expect(strstr(errs, p) && strstr(errs, "/cases/c0/tested/e/block_mask") &&
                  strstr(errs, "out of range"), "%s", errs);
    cr_expect_eq(strchr(errs, '\n'), errs + strlen(errs) - 1, "one line: %s", errs);
    cr_assert_eq(stat(p, &after), 0);
    cr_expect(before.st_size == after.st_size && before.st_mtime == after.st_mtime);
    fix_case_free(&c);
}

/* ---- cross-field rules of an output under test (fix_tested.c), each broken once ----
 * Every place the reader holds a field of tested/<label> against another field or against the
 * case has a broken file here (out's shape: bad_outputs_... above, "wrong shape"; out_rerun's
 * storage against out's: "rerun stored differently"; uint16 without the encoding: "uint16
 * without encoding"; a producer's block id past the case's grid: a_producers_invalid_...).
 * Each is refused by the reader with one line naming file, case, label and field. */

static void expect_refused_(const char *p, const char *const *parts)
{
    fix_file f;
    fc_err err = {{0}};
    fc_status st = fix_open(p, &f, &err);
    if (!st) {
        st = fix_validate(&f, &err);
        fix_close(&f);
    }
    cr_assert_neq(st, FC_OK, "%s was accepted; expected '%s'", p, parts[0]);
    cr_expect(strstr(err.msg, p), "the message names the file: %s", err.msg);
    for (int i = 0; parts[i]; i++)
        cr_expect(strstr(err.msg, parts[i]), "the message should hold '%s': %s", parts[i],
                  err.msg);
    cr_expect(!strchr(err.msg, '\n'), "one line: %s", err.msg);
}
#define expect_refused(p, ...) expect_refused_((p), (const char *const[]){__VA_ARGS__, NULL})

/* Replaces (or creates) dataset `name` under group path `at` with int32 data of the given
 * shape, every value v. */
static void put_i32_filled(const char *p, const char *at, const char *name, int rank,
                           const hsize_t *dims, int32_t v)
{
    hid_t f = open_rw(p);
    hid_t g = H5Gopen2(f, at, H5P_DEFAULT);
    cr_assert(g >= 0, "%s", at);
    if (H5Lexists(g, name, H5P_DEFAULT) > 0)
        cr_assert(H5Ldelete(g, name, H5P_DEFAULT) >= 0);
    size_t n = 1;
    for (int i = 0; i < rank; i++)
        n *= dims[i];
    int32_t *x = malloc(n * sizeof *x + 1);
    for (size_t i = 0; i < n; i++)
        x[i] = v;
    put_i32(g, name, rank, dims, x);
    free(x);
    H5Gclose(g);
    H5Fclose(f);
}

/* A case with one correct output under tested/e (out as float16, lse) and, when bm, the slow
 * builder's block mask with it. */
static const char *tested_file(const char *name, int bm)
{
    const char *p = write_case(name);
    fix_case c;
    base_case(&c);
    static float good[NO], lse[NL];
    lp_outputs(&c, W, good, lse);
    add_tested(p, "e", "engine", good, AS_F16, lse, NULL, AS_F16);
    if (bm) {
        bmask m;
        fc_err err;
        cr_assert_eq(bmask_build(&m, BMASK_SLOW, c.prob.mask, &c.prob.seq, 16, 16, &err), FC_OK);
        add_bmask(p, "e", &m);
        bmask_free(&m);
    }
    fix_case_free(&c);
    return p;
}

#define TE "/cases/c0/tested/e"

/* Rule (read_one, read_out): out_rerun is [B, Hq, Lq, Dv] of the case, like out. */
Test(tested, rejects_a_rerun_shaped_unlike_the_case)
{
    const char *p = tested_file("rerunshape.h5", 0);
    static float x[NO];
    hid_t f = open_rw(p);
    hid_t g = H5Gopen2(f, TE, H5P_DEFAULT);
    hsize_t d[4] = {B, HQ, L, D / 2};
    put(g, "out_rerun", 4, d, x, AS_F16);
    H5Gclose(g);
    H5Fclose(f);
    expect_refused(p, TE "/out_rerun: shape [1, 2, 96, 8]", "[B, Hq, Lq, Dv] = [1, 2, 96, 16]");
}

/* Rule (read_lse): a tested lse is [B, Hq, Lq] of the case: shorter, and with fewer heads. */
Test(tested, rejects_a_tested_lse_shaped_unlike_the_case)
{
    static float x[NL];
    const hsize_t shapes[2][3] = {{B, HQ, L - 1}, {B, 1, L}};
    const char *want[2] = {TE "/lse: shape [1, 2, 95]", TE "/lse: shape [1, 1, 96]"};
    for (int k = 0; k < 2; k++) {
        char name[32];
        snprintf(name, sizeof name, "lseshape%d.h5", k);
        const char *p = tested_file(name, 0);
        hid_t f = open_rw(p);
        hid_t g = H5Gopen2(f, TE, H5P_DEFAULT);
        cr_assert(H5Ldelete(g, "lse", H5P_DEFAULT) >= 0);
        put(g, "lse", 3, shapes[k], x, AS_F32);
        H5Gclose(g);
        H5Fclose(f);
        expect_refused(p, want[k], "[B, Hq, Lq] = [1, 2, 96]");
    }
}

/* Rule (read_out): the encoding attribute names the bit patterns of a uint16 dataset: on float
 * data it is refused, and a uint16 dataset's must say bfloat16, as must an integer dataset's be
 * uint16 to carry it. */
Test(tested, rejects_an_encoding_that_does_not_match_the_storage)
{
    static float x[NO];
    {
        const char *p = write_case("encfloat.h5");
        add_tested(p, "e", "engine", x, AS_F16, NULL, NULL, AS_F16);
        hid_t f = open_rw(p);
        cr_assert(H5LTset_attribute_string(f, TE "/out", "encoding", "bfloat16") >= 0);
        H5Fclose(f);
        expect_refused(p, TE "/out", "attribute encoding = \"bfloat16\" on float data");
    }
    {
        const char *p = write_case("encu16.h5");
        add_tested(p, "e", "engine", x, AS_U16_PLAIN, NULL, NULL, AS_F16);
        hid_t f = open_rw(p);
        cr_assert(H5LTset_attribute_string(f, TE "/out", "encoding", "float16") >= 0);
        H5Fclose(f);
        expect_refused(p, TE "/out", "only uint16 bit patterns", "(encoding is \"float16\")");
    }
    {
        const char *p = write_case("encint32.h5");
        add_tested(p, "e", "engine", x, AS_F16, NULL, NULL, AS_F16);
        hsize_t d[4] = {B, HQ, L, D};
        put_i32_filled(p, TE, "out", 4, d, 0);
        hid_t f = open_rw(p);
        cr_assert(H5LTset_attribute_string(f, TE "/out", "encoding", "bfloat16") >= 0);
        H5Fclose(f);
        expect_refused(p, TE "/out", "only uint16 bit patterns", "(encoding is \"bfloat16\")");
    }
}

/* Rule (fix_read_bmask under tested/<label>): a producer's block mask is held to the case's
 * shapes like the case's own: its query blocks from the case's Lq, its head dim 1 or the case's
 * Hq, its leading dim 1 or the case's B. */
Test(tested, rejects_a_producers_block_mask_shaped_for_another_case)
{
    const char *bmp = TE "/block_mask";
    struct {
        hsize_t dims[3];
        const char *want;
    } bad[] = {
        {{1, 1, 5}, "5 query blocks: Lq = 96 with q_block_size 16 needs 6"},
        {{1, 3, 6}, "head dim 3: must be 1 or Hq = 2"},
        {{2, 1, 6}, "leading dim 2: must be 1 or B = 1"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        char name[32];
        snprintf(name, sizeof name, "pbmshape%zu.h5", k);
        const char *p = tested_file(name, 1);
        put_i32_filled(p, bmp, "kv_num_blocks", 3, bad[k].dims, 0);
        expect_refused(p, TE "/block_mask/kv_num_blocks", bad[k].want);
    }
}

/* Rule (check_bm_shapes under tested/<label>): the producer's full lists are shaped like its
 * partial ones (full_kv_indices narrower than kv_indices here), and (bmask_validate) its
 * counts are at most the row width. */
Test(tested, rejects_a_producers_block_mask_whose_lists_disagree)
{
    const char *p = tested_file("pbmnarrow.h5", 1);
    hsize_t d[4] = {1, 1, 6, 1};
    put_i32_filled(p, TE "/block_mask", "full_kv_indices", 4, d, -1);
    expect_refused(p, TE "/block_mask/full_kv_indices: shape [1, 1, 6, 1]", "kv_indices as");

    p = tested_file("pbmcount.h5", 1);
    hsize_t n[3] = {1, 1, 6};
    put_i32_filled(p, TE "/block_mask", "kv_num_blocks", 3, n, 99);
    expect_refused(p, TE "/block_mask", "kv_num_blocks[0][0][0] = 99: must be in [0, ");
}
