/*
 * cmd_bench.c - 'flexcheck bench [PART|all] [options]': benchmarks are programs that
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
    int alone; /* only when named: too long for "all" */
} bench_part;

static const bench_part parts[] = {
    {"blockmask", bench_blockmask, "direct block-mask builder per listed block, beside slow", 0},
    {"ref", bench_ref, "reference attention GFLOP/s vs plain sgemm of the same sizes", 0},
    {"kernel", bench_kernel, "kernel time next to the fp32 reference (emu: CPU throughput)", 0},
    {"judge", bench_judge, "judging one output in process next to the float64 oracle alone", 0},
    {"long", bench_long, "gen and check of a Gemma-3-27B-shaped 128k dump (only when named:\n"
                         "             about 20 minutes)", 1},
};
#define NPARTS (sizeof parts / sizeof parts[0])

/* The parts, for --help. */
static void print_parts(FILE *f)
{
    fprintf(f, "parts (default: all):\n");
    for (size_t i = 0; i < NPARTS; i++)
        fprintf(f, "  %-10s %s\n", parts[i].name, parts[i].summary);
    fprintf(f, "\n'flexcheck bench PART --help' lists each part's options.\n");
}

int cmd_bench(int argc, char **argv)
{
    /* "all" (or nothing) runs every part with its defaults: it takes no options, which go
     * after a part's name, so anything after it is refused below rather than dropped. */
    int all = argc < 2 || !strcmp(argv[1], "all");
    if (all && argc <= 2) {
        int rc = CLI_PASS;
        for (size_t i = 0; i < NPARTS; i++) {
            if (parts[i].alone)
                continue;
            char *sub[] = {(char *)parts[i].name, NULL};
            int r = parts[i].run(1, sub);
            if (r > rc)
                rc = r;
        }
        return rc;
    }
    for (size_t i = 0; i < NPARTS && !all; i++)
        if (!strcmp(argv[1], parts[i].name))
            return parts[i].run(argc - 1, argv + 1);
    /* Not a part: --help, or a mistake. bench has no options of its own, so the table is
     * empty: an option is a part's given before its name (or with all), anything else an
     * unknown part (a lone "--" too). */
    char names[128] = "", unknown[256]; /* names: "blockmask, ref, kernel" */
    for (size_t i = 0, n = 0; i < NPARTS; i++)
        n += (size_t)snprintf(names + n, sizeof names - n, "%s%s", i ? ", " : "", parts[i].name);
    snprintf(unknown, sizeof unknown, "unknown option '%%s' for bench: options go after a part, "
             "'flexcheck bench PART [options]' (PART one of %s)", names);
    const char *first = argv[1];
    const cli_spec spec = {
        .cmd = "bench",
        .usage = "usage: flexcheck bench [PART] [options]\n",
        .more = print_parts,
        .max_operands = CLI_ANY,
        .unknown = unknown,
        .exit_status = "exit status: 0 measured, 1 a benchmark's own check failed, 2 bad input.",
    };
    int nops, rc = cli_parse(&spec, argc - all, argv + all, &nops);
    if (rc != CLI_GO)
        return rc;
    if (all)
        return cli_usage_error("bench", "all takes no options: '%s' (they go after a part, one "
                               "of %s)", argv[2], names);
    return cli_usage_error("bench", "unknown part '%s' (one of %s, all)", first, names);
}
