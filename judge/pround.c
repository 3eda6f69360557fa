/*
 * pround.c - p-round's rule (judge/exact.h): is the output of a designed case (ci/checks/pround.c
 * builds them; `export` writes them as "<dtype>@design") what a kernel that rounds P to the input
 * type before P.V computes? Shared by the gate's p-round check and `check`'s judging of a
 * producer's output on an exported design.
 *
 * The design (ci/checks/pround.c says how it is built): scale 1; Q = e0 on every row; K[tk][0] the
 * score; every 16th key token scores 0, the largest score; the other scores make p = exp(s) lie
 * 0.40-0.48 or 0.52-0.60 of a dtype ulp past the grid point below it, far from every rounding
 * midpoint; V[tk][0] = +-1 so that every rounding error adds up in column 0. A row is checked
 * only when its allowed range starts at a multiple of 16 (the running max is then 0 from the
 * first group on whatever the order). For such a row the float64 contract value
 * Oc = sum rnd(p) V / sum p and the unrounded value Ou = sum p V / sum p are computed; an element
 * is checked when |Oc - Ou| >= 4 * slack, where slack bounds a correct fp32 kernel's distance to
 * Oc (worst-case accumulation error with unit 2^-23, which also covers truncating tensor-core
 * adds; l summed from rounded or unrounded P; expf; one output ulp), and it passes when
 * |O - Oc| <= slack. The rule fails if no element can be checked. That is the tiled kernels'
 * rounding; the eager path's (the normalised P rounded) is judged the same way as a second model,
 * and an output passes by either one (pr_judge).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/lowp.h"
#include "judge/exact.h"

/* One of the contract's roundings judged over a designed output: the elements that tell it
 * from unrounded P, and whether the output is within slack at every one of them. */
typedef struct pr_model {
    size_t checked;
    int ok;
} pr_model;

/* -1: this element cannot tell the model from unrounded P; else whether the output misses it
 * (1) or is within slack of it (0). */
static int pr_model_see(pr_model *m, double want, double slack, double ou, double got)
{
    if (!(fabs(want - ou) >= 4 * slack))
        return -1;
    m->checked++;
    int miss = !(fabs(got - want) <= slack);
    m->ok &= !miss;
    return miss;
}

/* Judges the designed run's output o; 1 pass, 0 fail (msg says why). scratch: 4 Lk values.
 * docs/tolerance.md accepts either of FlexAttention's roundings, and a kernel uses one of them
 * throughout, so each is a model judged on its own: the tiled kernels' (the unnormalised
 * p = exp(s - m) rounded, divided by the fp32 sum at the end: Oc = sum rnd(p) V / sum p) and
 * the eager path's (the normalised P rounded: Oe = sum rnd(p / l) V). The output passes when it
 * is within slack of one model at every element that tells that model from unrounded P (and
 * there is such an element). The designed scores keep rnd(p) clear of every rounding midpoint;
 * rnd(p / l) is not designed, so a key whose p / l lies within fp32's error of a midpoint may
 * round either way: the slack takes both. */
static int pr_judge(const judge_case *jc, const float *o, double *scratch, char *msg, size_t cap)
{
    const attn_problem *p = jc->prob;
    const float *k = jc->k, *v = jc->v;
    double *pk = scratch, *pr = pk + p->seq.lk, *pe = pr + p->seq.lk, *pa = pe + p->seq.lk;
    seq_view sv = seq_info_view(&p->seq);
    const double unit = 0x1p-23;
    pr_model tiled = {0, 1}, eager = {0, 1};
    msg[0] = 0;
    for (int32_t b = 0; b < p->seq.batch; b++)
        for (int32_t h = 0; h < p->hq; h++) {
            size_t bh = (size_t)b * p->hkv + h / (p->hq / p->hkv);
            const float *vb = v + bh * p->seq.lk * p->dv;
            for (int32_t tk = 0; tk < p->seq.lk; tk++) { /* p = exp(s - 0) and rnd(p) per key */
                pk[tk] = exp((double)k[(bh * p->seq.lk + tk) * p->d]);
                pr[tk] = fc_round((float)pk[tk], jc->dtype);
            }
            for (int32_t tq = 0; tq < p->seq.lq; tq++) {
                int32_t lo, hi;
                mask_token_range(p->mask, sv, tq, &lo, &hi);
                if (lo >= hi || lo % JUDGE_PROUND_GROUP)
                    continue; /* empty, or the running max could start below 0 */
                size_t row = ((size_t)b * p->hq + h) * p->seq.lq + tq;
                double l = 0.0, lr = 0.0, n = hi - lo;
                for (int32_t tk = lo; tk < hi; tk++) {
                    l += pk[tk];
                    lr += pr[tk];
                }
                /* The eager P: rnd(p / l), and how far it may move (pa) where the kernel's
                 * fp32 p / l (its sum, its exp) could fall on either side of a midpoint. */
                double gamma = (n + 4) * unit / (1 - (n + 4) * unit), rel = gamma + 0x1p-20;
                for (int32_t tk = lo; tk < hi; tk++) {
                    double x = pk[tk] / l;
                    float dn = fc_round((float)(x * (1 - rel)), jc->dtype);
                    float up = fc_round((float)(x * (1 + rel)), jc->dtype);
                    pe[tk] = fc_round((float)x, jc->dtype);
                    pa[tk] = (double)up - (double)dn;
                }
                for (int32_t c = 0; c < p->dv; c++) {
                    double nc = 0.0, nu = 0.0, abs_sum = 0.0, ne = 0.0, abs_e = 0.0, amb = 0.0;
                    for (int32_t tk = lo; tk < hi; tk++) {
                        double vk = vb[(size_t)tk * p->dv + c];
                        nc += pr[tk] * vk;
                        nu += pk[tk] * vk;
                        abs_sum += fabs(pr[tk] * vk);
                        ne += pe[tk] * vk;
                        abs_e += fabs(pe[tk] * vk);
                        amb += pa[tk] * fabs(vk);
                    }
                    double oc = nc / l, ou = nu / l;
                    double nb = gamma * (abs_sum / l + 2 * fabs(oc)) +
                                fabs(oc) * (0x1p-20 + fabs(lr - l) / l);
                    double slack = nb + fc_ulp(fabs(oc) + nb, jc->dtype);
                    double eb = gamma * abs_e + amb;
                    double eslack = eb + fc_ulp(fabs(ne) + eb, jc->dtype);
                    double got = o[row * p->dv + c];
                    int mc = pr_model_see(&tiled, oc, slack, ou, got);
                    int me = pr_model_see(&eager, ne, eslack, ou, got);
                    /* some rounding can be told here and the output matches none: say where */
                    if (!msg[0] && (mc == 1 || me == 1) && mc != 0 && me != 0) {
                        char at[112];
                        attn_row_where(at, sizeof at, p, row, c);
                        fc_fmt(msg, cap, "%s keys [%d,%d): output %.6g; P rounded to %s "
                               "gives %.6g (+-%.2g) tiled, %.6g (+-%.2g) eager; in fp32 %.6g: "
                               "P is not rounded before P.V", at, (int)lo, (int)hi, got,
                               fc_dtype_name(jc->dtype), oc, slack, ne, eslack, ou);
                    }
                }
            }
        }
    if (tiled.checked == 0 && eager.checked == 0) {
        fc_fmt(msg, cap, "no output element can tell rounded from unrounded P (rows need an "
               "allowed range starting at a multiple of %d and some tens of keys)", JUDGE_PROUND_GROUP);
        return 0;
    }
    if ((tiled.checked && tiled.ok) || (eager.checked && eager.ok))
        return 1;
    if (!msg[0]) /* every element matched one rounding, but no rounding every element */
        fc_fmt(msg, cap, "the output follows FlexAttention's tiled rounding of P at some "
               "elements and its eager rounding at others (%zu and %zu elements tell them from "
               "unrounded P): no one rounding of P to %s explains it", tiled.checked,
               eager.checked, fc_dtype_name(jc->dtype));
    return 0;
}

int judge_pround(const judge_case *jc, const float *o, char *msg, size_t cap)
{
    /* The rule models scores s = K[.][0] (Q = e0, scale 1, no terms): a case built otherwise
     * is not a design, and judging an output by a model of other inputs would blame it. */
    const attn_problem *p = jc->prob;
    if (p->scale != 1.0 || terms_used(&p->terms) || (jc->dtype != FC_F16 && jc->dtype != FC_BF16)) {
        fc_fmt(msg, cap, "not a designed p-round case: it needs float16 or bfloat16, scale 1 "
               "and no score terms");
        return -2;
    }
    size_t nq = (size_t)p->seq.batch * (size_t)p->hq * (size_t)p->seq.lq;
    for (size_t i = 0; i < nq * (size_t)p->d; i++)
        if (jc->q[i] != (i % (size_t)p->d == 0 ? 1.0f : 0.0f)) {
            fc_fmt(msg, cap, "not a designed p-round case: q row %zu is not (1, 0, ..., 0)",
                   i / (size_t)p->d);
            return -2;
        }
    size_t lk = (size_t)jc->prob->seq.lk;
    double *pk = malloc(sizeof(double) * (4 * lk + 1));
    if (!pk) {
        fc_fmt(msg, cap, "out of memory for the p-round check");
        return -1;
    }
    int r = pr_judge(jc, o, pk, msg, cap);
    free(pk);
    return r;
}
