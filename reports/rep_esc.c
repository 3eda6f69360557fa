/*
 * rep_esc.c - escaping for each report format. Strings in rows come from case ids, builder
 * names and error messages, which may hold anything, so every writer goes through here.
 */
#include <math.h>
#include <string.h>

#include "reports/rep_internal.h"

void rep_put_json(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\t': fputs("\\t", f); break;
        default:
            /* Other control characters must be \u escapes; DEL and bytes >= 0x80 (UTF-8)
             * are legal as they are. */
            if (*p < 0x20)
                fprintf(f, "\\u%04x", *p);
            else
                fputc(*p, f);
        }
    }
    fputc('"', f);
}

void rep_put_xml(FILE *f, const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&#39;", f); break;
        case '\t': case '\n': case '\r': fprintf(f, "&#%d;", *p); break;
        default:
            /* XML 1.0 cannot carry other control characters even as references. */
            fputc(*p < 0x20 ? '?' : *p, f);
        }
    }
}

void rep_put_csv(FILE *f, const char *s)
{
    if (!strpbrk(s, ",\"\r\n")) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (const char *p = s; *p; p++) {
        if (*p == '"')
            fputc('"', f);
        fputc(*p, f);
    }
    fputc('"', f);
}

void rep_put_md(FILE *f, const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '\n' || *p == '\r' || *p == '\t' || *p < 0x20)
            fputc(' ', f); /* a table cell is one line */
        else if (strchr("\\`*_[]<>|&~", *p))
            fprintf(f, "\\%c", *p); /* CommonMark: any ASCII punctuation may be escaped */
        else
            fputc(*p, f);
    }
}

void rep_fmt_num(char *buf, size_t cap, double x)
{
    if (isnan(x))
        snprintf(buf, cap, "-");
    else if (isinf(x))
        snprintf(buf, cap, "%s", x > 0 ? "inf" : "-inf");
    else
        snprintf(buf, cap, "%.3g", x);
}
