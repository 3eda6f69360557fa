/*
 * diag_print.c - the diagnosis as text (diag.h): the report printed under a failed output, and
 * the one-line summary a report row carries. Both claim only what diag_run proved: causes,
 * group causes and the hypotheses that fit but are refuted are told apart, and when nothing
 * explains the rows the evidence about them is stated instead.
 */
#include <inttypes.h>
#include <string.h>

#include "diag/diag_internal.h"

/* ---- printing --------------------------------------------------------------------------- */

void diag_range_text(char *buf, size_t cap, const attn_problem *p, const diag_range *r)
{
    int n = r->q0 == r->q1
                ? snprintf(buf, cap, "(%d, %d, %d)", (int)r->b, (int)r->h, (int)r->q0)
                : snprintf(buf, cap, "(%d, %d, %d..%d)", (int)r->b, (int)r->h, (int)r->q0,
                           (int)r->q1);
    if (n < 0 || (size_t)n >= cap || !p->seq.packed || !p->seq.cu_q || p->seq.nseq < 1)
        return;
    /* rows_add keeps a range inside one sequence */
    int32_t s = seq_find(p->seq.cu_q, p->seq.nseq, r->q0), q0 = p->seq.cu_q[s];
    if (r->q0 == r->q1)
        snprintf(buf + n, cap - (size_t)n, ", sequence %d position %d", (int)s, (int)(r->q0 - q0));
    else
        snprintf(buf + n, cap - (size_t)n, ", sequence %d positions %d..%d", (int)s,
                 (int)(r->q0 - q0), (int)(r->q1 - q0));
}

/* "(b, h, q) = (0, 1, 40..43); (0, 1, 50); and 3 more ranges" */
static void print_ranges(FILE *f, const diag_rows *s, const attn_problem *p)
{
    fputs("(b, h, q) = ", f);
    for (size_t i = 0; i < s->nranges && i < DIAG_PRINT_RANGES; i++) {
        char buf[160];
        diag_range_text(buf, sizeof buf, p, &s->r[i]);
        fprintf(f, "%s%s", i ? "; " : "", buf);
    }
    if (s->nranges > DIAG_PRINT_RANGES)
        fprintf(f, "; and %zu more ranges", s->nranges - DIAG_PRINT_RANGES);
}

static const char *plural(size_t n)
{
    return n == 1 ? "" : "s";
}

/* What "all N failing rows" leaves out: " examined (of M)" when the budget left rows out, and
 * " with a finite output" when non-finite rows (H3's, never tried) fail too. */
static void of_examined(char *buf, size_t cap, const diag_report *r)
{
    buf[0] = '\0';
    fc_fmt(buf, cap, "%s%s", r->nonfinite.count ? " with a finite output" : "", "");
    if (r->not_examined)
        fc_fmt(buf + strlen(buf), cap - strlen(buf), " examined (of %zu)",
               r->examined + r->not_examined);
}

/* The cause of the non-finite rows when they are the rows with no allowed key (nan_empty). */
#define NAN_EMPTY_TITLE "rows with no allowed key are NaN (a softmax over no key computes 0/0)"

/* Why a whole candidate is not the cause, in words (diag_finding.refuted). */
static void refutation(char *buf, size_t cap, const diag_finding *x, const attn_problem *p)
{
    if (x->refuted == DIAG_REFUTED_PASSING) {
        char first[96];
        diag_range_text(first, sizeof first, p, &x->first_contradiction);
        fc_fmt(buf, cap, "%zu of the %zu passing rows checked%s contradict it (it changes them, "
               "and they are right), the first (b, h, q) = %s", x->contradicted, x->checked,
               x->checked < x->passing ? " (a sample)" : "", first);
    } else {
        fc_fmt(buf, cap, "it reproduces the failing values no %g times more closely than the "
               "correct output does (on average %.2g of their bounds away, the correct output "
               "%.2g)", DIAG_CLOSER, x->fit, x->truth_fit);
    }
}

/* The first refuted whole candidate (they follow the causes and group causes), or NULL. */
static const diag_finding *first_refuted(const diag_report *r)
{
    for (size_t i = 0; i < r->nexplaining; i++)
        if (r->findings[i].refuted && !r->findings[i].ngroups)
            return &r->findings[i];
    return NULL;
}

void diag_summary(char *buf, size_t cap, const diag_report *r, const attn_problem *p)
{
    if (!cap)
        return;
    buf[0] = '\0';
    if (r->failing == 0)
        return;
    char first[96], sample[64];
    if (r->nan_empty && r->nonfinite.count == r->failing) {
        diag_range_text(first, sizeof first, p, &r->nonfinite.r[0]);
        fc_fmt(buf, cap, NAN_EMPTY_TITLE ": all %zu failing row%s, (b, h, q) = %s%s", r->failing,
               plural(r->failing), first, r->nonfinite.nranges > 1 ? " ..." : "");
        return;
    }
    if (r->nonfinite.count == r->failing) {
        fc_fmt(buf, cap, "all %zu failing row%s non-finite (H3): no hypothesis tried",
               r->failing, r->failing == 1 ? " is" : "s are");
        return;
    }
    of_examined(sample, sizeof sample, r);
    if (r->ncauses) {
        const diag_finding *x = &r->findings[0];
        diag_range_text(first, sizeof first, p, &x->rows.r[0]);
        if (r->ncauses == 1)
            fc_fmt(buf, cap, "%s: all %zu failing row%s%s, (b, h, q) = %s%s", x->title,
                   r->examined, plural(r->examined), sample, first,
                   x->rows.nranges > 1 ? " ..." : "");
        else
            fc_fmt(buf, cap, "one of %s; %s%s (indistinguishable here): all %zu failing rows%s, "
                   "(b, h, q) = %s%s", x->title, r->findings[1].title,
                   r->ncauses > 2 ? "; ..." : "", r->examined, sample, first,
                   x->rows.nranges > 1 ? " ..." : "");
        return;
    }
    if (r->nexplaining && r->findings[0].ngroups) {
        const diag_finding *x = &r->findings[0];
        diag_range_text(first, sizeof first, p, &x->group_rows.r[0]);
        fc_fmt(buf, cap, "in %zu head%s, %s: %zu of %zu failing rows%s, (b, h, q) = %s%s",
               x->ngroups, plural(x->ngroups), x->title, x->group_rows.count, r->examined,
               sample, first, x->group_rows.nranges > 1 ? " ..." : "");
        return;
    }
    const diag_finding *rf = first_refuted(r);
    if (rf) {
        char why[192];
        refutation(why, sizeof why, rf, p);
        fc_fmt(buf, cap, "no cause: %s fits all %zu failing rows%s but %s", rf->title,
               r->examined, sample, why);
        return;
    }
    if (r->nexplaining)
        fc_fmt(buf, cap, "no hypothesis explains all %zu failing rows%s (partial fits only, the "
               "largest %s on %zu): outside the diagnosis's table", r->examined, sample,
               r->findings[0].title, r->findings[0].rows.count);
    else
        fc_fmt(buf, cap, "no hypothesis explains the %zu failing row%s%s: outside the diagnosis's "
               "table", r->examined, plural(r->examined), sample);
}

void diag_explain(const diag_in *in, rep_row *row, FILE *f, const char *indent)
{
    diag_report *r;
    fc_err err;
    if (diag_run(in, &r, &err)) {
        if (row)
            fc_fmt(row->explained, sizeof row->explained, "diagnosis not run: %s", err.msg);
        if (f)
            fprintf(f, "%sdiagnosis: not run: %s\n", indent ? indent : "", err.msg);
        return;
    }
    if (row)
        diag_summary(row->explained, sizeof row->explained, r, in->jc->prob);
    if (f)
        diag_print(f, r, in->jc->prob, indent);
    diag_report_free(r);
}

/* What the failing rows are, when no cause explains them (diag_evidence): facts only. */
static void print_evidence(FILE *f, const diag_report *r, const char *indent)
{
    const diag_evidence *ev = &r->ev;
    fprintf(f, "%sno hypothesis of the diagnosis's table explains %s: the bug lies outside what it "
               "knows; what the %zu row%s no cause explains %s:\n", indent,
            r->unexplained.count ? "these rows" : "the non-finite rows", ev->rows,
            plural(ev->rows), ev->rows == 1 ? "is" : "are");
    fprintf(f, "%sevidence: in %zu of %zu heads (b, h)", indent, ev->heads, ev->heads_total);
    if (ev->from_q == 0)
        fputs(", every row of each", f);
    else if (ev->from_q > 0 && ev->from_lo == ev->from_q - 1)
        fprintf(f, ", in each of them every row from q = %d on and none before%s%s",
                (int)ev->from_q, ev->from_named ? ": " : "", ev->from_names);
    else if (ev->from_q > 0) /* a sample: the onset is known only to lie in an interval */
        fprintf(f, ", in each of them every row judged from q = %d on and none judged before; "
                   "no row in q = %d..%d was judged, so the rows start in q = %d..%d (%s%s%s)",
                (int)ev->from_q, (int)ev->from_lo + 1, (int)ev->from_q - 1,
                (int)ev->from_lo + 1, (int)ev->from_q,
                ev->from_named ? "named thresholds there: " : "no named threshold there",
                ev->from_names, ev->from_named > 8 ? "; ..." : "");
    fputc('\n', f);
    if (ev->zero && ev->zero == ev->rows)
        fprintf(f, "%sevidence: each with O = 0, though each has allowed keys\n", indent);
    else if (ev->zero)
        fprintf(f, "%sevidence: %zu of the %zu with O = 0, though they have allowed keys\n",
                indent, ev->zero, ev->rows);
    if (ev->starts && ev->starts_total < r->rows)
        fprintf(f, "%sevidence: %zu of the %zu are the first query of their sequence (the case "
                   "has %zu such rows)\n", indent, ev->starts, ev->rows, ev->starts_total);
    if (ev->empty)
        fprintf(f, "%sevidence: %zu of the %zu have no allowed key (the case has %zu such rows)\n",
                indent, ev->empty, ev->rows, ev->empty_total);
    else if (ev->empty_total)
        fprintf(f, "%sevidence: none of the case's %zu rows with no allowed key is among them\n",
                indent, ev->empty_total);
    if (ev->decode && ev->decode_total < r->rows)
        fprintf(f, "%sevidence: %zu of the %zu belong to sequences with fewer queries than keys "
                   "(decode, chunked prefill; the case has %zu such rows)\n", indent, ev->decode,
                ev->rows, ev->decode_total);
    if (r->nonfinite.count && !r->nan_empty)
        fprintf(f, "%sevidence: %zu non-finite (H3), %zu of them with no allowed key\n", indent,
                r->nonfinite.count, ev->nonfinite_empty);
}

void diag_print(FILE *f, const diag_report *r, const attn_problem *p, const char *indent)
{
    if (!indent)
        indent = "";
    if (r->failing == 0) { /* diag_explain runs on failed outputs: say what failed instead */
        fprintf(f, "%sdiagnosis: every row is within the H1 and H5 bounds of the truth, and no "
                   "row carries more than its share of H2's error: no row to examine\n",
                indent);
        return;
    }
    fprintf(f, "%sdiagnosis: %zu of %zu rows failing (%zu non-finite), %zu examined under %zu "
               "hypotheses\n", indent, r->failing, r->rows, r->nonfinite.count, r->examined,
            r->nfindings);
    if (r->h2_mode)
        fprintf(f, "%sH2 alone failed: the rows examined are those whose squared error passes "
                   "their share of H2's allowance (%.3g each), and a hypothesis explains a row "
                   "whose squared error against it is within that share or within NMSE_tol "
                   "times its own squared sum\n",
                indent, r->h2_row_share);
    if (r->nan_empty) {
        fprintf(f, "%sexplained by " NAN_EMPTY_TITLE ": all %zu %s row%s: ", indent, r->nan_empty,
                r->nan_empty == r->failing ? "failing" : "non-finite", plural(r->nan_empty));
        print_ranges(f, &r->nonfinite, p);
        fputc('\n', f);
    }
    char sample[64];
    of_examined(sample, sizeof sample, r);
    if (r->ncauses == 1) {
        const diag_finding *x = &r->findings[0];
        fprintf(f, "%sexplained by %s: all %zu failing row%s%s: ", indent, x->title, r->examined,
                plural(r->examined), sample);
        print_ranges(f, &x->rows, p);
        fputc('\n', f);
        if (r->nalso) {
            fprintf(f, "%salso within the bounds on every failing row, less closely: ", indent);
            for (size_t i = 1; i <= r->nalso; i++)
                fprintf(f, "%s%s (failing values on average %.2g of their bounds away)",
                        i > 1 ? "; " : "", r->findings[i].title, r->findings[i].fit);
            fprintf(f, "; the cause %.2g\n", x->fit);
        }
    } else if (r->ncauses > 1) {
        fprintf(f, "%sexplained by one of %zu hypotheses, each within the bounds on every "
                   "failing row, none %g times closer (indistinguishable here): ", indent,
                r->ncauses, DIAG_CLOSER);
        for (size_t i = 0; i < r->ncauses; i++)
            fprintf(f, "%s%s", i ? "; " : "", r->findings[i].title);
        fprintf(f, ": all %zu failing row%s%s: ", r->examined, plural(r->examined), sample);
        print_ranges(f, &r->findings[0].rows, p);
        fputc('\n', f);
    }
    size_t after = r->ncauses + r->nalso; /* the findings after the causes' lines */
    if (r->nfitted) {
        fprintf(f, "%salso within the bounds on every failing row, not named (an index fitted to "
                   "these rows, where the cause needs none): ", indent);
        for (size_t i = after; i < after + r->nfitted; i++)
            fprintf(f, "%s%s", i > after ? "; " : "", r->findings[i].title);
        fputc('\n', f);
        after += r->nfitted;
    }
    size_t partial = 0;
    for (size_t i = after; i < r->nexplaining; i++) {
        const diag_finding *x = &r->findings[i];
        if (x->refuted && !x->ngroups) { /* a whole candidate refuted: why, one line each */
            char why[192];
            refutation(why, sizeof why, x, p);
            fprintf(f, "%sfits every failing row, but not the cause: %s: %s\n", indent, x->title,
                    why);
            continue;
        }
        if (!x->ngroups) {
            partial++;
            continue;
        }
        fprintf(f, "%sexplained in %zu head%s by %s: all %zu failing row%s there: ", indent,
                x->ngroups, plural(x->ngroups), x->title, x->group_rows.count,
                plural(x->group_rows.count));
        print_ranges(f, &x->group_rows, p);
        fputc('\n', f);
    }
    if (partial) {
        fprintf(f, "%spartial fits, no cause: ", indent);
        for (size_t i = after, n = 0; i < r->nexplaining; i++) {
            const diag_finding *x = &r->findings[i];
            if (x->ngroups || x->refuted)
                continue;
            fprintf(f, "%s%s on %zu of %zu rows", n++ ? "; " : "", x->title, x->rows.count,
                    r->examined);
            if (x->heads_refuted)
                fprintf(f, " (every failing row of %zu head%s, but refuted there%s)",
                        x->heads_refuted, plural(x->heads_refuted),
                        x->contradicted ? ": passing rows contradict it" : "");
        }
        fputc('\n', f);
    }
    if (r->unexplained.count) {
        fprintf(f, "%snot explained: %zu row%s: ", indent, r->unexplained.count,
                plural(r->unexplained.count));
        print_ranges(f, &r->unexplained, p);
        fputc('\n', f);
    }
    if (r->nonfinite.count && !r->nan_empty) {
        fprintf(f, "%snot explained: %zu row%s: ", indent, r->nonfinite.count,
                plural(r->nonfinite.count));
        print_ranges(f, &r->nonfinite, p);
        fputs(" (non-finite output: H3)\n", f);
    }
    if (r->skipped.count) {
        fprintf(f, "%snot examined (work budget of %" PRIu64 " multiply-adds): %zu row%s: ",
                indent, r->budget, r->skipped.count, plural(r->skipped.count));
        print_ranges(f, &r->skipped, p);
        fputc('\n', f);
    }
    if (!r->ncauses && (r->unexplained.count || (r->nonfinite.count && !r->nan_empty)))
        print_evidence(f, r, indent);
    if (r->nexplaining < r->nfindings) {
        fprintf(f, "%stried, explaining no row: ", indent);
        for (size_t i = r->nexplaining; i < r->nfindings; i++)
            fprintf(f, "%s%s", i > r->nexplaining ? "; " : "", r->findings[i].title);
        fputc('\n', f);
    }
}

void diag_after_run(const judge_run_in *in, const rep_verdict *v, rep_row *row)
{
    if (row->outcome != REP_ROW_FAIL || v->unscaled)
        return;
    diag_in d = {.jc = in->jc, .o = in->o, .lse = in->lse, .v = v, .bm = in->bm,
                 .budget = DIAG_RUN_BUDGET};
    diag_explain(&d, row, NULL, NULL);
}
