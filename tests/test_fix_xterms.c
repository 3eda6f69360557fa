/*
 * test_fix_xterms.c - the explicit mask and bias in the fixture format (schema
 * flexcheck-fixture-3, docs/fixtures.md; masks/xterms.h): written by our writer (gen) and read
 * back bit for bit with the oracle computed over them, filled by `fill`, the compact form
 * (per-row intervals) read as the bits it states, every refusal of a badly stored term naming
 * the file, dataset and value, the memory budget charged with a term's size in memory before
 * anything of it is read (a compressed dataset of a few KB may declare gigabytes), and a
 * sample judged against its own rows of the mask.
 *
 * The masks are defined here by their predicates (prefix-LM, a seeded random mask) and checked
 * key by key through xterms.h's accessor, never through the reader under test.
 */
#include <criterion/criterion.h>
#include <hdf5.h>
#include <hdf5_hl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "check/repro.h"
#include "fixtures/fix.h"
#include "fixtures/fix_h5.h"
#include "tests/test_fix_break.h"
#include "tests/test_tmpdir.h"

TEST_TMPDIR("fxterms")

/* HDF5's own error printer off: the tests read the one line we print. */
static void make_dir_quiet(void)
{
    make_dir();
    fix_h5_quiet();
}

TestSuite(fix_xterms, .init = make_dir_quiet, .fini = remove_dir);

/* ---- the terms, from their definitions ---- */

enum { B = 2, HQ = 2, LQ = 24, LK = 40, RB = (LK + 7) / 8 };
static const int32_t prefix_len[B] = {5, 17}; /* per batch entry: Bm = B */
static const float alibi_slope[HQ] = {0.5f, 0.25f}; /* per head: Hm = Hq */

/* Prefix-LM over stored tokens, bottom-right aligned (query tq sits at key position
 * tq + Lk - Lq): the first P keys seen by every query, causal after them. */
static int prefix_lm(int32_t b, int32_t tq, int32_t tk)
{
    return tk < prefix_len[b] || tk <= tq + (LK - LQ);
}

/* The allowed keys of a prefix-LM row are one interval: [0, max(P, tq + Lk - Lq + 1)). */
static int32_t prefix_hi(int32_t b, int32_t tq)
{
    int32_t c = tq + (LK - LQ) + 1;
    return c > prefix_len[b] ? c : prefix_len[b];
}

static uint8_t mask_bits[B * LQ * RB];
static float bias_vals[HQ * LQ * LK];

/* mask_bits [B, 1, LQ, RB] set bit by bit from the predicate (xterms.h's layout: key tk is bit
 * tk & 7 of byte tk >> 3); bias_vals [1, HQ, LQ, LK] ALiBi, -slope * |distance|. */
static void make_terms(void)
{
    memset(mask_bits, 0, sizeof mask_bits);
    for (int32_t b = 0; b < B; b++)
        for (int32_t q = 0; q < LQ; q++)
            for (int32_t k = 0; k < LK; k++)
                if (prefix_lm(b, q, k))
                    mask_bits[(b * LQ + q) * RB + k / 8] |= (uint8_t)(1u << (k % 8));
    for (int32_t h = 0; h < HQ; h++)
        for (int32_t q = 0; q < LQ; q++)
            for (int32_t k = 0; k < LK; k++)
                bias_vals[(h * LQ + q) * LK + k] =
                    -alibi_slope[h] * (float)abs(q + (LK - LQ) - k);
}

static fix_gen_params base_params(int with_terms)
{
    make_terms();
    fix_gen_params gp = {.name = "c0", .dtype = FC_F32, .b = B, .hq = HQ, .hkv = 1, .lq = LQ,
                         .lk = LK, .d = 8, .dv = 8, .qb = 16, .kb = 16, .seed = 11};
    if (with_terms) {
        gp.xmask = (attn_xmask){mask_bits, B, 1, 0, 0};
        gp.xbias = (attn_xbias){bias_vals, 1, HQ, 0, 0};
    }
    return gp;
}

static const char *write_base(const char *name, fix_case *keep)
{
    const char *p = path_of(name);
    fix_gen_params gp = base_params(1);
    fc_err err;
    fix_case c;
    cr_assert_eq(fix_gen_case(&gp, &c, &err), FC_OK, "%s", err.msg);
    cr_assert_eq(fix_write(p, NULL, &c, 1, 0, &err), FC_OK, "%s", err.msg);
    if (keep)
        *keep = c;
    else
        fix_case_free(&c);
    return p;
}

/* ---- round trips ---- */

Test(fix_xterms, gen_writes_schema_3_and_the_terms_read_back_bit_for_bit)
{
    fix_case g;
    const char *p = write_base("rt.h5", &g);
    fix_file f;
    fix_case c;
    read_only_case(p, &f, &c);
    cr_expect_eq(f.schema_version, 3, "a file with explicit terms is version 3");
    const attn_xmask *m = &c.prob.xmask;
    const attn_xbias *x = &c.prob.xbias;
    cr_assert(m->bits && x->vals, "both terms read");
    cr_expect(m->bm == B && m->hm == 1 && m->lq == LQ && m->lk == LK, "mask dims");
    cr_expect(x->bm == 1 && x->hm == HQ && x->lq == LQ && x->lk == LK, "bias dims");
    for (int32_t b = 0; b < B; b++)
        for (int32_t q = 0; q < LQ; q++)
            for (int32_t k = 0; k < LK; k++)
                cr_assert_eq(xmask_bit(xmask_row(*m, b, 1, q), k), prefix_lm(b, q, k),
                             "mask bit (b %d, q %d, k %d)", b, q, k);
    cr_expect(memcmp(x->vals, bias_vals, sizeof bias_vals) == 0, "bias values");
    size_t no = attn_o_elems(&c.prob), nl = attn_lse_elems(&c.prob);
    cr_expect(memcmp(c.out, g.out, no * sizeof *c.out) == 0, "out is gen's oracle");
    cr_expect(memcmp(c.lse, g.lse, nl * sizeof *c.lse) == 0, "lse is gen's oracle");
    fix_check_result r;
    fc_err err;
    cr_assert_eq(fix_check_case(&c, FIX_BACKEND_REF, 0, &r, &err), FC_OK, "%s", err.msg);
    cr_expect(r.passed && r.oracle_ok, "the stored oracle is confirmed: %s", r.detail);
    /* the terms are in that oracle: the same inputs without them give another one */
    fix_gen_params plain = base_params(0);
    fix_case np;
    cr_assert_eq(fix_gen_case(&plain, &np, &err), FC_OK, "%s", err.msg);
    cr_expect(memcmp(np.out, g.out, no * sizeof *g.out) != 0, "the terms change the oracle");
    fix_case_free(&np);
    fix_case_free(&c);
    fix_case_free(&g);
    fix_close(&f);
}

Test(fix_xterms, a_file_without_terms_stays_version_1)
{
    const char *p = path_of("plain.h5");
    fix_gen_params gp = base_params(0);
    fc_err err;
    cr_assert_eq(fix_gen_file(p, &gp, 1, 0, &err), FC_OK, "%s", err.msg);
    fix_file f;
    fix_case c;
    read_only_case(p, &f, &c);
    cr_expect_eq(f.schema_version, 1);
    cr_expect(!c.prob.xmask.bits && !c.prob.xbias.vals, "no terms");
    fix_case_free(&c);
    fix_close(&f);
}

/* out/lse deleted, as an engine's dump has none */
static void strip_oracle(const char *p)
{
    hid_t f = open_rw(p);
    del(f, "/cases/c0/out");
    del(f, "/cases/c0/lse");
    H5Fclose(f);
}

Test(fix_xterms, fill_computes_the_oracle_over_the_terms_and_keeps_them)
{
    fix_case g;
    const char *in = write_base("dump.h5", &g), *out = path_of("filled.h5");
    strip_oracle(in);
    fix_fill_result fr;
    fc_err err;
    cr_assert_eq(fix_fill(in, out, 0, NULL, &fr, &err), FC_OK, "%s", err.msg);
    cr_expect_eq(fr.filled, 1);
    fix_file f;
    fix_case c;
    read_only_case(out, &f, &c);
    cr_expect_eq(f.schema_version, 3);
    cr_assert(c.prob.xmask.bits && c.prob.xbias.vals, "the terms are kept");
    cr_expect(memcmp(c.xmask_bits, mask_bits, sizeof mask_bits) == 0, "mask kept");
    cr_expect(memcmp(c.out, g.out, attn_o_elems(&c.prob) * sizeof *c.out) == 0,
              "fill's out is gen's oracle over the same terms");
    cr_expect(memcmp(c.lse, g.lse, attn_lse_elems(&c.prob) * sizeof *c.lse) == 0, "lse");
    fix_case_free(&c);
    fix_case_free(&g);
    fix_close(&f);
}

/* ---- the compact form: intervals ---- */

/* Replaces the case's packed mask by its intervals [B, 1, LQ, 2] (or by `iv` when given). */
static void to_intervals(const char *p, const int32_t *iv)
{
    int32_t own[B * LQ * 2];
    for (int32_t b = 0; b < B; b++)
        for (int32_t q = 0; q < LQ; q++) {
            own[(b * LQ + q) * 2] = 0;
            own[(b * LQ + q) * 2 + 1] = prefix_hi(b, q);
        }
    hid_t f = open_rw(p);
    del(f, "/cases/c0/mask");
    hsize_t d[4] = {B, 1, LQ, 2};
    put_i32(f, "/cases/c0/mask_intervals", 4, d, iv ? iv : own);
    H5Fclose(f);
}

Test(fix_xterms, intervals_read_as_the_bits_they_state_and_judge_alike)
{
    fix_case g;
    const char *p = write_base("iv.h5", &g);
    to_intervals(p, NULL);
    fix_file f;
    fix_case c;
    read_only_case(p, &f, &c);
    const attn_xmask *m = &c.prob.xmask;
    cr_assert(m->bits && m->bm == B && m->hm == 1, "the mask, [B, 1, ...]");
    for (int32_t b = 0; b < B; b++)
        for (int32_t q = 0; q < LQ; q++)
            for (int32_t k = 0; k < LK; k++)
                cr_assert_eq(xmask_bit(xmask_row(*m, b, 0, q), k), prefix_lm(b, q, k),
                             "interval bit (b %d, q %d, k %d)", b, q, k);
    /* the oracle stored from the packed bits is the oracle of the intervals too */
    fix_check_result r;
    fc_err err;
    cr_assert_eq(fix_check_case(&c, FIX_BACKEND_REF, 0, &r, &err), FC_OK, "%s", err.msg);
    cr_expect(r.passed && r.oracle_ok, "%s", r.detail);
    fix_case_free(&c);
    fix_case_free(&g);
    fix_close(&f);
}

/* ---- refusals ---- */

#define C0 "/cases/c0"

static void put_u8(hid_t f, const char *obj, const hsize_t *dims, hid_t ftype)
{
    size_t n = (size_t)(dims[0] * dims[1] * dims[2] * dims[3]);
    uint8_t *z = calloc(n + 1, 8); /* room for any integer type */
    put_ds(f, obj, ftype, ftype, 4, dims, z);
    free(z);
    put_attr_str(f, obj, "bitorder", FIX_MASK_BITORDER);
}

static void v2_with_mask(hid_t f) { put_attr_str(f, "/", "schema", FIX_SCHEMA_TERMS); }
static void v1_with_bias(hid_t f)
{
    put_attr_str(f, "/", "schema", FIX_SCHEMA);
    del(f, C0 "/mask");
}
static void mask_bm_3(hid_t f) { put_u8(f, C0 "/mask", (hsize_t[]){3, 1, LQ, RB}, H5T_STD_U8LE); }
static void mask_hm_3(hid_t f) { put_u8(f, C0 "/mask", (hsize_t[]){1, 3, LQ, RB}, H5T_STD_U8LE); }
static void mask_lq(hid_t f) { put_u8(f, C0 "/mask", (hsize_t[]){B, 1, LQ - 1, RB}, H5T_STD_U8LE); }
static void mask_bytes_per_key(hid_t f)
{
    put_u8(f, C0 "/mask", (hsize_t[]){B, 1, LQ, LK}, H5T_STD_U8LE);
}
static void mask_int8(hid_t f) { put_u8(f, C0 "/mask", (hsize_t[]){B, 1, LQ, RB}, H5T_STD_I8LE); }
static void mask_u16(hid_t f) { put_u8(f, C0 "/mask", (hsize_t[]){B, 1, LQ, RB}, H5T_STD_U16LE); }
static void mask_no_bitorder(hid_t f) { drop_attr(f, C0 "/mask", "bitorder"); }
static void mask_big_endian_bits(hid_t f) { put_attr_str(f, C0 "/mask", "bitorder", "big"); }
static void mask_and_intervals(hid_t f)
{
    int32_t iv[B * LQ * 2] = {0};
    put_i32(f, C0 "/mask_intervals", 4, (hsize_t[]){B, 1, LQ, 2}, iv);
}
static void bias_f64(hid_t f)
{
    double z[HQ * LQ * LK] = {0};
    put_ds(f, C0 "/bias", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 4, (hsize_t[]){1, HQ, LQ, LK}, z);
}
static void bias_short_rows(hid_t f)
{
    put_f32(f, C0 "/bias", 4, (hsize_t[]){1, HQ, LQ, LK - 1}, bias_vals);
}
/* bias_vals with one value replaced at (0, 1, 3, 5) */
static void bias_with(hid_t f, float v)
{
    static float x[HQ * LQ * LK];
    memcpy(x, bias_vals, sizeof x);
    x[(1 * LQ + 3) * LK + 5] = v;
    put_f32(f, C0 "/bias", 4, (hsize_t[]){1, HQ, LQ, LK}, x);
}
static void bias_nan(hid_t f) { bias_with(f, NAN); }
static void bias_minus_inf(hid_t f) { bias_with(f, -INFINITY); }
static void bias_2e6(hid_t f) { bias_with(f, 2e6f); }

static const fix_refusal refusals[] = {
    {"v2_mask", v2_with_mask, {C0 ": dataset 'mask': an explicit mask needs schema "
                               "'flexcheck-fixture-3' (the file says 'flexcheck-fixture-2')"}},
    {"v1_bias", v1_with_bias, {"dataset 'bias': an explicit bias needs schema",
                               "(the file says 'flexcheck-fixture-1')"}},
    {"mask_bm", mask_bm_3, {C0 "/mask: leading dim 3: must be 1", "or B = 2"}},
    {"mask_hm", mask_hm_3, {C0 "/mask: head dim 3: must be 1", "or Hq = 2"}},
    {"mask_lq", mask_lq, {C0 "/mask: 23 query rows: must be Lq = 24"}},
    {"mask_unpacked", mask_bytes_per_key,
     {C0 "/mask: last dim 40: must be ceil(Lk / 8) bytes of packed bits = 5"}},
    {"mask_int8", mask_int8, {C0 "/mask: stored as a 1-byte signed integer: must be uint8"}},
    {"mask_u16", mask_u16, {C0 "/mask: stored as a 2-byte unsigned integer: must be uint8"}},
    {"mask_bitorder", mask_no_bitorder, {C0 "/mask: missing attribute 'bitorder'", "'little'"}},
    {"mask_big", mask_big_endian_bits, {C0 "/mask: attribute 'bitorder' = 'big': must be "
                                        "'little'"}},
    {"mask_twice", mask_and_intervals, {C0 ": both 'mask' and 'mask_intervals'"}},
    {"bias_f64", bias_f64, {C0 "/bias: stored as float64: must be float32"}},
    {"bias_rows", bias_short_rows, {C0 "/bias: last dim 39: must be Lk = 40"}},
    {"bias_nan", bias_nan, {C0 "/bias: explicit bias at (b, h, q, k) = (0, 1, 3, 5) is nan",
                            "must be finite"}},
    {"bias_inf", bias_minus_inf, {C0 "/bias: explicit bias at (b, h, q, k) = (0, 1, 3, 5) is "
                                  "-inf"}},
    {"bias_big", bias_2e6, {C0 "/bias: explicit bias at (b, h, q, k) = (0, 1, 3, 5) is 2e+06",
                            "|bias| <= 1e+06"}},
};

static const char *write_valid(const char *name)
{
    return write_base(name, NULL);
}

Test(fix_xterms, every_badly_stored_term_is_refused_naming_dataset_and_value)
{
    expect_refusals(write_valid, refusals, sizeof refusals / sizeof refusals[0]);
}

static const struct iv_refusal {
    int32_t lo, hi;
    const char *what;
} iv_refusals[] = {
    {0, LK + 1, C0 "/mask_intervals: row [1][0][3]: [lo, hi) = [0, 41): must satisfy 0 <= lo "
                "<= hi <= Lk = 40"},
    {7, 3, C0 "/mask_intervals: row [1][0][3]: [lo, hi) = [7, 3)"},
    {-1, 3, C0 "/mask_intervals: row [1][0][3]: [lo, hi) = [-1, 3)"},
};

Test(fix_xterms, an_interval_out_of_its_row_is_refused_naming_the_row)
{
    for (size_t i = 0; i < sizeof iv_refusals / sizeof iv_refusals[0]; i++) {
        char name[64];
        snprintf(name, sizeof name, "iv_bad%zu.h5", i);
        const char *p = write_base(name, NULL);
        int32_t iv[B * LQ * 2];
        for (int32_t r = 0; r < B * LQ; r++) {
            iv[2 * r] = 0;
            iv[2 * r + 1] = 1;
        }
        iv[(1 * LQ + 3) * 2] = iv_refusals[i].lo;
        iv[(1 * LQ + 3) * 2 + 1] = iv_refusals[i].hi;
        to_intervals(p, iv);
        expect_rejected(p, iv_refusals[i].what);
    }
}

Test(fix_xterms, lo_equal_to_hi_is_a_row_with_no_key)
{
    const char *p = write_base("iv_empty.h5", NULL);
    int32_t iv[B * LQ * 2];
    for (int32_t r = 0; r < B * LQ; r++) {
        iv[2 * r] = r % 7;
        iv[2 * r + 1] = r % 7 + (r % 3 ? 9 : 0); /* every third row [lo, lo): empty */
    }
    to_intervals(p, iv);
    fix_file f;
    fix_case c;
    read_only_case(p, &f, &c); /* the stored oracle is the packed mask's: not judged here */
    for (int32_t r = 0; r < B * LQ; r++)
        for (int32_t k = 0; k < LK; k++)
            cr_assert_eq(xmask_bit(c.xmask_bits + (size_t)r * RB, k),
                         k >= iv[2 * r] && k < iv[2 * r + 1], "row %d key %d", r, k);
    fix_case_free(&c);
    fix_close(&f);
}

/* ---- budgets ---- */

enum { BIG = 65536 };

/* A dump (no out/lse) of one head of BIG queries and keys, D = 1: a few hundred KB of inputs,
 * as schema 3. */
static const char *write_long(const char *name)
{
    const char *p = path_of(name);
    fix_gen_params gp = {.name = "c0", .dtype = FC_F32, .b = 1, .hq = 1, .hkv = 1, .lq = BIG,
                         .lk = BIG, .d = 1, .dv = 1, .seed = 3, .no_oracle = 1};
    fc_err err;
    cr_assert_eq(fix_gen_file(p, &gp, 1, 0, &err), FC_OK, "%s", err.msg);
    hid_t f = open_rw(p);
    put_attr_str(f, "/", "schema", FIX_SCHEMA_XTERMS);
    H5Fclose(f);
    return p;
}

/* Dataset obj of `dims`, chunked [1, 1, 256, last] and gzip-compressed, never written: every
 * chunk is the fill value, so the file holds next to nothing of it. */
static void put_compressed(const char *p, const char *obj, hid_t type, const hsize_t *dims)
{
    hid_t f = open_rw(p);
    hid_t s = H5Screate_simple(4, dims, NULL), dcpl = H5Pcreate(H5P_DATASET_CREATE);
    hsize_t chunk[4] = {1, 1, 256, dims[3]};
    cr_assert(H5Pset_chunk(dcpl, 4, chunk) >= 0 && H5Pset_deflate(dcpl, 9) >= 0, "gzip");
    hid_t d = H5Dcreate2(f, obj, type, s, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    cr_assert(d >= 0, "create %s", obj);
    H5Dclose(d);
    H5Pclose(dcpl);
    H5Sclose(s);
    if (type == H5T_STD_U8LE)
        put_attr_str(f, obj, "bitorder", FIX_MASK_BITORDER);
    H5Fclose(f);
}

/* Validates p under a memory budget of mib MiB: FC_OK, or the refusal in err. */
static fc_status validate_under(const char *p, uint64_t mib, fc_err *err)
{
    fix_file f;
    fc_status st = fix_open(p, &f, err);
    if (st)
        return st;
    f.oracle_optional = 1;
    f.budget.max_bytes = mib << 20;
    st = fix_validate(&f, err);
    fix_close(&f);
    return st;
}

static long file_size(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0 ? (long)sb.st_size : -1;
}

Test(fix_xterms, a_compressed_mask_declaring_gigabytes_is_refused_before_it_is_read)
{
    const char *p = write_long("gz.h5");
    fc_err err;
    /* the case alone fits 256 MiB (so the refusal below is the mask's) */
    cr_assert_eq(validate_under(p, 256, &err), FC_OK, "%s", err.msg);
    put_compressed(p, C0 "/mask", H5T_STD_U8LE, (hsize_t[]){1, 1, BIG, BIG / 8});
    cr_expect_lt(file_size(p), 4L << 20, "a small file: %ld bytes", file_size(p));
    cr_assert_neq(validate_under(p, 256, &err), FC_OK, "a 512 MiB mask in a 256 MiB budget");
    cr_expect(strstr(err.msg, C0 "/mask: [1, 1, 65536, 8192] packed bits: about 0.5 GiB in "
                     "memory whatever its storage, over the memory budget (--max-memory) of "
                     "0.25 GiB"), "names the dataset, its size, the budget and the flag: %s",
              err.msg);
}

Test(fix_xterms, intervals_are_charged_as_the_bits_they_expand_to)
{
    const char *p = write_long("ivbig.h5");
    put_compressed(p, C0 "/mask_intervals", H5T_STD_I32LE, (hsize_t[]){1, 1, BIG, 2});
    fc_err err;
    cr_assert_neq(validate_under(p, 256, &err), FC_OK, "512 KB of intervals state 512 MiB");
    cr_expect(strstr(err.msg, C0 "/mask_intervals: [1, 1, 65536, 2] as packed bits: about 0.5 "
                     "GiB"), "%s", err.msg);
}

Test(fix_xterms, a_term_that_fits_alone_is_counted_with_the_case)
{
    /* the case's own estimate is about 170 MB (mostly the reference's scratch): with the
     * 512 MiB mask about 0.63 GiB, over 600 MiB, which the mask alone is not */
    const char *p = write_long("sum.h5");
    put_compressed(p, C0 "/mask", H5T_STD_U8LE, (hsize_t[]){1, 1, BIG, BIG / 8});
    fc_err err;
    cr_assert_neq(validate_under(p, 600, &err), FC_OK, "mask and case together: over");
    cr_expect(strstr(err.msg, "of which the explicit mask [1, 1, 65536, 65536] (bit-packed) "
                     "0.5 GiB), over the memory budget (--max-memory) of 0.586 GiB"), "%s",
              err.msg);
    cr_expect(!strstr(err.msg, "whatever its storage"), "not the mask alone: %s", err.msg);
}

/* ---- a sample ---- */

enum { SL = 512, SH = 2, SRB = SL / 8, SN = 64 };

Test(fix_xterms, a_sample_is_judged_against_its_own_rows_of_the_mask)
{
    /* a seeded random mask, one per head: every row differs, so a sample read against the
     * wrong rows of it would compute other outputs */
    static uint8_t bits[SH * SL * SRB];
    fix_rng rng;
    fix_rng_seed(&rng, 99);
    for (size_t i = 0; i < sizeof bits; i++)
        bits[i] = (uint8_t)fix_rng_u64(&rng);
    fix_gen_params gp = {.name = "c0", .dtype = FC_F32, .b = 1, .hq = SH, .hkv = 1, .lq = SL,
                         .lk = SL, .d = 8, .dv = 8, .seed = 5,
                         .xmask = {bits, 1, SH, 0, 0}};
    fix_case g;
    fc_err err;
    const char *p = path_of("sample.h5");
    cr_assert_eq(fix_gen_case(&gp, &g, &err), FC_OK, "%s", err.msg);
    cr_assert_eq(fix_write(p, NULL, &g, 1, 0, &err), FC_OK, "%s", err.msg);
    fix_file f;
    fix_case c;
    cr_assert_eq(fix_open(p, &f, &err), FC_OK, "%s", err.msg);
    f.budget.rows = SN;
    f.budget.rows_seed = 1;
    cr_assert_eq(fix_read_case(&f, 0, &c, &err), FC_OK, "%s", err.msg);
    cr_assert(c.sample.tq && c.sample.n == SN, "a sample of %d tokens", SN);
    cr_assert(c.prob.xmask.bits && c.prob.xmask.lq == SL, "every row of the mask is held");
    cr_expect(memcmp(c.xmask_bits, bits, sizeof bits) == 0, "the mask as written");
    for (int32_t h = 0; h < SH; h++) /* the sample's stored rows are the oracle's rows */
        for (int32_t i = 0; i < SN; i++)
            cr_assert(memcmp(c.out + ((size_t)h * SN + (size_t)i) * 8,
                             g.out + ((size_t)h * SL + (size_t)c.sample.tq[i]) * 8,
                             8 * sizeof *c.out) == 0, "head %d token %d", h, c.sample.tq[i]);
    fix_check_result r;
    cr_assert_eq(fix_check_case(&c, FIX_BACKEND_REF, 0, &r, &err), FC_OK, "%s", err.msg);
    cr_expect(r.passed && r.oracle_ok, "the sample's oracle is the mask's: %s", r.detail);
    fix_case_free(&c);
    fix_case_free(&g);
    fix_close(&f);
}

/* ---- a stored block mask, held to the families AND the explicit mask ---- */

/* The base case (no family: every key allowed by the families; the prefix-LM explicit mask)
 * with its stored block mask replaced by `families_only` ? the slow builder's over the
 * families alone : gen's (the slow builder's over both), read back and checked. */
static void check_stored_bmask(const char *name, int families_only, int exact_blocks,
                               fix_check_result *r)
{
    fix_case g;
    const char *p = path_of(name);
    fix_gen_params gp = base_params(1);
    gp.with_bmask = 1;
    fc_err err;
    cr_assert_eq(fix_gen_case(&gp, &g, &err), FC_OK, "%s", err.msg);
    cr_assert(g.has_bmask, "gen stores a block mask");
    if (families_only) {
        bmask_free(&g.bm);
        cr_assert_eq(bmask_build(&g.bm, BMASK_SLOW, g.prob.mask, &g.prob.seq, gp.qb, gp.kb,
                                 &err), FC_OK, "%s", err.msg);
    }
    cr_assert_eq(fix_write(p, NULL, &g, 1, 0, &err), FC_OK, "%s", err.msg);
    fix_case_free(&g);
    fix_file f;
    fix_case c;
    read_only_case(p, &f, &c);
    cr_assert_eq(fix_check_case(&c, FIX_BACKEND_REF, exact_blocks, r, &err), FC_OK, "%s",
                 err.msg);
    cr_expect(r->bmask_checked, "the stored block mask was checked");
    fix_case_free(&c);
    fix_close(&f);
}

Test(fix_xterms, a_stored_block_mask_is_held_to_the_explicit_mask_too)
{
    fix_check_result r;
    /* gen's own (built over both) is exact for the full predicate */
    check_stored_bmask("bm_both.h5", 0, 1, &r);
    cr_expect(r.passed && r.bmask_exact, "exact over families and mask: %s", r.detail);
    /* built over the families alone (no family: every tile FULL), it is exact for them but
     * marks FULL tile [0][0][0][1] (queries 0..15, keys 16..31), where the prefix-LM mask of
     * batch entry 0 (prefix 5, key tk allowed to query tq when tk <= tq + 16) masks e.g. key 17
     * to query 0: not sound, named, whatever exact_blocks says */
    check_stored_bmask("bm_families.h5", 1, 0, &r);
    cr_expect(!r.passed && !r.bmask_exact, "a FULL tile the explicit mask partly masks");
    cr_expect(strstr(r.detail, "block_mask is not sound"), "%s", r.detail);
    cr_expect(strstr(r.detail, "row [0][0][0]: kv block 1 is listed full but pair (q 0, k 17) "
                     "is not allowed"), "names the tile and the pair: %s", r.detail);
}

/* ---- repro under explicit terms ---- */

/* repro tells the rows of a case with explicit terms under them: the header says how many of
 * the families' pairs the mask keeps and the bias's range, and a row's allowed keys are the
 * explicit mask's runs, not the families' interval (here: no family, so every key of the row).
 * The counts are the predicate's, counted here. */
Test(fix_xterms, repro_tells_the_explicit_terms_and_a_rows_allowed_keys)
{
    fix_case c;
    const char *p = write_base("repro.h5", NULL);
    fix_file f;
    read_only_case(p, &f, &c);
    fix_close(&f);
    size_t no = attn_o_elems(&c.prob), nl = attn_lse_elems(&c.prob);
    fix_tested tt = {.label = "same", .producer = "the oracle rounded", .encoding = "float32"};
    tt.out = malloc(no * sizeof *tt.out);
    tt.lse = malloc(nl * sizeof *tt.lse);
    cr_assert(tt.out && tt.lse);
    for (size_t i = 0; i < no; i++)
        tt.out[i] = (float)c.out[i];
    for (size_t i = 0; i < nl; i++)
        tt.lse[i] = (float)c.lse[i];
    c.tested = &tt;
    c.ntested = 1;
    long kept = 0;
    for (int32_t b = 0; b < B; b++)
        for (int32_t q = 0; q < LQ; q++)
            for (int32_t k = 0; k < LK; k++)
                kept += prefix_lm(b, q, k);
    float lo = bias_vals[0], hi = bias_vals[0];
    for (size_t i = 0; i < sizeof bias_vals / sizeof *bias_vals; i++) {
        lo = bias_vals[i] < lo ? bias_vals[i] : lo;
        hi = bias_vals[i] > hi ? bias_vals[i] : hi;
    }
    const int32_t rb = 1, rq = 3; /* the row asked for: batch entry 1, head 0, query 3 */
    chk_repro_opts o = {.file = p, .label = "same", .worst = 3, .kernel = 2, .row = "1,0,3",
                        .row_bhq = {rb, 0, rq}};
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    fc_err err;
    int rc = chk_repro_case(&c, NULL, &o, out, &err);
    fclose(out);
    c.tested = NULL;
    c.ntested = 0;
    free(tt.out);
    free(tt.lse);
    fix_case_free(&c);
    cr_assert_eq(rc, 0, "the oracle rounded passes: %s\n%s", rc < 0 ? err.msg : "", text);
    char want[256];
    snprintf(want, sizeof want, "  explicit mask: [%d, 1, %d, %d], keeps %ld of the families' %d "
             "pairs (per batch entry or head)\n", B, LQ, LK, kept, B * LQ * LK);
    cr_expect(strstr(text, want), "want '%s' in:\n%s", want, text);
    snprintf(want, sizeof want, "  explicit bias: [1, %d, %d, %d] float32, values in [%g, %g], "
             "added after the soft-cap\n", HQ, LQ, LK, (double)lo, (double)hi);
    cr_expect(strstr(text, want), "want '%s' in:\n%s", want, text);
    int32_t n = prefix_hi(rb, rq); /* a prefix-LM row is one run [0, n) */
    snprintf(want, sizeof want, "  allowed keys: %d of the families' %d (explicit mask), tokens "
             "[0, %d) in 1 run", n, LK, n);
    cr_expect(strstr(text, want), "want '%s' in:\n%s", want, text);
    cr_expect(strstr(text, "rerun: flexcheck repro") && strstr(text, "--tested same --row 1,0,3"),
              "the rerun line:\n%s", text);
    free(text);
}
