/* cmd_blockmask.c - 'flexcheck blockmask': in progress. */
#include "cli.h"

int cmd_blockmask(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_usage_error("blockmask", "not implemented yet (see README status)");
}
