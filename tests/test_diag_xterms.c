/*
 * test_diag_xterms.c - the diagnosis (diag/diag.h) of outputs of cases with an explicit mask
 * and bias (masks/xterms.h, docs/semantics.md section 8): for each hypothesis of the explicit
 * terms, a case whose output under test was computed with that bug everywhere, and the
 * diagnosis must name it as the cause of every failing row; a correct output has no failing row;
 * a family's hypothesis is still named under an explicit mask; a mask hypothesis that computes
 * a family hypothesis's rows is one finding titled with both (the tie rule); a producer's block
 * mask that leaks the explicit mask's holes (the families' own list) or drops a tile of the
 * exact one is named as given, its title's counts those of a brute-force tile count written
 * here against the families AND the explicit mask.
 *
 *   make build/tests/test_diag_xterms && OPENBLAS_NUM_THREADS=1 build/tests/test_diag_xterms
 *   (DIAG_TEST_PRINT=1 prints every report the tests make)
 *
 * The buggy outputs come from a brute-force softmax written here, the predicate and the score
 * spelled out from docs/semantics.md sections 2 and 8 (families on bottom-right positions, the
 * mask read from a byte per pair, the bias after the soft-cap) with the bug's one change, never
 * from diag's or ref's row functions; rounded to the case's dtype as a kernel stores them. The
 * correct output is the same-precision baseline, the truth ref_attention_f64 (which the
 * brute-force oracle of tests/test_xmask.c holds).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/lowp.h"
#include "diag/diag.h"
#include "diag/diag_internal.h"
#include "fixtures/fix.h"
#include "judge/judge.h"
#include "ref/ref.h"
#include "tests/test_spec_mask.h"

/* ---- a case with explicit terms -------------------------------------------------------- */

enum { XM_NONE, XM_PREFIX, XM_RANDOM, XM_BAND };  /* the explicit mask */
enum { XB_NONE, XB_ALIBI, XB_RANDOM };            /* the explicit bias */

typedef struct xspec {
    fc_dtype dt;
    int32_t batch, hq, hkv, lq, lk, d;
    mask_params m;    /* the families */
    double scale;     /* 0: 1/sqrt(D) */
    double softcap;
    int xm;           /* XM_*: prefix-LM (k < arg or p_k <= p_q, one for all), random per batch
                       * entry and head (kept with probability 0.6, row 5 of (0, 1) empty), a
                       * causal band of arg keys on positions (one for all) */
    int32_t arg;
    int xb;           /* XB_*: ALiBi per head (-2^-(h+1) (p_q - p_k)), random in [-1, 1] */
    uint64_t seed;
    int32_t nseq, cu_q[4], cu_k[4]; /* packed (batch 1, Lq = cu_q[nseq]) when nseq > 0 */
} xspec;

typedef struct xcase {
    attn_problem p;
    fc_dtype dt;
    int32_t mbm, mhm, bbm, bhm; /* the terms' broadcast dims */
    uint8_t *mask;              /* [mbm, mhm, Lq, Lk], a byte a pair: what the test reads */
    uint8_t *bits;              /* the same, packed (what the problem reads) */
    float *bias;                /* [bbm, bhm, Lq, Lk] */
    float *q, *k, *v;
    double *o64, *lse64;
    judge_lp lp;
    float *o, *lse;
    judge_case jc;
    rep_verdict verdict;
} xcase;

static void *xalloc(size_t n)
{
    void *x = calloc(n + 1, 1);
    cr_assert(x, "out of memory");
    return x;
}

static size_t term_at(int32_t bm, int32_t hm, const attn_problem *p, int32_t b, int32_t h,
                      int32_t tq, int32_t tk)
{
    return (((size_t)(bm > 1 ? b : 0) * (size_t)hm + (size_t)(hm > 1 ? h : 0)) *
                (size_t)p->seq.lq + (size_t)tq) * (size_t)p->seq.lk + (size_t)tk;
}

/* Query token tq and key token tk: 1 and their positions (section 2: p_q = i + nk - nq) when
 * they are of one sequence, 0 otherwise. */
static int positions(const attn_problem *p, int32_t tq, int32_t tk, int64_t *pq, int64_t *pk)
{
    const seq_info *q = &p->seq;
    int32_t n = 0;
    while (n + 1 < q->nseq && q->cu_q[n + 1] <= tq)
        n++;
    int32_t nq = q->cu_q[n + 1] - q->cu_q[n], nk = q->cu_k[n + 1] - q->cu_k[n];
    *pq = (int64_t)tq - q->cu_q[n] + nk - nq;
    *pk = (int64_t)tk - q->cu_k[n];
    return *pk >= 0 && *pk < nk;
}

static void xcase_make(xcase *c, const xspec *s)
{
    fc_err err = {{0}};
    memset(c, 0, sizeof *c);
    c->dt = s->dt;
    fc_status st = s->nseq ? seq_init_packed(&c->p.seq, s->nseq, s->cu_q, s->cu_k, &err)
                           : seq_init_dense(&c->p.seq, s->batch, s->lq, s->lk, &err);
    cr_assert_eq(st, FC_OK, "%s", err.msg);
    int32_t lq = c->p.seq.lq, lk = c->p.seq.lk, batch = c->p.seq.batch;
    attn_problem *p = &c->p;
    p->hq = s->hq;
    p->hkv = s->hkv;
    p->d = p->dv = s->d;
    p->scale = s->scale > 0 ? s->scale : 1.0 / sqrt((double)s->d);
    p->mask = s->m;
    p->terms.softcap = s->softcap;
    fix_rng r;
    fix_rng_seed(&r, s->seed);
    if (s->xm != XM_NONE) {
        c->mbm = s->xm == XM_RANDOM ? batch : 1;
        c->mhm = s->xm == XM_RANDOM ? s->hq : 1;
        size_t n = (size_t)c->mbm * c->mhm * lq * lk;
        c->mask = xalloc(n);
        c->bits = xalloc(n / 8 + (size_t)c->mbm * c->mhm * lq);
        for (int32_t b = 0; b < c->mbm; b++)
            for (int32_t h = 0; h < c->mhm; h++)
                for (int32_t tq = 0; tq < lq; tq++)
                    for (int32_t tk = 0; tk < lk; tk++) {
                        int64_t pq, pk;
                        /* pairs of two sequences allowed: the families refuse them anyway */
                        int same = positions(p, tq, tk, &pq, &pk);
                        int on = !same                ? 1
                                 : s->xm == XM_PREFIX ? pk < s->arg || pk <= pq
                                 : s->xm == XM_BAND   ? pk <= pq && pq - pk < s->arg
                                                      : fix_rng_normal(&r) < 0.2533; /* 0.6 */
                        if (s->xm == XM_RANDOM && b == 0 && h == 1 && tq == 5)
                            on = 0;
                        size_t i = term_at(c->mbm, c->mhm, p, b, h, tq, tk);
                        c->mask[i] = (uint8_t)on;
                        size_t row = i / (size_t)lk, rb = (size_t)xmask_row_bytes(lk);
                        c->bits[row * rb + (size_t)tk / 8] |= (uint8_t)(on << (tk % 8));
                    }
        p->xmask = (attn_xmask){c->bits, c->mbm, c->mhm, lq, lk};
    }
    if (s->xb != XB_NONE) {
        c->bbm = 1;
        c->bhm = s->xb == XB_ALIBI ? s->hq : 1;
        c->bias = xalloc(sizeof(float) * (size_t)c->bhm * lq * lk);
        for (int32_t h = 0; h < c->bhm; h++)
            for (int32_t tq = 0; tq < lq; tq++)
                for (int32_t tk = 0; tk < lk; tk++) {
                    int64_t pq, pk;
                    positions(p, tq, tk, &pq, &pk);
                    c->bias[term_at(1, c->bhm, p, 0, h, tq, tk)] =
                        s->xb == XB_ALIBI ? (float)(-ldexp(1.0, -(h + 1)) * (double)(pq - pk))
                                          : (float)(2.0 * fmod(fabs(fix_rng_normal(&r)), 1.0) -
                                                    1.0);
                }
        p->xbias = (attn_xbias){c->bias, 1, c->bhm, lq, lk};
    }
    cr_assert_eq(attn_problem_check(p, &err), FC_OK, "%s", err.msg);
    size_t nq = attn_q_elems(p), nk = attn_k_elems(p), nv = attn_v_elems(p);
    size_t no = attn_o_elems(p), nl = attn_lse_elems(p);
    c->q = xalloc(nq * sizeof(float));
    c->k = xalloc(nk * sizeof(float));
    c->v = xalloc(nv * sizeof(float));
    float *all[3] = {c->q, c->k, c->v};
    size_t cnt[3] = {nq, nk, nv};
    for (int a = 0; a < 3; a++)
        for (size_t i = 0; i < cnt[a]; i++)
            all[a][i] = fc_round((float)fix_rng_normal(&r), s->dt);
    c->o64 = xalloc(no * sizeof(double));
    c->lse64 = xalloc(nl * sizeof(double));
    cr_assert_eq(ref_attention_f64(p, c->q, c->k, c->v, c->o64, c->lse64, &err), FC_OK, "%s",
                 err.msg);
    c->jc = (judge_case){.prob = p, .dtype = s->dt, .q = c->q, .k = c->k, .v = c->v,
                         .out = c->o64, .lse = c->lse64};
    cr_assert_eq(judge_baseline(&c->jc, &c->lp, &err), FC_OK, "%s", err.msg);
    c->o = xalloc(no * sizeof(float));
    c->lse = xalloc(nl * sizeof(float));
    memcpy(c->o, c->lp.o32s ? c->lp.o32s : c->lp.o, no * sizeof *c->o); /* correct */
    for (size_t i = 0; i < nl; i++)
        c->lse[i] = (float)c->lse64[i];
}

static void xcase_free(xcase *c)
{
    free(c->mask);
    free(c->bits);
    free(c->bias);
    free(c->q);
    free(c->k);
    free(c->v);
    free(c->o64);
    free(c->lse64);
    judge_lp_free(&c->lp);
    free(c->o);
    free(c->lse);
    attn_problem_free(&c->p);
}

/* ---- the bugs, computed here ----------------------------------------------------------- */

enum { HEAD_OWN, HEAD_ZERO, HEAD_KV };

/* How a buggy kernel reads the case: the truth but for what a test changes. */
typedef struct defect {
    mask_params fam;        /* the families it applies */
    int no_mask;            /* the explicit mask not applied */
    int dq, dk;             /* mask row tq read at tq + dq, key tk at tk + dk (held to the grid) */
    int transposed;         /* mask bit (tq, tk) read at (tk, tq) */
    int mask_head;          /* HEAD_*: the mask's head a query head reads */
    double bias_mul;        /* the bias times this (0: not added) */
    int bias_before_cap;    /* added before the soft-cap */
    int bias_head;          /* HEAD_*: the bias's head */
    int cap_fill;           /* masked keys score -cap plus their bias (the soft-cap and the bias
                             * applied after the -inf fill) */
} defect;

static defect truth_of(const xcase *c)
{
    return (defect){.fam = c->p.mask, .bias_mul = 1.0};
}

static int32_t held(int64_t i, int32_t n)
{
    return i < 0 ? 0 : i >= n ? n - 1 : (int32_t)i;
}

static int32_t head_read(const xcase *c, int how, int32_t h)
{
    return how == HEAD_ZERO ? 0 : how == HEAD_KV ? h / (c->p.hq / c->p.hkv) : h;
}

static int mask_bit(const xcase *c, const defect *d, int32_t b, int32_t h, int32_t tq, int32_t tk)
{
    if (!c->mask || d->no_mask)
        return 1;
    int32_t rq = held((int64_t)tq + d->dq, c->p.seq.lq);
    int32_t rk = held((int64_t)tk + d->dk, c->p.seq.lk);
    if (d->transposed) {
        int32_t t = rq;
        rq = rk;
        rk = t;
    }
    return c->mask[term_at(c->mbm, c->mhm, &c->p, b, head_read(c, d->mask_head, h), rq, rk)];
}

/* The whole output under defect d: a naive double softmax per row. */
static void brute(const xcase *c, const defect *d, double *o, double *lse)
{
    const attn_problem *p = &c->p;
    int32_t lq = p->seq.lq, lk = p->seq.lk, dd = p->d, dv = p->dv;
    double cap = p->terms.softcap, *s = xalloc(sizeof(double) * (size_t)lk);
    for (int32_t b = 0; b < p->seq.batch; b++)
        for (int32_t h = 0; h < p->hq; h++)
            for (int32_t tq = 0; tq < lq; tq++) {
                size_t row = ((size_t)b * p->hq + h) * lq + tq;
                int32_t hk = h / (p->hq / p->hkv);
                const float *kk = c->k + ((size_t)b * p->hkv + hk) * lk * dd;
                const float *vv = c->v + ((size_t)b * p->hkv + hk) * lk * dv;
                double mx = -INFINITY, sum = 0;
                for (int32_t j = 0; j < lk; j++) {
                    double bv = 0, dot = 0;
                    int32_t hb = head_read(c, d->bias_head, h);
                    if (c->bias && d->bias_mul != 0)
                        bv = d->bias_mul * c->bias[term_at(1, c->bhm, p, b, hb, tq, j)];
                    for (int32_t x = 0; x < dd; x++)
                        dot += (double)c->q[row * dd + x] * kk[(size_t)j * dd + x];
                    s[j] = p->scale * dot + (d->bias_before_cap ? bv : 0);
                    if (cap > 0)
                        s[j] = cap * tanh(s[j] / cap);
                    s[j] += d->bias_before_cap ? 0 : bv;
                    /* a kernel visits the row's sequence's keys: the fill reaches those */
                    int64_t pq, pk;
                    if (!positions(p, tq, j, &pq, &pk))
                        s[j] = -INFINITY;
                    else if (!spec_allowed(d->fam, pq, pk) || !mask_bit(c, d, b, h, tq, j))
                        s[j] = d->cap_fill ? -cap + bv : -INFINITY;
                    mx = fmax(mx, s[j]);
                }
                for (int32_t x = 0; x < dv; x++)
                    o[row * dv + x] = 0;
                if (mx == -INFINITY) {
                    lse[row] = -INFINITY;
                    continue;
                }
                for (int32_t j = 0; j < lk; j++)
                    sum += exp(s[j] - mx);
                for (int32_t j = 0; j < lk; j++)
                    for (int32_t x = 0; x < dv; x++)
                        o[row * dv + x] += exp(s[j] - mx) / sum * vv[(size_t)j * dv + x];
                lse[row] = mx + log(sum);
            }
    free(s);
}

/* The output under test becomes d's, rounded as a kernel of the dtype stores it. */
static void plant(xcase *c, const defect *d)
{
    size_t no = attn_o_elems(&c->p), nl = attn_lse_elems(&c->p);
    double *o = xalloc(no * sizeof *o), *lse = xalloc(nl * sizeof *lse);
    brute(c, d, o, lse);
    for (size_t i = 0; i < no; i++)
        c->o[i] = fc_round((float)o[i], c->dt);
    for (size_t i = 0; i < nl; i++)
        c->lse[i] = (float)lse[i];
    free(o);
    free(lse);
}

static diag_report *diagnose_bm(xcase *c, const bmask *bm, char **text)
{
    fc_err err = {{0}};
    int pass = judge_given(&c->jc, c->o, c->lse, NULL, &c->lp, &c->verdict, &err);
    cr_assert(pass >= 0, "verdict: %s", err.msg);
    diag_in in = {.jc = &c->jc, .o = c->o, .lse = c->lse, .v = &c->verdict, .bm = bm};
    diag_report *r = NULL;
    cr_assert_eq(diag_run(&in, &r, &err), FC_OK, "diag_run: %s", err.msg);
    size_t len = 0;
    FILE *f = open_memstream(text, &len);
    cr_assert(f);
    diag_print(f, r, &c->p, "  ");
    fclose(f);
    if (getenv("DIAG_TEST_PRINT"))
        fputs(*text, stderr);
    return r;
}

static diag_report *diagnose(xcase *c, char **text)
{
    return diagnose_bm(c, NULL, text);
}

static const diag_finding *finding(const diag_report *r, const char *name)
{
    for (size_t i = 0; i < r->nfindings; i++)
        if (strcmp(r->findings[i].name, name) == 0)
            return &r->findings[i];
    return NULL;
}

/* ---- the cases --------------------------------------------------------------------------- */

/* prefix-LM (20 bidirectional keys, causal after) on no family, float16 */
#define PREFIX_LM {FC_F16, 1, 2, 1, 64, 64, 16, {0}, 0, 0, XM_PREFIX, 20, XB_NONE, .seed = 31}
/* random per-head masks of 2 batch entries (an empty row), GQA 4 -> 2, float32 */
#define RANDOM_HEADS {FC_F32, 2, 4, 2, 48, 48, 16, {0}, 0, 0, XM_RANDOM, 0, XB_NONE, .seed = 32}
/* ALiBi per head on a causal mask, GQA 4 -> 2, a soft-cap of 5, float16 */
#define ALIBI {FC_F16, 1, 4, 2, 64, 64, 16, {.causal = 1}, 0, 5, XM_NONE, 0, XB_ALIBI, .seed = 33}
/* a random bias in [-1, 1] and prefix-LM with a cap of 1 on scores of spread ~8 (scale 2):
 * masked keys at -1 weigh as much as allowed ones */
#define CAPPED {FC_F16, 1, 2, 1, 64, 64, 16, {0}, 2, 1, XM_PREFIX, 20, XB_RANDOM, .seed = 34}

/* three packed sequences (the second and third with fewer queries than keys), prefix-LM of 8
 * keys in each on the packed grid (pairs of two sequences set: the families refuse them), the
 * ALiBi of their positions with a cap of 1 at scale 2, float16 */
#define PACKED {FC_F16, 1, 2, 1, 0, 0, 16, {0}, 2, 1, XM_PREFIX, 8, XB_ALIBI, .seed = 40, \
                .nseq = 3, .cu_q = {0, 20, 44, 64}, .cu_k = {0, 20, 50, 72}}

typedef struct xhyp_case {
    const char *expect;     /* the hypothesis named the cause */
    xspec s;
    defect d;               /* fields set over the truth's (truth_of): see xhyp_defect */
    int set_fam;            /* d.fam replaces the truth's families */
} xhyp_case;

static const xhyp_case xhyp_cases[] = {
    {"xmask-q-1", PREFIX_LM, {.dq = -1}, 0},
    {"xmask-q+1", PREFIX_LM, {.dq = 1}, 0},
    {"xmask-k-1", PREFIX_LM, {.dk = -1}, 0},
    {"xmask-k+1", PREFIX_LM, {.dk = 1}, 0},
    {"xmask-transposed", PREFIX_LM, {.transposed = 1}, 0},
    {"xmask-ignored", PREFIX_LM, {.no_mask = 1}, 0},
    {"xmask-k+1", RANDOM_HEADS, {.dk = 1}, 0},
    {"xmask-transposed", RANDOM_HEADS, {.transposed = 1}, 0},
    {"xmask-head0", RANDOM_HEADS, {.mask_head = HEAD_ZERO}, 0},
    {"xmask-kv-head", RANDOM_HEADS, {.mask_head = HEAD_KV}, 0},
    {"bias-ignored", ALIBI, {.bias_mul = 0}, 0},
    {"bias-negated", ALIBI, {.bias_mul = -1}, 0},
    {"bias*2", ALIBI, {.bias_mul = 2}, 0},
    {"bias/2", ALIBI, {.bias_mul = 0.5}, 0},
    {"bias-before-scale", ALIBI, {.bias_mul = 0.25, .bias_before_cap = 1}, 0},
    {"bias-before-softcap", ALIBI, {.bias_mul = 1, .bias_before_cap = 1}, 0},
    {"bias-head0", ALIBI, {.bias_mul = 1, .bias_head = HEAD_ZERO}, 0},
    {"bias-kv-head", ALIBI, {.bias_mul = 1, .bias_head = HEAD_KV}, 0},
    {"softcap-after-fill", CAPPED, {.bias_mul = 1, .cap_fill = 1}, 0},
    {"xmask-q-1", PACKED, {.dq = -1, .bias_mul = 1}, 0},
    {"xmask-k+1", PACKED, {.dk = 1, .bias_mul = 1}, 0},
    {"bias-negated", PACKED, {.bias_mul = -1}, 0},
    {"softcap-after-fill", PACKED, {.bias_mul = 1, .cap_fill = 1}, 0},
    /* a family's hypothesis under an explicit mask: the window one short, the mask kept */
    {"window-1",
     {FC_F16, 1, 2, 1, 64, 64, 16, {.causal = 1, .sliding_window = 16}, 0, 0, XM_RANDOM, 0,
      XB_RANDOM, .seed = 35},
     {.fam = {.causal = 1, .sliding_window = 15}, .bias_mul = 1}, 1},
};

/* The case's defect: the truth but the fields the table sets (a mask case's bias_mul 0 means
 * the truth's 1: those cases have no bias). */
static defect xhyp_defect(const xcase *c, const xhyp_case *hc)
{
    defect d = hc->d, t = truth_of(c);
    if (!hc->set_fam)
        d.fam = t.fam;
    if (!c->bias)
        d.bias_mul = 1;
    return d;
}

static void run_xhyp_case(const xhyp_case *hc)
{
    xcase c;
    xcase_make(&c, &hc->s);
    defect d = xhyp_defect(&c, hc);
    plant(&c, &d);
    char *text = NULL;
    diag_report *r = diagnose(&c, &text);
    cr_assert(!c.verdict.pass, "%s: the bug's output must fail", hc->expect);
    cr_assert(r->failing > 0 && r->examined == r->failing, "%s\n%s", hc->expect, text);
    cr_assert_eq(r->nonfinite.count, 0, "%s\n%s", hc->expect, text);
    cr_assert_eq(r->unexplained.count, 0, "%s: unexplained rows\n%s", hc->expect, text);
    cr_assert(r->ncauses == 1 && strcmp(r->findings[0].name, hc->expect) == 0,
              "%s: %zu causes, the first %s\n%s", hc->expect, r->ncauses,
              r->nexplaining ? r->findings[0].name : "(none)", text);
    cr_assert_eq(r->findings[0].rows.count, r->failing, "%s: explains every failing row\n%s",
                 hc->expect, text);
    char want[DIAG_TITLE_LEN + 16];
    snprintf(want, sizeof want, "explained by %s", r->findings[0].title);
    cr_assert(strstr(text, want), "%s: prints %s\n%s", hc->expect, want, text);
    free(text);
    diag_report_free(r);
    xcase_free(&c);
}

Test(diag_xterms, each_hypothesis_is_named_the_cause_of_its_planted_bug)
{
    for (size_t i = 0; i < sizeof xhyp_cases / sizeof xhyp_cases[0]; i++)
        run_xhyp_case(&xhyp_cases[i]);
}

/* Each hypothesis of the explicit terms in diag/hyps.c's table has a case above (test_diag.c
 * holds the others to its own table). */
Test(diag_xterms, every_explicit_term_hypothesis_has_a_case)
{
    size_t n = 0;
    for (size_t i = 0; i < diag_nhyps; i++) {
        const char *name = diag_hyps[i].name;
        if (strncmp(name, "xmask-", 6) && strncmp(name, "bias", 4))
            continue;
        n++;
        int found = 0;
        for (size_t j = 0; j < sizeof xhyp_cases / sizeof xhyp_cases[0]; j++)
            found |= strcmp(xhyp_cases[j].expect, name) == 0;
        cr_assert(found, "no case for %s", name);
    }
    cr_assert_geq(n, 16, "the table lost explicit-term hypotheses");
}

/* The correct output of each case passes and has nothing to explain. */
Test(diag_xterms, a_correct_output_has_no_finding)
{
    const xspec specs[] = {PREFIX_LM, RANDOM_HEADS, ALIBI, CAPPED, PACKED};
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        xcase c;
        xcase_make(&c, &specs[i]);
        char *text = NULL;
        diag_report *r = diagnose(&c, &text);
        cr_assert(c.verdict.pass, "case %zu: %s", i, rep_verdict_reason(&c.verdict));
        cr_assert(r->failing == 0 && r->nexplaining == 0 && r->ncauses == 0, "case %zu\n%s", i,
                  text);
        free(text);
        diag_report_free(r);
        xcase_free(&c);
    }
}

/* Rows no hypothesis explains are described by the case's whole predicate: row 5 of (0, 1),
 * which the explicit mask empties (the families allow every key), garbage with rows 4 and 6
 * around it, counts as a failing row with no allowed key, the only one of the case. */
Test(diag_xterms, the_evidence_counts_the_rows_the_explicit_mask_empties)
{
    const xspec s = RANDOM_HEADS;
    xcase c;
    xcase_make(&c, &s);
    size_t dv = (size_t)c.p.dv;
    for (int32_t q = 4; q <= 6; q++)
        for (size_t x = 0; x < dv; x++)
            c.o[((size_t)1 * c.p.seq.lq + (size_t)q) * dv + x] += 0.5f + (float)(x % 3);
    char *text = NULL;
    diag_report *r = diagnose(&c, &text);
    cr_assert(r->failing == 3 && r->ncauses == 0 && r->unexplained.count == 3, "%s", text);
    cr_assert(r->ev.empty == 1 && r->ev.empty_total == 1, "empty %zu of %zu\n%s", r->ev.empty,
              r->ev.empty_total, text);
    free(text);
    diag_report_free(r);
    xcase_free(&c);
}

/* THE TIE RULE across the terms: a causal window of 8 restated as an explicit causal band of 8
 * keys, 32 decode-like queries over 64 keys (every p_q >= 8, so the mask's first key is never
 * at a window's edge). Reading the band one key back (key k at k - 1) keeps keys p_q - 6 ..
 * p_q: on every row the keys of window W-1. Planted either way, one finding names both. */
Test(diag_xterms, a_mask_shift_computing_a_window_is_one_finding_with_it)
{
    const xspec s = {FC_F16, 1, 2, 1, 32, 64, 16, {.causal = 1, .sliding_window = 8}, 0, 0,
                     XM_BAND, 8, XB_NONE, .seed = 36};
    for (int planted = 0; planted < 2; planted++) {
        xcase c;
        xcase_make(&c, &s);
        defect d = truth_of(&c);
        if (planted)
            d.fam.sliding_window = 7;
        else
            d.dk = -1;
        plant(&c, &d);
        char *text = NULL;
        diag_report *r = diagnose(&c, &text);
        cr_assert(r->failing > 0 && r->ncauses == 1, "planted %d\n%s", planted, text);
        cr_assert_str_eq(r->findings[0].name, "window-1", "%s", text);
        const char *t = r->findings[0].title;
        cr_assert(!strncmp(t, "window W-1 (8 -> 7), ", 21) &&
                      strstr(t, ", here the same as explicit mask one key back"), "%s", t);
        cr_assert_eq(r->findings[0].rows.count, r->failing, "%s", text);
        cr_assert(!finding(r, "xmask-k-1"), "%s", text);
        free(text);
        diag_report_free(r);
        xcase_free(&c);
    }
}

/* Hypotheses of the explicit terms that compute the same rows on a case are one finding titled
 * with both, whichever was planted: with one kv head the kv head's mask (bias) is head 0's for
 * every head, and at D = 4 (scale 1/2, no cap) a bias added before the scale is the bias
 * halved. */
Test(diag_xterms, explicit_term_hypotheses_computing_the_same_rows_are_one_finding)
{
    const struct {
        xspec s;
        defect d;
        const char *name, *title;
    } ties[] = {
        {{FC_F32, 1, 4, 1, 32, 32, 16, {0}, 0, 0, XM_RANDOM, 0, XB_NONE, .seed = 37},
         {.mask_head = HEAD_ZERO, .bias_mul = 1}, "xmask-head0",
         "explicit mask of head 0 for every head (a per-head mask of 4 heads broadcast as one), "
         "here the same as explicit mask indexed by the kv head"},
        {{FC_F16, 1, 4, 1, 32, 32, 16, {.causal = 1}, 0, 0, XM_NONE, 0, XB_ALIBI, .seed = 38},
         {.bias_head = HEAD_KV, .bias_mul = 1}, "bias-head0",
         "bias of head 0 for every head (a per-head bias of 4 heads broadcast as one), here the "
         "same as bias indexed by the kv head"},
        {{FC_F16, 1, 2, 1, 32, 32, 4, {.causal = 1}, 0, 0, XM_NONE, 0, XB_ALIBI, .seed = 39},
         {.bias_mul = 0.5, .bias_before_cap = 1}, "bias/2",
         "bias halved (score + bias / 2), here the same as bias added before the scale"},
    };
    for (size_t i = 0; i < sizeof ties / sizeof ties[0]; i++) {
        xcase c;
        xcase_make(&c, &ties[i].s);
        defect d = ties[i].d;
        d.fam = c.p.mask;
        plant(&c, &d);
        char *text = NULL;
        diag_report *r = diagnose(&c, &text);
        cr_assert(r->failing > 0 && r->ncauses == 1, "%s\n%s", ties[i].name, text);
        cr_assert_str_eq(r->findings[0].name, ties[i].name, "%s", text);
        cr_assert_str_eq(r->findings[0].title, ties[i].title, "%s", text);
        cr_assert_eq(r->findings[0].rows.count, r->failing, "%s", text);
        free(text);
        diag_report_free(r);
        xcase_free(&c);
    }
}

/* ---- a producer's block mask under an explicit mask ----------------------------------- */

/* Its defects against the families AND the explicit mask, counted here by brute force over
 * every (b, h) grid the mask stores (the block mask's rows broadcast to them): a tile with an
 * allowed pair listed nowhere is dropped, one listed full with a pair not allowed leaks. */
static void bm_defects_brute(const xcase *c, const bmask *bm, int64_t *dropped, int64_t *leaked)
{
    const attn_problem *p = &c->p;
    int32_t qb = bm->q_block_size, kb = bm->kv_block_size;
    *dropped = *leaked = 0;
    for (int32_t b = 0; b < c->mbm; b++)
        for (int32_t h = 0; h < c->mhm; h++)
            for (int32_t r = 0; r < bm->nqb; r++) {
                size_t row = bmask_row(bm, b, h, r);
                for (int32_t cb = 0; cb < bm->nkb; cb++) {
                    int listed = 0; /* 1 partial, 2 full */
                    for (int full = 0; full < 2; full++) {
                        const int32_t *ids = bmask_ids(bm, full, row);
                        int32_t n = (full ? bm->full_kv_num_blocks : bm->kv_num_blocks)[row];
                        for (int32_t s2 = 0; s2 < n; s2++)
                            if (ids[s2] == cb)
                                listed = 1 + full;
                    }
                    int any = 0, all = 1;
                    for (int32_t tq = r * qb; tq < (r + 1) * qb && tq < p->seq.lq; tq++)
                        for (int32_t tk = cb * kb; tk < (cb + 1) * kb && tk < p->seq.lk; tk++) {
                            int64_t pq, pk;
                            int ok = positions(p, tq, tk, &pq, &pk) &&
                                     spec_allowed(p->mask, pq, pk) &&
                                     c->mask[term_at(c->mbm, c->mhm, p, b, h, tq, tk)];
                            any |= ok;
                            all &= ok;
                        }
                    *dropped += any && !listed;
                    *leaked += listed == 2 && !all;
                }
            }
}

/* c's output as a kernel running under c's explicit mask with `bytes` in place of its dense
 * mask computes it (the truth's rule otherwise), rounded as c's output type. */
static void output_under(xcase *c, uint8_t *bytes)
{
    uint8_t *saved = c->mask;
    c->mask = bytes;
    defect d = truth_of(c);
    plant(c, &d);
    c->mask = saved;
}

/* The block-mask finding: its title's counts are the brute force's, and it explains every
 * failing row as the only cause. */
static void expect_block_mask_finding(xcase *c, const bmask *bm, int64_t dropped,
                                      int64_t leaked)
{
    char *text = NULL;
    diag_report *r = diagnose_bm(c, bm, &text);
    cr_assert(r->failing > 0 && r->ncauses == 1, "%s", text);
    cr_assert_str_eq(r->findings[0].name, "block-mask", "%s", text);
    cr_assert_eq(r->findings[0].rows.count, r->failing, "%s", text);
    char want[96];
    snprintf(want, sizeof want, "it drops %lld tiles and leaks %lld", (long long)dropped,
             (long long)leaked);
    cr_assert(strstr(r->findings[0].title, want), "want '%s' in '%s'\n%s", want,
              r->findings[0].title, text);
    free(text);
    diag_report_free(r);
}

/* A causal 64 x 64 case with random per-head explicit masks (2 heads) and a producer's block
 * mask of 16 x 16 tiles: the families' own (bmask_build direct: the mask ignored) or the
 * exact one of the whole predicate (bmask_build_slow_x, one list a head), which `edit` may
 * change, with the dense mask a kernel running that list sees (c's, which `edit` changes to
 * match). Its brute-force defect counts must be `dropped` and `leaked`; then the kernel's
 * output is diagnosed as the block mask as given with those counts. */
static void block_mask_case(uint64_t seed, int exact, void (*edit)(xcase *, bmask *, uint8_t *),
                            int64_t dropped, int64_t leaked)
{
    const xspec s = {FC_F32, 1, 2, 1, 64, 64, 16, {.causal = 1}, 0, 0, XM_RANDOM, 0, XB_NONE,
                     .seed = seed};
    xcase c;
    xcase_make(&c, &s);
    bmask bm;
    fc_err err = {{0}};
    fc_status st = exact ? bmask_build_slow_x(&bm, c.p.mask, &c.p.seq, c.p.xmask, 16, 16, &err)
                         : bmask_build(&bm, BMASK_DIRECT, c.p.mask, &c.p.seq, 16, 16, &err);
    cr_assert_eq(st, FC_OK, "%s", err.msg);
    size_t nm = (size_t)c.mhm * 64 * 64;
    uint8_t *kmask = xalloc(nm);
    memcpy(kmask, c.mask, nm);
    edit(&c, &bm, kmask);
    int64_t d, l;
    bm_defects_brute(&c, &bm, &d, &l);
    cr_assert(d == dropped && l == leaked, "brute force: drops %lld, leaks %lld", (long long)d,
              (long long)l);
    output_under(&c, kmask);
    expect_block_mask_finding(&c, &bm, dropped, leaked);
    free(kmask);
    bmask_free(&bm);
    xcase_free(&c);
}

/* The families' list as a kernel applies it: a full tile's keys all (its mask never evaluated,
 * so the explicit mask's holes there are let in), a partial tile's by the families AND the
 * explicit mask. */
static void full_tiles_let_in(xcase *c, bmask *bm, uint8_t *kmask)
{
    for (int32_t h = 0; h < c->mhm; h++)
        for (int32_t tq = 0; tq < 64; tq++)
            for (int32_t tk = 0; tk < tq / 16 * 16; tk++) /* kv block < query block */
                kmask[term_at(1, c->mhm, &c->p, 0, h, tq, tk)] = 1;
}

/* Head 1's query tile 2 loses kv block 1 (partial under the random mask), as a tree mask's
 * list that loses a draft token's tile: the kernel never sees those keys. */
static void drop_a_tile(xcase *c, bmask *bm, uint8_t *kmask)
{
    int64_t d, l;
    bm_defects_brute(c, bm, &d, &l);
    cr_assert(d == 0 && l == 0, "the slow builder's list is exact: drops %lld, leaks %lld",
              (long long)d, (long long)l);
    size_t row = bmask_row(bm, 0, 1, 2);
    int32_t *ids = bmask_ids(bm, 0, row);
    int32_t n = bm->kv_num_blocks[row], at = -1;
    for (int32_t i = 0; i < n; i++)
        if (ids[i] == 1)
            at = i;
    cr_assert(at >= 0, "kv block 1 is partial in query tile 2 of head 1");
    ids[at] = ids[n - 1]; /* the row's order does not matter: a kernel visits each listed id */
    ids[n - 1] = -1;
    bm->kv_num_blocks[row] = n - 1;
    for (int32_t tq = 32; tq < 48; tq++)
        for (int32_t tk = 16; tk < 32; tk++)
            kmask[term_at(1, c->mhm, &c->p, 0, 1, tq, tk)] = 0;
}

/* The families' own block mask under random per-head explicit masks: named as given, its
 * partial tiles read under the explicit mask, its title counting the full tiles that leak the
 * explicit mask's holes for each head the one list stands for: the 6 full tiles below the
 * diagonal a head, each of 256 pairs kept with probability 0.6, so all 12 hold a hole. */
Test(diag_xterms, a_block_mask_of_the_families_alone_is_named_as_given)
{
    block_mask_case(41, 0, full_tiles_let_in, 0, 12);
}

/* The exact list of the whole predicate (no defect before the drop) with one tile dropped:
 * "drops 1 tiles". */
Test(diag_xterms, a_tile_dropped_from_the_explicit_masks_block_mask_is_named)
{
    block_mask_case(43, 1, drop_a_tile, 1, 0);
}
