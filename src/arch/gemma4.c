/*
 * gemma4.c — loading and validating `gemma4` GGUFs (spec gemma4.md §1.1, §2.1, Decisions), and
 * the drafter architectures (`gemma4-assistant`, `gemma4_mtp`) as models that load for
 * inspection but refuse a context with a message saying how to pass them (--draft-model).
 *
 * Reads every metadata key of the target, decides per layer SWA / full (pattern), KV owner or
 * KV-shared (shared_kv_layers; source = last KV-owning layer of the same type), k_eq_v (no
 * attn_v), dense or MoE (ffn_gate_inp present), and checks the presence, shape and type of
 * every tensor the forward pass reads, with one-line errors naming the tensor and the shape.
 * Weights stay views into the mapping; 1-D weights in a non-F32 type and the router scale
 * (pre-divided by sqrt(n_embd)) are model-owned copies.
 * Must never: accept a shape or hyper-parameter the forward pass would read out of bounds.
 */
#include "arch/gemma4.h"
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "quant/quant.h"

#define G4_MAX_DIM (1 << 20)   /* sanity bound on every dimension read from metadata */

typedef struct g4_loader {
    nx_loader base;   /* model, error, sticky status */
    g4_model *gm;
} g4_loader;

/* ===== metadata ===== */

static int64_t key_index(const nx_model *m, const char *suffix) {
    char key[160];
    snprintf(key, sizeof key, "%s.%s", m->arch, suffix);
    return nx_gguf_find_key(m->gguf, key);
}

/* An integer key; per-layer arrays must have one entry per layer and give element il (il < 0:
 * element 0); a scalar applies to every layer. */
static bool get_int(g4_loader *L, const char *suffix, int il, bool required, int64_t def, int64_t lo, int64_t hi,
                    int *out) {
    if (L->base.st != NX_OK) return false;
    const nx_gguf *g = L->base.m->gguf;
    int64_t k = key_index(L->base.m, suffix), v = def;
    if (k < 0) {
        if (required) {
            L->base.st = nx_fail(L->base.err, NX_ERR_FORMAT, "missing metadata key %s.%s", L->base.m->arch, suffix);
            return false;
        }
    } else if (nx_gguf_kv_type(g, k) == NX_GGUF_ARRAY) {
        uint64_t n = nx_gguf_arr_n(g, k);
        int n_layer = L->gm->hp.n_layer;
        if (n_layer > 0 && n != (uint64_t)n_layer) {
            L->base.st = nx_fail(L->base.err, NX_ERR_FORMAT, "metadata %s.%s has %llu entries, expected %d (block_count)",
                            L->base.m->arch, suffix, (unsigned long long)n, n_layer);
            return false;
        }
        if (!nx_gguf_arr_int(g, k, il < 0 ? 0 : (uint64_t)il, &v)) {
            L->base.st = nx_fail(L->base.err, NX_ERR_FORMAT, "metadata %s.%s: element %d is not an integer", L->base.m->arch, suffix,
                            il < 0 ? 0 : il);
            return false;
        }
    } else if (!nx_gguf_kv_int(g, k, &v)) {
        L->base.st = nx_fail(L->base.err, NX_ERR_FORMAT, "metadata %s.%s is not an integer", L->base.m->arch, suffix);
        return false;
    }
    if (v < lo || v > hi) {
        L->base.st = nx_fail(L->base.err, NX_ERR_FORMAT, "metadata %s.%s%s = %lld is outside [%lld, %lld]", L->base.m->arch, suffix,
                        il >= 0 && k >= 0 && nx_gguf_kv_type(g, k) == NX_GGUF_ARRAY ? "[layer]" : "", (long long)v,
                        (long long)lo, (long long)hi);
        return false;
    }
    *out = (int)v;
    return true;
}

static float get_float(g4_loader *L, const char *suffix, bool required, double def) {
    if (L->base.st != NX_OK) return 0.0f;
    double v = def;
    int64_t k = key_index(L->base.m, suffix);
    if (k < 0) {
        if (required) L->base.st = nx_fail(L->base.err, NX_ERR_FORMAT, "missing metadata key %s.%s", L->base.m->arch, suffix);
    } else if (!nx_gguf_kv_float(L->base.m->gguf, k, &v) || !isfinite(v)) {
        L->base.st = nx_fail(L->base.err, NX_ERR_FORMAT, "metadata %s.%s is not a finite number", L->base.m->arch, suffix);
    }
    return (float)v;
}

/* ===== tensors ===== */


/* The shared loader helpers (model.h), called with this file's loader. */
#define tensor(L, ...) nx_loader_tensor(&(L)->base, __VA_ARGS__)
#define vec(L, ...) nx_loader_vec(&(L)->base, __VA_ARGS__)

static bool has_tensor(const nx_model *m, const char *fmt, int il) {
    char name[128];
    snprintf(name, sizeof name, fmt, il);
    return nx_gguf_find_tensor(m->gguf, name) >= 0;
}

static void check_dequant(g4_loader *L, const nx_tensor *t) {
    if (L->base.st == NX_OK && t && !nx_can_dequantize(t->type))
        L->base.st = nx_fail(L->base.err, NX_ERR_UNSUPPORTED, "tensor %s has type %s, which cannot be dequantized", t->name,
                        nx_type_name(t->type));
}

/* ===== hyper-parameters ===== */

static void read_hparams(g4_loader *L) {
    nx_model *m = L->base.m;
    g4_hparams *hp = &L->gm->hp;
    get_int(L, "block_count", -1, true, 0, 1, 4096, &hp->n_layer);
    get_int(L, "context_length", -1, true, 0, 1, INT32_MAX, &hp->n_ctx_train);
    get_int(L, "embedding_length", -1, true, 0, 1, G4_MAX_DIM, &hp->n_embd);
    hp->eps = get_float(L, "attention.layer_norm_rms_epsilon", true, 0.0);
    if (L->base.st == NX_OK && !(hp->eps >= 0.0f && hp->eps < 1.0f))
        L->base.st = nx_fail(L->base.err, NX_ERR_FORMAT, "metadata %s.attention.layer_norm_rms_epsilon = %g is not in [0, 1)",
                        m->arch, (double)hp->eps);
    const nx_tensor *te = tensor(L, NX_T_OPTIONAL, 2, hp->n_embd, -1, 1, "token_embd.weight");
    if (L->base.st == NX_OK && !te)
        L->base.st = nx_fail(L->base.err, NX_ERR_FORMAT, "missing tensor token_embd.weight (expected shape [%d, n_vocab])", hp->n_embd);
    if (L->base.st != NX_OK) return;
    if (te->ne[1] < 1 || te->ne[1] > INT32_MAX) {
        L->base.st = nx_fail(L->base.err, NX_ERR_FORMAT, "tensor token_embd.weight has %lld rows", (long long)te->ne[1]);
        return;
    }
    hp->n_vocab = (int)te->ne[1];
    int nh0 = 0;
    get_int(L, "attention.head_count", 0, true, 0, 1, 4096, &nh0);
    int def_hd = nh0 > 0 ? hp->n_embd / nh0 : 0, vf = 0, vs = 0;
    get_int(L, "attention.key_length", -1, false, def_hd, 1, G4_MAX_DIM, &hp->hd_full);
    get_int(L, "attention.value_length", -1, false, hp->hd_full, 1, G4_MAX_DIM, &vf);
    get_int(L, "attention.key_length_swa", -1, true, 0, 1, G4_MAX_DIM, &hp->hd_swa);
    get_int(L, "attention.value_length_swa", -1, false, hp->hd_swa, 1, G4_MAX_DIM, &vs);
    if (L->base.st == NX_OK && (vf != hp->hd_full || vs != hp->hd_swa))
        L->base.st = nx_fail(L->base.err, NX_ERR_UNSUPPORTED, "key_length %d / %d != value_length %d / %d (full / swa); they must "
                        "be equal", hp->hd_full, hp->hd_swa, vf, vs);
    get_int(L, "attention.sliding_window", -1, true, 0, 1, INT32_MAX / 2, &hp->n_swa);
    get_int(L, "attention.shared_kv_layers", -1, false, 0, 0, hp->n_layer - 1, &hp->n_shared);
    hp->n_kv_from_start = hp->n_layer - hp->n_shared;
    get_int(L, "rope.dimension_count", -1, false, hp->hd_full, 2, hp->hd_full, &hp->n_rot_full);
    get_int(L, "rope.dimension_count_swa", -1, false, hp->n_rot_full < hp->hd_swa ? hp->n_rot_full : hp->hd_swa, 2,
            hp->hd_swa, &hp->n_rot_swa);
    if (L->base.st == NX_OK && (hp->n_rot_full % 2 || hp->n_rot_swa % 2))
        L->base.st = nx_fail(L->base.err, NX_ERR_FORMAT, "rope dimension counts %d / %d (full / swa) must be even", hp->n_rot_full,
                        hp->n_rot_swa);
    hp->base_full = get_float(L, "rope.freq_base", false, 10000.0);
    hp->base_swa = get_float(L, "rope.freq_base_swa", false, hp->base_full);
    double factor = get_float(L, "rope.scaling.factor", false, 0.0);
    hp->freq_scale = factor > 0.0 ? (float)(1.0 / factor) : 1.0f;
    get_int(L, "embedding_length_per_layer_input", -1, true, 0, 0, G4_MAX_DIM, &hp->P);
    if (L->base.st == NX_OK && (int64_t)hp->P * hp->n_layer > G4_MAX_DIM * 4)
        L->base.st = nx_fail(L->base.err, NX_ERR_FORMAT, "per-layer input width %d x %d layers is too large", hp->P, hp->n_layer);
    get_int(L, "expert_count", -1, false, 0, 0, 512, &hp->n_expert);
    get_int(L, "expert_used_count", -1, false, 0, 0, NX_TOPK_MAX, &hp->n_expert_used);
    get_int(L, "expert_feed_forward_length", -1, false, 0, 0, G4_MAX_DIM, &hp->n_ff_exp);
    hp->softcap = get_float(L, "final_logit_softcapping", false, 30.0);
    if (!(hp->softcap > 0.0f)) hp->softcap = 0.0f;
}

/* ===== layers ===== */

static void load_attn(g4_loader *L, g4_layer *ly) {
    const g4_hparams *hp = &L->gm->hp;
    const int il = ly->il;
    const int64_t E = hp->n_embd, D = ly->hd, Hq = ly->nh, Hkv = ly->nkv;
    ly->attn_norm = vec(L, 0, E, "blk.%d.attn_norm.weight", il);
    ly->wq = tensor(L, NX_T_MATMUL, 2, E, Hq * D, 1, "blk.%d.attn_q.weight", il);
    ly->q_norm = vec(L, 0, D, "blk.%d.attn_q_norm.weight", il);
    ly->wo = tensor(L, NX_T_MATMUL, 2, Hq * D, E, 1, "blk.%d.attn_output.weight", il);
    ly->post_attn_norm = vec(L, 0, E, "blk.%d.post_attention_norm.weight", il);
    if (!ly->has_kv) return;   /* KV-shared: attn_k / attn_v / attn_k_norm unused even if present */
    ly->wk = tensor(L, NX_T_MATMUL, 2, E, Hkv * D, 1, "blk.%d.attn_k.weight", il);
    ly->k_norm = vec(L, 0, D, "blk.%d.attn_k_norm.weight", il);
    ly->wv = tensor(L, NX_T_MATMUL | NX_T_OPTIONAL, 2, E, Hkv * D, 1, "blk.%d.attn_v.weight", il);
    ly->k_eq_v = L->base.st == NX_OK && !ly->wv;
}

static void load_ffn(g4_loader *L, g4_layer *ly) {
    const g4_hparams *hp = &L->gm->hp;
    const int il = ly->il;
    const int64_t E = hp->n_embd;
    ly->ffn_norm = vec(L, 0, E, "blk.%d.ffn_norm.weight", il);
    ly->post_ffw_norm = vec(L, 0, E, "blk.%d.post_ffw_norm.weight", il);
    ly->gate = tensor(L, NX_T_MATMUL, 2, E, ly->n_ff, 1, "blk.%d.ffn_gate.weight", il);
    ly->up = tensor(L, NX_T_MATMUL, 2, E, ly->n_ff, 1, "blk.%d.ffn_up.weight", il);
    ly->down = tensor(L, NX_T_MATMUL, 2, ly->n_ff, E, 1, "blk.%d.ffn_down.weight", il);
    if (!ly->moe || L->base.st != NX_OK) return;
    const int64_t X = hp->n_expert, F = hp->n_ff_exp;
    ly->gate_inp = tensor(L, NX_T_MATMUL, 2, E, X, 1, "blk.%d.ffn_gate_inp.weight", il);
    const float *rs = vec(L, NX_T_OPTIONAL, E, "blk.%d.ffn_gate_inp.scale", il);
    float *r = L->base.st == NX_OK ? nx_model_alloc(L->base.m, (size_t)E * sizeof(float), L->base.err) : NULL;
    if (L->base.st == NX_OK && !r) { L->base.st = NX_ERR_NOMEM; return; }
    /* HF router.scale with the 1/sqrt(n_embd) of the router input folded in (as float32) */
    const float inv = 1.0f / sqrtf((float)E);
    for (int64_t i = 0; r && i < E; i++) r[i] = rs ? rs[i] * inv : inv;
    ly->router_scale = r;
    ly->gate_up_exps = tensor(L, NX_T_MATMUL | NX_T_OPTIONAL, 3, E, 2 * F, X, "blk.%d.ffn_gate_up_exps.weight", il);
    if (L->base.st == NX_OK && !ly->gate_up_exps) {
        ly->gate_exps = tensor(L, NX_T_MATMUL, 3, E, F, X, "blk.%d.ffn_gate_exps.weight", il);
        ly->up_exps = tensor(L, NX_T_MATMUL, 3, E, F, X, "blk.%d.ffn_up_exps.weight", il);
    }
    ly->down_exps = tensor(L, NX_T_MATMUL, 3, F, E, X, "blk.%d.ffn_down_exps.weight", il);
    ly->exp_scale = vec(L, NX_T_OPTIONAL, X, "blk.%d.ffn_down_exps.scale", il);
    ly->pre_ffw_norm_2 = vec(L, 0, E, "blk.%d.pre_ffw_norm_2.weight", il);
    ly->post_ffw_norm_1 = vec(L, 0, E, "blk.%d.post_ffw_norm_1.weight", il);
    ly->post_ffw_norm_2 = vec(L, 0, E, "blk.%d.post_ffw_norm_2.weight", il);
}

static void load_layer(g4_loader *L, g4_layer *ly) {
    const g4_hparams *hp = &L->gm->hp;
    const int il = ly->il;
    load_attn(L, ly);
    load_ffn(L, ly);
    if (hp->P > 0) {
        ly->inp_gate = tensor(L, NX_T_MATMUL, 2, hp->n_embd, hp->P, 1, "blk.%d.inp_gate.weight", il);
        ly->proj = tensor(L, NX_T_MATMUL, 2, hp->P, hp->n_embd, 1, "blk.%d.proj.weight", il);
        ly->post_norm = vec(L, 0, hp->n_embd, "blk.%d.post_norm.weight", il);
    }
    const float *s = vec(L, NX_T_OPTIONAL, 1, "blk.%d.layer_output_scale.weight", il);
    ly->has_out_scale = s != NULL;
    ly->out_scale = s ? s[0] : 1.0f;
}

/* Geometry of every layer: type, heads, KV ownership and source, MoE, FFN width. */
static void plan_layers(g4_loader *L) {
    nx_model *m = L->base.m;
    g4_model *gm = L->gm;
    g4_hparams *hp = &gm->hp;
    gm->last_kv[0] = gm->last_kv[1] = -1;
    for (int il = 0; il < hp->n_layer && L->base.st == NX_OK; il++) {
        g4_layer *ly = &gm->layers[il];
        ly->il = il;
        int swa = 0;
        get_int(L, "attention.sliding_window_pattern", il, true, 0, 0, 1, &swa);
        ly->swa = swa != 0;
        ly->hd = ly->swa ? hp->hd_swa : hp->hd_full;
        get_int(L, "attention.head_count", il, true, 0, 1, 4096, &ly->nh);
        get_int(L, "attention.head_count_kv", il, false, ly->nh, 1, 4096, &ly->nkv);
        get_int(L, "feed_forward_length", il, true, 0, 1, G4_MAX_DIM, &ly->n_ff);
        if (L->base.st != NX_OK) return;
        if (ly->nh % ly->nkv) {
            L->base.st = nx_fail(L->base.err, NX_ERR_FORMAT, "layer %d: head_count %d is not a multiple of head_count_kv %d", il,
                            ly->nh, ly->nkv);
            return;
        }
        if ((int64_t)ly->nh * ly->hd > G4_MAX_DIM) {
            L->base.st = nx_fail(L->base.err, NX_ERR_FORMAT, "layer %d: attention width %d x %d is too large", il, ly->nh, ly->hd);
            return;
        }
        ly->has_kv = il < hp->n_kv_from_start;
        if (ly->has_kv) {
            ly->kv_layer = gm->n_kv++;
            gm->last_kv[ly->swa] = il;
        } else {
            const int src = gm->last_kv[ly->swa];
            if (src < 0) {
                L->base.st = nx_fail(L->base.err, NX_ERR_FORMAT, "KV-shared layer %d (%s) has no KV-owning layer of its type before "
                                "layer %d", il, ly->swa ? "sliding-window" : "full", hp->n_kv_from_start);
                return;
            }
            const g4_layer *s = &gm->layers[src];
            if (s->nkv != ly->nkv) {
                L->base.st = nx_fail(L->base.err, NX_ERR_FORMAT, "KV-shared layer %d has %d kv heads but its source layer %d has %d",
                                il, ly->nkv, src, s->nkv);
                return;
            }
            ly->kv_layer = s->kv_layer;
        }
        ly->moe = has_tensor(m, "blk.%d.ffn_gate_inp.weight", il);
        if (ly->moe && (hp->n_expert <= 0 || hp->n_expert_used <= 0 || hp->n_expert_used > hp->n_expert ||
                        hp->n_ff_exp <= 0)) {
            L->base.st = nx_fail(L->base.err, NX_ERR_FORMAT, "layer %d is MoE (blk.%d.ffn_gate_inp.weight) but expert_count %d, "
                            "expert_used_count %d, expert_feed_forward_length %d are not a valid set", il, il,
                            hp->n_expert, hp->n_expert_used, hp->n_ff_exp);
            return;
        }
        int q = ly->nh * ly->hd, kvw = ly->nkv * ly->hd;
        if (q > hp->max_q) hp->max_q = q;
        if (kvw > hp->max_kv) hp->max_kv = kvw;
        if (ly->hd > hp->max_hd) hp->max_hd = ly->hd;
        if (ly->n_ff > hp->max_ff) hp->max_ff = ly->n_ff;
    }
}

static void setup_rope(g4_loader *L) {
    if (L->base.st != NX_OK) return;
    g4_model *gm = L->gm;
    const g4_hparams *hp = &gm->hp;
    gm->rope_full = (nx_rope_params){.n_rot = hp->n_rot_full, .mode = NX_ROPE_NEOX, .freq_base = hp->base_full,
                                     .freq_scale = hp->freq_scale, .freq_factors = gm->rope_freqs};
    gm->rope_swa = (nx_rope_params){.n_rot = hp->n_rot_swa, .mode = NX_ROPE_NEOX, .freq_base = hp->base_swa,
                                    .freq_scale = hp->freq_scale, .freq_factors = NULL};
    L->base.st = nx_rope_check(&gm->rope_full, hp->hd_full, L->base.err);
    if (L->base.st == NX_OK) L->base.st = nx_rope_check(&gm->rope_swa, hp->hd_swa, L->base.err);
    if (L->base.st != NX_OK) nx_error_prefix(L->base.err, "gemma4 rope (full: n_rot %d base %g; swa: n_rot %d base %g)",
                                        hp->n_rot_full, (double)hp->base_full, hp->n_rot_swa, (double)hp->base_swa);
}

static nx_status g4_load(nx_model *m, nx_error *err) {
    g4_model *gm = nx_model_alloc(m, sizeof *gm, err);
    if (!gm) return NX_ERR_NOMEM;
    g4_loader L = {.base = {.m = m, .err = err, .st = NX_OK}, .gm = gm};
    read_hparams(&L);
    if (L.base.st != NX_OK) return L.base.st;
    g4_hparams *hp = &gm->hp;
    gm->layers = nx_model_alloc(m, (size_t)hp->n_layer * sizeof *gm->layers, err);
    if (!gm->layers) return NX_ERR_NOMEM;
    plan_layers(&L);
    const int64_t E = hp->n_embd;
    gm->tok_embd = tensor(&L, 0, 2, E, hp->n_vocab, 1, "token_embd.weight");
    check_dequant(&L, gm->tok_embd);
    gm->output_norm = vec(&L, 0, E, "output_norm.weight", 0);
    gm->output = tensor(&L, NX_T_MATMUL | NX_T_OPTIONAL, 2, E, hp->n_vocab, 1, "output.weight");
    if (L.base.st == NX_OK && !gm->output) {
        if (!nx_matmul_supports(gm->tok_embd->type))
            L.base.st = nx_fail(err, NX_ERR_UNSUPPORTED, "tied output: token_embd.weight has type %s, which has no matmul kernel",
                           nx_type_name(gm->tok_embd->type));
        gm->output = gm->tok_embd;
        if (L.base.st == NX_OK) nx_model_pack_weight(L.base.m, gm->output);
    }
    gm->rope_freqs = vec(&L, NX_T_OPTIONAL, hp->n_rot_full / 2, "rope_freqs.weight", 0);
    if (hp->P > 0) {
        const int64_t PL = (int64_t)hp->P * hp->n_layer;
        gm->ple_tok = tensor(&L, 0, 2, PL, hp->n_vocab, 1, "per_layer_token_embd.weight");
        check_dequant(&L, gm->ple_tok);
        gm->ple_proj = tensor(&L, NX_T_MATMUL, 2, E, PL, 1, "per_layer_model_proj.weight");
        gm->ple_norm = vec(&L, 0, hp->P, "per_layer_proj_norm.weight", 0);
    }
    for (int il = 0; il < hp->n_layer && L.base.st == NX_OK; il++) load_layer(&L, &gm->layers[il]);
    setup_rope(&L);
    if (L.base.st != NX_OK) return L.base.st;
    m->arch_data = gm;
    m->n_vocab = hp->n_vocab;
    m->n_embd = hp->n_embd;
    m->n_ctx_train = hp->n_ctx_train;
    return NX_OK;
}

static void g4_free(nx_model *m) { m->arch_data = NULL; /* everything is model-owned */ }

void g4_embed(const g4_model *gm, const nx_token *tok, int n, float *x) {
    const nx_tensor *t = gm->tok_embd;
    const int64_t E = gm->hp.n_embd;
    const float s = sqrtf((float)E);
    for (int r = 0; r < n; r++) {
        float *xr = x + (size_t)r * (size_t)E;
        nx_dequantize_row(t->type, (const char *)t->data + (size_t)tok[r] * t->nb[1], xr, E);
        nx_scale(xr, xr, s, (int)E);
    }
}

/* Context hooks live in gemma4_forward.c. */
nx_status g4_ctx_init(nx_ctx *ctx, nx_error *err);
void g4_ctx_free(nx_ctx *ctx);
nx_status g4_forward(nx_ctx *ctx, const nx_ubatch *ub, nx_error *err);

const nx_arch nx_arch_gemma4 = {"gemma4", g4_load, g4_free, g4_ctx_init, g4_ctx_free, g4_forward};

/* ===== drafters given where a target is expected ===== */

/* The assistant loads (so that tools can inspect it, and the drafter can read its file through
 * the model handle) but is not a model to decode with on its own. */
static nx_status asst_load(nx_model *m, nx_error *err) {
    (void)err;
    int64_t i = nx_gguf_find_tensor(m->gguf, "token_embd.weight");
    if (i >= 0) {
        const nx_tensor *t = nx_gguf_tensor(m->gguf, i);
        if (t->ne[1] > 0 && t->ne[1] <= INT32_MAX) m->n_vocab = (int)t->ne[1];
    }
    return NX_OK;
}

static void asst_free(nx_model *m) { (void)m; }

static nx_status asst_ctx_init(nx_ctx *ctx, nx_error *err) {
    return nx_fail(err, NX_ERR_UNSUPPORTED,
                   "'%s' is a speculative-decoding drafter (the assistant of a gemma4 target), not a model to run on "
                   "its own: pass it with --draft-model (alias --mtp-head) and give the gemma4 target with -m",
                   ctx->model->arch);
}

static void asst_ctx_free(nx_ctx *ctx) { (void)ctx; }

static nx_status asst_forward(nx_ctx *ctx, const nx_ubatch *ub, nx_error *err) {
    (void)ub;
    return asst_ctx_init(ctx, err);
}

const nx_arch nx_arch_gemma4_assistant = {"gemma4-assistant", asst_load, asst_free, asst_ctx_init, asst_ctx_free,
                                          asst_forward};
const nx_arch nx_arch_gemma4_mtp = {"gemma4_mtp", asst_load, asst_free, asst_ctx_init, asst_ctx_free, asst_forward};
