/*
 * ref.c - the reference attention's front half (ref.h): input checks, scratch, and the loop
 * over query panels. For each panel of REF_PANEL_ROWS query tokens it
 *   1. finds each row's allowed keys as one interval [lo, hi) of key tokens
 *      (mask_token_range) and the panel's key hull, the union's bounds,
 *   2. checks each row's interval against the predicate mask_pair_allowed (below), once for
 *      all batch entries and heads (the mask depends on neither),
 *   3. with an explicit mask (docs/semantics.md section 8), narrows each row's interval to
 *      the first and last key any (b, h) slice of the mask allows, before the hull is taken,
 *   4. hands the panel to the per-head pipeline (ref_f32.c or ref_f64.c) for every (b, h),
 *      which computes scores over the hull and lets each row use its interval, narrowed to
 *      its own slice of the explicit mask with the keys the mask refuses inside it filtered
 *      out (ref_row_x), and the explicit bias added to each score.
 * The predicate stays the definition: a row's allowed keys are one interval (every term of
 * docs/semantics.md section 2 allows an interval of positions), so the predicate allowing an
 * interval's first and last key and rejecting the keys just outside it makes the interval
 * exactly the allowed set, and an off-by-one of the range function is an FC_EFAIL, never a
 * silently dropped or leaked key. tests/test_ref.c's brute force never calls the range
 * function.
 */
#include <cblas.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/cancel.h"
#include "ref/ref_internal.h"

/* NULL is fine for a tensor with no elements (callers may pass malloc(0)). */
static fc_status check_tensor(const char *name, const void *ptr, size_t elems, fc_err *err)
{
    if (!ptr && elems > 0)
        return fc_errf(err, FC_EINVAL, "%s is NULL but has %zu elements", name, elems);
    return FC_OK;
}

/* The token selection t (NULL: every token) is strictly increasing in [0, Lq); q and o hold
 * its rows (ref.h). */
static fc_status check_call(const attn_problem *p, const ref_tokens *t, const float *q,
                            const float *k, const float *v, const void *o, fc_err *err)
{
    if (!p)
        return fc_errf(err, FC_EINVAL, "reference attention: problem is NULL");
    fc_status st = attn_problem_check(p, err);
    if (st)
        return st;
    size_t lq = (size_t)(p->seq.lq > 0 ? p->seq.lq : 1), n = t ? (size_t)t->n : lq;
    if (t && (t->n < 0 || (t->n && !t->tq)))
        return fc_errf(err, FC_EINVAL, "reference attention: %d query tokens, list %s", (int)t->n,
                       t->tq ? "given" : "NULL");
    for (int32_t i = 0; t && i < t->n; i++)
        if (t->tq[i] < 0 || t->tq[i] >= p->seq.lq || (i && t->tq[i] <= t->tq[i - 1]))
            return fc_errf(err, FC_EINVAL, "reference attention: query token %d at %d: the "
                           "tokens must increase within [0, Lq = %d)", (int)t->tq[i], (int)i,
                           (int)p->seq.lq);
    /* q and o hold n of every Lq rows: their element counts scaled so */
    st = check_tensor("q", q, attn_q_elems(p) / lq * n, err);
    if (!st)
        st = check_tensor("k", k, attn_k_elems(p), err);
    if (!st)
        st = check_tensor("v", v, attn_v_elems(p), err);
    if (!st)
        st = check_tensor("out", o, attn_o_elems(p) / lq * n, err);
    return st;
}

static void free_scratch(ref_call *c)
{
    free(c->s);
    free(c->qbuf);
    free(c->kbuf);
    free(c->vbuf);
    c->s = c->qbuf = c->kbuf = c->vbuf = NULL;
}

/* One panel's worth of scratch; elem is sizeof(float) or sizeof(double). The +1 keeps
 * malloc's argument non-zero when Lk = 0. */
static fc_status alloc_scratch(ref_call *c, size_t elem, fc_err *err)
{
    const attn_problem *p = c->p;
    size_t lk = (size_t)p->seq.lk + 1, ns, nq, nk, nv;
    if (fc_mul3_size(REF_PANEL_ROWS, lk, elem, &ns) || fc_mul3_size(lk, (size_t)p->d, elem, &nk) ||
        fc_mul3_size(lk, (size_t)p->dv, elem, &nv) ||
        fc_mul3_size(REF_PANEL_ROWS, (size_t)p->d, elem, &nq))
        return fc_errf(err, FC_ENOMEM, "reference scratch size overflows (Lk = %d)",
                       (int)p->seq.lk);
    c->s = malloc(ns);
    c->qbuf = malloc(nq);
    c->kbuf = malloc(nk);
    c->vbuf = malloc(nv);
    if (!c->s || !c->qbuf || !c->kbuf || !c->vbuf) {
        free_scratch(c);
        return fc_errf(err, FC_ENOMEM, "out of memory for reference scratch (%zu bytes)",
                       ns + nq + nk + nv);
    }
    return FC_OK;
}

/* Step 1: each row's keys the families allow, [lo, hi) of key tokens (mask_token_range). */
static void panel_spans(const ref_call *c, ref_panel *pn)
{
    for (int32_t i = 0; i < pn->rows; i++)
        mask_token_range(c->p->mask, c->view, ref_token(pn, i), &pn->span[i].lo,
                         &pn->span[i].hi);
}

/* Step 1 with an explicit mask: span sp (key tokens) of query token tq narrowed to the hull of
 * the keys any (b, h) slice of the mask allows in it (docs/semantics.md section 8); empty when
 * no slice allows any. Each slice searches only outside the hull found so far, so the cost is
 * about one scan of the span per row however many slices there are. */
static ref_span narrow_span(const attn_xmask *m, int32_t tq, ref_span sp)
{
    int32_t lo = sp.hi, hi = sp.lo; /* empty until a slice allows a key */
    for (int32_t b = 0; b < m->bm; b++)
        for (int32_t h = 0; h < m->hm; h++) {
            const uint8_t *row = xmask_row(*m, b, h, tq);
            int32_t f = xmask_first(row, sp.lo, lo);
            lo = f < lo ? f : lo;
            int32_t e = xmask_end(row, hi > sp.lo ? hi : sp.lo, sp.hi);
            hi = e > hi ? e : hi;
        }
    ref_span out = {lo, hi};
    if (lo >= hi)
        out.lo = out.hi = sp.lo;
    return out;
}

/* Step 2: the predicate agrees with each row's span: it allows the span's first and last key
 * and rejects the key just outside either end, which, a row's allowed keys being one
 * interval, makes the span exactly the allowed set. A row with an empty span must have no
 * allowed key at all; checking that takes a scan of its sequence's keys: (Lq - Lk) * Lk
 * predicate calls for causal rows with Lq > Lk (whose first Lq - Lk rows see nothing), which
 * at Lq >> Lk can outweigh the call's products. mask_row_allows refuses keys outside the row's
 * sequence, which lies inside [0, Lk), so it stands for mask_pair_allowed at the ends too. */
static fc_status check_span(const ref_call *c, int32_t tq, const ref_span *sp, fc_err *err)
{
    const mask_params m = c->p->mask;
    const mask_row r = mask_row_of(c->view, tq);
    int ok = 1;
    if (sp->lo < sp->hi) {
        ok = mask_row_allows(m, r, sp->lo) && mask_row_allows(m, r, sp->hi - 1) &&
             !mask_row_allows(m, r, sp->lo - 1) && !mask_row_allows(m, r, sp->hi);
    } else {
        for (int32_t tk = r.k0; ok && tk < r.k1; tk++)
            ok = !mask_row_allows(m, r, tk);
    }
    if (!ok)
        return fc_errf(err, FC_EFAIL,
                       "mask_token_range disagrees with mask_pair_allowed at query token %d "
                       "(range [%d, %d))",
                       (int)tq, (int)sp->lo, (int)sp->hi);
    return FC_OK;
}

/* Steps 1 and 2 for a panel, the explicit mask's narrowing, the hull (the spans' union's
 * bounds), the spans relative to it, and which keys some row's span holds (rows x span bytes
 * of memset: a small fraction of one gemm's work). */
static fc_status panel_mask(const ref_call *c, ref_panel *pn, uint8_t *seen, fc_err *err)
{
    panel_spans(c, pn);
    const attn_xmask *xm = &c->p->xmask;
    int32_t k0 = INT32_MAX, k1 = INT32_MIN;
    for (int32_t i = 0; i < pn->rows; i++) {
        ref_span *sp = &pn->span[i];
        fc_status st = check_span(c, ref_token(pn, i), sp, err);
        if (st)
            return st;
        if (xm->bits && sp->lo < sp->hi)
            *sp = narrow_span(xm, ref_token(pn, i), *sp);
        if (sp->lo < sp->hi) {
            k0 = sp->lo < k0 ? sp->lo : k0;
            k1 = sp->hi > k1 ? sp->hi : k1;
        }
    }
    pn->k0 = k1 > k0 ? k0 : 0;
    pn->n = k1 > k0 ? k1 - k0 : 0;
    for (int32_t i = 0; i < pn->rows; i++) {
        ref_span *sp = &pn->span[i];
        if (sp->lo < sp->hi) {
            sp->lo -= pn->k0;
            sp->hi -= pn->k0;
        } else {
            sp->lo = sp->hi = 0;
        }
    }
    size_t n = (size_t)pn->n;
    memset(seen, 0, n);
    for (int32_t i = 0; i < pn->rows; i++)
        memset(seen + pn->span[i].lo, 1, (size_t)(pn->span[i].hi - pn->span[i].lo));
    pn->all_seen = memchr(seen, 0, n) == NULL;
    pn->seen = seen;
    return FC_OK;
}

typedef void (*ref_head_fn)(ref_call *c, const ref_panel *pn, int32_t b, int32_t h);

/* Step 4: every batch entry and head of panels first, first + stride, ... of the call's panel
 * list, so several workers can share the panels without sharing a row. */
static fc_status run_panels(ref_call *c, ref_head_fn head, int32_t first, int32_t stride,
                            fc_err *err)
{
    const attn_problem *p = c->p;
    uint8_t *seen = malloc((size_t)p->seq.lk + 1);
    fc_status st = FC_OK;
    if (!seen)
        st = fc_errf(err, FC_ENOMEM, "out of memory for a panel's %d seen keys", (int)p->seq.lk);
    for (int32_t pi = first; !st && pi < c->npanels; pi += stride) {
        ref_panel pn = {.r0 = c->panels[pi].r0, .rows = c->panels[pi].rows, .tq = c->tq};
        st = panel_mask(c, &pn, seen, err);
        if (st)
            break;
        /* A caller's interrupt (base/cancel.h) is seen between heads: one head of one panel
         * is the longest the reference runs without looking. */
        for (int32_t b = 0; b < p->seq.batch && !st; b++)
            for (int32_t h = 0; h < p->hq && !st; h++) {
                if (fc_cancelled())
                    st = fc_errf(err, FC_ECANCELED, "in the reference (%s)",
                                 c->o64 ? "the float64 oracle" : "the baseline");
                else
                    head(c, &pn, b, h);
            }
        if (st)
            break;
        fc_progress_step(c->progress, 1, first == 0); /* the first worker reports */
    }
    free(seen);
    return st;
}

/* One worker: its share of the panels, with scratch of its own. */
typedef struct ref_worker {
    ref_call call;
    ref_head_fn head;
    size_t elem;
    int32_t first, stride;
    const int *cancel; /* the caller's cancel flag, polled from this worker's thread too */
    fc_status st;
    fc_err err;
} ref_worker;

static void *worker_main(void *arg)
{
    ref_worker *w = arg;
    const int *prev = fc_cancel_set(w->cancel);
    w->st = alloc_scratch(&w->call, w->elem, &w->err);
    if (!w->st)
        w->st = run_panels(&w->call, w->head, w->first, w->stride, &w->err);
    free_scratch(&w->call);
    fc_cancel_set(prev);
    return NULL;
}

/* As many workers as OpenBLAS was told to use, for runs big enough to be worth a thread
 * (below REF_THREAD_MIN_WORK multiply-adds a call takes well under a millisecond). */
static int32_t worker_count(const ref_call *c, int blas_threads)
{
    const attn_problem *p = c->p;
    int64_t panels = c->npanels;
    double work = (double)p->seq.batch * p->hq * c->nrows * p->seq.lk * (p->d + p->dv);
    if (blas_threads <= 1 || panels < 2 || work < REF_THREAD_MIN_WORK)
        return 1;
    int64_t n = blas_threads < panels ? blas_threads : panels;
    return (int32_t)(n < REF_MAX_THREADS ? n : REF_MAX_THREADS);
}

/* OpenBLAS's thread count is process-wide, and calls may run concurrently (the gate's
 * --jobs). While any call is active BLAS stays single-threaded, and every call sizes its own
 * workers by the count the caller had set when the first of them entered: the last to leave
 * restores it. (Each call saving and restoring the count itself let one call see another's
 * temporary 1, or run its sgemm after another had restored 4: different bits.) The restore
 * happens only while the count still reads the 1 set here: in an engine's process (the
 * public API) another thread of the host may set its own count while a judge runs, and that
 * setting is the host's to keep. OpenBLAS 0.3.21 (Debian 12) has no per-thread count to use
 * instead; openblas_set_num_threads_local came with 0.3.26. */
static pthread_mutex_t blas_mu = PTHREAD_MUTEX_INITIALIZER;
static int blas_active, blas_saved = 1;

static int blas_enter(void)
{
    pthread_mutex_lock(&blas_mu);
    if (blas_active++ == 0) {
        blas_saved = openblas_get_num_threads();
        if (blas_saved > 1)
            openblas_set_num_threads(1);
    }
    int n = blas_saved;
    pthread_mutex_unlock(&blas_mu);
    return n;
}

static void blas_leave(void)
{
    pthread_mutex_lock(&blas_mu);
    if (--blas_active == 0 && blas_saved > 1 && openblas_get_num_threads() == 1)
        openblas_set_num_threads(blas_saved);
    pthread_mutex_unlock(&blas_mu);
}

/* Runs the panels on worker_count() threads, each panel wholly on one thread with BLAS
 * single-threaded, so the result is bitwise the same for every thread count (OpenBLAS's own
 * threading is not: its sgemm changes in the last bits with the thread count). */
static fc_status run(ref_call *c, size_t elem, ref_head_fn head, fc_err *err)
{
    fc_progress pr;
    fc_progress_start(&pr, "reference", (uint64_t)c->npanels);
    c->progress = &pr;
    int blas_threads = blas_enter();
    int32_t n = worker_count(c, blas_threads);
    ref_worker w[REF_MAX_THREADS];
    pthread_t tid[REF_MAX_THREADS];
    int started[REF_MAX_THREADS] = {0};
    for (int32_t i = 0; i < n; i++)
        w[i] = (ref_worker){.call = *c, .head = head, .elem = elem, .first = i, .stride = n,
                            .cancel = fc_cancel_get()};
    if (n == 1)
        worker_main(&w[0]);
    for (int32_t i = 0; n > 1 && i < n; i++) {
        started[i] = pthread_create(&tid[i], NULL, worker_main, &w[i]) == 0;
        if (!started[i])
            w[i].st = fc_errf(&w[i].err, FC_ENOMEM, "could not start reference thread %d of %d",
                              (int)i, (int)n);
    }
    for (int32_t i = 0; n > 1 && i < n; i++)
        if (started[i])
            pthread_join(tid[i], NULL);
    blas_leave();
    for (int32_t i = 0; i < n; i++)
        if (w[i].st) {
            if (err)
                *err = w[i].err;
            return w[i].st;
        }
    return FC_OK;
}

/* The panels of the call's rows: REF_PANEL_ROWS consecutive tokens each for every token; for a
 * selection, up to REF_PANEL_ROWS tokens while the panel's cost (rows x key hull) stays within
 * twice its rows' own allowed keys, plus REF_PANEL_ROWS keys a row of slack (tokens far apart
 * under a window go to panels of their own). */
static fc_status plan_panels(ref_call *c, ref_prange **out, fc_err *err)
{
    int32_t n = c->nrows;
    ref_prange *pr = malloc(sizeof *pr * ((size_t)n + 1));
    if (!pr)
        return fc_errf(err, FC_ENOMEM, "out of memory for %d query panels", (int)n);
    int32_t np = 0;
    for (int32_t i = 0; i < n;) {
        int32_t k0 = INT32_MAX, k1 = INT32_MIN, rows = 0;
        uint64_t own = 0;
        while (i + rows < n && rows < REF_PANEL_ROWS) {
            int32_t lo, hi, a = k0, b = k1;
            mask_token_range(c->p->mask, c->view, c->tq ? c->tq[i + rows] : i + rows, &lo, &hi);
            if (c->tq && c->p->xmask.bits && lo < hi) { /* the spans panel_mask will use */
                ref_span sp = narrow_span(&c->p->xmask, c->tq[i + rows], (ref_span){lo, hi});
                lo = sp.lo;
                hi = sp.hi;
            }
            if (lo < hi) {
                a = lo < a ? lo : a;
                b = hi > b ? hi : b;
            }
            uint64_t span = lo < hi ? (uint64_t)(hi - lo) : 0, hull = b > a ? (uint64_t)(b - a) : 0;
            if (c->tq && rows > 0 &&
                (uint64_t)(rows + 1) * hull > 2 * (own + span) + (uint64_t)(rows + 1) * REF_PANEL_ROWS)
                break;
            k0 = a;
            k1 = b;
            own += span;
            rows++;
        }
        pr[np++] = (ref_prange){i, rows};
        i += rows;
    }
    *out = pr;
    c->npanels = np;
    c->panels = pr;
    return FC_OK;
}

/* One call on the rows of t (NULL: every query token). */
static fc_status call_at(ref_call *c, const ref_tokens *t, size_t elem, ref_head_fn head,
                         fc_err *err)
{
    fc_status st = check_call(c->p, t, c->q, c->k, c->v, c->o32 ? (const void *)c->o32
                                                                 : (const void *)c->o64, err);
    if (st)
        return st;
    c->tq = t ? t->tq : NULL;
    c->nrows = t ? t->n : c->p->seq.lq;
    c->view = seq_info_view(&c->p->seq);
    ref_prange *pr = NULL;
    if ((st = plan_panels(c, &pr, err)))
        return st;
    st = run(c, elem, head, err);
    free(pr);
    return st;
}

fc_status ref_attention_f32(const attn_problem *p, const float *q, const float *k,
                            const float *v, float *o, float *lse, fc_err *err)
{
    ref_call c = {.p = p, .q = q, .k = k, .v = v, .dt = FC_F32, .o32 = o, .lse32 = lse};
    return call_at(&c, NULL, sizeof(float), ref_head_f32, err);
}

fc_status ref_attention_f64_at(const attn_problem *p, const ref_tokens *t, const float *q,
                               const float *k, const float *v, double *o, double *lse,
                               fc_err *err)
{
    ref_call c = {.p = p, .q = q, .k = k, .v = v, .dt = FC_F32, .o64 = o, .lse64 = lse};
    return call_at(&c, t, sizeof(double), ref_head_f64, err);
}

fc_status ref_attention_f64(const attn_problem *p, const float *q, const float *k,
                            const float *v, double *o, double *lse, fc_err *err)
{
    return ref_attention_f64_at(p, NULL, q, k, v, o, lse, err);
}

/* The float pipeline at dt: float32's reference, or the float16/bfloat16 baselines, which share
 * everything but where the scores are rounded. */
static fc_status attention_lp(const attn_problem *p, fc_dtype dt, int scores32,
                              const ref_tokens *t, const float *q, const float *k, const float *v,
                              float *o, float *lse, fc_err *err)
{
    if (dt != FC_F32 && dt != FC_F16 && dt != FC_BF16)
        return fc_errf(err, FC_EINVAL, "low-precision baseline: unknown dtype %d", (int)dt);
    ref_call c = {.p = p, .q = q, .k = k, .v = v, .dt = dt, .scores32 = dt != FC_F32 && scores32,
                  .o32 = o, .lse32 = lse};
    return call_at(&c, t, sizeof(float), ref_head_f32, err);
}

fc_status ref_attention_lp(const attn_problem *p, fc_dtype dt, const float *q, const float *k,
                           const float *v, float *o, float *lse, fc_err *err)
{
    return attention_lp(p, dt, 0, NULL, q, k, v, o, lse, err);
}

fc_status ref_attention_lp32s(const attn_problem *p, fc_dtype dt, const float *q, const float *k,
                              const float *v, float *o, float *lse, fc_err *err)
{
    return attention_lp(p, dt, 1, NULL, q, k, v, o, lse, err);
}

fc_status ref_attention_lp_at(const attn_problem *p, fc_dtype dt, const ref_tokens *t,
                              const float *q, const float *k, const float *v, float *o,
                              float *lse, fc_err *err)
{
    return attention_lp(p, dt, 0, t, q, k, v, o, lse, err);
}

fc_status ref_attention_lp32s_at(const attn_problem *p, fc_dtype dt, const ref_tokens *t,
                                 const float *q, const float *k, const float *v, float *o,
                                 float *lse, fc_err *err)
{
    return attention_lp(p, dt, 1, t, q, k, v, o, lse, err);
}
