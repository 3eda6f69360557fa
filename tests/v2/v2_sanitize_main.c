/*
 * v2_sanitize_main.c - kernel versions 2 and 3 under the emu's sanitizer builds: a few small
 * shapes (every dtype, 16x16 to 128x128 blocks, packed, GQA, paged K/V, soft-cap and sinks, an
 * explicit mask and bias; kernel 3's 128-row tiles with 32- and 64-key tiles, unmasked ones
 * among them) run through gpu_attention with
 * gpu/attn_launch.cu compiled with ASan/UBSan (build/emu-asan/v2-sanitize) or with the race
 * checker (build/emu-race/v2-sanitize), each judged by the tolerance gates. Any report from a
 * sanitizer stops the run; exit 0 only if every case passes. tests/module.mk: make v2-sanitize.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "masks/bmask.h"
#include "fixtures/fix.h"
#include "gpu/gpu.h"
#include "ref/ref.h"
#include "reports/tol.h"

typedef struct san_case {
    const char *name;
    fc_dtype dt;
    int32_t hq, hkv, lq, lk, d, causal, window, chunk, qb, kb, nseq;
    int32_t cu_q[4], cu_k[4];
    int paged;
    double softcap; /* score terms (masks/terms.h) */
    int sinks;
    int xterms; /* 1: a drawn explicit mask and bias per head (masks/xterms.h) */
} san_case;

static const san_case cases[] = {
    {"f16 causal window 16x16 packed", FC_F16, 2, 1, 70, 90, 64, 1, 20, 0, 16, 16, 3, {0, 20, 20, 70}, {0, 30, 40, 90}, 0, 0, 0, 0},
    {"bf16 d128 causal 64x64 paged", FC_BF16, 2, 2, 80, 100, 128, 1, 0, 0, 64, 64, 0, {0}, {0}, 1, 0, 0, 0},
    {"f32 chunk 32x16 paged", FC_F32, 1, 1, 50, 60, 32, 0, 0, 16, 32, 16, 0, {0}, {0}, 1, 0, 0, 0},
    {"f16 d96 dense 128x128 Lq<Lk", FC_F16, 1, 1, 20, 150, 96, 0, 0, 0, 128, 128, 0, {0}, {0}, 0, 0, 0, 0},
    {"bf16 d256 window 16x16 paged", FC_BF16, 1, 1, 40, 50, 256, 1, 9, 0, 16, 16, 0, {0}, {0}, 1, 0, 0, 0},
    {"f16 softcap sinks packed 16x16 paged", FC_F16, 2, 1, 70, 90, 64, 1, 20, 0, 16, 16, 3, {0, 20, 20, 70}, {0, 30, 40, 90}, 1, 30, 1, 0},
    {"f32 softcap sinks empty rows 64x64", FC_F32, 2, 2, 90, 40, 64, 1, 0, 0, 64, 64, 0, {0}, {0}, 0, 50, 1, 0},
    /* Lk = 90: each mask row ends 2 bits into its twelfth byte */
    {"f16 xmask bias softcap packed 16x16 paged", FC_F16, 2, 1, 70, 90, 64, 1, 0, 0, 16, 16, 3, {0, 20, 20, 70}, {0, 30, 40, 90}, 1, 30, 0, 1},
    {"f32 xmask bias sinks 32x16", FC_F32, 2, 1, 50, 90, 32, 0, 0, 0, 32, 16, 0, {0}, {0}, 0, 0, 1, 1},
    {"f16 d128 dense 128x128 paged", FC_F16, 1, 1, 150, 200, 128, 0, 0, 0, 128, 128, 0, {0}, {0}, 1, 0, 0, 0},
    {"bf16 d64 causal softcap 128x64", FC_BF16, 2, 1, 140, 140, 64, 1, 0, 0, 128, 64, 0, {0}, {0}, 0, 30, 0, 0},
};

/* A drawn explicit mask (each pair with probability 3/4) and bias in [-2, 2), [1, hq, Lq, Lk],
 * into gp; the caller frees *bits and *bias after fix_gen_case copied them. */
static void draw_xterms(const san_case *t, fix_gen_params *gp, uint8_t **bits, float **bias)
{
    const size_t rows = (size_t)t->hq * (size_t)t->lq, n = rows * (size_t)t->lk;
    uint8_t *dense = malloc(n + 1);
    *bits = malloc(rows * (size_t)xmask_row_bytes(t->lk) + 1);
    *bias = malloc(n * sizeof(float) + 1);
    uint64_t x = 0x5eedu;
    for (size_t i = 0; i < n; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull; /* Knuth's LCG */
        dense[i] = (x >> 62) != 0;
        (*bias)[i] = (float)((double)(x >> 40) * 0x1p-22 - 2.0);
    }
    attn_xmask_pack(dense, rows, t->lk, *bits);
    free(dense);
    gp->xmask = (attn_xmask){*bits, 1, t->hq, t->lq, t->lk};
    gp->xbias = (attn_xbias){*bias, 1, t->hq, t->lq, t->lk};
}

static int run_case(const san_case *t, int kernel)
{
    fix_gen_params gp = {.name = t->name, .dtype = t->dt, .b = 1, .hq = t->hq, .hkv = t->hkv,
                         .lq = t->lq, .lk = t->lk, .d = t->d, .dv = t->d,
                         .mask = {t->causal, t->window, t->chunk, 0}, .qb = t->qb, .kb = t->kb,
                         .nseq = t->nseq, .seed = 99, .softcap = t->softcap,
                         .sinks = t->sinks, .sinks_seed = 7};
    memcpy(gp.cu_q, t->cu_q, sizeof t->cu_q);
    memcpy(gp.cu_k, t->cu_k, sizeof t->cu_k);
    uint8_t *bits = NULL;
    float *bias = NULL;
    if (t->xterms)
        draw_xterms(t, &gp, &bits, &bias);
    fix_case fc;
    bmask bm;
    fc_err err;
    int ok = 0;
    fc_status st = fix_gen_case(&gp, &fc, &err);
    free(bits); /* the case holds its own copies */
    free(bias);
    if (st) {
        fprintf(stderr, "%s: %s\n", t->name, err.msg);
        return 0;
    }
    /* the slow builder reads the explicit mask; direct, the families' fast one, refuses it */
    if (bmask_build_x(&bm, t->xterms ? BMASK_SLOW : BMASK_DIRECT, fc.prob.mask, &fc.prob.seq,
                      fc.prob.xmask, t->qb, t->kb, &err)) {
        fprintf(stderr, "%s: %s\n", t->name, err.msg);
        fix_case_free(&fc);
        return 0;
    }
    const size_t no = attn_o_elems(&fc.prob), nl = attn_lse_elems(&fc.prob);
    float *o = malloc(sizeof(float) * (no + 1)), *lse = malloc(sizeof(float) * (nl + 1));
    float *olp = malloc(sizeof(float) * (no + 1));
    int32_t *pt = malloc(sizeof(int32_t) * ((size_t)bm.nkb + 1));
    for (int32_t i = 0; i < bm.nkb; i++)
        pt[i] = bm.nkb - 1 - i; /* reversed pages */
    gpu_call c = {.p = &fc.prob, .dtype = t->dt, .q = fc.q, .k = fc.k, .v = fc.v, .bm = &bm,
                  .kernel = kernel, .backend = GPU_BACKEND_EMU, .page_table = t->paged ? pt : NULL,
                  .num_pages = bm.nkb};
    gpu_result res;
    rep_verdict v;
    if (gpu_attention(&c, o, lse, &res, &err) ||
        ref_attention_lp(&fc.prob, t->dt, fc.q, fc.k, fc.v, olp, NULL, &err)) {
        fprintf(stderr, "kernel %d, %s: %s\n", kernel, t->name, err.msg);
        goto done;
    }
    rep_inputs in = {.dtype = t->dt, .rows = nl, .dv = (size_t)t->d, .o = o, .lse = lse,
                     .o_gold = fc.out, .lse_gold = fc.lse, .o_lp = olp,
                     .sentinels = res.sentinels_ok ? REP_SENTINELS_INTACT : REP_SENTINELS_DAMAGED,
                     .prob = &fc.prob};
    if (rep_evaluate(&in, &v, &err)) {
        fprintf(stderr, "%s: %s\n", t->name, err.msg);
        goto done;
    }
    ok = v.pass;
    printf("%-4s kernel %d %s (H1 ratio %.3f)%s%s\n", ok ? "ok" : "FAIL", kernel, t->name,
           v.h1_ratio, ok ? "" : ": ", ok ? "" : rep_verdict_reason(&v));
done:
    free(o);
    free(lse);
    free(olp);
    free(pt);
    bmask_free(&bm);
    fix_case_free(&fc);
    return ok;
}

/* v2-sanitize [K]: kernel K alone (2 or 3), both without an argument. */
int main(int argc, char **argv)
{
    int fails = 0, first = 2, last = 3;
    if (argc == 2 && (!strcmp(argv[1], "2") || !strcmp(argv[1], "3")))
        first = last = atoi(argv[1]);
    else if (argc != 1) {
        fprintf(stderr, "usage: %s [2|3]\n", argv[0]);
        return 2;
    }
    for (int kernel = first; kernel <= last; kernel++)
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
            fails += !run_case(&cases[i], kernel);
    return fails ? 1 : 0;
}
