/*
 * cmd_layout.c - 'flexcheck layout NAME [--layers N] [--scale-div N]': the layer plan of a
 * model layout, one line per layer with its causal / window / chunk, soft-cap, scale and
 * sinks; --list names them all.
 */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "masks/layout.h"
#include "masks/params.h"
#include "masks/terms.h"

static const char *const CMD = "layout";

static void list(void)
{
    int n;
    const layout_info *infos = layout_list(&n);
    for (int i = 0; i < n; i++)
        printf("%-18s %3d layers  %s\n", infos[i].name, (int)infos[i].default_layers,
               infos[i].model);
}

/* --list answers at once: the rest of the line is not read (as it never was). */
static int parse_list(const char *cmd, const char *opt, const char *v, void *dst)
{
    *(int *)dst = 1;
    return 1;
}

int cmd_layout(int argc, char **argv)
{
    int32_t nlayers = 0, scale_div = 1;
    int want_list = 0;
    const cli_opt opts[] = {
        CLI_FN("list", NULL, "name every layout, with its layer count and model", parse_list,
               &want_list),
        CLI_INT("layers", "N", "first N layers (default and at most: the model's count)",
                &nlayers, 1, LAYOUT_MAX_LAYERS),
        CLI_INT("scale-div", "N", "divide the config's window/chunk value by N before converting\n"
                "(default 1; N must divide it exactly)",
                &scale_div, 1, 1 << 20),
    };
    const cli_spec spec = {
        .cmd = CMD,
        .usage = "usage: flexcheck layout NAME [--layers N] [--scale-div N]\n"
                 "       flexcheck layout --list\n",
        .intro = "The layer plan of a model layout: one line per layer with its mask terms, its\n"
                 "soft-cap (0 off), its softmax scale and whether it has sinks.\n",
        .opts = opts,
        .nopts = sizeof opts / sizeof opts[0],
        .max_operands = 1,
        .unknown = "unexpected argument '%s' (--help)",
        .exit_status = "exit status: 0 printed, 2 bad input.",
    };
    int nops, rc = cli_parse(&spec, argc, argv, &nops);
    if (rc != CLI_GO)
        return rc;
    if (want_list) {
        list();
        return CLI_PASS;
    }
    if (nops == 0)
        return cli_usage_error(CMD, "which layout? (flexcheck layout --list)");
    const char *name = argv[1];
    layout_layer layers[LAYOUT_MAX_LAYERS];
    int32_t n;
    fc_err err;
    if (layout_get(name, nlayers, scale_div, layers, LAYOUT_MAX_LAYERS, &n, &err))
        return cli_usage_error(CMD, "%s", err.msg);
    /* One column per mask term, as wide as its name (at least 5 characters), then the score
     * terms (named as their options are) and the scale: "1/sqrt(D)" where the model leaves it
     * to the head dim of the case it runs. */
    const char *cap = score_term_table[TERM_SOFTCAP].opt, *sinks = score_term_table[TERM_SINKS].opt;
    printf("layer  %-7s", "kind");
    for (int i = 0; i < MASK_NPARAMS; i++)
        printf("  %5s", mask_param_table[i].opt);
    printf("  %7s  %9s  %5s\n", cap, "scale", sinks);
    for (int32_t l = 0; l < n; l++) {
        printf("%5d  %-7s", (int)l, layers[l].global ? "full" : "local");
        for (int i = 0; i < MASK_NPARAMS; i++)
            printf("  %*d", (int)strlen(mask_param_table[i].opt) > 5
                                ? (int)strlen(mask_param_table[i].opt) : 5,
                   (int)mask_param_get(&layers[l].mask, i));
        printf("  %7g", layers[l].softcap);
        if (layers[l].scale > 0)
            printf("  %9.7g", layers[l].scale);
        else
            printf("  %9s", "1/sqrt(D)");
        printf("  %5s\n", layers[l].sinks ? "on" : "off");
    }
    return CLI_PASS;
}
