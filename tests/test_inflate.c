/* test_inflate.c — `gen-model --inflate` (src/genmodel_inflate.c) on the bundled trained model:
 * dead layers of the pattern's kind and widened FFNs keep the hidden states bit for bit (every
 * CPU level) and the greedy tokens, with and without MTP speculation; the file's layout (zero
 * projections, zero ffn_down columns, the source's bytes, the MTP layer last, metadata);
 * F32 / F16 FFN types; refusals (width not a multiple of the block size, below the source,
 * fewer layers, not qwen35). */
#include <math.h>
#include <stdint.h>
#include <unistd.h>
#include "test.h"
#include "core/io.h"
#include "genmodel.h"
#include "gguf.h"
#include "kernels/cpu.h"
#include "nextn.h"
#include "quant/quant.h"
#include "spec/engine.h"
#include "tokenizer.h"

#define SRC "models/tiny-qwen35-mtp-q8_0.gguf"
#define NPRED 40

static char g_tmpdir[] = "/tmp/nx_test_inflate_XXXXXX";

static nx_status inflate(const char *file, int n_layer, int64_t n_ff, bool set, nx_type t, char *path, size_t cap,
                         nx_error *e) {
    snprintf(path, cap, "%s/%s", g_tmpdir, file);
    nx_inflate_opts o = {.from_path = SRC, .out_path = path, .n_layer = n_layer, .n_ff = n_ff, .set_wtype = set,
                         .wtype = t, .seed = 7};
    return nx_genmodel_inflate(&o, NULL, e);
}

/* The first 64 tokens of the demo prompt (repository data). */
static int prompt(nx_token *ids, int cap) {
    nx_tokenizer *tok = NULL;
    nx_error e = {0};
    char *text = NULL;
    size_t len = 0;
    nx_token_vec v = {0};
    int n = 0;
    if (nx_tokenizer_load(SRC, &tok, &e) == NX_OK && nx_read_file("models/demo_prompt.py.txt", 1 << 20, &text, &len, &e) == NX_OK &&
        nx_tokenize(tok, text, len, NX_TOK_ADD_SPECIAL, &v, &e) == NX_OK) {
        n = v.n < (size_t)cap ? (int)v.n : cap;
        memcpy(ids, v.ids, (size_t)n * sizeof *ids);
    } else {
        fprintf(stderr, "  prompt: %s\n", e.msg);
    }
    nx_token_vec_free(&v);
    free(text);
    nx_tokenizer_free(tok);
    return n;
}

static nx_ctx *make_ctx(nx_model *m) {
    nx_ctx_params p = nx_ctx_default_params();
    p.n_ctx = 256;
    p.n_ubatch = 64;
    p.n_threads = 2;
    nx_ctx *c = NULL;
    if (nx_ctx_create(m, &p, &c) != NX_OK) fprintf(stderr, "  ctx: %s\n", nx_last_error());
    return c;
}

/* Greedy generation of NPRED tokens; k = 0: speculation off, else MTP with fixed k (k < 0: adaptive). */
static int generate(nx_model *m, const nx_token *ids, int n_ids, int k, nx_token *out) {
    nx_ctx *ctx = make_ctx(m);
    if (!ctx) return -1;
    nx_spec_engine_params p = nx_spec_engine_default_params();
    if (k != 0) {
        p.spec.types[0] = NX_SPEC_MTP;
        p.spec.n_types = 1;
        p.spec.draft_max = k > 0 ? k : 8;
        p.spec.adaptive = k < 0;
    }
    nx_spec_engine *en = NULL;
    nx_error e = {0};
    nx_seq_id s = -1;
    nx_spec_request rq = {.prompt = ids, .n_prompt = n_ids, .n_predict = NPRED};
    int n = -1;
    if (nx_spec_engine_create(ctx, &p, &en, &e) == NX_OK && nx_spec_engine_add(en, &rq, &s, &e) == NX_OK) {
        bool ok = true;
        while (ok && nx_spec_engine_n_active(en)) ok = nx_spec_engine_step(en, &e) == NX_OK;
        const nx_token *o = ok ? nx_spec_engine_output(en, s, &n) : NULL;
        if (o) memcpy(out, o, (size_t)n * sizeof *o);
        else n = -1;
    }
    if (n < 0) fprintf(stderr, "  generate (k %d): %s\n", k, e.msg);
    nx_spec_engine_free(en);
    nx_ctx_free(ctx);
    return n;
}

/* The prompt decoded in one batch: the last row's hidden state and logits copied out. */
static bool decode_last(nx_model *m, const nx_token *ids, int n, float *hidden, int n_embd, float *logits, int n_vocab) {
    nx_ctx *ctx = make_ctx(m);
    nx_batch *b = nx_batch_create(n);
    bool ok = ctx && b;
    for (int i = 0; ok && i < n; i++) ok = nx_batch_add(b, ids[i], (nx_pos)i, 0, i == n - 1) == NX_OK;
    ok = ok && nx_decode(ctx, b) == NX_OK;
    const float *h = ok ? nx_ctx_hidden(ctx, n - 1) : NULL, *l = ok ? nx_ctx_logits(ctx, n - 1) : NULL;
    ok = h && l;
    if (ok) {
        memcpy(hidden, h, (size_t)n_embd * sizeof *h);
        memcpy(logits, l, (size_t)n_vocab * sizeof *l);
    }
    nx_batch_free(b);
    nx_ctx_free(ctx);
    return ok;
}

static void test_same_tokens(void) {
    char path[600];
    nx_error e = {0};
    CHECK_MSG(inflate("l6.gguf", 6, 1024, false, NX_TYPE_F32, path, sizeof path, &e) == NX_OK, "%s", e.msg);
    nx_token ids[64], ref[NPRED], out[NPRED];
    const int n_ids = prompt(ids, 64);
    CHECK(n_ids == 64);
    nx_model *src = NULL, *big = NULL;
    CHECK(nx_model_load(SRC, NULL, &src) == NX_OK);
    CHECK_MSG(nx_model_load(path, NULL, &big) == NX_OK, "%s", nx_last_error());
    if (!src || !big || n_ids != 64) goto done;
    /* hidden state and logits bit for bit, at every CPU level the machine has */
    const int n_embd = 192, n_vocab = 4096;
    float *h0 = malloc(n_embd * sizeof *h0), *h1 = malloc(n_embd * sizeof *h1);
    float *l0 = malloc(n_vocab * sizeof *l0), *l1 = malloc(n_vocab * sizeof *l1);
    const nx_cpu_level was = nx_cpu_level_get();
    nx_cpu_level lvs[NX_CPU_MAX_LEVELS];
    const int n_lv = nx_cpu_levels(lvs);
    for (int li = 0; li < n_lv; li++) {
        const nx_cpu_level lv = lvs[li];
        nx_cpu_set_level(lv);
        CHECK(decode_last(src, ids, n_ids, h0, n_embd, l0, n_vocab));
        CHECK(decode_last(big, ids, n_ids, h1, n_embd, l1, n_vocab));
        CHECK_MSG(!memcmp(h0, h1, n_embd * sizeof *h0), "hidden state differs at level %s", nx_cpu_level_name(lv));
        CHECK_MSG(!memcmp(l0, l1, n_vocab * sizeof *l0), "logits differ at level %s", nx_cpu_level_name(lv));
    }
    nx_cpu_set_level(was);
    free(h0); free(h1); free(l0); free(l1);
    /* greedy tokens: the source off == the inflated model off, MTP k = 1, 3 and adaptive */
    CHECK_EQ_INT(generate(src, ids, n_ids, 0, ref), NPRED);
    const int ks[4] = {0, 1, 3, -1};
    for (int i = 0; i < 4; i++) {
        memset(out, 0, sizeof out);
        CHECK_EQ_INT(generate(big, ids, n_ids, ks[i], out), NPRED);
        CHECK_MSG(!memcmp(ref, out, sizeof ref), "tokens differ (k %d)", ks[i]);
    }
    CHECK_EQ_INT(generate(src, ids, n_ids, 3, out), NPRED);
    CHECK(!memcmp(ref, out, sizeof ref));
done:
    nx_model_free(src);
    nx_model_free(big);
    remove(path);
}

/* Row r of tensor t as floats. */
static bool row(const nx_tensor *t, int64_t r, float *x) {
    return nx_dequantize_row(t->type, (const char *)t->data + (size_t)r * t->nb[1], x, t->ne[0]);
}

static const nx_tensor *tensor(const nx_gguf *g, const char *name) {
    int64_t i = nx_gguf_find_tensor(g, name);
    return i < 0 ? NULL : nx_gguf_tensor(g, i);
}

/* Every value of t in columns [c0, ne0) is exactly +-0. */
static bool zero_from(const nx_tensor *t, int64_t c0) {
    float *x = malloc((size_t)t->ne[0] * sizeof *x);
    bool ok = x != NULL;
    for (int64_t r = 0; ok && r < t->ne[1]; r++) {
        ok = row(t, r, x);
        for (int64_t c = c0; ok && c < t->ne[0]; c++) ok = x[c] == 0.0f;
    }
    free(x);
    return ok;
}

static void check_layout(const char *path, nx_type ffn_type) {
    nx_gguf *g = NULL, *s = NULL;
    nx_error e = {0};
    CHECK(nx_gguf_open(path, &g, &e) == NX_OK);
    CHECK(nx_gguf_open(SRC, &s, &e) == NX_OK);
    if (!g || !s) goto done;
    int64_t v = 0;
    CHECK(nx_gguf_get_int(g, "qwen35.block_count", &v) && v == 7);
    CHECK(nx_gguf_get_int(g, "qwen35.nextn_predict_layers", &v) && v == 1);
    CHECK(nx_gguf_get_int(g, "qwen35.feed_forward_length", &v) && v == 1024);
    /* layer kinds by the pattern (interval 2): 4 DeltaNet, 5 attention; the MTP layer last */
    CHECK(tensor(g, "blk.4.ssm_conv1d.weight") && !tensor(g, "blk.4.attn_q.weight"));
    CHECK(tensor(g, "blk.5.attn_q.weight") && !tensor(g, "blk.5.ssm_conv1d.weight"));
    CHECK(tensor(g, "blk.6.nextn.eh_proj.weight") && !tensor(g, "blk.4.nextn.eh_proj.weight"));
    CHECK(!tensor(g, "blk.7.attn_norm.weight"));
    const char *zeros[4] = {"blk.4.ssm_out.weight", "blk.4.ffn_down.weight", "blk.5.attn_output.weight",
                            "blk.5.ffn_down.weight"};
    for (int i = 0; i < 4; i++) {
        const nx_tensor *t = tensor(g, zeros[i]);
        CHECK_MSG(t && zero_from(t, 0), "%s is not all zero", zeros[i]);
    }
    /* live layers: the source's values, then zero ffn_down columns / random finite gate rows */
    const char *live[3] = {"blk.0", "blk.3", "blk.6"}, *srcl[3] = {"blk.0", "blk.3", "blk.4"};
    float x[1024], y[1024];
    for (int i = 0; i < 3; i++) {
        char a[64], b[64];
        snprintf(a, sizeof a, "%s.ffn_down.weight", live[i]);
        snprintf(b, sizeof b, "%s.ffn_down.weight", srcl[i]);
        const nx_tensor *t = tensor(g, a), *u = tensor(s, b);
        CHECK(t && u && t->type == ffn_type && t->ne[0] == 1024 && t->ne[1] == 192 && zero_from(t, 512));
        for (int64_t r = 0; t && u && r < 192; r++) {
            CHECK(row(t, r, x) && row(u, r, y));
            if (memcmp(x, y, 512 * sizeof *x)) { CHECK_MSG(false, "%s row %lld differs", a, (long long)r); break; }
        }
        snprintf(a, sizeof a, "%s.ffn_gate.weight", live[i]);
        snprintf(b, sizeof b, "%s.ffn_gate.weight", srcl[i]);
        t = tensor(g, a);
        u = tensor(s, b);
        CHECK(t && u && t->ne[0] == 192 && t->ne[1] == 1024);
        if (t && u && ffn_type == NX_TYPE_Q8_0) CHECK(!memcmp(t->data, u->data, u->nbytes));
        double ss = 0;
        for (int64_t r = 512; t && r < 1024; r++) {
            CHECK(row(t, r, x));
            for (int c = 0; c < 192; c++) ss += (double)x[c] * x[c];
        }
        CHECK(isfinite(ss) && ss > 0.5 * 512 && ss < 2.0 * 512);   /* std 1/sqrt(192): a unit row norm */
    }
    /* other tensors byte for byte */
    const nx_tensor *t = tensor(g, "blk.6.nextn.eh_proj.weight"), *u = tensor(s, "blk.4.nextn.eh_proj.weight");
    CHECK(t && u && t->nbytes == u->nbytes && !memcmp(t->data, u->data, u->nbytes));
    t = tensor(g, "token_embd.weight");
    u = tensor(s, "token_embd.weight");
    CHECK(t && u && t->nbytes == u->nbytes && !memcmp(t->data, u->data, u->nbytes));
done:
    nx_gguf_close(g);
    nx_gguf_close(s);
}

static void test_layout(void) {
    char path[600];
    nx_error e = {0};
    CHECK_MSG(inflate("l6q.gguf", 6, 1024, true, NX_TYPE_Q8_0, path, sizeof path, &e) == NX_OK, "%s", e.msg);
    check_layout(path, NX_TYPE_Q8_0);
    remove(path);
    CHECK_MSG(inflate("l6h.gguf", 6, 1024, true, NX_TYPE_F16, path, sizeof path, &e) == NX_OK, "%s", e.msg);
    nx_gguf *g = NULL;
    CHECK(nx_gguf_open(path, &g, &e) == NX_OK);
    if (g) {
        const nx_tensor *t = tensor(g, "blk.4.ffn_down.weight"), *d = tensor(g, "blk.1.ffn_down.weight");
        CHECK(t && t->type == NX_TYPE_F16 && zero_from(t, 0) && d && zero_from(d, 512));
        nx_gguf_close(g);
    }
    remove(path);
}

/* F32 FFNs hold the Q8_0 values exactly: still the same tokens. */
static void test_f32(void) {
    char path[600];
    nx_error e = {0};
    CHECK_MSG(inflate("l5f.gguf", 5, 544, true, NX_TYPE_F32, path, sizeof path, &e) == NX_OK, "%s", e.msg);
    nx_token ids[64], ref[NPRED], out[NPRED];
    const int n_ids = prompt(ids, 32);
    nx_model *src = NULL, *big = NULL;
    CHECK(nx_model_load(SRC, NULL, &src) == NX_OK);
    CHECK_MSG(nx_model_load(path, NULL, &big) == NX_OK, "%s", nx_last_error());
    if (src && big && n_ids == 32) {
        CHECK_EQ_INT(generate(src, ids, n_ids, 0, ref), NPRED);
        CHECK_EQ_INT(generate(big, ids, n_ids, 2, out), NPRED);
        CHECK(!memcmp(ref, out, sizeof ref));
    }
    nx_model_free(src);
    nx_model_free(big);
    remove(path);
}

static void test_refusals(void) {
    char path[600];
    nx_error e = {0};
    CHECK(inflate("bad.gguf", 6, 1000, false, NX_TYPE_F32, path, sizeof path, &e) == NX_ERR_INVALID_ARG);
    CHECK(strstr(e.msg, "block size") != NULL);
    CHECK(inflate("bad.gguf", 6, 1056, true, NX_TYPE_Q4_K, path, sizeof path, &e) == NX_ERR_INVALID_ARG);
    CHECK(inflate("bad.gguf", 6, 256, false, NX_TYPE_F32, path, sizeof path, &e) == NX_ERR_INVALID_ARG);
    CHECK(strstr(e.msg, "below") != NULL);
    CHECK(inflate("bad.gguf", 3, 512, false, NX_TYPE_F32, path, sizeof path, &e) == NX_ERR_INVALID_ARG);
    CHECK(access(path, F_OK) != 0);
    /* not qwen35 */
    char lpath[600];
    snprintf(lpath, sizeof lpath, "%s/llama.gguf", g_tmpdir);
    nx_genmodel_opts o = {.arch = "llama", .config_json = "{\"n_embd\":64,\"n_layer\":1,\"n_vocab\":300}", .seed = 1,
                          .wtype = NX_TYPE_F32, .out_path = lpath};
    CHECK(nx_genmodel_write(&o, &e) == NX_OK);
    nx_inflate_opts io = {.from_path = lpath, .out_path = path, .n_layer = 2, .n_ff = 512};
    CHECK(nx_genmodel_inflate(&io, NULL, &e) == NX_ERR_UNSUPPORTED);
    CHECK(strstr(e.msg, "qwen35") != NULL);
    remove(lpath);
}

int main(void) {
    if (!mkdtemp(g_tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(test_same_tokens);
    RUN(test_layout);
    RUN(test_f32);
    RUN(test_refusals);
    rmdir(g_tmpdir);
    return test_summary();
}
