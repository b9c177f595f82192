/*
 * llama.c — loading and validating `llama` GGUFs (facts: llama.h).
 *
 * Reads the hyper-parameters llama.cpp reads for LLM_ARCH_LLAMA and checks every tensor's
 * presence, shape and type with one-line errors naming the tensor and the expected shape.
 * Weights stay views into the mapping; only 1-D weights in a non-F32 type are copied.
 * Must never: accept a shape the forward pass would read out of bounds, or run a model whose
 * extra tensors (biases, experts) it would silently ignore.
 */
#include "arch/llama.h"
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "quant/quant.h"

#define LL_MAX_DIM (1 << 20)   /* sanity bound on every dimension read from metadata */

#define tensor(L, ...) nx_loader_tensor((L), __VA_ARGS__)
#define vec(L, ...) nx_loader_vec((L), __VA_ARGS__)

/* `llama.<suffix>` into *out: def when absent (required: an error), within [lo, hi]. */
static void get_int(nx_loader *L, const char *suffix, bool required, int64_t def, int64_t lo, int64_t hi, int *out) {
    if (L->st != NX_OK) return;
    int64_t v;
    if (!nx_model_key_int(L->m, suffix, -1, &v)) {
        if (required) {
            L->st = nx_fail(L->err, NX_ERR_FORMAT, "missing metadata key %s.%s", L->m->arch, suffix);
            return;
        }
        v = def;
    }
    if (v < lo || v > hi) {
        L->st = nx_fail(L->err, NX_ERR_FORMAT, "metadata %s.%s = %lld is outside [%lld, %lld]", L->m->arch, suffix,
                        (long long)v, (long long)lo, (long long)hi);
        return;
    }
    *out = (int)v;
}

/* A tensor this implementation does not use must be absent (else the results would be wrong). */
static void refuse_if_present(nx_loader *L, const char *what, const char *fmt, int il) {
    if (L->st != NX_OK) return;
    char name[128];
    snprintf(name, sizeof name, fmt, il);
    if (nx_gguf_find_tensor(L->m->gguf, name) >= 0)
        L->st = nx_fail(L->err, NX_ERR_UNSUPPORTED, "tensor %s: %s are not supported for architecture %s", name, what,
                        L->m->arch);
}

static void read_hparams(nx_loader *L, ll_hparams *hp) {
    nx_model *m = L->m;
    get_int(L, "block_count", true, 0, 1, 4096, &hp->n_layer);
    get_int(L, "context_length", true, 0, 1, INT32_MAX, &hp->n_ctx_train);
    get_int(L, "embedding_length", true, 0, 1, LL_MAX_DIM, &hp->n_embd);
    get_int(L, "feed_forward_length", true, 0, 1, LL_MAX_DIM, &hp->n_ff);
    get_int(L, "attention.head_count", true, 0, 1, 4096, &hp->n_head);
    get_int(L, "attention.head_count_kv", false, hp->n_head, 1, 4096, &hp->n_head_kv);
    if (L->st != NX_OK) return;
    int vlen = 0;
    get_int(L, "attention.key_length", false, hp->n_embd / hp->n_head, 1, LL_MAX_DIM, &hp->head_dim);
    get_int(L, "attention.value_length", false, hp->head_dim, 1, LL_MAX_DIM, &vlen);
    get_int(L, "rope.dimension_count", false, hp->head_dim, 0, LL_MAX_DIM, &hp->n_rot);
    if (L->st != NX_OK) return;
    if (hp->n_head % hp->n_head_kv)
        L->st = nx_fail(L->err, NX_ERR_FORMAT, "attention.head_count %d is not a multiple of head_count_kv %d", hp->n_head,
                        hp->n_head_kv);
    else if (vlen != hp->head_dim)
        L->st = nx_fail(L->err, NX_ERR_UNSUPPORTED, "attention key_length %d != value_length %d", hp->head_dim, vlen);
    else if ((int64_t)hp->n_head * hp->head_dim > LL_MAX_DIM)
        L->st = nx_fail(L->err, NX_ERR_FORMAT, "attention width %d x %d is too large", hp->n_head, hp->head_dim);
    if (L->st != NX_OK) return;
    double eps = -1.0;
    if (!nx_model_key_float(m, "attention.layer_norm_rms_epsilon", &eps)) {
        L->st = nx_fail(L->err, NX_ERR_FORMAT, "missing metadata key %s.attention.layer_norm_rms_epsilon", m->arch);
        return;
    }
    if (!(eps >= 0.0 && eps < 1.0)) {
        L->st = nx_fail(L->err, NX_ERR_FORMAT, "metadata %s.attention.layer_norm_rms_epsilon = %g is not in [0, 1)",
                        m->arch, eps);
        return;
    }
    hp->eps = (float)eps;
    double scale = 0.0;
    nx_model_key_float(m, "attention.scale", &scale);
    hp->kq_scale = scale > 0.0 ? (float)scale : 1.0f / sqrtf((float)hp->head_dim);
}

/* RoPE: NORM pairs, linear scaling only, optional per-pair frequency divisors. */
static void read_rope(nx_loader *L, ll_model *lm) {
    if (L->st != NX_OK) return;
    nx_model *m = L->m;
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", m->arch);
    uint64_t len = 0;
    const char *type = nx_gguf_get_str(m->gguf, key, &len);
    if (type && !(len == 4 && !memcmp(type, "none", 4)) && !(len == 6 && !memcmp(type, "linear", 6))) {
        L->st = nx_fail(L->err, NX_ERR_UNSUPPORTED, "metadata %s = %.*s: only linear RoPE scaling is supported", key,
                        (int)(len > 32 ? 32 : len), type);
        return;
    }
    const bool none = type && len == 4;
    double base = 10000.0, factor = 0.0;
    nx_model_key_float(m, "rope.freq_base", &base);
    if (!none && !nx_model_key_float(m, "rope.scaling.factor", &factor)) nx_model_key_float(m, "rope.scale_linear", &factor);
    lm->rope.n_rot = lm->hp.n_rot;
    lm->rope.mode = NX_ROPE_NORMAL;
    lm->rope.freq_base = (float)base;
    lm->rope.freq_scale = factor > 0.0 ? (float)(1.0 / factor) : 1.0f;
    lm->rope.freq_factors = lm->hp.n_rot >= 2 ? vec(L, NX_T_OPTIONAL, lm->hp.n_rot / 2, "rope_freqs.weight", 0) : NULL;
    if (L->st == NX_OK) L->st = nx_rope_check(&lm->rope, lm->hp.head_dim, L->err);
}

static void load_layer(nx_loader *L, const ll_hparams *hp, int il, ll_layer *ly) {
    const int64_t E = hp->n_embd, Q = (int64_t)hp->n_head * hp->head_dim, KV = (int64_t)hp->n_head_kv * hp->head_dim;
    ly->attn_norm = vec(L, 0, E, "blk.%d.attn_norm.weight", il);
    ly->wq = tensor(L, NX_T_MATMUL, 2, E, Q, 1, "blk.%d.attn_q.weight", il);
    ly->wk = tensor(L, NX_T_MATMUL, 2, E, KV, 1, "blk.%d.attn_k.weight", il);
    ly->wv = tensor(L, NX_T_MATMUL, 2, E, KV, 1, "blk.%d.attn_v.weight", il);
    ly->wo = tensor(L, NX_T_MATMUL, 2, Q, E, 1, "blk.%d.attn_output.weight", il);
    ly->ffn_norm = vec(L, 0, E, "blk.%d.ffn_norm.weight", il);
    refuse_if_present(L, "MoE layers (ffn_gate_inp)", "blk.%d.ffn_gate_inp.weight", il);
    ly->gate = tensor(L, NX_T_MATMUL, 2, E, hp->n_ff, 1, "blk.%d.ffn_gate.weight", il);
    ly->up = tensor(L, NX_T_MATMUL, 2, E, hp->n_ff, 1, "blk.%d.ffn_up.weight", il);
    ly->down = tensor(L, NX_T_MATMUL, 2, hp->n_ff, E, 1, "blk.%d.ffn_down.weight", il);
    static const char *const biases[] = {"blk.%d.attn_q.bias", "blk.%d.attn_k.bias", "blk.%d.attn_v.bias",
                                         "blk.%d.attn_output.bias"};
    for (int i = 0; i < 4; i++) refuse_if_present(L, "attention biases", biases[i], il);
}

static nx_status ll_load(nx_model *m, nx_error *err) {
    ll_model *lm = nx_model_alloc(m, sizeof *lm, err);
    if (!lm) return NX_ERR_NOMEM;
    nx_loader L = {.m = m, .err = err, .st = NX_OK};
    ll_hparams *hp = &lm->hp;
    read_hparams(&L, hp);
    if (L.st != NX_OK) return L.st;
    const int64_t E = hp->n_embd;
    lm->tok_embd = tensor(&L, 0, 2, E, -1, 1, "token_embd.weight");
    if (L.st != NX_OK) return L.st;
    get_int(&L, "vocab_size", false, lm->tok_embd->ne[1], lm->tok_embd->ne[1], lm->tok_embd->ne[1], &hp->n_vocab);
    if (L.st == NX_OK && !nx_can_dequantize(lm->tok_embd->type))
        L.st = nx_fail(err, NX_ERR_UNSUPPORTED, "tensor token_embd.weight has type %s, which cannot be dequantized",
                       nx_type_name(lm->tok_embd->type));
    read_rope(&L, lm);
    lm->output_norm = vec(&L, 0, E, "output_norm.weight", 0);
    lm->output = tensor(&L, NX_T_MATMUL | NX_T_OPTIONAL, 2, E, hp->n_vocab, 1, "output.weight");
    if (L.st == NX_OK && !lm->output) {   /* tied */
        if (!nx_matmul_supports(lm->tok_embd->type))
            return nx_fail(err, NX_ERR_UNSUPPORTED, "tied output: token_embd.weight has type %s, which has no matmul "
                           "kernel", nx_type_name(lm->tok_embd->type));
        lm->output = lm->tok_embd;
        nx_model_pack_weight(m, lm->output);
    }
    lm->layers = L.st == NX_OK ? nx_model_alloc(m, (size_t)hp->n_layer * sizeof *lm->layers, err) : NULL;
    if (L.st == NX_OK && !lm->layers) return NX_ERR_NOMEM;
    for (int il = 0; il < hp->n_layer && L.st == NX_OK; il++) load_layer(&L, hp, il, &lm->layers[il]);
    if (L.st != NX_OK) return L.st;
    m->arch_data = lm;
    m->n_vocab = hp->n_vocab;
    m->n_embd = hp->n_embd;
    m->n_ctx_train = hp->n_ctx_train;
    return NX_OK;
}

static void ll_free(nx_model *m) { m->arch_data = NULL; /* everything is model-owned */ }

const nx_arch nx_arch_llama = {"llama", ll_load, ll_free, ll_ctx_init, ll_ctx_free, ll_forward};
