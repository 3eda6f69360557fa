/*
 * rep_summary.c - the statistics of the report summary (docs/tolerance.md "Report"): per dtype
 * and backend the H1 ratio distribution and the H1 ratio against Lk per mask family, max|err|
 * against Lk and against W, and the fp16/fp32 and bf16/fp32 error ratios of rows that share a
 * case id. Used by the Markdown and HTML writers, so both always show the same numbers.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "reports/rep_internal.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Median (mean of the middle two for an even count) and nearest-rank p95 of sorted v. */
static double median_of(const double *v, size_t n)
{
    if (!n)
        return NAN;
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static double p95_of(const double *v, size_t n)
{
    if (!n)
        return NAN;
    size_t rank = (size_t)ceil(0.95 * (double)n); /* 1-based, in [1, n] */
    return v[rank - 1];
}

static int group_cmp(fc_dtype da, const char *ba, fc_dtype db, const char *bb)
{
    if (da != db)
        return da < db ? -1 : 1;
    return strcmp(ba, bb);
}

/* Groups and pairs are per backend label ("emu kernel 2"): rows of different kernels never mix. */
static int in_group(const rep_group *g, const rep_row *r)
{
    char lab[REP_NAME_LEN];
    rep_row_backend_label(r, lab);
    return !group_cmp(g->dtype, g->backend, r->dtype, lab);
}

size_t rep_group_of(const rep_summary *s, const rep_row *r)
{
    for (size_t g = 0; g < s->ngroups; g++)
        if (in_group(&s->groups[g], r))
            return g;
    return s->ngroups;
}

static int cmp_group(const void *a, const void *b)
{
    const rep_group *x = a, *y = b;
    return group_cmp(x->dtype, x->backend, y->dtype, y->backend);
}

int rep_row_measured(const rep_row *r)
{
    return rep_row_judged(r) && r->gates[REP_H1] != '-';
}

rep_family rep_row_family(const rep_row *r)
{
    if (r->nseq >= 2)
        return REP_FAM_PACKED;
    if (r->mask.chunk_size > 0)
        return REP_FAM_CHUNKED;
    if (r->mask.sliding_window > 0)
        return r->mask.causal ? REP_FAM_SLIDING : REP_FAM_BIDIR;
    return r->mask.causal ? REP_FAM_CAUSAL : REP_FAM_NONE;
}

const char *rep_family_name(rep_family f)
{
    static const char *const names[REP_NFAMILIES] = {
        [REP_FAM_PACKED] = "packed",  [REP_FAM_CHUNKED] = "chunked",
        [REP_FAM_SLIDING] = "sliding", [REP_FAM_BIDIR] = "bidir window",
        [REP_FAM_CAUSAL] = "causal",  [REP_FAM_NONE] = "none",
    };
    return (unsigned)f < REP_NFAMILIES ? names[f] : "?";
}

int rep_lk_bucket(int32_t lk)
{
    int b = 0;
    for (int64_t x = lk; x > 0; x >>= 1) /* the bit length of lk */
        b++;
    return b < REP_NBUCKETS ? b : REP_NBUCKETS - 1;
}

void rep_lk_bucket_label(char *buf, size_t cap, int bucket)
{
    if (bucket <= 1)
        snprintf(buf, cap, "%d", bucket);
    else
        snprintf(buf, cap, "%lld-%lld", 1LL << (bucket - 1), (1LL << bucket) - 1);
}

void rep_h1cell_text(char *buf, size_t cap, const rep_h1cell *c)
{
    if (!c->n) {
        snprintf(buf, cap, "-");
        return;
    }
    char med[32], mx[32];
    rep_fmt_num(med, sizeof med, c->median);
    rep_fmt_num(mx, sizeof mx, c->max);
    snprintf(buf, cap, "%s / %s (%zu)", med, mx, c->n);
}

void rep_h1cell_present(const rep_group *g, int family[REP_NFAMILIES], int bucket[REP_NBUCKETS])
{
    memset(family, 0, REP_NFAMILIES * sizeof *family);
    memset(bucket, 0, REP_NBUCKETS * sizeof *bucket);
    for (int b = 0; b < REP_NBUCKETS; b++)
        for (int fam = 0; fam < REP_NFAMILIES; fam++)
            if (g->by_lk[b * REP_NFAMILIES + fam].n)
                family[fam] = bucket[b] = 1;
}

/* A measured row's H1 ratio as the statistics count it: NaN (no number) as +inf. */
static double h1_of(const rep_row *r)
{
    return isnan(r->h1_ratio) ? INFINITY : r->h1_ratio;
}

static fc_status make_groups(const rep_row *rows, size_t n, rep_summary *s, fc_err *err)
{
    s->groups = calloc(n ? n : 1, sizeof *s->groups);
    if (!s->groups)
        return fc_errf(err, FC_ENOMEM, "report summary: out of memory");
    for (size_t i = 0; i < n; i++) {
        if (rep_group_of(s, &rows[i]) != s->ngroups)
            continue;
        rep_group *g = &s->groups[s->ngroups++];
        g->dtype = rows[i].dtype;
        rep_row_backend_label(&rows[i], g->backend);
    }
    qsort(s->groups, s->ngroups, sizeof *s->groups, cmp_group);

    for (size_t i = 0; i < n; i++) {
        const rep_row *r = &rows[i];
        rep_group *g = &s->groups[rep_group_of(s, r)];
        rep_tol t;
        g->rows++;
        if (!rep_row_judged(r)) {
            g->error += r->outcome == REP_ROW_ERROR;
            g->skip += r->outcome == REP_ROW_SKIP;
            g->outside += r->outcome == REP_ROW_OUTSIDE;
            continue;
        }
        g->judged++;
        if (r->outcome == REP_ROW_PASS)
            g->pass++;
        else
            g->fail++;
        if (!rep_row_measured(r))
            continue;
        g->measured++;
        if (rep_tol_for(r->dtype, &t, NULL) == FC_OK) {
            g->s1_flags += !(r->s1 <= t.s1_max);
            g->s2_flags += !(r->s2 <= t.s2_max);
        }
    }
    for (size_t k = 0; k < s->ngroups; k++) {
        rep_group *g = &s->groups[k];
        g->h1 = malloc((g->measured ? g->measured : 1) * sizeof *g->h1);
        if (!g->h1)
            return fc_errf(err, FC_ENOMEM, "report summary: out of memory");
        size_t m = 0;
        for (size_t i = 0; i < n; i++)
            if (rep_row_measured(&rows[i]) && in_group(g, &rows[i]))
                g->h1[m++] = h1_of(&rows[i]);
        qsort(g->h1, m, sizeof *g->h1, cmp_double);
        g->h1_median = median_of(g->h1, m);
        g->h1_p95 = p95_of(g->h1, m);
        g->h1_max = m ? g->h1[m - 1] : NAN;
    }
    return FC_OK;
}

/* A measured row's H1 ratio in one group's Lk bucket and family, as a sort key. */
typedef struct h1_at {
    int cell; /* bucket * REP_NFAMILIES + family */
    double ratio;
} h1_at;

static int cmp_h1_at(const void *a, const void *b)
{
    const h1_at *x = a, *y = b;
    if (x->cell != y->cell)
        return x->cell < y->cell ? -1 : 1;
    return (x->ratio > y->ratio) - (x->ratio < y->ratio);
}

/* Per group, the H1 ratios of its measured rows by power-of-two Lk bucket and mask family:
 * count, median (of an even count the mean of the middle two) and max. */
static fc_status make_h1_by_lk(const rep_row *rows, size_t n, rep_summary *s, fc_err *err)
{
    h1_at *v = malloc((n ? n : 1) * sizeof *v);
    if (!v)
        return fc_errf(err, FC_ENOMEM, "report summary: out of memory");
    for (size_t k = 0; k < s->ngroups; k++) {
        rep_group *g = &s->groups[k];
        g->by_lk = malloc(REP_NBUCKETS * REP_NFAMILIES * sizeof *g->by_lk);
        if (!g->by_lk) {
            free(v);
            return fc_errf(err, FC_ENOMEM, "report summary: out of memory");
        }
        for (size_t c = 0; c < REP_NBUCKETS * REP_NFAMILIES; c++)
            g->by_lk[c] = (rep_h1cell){0, NAN, NAN};
        size_t m = 0;
        for (size_t i = 0; i < n; i++)
            if (rep_row_measured(&rows[i]) && in_group(g, &rows[i]))
                v[m++] = (h1_at){rep_lk_bucket(rows[i].lk) * REP_NFAMILIES +
                                     (int)rep_row_family(&rows[i]),
                                 h1_of(&rows[i])};
        qsort(v, m, sizeof *v, cmp_h1_at);
        double *sorted = malloc((m ? m : 1) * sizeof *sorted);
        if (!sorted) {
            free(v);
            return fc_errf(err, FC_ENOMEM, "report summary: out of memory");
        }
        for (size_t i = 0; i < m;) { /* one run of equal cells at a time */
            size_t j = i;
            while (j < m && v[j].cell == v[i].cell) {
                sorted[j - i] = v[j].ratio;
                j++;
            }
            g->by_lk[v[i].cell] = (rep_h1cell){j - i, median_of(sorted, j - i), sorted[j - i - 1]};
            i = j;
        }
        free(sorted);
    }
    free(v);
    return FC_OK;
}

/* by_w uses only windowed rows: "error against W" has no point for an unwindowed case. */
static fc_status make_axis(const rep_row *rows, size_t n, const rep_summary *s, int by_window,
                           rep_axis *a, fc_err *err)
{
    a->vals = malloc((n ? n : 1) * sizeof *a->vals);
    if (!a->vals)
        return fc_errf(err, FC_ENOMEM, "report summary: out of memory");
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (!rep_row_measured(&rows[i]) || (by_window && rows[i].mask.sliding_window <= 0))
            continue;
        a->vals[m++] = by_window ? rows[i].mask.sliding_window : rows[i].lk;
    }
    qsort(a->vals, m, sizeof *a->vals, cmp_i32);
    a->nvals = 0;
    for (size_t i = 0; i < m; i++)
        if (a->nvals == 0 || a->vals[a->nvals - 1] != a->vals[i])
            a->vals[a->nvals++] = a->vals[i];

    size_t cells = a->nvals * s->ngroups;
    a->cell = malloc((cells ? cells : 1) * sizeof *a->cell);
    if (!a->cell)
        return fc_errf(err, FC_ENOMEM, "report summary: out of memory");
    for (size_t c = 0; c < cells; c++)
        a->cell[c] = NAN;
    for (size_t i = 0; i < n; i++) {
        const rep_row *r = &rows[i];
        if (!rep_row_measured(r) || (by_window && r->mask.sliding_window <= 0))
            continue;
        int32_t key = by_window ? r->mask.sliding_window : r->lk;
        const int32_t *hit = bsearch(&key, a->vals, a->nvals, sizeof *a->vals, cmp_i32);
        double *c = &a->cell[(size_t)(hit - a->vals) * s->ngroups + rep_group_of(s, r)];
        if (isnan(*c) || r->max_err > *c || isnan(r->max_err))
            *c = r->max_err;
    }
    return FC_OK;
}

/* Rows ordered by (case id, backend, builder, dtype), so the float32 partner of a row sits
 * right before it. */
static int cmp_pairing(const void *a, const void *b)
{
    const rep_row *x = *(const rep_row *const *)a, *y = *(const rep_row *const *)b;
    int c = strcmp(x->case_id, y->case_id);
    if (!c)
        c = strcmp(x->backend, y->backend);
    if (!c)
        c = (x->kernel > y->kernel) - (x->kernel < y->kernel);
    if (!c)
        c = strcmp(x->builder, y->builder);
    if (!c)
        c = (x->dtype > y->dtype) - (x->dtype < y->dtype);
    return c;
}

static rep_pairs *find_pairs(rep_summary *s, const char *backend, fc_dtype lp)
{
    for (size_t k = 0; k < s->npairs; k++)
        if (s->pairs[k].lp == lp && !strcmp(s->pairs[k].backend, backend))
            return &s->pairs[k];
    return NULL;
}

static int cmp_pairs(const void *a, const void *b)
{
    const rep_pairs *x = a, *y = b;
    int c = strcmp(x->backend, y->backend);
    return c ? c : (x->lp > y->lp) - (x->lp < y->lp);
}

static fc_status make_pairs(const rep_row *rows, size_t n, rep_summary *s, fc_err *err)
{
    const rep_row **by = malloc((n ? n : 1) * sizeof *by);
    s->pairs = calloc(2 * s->ngroups + 1, sizeof *s->pairs);
    if (!by || !s->pairs) {
        free(by);
        return fc_errf(err, FC_ENOMEM, "report summary: out of memory");
    }
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (rep_row_measured(&rows[i]))
            by[m++] = &rows[i];
    qsort(by, m, sizeof *by, cmp_pairing);

    fc_status st = FC_OK;
    const rep_row *ref = NULL; /* the float32 row of the current (case, backend, builder) */
    for (size_t i = 0; i < m && st == FC_OK; i++) {
        const rep_row *r = by[i];
        if (r->dtype == FC_F32) {
            ref = r;
            continue;
        }
        if (!ref || strcmp(ref->case_id, r->case_id) || strcmp(ref->backend, r->backend) ||
            ref->kernel != r->kernel || strcmp(ref->builder, r->builder))
            continue;
        char lab[REP_NAME_LEN];
        rep_row_backend_label(r, lab);
        rep_pairs *p = find_pairs(s, lab, r->dtype);
        if (!p) {
            p = &s->pairs[s->npairs++];
            rep_set_str(p->backend, sizeof p->backend, lab);
            p->lp = r->dtype;
            p->ratio = malloc(m * sizeof *p->ratio);
            if (!p->ratio)
                st = fc_errf(err, FC_ENOMEM, "report summary: out of memory");
        }
        if (st != FC_OK)
            break;
        if (ref->max_err == 0)
            p->zero_ref++;
        else
            p->ratio[p->n++] = r->max_err / ref->max_err;
    }
    free(by);
    if (st != FC_OK)
        return st;
    qsort(s->pairs, s->npairs, sizeof *s->pairs, cmp_pairs);
    for (size_t k = 0; k < s->npairs; k++) {
        rep_pairs *p = &s->pairs[k];
        qsort(p->ratio, p->n, sizeof *p->ratio, cmp_double);
        p->median = median_of(p->ratio, p->n);
        p->max = p->n ? p->ratio[p->n - 1] : NAN;
    }
    return FC_OK;
}

fc_status rep_summarize(const rep_row *rows, size_t n, rep_summary *s, fc_err *err)
{
    memset(s, 0, sizeof *s);
    s->rows = n;
    for (size_t i = 0; i < n; i++) {
        s->pass += rows[i].outcome == REP_ROW_PASS;
        s->fail += rows[i].outcome == REP_ROW_FAIL;
        s->error += rows[i].outcome == REP_ROW_ERROR;
        s->skip += rows[i].outcome == REP_ROW_SKIP;
        s->outside += rows[i].outcome == REP_ROW_OUTSIDE;
    }
    fc_status st = make_groups(rows, n, s, err);
    if (st == FC_OK)
        st = make_h1_by_lk(rows, n, s, err);
    if (st == FC_OK)
        st = make_axis(rows, n, s, 0, &s->by_lk, err);
    if (st == FC_OK)
        st = make_axis(rows, n, s, 1, &s->by_w, err);
    if (st == FC_OK)
        st = make_pairs(rows, n, s, err);
    if (st != FC_OK)
        rep_summary_free(s);
    return st;
}

void rep_summary_free(rep_summary *s)
{
    for (size_t g = 0; s->groups && g < s->ngroups; g++) {
        free(s->groups[g].h1);
        free(s->groups[g].by_lk);
    }
    for (size_t k = 0; s->pairs && k < s->npairs; k++)
        free(s->pairs[k].ratio);
    free(s->groups);
    free(s->pairs);
    free(s->by_lk.vals);
    free(s->by_lk.cell);
    free(s->by_w.vals);
    free(s->by_w.cell);
    memset(s, 0, sizeof *s);
}

void rep_put_gate_order(FILE *f, const rep_set *set, void (*put)(FILE *, const char *))
{
    put(f, "Gates in the order they are checked (docs/tolerance.md): ");
    for (size_t g = 0; g < REP_NGATES + set->nchecks; g++) {
        char item[96];
        const char *sep = g == 0 ? "" : g == REP_NGATES ? "; then, on the rows of their "
                          "cases, the exactness checks " : ", ";
        if (g < REP_NGATES)
            snprintf(item, sizeof item, "%s%s %s", sep, rep_gate_name((rep_gate)g),
                     rep_gate_title((rep_gate)g));
        else
            snprintf(item, sizeof item, "%s%s (%s)", sep, set->checks[g - REP_NGATES].name,
                     set->checks[g - REP_NGATES].title);
        put(f, item);
    }
    put(f, ". The H1 ratio is max|O - O_gold| / (c * e_lp_max + floor); a row passes H1 at "
           "ratio <= 1.");
}

int rep_set_failed(const rep_set *set, const rep_summary *s)
{
    return s->fail || s->error || (set->run && set->run->strict && s->outside);
}
