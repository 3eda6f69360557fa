/*
 * test_lines.h - the line `check` printed for one output under test, for the tests that run
 * the command and read its output:
 *
 *   const char *l = line_of(out, "engine", buf, sizeof buf);   // "FAIL ... tested/engine ..."
 */
#ifndef FLEXCHECK_TEST_LINES_H
#define FLEXCHECK_TEST_LINES_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

/* The line of tested/<label> in check's output, into buf (the test fails when there is none). */
static inline const char *line_of(const char *out, const char *label, char *buf, size_t cap)
{
    char key[96];
    snprintf(key, sizeof key, " tested/%s ", label);
    const char *s = strstr(out, key);
    cr_assert(s, "no line for %s in:\n%s", label, out);
    while (s > out && s[-1] != '\n')
        s--;
    size_t n = strcspn(s, "\n");
    snprintf(buf, cap, "%.*s", (int)(n < cap ? n : cap - 1), s);
    return buf;
}

#endif
