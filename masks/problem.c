/* problem.c - validation and sizes of an attention call (problem.h). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "masks/problem.h"

/* Every tensor's element count must fit in int64 (the kernels' 64-bit offsets) and size_t. */
static fc_status check_elems(const char *name, size_t a, size_t b, size_t c, size_t d,
                             fc_err *err)
{
    size_t n;
    if (fc_mul4_size(a, b, c, d, &n) || n > (size_t)INT64_MAX / 8)
        return fc_errf(err, FC_EINVAL, "%s has %zu x %zu x %zu x %zu elements: too large", name,
                       a, b, c, d);
    return FC_OK;
}

fc_status attn_problem_check(const attn_problem *p, fc_err *err)
{
    if (!p)
        return fc_errf(err, FC_EINVAL, "attention problem is NULL");
    const seq_info *s = &p->seq;
    if (!s->cu_q || !s->cu_k || s->nseq < 1)
        return fc_errf(err, FC_EINVAL, "problem has no sequence metadata");
    if (s->batch < 1)
        return fc_errf(err, FC_EINVAL, "batch = %d: must be >= 1", (int)s->batch);
    if (s->packed && s->batch != 1)
        return fc_errf(err, FC_EINVAL, "packed sequences need batch == 1, got %d", (int)s->batch);
    if (s->lq < 0 || s->lq > MASK_MAX_LEN || s->lk < 0 || s->lk > MASK_MAX_LEN)
        return fc_errf(err, FC_EINVAL, "lengths Lq = %d, Lk = %d: must be in [0, %d]", (int)s->lq,
                       (int)s->lk, MASK_MAX_LEN);
    /* Every entry, not only the last: a decreasing middle entry would send a sequence's key
     * range past Lk. */
    fc_status cst = seq_check_cu("cu_seqlens_q", s->nseq, s->cu_q, err);
    if (!cst)
        cst = seq_check_cu("cu_seqlens_k", s->nseq, s->cu_k, err);
    if (cst)
        return cst;
    if (s->cu_q[s->nseq] != s->lq || s->cu_k[s->nseq] != s->lk)
        return fc_errf(err, FC_EINVAL, "cu_seqlens end at (%d, %d), lengths are (%d, %d)",
                       (int)s->cu_q[s->nseq], (int)s->cu_k[s->nseq], (int)s->lq, (int)s->lk);
    if (p->hq < 1 || p->hq > ATTN_MAX_HEADS)
        return fc_errf(err, FC_EINVAL, "Hq = %d: must be in [1, %d]", (int)p->hq, ATTN_MAX_HEADS);
    if (p->hkv < 1 || p->hkv > p->hq)
        return fc_errf(err, FC_EINVAL, "Hkv = %d: must be in [1, Hq = %d]", (int)p->hkv,
                       (int)p->hq);
    if (p->hq % p->hkv != 0)
        return fc_errf(err, FC_EINVAL, "Hq %% Hkv != 0 (Hq = %d, Hkv = %d)", (int)p->hq,
                       (int)p->hkv);
    if (p->d < 1 || p->d > ATTN_MAX_HEAD_DIM)
        return fc_errf(err, FC_EINVAL, "D = %d: must be in [1, %d]", (int)p->d,
                       ATTN_MAX_HEAD_DIM);
    if (p->dv < 1 || p->dv > ATTN_MAX_HEAD_DIM)
        return fc_errf(err, FC_EINVAL, "Dv = %d: must be in [1, %d]", (int)p->dv,
                       ATTN_MAX_HEAD_DIM);
    if (!isfinite(p->scale) || !(p->scale > 0))
        return fc_errf(err, FC_EINVAL, "scale = %g: must be finite and > 0", p->scale);
    fc_status st = mask_params_check(&p->mask, err);
    if (!st)
        st = terms_check(&p->terms, p->hq, err);
    if (!st)
        st = check_elems("q", s->batch, p->hq, s->lq, p->d, err);
    if (!st)
        st = check_elems("k", s->batch, p->hkv, s->lk, p->d, err);
    if (!st)
        st = check_elems("v", s->batch, p->hkv, s->lk, p->dv, err);
    if (!st)
        st = check_elems("out", s->batch, p->hq, s->lq, p->dv, err);
    if (!st)
        st = attn_xterms_check(p, err);
    return st;
}

size_t attn_q_elems(const attn_problem *p)
{
    return (size_t)p->seq.batch * p->hq * p->seq.lq * p->d;
}

size_t attn_k_elems(const attn_problem *p)
{
    return (size_t)p->seq.batch * p->hkv * p->seq.lk * p->d;
}

size_t attn_v_elems(const attn_problem *p)
{
    return (size_t)p->seq.batch * p->hkv * p->seq.lk * p->dv;
}

size_t attn_o_elems(const attn_problem *p)
{
    return (size_t)p->seq.batch * p->hq * p->seq.lq * p->dv;
}

size_t attn_lse_elems(const attn_problem *p)
{
    return (size_t)p->seq.batch * p->hq * p->seq.lq;
}

/* a * b, saturating. */
static uint64_t smul(uint64_t a, uint64_t b)
{
    return a && b > UINT64_MAX / a ? UINT64_MAX : a * b;
}

static uint64_t sadd(uint64_t a, uint64_t b)
{
    return b > UINT64_MAX - a ? UINT64_MAX : a + b;
}

/* Query-key pairs the reference's score products cover for one (batch entry, head): every panel
 * of ATTN_PANEL_ROWS query tokens times the hull of its rows' allowed keys. O(Lq) mask
 * evaluations; dense Lq * Lk when the sequences are not known yet (a packed problem read
 * before its cu_seqlens) or the mask is unusable. */
static uint64_t hull_pairs(const attn_problem *p)
{
    int32_t lq = p->seq.lq, lk = p->seq.lk;
    if (lq <= 0 || lk <= 0)
        return 0;
    int32_t cu_q[2] = {0, lq}, cu_k[2] = {0, lk};
    seq_view v = {cu_q, cu_k, 1, lq, lk, 0};
    if (p->seq.packed || p->seq.cu_q) {
        if (!p->seq.cu_q || !p->seq.cu_k || p->seq.nseq < 1)
            return smul((uint64_t)lq, (uint64_t)lk);
        v = seq_info_view(&p->seq);
    }
    fc_err e;
    if (mask_params_check(&p->mask, &e))
        return smul((uint64_t)lq, (uint64_t)lk);
    uint64_t pairs = 0;
    for (int32_t r0 = 0; r0 < lq; r0 += ATTN_PANEL_ROWS) {
        int32_t rows = lq - r0 < ATTN_PANEL_ROWS ? lq - r0 : ATTN_PANEL_ROWS;
        int32_t k0 = INT32_MAX, k1 = INT32_MIN;
        for (int32_t i = 0; i < rows; i++) {
            int32_t lo, hi;
            mask_token_range(p->mask, v, r0 + i, &lo, &hi);
            if (lo < hi) {
                k0 = lo < k0 ? lo : k0;
                k1 = hi > k1 ? hi : k1;
            }
        }
        if (k1 > k0)
            pairs = sadd(pairs, smul((uint64_t)rows, (uint64_t)(k1 - k0)));
    }
    return pairs;
}

attn_cost attn_case_cost(const attn_problem *p, int32_t qb, int32_t kb)
{
    return attn_case_cost_rows(p, qb, kb, p->seq.lq);
}

attn_cost attn_case_cost_rows(const attn_problem *p, int32_t qb, int32_t kb, int32_t n)
{
    uint64_t b = (uint64_t)(p->seq.batch > 0 ? p->seq.batch : 0);
    uint64_t hq = (uint64_t)(p->hq > 0 ? p->hq : 0), hkv = (uint64_t)(p->hkv > 0 ? p->hkv : 0);
    uint64_t lq = (uint64_t)(p->seq.lq > 0 ? p->seq.lq : 0);
    uint64_t lk = (uint64_t)(p->seq.lk > 0 ? p->seq.lk : 0);
    uint64_t nq = n < 0 ? 0 : (uint64_t)n < lq ? (uint64_t)n : lq; /* the rows computed */
    uint64_t d = (uint64_t)(p->d > 0 ? p->d : 0), dv = (uint64_t)(p->dv > 0 ? p->dv : 0);
    uint64_t rows = smul(smul(b, hq), nq), o = smul(rows, dv);
    uint64_t in = sadd(smul(smul(b, hq), smul(nq, d)), smul(smul(b, hkv), smul(lk, d + dv)));
    uint64_t bytes = smul(in, 4);                                /* q, k, v as float */
    bytes = sadd(bytes, smul(sadd(o, rows), 8));                 /* the float64 oracle */
    bytes = sadd(bytes, smul(sadd(smul(o, 4), smul(rows, 3)), 4)); /* o x2, o_lp, rerun; LSEs */
    uint64_t bq = (uint64_t)(qb > 0 ? qb : 16), bk = (uint64_t)(kb > 0 ? kb : 16);
    uint64_t tiles = smul((lq + bq - 1) / bq, (lk + bk - 1) / bk);
    bytes = sadd(bytes, smul(tiles, 3 * 4 * 4));                 /* three masks, 4 int32 arrays */
    uint64_t scratch = sadd(sadd(smul(128, smul(lk, 9)), smul(lk, smul(d + dv, 8))),
                            smul(128, smul(d, 8)));              /* ref.h, e = 8 */
    bytes = sadd(bytes, smul(scratch, 2));
    uint64_t xbytes = attn_xterms_bytes(p);
    bytes = sadd(bytes, xbytes);                                 /* counted whole (problem.h) */
    uint64_t work = smul(smul(b, hq), hull_pairs(p)), per = d + dv;
    /* A sample's panels group tokens while their hull stays within about twice the rows' own
     * keys (ref.h, ref_tokens): twice the whole's share of them bounds it. */
    if (nq < lq && lq > 0)
        work = smul(work / lq + 1, smul(2, nq)) < work ? smul(work / lq + 1, smul(2, nq)) : work;
    /* each pair's multiply-adds, and with explicit terms its bias add and mask test */
    work = smul(work, sadd(per, xbytes ? 1 : 0));
    attn_cost c = {bytes, work, xbytes};
    return c;
}

void attn_row_where(char *buf, size_t cap, const attn_problem *p, size_t row, int64_t d)
{
    size_t lq = (size_t)(p->seq.lq > 0 ? p->seq.lq : 1), hq = (size_t)(p->hq > 0 ? p->hq : 1);
    size_t b = row / (lq * hq), h = row / lq % hq, q = row % lq;
    int n = d >= 0 ? snprintf(buf, cap, "(b, h, q, d) = (%zu, %zu, %zu, %lld)", b, h, q,
                              (long long)d)
                   : snprintf(buf, cap, "(b, h, q) = (%zu, %zu, %zu)", b, h, q);
    if (n < 0 || (size_t)n >= cap || !p->seq.packed || !p->seq.cu_q || p->seq.nseq < 1)
        return;
    int32_t s = seq_find(p->seq.cu_q, p->seq.nseq, (int32_t)q);
    snprintf(buf + n, cap - (size_t)n, ", sequence %d position %d", (int)s,
             (int)((int32_t)q - p->seq.cu_q[s]));
}

void attn_problem_free(attn_problem *p)
{
    seq_free(&p->seq);
}

/* The named length thresholds (problem.h): where each lies and what crosses it. */
int attn_thresholds(const attn_problem *p, int32_t qb, attn_threshold *out)
{
    int n = 0;
    for (int e = 13; e <= 17; e++) {
        out[n].at = (int64_t)1 << e;
        if (e == 13)
            fc_fmt(out[n++].what, sizeof out->what, "2^13 (8,192: a split-K boundary)");
        else
            fc_fmt(out[n++].what, sizeof out->what, "2^%d (where a%s index wraps)", e,
                   e == 15 ? "n int16" : e == 16 ? " 16-bit" : e == 14 ? " 14-bit" : " 17-bit");
    }
    out[n].at = 46341;
    fc_fmt(out[n++].what, sizeof out->what, "46,341 (46,341^2 > 2^31: a mask's L^2 index)");
    for (int kv = 0; kv < 2; kv++) {
        int32_t h = kv ? p->hkv : p->hq;
        if (h > 0 && p->d > 0) {
            out[n].at = ((int64_t)1 << 31) / ((int64_t)h * p->d);
            fc_fmt(out[n++].what, sizeof out->what, "2^31 / (%s D) (an int32 offset of a "
                   "token's row)", kv ? "Hkv" : "Hq");
        }
    }
    if (p->seq.lk > 0) {
        out[n].at = ((int64_t)1 << 32) / p->seq.lk;
        fc_fmt(out[n++].what, sizeof out->what, "2^32 / Lk (an int32 index of an [L, Lk] mask)");
    }
    /* a launch grid's cap: 65,535 blocks of the query tile's rows, or of one row each (a
     * kernel launching a block per query row) */
    int32_t rows[2] = {qb > 0 ? qb : 128, 1};
    for (int i = 0; i < 2; i++) {
        out[n].at = (int64_t)65535 * rows[i];
        fc_fmt(out[n++].what, sizeof out->what, "65,535 x %d (a launch grid capped at 65,535 "
               "blocks of %d query row%s)", (int)rows[i], (int)rows[i], rows[i] == 1 ? "" : "s");
    }
    return n;
}
