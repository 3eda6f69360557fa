/*
 * guard.c - output buffers with guard bytes for gate H6 (tol.h). A kernel that writes one
 * element past its output, or one before it, changes a guard byte and fails the case even
 * when the allocator would never have noticed.
 */
#include <stdlib.h>
#include <string.h>

#include "base/guard.h"

/* Byte i of the guard region (leading guard 0..63, trailing 64..127). Position-dependent, so
 * a shifted or partial copy of the guard is still caught, and no byte is 0x00 or 0xff (the
 * values a zero fill or the NaN data fill would leave). */
static unsigned char guard_byte(size_t i)
{
    return (unsigned char)(0x40u + ((i * 37u + 11u) % 128u));
}

void fc_guard_fill(unsigned char *region, size_t nbytes)
{
    unsigned char *after = region + FC_GUARD_BYTES + nbytes;
    for (size_t i = 0; i < FC_GUARD_BYTES; i++) {
        region[i] = guard_byte(i);
        after[i] = guard_byte(FC_GUARD_BYTES + i);
    }
}

int fc_guard_intact(const unsigned char *region, size_t nbytes, ptrdiff_t *bad)
{
    const unsigned char *after = region + FC_GUARD_BYTES + nbytes;
    for (size_t i = 0; i < FC_GUARD_BYTES; i++)
        if (region[i] != guard_byte(i)) {
            if (bad)
                *bad = (ptrdiff_t)i - FC_GUARD_BYTES;
            return 0;
        }
    for (size_t i = 0; i < FC_GUARD_BYTES; i++)
        if (after[i] != guard_byte(FC_GUARD_BYTES + i)) {
            if (bad)
                *bad = (ptrdiff_t)(nbytes + i);
            return 0;
        }
    return 1;
}

fc_status fc_guarded_alloc(fc_guarded *g, size_t nbytes, fc_err *err)
{
    memset(g, 0, sizeof *g);
    if (nbytes > SIZE_MAX - 2 * (size_t)FC_GUARD_BYTES)
        return fc_errf(err, FC_ENOMEM, "guarded buffer of %zu bytes: size overflows", nbytes);
    g->base = malloc(nbytes + 2 * (size_t)FC_GUARD_BYTES);
    if (!g->base)
        return fc_errf(err, FC_ENOMEM, "guarded buffer of %zu bytes: out of memory", nbytes);
    g->data = g->base + FC_GUARD_BYTES;
    g->nbytes = nbytes;
    memset(g->data, 0xff, nbytes);
    fc_guard_fill(g->base, nbytes);
    return FC_OK;
}

void fc_guarded_free(fc_guarded *g)
{
    if (!g)
        return;
    free(g->base);
    memset(g, 0, sizeof *g);
}

int fc_guarded_intact(const fc_guarded *g, ptrdiff_t *bad)
{
    return fc_guard_intact(g->base, g->nbytes, bad);
}
