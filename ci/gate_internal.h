/*
 * gate_internal.h - what the gate runner's files share (gate_run.c, gate_exact.c,
 * gate_layout.c). Not part of the public API.
 */
#ifndef FLEXCHECK_GATE_INTERNAL_H
#define FLEXCHECK_GATE_INTERNAL_H

#include "gate_run.h"

/* Output buffers of one case: the kernel's O and LSE and the same-precision baseline. */
typedef struct gate_bufs {
    float *o, *lse, *o_lp;
} gate_bufs;

fc_status gate_bufs_alloc(gate_bufs *b, const fix_case *fc, fc_err *err);
void gate_bufs_free(gate_bufs *b);


/* Rows of O / LSE: B * Hq * Lq. */
size_t gate_rows_of(const fix_case *fc);

/* Inputs and oracle of case c (mask overridden when `mask` is not NULL), with the case's
 * input distribution applied. */
fc_status gate_case_inputs(const gate_case *c, const mask_params *mask, fix_case *fc,
                           fc_err *err);
/* fc->out / fc->lse from fc's (possibly edited) inputs and problem. */
fc_status gate_recompute_oracle(fix_case *fc, fc_err *err);

/* The identity columns of a row; suffix (may be NULL) is appended to the case id. */
void gate_row_identity(rep_row *row, const gate_case *c, const fix_case *fc, const char *builder,
                       const gate_opts *op, gpu_backend be, const char *suffix);
/* Fails a row on an exactness check (a rep_gate code >= REP_NGATES) unless already failed. */
void gate_row_fail_check(rep_row *row, int check, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* One row per backend that is only an error (skip = 0) or a skip (skip = 1) with `msg`. */
fc_status gate_case_rows(const gate_case *c, const gate_opts *op, gate_rows *rows, int skip,
                         const char *msg, fc_err *err);
/* One error row per backend for a case that could not be set up. */
fc_status gate_case_error(const gate_case *c, const gate_opts *op, gate_rows *rows,
                          const char *msg, fc_err *err);

/* One kernel run (op's kernel version, or its test hook). */
fc_status gate_kernel(const gate_opts *op, gpu_backend be, const fix_case *fc, const bmask *bm,
                      float *o, float *lse, gpu_result *res, fc_err *err);
/* The same with paged K/V (gpu.h: page_table [B * nkb], pages of kv_block_size keys). */
fc_status gate_kernel_paged(const gate_opts *op, gpu_backend be, const fix_case *fc,
                            const bmask *bm, const int32_t *page_table, int32_t num_pages,
                            float *o, float *lse, gpu_result *res, fc_err *err);
/* One block-mask build (bmask_build, or op's test hook). */
fc_status gate_build_mask(const gate_opts *op, bmask *out, bmask_builder b, mask_params m,
                          const seq_info *s, int32_t qb, int32_t kb, fc_err *err);

typedef struct gate_judge_in {
    const gate_opts *op;
    const fix_case *fc;
    const bmask *bm;
    gpu_backend backend;
    const float *o_lp;
    float *o, *lse; /* receive the (first) run's outputs */
    int rerun;      /* run twice for H7 */
    rep_verdict *verdict; /* may be NULL: receives the full verdict */
} gate_judge_in;

/* Runs the kernel (twice with rerun) and fills row's verdict; 1 iff it passed. */
int gate_judge(const gate_judge_in *in, rep_row *row);
/* Judges given outputs against fc's oracle; 1 pass, 0 fail, -1 error (message in err). */
int gate_judge_outputs(const fix_case *fc, const float *o, const float *lse, const float *o_lp,
                       rep_verdict *v, fc_err *err);

fc_status gate_run_window_edge(const gate_case *c, const gate_opts *o, gate_rows *rows,
                               fc_err *err);
fc_status gate_run_poison(const gate_case *c, const gate_opts *o, gate_rows *rows, fc_err *err);
fc_status gate_run_lse_merge(const gate_case *c, const gate_opts *o, gate_rows *rows,
                             fc_err *err);
fc_status gate_run_decode(const gate_case *c, const gate_opts *o, gate_rows *rows, fc_err *err);
fc_status gate_run_builders(const gate_case *c, const gate_opts *o, gate_rows *rows,
                            fc_err *err);
fc_status gate_run_layout(const gate_case *c, const gate_opts *o, gate_rows *rows, fc_err *err);
fc_status gate_run_paged(const gate_case *c, const gate_opts *o, gate_rows *rows, fc_err *err);
fc_status gate_run_pround(const gate_case *c, const gate_opts *o, gate_rows *rows, fc_err *err);

#endif
