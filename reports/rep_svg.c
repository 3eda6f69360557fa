/*
 * rep_svg.c - the two chart shapes the HTML report needs, as inline SVG: a strip plot (one
 * row of dots per dtype/backend, for distributions) and a log-log line chart (error against
 * Lk or W). Plain SVG 1.1 elements only; a hover title on each dot is the only interaction.
 */
#include <math.h>

#include "reports/rep_internal.h"

#define W_SVG 760.0
#define TOP 34.0
#define BOTTOM 46.0

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

static void open_svg(FILE *f, double h, const char *title)
{
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
               "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\" font-size=\"11\" "
               "role=\"img\">\n<title>",
            W_SVG, h, W_SVG, h);
    rep_put_xml(f, title);
    fputs("</title>\n<text x=\"8\" y=\"18\" font-size=\"13\" font-weight=\"bold\">", f);
    rep_put_xml(f, title);
    fputs("</text>\n", f);
}

/* Tick marks and labels along the x axis at y, plus the axis title. */
static void x_axis(FILE *f, double lo, double hi, int logs, double x0, double x1, double y,
                   double ytop, const char *label)
{
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#444\"/>\n", x0,
            y, x1, y);
    if (logs) {
        for (int e = (int)ceil(log10(lo) - 1e-9); e <= (int)floor(log10(hi) + 1e-9); e++) {
            double px = scale(pow(10, e), lo, hi, 1, x0, x1);
            fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                       "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">1e%d</text>\n",
                    px, ytop, px, y, px, y + 14, e);
        }
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

void rep_svg_strips(FILE *f, const char *title, const char *xlabel, const rep_strip *s,
                    size_t ns, double lo, double hi, int logx, double mark)
{
    const double x0 = 190, x1 = W_SVG - 20, row = 26;
    double h = TOP + row * (double)(ns ? ns : 1) + BOTTOM, yaxis = h - BOTTOM;
    open_svg(f, h, title);
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

/* Smallest decade range [lo, hi] holding every positive value, at least one decade wide. */
static void decades(double mn, double mx, double *lo, double *hi)
{
    if (!(mn > 0 && mx >= mn)) {
        *lo = 1;
        *hi = 10;
        return;
    }
    *lo = pow(10, floor(log10(mn)));
    *hi = pow(10, ceil(log10(mx)));
    if (*hi <= *lo)
        *hi = *lo * 10;
}

static void y_axis_log(FILE *f, double lo, double hi, double x0, double x1, double y0, double y1,
                       const char *label)
{
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#444\"/>\n", x0,
            y0, x0, y1);
    for (int e = (int)ceil(log10(lo) - 1e-9); e <= (int)floor(log10(hi) + 1e-9); e++) {
        double py = scale(pow(10, e), lo, hi, 1, y0, y1);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                   "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">1e%d</text>\n",
                x0, py, x1, py, x0 - 4, py + 4, e);
    }
    fprintf(f, "<text x=\"12\" y=\"%.1f\" transform=\"rotate(-90 12 %.1f)\" "
               "text-anchor=\"middle\">",
            (y0 + y1) / 2, (y0 + y1) / 2);
    rep_put_xml(f, label);
    fputs("</text>\n", f);
}

void rep_svg_lines(FILE *f, const char *title, const char *xlabel, const char *ylabel,
                   const rep_series *s, size_t ns)
{
    const double x0 = 70, x1 = W_SVG - 190, h = 320, y0 = h - BOTTOM, y1 = TOP;
    double xmn = INFINITY, xmx = 0, ymn = INFINITY, ymx = 0, xlo, xhi, ylo, yhi;
    for (size_t k = 0; k < ns; k++)
        for (size_t i = 0; i < s[k].n; i++) {
            double x = s[k].x[i], y = s[k].y[i];
            if (isnan(y))
                continue;
            if (x > 0) {
                xmn = fmin(xmn, x);
                xmx = fmax(xmx, x);
            }
            if (y > 0 && isfinite(y)) {
                ymn = fmin(ymn, y);
                ymx = fmax(ymx, y);
            }
        }
    decades(xmn, xmx, &xlo, &xhi);
    decades(ymn, ymx, &ylo, &yhi);
    open_svg(f, h, title);
    x_axis(f, xlo, xhi, 1, x0, x1, y0, y1, xlabel);
    y_axis_log(f, ylo, yhi, x0, x1, y0, y1, ylabel);
    for (size_t k = 0; k < ns; k++) {
        const char *color = palette[k % NPAL];
        int open = 0;
        for (size_t i = 0; i < s[k].n; i++) {
            double y = s[k].y[i];
            if (isnan(y)) { /* a gap: this series has no row there */
                if (open)
                    fputs("\"/>\n", f);
                open = 0;
                continue;
            }
            if (!open)
                fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" points=\"",
                        color);
            fprintf(f, "%s%.1f,%.1f", open ? " " : "", scale(s[k].x[i], xlo, xhi, 1, x0, x1),
                    scale(y, ylo, yhi, 1, y0, y1));
            open = 1;
        }
        if (open)
            fputs("\"/>\n", f);
        for (size_t i = 0; i < s[k].n; i++)
            if (!isnan(s[k].y[i]))
                fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"><title>%g: "
                           "%.4g</title></circle>\n",
                        scale(s[k].x[i], xlo, xhi, 1, x0, x1), scale(s[k].y[i], ylo, yhi, 1, y0, y1),
                        color, s[k].x[i], s[k].y[i]);
        double ly = TOP + 8 + 18 * (double)k;
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"4\" fill=\"%s\"/>"
                   "<text x=\"%.1f\" y=\"%.1f\">",
                x1 + 16, ly - 4, color, x1 + 34, ly + 1);
        rep_put_xml(f, s[k].label);
        fputs("</text>\n", f);
    }
    fputs("</svg>\n", f);
}
