/* bench_contended.c — placeholder for `nextn bench-kernels --contended`. */
#include <stdio.h>
#include "cli/cli.h"

int nx_bench_kernels_contended(int argc, char **argv) {
    (void)argc; (void)argv;
    fprintf(stderr, "nextn bench-kernels --contended: not implemented yet\n");
    return 1;
}
