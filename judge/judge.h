/*
 * judge.h - the verdict on one attention case: buffers, a kernel run (or an output someone
 * else produced), the same-precision baseline, and the gates of docs/tolerance.md turned into a
 * report row. `flexcheck check`, `repro`, `bench` and the gate (ci/) all judge through here.
 *
 * The judge knows one case at a time and nothing about matrices, fixtures files or report
 * sets: it depends on masks/ (problem, block masks), ref/ (the baseline), gpu/ (the kernels)
 * and reports/ (the gates and the row they fill), and nothing above them.
 *
 *   judge_case jc = {.prob = &p, .dtype = FC_F16, .q = q, .k = k, .v = v,
 *                    .out = oracle_o, .lse = oracle_lse};
 *   rep_row row = {0};
 *   int pass = judge_case_run(&jo, GPU_BACKEND_EMU, &jc, &bm, &row, NULL, NULL, NULL);
 */
#ifndef FLEXCHECK_JUDGE_H
#define FLEXCHECK_JUDGE_H

#include <stddef.h>
#include <stdint.h>

#include "base/fc.h"
#include "gpu/gpu.h"
#include "masks/bmask.h"
#include "masks/problem.h"
#include "reports/rep.h"
#include "ref/ref.h"
#include "reports/tol.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One attention call with its float64 oracle. Views: the caller owns every array. Inputs are
 * float arrays holding values representable in dtype (problem.h layouts). */
typedef struct judge_case {
    const attn_problem *prob;
    fc_dtype dtype;
    const float *q, *k, *v;
    const double *out, *lse; /* the float64 oracle; lse -inf marks a row with no allowed key */
    int designed; /* inputs built for an exactness check (p-round's design), not drawn from a
                   * distribution: H2 does not apply (rep_inputs.designed) */
    const ref_tokens *tokens; /* a sample: only these query tokens' rows, of every batch entry
                               * and head; q, out, lse (and every output judged) hold those
                               * rows alone, [B, Hq, n, ...]; k and v are whole. NULL: every
                               * row */
} judge_case;

/* Test hooks: a deliberately broken kernel or builder, to prove the gates catch it. */
typedef fc_status (*judge_attention_fn)(const gpu_call *c, float *o, float *lse,
                                        gpu_result *res, fc_err *err);
typedef fc_status (*judge_bmask_fn)(bmask *out, bmask_builder builder, mask_params m,
                                    const seq_info *s, int32_t qb, int32_t kb, fc_err *err);

/* What runs: the kernel version, and outside tests nothing else. */
typedef struct judge_opts {
    int kernel;                      /* kernel version (gpu.h) */
    judge_attention_fn attention_fn; /* NULL outside tests: gpu_attention */
    judge_bmask_fn bmask_fn;         /* NULL outside tests: bmask_build */
} judge_opts;

/* Rows of O / LSE: B * Hq * Lq, or B * Hq * n for a sample of n tokens. */
size_t judge_rows(const judge_case *jc);
/* Elements of O: judge_rows times Dv. */
size_t judge_o_elems(const judge_case *jc);
/* Rows per (b, h): Lq, or the sample's n. */
size_t judge_per_head(const judge_case *jc);
/* Row r's query token, and its index in the whole output ((b * Hq + h) * Lq + q). */
int32_t judge_row_token(const judge_case *jc, size_t r);
size_t judge_full_row(const judge_case *jc, size_t r);

/* The same-precision baselines of one case (docs/tolerance.md): the dtype's O_lp and its LSE
 * (ref_attention_lp), and, for float16/bfloat16 only when that one drowns some row
 * (rep_lp_drowned_rows), the float32-score baseline (ref_attention_lp32s; NULL otherwise).
 * Owned; judge_lp_free releases them. */
typedef struct judge_lp {
    float *o, *lse;
    float *o32s, *lse32s;
} judge_lp;

/* Computes lp for jc (jc->out and jc->lse, the oracle, decide whether a row drowns; without
 * them no float32-score baseline is computed). Anything lp held is freed first. */
fc_status judge_baseline(const judge_case *jc, judge_lp *lp, fc_err *err);
void judge_lp_free(judge_lp *lp);
/* rep_inputs' baseline fields (o_lp, lse_lp, o_lp32s, lse_lp32s) from lp. */
void judge_lp_inputs(const judge_lp *lp, rep_inputs *ri);

/* Output buffers of one case: the kernel's O and LSE, and the baselines (judge_baseline fills
 * lp; judge_bufs_free frees it too). */
typedef struct judge_bufs {
    float *o, *lse;
    judge_lp lp;
} judge_bufs;

fc_status judge_bufs_alloc(judge_bufs *b, const judge_case *jc, fc_err *err);
void judge_bufs_free(judge_bufs *b);

/* One kernel run (jo's kernel version, or its test hook); page_table NULL: contiguous K/V,
 * else paged as gpu.h describes. res may be NULL. */
fc_status judge_kernel(const judge_opts *jo, gpu_backend be, const judge_case *jc,
                       const bmask *bm, const int32_t *page_table, int32_t num_pages, float *o,
                       float *lse, gpu_result *res, fc_err *err);
/* One block-mask build (bmask_build, or jo's test hook). */
fc_status judge_build_mask(const judge_opts *jo, bmask *out, bmask_builder b, mask_params m,
                           const seq_info *s, int32_t qb, int32_t kb, fc_err *err);

/* A kernel run judged under the gates. */
typedef struct judge_run_in {
    const judge_opts *jo;
    gpu_backend backend;
    const judge_case *jc;
    const bmask *bm;
    const judge_lp *lp;   /* the baselines (judge_baseline) */
    float *o, *lse;       /* receive the (first) run's outputs */
    int rerun;            /* run twice: H7 determinism */
    rep_verdict *verdict; /* may be NULL: receives the full verdict */
} judge_run_in;

/* Runs the kernel (twice with rerun) and fills row's verdict columns (the caller fills its
 * identity); 1 iff it passed. A configuration the kernel refuses before launch (FC_EUNSUP, a
 * head dim it is not built for) is not a wrong answer: the row is skipped with the kernel's
 * reason. Any other run failure makes the row an error. */
int judge_run(const judge_run_in *in, rep_row *row);

/* The whole judgement of one case on backend be with block mask bm: the baseline, two kernel
 * runs (H6 sentinels, H7 determinism) and every gate. o / lse / v (each may be NULL) receive
 * the first run's outputs and the full verdict. 1 pass, 0 fail, -1 the case could not be
 * judged: row->outcome is REP_ROW_SKIP when the kernel refuses the configuration, REP_ROW_ERROR
 * otherwise; row->reason says why. */
int judge_case_run(const judge_opts *jo, gpu_backend be, const judge_case *jc,
                   const bmask *bm, rep_row *row, float *o, float *lse, rep_verdict *v);

/* Judges outputs that are not a plain kernel run (a merge of two runs, a decode slice, another
 * producer's output) against jc's oracle. 1 pass, 0 fail, -1 error (message in err). */
int judge_outputs(const judge_case *jc, const float *o, const float *lse, const judge_lp *lp,
                  rep_verdict *v, fc_err *err);
/* The same with what another producer may store: lse may be NULL (H5 not run), o_rerun a
 * second run (H7 compares it with o bitwise; NULL: H7 not run). */
int judge_given(const judge_case *jc, const float *o, const float *lse, const float *o_rerun,
                const judge_lp *lp, rep_verdict *v, fc_err *err);
/* judge_given for an LSE stored in lse_dtype (float16 / bfloat16: H5 adds that type's
 * resolution, rep_inputs.lse_dtype; FC_F32: judge_given). */
int judge_given_lse(const judge_case *jc, const float *o, const float *lse, fc_dtype lse_dtype,
                    const float *o_rerun, const judge_lp *lp, rep_verdict *v, fc_err *err);

/* The row columns a problem determines: shapes, sequences per batch entry (nseq), mask terms
 * and dtype (the caller sets the case id, group, block sizes, builder, backend and
 * producer). */
void judge_row_problem(rep_row *row, const attn_problem *p, fc_dtype dtype);

/* Fails row on the exactness check named `check` if it passed or is outside the contract (an
 * exactness check needs no baseline): the first failure names the row ("<check>: <message>");
 * a row already failed, skipped or in error keeps its outcome. */
void judge_row_fail_check(rep_row *row, const char *check, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Exactness between two runs of case jc, (oa, la) and (ob, lb): bit for bit, NaN payloads and
 * signed zeros included. 1 iff row r (its O row and its LSE) is the same in both; the LSE is
 * compared only when both are given (another producer's output may have none). */
int judge_row_identical(const judge_case *jc, size_t r, const float *oa, const float *la,
                        const float *ob, const float *lb);
/* The first row that differs between the two runs, or judge_rows(jc) when none does. */
size_t judge_first_differing_row(const judge_case *jc, const float *oa, const float *la,
                                 const float *ob, const float *lb);

#ifdef __cplusplus
}
#endif

#endif
