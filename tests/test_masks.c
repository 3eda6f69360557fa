/*
 * test_masks.c - the mask predicate (masks/mask.h) against hand-written truth tables, window
 * and chunk edges, negative positions, packed sequences; row ranges against a scan; layouts;
 * bad parameters. Expected grids are written out literally from docs/semantics.md section 2,
 * never produced by the code under test.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "masks/bmask.h"
#include "masks/layout.h"
#include "masks/mask.h"
#include "masks/problem.h"
#include "masks/seq.h"

#define MAXTOK 8

/* One truth table: a (possibly packed) grid and the expected allowed pattern, one string per
 * query row, '1' allowed, '0' masked. No pointers (Criterion parameter rule); rows padded. */
typedef struct truth_case {
    const char *name;
    mask_params m;
    int32_t nseq;
    int32_t cu_q[4], cu_k[4];
    const char *rows[MAXTOK];
} truth_case;

static const truth_case truth[] = {
    {"causal 4x4", {.causal = 1}, 1, {0, 4}, {0, 4}, {"1000", "1100", "1110", "1111"}},
    {"no mask 2x3", {0}, 1, {0, 2}, {0, 3}, {"111", "111"}},
    {"causal window 2", {.causal = 1, .sliding_window = 2}, 1, {0, 4}, {0, 4},
     {"1000", "1100", "0110", "0011"}},
    {"causal window 1 sees only itself", {.causal = 1, .sliding_window = 1}, 1, {0, 3}, {0, 3},
     {"100", "010", "001"}},
    {"bidirectional window 2 sees 3", {.sliding_window = 2}, 1, {0, 4}, {0, 4},
     {"1100", "1110", "0111", "0011"}},
    {"causal chunk 2", {.causal = 1, .chunk_size = 2}, 1, {0, 5}, {0, 5},
     {"10000", "11000", "00100", "00110", "00001"}},
    {"bidirectional chunk 2", {.chunk_size = 2}, 1, {0, 5}, {0, 5},
     {"11000", "11000", "00110", "00110", "00001"}},
    /* Lq < Lk: queries are the newest tokens, p_q = i + 2. */
    {"causal 2 queries 4 keys bottom-right", {.causal = 1}, 1, {0, 2}, {0, 4}, {"1110", "1111"}},
    /* Lq > Lk: p_q = i - 2, the first two rows see nothing. */
    {"causal 4 queries 2 keys negative positions", {.causal = 1}, 1, {0, 4}, {0, 2},
     {"00", "00", "10", "11"}},
    /* p_q = -2, -1, 0, 1: |p_q - p_k| < 2. */
    {"bidirectional window 2, 4 queries 2 keys", {.sliding_window = 2}, 1, {0, 4}, {0, 2},
     {"00", "10", "11", "11"}},
    /* p_q = -2..2, floor(-2/3) = floor(-1/3) = -1 != 0: negative positions are their own chunk. */
    {"bidirectional chunk 3, 5 queries 3 keys", {.chunk_size = 3}, 1, {0, 5}, {0, 3},
     {"000", "000", "111", "111", "111"}},
    {"causal window 2 chunk 3", {.causal = 1, .sliding_window = 2, .chunk_size = 3}, 1, {0, 6},
     {0, 6}, {"100000", "110000", "011000", "000100", "000110", "000011"}},
    /* Two sequences: (2 q, 2 k) and (1 q, 2 k, p_q = 1). */
    {"packed causal never crosses sequences", {.causal = 1}, 2, {0, 2, 3}, {0, 2, 4},
     {"1000", "1100", "0011"}},
    {"packed no mask never crosses sequences", {0}, 2, {0, 2, 3}, {0, 2, 4},
     {"1100", "1100", "0011"}},
    /* A sequence with 0 queries and 3 keys, then one of 2 and 2. */
    {"packed zero-query sequence", {.causal = 1}, 2, {0, 0, 2}, {0, 3, 5}, {"00010", "00011"}},
    /* A sequence with 2 queries and 0 keys: those rows see nothing. */
    {"packed zero-key sequence", {0}, 3, {0, 2, 3, 4}, {0, 0, 2, 3},
     {"000", "000", "110", "001"}},
};

static void check_truth(const truth_case *tc)
{
    seq_info s;
    fc_err err;
    cr_assert_eq(seq_init_packed(&s, tc->nseq, tc->cu_q, tc->cu_k, &err), FC_OK, "%s: %s",
                 tc->name, err.msg);
    seq_view v = seq_info_view(&s);
    for (int32_t tq = 0; tq < s.lq; tq++) {
        cr_assert_eq((int)strlen(tc->rows[tq]), s.lk, "%s: row %d has the wrong width", tc->name,
                     tq);
        int32_t lo = -1, hi = -1;
        mask_token_range(tc->m, v, tq, &lo, &hi);
        for (int32_t tk = 0; tk < s.lk; tk++) {
            int want = tc->rows[tq][tk] == '1';
            cr_expect_eq(mask_pair_allowed(tc->m, v, tq, tk), want, "%s: (q %d, k %d) expected %d",
                         tc->name, tq, tk, want);
            cr_expect_eq(tk >= lo && tk < hi, want, "%s: range [%d, %d) of row %d at k %d",
                         tc->name, lo, hi, tq, tk);
        }
        /* Padding past the grid is never allowed. */
        cr_expect_eq(mask_pair_allowed(tc->m, v, tq, s.lk), 0, "%s: key past lk", tc->name);
    }
    cr_expect_eq(mask_pair_allowed(tc->m, v, s.lq, 0), 0, "%s: query past lq", tc->name);
    seq_free(&s);
}

Test(mask, matches_every_hand_written_truth_table)
{
    for (size_t i = 0; i < sizeof truth / sizeof truth[0]; i++)
        check_truth(&truth[i]);
}

Test(window, allows_w_minus_one_and_masks_w)
{
    static const int32_t ws[] = {1, 2, 3, 15, 16, 17, 64, 127, 128, 129, 513, 4096};
    for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++) {
        int32_t w = ws[i];
        mask_params causal = {.causal = 1, .sliding_window = w};
        mask_params bidir = {.sliding_window = w};
        int32_t pq = 5000;
        cr_expect(mask_allowed(causal, pq, pq - (w - 1)), "causal W=%d: d = W-1 allowed", w);
        cr_expect(!mask_allowed(causal, pq, pq - w), "causal W=%d: d = W masked", w);
        cr_expect(!mask_allowed(causal, pq, pq + 1), "causal W=%d: future masked", w);
        cr_expect(mask_allowed(bidir, pq, pq + (w - 1)), "bidir W=%d: d = -(W-1) allowed", w);
        cr_expect(!mask_allowed(bidir, pq, pq + w), "bidir W=%d: d = -W masked", w);
        cr_expect(mask_allowed(bidir, pq, pq - (w - 1)), "bidir W=%d: d = W-1 allowed", w);
        cr_expect(!mask_allowed(bidir, pq, pq - w), "bidir W=%d: d = W masked", w);
    }
}

Test(window, huge_windows_do_not_overflow)
{
    mask_params m = {.sliding_window = INT32_MAX};
    cr_expect(mask_allowed(m, MASK_MAX_LEN - 1, 0));
    cr_expect(mask_allowed(m, -MASK_MAX_LEN, MASK_MAX_LEN - 1));
    int32_t lo, hi;
    mask_row_range(m, MASK_MAX_LEN - 1, MASK_MAX_LEN, &lo, &hi);
    cr_expect(lo == 0 && hi == MASK_MAX_LEN, "range [%d, %d)", lo, hi);
    mask_params c = {.causal = 1, .chunk_size = INT32_MAX};
    cr_expect(mask_allowed(c, MASK_MAX_LEN - 1, 0));
    cr_expect(!mask_allowed(c, -1, 0), "negative positions are another chunk");
}

Test(chunk, splits_at_multiples_of_c_including_negative_positions)
{
    static const int32_t cs[] = {1, 16, 100, 128};
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        int32_t c = cs[i];
        mask_params m = {.chunk_size = c};
        cr_expect(mask_allowed(m, c, 2 * c - 1), "C=%d: c and 2c-1 share a chunk", c);
        cr_expect(!mask_allowed(m, c, c - 1), "C=%d: c-1 is the previous chunk", c);
        cr_expect(mask_allowed(m, -1, -c), "C=%d: -1 and -C share chunk -1", c);
        cr_expect(!mask_allowed(m, -1, 0), "C=%d: -1 and 0 differ", c);
    }
    cr_expect_eq(mask_floordiv(-1, 3), -1);
    cr_expect_eq(mask_floordiv(-3, 3), -1);
    cr_expect_eq(mask_floordiv(-4, 3), -2);
    cr_expect_eq(mask_floordiv(5, 3), 1);
}

/* mask_row_range must equal a scan of the predicate for every position and every parameter
 * combination in a small exhaustive sweep (the direct builder and kernels rely on it). */
Test(row_range, equals_a_scan_of_the_predicate)
{
    for (int causal = 0; causal <= 1; causal++)
        for (int32_t w = 0; w <= 9; w++)
            for (int32_t c = 0; c <= 7; c++)
                for (int32_t nk = 0; nk <= 12; nk++)
                    for (int32_t pq = -14; pq < nk; pq++) {
                        mask_params m = {.causal = causal, .sliding_window = w, .chunk_size = c};
                        int32_t lo, hi, first = -1, last = -1, n = 0;
                        mask_row_range(m, pq, nk, &lo, &hi);
                        for (int32_t j = 0; j < nk; j++)
                            if (mask_allowed(m, pq, j)) {
                                if (first < 0) first = j;
                                last = j;
                                n++;
                            }
                        if (n == 0) {
                            cr_assert(lo >= hi, "c%d w%d C%d nk%d pq%d: [%d,%d) not empty",
                                      causal, w, c, nk, pq, lo, hi);
                            continue;
                        }
                        cr_assert(lo == first && hi == last + 1 && n == last - first + 1,
                                  "c%d w%d C%d nk%d pq%d: range [%d,%d), scan [%d,%d] n=%d",
                                  causal, w, c, nk, pq, lo, hi, first, last, n);
                    }
}

Test(seq, finds_the_sequence_of_a_token_across_zero_length_members)
{
    static const int32_t cu[] = {0, 0, 3, 3, 3, 5, 9};
    static const int32_t want[] = {1, 1, 1, 4, 4, 5, 5, 5, 5};
    for (int32_t t = 0; t < 9; t++)
        cr_expect_eq(seq_find(cu, 6, t), want[t], "token %d", t);
}

typedef struct bad_seq {
    const char *name;
    int32_t nseq;
    int32_t cu_q[4], cu_k[4];
    const char *needle;
} bad_seq;

Test(seq, rejects_bad_cu_seqlens_with_a_message_naming_them)
{
    static const bad_seq cases[] = {
        {"not starting at 0", 1, {1, 4}, {0, 4}, "cu_seqlens_q[0] = 1"},
        {"decreasing", 2, {0, 4, 3}, {0, 4, 4}, "cu_seqlens_q[2] = 3"},
        {"k decreasing", 2, {0, 1, 2}, {0, 5, 4}, "cu_seqlens_k[2] = 4"},
        {"too long", 1, {0, MASK_MAX_LEN + 1}, {0, 1}, "exceeds"},
        {"no sequences", 0, {0}, {0}, "number of sequences"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        seq_info s;
        fc_err err = {{0}};
        cr_expect_eq(seq_init_packed(&s, cases[i].nseq, cases[i].cu_q, cases[i].cu_k, &err),
                     FC_EINVAL, "%s", cases[i].name);
        cr_expect(strstr(err.msg, cases[i].needle), "%s: message '%s'", cases[i].name, err.msg);
    }
}

Test(problem, rejects_bad_shapes_and_parameters)
{
    attn_problem p = {.hq = 6, .hkv = 2, .d = 64, .dv = 64, .scale = 0.125};
    fc_err err;
    cr_assert_eq(seq_init_dense(&p.seq, 2, 128, 128, &err), FC_OK);
    cr_expect_eq(attn_problem_check(&p, &err), FC_OK, "%s", err.msg);
    p.hkv = 4;
    cr_expect_eq(attn_problem_check(&p, &err), FC_EINVAL);
    cr_expect(strstr(err.msg, "Hq % Hkv"), "%s", err.msg);
    p.hkv = 2;
    p.scale = 1.0 / 0.0;
    cr_expect_eq(attn_problem_check(&p, &err), FC_EINVAL);
    cr_expect(strstr(err.msg, "scale"), "%s", err.msg);
    p.scale = 0.125;
    p.mask.sliding_window = -1;
    cr_expect_eq(attn_problem_check(&p, &err), FC_EINVAL);
    cr_expect(strstr(err.msg, "sliding_window = -1"), "%s", err.msg);
    p.mask.sliding_window = 0;
    p.mask.chunk_size = -5;
    cr_expect_eq(attn_problem_check(&p, &err), FC_EINVAL);
    p.mask.chunk_size = 0;
    p.d = 0;
    cr_expect_eq(attn_problem_check(&p, &err), FC_EINVAL);
    attn_problem_free(&p);
    cr_expect_eq(seq_init_dense(&p.seq, 1, -1, 4, &err), FC_EINVAL);
    cr_expect_eq(seq_init_dense(&p.seq, 1, MASK_MAX_LEN + 1, 4, &err), FC_EINVAL);
    cr_expect(strstr(err.msg, "lq"), "%s", err.msg);
}

/* The work estimate counts what the reference computes: for every panel of ATTN_PANEL_ROWS query
 * tokens, its rows times the hull of their allowed keys, found here by brute force with the
 * predicate (mask_pair_allowed), never mask_token_range. Causal W = 16 on 300 x 300: hulls 128,
 * 143 (keys 113..255) and 59 (241..299), worked by hand and checked against the scan; packed
 * and chunked cases by the scan; a 131,072-token causal W = 1024 head needs about 1/114 of
 * the dense count, so it runs under the default budget. */
static uint64_t scan_pairs(const attn_problem *p)
{
    seq_view v = seq_info_view(&p->seq);
    uint64_t pairs = 0;
    for (int32_t r0 = 0; r0 < p->seq.lq; r0 += ATTN_PANEL_ROWS) {
        int32_t rows = p->seq.lq - r0 < ATTN_PANEL_ROWS ? p->seq.lq - r0 : ATTN_PANEL_ROWS;
        int32_t k0 = INT32_MAX, k1 = -1;
        for (int32_t q = r0; q < r0 + rows; q++)
            for (int32_t k = 0; k < p->seq.lk; k++)
                if (mask_pair_allowed(p->mask, v, q, k)) {
                    k0 = k < k0 ? k : k0;
                    k1 = k > k1 ? k : k1;
                }
        if (k1 >= k0)
            pairs += (uint64_t)rows * (uint64_t)(k1 - k0 + 1);
    }
    return pairs;
}

Test(problem, the_work_estimate_counts_each_panels_key_hull)
{
    fc_err err;
    attn_problem p = {.hq = 2, .hkv = 1, .d = 8, .dv = 4, .scale = 0.25,
                      .mask = {.causal = 1, .sliding_window = 16}};
    cr_assert_eq(seq_init_dense(&p.seq, 3, 300, 300, &err), FC_OK);
    uint64_t hand = 128 * 128 + 128 * 143 + 44 * 59;
    cr_expect_eq(scan_pairs(&p), hand);
    cr_expect_eq(attn_case_cost(&p, 64, 64).work, 3 * 2 * hand * 12, "work %llu",
                 (unsigned long long)attn_case_cost(&p, 64, 64).work);
    attn_problem_free(&p);

    static const int32_t cu_q[4] = {0, 100, 101, 390}, cu_k[4] = {0, 200, 450, 700};
    static const mask_params ms[] = {{.causal = 1}, {.causal = 1, .sliding_window = 33},
                                     {.chunk_size = 50}, {.sliding_window = 7}, {0}};
    for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++) {
        attn_problem q = {.hq = 1, .hkv = 1, .d = 1, .dv = 1, .scale = 1, .mask = ms[i]};
        cr_assert_eq(seq_init_packed(&q.seq, 3, cu_q, cu_k, &err), FC_OK, "%s", err.msg);
        uint64_t want = scan_pairs(&q);
        cr_expect_eq(attn_case_cost(&q, 16, 16).work, want * 2, "mask %zu: %llu vs %llu", i,
                     (unsigned long long)attn_case_cost(&q, 16, 16).work,
                     (unsigned long long)(want * 2));
        attn_problem_free(&q);
    }

    attn_problem l = {.hq = 1, .hkv = 1, .d = 128, .dv = 128, .scale = 1,
                      .mask = {.causal = 1, .sliding_window = 1024}};
    cr_assert_eq(seq_init_dense(&l.seq, 1, 131072, 131072, &err), FC_OK);
    uint64_t w = attn_case_cost(&l, 128, 128).work, dense = (uint64_t)131072 * 131072 * 256;
    cr_expect(w < dense / 100 && w > dense / 130 && w < ((uint64_t)1 << 40), "work %.4g, dense "
              "%.4g", (double)w, (double)dense);
    attn_problem_free(&l);
}

Test(bmask, rejects_block_sizes_that_are_not_powers_of_two_in_range)
{
    static const int32_t bad[] = {0, 8, 15, 24, 100, 512, -16};
    seq_info s;
    fc_err err;
    cr_assert_eq(seq_init_dense(&s, 1, 100, 100, &err), FC_OK);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        bmask bm;
        cr_expect_eq(bmask_build(&bm, BMASK_DIRECT, (mask_params){0}, &s, bad[i], 64, &err),
                     FC_EINVAL, "qb %d", bad[i]);
        cr_expect(strstr(err.msg, "q_block_size"), "qb %d: %s", bad[i], err.msg);
        cr_expect_eq(bmask_build(&bm, BMASK_SLOW, (mask_params){0}, &s, 64, bad[i], &err),
                     FC_EINVAL, "kb %d", bad[i]);
    }
    bmask bm;
    cr_expect_eq(bmask_build(&bm, BMASK_SLOW, (mask_params){.sliding_window = -3}, &s, 64, 64,
                             &err), FC_EINVAL);
    seq_free(&s);
}

/* Which layers are the model's full-attention layers (spec section 2 table). */
typedef struct layout_case {
    const char *name;
    int32_t nlayers;
    int32_t full[16]; /* ascending, -1 terminated */
    int32_t window, chunk, causal; /* of a windowed/chunked layer at scale 1 */
} layout_case;

static const layout_case layout_cases[] = {
    {"modernbert", 22, {0, 3, 6, 9, 12, 15, 18, 21, -1}, 65, 0, 0},
    {"modernbert-legacy", 22, {0, 3, 6, 9, 12, 15, 18, 21, -1}, 64, 0, 0},
    {"embeddinggemma", 24, {5, 11, 17, 23, -1}, 257, 0, 0},
    {"gemma2", 26, {1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, -1}, 4096, 0, 1},
    {"gemma3", 26, {5, 11, 17, 23, -1}, 512, 0, 1},
    {"gemma3-4b", 34, {5, 11, 17, 23, 29, -1}, 1024, 0, 1},
    {"llama4", 48, {3, 7, 11, 15, 19, 23, 27, 31, 35, 39, 43, 47, -1}, 0, 8192, 1},
    {"mistral", 32, {-1}, 4096, 0, 1},
};

/* Layout `name` (nlayers and scale_div as layout_get takes them), which must exist. */
static int32_t get_layout(const char *name, int32_t nlayers, int32_t scale_div,
                          layout_layer *layers)
{
    int32_t n = 0;
    fc_err err;
    cr_assert_eq(layout_get(name, nlayers, scale_div, layers, LAYOUT_MAX_LAYERS, &n, &err), FC_OK,
                 "%s/%d: %s", name, (int)scale_div, err.msg);
    return n;
}

Test(layout, names_the_full_attention_layers_of_each_model)
{
    for (size_t i = 0; i < sizeof layout_cases / sizeof layout_cases[0]; i++) {
        const layout_case *lc = &layout_cases[i];
        layout_layer layers[LAYOUT_MAX_LAYERS];
        int32_t n = get_layout(lc->name, 0, 1, layers);
        cr_expect_eq(n, lc->nlayers, "%s: layer count", lc->name);
        int j = 0;
        for (int32_t l = 0; l < n; l++) {
            int want_full = lc->full[j] == l;
            if (want_full)
                j++;
            cr_expect_eq(layers[l].global, want_full, "%s: layer %d global", lc->name, l);
            mask_params m = layers[l].mask;
            cr_expect_eq(m.causal, lc->causal, "%s: layer %d causal", lc->name, l);
            cr_expect_eq(m.sliding_window, want_full ? 0 : lc->window, "%s: layer %d W",
                         lc->name, l);
            cr_expect_eq(m.chunk_size, want_full ? 0 : lc->chunk, "%s: layer %d C", lc->name, l);
        }
        cr_expect_eq(lc->full[j], -1, "%s: full layers missing", lc->name);
    }
}

/* The models whose layers carry score terms or their own scale, as their configs state them
 * (masks/layout.c cites the files). The test derives every expected layer from these numbers
 * with the model code's own rules, written out here: Hugging Face's layer_types default
 * ("sliding_attention" iff (i + 1) % 2 != 0), its sliding mask (kv_idx <= q_idx and kv_idx >
 * q_idx - sliding_window), Gemma 2's scaling = query_pre_attn_scalar**-0.5 and cap
 * attn_logit_softcapping, gpt-oss's scaling = head_dim**-0.5 (the default) and sinks on every
 * layer. */
typedef struct model_config {
    const char *name;
    int32_t num_hidden_layers, sliding_window;
    double attn_logit_softcapping; /* 0: the model has none */
    double query_pre_attn_scalar;  /* 0: scaling = head_dim**-0.5 */
    int sinks;
} model_config;

static const model_config model_configs[] = {
    {"gemma2", 26, 4096, 50.0, 256, 0},
    {"gemma2-9b", 42, 4096, 50.0, 256, 0},
    {"gemma2-27b", 46, 4096, 50.0, 144, 0},
    {"gpt-oss-20b", 24, 128, 0, 0, 1},
    {"gpt-oss-120b", 36, 128, 0, 0, 1},
};

/* HF's predicate for a layer, on positions q_idx, kv_idx. */
static int hf_allows(int sliding, int32_t sliding_window, int64_t q_idx, int64_t kv_idx)
{
    return kv_idx <= q_idx && (!sliding || kv_idx > q_idx - sliding_window);
}

/* Layer i of model mc with its config window divided by div, against the model's rules. */
static void expect_model_layer(const model_config *mc, int32_t div, int32_t i,
                               const layout_layer *l)
{
    int sliding = (i + 1) % 2 != 0;
    int32_t sw = mc->sliding_window / div;
    cr_expect_eq(l->global, !sliding, "%s/%d: layer %d global", mc->name, div, i);
    /* Every key distance a query can have, around the window's edge and far beyond it. */
    int64_t q = 100000;
    for (int64_t dist = -3; dist <= 2 * (int64_t)sw + 3; dist++)
        cr_expect_eq(mask_allowed(l->mask, (int32_t)q, (int32_t)(q - dist)),
                     hf_allows(sliding, sw, q, q - dist), "%s/%d: layer %d, key at distance %d",
                     mc->name, div, i, (int)dist);
    cr_expect_eq(l->mask.chunk_size, 0, "%s/%d: layer %d chunk", mc->name, div, i);
    cr_expect_eq(l->softcap, mc->attn_logit_softcapping, "%s/%d: layer %d soft-cap %g",
                 mc->name, div, i, l->softcap);
    double scale = mc->query_pre_attn_scalar > 0 ? pow(mc->query_pre_attn_scalar, -0.5) : 0;
    cr_expect(fabs(l->scale - scale) <= 1e-15 * scale, "%s/%d: layer %d scale %.17g, want %.17g",
              mc->name, div, i, l->scale, scale);
    cr_expect_eq(l->sinks, mc->sinks, "%s/%d: layer %d sinks", mc->name, div, i);
}

Test(layout, gives_each_layer_the_models_window_soft_cap_scale_and_sinks)
{
    for (size_t k = 0; k < sizeof model_configs / sizeof model_configs[0]; k++) {
        const model_config *mc = &model_configs[k];
        layout_layer layers[LAYOUT_MAX_LAYERS];
        int32_t n = get_layout(mc->name, 0, 1, layers);
        cr_expect_eq(n, mc->num_hidden_layers, "%s: layer count", mc->name);
        for (int32_t i = 0; i < n; i++)
            expect_model_layer(mc, 1, i, &layers[i]);
    }
}

Test(layout, scaled_down_layouts_keep_the_models_formulas)
{
    /* Config windows divided by 64, 128, 2 and 4 (where the result stays at least 2): the
     * window is the divided config value through the same rule, while the cap, the scale and
     * the sinks are not lengths and stay the model's. */
    static const int32_t divs[] = {64, 128, 2, 4};
    for (size_t k = 0; k < sizeof model_configs / sizeof model_configs[0]; k++) {
        const model_config *mc = &model_configs[k];
        for (size_t j = 0; j < sizeof divs / sizeof divs[0]; j++) {
            int32_t div = divs[j];
            if (div > mc->sliding_window / 2)
                continue;
            layout_layer layers[LAYOUT_MAX_LAYERS];
            int32_t n = get_layout(mc->name, 6, div, layers);
            cr_expect_eq(n, 6);
            for (int32_t i = 0; i < n; i++)
                expect_model_layer(mc, div, i, &layers[i]);
        }
    }
}

/* Gemma 3 and embeddinggemma (a Gemma3TextModel): Hugging Face's Gemma3Attention scales by
 * query_pre_attn_scalar**-0.5 on every layer, with no soft-cap; query_pre_attn_scalar is 256 in
 * each checkpoint's config (convert_gemma3_weights.py's variants, gemma-3-1b-it's config.json).
 * The scale is not a length: every divisor leaves it. */
Test(layout, gemma3_and_embeddinggemma_scale_by_query_pre_attn_scalar)
{
    static const struct {
        const char *name;
        double query_pre_attn_scalar;
    } models[] = {{"gemma3", 256}, {"gemma3-270m", 256}, {"gemma3-4b", 256},
                  {"embeddinggemma", 256}};
    static const int32_t divs[] = {1, 8, 64};
    for (size_t k = 0; k < sizeof models / sizeof models[0]; k++)
        for (size_t j = 0; j < sizeof divs / sizeof divs[0]; j++) {
            layout_layer layers[LAYOUT_MAX_LAYERS];
            int32_t n = get_layout(models[k].name, 0, divs[j], layers);
            double want = pow(models[k].query_pre_attn_scalar, -0.5);
            for (int32_t i = 0; i < n; i++)
                cr_expect(fabs(layers[i].scale - want) <= 1e-15 * want &&
                              layers[i].softcap == 0 && layers[i].sinks == 0,
                          "%s/%d: layer %d scale %.17g (want %.17g), cap %g, sinks %d",
                          models[k].name, (int)divs[j], (int)i, layers[i].scale, want,
                          layers[i].softcap, (int)layers[i].sinks);
        }
}

Test(layout, other_models_have_no_score_terms_and_the_default_scale)
{
    static const char *const names[] = {"modernbert", "modernbert-legacy", "llama4", "mistral"};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        layout_layer layers[LAYOUT_MAX_LAYERS];
        int32_t n = get_layout(names[k], 0, 1, layers);
        for (int32_t i = 0; i < n; i++)
            cr_expect(layers[i].softcap == 0 && layers[i].scale == 0 && layers[i].sinks == 0,
                      "%s: layer %d", names[k], i);
    }
}

Test(layout, scales_the_config_value_before_converting)
{
    layout_layer layers[LAYOUT_MAX_LAYERS];
    int32_t n;
    fc_err err;
    cr_assert_eq(layout_get("modernbert", 6, 2, layers, LAYOUT_MAX_LAYERS, &n, &err), FC_OK);
    cr_expect_eq(n, 6);
    cr_expect_eq(layers[1].mask.sliding_window, 33, "128/2 = 64 -> 64/2 + 1");
    cr_assert_eq(layout_get("gemma2", 0, 64, layers, LAYOUT_MAX_LAYERS, &n, &err), FC_OK);
    cr_expect_eq(layers[0].mask.sliding_window, 64, "4096/64");
    cr_assert_eq(layout_get("llama4", 0, 64, layers, LAYOUT_MAX_LAYERS, &n, &err), FC_OK);
    cr_expect_eq(layers[0].mask.chunk_size, 128, "8192/64");
    cr_expect_eq(layout_get("nope", 0, 1, layers, LAYOUT_MAX_LAYERS, &n, &err), FC_EINVAL);
    cr_expect(strstr(err.msg, "'nope'"), "%s", err.msg);
    cr_expect_eq(layout_get("gemma2", 0, 0, layers, LAYOUT_MAX_LAYERS, &n, &err), FC_EINVAL);
    cr_expect_eq(layout_get("gemma2", 1000, 1, layers, LAYOUT_MAX_LAYERS, &n, &err), FC_EINVAL);
}

/* A divisor must divide the config value exactly and leave at least 2: 128 / 3 used to be
 * truncated to 42, a window the model's formula never gives. The message names the layout,
 * the divisor and the divisors that work (computed here from the config value). */
Test(layout, refuses_a_divisor_that_does_not_divide_the_config_value)
{
    static const struct {
        const char *name, *field;
        int32_t value, bad;
    } cases[] = {{"gpt-oss-20b", "sliding_window", 128, 3},
                 {"llama4", "attention_chunk_size", 8192, 3000},
                 {"modernbert", "local_attention", 128, 6},
                 {"gemma2", "sliding_window", 4096, 4096}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        layout_layer layers[LAYOUT_MAX_LAYERS];
        int32_t n;
        fc_err err;
        cr_expect_eq(layout_get(cases[k].name, 0, cases[k].bad, layers, LAYOUT_MAX_LAYERS, &n,
                                &err), FC_EINVAL, "%s / %d", cases[k].name, (int)cases[k].bad);
        char ok[256] = "", head[128];
        size_t len = 0;
        for (int32_t d = 1; d <= cases[k].value; d++)
            if (cases[k].value % d == 0 && cases[k].value / d >= 2)
                len += (size_t)snprintf(ok + len, sizeof ok - len, "%s%d", len ? ", " : "",
                                        (int)d);
        snprintf(head, sizeof head, "--scale-div %d: layout %s's %s %d", (int)cases[k].bad,
                 cases[k].name, cases[k].field, (int)cases[k].value);
        cr_expect(strstr(err.msg, head) && strstr(err.msg, ok) && !strchr(err.msg, '\n'),
                  "%s: %s", cases[k].name, err.msg);
        /* Every divisor offered works, and gives the divided value exactly. */
        for (int32_t d = 1; d <= cases[k].value; d++)
            if (cases[k].value % d == 0 && cases[k].value / d >= 2)
                cr_expect_eq(layout_get(cases[k].name, 1, d, layers, LAYOUT_MAX_LAYERS, &n, &err),
                             FC_OK, "%s / %d: %s", cases[k].name, (int)d, err.msg);
    }
}

/* nlayers past the model's count would invent layers by extending its pattern. */
Test(layout, refuses_more_layers_than_the_model_has)
{
    for (size_t i = 0; i < sizeof layout_cases / sizeof layout_cases[0]; i++) {
        const layout_case *lc = &layout_cases[i];
        layout_layer layers[LAYOUT_MAX_LAYERS];
        int32_t n = 0;
        fc_err err;
        cr_expect_eq(layout_get(lc->name, lc->nlayers, 1, layers, LAYOUT_MAX_LAYERS, &n, &err),
                     FC_OK, "%s: %s", lc->name, err.msg);
        cr_expect_eq(n, lc->nlayers);
        cr_expect_eq(layout_get(lc->name, lc->nlayers + 1, 1, layers, LAYOUT_MAX_LAYERS, &n,
                                &err), FC_EINVAL, "%s: layer %d does not exist", lc->name,
                     (int)lc->nlayers);
        char want[96];
        snprintf(want, sizeof want, "--layers %d: layout %s has layers 0..%d",
                 (int)lc->nlayers + 1, lc->name, (int)lc->nlayers - 1);
        cr_expect(strstr(err.msg, want), "%s", err.msg);
    }
}

/* Mask terms given beside a layout: one the layout would replace on some layer is refused,
 * naming the option and the layer; one it sets anyway passes. */
Test(layout, a_given_mask_term_must_be_the_layouts_own)
{
    layout_layer layers[LAYOUT_MAX_LAYERS];
    int32_t n = get_layout("gemma3", 6, 16, layers); /* layers 0..4 W = 32, layer 5 full */
    fc_err err;
    mask_params causal = {.causal = 1}, w32 = {.causal = 1, .sliding_window = 32};
    cr_expect_eq(layout_check_mask("gemma3", layers, 0, n, &causal, &err), FC_OK, "%s", err.msg);
    cr_expect_eq(layout_check_mask("gemma3", layers, 0, 5, &w32, &err), FC_OK, "%s", err.msg);
    cr_expect_eq(layout_check_mask("gemma3", layers, 0, n, &w32, &err), FC_EINVAL);
    cr_expect(strstr(err.msg, "--window 32 with --layout gemma3") &&
                  strstr(err.msg, "layer 5 has window 0"), "%s", err.msg);
    mask_params chunk = {.chunk_size = 32};
    cr_expect_eq(layout_check_mask("gemma3", layers, 2, 3, &chunk, &err), FC_EINVAL);
    cr_expect(strstr(err.msg, "--chunk 32") && strstr(err.msg, "layer 2 has chunk 0"), "%s",
              err.msg);
    n = get_layout("modernbert", 2, 1, layers);
    cr_expect_eq(layout_check_mask("modernbert", layers, 0, n, &causal, &err), FC_EINVAL);
    cr_expect(strstr(err.msg, "--causal with --layout modernbert"), "%s", err.msg);
}
