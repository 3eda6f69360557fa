/*
 * seq.h - host-side owner of sequence metadata (docs/semantics.md section 1): a dense batch
 * of B entries, each one sequence of lq queries and lk keys, or a packed varlen batch
 * (B == 1, cu_seqlens_q/k cutting the token axes into R sequences, vLLM's layout).
 * seq_info owns its cu arrays; seq_info_view() gives the plain seq_view of mask.h that the
 * predicate, the builders and the kernels read.
 */
#ifndef FLEXCHECK_SEQ_H
#define FLEXCHECK_SEQ_H

#include "base/fc.h"
#include "masks/mask.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct seq_info {
    int32_t batch;  /* B (1 when packed) */
    int32_t nseq;   /* sequences per batch entry: 1 when dense, R when packed */
    int32_t lq, lk; /* stored token-axis lengths of one batch entry */
    int32_t packed; /* 1 when built from cu_seqlens */
    int32_t *cu_q;  /* [nseq + 1], owned */
    int32_t *cu_k;  /* [nseq + 1], owned */
} seq_info;

/* Dense batch: B entries of lq queries and lk keys. 0 <= lq, lk <= MASK_MAX_LEN, B >= 1. */
fc_status seq_init_dense(seq_info *s, int32_t batch, int32_t lq, int32_t lk, fc_err *err);
/* Packed batch from cu_seqlens (copied): nseq >= 1, both start at 0, non-decreasing, last
 * entries define lq and lk (<= MASK_MAX_LEN). */
fc_status seq_init_packed(seq_info *s, int32_t nseq, const int32_t *cu_q, const int32_t *cu_k,
                          fc_err *err);
/* cu[0] == 0, non-decreasing, every entry <= MASK_MAX_LEN; `name` goes in the message. */
fc_status seq_check_cu(const char *name, int32_t nseq, const int32_t *cu, fc_err *err);
/* Deep copy. */
fc_status seq_copy(seq_info *dst, const seq_info *src, fc_err *err);
void seq_free(seq_info *s);

static inline seq_view seq_info_view(const seq_info *s)
{
    seq_view v = {s->cu_q, s->cu_k, s->nseq, s->lq, s->lk, 0};
    return v;
}

#ifdef __cplusplus
}
#endif

#endif
