/*
 * fuzz_model.c — libFuzzer target for the architectures' loaders (src/arch/: llama, qwen35,
 * qwen35moe, gemma4 and its assistant) and a first decode.
 *
 * The input is a GGUF file (through a memfd, since nx_model_load takes a path). A load that fails
 * must say why; a model that loads and runs must take a context of 8 positions and decode 3
 * tokens. Any crash, sanitizer report or hang is a bug; the seeds (fuzz/corpus/fuzz_model) are
 * tiny generated models of each architecture.
 */
#define _GNU_SOURCE
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "nextn.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int fd = memfd_create("fuzz_model", 0);
    if (fd < 0) return 0;
    for (size_t off = 0; off < size;) {
        ssize_t w = write(fd, data + off, size - off);
        if (w <= 0) { close(fd); return 0; }
        off += (size_t)w;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    nx_model *m = NULL;
    if (nx_model_load(path, NULL, &m) != NX_OK) {
        if (m || !nx_last_error()[0]) __builtin_trap();   /* a failure leaves no model and says why */
    } else if (nx_model_can_run(m)) {
        nx_ctx_params p = nx_ctx_default_params();
        p.n_ctx = 8;
        p.n_ubatch = 4;
        p.n_threads = 1;
        nx_ctx *c = NULL;
        if (nx_ctx_create(m, &p, &c) == NX_OK) {
            nx_batch *b = nx_batch_create(3);
            const int V = nx_model_n_vocab(m);
            for (int i = 0; b && i < 3; i++) nx_batch_add(b, (nx_token)(i * 7 % V), i, 0, i == 2);
            if (b && nx_decode(c, b) == NX_OK) {
                const float *l = nx_ctx_logits(c, 2);
                if (!l) __builtin_trap();
                volatile float sink = l[0] + l[V - 1];
                (void)sink;
            }
            nx_batch_free(b);
            nx_ctx_free(c);
        }
    }
    nx_model_free(m);
    close(fd);
    return 0;
}
