/* cmd_layout.c - 'flexcheck layout': in progress. */
#include "cli.h"

int cmd_layout(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_usage_error("layout", "not implemented yet (see README status)");
}
