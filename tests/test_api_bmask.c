/*
 * test_api_bmask.c - a producer's block mask through the public C API (API version 5,
 * include/flexcheck.h, docs/semantics.md section 4): speculative-decoding draft trees, 24 draft
 * queries after 40 context keys, a different tree for each of 2 heads (head 1 also blind to the
 * first 16 context keys), as an explicit per-head mask with causal on. The right output with
 * the exact block mask passes; the same output with a list that drops a draft token's tile, or
 * marks full a tile with a masked element, fails, the tile and element named; a one-head list
 * is held to both heads; bad arrays are refused naming the array, the element and its value;
 * the arrays are copied; a shape set afterwards is refused; the budget counts the copy.
 * Outputs, tile kinds and the elements named are computed here from the dense mask, element
 * by element, not by flexcheck.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "include/flexcheck.h"

enum { HQ = 2, HKV = 1, LQ = 24, CTX = 40, LK = CTX + LQ, D = 16, BS = 16 };
enum { NQB = (LQ + BS - 1) / BS, NKB = (LK + BS - 1) / BS };

typedef struct tensors {
    float q[HQ * LQ * D], k[HKV * LK * D], v[HKV * LK * D];
    uint8_t mask[HQ * LQ * LK]; /* per head */
    float o[HQ * LQ * D], lse[HQ * LQ];
} tensors;

/* A producer's lists, PyTorch's shape [1, nh, NQB(, NKB)]. */
typedef struct lists {
    int32_t nh;
    int32_t kv_num[HQ * NQB], kv_idx[HQ * NQB * NKB];
    int32_t full_num[HQ * NQB], full_idx[HQ * NQB * NKB];
} lists;

/* Head 0's draft tree: tokens 1-3 children of 0, 4-7 of 1, then a chain; head 1's: a chain
 * from token 0 with every third token a new branch from the root. */
static int32_t parent(int h, int32_t i)
{
    if (i == 0)
        return -1;
    if (h == 0)
        return i <= 3 ? 0 : i <= 7 ? 1 : i - 1;
    return i % 3 == 0 ? 0 : i - 1;
}

static void inputs(tensors *t)
{
    unsigned s = 777;
    float *all[3] = {t->q, t->k, t->v};
    size_t n[3] = {HQ * LQ * D, HKV * LK * D, HKV * LK * D};
    for (int a = 0; a < 3; a++)
        for (size_t i = 0; i < n[a]; i++) {
            s = s * 1103515245u + 12345u;
            all[a][i] = (float)(((s >> 8) & 0xFFFF) / 32768.0 - 1.0);
        }
    memset(t->mask, 0, sizeof t->mask);
    for (int h = 0; h < HQ; h++)
        for (int32_t i = 0; i < LQ; i++) {
            uint8_t *row = t->mask + ((size_t)h * LQ + i) * LK;
            for (int32_t j = h == 1 ? 16 : 0; j < CTX; j++)
                row[j] = 1;
            for (int32_t a = i; a >= 0; a = parent(h, a))
                row[CTX + a] = 1;
        }
}

/* The draft tokens are the sequence's last LQ (bottom-right): query i at position CTX + i, so
 * causal allows every key the trees do. */
static int allowed(const tensors *t, int h, int32_t tq, int32_t tk)
{
    return tq < LQ && tk < LK && tk <= CTX + tq && t->mask[((size_t)h * LQ + tq) * LK + tk];
}

/* Softmax attention in float64 under the per-head mask; outputs rounded to float. */
static void attend(tensors *t)
{
    for (int h = 0; h < HQ; h++)
        for (int i = 0; i < LQ; i++) {
            const float *qr = t->q + ((size_t)h * LQ + i) * D;
            double s[LK], m = -INFINITY, l = 0, acc[D] = {0};
            for (int j = 0; j < LK; j++) {
                double dot = 0;
                for (int x = 0; x < D; x++)
                    dot += (double)qr[x] * t->k[j * D + x];
                s[j] = allowed(t, h, i, j) ? dot / sqrt((double)D) : -INFINITY;
                m = fmax(m, s[j]);
            }
            for (int j = 0; j < LK; j++) {
                double p = s[j] == -INFINITY ? 0 : exp(s[j] - m);
                l += p;
                for (int x = 0; x < D; x++)
                    acc[x] += p * t->v[j * D + x];
            }
            for (int x = 0; x < D; x++)
                t->o[((size_t)h * LQ + i) * D + x] = (float)(acc[x] / l);
            t->lse[h * LQ + i] = (float)(m + log(l));
        }
}

/* 0 empty, 1 partial, 2 full: tile (r, c) of head h, every element (padding rows past LQ
 * count as not allowed). */
static int tile_kind(const tensors *t, int h, int32_t r, int32_t c)
{
    int n = 0;
    for (int32_t tq = r * BS; tq < (r + 1) * BS; tq++)
        for (int32_t tk = c * BS; tk < (c + 1) * BS; tk++)
            n += allowed(t, h, tq, tk);
    return n == 0 ? 0 : n == BS * BS ? 2 : 1;
}

/* The first element of tile (r, c) of head h, rows then keys, with allowed == want. */
static void first_pair(const tensors *t, int h, int32_t r, int32_t c, int want, int32_t *tq,
                       int32_t *tk)
{
    for (*tq = r * BS; *tq < (r + 1) * BS; ++*tq)
        for (*tk = c * BS; *tk < (c + 1) * BS; ++*tk)
            if (allowed(t, h, *tq, *tk) == want)
                return;
    cr_assert_fail("tile (%d, %d) of head %d has no element allowed = %d", r, c, h, want);
}

/* The exact lists: per head (nh = HQ), or head 0's for every head (nh = 1); -1 past counts. */
static void exact_lists(const tensors *t, int32_t nh, lists *ls)
{
    ls->nh = nh;
    for (size_t i = 0; i < sizeof ls->kv_idx / sizeof *ls->kv_idx; i++)
        ls->kv_idx[i] = ls->full_idx[i] = -1;
    for (int h = 0; h < nh; h++)
        for (int32_t r = 0; r < NQB; r++) {
            int32_t row = h * NQB + r;
            ls->kv_num[row] = ls->full_num[row] = 0;
            for (int32_t c = 0; c < NKB; c++) {
                int k = tile_kind(t, h, r, c);
                if (k == 1)
                    ls->kv_idx[row * NKB + ls->kv_num[row]++] = c;
                if (k == 2)
                    ls->full_idx[row * NKB + ls->full_num[row]++] = c;
            }
        }
}

static flexcheck_status set_lists(flexcheck_problem *p, const lists *ls)
{
    return flexcheck_problem_set_block_mask(p, BS, BS, 1, ls->nh, NQB, ls->kv_num, ls->kv_idx,
                                            NKB, ls->full_num, ls->full_idx, NKB);
}

static flexcheck_problem *problem(const tensors *t)
{
    flexcheck_problem *p = flexcheck_problem_new();
    cr_assert(p);
    cr_assert_eq(flexcheck_problem_set_shape(p, 1, HQ, HKV, LQ, LK, D, D), FLEXCHECK_OK);
    cr_assert_eq(flexcheck_problem_set_mask(p, 1, 0, 0), FLEXCHECK_OK);
    cr_assert_eq(flexcheck_problem_set_explicit_mask(p, t->mask, 1, HQ, sizeof t->mask),
                 FLEXCHECK_OK, "%s", flexcheck_problem_errmsg(p));
    return p;
}

/* The verdict's outcome, reason and text. */
static flexcheck_outcome judged(flexcheck_problem *p, const tensors *t, char *reason,
                                char *text, size_t cap)
{
    flexcheck_verdict *v = NULL;
    cr_assert_eq(flexcheck_judge(p, t->q, HQ * LQ * D, t->k, HKV * LK * D, t->v, HKV * LK * D,
                                 t->o, HQ * LQ * D, t->lse, HQ * LQ, &v),
                 FLEXCHECK_OK, "%s", flexcheck_problem_errmsg(p));
    flexcheck_outcome oc = flexcheck_verdict_outcome(v);
    snprintf(reason, cap, "%s", flexcheck_verdict_reason(v));
    snprintf(text, cap, "%s", flexcheck_verdict_text(v));
    flexcheck_verdict_free(v);
    return oc;
}

Test(api_bmask, reports_version_5)
{
    cr_assert_geq(flexcheck_api_version(), 5);
}

Test(api_bmask, the_exact_per_head_lists_pass_with_the_right_output)
{
    static tensors t;
    static lists ls;
    static char reason[1024], text[8192];
    inputs(&t);
    attend(&t);
    flexcheck_problem *p = problem(&t);
    exact_lists(&t, HQ, &ls);
    cr_assert_eq(set_lists(p, &ls), FLEXCHECK_OK, "%s", flexcheck_problem_errmsg(p));
    cr_assert_eq(judged(p, &t, reason, text, sizeof text), FLEXCHECK_PASS, "%s", text);
    cr_assert(strstr(text, "its block mask (16x16): sound"), "%s", text);
    flexcheck_problem_free(p);
}

/* Head 1's query tile 1 loses kv block 3 from its partial list (lists per head). */
static void drop_draft_tile(lists *ls)
{
    int32_t row = 1 * NQB + 1, n = ls->kv_num[row], j = 0;
    while (j < n && ls->kv_idx[row * NKB + j] != 3)
        j++;
    cr_assert(j < n, "kv block 3 is partial for head 1's query tile 1");
    ls->kv_idx[row * NKB + j] = ls->kv_idx[row * NKB + n - 1];
    ls->kv_num[row] = n - 1;
}

/* Head 1's query tile 1 (draft tokens 16-23) needs kv block 3 (draft tokens 8-23: each token's
 * own key at least); the list leaves it out. */
Test(api_bmask, a_list_that_drops_a_draft_tokens_tile_fails_naming_tile_and_element)
{
    static tensors t;
    static lists ls;
    static char reason[1024], text[8192], want[256];
    inputs(&t);
    attend(&t);
    flexcheck_problem *p = problem(&t);
    exact_lists(&t, HQ, &ls);
    drop_draft_tile(&ls);
    cr_assert_eq(set_lists(p, &ls), FLEXCHECK_OK, "%s", flexcheck_problem_errmsg(p));
    int32_t tq, tk;
    first_pair(&t, 1, 1, 3, 1, &tq, &tk);
    snprintf(want, sizeof want, "(b, h) = (0, 1) query tile 1 [tokens 16, 32) kv block 3 [keys "
             "48, 64), allowed pair (q %d, k %d)", tq, tk);
    cr_assert_eq(judged(p, &t, reason, text, sizeof text), FLEXCHECK_FAIL, "%s", text);
    cr_assert(!strncmp(reason, "block-mask: the producer's block mask is NOT SOUND: drops keys: "
                       "1 tiles", 71) && strstr(reason, want), "%s\nwant %s", reason, want);
    cr_assert(strstr(text, want), "%s", text);
    flexcheck_problem_free(p);
}

/* The same dropped tile, with the output a kernel running that list computes (head 1's draft
 * tokens 16-23 never see keys 48-63, their own among them): the diagnosis names the block mask
 * as given for every failing row, its count of dropped and leaked tiles that of the brute-force
 * tile kinds here (one dropped, none leaked), under the explicit mask. */
Test(api_bmask, an_output_computed_without_the_dropped_tile_is_diagnosed_as_the_block_mask)
{
    static tensors t;
    static lists ls;
    static char text[8192];
    inputs(&t);
    exact_lists(&t, HQ, &ls);
    drop_draft_tile(&ls);
    /* the kernel's output: the mask without the dropped tile's pairs */
    static uint8_t saved[sizeof t.mask];
    memcpy(saved, t.mask, sizeof saved);
    for (int32_t tq = 16; tq < LQ; tq++)
        for (int32_t tk = 48; tk < LK; tk++)
            t.mask[((size_t)1 * LQ + tq) * LK + tk] = 0;
    attend(&t);
    memcpy(t.mask, saved, sizeof saved);
    flexcheck_problem *p = problem(&t);
    cr_assert_eq(set_lists(p, &ls), FLEXCHECK_OK, "%s", flexcheck_problem_errmsg(p));
    flexcheck_verdict *v = NULL;
    cr_assert_eq(flexcheck_judge(p, t.q, HQ * LQ * D, t.k, HKV * LK * D, t.v, HKV * LK * D, t.o,
                                 HQ * LQ * D, t.lse, HQ * LQ, &v),
                 FLEXCHECK_OK, "%s", flexcheck_problem_errmsg(p));
    snprintf(text, sizeof text, "%s", flexcheck_verdict_diagnosis(v));
    cr_assert_eq(flexcheck_verdict_outcome(v), FLEXCHECK_FAIL, "%s", text);
    cr_assert(strstr(text, "the block mask as given") &&
              strstr(text, "it drops 1 tiles and leaks 0"), "%s", text);
    cr_assert_eq(flexcheck_verdict_nfindings(v), 1, "%s", text);
    size_t rows = 0;
    cr_assert(strstr(flexcheck_verdict_finding(v, 0, &rows), "the block mask as given"), "%s",
              text);
    /* every one of head 1's rows 16-23 lost its own key: all 8 fail, all 8 explained */
    cr_assert_eq(rows, 8, "%s", text);
    flexcheck_verdict_free(v);
    flexcheck_problem_free(p);
}

/* Query tile 0's kv block 2 holds context keys 32-39 and draft tokens 0-7, which no draft
 * token sees all of: listed full, it leaks. */
Test(api_bmask, a_list_that_marks_full_a_tile_with_a_masked_element_fails)
{
    static tensors t;
    static lists ls;
    static char reason[1024], text[8192], want[256];
    inputs(&t);
    attend(&t);
    flexcheck_problem *p = problem(&t);
    exact_lists(&t, HQ, &ls);
    cr_assert_eq(tile_kind(&t, 0, 0, 2), 1);
    int32_t n = ls.kv_num[0], j = 0;
    while (j < n && ls.kv_idx[j] != 2)
        j++;
    cr_assert(j < n, "head 0 lists tile (0, 2) partial");
    ls.kv_idx[j] = ls.kv_idx[n - 1]; /* moved to the full list */
    ls.kv_num[0] = n - 1;
    ls.full_idx[ls.full_num[0]++] = 2;
    cr_assert_eq(set_lists(p, &ls), FLEXCHECK_OK, "%s", flexcheck_problem_errmsg(p));
    int32_t tq, tk;
    first_pair(&t, 0, 0, 2, 0, &tq, &tk);
    snprintf(want, sizeof want, "leaks keys: 1 tiles listed full hold masked pairs (first: (b, "
             "h) = (0, 0) query tile 0 [tokens 0, 16) kv block 2 [keys 32, 48), masked pair "
             "(q %d, k %d))", tq, tk);
    cr_assert_eq(judged(p, &t, reason, text, sizeof text), FLEXCHECK_FAIL, "%s", text);
    cr_assert(strstr(reason, "block-mask") && strstr(text, want), "%s\nwant %s", text, want);
    flexcheck_problem_free(p);
}

/* One list for both heads (PyTorch's H=None), made from head 0: kv block 0 is full for head 0
 * and empty for head 1 (blind to keys 0-15), so read for head 1 it leaks. */
Test(api_bmask, a_one_head_list_is_held_to_every_heads_mask)
{
    static tensors t;
    static lists ls;
    static char reason[1024], text[8192], want[256];
    inputs(&t);
    attend(&t);
    flexcheck_problem *p = problem(&t);
    exact_lists(&t, 1, &ls);
    cr_assert(tile_kind(&t, 0, 0, 0) == 2 && tile_kind(&t, 1, 0, 0) == 0);
    cr_assert_eq(set_lists(p, &ls), FLEXCHECK_OK, "%s", flexcheck_problem_errmsg(p));
    int32_t tq, tk;
    first_pair(&t, 1, 0, 0, 0, &tq, &tk);
    snprintf(want, sizeof want, "(b, h) = (0, 1) query tile 0 [tokens 0, 16) kv block 0 [keys "
             "0, 16), masked pair (q %d, k %d)", tq, tk);
    cr_assert_eq(judged(p, &t, reason, text, sizeof text), FLEXCHECK_FAIL, "%s", text);
    cr_assert(strstr(reason, "leaks keys") && strstr(reason, want), "%s\nwant %s", reason, want);
    flexcheck_problem_free(p);
}

/* Without an explicit mask, the families alone: causal's diagonal tile dropped. */
Test(api_bmask, a_family_mask_list_is_checked_too)
{
    static tensors t;
    static lists ls;
    static char reason[1024], text[8192];
    inputs(&t);
    memset(t.mask, 1, sizeof t.mask);
    attend(&t);
    flexcheck_problem *p = flexcheck_problem_new();
    cr_assert_eq(flexcheck_problem_set_shape(p, 1, HQ, HKV, LQ, LK, D, D), FLEXCHECK_OK);
    cr_assert_eq(flexcheck_problem_set_mask(p, 1, 0, 0), FLEXCHECK_OK);
    exact_lists(&t, 1, &ls);
    cr_assert_eq(set_lists(p, &ls), FLEXCHECK_OK, "%s", flexcheck_problem_errmsg(p));
    cr_assert_eq(judged(p, &t, reason, text, sizeof text), FLEXCHECK_PASS, "%s", text);
    ls.kv_num[NQB - 1] = 0; /* the last query tile's partial tiles: its diagonal */
    cr_assert_eq(set_lists(p, &ls), FLEXCHECK_OK, "%s", flexcheck_problem_errmsg(p));
    cr_assert_eq(judged(p, &t, reason, text, sizeof text), FLEXCHECK_FAIL, "%s", text);
    cr_assert(strstr(reason, "drops keys") && strstr(reason, "query tile 1 [tokens 16, 32)"),
              "%s", reason);
    flexcheck_problem_free(p);
}

static void refused(flexcheck_problem *p, flexcheck_status st, const char *want)
{
    cr_assert_eq(st, FLEXCHECK_EINVAL, "want a refusal naming \"%s\" (%s)", want,
                 flexcheck_problem_errmsg(p));
    cr_assert(strstr(flexcheck_problem_errmsg(p), want), "\"%s\" lacks \"%s\"",
              flexcheck_problem_errmsg(p), want);
}

Test(api_bmask, bad_lists_are_refused_naming_array_element_and_value)
{
    static tensors t;
    static lists ls;
    inputs(&t);
    exact_lists(&t, HQ, &ls);
    flexcheck_problem *p = flexcheck_problem_new();
    refused(p, set_lists(p, &ls), "set_block_mask: no shape");
    flexcheck_problem_free(p);
    p = problem(&t);
    int32_t *kn = ls.kv_num, *ki = ls.kv_idx, *fn = ls.full_num, *fi = ls.full_idx;
    refused(p, flexcheck_problem_set_block_mask(p, 24, BS, 1, HQ, NQB, kn, ki, NKB, fn, fi, NKB),
            "set_block_mask: block sizes (24, 16): must be powers of two in [16, 256]");
    refused(p, flexcheck_problem_set_block_mask(p, BS, BS, 2, HQ, NQB, kn, ki, NKB, fn, fi, NKB),
            "set_block_mask: nb = 2: must be 1 (one for every batch entry) or B = 1");
    refused(p, flexcheck_problem_set_block_mask(p, BS, BS, 1, 3, NQB, kn, ki, NKB, fn, fi, NKB),
            "set_block_mask: nh = 3: must be 1 (one for every head) or Hq = 2");
    refused(p, flexcheck_problem_set_block_mask(p, BS, BS, 1, HQ, 3, kn, ki, NKB, fn, fi, NKB),
            "set_block_mask: nqb = 3 query tiles: Lq = 24 in tiles of 16 makes 2");
    refused(p, flexcheck_problem_set_block_mask(p, BS, BS, 1, HQ, NQB, NULL, ki, NKB, fn, fi,
                                                NKB), "set_block_mask: kv_num_blocks is NULL");
    refused(p, flexcheck_problem_set_block_mask(p, BS, BS, 1, HQ, NQB, kn, ki, NKB, fn, NULL,
                                                NKB), "set_block_mask: full_kv_indices is NULL");
    /* element by element: a count past the width, an id out of range, an id twice */
    ls.kv_num[3] = NKB + 1;
    refused(p, set_lists(p, &ls), "set_block_mask: kv_num_blocks[0][1][1] = 5: must be in [0, 4] "
                                  "(the width of kv_indices is 4, and a row lists at most NKB = 4");
    /* a count within a wider array's width but past NKB: refused before it is copied */
    static int32_t wide[HQ * NQB * 9];
    ls.kv_num[3] = 5;
    refused(p, flexcheck_problem_set_block_mask(p, BS, BS, 1, HQ, NQB, ls.kv_num, wide, 9,
                                                NULL, NULL, 0),
            "kv_num_blocks[0][1][1] = 5: must be in [0, 4] (the width of kv_indices is 9");
    exact_lists(&t, HQ, &ls);
    ls.full_idx[0] = NKB;
    refused(p, set_lists(p, &ls), "set_block_mask: full_kv_indices[0][0][0][0] = 4: out of range "
                                  "[0, 4)");
    exact_lists(&t, HQ, &ls);
    ls.kv_idx[ls.kv_num[0]++] = ls.full_idx[0]; /* listed partial and full */
    refused(p, set_lists(p, &ls), "block listed twice in the row");
    /* none of them replaced the (absent) block mask: the problem still checks */
    cr_assert_eq(flexcheck_problem_check(p), FLEXCHECK_OK, "%s", flexcheck_problem_errmsg(p));
    flexcheck_problem_free(p);
}

/* No full lists (PyTorch's full_kv_num_blocks None) and rows wider than NKB (from_kv_blocks
 * takes any width) are PyTorch shapes too; slots past a count are never read. */
Test(api_bmask, no_full_lists_and_rows_wider_than_nkb_are_accepted)
{
    static tensors t;
    static char reason[1024], text[8192];
    inputs(&t);
    attend(&t);
    flexcheck_problem *p = problem(&t);
    /* every tile each head reaches, all partial: sound; rows 5 wide, garbage past each count */
    int32_t num[HQ * NQB], idx[HQ * NQB * 5];
    for (int32_t row = 0; row < HQ * NQB; row++) {
        num[row] = 0;
        for (int32_t c = 0; c < NKB; c++)
            if (tile_kind(&t, row / NQB, row % NQB, c))
                idx[row * 5 + num[row]++] = c;
        for (int32_t j = num[row]; j < 5; j++)
            idx[row * 5 + j] = 12345;
    }
    cr_assert_eq(flexcheck_problem_set_block_mask(p, BS, BS, 1, HQ, NQB, num, idx, 5, NULL, NULL,
                                                  0), FLEXCHECK_OK, "%s",
                 flexcheck_problem_errmsg(p));
    cr_assert_eq(judged(p, &t, reason, text, sizeof text), FLEXCHECK_PASS, "%s", text);
    cr_assert(strstr(text, "its block mask (16x16): sound"), "%s", text);
    flexcheck_problem_free(p);
}

/* Copied when set: the caller's arrays changed afterwards change nothing; a shape set after it
 * that it no longer fits is refused when judged; all NULL removes it. */
Test(api_bmask, lists_are_copied_refused_after_a_new_shape_and_removable)
{
    static tensors t;
    static lists ls;
    static char reason[1024], text[8192];
    inputs(&t);
    attend(&t);
    flexcheck_problem *p = problem(&t);
    exact_lists(&t, HQ, &ls);
    cr_assert_eq(set_lists(p, &ls), FLEXCHECK_OK, "%s", flexcheck_problem_errmsg(p));
    memset(ls.kv_num, 0, sizeof ls.kv_num);
    memset(ls.full_num, 0, sizeof ls.full_num);
    cr_assert_eq(judged(p, &t, reason, text, sizeof text), FLEXCHECK_PASS, "%s", text);
    cr_assert_eq(flexcheck_problem_set_shape(p, 1, HQ, HKV, LQ, LK + 1, D, D), FLEXCHECK_OK);
    cr_assert_eq(flexcheck_problem_set_explicit_mask(p, NULL, 0, 0, 0), FLEXCHECK_OK);
    refused(p, flexcheck_problem_check(p),
            "block mask: set for Lq 24, Lk 64, [nb, nh] = [1, 2]; the shape is now Lq 24, Lk 65, "
            "B 1, Hq 2: set it again");
    cr_assert_eq(flexcheck_problem_set_block_mask(p, 0, 0, 0, 0, 0, NULL, NULL, 0, NULL, NULL, 0),
                 FLEXCHECK_OK);
    cr_assert_eq(flexcheck_problem_check(p), FLEXCHECK_OK, "%s", flexcheck_problem_errmsg(p));
    flexcheck_problem_free(p);
}

/* The smallest memory budget a 16k x 16k problem fits without a block mask (found by bisection
 * through flexcheck_problem_check, monotone in the budget) no longer fits with one of 16-row
 * tiles: its copy, 2 x 1024 x 1024 ids, is counted and named. The caller's rows are 2048 wide:
 * a row lists at most NKB = 1024 tiles, and only those slots are kept. */
Test(api_bmask, the_budget_counts_the_block_mask_and_names_it)
{
    enum { N = 16384, T = N / BS };
    flexcheck_problem *p = flexcheck_problem_new();
    cr_assert_eq(flexcheck_problem_set_shape(p, 1, 1, 1, N, N, D, D), FLEXCHECK_OK);
    uint64_t lo = 1, hi = (uint64_t)1 << 40; /* lo refused, hi accepted */
    cr_assert_eq(flexcheck_problem_set_budget(p, hi, 0), FLEXCHECK_OK);
    cr_assert_eq(flexcheck_problem_check(p), FLEXCHECK_OK, "%s", flexcheck_problem_errmsg(p));
    while (hi - lo > 1) {
        uint64_t mid = lo + (hi - lo) / 2;
        cr_assert_eq(flexcheck_problem_set_budget(p, mid, 0), FLEXCHECK_OK);
        *(flexcheck_problem_check(p) == FLEXCHECK_OK ? &hi : &lo) = mid;
    }
    int32_t *num = calloc(T, sizeof *num), *idx = calloc((size_t)T * 2 * T, sizeof *idx);
    cr_assert(num && idx);
    cr_assert_eq(flexcheck_problem_set_block_mask(p, BS, BS, 1, 1, T, num, idx, 2 * T, num, idx,
                                                  2 * T),
                 FLEXCHECK_OK, "%s", flexcheck_problem_errmsg(p));
    free(num);
    free(idx);
    cr_assert_eq(flexcheck_problem_set_budget(p, hi, 0), FLEXCHECK_OK);
    refused(p, flexcheck_problem_check(p), "; of which the block mask 0.00784 GiB), over the "
                                           "memory budget");
    flexcheck_problem_free(p);
}
