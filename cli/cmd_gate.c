/* cmd_gate.c - 'flexcheck gate': not built yet (issue 7). */
#include "cli.h"

int cmd_gate(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_usage_error("gate", "not implemented yet (see README status)");
}
