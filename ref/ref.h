/*
 * ref.h - the naive CPU attention every verdict rests on (docs/semantics.md 1-3,
 * docs/tolerance.md "References"). Obviously right rather than clever: scores through BLAS
 * gemm, the mask applied per row as the interval of allowed keys mask.h gives, checked
 * against mask.h's predicate (never from a block mask), a max-shifted softmax, P.V through
 * BLAS gemm.
 *
 * Inputs are float arrays laid out as problem.h says; for float16/bfloat16 cases they hold
 * values already representable in that dtype. Rows with no allowed key: output exactly 0,
 * LSE -inf (the head's sink with sinks), in every variant. LSE is the natural log of
 * sum(exp(s)) over allowed keys' scores s = scale * q.k (soft-capped when the problem says
 * so), plus exp(sink) with sinks (masks/terms.h, docs/semantics.md section 7). Every variant
 * honours the problem's explicit mask and bias (masks/xterms.h, section 8): a pair is allowed
 * iff the families allow it and the mask does, and the bias is added to the (capped) score; an
 * explicit mask equal to a family's gives bitwise the family's outputs (tests/test_xmask.c).
 *
 * Memory: query rows are processed in panels of REF_PANEL_ROWS = 128 (ref_internal.h); only
 * one panel's scores exist at a time, over the hull of the panel's allowed keys. Scratch per
 * call is at most 128 * Lk * e + Lk * (D + Dv) * e + 128 * D * e + Lk bytes, e = 4 (fp32,
 * fp16, bf16) or 8 (float64) per worker thread: about 200 MB for the oracle at Lk = 64k,
 * D = Dv = 128 (measured: 214 MB peak RSS for a whole 64k x 64k causal oracle run at D = 64,
 * inputs and outputs included), independent of Lq, B and the head counts.
 *
 * Errors: a NULL problem, a problem that fails attn_problem_check (shapes, Hq % Hkv != 0,
 * non-finite scale, ...) or a NULL tensor with elements give FC_EINVAL and a message;
 * FC_ENOMEM when scratch cannot be had; FC_EFAIL if mask_token_range (used only to narrow
 * the key range) is caught disagreeing with the predicate; FC_ECANCELED once the calling
 * thread's cancel flag is set (base/cancel.h; polled between heads of a panel). NaN in an
 * input a row may see reaches that row's output (and LSE, for q and k); NaN or inf in
 * keys/values no row may see never does.
 * Threads: calls of at least 2^24 multiply-adds spread their panels over as many threads
 * as OpenBLAS is set to use (openblas_get_num_threads() when the first of the concurrently
 * running calls entered; OPENBLAS_NUM_THREADS=1 makes everything single-threaded). Each panel
 * runs wholly on one thread with BLAS set to one thread while any reference call runs and
 * restored when the last one leaves (unless someone else set a count meanwhile), so results
 * are bitwise the same for every thread count and any number of concurrent calls
 * (tests/test_ref.c, ref_threads). BLAS called from other code while a reference call runs
 * is single-threaded too.
 */
#ifndef FLEXCHECK_REF_H
#define FLEXCHECK_REF_H

#include "base/fc.h"
#include "masks/problem.h"

#ifdef __cplusplus
extern "C" {
#endif

/* fp32: cblas_sgemm, fp32 softmax. o [B,Hq,Lq,Dv], lse [B,Hq,Lq] (lse may be NULL). */
fc_status ref_attention_f32(const attn_problem *p, const float *q, const float *k,
                            const float *v, float *o, float *lse, fc_err *err);

/* Which expf the fp32 softmax (ref_attention_f32 and _lp) uses on this machine: SLEEF's
 * vectorised one where the CPU has AVX2 and FMA, else libm's (ref/ref_vec.c). */
const char *ref_f32_exp_name(void);

/* The float64 oracle (the fixtures' out/lse): cblas_dgemm, double softmax. */
fc_status ref_attention_f64(const attn_problem *p, const float *q, const float *k,
                            const float *v, double *o, double *lse, fc_err *err);

/* The same-precision baseline O_lp of docs/tolerance.md for dt: K pre-scaled and rounded,
 * S = Q.K^T (fp32 accumulate) rounded to dt, P = softmax(S) in fp32 rounded to dt,
 * O = P.V (fp32 accumulate) rounded to dt. For FC_F32 this is ref_attention_f32.
 * lse (may be NULL) is the fp32 LSE of the rounded scores. */
fc_status ref_attention_lp(const attn_problem *p, fc_dtype dt, const float *q, const float *k,
                           const float *v, float *o, float *lse, fc_err *err);

/* The float32-score baseline of docs/tolerance.md for dt (float16 / bfloat16): the inputs as
 * given, S = scale * Q.K^T accumulated and kept in fp32, P = softmax(S) in fp32 rounded to dt,
 * O = P.V (fp32 accumulate) rounded to dt; lse the fp32 LSE of S. What a kernel that keeps its
 * scores in float32 computes (FlexAttention's and FlashAttention's tiled kernels): the rows on
 * which ref_attention_lp's rounded scores drown the result (scores far larger than the dtype
 * resolves, e.g. around -1e5) are judged against it (reports/tol.h). For FC_F32 this is
 * ref_attention_f32. */
fc_status ref_attention_lp32s(const attn_problem *p, fc_dtype dt, const float *q, const float *k,
                              const float *v, float *o, float *lse, fc_err *err);

/* A selection of query tokens: tq[0 .. n) strictly increasing in [0, Lq), the same for every
 * batch entry and head. The _at calls compute those rows only, from and into compact arrays:
 * q [B, Hq, n, D], o [B, Hq, n, Dv], lse [B, Hq, n] (k and v whole). Each row equals its row
 * of the whole call to the rounding of its panel's products (its panel holds other rows: the
 * key hull, and so the gemms' shapes, may differ). Panels group up to REF_PANEL_ROWS tokens
 * while the hull costs at most about twice the rows' own keys (tokens far apart in a window
 * are panels of their own). NULL or n = Lq with tq[i] = i: the whole call. */
typedef struct ref_tokens {
    const int32_t *tq;
    int32_t n;
} ref_tokens;

fc_status ref_attention_f64_at(const attn_problem *p, const ref_tokens *t, const float *q,
                               const float *k, const float *v, double *o, double *lse,
                               fc_err *err);
fc_status ref_attention_lp_at(const attn_problem *p, fc_dtype dt, const ref_tokens *t,
                              const float *q, const float *k, const float *v, float *o,
                              float *lse, fc_err *err);
fc_status ref_attention_lp32s_at(const attn_problem *p, fc_dtype dt, const ref_tokens *t,
                                 const float *q, const float *k, const float *v, float *o,
                                 float *lse, fc_err *err);

/* Which keys one row may use, for ref_row_f64, key tk being an index into the kv head's key
 * axis: 0 it does not count, 1 it counts with its score, 2 it counts with the rule's
 * masked_score (a masked key a kernel visits and fills wrongly: diag/'s alternatives; the
 * truth never answers 2). */
typedef int (*ref_key_fn)(void *ctx, int32_t tk);

/* How ref_row_f64 forms and weighs one row's scores: the problem's rule for head h
 * (ref_row_rule_of), or an alternative diag/ tries. */
typedef struct ref_row_rule {
    double scale;          /* finite and > 0 */
    fc_dtype round_scores; /* FC_F32: scores stay in double (the oracle); FC_F16 / FC_BF16:
                            * every scaled score rounded to that type before the soft-cap and
                            * the softmax, as a kernel computing q.k in the input type does */
    double softcap;        /* c > 0: s -> c * tanh(s / c); 0 off */
    double sink;           /* the head's sink logit; -inf: no sink */
    double sink_count;     /* how many times the sink's term enters the sum: 1 (the truth) */
    double masked_score;   /* the score of keys the predicate answers 2 for, in place of q.k
                            * (finite); unused by the truth (0 there) */
    double sink_value;     /* every element of the sink's value vector: 0 (the truth: the
                            * sink weighs in the sum only) or what a kernel gave it */
    fc_dtype softmax_dt;   /* FC_F32: the softmax in double (the truth); FC_F16 / FC_BF16: a
                            * softmax in the input type: each p = e^(s - max) rounded to it,
                            * their sum (the sink's rounded term included) rounded to it, P.V
                            * in double as softmax_how says; LSE max + log(sum) */
    unsigned softmax_how;  /* REF_LOWP_* bits: how that softmax is carried out (engines differ;
                            * the diagnosis tries every combination) */
    const float *bias;     /* the row's explicit bias (docs/semantics.md section 8), value tk for
                            * key tk in [0, lk), added after the soft-cap to the score of every
                            * key the predicate answers 1 for; NULL: none (ref_row_rule_at) */
    /* How the bias enters, read only with a bias: the truth's is bias_mul 1 (ref_row_rule_at),
     * after the cap, masked keys without it. The other values are diag/'s alternatives. */
    double bias_mul;       /* every bias value multiplied by this */
    int bias_before_cap;   /* 1: added to the scaled score before the soft-cap */
    int fill_biased;       /* 1: the keys the predicate answers 2 for score masked_score plus
                            * their bias (a score_mod run after the mask's fill) */
} ref_row_rule;

/* A softmax in the input type (ref_row_rule.softmax_dt), the ways engines write one. */
enum {
    /* the sum rounded after every add, in key order (a running sum held in a half register);
     * without it, summed in double and rounded once at the end (a float32 reduction) */
    REF_LOWP_SEQ_SUM = 1,
    /* O = (sum of the rounded p times v) / the rounded sum, divided once at the end (a kernel's
     * acc / l); without it each p / sum rounded to the type before P.V (a softmax, then P.V:
     * JAX's jax.nn.softmax on bfloat16 logits) */
    REF_LOWP_UNNORMALISED = 2,
    /* with REF_LOWP_SEQ_SUM and a sink: the sink's term added after the keys, not before */
    REF_LOWP_SINK_LAST = 4,
    /* every scaled score rounded to the type first, as round_scores rounds it (q.k computed in
     * the input type too); round_scores, when set, rounds them already */
    REF_LOWP_SCORES = 8,
    REF_LOWP_WAYS = 16 /* the combinations: softmax_how < REF_LOWP_WAYS */
};

/* The problem's own rule for query head h: its scale, scores in double, its soft-cap, the
 * head's sink counted once; no explicit bias (ref_row_rule_at adds it). */
ref_row_rule ref_row_rule_of(const attn_problem *p, int32_t h);
/* The same for query token tq of head h of batch entry b, with its row of the problem's explicit
 * bias (NULL without one). p must have passed attn_problem_check, (b, h, tq) be in range. */
ref_row_rule ref_row_rule_at(const attn_problem *p, int32_t b, int32_t h, int32_t tq);

/* The problem's own mask as ref_row_f64's predicate: ctx is a ref_row_key for one row, the
 * answer mask_pair_allowed_x (masks/xterms.h: the families AND the explicit mask) for its key
 * token tk. With ref_row_rule_at this is ref_attention_f64's row. */
typedef struct ref_row_key {
    const attn_problem *p;
    int32_t b, h, tq;
} ref_row_key;
int ref_row_key_allows(void *ctx, int32_t tk);

/* The float64 oracle for one query row against an arbitrary key set: q [D] is the row,
 * k [lk, D] and v [lk, Dv] the keys and values of one kv head (for a packed batch the whole
 * token axis: the predicate decides which sequence's keys count). Scores scale * q.k in
 * double, the rule's soft-cap, a max-shifted softmax in double over the keys `allowed`
 * accepts and the rule's sink, o [Dv] = the weighted sum of their values (and of the sink's,
 * rule->sink_value in every element, 0 for the truth), *lse (may be NULL) the natural-log LSE.
 * A row no key is allowed for gets o = 0 (the sink_value with a sink) and LSE = the sink (-inf
 * without), as in ref_attention_f64. Keys the predicate rejects are never read, so NaN or inf
 * there cannot leak in.
 *
 * It is the oracle for key sets no mask_params describes (a block mask applied as a kernel
 * would, a mask computed with other positions: diag/): with allowed = the row's
 * mask_pair_allowed and the problem's rule it equals ref_attention_f64 to about 1e-15
 * relative (tests/test_ref.c holds it to 1e-12 on the random cases of the brute-force suite,
 * score terms included). Two passes over the keys (the maximum, then the sums), no scratch,
 * no BLAS: O(lk * (D + Dv)) per row, single-threaded.
 * FC_EINVAL (and a message) for D or Dv < 1, lk < 0, a scale that is not finite and > 0, a
 * soft-cap that is not finite and >= 0, a NaN or +inf sink, a masked_score or sink_value
 * that is not finite, a NULL rule or predicate, or a NULL array with elements. */
fc_status ref_row_f64(const float *q, const float *k, const float *v, int32_t lk, int32_t d,
                      int32_t dv, const ref_row_rule *rule, ref_key_fn allowed, void *ctx,
                      double *o, double *lse, fc_err *err);

/* What a kernel's online softmax rescales when its running max rises from m_old to m_new:
 * both the sum and the output accumulator by exp(m_old - m_new) (the algorithm), or a bug's
 * share of that. */
typedef enum ref_rescale {
    REF_RESCALE_BOTH = 0, /* FlashAttention's: the row equals ref_row_f64's up to rounding */
    REF_RESCALE_SUM = 1,  /* the accumulator kept: earlier tiles' values weigh too much, the
                           * LSE stays right */
    REF_RESCALE_NONE = 2, /* neither: the weights and the LSE both off */
} ref_rescale;

/* A kernel's online softmax for the same row: the keys of tiles [tiles[2t], tiles[2t + 1])
 * for t < ntiles, in that order, each tile's keys `allowed` accepts scored as ref_row_f64
 * scores them; a running max, sum and output accumulator, rescaled as `rescale` says when the
 * max rises. REF_RESCALE_BOTH is ref_row_f64's row up to rounding when the tiles hold every
 * allowed key once (tests/test_ref.c); the others are the bugs diag/ names no-rescale-acc and
 * no-rescale. A row with no allowed key in its tiles: o = 0, LSE -inf. FC_EINVAL as
 * ref_row_f64, and for a rule with a sink (not modelled), a tile outside [0, lk), NULL tiles or
 * an unknown rescale. */
fc_status ref_row_online_f64(const float *q, const float *k, const float *v, int32_t lk,
                             int32_t d, int32_t dv, const ref_row_rule *rule, ref_key_fn allowed,
                             void *ctx, const int32_t *tiles, size_t ntiles, ref_rescale rescale,
                             double *o, double *lse, fc_err *err);

#ifdef __cplusplus
}
#endif

#endif
