/* seq.c - sequence metadata: dense and packed batches (seq.h). */
#include <stdlib.h>
#include <string.h>

#include "masks/seq.h"

static fc_status seq_alloc(seq_info *s, int32_t nseq, fc_err *err)
{
    memset(s, 0, sizeof *s);
    s->cu_q = malloc(sizeof(int32_t) * ((size_t)nseq + 1));
    s->cu_k = malloc(sizeof(int32_t) * ((size_t)nseq + 1));
    if (!s->cu_q || !s->cu_k) {
        seq_free(s);
        return fc_errf(err, FC_ENOMEM, "out of memory for %d sequences", (int)nseq);
    }
    s->nseq = nseq;
    return FC_OK;
}

fc_status seq_init_dense(seq_info *s, int32_t batch, int32_t lq, int32_t lk, fc_err *err)
{
    memset(s, 0, sizeof *s);
    if (batch < 1)
        return fc_errf(err, FC_EINVAL, "batch = %d: must be >= 1", (int)batch);
    if (lq < 0 || lq > MASK_MAX_LEN)
        return fc_errf(err, FC_EINVAL, "lq = %d: must be in [0, %d]", (int)lq, MASK_MAX_LEN);
    if (lk < 0 || lk > MASK_MAX_LEN)
        return fc_errf(err, FC_EINVAL, "lk = %d: must be in [0, %d]", (int)lk, MASK_MAX_LEN);
    fc_status st = seq_alloc(s, 1, err);
    if (st)
        return st;
    s->batch = batch;
    s->lq = lq;
    s->lk = lk;
    s->cu_q[0] = 0;
    s->cu_q[1] = lq;
    s->cu_k[0] = 0;
    s->cu_k[1] = lk;
    return FC_OK;
}

fc_status seq_check_cu(const char *name, int32_t nseq, const int32_t *cu, fc_err *err)
{
    if (cu[0] != 0)
        return fc_errf(err, FC_EINVAL, "%s[0] = %d: must be 0", name, (int)cu[0]);
    for (int32_t i = 1; i <= nseq; i++) {
        if (cu[i] < cu[i - 1])
            return fc_errf(err, FC_EINVAL, "%s[%d] = %d < %s[%d] = %d: must be non-decreasing",
                           name, (int)i, (int)cu[i], name, (int)(i - 1), (int)cu[i - 1]);
        if (cu[i] > MASK_MAX_LEN)
            return fc_errf(err, FC_EINVAL, "%s[%d] = %d: exceeds the maximum length %d", name,
                           (int)i, (int)cu[i], MASK_MAX_LEN);
    }
    return FC_OK;
}

fc_status seq_init_packed(seq_info *s, int32_t nseq, const int32_t *cu_q, const int32_t *cu_k,
                          fc_err *err)
{
    memset(s, 0, sizeof *s);
    if (nseq < 1 || nseq > MASK_MAX_LEN)
        return fc_errf(err, FC_EINVAL, "number of sequences = %d: must be in [1, %d]",
                       (int)nseq, MASK_MAX_LEN);
    if (!cu_q || !cu_k)
        return fc_errf(err, FC_EINVAL, "cu_seqlens_q and cu_seqlens_k must both be given");
    fc_status st = seq_check_cu("cu_seqlens_q", nseq, cu_q, err);
    if (!st)
        st = seq_check_cu("cu_seqlens_k", nseq, cu_k, err);
    if (st)
        return st;
    st = seq_alloc(s, nseq, err);
    if (st)
        return st;
    memcpy(s->cu_q, cu_q, sizeof(int32_t) * ((size_t)nseq + 1));
    memcpy(s->cu_k, cu_k, sizeof(int32_t) * ((size_t)nseq + 1));
    s->batch = 1;
    s->packed = 1;
    s->lq = cu_q[nseq];
    s->lk = cu_k[nseq];
    return FC_OK;
}

fc_status seq_copy(seq_info *dst, const seq_info *src, fc_err *err)
{
    fc_status st = seq_alloc(dst, src->nseq, err);
    if (st)
        return st;
    dst->batch = src->batch;
    dst->lq = src->lq;
    dst->lk = src->lk;
    dst->packed = src->packed;
    memcpy(dst->cu_q, src->cu_q, sizeof(int32_t) * ((size_t)src->nseq + 1));
    memcpy(dst->cu_k, src->cu_k, sizeof(int32_t) * ((size_t)src->nseq + 1));
    return FC_OK;
}

void seq_free(seq_info *s)
{
    free(s->cu_q);
    free(s->cu_k);
    s->cu_q = s->cu_k = NULL;
    s->nseq = 0;
}
