/*
 * fuzz_file.c - libFuzzer target for the fixture reader as the commands run it: each input is
 * a file on disk opened with fix_open (libhdf5's default driver, the path of check, repro and
 * fill; fuzz_reader opens images in memory through the core driver), every case read under a
 * memory budget that counts libhdf5's own scratch, and checked when small.
 *
 * Its seeds (make fuzz) are whole files, up to 1 MiB: the committed sets (the PyTorch-written
 * ones hold variable-length strings in global heaps, which our generator never writes) and
 * tests/hostile/make_hostile.sh's four files, two that crash libhdf5 1.10.8 and two it reads
 * past a heap buffer on without crashing (H5HG_read, H5O__msg_iterate_real), which only a
 * sanitizer sees (tests/fuzz/README.md). Those are libhdf5's: the target runs in fork mode past
 * crashes, and tests/fuzz/triage.sh fails only on a crash in our code.
 *
 *   make fuzz                        (builds it with clang, makes the seeds, runs FUZZ_SECONDS)
 *   build/fuzz/fuzz_file CORPUS build/fuzz/seeds-file -max_len=1048576
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/fuzz/fuzz_cases.h"

/* Besides fuzz_cases.h's limits, a case's memory budget small enough that a file cannot make
 * libhdf5 or us allocate more than a fuzzing machine has (the budget counts libhdf5's chunk map
 * and inflated chunks before any read). */
#define FUZZ_BUDGET ((uint64_t)256 << 20)

/* The input's file, named by the process (fork mode runs several), in FUZZ_FILE_DIR (make fuzz
 * sets a folder of its own, emptied before and after the run: a crashed run leaves its file)
 * or TMPDIR; removed at a normal exit. (Not an unlinked file named through /proc/self/fd:
 * H5Fopen resolves the link to the deleted name and fails.) */
static int g_fd = -1;
static char g_path[512];

static void remove_file(void)
{
    unlink(g_path);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *d = getenv("FUZZ_FILE_DIR");
    if (!d || !*d)
        d = getenv("TMPDIR");
    snprintf(g_path, sizeof g_path, "%s/fuzz_file.%d.h5", d && *d ? d : "/tmp", (int)getpid());
    g_fd = open(g_path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (g_fd < 0) {
        perror(g_path);
        abort();
    }
    atexit(remove_file);
    return 0;
}

/* The whole input as the file's contents. */
static int put(const uint8_t *data, size_t size)
{
    if (ftruncate(g_fd, 0) != 0)
        return -1;
    for (size_t off = 0; off < size;) {
        ssize_t w = pwrite(g_fd, data + off, size - off, (off_t)off);
        if (w <= 0)
            return -1;
        off += (size_t)w;
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (put(data, size)) {
        perror("fuzz_file: writing the input");
        abort();
    }
    fix_file f;
    fc_err err;
    if (fix_open(g_path, &f, &err))
        return 0;
    f.max_bytes = FUZZ_MAX_BYTES;
    f.budget.max_bytes = FUZZ_BUDGET;
    f.budget.max_work = (uint64_t)FUZZ_MAX_WORK * 64;
    fuzz_read_every_case(&f);
    return 0;
}
