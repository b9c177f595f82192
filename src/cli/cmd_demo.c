/* cmd_demo.c — `nextn demo`: the main job on the bundled default model.
 * Until the qwen35 target and MTP engine land it prints the model summary. */
#include <stdio.h>
#include <string.h>
#include "cli/cli.h"
#include "nextn.h"

int nx_cmd_demo(int argc, char **argv) {
    const char *path = "models/tiny-qwen35-mtp-q8_0.gguf";
    for (int i = 1; i < argc; i++) {
        if ((!strcmp(argv[i], "-m") || !strcmp(argv[i], "--model")) && i + 1 < argc) path = argv[++i];
        else { fprintf(stderr, "usage: nextn demo [-m MODEL.gguf]\n"); return 2; }
    }
    nx_model *m = NULL;
    if (nx_model_load(path, NULL, &m) != NX_OK) {
        fprintf(stderr, "nextn demo: %s\n", nx_last_error());
        return 1;
    }
    char buf[2048];
    nx_model_describe(m, buf, sizeof buf);
    fputs(buf, stdout);
    printf("(speculative decoding demo: arrives with the qwen35 target and MTP engine)\n");
    nx_model_free(m);
    return 0;
}
