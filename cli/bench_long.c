/*
 * bench_long.c - 'flexcheck bench long': a Gemma-3-27B-shaped layer (32 query heads, 16 KV
 * heads, D 128, bfloat16) written as a dump and checked with default flags, at lengths up to
 * 131,072 tokens, a local layer (causal W 1024) and a global one (causal): what an engineer
 * holding a 128k dump pays (issue 36's target: check <= 10 minutes and <= 4 GiB each on the
 * 2-core machine). Each step runs as `flexcheck gen` / `flexcheck check` in a child process, as
 * a user would run it: its wall time and peak resident memory (wait4's ru_maxrss, which takes
 * in the child's own children: check reads each file in one) are what is printed.
 *
 *   flexcheck bench long                            8k, 32k, 128k; local and global
 *   flexcheck bench long --lens 8192 --hq 8 --hkv 4
 *
 * The dump holds no oracle and no block mask (`gen --no-oracle --no-block-mask`): check
 * computes the oracle of the rows it judges, every row when the case fits the default budgets,
 * else a sample (docs/tolerance.md "Judging a sample"); the line says which. The dump's output
 * under test is none: the check is the reference's own (recomputing what it judges), the cost
 * that bounds judging any output of it. Never pass/fail on time: machines are shared and noisy.
 */
#define _DEFAULT_SOURCE /* wait4: the child's peak RSS, its own children's included */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"

#define CMD "bench long"
#define MAX_LENS 8

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Runs argv (argv[0] this binary) with stdout into `out` (NULL: discarded); its wall seconds
 * and peak RSS in MiB. The exit status, -1 when it could not run or died of a signal. */
static int run_child(char *const *argv, const char *out, double *secs, double *mib)
{
    fflush(stdout); /* else the child's copy of the buffer is printed again */
    double t0 = now();
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        FILE *f = freopen(out ? out : "/dev/null", "w", stdout);
        (void)f;
        execv("/proc/self/exe", argv);
        _exit(127);
    }
    int st;
    struct rusage ru;
    if (wait4(pid, &st, 0, &ru) != pid)
        return -1;
    *secs = now() - t0;
    *mib = (double)ru.ru_maxrss / 1024.0; /* KiB on Linux */
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Parses "8192,32768" into lens, each decimal as every number on the command line
 * (cli_decimal); the count, or -1. */
static int parse_lens(const char *s, int32_t *lens)
{
    int n = 0;
    while (n < MAX_LENS) {
        size_t len = strcspn(s, ",");
        long long v;
        if (cli_decimal(s, len, &v) || v < 16 || v > (1LL << 24))
            return -1;
        lens[n++] = (int32_t)v;
        if (!s[len])
            return n;
        s += len + 1;
    }
    return -1;
}

/* The verdict and what was judged, from check's case line: "PASS ...; judged a sample: n of
 * L ..." or every row. */
static void summarise(const char *path, char *verdict, size_t vcap, char *rows, size_t rcap)
{
    snprintf(verdict, vcap, "?");
    snprintf(rows, rcap, "?");
    FILE *f = fopen(path, "r");
    char line[4096];
    while (f && fgets(line, sizeof line, f)) {
        if (strncmp(line, "PASS ", 5) && strncmp(line, "FAIL ", 5) && strncmp(line, "SKIP ", 5))
            continue;
        snprintf(verdict, vcap, "%.4s", line);
        int n, l;
        const char *s = strstr(line, "judged a sample: ");
        if (s && sscanf(s, "judged a sample: %d of %d", &n, &l) == 2)
            snprintf(rows, rcap, "%d of %d tokens", n, l);
        else
            snprintf(rows, rcap, "every row");
        break;
    }
    if (f)
        fclose(f);
}

int bench_long(int argc, char **argv)
{
    int32_t hq = 32, hkv = 16, d = 128, w = 1024;
    const char *lens_s = "8192,32768,131072", *dir_s = NULL, *dtype = "bfloat16";
    int keep = 0;
    const cli_opt table[] = {
        CLI_STR("lens", "L,L,...", "lengths (Lq = Lk; default 8192,32768,131072)", &lens_s),
        CLI_INT("hq", "N", "query heads (default 32)", &hq, 1, 256),
        CLI_INT("hkv", "N", "key/value heads (default 16)", &hkv, 1, 256),
        CLI_INT("d", "N", "head dim (default 128)", &d, 1, 512),
        CLI_INT("window", "W", "the local layer's causal window (default 1024)", &w, 1, 1 << 24),
        CLI_STR("dtype", "T", "bfloat16 (default), float16 or float32", &dtype),
        CLI_STR("dir", "DIR", "where the dumps are written (default a fresh folder in /tmp)",
                &dir_s),
        CLI_FLAG("keep", "keep the dumps", &keep, 1),
    };
    const cli_spec spec = {
        .cmd = CMD,
        .usage = "usage: flexcheck bench long [--lens L,L,...] [--hq N] [--hkv N] [--d N] "
                 "[--window W] [--dtype T] [--dir DIR] [--keep]\n",
        .intro = "A Gemma-3-27B-shaped layer written as a dump (gen --no-oracle) and checked\n"
                 "with default flags, local (causal W) and global (causal), each length: wall\n"
                 "time and peak RSS of each command, and what check judged.\n",
        .opts = table,
        .nopts = sizeof table / sizeof table[0],
        .exit_status = "exit status: 0 measured, 1 a command failed, 2 bad input.",
    };
    int nops, rc = cli_parse(&spec, argc, argv, &nops);
    if (rc != CLI_GO)
        return rc;
    int32_t lens[MAX_LENS];
    int nl = parse_lens(lens_s, lens);
    if (nl < 1)
        return cli_usage_error(CMD, "--lens '%s': up to %d lengths from 16 to 2^24, commas "
                               "between", lens_s, MAX_LENS);
    char dir[256];
    if (dir_s) {
        snprintf(dir, sizeof dir, "%s", dir_s);
    } else {
        snprintf(dir, sizeof dir, "/tmp/flexcheck-long-XXXXXX");
        if (!mkdtemp(dir))
            return cli_usage_error(CMD, "cannot create a folder in /tmp");
    }
    printf("bench long: Hq %d, Hkv %d, D %d, %s, dumps without oracle or block mask, check "
           "with default flags (%s)\n", (int)hq, (int)hkv, (int)d, dtype, dir);
    printf("  %-8s %-16s %8s %9s %9s %8s %9s  %s\n", "L", "layer", "gen s", "gen MiB",
           "file MiB", "check s", "check MiB", "judged");
    double first[2] = {0, 0};
    int failed = 0;
    for (int i = 0; i < nl; i++)
        for (int g = 0; g < 2; g++) { /* local, then global */
            char path[512], out[520], ls[16], hqs[16], hkvs[16], ds[16], ws[16];
            snprintf(path, sizeof path, "%s/%s-%d.h5", dir, g ? "global" : "local", (int)lens[i]);
            snprintf(out, sizeof out, "%s.txt", path);
            snprintf(ls, sizeof ls, "%d", (int)lens[i]);
            snprintf(hqs, sizeof hqs, "%d", (int)hq);
            snprintf(hkvs, sizeof hkvs, "%d", (int)hkv);
            snprintf(ds, sizeof ds, "%d", (int)d);
            snprintf(ws, sizeof ws, "%d", (int)w);
            /* the global layer's list ends at the NULL where the local one's --window is */
            char *gen[] = {"flexcheck", "gen", "--case", "--out", path, "--force", "--hq", hqs,
                           "--hkv", hkvs, "--lq", ls, "--d", ds, "--dtype", (char *)dtype,
                           "--causal", "--no-oracle", "--no-block-mask", "--seed", "1",
                           g ? NULL : "--window", g ? NULL : ws, NULL};
            char *chk[] = {"flexcheck", "check", path, NULL};
            double gs = 0, gm = 0, cs = 0, cm = 0;
            int grc = run_child(gen, NULL, &gs, &gm);
            int crc = grc ? -1 : run_child(chk, out, &cs, &cm);
            struct stat sb;
            double fmib = stat(path, &sb) ? 0 : (double)sb.st_size / (1 << 20);
            char verdict[8], rows[64], layer[32];
            summarise(out, verdict, sizeof verdict, rows, sizeof rows);
            if (g)
                snprintf(layer, sizeof layer, "global causal");
            else
                snprintf(layer, sizeof layer, "local W %d", (int)w);
            if (grc || crc) {
                printf("  %-8d %-16s gen exit %d, check exit %d (%s)\n", (int)lens[i], layer, grc,
                       crc, out);
                failed = 1;
            } else {
                printf("  %-8d %-16s %8.1f %9.0f %9.0f %8.1f %9.0f  %s, %s", (int)lens[i], layer,
                       gs, gm, fmib, cs, cm, verdict, rows);
                if (i == 0)
                    first[g] = cs;
                else if (first[g] > 0)
                    printf(" (check %.1fx the %d-token one)", cs / first[g], (int)lens[0]);
                printf("\n");
            }
            fflush(stdout);
            if (!keep) {
                unlink(path);
                unlink(out);
            }
        }
    if (!keep && !dir_s)
        rmdir(dir);
    return failed ? CLI_FAIL : CLI_PASS;
}
