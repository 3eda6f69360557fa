/*
 * repro.c - one case told in full (check/repro.h): `flexcheck repro`'s work, below the CLI.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/lowp.h"
#include "check/repro.h"
#include "diag/diag.h"
#include "judge/judge.h"
#include "masks/bmask.h"
#include "masks/xterms.h"
#include "ref/ref.h"
#include "reports/tol.h"

/* Where row index i = (b*Hq + h)*Lq + tq sits, with its sequence position. */
typedef struct coords {
    int32_t b, h, tq, seq, pq;
} coords;

/* row: of what c holds (a sample's rows are [B, Hq, n]). */
static coords coords_of(const fix_case *fc, size_t row)
{
    const attn_problem *p = &fc->prob;
    judge_case jc = fix_judge_case(fc);
    row = judge_full_row(&jc, row);
    coords c;
    c.tq = (int32_t)(row % (size_t)p->seq.lq);
    c.h = (int32_t)(row / (size_t)p->seq.lq % (size_t)p->hq);
    c.b = (int32_t)(row / ((size_t)p->seq.lq * p->hq));
    c.seq = seq_find(p->seq.cu_q, p->seq.nseq, c.tq);
    int32_t q0 = p->seq.cu_q[c.seq], nq = p->seq.cu_q[c.seq + 1] - q0;
    int32_t nk = p->seq.cu_k[c.seq + 1] - p->seq.cu_k[c.seq];
    c.pq = mask_q_pos(c.tq - q0, nq, nk);
    return c;
}

static void print_ids(FILE *out, const char *what, const int32_t *ids, int32_t n)
{
    fprintf(out, "    %-8s %d:", what, (int)n);
    for (int32_t j = 0; j < n && j < 64; j++)
        fprintf(out, " %d", (int)ids[j]);
    fprintf(out, "%s\n", n > 64 ? " ..." : "");
}

static void print_element(FILE *out, const fix_case *c, const float *o, size_t i)
{
    const attn_problem *p = &c->prob;
    coords co = coords_of(c, i / (size_t)p->dv);
    double e = fabs((double)o[i] - c->out[i]);
    fprintf(out, "  %4d %4d %7d %5zu %6d %9d  %14.7g  %14.7g  %10.3g\n", (int)co.b, (int)co.h,
            (int)co.tq, i % (size_t)p->dv, (int)co.seq, (int)co.pq, (double)o[i], c->out[i], e);
}

static void element_header(FILE *out)
{
    fprintf(out, "  %4s %4s %7s %5s %6s %9s  %14s  %14s  %10s\n", "b", "h", "q", "d", "seq", "p_q",
            "O", "O_gold", "err");
}

/* The row with the largest |O - O_gold| element (NaN the worst), after listing the `worst`
 * worst elements; (size_t)-1 when there are no elements. */
static size_t list_worst(FILE *out, const fix_case *c, const float *o, int worst)
{
    const attn_problem *p = &c->prob;
    judge_case jc = fix_judge_case(c);
    size_t no = judge_rows(&jc) * (size_t)p->dv, dv = (size_t)p->dv, row = (size_t)-1;
    size_t *idx = malloc(sizeof(size_t) * (size_t)worst);
    double *errv = malloc(sizeof(double) * (size_t)worst);
    int k = 0;
    if (!idx || !errv)
        goto done;
    for (size_t i = 0; i < no; i++) {
        double e = fabs((double)o[i] - c->out[i]);
        if (isnan(e))
            e = INFINITY;
        if (k < worst || e > errv[k - 1]) {
            int j = k < worst ? k++ : k - 1;
            while (j > 0 && errv[j - 1] < e) {
                errv[j] = errv[j - 1];
                idx[j] = idx[j - 1];
                j--;
            }
            errv[j] = e;
            idx[j] = i;
        }
    }
    fprintf(out, "\nworst elements (|O - O_gold|):\n");
    element_header(out);
    for (int j = 0; j < k; j++)
        print_element(out, c, o, idx[j]);
    if (k > 0)
        row = idx[0] / dv;
done:
    free(idx);
    free(errv);
    return row;
}

/* The row's allowed keys, told. The families' are one interval of tokens [lo, hi); an explicit
 * mask (docs/semantics.md section 8) keeps some of them, so its row is told as its runs of
 * allowed tokens (the first RUNS of them), and *lo, *hi become the first allowed token and one
 * past the last (equal when none is). */
#define RUNS 8
static void print_allowed(FILE *out, const fix_case *c, coords co, int32_t *lo, int32_t *hi)
{
    const attn_problem *p = &c->prob;
    int32_t k0 = p->seq.cu_k[co.seq];
    if (!p->xmask.bits) {
        if (*lo < *hi)
            fprintf(out, "  allowed keys: tokens [%d, %d) = positions [%d, %d], %d keys\n",
                    (int)*lo, (int)*hi, (int)(*lo - k0), (int)(*hi - 1 - k0), (int)(*hi - *lo));
        else
            fprintf(out, "  allowed keys: none (output must be 0, LSE -inf)\n");
        return;
    }
    const uint8_t *row = xmask_row(p->xmask, co.b, co.h, co.tq);
    int32_t fam_lo = *lo, fam_hi = *hi, first = fam_hi, last = fam_lo, n = 0, runs = 0;
    char text[RUNS * 28 + 8] = "";
    size_t len = 0;
    for (int32_t j = fam_lo; j < fam_hi;) {
        int32_t a = xmask_first(row, j, fam_hi);
        if (a == fam_hi)
            break;
        int32_t b = a;
        while (b < fam_hi && xmask_bit(row, b))
            b++;
        if (runs < RUNS)
            len += (size_t)snprintf(text + len, sizeof text - len, " [%d, %d)", (int)a, (int)b);
        else if (runs == RUNS)
            len += (size_t)snprintf(text + len, sizeof text - len, " ...");
        first = runs == 0 ? a : first;
        last = b;
        n += b - a;
        runs++;
        j = b;
    }
    if (n == 0) {
        fprintf(out, "  allowed keys: none (the explicit mask allows none of the families' %d; "
                "output must be 0, LSE -inf)\n", (int)(fam_hi - fam_lo));
        *lo = *hi = fam_lo;
        return;
    }
    fprintf(out, "  allowed keys: %d of the families' %d (explicit mask), tokens%s in %d run%s "
            "(sequence keys start at token %d)\n", (int)n, (int)(fam_hi - fam_lo), text, (int)runs,
            runs == 1 ? "" : "s", (int)k0);
    *lo = first;
    *hi = last;
}

/* One output row told in full: where it is, its allowed keys, its LSE, its query tile's block
 * lists; every element when the row was asked for (all_d). */
static void explain_row(FILE *out, const fix_case *c, const bmask *bm, const float *o,
                        const float *lse, size_t row, int all_d)
{
    const attn_problem *p = &c->prob;
    seq_view sv = seq_info_view(&p->seq);
    coords co = coords_of(c, row);
    int32_t lo, hi;
    mask_token_range(p->mask, sv, co.tq, &lo, &hi);
    fprintf(out, "\n%s row: b %d, h %d (kv head %d), q %d (sequence %d, position %d)\n",
            all_d ? "asked" : "worst", (int)co.b, (int)co.h, (int)(co.h / (p->hq / p->hkv)),
            (int)co.tq, (int)co.seq, (int)co.pq);
    if (all_d) {
        element_header(out);
        for (int32_t d = 0; d < p->dv && d < 64; d++)
            print_element(out, c, o, row * (size_t)p->dv + (size_t)d);
        if (p->dv > 64)
            fprintf(out, "  ... (%d more columns)\n", (int)(p->dv - 64));
    }
    print_allowed(out, c, co, &lo, &hi);
    if (lse)
        fprintf(out, "  LSE: tested %.9g, oracle %.9g, difference %.3g\n", (double)lse[row],
                c->lse[row], (double)lse[row] - c->lse[row]);
    else
        fprintf(out, "  LSE: none stored (oracle %.9g)\n", c->lse[row]);
    int32_t r = co.tq / bm->q_block_size;
    size_t br = bmask_row(bm, co.b % bm->nb, co.h % bm->nh, r);
    fprintf(out, "  query tile %d (tokens [%d, %d)), blocks of %d keys:\n", (int)r,
            (int)(r * bm->q_block_size), (int)((r + 1) * bm->q_block_size),
            (int)bm->kv_block_size);
    print_ids(out, "partial", bmask_ids(bm, 0, br), bm->kv_num_blocks[br]);
    print_ids(out, "full", bmask_ids(bm, 1, br), bm->full_kv_num_blocks[br]);
    if (lo < hi)
        fprintf(out, "    the row needs kv blocks %d..%d\n", (int)(lo / bm->kv_block_size),
                (int)((hi - 1) / bm->kv_block_size));
}

/* The row asked for (o->row_bhq) inside the problem, as a flat row index of what c holds (of a
 * sample: its query token must be one of the sample's); -1 and *err otherwise. */
static int asked_row(const chk_repro_opts *o, const fix_case *c, size_t *row, fc_err *err)
{
    const attn_problem *p = &c->prob;
    long long b = o->row_bhq[0], h = o->row_bhq[1], q = o->row_bhq[2];
    if (b < 0 || b >= p->seq.batch || h < 0 || h >= p->hq || q < 0 || q >= p->seq.lq)
        return fc_errf(err, FC_EINVAL, "--row %s: outside the case (B %d, Hq %d, Lq %d)", o->row,
                       (int)p->seq.batch, (int)p->hq, (int)p->seq.lq), -1;
    size_t per = (size_t)p->seq.lq, idx = (size_t)q;
    if (c->sample.tq) { /* its index among the sample's tokens */
        const int32_t *t = c->sample.tq;
        size_t lo = 0, hi = (size_t)c->sample.n;
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (t[mid] < q)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (lo == (size_t)c->sample.n || t[lo] != q)
            return fc_errf(err, FC_EINVAL, "--row %s: query token %lld is not in the sample "
                           "(--rows all judges every row)", o->row, q), -1;
        per = (size_t)c->sample.n;
        idx = lo;
    }
    *row = ((size_t)b * (size_t)p->hq + (size_t)h) * per + idx;
    return 0;
}

/* Every verdict rests on the stored out/lse, so they are confirmed first: our float64 oracle
 * recomputed from the inputs must reproduce them (as `check` does). */
static int confirm_oracle(const chk_repro_opts *o, const fix_case *c, fc_err *err)
{
    fix_check_result r;
    fc_err e;
    if (fix_check_case(c, FIX_BACKEND_REF, 0, &r, &e))
        return fc_errf(err, FC_EINVAL, "%s: case %s: %s", o->file, fc_esc(c->name).s, e.msg), -1;
    if (!r.oracle_ok)
        return fc_errf(err, FC_EINVAL, "%s: case %s: the stored out/lse are not the float64 "
                       "oracle of its inputs, so nothing can be judged against them: %s", o->file,
                       fc_esc(c->name).s, r.detail), -1;
    return 0;
}

/* Rounds the case's inputs to dt and recomputes its oracle (a rerun in another precision). */
static int change_dtype(fix_case *c, fc_dtype dt, fc_err *err)
{
    size_t n[3] = {attn_q_elems(&c->prob), attn_k_elems(&c->prob), attn_v_elems(&c->prob)};
    float *t[3] = {c->q, c->k, c->v};
    for (int a = 0; a < 3; a++)
        for (size_t i = 0; i < n[a]; i++)
            t[a][i] = fc_round(t[a][i], dt);
    c->dtype = dt;
    return ref_attention_f64(&c->prob, c->q, c->k, c->v, c->out, c->lse, err) ? -1 : 0;
}

static void print_verdict(FILE *out, const rep_verdict *v)
{
    fprintf(out, "\nverdict: %s\n", v->pass ? "PASS" : "FAIL");
    for (int g = 0; g < REP_NGATES; g++)
        fprintf(out, "  %s %-12s %s%s%s\n", rep_gate_name((rep_gate)g),
                rep_gate_title((rep_gate)g),
                v->gate[g] == REP_PASS ? "pass" : v->gate[g] == REP_FAIL ? "FAIL" : "not run",
                v->why[g][0] ? ": " : "", v->why[g]);
    fprintf(out, "  max|err| %.3g, e_lp_max %.3g, H1 ratio %.3g (tol %.3g%s), NMSE %.3g, LSE err "
            "%.3g, empty rows %zu, NaN %zu, inf %zu\n", v->max_err, v->e_lp_max, v->h1_ratio,
            v->h1_tol, v->degenerate ? ", degenerate baseline" : "", v->nmse, v->lse_err,
            v->empty_rows, v->nan_count, v->inf_count);
}

/* The block mask the run used (or, for a tested output, the producer's when stored, else the
 * one our kernel would use): into *bm, named in *name; built masks go to `built`. */
static int pick_bmask(const chk_repro_opts *o, const fix_case *c, const fix_tested *tt,
                      bmask *built, const bmask **bm, const char **name, fc_err *err)
{
    fc_err e;
    if (tt && tt->has_bmask) {
        *bm = &tt->bm;
        *name = "the producer's";
        return 0;
    }
    if (!o->builder && c->has_bmask) {
        *bm = &c->bm;
        *name = "stored";
        return 0;
    }
    /* the direct builder reads the families only: an explicit mask's is the slow builder's */
    bmask_builder b = c->prob.xmask.bits ? BMASK_SLOW : BMASK_DIRECT;
    if (o->builder && bmask_builder_parse(o->builder, &b))
        return fc_errf(err, FC_EINVAL, "--builder '%s': unknown builder", o->builder), -1;
    if (bmask_build_x(built, b, c->prob.mask, &c->prob.seq, c->prob.xmask, c->q_block_size,
                      c->kv_block_size, &e))
        return fc_errf(err, FC_EINVAL, "%s: case %s: %s", o->file, fc_esc(c->name).s, e.msg), -1;
    *bm = built;
    *name = bmask_builder_name(b);
    return 0;
}

/* The explicit terms, when the case has any: their shapes and how much of the families' pairs
 * the mask keeps, so that the rows below are read with the mask they were judged under. */
static void print_xterms(FILE *out, const attn_problem *p)
{
    const attn_xmask *m = &p->xmask;
    if (m->bits) {
        seq_view sv = seq_info_view(&p->seq);
        uint64_t fam = 0, kept = 0;
        for (int32_t b = 0; b < m->bm; b++)
            for (int32_t h = 0; h < m->hm; h++)
                for (int32_t tq = 0; tq < p->seq.lq; tq++) {
                    int32_t lo, hi;
                    mask_token_range(p->mask, sv, tq, &lo, &hi);
                    const uint8_t *row = xmask_row(*m, b, h, tq);
                    fam += (uint64_t)(hi > lo ? hi - lo : 0);
                    for (int32_t j = lo; j < hi; j++)
                        kept += (uint64_t)xmask_bit(row, j);
                }
        fprintf(out, "  explicit mask: [%d, %d, %d, %d], keeps %llu of the families' %llu pairs "
                "(%s)\n", (int)m->bm, (int)m->hm, (int)m->lq, (int)m->lk,
                (unsigned long long)kept, (unsigned long long)fam,
                m->bm * m->hm > 1 ? "per batch entry or head" : "one for every batch entry and head");
    }
    const attn_xbias *x = &p->xbias;
    if (x->vals) {
        size_t n = (size_t)x->bm * (size_t)x->hm * (size_t)x->lq * (size_t)x->lk;
        float mn = n ? x->vals[0] : 0, mx = mn;
        for (size_t i = 1; i < n; i++) {
            mn = x->vals[i] < mn ? x->vals[i] : mn;
            mx = x->vals[i] > mx ? x->vals[i] : mx;
        }
        fprintf(out, "  explicit bias: [%d, %d, %d, %d] float32, values in [%g, %g], added after "
                "the soft-cap\n", (int)x->bm, (int)x->hm, (int)x->lq, (int)x->lk, (double)mn,
                (double)mx);
    }
}

static void print_header(FILE *out, const chk_repro_opts *o, const fix_case *c, const bmask *bm,
                         const char *bm_name)
{
    const attn_problem *p = &c->prob;
    fprintf(out, "case %s of %s\n", fc_esc(c->name).s, fc_esc(o->file).s);
    fprintf(out, "  B %d, Hq %d, Hkv %d, Lq %d, Lk %d, D %d, Dv %d, scale %g, %s%s\n",
            (int)p->seq.batch, (int)p->hq, (int)p->hkv, (int)p->seq.lq, (int)p->seq.lk,
            (int)p->d, (int)p->dv, p->scale, fc_dtype_name(c->dtype),
            p->seq.packed ? ", packed" : "");
    char mask[160], terms[160];
    mask_params_text(mask, sizeof mask, &p->mask, MASK_TEXT_NAME);
    terms_text(terms, sizeof terms, &p->terms, p->hq, MASK_TEXT_NAME);
    fprintf(out, "  mask: %s%s\n", mask, terms);
    print_xterms(out, p);
    bmask_defects d;
    fc_err err;
    char text[REP_WHY_LEN + 64];
    if (bmask_find_defects_x(bm, p->mask, &p->seq, p->xmask, &d, &err))
        fc_fmt(text, sizeof text, "cannot be checked: %s", err.msg);
    else
        bmask_defects_text(text, sizeof text, bm, &d);
    fprintf(out, "  block mask: %s, %dx%d, %lld partial + %lld full: %s\n", bm_name,
            (int)bm->q_block_size, (int)bm->kv_block_size, (long long)bmask_count_partial(bm),
            (long long)bmask_count_full(bm), text);
}

static void print_rerun(FILE *out, const chk_repro_opts *o, const fix_case *c,
                        const fix_tested *tt)
{
    fprintf(out, "\nrerun: flexcheck repro %s --case %s", fc_esc(o->file).s, fc_esc(c->name).s);
    if (tt)
        fprintf(out, " --tested %s", fc_esc(tt->label).s);
    else
        fprintf(out, " --backend %s --kernel %d", gpu_backend_name(o->be), (int)o->kernel);
    if (o->builder)
        fprintf(out, " --builder %s", o->builder);
    if (o->dtype)
        fprintf(out, " --dtype %s", o->dtype);
    if (o->row)
        fprintf(out, " --row %s", o->row);
    if (o->rows < 0)
        fprintf(out, " --rows auto --rows-seed %llu", (unsigned long long)o->rows_seed);
    else if (o->rows)
        fprintf(out, " --rows %d --rows-seed %llu", (int)o->rows,
                (unsigned long long)o->rows_seed);
    fprintf(out, "\n");
}

static int tell(const chk_repro_opts *o, fix_case *c, const mask_params *prev, FILE *out,
                fc_err *err)
{
    const fix_tested *tt = NULL;
    for (int i = 0; o->label && i < c->ntested; i++)
        if (!strcmp(c->tested[i].label, o->label))
            tt = &c->tested[i];
    if (o->label && !tt)
        return fc_errf(err, FC_EINVAL, "%s: case %s has no output tested/%s", o->file,
                       fc_esc(c->name).s, o->label), -1;
    size_t asked = (size_t)-1;
    if (o->row && asked_row(o, c, &asked, err))
        return -1;
    bmask built;
    memset(&built, 0, sizeof built);
    const bmask *bm = NULL;
    const char *bm_name = NULL;
    if (pick_bmask(o, c, tt, &built, &bm, &bm_name, err))
        return -1;
    judge_case jc = fix_judge_case(c);
    size_t nl = judge_rows(&jc), no = nl * (size_t)c->prob.dv;
    float *ob = malloc(sizeof(float) * (no + 1)), *lseb = malloc(sizeof(float) * (nl + 1));
    judge_lp lp = {0};
    int rc = -1;
    if (!ob || !lseb) {
        fc_errf(err, FC_ENOMEM, "out of memory");
        goto done;
    }
    print_header(out, o, c, bm, bm_name);
    rep_verdict v;
    fc_err e;
    const float *o_out = ob, *o_lse = lseb;
    if (tt) {
        fprintf(out, "  output under test: tested/%s by %s (out stored as %s%s%s)\n",
                fc_esc(tt->label).s, fc_esc(tt->producer).s, tt->encoding,
                tt->lse ? ", with LSE" : ", no LSE", tt->out_rerun ? ", with a rerun" : "");
        char sample[REP_WHY_LEN];
        fix_sample_text(sample, sizeof sample, c);
        if (sample[0])
            fprintf(out, "  %s\n", sample);
        o_out = tt->out;
        o_lse = tt->lse;
        if (judge_baseline(&jc, &lp, &e) ||
            judge_given(&jc, tt->out, tt->lse, tt->out_rerun, &lp, &v, &e) < 0) {
            fc_errf(err, FC_EINVAL, "%s: case %s: %s", o->file, fc_esc(c->name).s, e.msg);
            goto done;
        }
    } else {
        fprintf(out, "  backend %s, kernel %d\n", gpu_backend_name(o->be), (int)o->kernel);
        judge_opts jo = {.kernel = o->kernel};
        rep_row row;
        memset(&row, 0, sizeof row);
        if (judge_case_run(&jo, o->be, &jc, bm, &row, ob, lseb, &v) < 0) {
            fc_errf(err, FC_EINVAL, "%s: case %s: %s", o->file, fc_esc(c->name).s, row.reason);
            goto done;
        }
    }
    print_verdict(out, &v);
    if (c->sample.tq && rep_fails_on_bounds(&v)) /* check judges every row again by itself */
        fprintf(out, "  note: a sample's bounds (e_lp_max, NMSE_lp, e_lse_lp_max, max|O_gold| over "
                "the rows judged) can be tighter than every row's, and only gates taken on them "
                "failed: --rows all judges every row\n");
    size_t worst = list_worst(out, c, o_out, o->worst);
    if (asked != (size_t)-1)
        explain_row(out, c, bm, o_out, o_lse, asked, 1);
    else if (worst != (size_t)-1)
        explain_row(out, c, bm, o_out, o_lse, worst, 0);
    if (!v.pass) { /* a tested output ran with the producer's block mask, if it stored one */
        diag_paged pgv = fix_diag_paged(c);
        diag_in in = {.jc = &jc, .o = o_out, .lse = o_lse, .v = &v, .prev = prev,
                      .bm = tt ? (tt->has_bmask ? &tt->bm : NULL) : bm,
                      .paged = c->paged ? &pgv : NULL};
        fprintf(out, "\n");
        diag_explain(&in, NULL, out, "");
    }
    print_rerun(out, o, c, tt);
    rc = v.pass ? 0 : 1;
done:
    free(ob);
    free(lseb);
    judge_lp_free(&lp);
    bmask_free(&built);
    return rc;
}

fc_status chk_repro_read(const fix_file *f, int i, fix_case *c, mask_params *prev, int *has_prev,
                         fc_err *err)
{
    fc_status st = fix_read_case(f, i, c, err);
    if (st)
        return st;
    fc_err e;
    *has_prev = f->has_layout && i > 0 && !fix_read_mask(f, i - 1, prev, &e);
    return FC_OK;
}

int chk_repro_case(fix_case *c, const mask_params *prev, const chk_repro_opts *o, FILE *out,
                   fc_err *err)
{
    fc_dtype dt = c->dtype;
    if (o->dtype && fc_dtype_parse(o->dtype, &dt))
        return fc_errf(err, FC_EINVAL, "--dtype '%s': float32, float16 or bfloat16", o->dtype),
               -1;
    if (o->dtype && dt != c->dtype) {
        /* Another precision: the oracle is recomputed from the rounded inputs. */
        fc_err e;
        if (change_dtype(c, dt, &e))
            return fc_errf(err, FC_EINVAL, "%s: case %s: %s", o->file, fc_esc(c->name).s, e.msg),
                   -1;
    } else if (confirm_oracle(o, c, err)) {
        return -1;
    }
    return tell(o, c, prev, out, err);
}
