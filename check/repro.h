/*
 * repro.h - what `flexcheck repro` does, as library code: one case of a fixture file told in
 * full, for an engineer holding a dump of a bad layer. Our kernel runs on the case (twice, for
 * determinism), or the output another producer stored under tested/LABEL is taken; it is judged
 * under docs/tolerance.md, and the lines say every gate, the worst elements with their (b, h, q,
 * d) coordinates and positions, that row's allowed keys (or the row asked for), the block lists
 * of its query tile, the LSE difference, the diagnosis of a failure and the exact command that
 * reruns it.
 *
 * One layer above the judge and the fixtures, beside check.h: the CLI (cli/cmd_repro.c) parses
 * the options, picks the case, runs this in a child process (cli/isolate.h) and prints errors.
 *
 *   fix_case c; mask_params prev; int has_prev;
 *   chk_repro_read(&f, i, &c, &prev, &has_prev, &err);  // then fix_close(&f)
 *   int rc = chk_repro_case(&c, has_prev ? &prev : NULL, &opts, stdout, &err);
 */
#ifndef FLEXCHECK_CHECK_REPRO_H
#define FLEXCHECK_CHECK_REPRO_H

#include <stdint.h>
#include <stdio.h>

#include "fixtures/fix.h"
#include "gpu/gpu.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct chk_repro_opts {
    const char *file;     /* the file's path: named in the lines and the rerun command */
    const char *builder;  /* a builder's name (bmask_builder_parse), or NULL: the stored block
                           * mask, else the direct builder's (the slow one's for an explicit mask) */
    const char *dtype;    /* NULL, or rerun in this precision (fc_dtype_parse): inputs rounded,
                           * oracle recomputed */
    const char *label;    /* NULL: our kernel runs; else the output stored under tested/<label> */
    gpu_backend be;       /* our kernel's backend */
    int32_t kernel;       /* and version */
    int32_t worst;        /* how many worst elements to list (>= 1) */
    const char *row;      /* NULL, or the text of the row asked for ("B,H,Q"), whose values are: */
    long long row_bhq[3]; /* batch entry, query head, query token (range-checked here) */
    int32_t rows;         /* the sample asked for (fix_budget.rows), for the rerun command */
    uint64_t rows_seed;
} chk_repro_opts;

/* Reads case i of the open file f (its budget set by the caller) into *c, with the previous
 * layer's mask parameters of a layout file into *prev (*has_prev 1) for the diagnosis. The
 * caller may close f after. fix_read_case's status and message on failure. */
fc_status chk_repro_read(const fix_file *f, int i, fix_case *c, mask_params *prev, int *has_prev,
                         fc_err *err);

/* Tells case c on out (prev: the previous layer's mask, or NULL). With o->dtype its inputs are
 * rounded and its oracle recomputed in place; otherwise its stored out/lse are confirmed to be
 * the oracle of its inputs first (a file whose out holds something else is refused, never
 * judged against). Returns 0 the case passes, 1 it fails a gate, -1 it could not be told: *err
 * says why in one line (the file and the case named), whatever was printed before it. */
int chk_repro_case(fix_case *c, const mask_params *prev, const chk_repro_opts *o, FILE *out,
                   fc_err *err);

#ifdef __cplusplus
}
#endif

#endif
