/*
 * mask.h - THE definition of which (query, key) pairs attention may use
 * (docs/semantics.md sections 1-2). Shared verbatim by the CPU reference (ref/), the block-mask
 * builders (masks/) and the CUDA kernels (gpu/, compiled by nvcc or by g++ for the emu
 * backend), so that there is exactly one place a window or a chunk can be off by one. An explicit
 * mask (docs/semantics.md section 8) is ANDed with this predicate: masks/xterms.h,
 * mask_pair_allowed_x.
 *
 * Rules for this header: no allocation, no libc beyond <stdint.h>, no globals; every function
 * is MASK_HD so it exists on host and device. Positions are int32 (sequence lengths are bounded
 * by MASK_MAX_LEN, checked at every entry point); differences and window edges are computed in
 * int64 so W or C up to INT32_MAX never overflows.
 */
#ifndef FLEXCHECK_MASK_H
#define FLEXCHECK_MASK_H

#include <stdint.h>

#if defined(__CUDACC__)
#define MASK_HD static __host__ __device__ __forceinline__
#else
#define MASK_HD static inline
#endif

#if defined(__cplusplus)
#define MASK_STATIC_ASSERT(c, m) static_assert(c, m)
#else
#define MASK_STATIC_ASSERT(c, m) _Static_assert(c, m)
#endif

/* Largest token-axis length accepted anywhere (2^28): positions, their differences and
 * index products stay far from int32/int64 limits. */
#define MASK_MAX_LEN (1 << 28)

/*
 * The mask parameters, spelled once. Everything that moves them around (the struct below,
 * validation, fixture attributes, CLI options, case ids, printouts, report columns) is driven
 * by this list; adding a term means one line here plus its meaning (mask_allowed and
 * mask_row_range below, and whatever reference or kernel code the term needs).
 *
 *   X(field, name, opt, label, tag, off_tag, max, help)
 *   field    member of mask_params (int32; 0 switches the term off)
 *   name     fixture attribute, JSON key and long printout name ("sliding_window")
 *   opt      CLI option (--opt) and report column ("window"); a flag when max is 1
 *   label    short printout label ("W")
 *   tag      case-id fragment when set ("w" + value; a flag shows the tag alone)
 *   off_tag  case-id fragment of a flag that is off ("" for valued terms)
 *   max      largest accepted value (the smallest is 0)
 *   help     one line for --help
 */
#define MASK_PARAMS(X)                                                                         \
    X(causal, "causal", "causal", "causal", "c", "b", 1,                                       \
      "causal: key position <= query position")                                                \
    X(sliding_window, "sliding_window", "window", "W", "w", "", INT32_MAX,                     \
      "sliding window W: |query - key position| < W (0 = off)")                                \
    X(chunk_size, "chunk_size", "chunk", "C", "c", "", INT32_MAX,                              \
      "chunked local attention C: same chunk of C positions (0 = off)")

/* The mask parameters of one attention call, one int32 per entry of MASK_PARAMS:
 *   causal          1: allowed iff p_k <= p_q
 *   sliding_window  W >= 1: allowed iff |p_q - p_k| < W (causal: W keys; else 2W-1)
 *   chunk_size      C >= 1: allowed iff floor(p_q / C) == floor(p_k / C)
 * 0 switches a term off. */
typedef struct mask_params {
#define MASK_FIELD(field, ...) int32_t field;
    MASK_PARAMS(MASK_FIELD)
#undef MASK_FIELD
    int32_t reserved; /* 0; keeps the layout 16 bytes on host and device */
} mask_params;
MASK_STATIC_ASSERT(sizeof(mask_params) == 16, "mask_params must be 16 bytes on host and device");

#define MASK_COUNT(...) +1
/* Number of entries of MASK_PARAMS. */
#define MASK_NPARAMS (0 MASK_PARAMS(MASK_COUNT))

/* Floor division for b > 0, negatives included (C's / truncates toward zero). */
MASK_HD int64_t mask_floordiv(int64_t a, int64_t b)
{
    int64_t q = a / b;
    return (a % b != 0 && a < 0) ? q - 1 : q;
}

/* Logical position of query i of a sequence with nq queries and nk keys: bottom-right
 * alignment, the queries are the newest tokens (vLLM decode offset, FlashAttention). Negative
 * when nq > nk. Key j sits at position j. */
MASK_HD int32_t mask_q_pos(int32_t i, int32_t nq, int32_t nk)
{
    return i + (nk - nq);
}

/* The predicate of spec section 2, on positions of one sequence. */
MASK_HD int mask_allowed(mask_params m, int32_t pq, int32_t pk)
{
    int64_t d = (int64_t)pq - (int64_t)pk;
    if (m.causal && d < 0)
        return 0;
    if (m.sliding_window > 0 && (d >= m.sliding_window || -d >= m.sliding_window))
        return 0;
    if (m.chunk_size > 0 && mask_floordiv(pq, m.chunk_size) != mask_floordiv(pk, m.chunk_size))
        return 0;
    return 1;
}

/* Every term is an interval of key positions, so a row's allowed keys are one interval:
 * keys [*lo, *hi) of [0, nk) (empty when *lo >= *hi). Equal to scanning mask_allowed over
 * j in [0, nk) (tests/test_masks.c checks this by brute force). Both bounds are
 * non-decreasing in pq, which the direct builder and the kernels rely on. */
MASK_HD void mask_row_range(mask_params m, int32_t pq, int32_t nk, int32_t *lo, int32_t *hi)
{
    int64_t l = 0, h = nk;
    if (m.causal && (int64_t)pq + 1 < h)
        h = (int64_t)pq + 1;
    if (m.sliding_window > 0) {
        int64_t wl = (int64_t)pq - m.sliding_window + 1, wh = (int64_t)pq + m.sliding_window;
        if (wl > l) l = wl;
        if (wh < h) h = wh;
    }
    if (m.chunk_size > 0) {
        int64_t cl = mask_floordiv(pq, m.chunk_size) * m.chunk_size, ch = cl + m.chunk_size;
        if (cl > l) l = cl;
        if (ch < h) h = ch;
    }
    if (h < l)
        h = l;
    *lo = (int32_t)l; /* l <= max(0, pq) < MASK_MAX_LEN, or the range is emptied below */
    *hi = (int32_t)h;
    if (l > nk) { *lo = nk; *hi = nk; }
}

/*
 * Sequence layout of one batch entry's token axes, as device-readable plain data.
 * Dense batch entry: nseq = 1, cu_q = {0, lq}, cu_k = {0, lk}. Packed (vLLM varlen): nseq = R,
 * the cu_seqlens arrays. Zero-length sequences are allowed (repeated cu entries).
 * The pointers refer to memory the caller owns (host or device).
 */
typedef struct seq_view {
    const int32_t *cu_q; /* [nseq + 1], cu_q[0] = 0, non-decreasing, cu_q[nseq] = lq */
    const int32_t *cu_k; /* [nseq + 1], likewise ending at lk */
    int32_t nseq;
    int32_t lq, lk;
    int32_t reserved;
} seq_view;

/* The sequence holding token t (0 <= t < cu[nseq]): the largest s with cu[s] <= t, which is
 * the unique s with cu[s] <= t < cu[s+1] even when zero-length sequences repeat entries. */
MASK_HD int32_t seq_find(const int32_t *cu, int32_t nseq, int32_t t)
{
    int32_t a = 0, b = nseq; /* invariant: cu[a] <= t < cu[b] */
    while (b - a > 1) {
        int32_t mid = a + (b - a) / 2;
        if (cu[mid] <= t) a = mid; else b = mid;
    }
    return a;
}

/* A query token's place in its sequence: the sequence's key tokens [k0, k1) and the query's
 * position p_q. Looked up once per row, so key loops need not repeat the sequence search. */
typedef struct mask_row {
    int32_t k0, k1, pq;
} mask_row;

MASK_HD mask_row mask_row_of(seq_view v, int32_t tq)
{
    int32_t s = seq_find(v.cu_q, v.nseq, tq);
    int32_t q0 = v.cu_q[s], nq = v.cu_q[s + 1] - q0;
    mask_row r;
    r.k0 = v.cu_k[s];
    r.k1 = v.cu_k[s + 1];
    r.pq = mask_q_pos(tq - q0, nq, r.k1 - r.k0);
    return r;
}

/* May the row see stored key token tk? Keys of other sequences never. */
MASK_HD int mask_row_allows(mask_params m, mask_row r, int32_t tk)
{
    return tk >= r.k0 && tk < r.k1 && mask_allowed(m, r.pq, tk - r.k0);
}

/* Is stored query token tq allowed to see stored key token tk? Out-of-range tokens (padding
 * past lq or lk) and tokens of different sequences are never allowed. This is the mask on the
 * packed token grid that ref/, the slow builder and the kernels all evaluate. */
MASK_HD int mask_pair_allowed(mask_params m, seq_view v, int32_t tq, int32_t tk)
{
    if (tq < 0 || tq >= v.lq || tk < 0 || tk >= v.lk)
        return 0;
    return mask_row_allows(m, mask_row_of(v, tq), tk);
}

/* Allowed keys of stored query token tq as a range of stored key tokens [*lo, *hi). */
MASK_HD void mask_token_range(mask_params m, seq_view v, int32_t tq, int32_t *lo, int32_t *hi)
{
    mask_row r = mask_row_of(v, tq);
    int32_t l, h;
    mask_row_range(m, r.pq, r.k1 - r.k0, &l, &h);
    *lo = r.k0 + l;
    *hi = r.k0 + h;
}

#endif
