/*
 * tol.c - rep_evaluate(): the hard gates and soft signals of docs/tolerance.md for one case
 * (tol.h says what is decided where the page is silent). Each gate is one function; all of
 * them run, and the first failure in rep_gate order becomes the verdict's reason.
 *
 * Every comparison that decides a gate is written `!(x <= limit)` so a NaN fails it.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/lowp.h"
#include "reports/tol.h"

static const rep_tol tol_table[] = {
    [FC_F32] = {.c = 10, .u = 0x1p-24, .lse_atol = 1e-5, .lse_rtol = 1e-5, .deg_atol = 1e-5,
                .deg_atol_scaled = 1, .deg_rtol = 1.3e-6, .s1_max = 10, .s2_max = 1.2},
    [FC_F16] = {.c = 2, .u = 0x1p-11, .lse_atol = 1e-3, .lse_rtol = 1e-3, .deg_atol = 1e-3,
                .deg_rtol = 1e-3, .s1_max = 1.1, .s2_max = 1.2},
    [FC_BF16] = {.c = 2, .u = 0x1p-8, .lse_atol = 1e-3, .lse_rtol = 1e-3, .deg_atol = 1e-2,
                 .deg_rtol = 1.6e-2, .s1_max = 1.1, .s2_max = 1.2},
};

static const char *const gate_names[REP_NGATES] = {
    [REP_H6] = "H6", [REP_H3] = "H3", [REP_H4] = "H4", [REP_H1] = "H1",
    [REP_H2] = "H2", [REP_H5] = "H5", [REP_H7] = "H7",
};
static const char *const gate_titles[REP_NGATES] = {
    [REP_H6] = "sentinels", [REP_H3] = "non-finite", [REP_H4] = "empty rows",
    [REP_H1] = "max ratio", [REP_H2] = "NMSE", [REP_H5] = "LSE", [REP_H7] = "determinism",
};

const char *rep_gate_name(rep_gate g)
{
    return (unsigned)g < REP_NGATES ? gate_names[g] : "?";
}

const char *rep_gate_title(rep_gate g)
{
    return (unsigned)g < REP_NGATES ? gate_titles[g] : "?";
}

fc_status rep_tol_for(fc_dtype dt, rep_tol *out, fc_err *err)
{
    if ((unsigned)dt > FC_BF16)
        return fc_errf(err, FC_EINVAL, "tolerance: unknown dtype %d", (int)dt);
    *out = tol_table[dt];
    return FC_OK;
}

double rep_floor_term(fc_dtype dt, double gold)
{
    if (dt == FC_F32)
        return 0;
    /* The additions happen in float and only their results are rounded to dt, which is how
     * PyTorch evaluates `out + 0.3 - 0.3` on a half tensor. */
    float g = fc_round((float)gold, dt);
    float up = fc_round(g + 0.3f, dt);
    float back = fc_round(up - 0.3f, dt);
    return fabs((double)back - (double)g);
}

/* num / den with 0/0 = 0 and x/0 = +inf (tol.h); NaN stays NaN. */
static double safe_ratio(double num, double den)
{
    if (isnan(num) || isnan(den))
        return NAN;
    if (den > 0)
        return num / den;
    return num == 0 ? 0 : INFINITY;
}

/* Running maximum that keeps a NaN once it has seen one. */
static int raise_max(double *m, double x)
{
    if (isnan(*m))
        return 0;
    if (isnan(x) || x > *m) {
        *m = x;
        return 1;
    }
    return 0;
}

/* The LSE a row with no allowed key has: -inf, or with sinks (docs/semantics.md section 7)
 * its head's sink, which needs the problem to know the head (no problem: no sinks). */
static double empty_lse(const rep_inputs *in, size_t r)
{
    const attn_problem *p = in->prob;
    if (!p || !p->terms.sinks || p->hq < 1)
        return -INFINITY;
    size_t per_head = in->tokens ? (size_t)in->ntokens : (size_t)p->seq.lq;
    if (per_head < 1)
        return -INFINITY;
    return (double)p->terms.sinks[r / per_head % (size_t)p->hq];
}

/* A row with no allowed key: LSE_gold -inf; with sinks LSE_gold equal to the sink and O_gold
 * exactly 0 (a row whose keys all weigh under double's range beside the sink is the same
 * row to every precision, and is judged as one). */
static int row_empty(const rep_inputs *in, size_t r)
{
    double e = empty_lse(in, r);
    if (in->lse_gold[r] != e)
        return 0;
    for (size_t j = 0; e != -INFINITY && j < in->dv; j++)
        if (in->o_gold[r * in->dv + j] != 0)
            return 0;
    return 1;
}

size_t rep_full_row(const rep_inputs *in, size_t r)
{
    if (!in->tokens || !in->prob || in->ntokens < 1)
        return r;
    size_t n = (size_t)in->ntokens;
    return r / n * (size_t)in->prob->seq.lq + (size_t)in->tokens[r % n];
}

/* Marks gate g failed; the first message of a gate is kept (it names the first place). */
static void fail(rep_verdict *v, rep_gate g, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void fail(rep_verdict *v, rep_gate g, const char *fmt, ...)
{
    if (v->gate[g] == REP_FAIL)
        return;
    v->gate[g] = REP_FAIL;
    int n = snprintf(v->why[g], REP_WHY_LEN, "%s %s: ", gate_names[g], gate_titles[g]);
    if (n < 0 || n >= REP_WHY_LEN)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v->why[g] + n, REP_WHY_LEN - (size_t)n, fmt, ap);
    va_end(ap);
}

/* Where element (row r, column j) of O sits (j < 0: row r of LSE), in the problem's
 * coordinates when the caller gave the problem: "(b, h, q, d) = (0, 1, 40, 5)". */
typedef struct where_buf {
    char s[112];
} where_buf;

static where_buf at(const rep_inputs *in, size_t r, long j)
{
    where_buf w;
    if (in->prob)
        attn_row_where(w.s, sizeof w.s, in->prob, rep_full_row(in, r), j);
    else if (j >= 0)
        snprintf(w.s, sizeof w.s, "row %zu col %ld", r, j);
    else
        snprintf(w.s, sizeof w.s, "row %zu", r);
    return w;
}

static void pass_unless_failed(rep_verdict *v, rep_gate g)
{
    if (v->gate[g] != REP_FAIL)
        v->gate[g] = REP_PASS;
}

/* Arguments and references. A verdict resting on a broken oracle would blame the kernel for the
 * reference's fault, so that is an input error. */
static fc_status check_inputs(const rep_inputs *in, size_t n, fc_err *err)
{
    if (n && (!in->o || !in->o_gold || !in->o_lp))
        return fc_errf(err, FC_EINVAL, "evaluate: o, o_gold and o_lp are required");
    if (in->rows && !in->lse_gold)
        return fc_errf(err, FC_EINVAL, "evaluate: lse_gold is required");
    if (!in->lse && (in->lse_buf || in->lse_rerun))
        return fc_errf(err, FC_EINVAL, "evaluate: lse_buf or lse_rerun given without lse");
    if (in->lse_rerun && !in->o_rerun)
        return fc_errf(err, FC_EINVAL, "evaluate: lse_rerun given without o_rerun");
    if (!in->o_lp32s != !in->lse_lp32s || (in->o_lp32s && !in->lse_lp))
        return fc_errf(err, FC_EINVAL, "evaluate: the float32-score baseline needs o_lp32s, "
                                       "lse_lp32s and lse_lp together");
    if (!in->o_buf != !in->lse_buf)
        return fc_errf(err, FC_EINVAL, "evaluate: H6 needs both o_buf and lse_buf, or neither");
    if (in->o_buf && (in->o_buf->data != (const void *)in->o ||
                      in->lse_buf->data != (const void *)in->lse ||
                      in->o_buf->nbytes != n * sizeof(float) ||
                      in->lse_buf->nbytes != in->rows * sizeof(float)))
        return fc_errf(err, FC_EINVAL, "evaluate: o_buf/lse_buf must be the buffers o and lse "
                                       "live in, of exactly their size");
    if ((unsigned)in->lse_dtype > FC_BF16)
        return fc_errf(err, FC_EINVAL, "evaluate: lse_dtype is %d", (int)in->lse_dtype);
    if ((unsigned)in->sentinels > REP_SENTINELS_DAMAGED)
        return fc_errf(err, FC_EINVAL, "evaluate: sentinels is %d", (int)in->sentinels);
    for (size_t r = 0; r < in->rows; r++) {
        double l = in->lse_gold[r];
        if (isnan(l) || l == INFINITY)
            return fc_errf(err, FC_EINVAL, "evaluate: LSE_gold is %g at %s", l, at(in, r, -1).s);
        for (size_t j = 0; j < in->dv; j++) {
            size_t i = r * in->dv + j;
            double g = in->o_gold[i];
            if (isnan(g))
                return fc_errf(err, FC_EINVAL, "evaluate: O_gold is NaN at %s", at(in, r, (long)j).s);
            if (l == -INFINITY && g != 0)
                return fc_errf(err, FC_EINVAL,
                               "evaluate: row %s is empty (LSE_gold -inf) but O_gold there is %g",
                               at(in, r, (long)j).s, g);
        }
    }
    return FC_OK;
}

/* ---- the baseline of each row (docs/tolerance.md "When the baseline drowns") -------------- */

enum { LP_DTYPE = 0, LP_F32S = 1, LP_NONE = 2 }; /* what judges a row: o_lp, o_lp32s, neither */

/* Which baseline judges each row, and what the verdict says about it. */
typedef struct lp_rows {
    uint8_t *pick;   /* [rows]: LP_* */
    double scale;    /* max|O_gold| over the finite values of non-empty rows */
    /* the first row the dtype's baseline drowns, and the first no baseline holds */
    int drowned, unheld;
    size_t dr, ur;
    long dj, uj;     /* the worst column there (-1: the LSE) */
    double derr, uerr, ulp, ug; /* the baseline's error there (inf: not finite), its value and
                                 * O_gold's at the unheld one */
} lp_rows;

/* Whether baseline (ob, lb; lb may be NULL) holds non-empty row r: every value finite where
 * O_gold is, each within REP_DROWN * scale of O_gold, and its LSE within log(1 + REP_DROWN) of
 * LSE_gold. Otherwise *wj and *werr name the worst value (column, -1 for the LSE; error in units
 * of its limit, +inf where the baseline is not finite). */
static int lp_holds(const rep_inputs *in, const float *ob, const float *lb, size_t r,
                    double scale, long *wj, double *werr)
{
    double worst = 0, lim = REP_DROWN * scale, lim_l = log1p(REP_DROWN);
    long j_worst = 0;
    for (size_t j = 0; j < in->dv; j++) {
        size_t i = r * in->dv + j;
        double g = in->o_gold[i];
        if (!isfinite(g))
            continue; /* an infinite truth is H3's to match */
        /* an exact baseline holds even at scale 0 (every O_gold 0); a non-finite one never */
        double d = fabs((double)ob[i] - g), e = !isfinite(ob[i]) ? INFINITY : d == 0 ? 0 : d / lim;
        if (e > worst) {
            worst = e;
            j_worst = (long)j;
        }
    }
    if (lb && isfinite(in->lse_gold[r])) {
        double e = isfinite(lb[r]) ? fabs((double)lb[r] - in->lse_gold[r]) / lim_l : INFINITY;
        if (e > worst) {
            worst = e;
            j_worst = -1;
        }
    }
    *wj = j_worst;
    *werr = worst;
    return worst <= 1;
}

static double lp_max_gold(const rep_inputs *in)
{
    double m = 0;
    for (size_t r = 0; r < in->rows; r++)
        for (size_t j = 0; !row_empty(in, r) && j < in->dv; j++)
            if (isfinite(in->o_gold[r * in->dv + j]))
                raise_max(&m, fabs(in->o_gold[r * in->dv + j]));
    return m;
}

size_t rep_lp_drowned_rows(const rep_inputs *in)
{
    if (!in || !in->o_lp || !in->o_gold || !in->lse_gold)
        return 0;
    double scale = lp_max_gold(in), e;
    long j;
    size_t n = 0;
    for (size_t r = 0; r < in->rows; r++)
        n += !row_empty(in, r) && !lp_holds(in, in->o_lp, in->lse_lp, r, scale, &j, &e);
    return n;
}

/* Picks each row's baseline: the dtype's where it holds the row, else the float32-score one
 * where given and holding, else none (the case is then outside the contract). Also the
 * baselines' largest LSE error over the rows they hold (v->e_lse_lp_max, H5's scale) and the
 * note on the rows judged against the float32-score baseline. */
static fc_status lp_select(const rep_inputs *in, rep_verdict *v, lp_rows *s, fc_err *err)
{
    memset(s, 0, sizeof *s);
    s->pick = calloc(in->rows + 1, 1);
    if (!s->pick)
        return fc_errf(err, FC_ENOMEM, "evaluate: out of memory");
    s->scale = lp_max_gold(in);
    for (size_t r = 0; r < in->rows; r++) {
        if (row_empty(in, r))
            continue; /* H4's: no baseline judges it */
        long j;
        double e;
        const float *lb = in->lse_lp;
        if (lp_holds(in, in->o_lp, in->lse_lp, r, s->scale, &j, &e))
            s->pick[r] = LP_DTYPE;
        else {
            if (!s->drowned)
                s->drowned = 1, s->dr = r, s->dj = j, s->derr = e;
            long j2;
            double e2;
            if (in->o_lp32s && lp_holds(in, in->o_lp32s, in->lse_lp32s, r, s->scale, &j2, &e2)) {
                s->pick[r] = LP_F32S;
                lb = in->lse_lp32s;
                v->lp32s_rows++;
            } else {
                s->pick[r] = LP_NONE;
                if (!s->unheld) {
                    size_t i = r * in->dv + (size_t)(j < 0 ? 0 : j);
                    s->unheld = 1, s->ur = r, s->uj = j, s->uerr = e;
                    s->ulp = j < 0 ? (double)in->lse_lp[r] : (double)in->o_lp[i];
                    s->ug = j < 0 ? in->lse_gold[r] : in->o_gold[i];
                }
                continue;
            }
        }
        if (lb && isfinite(lb[r]) && isfinite(in->lse_gold[r]))
            raise_max(&v->e_lse_lp_max, fabs((double)lb[r] - in->lse_gold[r]));
    }
    char how[96];
    if (isinf(s->derr))
        fc_fmt(how, sizeof how, "not finite");
    else
        fc_fmt(how, sizeof how, "off by %.3g times 1/8 of max|O_gold| %.3g (or of log(9/8) in "
               "LSE)", s->derr, s->scale);
    if (v->lp32s_rows)
        fc_fmt(v->lp_note, sizeof v->lp_note,
               "the %s baseline drowns on %zu row%s (at %s: %s); judged there against the "
               "float32-score baseline", fc_dtype_name(in->dtype), v->lp32s_rows,
               v->lp32s_rows == 1 ? "" : "s", at(in, s->dr, s->dj).s, how);
    return FC_OK;
}

/* The row's baseline values (NULL for a row no baseline holds). */
static const float *lp_row(const rep_inputs *in, const lp_rows *s, size_t r)
{
    return s->pick[r] == LP_NONE ? NULL
                                 : (s->pick[r] == LP_F32S ? in->o_lp32s : in->o_lp) + r * in->dv;
}

/* Element i is one no baseline judges and the dtype's overflowed (finite O_gold, non-finite
 * O_lp): the scores there are more than the dtype (and float32) holds, so no value there is
 * the kernel's fault, NaN included. */
static int lp_overflowed(const rep_inputs *in, const lp_rows *s, size_t i)
{
    return s->pick[i / in->dv] == LP_NONE && isfinite(in->o_gold[i]) && !isfinite(in->o_lp[i]);
}

/* Either kind of evidence may be given, or both (a host buffer and a device check). */
static void gate_h6(const rep_inputs *in, rep_verdict *v)
{
    if (!in->o_buf && in->sentinels == REP_SENTINELS_UNCHECKED)
        return;
    ptrdiff_t bad = 0;
    if (in->o_buf && !fc_guarded_intact(in->o_buf, &bad))
        fail(v, REP_H6, "guard byte of O changed at byte offset %td (O is %zu bytes)", bad,
             in->o_buf->nbytes);
    if (in->lse_buf && !fc_guarded_intact(in->lse_buf, &bad))
        fail(v, REP_H6, "guard byte of LSE changed at byte offset %td (LSE is %zu bytes)", bad,
             in->lse_buf->nbytes);
    if (in->sentinels == REP_SENTINELS_DAMAGED)
        fail(v, REP_H6, "the launcher found a guard byte around O or LSE changed");
    pass_unless_failed(v, REP_H6);
}

static void gate_h3(const rep_inputs *in, const lp_rows *s, rep_verdict *v)
{
    for (size_t i = 0; i < in->rows * in->dv; i++) {
        double o = in->o[i], g = in->o_gold[i];
        size_t r = i / in->dv, j = i % in->dv;
        if (lp_overflowed(in, s, i))
            continue; /* outside the contract there: anything goes, NaN included */
        if (isnan(o)) {
            v->nan_count++;
            fail(v, REP_H3, "O is NaN at %s", at(in, r, (long)j).s);
            continue;
        }
        if (isinf(o))
            v->inf_count++;
        /* Symmetric: an infinity on either side must be the same infinity on the other. */
        if ((isinf(o) || isinf(g)) && !(o == g))
            fail(v, REP_H3, "O is %g at %s where O_gold is %g", o, at(in, r, (long)j).s, g);
    }
    /* The LSE needs no baseline: the truth's is finite or not whatever the dtype of a naive
     * computation could hold, so every row is judged (an LSE of -inf where the truth is -1e5
     * fails even where float16 scores overflowed). */
    for (size_t r = 0; in->lse && r < in->rows; r++) {
        double l = in->lse[r];
        if (isnan(l)) {
            v->nan_count++;
            fail(v, REP_H3, "LSE is NaN at %s", at(in, r, -1).s);
            continue;
        }
        if (!isinf(l))
            continue; /* a finite LSE in an empty row is H4's failure */
        if (row_empty(in, r) && l == -INFINITY)
            continue; /* the expected -inf of an empty row */
        v->inf_count++;
        fail(v, REP_H3, "LSE is %g at %s where LSE_gold is %g", l, at(in, r, -1).s, in->lse_gold[r]);
    }
    pass_unless_failed(v, REP_H3);
}

/* H5's bound for LSE_gold g and a tested LSE l: atol + rtol |g|, plus c times the baseline's
 * own largest LSE error (what a correct same-precision engine may differ by: its rounded
 * scores move the LSE as much; docs/tolerance.md), plus, for an LSE stored in float16 or
 * bfloat16, half an ulp of the stored value (the resolution the producer's type gives it: a
 * correct LSE rounded to it is that far off). */
static double lse_bound(const rep_inputs *in, const rep_tol *t, const rep_verdict *v, double g,
                        double l)
{
    double lim = t->lse_atol + t->lse_rtol * fabs(g) + t->c * v->e_lse_lp_max;
    if (in->lse_dtype != FC_F32 && isfinite(l))
        lim += 0.5 * fc_ulp(l, in->lse_dtype);
    return lim;
}

static void gate_h4(const rep_inputs *in, const rep_tol *t, rep_verdict *v)
{
    for (size_t r = 0; r < in->rows; r++) {
        if (!row_empty(in, r))
            continue;
        v->empty_rows++;
        for (size_t j = 0; j < in->dv; j++) {
            float o = in->o[r * in->dv + j];
            if (!(o == 0.0f))
                fail(v, REP_H4, "empty row: O is %.9g at %s, not exactly 0", (double)o,
                     at(in, r, (long)j).s);
        }
        /* No key: LSE exactly -inf. With sinks the LSE is the sink, a finite value a kernel
         * computes like any other LSE (m + log(l), in base 2 and back): held to H5's bound,
         * not to equality (docs/tolerance.md). */
        double want = empty_lse(in, r), l = in->lse ? (double)in->lse[r] : want;
        if (want == -INFINITY ? !(l == want) : !(fabs(l - want) <= lse_bound(in, t, v, want, l)))
            fail(v, REP_H4, "empty row: LSE is %.9g at %s, not %s%.9g%s", l, at(in, r, -1).s,
                 want == -INFINITY ? "" : "the sink ", want,
                 want == -INFINITY ? "" : " within H5's bound");
    }
    pass_unless_failed(v, REP_H4);
}

/* Metrics of docs/tolerance.md. Oracle-side quantities (max|O_gold|, e_lp_*, rmse_lp, the
 * floor) cover every finite O_gold of a non-empty row; tested-side ones (max/mean/RMSE/NMSE)
 * the pairs where O is finite too. Non-finite values are H3's. */
static void measure(const rep_inputs *in, const lp_rows *s, const rep_tol *t, rep_verdict *v)
{
    double sum_err = 0, sum_sq = 0, sum_gold_sq = 0, sum_lp = 0, sum_lp_sq = 0, fl = 0;
    double sum_ref_sq = 0; /* sum O_gold^2 over the baseline's elements, for NMSE_lp */
    size_t n_ref = 0;
    for (size_t r = 0; r < in->rows; r++) {
        const float *lp = lp_row(in, s, r);
        if (row_empty(in, r) || !lp)
            continue; /* measure() runs only when a baseline holds every non-empty row */
        for (size_t j = 0; j < in->dv; j++) {
            size_t i = r * in->dv + j;
            double g = in->o_gold[i];
            if (!isfinite(g))
                continue;
            double elp = fabs((double)lp[j] - g);
            n_ref++;
            raise_max(&v->max_abs_gold, fabs(g));
            raise_max(&v->e_lp_max, elp);
            raise_max(&fl, rep_floor_term(in->dtype, g));
            sum_lp += elp;
            sum_lp_sq += elp * elp;
            sum_ref_sq += g * g;
            double o = in->o[i];
            if (!isfinite(o))
                continue;
            double e = fabs(o - g);
            v->compared++;
            if (raise_max(&v->max_err, e) || v->compared == 1) {
                v->worst_row = r;
                v->worst_col = j;
            }
            sum_err += e;
            sum_sq += e * e;
            sum_gold_sq += g * g;
        }
    }
    if (n_ref) {
        v->e_lp_mean = sum_lp / (double)n_ref;
        v->rmse_lp = sqrt(sum_lp_sq / (double)n_ref);
    }
    if (v->compared) {
        v->mean_err = sum_err / (double)v->compared;
        v->rmse = sqrt(sum_sq / (double)v->compared);
    }
    v->nmse = safe_ratio(sum_sq, sum_gold_sq);
    v->nmse_lp = safe_ratio(sum_lp_sq, sum_ref_sq);
    v->c = t->c;
    v->floor = in->dtype == FC_F32 ? 1e-6 * fmax(1.0, v->max_abs_gold) : 2 * fl;
}

static void gate_h1(const rep_inputs *in, const rep_tol *t, rep_verdict *v)
{
    /* Degenerate: the baseline is exact to within the rounding of the output (one key per row,
     * where O = V). The threshold is relative to the dtype: a fixed fraction would call nearly
     * every float32 case degenerate. */
    v->degenerate = v->e_lp_max < (t->u / 8) * v->max_abs_gold;
    v->deg_atol = t->deg_atol * (t->deg_atol_scaled ? fmax(1.0, v->max_abs_gold) : 1.0);
    v->deg_rtol = t->deg_rtol;
    if (!v->degenerate) {
        v->h1_tol = t->c * v->e_lp_max + v->floor;
        v->h1_ratio = safe_ratio(v->max_err, v->h1_tol);
        if (!(v->max_err <= v->h1_tol))
            fail(v, REP_H1,
                 "max|err| %.3e at %s > %g * e_lp_max %.3e + floor %.3e (ratio %.3g)",
                 v->max_err, at(in, v->worst_row, (long)v->worst_col).s, t->c, v->e_lp_max, v->floor,
                 v->h1_ratio);
        pass_unless_failed(v, REP_H1);
        return;
    }
    /* Degenerate baseline (O_lp is essentially exact, e.g. one key per row): element-wise. */
    v->h1_ratio = 0;
    for (size_t r = 0; r < in->rows; r++) {
        if (row_empty(in, r))
            continue;
        for (size_t j = 0; j < in->dv; j++) {
            size_t i = r * in->dv + j;
            double o = in->o[i], g = in->o_gold[i];
            if (!isfinite(o) || !isfinite(g))
                continue;
            double e = fabs(o - g), lim = v->deg_atol + v->deg_rtol * fabs(g);
            if (raise_max(&v->h1_ratio, e / lim))
                v->h1_tol = lim;
            if (!(e <= lim))
                fail(v, REP_H1,
                     "degenerate baseline (e_lp_max %.3e < %g * max|O_gold| %.3e): |err| %.3e "
                     "at %s > %g + %g * |%.6g|",
                     v->e_lp_max, t->u / 8, v->max_abs_gold, e, at(in, r, (long)j).s, v->deg_atol,
                     v->deg_rtol, g);
        }
    }
    pass_unless_failed(v, REP_H1);
}

static void gate_h2(const rep_tol *t, rep_verdict *v)
{
    /* Relative to the baseline's own NMSE: a fixed ceiling sat thousands of times above a
     * correct float16 kernel (so H2 failed nothing H1 passed) and below what float32 can do at
     * scores around -1e5. u^2 keeps an exact baseline from demanding an exact kernel. */
    v->nmse_tol = fmax(t->u * t->u, t->c * t->c * v->nmse_lp);
    if (!(v->nmse <= v->nmse_tol))
        fail(v, REP_H2, "NMSE %.3e > max(u^2 %.3g, %g^2 * NMSE_lp %.3e)", v->nmse,
             t->u * t->u, t->c, v->nmse_lp);
    pass_unless_failed(v, REP_H2);
}

static void gate_h5(const rep_inputs *in, const rep_tol *t, rep_verdict *v)
{
    if (!in->lse)
        return; /* a producer that gave no LSE: H5 not run */
    size_t worst = 0; /* the row furthest past its bound: the one the message names */
    for (size_t r = 0; r < in->rows; r++) {
        double l = in->lse[r], g = in->lse_gold[r];
        /* A NaN or infinite LSE is H3's, and fails here too: its distance to LSE_gold is NaN or
         * inf, never within the bound (the verdict below is written so NaN fails). The lse_err
         * metric, like every metric, covers the finite pairs only. */
        if (row_empty(in, r)) /* H4's; every other row is judged, whatever the baseline did */
            continue;
        double d = fabs(l - g), lim = lse_bound(in, t, v, g, l);
        if (isfinite(l))
            raise_max(&v->lse_err, d);
        if (raise_max(&v->lse_ratio, d / lim))
            worst = r;
    }
    if (!(v->lse_ratio <= 1)) { /* NaN fails too */
        double g = in->lse_gold[worst], l = in->lse[worst], d = fabs(l - g);
        if (in->lse_dtype != FC_F32)
            fail(v, REP_H5, "|LSE - LSE_gold| %.3e at %s > %g + %g * |%.6g| + %g * e_lse_lp %.3g "
                 "+ half a %s ulp %.3g (the LSE is stored as %s; the worst row)", d,
                 at(in, worst, -1).s, t->lse_atol, t->lse_rtol, g, t->c, v->e_lse_lp_max,
                 fc_dtype_name(in->lse_dtype), isfinite(l) ? 0.5 * fc_ulp(l, in->lse_dtype) : 0.0,
                 fc_dtype_name(in->lse_dtype));
        else
            fail(v, REP_H5, "|LSE - LSE_gold| %.3e at %s > %g + %g * |%.6g| + %g * e_lse_lp %.3g "
                 "(the worst row)", d, at(in, worst, -1).s, t->lse_atol, t->lse_rtol, g, t->c,
                 v->e_lse_lp_max);
    }
    pass_unless_failed(v, REP_H5);
}

/* Bitwise, so -0.0 vs 0.0 and differing NaN payloads count as differences. dv 0: an LSE. */
static void compare_bits(const rep_inputs *in, const float *a, const float *b, size_t n,
                         size_t dv, const char *what, rep_verdict *v)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t x, y;
        memcpy(&x, &a[i], sizeof x);
        memcpy(&y, &b[i], sizeof y);
        if (x != y) {
            fail(v, REP_H7, "%s differs from the rerun at %s (0x%08x vs 0x%08x)", what,
                 dv ? at(in, i / dv, (long)(i % dv)).s : at(in, i, -1).s, (unsigned)x,
                 (unsigned)y);
            return;
        }
    }
}

static void gate_h7(const rep_inputs *in, rep_verdict *v)
{
    if (!in->o_rerun)
        return;
    compare_bits(in, in->o, in->o_rerun, in->rows * in->dv, in->dv, "O", v);
    if (in->lse_rerun)
        compare_bits(in, in->lse, in->lse_rerun, in->rows, 0, "LSE", v);
    pass_unless_failed(v, REP_H7);
}

static void soft_signals(const rep_tol *t, rep_verdict *v)
{
    v->s1 = safe_ratio(v->mean_err, v->e_lp_mean);
    v->s2 = safe_ratio(v->rmse, v->rmse_lp);
    v->s1_flag = !(v->s1 <= t->s1_max);
    v->s2_flag = !(v->s2 <= t->s2_max);
}

fc_status rep_evaluate(const rep_inputs *in, rep_verdict *v, fc_err *err)
{
    rep_tol t = {0};
    size_t n;
    memset(v, 0, sizeof *v);
    v->first_fail = -1;
    if (!in)
        return fc_errf(err, FC_EINVAL, "evaluate: no inputs");
    fc_status st = rep_tol_for(in->dtype, &t, err);
    if (st != FC_OK)
        return st;
    if (fc_mul_size(in->rows, in->dv, &n) || n > SIZE_MAX / sizeof(double))
        return fc_errf(err, FC_EINVAL, "evaluate: %zu rows x %zu cols overflows", in->rows,
                       in->dv);
    st = check_inputs(in, n, err);
    if (st != FC_OK)
        return st;

    v->dtype = in->dtype;
    v->lse_dtype = in->lse_dtype;
    v->rows = in->rows;
    v->dv = in->dv;
    v->c = t.c; /* H5's multiple of e_lse_lp_max too, whether or not H1 runs */
    lp_rows s;
    st = lp_select(in, v, &s, err);
    if (st != FC_OK)
        return st;
    /* docs/tolerance.md "Outside the contract": no baseline holds some row (it overflowed, or
     * its error is of the order of the output), so H1 and H2 (and the soft signals) have no
     * scale and are not run; the gates that need no baseline still are (H3 on O over the
     * elements the baseline held, on the LSE and H5 over every row), and a failure there fails
     * the case. */
    v->unscaled = s.unheld;
    if (s.unheld && isinf(s.uerr))
        fc_fmt(v->outside_why, sizeof v->outside_why,
               "outside-contract: the %s baseline is %g at %s where %s is %g (the scores "
               "overflow it)%s: H1 and H2 have no scale", fc_dtype_name(in->dtype), s.ulp,
               at(in, s.ur, s.uj).s, s.uj < 0 ? "LSE_gold" : "O_gold", s.ug,
               in->o_lp32s ? " and the float32-score one drowns there" : "");
    else if (s.unheld)
        fc_fmt(v->outside_why, sizeof v->outside_why,
               "outside-contract: the %s baseline's error at %s is %.3g times 1/8 of max|O_gold| "
               "%.3g (or of log(9/8) in LSE)%s: H1 and H2 would not tell a right output from a "
               "wrong one", fc_dtype_name(in->dtype), at(in, s.ur, s.uj).s, s.uerr, s.scale,
               in->o_lp32s ? ", and the float32-score baseline's too" : "");
    gate_h6(in, v);
    gate_h3(in, &s, v);
    gate_h4(in, &t, v);
    if (!v->unscaled) {
        measure(in, &s, &t, v);
        gate_h1(in, &t, v);
        if (!in->designed)
            gate_h2(&t, v);
        soft_signals(&t, v);
    }
    gate_h5(in, &t, v);
    gate_h7(in, v);

    v->pass = 1;
    for (int g = 0; g < REP_NGATES; g++)
        if (v->gate[g] == REP_FAIL) {
            v->pass = 0;
            if (v->first_fail < 0)
                v->first_fail = g;
        }
    if (v->unscaled && v->pass) {
        v->pass = 0;
        v->outside = 1;
    }
    free(s.pick);
    return FC_OK;
}

const char *rep_verdict_reason(const rep_verdict *v)
{
    return v->outside ? v->outside_why : v->first_fail >= 0 ? v->why[v->first_fail] : "pass";
}

int rep_fails_on_bounds(const rep_verdict *v)
{
    if (v->pass || v->first_fail < 0)
        return 0;
    for (int g = 0; g < REP_NGATES; g++)
        if (v->gate[g] == REP_FAIL && g != REP_H1 && g != REP_H2 && g != REP_H5)
            return 0;
    return 1;
}
