/*
 * test_spec_mask.h - the families' predicate of docs/semantics.md section 2 written out again
 * from the text, on positions (pq, pk) of one sequence, for the diagnosis suites
 * (tests/test_diag.c, tests/test_diag_xterms.c) to compute buggy outputs without masks/'s
 * code. Static helpers, one copy per suite (tests/test_lines.h's way).
 */
#ifndef FLEXCHECK_TEST_SPEC_MASK_H
#define FLEXCHECK_TEST_SPEC_MASK_H

#include <stdint.h>

#include "masks/mask.h"

/* Floor division (chunks of negative positions: section 2 floors). */
static inline int64_t fdiv(int64_t a, int64_t b)
{
    return (a >= 0 ? a : a - b + 1) / b;
}

static inline int spec_allowed(mask_params m, int64_t pq, int64_t pk)
{
    if (m.causal && pk > pq)
        return 0;
    if (m.sliding_window > 0 && (pq - pk >= m.sliding_window || pk - pq >= m.sliding_window))
        return 0;
    if (m.chunk_size > 0 && fdiv(pq, m.chunk_size) != fdiv(pk, m.chunk_size))
        return 0;
    return 1;
}

#endif
