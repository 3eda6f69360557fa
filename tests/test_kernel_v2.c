/*
 * test_kernel_v2.c - flex-attention kernel versions 2 and 3 (gpu/attn_v2.cuh, gpu/attn_v3.cuh)
 * on the emu backend: the tolerance gates of docs/tolerance.md against the float64 oracle over
 * mask families, builders, block sizes, GQA, packed batches, Lq != Lk, empty rows and all three
 * dtypes; both against version 1 on the same inputs; paged K/V bitwise equal to contiguous K/V;
 * poisoned masked keys and explicit masks equal to a family bitwise, in each kernel;
 * determinism; and the shapes they refuse before any launch. On a machine with a CUDA device, the same table
 * runs natively too (tensor cores, cp.async, ldmatrix for real), else that test is skipped.
 *
 *   make BUILD=build test    (or build/tests/test_kernel_v2 --verbose for the H1 ratios)
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <criterion/parameterized.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "masks/bmask.h"
#include "fixtures/fix.h"
#include "gpu/gpu.h"
#include "ref/ref.h"
#include "reports/tol.h"
#include "tests/test_rng.h"

#define MAXSEQ 4

/* One case a line. Parameter structs hold no pointers (Criterion). */
typedef struct v2_case {
    char name[48];
    fc_dtype dt;
    int32_t b, hq, hkv, lq, lk, d;
    int32_t causal, window, chunk;
    int32_t qb, kb;
    bmask_builder builder;
    int32_t nseq; /* > 0: packed */
    int32_t cu_q[MAXSEQ + 1], cu_k[MAXSEQ + 1];
    int32_t dv; /* 0: = d */
    double softcap; /* score terms (masks/terms.h): 0 off */
    int sinks;      /* 1: per-head sinks drawn in [-5, 10] */
    int xm, xb;     /* explicit mask and bias (masks/xterms.h): XM_*, XB_*; 0 off */
} v2_case;

/* Explicit masks (docs/semantics.md section 8), filled by xterms_of. */
enum {
    XM_RANDOM = 1, /* per (b, h): each pair with probability 0.6, every 7th row empty */
    XM_PREFIX,     /* per batch entry: prefix-LM, keys below the entry's prefix or causal */
    XM_COLUMNS,    /* XM_RANDOM, and every fifth key masked for every row: poisonable keys */
};
/* Explicit biases. */
enum {
    XB_ALIBI = 1, /* per head: -slope_h * |distance| (bottom-right aligned), ALiBi's slopes */
    XB_RANDOM,    /* per (b, h): uniform in [-3, 3] */
};

#define F32 FC_F32
#define F16 FC_F16
#define BF16 FC_BF16

static const v2_case cases[] = {
    /* mask families, block sizes, builders */
    {"dense f16 128x128", F16, 1, 2, 2, 200, 200, 64, 0, 0, 0, 128, 128, BMASK_DIRECT, 0, {0}, {0}, 0, 0, 0, 0, 0},
    {"causal bf16 64x64", BF16, 1, 2, 1, 160, 160, 64, 1, 0, 0, 64, 64, BMASK_SLOW, 0, {0}, {0}, 0, 0, 0, 0, 0},
    {"causal window f16 16x16", F16, 1, 2, 2, 130, 130, 64, 1, 24, 0, 16, 16, BMASK_DIRECT, 0, {0}, {0}, 0, 0, 0, 0, 0},
    {"bidir window bf16 128x64", BF16, 2, 2, 1, 150, 150, 64, 0, 20, 0, 128, 64, BMASK_DIRECT, 0, {0}, {0}, 0, 0, 0, 0, 0},
    {"chunk causal f16 32x16", F16, 1, 1, 1, 140, 140, 128, 1, 0, 48, 32, 16, BMASK_SLOW, 0, {0}, {0}, 0, 0, 0, 0, 0},
    {"causal window superset-trim f16", F16, 1, 2, 2, 150, 150, 64, 1, 20, 0, 64, 64, BMASK_SUPERSET_TRIM, 0, {0}, {0}, 0, 0, 0, 0, 0},
    {"bidir window superset bf16 16x32", BF16, 1, 1, 1, 90, 90, 32, 0, 9, 0, 16, 32, BMASK_SUPERSET, 0, {0}, {0}, 0, 0, 0, 0, 0},
    /* head dims */
    {"causal d96 f16", F16, 1, 1, 1, 100, 100, 96, 1, 0, 0, 64, 64, BMASK_DIRECT, 0, {0}, {0}, 0, 0, 0, 0, 0},
    {"causal d128 bf16 128x128", BF16, 1, 2, 2, 140, 140, 128, 1, 0, 0, 128, 128, BMASK_DIRECT, 0, {0}, {0}, 0, 0, 0, 0, 0},
    {"dense d32 f16 256x256", F16, 1, 2, 1, 70, 300, 32, 0, 0, 0, 256, 256, BMASK_DIRECT, 0, {0}, {0}, 0, 0, 0, 0, 0},
    {"chunk d80 f16 16x16", F16, 1, 2, 1, 90, 110, 80, 1, 0, 40, 16, 16, BMASK_DIRECT, 0, {0}, {0}, 0, 0, 0, 0, 0},
    {"causal d256 bf16 64x128", BF16, 1, 2, 1, 100, 140, 256, 1, 0, 0, 64, 128, BMASK_DIRECT, 0, {0}, {0}, 0, 0, 0, 0, 0},
    {"window d96 dv64 f16 128x128", F16, 1, 3, 1, 120, 160, 96, 1, 33, 0, 128, 128, BMASK_SUPERSET_TRIM, 0, {0}, {0}, 64, 0, 0, 0, 0},
    {"window d96 dv64 f32", F32, 1, 3, 3, 100, 150, 96, 1, 40, 0, 64, 64, BMASK_DIRECT, 0, {0}, {0}, 64, 0, 0, 0, 0},
    {"causal chunk d256 f32 128x128", F32, 1, 1, 1, 90, 120, 256, 1, 0, 50, 128, 128, BMASK_SLOW, 0, {0}, {0}, 0, 0, 0, 0, 0},
    /* Lq != Lk: queries bottom-right aligned; Lq > Lk gives rows with no key */
    {"causal decode-ish f16 Lq<Lk", F16, 1, 4, 2, 17, 230, 64, 1, 0, 0, 16, 64, BMASK_DIRECT, 0, {0}, {0}, 0, 0, 0, 0, 0},
    {"causal empty rows bf16 Lq>Lk", BF16, 1, 2, 2, 120, 50, 64, 1, 0, 0, 64, 16, BMASK_SLOW, 0, {0}, {0}, 0, 0, 0, 0, 0},
    /* packed batches, a zero-length sequence, GQA */
    {"packed causal window f16", F16, 1, 4, 2, 190, 190, 64, 1, 32, 0, 64, 64, BMASK_DIRECT, 3, {0, 70, 70, 190}, {0, 70, 70, 190}, 0, 0, 0, 0, 0},
    {"packed chunk bf16 16x16", BF16, 1, 2, 1, 100, 160, 64, 1, 0, 32, 16, 16, BMASK_SLOW, 3, {0, 1, 60, 100}, {0, 40, 100, 160}, 0, 0, 0, 0, 0},
    {"packed superset f16 zero-key seq", F16, 1, 2, 2, 90, 100, 64, 0, 0, 0, 32, 32, BMASK_SUPERSET, 3, {0, 30, 60, 90}, {0, 50, 50, 100}, 0, 0, 0, 0, 0},
    /* fp32 on CUDA cores */
    {"causal window f32 64x64", F32, 1, 2, 1, 150, 150, 64, 1, 30, 0, 64, 64, BMASK_DIRECT, 0, {0}, {0}, 0, 0, 0, 0, 0},
    {"packed chunk f32 16x16", F32, 1, 2, 2, 100, 120, 32, 0, 0, 40, 16, 16, BMASK_SLOW, 2, {0, 45, 100}, {0, 70, 120}, 0, 0, 0, 0, 0},
    {"dense d128 f32 128x128", F32, 2, 1, 1, 80, 130, 128, 0, 0, 0, 128, 128, BMASK_DIRECT, 0, {0}, {0}, 0, 0, 0, 0, 0},
    {"empty rows f32 Lq>Lk 16x32", F32, 1, 1, 1, 70, 30, 96, 1, 0, 0, 16, 32, BMASK_SUPERSET_TRIM, 0, {0}, {0}, 0, 0, 0, 0, 0},
    /* score terms: soft-cap (Gemma 2's 50, Grok's 30, a small cap that bends every score) and
     * sinks (gpt-oss), with empty rows, decode, packing, GQA, several tiles per row */
    {"softcap 50 causal window f16", F16, 1, 2, 2, 150, 150, 64, 1, 40, 0, 64, 16, BMASK_DIRECT, 0, {0}, {0}, 0, 50, 0, 0, 0},
    {"softcap 2 dense bf16 d128", BF16, 2, 2, 1, 90, 120, 128, 0, 0, 0, 64, 64, BMASK_DIRECT, 0, {0}, {0}, 0, 2, 0, 0, 0},
    {"sinks causal empty rows bf16 Lq>Lk", BF16, 1, 4, 2, 120, 60, 64, 1, 0, 0, 64, 16, BMASK_SLOW, 0, {0}, {0}, 0, 0, 1, 0, 0},
    {"softcap 30 sinks decode f16 GQA", F16, 1, 8, 2, 1, 300, 64, 1, 128, 0, 16, 64, BMASK_DIRECT, 0, {0}, {0}, 0, 30, 1, 0, 0},
    {"softcap 2 sinks packed f32", F32, 1, 2, 1, 100, 120, 64, 1, 0, 0, 16, 16, BMASK_SLOW, 3, {0, 1, 60, 100}, {0, 0, 60, 120}, 0, 2, 1, 0, 0},
    {"sinks window f32 d32 64x64", F32, 1, 3, 3, 130, 130, 32, 1, 20, 0, 64, 64, BMASK_SUPERSET_TRIM, 0, {0}, {0}, 0, 0, 1, 0, 0},
    /* explicit terms (section 8), always with the slow builder (the one that reads the mask):
     * random per-head masks with empty rows on mostly partial tiles; prefix-LM with no family
     * (full tiles in the prefix and below the diagonal); ALiBi with causal, soft-cap and sinks
     * (the bias on full tiles); a packed batch; the 64-key tensor-core stage and fp32's CUDA
     * cores; decode with sinks, whose empty rows keep the sink */
    {"xmask random f16 16x16", F16, 2, 4, 2, 100, 120, 64, 0, 0, 0, 16, 16, BMASK_SLOW, 0, {0}, {0}, 0, 0, 0, XM_RANDOM, 0},
    {"xmask random bias f32 window 16x16", F32, 1, 2, 1, 90, 110, 32, 0, 30, 0, 16, 16, BMASK_SLOW, 0, {0}, {0}, 0, 0, 0, XM_RANDOM, XB_RANDOM},
    {"xmask prefix-LM bf16 64x64", BF16, 2, 2, 1, 150, 150, 64, 0, 0, 0, 64, 64, BMASK_SLOW, 0, {0}, {0}, 0, 0, 0, XM_PREFIX, 0},
    {"xmask prefix-LM bias f16 d128 128x64", F16, 2, 2, 2, 140, 160, 128, 0, 0, 0, 128, 64, BMASK_SLOW, 0, {0}, {0}, 0, 0, 0, XM_PREFIX, XB_RANDOM},
    {"alibi causal softcap sinks f16", F16, 1, 4, 2, 130, 130, 64, 1, 0, 0, 64, 16, BMASK_SLOW, 0, {0}, {0}, 0, 30, 1, 0, XB_ALIBI},
    {"alibi causal softcap sinks bf16 64x64", BF16, 1, 2, 1, 140, 140, 64, 1, 0, 0, 64, 64, BMASK_SLOW, 0, {0}, {0}, 0, 20, 1, 0, XB_ALIBI},
    {"alibi causal softcap sinks f32", F32, 1, 2, 2, 120, 120, 64, 1, 0, 0, 32, 16, BMASK_SLOW, 0, {0}, {0}, 0, 30, 1, 0, XB_ALIBI},
    {"xmask packed causal bias bf16 32x16", BF16, 1, 2, 1, 100, 160, 64, 1, 0, 0, 32, 16, BMASK_SLOW, 3, {0, 1, 60, 100}, {0, 40, 100, 160}, 0, 0, 0, XM_RANDOM, XB_RANDOM},
    {"xmask decode sinks f16 GQA", F16, 1, 4, 2, 9, 200, 64, 1, 0, 0, 16, 64, BMASK_SLOW, 0, {0}, {0}, 0, 0, 1, XM_RANDOM, XB_ALIBI},
    {"xmask columns chunk f32 d96/64", F32, 1, 2, 1, 70, 90, 96, 0, 0, 32, 32, 32, BMASK_SLOW, 0, {0}, {0}, 64, 0, 0, XM_COLUMNS, XB_RANDOM},
    /* kernel 3's own paths: unmasked tiles (full, below Lk, in a query tile below Lq) over
     * many 32- and 64-key tiles, so the running max moves between tiles, beside masked ones
     * (the diagonal, the ragged last key tile, the query tile past Lq); with soft-cap and sinks */
    {"dense d128 f16 128x128 many tiles", F16, 1, 2, 1, 300, 520, 128, 0, 0, 0, 128, 128, BMASK_DIRECT, 0, {0}, {0}, 0, 0, 0, 0, 0},
    {"causal d64 bf16 128x64 sinks", BF16, 1, 2, 2, 290, 290, 64, 1, 0, 0, 128, 64, BMASK_DIRECT, 0, {0}, {0}, 0, 0, 1, 0, 0},
    {"softcap 50 causal d80 f16 64x128", F16, 1, 2, 1, 260, 300, 80, 1, 0, 0, 64, 128, BMASK_DIRECT, 0, {0}, {0}, 0, 50, 0, 0, 0},
};
#define NCASES (sizeof cases / sizeof cases[0])

/* Everything one case needs: inputs and oracle, its block mask, the low-precision baseline. */
typedef struct setup {
    fix_case fc;
    bmask bm;
    float *o_lp;
    size_t no, nl;
} setup;

/* The explicit terms of case t, dense and drawn from seed: the mask packed into *bits, the
 * bias into *bias (NULL: that term off), in gp's xmask / xbias. The grid is the stored token
 * axes (the packed ones for a packed batch). */
static void xterms_of(const v2_case *t, uint64_t seed, fix_gen_params *gp, uint8_t **bits,
                      float **bias)
{
    const int32_t lq = t->lq, lk = t->lk, off = t->lk - t->lq; /* bottom-right aligned */
    *bits = NULL;
    *bias = NULL;
    if (t->xm) {
        const int32_t bm = t->b, hm = t->xm == XM_PREFIX ? 1 : t->hq;
        const size_t rows = (size_t)bm * hm * lq;
        uint8_t *dense = malloc(rows * (size_t)lk + 1);
        *bits = malloc(rows * (size_t)xmask_row_bytes(lk) + 1);
        cr_assert(dense && *bits);
        for (size_t r = 0; r < rows; r++) {
            const int32_t tq = (int32_t)(r % (size_t)lq), b = (int32_t)(r / (size_t)lq / hm);
            for (int32_t tk = 0; tk < lk; tk++) {
                uint8_t *d = &dense[r * (size_t)lk + tk];
                if (t->xm == XM_PREFIX)
                    *d = tk < lk / 3 + 17 * b || tk <= tq + off;
                else
                    *d = tq % 7 != 3 && rng_next(&seed) % 10 < 6 &&
                         (t->xm != XM_COLUMNS || tk % 5 != 2);
            }
        }
        attn_xmask_pack(dense, rows, lk, *bits);
        free(dense);
        gp->xmask = (attn_xmask){*bits, bm, hm, lq, lk};
    }
    if (t->xb) {
        const int32_t bm = t->xb == XB_ALIBI ? 1 : t->b, hm = t->hq;
        const size_t n = (size_t)bm * hm * lq * lk;
        *bias = malloc(n * sizeof(float) + 1);
        cr_assert(*bias);
        for (size_t i = 0; i < n; i++) {
            const int32_t tk = (int32_t)(i % (size_t)lk), tq = (int32_t)(i / (size_t)lk % lq);
            const int32_t h = (int32_t)(i / (size_t)lk / lq % hm);
            const double slope = exp2(-8.0 * (h + 1) / hm); /* ALiBi: 2^(-8/H), ..., 2^-8 */
            (*bias)[i] = t->xb == XB_ALIBI
                             ? (float)(-slope * fabs((double)(tq + off - tk)))
                             : (float)(6.0 * (double)(rng_next(&seed) >> 11) * 0x1p-53 - 3.0);
        }
        gp->xbias = (attn_xbias){*bias, bm, hm, lq, lk};
    }
}

static void setup_case(const v2_case *t, uint64_t seed, setup *s)
{
    fix_gen_params gp = {.name = t->name, .dtype = t->dt, .b = t->b, .hq = t->hq, .hkv = t->hkv,
                         .lq = t->lq, .lk = t->lk, .d = t->d, .dv = t->dv ? t->dv : t->d,
                         .mask = {t->causal, t->window, t->chunk, 0}, .qb = t->qb, .kb = t->kb,
                         .nseq = t->nseq, .seed = seed, .softcap = t->softcap,
                         .sinks = t->sinks, .sinks_seed = seed ^ 0x5151u};
    memcpy(gp.cu_q, t->cu_q, sizeof t->cu_q);
    memcpy(gp.cu_k, t->cu_k, sizeof t->cu_k);
    fc_err err;
    memset(s, 0, sizeof *s);
    uint8_t *bits;
    float *bias;
    xterms_of(t, seed ^ 0x7e77u, &gp, &bits, &bias);
    cr_assert_eq(fix_gen_case(&gp, &s->fc, &err), FC_OK, "%s: %s", t->name, err.msg);
    free(bits); /* the case holds its own copies */
    free(bias);
    cr_assert_eq(bmask_build_x(&s->bm, t->builder, s->fc.prob.mask, &s->fc.prob.seq,
                               s->fc.prob.xmask, t->qb, t->kb, &err),
                 FC_OK, "%s: %s", t->name, err.msg);
    s->no = attn_o_elems(&s->fc.prob);
    s->nl = attn_lse_elems(&s->fc.prob);
    s->o_lp = malloc(sizeof(float) * (s->no + 1));
    cr_assert_eq(ref_attention_lp(&s->fc.prob, t->dt, s->fc.q, s->fc.k, s->fc.v, s->o_lp, NULL,
                                  &err), FC_OK, "%s: %s", t->name, err.msg);
}

static void setup_free(setup *s)
{
    fix_case_free(&s->fc);
    bmask_free(&s->bm);
    free(s->o_lp);
}

/* Runs kernel `version` (paged through `pt` when not NULL); the result must be FC_OK. */
static gpu_backend backend = GPU_BACKEND_EMU; /* the suite's backend; the GPU test switches */

static void run(const setup *s, const char *name, int version, const int32_t *pt, int32_t npages,
                float *o, float *lse, gpu_result *res)
{
    gpu_call c = {.p = &s->fc.prob, .dtype = s->fc.dtype, .q = s->fc.q, .k = s->fc.k,
                  .v = s->fc.v, .bm = &s->bm, .kernel = version, .backend = backend,
                  .page_table = pt, .num_pages = npages};
    fc_err err;
    cr_assert_eq(gpu_attention(&c, o, lse, res, &err), FC_OK, "%s: kernel %d: %s", name, version,
                 err.msg);
}

/* Judges kernel `version` on case t with every hard gate (H7 from a second run). */
static void judge(const v2_case *t, const setup *s, int version, float *o, float *lse,
                  rep_verdict *v)
{
    float *o2 = malloc(sizeof(float) * (s->no + 1)), *l2 = malloc(sizeof(float) * (s->nl + 1));
    gpu_result r1, r2;
    run(s, t->name, version, NULL, 0, o, lse, &r1);
    run(s, t->name, version, NULL, 0, o2, l2, &r2);
    rep_inputs in = {.dtype = t->dt, .rows = s->nl, .dv = (size_t)s->fc.prob.dv, .o = o, .lse = lse,
                     .o_gold = s->fc.out, .lse_gold = s->fc.lse, .o_lp = s->o_lp,
                     .sentinels = r1.sentinels_ok && r2.sentinels_ok ? REP_SENTINELS_INTACT
                                                                     : REP_SENTINELS_DAMAGED,
                     .o_rerun = o2, .lse_rerun = l2, .prob = &s->fc.prob};
    fc_err err;
    cr_assert_eq(rep_evaluate(&in, v, &err), FC_OK, "%s: %s", t->name, err.msg);
    cr_expect(v->pass, "%s: kernel %d fails: %s", t->name, version, rep_verdict_reason(v));
    free(o2);
    free(l2);
}

ParameterizedTestParameters(v2, passes_every_gate_and_agrees_with_v1)
{
    return cr_make_param_array(v2_case, cases, NCASES);
}

ParameterizedTest(const v2_case *t, v2, passes_every_gate_and_agrees_with_v1)
{
    setup s;
    setup_case(t, 0x5eed0000u + (uint64_t)t->lq * 31u + (uint64_t)t->d, &s);
    float *o[3], *l[3];
    rep_verdict v[3];
    for (int k = 0; k < 3; k++) {
        o[k] = malloc(sizeof(float) * (s.no + 1));
        l[k] = malloc(sizeof(float) * (s.nl + 1));
        judge(t, &s, k + 1, o[k], l[k], &v[k]);
    }
    double dmax[2] = {0.0, 0.0}; /* versions 2 and 3 against version 1 */
    for (int k = 0; k < 2; k++)
        for (size_t i = 0; i < s.no; i++) {
            double d = fabs((double)o[k + 1][i] - (double)o[0][i]);
            if (!(d <= dmax[k]))
                dmax[k] = d; /* a NaN sticks */
        }
    cr_log_info("%-34s %-4s H1 ratio v3 %.3f v2 %.3f v1 %.3f (e_lp_max %.3g) max|v2-v1| %.3g "
                "max|v3-v1| %.3g", t->name, fc_dtype_name(t->dt), v[2].h1_ratio, v[1].h1_ratio,
                v[0].h1_ratio, v[1].e_lp_max, dmax[0], dmax[1]);
    /* Empty rows are exact in every version, so they agree there bitwise. */
    for (size_t r = 0; r < s.nl; r++)
        if (s.fc.lse[r] == -INFINITY)
            cr_expect(l[0][r] == -INFINITY && l[1][r] == -INFINITY && l[2][r] == -INFINITY,
                      "%s: empty row %zu", t->name, r);
    for (int k = 0; k < 3; k++) {
        free(o[k]);
        free(l[k]);
    }
    setup_free(&s);
}

/* ---- paging: a seeded permutation of pages (plus spare NaN-filled ones) ---- */

static int32_t *seeded_pages(int32_t n, int32_t npages, uint64_t seed)
{
    int32_t *perm = malloc(sizeof(int32_t) * (size_t)npages);
    fix_rng r;
    fix_rng_seed(&r, seed);
    for (int32_t i = 0; i < npages; i++)
        perm[i] = i;
    for (int32_t i = npages - 1; i > 0; i--) { /* Fisher-Yates */
        int32_t j = (int32_t)(fix_rng_u64(&r) % (uint64_t)(i + 1)), x = perm[i];
        perm[i] = perm[j];
        perm[j] = x;
    }
    (void)n; /* the first n entries are the table */
    return perm;
}

static void expect_bitwise(const char *name, const char *what, const float *a, const float *b,
                           size_t n)
{
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0 && bad++ == 0)
            first = i;
    cr_expect_eq(bad, 0, "%s: %s: %zu elements differ bitwise, first at %zu (%g vs %g)", name, what,
                 bad, first, bad ? a[first] : 0.0, bad ? b[first] : 0.0);
}

/* Cases of the table above that paging runs on (dense B = 2, packed, KB 16 .. 256, D 32 .. 256,
 * soft-cap and sinks, explicit masks and biases: they read stored token indices, never pages). */
static const int paged_cases[] = {0, 2, 3, 4, 9, 10, 11, 12, 17, 18, 21, 22, 24, 26, 27, 28,
                                  30, 31, 33, 34, 37};

Test(v2, paged_kv_is_bitwise_equal_to_contiguous_kv)
{
    for (int version = 2; version <= 3; version++)
    for (size_t c = 0; c < sizeof paged_cases / sizeof paged_cases[0]; c++) {
        const v2_case *t = &cases[paged_cases[c]];
        setup s;
        setup_case(t, 0xba6e0000u + (uint64_t)c, &s);
        const int32_t n = t->b * s.bm.nkb, npages = n + 3;
        int32_t *pt = seeded_pages(n, npages, 77u + (uint64_t)c);
        float *o = malloc(sizeof(float) * (s.no + 1)), *l = malloc(sizeof(float) * (s.nl + 1));
        float *op = malloc(sizeof(float) * (s.no + 1)), *lp = malloc(sizeof(float) * (s.nl + 1));
        gpu_result r;
        run(&s, t->name, version, NULL, 0, o, l, &r);
        run(&s, t->name, version, pt, npages, op, lp, &r);
        cr_expect(r.sentinels_ok, "%s: kernel %d: paged run wrote outside its outputs", t->name,
                  version);
        expect_bitwise(t->name, "paged O", o, op, s.no);
        expect_bitwise(t->name, "paged LSE", l, lp, s.nl);
        free(pt);
        free(o);
        free(l);
        free(op);
        free(lp);
        setup_free(&s);
    }
}

/* ---- masked-key poisoning: keys no query may see hold NaN or huge values ---- */

static const v2_case poison_cases[] = {
    {"poison packed superset f16", F16, 1, 2, 1, 90, 160, 64, 1, 16, 0, 64, 64, BMASK_SUPERSET, 3, {0, 0, 50, 90}, {0, 40, 100, 160}, 0, 0, 0, 0, 0},
    {"poison window superset bf16 16x16", BF16, 1, 2, 2, 40, 150, 64, 1, 10, 0, 16, 16, BMASK_SUPERSET, 0, {0}, {0}, 0, 0, 0, 0, 0},
    {"poison chunk superset f32", F32, 1, 1, 1, 60, 130, 32, 0, 0, 24, 32, 64, BMASK_SUPERSET, 0, {0}, {0}, 0, 0, 0, 0, 0},
    {"poison softcap sinks window bf16", BF16, 1, 2, 1, 40, 150, 64, 1, 10, 0, 16, 16, BMASK_SUPERSET, 0, {0}, {0}, 0, 50, 1, 0, 0},
    /* keys the explicit mask refuses to every row (XM_COLUMNS), not the families */
    {"poison xmask columns bias f16 16x16", F16, 2, 2, 1, 60, 130, 64, 0, 0, 0, 16, 16, BMASK_SLOW, 0, {0}, {0}, 0, 0, 0, XM_COLUMNS, XB_RANDOM},
    {"poison xmask columns alibi bf16 64x64", BF16, 1, 2, 2, 100, 100, 64, 1, 0, 0, 64, 64, BMASK_SLOW, 0, {0}, {0}, 0, 30, 1, XM_COLUMNS, XB_ALIBI},
    {"poison xmask columns f32 32x32", F32, 1, 2, 1, 60, 80, 32, 0, 0, 0, 32, 32, BMASK_SLOW, 0, {0}, {0}, 0, 0, 0, XM_COLUMNS, 0},
};

Test(v2, keys_no_query_sees_never_change_the_output)
{
    for (size_t c = 0; c < sizeof poison_cases / sizeof poison_cases[0]; c++) {
        const v2_case *t = &poison_cases[c];
        setup s;
        setup_case(t, 0x9015u + (uint64_t)c, &s);
        const attn_problem *p = &s.fc.prob;
        seq_view sv = seq_info_view(&p->seq);
        unsigned char *seen = calloc((size_t)p->seq.lk + 1, 1);
        size_t unseen = 0;
        for (int32_t tk = 0; tk < p->seq.lk; tk++) { /* by no row of any (b, h) */
            for (int64_t bh = 0; bh < (int64_t)p->seq.batch * p->hq && !seen[tk]; bh++)
                for (int32_t tq = 0; tq < p->seq.lq && !seen[tk]; tq++)
                    seen[tk] = (unsigned char)mask_pair_allowed_x(
                        p->mask, sv, p->xmask, (int32_t)(bh / p->hq), (int32_t)(bh % p->hq), tq, tk);
            unseen += !seen[tk];
        }
        cr_assert_gt(unseen, 0, "%s: every key is visible: nothing to poison", t->name);
        float *o[3], *l[3];
        float *op = malloc(sizeof(float) * (s.no + 1)), *lp = malloc(sizeof(float) * (s.nl + 1));
        gpu_result r;
        for (int v = 0; v < 3; v++) { /* every kernel, before any poison */
            o[v] = malloc(sizeof(float) * (s.no + 1));
            l[v] = malloc(sizeof(float) * (s.nl + 1));
            run(&s, t->name, v + 1, NULL, 0, o[v], l[v], &r);
        }
        static const float poisons[][2] = {{NAN, NAN}, {1e30f, -1e30f}};
        for (int pz = 0; pz < 2; pz++) {
            for (int64_t bh = 0; bh < (int64_t)p->seq.batch * p->hkv; bh++)
                for (int32_t tk = 0; tk < p->seq.lk; tk++)
                    if (!seen[tk]) {
                        for (int32_t i = 0; i < p->d; i++)
                            s.fc.k[(bh * p->seq.lk + tk) * p->d + i] = poisons[pz][0];
                        for (int32_t i = 0; i < p->dv; i++)
                            s.fc.v[(bh * p->seq.lk + tk) * p->dv + i] = poisons[pz][1];
                    }
            for (int v = 0; v < 3; v++) {
                char what[64];
                run(&s, t->name, v + 1, NULL, 0, op, lp, &r);
                snprintf(what, sizeof what, "kernel %d, %s-poisoned O", v + 1, pz ? "huge" : "NaN");
                expect_bitwise(t->name, what, o[v], op, s.no);
                snprintf(what, sizeof what, "kernel %d, %s-poisoned LSE", v + 1, pz ? "huge" : "NaN");
                expect_bitwise(t->name, what, l[v], lp, s.nl);
            }
        }
        free(seen);
        for (int v = 0; v < 3; v++) {
            free(o[v]);
            free(l[v]);
        }
        free(op);
        free(lp);
        setup_free(&s);
    }
}

/* ---- an explicit mask equal to a family's grid: the family's output, bitwise ---- */

/* Cases of the table: causal window 16x16, chunk 32x16, packed chunk 16x16, fp32 64x64, and
 * packed fp32 with soft-cap and sinks. */
static const int family_cases[] = {2, 4, 18, 20, 28};

/* The family's grid as s's explicit mask [bm, hm, Lq, Lk] (every slice the same). */
static void set_family_grid(setup *s, mask_params fam, int32_t bm, int32_t hm)
{
    const attn_problem *p = &s->fc.prob;
    const int32_t lq = p->seq.lq, lk = p->seq.lk;
    const size_t rows = (size_t)bm * hm * lq;
    seq_view sv = seq_info_view(&p->seq);
    uint8_t *dense = malloc(rows * (size_t)lk + 1), *bits = malloc(rows * (size_t)xmask_row_bytes(lk) + 1);
    cr_assert(dense && bits);
    for (size_t r = 0; r < rows; r++)
        for (int32_t tk = 0; tk < lk; tk++)
            dense[r * (size_t)lk + tk] =
                (uint8_t)mask_pair_allowed(fam, sv, (int32_t)(r % (size_t)lq), tk);
    attn_xmask_pack(dense, rows, lk, bits);
    attn_xmask m = {bits, bm, hm, lq, lk};
    attn_xbias none = {0};
    fc_err err;
    cr_assert_eq(fix_case_set_xterms(&s->fc, &m, &none, &err), FC_OK, "%s", err.msg);
    free(dense);
    free(bits);
}

/* The slow builder's block mask of s's families AND explicit mask, into s->bm. */
static void rebuild_mask(setup *s, const v2_case *t)
{
    fc_err err;
    bmask_free(&s->bm);
    cr_assert_eq(bmask_build_x(&s->bm, BMASK_SLOW, s->fc.prob.mask, &s->fc.prob.seq,
                               s->fc.prob.xmask, t->qb, t->kb, &err), FC_OK, "%s", err.msg);
}

/* The families alone, the families AND their own grid per head, and their grid alone (no
 * family: FlexAttention's mask_mod) broadcast and per (b, h): both kernels bitwise the
 * families' output (the same tiles, the same scores, the same -inf), in every kernel. One pair taken away
 * changes it: the comparison sees a single bit of the mask. */
Test(v2, an_explicit_mask_equal_to_a_family_gives_the_family_output_bitwise)
{
    for (size_t c = 0; c < sizeof family_cases / sizeof family_cases[0]; c++) {
        const v2_case *t = &cases[family_cases[c]];
        setup s;
        setup_case(t, 0xfa0000u + (uint64_t)c, &s);
        const mask_params fam = s.fc.prob.mask;
        const int32_t b = s.fc.prob.seq.batch, hq = s.fc.prob.hq;
        rebuild_mask(&s, t); /* the slow builder's tiles, as with an explicit mask */
        float *o[3], *l[3];
        float *ox = malloc(sizeof(float) * (s.no + 1)), *lx = malloc(sizeof(float) * (s.nl + 1));
        gpu_result r;
        for (int v = 0; v < 3; v++) {
            o[v] = malloc(sizeof(float) * (s.no + 1));
            l[v] = malloc(sizeof(float) * (s.nl + 1));
            run(&s, t->name, v + 1, NULL, 0, o[v], l[v], &r);
        }
        const struct {
            const char *what;
            int family;
            int32_t bm, hm;
        } vars[] = {
            {"family AND its grid per head", 1, 1, hq},
            {"its grid alone, broadcast", 0, 1, 1},
            {"its grid alone per (b, h)", 0, b, hq},
        };
        for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
            set_family_grid(&s, fam, vars[i].bm, vars[i].hm);
            s.fc.prob.mask = vars[i].family ? fam : (mask_params){0};
            rebuild_mask(&s, t);
            for (int v = 0; v < 3; v++) {
                char what[96];
                snprintf(what, sizeof what, "kernel %d, %s", v + 1, vars[i].what);
                run(&s, t->name, v + 1, NULL, 0, ox, lx, &r);
                expect_bitwise(t->name, what, o[v], ox, s.no);
                expect_bitwise(t->name, what, l[v], lx, s.nl);
            }
        }
        /* the last slice's last allowed pair taken away (its grid per (b, h), no family) */
        const attn_xmask *xm = &s.fc.prob.xmask;
        size_t last = (size_t)xm->bm * xm->hm * xm->lq;
        int32_t tk = -1;
        while (last > 0 && tk < 0) {
            last--;
            const uint8_t *row = xm->bits + last * (size_t)xmask_row_bytes(xm->lk);
            tk = xmask_end(row, 0, xm->lk) - 1;
        }
        cr_assert(tk >= 0, "%s: the family allows some pair", t->name);
        ((uint8_t *)xm->bits)[last * (size_t)xmask_row_bytes(xm->lk) + (size_t)(tk >> 3)] ^=
            (uint8_t)(1u << (tk & 7)); /* the case's own copy */
        rebuild_mask(&s, t);
        for (int v = 0; v < 3; v++) {
            run(&s, t->name, v + 1, NULL, 0, ox, lx, &r);
            cr_expect(memcmp(o[v], ox, sizeof(float) * s.no) != 0,
                      "%s: kernel %d: a pair fewer, the same output", t->name, v + 1);
            free(o[v]);
            free(l[v]);
        }
        free(ox);
        free(lx);
        setup_free(&s);
    }
}

/* ---- what versions 2 and 3 refuse, before any launch ---- */

Test(v2, refuses_unsupported_shapes_with_a_clear_error)
{
    v2_case t = cases[0];
    setup s;
    setup_case(&t, 1, &s);
    float *o = malloc(sizeof(float) * (s.no + 1)), *l = malloc(sizeof(float) * (s.nl + 1));
    gpu_call c = {.p = &s.fc.prob, .dtype = s.fc.dtype, .q = s.fc.q, .k = s.fc.k, .v = s.fc.v,
                  .bm = &s.bm, .kernel = 2, .backend = GPU_BACKEND_EMU};
    fc_err err;

    for (c.kernel = 2; c.kernel <= 3; c.kernel++) {
        char name[24];
        snprintf(name, sizeof name, "kernel %d", c.kernel);
        s.fc.prob.d = 48; /* the buffers are never read: the check comes first */
        s.fc.prob.dv = 48;
        cr_expect_eq(gpu_attention(&c, o, l, NULL, &err), FC_EUNSUP, "%s: D = 48", name);
        cr_expect(strstr(err.msg, name) && strstr(err.msg, "D = 48"), "message: %s", err.msg);
        s.fc.prob.d = 64;
        s.fc.prob.dv = 32;
        cr_expect_eq(gpu_attention(&c, o, l, NULL, &err), FC_EUNSUP, "%s: Dv != D", name);
        s.fc.prob.dv = 64;
    }

    c.kernel = GPU_MAX_KERNEL + 1;
    cr_expect_eq(gpu_attention(&c, o, l, NULL, &err), FC_EUNSUP, "kernel %d", c.kernel);
    cr_expect(strstr(err.msg, "versions 1 to"), "message: %s", err.msg);

    int32_t *pt = seeded_pages(s.bm.nkb, s.bm.nkb, 5);
    c.page_table = pt;
    c.num_pages = s.bm.nkb;
    c.kernel = 1;
    cr_expect_eq(gpu_attention(&c, o, l, NULL, &err), FC_EUNSUP, "paged kernel 1");
    cr_expect(strstr(err.msg, "paged"), "message: %s", err.msg);
    for (c.kernel = 2; c.kernel <= 3; c.kernel++) {
        int32_t *bad = seeded_pages(s.bm.nkb, s.bm.nkb, 5);
        c.page_table = bad;
        c.num_pages = s.bm.nkb;
        if (s.bm.nkb > 1) {
            bad[1] = bad[0];
            cr_expect_eq(gpu_attention(&c, o, l, NULL, &err), FC_EINVAL, "page used twice");
            cr_expect(strstr(err.msg, "used twice"), "message: %s", err.msg);
        }
        bad[0] = s.bm.nkb;
        cr_expect_eq(gpu_attention(&c, o, l, NULL, &err), FC_EINVAL, "page out of range");
        c.num_pages = s.bm.nkb - 1;
        cr_expect_eq(gpu_attention(&c, o, l, NULL, &err), FC_EINVAL, "too few pages");
        free(bad);
    }
    free(pt);
    free(o);
    free(l);
    setup_free(&s);
}

/* ---- the native build, when a GPU is at hand ---- */

Test(v2_gpu, passes_every_gate_and_paging_stays_bitwise)
{
    fc_err err;
    if (!gpu_backend_available(GPU_BACKEND_CUDA, &err))
        cr_skip_test("no GPU: %s", err.msg);
    backend = GPU_BACKEND_CUDA;
    for (size_t c = 0; c < NCASES; c++) {
        const v2_case *t = &cases[c];
        setup s;
        setup_case(t, 0x9a0000u + (uint64_t)c, &s);
        float *o = malloc(sizeof(float) * (s.no + 1)), *l = malloc(sizeof(float) * (s.nl + 1));
        float *op = malloc(sizeof(float) * (s.no + 1)), *lp = malloc(sizeof(float) * (s.nl + 1));
        const int32_t n = t->b * s.bm.nkb;
        int32_t *pt = seeded_pages(n, n + 2, 5u + (uint64_t)c);
        for (int version = 2; version <= 3; version++) {
            rep_verdict v;
            judge(t, &s, version, o, l, &v);
            cr_log_info("gpu kernel %d %-34s %-4s H1 ratio %.3f", version, t->name,
                        fc_dtype_name(t->dt), v.h1_ratio);
            gpu_result r;
            run(&s, t->name, version, pt, n + 2, op, lp, &r);
            expect_bitwise(t->name, version == 2 ? "gpu kernel 2 paged O" : "gpu kernel 3 paged O",
                           o, op, s.no);
            expect_bitwise(t->name, version == 2 ? "gpu kernel 2 paged LSE"
                                                 : "gpu kernel 3 paged LSE", l, lp, s.nl);
        }
        free(pt);
        free(o);
        free(l);
        free(op);
        free(lp);
        setup_free(&s);
    }
}
