/*
 * guard.h - output buffers with guard bytes (the evidence of gate H6, docs/tolerance.md): a
 * kernel that writes one element past its output, or one before it, changes a guard byte and
 * fails the case even when the allocator would never have noticed. Host only (C11); the
 * launcher guards its device buffers with the same pattern through fc_guard_fill/intact.
 */
#ifndef FLEXCHECK_BASE_GUARD_H
#define FLEXCHECK_BASE_GUARD_H

#include <stddef.h>

#include "base/fc.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FC_GUARD_BYTES 64

/* [FC_GUARD_BYTES guard][nbytes data][FC_GUARD_BYTES guard] in one allocation. */
typedef struct fc_guarded {
    unsigned char *base; /* the allocation */
    void *data;          /* base + FC_GUARD_BYTES: what the kernel writes */
    size_t nbytes;
} fc_guarded;

/* Allocates and fills the guards with the known pattern, and the data with 0xff bytes (a NaN
 * in every float): an element the kernel never writes then fails H3. */
fc_status fc_guarded_alloc(fc_guarded *g, size_t nbytes, fc_err *err);
void fc_guarded_free(fc_guarded *g);
/* 1 iff both guards still hold the pattern; else 0 and *bad (may be NULL) = offset of the
 * first changed byte relative to data (negative: before it, >= nbytes: after it). */
int fc_guarded_intact(const fc_guarded *g, ptrdiff_t *bad);

/* The same on a caller-owned region of nbytes + 2 * FC_GUARD_BYTES bytes (for example the
 * host copy of a guarded device buffer). fc_guard_fill writes only the two guards. */
void fc_guard_fill(unsigned char *region, size_t nbytes);
int fc_guard_intact(const unsigned char *region, size_t nbytes, ptrdiff_t *bad);

#ifdef __cplusplus
}
#endif

#endif
