/*
 * test_xmask_bits.c - the explicit mask and bias (docs/semantics.md section 8): an explicit mask
 * equal to a family's gives the family's bits in every reference variant; shapes and bias values
 * are refused with one line; the budget counts the terms and names them.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fixtures/fix.h"
#include "masks/problem.h"
#include "ref/ref.h"
#include "tests/test_xmask.h"

/* ---- an explicit mask equal to a family's gives the family's bits ---- */

/* Every output of every variant, as raw bytes: f64 O and LSE, f32, the float16 baseline, the
 * bfloat16 float32-score baseline, and the float64 oracle on a selection of tokens. */
typedef struct bits_out {
    uint8_t *buf;
    size_t n;
} bits_out;

static bits_out all_outputs(const attn_problem *p, const xrun *r)
{
    size_t no = attn_o_elems(p), nl = attn_lse_elems(p), lq = (size_t)p->seq.lq;
    int32_t tq[64], nt = 0;
    for (int32_t t = 0; t < p->seq.lq && nt < 64; t += 7) /* spread over several panels */
        tq[nt++] = t;
    ref_tokens tok = {tq, nt};
    size_t nat = no / lq * (size_t)nt, nlat = nl / lq * (size_t)nt;
    size_t n32 = (3 * (no + nl) + 1) / 2 * 2; /* the floats, padded so the doubles align */
    size_t n = (no + nl) * 8 + n32 * 4 + (nat + nlat) * 8;
    bits_out b = {calloc(n + 1, 1), n};
    cr_assert(b.buf);
    double *o64 = (double *)b.buf, *l64 = o64 + no;
    float *o32 = (float *)(l64 + nl), *l32 = o32 + no, *o16 = l32 + nl, *l16 = o16 + no;
    float *ob = l16 + nl, *lb = ob + no;
    double *oat = (double *)(o32 + n32), *lat = oat + nat;
    fc_err err = {{0}};
    cr_assert_eq(ref_attention_f64(p, r->q, r->k, r->v, o64, l64, &err), FC_OK, "%s", err.msg);
    cr_assert_eq(ref_attention_f32(p, r->q, r->k, r->v, o32, l32, &err), FC_OK, "%s", err.msg);
    cr_assert_eq(ref_attention_lp(p, FC_F16, r->q, r->k, r->v, o16, l16, &err), FC_OK, "%s",
                 err.msg);
    cr_assert_eq(ref_attention_lp32s(p, FC_BF16, r->q, r->k, r->v, ob, lb, &err), FC_OK, "%s",
                 err.msg);
    /* q rows of the selection, compact */
    float *qs = malloc(nat / (size_t)p->dv * (size_t)p->d * sizeof *qs + 1);
    cr_assert(qs);
    for (size_t bh = 0; bh < no / lq / (size_t)p->dv; bh++)
        for (int32_t i = 0; i < nt; i++)
            memcpy(qs + (bh * (size_t)nt + (size_t)i) * (size_t)p->d,
                   r->q + (bh * lq + (size_t)tq[i]) * (size_t)p->d, (size_t)p->d * sizeof *qs);
    cr_assert_eq(ref_attention_f64_at(p, &tok, qs, r->k, r->v, oat, lat, &err), FC_OK, "%s",
                 err.msg);
    free(qs);
    return b;
}

static const xcase family_cases[] = {
    {.name = "causal, two panels", .batch = 2, .hq = 4, .hkv = 2, .lq = 150, .lk = 150, .d = 16,
     .dv = 8, .fam = {.causal = 1}},
    {.name = "causal window 20, decode-like", .batch = 1, .hq = 2, .hkv = 1, .lq = 40, .lk = 200,
     .d = 8, .dv = 8, .fam = {.causal = 1, .sliding_window = 20}, .sinks = 1},
    /* tokens 7 apart over 600 under a window of 20: the selection's panels split (ref.h) */
    {.name = "causal window 20, a long selection", .batch = 1, .hq = 2, .hkv = 1, .lq = 600,
     .lk = 600, .d = 8, .dv = 4, .fam = {.causal = 1, .sliding_window = 20}},
    {.name = "bidirectional window 9", .batch = 2, .hq = 2, .hkv = 2, .lq = 140, .lk = 140,
     .d = 8, .dv = 4, .fam = {.sliding_window = 9}},
    {.name = "causal chunk 32, soft-cap, sinks", .batch = 1, .hq = 4, .hkv = 1, .lq = 160,
     .lk = 160, .d = 16, .dv = 16, .fam = {.causal = 1, .chunk_size = 32}, .softcap = 3.0,
     .sinks = 1},
    {.name = "chunk 16, Lq > Lk", .batch = 2, .hq = 2, .hkv = 1, .lq = 70, .lk = 50, .d = 8,
     .dv = 8, .fam = {.chunk_size = 16}, .softcap = 1.5},
    {.name = "packed causal window 6", .batch = 1, .hq = 2, .hkv = 1, .d = 8, .dv = 4,
     .fam = {.causal = 1, .sliding_window = 6}, .sinks = 1, .nseq = 3, .cu_q = {0, 30, 30, 75},
     .cu_k = {0, 40, 52, 100}},
};

/* The family's grid as the dense mask [bm, hm, Lq, Lk] (every slice the same). */
static void family_grid(xrun *r, int32_t bm, int32_t hm, mask_params fam)
{
    uint8_t *m = dense_mask(r, bm, hm);
    seq_view v = seq_info_view(&r->p.seq);
    int32_t lq = r->p.seq.lq, lk = r->p.seq.lk;
    for (int32_t s = 0; s < bm * hm; s++)
        for (int32_t q = 0; q < lq; q++)
            for (int32_t k = 0; k < lk; k++)
                m[((size_t)s * lq + q) * lk + k] = (uint8_t)mask_pair_allowed(fam, v, q, k);
    pack(r);
}

/* The families with an explicit mask of their own grid (broadcast and per head), an all-ones
 * mask per (batch entry, head), and the mask_mod case (no family, the family's grid as the
 * explicit mask, broadcast and per slice): every output of every variant bitwise the family's.
 * The hull, the spans and so every product are the family's (ref_internal.h). And one bit off
 * changes the oracle: the comparison can see a single pair. */
Test(xmask_bitwise, an_explicit_mask_equal_to_a_family_gives_the_family_bits)
{
    for (size_t ci = 0; ci < sizeof family_cases / sizeof *family_cases; ci++) {
        const xcase *c = &family_cases[ci];
        xrun r;
        setup(c, 10 + ci, &r);
        int32_t bm = r.p.seq.batch, hm = r.p.hq;
        bits_out want = all_outputs(&r.p, &r);
        const struct {
            const char *what;
            int family;     /* the families stay on */
            int32_t bm, hm; /* the mask's broadcast */
            int ones;       /* all ones rather than the family's grid */
        } vars[] = {
            {"family AND its own grid, broadcast", 1, 1, 1, 0},
            {"family AND its own grid per head", 1, 1, hm, 0},
            {"family AND all ones per (b, h)", 1, bm, hm, 1},
            {"mask_mod: the grid alone, broadcast", 0, 1, 1, 0},
            {"mask_mod: the grid alone per (b, h)", 0, bm, hm, 0},
            {"mask_mod: the grid alone per batch entry", 0, bm, 1, 0},
        };
        for (size_t vi = 0; vi < sizeof vars / sizeof *vars; vi++) {
            family_grid(&r, vars[vi].bm, vars[vi].hm, vars[vi].ones ? (mask_params){0} : c->fam);
            r.p.mask = vars[vi].family ? c->fam : (mask_params){0};
            bits_out got = all_outputs(&r.p, &r);
            cr_assert_eq(got.n, want.n);
            cr_assert(memcmp(got.buf, want.buf, want.n) == 0, "%s, %s: not the family's bits",
                          c->name, vars[vi].what);
            free(got.buf);
        }
        /* one allowed pair of the last slice's last non-empty row taken away: different bits */
        size_t cells = (size_t)bm * r.p.seq.lq * r.p.seq.lk, i = cells;
        while (i > 0 && !r.dense[i - 1])
            i--;
        cr_assert(i > 0, "%s: the family allows some pair", c->name);
        r.dense[i - 1] = 0;
        pack(&r);
        bits_out got = all_outputs(&r.p, &r);
        cr_assert(memcmp(got.buf, want.buf, want.n) != 0, "%s: a pair fewer, the same bits",
                  c->name);
        free(got.buf);
        free(want.buf);
        drop(&r);
    }
}

/* ---- validation and budgets ---- */

static void refused(const attn_problem *p, const char *want)
{
    fc_err err = {{0}};
    cr_assert_eq(attn_problem_check(p, &err), FC_EINVAL, "want a refusal naming \"%s\"", want);
    cr_assert(strstr(err.msg, want), "message \"%s\" lacks \"%s\"", err.msg, want);
    cr_assert(!strchr(err.msg, '\n'), "one line: \"%s\"", err.msg);
    float in[1] = {0};
    double out[1];
    cr_assert_eq(ref_attention_f64(p, in, in, in, out, NULL, &err), FC_EINVAL);
}

Test(xmask_check, inconsistent_shapes_and_bad_bias_values_are_refused_in_one_line)
{
    const xcase c = {.name = "check", .batch = 2, .hq = 4, .hkv = 2, .lq = 5, .lk = 9, .d = 4,
                     .dv = 4};
    xrun r;
    setup(&c, 31, &r);
    fc_err err = {{0}};
    dense_mask(&r, 2, 4);
    pack(&r);
    bias_of(&r, 1, 4);
    cr_assert_eq(attn_problem_check(&r.p, &err), FC_OK, "%s", err.msg);
    attn_problem p = r.p;
    p.xmask.bm = 3;
    refused(&p, "explicit mask: Bm = 3: must be 1 (one for every batch entry) or B = 2");
    p = r.p;
    p.xmask.hm = 2;
    refused(&p, "explicit mask: Hm = 2: must be 1 (one for every head) or Hq = 4");
    p = r.p;
    p.xmask.lq = 6;
    refused(&p, "explicit mask: its grid is Lq x Lk = 6 x 9, the problem's 5 x 9");
    p = r.p;
    p.xbias.hm = 2; /* the kv heads' count is no broadcast */
    refused(&p, "explicit bias: Hm = 2");
    p = r.p;
    p.xbias.lk = 8;
    refused(&p, "explicit bias: its grid is Lq x Lk = 5 x 8");
    r.bias[at(1, 4, 5, 9, 0, 2, 3, 6)] = NAN;
    refused(&r.p, "explicit bias at (b, h, q, k) = (0, 2, 3, 6) is nan");
    r.bias[at(1, 4, 5, 9, 0, 2, 3, 6)] = -2e6f;
    refused(&r.p, "is -2e+06: must be finite with |bias| <= 1e+06");
    r.bias[at(1, 4, 5, 9, 0, 2, 3, 6)] = -1e6f; /* the bound itself is fine */
    cr_assert_eq(attn_problem_check(&r.p, &err), FC_OK, "%s", err.msg);
    /* off: the dims are not read */
    p = r.p;
    p.xmask = (attn_xmask){NULL, -5, 0, 1, 1};
    p.xbias = (attn_xbias){NULL, 7, 7, 7, 7};
    cr_assert_eq(attn_problem_check(&p, &err), FC_OK, "%s", err.msg);
    drop(&r);
}

/* The estimate counts the packed mask's Bm Hm Lq ceil(Lk/8) bytes and the bias's 4 Bm Hm Lq Lk,
 * and one more operation a pair for them; a 32k x 32k per-head bias (128 GiB) is refused by the
 * default budget from its dims alone (no value is read: the pointer is a dummy), the refusal
 * naming it. */
Test(xmask_budget, the_terms_bytes_are_counted_and_a_32k_per_head_bias_is_refused_by_name)
{
    const xcase c = {.name = "cost", .batch = 2, .hq = 4, .hkv = 2, .lq = 50, .lk = 61, .d = 16,
                     .dv = 8, .fam = {.causal = 1}};
    xrun r;
    setup(&c, 41, &r);
    attn_cost base = attn_case_cost(&r.p, 16, 16);
    cr_assert_eq(base.explicit_bytes, 0);
    dense_mask(&r, 2, 4);
    pack(&r);
    attn_cost with = attn_case_cost(&r.p, 16, 16);
    cr_assert_eq(with.explicit_bytes, (uint64_t)2 * 4 * 50 * 8);
    cr_assert_eq(with.bytes - base.bytes, with.explicit_bytes);
    cr_assert_eq(with.work, base.work / (16 + 8) * (16 + 8 + 1));
    bias_of(&r, 1, 4);
    attn_cost both = attn_case_cost(&r.p, 16, 16);
    cr_assert_eq(both.explicit_bytes, (uint64_t)2 * 4 * 50 * 8 + (uint64_t)4 * 50 * 61 * 4);
    cr_assert_eq(both.bytes - base.bytes, both.explicit_bytes);
    drop(&r);

    attn_problem big = {.hq = 32, .hkv = 8, .d = 128, .dv = 128, .scale = 0.125,
                        .mask = {.causal = 1}};
    fc_err err = {{0}};
    cr_assert_eq(seq_init_dense(&big.seq, 1, 32768, 32768, &err), FC_OK);
    float dummy = 0;
    big.xbias = (attn_xbias){&dummy, 1, 32, 32768, 32768};
    attn_cost bc = attn_case_cost(&big, 128, 128);
    cr_assert_eq(bc.explicit_bytes, (uint64_t)1 << 37);
    cr_assert_eq(fix_budget_check(&big, 128, 128, NULL, "f.h5", "", &err), FC_EINVAL);
    cr_assert(strstr(err.msg, "the explicit bias [1, 32, 32768, 32768] (float32) 128 GiB"),
              "%s", err.msg);
    uint8_t dummy_bits = 0;
    big.xmask = (attn_xmask){&dummy_bits, 1, 32, 32768, 32768};
    bc = attn_case_cost(&big, 128, 128);
    cr_assert_eq(bc.explicit_bytes, ((uint64_t)1 << 37) + ((uint64_t)1 << 32));
    cr_assert_eq(fix_budget_check(&big, 128, 128, NULL, "f.h5", "", &err), FC_EINVAL);
    cr_assert(strstr(err.msg, "the explicit mask [1, 32, 32768, 32768] (bit-packed) 4 GiB and "
                              "the explicit bias"), "%s", err.msg);
    attn_problem_free(&big);
}
