/*
 * cmd_repro.c - 'flexcheck repro FILE --case NAME': one case told in full, for an engineer
 * holding a dump of a bad layer. Runs the kernel on the case (twice, for determinism) - or,
 * with --tested LABEL, takes the output another producer stored under tested/LABEL - judges it
 * under docs/tolerance.md, and prints every gate, the worst elements with their (b, h, q, d)
 * coordinates and positions, that row's allowed key range (or the row given by --row), the
 * block lists of its query tile, the LSE difference, and the exact command that reruns it.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "masks/bmask.h"
#include "cli/cli.h"
#include "cli/isolate.h"
#include "diag/diag.h"
#include "fixtures/fix.h"
#include "judge/judge.h"
#include "gpu/gpu.h"
#include "base/lowp.h"
#include "ref/ref.h"
#include "reports/tol.h"

static const char *const CMD = "repro";

typedef struct repro_opts {
    const char *file, *name, *builder_s, *dtype_s, *backend_s, *label, *row_s;
    int32_t kernel, worst;
    int kernel_given;
    int32_t rows;       /* --rows (fix_budget.rows): 0, every row, by default */
    uint64_t rows_seed; /* --rows-seed */
    cli_iso iso; /* the file is read and judged in a child under this limit */
} repro_opts;

/* Returns CLI_GO or the exit status (help printed, or bad input). */
static int parse(int argc, char **argv, repro_opts *o)
{
    memset(o, 0, sizeof *o);
    o->kernel = GPU_DEFAULT_KERNEL;
    o->worst = 5;
    o->iso.max_memory = CLI_ISO_DEFAULT_MAX_MEMORY;
    o->rows_seed = FIX_ROWS_SEED;
    const cli_opt opts[] = {
        CLI_STR("case", "NAME", "the case to tell (required when FILE holds more than one)",
                &o->name),
        CLI_STR("backend", "B", "emu (default) or gpu", &o->backend_s),
        CLI_INT_SEEN("kernel", "K",
                     "kernel version, 1 or 2 (default 2)",
                     &o->kernel, 1, GPU_MAX_KERNEL, &o->kernel_given),
        CLI_STR("builder", "B", "slow | direct | superset | superset-trim; default: the block\n"
                "mask stored in the case, else direct", &o->builder_s),
        CLI_STR("dtype", "T", "float32 | float16 | bfloat16: rerun in another precision (inputs\n"
                "rounded to it, oracle recomputed)", &o->dtype_s),
        CLI_INT("worst", "N", "how many worst elements to list (default 5)", &o->worst, 1, 1000),
        CLI_STR("tested", "LABEL", "judge the output stored under tested/LABEL instead of\n"
                "running our kernel", &o->label),
        CLI_STR("row", "B,H,Q", "explain this output row (batch entry, query head, query\n"
                "token) instead of the worst one", &o->row_s),
        CLI_FN("max-memory", "BYTES", "the file is read and judged in a child process limited\n"
               "to this much address space (K, M, G, T suffixes)",
               cli_parse_bytes, &o->iso.max_memory),
        CLI_FN("max-work", "N", "refuse a case needing more than N multiply-adds (K, M, G, T\n"
               "suffixes, powers of 1024; default 1T = 2^40)", cli_parse_count, &o->iso.max_work),
        CLI_FN("rows", "N|all|auto", "with --tested: judge a sample of N query tokens, as check\n"
               "--rows does (default all; auto: a sample only past the budgets)",
               cli_parse_rows, &o->rows),
        CLI_FN("rows-seed", "S", "the seed of a sample's uniform part (default "
               CLI_TEXT(FIX_ROWS_SEED) ")", cli_parse_seed, &o->rows_seed),
    };
    const cli_spec spec = {
        .cmd = CMD,
        .usage = "usage: flexcheck repro FILE [--case NAME] [options]\n",
        .opts = opts,
        .nopts = sizeof opts / sizeof opts[0],
        .max_operands = 1,
        .unknown = "unexpected argument '%s' (--help)",
        .exit_status = "exit status: 0 the case passes, 1 it fails a gate, 2 bad input.",
    };
    int nops, rc = cli_parse(&spec, argc, argv, &nops);
    if (rc != CLI_GO)
        return rc;
    o->file = nops ? argv[1] : NULL;
    if (!o->file)
        return cli_usage_error(CMD, "need FILE (and --case NAME when it holds several; --help)");
    /* What runs our kernel has nothing to act on when --tested judges a stored output. */
    const char *runs = o->dtype_s ? "--dtype" : o->builder_s ? "--builder"
                     : o->backend_s ? "--backend" : o->kernel_given ? "--kernel" : NULL;
    if (o->label && runs)
        return cli_usage_error(CMD, "%s does not apply with --tested, which judges a stored "
                               "output (--dtype, --builder, --backend and --kernel run our "
                               "kernel)", runs);
    if (o->rows && !o->label) /* the kernel computes every row: a sample has no q for it */
        return cli_usage_error(CMD, "--rows judges a sample of a stored output (--tested LABEL); "
                               "our kernel computes every row");
    return CLI_GO;
}

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

static void print_ids(const char *what, const int32_t *ids, int32_t n)
{
    printf("    %-8s %d:", what, (int)n);
    for (int32_t j = 0; j < n && j < 64; j++)
        printf(" %d", (int)ids[j]);
    printf("%s\n", n > 64 ? " ..." : "");
}

static void print_element(const fix_case *c, const float *o, size_t i)
{
    const attn_problem *p = &c->prob;
    coords co = coords_of(c, i / (size_t)p->dv);
    double e = fabs((double)o[i] - c->out[i]);
    printf("  %4d %4d %7d %5zu %6d %9d  %14.7g  %14.7g  %10.3g\n", (int)co.b, (int)co.h,
           (int)co.tq, i % (size_t)p->dv, (int)co.seq, (int)co.pq, (double)o[i], c->out[i], e);
}

static void element_header(void)
{
    printf("  %4s %4s %7s %5s %6s %9s  %14s  %14s  %10s\n", "b", "h", "q", "d", "seq", "p_q",
           "O", "O_gold", "err");
}

/* The row with the largest |O - O_gold| element (NaN the worst), after listing the `worst`
 * worst elements; (size_t)-1 when there are no elements. */
static size_t list_worst(const fix_case *c, const float *o, int worst)
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
    printf("\nworst elements (|O - O_gold|):\n");
    element_header();
    for (int j = 0; j < k; j++)
        print_element(c, o, idx[j]);
    if (k > 0)
        row = idx[0] / dv;
done:
    free(idx);
    free(errv);
    return row;
}

/* One output row told in full: where it is, its allowed keys, its LSE, its query tile's block
 * lists; every element when the row was asked for (all_d). */
static void explain_row(const fix_case *c, const bmask *bm, const float *o, const float *lse,
                        size_t row, int all_d)
{
    const attn_problem *p = &c->prob;
    seq_view sv = seq_info_view(&p->seq);
    coords co = coords_of(c, row);
    int32_t lo, hi;
    mask_token_range(p->mask, sv, co.tq, &lo, &hi);
    int32_t k0 = p->seq.cu_k[co.seq];
    printf("\n%s row: b %d, h %d (kv head %d), q %d (sequence %d, position %d)\n",
           all_d ? "asked" : "worst", (int)co.b, (int)co.h, (int)(co.h / (p->hq / p->hkv)),
           (int)co.tq, (int)co.seq, (int)co.pq);
    if (all_d) {
        element_header();
        for (int32_t d = 0; d < p->dv && d < 64; d++)
            print_element(c, o, row * (size_t)p->dv + (size_t)d);
        if (p->dv > 64)
            printf("  ... (%d more columns)\n", (int)(p->dv - 64));
    }
    if (lo < hi)
        printf("  allowed keys: tokens [%d, %d) = positions [%d, %d], %d keys\n", (int)lo,
               (int)hi, (int)(lo - k0), (int)(hi - 1 - k0), (int)(hi - lo));
    else
        printf("  allowed keys: none (output must be 0, LSE -inf)\n");
    if (lse)
        printf("  LSE: tested %.9g, oracle %.9g, difference %.3g\n", (double)lse[row],
               c->lse[row], (double)lse[row] - c->lse[row]);
    else
        printf("  LSE: none stored (oracle %.9g)\n", c->lse[row]);
    int32_t r = co.tq / bm->q_block_size;
    size_t br = bmask_row(bm, co.b % bm->nb, co.h % bm->nh, r);
    printf("  query tile %d (tokens [%d, %d)), blocks of %d keys:\n", (int)r,
           (int)(r * bm->q_block_size), (int)((r + 1) * bm->q_block_size),
           (int)bm->kv_block_size);
    print_ids("partial", bmask_ids(bm, 0, br), bm->kv_num_blocks[br]);
    print_ids("full", bmask_ids(bm, 1, br), bm->full_kv_num_blocks[br]);
    if (lo < hi)
        printf("    the row needs kv blocks %d..%d\n", (int)(lo / bm->kv_block_size),
               (int)((hi - 1) / bm->kv_block_size));
}

/* "B,H,Q" inside the problem, as a flat row index of what c holds (of a sample: Q must be one
 * of its tokens); -1 and a message otherwise. */
static int parse_row(const char *s, const fix_case *c, size_t *row)
{
    const attn_problem *p = &c->prob;
    long long v[3];
    const char *at = s;
    for (int k = 0; k < 3; k++) { /* decimal fields, as every number option (cli_decimal) */
        size_t len = strcspn(at, ",");
        if (cli_decimal(at, len, &v[k]) || (k < 2) != (at[len] == ','))
            return cli_usage_error(CMD, "--row '%s': want B,H,Q (three integers)", s), -1;
        at += len + (k < 2);
    }
    long long b = v[0], h = v[1], q = v[2];
    if (b < 0 || b >= p->seq.batch || h < 0 || h >= p->hq || q < 0 || q >= p->seq.lq)
        return cli_usage_error(CMD, "--row %s: outside the case (B %d, Hq %d, Lq %d)", s,
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
            return cli_usage_error(CMD, "--row %s: query token %lld is not in the sample "
                                   "(--rows all judges every row)", s, q), -1;
        per = (size_t)c->sample.n;
        idx = lo;
    }
    *row = ((size_t)b * (size_t)p->hq + (size_t)h) * per + idx;
    return 0;
}

/* Every verdict rests on the stored out/lse, so they are confirmed first: our float64 oracle
 * recomputed from the inputs must reproduce them (as `check` does). A file whose out holds
 * something else (an engine's output stored in its place, a corrupted dump) is refused with the
 * first difference, never judged against. */
static int confirm_oracle(const repro_opts *ro, const fix_case *c)
{
    fix_check_result r;
    fc_err err;
    if (fix_check_case(c, FIX_BACKEND_REF, 0, &r, &err))
        return cli_usage_error(CMD, "%s: case %s: %s", ro->file, fc_esc(ro->name).s, err.msg);
    if (!r.oracle_ok)
        return cli_usage_error(CMD, "%s: case %s: the stored out/lse are not the float64 oracle "
                               "of its inputs, so nothing can be judged against them: %s",
                               ro->file, fc_esc(ro->name).s, r.detail);
    return CLI_PASS;
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

static void print_verdict(const rep_verdict *v)
{
    printf("\nverdict: %s\n", v->pass ? "PASS" : "FAIL");
    for (int g = 0; g < REP_NGATES; g++)
        printf("  %s %-12s %s%s%s\n", rep_gate_name((rep_gate)g), rep_gate_title((rep_gate)g),
               v->gate[g] == REP_PASS ? "pass" : v->gate[g] == REP_FAIL ? "FAIL" : "not run",
               v->why[g][0] ? ": " : "", v->why[g]);
    printf("  max|err| %.3g, e_lp_max %.3g, H1 ratio %.3g (tol %.3g%s), NMSE %.3g, LSE err %.3g, "
           "empty rows %zu, NaN %zu, inf %zu\n", v->max_err, v->e_lp_max, v->h1_ratio, v->h1_tol,
           v->degenerate ? ", degenerate baseline" : "", v->nmse, v->lse_err, v->empty_rows,
           v->nan_count, v->inf_count);
}

/* The block mask the run used (or, for a tested output, the producer's when stored, else the
 * one our kernel would use): into *bm, named in *name; built masks go to `built`. */
static int pick_bmask(const repro_opts *ro, const fix_case *c, const fix_tested *tt,
                      bmask *built, const bmask **bm, const char **name)
{
    fc_err err;
    if (tt && tt->has_bmask) {
        *bm = &tt->bm;
        *name = "the producer's";
        return CLI_PASS;
    }
    if (!ro->builder_s && c->has_bmask) {
        *bm = &c->bm;
        *name = "stored";
        return CLI_PASS;
    }
    /* the direct builder reads the families only: an explicit mask's is the slow builder's */
    bmask_builder b = c->prob.xmask.bits ? BMASK_SLOW : BMASK_DIRECT;
    if (ro->builder_s && bmask_builder_parse(ro->builder_s, &b))
        return cli_usage_error(CMD, "--builder '%s': unknown builder", ro->builder_s);
    if (bmask_build_x(built, b, c->prob.mask, &c->prob.seq, c->prob.xmask, c->q_block_size,
                      c->kv_block_size, &err))
        return cli_usage_error(CMD, "%s: case %s: %s", ro->file, fc_esc(ro->name).s, err.msg);
    *bm = built;
    *name = bmask_builder_name(b);
    return CLI_PASS;
}

static void print_header(const repro_opts *ro, const fix_case *c, const bmask *bm,
                         const char *bm_name)
{
    const attn_problem *p = &c->prob;
    printf("case %s of %s\n", fc_esc(ro->name).s, fc_esc(ro->file).s);
    printf("  B %d, Hq %d, Hkv %d, Lq %d, Lk %d, D %d, Dv %d, scale %g, %s%s\n",
           (int)p->seq.batch, (int)p->hq, (int)p->hkv, (int)p->seq.lq, (int)p->seq.lk, (int)p->d,
           (int)p->dv, p->scale, fc_dtype_name(c->dtype), p->seq.packed ? ", packed" : "");
    char mask[160], terms[160];
    mask_params_text(mask, sizeof mask, &p->mask, MASK_TEXT_NAME);
    terms_text(terms, sizeof terms, &p->terms, p->hq, MASK_TEXT_NAME);
    printf("  mask: %s%s\n", mask, terms);
    bmask_defects d;
    fc_err err;
    char text[REP_WHY_LEN + 64];
    if (bmask_find_defects_x(bm, p->mask, &p->seq, p->xmask, &d, &err))
        fc_fmt(text, sizeof text, "cannot be checked: %s", err.msg);
    else
        bmask_defects_text(text, sizeof text, bm, &d);
    printf("  block mask: %s, %dx%d, %lld partial + %lld full: %s\n", bm_name,
           (int)bm->q_block_size, (int)bm->kv_block_size, (long long)bmask_count_partial(bm),
           (long long)bmask_count_full(bm), text);
}

static int run(const repro_opts *ro, fix_case *c, const mask_params *prev, gpu_backend be)
{
    const fix_tested *tt = NULL;
    for (int i = 0; ro->label && i < c->ntested; i++)
        if (!strcmp(c->tested[i].label, ro->label))
            tt = &c->tested[i];
    if (ro->label && !tt)
        return cli_usage_error(CMD, "%s: case %s has no output tested/%s", ro->file,
                               fc_esc(ro->name).s, ro->label);
    size_t asked = (size_t)-1;
    if (ro->row_s && parse_row(ro->row_s, c, &asked))
        return CLI_BADINPUT;
    bmask built;
    memset(&built, 0, sizeof built);
    const bmask *bm = NULL;
    const char *bm_name = NULL;
    int rc = pick_bmask(ro, c, tt, &built, &bm, &bm_name);
    if (rc != CLI_PASS)
        return rc;
    judge_case jc0 = fix_judge_case(c);
    size_t nl = judge_rows(&jc0), no = nl * (size_t)c->prob.dv;
    float *o = malloc(sizeof(float) * (no + 1)), *lse = malloc(sizeof(float) * (nl + 1));
    judge_lp lp = {0};
    rc = CLI_BADINPUT;
    if (!o || !lse) {
        cli_usage_error(CMD, "out of memory");
        goto done;
    }
    print_header(ro, c, bm, bm_name);
    judge_case jc = fix_judge_case(c);
    rep_verdict v;
    fc_err err;
    const float *out = o, *out_lse = lse;
    if (tt) {
        printf("  output under test: tested/%s by %s (out stored as %s%s%s)\n", fc_esc(tt->label).s,
               fc_esc(tt->producer).s, tt->encoding, tt->lse ? ", with LSE" : ", no LSE",
               tt->out_rerun ? ", with a rerun" : "");
        char sample[REP_WHY_LEN];
        fix_sample_text(sample, sizeof sample, c);
        if (sample[0])
            printf("  %s\n", sample);
        out = tt->out;
        out_lse = tt->lse;
        if (judge_baseline(&jc, &lp, &err) ||
            judge_given(&jc, tt->out, tt->lse, tt->out_rerun, &lp, &v, &err) < 0) {
            cli_usage_error(CMD, "%s: case %s: %s", ro->file, fc_esc(ro->name).s, err.msg);
            goto done;
        }
    } else {
        printf("  backend %s, kernel %d\n", gpu_backend_name(be), (int)ro->kernel);
        judge_opts jo = {.kernel = ro->kernel};
        rep_row row;
        memset(&row, 0, sizeof row);
        if (judge_case_run(&jo, be, &jc, bm, &row, o, lse, &v) < 0) {
            cli_usage_error(CMD, "%s: case %s: %s", ro->file, fc_esc(ro->name).s, row.reason);
            goto done;
        }
    }
    print_verdict(&v);
    if (c->sample.tq && rep_fails_on_bounds(&v)) /* check judges every row again by itself */
        printf("  note: a sample's bounds (e_lp_max, NMSE_lp, e_lse_lp_max, max|O_gold| over the "
               "rows judged) can be tighter than every row's, and only gates taken on them "
               "failed: --rows all judges every row\n");
    size_t worst = list_worst(c, out, ro->worst);
    if (asked != (size_t)-1)
        explain_row(c, bm, out, out_lse, asked, 1);
    else if (worst != (size_t)-1)
        explain_row(c, bm, out, out_lse, worst, 0);
    if (!v.pass) { /* a tested output ran with the producer's block mask, if it stored one */
        diag_paged pgv = fix_diag_paged(c);
        diag_in in = {.jc = &jc, .o = out, .lse = out_lse, .v = &v, .prev = prev,
                      .bm = tt ? (tt->has_bmask ? &tt->bm : NULL) : bm,
                      .paged = c->paged ? &pgv : NULL};
        printf("\n");
        diag_explain(&in, NULL, stdout, "");
    }
    printf("\nrerun: flexcheck repro %s --case %s", fc_esc(ro->file).s, fc_esc(ro->name).s);
    if (tt)
        printf(" --tested %s", fc_esc(tt->label).s);
    else
        printf(" --backend %s --kernel %d", gpu_backend_name(be), (int)ro->kernel);
    if (ro->builder_s)
        printf(" --builder %s", ro->builder_s);
    if (ro->dtype_s)
        printf(" --dtype %s", ro->dtype_s);
    if (ro->row_s)
        printf(" --row %s", ro->row_s);
    if (ro->rows < 0)
        printf(" --rows auto --rows-seed %llu", (unsigned long long)ro->rows_seed);
    else if (ro->rows)
        printf(" --rows %d --rows-seed %llu", (int)ro->rows, (unsigned long long)ro->rows_seed);
    printf("\n");
    rc = v.pass ? CLI_PASS : CLI_FAIL;
done:
    free(o);
    free(lse);
    judge_lp_free(&lp);
    bmask_free(&built);
    return rc;
}

/* The case --case names, or the file's only case; a file of several without --case is refused
 * listing (the first 10 of) them. Returns the index, or -1 with the message printed. */
static int pick_case(const fix_file *f, const repro_opts *o)
{
    if (o->name) {
        int i = fix_find_case(f, o->name);
        if (i < 0)
            cli_usage_error(CMD, "%s: no case named '%s'", o->file, fc_esc(o->name).s);
        return i;
    }
    if (f->ncases == 1)
        return 0;
    char list[10 * (4 * FIX_NAME_MAX + 2) + 64]; /* ten names, escaped (4 bytes a byte at most) */
    size_t n = 0;
    for (int i = 0; i < f->ncases && i < 10; i++)
        n += (size_t)snprintf(list + n, sizeof list - n, "%s%s", i ? ", " : "",
                              fc_esc(f->names[i]).s);
    if (f->ncases > 10)
        snprintf(list + n, sizeof list - n, ", ... (%d more)", f->ncases - 10);
    cli_usage_error(CMD, "%s holds %d cases: name one with --case NAME (%s)", o->file,
                    f->ncases, list);
    return -1;
}

typedef struct repro_job {
    repro_opts *o;
    gpu_backend be;
    fc_dtype dt;
} repro_job;

/* The file read and the case told, in the child (cli/isolate.h): the exit status. */
static int repro_file(void *arg, cli_iso_chan *ch)
{
    (void)ch;
    repro_job *j = arg;
    repro_opts *o = j->o;
    fc_err err;
    char msg[sizeof err.msg + 96];
    fix_file f;
    fc_status st = fix_open(o->file, &f, &err);
    if (st)
        return cli_usage_error(CMD, "%s", cli_iso_errmsg(st, err.msg, msg, sizeof msg));
    f.budget = cli_iso_budget(&o->iso);
    f.budget.rows = o->rows;
    f.budget.rows_seed = o->rows_seed;
    f.oracle_compute = 1; /* a dump without out/lse: the oracle of the rows judged, computed */
    int i = pick_case(&f, o);
    if (i < 0) {
        fix_close(&f);
        return CLI_BADINPUT;
    }
    fix_case c;
    if ((st = fix_read_case(&f, i, &c, &err))) {
        fix_close(&f);
        return cli_usage_error(CMD, "%s", cli_iso_errmsg(st, err.msg, msg, sizeof msg));
    }
    o->name = c.name; /* the case told, in the rerun line too */
    mask_params prev; /* a layout file's previous layer, for the diagnosis */
    int has_prev = f.has_layout && i > 0 && !fix_read_mask(&f, i - 1, &prev, &err);
    fix_close(&f);
    cli_iso_set_phase(CLI_ISO_JUDGING);
    int rc;
    if (o->dtype_s && j->dt != c.dtype) {
        /* Another precision: the oracle is recomputed from the rounded inputs. */
        if (change_dtype(&c, j->dt, &err))
            rc = cli_usage_error(CMD, "%s: case %s: %s", o->file, fc_esc(o->name).s, err.msg);
        else
            rc = run(o, &c, has_prev ? &prev : NULL, j->be);
    } else {
        rc = confirm_oracle(o, &c);
        if (rc == CLI_PASS)
            rc = run(o, &c, has_prev ? &prev : NULL, j->be);
    }
    fix_case_free(&c);
    return rc;
}

int cmd_repro(int argc, char **argv)
{
    repro_opts o;
    int prc = parse(argc, argv, &o);
    if (prc != CLI_GO)
        return prc;
    repro_job job = {&o, GPU_BACKEND_EMU, FC_F32};
    fc_err err;
    if (o.backend_s && gpu_backend_parse(o.backend_s, &job.be))
        return cli_usage_error(CMD, "--backend '%s': emu or gpu", o.backend_s);
    if (!cli_backend_available(job.be, &err)) /* CUDA only in the file's child */
        return cli_usage_error(CMD, "--backend %s: %s", o.backend_s, err.msg);
    if (o.dtype_s && fc_dtype_parse(o.dtype_s, &job.dt))
        return cli_usage_error(CMD, "--dtype '%s': float32, float16 or bfloat16", o.dtype_s);
    o.iso.data_limit = job.be == GPU_BACKEND_CUDA;
    cli_iso_result res;
    if (cli_isolated(&o.iso, repro_file, &job, &res, &err))
        return cli_usage_error(CMD, "%s: %s", o.file, err.msg);
    int rc = res.status;
    if (!res.finished || res.exit_status > 0) {
        char msg[512];
        cli_iso_describe(&o.iso, o.file, &res, msg, sizeof msg);
        rc = cli_usage_error(CMD, "%s", msg);
    }
    cli_iso_result_free(&res);
    return rc;
}
