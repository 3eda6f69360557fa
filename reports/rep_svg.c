/*
 * rep_svg.c - the chart shapes the HTML report needs, as inline SVG: a strip plot (one row of
 * dots per dtype/backend, for distributions), a log-log scatter plot (error against Lk or W,
 * one marker per row: rows of different cases share no line, since a line between them would
 * draw a trend nobody measured) and the H1 ratio against Lk panel (markers by mask family on
 * a power-of-two Lk axis). Plain SVG 1.1 elements only; a hover title on each
 * marker is the only interaction.
 */
#include <math.h>
#include <string.h>

#include "reports/rep_internal.h"

#define W_SVG 760.0
#define TOP 34.0
#define BOTTOM 46.0
#define LEGEND_ROW 16.0

static const char *const palette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                      "#9467bd", "#8c564b", "#e377c2", "#17becf"};
#define NPAL (sizeof palette / sizeof palette[0])

/* Position of x in [lo, hi] on [x0, x1]; outside values clamp to the ends (NaN: right). */
static double scale(double x, double lo, double hi, int logs, double x0, double x1)
{
    double t;
    if (isnan(x))
        return x1;
    if (logs) {
        if (!(x > 0))
            return x0;
        t = (log10(x) - log10(lo)) / (log10(hi) - log10(lo));
    } else {
        t = (x - lo) / (hi - lo);
    }
    if (!(t >= 0))
        t = 0;
    if (t > 1)
        t = 1;
    return x0 + t * (x1 - x0);
}

static void open_svg(FILE *f, const char *id, double h, const char *title)
{
    fputs("<svg xmlns=\"http://www.w3.org/2000/svg\" id=\"", f);
    rep_put_xml(f, id);
    fprintf(f, "\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
               "font-family=\"sans-serif\" font-size=\"11\" role=\"img\">\n<title>",
            W_SVG, h, W_SVG, h);
    rep_put_xml(f, title);
    fputs("</title>\n<text x=\"8\" y=\"18\" font-size=\"13\" font-weight=\"bold\">", f);
    rep_put_xml(f, title);
    fputs("</text>\n", f);
}

/* m * 10^e as a tick label: plain digits from 1 to 90000, "2e-7" outside. */
static void tick_label(char *buf, size_t cap, int m, int e)
{
    if (e >= 0 && e <= 4)
        snprintf(buf, cap, "%.0f", m * pow(10, e));
    else
        snprintf(buf, cap, "%de%d", m, e);
}

/* The ticks of a log axis over [lo, hi] (powers of ten), along x (vertical 0: the axis at
 * height c, grid up to cfar) or y (vertical 1: the axis at x = c, grid across to cfar), the
 * axis running from a0 (lo) to a1 (hi). A grid line and label at each decade (every step-th
 * one when there are many, so labels never overlap); short ticks at 2..9 times each decade
 * while there are few, labelled at 2 and 5 when the axis spans at most two decades, where
 * decades alone would leave two or three labels. */
static void log_ticks(FILE *f, double lo, double hi, int vertical, double a0, double a1,
                      double c, double cfar)
{
    const int e0 = (int)ceil(log10(lo) - 1e-9), e1 = (int)floor(log10(hi) + 1e-9);
    const int nd = e1 - e0, step = nd > 12 ? (nd + 11) / 12 : 1;
    for (int e = e0; e <= e1; e++) {
        for (int m = 1; m <= 9; m++) {
            if (m > 1 && (nd > 6 || e == e1))
                break;
            double p = scale(m * pow(10, e), lo, hi, 1, a0, a1);
            int major = m == 1, labelled = major ? (e - e0) % step == 0
                                                 : nd <= 2 && (m == 2 || m == 5);
            if (major && !vertical)
                fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                           "stroke=\"#ddd\"/>", p, cfar, p, c);
            else if (major)
                fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                           "stroke=\"#ddd\"/>", c, p, cfar, p);
            double len = major ? 6 : 3; /* the tick itself, outside the plot */
            if (!vertical)
                fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                           "stroke=\"#444\"/>", p, c, p, c + len);
            else
                fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                           "stroke=\"#444\"/>", c - len, p, c, p);
            if (labelled) {
                char lab[32];
                tick_label(lab, sizeof lab, m, e);
                if (!vertical)
                    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\"%s>%s</text>",
                            p, c + 17, major ? "" : " fill=\"#666\"", lab);
                else
                    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\"%s>%s</text>",
                            c - 8, p + 4, major ? "" : " fill=\"#666\"", lab);
            }
            fputc('\n', f);
        }
    }
}

/* The x axis at height y: line, ticks with labels and grid up to ytop, and its title. */
static void x_axis(FILE *f, double lo, double hi, int logs, double x0, double x1, double y,
                   double ytop, const char *label)
{
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#444\"/>\n", x0,
            y, x1, y);
    if (logs) {
        log_ticks(f, lo, hi, 0, x0, x1, y, ytop);
    } else {
        for (int k = 0; k <= 4; k++) {
            double v = lo + (hi - lo) * k / 4, px = scale(v, lo, hi, 0, x0, x1);
            fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                       "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%g</text>\n",
                    px, ytop, px, y, px, y + 14, v);
        }
    }
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">", (x0 + x1) / 2, y + 32);
    rep_put_xml(f, label);
    fputs("</text>\n", f);
}

void rep_svg_strips(FILE *f, const char *id, const char *title, const char *xlabel,
                    const rep_strip *s, size_t ns, double lo, double hi, int logx, double mark)
{
    const double x0 = 190, x1 = W_SVG - 20, row = 26;
    double h = TOP + row * (double)(ns ? ns : 1) + BOTTOM, yaxis = h - BOTTOM;
    open_svg(f, id, h, title);
    x_axis(f, lo, hi, logx, x0, x1, yaxis, TOP, xlabel);
    if (isfinite(mark)) {
        double px = scale(mark, lo, hi, logx, x0, x1);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#d62728\" "
                   "stroke-dasharray=\"4 3\"/>\n",
                px, TOP, px, yaxis);
    }
    for (size_t k = 0; k < ns; k++) {
        double y = TOP + row * ((double)k + 0.5);
        const char *color = palette[k % NPAL];
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">", x0 - 8, y + 4);
        rep_put_xml(f, s[k].label);
        fprintf(f, " (%zu)</text>\n", s[k].n);
        for (size_t i = 0; i < s[k].n; i++) {
            double v = s[k].v[i];
            int outside = !(v >= lo && v <= hi);
            fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" %s=\"%s\" fill-opacity=\"0.45\"",
                    scale(v, lo, hi, logx, x0, x1), y, outside ? "stroke" : "fill", color);
            fprintf(f, "%s><title>%.4g</title></circle>\n", outside ? " fill=\"none\"" : "", v);
        }
    }
    fputs("</svg>\n", f);
}

/* Smallest decade range [lo, hi] holding every positive value, at least one decade wide, its
 * exponents within [-300, 300] where every 10^e is a normal double: a denormal or near-overflow
 * value (a rows.json may hold one) cannot make an end 0 or infinite, and stands at the edge. */
void rep_svg_decades(double mn, double mx, double *lo, double *hi)
{
    if (!(mn > 0 && mx >= mn && isfinite(mx))) {
        *lo = 1;
        *hi = 10;
        return;
    }
    double e0 = fmin(fmax(floor(log10(mn)), -300), 299);
    double e1 = fmax(fmin(ceil(log10(mx)), 300), e0 + 1);
    *lo = pow(10, e0);
    *hi = pow(10, e1);
}

/* A filled circle for a passed row, an x for a failed one; a ring around it when the value
 * lies beyond the axis and the marker stands at its edge. */
static void marker(FILE *f, double px, double py, const char *color, int failed, int edge)
{
    if (failed)
        fprintf(f, "<path d=\"M%.1f %.1fL%.1f %.1fM%.1f %.1fL%.1f %.1f\" stroke=\"%s\" "
                   "stroke-width=\"2\"/>",
                px - 4, py - 4, px + 4, py + 4, px - 4, py + 4, px + 4, py - 4, color);
    if (edge)
        fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"%s\" fill=\"none\" stroke=\"%s\"/>", px,
                py, failed ? "6" : "3.5", color);
    else if (!failed)
        fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\" fill-opacity=\"0.55\"/>",
                px, py, color);
}

void rep_svg_scatter(FILE *f, const char *id, const char *title, const char *xlabel,
                     const char *ylabel, const rep_points *s, size_t ns)
{
    /* The log y axis runs from ylo at ya to yhi at yb; below it a band for 0 (an exact row),
     * above it one for infinity and NaN, so that neither reads as a value on the axis. */
    const double x0 = 80, x1 = W_SVG - 20, y1 = TOP, y0 = TOP + 300, band = 24;
    const double ya = y0 - band, yb = y1 + band;
    const double h = y0 + 50 + LEGEND_ROW * (double)(ns + 1) + 8;
    double xmn = INFINITY, xmx = 0, ymn = INFINITY, ymx = 0, xlo, xhi, ylo, yhi;
    for (size_t k = 0; k < ns; k++)
        for (size_t i = 0; i < s[k].n; i++) {
            double x = s[k].x[i], y = s[k].y[i];
            if (x > 0 && isfinite(x)) {
                xmn = fmin(xmn, x);
                xmx = fmax(xmx, x);
            }
            if (y > 0 && isfinite(y)) {
                ymn = fmin(ymn, y);
                ymx = fmax(ymx, y);
            }
        }
    rep_svg_decades(xmn, xmx, &xlo, &xhi);
    rep_svg_decades(ymn, ymx, &ylo, &yhi);
    open_svg(f, id, h, title);
    x_axis(f, xlo, xhi, 1, x0, x1, y0, y1, xlabel);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#444\"/>\n", x0,
            y0, x0, y1);
    log_ticks(f, ylo, yhi, 1, ya, yb, x0, x1);
    for (int b = 0; b < 2; b++) { /* the two bands: a dotted edge, a label */
        double edge = b ? y1 + 2 * band / 3 : y0 - 2 * band / 3;
        double mid = b ? y1 + band / 3 : y0 - band / 3;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#bbb\" "
                   "stroke-dasharray=\"2 3\"/><text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" "
                   "fill=\"#666\">%s</text>\n",
                x0, edge, x1, edge, x0 - 8, mid + 4, b ? "inf, NaN" : "0");
    }
    fprintf(f, "<text x=\"14\" y=\"%.1f\" transform=\"rotate(-90 14 %.1f)\" "
               "text-anchor=\"middle\">",
            (y0 + y1) / 2, (y0 + y1) / 2);
    rep_put_xml(f, ylabel);
    fputs("</text>\n", f);
    /* Passed rows first, so a failed row's x is never hidden under them. */
    for (int failed = 0; failed <= 1; failed++)
        for (size_t k = 0; k < ns; k++)
            for (size_t i = 0; i < s[k].n; i++) {
                int is_failed = s[k].failed && s[k].failed[i];
                if (is_failed != failed)
                    continue;
                double x = s[k].x[i], y = s[k].y[i];
                int off_x = !(x > 0 && isfinite(x)), off_y = !(y > 0 && isfinite(y));
                double px = scale(x, xlo, xhi, 1, x0, x1); /* x <= 0 at the left, NaN right */
                double py = !off_y ? scale(y, ylo, yhi, 1, ya, yb)
                            : y <= 0 ? y0 - band / 3 : y1 + band / 3;
                fprintf(f, "<g class=\"pt %s%s\"><title>", failed ? "fail" : "pass",
                        off_x || off_y ? " edge" : "");
                rep_put_xml(f, s[k].tip ? s[k].tip[i] : s[k].label);
                fputs("</title>", f);
                marker(f, px, py, palette[k % NPAL], failed, off_x || off_y);
                fputs("</g>\n", f);
            }
    /* The legend below the plot, where a long backend label has the whole width. */
    double ly = y0 + 50;
    fprintf(f, "<g class=\"legend\"><circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"#444\"/>"
               "<text x=\"%.1f\" y=\"%.1f\">passed</text>",
            x0 + 6, ly - 4, x0 + 16, ly);
    marker(f, x0 + 76, ly - 4, "#444", 1, 0);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">failed</text>", x0 + 86, ly);
    marker(f, x0 + 146, ly - 4, "#444", 0, 1);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">ringed: no place on a log axis (0 in the bottom "
               "band, inf or NaN in the top one)</text>\n",
            x0 + 156, ly);
    for (size_t k = 0; k < ns; k++) {
        ly += LEGEND_ROW;
        fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4.5\" fill=\"%s\"/><text x=\"%.1f\" "
                   "y=\"%.1f\">",
                x0 + 6, ly - 4, palette[k % NPAL], x0 + 16, ly);
        rep_put_xml(f, s[k].label);
        fprintf(f, " (%zu)</text>\n", s[k].n);
    }
    fputs("</g>\n</svg>\n", f);
}

/* ---- H1 ratio against Lk -------------------------------------------------------------------- */

void rep_svg_lk_axes(const rep_lk_point *p, size_t n, rep_lk_axes *ax)
{
    double xmn = INFINITY, xmx = 0, ymn = 1, ymx = 1; /* the limit 1 always on the axis */
    memset(ax, 0, sizeof *ax);
    for (size_t i = 0; i < n; i++) {
        ax->family[p[i].family] = 1;
        if (p[i].lk > 0) {
            xmn = fmin(xmn, p[i].lk);
            xmx = fmax(xmx, p[i].lk);
        }
        if (p[i].ratio > 0 && isfinite(p[i].ratio)) {
            ymn = fmin(ymn, p[i].ratio);
            ymx = fmax(ymx, p[i].ratio);
        }
    }
    ax->xe0 = xmx > 0 ? (int)floor(log2(xmn)) : 0;
    ax->xe1 = xmx > 0 ? (int)ceil(log2(xmx)) : 1;
    if (ax->xe1 <= ax->xe0)
        ax->xe1 = ax->xe0 + 1;
    rep_svg_decades(ymn, ymx, &ax->ylo, &ax->yhi);
}

static const char *const fam_color[REP_NFAMILIES] = {
    [REP_FAM_PACKED] = "#9467bd",  [REP_FAM_CHUNKED] = "#ff7f0e", [REP_FAM_SLIDING] = "#2ca02c",
    [REP_FAM_BIDIR] = "#17becf",   [REP_FAM_CAUSAL] = "#1f77b4",  [REP_FAM_NONE] = "#8c564b",
};

/* The family's shape at (x, y): circle (causal), square (chunked), diamond (packed), triangle
 * up (sliding) and down (bidir window), a plus (none); filled for a passed row, its outline
 * with an x inside for a failed one. */
static void fam_shape(FILE *f, rep_family fam, double x, double y, int failed)
{
    const char *c = fam_color[fam];
    const double r = 4.5;
    char paint[96];
    if (failed)
        snprintf(paint, sizeof paint, "fill=\"white\" stroke=\"%s\" stroke-width=\"1.5\"", c);
    else
        snprintf(paint, sizeof paint, "fill=\"%s\" fill-opacity=\"0.7\" stroke=\"%s\"", c, c);
    switch (fam) {
    case REP_FAM_CAUSAL:
        fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"%.1f\" %s/>", x, y, r, paint);
        break;
    case REP_FAM_CHUNKED:
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" %s/>", x - r,
                y - r, 2 * r, 2 * r, paint);
        break;
    case REP_FAM_PACKED:
        fprintf(f, "<path d=\"M%.1f %.1fL%.1f %.1fL%.1f %.1fL%.1f %.1fZ\" %s/>", x, y - 1.4 * r,
                x + 1.4 * r, y, x, y + 1.4 * r, x - 1.4 * r, y, paint);
        break;
    case REP_FAM_SLIDING:
    case REP_FAM_BIDIR: {
        double s = fam == REP_FAM_SLIDING ? 1 : -1; /* up or down */
        fprintf(f, "<path d=\"M%.1f %.1fL%.1f %.1fL%.1f %.1fZ\" %s/>", x, y - s * 1.5 * r,
                x + 1.4 * r, y + s * r, x - 1.4 * r, y + s * r, paint);
        break;
    }
    default: { /* none: a plus */
        double a = 0.5 * r, b = 1.4 * r;
        fprintf(f, "<path d=\"M%.1f %.1fH%.1fV%.1fH%.1fV%.1fH%.1fV%.1fH%.1fV%.1fH%.1fV%.1fH%.1fZ\" "
                   "%s/>",
                x - a, y - b, x + a, y - a, x + b, y + a, x + a, y + b, x - a, y + a, x - b,
                y - a, x - a, paint);
        break;
    }
    }
    if (failed)
        fprintf(f, "<path d=\"M%.1f %.1fL%.1f %.1fM%.1f %.1fL%.1f %.1f\" stroke=\"%s\" "
                   "stroke-width=\"1.5\"/>",
                x - 2.5, y - 2.5, x + 2.5, y + 2.5, x - 2.5, y + 2.5, x + 2.5, y - 2.5, c);
}

void rep_svg_h1_lk(FILE *f, const char *id, const char *title, const rep_lk_point *p, size_t n,
                   const rep_lk_axes *ax)
{
    /* Lk 0 in a band left of the log axis (x0..xa), ratio 0 in one below it and inf above,
     * each with a dotted edge and its label, so that none reads as a value on an axis. */
    const double x0 = 80, x1 = W_SVG - 20, y1 = TOP, y0 = TOP + 260, band = 24;
    const double xa = x0 + band, ya = y0 - band, yb = y1 + band;
    const double h = y0 + 50 + 2 * LEGEND_ROW + 8;
    const double xlo = ldexp(1, ax->xe0), xhi = ldexp(1, ax->xe1);
    open_svg(f, id, h, title);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#444\"/>\n"
               "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#444\"/>\n",
            x0, y0, x1, y0, x0, y0, x0, y1);
    /* Lk: a grid line and tick at every power of two, a label at every step-th from the first
     * (about ten) and at the last, where the one before it would stand too close. */
    const int np = ax->xe1 - ax->xe0 + 1, step = (np + 9) / 10;
    for (int e = ax->xe0; e <= ax->xe1; e++) {
        double px = scale(ldexp(1, e), xlo, xhi, 1, xa, x1);
        int labelled = e == ax->xe1 || ((e - ax->xe0) % step == 0 && ax->xe1 - e >= step);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e4e4e4\"/>"
                   "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#444\"/>",
                px, y1, px, y0, px, y0, px, y0 + (labelled ? 6 : 3));
        if (labelled)
            fprintf(f, "<text class=\"xt\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%.0f"
                       "</text>",
                    px, y0 + 17, ldexp(1, e));
        fputc('\n', f);
    }
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#bbb\" "
               "stroke-dasharray=\"2 3\"/><text class=\"xt\" x=\"%.1f\" y=\"%.1f\" "
               "text-anchor=\"middle\" fill=\"#666\">0</text>\n",
            x0 + 2 * band / 3, y1, x0 + 2 * band / 3, y0, x0 + band / 3, y0 + 17);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">Lk (keys), log scale: a grid "
               "line at every power of two</text>\n",
            (x0 + x1) / 2, y0 + 34);
    log_ticks(f, ax->ylo, ax->yhi, 1, ya, yb, x0, x1);
    for (int b = 0; b < 2; b++) {
        double edge = b ? y1 + 2 * band / 3 : y0 - 2 * band / 3;
        double mid = b ? y1 + band / 3 : y0 - band / 3;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#bbb\" "
                   "stroke-dasharray=\"2 3\"/><text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" "
                   "fill=\"#666\">%s</text>\n",
                x0, edge, x1, edge, x0 - 8, mid + 4, b ? "inf" : "0");
    }
    double lim = scale(1, ax->ylo, ax->yhi, 1, ya, yb);
    fprintf(f, "<line class=\"limit\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
               "stroke=\"#d62728\" stroke-dasharray=\"6 4\"/>\n",
            xa, lim, x1, lim);
    fprintf(f, "<text x=\"14\" y=\"%.1f\" transform=\"rotate(-90 14 %.1f)\" "
               "text-anchor=\"middle\">H1 ratio, log scale (limit 1)</text>\n",
            (y0 + y1) / 2, (y0 + y1) / 2);
    /* Passed rows first, so that a failed row's outline is never hidden under them. */
    for (int failed = 0; failed <= 1; failed++)
        for (size_t i = 0; i < n; i++) {
            const rep_lk_point *q = &p[i];
            if (!!q->failed != failed)
                continue;
            double r = isnan(q->ratio) ? INFINITY : q->ratio;
            int off_x = !(q->lk > 0), off_y = !(r > 0 && isfinite(r));
            double px = off_x ? x0 + band / 3 : scale(q->lk, xlo, xhi, 1, xa, x1);
            double py = !off_y ? scale(r, ax->ylo, ax->yhi, 1, ya, yb)
                        : r <= 0 ? y0 - band / 3 : y1 + band / 3;
            char num[32];
            rep_fmt_num(num, sizeof num, r);
            fprintf(f, "<g class=\"pt fam-%s %s%s\" data-lk=\"%.0f\" data-ratio=\"%s\"><title>",
                    q->family == REP_FAM_BIDIR ? "bidir" : rep_family_name(q->family),
                    failed ? "fail" : "pass", off_x || off_y ? " edge" : "", q->lk, num);
            rep_put_xml(f, q->tip);
            fputs("</title>", f);
            fam_shape(f, q->family, px, py, failed);
            if (off_x || off_y)
                fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"8.5\" fill=\"none\" "
                           "stroke=\"%s\"/>",
                        px, py, fam_color[q->family]);
            fputs("</g>\n", f);
        }
    /* The legend: the families of the whole section (every panel the same), then the rest. */
    double lx = x0, ly = y0 + 50;
    fputs("<g class=\"legend\">", f);
    for (int fam = 0; fam < REP_NFAMILIES; fam++) {
        if (!ax->family[fam])
            continue;
        fam_shape(f, (rep_family)fam, lx + 6, ly - 4, 0);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">%s</text>", lx + 16, ly,
                rep_family_name((rep_family)fam));
        lx += 110;
    }
    ly += LEGEND_ROW;
    fam_shape(f, REP_FAM_CAUSAL, x0 + 6, ly - 4, 1);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">failed</text>", x0 + 16, ly);
    fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"8.5\" fill=\"none\" stroke=\"#444\"/>"
               "<text x=\"%.1f\" y=\"%.1f\">ringed: in a band (Lk 0; ratio 0 or inf)</text>",
            x0 + 86, ly - 4, x0 + 100, ly);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#d62728\" "
               "stroke-dasharray=\"6 4\"/><text x=\"%.1f\" y=\"%.1f\">limit 1</text>\n",
            x0 + 380, ly - 4, x0 + 410, ly - 4, x0 + 416, ly);
    fputs("</g>\n</svg>\n", f);
}
