/*
 * test_kernel_v2_gate.c - the gate's quick matrix (ci/, spec/matrix.md) with kernel version 2 on
 * the emu backend: every case version 1 passes, version 2 must pass too, numeric gates and
 * exactness checks (window edges, poisoning, LSE merge, decode, builders, hybrid layouts).
 * Rows the gate skips on purpose (a feature the gate runner does not drive yet) stay skips.
 *
 * The matrix is cut into 8 shards. Kernel 2 emulates 1.3-2x slower than kernel 1 (its PTX
 * twins exchange fragments through the warp), so `make test` runs the odd shards (half of the
 * cases, spread over the matrix, ~17 s on 2 cores); FLEXCHECK_V2_GATE=full runs all eight
 * (~35 s).
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <criterion/parameterized.h>
#include <stdlib.h>
#include <string.h>

#include "gate.h"
#include "gate_run.h"

#define NSHARDS 8

typedef struct shard {
    int i;
} shard;

ParameterizedTestParameters(v2_gate, quick_matrix_passes_with_kernel_2)
{
    static shard all[NSHARDS] = {{1}, {2}, {3}, {4}, {5}, {6}, {7}, {8}};
    static shard sample[NSHARDS / 2] = {{1}, {3}, {5}, {7}};
    const char *e = getenv("FLEXCHECK_V2_GATE");
    if (e && !strcmp(e, "full"))
        return cr_make_param_array(shard, all, NSHARDS);
    return cr_make_param_array(shard, sample, NSHARDS / 2);
}

ParameterizedTest(const shard *sh, v2_gate, quick_matrix_passes_with_kernel_2)
{
    gate_case *cases;
    int n;
    fc_err err;
    cr_assert_eq(gate_matrix(GATE_QUICK, 1, &cases, &n, NULL, &err), FC_OK, "%s", err.msg);
    n = gate_select(cases, n, NULL, sh->i, NSHARDS);
    gate_opts o = {.backends = {GPU_BACKEND_EMU}, .nbackends = 1, .kernel = 2};
    gate_rows rows = {0};
    for (int c = 0; c < n; c++)
        cr_assert_eq(gate_run_case(&cases[c], &o, &rows, &err), FC_OK, "%s: %s", cases[c].id,
                     err.msg);
    size_t failed = 0, skipped = 0;
    for (size_t r = 0; r < rows.n; r++) {
        const rep_row *row = &rows.v[r];
        skipped += row->outcome == REP_ROW_SKIP;
        if (gate_row_failed(row)) {
            failed++;
            cr_log_error("%s [%s]: %s: %s", row->case_id, fc_dtype_name(row->dtype),
                         rep_outcome_name(row->outcome), row->reason);
        }
    }
    cr_log_info("shard %d/%d: %d cases, %zu rows, %zu failed, %zu skipped", sh->i, NSHARDS, n,
                rows.n, failed, skipped);
    cr_expect_eq(failed, 0, "shard %d/%d: %zu of %zu rows fail with kernel 2", sh->i, NSHARDS,
                 failed, rows.n);
    gate_rows_free(&rows);
    free(cases);
}
