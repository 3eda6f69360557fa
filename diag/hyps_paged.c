/*
 * hyps_paged.c - the diagnosis's paged hypotheses (diag.h; docs/fixtures.md "Paged K/V"): a
 * page read from the wrong slot of the cache, for a case whose K/V the producer read through a
 * block table (diag_in.paged).
 *
 *   page-entry+1 / -1   sequence s's logical page j read from the page its table's entry j + 1
 *                       (j - 1) names: the block table indexed one entry off, for one page
 *   page-row+1 / -1     sequence s read through sequence s + 1's (s - 1's) table row: the
 *                       block table indexed one sequence off
 *
 * Each is computed as every hypothesis is: the failing rows recomputed in float64 with the
 * keys and values the wrong page gives (the case's own mask, scale and terms), and named only
 * when it explains every failing row, DIAG_CLOSER times more closely than the truth, with no
 * passing row contradicting it (diag.h). A page holds the same values for every hypothesis that
 * reads it, so two hypotheses reading equal pages compute the same rows and merge.
 *
 * The candidates are few, picked from the failing rows (never all pages x pages): the sequences
 * with failing rows (at most PAGED_SEQS, in row order), and in each the pages of the keys its
 * first failing token sees that the judged token before it does not (on a causal mask the page
 * where the failures start; every page of the row for a decode row), at most PAGED_PAGES,
 * those nearest the row's last key first. A page whose substitute is out of the cache, or the
 * same page, is not tried.
 */
#include <math.h>
#include <string.h>

#include "diag/diag_internal.h"

#define PAGED_SEQS 4
#define PAGED_PAGES 8

/* Sequence s's keys: [*k0, *k0 + *len) of its batch entry's axis; its table row is s. */
static void seq_keys(const attn_problem *p, int32_t s, int32_t *k0, int32_t *len)
{
    *k0 = p->seq.packed ? p->seq.cu_k[s] : 0;
    *len = p->seq.packed ? p->seq.cu_k[s + 1] - p->seq.cu_k[s] : p->seq.lk;
}

/* The sequence (table row) of query token tq of batch entry b. */
static int32_t seq_of(const attn_problem *p, int32_t b, int32_t tq)
{
    return p->seq.packed ? seq_find(p->seq.cu_q, p->seq.nseq, tq) : b;
}

static int32_t entry(const diag_paged *pg, int32_t row, int32_t j)
{
    return j >= 0 && j < pg->max_pages ? pg->table[(size_t)row * (size_t)pg->max_pages + (size_t)j]
                                       : -1;
}

/* The physical page sequence s's logical page j is read from under a. */
static int32_t page_under(const diag_paged *pg, const diag_alt *a, int32_t s, int32_t j)
{
    if (a->pg_seq != s)
        return entry(pg, s, j);
    if (a->pg_j >= 0)
        return j == a->pg_j ? a->pg_page : entry(pg, s, j);
    return entry(pg, a->pg_row, j);
}

int diag_paged_row(const diag_alt *a, const diag_key *k, int32_t hk, const uint8_t *keys,
                   const float *kk, const float *vv, float *wk, float *wv)
{
    const diag_paged *pg = k->in->paged;
    const attn_problem *p = k->p;
    int32_t s = seq_of(p, k->b, k->tq), k0, len, ps = pg->page_size;
    if (s != a->pg_seq)
        return 0;
    seq_keys(p, s, &k0, &len);
    size_t d = (size_t)p->d, dv = (size_t)p->dv;
    int changed = 0;
    for (int32_t tk = 0; tk < p->seq.lk; tk++) {
        if (!keys[tk])
            continue;
        int32_t t = tk - k0, page = t >= 0 && t < len ? page_under(pg, a, s, t / ps) : -2;
        if (t >= 0 && t < len && page != entry(pg, s, t / ps))
            changed = 1;
        if (!wk)
            continue;
        if (page == -2) { /* a key of no sequence of this table row: as the truth reads it */
            memcpy(wk + (size_t)tk * d, kk + (size_t)tk * d, sizeof(float) * d);
            memcpy(wv + (size_t)tk * dv, vv + (size_t)tk * dv, sizeof(float) * dv);
        } else if (page < 0 || page >= pg->num_pages) { /* nothing to read: never matches */
            for (size_t x = 0; x < d; x++)
                wk[(size_t)tk * d + x] = NAN;
            for (size_t x = 0; x < dv; x++)
                wv[(size_t)tk * dv + x] = NAN;
        } else {
            size_t at = ((size_t)page * (size_t)ps + (size_t)(t % ps)) * (size_t)p->hkv +
                        (size_t)hk;
            memcpy(wk + (size_t)tk * d, pg->k_cache + at * d, sizeof(float) * d);
            memcpy(wv + (size_t)tk * dv, pg->v_cache + at * dv, sizeof(float) * dv);
        }
    }
    return changed;
}

/* ---- the candidates ---- */

typedef struct cands {
    const diag_in *in;
    diag_alt *a;
    const char **names;
    size_t n, cap;
} cands;

static const char *seq_word(const attn_problem *p)
{
    return p->seq.packed ? "sequence" : "batch entry";
}

/* Sequence s's page j read from table entry j + dj's page. */
static void add_entry(cands *c, int32_t s, int32_t j, int32_t dj)
{
    const diag_paged *pg = c->in->paged;
    const attn_problem *p = c->in->jc->prob;
    int32_t right = entry(pg, s, j), wrong = entry(pg, s, j + dj), k0, len;
    if (c->n >= c->cap || wrong < 0 || wrong >= pg->num_pages || wrong == right)
        return;
    seq_keys(p, s, &k0, &len);
    int32_t last = (j + 1) * pg->page_size < len ? (j + 1) * pg->page_size : len;
    diag_alt *a = &c->a[c->n];
    diag_alt_init(c->in, a);
    a->pg_seq = s;
    a->pg_j = j;
    a->pg_page = wrong;
    fc_fmt(a->title, sizeof a->title, "%s %d's page %d (its keys %d..%d) read from physical "
           "page %d, block_table[%d][%d]'s, instead of page %d: the block table read one entry "
           "%s", seq_word(p), (int)s, (int)j, (int)(j * pg->page_size), (int)(last - 1),
           (int)wrong, (int)s, (int)(j + dj), (int)right, dj > 0 ? "ahead" : "back");
    c->names[c->n++] = dj > 0 ? "page-entry+1" : "page-entry-1";
}

/* Sequence s read through table row s + ds. */
static void add_row(cands *c, int32_t s, int32_t ds)
{
    const diag_paged *pg = c->in->paged;
    const attn_problem *p = c->in->jc->prob;
    int32_t r = s + ds, k0, len;
    if (c->n >= c->cap || r < 0 || r >= pg->nrows)
        return;
    seq_keys(p, s, &k0, &len);
    int differs = 0;
    for (int32_t j = 0; j * pg->page_size < len && !differs; j++)
        differs = entry(pg, r, j) != entry(pg, s, j);
    if (!differs)
        return;
    diag_alt *a = &c->a[c->n];
    diag_alt_init(c->in, a);
    a->pg_seq = s;
    a->pg_j = -1;
    a->pg_row = r;
    fc_fmt(a->title, sizeof a->title, "%s %d's keys read through %s %d's pages (block_table[%d] "
           "used for block_table[%d]): the block table indexed one sequence %s", seq_word(p),
           (int)s, seq_word(p), (int)r, (int)r, (int)s, ds > 0 ? "ahead" : "back");
    c->names[c->n++] = ds > 0 ? "page-row+1" : "page-row-1";
}

/* Candidates for the pages of sequence s (keys from k0) that hold a key of [lo, hi) outside
 * [plo, phi) (the keys of the judged token before), the last page first. */
static void add_pages(cands *c, int32_t s, int32_t k0, int32_t lo, int32_t hi, int32_t plo,
                      int32_t phi)
{
    int32_t ps = c->in->paged->page_size, taken = 0;
    for (int32_t tk = hi - 1; tk >= lo && taken < PAGED_PAGES; tk--) {
        int32_t j = (tk - k0) / ps;
        if (tk >= plo && tk < phi)
            continue;
        add_entry(c, s, j, 1);
        add_entry(c, s, j, -1);
        taken++;
        tk = k0 + j * ps; /* the next key looked at is the previous page's last */
    }
}

size_t diag_paged_alts(const diag_in *in, const uint8_t *state, diag_alt *a, size_t cap,
                       const char **names)
{
    const judge_case *jc = in->jc;
    const attn_problem *p = jc->prob;
    const diag_paged *pg = in->paged;
    cands c = {in, a, names, 0, cap};
    size_t nrows = judge_rows(jc), per = judge_per_head(jc);
    int32_t seqs[PAGED_SEQS], first[PAGED_SEQS], nseqs = 0;
    if (!pg || pg->page_size < 1 || pg->nrows != (p->seq.packed ? p->seq.nseq : p->seq.batch))
        return 0;
    /* the sequences with failing rows, and each one's first failing token */
    for (size_t row = 0; row < nrows; row++) {
        if (state[row] != ROW_FAIL)
            continue;
        int32_t b = (int32_t)(row / per / (size_t)p->hq), tq = judge_row_token(jc, row);
        int32_t s = seq_of(p, b, tq), i = 0;
        while (i < nseqs && seqs[i] != s)
            i++;
        if (i == nseqs && nseqs < PAGED_SEQS) {
            seqs[nseqs] = s;
            first[nseqs++] = tq;
        } else if (i < nseqs && tq < first[i]) {
            first[i] = tq;
        }
    }
    seq_view v = seq_info_view(&p->seq);
    for (int32_t i = 0; i < nseqs; i++) {
        int32_t s = seqs[i], k0, len, lo, hi, plo = 0, phi = 0;
        seq_keys(p, s, &k0, &len);
        mask_token_range(p->mask, v, first[i], &lo, &hi);
        /* the judged token before it, of the same sequence (on a sample, not always tq - 1) */
        int32_t prev = -1;
        for (size_t t = 0; t < per; t++) {
            int32_t tq = judge_row_token(jc, t);
            if (tq < first[i] && seq_of(p, p->seq.packed ? 0 : s, tq) == s)
                prev = tq;
        }
        if (prev >= 0)
            mask_token_range(p->mask, v, prev, &plo, &phi);
        add_pages(&c, s, k0, lo, hi, plo, phi);
        add_row(&c, s, 1);
        add_row(&c, s, -1);
    }
    return c.n;
}
