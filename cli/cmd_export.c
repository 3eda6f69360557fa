/*
 * cmd_export.c - 'flexcheck export --out DIR': the gate's matrix (the same size, seed, filter
 * and shard options as `flexcheck gate`) as fixture files, one per case (ci/export.h), for an
 * outside kernel to run and `flexcheck check` to judge.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ci/export.h"
#include "cli/cli.h"

static const char *const CMD = "export";

int cmd_export(int argc, char **argv)
{
    int size = GATE_DEFAULT, force = 0, quick = 0, full = 0; /* quick, full: given */
    int32_t shard[2] = {1, 1}, seed = 1;
    const char *filter = NULL, *out = NULL;
    const cli_opt opts[] = {
        {.name = "quick", .help = "the quick matrix (default: the default size)",
         .kind = CLI_K_FLAG, .dst = &size, .lo = GATE_QUICK, .seen = &quick},
        {.name = "full", .help = "the full matrix (default: the default size)",
         .kind = CLI_K_FLAG, .dst = &size, .lo = GATE_FULL, .seen = &full},
        CLI_STR("filter", "PATTERN", "a case id (or a report row's, ID@...): that case alone;\n"
                "else the ids containing it, or matching it as a glob (* ? [])",
                &filter),
        CLI_FN("shard", "I/N", "the I-th of N disjoint parts (1 <= I <= N <= "
               CLI_TEXT(CLI_SHARD_MAX) "), as the gate's", cli_parse_shard, shard),
        CLI_INT("seed", "S", "matrix seed (default 1)", &seed, 0, INT32_MAX),
        CLI_STR("out", "DIR", "where the files go (created if missing; required)", &out),
        CLI_FLAG("force", "replace files that exist", &force, 1),
    };
    const cli_spec spec = {
        .cmd = CMD,
        .usage = "usage: flexcheck export --out DIR [--quick|--full] [--filter P] [--shard I/N] "
                 "[--seed S] [--force]\n",
        .intro = "Writes every selected case of the gate's matrix as a fixture file "
                 "DIR/<case id>.h5:\n"
                 "inputs, the float64 oracle and the slow builder's block mask, one fixture case\n"
                 "per dtype the gate runs it in (window-edge cases also at W-1 and W+1; layout\n"
                 "cases as layout files, one case per layer). Run a kernel on them, store its\n"
                 "outputs under tested/<label> (python/: flexcheck.add_tested), then\n"
                 "'flexcheck check DIR/*.h5 --report R'.\n",
        .opts = opts,
        .nopts = sizeof opts / sizeof opts[0],
        .unknown = "unknown option '%s' (--help lists them)",
        .exit_status = "exit status: 0 written, 2 bad input or a failed write.",
    };
    int nops, rc = cli_parse(&spec, argc, argv, &nops);
    if (rc == CLI_GO)
        rc = cli_exclusive(CMD, "--quick", quick, "--full", full);
    if (rc != CLI_GO)
        return rc;
    if (!out)
        return cli_usage_error(CMD, "--out DIR is required (--help)");
    gate_case *all;
    int nall;
    fc_err err;
    if (gate_matrix((gate_size)size, (uint64_t)seed, &all, &nall, NULL, &err))
        return cli_usage_error(CMD, "%s", err.msg);
    int n = cli_select_cases(CMD, all, nall, gate_size_name((gate_size)size), filter, shard, 1);
    if (n == 0) { /* the message is out */
        free(all);
        return CLI_BADINPUT;
    }
    /* Made once there are cases to write, so bad input leaves no empty directory behind. */
    if (mkdir(out, 0777) != 0 && errno != EEXIST) {
        int e = errno;
        free(all);
        if (e != ENOENT)
            return cli_usage_error(CMD, "%s: cannot create: %s", out, strerror(e));
        char parent[1024]; /* one level is made, not a path of them: say which is missing */
        snprintf(parent, sizeof parent, "%s", out);
        size_t len = strlen(parent);
        while (len > 1 && parent[len - 1] == '/')
            parent[--len] = '\0';
        char *slash = strrchr(parent, '/');
        if (slash)
            *(slash == parent ? slash + 1 : slash) = '\0';
        return cli_usage_error(CMD, "%s: cannot create it: the directory %s does not exist", out,
                               slash ? parent : ".");
    }
    gate_export_stats st = {0};
    rc = CLI_PASS;
    for (int i = 0; i < n; i++) {
        if (gate_export_case(&all[i], out, force, &st, &err)) {
            rc = cli_usage_error(CMD, "%s", err.msg);
            break;
        }
        if ((i + 1) % 25 == 0 || i + 1 == n)
            fprintf(stderr, "export: %d/%d files written (%d fixture cases so far)\n", i + 1, n,
                    st.cases);
    }
    printf("export: %s matrix, seed %d, shard %d/%d: %d files, %d fixture cases, %.1f MiB in %s\n",
           gate_size_name((gate_size)size), (int)seed, (int)shard[0], (int)shard[1], st.files,
           st.cases, (double)st.bytes / (1 << 20), fc_esc(out).s);
    free(all);
    return rc;
}
