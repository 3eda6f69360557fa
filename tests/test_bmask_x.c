/*
 * test_bmask_x.c - block masks for an explicit mask (masks/bmask.h's _x calls, docs/semantics.md
 * sections 4 and 8): the predicate is the families AND an explicit boolean mask [Bm, Hm, Lq, Lk].
 *   - the slow builder == a brute-force tile oracle written here (every element of every tile
 *     of every (b, h), read from the dense mask the test made, never from the packed bits), on
 *     seeded random prefix-LM, speculative-decoding tree, block-structured sparse and per-head
 *     masks, dense and packed, lengths from 0 and not multiples of the block;
 *   - soundness, defects (counts, first tiles, witness elements) and exactness against the same
 *     oracle on those masks corrupted at random, with stored leading dims of 1 (broadcast: held
 *     to every batch entry's and head's mask) or B / Hq;
 *   - an all-ones explicit mask changes no bit of the families' masks; the direct builder
 *     refuses an explicit mask, superset stays sound; leading dims that do not broadcast and a
 *     mask of another grid are refused;
 *   - the example: a tree mask's block list that drops a draft token's tile is named,
 *     tile and element; and where a stored block mask is checked against its case
 *     (fix_check_case), the case's explicit mask is part of what it is held to, while check's
 *     kernel runs (a direct mask, kernels that read the families alone) skip such a case.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check/check_internal.h"
#include "fixtures/fix.h"
#include "masks/bmask.h"
#include "masks/problem.h"
#include "masks/seq.h"
#include "ref/ref.h"
#include "tests/test_rng.h"

typedef enum xkind { PREFIX_LM, TREE, SPARSE, PACKED, NKINDS } xkind;
static const char *const kind_names[] = {"prefix-LM", "tree", "sparse", "packed"};

/* A configuration: families m over s, an explicit mask [bm, hm, lq, lk] held dense (1 allowed)
 * and packed into x, hq heads, the tile sizes. */
typedef struct xcfg {
    mask_params m;
    seq_info s;
    int32_t bm, hm, hq, qb, kb;
    uint8_t *dense, *bits;
    attn_xmask x;
    char desc[200];
} xcfg;

/* THE oracle: in range, the families allow it (mask_pair_allowed, held to a hand-written
 * oracle by tests/test_masks.c and tests/test_bmask.c), and the dense mask's byte is set. */
static int oracle_allowed(const xcfg *c, int32_t b, int32_t h, int32_t tq, int32_t tk)
{
    if (tq >= c->s.lq || tk >= c->s.lk)
        return 0;
    if (!mask_pair_allowed(c->m, seq_info_view(&c->s), tq, tk))
        return 0;
    size_t row = ((size_t)(c->bm > 1 ? b : 0) * c->hm + (c->hm > 1 ? h : 0)) * c->s.lq + tq;
    return c->dense[row * c->s.lk + tk] != 0;
}

/* 0 empty, 1 partial, 2 full: every element of tile (r, col) for (b, h). */
static int oracle_tile(const xcfg *c, int32_t b, int32_t h, int32_t r, int32_t col)
{
    long n = 0;
    for (int32_t tq = r * c->qb; tq < (r + 1) * c->qb; tq++)
        for (int32_t tk = col * c->kb; tk < (col + 1) * c->kb; tk++)
            n += oracle_allowed(c, b, h, tq, tk);
    return n == 0 ? 0 : n == (long)c->qb * c->kb ? 2 : 1;
}

/* The first element of tile (r, col), rows then keys, that is allowed (want 1) or not. */
static void oracle_first_pair(const xcfg *c, int32_t b, int32_t h, int32_t r, int32_t col,
                              int want, int32_t *tq, int32_t *tk)
{
    for (*tq = r * c->qb; *tq < (r + 1) * c->qb; ++*tq)
        for (*tk = col * c->kb; *tk < (col + 1) * c->kb; ++*tk)
            if (oracle_allowed(c, b, h, *tq, *tk) == want)
                return;
    cr_assert_fail("%s: tile (%d, %d) has no element with allowed = %d", c->desc, r, col, want);
}

static uint8_t *mask_at(xcfg *c, int32_t b, int32_t h, int32_t tq)
{
    return c->dense + (((size_t)b * c->hm + h) * c->s.lq + tq) * c->s.lk;
}

/* Block-structured random bits: each 8 x 8 patch all 0, all 1, half random, one bit set or
 * one bit clear, so that tiles of every kind occur at every block size (uniform bits would make
 * no tile full) and a tile one element short of full too. */
static void fill_sparse(xcfg *c, uint64_t *st)
{
    for (int32_t b = 0; b < c->bm; b++)
        for (int32_t h = 0; h < c->hm; h++)
            for (int32_t pq = 0; pq < c->s.lq; pq += 8)
                for (int32_t pk = 0; pk < c->s.lk; pk += 8) {
                    /* 0-3 zero, 4-7 one, 8 random, 9 one bit set, 10 one bit clear */
                    int mode = rng_int(st, 0, 10);
                    int32_t one = rng_int(st, 0, 63);
                    for (int32_t i = pq; i < pq + 8 && i < c->s.lq; i++)
                        for (int32_t j = pk; j < pk + 8 && j < c->s.lk; j++) {
                            int at = (i - pq) * 8 + (j - pk) == one;
                            mask_at(c, b, h, i)[j] = mode < 4 ? 0 : mode < 8 ? 1
                                                   : mode == 8 ? rng_int(st, 0, 1)
                                                   : mode == 9 ? at : !at;
                        }
                }
}

static void alloc_dense(xcfg *c)
{
    size_t n = (size_t)c->bm * c->hm * c->s.lq * c->s.lk;
    c->dense = calloc(n + 1, 1);
    cr_assert(c->dense);
}

/* The dense mask packed into x (again, after the test changed it). */
static void pack_x(xcfg *c)
{
    size_t rows = (size_t)c->bm * c->hm * c->s.lq;
    free(c->bits);
    c->bits = malloc(rows * (size_t)xmask_row_bytes(c->s.lk) + 1);
    cr_assert(c->bits);
    attn_xmask_pack(c->dense, rows, c->s.lk, c->bits);
    c->x = (attn_xmask){c->bits, c->bm, c->hm, c->s.lq, c->s.lk};
}

static void free_cfg(xcfg *c)
{
    free(c->dense);
    free(c->bits);
    seq_free(&c->s);
}

static int32_t random_len(uint64_t *st)
{
    static const int32_t edge[] = {0, 1, 15, 16, 17, 31, 32, 33, 64, 65, 100};
    return rng_int(st, 0, 2) ? rng_int(st, 1, 110) : edge[rng_int(st, 0, 10)];
}

/* A random configuration of the given kind. */
static void random_cfg(uint64_t seed, xkind kind, xcfg *c)
{
    uint64_t st = seed * 6151 + 17 + (uint64_t)kind;
    fc_err err;
    memset(c, 0, sizeof *c);
    c->qb = 16 << rng_int(&st, 0, 2);
    c->kb = 16 << rng_int(&st, 0, 2);
    c->hq = rng_int(&st, 1, 3);
    c->bm = c->hm = 1;
    int32_t batch = 1;
    if (kind == PREFIX_LM) {
        /* bidirectional over each batch entry's prefix, causal after (PaliGemma): no family */
        batch = rng_int(&st, 1, 3);
        int32_t l = random_len(&st);
        cr_assert_eq(seq_init_dense(&c->s, batch, l, l, &err), FC_OK);
        c->bm = batch;
        alloc_dense(c);
        for (int32_t b = 0; b < batch; b++) {
            int32_t prefix = rng_int(&st, 0, l);
            for (int32_t i = 0; i < l; i++)
                for (int32_t j = 0; j < l; j++)
                    mask_at(c, b, 0, i)[j] = j < prefix || j <= i;
        }
    } else if (kind == TREE) {
        /* speculative decoding: n draft queries after ctx keys, each seeing the context and
         * its ancestors in the draft tree (EAGLE); causal on (bottom-right: the draft tokens
         * are the sequence's last) */
        int32_t ctx = rng_int(&st, 0, 80), n = rng_int(&st, 1, 60);
        cr_assert_eq(seq_init_dense(&c->s, 1, n, ctx + n, &err), FC_OK);
        c->m.causal = 1;
        alloc_dense(c);
        int32_t parent[64];
        for (int32_t i = 0; i < n; i++) {
            parent[i] = i ? rng_int(&st, -1, i - 1) : -1;
            uint8_t *row = mask_at(c, 0, 0, i);
            memset(row, 1, (size_t)ctx);
            for (int32_t a = i; a >= 0; a = parent[a])
                row[ctx + a] = 1;
        }
    } else if (kind == SPARSE) {
        /* per head (hm = Hq) or one for all, with random families on top */
        int32_t lq = random_len(&st), lk = random_len(&st);
        batch = rng_int(&st, 1, 2);
        cr_assert_eq(seq_init_dense(&c->s, batch, lq, lk, &err), FC_OK);
        c->m.causal = rng_int(&st, 0, 1);
        c->m.sliding_window = rng_int(&st, 0, 2) ? 0 : rng_int(&st, 1, 70);
        c->bm = rng_int(&st, 0, 1) ? batch : 1;
        c->hm = rng_int(&st, 0, 2) ? c->hq : 1;
        alloc_dense(c);
        if (rng_int(&st, 0, 2)) {
            fill_sparse(c, &st);
        } else { /* nearly all allowed: a few elements off, so tiles one short of full */
            memset(c->dense, 1, (size_t)c->bm * c->hm * lq * lk);
            c->m.sliding_window = 0;
            for (int32_t b = 0; lq && lk && b < c->bm; b++)
                for (int32_t h = 0; h < c->hm; h++)
                    for (int32_t n = rng_int(&st, 1, 4); n > 0; n--)
                        mask_at(c, b, h, rng_int(&st, 0, lq - 1))[rng_int(&st, 0, lk - 1)] = 0;
        }
    } else {
        int32_t n = rng_int(&st, 1, 3), cq[4] = {0}, ck[4] = {0};
        for (int32_t i = 1; i <= n; i++) {
            ck[i] = ck[i - 1] + rng_int(&st, 0, 50);
            cq[i] = cq[i - 1] + rng_int(&st, 0, ck[i] - ck[i - 1]);
        }
        cr_assert_eq(seq_init_packed(&c->s, n, cq, ck, &err), FC_OK);
        c->m.causal = rng_int(&st, 0, 1);
        c->hm = rng_int(&st, 0, 1) ? c->hq : 1;
        alloc_dense(c);
        fill_sparse(c, &st);
    }
    pack_x(c);
    snprintf(c->desc, sizeof c->desc, "seed %llu %s: qb %d kb %d B %d [Bm %d, Hm %d] Hq %d "
             "lq %d lk %d causal %d W %d", (unsigned long long)seed, kind_names[kind], c->qb,
             c->kb, batch, c->bm, c->hm, c->hq, c->s.lq, c->s.lk, c->m.causal,
             c->m.sliding_window);
}

/* The kind row (b, h, r) of bm lists tile col as: 0 nowhere, 1 partial, 2 full. */
static int listed_kind(const bmask *bm, int32_t b, int32_t h, int32_t r, int32_t col)
{
    size_t row = bmask_row(bm, b, h, r);
    for (int full = 0; full < 2; full++)
        for (int32_t j = 0; j < (full ? bm->full_kv_num_blocks : bm->kv_num_blocks)[row]; j++)
            if (bmask_ids(bm, full, row)[j] == col)
                return full ? 2 : 1;
    return 0;
}

/* The slow builder's mask: nb = Bm, nh = Hm, valid, compact and ascending, each tile listed as
 * the oracle classifies it. */
static void check_slow(const xcfg *c)
{
    bmask bm;
    fc_err err;
    cr_assert_eq(bmask_build_slow_x(&bm, c->m, &c->s, c->x, c->qb, c->kb, &err), FC_OK, "%s: %s",
                 c->desc, err.msg);
    cr_assert(bm.nb == c->bm && bm.nh == c->hm, "%s: [%d, %d]", c->desc, bm.nb, bm.nh);
    cr_assert_eq(bmask_validate(&bm, &err), FC_OK, "%s: %s", c->desc, err.msg);
    for (size_t row = 0; row < bmask_nrows(&bm); row++)
        for (int full = 0; full < 2; full++) {
            int32_t n = (full ? bm.full_kv_num_blocks : bm.kv_num_blocks)[row];
            cr_assert_eq(bmask_capacity(&bm, full, row), n, "%s: row %zu not compact", c->desc,
                         row);
            for (int32_t j = 1; j < n; j++)
                cr_assert(bmask_ids(&bm, full, row)[j] > bmask_ids(&bm, full, row)[j - 1],
                          "%s: row %zu not ascending", c->desc, row);
        }
    for (int32_t b = 0; b < c->bm; b++)
        for (int32_t h = 0; h < c->hm; h++)
            for (int32_t r = 0; r < bm.nqb; r++)
                for (int32_t col = 0; col < bm.nkb; col++) {
                    int want = oracle_tile(c, b, h, r, col), got = listed_kind(&bm, b, h, r, col);
                    cr_assert_eq(got, want, "%s: (b %d, h %d) tile (%d, %d) listed %d, oracle %d",
                                 c->desc, b, h, r, col, got, want);
                }
    cr_assert_eq(bmask_check_exact_x(&bm, c->m, &c->s, c->x, &err), FC_OK, "%s: %s", c->desc,
                 err.msg);
    bmask_free(&bm);
}

static const char *const tile_kind_name[] = {"empty", "partial", "full"};

/* A rectangular mask of leading dims [nb, nh]: each stored row lists what the oracle makes the
 * tile for the row's own (b, h) (the mask's (0, 0) where the row broadcasts), each tile changed
 * with probability 1/8, ids in descending order (order is no part of a list). */
static void corrupt(uint64_t seed, const xcfg *c, int32_t nb, int32_t nh, bmask *bad)
{
    uint64_t st = seed * 104729 + 11;
    fc_err err;
    cr_assert_eq(bmask_alloc(bad, c->qb, c->kb, c->s.lq, c->s.lk, nb, nh,
                             bmask_nblocks(c->s.lk, c->kb), &err), FC_OK, "%s", err.msg);
    for (int32_t b = 0; b < nb; b++)
        for (int32_t h = 0; h < nh; h++)
            for (int32_t r = 0; r < bad->nqb; r++) {
                size_t row = bmask_row(bad, b, h, r);
                for (int32_t col = bad->nkb - 1; col >= 0; col--) {
                    int k = oracle_tile(c, b, h, r, col);
                    if (rng_int(&st, 0, 7) == 0)
                        k = rng_int(&st, 0, 2);
                    if (k)
                        bmask_ids(bad, k == 2, row)[(k == 2 ? bad->full_kv_num_blocks
                                                            : bad->kv_num_blocks)[row]++] = col;
                }
            }
}

/* The three checks on a corrupted mask of leading dims [nb, nh], against the oracle walked over
 * every (b, h) a stored row stands for, in (b, h, r, tile) order. */
static void check_checks(uint64_t seed, const xcfg *c, int32_t nb, int32_t nh)
{
    bmask bad;
    corrupt(seed, c, nb, nh, &bad);
    int32_t NB = nb > c->bm ? nb : c->bm, NH = nh > c->hm ? nh : c->hm;
    bmask_defects want = {0}, got;
    char sound[256] = "", exact[256] = "", what[256];
    for (int32_t b = 0; b < NB; b++)
        for (int32_t h = 0; h < NH; h++)
            for (int32_t r = 0; r < bad.nqb; r++) {
                int32_t first_bad = -1, first_drop = 0;
                for (int32_t col = 0; col < bad.nkb; col++) {
                    int k = oracle_tile(c, b, h, r, col), l = listed_kind(&bad, b, h, r, col);
                    int drop = l == 0 && k != 0, leak = l == 2 && k != 2;
                    bmask_tile t = {b, h, r, col};
                    if (drop && want.dropped++ == 0) {
                        want.first_dropped = t;
                        oracle_first_pair(c, b, h, r, col, 1, &want.dropped_pair.tq,
                                          &want.dropped_pair.tk);
                    }
                    if (leak && want.leaked++ == 0) {
                        want.first_leaked = t;
                        oracle_first_pair(c, b, h, r, col, 0, &want.leaked_pair.tq,
                                          &want.leaked_pair.tk);
                    }
                    want.wasted += l == 1 && k == 0;
                    if ((drop || leak) && first_bad < 0) {
                        first_bad = col;
                        first_drop = drop;
                    }
                    if (l != k && !exact[0])
                        snprintf(exact, sizeof exact, "row [%d][%d][%d], kv block %d: listed %s, "
                                 "the mask makes it %s", b, h, r, col, tile_kind_name[l],
                                 tile_kind_name[k]);
                }
                if (first_bad >= 0 && !sound[0]) {
                    int32_t tq, tk;
                    oracle_first_pair(c, b, h, r, first_bad, first_drop, &tq, &tk);
                    if (first_drop)
                        snprintf(sound, sizeof sound, "row [%d][%d][%d]: allowed pair (q %d, k "
                                 "%d) lies in kv block %d, which is not listed", b, h, r, tq, tk,
                                 first_bad);
                    else
                        snprintf(sound, sizeof sound, "row [%d][%d][%d]: kv block %d is listed "
                                 "full but pair (q %d, k %d) is not allowed", b, h, r, first_bad,
                                 tq, tk);
                }
            }
    snprintf(what, sizeof what, "%s, stored [%d, %d]", c->desc, nb, nh);
    fc_err err;
    cr_assert_eq(bmask_find_defects_x(&bad, c->m, &c->s, c->x, &got, &err), FC_OK, "%s: %s",
                 what, err.msg);
    cr_assert(got.dropped == want.dropped && got.leaked == want.leaked &&
                  got.wasted == want.wasted, "%s: defects %lld/%lld/%lld, oracle %lld/%lld/%lld",
              what, (long long)got.dropped, (long long)got.leaked, (long long)got.wasted,
              (long long)want.dropped, (long long)want.leaked, (long long)want.wasted);
    cr_assert(!want.dropped || (!memcmp(&got.first_dropped, &want.first_dropped,
                                        sizeof(bmask_tile)) &&
                                !memcmp(&got.dropped_pair, &want.dropped_pair,
                                        sizeof(bmask_pair))),
              "%s: first dropped (%d, %d, %d, %d) at (q %d, k %d), oracle (%d, %d, %d, %d) at "
              "(q %d, k %d)", what, got.first_dropped.b, got.first_dropped.h, got.first_dropped.r,
              got.first_dropped.c, got.dropped_pair.tq, got.dropped_pair.tk,
              want.first_dropped.b, want.first_dropped.h, want.first_dropped.r,
              want.first_dropped.c, want.dropped_pair.tq, want.dropped_pair.tk);
    cr_assert(!want.leaked || (!memcmp(&got.first_leaked, &want.first_leaked,
                                       sizeof(bmask_tile)) &&
                               !memcmp(&got.leaked_pair, &want.leaked_pair, sizeof(bmask_pair))),
              "%s: first leaked (%d, %d, %d, %d) at (q %d, k %d)", what, got.first_leaked.b,
              got.first_leaked.h, got.first_leaked.r, got.first_leaked.c, got.leaked_pair.tq,
              got.leaked_pair.tk);
    fc_status st = bmask_check_sound_x(&bad, c->m, &c->s, c->x, &err);
    cr_assert_eq(st, sound[0] ? FC_EFAIL : FC_OK, "%s: sound %d: %s", what, st, err.msg);
    cr_assert(!sound[0] || strstr(err.msg, sound), "%s:\n got  %s\n want %s", what, err.msg,
              sound);
    st = bmask_check_exact_x(&bad, c->m, &c->s, c->x, &err);
    cr_assert_eq(st, exact[0] ? FC_EFAIL : FC_OK, "%s: exact %d: %s", what, st, err.msg);
    cr_assert(!exact[0] || !strcmp(err.msg, exact), "%s:\n got  %s\n want %s", what, err.msg,
              exact);
    bmask_free(&bad);
}

#define NSEEDS 150

Test(bmask_x, slow_builder_matches_the_brute_force_tile_oracle)
{
    for (uint64_t seed = 0; seed < NSEEDS; seed++)
        for (int k = 0; k < NKINDS; k++) {
            xcfg c;
            random_cfg(seed, (xkind)k, &c);
            check_slow(&c);
            free_cfg(&c);
        }
}

Test(bmask_x, checks_match_the_oracle_on_corrupted_masks_stored_per_head_or_broadcast)
{
    for (uint64_t seed = 0; seed < NSEEDS; seed++)
        for (int k = 0; k < NKINDS; k++) {
            xcfg c;
            random_cfg(seed, (xkind)k, &c);
            int32_t batch = c.s.batch;
            /* every leading-dim form a producer may store: broadcast or full, each dim */
            check_checks(seed, &c, 1, 1);
            check_checks(seed + 1000, &c, batch, c.hq);
            check_checks(seed + 2000, &c, 1, c.hq);
            free_cfg(&c);
        }
}

/* An all-ones explicit mask is no mask: the slow builder's lists are bitwise the families',
 * and the families' direct mask is exact for it. */
Test(bmask_x, an_all_ones_explicit_mask_changes_no_bit_of_the_family_masks)
{
    for (uint64_t seed = 0; seed < 60; seed++) {
        xcfg c;
        random_cfg(seed, SPARSE, &c);
        c.bm = c.hm = 1;
        free(c.dense);
        alloc_dense(&c);
        memset(c.dense, 1, (size_t)c.s.lq * c.s.lk);
        pack_x(&c);
        bmask a, b, d;
        fc_err err;
        cr_assert_eq(bmask_build_slow(&a, c.m, &c.s, c.qb, c.kb, &err), FC_OK, "%s", err.msg);
        cr_assert_eq(bmask_build_slow_x(&b, c.m, &c.s, c.x, c.qb, c.kb, &err), FC_OK, "%s",
                     err.msg);
        cr_assert(a.nb == b.nb && a.nh == b.nh && a.width == b.width &&
                  a.full_width == b.full_width, "%s", c.desc);
        size_t n = bmask_nrows(&a);
        cr_assert(!memcmp(a.kv_num_blocks, b.kv_num_blocks, n * sizeof(int32_t)) &&
                  !memcmp(a.full_kv_num_blocks, b.full_kv_num_blocks, n * sizeof(int32_t)) &&
                  !memcmp(a.kv_offsets, b.kv_offsets, (n + 1) * sizeof(int64_t)) &&
                  !memcmp(a.full_kv_offsets, b.full_kv_offsets, (n + 1) * sizeof(int64_t)) &&
                  !memcmp(a.kv_indices, b.kv_indices, (size_t)a.kv_offsets[n] * 4) &&
                  !memcmp(a.full_kv_indices, b.full_kv_indices,
                          (size_t)a.full_kv_offsets[n] * 4), "%s: lists differ", c.desc);
        cr_assert_eq(bmask_build(&d, BMASK_DIRECT, c.m, &c.s, c.qb, c.kb, &err), FC_OK);
        cr_assert_eq(bmask_check_exact_x(&d, c.m, &c.s, c.x, &err), FC_OK, "%s: %s", c.desc,
                     err.msg);
        bmask_free(&a);
        bmask_free(&b);
        bmask_free(&d);
        free_cfg(&c);
    }
}

Test(bmask_x, direct_refuses_an_explicit_mask_and_superset_stays_sound)
{
    for (uint64_t seed = 0; seed < 40; seed++) {
        xcfg c;
        random_cfg(seed, (xkind)(seed % NKINDS), &c);
        bmask bm, slow;
        fc_err err;
        cr_assert_eq(bmask_build_x(&bm, BMASK_DIRECT, c.m, &c.s, c.x, c.qb, c.kb, &err),
                     FC_EUNSUP, "%s", c.desc);
        cr_assert(strstr(err.msg, "direct") && strstr(err.msg, "slow builder"), "%s", err.msg);
        for (int b = BMASK_SUPERSET; b <= BMASK_SUPERSET_TRIM; b++) {
            cr_assert_eq(bmask_build_x(&bm, (bmask_builder)b, c.m, &c.s, c.x, c.qb, c.kb, &err),
                         FC_OK, "%s: %s", c.desc, err.msg);
            cr_assert_eq(bmask_check_sound_x(&bm, c.m, &c.s, c.x, &err), FC_OK, "%s: %s",
                         c.desc, err.msg);
            bmask_free(&bm);
        }
        cr_assert_eq(bmask_build_x(&bm, BMASK_SLOW, c.m, &c.s, c.x, c.qb, c.kb, &err), FC_OK);
        cr_assert_eq(bmask_build_slow_x(&slow, c.m, &c.s, c.x, c.qb, c.kb, &err), FC_OK);
        cr_assert_eq(bmask_compare(&bm, &slow, &err), FC_OK, "%s: %s", c.desc, err.msg);
        bmask_free(&bm);
        bmask_free(&slow);
        free_cfg(&c);
    }
}

/* A per-head mask: head 2 allows what head 0 does not. Built for head 0 alone and stored with
 * one head (PyTorch's create_block_mask with H=None on a mask_mod that reads h), the list is
 * held to every head and drops head 2's tile; stored per head it is exact. */
Test(bmask_x, a_one_head_list_of_a_per_head_mask_is_held_to_every_head)
{
    xcfg c;
    fc_err err;
    memset(&c, 0, sizeof c);
    cr_assert_eq(seq_init_dense(&c.s, 1, 32, 64, &err), FC_OK);
    c.bm = 1;
    c.hm = c.hq = 3;
    c.qb = c.kb = 16;
    alloc_dense(&c);
    for (int32_t h = 0; h < 3; h++)
        for (int32_t i = 0; i < 32; i++)
            for (int32_t j = 0; j < 64; j++)
                mask_at(&c, 0, h, i)[j] = j < 16 || (h == 2 && i == 20 && j == 50);
    pack_x(&c);
    strcpy(c.desc, "per-head");
    bmask per_head, one;
    cr_assert_eq(bmask_build_slow_x(&per_head, c.m, &c.s, c.x, 16, 16, &err), FC_OK);
    cr_assert_eq(per_head.nh, 3);
    cr_assert_eq(bmask_check_exact_x(&per_head, c.m, &c.s, c.x, &err), FC_OK, "%s", err.msg);
    attn_xmask head0 = c.x; /* head 0's rows alone: one head */
    head0.hm = 1;
    cr_assert_eq(bmask_build_slow_x(&one, c.m, &c.s, head0, 16, 16, &err), FC_OK);
    cr_assert_eq(one.nh, 1);
    cr_assert_eq(bmask_check_sound_x(&one, c.m, &c.s, c.x, &err), FC_EFAIL);
    cr_assert(strstr(err.msg, "row [0][2][1]: allowed pair (q 20, k 50) lies in kv block 3"),
              "%s", err.msg);
    bmask_defects d;
    cr_assert_eq(bmask_find_defects_x(&one, c.m, &c.s, c.x, &d, &err), FC_OK, "%s", err.msg);
    cr_assert(d.dropped == 1 && d.leaked == 0 && d.first_dropped.h == 2);
    bmask_free(&per_head);
    bmask_free(&one);
    free_cfg(&c);
}

Test(bmask_x, leading_dims_that_do_not_broadcast_and_a_mask_of_another_grid_are_refused)
{
    xcfg c;
    random_cfg(3, SPARSE, &c);
    fc_err err;
    bmask bm;
    c.x.bm = 1;
    c.x.hm = 3; /* a per-head mask of 3 heads against a mask stored for 2 */
    cr_assert_eq(bmask_alloc(&bm, c.qb, c.kb, c.s.lq, c.s.lk, 1, 2, 1, &err), FC_OK);
    cr_assert_eq(bmask_check_sound_x(&bm, c.m, &c.s, c.x, &err), FC_EINVAL);
    cr_assert(strstr(err.msg, "leading dims [1, 2] and the explicit mask's [1, 3] do not "
                     "broadcast"), "%s", err.msg);
    c.x.hm = 1;
    c.x.lk = c.s.lk + 1;
    cr_assert_eq(bmask_check_exact_x(&bm, c.m, &c.s, c.x, &err), FC_EINVAL);
    cr_assert(strstr(err.msg, "explicit mask: its grid is"), "%s", err.msg);
    bmask out;
    cr_assert_eq(bmask_build_slow_x(&out, c.m, &c.s, c.x, c.qb, c.kb, &err), FC_EINVAL);
    bmask_free(&bm);
    free_cfg(&c);
}

/* The example: an EAGLE-style draft tree of 8 tokens after 40 context keys, 16 x 16
 * tiles. Draft token 6 (query 6) descends from draft token 1, key 41 (kv block 2, keys
 * [32, 48)); a producer's list that leaves out kv block 2 for query tile 0 is named with the
 * tile and that draft token's element. */
Test(bmask_x, a_tree_masks_list_that_drops_a_draft_tokens_tile_is_named)
{
    static const int32_t parent[8] = {-1, 0, 0, 1, 1, 2, 1, 6};
    xcfg c;
    fc_err err;
    memset(&c, 0, sizeof c);
    cr_assert_eq(seq_init_dense(&c.s, 1, 8, 48, &err), FC_OK);
    c.m.causal = 1;
    c.bm = c.hm = c.hq = 1;
    c.qb = c.kb = 16;
    alloc_dense(&c);
    for (int32_t i = 0; i < 8; i++) {
        memset(mask_at(&c, 0, 0, i), 1, 40);
        for (int32_t a = i; a >= 0; a = parent[a])
            mask_at(&c, 0, 0, i)[40 + a] = 1;
    }
    pack_x(&c);
    bmask bm;
    cr_assert_eq(bmask_build_slow_x(&bm, c.m, &c.s, c.x, 16, 16, &err), FC_OK);
    /* every tile partial: the query tile is ragged (8 of 16 rows); block 2 holds keys 32-39
     * (context) and the draft */
    cr_assert(bm.full_kv_num_blocks[0] == 0 && bm.kv_num_blocks[0] == 3 &&
              bmask_ids(&bm, 0, 0)[2] == 2);
    bmask_defects d;
    cr_assert_eq(bmask_find_defects_x(&bm, c.m, &c.s, c.x, &d, &err), FC_OK);
    char text[512];
    bmask_defects_text(text, sizeof text, &bm, &d);
    cr_assert_str_eq(text, "sound");
    bmask wide; /* PyTorch's shape: room in each row to list another tile */
    cr_assert_eq(bmask_copy_width(&bm, bm.nkb, &wide, &err), FC_OK);
    bmask_free(&bm);
    bm = wide;
    bm.kv_num_blocks[0] = 2; /* the draft's tile dropped */
    cr_assert_eq(bmask_find_defects_x(&bm, c.m, &c.s, c.x, &d, &err), FC_OK);
    bmask_defects_text(text, sizeof text, &bm, &d);
    cr_assert(strstr(text, "NOT SOUND: drops keys: 1 tiles with allowed keys are listed nowhere "
                     "(first: (b, h) = (0, 0) query tile 0 [tokens 0, 16) kv block 2 [keys 32, "
                     "48), allowed pair (q 0, k 32))"), "%s", text);
    /* with a context of 32 keys, block 2 holds the draft alone: the draft token's own key is
     * the element named */
    for (int32_t i = 0; i < 8; i++)
        memset(mask_at(&c, 0, 0, i) + 32, 0, 8); /* context ends at 32 now */
    pack_x(&c);
    cr_assert_eq(bmask_check_sound_x(&bm, c.m, &c.s, c.x, &err), FC_EFAIL);
    cr_assert(strstr(err.msg, "allowed pair (q 0, k 40) lies in kv block 2, which is not listed"),
              "%s", err.msg);
    /* a full listing of a tile with a masked draft element leaks: named by that element */
    bmask_ids(&bm, 1, 0)[0] = 2;
    bm.full_kv_num_blocks[0] = 1;
    cr_assert_eq(bmask_check_sound_x(&bm, c.m, &c.s, c.x, &err), FC_EFAIL);
    cr_assert(strstr(err.msg, "kv block 2 is listed full but pair (q 0, k 32) is not allowed"),
              "%s", err.msg);
    bmask_free(&bm);
    free_cfg(&c);
}

/* A generated case (causal, 2 heads) given a per-head draft-tree mask: its oracle recomputed
 * with the mask, its stored block mask the slow builder's. fix_check_case holds the stored
 * mask to the families AND the explicit mask: exact as built; a dropped draft tile is unsound,
 * named; a tile listed partial that only the families allow is inexact, named. */
Test(bmask_x, fix_check_case_holds_a_stored_block_mask_to_the_explicit_mask)
{
    fix_gen_params gp = {.name = "tree", .dtype = FC_F32, .b = 1, .hq = 2, .hkv = 1, .lq = 8,
                         .lk = 48, .d = 16, .dv = 16, .mask = {.causal = 1}, .qb = 16, .kb = 16,
                         .seed = 5, .with_bmask = 1};
    fix_case c;
    fc_err err;
    cr_assert_eq(fix_gen_case(&gp, &c, &err), FC_OK, "%s", err.msg);
    xcfg x;
    memset(&x, 0, sizeof x);
    x.s = c.prob.seq; /* borrowed: free_cfg is not called */
    x.m = c.prob.mask;
    x.bm = 1;
    x.hm = x.hq = 2;
    x.qb = x.kb = 16;
    alloc_dense(&x);
    /* head 0 a chain after 40 context keys; head 1 a star, blind to context keys 32-39 (so
     * that its first allowed element of kv block 2 is a draft token's, not a context key) */
    for (int32_t h = 0; h < 2; h++)
        for (int32_t i = 0; i < 8; i++) {
            memset(mask_at(&x, 0, h, i), 1, h ? 32 : 40);
            for (int32_t a = i; a >= 0; a = h ? (a ? 0 : -1) : a - 1)
                mask_at(&x, 0, h, i)[40 + a] = 1;
        }
    pack_x(&x);
    c.prob.xmask = x.x;
    cr_assert_eq(ref_attention_f64(&c.prob, c.q, c.k, c.v, c.out, c.lse, &err), FC_OK);
    bmask_free(&c.bm);
    cr_assert_eq(bmask_build_slow_x(&c.bm, c.prob.mask, &c.prob.seq, x.x, 16, 16, &err), FC_OK);
    fix_check_result r;
    cr_assert_eq(fix_check_case(&c, FIX_BACKEND_REF, 1, &r, &err), FC_OK, "%s", err.msg);
    cr_assert(r.passed && r.bmask_checked && r.bmask_exact, "%s", r.detail);
    /* head 1 (a star) reaches kv block 2 for its draft keys: drop it */
    size_t row = bmask_row(&c.bm, 0, 1, 0);
    int32_t n = c.bm.kv_num_blocks[row];
    cr_assert(n > 0 && bmask_ids(&c.bm, 0, row)[n - 1] == 2);
    c.bm.kv_num_blocks[row] = n - 1;
    int32_t tq, tk;
    oracle_first_pair(&x, 0, 1, 0, 2, 1, &tq, &tk);
    char want[160];
    cr_assert_eq(tk, 40, "the draft root's key");
    snprintf(want, sizeof want, "block_mask is not sound: row [0][1][0]: allowed pair (q %d, k %d) "
             "lies in kv block 2", tq, tk);
    cr_assert_eq(fix_check_case(&c, FIX_BACKEND_REF, 0, &r, &err), FC_OK, "%s", err.msg);
    cr_assert(!r.passed && strstr(r.detail, want), "%s\nwant %s", r.detail, want);
    c.bm.kv_num_blocks[row] = n;
    /* head 1 made blind to context keys 0-15 after the lists were built: its kv block 0 is
     * listed partial and holds nothing allowed now: sound (wasted work), not exact */
    for (int32_t i = 0; i < 8; i++)
        memset(mask_at(&x, 0, 1, i), 0, 16);
    pack_x(&x);
    c.prob.xmask = x.x;
    cr_assert_eq(ref_attention_f64(&c.prob, c.q, c.k, c.v, c.out, c.lse, &err), FC_OK);
    cr_assert_eq(fix_check_case(&c, FIX_BACKEND_REF, 0, &r, &err), FC_OK, "%s", err.msg);
    cr_assert(r.passed && !r.bmask_exact, "%s", r.detail);
    cr_assert_eq(fix_check_case(&c, FIX_BACKEND_REF, 1, &r, &err), FC_OK, "%s", err.msg);
    cr_assert(!r.passed && strstr(r.detail, "block_mask differs from the slow builder's: row "
                                  "[0][1][0], kv block 0: listed partial, the mask makes it "
                                  "empty"), "%s", r.detail);
    /* check's kernel runs read the explicit mask too: with the stored block mask (sound) and
     * the slow builder's (the direct one cannot read the explicit mask), kernel 1 passes
     * (kernel 2 has no D = 16 instance; tests/test_kernel_v2.c runs it on explicit terms) */
    chk_opts o = {.kernel_backend = 1, .be = GPU_BACKEND_EMU, .kernel = 1};
    chk_tally t = {0};
    int skipped = 0;
    memset(&r, 0, sizeof r);
    r.passed = 1;
    chk_case_kernel("mem", &c, &o, NULL, &r, &skipped, &t);
    cr_assert(skipped == 0 && r.passed, "%s", r.detail);
    /* a layout's shared block mask is keyed on the explicit mask too: the same mask reuses
     * it; another one (head 0 blind to context keys 0-15, so its kv block 0 turns from full
     * to empty) rebuilds it, and the kernel passes with it */
    chk_layer_meta meta;
    memset(&meta, 0, sizeof meta);
    for (int i = 0; i < 3; i++) {
        if (i == 2) {
            for (int32_t q = 0; q < 8; q++)
                memset(mask_at(&x, 0, 0, q), 0, 16);
            pack_x(&x);
            c.prob.xmask = x.x;
            cr_assert_eq(ref_attention_f64(&c.prob, c.q, c.k, c.v, c.out, c.lse, &err), FC_OK);
            bmask_free(&c.bm); /* the stored one, rebuilt for the new mask */
            cr_assert_eq(bmask_build_slow_x(&c.bm, c.prob.mask, &c.prob.seq, x.x, 16, 16, &err),
                         FC_OK);
        }
        memset(&r, 0, sizeof r);
        r.passed = 1;
        chk_case_kernel("mem", &c, &o, &meta, &r, &skipped, &t);
        cr_assert(skipped == 0 && r.passed, "run %d: %s", i, r.detail);
    }
    cr_assert_eq(meta.rebuilds, 2, "the shared block mask built %d times", meta.rebuilds);
    chk_meta_free(&meta);
    chk_tally_free(&t);
    free(x.dense);
    free(x.bits);
    c.prob.xmask = (attn_xmask){0};
    fix_case_free(&c);
}
