/*
 * test_fixtures.c - the HDF5 fixture reader, validator and writer (fixtures/, docs/fixtures.md).
 *
 * Every validation rule of the spec has a test here that makes a deliberately broken file:
 * a valid file from our writer, then one thing broken through the plain HDF5 API (a link
 * deleted, a dataset replaced, an attribute rewritten), then the reader must reject it with
 * one message naming the file, the case and the field, and leave the file untouched.
 * Files written the way h5py writes them (variable-length strings, int64 attributes, scalar
 * dataspaces, float16 storage) must be accepted. The round trip, reproducibility and the
 * writer's refusal to overwrite are tested too.
 */
#include <criterion/criterion.h>
#include <hdf5.h>
#include <hdf5_hl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fixtures/fix.h"
#include "fixtures/fix_h5.h"
#include "base/lowp.h"
#include "tests/test_fix_break.h"

/* ---- scratch files ---- */

static char dir[64];

static void make_dir(void)
{
    snprintf(dir, sizeof dir, "/tmp/fixtest-XXXXXX");
    cr_assert(mkdtemp(dir), "mkdtemp");
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

static void remove_dir(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    (void)!system(cmd);
}

TestSuite(fixture_reader, .init = make_dir, .fini = remove_dir);
TestSuite(fixture_writer, .init = make_dir, .fini = remove_dir);
TestSuite(fixture_check, .init = make_dir, .fini = remove_dir);
TestSuite(fixture_terms, .init = make_dir, .fini = remove_dir);
TestSuite(fixture_budget, .init = make_dir, .fini = remove_dir);

static const char *path_of(const char *name)
{
    static char p[4][128];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", dir, name);
    return p[k];
}

/* The base case: B=1, Hq=2, Hkv=1, Lq=20, Lk=24, D=Dv=4, causal, blocks 16, block mask stored.
 * packed: the same lengths cut into three sequences (one empty query sequence). */
static fix_gen_params base_params(fc_dtype dt, int packed)
{
    fix_gen_params gp = {.name = "c0", .dtype = dt, .b = 1, .hq = 2, .hkv = 1, .lq = 20, .lk = 24,
                         .d = 4, .dv = 4, .mask = {.causal = 1}, .qb = 16, .kb = 16, .seed = 7,
                         .with_bmask = 1};
    if (packed) {
        int32_t cq[] = {0, 8, 8, 20}, ck[] = {0, 10, 12, 24};
        gp.nseq = 3;
        memcpy(gp.cu_q, cq, sizeof cq);
        memcpy(gp.cu_k, ck, sizeof ck);
    }
    return gp;
}

static const char *write_base(const char *name, fc_dtype dt, int packed)
{
    const char *p = path_of(name);
    fix_gen_params gp = base_params(dt, packed);
    fc_err err;
    fc_status st = fix_gen_file(p, &gp, 1, 0, &err);
    cr_assert_eq(st, FC_OK, "writing %s: %s", p, err.msg);
    return p;
}

/* ---- breaking files with the plain HDF5 API (and open_rw, del, put_ds, put_f32, put_i32,
 * the attribute setters: tests/test_fix_break.h) ---- */

/* A variable-length UTF-8 string in a scalar dataspace: what h5py writes for a str. */
static void put_attr_vlstr(hid_t f, const char *obj, const char *name, const char *v)
{
    drop_attr(f, obj, name);
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, H5T_VARIABLE);
    H5Tset_cset(t, H5T_CSET_UTF8);
    hid_t s = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate_by_name(f, obj, name, t, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    cr_assert(a >= 0 && H5Awrite(a, t, &v) >= 0, "vlen attr %s", name);
    H5Aclose(a);
    H5Sclose(s);
    H5Tclose(t);
}

/* An int64 in a scalar dataspace (h5py's np.int64 attribute). */
static void put_attr_scalar_i64(hid_t f, const char *obj, const char *name, long long v)
{
    drop_attr(f, obj, name);
    hid_t s = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate_by_name(f, obj, name, H5T_STD_I64LE, s, H5P_DEFAULT, H5P_DEFAULT,
                                H5P_DEFAULT);
    cr_assert(a >= 0 && H5Awrite(a, H5T_NATIVE_LLONG, &v) >= 0, "int64 attr %s", name);
    H5Aclose(a);
    H5Sclose(s);
}

/* A one-value enum attribute over `base` with one member per value given (name "V<value>",
 * or FALSE/TRUE for 0 and 1 over int8: exactly what h5py writes for Python bool). */
static void put_attr_enum(hid_t f, const char *obj, const char *name, hid_t base, long long v)
{
    drop_attr(f, obj, name);
    hid_t t = H5Tenum_create(base);
    cr_assert(t >= 0, "enum type for %s", name);
    long long members[3] = {0, 1, v};
    for (int i = 0; i < 3; i++) {
        if (i == 2 && (v == 0 || v == 1))
            break;
        char mname[32];
        snprintf(mname, sizeof mname, "%s", members[i] == 0 ? "FALSE" : members[i] == 1 ? "TRUE"
                                                                                          : "V");
        unsigned char raw[8];
        int64_t m = members[i];
        memcpy(raw, &m, sizeof m);
        cr_assert(H5Tconvert(H5T_NATIVE_INT64, base, 1, raw, NULL, H5P_DEFAULT) >= 0, "member");
        cr_assert(H5Tenum_insert(t, mname, raw) >= 0, "enum member %s of %s", mname, name);
    }
    unsigned char val[8];
    int64_t vv = v;
    memcpy(val, &vv, sizeof vv);
    cr_assert(H5Tconvert(H5T_NATIVE_INT64, base, 1, val, NULL, H5P_DEFAULT) >= 0, "value");
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate_by_name(f, obj, name, t, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    cr_assert(a >= 0 && H5Awrite(a, t, val) >= 0, "enum attr %s", name);
    H5Aclose(a);
    H5Sclose(sp);
    H5Tclose(t);
}

/* Reads dataset obj (any float type) as float32; n elements. */
static float *get_f32(hid_t f, const char *obj, size_t n)
{
    float *x = calloc(n, sizeof *x);
    hid_t d = H5Dopen2(f, obj, H5P_DEFAULT);
    cr_assert(d >= 0 && H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, x) >= 0,
              "read %s", obj);
    H5Dclose(d);
    return x;
}

/* ---- expectations: expect_rejected, expect_accepted (tests/test_fix_break.h) ---- */

/* Applies `breaker` to a fresh base file and returns the path. */
#define BROKEN(name, dt, packed, body)                                                           \
    const char *p = write_base(name, dt, packed);                                                \
    {                                                                                            \
        hid_t f = open_rw(p);                                                                    \
        body;                                                                                    \
        H5Fclose(f);                                                                             \
    }

#define C0 "/cases/c0"
#define BM C0 "/block_mask"

/* ---- file level ---- */

Test(fixture_reader, accepts_what_the_writer_wrote_for_every_dtype)
{
    expect_accepted(write_base("f32.h5", FC_F32, 0));
    expect_accepted(write_base("f16.h5", FC_F16, 0));
    expect_accepted(write_base("bf16.h5", FC_BF16, 1));
}

Test(fixture_reader, rejects_a_file_that_is_not_hdf5_at_all)
{
    const char *p = path_of("text.h5");
    FILE *fp = fopen(p, "w");
    fputs("q,k,v\n1,2,3\n", fp);
    fclose(fp);
    expect_rejected(p, "not an HDF5 file");
}

Test(fixture_reader, rejects_an_empty_file)
{
    const char *p = path_of("empty.h5");
    fclose(fopen(p, "w"));
    expect_rejected(p, "not an HDF5 file");
}

Test(fixture_reader, rejects_a_missing_file_with_its_name)
{
    fix_file f;
    fc_err err;
    const char *p = path_of("no-such-file.h5");
    cr_assert_neq(fix_open(p, &f, &err), FC_OK);
    cr_assert(strstr(err.msg, p) && strstr(err.msg, "no such file"), "%s", err.msg);
}

/* Looked at before anything opens it: a FIFO would block the open forever (the timeout fails
 * the test if it does), a directory is no file at all. */
Test(fixture_reader, rejects_a_directory_and_a_fifo_without_opening_them, .timeout = 20)
{
    fix_file f;
    fc_err err;
    const char *d = path_of("adir"), *q = path_of("afifo");
    cr_assert_eq(mkdir(d, 0755), 0);
    cr_assert_eq(mkfifo(q, 0644), 0);
    cr_assert_eq(fix_open(d, &f, &err), FC_EINVAL);
    cr_expect(strstr(err.msg, d) && strstr(err.msg, ": is a directory"), "%s", err.msg);
    cr_assert_eq(fix_open(q, &f, &err), FC_EINVAL);
    cr_expect(strstr(err.msg, q) && strstr(err.msg, ": not a regular file"), "%s", err.msg);
}

/* Truncation at several points: the reader must fail cleanly wherever the cut falls. */
Test(fixture_reader, rejects_a_truncated_file_wherever_it_is_cut)
{
    const char *p = write_base("full.h5", FC_F32, 0);
    struct stat sb;
    cr_assert_eq(stat(p, &sb), 0);
    const double cuts[] = {0.9, 0.75, 0.5, 0.25, 0.05};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        char name[32];
        snprintf(name, sizeof name, "cut%zu.h5", i);
        const char *q = path_of(name);
        char cmd[512];
        snprintf(cmd, sizeof cmd, "head -c %ld '%s' > '%s'", (long)(sb.st_size * cuts[i]), p, q);
        cr_assert_eq(system(cmd), 0);
        fix_file f;
        fc_err err = {{0}};
        fc_status st = fix_open(q, &f, &err);
        if (!st) {
            st = fix_validate(&f, &err);
            fix_close(&f);
        }
        cr_assert_neq(st, FC_OK, "file cut to %.0f%% was accepted", cuts[i] * 100);
        cr_assert(strstr(err.msg, q), "message names the file: %s", err.msg);
    }
}

Test(fixture_reader, rejects_a_wrong_schema_string_and_names_it)
{
    BROKEN("schema.h5", FC_F32, 0, put_attr_str(f, "/", "schema", "flexcheck-fixture-5"));
    expect_rejected(p, "schema 'flexcheck-fixture-5'", FIX_SCHEMA, FIX_SCHEMA_TERMS,
                    FIX_SCHEMA_XTERMS, FIX_SCHEMA_PAGED);
}

Test(fixture_reader, rejects_a_missing_schema)
{
    BROKEN("noschema.h5", FC_F32, 0, drop_attr(f, "/", "schema"));
    expect_rejected(p, "missing required attribute 'schema'");
}

Test(fixture_reader, rejects_a_schema_that_is_not_a_string)
{
    BROKEN("intschema.h5", FC_F32, 0, put_attr_int(f, "/", "schema", 1));
    expect_rejected(p, "'schema': must be a string");
}

Test(fixture_reader, rejects_a_file_without_cases)
{
    BROKEN("nocases.h5", FC_F32, 0, del(f, C0); del(f, "/cases"));
    expect_rejected(p, "/cases", "missing required group");
}

Test(fixture_reader, rejects_an_empty_cases_group)
{
    BROKEN("emptycases.h5", FC_F32, 0, del(f, C0));
    expect_rejected(p, "/cases", "0 cases");
}

Test(fixture_reader, rejects_a_case_that_is_not_a_group)
{
    float x[1] = {0};
    hsize_t d[1] = {1};
    BROKEN("casenotgroup.h5", FC_F32, 0, put_f32(f, "/cases/c1", 1, d, x));
    expect_rejected(p, "/cases/c1", "not a readable group");
}

Test(fixture_reader, rejects_a_case_that_is_an_external_link)
{
    const char *other = write_base("other.h5", FC_F32, 0);
    BROKEN("extlink.h5", FC_F32, 0,
           H5Lcreate_external(other, C0, f, "/cases/c1", H5P_DEFAULT, H5P_DEFAULT));
    expect_rejected(p, "/cases", "soft or external link");
}

Test(fixture_reader, rejects_a_dataset_that_is_a_soft_link)
{
    BROKEN("softlink.h5", FC_F32, 0, del(f, C0 "/v");
           H5Lcreate_soft(C0 "/k", f, C0 "/v", H5P_DEFAULT, H5P_DEFAULT));
    expect_rejected(p, C0, "'v' is a soft or external link");
}

Test(fixture_reader, rejects_a_dataset_stored_in_an_external_raw_file)
{
    const char *raw = path_of("raw.bin");
    FILE *fp = fopen(raw, "wb");
    float z[24 * 4] = {0};
    fwrite(z, sizeof z, 1, fp);
    fclose(fp);
    const char *p = write_base("extraw.h5", FC_F32, 0);
    hid_t f = open_rw(p);
    del(f, C0 "/k");
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_external(dcpl, raw, 0, sizeof z);
    hsize_t d[4] = {1, 1, 24, 4};
    hid_t s = H5Screate_simple(4, d, NULL);
    hid_t ds = H5Dcreate2(f, C0 "/k", H5T_NATIVE_FLOAT, s, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    cr_assert(ds >= 0);
    H5Dclose(ds);
    H5Sclose(s);
    H5Pclose(dcpl);
    H5Fclose(f);
    expect_rejected(p, C0 "/k", "external storage");
}

/* ---- attributes ---- */

Test(fixture_reader, rejects_each_missing_required_attribute)
{
    const char *names[] = {"dtype", "causal", "sliding_window", "chunk_size", "scale"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char file[32];
        snprintf(file, sizeof file, "noattr%zu.h5", i);
        BROKEN(file, FC_F32, 0, drop_attr(f, C0, names[i]));
        expect_rejected(p, C0, "missing required attribute", names[i]);
    }
}

Test(fixture_reader, rejects_a_bad_dtype_string)
{
    BROKEN("dtype.h5", FC_F32, 0, put_attr_str(f, C0, "dtype", "float64"));
    expect_rejected(p, C0, "'dtype' = 'float64'");
}

Test(fixture_reader, rejects_a_negative_window)
{
    BROKEN("window.h5", FC_F32, 0, put_attr_int(f, C0, "sliding_window", -1));
    expect_rejected(p, C0, "'sliding_window' = -1");
}

Test(fixture_reader, rejects_a_negative_chunk)
{
    BROKEN("chunk.h5", FC_F32, 0, put_attr_int(f, C0, "chunk_size", -8));
    expect_rejected(p, C0, "'chunk_size' = -8");
}

Test(fixture_reader, rejects_causal_other_than_0_or_1)
{
    BROKEN("causal.h5", FC_F32, 0, put_attr_int(f, C0, "causal", 2));
    expect_rejected(p, C0, "'causal' = 2");
}

Test(fixture_reader, rejects_a_window_beyond_int32)
{
    BROKEN("bigwindow.h5", FC_F32, 0, put_attr_int(f, C0, "sliding_window", 1LL << 40));
    expect_rejected(p, C0, "'sliding_window' = 1099511627776");
}

Test(fixture_reader, rejects_a_zero_negative_or_non_finite_scale)
{
    const double bad[] = {0.0, -0.125, NAN, INFINITY};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char file[32];
        snprintf(file, sizeof file, "scale%zu.h5", i);
        BROKEN(file, FC_F32, 0, put_attr_double(f, C0, "scale", bad[i]));
        expect_rejected(p, C0, "'scale'", "finite and > 0");
    }
}

Test(fixture_reader, rejects_a_block_size_that_is_not_a_power_of_two)
{
    BROKEN("qbs.h5", FC_F32, 0, put_attr_int(f, C0, "q_block_size", 100));
    expect_rejected(p, C0, "'q_block_size' = 100");
}

Test(fixture_reader, accepts_strings_and_integers_the_way_h5py_writes_them)
{
    BROKEN("h5py.h5", FC_F32, 0, put_attr_vlstr(f, "/", "schema", FIX_SCHEMA);
           put_attr_vlstr(f, C0, "dtype", "float32");
           put_attr_vlstr(f, C0, "generator", "h5py test");
           put_attr_scalar_i64(f, C0, "causal", 1);
           put_attr_scalar_i64(f, C0, "sliding_window", 0);
           put_attr_scalar_i64(f, C0, "seed", -5));
    expect_accepted(p);
    fix_file ff;
    fix_case c;
    fc_err err;
    cr_assert_eq(fix_open(p, &ff, &err), FC_OK, "%s", err.msg);
    cr_assert_eq(fix_read_case(&ff, 0, &c, &err), FC_OK, "%s", err.msg);
    cr_assert_str_eq(c.generator, "h5py test");
    cr_assert(c.has_seed && c.seed == -5);
    cr_assert_eq(c.prob.mask.causal, 1);
    fix_case_free(&c);
    fix_close(&ff);
}

Test(fixture_reader, accepts_integers_stored_as_hdf5_booleans_and_enums)
{
    /* causal as h5py's bool (enum of int8, FALSE/TRUE), sliding_window as an enum over a
     * big-endian int16 (a member of value 300), chunk_size as h5py's False. */
    BROKEN("enums.h5", FC_F32, 0, put_attr_enum(f, C0, "causal", H5T_NATIVE_INT8, 1);
           put_attr_enum(f, C0, "sliding_window", H5T_STD_I16BE, 300);
           put_attr_enum(f, C0, "chunk_size", H5T_NATIVE_INT8, 0));
    expect_accepted(p);
    fix_file ff;
    fix_case c;
    fc_err err;
    cr_assert_eq(fix_open(p, &ff, &err), FC_OK, "%s", err.msg);
    cr_assert_eq(fix_read_case(&ff, 0, &c, &err), FC_OK, "%s", err.msg);
    cr_expect_eq(c.prob.mask.causal, 1, "causal from a bool enum");
    cr_expect_eq(c.prob.mask.sliding_window, 300, "window from a big-endian int16 enum");
    cr_expect_eq(c.prob.mask.chunk_size, 0, "chunk from a bool enum");
    fix_case_free(&c);
    fix_close(&ff);
}

Test(fixture_reader, range_checks_an_enum_value_like_an_integer)
{
    BROKEN("enum2.h5", FC_F32, 0, put_attr_enum(f, C0, "causal", H5T_NATIVE_INT8, 2));
    expect_rejected(p, C0, "attribute 'causal' = 2: must be in [0, 1]");
}

Test(fixture_reader, defaults_absent_block_sizes_to_128)
{
    BROKEN("defaults.h5", FC_F32, 0, drop_attr(f, C0, "q_block_size");
           drop_attr(f, C0, "kv_block_size"); drop_attr(f, C0, "generator");
           drop_attr(f, C0, "seed"));
    fix_file ff;
    fix_case c;
    fc_err err;
    cr_assert_eq(fix_open(p, &ff, &err), FC_OK, "%s", err.msg);
    cr_assert_eq(fix_read_case(&ff, 0, &c, &err), FC_OK, "%s", err.msg);
    cr_assert(c.q_block_size == 128 && c.kv_block_size == 128 && !c.has_seed &&
              c.generator[0] == '\0');
    fix_case_free(&c);
    fix_close(&ff);
}

/* A one-value fixed-length string attribute of `size` bytes of storage, padded as `pad` says
 * (numpy's 'S300' is NULLPAD, Fortran's strings SPACEPAD). */
static void put_attr_fixed(hid_t f, const char *obj, const char *name, const char *v,
                           size_t size, H5T_str_t pad)
{
    drop_attr(f, obj, name);
    char *buf = calloc(size + 1, 1);
    memset(buf, pad == H5T_STR_SPACEPAD ? ' ' : '\0', size);
    memcpy(buf, v, strlen(v) < size ? strlen(v) : size);
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, size);
    H5Tset_strpad(t, pad);
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate_by_name(f, obj, name, t, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    cr_assert(a >= 0 && H5Awrite(a, t, buf) >= 0, "fixed attr %s", name);
    H5Aclose(a);
    H5Sclose(sp);
    H5Tclose(t);
    free(buf);
}

/* An output under test `label` of the base case: its own out, as float32. */
static void put_tested(hid_t f, const char *label, const char *producer)
{
    char g[128];
    snprintf(g, sizeof g, C0 "/tested");
    if (H5Lexists(f, g, H5P_DEFAULT) <= 0)
        H5Gclose(H5Gcreate2(f, g, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    snprintf(g, sizeof g, C0 "/tested/%s", label);
    H5Gclose(H5Gcreate2(f, g, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    put_attr_vlstr(f, g, "producer", producer);
    const hsize_t od[4] = {1, 2, 20, 4};
    float *o = get_f32(f, C0 "/out", 160);
    char ds[160];
    snprintf(ds, sizeof ds, "%s/out", g);
    put_f32(f, ds, 4, od, o);
    free(o);
}

/* Reads case 0 of p, which must be accepted. */
static void read_case0(const char *p, fix_case *c)
{
    fix_file ff;
    fc_err err;
    cr_assert_eq(fix_open(p, &ff, &err), FC_OK, "%s", err.msg);
    cr_assert_eq(fix_read_case(&ff, 0, c, &err), FC_OK, "%s", err.msg);
    fix_close(&ff);
}

/* seed (provenance) as an integer type of `bits` bits, signed or not, holding v. */
static void put_attr_seed(hid_t f, unsigned bits, int is_signed, uint64_t v)
{
    drop_attr(f, C0, "seed");
    hid_t t = H5Tcopy(is_signed ? H5T_STD_I64LE : H5T_STD_U64LE);
    cr_assert(t >= 0 && H5Tset_precision(t, bits) >= 0, "type of %u bits", bits);
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate_by_name(f, C0, "seed", t, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    cr_assert(a >= 0 && H5Awrite(a, is_signed ? H5T_NATIVE_INT64 : H5T_NATIVE_UINT64, &v) >= 0);
    H5Aclose(a);
    H5Sclose(sp);
    H5Tclose(t);
}

/* A uint64 seed above INT64_MAX is kept exactly (it used to be clamped to INT64_MAX), and
 * written back as a uint64; so is our generator's (its seeds are uint64). */
Test(fixture_reader, keeps_a_uint64_seed_exactly)
{
    fix_case c;
    {
        BROKEN("useed.h5", FC_F32, 0, put_attr_seed(f, 64, 0, UINT64_MAX - 1));
        read_case0(p, &c);
        cr_expect(c.has_seed && c.seed_unsigned && (uint64_t)c.seed == UINT64_MAX - 1,
                  "seed %llu", (unsigned long long)c.seed);
        fc_err err;
        const char *again = path_of("useed2.h5");
        cr_assert_eq(fix_write(again, NULL, &c, 1, 0, &err), FC_OK, "%s", err.msg);
        fix_case_free(&c);
        read_case0(again, &c);
        cr_expect(c.seed_unsigned && (uint64_t)c.seed == UINT64_MAX - 1);
        fix_case_free(&c);
    }
    {
        BROKEN("small.h5", FC_F32, 0, put_attr_seed(f, 64, 0, 7));
        read_case0(p, &c);
        cr_expect(c.has_seed && !c.seed_unsigned && c.seed == 7);
        fix_case_free(&c);
    }
    {
        BROKEN("wide.h5", FC_F32, 0, put_attr_seed(f, 128, 1, 5));
        expect_rejected(p, C0, "attribute 'seed': an integer of 16 bytes (at most 8)");
    }
    fix_gen_params gp = base_params(FC_F32, 0);
    gp.seed = ((uint64_t)1 << 63) + 5;
    const char *p = path_of("genseed.h5");
    fc_err err;
    cr_assert_eq(fix_gen_file(p, &gp, 1, 0, &err), FC_OK, "%s", err.msg);
    read_case0(p, &c);
    cr_expect(c.seed_unsigned && (uint64_t)c.seed == gp.seed, "seed %llu",
              (unsigned long long)(uint64_t)c.seed);
    fix_case_free(&c);
}

/* A fixed-length string is judged by what it holds, not the storage it declares. */
Test(fixture_reader, measures_a_fixed_length_string_by_its_content)
{
    {
        BROKEN("fixed.h5", FC_F16, 0,
               (put_attr_fixed(f, C0, "dtype", "float16", 300, H5T_STR_NULLPAD),
                put_attr_fixed(f, "/", "schema", FIX_SCHEMA, 4000, H5T_STR_SPACEPAD),
                put_attr_fixed(f, C0, "generator", "numpy S64", 64, H5T_STR_NULLTERM)));
        fix_case c;
        read_case0(p, &c);
        cr_expect_eq(c.dtype, FC_F16);
        cr_expect_str_eq(c.generator, "numpy S64");
        fix_case_free(&c);
    }
    /* An identifier's content over its limit is still refused, naming its length. */
    char big[300];
    memset(big, 'f', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    BROKEN("fixedbig.h5", FC_F32, 0, put_attr_fixed(f, C0, "dtype", big, 400, H5T_STR_NULLPAD));
    expect_rejected(p, C0, "attribute 'dtype': a string of 299 bytes (at most 255)");
}

/* generator and producer are free text, only shown: a long one is cut with a note, never a
 * reason to refuse the file. */
Test(fixture_reader, cuts_long_free_text_with_a_note)
{
    static char gen[1000], prod[301];
    memset(gen, 'g', sizeof gen - 1);
    memset(prod, 'p', sizeof prod - 1);
    BROKEN("longtext.h5", FC_F32, 0,
           (put_attr_vlstr(f, C0, "generator", gen), put_tested(f, "eng", prod)));
    fix_case c;
    read_case0(p, &c);
    const char *note = "... [cut from 999 bytes]";
    size_t n = strlen(c.generator), k = strlen(note);
    cr_expect_eq(n, FIX_TEXT_MAX - 1, "%zu", n);
    cr_expect(n > k && !strcmp(c.generator + n - k, note) && !strncmp(c.generator, gen, n - k),
              "%s", c.generator);
    cr_assert_eq(c.ntested, 1);
    n = strlen(c.tested[0].producer);
    cr_expect(strstr(c.tested[0].producer, "... [cut from 300 bytes]") && n == FIX_TEXT_MAX - 1,
              "%s", c.tested[0].producer);
    fix_case_free(&c);
}

Test(fixture_reader, cuts_text_between_utf8_sequences)
{
    char out[16];
    fix_text_cut(out, sizeof out, "short");
    cr_expect_str_eq(out, "short");
    char s[96] = ""; /* 40 two-byte letters */
    for (int i = 0; i < 40; i++)
        strcat(s, "\xc3\xa9");
    /* The note "... [cut from 80 bytes]" is 23 bytes: with 48, 24 bytes of text fit, 12 letters
     * whole; with 47, 23 would split the 12th letter, so 22. */
    char big[48], odd[47];
    fix_text_cut(big, sizeof big, s);
    cr_expect(!strncmp(big, s, 24) && !strcmp(big + 24, "... [cut from 80 bytes]"), "%s", big);
    fix_text_cut(odd, sizeof odd, s);
    cr_expect(!strncmp(odd, s, 22) && !strcmp(odd + 22, "... [cut from 80 bytes]"), "%s", odd);
}

/* ---- datasets: presence, rank, shapes, types ---- */

Test(fixture_reader, rejects_each_missing_required_dataset)
{
    const char *names[] = {"q", "k", "v"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char file[32], obj[64];
        snprintf(file, sizeof file, "nods%zu.h5", i);
        snprintf(obj, sizeof obj, C0 "/%s", names[i]);
        BROKEN(file, FC_F32, 0, del(f, obj));
        expect_rejected(p, obj, "missing required dataset");
    }
    /* out and lse: both or neither, and neither only for fill (test_fill.c). */
    {
        BROKEN("noout.h5", FC_F32, 0, del(f, C0 "/out"));
        expect_rejected(p, C0, "lse present without out");
    }
    {
        BROKEN("nolse.h5", FC_F32, 0, del(f, C0 "/lse"));
        expect_rejected(p, C0, "out present without lse");
    }
    {
        BROKEN("nooracle.h5", FC_F32, 0, (del(f, C0 "/out"), del(f, C0 "/lse")));
        expect_rejected(p, C0, "no out/lse (the expected output): compute them first with "
                               "'flexcheck fill");
    }
}

Test(fixture_reader, rejects_q_of_the_wrong_rank)
{
    float x[2 * 20 * 4] = {0};
    hsize_t d[3] = {2, 20, 4};
    BROKEN("rank.h5", FC_F32, 0, put_f32(f, C0 "/q", 3, d, x));
    expect_rejected(p, C0 "/q", "rank 3: must be 4");
}

Test(fixture_reader, rejects_lse_of_the_wrong_rank)
{
    double x[40] = {0};
    hsize_t d[2] = {2, 20};
    BROKEN("lserank.h5", FC_F32, 0,
           put_ds(f, C0 "/lse", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 2, d, x));
    expect_rejected(p, C0 "/lse", "rank 2: must be 3");
}

Test(fixture_reader, rejects_k_whose_head_dim_differs_from_q)
{
    float x[24 * 5] = {0};
    hsize_t d[4] = {1, 1, 24, 5};
    BROKEN("kdim.h5", FC_F32, 0, put_f32(f, C0 "/k", 4, d, x));
    expect_rejected(p, C0 "/k", "shape [1, 1, 24, 5]", "[1, 1, 24, 4]");
}

Test(fixture_reader, rejects_v_whose_length_differs_from_k)
{
    float x[23 * 4] = {0};
    hsize_t d[4] = {1, 1, 23, 4};
    BROKEN("vlen.h5", FC_F32, 0, put_f32(f, C0 "/v", 4, d, x));
    expect_rejected(p, C0 "/v", "shape [1, 1, 23, 4]");
}

Test(fixture_reader, rejects_out_whose_shape_disagrees_with_q_and_v)
{
    double x[2 * 19 * 4] = {0};
    hsize_t d[4] = {1, 2, 19, 4};
    BROKEN("outshape.h5", FC_F32, 0,
           put_ds(f, C0 "/out", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 4, d, x));
    expect_rejected(p, C0 "/out", "shape [1, 2, 19, 4]", "[1, 2, 20, 4]");
}

Test(fixture_reader, rejects_heads_that_do_not_divide)
{
    /* Hq = 2, Hkv = 3 is caught as a range error; Hq = 3, Hkv = 2 as a divisibility one. */
    float q[3 * 20 * 4] = {0}, kv[2 * 24 * 4] = {0};
    double o[3 * 20 * 4] = {0}, l[3 * 20] = {0};
    hsize_t dq[4] = {1, 3, 20, 4}, dk[4] = {1, 2, 24, 4}, dl[3] = {1, 3, 20};
    BROKEN("gqa.h5", FC_F32, 0, put_f32(f, C0 "/q", 4, dq, q); put_f32(f, C0 "/k", 4, dk, kv);
           put_f32(f, C0 "/v", 4, dk, kv);
           put_ds(f, C0 "/out", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 4, dq, o);
           put_ds(f, C0 "/lse", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 3, dl, l); del(f, BM));
    expect_rejected(p, C0, "Hq % Hkv != 0");
}

Test(fixture_reader, rejects_q_stored_as_float64)
{
    double x[2 * 20 * 4] = {0};
    hsize_t d[4] = {1, 2, 20, 4};
    BROKEN("qf64.h5", FC_F32, 0, put_ds(f, C0 "/q", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 4, d, x));
    expect_rejected(p, C0 "/q", "stored as float64", "must be float16 or float32");
}

Test(fixture_reader, rejects_out_stored_as_float32)
{
    float x[2 * 20 * 4] = {0};
    hsize_t d[4] = {1, 2, 20, 4};
    BROKEN("outf32.h5", FC_F32, 0, put_f32(f, C0 "/out", 4, d, x));
    expect_rejected(p, C0 "/out", "stored as float32", "must be float64");
}

/* An absurd shape in a tiny file (never written: HDF5 stores no data for it) must be refused
 * from the shape alone, before anything is allocated. */
Test(fixture_reader, rejects_a_huge_declared_shape_without_allocating_it)
{
    hsize_t d[4] = {1, 2, 1u << 30, 1u << 20};
    BROKEN("huge.h5", FC_F32, 0, put_ds(f, C0 "/q", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 4, d, NULL));
    expect_rejected(p, C0 "/q", "limit");
}

/* ---- values ---- */

Test(fixture_reader, rejects_an_unrepresentable_float16_value_naming_its_index)
{
    const char *p = write_base("f16bad.h5", FC_F16, 0);
    hid_t f = open_rw(p);
    float *x = get_f32(f, C0 "/q", 2 * 20 * 4);
    x[((0 * 2 + 1) * 20 + 2) * 4 + 3] = 0.1f; /* q[0][1][2][3] */
    hsize_t d[4] = {1, 2, 20, 4};
    put_f32(f, C0 "/q", 4, d, x); /* float32 storage, dtype float16 */
    H5Fclose(f);
    free(x);
    expect_rejected(p, C0 "/q", "[0][1][2][3]", "not representable in float16");
}

Test(fixture_reader, rejects_an_unrepresentable_bfloat16_value)
{
    const char *p = write_base("bf16bad.h5", FC_BF16, 0);
    hid_t f = open_rw(p);
    float *x = get_f32(f, C0 "/v", 24 * 4);
    x[5] = 1.0f + 0x1p-10f; /* fine in float16, not in bfloat16 */
    hsize_t d[4] = {1, 1, 24, 4};
    put_f32(f, C0 "/v", 4, d, x);
    H5Fclose(f);
    free(x);
    expect_rejected(p, C0 "/v", "[0][0][1][1]", "not representable in bfloat16");
}

Test(fixture_reader, rejects_non_finite_inputs)
{
    const float bad[] = {NAN, INFINITY, -INFINITY};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char file[32];
        snprintf(file, sizeof file, "nonfinite%zu.h5", i);
        const char *p = write_base(file, FC_F32, 0);
        hid_t f = open_rw(p);
        float *x = get_f32(f, C0 "/k", 24 * 4);
        x[24 * 4 - 1] = bad[i];
        hsize_t d[4] = {1, 1, 24, 4};
        put_f32(f, C0 "/k", 4, d, x);
        H5Fclose(f);
        free(x);
        expect_rejected(p, C0 "/k", "[0][0][23][3]", "not finite");
    }
}

Test(fixture_reader, reads_float16_storage_exactly_including_subnormals)
{
    /* q as IEEE half written by HDF5's own type (as h5py does), with a subnormal, the largest
     * finite half and a negative zero. */
    const char *p = write_base("half.h5", FC_F16, 0);
    float want[2 * 20 * 4];
    for (int i = 0; i < 2 * 20 * 4; i++)
        want[i] = fc_round((float)(i - 80) / 16.0f, FC_F16);
    want[0] = 0x1p-24f;
    want[1] = 65504.0f;
    want[2] = -0.0f;
    uint16_t h[2 * 20 * 4];
    for (int i = 0; i < 2 * 20 * 4; i++)
        h[i] = fc_f32_to_f16(want[i]);
    hid_t f = open_rw(p);
    hid_t ht = H5Tcopy(H5T_IEEE_F32LE);
    H5Tset_fields(ht, 15, 10, 5, 0, 10);
    H5Tset_size(ht, 2);
    H5Tset_ebias(ht, 15);
    hsize_t d[4] = {1, 2, 20, 4};
    put_ds(f, C0 "/q", ht, ht, 4, d, h);
    H5Tclose(ht);
    H5Fclose(f);
    fix_file ff;
    fix_case c;
    fc_err err;
    cr_assert_eq(fix_open(p, &ff, &err), FC_OK, "%s", err.msg);
    cr_assert_eq(fix_read_case(&ff, 0, &c, &err), FC_OK, "%s", err.msg);
    cr_assert_eq(memcmp(c.q, want, sizeof want), 0, "half values must read back bit-exactly");
    fix_case_free(&c);
    fix_close(&ff);
}

/* ---- cu_seqlens ---- */

Test(fixture_reader, rejects_cu_seqlens_q_without_cu_seqlens_k)
{
    BROKEN("cuone.h5", FC_F32, 1, del(f, C0 "/cu_seqlens_k"));
    expect_rejected(p, C0, "cu_seqlens_q present without cu_seqlens_k");
}

Test(fixture_reader, rejects_cu_seqlens_that_decrease)
{
    int32_t cu[4] = {0, 8, 6, 20};
    hsize_t d[1] = {4};
    BROKEN("cudec.h5", FC_F32, 1, put_i32(f, C0 "/cu_seqlens_q", 1, d, cu));
    expect_rejected(p, C0, "cu_seqlens_q[2] = 6", "non-decreasing");
}

Test(fixture_reader, rejects_cu_seqlens_that_do_not_end_at_the_length)
{
    int32_t cu[4] = {0, 10, 12, 23};
    hsize_t d[1] = {4};
    BROKEN("cuend.h5", FC_F32, 1, put_i32(f, C0 "/cu_seqlens_k", 1, d, cu));
    expect_rejected(p, C0 "/cu_seqlens_k", "last entry 23", "Lk = 24");
}

Test(fixture_reader, rejects_cu_seqlens_that_do_not_start_at_zero)
{
    int32_t cu[4] = {2, 8, 8, 20};
    hsize_t d[1] = {4};
    BROKEN("custart.h5", FC_F32, 1, put_i32(f, C0 "/cu_seqlens_q", 1, d, cu));
    expect_rejected(p, C0, "cu_seqlens_q[0] = 2");
}

Test(fixture_reader, rejects_cu_seqlens_of_different_lengths)
{
    int32_t cu[3] = {0, 12, 24};
    hsize_t d[1] = {3};
    BROKEN("culen.h5", FC_F32, 1, put_i32(f, C0 "/cu_seqlens_k", 1, d, cu));
    expect_rejected(p, C0 "/cu_seqlens_k", "3 entries, cu_seqlens_q has 4");
}

Test(fixture_reader, rejects_cu_seqlens_with_more_than_one_batch_entry)
{
    int32_t cu[2] = {0, 20}, ck[2] = {0, 24};
    hsize_t d[1] = {2};
    const char *p = write_base("cub2.h5", FC_F32, 0);
    fix_gen_params gp = base_params(FC_F32, 0);
    gp.b = 2;
    gp.name = "c0";
    fc_err err;
    cr_assert_eq(fix_gen_file(p, &gp, 1, 1, &err), FC_OK, "%s", err.msg);
    hid_t f = open_rw(p);
    put_i32(f, C0 "/cu_seqlens_q", 1, d, cu);
    put_i32(f, C0 "/cu_seqlens_k", 1, d, ck);
    H5Fclose(f);
    expect_rejected(p, C0 "/cu_seqlens_q", "B == 1");
}

Test(fixture_reader, accepts_int64_cu_seqlens_but_not_values_outside_int32)
{
    long long ok[4] = {0, 8, 8, 20}, bad[4] = {0, 8, 1LL << 33, 20};
    hsize_t d[1] = {4};
    BROKEN("cu64.h5", FC_F32, 1,
           put_ds(f, C0 "/cu_seqlens_q", H5T_STD_I64LE, H5T_NATIVE_LLONG, 1, d, ok));
    expect_accepted(p);
    hid_t f = open_rw(p);
    put_ds(f, C0 "/cu_seqlens_q", H5T_STD_I64LE, H5T_NATIVE_LLONG, 1, d, bad);
    H5Fclose(f);
    expect_rejected(p, C0 "/cu_seqlens_q", "outside int32");
}

/* ---- block masks ---- */

/* The base case's block mask: Lq 20, Lk 24, blocks 16 -> 2 x 2 grid, [1, 1, 2] counts. */
static void put_counts(hid_t f, const char *obj, int32_t a, int32_t b)
{
    int32_t n[2] = {a, b};
    hsize_t d[3] = {1, 1, 2};
    put_i32(f, obj, 3, d, n);
}

static void put_ids(hid_t f, const char *obj, const int32_t ids[4])
{
    hsize_t d[4] = {1, 1, 2, 2};
    put_i32(f, obj, 4, d, ids);
}

Test(fixture_reader, rejects_a_block_id_out_of_range)
{
    const int32_t ids[4] = {0, -1, 0, 2};
    BROKEN("bmrange.h5", FC_F32, 0, put_counts(f, BM "/kv_num_blocks", 1, 2);
           put_ids(f, BM "/kv_indices", ids); put_counts(f, BM "/full_kv_num_blocks", 0, 0));
    expect_rejected(p, BM, "kv_indices[0][0][1][1] = 2", "out of range");
}

Test(fixture_reader, rejects_a_negative_block_id_inside_the_count)
{
    const int32_t ids[4] = {-1, -1, 0, 1};
    BROKEN("bmneg.h5", FC_F32, 0, put_counts(f, BM "/kv_num_blocks", 1, 2);
           put_ids(f, BM "/kv_indices", ids); put_counts(f, BM "/full_kv_num_blocks", 0, 0));
    expect_rejected(p, BM, "kv_indices[0][0][0][0] = -1");
}

Test(fixture_reader, rejects_a_duplicate_block_id_in_a_row)
{
    const int32_t ids[4] = {0, -1, 1, 1};
    BROKEN("bmdup.h5", FC_F32, 0, put_counts(f, BM "/kv_num_blocks", 1, 2);
           put_ids(f, BM "/kv_indices", ids); put_counts(f, BM "/full_kv_num_blocks", 0, 0));
    expect_rejected(p, BM, "listed twice");
}

Test(fixture_reader, rejects_a_block_listed_both_partial_and_full)
{
    const int32_t ids[4] = {0, -1, 0, 1}, full[4] = {0, -1, -1, -1};
    BROKEN("bmboth.h5", FC_F32, 0, put_counts(f, BM "/kv_num_blocks", 1, 2);
           put_ids(f, BM "/kv_indices", ids); put_counts(f, BM "/full_kv_num_blocks", 1, 0);
           put_ids(f, BM "/full_kv_indices", full));
    expect_rejected(p, BM, "full_kv_indices[0][0][0][0] = 0", "listed twice");
}

Test(fixture_reader, rejects_a_count_above_the_row_width)
{
    BROKEN("bmcount.h5", FC_F32, 0, put_counts(f, BM "/kv_num_blocks", 3, 0));
    expect_rejected(p, BM, "kv_num_blocks[0][0][0] = 3", "[0, 2]");
}

Test(fixture_reader, rejects_a_negative_count)
{
    BROKEN("bmnegcount.h5", FC_F32, 0, put_counts(f, BM "/full_kv_num_blocks", 0, -1));
    expect_rejected(p, BM, "full_kv_num_blocks[0][0][1] = -1");
}

Test(fixture_reader, rejects_counts_for_the_wrong_number_of_query_blocks)
{
    int32_t n[3] = {1, 1, 1};
    hsize_t d[3] = {1, 1, 3};
    BROKEN("bmnqb.h5", FC_F32, 0, put_i32(f, BM "/kv_num_blocks", 3, d, n));
    expect_rejected(p, BM "/kv_num_blocks", "3 query blocks", "needs 2");
}

Test(fixture_reader, rejects_a_head_dim_that_is_neither_1_nor_hq)
{
    int32_t n[6] = {0};
    hsize_t d[3] = {1, 3, 2};
    BROKEN("bmheads.h5", FC_F32, 0, put_i32(f, BM "/kv_num_blocks", 3, d, n));
    expect_rejected(p, BM "/kv_num_blocks", "head dim 3", "Hq = 2");
}

Test(fixture_reader, rejects_indices_shaped_unlike_their_counts)
{
    int32_t ids[2] = {0, 0};
    hsize_t d[4] = {1, 1, 1, 2};
    BROKEN("bmidx.h5", FC_F32, 0, put_i32(f, BM "/kv_indices", 4, d, ids));
    expect_rejected(p, BM "/kv_indices", "shape [1, 1, 1, 2]");
}

Test(fixture_reader, rejects_full_counts_without_full_indices)
{
    BROKEN("bmhalf.h5", FC_F32, 0, del(f, BM "/full_kv_indices"));
    expect_rejected(p, BM, "full_kv_num_blocks without full_kv_indices");
}

Test(fixture_reader, rejects_a_block_mask_without_kv_indices)
{
    BROKEN("bmnoidx.h5", FC_F32, 0, del(f, BM "/kv_indices"));
    expect_rejected(p, BM "/kv_indices", "missing required dataset");
}

Test(fixture_reader, rejects_a_block_mask_without_its_block_sizes)
{
    BROKEN("bmnobs.h5", FC_F32, 0, drop_attr(f, BM, "kv_block_size"));
    expect_rejected(p, BM, "missing required attribute 'kv_block_size'");
}

Test(fixture_reader, rejects_block_mask_sizes_outside_16_to_256)
{
    BROKEN("bmbs.h5", FC_F32, 0, put_attr_int(f, BM, "q_block_size", 8));
    expect_rejected(p, BM, "block sizes (8, 16)");
}

Test(fixture_reader, accepts_a_block_mask_without_full_blocks_and_with_junk_past_the_counts)
{
    /* PyTorch fills the slots past each count with other ids; readers never look at them. */
    const int32_t ids[4] = {0, 1, 0, 1};
    BROKEN("bmpartial.h5", FC_F32, 0, del(f, BM "/full_kv_num_blocks");
           del(f, BM "/full_kv_indices"); put_counts(f, BM "/kv_num_blocks", 1, 2);
           put_ids(f, BM "/kv_indices", ids));
    expect_accepted(p);
}

/* ---- messages: one line, whatever names and strings the file holds ---- */

/* Renames the base case (H5Lmove: any name without '/' is a valid link name). */
static void rename_case(hid_t f, const char *to)
{
    cr_assert(H5Lmove(f, C0, f, to, H5P_DEFAULT, H5P_DEFAULT) >= 0, "rename to %s", to);
}

/* A case named with a newline, a backslash and a tab, and a dtype holding an escape sequence and
 * non-ASCII bytes: each byte that could break the line (or drive a terminal) is escaped. */
#define ODD_NAME "/cases/c00\nFAKE: PASS\\x\t"
Test(fixture_reader, escapes_control_characters_in_names_and_values)
{
    {
        BROKEN("esc.h5", FC_F32, 0, (rename_case(f, ODD_NAME),
                                     put_attr_int(f, ODD_NAME, "chunk_size", -3)));
        expect_rejected(p, "/cases/c00\\nFAKE: PASS\\\\x\\t: ", "chunk_size");
    }
    BROKEN("escdt.h5", FC_F32, 0, put_attr_str(f, C0, "dtype", "f\033[2K\xc3\xa9"));
    expect_rejected(p, C0, "'dtype' = 'f\\x1b[2K\\xc3\\xa9'");
}

Test(fixture_reader, escapes_every_byte_outside_printable_ascii)
{
    char all[256], out[1200];
    for (int i = 1; i < 256; i++)
        all[i - 1] = (char)i;
    all[255] = '\0';
    fc_esc_line(out, sizeof out, all);
    for (const char *q = out; *q; q++)
        cr_assert(*q >= 0x20 && *q <= 0x7e, "byte 0x%02x at %td", (unsigned char)*q, q - out);
    cr_expect(strstr(out, "\\x01\\x02") && strstr(out, "\\t\\n\\x0b\\x0c\\r") &&
              strstr(out, "[\\\\]") && strstr(out, "}~\\x7f\\x80") &&
              !strcmp(out + strlen(out) - 4, "\\xff"), "%s", out);
    /* Cut before an escape, never inside one. */
    char small[6];
    fc_esc_line(small, sizeof small, "ab\ncd");
    cr_expect_str_eq(small, "ab\\nc");
    fc_esc_line(small, 5, "ab\ncd");
    cr_expect_str_eq(small, "ab\\n");
    fc_esc_line(small, 4, "ab\ncd");
    cr_expect_str_eq(small, "ab");
}

/* ---- cross-field rules: one field's shape or value checked against another's ----
 * The rest of them, one broken file per rule (and per direction where a rule can be broken two
 * ways), each test naming the rule and the function of fix_read.c that holds it. With the tests
 * above (k's D, v's Lk, out's Lq, Hq % Hkv, cu_seqlens lengths, B == 1 and Lk, the block-mask
 * head dim, query blocks, indices against counts, counts and ids) every such rule of the
 * reader has a broken file; the outputs under test (fix_tested.c) have theirs in
 * test_tested.c. */

/* Rule (open_tensors): k is [B, Hkv, Lk, D] with B from q. */
Test(fixture_reader, rejects_k_whose_batch_differs_from_q)
{
    float x[2 * 24 * 4] = {0};
    hsize_t d[4] = {2, 1, 24, 4};
    BROKEN("kbatch.h5", FC_F32, 0, put_f32(f, C0 "/k", 4, d, x));
    expect_rejected(p, C0 "/k", "shape [2, 1, 24, 4]", "q and k (B, D) as [1, 1, 24, 4]");
}

/* Rule (open_tensors): v is [B, Hkv, Lk, Dv] with Hkv and Lk from k (Lk: above). */
Test(fixture_reader, rejects_v_whose_heads_differ_from_k)
{
    float x[2 * 24 * 4] = {0};
    hsize_t d[4] = {1, 2, 24, 4};
    BROKEN("vheads.h5", FC_F32, 0, put_f32(f, C0 "/v", 4, d, x));
    expect_rejected(p, C0 "/v", "shape [1, 2, 24, 4]", "q and k (B, Hkv, Lk) as [1, 1, 24, 4]");
}

/* Rule (open_tensors): v's B is q's. */
Test(fixture_reader, rejects_v_whose_batch_differs_from_q)
{
    float x[2 * 24 * 4] = {0};
    hsize_t d[4] = {2, 1, 24, 4};
    BROKEN("vbatch.h5", FC_F32, 0, put_f32(f, C0 "/v", 4, d, x));
    expect_rejected(p, C0 "/v", "shape [2, 1, 24, 4]", "[1, 1, 24, 4]");
}

/* Rule (open_tensors): out is [B, Hq, Lq, Dv] with Dv from v: a v of another width makes the
 * stored out wrong (Lq: above). */
Test(fixture_reader, rejects_out_whose_width_differs_from_v)
{
    float x[24 * 8] = {0};
    hsize_t d[4] = {1, 1, 24, 8};
    BROKEN("outdv.h5", FC_F32, 0, put_f32(f, C0 "/v", 4, d, x));
    expect_rejected(p, C0 "/out", "shape [1, 2, 20, 4]",
                    "q and v [B, Hq, Lq, Dv] as [1, 2, 20, 8]");
}

/* Rule (open_tensors): out's Hq is q's. */
Test(fixture_reader, rejects_out_whose_heads_differ_from_q)
{
    double x[20 * 4] = {0};
    hsize_t d[4] = {1, 1, 20, 4};
    BROKEN("outhq.h5", FC_F32, 0,
           put_ds(f, C0 "/out", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 4, d, x));
    expect_rejected(p, C0 "/out", "shape [1, 1, 20, 4]", "[1, 2, 20, 4]");
}

/* Rule (open_tensors): out's B is q's. */
Test(fixture_reader, rejects_out_whose_batch_differs_from_q)
{
    double x[2 * 2 * 20 * 4] = {0};
    hsize_t d[4] = {2, 2, 20, 4};
    BROKEN("outb.h5", FC_F32, 0,
           put_ds(f, C0 "/out", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 4, d, x));
    expect_rejected(p, C0 "/out", "shape [2, 2, 20, 4]", "[1, 2, 20, 4]");
}

/* Rule (open_tensors): lse is [B, Hq, Lq] from q: shorter, and with fewer heads. */
Test(fixture_reader, rejects_lse_whose_shape_disagrees_with_q)
{
    double x[2 * 20] = {0};
    {
        hsize_t d[3] = {1, 2, 19};
        BROKEN("lselq.h5", FC_F32, 0,
               put_ds(f, C0 "/lse", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 3, d, x));
        expect_rejected(p, C0 "/lse", "shape [1, 2, 19]", "q [B, Hq, Lq] as [1, 2, 20]");
    }
    {
        hsize_t d[3] = {1, 1, 20};
        BROKEN("lsehq.h5", FC_F32, 0,
               put_ds(f, C0 "/lse", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 3, d, x));
        expect_rejected(p, C0 "/lse", "shape [1, 1, 20]", "[1, 2, 20]");
    }
}

/* Rule (attn_problem_check, through build_problem): 1 <= Hkv <= Hq, the range half of the GQA
 * rule (divisibility: rejects_heads_that_do_not_divide). */
Test(fixture_reader, rejects_more_kv_heads_than_query_heads)
{
    float kv[3 * 24 * 4] = {0};
    hsize_t dk[4] = {1, 3, 24, 4};
    BROKEN("hkv.h5", FC_F32, 0, put_f32(f, C0 "/k", 4, dk, kv); put_f32(f, C0 "/v", 4, dk, kv));
    expect_rejected(p, C0, "Hkv = 3: must be in [1, Hq = 2]");
}

/* Rule (open_cu): cu_seqlens_q and cu_seqlens_k both or neither, the other way round. */
Test(fixture_reader, rejects_cu_seqlens_k_without_cu_seqlens_q)
{
    BROKEN("cuonek.h5", FC_F32, 1, del(f, C0 "/cu_seqlens_q"));
    expect_rejected(p, C0, "cu_seqlens_k present without cu_seqlens_q");
}

/* Rule (open_cu): R + 1 entries with R >= 1, checked before either list is read. */
Test(fixture_reader, rejects_cu_seqlens_of_a_single_entry)
{
    int32_t cq[1] = {20}, ck[1] = {24};
    hsize_t d[1] = {1};
    BROKEN("cuone1.h5", FC_F32, 1, put_i32(f, C0 "/cu_seqlens_q", 1, d, cq);
           put_i32(f, C0 "/cu_seqlens_k", 1, d, ck));
    expect_rejected(p, C0 "/cu_seqlens_q", "1 entries: must be R + 1");
}

/* Rule (build_seq): cu_seqlens_q ends at Lq (cu_seqlens_k at Lk: above). */
Test(fixture_reader, rejects_cu_seqlens_q_that_does_not_end_at_lq)
{
    int32_t cu[4] = {0, 8, 8, 19};
    hsize_t d[1] = {4};
    BROKEN("cuendq.h5", FC_F32, 1, put_i32(f, C0 "/cu_seqlens_q", 1, d, cu));
    expect_rejected(p, C0 "/cu_seqlens_q", "last entry 19", "Lq = 20");
}

/* Rule (check_bm_shapes): the counts' leading dim is 1 or B. */
Test(fixture_reader, rejects_block_mask_counts_with_a_leading_dim_neither_1_nor_b)
{
    int32_t n[4] = {0};
    hsize_t d[3] = {2, 1, 2};
    BROKEN("bmbatch.h5", FC_F32, 0, put_i32(f, BM "/kv_num_blocks", 3, d, n));
    expect_rejected(p, BM "/kv_num_blocks", "leading dim 2", "B = 1");
}

/* Rule (check_bm_shapes): full_kv_num_blocks is shaped exactly like kv_num_blocks, even where
 * its own shape would be legal ([1, Hq, NQB] against [1, 1, NQB]). */
Test(fixture_reader, rejects_full_counts_shaped_unlike_the_partial_counts)
{
    int32_t n[4] = {0};
    hsize_t d[3] = {1, 2, 2};
    BROKEN("bmfnum.h5", FC_F32, 0, put_i32(f, BM "/full_kv_num_blocks", 3, d, n));
    expect_rejected(p, BM "/full_kv_num_blocks", "shape [1, 2, 2]",
                    "kv_num_blocks as [1, 1, 2]");
}

/* Rule (check_bm_shapes): full_kv_indices is shaped exactly like kv_indices: wider and
 * narrower rows both refused (a reader indexing one with the other's width would run past it). */
Test(fixture_reader, rejects_full_indices_wider_or_narrower_than_the_partial_indices)
{
    int32_t ids[6] = {-1, -1, -1, -1, -1, -1};
    {
        hsize_t d[4] = {1, 1, 2, 3};
        BROKEN("bmfwide.h5", FC_F32, 0, put_i32(f, BM "/full_kv_indices", 4, d, ids));
        expect_rejected(p, BM "/full_kv_indices", "shape [1, 1, 2, 3]",
                        "kv_indices as [1, 1, 2, 2]");
    }
    {
        hsize_t d[4] = {1, 1, 2, 1};
        BROKEN("bmfnarrow.h5", FC_F32, 0, put_i32(f, BM "/full_kv_indices", 4, d, ids));
        expect_rejected(p, BM "/full_kv_indices", "shape [1, 1, 2, 1]",
                        "kv_indices as [1, 1, 2, 2]");
    }
}

/* Rule (open_bm): full_kv_num_blocks and full_kv_indices both or neither, the other way round. */
Test(fixture_reader, rejects_full_indices_without_full_counts)
{
    BROKEN("bmhalf2.h5", FC_F32, 0, del(f, BM "/full_kv_num_blocks"));
    expect_rejected(p, BM, "full_kv_indices without full_kv_num_blocks");
}

/* Rule (bmask_validate): every count is at most the row width, the full list's too. */
Test(fixture_reader, rejects_a_full_count_above_the_row_width)
{
    BROKEN("bmfcount.h5", FC_F32, 0, put_counts(f, BM "/full_kv_num_blocks", 0, 3));
    expect_rejected(p, BM, "full_kv_num_blocks[0][0][1] = 3", "[0, 2]");
}

/* Rule (bmask_validate): ids lie in [0, ceil(Lk / kv_block_size)): the same ids become out of
 * range when the block mask's kv_block_size grows (32: one kv block for Lk = 24). */
Test(fixture_reader, rejects_block_ids_beyond_the_grid_its_block_size_gives)
{
    /* kv_block_size 32 makes Lk = 24 one kv block: the stored rows of 2 may stay 2 wide, but
     * the first lists 2 blocks; with the lists narrowed to one slot, the id 1 is out of range. */
    {
        BROKEN("bmkb.h5", FC_F32, 0, put_attr_int(f, BM, "kv_block_size", 32));
        expect_rejected(p, BM, "kv_num_blocks[0][0][0] = 2: more than the 1 kv blocks of Lk = 24 "
                        "with kv_block_size 32");
    }
    int32_t ids[2] = {1, 0}, none[2] = {-1, -1}, one[2] = {1, 1}, zero[2] = {0, 0};
    hsize_t w[4] = {1, 1, 2, 1}, n[3] = {1, 1, 2};
    BROKEN("bmkb1.h5", FC_F32, 0,
           (put_attr_int(f, BM, "kv_block_size", 32), put_i32(f, BM "/kv_indices", 4, w, ids),
            put_i32(f, BM "/full_kv_indices", 4, w, none),
            put_i32(f, BM "/kv_num_blocks", 3, n, one),
            put_i32(f, BM "/full_kv_num_blocks", 3, n, zero)));
    expect_rejected(p, BM, "out of range [0, 1)");
}

/* ---- writer ---- */

static void assert_same_case(const fix_case *a, const fix_case *b)
{
    const attn_problem *p = &a->prob;
    cr_assert_str_eq(a->name, b->name);
    cr_assert_eq(a->dtype, b->dtype, "%s: dtype", a->name);
    cr_assert(p->seq.batch == b->prob.seq.batch && p->hq == b->prob.hq &&
                  p->hkv == b->prob.hkv && p->seq.lq == b->prob.seq.lq &&
                  p->seq.lk == b->prob.seq.lk && p->d == b->prob.d && p->dv == b->prob.dv,
              "%s: shapes", a->name);
    cr_assert(!memcmp(&p->mask, &b->prob.mask, sizeof p->mask) && p->scale == b->prob.scale,
              "%s: mask and scale", a->name);
    cr_assert(!memcmp(a->q, b->q, attn_q_elems(p) * sizeof(float)), "%s: q", a->name);
    cr_assert(!memcmp(a->k, b->k, attn_k_elems(p) * sizeof(float)), "%s: k", a->name);
    cr_assert(!memcmp(a->v, b->v, attn_v_elems(p) * sizeof(float)), "%s: v", a->name);
    cr_assert(!memcmp(a->out, b->out, attn_o_elems(p) * sizeof(double)), "%s: out", a->name);
    cr_assert(!memcmp(a->lse, b->lse, attn_lse_elems(p) * sizeof(double)), "%s: lse", a->name);
    cr_assert_eq(p->seq.packed, b->prob.seq.packed, "%s: packed", a->name);
    cr_assert_eq(a->has_bmask, b->has_bmask, "%s: block mask", a->name);
    if (a->has_bmask)
        cr_assert_eq(bmask_compare(&a->bm, &b->bm, NULL), FC_OK, "%s: block mask", a->name);
    cr_assert(a->q_block_size == b->q_block_size && a->kv_block_size == b->kv_block_size &&
                  a->seed == b->seed,
              "%s: block sizes and seed", a->name);
    cr_assert(p->terms.softcap == b->prob.terms.softcap &&
                  !p->terms.sinks == !b->prob.terms.sinks &&
                  (!p->terms.sinks ||
                   !memcmp(p->terms.sinks, b->prob.terms.sinks, (size_t)p->hq * sizeof(float))),
              "%s: score terms", a->name);
}

/* ---- score terms (schema version 2) ---- */

/* The root attribute `schema` of file p. */
static void file_schema(const char *p, char *buf, size_t cap)
{
    hid_t f = H5Fopen(p, H5F_ACC_RDONLY, H5P_DEFAULT);
    cr_assert(f >= 0 && H5LTget_attribute_string(f, "/", "schema", buf) >= 0, "schema of %s", p);
    (void)cap;
    H5Fclose(f);
}

static const char *write_terms(const char *name, double softcap, int sinks)
{
    const char *p = path_of(name);
    fix_gen_params gp = base_params(FC_F16, 1);
    gp.softcap = softcap;
    gp.sinks = sinks;
    gp.sinks_seed = 11;
    fc_err err;
    cr_assert_eq(fix_gen_file(p, &gp, 1, 0, &err), FC_OK, "writing %s: %s", p, err.msg);
    return p;
}

/* Version 2 only when a case uses a term; both terms and the oracle computed with them come
 * back as written; version 1 stays version 1. */
Test(fixture_terms, version_2_is_written_only_for_a_term_and_round_trips)
{
    static const struct {
        double softcap;
        int sinks;
        const char *schema;
    } rows[] = {{0, 0, FIX_SCHEMA}, {50, 0, FIX_SCHEMA_TERMS}, {0, 1, FIX_SCHEMA_TERMS},
                {30, 1, FIX_SCHEMA_TERMS}};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        fix_gen_params gp = base_params(FC_BF16, 1);
        gp.softcap = rows[i].softcap;
        gp.sinks = rows[i].sinks;
        gp.sinks_seed = 5;
        fix_case a, b;
        fix_file f;
        fc_err err;
        char name[32], schema[64] = "";
        snprintf(name, sizeof name, "terms%zu.h5", i);
        const char *p = path_of(name);
        cr_assert_eq(fix_gen_case(&gp, &a, &err), FC_OK, "%s", err.msg);
        cr_assert_eq(fix_write(p, NULL, &a, 1, 0, &err), FC_OK, "%s", err.msg);
        file_schema(p, schema, sizeof schema);
        cr_assert_str_eq(schema, rows[i].schema, "row %zu", i);
        cr_assert_eq(fix_open(p, &f, &err), FC_OK, "%s", err.msg);
        cr_assert_eq(fix_read_case(&f, 0, &b, &err), FC_OK, "%s", err.msg);
        assert_same_case(&a, &b);
        for (int32_t h = 0; rows[i].sinks && h < a.prob.hq; h++)
            cr_assert(a.sinks[h] >= FIX_SINK_LO && a.sinks[h] <= FIX_SINK_HI, "sink %g",
                      (double)a.sinks[h]);
        fix_case_free(&a);
        fix_case_free(&b);
        fix_close(&f);
    }
}

Test(fixture_terms, a_version_1_file_holding_a_term_is_refused_naming_it)
{
    hsize_t n[1] = {2};
    float sk[2] = {1, 2};
    BROKEN("v1cap.h5", FC_F32, 0, put_attr_double(f, C0, "softcap", 50));
    expect_rejected(p, C0, "'softcap'", FIX_SCHEMA_TERMS);
    const char *q = write_base("v1sinks.h5", FC_F32, 0);
    hid_t f = open_rw(q);
    put_f32(f, C0 "/sinks", 1, n, sk);
    H5Fclose(f);
    expect_rejected(q, C0, "'sinks'", FIX_SCHEMA_TERMS);
}

Test(fixture_terms, bad_terms_are_refused_naming_the_field_and_value)
{
    hsize_t n3[1] = {3}, n2[1] = {2};
    float three[3] = {1, 2, 3}, nan2[2] = {0, NAN}, inf2[2] = {INFINITY, 0};
    double caps[] = {-1.0, NAN, INFINITY};
    const char *want[] = {"softcap = -1", "softcap = nan", "softcap = inf"};
    for (int i = 0; i < 3; i++) {
        char name[32];
        snprintf(name, sizeof name, "cap%d.h5", i);
        const char *p = write_terms(name, 50, 0);
        hid_t f = open_rw(p);
        put_attr_double(f, C0, "softcap", caps[i]);
        H5Fclose(f);
        expect_rejected(p, C0, want[i]);
    }
    const char *p = write_terms("sinklen.h5", 0, 1);
    hid_t f = open_rw(p);
    put_f32(f, C0 "/sinks", 1, n3, three);
    H5Fclose(f);
    expect_rejected(p, C0 "/sinks", "3 entries", "Hq = 2");
    p = write_terms("sinknan.h5", 0, 1);
    f = open_rw(p);
    put_f32(f, C0 "/sinks", 1, n2, nan2);
    H5Fclose(f);
    expect_rejected(p, C0 "/sinks", "sinks[1] = nan");
    p = write_terms("sinkinf.h5", 0, 1);
    f = open_rw(p);
    put_f32(f, C0 "/sinks", 1, n2, inf2);
    H5Fclose(f);
    expect_rejected(p, C0 "/sinks", "sinks[0] = inf");
    p = write_terms("sinkf64.h5", 0, 1);
    f = open_rw(p);
    double d2[2] = {1, 2};
    put_ds(f, C0 "/sinks", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 1, n2, d2);
    H5Fclose(f);
    expect_rejected(p, C0 "/sinks", "float32");
}

/* The committed cross-check sets with score terms (fixtures/README.md): PyTorch 2.7.1's
 * flex_attention with a soft-cap score_mod (torch-softcap.h5) and the float64 formula of Hugging
 * Face's gpt-oss eager attention with sinks (sinks-hf.h5). Our oracle agrees with both to about
 * 1e-15 relative (2.0e-15 out, 1.4e-16 lse measured on 2026-11-30); held here to 1e-14, far
 * tighter than check's FIX_CHECK_RTOL, so that a change in how a term is computed shows. */
Test(fixture_terms, our_oracle_agrees_with_the_pytorch_softcap_and_hf_sink_sets)
{
    const struct {
        const char *path;
        int ncases;
        int softcap, sinks; /* which term every case of the set uses */
    } sets[] = {{"fixtures/sets/torch-softcap.h5", 8, 1, 0},
                {"fixtures/sets/sinks-hf.h5", 7, 0, 1}};
    for (size_t s = 0; s < sizeof sets / sizeof *sets; s++) {
        fix_file f;
        fc_err err;
        cr_assert_eq(fix_open(sets[s].path, &f, &err), FC_OK, "%s", err.msg);
        cr_assert_eq(f.schema_version, 2, "%s", sets[s].path);
        cr_assert_eq(f.ncases, sets[s].ncases, "%s: %d cases", sets[s].path, f.ncases);
        for (int i = 0; i < f.ncases; i++) {
            fix_case c;
            fix_check_result r;
            cr_assert_eq(fix_read_case(&f, i, &c, &err), FC_OK, "%s", err.msg);
            cr_assert((c.prob.terms.softcap > 0) == sets[s].softcap &&
                          !!c.prob.terms.sinks == sets[s].sinks,
                      "%s %s: terms", sets[s].path, c.name);
            cr_assert_eq(fix_check_case(&c, FIX_BACKEND_REF, 1, &r, &err), FC_OK, "%s", err.msg);
            cr_assert(r.passed, "%s %s: %s", sets[s].path, c.name, r.detail);
            cr_assert(r.out_err <= 1e-14 && r.lse_err <= 1e-14, "%s %s: out %.3g lse %.3g",
                      sets[s].path, c.name, r.out_err, r.lse_err);
            fix_case_free(&c);
        }
        fix_close(&f);
    }
}

Test(fixture_writer, round_trips_every_field_for_every_dtype)
{
    const fc_dtype dts[] = {FC_F32, FC_F16, FC_BF16};
    for (int packed = 0; packed < 2; packed++)
        for (size_t i = 0; i < 3; i++) {
            fix_gen_params gp = base_params(dts[i], packed);
            fix_case a, b;
            fix_file f;
            fc_err err;
            char name[32];
            snprintf(name, sizeof name, "rt%d%zu.h5", packed, i);
            const char *p = path_of(name);
            cr_assert_eq(fix_gen_case(&gp, &a, &err), FC_OK, "%s", err.msg);
            cr_assert_eq(fix_write(p, NULL, &a, 1, 0, &err), FC_OK, "%s", err.msg);
            cr_assert_eq(fix_open(p, &f, &err), FC_OK, "%s", err.msg);
            cr_assert_eq(fix_read_case(&f, 0, &b, &err), FC_OK, "%s", err.msg);
            assert_same_case(&a, &b);
            fix_case_free(&a);
            fix_case_free(&b);
            fix_close(&f);
        }
}

Test(fixture_writer, lists_cases_in_name_order)
{
    fix_gen_params gp[3] = {base_params(FC_F32, 0), base_params(FC_F32, 0),
                            base_params(FC_F32, 0)};
    gp[0].name = "layer10";
    gp[1].name = "layer02";
    gp[2].name = "layer00";
    fc_err err;
    const char *p = path_of("order.h5");
    cr_assert_eq(fix_gen_file(p, gp, 3, 0, &err), FC_OK, "%s", err.msg);
    fix_file f;
    cr_assert_eq(fix_open(p, &f, &err), FC_OK, "%s", err.msg);
    cr_assert_eq(f.ncases, 3);
    cr_assert(!strcmp(f.names[0], "layer00") && !strcmp(f.names[1], "layer02") &&
              !strcmp(f.names[2], "layer10"));
    cr_assert_eq(fix_find_case(&f, "layer02"), 1);
    fix_close(&f);
}

Test(fixture_writer, refuses_to_overwrite_unless_forced)
{
    const char *p = write_base("once.h5", FC_F32, 0);
    struct stat before, after;
    cr_assert_eq(stat(p, &before), 0);
    fix_gen_params gp = base_params(FC_F32, 0);
    gp.seed = 99;
    fc_err err;
    cr_assert_eq(fix_gen_file(p, &gp, 1, 0, &err), FC_EINVAL);
    cr_assert(strstr(err.msg, p) && strstr(err.msg, "refusing to overwrite"), "%s", err.msg);
    cr_assert_eq(stat(p, &after), 0);
    cr_assert(before.st_ino == after.st_ino && before.st_size == after.st_size);
    cr_assert_eq(fix_gen_file(p, &gp, 1, 1, &err), FC_OK, "%s", err.msg);
}

/* A forced write over a symbolic link writes the file it points to and keeps the link. */
Test(fixture_writer, a_forced_write_through_a_symlink_keeps_the_link)
{
    const char *p = write_base("target.h5", FC_F32, 0), *l = path_of("link.h5");
    cr_assert_eq(symlink("target.h5", l), 0);
    fix_gen_params gp = base_params(FC_F32, 0);
    gp.seed = 99;
    fc_err err;
    cr_assert_eq(fix_gen_file(l, &gp, 1, 0, &err), FC_EINVAL, "refused unless forced");
    cr_assert_eq(fix_gen_file(l, &gp, 1, 1, &err), FC_OK, "%s", err.msg);
    struct stat st;
    cr_assert(lstat(l, &st) == 0 && S_ISLNK(st.st_mode), "the link was replaced");
    fix_case c;
    read_case0(p, &c);
    cr_expect(c.has_seed && c.seed == 99, "the target holds the new case");
    fix_case_free(&c);
    /* A link to nothing is refused, forced or not, and stays as it was. */
    const char *d = path_of("dangling.h5");
    cr_assert_eq(symlink("missing/nothing.h5", d), 0);
    cr_expect_eq(fix_gen_file(d, &gp, 1, 1, &err), FC_EINVAL, "a dangling link written through");
    cr_expect(strstr(err.msg, "a symbolic link to nothing"), "%s", err.msg);
    cr_expect(lstat(d, &st) == 0 && S_ISLNK(st.st_mode), "the dangling link was replaced");
}

static int count_files(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "ls -A '%s' | wc -l", dir);
    FILE *fp = popen(cmd, "r");
    int n = -1;
    cr_assert(fp && fscanf(fp, "%d", &n) == 1);
    pclose(fp);
    return n;
}

Test(fixture_writer, leaves_nothing_behind_when_a_write_fails)
{
    fix_gen_params gp[2] = {base_params(FC_F32, 0), base_params(FC_F32, 0)};
    fix_case cs[2];
    fc_err err;
    cr_assert_eq(fix_gen_case(&gp[0], &cs[0], &err), FC_OK);
    cr_assert_eq(fix_gen_case(&gp[1], &cs[1], &err), FC_OK);
    int before = count_files();
    /* Two cases with one name: caught before anything is created. */
    cr_assert_eq(fix_write(path_of("dup.h5"), NULL, cs, 2, 0, &err), FC_EINVAL);
    cr_assert(strstr(err.msg, "given twice"), "%s", err.msg);
    /* A name HDF5 refuses mid-write ("a/b" would need a group a): the temporary goes too. */
    snprintf(cs[1].name, sizeof cs[1].name, "c1");
    cs[1].prob.seq.lq = -1; /* an impossible shape makes H5Screate_simple fail */
    cr_assert_neq(fix_write(path_of("bad.h5"), NULL, cs, 2, 0, &err), FC_OK);
    cs[1].prob.seq.lq = 20;
    cr_assert_eq(count_files(), before, "no file and no temporary left");
    cr_assert_neq(fix_write("/nonexistent-dir/x.h5", NULL, cs, 1, 0, &err), FC_OK);
    fix_case_free(&cs[0]);
    fix_case_free(&cs[1]);
}

Test(fixture_writer, writes_the_same_bytes_for_the_same_seed)
{
    const char *a = write_base("a.h5", FC_BF16, 1), *b = write_base("b.h5", FC_BF16, 1);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "cmp -s '%s' '%s'", a, b);
    cr_assert_eq(system(cmd), 0, "same parameters, same seed: identical files");
}

Test(fixture_writer, writes_a_layout_file_with_one_case_per_layer)
{
    fix_gen_params gp = base_params(FC_F32, 1);
    fc_err err;
    const char *p = path_of("layout.h5");
    cr_assert_eq(fix_gen_layout(p, "gemma3", 7, 64, &gp, 0, &err), FC_OK, "%s", err.msg);
    fix_file f;
    cr_assert_eq(fix_open(p, &f, &err), FC_OK, "%s", err.msg);
    cr_assert(f.has_layout && !strcmp(f.layout, "gemma3"));
    cr_assert_eq(f.ncases, 7);
    fix_case c;
    cr_assert_eq(fix_read_case(&f, 5, &c, &err), FC_OK, "%s", err.msg);
    cr_assert_str_eq(c.name, "layer05");
    cr_assert(c.prob.mask.sliding_window == 0, "gemma3 layer 5 is global");
    fix_case_free(&c);
    cr_assert_eq(fix_read_case(&f, 6, &c, &err), FC_OK, "%s", err.msg);
    cr_assert(c.prob.mask.sliding_window == 8 && c.prob.mask.causal == 1, "layer 6: W = 512/64");
    fix_case_free(&c);
    fix_close(&f);
}

Test(fixture_writer, a_layer_takes_the_models_terms_and_scale_and_the_cases_seed)
{
    fix_gen_params base = base_params(FC_F32, 0);
    base.scale = 0.3;
    base.softcap = 20;
    layout_layer gemma = {.mask = {.causal = 1, .sliding_window = 64}, .softcap = 50,
                          .scale = 0.0625};
    layout_layer oss = {.mask = {.causal = 1}, .global = 1, .sinks = 1};
    layout_layer plain = {.mask = {.causal = 1, .sliding_window = 64}};
    fix_gen_params g = fix_gen_layer_params(&base, &gemma, 3);
    cr_expect(g.mask.sliding_window == 64 && g.softcap == 50 && g.scale == 0.0625 && !g.sinks,
              "the model's cap and scale replace the case's");
    cr_expect_eq(g.seed, base.seed + 3, "each layer its own activations");
    fix_gen_params m = fix_gen_layer_params(&base, &plain, 1);
    cr_expect(m.softcap == 20 && m.scale == 0.3, "where the model has none, the case's stand");
    /* Sinks, whether the layout or the case turns them on, come from the case's sinks seed
     * shifted by the layer, as q, k and v come from its seed. */
    base.sinks_seed = 40;
    fix_gen_params o1 = fix_gen_layer_params(&base, &oss, 1),
                   o2 = fix_gen_layer_params(&base, &oss, 2);
    cr_expect(o1.sinks && o2.sinks && o1.mask.sliding_window == 0);
    cr_expect(o1.sinks_seed == 41 && o2.sinks_seed == 42);
    base.sinks = 1;
    fix_gen_params p = fix_gen_layer_params(&base, &plain, 2);
    cr_expect(p.sinks && p.sinks_seed == 42, "the case's sinks on a layout without them");
}

Test(fixture_writer, writes_each_layers_terms_into_a_gpt_oss_or_gemma2_layout_file)
{
    fix_gen_params gp = base_params(FC_F32, 1);
    gp.hq = 4;
    gp.hkv = 2;
    fc_err err;
    const char *p = path_of("oss.h5");
    cr_assert_eq(fix_gen_layout(p, "gpt-oss-20b", 4, 16, &gp, 0, &err), FC_OK, "%s", err.msg);
    fix_file f;
    cr_assert_eq(fix_open(p, &f, &err), FC_OK, "%s", err.msg);
    cr_assert(f.has_layout && !strcmp(f.layout, "gpt-oss-20b") && f.ncases == 4);
    float first[4];
    for (int l = 0; l < 4; l++) {
        fix_case c;
        cr_assert_eq(fix_read_case(&f, l, &c, &err), FC_OK, "%s", err.msg);
        const attn_problem *pr = &c.prob;
        cr_expect_eq(pr->mask.sliding_window, l % 2 ? 0 : 8, "layer %d: W = 128/16", l);
        cr_expect(pr->terms.sinks && pr->terms.softcap == 0, "layer %d: sinks, no cap", l);
        cr_expect_eq(pr->scale, 0.5, "layer %d: 1/sqrt(D = 4)", l);
        if (l == 0)
            memcpy(first, pr->terms.sinks, sizeof first);
        else
            cr_expect(memcmp(first, pr->terms.sinks, sizeof first), "layer %d: its own sinks", l);
        fix_case_free(&c);
    }
    fix_close(&f);
    p = path_of("gemma2.h5");
    cr_assert_eq(fix_gen_layout(p, "gemma2-27b", 2, 64, &gp, 0, &err), FC_OK, "%s", err.msg);
    cr_assert_eq(fix_open(p, &f, &err), FC_OK, "%s", err.msg);
    for (int l = 0; l < 2; l++) {
        fix_case c;
        cr_assert_eq(fix_read_case(&f, l, &c, &err), FC_OK, "%s", err.msg);
        cr_expect(c.prob.terms.softcap == 50 && !c.prob.terms.sinks, "layer %d: cap 50", l);
        cr_expect(fabs(c.prob.scale - 1 / 12.0) < 1e-15, "layer %d: 144^-0.5, not 1/sqrt(D)", l);
        fix_case_free(&c);
    }
    fix_close(&f);
}

Test(fixture_writer, draws_reproducible_normal_values)
{
    fix_rng a, b;
    fix_rng_seed(&a, 42);
    fix_rng_seed(&b, 42);
    double s = 0, s2 = 0;
    for (int i = 0; i < 20000; i++) {
        double x = fix_rng_normal(&a);
        cr_assert_eq(x, fix_rng_normal(&b));
        s += x;
        s2 += x * x;
    }
    cr_assert(fabs(s / 20000) < 0.05 && fabs(s2 / 20000 - 1) < 0.05, "mean %g, var %g",
              s / 20000, s2 / 20000);
}

/* ---- check ---- */

static fix_check_result check_file_case(const char *p, int exact)
{
    fix_file f;
    fix_case c;
    fix_check_result r;
    fc_err err;
    cr_assert_eq(fix_open(p, &f, &err), FC_OK, "%s", err.msg);
    cr_assert_eq(fix_read_case(&f, 0, &c, &err), FC_OK, "%s", err.msg);
    cr_assert_eq(fix_check_case(&c, FIX_BACKEND_REF, exact, &r, &err), FC_OK, "%s", err.msg);
    fix_case_free(&c);
    fix_close(&f);
    return r;
}

Test(fixture_check, passes_what_the_generator_wrote)
{
    fix_check_result r = check_file_case(write_base("good.h5", FC_F16, 1), 1);
    cr_assert(r.passed && r.bmask_checked && r.bmask_exact, "%s", r.detail);
    cr_assert(r.out_err <= FIX_CHECK_RTOL && r.lse_err <= FIX_CHECK_RTOL);
}

Test(fixture_check, fails_an_output_off_by_one_part_in_a_billion)
{
    const char *p = write_base("tamper.h5", FC_F32, 0);
    hid_t f = open_rw(p);
    double o[2 * 20 * 4];
    hid_t d = H5Dopen2(f, C0 "/out", H5P_DEFAULT);
    H5Dread(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, o);
    o[7] *= 1 + 1e-9;
    H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, o);
    H5Dclose(d);
    H5Fclose(f);
    fix_check_result r = check_file_case(p, 1);
    cr_assert(!r.passed && strstr(r.detail, "out at (b, h, q, d) = (0, 0, 1, 3)"), "%s", r.detail);
}

/* The stored oracle of a generated case, replaced by `what`, held to our reference in memory. */
typedef enum { ZEROS_ONE_HUGE_OUT, NEGATED_ONE_HUGE_OUT, ZEROS_ONE_HUGE_LSE } garbage;

static fix_check_result check_garbage(fix_gen_params gp, garbage what, size_t at, double huge)
{
    fix_case c;
    fc_err err;
    cr_assert_eq(fix_gen_case(&gp, &c, &err), FC_OK, "%s", err.msg);
    size_t no = attn_o_elems(&c.prob), nl = attn_lse_elems(&c.prob);
    for (size_t i = 0; i < no && what != ZEROS_ONE_HUGE_LSE; i++)
        c.out[i] = what == ZEROS_ONE_HUGE_OUT ? 0 : -c.out[i];
    for (size_t i = 0; i < nl && what == ZEROS_ONE_HUGE_LSE; i++)
        c.lse[i] = 0;
    (what == ZEROS_ONE_HUGE_LSE ? c.lse : c.out)[at] = huge;
    fix_check_result r;
    cr_assert_eq(fix_check_case(&c, FIX_BACKEND_REF, 0, &r, &err), FC_OK, "%s", err.msg);
    fix_case_free(&c);
    return r;
}

/* A stored out of zeros (or negated) with one element >= ~9e307 passed: the comparison's scale
 * came from the stored values, whose max made every denominator infinite. The scale is ours now,
 * and such a value is refused before any comparison: no attention output can exceed max|v|. */
Test(fixture_check, refuses_a_stored_out_of_garbage_with_one_huge_element)
{
    static const garbage kinds[] = {ZEROS_ONE_HUGE_OUT, NEGATED_ONE_HUGE_OUT};
    static const double huge[] = {9e307, 1.7976931348623157e308, 1e30};
    for (size_t k = 0; k < 2; k++)
        for (size_t h = 0; h < 3; h++) {
            fix_check_result r = check_garbage(base_params(FC_F32, 0), kinds[k], 5, huge[h]);
            cr_expect(!r.passed && !r.oracle_ok, "kind %zu, %g: passed", k, huge[h]);
            cr_expect(strstr(r.detail, "out at (b, h, q, d) = (0, 0, 1, 1): stored ") &&
                          strstr(r.detail, "beyond max|v|"),
                      "kind %zu, %g: %s", k, huge[h], r.detail);
        }
}

Test(fixture_check, refuses_a_stored_lse_of_garbage_with_one_huge_element)
{
    static const double huge[] = {9e307, -1.7976931348623157e308, 1e30};
    for (size_t h = 0; h < 3; h++) {
        fix_check_result r = check_garbage(base_params(FC_F32, 0), ZEROS_ONE_HUGE_LSE, 3, huge[h]);
        cr_expect(!r.passed && !r.oracle_ok, "%g: passed", huge[h]);
        cr_expect(strstr(r.detail, "lse at (b, h, q) = (0, 0, 3): stored ") &&
                      strstr(r.detail, "beyond the"),
                  "%g: %s", huge[h], r.detail);
    }
}

/* The bounds hold whatever the mask and the score terms: the generator's own oracles pass them on
 * dense, packed, windowed, soft-capped and sink cases (sinks that dominate their rows included),
 * and an element one part in 1e6 past max|v| is named. */
Test(fixture_check, the_bounds_pass_every_true_oracle_and_name_a_value_past_them)
{
    static const struct {
        int packed, window, sinks;
        double softcap;
    } cases[] = {{0, 0, 0, 0}, {1, 0, 0, 0}, {0, 5, 0, 0}, {1, 3, 1, 0}, {0, 0, 0, 0.5},
                 {1, 0, 1, 2}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fix_gen_params gp = base_params(FC_F16, cases[i].packed);
        gp.mask.sliding_window = cases[i].window;
        gp.softcap = cases[i].softcap;
        gp.sinks = cases[i].sinks;
        gp.sinks_seed = 5;
        fix_case c;
        fc_err err;
        cr_assert_eq(fix_gen_case(&gp, &c, &err), FC_OK, "%s", err.msg);
        fix_check_result r;
        cr_assert_eq(fix_check_case(&c, FIX_BACKEND_REF, 0, &r, &err), FC_OK, "%s", err.msg);
        cr_expect(r.passed && r.oracle_ok, "case %zu: %s", i, r.detail);
        /* max|v| of (b, kv head 0, column 2), then row 0 of query head 1 (same kv head) past it */
        float vm = 0;
        for (int32_t j = 0; j < c.prob.seq.lk; j++)
            vm = fmaxf(vm, fabsf(c.v[(size_t)j * 4 + 2]));
        c.out[(size_t)c.prob.seq.lq * 4 + 2] = vm * (1 + 1e-6);
        cr_assert_eq(fix_check_case(&c, FIX_BACKEND_REF, 0, &r, &err), FC_OK, "%s", err.msg);
        cr_expect(!r.passed && strstr(r.detail, "out at (b, h, q, d) = (0, 1, 0, 2)") &&
                      strstr(r.detail, "beyond max|v|"),
                  "case %zu: %s", i, r.detail);
        fix_case_free(&c);
    }
}

/* A case with empty rows: causal, Lq 24 > Lk 20, so query q sits at position q - 4 and rows 0..3
 * of each head have no allowed key (docs/semantics.md sections 2 and 3: out 0, LSE -inf). The
 * LSE bound skips those rows and stays the finite bound of every other row: a stored LSE past
 * it is named as beyond that bound, in the head of the empty rows (after them) and in the next
 * head. (A bound turned infinite by an empty row left such a value to the comparison with the
 * oracle, which names a relative error instead; no other test had an empty row with -inf.) */
Test(fixture_check, the_lse_bound_stays_finite_on_a_case_with_empty_rows)
{
    fix_gen_params gp = base_params(FC_F32, 0);
    gp.lq = 24, gp.lk = 20;
    fix_case c;
    fc_err err;
    cr_assert_eq(fix_gen_case(&gp, &c, &err), FC_OK, "%s", err.msg);
    const size_t lq = 24, lk = 20, d = 4, empty = lq - lk;
    for (size_t h = 0; h < 2; h++)
        for (size_t q = 0; q < lq; q++) {
            double l = c.lse[h * lq + q], o = 0;
            for (size_t k = 0; k < d; k++)
                o = fmax(o, fabs(c.out[(h * lq + q) * d + k]));
            cr_assert(q < empty ? l == -INFINITY && o == 0 : isfinite(l),
                      "(h, q) = (%zu, %zu): lse %g, max|out| %g", h, q, l, o);
        }
    fix_check_result r;
    cr_assert_eq(fix_check_case(&c, FIX_BACKEND_REF, 0, &r, &err), FC_OK, "%s", err.msg);
    cr_expect(r.passed && r.oracle_ok, "the true oracle: %s", r.detail);
    /* the rows corrupted: the head's first non-empty row, one further down, the next head's */
    static const size_t rows[][2] = {{0, 4}, {0, 17}, {1, 9}};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        size_t h = rows[i][0], q = rows[i][1], row = h * lq + q;
        /* The bound, from the inputs: scale |q_row| max_j |k_j| + log(Lk + 1) (one kv head). */
        double qn = 0, km = 0;
        for (size_t k = 0; k < d; k++)
            qn += (double)c.q[row * d + k] * c.q[row * d + k];
        for (size_t j = 0; j < lk; j++) {
            double kn = 0;
            for (size_t k = 0; k < d; k++)
                kn += (double)c.k[j * d + k] * c.k[j * d + k];
            km = fmax(km, sqrt(kn));
        }
        double bound = c.prob.scale * sqrt(qn) * km + log((double)lk + 1);
        double keep = c.lse[row];
        c.lse[row] = bound + 1; /* finite, one past what any LSE of the row can be */
        cr_assert_eq(fix_check_case(&c, FIX_BACKEND_REF, 0, &r, &err), FC_OK, "%s", err.msg);
        c.lse[row] = keep;
        char where[64];
        snprintf(where, sizeof where, "lse at (b, h, q) = (0, %zu, %zu): stored ", h, q);
        const char *at = strstr(r.detail, "beyond the ");
        double said = at ? strtod(at + strlen("beyond the "), NULL) : NAN;
        cr_expect(!r.passed && strstr(r.detail, where) && isfinite(said) &&
                      fabs(said - bound) <= 1e-6 * bound,
                  "(h, q) = (%zu, %zu): want '%s...beyond the %.17g': %s", h, q, where, bound,
                  r.detail);
    }
    fix_case_free(&c);
}

Test(fixture_check, fails_a_nan_in_the_stored_lse)
{
    const char *p = write_base("nanlse.h5", FC_F32, 0);
    hid_t f = open_rw(p);
    double l[2 * 20];
    hid_t d = H5Dopen2(f, C0 "/lse", H5P_DEFAULT);
    H5Dread(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, l);
    l[3] = NAN;
    H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, l);
    H5Dclose(d);
    H5Fclose(f);
    fix_check_result r = check_file_case(p, 1);
    cr_assert(!r.passed && strstr(r.detail, "lse at (b, h, q) = (0, 0, 3)"), "%s", r.detail);
}

Test(fixture_check, fails_a_block_mask_that_drops_an_allowed_block)
{
    /* Causal, Lq 20, Lk 24 (offset 4): row 0 needs kv blocks 0 and 1 (query 15 sees key 19). */
    const int32_t ids[4] = {0, -1, 0, 1};
    BROKEN("unsound.h5", FC_F32, 0, put_counts(f, BM "/kv_num_blocks", 1, 2);
           put_ids(f, BM "/kv_indices", ids); put_counts(f, BM "/full_kv_num_blocks", 0, 0));
    fix_check_result r = check_file_case(p, 0);
    cr_assert(!r.passed && strstr(r.detail, "not sound"), "%s", r.detail);
}

Test(fixture_check, accepts_a_sound_superset_unless_exact_blocks_are_asked)
{
    /* Causal window 2 on 40 x 40, blocks 16: query block 0 sees kv block 0 only, so listing
     * kv block 2 as partial there is sound but not exact (what vLLM's superset build does). */
    fix_gen_params gp = base_params(FC_F32, 0);
    gp.lq = gp.lk = 40;
    gp.mask.sliding_window = 2;
    fc_err err;
    const char *p = path_of("superset.h5");
    cr_assert_eq(fix_gen_file(p, &gp, 1, 0, &err), FC_OK, "%s", err.msg);
    hid_t f = open_rw(p);
    int32_t n[3], ids[9];
    hid_t dn = H5Dopen2(f, BM "/kv_num_blocks", H5P_DEFAULT);
    hid_t di = H5Dopen2(f, BM "/kv_indices", H5P_DEFAULT);
    H5Dread(dn, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, n);
    H5Dread(di, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, ids);
    cr_assert(n[0] == 1 && ids[0] == 0, "row 0 lists kv block 0 only (%d, %d)", n[0], ids[0]);
    ids[n[0]++] = 2;
    H5Dwrite(dn, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, n);
    H5Dwrite(di, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, ids);
    H5Dclose(dn);
    H5Dclose(di);
    H5Fclose(f);
    fix_check_result r = check_file_case(p, 0);
    cr_assert(r.passed && r.bmask_checked && !r.bmask_exact, "passed %d checked %d exact %d: %s",
              r.passed, r.bmask_checked, r.bmask_exact, r.detail);
    r = check_file_case(p, 1);
    cr_assert(!r.passed && strstr(r.detail, "slow builder's: row [0][0][0], kv block 2: listed "
                                  "partial, the mask makes it empty"), "%s", r.detail);
}

/* ---- the CLI (flexcheck check / gen as a child process, FLEXCHECK_BIN) ---- */

TestSuite(fixture_cli, .init = make_dir, .fini = remove_dir);

/* Runs `ENV flexcheck ARGS` (env: NULL or assignments), capturing stdout and stderr into files
 * under dir; returns the status. */
static int run_cli_env(const char *env, const char *args, char *out, size_t outcap, char *errs,
                       size_t errcap)
{
    const char *bin = getenv("FLEXCHECK_BIN");
    if (!bin)
        cr_skip_test("FLEXCHECK_BIN is not set (make test sets it)");
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s %s %s >'%s/stdout' 2>'%s/stderr'", env ? env : "", bin, args,
             dir, dir);
    int st = system(cmd);
    cr_assert(st != -1 && WIFEXITED(st), "%s did not exit normally", cmd);
    char p[128];
    snprintf(p, sizeof p, "%s/stdout", dir);
    FILE *fp = fopen(p, "r");
    size_t n = fp ? fread(out, 1, outcap - 1, fp) : 0;
    out[n] = '\0';
    if (fp)
        fclose(fp);
    snprintf(p, sizeof p, "%s/stderr", dir);
    fp = fopen(p, "r");
    n = fp ? fread(errs, 1, errcap - 1, fp) : 0;
    errs[n] = '\0';
    if (fp)
        fclose(fp);
    return WEXITSTATUS(st);
}

static int run_cli(const char *args, char *out, size_t outcap, char *errs, size_t errcap)
{
    return run_cli_env(NULL, args, out, outcap, errs, errcap);
}

static int count_lines(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

Test(fixture_cli, check_exits_0_when_every_case_passes)
{
    char out[8192], errs[4096], args[512];
    const char *a = write_base("a.h5", FC_F32, 0), *b = write_base("b.h5", FC_BF16, 1);
    snprintf(args, sizeof args, "check --backend ref --exact-blocks '%s' '%s'", a, b);
    int st = run_cli(args, out, sizeof out, errs, sizeof errs);
    cr_assert_eq(st, 0, "status %d\n%s%s", st, out, errs);
    cr_assert(strstr(out, "PASS") && strstr(out, "2 cases: oracle confirmed in 2, not in 0"), "%s", out);
}

Test(fixture_cli, check_exits_2_with_one_line_naming_file_case_and_field)
{
    char out[8192], errs[4096], args[512];
    const char *good = write_base("good.h5", FC_F32, 0);
    BROKEN("bad.h5", FC_F32, 0, put_attr_int(f, C0, "chunk_size", -3));
    snprintf(args, sizeof args, "check '%s' '%s'", good, p);
    int st = run_cli(args, out, sizeof out, errs, sizeof errs);
    cr_assert_eq(st, 2, "status %d\n%s%s", st, out, errs);
    cr_assert_eq(count_lines(errs), 1, "one line: %s", errs);
    cr_assert(strstr(errs, p) && strstr(errs, "/cases/c0") && strstr(errs, "chunk_size"), "%s",
              errs);
    cr_assert(strstr(out, "1 rejected") && strstr(out, "oracle confirmed in 1"), "the good file is still "
              "checked: %s", out);
}

/* The case name and the value printed raw would make "FAKE: PASS" a line of its own. */
Test(fixture_cli, check_prints_a_case_named_with_a_newline_on_one_line)
{
    char out[8192], errs[4096], args[512];
    BROKEN("nl.h5", FC_F32, 0, (rename_case(f, "/cases/c00\nFAKE: PASS"),
                                put_attr_str(f, "/cases/c00\nFAKE: PASS", "dtype", "x\ny")));
    snprintf(args, sizeof args, "check '%s'", p);
    int st = run_cli(args, out, sizeof out, errs, sizeof errs);
    cr_assert_eq(st, 2, "status %d\n%s%s", st, out, errs);
    cr_expect_eq(count_lines(errs), 1, "one line: %s", errs);
    cr_expect(strstr(errs, "/cases/c00\\nFAKE: PASS: attribute 'dtype' = 'x\\ny'"), "%s", errs);
}

/* case_id and gate_check are flexcheck's own (export writes them), not the format's: another
 * producer's value of any kind is ignored with one warning per case (check reads each case more
 * than once), and a valid one is kept. */
Test(fixture_cli, check_ignores_an_unusable_case_id_with_one_warning)
{
    char out[8192], errs[4096], args[512], big[200];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    BROKEN("ids.h5", FC_F32, 0, (put_attr_int(f, C0, "case_id", 7),
                                 put_attr_str(f, C0, "gate_check", big)));
    snprintf(args, sizeof args, "check '%s'", p);
    int st = run_cli(args, out, sizeof out, errs, sizeof errs);
    cr_assert_eq(st, 0, "status %d\n%s%s", st, out, errs);
    cr_expect_eq(count_lines(errs), 2, "one line each: %s", errs);
    char want[256];
    snprintf(want, sizeof want, "flexcheck: warning: %s: /cases/c0: attribute 'case_id': must be "
             "a string; ignored", p);
    cr_expect(strstr(errs, want), "%s", errs);
    snprintf(want, sizeof want, "flexcheck: warning: %s: /cases/c0: attribute 'gate_check': a "
             "string of 199 bytes (at most 31); ignored", p);
    cr_expect(strstr(errs, want), "%s", errs);
    fix_case c;
    read_case0(p, &c);
    cr_expect(c.case_id[0] == '\0' && c.gate_check[0] == '\0');
    fix_case_free(&c);
    /* A valid one is kept. */
    hid_t f = open_rw(p);
    put_attr_vlstr(f, C0, "case_id", "k1/c07@L03");
    put_attr_str(f, C0, "gate_check", "window-edge");
    H5Fclose(f);
    read_case0(p, &c);
    cr_expect_str_eq(c.case_id, "k1/c07@L03");
    cr_expect_str_eq(c.gate_check, "window-edge");
    fix_case_free(&c);
}

Test(fixture_cli, check_fill_and_repro_refuse_what_is_not_a_regular_file, .timeout = 60)
{
    char out[8192], errs[4096], args[512];
    const char *d = path_of("somedir"), *q = path_of("ff");
    cr_assert_eq(mkdir(d, 0755), 0);
    cr_assert_eq(mkfifo(q, 0644), 0);
    static const char *const cmds[] = {"check '%s'", "repro '%s'", "fill '%s' --in-place"};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        for (int k = 0; k < 2; k++) {
            snprintf(args, sizeof args, cmds[i], k ? q : d);
            int st = run_cli(args, out, sizeof out, errs, sizeof errs);
            cr_expect_eq(st, 2, "%s: status %d\n%s%s", args, st, out, errs);
            cr_expect_eq(count_lines(errs), 1, "%s: one line: %s", args, errs);
            cr_expect(strstr(errs, k ? ": not a regular file" : ": is a directory"), "%s: %s",
                      args, errs);
        }
}

Test(fixture_cli, check_exits_1_when_a_stored_output_is_wrong)
{
    char out[8192], errs[4096], args[512];
    const char *p = write_base("wrong.h5", FC_F32, 0);
    hid_t f = open_rw(p);
    double l[2 * 20];
    hid_t d = H5Dopen2(f, C0 "/lse", H5P_DEFAULT);
    H5Dread(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, l);
    l[0] += 1e-6;
    H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, l);
    H5Dclose(d);
    H5Fclose(f);
    snprintf(args, sizeof args, "check '%s'", p);
    int st = run_cli(args, out, sizeof out, errs, sizeof errs);
    cr_assert_eq(st, 1, "status %d\n%s%s", st, out, errs);
    cr_assert(strstr(out, "FAIL") && strstr(out, "lse at (b, h, q) = (0, 0, 0)"), "%s", out);
}

Test(fixture_cli, check_refuses_an_unknown_backend)
{
    char out[4096], errs[4096], args[512];
    snprintf(args, sizeof args, "check --backend tpu '%s'", write_base("x.h5", FC_F32, 0));
    cr_assert_eq(run_cli(args, out, sizeof out, errs, sizeof errs), 2);
    cr_assert(strstr(errs, "--backend 'tpu': ref, emu or gpu"), "%s", errs);
}

Test(fixture_cli, check_runs_the_emulated_kernel_under_the_gates)
{
    char out[4096], errs[4096], args[512];
    const char *f = write_base("x.h5", FC_F32, 0);
    snprintf(args, sizeof args, "check --backend emu --kernel 1 '%s'", f);
    cr_assert_eq(run_cli(args, out, sizeof out, errs, sizeof errs), 0, "%s%s", out, errs);
    cr_assert(strstr(out, "kernel 1 on emu passes the gates"), "%s", out);
    /* The base case's head dim is one kernel 2 is not built for: a skip with the kernel's
     * reason, not a failure (exit 0). */
    snprintf(args, sizeof args, "check --backend emu --kernel 2 '%s'", f);
    cr_assert_eq(run_cli(args, out, sizeof out, errs, sizeof errs), 0, "%s%s", out, errs);
    cr_assert(strstr(out, "SKIP") && strstr(out, "kernel 2: head dims"), "%s", out);
}

Test(fixture_cli, gemma2_and_gpt_oss_layout_files_pass_the_emulated_kernel_with_their_terms)
{
    /* Each layer's soft-cap / sinks reach the kernel and the oracle, layer by layer, through
     * one shared block mask per run of equal masks. */
    static const struct {
        const char *layout, *scale_div, *term;
    } lay[] = {{"gemma2-27b", "64", "cap=50"}, {"gpt-oss-20b", "4", "sinks=on"}};
    for (size_t i = 0; i < sizeof lay / sizeof lay[0]; i++) {
        char out[8192], errs[4096], args[1024];
        const char *p = path_of(lay[i].layout);
        snprintf(args, sizeof args, "gen --case --layout %s --layers 4 --scale-div %s --hq 4 "
                 "--hkv 2 --d 32 --qb 16 --kb 16 --packed 0,70,71 --packed-k 0,70,110 "
                 "--dtype float16 --seed 3 --out '%s'", lay[i].layout, lay[i].scale_div, p);
        cr_assert_eq(run_cli(args, out, sizeof out, errs, sizeof errs), 0, "%s", errs);
        snprintf(args, sizeof args, "check --backend emu '%s'", p);
        int st = run_cli(args, out, sizeof out, errs, sizeof errs);
        cr_assert_eq(st, 0, "%s: status %d\n%s%s", lay[i].layout, st, out, errs);
        cr_expect(strstr(out, "4 cases: oracle confirmed and kernel 2 on emu passed in 4, failed "
                              "in 0") &&
                      strstr(out, "ran through one shared metadata object"),
                  "%s: %s", lay[i].layout, out);
        int with_term = 0;
        for (const char *q = out; (q = strstr(q, "PASS ")) != NULL; q++) {
            const char *eol = strchr(q, '\n');
            const char *t = strstr(q, lay[i].term);
            with_term += t && (!eol || t < eol);
        }
        cr_expect_eq(with_term, 4, "%s: every layer's line shows %s\n%s", lay[i].layout,
                     lay[i].term, out);
    }
}

Test(fixture_cli, gen_case_is_reproducible_and_refuses_to_overwrite)
{
    char out[4096], errs[4096], args[1024];
    const char *a = path_of("g1.h5"), *b = path_of("g2.h5");
    const char *flags = "--b 1 --hq 4 --hkv 2 --d 8 --dtype float16 --causal --window 5 "
                        "--qb 16 --kb 32 --packed 0,3,3,40 --packed-k 0,9,20,50 --seed 11";
    snprintf(args, sizeof args, "gen --case %s --out '%s'", flags, a);
    cr_assert_eq(run_cli(args, out, sizeof out, errs, sizeof errs), 0, "%s", errs);
    snprintf(args, sizeof args, "gen --case %s --out '%s'", flags, b);
    cr_assert_eq(run_cli(args, out, sizeof out, errs, sizeof errs), 0, "%s", errs);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "cmp -s '%s' '%s'", a, b);
    cr_assert_eq(system(cmd), 0, "the same flags give the same bytes");
    struct stat before, after;
    stat(a, &before);
    snprintf(args, sizeof args, "gen --case --seed 12 --out '%s'", a);
    cr_assert_eq(run_cli(args, out, sizeof out, errs, sizeof errs), 2);
    cr_assert(strstr(errs, "refusing to overwrite"), "%s", errs);
    stat(a, &after);
    cr_assert(before.st_ino == after.st_ino && before.st_size == after.st_size);
    snprintf(args, sizeof args, "check --exact-blocks '%s'", a);
    cr_assert_eq(run_cli(args, out, sizeof out, errs, sizeof errs), 0, "%s%s", out, errs);
}

Test(fixture_cli, gen_rejects_a_bad_packed_list)
{
    char out[4096], errs[4096], args[512];
    snprintf(args, sizeof args, "gen --case --packed 0,5,3 --out '%s'", path_of("bad.h5"));
    cr_assert_eq(run_cli(args, out, sizeof out, errs, sizeof errs), 2);
    cr_assert(strstr(errs, "non-decreasing"), "%s", errs);
    cr_assert_eq(access(path_of("bad.h5"), F_OK), -1, "no file left behind");
}

Test(fixture_reader, reads_a_file_image_from_memory_like_a_file)
{
    const char *p = write_base("img.h5", FC_F16, 1);
    FILE *fp = fopen(p, "rb");
    cr_assert(fp);
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    char *buf = malloc((size_t)n);
    cr_assert_eq(fread(buf, 1, (size_t)n, fp), (size_t)n);
    fclose(fp);
    fix_file f;
    fc_err err;
    cr_assert_eq(fix_open_image(buf, (size_t)n, "img", &f, &err), FC_OK, "%s", err.msg);
    cr_assert_eq(fix_validate(&f, &err), FC_OK, "%s", err.msg);
    fix_close(&f);
    cr_assert_neq(fix_open_image(buf, (size_t)n / 3, "img-cut", &f, &err), FC_OK);
    cr_assert(strstr(err.msg, "img-cut"), "%s", err.msg);
    free(buf);
}

/* ---- budgets: a small file may declare a case no machine can judge ---- */

/* Case 0 of file p read under a memory budget of max_bytes: the status, its message in err. */
static fc_status read_budgeted(const char *p, uint64_t max_bytes, fc_err *err)
{
    fix_file ff;
    cr_assert_eq(fix_open(p, &ff, err), FC_OK, "%s", err->msg);
    ff.budget.max_bytes = max_bytes;
    fix_case c;
    fc_status st = fix_read_case(&ff, 0, &c, err);
    if (st == FC_OK)
        fix_case_free(&c);
    fix_close(&ff);
    return st;
}

/* q, k, v, out and lse declared for Lq = Lk = 2^21 but never written (HDF5 allocates nothing,
 * the file stays a few KB): the reader refuses on the work budget from the shapes alone, before
 * any value is read or any buffer allocated; without the block mask, which no longer fits. */
Test(fixture_reader, a_case_over_the_budget_is_refused_before_reading_values)
{
    const hsize_t L = (hsize_t)1 << 21;
    const hsize_t q[4] = {1, 2, L, 4}, k[4] = {1, 1, L, 4}, o[4] = {1, 2, L, 4}, l[3] = {1, 2, L};
    BROKEN("huge.h5", FC_F32, 0,
           (del(f, BM), put_ds(f, C0 "/q", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 4, q, NULL),
            put_ds(f, C0 "/k", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 4, k, NULL),
            put_ds(f, C0 "/v", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 4, k, NULL),
            put_ds(f, C0 "/out", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 4, o, NULL),
            put_ds(f, C0 "/lse", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 3, l, NULL)));
    struct stat sb;
    cr_assert_eq(stat(p, &sb), 0);
    cr_expect_lt(sb.st_size, 1 << 20, "the file is small: %lld bytes", (long long)sb.st_size);
    /* Block masks of (2^21 / 16)^2 tiles alone are beyond 16 GiB, the most the default
     * budget (this machine's, fix_default_case_bytes) can be. */
    char budget[96];
    snprintf(budget, sizeof budget, "over the memory budget (--max-memory) of %.3g GiB",
             (double)fix_default_case_bytes() / (1 << 30));
    expect_rejected(p, C0, "Lq 2097152, Lk 2097152, D 4, Dv 4 need about", "GiB (inputs, "
                    "oracle, buffers, block masks, reference scratch), ", budget);
    /* With the memory budget raised past that, the work budget refuses it. The base case is
     * causal: panel p (of 128 query rows, p = 1 .. 2^14) sees the hull of keys 0 .. 128p - 1,
     * so 2 heads x (4 + 4) x sum_p 128 x 128p = 16 x 128 x 128 x 2^14 (2^14 + 1) / 2
     * = 3.52e13 multiply-adds, about half of every key of every row (7.04e13). */
    fc_err err;
    cr_expect_eq(read_budgeted(p, (uint64_t)1 << 50, &err), FC_EINVAL);
    cr_expect(strstr(err.msg, "need about 3.52e+13 multiply-adds, over the work budget of "
                              "1.1e+12: raise it with --max-work"), "%s", err.msg);
}

/* Empty sequences are legal, as many as a file holds: R is bounded by the memory budget, not
 * by the lengths (a rule R <= max(Lq, Lk) + 1 used to refuse this legal file). */
Test(fixture_reader, accepts_more_sequences_than_tokens)
{
    /* The base case's 20 queries and 24 keys as 3 sequences, then 40 empty ones. */
    int32_t cq[44] = {0, 8, 8}, ck[44] = {0, 10, 12};
    for (int i = 3; i < 44; i++) {
        cq[i] = 20;
        ck[i] = 24;
    }
    hsize_t d[1] = {44};
    BROKEN("cumany.h5", FC_F32, 1, (put_i32(f, C0 "/cu_seqlens_q", 1, d, cq),
                                    put_i32(f, C0 "/cu_seqlens_k", 1, d, ck)));
    fix_case c;
    read_case0(p, &c);
    cr_expect_eq(c.prob.seq.nseq, 43);
    fix_check_result r;
    fc_err err;
    cr_assert_eq(fix_check_case(&c, FIX_BACKEND_REF, 1, &r, &err), FC_OK, "%s", err.msg);
    cr_expect(r.passed, "the stored oracle holds: empty sequences change no row: %s", r.detail);
    fix_case_free(&c);
}

/* What R costs is counted before cu_seqlens is read: 2^27 sequences (declared, never written:
 * the file stays small) at 64 bytes each are 8 GiB, over a budget of 1 GiB. */
Test(fixture_reader, counts_packed_sequences_in_the_memory_budget)
{
    const hsize_t n = ((hsize_t)1 << 27) + 1;
    BROKEN("cuhuge.h5", FC_F32, 1,
           (put_ds(f, C0 "/cu_seqlens_q", H5T_STD_I32LE, H5T_NATIVE_INT32, 1, &n, NULL),
            put_ds(f, C0 "/cu_seqlens_k", H5T_STD_I32LE, H5T_NATIVE_INT32, 1, &n, NULL)));
    fc_err err;
    cr_expect_eq(read_budgeted(p, (uint64_t)1 << 30, &err), FC_EINVAL);
    cr_expect(strstr(err.msg, C0 "/cu_seqlens_q: 134217728 packed sequences (about 8 GiB) brings "
                              "the case to about 8") &&
                  strstr(err.msg, "over the memory budget (--max-memory) of 1 GiB"),
              "%s", err.msg);
}

/* Block masks of any width (engine dumps pad their rows): ceil(24 / 16) = 2 kv blocks in rows
 * of 5 slots, junk past the counts; accepted and checked as given. */
static void put_wide_mask(hid_t f, const char *bm, int32_t width)
{
    /* The slow builder's mask the base file stores ([1, 1, 2, 2]), each row widened to `width`
     * slots of junk past its count. */
    static const char *const lists[2] = {"kv", "full_kv"};
    for (int k = 0; k < 2; k++) {
        char cnt[128], idx[128];
        snprintf(cnt, sizeof cnt, "%s/%s_num_blocks", bm, lists[k]);
        snprintf(idx, sizeof idx, "%s/%s_indices", bm, lists[k]);
        int32_t n[2], old[4];
        hid_t d = H5Dopen2(f, cnt, H5P_DEFAULT);
        cr_assert(d >= 0 && H5Dread(d, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, n) >= 0);
        H5Dclose(d);
        d = H5Dopen2(f, idx, H5P_DEFAULT);
        cr_assert(d >= 0 && H5Dread(d, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, old) >= 0);
        H5Dclose(d);
        int32_t *ids = malloc(2 * (size_t)width * sizeof *ids);
        for (int32_t r = 0; r < 2; r++)
            for (int32_t j = 0; j < width; j++)
                ids[r * width + j] = j < n[r] ? old[r * 2 + j] : 7; /* 7: out of range */
        hsize_t id[4] = {1, 1, 2, (hsize_t)width};
        put_i32(f, idx, 4, id, ids);
        free(ids);
    }
}

Test(fixture_reader, accepts_a_block_mask_wider_than_the_kv_blocks)
{
    BROKEN("bmwide.h5", FC_F32, 0, put_wide_mask(f, BM, 5));
    fix_case c;
    read_case0(p, &c);
    cr_assert(c.has_bmask);
    cr_expect(c.bm.width == 5 && c.bm.nkb == 2, "width %d nkb %d", c.bm.width, c.bm.nkb);
    fix_check_result r;
    fc_err err;
    cr_assert_eq(fix_check_case(&c, FIX_BACKEND_REF, 1, &r, &err), FC_OK, "%s", err.msg);
    cr_expect(r.passed && r.bmask_checked && r.bmask_exact, "%s", r.detail);
    /* Written back in PyTorch's own [.., NQB, NKB] shape, the same sets. */
    const char *again = path_of("bmwide2.h5");
    cr_assert_eq(fix_write(again, NULL, &c, 1, 0, &err), FC_OK, "%s", err.msg);
    fix_case c2;
    read_case0(again, &c2);
    cr_expect(c2.bm.width == 2 && bmask_compare(&c.bm, &c2.bm, &err) == FC_OK, "%s", err.msg);
    fix_case_free(&c2);
    fix_case_free(&c);
}

/* Wider rows still list each of the 2 kv blocks at most once: a count of 3 in a row of 5 is
 * refused, naming both figures. */
Test(fixture_reader, rejects_a_count_above_the_kv_blocks_in_a_wide_row)
{
    int32_t n[2] = {3, 1}, none[2] = {0, 0};
    hsize_t nd[3] = {1, 1, 2};
    BROKEN("bmwide3.h5", FC_F32, 0, (put_wide_mask(f, BM, 5),
                                     put_i32(f, BM "/kv_num_blocks", 3, nd, n),
                                     put_i32(f, BM "/full_kv_num_blocks", 3, nd, none)));
    expect_rejected(p, BM, "kv_num_blocks[0][0][0] = 3: more than the 2 kv blocks");
}

/* A wide mask is counted in the memory budget before it is allocated, at its peak: 2 rows of 2^26
 * slots (a file of a few KB: declared, never written) keep 2 lists x 2^27 int32 ids = 1 GiB, and
 * each list passes through 2^27 int64 = 1 GiB more while it is read: 2 GiB, over a budget of
 * 1 GiB. (The message used to say the 1 GiB kept alone, half the peak measured.) */
Test(fixture_reader, counts_a_wide_block_mask_in_the_memory_budget)
{
    const hsize_t id[4] = {1, 1, 2, (hsize_t)1 << 26};
    BROKEN("bmhuge.h5", FC_F32, 0,
           (put_ds(f, BM "/kv_indices", H5T_STD_I32LE, H5T_NATIVE_INT32, 4, id, NULL),
            put_ds(f, BM "/full_kv_indices", H5T_STD_I32LE, H5T_NATIVE_INT32, 4, id, NULL)));
    fc_err err;
    cr_expect_eq(read_budgeted(p, (uint64_t)1 << 30, &err), FC_EINVAL);
    cr_expect(strstr(err.msg, BM ": a block mask of 2 rows of 67108864 ids (about 1 GiB, and 1 GiB "
                              "more while it is read) brings the case to about 2 GiB") &&
                  strstr(err.msg, "over the memory budget (--max-memory) of 1 GiB"), "%s",
              err.msg);
}

/* Any number of outputs under test (there was a limit of 64), each counted in the memory
 * budget: 70 read whole under the default budget; refused under a budget that holds the case
 * (its estimate, attn_case_cost, plus 4 KB) but not 70 outputs of 160 floats. */
Test(fixture_reader, reads_any_number_of_outputs_under_test_within_the_budget)
{
    BROKEN("many.h5", FC_F32, 0, {
        for (int i = 0; i < 70; i++) {
            char label[16];
            snprintf(label, sizeof label, "e%03d", i);
            put_tested(f, label, "engine");
        }
    });
    fix_case c;
    read_case0(p, &c);
    cr_expect_eq(c.ntested, 70);
    cr_expect_str_eq(c.tested[69].label, "e069");
    uint64_t need = attn_case_cost(&c.prob, c.q_block_size, c.kv_block_size).bytes;
    fix_case_free(&c);
    fc_err err;
    cr_expect_eq(read_budgeted(p, need + 4096, &err), FC_EINVAL);
    cr_expect(strstr(err.msg, C0 "/tested") && strstr(err.msg, "over the memory budget"), "%s",
              err.msg);
    /* The least budget that reads the case, found by bisection: one byte less fails on the
     * last thing counted, the last output's own data, so every output is counted. */
    uint64_t lo = need, hi = need + ((uint64_t)1 << 20);
    cr_assert_eq(read_budgeted(p, hi, &err), FC_OK, "%s", err.msg);
    while (hi - lo > 1) {
        uint64_t mid = lo + (hi - lo) / 2;
        *(read_budgeted(p, mid, &err) == FC_OK ? &hi : &lo) = mid;
    }
    cr_expect_eq(read_budgeted(p, lo, &err), FC_EINVAL);
    cr_expect(strstr(err.msg, C0 "/tested/e069/"), "the last output not counted: %s", err.msg);
}

/* A block mask wider than the kv blocks, the case's and a producer's: check runs the kernel with
 * the stored one as given and judges the producer's output with its mask. */
Test(fixture_cli, check_runs_a_wide_block_mask_as_given)
{
    char out[8192], errs[4096], args[512];
    BROKEN("wide.h5", FC_F32, 0, (put_wide_mask(f, BM, 6), put_tested(f, "eng", "engine x"),
                                  H5Ocopy(f, BM, f, C0 "/tested/eng/block_mask", H5P_DEFAULT,
                                          H5P_DEFAULT)));
    snprintf(args, sizeof args, "check --backend emu --kernel 1 --exact-blocks '%s'", p);
    int st = run_cli(args, out, sizeof out, errs, sizeof errs);
    cr_assert_eq(st, 0, "status %d\n%s%s", st, out, errs);
    cr_expect(strstr(out, "kernel 1 on emu passes the gates") && strstr(out, "tested/eng") &&
              strstr(out, "1 cases: oracle confirmed and kernel 1 on emu passed in 1, failed in 0"),
              "%s", out);
}

/* ---- hostile files: each file read in a child process (cli/isolate.h) ----
 * tests/hostile/make_hostile.sh makes two files that crash libhdf5 1.10.8 itself, one byte
 * changed in a committed fixture each: H5Aexists reading past a heap buffer (whether that
 * faults depends on the heap's layout: a plain build either segfaults or fails the lookup, ASan
 * always reports it) and H5Aread's vlen conversion copying megabytes past its buffer (a
 * segfault). Each must become one line on stderr naming the file, exit 2, and leave the files
 * after it checked as usual. */

typedef struct hostile {
    char h5aexists[128], h5aread[128];
    char overread_h5hg[128], overread_h5o[128]; /* read past a buffer, no crash */
    char env[1024]; /* for a sanitizer build: its report to a log file, then abort() */
} hostile;

static void make_hostile(hostile *h)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "sh tests/hostile/make_hostile.sh fixtures/sets '%s'", dir);
    cr_assert_eq(system(cmd), 0, "%s (run from the repository root)", cmd);
    snprintf(h->h5aexists, sizeof h->h5aexists, "%s/hostile-h5aexists.h5", dir);
    snprintf(h->h5aread, sizeof h->h5aread, "%s/hostile-h5aread.h5", dir);
    snprintf(h->overread_h5hg, sizeof h->overread_h5hg, "%s/overread-h5hg.h5", dir);
    snprintf(h->overread_h5o, sizeof h->overread_h5o, "%s/overread-h5o.h5", dir);
    /* A sanitizer build (fixtures-asan) reports libhdf5's memory errors itself and exits 1,
     * with a report on stderr. Sent to dir/asan.<pid> and ended by abort() instead, the child
     * dies by a signal like a plain build's and stderr keeps one line per file; the reports are
     * then checked to be libhdf5's (hostile_reports_are_libhdf5s). No effect on a plain build. */
    const char *prev = getenv("ASAN_OPTIONS");
    snprintf(h->env, sizeof h->env, "ASAN_OPTIONS='%s%sabort_on_error=1:log_path=%s/asan'",
             prev ? prev : "", prev && *prev ? ":" : "", dir);
}

/* Every sanitizer report the children left (a sanitizer build only) is about libhdf5: the
 * first frame past the sanitizer's own is in it (tests/fuzz/triage.sh's rule). */
static void hostile_reports_are_libhdf5s(void)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "ls '%s' | grep '^asan\\.'", dir);
    FILE *ls = popen(cmd, "r");
    cr_assert(ls);
    char name[128];
    while (fgets(name, sizeof name, ls)) {
        name[strcspn(name, "\n")] = '\0';
        char p[256], line[1024];
        snprintf(p, sizeof p, "%s/%s", dir, name);
        FILE *fp = fopen(p, "r");
        cr_assert(fp, "open %s", p);
        int found = 0;
        while (!found && fgets(line, sizeof line, fp)) {
            if (!strstr(line, "    #") || strstr(line, "interceptor") ||
                strstr(line, "libsanitizer") || strstr(line, "libasan"))
                continue;
            found = 1;
            cr_expect(strstr(line, "libhdf5"), "a sanitizer report outside libhdf5 (%s): %s", p,
                      line);
        }
        fclose(fp);
        cr_expect(found, "%s: no stack in the report", p);
        unlink(p);
    }
    pclose(ls);
}

/* Runs a command on hostile files: h->env set, and the one line a sanitizer build writes to
 * stderr itself before its report goes to the log ("AddressSanitizer:DEADLYSIGNAL") taken out
 * of errs (the report it announces is checked by hostile_reports_are_libhdf5s). */
static int run_hostile(const hostile *h, const char *args, char *out, size_t outcap, char *errs,
                       size_t errcap)
{
    int st = run_cli_env(h->env, args, out, outcap, errs, errcap);
    static const char banner[] = "AddressSanitizer:DEADLYSIGNAL\n";
    for (char *b; (b = strstr(errs, banner));)
        memmove(b, b + sizeof banner - 1, strlen(b + sizeof banner - 1) + 1);
    return st;
}

/* The line of stderr that names `file`, or NULL. */
static const char *line_naming(const char *errs, const char *file, char *buf, size_t cap)
{
    const char *s = strstr(errs, file);
    if (!s)
        return NULL;
    while (s > errs && s[-1] != '\n')
        s--;
    size_t n = strcspn(s, "\n");
    snprintf(buf, cap, "%.*s", (int)(n < cap ? n : cap - 1), s);
    return buf;
}

/* The H5Aread file crashes every time; the H5Aexists file crashes or, when the read past the
 * buffer happens to stay inside the heap, is refused by the reader: both are one line. */
static void expect_crash_line(const char *errs, const char *file, int may_be_refused)
{
    char ln[1024];
    cr_assert(line_naming(errs, file, ln, sizeof ln), "no line names %s:\n%s", file, errs);
    int crashed = strstr(ln, "the HDF5 library crashed reading it (signal ") &&
                  strstr(ln, "): corrupt or hostile file");
    int refused = strstr(ln, "cannot look up attribute 'causal' (corrupt file?)") != NULL;
    cr_expect(crashed || (may_be_refused && refused), "%s", ln);
}

Test(fixture_cli, a_file_that_crashes_libhdf5_is_one_line_and_the_next_file_is_checked)
{
    hostile h;
    make_hostile(&h);
    const char *good = write_base("good.h5", FC_F32, 0);
    char out[8192], errs[4096], args[1024];
    snprintf(args, sizeof args, "check --report '%s/rep' '%s' '%s' '%s'", dir, h.h5aread,
             h.h5aexists, good);
    int st = run_hostile(&h, args, out, sizeof out, errs, sizeof errs);
    cr_assert_eq(st, 2, "status %d\n%s%s", st, out, errs);
    cr_expect_eq(count_lines(errs), 2, "one line per hostile file:\n%s", errs);
    expect_crash_line(errs, h.h5aread, 0);
    expect_crash_line(errs, h.h5aexists, 1);
    char pass[256];
    snprintf(pass, sizeof pass, "PASS %s c0 ", good);
    cr_expect(strstr(out, pass), "the good file after them is checked:\n%s", out);
    cr_expect(strstr(out, "check: 3 files, 2 rejected; 1 cases: oracle confirmed in 1, not in 0\n"),
              "summary:\n%s", out);
    char p[256];
    snprintf(p, sizeof p, "%s/rep/rows.csv", dir);
    FILE *fp = fopen(p, "r");
    cr_assert(fp, "the report was written: %s", p);
    static char csv[1 << 16];
    csv[fread(csv, 1, sizeof csv - 1, fp)] = '\0';
    fclose(fp);
    cr_expect(strstr(csv, "hostile-h5aread.h5,file,") &&
                  strstr(csv, "the HDF5 library crashed reading it (signal "),
              "an error row for the crashed file:\n%s", csv);
    hostile_reports_are_libhdf5s();
}

Test(fixture_cli, repro_and_fill_of_a_file_that_crashes_libhdf5_exit_2_with_the_line)
{
    hostile h;
    make_hostile(&h);
    char out[8192], errs[4096], args[1024];
    struct {
        const char *args, *file;
        int may_be_refused;
    } runs[] = {
        {"repro '%s' --case t04_causal_window --kernel 1", h.h5aread, 0},
        {"repro '%s' --case layer02 --kernel 1", h.h5aexists, 1},
        {"fill '%s' --out '%s/filled.h5'", h.h5aread, 0},
        {"fill '%s' --out '%s/filled.h5'", h.h5aexists, 1},
    };
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        snprintf(args, sizeof args, runs[i].args, runs[i].file, dir);
        int st = run_hostile(&h, args, out, sizeof out, errs, sizeof errs);
        cr_expect_eq(st, 2, "%s: status %d\n%s%s", args, st, out, errs);
        cr_expect_eq(count_lines(errs), 1, "%s: one line:\n%s", args, errs);
        expect_crash_line(errs, runs[i].file, runs[i].may_be_refused);
    }
    char cmd[256];
    snprintf(cmd, sizeof cmd, "ls '%s' | grep -q filled", dir);
    cr_expect_neq(system(cmd), 0, "fill left its output or a temporary file behind");
    hostile_reports_are_libhdf5s();
}

#if defined(__SANITIZE_ADDRESS__)
/* 1 when a sanitizer report the children left in dir names `fn` among its frames. */
static int a_report_names(const char *fn)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "grep -qs ' in %s ' '%s'/asan.*", fn, dir);
    return system(cmd) == 0;
}
#endif

/* The two files libhdf5 1.10.8 reads past a heap buffer on without crashing
 * (make_hostile.sh): a plain build cannot see the read; what it read is garbage our validation
 * refuses, one line each (it may as well crash on another heap layout: one line too). The
 * sanitizer build (fixtures-asan) sees it: the child aborts on the report, which must be
 * libhdf5's and name the function that read past the buffer. Either way the file is rejected,
 * exit 2, and the next file is checked. */
Test(fixture_cli, a_file_libhdf5_reads_past_a_buffer_on_is_one_line_and_asan_names_the_read)
{
    hostile h;
    make_hostile(&h);
    const char *good = write_base("good.h5", FC_F32, 0);
    char out[8192], errs[4096], args[1024];
    snprintf(args, sizeof args, "check '%s' '%s' '%s'", h.overread_h5hg, h.overread_h5o, good);
    int st = run_hostile(&h, args, out, sizeof out, errs, sizeof errs);
    cr_assert_eq(st, 2, "status %d\n%s%s", st, out, errs);
    cr_expect_eq(count_lines(errs), 2, "one line per file:\n%s", errs);
    const char *files[2] = {h.overread_h5hg, h.overread_h5o};
    for (int k = 0; k < 2; k++) {
        char ln[1024];
        cr_expect(line_naming(errs, files[k], ln, sizeof ln), "no line names %s:\n%s", files[k],
                  errs);
    }
    char pass[256];
    snprintf(pass, sizeof pass, "PASS %s c0 ", good);
    cr_expect(strstr(out, pass), "the good file after them is checked:\n%s", out);
#if defined(__SANITIZE_ADDRESS__)
    cr_expect(a_report_names("H5HG_read"), "no report names H5HG_read (%s)", h.overread_h5hg);
    cr_expect(a_report_names("H5O__msg_iterate_real"), "no report names H5O__msg_iterate_real "
              "(%s)", h.overread_h5o);
#endif
    hostile_reports_are_libhdf5s();
}

/* The file libhdf5 never returns from (make_hostile.sh: loop-h5hg.h5, a global heap whose
 * parser never reaches its end): each command's child stops it when the step outruns its
 * allowance (cli/isolate.h; FLEXCHECK_HDF5_TIMEOUT=2 here, 30 s by default): one line naming
 * the file, the step and the allowance, exit 2, and the next file is checked. Without the
 * watchdog the command never ends. A bad allowance is refused before any file is read. */
Test(fixture_cli, a_file_libhdf5_never_returns_from_is_stopped_and_one_line)
{
    hostile h;
    make_hostile(&h);
    char loop[160], env[1200], out[8192], errs[4096], args[1024], ln[1024];
    snprintf(loop, sizeof loop, "%s/loop-h5hg.h5", dir);
    /* timeout(1): a command that never ends fails here (124) rather than hanging the suite */
    snprintf(env, sizeof env, "%s FLEXCHECK_HDF5_TIMEOUT=2 timeout 60", h.env);
    const char *good = write_base("good.h5", FC_F32, 0);
    static const char said[] = ": libhdf5 did not return from opening it (its superblock, root "
                               "attributes and case list) within 2 s (stopped): a corrupt or "
                               "hostile file, or storage slower than that "
                               "(FLEXCHECK_HDF5_TIMEOUT=SECONDS)";
    snprintf(args, sizeof args, "check '%s' '%s'", loop, good);
    int st = run_cli_env(env, args, out, sizeof out, errs, sizeof errs);
    cr_assert_eq(st, 2, "status %d\n%s%s", st, out, errs);
    cr_expect_eq(count_lines(errs), 1, "one line:\n%s", errs);
    cr_expect(line_naming(errs, loop, ln, sizeof ln) && strstr(ln, said), "%s", errs);
    char pass[256];
    snprintf(pass, sizeof pass, "PASS %s c0 ", good);
    cr_expect(strstr(out, pass), "the good file after it is checked:\n%s", out);
    const char *runs[] = {"repro '%s'", "fill '%s' --out '%s/filled.h5'"};
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        snprintf(args, sizeof args, runs[i], loop, dir);
        st = run_cli_env(env, args, out, sizeof out, errs, sizeof errs);
        cr_expect_eq(st, 2, "%s: status %d\n%s%s", args, st, out, errs);
        cr_expect_eq(count_lines(errs), 1, "%s: one line:\n%s", args, errs);
        cr_expect(line_naming(errs, loop, ln, sizeof ln) && strstr(ln, said), "%s: %s", args,
                  errs);
    }
    char cmd[256];
    snprintf(cmd, sizeof cmd, "ls '%s' | grep -q filled", dir);
    cr_expect_neq(system(cmd), 0, "fill left its output or a temporary file behind");
    snprintf(args, sizeof args, "check '%s'", good);
    st = run_cli_env("FLEXCHECK_HDF5_TIMEOUT=0", args, out, sizeof out, errs, sizeof errs);
    cr_expect_eq(st, 2, "status %d\n%s%s", st, out, errs);
    cr_expect_str_eq(errs, "flexcheck: FLEXCHECK_HDF5_TIMEOUT='0': whole seconds from 1 to "
                           "1073741824\n");
    cr_expect_str_eq(out, "", "nothing checked");
    hostile_reports_are_libhdf5s();
}

/* A file whose tensors the memory limit cannot hold: q declared [1, 2, 2^24, 4] (512 MiB as
 * float32; HDF5 stores nothing for a dataset never written, so the file stays small) under
 * --max-memory 512M, every row asked for (--rows all; by default check would judge a sample
 * that fits, test_sample.c). The case's estimate (4.22 GiB with the oracle, buffers and block
 * masks) is over that figure, so the reader refuses it from its shapes before allocating
 * anything (the child's address-space limit is the backstop behind the estimate); the next
 * file is still checked. A sanitizer build applies no limit (its shadow memory alone exceeds
 * it). */
Test(fixture_cli, a_file_larger_than_the_memory_limit_is_one_line_naming_the_limit)
{
#if defined(__SANITIZE_ADDRESS__)
    cr_skip_test("a sanitizer build applies no memory limit");
#endif
    hsize_t dq[4] = {1, 2, 1u << 24, 4}, dl[3] = {1, 2, 1u << 24};
    BROKEN("big.h5", FC_F32, 0, put_ds(f, C0 "/q", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 4, dq, NULL);
           put_ds(f, C0 "/out", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 4, dq, NULL);
           put_ds(f, C0 "/lse", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 3, dl, NULL); del(f, BM));
    const char *good = write_base("good.h5", FC_F32, 0);
    char out[8192], errs[4096], args[1024];
    snprintf(args, sizeof args, "check --rows all --max-memory 512M '%s' '%s'", p, good);
    int st = run_cli(args, out, sizeof out, errs, sizeof errs);
    cr_assert_eq(st, 2, "status %d\n%s%s", st, out, errs);
    cr_expect_eq(count_lines(errs), 1, "%s", errs);
    cr_expect(strstr(errs, p) && strstr(errs, "need about 4.22 GiB") &&
                  strstr(errs, "over the memory budget (--max-memory) of 0.5 GiB"),
              "%s", errs);
    cr_expect(strstr(out, "check: 2 files, 1 rejected; 1 cases: oracle confirmed in 1, not in 0\n"), "%s",
              out);
}

/* FLEXCHECK_NO_FORK=1 (a debugging aid) runs the same code in the process: the same lines, the
 * same exit status, the same report rows. */
Test(fixture_cli, check_without_isolation_says_the_same)
{
    const char *good = write_base("good.h5", FC_F32, 0);
    BROKEN("bad.h5", FC_F32, 0, put_attr_int(f, C0, "chunk_size", -3));
    char out[2][8192], errs[2][4096], args[1024], csv[2][1 << 15];
    int st[2];
    for (int k = 0; k < 2; k++) {
        snprintf(args, sizeof args, "check --report '%s/rep%d' '%s' '%s'", dir, k, good, p);
        st[k] = run_cli_env(k ? "FLEXCHECK_NO_FORK=1" : NULL, args, out[k], sizeof out[k],
                            errs[k], sizeof errs[k]);
        char rp[256];
        snprintf(rp, sizeof rp, "%s/rep%d/rows.csv", dir, k);
        FILE *fp = fopen(rp, "r");
        cr_assert(fp, "%s", rp);
        csv[k][fread(csv[k], 1, sizeof csv[k] - 1, fp)] = '\0';
        fclose(fp);
    }
    cr_expect(st[0] == 2 && st[1] == 2, "status %d and %d", st[0], st[1]);
    /* The report paths differ (rep0, rep1): the last line of stdout names them. */
    char *e0 = strstr(out[0], "report: "), *e1 = strstr(out[1], "report: ");
    cr_assert(e0 && e1, "%s\n%s", out[0], out[1]);
    *e0 = *e1 = '\0';
    cr_expect_str_eq(out[0], out[1]);
    cr_expect_str_eq(errs[0], errs[1]);
    cr_expect_str_eq(csv[0], csv[1]);
}

/* ---- the default memory budget (fixtures/fix_budget.c) ----
 * The lesser of 16 GiB and half of the memory the process can have (physical, or its cgroup's
 * limit), in whole MiB, at least 512 MiB. Expected figures worked out by hand. */

typedef struct default_case {
    uint64_t phys, cgroup, want;
} default_case;

Test(fixture_budget, the_default_is_the_lesser_of_16_gib_and_half_the_memory)
{
    const uint64_t G = (uint64_t)1 << 30;
    static const default_case cases[] = {
        {64 * ((uint64_t)1 << 30), 0, 16 * ((uint64_t)1 << 30)}, /* a large machine: 16 GiB */
        {24 * ((uint64_t)1 << 30), 0, 12 * ((uint64_t)1 << 30)},
        /* the CI machine's MemTotal, 24684084 kB: half is 12638251008 bytes, 12052.77 MiB */
        {24684084ull * 1024, 0, 12052ull << 20},
        {64 * ((uint64_t)1 << 30), 8 * ((uint64_t)1 << 30), 4 * ((uint64_t)1 << 30)}, /* cgroup */
        {16 * ((uint64_t)1 << 30), 64 * ((uint64_t)1 << 30), 8 * ((uint64_t)1 << 30)},
        {0, 0, 16 * ((uint64_t)1 << 30)},                     /* nothing known: 16 GiB */
        {0, 6 * ((uint64_t)1 << 30), 3 * ((uint64_t)1 << 30)},
        {512 * ((uint64_t)1 << 20), 0, 512 * ((uint64_t)1 << 20)}, /* never under 512 MiB */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint64_t got = fix_default_case_bytes_of(cases[i].phys, cases[i].cgroup);
        cr_expect_eq(got, cases[i].want, "case %zu (phys %.4g GiB, cgroup %.4g GiB): %llu, "
                     "want %llu", i, (double)cases[i].phys / G, (double)cases[i].cgroup / G,
                     (unsigned long long)got, (unsigned long long)cases[i].want);
    }
}

/* Physical memory from sysconf's figures, in bytes: the CI machine's 6170896 pages of 4096
 * bytes (its _SC_PHYS_PAGES and _SC_PAGE_SIZE) are its MemTotal, 24683584 kB (the kernel's
 * count of the same memory in KiB), times 1024; read as KiB the budget fell to its 512 MiB
 * floor and valid cases were refused. */
Test(fixture_budget, physical_memory_is_counted_in_bytes)
{
    const uint64_t M = (uint64_t)1 << 20;
    cr_expect_eq(fix_phys_memory_bytes(6170896, 4096), 24683584ull * 1024);
    /* half of it, 12052.53 MiB, in whole MiB */
    cr_expect_eq(fix_default_case_bytes_of(fix_phys_memory_bytes(6170896, 4096), 0), 12052 * M);
    cr_expect_eq(fix_phys_memory_bytes(262144, 65536), (uint64_t)16 << 30); /* 64 KiB pages */
    cr_expect_eq(fix_phys_memory_bytes(-1, 4096), 0, "unknown page count: unknown memory");
    cr_expect_eq(fix_phys_memory_bytes(6170896, 0), 0, "unknown page size: unknown memory");
}

/* This machine's default is the rule applied to its MemTotal (/proc/meminfo, read here on its
 * own: the kernel's count of the same pages sysconf reports, in KiB) and its cgroup's limit,
 * exactly: a unit slip anywhere between sysconf and the rule changes it (a bound such as
 * "at most half of MemTotal" holds at the 512 MiB floor too, and missed one). */
Test(fixture_budget, this_machines_default_is_the_rule_on_its_memtotal)
{
    FILE *fp = fopen("/proc/meminfo", "r");
    cr_assert(fp);
    unsigned long long kb = 0;
    char line[256];
    while (fgets(line, sizeof line, fp))
        if (sscanf(line, "MemTotal: %llu kB", &kb) == 1)
            break;
    fclose(fp);
    cr_assert_gt(kb, 0);
    char text[4096] = "";
    if ((fp = fopen("/proc/self/cgroup", "r"))) {
        text[fread(text, 1, sizeof text - 1, fp)] = '\0';
        fclose(fp);
    }
    uint64_t cg = fix_cgroup_memory_limit("/sys/fs/cgroup", text);
    uint64_t want = fix_default_case_bytes_of(kb * 1024, cg), d = fix_default_case_bytes();
    cr_expect_eq(d, want, "default %llu bytes, want %llu: MemTotal %llu kB, cgroup limit %llu",
                 (unsigned long long)d, (unsigned long long)want, kb, (unsigned long long)cg);
}

/* A file `rel` under dir holding `text`, its folders made. */
static void put_file(const char *rel, const char *text)
{
    char p[512], cmd[640];
    snprintf(p, sizeof p, "%s/%s", dir, rel);
    snprintf(cmd, sizeof cmd, "mkdir -p \"$(dirname '%s')\"", p);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    FILE *fp = fopen(p, "w");
    cr_assert(fp, "%s", p);
    fputs(text, fp);
    fclose(fp);
}

/* cgroup trees laid out under dir the way /sys/fs/cgroup is: the least limit of the process's
 * cgroup and its ancestors, v2 (unified or hybrid) and v1's memory controller. */
Test(fixture_budget, the_cgroup_limit_is_the_least_of_the_cgroup_and_its_ancestors)
{
    char root[128];
    /* v2, unified: the leaf sets none ("max"), its parent 1 GiB, the grandparent 3 GiB. */
    snprintf(root, sizeof root, "%s/v2", dir);
    put_file("v2/a/memory.max", "3221225472\n");
    put_file("v2/a/b/memory.max", "1073741824\n");
    put_file("v2/a/b/c/memory.max", "max\n");
    cr_expect_eq(fix_cgroup_memory_limit(root, "0::/a/b/c\n"), (uint64_t)1 << 30);
    cr_expect_eq(fix_cgroup_memory_limit(root, "0::/a\n"), (uint64_t)3 << 30);
    cr_expect_eq(fix_cgroup_memory_limit(root, "0::/elsewhere\n"), 0);
    /* hybrid: v1 controllers, v2 beside them at root/unified */
    snprintf(root, sizeof root, "%s/hy", dir);
    put_file("hy/unified/svc/memory.max", "536870912\n");
    cr_expect_eq(fix_cgroup_memory_limit(root, "1:cpu:/\n0::/svc\n"), (uint64_t)512 << 20);
    /* v1: the memory controller's own hierarchy; v1's "unlimited" (2^63 rounded down to a page)
     * is no limit; a limit on the hierarchy's root binds; controllers may share a line. */
    snprintf(root, sizeof root, "%s/v1", dir);
    put_file("v1/memory/job/memory.limit_in_bytes", "9223372036854771712\n");
    cr_expect_eq(fix_cgroup_memory_limit(root, "4:memory:/job\n0::/\n"), 0);
    put_file("v1/memory/memory.limit_in_bytes", "2147483648\n");
    cr_expect_eq(fix_cgroup_memory_limit(root, "4:memory:/job\n0::/\n"), (uint64_t)2 << 30);
    put_file("v1/memory/job/memory.limit_in_bytes", "1610612736\n");
    cr_expect_eq(fix_cgroup_memory_limit(root, "7:cpu,memory,pids:/job\n"),
                 (uint64_t)3 << 29);
    /* a controller that is not the memory controller, junk, nothing */
    cr_expect_eq(fix_cgroup_memory_limit(root, "4:cpuset:/job\n"), 0);
    put_file("v1/memory/bad/memory.limit_in_bytes", "12x\n");
    cr_expect_eq(fix_cgroup_memory_limit(root, "4:memory:/bad"), (uint64_t)2 << 30);
    cr_expect_eq(fix_cgroup_memory_limit(root, ""), 0);
}

/* ---- outputs under test in the memory budget ---- */

/* The least budget under which case 0 of p reads, by bisection in (lo, hi]: hi must read. */
static uint64_t least_budget(const char *p, uint64_t lo, uint64_t hi)
{
    fc_err err;
    cr_assert_eq(read_budgeted(p, hi, &err), FC_OK, "%s", err.msg);
    while (hi - lo > 1) {
        uint64_t mid = lo + (hi - lo) / 2;
        *(read_budgeted(p, mid, &err) == FC_OK ? &hi : &lo) = mid;
    }
    return hi;
}

/* An output under test is kept as float, 4 bytes a value, and so are its rerun and its LSE. A
 * case with Lq = 2^15 (B 1, Hq 2, Dv 4) and an output of 2^18 values (declared, never written):
 * adding a rerun of it must raise the least budget that reads the case by 2^20 bytes exactly,
 * adding an LSE of 2^16 values by 2^18 (each the peak of the read: far above the block mask's
 * scratch). Counting values instead of bytes would raise it by a quarter of that. */
Test(fixture_reader, counts_an_output_under_test_at_four_bytes_a_value)
{
    fix_gen_params gp = base_params(FC_F32, 0);
    gp.lq = 1 << 15;
    const uint64_t rows = (uint64_t)gp.b * gp.hq * gp.lq, n = rows * (uint64_t)gp.dv;
    const hsize_t od[4] = {(hsize_t)gp.b, (hsize_t)gp.hq, (hsize_t)gp.lq, (hsize_t)gp.dv};
    static const char *const names[3] = {"out.h5", "rerun.h5", "lse.h5"};
    uint64_t least[3];
    for (int k = 0; k < 3; k++) {
        const char *p = path_of(names[k]);
        fc_err err;
        cr_assert_eq(fix_gen_file(p, &gp, 1, 0, &err), FC_OK, "%s", err.msg);
        hid_t f = open_rw(p);
        H5Gclose(H5Gcreate2(f, C0 "/tested", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
        H5Gclose(H5Gcreate2(f, C0 "/tested/eng", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
        put_attr_vlstr(f, C0 "/tested/eng", "producer", "engine");
        put_ds(f, C0 "/tested/eng/out", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 4, od, NULL);
        if (k == 1)
            put_ds(f, C0 "/tested/eng/out_rerun", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 4, od, NULL);
        if (k == 2)
            put_ds(f, C0 "/tested/eng/lse", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 3, od, NULL);
        H5Fclose(f);
        least[k] = least_budget(p, 0, (uint64_t)1 << 30);
    }
    cr_expect_eq(least[1] - least[0], 4 * n, "a rerun of %llu values raised the least budget "
                 "by %llu bytes", (unsigned long long)n,
                 (unsigned long long)(least[1] - least[0]));
    cr_expect_eq(least[2] - least[0], 4 * rows, "an LSE of %llu values raised the least budget "
                 "by %llu bytes", (unsigned long long)rows,
                 (unsigned long long)(least[2] - least[0]));
    /* One byte less refuses the rerun, its figure in the message. */
    fc_err err;
    cr_expect_eq(read_budgeted(path_of(names[1]), least[1] - 1, &err), FC_EINVAL);
    char want[128];
    snprintf(want, sizeof want, C0 "/tested/eng/out_rerun: the output (about %.3g GiB)",
             (double)(4 * n) / (1 << 30));
    cr_expect(strstr(err.msg, want), "want '%s': %s", want, err.msg);
}

/* ---- compressed chunks (finding: a 5 MB file whose chunks inflate to 5 x 1 GiB passed) ----
 * libhdf5 inflates a compressed chunk whole into a buffer of its own, and a chunk may be larger
 * than its dataset (an extendible one). */

/* Replaces obj by a deflated dataset of shape dims (extendible: its chunk may exceed it) in
 * chunks of `chunk`, written from buf when not NULL (declared only otherwise). */
static void put_deflated(hid_t f, const char *obj, hid_t ftype, hid_t mtype, int rank,
                         const hsize_t *dims, const hsize_t *chunk, const void *buf)
{
    if (H5Lexists(f, obj, H5P_DEFAULT) > 0)
        del(f, obj);
    hsize_t maxd[4] = {H5S_UNLIMITED, H5S_UNLIMITED, H5S_UNLIMITED, H5S_UNLIMITED};
    hid_t s = H5Screate_simple(rank, dims, maxd);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    cr_assert(dcpl >= 0 && H5Pset_chunk(dcpl, rank, chunk) >= 0 && H5Pset_deflate(dcpl, 1) >= 0);
    hid_t d = H5Dcreate2(f, obj, ftype, s, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    cr_assert(d >= 0, "create %s", obj);
    if (buf)
        cr_assert(H5Dwrite(d, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) >= 0, "write %s", obj);
    H5Dclose(d);
    H5Pclose(dcpl);
    H5Sclose(s);
}

/* q of 160 values in one chunk of [1, 2, 2^24, 4] float32 = 512 MiB: libhdf5's buffer for it is
 * counted with the rest of the case before the read, and refused under a budget 1 KiB above the
 * chunk (the case itself counts more: its reference scratch alone is 65 KiB). Declared only:
 * the refusal comes from the layout, before anything is inflated. */
Test(fixture_reader, a_compressed_chunk_larger_than_the_budget_is_refused_unread)
{
    const hsize_t q[4] = {1, 2, 20, 4}, chunk[4] = {1, 2, (hsize_t)1 << 24, 4};
    BROKEN("chunk.h5", FC_F32, 0,
           put_deflated(f, C0 "/q", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 4, q, chunk, NULL));
    fc_err err;
    cr_expect_eq(read_budgeted(p, ((uint64_t)1 << 29) + 1024, &err), FC_EINVAL);
    cr_expect(strstr(err.msg, C0 "/q: libhdf5's map of its 1 chunk and its buffer for one "
                              "inflated chunk (about 0.5 GiB while it is read) brings the case "
                              "to about 0.5") &&
                  strstr(err.msg, "over the memory budget (--max-memory) of 0.5 GiB"),
              "%s", err.msg);
    /* Stored float16, our own buffer of its bits is counted with it. */
    const hsize_t qh[4] = {1, 2, 20, 4};
    hid_t h = fix_h5_half_type();
    const char *p2 = write_base("chunk16.h5", FC_F16, 0);
    hid_t f = open_rw(p2);
    put_deflated(f, C0 "/q", h, h, 4, qh, chunk, NULL);
    H5Fclose(f);
    H5Tclose(h);
    cr_expect_eq(read_budgeted(p2, ((uint64_t)1 << 28) + 1024, &err), FC_EINVAL);
    cr_expect(strstr(err.msg, C0 "/q: libhdf5's map of its 1 chunk and its buffer for one "
                              "inflated chunk and its float16 bits (about 0.25 GiB while it is "
                              "read)"), "%s", err.msg);
}

/* Each chunk fits, but together they inflate past the budget: q [1, 2, 20, 4] in chunks of
 * [1, 2, 11, 2^20] float32, 88 MiB each, two of them along Lq: 176 MiB, over 128 MiB. */
Test(fixture_reader, compressed_chunks_that_inflate_past_the_budget_are_refused_unread)
{
    const hsize_t q[4] = {1, 2, 20, 4}, chunk[4] = {1, 2, 11, (hsize_t)1 << 20};
    BROKEN("chunks.h5", FC_F32, 0,
           put_deflated(f, C0 "/q", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 4, q, chunk, NULL));
    fc_err err;
    cr_expect_eq(read_budgeted(p, (uint64_t)1 << 27, &err), FC_EINVAL);
    char want[160];
    snprintf(want, sizeof want, C0 "/q: compressed chunks that inflate to about %.3g GiB (%llu "
             "bytes each), over the memory budget (--max-memory) of 0.125 GiB",
             2.0 * 2 * 11 * 4 * (1 << 20) / (1 << 30), 2ull * 11 * 4 * (1 << 20));
    cr_expect(strstr(err.msg, want), "want '%s': %s", want, err.msg);
}

/* libhdf5 maps every chunk a read touches (about 4 KB each): cu_seqlens of 2^20 + 1 entries
 * (declared, in chunks of one entry: a file of a few KB) would have it allocate 4 GiB to read
 * 8 MiB. Counted before the read, refused under 1 GiB. */
/* Replaces obj by an int32 dataset of n entries in chunks of one, declared only. */
static void put_tiny_chunks(hid_t f, const char *obj, hsize_t n)
{
    const hsize_t one = 1, maxd = H5S_UNLIMITED;
    del(f, obj);
    hid_t s = H5Screate_simple(1, &n, &maxd), dcpl = H5Pcreate(H5P_DATASET_CREATE);
    cr_assert(H5Pset_chunk(dcpl, 1, &one) >= 0);
    hid_t d = H5Dcreate2(f, obj, H5T_STD_I32LE, s, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    cr_assert(d >= 0, "create %s", obj);
    H5Dclose(d);
    H5Pclose(dcpl);
    H5Sclose(s);
}

Test(fixture_reader, a_dataset_in_tiny_chunks_is_refused_for_libhdf5s_chunk_map)
{
    const hsize_t n = ((hsize_t)1 << 20) + 1;
    BROKEN("tiny.h5", FC_F32, 1, (put_tiny_chunks(f, C0 "/cu_seqlens_q", n),
                                  put_tiny_chunks(f, C0 "/cu_seqlens_k", n)));
    fc_err err;
    cr_expect_eq(read_budgeted(p, (uint64_t)1 << 30, &err), FC_EINVAL);
    cr_expect(strstr(err.msg, C0 "/cu_seqlens_q: libhdf5's map of its 1048577 chunks and its "
                              "values as int64 (about 4") &&
                  strstr(err.msg, "over the memory budget (--max-memory) of 1 GiB"),
              "%s", err.msg);
}

/* Compressed data that fits is read as written (chunks smaller than the dataset, the last one
 * partial), under a budget that holds the case and one chunk. */
Test(fixture_reader, compressed_chunks_within_the_budget_are_read_as_written)
{
    const char *p = write_base("deflated.h5", FC_F32, 0);
    hid_t f = open_rw(p);
    float *q = get_f32(f, C0 "/q", 160);
    const hsize_t qd[4] = {1, 2, 20, 4}, chunk[4] = {1, 1, 7, 4};
    put_deflated(f, C0 "/q", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 4, qd, chunk, q);
    H5Fclose(f);
    fix_case c;
    read_case0(p, &c);
    cr_expect(!memcmp(c.q, q, 160 * sizeof *q), "q read back as written");
    fix_check_result r;
    fc_err err;
    cr_assert_eq(fix_check_case(&c, FIX_BACKEND_REF, 1, &r, &err), FC_OK, "%s", err.msg);
    cr_expect(r.passed, "%s", r.detail);
    fix_case_free(&c);
    free(q);
}

/* ---- the estimate against the peak a hostile file really takes ----
 * Files made here (nothing large is committed): q of 160 values deflated in one chunk of 512 MiB
 * (written: inflating it is real), and a block mask of 2 rows of 2^25 slots in each list
 * (2 x 2^26 int32 ids kept, 2^26 int64 more while each list is read). Under
 * --max-memory 512M check refuses each with its estimate of the case's peak; under 4G it reads
 * and checks it, and the peak resident set of its children must be within 25% of that estimate.
 * A sanitizer build is skipped: its shadow memory is in the resident set, and it applies no
 * address-space limit. */

/* The base file's block mask (rows of 2 slots) widened to `width` slots, stored in chunks of
 * 1024 slots of which only each row's first is written: the file stays small, the slots past
 * the counts read as 0 (never looked at). */
static void put_wide_sparse_mask(hid_t f, hsize_t width)
{
    static const char *const lists[2] = {"kv_indices", "full_kv_indices"};
    for (int k = 0; k < 2; k++) {
        char obj[128];
        snprintf(obj, sizeof obj, BM "/%s", lists[k]);
        int32_t old[4];
        hid_t d = H5Dopen2(f, obj, H5P_DEFAULT);
        cr_assert(d >= 0 && H5Dread(d, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, old) >= 0);
        H5Dclose(d);
        del(f, obj);
        const hsize_t dims[4] = {1, 1, 2, width}, chunk[4] = {1, 1, 1, 1024};
        const hsize_t start[4] = {0, 0, 0, 0}, count[4] = {1, 1, 2, 2};
        hid_t s = H5Screate_simple(4, dims, NULL), m = H5Screate_simple(4, count, NULL);
        hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
        cr_assert(H5Pset_chunk(dcpl, 4, chunk) >= 0);
        d = H5Dcreate2(f, obj, H5T_STD_I32LE, s, H5P_DEFAULT, dcpl, H5P_DEFAULT);
        cr_assert(d >= 0 &&
                  H5Sselect_hyperslab(s, H5S_SELECT_SET, start, NULL, count, NULL) >= 0 &&
                  H5Dwrite(d, H5T_NATIVE_INT32, m, s, H5P_DEFAULT, old) >= 0, "%s", obj);
        H5Dclose(d);
        H5Pclose(dcpl);
        H5Sclose(m);
        H5Sclose(s);
    }
}

static void put_bomb(hid_t f)
{
    float *q = get_f32(f, C0 "/q", 160);
    const hsize_t qd[4] = {1, 2, 20, 4}, chunk[4] = {1, 2, (hsize_t)1 << 24, 4};
    put_deflated(f, C0 "/q", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 4, qd, chunk, q);
    free(q);
}

/* The peak resident set in bytes of what `flexcheck ARGS` started (itself and its children),
 * its status and output in *st, out, errs: run from a child of ours, whose RUSAGE_CHILDREN
 * holds that run alone. */
static uint64_t peak_of(const char *args, int *st, char *out, size_t outcap, char *errs,
                        size_t errcap)
{
    int fd[2];
    cr_assert_eq(pipe(fd), 0);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        close(fd[0]);
        int s = run_cli(args, out, outcap, errs, errcap);
        struct rusage ru;
        getrusage(RUSAGE_CHILDREN, &ru);
        long long v[2] = {s, (long long)ru.ru_maxrss};
        (void)!write(fd[1], v, sizeof v);
        _exit(0);
    }
    close(fd[1]);
    long long v[2] = {-1, 0};
    ssize_t n = read(fd[0], v, sizeof v);
    close(fd[0]);
    waitpid(pid, NULL, 0);
    cr_assert_eq(n, (ssize_t)sizeof v, "the measuring child said nothing");
    *st = (int)v[0];
    /* the child's captured output is in dir/stdout and dir/stderr */
    char p[128];
    snprintf(p, sizeof p, "%s/stdout", dir);
    FILE *fp = fopen(p, "r");
    out[fp ? fread(out, 1, outcap - 1, fp) : 0] = '\0';
    if (fp)
        fclose(fp);
    snprintf(p, sizeof p, "%s/stderr", dir);
    fp = fopen(p, "r");
    errs[fp ? fread(errs, 1, errcap - 1, fp) : 0] = '\0';
    if (fp)
        fclose(fp);
    return (uint64_t)v[1] * 1024; /* ru_maxrss is in KiB */
}

Test(fixture_cli, the_estimate_holds_the_peak_of_a_compressed_chunk_and_a_wide_mask,
     .timeout = 300)
{
#if defined(__SANITIZE_ADDRESS__)
    cr_skip_test("a sanitizer build's resident set holds its shadow memory");
#endif
    const char *files[2];
    {
        BROKEN("bomb.h5", FC_F32, 0, put_bomb(f));
        files[0] = p;
    }
    {
        BROKEN("widemask.h5", FC_F32, 0, put_wide_sparse_mask(f, (hsize_t)1 << 25));
        files[1] = p;
    }
    for (int k = 0; k < 2; k++) {
        struct stat sb;
        cr_assert_eq(stat(files[k], &sb), 0);
        cr_expect_lt(sb.st_size, 8 << 20, "%s: %lld bytes", files[k], (long long)sb.st_size);
        char out[8192], errs[4096], args[512];
        snprintf(args, sizeof args, "check --max-memory 512M '%s'", files[k]);
        int st = run_cli(args, out, sizeof out, errs, sizeof errs);
        const char *at = strstr(errs, "brings the case to about ");
        cr_assert(st == 2 && at && strstr(errs, "over the memory budget (--max-memory) of 0.5 GiB"),
                  "%s: status %d\n%s", files[k], st, errs);
        double est = strtod(at + strlen("brings the case to about "), NULL) * (1 << 30);
        snprintf(args, sizeof args, "check --max-memory 4G '%s'", files[k]);
        uint64_t peak = peak_of(args, &st, out, sizeof out, errs, sizeof errs);
        cr_expect_eq(st, 0, "%s: status %d\n%s%s", files[k], st, out, errs);
        cr_expect(fabs(est - (double)peak) <= 0.25 * (double)peak,
                  "%s: estimate %.0f MiB, peak %.0f MiB", files[k], est / (1 << 20),
                  (double)peak / (1 << 20));
        cr_log_info("%s: estimate %.1f MiB, peak resident %.1f MiB", files[k], est / (1 << 20),
                    (double)peak / (1 << 20));
    }
}

/* The chunk the budget holds but the child's address-space limit (the same figure, shared with
 * flexcheck's own libraries, about 0.3 GiB) cannot: libhdf5's allocation fails, and the line
 * says so with the budget, not "truncated file?" (what it used to say). */
Test(fixture_cli, a_chunk_the_address_space_limit_cannot_hold_names_the_budget)
{
#if defined(__SANITIZE_ADDRESS__)
    cr_skip_test("a sanitizer build applies no memory limit");
#endif
    BROKEN("bomb.h5", FC_F32, 0, put_bomb(f));
    char out[8192], errs[4096], args[512];
    snprintf(args, sizeof args, "check --max-memory 640M '%s'", p);
    int st = run_cli(args, out, sizeof out, errs, sizeof errs);
    cr_expect_eq(st, 2, "status %d\n%s%s", st, out, errs);
    cr_expect(count_lines(errs) == 1 && strstr(errs, C0 "/q: libhdf5 ran out of memory reading "
                                               "it (one inflated chunk is about 0.5 GiB): over "
                                               "the memory budget (--max-memory) of 0.625 GiB") &&
                  !strstr(errs, "truncated"), "%s", errs);
}
