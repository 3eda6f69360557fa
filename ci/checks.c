/* checks.c - the table of gate checks (checks.h): one line per check, in report order. Each
 * line names the gate_check that ci/checks/<name>.c exports as gate_check_<name>. */
#include <string.h>

#include "ci/checks.h"

#define GATE_CHECKS(X)                                                                         \
    X(numeric)     /* kernel vs oracle under H1-H7 (M1, M2, M5) */                             \
    X(window_edge) /* W-1, W, W+1 differ where a row's allowed set changes (M4) */             \
    X(poison)      /* keys no query may see poisoned: output bitwise unchanged (M4) */         \
    X(lse_merge)   /* complementary key-tile subsets merged by LSE == the union (M4) */        \
    X(decode)      /* a decode row with causal window W == dense over its last W keys (M4) */  \
    X(builders)    /* slow == direct exactly, superset sound, outputs agree (M3) */            \
    X(layout)      /* hybrid layout through shared metadata == fresh builds (M6) */            \
    X(paged)       /* paged K/V bitwise equal to contiguous (M2) */                            \
    X(pround)      /* fp16/bf16: P rounded to the input type before P.V (M4) */            \
    /* a new check: one line above this one */

#define DECLARE(n) extern const gate_check gate_check_##n;
GATE_CHECKS(DECLARE)
#define ADDRESS(n) &gate_check_##n,
const gate_check *const gate_checks[] = {GATE_CHECKS(ADDRESS)};
const size_t gate_nchecks = sizeof gate_checks / sizeof gate_checks[0];
_Static_assert(sizeof gate_checks / sizeof gate_checks[0] <= GATE_MAX_CHECKS,
               "raise GATE_MAX_CHECKS");

const gate_check *gate_check_find(const char *name)
{
    for (size_t i = 0; name && i < gate_nchecks; i++)
        if (!strcmp(gate_checks[i]->name, name))
            return gate_checks[i];
    return NULL;
}

size_t gate_check_report_list(rep_check *out)
{
    size_t n = 0;
    for (size_t i = 0; i < gate_nchecks; i++)
        if (gate_checks[i]->title)
            out[n++] = (rep_check){gate_checks[i]->name, gate_checks[i]->title};
    return n;
}
