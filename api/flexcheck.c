/*
 * flexcheck.c - the public C API (include/flexcheck.h) over check's own judging of an output
 * (check/check.h: chk_judge_output, chk_result_print): the problem handle is validated the way
 * the fixture reader validates a case, the float64 oracle and the same-precision baseline are
 * computed from the inputs, and the verdict keeps everything the accessors return. No global
 * state: every call works on its handles alone (the interrupt flag a judge polls is handed to
 * the reference and the diagnosis through the calling thread's base/cancel.h, never a global).
 */
#define _GNU_SOURCE /* open_memstream */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cancel.h"
#include "base/cpu.h"
#include "base/lowp.h"
#include "base/version.h"
#include "check/check.h"
#include "fixtures/fix.h"
#include "api/api_internal.h"
#include "include/flexcheck.h"
#include "ref/ref.h"


_Static_assert(FLEXCHECK_NGATES == REP_NGATES, "the public gates are the policy's");
_Static_assert((int)FLEXCHECK_GATE_NOT_RUN == (int)REP_NOT_RUN &&
                   (int)FLEXCHECK_GATE_PASS == (int)REP_PASS &&
                   (int)FLEXCHECK_GATE_FAIL == (int)REP_FAIL,
               "gate states are passed through as they are");

typedef struct finding {
    char title[DIAG_TITLE_LEN];
    size_t rows;
} finding;

struct flexcheck_verdict {
    chk_result res;
    char *text, *diagnosis;
    int32_t worst[4];
    double worst_err;
    finding *findings;
    size_t nfindings;
};

/* ---- messages ---- */

flexcheck_status api_fail(flexcheck_problem *p, flexcheck_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->err, sizeof p->err, fmt, ap);
    va_end(ap);
    return st;
}

flexcheck_status api_ok(flexcheck_problem *p)
{
    p->err[0] = '\0';
    return FLEXCHECK_OK;
}

flexcheck_status api_enter(flexcheck_problem *p)
{
    if (!p)
        return FLEXCHECK_EINVAL;
    fc_err err;
    fc_status st = fc_cpu_check(&err);
    return st ? fail(p, st == FC_EUNSUP ? FLEXCHECK_EUNSUP : FLEXCHECK_EINVAL, "%s", err.msg)
              : FLEXCHECK_OK;
}

static flexcheck_status of_fc(fc_status st)
{
    return st == FC_ENOMEM       ? FLEXCHECK_ENOMEM
           : st == FC_EUNSUP     ? FLEXCHECK_EUNSUP
           : st == FC_ECANCELED  ? FLEXCHECK_EINTR
                                 : FLEXCHECK_EINVAL;
}

EXPORT int flexcheck_api_version(void)
{
    return FLEXCHECK_API_VERSION;
}

EXPORT const char *flexcheck_version(void)
{
    return fc_version_line();
}

/* ---- the problem ---- */

EXPORT flexcheck_problem *flexcheck_problem_new(void)
{
    flexcheck_problem *p = calloc(1, sizeof *p);
    if (p)
        p->dtype = FC_F32;
    return p;
}

EXPORT void flexcheck_problem_free(flexcheck_problem *p)
{
    if (!p)
        return;
    free(p->sinks);
    free(p->cu_q);
    free(p->cu_k);
    free(p->xbits);
    free(p->xbias);
    bmask_free(&p->bm);
    fix_paged_free(&p->pg);
    free(p);
}

EXPORT const char *flexcheck_problem_errmsg(const flexcheck_problem *p)
{
    return p ? p->err : "no problem handle (NULL)";
}

EXPORT flexcheck_status flexcheck_problem_set_shape(flexcheck_problem *p, int32_t b, int32_t hq,
                                                    int32_t hkv, int32_t lq, int32_t lk,
                                                    int32_t d, int32_t dv)
{
    API_ENTER(p);
    /* The limits are the library's own (masks/problem.h attn_problem_check, masks/mask.h): a
     * shape it cannot run is refused here, named, rather than at judge time. B has none of
     * its own; the element counts are held to memory by the budget. */
    const struct {
        const char *name, *why;
        int32_t v, lo, hi;
    } f[] = {{"B", "", b, 1, INT32_MAX},
             {"Hq", " (the most heads flexcheck judges)", hq, 1, ATTN_MAX_HEADS},
             {"Hkv", "", hkv, 1, INT32_MAX},
             {"Lq", " (the longest sequence flexcheck judges)", lq, 0, MASK_MAX_LEN},
             {"Lk", " (the longest sequence flexcheck judges)", lk, 0, MASK_MAX_LEN},
             {"D", " (the largest head dim flexcheck judges)", d, 1, ATTN_MAX_HEAD_DIM},
             {"Dv", " (the largest head dim flexcheck judges)", dv, 1, ATTN_MAX_HEAD_DIM}};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        if (f[i].v < f[i].lo)
            return fail(p, FLEXCHECK_EINVAL, "set_shape: %s = %d, must be at least %d", f[i].name,
                        (int)f[i].v, (int)f[i].lo);
        if (f[i].v > f[i].hi)
            return fail(p, FLEXCHECK_EINVAL, "set_shape: %s = %d, must be at most %d%s",
                        f[i].name, (int)f[i].v, (int)f[i].hi, f[i].why);
    }
    if (hq % hkv)
        return fail(p, FLEXCHECK_EINVAL, "set_shape: Hq = %d is not a multiple of Hkv = %d",
                    (int)hq, (int)hkv);
    /* Field by field, never the whole struct: the interrupt flag may be written at any time
     * by another thread. */
    p->shaped = 1;
    p->b = b;
    p->hq = hq;
    p->hkv = hkv;
    p->lq = lq;
    p->lk = lk;
    p->d = d;
    p->dv = dv;
    return ok(p);
}

EXPORT flexcheck_status flexcheck_problem_set_dtype(flexcheck_problem *p, const char *dtype)
{
    API_ENTER(p);
    if (!dtype || fc_dtype_parse(dtype, &p->dtype))
        return fail(p, FLEXCHECK_EINVAL, "set_dtype: '%s': float32, float16 or bfloat16",
                    dtype ? fc_esc(dtype).s : "(NULL)");
    return ok(p);
}

EXPORT flexcheck_status flexcheck_problem_set_output_types(flexcheck_problem *p,
                                                           const char *out_dtype,
                                                           const char *lse_dtype)
{
    API_ENTER(p);
    const char *names[2] = {out_dtype, lse_dtype}, *what[2] = {"out", "lse"};
    fc_dtype got[2] = {p->out_dtype, p->lse_dtype};
    for (int i = 0; i < 2; i++)
        if (names[i] && fc_dtype_parse(names[i], &got[i]))
            return fail(p, FLEXCHECK_EINVAL, "set_output_types: %s '%s': float32, float16 or "
                        "bfloat16", what[i], fc_esc(names[i]).s);
    p->out_dtype = got[0];
    p->lse_dtype = got[1];
    return ok(p);
}

EXPORT flexcheck_status flexcheck_problem_set_mask(flexcheck_problem *p, int causal,
                                                   int32_t window, int32_t chunk)
{
    API_ENTER(p);
    if (causal != 0 && causal != 1)
        return fail(p, FLEXCHECK_EINVAL, "set_mask: causal = %d, must be 0 or 1", causal);
    if (window < 0 || chunk < 0)
        return fail(p, FLEXCHECK_EINVAL, "set_mask: %s = %d, must be >= 0 (0 = off)",
                    window < 0 ? "window" : "chunk", (int)(window < 0 ? window : chunk));
    p->mask = (mask_params){.causal = causal, .sliding_window = window, .chunk_size = chunk};
    return ok(p);
}

EXPORT flexcheck_status flexcheck_problem_set_scale(flexcheck_problem *p, double scale)
{
    API_ENTER(p);
    if (!(isfinite(scale) && scale >= 0))
        return fail(p, FLEXCHECK_EINVAL, "set_scale: %g, must be finite and > 0 (0: 1/sqrt(D))",
                    scale);
    p->scale = scale;
    return ok(p);
}

EXPORT flexcheck_status flexcheck_problem_set_softcap(flexcheck_problem *p, double softcap)
{
    API_ENTER(p);
    if (!(isfinite(softcap) && softcap >= 0))
        return fail(p, FLEXCHECK_EINVAL, "set_softcap: %g, must be finite and > 0 (0: off)",
                    softcap);
    p->softcap = softcap;
    return ok(p);
}

EXPORT flexcheck_status flexcheck_problem_set_sinks(flexcheck_problem *p, const float *sinks,
                                                    size_t n)
{
    API_ENTER(p);
    if (!sinks != !n)
        return fail(p, FLEXCHECK_EINVAL, "set_sinks: %s", sinks ? "n = 0 with sinks given"
                                                                  : "sinks NULL with n > 0");
    for (size_t i = 0; i < n; i++)
        if (!isfinite(sinks[i]))
            return fail(p, FLEXCHECK_EINVAL, "set_sinks: sinks[%zu] = %g is not finite", i,
                        (double)sinks[i]);
    float *c = NULL;
    if (n && !(c = malloc(n * sizeof *c)))
        return fail(p, FLEXCHECK_ENOMEM, "set_sinks: out of memory");
    if (n)
        memcpy(c, sinks, n * sizeof *c);
    free(p->sinks);
    p->sinks = c;
    p->nsinks = n;
    return ok(p);
}

EXPORT flexcheck_status flexcheck_problem_set_packed(flexcheck_problem *p, const int32_t *cu_q,
                                                     const int32_t *cu_k, size_t n)
{
    API_ENTER(p);
    if (!n && !cu_q && !cu_k) {
        free(p->cu_q);
        free(p->cu_k);
        p->cu_q = p->cu_k = NULL;
        p->ncu = 0;
        return ok(p);
    }
    if (!cu_q || !cu_k || n < 2 || n - 1 > (size_t)INT32_MAX)
        return fail(p, FLEXCHECK_EINVAL, "set_packed: cu_seqlens_q and cu_seqlens_k need R + 1 "
                    ">= 2 entries each (n = %zu%s)", n, !cu_q || !cu_k ? ", an array NULL" : "");
    int32_t *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    if (!a || !b) {
        free(a);
        free(b);
        return fail(p, FLEXCHECK_ENOMEM, "set_packed: out of memory");
    }
    memcpy(a, cu_q, n * sizeof *a);
    memcpy(b, cu_k, n * sizeof *b);
    free(p->cu_q);
    free(p->cu_k);
    p->cu_q = a;
    p->cu_k = b;
    p->ncu = n;
    return ok(p);
}

/* The budget's defaults are the CLI's (`check --max-memory / --max-work`, fixtures/fix.h), and so
 * is its estimate (attn_case_cost at check's default block sizes): an output check would refuse
 * to judge in a file, judge refuses here, before anything is allocated. */
EXPORT flexcheck_status flexcheck_problem_set_budget(flexcheck_problem *p, uint64_t max_memory,
                                                     uint64_t max_work)
{
    API_ENTER(p);
    p->max_memory = max_memory;
    p->max_work = max_work;
    return ok(p);
}

/* The budget as check's reader holds a case to it, with p's rows rule (fix_budget.rows). */
static fix_budget budget_of(const flexcheck_problem *p)
{
    fix_budget b = {.max_bytes = p->max_memory, .max_work = p->max_work,
                    .rows = p->rows, .rows_seed = p->rows_seed};
    return b;
}

/* The budget in force, defaults resolved (API version 5): a caller that must bound memory of its
 * own before handing it over (Python evaluating a mask_mod over the grid) is held to the same
 * figure the judge is, without a second definition of the default. */
EXPORT flexcheck_status flexcheck_problem_get_budget(flexcheck_problem *p, uint64_t *max_memory,
                                                     uint64_t *max_work)
{
    API_ENTER(p);
    fix_budget b = budget_of(p);
    if (max_memory)
        *max_memory = fix_budget_bytes(&b);
    if (max_work)
        *max_work = fix_budget_work(&b);
    return ok(p);
}

EXPORT flexcheck_status flexcheck_problem_interrupt(flexcheck_problem *p)
{
    if (!p)
        return FLEXCHECK_EINVAL;
    /* Only the flag, atomically, and never the message: this is the one call that may run
     * while another thread's call on p does. */
    __atomic_store_n(&p->interrupt, 1, __ATOMIC_RELAXED);
    return FLEXCHECK_OK;
}

/* ---- judging ---- */

/* The problem as the library's own attn_problem (its seq_info owned), held to attn_problem_check
 * and terms_check as the fixture reader holds a case. */
static flexcheck_status build(flexcheck_problem *p, attn_problem *a)
{
    memset(a, 0, sizeof *a);
    if (!p->shaped)
        return fail(p, FLEXCHECK_EINVAL, "no shape: call flexcheck_problem_set_shape first");
    fc_err err;
    fc_status st;
    if (p->ncu) {
        if (p->b != 1)
            return fail(p, FLEXCHECK_EINVAL, "a packed batch needs B = 1 (B = %d)", (int)p->b);
        int32_t r = (int32_t)(p->ncu - 1);
        if (p->cu_q[r] != p->lq || p->cu_k[r] != p->lk)
            return fail(p, FLEXCHECK_EINVAL, "cu_seqlens end at %d and %d, not at Lq = %d and "
                        "Lk = %d", (int)p->cu_q[r], (int)p->cu_k[r], (int)p->lq, (int)p->lk);
        st = seq_init_packed(&a->seq, r, p->cu_q, p->cu_k, &err);
    } else {
        st = seq_init_dense(&a->seq, p->b, p->lq, p->lk, &err);
    }
    if (st)
        return fail(p, of_fc(st), "%s", err.msg);
    a->hq = p->hq;
    a->hkv = p->hkv;
    a->d = p->d;
    a->dv = p->dv;
    a->scale = p->scale > 0 ? p->scale : 1.0 / sqrt((double)p->d);
    a->mask = p->mask;
    a->terms = (score_terms){p->softcap, p->sinks};
    if (p->xbits) /* the shape they were given for: attn_problem_check holds it to today's */
        a->xmask = (attn_xmask){p->xbits, p->xmask_dims[0], p->xmask_dims[1], p->xmask_dims[2],
                                p->xmask_dims[3]};
    if (p->xbias)
        a->xbias = (attn_xbias){p->xbias, p->xbias_dims[0], p->xbias_dims[1], p->xbias_dims[2],
                                p->xbias_dims[3]};
    if (p->sinks && p->nsinks != (size_t)p->hq)
        st = fc_errf(&err, FC_EINVAL, "sinks: %zu values for Hq = %d heads", p->nsinks,
                     (int)p->hq);
    if (!st)
        st = attn_problem_check(a, &err);
    if (!st)
        st = terms_check(&a->terms, a->hq, &err);
    if (st) {
        attn_problem_free(a);
        return fail(p, of_fc(st), "%s", err.msg);
    }
    return FLEXCHECK_OK;
}

/* FLEXCHECK_OK when a (the rows *n of it that will be judged: Lq, or a sample's) fits p's
 * budget; a message naming the estimate, the budget and the parameter otherwise. */
static flexcheck_status within_budget(flexcheck_problem *p, const attn_problem *a, int32_t *n)
{
    fix_budget b = budget_of(p);
    if (p->rows > a->seq.lq)
        return fail(p, FLEXCHECK_EINVAL, "rows = %d: past the problem's %d query tokens (Lq)",
                    (int)p->rows, (int)a->seq.lq);
    uint64_t bm_bytes;
    flexcheck_status st = api_bmask_fits(p, &bm_bytes);
    if (st)
        return st;
    *n = fix_budget_rows(a, FIX_DEFAULT_BLOCK, FIX_DEFAULT_BLOCK, &b);
    uint64_t mb = fix_budget_bytes(&b), mw = fix_budget_work(&b);
    attn_cost c = attn_case_cost_rows(a, FIX_DEFAULT_BLOCK, FIX_DEFAULT_BLOCK, *n);
    /* the producer's block mask, copied when set, is held too (its check's scratch is O(NKB));
     * a paged cache's copy, and the K/V gathered from it to hold k and v to it, too */
    const fix_paged *pg = &p->pg;
    if (pg->k_cache)
        bm_bytes += (uint64_t)pg->num_pages * (uint64_t)pg->page_size * (uint64_t)a->hkv *
                        (uint64_t)(a->d + a->dv) * 4 +
                    (uint64_t)pg->nrows * (uint64_t)pg->max_pages * 4 +
                    (uint64_t)(attn_k_elems(a) + attn_v_elems(a)) * 4;
    c.bytes = c.bytes > UINT64_MAX - bm_bytes ? UINT64_MAX : c.bytes + bm_bytes;
    char shape[200];
    fc_fmt(shape, sizeof shape, "B %d, Hq %d, Lq %d, Lk %d, D %d, Dv %d%s", (int)a->seq.batch,
           (int)a->hq, (int)a->seq.lq, (int)a->seq.lk, (int)a->d, (int)a->dv,
           *n < a->seq.lq ? " (a sample of rows)" : "");
    const char *also = *n < a->seq.lq ? " or judge fewer rows (rows)"
                                      : " or judge a sample of rows (rows)";
    const double gib = (double)((uint64_t)1 << 30);
    char xt[256], bt[96] = "";
    attn_xterms_text(xt, sizeof xt, a); /* the explicit mask and bias, named when present */
    if (bm_bytes)
        fc_fmt(bt, sizeof bt, "%s %s %.3g GiB", xt[0] ? " and" : "; of which",
               !pg->k_cache ? "the block mask"
               : p->has_bm  ? "the block mask and the paged cache (with its gather)"
                            : "the paged cache (with its gather)",
               (double)bm_bytes / gib);
    if (c.bytes > mb)
        return fail(p, FLEXCHECK_EINVAL, "budget: %s need about %.3g GiB (inputs, oracle, "
                    "buffers, reference scratch%s%s), over the memory budget max_memory = %.3g "
                    "GiB (%llu bytes): raise max_memory to judge it,%s", shape,
                    (double)c.bytes / gib, xt, bt, (double)mb / gib, (unsigned long long)mb,
                    also);
    if (c.work > mw)
        return fail(p, FLEXCHECK_EINVAL, "budget: %s need about %.3g multiply-adds, over the "
                    "work budget max_work = %.3g (%llu): raise max_work to judge it,%s", shape,
                    (double)c.work, (double)mw, (unsigned long long)mw, also);
    return FLEXCHECK_OK;
}

EXPORT flexcheck_status flexcheck_problem_set_rows(flexcheck_problem *p, int32_t rows,
                                                   uint64_t seed)
{
    API_ENTER(p);
    if (rows < -1)
        return fail(p, FLEXCHECK_EINVAL, "rows = %d: a number of query tokens >= 1, 0 (every "
                    "row) or -1 (a sample only where every row is over the budget)", (int)rows);
    p->rows = rows;
    p->rows_seed = seed;
    return ok(p);
}

EXPORT flexcheck_status flexcheck_problem_check(flexcheck_problem *p)
{
    API_ENTER(p);
    attn_problem a;
    flexcheck_status st = build(p, &a);
    if (st)
        return st;
    int32_t n;
    st = within_budget(p, &a, &n);
    attn_problem_free(&a);
    return st ? st : ok(p);
}

/* An input array: not NULL, n elements exactly, finite values representable in dt. */
static flexcheck_status check_input(flexcheck_problem *p, const char *name, const float *x,
                                    size_t n, size_t want, fc_dtype dt)
{
    if (!x && want)
        return fail(p, FLEXCHECK_EINVAL, "%s is NULL", name);
    if (n != want)
        return fail(p, FLEXCHECK_EINVAL, "%s has %zu elements; the problem's shape needs %zu", name,
                    n, want);
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]) || !fc_representable(x[i], dt))
            return fail(p, FLEXCHECK_EINVAL, "%s[%zu] = %.9g is %s", name, i, (double)x[i],
                        isfinite(x[i]) ? "not representable in the problem's dtype"
                                       : "not finite");
    return FLEXCHECK_OK;
}

/* What f wrote into its memory stream, as a string it owns (NULL when out of memory). */
static char *printed(void (*fn)(FILE *, const void *), const void *arg)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return NULL;
    fn(f, arg);
    if (fclose(f)) {
        free(buf);
        return NULL;
    }
    return buf;
}

typedef struct print_args {
    const chk_result *res;
    const judge_case *jc;
} print_args;

static void print_text(FILE *f, const void *arg)
{
    const print_args *a = arg;
    chk_result_print(f, a->res, &(chk_who){NULL, "output", NULL, NULL, NULL}, a->jc);
}

static void print_diag(FILE *f, const void *arg)
{
    const print_args *a = arg;
    if (a->res->diag)
        diag_print(f, a->res->diag, a->jc->prob, "");
    else if (a->res->diag_error[0])
        fprintf(f, "diagnosis: not run: %s\n", a->res->diag_error);
}

/* Where the header's worst element is: the first NaN of out (its error NaN), else the first
 * infinity (+inf), else the verdict's largest finite |err| (the gates' metrics cover finite
 * pairs only, so their worst never points at a NaN). 0 when out has no element. */
static int worst_of(const rep_verdict *v, const float *out, size_t n, size_t dv, size_t *row,
                    size_t *col, double *err)
{
    for (int want_nan = 1; want_nan >= 0; want_nan--)
        for (size_t i = 0; (want_nan ? v->nan_count : v->inf_count) && i < n; i++)
            if (want_nan ? isnan(out[i]) : isinf(out[i])) {
                *row = i / dv;
                *col = i % dv;
                *err = want_nan ? NAN : INFINITY;
                return 1;
            }
    if (!v->compared)
        return 0;
    *row = v->worst_row;
    *col = v->worst_col;
    *err = v->max_err;
    return 1;
}

/* The verdict's accessible parts, once the judging is done (out: what was judged, n elements). */
static flexcheck_status keep(flexcheck_problem *p, flexcheck_verdict *vd, const judge_case *jc,
                             const float *out, size_t n)
{
    const rep_verdict *v = &vd->res.v;
    const attn_problem *a = jc->prob;
    size_t r, col;
    vd->worst_err = -1;
    if (vd->res.outcome != CHK_NOT_JUDGED &&
        worst_of(v, out, n, (size_t)a->dv, &r, &col, &vd->worst_err)) {
        r = judge_full_row(jc, r); /* a sample's row: its place in the whole output */
        size_t lq = (size_t)a->seq.lq;
        vd->worst[0] = (int32_t)(r / lq / (size_t)a->hq);
        vd->worst[1] = (int32_t)(r / lq % (size_t)a->hq);
        vd->worst[2] = (int32_t)(r % lq);
        vd->worst[3] = (int32_t)col;
    }
    /* The findings are the causes the diagnosis claims (whole, then per head), never its
     * partial fits. */
    const diag_report *d = vd->res.diag;
    if (d && d->nexplaining) {
        if (!(vd->findings = calloc(d->nexplaining, sizeof *vd->findings)))
            return fail(p, FLEXCHECK_ENOMEM, "out of memory for the verdict");
        for (size_t i = 0; i < d->nexplaining; i++) {
            const diag_finding *x = &d->findings[i];
            if (i >= d->ncauses && !x->ngroups)
                continue;
            finding *y = &vd->findings[vd->nfindings++];
            snprintf(y->title, sizeof y->title, "%s", x->title);
            y->rows = i < d->ncauses ? x->rows.count : x->group_rows.count;
        }
    }
    print_args pa = {&vd->res, jc};
    if (!(vd->text = printed(print_text, &pa)) || !(vd->diagnosis = printed(print_diag, &pa)))
        return fail(p, FLEXCHECK_ENOMEM, "out of memory for the verdict's text");
    return FLEXCHECK_OK;
}

/* flexcheck_judge's work, with p and verdict checked and p's interrupt flag polled. said: NULL,
 * or the verdict's words on its rows (a failure on a sample's bounds, judged again on every
 * row). */
static flexcheck_status judge_on(flexcheck_problem *p, const float *q, size_t nq,
                                 const float *k, size_t nk, const float *v, size_t nv,
                                 const float *out, size_t nout, const float *lse, size_t nlse,
                                 const char *said, flexcheck_verdict **verdict)
{
    const float *q_all = q, *out_all = out, *lse_all = lse; /* before a sample takes its rows */
    attn_problem a;
    flexcheck_status st = build(p, &a);
    if (st)
        return st;
    int32_t n;
    if ((st = within_budget(p, &a, &n))) {
        attn_problem_free(&a);
        return st;
    }
    size_t no = attn_o_elems(&a), nl = attn_lse_elems(&a);
    if ((st = check_input(p, "q", q, nq, attn_q_elems(&a), p->dtype)) ||
        (st = check_input(p, "k", k, nk, attn_k_elems(&a), p->dtype)) ||
        (st = check_input(p, "v", v, nv, attn_v_elems(&a), p->dtype))) {
        attn_problem_free(&a);
        return st;
    }
    /* k, v and a paged cache set: they must be its gather (no verdict on anything else) */
    diag_paged pgv;
    int paged;
    if ((st = api_paged_view(p, &a, k, v, &pgv, &paged))) {
        attn_problem_free(&a);
        return st;
    }
    int bad_out = nout != no || (!out && no);
    if (bad_out || (lse && nlse != nl) || (!lse && nlse)) {
        st = fail(p, FLEXCHECK_EINVAL, "%s has %zu elements%s; the problem's shape needs %zu",
                  bad_out ? "out" : "lse", bad_out ? nout : nlse,
                  (!out && no) || (!lse && nlse) ? " and is NULL" : "", bad_out ? no : nl);
        attn_problem_free(&a);
        return st;
    }
    fc_err err;
    fc_status fs;
    /* A sample: its rows of q, out and lse, compact ([B, Hq, n, ...]); k and v whole. */
    fix_sample smp = {0};
    ref_tokens t = {0};
    float *qs = NULL, *os = NULL, *ls = NULL;
    if (n < a.seq.lq) {
        if ((fs = fix_sample_tokens(&a, FIX_DEFAULT_BLOCK, n, p->rows_seed, &smp, &err))) {
            attn_problem_free(&a);
            return fail(p, of_fc(fs), "%s", err.msg);
        }
        t = (ref_tokens){smp.tq, smp.n};
        size_t heads = (size_t)a.seq.batch * (size_t)a.hq, rows = heads * (size_t)n;
        qs = malloc(sizeof(float) * (rows * (size_t)a.d + 1));
        os = malloc(sizeof(float) * (rows * (size_t)a.dv + 1));
        ls = lse ? malloc(sizeof(float) * (rows + 1)) : NULL;
        for (size_t r = 0; qs && os && (ls || !lse) && r < rows; r++) {
            size_t whole = r / (size_t)n * (size_t)a.seq.lq + (size_t)smp.tq[r % (size_t)n];
            memcpy(qs + r * (size_t)a.d, q + whole * (size_t)a.d, sizeof(float) * (size_t)a.d);
            memcpy(os + r * (size_t)a.dv, out + whole * (size_t)a.dv,
                   sizeof(float) * (size_t)a.dv);
            if (ls)
                ls[r] = lse[whole];
        }
        q = qs;
        out = os;
        lse = ls;
        no = rows * (size_t)a.dv;
        nl = rows;
    }
    double *o64 = malloc(sizeof(double) * (no + 1)), *l64 = malloc(sizeof(double) * (nl + 1));
    judge_lp lp = {0};
    flexcheck_verdict *vd = calloc(1, sizeof *vd);
    judge_case jc = {.prob = &a, .dtype = p->dtype, .q = q, .k = k, .v = v, .out = o64,
                     .lse = l64, .tokens = t.tq ? &t : NULL};
    if (!o64 || !l64 || !vd || (t.tq && (!qs || !os || (!ls && lse)))) {
        st = fail(p, FLEXCHECK_ENOMEM, "out of memory for the oracle of %zu outputs", no);
    } else if ((fs = ref_attention_f64_at(&a, jc.tokens, q, k, v, o64, l64, &err)) ||
               (fs = judge_baseline(&jc, &lp, &err))) {
        st = fail(p, of_fc(fs), "%s", err.msg);
    } else {
        chk_result *res = &vd->res;
        memset(&res->row, 0, sizeof res->row);
        rep_set_str(res->row.case_id, sizeof res->row.case_id, "judge");
        judge_row_problem(&res->row, &a, p->dtype);
        /* the producer's block mask (if set) is held to the families AND the explicit mask */
        chk_output_in in = {.o = out, .lse = lse, .out_dtype = p->out_dtype,
                            .lse_dtype = p->lse_dtype, .bm = p->has_bm ? &p->bm : NULL};
        in.paged = paged ? &pgv : NULL;
        chk_judge_output(&jc, &lp, &in, res);
        /* The inputs were held to the problem above, so an output not judged is flexcheck's own
         * fault (the gates refusing the oracle or the baseline they were handed, or out of
         * memory in them): no verdict that would read as a failed output. */
        if (res->outcome == CHK_NOT_JUDGED)
            st = fail(p, FLEXCHECK_EINTERNAL, "internal: the output could not be judged: %s",
                      res->row.reason);
        if (t.tq) /* the verdict line says it judged a sample, and what a sample may miss */
            fix_sample_describe(res->sample, sizeof res->sample, a.seq.lq, smp.n, smp.placed,
                                smp.seed);
        if (said)
            fc_fmt(res->sample, sizeof res->sample, "%s", said);
        flexcheck_verdict *all = NULL;
        if (t.tq && res->on_bounds && !fc_cancelled()) {
            /* A failure on the sample's bounds, judged again on every row when they fit the
             * budget, as check does (check/output.c): a sample's bounds can be tighter. */
            char gates[64], conf[sizeof res->sample];
            chk_failed_gates(gates, sizeof gates, &res->v);
            chk_sample_confirmed(conf, sizeof conf, gates, smp.n, a.seq.lq, smp.seed);
            int32_t rows = p->rows;
            p->rows = 0;
            flexcheck_status as = judge_on(p, q_all, nq, k, nk, v, nv, out_all, nout, lse_all,
                                           nlse, conf, &all);
            p->rows = rows;
            if (as == FLEXCHECK_EINTR)
                st = as;
            else if (as)
                chk_sample_unconfirmed(res->sample, sizeof res->sample, gates, p->err);
        }
        /* An interrupt during the diagnosis leaves a verdict without one: none is returned. */
        if (!st && fc_cancelled())
            st = fail(p, FLEXCHECK_EINTR, "%s", strstr(res->diag_error, "in the diagnosis")
                                                     ? "in the diagnosis" : "after the gates");
        if (!st && all) { /* every row's verdict stands for the sample's */
            flexcheck_verdict_free(vd);
            vd = all;
            all = NULL;
        } else if (!st) {
            st = keep(p, vd, &jc, out, no);
        }
        flexcheck_verdict_free(all);
    }
    if (st == FLEXCHECK_OK) {
        *verdict = vd;
        ok(p);
    } else {
        flexcheck_verdict_free(vd);
    }
    free(o64);
    free(l64);
    free(qs);
    free(os);
    free(ls);
    fix_sample_free(&smp);
    judge_lp_free(&lp);
    attn_problem_free(&a);
    return st;
}

EXPORT flexcheck_status flexcheck_judge(flexcheck_problem *p, const float *q, size_t nq,
                                        const float *k, size_t nk, const float *v, size_t nv,
                                        const float *out, size_t nout, const float *lse,
                                        size_t nlse, flexcheck_verdict **verdict)
{
    if (verdict) /* NULL on every failure, a NULL handle's included (the header's promise) */
        *verdict = NULL;
    API_ENTER(p);
    if (!verdict)
        return fail(p, FLEXCHECK_EINVAL, "verdict (the result pointer) is NULL");
    /* The reference and the diagnosis poll p's flag through this thread's cancel.h slot. */
    const int *prev = fc_cancel_set(&p->interrupt);
    flexcheck_status st = judge_on(p, q, nq, k, nk, v, nv, out, nout, lse, nlse, NULL, verdict);
    fc_cancel_set(prev);
    if (st == FLEXCHECK_EINTR) { /* where it stopped, from the step that saw the request */
        char where[sizeof p->err];
        snprintf(where, sizeof where, "%s", p->err);
        fail(p, st, "judge: interrupted (flexcheck_problem_interrupt) %s: no verdict", where);
    }
    /* A request is for the judge it finds running (or the next one): done with, it goes. */
    __atomic_store_n(&p->interrupt, 0, __ATOMIC_RELAXED);
    return st;
}

EXPORT void flexcheck_verdict_free(flexcheck_verdict *v)
{
    if (!v)
        return;
    chk_result_free(&v->res);
    free(v->text);
    free(v->diagnosis);
    free(v->findings);
    free(v);
}

/* ---- the verdict ---- */

EXPORT flexcheck_outcome flexcheck_verdict_outcome(const flexcheck_verdict *v)
{
    return v && v->res.outcome == CHK_PASSED    ? FLEXCHECK_PASS
           : v && v->res.outcome == CHK_OUTSIDE ? FLEXCHECK_OUTSIDE
                                                : FLEXCHECK_FAIL;
}

EXPORT flexcheck_gate_state flexcheck_verdict_gate(const flexcheck_verdict *v, int i,
                                                   const char **name, const char **title,
                                                   const char **reason)
{
    /* Index i is gate H(i+1); reports/tol.h keeps them in evaluation order. */
    static const rep_gate by_number[FLEXCHECK_NGATES] = {REP_H1, REP_H2, REP_H3, REP_H4,
                                                          REP_H5, REP_H6, REP_H7};
    int in = v && i >= 0 && i < FLEXCHECK_NGATES;
    rep_gate g = in ? by_number[i] : REP_H1;
    if (name)
        *name = in ? rep_gate_name(g) : "?";
    if (title)
        *title = in ? rep_gate_title(g) : "?";
    if (reason)
        *reason = in ? v->res.v.why[g] : "";
    return in ? (flexcheck_gate_state)v->res.v.gate[g] : FLEXCHECK_GATE_NOT_RUN;
}

EXPORT const char *flexcheck_verdict_reason(const flexcheck_verdict *v)
{
    if (!v || v->res.outcome == CHK_PASSED)
        return "";
    return v->res.row.reason;
}

EXPORT double flexcheck_verdict_worst(const flexcheck_verdict *v, int32_t coords[4])
{
    if (!v)
        return -1;
    if (coords)
        memcpy(coords, v->worst, sizeof v->worst);
    return v->worst_err;
}

EXPORT double flexcheck_verdict_metric(const flexcheck_verdict *v, const char *name)
{
    if (!v || !name)
        return NAN;
    const rep_verdict *r = &v->res.v;
    const struct {
        const char *name;
        double x;
    } m[] = {{"max_err", r->max_err}, {"mean_err", r->mean_err}, {"rmse", r->rmse},
             {"nmse", r->nmse},       {"e_lp_max", r->e_lp_max}, {"h1_ratio", r->h1_ratio},
             {"floor", r->floor},     {"lse_err", r->lse_err},   {"s1", r->s1},
             {"s2", r->s2}};
    if (v->res.outcome == CHK_NOT_JUDGED || (r->unscaled && strcmp(name, "lse_err")))
        return NAN; /* not judged, or outside the contract: nothing but the LSE measured */
    for (size_t i = 0; i < sizeof m / sizeof m[0]; i++)
        if (!strcmp(name, m[i].name))
            return m[i].x;
    return NAN;
}

EXPORT const char *flexcheck_verdict_diagnosis(const flexcheck_verdict *v)
{
    return v && v->diagnosis ? v->diagnosis : "";
}

EXPORT size_t flexcheck_verdict_nfindings(const flexcheck_verdict *v)
{
    return v ? v->nfindings : 0;
}

EXPORT const char *flexcheck_verdict_finding(const flexcheck_verdict *v, size_t i, size_t *rows)
{
    if (!v || i >= v->nfindings) {
        if (rows)
            *rows = 0;
        return NULL;
    }
    if (rows)
        *rows = v->findings[i].rows;
    return v->findings[i].title;
}

EXPORT const char *flexcheck_verdict_text(const flexcheck_verdict *v)
{
    return v && v->text ? v->text : "";
}
