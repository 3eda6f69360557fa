/*
 * emut_main.c - driver of the emu's sanitizer builds (build/emu-asan/emut, build/emu-race/emut):
 * runs the self-test checks, or one planted bug, under ASan/UBSan or the race checker.
 *
 *   emut all             every check of emut_check.c (the clean kernels); exit 1 if one fails
 *   emut planted NAME    one planted bug of emut_planted.cu; a sanitizer should stop it first
 */
#include "tests/emu/emut.h"

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    char why[1024];
    if (argc == 2 && !strcmp(argv[1], "all")) {
        int failed = 0;
        for (int i = 0; i < emut_nchecks; i++) {
            why[0] = 0;
            int bad = emut_checks[i].fn(why, sizeof why);
            printf("%s %s%s%s\n", bad ? "FAIL" : "ok  ", emut_checks[i].name, bad ? ": " : "", why);
            failed |= bad;
        }
        return failed;
    }
    if (argc == 3 && !strcmp(argv[1], "planted")) {
        int e = emut_planted_emu(argv[2]);
        printf("planted %s: launch returned %d\n", argv[2], e);
        return e ? 3 : 0;
    }
    fprintf(stderr, "usage: %s all | planted NAME\n", argv[0]);
    return 2;
}
