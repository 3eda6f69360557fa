/*
 * cmd_bench.c - 'flexcheck bench [blockmask|ref|all] [options]': benchmarks are programs that
 * print ratios measured side by side in one run, never pass/fail (machines are shared and
 * noisy). Each part lives in cli/bench_<part>.c.
 */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

typedef struct bench_part {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} bench_part;

static const bench_part parts[] = {
    {"blockmask", bench_blockmask, "slow vs direct block-mask builders (ratio)"},
    {"ref", bench_ref, "reference attention GFLOP/s vs plain sgemm of the same sizes"},
    {"kernel", bench_kernel, "kernel time next to the fp32 reference (emu: CPU throughput)"},
};
#define NPARTS (sizeof parts / sizeof parts[0])

static void usage(FILE *f)
{
    fprintf(f, "usage: flexcheck bench [PART] [options]\n\nparts (default: all):\n");
    for (size_t i = 0; i < NPARTS; i++)
        fprintf(f, "  %-10s %s\n", parts[i].name, parts[i].summary);
    fprintf(f, "\n'flexcheck bench PART --help' lists each part's options.\n");
}

int cmd_bench(int argc, char **argv)
{
    if (argc >= 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        usage(stdout);
        return CLI_PASS;
    }
    if (argc < 2 || !strcmp(argv[1], "all")) {
        int rc = CLI_PASS;
        for (size_t i = 0; i < NPARTS; i++) {
            char *sub[] = {(char *)parts[i].name, NULL};
            int r = parts[i].run(1, sub);
            if (r > rc)
                rc = r;
        }
        return rc;
    }
    for (size_t i = 0; i < NPARTS; i++)
        if (!strcmp(argv[1], parts[i].name))
            return parts[i].run(argc - 1, argv + 1);
    usage(stderr);
    return cli_usage_error("bench", "unknown part '%s'", argv[1]);
}
