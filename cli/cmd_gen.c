/* cmd_gen.c - 'flexcheck gen': not built yet (issue 4). */
#include "cli.h"

int cmd_gen(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_usage_error("gen", "not implemented yet (see README status)");
}
