/*
 * test_tol.c - the gates of docs/tolerance.md (reports/tol.h). Each gate fails on a planted
 * defect and passes on the clean input; expected numbers (floors, NMSE, LSE limits) are worked
 * out by hand in the comments from dyadic values, never taken from the code under test.
 *
 * Run alone: CI=true make BUILD=build-rep build-rep/tests/test_tol && ./build-rep/tests/test_tol
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "reports/rep.h"
#include "reports/tol.h"

#define ROWS 3
#define DV 4
#define N (ROWS * DV)
#define E_LP 0.015625 /* 2^-6: the baseline's error on every element of the clean case */

/* One synthetic case: two full rows and one empty row (row 2). */
typedef struct tcase {
    fc_dtype dt;
    size_t rows, dv;
    float o[N], lse[ROWS], o_lp[N];
    double o_gold[N], lse_gold[ROWS];
} tcase;

/* Dyadic gold values, so every float and every error below is exact.
 * sum(gold^2) = .25 + .0625 + 1 + .015625 + .5625 + .140625 + .390625 + .03515625 = 2.45703125 */
static const double gold_rows[2][DV] = {{0.5, -0.25, 1.0, 0.125}, {0.75, 0.375, -0.625, 0.1875}};
static const double gold_lse[2] = {1.5, 2.0};

/* Clean: O equals the oracle exactly, O_lp is off by 2^-6 everywhere (not degenerate), the
 * empty row is exactly 0 with LSE -inf. Every gate passes for every dtype. */
static void clean_case(tcase *c, fc_dtype dt)
{
    memset(c, 0, sizeof *c);
    c->dt = dt;
    c->rows = ROWS;
    c->dv = DV;
    for (int r = 0; r < 2; r++) {
        for (int j = 0; j < DV; j++) {
            c->o_gold[r * DV + j] = gold_rows[r][j];
            c->o[r * DV + j] = (float)gold_rows[r][j];
            c->o_lp[r * DV + j] = (float)(gold_rows[r][j] + E_LP);
        }
        c->lse_gold[r] = gold_lse[r];
        c->lse[r] = (float)gold_lse[r];
    }
    c->lse_gold[2] = -INFINITY;
    c->lse[2] = -INFINITY;
}

static rep_inputs inputs_of(const tcase *c)
{
    return (rep_inputs){.dtype = c->dt, .rows = c->rows, .dv = c->dv, .o = c->o, .lse = c->lse,
                        .o_gold = c->o_gold, .lse_gold = c->lse_gold, .o_lp = c->o_lp};
}

static rep_verdict judge_inputs(const char *name, const rep_inputs *in)
{
    rep_verdict v;
    fc_err err = {{0}};
    fc_status st = rep_evaluate(in, &v, &err);
    cr_assert_eq(st, FC_OK, "%s: rep_evaluate failed: %s", name, err.msg);
    return v;
}

static rep_verdict judge(const char *name, const tcase *c)
{
    rep_inputs in = inputs_of(c);
    return judge_inputs(name, &in);
}

static const char *first_gate_name(const rep_verdict *v)
{
    return v->first_fail < 0 ? "none" : rep_gate_name((rep_gate)v->first_fail);
}

/* ---- planted defects, one a line ------------------------------------------------------- */

typedef enum defect {
    NONE,
    NAN_IN_O,             /* O[1] = NaN */
    POS_INF_IN_O,         /* O[2] = +inf, gold finite */
    NEG_INF_LSE_FULL_ROW, /* LSE[0] = -inf in a row that has keys */
    NAN_IN_LSE,           /* LSE[1] = NaN */
    POS_INF_LSE_EMPTY_ROW,/* LSE[2] = +inf in the empty row */
    TINY_IN_EMPTY_ROW,    /* O[2][1] = 1e-30 */
    NEG_TINY_IN_EMPTY_ROW,/* O[2][0] = -2^-149, the smallest negative subnormal */
    NAN_IN_EMPTY_ROW,     /* O[2][2] = NaN: H3 first, and H4 fails too */
    NEG_ZERO_IN_EMPTY_ROW,/* O[2][3] = -0.0: equal to 0, allowed */
    FINITE_LSE_EMPTY_ROW, /* LSE[2] = -1e30 */
    O_ERR_3X,             /* O[2] = gold + 3 * e_lp_max */
    O_ERR_1_5X,           /* O[2] = gold + 1.5 * e_lp_max */
    LSE_OFF_2E3,          /* LSE[0] = g + 2e-3 * |g| */
    LSE_OFF_5E4,          /* LSE[0] = g + 5e-4 * |g| */
    NAN_AND_H1_ERROR,     /* NaN in O and an H1-size error: H3 is reported first */
} defect;

typedef struct defect_case {
    const char *name;
    fc_dtype dt;
    defect d;
    int pass;
    rep_gate first; /* meaningful when !pass */
} defect_case;

static const defect_case defects[] = {
    {.name = "clean f32", .dt = FC_F32, .d = NONE, .pass = 1},
    {.name = "clean f16", .dt = FC_F16, .d = NONE, .pass = 1},
    {.name = "clean bf16", .dt = FC_BF16, .d = NONE, .pass = 1},
    {.name = "NaN in O", .dt = FC_F16, .d = NAN_IN_O, .first = REP_H3},
    {.name = "+inf in O where gold is finite", .dt = FC_F16, .d = POS_INF_IN_O, .first = REP_H3},
    {.name = "-inf LSE in a row with keys", .dt = FC_F32, .d = NEG_INF_LSE_FULL_ROW, .first = REP_H3},
    {.name = "NaN in LSE", .dt = FC_BF16, .d = NAN_IN_LSE, .first = REP_H3},
    {.name = "+inf LSE in an empty row", .dt = FC_F16, .d = POS_INF_LSE_EMPTY_ROW, .first = REP_H3},
    {.name = "tiny nonzero in an empty row", .dt = FC_F16, .d = TINY_IN_EMPTY_ROW, .first = REP_H4},
    {.name = "-2^-149 in an empty row", .dt = FC_BF16, .d = NEG_TINY_IN_EMPTY_ROW, .first = REP_H4},
    {.name = "NaN in an empty row", .dt = FC_F32, .d = NAN_IN_EMPTY_ROW, .first = REP_H3},
    {.name = "-0.0 in an empty row", .dt = FC_F16, .d = NEG_ZERO_IN_EMPTY_ROW, .pass = 1},
    {.name = "finite LSE in an empty row", .dt = FC_F32, .d = FINITE_LSE_EMPTY_ROW, .first = REP_H4},
    {.name = "f16 O error 3x e_lp_max", .dt = FC_F16, .d = O_ERR_3X, .first = REP_H1},
    {.name = "f16 O error 1.5x e_lp_max", .dt = FC_F16, .d = O_ERR_1_5X, .pass = 1},
    {.name = "bf16 O error 3x e_lp_max", .dt = FC_BF16, .d = O_ERR_3X, .first = REP_H1},
    {.name = "f16 LSE off by 2e-3|lse|", .dt = FC_F16, .d = LSE_OFF_2E3, .first = REP_H5},
    {.name = "f16 LSE off by 5e-4|lse|", .dt = FC_F16, .d = LSE_OFF_5E4, .pass = 1},
    {.name = "f32 LSE off by 5e-4|lse|", .dt = FC_F32, .d = LSE_OFF_5E4, .first = REP_H5},
    {.name = "NaN before an H1 error", .dt = FC_F16, .d = NAN_AND_H1_ERROR, .first = REP_H3},
};

static void plant(tcase *c, defect d)
{
    switch (d) {
    case NONE: break;
    case NAN_IN_O: c->o[1] = NAN; break;
    case POS_INF_IN_O: c->o[2] = INFINITY; break;
    case NEG_INF_LSE_FULL_ROW: c->lse[0] = -INFINITY; break;
    case NAN_IN_LSE: c->lse[1] = NAN; break;
    case POS_INF_LSE_EMPTY_ROW: c->lse[2] = INFINITY; break;
    case TINY_IN_EMPTY_ROW: c->o[2 * DV + 1] = 1e-30f; break;
    case NEG_TINY_IN_EMPTY_ROW: c->o[2 * DV] = -0x1p-149f; break;
    case NAN_IN_EMPTY_ROW: c->o[2 * DV + 2] = NAN; break;
    case NEG_ZERO_IN_EMPTY_ROW: c->o[2 * DV + 3] = -0.0f; break;
    case FINITE_LSE_EMPTY_ROW: c->lse[2] = -1e30f; break;
    /* gold[2] = 1.0, e_lp_max = 2^-6. f16 floor 2^-11, bf16 floor 2^-7 (the clean floor
     * test): the H1 limit 2 * 2^-6 + floor is 0.0317 (f16) or 0.0391 (bf16). 3x = 0.046875 fails it, 1.5x = 0.0234375 passes. NMSE at 1.5x:
     * 0.0234375^2 / 2.45703125 = 2.24e-4, under H2's ceiling c^2 * NMSE_lp = 4 * (8 * 2^-12 /
     * 2.45703125) = 3.18e-3 (f16, bf16; f32: 100 * 7.95e-4). */
    case O_ERR_3X: c->o[2] = (float)(1.0 + 3 * E_LP); break;
    case O_ERR_1_5X: c->o[2] = (float)(1.0 + 1.5 * E_LP); break;
    /* LSE_gold[0] = 1.5. f16 limit 1e-3 + 1e-3 * 1.5 = 2.5e-3: off 3e-3 fails, 7.5e-4 passes.
     * f32 limit 1e-5 + 1e-5 * 1.5 = 2.5e-5: 7.5e-4 fails. */
    case LSE_OFF_2E3: c->lse[0] = (float)(1.5 + 2e-3 * 1.5); break;
    case LSE_OFF_5E4: c->lse[0] = (float)(1.5 + 5e-4 * 1.5); break;
    case NAN_AND_H1_ERROR:
        c->o[1] = NAN;
        c->o[2] = (float)(1.0 + 3 * E_LP);
        break;
    }
}

Test(gates, each_planted_defect_fails_its_gate_first_and_clean_inputs_pass)
{
    for (size_t k = 0; k < sizeof defects / sizeof defects[0]; k++) {
        const defect_case *dc = &defects[k];
        tcase c;
        clean_case(&c, dc->dt);
        plant(&c, dc->d);
        rep_verdict v = judge(dc->name, &c);
        if (dc->pass) {
            cr_expect(v.pass, "%s: expected pass, got %s", dc->name, rep_verdict_reason(&v));
            cr_expect_eq(v.first_fail, -1, "%s: first_fail %d", dc->name, v.first_fail);
        } else {
            cr_expect(!v.pass, "%s: expected a failure", dc->name);
            cr_expect_eq(v.first_fail, (int)dc->first, "%s: first failing gate %s, want %s (%s)",
                         dc->name, first_gate_name(&v), rep_gate_name(dc->first),
                         rep_verdict_reason(&v));
            cr_expect_eq(v.gate[dc->first], REP_FAIL, "%s: gate not marked failed", dc->name);
            cr_expect(strncmp(rep_verdict_reason(&v), rep_gate_name(dc->first), 2) == 0,
                      "%s: reason '%s' does not name the gate", dc->name, rep_verdict_reason(&v));
        }
    }
}

Test(gates, a_nan_in_an_empty_row_fails_h4_as_well_as_h3)
{
    tcase c;
    clean_case(&c, FC_F32);
    plant(&c, NAN_IN_EMPTY_ROW);
    rep_verdict v = judge("NaN in an empty row", &c);
    cr_expect_eq(v.gate[REP_H3], REP_FAIL, "NaN in an empty row: H3 passed");
    cr_expect_eq(v.gate[REP_H4], REP_FAIL, "NaN in an empty row: H4 passed");
    cr_expect_eq(v.gate[REP_H1], REP_PASS, "NaN in an empty row: H1 %s", v.why[REP_H1]);
}

Test(gates, h6_and_h7_are_not_run_without_their_evidence)
{
    tcase c;
    clean_case(&c, FC_F16);
    rep_verdict v = judge("clean f16", &c);
    cr_expect_eq(v.gate[REP_H6], REP_NOT_RUN, "clean f16: H6 ran without guarded buffers");
    cr_expect_eq(v.gate[REP_H7], REP_NOT_RUN, "clean f16: H7 ran without a rerun");
    for (int g = REP_H3; g <= REP_H5; g++)
        cr_expect_eq(v.gate[g], REP_PASS, "clean f16: gate %s not passed", rep_gate_name(g));
}

Test(gates, nan_in_o_is_counted_and_excluded_from_the_metrics)
{
    tcase c;
    clean_case(&c, FC_F16);
    c.o[1] = NAN;
    c.o[5] = INFINITY;
    rep_verdict v = judge("NaN and inf in O", &c);
    cr_expect_eq(v.nan_count, 1, "NaN and inf in O: nan_count %zu", v.nan_count);
    cr_expect_eq(v.inf_count, 1, "NaN and inf in O: inf_count %zu", v.inf_count);
    /* 8 elements in the full rows, two of them non-finite. */
    cr_expect_eq(v.compared, 6, "NaN and inf in O: compared %zu", v.compared);
    cr_expect(v.max_err == 0, "NaN and inf in O: max_err %g", v.max_err);
    cr_expect_eq(v.gate[REP_H1], REP_PASS, "NaN and inf in O: H1 should judge the finite rest");
}

Test(gates, matching_infinities_pass_h3_and_mismatched_signs_fail)
{
    tcase c;
    clean_case(&c, FC_F32);
    c.o_gold[3] = INFINITY;
    c.o[3] = INFINITY;
    rep_verdict v = judge("+inf matching +inf", &c);
    cr_expect_eq(v.gate[REP_H3], REP_PASS, "+inf matching +inf: %s", v.why[REP_H3]);
    cr_expect_eq(v.inf_count, 1, "+inf matching +inf: inf_count %zu", v.inf_count);

    c.o[3] = -INFINITY;
    v = judge("-inf against +inf", &c);
    cr_expect_eq(v.first_fail, REP_H3, "-inf against +inf: first %s", first_gate_name(&v));

    c.o[3] = 1.0f;
    v = judge("finite against +inf", &c);
    cr_expect_eq(v.first_fail, REP_H3, "finite against +inf: first %s", first_gate_name(&v));
}

/* ---- H1 floor: hand arithmetic ------------------------------------------------------------
 * float16 has 11 significant bits: ulp 2^-10 in [1,2), 2^-11 in [0.5,1), 2^-12 in [0.25,0.5),
 * subnormal spacing 2^-24 below 2^-14. bfloat16 has 8: ulp 2^-7 in [1,2), 2^-8 in [0.5,1),
 * 2^-9 in [0.25,0.5). 0.3f = 10066330 * 2^-25 = 0.300000011920928955078125.
 *
 * f16, g = 1.0: 1.3f * 2^10 = 1331.2 -> 1331 -> 1.2998046875 (= 43614208 * 2^-25);
 *   minus 0.3f = 33547878 * 2^-25 = 0.999804675579071... (exact in float);
 *   * 2^11 = 2047.6 -> 2048 -> 1.0. Term |1.0 - 1.0| = 0.
 * f16, g = 0.0: 0.3f * 2^12 = 1228.8 -> 1229 -> 0.300048828125 (= 10067968 * 2^-25);
 *   minus 0.3f = 1638 * 2^-25 = 819 * 2^-24, a float16 subnormal, exact. Term 819 * 2^-24.
 * f16, g = 0.5: 0.8000000119 * 2^11 = 1638.4 -> 1638 -> 0.7998046875; minus 0.3f =
 *   0.4998046756 * 2^12 = 2047.2 -> 2047 -> 0.499755859375. Term 0.5 - that = 2^-12.
 * bf16, g = 0.0: 0.3f * 2^9 = 153.6 -> 154 -> 0.30078125 (= 10092544 * 2^-25); minus 0.3f =
 *   26214 * 2^-25; 26214 has 15 bits, keep 8: 26214 / 2^7 = 204.796875 -> 205 ->
 *   205 * 2^-18. Term 205 * 2^-18 = 7.82012939453125e-4.
 * bf16, g = 1.0: 1.3f * 2^7 = 166.4 -> 166 -> 1.296875; minus 0.3f = 0.99687498808 * 2^8 =
 *   255.2 -> 255 -> 0.99609375. Term 2^-8.
 * bf16, g = 0.5: 0.8000000119 * 2^8 = 204.8 -> 205 -> 0.80078125; minus 0.3f = 0.50078123808
 *   * 2^8 = 128.2 -> 128 -> 0.5. Term 0.
 */
typedef struct floor_case {
    const char *name;
    fc_dtype dt;
    double gold;
    double term;
} floor_case;

static const floor_case floor_terms[] = {
    {.name = "f16 g=1.0", .dt = FC_F16, .gold = 1.0, .term = 0},
    {.name = "f16 g=0.0", .dt = FC_F16, .gold = 0.0, .term = 819.0 / 16777216.0},
    {.name = "f16 g=0.5", .dt = FC_F16, .gold = 0.5, .term = 1.0 / 4096},
    {.name = "f16 g=-0.5 (symmetric)", .dt = FC_F16, .gold = -0.5, .term = 0},
    {.name = "bf16 g=0.0", .dt = FC_BF16, .gold = 0.0, .term = 205.0 / 262144.0},
    {.name = "bf16 g=1.0", .dt = FC_BF16, .gold = 1.0, .term = 1.0 / 256},
    {.name = "bf16 g=0.5", .dt = FC_BF16, .gold = 0.5, .term = 0},
    {.name = "f32 has no rounding term", .dt = FC_F32, .gold = 0.5, .term = 0},
};
/* f16, g = -0.5: -0.5 + 0.3f = -0.1999999881 * 2^13 = -1638.4 -> -1638 -> -0.199951171875;
 *   minus 0.3f = -0.4999511838 * 2^12 = -2047.8 -> -2048 -> -0.5. Term 0. */

Test(floor, terms_match_hand_computed_roundings)
{
    for (size_t k = 0; k < sizeof floor_terms / sizeof floor_terms[0]; k++) {
        const floor_case *fc = &floor_terms[k];
        double t = rep_floor_term(fc->dt, fc->gold);
        cr_expect(t == fc->term, "%s: term %.17g, want %.17g", fc->name, t, fc->term);
    }
}

/* The clean case's gold {0.5, -0.25, 1.0, 0.125, 0.75, 0.375, -0.625, 0.1875}, term by term.
 * f16: 0.5 -> 2^-12 (above); -0.25: 0.0500000119 * 2^15 = 1638.4 -> 1638, minus 0.3f =
 *   -0.2500122 * 2^12 = -1024.05 -> -0.25: 0. 1.0 -> 0. 0.125 -> 0 (next test). 0.75:
 *   1.05 * 2^10 = 1075.2 -> 1075 -> 1.0498046875, minus 0.3f = 0.7498047 * 2^11 = 1535.6 ->
 *   0.75: 0. 0.375: 0.675 * 2^11 = 1382.4 -> 1382 -> 0.6748046875, minus 0.3f = 0.3748047 *
 *   2^12 = 1535.2 -> 1535 -> 0.374755859375: 2^-12. -0.625: -0.325 * 2^12 = -1331.2 -> -1331,
 *   minus 0.3f = -0.6249512 * 2^11 = -1279.9 -> -0.625: 0. 0.1875: 0.4875 * 2^12 = 1996.8 ->
 *   1997 -> 0.487548828125, minus 0.3f = 0.1875488 * 2^13 = 1536.4 -> 0.1875: 0.
 *   Floor 2 * 2^-12 = 2^-11.
 * bf16: 1.0 -> 2^-8 (above); 0.75: 1.05 * 2^7 = 134.4 -> 1.046875, minus 0.3f = 0.746875 *
 *   2^8 = 191.2 -> 191 -> 0.74609375: 2^-8. 0.125: 0.425 * 2^9 = 217.6 -> 0.42578125, minus
 *   0.3f = 0.1257812 * 2^10 = 128.8 -> 129: 2^-10. 0.1875: 0.4875 * 2^9 = 249.6 -> 250, minus
 *   0.3f = 0.1882812 * 2^10 = 192.8 -> 193: 2^-10. 0.5, -0.25, 0.375, -0.625: 0 (same steps).
 *   Floor 2 * 2^-8 = 2^-7. */
Test(floor, of_the_clean_case_is_hand_computed)
{
    tcase c;
    clean_case(&c, FC_F16);
    rep_verdict v = judge("clean f16 floor", &c);
    cr_expect(v.floor == 1.0 / 2048, "clean f16 floor: %.17g, want 2^-11", v.floor);
    clean_case(&c, FC_BF16);
    v = judge("clean bf16 floor", &c);
    cr_expect(v.floor == 1.0 / 128, "clean bf16 floor: %.17g, want 2^-7", v.floor);
}

Test(floor, is_twice_the_largest_term_over_full_rows_only)
{
    /* f16 gold {0.5, 0, 1.0, 0.125}: terms 2^-12, 819 * 2^-24, 0, t(0.125). For 0.125:
     * 0.425000011920929 * 2^12 = 1740.8 -> 1741 -> 0.425048828125; minus 0.3f = 0.1250488162 *
     * 2^13 = 1024.4 -> 1024 -> 0.125: term 0. Largest 2^-12, floor 2^-11. */
    tcase c;
    clean_case(&c, FC_F16);
    c.o_gold[1] = 0.0;
    c.o[1] = 0.0f;
    c.o_lp[1] = (float)E_LP;
    for (int j = 0; j < DV; j++) { /* row 1 becomes empty, so the floor ignores it */
        c.o_gold[DV + j] = 0.0;
        c.o[DV + j] = 0.0f;
        c.o_lp[DV + j] = 0.0f;
    }
    c.lse_gold[1] = -INFINITY;
    c.lse[1] = -INFINITY;
    rep_verdict v = judge("f16 floor", &c);
    cr_expect(v.floor == 1.0 / 2048, "f16 floor: %.17g, want 2^-11", v.floor);
    cr_expect_eq(v.empty_rows, 2, "f16 floor: empty rows %zu", v.empty_rows);

    /* f16 gold row {1.0, 1.0, 1.0, 1.0}: every term 0, floor 0. */
    clean_case(&c, FC_F16);
    for (int j = 0; j < DV; j++) {
        c.o_gold[j] = 1.0;
        c.o[j] = 1.0f;
        c.o_lp[j] = (float)(1.0 + E_LP);
        c.o_gold[DV + j] = 1.0;
        c.o[DV + j] = 1.0f;
        c.o_lp[DV + j] = (float)(1.0 + E_LP);
    }
    v = judge("f16 floor of ones", &c);
    cr_expect(v.floor == 0, "f16 floor of ones: %.17g, want 0", v.floor);

    /* f32: 1e-6 * max(1, max|O_gold|): 1e-6 for the clean case (max 1.0), 4e-6 with a 4. */
    clean_case(&c, FC_F32);
    v = judge("f32 floor", &c);
    cr_expect(v.floor == 1e-6, "f32 floor: %.17g, want 1e-6", v.floor);
    c.o_gold[0] = -4.0;
    c.o[0] = -4.0f;
    c.o_lp[0] = (float)(-4.0 + E_LP);
    v = judge("f32 floor with |g| = 4", &c);
    cr_expect(v.floor == 4e-6, "f32 floor with |g| = 4: %.17g, want 4e-6", v.floor);
}

Test(floor, lets_an_error_below_it_pass_when_the_baseline_is_exact_at_zero_gold)
{
    /* All-zero gold and baseline: e_lp_max = 0 = (u/8) * max|O_gold|, not degenerate (strict <),
     * so the H1 limit is the floor alone: f16 2 * 819 * 2^-24 = 9.76e-5. */
    tcase c;
    clean_case(&c, FC_F16);
    for (int i = 0; i < 2 * DV; i++) {
        c.o_gold[i] = 0;
        c.o[i] = 0;
        c.o_lp[i] = 0;
    }
    c.o[0] = 9e-5f;
    rep_verdict v = judge("f16 error under the zero floor", &c);
    cr_expect(!v.degenerate, "f16 error under the zero floor: degenerate");
    cr_expect(v.floor == 1638.0 / 16777216.0, "f16 zero floor: %.17g", v.floor);
    cr_expect_eq(v.gate[REP_H1], REP_PASS, "f16 error under the zero floor: %s", v.why[REP_H1]);
    c.o[0] = 1e-4f;
    v = judge("f16 error over the zero floor", &c);
    cr_expect_eq(v.gate[REP_H1], REP_FAIL, "f16 error over the zero floor: H1 passed");
}

/* ---- H1 ratio and the degenerate baseline ------------------------------------------------ */

Test(h1, ratio_is_max_error_over_the_limit)
{
    /* f16, 1.5x: max|err| = 1.5 * 2^-6; limit = 2 * 2^-6 + floor. The floor of the clean gold
     * is 2 * 2^-12 (see the clean floor test), so ratio = 0.0234375 / (0.03125 + 2^-11). */
    tcase c;
    clean_case(&c, FC_F16);
    plant(&c, O_ERR_1_5X);
    rep_verdict v = judge("f16 1.5x", &c);
    double want = 1.5 * E_LP / (2 * E_LP + 1.0 / 2048);
    cr_expect(v.e_lp_max == E_LP, "f16 1.5x: e_lp_max %.17g", v.e_lp_max);
    cr_expect(v.max_err == 1.5 * E_LP, "f16 1.5x: max_err %.17g", v.max_err);
    cr_expect(v.h1_ratio == want, "f16 1.5x: ratio %.17g, want %.17g", v.h1_ratio, want);
    cr_expect(v.h1_tol == 2 * E_LP + 1.0 / 2048, "f16 1.5x: limit %.17g", v.h1_tol);
    cr_expect_eq(v.worst_row, 0, "f16 1.5x: worst row %zu", v.worst_row);
    cr_expect_eq(v.worst_col, 2, "f16 1.5x: worst col %zu", v.worst_col);
}

Test(h1, falls_back_to_elementwise_tolerance_when_the_baseline_is_exact)
{
    /* One row {0.5, -0.25, 1.0, 2.0}, O_lp == O_gold: e_lp_max = 0 < (u/8) * 2. f16 limits
     * 1e-3 + 1e-3 * |g|: at g = 2.0 that is 3e-3, so 2^-9 (1.95e-3) passes and 2^-8 (3.9e-3)
     * fails; at g = 0.5 it is 1.5e-3, so 2^-9 fails there. bf16: 1e-2 + 1.6e-2 * 2 = 4.2e-2.
     * f32: the atol scales with the output, 1e-5 * max(1, max|O_gold| = 2) = 2e-5, plus
     * 1.3e-6 * 2: 2.26e-5 at g = 2. */
    static const struct {
        const char *name;
        fc_dtype dt;
        int col;
        double err;
        int pass;
    } cases[] = {
        {"f16 2^-9 at g=2", FC_F16, 3, 1.0 / 512, 1},
        {"f16 2^-8 at g=2", FC_F16, 3, 1.0 / 256, 0},
        {"f16 2^-9 at g=0.5", FC_F16, 0, 1.0 / 512, 0},
        {"bf16 2^-5 at g=2", FC_BF16, 3, 1.0 / 32, 1},
        {"bf16 2^-4 at g=2", FC_BF16, 3, 1.0 / 16, 0},
        {"f32 2^-16 at g=2", FC_F32, 3, 1.0 / 65536, 1},   /* 1.53e-5 <= 2.26e-5 */
        {"f32 2^-15 at g=2", FC_F32, 3, 1.0 / 32768, 0},   /* 3.05e-5 > 2.26e-5 */
    };
    static const double g[DV] = {0.5, -0.25, 1.0, 2.0};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        tcase c;
        memset(&c, 0, sizeof c);
        c.dt = cases[k].dt;
        c.rows = 1;
        c.dv = DV;
        for (int j = 0; j < DV; j++) {
            c.o_gold[j] = g[j];
            c.o[j] = c.o_lp[j] = (float)g[j];
        }
        c.lse_gold[0] = 1.0;
        c.lse[0] = 1.0f;
        c.o[cases[k].col] = (float)(g[cases[k].col] + cases[k].err);
        rep_verdict v = judge(cases[k].name, &c);
        cr_expect(v.degenerate, "%s: not degenerate (e_lp_max %g)", cases[k].name, v.e_lp_max);
        cr_expect_eq(v.gate[REP_H1], cases[k].pass ? REP_PASS : REP_FAIL, "%s: H1 %s",
                     cases[k].name, v.why[REP_H1]);
    }
}

Test(h1, degenerate_threshold_is_an_eighth_of_the_unit_roundoff_of_max_gold)
{
    /* The clean case with an exact baseline except at gold[2] = 1 + 2^-k (stored in double),
     * where O_lp = O = 1.0f: e_lp_max = 2^-k, max|O_gold| = 1 + 2^-k. Threshold (u/8) * that:
     * f32 2^-27, f16 2^-14, bf16 2^-11 (times 1 + 2^-k). One exponent either side of each. */
    static const struct {
        fc_dtype dt;
        int k, degenerate;
    } cases[] = {
        {FC_F32, 28, 1}, {FC_F32, 26, 0}, {FC_F16, 15, 1}, {FC_F16, 13, 0},
        {FC_BF16, 12, 1}, {FC_BF16, 10, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tcase c;
        clean_case(&c, cases[i].dt);
        for (int j = 0; j < 2 * DV; j++)
            c.o_lp[j] = (float)c.o_gold[j];
        c.o_gold[2] = 1.0 + ldexp(1.0, -cases[i].k);
        c.o[2] = c.o_lp[2] = 1.0f;
        char name[48];
        snprintf(name, sizeof name, "%s e_lp 2^-%d", fc_dtype_name(cases[i].dt), cases[i].k);
        rep_verdict v = judge(name, &c);
        cr_expect(v.e_lp_max == ldexp(1.0, -cases[i].k), "%s: e_lp_max %g", name, v.e_lp_max);
        cr_expect_eq(v.degenerate, cases[i].degenerate, "%s: degenerate %d", name, v.degenerate);
    }
}

/* ---- H2 NMSE ----------------------------------------------------------------------------- */

Test(h2, the_ceiling_is_c_squared_times_the_baselines_nmse_with_an_exact_boundary)
{
    /* One row of ones. The baseline is off by E in element 0 only: NMSE_lp = E^2 / 4, so the
     * ceiling c^2 * NMSE_lp is E^2 (c = 2) or 25 E^2 (c = 10). The output is off by e
     * everywhere: NMSE = e^2, while H1 allows e up to c * E + floor. So e = E (f16, bf16) or
     * 5E (f32) sits exactly on the ceiling and passes; 1.25 E or 6 E fails H2 alone. All
     * values are dyadic, every sum exact. */
    static const struct {
        const char *name;
        fc_dtype dt;
        double e, E;
        int pass;
    } cases[] = {
        {"f16 on the ceiling", FC_F16, 0x1p-6, 0x1p-6, 1},
        {"f16 1.25x over", FC_F16, 1.25 * 0x1p-6, 0x1p-6, 0},
        {"bf16 on the ceiling", FC_BF16, 0x1p-6, 0x1p-6, 1},
        {"bf16 1.25x over", FC_BF16, 1.25 * 0x1p-6, 0x1p-6, 0},
        {"f32 on the ceiling", FC_F32, 5 * 0x1p-10, 0x1p-10, 1},
        {"f32 6/5 over", FC_F32, 6 * 0x1p-10, 0x1p-10, 0},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        tcase c;
        memset(&c, 0, sizeof c);
        c.dt = cases[k].dt;
        c.rows = 1;
        c.dv = DV;
        for (int j = 0; j < DV; j++) {
            c.o_gold[j] = 1.0;
            c.o[j] = (float)(1.0 + cases[k].e);
            c.o_lp[j] = 1.0f;
        }
        c.o_lp[0] = (float)(1.0 + cases[k].E);
        c.lse_gold[0] = 1.0;
        c.lse[0] = 1.0f;
        rep_verdict v = judge(cases[k].name, &c);
        double E = cases[k].E, cc = cases[k].dt == FC_F32 ? 10 : 2;
        cr_expect(v.nmse == cases[k].e * cases[k].e, "%s: NMSE %.17g", cases[k].name, v.nmse);
        cr_expect(v.nmse_lp == E * E / 4, "%s: NMSE_lp %.17g", cases[k].name, v.nmse_lp);
        cr_expect(v.nmse_tol == cc * cc * E * E / 4, "%s: ceiling %.17g", cases[k].name,
                  v.nmse_tol);
        cr_expect(!v.degenerate, "%s: degenerate", cases[k].name);
        cr_expect_eq(v.gate[REP_H1], REP_PASS, "%s: H1 %s", cases[k].name, v.why[REP_H1]);
        if (cases[k].pass)
            cr_expect(v.pass, "%s: %s", cases[k].name, rep_verdict_reason(&v));
        else
            cr_expect_eq(v.first_fail, REP_H2, "%s: first %s", cases[k].name, first_gate_name(&v));
    }
}

Test(h2, an_exact_baseline_still_allows_u_squared)
{
    /* O_lp == O_gold: NMSE_lp = 0 and the ceiling is u^2 (f16 2^-22). The baseline is
     * degenerate, so H1 is element-wise (1e-3 + 1e-3 * 1 = 2e-3) and lets both errors
     * through: 2^-11 everywhere gives NMSE 2^-22 (passes), 2^-10 gives 2^-20 (fails H2). */
    for (int k = 11; k >= 10; k--) {
        tcase c;
        memset(&c, 0, sizeof c);
        c.dt = FC_F16;
        c.rows = 1;
        c.dv = DV;
        for (int j = 0; j < DV; j++) {
            c.o_gold[j] = 1.0;
            c.o_lp[j] = 1.0f;
            c.o[j] = (float)(1.0 + ldexp(1.0, -k));
        }
        c.lse_gold[0] = 1.0;
        c.lse[0] = 1.0f;
        rep_verdict v = judge("f16 exact baseline", &c);
        cr_expect(v.degenerate && v.nmse_lp == 0 && v.nmse_tol == 0x1p-22,
                  "2^-%d: degenerate %d, NMSE_lp %g, ceiling %g", k, v.degenerate, v.nmse_lp,
                  v.nmse_tol);
        cr_expect_eq(v.gate[REP_H1], REP_PASS, "2^-%d: H1 %s", k, v.why[REP_H1]);
        cr_expect_eq(v.gate[REP_H2], k == 11 ? REP_PASS : REP_FAIL, "2^-%d: H2 %s", k,
                     v.why[REP_H2]);
    }
}

Test(h2, zero_gold_gives_nmse_zero_or_infinity)
{
    tcase c;
    clean_case(&c, FC_F16);
    for (int i = 0; i < 2 * DV; i++)
        c.o_gold[i] = c.o[i] = c.o_lp[i] = 0;
    rep_verdict v = judge("zero gold, zero output", &c);
    cr_expect(v.nmse == 0 && v.pass, "zero gold, zero output: NMSE %g, %s", v.nmse,
              rep_verdict_reason(&v));
    /* 1e-6 is under the f16 floor of zero gold (9.8e-5), so only H2 can fail. */
    c.o[0] = 1e-6f;
    v = judge("zero gold, tiny output", &c);
    cr_expect(isinf(v.nmse) && v.nmse > 0, "zero gold, tiny output: NMSE %g", v.nmse);
    cr_expect_eq(v.first_fail, REP_H2, "zero gold, tiny output: first %s", first_gate_name(&v));
}

/* ---- H6 sentinels and H7 determinism ------------------------------------------------------ */

typedef struct guarded_case {
    tcase c;
    fc_guarded o, lse;
} guarded_case;

/* The clean case, with O and LSE copied into guarded buffers as a kernel would write them. */
static void guarded_setup(guarded_case *g, fc_dtype dt)
{
    fc_err err = {{0}};
    clean_case(&g->c, dt);
    cr_assert_eq(fc_guarded_alloc(&g->o, sizeof g->c.o, &err), FC_OK, "alloc O: %s", err.msg);
    cr_assert_eq(fc_guarded_alloc(&g->lse, sizeof g->c.lse, &err), FC_OK, "alloc LSE: %s",
                 err.msg);
    memcpy(g->o.data, g->c.o, sizeof g->c.o);
    memcpy(g->lse.data, g->c.lse, sizeof g->c.lse);
}

static rep_inputs guarded_inputs(const guarded_case *g)
{
    rep_inputs in = inputs_of(&g->c);
    in.o = g->o.data;
    in.lse = g->lse.data;
    in.o_buf = &g->o;
    in.lse_buf = &g->lse;
    return in;
}

Test(h6, intact_guards_pass_and_a_byte_past_either_end_fails_first)
{
    static const struct {
        const char *name;
        int lse;          /* 0: O buffer, 1: LSE buffer */
        ptrdiff_t offset; /* byte to overwrite, relative to data */
    } cases[] = {
        {"O one byte before", 0, -1},
        {"O first byte after", 0, N * 4},
        {"O last guard byte", 0, N * 4 + FC_GUARD_BYTES - 1},
        {"LSE first guard byte", 1, -FC_GUARD_BYTES},
        {"LSE one byte after", 1, ROWS * 4},
    };
    guarded_case g;
    guarded_setup(&g, FC_F16);
    rep_inputs in = guarded_inputs(&g);
    rep_verdict v = judge_inputs("intact guards", &in);
    cr_expect(v.pass && v.gate[REP_H6] == REP_PASS, "intact guards: %s", rep_verdict_reason(&v));
    fc_guarded_free(&g.o);
    fc_guarded_free(&g.lse);

    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        guarded_setup(&g, FC_F16);
        /* A NaN too, to show H6 outranks H3. */
        ((float *)g.o.data)[0] = NAN;
        unsigned char *p = (unsigned char *)(cases[k].lse ? g.lse.data : g.o.data);
        p[cases[k].offset] ^= 0x01;
        in = guarded_inputs(&g);
        ptrdiff_t bad = 0;
        cr_expect(!fc_guarded_intact(cases[k].lse ? &g.lse : &g.o, &bad), "%s: intact",
                  cases[k].name);
        cr_expect_eq(bad, cases[k].offset, "%s: bad offset %td", cases[k].name, bad);
        v = judge_inputs(cases[k].name, &in);
        cr_expect_eq(v.first_fail, REP_H6, "%s: first %s", cases[k].name, first_gate_name(&v));
        cr_expect_eq(v.gate[REP_H3], REP_FAIL, "%s: the NaN was not seen", cases[k].name);
        fc_guarded_free(&g.o);
        fc_guarded_free(&g.lse);
    }
}

Test(h6, a_launcher_guard_report_decides_h6_without_host_buffers)
{
    static const struct {
        const char *name;
        rep_sentinels s;
        rep_gate_state want;
    } cases[] = {
        {"unchecked", REP_SENTINELS_UNCHECKED, REP_NOT_RUN},
        {"intact", REP_SENTINELS_INTACT, REP_PASS},
        {"damaged", REP_SENTINELS_DAMAGED, REP_FAIL},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        tcase c;
        clean_case(&c, FC_F16);
        rep_inputs in = inputs_of(&c);
        in.sentinels = cases[k].s;
        rep_verdict v = judge_inputs(cases[k].name, &in);
        cr_expect_eq(v.gate[REP_H6], cases[k].want, "%s: H6 state %d", cases[k].name,
                     (int)v.gate[REP_H6]);
        cr_expect_eq(v.first_fail, cases[k].want == REP_FAIL ? REP_H6 : -1, "%s: first %s",
                     cases[k].name, first_gate_name(&v));
    }
    /* Host guards intact but the launcher saw damage: still a failure. */
    guarded_case g;
    guarded_setup(&g, FC_F16);
    rep_inputs in = guarded_inputs(&g);
    in.sentinels = REP_SENTINELS_DAMAGED;
    rep_verdict v = judge_inputs("host intact, device damaged", &in);
    cr_expect_eq(v.first_fail, REP_H6, "host intact, device damaged: first %s",
                 first_gate_name(&v));
    fc_guarded_free(&g.o);
    fc_guarded_free(&g.lse);
}

Test(h6, an_element_the_kernel_never_wrote_reads_as_nan)
{
    guarded_case g;
    guarded_setup(&g, FC_BF16);
    memset((float *)g.o.data + 5, 0xff, sizeof(float)); /* as fc_guarded_alloc left it */
    cr_expect(isnan(((float *)g.o.data)[5]), "unwritten element: 0xff bytes are not NaN");
    fc_err err = {{0}};
    fc_guarded fresh;
    cr_assert_eq(fc_guarded_alloc(&fresh, 8, &err), FC_OK, "fresh alloc: %s", err.msg);
    cr_expect(isnan(((float *)fresh.data)[0]) && isnan(((float *)fresh.data)[1]),
              "fresh guarded buffer: data not NaN-filled");
    cr_expect(fc_guarded_intact(&fresh, NULL), "fresh guarded buffer: guards not intact");
    rep_inputs in = guarded_inputs(&g);
    rep_verdict v = judge_inputs("unwritten element", &in);
    cr_expect_eq(v.first_fail, REP_H3, "unwritten element: first %s", first_gate_name(&v));
    fc_guarded_free(&fresh);
    fc_guarded_free(&g.o);
    fc_guarded_free(&g.lse);
}

Test(h7, identical_reruns_pass_and_one_flipped_bit_fails)
{
    static const struct {
        const char *name;
        int lse;   /* flip in O (0) or LSE (1) */
        int index; /* element */
        uint32_t mask;
    } cases[] = {
        {"no flip", 0, 0, 0},
        {"O last mantissa bit", 0, 6, 0x1},
        {"O sign of an empty-row zero", 0, 2 * DV, 0x80000000u},
        {"LSE last mantissa bit", 1, 1, 0x1},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        tcase c;
        float o2[N], lse2[ROWS];
        clean_case(&c, FC_F32);
        memcpy(o2, c.o, sizeof o2);
        memcpy(lse2, c.lse, sizeof lse2);
        float *x = cases[k].lse ? &lse2[cases[k].index] : &o2[cases[k].index];
        uint32_t u;
        memcpy(&u, x, sizeof u);
        u ^= cases[k].mask;
        memcpy(x, &u, sizeof u);
        rep_inputs in = inputs_of(&c);
        in.o_rerun = o2;
        in.lse_rerun = lse2;
        rep_verdict v = judge_inputs(cases[k].name, &in);
        if (!cases[k].mask) {
            cr_expect(v.pass && v.gate[REP_H7] == REP_PASS, "%s: %s", cases[k].name,
                      rep_verdict_reason(&v));
        } else {
            cr_expect_eq(v.first_fail, REP_H7, "%s: first %s", cases[k].name, first_gate_name(&v));
        }
    }
}

/* A NaN or infinite LSE on a row with keys fails H5 as well as H3 (its distance to LSE_gold is
 * never within the bound), while lse_err, a metric, stays over the finite pairs. Without this,
 * H5's verdict never saw a NaN and a comparison that lets one pass went unnoticed. */
Test(gates, a_non_finite_lse_fails_h5_too_and_leaves_lse_err_finite)
{
    static const float bad[] = {NAN, INFINITY, -INFINITY};
    for (size_t k = 0; k < 3; k++) {
        tcase c;
        clean_case(&c, FC_F16);
        c.lse[1] = bad[k];
        rep_verdict v = judge("non-finite LSE", &c);
        cr_expect_eq(v.gate[REP_H3], REP_FAIL, "%g: H3 %d", bad[k], (int)v.gate[REP_H3]);
        cr_expect_eq(v.gate[REP_H5], REP_FAIL, "%g: H5 %d", bad[k], (int)v.gate[REP_H5]);
        cr_expect(isfinite(v.lse_err) && v.lse_err < 1e-3, "%g: lse_err %g", bad[k], v.lse_err);
    }
}

/* H5 names the row furthest past its bound, as H1 names its worst element: the first failing
 * row may be a near miss that sends whoever reproduces it to the wrong place. */
Test(gates, h5_names_the_worst_row_not_the_first)
{
    tcase c;
    clean_case(&c, FC_F16);
    double lim0 = 1e-3 + 1e-3 * fabs(c.lse_gold[0]), lim1 = 1e-3 + 1e-3 * fabs(c.lse_gold[1]);
    c.lse[0] = (float)(c.lse_gold[0] + 1.5 * lim0); /* row 0 fails by 1.5x */
    c.lse[1] = (float)(c.lse_gold[1] + 40 * lim1);  /* row 1 by 40x */
    rep_verdict v = judge("two rows past H5", &c);
    cr_expect_str_eq(first_gate_name(&v), "H5");
    cr_expect(strstr(v.why[REP_H5], "at row 1 ") != NULL, "%s", v.why[REP_H5]);
    cr_expect(v.lse_ratio > 39 && v.lse_ratio < 41, "ratio %g", v.lse_ratio);
}

/* Designed inputs (p-round's) skip H2 alone: their rounding errors add up on purpose, so a
 * correct output's NMSE can pass 2^2 x the baseline's while its largest error stays within
 * H1's bound. Here the baseline is off in one element, the output by 1.5x that everywhere. */
Test(gates, designed_inputs_skip_h2_only)
{
    tcase c;
    clean_case(&c, FC_F16);
    for (int i = 0; i < 2 * DV; i++) {
        c.o_lp[i] = (float)c.o_gold[i];
        c.o[i] = (float)(c.o_gold[i] + 1.5 * E_LP);
    }
    c.o_lp[0] = (float)(c.o_gold[0] + E_LP);
    rep_inputs in = inputs_of(&c);
    rep_verdict v = judge_inputs("not designed", &in);
    cr_expect_str_eq(first_gate_name(&v), "H2", "%s", rep_verdict_reason(&v));
    cr_expect_eq(v.gate[REP_H1], REP_PASS, "H1 %d", (int)v.gate[REP_H1]);
    in.designed = 1;
    v = judge_inputs("designed", &in);
    cr_expect(v.pass, "designed: %s", rep_verdict_reason(&v));
    cr_expect(v.gate[REP_H1] == REP_PASS && v.gate[REP_H2] == REP_NOT_RUN, "H1 %d H2 %d",
              (int)v.gate[REP_H1], (int)v.gate[REP_H2]);
    c.o[1] += 0.25f; /* past H1's bound: designed or not, H1 fails it */
    in = inputs_of(&c);
    in.designed = 1;
    v = judge_inputs("designed, far off", &in);
    cr_expect_str_eq(first_gate_name(&v), "H1");
    c.o[2] = NAN; /* and H3 still comes first */
    in = inputs_of(&c);
    in.designed = 1;
    v = judge_inputs("designed with a NaN", &in);
    cr_expect_str_eq(first_gate_name(&v), "H3");
}

Test(gates, without_a_tested_lse_h5_is_not_run_and_the_rest_judge_o_alone)
{
    tcase c;
    clean_case(&c, FC_F16);
    float o2[N];
    memcpy(o2, c.o, sizeof o2);
    rep_inputs in = inputs_of(&c);
    in.lse = NULL;
    in.o_rerun = o2;
    rep_verdict v = judge_inputs("no lse", &in);
    cr_expect(v.pass, "no lse, clean O: %s", rep_verdict_reason(&v));
    cr_expect_eq(v.gate[REP_H5], REP_NOT_RUN, "no lse: H5 state %d", (int)v.gate[REP_H5]);
    cr_expect_eq(v.gate[REP_H4], REP_PASS, "no lse: H4 on O alone");
    cr_expect_eq(v.gate[REP_H7], REP_PASS, "no lse: H7 on O alone");

    c.o[2 * DV + 1] = 1e-3f; /* the empty row: H4 still sees O */
    in = inputs_of(&c);
    in.lse = NULL;
    v = judge_inputs("no lse, empty row written", &in);
    cr_expect_eq(v.first_fail, REP_H4, "no lse, empty row written: first %s", first_gate_name(&v));

    clean_case(&c, FC_F16);
    c.o[1] = NAN;
    in = inputs_of(&c);
    in.lse = NULL;
    v = judge_inputs("no lse, NaN", &in);
    cr_expect_eq(v.first_fail, REP_H3, "no lse, NaN: first %s", first_gate_name(&v));

    /* A stored rerun of another producer has O only: H7 compares O, the LSE still counts. */
    clean_case(&c, FC_F16);
    memcpy(o2, c.o, sizeof o2);
    in = inputs_of(&c);
    in.o_rerun = o2;
    v = judge_inputs("lse, O rerun only", &in);
    cr_expect(v.pass && v.gate[REP_H7] == REP_PASS && v.gate[REP_H5] == REP_PASS,
              "lse, O rerun only: %s", rep_verdict_reason(&v));
    o2[5] = nextafterf(o2[5], 2.0f);
    v = judge_inputs("lse, O rerun one ulp off", &in);
    cr_expect_eq(v.first_fail, REP_H7, "O rerun one ulp off: first %s", first_gate_name(&v));

    clean_case(&c, FC_F16);
    in = inputs_of(&c);
    in.lse = NULL;
    in.lse_rerun = c.lse;
    in.o_rerun = c.o;
    fc_err err = {{0}};
    cr_expect_eq(rep_evaluate(&in, &v, &err), FC_EINVAL, "lse_rerun without lse accepted");
}

/* ---- soft signals ------------------------------------------------------------------------- */

Test(soft, s1_and_s2_flag_without_failing)
{
    /* Gold {4, -3, 2.5, 3.5}: sum of squares 43.5. O_lp off by 2^-6 everywhere, O by 1.5 * 2^-6:
     * S1 = S2 = 1.5 (> 1.1 and > 1.2, flagged). H1: 0.0234 <= 2 * 0.0156 + floor; NMSE
     * 4 * 0.0234375^2 / 43.5 = 5.05e-5. Half the error: S1 = S2 = 0.5, no flags. */
    static const double g[DV] = {4, -3, 2.5, 3.5};
    static const struct {
        const char *name;
        double k;
        int flag;
    } cases[] = {{"f16 1.5x everywhere", 1.5, 1}, {"f16 0.5x everywhere", 0.5, 0}};
    for (size_t n = 0; n < 2; n++) {
        tcase c;
        memset(&c, 0, sizeof c);
        c.dt = FC_F16;
        c.rows = 1;
        c.dv = DV;
        for (int j = 0; j < DV; j++) {
            c.o_gold[j] = g[j];
            c.o[j] = (float)(g[j] + cases[n].k * E_LP);
            c.o_lp[j] = (float)(g[j] + E_LP);
        }
        c.lse_gold[0] = 1.0;
        c.lse[0] = 1.0f;
        rep_verdict v = judge(cases[n].name, &c);
        cr_expect(v.pass, "%s: %s", cases[n].name, rep_verdict_reason(&v));
        cr_expect(fabs(v.s1 - cases[n].k) <= 1e-12, "%s: S1 %.17g", cases[n].name, v.s1);
        cr_expect(fabs(v.s2 - cases[n].k) <= 1e-12, "%s: S2 %.17g", cases[n].name, v.s2);
        cr_expect_eq(v.s1_flag, cases[n].flag, "%s: S1 flag", cases[n].name);
        cr_expect_eq(v.s2_flag, cases[n].flag, "%s: S2 flag", cases[n].name);
    }
}

/* ---- edge shapes and bad references --------------------------------------------------------- */

Test(edges, zero_rows_and_all_empty_rows_pass_with_zero_metrics)
{
    rep_inputs in = {.dtype = FC_F16, .rows = 0, .dv = 64};
    rep_verdict v = judge_inputs("zero rows", &in);
    cr_expect(v.pass && v.compared == 0 && v.max_err == 0 && v.nmse == 0 && v.h1_ratio == 0,
              "zero rows: %s", rep_verdict_reason(&v));

    tcase c;
    clean_case(&c, FC_BF16);
    for (int r = 0; r < 2; r++) {
        c.lse_gold[r] = -INFINITY;
        c.lse[r] = -INFINITY;
        for (int j = 0; j < DV; j++)
            c.o_gold[r * DV + j] = c.o[r * DV + j] = c.o_lp[r * DV + j] = 0;
    }
    v = judge("all rows empty", &c);
    cr_expect(v.pass, "all rows empty: %s", rep_verdict_reason(&v));
    cr_expect_eq(v.empty_rows, ROWS, "all rows empty: %zu", v.empty_rows);
    cr_expect(v.compared == 0 && v.nmse == 0 && v.h1_ratio == 0 && v.s1 == 0,
              "all rows empty: metrics not zero");
}

Test(edges, unusable_references_are_input_errors)
{
    static const struct {
        const char *name;
        int what;
    } cases[] = {
        {"NaN in O_gold", 0},
        {"NaN in LSE_gold", 1},
        {"+inf in LSE_gold", 2},
        {"nonzero O_gold in an empty row", 4},
        {"unknown dtype", 5},
        {"an LSE rerun without an O rerun", 6},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        tcase c;
        clean_case(&c, FC_F16);
        rep_inputs in = inputs_of(&c);
        switch (cases[k].what) {
        case 0: c.o_gold[3] = NAN; break;
        case 1: c.lse_gold[0] = NAN; break;
        case 2: c.lse_gold[0] = INFINITY; break;
        case 4: c.o_gold[2 * DV] = 0.5; break;
        case 5: in.dtype = (fc_dtype)7; break;
        case 6: in.lse_rerun = c.lse; break;
        }
        rep_verdict v;
        fc_err err = {{0}};
        cr_expect_eq(rep_evaluate(&in, &v, &err), FC_EINVAL, "%s: not an input error",
                     cases[k].name);
        cr_expect(err.msg[0] != 0, "%s: no message", cases[k].name);
    }
}

/* A baseline that overflowed where O_gold is finite leaves H1 and H2 without a scale: they are
 * not run. The gates that need no baseline are: H3 on O over what the baseline held (nothing
 * judges the overflowed element), H3 and H5 on every row's LSE (its bound needs no baseline: an
 * LSE of -inf where the truth is finite fails whatever the baseline did); a failure fails the
 * case; without one the case is outside the contract (docs/tolerance.md), never a kernel
 * failure. */
Test(edges, an_overflowed_baseline_is_outside_the_contract)
{
    tcase c;
    clean_case(&c, FC_F16);
    c.o_lp[4] = INFINITY; /* row 1, column 0: gold 0.75 */
    c.o[4] = NAN;         /* the kernel's value where the baseline overflowed: not judged */
    c.o[5] = 9.0f;        /* nor the rest of that row against a scale it does not have */
    rep_inputs in = inputs_of(&c);
    rep_verdict v;
    fc_err err;
    cr_assert_eq(rep_evaluate(&in, &v, &err), FC_OK, "%s", err.msg);
    cr_expect(v.outside && v.unscaled && !v.pass && v.first_fail == -1,
              "outside %d pass %d first %d", v.outside, v.pass, v.first_fail);
    for (int g = 0; g < REP_NGATES; g++) {
        int ran = g == REP_H3 || g == REP_H4 || g == REP_H5;
        cr_expect_eq(v.gate[g], ran ? REP_PASS : REP_NOT_RUN, "gate %s",
                     rep_gate_name((rep_gate)g));
    }
    cr_expect(v.nan_count == 0 && v.empty_rows == 1, "nan %zu empty %zu", v.nan_count,
              v.empty_rows);
    cr_expect(!strncmp(rep_verdict_reason(&v), "outside-contract: the float16 baseline is inf at "
                       "row 1 col 0 where O_gold is 0.75", 77), "%s", rep_verdict_reason(&v));
    rep_row row;
    memset(&row, 0, sizeof row);
    rep_row_set_verdict(&row, &v);
    cr_expect_eq(row.outcome, REP_ROW_OUTSIDE);
    cr_expect_str_eq(rep_outcome_name(row.outcome), "outside-contract");
    cr_expect(!rep_row_failed(&row) && !rep_row_fails(&row, 0) && rep_row_fails(&row, 1),
              "only --strict fails it");
    cr_expect(isnan(row.max_err) && isnan(row.h1_ratio) && isnan(row.nmse),
              "nothing measured against the baseline: missing, not 0");
    cr_expect_str_eq(row.gates, "-PP--P-");

    /* What the baseline held is judged: each of these fails the case under its gate. */
    static const struct {
        const char *name, *gate;
    } fails[] = {
        {"a NaN where the baseline held the result", "H3"},
        {"a NaN LSE in a row the baseline held", "H3"},
        {"an empty row not exactly 0", "H4"},
        {"an LSE far off in a row the baseline held", "H5"},
        {"a rerun that differs", "H7"},
        {"an LSE of -inf where the truth is finite, in the row the baseline lost", "H3"},
        {"an LSE far off in the row the baseline lost", "H5"},
    };
    float rerun[ROWS * DV];
    for (size_t k = 0; k < sizeof fails / sizeof fails[0]; k++) {
        tcase f = c;
        in = inputs_of(&f);
        switch (k) {
        case 0: f.o[1] = NAN; break;
        case 1: f.lse[0] = NAN; break;
        case 2: f.o[2 * DV] = 1e-3f; break;
        case 3: f.lse[0] += 1.0f; break;
        case 4:
            memcpy(rerun, f.o, sizeof rerun);
            rerun[0] = nextafterf(rerun[0], 2.0f);
            in.o_rerun = rerun;
            break;
        case 5: f.lse[1] = -INFINITY; break;
        case 6: f.lse[1] += 1.0f; break;
        }
        cr_assert_eq(rep_evaluate(&in, &v, &err), FC_OK, "%s: %s", fails[k].name, err.msg);
        cr_expect(!v.pass && !v.outside && v.unscaled, "%s: pass %d outside %d", fails[k].name,
                  v.pass, v.outside);
        cr_expect_str_eq(first_gate_name(&v), fails[k].gate, "%s", fails[k].name);
        rep_row_set_verdict(&row, &v);
        cr_expect_eq(row.outcome, REP_ROW_FAIL, "%s", fails[k].name);
        cr_expect(isnan(row.h1_ratio), "%s: H1 ratio measured", fails[k].name);
    }
    /* A NaN in the oracle is still the reference's fault: an input error, not a verdict. */
    c.o_gold[3] = NAN;
    in = inputs_of(&c);
    cr_expect_eq(rep_evaluate(&in, &v, &err), FC_EINVAL);
}

Test(tables, constants_are_those_of_the_page)
{
    rep_tol t;
    cr_assert_eq(rep_tol_for(FC_F16, &t, NULL), FC_OK, "f16");
    cr_expect(t.c == 2 && t.u == 1.0 / 2048 && t.lse_atol == 1e-3 && t.lse_rtol == 1e-3 &&
                  t.deg_atol == 1e-3 && !t.deg_atol_scaled && t.deg_rtol == 1e-3 &&
                  t.s1_max == 1.1 && t.s2_max == 1.2,
              "f16 constants");
    cr_assert_eq(rep_tol_for(FC_BF16, &t, NULL), FC_OK, "bf16");
    cr_expect(t.c == 2 && t.u == 1.0 / 256 && t.deg_atol == 1e-2 && !t.deg_atol_scaled &&
                  t.deg_rtol == 1.6e-2, "bf16 constants");
    cr_assert_eq(rep_tol_for(FC_F32, &t, NULL), FC_OK, "f32");
    cr_expect(t.c == 10 && t.u == 1.0 / 16777216 && t.lse_atol == 1e-5 && t.lse_rtol == 1e-5 &&
                  t.deg_atol == 1e-5 && t.deg_atol_scaled && t.deg_rtol == 1.3e-6 &&
                  t.s1_max == 10, "f32 constants");
    cr_expect_str_eq(rep_gate_name(REP_H6), "H6", "gate names");
    cr_expect_str_eq(rep_gate_name(REP_H1), "H1", "gate names");
    cr_expect_str_eq(rep_gate_name(REP_NGATES), "?", "past the last gate");
    for (int g = 0; g < REP_NGATES; g++)
        cr_expect(strcmp(rep_gate_name((rep_gate)g), "?") && strcmp(rep_gate_title((rep_gate)g), "?"),
                  "gate %d has no name or title", g);
}

/* With sinks, an empty row's LSE is the head's sink: a finite value a kernel computes like any
 * LSE (m + log(l), often through base 2), held to H5's bound, not to equality (H5 allowed 3.5e-3
 * on that same value while H4 demanded every bit). Its O stays exactly 0. */
Test(gates, a_sink_rows_lse_is_held_to_h5s_bound)
{
    attn_problem p;
    memset(&p, 0, sizeof p);
    fc_err err;
    cr_assert_eq(seq_init_dense(&p.seq, 1, ROWS, 4, &err), FC_OK);
    p.hq = p.hkv = 1;
    p.d = p.dv = DV;
    p.scale = 0.5;
    float sink = 2.5f;
    p.terms.sinks = &sink;
    static const struct {
        double off; /* LSE - sink */
        int pass;
    } cases[] = {{0, 1}, {1.25e-3, 1}, {-3.4e-3, 1}, {3.6e-3, 0}, {-5e-3, 0}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        tcase c;
        clean_case(&c, FC_F16);
        c.lse_gold[2] = sink;
        c.lse[2] = (float)(sink + cases[k].off);
        rep_inputs in = inputs_of(&c);
        in.prob = &p;
        rep_verdict v = judge_inputs("sink row", &in);
        cr_expect_eq(v.gate[REP_H4], cases[k].pass ? REP_PASS : REP_FAIL, "off %g: %s",
                     cases[k].off, rep_verdict_reason(&v));
        if (!cases[k].pass)
            cr_expect(strstr(v.why[REP_H4], "not the sink 2.5 within H5's bound"), "%s",
                      v.why[REP_H4]);
    }
    tcase c; /* the output must still be exactly 0 */
    clean_case(&c, FC_F16);
    c.lse_gold[2] = c.lse[2] = sink;
    c.o[2 * DV + 1] = 1e-6f;
    rep_inputs in = inputs_of(&c);
    in.prob = &p;
    rep_verdict v = judge_inputs("sink row, O not 0", &in);
    cr_expect_eq(v.gate[REP_H4], REP_FAIL);
    seq_free(&p.seq);
}

/* An LSE stored in bfloat16 (or float16) is judged at that type's resolution: H5's bound plus
 * half an ulp of the stored value. A truth of 1.5035 rounds to bfloat16 1.5 (ulp 2^-7 there):
 * off by 3.5e-3, past H5's 1e-3 + 1e-3 * 1.5035 = 2.5e-3 as float32, within 2.5e-3 + 3.9e-3 as
 * bfloat16. Two bfloat16 steps up (1.515625, off by 1.2e-2) fails either way. */
Test(gates, an_lse_stored_in_bfloat16_is_judged_at_its_resolution)
{
    static const struct {
        double lse0;
        fc_dtype stored;
        int pass;
    } cases[] = {{1.5, FC_F32, 0}, {1.5, FC_BF16, 1}, {1.515625, FC_BF16, 0},
                 {1.5035, FC_F32, 1}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        tcase c;
        clean_case(&c, FC_BF16);
        c.lse_gold[0] = 1.5035;
        c.lse[0] = (float)cases[k].lse0;
        rep_inputs in = inputs_of(&c);
        in.lse_dtype = cases[k].stored;
        rep_verdict v = judge_inputs("stored LSE", &in);
        cr_expect_eq(v.gate[REP_H5], cases[k].pass ? REP_PASS : REP_FAIL, "case %zu: %s", k,
                     rep_verdict_reason(&v));
        if (!cases[k].pass && cases[k].stored == FC_BF16)
            cr_expect(strstr(v.why[REP_H5], "+ half a bfloat16 ulp 0.00391 (the LSE is stored "
                                            "as bfloat16"), "%s", v.why[REP_H5]);
    }
}

/* ---- the baseline of each row (docs/tolerance.md "When the baseline drowns") ------------- */

/* The clean case's baselines with their LSEs: the dtype's off by 2^-6 in O and 2^-10 in LSE
 * everywhere, the float32-score one likewise; row 2 is empty (no baseline judges it). */
typedef struct lpcase {
    tcase c;
    float lse_lp[ROWS], o32[N], lse32[ROWS];
} lpcase;

static void lp_case(lpcase *l, fc_dtype dt)
{
    clean_case(&l->c, dt);
    memcpy(l->o32, l->c.o_lp, sizeof l->o32);
    for (int r = 0; r < ROWS; r++)
        l->lse_lp[r] = l->lse32[r] = r < 2 ? (float)(gold_lse[r] + 0x1p-10) : -INFINITY;
}

static rep_inputs lp_inputs(const lpcase *l, int with32)
{
    rep_inputs in = inputs_of(&l->c);
    in.lse_lp = l->lse_lp;
    if (with32) {
        in.o_lp32s = l->o32;
        in.lse_lp32s = l->lse32;
    }
    return in;
}

/* Row 1's baseline off by 0.5 where max|O_gold| is 1 (REP_DROWN * 1 = 0.125 holds a row): c
 * times that would bound H1 at 1.0 and pass an output wrong by 0.25 (a GQA head mix-up on the
 * bfloat16 very-negative-logits case passed so, at ratio 0.55). With the float32-score baseline
 * (2^-6 off) row 1 is judged against it and the same output fails H1; the correct one passes;
 * without it the case is outside the contract and says why. */
Test(baseline, a_row_the_baseline_drowns_is_judged_against_the_float32_score_baseline)
{
    fc_dtype dts[] = {FC_F16, FC_BF16};
    for (int d = 0; d < 2; d++) {
        lpcase l;
        lp_case(&l, dts[d]);
        for (int j = 0; j < DV; j++)
            l.c.o_lp[DV + j] = (float)(gold_rows[1][j] + 0.5);
        const char *dn = fc_dtype_name(dts[d]);
        rep_inputs in = lp_inputs(&l, 1);
        rep_verdict v = judge_inputs("correct", &in);
        cr_expect(v.pass && v.lp32s_rows == 1 && v.e_lp_max == E_LP, "%s: pass %d rows %zu "
                  "e_lp_max %g", dn, v.pass, v.lp32s_rows, v.e_lp_max);
        char want[160];
        snprintf(want, sizeof want, "the %s baseline drowns on 1 row (at row 1 col 0: off by 4 "
                 "times 1/8 of max|O_gold| 1 (or of log(9/8) in LSE)); judged there against the "
                 "float32-score baseline", dn);
        cr_expect(!strncmp(v.lp_note, want, strlen(want)), "%s: %s", dn, v.lp_note);

        l.c.o[DV + 0] += 0.25f; /* wrong by a quarter of max|O_gold| */
        in = lp_inputs(&l, 1);
        v = judge_inputs("wrong", &in);
        cr_expect(!v.pass && !v.outside && v.first_fail == REP_H1, "%s: wrong output: pass %d "
                  "first %s", dn, v.pass, first_gate_name(&v));
        /* what the drowned baseline alone would allow: the case is outside, not a pass */
        in = lp_inputs(&l, 0);
        v = judge_inputs("no float32-score baseline", &in);
        cr_expect(v.outside && !v.pass && v.unscaled && v.lp32s_rows == 0, "%s: outside %d",
                  dn, v.outside);
        snprintf(want, sizeof want, "outside-contract: the %s baseline's error at row 1 col 0 "
                 "is 4 times 1/8 of max|O_gold| 1", dn);
        cr_expect(!strncmp(rep_verdict_reason(&v), want, strlen(want)), "%s: %s", dn,
                  rep_verdict_reason(&v));
        /* and a float32-score baseline that drowns too leaves it outside */
        l.o32[DV + 1] = (float)(gold_rows[1][1] - 0.5);
        in = lp_inputs(&l, 1);
        v = judge_inputs("both drown", &in);
        cr_expect(v.outside && v.lp32s_rows == 0 && strstr(rep_verdict_reason(&v),
                  "and the float32-score baseline's too"), "%s: %s", dn, rep_verdict_reason(&v));
    }
}

/* A row whose O the baseline holds but whose LSE it has off by more than log(9/8) is drowned
 * too (a row of scores around -1e5 whose weights one key dominates: O right, LSE off by a
 * bfloat16 ulp of the score), and its LSE judged against the float32-score baseline's. */
Test(baseline, an_lse_off_by_more_than_log_nine_eighths_drowns_the_row)
{
    lpcase l;
    lp_case(&l, FC_BF16);
    l.lse_lp[0] = (float)(gold_lse[0] + 0.125); /* log(9/8) = 0.1178 */
    rep_inputs in = lp_inputs(&l, 1);
    rep_verdict v = judge_inputs("lse drowned", &in);
    cr_expect(v.pass && v.lp32s_rows == 1, "pass %d rows %zu", v.pass, v.lp32s_rows);
    cr_expect(v.e_lse_lp_max == 0x1p-10, "H5's scale from the baselines that judge: %g",
              v.e_lse_lp_max);
    l.lse_lp[0] = (float)(gold_lse[0] + 0.1171875); /* within log(9/8): holds */
    in = lp_inputs(&l, 1);
    v = judge_inputs("lse held", &in);
    cr_expect(v.lp32s_rows == 0 && v.e_lse_lp_max == 0.1171875, "rows %zu e %g", v.lp32s_rows,
              v.e_lse_lp_max);
}

/* Where the dtype's baseline overflowed (scores float16 cannot hold) and the float32-score one
 * holds the row, the row is judged: a NaN there is the kernel's (H3), no longer "anything
 * goes". */
Test(baseline, an_overflowed_row_with_a_float32_score_baseline_is_judged)
{
    lpcase l;
    lp_case(&l, FC_F16);
    l.c.o_lp[4] = INFINITY;
    rep_inputs in = lp_inputs(&l, 1);
    rep_verdict v = judge_inputs("overflowed, correct", &in);
    cr_expect(v.pass && !v.unscaled && v.lp32s_rows == 1, "pass %d unscaled %d rows %zu", v.pass,
              v.unscaled, v.lp32s_rows);
    l.c.o[4] = NAN;
    in = lp_inputs(&l, 1);
    v = judge_inputs("overflowed, NaN", &in);
    cr_expect(!v.pass && !v.outside && v.first_fail == REP_H3, "pass %d first %s", v.pass,
              first_gate_name(&v));
    in = lp_inputs(&l, 0); /* without it: outside, the NaN not the kernel's (as before) */
    v = judge_inputs("overflowed, NaN, no fallback", &in);
    cr_expect(v.outside && v.nan_count == 0, "outside %d nan %zu", v.outside, v.nan_count);
}

/* H5 adds c times the baseline's largest LSE error over the rows it judges to atol + rtol |g|:
 * a correct same-precision engine (math SDPA pre-scaling q in the input type) moves its LSE by
 * as much as the baseline's rounded scores move it. Row 0: |g| = 1.5, baseline 2^-7 off (row 1
 * 2^-8): float16's bound 1e-3 + 1.5e-3 + 2 * 2^-7 = 0.018125. */
Test(h5, the_bound_adds_c_times_the_baselines_largest_lse_error)
{
    lpcase l;
    lp_case(&l, FC_F16);
    l.lse_lp[0] = (float)(gold_lse[0] + 0x1p-7);
    l.lse_lp[1] = (float)(gold_lse[1] - 0x1p-8);
    l.c.lse[0] = (float)(gold_lse[0] + 0.018);
    rep_inputs in = lp_inputs(&l, 0);
    rep_verdict v = judge_inputs("inside", &in);
    cr_expect(v.pass && v.e_lse_lp_max == 0x1p-7, "pass %d e_lse_lp_max %g: %s", v.pass,
              v.e_lse_lp_max, rep_verdict_reason(&v));
    cr_expect(fabs(v.lse_ratio - 0.018 / 0.018125) < 1e-5, "ratio %.7g", v.lse_ratio);
    l.c.lse[0] = (float)(gold_lse[0] + 0.0185);
    in = lp_inputs(&l, 0);
    v = judge_inputs("outside", &in);
    cr_expect(!v.pass && v.first_fail == REP_H5, "pass %d first %s", v.pass, first_gate_name(&v));
    cr_expect(strstr(rep_verdict_reason(&v), "> 0.001 + 0.001 * |1.5| + 2 * e_lse_lp 0.00781 "
                     "(the worst row)"), "%s", rep_verdict_reason(&v));
    /* without the baseline's LSE, the fixed bound alone (0.0025): 0.018 fails */
    l.c.lse[0] = (float)(gold_lse[0] + 0.018);
    in = inputs_of(&l.c);
    v = judge_inputs("no lse_lp", &in);
    cr_expect(!v.pass && v.first_fail == REP_H5 && v.e_lse_lp_max == 0, "pass %d", v.pass);
}
