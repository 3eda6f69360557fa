/*
 * paged.c - paging: K/V through a seeded page permutation, bitwise equal to contiguous.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/lowp.h"
#include "ci/checks.h"
#include "ci/gate_case.h"

#define CHECK "paged"


static fc_status run(const gate_case *c, const gate_opts *op, gate_rows *rows, fc_err *err)
{
    /* Kernel 1 reads K/V contiguously; the case stays in the matrix, reported as skipped, so
     * the gap is visible when the gate runs kernel 1. */
    if (op->run.kernel < 2)
        return gate_case_rows(c, op, rows, 1,
                              "paged K/V: kernel 1 has no paged path (run with --kernel 2)", err);
    gate_setup s;
    if (gate_setup_make(&s, op, c, c->gp.mask, c->builder))
        return gate_case_error(c, op, rows, s.e.msg, err);
    const attn_problem *p = &s.fc.prob;
    /* Every (batch entry, kv block) gets a distinct page of a larger pool, in a seeded random
     * order; the spare pages are never mapped (the launcher fills them with NaN). */
    int32_t nkb = s.bm.nkb, used = p->seq.batch * nkb, npages = used + 3;
    int32_t *perm = malloc(sizeof(int32_t) * ((size_t)npages + 1));
    size_t no = attn_o_elems(p), nl = judge_rows(&s.jc);
    float *o = malloc(sizeof(float) * (no + 1)), *l = malloc(sizeof(float) * (nl + 1));
    fc_status st = FC_OK;
    if (!perm || !o || !l) {
        st = fc_errf(err, FC_ENOMEM, "out of memory for the page table");
        goto done;
    }
    fix_rng r;
    fix_rng_seed(&r, c->gp.seed ^ 0x9a9eull);
    for (int32_t i = 0; i < npages; i++)
        perm[i] = i;
    for (int32_t i = npages - 1; i > 0; i--) {
        int32_t j = (int32_t)(fix_rng_u64(&r) % (uint64_t)(i + 1)), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (int i = 0; i < op->nbackends; i++) {
        rep_row *row = gate_main_row(c, op, i, &s, rows, NULL, NULL);
        if (!row) {
            st = gate_rows_oom(err);
            goto done;
        }
        fc_err e;
        if (judge_kernel(&op->run, op->backends[i], &s.jc, &s.bm, perm, npages, o, l, NULL, &e)) {
            judge_row_fail_check(row, CHECK, "paged run: %s", e.msg);
            continue;
        }
        size_t q = judge_first_differing_row(&s.jc, o, l, s.b.o, s.b.lse);
        if (q < nl) {
            char at[112];
            attn_row_where(at, sizeof at, s.jc.prob, q, -1);
            judge_row_fail_check(row, CHECK, "row %s differs between the paged (%d pages) and "
                                 "the contiguous run", at, (int)npages);
        }
    }
done:
    free(perm);
    free(o);
    free(l);
    gate_setup_free(&s);
    return st;
}

const gate_check gate_check_paged = {CHECK, "paged equals unpaged", run};
