/*
 * test_gate.c - the gate's matrix and runner: stable unique ids, pairwise coverage recomputed
 * independently from the cases, exact shard partitions, and the seed's own bug: a hybrid-layout
 * runner whose shared block-mask cache key omits parameters must fail the gate when sequences
 * are longer than the window or chunk, and pass (the bug hides) when they are shorter. The gate
 * self-test: deliberately broken kernels (both versions) and a broken builder, each failing a
 * chosen case with its expected first gate, and each swept through the quick matrix.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ci/checks.h"
#include "ci/gate.h"
#include "ci/gate_run.h"
#include "base/lowp.h"
#include "judge/exact.h"

static gate_case *matrix(gate_size size, int *n, int *dropped)
{
    gate_case *c;
    fc_err err;
    cr_assert_eq(gate_matrix(size, 1, &c, n, dropped, &err), FC_OK, "%s", err.msg);
    return c;
}

Test(matrix, ids_are_unique_and_stable_across_calls)
{
    for (int size = GATE_QUICK; size <= GATE_FULL; size++) {
        int n, m, d;
        gate_case *a = matrix((gate_size)size, &n, &d), *b = matrix((gate_size)size, &m, &d);
        cr_assert_eq(n, m, "size %d", size);
        for (int i = 0; i < n; i++) {
            cr_assert_str_eq(a[i].id, b[i].id, "size %d case %d", size, i);
            cr_assert_eq(a[i].gp.seed, b[i].gp.seed, "%s: seed", a[i].id);
            for (int j = 0; j < i; j++)
                cr_assert_str_neq(a[i].id, a[j].id, "size %d: duplicate id", size);
        }
        free(a);
        free(b);
    }
}

Test(matrix, shards_partition_every_filter_exactly)
{
    int n, d;
    gate_case *all = matrix(GATE_DEFAULT, &n, &d);
    static const char *const filters[] = {NULL, "m1-", "*-f16-*", "layout"};
    for (size_t f = 0; f < sizeof filters / sizeof filters[0]; f++) {
        gate_case *ref = malloc(sizeof *ref * (size_t)n);
        memcpy(ref, all, sizeof *ref * (size_t)n);
        int nf = gate_select(ref, n, filters[f], 1, 1);
        cr_assert_gt(nf, 0, "filter %s selects nothing", filters[f] ? filters[f] : "(none)");
        int *seen = calloc((size_t)nf, sizeof *seen);
        for (int k = 1; k <= 3; k++) {
            gate_case *part = malloc(sizeof *part * (size_t)n);
            memcpy(part, all, sizeof *part * (size_t)n);
            int np = gate_select(part, n, filters[f], k, 3);
            for (int i = 0; i < np; i++) {
                int hit = -1;
                for (int j = 0; j < nf; j++)
                    if (!strcmp(part[i].id, ref[j].id))
                        hit = j;
                cr_assert_geq(hit, 0, "shard %d/3 holds %s outside the filter", k, part[i].id);
                seen[hit]++;
            }
            free(part);
        }
        for (int j = 0; j < nf; j++)
            cr_assert_eq(seen[j], 1, "%s is in %d shards", ref[j].id, seen[j]);
        free(seen);
        free(ref);
    }
    free(all);
}

/* The M1 factor levels of docs/matrix.md, written out again here; each case is mapped back to
 * levels from its own parameters, so the coverage claim is checked, not assumed. */
typedef struct factor_value {
    int f;
    long v;
} factor_value;

static long mask_code(const gate_case *c)
{
    const mask_params *m = &c->gp.mask;
    int32_t mx = c->gp.lq > c->gp.lk ? c->gp.lq : c->gp.lk;
    int past = m->sliding_window == mx + 7; /* the matrix's "W >= Lk" level */
    return (long)m->causal * 1000000 + (past ? 999999 : m->sliding_window) * 1 +
           (long)m->chunk_size * 100000000L;
}

#define NFACTORS 9

static void values_of(const gate_case *c, long *v)
{
    v[0] = c->gp.d;
    v[1] = c->gp.hq * 100 + c->gp.hkv;
    v[2] = c->gp.b;
    v[3] = (long)c->gp.lq * 100000 + c->gp.lk;
    v[4] = mask_code(c);
    v[5] = c->gp.qb * 1000 + c->gp.kb;
    v[6] = c->builder;
    v[7] = (long)c->gp.softcap;
    v[8] = c->gp.sinks;
}

Test(matrix, quick_and_default_cover_every_feasible_pair_of_m1_factor_levels)
{
    for (int size = GATE_QUICK; size <= GATE_DEFAULT; size++) {
        int n, dropped;
        gate_case *c = matrix((gate_size)size, &n, &dropped);
        /* Distinct values per factor over the design cases (all_dtypes marks them outside M8,
         * whose rule cases also run in every dtype; the table's edge cases have one dtype
         * each). */
        long vals[NFACTORS][64];
        int nv[NFACTORS] = {0};
        int m1 = 0;
        for (int i = 0; i < n; i++) {
            if (!c[i].all_dtypes || !strcmp(c[i].group, "M8"))
                continue;
            cr_assert_str_eq(c[i].group, "M1", "%s", c[i].id);
            m1++;
            long v[NFACTORS];
            values_of(&c[i], v);
            for (int f = 0; f < NFACTORS; f++) {
                int k = 0;
                while (k < nv[f] && vals[f][k] != v[f]) k++;
                if (k == nv[f]) vals[f][nv[f]++] = v[f];
            }
        }
        static const int want_quick[NFACTORS] = {1, 3, 2, 8, 14, 5, 4, 3, 2};
        static const int want_default[NFACTORS] = {2, 3, 4, 11, 27, 5, 4, 3, 2};
        const int *want = size == GATE_QUICK ? want_quick : want_default;
        for (int f = 0; f < NFACTORS; f++)
            cr_expect_eq(nv[f], want[f], "size %d factor %d has %d levels", size, f, nv[f]);
        int missing = 0, total = 0;
        for (int a = 0; a < NFACTORS; a++)
            for (int b = a + 1; b < NFACTORS; b++)
                for (int la = 0; la < nv[a]; la++)
                    for (int lb = 0; lb < nv[b]; lb++) {
                        int hit = 0;
                        total++;
                        for (int i = 0; i < n && !hit; i++) {
                            long v[NFACTORS];
                            if (!c[i].all_dtypes || !strcmp(c[i].group, "M8"))
                                continue;
                            values_of(&c[i], v);
                            hit = v[a] == vals[a][la] && v[b] == vals[b][lb];
                        }
                        missing += !hit;
                    }
        cr_expect_leq(missing, dropped, "size %d: %d of %d pairs uncovered, %d declared "
                      "infeasible", size, missing, total, dropped);
        cr_log_info("size %d: %d M1 design cases (each in 3 dtypes) cover %d of %d pairs "
                    "(%d over budget)", size, m1, total - missing, total, dropped);
        free(c);
    }
}

/* ---- the stale shared-metadata bug (docs/semantics.md section 6) ---- */

static gate_case layout_case(const char *name, int32_t len, int32_t scale_div)
{
    gate_case c;
    memset(&c, 0, sizeof c);
    snprintf(c.id, sizeof c.id, "test-%s-%d", name, (int)len);
    strcpy(c.group, "M6");
    c.check = gate_check_find("layout");
    c.gp.dtype = FC_F32;
    c.gp.b = 1;
    c.gp.hq = 2;
    c.gp.hkv = 1;
    c.gp.d = c.gp.dv = 32;
    c.gp.lq = c.gp.lk = len;
    c.gp.qb = c.gp.kb = 16;
    c.gp.seed = 7;
    c.builder = BMASK_DIRECT;
    snprintf(c.layout, sizeof c.layout, "%s", name);
    c.nlayers = 6;
    c.scale_div = scale_div;
    return c;
}

/* Runs the layout case with a cache key mode; returns the failed rows' count and the first
 * failed row's gate in gate[REP_NAME_LEN] ("" when none failed). */
static int run_layout(const gate_case *c, gate_cache_key key, char *gate, char *reason)
{
    gate_opts o = {.run = {.kernel = 1}, .backends = {GPU_BACKEND_EMU}, .nbackends = 1,
                   .cache_key = key};
    gate_rows rows = {0};
    fc_err err;
    cr_assert_eq(gate_run_case(c, &o, &rows, &err), FC_OK, "%s: %s", c->id, err.msg);
    int failed = 0;
    gate[0] = 0;
    for (size_t i = 0; i < rows.n; i++) {
        cr_assert_neq(rows.v[i].outcome, REP_ROW_ERROR, "%s: %s", rows.v[i].case_id,
                      rows.v[i].reason);
        if (rep_row_failed(&rows.v[i]) && failed++ == 0) {
            snprintf(gate, REP_NAME_LEN, "%s", rows.v[i].first_fail);
            snprintf(reason, REP_WHY_LEN, "%s", rows.v[i].reason);
        }
    }
    gate_rows_free(&rows);
    return failed;
}

typedef struct stale_case {
    const char *layout;
    int32_t scale_div; /* windows / chunks of 33 (ModernBERT), 64 (Gemma 3), 128 (Llama 4) */
    gate_cache_key key;
} stale_case;

Test(layout_cache, a_key_missing_parameters_fails_when_sequences_exceed_the_window)
{
    static const stale_case cases[] = {
        {"modernbert", 2, GATE_CACHE_CAUSAL_ONLY}, /* full layer's list leaks into W = 33 */
        {"gemma3", 8, GATE_CACHE_CAUSAL_ONLY},     /* W = 64 list drops keys of layer 5 */
        {"llama4", 64, GATE_CACHE_CAUSAL_ONLY},    /* chunk list drops keys of layer 3 */
        {"llama4", 64, GATE_CACHE_WINDOW_ONLY},    /* W = 0 everywhere: the same bug */
        {"gpt-oss-20b", 4, GATE_CACHE_CAUSAL_ONLY}, /* W = 32 list drops keys of layer 1,
                                                     * sinks or not */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        gate_case c = layout_case(cases[i].layout, 200, cases[i].scale_div);
        char gate[REP_NAME_LEN], reason[REP_WHY_LEN] = "";
        int failed = run_layout(&c, cases[i].key, gate, reason);
        cr_expect_gt(failed, 0, "%s key %d: the stale cache went unnoticed", c.id,
                     cases[i].key);
        /* The numeric gates themselves see it (keys dropped or leaked), before the structural
         * comparison with a fresh build does. */
        cr_expect(!strcmp(gate, "H1") || !strcmp(gate, "H2") || !strcmp(gate, "H5"),
                  "%s key %d: first failure %s (%s)", c.id, cases[i].key, gate, reason);
        cr_log_info("%s, key mode %d: %d layers fail, first: %s", c.id, cases[i].key, failed,
                    reason);
    }
}

Test(layout_cache, the_same_bug_hides_when_sequences_are_shorter_than_the_window)
{
    static const stale_case cases[] = {
        {"modernbert", 2, GATE_CACHE_CAUSAL_ONLY},
        {"gemma3", 8, GATE_CACHE_CAUSAL_ONLY},
        {"llama4", 64, GATE_CACHE_CAUSAL_ONLY},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        gate_case c = layout_case(cases[i].layout, 24, cases[i].scale_div);
        char gate[REP_NAME_LEN], reason[REP_WHY_LEN] = "";
        cr_expect_eq(run_layout(&c, cases[i].key, gate, reason), 0, "%s: %s", c.id, reason);
    }
}

Test(layout_cache, the_full_key_passes_every_layout)
{
    static const stale_case cases[] = {
        {"modernbert", 2, GATE_CACHE_FULL}, {"embeddinggemma", 8, GATE_CACHE_FULL},
        {"gemma2", 64, GATE_CACHE_FULL},    {"gemma3", 8, GATE_CACHE_FULL},
        {"llama4", 64, GATE_CACHE_FULL},    {"mistral", 64, GATE_CACHE_FULL},
        {"gemma2-27b", 64, GATE_CACHE_FULL}, {"gpt-oss-20b", 4, GATE_CACHE_FULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        gate_case c = layout_case(cases[i].layout, 200, cases[i].scale_div);
        char gate[REP_NAME_LEN], reason[REP_WHY_LEN] = "";
        cr_expect_eq(run_layout(&c, cases[i].key, gate, reason), 0, "%s: %s", c.id, reason);
    }
}

Test(layout_cache, each_layers_row_carries_that_layers_terms)
{
    /* The terms are not in the cache key (they never change the block mask); each layer's
     * own problem must still carry them, as its report row shows. */
    static const struct {
        const char *layout;
        int32_t scale_div;
        double softcap;
        int32_t sinks;
    } cases[] = {{"gemma2-27b", 64, 50, 0}, {"gpt-oss-20b", 4, 0, 1}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        gate_case c = layout_case(cases[i].layout, 100, cases[i].scale_div);
        c.nlayers = 3;
        gate_opts o = {.run = {.kernel = 1}, .backends = {GPU_BACKEND_EMU}, .nbackends = 1};
        gate_rows rows = {0};
        fc_err err;
        cr_assert_eq(gate_run_case(&c, &o, &rows, &err), FC_OK, "%s: %s", c.id, err.msg);
        cr_assert_eq(rows.n, 3, "%s: a row per layer", c.id);
        for (size_t r = 0; r < rows.n; r++) {
            const rep_row *row = &rows.v[r];
            cr_expect(!rep_row_failed(row) && row->outcome != REP_ROW_ERROR, "%s: %s",
                      row->case_id, row->reason);
            cr_expect(row->softcap == cases[i].softcap && row->sinks == cases[i].sinks,
                      "%s: softcap %g sinks %d", row->case_id, row->softcap, (int)row->sinks);
        }
        gate_rows_free(&rows);
    }
}

/* ---- gate self-test: deliberately broken variants (tests/module.mk) ---- */

/* The entry points of the mutant builds, gpu_attention's signature each. */
#define MUTANT_ENTRY(n)                                                                        \
    fc_status gpu_attention_mutant##n(const gpu_call *c, float *o, float *lse, gpu_result *res, \
                                      fc_err *err);
MUTANT_ENTRY(1) MUTANT_ENTRY(2) MUTANT_ENTRY(3) MUTANT_ENTRY(4) MUTANT_ENTRY(5)
MUTANT_ENTRY(6) MUTANT_ENTRY(7) MUTANT_ENTRY(8) MUTANT_ENTRY(9) MUTANT_ENTRY(10)
MUTANT_ENTRY(11)
#undef MUTANT_ENTRY

/* A direct builder that drops the last listed tile of every row. */
static fc_status build_drop_last(bmask *out, bmask_builder b, mask_params m, const seq_info *s,
                                 int32_t qb, int32_t kb, fc_err *err)
{
    fc_status st = bmask_build(out, b, m, s, qb, kb, err);
    if (st || b != BMASK_DIRECT)
        return st;
    for (int32_t r = 0; r < out->nqb; r++) {
        int32_t np = out->kv_num_blocks[r], nf = out->full_kv_num_blocks[r];
        int32_t lp = np ? bmask_ids(out, 0, (size_t)r)[np - 1] : -1;
        int32_t lf = nf ? bmask_ids(out, 1, (size_t)r)[nf - 1] : -1;
        if (lp > lf) out->kv_num_blocks[r]--;
        else if (lf >= 0) out->full_kv_num_blocks[r]--;
    }
    return FC_OK;
}

typedef struct mutant_case {
    const char *name;
    int mutant;            /* 1..11: gpu_attention_mutant<N>; 0: the real kernel */
    int drop_last_tile;    /* the broken builder */
    const char *expect;    /* the first failing gate the gate must name ("": passes) */
    fc_dtype dtype;
    int32_t lq, lk, qb, kb;
    mask_params mask;
    const char *check;     /* the case's check (ci/checks.c) */
    const char *explained; /* what the row's diagnosis must name first (diag/), or NULL */
    double softcap;        /* score terms of the case (masks/terms.h) */
    int sinks;
    gate_input input;
    int alibi;             /* 1: an explicit ALiBi bias [1, Hq, Lq, Lk] (masks/xterms.h) */
} mutant_case;

static const judge_attention_fn mutant_fn[] = {
    NULL, gpu_attention_mutant1, gpu_attention_mutant2, gpu_attention_mutant3,
    gpu_attention_mutant4, gpu_attention_mutant5, gpu_attention_mutant6,
    gpu_attention_mutant7, gpu_attention_mutant8, gpu_attention_mutant9,
    gpu_attention_mutant10, gpu_attention_mutant11,
};

static const mutant_case mutants[] = {
    /* One extra key at distance W: weight ~1/17, far above any tolerance. */
    {"window off by one", 1, 0, "H1", FC_F16, 200, 200, 64, 64,
     {.causal = 1, .sliding_window = 17}, "numeric", "window W+1 (17 -> 18)", 0, 0, GI_NORMAL, 0},
    /* The diagonal tiles skip the mask: future keys leak in. */
    {"partial block listed as full", 2, 0, "H1", FC_F32, 200, 200, 64, 64, {.causal = 1}, "numeric",
     "partial blocks taken as full", 0, 0, GI_NORMAL, 0},
    /* Sixteen-key tiles, so the running max moves often and stale weights pile up. */
    {"no online-softmax rescale", 3, 0, "H1", FC_BF16, 200, 200, 16, 16, {.causal = 1}, "numeric",
     "online softmax rescale missing, sum and accumulator alike,", 0, 0, GI_NORMAL, 0},
    /* 0 * (1/0) = NaN in the rows no key may reach; H3 comes before H4. */
    {"empty row yields NaN", 5, 0, "H3", FC_F32, 300, 100, 64, 64, {.causal = 1}, "numeric", NULL, 0, 0, GI_NORMAL, 0},
    /* Row 0 loses its only tile: its LSE is -inf where the oracle's is finite. */
    {"direct builder drops the last tile", 0, 1, "H3", FC_F16, 200, 200, 64, 64,
     {.causal = 1}, "numeric",
     /* a row that lost its only tile has no key: taking partial tiles as full gives it none
      * either, so the diagnosis names both as indistinguishable there */
     "one of the block mask as given", 0, 0, GI_NORMAL, 0},
    /* One element past the last row lands in the guard bytes after O: H6, checked first. */
    {"write past the output", 6, 0, "H6", FC_F16, 200, 200, 64, 64, {.causal = 1}, "numeric", NULL, 0, 0, GI_NORMAL, 0},
    /* Keeping P in fp32 makes the kernel MORE accurate than the contract: it passes every
     * tolerance gate (the main row here) and only the p-round check can name it. */
    {"P not rounded (bfloat16)", 4, 0, "p-round", FC_BF16, 200, 200, 64, 64, {.causal = 1},
     "p-round", NULL, 0, 0, GI_NORMAL, 0},
    {"P not rounded (float16)", 4, 0, "p-round", FC_F16, 300, 300, 16, 16,
     {.causal = 1, .chunk_size = 128}, "p-round", NULL, 0, 0, GI_NORMAL, 0},
    /* The same defect on a plain numeric case: closer to the oracle, so no gate fails. This
     * is why the p-round check exists. */
    {"P not rounded, tolerance gates only", 4, 0, "", FC_BF16, 200, 200, 64, 64,
     {.causal = 1}, "numeric", NULL, 0, 0, GI_NORMAL, 0},
    /* Score terms. Soft-cap after the mask fill: masked keys come back at -cap; with the
     * scores of even rows near -cap (M5's beyond-the-cap inputs) they weigh like allowed keys. */
    {"soft-cap after the mask fill", 7, 0, "H1", FC_F16, 200, 200, 64, 64,
     {.causal = 1, .sliding_window = 17}, "numeric",
     /* the kernels fill some rows' masked keys in tiles the hypothesis does not model, so it
      * explains most failing rows, not all: named as the largest partial fit, never a cause */
     "no hypothesis explains all 200 failing rows (partial fits only, the largest soft-cap "
     "applied after the mask's -inf fill", 50, 0, GI_BEYOND_CAP, 0},
    /* Sinks in [-5, 10] scaled by 1/8: rows the sink dominated are no longer dominated. */
    {"sink scaled by the softmax scale", 8, 0, "H1", FC_BF16, 200, 200, 64, 64,
     {.causal = 1}, "numeric", "sink multiplied by the softmax scale", 0, 1, GI_NORMAL, 0},
    /* The sink's share added to every output element as if its value were all ones. */
    {"sink given a value", 9, 0, "H1", FC_F32, 200, 200, 64, 64,
     {.causal = 1, .sliding_window = 64}, "numeric", "sink given a value", 30, 1, GI_NORMAL, 0},
    /* 16-key tiles: a row of the causal 200 x 200 case has up to 13 of them. */
    {"sink counted in every kv tile", 10, 0, "H1", FC_F16, 200, 200, 16, 16, {.causal = 1},
     "numeric", "sink counted again in every kv tile visited", 0, 1, GI_NORMAL, 0},
    /* ALiBi subtracted: far keys gain weight instead of losing it (docs/semantics.md 8). */
    {"bias with the wrong sign", 11, 0, "H1", FC_BF16, 200, 200, 64, 64, {.causal = 1},
     "numeric", "bias with the wrong sign", 0, 0, GI_NORMAL, 1},
};

/* The first failing gate of the mutant's case into gate[REP_NAME_LEN] ("" when it passed),
 * its reason and its diagnosis (explained[REP_WHY_LEN]). */
static void run_mutant(const mutant_case *mc, int kernel, char *gate, char *reason,
                       char *explained)
{
    gate_case c;
    memset(&c, 0, sizeof c);
    snprintf(c.id, sizeof c.id, "mutant-%d-%d", mc->mutant, mc->drop_last_tile);
    strcpy(c.group, "M1");
    c.check = gate_check_find(mc->check);
    cr_assert(c.check, "%s: no check named %s", mc->name, mc->check);
    c.gp.dtype = mc->dtype;
    c.gp.b = 1;
    c.gp.hq = 2;
    c.gp.hkv = 1;
    c.gp.d = c.gp.dv = 64;
    c.gp.lq = mc->lq;
    c.gp.lk = mc->lk;
    c.gp.qb = mc->qb;
    c.gp.kb = mc->kb;
    c.gp.mask = mc->mask;
    c.gp.softcap = mc->softcap;
    c.gp.sinks = mc->sinks;
    c.gp.sinks_seed = 13;
    c.input = mc->input;
    c.gp.seed = 11;
    c.builder = BMASK_DIRECT; /* a bias alone leaves the families' block mask as it is */
    float *bias = NULL;
    if (mc->alibi) { /* head h's slope 2^(-8 (h + 1) / Hq), -slope * |q - k| */
        const size_t n = (size_t)c.gp.hq * mc->lq * mc->lk;
        bias = malloc(n * sizeof(float) + 1);
        cr_assert(bias);
        for (size_t i = 0; i < n; i++) {
            const int32_t k = (int32_t)(i % (size_t)mc->lk);
            const int32_t q = (int32_t)(i / (size_t)mc->lk % (size_t)mc->lq);
            const int32_t h = (int32_t)(i / (size_t)mc->lk / (size_t)mc->lq);
            bias[i] = (float)(-exp2(-8.0 * (h + 1) / c.gp.hq) * fabs((double)(q - k)));
        }
        c.gp.xbias = (attn_xbias){bias, 1, c.gp.hq, mc->lq, mc->lk};
    }
    gate_opts o = {.run = {.kernel = kernel, .attention_fn = mutant_fn[mc->mutant],
                           .bmask_fn = mc->drop_last_tile ? build_drop_last : NULL},
                   .backends = {GPU_BACKEND_EMU}, .nbackends = 1};
    gate_rows rows = {0};
    fc_err err;
    cr_assert_eq(gate_run_case(&c, &o, &rows, &err), FC_OK, "%s: %s", mc->name, err.msg);
    cr_assert_eq(rows.n, 1, "%s", mc->name);
    snprintf(gate, REP_NAME_LEN, "%s", rep_row_failed(&rows.v[0]) ? rows.v[0].first_fail : "");
    snprintf(reason, REP_WHY_LEN, "%s", rows.v[0].reason);
    snprintf(explained, REP_WHY_LEN, "%s", rows.v[0].explained);
    gate_rows_free(&rows);
    free(bias);
}

Test(selftest, every_broken_variant_fails_with_its_expected_gate)
{
    /* Each mutant build holds both kernels with the same defect (gpu/attn_mutants.cuh). */
    for (int kernel = 1; kernel <= GPU_MAX_KERNEL; kernel++)
        for (size_t i = 0; i < sizeof mutants / sizeof mutants[0]; i++) {
            char gate[REP_NAME_LEN], reason[REP_WHY_LEN], explained[REP_WHY_LEN];
            run_mutant(&mutants[i], kernel, gate, reason, explained);
            cr_expect_str_eq(gate, mutants[i].expect, "kernel %d, %s: first failing gate '%s', "
                             "expected '%s' (%s)", kernel, mutants[i].name, gate,
                             mutants[i].expect, reason);
            /* The diagnosis names the seeded defect first: it explains the failing rows. */
            if (mutants[i].explained)
                cr_expect(!strncmp(explained, mutants[i].explained,
                                   strlen(mutants[i].explained)),
                          "kernel %d, %s: diagnosis '%s', expected '%s...'", kernel,
                          mutants[i].name, explained, mutants[i].explained);
            cr_log_info("kernel %d, %s: %s; explained by: %s", kernel, mutants[i].name, reason,
                        explained);
        }
}

Test(selftest, the_unbroken_kernel_passes_the_same_cases)
{
    for (int kernel = 1; kernel <= GPU_MAX_KERNEL; kernel++)
        for (size_t i = 0; i < sizeof mutants / sizeof mutants[0]; i++) {
            mutant_case mc = mutants[i];
            mc.mutant = 0;
            mc.drop_last_tile = 0;
            char gate[REP_NAME_LEN], reason[REP_WHY_LEN], explained[REP_WHY_LEN];
            run_mutant(&mc, kernel, gate, reason, explained);
            cr_expect_str_eq(gate, "", "kernel %d, %s without the defect: %s", kernel, mc.name,
                             reason);
        }
}

/* ---- the same defects through the gate's own quick matrix, not a chosen case ----
 * Every non-M1 case and every other M1 design case (to bound the time), kernel 1 (the fastest
 * under the emu; kernel 2 carries the same defects and is checked on the chosen cases above).
 * Each defect must fail rows, some with its expected gate; the tally is logged. */

/* Tally of first failing gates by name (hard gates and checks alike). */
typedef struct tally {
    char name[16][REP_NAME_LEN];
    size_t count[16];
    int n;
} tally;

static size_t *tally_slot(tally *t, const char *name)
{
    for (int i = 0; i < t->n; i++)
        if (!strcmp(t->name[i], name))
            return &t->count[i];
    cr_assert_lt(t->n, 16, "more than 16 distinct failing gates");
    snprintf(t->name[t->n], REP_NAME_LEN, "%s", name);
    return &t->count[t->n++];
}

/* only: a case-id filter (gate_id_matches), NULL for every case. */
static void sweep(const char *name, int mutant, int drop_last_tile, const char *expect,
                  const char *only)
{
    int n, d, m1 = 0;
    gate_case *cases = matrix(GATE_QUICK, &n, &d);
    gate_opts o = {.run = {.kernel = 1, .attention_fn = mutant_fn[mutant],
                           .bmask_fn = drop_last_tile ? build_drop_last : NULL},
                   .backends = {GPU_BACKEND_EMU}, .nbackends = 1};
    tally by_gate = {0};
    size_t nrows = 0, failed = 0, errors = 0;
    for (int i = 0; i < n; i++) {
        if (!gate_id_matches(cases[i].id, only) || (!strcmp(cases[i].group, "M1") && m1++ % 2))
            continue;
        gate_rows rows = {0};
        fc_err err;
        cr_assert_eq(gate_run_case(&cases[i], &o, &rows, &err), FC_OK, "%s: %s", cases[i].id,
                     err.msg);
        for (size_t r = 0; r < rows.n; r++) {
            nrows++;
            if (rows.v[r].outcome == REP_ROW_FAIL) {
                failed++;
                cr_assert(rows.v[r].first_fail[0], "%s: a failed row names no gate",
                          rows.v[r].case_id);
                (*tally_slot(&by_gate, rows.v[r].first_fail))++;
            } else if (rows.v[r].outcome == REP_ROW_ERROR) {
                errors++;
            }
        }
        gate_rows_free(&rows);
    }
    char text[512] = "";
    size_t len = 0;
    for (int g = 0; g < by_gate.n; g++)
        if (len < sizeof text)
            len += (size_t)snprintf(text + len, sizeof text - len, "%s%s %zu", len ? ", " : "",
                                    by_gate.name[g], by_gate.count[g]);
    cr_log_info("%s: %zu of %zu rows fail (%s), %zu errors", name, failed, nrows, text, errors);
    cr_expect_gt(*tally_slot(&by_gate, expect), 0, "%s: no row of the quick matrix fails with "
                 "%s (%zu of %zu rows fail: %s)", name, expect, failed, nrows, text);
    cr_expect_eq(errors, 0, "%s: %zu rows could not be judged", name, errors);
    free(cases);
}

/* A layout's sinks reach the kernel layer by layer: each sink defect fails every gpt-oss layer,
 * windowed or full, as it would a case with sinks of its own. */
Test(layout_cache, a_sink_defect_fails_every_gpt_oss_layer)
{
    static const int sink_mutants[] = {8, 9, 10};
    gate_case c = layout_case("gpt-oss-20b", 100, 4);
    c.nlayers = 4;
    for (size_t i = 0; i < sizeof sink_mutants / sizeof sink_mutants[0]; i++) {
        gate_opts o = {.run = {.kernel = 1, .attention_fn = mutant_fn[sink_mutants[i]]},
                       .backends = {GPU_BACKEND_EMU}, .nbackends = 1};
        gate_rows rows = {0};
        fc_err err;
        cr_assert_eq(gate_run_case(&c, &o, &rows, &err), FC_OK, "%s: %s", c.id, err.msg);
        cr_expect_eq(rows.n, 4);
        for (size_t r = 0; r < rows.n; r++)
            cr_expect(rep_row_failed(&rows.v[r]) && !strcmp(rows.v[r].first_fail, "H1"),
                      "mutant %d, %s: %s", sink_mutants[i], rows.v[r].case_id,
                      rows.v[r].reason);
        gate_rows_free(&rows);
    }
}

Test(mutant_sweep, window_off_by_one) { sweep("window off by one", 1, 0, "H1", NULL); }
Test(mutant_sweep, partial_block_as_full) { sweep("partial block listed as full", 2, 0, "H1", NULL); }
Test(mutant_sweep, no_rescale) { sweep("no online-softmax rescale", 3, 0, "H1", NULL); }
Test(mutant_sweep, p_not_rounded) { sweep("P not rounded", 4, 0, "p-round", NULL); }
Test(mutant_sweep, empty_row_nan) { sweep("empty row yields NaN", 5, 0, "H3", NULL); }
Test(mutant_sweep, builder_drops_last_tile) { sweep("direct builder drops the last tile", 0, 1, "H3", NULL); }
Test(mutant_sweep, write_past_output) { sweep("write past the output", 6, 0, "H6", NULL); }
/* The score-term defects, through the quick matrix's cases with a term ("-sc30", "-sk"). */
#define TERMS "*-s[ck]*"
Test(mutant_sweep, softcap_after_fill) { sweep("soft-cap after the mask fill", 7, 0, "H1", TERMS); }
Test(mutant_sweep, sink_scaled) { sweep("sink scaled by the softmax scale", 8, 0, "H1", TERMS); }
Test(mutant_sweep, sink_with_value) { sweep("sink given a value", 9, 0, "H1", TERMS); }
Test(mutant_sweep, sink_every_tile) { sweep("sink counted in every kv tile", 10, 0, "H1", TERMS); }

/* ---- p-round's rule on outputs that are not our runs ----------------------------------------- */

enum { PR_TILED, PR_EAGER, PR_FP32, PR_MIXED };

/* Output of the designed case fc as a kernel would compute it, everything in float: scores,
 * their max m, p = exp(s - m), the sum l; then P.V with P rounded as the model says (tiled:
 * rnd(p), divided by l at the end; eager: rnd(p / l); fp32: p / l unrounded; mixed: tiled on
 * even query rows, eager on odd ones), the output rounded to the dtype. */
static void pr_output(const fix_case *fc, int model, float *o)
{
    const attn_problem *p = &fc->prob;
    seq_view sv = seq_info_view(&p->seq);
    float *pk = malloc(sizeof(float) * ((size_t)p->seq.lk + 1));
    cr_assert(pk);
    for (int32_t b = 0; b < p->seq.batch; b++)
        for (int32_t h = 0; h < p->hq; h++) {
            size_t bh = (size_t)b * p->hkv + h / (p->hq / p->hkv);
            for (int32_t tq = 0; tq < p->seq.lq; tq++) {
                size_t row = ((size_t)b * p->hq + h) * p->seq.lq + tq;
                const float *q = fc->q + row * p->d;
                int32_t lo, hi;
                mask_token_range(p->mask, sv, tq, &lo, &hi);
                float m = -INFINITY, l = 0.0f;
                for (int32_t tk = lo; tk < hi; tk++) {
                    const float *k = fc->k + (bh * p->seq.lk + tk) * p->d;
                    float s = 0.0f;
                    for (int32_t j = 0; j < p->d; j++)
                        s += q[j] * k[j];
                    pk[tk] = s * (float)p->scale;
                    m = pk[tk] > m ? pk[tk] : m;
                }
                for (int32_t tk = lo; tk < hi; tk++) {
                    pk[tk] = expf(pk[tk] - m);
                    l += pk[tk];
                }
                int use = model == PR_MIXED ? (tq % 2 ? PR_EAGER : PR_TILED) : model;
                for (int32_t c = 0; c < p->dv; c++) {
                    float acc = 0.0f;
                    for (int32_t tk = lo; tk < hi; tk++) {
                        float w = use == PR_TILED   ? fc_round(pk[tk], fc->dtype)
                                  : use == PR_EAGER ? fc_round(pk[tk] / l, fc->dtype)
                                                    : pk[tk] / l;
                        acc += w * fc->v[(bh * p->seq.lk + tk) * p->dv + c];
                    }
                    float out = lo >= hi ? 0.0f : use == PR_TILED ? acc / l : acc;
                    o[row * p->dv + c] = fc_round(out, fc->dtype);
                }
            }
        }
    free(pk);
}

/* docs/tolerance.md: either of FlexAttention's roundings of P passes (the tiled kernels' and
 * the eager path's); P kept in fp32 fails, and so does an output that follows one rounding on
 * some rows and the other on the rest. On every p-round case of the quick and default sizes. */
Test(pround, either_flexattention_rounding_passes_and_nothing_else)
{
    static const char *const names[] = {"tiled", "eager", "fp32", "mixed"};
    for (int size = GATE_QUICK; size <= GATE_DEFAULT; size++) {
        int n, dropped, seen = 0;
        gate_case *cases = matrix((gate_size)size, &n, &dropped);
        for (int i = 0; i < n; i++) {
            if (strcmp(cases[i].check->name, "p-round"))
                continue;
            seen++;
            fix_case fc;
            fc_err err;
            cr_assert_eq(gate_pround_case(&cases[i], &fc, &err), FC_OK, "%s: %s", cases[i].id,
                         err.msg);
            judge_case jc = fix_judge_case(&fc);
            float *o = malloc(sizeof(float) * (attn_o_elems(&fc.prob) + 1));
            cr_assert(o);
            for (int model = PR_TILED; model <= PR_MIXED; model++) {
                pr_output(&fc, model, o);
                char msg[REP_WHY_LEN] = "";
                int got = judge_pround(&jc, o, msg, sizeof msg);
                int want = model == PR_TILED || model == PR_EAGER;
                cr_expect_eq(got, want, "%s, %s P: %s", cases[i].id, names[model], msg);
            }
            free(o);
            fix_case_free(&fc);
        }
        cr_expect(seen > 0, "no p-round case in size %d", size);
        free(cases);
    }
}
