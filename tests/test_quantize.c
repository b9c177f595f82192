/* test_quantize.c — `nextn quantize` (src/quantize.c), the imatrix files (src/imatrix.c) and the
 * importance-weighted row quantizers (src/quant/):
 *   - presets by name / alias / number; llama.cpp's per-tensor rules on a layer list;
 *   - the weighted quantizers lower the importance-weighted error against the unweighted ones;
 *   - imatrix: GGUF and legacy .dat round trips, malformed files refused;
 *   - a generated F32 qwen35 model (n_embd 256, so the K-quants apply; MTP layer) quantized to
 *     every preset nextn runs: it loads, metadata is copied (general.file_type set), the NextN
 *     tensors are there, the bytes do not depend on the thread count, logits stay within per-preset
 *     bounds of the F32 model's (trained model), and an already quantized file is refused without
 *     allow_requantize. */
#include <math.h>
#include <stdint.h>
#include <unistd.h>
#include "test.h"
#include "genmodel.h"
#include "gguf.h"
#include "imatrix.h"
#include "nextn.h"
#include "quant/quant.h"
#include "quantize.h"
#include "core/io.h"
#include "tokenizer.h"

static char g_tmpdir[] = "/tmp/nx_test_quantize_XXXXXX";

static uint64_t g_rng = 12345;
static float frand(void) {   /* uniform in [-1, 1) */
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((g_rng >> 40) * (1.0 / 8388608.0)) - 1.0f;
}

/* ===== presets and rules ===== */

static void test_presets(void) {
    const nx_quant_preset *p = nx_quant_preset_find("q4_k_m");
    CHECK(p && p->ftype == 15 && p->type == NX_TYPE_Q4_K);
    CHECK(nx_quant_preset_find("Q4_K") == p);          /* llama-quantize's alias */
    CHECK(nx_quant_preset_find("15") == p);            /* by file type number */
    CHECK(nx_quant_preset_find("7")->type == NX_TYPE_Q8_0);
    CHECK(nx_quant_preset_find("IQ4_XS")->ftype == 30);
    CHECK(nx_quant_preset_find("Q4_K_X") == NULL);
    CHECK(nx_quant_preset_find("") == NULL);
    CHECK(nx_quant_preset_find("99") == NULL);
}

static void test_rules(void) {
    const nx_quant_preset *m = nx_quant_preset_find("Q4_K_M");
    const int64_t ne[2] = {4096, 4096}, ne_odd[2] = {192, 64};
    /* 8 dense layers, all attention: attn_v and ffn_down counted in order */
    nx_quant_ctx q = {.n_layer = 8, .n_attention_wv = 8, .has_output = true};
    int q6_v = 0, q6_d = 0;
    for (int il = 0; il < 8; il++) {
        char nm[64];
        snprintf(nm, sizeof nm, "blk.%d.attn_v.weight", il);
        nx_type t = nx_quant_rule_type(m, &q, nm, ne);
        CHECK_EQ_INT(t, nx_quant_use_more_bits(il, 8) ? NX_TYPE_Q6_K : NX_TYPE_Q4_K);
        q6_v += t == NX_TYPE_Q6_K;
        snprintf(nm, sizeof nm, "blk.%d.ffn_down.weight", il);
        t = nx_quant_rule_type(m, &q, nm, ne);
        q6_d += t == NX_TYPE_Q6_K;
        snprintf(nm, sizeof nm, "blk.%d.attn_q.weight", il);
        CHECK_EQ_INT(nx_quant_rule_type(m, &q, nm, ne), NX_TYPE_Q4_K);
        snprintf(nm, sizeof nm, "blk.%d.attn_qkv.weight", il);
        CHECK_EQ_INT(nx_quant_rule_type(m, &q, nm, ne), NX_TYPE_Q5_K);
    }
    /* use_more_bits(i, 8): i = 0 (first eighth), 7 (last), 3, 6 ((i - 1) % 3 == 2) */
    CHECK_EQ_INT(q6_v, 4);
    CHECK_EQ_INT(q6_d, 4);
    CHECK_EQ_INT(nx_quant_rule_type(m, &q, "output.weight", ne), NX_TYPE_Q6_K);
    CHECK_EQ_INT(nx_quant_rule_type(m, &q, "token_embd.weight", ne), NX_TYPE_Q4_K);
    q.has_output = false;   /* tied: token_embd is the output */
    CHECK_EQ_INT(nx_quant_rule_type(m, &q, "token_embd.weight", ne), NX_TYPE_Q6_K);
    CHECK_EQ_INT(nx_quant_rule_type(m, &q, "token_embd.weight", ne_odd), NX_TYPE_Q8_0);
    /* rows that a 256-block does not divide: llama.cpp's fallbacks */
    CHECK_EQ_INT(nx_quant_fallback_type(NX_TYPE_Q4_K, 192), NX_TYPE_Q5_0);
    CHECK_EQ_INT(nx_quant_fallback_type(NX_TYPE_Q5_K, 192), NX_TYPE_Q5_1);
    CHECK_EQ_INT(nx_quant_fallback_type(NX_TYPE_Q6_K, 192), NX_TYPE_Q8_0);
    CHECK_EQ_INT(nx_quant_fallback_type(NX_TYPE_IQ4_XS, 192), NX_TYPE_IQ4_NL);
    CHECK_EQ_INT(nx_quant_fallback_type(NX_TYPE_Q4_0, 48), NX_TYPE_F16);
    CHECK_EQ_INT(nx_quant_fallback_type(NX_TYPE_Q4_K, 256), NX_TYPE_Q4_K);
    /* what is never quantized */
    CHECK(!nx_quant_wants("blk.0.attn_norm.weight", 1, false));
    CHECK(!nx_quant_wants("blk.0.ssm_norm.weight", 2, false));
    CHECK(!nx_quant_wants("blk.0.ssm_conv1d.weight", 2, false));
    CHECK(!nx_quant_wants("blk.0.ffn_gate_inp.weight", 2, false));
    CHECK(!nx_quant_wants("blk.0.ssm_a", 2, false));
    CHECK(!nx_quant_wants("output.weight", 2, true));
    CHECK(nx_quant_wants("output.weight", 2, false));
    CHECK(nx_quant_wants("blk.4.nextn.eh_proj.weight", 2, false));
}

/* ===== weighted quantizers ===== */

/* sum_j w_j (x_j - q(x)_j)^2 over `rows` rows of n values, quantized with or without w */
static double weighted_err(nx_type t, const float *x, const float *w, int n, int rows, bool use_w) {
    const size_t rs = nx_row_size(t, n);
    uint8_t *q = malloc(rs);
    float *y = malloc((size_t)n * sizeof *y);
    double e = 0;
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * n;
        if (nx_quantize_row_imat(t, xr, q, n, use_w ? w : NULL) != rs) { e = INFINITY; break; }
        nx_dequantize_row(t, q, y, n);
        for (int j = 0; j < n; j++) e += w[j] * (double)(xr[j] - y[j]) * (xr[j] - y[j]);
    }
    free(q);
    free(y);
    return e;
}

static void test_weighted_rows(void) {
    const int n = 512, rows = 64;
    float *x = malloc((size_t)n * rows * sizeof *x), *w = malloc((size_t)n * sizeof *w);
    for (int i = 0; i < n * rows; i++) x[i] = frand() + 0.3f * frand() * frand() * frand();
    /* a few columns matter much more (as real activations have outlier channels) */
    for (int j = 0; j < n; j++) w[j] = j % 37 == 0 ? 50.0f : 0.05f + fabsf(frand());
    static const nx_type types[] = {NX_TYPE_Q4_0, NX_TYPE_Q4_1, NX_TYPE_Q5_0, NX_TYPE_Q5_1, NX_TYPE_Q4_K,
                                    NX_TYPE_Q5_K, NX_TYPE_Q6_K, NX_TYPE_IQ4_NL, NX_TYPE_IQ4_XS};
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        CHECK(nx_quant_uses_imatrix(types[k]));
        const double e0 = weighted_err(types[k], x, w, n, rows, false), e1 = weighted_err(types[k], x, w, n, rows, true);
        fprintf(stderr, "  %-7s weighted error: plain %.4g, imatrix %.4g (x%.3f)\n", nx_type_name(types[k]), e0, e1, e1 / e0);
        CHECK_MSG(e1 < 0.9 * e0, "%s: %g vs %g", nx_type_name(types[k]), e1, e0);
    }
    /* no imatrix path: same bytes as without */
    CHECK(!nx_quant_uses_imatrix(NX_TYPE_Q8_0));
    uint8_t a[34 * 16], b[34 * 16];
    CHECK(nx_quantize_row_imat(NX_TYPE_Q8_0, x, a, n, w) == sizeof a && nx_quantize_row(NX_TYPE_Q8_0, x, b, n) == sizeof b);
    CHECK(!memcmp(a, b, sizeof a));
    /* bad importances are refused */
    w[3] = -1;
    CHECK(nx_quantize_row_imat(NX_TYPE_Q4_K, x, a, 256, w) == 0);
    w[3] = NAN;
    CHECK(nx_quantize_row_imat(NX_TYPE_Q4_K, x, a, 256, w) == 0);
    free(x);
    free(w);
}

/* ===== imatrix files ===== */

static void fill_imatrix(nx_imatrix *im) {
    float x[3 * 64];
    for (int i = 0; i < 3 * 64; i++) x[i] = frand();
    nx_error e = {0};
    CHECK(nx_imatrix_add(im, "blk.0.attn_q.weight", 64, 1, 0, x, 3, 64, &e) == NX_OK);
    CHECK(nx_imatrix_add(im, "blk.0.attn_q.weight", 64, 1, 0, x, 2, 64, &e) == NX_OK);
    CHECK(nx_imatrix_add(im, "blk.1.ffn_down_exps.weight", 32, 4, 2, x, 3, 32, &e) == NX_OK);
    CHECK(nx_imatrix_add(im, "blk.0.attn_q.weight", 32, 1, 0, x, 1, 32, &e) == NX_ERR_INVALID_ARG);   /* shape */
    CHECK(nx_imatrix_add_dataset(im, "calib.txt", &e) == NX_OK);
    nx_imatrix_set_chunks(im, 3, 512);
}

static void test_imatrix_files(void) {
    nx_imatrix *im = nx_imatrix_create();
    fill_imatrix(im);
    const nx_imatrix_entry *q = nx_imatrix_find(im, "blk.0.attn_q.weight");
    REQUIRE_MSG(q && q->counts[0] == 5, "entry");
    float v0[64], v1[64];
    nx_imatrix_values(q, 0, v0);
    char pg[256], pd[256];
    snprintf(pg, sizeof pg, "%s/im.gguf", g_tmpdir);
    snprintf(pd, sizeof pd, "%s/im.dat", g_tmpdir);
    nx_error e = {0};
    CHECK_MSG(nx_imatrix_save(im, pg, false, &e) == NX_OK, "%s", e.msg);
    CHECK_MSG(nx_imatrix_save(im, pd, true, &e) == NX_OK, "%s", e.msg);
    for (int legacy = 0; legacy < 2; legacy++) {
        nx_imatrix *r = NULL;
        REQUIRE_MSG(nx_imatrix_load(legacy ? pd : pg, 512, &r, &e) == NX_OK, "%s", e.msg);
        const nx_imatrix_entry *rq = nx_imatrix_find(r, "blk.0.attn_q.weight");
        const nx_imatrix_entry *rx = nx_imatrix_find(r, "blk.1.ffn_down_exps.weight");
        CHECK(rq && rx);
        if (rq) {
            nx_imatrix_values(rq, 0, v1);
            for (int j = 0; j < 64; j++) CHECK_NEAR(v1[j], v0[j], 1e-5 * (1 + v0[j]));
        }
        if (rx && !legacy) {   /* GGUF keeps experts apart: matrix 2 has data, the others none (1.0) */
            CHECK_EQ_INT(rx->n_mat, 4);
            CHECK_EQ_INT(rx->counts[2], 3);
            nx_imatrix_values(rx, 0, v1);
            CHECK(v1[0] == 1.0f);
        }
        if (rx && legacy) CHECK_EQ_INT(rx->n_per_mat, 128);   /* the legacy format folds them */
        CHECK_EQ_INT(nx_imatrix_chunk_count(r), 3);
        CHECK(nx_imatrix_n_datasets(r) == 1 && !strcmp(nx_imatrix_dataset(r, 0), "calib.txt"));
        nx_imatrix_free(r);
    }
    /* malformed legacy files */
    uint8_t bad[64] = {0};
    nx_imatrix *r = NULL;
    CHECK(nx_imatrix_load_memory(bad, 4, 512, &r, &e) == NX_ERR_FORMAT);          /* zero entries */
    int32_t hdr[6] = {1, 4, 0x6b6c6262, 1, 1000, 0};                           /* "bblk", nval 1000, no data */
    CHECK(nx_imatrix_load_memory(hdr, sizeof hdr, 512, &r, &e) == NX_ERR_FORMAT);
    int32_t neg[6] = {1, -5, 0, 0, 0, 0};
    CHECK(nx_imatrix_load_memory(neg, sizeof neg, 512, &r, &e) == NX_ERR_FORMAT);
    float nanv[6];
    int32_t hn[5] = {1, 1, 0x41, 1, 1};
    memcpy(nanv, hn, sizeof hn);
    nanv[5] = -1.0f;
    CHECK(nx_imatrix_load_memory(nanv, sizeof nanv, 512, &r, &e) == NX_ERR_FORMAT);   /* negative value */
    CHECK(r == NULL);
    nx_imatrix_free(im);
}

/* ===== whole models ===== */

static const char *CONFIG = "{\"n_embd\": 256, \"n_layer\": 4, \"n_ff\": 512, \"n_vocab\": 512, \"head_dim\": 64,"
                            " \"ssm_head_dim\": 64, \"n_nextn\": 1}";
#define NTOK 64

static nx_token g_tok[NTOK];

/* Logits of the NTOK tokens of g_tok (every row). */
static float *logits_of(const char *path, int *V) {
    nx_model *m = NULL;
    if (nx_model_load(path, NULL, &m) != NX_OK) { fprintf(stderr, "  load %s: %s\n", path, nx_last_error()); return NULL; }
    nx_ctx_params p = nx_ctx_default_params();
    p.n_ctx = NTOK;
    p.n_threads = 2;
    nx_ctx *c = NULL;
    float *out = NULL;
    nx_batch *b = nx_batch_create(NTOK);
    if (nx_ctx_create(m, &p, &c) == NX_OK) {
        for (int i = 0; i < NTOK; i++) nx_batch_add(b, g_tok[i], i, 0, true);
        *V = nx_model_n_vocab(m);
        if (nx_decode(c, b) == NX_OK && (out = malloc((size_t)NTOK * *V * sizeof *out)))
            for (int i = 0; i < NTOK; i++) memcpy(out + (size_t)i * *V, nx_ctx_logits(c, i), (size_t)*V * sizeof *out);
    }
    nx_batch_free(b);
    nx_ctx_free(c);
    nx_model_free(m);
    return out;
}

static double kl_rows(const float *ref, const float *q, int V) {
    double kl = 0;
    for (int r = 0; r < NTOK; r++) {
        const float *a = ref + (size_t)r * V, *b = q + (size_t)r * V;
        double ma = a[0], mb = b[0], sa = 0, sb = 0;
        for (int i = 0; i < V; i++) { ma = fmax(ma, a[i]); mb = fmax(mb, b[i]); }
        for (int i = 0; i < V; i++) { sa += exp(a[i] - ma); sb += exp(b[i] - mb); }
        for (int i = 0; i < V; i++) {
            const double la = a[i] - ma - log(sa), lb = b[i] - mb - log(sb);
            kl += exp(la) * (la - lb);
        }
    }
    return kl / NTOK;
}

typedef struct dstats {
    double max, mean, kl, mib;
} dstats;

/* Quantize `in` to preset into dir/<preset>.gguf, load it and compare its logits with ref. */
static bool quantize_and_compare(const char *in, const char *preset, const float *ref, dstats *d) {
    char out[256];
    snprintf(out, sizeof out, "%s/%s.gguf", g_tmpdir, preset);
    nx_error e = {0};
    nx_quantize_opts o = {.in_path = in, .out_path = out, .preset = nx_quant_preset_find(preset), .n_threads = 2,
                          .output_type = NX_TYPE_COUNT, .embd_type = NX_TYPE_COUNT};
    nx_quantize_info info = {0};
    if (nx_quantize_model(&o, &info, &e) != NX_OK) { fprintf(stderr, "  %s: %s\n", preset, e.msg); return false; }
    int V = 0;
    float *q = logits_of(out, &V);
    if (!q) return false;
    d->max = d->mean = 0;
    for (size_t i = 0; i < (size_t)NTOK * V; i++) {
        const double x = fabs((double)q[i] - ref[i]);
        if (!(x == x)) { free(q); return false; }
        d->max = fmax(d->max, x);
        d->mean += x;
    }
    d->mean /= (double)NTOK * V;
    d->kl = kl_rows(ref, q, V);
    d->mib = info.bytes_out / 1048576.0;
    free(q);
    return true;
}

/* A random-weight model with 256-wide rows (every K-quant applies): each preset nextn runs
 * loads and decodes, and the error grows as the bits shrink. Random deep nets amplify any
 * perturbation (no trained structure damps it), so only the order is asserted here; the
 * bounds are checked on the trained model (test_quantize_trained). */
static void test_quantize_model(void) {
    char f32[256];
    snprintf(f32, sizeof f32, "%s/f32.gguf", g_tmpdir);
    nx_error e = {0};
    nx_genmodel_opts go = {.arch = "qwen35", .config_json = CONFIG, .seed = 3, .wtype = NX_TYPE_F32, .out_path = f32};
    REQUIRE_MSG(nx_genmodel_write(&go, &e) == NX_OK, "%s", e.msg);
    for (int i = 0; i < NTOK; i++) g_tok[i] = (i * 37 + 11) % 500;
    int V = 0;
    float *ref = logits_of(f32, &V);
    REQUIRE_MSG(ref, "f32 logits");
    static const char *const order[] = {"F16", "Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M", "Q4_0"};
    static const char *const others[] = {"BF16", "Q5_K_S", "Q5_0", "Q5_1", "Q4_K_S", "Q4_1", "IQ4_XS", "IQ4_NL"};
    double prev = -1;
    for (size_t k = 0; k < sizeof order / sizeof order[0]; k++) {
        dstats d;
        CHECK_MSG(quantize_and_compare(f32, order[k], ref, &d), "%s", order[k]);
        fprintf(stderr, "  random %-7s %6.3f MiB: max |dlogit| %.4f, mean %.5f, KL %.2e\n", order[k], d.mib, d.max, d.mean, d.kl);
        CHECK_MSG(d.kl > prev, "%s: KL %g not above the previous %g", order[k], d.kl, prev);
        prev = d.kl;
    }
    for (size_t k = 0; k < sizeof others / sizeof others[0]; k++) {
        dstats d;
        CHECK_MSG(quantize_and_compare(f32, others[k], ref, &d), "%s", others[k]);
    }
    free(ref);

    /* the Q4_K_M file: metadata copied, file type set, the mix's types, the NextN layer kept */
    char q4[256];
    snprintf(q4, sizeof q4, "%s/Q4_K_M.gguf", g_tmpdir);
    nx_gguf *a = NULL, *b = NULL;
    REQUIRE_MSG(nx_gguf_open(f32, &a, &e) == NX_OK && nx_gguf_open(q4, &b, &e) == NX_OK, "%s", e.msg);
    for (int64_t i = 0; i < nx_gguf_n_kv(a); i++) {
        const char *k = nx_gguf_key(a, i);
        const int64_t j = nx_gguf_find_key(b, k);
        CHECK_MSG(j >= 0, "key %s lost", k);
        if (j < 0 || !strcmp(k, "general.file_type")) continue;
        uint64_t sa, sb;
        const void *ra = nx_gguf_kv_raw(a, i, &sa), *rb = nx_gguf_kv_raw(b, j, &sb);
        CHECK_MSG(sa == sb && !memcmp(ra, rb, sa), "key %s changed", k);
    }
    int64_t ft = -1;
    CHECK(nx_gguf_get_int(b, "general.file_type", &ft) && ft == 15);
    CHECK_EQ_INT(nx_gguf_n_tensors(a), nx_gguf_n_tensors(b));
    int n_nextn = 0;
    for (int64_t i = 0; i < nx_gguf_n_tensors(b); i++) n_nextn += strstr(nx_gguf_tensor(b, i)->name, ".nextn.") != NULL;
    CHECK(n_nextn >= 3);
    const nx_tensor *t = nx_gguf_tensor(b, nx_gguf_find_tensor(b, "blk.0.ffn_gate.weight"));
    CHECK(t && t->type == NX_TYPE_Q4_K);
    t = nx_gguf_tensor(b, nx_gguf_find_tensor(b, "blk.0.attn_qkv.weight"));
    CHECK(t && t->type == NX_TYPE_Q5_K);
    /* ffn_down i of 5 (block_count counts the MTP layer): use_more_bits picks 2 and 4 (the MTP one) */
    t = nx_gguf_tensor(b, nx_gguf_find_tensor(b, "blk.0.ffn_down.weight"));
    CHECK(t && t->type == NX_TYPE_Q4_K);
    t = nx_gguf_tensor(b, nx_gguf_find_tensor(b, "blk.2.ffn_down.weight"));
    CHECK(t && t->type == NX_TYPE_Q6_K);
    t = nx_gguf_tensor(b, nx_gguf_find_tensor(b, "blk.4.ffn_down.weight"));
    CHECK(t && t->type == NX_TYPE_Q6_K);
    t = nx_gguf_tensor(b, nx_gguf_find_tensor(b, "blk.0.attn_norm.weight"));
    CHECK(t && t->type == NX_TYPE_F32);
    nx_gguf_close(a);
    nx_gguf_close(b);

    /* rows are independent: the bytes do not depend on the thread count */
    {
        char q1[256];
        snprintf(q1, sizeof q1, "%s/q4km-1t.gguf", g_tmpdir);
        nx_quantize_opts o1 = {.in_path = f32, .out_path = q1, .preset = nx_quant_preset_find("Q4_K_M"), .n_threads = 1,
                               .output_type = NX_TYPE_COUNT, .embd_type = NX_TYPE_COUNT};
        CHECK(nx_quantize_model(&o1, NULL, &e) == NX_OK);
        char *x = NULL, *y = NULL;
        size_t nx = 0, ny = 0;
        CHECK(nx_read_file(q1, 1 << 26, &x, &nx, &e) == NX_OK && nx_read_file(q4, 1 << 26, &y, &ny, &e) == NX_OK);
        CHECK(nx == ny && x && y && !memcmp(x, y, nx));
        free(x);
        free(y);
    }

    /* an already quantized file: refused, unless allowed; same-type tensors are copied */
    char rq[256];
    snprintf(rq, sizeof rq, "%s/requant.gguf", g_tmpdir);
    nx_quantize_opts o = {.in_path = q4, .out_path = rq, .preset = nx_quant_preset_find("Q4_0"), .n_threads = 1,
                          .output_type = NX_TYPE_COUNT, .embd_type = NX_TYPE_COUNT};
    CHECK(nx_quantize_model(&o, NULL, &e) == NX_ERR_INVALID_ARG);
    CHECK_MSG(strstr(e.msg, "requantizing from type") != NULL, "%s", e.msg);
    CHECK(access(rq, F_OK) != 0);   /* no partial file */
    o.allow_requantize = true;
    CHECK_MSG(nx_quantize_model(&o, NULL, &e) == NX_OK, "%s", e.msg);
    o.in_path = o.out_path;   /* in place: refused */
    CHECK(nx_quantize_model(&o, NULL, &e) == NX_ERR_INVALID_ARG);
    /* overrides */
    o.in_path = f32;
    o.allow_requantize = false;
    o.preset = nx_quant_preset_find("Q8_0");
    o.embd_type = NX_TYPE_Q4_K;
    CHECK_MSG(nx_quantize_model(&o, NULL, &e) == NX_OK, "%s", e.msg);
    REQUIRE_MSG(nx_gguf_open(rq, &b, &e) == NX_OK, "%s", e.msg);
    t = nx_gguf_tensor(b, nx_gguf_find_tensor(b, "token_embd.weight"));
    CHECK(t && t->type == NX_TYPE_Q4_K);
    nx_gguf_close(b);
}

/* The bundled trained model, its Q8_0 weights widened to F32 (itself a requantization), is the
 * reference; each preset's logits on 64 held-out tokens must stay within a bound. Its rows are
 * 192 wide, so Q4_K / Q5_K / Q6_K / IQ4_XS apply to ffn_down, attn_output and ssm_out, and the
 * rest take llama.cpp's fallbacks (Q5_0, Q5_1, Q8_0, IQ4_NL).
 * Bounds: ~2x the measured values (the quantizers are deterministic; only the forward's SIMD level
 * moves the figures, by far less), and in the order of the types' bits. A trained model damps
 * weight noise: Q8_0 moves a logit by ~0.03, 4-bit types by ~0.5, out of logits of rms ~3. */
static void test_quantize_trained(void) {
    char f32[256];
    snprintf(f32, sizeof f32, "%s/trained-f32.gguf", g_tmpdir);
    nx_error e = {0};
    nx_quantize_opts o = {.in_path = "models/tiny-qwen35-mtp-q8_0.gguf", .out_path = f32, .preset = nx_quant_preset_find("F32"),
                          .n_threads = 2, .output_type = NX_TYPE_COUNT, .embd_type = NX_TYPE_COUNT};
    CHECK(nx_quantize_model(&o, NULL, &e) == NX_ERR_INVALID_ARG);   /* Q8_0 -> F32 is a requantization too */
    o.allow_requantize = true;
    REQUIRE_MSG(nx_quantize_model(&o, NULL, &e) == NX_OK, "%s", e.msg);
    nx_tokenizer *tok = NULL;
    char *text = NULL;
    size_t len = 0;
    nx_token_vec v = {0};
    REQUIRE_MSG(nx_tokenizer_load(f32, &tok, &e) == NX_OK && nx_read_file("models/heldout.py.txt", 1 << 20, &text, &len, &e) == NX_OK &&
                    nx_tokenize(tok, text, len, NX_TOK_ADD_SPECIAL, &v, &e) == NX_OK && v.n >= NTOK,
                "%s", e.msg);
    memcpy(g_tok, v.ids, sizeof g_tok);
    nx_token_vec_free(&v);
    free(text);
    nx_tokenizer_free(tok);
    int V = 0;
    float *ref = logits_of(f32, &V);
    REQUIRE_MSG(ref, "f32 logits");
    static const struct { const char *preset; double max, mean, kl; } cases[] = {
        /* measured (AVX-512): F16 0.0050 / 0.00052 / 1.1e-7, Q8_0 0.155 / 0.018 / 1.4e-4 (mostly the
         * activations' 8-bit rounding in the Q8_0 kernels), Q6_K 0.30 / 0.036 / 5.3e-4, 5-bit 0.54-0.67 /
         * 0.067-0.077 / 2.0-2.7e-3, Q4_K 0.70-0.73 / 0.10 / 5e-3, Q4_0 / Q4_1 / IQ4 0.96-1.14 / 0.13-0.15 / 0.008-0.012 */
        {"F16", 0.01, 0.0015, 5e-7},  {"BF16", 0.1, 0.01, 3e-5},   {"Q8_0", 0.3, 0.04, 3e-4},
        {"Q6_K", 0.6, 0.07, 1.2e-3},  {"Q5_K_M", 1.2, 0.15, 6e-3}, {"Q5_K_S", 1.2, 0.15, 6e-3},
        {"Q5_1", 1.2, 0.15, 6e-3},    {"Q5_0", 1.2, 0.15, 6e-3},   {"Q4_K_M", 1.5, 0.2, 1e-2},
        {"Q4_K_S", 1.5, 0.2, 1e-2},   {"Q4_1", 2.0, 0.3, 2.5e-2},  {"Q4_0", 2.0, 0.3, 2.5e-2},
        {"IQ4_XS", 2.0, 0.3, 2.5e-2}, {"IQ4_NL", 2.0, 0.3, 2.5e-2},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        dstats d;
        if (!quantize_and_compare(f32, cases[k].preset, ref, &d)) { CHECK_MSG(0, "%s", cases[k].preset); continue; }
        fprintf(stderr, "  trained %-7s %6.3f MiB: max |dlogit| %.4f, mean %.5f, KL %.2e\n", cases[k].preset, d.mib, d.max,
                d.mean, d.kl);
        CHECK_MSG(d.max <= cases[k].max && d.mean <= cases[k].mean && d.kl <= cases[k].kl, "%s: %g %g %g",
                  cases[k].preset, d.max, d.mean, d.kl);
    }
    free(ref);
}

int main(void) {
    if (!mkdtemp(g_tmpdir)) { perror("mkdtemp"); return 1; }
    RUN(test_presets);
    RUN(test_rules);
    RUN(test_weighted_rows);
    RUN(test_imatrix_files);
    RUN(test_quantize_model);
    RUN(test_quantize_trained);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "cleanup failed\n");
    return test_summary();
}
