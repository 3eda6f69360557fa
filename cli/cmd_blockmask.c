/*
 * cmd_blockmask.c - 'flexcheck blockmask': build a block mask for given parameters and print it
 * as a grid (F full, P partial, . empty; one line per query block), or as JSON; --diff compares
 * two builders tile by tile (exit 1 when they differ, like diff(1)).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "masks/bmask.h"
#include "cli/cli.h"
#include "masks/layout.h"
#include "masks/problem.h"
#include "masks/seq.h"

static const char *const CMD = "blockmask";

/* "0,3,7" -> array; returns count or -1 (message printed). */
static int parse_list(const char *opt, const char *s, int32_t *out, int max)
{
    int n = 0;
    const char *p = s;
    while (*p) {
        char buf[32];
        size_t len = strcspn(p, ",");
        if (len == 0 || len >= sizeof buf || n >= max) {
            cli_usage_error(CMD, "%s: bad list '%s' (comma-separated integers, at most %d)", opt,
                            s, max);
            return -1;
        }
        memcpy(buf, p, len);
        buf[len] = '\0';
        if (cli_parse_i32(CMD, opt, buf, 0, MASK_MAX_LEN, &out[n++]))
            return -1;
        p += len + (p[len] == ',');
    }
    return n;
}

static char tile_char(const bmask *bm, int32_t r, int32_t c)
{
    size_t row = bmask_row(bm, 0, 0, r);
    for (int32_t j = 0; j < bm->full_kv_num_blocks[row]; j++)
        if (bmask_ids(bm, 1, row)[j] == c)
            return 'F';
    for (int32_t j = 0; j < bm->kv_num_blocks[row]; j++)
        if (bmask_ids(bm, 0, row)[j] == c)
            return 'P';
    return '.';
}

static void print_grid(const bmask *a, const bmask *b)
{
    for (int32_t r = 0; r < a->nqb; r++) {
        printf("%5d ", (int)r);
        for (int32_t c = 0; c < a->nkb; c++) {
            char x = tile_char(a, r, c), y = b ? tile_char(b, r, c) : x;
            /* Where the builders differ, show the second one's kind in lower case. */
            putchar(y == x ? x : y == 'F' ? 'f' : y == 'P' ? 'p' : '-');
        }
        putchar('\n');
    }
}

static void print_ids(const int32_t *ids, int32_t n)
{
    putchar('[');
    for (int32_t j = 0; j < n; j++)
        printf("%s%d", j ? "," : "", (int)ids[j]);
    putchar(']');
}

static void print_json(const bmask *bm, const char *builder, mask_params m)
{
    char mask[192];
    mask_params_text(mask, sizeof mask, &m, MASK_TEXT_JSON);
    printf("{\"builder\":\"%s\",\"lq\":%d,\"lk\":%d,\"q_block_size\":%d,\"kv_block_size\":%d,"
           "%s,\"nqb\":%d,\"nkb\":%d,\"partial\":%lld,\"full\":%lld,\"rows\":[",
           builder, (int)bm->lq, (int)bm->lk, (int)bm->q_block_size, (int)bm->kv_block_size, mask,
           (int)bm->nqb, (int)bm->nkb, (long long)bmask_count_partial(bm),
           (long long)bmask_count_full(bm));
    for (int32_t r = 0; r < bm->nqb; r++) {
        size_t row = bmask_row(bm, 0, 0, r);
        printf("%s{\"partial\":", r ? "," : "");
        print_ids(bmask_ids(bm, 0, row), bm->kv_num_blocks[row]);
        printf(",\"full\":");
        print_ids(bmask_ids(bm, 1, row), bm->full_kv_num_blocks[row]);
        putchar('}');
    }
    printf("]}\n");
}

/* A packed-sequence list, cu_seqlens style (--cu-q, --cu-k). */
typedef struct cu_list {
    int32_t v[1025];
    int n;
} cu_list;

typedef struct opts {
    int32_t lq, lk, qb, kb, layer, scale_div;
    cu_list cu_q, cu_k;
    int json, sound, have_diff;
    int lq_set, lk_set, layer_set, scale_div_set; /* given on the command line */
    const char *layout;
    mask_params m;
    bmask_builder builder, diff;
} opts;

static int parse_cu(const char *cmd, const char *opt, const char *v, void *dst)
{
    cu_list *l = dst;
    return (l->n = parse_list(opt, v, l->v, 1025)) < 0 ? -1 : 0;
}

static int parse_builder(const char *cmd, const char *opt, const char *v, void *dst)
{
    if (bmask_builder_parse(v, dst))
        return cli_usage_error(cmd, "%s: unknown builder '%s'", opt, v), -1;
    return 0;
}

/* Returns CLI_GO or the exit status (help printed, or bad input). */
static int parse(int argc, char **argv, opts *o)
{
    memset(o, 0, sizeof *o);
    o->lq = 1024;
    o->qb = o->kb = 128;
    o->scale_div = 1;
    o->builder = BMASK_DIRECT;
    const cli_opt table[] = {
        CLI_INT_SEEN("lq", "N", "query length (dense, default 1024)", &o->lq, 0, MASK_MAX_LEN,
                     &o->lq_set),
        CLI_INT_SEEN("lk", "N", "key length (dense, default Lq)", &o->lk, 0, MASK_MAX_LEN,
                     &o->lk_set),
        CLI_FN("cu-q", "LIST", "packed sequences: query offsets, e.g. --cu-q 0,100,101\n"
               "(with --cu-k, same length; instead of --lq and --lk)", parse_cu, &o->cu_q),
        CLI_FN("cu-k", "LIST", "packed sequences: key offsets, e.g. --cu-k 0,100,612",
               parse_cu, &o->cu_k),
        CLI_INT("qb", "N", "query block size, a power of two in [16, 256] (default 128)",
                &o->qb, 1, 1 << 20),
        CLI_INT("kb", "N", "key block size, a power of two in [16, 256] (default 128)", &o->kb,
                1, 1 << 20),
        CLI_MASK_OPTS(&o->m),
        CLI_STR("layout", "NAME", "take the mask of a model layer instead of --causal,\n"
                "--window and --chunk (with --layer)", &o->layout),
        CLI_INT_SEEN("layer", "I",
                     "with --layout: which layer (required with it)",
                     &o->layer, 0, LAYOUT_MAX_LAYERS - 1, &o->layer_set),
        CLI_INT_SEEN("scale-div", "N",
                     "with --layout: divide the config window/chunk by N (default 1)",
                     &o->scale_div, 1, 1 << 20, &o->scale_div_set),
        CLI_FN("builder", "B", "slow | direct | superset | superset-trim (default direct)",
               parse_builder, &o->builder),
        {.name = "diff", .arg = "B", .help = "compare with builder B; exit 1 if they differ",
         .kind = CLI_K_FN, .fn = parse_builder, .dst = &o->diff, .seen = &o->have_diff},
        CLI_FLAG("sound", "also check the mask is sound for the predicate", &o->sound, 1),
        CLI_FLAG("json", "JSON: totals and per-row lists instead of the grid", &o->json, 1),
    };
    const cli_spec spec = {
        .cmd = CMD,
        .usage = "usage: flexcheck blockmask [options]\n",
        .intro = "Builds a block mask and prints it as a grid, one line per query block: F full,\n"
                 "P partial, . empty; with --diff, cells where builder B differs show its kind\n"
                 "in lower case (f, p, - for empty).\n",
        .opts = table,
        .nopts = sizeof table / sizeof table[0],
        .unknown = "unknown option '%s' (--help lists them)",
        .exit_status = "exit status: 0 done, 1 --diff found a difference or --sound failed, "
                       "2 bad input.",
    };
    int nops, rc = cli_parse(&spec, argc, argv, &nops);
    if (rc != CLI_GO)
        return rc;
    /* Options that would be ignored or silently replaced are refused instead. */
    if (!o->layout && (o->layer_set || o->scale_div_set))
        return cli_usage_error(CMD, "%s %d needs --layout NAME",
                               o->layer_set ? "--layer" : "--scale-div",
                               (int)(o->layer_set ? o->layer : o->scale_div));
    if ((o->cu_q.n || o->cu_k.n) && (o->lq_set || o->lk_set))
        return cli_usage_error(CMD, "--%s %d with --cu-q/--cu-k: the packed sequences give the "
                               "lengths", o->lq_set ? "lq" : "lk",
                               (int)(o->lq_set ? o->lq : o->lk));
    if (!o->lk_set)
        o->lk = o->lq;
    return CLI_GO;
}

/* The mask and sequences the options describe. */
static int setup(opts *o, seq_info *s)
{
    fc_err err;
    if (o->layout) {
        layout_layer layers[LAYOUT_MAX_LAYERS];
        int32_t n;
        if (layout_get(o->layout, 0, o->scale_div, layers, LAYOUT_MAX_LAYERS, &n, &err))
            return cli_usage_error(CMD, "%s", err.msg), -1;
        if (!o->layer_set)
            return cli_usage_error(CMD, "--layout %s needs --layer I (its layers are 0..%d)",
                                   o->layout, (int)n - 1), -1;
        if (o->layer >= n)
            return cli_usage_error(CMD, "--layer %d: layout %s has layers 0..%d", (int)o->layer,
                                   o->layout, (int)n - 1), -1;
        if (layout_check_mask(o->layout, layers, o->layer, o->layer + 1, &o->m, &err))
            return cli_usage_error(CMD, "%s", err.msg), -1;
        o->m = layers[o->layer].mask;
    }
    if ((o->cu_q.n > 0) != (o->cu_k.n > 0) || o->cu_q.n != o->cu_k.n)
        return cli_usage_error(CMD, "--cu-q and --cu-k must be given together, same length"), -1;
    fc_status st = o->cu_q.n ? seq_init_packed(s, o->cu_q.n - 1, o->cu_q.v, o->cu_k.v, &err)
                            : seq_init_dense(s, 1, o->lq, o->lk, &err);
    if (st)
        return cli_usage_error(CMD, "%s", err.msg), -1;
    return 0;
}

static int build(const opts *o, const seq_info *s, bmask_builder b, bmask *bm)
{
    fc_err err;
    if (bmask_build(bm, b, o->m, s, o->qb, o->kb, &err))
        return cli_usage_error(CMD, "%s builder: %s", bmask_builder_name(b), err.msg), -1;
    return 0;
}

int cmd_blockmask(int argc, char **argv)
{
    opts o;
    seq_info s;
    bmask a, b;
    int prc = parse(argc, argv, &o);
    if (prc != CLI_GO)
        return prc;
    if (setup(&o, &s))
        return CLI_BADINPUT;
    if (build(&o, &s, o.builder, &a)) {
        seq_free(&s);
        return CLI_BADINPUT;
    }
    int rc = CLI_PASS;
    fc_err err;
    if (o.json)
        print_json(&a, bmask_builder_name(o.builder), o.m);
    else {
        char mask[128];
        mask_params_text(mask, sizeof mask, &o.m, MASK_TEXT_LABEL);
        printf("builder %s: Lq %d Lk %d, blocks %dx%d, %s: %lld partial, %lld full\n",
               bmask_builder_name(o.builder), (int)s.lq, (int)s.lk, (int)o.qb, (int)o.kb, mask,
               (long long)bmask_count_partial(&a), (long long)bmask_count_full(&a));
    }
    if (o.have_diff) {
        if (build(&o, &s, o.diff, &b)) {
            rc = CLI_BADINPUT;
        } else {
            fc_status st = bmask_compare(&a, &b, &err);
            if (!o.json) {
                printf("diff %s: %lld partial, %lld full; cells where they differ show its kind as f, p or - (empty)\n",
                       bmask_builder_name(o.diff), (long long)bmask_count_partial(&b),
                       (long long)bmask_count_full(&b));
                print_grid(&a, &b);
            }
            /* In JSON mode stdout stays one JSON document; the verdict goes to stderr. */
            fprintf(o.json ? stderr : stdout, "%s vs %s: %s\n", bmask_builder_name(o.builder),
                    bmask_builder_name(o.diff), st ? err.msg : "identical");
            rc = st ? CLI_FAIL : CLI_PASS;
            bmask_free(&b);
        }
    } else if (!o.json) {
        print_grid(&a, NULL);
    }
    if (o.sound && rc != CLI_BADINPUT) {
        fc_status st = bmask_check_sound(&a, o.m, &s, &err);
        printf("sound: %s\n", st ? err.msg : "yes");
        if (st)
            rc = CLI_FAIL;
    }
    bmask_free(&a);
    seq_free(&s);
    return rc;
}
