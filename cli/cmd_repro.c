/* cmd_repro.c - 'flexcheck repro': not built yet (issue 7). */
#include "cli.h"

int cmd_repro(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_usage_error("repro", "not implemented yet (see README status)");
}
