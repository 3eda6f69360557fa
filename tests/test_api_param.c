/*
 * test_api_param.c - the calls of API version 7 (include/flexcheck.h), linked against
 * build/libflexcheck.so as a caller links it: flexcheck_status_text gives every status its own
 * static text; flexcheck_problem_set_param sets by name exactly what the older setters set (a
 * problem set either way judges the same output to the same verdict text, and one left at the
 * defaults to another), keeps what it does not name, and refuses an unknown name or a value out
 * of range naming it.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "include/flexcheck.h"
#include "tests/test_rng.h"

enum { HQ = 2, HKV = 1, D = 8, LQ = 48, LK = 48 };
#define NQ (HQ * LQ * D)
#define NK (HKV * LK * D)

/* Inputs that every dtype holds exactly (multiples of 1/64 in [-1, 1)), and an output that is
 * no attention at all: its verdict (a failure, with numbers) depends on every setting. */
static float q[NQ], k[NK], v[NK], out[NQ];

static void draw(void)
{
    uint64_t s = 11;
    float *x[4] = {q, k, v, out};
    size_t n[4] = {NQ, NK, NK, NQ};
    for (int a = 0; a < 4; a++)
        for (size_t i = 0; i < n[a]; i++)
            x[a][i] = (float)rng_int(&s, -64, 63) / 64.0f;
}

static flexcheck_problem *fresh(void)
{
    flexcheck_problem *p = flexcheck_problem_new();
    cr_assert(p);
    cr_assert_eq(flexcheck_problem_set_shape(p, 1, HQ, HKV, LQ, LK, D, D), FLEXCHECK_OK);
    return p;
}

/* p's verdict text on the drawn output (owned by the caller). */
static char *text_of(flexcheck_problem *p)
{
    flexcheck_verdict *vd;
    cr_assert_eq(flexcheck_judge(p, q, NQ, k, NK, v, NK, out, NQ, NULL, 0, &vd), FLEXCHECK_OK,
                 "%s", flexcheck_problem_errmsg(p));
    char *t = strdup(flexcheck_verdict_text(vd));
    flexcheck_verdict_free(vd);
    return t;
}

Test(api7, every_status_has_its_own_static_text)
{
    const flexcheck_status all[] = {FLEXCHECK_OK, FLEXCHECK_EINVAL, FLEXCHECK_ENOMEM,
                                    FLEXCHECK_EUNSUP, FLEXCHECK_EINTERNAL, FLEXCHECK_EINTR};
    const size_t n = sizeof all / sizeof all[0];
    const char *unknown = flexcheck_status_text((flexcheck_status)99);
    cr_assert_str_eq(unknown, "unknown status");
    for (size_t i = 0; i < n; i++) {
        const char *t = flexcheck_status_text(all[i]);
        cr_assert(t && t[0] && strcmp(t, unknown), "status %d", (int)all[i]);
        cr_assert_eq(t, flexcheck_status_text(all[i]), "the same static string every time");
        for (size_t j = 0; j < i; j++)
            cr_assert_str_neq(t, flexcheck_status_text(all[j]));
    }
    cr_assert_eq(flexcheck_api_version(), FLEXCHECK_API_VERSION);
    cr_assert_geq(FLEXCHECK_API_VERSION, 7);
}

/* One setting both ways: set_param(name, value) and the older setter's call. */
typedef struct way {
    const char *name;
    double value;
    flexcheck_status (*old)(flexcheck_problem *p);
} way;

static flexcheck_status causal(flexcheck_problem *p)
{
    return flexcheck_problem_set_mask(p, 1, 0, 0);
}

static flexcheck_status window(flexcheck_problem *p)
{
    return flexcheck_problem_set_mask(p, 0, 9, 0);
}

static flexcheck_status chunk(flexcheck_problem *p)
{
    return flexcheck_problem_set_mask(p, 0, 0, 20);
}

static flexcheck_status scale(flexcheck_problem *p)
{
    return flexcheck_problem_set_scale(p, 0.75);
}

static flexcheck_status softcap(flexcheck_problem *p)
{
    return flexcheck_problem_set_softcap(p, 0.5);
}

static flexcheck_status rows(flexcheck_problem *p)
{
    return flexcheck_problem_set_rows(p, 5, 0);
}

Test(api7, set_param_sets_what_the_older_setters_set)
{
    draw();
    const way ways[] = {{"causal", 1, causal},       {"sliding_window", 9, window},
                        {"window", 9, window},       {"chunk_size", 20, chunk},
                        {"chunk", 20, chunk},        {"scale", 0.75, scale},
                        {"softcap", 0.5, softcap},   {"rows", 5, rows}};
    flexcheck_problem *d = fresh();
    char *dflt = text_of(d);
    flexcheck_problem_free(d);
    for (size_t i = 0; i < sizeof ways / sizeof ways[0]; i++) {
        flexcheck_problem *a = fresh(), *b = fresh();
        cr_assert_eq(ways[i].old(a), FLEXCHECK_OK, "%s", flexcheck_problem_errmsg(a));
        cr_assert_eq(flexcheck_problem_set_param(b, ways[i].name, ways[i].value), FLEXCHECK_OK,
                     "%s: %s", ways[i].name, flexcheck_problem_errmsg(b));
        char *ta = text_of(a), *tb = text_of(b);
        cr_assert_str_eq(ta, tb, "%s", ways[i].name);
        cr_assert_str_neq(ta, dflt, "%s changed nothing", ways[i].name);
        free(ta);
        free(tb);
        flexcheck_problem_free(a);
        flexcheck_problem_free(b);
    }
    free(dflt);
}

Test(api7, set_param_keeps_what_it_does_not_name)
{
    draw();
    flexcheck_problem *a = fresh(), *b = fresh();
    cr_assert_eq(flexcheck_problem_set_mask(a, 1, 9, 0), FLEXCHECK_OK);
    cr_assert_eq(flexcheck_problem_set_mask(b, 1, 9, 20), FLEXCHECK_OK);
    cr_assert_eq(flexcheck_problem_set_param(b, "chunk", 0), FLEXCHECK_OK); /* causal, W kept */
    char *ta = text_of(a), *tb = text_of(b);
    cr_assert_str_eq(ta, tb);
    free(ta);
    free(tb);
    /* the budget's two halves, and the rows' two */
    uint64_t mem, work;
    cr_assert_eq(flexcheck_problem_set_budget(a, 1ull << 31, 1ull << 30), FLEXCHECK_OK);
    cr_assert_eq(flexcheck_problem_set_param(a, "max_work", 12345), FLEXCHECK_OK);
    cr_assert_eq(flexcheck_problem_get_budget(a, &mem, &work), FLEXCHECK_OK);
    cr_assert(mem == 1ull << 31 && work == 12345, "%llu %llu", (unsigned long long)mem,
              (unsigned long long)work);
    cr_assert_eq(flexcheck_problem_set_param(a, "max_memory", 3ull << 30), FLEXCHECK_OK);
    cr_assert_eq(flexcheck_problem_get_budget(a, &mem, &work), FLEXCHECK_OK);
    cr_assert(mem == 3ull << 30 && work == 12345);
    flexcheck_problem *c = fresh(), *e = fresh();
    cr_assert_eq(flexcheck_problem_set_rows(c, 6, 77), FLEXCHECK_OK);
    cr_assert_eq(flexcheck_problem_set_param(e, "rows_seed", 77), FLEXCHECK_OK);
    cr_assert_eq(flexcheck_problem_set_param(e, "rows", 6), FLEXCHECK_OK);
    ta = text_of(c);
    tb = text_of(e);
    cr_assert_str_eq(ta, tb);
    cr_assert(strstr(ta, "seed 77"), "%s", ta);
    free(ta);
    free(tb);
    flexcheck_problem_free(a);
    flexcheck_problem_free(b);
    flexcheck_problem_free(c);
    flexcheck_problem_free(e);
}

Test(api7, set_param_refuses_an_unknown_name_or_a_bad_value_naming_it)
{
    flexcheck_problem *p = fresh();
    cr_assert_eq(flexcheck_problem_set_param(p, "windw", 3), FLEXCHECK_EINVAL);
    const char *m = flexcheck_problem_errmsg(p);
    cr_assert(strstr(m, "unknown parameter 'windw'") && strstr(m, "sliding_window (window)") &&
                  strstr(m, "max_work"), "%s", m);
    cr_assert_eq(flexcheck_problem_set_param(p, NULL, 3), FLEXCHECK_EINVAL);
    cr_assert(strstr(flexcheck_problem_errmsg(p), "name is NULL"));
    const struct {
        const char *name;
        double value;
        const char *says;
    } bad[] = {{"window", 2.5, "sliding_window = 2.5"},   {"window", -1, "sliding_window = -1"},
               {"causal", 2, "causal = 2"},                {"chunk", NAN, "chunk_size = nan"},
               {"rows", -2, "rows = -2"},                  {"rows", 0.5, "rows = 0.5"},
               {"scale", -1, "set_scale: -1"},
               {"softcap", INFINITY, "set_softcap: inf"},
               {"max_memory", 1e300, "max_memory = 1.0000000000000001e+300"},
               {"window", 4294967296.0, "sliding_window = 4294967296"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_assert_eq(flexcheck_problem_set_param(p, bad[i].name, bad[i].value), FLEXCHECK_EINVAL,
                     "%s = %g", bad[i].name, bad[i].value);
        cr_assert(strstr(flexcheck_problem_errmsg(p), bad[i].says), "%s",
                  flexcheck_problem_errmsg(p));
    }
    cr_assert_eq(flexcheck_problem_set_param(NULL, "window", 3), FLEXCHECK_EINVAL);
    flexcheck_problem_free(p);
}
