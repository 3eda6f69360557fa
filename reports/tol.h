/*
 * tol.h - the pass/fail rule set of docs/tolerance.md as a library: per-case metrics, the
 * hard gates H1-H7, the soft signals S1-S2, and the sentinel buffers H6 needs.
 *
 * One call, rep_evaluate(), judges one case (one dtype, one backend) from the tested output,
 * the float64 oracle and the naive same-precision baseline, and fills a rep_verdict that
 * records every metric, the state of every gate and the first gate that failed, in this
 * order (the enum order below):
 *
 *   H6 sentinels    first: a kernel that wrote outside its buffers makes everything else moot
 *   H3 non-finite   "special values are checked before any metric"
 *   H4 empty rows   exact structure (0 output, -inf LSE), no tolerance involved
 *   H1 max ratio    the main numeric gate
 *   H2 NMSE
 *   H5 LSE
 *   H7 determinism  needs a second run, so it is the last thing a runner learns
 *
 * Every gate is evaluated even after an earlier one failed, so a report shows them all.
 *
 * Decisions the page leaves open (tests/test_tol.c pins each of them):
 * - Empty rows (LSE_gold == -inf) are H4's alone: metrics, the H1 floor, H1, H2 and H5 cover
 *   the non-empty rows only. -0.0 counts as exactly 0 (it compares equal, as in PyTorch's tests).
 * - Non-finite values are H3's alone: metrics and H1/H2/H5 cover the element pairs where the
 *   tested value and the oracle are both finite. H3 is symmetric for O (a NaN anywhere fails;
 *   an infinity in O or in O_gold must be matched by the same infinity in the other). For LSE,
 *   a tested infinity must match LSE_gold; a finite tested LSE in an empty row is H4's failure.
 * - The references must be usable: a NaN in O_gold/LSE_gold, +inf in LSE_gold or a nonzero
 *   O_gold in an empty row make rep_evaluate return FC_EINVAL instead of a verdict. A non-finite
 *   O_lp where O_gold is finite (the baseline overflowed) leaves H1 and H2 without a scale
 *   (v->unscaled): they and the soft signals are not run. H6, H4 and H7 run as always, H3 on
 *   the elements the baseline held (finite there) and H3/H5 on LSE on the rows it held wholly:
 *   a NaN where the dtype held the result, a broken empty row or a changed guard byte is the
 *   kernel's fault whatever the scores elsewhere. Any failure fails the case; otherwise it is
 *   "outside the contract" (v->outside), never a kernel failure.
 * - H1 floor for float16/bfloat16: g = rnd((float)O_gold), then rnd(g + 0.3f) and
 *   rnd(that - 0.3f) with the additions in float, as PyTorch evaluates `out + 0.3 - 0.3` on a
 *   half tensor (opmath float, result rounded to the tensor's dtype).
 * - H1 ratio = max|err| / (c * e_lp_max + floor); 0/0 is 0 and x/0 is +inf. In the degenerate
 *   baseline case it is the largest element-wise |err| / (atol + rtol * |O_gold|).
 * - NMSE_lp (H2's scale) covers the baseline's elements (every finite O_gold of a non-empty
 *   row), NMSE the compared pairs; H2's ceiling is max(u^2, c^2 * NMSE_lp).
 * - NMSE with sum(O_gold^2) == 0: 0 when the error sum is 0 too, else +inf (fails H2): a zero
 *   oracle with a nonzero output is an infinite relative error.
 * - S1 with e_lp_mean == 0 and S2 with rmse(O_lp) == 0 follow the same 0/0 = 0, x/0 = +inf rule.
 * - No rows (or no non-empty rows): every metric is 0 and the numeric gates pass.
 * - The tested LSE is optional (another producer may not give it): without it H5 is REP_NOT_RUN,
 *   and H3 and H4 look at O alone. H7 compares O with o_rerun, and LSE with lse_rerun when that
 *   is given too (a stored rerun of another producer has no LSE).
 * - H6 and H7 need evidence the caller may not have (guarded buffers or a launcher's guard
 *   check, a second run); without it they are REP_NOT_RUN, which does not fail the verdict but
 *   is shown in every report (the row's gates column).
 */
#ifndef FLEXCHECK_TOL_H
#define FLEXCHECK_TOL_H

#include <stddef.h>
#include <stdint.h>

#include "base/fc.h"
#include "base/guard.h"
#include "masks/problem.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Hard gates in evaluation order (see above); the values index rep_verdict.gate. */
typedef enum rep_gate {
    REP_H6 = 0, /* sentinels */
    REP_H3,     /* non-finite */
    REP_H4,     /* empty rows */
    REP_H1,     /* max ratio */
    REP_H2,     /* NMSE */
    REP_H5,     /* LSE */
    REP_H7,     /* determinism */
    REP_NGATES
} rep_gate;

typedef enum rep_gate_state { REP_NOT_RUN = 0, REP_PASS = 1, REP_FAIL = 2 } rep_gate_state;

/* "H1".."H7" and a short title ("max ratio", ...); "?" for anything else. The exactness checks
 * are named by whoever runs them (the gate's check table, ci/checks.h): reports take their names
 * as strings (rep_row.first_fail, rep_set.checks). */
const char *rep_gate_name(rep_gate g);
const char *rep_gate_title(rep_gate g);

/* The constants of docs/tolerance.md for one dtype. */
typedef struct rep_tol {
    double c;                    /* H1: multiple of e_lp_max; H2: c^2 times NMSE_lp */
    double u;                    /* unit roundoff: 2^-24, 2^-11, 2^-8. H2's floor is u^2; the
                                  * baseline is degenerate when e_lp_max < (u / 8) max|O_gold| */
    double lse_atol, lse_rtol;   /* H5 */
    double deg_atol, deg_rtol;   /* H1 element-wise, degenerate baseline */
    int deg_atol_scaled;         /* float32: the atol is deg_atol * max(1, max|O_gold|) */
    double s1_max, s2_max;       /* soft-signal flags */
} rep_tol;

/* FC_EINVAL for an unknown dtype. */
fc_status rep_tol_for(fc_dtype dt, rep_tol *out, fc_err *err);

/* H1 floor term of one oracle value: |rnd(rnd(g + 0.3) - 0.3) - g| with g = rnd(gold) for
 * float16/bfloat16 (the floor is twice the largest term); 0 for float32, whose floor is
 * 1e-6 * max(1, max|O_gold|) instead. */
double rep_floor_term(fc_dtype dt, double gold);

/* ---- one case ------------------------------------------------------------------------- */

/* H6 evidence from a launcher that guards its own (device) buffers. */
typedef enum rep_sentinels {
    REP_SENTINELS_UNCHECKED = 0,
    REP_SENTINELS_INTACT,
    REP_SENTINELS_DAMAGED,
} rep_sentinels;

/* Arrays are row-major: O-like [rows][dv], LSE-like [rows], rows = B * Hq * Lq. Tested values
 * of float16/bfloat16 cases are stored widened to float. */
typedef struct rep_inputs {
    fc_dtype dtype;
    size_t rows, dv;
    const float *o, *lse;              /* the tested output (required) and LSE (may be NULL) */
    const double *o_gold, *lse_gold;   /* float64 oracle; LSE_gold == -inf marks an empty row
                                        * (with sinks: LSE_gold == the sink and O_gold 0) */
    const float *o_lp;                 /* naive same-precision baseline (ref_attention_lp) */
    const float *lse_lp;               /* optional: its LSE. With it H5 adds c times the
                                        * baseline's own largest LSE error to its bound, and a
                                        * row whose baseline LSE is off by more than
                                        * log(1 + REP_DROWN) is drowned */
    const float *o_lp32s, *lse_lp32s;  /* optional (float16/bfloat16, both or neither, lse_lp
                                        * with them): the float32-score baseline
                                        * (ref_attention_lp32s), which judges the rows o_lp
                                        * drowns; without it such rows leave the case outside
                                        * the contract */
    const fc_guarded *o_buf, *lse_buf; /* H6, optional: the buffers o and lse live in */
    rep_sentinels sentinels;           /* H6, optional: the launcher's own guard check */
    const float *o_rerun, *lse_rerun;  /* H7, optional: a second run (lse_rerun needs both) */
    const attn_problem *prob;          /* optional: messages name elements by (b, h, q, d)
                                        * (attn_row_where); NULL: by flat row and column.
                                        * Required with sinks: empty rows' LSE is the sink */
    const int32_t *tokens;             /* optional, with prob: the rows are those of these
                                        * query tokens only (ntokens of them, increasing), in
                                        * the order (b, h, token): a sample (ref_tokens) */
    int32_t ntokens;
    fc_dtype lse_dtype;                /* the type the tested LSE was stored in: FC_F32 (float32
                                        * or finer, the default), or float16 / bfloat16, whose
                                        * resolution H5 adds (half an ulp of the stored value) */
    int designed;                      /* inputs built for an exactness check, not drawn from a
                                        * distribution (p-round's design, whose rounding errors
                                        * add up on purpose: the NMSE of a correct rounding can
                                        * pass 2^2 x the baseline's): H2 is not run; H1 is (its
                                        * max-error bound holds there, ratios <= 0.24 measured),
                                        * and the check's own rule judges the rounding */
} rep_inputs;

#define REP_WHY_LEN 256

typedef struct rep_verdict {
    fc_dtype dtype;
    size_t rows, dv;
    size_t empty_rows;    /* rows with no allowed key (LSE_gold -inf, or the sink) */
    size_t compared;      /* finite element pairs in the metrics */

    /* H3 */
    size_t nan_count;     /* NaNs in O and LSE */
    size_t inf_count;     /* infinities in O, and in LSE outside empty rows */

    /* Metrics over non-empty rows. Oracle-side ones (max|O_gold|, e_lp_*, rmse_lp, floor)
     * cover every finite O_gold; tested-side ones (max/mean/RMSE/NMSE) the `compared` pairs. */
    double max_abs_gold;  /* max|O_gold| */
    double max_err, mean_err, rmse, nmse;
    size_t worst_row, worst_col; /* where |O - O_gold| is largest */
    double e_lp_max, e_lp_mean, rmse_lp;
    double nmse_lp;       /* the baseline's own NMSE against O_gold (over every finite O_gold) */

    /* H1 */
    double c, floor;
    double h1_tol;        /* c * e_lp_max + floor, or atol + rtol*|g| at the worst element */
    double h1_ratio;
    int degenerate;       /* element-wise atol/rtol mode */
    double deg_atol, deg_rtol; /* its bound |O - O_gold| <= deg_atol + deg_rtol * |O_gold| */

    /* H2 */
    double nmse_tol;      /* max(u^2, c^2 * nmse_lp) */

    /* the baseline of each row (docs/tolerance.md "When the baseline drowns") */
    size_t lp32s_rows;    /* rows o_lp drowns, judged against the float32-score baseline */
    char lp_note[REP_WHY_LEN]; /* "" or what drowned where: every report of the verdict says it */
    double e_lse_lp_max;  /* the baselines' largest LSE error over the rows they judge: H5 adds c
                           * times it */

    /* H5 over non-empty rows with a finite tested LSE */
    fc_dtype lse_dtype;   /* the LSE's stored type (rep_inputs.lse_dtype) */
    double lse_err;       /* max|LSE - LSE_gold| */
    double lse_ratio;     /* max |LSE - LSE_gold| / (atol + rtol * |LSE_gold|) */

    /* soft signals */
    double s1, s2;
    int s1_flag, s2_flag;

    rep_gate_state gate[REP_NGATES];
    int unscaled;         /* the baseline overflowed where O_gold is finite: H1, H2, S1, S2
                           * not run, metrics not measured; outside_why says where */
    int outside;          /* unscaled and no gate that ran failed: outside the contract,
                           * pass is 0 */
    char outside_why[REP_WHY_LEN];
    int pass;             /* no gate is REP_FAIL (and the case is inside the contract) */
    int first_fail;       /* a rep_gate, or -1 */
    char why[REP_NGATES][REP_WHY_LEN]; /* one line per failed gate, "" otherwise */
} rep_verdict;

/* When the same-precision baseline drowns a row (docs/tolerance.md): its error there is more
 * than REP_DROWN times max|O_gold| (or its LSE more than log(1 + REP_DROWN) off), or not finite
 * where O_gold is. Its weights are then off by more than an eighth, and c times its error would
 * let a wrong output pass. Over the quick matrix every case's baseline stays within 0.017 of
 * max|O_gold| and 0.016 in LSE except on scores around -1e5 (bfloat16: 0.95; float16: not
 * finite), so the line sits 7x above the largest healthy error. */
#define REP_DROWN 0.125

/* How many non-empty rows in->o_lp (with in->lse_lp when given) drowns: judge/ computes the
 * float32-score baseline only when this is not 0. 0 for inputs missing the arrays it needs. */
size_t rep_lp_drowned_rows(const rep_inputs *in);

/* Judges one case. FC_OK means a verdict was reached (which may be a failure, see v->pass, or
 * outside the contract, see v->outside);
 * FC_EINVAL means bad arguments or unusable references (the message says which). */
fc_status rep_evaluate(const rep_inputs *in, rep_verdict *v, fc_err *err);

/* Row r of in's arrays as a row of the whole output ((b * Hq + h) * Lq + q): itself, or with
 * in->tokens the row of its token. */
size_t rep_full_row(const rep_inputs *in, size_t r);

/* v->why[v->first_fail], the outside-contract reason, or "pass". */
const char *rep_verdict_reason(const rep_verdict *v);

/* 1 when v failed and every gate it failed is H1, H2 or H5: the gates whose bounds are taken
 * over the rows judged (e_lp_max, NMSE_lp, e_lse_lp_max, max|O_gold|). Judged on a sample of
 * rows, such a failure may be one of the sample's bounds alone (the whole case's are never
 * tighter); a failure of H3, H4, H6 or H7 is a row's own and stands whatever the bounds. */
int rep_fails_on_bounds(const rep_verdict *v);

#ifdef __cplusplus
}
#endif

#endif
