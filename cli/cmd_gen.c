/*
 * cmd_gen.c - 'flexcheck gen': write fixtures (docs/fixtures.md) with the float64 oracle.
 *   flexcheck gen --set small --out-dir DIR [--force]      the committed set
 *   flexcheck gen --case [shape/mask flags] --out FILE [--force]   one described case
 *   flexcheck gen --case ... --layout NAME --out FILE      that case through a model layout
 * Seeded and reproducible: the same flags give the same file, byte for byte. An existing file
 * is never overwritten without --force, and a failed run leaves no file behind.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "fixtures/fix.h"
#include "masks/layout.h"

static const char *const CMD = "gen";

/* "0,3,7" -> cu[0..n), n <= FIX_GEN_MAX_SEQ + 1. */
static int parse_cu(const char *opt, const char *s, int32_t *cu, int32_t *n)
{
    int32_t k = 0;
    const char *p = s;
    while (*p) {
        size_t len = strcspn(p, ",");
        const char *end = p + len;
        long long v;
        if (cli_decimal(p, len, &v) || v < 0 || v > MASK_MAX_LEN || k > FIX_GEN_MAX_SEQ) {
            cli_usage_error(CMD, "%s '%s': need 2 to %d comma-separated lengths in [0, %d]", opt,
                            s, FIX_GEN_MAX_SEQ + 1, MASK_MAX_LEN);
            return -1;
        }
        cu[k++] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    if (k < 2) {
        cli_usage_error(CMD, "%s '%s': need at least 2 entries", opt, s);
        return -1;
    }
    *n = k;
    return 0;
}

typedef struct gen_opts {
    fix_gen_params gp;
    const char *set, *out, *out_dir, *layout;
    int is_case, force;
    int b_set, lq_set, lk_set, hkv_set, dv_set, layers_set, scale_div_set, softcap_set; /* given */
    int32_t nk, layers, scale_div;
    size_t max_memory, max_work; /* the case's budget (0: the defaults) */
    const char *sinks_file;      /* --sinks FILE, read once Hq is known */
    float sinks[ATTN_MAX_HEADS];
} gen_opts;

static int parse_dtype(const char *cmd, const char *opt, const char *v, void *dst)
{
    if (fc_dtype_parse(v, dst))
        return cli_usage_error(cmd, "%s '%s': float32, float16 or bfloat16", opt, v), -1;
    return 0;
}

static int parse_scale(const char *cmd, const char *opt, const char *v, void *dst)
{
    double *scale = dst;
    if (cli_parse_f64(cmd, opt, v, scale))
        return -1;
    if (!(*scale > 0))
        return cli_usage_error(cmd, "%s %s: must be > 0", opt, v), -1;
    return 0;
}

static int parse_offset(const char *cmd, const char *opt, const char *v, void *dst)
{
    double *x = dst;
    if (cli_parse_f64(cmd, opt, v, x))
        return -1;
    if (!isfinite(*x))
        return cli_usage_error(cmd, "%s %s: must be finite", opt, v), -1;
    return 0;
}

static int parse_packed(const char *cmd, const char *opt, const char *v, void *dst)
{
    gen_opts *o = dst;
    return parse_cu(opt, v, o->gp.cu_q, &o->gp.nseq);
}

static int parse_packed_k(const char *cmd, const char *opt, const char *v, void *dst)
{
    gen_opts *o = dst;
    return parse_cu(opt, v, o->gp.cu_k, &o->nk);
}

static int parse_softcap(const char *cmd, const char *opt, const char *v, void *dst)
{
    double *c = dst;
    if (cli_parse_f64(cmd, opt, v, c))
        return -1;
    fc_err err;
    score_terms t = {*c, NULL};
    if (terms_check(&t, 0, &err))
        return cli_usage_error(cmd, "%s: %s", opt, err.msg), -1;
    return 0;
}

/* --sinks SEED (digits: drawn in [FIX_SINK_LO, FIX_SINK_HI]) or FILE (read in finish_case). */
static int parse_sinks(const char *cmd, const char *opt, const char *v, void *dst)
{
    gen_opts *o = dst;
    o->gp.sinks = 1;
    if (v[0] && strspn(v, "0123456789") == strlen(v))
        return cli_parse_seed(cmd, opt, v, &o->gp.sinks_seed);
    o->sinks_file = v;
    return 0;
}

/* The Hq sinks of --sinks FILE: numbers separated by white space or commas, exactly Hq. */
static int read_sinks_file(gen_opts *o)
{
    struct stat sb;
    if (stat(o->sinks_file, &sb) == 0 && !S_ISREG(sb.st_mode))
        return cli_usage_error(CMD, "--sinks %s: %s", o->sinks_file,
                               S_ISDIR(sb.st_mode) ? "is a directory" : "not a regular file");
    FILE *f = fopen(o->sinks_file, "r");
    if (!f)
        return cli_usage_error(CMD, "--sinks %s: %s", o->sinks_file, strerror(errno));
    int32_t n = 0, hq = o->gp.hq;
    char tok[64];
    int rc = 0;
    while (!rc && fscanf(f, " %63[^ \t\r\n,]%*[ \t\r\n,]", tok) == 1) {
        char what[FIX_TEXT_MAX + 32];
        double x;
        fc_fmt(what, sizeof what, "--sinks %s: value %d", o->sinks_file, (int)n);
        if (cli_parse_f64(CMD, what, tok, &x)) /* decimal only, as on the command line */
            rc = -1;
        else if (n >= hq)
            rc = cli_usage_error(CMD, "--sinks %s: more than Hq = %d values", o->sinks_file,
                                 (int)hq);
        else
            o->sinks[n++] = (float)x;
    }
    fclose(f);
    if (!rc && n != hq)
        rc = cli_usage_error(CMD, "--sinks %s: %d values, need Hq = %d (one per query head)",
                             o->sinks_file, (int)n, (int)hq);
    o->gp.sink_values = o->sinks;
    return rc;
}

/* The layout's own refusals (name, --layers, --scale-div) before anything is drawn, and mask
 * options or score terms it would replace on some layer (fix_gen_layer_params: a model's own
 * cap and scale are the layer's; --softcap and --scale stand only where the model has none). */
static int check_layout(const gen_opts *o)
{
    layout_layer layers[LAYOUT_MAX_LAYERS];
    int32_t n;
    fc_err err;
    if (layout_get(o->layout, o->layers, o->scale_div, layers, LAYOUT_MAX_LAYERS, &n, &err) ||
        layout_check_mask(o->layout, layers, 0, n, &o->gp.mask, &err))
        return cli_usage_error(CMD, "%s", err.msg);
    for (int32_t i = 0; i < n; i++) { /* the same to 1e-6: a value printed with %g is one */
        if (o->gp.scale > 0 && layers[i].scale > 0 &&
            !(fabs(layers[i].scale - o->gp.scale) <= 1e-6 * layers[i].scale))
            return cli_usage_error(CMD, "--scale %g with --layout %s: the layout sets the scale "
                                   "(layer %d has %g)", o->gp.scale, o->layout, (int)i,
                                   layers[i].scale);
        if (o->softcap_set && layers[i].softcap > 0 &&
            !(fabs(layers[i].softcap - o->gp.softcap) <= 1e-6 * layers[i].softcap))
            return cli_usage_error(CMD, "--softcap %g with --layout %s: the layout sets the "
                                   "soft-cap (layer %d has %g)", o->gp.softcap, o->layout,
                                   (int)i, layers[i].softcap);
    }
    return 0;
}

/* Fills derived defaults (Lk = Lq, Hkv = Hq, Dv = D) and the packed layout. */
static int finish_case(gen_opts *o)
{
    fix_gen_params *gp = &o->gp;
    if (!o->lk_set)
        gp->lk = gp->lq;
    if (!o->hkv_set)
        gp->hkv = gp->hq;
    if (!o->dv_set)
        gp->dv = gp->d;
    if (gp->nseq == 0 && o->nk)
        return cli_usage_error(CMD, "--packed-k needs --packed");
    /* A packed batch is one sequence list with B = 1 and its own lengths: --lq and --lk would
     * be ignored, and so would --b other than 1. */
    int b_other = o->b_set && gp->b != 1;
    if (gp->nseq && (b_other || o->lq_set || o->lk_set))
        return cli_usage_error(CMD, "--%s %d with --packed: the packed sequences give the "
                               "lengths, with B = 1", b_other ? "b" : o->lq_set ? "lq" : "lk",
                               (int)(b_other ? gp->b : o->lq_set ? gp->lq : gp->lk));
    if (!o->layout && (o->layers_set || o->scale_div_set))
        return cli_usage_error(CMD, "%s %d needs --layout NAME",
                               o->layers_set ? "--layers" : "--scale-div",
                               (int)(o->layers_set ? o->layers : o->scale_div));
    if (o->layout && check_layout(o))
        return CLI_BADINPUT;
    if (o->sinks_file && read_sinks_file(o))
        return CLI_BADINPUT;
    if (gp->nseq) {
        int32_t n = gp->nseq; /* entries so far */
        if (o->nk && o->nk != n)
            return cli_usage_error(CMD, "--packed has %d entries, --packed-k %d", (int)n,
                                   (int)o->nk);
        if (!o->nk)
            memcpy(gp->cu_k, gp->cu_q, sizeof(int32_t) * (size_t)n);
        gp->nseq = n - 1;
        gp->b = 1;
    }
    return 0;
}

static int run(const gen_opts *o)
{
    fc_err err;
    fc_status st;
    if (o->set) {
        if (!o->out_dir)
            return cli_usage_error(CMD, "--set needs --out-dir DIR");
        st = fix_gen_set(o->set, o->out_dir, o->force, 1, &err);
    } else {
        if (!o->out)
            return cli_usage_error(CMD, "--case needs --out FILE");
        if (o->layout)
            st = fix_gen_layout(o->out, o->layout, o->layers, o->scale_div, &o->gp, o->force,
                                &err);
        else
            st = fix_gen_file(o->out, &o->gp, 1, o->force, &err);
        if (!st)
            printf("wrote %s\n", fc_esc(o->out).s);
    }
    if (st)
        return cli_usage_error(CMD, "%s", err.msg);
    return CLI_PASS;
}

int cmd_gen(int argc, char **argv)
{
    gen_opts o;
    memset(&o, 0, sizeof o);
    o.gp = (fix_gen_params){.name = "c0001", .dtype = FC_F32, .b = 1, .hq = 2, .lq = 128,
                            .d = 64, .with_bmask = 1};
    o.scale_div = 1;
    fix_gen_params *gp = &o.gp;
    /* --hkv, --lk and --dv note that they were given: unless they were, Hkv, Lk and Dv follow
     * Hq, Lq and D (finish_case). */
    const cli_opt opts[] = {
        CLI_STR("set", "NAME", "write the named set (small: the committed fixtures/sets/)",
                &o.set),
        CLI_FLAG("case", "one case described by the options below", &o.is_case, 1),
        CLI_STR("out", "FILE", "the file to write (--case)", &o.out),
        CLI_STR("out-dir", "DIR", "the directory to write the set into (--set)", &o.out_dir),
        CLI_FLAG("force", "overwrite an existing file", &o.force, 1),
        CLI_STR("name", "NAME", "case name (default c0001)", &gp->name),
        CLI_INT_SEEN("b", "N", "batch size (default 1)", &gp->b, 1, 1 << 16,
                     &o.b_set),
        CLI_INT("hq", "N", "query heads (default 2)", &gp->hq, 1, ATTN_MAX_HEADS),
        CLI_INT_SEEN("hkv", "N", "key/value heads (default Hq)", &gp->hkv, 1, ATTN_MAX_HEADS,
                     &o.hkv_set),
        CLI_INT_SEEN("lq", "N", "query length (default 128)", &gp->lq, 0, MASK_MAX_LEN,
                     &o.lq_set),
        CLI_INT_SEEN("lk", "N", "key length (default Lq)", &gp->lk, 0, MASK_MAX_LEN,
                     &o.lk_set),
        CLI_INT("d", "N", "head dim of q and k (default 64)", &gp->d, 1, ATTN_MAX_HEAD_DIM),
        CLI_INT_SEEN("dv", "N", "head dim of v (default D)", &gp->dv, 1, ATTN_MAX_HEAD_DIM,
                     &o.dv_set),
        CLI_FN("dtype", "T", "float32 (default), float16 or bfloat16", parse_dtype, &gp->dtype),
        CLI_MASK_OPTS(&gp->mask),
        CLI_INT("qb", "N", "query block size of the stored block mask (default 128)", &gp->qb,
                BMASK_MIN_BLOCK, BMASK_MAX_BLOCK),
        CLI_INT("kb", "N", "key block size of the stored block mask (default 128)", &gp->kb,
                BMASK_MIN_BLOCK, BMASK_MAX_BLOCK),
        CLI_FN("packed", "LIST", "packed batch: cu_seqlens for q and k, e.g. \"0,3,7\" (B = 1;\n"
               "instead of --lq and --lk)", parse_packed, &o),
        CLI_FN("packed-k", "LIST", "cu_seqlens_k when it differs from cu_seqlens_q",
               parse_packed_k, &o),
        CLI_FN("scale", "S", "softmax scale (default 1/sqrt(D))", parse_scale, &gp->scale),
        CLI_FN("score-offset", "X", "shift every score by about X, their differences those of\n"
               "the normal draw (-1e5: the matrix's very negative logits)", parse_offset,
               &gp->score_offset),
        CLI_FN("seed", "N", "PRNG seed (default 0)", cli_parse_seed, &gp->seed),
        {score_term_table[TERM_SOFTCAP].opt, "C", score_term_table[TERM_SOFTCAP].help, CLI_K_FN,
         &gp->softcap, 0, 0, parse_softcap, &o.softcap_set}, /* --softcap 0 (off) is given too */
        CLI_FN(score_term_table[TERM_SINKS].opt, "SEED|FILE", score_term_table[TERM_SINKS].help,
               parse_sinks, &o),
        CLI_FLAG("no-block-mask", "do not store the slow builder's block mask", &gp->with_bmask,
                 0),
        CLI_FLAG("no-oracle", "compute and store no out/lse: a dump as an engine gives it\n"
                 "(check computes the oracle of the rows it judges; no --max-work)",
                 &gp->no_oracle, 1),
        CLI_FN("max-memory", "BYTES", "refuse a case whose estimated memory exceeds this (K, M,\n"
               "G, T suffixes)", cli_parse_bytes, &o.max_memory),
        CLI_FN("max-work", "N", "refuse a case needing more than N multiply-adds (K, M, G, T\n"
               "suffixes, powers of 1024; default 1T = 2^40)", cli_parse_count, &o.max_work),
        CLI_STR("layout", "NAME", "a layout file: the case through every layer of NAME, each\n"
                "with the layer's mask (instead of --causal, --window and --chunk)\n"
                "and the model's soft-cap, scale and sinks where it has them\n"
                "(--softcap and --scale stand for the layers that have none; other\n"
                "values are refused; layer i draws its sinks from the --sinks seed\n"
                "(default 0) + i)", &o.layout),
        CLI_INT_SEEN("layers", "N",
                     "with --layout: first N layers (default and at most the model's)",
                     &o.layers, 1, LAYOUT_MAX_LAYERS, &o.layers_set),
        CLI_INT_SEEN("scale-div", "N",
                     "with --layout: divide the config window/chunk by N (default 1)",
                     &o.scale_div, 1, 1 << 20, &o.scale_div_set),
    };
    cli_given given = {0};
    const cli_spec spec = {
        .cmd = CMD,
        .usage = "usage: flexcheck gen --set small --out-dir DIR [--force]\n"
                 "       flexcheck gen --case --out FILE [--force] [options]\n",
        .intro = "Writes fixtures (docs/fixtures.md) with the float64 oracle, reproducibly: the\n"
                 "same options give the same bytes. An existing file is kept unless --force.\n",
        .opts = opts,
        .nopts = sizeof opts / sizeof opts[0],
        .unknown = "unexpected argument '%s' (--help)",
        .exit_status = "exit status: 0 written, 2 bad input or the file could not be written.",
        .given = &given,
    };
    int nops, rc = cli_parse(&spec, argc, argv, &nops);
    if (rc != CLI_GO)
        return rc;
    if (!o.set == !o.is_case)
        return cli_usage_error(CMD, "give exactly one of --set NAME or --case (--help)");
    /* Each mode writes to its own destination; the other's would be ignored. */
    if (o.is_case && o.out_dir)
        return cli_usage_error(CMD, "--out-dir %s with --case: a case is written to --out FILE",
                               o.out_dir);
    if (o.set && (o.out || o.layout))
        return cli_usage_error(CMD, "%s %s with --set: %s", o.out ? "--out" : "--layout",
                               o.out ? o.out : o.layout,
                               o.out ? "a set is written to --out-dir DIR"
                                     : "a layout file is a --case");
    /* A set's cases are fixed: an option that describes one --case would be ignored. */
    static const char *const set_opts[] = {"set", "out-dir", "force"};
    for (int g = 0; o.set && g < given.n; g++) {
        size_t k = 0;
        while (k < sizeof set_opts / sizeof set_opts[0] && strcmp(given.name[g], set_opts[k]))
            k++;
        if (k == sizeof set_opts / sizeof set_opts[0])
            return cli_usage_error(CMD, "--%s with --set: a set's cases are fixed (the options "
                                   "describe one --case)", given.name[g]);
    }
    o.gp.budget = (fix_budget){.max_bytes = o.max_memory, .max_work = o.max_work};
    if (o.is_case && finish_case(&o))
        return CLI_BADINPUT;
    return run(&o);
}
