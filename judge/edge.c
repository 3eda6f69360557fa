/*
 * edge.c - the window-edge rule (judge/exact.h): a kernel that ignores a one-token change of the
 * window gives identical outputs where the allowed keys changed, which no tolerance can see.
 */
#include "judge/exact.h"

size_t judge_window_edge(const judge_case *jc, mask_params w, mask_params e, const float *ow,
                         const float *lw, const float *oe, const float *le, size_t *changed,
                         int32_t keys[4])
{
    seq_view sv = seq_info_view(&jc->prob->seq);
    size_t n = judge_rows(jc), found = n, count = 0;
    for (size_t r = 0; r < n; r++) {
        int32_t lo0, hi0, lo1, hi1, tq = judge_row_token(jc, r);
        mask_token_range(w, sv, tq, &lo0, &hi0);
        mask_token_range(e, sv, tq, &lo1, &hi1);
        if (!((lo0 < hi0 || lo1 < hi1) && (lo0 != lo1 || hi0 != hi1)))
            continue; /* the same keys (or none either way): nothing to tell apart */
        count++;
        if (found == n && judge_row_identical(jc, r, ow, lw, oe, le)) {
            found = r;
            if (keys) {
                keys[0] = lo0;
                keys[1] = hi0;
                keys[2] = lo1;
                keys[3] = hi1;
            }
            if (!changed)
                break;
        }
    }
    if (changed)
        *changed = count;
    return found;
}
