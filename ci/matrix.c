/*
 * matrix.c - the gate's cases (docs/matrix.md): a seeded pairwise design over the M1 factors,
 * the listed edge cases in full, and the M2-M8 groups as tables.
 *
 * Pairwise design (AETG-style greedy): take the first uncovered pair of factor levels, fix
 * it, then give every other factor (in a seeded random order) the level that covers the most
 * still-uncovered pairs; keep the case if it fits the size's work budget. Pairs that no case
 * within the budget can hold (found by seeded random completion) are dropped from the goal and
 * counted, so the design always terminates. The work of a case is B*Hq*Lq*Lk*(D+Dv), an upper
 * bound on the multiply-adds of a dense forward.
 */
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ci/checks.h"
#include "ci/gate.h"

const char *gate_input_name(gate_input in)
{
    static const char *const names[] = {"normal", "uniform", "neglogits", "peaked", "outliers",
                                        "fp16limit", "beyondcap", "farlogits"};
    return (unsigned)in < GI_NINPUTS ? names[in] : "?";
}

const char *gate_size_name(gate_size s)
{
    return s == GATE_QUICK ? "quick" : s == GATE_DEFAULT ? "default" : "full";
}

int gate_id_matches(const char *id, const char *pattern)
{
    if (!pattern || !*pattern)
        return 1;
    if (strpbrk(pattern, "*?["))
        return fnmatch(pattern, id, 0) == 0;
    return strstr(id, pattern) != NULL;
}

/* The case a filter without glob characters names exactly: its id, or a report row's id (the
 * case id, '@' and the row's suffix: a layer, a window-edge variant, a builder; case ids hold
 * no '@'). Such a filter selects that case alone although its text may be part of other ids
 * (...-sup of ...-suptrim): a failure's id reruns that case and no other. -1: none. */
static int named_case(const gate_case *cases, int n, const char *filter)
{
    if (!filter || !*filter || strpbrk(filter, "*?["))
        return -1;
    size_t len = strcspn(filter, "@");
    for (int i = 0; i < n; i++)
        if (!strncmp(cases[i].id, filter, len) && cases[i].id[len] == '\0')
            return i;
    return -1;
}

int gate_select(gate_case *cases, int n, const char *filter, int shard_i, int shard_n)
{
    int kept = 0, matched = 0, only = named_case(cases, n, filter);
    for (int i = 0; i < n; i++) {
        if (only >= 0 ? i != only : !gate_id_matches(cases[i].id, filter))
            continue;
        if (matched++ % shard_n == shard_i - 1)
            cases[kept++] = cases[i];
    }
    return kept;
}

/* ---- case list ---- */

typedef struct caselist {
    gate_case *v;
    int n, cap;
} caselist;

static gate_case *push(caselist *cl)
{
    if (cl->n == cl->cap) {
        int cap = cl->cap ? 2 * cl->cap : 256;
        gate_case *v = realloc(cl->v, sizeof *v * (size_t)cap);
        if (!v)
            return NULL;
        cl->v = v;
        cl->cap = cap;
    }
    gate_case *c = &cl->v[cl->n++];
    memset(c, 0, sizeof *c);
    c->gp.qb = c->gp.kb = 128;
    c->gp.b = 1;
    c->gp.hq = 6;
    c->gp.hkv = 2;
    c->gp.d = c->gp.dv = 64;
    c->builder = BMASK_DIRECT;
    return c;
}

static const char *dtype_tag(fc_dtype dt)
{
    return dt == FC_F32 ? "f32" : dt == FC_F16 ? "f16" : "bf16";
}

static const char *builder_tag(bmask_builder b)
{
    static const char *const t[] = {"slow", "direct", "sup", "suptrim"};
    return (unsigned)b < 4 ? t[b] : "?";
}

/* Spells the case's parameters; the caller appends a kind-specific suffix. */
static void make_id(gate_case *c, const char *extra)
{
    const fix_gen_params *g = &c->gp;
    char mask[48], tt[48], mt[100];
    mask_params_text(mask, sizeof mask, &g->mask, MASK_TEXT_ID); /* "cw17", "bw64", "none" */
    terms_id(tt, sizeof tt, g->softcap, g->sinks);                /* "sc50sk", "" */
    snprintf(mt, sizeof mt, "%s%s%s", mask, tt[0] ? "-" : "", tt);
    int o = snprintf(c->id, sizeof c->id, "%c%c-%s-%s-d%d%s-h%dx%d-b%d-%dx%d-%s-q%dk%d-%s",
                     c->group[0] + 32, c->group[1], c->check->name,
                     c->all_dtypes ? "all" : dtype_tag(g->dtype),
                     (int)g->d, g->dv != g->d ? "v" : "", (int)g->hq, (int)g->hkv, (int)g->b,
                     (int)g->lq, (int)g->lk, mt, (int)g->qb, (int)g->kb, builder_tag(c->builder));
    if (c->input != GI_NORMAL)
        o += snprintf(c->id + o, sizeof c->id - (size_t)o, "-%s", gate_input_name(c->input));
    if (g->nseq)
        o += snprintf(c->id + o, sizeof c->id - (size_t)o, "-packed%d", (int)g->nseq);
    if (extra && *extra)
        snprintf(c->id + o, sizeof c->id - (size_t)o, "-%s", extra);
}

/* A case's sinks are drawn from a stream of their own, derived from the case's seed, so
 * turning sinks on leaves q, k and v as they were (fix_gen_params.sinks_seed). */
static uint64_t sinks_seed_of(uint64_t seed)
{
    return seed ^ 0x51a4ull;
}

/* ---- M1 pairwise ---- */

typedef struct mask_level {
    int32_t causal, window, chunk;
    int window_past_lk; /* W = max(Lq, Lk) + 7: the window never binds */
} mask_level;

typedef struct lengths {
    int32_t lq, lk;
} lengths;

/* dtype is no factor: every design case runs in all three (gate_case.all_dtypes). The score
 * terms are two factors: the soft-cap (off, Grok's 30, Gemma 2's 50) and sinks (off, on: drawn
 * per head in [-5, 10], so some rows are dominated by the sink). */
enum { F_D, F_HEADS, F_BATCH, F_LEN, F_MASK, F_BLOCK, F_BUILDER, F_CAP, F_SINKS, NFACT };
static const double cap_lv[] = {0, 30, 50};
#define NCAP ((int)(sizeof cap_lv / sizeof cap_lv[0]))

typedef struct design {
    int n[NFACT];
    const int32_t *d, *batch;
    const lengths *len;
    const mask_level *mask;
    double budget;
} design;

static const int32_t heads_lv[][2] = {{6, 6}, {6, 2}, {6, 1}};
static const int32_t block_lv[][2] = {{128, 128}, {64, 64}, {16, 16}, {128, 64}, {64, 128}};

static const mask_level masks_full[] = {
    {0, 0, 0, 0}, {1, 0, 0, 0},
    {1, 1, 0, 0}, {1, 2, 0, 0}, {1, 15, 0, 0}, {1, 16, 0, 0}, {1, 17, 0, 0}, {1, 64, 0, 0},
    {1, 127, 0, 0}, {1, 128, 0, 0}, {1, 129, 0, 0}, {1, 513, 0, 0}, {1, 0, 0, 1},
    {0, 1, 0, 0}, {0, 2, 0, 0}, {0, 15, 0, 0}, {0, 16, 0, 0}, {0, 17, 0, 0}, {0, 64, 0, 0},
    {0, 127, 0, 0}, {0, 128, 0, 0}, {0, 129, 0, 0}, {0, 513, 0, 0}, {0, 0, 0, 1},
    {1, 0, 16, 0}, {1, 0, 100, 0}, {1, 0, 128, 0},
};
static const mask_level masks_quick[] = {
    {0, 0, 0, 0}, {1, 0, 0, 0}, {1, 1, 0, 0}, {1, 16, 0, 0}, {1, 17, 0, 0}, {1, 128, 0, 0},
    {1, 129, 0, 0}, {1, 0, 0, 1}, {0, 2, 0, 0}, {0, 15, 0, 0}, {0, 64, 0, 0}, {0, 0, 0, 1},
    {1, 0, 16, 0}, {1, 0, 100, 0},
};
static const lengths len_full[] = {{1, 1},       {1, 239},     {239, 1},     {113, 203},
                                   {128, 217},   {108, 256},   {256, 512},   {512, 256},
                                   {1023, 1024}, {1024, 1023}, {2048, 2048}};
static const lengths len_quick[] = {{1, 1},     {1, 239},   {239, 1},   {113, 203},
                                    {128, 217}, {108, 256}, {256, 512}, {512, 256}};
static const int32_t d_full[] = {64, 128}, d_quick[] = {64};
static const int32_t batch_full[] = {1, 2, 3, 4}, batch_quick[] = {1, 2};

static double work(const design *ds, const int *lv)
{
    const lengths *l = &ds->len[lv[F_LEN]];
    double d = ds->d[lv[F_D]];
    return (double)ds->batch[lv[F_BATCH]] * heads_lv[lv[F_HEADS]][0] * l->lq * (double)l->lk *
           (2 * d);
}

static int pair_index(const design *ds, int f1, int l1, int f2, int l2)
{
    int idx = 0; /* pairs (f1 < f2) laid out factor pair by factor pair */
    for (int a = 0; a < NFACT; a++)
        for (int b = a + 1; b < NFACT; b++) {
            if (a == f1 && b == f2)
                return idx + l1 * ds->n[f2] + l2;
            idx += ds->n[a] * ds->n[b];
        }
    return -1;
}

static int npairs(const design *ds)
{
    int t = 0;
    for (int a = 0; a < NFACT; a++)
        for (int b = a + 1; b < NFACT; b++)
            t += ds->n[a] * ds->n[b];
    return t;
}

/* New pairs a full assignment covers. */
static int gain(const design *ds, const unsigned char *covered, const int *lv)
{
    int g = 0;
    for (int a = 0; a < NFACT; a++)
        for (int b = a + 1; b < NFACT; b++)
            g += !covered[pair_index(ds, a, lv[a], b, lv[b])];
    return g;
}

static void cover(const design *ds, unsigned char *covered, const int *lv)
{
    for (int a = 0; a < NFACT; a++)
        for (int b = a + 1; b < NFACT; b++)
            covered[pair_index(ds, a, lv[a], b, lv[b])] = 1;
}

static int rng_below(fix_rng *r, int n)
{
    return (int)(fix_rng_u64(r) % (uint64_t)n);
}

/* Marks pairs that no assignment within the budget can hold as covered; returns how many. */
static int drop_infeasible(const design *ds, unsigned char *covered, fix_rng *r)
{
    int dropped = 0, lv[NFACT];
    for (int a = 0; a < NFACT; a++)
        for (int b = a + 1; b < NFACT; b++)
            for (int la = 0; la < ds->n[a]; la++)
                for (int lb = 0; lb < ds->n[b]; lb++) {
                    int ok = 0;
                    for (int t = 0; t < 400 && !ok; t++) {
                        for (int f = 0; f < NFACT; f++)
                            lv[f] = t == 0 ? 0 : rng_below(r, ds->n[f]); /* t 0: cheapest */
                        lv[a] = la;
                        lv[b] = lb;
                        ok = work(ds, lv) <= ds->budget;
                    }
                    if (!ok) {
                        covered[pair_index(ds, a, la, b, lb)] = 1;
                        dropped++;
                    }
                }
    return dropped;
}

static fc_status add_m1_case(caselist *cl, const design *ds, const int *lv, uint64_t seed)
{
    gate_case *c = push(cl);
    if (!c)
        return FC_ENOMEM;
    const lengths *l = &ds->len[lv[F_LEN]];
    const mask_level *m = &ds->mask[lv[F_MASK]];
    strcpy(c->group, "M1");
    if (!(c->check = gate_check_find("numeric")))
        return FC_EINVAL;
    c->gp.dtype = FC_F32;
    c->all_dtypes = 1;
    c->gp.d = c->gp.dv = ds->d[lv[F_D]];
    c->gp.hq = heads_lv[lv[F_HEADS]][0];
    c->gp.hkv = heads_lv[lv[F_HEADS]][1];
    c->gp.b = ds->batch[lv[F_BATCH]];
    c->gp.lq = l->lq;
    c->gp.lk = l->lk;
    c->gp.mask.causal = m->causal;
    /* "W >= Lk": past both lengths; +7 keeps it apart from every listed W (513 = 512 + 1). */
    c->gp.mask.sliding_window = m->window_past_lk ? (l->lq > l->lk ? l->lq : l->lk) + 7
                                                  : m->window;
    c->gp.mask.chunk_size = m->chunk;
    c->gp.qb = block_lv[lv[F_BLOCK]][0];
    c->gp.kb = block_lv[lv[F_BLOCK]][1];
    c->builder = (bmask_builder)lv[F_BUILDER];
    c->gp.softcap = cap_lv[lv[F_CAP]];
    c->gp.sinks = lv[F_SINKS];
    c->gp.seed = seed;
    c->gp.sinks_seed = sinks_seed_of(seed);
    make_id(c, NULL);
    return FC_OK;
}

static fc_status m1_pairwise(caselist *cl, gate_size size, uint64_t seed, int *dropped)
{
    int quick = size == GATE_QUICK;
    design ds = {
        .n = {quick ? 1 : 2, 3, quick ? 2 : 4,
              quick ? (int)(sizeof len_quick / sizeof len_quick[0])
                    : (int)(sizeof len_full / sizeof len_full[0]),
              quick ? (int)(sizeof masks_quick / sizeof masks_quick[0])
                    : (int)(sizeof masks_full / sizeof masks_full[0]),
              5, 4, NCAP, 2},
        .d = quick ? d_quick : d_full,
        .batch = quick ? batch_quick : batch_full,
        .len = quick ? len_quick : len_full,
        .mask = quick ? masks_quick : masks_full,
        /* work per case at most: quick ~0.1 s of emulated kernel 1, default ~6 s, full ~30 s */
        .budget = size == GATE_QUICK ? 1.2e8 : size == GATE_DEFAULT ? 6.5e9 : 2.6e10,
    };
    int np = npairs(&ds), lv[NFACT], order[NFACT];
    unsigned char *covered = calloc((size_t)np, 1);
    if (!covered)
        return FC_ENOMEM;
    fix_rng r;
    fix_rng_seed(&r, seed ^ 0x5eedull);
    *dropped = drop_infeasible(&ds, covered, &r);
    fc_status st = FC_OK;
    for (int next = 0; !st; next++) {
        while (next < np && covered[next])
            next++;
        if (next >= np)
            break;
        /* Decode pair `next` back into (factor, level) x 2. */
        int idx = 0, fa = 0, fb = 0, la = 0, lb = 0;
        for (int a = 0; a < NFACT; a++)
            for (int b = a + 1; b < NFACT; b++) {
                int cnt = ds.n[a] * ds.n[b];
                if (next >= idx && next < idx + cnt) {
                    fa = a, fb = b, la = (next - idx) / ds.n[b], lb = (next - idx) % ds.n[b];
                }
                idx += cnt;
            }
        int best[NFACT], best_gain = -1;
        for (int attempt = 0; attempt < 60; attempt++) {
            for (int f = 0; f < NFACT; f++) {
                order[f] = f;
                lv[f] = 0;
            }
            for (int f = NFACT - 1; f > 0; f--) { /* seeded shuffle */
                int j = rng_below(&r, f + 1), t = order[f];
                order[f] = order[j];
                order[j] = t;
            }
            lv[fa] = la;
            lv[fb] = lb;
            for (int i = 0; i < NFACT; i++) {
                int f = order[i];
                if (f == fa || f == fb)
                    continue;
                int bl = rng_below(&r, ds.n[f]), bg = -1;
                for (int l = 0; l < ds.n[f]; l++) {
                    lv[f] = l;
                    int g = gain(&ds, covered, lv);
                    if (g > bg && (attempt > 0 || work(&ds, lv) <= ds.budget)) {
                        bg = g;
                        bl = l;
                    }
                }
                lv[f] = bl;
            }
            if (work(&ds, lv) > ds.budget) {
                /* Fall back to the cheapest levels of the free factors. */
                for (int f = 0; f < NFACT; f++)
                    if (f != fa && f != fb && (f == F_D || f == F_BATCH || f == F_HEADS))
                        lv[f] = 0;
                if (work(&ds, lv) > ds.budget)
                    continue;
            }
            int g = gain(&ds, covered, lv);
            if (g > best_gain) {
                best_gain = g;
                memcpy(best, lv, sizeof best);
            }
            if (attempt >= 3 && best_gain > 0)
                break;
        }
        if (best_gain <= 0) {
            covered[next] = 1; /* cannot be placed (budget): counted as dropped */
            (*dropped)++;
            continue;
        }
        cover(&ds, covered, best);
        st = add_m1_case(cl, &ds, best, seed + (uint64_t)cl->n);
    }
    free(covered);
    return st;
}

/* ---- tables for the other groups ---- */

typedef struct table_case {
    const char *group;
    const char *check; /* a name from ci/checks.c */
    fc_dtype dtype;
    int32_t b, hq, hkv, lq, lk, d, dv;
    mask_params mask;
    int32_t qb, kb;
    bmask_builder builder;
    gate_input input;
    int32_t nseq, cu_q[10], cu_k[10];
    const char *layout;
    int32_t nlayers, scale_div;
    gate_size min_size; /* present from this size up */
    const char *extra;  /* id suffix */
    double softcap;     /* score terms (masks/terms.h): the cap, 0 off */
    int sinks;          /* 1: per-head sinks, sink_values or drawn in [-5, 10] */
    const float *sink_values; /* [hq] or NULL */
    xcase_spec xc;      /* M8: explicit terms from a rule (ci/xcases.h) */
    int all_dtypes;     /* one row per dtype under one id (gate_case.all_dtypes) */
} table_case;

/* Sinks far above every score (normal inputs score within a few units of 0): each row's
 * softmax is nearly all sink, the output near 0 but not 0. */
static const float sinks_high[6] = {30, 34, 38, 42, 46, 50};

/* Table rows name their leading fields in order and leave the rest zero. */
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

#define CW(w) {.causal = 1, .sliding_window = (w)}
#define BW(w) {.sliding_window = (w)}
#define CC(c) {.causal = 1, .chunk_size = (c)}
#define CAUSAL {.causal = 1}

static const table_case tables[] = {
    /* M1 edge cases: one long case, empty first query tiles, reduced head dims. */
    {"M1", "numeric", FC_F16, 1, 6, 1, 4224, 4224, 64, 64, CW(513), 128, 128, BMASK_DIRECT,
     .min_size = GATE_DEFAULT, .extra = "long"},
    {"M1", "numeric", FC_F32, 1, 6, 2, 300, 100, 64, 64, CAUSAL, 64, 64, BMASK_DIRECT,
     .extra = "emptytile"},
    {"M1", "numeric", FC_BF16, 2, 6, 6, 300, 100, 64, 64, CW(16), 128, 128, BMASK_SLOW,
     .extra = "emptytile"},
    {"M1", "numeric", FC_F32, 1, 6, 2, 113, 203, 32, 32, CW(17), 64, 64, BMASK_DIRECT},
    {"M1", "numeric", FC_F16, 1, 6, 2, 256, 512, 80, 80, CC(100), 128, 64, BMASK_SLOW},
    {"M1", "numeric", FC_BF16, 1, 6, 2, 113, 203, 96, 96, BW(64), 16, 16, BMASK_SUPERSET},
    {"M1", "numeric", FC_F16, 1, 6, 1, 256, 512, 256, 256, CAUSAL, 64, 128, BMASK_DIRECT},
    {"M1", "numeric", FC_F32, 1, 6, 3, 256, 512, 96, 64, CW(129), 128, 128, BMASK_SUPERSET_TRIM,
     .extra = "dvne"},
    {"M1", "numeric", FC_BF16, 1, 6, 6, 256, 512, 256, 256, BW(17), 64, 64, BMASK_DIRECT,
     .min_size = GATE_DEFAULT},
    {"M1", "numeric", FC_F16, 1, 6, 2, 113, 203, 80, 80, CW(15), 16, 16, BMASK_DIRECT,
     .min_size = GATE_DEFAULT},
    {"M1", "numeric", FC_F32, 1, 6, 2, 256, 512, 256, 256, CC(128), 128, 128, BMASK_SLOW,
     .min_size = GATE_DEFAULT},

    /* M2 packed: random lengths with 0 and 1, boundaries inside blocks, decode, chunked
     * prefill (queries are the tail of a longer sequence), prefill mixed with decode. */
    {"M2", "numeric", FC_F16, 1, 6, 2, 0, 0, 64, 64, CW(64), 64, 64, BMASK_DIRECT, .nseq = 8,
     .cu_q = {0, 0, 1, 90, 91, 250, 250, 251, 400}, .cu_k = {0, 7, 8, 97, 98, 257, 257, 600, 749},
     .extra = "ragged"},
    {"M2", "numeric", FC_BF16, 1, 6, 1, 0, 0, 64, 64, CAUSAL, 64, 64, BMASK_SUPERSET_TRIM,
     .nseq = 3, .cu_q = {0, 50, 130, 200}, .cu_k = {0, 50, 130, 200}, .extra = "boundaries"},
    {"M2", "numeric", FC_F32, 1, 6, 2, 0, 0, 64, 64, CW(128), 16, 16, BMASK_DIRECT, .nseq = 4,
     .cu_q = {0, 1, 2, 3, 4}, .cu_k = {0, 300, 301, 1078, 1142}, .extra = "decode"},
    {"M2", "numeric", FC_F16, 1, 6, 6, 0, 0, 128, 128, CC(128), 128, 64, BMASK_SLOW, .nseq = 2,
     .cu_q = {0, 64, 164}, .cu_k = {0, 500, 800}, .extra = "chunkedprefill"},
    {"M2", "numeric", FC_BF16, 1, 6, 2, 0, 0, 64, 64, BW(33), 64, 128, BMASK_SUPERSET, .nseq = 5,
     .cu_q = {0, 200, 201, 202, 290, 291}, .cu_k = {0, 200, 450, 451, 541, 900}, .extra = "mixed"},
    {"M2", "paged", FC_F16, 1, 6, 2, 0, 0, 64, 64, CW(64), 64, 64, BMASK_DIRECT, .nseq = 3,
     .cu_q = {0, 1, 101, 102}, .cu_k = {0, 300, 400, 777}, .extra = "paged"},

    /* M3 builders: slow == direct, superset sound, outputs agree across builders. */
    {"M3", "builders", FC_F32, 1, 2, 1, 2048, 2048, 64, 64, CAUSAL, 128, 128, BMASK_DIRECT,
     .min_size = GATE_DEFAULT},
    {"M3", "builders", FC_F16, 1, 2, 1, 1023, 1023, 64, 64, CW(300), 128, 64, BMASK_DIRECT},
    {"M3", "builders", FC_BF16, 1, 2, 2, 2051, 2047, 64, 64, CC(100), 64, 128, BMASK_DIRECT,
     .min_size = GATE_DEFAULT},
    {"M3", "builders", FC_F16, 1, 2, 1, 0, 0, 64, 64, CW(17), 16, 16, BMASK_DIRECT, .nseq = 4,
     .cu_q = {0, 30, 30, 131, 132}, .cu_k = {0, 30, 65, 166, 400}},

    /* M4 exactness invariants. */
    {"M4", "window-edge", FC_F32, 1, 2, 1, 256, 256, 64, 64, CW(17), 64, 64, BMASK_DIRECT},
    {"M4", "window-edge", FC_F16, 1, 2, 1, 256, 256, 64, 64, CW(128), 64, 64, BMASK_DIRECT},
    {"M4", "window-edge", FC_BF16, 1, 2, 1, 300, 300, 64, 64, BW(64), 128, 128, BMASK_SLOW},
    {"M4", "window-edge", FC_F16, 1, 2, 1, 256, 256, 64, 64, CW(129), 16, 16, BMASK_SUPERSET_TRIM,
     .min_size = GATE_DEFAULT},
    {"M4", "poison", FC_F16, 1, 6, 2, 256, 512, 64, 64, CW(64), 64, 64, BMASK_DIRECT},
    /* Poisoning needs keys no query sees: queries that are the tail of longer key sequences. */
    {"M4", "poison", FC_F32, 1, 6, 2, 100, 300, 64, 64, CC(100), 128, 128, BMASK_SUPERSET},
    {"M4", "poison", FC_BF16, 1, 6, 2, 0, 0, 64, 64, CW(32), 64, 64, BMASK_DIRECT, .nseq = 3,
     .cu_q = {0, 100, 101, 180}, .cu_k = {0, 100, 400, 480}},
    {"M4", "lse-merge", FC_F32, 1, 6, 2, 256, 512, 64, 64, CW(200), 64, 64, BMASK_DIRECT},
    {"M4", "lse-merge", FC_F16, 2, 6, 1, 300, 300, 64, 64, CAUSAL, 64, 64, BMASK_SLOW},
    /* With sinks the sink must count once: the merge gives it to one half (lse_merge.c). */
    {"M4", "lse-merge", FC_F32, 1, 6, 2, 256, 512, 64, 64, CW(128), 64, 64, BMASK_DIRECT,
     .softcap = 30, .sinks = 1},
    {"M4", "lse-merge", FC_BF16, 1, 6, 2, 300, 300, 64, 64, CAUSAL, 64, 64, BMASK_SLOW,
     .sinks = 1},
    {"M4", "decode", FC_F32, 1, 6, 2, 1, 1000, 64, 64, CW(1), 64, 64, BMASK_DIRECT},
    {"M4", "decode", FC_F16, 1, 6, 2, 1, 1000, 64, 64, CW(64), 64, 64, BMASK_DIRECT},
    {"M4", "decode", FC_BF16, 1, 6, 2, 1, 1000, 128, 128, CW(129), 128, 128, BMASK_SUPERSET_TRIM},
    {"M4", "decode", FC_F16, 1, 6, 2, 1, 1000, 64, 64, CW(128), 64, 64, BMASK_DIRECT,
     .softcap = 50, .sinks = 1},
    {"M4", "window-edge", FC_BF16, 1, 2, 1, 256, 256, 64, 64, CW(64), 64, 64, BMASK_DIRECT,
     .softcap = 50, .sinks = 1},
    {"M4", "poison", FC_F16, 1, 6, 2, 256, 512, 64, 64, CW(64), 64, 64, BMASK_DIRECT,
     .softcap = 50, .sinks = 1},
    /* P rounded before P.V (kernel contract): causal and chunked rows all start at multiples of
     * 16; the window case checks only the rows whose window does (see ci/checks/pround.c). */
    {"M4", "p-round", FC_F16, 1, 2, 1, 256, 256, 64, 64, CAUSAL, 64, 64, BMASK_DIRECT},
    {"M4", "p-round", FC_BF16, 2, 2, 2, 100, 300, 64, 64, {0}, 128, 128, BMASK_SLOW},
    {"M4", "p-round", FC_BF16, 1, 2, 1, 300, 300, 128, 128, CC(128), 16, 16, BMASK_DIRECT},
    {"M4", "p-round", FC_F16, 1, 2, 1, 300, 300, 64, 64, CW(64), 64, 64, BMASK_SUPERSET_TRIM,
     .min_size = GATE_DEFAULT},

    /* M5 adversarial inputs, and long keys in the full run. float32 peaked softmax and float32
     * scores around -1e5 were once left out: the old fixed float32 bounds (a degenerate
     * threshold of 1e-4 * max|O_gold|, H2 <= 1e-7) sat below what float32 itself computes
     * there. docs/tolerance.md now scales both to the dtype and the baseline, and they run.
     * float16 cannot hold scores of -1e5 at all and bfloat16 resolves them to 512: the
     * baseline rounding its scores to the input type overflows or drowns there, and those
     * rows are judged against the float32-score baseline (a head mix-up once passed the
     * bfloat16 case). Scores around -1e9 are past what float32 resolves too (farlogits, at
     * the end of the table): no baseline holds a row, so H1 has no scale; that case runs to
     * show it reported outside the contract (never a kernel failure; --strict fails it). */
    {"M5", "numeric", FC_F32, 1, 6, 2, 256, 512, 64, 64, CW(129), 64, 64, BMASK_DIRECT,
     GI_PEAKED},
    {"M5", "numeric", FC_F32, 1, 6, 2, 256, 512, 64, 64, CW(129), 64, 64, BMASK_DIRECT,
     GI_NEG_LOGITS},
    {"M5", "numeric", FC_F16, 1, 6, 2, 256, 512, 64, 64, CW(129), 64, 64, BMASK_DIRECT,
     GI_NEG_LOGITS},
    {"M5", "numeric", FC_F16, 1, 6, 2, 256, 512, 64, 64, CW(129), 64, 64, BMASK_DIRECT,
     GI_UNIFORM},
    {"M5", "numeric", FC_BF16, 1, 6, 2, 256, 512, 64, 64, CW(129), 64, 64, BMASK_DIRECT,
     GI_NEG_LOGITS},
    {"M5", "numeric", FC_F16, 1, 6, 2, 256, 512, 64, 64, CW(129), 64, 64, BMASK_DIRECT,
     GI_PEAKED},
    {"M5", "numeric", FC_F16, 1, 6, 2, 256, 512, 64, 64, CAUSAL, 64, 64, BMASK_DIRECT,
     GI_OUTLIERS},
    {"M5", "numeric", FC_F16, 1, 6, 2, 256, 512, 64, 64, CAUSAL, 64, 64, BMASK_DIRECT,
     GI_FP16_LIMIT},
    /* Score terms. Scores 2 caps beyond the cap on both sides: a row whose allowed scores
     * all sit near -cap is where a mask filled before the cap leaks (masked keys come back at
     * -cap and weigh as much). A sink far above every score (output near 0; float16 is left
     * out: its outputs would underflow). Sinks on rows with no allowed key (LSE = the sink). */
    {"M5", "numeric", FC_F32, 1, 6, 2, 256, 512, 64, 64, CW(129), 64, 64, BMASK_DIRECT,
     GI_BEYOND_CAP, .softcap = 50},
    {"M5", "numeric", FC_F16, 1, 6, 2, 256, 512, 64, 64, CW(129), 64, 64, BMASK_DIRECT,
     GI_BEYOND_CAP, .softcap = 50},
    {"M5", "numeric", FC_BF16, 1, 6, 2, 256, 512, 64, 64, CC(100), 64, 64, BMASK_DIRECT,
     GI_BEYOND_CAP, .softcap = 30, .sinks = 1},
    {"M5", "numeric", FC_BF16, 1, 6, 2, 256, 512, 64, 64, CW(129), 64, 64, BMASK_DIRECT,
     .sinks = 1, .sink_values = sinks_high, .extra = "sinkhigh"},
    {"M5", "numeric", FC_F32, 1, 6, 2, 256, 512, 64, 64, CAUSAL, 64, 64, BMASK_DIRECT,
     .softcap = 50, .sinks = 1, .sink_values = sinks_high, .extra = "sinkhigh"},
    {"M5", "numeric", FC_F16, 1, 6, 2, 300, 100, 64, 64, CAUSAL, 64, 64, BMASK_DIRECT,
     .sinks = 1, .extra = "emptytile"},
    {"M5", "numeric", FC_BF16, 1, 6, 2, 256, 512, 64, 64, BW(64), 64, 64, BMASK_DIRECT,
     GI_NEG_LOGITS, .min_size = GATE_DEFAULT},
    {"M5", "numeric", FC_BF16, 1, 6, 2, 256, 512, 64, 64, CAUSAL, 64, 64, BMASK_DIRECT,
     GI_PEAKED, .min_size = GATE_DEFAULT},
    {"M5", "numeric", FC_F16, 1, 6, 2, 256, 512, 64, 64, CW(64), 64, 64, BMASK_DIRECT,
     GI_PEAKED, .min_size = GATE_DEFAULT},
    {"M5", "numeric", FC_BF16, 1, 6, 2, 256, 512, 64, 64, CC(100), 64, 64, BMASK_DIRECT,
     GI_OUTLIERS, .min_size = GATE_DEFAULT},
    {"M5", "numeric", FC_F32, 1, 6, 2, 256, 512, 64, 64, BW(17), 64, 64, BMASK_DIRECT,
     GI_UNIFORM, .min_size = GATE_DEFAULT},
    {"M5", "numeric", FC_F16, 1, 2, 1, 16, 16384, 64, 64, CAUSAL, 16, 128, BMASK_DIRECT,
     .min_size = GATE_FULL, .extra = "longkeys"},
    {"M5", "numeric", FC_BF16, 1, 2, 1, 16, 16384, 64, 64, CAUSAL, 16, 128, BMASK_DIRECT,
     .min_size = GATE_FULL, .extra = "longkeys"},
    {"M5", "numeric", FC_F32, 1, 2, 1, 16, 16384, 64, 64, CAUSAL, 16, 128, BMASK_DIRECT,
     .min_size = GATE_FULL, .extra = "longkeys"},

    /* M6 hybrid layouts, scaled so windows are ~33-64 and sequences longer than them; a packed
     * batch mixes prefill and decode. */
    {"M6", "layout", FC_F16, 1, 2, 1, 300, 300, 64, 64, {0}, 64, 64, BMASK_DIRECT,
     .layout = "modernbert", .nlayers = 6, .scale_div = 2},
    {"M6", "layout", FC_BF16, 1, 2, 1, 300, 300, 64, 64, {0}, 64, 64, BMASK_SUPERSET_TRIM,
     .layout = "embeddinggemma", .nlayers = 12, .scale_div = 8},
    {"M6", "layout", FC_F16, 1, 2, 1, 0, 0, 64, 64, {0}, 64, 64, BMASK_DIRECT, .nseq = 3,
     .cu_q = {0, 200, 201, 290}, .cu_k = {0, 200, 450, 540}, .layout = "gemma2", .nlayers = 4,
     .scale_div = 64},
    {"M6", "layout", FC_F32, 1, 2, 1, 300, 300, 64, 64, {0}, 64, 64, BMASK_SLOW,
     .layout = "gemma3", .nlayers = 12, .scale_div = 8},
    {"M6", "layout", FC_F16, 1, 2, 1, 0, 0, 64, 64, {0}, 64, 64, BMASK_SUPERSET_TRIM, .nseq = 3,
     .cu_q = {0, 200, 201, 290}, .cu_k = {0, 200, 450, 540}, .layout = "gemma3", .nlayers = 12,
     .scale_div = 8},
    {"M6", "layout", FC_BF16, 1, 2, 1, 300, 300, 64, 64, {0}, 64, 64, BMASK_DIRECT,
     .layout = "llama4", .nlayers = 8, .scale_div = 64},
    {"M6", "layout", FC_F16, 1, 2, 1, 300, 300, 64, 64, {0}, 64, 64, BMASK_SUPERSET,
     .layout = "mistral", .nlayers = 3, .scale_div = 64},
    {"M6", "layout", FC_F32, 1, 2, 1, 300, 300, 64, 64, {0}, 64, 64, BMASK_DIRECT,
     .layout = "modernbert-legacy", .nlayers = 6, .scale_div = 2, .min_size = GATE_DEFAULT},
    {"M6", "layout", FC_BF16, 1, 2, 1, 0, 0, 64, 64, {0}, 64, 64, BMASK_DIRECT, .nseq = 3,
     .cu_q = {0, 200, 201, 290}, .cu_k = {0, 200, 450, 540}, .layout = "llama4", .nlayers = 8,
     .scale_div = 64, .min_size = GATE_DEFAULT},
    /* Layouts with score terms (the gemma2 rows above cap at 50 and scale by 256^-0.5 too):
     * Gemma 2 27b's 144^-0.5 with peaked queries, so that the cap bends the scores; gpt-oss-20b's
     * sinks on every layer, W = 128/2 and, packed with a decode row, 128/4. */
    {"M6", "layout", FC_F16, 1, 2, 1, 300, 300, 64, 64, {0}, 64, 64, BMASK_DIRECT, GI_PEAKED,
     .layout = "gemma2-27b", .nlayers = 4, .scale_div = 64},
    {"M6", "layout", FC_BF16, 1, 4, 1, 300, 300, 64, 64, {0}, 64, 64, BMASK_DIRECT,
     .layout = "gpt-oss-20b", .nlayers = 6, .scale_div = 2},
    {"M6", "layout", FC_F16, 1, 2, 1, 0, 0, 64, 64, {0}, 64, 64, BMASK_SUPERSET_TRIM, .nseq = 3,
     .cu_q = {0, 200, 201, 290}, .cu_k = {0, 200, 450, 540}, .layout = "gpt-oss-20b",
     .nlayers = 4, .scale_div = 4},
    /* M5, added last: a case's seed is its place in this table, so the cases above keep
     * their inputs. Scores around -1e9 (see the M5 comment). */
    {"M5", "numeric", FC_F16, 1, 6, 2, 256, 512, 64, 64, CW(129), 64, 64, BMASK_DIRECT,
     GI_FAR_LOGITS},

    /* M7 long, in the full size (docs/matrix.md says what each targets): lengths to 131,072 on
     * 1-2 query heads and D 32-64, where the length is the point. The windowed cases run on the
     * emu; the dense ones pass GATE_EMU_MAX_WORK (ci/gate_case.h): the GPU backend runs them
     * and export writes them for check. Every oracle stays within gen's default work budget
     * (2^40 multiply-adds), so the gate and export compute it whole. Added last: seeds. */
    {"M7", "numeric", FC_BF16, 1, 2, 1, 131072, 131072, 32, 32, CW(1024), 128, 128,
     BMASK_DIRECT, .min_size = GATE_FULL, .extra = "gemma3local"},
    {"M7", "numeric", FC_F16, 1, 2, 1, 46342, 46342, 32, 32, CW(4096), 64, 128,
     BMASK_SUPERSET_TRIM, .min_size = GATE_FULL, .extra = "mistral"},
    {"M7", "numeric", FC_F16, 1, 2, 1, 131071, 131071, 64, 64, CW(128), 128, 64, BMASK_DIRECT,
     .sinks = 1, .min_size = GATE_FULL, .extra = "gptoss"},
    /* local_attention 128: |d| <= 64, W = 65 (masks/layout.c) */
    {"M7", "numeric", FC_F16, 1, 1, 1, 65537, 65537, 64, 64, BW(65), 128, 128, BMASK_DIRECT,
     .min_size = GATE_FULL, .extra = "modernbert"},
    {"M7", "numeric", FC_BF16, 1, 2, 1, 0, 0, 64, 64, CAUSAL, 16, 128, BMASK_DIRECT, .nseq = 3,
     .cu_q = {0, 1, 2, 3}, .cu_k = {0, 131072, 196609, 196610}, .min_size = GATE_FULL,
     .extra = "decode128k"},
    {"M7", "numeric", FC_F16, 1, 2, 1, 0, 0, 32, 32, CW(1024), 64, 64, BMASK_SUPERSET,
     .nseq = 3, .cu_q = {0, 300, 65836, 65837}, .cu_k = {0, 300, 65836, 70836},
     .min_size = GATE_FULL, .extra = "packed64k"},
    {"M7", "numeric", FC_BF16, 1, 2, 1, 0, 0, 32, 32, CAUSAL, 128, 128, BMASK_DIRECT,
     .nseq = 3, .cu_q = {0, 300, 65836, 65837}, .cu_k = {0, 300, 65836, 70836},
     .min_size = GATE_FULL, .extra = "packed64k"},
    {"M7", "numeric", FC_F16, 1, 2, 1, 65537, 65537, 32, 32, CAUSAL, 128, 128, BMASK_DIRECT,
     .min_size = GATE_FULL},
    {"M7", "numeric", FC_BF16, 1, 2, 1, 46342, 46342, 32, 32, CAUSAL, 64, 64, BMASK_DIRECT,
     .min_size = GATE_FULL},
    {"M7", "numeric", FC_F16, 1, 1, 1, 131071, 131071, 32, 32, CAUSAL, 128, 128,
     BMASK_SUPERSET_TRIM, .min_size = GATE_FULL},
    {"M7", "numeric", FC_BF16, 1, 1, 1, 131072, 131072, 32, 32, CAUSAL, 128, 128, BMASK_DIRECT,
     .min_size = GATE_FULL},
    /* Gemma 3 4b's 5 local : 1 global at 128k, windows 1024 / 8, through one metadata object:
     * the global layer (L05) runs on the GPU backend, the emu builds its block mask and skips
     * it, so L06 still meets the object a global layer leaves. */
    {"M7", "layout", FC_BF16, 1, 1, 1, 131072, 131072, 32, 32, {0}, 128, 128, BMASK_DIRECT,
     .layout = "gemma3-4b", .nlayers = 7, .scale_div = 8, .min_size = GATE_FULL},

    /* M8 explicit (docs/matrix.md): real masks no family expresses, as an explicit mask and
     * bias (ci/xcases.c). The slow builder is the one that reads an explicit mask (direct
     * refuses one, the supersets ignore it), so every case names it. Added last: seeds. */
    {"M8", "numeric", FC_F32, 3, 4, 2, 200, 200, 64, 64, {0}, 64, 64, BMASK_SLOW,
     .xc = {XR_PREFIX_LM}, .all_dtypes = 1, .extra = "prefix_lm"},
    {"M8", "numeric", FC_F32, 1, 8, 2, 150, 300, 64, 64, CAUSAL, 64, 64, BMASK_SLOW,
     .xc = {XR_ALIBI}, .all_dtypes = 1, .extra = "alibi"},
    {"M8", "numeric", FC_F32, 2, 4, 1, 256, 256, 64, 64, CAUSAL, 128, 64, BMASK_SLOW,
     .xc = {XR_ALIBI}, .all_dtypes = 1, .softcap = 30, .sinks = 1, .extra = "alibi"},
    {"M8", "numeric", FC_F32, 2, 4, 1, 24, 124, 64, 64, CAUSAL, 16, 32, BMASK_SLOW,
     .xc = {XR_TREE, 100}, .all_dtypes = 1, .extra = "tree"},
    {"M8", "numeric", FC_F32, 1, 4, 2, 300, 300, 64, 64, CAUSAL, 64, 64, BMASK_SLOW,
     .xc = {XR_DOC_WINDOW, 6}, .all_dtypes = 1, .extra = "doc_window"},
    {"M8", "numeric", FC_F32, 2, 4, 1, 256, 256, 64, 64, {0}, 64, 64, BMASK_SLOW,
     .xc = {XR_GEMMA3_IMAGE, 32}, .all_dtypes = 1, .extra = "gemma3_image"},
    /* default: a thousand tokens and more (Gemma 3 4b's local window 1024 and its 256 tokens
     * an image at 1/8) */
    {"M8", "numeric", FC_F32, 2, 8, 2, 1000, 1000, 128, 128, {0}, 128, 128, BMASK_SLOW,
     .xc = {XR_PREFIX_LM}, .all_dtypes = 1, .min_size = GATE_DEFAULT, .extra = "prefix_lm"},
    {"M8", "numeric", FC_F32, 1, 8, 1, 1024, 1024, 64, 64, CAUSAL, 128, 128, BMASK_SLOW,
     .xc = {XR_ALIBI}, .all_dtypes = 1, .min_size = GATE_DEFAULT, .extra = "alibi"},
    {"M8", "numeric", FC_F32, 4, 4, 1, 60, 960, 64, 64, CAUSAL, 16, 64, BMASK_SLOW,
     .xc = {XR_TREE, 900}, .all_dtypes = 1, .min_size = GATE_DEFAULT, .extra = "tree"},
    {"M8", "numeric", FC_F32, 1, 4, 2, 2048, 2048, 64, 64, CAUSAL, 128, 128, BMASK_SLOW,
     .xc = {XR_DOC_WINDOW, 12}, .all_dtypes = 1, .min_size = GATE_DEFAULT,
     .extra = "doc_window"},
    {"M8", "numeric", FC_F32, 1, 4, 1, 1536, 1536, 64, 64, {0}, 128, 128, BMASK_SLOW,
     .xc = {XR_GEMMA3_IMAGE, 128}, .all_dtypes = 1, .min_size = GATE_DEFAULT,
     .extra = "gemma3_image"},
    /* full: a few thousand tokens, one dtype each */
    {"M8", "numeric", FC_BF16, 2, 4, 1, 4096, 4096, 64, 64, {0}, 128, 128, BMASK_SLOW,
     .xc = {XR_PREFIX_LM}, .min_size = GATE_FULL, .extra = "prefix_lm"},
    {"M8", "numeric", FC_F16, 1, 8, 1, 4096, 4096, 64, 64, CAUSAL, 128, 128, BMASK_SLOW,
     .xc = {XR_ALIBI}, .softcap = 50, .sinks = 1, .min_size = GATE_FULL, .extra = "alibi"},
    {"M8", "numeric", FC_BF16, 2, 4, 1, 64, 4064, 64, 64, CAUSAL, 16, 128, BMASK_SLOW,
     .xc = {XR_TREE, 4000}, .min_size = GATE_FULL, .extra = "tree"},
    {"M8", "numeric", FC_F16, 1, 4, 1, 6000, 6000, 64, 64, CAUSAL, 128, 128, BMASK_SLOW,
     .xc = {XR_DOC_WINDOW, 24}, .min_size = GATE_FULL, .extra = "doc_window"},
    {"M8", "numeric", FC_BF16, 1, 2, 1, 4096, 4096, 64, 64, {0}, 128, 128, BMASK_SLOW,
     .xc = {XR_GEMMA3_IMAGE, 512}, .min_size = GATE_FULL, .extra = "gemma3_image"},
};

static fc_status add_table_case(caselist *cl, const table_case *t, uint64_t seed)
{
    gate_case *c = push(cl);
    if (!c)
        return FC_ENOMEM;
    snprintf(c->group, sizeof c->group, "%s", t->group);
    if (!(c->check = gate_check_find(t->check)))
        return FC_EINVAL;
    c->gp.dtype = t->dtype;
    c->gp.b = t->b;
    c->gp.hq = t->hq;
    c->gp.hkv = t->hkv;
    c->gp.d = t->d;
    c->gp.dv = t->dv;
    c->gp.mask = t->mask;
    c->gp.qb = t->qb;
    c->gp.kb = t->kb;
    c->gp.seed = seed;
    c->gp.nseq = t->nseq;
    c->gp.lq = t->nseq ? t->cu_q[t->nseq] : t->lq;
    c->gp.lk = t->nseq ? t->cu_k[t->nseq] : t->lk;
    memcpy(c->gp.cu_q, t->cu_q, sizeof t->cu_q);
    memcpy(c->gp.cu_k, t->cu_k, sizeof t->cu_k);
    c->builder = t->builder;
    c->input = t->input;
    c->gp.softcap = t->softcap;
    c->gp.sinks = t->sinks;
    c->gp.sink_values = t->sink_values;
    c->gp.sinks_seed = sinks_seed_of(seed);
    c->xc = t->xc;
    c->all_dtypes = t->all_dtypes;
    if (t->layout) {
        snprintf(c->layout, sizeof c->layout, "%s", t->layout);
        c->nlayers = t->nlayers;
        c->scale_div = t->scale_div;
    }
    char extra[64] = "";
    if (t->layout)
        snprintf(extra, sizeof extra, "%s%s%s", t->layout, t->extra ? "-" : "",
                 t->extra ? t->extra : "");
    else if (t->extra)
        snprintf(extra, sizeof extra, "%s", t->extra);
    make_id(c, extra);
    return FC_OK;
}

/* Appends -2, -3, ... to later duplicates so every id is unique (counted on the ids as
 * generated, before any suffix). */
static fc_status dedup_ids(caselist *cl)
{
    char (*orig)[GATE_ID_MAX] = malloc(sizeof *orig * (size_t)(cl->n + 1));
    if (!orig)
        return FC_ENOMEM;
    for (int i = 0; i < cl->n; i++)
        memcpy(orig[i], cl->v[i].id, GATE_ID_MAX);
    for (int i = 1; i < cl->n; i++) {
        unsigned dup = 1;
        for (int j = 0; j < i; j++)
            dup += !strcmp(orig[j], orig[i]);
        if (dup > 1) {
            char suffix[16];
            snprintf(suffix, sizeof suffix, "-%u", dup % 100000u);
            size_t len = strlen(cl->v[i].id), sl = strlen(suffix);
            if (len + sl >= GATE_ID_MAX)
                len = GATE_ID_MAX - 1 - sl;
            memcpy(cl->v[i].id + len, suffix, sl + 1);
        }
    }
    free(orig);
    return FC_OK;
}

fc_status gate_matrix(gate_size size, uint64_t seed, gate_case **cases, int *ncases,
                      int *dropped_pairs, fc_err *err)
{
    caselist cl = {0};
    int dropped = 0;
    /* The full size unions three independently seeded designs (more value combinations per
     * pair); a case another design already holds, same id, is kept once. */
    fc_status st = m1_pairwise(&cl, size, seed, &dropped);
    for (int extra = 1; !st && size == GATE_FULL && extra < 3; extra++) {
        int first = cl.n, more = 0;
        st = m1_pairwise(&cl, size, seed + 7919u * (uint64_t)extra, &more);
        int kept = first;
        for (int i = first; i < cl.n; i++) {
            int dup = 0;
            for (int j = 0; j < first && !dup; j++)
                dup = !strcmp(cl.v[j].id, cl.v[i].id);
            if (!dup)
                cl.v[kept++] = cl.v[i];
        }
        cl.n = kept;
    }
    for (size_t i = 0; !st && i < sizeof tables / sizeof tables[0]; i++)
        if (tables[i].min_size <= size)
            st = add_table_case(&cl, &tables[i], seed + 100000 + i);
    if (st) {
        free(cl.v);
        if (st == FC_EINVAL)
            return fc_errf(err, st, "the %s matrix names a check that ci/checks.c does not list",
                           gate_size_name(size));
        return fc_errf(err, st, "out of memory building the %s matrix", gate_size_name(size));
    }
    if (dedup_ids(&cl)) {
        free(cl.v);
        return fc_errf(err, FC_ENOMEM, "out of memory building the %s matrix", gate_size_name(size));
    }
    if (dropped_pairs)
        *dropped_pairs = dropped;
    *cases = cl.v;
    *ncases = cl.n;
    return FC_OK;
}
