/*
 * gate_case.h - what the checks of ci/checks/ share: a case's inputs and oracle, its rows'
 * identity, error and skip rows, and the usual setup of one run (inputs, baseline, block mask).
 */
#ifndef FLEXCHECK_GATE_CASE_H
#define FLEXCHECK_GATE_CASE_H

#include "ci/gate_run.h"

/* Inputs and oracle of case c (mask overridden when `mask` is not NULL), with the case's
 * input distribution applied. */
fc_status gate_case_inputs(const gate_case *c, const mask_params *mask, fix_case *fc,
                           fc_err *err);

/* The identity columns of a row; suffix (may be NULL) is appended to the case id. */
void gate_row_identity(rep_row *row, const gate_case *c, const fix_case *fc, const char *builder,
                       const gate_opts *op, gpu_backend be, const char *suffix);
/* One row per backend that is only an error (skip = 0) or a skip (skip = 1) with `msg`. */
fc_status gate_case_rows(const gate_case *c, const gate_opts *op, gate_rows *rows, int skip,
                         const char *msg, fc_err *err);
/* The emu runs kernel 2 at about 1e9 multiply-adds a second a core (reports/bench.md, bench
 * kernel), and a judged run is made twice (H7) besides the oracle and the baseline: a case whose
 * work (attn_case_cost of its problem) passes this is minutes on the emu, and only the GPU
 * backend runs it (docs/matrix.md M7). It sits
 * between the M7 group's windowed cases (at most 5e10) and its dense ones (at least 1.4e11);
 * every quick and default case is far below it (tests/test_long.c). */
#define GATE_EMU_MAX_WORK 1e11
/* 1 when case parameters gp (a case's, or a layout layer's) pass GATE_EMU_MAX_WORK, with the
 * skip reason in why[n]; 0 (why untouched) otherwise, and when gp describes no problem (the run
 * itself then says why). */
int gate_emu_skips(const fix_gen_params *gp, char *why, size_t n);

/* One error row per backend for a case that could not be set up. */
fc_status gate_case_error(const gate_case *c, const gate_opts *op, gate_rows *rows,
                          const char *msg, fc_err *err);
/* FC_ENOMEM with the row list's message. */
fc_status gate_rows_oom(fc_err *err);

/* One run of a case: inputs and oracle under `mask`, buffers, the baseline and a block mask. */
typedef struct gate_setup {
    fix_case fc;
    judge_case jc; /* view of fc */
    judge_bufs b;
    bmask bm;
    int ok;
    fc_err e;
} gate_setup;

/* 0 on success; on failure s->e says why and nothing needs freeing. */
int gate_setup_make(gate_setup *s, const gate_opts *op, const gate_case *c, mask_params mask,
                    bmask_builder builder);
void gate_setup_free(gate_setup *s);

/* The judged main run of a check on backend i (H1-H7, rerun for H7): a new row, outputs left
 * in s->b, and a failed row diagnosed. builder NULL: the case's. NULL when out of memory for
 * rows. */
rep_row *gate_main_row(const gate_case *c, const gate_opts *op, int i, gate_setup *s,
                       gate_rows *rows, const char *suffix, const char *builder);
/* judge_run, and a failed row's diagnosis (diag_after_run: which bug explains its failing rows,
 * with the block mask it ran with) in row->explained. What every check's judged run calls. */
int gate_judge_run(const judge_run_in *in, rep_row *row);

/* Position of row i (= (b*Hq + h)*Lq + tq) along the query axis. */
int32_t gate_row_tq(const fix_case *fc, size_t i);

#endif
