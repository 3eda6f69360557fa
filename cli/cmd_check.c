/* cmd_check.c - 'flexcheck check': not built yet (issue 4). */
#include "cli.h"

int cmd_check(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_usage_error("check", "not implemented yet (see README status)");
}
