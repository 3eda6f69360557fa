/*
 * cmd_gen.c - 'flexcheck gen': write fixtures (spec/fixtures.md) with the float64 oracle.
 *   flexcheck gen --set small --out-dir DIR [--force]      the committed set
 *   flexcheck gen --case [shape/mask flags] --out FILE [--force]   one described case
 *   flexcheck gen --case ... --layout NAME --out FILE      that case through a model layout
 * Seeded and reproducible: the same flags give the same file, byte for byte. An existing file
 * is never overwritten without --force, and a failed run leaves no file behind.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "fixtures/fix.h"
#include "masks/layout.h"

static const char *const CMD = "gen";

static void usage(FILE *f)
{
    fprintf(f,
            "usage: flexcheck gen --set small --out-dir DIR [--force]\n"
            "       flexcheck gen --case --out FILE [--force] [options]\n\n"
            "  --set NAME        write the named set (small: the committed fixtures/sets/)\n"
            "  --case            one case described by the options below\n"
            "  --out FILE        the file to write (--case); --out-dir DIR for --set\n"
            "  --force           overwrite an existing file\n"
            "  --name NAME       case name (default c0001)\n"
            "  --b N --hq N --hkv N --lq N --lk N --d N --dv N\n"
            "                    shapes (defaults 1, 2, Hq, 128, Lq, 64, D)\n"
            "  --dtype T         float32 (default), float16 or bfloat16\n"
            "  --causal          causal mask\n"
            "  --window W        sliding window (0 = off)\n"
            "  --chunk C         chunked local attention (0 = off)\n"
            "  --qb N --kb N     block sizes of the stored block mask (default 128)\n"
            "  --packed LIST     packed batch: cu_seqlens for q and k, e.g. \"0,3,7\" (B = 1)\n"
            "  --packed-k LIST   cu_seqlens_k when it differs from cu_seqlens_q\n"
            "  --scale S         softmax scale (default 1/sqrt(D))\n"
            "  --seed N          PRNG seed (default 0)\n"
            "  --no-block-mask   do not store the slow builder's block mask\n"
            "  --layout NAME     a layout file: the case through every layer of NAME\n"
            "  --layers N        with --layout: first N layers (default the model's)\n"
            "  --scale-div N     with --layout: divide the config window/chunk by N\n");
}

/* "0,3,7" -> cu[0..n), n <= FIX_GEN_MAX_SEQ + 1. */
static int parse_cu(const char *opt, const char *s, int32_t *cu, int32_t *n)
{
    int32_t k = 0;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (errno || end == p || v < 0 || v > MASK_MAX_LEN || k > FIX_GEN_MAX_SEQ ||
            (*end != ',' && *end != '\0')) {
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
    int32_t lk_set, hkv_set, dv_set, nk, layers, scale_div;
} gen_opts;

typedef struct int_opt {
    const char *name;
    size_t off; /* offsetof into gen_opts */
    int32_t lo, hi;
} int_opt;

#define GO(f) offsetof(gen_opts, f)
static const int_opt int_opts[] = {
    {"--b", GO(gp.b), 1, 1 << 16},
    {"--hq", GO(gp.hq), 1, ATTN_MAX_HEADS},
    {"--hkv", GO(gp.hkv), 1, ATTN_MAX_HEADS},
    {"--lq", GO(gp.lq), 0, MASK_MAX_LEN},
    {"--lk", GO(gp.lk), 0, MASK_MAX_LEN},
    {"--d", GO(gp.d), 1, ATTN_MAX_HEAD_DIM},
    {"--dv", GO(gp.dv), 1, ATTN_MAX_HEAD_DIM},
    {"--window", GO(gp.mask.sliding_window), 0, INT32_MAX},
    {"--chunk", GO(gp.mask.chunk_size), 0, INT32_MAX},
    {"--qb", GO(gp.qb), BMASK_MIN_BLOCK, BMASK_MAX_BLOCK},
    {"--kb", GO(gp.kb), BMASK_MIN_BLOCK, BMASK_MAX_BLOCK},
    {"--layers", GO(layers), 1, LAYOUT_MAX_LAYERS},
    {"--scale-div", GO(scale_div), 1, 1 << 20},
};

/* 1 matched, 0 not an int option, -1 error. */
static int parse_int_opt(gen_opts *o, int argc, char **argv, int *i)
{
    for (size_t k = 0; k < sizeof int_opts / sizeof int_opts[0]; k++) {
        const char *v;
        int r = cli_opt(CMD, argc, argv, i, int_opts[k].name, &v);
        if (r == 0)
            continue;
        int32_t *dst = (int32_t *)((char *)o + int_opts[k].off);
        if (r < 0 || cli_parse_i32(CMD, int_opts[k].name, v, int_opts[k].lo, int_opts[k].hi, dst))
            return -1;
        o->lk_set |= !strcmp(int_opts[k].name, "--lk");
        o->hkv_set |= !strcmp(int_opts[k].name, "--hkv");
        o->dv_set |= !strcmp(int_opts[k].name, "--dv");
        return 1;
    }
    return 0;
}

/* Options with values that are not plain int32. 1 matched, 0 not, -1 error. */
static int parse_other_opt(gen_opts *o, int argc, char **argv, int *i)
{
    const char *v;
    int r;
    if ((r = cli_opt(CMD, argc, argv, i, "--set", &v)) != 0)
        return r < 0 ? -1 : (o->set = v, 1);
    if ((r = cli_opt(CMD, argc, argv, i, "--out", &v)) != 0)
        return r < 0 ? -1 : (o->out = v, 1);
    if ((r = cli_opt(CMD, argc, argv, i, "--out-dir", &v)) != 0)
        return r < 0 ? -1 : (o->out_dir = v, 1);
    if ((r = cli_opt(CMD, argc, argv, i, "--name", &v)) != 0)
        return r < 0 ? -1 : (o->gp.name = v, 1);
    if ((r = cli_opt(CMD, argc, argv, i, "--layout", &v)) != 0)
        return r < 0 ? -1 : (o->layout = v, 1);
    if ((r = cli_opt(CMD, argc, argv, i, "--dtype", &v)) != 0) {
        if (r < 0)
            return -1;
        if (fc_dtype_parse(v, &o->gp.dtype))
            return cli_usage_error(CMD, "--dtype '%s': float32, float16 or bfloat16", v), -1;
        return 1;
    }
    if ((r = cli_opt(CMD, argc, argv, i, "--scale", &v)) != 0) {
        if (r < 0 || cli_parse_f64(CMD, "--scale", v, &o->gp.scale))
            return -1;
        if (!(o->gp.scale > 0))
            return cli_usage_error(CMD, "--scale %s: must be > 0", v), -1;
        return 1;
    }
    if ((r = cli_opt(CMD, argc, argv, i, "--seed", &v)) != 0) {
        char *end;
        errno = 0;
        if (r < 0)
            return -1;
        o->gp.seed = strtoull(v, &end, 10);
        if (errno || end == v || *end || v[0] == '-')
            return cli_usage_error(CMD, "--seed '%s': not an unsigned integer", v), -1;
        return 1;
    }
    if ((r = cli_opt(CMD, argc, argv, i, "--packed", &v)) != 0)
        return r < 0 || parse_cu("--packed", v, o->gp.cu_q, &o->gp.nseq) ? -1 : 1;
    if ((r = cli_opt(CMD, argc, argv, i, "--packed-k", &v)) != 0)
        return r < 0 || parse_cu("--packed-k", v, o->gp.cu_k, &o->nk) ? -1 : 1;
    return 0;
}

static int parse_flag(gen_opts *o, const char *a)
{
    if (!strcmp(a, "--case"))
        o->is_case = 1;
    else if (!strcmp(a, "--force"))
        o->force = 1;
    else if (!strcmp(a, "--causal"))
        o->gp.mask.causal = 1;
    else if (!strcmp(a, "--no-block-mask"))
        o->gp.with_bmask = 0;
    else
        return 0;
    return 1;
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
            printf("wrote %s\n", o->out);
    }
    if (st)
        return cli_usage_error(CMD, "%s", err.msg);
    return CLI_PASS;
}

int cmd_gen(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) {
        usage(stdout);
        return CLI_PASS;
    }
    gen_opts o;
    memset(&o, 0, sizeof o);
    o.gp = (fix_gen_params){.name = "c0001", .dtype = FC_F32, .b = 1, .hq = 2, .lq = 128,
                            .d = 64, .with_bmask = 1};
    o.scale_div = 1;
    for (int i = 1; i < argc; i++) {
        int r = parse_flag(&o, argv[i]);
        if (!r)
            r = parse_int_opt(&o, argc, argv, &i);
        if (!r)
            r = parse_other_opt(&o, argc, argv, &i);
        if (r < 0)
            return CLI_BADINPUT;
        if (!r)
            return cli_usage_error(CMD, "unexpected argument '%s' (--help)", argv[i]);
    }
    if (!o.set == !o.is_case)
        return cli_usage_error(CMD, "give exactly one of --set NAME or --case (--help)");
    if (o.is_case && finish_case(&o))
        return CLI_BADINPUT;
    return run(&o);
}
