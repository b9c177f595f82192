/*
 * genmodel.c — random-weight GGUF test models.
 *
 * A builder collects metadata and tensors into a GGUF writer; each architecture is one
 * function that reads its hyper-parameters from the JSON config (with defaults) and
 * declares keys and tensors. Weight data is generated here and owned by the builder until
 * the file is written. The PRNG is splitmix64 + Box-Muller: deterministic everywhere.
 */
#include "genmodel.h"
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gguf.h"
#include "quant/quant.h"
#include "quantize.h"

/* ===== Builder ===== */

typedef struct gm_builder {
    nx_gguf_writer *w;
    cJSON *cfg;
    uint64_t rng;
    nx_type wtype;
    bool q4_k_m;
    int n_layer;          /* block_count, once written */
    bool tied;            /* set by the arch builder: token_embd is also the output */
    const char *arch;
    void **bufs;          /* tensor data kept alive until the writer has written */
    size_t n_bufs, cap_bufs;
    nx_error *err;
    nx_status st;         /* first failure, sticky */
} gm_builder;

static uint64_t gm_next(gm_builder *b) {
    uint64_t z = (b->rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double gm_uniform(gm_builder *b) { return ((gm_next(b) >> 11) + 0.5) * (1.0 / 9007199254740992.0); }

static float gm_gauss(gm_builder *b) {
    double u1 = gm_uniform(b), u2 = gm_uniform(b);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

static int64_t gm_int(gm_builder *b, const char *key, int64_t def) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(b->cfg, key);
    return cJSON_IsNumber(v) ? (int64_t)v->valuedouble : def;
}

static double gm_float(gm_builder *b, const char *key, double def) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(b->cfg, key);
    return cJSON_IsNumber(v) ? v->valuedouble : def;
}

static bool gm_bool(gm_builder *b, const char *key, bool def) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(b->cfg, key);
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : def;
}

static void *gm_keep(gm_builder *b, size_t bytes) {
    if (b->st != NX_OK) return NULL;
    if (b->n_bufs == b->cap_bufs) {
        size_t cap = b->cap_bufs ? b->cap_bufs * 2 : 64;
        void **nb = realloc(b->bufs, cap * sizeof *nb);
        if (!nb) { b->st = nx_fail(b->err, NX_ERR_NOMEM, "gen-model: out of memory"); return NULL; }
        b->bufs = nb;
        b->cap_bufs = cap;
    }
    void *p = calloc(1, bytes ? bytes : 1);
    if (!p) { b->st = nx_fail(b->err, NX_ERR_NOMEM, "gen-model: out of memory (%zu bytes)", bytes); return NULL; }
    b->bufs[b->n_bufs++] = p;
    return p;
}

static void gm_check(gm_builder *b, nx_status s, const char *what) {
    if (s != NX_OK && b->st == NX_OK) b->st = nx_fail(b->err, s, "gen-model: cannot add %s", what);
}

/* How a tensor's values are drawn. */
typedef enum { GM_NORMAL, GM_NORM_WEIGHT, GM_ZERO, GM_CONST, GM_NEG_EXP } gm_init;

/* Add a tensor of 1..4 dims (ggml order). 2-D+ tensors take the builder's weight type when
 * their rows fit its block size; 1-D tensors (norms, biases) stay F32. */
static void gm_tensor_t(gm_builder *b, const char *name, gm_init init, float scale, int n_dims, int64_t ne0,
                        int64_t ne1, int64_t ne2, int64_t ne3, bool force_f32);
static void gm_tensor(gm_builder *b, const char *name, gm_init init, float scale, int n_dims, int64_t ne0,
                      int64_t ne1, int64_t ne2, int64_t ne3) {
    gm_tensor_t(b, name, init, scale, n_dims, ne0, ne1, ne2, ne3, false);
}

/* The weight type of a tensor: the builder's, or what `nextn quantize ... Q4_K_M` would pick
 * (quantize.h's rules, with the layer index taken from the name and block_count layers). */
static nx_type gm_weight_type(gm_builder *b, const char *name, const int64_t *ne) {
    if (!b->q4_k_m) return b->wtype;
    int il = 0;
    if (sscanf(name, "blk.%d.", &il) != 1) il = 0;
    nx_quant_ctx q = {.n_layer = b->n_layer, .n_attention_wv = b->n_layer, .i_attention_wv = il, .i_ffn_down = il,
                      .has_output = !b->tied};
    return nx_quant_rule_type(nx_quant_preset_find("Q4_K_M"), &q, name, ne);
}

static void gm_tensor_t(gm_builder *b, const char *name, gm_init init, float scale, int n_dims, int64_t ne0,
                        int64_t ne1, int64_t ne2, int64_t ne3, bool force_f32) {
    if (b->st != NX_OK) return;
    int64_t ne[4] = {ne0, ne1, ne2, ne3};
    int64_t n = 1;
    for (int i = 0; i < n_dims; i++) n *= ne[i];
    float *x = malloc((size_t)n * sizeof *x);
    if (!x) { b->st = nx_fail(b->err, NX_ERR_NOMEM, "gen-model: out of memory for %s", name); return; }
    for (int64_t i = 0; i < n; i++) {
        switch (init) {
        case GM_NORMAL: x[i] = scale * gm_gauss(b); break;
        case GM_NORM_WEIGHT: x[i] = 1.0f + scale * gm_gauss(b); break;
        case GM_ZERO: x[i] = 0.0f; break;
        case GM_CONST: x[i] = scale; break;
        case GM_NEG_EXP: x[i] = -expf(scale * (float)gm_uniform(b)); break;   /* -exp(A_log), A_log in [0, scale) */
        }
    }
    nx_type t = NX_TYPE_F32;
    const nx_type wt = n_dims >= 2 && !force_f32 ? gm_weight_type(b, name, ne) : NX_TYPE_F32;
    const nx_type_traits *tr = nx_type_info(wt);
    if (n_dims >= 2 && tr && ne0 % tr->blck_size == 0 && !force_f32) t = wt;
    size_t row = nx_row_size(t, ne0);
    void *data = gm_keep(b, row * (size_t)(n / ne0));
    if (!data) { free(x); return; }
    for (int64_t r = 0; r < n / ne0; r++) {
        if (nx_quantize_row(t, x + r * ne0, (char *)data + (size_t)r * row, ne0) != row) {
            free(x);
            b->st = nx_fail(b->err, NX_ERR_UNSUPPORTED, "gen-model: cannot quantize %s to %s", name, nx_type_name(t));
            return;
        }
    }
    free(x);
    gm_check(b, nx_gguf_add_tensor(b->w, name, t, n_dims, ne, data), name);
}

static void gm_key_u32(gm_builder *b, const char *suffix, uint32_t v) {
    if (!strcmp(suffix, "block_count")) b->n_layer = (int)v;
    char key[256];
    snprintf(key, sizeof key, "%s.%s", b->arch, suffix);
    gm_check(b, nx_gguf_set_u32(b->w, key, v), key);
}

static void gm_key_f32(gm_builder *b, const char *suffix, float v) {
    char key[256];
    snprintf(key, sizeof key, "%s.%s", b->arch, suffix);
    gm_check(b, nx_gguf_set_f32(b->w, key, v), key);
}

static void gm_key_str(gm_builder *b, const char *suffix, const char *v) {
    char key[256];
    snprintf(key, sizeof key, "%s.%s", b->arch, suffix);
    gm_check(b, nx_gguf_set_str(b->w, key, v), key);
}

static void gm_key_bool(gm_builder *b, const char *suffix, bool v) {
    char key[256];
    snprintf(key, sizeof key, "%s.%s", b->arch, suffix);
    gm_check(b, nx_gguf_set_bool(b->w, key, v), key);
}

/* `<arch>.<suffix>` = array of n elements of type t. */
static void gm_key_arr(gm_builder *b, const char *suffix, nx_gguf_vtype t, const void *data, uint64_t n) {
    char key[256];
    snprintf(key, sizeof key, "%s.%s", b->arch, suffix);
    gm_check(b, nx_gguf_set_arr(b->w, key, t, data, n), key);
}

/* ===== Tokenizer: byte-level BPE over the 256 bytes, plus fillers and ChatML specials ===== */

/* GPT-2's byte -> code point mapping: printable bytes map to themselves, the rest to 256+. */
static uint32_t gm_byte_cp(int byte) {
    if ((byte >= 33 && byte <= 126) || (byte >= 161 && byte <= 172) || (byte >= 174 && byte <= 255)) return (uint32_t)byte;
    int k = 0;
    for (int c = 0; c < byte; c++)
        if (!((c >= 33 && c <= 126) || (c >= 161 && c <= 172) || (c >= 174 && c <= 255))) k++;
    return 256u + (uint32_t)k;
}

static int gm_utf8(uint32_t cp, char *out) {
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    if (cp < 0x800) { out[0] = (char)(0xc0 | (cp >> 6)); out[1] = (char)(0x80 | (cp & 0x3f)); return 2; }
    out[0] = (char)(0xe0 | (cp >> 12)); out[1] = (char)(0x80 | ((cp >> 6) & 0x3f)); out[2] = (char)(0x80 | (cp & 0x3f));
    return 3;
}

static void gm_tokenizer_bytes(gm_builder *b, int64_t n_vocab) {
    if (b->st != NX_OK) return;
    static const char *specials[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
    const int n_spec = 3;
    if (n_vocab < 256 + n_spec) {
        b->st = nx_fail(b->err, NX_ERR_INVALID_ARG, "gen-model: n_vocab %lld < %d (256 bytes + specials)",
                        (long long)n_vocab, 256 + n_spec);
        return;
    }
    char **toks = gm_keep(b, (size_t)n_vocab * sizeof *toks);
    int32_t *types = gm_keep(b, (size_t)n_vocab * sizeof *types);
    char *text = gm_keep(b, (size_t)n_vocab * 24);
    if (!toks || !types || !text) return;
    for (int64_t i = 0; i < n_vocab; i++) {
        char *s = text + i * 24;
        if (i < 256) {
            s[gm_utf8(gm_byte_cp((int)i), s)] = '\0';
            types[i] = 1;  /* normal */
        } else if (i >= n_vocab - n_spec) {
            snprintf(s, 24, "%s", specials[i - (n_vocab - n_spec)]);
            types[i] = 3;  /* control */
        } else {
            snprintf(s, 24, "<|filler_%lld|>", (long long)i);
            types[i] = 5;  /* unused */
        }
        toks[i] = s;
    }
    gm_check(b, nx_gguf_set_str(b->w, "tokenizer.ggml.model", "gpt2"), "tokenizer.ggml.model");
    gm_check(b, nx_gguf_set_str(b->w, "tokenizer.ggml.pre", "qwen2"), "tokenizer.ggml.pre");
    gm_check(b, nx_gguf_set_arr_str(b->w, "tokenizer.ggml.tokens", (const char *const *)toks, NULL, (uint64_t)n_vocab),
             "tokenizer.ggml.tokens");
    gm_check(b, nx_gguf_set_arr(b->w, "tokenizer.ggml.token_type", NX_GGUF_I32, types, (uint64_t)n_vocab),
             "tokenizer.ggml.token_type");
    const char *no_merges[1] = {NULL};
    gm_check(b, nx_gguf_set_arr_str(b->w, "tokenizer.ggml.merges", no_merges, NULL, 0), "tokenizer.ggml.merges");
    gm_check(b, nx_gguf_set_u32(b->w, "tokenizer.ggml.eos_token_id", (uint32_t)(n_vocab - 1)), "eos");
    gm_check(b, nx_gguf_set_u32(b->w, "tokenizer.ggml.padding_token_id", (uint32_t)(n_vocab - n_spec)), "pad");
    gm_check(b, nx_gguf_set_bool(b->w, "tokenizer.ggml.add_bos_token", false), "add_bos");
}

/* ===== Architectures ===== */

/* Generic dense transformer in llama.cpp's `llama` layout (RMSNorm, GQA attention, SwiGLU). Config keys
 * (defaults): n_embd 256, n_layer 2, n_head 4, n_head_kv 2, head_dim n_embd/n_head, n_ff 4 n_embd,
 * n_vocab 512, n_ctx 4096, n_rot head_dim, rope_freq_base 1e4, rms_eps 1e-6, tied_embeddings false,
 * emb_std 1.0. */
static void gm_arch_llama(gm_builder *b) {
    int64_t n_embd = gm_int(b, "n_embd", 256), n_layer = gm_int(b, "n_layer", 2);
    int64_t n_head = gm_int(b, "n_head", 4), n_head_kv = gm_int(b, "n_head_kv", 2);
    int64_t head_dim = gm_int(b, "head_dim", n_embd / (n_head ? n_head : 1));
    int64_t n_ff = gm_int(b, "n_ff", 4 * n_embd), n_vocab = gm_int(b, "n_vocab", 512);
    bool tied = gm_bool(b, "tied_embeddings", false);
    b->tied = tied;
    if (n_embd <= 0 || n_layer <= 0 || n_head <= 0 || n_head_kv <= 0 || head_dim <= 0 || n_ff <= 0 ||
        n_head % n_head_kv != 0) {
        b->st = nx_fail(b->err, NX_ERR_INVALID_ARG,
                        "gen-model llama: bad config (n_embd %lld, n_layer %lld, n_head %lld, n_head_kv %lld, "
                        "head_dim %lld, n_ff %lld)", (long long)n_embd, (long long)n_layer, (long long)n_head,
                        (long long)n_head_kv, (long long)head_dim, (long long)n_ff);
        return;
    }
    gm_check(b, nx_gguf_set_str(b->w, "general.architecture", "llama"), "general.architecture");
    gm_check(b, nx_gguf_set_str(b->w, "general.name", "nextn-gen-llama"), "general.name");
    gm_key_u32(b, "context_length", (uint32_t)gm_int(b, "n_ctx", 4096));
    gm_key_u32(b, "embedding_length", (uint32_t)n_embd);
    gm_key_u32(b, "block_count", (uint32_t)n_layer);
    gm_key_u32(b, "feed_forward_length", (uint32_t)n_ff);
    gm_key_u32(b, "attention.head_count", (uint32_t)n_head);
    gm_key_u32(b, "attention.head_count_kv", (uint32_t)n_head_kv);
    gm_key_u32(b, "attention.key_length", (uint32_t)head_dim);
    gm_key_u32(b, "attention.value_length", (uint32_t)head_dim);
    gm_key_u32(b, "rope.dimension_count", (uint32_t)gm_int(b, "n_rot", head_dim));
    gm_key_f32(b, "rope.freq_base", (float)gm_float(b, "rope_freq_base", 10000.0));
    gm_key_f32(b, "attention.layer_norm_rms_epsilon", (float)gm_float(b, "rms_eps", 1e-6));
    gm_key_u32(b, "vocab_size", (uint32_t)n_vocab);
    gm_tokenizer_bytes(b, n_vocab);

    float s_in = 1.0f / sqrtf((float)n_embd);
    /* emb_std: a tied model with std 1 mostly repeats its input (logits = h . e), smaller is flatter */
    gm_tensor(b, "token_embd.weight", GM_NORMAL, (float)gm_float(b, "emb_std", 1.0), 2, n_embd, n_vocab, 1, 1);
    char name[128];
    for (int64_t l = 0; l < n_layer; l++) {
#define GM_T(suffix, init, scale, nd, a, c) \
        snprintf(name, sizeof name, "blk.%lld." suffix, (long long)l); gm_tensor(b, name, init, scale, nd, a, c, 1, 1)
        GM_T("attn_norm.weight", GM_NORM_WEIGHT, 0.1f, 1, n_embd, 1);
        GM_T("attn_q.weight", GM_NORMAL, s_in, 2, n_embd, n_head * head_dim);
        GM_T("attn_k.weight", GM_NORMAL, s_in, 2, n_embd, n_head_kv * head_dim);
        GM_T("attn_v.weight", GM_NORMAL, s_in, 2, n_embd, n_head_kv * head_dim);
        GM_T("attn_output.weight", GM_NORMAL, 1.0f / sqrtf((float)(n_head * head_dim)), 2, n_head * head_dim, n_embd);
        GM_T("ffn_norm.weight", GM_NORM_WEIGHT, 0.1f, 1, n_embd, 1);
        GM_T("ffn_gate.weight", GM_NORMAL, s_in, 2, n_embd, n_ff);
        GM_T("ffn_up.weight", GM_NORMAL, s_in, 2, n_embd, n_ff);
        GM_T("ffn_down.weight", GM_NORMAL, 1.0f / sqrtf((float)n_ff), 2, n_ff, n_embd);
#undef GM_T
    }
    gm_tensor(b, "output_norm.weight", GM_NORM_WEIGHT, 0.1f, 1, n_embd, 1, 1, 1);
    if (!tied) gm_tensor(b, "output.weight", GM_NORMAL, s_in, 2, n_embd, n_vocab, 1, 1);
}

/* Qwen3.5 (`qwen35`) / Qwen3.5-MoE (`qwen35moe`) in the layout of llama.cpp's converter
 * (spec qwen35.md §1-2): Gated DeltaNet + gated attention trunk (layer il is attention iff
 * (il+1) % full_attention_interval == 0), then n_nextn MTP layers (eh_proj, enorm, hnorm,
 * shared_head_norm, one gated attention block and an FFN). Config keys (defaults = a tiny
 * model): n_embd 64, n_layer 4 (trunk), n_nextn 1, n_head 4, n_head_kv 2, head_dim 16, n_rot 8,
 * rope_sections [2,1,1,0], rope_freq_base 1e4, full_attention_interval 2, ssm_nk 2, ssm_nv 4,
 * ssm_head_dim 32, d_conv 4, n_ff 128, n_vocab 512, tied_embeddings true, rms_eps 1e-6,
 * emb_std 0.35; MoE: n_expert 8, n_expert_used 2, n_ff_exp 32, n_ff_shexp 64, merged_gate_up
 * false; MTP: mtp_eh_proj true, mtp_ffn true (dense only), mtp_attn_q true (dense only),
 * mtp_shared_head_norm true, mtp_embed_tokens false, mtp_shared_head false (the last two: the head's
 * own blk.L.nextn.embed_tokens / shared_head_head, drawn after every other tensor so that the rest
 * of the model is the same with or without them). */
static void gm_arch_qwen35_common(gm_builder *b, bool moe) {
    int64_t E = gm_int(b, "n_embd", 64), n_layer = gm_int(b, "n_layer", 4), n_nextn = gm_int(b, "n_nextn", 1);
    int64_t H = gm_int(b, "n_head", 4), Hkv = gm_int(b, "n_head_kv", 2), D = gm_int(b, "head_dim", 16);
    int64_t n_rot = gm_int(b, "n_rot", D / 2 > 0 ? D / 2 : 2), interval = gm_int(b, "full_attention_interval", 2);
    int64_t nk = gm_int(b, "ssm_nk", 2), nv = gm_int(b, "ssm_nv", 4), dk = gm_int(b, "ssm_head_dim", 32);
    int64_t d_conv = gm_int(b, "d_conv", 4), n_ff = gm_int(b, "n_ff", 128), V = gm_int(b, "n_vocab", 512);
    int64_t X = gm_int(b, "n_expert", 8), XU = gm_int(b, "n_expert_used", 2), F = gm_int(b, "n_ff_exp", 32);
    int64_t Fs = gm_int(b, "n_ff_shexp", 64);
    bool tied = gm_bool(b, "tied_embeddings", true), merged = gm_bool(b, "merged_gate_up", false);
    b->tied = tied;
    bool eh = gm_bool(b, "mtp_eh_proj", true), mtp_ffn = gm_bool(b, "mtp_ffn", true), mtp_q = gm_bool(b, "mtp_attn_q", true);
    bool mtp_shn = gm_bool(b, "mtp_shared_head_norm", true), mtp_emb = gm_bool(b, "mtp_embed_tokens", false),
         mtp_head = gm_bool(b, "mtp_shared_head", false);
    int32_t sections[4] = {2, 1, 1, 0};
    const cJSON *sec = cJSON_GetObjectItemCaseSensitive(b->cfg, "rope_sections");
    for (int i = 0; i < 4 && cJSON_IsArray(sec); i++) {
        const cJSON *e = cJSON_GetArrayItem(sec, i);
        sections[i] = cJSON_IsNumber(e) ? (int32_t)e->valuedouble : 0;
    }
    if (E <= 0 || n_layer <= 0 || n_nextn < 0 || H <= 0 || Hkv <= 0 || H % Hkv || D <= 0 || n_rot < 0 || n_rot > D ||
        n_rot % 2 || interval <= 0 || nk <= 0 || nv <= 0 || nv % nk || dk <= 0 || d_conv <= 0 || n_ff <= 0 ||
        (moe && (X <= 0 || XU <= 0 || XU > X || F <= 0 || Fs <= 0))) {
        b->st = nx_fail(b->err, NX_ERR_INVALID_ARG, "gen-model %s: bad config", b->arch);
        return;
    }
    const int64_t key_dim = nk * dk, VD = nv * dk, C = 2 * key_dim + VD;
    gm_check(b, nx_gguf_set_str(b->w, "general.architecture", b->arch), "general.architecture");
    gm_check(b, nx_gguf_set_str(b->w, "general.name", moe ? "nextn-gen-qwen35moe" : "nextn-gen-qwen35"), "general.name");
    gm_key_u32(b, "block_count", (uint32_t)(n_layer + n_nextn));
    gm_key_u32(b, "context_length", (uint32_t)gm_int(b, "n_ctx", 4096));
    gm_key_u32(b, "embedding_length", (uint32_t)E);
    gm_key_u32(b, "feed_forward_length", (uint32_t)(moe ? Fs : n_ff));
    gm_key_u32(b, "attention.head_count", (uint32_t)H);
    gm_key_u32(b, "attention.head_count_kv", (uint32_t)Hkv);
    gm_key_u32(b, "attention.key_length", (uint32_t)D);
    gm_key_u32(b, "attention.value_length", (uint32_t)D);
    gm_key_f32(b, "attention.layer_norm_rms_epsilon", (float)gm_float(b, "rms_eps", 1e-6));
    gm_key_u32(b, "rope.dimension_count", (uint32_t)n_rot);
    gm_key_arr(b, "rope.dimension_sections", NX_GGUF_I32, sections, 4);
    gm_key_f32(b, "rope.freq_base", (float)gm_float(b, "rope_freq_base", 10000.0));
    gm_key_u32(b, "nextn_predict_layers", (uint32_t)n_nextn);
    gm_key_u32(b, "full_attention_interval", (uint32_t)interval);
    gm_key_u32(b, "ssm.conv_kernel", (uint32_t)d_conv);
    gm_key_u32(b, "ssm.state_size", (uint32_t)dk);
    gm_key_u32(b, "ssm.group_count", (uint32_t)nk);
    gm_key_u32(b, "ssm.time_step_rank", (uint32_t)nv);
    gm_key_u32(b, "ssm.inner_size", (uint32_t)VD);
    gm_key_u32(b, "vocab_size", (uint32_t)V);
    if (moe) {
        gm_key_u32(b, "expert_count", (uint32_t)X);
        gm_key_u32(b, "expert_used_count", (uint32_t)XU);
        gm_key_u32(b, "expert_feed_forward_length", (uint32_t)F);
        gm_key_u32(b, "expert_shared_feed_forward_length", (uint32_t)Fs);
    }
    gm_key_str(b, "rope.scaling.type", "none");
    gm_tokenizer_bytes(b, V);

    const float s_in = 1.0f / sqrtf((float)E);
    gm_tensor(b, "token_embd.weight", GM_NORMAL, (float)gm_float(b, "emb_std", 0.35), 2, E, V, 1, 1);
    char name[160];
#define GM_T(init, scale, nd, a, c, d, ...) \
    do { snprintf(name, sizeof name, __VA_ARGS__); gm_tensor(b, name, init, scale, nd, a, c, d, 1); } while (0)
    for (int64_t l = 0; l < n_layer + n_nextn; l++) {
        const bool mtp = l >= n_layer, attn = mtp || (l + 1) % interval == 0;
        const long long il = (long long)l;
        GM_T(GM_NORM_WEIGHT, 0.1f, 1, E, 1, 1, "blk.%lld.attn_norm.weight", il);
        GM_T(GM_NORM_WEIGHT, 0.1f, 1, E, 1, 1, "blk.%lld.post_attention_norm.weight", il);
        if (attn) {
            if (!mtp || moe || mtp_q) GM_T(GM_NORMAL, s_in, 2, E, 2 * H * D, 1, "blk.%lld.attn_q.weight", il);
            GM_T(GM_NORMAL, s_in, 2, E, Hkv * D, 1, "blk.%lld.attn_k.weight", il);
            GM_T(GM_NORMAL, s_in, 2, E, Hkv * D, 1, "blk.%lld.attn_v.weight", il);
            GM_T(GM_NORMAL, 1.0f / sqrtf((float)(H * D)), 2, H * D, E, 1, "blk.%lld.attn_output.weight", il);
            GM_T(GM_NORM_WEIGHT, 0.1f, 1, D, 1, 1, "blk.%lld.attn_q_norm.weight", il);
            GM_T(GM_NORM_WEIGHT, 0.1f, 1, D, 1, 1, "blk.%lld.attn_k_norm.weight", il);
        } else {
            GM_T(GM_NORMAL, s_in, 2, E, C, 1, "blk.%lld.attn_qkv.weight", il);
            GM_T(GM_NORMAL, s_in, 2, E, VD, 1, "blk.%lld.attn_gate.weight", il);
            GM_T(GM_NORMAL, s_in, 2, E, nv, 1, "blk.%lld.ssm_beta.weight", il);
            GM_T(GM_NORMAL, s_in, 2, E, nv, 1, "blk.%lld.ssm_alpha.weight", il);
            /* the converter's quantizers skip ssm_conv1d: always F32 */
            snprintf(name, sizeof name, "blk.%lld.ssm_conv1d.weight", il);
            gm_tensor_t(b, name, GM_NORMAL, 0.5f, 2, d_conv, C, 1, 1, true);
            GM_T(GM_NORMAL, 0.5f, 1, nv, 1, 1, "blk.%lld.ssm_dt.bias", il);
            GM_T(GM_NEG_EXP, 2.0f, 1, nv, 1, 1, "blk.%lld.ssm_a", il);
            GM_T(GM_NORM_WEIGHT, 0.1f, 1, dk, 1, 1, "blk.%lld.ssm_norm.weight", il);
            GM_T(GM_NORMAL, 1.0f / sqrtf((float)VD), 2, VD, E, 1, "blk.%lld.ssm_out.weight", il);
        }
        if (moe) {
            GM_T(GM_NORMAL, s_in, 2, E, X, 1, "blk.%lld.ffn_gate_inp.weight", il);
            if (merged) {
                GM_T(GM_NORMAL, s_in, 3, E, 2 * F, X, "blk.%lld.ffn_gate_up_exps.weight", il);
            } else {
                GM_T(GM_NORMAL, s_in, 3, E, F, X, "blk.%lld.ffn_gate_exps.weight", il);
                GM_T(GM_NORMAL, s_in, 3, E, F, X, "blk.%lld.ffn_up_exps.weight", il);
            }
            GM_T(GM_NORMAL, 1.0f / sqrtf((float)F), 3, F, E, X, "blk.%lld.ffn_down_exps.weight", il);
            GM_T(GM_NORMAL, s_in, 1, E, 1, 1, "blk.%lld.ffn_gate_inp_shexp.weight", il);
            GM_T(GM_NORMAL, s_in, 2, E, Fs, 1, "blk.%lld.ffn_gate_shexp.weight", il);
            GM_T(GM_NORMAL, s_in, 2, E, Fs, 1, "blk.%lld.ffn_up_shexp.weight", il);
            GM_T(GM_NORMAL, 1.0f / sqrtf((float)Fs), 2, Fs, E, 1, "blk.%lld.ffn_down_shexp.weight", il);
        } else if (!mtp || mtp_ffn) {
            GM_T(GM_NORMAL, s_in, 2, E, n_ff, 1, "blk.%lld.ffn_gate.weight", il);
            GM_T(GM_NORMAL, s_in, 2, E, n_ff, 1, "blk.%lld.ffn_up.weight", il);
            GM_T(GM_NORMAL, 1.0f / sqrtf((float)n_ff), 2, n_ff, E, 1, "blk.%lld.ffn_down.weight", il);
        }
        if (mtp) {
            if (eh) GM_T(GM_NORMAL, 1.0f / sqrtf((float)(2 * E)), 2, 2 * E, E, 1, "blk.%lld.nextn.eh_proj.weight", il);
            GM_T(GM_NORM_WEIGHT, 0.1f, 1, E, 1, 1, "blk.%lld.nextn.enorm.weight", il);
            GM_T(GM_NORM_WEIGHT, 0.1f, 1, E, 1, 1, "blk.%lld.nextn.hnorm.weight", il);
            if (mtp_shn) GM_T(GM_NORM_WEIGHT, 0.1f, 1, E, 1, 1, "blk.%lld.nextn.shared_head_norm.weight", il);
        }
    }
    gm_tensor(b, "output_norm.weight", GM_NORM_WEIGHT, 0.1f, 1, E, 1, 1, 1);
    if (!tied) gm_tensor(b, "output.weight", GM_NORMAL, s_in, 2, E, V, 1, 1);
    for (int64_t l = n_layer; l < n_layer + n_nextn; l++) {
        if (mtp_emb)
            GM_T(GM_NORMAL, (float)gm_float(b, "emb_std", 0.35), 2, E, V, 1, "blk.%lld.nextn.embed_tokens.weight", (long long)l);
        if (mtp_head) GM_T(GM_NORMAL, s_in, 2, E, V, 1, "blk.%lld.nextn.shared_head_head.weight", (long long)l);
    }
#undef GM_T
}

static void gm_arch_qwen35(gm_builder *b) { gm_arch_qwen35_common(b, false); }
static void gm_arch_qwen35moe(gm_builder *b) { gm_arch_qwen35_common(b, true); }

/* The attention and RoPE keys a gemma4 target and its assistant both carry (in this order).
 * n_shared < 0: no shared_kv_layers key (the assistant has none). */
static void gm_gemma4_attn_keys(gm_builder *b, int64_t n_layer, const int32_t *hkv, const uint8_t *pat, int64_t Df,
                                int64_t Ds, int64_t n_swa, int64_t n_shared) {
    gm_key_arr(b, "attention.head_count_kv", NX_GGUF_I32, hkv, (uint64_t)n_layer);
    gm_key_u32(b, "attention.key_length", (uint32_t)Df);
    gm_key_u32(b, "attention.value_length", (uint32_t)Df);
    gm_key_u32(b, "attention.key_length_swa", (uint32_t)Ds);
    gm_key_u32(b, "attention.value_length_swa", (uint32_t)Ds);
    gm_key_f32(b, "attention.layer_norm_rms_epsilon", (float)gm_float(b, "rms_eps", 1e-6));
    gm_key_u32(b, "attention.sliding_window", (uint32_t)n_swa);
    gm_key_arr(b, "attention.sliding_window_pattern", NX_GGUF_BOOL, pat, (uint64_t)n_layer);
    if (n_shared >= 0) gm_key_u32(b, "attention.shared_kv_layers", (uint32_t)n_shared);
    gm_key_u32(b, "rope.dimension_count", (uint32_t)Df);
    gm_key_u32(b, "rope.dimension_count_swa", (uint32_t)Ds);
    gm_key_f32(b, "rope.freq_base", (float)gm_float(b, "rope_freq_base", 1e6));
    gm_key_f32(b, "rope.freq_base_swa", (float)gm_float(b, "rope_freq_base_swa", 1e4));
}

/* Gemma 4 (`gemma4`) target in the layout of the converters (spec gemma4.md §1.1, §2.1): iSWA
 * layers with their own head dims / kv heads / RoPE, proportional partial RoPE on full layers
 * (`rope_freqs`), q/k norms, k_eq_v on full layers (no attn_v), KV sharing for the last
 * shared_kv_layers layers (no attn_k / attn_v / attn_k_norm there), per-layer embeddings, post
 * norms, layer output scale, final soft-cap, and optionally MoE on every layer (router + scale,
 * experts + per-expert scale, the dense branch and its extra norms).
 * Config keys (defaults = the golden gemma4-tiny geometry): n_embd 64, n_layer 6, n_head 4,
 * n_head_kv_swa 2, n_head_kv_full 1, head_dim_swa 64, head_dim_full 128, full_interval 2 (layer
 * il is full iff (il+1) % full_interval == 0; 0 = all SWA), sliding_window 8, shared_kv_layers 2,
 * n_embd_per_layer 16 (0 = no PLE), partial_rotary_full 0.25, rope_freq_base 1e6,
 * rope_freq_base_swa 1e4, n_ff 128, double_wide false (shared layers get 2 n_ff), n_vocab 512,
 * tied_embeddings true, k_eq_v_full true, layer_output_scale true, final_logit_softcapping 30
 * (write_softcap false: key absent), rms_eps 1e-6, emb_std 0.35; MoE: n_expert 0 (dense),
 * n_expert_used 2, n_ff_exp 32, merged_gate_up true, expert_scale true. */
static void gm_arch_gemma4(gm_builder *b) {
    int64_t E = gm_int(b, "n_embd", 64), n_layer = gm_int(b, "n_layer", 6), H = gm_int(b, "n_head", 4);
    int64_t Hs = gm_int(b, "n_head_kv_swa", 2), Hf = gm_int(b, "n_head_kv_full", 1);
    int64_t Ds = gm_int(b, "head_dim_swa", 64), Df = gm_int(b, "head_dim_full", 128);
    int64_t interval = gm_int(b, "full_interval", 2), n_swa = gm_int(b, "sliding_window", 8);
    int64_t n_shared = gm_int(b, "shared_kv_layers", 2), P = gm_int(b, "n_embd_per_layer", 16);
    int64_t n_ff = gm_int(b, "n_ff", 128), V = gm_int(b, "n_vocab", 512);
    int64_t X = gm_int(b, "n_expert", 0), XU = gm_int(b, "n_expert_used", 2), F = gm_int(b, "n_ff_exp", 32);
    double partial = gm_float(b, "partial_rotary_full", 0.25);
    bool tied = gm_bool(b, "tied_embeddings", true), keqv = gm_bool(b, "k_eq_v_full", true);
    b->tied = tied;
    bool los = gm_bool(b, "layer_output_scale", true), wide = gm_bool(b, "double_wide", false);
    bool merged = gm_bool(b, "merged_gate_up", true), escale = gm_bool(b, "expert_scale", true);
    const int64_t n_rot_full = 2 * (int64_t)(Df * partial / 2.0);   /* rotated dims of full layers */
    if (E <= 0 || n_layer <= 0 || n_layer > 1024 || H <= 0 || Hs <= 0 || Hf <= 0 || H % Hs || H % Hf || Ds <= 0 ||
        Df <= 0 || Ds % 2 || Df % 2 || interval < 0 || n_swa <= 0 || n_shared < 0 || n_shared >= n_layer || P < 0 ||
        n_ff <= 0 || !(partial > 0.0 && partial <= 1.0) || n_rot_full < 2 ||
        (X > 0 && (XU <= 0 || XU > X || F <= 0))) {
        b->st = nx_fail(b->err, NX_ERR_INVALID_ARG, "gen-model gemma4: bad config");
        return;
    }
    const int64_t n_kv = n_layer - n_shared;
    bool *swa = gm_keep(b, (size_t)n_layer * sizeof *swa);
    uint8_t *pat = gm_keep(b, (size_t)n_layer);
    int32_t *hkv = gm_keep(b, (size_t)n_layer * sizeof *hkv), *ffl = gm_keep(b, (size_t)n_layer * sizeof *ffl);
    if (!swa || !pat || !hkv || !ffl) return;
    bool any_swa_kv = false, any_full_kv = false;
    for (int64_t l = 0; l < n_layer; l++) {
        swa[l] = interval == 0 || (l + 1) % interval != 0;
        pat[l] = swa[l];
        hkv[l] = (int32_t)(swa[l] ? Hs : Hf);
        ffl[l] = (int32_t)(wide && l >= n_kv ? 2 * n_ff : n_ff);
        if (l < n_kv) { any_swa_kv |= swa[l]; any_full_kv |= !swa[l]; }
    }
    for (int64_t l = n_kv; l < n_layer; l++)
        if ((swa[l] && !any_swa_kv) || (!swa[l] && !any_full_kv)) {
            b->st = nx_fail(b->err, NX_ERR_INVALID_ARG, "gen-model gemma4: KV-shared layer %lld has no KV-owning layer "
                            "of its type", (long long)l);
            return;
        }
    gm_check(b, nx_gguf_set_str(b->w, "general.architecture", "gemma4"), "general.architecture");
    gm_check(b, nx_gguf_set_str(b->w, "general.name", "nextn-gen-gemma4"), "general.name");
    gm_key_u32(b, "context_length", (uint32_t)gm_int(b, "n_ctx", 4096));
    gm_key_u32(b, "embedding_length", (uint32_t)E);
    gm_key_u32(b, "block_count", (uint32_t)n_layer);
    if (wide) gm_key_arr(b, "feed_forward_length", NX_GGUF_I32, ffl, (uint64_t)n_layer);
    else gm_key_u32(b, "feed_forward_length", (uint32_t)n_ff);
    gm_key_u32(b, "attention.head_count", (uint32_t)H);
    gm_gemma4_attn_keys(b, n_layer, hkv, pat, Df, Ds, n_swa, n_shared);
    gm_key_u32(b, "embedding_length_per_layer_input", (uint32_t)P);
    if (gm_bool(b, "write_softcap", true))
        gm_key_f32(b, "final_logit_softcapping", (float)gm_float(b, "final_logit_softcapping", 30.0));
    if (X > 0) {
        gm_key_u32(b, "expert_count", (uint32_t)X);
        gm_key_u32(b, "expert_used_count", (uint32_t)XU);
        gm_key_u32(b, "expert_feed_forward_length", (uint32_t)F);
    }
    gm_tokenizer_bytes(b, V);

    const float s_in = 1.0f / sqrtf((float)E);
    gm_tensor(b, "token_embd.weight", GM_NORMAL, (float)gm_float(b, "emb_std", 0.35), 2, E, V, 1, 1);
    /* proportional partial RoPE: factor 1 for the rotated pairs, 1e30 (no rotation) for the rest */
    if (b->st == NX_OK) {
        float *ff = gm_keep(b, (size_t)(Df / 2) * sizeof *ff);
        if (!ff) return;
        for (int64_t i = 0; i < Df / 2; i++) ff[i] = i < n_rot_full / 2 ? 1.0f : 1e30f;
        int64_t ne[1] = {Df / 2};
        gm_check(b, nx_gguf_add_tensor(b->w, "rope_freqs.weight", NX_TYPE_F32, 1, ne, ff), "rope_freqs.weight");
    }
    if (P > 0) {
        gm_tensor(b, "per_layer_token_embd.weight", GM_NORMAL, 0.35f, 2, P * n_layer, V, 1, 1);
        gm_tensor(b, "per_layer_model_proj.weight", GM_NORMAL, s_in, 2, E, P * n_layer, 1, 1);
        gm_tensor(b, "per_layer_proj_norm.weight", GM_NORM_WEIGHT, 0.1f, 1, P, 1, 1, 1);
    }
    char name[160];
#define GM_T(init, scale, nd, a, c, d, ...) \
    do { snprintf(name, sizeof name, __VA_ARGS__); gm_tensor(b, name, init, scale, nd, a, c, d, 1); } while (0)
    for (int64_t l = 0; l < n_layer; l++) {
        const long long il = (long long)l;
        const int64_t D = swa[l] ? Ds : Df, Hk = hkv[l], FF = ffl[l];
        GM_T(GM_NORM_WEIGHT, 0.1f, 1, E, 1, 1, "blk.%lld.attn_norm.weight", il);
        GM_T(GM_NORMAL, s_in, 2, E, H * D, 1, "blk.%lld.attn_q.weight", il);
        GM_T(GM_NORM_WEIGHT, 0.1f, 1, D, 1, 1, "blk.%lld.attn_q_norm.weight", il);
        if (l < n_kv) {
            GM_T(GM_NORMAL, s_in, 2, E, Hk * D, 1, "blk.%lld.attn_k.weight", il);
            GM_T(GM_NORM_WEIGHT, 0.1f, 1, D, 1, 1, "blk.%lld.attn_k_norm.weight", il);
            if (swa[l] || !keqv) GM_T(GM_NORMAL, s_in, 2, E, Hk * D, 1, "blk.%lld.attn_v.weight", il);
        }
        GM_T(GM_NORMAL, 1.0f / sqrtf((float)(H * D)), 2, H * D, E, 1, "blk.%lld.attn_output.weight", il);
        GM_T(GM_NORM_WEIGHT, 0.1f, 1, E, 1, 1, "blk.%lld.post_attention_norm.weight", il);
        GM_T(GM_NORM_WEIGHT, 0.1f, 1, E, 1, 1, "blk.%lld.ffn_norm.weight", il);
        GM_T(GM_NORMAL, s_in, 2, E, FF, 1, "blk.%lld.ffn_gate.weight", il);
        GM_T(GM_NORMAL, s_in, 2, E, FF, 1, "blk.%lld.ffn_up.weight", il);
        GM_T(GM_NORMAL, 1.0f / sqrtf((float)FF), 2, FF, E, 1, "blk.%lld.ffn_down.weight", il);
        GM_T(GM_NORM_WEIGHT, 0.1f, 1, E, 1, 1, "blk.%lld.post_ffw_norm.weight", il);
        if (X > 0) {
            GM_T(GM_NORMAL, 1.0f, 2, E, X, 1, "blk.%lld.ffn_gate_inp.weight", il);
            GM_T(GM_NORM_WEIGHT, 0.2f, 1, E, 1, 1, "blk.%lld.ffn_gate_inp.scale", il);
            if (merged) {
                GM_T(GM_NORMAL, s_in, 3, E, 2 * F, X, "blk.%lld.ffn_gate_up_exps.weight", il);
            } else {
                GM_T(GM_NORMAL, s_in, 3, E, F, X, "blk.%lld.ffn_gate_exps.weight", il);
                GM_T(GM_NORMAL, s_in, 3, E, F, X, "blk.%lld.ffn_up_exps.weight", il);
            }
            GM_T(GM_NORMAL, 1.0f / sqrtf((float)F), 3, F, E, X, "blk.%lld.ffn_down_exps.weight", il);
            if (escale) GM_T(GM_NORM_WEIGHT, 0.3f, 1, X, 1, 1, "blk.%lld.ffn_down_exps.scale", il);
            GM_T(GM_NORM_WEIGHT, 0.1f, 1, E, 1, 1, "blk.%lld.pre_ffw_norm_2.weight", il);
            GM_T(GM_NORM_WEIGHT, 0.1f, 1, E, 1, 1, "blk.%lld.post_ffw_norm_1.weight", il);
            GM_T(GM_NORM_WEIGHT, 0.1f, 1, E, 1, 1, "blk.%lld.post_ffw_norm_2.weight", il);
        }
        if (P > 0) {
            GM_T(GM_NORMAL, s_in, 2, E, P, 1, "blk.%lld.inp_gate.weight", il);
            GM_T(GM_NORMAL, 1.0f / sqrtf((float)P), 2, P, E, 1, "blk.%lld.proj.weight", il);
            GM_T(GM_NORM_WEIGHT, 0.1f, 1, E, 1, 1, "blk.%lld.post_norm.weight", il);
        }
        if (los) GM_T(GM_NORM_WEIGHT, 0.2f, 1, 1, 1, 1, "blk.%lld.layer_output_scale.weight", il);
    }
#undef GM_T
    gm_tensor(b, "output_norm.weight", GM_NORM_WEIGHT, 0.1f, 1, E, 1, 1, 1);
    if (!tied) gm_tensor(b, "output.weight", GM_NORMAL, s_in, 2, E, V, 1, 1);
}

/* Gemma 4 assistant drafter (`gemma4-assistant`, spec gemma4.md §1.2, §2.2, S000/S002 names) for
 * the gemma4 target the SAME config describes: the target keys (n_embd, n_vocab, head_dim_swa,
 * head_dim_full, n_head_kv_swa / _full, full_interval, n_layer, shared_kv_layers, sliding_window,
 * rope_freq_base(_swa), partial_rotary_full, rms_eps) with the gemma4 defaults give the backbone
 * width (embedding_length_out), vocabulary, head dims and layer types; the assistant's own keys:
 * asst_n_embd 32, asst_n_layer 2, asst_n_head 4, asst_n_ff 64, asst_full_interval (default
 * full_interval: layer il is full iff (il+1) % it == 0), asst_sliding_window (default the
 * target's), asst_layer_output_scale true, asst_tied true (false: output.weight),
 * asst_final_logit_softcapping (0 = key absent), asst_emb_std 0.35; centroid head: n_centroids 0
 * (dense) or a divisor of n_vocab, centroid_top_k 4, use_ordered_embeddings true (written with
 * the head). masked_embd_ordering is a random vocabulary permutation (I32). */
static void gm_arch_gemma4_assistant(gm_builder *b) {
    int64_t E = gm_int(b, "n_embd", 64), n_layer = gm_int(b, "n_layer", 6), V = gm_int(b, "n_vocab", 512);
    int64_t Hs = gm_int(b, "n_head_kv_swa", 2), Hf = gm_int(b, "n_head_kv_full", 1);
    int64_t Ds = gm_int(b, "head_dim_swa", 64), Df = gm_int(b, "head_dim_full", 128);
    int64_t interval = gm_int(b, "full_interval", 2), n_swa = gm_int(b, "sliding_window", 8);
    int64_t n_shared = gm_int(b, "shared_kv_layers", 2);
    double partial = gm_float(b, "partial_rotary_full", 0.25);
    int64_t A = gm_int(b, "asst_n_embd", 32), AL = gm_int(b, "asst_n_layer", 2), AH = gm_int(b, "asst_n_head", 4);
    int64_t AF = gm_int(b, "asst_n_ff", 64), Aint = gm_int(b, "asst_full_interval", interval);
    int64_t Aswa = gm_int(b, "asst_sliding_window", n_swa);
    int64_t NC = gm_int(b, "n_centroids", 0), TK = gm_int(b, "centroid_top_k", 4);
    bool los = gm_bool(b, "asst_layer_output_scale", true), tied = gm_bool(b, "asst_tied", true);
    double cap = gm_float(b, "asst_final_logit_softcapping", 0.0);
    const int64_t n_rot_full = 2 * (int64_t)(Df * partial / 2.0);
    if (E <= 0 || n_layer <= 0 || n_layer > 1024 || V <= 0 || Hs <= 0 || Hf <= 0 || Ds <= 0 || Df <= 0 || Ds % 2 ||
        Df % 2 || interval < 0 || n_swa <= 0 || n_shared < 0 || n_shared >= n_layer || !(partial > 0.0 && partial <= 1.0) ||
        n_rot_full < 2 || A <= 0 || AL <= 0 || AL > 1024 || AH <= 0 || AF <= 0 || Aint < 0 || Aswa <= 0 ||
        Aswa > n_swa || NC < 0 || (NC > 0 && (V % NC || TK <= 0 || TK > NC)) || cap < 0) {
        b->st = nx_fail(b->err, NX_ERR_INVALID_ARG,
                        "gen-model gemma4-assistant: bad config (asst_n_embd %lld, asst_n_layer %lld, asst_n_head %lld, "
                        "asst_n_ff %lld, asst_sliding_window %lld vs target %lld, n_centroids %lld, centroid_top_k %lld, "
                        "n_vocab %lld)", (long long)A, (long long)AL, (long long)AH, (long long)AF, (long long)Aswa,
                        (long long)n_swa, (long long)NC, (long long)TK, (long long)V);
        return;
    }
    /* which layer types the target has KV-owning layers of (the assistant reads their cache) */
    bool tgt_swa_kv = false, tgt_full_kv = false;
    for (int64_t l = 0; l < n_layer - n_shared; l++) {
        bool s = interval == 0 || (l + 1) % interval != 0;
        tgt_swa_kv |= s;
        tgt_full_kv |= !s;
    }
    uint8_t *pat = gm_keep(b, (size_t)AL);
    int32_t *hkv = gm_keep(b, (size_t)AL * sizeof *hkv);
    if (!pat || !hkv) return;
    for (int64_t l = 0; l < AL; l++) {
        bool s = Aint == 0 || (l + 1) % Aint != 0;
        if ((s && !tgt_swa_kv) || (!s && !tgt_full_kv)) {
            b->st = nx_fail(b->err, NX_ERR_INVALID_ARG, "gen-model gemma4-assistant: layer %lld (%s) has no KV-owning "
                            "target layer of its type", (long long)l, s ? "SWA" : "full");
            return;
        }
        pat[l] = s;
        hkv[l] = (int32_t)(s ? Hs : Hf);
        if (AH % hkv[l]) {
            b->st = nx_fail(b->err, NX_ERR_INVALID_ARG, "gen-model gemma4-assistant: asst_n_head %lld is not a multiple "
                            "of the target's %d kv heads", (long long)AH, hkv[l]);
            return;
        }
    }
    gm_check(b, nx_gguf_set_str(b->w, "general.architecture", "gemma4-assistant"), "general.architecture");
    gm_check(b, nx_gguf_set_str(b->w, "general.name", "nextn-gen-gemma4-assistant"), "general.name");
    gm_key_u32(b, "context_length", (uint32_t)gm_int(b, "n_ctx", 4096));
    gm_key_u32(b, "embedding_length", (uint32_t)A);
    gm_key_u32(b, "block_count", (uint32_t)AL);
    gm_key_u32(b, "feed_forward_length", (uint32_t)AF);
    gm_key_u32(b, "attention.head_count", (uint32_t)AH);
    gm_gemma4_attn_keys(b, AL, hkv, pat, Df, Ds, Aswa, -1);
    gm_key_u32(b, "embedding_length_out", (uint32_t)E);
    gm_key_u32(b, "nextn_predict_layers", (uint32_t)AL);
    gm_check(b, nx_gguf_set_str(b->w, "gemma4-assistant.requires_target_arch", "gemma4"), "requires_target_arch");
    if (cap > 0) gm_key_f32(b, "final_logit_softcapping", (float)cap);
    if (NC > 0) {
        gm_key_u32(b, "n_centroids", (uint32_t)NC);
        gm_key_u32(b, "centroid_top_k", (uint32_t)TK);
        gm_key_bool(b, "use_ordered_embeddings", gm_bool(b, "use_ordered_embeddings", true));
    }
    gm_tokenizer_bytes(b, V);

    const float s_a = 1.0f / sqrtf((float)A);
    gm_tensor(b, "token_embd.weight", GM_NORMAL, (float)gm_float(b, "asst_emb_std", 0.35), 2, A, V, 1, 1);
    gm_tensor(b, "output_norm.weight", GM_NORM_WEIGHT, 0.1f, 1, A, 1, 1, 1);
    if (!tied) gm_tensor(b, "output.weight", GM_NORMAL, s_a, 2, A, V, 1, 1);
    if (b->st == NX_OK) {   /* the target's proportional partial RoPE factors (read from the target anyway) */
        float *ff = gm_keep(b, (size_t)(Df / 2) * sizeof *ff);
        if (!ff) return;
        for (int64_t i = 0; i < Df / 2; i++) ff[i] = i < n_rot_full / 2 ? 1.0f : 1e30f;
        int64_t ne[1] = {Df / 2};
        gm_check(b, nx_gguf_add_tensor(b->w, "rope_freqs.weight", NX_TYPE_F32, 1, ne, ff), "rope_freqs.weight");
    }
    gm_tensor(b, "nextn.pre_projection.weight", GM_NORMAL, 1.0f / sqrtf((float)(2 * E)), 2, 2 * E, A, 1, 1);
    gm_tensor(b, "nextn.post_projection.weight", GM_NORMAL, s_a, 2, A, E, 1, 1);
    char name[160];
#define GM_T(init, scale, nd, a, c, ...) \
    do { snprintf(name, sizeof name, __VA_ARGS__); gm_tensor(b, name, init, scale, nd, a, c, 1, 1); } while (0)
    for (int64_t l = 0; l < AL; l++) {
        const long long il = (long long)l;
        const int64_t D = pat[l] ? Ds : Df;
        GM_T(GM_NORM_WEIGHT, 0.1f, 1, A, 1, "blk.%lld.attn_norm.weight", il);
        GM_T(GM_NORMAL, s_a, 2, A, AH * D, "blk.%lld.attn_q.weight", il);
        GM_T(GM_NORM_WEIGHT, 0.1f, 1, D, 1, "blk.%lld.attn_q_norm.weight", il);
        GM_T(GM_NORMAL, 1.0f / sqrtf((float)(AH * D)), 2, AH * D, A, "blk.%lld.attn_output.weight", il);
        GM_T(GM_NORM_WEIGHT, 0.1f, 1, A, 1, "blk.%lld.post_attention_norm.weight", il);
        GM_T(GM_NORM_WEIGHT, 0.1f, 1, A, 1, "blk.%lld.ffn_norm.weight", il);
        GM_T(GM_NORMAL, s_a, 2, A, AF, "blk.%lld.ffn_gate.weight", il);
        GM_T(GM_NORMAL, s_a, 2, A, AF, "blk.%lld.ffn_up.weight", il);
        GM_T(GM_NORMAL, 1.0f / sqrtf((float)AF), 2, AF, A, "blk.%lld.ffn_down.weight", il);
        GM_T(GM_NORM_WEIGHT, 0.1f, 1, A, 1, "blk.%lld.post_ffw_norm.weight", il);
        if (los) GM_T(GM_NORM_WEIGHT, 0.2f, 1, 1, 1, "blk.%lld.layer_output_scale.weight", il);
    }
#undef GM_T
    if (NC > 0 && b->st == NX_OK) {
        gm_tensor(b, "masked_embd_centroids.weight", GM_NORMAL, 1.0f, 2, A, NC, 1, 1);
        int32_t *ord = gm_keep(b, (size_t)V * sizeof *ord);
        if (!ord) return;
        for (int64_t i = 0; i < V; i++) ord[i] = (int32_t)i;
        for (int64_t i = V - 1; i > 0; i--) {   /* Fisher-Yates: row c of [NC][V/NC] = centroid c's tokens */
            int64_t j = (int64_t)(gm_next(b) % (uint64_t)(i + 1));
            int32_t t = ord[i]; ord[i] = ord[j]; ord[j] = t;
        }
        int64_t ne[1] = {V};
        gm_check(b, nx_gguf_add_tensor(b->w, "masked_embd_ordering", NX_TYPE_I32, 1, ne, ord), "masked_embd_ordering");
    }
}

typedef struct { const char *name; void (*build)(gm_builder *); } gm_arch;
static const gm_arch g_archs[] = {
    {"llama", gm_arch_llama},
    {"qwen35", gm_arch_qwen35},
    {"qwen35moe", gm_arch_qwen35moe},
    {"gemma4", gm_arch_gemma4},
    {"gemma4-assistant", gm_arch_gemma4_assistant},
};

const char *nx_genmodel_archs(void) { return "llama, qwen35, qwen35moe, gemma4, gemma4-assistant"; }

nx_status nx_genmodel_write(const nx_genmodel_opts *opts, nx_error *err) {
    const gm_arch *arch = NULL;
    for (size_t i = 0; i < sizeof g_archs / sizeof g_archs[0]; i++)
        if (opts->arch && !strcmp(opts->arch, g_archs[i].name)) arch = &g_archs[i];
    if (!arch)
        return nx_fail(err, NX_ERR_UNSUPPORTED, "gen-model: unknown arch '%s' (known: %s)",
                       opts->arch ? opts->arch : "(none)", nx_genmodel_archs());
    const nx_type_traits *tr = nx_type_info(opts->wtype);
    if (!tr || !tr->quantizable)
        return nx_fail(err, NX_ERR_UNSUPPORTED, "gen-model: cannot write weights of type %s", nx_type_name(opts->wtype));
    gm_builder b = {.rng = opts->seed, .wtype = opts->wtype, .q4_k_m = opts->q4_k_m && opts->wtype == NX_TYPE_Q4_K,
                    .arch = arch->name, .err = err, .st = NX_OK};
    const char *json = opts->config_json && *opts->config_json ? opts->config_json : "{}";
    b.cfg = cJSON_Parse(json);
    if (!b.cfg || !cJSON_IsObject(b.cfg)) {
        cJSON_Delete(b.cfg);
        return nx_fail(err, NX_ERR_FORMAT, "gen-model: config is not a JSON object");
    }
    b.w = nx_gguf_writer_create();
    if (!b.w) b.st = nx_fail(err, NX_ERR_NOMEM, "gen-model: out of memory");
    else arch->build(&b);
    if (b.st == NX_OK) b.st = nx_gguf_writer_write(b.w, opts->out_path, err);
    nx_gguf_writer_free(b.w);
    for (size_t i = 0; i < b.n_bufs; i++) free(b.bufs[i]);
    free(b.bufs);
    cJSON_Delete(b.cfg);
    return b.st;
}
