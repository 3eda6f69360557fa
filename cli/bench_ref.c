/* bench_ref.c - 'flexcheck bench ref': not built yet (issue 3). */
#include "cli.h"

int bench_ref(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_usage_error("bench ref", "not implemented yet (see README status)");
}
