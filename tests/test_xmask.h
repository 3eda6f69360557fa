/*
 * test_xmask.h - what the explicit-term suites (tests/test_xmask.c, tests/test_xmask_bits.c)
 * share: a case, its problem and inputs, a dense explicit mask [Bm, Hm, Lq, Lk] the test fills
 * and packs, a bias. Static helpers, one copy per suite (tests/test_lines.h's way).
 */
#ifndef FLEXCHECK_TEST_XMASK_H
#define FLEXCHECK_TEST_XMASK_H

#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "masks/problem.h"
#include "tests/test_rng.h"

/* ---- cases ---- */

typedef struct xcase {
    const char *name;
    int32_t batch, hq, hkv, lq, lk, d, dv;
    mask_params fam;  /* the families (section 2) */
    double softcap;
    int sinks;        /* 1: per-head sinks in [-3, 4] */
    int32_t nseq;     /* 0 dense; else packed with cu_q, cu_k */
    int32_t cu_q[5], cu_k[5];
} xcase;

/* A case's problem, inputs, and a dense explicit mask [bm, hm, lq, lk] (1 = allowed) and bias
 * the test fills; pack() puts the mask into the problem. */
typedef struct xrun {
    attn_problem p;
    float *q, *k, *v, *sinks;
    uint8_t *dense, *bits;
    float *bias;
} xrun;

static inline uint64_t rng(uint64_t *s)
{
    return rng_next(s);
}

static inline float unif(uint64_t *s) /* in [-1, 1) */
{
    return (float)((double)(rng(s) >> 11) * 0x1p-52 - 1.0);
}

static inline void setup(const xcase *c, uint64_t seed, xrun *r)
{
    fc_err err = {{0}};
    memset(r, 0, sizeof *r);
    fc_status st = c->nseq ? seq_init_packed(&r->p.seq, c->nseq, c->cu_q, c->cu_k, &err)
                           : seq_init_dense(&r->p.seq, c->batch, c->lq, c->lk, &err);
    cr_assert_eq(st, FC_OK, "%s: %s", c->name, err.msg);
    r->p.hq = c->hq;
    r->p.hkv = c->hkv;
    r->p.d = c->d;
    r->p.dv = c->dv;
    r->p.scale = 1.0 / sqrt((double)c->d);
    r->p.mask = c->fam;
    r->p.terms.softcap = c->softcap;
    size_t nq = attn_q_elems(&r->p), nk = attn_k_elems(&r->p), nv = attn_v_elems(&r->p);
    r->q = malloc(nq * sizeof(float) + 1);
    r->k = malloc(nk * sizeof(float) + 1);
    r->v = malloc(nv * sizeof(float) + 1);
    cr_assert(r->q && r->k && r->v);
    /* scores of a few units: the softmax is neither flat nor one-hot */
    for (size_t i = 0; i < nq; i++)
        r->q[i] = 2.0f * unif(&seed);
    for (size_t i = 0; i < nk; i++)
        r->k[i] = 2.0f * unif(&seed);
    for (size_t i = 0; i < nv; i++)
        r->v[i] = unif(&seed);
    if (c->sinks) {
        r->sinks = malloc((size_t)c->hq * sizeof(float));
        for (int32_t h = 0; h < c->hq; h++)
            r->sinks[h] = -3.0f + 7.0f * (float)h / (float)(c->hq > 1 ? c->hq - 1 : 1);
        r->p.terms.sinks = r->sinks;
    }
}

/* Allocates the dense mask [bm, hm, Lq, Lk], all allowed; the test sets its bits. */
static inline uint8_t *dense_mask(xrun *r, int32_t bm, int32_t hm)
{
    size_t n = (size_t)bm * hm * r->p.seq.lq * r->p.seq.lk;
    free(r->dense);
    r->dense = malloc(n + 1);
    cr_assert(r->dense);
    memset(r->dense, 1, n);
    r->p.xmask = (attn_xmask){NULL, bm, hm, r->p.seq.lq, r->p.seq.lk};
    return r->dense;
}

/* The dense mask into the problem, packed. */
static inline void pack(xrun *r)
{
    attn_xmask *m = &r->p.xmask;
    size_t rows = (size_t)m->bm * m->hm * m->lq;
    free(r->bits);
    r->bits = malloc(rows * (size_t)xmask_row_bytes(m->lk) + 1);
    cr_assert(r->bits);
    attn_xmask_pack(r->dense, rows, m->lk, r->bits);
    m->bits = r->bits;
}

static inline float *bias_of(xrun *r, int32_t bm, int32_t hm)
{
    size_t n = (size_t)bm * hm * r->p.seq.lq * r->p.seq.lk;
    free(r->bias);
    r->bias = calloc(n + 1, sizeof(float));
    cr_assert(r->bias);
    r->p.xbias = (attn_xbias){r->bias, bm, hm, r->p.seq.lq, r->p.seq.lk};
    return r->bias;
}

static inline void drop(xrun *r)
{
    attn_problem_free(&r->p);
    free(r->q);
    free(r->k);
    free(r->v);
    free(r->sinks);
    free(r->dense);
    free(r->bits);
    free(r->bias);
}

/* Index of (b, h, tq, tk) in a [bm, hm, lq, lk] term. */
static inline size_t at(int32_t bm, int32_t hm, int32_t lq, int32_t lk, int32_t b, int32_t h,
                        int32_t q, int32_t k)
{
    return (((size_t)(bm > 1 ? b : 0) * hm + (hm > 1 ? h : 0)) * lq + q) * lk + k;
}

#endif
