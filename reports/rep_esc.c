/*
 * rep_esc.c - escaping for each report format. Strings in rows come from case ids, builder
 * names and error messages, which may hold anything, so every writer goes through here.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "reports/rep_internal.h"

/* Length of the well-formed UTF-8 sequence at p (RFC 3629: no overlong form, no surrogate,
 * nothing above U+10FFFF), or 0. Stops at the first byte that does not fit, so it never reads
 * past the string's NUL. */
static size_t utf8_seq(const unsigned char *p)
{
    size_t n;
    unsigned lo = 0x80, hi = 0xBF; /* the range of the second byte */
    if (p[0] < 0x80)
        return 1;
    if (p[0] >= 0xC2 && p[0] <= 0xDF) {
        n = 2;
    } else if (p[0] >= 0xE0 && p[0] <= 0xEF) {
        n = 3;
        lo = p[0] == 0xE0 ? 0xA0 : 0x80; /* overlong */
        hi = p[0] == 0xED ? 0x9F : 0xBF; /* surrogates */
    } else if (p[0] >= 0xF0 && p[0] <= 0xF4) {
        n = 4;
        lo = p[0] == 0xF0 ? 0x90 : 0x80; /* overlong */
        hi = p[0] == 0xF4 ? 0x8F : 0xBF; /* above U+10FFFF */
    } else {
        return 0;
    }
    if (p[1] < lo || p[1] > hi)
        return 0;
    for (size_t i = 2; i < n; i++)
        if (p[i] < 0x80 || p[i] > 0xBF)
            return 0;
    return n;
}

void rep_put_json(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        size_t n = 1; /* bytes consumed */
        switch (*p) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\t': fputs("\\t", f); break;
        default:
            /* Other control characters must be \u escapes; DEL is legal as it is. */
            if (*p < 0x20)
                fprintf(f, "\\u%04x", *p);
            else if (*p < 0x80)
                fputc(*p, f);
            else if ((n = utf8_seq(p)) > 0)
                fwrite(p, 1, n, f);
            else {
                fputc('?', f);
                n = 1;
            }
        }
        p += n;
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

/* The cell as RFC 4180 has it, after `lead` (a byte put before it, 0 for none). */
static void put_csv_escaped(FILE *f, char lead, const char *s);

/* A cell of one line: control characters (and non-ASCII bytes, and the backslash) escaped as
 * every message escapes them (fc_esc_line: \n, \t, \xNN, \\), so a CI log or terminal that
 * shows rows.csv sees no raw control character; commas and quotes quoted as CSV does. */
static void put_csv_cell(FILE *f, char lead, const char *raw)
{
    size_t cap = 4 * strlen(raw) + 1;
    char *s = malloc(cap);
    if (!s) { /* nothing to escape with: leave the cell empty rather than raw */
        fputs("\"\"", f);
        return;
    }
    fc_esc_line(s, cap, raw);
    put_csv_escaped(f, lead, s);
    free(s);
}

static void put_csv_escaped(FILE *f, char lead, const char *s)
{
    if (!strpbrk(s, ",\"")) {
        if (lead)
            fputc(lead, f);
        fputs(s, f);
        return;
    }
    fputc('"', f);
    if (lead)
        fputc(lead, f);
    for (const char *p = s; *p; p++) {
        if (*p == '"')
            fputc('"', f);
        fputc(*p, f);
    }
    fputc('"', f);
}

void rep_put_csv(FILE *f, const char *s)
{
    put_csv_cell(f, 0, s);
}

/* A spreadsheet opening rows.csv takes a cell that starts with = + - @ (or a tab or CR, which
 * some strip first) as a formula, and a case id, producer or reason can be anything a fixture
 * file or a rows.json says (`=HYPERLINK(...)`, `@SUM(...)`): such a text cell gets a leading
 * ' , which shows it as the text it is (OWASP's advice for CSV injection). A cell that already
 * starts with ' gets one too, so the mapping stays one to one: a reader that wants the exact
 * value drops one leading ' from a text cell that has one and undoes put_csv_cell's escapes
 * (rows.json holds it as it is). */
void rep_put_csv_text(FILE *f, const char *s)
{
    put_csv_cell(f, s[0] && strchr("=+-@\t\r'", s[0]) ? '\'' : 0, s);
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

void rep_put_num(FILE *f, double x)
{
    char buf[32];
    rep_fmt_num(buf, sizeof buf, x);
    fputs(buf, f);
}
