/*
 * cmd_repro.c - 'flexcheck repro FILE --case NAME': one case told in full, for an engineer
 * holding a dump of a bad layer. What is told is library code (check/repro.h: our kernel run
 * twice, or the output stored under --tested LABEL, judged; every gate, the worst elements, a
 * row's allowed keys and block lists, the diagnosis, the rerun command); this command parses
 * the options, picks the case and tells it in a child process (cli/isolate.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check/repro.h"
#include "cli/cli.h"
#include "cli/isolate.h"

static const char *const CMD = "repro";

typedef struct repro_opts {
    const char *file, *name, *builder_s, *dtype_s, *backend_s, *label, *row_s;
    int32_t kernel, worst;
    int kernel_given;
    long long row[3];   /* --row B,H,Q */
    int32_t rows;       /* --rows (fix_budget.rows): 0, every row, by default */
    uint64_t rows_seed; /* --rows-seed */
    cli_iso iso; /* the file is read and judged in a child under this limit */
} repro_opts;

/* "B,H,Q": three decimal integers, as every number option (cli_decimal); their range is the
 * case's, checked when it is read (chk_repro_case). -1 and a message otherwise. */
static int parse_row(const char *s, long long v[3])
{
    const char *at = s;
    for (int k = 0; k < 3; k++) {
        size_t len = strcspn(at, ",");
        if (cli_decimal(at, len, &v[k]) || (k < 2) != (at[len] == ','))
            return cli_usage_error(CMD, "--row '%s': want B,H,Q (three integers)", s), -1;
        at += len + (k < 2);
    }
    return 0;
}

/* Returns CLI_GO or the exit status (help printed, or bad input). */
static int parse(int argc, char **argv, repro_opts *o)
{
    memset(o, 0, sizeof *o);
    o->kernel = GPU_DEFAULT_KERNEL;
    o->worst = 5;
    o->iso.max_memory = CLI_ISO_DEFAULT_MAX_MEMORY;
    o->rows_seed = FIX_ROWS_SEED;
    const cli_opt opts[] = {
        CLI_STR("case", "NAME", "the case to tell (required when FILE holds more than one)",
                &o->name),
        CLI_STR("backend", "B", "emu (default) or gpu", &o->backend_s),
        CLI_INT_SEEN("kernel", "K",
                     "kernel version, 1, 2 or 3 (default 2)",
                     &o->kernel, 1, GPU_MAX_KERNEL, &o->kernel_given),
        CLI_STR("builder", "B", "slow | direct | superset | superset-trim; default: the block\n"
                "mask stored in the case, else direct", &o->builder_s),
        CLI_STR("dtype", "T", "float32 | float16 | bfloat16: rerun in another precision (inputs\n"
                "rounded to it, oracle recomputed)", &o->dtype_s),
        CLI_INT("worst", "N", "how many worst elements to list (default 5)", &o->worst, 1, 1000),
        CLI_STR("tested", "LABEL", "judge the output stored under tested/LABEL instead of\n"
                "running our kernel", &o->label),
        CLI_STR("row", "B,H,Q", "explain this output row (batch entry, query head, query\n"
                "token) instead of the worst one", &o->row_s),
        CLI_FN("max-memory", "BYTES", "the file is read and judged in a child process limited\n"
               "to this much address space (K, M, G, T suffixes)",
               cli_parse_bytes, &o->iso.max_memory),
        CLI_FN("max-work", "N", "refuse a case needing more than N multiply-adds (K, M, G, T\n"
               "suffixes, powers of 1024; default 1T = 2^40)", cli_parse_count, &o->iso.max_work),
        CLI_FN("rows", "N|all|auto", "with --tested: judge a sample of N query tokens, as check\n"
               "--rows does (default all; auto: a sample only past the budgets)",
               cli_parse_rows, &o->rows),
        CLI_FN("rows-seed", "S", "the seed of a sample's uniform part (default "
               CLI_TEXT(FIX_ROWS_SEED) ")", cli_parse_seed, &o->rows_seed),
    };
    const cli_spec spec = {
        .cmd = CMD,
        .usage = "usage: flexcheck repro FILE [--case NAME] [options]\n",
        .opts = opts,
        .nopts = sizeof opts / sizeof opts[0],
        .max_operands = 1,
        .unknown = "unexpected argument '%s' (--help)",
        .exit_status = "exit status: 0 the case passes, 1 it fails a gate, 2 bad input.",
    };
    int nops, rc = cli_parse(&spec, argc, argv, &nops);
    if (rc != CLI_GO)
        return rc;
    o->file = nops ? argv[1] : NULL;
    if (!o->file)
        return cli_usage_error(CMD, "need FILE (and --case NAME when it holds several; --help)");
    /* What runs our kernel has nothing to act on when --tested judges a stored output. */
    const char *runs = o->dtype_s ? "--dtype" : o->builder_s ? "--builder"
                     : o->backend_s ? "--backend" : o->kernel_given ? "--kernel" : NULL;
    if (o->label && runs)
        return cli_usage_error(CMD, "%s does not apply with --tested, which judges a stored "
                               "output (--dtype, --builder, --backend and --kernel run our "
                               "kernel)", runs);
    if (o->rows && !o->label) /* the kernel computes every row: a sample has no q for it */
        return cli_usage_error(CMD, "--rows judges a sample of a stored output (--tested LABEL); "
                               "our kernel computes every row");
    if (o->row_s && parse_row(o->row_s, o->row))
        return CLI_BADINPUT;
    return CLI_GO;
}

/* The case --case names, or the file's only case; a file of several without --case is refused
 * listing (the first 10 of) them. Returns the index, or -1 with the message printed. */
static int pick_case(const fix_file *f, const repro_opts *o)
{
    if (o->name) {
        int i = fix_find_case(f, o->name);
        if (i < 0)
            cli_usage_error(CMD, "%s: no case named '%s'", o->file, fc_esc(o->name).s);
        return i;
    }
    if (f->ncases == 1)
        return 0;
    char list[10 * (4 * FIX_NAME_MAX + 2) + 64]; /* ten names, escaped (4 bytes a byte at most) */
    size_t n = 0;
    for (int i = 0; i < f->ncases && i < 10; i++)
        n += (size_t)snprintf(list + n, sizeof list - n, "%s%s", i ? ", " : "",
                              fc_esc(f->names[i]).s);
    if (f->ncases > 10)
        snprintf(list + n, sizeof list - n, ", ... (%d more)", f->ncases - 10);
    cli_usage_error(CMD, "%s holds %d cases: name one with --case NAME (%s)", o->file,
                    f->ncases, list);
    return -1;
}

typedef struct repro_job {
    repro_opts *o;
    gpu_backend be;
} repro_job;

/* The file read and the case told, in the child (cli/isolate.h): the exit status. */
static int repro_file(void *arg, cli_iso_chan *ch)
{
    (void)ch;
    repro_job *j = arg;
    repro_opts *o = j->o;
    fc_err err;
    char msg[sizeof err.msg + 96];
    fix_file f;
    fc_status st = fix_open(o->file, &f, &err);
    if (st)
        return cli_usage_error(CMD, "%s", cli_iso_errmsg(st, err.msg, msg, sizeof msg));
    f.budget = cli_iso_budget(&o->iso);
    f.budget.rows = o->rows;
    f.budget.rows_seed = o->rows_seed;
    f.oracle_compute = 1; /* a dump without out/lse: the oracle of the rows judged, computed */
    int i = pick_case(&f, o);
    if (i < 0) {
        fix_close(&f);
        return CLI_BADINPUT;
    }
    fix_case c;
    mask_params prev; /* a layout file's previous layer, for the diagnosis */
    int has_prev = 0;
    st = chk_repro_read(&f, i, &c, &prev, &has_prev, &err);
    fix_close(&f);
    if (st)
        return cli_usage_error(CMD, "%s", cli_iso_errmsg(st, err.msg, msg, sizeof msg));
    cli_iso_set_phase(CLI_ISO_JUDGING);
    chk_repro_opts ro = {.file = o->file, .builder = o->builder_s, .dtype = o->dtype_s,
                         .label = o->label, .be = j->be, .kernel = o->kernel, .worst = o->worst,
                         .row = o->row_s, .rows = o->rows, .rows_seed = o->rows_seed};
    memcpy(ro.row_bhq, o->row, sizeof ro.row_bhq);
    int rc = chk_repro_case(&c, has_prev ? &prev : NULL, &ro, stdout, &err);
    if (rc < 0)
        rc = cli_usage_error(CMD, "%s", err.msg);
    fix_case_free(&c);
    return rc == 1 ? CLI_FAIL : rc;
}

int cmd_repro(int argc, char **argv)
{
    repro_opts o;
    int prc = parse(argc, argv, &o);
    if (prc != CLI_GO)
        return prc;
    repro_job job = {&o, GPU_BACKEND_EMU};
    fc_err err;
    if (o.backend_s && gpu_backend_parse(o.backend_s, &job.be))
        return cli_usage_error(CMD, "--backend '%s': emu or gpu", o.backend_s);
    if (!cli_backend_available(job.be, &err)) /* CUDA only in the file's child */
        return cli_usage_error(CMD, "--backend %s: %s", o.backend_s, err.msg);
    fc_dtype dt;
    if (o.dtype_s && fc_dtype_parse(o.dtype_s, &dt))
        return cli_usage_error(CMD, "--dtype '%s': float32, float16 or bfloat16", o.dtype_s);
    o.iso.data_limit = job.be == GPU_BACKEND_CUDA;
    cli_iso_result res;
    if (cli_isolated(&o.iso, repro_file, &job, &res, &err))
        return cli_usage_error(CMD, "%s: %s", o.file, err.msg);
    int rc = res.status;
    if (!res.finished || res.exit_status > 0) {
        char msg[512];
        cli_iso_describe(&o.iso, o.file, &res, msg, sizeof msg);
        rc = cli_usage_error(CMD, "%s", msg);
    }
    cli_iso_result_free(&res);
    return rc;
}
