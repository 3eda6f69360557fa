/*
 * test_diag_paged.c - the diagnosis of a page read from the wrong slot (diag/hyps_paged.c;
 * docs/fixtures.md "Paged K/V"): a paged case (fix_paged_from_logical: pages in a seeded
 * order, stale NaN pages), an output computed by a producer that reads one page, or one
 * sequence's whole table row, from the wrong place, and the diagnosis must name that page (or
 * row) as the cause of every failing row; a correct output has no failing row; another bug on
 * a paged case is not blamed on a page.
 *
 *   make build/tests/test_diag_paged && OPENBLAS_NUM_THREADS=1 build/tests/test_diag_paged
 *   (DIAG_TEST_PRINT=1 prints every report)
 *
 * The producer's K/V are gathered here through its (wrong) table by hand, from the cache, never
 * through fix_paged_gather or the diagnosis's own reader; its attention is the float64
 * reference over those K/V (the bug under test is where the keys come from, not the softmax),
 * rounded to the case's dtype as a kernel stores it.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/lowp.h"
#include "diag/diag.h"
#include "fixtures/fix.h"
#include "judge/judge.h"
#include "ref/ref.h"

enum { HQ = 4, HKV = 2, D = 16, PS = 8 };

typedef struct pcase {
    fix_case c;
    judge_case jc;
    judge_lp lp;
    float *o, *lse;
    rep_verdict verdict;
} pcase;

/* Dense (two batch entries of 12 queries and 45 keys) or packed (sequences of 10/37, 1/20 and
 * 6/30 queries/keys), causal, float16, paged with PS keys a page. */
static void make(pcase *pc, int packed, mask_params m)
{
    memset(pc, 0, sizeof *pc);
    fix_gen_params gp = {.name = "c", .dtype = FC_F16, .b = packed ? 1 : 2, .hq = HQ,
                         .hkv = HKV, .lq = 12, .lk = 45, .d = D, .dv = D, .seed = 9, .mask = m};
    if (packed) {
        gp.nseq = 3;
        memcpy(gp.cu_q, (int32_t[]){0, 10, 11, 17}, sizeof(int32_t) * 4);
        memcpy(gp.cu_k, (int32_t[]){0, 37, 57, 87}, sizeof(int32_t) * 4);
    }
    fc_err err = {{0}};
    cr_assert_eq(fix_gen_case(&gp, &pc->c, &err), FC_OK, "%s", err.msg);
    cr_assert_eq(fix_paged_from_logical(&pc->c, PS, 3, 21, &err), FC_OK, "%s", err.msg);
    pc->jc = fix_judge_case(&pc->c);
    cr_assert_eq(judge_baseline(&pc->jc, &pc->lp, &err), FC_OK, "%s", err.msg);
    size_t no = attn_o_elems(&pc->c.prob), nl = attn_lse_elems(&pc->c.prob);
    pc->o = calloc(no + 1, sizeof *pc->o);
    pc->lse = calloc(nl + 1, sizeof *pc->lse);
}

static void pcase_free(pcase *pc)
{
    free(pc->o);
    free(pc->lse);
    judge_lp_free(&pc->lp);
    fix_case_free(&pc->c);
}

/* The producer: K/V read through `table` ([nrows, max_pages], the case's with its bug) by hand,
 * the float64 reference over them, rounded to float16. */
static void produce(pcase *pc, const int32_t *table)
{
    const attn_problem *p = &pc->c.prob;
    const fix_paged *pg = &pc->c.pg;
    float *k = calloc(attn_k_elems(p) + 1, sizeof *k), *v = calloc(attn_v_elems(p) + 1, sizeof *v);
    for (int32_t r = 0; r < pg->nrows; r++) {
        int32_t b = p->seq.packed ? 0 : r, k0 = p->seq.packed ? p->seq.cu_k[r] : 0;
        int32_t len = p->seq.packed ? p->seq.cu_k[r + 1] - k0 : p->seq.lk;
        for (int32_t t = 0; t < len; t++) {
            int32_t page = table[r * pg->max_pages + t / PS];
            cr_assert(page >= 0 && page < pg->num_pages, "the bug reads a page of the cache");
            for (int32_t h = 0; h < HKV; h++) {
                size_t from = (((size_t)page * PS + (size_t)(t % PS)) * HKV + (size_t)h) * D;
                size_t to = (((size_t)b * HKV + (size_t)h) * (size_t)p->seq.lk + (size_t)(k0 + t)) * D;
                memcpy(k + to, pg->k_cache + from, sizeof(float) * D);
                memcpy(v + to, pg->v_cache + from, sizeof(float) * D);
            }
        }
    }
    size_t no = attn_o_elems(p), nl = attn_lse_elems(p);
    double *o = calloc(no + 1, sizeof *o), *l = calloc(nl + 1, sizeof *l);
    fc_err err = {{0}};
    cr_assert_eq(ref_attention_f64(p, pc->c.q, k, v, o, l, &err), FC_OK, "%s", err.msg);
    for (size_t i = 0; i < no; i++)
        pc->o[i] = fc_round((float)o[i], FC_F16);
    for (size_t i = 0; i < nl; i++)
        pc->lse[i] = (float)l[i];
    free(k);
    free(v);
    free(o);
    free(l);
}

static diag_report *diagnose(pcase *pc, char **text)
{
    fc_err err = {{0}};
    int pass = judge_given(&pc->jc, pc->o, pc->lse, NULL, &pc->lp, &pc->verdict, &err);
    cr_assert(pass >= 0, "verdict: %s", err.msg);
    diag_paged view = fix_diag_paged(&pc->c);
    diag_in in = {.jc = &pc->jc, .o = pc->o, .lse = pc->lse, .v = &pc->verdict, .paged = &view};
    diag_report *r = NULL;
    cr_assert_eq(diag_run(&in, &r, &err), FC_OK, "diag_run: %s", err.msg);
    size_t len = 0;
    FILE *f = open_memstream(text, &len);
    diag_print(f, r, &pc->c.prob, "  ");
    fclose(f);
    if (getenv("DIAG_TEST_PRINT"))
        fputs(*text, stderr);
    return r;
}

static int32_t *table_copy(const pcase *pc)
{
    size_t n = (size_t)pc->c.pg.nrows * (size_t)pc->c.pg.max_pages;
    int32_t *t = malloc(sizeof *t * n);
    memcpy(t, pc->c.pg.block_table, sizeof *t * n);
    return t;
}

/* The planted bug is named the one cause of every failing row, with `title_part` in its
 * printed line. */
static void expect_cause(pcase *pc, const int32_t *bug, const char *name, const char *title_part)
{
    produce(pc, bug);
    char *text = NULL;
    diag_report *r = diagnose(pc, &text);
    cr_assert(!pc->verdict.pass, "%s: the bug's output must fail", name);
    cr_assert(r->failing > 0 && r->examined == r->failing && r->unexplained.count == 0,
              "%s\n%s", name, text);
    cr_assert(r->ncauses == 1 && !strcmp(r->findings[0].name, name), "%s: %zu causes, the "
              "first %s\n%s", name, r->ncauses, r->nexplaining ? r->findings[0].name : "(none)",
              text);
    cr_assert(strstr(text, title_part) && strstr(text, "explained by"), "%s: %s\n%s", name,
              title_part, text);
    free(text);
    diag_report_free(r);
}

TestSuite(diag_paged);

/* Sequence s's page j read through entry j + dj of its own row: named with the physical pages
 * (who, keys: the title's words for the sequence and the page's keys). */
static void entry_bug(int packed, int32_t s, int32_t j, int32_t dj, const char *who,
                      const char *keys)
{
    pcase pc;
    make(&pc, packed, (mask_params){.causal = 1});
    int32_t *bug = table_copy(&pc), mp = pc.c.pg.max_pages;
    const int32_t *t = pc.c.pg.block_table;
    bug[s * mp + j] = t[s * mp + j + dj];
    char part[200];
    snprintf(part, sizeof part, "%s %d's page %d (its keys %s) read from physical page %d, "
             "block_table[%d][%d]'s, instead of page %d", who, (int)s, (int)j, keys,
             (int)t[s * mp + j + dj], (int)s, (int)(j + dj), (int)t[s * mp + j]);
    expect_cause(&pc, bug, dj > 0 ? "page-entry+1" : "page-entry-1", part);
    free(bug);
    pcase_free(&pc);
}

Test(diag_paged, a_page_read_one_entry_ahead_is_named_with_its_sequence_page_and_slot)
{
    entry_bug(0, 1, 2, 1, "batch entry", "16..23");
}

Test(diag_paged, a_page_read_one_entry_back_in_a_packed_batch)
{
    entry_bug(1, 2, 1, -1, "sequence", "8..15");
}

Test(diag_paged, a_sequence_read_through_the_next_ones_table_row)
{
    pcase pc;
    make(&pc, 1, (mask_params){.causal = 1});
    int32_t *bug = table_copy(&pc), mp = pc.c.pg.max_pages;
    for (int32_t j = 0; j < 3; j++) /* sequence 1 (20 keys, 3 pages) through row 2's pages */
        bug[1 * mp + j] = pc.c.pg.block_table[2 * mp + j];
    expect_cause(&pc, bug, "page-row+1", "sequence 1's keys read through sequence 2's pages "
                 "(block_table[2] used for block_table[1])");
    free(bug);
    pcase_free(&pc);
}

Test(diag_paged, the_right_pages_pass_and_another_bug_is_not_blamed_on_a_page)
{
    pcase pc;
    make(&pc, 0, (mask_params){.causal = 1});
    produce(&pc, pc.c.pg.block_table);
    fc_err err = {{0}};
    cr_assert_eq(judge_given(&pc.jc, pc.o, pc.lse, NULL, &pc.lp, &pc.verdict, &err), 1,
                 "the right pages pass: %s", err.msg);
    /* causal flipped, read through the right table: its own hypothesis, no page's */
    pc.c.prob.mask.causal = 0;
    produce(&pc, pc.c.pg.block_table);
    pc.c.prob.mask.causal = 1;
    char *text = NULL;
    diag_report *r = diagnose(&pc, &text);
    cr_assert(!pc.verdict.pass);
    for (size_t i = 0; i < r->ncauses; i++)
        cr_assert(strncmp(r->findings[i].name, "page-", 5), "a page named for causal "
                  "flipped:\n%s", text);
    cr_assert(r->ncauses >= 1 && strstr(text, "causal flipped"), "%s", text);
    free(text);
    diag_report_free(r);
    pcase_free(&pc);
}
