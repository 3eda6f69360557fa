/*
 * api_internal.h - what the public API's files (api/flexcheck.c, api/api_xterms.c,
 * api/api_bmask.c, api/api_paged.c, api/api_param.c) share: the problem handle behind
 * include/flexcheck.h's opaque flexcheck_problem, and the message helpers every call returns
 * through. Not installed, not part of the API.
 */
#ifndef FLEXCHECK_API_INTERNAL_H
#define FLEXCHECK_API_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "base/fc.h"
#include "include/flexcheck.h"
#include "masks/bmask.h"
#include "masks/mask.h"
#include "diag/diag.h"
#include "fixtures/fix.h"

#define EXPORT __attribute__((visibility("default")))

struct flexcheck_problem {
    int shaped;
    int32_t b, hq, hkv, lq, lk, d, dv;
    fc_dtype dtype;
    fc_dtype out_dtype, lse_dtype; /* how the producer stored them (FC_F32: float32 or finer) */
    mask_params mask;
    double scale, softcap;
    float *sinks;
    size_t nsinks;
    int32_t *cu_q, *cu_k;
    size_t ncu;
    uint64_t max_memory, max_work; /* the budget (flexcheck_problem_set_budget); 0: defaults */
    int32_t rows;                  /* flexcheck_problem_set_rows: 0 every row, -1 auto, n */
    uint64_t rows_seed;
    int interrupt; /* set by flexcheck_problem_interrupt from any thread: atomics only */
    /* The explicit mask, bit-packed (masks/xterms.h), and bias (API version 4), owned, with the
     * dims [Bm, Hm, Lq, Lk] they were given for; NULL: none. */
    uint8_t *xbits;
    int32_t xmask_dims[4];
    float *xbias;
    int32_t xbias_dims[4];
    /* A producer's block mask (API version 5), owned, rectangular (bmask_alloc's), validated
     * when set; has_bm 0: none. Its lengths and leading dims are held to the shape when judged
     * (api_bmask_fits). */
    int has_bm;
    bmask bm;
    /* The paged cache (API version 6), owned; pg.k_cache NULL: none. */
    fix_paged pg;
    char err[sizeof(((fc_err *)0)->msg)];
};

/* The call's message into p->err (returns st), and the empty message of a call that succeeded
 * (returns FLEXCHECK_OK). */
flexcheck_status api_fail(flexcheck_problem *p, flexcheck_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
flexcheck_status api_ok(flexcheck_problem *p);
/* FLEXCHECK_OK when p has no block mask or it fits p's shape now (a shape set after it may not);
 * else the refusal, in p's message. Its bytes, for the budget, in *bytes (0 without one). */
flexcheck_status api_bmask_fits(flexcheck_problem *p, uint64_t *bytes);
/* With a paged cache set: checks that k and v are what p's table gathers from it for problem
 * a (p's message names the first difference or bad entry otherwise) and fills *view; without
 * one *on = 0. api_paged.c. */
flexcheck_status api_paged_view(flexcheck_problem *p, const attn_problem *a, const float *k,
                                const float *v, diag_paged *view, int *on);
/* FLEXCHECK_OK, or why p cannot be used: FLEXCHECK_EINVAL for p NULL; FLEXCHECK_EUNSUP (in
 * p's message) on a CPU without an instruction-set extension this build was compiled to use
 * (base/cpu.h), so that such a CPU is an error from the first call, never an illegal
 * instruction. Every call on a handle that returns a status begins with API_ENTER, but the
 * interrupt (which must leave p's message alone). */
flexcheck_status api_enter(flexcheck_problem *p);
#define API_ENTER(p)                                                                             \
    do {                                                                                         \
        flexcheck_status api_st_ = api_enter(p);                                                 \
        if (api_st_)                                                                             \
            return api_st_;                                                                      \
    } while (0)
/* The short names the API's files use. */
#define fail(...) api_fail(__VA_ARGS__)
#define ok(p) api_ok(p)

#endif
