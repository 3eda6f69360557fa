/*
 * flexcheck.h - the public C API of libflexcheck.so: is this attention output right? Describe
 * the problem (shapes, dtype, mask, score terms, packed sequences), hand over q, k, v and an
 * output (and optionally its LSE), and get flexcheck's verdict: the float64 oracle computed from
 * the inputs, the gates of docs/tolerance.md against the same-precision baseline, the worst
 * element, and for a failure the diagnosis (which known bug explains the failing rows). It is
 * the code `flexcheck check` runs on an output stored in a fixture file (check/check.h).
 *
 *   flexcheck_problem *p = flexcheck_problem_new();
 *   flexcheck_problem_set_shape(p, 1, 8, 2, 1024, 1024, 64, 64);   // B, Hq, Hkv, Lq, Lk, D, Dv
 *   flexcheck_problem_set_dtype(p, "float16");
 *   flexcheck_problem_set_mask(p, 1, 256, 0);                      // causal, window, chunk
 *   flexcheck_verdict *v;
 *   if (flexcheck_judge(p, q, nq, k, nk, v_, nv, out, nout, lse, nlse, &v) != FLEXCHECK_OK)
 *       fprintf(stderr, "%s\n", flexcheck_problem_errmsg(p));
 *   else { puts(flexcheck_verdict_text(v)); ok = flexcheck_verdict_outcome(v) == FLEXCHECK_PASS;
 *          flexcheck_verdict_free(v); }
 *   flexcheck_problem_free(p);
 *
 * Conventions (SQLite's and zstd's): opaque handles made and freed by the library; every call
 * returns a status and leaves a message in the problem handle (flexcheck_problem_errmsg); no
 * global state, so threads may judge concurrently with handles of their own (a handle is not
 * to be shared between threads without a lock, flexcheck_problem_interrupt excepted); nothing
 * aborts, nothing reads past the counts given, nothing process-wide is left changed (OpenBLAS's
 * thread count, which a judge sets to 1 while it runs, is put back only if nobody else set it
 * meanwhile). The ABI is kept by adding calls, never by changing one; FLEXCHECK_API_VERSION
 * counts the additions, and flexcheck_api_version() says what the loaded library has; the
 * library's SONAME is libflexcheck.so.1 (a change that breaks the ABI would be .so.2) and each
 * API version's calls carry a symbol version node of their own (FLEXCHECK_1 ... FLEXCHECK_7).
 *
 * What it links: libc, libm, OpenBLAS and SLEEF, nothing else (no HDF5, no CUDA runtime, no
 * C++ runtime): reading fixture files and running kernels stay in the `flexcheck` command.
 * Loading it runs nothing and prints nothing. A CPU without an instruction-set extension the
 * library was compiled to use (the default build needs none beyond x86-64; it picks its AVX2
 * path at run time) makes every call on a problem return FLEXCHECK_EUNSUP, naming what is
 * missing, from the first.
 *
 * Strings the library returns are never to be freed by the caller. Their lifetimes: static (for
 * as long as the library is loaded) for flexcheck_version, flexcheck_status_text and a gate's
 * name and title; until the next call on p (flexcheck_problem_interrupt excepted) or
 * flexcheck_problem_free(p) for flexcheck_problem_errmsg(p); until flexcheck_verdict_free(v) for
 * every other string read from a verdict v (its text, reason, diagnosis, findings and gate
 * reasons).
 *
 * Arrays are float32, row-major (C order), in the layouts of docs/fixtures.md: q [B, Hq, Lq, D],
 * k [B, Hkv, Lk, D], v [B, Hkv, Lk, Dv], out [B, Hq, Lq, Dv], lse [B, Hq, Lq] (natural log).
 * Each comes with its element count, which must be exactly the problem's. q, k and v must hold
 * finite values exactly representable in the problem's dtype (bfloat16 and float16 values widen
 * to float32 exactly); the output may hold anything (NaN and infinities are what H3 judges).
 */
#ifndef FLEXCHECK_H
#define FLEXCHECK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The calls this header declares: 1 = the first set; 2 = the budget, flexcheck_problem_check
 * and the interrupt (FLEXCHECK_EINTR); 3 = the sample of rows; 4 = the explicit mask and bias;
 * 5 = a producer's block mask (flexcheck_problem_set_block_mask) and
 * flexcheck_problem_get_budget; 6 = paged K/V (flexcheck_problem_set_paged); 7 =
 * flexcheck_status_text and the settings by name (flexcheck_problem_set_param). */
#define FLEXCHECK_API_VERSION 7

typedef enum flexcheck_status {
    FLEXCHECK_OK = 0,
    FLEXCHECK_EINVAL = 1, /* a bad argument; the message names it and its value */
    FLEXCHECK_ENOMEM = 2, /* out of memory */
    FLEXCHECK_EUNSUP = 3, /* what this library cannot do: a CPU without an instruction-set
                           * extension it was built to use (the message names it) */
    FLEXCHECK_EINTERNAL = 4, /* a fault of flexcheck's own (an output it could not judge after
                              * its inputs were accepted): please report it */
    FLEXCHECK_EINTR = 5 /* stopped by flexcheck_problem_interrupt (API version 2) */
} flexcheck_status;

/* The API version of the library loaded (FLEXCHECK_API_VERSION of its build), and flexcheck's
 * version and commit ("0.x (commit abc1234)", a static string). */
int flexcheck_api_version(void);
const char *flexcheck_version(void);
/* What a status means in a few words ("invalid argument"; API version 7), a static string;
 * "unknown status" for a value outside the enum. The call's own message (which names the
 * argument and its value) is flexcheck_problem_errmsg. */
const char *flexcheck_status_text(flexcheck_status st);

/* ---- the problem ---- */

typedef struct flexcheck_problem flexcheck_problem;

/* A problem with no shape yet (dtype float32, no mask, scale 1/sqrt(D), no score terms, dense
 * batch); NULL only when out of memory. */
flexcheck_problem *flexcheck_problem_new(void);
void flexcheck_problem_free(flexcheck_problem *p);
/* The message of the last call on p that did not return FLEXCHECK_OK ("" when none; for p NULL
 * a static message). Valid until the next call on p (the interrupt excepted) or its free. */
const char *flexcheck_problem_errmsg(const flexcheck_problem *p);

/* Every count >= 1 (Lq, Lk >= 0), Hq a multiple of Hkv; what the library can run: Hq at most
 * 4096, Lq and Lk at most 2^28, D and Dv at most 1024 (a larger one is refused, the limit
 * named). How much B * Hq * Lq * Lk may be is the budget's (flexcheck_problem_set_budget). */
flexcheck_status flexcheck_problem_set_shape(flexcheck_problem *p, int32_t b, int32_t hq,
                                             int32_t hkv, int32_t lq, int32_t lk, int32_t d,
                                             int32_t dv);
/* "float32", "float16" or "bfloat16": the precision the kernel ran in. */
flexcheck_status flexcheck_problem_set_dtype(flexcheck_problem *p, const char *dtype);
/* causal 0 or 1; window 0 off, else W (allowed iff |p_q - p_k| < W); chunk 0 off, else C
 * (docs/semantics.md). Bottom-right alignment per sequence. */
flexcheck_status flexcheck_problem_set_mask(flexcheck_problem *p, int causal, int32_t window,
                                            int32_t chunk);
/* The softmax scale, finite and > 0; 0 restores 1/sqrt(D). */
flexcheck_status flexcheck_problem_set_scale(flexcheck_problem *p, double scale);
/* Logit soft-cap c > 0 (c * tanh(s / c) on the scaled score, before the mask); 0 off. */
flexcheck_status flexcheck_problem_set_softcap(flexcheck_problem *p, double softcap);
/* Per-head sink logits, n == Hq finite values (copied); sinks NULL (n 0) removes them. */
flexcheck_status flexcheck_problem_set_sinks(flexcheck_problem *p, const float *sinks, size_t n);
/* A packed batch (B must be 1): cu_seqlens_q and cu_seqlens_k, n = R + 1 entries each (copied),
 * starting at 0, non-decreasing, ending at Lq resp. Lk. NULL (n 0) makes the batch dense again. */
flexcheck_status flexcheck_problem_set_packed(flexcheck_problem *p, const int32_t *cu_q,
                                              const int32_t *cu_k, size_t n);

/* An explicit boolean mask (API version 4; docs/semantics.md section 8): mask [bm, hm, Lq, Lk],
 * one byte a pair, nonzero = allowed (a numpy bool or uint8 array in C order), bm 1 (one for
 * every batch entry) or B, hm 1 (one for every head) or Hq, n = bm * hm * Lq * Lk for the shape
 * set (set it first; one set later that no longer fits is refused when judged). A pair is
 * allowed iff flexcheck_problem_set_mask's terms allow it AND this mask does: with none of them
 * set it is FlexAttention's mask_mod; rows left with no key are empty rows (output 0, LSE -inf
 * or the sink). For a packed batch its grid is the packed token axes (pairs of two sequences
 * stay refused). Copied, bit-packed (n / 8 bytes kept, counted by the budget); NULL (n 0)
 * removes it. A failing output's diagnosis reads it as the oracle does, and names the mask's
 * own bugs when proven (shifted by one row or key, transposed, ignored, one head's for all). */
flexcheck_status flexcheck_problem_set_explicit_mask(flexcheck_problem *p, const uint8_t *mask,
                                                     int32_t bm, int32_t hm, size_t n);
/* An additive score bias (API version 4; docs/semantics.md section 8): bias [bm, hm, Lq, Lk]
 * float32, bm, hm and n as for the explicit mask, added to every allowed pair's scaled score
 * after the soft-cap (Hugging Face's order: an additive score_mod). Its values must be finite
 * with |bias| <= 1e6 (mask keys out with the explicit mask, not with a large negative bias):
 * checked when judged and by flexcheck_problem_check, naming the first bad one. Copied (4 n
 * bytes, counted by the budget); NULL (n 0) removes it. */
flexcheck_status flexcheck_problem_set_bias(flexcheck_problem *p, const float *bias, int32_t bm,
                                            int32_t hm, size_t n);
/* The producer's block mask (API version 5; docs/semantics.md section 4), to be checked with
 * the output: PyTorch's BlockMask tensors as int32 arrays in C order, kv_num_blocks [nb, nh,
 * nqb], kv_indices [nb, nh, nqb, width], full_kv_num_blocks [nb, nh, nqb] and full_kv_indices
 * [nb, nh, nqb, full_width] (both full arrays NULL and full_width 0: no full tiles, PyTorch's
 * full_kv_num_blocks None; an indices array may be NULL when its width is 0). Tiles of
 * q_block_size x kv_block_size (BLOCK_SIZE: powers of two in [16, 256]); nb 1 (one for every
 * batch entry) or B, nh 1 (one for every head) or Hq; nqb = ceil(Lq / q_block_size) for the
 * shape set (set it first). Copied (the caller's arrays may go once this returns) and validated
 * here: each count in [0, its width], each of a row's first count ids in [0, ceil(Lk /
 * kv_block_size)) and listed once in the row across both lists; slots past a count are not
 * read (PyTorch's padding). A message names the array, the element and its value. The copy is
 * counted by the budget; a shape set later that no longer fits it is refused when judged. All
 * four arrays NULL removes it.
 * flexcheck_judge then holds it to the whole mask, the families (set_mask) AND the explicit
 * mask, for every batch entry and head a stored row stands for (nb or nh 1: every one, as the
 * kernel reads it): a tile with an allowed pair listed nowhere (keys dropped) or listed full
 * with a pair not allowed (keys leak) fails the verdict, whatever the gates say, and
 * flexcheck_verdict_reason names the first such tile and element ("block-mask: the producer's
 * block mask is NOT SOUND: drops keys: ..."); tiles listed partial with nothing allowed are
 * only reported (wasted work). The text says "its block mask (QBxKB): sound" otherwise. */
flexcheck_status flexcheck_problem_set_block_mask(flexcheck_problem *p, int32_t q_block_size,
                                                  int32_t kv_block_size, int32_t nb, int32_t nh,
                                                  int32_t nqb, const int32_t *kv_num_blocks,
                                                  const int32_t *kv_indices, int32_t width,
                                                  const int32_t *full_kv_num_blocks,
                                                  const int32_t *full_kv_indices,
                                                  int32_t full_width);

/* The paged cache the producer read K/V from (API version 6; docs/fixtures.md "Paged K/V",
 * vLLM's layout): k_cache [num_pages, page_size, Hkv, D] and v_cache [num_pages, page_size, Hkv,
 * Dv] float32 (stale pages may hold anything, NaN included), block_table [nrows, max_pages]
 * int32, one row per sequence (nrows = B, or the packed sequences of set_packed), key t of
 * sequence r at slot t % page_size of page block_table[r][t / page_size]. Set the shape first.
 * Copied (counted by the budget). flexcheck_judge's k and v stay the logical K/V; it checks
 * that they are exactly what the table gathers from the cache (each used entry in [0,
 * num_pages): the first difference or bad entry refuses the judge, named), and the diagnosis
 * then tries a page read from the wrong slot (an entry or a sequence off by one) as a cause.
 * k_cache NULL removes it. */
flexcheck_status flexcheck_problem_set_paged(flexcheck_problem *p, const float *k_cache,
                                             const float *v_cache, int32_t num_pages,
                                             int32_t page_size, const int32_t *block_table,
                                             int32_t nrows, int32_t max_pages);

/* A scalar setting by name (API version 7; zstd's ZSTD_CCtx_setParameter), so that a new mask
 * parameter or scalar term is a new name rather than a new call. The names:
 *   "causal", "sliding_window" (or "window"), "chunk_size" (or "chunk"): the mask parameters
 *       (docs/semantics.md; flexcheck_problem_set_mask's, each alone, the others kept), integers
 *       from 0 (off); causal 0 or 1;
 *   "scale", "softcap": as flexcheck_problem_set_scale and flexcheck_problem_set_softcap;
 *   "rows" (an integer >= -1), "rows_seed": as flexcheck_problem_set_rows, the other kept;
 *   "max_memory", "max_work": as flexcheck_problem_set_budget, the other kept.
 * Integers must be given exactly (no fraction; up to 2^53). FLEXCHECK_EINVAL for an unknown
 * name (the message names it and lists the known ones) or a value out of range (named). */
flexcheck_status flexcheck_problem_set_param(flexcheck_problem *p, const char *name,
                                             double value);

/* The types the producer's out and lse had before they were widened to the float32 arrays
 * flexcheck_judge takes: "float32" (the default: float32 or finer), "float16" or "bfloat16".
 * An LSE kept in float16 / bfloat16 is judged at that type's resolution (H5's bound plus half an
 * ulp of the value, as docs/tolerance.md says); out's type lets the diagnosis name an LSE rounded
 * to it. NULL leaves a type as it is. */
flexcheck_status flexcheck_problem_set_output_types(flexcheck_problem *p, const char *out_dtype,
                                                    const char *lse_dtype);

/* What a judge of p may cost (API version 2), as `flexcheck check --max-memory / --max-work`
 * bound a case in a file, with their defaults for 0: max_memory in bytes (default the lesser
 * of 16 GiB and half of the memory this process can have: physical, or its cgroup's limit),
 * max_work in multiply-adds (default 2^40; B * Hq * (D + Dv) times the key hull of each
 * 128-query-row panel, what the reference computes, B * Hq * Lq * Lk * (D + Dv) at most). The
 * estimate is check's, from the shapes alone; a problem over either is refused by flexcheck_judge (and
 * flexcheck_problem_check) before anything is allocated, with FLEXCHECK_EINVAL and a message
 * naming the estimate, the budget and the parameter to raise (max_memory or max_work). */
flexcheck_status flexcheck_problem_set_budget(flexcheck_problem *p, uint64_t max_memory,
                                              uint64_t max_work);
/* The budget a judge of p is held to (API version 5), the defaults resolved: *max_memory in
 * bytes, *max_work in multiply-adds (either pointer may be NULL). For a caller that builds
 * something of its own for p first (Python evaluating a mask_mod over the grid) and must bound
 * it by the same figure, refusing before it allocates. */
flexcheck_status flexcheck_problem_get_budget(flexcheck_problem *p, uint64_t *max_memory,
                                              uint64_t *max_work);
/* Which query rows a judge of p computes (API version 3; docs/tolerance.md "Judging a
 * sample"): 0, the default, every row; n >= 1 a sample of n query tokens, the same for every
 * batch entry and head (n = Lq: every row; n > Lq is refused when judged), chosen as `check
 * --rows n --rows-seed seed` chooses it: tokens placed at length thresholds, sequence, window
 * and chunk edges and tile ends, the rest uniform from seed; -1 every row when p fits its
 * budget, else the largest sample of up to 4,096 tokens that does. The oracle and the baselines
 * are computed on those rows alone; out and lse are still given whole. The verdict's text ends
 * with what was judged ("judged a sample: n of Lq query tokens ...") and the chance that a
 * defect on 1, 10 or 100 random tokens escapes it; the worst element's coordinates are the
 * whole output's. FLEXCHECK_EINVAL for rows < -1. */
flexcheck_status flexcheck_problem_set_rows(flexcheck_problem *p, int32_t rows, uint64_t seed);
/* FLEXCHECK_OK when p can be judged (API version 2): what flexcheck_judge checks before it
 * reads an array (a shape set, packed sequences ending at Lq and Lk, sinks for every head, the
 * budget), so that a caller can be told before it converts its inputs. */
flexcheck_status flexcheck_problem_check(flexcheck_problem *p);
/* Asks the flexcheck_judge running on p in another thread to stop (API version 2): it returns
 * FLEXCHECK_EINTR, no verdict and nothing leaked, at its next check, and its message says
 * where it stopped. The checks come between heads of each 128-query-row panel of the float64
 * oracle and of the baseline (the longest stretch without one: 128 * Lk * (D + Dv)
 * multiply-adds, 0.3 s at Lk 32k and 1 s at Lk 128k with D = Dv = 128 on one core of a loaded
 * 2-core machine) and between the diagnosis's rows. The one call that may be made on p while
 * another thread's call on p runs; it leaves p's message alone. A request holds until a judge
 * on p returns, so one made just before a judge starts stops it at its first check; p judges
 * as before afterwards. */
flexcheck_status flexcheck_problem_interrupt(flexcheck_problem *p);

/* ---- the verdict ---- */

typedef struct flexcheck_verdict flexcheck_verdict;

/* Judges out (and lse, which may be NULL: the LSE gate is then not run) as the output of problem
 * p on inputs q, k, v (counts in elements). FLEXCHECK_OK with *verdict set (free it with
 * flexcheck_verdict_free) whenever the output could be judged, whatever the verdict; any other
 * status (a problem over its budget, an interrupt: FLEXCHECK_EINTR) leaves *verdict NULL
 * (whenever verdict is not NULL, p NULL included) and a message in p. */
flexcheck_status flexcheck_judge(flexcheck_problem *p, const float *q, size_t nq, const float *k,
                                 size_t nk, const float *v, size_t nv, const float *out,
                                 size_t nout, const float *lse, size_t nlse,
                                 flexcheck_verdict **verdict);
void flexcheck_verdict_free(flexcheck_verdict *v);

typedef enum flexcheck_outcome {
    FLEXCHECK_FAIL = 0,
    FLEXCHECK_PASS = 1,
    FLEXCHECK_OUTSIDE = 2 /* outside the contract: the baseline overflowed, H1/H2 not run */
} flexcheck_outcome;
flexcheck_outcome flexcheck_verdict_outcome(const flexcheck_verdict *v);

/* The hard gates H1..H7 of docs/tolerance.md, as indices 0..FLEXCHECK_NGATES-1. */
#define FLEXCHECK_NGATES 7
typedef enum flexcheck_gate_state {
    FLEXCHECK_GATE_NOT_RUN = 0, /* no evidence for it (H5 without an LSE, H6, H7 here) */
    FLEXCHECK_GATE_PASS = 1,
    FLEXCHECK_GATE_FAIL = 2
} flexcheck_gate_state;
/* Gate i's state; *name ("H1"), *title ("max ratio"): static; *reason ("" unless it failed):
 * v's, until flexcheck_verdict_free(v); each when not NULL. FLEXCHECK_GATE_NOT_RUN for an i out
 * of range, with *name "?". */
flexcheck_gate_state flexcheck_verdict_gate(const flexcheck_verdict *v, int i, const char **name,
                                            const char **title, const char **reason);
/* The first failing gate or exactness check and why ("" when the output passed). Strings read
 * from v, here and below, are v's: valid until flexcheck_verdict_free(v). */
const char *flexcheck_verdict_reason(const flexcheck_verdict *v);

/* The element with the largest |out - oracle|: the first NaN of out when it holds one (NaN
 * returned), else its first infinity (+inf returned), else the largest finite error; its
 * (b, h, q, d) into coords[4]; -1 when there is no element. */
double flexcheck_verdict_worst(const flexcheck_verdict *v, int32_t coords[4]);
/* A measured figure by name: "max_err", "mean_err", "rmse", "nmse", "e_lp_max", "h1_ratio",
 * "floor", "lse_err", "s1", "s2"; NaN for another name or a figure not measured. */
double flexcheck_verdict_metric(const flexcheck_verdict *v, const char *name);

/* The diagnosis of a failed output: its lines as check prints them ("" when none ran), and its
 * findings: the causes it claims, each with its title ("window W+1 (256 -> 257)") and the number
 * of failing rows it explains: first the hypotheses that explain every failing row (several:
 * the rows cannot tell them apart), then those that explain every failing row of some heads.
 * Partial fits are in the text, never findings. */
const char *flexcheck_verdict_diagnosis(const flexcheck_verdict *v);
size_t flexcheck_verdict_nfindings(const flexcheck_verdict *v);
const char *flexcheck_verdict_finding(const flexcheck_verdict *v, size_t i, size_t *rows);

/* Everything check prints for this output: the verdict line, every other failed gate, the
 * diagnosis. */
const char *flexcheck_verdict_text(const flexcheck_verdict *v);

#ifdef __cplusplus
}
#endif

#endif
