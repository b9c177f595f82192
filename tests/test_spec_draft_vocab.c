/*
 * test_spec_draft_vocab.c — the draft head's token subset (src/spec/draft_vocab.c): sizes, the
 * order (end-of-generation tokens, calibration counts, rank order without control tokens),
 * distinct ids, errors. The bundled model's tokenizer (4096 tokens, 3 control tokens at the end).
 */
#include "test.h"
#include "spec/draft_vocab.h"
#include "tokenizer.h"

static nx_tokenizer *tok;

static void test_size(void) {
    CHECK_EQ_INT(nx_draft_vocab_size(-1, 4096), 4096);
    CHECK_EQ_INT(nx_draft_vocab_size(-1, 151936), NX_DRAFT_VOCAB_DEFAULT);
    CHECK_EQ_INT(nx_draft_vocab_size(0, 151936), 151936);
    CHECK_EQ_INT(nx_draft_vocab_size(1000, 151936), 1000);
    CHECK_EQ_INT(nx_draft_vocab_size(200000, 151936), 151936);
}

static bool distinct(const int32_t *ids, int n, int V) {
    char *seen = calloc((size_t)V, 1);
    bool ok = true;
    for (int i = 0; i < n && ok; i++) {
        ok = ids[i] >= 0 && ids[i] < V && !seen[ids[i]];
        if (ok) seen[ids[i]] = 1;
    }
    free(seen);
    return ok;
}

static void test_rank_order(void) {
    const int V = nx_tokenizer_n_vocab(tok), n = 600;
    int32_t ids[600];
    nx_error e = {0};
    CHECK(nx_draft_vocab_pick(tok, NULL, 0, n, ids, &e) == NX_OK);
    CHECK(distinct(ids, n, V));
    CHECK(nx_token_is_eog(tok, ids[0]));   /* <|endoftext|> first, */
    int k = 1;
    while (k < n && nx_token_is_eog(tok, ids[k])) k++;
    for (int i = k; i < n; i++) {          /* then ids in order, no control tokens */
        CHECK(nx_token_get_type(tok, ids[i]) != NX_TOKEN_CONTROL);
        if (i > k) CHECK(ids[i] > ids[i - 1]);
    }
    /* all of the vocabulary: every token once, control tokens included */
    int32_t *all = malloc((size_t)V * sizeof *all);
    CHECK(nx_draft_vocab_pick(tok, NULL, 0, V, all, &e) == NX_OK);
    CHECK(distinct(all, V, V));
    free(all);
}

static void test_calibration(void) {
    const char *text = "while while while while True:\n    pass\n";
    nx_token_vec v = {0};
    nx_error e = {0};
    CHECK(nx_tokenize(tok, text, strlen(text), 0, &v, &e) == NX_OK);
    int32_t ids[64];
    CHECK(nx_draft_vocab_pick(tok, text, strlen(text), 64, ids, &e) == NX_OK);
    CHECK(distinct(ids, 64, nx_tokenizer_n_vocab(tok)));
    /* the most frequent token of the text comes right after the end-of-generation tokens */
    int best = -1, best_n = 0;
    for (size_t i = 0; i < v.n; i++) {
        int c = 0;
        for (size_t j = 0; j < v.n; j++) c += v.ids[j] == v.ids[i];
        if (c > best_n || (c == best_n && v.ids[i] < best)) { best = v.ids[i]; best_n = c; }
    }
    int k = 0;
    while (nx_token_is_eog(tok, ids[k])) k++;
    CHECK_EQ_INT(ids[k], best);
    for (size_t i = 0; i < v.n; i++) {     /* every token of the text is in the subset */
        bool in = false;
        for (int j = 0; j < 64; j++) in |= ids[j] == v.ids[i];
        CHECK(in);
    }
    nx_token_vec_free(&v);
}

static void test_errors(void) {
    int32_t ids[4];
    nx_error e = {0};
    CHECK(nx_draft_vocab_pick(tok, NULL, 0, 0, ids, &e) == NX_ERR_INVALID_ARG);
    CHECK(nx_draft_vocab_pick(tok, NULL, 0, nx_tokenizer_n_vocab(tok) + 1, ids, &e) == NX_ERR_INVALID_ARG);
    CHECK(nx_draft_vocab_pick(NULL, NULL, 0, 4, ids, &e) == NX_ERR_INVALID_ARG);
}

int main(void) {
    nx_error e = {0};
    if (nx_tokenizer_load(NX_SOURCE_DIR "/models/tiny-qwen35-mtp-q8_0.gguf", &tok, &e) != NX_OK) {
        fprintf(stderr, "FAIL: the bundled model's tokenizer: %s\n", e.msg);
        return 1;
    }
    RUN(test_size);
    RUN(test_rank_order);
    RUN(test_calibration);
    RUN(test_errors);
    nx_tokenizer_free(tok);
    return test_summary();
}
