/*
 * fc.h - what every flexcheck module shares: status codes, the error message carrier and
 * the dtype enum. Host only (C11). Library functions return a status and fill an fc_err;
 * only the CLI's main() turns that into an exit code (2 for bad input, 1 for a failed gate).
 */
#ifndef FLEXCHECK_FC_H
#define FLEXCHECK_FC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum fc_status {
    FC_OK = 0,
    FC_EINVAL = 1,  /* bad parameter or bad input data: the message names it */
    FC_ENOMEM = 2,  /* allocation failed or a size product overflowed */
    FC_EIO = 3,     /* a file could not be read or written */
    FC_EUNSUP = 4,  /* valid but not supported by this implementation */
    FC_EFAIL = 5,   /* a check ran and found a mismatch (not an input error) */
    FC_ECANCELED = 6, /* stopped at the caller's request (base/cancel.h) */
} fc_status;

/* One-line error message; functions that fail write it, callers print it. */
typedef struct fc_err {
    char msg[512];
} fc_err;

/* printf into err->msg (err may be NULL). Returns `st`, so `return fc_errf(err, FC_EINVAL, ...)`. */
fc_status fc_errf(fc_err *err, fc_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* snprintf for messages: truncation is acceptable and silent (a one-line message that is cut
 * is still a message). Always terminates when cap > 0. */
void fc_fmt(char *dst, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

typedef enum fc_dtype { FC_F32 = 0, FC_F16 = 1, FC_BF16 = 2 } fc_dtype;

/* src as one line of printable ASCII in dst: backslash as \\, newline, tab and carriage return
 * as \n, \t, \r, any other byte outside printable ASCII as \xNN (non-ASCII too: a message is
 * plain ASCII whatever a file holds). Always terminated; cut before an escape that would not
 * fit, never inside one. For names and text read from files, which must not split a one-line
 * message or forge a line of their own (a case named "c0\nPASS"). dst and src may not overlap.
 * (reports/rep_esc.c escapes for JSON, XML, CSV and Markdown, each its own way, onto a FILE.) */
void fc_esc_line(char *dst, size_t cap, const char *src);
/* The same escapes with the backslash left as it is: for a whole message about to be printed,
 * which may already hold names escaped by fc_esc_line (it leaves them unchanged) and may hold
 * a value nobody escaped (a command-line argument quoted in an error), so that no raw control
 * character ever reaches a terminal or a log. */
void fc_esc_ctrl(char *dst, size_t cap, const char *src);

/* fc_esc_line into a buffer that lives to the end of the full expression that calls it, for
 * printf: printf("case %s of %s\n", fc_esc(c->name).s, fc_esc(path).s). Room for a whole path
 * (PATH_MAX) escaped. */
typedef struct fc_esc_buf {
    char s[4096];
} fc_esc_buf;

static inline fc_esc_buf fc_esc(const char *s)
{
    fc_esc_buf b;
    fc_esc_line(b.s, sizeof b.s, s);
    return b;
}

/* "float32", "float16", "bfloat16" (the fixture spellings). */
const char *fc_dtype_name(fc_dtype dt);
/* Parses the fixture spellings; returns FC_EINVAL for anything else. */
fc_status fc_dtype_parse(const char *s, fc_dtype *out);

/* Overflow-checked size arithmetic: return 0 and set *out, or return -1 on overflow. */
int fc_mul_size(size_t a, size_t b, size_t *out);
int fc_mul3_size(size_t a, size_t b, size_t c, size_t *out);
int fc_mul4_size(size_t a, size_t b, size_t c, size_t d, size_t *out);

#ifdef __cplusplus
}
#endif

#endif
