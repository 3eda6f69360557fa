/*
 * test_bmask.c - block-mask builders (docs/matrix.md M3, exact, no tolerance):
 *   - slow == a brute-force tile classification by an oracle written here from the spec
 *     (linear sequence lookup, floor() in double, no code shared with masks/);
 *   - direct == slow exactly, superset (with and without trim) sound, on 1200 seeded random
 *     configurations: lengths including 0, 1 and non-multiples of the block, block sizes
 *     16..256 and non-square, causal, W, C, packing with zero-length members;
 *   - every builder's canonical form (ascending ids, rows exactly as long as their counts)
 *     and PyTorch's shape from it (bmask_copy_width); the size of long windowed, chunked and
 *     ragged masks;
 *   - soundness, defects, exactness and comparison (bmask_check.c) against the oracle, pair
 *     by pair, on each configuration's mask corrupted at random in two heads;
 *   - PyTorch's published counts; ragged lengths; validation and soundness failures.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "masks/bmask.h"
#include "masks/seq.h"
#include "tests/test_rng.h"

/* ---- the oracle: docs/semantics.md section 2 read literally ---- */

static int oracle_allowed(mask_params m, const seq_info *s, int32_t tq, int32_t tk)
{
    if (tq >= s->lq || tk >= s->lk)
        return 0; /* padding */
    int32_t sq = -1, sk = -1;
    for (int32_t r = 0; r < s->nseq; r++) {
        if (s->cu_q[r] <= tq && tq < s->cu_q[r + 1]) sq = r;
        if (s->cu_k[r] <= tk && tk < s->cu_k[r + 1]) sk = r;
    }
    if (sq != sk)
        return 0;
    long nq = s->cu_q[sq + 1] - s->cu_q[sq], nk = s->cu_k[sq + 1] - s->cu_k[sq];
    long pq = (tq - s->cu_q[sq]) + (nk - nq), pk = tk - s->cu_k[sq];
    if (m.causal && !(pk <= pq))
        return 0;
    if (m.sliding_window && !(labs(pq - pk) < m.sliding_window))
        return 0;
    if (m.chunk_size &&
        floor((double)pq / m.chunk_size) != floor((double)pk / m.chunk_size))
        return 0;
    return 1;
}

/* 0 empty, 1 partial, 2 full for tile (r, c). */
static int oracle_tile(mask_params m, const seq_info *s, int32_t qb, int32_t kb, int32_t r,
                       int32_t c)
{
    long n = 0;
    for (int32_t tq = r * qb; tq < (r + 1) * qb; tq++)
        for (int32_t tk = c * kb; tk < (c + 1) * kb; tk++)
            n += oracle_allowed(m, s, tq, tk);
    return n == 0 ? 0 : n == (long)qb * kb ? 2 : 1;
}

/* Kind of tile c in row r of bm, with sanity checks on ordering and fill. */
static int listed_kind(const bmask *bm, int32_t r, int32_t c)
{
    size_t row = bmask_row(bm, 0, 0, r);
    for (int32_t j = 0; j < bm->kv_num_blocks[row]; j++)
        if (bmask_ids(bm, 0, row)[j] == c) return 1;
    for (int32_t j = 0; j < bm->full_kv_num_blocks[row]; j++)
        if (bmask_ids(bm, 1, row)[j] == c) return 2;
    return 0;
}

/* The forms of bmask.h. compact (our builders): ascending ids, rows laid end to end, each
 * exactly as long as its count, each list's width its longest row. Otherwise the rectangular
 * PyTorch shape bmask_copy_width makes: ascending ids, every row nkb slots at i * nkb, -1 past
 * each count. */
static void expect_form(const bmask *bm, int compact, const char *what)
{
    int32_t longest[2] = {0, 0};
    const int32_t widths[2] = {bm->width, bm->full_width};
    const int32_t *cnts[2] = {bm->kv_num_blocks, bm->full_kv_num_blocks};
    const int64_t *offs[2] = {bm->kv_offsets, bm->full_kv_offsets};
    const int32_t *all[2] = {bm->kv_indices, bm->full_kv_indices};
    cr_assert(bm->nb == 1 && bm->nh == 1, "%s: nb %d, nh %d", what, bm->nb, bm->nh);
    for (int l = 0; l < 2; l++) {
        int64_t at = 0; /* where row r must start */
        for (int32_t r = 0; r < bm->nqb; r++) {
            int32_t n = cnts[l][r], cap = compact ? n : bm->nkb;
            if (n > longest[l])
                longest[l] = n;
            cr_assert_eq(offs[l][r], at, "%s: %s row %d starts at %lld, not %lld", what,
                         l ? "full" : "partial", r, (long long)offs[l][r], (long long)at);
            cr_assert(n <= cap, "%s: row %d lists %d, more than %d", what, r, n, cap);
            for (int32_t j = 0; j < cap; j++) {
                int32_t id = all[l][at + j];
                if (j < n && j > 0)
                    cr_assert(id > all[l][at + j - 1], "%s: row %d not ascending", what, r);
                if (j >= n)
                    cr_assert_eq(id, -1, "%s: row %d slot %d is %d, not -1", what, r, j, id);
            }
            at += cap;
        }
        cr_assert_eq(offs[l][bm->nqb], at, "%s: %s lists end at %lld, not %lld", what,
                     l ? "full" : "partial", (long long)offs[l][bm->nqb], (long long)at);
        cr_assert_eq(widths[l], compact ? longest[l] : bm->nkb,
                     "%s: %s width %d, longest row %d, nkb %d", what, l ? "full" : "partial",
                     widths[l], longest[l], bm->nkb);
    }
}

static void expect_canonical(const bmask *bm, const char *what)
{
    expect_form(bm, 1, what);
}

/* bmask_copy_width to PyTorch's shape: the same lists, -1 past them, width nkb. */
static void expect_pytorch_shape(const bmask *bm, const char *what)
{
    bmask wide;
    fc_err err;
    cr_assert_eq(bmask_copy_width(bm, bm->nkb, &wide, &err), FC_OK, "%s: %s", what, err.msg);
    expect_form(&wide, 0, what);
    cr_assert_eq(bmask_compare(bm, &wide, &err), FC_OK, "%s: widened: %s", what, err.msg);
    bmask_free(&wide);
}

/* ---- random configurations ---- */

typedef struct config {
    mask_params m;
    seq_info s;
    int32_t qb, kb;
    char desc[256];
} config;

static int32_t random_len(uint64_t *st)
{
    static const int32_t edge[] = {0, 1, 2, 15, 16, 17, 63, 64, 65, 127, 128, 129, 255, 256, 257};
    switch (rng_int(st, 0, 3)) {
    case 0: return edge[rng_int(st, 0, 14)];
    case 1: return rng_int(st, 0, 40);
    default: return rng_int(st, 0, 300);
    }
}

static void random_config(uint64_t seed, config *cf)
{
    uint64_t st = seed * 7919 + 1;
    fc_err err;
    memset(cf, 0, sizeof *cf);
    cf->qb = 16 << rng_int(&st, 0, 4);
    cf->kb = 16 << rng_int(&st, 0, 4);
    cf->m.causal = rng_int(&st, 0, 1);
    static const int32_t ws[] = {1, 2, 3, 15, 16, 17, 31, 64, 65, 100, 127, 128, 129, 257, 1000};
    cf->m.sliding_window = rng_int(&st, 0, 2) ? ws[rng_int(&st, 0, 14)] : 0;
    static const int32_t cs[] = {1, 3, 16, 33, 64, 100, 128, 200};
    cf->m.chunk_size = rng_int(&st, 0, 3) == 0 ? cs[rng_int(&st, 0, 7)] : 0;
    int packed = rng_int(&st, 0, 1);
    if (!packed) {
        cr_assert_eq(seq_init_dense(&cf->s, 1, random_len(&st), random_len(&st), &err), FC_OK);
    } else {
        int32_t n = rng_int(&st, 1, 6), cq[8] = {0}, ck[8] = {0};
        for (int32_t i = 1; i <= n; i++) {
            int32_t kind = rng_int(&st, 0, 4);
            int32_t nk = kind == 0 ? 0 : rng_int(&st, 0, 120);
            /* prefill (nq == nk), decode (1 query), chunked prefill (tail), empty, random */
            int32_t nq = kind == 1 ? nk : kind == 2 ? (nk > 0) : kind == 3 ? nk / 3
                                                                           : rng_int(&st, 0, 60);
            cq[i] = cq[i - 1] + nq;
            ck[i] = ck[i - 1] + nk;
        }
        cr_assert_eq(seq_init_packed(&cf->s, n, cq, ck, &err), FC_OK);
    }
    int o = snprintf(cf->desc, sizeof cf->desc, "seed %llu: qb %d kb %d causal %d W %d C %d lq %d "
                     "lk %d", (unsigned long long)seed, cf->qb, cf->kb, cf->m.causal,
                     cf->m.sliding_window, cf->m.chunk_size, cf->s.lq, cf->s.lk);
    if (packed)
        for (int32_t i = 0; i <= cf->s.nseq && o < 200; i++)
            o += snprintf(cf->desc + o, sizeof cf->desc - o, "%s%d/%d", i ? "," : " cu ",
                          cf->s.cu_q[i], cf->s.cu_k[i]);
}

/* ---- the checks held to the oracle on corrupted masks ---- */

static const char *const kind_name[] = {"empty", "partial", "full"};

/* A mask of nh = 2 stored heads from the oracle's kinds ok[r * nkb + c], each tile's kind
 * changed with probability 1/8 independently per head (so the heads differ), ascending ids,
 * PyTorch's width. listed[(h * nqb + r) * nkb + c] receives what was listed. */
static void corrupt(uint64_t seed, const config *cf, const int *ok, int32_t nqb, int32_t nkb,
                    bmask *bad, int *listed)
{
    uint64_t st = seed * 104729 + 7;
    fc_err err;
    cr_assert_eq(bmask_alloc(bad, cf->qb, cf->kb, cf->s.lq, cf->s.lk, 1, 2, nkb, &err), FC_OK);
    for (int32_t h = 0; h < 2; h++)
        for (int32_t r = 0; r < nqb; r++) {
            size_t row = bmask_row(bad, 0, h, r);
            for (int32_t c = 0; c < nkb; c++) {
                int k = ok[r * nkb + c];
                if (rng_int(&st, 0, 7) == 0)
                    k = rng_int(&st, 0, 2);
                listed[((size_t)h * nqb + r) * nkb + c] = k;
                if (k == 1)
                    bmask_ids(bad, 0, row)[bad->kv_num_blocks[row]++] = c;
                if (k == 2)
                    bmask_ids(bad, 1, row)[bad->full_kv_num_blocks[row]++] = c;
            }
        }
}

/* The first pair of tile (r, c), rows then keys, that the oracle allows (want = 1) or not. */
static void oracle_first_pair(const config *cf, int32_t r, int32_t c, int want, int32_t *tq,
                              int32_t *tk)
{
    for (*tq = r * cf->qb; *tq < (r + 1) * cf->qb; ++*tq)
        for (*tk = c * cf->kb; *tk < (c + 1) * cf->kb; ++*tk)
            if (oracle_allowed(cf->m, &cf->s, *tq, *tk) == want)
                return;
    cr_assert_fail("%s: tile (%d, %d) has no pair with allowed = %d", cf->desc, r, c, want);
}

/* bmask_find_defects, bmask_check_sound and bmask_check_exact on a corrupted mask: counts,
 * first tiles, first pairs and messages as the oracle, pair by pair, makes them. */
static void check_checks(uint64_t seed, const config *cf, const int *ok, int32_t nqb,
                         int32_t nkb, const bmask *slow)
{
    size_t n = (size_t)2 * nqb * nkb;
    int *listed = malloc((n + 1) * sizeof(int));
    cr_assert(listed);
    bmask bad;
    corrupt(seed, cf, ok, nqb, nkb, &bad, listed);
    fc_err err;
    cr_assert_eq(bmask_validate(&bad, &err), FC_OK, "%s: %s", cf->desc, err.msg);
    bmask_defects want = {0}, got;
    char sound[256] = "", exact[256] = "", cmp_sb[256] = "", cmp_bs[256] = "";
    for (int32_t h = 0; h < 2; h++)
        for (int32_t r = 0; r < nqb; r++)
            for (int32_t c = 0; c < nkb; c++) {
                int k = ok[r * nkb + c], l = listed[((size_t)h * nqb + r) * nkb + c];
                bmask_tile t = {0, h, r, c};
                int drop = l == 0 && k != 0, leak = l == 2 && k != 2;
                if (drop && want.dropped++ == 0)
                    want.first_dropped = t;
                if (leak && want.leaked++ == 0)
                    want.first_leaked = t;
                want.wasted += l == 1 && k == 0;
                if ((drop || leak) && !sound[0]) {
                    int32_t tq, tk;
                    oracle_first_pair(cf, r, c, drop, &tq, &tk);
                    if (drop)
                        snprintf(sound, sizeof sound, "row [0][%d][%d]: allowed pair (q %d, k "
                                 "%d) lies in kv block %d, which is not listed", h, r, tq, tk, c);
                    else
                        snprintf(sound, sizeof sound, "row [0][%d][%d]: kv block %d is listed "
                                 "full but pair (q %d, k %d) is not allowed", h, r, c, tq, tk);
                }
                if (l != k && !exact[0]) {
                    snprintf(exact, sizeof exact, "row [0][%d][%d], kv block %d: listed %s, the "
                             "mask makes it %s", h, r, c, kind_name[l], kind_name[k]);
                    snprintf(cmp_sb, sizeof cmp_sb, "row [0][%d][%d], kv block %d: %s vs %s", h,
                             r, c, kind_name[k], kind_name[l]);
                    snprintf(cmp_bs, sizeof cmp_bs, "row [0][%d][%d], kv block %d: %s vs %s", h,
                             r, c, kind_name[l], kind_name[k]);
                }
            }
    cr_assert_eq(bmask_find_defects(&bad, cf->m, &cf->s, &got, &err), FC_OK, "%s", err.msg);
    cr_assert(got.dropped == want.dropped && got.leaked == want.leaked &&
                  got.wasted == want.wasted, "%s: defects %lld/%lld/%lld, oracle %lld/%lld/%lld",
              cf->desc, (long long)got.dropped, (long long)got.leaked, (long long)got.wasted,
              (long long)want.dropped, (long long)want.leaked, (long long)want.wasted);
    cr_assert(!want.dropped || !memcmp(&got.first_dropped, &want.first_dropped, sizeof(bmask_tile)),
              "%s: first dropped (%d, %d, %d)", cf->desc, got.first_dropped.h,
              got.first_dropped.r, got.first_dropped.c);
    cr_assert(!want.leaked || !memcmp(&got.first_leaked, &want.first_leaked, sizeof(bmask_tile)),
              "%s: first leaked (%d, %d, %d)", cf->desc, got.first_leaked.h,
              got.first_leaked.r, got.first_leaked.c);
    fc_status st = bmask_check_sound(&bad, cf->m, &cf->s, &err);
    cr_assert_eq(st, sound[0] ? FC_EFAIL : FC_OK, "%s: sound %d: %s", cf->desc, st, err.msg);
    cr_assert(!sound[0] || strstr(err.msg, sound), "%s:\n got  %s\n want %s", cf->desc,
              err.msg, sound);
    st = bmask_check_exact(&bad, cf->m, &cf->s, &err);
    cr_assert_eq(st, exact[0] ? FC_EFAIL : FC_OK, "%s: exact %d: %s", cf->desc, st, err.msg);
    cr_assert(!exact[0] || !strcmp(err.msg, exact), "%s:\n got  %s\n want %s", cf->desc,
              err.msg, exact);
    /* the comparison with the exact mask (slow, one head broadcast) finds the same tile */
    st = bmask_compare(slow, &bad, &err);
    cr_assert_eq(st, exact[0] ? FC_EFAIL : FC_OK, "%s: compare %d: %s", cf->desc, st, err.msg);
    cr_assert(!exact[0] || !strcmp(err.msg, cmp_sb), "%s:\n got  %s\n want %s", cf->desc,
              err.msg, cmp_sb);
    st = bmask_compare(&bad, slow, &err);
    cr_assert_eq(st, exact[0] ? FC_EFAIL : FC_OK, "%s: compare %d: %s", cf->desc, st, err.msg);
    cr_assert(!exact[0] || !strcmp(err.msg, cmp_bs), "%s:\n got  %s\n want %s", cf->desc,
              err.msg, cmp_bs);
    bmask_free(&bad);
    free(listed);
}

static void check_config(uint64_t seed)
{
    config cf;
    random_config(seed, &cf);
    bmask slow, direct, sup, trim;
    fc_err err;
    cr_assert_eq(bmask_build(&slow, BMASK_SLOW, cf.m, &cf.s, cf.qb, cf.kb, &err), FC_OK, "%s: %s",
                 cf.desc, err.msg);
    int *ok = malloc(((size_t)slow.nqb * slow.nkb + 1) * sizeof(int));
    cr_assert(ok);
    for (int32_t r = 0; r < slow.nqb; r++)
        for (int32_t c = 0; c < slow.nkb; c++) {
            int want = ok[r * slow.nkb + c] = oracle_tile(cf.m, &cf.s, cf.qb, cf.kb, r, c);
            cr_assert_eq(listed_kind(&slow, r, c), want, "%s: slow tile (%d, %d) is %d, oracle %d",
                         cf.desc, r, c, listed_kind(&slow, r, c), want);
        }
    expect_canonical(&slow, cf.desc);
    check_checks(seed, &cf, ok, slow.nqb, slow.nkb, &slow);
    free(ok);
    cr_assert_eq(bmask_build(&direct, BMASK_DIRECT, cf.m, &cf.s, cf.qb, cf.kb, &err), FC_OK);
    cr_assert_eq(bmask_compare(&slow, &direct, &err), FC_OK, "%s: direct != slow: %s", cf.desc,
                 err.msg);
    cr_assert_eq(bmask_check_exact(&direct, cf.m, &cf.s, &err), FC_OK, "%s: %s", cf.desc,
                 err.msg);
    expect_canonical(&direct, cf.desc);
    expect_pytorch_shape(&direct, cf.desc);
    cr_assert_eq(bmask_build(&sup, BMASK_SUPERSET, cf.m, &cf.s, cf.qb, cf.kb, &err), FC_OK);
    cr_assert_eq(bmask_check_sound(&sup, cf.m, &cf.s, &err), FC_OK, "%s: superset: %s", cf.desc,
                 err.msg);
    expect_canonical(&sup, cf.desc);
    cr_assert_eq(bmask_build(&trim, BMASK_SUPERSET_TRIM, cf.m, &cf.s, cf.qb, cf.kb, &err), FC_OK);
    cr_assert_eq(bmask_check_sound(&trim, cf.m, &cf.s, &err), FC_OK, "%s: superset-trim: %s",
                 cf.desc, err.msg);
    cr_assert_eq(bmask_count_full(&sup) + bmask_count_full(&trim), 0, "%s: superset lists full",
                 cf.desc);
    cr_assert_eq(bmask_validate(&trim, &err), FC_OK, "%s: %s", cf.desc, err.msg);
    cr_assert_leq(bmask_count_partial(&trim), bmask_count_partial(&sup), "%s", cf.desc);
    bmask_free(&slow);
    bmask_free(&direct);
    bmask_free(&sup);
    bmask_free(&trim);
    seq_free(&cf.s);
}

/* 4 x 300 configurations, split so Criterion can run them on both cores. */
#define CONFIGS_PER_TEST 300
#define RANDOM_TEST(part)                                                                       \
    Test(builders, slow_matches_oracle_and_direct_equals_slow_part_##part)                      \
    {                                                                                           \
        for (uint64_t i = 0; i < CONFIGS_PER_TEST; i++)                                         \
            check_config((part) * CONFIGS_PER_TEST + i);                                        \
    }
RANDOM_TEST(0)
RANDOM_TEST(1)
RANDOM_TEST(2)
RANDOM_TEST(3)

/* ---- PyTorch's published counts (test_flex_attention / BlockMask docs) ---- */

typedef struct count_case {
    const char *name;
    mask_params m;
    int32_t l, qb, kb;
    int64_t partial, full;
} count_case;

static const count_case counts[] = {
    /* 16 diagonal tiles partial, 16*15/2 = 120 below full. */
    {"causal L=2048 B=128", {.causal = 1}, 2048, 128, 128, 16, 120},
    /* p_q - p_k <= 512: offsets 1..3 full (15+14+13 = 42), diagonal and offset 4 partial
     * (16 + 12 = 28). */
    {"causal W=513 L=2048 B=128", {.causal = 1, .sliding_window = 513}, 2048, 128, 128, 28, 42},
};

Test(builders, reproduce_pytorch_published_block_counts)
{
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        const count_case *cc = &counts[i];
        seq_info s;
        fc_err err;
        cr_assert_eq(seq_init_dense(&s, 1, cc->l, cc->l, &err), FC_OK);
        for (int b = BMASK_SLOW; b <= BMASK_DIRECT; b++) {
            bmask bm;
            cr_assert_eq(bmask_build(&bm, (bmask_builder)b, cc->m, &s, cc->qb, cc->kb, &err),
                         FC_OK);
            cr_expect_eq(bmask_count_partial(&bm), cc->partial, "%s (%s): partial", cc->name,
                         bmask_builder_name((bmask_builder)b));
            cr_expect_eq(bmask_count_full(&bm), cc->full, "%s (%s): full", cc->name,
                         bmask_builder_name((bmask_builder)b));
            bmask_free(&bm);
        }
        seq_free(&s);
    }
}

Test(builders, ragged_lengths_never_list_out_of_range_ids_or_full_edge_tiles)
{
    static const int32_t lens[] = {1023, 2047, 2051};
    for (size_t i = 0; i < 3; i++) {
        seq_info s;
        fc_err err;
        cr_assert_eq(seq_init_dense(&s, 1, lens[i], lens[i], &err), FC_OK);
        for (int b = BMASK_SLOW; b <= BMASK_SUPERSET_TRIM; b++) {
            bmask bm;
            mask_params m = {.causal = 1, .sliding_window = 300};
            cr_assert_eq(bmask_build(&bm, (bmask_builder)b, m, &s, 128, 64, &err), FC_OK);
            cr_expect_eq(bmask_validate(&bm, &err), FC_OK, "L=%d %s: %s", lens[i],
                         bmask_builder_name((bmask_builder)b), err.msg);
            int32_t last_q = bm.nqb - 1, last_k = bm.nkb - 1;
            cr_expect_neq(listed_kind(&bm, last_q, last_k), 2, "L=%d %s: edge tile full",
                          lens[i], bmask_builder_name((bmask_builder)b));
            for (int32_t r = 0; r < bm.nqb; r++)
                cr_expect_neq(listed_kind(&bm, r, last_k), 2, "L=%d: ragged kv tile full in row %d",
                              lens[i], r);
            bmask_free(&bm);
        }
        seq_free(&s);
    }
}

/* What a build costs, checked without a clock: a compact mask holds exactly the slots it
 * lists (expect_canonical), so a window or a chunk stays O(L) at every length where PyTorch's
 * shape is NQB x NKB (O(L^2)), and a ragged last query tile, which lists every tile it reaches
 * as partial, adds one long row, not NQB of them. Counts and longest rows worked out by hand,
 * blocks 128, the lists' totals in closed form over the query tiles r. */
typedef struct size_case {
    const char *name;
    mask_params m;
    int32_t l, width, full_width;
    int64_t partial, full;
} size_case;

static const size_case sizes[] = {
    /* Tiles r-8 and r partial (row 128r sees from 128(r-8)+1), r-7..r-1 full; r < 8: tile r
     * partial, 0..r-1 full. Partial 8 + 2 (nqb - 8), full 28 + 7 (nqb - 8). */
    {"causal W=1024 L=4k", {.causal = 1, .sliding_window = 1024}, 4096, 2, 7, 56, 196},
    {"causal W=1024 L=256k", {.causal = 1, .sliding_window = 1024}, 262144, 2, 7, 4088, 14308},
    /* One more row, query 4096 alone: keys 3073..4096, tiles 24..32, none full (ragged). */
    {"causal W=1024 L=4k+1", {.causal = 1, .sliding_window = 1024}, 4097, 9, 7, 65, 196},
    /* Tile r full (every row sees it whole), r-1 and r+1 partial where they exist. */
    {"bidir W=128 L=256k", {.sliding_window = 128}, 262144, 2, 1, 4094, 2048},
    /* Tile r partial, the chunk's tiles before it full: 32 chunks of 0 + 1 + ... + 63. */
    {"causal C=8192 L=256k", {.causal = 1, .chunk_size = 8192}, 262144, 1, 63, 2048, 64512},
    /* Tile r partial, 0..r-1 full: the full lists are NQB (NQB - 1) / 2. */
    {"causal L=16k", {.causal = 1}, 16384, 1, 127, 128, 8128},
    /* One more row, query 16384 alone: all 129 tiles partial. */
    {"causal L=16k+1", {.causal = 1}, 16385, 129, 127, 257, 8128},
};

Test(builders, direct_masks_hold_exactly_the_tiles_they_list_at_every_length)
{
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        const size_case *sc = &sizes[i];
        seq_info s;
        bmask bm;
        fc_err err;
        cr_assert_eq(seq_init_dense(&s, 1, sc->l, sc->l, &err), FC_OK);
        cr_assert_eq(bmask_build_direct(&bm, sc->m, &s, 128, 128, &err), FC_OK, "%s: %s",
                     sc->name, err.msg);
        expect_canonical(&bm, sc->name); /* slots = counts, row by row */
        cr_expect_eq(bm.width, sc->width, "%s: longest partial row %d, want %d", sc->name,
                     bm.width, sc->width);
        cr_expect_eq(bm.full_width, sc->full_width, "%s: longest full row %d, want %d",
                     sc->name, bm.full_width, sc->full_width);
        cr_expect_eq(bm.kv_offsets[bm.nqb], sc->partial, "%s: %lld partial slots, want %lld",
                     sc->name, (long long)bm.kv_offsets[bm.nqb], (long long)sc->partial);
        cr_expect_eq(bm.full_kv_offsets[bm.nqb], sc->full, "%s: %lld full slots, want %lld",
                     sc->name, (long long)bm.full_kv_offsets[bm.nqb], (long long)sc->full);
        bmask_free(&bm);
        seq_free(&s);
    }
}

Test(builders, copy_width_refuses_a_width_narrower_than_a_list)
{
    seq_info s;
    bmask bm, out;
    fc_err err;
    cr_assert_eq(seq_init_dense(&s, 1, 256, 256, &err), FC_OK);
    cr_assert_eq(bmask_build_direct(&bm, (mask_params){.causal = 1}, &s, 64, 64, &err), FC_OK);
    /* Row 3 lists 3 full tiles and 1 partial. */
    cr_expect_eq(bmask_copy_width(&bm, 2, &out, &err), FC_EINVAL);
    cr_expect(strstr(err.msg, "row 3 lists 3 blocks"), "%s", err.msg);
    cr_assert_eq(bmask_copy_width(&bm, 3, &out, &err), FC_OK, "%s", err.msg);
    cr_expect_eq(bmask_compare(&bm, &out, &err), FC_OK, "%s", err.msg);
    bmask_free(&out);
    /* A count past its compact row (one full tile in row 1) would copy row 2's first id. */
    bm.full_kv_num_blocks[1] = 2;
    cr_expect_eq(bmask_copy_width(&bm, 4, &out, &err), FC_EINVAL);
    cr_expect(strstr(err.msg, "row 1 lists 2 blocks") && strstr(err.msg, "within its 1 slots"),
              "%s", err.msg);
    bm.full_kv_num_blocks[1] = 1;
    bmask_free(&bm);
    seq_free(&s);
}

/* ---- validation and soundness must fail on planted defects ---- */

/* Causal 256 x 256 in 64-blocks, in PyTorch's shape (both lists 4 wide), as a producer would
 * store it: the tests below write ids into slots past a count, which compact rows lack. */
static bmask causal_mask(seq_info *s)
{
    bmask bm, wide;
    fc_err err;
    cr_assert_eq(seq_init_dense(s, 1, 256, 256, &err), FC_OK);
    cr_assert_eq(bmask_build(&bm, BMASK_DIRECT, (mask_params){.causal = 1}, s, 64, 64, &err),
                 FC_OK);
    cr_assert_eq(bmask_copy_width(&bm, bm.nkb, &wide, &err), FC_OK, "%s", err.msg);
    bmask_free(&bm);
    return wide;
}

Test(soundness, catches_a_dropped_block_and_a_partial_block_listed_full)
{
    seq_info s;
    fc_err err;
    bmask bm = causal_mask(&s);
    mask_params m = {.causal = 1};
    cr_assert_eq(bmask_check_sound(&bm, m, &s, &err), FC_OK, "%s", err.msg);
    /* Row 2 lists blocks 0, 1 full and 2 partial. Drop the partial diagonal block. */
    bm.kv_num_blocks[2] = 0;
    cr_expect_eq(bmask_check_sound(&bm, m, &s, &err), FC_EFAIL);
    cr_expect(strstr(err.msg, "not listed"), "%s", err.msg);
    /* Restore, then list the diagonal block as full: the mask would be skipped. */
    bm.kv_num_blocks[2] = 1;
    bmask_ids(&bm, 1, 2)[2] = 2;
    bm.full_kv_num_blocks[2] = 3;
    bm.kv_num_blocks[2] = 0;
    cr_expect_eq(bmask_check_sound(&bm, m, &s, &err), FC_EFAIL);
    cr_expect(strstr(err.msg, "listed full"), "%s", err.msg);
    bmask_free(&bm);
    seq_free(&s);
}

Test(validation, rejects_out_of_range_duplicate_ids_and_counts_above_width)
{
    seq_info s;
    fc_err err;
    bmask bm = causal_mask(&s);
    cr_assert_eq(bmask_validate(&bm, &err), FC_OK);
    bmask_ids(&bm, 0, 1)[0] = 4; /* nkb = 4 */
    cr_expect_eq(bmask_validate(&bm, &err), FC_EINVAL);
    cr_expect(strstr(err.msg, "kv_indices[0][0][1][0] = 4"), "%s", err.msg);
    bmask_ids(&bm, 0, 1)[0] = 0; /* also listed full in row 1 */
    cr_expect_eq(bmask_validate(&bm, &err), FC_EINVAL);
    cr_expect(strstr(err.msg, "twice"), "%s", err.msg);
    bmask_ids(&bm, 0, 1)[0] = 1;
    bm.full_kv_num_blocks[3] = 5;
    cr_expect_eq(bmask_validate(&bm, &err), FC_EINVAL);
    cr_expect(strstr(err.msg, "full_kv_num_blocks[0][0][3] = 5"), "%s", err.msg);
    bmask_free(&bm);
    seq_free(&s);
}

/* A compact row owns exactly its count's slots: one more would read the next row's first id,
 * so a count past its row's capacity is refused though it is below the longest row; offsets
 * that run backwards are refused too. */
Test(validation, holds_each_compact_row_to_its_own_capacity)
{
    seq_info s;
    fc_err err;
    bmask bm;
    cr_assert_eq(seq_init_dense(&s, 1, 256, 256, &err), FC_OK);
    cr_assert_eq(bmask_build(&bm, BMASK_DIRECT, (mask_params){.causal = 1}, &s, 64, 64, &err),
                 FC_OK);
    cr_assert_eq(bmask_validate(&bm, &err), FC_OK, "%s", err.msg);
    cr_assert_eq(bm.full_width, 3); /* row 3 lists 3 full tiles, row 1 one */
    bm.full_kv_num_blocks[1] = 2;
    cr_expect_eq(bmask_validate(&bm, &err), FC_EINVAL);
    cr_expect(strstr(err.msg, "full_kv_num_blocks[0][0][1] = 2: must be in [0, 1]"), "%s",
              err.msg);
    bm.full_kv_num_blocks[1] = 1;
    int64_t o = bm.full_kv_offsets[2];
    bm.full_kv_offsets[2] = bm.full_kv_offsets[1] - 1;
    cr_expect_eq(bmask_validate(&bm, &err), FC_EINVAL);
    cr_expect(strstr(err.msg, "full_kv row offsets decrease after stored row 1"), "%s",
              err.msg);
    bm.full_kv_offsets[2] = o;
    bm.kv_offsets[0] = 1;
    cr_expect_eq(bmask_validate(&bm, &err), FC_EINVAL);
    cr_expect(strstr(err.msg, "kv row offsets start at 1, not 0"), "%s", err.msg);
    bm.kv_offsets[0] = 0;
    cr_expect_eq(bmask_validate(&bm, &err), FC_OK, "%s", err.msg);
    bmask_free(&bm);
    seq_free(&s);
}

/* The checks and the comparison validate first: a mask that was never validated gets
 * FC_EINVAL and bmask_validate's message from each, never a read or write past its arrays. */
Test(validation, checks_refuse_an_unvalidated_mask)
{
    seq_info s;
    fc_err err;
    bmask bm = causal_mask(&s), good;
    mask_params m = {.causal = 1};
    bmask_defects d;
    cr_assert_eq(bmask_build(&good, BMASK_DIRECT, m, &s, 64, 64, &err), FC_OK);
    int32_t qb = bm.q_block_size, nkb = bm.nkb;
    bm.q_block_size = 512; /* past BMASK_MAX_BLOCK, the size of a query tile's row scratch */
    cr_expect_eq(bmask_check_sound(&bm, m, &s, &err), FC_EINVAL);
    cr_expect(strstr(err.msg, "block sizes (512, 64)"), "%s", err.msg);
    bm.q_block_size = qb;
    bm.nkb = nkb - 1; /* a grid narrower than lk needs */
    cr_expect_eq(bmask_find_defects(&bm, m, &s, &d, &err), FC_EINVAL);
    cr_expect(strstr(err.msg, "block grid"), "%s", err.msg);
    bm.nkb = nkb;
    bmask_ids(&bm, 1, 3)[0] = 1 << 30; /* an id far past nkb */
    cr_expect_eq(bmask_check_exact(&bm, m, &s, &err), FC_EINVAL);
    cr_expect(strstr(err.msg, "out of range"), "%s", err.msg);
    cr_expect_eq(bmask_compare(&good, &bm, &err), FC_EINVAL);
    bmask_ids(&bm, 1, 3)[0] = 0;
    bm.kv_num_blocks[2] = -5;
    cr_expect_eq(bmask_check_sound(&bm, m, &s, &err), FC_EINVAL);
    bm.kv_num_blocks[2] = 1;
    cr_expect_eq(bmask_check_exact(&bm, m, &s, &err), FC_OK, "%s", err.msg);
    cr_expect_eq(bmask_compare(&good, &bm, &err), FC_OK, "%s", err.msg);
    bmask_free(&good);
    bmask_free(&bm);
    seq_free(&s);
}

Test(compare, names_the_first_differing_row_and_block)
{
    seq_info s;
    fc_err err;
    bmask a = causal_mask(&s), b;
    cr_assert_eq(bmask_build(&b, BMASK_SLOW, (mask_params){.causal = 1}, &s, 64, 64, &err), FC_OK);
    cr_expect_eq(bmask_compare(&a, &b, &err), FC_OK);
    b.full_kv_num_blocks[3] = 2; /* drop block 2 from row 3's full list */
    cr_expect_eq(bmask_compare(&a, &b, &err), FC_EFAIL);
    cr_expect(strstr(err.msg, "row [0][0][3], kv block 2: full vs empty"), "%s", err.msg);
    bmask_free(&a);
    bmask_free(&b);
    seq_free(&s);
}

/* Counts and first tiles follow from the edits: causal 256 x 256 in 64-blocks lists, in row r,
 * blocks 0..r-1 full and block r partial. */
Test(soundness, names_every_defect_of_a_producers_mask)
{
    seq_info s;
    fc_err err;
    bmask bm = causal_mask(&s);
    mask_params m = {.causal = 1};
    bmask_defects d;
    char text[512];
    cr_assert_eq(bmask_find_defects(&bm, m, &s, &d, &err), FC_OK, "%s", err.msg);
    cr_expect(d.dropped == 0 && d.leaked == 0 && d.wasted == 0);
    bmask_defects_text(text, sizeof text, &bm, &d);
    cr_expect_str_eq(text, "sound");

    bm.kv_num_blocks[2] = 0; /* row 2 drops its diagonal block */
    bm.kv_num_blocks[3] = 0; /* row 3 lists its diagonal block full */
    bmask_ids(&bm, 1, 3)[3] = 3;
    bm.full_kv_num_blocks[3] = 4;
    bmask_ids(&bm, 0, 0)[1] = 1; /* row 0 lists block 1 (all above the diagonal) */
    bm.kv_num_blocks[0] = 2;
    cr_assert_eq(bmask_validate(&bm, &err), FC_OK, "%s", err.msg);
    cr_assert_eq(bmask_find_defects(&bm, m, &s, &d, &err), FC_OK, "%s", err.msg);
    cr_expect(d.dropped == 1 && d.leaked == 1 && d.wasted == 1, "%lld %lld %lld",
              (long long)d.dropped, (long long)d.leaked, (long long)d.wasted);
    cr_expect(d.first_dropped.r == 2 && d.first_dropped.c == 2);
    cr_expect(d.first_leaked.r == 3 && d.first_leaked.c == 3);
    bmask_defects_text(text, sizeof text, &bm, &d);
    cr_expect(strstr(text, "NOT SOUND: drops keys: 1 tiles") &&
                  strstr(text, "query tile 2 [tokens 128, 192) kv block 2 [keys 128, 192)") &&
                  strstr(text, "leaks keys: 1 tiles listed full") &&
                  strstr(text, "query tile 3 [tokens 192, 256) kv block 3 [keys 192, 256)") &&
                  strstr(text, "1 listed partial tiles hold no allowed key"), "%s", text);
    bmask_free(&bm);
    seq_free(&s);
}
