/*
 * replay_main.c — runs a libFuzzer target's entry point over every file of its seed corpus,
 * so ctest replays the corpora with gcc (and under ASan/UBSan in the sanitizer run) without
 * needing clang/libFuzzer. Usage: replay_fuzz_X DIR...
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/io.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int main(int argc, char **argv) {
    int n = 0, failed = 0;
    for (int a = 1; a < argc; a++) {
        DIR *d = opendir(argv[a]);
        if (!d) { fprintf(stderr, "replay: cannot open %s\n", argv[a]); return 1; }
        struct dirent *e;
        while ((e = readdir(d))) {
            if (e->d_name[0] == '.') continue;
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", argv[a], e->d_name);
            char *buf = NULL;
            size_t len = 0;
            nx_error err = {0};
            if (nx_read_file(path, 64u << 20, &buf, &len, &err) != NX_OK) {
                fprintf(stderr, "replay: %s\n", err.msg);
                failed++;
                continue;
            }
            LLVMFuzzerTestOneInput((const uint8_t *)buf, len);   /* a crash fails the test */
            free(buf);
            n++;
        }
        closedir(d);
    }
    printf("%d passed, %d failed\n", n, failed);
    return failed ? 1 : 0;
}
