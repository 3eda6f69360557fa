/*
 * export.h - the gate's matrix as fixture files, for kernels that are not ours (`flexcheck
 * export`): an outside producer runs its kernel on each case, stores its outputs under
 * tested/<label> (docs/fixtures.md), and `flexcheck check` judges them under the same gates.
 *
 * One file per matrix case, <dir>/<case id>.h5, holding the inputs, the float64 oracle and the
 * slow builder's block mask of every case the gate would run for it:
 *  - a case run in every dtype: one fixture case per dtype, named by the dtype ("float16");
 *  - the window-edge check: also the W-1 and W+1 cases ("float16@W-1", "float16@W+1"), so that
 *    check can pair a producer's three outputs and require them to differ where the allowed
 *    keys do (ci/checks/window_edge.c's rule);
 *  - the decode check: also the dense slice ("float16@slice": the decode query against the
 *    last W keys, no mask), a case of its own whose oracle equals the windowed row's, so that
 *    judging a producer's slice output under the gates is ci/checks/decode.c's rule;
 *  - the p-round check: also its designed run ("float16@design": inputs built so that rounding P
 *    to the input type moves the output more than anything else may), which `check` judges
 *    under the gates and under p-round's rule (ci/checks/pround.c, gate_pround_judge);
 *  - the paged check: its case paged (docs/fixtures.md "Paged K/V": pages of KB keys in a seeded
 *    order, stale pages of NaN and garbage, table rows padded with entries never read), and a
 *    second case "<dtype>@prefix" whose sequences share their first page (prefix caching), so
 *    an outside engine's paged path is judged from the dump;
 *  - a layout case: a layout file (root attribute `layout`), one case per layer ("layer00",
 *    ...), each layer with its own seed as the gate runs it, so `check` can run the layers
 *    through shared metadata.
 * Every fixture case records the matrix id it came from (attribute case_id, with the gate's
 * row suffix: "@L03" for a layer, "@W-1" for a window-edge variant) and the check
 * (attribute gate_check), so check's report rows carry the gate's ids.
 * The other exactness checks' extra runs cannot be written as fixture cases: poison needs
 * non-finite or out-of-range keys (a fixture's inputs are finite and representable, by
 * contract), lse-merge needs the kernel run with a given block mask (a case states a mask, not
 * how to run it), and builders compares our builders. Their main
 * case is exported and judged under the gates.
 */
#ifndef FLEXCHECK_CI_EXPORT_H
#define FLEXCHECK_CI_EXPORT_H

#include "ci/gate.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gate_export_stats {
    int files;  /* written */
    int cases;  /* fixture cases in them */
    size_t bytes; /* their total size */
} gate_export_stats;

/* Writes case c as <dir>/<c->id>.h5 (fix_write's rules: atomic, an existing file refused unless
 * force) and adds to *st. */
fc_status gate_export_case(const gate_case *c, const char *dir, int force, gate_export_stats *st,
                           fc_err *err);

#ifdef __cplusplus
}
#endif

#endif
