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

static void usage(FILE *f)
{
    fprintf(f,
            "usage: flexcheck blockmask [options]\n\n"
            "  --lq N --lk N         query and key lengths (dense, default 1024 each)\n"
            "  --cu-q LIST --cu-k LIST  packed sequences, e.g. --cu-q 0,100,101 --cu-k 0,100,612\n"
            "  --qb N --kb N         block sizes, powers of two in [16, 256] (default 128)\n"
            "  --causal              causal term\n"
            "  --window W            sliding window (allowed iff |p_q - p_k| < W)\n"
            "  --chunk C             chunked local attention\n"
            "  --layout NAME --layer I [--scale-div N]  take the mask of a model layer instead\n"
            "  --builder B           slow | direct | superset | superset-trim (default direct)\n"
            "  --diff B              compare with builder B; exit 1 if they differ\n"
            "  --sound               also check the mask is sound for the predicate\n"
            "  --json                JSON: totals and per-row lists instead of the grid\n");
}

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
        if (bm->full_kv_indices[row * bm->width + j] == c)
            return 'F';
    for (int32_t j = 0; j < bm->kv_num_blocks[row]; j++)
        if (bm->kv_indices[row * bm->width + j] == c)
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
        print_ids(bm->kv_indices + row * bm->width, bm->kv_num_blocks[row]);
        printf(",\"full\":");
        print_ids(bm->full_kv_indices + row * bm->width, bm->full_kv_num_blocks[row]);
        putchar('}');
    }
    printf("]}\n");
}

typedef struct opts {
    int32_t lq, lk, qb, kb, layer, scale_div;
    int32_t cu_q[1025], cu_k[1025];
    int ncu_q, ncu_k, json, sound, have_diff;
    const char *layout;
    mask_params m;
    bmask_builder builder, diff;
} opts;

static int parse(int argc, char **argv, opts *o)
{
    memset(o, 0, sizeof *o);
    o->lq = o->lk = 1024;
    o->qb = o->kb = 128;
    o->layer = -1;
    o->scale_div = 1;
    o->builder = BMASK_DIRECT;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        int r;
#define I32(name, field, lo, hi)                                                                \
    if ((r = cli_opt(CMD, argc, argv, &i, name, &v)) != 0) {                                    \
        if (r < 0 || cli_parse_i32(CMD, name, v, lo, hi, &o->field)) return -1;                 \
        continue;                                                                               \
    }
        I32("--lq", lq, 0, MASK_MAX_LEN)
        I32("--lk", lk, 0, MASK_MAX_LEN)
        I32("--qb", qb, 1, 1 << 20)
        I32("--kb", kb, 1, 1 << 20)
        I32("--window", m.sliding_window, 0, INT32_MAX)
        I32("--chunk", m.chunk_size, 0, INT32_MAX)
        I32("--layer", layer, 0, LAYOUT_MAX_LAYERS - 1)
        I32("--scale-div", scale_div, 1, 1 << 20)
#undef I32
        if ((r = cli_opt(CMD, argc, argv, &i, "--cu-q", &v)) != 0) {
            if (r < 0 || (o->ncu_q = parse_list("--cu-q", v, o->cu_q, 1025)) < 0) return -1;
            continue;
        }
        if ((r = cli_opt(CMD, argc, argv, &i, "--cu-k", &v)) != 0) {
            if (r < 0 || (o->ncu_k = parse_list("--cu-k", v, o->cu_k, 1025)) < 0) return -1;
            continue;
        }
        if ((r = cli_opt(CMD, argc, argv, &i, "--layout", &v)) != 0) {
            if (r < 0) return -1;
            o->layout = v;
            continue;
        }
        if ((r = cli_opt(CMD, argc, argv, &i, "--builder", &v)) != 0) {
            if (r < 0) return -1;
            if (bmask_builder_parse(v, &o->builder))
                return cli_usage_error(CMD, "--builder: unknown builder '%s'", v), -1;
            continue;
        }
        if ((r = cli_opt(CMD, argc, argv, &i, "--diff", &v)) != 0) {
            if (r < 0) return -1;
            if (bmask_builder_parse(v, &o->diff))
                return cli_usage_error(CMD, "--diff: unknown builder '%s'", v), -1;
            o->have_diff = 1;
            continue;
        }
        if (!strcmp(argv[i], "--causal")) o->m.causal = 1;
        else if (!strcmp(argv[i], "--json")) o->json = 1;
        else if (!strcmp(argv[i], "--sound")) o->sound = 1;
        else return cli_usage_error(CMD, "unknown option '%s' (--help lists them)", argv[i]), -1;
    }
    return 0;
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
        if (o->layer < 0 || o->layer >= n)
            return cli_usage_error(CMD, "--layer %d: layout %s has layers 0..%d", (int)o->layer,
                                   o->layout, (int)n - 1), -1;
        o->m = layers[o->layer].mask;
    }
    if ((o->ncu_q > 0) != (o->ncu_k > 0) || o->ncu_q != o->ncu_k)
        return cli_usage_error(CMD, "--cu-q and --cu-k must be given together, same length"), -1;
    fc_status st = o->ncu_q ? seq_init_packed(s, o->ncu_q - 1, o->cu_q, o->cu_k, &err)
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
    if (cli_wants_help(argc, argv)) {
        usage(stdout);
        return CLI_PASS;
    }
    opts o;
    seq_info s;
    bmask a, b;
    if (parse(argc, argv, &o) || setup(&o, &s))
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
