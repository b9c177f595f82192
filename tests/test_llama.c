/* test_llama.c — the `llama` architecture (src/arch/llama*.c) on generated models:
 *   load          hyper-parameters and sizes as written (untied, tied, Q8_0);
 *   invariance    a prompt in one batch == token by token == every chunking 2..17 with small
 *                 ubatches and 1 / 2 threads, logits and hidden bit for bit (F32 and F16 KV, F32 and
 *                 Q8_0 weights, GQA / MQA / partial RoPE);
 *   sequences     interleaved sequences in one batch == each alone; seq_cp; a verify batch rolled
 *                 back with seq_rm == a context that only saw the kept prefix;
 *   reference     logits vs the float64 numpy reference (tests/ref/llama.py) within 1e-4 (the
 *                 ctest script ref_llama.test.sh covers more shapes);
 *   bad input     missing / misshapen tensors, attention biases, MoE layers, YaRN scaling, a bad
 *                 head count: one-line errors naming the tensor or key. */
#include <math.h>
#include <unistd.h>
#include "test.h"
#include "golden_util.h"
#include "ctx.h"
#include "genmodel.h"
#include "gguf.h"
#include "nextn.h"

static char g_tmpdir[] = "/tmp/nx_test_llama_XXXXXX";
static int g_ids[128];

static const char *gen(const char *cfg, nx_type t, const char *file) {
    static char paths[8][512];
    static int np = 0;
    char *path = paths[np++ % 8];
    snprintf(path, 512, "%s/%s", g_tmpdir, file);
    nx_error e = {0};
    nx_genmodel_opts o = {.arch = "llama", .config_json = cfg, .seed = 5, .wtype = t, .out_path = path};
    if (nx_genmodel_write(&o, &e) != NX_OK) { fprintf(stderr, "  gen-model: %s\n", e.msg); return NULL; }
    return path;
}

static nx_model *load(const char *path) {
    nx_model *m = NULL;
    if (!path || nx_model_load(path, NULL, &m) != NX_OK) fprintf(stderr, "  load: %s\n", nx_last_error());
    return m;
}

/* Decode ids[0..n) of seq from pos0 in chunks of `chunk` rows, every row asking for logits;
 * logits / hidden rows into L / H (may be NULL). */
static bool decode_chunks(nx_ctx *c, const int *ids, int n, int pos0, int seq, int chunk, float *L, float *H) {
    if (!c) return false;
    const int V = nx_model_n_vocab(c->model), E = nx_model_n_embd(c->model);
    nx_batch *b = nx_batch_create(chunk);
    bool ok = b != NULL;
    for (int i0 = 0; ok && i0 < n; i0 += chunk) {
        const int nb = n - i0 < chunk ? n - i0 : chunk;
        nx_batch_clear(b);
        for (int r = 0; r < nb; r++) nx_batch_add(b, ids[i0 + r], pos0 + i0 + r, seq, true);
        if (nx_decode(c, b) != NX_OK) { fprintf(stderr, "  decode: %s\n", nx_last_error()); ok = false; break; }
        for (int r = 0; r < nb; r++) {
            if (L) memcpy(L + (size_t)(i0 + r) * V, nx_ctx_logits(c, r), (size_t)V * sizeof(float));
            if (H) memcpy(H + (size_t)(i0 + r) * E, nx_ctx_hidden(c, r), (size_t)E * sizeof(float));
        }
    }
    nx_batch_free(b);
    return ok;
}

/* ===== load ===== */

static void test_load(void) {
    nx_model *m = load(gen("{\"n_embd\":64,\"n_layer\":3,\"n_head\":4,\"n_head_kv\":2,\"n_ff\":96,\"n_vocab\":300,"
                           "\"n_ctx\":1024}", NX_TYPE_F32, "load.gguf"));
    REQUIRE_MSG(m != NULL, "model");
    CHECK(nx_model_can_run(m));
    CHECK_STR(nx_model_arch(m), "llama");
    CHECK_EQ_INT(nx_model_n_vocab(m), 300);
    CHECK_EQ_INT(nx_model_n_embd(m), 64);
    CHECK_EQ_INT(nx_model_n_ctx_train(m), 1024);
    nx_model_free(m);
    m = load(gen("{\"tied_embeddings\":true}", NX_TYPE_Q8_0, "tied.gguf"));
    CHECK(m && nx_model_can_run(m) && nx_model_n_vocab(m) == 512 && nx_model_n_embd(m) == 256);
    nx_model_free(m);
}

/* ===== invariance ===== */

static void check_invariance(const char *what, const char *cfg, nx_type t, nx_cache_type kv) {
    nx_model *m = load(gen(cfg, t, "inv.gguf"));
    REQUIRE_MSG(m != NULL, "model %s", what);
    const int V = nx_model_n_vocab(m), E = nx_model_n_embd(m), n = 40;
    float *L0 = malloc((size_t)n * V * 4), *H0 = malloc((size_t)n * E * 4), *L = malloc((size_t)n * V * 4),
          *H = malloc((size_t)n * E * 4);
    nx_ctx *c = test_ctx(m, 64, 1, 512, 1, kv, kv);
    CHECK(decode_chunks(c, g_ids, n, 0, 0, 1, L0, H0));   /* token by token */
    nx_ctx_free(c);
    int bad = 0;
    for (int B = 2; B <= 18; B++) {
        /* B = 18: the whole prompt in one batch; B = 17: 16-row chunks split into 5-row ubatches */
        const int chunk = B == 18 ? n : B == 17 ? 16 : B, ub = B == 17 ? 5 : 512, th = B % 2 ? 2 : 1;
        c = test_ctx(m, 64, 1, ub, th, kv, kv);
        if (!decode_chunks(c, g_ids, n, 0, 0, chunk, L, H)) { bad++; nx_ctx_free(c); continue; }
        if (memcmp(L, L0, (size_t)n * V * 4) || memcmp(H, H0, (size_t)n * E * 4)) {
            fprintf(stderr, "  %s: chunk %d (ubatch %d, %d threads) differs by %.3g\n", what, chunk, ub, th,
                    max_diff(L, L0, (size_t)n * V));
            bad++;
        }
        nx_ctx_free(c);
    }
    CHECK_MSG(bad == 0, "%s: %d chunkings differ", what, bad);
    free(L0); free(H0); free(L); free(H);
    nx_model_free(m);
}

static void test_invariance(void) {
    const char *small = "{\"n_embd\":64,\"n_layer\":2,\"n_head\":4,\"n_head_kv\":2,\"n_ff\":128}";
    check_invariance("f32 gqa", small, NX_TYPE_F32, NX_CACHE_F32);
    check_invariance("q8_0 gqa, f16 kv", small, NX_TYPE_Q8_0, NX_CACHE_F16);
    check_invariance("mqa partial rope tied", "{\"n_embd\":64,\"n_layer\":2,\"n_head\":2,\"n_head_kv\":1,\"head_dim\":32,"
                     "\"n_rot\":16,\"n_ff\":64,\"tied_embeddings\":true}", NX_TYPE_F32, NX_CACHE_F32);
}

/* ===== several sequences, rollback ===== */

static void test_sequences(void) {
    nx_model *m = load(gen("{\"n_embd\":64,\"n_layer\":2,\"n_head\":4,\"n_head_kv\":2,\"n_ff\":128}", NX_TYPE_F32,
                           "seq.gguf"));
    REQUIRE_MSG(m != NULL, "model");
    const int V = nx_model_n_vocab(m);
    const int len[3] = {14, 5, 11}, off[3] = {0, 14, 19};
    float *ref = malloc((size_t)30 * V * 4);
    nx_ctx *c = test_ctx(m, 64, 1, 512, 2, NX_CACHE_F32, NX_CACHE_F32);
    for (int s = 0; s < 3; s++) CHECK(decode_chunks(c, g_ids + off[s], len[s], 0, 0, 1, ref + (size_t)off[s] * V, NULL));
    nx_ctx_free(c);
    c = test_ctx(m, 64, 3, 7, 2, NX_CACHE_F32, NX_CACHE_F32);
    nx_batch *b = nx_batch_create(32);
    int at[3] = {0, 0, 0}, row_src[32], nb = 0;
    for (int step = 0; step < 14; step++)
        for (int s = 0; s < 3; s++)
            if (at[s] < len[s]) {
                nx_batch_add(b, g_ids[off[s] + at[s]], at[s], s, true);
                row_src[nb++] = off[s] + at[s];
                at[s]++;
            }
    CHECK(c && nx_decode(c, b) == NX_OK);
    int bad = 0;
    for (int r = 0; r < nb && c; r++)
        if (memcmp(nx_ctx_logits(c, r), ref + (size_t)row_src[r] * V, (size_t)V * 4)) bad++;
    CHECK_EQ_INT(bad, 0);
    CHECK(nx_seq_cp(c, 0, 2, -1, -1) == NX_OK);
    CHECK_EQ_INT(nx_seq_pos_next(c, 2), 14);
    nx_batch_clear(b);
    nx_batch_add(b, 123, 14, 0, true);
    nx_batch_add(b, 123, 14, 2, true);
    CHECK(nx_decode(c, b) == NX_OK);
    CHECK(!memcmp(nx_ctx_logits(c, 0), nx_ctx_logits(c, 1), (size_t)V * 4));
    nx_batch_free(b);
    nx_ctx_free(c);
    free(ref);
    /* a verify batch of K tokens rolled back to keep j of them == a context that saw only those */
    const int P = 20, K = 5, probe = 333;
    float *a = malloc((size_t)V * 4), *e = malloc((size_t)V * 4);
    bad = 0;
    for (int j = 0; j <= K; j++) {
        c = test_ctx(m, 64, 1, 8, 1, NX_CACHE_F16, NX_CACHE_F16);
        CHECK(decode_chunks(c, g_ids, P, 0, 0, 8, NULL, NULL));
        CHECK(decode_chunks(c, g_ids + P, K, P, 0, K, NULL, NULL));
        CHECK(c && nx_seq_rm(c, 0, P + j, -1) == NX_OK);
        int pr = probe;
        CHECK(decode_chunks(c, &pr, 1, P + j, 0, 1, a, NULL));
        nx_ctx *d = test_ctx(m, 64, 1, 512, 2, NX_CACHE_F16, NX_CACHE_F16);
        CHECK(decode_chunks(d, g_ids, P + j, 0, 0, P + j, NULL, NULL));
        CHECK(decode_chunks(d, &pr, 1, P + j, 0, 1, e, NULL));
        if (memcmp(a, e, (size_t)V * 4)) bad++;
        nx_ctx_free(d);
        nx_ctx_free(c);
    }
    CHECK_EQ_INT(bad, 0);
    free(a);
    free(e);
    nx_model_free(m);
}

/* ===== the numpy reference ===== */

static bool have_numpy(void) { return system("/usr/bin/python3 -c 'import numpy' 2>/dev/null") == 0; }

static void test_vs_numpy(void) {
    if (!have_numpy()) SKIP("no /usr/bin/python3 with numpy");
    const char *path = gen("{\"n_embd\":64,\"n_layer\":2,\"n_head\":4,\"n_head_kv\":2,\"n_ff\":128,\"n_rot\":8,"
                           "\"rope_freq_base\":500}", NX_TYPE_F32, "ref.gguf");
    nx_model *m = load(path);
    REQUIRE_MSG(m != NULL, "model");
    const int n = 60, V = nx_model_n_vocab(m), E = nx_model_n_embd(m);
    char ids[1024] = "", lp[600], hp[600], cmd[2048];
    for (int i = 0; i < n; i++) snprintf(ids + strlen(ids), sizeof ids - strlen(ids), "%s%d", i ? "," : "", g_ids[i]);
    snprintf(lp, sizeof lp, "%s/ref_l.f32", g_tmpdir);
    snprintf(hp, sizeof hp, "%s/ref_h.f32", g_tmpdir);
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/tests/ref/llama.py eval %s --prompt-ids %s --logits-out %s "
             "--hidden-out %s", NX_SOURCE_DIR, path, ids, lp, hp);
    CHECK_MSG(system(cmd) == 0, "%s failed", cmd);
    float *L = malloc((size_t)n * V * 4), *H = malloc((size_t)n * E * 4);
    float *RL = calloc((size_t)n * V, 4), *RH = calloc((size_t)n * E, 4);
    FILE *f = fopen(lp, "rb");
    CHECK(f && fread(RL, 4, (size_t)n * V, f) == (size_t)n * V);
    if (f) fclose(f);
    f = fopen(hp, "rb");
    CHECK(f && fread(RH, 4, (size_t)n * E, f) == (size_t)n * E);
    if (f) fclose(f);
    nx_ctx *c = test_ctx(m, 128, 1, 16, 2, NX_CACHE_F32, NX_CACHE_F32);
    CHECK(decode_chunks(c, g_ids, n, 0, 0, n, L, H));
    const double dl = max_diff(L, RL, (size_t)n * V), dh = max_diff(H, RH, (size_t)n * E);
    fprintf(stderr, "  max|dlogit| %.3g, max|dhidden| %.3g vs numpy float64 (%d tokens)\n", dl, dh, n);
    CHECK(dl <= 1e-4 && dh <= 1e-4);
    nx_ctx_free(c);
    free(L); free(H); free(RL); free(RH);
    nx_model_free(m);
}

/* ===== bad input ===== */

typedef void (*edit_fn)(nx_gguf_writer *w);

/* A copy of src without tensor `drop`, with `add` (an F32 tensor of shape ne, zeros) and the
 * keys edited. */
static bool write_variant(const char *src, const char *dst, const char *drop, const char *add, const int64_t *ne,
                          int n_dims, edit_fn edit) {
    nx_gguf *g = NULL;
    nx_error e = {0};
    if (nx_gguf_open(src, &g, &e) != NX_OK) return false;
    nx_gguf_writer *w = nx_gguf_writer_create();
    for (int64_t i = 0; i < nx_gguf_n_kv(g); i++) nx_gguf_copy_kv(w, g, i);
    if (edit) edit(w);
    float *zeros = calloc(1 << 16, sizeof(float));
    for (int64_t i = 0; i < nx_gguf_n_tensors(g); i++) {
        const nx_tensor *t = nx_gguf_tensor(g, i);
        if (drop && !strcmp(t->name, drop)) continue;
        if (add && !strcmp(t->name, add)) continue;
        nx_gguf_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data);
    }
    if (add) nx_gguf_add_tensor(w, add, NX_TYPE_F32, n_dims, ne, zeros);
    bool ok = nx_gguf_writer_write(w, dst, &e) == NX_OK;
    nx_gguf_writer_free(w);
    nx_gguf_close(g);
    free(zeros);
    return ok;
}

static void edit_yarn(nx_gguf_writer *w) { nx_gguf_set_str(w, "llama.rope.scaling.type", "yarn"); }
static void edit_heads(nx_gguf_writer *w) { nx_gguf_set_u32(w, "llama.attention.head_count_kv", 3); }
static void edit_no_eps(nx_gguf_writer *w) { nx_gguf_remove_key(w, "llama.attention.layer_norm_rms_epsilon"); }

static void expect_error(const char *path, nx_status want, const char *s1, const char *s2) {
    nx_model *m = NULL;
    CHECK_EQ_INT(nx_model_load(path, NULL, &m), want);
    const char *msg = nx_last_error();
    fprintf(stderr, "  load error: %s\n", msg);
    CHECK_MSG(strstr(msg, s1) && (!s2 || strstr(msg, s2)), "'%s' lacks '%s' / '%s'", msg, s1, s2 ? s2 : "");
    CHECK(!strchr(msg, '\n'));
    nx_model_free(m);
}

static void test_bad_input(void) {
    const char *src = gen("{\"n_embd\":64,\"n_layer\":2,\"n_head\":4,\"n_head_kv\":2,\"n_ff\":128}", NX_TYPE_F32,
                          "src.gguf");
    REQUIRE_MSG(src != NULL, "model");
    char bad[600];
    snprintf(bad, sizeof bad, "%s/bad.gguf", g_tmpdir);
    const int64_t q_bad[2] = {64, 48}, bias[1] = {64}, router[2] = {64, 4};
    CHECK(write_variant(src, bad, "blk.1.ffn_up.weight", NULL, NULL, 0, NULL));
    expect_error(bad, NX_ERR_FORMAT, "missing tensor blk.1.ffn_up.weight", "[64, 128]");
    CHECK(write_variant(src, bad, NULL, "blk.0.attn_q.weight", q_bad, 2, NULL));
    expect_error(bad, NX_ERR_FORMAT, "blk.0.attn_q.weight", "expected [64, 64]");
    CHECK(write_variant(src, bad, NULL, "blk.1.attn_k.bias", bias, 1, NULL));
    expect_error(bad, NX_ERR_UNSUPPORTED, "blk.1.attn_k.bias", "biases");
    CHECK(write_variant(src, bad, NULL, "blk.0.ffn_gate_inp.weight", router, 2, NULL));
    expect_error(bad, NX_ERR_UNSUPPORTED, "blk.0.ffn_gate_inp.weight", "MoE");
    CHECK(write_variant(src, bad, NULL, NULL, NULL, 0, edit_yarn));
    expect_error(bad, NX_ERR_UNSUPPORTED, "rope.scaling.type", "yarn");
    CHECK(write_variant(src, bad, NULL, NULL, NULL, 0, edit_heads));
    expect_error(bad, NX_ERR_FORMAT, "head_count_kv 3", NULL);
    CHECK(write_variant(src, bad, NULL, NULL, NULL, 0, edit_no_eps));
    expect_error(bad, NX_ERR_FORMAT, "llama.attention.layer_norm_rms_epsilon", "missing");
}

int main(void) {
    if (!mkdtemp(g_tmpdir)) { perror("mkdtemp"); return 1; }
    for (int i = 0; i < 128; i++) g_ids[i] = (i * 37 + 5) % 300;
    RUN(test_load);
    RUN(test_invariance);
    RUN(test_sequences);
    RUN(test_vs_numpy);
    RUN(test_bad_input);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", g_tmpdir);
    return test_summary();
}
