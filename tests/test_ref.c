/*
 * test_ref.c - the reference attention (ref/ref.h) against things computed here by other
 * means: softmaxes worked by hand, a brute-force loop in long double that scans every key
 * of the token axis through the predicate (no gemm, no panels, no range function), and
 * metamorphic relations (poisoned invisible keys, decode windows, LSE merges of a mask and
 * its complement). The mask itself is tested in tests/test_masks.c; here it is the given.
 *
 *   make BUILD=build build/tests/test_ref && OPENBLAS_NUM_THREADS=1 ./build/tests/test_ref
 *
 * Variants: "f64" (the oracle), "f32", "f16" and "bf16" (the same-precision baseline); the
 * low-precision variants get inputs already rounded to their dtype, as fixtures store them.
 */
#include <cblas.h>
#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/lowp.h"
#include "masks/problem.h"
#include "base/progress.h"
#include "masks/bmask.h"
#include "ref/ref.h"
#include "ref/ref_internal.h"
#include "tests/test_rng.h"

/* ---- cases and inputs ---- */

#define MAXSEQ 8

typedef struct ref_case {
    const char *name;
    int32_t batch, hq, hkv, lq, lk, d, dv;
    int32_t causal, window, chunk;
    double scale;  /* 0: the default 1/sqrt(d) */
    int32_t nseq;  /* 0: dense batch; else packed (batch 1) with cu_q / cu_k */
    int32_t cu_q[MAXSEQ + 1], cu_k[MAXSEQ + 1];
    int expect_empty; /* the case is built to have rows with no allowed key */
    double softcap;   /* the score terms (masks/terms.h): 0 off */
    int sinks;        /* 1: per-head sinks drawn in [-5, 10] (make_problem) */
} ref_case;

typedef enum variant { V_F64, V_F32, V_F16, V_BF16, NVARIANTS } variant;
static const char *const variant_names[] = {"f64", "f32", "f16", "bf16"};
static const fc_dtype variant_dtype[] = {FC_F32, FC_F32, FC_F16, FC_BF16};

static void make_problem(const ref_case *c, attn_problem *p)
{
    fc_err err = {{0}};
    memset(p, 0, sizeof *p);
    fc_status st = c->nseq ? seq_init_packed(&p->seq, c->nseq, c->cu_q, c->cu_k, &err)
                           : seq_init_dense(&p->seq, c->batch, c->lq, c->lk, &err);
    cr_assert_eq(st, FC_OK, "%s: sequence setup failed: %s", c->name, err.msg);
    p->hq = c->hq;
    p->hkv = c->hkv;
    p->d = c->d;
    p->dv = c->dv;
    p->scale = c->scale > 0 ? c->scale : 1.0 / sqrt((double)c->d);
    p->mask = (mask_params){.causal = c->causal, .sliding_window = c->window,
                            .chunk_size = c->chunk};
    p->terms.softcap = c->softcap;
    if (c->sinks) { /* spread over [-5, 10]: some rows' sinks dominate, some barely count */
        float *sk = malloc((size_t)c->hq * sizeof *sk);
        cr_assert(sk, "out of memory for sinks");
        for (int32_t h = 0; h < c->hq; h++)
            sk[h] = -5.0f + 15.0f * (float)((h * 7 + 3) % 11) / 10.0f;
        p->terms.sinks = sk;
    }
}

/* attn_problem_free and the sinks make_problem drew (the problem does not own them). */
static void drop_problem(attn_problem *p)
{
    free((float *)p->terms.sinks);
    attn_problem_free(p);
}

/* Standard normal (Box-Muller), rounded to dt as a stored fixture input would be. */
static void fill_normal(float *x, size_t n, uint64_t seed, fc_dtype dt)
{
    for (size_t i = 0; i < n; i++) {
        double u1 = ((double)(rng_next(&seed) >> 11) + 0.5) * 0x1p-53;
        double u2 = (double)(rng_next(&seed) >> 11) * 0x1p-53;
        x[i] = fc_round((float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2)), dt);
    }
}

typedef struct tensors {
    float *q, *k, *v;
} tensors;

static void make_inputs(const attn_problem *p, uint64_t seed, fc_dtype dt, tensors *t)
{
    t->q = malloc((attn_q_elems(p) + 1) * sizeof(float));
    t->k = malloc((attn_k_elems(p) + 1) * sizeof(float));
    t->v = malloc((attn_v_elems(p) + 1) * sizeof(float));
    cr_assert(t->q && t->k && t->v, "out of memory for inputs");
    fill_normal(t->q, attn_q_elems(p), seed * 3 + 1, dt);
    fill_normal(t->k, attn_k_elems(p), seed * 3 + 2, dt);
    fill_normal(t->v, attn_v_elems(p), seed * 3 + 3, dt);
}

static void free_inputs(tensors *t)
{
    free(t->q);
    free(t->k);
    free(t->v);
}

/* Runs one variant; outputs are widened to double so every variant is compared alike. */
static fc_status run_variant(variant var, const attn_problem *p, const tensors *t, double *o,
                             double *lse, fc_err *err)
{
    size_t no = attn_o_elems(p), nl = attn_lse_elems(p);
    if (var == V_F64)
        return ref_attention_f64(p, t->q, t->k, t->v, o, lse, err);
    float *o32 = malloc((no + 1) * sizeof *o32), *l32 = malloc((nl + 1) * sizeof *l32);
    cr_assert(o32 && l32, "out of memory for outputs");
    fc_status st = ref_attention_lp(p, variant_dtype[var], t->q, t->k, t->v, o32, l32, err);
    for (size_t i = 0; !st && i < no; i++)
        o[i] = o32[i];
    for (size_t i = 0; !st && i < nl; i++)
        lse[i] = l32[i];
    free(o32);
    free(l32);
    return st;
}

typedef struct outputs {
    double *o, *lse;
} outputs;

static outputs run_ok(const char *name, variant var, const attn_problem *p, const tensors *t)
{
    outputs r = {malloc((attn_o_elems(p) + 1) * sizeof(double)),
                 malloc((attn_lse_elems(p) + 1) * sizeof(double))};
    fc_err err = {{0}};
    cr_assert(r.o && r.lse, "out of memory");
    fc_status st = run_variant(var, p, t, r.o, r.lse, &err);
    cr_assert_eq(st, FC_OK, "%s/%s: reference failed: %s", name, variant_names[var], err.msg);
    return r;
}

static void free_outputs(outputs *r)
{
    free(r->o);
    free(r->lse);
}

/* ---- the brute force ---- */

typedef struct brute {
    long double *o, *lse;
    double smax, vmax; /* largest |score| over allowed pairs (and |sink|), largest |v| */
    int empty_rows;
    unsigned char *empty; /* [rows]: 1 for a row with no allowed key */
} brute;

/* The definition, the slow way: for every (b, h, query) ask the predicate about every key
 * of the token axis and do the softmax in long double, soft-cap and sink as
 * docs/semantics.md section 7 writes them. */
static brute brute_force(const attn_problem *p, const tensors *t)
{
    const int32_t lq = p->seq.lq, lk = p->seq.lk, d = p->d, dv = p->dv;
    seq_view view = seq_info_view(&p->seq);
    brute r = {malloc((attn_o_elems(p) + 1) * sizeof(long double)),
               malloc((attn_lse_elems(p) + 1) * sizeof(long double)), 0, 0, 0,
               calloc(attn_lse_elems(p) + 1, 1)};
    long double *s = malloc(((size_t)lk + 1) * sizeof *s);
    cr_assert(r.o && r.lse && r.empty && s, "out of memory");
    for (size_t i = 0; i < attn_v_elems(p); i++)
        r.vmax = fmax(r.vmax, fabs(t->v[i]));
    for (int32_t b = 0; b < p->seq.batch; b++)
        for (int32_t h = 0; h < p->hq; h++)
            for (int32_t i = 0; i < lq; i++) {
                size_t row = ((size_t)b * p->hq + h) * lq + i;
                size_t kv = ((size_t)b * p->hkv + h / (p->hq / p->hkv)) * lk;
                const float *qi = t->q + row * d;
                long double sink = p->terms.sinks ? p->terms.sinks[h] : -INFINITY;
                long double mx = sink, sum = 0, c = p->terms.softcap;
                int any = 0;
                for (int32_t j = 0; j < lk; j++) {
                    if (!mask_pair_allowed(p->mask, view, i, j))
                        continue;
                    long double dot = 0;
                    for (int32_t x = 0; x < d; x++)
                        dot += (long double)qi[x] * t->k[(kv + j) * d + x];
                    s[j] = (long double)p->scale * dot;
                    if (c > 0)
                        s[j] = c * tanhl(s[j] / c);
                    if (s[j] > mx || isnan((double)s[j]))
                        mx = s[j];
                    any = 1;
                    r.smax = fmax(r.smax, fabs((double)s[j]));
                }
                long double *o = r.o + row * dv;
                for (int32_t x = 0; x < dv; x++)
                    o[x] = 0;
                if (isfinite((double)sink))
                    r.smax = fmax(r.smax, fabs((double)sink));
                if (!any) {
                    r.lse[row] = sink;
                    r.empty_rows++;
                    r.empty[row] = 1;
                    continue;
                }
                sum = expl(sink - mx); /* the sink: in the sum, no value */
                for (int32_t j = 0; j < lk; j++)
                    if (mask_pair_allowed(p->mask, view, i, j))
                        sum += expl(s[j] - mx);
                for (int32_t j = 0; j < lk; j++) {
                    if (!mask_pair_allowed(p->mask, view, i, j))
                        continue;
                    long double pj = expl(s[j] - mx) / sum;
                    for (int32_t x = 0; x < dv; x++)
                        o[x] += pj * t->v[(kv + j) * dv + x];
                }
                r.lse[row] = mx + logl(sum);
            }
    free(s);
    return r;
}

static void free_brute(brute *r)
{
    free(r->o);
    free(r->lse);
    free(r->empty);
}

/* Tolerances against the exact answer, u the unit roundoff. fp32 and f64: 32 u scaled by
 * the largest score and value (the observed errors on these small cases are 20x below
 * that). fp16/bf16: scores carry relative error u from rounding K*scale and S, each
 * shifting a probability by about |s| u, and P and O are rounded once more, so
 * |O_lp - O| <= (3 |s|max + 3) u max|v|, doubled for room. */
static double unit_roundoff(variant var)
{
    switch (var) {
    case V_F64: return 0x1p-53;
    case V_F32: return 0x1p-24;
    case V_F16: return 0x1p-11;
    default: return 0x1p-8;
    }
}

static double tol_out(variant var, const brute *r)
{
    double u = unit_roundoff(var);
    if (var == V_F64 || var == V_F32)
        return 32.0 * u * (1.0 + r->smax) * (1.0 + r->vmax);
    return (3.0 * r->smax + 3.0) * u * r->vmax * 2.0;
}

static double tol_lse(variant var, const brute *r)
{
    double u = unit_roundoff(var);
    if (var == V_F64 || var == V_F32)
        return 32.0 * u * (1.0 + r->smax);
    return 3.0 * u * (1.0 + r->smax);
}

/* Empty rows exactly 0 and LSE exactly -inf (the sink); every other row within tolerance (NaN
 * fails). */
static void check_against_brute(const char *name, variant var, const attn_problem *p,
                                const outputs *got, const brute *want)
{
    const char *vn = variant_names[var];
    double to = tol_out(var, want), tl = tol_lse(var, want);
    for (size_t row = 0; row < attn_lse_elems(p); row++) {
        const double *o = got->o + row * p->dv;
        const long double *ow = want->o + row * p->dv;
        if (want->empty[row]) {
            double sink = (double)want->lse[row];
            cr_assert(got->lse[row] == sink, "%s/%s: empty row %zu has lse %.9g, want %.9g",
                      name, vn, row, got->lse[row], sink);
            for (int32_t x = 0; x < p->dv; x++)
                cr_assert(o[x] == 0.0, "%s/%s: empty row %zu has out[%d] = %g, want exactly 0",
                          name, vn, row, (int)x, o[x]);
            continue;
        }
        double el = fabs(got->lse[row] - (double)want->lse[row]);
        if (!(el <= tl * (1.0 + fabs((double)want->lse[row]))))
            cr_assert_fail("%s/%s: row %zu lse %.17g, want %.17Lg (tol %g)", name, vn, row,
                           got->lse[row], want->lse[row], tl);
        for (int32_t x = 0; x < p->dv; x++) {
            double e = fabs(o[x] - (double)ow[x]);
            if (!(e <= to))
                cr_assert_fail("%s/%s: row %zu out[%d] = %.17g, want %.17Lg (err %g > tol %g)",
                               name, vn, row, (int)x, o[x], ow[x], e, to);
            if (var >= V_F16 && !fc_representable((float)o[x], variant_dtype[var]))
                cr_assert_fail("%s/%s: row %zu out[%d] = %.9g is not a %s value", name, vn,
                               row, (int)x, o[x], fc_dtype_name(variant_dtype[var]));
        }
    }
}

/* ---- hand-computed ---- */

/*
 * Lq = 2, Lk = 3, D = 1, Dv = 2, scale 1. q = [0], [1]; k = [0], [1], [2];
 * v = [1, 0], [0, 1], [1, 1].
 * Dense. Row 0: scores 0, 0, 0 -> p = 1/3 each; out = (1/3 + 1/3, 1/3 + 1/3) = (2/3, 2/3);
 *   lse = ln 3 = 1.0986122886681098.
 * Row 1: scores 0, 1, 2; Z = 1 + e + e^2 = 11.107337927389695;
 *   p = (1, e, e^2) / Z = (0.09003057317038046, 0.24472847105479764, 0.6652409557748219);
 *   out = (p0 + p2, p1 + p2) = (0.7552715289452022, 0.9099694268296196);
 *   lse = ln Z = 2.40760596444438.
 * Causal (bottom-right: row 0 sits at position 1 and sees keys 0, 1; row 1 sees all):
 *   row 0: p = (1/2, 1/2, 0), out = (1/2, 1/2), lse = ln 2 = 0.6931471805599453; row 1 as dense.
 */
Test(ref_hand, two_queries_three_keys_match_the_softmax_worked_by_hand)
{
    static const struct {
        const char *name;
        int32_t causal;
        double out[2][2], lse[2];
    } cases[] = {
        {.name = "dense", .causal = 0,
         .out = {{2.0 / 3, 2.0 / 3}, {0.7552715289452022, 0.9099694268296196}},
         .lse = {1.0986122886681098, 2.40760596444438}},
        {.name = "causal", .causal = 1,
         .out = {{0.5, 0.5}, {0.7552715289452022, 0.9099694268296196}},
         .lse = {0.6931471805599453, 2.40760596444438}},
    };
    float q[] = {0, 1}, k[] = {0, 1, 2}, v[] = {1, 0, 0, 1, 1, 1};
    tensors t = {q, k, v};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        ref_case rc = {.name = cases[c].name, .batch = 1, .hq = 1, .hkv = 1, .lq = 2, .lk = 3,
                       .d = 1, .dv = 2, .causal = cases[c].causal, .scale = 1.0};
        attn_problem p;
        make_problem(&rc, &p);
        for (int var = 0; var < NVARIANTS; var++) {
            /* f64 to 1e-15; f32 to a few ulp; f16/bf16: S is exact here, P and O are
             * rounded, each a relative error of at most u. */
            double tol = var == V_F64 ? 1e-15 : var == V_F32 ? 1e-6 : 4 * unit_roundoff(var);
            outputs r = run_ok(rc.name, var, &p, &t);
            for (int i = 0; i < 2; i++) {
                for (int x = 0; x < 2; x++)
                    cr_assert(fabs(r.o[i * 2 + x] - cases[c].out[i][x]) <= tol,
                              "%s/%s: out[%d][%d] = %.17g, want %.17g", rc.name,
                              variant_names[var], i, x, r.o[i * 2 + x], cases[c].out[i][x]);
                cr_assert(fabs(r.lse[i] - cases[c].lse[i]) <= tol * 4,
                          "%s/%s: lse[%d] = %.17g, want %.17g", rc.name, variant_names[var], i,
                          r.lse[i], cases[c].lse[i]);
            }
            free_outputs(&r);
        }
        drop_problem(&p);
    }
}

/* ---- brute force over random small cases ---- */

static const ref_case brute_cases[] = {
    {.name = "dense 2x2 heads, Lq < Lk, Dv != D", .batch = 2, .hq = 2, .hkv = 2, .lq = 5,
     .lk = 7, .d = 4, .dv = 3},
    {.name = "causal with Lq > Lk: early rows empty", .batch = 1, .hq = 2, .hkv = 1, .lq = 9,
     .lk = 4, .d = 8, .dv = 8, .causal = 1, .expect_empty = 1},
    {.name = "GQA 6:1, causal window 3", .batch = 2, .hq = 6, .hkv = 1, .lq = 12, .lk = 12,
     .d = 8, .dv = 5, .causal = 1, .window = 3},
    {.name = "packed with zero-length members, causal", .hq = 2, .hkv = 1, .d = 6, .dv = 4,
     .causal = 1, .nseq = 5, .cu_q = {0, 3, 3, 10, 10, 14}, .cu_k = {0, 5, 5, 5, 12, 16},
     .expect_empty = 1},
    {.name = "causal chunk 7, Lq < Lk", .batch = 1, .hq = 3, .hkv = 3, .lq = 20, .lk = 30,
     .d = 8, .dv = 8, .causal = 1, .chunk = 7},
    {.name = "bidirectional window 4, scale 0.3", .batch = 1, .hq = 2, .hkv = 2, .lq = 16,
     .lk = 16, .d = 8, .dv = 6, .window = 4, .scale = 0.3},
    {.name = "three panels, causal window 50, Lq > Lk", .batch = 1, .hq = 2, .hkv = 1,
     .lq = 300, .lk = 280, .d = 16, .dv = 8, .causal = 1, .window = 50, .expect_empty = 1},
    {.name = "packed across a panel edge, chunk 16", .hq = 2, .hkv = 2, .d = 8, .dv = 8,
     .causal = 1, .chunk = 16, .nseq = 3, .cu_q = {0, 100, 150, 260},
     .cu_k = {0, 90, 200, 260}},
    {.name = "decode row, causal window 5", .batch = 3, .hq = 4, .hkv = 2, .lq = 1, .lk = 40,
     .d = 8, .dv = 8, .causal = 1, .window = 5},
    {.name = "no keys at all", .batch = 2, .hq = 2, .hkv = 2, .lq = 3, .lk = 0, .d = 4,
     .dv = 4, .expect_empty = 1},
    {.name = "no queries at all", .batch = 1, .hq = 2, .hkv = 2, .lq = 0, .lk = 5, .d = 4,
     .dv = 4},
    {.name = "large scale 2.5, chunk 5 bidirectional", .batch = 1, .hq = 1, .hkv = 1,
     .lq = 13, .lk = 13, .d = 8, .dv = 4, .chunk = 5, .scale = 2.5},
    /* score terms (docs/semantics.md section 7) */
    {.name = "soft-cap 2 (scores beyond the cap), GQA, causal window 5", .batch = 2, .hq = 4,
     .hkv = 2, .lq = 24, .lk = 24, .d = 8, .dv = 8, .causal = 1, .window = 5, .scale = 1.5,
     .softcap = 2},
    {.name = "sinks in [-5, 10], causal Lq > Lk: empty rows get the sink", .batch = 2,
     .hq = 3, .hkv = 1, .lq = 10, .lk = 6, .d = 8, .dv = 4, .causal = 1, .expect_empty = 1,
     .sinks = 1},
    {.name = "soft-cap 30 and sinks, packed with zero-length members", .hq = 4, .hkv = 2,
     .d = 6, .dv = 4, .causal = 1, .nseq = 5, .cu_q = {0, 3, 3, 10, 10, 14},
     .cu_k = {0, 5, 5, 5, 12, 16}, .expect_empty = 1, .softcap = 30, .sinks = 1, .scale = 3},
    {.name = "soft-cap 50 and sinks, three panels, causal window 50, Lq > Lk", .batch = 1,
     .hq = 2, .hkv = 1, .lq = 300, .lk = 280, .d = 16, .dv = 8, .causal = 1, .window = 50,
     .expect_empty = 1, .softcap = 50, .sinks = 1},
};

Test(ref_brute, every_precision_matches_a_long_double_brute_force_on_random_cases)
{
    for (size_t c = 0; c < sizeof brute_cases / sizeof brute_cases[0]; c++) {
        const ref_case *rc = &brute_cases[c];
        attn_problem p;
        make_problem(rc, &p);
        for (int var = 0; var < NVARIANTS; var++) {
            tensors t;
            make_inputs(&p, 100 + c, variant_dtype[var], &t);
            brute want = brute_force(&p, &t);
            if (rc->expect_empty)
                cr_assert(want.empty_rows > 0, "%s: the case should have empty rows", rc->name);
            outputs got = run_ok(rc->name, var, &p, &t);
            check_against_brute(rc->name, var, &p, &got, &want);
            free_outputs(&got);
            free_brute(&want);
            free_inputs(&t);
        }
        drop_problem(&p);
    }
}

/* ---- ref_row_f64: one row, any key set ---- */

/* The true mask of one row, as ref_row_f64's predicate. */
typedef struct row_mask {
    mask_params m;
    seq_view v;
    int32_t tq;
} row_mask;

static int row_mask_allows(void *ctx, int32_t tk)
{
    const row_mask *r = ctx;
    return mask_pair_allowed(r->m, r->v, r->tq, tk);
}

/* |a - b| <= tol * max(1, |b|), with -inf == -inf (an empty row's LSE). */
static int close_rel(double a, double b, double tol)
{
    if (isinf(b))
        return a == b;
    return fabs(a - b) <= tol * fmax(1.0, fabs(b));
}

/* Every row of the brute-force cases (dense, packed with empty members, GQA, windows, chunks,
 * causal, Lq < Lk and Lq > Lk, no keys) and a larger GQA decode case, on random inputs:
 * ref_row_f64 with the true mask equals the oracle to 1e-12 relative, empty rows exactly; so
 * does ref_row_online_f64 with the rescale, over tiles of 16 keys visited last tile first, on
 * every sink-free case (a rule with a sink it refuses). */
/* The reference on a selection of query tokens (ref.h's _at calls) gives each selected row as
 * the whole call does, to the rounding of its panel's products: float64 within 1e-12 of the row
 * (relative to the row's largest value), float32 within 64 u, the float16 / bfloat16 baselines
 * within two ulps of the type (a different panel groups other rows into the same gemm, whose
 * float sums may round otherwise, and a score one ulp off moves its weight). Selections: every token, every third, a few far apart (panels of their
 * own under a window), the first and the last. A list that does not increase, or leaves
 * [0, Lq), is refused. */
Test(ref_at, a_selection_of_tokens_gives_the_rows_of_the_whole_call)
{
    size_t ncases = sizeof brute_cases / sizeof brute_cases[0];
    for (size_t c = 0; c < ncases; c++) {
        const ref_case *rc = &brute_cases[c];
        attn_problem p;
        make_problem(rc, &p);
        int32_t lq = p.seq.lq, hq = p.hq, nb = p.seq.batch, d = p.d, dv = p.dv;
        if (lq < 1)
            continue;
        int32_t *tq = malloc(sizeof *tq * ((size_t)lq + 1));
        for (int sel = 0; sel < 4; sel++) {
            int32_t n = 0;
            for (int32_t t = 0; t < lq; t++)
                if (sel == 0 || (sel == 1 && t % 3 == 1) || (sel == 2 && t % 97 == 5) ||
                    (sel == 3 && (t == 0 || t == lq - 1)))
                    tq[n++] = t;
            if (n == 0)
                continue;
            ref_tokens tk = {tq, n};
            for (int var = 0; var < NVARIANTS; var++) {
                fc_dtype dt = var == V_F64 ? FC_F32 : variant_dtype[var];
                tensors t;
                make_inputs(&p, 900 + c, dt, &t);
                outputs whole = run_ok(rc->name, (variant)var, &p, &t);
                size_t rows = (size_t)nb * (size_t)hq * (size_t)n;
                float *qs = malloc(sizeof *qs * (rows * (size_t)d + 1));
                double *o = malloc(sizeof *o * (rows * (size_t)dv + 1)), *l = malloc(sizeof *l * (rows + 1));
                float *o32 = malloc(sizeof *o32 * (rows * (size_t)dv + 1)), *l32 = malloc(sizeof *l32 * (rows + 1));
                cr_assert(qs && o && l && o32 && l32);
                for (size_t r = 0; r < rows; r++) /* the selected queries, compact */
                    memcpy(qs + r * (size_t)d, t.q + ((r / (size_t)n) * (size_t)lq +
                                                       (size_t)tq[r % (size_t)n]) * (size_t)d,
                           sizeof *qs * (size_t)d);
                fc_err err = {{0}};
                fc_status st = var == V_F64
                    ? ref_attention_f64_at(&p, &tk, qs, t.k, t.v, o, l, &err)
                    : ref_attention_lp_at(&p, dt, &tk, qs, t.k, t.v, o32, l32, &err);
                cr_assert_eq(st, FC_OK, "%s/%s sel %d: %s", rc->name, variant_names[var], sel,
                             err.msg);
                double tol = var == V_F64 ? 1e-12 : var == V_F32 ? 64 * unit_roundoff(V_F32)
                                                                : 4 * unit_roundoff((variant)var);
                for (size_t r = 0; r < rows; r++) {
                    size_t wr = (r / (size_t)n) * (size_t)lq + (size_t)tq[r % (size_t)n];
                    double big = 1e-30;
                    for (int32_t x = 0; x < dv; x++)
                        big = fmax(big, fabs(whole.o[wr * (size_t)dv + (size_t)x]));
                    for (int32_t x = 0; x < dv; x++) {
                        double a = var == V_F64 ? o[r * (size_t)dv + (size_t)x]
                                                : o32[r * (size_t)dv + (size_t)x];
                        double w = whole.o[wr * (size_t)dv + (size_t)x];
                        cr_assert(a == w || fabs(a - w) <= tol * big, "%s/%s sel %d row %zu: "
                                  "%.17g vs %.17g", rc->name, variant_names[var], sel, r, a, w);
                    }
                    double a = var == V_F64 ? l[r] : l32[r], w = whole.lse[wr];
                    cr_assert(a == w || fabs(a - w) <= tol * fmax(1, fabs(w)), "%s/%s sel %d "
                              "lse row %zu: %.17g vs %.17g", rc->name, variant_names[var], sel,
                              r, a, w);
                }
                free(qs);
                free(o);
                free(l);
                free(o32);
                free(l32);
                free_outputs(&whole);
                free_inputs(&t);
            }
        }
        if (lq >= 2) { /* refused: not increasing, out of range */
            int32_t bad[2][2] = {{1, 1}, {0, lq}};
            tensors t;
            make_inputs(&p, 1, FC_F32, &t);
            double o[1024], l[64];
            for (int k = 0; k < 2; k++) {
                ref_tokens tk = {bad[k], 2};
                fc_err err = {{0}};
                if ((size_t)nb * hq * 2 * dv > 1024 || (size_t)nb * hq * 2 > 64)
                    break;
                cr_expect_eq(ref_attention_f64_at(&p, &tk, t.q, t.k, t.v, o, l, &err), FC_EINVAL,
                             "%s: list %d accepted", rc->name, k);
                cr_expect(strstr(err.msg, "the tokens must increase within [0, Lq"), "%s", err.msg);
            }
            free_inputs(&t);
        }
        free(tq);
        attn_problem_free(&p);
    }
}

Test(ref_row, one_row_with_the_true_mask_equals_the_oracle_on_random_cases)
{
    static const ref_case extra = {.name = "GQA 8:2, causal window 33, decode 64x200",
                                   .batch = 2, .hq = 8, .hkv = 2, .lq = 64, .lk = 200,
                                   .d = 32, .dv = 24, .causal = 1, .window = 33};
    size_t ncases = sizeof brute_cases / sizeof brute_cases[0], online_cases = 0;
    double *o = malloc(sizeof(double) * 64);
    int32_t *tiles = malloc(sizeof(int32_t) * 2 * 64);
    cr_assert(o && tiles);
    for (size_t c = 0; c <= ncases; c++) {
        const ref_case *rc = c < ncases ? &brute_cases[c] : &extra;
        attn_problem p;
        make_problem(rc, &p);
        tensors t;
        make_inputs(&p, 700 + c, FC_F32, &t);
        outputs want = run_ok(rc->name, V_F64, &p, &t);
        row_mask rm = {p.mask, seq_info_view(&p.seq), 0};
        int32_t lq = p.seq.lq, lk = p.seq.lk, d = p.d, dv = p.dv;
        size_t nt = 0;
        cr_assert((lk + 15) / 16 <= 64 && dv <= 64, "%s: scratch too small", rc->name);
        for (int32_t j1 = lk; j1 > 0; j1 -= 16) { /* the last tile first */
            tiles[2 * nt] = j1 - 16 > 0 ? j1 - 16 : 0;
            tiles[2 * nt++ + 1] = j1;
        }
        int online_too = !p.terms.sinks;
        online_cases += (size_t)online_too;
        for (int32_t b = 0; b < p.seq.batch; b++)
            for (int32_t h = 0; h < p.hq; h++)
                for (rm.tq = 0; rm.tq < lq; rm.tq++)
                    for (int online = 0; online <= online_too; online++) {
                        size_t row = ((size_t)b * p.hq + h) * lq + rm.tq;
                        size_t kv = ((size_t)b * p.hkv + h / (p.hq / p.hkv)) * lk;
                        const float *q = t.q + row * d, *k = t.k + kv * d, *v = t.v + kv * dv;
                        const char *how = online ? "online" : "two-pass";
                        double lse;
                        fc_err err = {{0}};
                        ref_row_rule rule = ref_row_rule_of(&p, h);
                        fc_status st =
                            online ? ref_row_online_f64(q, k, v, lk, d, dv, &rule,
                                                        row_mask_allows, &rm, tiles, nt,
                                                        REF_RESCALE_BOTH, o, &lse, &err)
                                   : ref_row_f64(q, k, v, lk, d, dv, &rule, row_mask_allows, &rm,
                                                 o, &lse, &err);
                        cr_assert_eq(st, FC_OK, "%s, %s: %s", rc->name, how, err.msg);
                        cr_assert(close_rel(lse, want.lse[row], 1e-12),
                                  "%s, %s: row %zu lse %.17g, oracle %.17g", rc->name, how, row,
                                  lse, want.lse[row]);
                        for (int32_t x = 0; x < dv; x++)
                            cr_assert(close_rel(o[x], want.o[row * dv + x], 1e-12) &&
                                          (!isinf(want.lse[row]) || o[x] == 0.0) &&
                                          (want.lse[row] != terms_sink(&p.terms, h) ||
                                           o[x] == 0.0),
                                      "%s, %s: row %zu out[%d] = %.17g, oracle %.17g", rc->name,
                                      how, row, (int)x, o[x], want.o[row * dv + x]);
                    }
        if (!online_too) {
            ref_row_rule rule = ref_row_rule_of(&p, 0);
            fc_err err = {{0}};
            cr_assert_eq(ref_row_online_f64(t.q, t.k, t.v, lk, d, dv, &rule, row_mask_allows,
                                            &rm, tiles, nt, REF_RESCALE_BOTH, o, NULL, &err),
                         FC_EINVAL);
            cr_assert(strstr(err.msg, "sink"), "%s", err.msg);
        }
        free_outputs(&want);
        free_inputs(&t);
        drop_problem(&p);
    }
    cr_assert(online_cases >= 4, "only %zu sink-free cases", online_cases);
    free(tiles);
    free(o);
}

static int every_other_key(void *ctx, int32_t tk)
{
    (void)ctx;
    return tk % 2 == 0;
}

/* Keys the predicate rejects are never read (NaN there stays out); bad arguments are refused. */
Test(ref_row, rejected_keys_are_never_read_and_bad_arguments_are_refused)
{
    float q[2] = {1, 0}, k[8] = {0, 0, NAN, NAN, 1, 0, NAN, NAN}, v[4] = {1, NAN, 3, NAN};
    double o[1], lse;
    fc_err err = {{0}};
    ref_row_rule r = {1.0, FC_F32, 0.0, -INFINITY, 1.0, 0.0, 0.0, FC_F32, 0, NULL, 1.0, 0, 0};
    cr_assert_eq(ref_row_f64(q, k, v, 4, 2, 1, &r, every_other_key, NULL, o, &lse, &err), FC_OK);
    /* keys 0 and 2: scores 0 and 1 */
    double e = exp(1.0);
    cr_assert(fabs(o[0] - (1.0 + 3.0 * e) / (1.0 + e)) < 1e-15, "out %.17g", o[0]);
    cr_assert(fabs(lse - log(1.0 + e)) < 1e-15, "lse %.17g", lse);
    /* soft-cap 0.5 and a sink 2: scores 0 and 0.5 tanh(2), the sink one more term of the sum
     * with no value, worked by hand */
    ref_row_rule t = {1.0, FC_F32, 0.5, 2.0, 1.0, 0.0, 0.0, FC_F32, 0, NULL, 1.0, 0, 0};
    cr_assert_eq(ref_row_f64(q, k, v, 4, 2, 1, &t, every_other_key, NULL, o, &lse, &err), FC_OK);
    double s1 = exp(0.5 * tanh(2.0)), z = 1.0 + s1 + exp(2.0);
    cr_assert(fabs(o[0] - (1.0 + 3.0 * s1) / z) < 1e-15, "capped out %.17g", o[0]);
    cr_assert(fabs(lse - log(z)) < 1e-15, "capped lse %.17g", lse);
    cr_assert_eq(ref_row_f64(q, k, v, 4, 0, 1, &r, every_other_key, NULL, o, &lse, &err),
                 FC_EINVAL);
    r.scale = NAN;
    cr_assert_eq(ref_row_f64(q, k, v, 4, 2, 1, &r, every_other_key, NULL, o, &lse, &err),
                 FC_EINVAL);
    r.scale = 1.0;
    r.softcap = -1.0;
    cr_assert_eq(ref_row_f64(q, k, v, 4, 2, 1, &r, every_other_key, NULL, o, &lse, &err),
                 FC_EINVAL);
    r.softcap = 0.0;
    r.sink = NAN;
    cr_assert_eq(ref_row_f64(q, k, v, 4, 2, 1, &r, every_other_key, NULL, o, &lse, &err),
                 FC_EINVAL);
    r.sink = -INFINITY;
    cr_assert_eq(ref_row_f64(q, k, v, 4, 2, 1, NULL, every_other_key, NULL, o, &lse, &err),
                 FC_EINVAL);
    cr_assert_eq(ref_row_f64(q, k, v, 4, 2, 1, &r, NULL, NULL, o, &lse, &err), FC_EINVAL);
    cr_assert(strstr(err.msg, "reference row"), "message: %s", err.msg);
    r.masked_score = INFINITY;
    cr_assert_eq(ref_row_f64(q, k, v, 4, 2, 1, &r, every_other_key, NULL, o, &lse, &err),
                 FC_EINVAL);
}

static int key0_kept_key2_filled(void *ctx, int32_t tk)
{
    (void)ctx;
    return tk == 0 ? 1 : tk == 2 ? 2 : 0;
}

/* The bias as diag/'s alternatives read it (bias_mul, bias_before_cap, fill_biased), worked by
 * hand: keys 0 and 2 score 0 and 1 (values 1 and 3), their bias 0.25 and -0.5; the other
 * keys' bias is NaN and never read. */
Test(ref_row, the_bias_is_scaled_added_before_the_cap_or_to_a_fill_as_the_rule_says)
{
    float q[2] = {1, 0}, k[8] = {0, 0, NAN, NAN, 1, 0, NAN, NAN}, v[4] = {1, NAN, 3, NAN};
    float bias[4] = {0.25f, NAN, -0.5f, NAN};
    double o[1], lse;
    fc_err err = {{0}};
    /* doubled: scores 0.5 and 0 */
    ref_row_rule r = {1.0, FC_F32, 0.0, -INFINITY, 1.0, 0.0, 0.0, FC_F32, 0, bias, 2.0, 0, 0};
    cr_assert_eq(ref_row_f64(q, k, v, 4, 2, 1, &r, every_other_key, NULL, o, &lse, &err), FC_OK,
                 "%s", err.msg);
    double a = exp(0.5);
    cr_assert(fabs(o[0] - (a + 3.0) / (a + 1.0)) < 1e-15, "doubled out %.17g", o[0]);
    cr_assert(fabs(lse - log(a + 1.0)) < 1e-15, "doubled lse %.17g", lse);
    /* a cap of 0.5, the bias after it (the truth's order) or before it */
    r.bias_mul = 1.0;
    r.softcap = 0.5;
    for (int before = 0; before < 2; before++) {
        r.bias_before_cap = before;
        double s0 = before ? 0.5 * tanh(0.25 / 0.5) : 0.5 * tanh(0.0) + 0.25;
        double s1 = before ? 0.5 * tanh(0.5 / 0.5) : 0.5 * tanh(1.0 / 0.5) - 0.5;
        cr_assert_eq(ref_row_f64(q, k, v, 4, 2, 1, &r, every_other_key, NULL, o, &lse, &err),
                     FC_OK, "%s", err.msg);
        double z = exp(s0) + exp(s1);
        cr_assert(fabs(o[0] - (exp(s0) + 3.0 * exp(s1)) / z) < 1e-15, "before %d out %.17g",
                  before, o[0]);
        cr_assert(fabs(lse - log(z)) < 1e-15, "before %d lse %.17g", before, lse);
    }
    /* key 2 filled at -0.5: plus its bias -0.5 only with fill_biased */
    r.bias_before_cap = 0;
    r.masked_score = -0.5;
    for (int filled = 0; filled < 2; filled++) {
        r.fill_biased = filled;
        double s0 = 0.5 * tanh(0.0) + 0.25, s2 = filled ? -1.0 : -0.5;
        cr_assert_eq(ref_row_f64(q, k, v, 4, 2, 1, &r, key0_kept_key2_filled, NULL, o, &lse,
                                 &err), FC_OK, "%s", err.msg);
        double z = exp(s0) + exp(s2);
        cr_assert(fabs(o[0] - (exp(s0) + 3.0 * exp(s2)) / z) < 1e-15, "fill %d out %.17g",
                  filled, o[0]);
        cr_assert(fabs(lse - log(z)) < 1e-15, "fill %d lse %.17g", filled, lse);
    }
    r.bias_mul = NAN;
    cr_assert_eq(ref_row_f64(q, k, v, 4, 2, 1, &r, every_other_key, NULL, o, &lse, &err),
                 FC_EINVAL);
}

/* ---- ref_row_online_f64 without the rescale ---- */

/* Without the rescale, worked by hand: keys 0 and 2 score 0 and 1 (values 1 and 3). Visited
 * in that order the max rises from 0 to 1. Accumulator kept: key 0 keeps weight e^0 in it
 * where it should have e^-1: out (1 + 3) / (1 + e^-1), the LSE still log(1 + e). Neither
 * rescaled: the sum is 1 + 1 too, out 4 / 2, LSE 1 + log 2. Visited the other way the max
 * never rises and the row is right. A tile past lk, NULL tiles, an unknown rescale: refused. */
Test(ref_row, online_without_the_rescale_overweighs_the_earlier_tiles)
{
    float q[2] = {1, 0}, k[8] = {0, 0, NAN, NAN, 1, 0, NAN, NAN}, v[4] = {1, NAN, 3, NAN};
    double o[1], lse, e = exp(1.0);
    fc_err err = {{0}};
    ref_row_rule r = {1.0, FC_F32, 0.0, -INFINITY, 1.0, 0.0, 0.0, FC_F32, 0, NULL, 1.0, 0, 0};
    const int32_t up[4] = {0, 2, 2, 4}, down[4] = {2, 4, 0, 2}, past[2] = {0, 5};
    cr_assert_eq(ref_row_online_f64(q, k, v, 4, 2, 1, &r, every_other_key, NULL, up, 2,
                                    REF_RESCALE_SUM, o, &lse, &err), FC_OK, "%s", err.msg);
    cr_assert(fabs(o[0] - 4.0 / (1.0 + 1.0 / e)) < 1e-15, "out %.17g", o[0]);
    cr_assert(fabs(lse - log(1.0 + e)) < 1e-15, "lse %.17g", lse);
    cr_assert_eq(ref_row_online_f64(q, k, v, 4, 2, 1, &r, every_other_key, NULL, up, 2,
                                    REF_RESCALE_NONE, o, &lse, &err), FC_OK, "%s", err.msg);
    cr_assert(fabs(o[0] - 2.0) < 1e-15, "out %.17g", o[0]);
    cr_assert(fabs(lse - (1.0 + log(2.0))) < 1e-15, "lse %.17g", lse);
    for (int how = REF_RESCALE_SUM; how <= REF_RESCALE_NONE; how++) {
        cr_assert_eq(ref_row_online_f64(q, k, v, 4, 2, 1, &r, every_other_key, NULL, down, 2,
                                        (ref_rescale)how, o, &lse, &err), FC_OK, "%s", err.msg);
        cr_assert(fabs(o[0] - (1.0 + 3.0 * e) / (1.0 + e)) < 1e-15, "out %.17g", o[0]);
        cr_assert(fabs(lse - log(1.0 + e)) < 1e-15, "lse %.17g", lse);
    }
    cr_assert_eq(ref_row_online_f64(q, k, v, 4, 2, 1, &r, every_other_key, NULL, past, 1,
                                    REF_RESCALE_BOTH, o, &lse, &err), FC_EINVAL);
    cr_assert(strstr(err.msg, "tile 0 = [0, 5)"), "%s", err.msg);
    cr_assert_eq(ref_row_online_f64(q, k, v, 4, 2, 1, &r, every_other_key, NULL, NULL, 1,
                                    REF_RESCALE_BOTH, o, &lse, &err), FC_EINVAL);
    cr_assert_eq(ref_row_online_f64(q, k, v, 4, 2, 1, &r, every_other_key, NULL, up, 2,
                                    (ref_rescale)3, o, &lse, &err), FC_EINVAL);
    cr_assert(strstr(err.msg, "rescale 3"), "%s", err.msg);
}

static int every_key(void *ctx, int32_t tk)
{
    (void)ctx;
    (void)tk;
    return 1;
}

/* A softmax in bfloat16, each way of REF_LOWP_* against the same softmax written out here: one
 * key scoring 0, six scoring -5 (weights below half a bfloat16 ulp of a sum near 2, above half
 * one near 1: a running sum keeps or drops them by where it stands), one -1.01 (bfloat16's
 * -1.0078125 when the scores are rounded first), and a sink 0.7 (never rounded: not a score).
 * The twelve ways give twelve different rows, so a way ref_row_f64 ignored would show. */
Test(ref_row, each_way_of_a_softmax_in_bfloat16_is_its_own)
{
    enum { N = 8 };
    static const float sc[N] = {0, -5, -5, -5, -5, -5, -5, -1.01f};
    float q[2] = {1, 0}, k[2 * N], v[N];
    for (int j = 0; j < N; j++) {
        k[2 * j] = sc[j];
        k[2 * j + 1] = 0;
        v[j] = (float)(j + 1);
    }
    const double sink = 0.7;
    double e[N], es = fc_round((float)exp(sink - sink), FC_BF16); /* the sink is the max */
    double got[REF_LOWP_WAYS];
    int nways = 0;
    for (unsigned how = 0; how < REF_LOWP_WAYS; how++) {
        int seq = how & REF_LOWP_SEQ_SUM, last = how & REF_LOWP_SINK_LAST;
        if (last && !seq)
            continue;
        for (int j = 0; j < N; j++) {
            double s = how & REF_LOWP_SCORES ? fc_round(sc[j], FC_BF16) : (double)sc[j];
            e[j] = fc_round((float)exp(s - sink), FC_BF16);
        }
        double sum = 0;
        if (!seq) {
            for (int j = 0; j < N; j++)
                sum += e[j];
            sum = fc_round((float)(sum + es), FC_BF16);
        } else {
            sum = last ? 0 : es;
            for (int j = 0; j < N; j++)
                sum = fc_round((float)(sum + e[j]), FC_BF16);
            sum = fc_round((float)(last ? sum + es : sum), FC_BF16);
        }
        double want = 0;
        for (int j = 0; j < N; j++)
            want += (how & REF_LOWP_UNNORMALISED ? e[j] : fc_round((float)(e[j] / sum), FC_BF16))
                    * v[j];
        if (how & REF_LOWP_UNNORMALISED)
            want /= sum;
        ref_row_rule r = {1.0, FC_F32, 0.0, sink, 1.0, 0.0, 0.0, FC_BF16, how, NULL, 1.0, 0, 0};
        double o[1], lse;
        fc_err err = {{0}};
        cr_assert_eq(ref_row_f64(q, k, v, N, 2, 1, &r, every_key, NULL, o, &lse, &err), FC_OK,
                     "%s", err.msg);
        cr_assert(fabs(o[0] - want) < 1e-12, "way %u: out %.17g, want %.17g", how, o[0], want);
        cr_assert(fabs(lse - (sink + log(sum))) < 1e-12, "way %u: lse %.17g", how, lse);
        for (int w = 0; w < nways; w++)
            cr_assert(got[w] != o[0], "way %u gives another way's row (%.17g)", how, o[0]);
        got[nways++] = o[0];
    }
    cr_assert_eq(nways, 12);
    ref_row_rule bad = {1.0, FC_F32, 0.0, sink, 1.0, 0.0, 0.0, FC_BF16, REF_LOWP_WAYS, NULL,
                        1.0, 0, 0};
    double o[1];
    fc_err err = {{0}};
    cr_assert_eq(ref_row_f64(q, k, v, N, 2, 1, &bad, every_key, NULL, o, NULL, &err), FC_EINVAL);
    cr_assert(strstr(err.msg, "softmax_how = 16"), "%s", err.msg);
}

/* 0 for key 3, 2 (masked, visited) for key 1, 1 for the others. */
static int key_1_filled(void *ctx, int32_t tk)
{
    (void)ctx;
    return tk == 3 ? 0 : tk == 1 ? 2 : 1;
}

/* A key the predicate answers 2 for counts with the rule's masked_score, its K never read
 * (NaN there), its V weighed as any other's: worked by hand. */
Test(ref_row, a_filled_key_counts_with_the_masked_score)
{
    float q[2] = {1, 0}, k[8] = {0, 0, NAN, NAN, 1, 0, NAN, NAN}, v[4] = {1, 5, 3, NAN};
    double o[1], lse;
    fc_err err = {{0}};
    ref_row_rule r = {1.0, FC_F32, 0.0, -INFINITY, 1.0, -0.5, 0.0, FC_F32, 0, NULL, 1.0, 0, 0};
    cr_assert_eq(ref_row_f64(q, k, v, 4, 2, 1, &r, key_1_filled, NULL, o, &lse, &err), FC_OK,
                 "%s", err.msg);
    double z = 1.0 + exp(-0.5) + exp(1.0); /* scores 0, -0.5 (filled), 1 */
    cr_assert(fabs(o[0] - (1.0 + 5.0 * exp(-0.5) + 3.0 * exp(1.0)) / z) < 1e-15, "out %.17g",
              o[0]);
    cr_assert(fabs(lse - log(z)) < 1e-15, "lse %.17g", lse);
}

/* Scores rounded to float16 that overflow (-1e5 and -2e5, past -65504) weigh nothing, as a
 * kernel's -inf fill: a row of such scores alone has no key (O 0, LSE -inf, what a float16
 * kernel at scores of -1e5 returns); beside a score float16 holds (-3) they drop out; the truth
 * (scores not rounded) keeps its finite row; a NaN score still poisons the row. By hand. */
Test(ref_row, scores_rounded_past_the_range_weigh_nothing)
{
    float q[1] = {1}, v[3] = {2, 4, 8};
    float k[3] = {-1e5f, -2e5f, -3};
    double o[1], lse;
    fc_err err = {{0}};
    ref_row_rule r = {1.0, FC_F16, 0.0, -INFINITY, 1.0, 0.0, 0.0, FC_F32, 0, NULL, 1.0, 0, 0};
    cr_assert_eq(ref_row_f64(q, k, v, 2, 1, 1, &r, every_key, NULL, o, &lse, &err), FC_OK);
    cr_assert(o[0] == 0 && lse == -INFINITY, "out %g lse %g", o[0], lse);
    cr_assert_eq(ref_row_f64(q, k, v, 3, 1, 1, &r, every_key, NULL, o, &lse, &err), FC_OK);
    cr_assert(o[0] == 8 && lse == -3, "out %g lse %g", o[0], lse);
    r.round_scores = FC_F32; /* the truth: e^-1e5 and e^-2e5 under e^-1e5, finite */
    cr_assert_eq(ref_row_f64(q, k, v, 2, 1, 1, &r, every_key, NULL, o, &lse, &err), FC_OK);
    cr_assert(fabs(o[0] - 2) < 1e-12 && lse == -1e5, "out %.17g lse %.17g", o[0], lse);
    float kn[2] = {NAN, -1e5f};
    r.round_scores = FC_F16;
    cr_assert_eq(ref_row_f64(q, kn, v, 2, 1, 1, &r, every_key, NULL, o, &lse, &err), FC_OK);
    cr_assert(isnan(o[0]) && isnan(lse), "out %g lse %g", o[0], lse);
}

static int no_key(void *ctx, int32_t tk)
{
    (void)ctx;
    (void)tk;
    return 0;
}

/* A sink given a value (a kernel's bug diag/ models) enters the output with its weight; a row
 * with no key is then all sink: o = the value. Worked by hand; sink_value 0 is the truth. */
Test(ref_row, a_sink_value_weighs_in_the_output)
{
    float q[2] = {1, 0}, k[8] = {0, 0, NAN, NAN, 1, 0, NAN, NAN}, v[4] = {1, NAN, 3, NAN};
    double o[1], lse;
    fc_err err = {{0}};
    ref_row_rule r = {1.0, FC_F32, 0.0, 2.0, 1.0, 0.0, 0.5, FC_F32, 0, NULL, 1.0, 0, 0};
    cr_assert_eq(ref_row_f64(q, k, v, 4, 2, 1, &r, every_other_key, NULL, o, &lse, &err), FC_OK,
                 "%s", err.msg);
    double e = exp(1.0), z = 1.0 + e + exp(2.0); /* scores 0 and 1, the sink 2 */
    cr_assert(fabs(o[0] - (1.0 + 3.0 * e + 0.5 * exp(2.0)) / z) < 1e-15, "out %.17g", o[0]);
    cr_assert(fabs(lse - log(z)) < 1e-15, "lse %.17g", lse);
    cr_assert_eq(ref_row_f64(q, k, v, 4, 2, 1, &r, no_key, NULL, o, &lse, &err), FC_OK);
    cr_assert(o[0] == 0.5 && lse == 2.0, "empty row: out %.17g lse %.17g", o[0], lse);
    r.sink_value = 0.0;
    cr_assert_eq(ref_row_f64(q, k, v, 4, 2, 1, &r, no_key, NULL, o, &lse, &err), FC_OK);
    cr_assert(o[0] == 0.0 && lse == 2.0, "the truth's empty row: out %.17g", o[0]);
    r.sink_value = NAN;
    cr_assert_eq(ref_row_f64(q, k, v, 4, 2, 1, &r, no_key, NULL, o, &lse, &err), FC_EINVAL);
}

/* ---- the baseline's rounding points ---- */

/* docs/tolerance.md's O_lp written out one element at a time, sums in long double, each
 * named rounding applied: K' = rnd(fl32(scale * k)), S = rnd(q . K'), P = rnd(softmax(S)),
 * O = rnd(P . V). The reference's fp32 gemm sums differ from these only in the last bits
 * of fp32, which survive rounding to fp16/bf16 only near a tie. */
static void lp_emulate(const attn_problem *p, fc_dtype dt, const tensors *t, float *out)
{
    const int32_t lq = p->seq.lq, lk = p->seq.lk, d = p->d, dv = p->dv;
    seq_view view = seq_info_view(&p->seq);
    float *sc = malloc(((size_t)lk + 1) * sizeof *sc), *kp = malloc((size_t)d * sizeof *kp);
    cr_assert(sc && kp, "out of memory");
    for (int32_t b = 0; b < p->seq.batch; b++)
        for (int32_t h = 0; h < p->hq; h++)
            for (int32_t i = 0; i < lq; i++) {
                size_t row = ((size_t)b * p->hq + h) * lq + i;
                size_t kv = ((size_t)b * p->hkv + h / (p->hq / p->hkv)) * lk;
                float mx = -INFINITY;
                for (int32_t j = 0; j < lk; j++) {
                    if (!mask_pair_allowed(p->mask, view, i, j))
                        continue;
                    long double dot = 0;
                    for (int32_t x = 0; x < d; x++) {
                        kp[x] = fc_round((float)p->scale * t->k[(kv + j) * d + x], dt);
                        dot += (long double)t->q[row * d + x] * kp[x];
                    }
                    sc[j] = fc_round((float)dot, dt);
                    mx = sc[j] > mx ? sc[j] : mx;
                }
                long double sum = 0, acc[64] = {0};
                for (int32_t j = 0; j < lk; j++)
                    if (mask_pair_allowed(p->mask, view, i, j))
                        sum += expl((long double)sc[j] - mx);
                for (int32_t j = 0; j < lk; j++) {
                    if (!mask_pair_allowed(p->mask, view, i, j))
                        continue;
                    float pj = fc_round((float)(expl((long double)sc[j] - mx) / sum), dt);
                    for (int32_t x = 0; x < dv; x++)
                        acc[x] += (long double)pj * t->v[(kv + j) * dv + x];
                }
                for (int32_t x = 0; x < dv; x++)
                    out[row * dv + x] = fc_round((float)acc[x], dt);
            }
    free(sc);
    free(kp);
}

/* Most outputs must match the emulation bit for bit, and the rest by an ulp or two of the
 * dtype. Skipping any one rounding point (of K', S, P or O) moves a large share of the
 * outputs, which the brute force's tolerance alone would not notice. */
Test(ref_lp, the_baseline_rounds_k_s_p_and_o_where_the_tolerance_page_says)
{
    static const struct { const char *name; fc_dtype dt; } dts[] = {
        {.name = "float16", .dt = FC_F16},
        {.name = "bfloat16", .dt = FC_BF16},
    };
    /* d = 24: the default scale 1/sqrt(24) is not a power of two, so K' really rounds. */
    ref_case rc = {.name = "causal window 40, 96x96, D 24", .batch = 1, .hq = 2, .hkv = 1,
                   .lq = 96, .lk = 96, .d = 24, .dv = 16, .causal = 1, .window = 40};
    attn_problem p;
    make_problem(&rc, &p);
    size_t n = attn_o_elems(&p);
    for (size_t c = 0; c < sizeof dts / sizeof dts[0]; c++) {
        tensors t;
        make_inputs(&p, 150, dts[c].dt, &t);
        float *want = malloc(n * sizeof *want), *got = malloc(n * sizeof *got);
        fc_err err = {{0}};
        cr_assert(want && got, "out of memory");
        lp_emulate(&p, dts[c].dt, &t, want);
        cr_assert_eq(ref_attention_lp(&p, dts[c].dt, t.q, t.k, t.v, got, NULL, &err), FC_OK,
                     "%s %s: %s", rc.name, dts[c].name, err.msg);
        size_t equal = 0;
        double u = dts[c].dt == FC_F16 ? 0x1p-11 : 0x1p-8;
        for (size_t i = 0; i < n; i++) {
            equal += got[i] == want[i];
            double e = fabs((double)got[i] - want[i]);
            if (!(e <= 4 * u * fabs(want[i]) + 1e-6))
                cr_assert_fail("%s %s: out[%zu] = %.9g, emulation %.9g", rc.name, dts[c].name,
                               i, got[i], want[i]);
        }
        cr_log_info("%s %s: %zu of %zu outputs equal the emulation bitwise", rc.name,
                    dts[c].name, equal, n);
        cr_assert(equal >= n * 95 / 100, "%s %s: only %zu of %zu outputs equal the emulation",
                  rc.name, dts[c].name, equal, n);
        free(want);
        free(got);
        free_inputs(&t);
    }
    drop_problem(&p);
}

/* ---- the fp32 softmax's loops (ref/ref_vec.c) ---- */

#define VEC_PAD 8 /* sentinel floats after a row: the vector tails must not write there */

/* A row of m scores: normal * 6 - 10 (exp spans about 2^-50 .. 2^10 after the shift), with
 * the specials of `kind` at fixed places: 1 a NaN, 2 -inf, 3 every element NaN. */
static void vec_row(float *x, int32_t m, int kind, uint64_t seed)
{
    fill_normal(x, (size_t)m, seed, FC_F32);
    for (int32_t j = 0; j < m; j++)
        x[j] = x[j] * 6.0f - 10.0f;
    for (int32_t j = 0; j < m && kind; j++)
        if (kind == 3 || j % 7 == 3)
            x[j] = kind == 2 ? -INFINITY : NAN;
    for (int32_t j = m; j < m + VEC_PAD; j++)
        x[j] = 12345.0f;
}

static int sentinels_intact(const float *x, int32_t m)
{
    for (int32_t j = m; j < m + VEC_PAD; j++)
        if (x[j] != 12345.0f)
            return 0;
    return 1;
}

/* The exp-and-sum of one implementation: its sum within the recursive-summation bound of
 * its own elements (eight partial sums of m/8 terms, then three levels), NaN iff one is. */
static void check_exp_sum(const char *impl, int32_t m, int kind, const float *x, float sum)
{
    double exact = 0.0;
    for (int32_t j = 0; j < m; j++)
        exact += x[j];
    if (isnan(exact)) {
        cr_assert(isnan(sum), "%s m=%d kind %d: sum %g of a row with NaN", impl, (int)m, kind,
                  (double)sum);
        return;
    }
    double tol = ((double)m / 8.0 + 4.0) * 0x1p-24 * exact;
    cr_assert(fabs(sum - exact) <= tol, "%s m=%d kind %d: sum %.9g, its elements add to %.17g",
              impl, (int)m, kind, (double)sum, exact);
}

/* The implementation this CPU runs (SLEEF's AVX2 expf where the CPU has AVX2 and FMA) and the
 * portable one (libm) on rows of every tail length: the same maximum and scaled values bit for
 * bit, each exp within 2 ulp of the other's (SLEEF's u10 is within 1 ulp of exp, libm's within
 * about 0.5), NaN in the same places, sums within their bound, and nothing written past a row's
 * end. Without AVX2 the agreement is the portable path's with itself; its sums and row ends
 * are still checked, and the log says so. */
Test(ref_vec, the_vector_softmax_loops_agree_with_the_portable_ones)
{
    const ref_vec_ops *here = ref_vec_ops_here(), *port = ref_vec_ops_portable();
    cr_log_info("fp32 softmax exp here: %s (%s)", here->name, ref_f32_exp_name());
    if (here == port)
        cr_log_warn("this CPU runs the portable path: no vector path to compare with it");
    static const int32_t lens[] = {0, 1, 2, 5, 7, 8, 9, 15, 16, 17, 31, 40, 1000, 4093};
    enum { MAXM = 4093 };
    float *a = malloc((MAXM + VEC_PAD) * sizeof *a), *b = malloc((MAXM + VEC_PAD) * sizeof *b);
    cr_assert(a && b, "out of memory");
    for (size_t l = 0; l < sizeof lens / sizeof lens[0]; l++)
        for (int kind = 0; kind < 4; kind++) {
            int32_t m = lens[l];
            vec_row(a, m, kind, 1000 + 10 * l + (uint64_t)kind);
            memcpy(b, a, (size_t)(m + VEC_PAD) * sizeof *a);
            float mx = here->max(a, m), mxp = port->max(b, m);
            cr_assert(!memcmp(&mx, &mxp, sizeof mx), "m=%d kind %d: max %g vs %g", (int)m,
                      kind, (double)mx, (double)mxp);
            cr_assert(!isnan(mx), "m=%d kind %d: a NaN won the max", (int)m, kind);
            float sa = here->exp_sum(a, m, mx), sb = port->exp_sum(b, m, mx);
            cr_assert(sentinels_intact(a, m) && sentinels_intact(b, m),
                      "m=%d kind %d: exp_sum wrote past the row", (int)m, kind);
            check_exp_sum(here->name, m, kind, a, sa);
            check_exp_sum(port->name, m, kind, b, sb);
            for (int32_t j = 0; j < m; j++) {
                double e = fabs((double)a[j] - b[j]), tol = 2.0 * 0x1p-23 * b[j] + 0x1p-149;
                cr_assert(!isnan(a[j]) == !isnan(b[j]) && (isnan(b[j]) || e <= tol),
                          "m=%d kind %d: exp at %d: %.9g vs libm %.9g", (int)m, kind, (int)j,
                          (double)a[j], (double)b[j]);
            }
            memcpy(a, b, (size_t)(m + VEC_PAD) * sizeof *a);
            here->scale(a, m, 0.37f);
            port->scale(b, m, 0.37f);
            cr_assert(!memcmp(a, b, (size_t)(m + VEC_PAD) * sizeof *a),
                      "m=%d kind %d: scale differs or wrote past the row", (int)m, kind);
        }
    free(a);
    free(b);
}

/* ---- metamorphic relations ---- */

static int bitwise_equal(const outputs *a, const outputs *b, const attn_problem *p)
{
    return !memcmp(a->o, b->o, attn_o_elems(p) * sizeof(double)) &&
           !memcmp(a->lse, b->lse, attn_lse_elems(p) * sizeof(double));
}

/* Which (batch entry, key token) pairs no query may see, by the predicate. */
static uint8_t *unseen_keys(const attn_problem *p, int *count)
{
    seq_view view = seq_info_view(&p->seq);
    uint8_t *unseen = malloc((size_t)p->seq.lk + 1);
    cr_assert(unseen, "out of memory");
    *count = 0;
    for (int32_t j = 0; j < p->seq.lk; j++) {
        unseen[j] = 1;
        for (int32_t i = 0; i < p->seq.lq && unseen[j]; i++)
            unseen[j] = !mask_pair_allowed(p->mask, view, i, j);
        *count += unseen[j];
    }
    return unseen;
}

/* Poisons k and v at every key no query may see, in every batch entry and kv head. */
static void poison(const attn_problem *p, const uint8_t *unseen, tensors *t, float value)
{
    for (int32_t b = 0; b < p->seq.batch; b++)
        for (int32_t h = 0; h < p->hkv; h++)
            for (int32_t j = 0; j < p->seq.lk; j++) {
                if (!unseen[j])
                    continue;
                size_t row = ((size_t)b * p->hkv + h) * p->seq.lk + j;
                for (int32_t x = 0; x < p->d; x++)
                    t->k[row * p->d + x] = value;
                for (int32_t x = 0; x < p->dv; x++)
                    t->v[row * p->dv + x] = value;
            }
}

/* Sequence A: 40 queries at positions 20..59 see keys 11..59 (causal window 10), so keys
 * 0..10 are unseen; sequence B: 40 queries at 60..99 see 51..99, so its keys 0..50 (tokens
 * 60..110) are unseen. One 128-row panel holds all 80 rows, so its key hull [11, 160)
 * contains B's unseen keys: the gemm does read them. The dense case has unseen keys 0..9. */
static const ref_case poison_cases[] = {
    {.name = "packed, causal window 10, Lq < Lk", .hq = 4, .hkv = 2, .d = 8, .dv = 6,
     .causal = 1, .window = 10, .nseq = 2, .cu_q = {0, 40, 80}, .cu_k = {0, 60, 160}},
    {.name = "dense chunk 8 causal, Lq < Lk", .batch = 2, .hq = 2, .hkv = 1, .lq = 20,
     .lk = 30, .d = 8, .dv = 8, .causal = 1, .chunk = 8},
};

Test(ref_poison, keys_no_query_may_see_can_hold_nan_or_huge_values_without_changing_a_bit)
{
    static const float poisons[] = {NAN, 1e30f, -INFINITY};
    for (size_t c = 0; c < sizeof poison_cases / sizeof poison_cases[0]; c++) {
        const ref_case *rc = &poison_cases[c];
        attn_problem p;
        make_problem(rc, &p);
        int nunseen;
        uint8_t *unseen = unseen_keys(&p, &nunseen);
        cr_assert(nunseen > 0, "%s: the case should have unseen keys", rc->name);
        for (int var = 0; var < NVARIANTS; var++) {
            tensors t;
            make_inputs(&p, 200 + c, variant_dtype[var], &t);
            outputs clean = run_ok(rc->name, var, &p, &t);
            for (size_t i = 0; i < sizeof poisons / sizeof poisons[0]; i++) {
                poison(&p, unseen, &t, poisons[i]);
                outputs dirty = run_ok(rc->name, var, &p, &t);
                cr_assert(bitwise_equal(&clean, &dirty, &p),
                          "%s/%s: poisoning %d unseen keys with %g changed the output", rc->name,
                          variant_names[var], nunseen, (double)poisons[i]);
                free_outputs(&dirty);
            }
            free_outputs(&clean);
            free_inputs(&t);
        }
        free(unseen);
        drop_problem(&p);
    }
}

/* Copies the last w keys/values of every (b, kv head) of `from` into `to` (lk = w). */
static void last_keys(const attn_problem *from, const tensors *t, int32_t w, tensors *out)
{
    size_t nb = (size_t)from->seq.batch * from->hkv, lk = (size_t)from->seq.lk;
    out->q = t->q;
    out->k = malloc(nb * w * from->d * sizeof(float) + 1);
    out->v = malloc(nb * w * from->dv * sizeof(float) + 1);
    cr_assert(out->k && out->v, "out of memory");
    for (size_t bh = 0; bh < nb; bh++) {
        memcpy(out->k + bh * w * from->d, t->k + (bh * lk + lk - w) * from->d,
               (size_t)w * from->d * sizeof(float));
        memcpy(out->v + bh * w * from->dv, t->v + (bh * lk + lk - w) * from->dv,
               (size_t)w * from->dv * sizeof(float));
    }
}

Test(ref_window, a_causal_window_on_a_decode_row_equals_dense_attention_over_its_last_w_keys)
{
    static const struct { const char *name; int32_t lk, w; } cases[] = {
        {.name = "W 7 of 50 keys", .lk = 50, .w = 7},
        {.name = "W 1: only itself", .lk = 20, .w = 1},
        {.name = "W 300 of 700 keys", .lk = 700, .w = 300},
        {.name = "W equal to the sequence", .lk = 9, .w = 9},
        {.name = "W longer than the sequence: all 6 keys", .lk = 6, .w = 9},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        ref_case win = {.name = cases[c].name, .batch = 2, .hq = 4, .hkv = 2, .lq = 1,
                        .lk = cases[c].lk, .d = 16, .dv = 8, .causal = 1, .window = cases[c].w};
        int32_t keys = cases[c].w < cases[c].lk ? cases[c].w : cases[c].lk;
        ref_case dense = win;
        dense.lk = keys;
        dense.causal = dense.window = 0;
        attn_problem pw, pd;
        make_problem(&win, &pw);
        make_problem(&dense, &pd);
        for (int var = 0; var < NVARIANTS; var++) {
            tensors t, tl;
            make_inputs(&pw, 300 + c, variant_dtype[var], &t);
            last_keys(&pw, &t, keys, &tl);
            outputs a = run_ok(win.name, var, &pw, &t), b = run_ok(win.name, var, &pd, &tl);
            /* Same keys, same gemm shape: equal up to the last bit of the dtype. */
            double tol = 2.0 * unit_roundoff(var) * 4.0;
            for (size_t i = 0; i < attn_o_elems(&pw); i++)
                cr_assert(fabs(a.o[i] - b.o[i]) <= tol, "%s/%s: out[%zu] %.17g vs dense %.17g",
                          win.name, variant_names[var], i, a.o[i], b.o[i]);
            for (size_t i = 0; i < attn_lse_elems(&pw); i++)
                cr_assert(fabs(a.lse[i] - b.lse[i]) <= tol * (1 + fabs(b.lse[i])),
                          "%s/%s: lse[%zu] %.17g vs dense %.17g", win.name, variant_names[var],
                          i, a.lse[i], b.lse[i]);
            if (!bitwise_equal(&a, &b, &pw))
                cr_log_info("%s/%s: equal within tolerance, not bitwise", win.name,
                            variant_names[var]);
            free_outputs(&a);
            free_outputs(&b);
            free(tl.k);
            free(tl.v);
            free_inputs(&t);
        }
        attn_problem_free(&pw);
        attn_problem_free(&pd);
    }
}

/* Reverses the token axis of q, k and v (each (b, head) separately) and keeps the first
 * nk keys of the reversed order: reversed query i' = n-1-i, reversed key j' = n-1-j. */
static void reversed(const attn_problem *p, const tensors *t, int32_t nk, tensors *out)
{
    size_t n = (size_t)p->seq.lq, bq = (size_t)p->seq.batch * p->hq;
    size_t bk = (size_t)p->seq.batch * p->hkv;
    out->q = malloc(bq * n * p->d * sizeof(float) + 1);
    out->k = malloc(bk * nk * p->d * sizeof(float) + 1);
    out->v = malloc(bk * nk * p->dv * sizeof(float) + 1);
    cr_assert(out->q && out->k && out->v, "out of memory");
    for (size_t bh = 0; bh < bq; bh++)
        for (size_t i = 0; i < n; i++)
            memcpy(out->q + (bh * n + i) * p->d, t->q + (bh * n + n - 1 - i) * p->d,
                   p->d * sizeof(float));
    for (size_t bh = 0; bh < bk; bh++)
        for (size_t j = 0; j < (size_t)nk; j++) {
            memcpy(out->k + (bh * nk + j) * p->d, t->k + (bh * n + n - 1 - j) * p->d,
                   p->d * sizeof(float));
            memcpy(out->v + (bh * nk + j) * p->dv, t->v + (bh * n + n - 1 - j) * p->dv,
                   p->dv * sizeof(float));
        }
}

/* The first nk keys of every (b, kv head). */
static void first_keys(const attn_problem *p, const tensors *t, int32_t nk, tensors *out)
{
    size_t n = (size_t)p->seq.lk, bk = (size_t)p->seq.batch * p->hkv;
    out->q = t->q;
    out->k = malloc(bk * nk * p->d * sizeof(float) + 1);
    out->v = malloc(bk * nk * p->dv * sizeof(float) + 1);
    cr_assert(out->k && out->v, "out of memory");
    for (size_t bh = 0; bh < bk; bh++) {
        memcpy(out->k + bh * nk * p->d, t->k + bh * n * p->d, (size_t)nk * p->d * sizeof(float));
        memcpy(out->v + bh * nk * p->dv, t->v + bh * n * p->dv,
               (size_t)nk * p->dv * sizeof(float));
    }
}

/* Adds part (o2, l2) into the running merge (o, l): l = logaddexp, o weighted by exp(l - L). */
static void merge_into(double *o, double *l, const double *o2, const double *l2, size_t rows,
                       int32_t dv, int reverse_rows, size_t n)
{
    for (size_t r = 0; r < rows; r++) {
        size_t r2 = reverse_rows ? (r / n) * n + (n - 1 - r % n) : r;
        double a = l[r], b = l2[r2], m = fmax(a, b);
        if (m == -INFINITY)
            continue; /* both empty so far */
        double lse = m + log(exp(a - m) + exp(b - m));
        for (int32_t x = 0; x < dv; x++)
            o[r * dv + x] = o[r * dv + x] * exp(a - lse) + o2[r2 * dv + x] * exp(b - lse);
        l[r] = lse;
    }
}

/*
 * Dense attention over n keys split into disjoint masks, built from mask_params by moving
 * data (bottom-right alignment does the rest), n = Lq = Lk:
 *   window W (bidirectional):  |p - j| < W
 *   below: causal over the first n - W keys: query i sits at i - W, so j <= i - W
 *   above: the same on the reversed axis: j' <= i' - W, i.e. j >= i + W
 * W = 1 with "causal" for the first part is the plain causal / strict-upper split.
 */
Test(ref_merge, a_mask_and_its_complement_merged_through_lse_equal_their_union)
{
    static const struct { const char *name; int32_t n, w, first_causal; } cases[] = {
        {.name = "causal + strictly-above", .n = 24, .w = 1, .first_causal = 1},
        {.name = "window 5 + below + above", .n = 24, .w = 5, .first_causal = 0},
        {.name = "window 40 over 3 panels", .n = 300, .w = 40, .first_causal = 0},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int32_t n = cases[c].n, w = cases[c].w;
        ref_case whole = {.name = cases[c].name, .batch = 2, .hq = 4, .hkv = 2, .lq = n,
                          .lk = n, .d = 8, .dv = 6};
        ref_case part = whole, rest = whole;
        if (cases[c].first_causal)
            part.causal = 1;
        else
            part.window = w;
        rest.lk = n - w;
        rest.causal = 1;
        attn_problem pwhole, ppart, prest;
        make_problem(&whole, &pwhole);
        make_problem(&part, &ppart);
        make_problem(&rest, &prest);
        for (int var = V_F64; var <= V_F32; var++) {
            tensors t, below, above;
            make_inputs(&pwhole, 400 + c, FC_F32, &t);
            first_keys(&pwhole, &t, n - w, &below);
            reversed(&pwhole, &t, n - w, &above);
            outputs u = run_ok(whole.name, var, &pwhole, &t);
            outputs m = run_ok(whole.name, var, &ppart, &t);
            outputs ra = run_ok(whole.name, var, &prest, &above);
            size_t rows = attn_lse_elems(&pwhole);
            merge_into(m.o, m.lse, ra.o, ra.lse, rows, whole.dv, 1, (size_t)n);
            if (!cases[c].first_causal) {
                outputs rb = run_ok(whole.name, var, &prest, &below);
                merge_into(m.o, m.lse, rb.o, rb.lse, rows, whole.dv, 0, (size_t)n);
                free_outputs(&rb);
            }
            double tol = var == V_F64 ? 1e-13 : 1e-5;
            for (size_t i = 0; i < attn_o_elems(&pwhole); i++)
                cr_assert(fabs(m.o[i] - u.o[i]) <= tol,
                          "%s/%s: merged out[%zu] %.17g, union %.17g",
                          whole.name, variant_names[var], i, m.o[i], u.o[i]);
            for (size_t i = 0; i < rows; i++)
                cr_assert(fabs(m.lse[i] - u.lse[i]) <= tol * (1 + fabs(u.lse[i])),
                          "%s/%s: merged lse[%zu] %.17g, union %.17g", whole.name,
                          variant_names[var], i, m.lse[i], u.lse[i]);
            free_outputs(&u);
            free_outputs(&m);
            free_outputs(&ra);
            free(below.k);
            free(below.v);
            free(above.q);
            free(above.k);
            free(above.v);
            free_inputs(&t);
        }
        attn_problem_free(&pwhole);
        attn_problem_free(&ppart);
        attn_problem_free(&prest);
    }
}

/* ---- NaN propagation ---- */

/* Causal, Lq = 24, Lk = 20, one panel: row i sits at position i - 4 and sees keys
 * 0..i-4, so rows 0..3 see nothing. Key 7 is seen by rows 11..23 and not by rows 0..10,
 * which share its panel (and so its gemm). */
static const ref_case nan_case = {.name = "causal 24x20", .batch = 1, .hq = 2, .hkv = 1,
                                  .lq = 24, .lk = 20, .d = 8, .dv = 4, .causal = 1};
#define NAN_KEY 7
#define NAN_FIRST_SEEING_ROW 11
#define NAN_EMPTY_ROWS 4

Test(ref_nan, nan_in_a_visible_value_reaches_only_the_rows_and_column_that_use_it)
{
    const int32_t key = NAN_KEY, col = 2;
    attn_problem p;
    make_problem(&nan_case, &p);
    for (int var = 0; var < NVARIANTS; var++) {
        tensors t;
        make_inputs(&p, 500, variant_dtype[var], &t);
        t.v[key * p.dv + col] = NAN;
        outputs r = run_ok(nan_case.name, var, &p, &t);
        for (int32_t h = 0; h < p.hq; h++)
            for (int32_t i = 0; i < p.seq.lq; i++)
                for (int32_t x = 0; x < p.dv; x++) {
                    double o = r.o[((size_t)h * p.seq.lq + i) * p.dv + x];
                    int want_nan = i >= NAN_FIRST_SEEING_ROW && x == col;
                    if (i < NAN_EMPTY_ROWS) /* empty rows stay exactly 0 */
                        cr_assert(o == 0.0, "%s/%s: empty row %d col %d = %g", nan_case.name,
                                  variant_names[var], (int)i, (int)x, o);
                    cr_assert((isnan(o) != 0) == want_nan, "%s/%s: head %d row %d col %d = %g (%s)",
                              nan_case.name, variant_names[var], (int)h, (int)i, (int)x, o,
                              want_nan ? "sees the NaN, must be NaN" : "must stay finite");
                }
        free_outputs(&r);
        free_inputs(&t);
    }
    drop_problem(&p);
}

Test(ref_nan, nan_in_a_visible_query_or_key_fills_the_rows_that_use_it)
{
    /* q: row 6 sees keys 0..2 and must turn NaN; row 1 sees nothing and stays empty. */
    const int32_t key = NAN_KEY, qrow = 6, qrow_empty = 1;
    attn_problem p;
    make_problem(&nan_case, &p);
    for (int var = 0; var < NVARIANTS; var++) {
        for (int in_key = 0; in_key < 2; in_key++) {
            tensors t;
            make_inputs(&p, 600, variant_dtype[var], &t);
            if (in_key)
                t.k[key * p.d + 1] = NAN; /* the only kv head */
            else
                t.q[qrow * p.d + 1] = t.q[qrow_empty * p.d + 1] = NAN; /* head 0 only */
            outputs r = run_ok(nan_case.name, var, &p, &t);
            for (int32_t h = 0; h < p.hq; h++)
                for (int32_t i = 0; i < p.seq.lq; i++) {
                    size_t row = (size_t)h * p.seq.lq + i;
                    int want_nan = in_key ? i >= NAN_FIRST_SEEING_ROW : (h == 0 && i == qrow);
                    if (i < NAN_EMPTY_ROWS)
                        cr_assert(r.lse[row] == -INFINITY, "%s/%s: empty row %d lse %g",
                                  nan_case.name, variant_names[var], (int)i, r.lse[row]);
                    cr_assert((isnan(r.lse[row]) != 0) == want_nan,
                              "%s/%s (NaN in %s): head %d row %d lse %g",
                              nan_case.name, variant_names[var], in_key ? "k" : "q", (int)h,
                              (int)i, r.lse[row]);
                    for (int32_t x = 0; x < p.dv; x++)
                        cr_assert((isnan(r.o[row * p.dv + x]) != 0) == want_nan,
                                  "%s/%s (NaN in %s): head %d row %d col %d = %g", nan_case.name,
                                  variant_names[var], in_key ? "k" : "q", (int)h, (int)i, (int)x,
                                  r.o[row * p.dv + x]);
                }
            free_outputs(&r);
            free_inputs(&t);
        }
    }
    drop_problem(&p);
}

/* ---- bad input ---- */

typedef enum bad_kind { BAD_NULL_PROBLEM, BAD_NULL_Q, BAD_NULL_OUT, BAD_GQA, BAD_NAN_SCALE,
                        BAD_INF_SCALE, BAD_LENGTHS, BAD_NEG_WINDOW, BAD_CU_ORDER } bad_kind;

Test(ref_bad_input, each_bad_input_gives_einval_and_a_message_never_a_crash)
{
    static const struct { const char *name; bad_kind kind; } cases[] = {
        {.name = "NULL problem", .kind = BAD_NULL_PROBLEM},
        {.name = "NULL q", .kind = BAD_NULL_Q},
        {.name = "NULL out", .kind = BAD_NULL_OUT},
        {.name = "Hq % Hkv != 0", .kind = BAD_GQA},
        {.name = "NaN scale", .kind = BAD_NAN_SCALE},
        {.name = "infinite scale", .kind = BAD_INF_SCALE},
        {.name = "Lq disagrees with cu_seqlens", .kind = BAD_LENGTHS},
        {.name = "negative window", .kind = BAD_NEG_WINDOW},
        {.name = "cu_seqlens_k decreasing in the middle", .kind = BAD_CU_ORDER},
    };
    ref_case good = {.name = "good", .batch = 1, .hq = 6, .hkv = 2, .lq = 4, .lk = 4, .d = 4,
                     .dv = 4};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        attn_problem p;
        make_problem(&good, &p);
        tensors t;
        make_inputs(&p, 700, FC_F32, &t);
        float o32[6 * 4 * 4], l32[6 * 4];
        double o64[6 * 4 * 4], l64[6 * 4];
        const float *q = t.q;
        int null_out = 0;
        const attn_problem *pp = &p;
        switch (cases[c].kind) {
        case BAD_NULL_PROBLEM: pp = NULL; break;
        case BAD_NULL_Q: q = NULL; break;
        case BAD_NULL_OUT: null_out = 1; break;
        case BAD_GQA: p.hkv = 4; break;
        case BAD_NAN_SCALE: p.scale = NAN; break;
        case BAD_INF_SCALE: p.scale = INFINITY; break;
        case BAD_LENGTHS: p.seq.lq = 3; break;
        case BAD_NEG_WINDOW: p.mask.sliding_window = -1; break;
        case BAD_CU_ORDER: /* two sequences, keys {0, 9, 4}: the first would run past Lk */
            drop_problem(&p);
            make_problem(&(ref_case){.name = "packed", .hq = 6, .hkv = 2, .d = 4, .dv = 4,
                                     .nseq = 2, .cu_q = {0, 2, 4}, .cu_k = {0, 2, 4}},
                         &p);
            p.seq.cu_k[1] = 9;
            break;
        }
        for (int var = 0; var < NVARIANTS; var++) {
            fc_err err = {{0}};
            fc_status st;
            if (var == V_F64)
                st = ref_attention_f64(pp, q, t.k, t.v, null_out ? NULL : o64, l64, &err);
            else
                st = ref_attention_lp(pp, variant_dtype[var], q, t.k, t.v,
                                      null_out ? NULL : o32, l32, &err);
            cr_assert_eq(st, FC_EINVAL, "%s/%s: status %d, want FC_EINVAL", cases[c].name,
                         variant_names[var], (int)st);
            cr_assert(err.msg[0] != '\0', "%s/%s: no message", cases[c].name,
                      variant_names[var]);
        }
        fc_err err = {{0}};
        cr_assert_eq(ref_attention_f32(pp, q, t.k, t.v, null_out ? NULL : o32, NULL, &err),
                     FC_EINVAL, "%s/f32 entry point", cases[c].name);
        free_inputs(&t);
        drop_problem(&p);
    }
    /* An unknown dtype for the baseline. */
    attn_problem p;
    make_problem(&good, &p);
    tensors t;
    make_inputs(&p, 701, FC_F32, &t);
    float o32[6 * 4 * 4];
    fc_err err = {{0}};
    cr_assert_eq(ref_attention_lp(&p, (fc_dtype)7, t.q, t.k, t.v, o32, NULL, &err), FC_EINVAL,
                 "unknown dtype: want FC_EINVAL");
    cr_assert(err.msg[0] != '\0', "unknown dtype: no message");
    free_inputs(&t);
    drop_problem(&p);
}

/* ---- the baseline's error, and thread-count independence ---- */

/* Standard-normal inputs, causal, D = 64, L = 1024: the baseline's worst error against the
 * oracle should sit near 1e-3 (fp16) and 1e-2 (bf16). A broad band: a baseline that skips
 * a rounding point comes out far below it, one that rounds too coarsely far above. */
Test(ref_baseline, lowp_error_at_l1024_d64_causal_sits_in_the_expected_band)
{
    static const struct { const char *name; fc_dtype dt; double lo, hi; } cases[] = {
        {.name = "float16", .dt = FC_F16, .lo = 1e-4, .hi = 1e-2},
        {.name = "bfloat16", .dt = FC_BF16, .lo = 1e-3, .hi = 1e-1},
    };
    ref_case rc = {.name = "L1024 D64 causal", .batch = 1, .hq = 1, .hkv = 1, .lq = 1024,
                   .lk = 1024, .d = 64, .dv = 64, .causal = 1};
    attn_problem p;
    make_problem(&rc, &p);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        tensors t;
        make_inputs(&p, 800, cases[c].dt, &t);
        outputs gold = run_ok(rc.name, V_F64, &p, &t);
        outputs lp = run_ok(rc.name, cases[c].dt == FC_F16 ? V_F16 : V_BF16, &p, &t);
        double emax = 0, esum = 0;
        size_t n = attn_o_elems(&p);
        for (size_t i = 0; i < n; i++) {
            double e = fabs(lp.o[i] - gold.o[i]);
            emax = e > emax || isnan(e) ? e : emax;
            esum += e;
        }
        cr_log_info("%s %s: e_lp_max = %.3g, e_lp_mean = %.3g", rc.name, cases[c].name, emax,
                    esum / (double)n);
        fprintf(stderr, "baseline %s %s: e_lp_max = %.3g, e_lp_mean = %.3g\n", rc.name,
                cases[c].name, emax, esum / (double)n);
        cr_assert(emax >= cases[c].lo && emax <= cases[c].hi,
                  "%s %s: e_lp_max = %g outside [%g, %g]", rc.name, cases[c].name, emax,
                  cases[c].lo, cases[c].hi);
        free_outputs(&gold);
        free_outputs(&lp);
        free_inputs(&t);
    }
    drop_problem(&p);
}

/* OpenBLAS 0.3.21's own sgemm is not bitwise invariant under its thread count (measured: a
 * 128x512x64 product differs in most elements between 1 and 4 threads). The reference
 * therefore runs BLAS single-threaded and spreads whole panels over its own workers, as
 * many as OpenBLAS was set to use: 1 and 4 must give the same bits. The case is large
 * enough (4 panels, 2^26 multiply-adds) that 4 workers really run. */
Test(ref_threads, results_do_not_depend_on_the_thread_count)
{
    ref_case rc = {.name = "L512 D64 causal window 200", .batch = 1, .hq = 2, .hkv = 1,
                   .lq = 512, .lk = 512, .d = 64, .dv = 64, .causal = 1, .window = 200};
    attn_problem p;
    make_problem(&rc, &p);
    int saved = openblas_get_num_threads();
    for (int var = 0; var < NVARIANTS; var++) {
        tensors t;
        make_inputs(&p, 900, variant_dtype[var], &t);
        openblas_set_num_threads(1);
        outputs one = run_ok(rc.name, var, &p, &t);
        openblas_set_num_threads(4);
        outputs four = run_ok(rc.name, var, &p, &t);
        cr_assert_eq(openblas_get_num_threads(), 4, "%s/%s: the caller's thread count was not "
                     "restored", rc.name, variant_names[var]);
        openblas_set_num_threads(saved);
        cr_assert(bitwise_equal(&one, &four, &p), "%s/%s: 1 and 4 threads differ", rc.name,
                  variant_names[var]);
        free_outputs(&one);
        free_outputs(&four);
        free_inputs(&t);
    }
    drop_problem(&p);
}

/* The same, with calls from several threads at once (the gate's --jobs): the thread count
 * OpenBLAS is set to is process-wide, so one call must never see another's temporary setting
 * (with OpenBLAS at 4 threads, a call that read 1 while another ran, or ran its sgemm after
 * another restored 4, gave different bits: reports of --jobs 2 differed in one run of eight).
 * Four threads, each computing the float32 variant six times, must all give the single-threaded
 * bits. */
typedef struct conc_job {
    const attn_problem *p;
    const tensors *t;
    const outputs *want;
    int mismatches, failures;
} conc_job;

static void *conc_main(void *arg)
{
    conc_job *j = arg;
    for (int rep = 0; rep < 6; rep++) {
        outputs r = {malloc((attn_o_elems(j->p) + 1) * sizeof(double)),
                     malloc((attn_lse_elems(j->p) + 1) * sizeof(double))};
        fc_err err;
        if (!r.o || !r.lse || run_variant(V_F32, j->p, j->t, r.o, r.lse, &err))
            j->failures++;
        else
            j->mismatches += !bitwise_equal(&r, j->want, j->p);
        free_outputs(&r);
    }
    return NULL;
}

Test(ref_threads, concurrent_calls_give_the_single_threaded_bits)
{
    ref_case rc = {.name = "L512 D64 causal window 200", .batch = 1, .hq = 2, .hkv = 1,
                   .lq = 512, .lk = 512, .d = 64, .dv = 64, .causal = 1, .window = 200};
    attn_problem p;
    make_problem(&rc, &p);
    tensors t;
    make_inputs(&p, 901, FC_F32, &t);
    int saved = openblas_get_num_threads();
    openblas_set_num_threads(1);
    outputs want = run_ok(rc.name, V_F32, &p, &t);
    openblas_set_num_threads(4);
    conc_job jobs[4];
    pthread_t tid[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (conc_job){.p = &p, .t = &t, .want = &want};
        cr_assert_eq(pthread_create(&tid[i], NULL, conc_main, &jobs[i]), 0);
    }
    int mismatches = 0, failures = 0;
    for (int i = 0; i < 4; i++) {
        pthread_join(tid[i], NULL);
        mismatches += jobs[i].mismatches;
        failures += jobs[i].failures;
    }
    int after = openblas_get_num_threads();
    openblas_set_num_threads(saved);
    cr_expect_eq(failures, 0, "reference calls failed");
    cr_expect_eq(mismatches, 0, "%d of 24 concurrent calls differ from the single-threaded bits",
                 mismatches);
    cr_expect_eq(after, 4, "the caller's thread count was not restored (%d)", after);
    free_outputs(&want);
    free_inputs(&t);
    drop_problem(&p);
}

/* Long steps report progress through the sink a command installs (base/progress.h): with an
 * interval of 0 every panel of the oracle reports, fractions rising to 1; the slow block-mask
 * builder reports per query tile. Without a sink nothing is called. */
typedef struct prog_log {
    int calls;
    double fractions[64];
    char what[64];
} prog_log;

static void log_progress(void *ctx, const char *what, double fraction, double seconds)
{
    prog_log *l = ctx;
    if (l->calls < 64)
        l->fractions[l->calls] = fraction;
    l->calls++;
    snprintf(l->what, sizeof l->what, "%s", what);
    (void)seconds;
}

Test(ref_progress, long_steps_report_through_the_installed_sink)
{
    ref_case rc = {.name = "L512", .batch = 1, .hq = 2, .hkv = 1, .lq = 512, .lk = 256,
                   .d = 16, .dv = 16, .causal = 1};
    attn_problem p;
    make_problem(&rc, &p);
    tensors t;
    make_inputs(&p, 902, FC_F32, &t);
    int saved = openblas_get_num_threads();
    openblas_set_num_threads(1); /* one worker: it reports every panel */
    prog_log log = {0};
    fc_progress_set(log_progress, &log, 0);
    outputs o = run_ok(rc.name, V_F64, &p, &t);
    cr_expect_eq(log.calls, 4, "512 rows are 4 panels of 128: %d reports", log.calls);
    for (int i = 0; i < 4 && i < log.calls; i++)
        cr_expect(log.fractions[i] == (i + 1) / 4.0, "report %d: %g", i, log.fractions[i]);
    cr_expect_str_eq(log.what, "reference");
    bmask bm;
    fc_err err;
    log = (prog_log){0};
    cr_assert_eq(bmask_build_slow(&bm, p.mask, &p.seq, 64, 64, &err), FC_OK, "%s", err.msg);
    cr_expect_eq(log.calls, 8, "512 rows are 8 query tiles of 64: %d reports", log.calls);
    cr_expect_str_eq(log.what, "slow block-mask builder");
    bmask_free(&bm);
    fc_progress_set(NULL, NULL, 0);
    log = (prog_log){0};
    free_outputs(&o);
    o = run_ok(rc.name, V_F64, &p, &t);
    cr_expect_eq(log.calls, 0, "reports without a sink");
    openblas_set_num_threads(saved);
    free_outputs(&o);
    free_inputs(&t);
    drop_problem(&p);
}
