/* cmd_run.c — placeholder until its module lands. */
#include <stdio.h>
#include "cli/cli.h"

int nx_cmd_run(int argc, char **argv) {
    (void)argc;
    fprintf(stderr, "nextn %s: not implemented yet\n", argv[0]);
    return 1;
}
