/*
 * test_tmpdir.h - a fresh temporary directory for each test of a suite, removed after it:
 *
 *   TEST_TMPDIR("filltest")   // defines dir[], make_dir(), remove_dir(), path_of()
 *   TestSuite(fill, .init = make_dir, .fini = remove_dir);
 *
 * path_of("x.h5") is "DIR/x.h5" in one of four buffers used in turn, so four paths can be
 * live at once (a command line naming an input and an output, say).
 */
#ifndef FLEXCHECK_TEST_TMPDIR_H
#define FLEXCHECK_TEST_TMPDIR_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>

#define TEST_TMPDIR(prefix)                                                                    \
    static char dir[64];                                                                       \
    static void make_dir(void)                                                                 \
    {                                                                                          \
        snprintf(dir, sizeof dir, "/tmp/" prefix "-XXXXXX");                                   \
        cr_assert(mkdtemp(dir), "mkdtemp %s", dir);                                            \
    }                                                                                          \
    static void remove_dir(void)                                                               \
    {                                                                                          \
        char cmd[128];                                                                         \
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);                                         \
        (void)!system(cmd);                                                                    \
    }                                                                                          \
    __attribute__((unused)) static const char *path_of(const char *name)                       \
    {                                                                                          \
        static char p[4][128];                                                                 \
        static int k;                                                                          \
        char *s = p[k++ % 4];                                                                  \
        snprintf(s, 128, "%s/%s", dir, name);                                                  \
        return s;                                                                              \
    }

#endif
