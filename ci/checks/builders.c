/*
 * builders.c - builders: slow == direct exactly, supersets sound, outputs within tolerance.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/lowp.h"
#include "ci/checks.h"
#include "ci/gate_case.h"

#define CHECK "builders"


static fc_status run(const gate_case *c, const gate_opts *op, gate_rows *rows,
                            fc_err *err)
{
    gate_setup s;
    if (gate_setup_make(&s, op, c, c->gp.mask, BMASK_SLOW))
        return gate_case_error(c, op, rows, s.e.msg, err);
    bmask bms[4];
    int built[4] = {0};
    memset(bms, 0, sizeof bms);
    char exact[REP_WHY_LEN] = "";
    fc_err e;
    fc_status st = FC_OK;
    for (int b = 0; b < 4 && !exact[0]; b++) {
        if (judge_build_mask(&op->run, &bms[b], (bmask_builder)b, s.fc.prob.mask, &s.fc.prob.seq,
                            c->gp.qb, c->gp.kb, &e))
            fc_fmt(exact, sizeof exact, "%s builder: %s", bmask_builder_name((bmask_builder)b),
                     e.msg);
        else
            built[b] = 1;
    }
    if (!exact[0] && bmask_compare(&bms[BMASK_SLOW], &bms[BMASK_DIRECT], &e))
        fc_fmt(exact, sizeof exact, "direct != slow: %s", e.msg);
    for (int b = BMASK_SUPERSET; !exact[0] && b <= BMASK_SUPERSET_TRIM; b++)
        if (bmask_check_sound(&bms[b], s.fc.prob.mask, &s.fc.prob.seq, &e))
            fc_fmt(exact, sizeof exact, "%s unsound: %s", bmask_builder_name((bmask_builder)b),
                     e.msg);
    for (int b = 0; b < 4; b++)
        for (int i = 0; i < op->nbackends; i++) {
            rep_row *row = gate_rows_push(rows);
            if (!row) {
                st = gate_rows_oom(err);
                goto done;
            }
            char suffix[32];
            snprintf(suffix, sizeof suffix, "@%s", bmask_builder_name((bmask_builder)b));
            gate_row_identity(row, c, &s.fc, bmask_builder_name((bmask_builder)b), op,
                              op->backends[i], suffix);
            if (!built[b]) {
                judge_row_fail_check(row, CHECK, "%s", exact);
                continue;
            }
            judge_run_in in = {.jo = &op->run, .backend = op->backends[i], .jc = &s.jc,
                               .bm = &bms[b], .lp = &s.b.lp, .o = s.b.o, .lse = s.b.lse,
                               .rerun = 0};
            gate_judge_run(&in, row);
            if (exact[0])
                judge_row_fail_check(row, CHECK, "%s", exact);
        }
done:
    for (int b = 0; b < 4; b++)
        bmask_free(&bms[b]);
    gate_setup_free(&s);
    return st;
}

const gate_check gate_check_builders = {CHECK, "builders agree", run};
