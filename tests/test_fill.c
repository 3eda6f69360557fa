/*
 * test_fill.c - `flexcheck fill` (fix_fill): the expected outputs of a file that holds inputs
 * only. The oracle values must be what our generator computed for the same inputs; everything
 * else in the file (attributes and groups fill does not know) must survive; a refused or failed
 * fill must leave every file as it was and no temporary behind.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/test_tmpdir.h"
#include "fixtures/fix.h"
#include "fixtures/fix_h5.h"

TEST_TMPDIR("filltest")

/* HDF5's own error printer off: the tests read the one line we print. */
static void make_dir_quiet(void)
{
    make_dir();
    fix_h5_quiet();
}

TestSuite(fill, .init = make_dir_quiet, .fini = remove_dir);

/* Two generated cases (one packed); their oracles are kept in gen[] to compare with. */
static void write_two(const char *p, fix_case gen[2])
{
    fix_gen_params gp[2] = {
        {.name = "a_dense", .dtype = FC_F16, .b = 2, .hq = 4, .hkv = 2, .lq = 40, .lk = 72,
         .d = 16, .dv = 8, .mask = {.causal = 1, .sliding_window = 9}, .seed = 5},
        {.name = "b_packed", .dtype = FC_F32, .b = 1, .hq = 2, .hkv = 1, .lq = 50, .lk = 50,
         .d = 16, .dv = 16, .mask = {.causal = 1}, .nseq = 3, .cu_q = {0, 10, 30, 50},
         .cu_k = {0, 10, 30, 50}, .seed = 6},
    };
    fc_err err;
    for (int i = 0; i < 2; i++)
        cr_assert_eq(fix_gen_case(&gp[i], &gen[i], &err), FC_OK, "%s", err.msg);
    cr_assert_eq(fix_write(p, NULL, gen, 2, 0, &err), FC_OK, "%s", err.msg);
}

/* Deletes out/lse of the named cases (an engine's dump has none) and adds what an engine might
 * store besides: an attribute and a group fill knows nothing about. */
static void strip(const char *p, const char *const *names, int n)
{
    hid_t f = H5Fopen(p, H5F_ACC_RDWR, H5P_DEFAULT);
    cr_assert(f >= 0);
    for (int i = 0; i < n; i++) {
        hid_t g = H5Gopen2(f, names[i], H5P_DEFAULT);
        cr_assert(g >= 0 && H5Ldelete(g, "out", H5P_DEFAULT) >= 0 &&
                  H5Ldelete(g, "lse", H5P_DEFAULT) >= 0, "strip %s", names[i]);
        cr_assert(H5LTset_attribute_string(g, ".", "engine_note", "layer 7, step 3") >= 0);
        hid_t x = H5Gcreate2(g, "engine_extras", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        cr_assert(x >= 0);
        H5Gclose(x);
        H5Gclose(g);
    }
    H5Fclose(f);
}

static long file_size(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 ? (long)st.st_size : -1;
}

static char *slurp(const char *p, long *n)
{
    FILE *f = fopen(p, "rb");
    cr_assert(f, "open %s", p);
    *n = file_size(p);
    char *b = malloc((size_t)*n + 1);
    cr_assert(fread(b, 1, (size_t)*n, f) == (size_t)*n);
    fclose(f);
    return b;
}

/* Files in dir whose name contains ".tmp-" (a writer's leftover). */
static int temporaries(void)
{
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += strstr(e->d_name, ".tmp-") != NULL;
    closedir(d);
    return n;
}

static void expect_oracle(const char *p, const fix_case gen[2])
{
    fix_file f;
    fc_err err;
    cr_assert_eq(fix_open(p, &f, &err), FC_OK, "%s", err.msg);
    for (int i = 0; i < 2; i++) {
        fix_case c;
        cr_assert_eq(fix_read_case(&f, i, &c, &err), FC_OK, "%s", err.msg);
        cr_assert(c.has_oracle);
        size_t no = attn_o_elems(&c.prob), nl = attn_lse_elems(&c.prob);
        cr_expect(memcmp(c.out, gen[i].out, no * sizeof *c.out) == 0, "%s: out differs", c.name);
        for (size_t r = 0; r < nl; r++)
            cr_expect(c.lse[r] == gen[i].lse[r] || (isinf(c.lse[r]) && isinf(gen[i].lse[r])),
                      "%s: lse row %zu", c.name, r);
        fix_case_free(&c);
    }
    fix_close(&f);
}

Test(fill, computes_the_missing_oracle_and_keeps_everything_else)
{
    const char *in = path_of("dump.h5"), *out = path_of("filled.h5");
    fix_case gen[2];
    write_two(in, gen);
    static const char *const names[2] = {"/cases/a_dense", "/cases/b_packed"};
    strip(in, names, 2);
    long n0;
    char *before = slurp(in, &n0);

    fix_fill_result r;
    fc_err err;
    cr_assert_eq(fix_fill(in, out, 0, NULL, &r, &err), FC_OK, "%s", err.msg);
    cr_expect(r.cases == 2 && r.filled == 2 && r.had_oracle == 0, "%d %d %d", r.cases, r.filled,
              r.had_oracle);
    expect_oracle(out, gen);

    /* What fill does not know is still there. */
    hid_t f = H5Fopen(out, H5F_ACC_RDONLY, H5P_DEFAULT);
    char note[64] = "";
    cr_expect(H5LTget_attribute_string(f, names[1], "engine_note", note) >= 0 &&
                  !strcmp(note, "layer 7, step 3"), "attribute lost: '%s'", note);
    cr_expect(H5Lexists(f, "/cases/a_dense/engine_extras", H5P_DEFAULT) > 0, "group lost");
    H5Fclose(f);

    /* The input is untouched, a second fill to the same target is refused, nothing is left. */
    long n1;
    char *after = slurp(in, &n1);
    cr_expect(n0 == n1 && memcmp(before, after, (size_t)n0) == 0, "fill modified its input");
    long sz = file_size(out);
    cr_expect_eq(fix_fill(in, out, 0, NULL, &r, &err), FC_EINVAL);
    cr_expect(strstr(err.msg, "exists"), "%s", err.msg);
    cr_expect_eq(file_size(out), sz);
    cr_expect_eq(temporaries(), 0);
    free(before);
    free(after);
    fix_case_free(&gen[0]);
    fix_case_free(&gen[1]);
}

Test(fill, in_place_fills_only_what_is_missing_and_keeps_the_mode)
{
    const char *in = path_of("one.h5");
    fix_case gen[2];
    write_two(in, gen);
    static const char *const names[1] = {"/cases/b_packed"};
    strip(in, names, 1);
    cr_assert_eq(chmod(in, 0640), 0);
    fix_fill_result r;
    fc_err err;
    cr_assert_eq(fix_fill(in, NULL, 0, NULL, &r, &err), FC_OK, "%s", err.msg);
    cr_expect(r.cases == 2 && r.filled == 1 && r.had_oracle == 1);
    expect_oracle(in, gen);
    struct stat st;
    cr_assert_eq(stat(in, &st), 0);
    cr_expect_eq(st.st_mode & 0777, 0640, "mode %o", (unsigned)(st.st_mode & 0777));

    /* Nothing missing: in place writes nothing at all. */
    long n0;
    char *before = slurp(in, &n0);
    cr_assert_eq(fix_fill(in, NULL, 0, NULL, &r, &err), FC_OK, "%s", err.msg);
    cr_expect(r.filled == 0 && r.had_oracle == 2);
    long n1;
    char *after = slurp(in, &n1);
    cr_expect(n0 == n1 && memcmp(before, after, (size_t)n0) == 0);
    cr_expect_eq(temporaries(), 0);
    free(before);
    free(after);
    fix_case_free(&gen[0]);
    fix_case_free(&gen[1]);
}

/* A file the reader rejects (here: a NaN in k, or out without lse) is refused whole: no output,
 * the input unchanged, no temporary, one line naming file, case and field. */
Test(fill, refuses_an_invalid_file_and_writes_nothing)
{
    const char *in = path_of("bad.h5"), *out = path_of("never.h5");
    fix_case gen[2];
    write_two(in, gen);
    static const char *const names[1] = {"/cases/a_dense"};
    strip(in, names, 1);
    hid_t f = H5Fopen(in, H5F_ACC_RDWR, H5P_DEFAULT);
    cr_assert(H5Ldelete(f, "/cases/b_packed/lse", H5P_DEFAULT) >= 0);
    H5Fclose(f);
    long n0;
    char *before = slurp(in, &n0);
    fix_fill_result r;
    fc_err err;
    cr_expect_eq(fix_fill(in, out, 0, NULL, &r, &err), FC_EINVAL);
    cr_expect(strstr(err.msg, "bad.h5") && strstr(err.msg, "/cases/b_packed") &&
                  strstr(err.msg, "out present without lse"), "%s", err.msg);
    cr_expect(access(out, F_OK) != 0, "an output was written");
    cr_expect_eq(fix_fill(in, NULL, 0, NULL, &r, &err), FC_EINVAL);
    long n1;
    char *after = slurp(in, &n1);
    cr_expect(n0 == n1 && memcmp(before, after, (size_t)n0) == 0, "input modified");
    cr_expect_eq(temporaries(), 0);
    free(before);
    free(after);
    fix_case_free(&gen[0]);
    fix_case_free(&gen[1]);
}

/* A case that already holds out/lse keeps them only if they are our oracle's: one whose out was
 * replaced by zeros and one huge element (what made `check` pass before) is refused, naming the
 * case, and nothing is written, in place or not. */
Test(fill, refuses_a_stored_oracle_it_does_not_reproduce_and_writes_nothing)
{
    const char *in = path_of("garbage.h5"), *out = path_of("never2.h5");
    fix_case gen[2];
    write_two(in, gen);
    static const char *const names[1] = {"/cases/a_dense"};
    strip(in, names, 1); /* a_dense to be filled, b_packed keeps its (now garbage) oracle */
    hid_t f = H5Fopen(in, H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t d = H5Dopen2(f, "/cases/b_packed/out", H5P_DEFAULT);
    size_t n = attn_o_elems(&gen[1].prob);
    double *o = calloc(n, sizeof *o);
    o[n - 1] = 1e308;
    cr_assert(d >= 0 && H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, o) >= 0);
    H5Dclose(d);
    H5Fclose(f);
    free(o);
    long n0;
    char *before = slurp(in, &n0);
    fix_fill_result r;
    fc_err err;
    cr_expect_eq(fix_fill(in, out, 0, NULL, &r, &err), FC_EINVAL);
    cr_expect(strstr(err.msg, "garbage.h5") && strstr(err.msg, "/cases/b_packed") &&
                  strstr(err.msg, "not the float64 oracle of its inputs") &&
                  strstr(err.msg, "beyond max|v|"), "%s", err.msg);
    cr_expect(access(out, F_OK) != 0, "an output was written");
    cr_expect_eq(fix_fill(in, NULL, 0, NULL, &r, &err), FC_EINVAL);
    long n1;
    char *after = slurp(in, &n1);
    cr_expect(n0 == n1 && memcmp(before, after, (size_t)n0) == 0, "input modified");
    cr_expect_eq(temporaries(), 0);
    free(before);
    free(after);
    fix_case_free(&gen[0]);
    fix_case_free(&gen[1]);
}

/* Files in dir/sub whose name contains ".tmp-". */
static int temporaries_in(const char *sub)
{
    char p[160];
    snprintf(p, sizeof p, "%s/%s", dir, sub);
    DIR *d = opendir(p);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        n += strstr(e->d_name, ".tmp-") != NULL;
    if (d)
        closedir(d);
    return n;
}

static int is_link(const char *p)
{
    struct stat st;
    return lstat(p, &st) == 0 && S_ISLNK(st.st_mode);
}

/* In place through a symbolic link (relative, into another folder): the link's target gets the
 * oracle and the link stays a link; so does a forced --out that is a link. */
Test(fill, in_place_through_a_symlink_fills_the_target_and_keeps_the_link)
{
    char sub[128];
    snprintf(sub, sizeof sub, "%s/sub", dir);
    cr_assert_eq(mkdir(sub, 0755), 0);
    const char *real = path_of("sub/real.h5"), *link = path_of("link.h5");
    fix_case gen[2];
    write_two(real, gen);
    static const char *const names[2] = {"/cases/a_dense", "/cases/b_packed"};
    strip(real, names, 2);
    cr_assert_eq(symlink("sub/real.h5", link), 0);
    fix_fill_result r;
    fc_err err;
    cr_assert_eq(fix_fill(link, NULL, 0, NULL, &r, &err), FC_OK, "%s", err.msg);
    cr_expect_eq(r.filled, 2);
    cr_expect(is_link(link), "the link was replaced");
    expect_oracle(real, gen);
    cr_expect_eq(temporaries(), 0);
    cr_expect_eq(temporaries_in("sub"), 0);

    /* --out LINK --force: the file it points to is replaced, the link kept. */
    const char *in = path_of("dump.h5"), *other = path_of("sub/other.h5"),
               *olink = path_of("olink.h5");
    fix_case gen2[2];
    write_two(in, gen2);
    strip(in, names, 2);
    FILE *fp = fopen(other, "w");
    cr_assert(fp);
    fputs("old contents", fp);
    fclose(fp);
    cr_assert_eq(symlink("sub/other.h5", olink), 0);
    cr_assert_eq(fix_fill(in, olink, 1, NULL, &r, &err), FC_OK, "%s", err.msg);
    cr_expect(is_link(olink), "the --out link was replaced");
    expect_oracle(other, gen2);
    cr_expect_eq(temporaries(), 0);
    cr_expect_eq(temporaries_in("sub"), 0);
    for (int i = 0; i < 2; i++) {
        fix_case_free(&gen[i]);
        fix_case_free(&gen2[i]);
    }
}
