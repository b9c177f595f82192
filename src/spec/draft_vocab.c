/*
 * draft_vocab.c — the draft head's token subset (contract: draft_vocab.h).
 */
#include "spec/draft_vocab.h"

#include <stdlib.h>
#include <string.h>
#include "core/io.h"

int nx_draft_vocab_size(int request, int n_vocab) {
    if (request < 0) return n_vocab > NX_DRAFT_VOCAB_DEFAULT ? NX_DRAFT_VOCAB_DEFAULT : n_vocab;
    if (request == 0 || request > n_vocab) return n_vocab;
    return request;
}

typedef struct tok_count { int32_t id; uint32_t n; } tok_count;

static int by_count(const void *a, const void *b) {
    const tok_count *x = a, *y = b;
    if (x->n != y->n) return x->n > y->n ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

nx_status nx_draft_vocab_pick(const nx_tokenizer *t, const char *calib, size_t calib_len, int n, int32_t *ids,
                              nx_error *err) {
    const int32_t V = t ? nx_tokenizer_n_vocab(t) : 0;
    if (!t || !ids || n < 1 || n > V)
        return nx_fail(err, NX_ERR_INVALID_ARG, "draft vocabulary: %d tokens of a %d-token vocabulary", n, (int)V);
    uint8_t *taken = calloc((size_t)V, 1);
    tok_count *cnt = NULL;
    if (!taken) return nx_fail(err, NX_ERR_NOMEM, "draft vocabulary: out of memory");
    int k = 0;
    const int32_t *eog;
    const int32_t n_eog = nx_tokenizer_eog_ids(t, &eog);
    for (int32_t i = 0; i < n_eog && k < n; i++)
        if (eog[i] >= 0 && eog[i] < V && !taken[eog[i]]) { taken[eog[i]] = 1; ids[k++] = eog[i]; }
    nx_status st = NX_OK;
    if (calib && calib_len && k < n) {
        nx_token_vec v = {0};
        st = nx_tokenize(t, calib, calib_len, 0, &v, err);
        cnt = st == NX_OK ? calloc((size_t)V, sizeof *cnt) : NULL;
        if (st == NX_OK && !cnt) st = nx_fail(err, NX_ERR_NOMEM, "draft vocabulary: out of memory");
        if (st == NX_OK) {
            for (int32_t i = 0; i < V; i++) cnt[i].id = i;
            for (size_t i = 0; i < v.n; i++)
                if (v.ids[i] >= 0 && v.ids[i] < V && cnt[v.ids[i]].n < UINT32_MAX) cnt[v.ids[i]].n++;
            qsort(cnt, (size_t)V, sizeof *cnt, by_count);
            for (int32_t i = 0; i < V && k < n && cnt[i].n > 0; i++)
                if (!taken[cnt[i].id]) { taken[cnt[i].id] = 1; ids[k++] = cnt[i].id; }
        }
        nx_token_vec_free(&v);
    }
    for (int pass = 0; pass < 2 && st == NX_OK; pass++)   /* pass 1 only if the normal tokens ran out */
        for (int32_t i = 0; i < V && k < n; i++) {
            const nx_token_type ty = nx_token_get_type(t, i);
            const bool skip = ty == NX_TOKEN_CONTROL || ty == NX_TOKEN_UNUSED || ty == NX_TOKEN_UNKNOWN;
            if (!taken[i] && (pass == 1 || !skip)) { taken[i] = 1; ids[k++] = i; }
        }
    free(cnt);
    free(taken);
    return st;
}

nx_status nx_draft_vocab_build(const nx_gguf *g, int n_vocab, int request, const char *calib_path, int32_t **ids,
                               int *n, nx_error *err) {
    *ids = NULL;
    *n = nx_draft_vocab_size(request, n_vocab);
    if (*n >= n_vocab) return NX_OK;
    int32_t *v = malloc((size_t)*n * sizeof *v);
    if (!v) return nx_fail(err, NX_ERR_NOMEM, "draft vocabulary: out of memory");
    char *text = NULL;
    size_t len = 0;
    nx_tokenizer *tok = NULL;
    nx_status st = calib_path ? nx_read_file(calib_path, (size_t)1 << 28, &text, &len, err) : NX_OK;
    nx_error terr = {0};
    if (st == NX_OK && nx_tokenizer_from_gguf(g, &tok, &terr) != NX_OK) {
        if (text) st = nx_fail(err, terr.code, "--draft-vocab-file: the model's tokenizer: %s", terr.msg);
        else for (int i = 0; i < *n; i++) v[i] = i;   /* no tokenizer: plain rank order */
    }
    if (st == NX_OK && tok) st = nx_draft_vocab_pick(tok, text, len, *n, v, err);
    nx_tokenizer_free(tok);
    free(text);
    if (st != NX_OK) { free(v); return st; }
    *ids = v;
    return NX_OK;
}
