/*
 * test_xmask.c - the explicit mask and bias (masks/xterms.h, docs/semantics.md section 8) in the
 * references: prefix-LM, ALiBi with a soft-cap, random per-head masks with empty rows and a
 * packed batch, each against a brute force written from the page (a triple loop over a dense
 * boolean mask and the bias, in long double, reading nothing of ref/); masked keys cannot leak;
 * the float32 softmax's loops weigh a refused key exactly 0. tests/test_xmask_bits.c holds the
 * bitwise family equality, the refusals and the budget.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "masks/problem.h"
#include "ref/ref.h"
#include "ref/ref_internal.h"
#include "tests/test_xmask.h"

/* ---- the brute force: section 8 as written, over the dense mask (r->dense, NULL: none) ---- */

typedef struct brute {
    long double *o, *lse;
    double smax, vmax; /* largest |score| of an allowed pair (bias included) and |sink|; |v| */
    uint8_t *empty;
} brute;

static brute brute_force(const xrun *r)
{
    const attn_problem *p = &r->p;
    const int32_t lq = p->seq.lq, lk = p->seq.lk, d = p->d, dv = p->dv;
    const attn_xmask *xm = &p->xmask;
    const attn_xbias *xb = &p->xbias;
    seq_view view = seq_info_view(&p->seq);
    brute w = {malloc((attn_o_elems(p) + 1) * sizeof(long double)),
               malloc((attn_lse_elems(p) + 1) * sizeof(long double)), 0, 0,
               calloc(attn_lse_elems(p) + 1, 1)};
    long double *s = malloc(((size_t)lk + 1) * sizeof *s);
    uint8_t *ok = malloc((size_t)lk + 1);
    cr_assert(w.o && w.lse && w.empty && s && ok);
    for (size_t i = 0; i < attn_v_elems(p); i++)
        w.vmax = fmax(w.vmax, fabs(r->v[i]));
    for (int32_t b = 0; b < p->seq.batch; b++)
        for (int32_t h = 0; h < p->hq; h++)
            for (int32_t i = 0; i < lq; i++) {
                size_t row = ((size_t)b * p->hq + h) * lq + i;
                size_t kv = ((size_t)b * p->hkv + h / (p->hq / p->hkv)) * lk;
                long double sink = p->terms.sinks ? p->terms.sinks[h] : -INFINITY;
                long double mx = sink, sum, c = p->terms.softcap;
                int any = 0;
                for (int32_t j = 0; j < lk; j++) {
                    ok[j] = mask_pair_allowed(p->mask, view, i, j) &&
                            (!r->dense || r->dense[at(xm->bm, xm->hm, lq, lk, b, h, i, j)]);
                    if (!ok[j])
                        continue;
                    long double dot = 0;
                    for (int32_t x = 0; x < d; x++)
                        dot += (long double)r->q[row * d + x] * r->k[(kv + j) * d + x];
                    s[j] = (long double)p->scale * dot;
                    if (c > 0)
                        s[j] = c * tanhl(s[j] / c);
                    if (xb->vals) /* after the cap */
                        s[j] += xb->vals[at(xb->bm, xb->hm, lq, lk, b, h, i, j)];
                    mx = s[j] > mx ? s[j] : mx;
                    w.smax = fmax(w.smax, fabs((double)s[j]));
                    any = 1;
                }
                if (isfinite((double)sink))
                    w.smax = fmax(w.smax, fabs((double)sink));
                long double *o = w.o + row * dv;
                for (int32_t x = 0; x < dv; x++)
                    o[x] = 0;
                if (!any) {
                    w.lse[row] = sink;
                    w.empty[row] = 1;
                    continue;
                }
                sum = expl(sink - mx);
                for (int32_t j = 0; j < lk; j++)
                    sum += ok[j] ? expl(s[j] - mx) : 0;
                for (int32_t j = 0; j < lk; j++)
                    for (int32_t x = 0; ok[j] && x < dv; x++)
                        o[x] += expl(s[j] - mx) / sum * r->v[(kv + j) * dv + x];
                w.lse[row] = mx + logl(sum);
            }
    free(s);
    free(ok);
    return w;
}

static void free_brute(brute *w)
{
    free(w->o);
    free(w->lse);
    free(w->empty);
}

/*
 * The oracle's distance from the exact answer, u its unit roundoff (2^-53 for float64, 2^-24
 * for the float32 reference), D the head dim and n = Lk the most keys a row sums:
 *   a score: the D-term dot product, the scale, the cap and the bias add, each u relative:
 *     |ds| <= (D + 3) u smax;
 *   a probability p_j = e^(s_j - m) / sum: its own and the sum's score errors, exp's ulp and
 *     the n-term sum: |dp_j| <= (2 (D + 3) smax + n + 2) u p_j;
 *   O = sum p_j v_j, an n-term sum: |dO| <= (2 (D + 3) smax + 2 n + 2) u vmax;
 *   LSE = m + log(sum): |dLSE| <= ((D + 3) smax + n + 2) u (1 + |LSE|).
 * Worst-case bounds (the observed errors are far below: the terms' errors cancel), a few
 * hundred ulps at these sizes, about 1e-14 for float64: any explicit-mask or bias mistake moves
 * a row by a probability's share, 1e-3 or more.
 */
static double tol_o(const xrun *r, const brute *w, double u)
{
    return (2.0 * (r->p.d + 3) * w->smax + 2.0 * r->p.seq.lk + 2.0) * u * (1.0 + w->vmax);
}

static double tol_lse(const xrun *r, const brute *w, double u)
{
    return ((r->p.d + 3) * w->smax + r->p.seq.lk + 2.0) * u;
}

/* Empty rows exactly 0 and LSE the sink (-inf); the others within tolerance; only head only_h's
 * rows when it is >= 0. Returns how many rows were empty. */
static int check_rows(const char *name, const xrun *r, const brute *w, const double *o,
                      const double *lse, double u, int32_t only_h)
{
    const attn_problem *p = &r->p;
    double to = tol_o(r, w, u), tl = tol_lse(r, w, u);
    int empty = 0;
    for (size_t row = 0; row < attn_lse_elems(p); row++) {
        if (only_h >= 0 && (int32_t)(row / (size_t)p->seq.lq % (size_t)p->hq) != only_h)
            continue;
        const double *orow = o + row * p->dv;
        const long double *want = w->o + row * p->dv;
        if (w->empty[row]) {
            empty++;
            cr_assert(lse[row] == (double)w->lse[row], "%s: empty row %zu: lse %g, want %Lg",
                      name, row, lse[row], w->lse[row]);
            for (int32_t x = 0; x < p->dv; x++)
                cr_assert(orow[x] == 0.0, "%s: empty row %zu: out[%d] = %g", name, row, (int)x,
                          orow[x]);
            continue;
        }
        double el = fabs(lse[row] - (double)w->lse[row]);
        cr_assert(el <= tl * (1.0 + fabs((double)w->lse[row])),
                  "%s: row %zu lse %.17g, want %.17Lg (tol %g)", name, row, lse[row],
                  w->lse[row], tl);
        for (int32_t x = 0; x < p->dv; x++)
            cr_assert(fabs(orow[x] - (double)want[x]) <= to,
                      "%s: row %zu out[%d] = %.17g, want %.17Lg (tol %g)", name, row, (int)x,
                      orow[x], want[x], to);
    }
    return empty;
}

/* The float64 oracle and the float32 reference against the brute force; the float32
 * reference's outputs widened. Returns the empty rows' count. */
static int check_oracle(const char *name, const xrun *r)
{
    const attn_problem *p = &r->p;
    size_t no = attn_o_elems(p), nl = attn_lse_elems(p);
    double *o = malloc((no + 1) * sizeof *o), *lse = malloc((nl + 1) * sizeof *lse);
    float *o32 = malloc((no + 1) * sizeof *o32), *l32 = malloc((nl + 1) * sizeof *l32);
    cr_assert(o && lse && o32 && l32);
    fc_err err = {{0}};
    cr_assert_eq(ref_attention_f64(p, r->q, r->k, r->v, o, lse, &err), FC_OK, "%s: %s", name,
                 err.msg);
    brute w = brute_force(r);
    int empty = check_rows(name, r, &w, o, lse, 0x1p-53, -1);
    cr_assert_eq(ref_attention_f32(p, r->q, r->k, r->v, o32, l32, &err), FC_OK, "%s: %s", name,
                 err.msg);
    for (size_t i = 0; i < no; i++)
        o[i] = o32[i];
    for (size_t i = 0; i < nl; i++)
        lse[i] = l32[i];
    check_rows(name, r, &w, o, lse, 0x1p-24, -1);
    /* the float16 baseline and the bfloat16 float32-score one: the scores rounded (lp) or not,
     * P and O rounded. Their bound (tests/test_ref.c's): each probability moves by about |s| u
     * from the rounded scores and by u from P's rounding, O once more, doubled for room; the
     * bias, added in float32 after the rounding, is counted in smax, which only loosens it. */
    for (int lp = 0; lp < 2; lp++) {
        fc_dtype dt = lp ? FC_F16 : FC_BF16;
        double u = lp ? 0x1p-11 : 0x1p-8;
        fc_status st = lp ? ref_attention_lp(p, dt, r->q, r->k, r->v, o32, l32, &err)
                          : ref_attention_lp32s(p, dt, r->q, r->k, r->v, o32, l32, &err);
        cr_assert_eq(st, FC_OK, "%s: %s", name, err.msg);
        double to = (3.0 * w.smax + 3.0) * u * w.vmax * 2.0, tl = 3.0 * u * (1.0 + w.smax);
        for (size_t row = 0; row < nl; row++) {
            if (w.empty[row]) {
                cr_assert(l32[row] == (float)w.lse[row], "%s/%s: empty row %zu: lse %g", name,
                          fc_dtype_name(dt), row, l32[row]);
                continue;
            }
            cr_assert(fabs(l32[row] - (double)w.lse[row]) <= tl * (1.0 + fabs((double)w.lse[row])),
                      "%s/%s: row %zu lse %.9g, want %.9Lg", name, fc_dtype_name(dt), row,
                      l32[row], w.lse[row]);
            for (int32_t x = 0; x < p->dv; x++)
                cr_assert(fabs(o32[row * p->dv + x] - (double)w.o[row * p->dv + x]) <= to,
                          "%s/%s: row %zu out[%d] = %.9g, want %.9Lg (tol %g)", name,
                          fc_dtype_name(dt), row, (int)x, o32[row * p->dv + x],
                          w.o[row * p->dv + x], to);
        }
    }
    /* ref_row_f64 with the problem's own rule and predicate: the same rows */
    for (int32_t b = 0; b < p->seq.batch; b++)
        for (int32_t h = 0; h < p->hq; h++)
            for (int32_t i = 0; i < p->seq.lq; i++) {
                size_t row = ((size_t)b * p->hq + h) * p->seq.lq + i;
                size_t kv = ((size_t)b * p->hkv + h / (p->hq / p->hkv)) * p->seq.lk;
                ref_row_rule rule = ref_row_rule_at(p, b, h, i);
                ref_row_key key = {p, b, h, i};
                double ro[64], rl;
                cr_assert(p->dv <= 64);
                cr_assert_eq(ref_row_f64(r->q + row * p->d, r->k + kv * p->d,
                                         r->v + kv * p->dv, p->seq.lk, p->d, p->dv, &rule,
                                         ref_row_key_allows, &key, ro, &rl, &err), FC_OK);
                for (int32_t x = 0; x < p->dv; x++)
                    o[row * p->dv + x] = ro[x];
                lse[row] = rl;
            }
    check_rows(name, r, &w, o, lse, 0x1p-53, -1);
    free_brute(&w);
    free(o);
    free(lse);
    free(o32);
    free(l32);
    return empty;
}

/* ---- the layout ---- */

/* Key k is bit k % 8 of byte k / 8, least significant first; the bits past Lk are 0. And the
 * search functions the reference narrows spans with, on a row whose keys sit in two bytes. */
Test(xmask_layout, key_k_is_bit_k_mod_8_of_byte_k_div_8_least_significant_first)
{
    const uint8_t dense[2][11] = {{1, 0, 0, 0, 0, 0, 0, 1, 0, 1, 1},
                                  {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}};
    uint8_t bits[4];
    memset(bits, 0xAA, sizeof bits);
    attn_xmask_pack(&dense[0][0], 2, 11, bits);
    cr_assert_eq(bits[0], 0x81);
    cr_assert_eq(bits[1], 0x06);
    cr_assert_eq(bits[2], 0xFF);
    cr_assert_eq(bits[3], 0x07, "padding bits past Lk are 0, got 0x%02x", bits[3]);
    cr_assert_eq(xmask_row_bytes(11), 2);
    cr_assert_eq(xmask_row_bytes(16), 2);
    cr_assert_eq(xmask_row_bytes(0), 0);

    uint8_t row[5] = {0};
    row[21 >> 3] |= 1 << (21 & 7);
    row[33 >> 3] |= 1 << (33 & 7);
    cr_assert_eq(xmask_first(row, 0, 40), 21);
    cr_assert_eq(xmask_end(row, 0, 40), 34);
    cr_assert_eq(xmask_first(row, 22, 33), 33, "none in [22, 33): hi");
    cr_assert_eq(xmask_end(row, 22, 33), 22, "none in [22, 33): lo");
    cr_assert_eq(xmask_first(row, 22, 40), 33);
    cr_assert_eq(xmask_end(row, 0, 33), 22);
    cr_assert_eq(xmask_first(row, 0, 0), 0);
}

/* ---- explicit masks and biases against the brute force ---- */

/* Prefix-LM (bidirectional over the first P tokens, causal after), as a mask_mod with no family:
 * a prefix per batch entry (Bm = B: P = 13 and P = 0, which is plain causal), one for every head
 * (Hm = 1), GQA. */
Test(xmask_oracle, prefix_lm_per_batch_entry_matches_the_brute_force)
{
    const xcase c = {.name = "prefix-lm", .batch = 2, .hq = 4, .hkv = 2, .lq = 40, .lk = 40,
                     .d = 16, .dv = 8};
    xrun r;
    setup(&c, 1, &r);
    uint8_t *m = dense_mask(&r, 2, 1);
    const int32_t prefix[2] = {13, 0};
    for (int32_t b = 0; b < 2; b++)
        for (int32_t q = 0; q < 40; q++)
            for (int32_t k = 0; k < 40; k++)
                m[at(2, 1, 40, 40, b, 0, q, k)] = k < prefix[b] || k <= q;
    pack(&r);
    cr_assert_eq(check_oracle(c.name, &r), 0, "every prefix-LM row sees itself");
    drop(&r);
}

/* ALiBi on a causal family with a soft-cap and sinks: bias slope_h * (p_k - p_q) per head
 * (Hm = Hq, Bm = 1), Lq < Lk (bottom-right positions). The cap of 2 is far below the bias
 * (up to 20), so a bias added before the cap (or not at all) misses by whole units. */
Test(xmask_oracle, alibi_bias_after_the_soft_cap_matches_the_brute_force)
{
    const xcase c = {.name = "alibi", .batch = 1, .hq = 4, .hkv = 1, .lq = 24, .lk = 40,
                     .d = 16, .dv = 8, .fam = {.causal = 1}, .softcap = 2.0, .sinks = 1};
    xrun r;
    setup(&c, 2, &r);
    float *bias = bias_of(&r, 1, 4);
    for (int32_t h = 0; h < 4; h++) {
        double slope = ldexp(1.0, -(h + 1)); /* 2^-(8 (h + 1) / H) with H = 8 */
        for (int32_t q = 0; q < 24; q++)
            for (int32_t k = 0; k < 40; k++)
                bias[at(1, 4, 24, 40, 0, h, q, k)] = (float)(slope * (k - (q + 16)));
    }
    cr_assert_eq(check_oracle(c.name, &r), 0);
    drop(&r);
}

/* A random mask for every (batch entry, head) inside a bidirectional window, with rows left
 * empty on purpose (every 7th row of each slice, and what the window and the mask leave), and a
 * random bias shared by all; without sinks (empty rows: LSE -inf) and with (LSE the sink). */
Test(xmask_oracle, random_per_head_masks_with_empty_rows_match_the_brute_force)
{
    for (int sinks = 0; sinks < 2; sinks++) {
        const xcase c = {.name = sinks ? "random, sinks" : "random", .batch = 2, .hq = 4,
                         .hkv = 2, .lq = 30, .lk = 37, .d = 16, .dv = 8,
                         .fam = {.sliding_window = 12}, .sinks = sinks};
        xrun r;
        setup(&c, 3 + (uint64_t)sinks, &r);
        uint64_t seed = 77;
        uint8_t *m = dense_mask(&r, 2, 4);
        for (int32_t b = 0; b < 2; b++)
            for (int32_t h = 0; h < 4; h++)
                for (int32_t q = 0; q < 30; q++)
                    for (int32_t k = 0; k < 37; k++)
                        m[at(2, 4, 30, 37, b, h, q, k)] =
                            (q + b + h) % 7 != 3 && rng(&seed) % 5 < 3;
        pack(&r);
        float *bias = bias_of(&r, 1, 1);
        for (size_t i = 0; i < (size_t)30 * 37; i++)
            bias[i] = 2.0f * unif(&seed);
        int empty = check_oracle(c.name, &r);
        cr_assert(empty >= 2 * 4 * 4, "%s: %d empty rows, the mask empties at least 32", c.name,
                  empty);
        drop(&r);
    }
}

/* A packed batch: the mask's grid is the packed token axes, sequences still never see each
 * other whatever the mask says (it allows every cross-sequence pair here), a sequence with no
 * keys gives empty rows. Causal family, per-head mask and bias. */
Test(xmask_oracle, a_packed_batch_reads_the_packed_token_grid)
{
    const xcase c = {.name = "packed", .batch = 1, .hq = 2, .hkv = 1, .d = 8, .dv = 4,
                     .fam = {.causal = 1}, .nseq = 3, .cu_q = {0, 5, 9, 17},
                     .cu_k = {0, 9, 9, 26}};
    xrun r;
    setup(&c, 5, &r);
    uint64_t seed = 99;
    uint8_t *m = dense_mask(&r, 1, 2);
    float *bias = bias_of(&r, 1, 2);
    for (size_t i = 0; i < (size_t)2 * 17 * 26; i++) {
        m[i] = rng(&seed) % 4 != 0;
        bias[i] = unif(&seed);
    }
    pack(&r);
    int empty = check_oracle(c.name, &r);
    cr_assert(empty >= 2 * 4, "%s: %d empty rows, want the keyless sequence's 8", c.name, empty);
    drop(&r);
}

/* ---- masked keys never reach a row ---- */

/* Head 0's mask refuses key 7 inside its rows' spans (keys on both sides allowed), head 1's
 * allows it; the two heads share kv head 0, whose key 7 and value 7 are NaN. Head 0's rows stay
 * finite and equal to the brute force on every row (the gemm over the hull carries 0 * NaN into
 * them, the reference recomputes them from their allowed keys only); head 1's see the NaN. */
Test(xmask_poison, nan_at_a_key_the_mask_refuses_never_reaches_the_row)
{
    const xcase c = {.name = "poison", .batch = 1, .hq = 2, .hkv = 1, .lq = 20, .lk = 20,
                     .d = 8, .dv = 4};
    xrun r;
    setup(&c, 21, &r);
    uint8_t *m = dense_mask(&r, 1, 2);
    for (int32_t q = 0; q < 20; q++)
        m[at(1, 2, 20, 20, 0, 0, q, 7)] = 0;
    pack(&r);
    for (int32_t x = 0; x < 8; x++)
        r.k[7 * 8 + x] = NAN;
    for (int32_t x = 0; x < 4; x++)
        r.v[7 * 4 + x] = NAN;
    size_t no = attn_o_elems(&r.p), nl = attn_lse_elems(&r.p);
    double *o = malloc(no * sizeof *o), *lse = malloc(nl * sizeof *lse);
    float *o32 = malloc(no * sizeof *o32), *l32 = malloc(nl * sizeof *l32);
    cr_assert(o && lse && o32 && l32);
    fc_err err = {{0}};
    brute w = brute_force(&r); /* head 0 never reads key 7; head 1's rows are NaN there */
    cr_assert_eq(ref_attention_f64(&r.p, r.q, r.k, r.v, o, lse, &err), FC_OK, "%s", err.msg);
    check_rows("poison f64", &r, &w, o, lse, 0x1p-53, 0);
    for (size_t i = 20 * 4; i < no; i++)
        cr_assert(isnan(o[i]), "head 1 sees key 7: NaN, got %g at %zu", o[i], i);
    cr_assert_eq(ref_attention_f32(&r.p, r.q, r.k, r.v, o32, l32, &err), FC_OK, "%s", err.msg);
    for (size_t i = 0; i < no; i++)
        o[i] = o32[i];
    for (size_t i = 0; i < nl; i++)
        lse[i] = l32[i];
    check_rows("poison f32", &r, &w, o, lse, 0x1p-24, 0);
    free_brute(&w);
    free(o);
    free(lse);
    free(o32);
    free(l32);
    drop(&r);
}

/* The float32 softmax's loops (ref_vec.c), both paths, on a row whose refused keys the
 * reference set to -inf: the max ignores them, exp gives exactly 0 for them and the sum is the
 * other keys' alone (the kept keys' exps are each path's own, so the sum is compared with the
 * same path run on the kept keys only). */
Test(xmask_vec, refused_keys_at_minus_infinity_weigh_exactly_nothing_in_both_exp_paths)
{
    const ref_vec_ops *ops[2] = {ref_vec_ops_here(), ref_vec_ops_portable()};
    for (int i = 0; i < 2; i++) {
        float x[37], kept[37];
        int32_t nk = 0;
        for (int32_t j = 0; j < 37; j++) {
            x[j] = j % 3 == 1 ? -INFINITY : 0.25f * (float)(j % 11) - 1.0f;
            if (j % 3 != 1)
                kept[nk++] = x[j];
        }
        float mx = ops[i]->max(x, 37);
        cr_assert_eq(mx, ops[i]->max(kept, nk), "%s: max", ops[i]->name);
        float sum = ops[i]->exp_sum(x, 37, mx), want = ops[i]->exp_sum(kept, nk, mx);
        for (int32_t j = 1; j < 37; j += 3)
            cr_assert(x[j] == 0.0f, "%s: exp(-inf) at %d is %g", ops[i]->name, (int)j, x[j]);
        /* the same terms in other lanes: two orders of a 25-term positive sum differ by at
         * most 2 (n - 1) u of it */
        cr_assert(fabsf(sum - want) <= 48 * 0x1p-24f * want, "%s: sum %.9g, kept keys' %.9g",
                  ops[i]->name, sum, want);
    }
}
