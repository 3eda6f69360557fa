/*
 * fuzz_cases.h - what the whole-file fuzz targets (fuzz_reader.c: a file image in memory,
 * fuzz_file.c: a file on disk) do with a file the reader opened: read every case, and check the
 * ones small enough (reference and block masks), so whatever the reader accepts is exercised by
 * its consumers too. Header-only: each target is one translation unit (fixtures/module.mk).
 */
#ifndef FLEXCHECK_FUZZ_CASES_H
#define FLEXCHECK_FUZZ_CASES_H

#include <stdint.h>

#include "fixtures/fix.h"

/* Keep every tensor and every case's work small: the reader must reject larger sizes with a
 * message, never allocate them. */
#define FUZZ_MAX_BYTES ((size_t)1 << 20)
#define FUZZ_MAX_WORK ((int64_t)1 << 22)

static int fuzz_small_enough(const fix_case *c)
{
    const attn_problem *p = &c->prob;
    int64_t work = (int64_t)p->seq.batch * p->hq * p->seq.lq * p->seq.lk;
    return work <= FUZZ_MAX_WORK && (int64_t)p->seq.lq * p->seq.lk <= FUZZ_MAX_WORK;
}

/* Every case of f read; the small ones checked against the reference; f closed. */
static void fuzz_read_every_case(fix_file *f)
{
    fc_err err;
    for (int i = 0; i < f->ncases; i++) {
        fix_case c;
        if (fix_read_case(f, i, &c, &err))
            continue;
        if (fuzz_small_enough(&c)) {
            fix_check_result r;
            fix_check_case(&c, FIX_BACKEND_REF, 1, &r, &err);
        }
        fix_case_free(&c);
    }
    fix_close(f);
}

#endif
