/* fc.c - status/error helpers, dtype names and overflow-checked sizes (fc.h). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/fc.h"

fc_status fc_errf(fc_err *err, fc_status st, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return st;
}

void fc_fmt(char *dst, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(dst, cap, fmt, ap);
    va_end(ap);
}

static void esc(char *dst, size_t cap, const char *src, int keep_backslash)
{
    static const char hex[] = "0123456789abcdef";
    if (!cap)
        return;
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)src; *p; p++) {
        char e[5] = {(char)*p, 0};
        if ((*p == '\\' && !keep_backslash) || *p == '\n' || *p == '\t' || *p == '\r') {
            e[0] = '\\';
            e[1] = *p == '\\' ? '\\' : *p == '\n' ? 'n' : *p == '\t' ? 't' : 'r';
        } else if (*p < 0x20 || *p > 0x7e) {
            e[0] = '\\';
            e[1] = 'x';
            e[2] = hex[*p >> 4];
            e[3] = hex[*p & 15];
        }
        size_t len = strlen(e);
        if (n + len >= cap)
            break; /* cut before an escape, never inside one */
        memcpy(dst + n, e, len);
        n += len;
    }
    dst[n] = '\0';
}

void fc_esc_line(char *dst, size_t cap, const char *src)
{
    esc(dst, cap, src, 0);
}

void fc_esc_ctrl(char *dst, size_t cap, const char *src)
{
    esc(dst, cap, src, 1);
}

static const char *const dtype_names[] = {"float32", "float16", "bfloat16"};

const char *fc_dtype_name(fc_dtype dt)
{
    return (unsigned)dt < 3 ? dtype_names[dt] : "?";
}

fc_status fc_dtype_parse(const char *s, fc_dtype *out)
{
    for (int i = 0; i < 3; i++)
        if (s && !strcmp(s, dtype_names[i])) {
            *out = (fc_dtype)i;
            return FC_OK;
        }
    return FC_EINVAL;
}

int fc_mul_size(size_t a, size_t b, size_t *out)
{
    if (a != 0 && b > SIZE_MAX / a)
        return -1;
    *out = a * b;
    return 0;
}

int fc_mul3_size(size_t a, size_t b, size_t c, size_t *out)
{
    size_t t;
    return fc_mul_size(a, b, &t) || fc_mul_size(t, c, out) ? -1 : 0;
}

int fc_mul4_size(size_t a, size_t b, size_t c, size_t d, size_t *out)
{
    size_t t;
    return fc_mul3_size(a, b, c, &t) || fc_mul_size(t, d, out) ? -1 : 0;
}
