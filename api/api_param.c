/*
 * api_param.c - the calls that take or give names (API version 7; include/flexcheck.h): a
 * status's text, and the problem's scalar settings by name (zstd's ZSTD_CCtx_setParameter), so
 * that a new mask parameter (one line in masks/mask.h's MASK_PARAMS) or scalar setting is a new
 * name, not a new call. Each name sets what an older setter sets, through that setter or the
 * mask parameters' table, so the checks and messages are theirs.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "api/api_internal.h"
#include "masks/params.h"
#include "masks/terms.h"

EXPORT const char *flexcheck_status_text(flexcheck_status st)
{
    switch (st) {
    case FLEXCHECK_OK:
        return "success";
    case FLEXCHECK_EINVAL:
        return "invalid argument";
    case FLEXCHECK_ENOMEM:
        return "out of memory";
    case FLEXCHECK_EUNSUP:
        return "not supported (by this library, or on this CPU)";
    case FLEXCHECK_EINTERNAL:
        return "internal error of flexcheck (please report it)";
    case FLEXCHECK_EINTR:
        return "interrupted (flexcheck_problem_interrupt)";
    }
    return "unknown status";
}

/* x as an integer in [lo, hi] (exactly: no fraction, no rounding), else 0. */
static int integral(double x, double lo, double hi, double *out)
{
    if (!(x >= lo && x <= hi) || x != floor(x))
        return 0;
    *out = x;
    return 1;
}

/* The settings that are not mask parameters: the name, its range (integers: lo, hi), and how
 * it is set (an older setter, with p's other values kept). */
typedef struct scalar {
    const char *name;
    int integer;
    double lo, hi;
    flexcheck_status (*set)(flexcheck_problem *p, double v);
} scalar;

static flexcheck_status set_scale(flexcheck_problem *p, double v)
{
    return flexcheck_problem_set_scale(p, v);
}

static flexcheck_status set_softcap(flexcheck_problem *p, double v)
{
    return flexcheck_problem_set_softcap(p, v);
}

static flexcheck_status set_rows(flexcheck_problem *p, double v)
{
    return flexcheck_problem_set_rows(p, (int32_t)v, p->rows_seed);
}

static flexcheck_status set_rows_seed(flexcheck_problem *p, double v)
{
    return flexcheck_problem_set_rows(p, p->rows, (uint64_t)v);
}

static flexcheck_status set_max_memory(flexcheck_problem *p, double v)
{
    return flexcheck_problem_set_budget(p, (uint64_t)v, p->max_work);
}

static flexcheck_status set_max_work(flexcheck_problem *p, double v)
{
    return flexcheck_problem_set_budget(p, p->max_memory, (uint64_t)v);
}

/* 2^53: every integer up to it is a double exactly; a byte or multiply-add count past it is
 * not one a judge could hold anyway. */
#define EXACT_MAX 9007199254740992.0

static const scalar scalars[] = {
    {"scale", 0, 0, 0, set_scale},
    {TERM_SOFTCAP_NAME, 0, 0, 0, set_softcap},
    {"rows", 1, -1, INT32_MAX, set_rows},
    {"rows_seed", 1, 0, EXACT_MAX, set_rows_seed},
    {"max_memory", 1, 0, EXACT_MAX, set_max_memory},
    {"max_work", 1, 0, EXACT_MAX, set_max_work},
};
#define NSCALARS (sizeof scalars / sizeof scalars[0])

/* Every name set_param knows, for its refusal: "causal, sliding_window (window), ...". */
static void known_names(char *buf, size_t cap)
{
    size_t n = 0;
    buf[0] = '\0';
    for (int i = 0; i < MASK_NPARAMS && n < cap; i++) {
        const mask_param_info *m = &mask_param_table[i];
        n += (size_t)snprintf(buf + n, cap - n, strcmp(m->name, m->opt) ? "%s (%s), " : "%s, ",
                              m->name, m->opt);
    }
    for (size_t i = 0; i < NSCALARS && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%s", scalars[i].name,
                              i + 1 < NSCALARS ? ", " : "");
}

EXPORT flexcheck_status flexcheck_problem_set_param(flexcheck_problem *p, const char *name,
                                                    double value)
{
    API_ENTER(p);
    char known[320];
    known_names(known, sizeof known);
    if (!name)
        return fail(p, FLEXCHECK_EINVAL, "set_param: name is NULL (known: %s)", known);
    double v;
    /* a mask parameter, by its fixture attribute's name or its command-line option's */
    for (int i = 0; i < MASK_NPARAMS; i++) {
        const mask_param_info *m = &mask_param_table[i];
        if (strcmp(name, m->name) && strcmp(name, m->opt))
            continue;
        if (!integral(value, 0, m->max, &v))
            return fail(p, FLEXCHECK_EINVAL, "set_param: %s = %.17g: must be an integer in [0, "
                        "%d]%s", m->name, value, (int)m->max,
                        mask_param_is_flag(i) ? " (0 or 1)" : " (0 = off)");
        mask_param_set(&p->mask, i, (int32_t)v);
        return ok(p);
    }
    for (size_t i = 0; i < NSCALARS; i++) {
        const scalar *s = &scalars[i];
        if (strcmp(name, s->name))
            continue;
        if (s->integer && !integral(value, s->lo, s->hi, &v))
            return fail(p, FLEXCHECK_EINVAL, "set_param: %s = %.17g: must be an integer in "
                        "[%.17g, %.17g]", s->name, value, s->lo, s->hi);
        return s->set(p, value);
    }
    return fail(p, FLEXCHECK_EINVAL, "set_param: unknown parameter '%s' (known: %s)",
                fc_esc(name).s, known);
}
