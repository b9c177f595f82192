/*
 * qwen35.c — loading and validating `qwen35` / `qwen35moe` GGUFs (spec qwen35.md §1-2).
 *
 * Reads every metadata key the reference engine reads, decides each trunk layer's kind by
 * tensor presence, and checks every tensor's presence, shape and type with one-line errors
 * that name the tensor and the expected shape. Weights stay views into the mapping; only
 * 1-D weights in a non-F32 type and the transposed conv kernels are copied (model-owned).
 * The MTP layers are validated here and not run by the trunk.
 * Must never: accept a shape the forward pass would read out of bounds.
 */
#include "arch/qwen35.h"
#include "arch/qwen35_dn.h"
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "quant/quant.h"

#define QW_MAX_DIM (1 << 20)   /* sanity bound on every dimension read from metadata */

typedef struct qw_loader {
    nx_loader base;   /* model, error, sticky status */
    qw_model *qm;
} qw_loader;

static bool get_int(qw_loader *L, const char *suffix, int il, bool required, int64_t def, int64_t lo, int64_t hi,
                    int *out) {
    if (L->base.st != NX_OK) return false;
    int64_t v;
    if (!nx_model_key_int(L->base.m, suffix, il, &v)) {
        if (required) {
            L->base.st = nx_fail(L->base.err, NX_ERR_FORMAT, "missing metadata key %s.%s", L->base.m->arch, suffix);
            return false;
        }
        v = def;
    }
    if (v < lo || v > hi) {
        L->base.st = nx_fail(L->base.err, NX_ERR_FORMAT, "metadata %s.%s = %lld is outside [%lld, %lld]", L->base.m->arch, suffix,
                        (long long)v, (long long)lo, (long long)hi);
        return false;
    }
    *out = (int)v;
    return true;
}

/* Max over a per-layer array (or the scalar). */
static void get_int_max(qw_loader *L, const char *suffix, int n_layer, int64_t def, int *out) {
    if (L->base.st != NX_OK) return;
    int best = -1;
    for (int il = 0; il < n_layer; il++) {
        int v;
        if (!get_int(L, suffix, il, false, def, 0, QW_MAX_DIM, &v)) return;
        if (v > best) best = v;
    }
    *out = best < 0 ? (int)def : best;
}


/* The shared loader helpers (model.h), called with this file's loader. */
#define tensor(L, ...) nx_loader_tensor(&(L)->base, __VA_ARGS__)
#define vec(L, ...) nx_loader_vec(&(L)->base, __VA_ARGS__)

static void load_attn(qw_loader *L, qw_layer *ly, bool is_mtp) {
    const qw_hparams *hp = &L->qm->hp;
    int il = ly->il;
    int64_t E = hp->n_embd, D = hp->head_dim, Hq = hp->n_head, Hkv = hp->n_head_kv;
    ly->kind = QW_ATTN;
    /* Dense MTP: attn_q may be absent and is then borrowed from the last trunk layer. */
    unsigned qflags = NX_T_MATMUL | (is_mtp && !hp->moe ? NX_T_OPTIONAL : 0);
    ly->wq = tensor(L, qflags, 2, E, 2 * Hq * D, 1, "blk.%d.attn_q.weight", il);
    if (L->base.st == NX_OK && !ly->wq) {
        const qw_layer *last = &L->qm->layers[hp->n_main - 1];
        if (last->kind != QW_ATTN || !last->wq) {
            L->base.st = nx_fail(L->base.err, NX_ERR_FORMAT,
                            "missing tensor blk.%d.attn_q.weight (expected shape [%lld, %lld]); the last trunk layer "
                            "has none to borrow", il, (long long)E, (long long)(2 * Hq * D));
            return;
        }
        ly->wq = last->wq;
    }
    ly->wk = tensor(L, NX_T_MATMUL, 2, E, Hkv * D, 1, "blk.%d.attn_k.weight", il);
    ly->wv = tensor(L, NX_T_MATMUL, 2, E, Hkv * D, 1, "blk.%d.attn_v.weight", il);
    ly->wo = tensor(L, NX_T_MATMUL, 2, Hq * D, E, 1, "blk.%d.attn_output.weight", il);
    ly->q_norm = vec(L, 0, D, "blk.%d.attn_q_norm.weight", il);
    ly->k_norm = vec(L, 0, D, "blk.%d.attn_k_norm.weight", il);
}

static void load_deltanet(qw_loader *L, qw_layer *ly) {
    const qw_hparams *hp = &L->qm->hp;
    int il = ly->il;
    int64_t E = hp->n_embd, C = hp->conv_dim, K = hp->d_conv;
    ly->kind = QW_DELTANET;
    ly->wqkv = tensor(L, NX_T_MATMUL, 2, E, C, 1, "blk.%d.attn_qkv.weight", il);
    ly->wz = tensor(L, NX_T_MATMUL, 2, E, hp->value_dim, 1, "blk.%d.attn_gate.weight", il);
    ly->wbeta = tensor(L, NX_T_MATMUL, 2, E, hp->nv, 1, "blk.%d.ssm_beta.weight", il);
    ly->walpha = tensor(L, NX_T_MATMUL, 2, E, hp->nv, 1, "blk.%d.ssm_alpha.weight", il);
    ly->wout = tensor(L, NX_T_MATMUL, 2, hp->value_dim, E, 1, "blk.%d.ssm_out.weight", il);
    ly->dt_bias = vec(L, 0, hp->nv, "blk.%d.ssm_dt.bias", il);
    ly->ssm_a = vec(L, 0, hp->nv, "blk.%d.ssm_a", il);
    ly->ssm_norm = vec(L, 0, hp->dv, "blk.%d.ssm_norm.weight", il);
    const nx_tensor *cw = tensor(L, 0, 2, K, C, 1, "blk.%d.ssm_conv1d.weight", il);
    if (!cw) return;
    /* Any stored type: convert to F32 and transpose to [tap][channel] so the conv runs along
     * channels (contiguous) for every tap. */
    const float *src = NULL;
    L->base.st = nx_model_f32(L->base.m, cw, &src, L->base.err);
    if (L->base.st != NX_OK) return;
    float *t = nx_model_alloc(L->base.m, (size_t)(K * C) * sizeof(float), L->base.err);
    if (!t) { L->base.st = NX_ERR_NOMEM; return; }
    for (int64_t c = 0; c < C; c++)
        for (int64_t j = 0; j < K; j++) t[j * C + c] = src[c * K + j];
    ly->conv_t = t;
}

static void load_ffn(qw_loader *L, qw_layer *ly, bool is_mtp) {
    const qw_hparams *hp = &L->qm->hp;
    int il = ly->il;
    int64_t E = hp->n_embd;
    qw_ffn *f = &ly->ffn;
    if (!hp->moe) {
        unsigned fl = NX_T_MATMUL | (is_mtp ? NX_T_OPTIONAL : 0);
        f->gate = tensor(L, fl, 2, E, hp->n_ff, 1, "blk.%d.ffn_gate.weight", il);
        if (L->base.st != NX_OK || !f->gate) return;   /* MTP without FFN: skipped */
        f->up = tensor(L, NX_T_MATMUL, 2, E, hp->n_ff, 1, "blk.%d.ffn_up.weight", il);
        f->down = tensor(L, NX_T_MATMUL, 2, hp->n_ff, E, 1, "blk.%d.ffn_down.weight", il);
        f->present = true;
        return;
    }
    int64_t F = hp->n_ff_exp, X = hp->n_expert;
    f->gate_inp = tensor(L, NX_T_MATMUL, 2, E, X, 1, "blk.%d.ffn_gate_inp.weight", il);
    f->gate_up_exps = tensor(L, NX_T_MATMUL | NX_T_OPTIONAL, 3, E, 2 * F, X, "blk.%d.ffn_gate_up_exps.weight", il);
    if (!f->gate_up_exps) {
        f->gate_exps = tensor(L, NX_T_MATMUL, 3, E, F, X, "blk.%d.ffn_gate_exps.weight", il);
        f->up_exps = tensor(L, NX_T_MATMUL, 3, E, F, X, "blk.%d.ffn_up_exps.weight", il);
    }
    f->down_exps = tensor(L, NX_T_MATMUL, 3, F, E, X, "blk.%d.ffn_down_exps.weight", il);
    /* Shared expert: optional as a whole (present in released checkpoints). */
    f->up_shexp = tensor(L, NX_T_MATMUL | NX_T_OPTIONAL, 2, E, hp->n_ff_shexp, 1, "blk.%d.ffn_up_shexp.weight", il);
    if (f->up_shexp) {
        f->gate_shexp = tensor(L, NX_T_MATMUL, 2, E, hp->n_ff_shexp, 1, "blk.%d.ffn_gate_shexp.weight", il);
        f->down_shexp = tensor(L, NX_T_MATMUL, 2, hp->n_ff_shexp, E, 1, "blk.%d.ffn_down_shexp.weight", il);
        const nx_tensor *g = tensor(L, NX_T_MATMUL, 1, E, 1, 1, "blk.%d.ffn_gate_inp_shexp.weight", il);
        if (g) {
            int64_t ne[2] = {E, 1};
            nx_tensor_init(&f->gate_inp_shexp, g->name, g->type, 2, ne, g->data);
        }
    }
    f->present = L->base.st == NX_OK;
}

static void load_layer_common(qw_loader *L, qw_layer *ly) {
    int64_t E = L->qm->hp.n_embd;
    ly->attn_norm = vec(L, 0, E, "blk.%d.attn_norm.weight", ly->il);
    ly->ffn_norm = vec(L, 0, E, "blk.%d.post_attention_norm.weight", ly->il);
}

static bool has_tensor(const nx_model *m, const char *fmt, int il) {
    char name[128];
    snprintf(name, sizeof name, fmt, il);
    return nx_gguf_find_tensor(m->gguf, name) >= 0;
}

static void read_hparams(qw_loader *L) {
    nx_model *m = L->base.m;
    qw_hparams *hp = &L->qm->hp;
    hp->moe = !strcmp(m->arch, "qwen35moe");
    get_int(L, "block_count", -1, true, 0, 1, 4096, &hp->n_layer);
    get_int(L, "nextn_predict_layers", -1, false, 0, 0, hp->n_layer - 1 > 0 ? hp->n_layer - 1 : 0, &hp->n_nextn);
    hp->n_main = hp->n_layer - hp->n_nextn;
    get_int(L, "context_length", -1, true, 0, 1, INT32_MAX, &hp->n_ctx_train);
    get_int(L, "embedding_length", -1, true, 0, 1, QW_MAX_DIM, &hp->n_embd);
    double eps = 0;
    if (L->base.st == NX_OK && !nx_model_key_float(m, "attention.layer_norm_rms_epsilon", &eps))
        L->base.st = nx_fail(L->base.err, NX_ERR_FORMAT, "missing metadata key %s.attention.layer_norm_rms_epsilon", m->arch);
    hp->eps = (float)eps;
    if (L->base.st == NX_OK && !(hp->eps >= 0.0f && hp->eps < 1.0f))
        L->base.st = nx_fail(L->base.err, NX_ERR_FORMAT, "metadata %s.attention.layer_norm_rms_epsilon = %g is not in [0, 1)",
                        m->arch, eps);
    /* vocabulary: key, else the embedding table */
    const nx_tensor *te = tensor(L, NX_T_OPTIONAL, 2, hp->n_embd, -1, 1, "token_embd.weight");
    if (L->base.st == NX_OK && !te)
        L->base.st = nx_fail(L->base.err, NX_ERR_FORMAT, "missing tensor token_embd.weight (expected shape [%d, n_vocab])", hp->n_embd);
    if (L->base.st != NX_OK) return;
    get_int(L, "vocab_size", -1, false, te->ne[1], 1, INT32_MAX, &hp->n_vocab);
    /* attention */
    get_int_max(L, "attention.head_count", hp->n_layer, 0, &hp->n_head);
    get_int_max(L, "attention.head_count_kv", hp->n_layer, hp->n_head, &hp->n_head_kv);
    int def_hd = hp->n_head > 0 ? hp->n_embd / hp->n_head : 0;
    int vlen = 0;
    get_int(L, "attention.key_length", -1, false, def_hd, 0, QW_MAX_DIM, &hp->head_dim);
    get_int(L, "attention.value_length", -1, false, def_hd, 0, QW_MAX_DIM, &vlen);
    get_int(L, "rope.dimension_count", -1, false, hp->head_dim, 0, QW_MAX_DIM, &hp->n_rot);
    get_int(L, "full_attention_interval", -1, false, 4, 1, 4096, &hp->interval);
    if (L->base.st != NX_OK) return;
    {
        char key[128];
        snprintf(key, sizeof key, "%s.rope.dimension_sections", m->arch);
        int64_t k = nx_gguf_find_key(m->gguf, key);
        if (k < 0) {
            L->base.st = nx_fail(L->base.err, NX_ERR_FORMAT, "missing metadata key %s", key);
            return;
        }
        for (int i = 0; i < 4; i++) {
            int64_t v = 0;
            if (nx_gguf_kv_type(m->gguf, k) == NX_GGUF_ARRAY) {
                if ((uint64_t)i < nx_gguf_arr_n(m->gguf, k) && !nx_gguf_arr_int(m->gguf, k, (uint64_t)i, &v)) v = -1;
            } else if (!nx_gguf_kv_int(m->gguf, k, &v)) {
                v = -1;
            }
            if (v < 0 || v > QW_MAX_DIM) {
                L->base.st = nx_fail(L->base.err, NX_ERR_FORMAT, "metadata %s: bad element %d", key, i);
                return;
            }
            hp->sections[i] = (int)v;
        }
    }
    double fb = 10000.0, factor = 0.0;
    nx_model_key_float(m, "rope.freq_base", &fb);
    if (!nx_model_key_float(m, "rope.scaling.factor", &factor)) nx_model_key_float(m, "rope.scale_linear", &factor);
    hp->freq_base = (float)fb;
    hp->freq_scale = factor > 0.0 ? (float)(1.0 / factor) : 1.0f;
    /* Gated DeltaNet */
    get_int(L, "ssm.conv_kernel", -1, true, 0, 1, 64, &hp->d_conv);
    get_int(L, "ssm.state_size", -1, true, 0, 1, QW_MAX_DIM, &hp->dk);
    get_int(L, "ssm.group_count", -1, true, 0, 1, QW_MAX_DIM, &hp->nk);
    get_int(L, "ssm.time_step_rank", -1, true, 0, 1, QW_MAX_DIM, &hp->nv);
    get_int(L, "ssm.inner_size", -1, true, 0, 1, QW_MAX_DIM, &hp->value_dim);
    if (L->base.st != NX_OK) return;
    if (hp->value_dim % hp->nv)
        L->base.st = nx_fail(L->base.err, NX_ERR_FORMAT, "ssm.inner_size %d is not a multiple of ssm.time_step_rank %d",
                        hp->value_dim, hp->nv);
    else if (hp->nv % hp->nk)
        L->base.st = nx_fail(L->base.err, NX_ERR_FORMAT, "ssm.time_step_rank %d is not a multiple of ssm.group_count %d", hp->nv, hp->nk);
    else if (hp->dk > QW_DN_RUN_MAX_DK)
        L->base.st = nx_fail(L->base.err, NX_ERR_UNSUPPORTED, "DeltaNet head dim %d (ssm.state_size) is larger than the %d "
                        "this build's recurrence kernels hold per state row", hp->dk, QW_DN_RUN_MAX_DK);
    else if (hp->value_dim / hp->nv != hp->dk)
        L->base.st = nx_fail(L->base.err, NX_ERR_UNSUPPORTED, "DeltaNet head dims differ: key %d (ssm.state_size), value %d "
                        "(ssm.inner_size / time_step_rank); they must be equal", hp->dk, hp->value_dim / hp->nv);
    if (L->base.st != NX_OK) return;
    hp->dv = hp->dk;
    hp->key_dim = hp->nk * hp->dk;
    hp->conv_dim = 2 * hp->key_dim + hp->value_dim;
    /* FFN */
    get_int_max(L, "feed_forward_length", hp->n_layer, 0, &hp->n_ff);
    if (hp->moe) {
        get_int(L, "expert_count", -1, true, 0, 1, 512, &hp->n_expert);
        get_int(L, "expert_used_count", -1, true, 0, 1, NX_TOPK_MAX, &hp->n_expert_used);
        if (L->base.st == NX_OK && hp->n_expert_used > hp->n_expert)
            L->base.st = nx_fail(L->base.err, NX_ERR_FORMAT, "expert_used_count %d > expert_count %d", hp->n_expert_used, hp->n_expert);
        get_int(L, "expert_feed_forward_length", -1, false, hp->n_expert_used ? hp->n_ff / hp->n_expert_used : 0, 1,
                QW_MAX_DIM, &hp->n_ff_exp);
        get_int(L, "expert_shared_feed_forward_length", -1, false, hp->n_ff > 0 ? hp->n_ff : hp->n_ff_exp, 1,
                QW_MAX_DIM, &hp->n_ff_shexp);
    }
    if (L->base.st == NX_OK && vlen != hp->head_dim)
        L->base.st = nx_fail(L->base.err, NX_ERR_UNSUPPORTED, "attention key_length %d != value_length %d", hp->head_dim, vlen);
}

static void check_attn_hparams(qw_loader *L) {
    qw_hparams *hp = &L->qm->hp;
    if (L->base.st != NX_OK) return;
    if (hp->n_head <= 0 || hp->n_head_kv <= 0 || hp->head_dim <= 0 || hp->n_head % hp->n_head_kv)
        L->base.st = nx_fail(L->base.err, NX_ERR_FORMAT, "attention layers need head_count %d > 0, a divisor head_count_kv %d and "
                        "key_length %d > 0", hp->n_head, hp->n_head_kv, hp->head_dim);
    else if ((int64_t)hp->n_head * hp->head_dim > QW_MAX_DIM)
        L->base.st = nx_fail(L->base.err, NX_ERR_FORMAT, "attention width %d x %d is too large", hp->n_head, hp->head_dim);
    if (L->base.st != NX_OK) return;
    qw_model *qm = L->qm;
    qm->rope.n_rot = hp->n_rot;
    qm->rope.mode = NX_ROPE_NEOX;
    qm->rope.freq_base = hp->freq_base;
    qm->rope.freq_scale = hp->freq_scale;
    qm->rope.freq_factors = NULL;
    L->base.st = nx_rope_check(&qm->rope, hp->head_dim, L->base.err);
    if (L->base.st != NX_OK) return;
    /* IMROPE with text positions (p, p, p, 0): a pair whose sector falls in none of the t/h/w
     * sections takes position 0 (no rotation). */
    int half = hp->n_rot / 2, sum = hp->sections[0] + hp->sections[1] + hp->sections[2] + hp->sections[3];
    unsigned char *z = nx_model_alloc(L->base.m, (size_t)(half > 0 ? half : 1), L->base.err);
    if (!z) { L->base.st = NX_ERR_NOMEM; return; }
    for (int i = 0; i < half && sum > 0; i++) {
        int sec = i % sum;
        bool p = (sec % 3 == 0 && sec < 3 * hp->sections[0]) || (sec % 3 == 1 && sec < 3 * hp->sections[1]) ||
                 (sec % 3 == 2 && sec < 3 * hp->sections[2]);
        z[i] = !p;
    }
    qm->rope_pos0 = z;
}

static nx_status qw_load(nx_model *m, nx_error *err) {
    qw_model *qm = nx_model_alloc(m, sizeof *qm, err);
    if (!qm) return NX_ERR_NOMEM;
    qw_loader L = {.base = {.m = m, .err = err, .st = NX_OK}, .qm = qm};
    read_hparams(&L);
    if (L.base.st != NX_OK) return L.base.st;
    qw_hparams *hp = &qm->hp;
    if (hp->n_main < 1) return nx_fail(err, NX_ERR_FORMAT, "no trunk layers (block_count %d, nextn_predict_layers %d)",
                                       hp->n_layer, hp->n_nextn);
    qm->layers = nx_model_alloc(m, (size_t)hp->n_main * sizeof *qm->layers, err);
    qm->mtp = nx_model_alloc(m, (size_t)(hp->n_nextn ? hp->n_nextn : 1) * sizeof *qm->mtp, err);
    if (!qm->layers || !qm->mtp) return NX_ERR_NOMEM;
    /* layer kinds: tensor presence first, the interval as fallback (Decision 7) */
    bool any_attn = hp->n_nextn > 0;
    for (int il = 0; il < hp->n_main; il++) {
        qw_layer *ly = &qm->layers[il];
        ly->il = il;
        if (has_tensor(m, "blk.%d.ssm_conv1d.weight", il)) ly->kind = QW_DELTANET;
        else if (has_tensor(m, "blk.%d.attn_q.weight", il)) ly->kind = QW_ATTN;
        else ly->kind = (il + 1) % hp->interval == 0 ? QW_ATTN : QW_DELTANET;
        if (ly->kind == QW_ATTN) any_attn = true;
    }
    if (any_attn) check_attn_hparams(&L);
    if (hp->moe && L.base.st == NX_OK && (hp->n_ff_exp <= 0 || hp->n_ff_shexp <= 0))
        L.base.st = nx_fail(err, NX_ERR_FORMAT, "MoE widths: expert_feed_forward_length %d, shared %d", hp->n_ff_exp, hp->n_ff_shexp);
    if (!hp->moe && L.base.st == NX_OK && hp->n_ff <= 0)
        L.base.st = nx_fail(err, NX_ERR_FORMAT, "missing metadata key %s.feed_forward_length", m->arch);
    int64_t E = hp->n_embd;
    qm->tok_embd = tensor(&L, 0, 2, E, hp->n_vocab, 1, "token_embd.weight");
    if (L.base.st == NX_OK && !nx_can_dequantize(qm->tok_embd->type))
        L.base.st = nx_fail(err, NX_ERR_UNSUPPORTED, "tensor token_embd.weight has type %s, which cannot be dequantized",
                       nx_type_name(qm->tok_embd->type));
    qm->output_norm = vec(&L, 0, E, "output_norm.weight", 0);
    qm->output = tensor(&L, NX_T_MATMUL | NX_T_OPTIONAL, 2, E, hp->n_vocab, 1, "output.weight");
    if (L.base.st == NX_OK && !qm->output) {
        if (!nx_matmul_supports(qm->tok_embd->type))
            L.base.st = nx_fail(err, NX_ERR_UNSUPPORTED, "tied output: token_embd.weight has type %s, which has no matmul kernel",
                           nx_type_name(qm->tok_embd->type));
        qm->output = qm->tok_embd;
        if (L.base.st == NX_OK) nx_model_pack_weight(L.base.m, qm->output);
    }
    for (int il = 0; il < hp->n_main && L.base.st == NX_OK; il++) {
        qw_layer *ly = &qm->layers[il];
        load_layer_common(&L, ly);
        if (ly->kind == QW_ATTN) {
            ly->kv_layer = qm->n_attn++;
            load_attn(&L, ly, false);
        } else {
            ly->rec_layer = qm->n_rec++;
            load_deltanet(&L, ly);
        }
        load_ffn(&L, ly, false);
    }
    for (int k = 0; k < hp->n_nextn && L.base.st == NX_OK; k++) {
        qw_mtp *h = &qm->mtp[k];
        int il = hp->n_main + k;
        h->layer.il = il;
        h->layer.kv_layer = 0;
        load_layer_common(&L, &h->layer);
        load_attn(&L, &h->layer, true);
        load_ffn(&L, &h->layer, true);
        if (hp->moe && L.base.st == NX_OK && !h->layer.ffn.present)
            L.base.st = nx_fail(err, NX_ERR_FORMAT, "missing MoE FFN tensors of MTP layer %d", il);
        h->eh_proj = tensor(&L, NX_T_MATMUL | NX_T_OPTIONAL, 2, 2 * E, E, 1, "blk.%d.nextn.eh_proj.weight", il);
        h->enorm = vec(&L, 0, E, "blk.%d.nextn.enorm.weight", il);
        h->hnorm = vec(&L, 0, E, "blk.%d.nextn.hnorm.weight", il);
        h->shared_head_norm = vec(&L, NX_T_OPTIONAL, E, "blk.%d.nextn.shared_head_norm.weight", il);
        h->embed_tokens = tensor(&L, NX_T_OPTIONAL, 2, E, hp->n_vocab, 1, "blk.%d.nextn.embed_tokens.weight", il);
        if (L.base.st == NX_OK && h->embed_tokens && !nx_can_dequantize(h->embed_tokens->type))
            L.base.st = nx_fail(err, NX_ERR_UNSUPPORTED, "tensor blk.%d.nextn.embed_tokens.weight has type %s, which "
                                "cannot be dequantized", il, nx_type_name(h->embed_tokens->type));
        h->shared_head_head = tensor(&L, NX_T_MATMUL | NX_T_OPTIONAL, 2, E, hp->n_vocab, 1,
                                     "blk.%d.nextn.shared_head_head.weight", il);
    }
    /* The MTP head's own tensors win over the shared ones (llama.cpp's NextN rule); output_extra
     * is a requantized copy of the trunk's head, so it only stands in for output. */
    const qw_mtp *used = hp->n_nextn > 0 ? &qm->mtp[hp->n_nextn - 1] : NULL;
    qm->tok_embd_mtp = used && used->embed_tokens ? used->embed_tokens : qm->tok_embd;
    qm->output_mtp = used && used->shared_head_head ? used->shared_head_head : NULL;
    if (!qm->output_mtp)
        qm->output_mtp = tensor(&L, NX_T_MATMUL | NX_T_OPTIONAL, 2, E, hp->n_vocab, 1, "output_extra.weight");
    if (!qm->output_mtp) qm->output_mtp = qm->output;
    if (L.base.st != NX_OK) return L.base.st;
    m->arch_data = qm;
    m->n_vocab = hp->n_vocab;
    m->n_embd = hp->n_embd;
    m->n_ctx_train = hp->n_ctx_train;
    return NX_OK;
}

static void qw_free(nx_model *m) { m->arch_data = NULL; /* everything is model-owned */ }

void qw_embed(const qw_model *qm, const nx_tensor *t, const nx_token *tok, int n, float *x) {
    int64_t E = qm->hp.n_embd;
    for (int r = 0; r < n; r++)
        nx_dequantize_row(t->type, (const char *)t->data + (size_t)tok[r] * t->nb[1], x + (size_t)r * (size_t)E, E);
}

/* Context hooks live in qwen35_forward.c. */
nx_status qw_ctx_init(nx_ctx *ctx, nx_error *err);
void qw_ctx_free(nx_ctx *ctx);
nx_status qw_forward(nx_ctx *ctx, const nx_ubatch *ub, nx_error *err);

const nx_arch nx_arch_qwen35 = {"qwen35", qw_load, qw_free, qw_ctx_init, qw_ctx_free, qw_forward};
const nx_arch nx_arch_qwen35moe = {"qwen35moe", qw_load, qw_free, qw_ctx_init, qw_ctx_free, qw_forward};
