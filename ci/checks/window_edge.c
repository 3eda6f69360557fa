/*
 * window_edge.c - window edges: W-1, W, W+1 must differ wherever a row's allowed set changes.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ci/checks.h"
#include "ci/gate_case.h"
#include "judge/exact.h"

#define CHECK "window-edge"

static fc_status run(const gate_case *c, const gate_opts *op, gate_rows *rows, fc_err *err)
{
    mask_params m[3] = {c->gp.mask, c->gp.mask, c->gp.mask};
    m[0].sliding_window -= 1;
    m[2].sliding_window += 1;
    if (m[0].sliding_window < 1)
        return gate_case_error(c, op, rows, "window-edge case needs W >= 2", err);
    gate_setup s[3];
    for (int j = 0; j < 3; j++)
        if (gate_setup_make(&s[j], op, c, m[j], c->builder)) {
            fc_status st = gate_case_error(c, op, rows, s[j].e.msg, err);
            for (int t = 0; t < j; t++)
                gate_setup_free(&s[t]);
            return st;
        }
    size_t nrows = judge_rows(&s[1].jc);
    fc_status st = FC_OK;
    for (int i = 0; i < op->nbackends && !st; i++) {
        rep_row *row = gate_main_row(c, op, i, &s[1], rows, NULL, NULL);
        if (!row) {
            st = gate_rows_oom(err);
            break;
        }
        for (int j = 0; j < 3; j += 2) {
            fc_err e;
            const char *name = j ? "W+1" : "W-1";
            if (judge_kernel(&op->run, op->backends[i], &s[j].jc, &s[j].bm, NULL, 0, s[j].b.o, s[j].b.lse, NULL,
                            &e)) {
                judge_row_fail_check(row, CHECK, "%s run: %s", name, e.msg);
                continue;
            }
            size_t expected, r;
            int32_t k[4];
            r = judge_window_edge(&s[1].jc, m[1], m[j], s[1].b.o, s[1].b.lse, s[j].b.o,
                                  s[j].b.lse, &expected, k);
            if (r < nrows) {
                char at[112];
                attn_row_where(at, sizeof at, s[1].jc.prob, r, -1);
                judge_row_fail_check(row, CHECK, "row %s: allowed keys [%d,%d) under W but "
                                     "[%d,%d) under %s, yet output and LSE are identical", at,
                                     k[0], k[1], k[2], k[3], name);
            }
            if (expected == 0)
                judge_row_fail_check(row, CHECK, "no row's allowed set changes between W "
                                    "and %s: the case cannot test the edge", name);
        }
    }
    for (int j = 0; j < 3; j++)
        gate_setup_free(&s[j]);
    return st;
}

const gate_check gate_check_window_edge = {CHECK, "window edges differ", run};
