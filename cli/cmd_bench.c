/* cmd_bench.c - 'flexcheck bench': not built yet (issue 2). */
#include "cli.h"

int cmd_bench(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_usage_error("bench", "not implemented yet (see README status)");
}
