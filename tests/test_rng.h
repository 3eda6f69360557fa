/*
 * test_rng.h - the tests' one seeded generator (splitmix64), so a failing seed replays the same
 * configuration in every suite that draws one.
 */
#ifndef FLEXCHECK_TEST_RNG_H
#define FLEXCHECK_TEST_RNG_H

#include <stdint.h>

static inline uint64_t rng_next(uint64_t *st)
{
    uint64_t z = (*st += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline int32_t rng_int(uint64_t *st, int32_t lo, int32_t hi) /* in [lo, hi] */
{
    return lo + (int32_t)(rng_next(st) % (uint64_t)(hi - lo + 1));
}

#endif
