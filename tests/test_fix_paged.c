/*
 * test_fix_paged.c - paged K/V in the fixture format (schema flexcheck-fixture-4,
 * docs/fixtures.md "Paged K/V"): a case paged by fix_paged_from_logical (pages in a seeded
 * order, stale pages of NaN and garbage, shared pages) reads back to the very K/V it was paged
 * from and to bitwise the oracle of the contiguous case; every refusal of a badly stored cache
 * or table names the file, the dataset and the value; the cache is held to --max-memory before
 * it is read.
 *
 * The logical K/V a read must give are the generator's own (fix_gen_case), and the table's
 * entries are followed here by hand, never through the gather under test.
 */
#include <criterion/criterion.h>
#include <hdf5.h>
#include <hdf5_hl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixtures/fix.h"
#include "fixtures/fix_h5.h"
#include "ref/ref.h"
#include "tests/test_fix_break.h"
#include "tests/test_tmpdir.h"

TEST_TMPDIR("fxpaged")

static void make_dir_quiet(void)
{
    make_dir();
    fix_h5_quiet();
}

TestSuite(fix_paged, .init = make_dir_quiet, .fini = remove_dir);

enum { B = 2, HQ = 4, HKV = 2, LQ = 20, LK = 45, D = 8, DV = 4, PS = 8 };

/* A dense case (packed: three sequences of 9, 0 and 36 keys), the contiguous original. */
static void gen(int packed, int share_first_page, fix_case *c)
{
    fix_gen_params gp = {.name = "c0", .dtype = FC_F16, .b = packed ? 1 : B, .hq = HQ,
                         .hkv = HKV, .lq = LQ, .lk = LK, .d = D, .dv = DV, .qb = 16, .kb = 16,
                         .seed = 5, .mask = {.causal = 1}};
    if (packed) {
        gp.nseq = 3;
        memcpy(gp.cu_q, (int32_t[]){0, 5, 5, LQ}, sizeof(int32_t) * 4);
        memcpy(gp.cu_k, (int32_t[]){0, 9, 9, LK}, sizeof(int32_t) * 4);
    }
    fc_err err;
    cr_assert_eq(fix_gen_case(&gp, c, &err), FC_OK, "%s", err.msg);
    if (!share_first_page)
        return;
    /* batch entry 1's first page := entry 0's (a shared prompt prefix), the oracle again */
    for (int32_t h = 0; h < HKV; h++) {
        memcpy(c->k + ((size_t)(HKV + h) * LK) * D, c->k + ((size_t)h * LK) * D,
               sizeof(float) * PS * D);
        memcpy(c->v + ((size_t)(HKV + h) * LK) * DV, c->v + ((size_t)h * LK) * DV,
               sizeof(float) * PS * DV);
    }
    cr_assert_eq(ref_attention_f64(&c->prob, c->q, c->k, c->v, c->out, c->lse, &err), FC_OK);
}

static const char *write_paged(const char *name, int packed, int share, fix_case *keep)
{
    const char *p = path_of(name);
    fix_case c;
    fc_err err;
    gen(packed, share, &c);
    cr_assert_eq(fix_paged_from_logical(&c, PS, 3, 77, &err), FC_OK, "%s", err.msg);
    cr_assert_eq(fix_write(p, NULL, &c, 1, 0, &err), FC_OK, "%s", err.msg);
    if (keep)
        *keep = c;
    else
        fix_case_free(&c);
    return p;
}

/* ---- round trips ---- */

static void round_trip(int packed)
{
    fix_case g, c;
    fix_file f;
    const char *p = write_paged(packed ? "rt_packed.h5" : "rt_dense.h5", packed, 0, &g);
    read_only_case(p, &f, &c);
    cr_expect_eq(f.schema_version, 4, "a paged file is version 4");
    cr_assert(c.paged, "read as paged");
    cr_expect_eq(c.pg.page_size, PS);
    cr_expect_eq(memcmp(c.k, g.k, attn_k_elems(&g.prob) * sizeof(float)), 0, "K gathered");
    cr_expect_eq(memcmp(c.v, g.v, attn_v_elems(&g.prob) * sizeof(float)), 0, "V gathered");
    /* the pages are out of order and stale pages hold NaN: the table was really followed */
    int in_order = 1, nan_pages = 0;
    for (int32_t j = 0; j < c.pg.max_pages && j < 3; j++)
        in_order &= c.pg.block_table[j] == j;
    for (int32_t pg = 0; pg < c.pg.num_pages; pg++)
        nan_pages += isnan(c.pg.k_cache[(size_t)pg * PS * HKV * D]);
    cr_expect(!in_order, "pages in a seeded order, not 0, 1, 2");
    cr_expect(nan_pages >= 1, "a stale page holds NaN");
    /* the oracle of the paged file is bitwise the contiguous case's */
    size_t no = attn_o_elems(&g.prob), nl = attn_lse_elems(&g.prob);
    double *o = malloc(no * sizeof *o), *l = malloc(nl * sizeof *l);
    fc_err err;
    cr_assert_eq(ref_attention_f64(&c.prob, c.q, c.k, c.v, o, l, &err), FC_OK);
    cr_expect_eq(memcmp(o, g.out, no * sizeof *o), 0, "out bitwise");
    cr_expect_eq(memcmp(l, g.lse, nl * sizeof *l), 0, "lse bitwise");
    fix_check_result r;
    cr_assert_eq(fix_check_case(&c, FIX_BACKEND_REF, 1, &r, &err), FC_OK, "%s", err.msg);
    cr_expect(r.passed && r.oracle_ok, "%s", r.detail);
    free(o);
    free(l);
    fix_case_free(&c);
    fix_case_free(&g);
    fix_close(&f);
}

Test(fix_paged, a_dense_paged_case_reads_back_its_logical_kv_and_oracle) { round_trip(0); }
Test(fix_paged, a_packed_paged_case_reads_back_its_logical_kv_and_oracle) { round_trip(1); }

Test(fix_paged, equal_prefix_pages_are_shared_and_read_by_both_sequences)
{
    fix_case g, c;
    fix_file f;
    const char *p = write_paged("shared.h5", 0, 1, &g);
    read_only_case(p, &f, &c);
    int32_t mp = c.pg.max_pages;
    cr_expect_eq(c.pg.block_table[0], c.pg.block_table[mp], "entry 0 of both rows: one page");
    cr_expect_neq(c.pg.block_table[1], c.pg.block_table[mp + 1], "page 1 differs");
    /* batch entry 1's key 3, head 1, followed by hand through the table */
    int32_t page = c.pg.block_table[mp + 0];
    const float *kc = c.pg.k_cache + (((size_t)page * PS + 3) * HKV + 1) * D;
    cr_expect_eq(memcmp(kc, g.k + ((size_t)(HKV + 1) * LK + 3) * D, sizeof(float) * D), 0);
    cr_expect_eq(memcmp(c.k, g.k, attn_k_elems(&g.prob) * sizeof(float)), 0);
    fix_case_free(&c);
    fix_case_free(&g);
    fix_close(&f);
}

/* ---- refusals ---- */

#define C0 "/cases/c0"

/* The file's block table, read by hand; entry (r, j) replaced by v. */
static void put_entry(hid_t f, int32_t r, int32_t j, int32_t v)
{
    hid_t d = H5Dopen2(f, C0 "/block_table", H5P_DEFAULT);
    hid_t s = H5Dget_space(d);
    hsize_t dims[2];
    H5Sget_simple_extent_dims(s, dims, NULL);
    int32_t *t = malloc(sizeof(int32_t) * dims[0] * dims[1]);
    cr_assert(H5Dread(d, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, t) >= 0);
    t[(size_t)r * dims[1] + (size_t)j] = v;
    H5Sclose(s);
    H5Dclose(d);
    put_i32(f, C0 "/block_table", 2, dims, t);
    free(t);
}

/* Page p of the file's table entry (r, j). */
static int32_t entry(hid_t f, int32_t r, int32_t j)
{
    int32_t t[B * 16];
    hid_t d = H5Dopen2(f, C0 "/block_table", H5P_DEFAULT);
    cr_assert(H5Dread(d, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, t) >= 0);
    hid_t s = H5Dget_space(d);
    hsize_t dims[2];
    H5Sget_simple_extent_dims(s, dims, NULL);
    H5Sclose(s);
    H5Dclose(d);
    return t[(size_t)r * dims[1] + (size_t)j];
}

static char nan_msg[160];
static void v3_schema(hid_t f) { put_attr_str(f, "/", "schema", FIX_SCHEMA_XTERMS); }
static void both_forms(hid_t f)
{
    static float z[B * HKV * LK * D];
    put_f32(f, C0 "/k", 4, (hsize_t[]){B, HKV, LK, D}, z);
}
static void no_table(hid_t f) { del(f, C0 "/block_table"); }
static void no_kv(hid_t f)
{
    del(f, C0 "/block_table");
    del(f, C0 "/k_cache");
    del(f, C0 "/v_cache");
}
static void no_kv_len(hid_t f) { drop_attr(f, C0, "kv_len"); }
static void entry_out_of_range(hid_t f) { put_entry(f, 1, 2, 999); }
static void entry_negative(hid_t f) { put_entry(f, 0, 5, -1); }
static void table_narrow(hid_t f)
{
    int32_t t[B * 5] = {0};
    put_i32(f, C0 "/block_table", 2, (hsize_t[]){B, 5}, t);
}
static void table_rows(hid_t f)
{
    int32_t t[3 * 9] = {0};
    put_i32(f, C0 "/block_table", 2, (hsize_t[]){3, 9}, t);
}
static void table_float(hid_t f)
{
    static float t[B * 9];
    put_f32(f, C0 "/block_table", 2, (hsize_t[]){B, 9}, t);
}
/* NaN at element [page][2][1][3] of the page sequence 1 reads first */
static void nan_in_read_page(hid_t f)
{
    int32_t page = entry(f, 1, 0);
    hid_t d = H5Dopen2(f, C0 "/k_cache", H5P_DEFAULT);
    hid_t s = H5Dget_space(d);
    hsize_t dims[4];
    H5Sget_simple_extent_dims(s, dims, NULL);
    size_t n = (size_t)(dims[0] * dims[1] * dims[2] * dims[3]);
    float *x = malloc(sizeof(float) * n);
    cr_assert(H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, x) >= 0);
    H5Sclose(s);
    H5Dclose(d);
    x[(((size_t)page * PS + 2) * HKV + 1) * D + 3] = NAN;
    put_ds(f, C0 "/k_cache", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 4, dims, x);
    snprintf(nan_msg, sizeof nan_msg, "k_cache[%d][2][1][3] = nan is not finite (a page sequence "
             "1 reads: its key 2, through block_table[1][0])", (int)page);
    free(x);
}
static void v_cache_pages(hid_t f)
{
    static float z[3 * PS * HKV * DV];
    put_f32(f, C0 "/v_cache", 4, (hsize_t[]){3, PS, HKV, DV}, z);
}
static void k_cache_d(hid_t f)
{
    static float z[30 * PS * HKV * 5];
    put_f32(f, C0 "/k_cache", 4, (hsize_t[]){30, PS, HKV, 5}, z);
}
static void page_size_0(hid_t f)
{
    put_f32(f, C0 "/k_cache", 4, (hsize_t[]){4, 0, HKV, D}, NULL);
}

static const fix_refusal refusals[] = {
    {"v3", v3_schema, {C0 ": dataset 'k_cache': paged K/V needs schema 'flexcheck-fixture-4' "
                       "(the file says version 3)"}},
    {"both", both_forms, {C0 ": both 'k' and 'k_cache': give K/V in one form"}},
    {"no_table", no_table, {C0 ": paged K/V without 'block_table'"}},
    {"no_kv", no_kv, {C0 ": no K/V: give 'k' and 'v', or the paged 'k_cache', 'v_cache' and "
                      "'block_table'"}},
    {"no_kv_len", no_kv_len, {C0 ": paged K/V without attribute 'kv_len'"}},
    {"entry_999", entry_out_of_range, {C0 ": block_table[1][2] = 999: sequence 1 reads its keys "
                                       "from 16 on through it", "[0, num_pages = "}},
    {"entry_neg", entry_negative, {C0 ": block_table[0][5] = -1: sequence 0 reads its keys "
                                   "from 40 on"}},
    {"narrow", table_narrow, {C0 "/block_table: sequence 0 holds 45 keys: 6 pages of 8, the "
                              "table's rows have 5 entries"}},
    {"rows", table_rows, {C0 "/block_table: 3 rows: one per sequence, 2 (the batch entries)"}},
    {"table_float", table_float, {C0 "/block_table: stored as", "float"}},
    {"nan", nan_in_read_page, {C0 ": ", nan_msg}},
    {"v_pages", v_cache_pages, {C0 "/v_cache: dim 0 is 3", "must be k_cache's"}},
    {"k_d", k_cache_d, {C0 "/k_cache: head dim (dim 3) 5: must be q's D = 8"}},
    {"ps0", page_size_0, {C0 "/k_cache: page size (dim 1) 0"}},
};

static const char *write_valid(const char *name)
{
    return write_paged(name, 0, 0, NULL);
}

Test(fix_paged, every_badly_stored_cache_or_table_is_refused_naming_it)
{
    expect_refusals(write_valid, refusals, sizeof refusals / sizeof refusals[0]);
}

Test(fix_paged, entries_past_a_sequences_pages_and_unused_pages_are_never_read)
{
    const char *p = write_paged("pad.h5", 1, 0, NULL);
    hid_t f = open_rw(p);
    /* sequence 1 is empty: its whole row is padding; sequence 0 (9 keys) reads 2 pages */
    put_entry(f, 1, 0, -7);
    put_entry(f, 0, 2, 1 << 30);
    H5Fclose(f);
    expect_accepted(p);
}

/* ---- budget ---- */

Test(fix_paged, a_cache_over_the_memory_budget_is_refused_before_it_is_read)
{
    /* 2^21 pages of one key: 1 GiB of float32 k_cache, declared by a compressed dataset of a
     * few KB; the case's own K/V are tiny */
    const char *p = write_paged("big.h5", 0, 0, NULL);
    hid_t f = open_rw(p);
    const char *names[2] = {C0 "/k_cache", C0 "/v_cache"};
    for (int i = 0; i < 2; i++) {
        del(f, names[i]);
        hsize_t last = i ? DV : D;
        hsize_t dims[4] = {(hsize_t)1 << 21, PS, HKV, last}, chunk[4] = {4096, PS, HKV, last};
        hid_t sp = H5Screate_simple(4, dims, NULL), pl = H5Pcreate(H5P_DATASET_CREATE);
        H5Pset_chunk(pl, 4, chunk);
        H5Pset_deflate(pl, 1);
        hid_t d = H5Dcreate2(f, names[i], H5T_IEEE_F32LE, sp, H5P_DEFAULT, pl, H5P_DEFAULT);
        cr_assert(d >= 0);
        H5Dclose(d);
        H5Pclose(pl);
        H5Sclose(sp);
    }
    H5Fclose(f);
    fix_file ff;
    fc_err err;
    cr_assert_eq(fix_open(p, &ff, &err), FC_OK, "%s", err.msg);
    ff.budget.max_bytes = (uint64_t)64 << 20;
    fc_status st = fix_validate(&ff, &err);
    fix_close(&ff);
    cr_assert_neq(st, FC_OK, "a 1 GiB cache under a 64 MiB budget was read");
    cr_expect(strstr(err.msg, C0 "/k_cache: the paged cache (k_cache [2097152, 8, 2, 8]") &&
                  strstr(err.msg, "over the memory budget (--max-memory)"),
              "%s", err.msg);
}
