/* bench_blockmask.c - 'flexcheck bench blockmask': in progress (issue 2). */
#include "cli.h"

int bench_blockmask(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_usage_error("bench blockmask", "not implemented yet");
}
