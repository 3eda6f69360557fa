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

void fc_esc_line(char *dst, size_t cap, const char *src)
{
    if (!cap)
        return;
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)src; *p; p++) {
        char e[5];
        int len;
        if (*p == '\\' || *p == '\n' || *p == '\t')
            len = snprintf(e, sizeof e, "\\%c", *p == '\n' ? 'n' : *p == '\t' ? 't' : '\\');
        else if (*p < 0x20 || *p == 0x7f)
            len = snprintf(e, sizeof e, "\\x%02x", *p);
        else
            len = snprintf(e, sizeof e, "%c", *p);
        if (n + (size_t)len >= cap)
            break;
        memcpy(dst + n, e, (size_t)len);
        n += (size_t)len;
    }
    dst[n] = '\0';
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
