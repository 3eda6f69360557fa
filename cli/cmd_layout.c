/*
 * cmd_layout.c - 'flexcheck layout NAME [--layers N] [--scale-div N]': the layer plan of a
 * model layout, one line per layer with its causal / window / chunk; --list names them all.
 */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "masks/layout.h"
#include "masks/params.h"

static const char *const CMD = "layout";

static void usage(FILE *f)
{
    fprintf(f, "usage: flexcheck layout NAME [--layers N] [--scale-div N]\n"
               "       flexcheck layout --list\n\n"
               "  --layers N      first N layers (default: the model's count)\n"
               "  --scale-div N   divide the config's window/chunk value by N before converting\n");
}

static void list(void)
{
    int n;
    const layout_info *infos = layout_list(&n);
    for (int i = 0; i < n; i++)
        printf("%-18s %3d layers  %s\n", infos[i].name, (int)infos[i].default_layers,
               infos[i].model);
}

int cmd_layout(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) {
        usage(stdout);
        return CLI_PASS;
    }
    const char *name = NULL;
    int32_t nlayers = 0, scale_div = 1;
    for (int i = 1; i < argc; i++) {
        const char *v;
        int r;
        if (!strcmp(argv[i], "--list")) {
            list();
            return CLI_PASS;
        }
        if ((r = cli_opt(CMD, argc, argv, &i, "--layers", &v)) != 0) {
            if (r < 0 || cli_parse_i32(CMD, "--layers", v, 1, LAYOUT_MAX_LAYERS, &nlayers))
                return CLI_BADINPUT;
        } else if ((r = cli_opt(CMD, argc, argv, &i, "--scale-div", &v)) != 0) {
            if (r < 0 || cli_parse_i32(CMD, "--scale-div", v, 1, 1 << 20, &scale_div))
                return CLI_BADINPUT;
        } else if (argv[i][0] == '-' || name) {
            return cli_usage_error(CMD, "unexpected argument '%s' (--help)", argv[i]);
        } else {
            name = argv[i];
        }
    }
    if (!name)
        return cli_usage_error(CMD, "which layout? (flexcheck layout --list)");
    layout_layer layers[LAYOUT_MAX_LAYERS];
    int32_t n;
    fc_err err;
    if (layout_get(name, nlayers, scale_div, layers, LAYOUT_MAX_LAYERS, &n, &err))
        return cli_usage_error(CMD, "%s", err.msg);
    /* One column per mask term, as wide as its name (at least 5 characters). */
    printf("layer  %-7s", "kind");
    for (int i = 0; i < MASK_NPARAMS; i++)
        printf("  %5s", mask_param_table[i].opt);
    printf("\n");
    for (int32_t l = 0; l < n; l++) {
        printf("%5d  %-7s", (int)l, layers[l].global ? "full" : "local");
        for (int i = 0; i < MASK_NPARAMS; i++)
            printf("  %*d", (int)strlen(mask_param_table[i].opt) > 5
                                ? (int)strlen(mask_param_table[i].opt) : 5,
                   (int)mask_param_get(&layers[l].mask, i));
        printf("\n");
    }
    return CLI_PASS;
}
