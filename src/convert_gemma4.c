/*
 * convert_gemma4.c — `nextn convert` for Gemma 4: Gemma4ForCausalLM / Gemma4ForConditionalGeneration
 * (text model only) -> `gemma4`, and Gemma4AssistantForCausalLM -> `gemma4-assistant` (contract in
 * convert.h, shared plan in convert_impl.h).
 *
 * Facts from llama.cpp's Gemma4Model / Gemma4AssistantModel (conversion/gemma.py) and
 * docs/spec gemma4.md: norms are stored as they are (no 1 + w, unlike Gemma 2/3); layer_scalar
 * becomes `layer_output_scale.weight`; the router's scale and per-expert scale become
 * `ffn_gate_inp.scale` / `ffn_down_exps.scale`; the fused experts keep their HF layout
 * (gate rows first, then up); `rope_freqs.weight` is generated for the proportional partial RoPE of
 * the full-attention layers ([1] * rotated pairs + [1e30] * the rest). The assistant also carries
 * embedding_length_out (backbone width), nextn_predict_layers, and its ordered-embeddings head
 * (`masked_embd_centroids.weight`, `masked_embd_ordering` as an I32 vocabulary permutation, with
 * n_centroids / centroid_top_k / use_ordered_embeddings), the names nextn's and S000's loaders read.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "convert_impl.h"

/* ===== Config ===== */

static const cJSON *obj_get(const cJSON *o, const char *key) {
    const cJSON *v = o ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;
    return v && !cJSON_IsNull(v) ? v : NULL;
}

static nx_status num(const cv_config *c, const cJSON *v, const char *key, bool required, double def, double *out,
                     nx_error *err) {
    if (!v) {
        if (required) return nx_fail(err, NX_ERR_FORMAT, "%s: missing '%s'", c->path, key);
        *out = def;
        return NX_OK;
    }
    if (!cJSON_IsNumber(v)) return nx_fail(err, NX_ERR_FORMAT, "%s: '%s' must be a number", c->path, key);
    *out = v->valuedouble;
    return NX_OK;
}

/* The first of several alternative integer keys that is present (llama.cpp's find_hparam). */
static nx_status int_any(const cv_config *c, const char *const *keys, int def, int lo, int hi, int *out, nx_error *err) {
    for (; *keys; keys++)
        if (nx_cv_cfg_get(c, *keys)) return nx_cv_cfg_int(c, *keys, true, def, lo, hi, out, err);
    *out = def;
    return NX_OK;
}

nx_status nx_cv_g4_hparams(const cv_config *c, bool assistant, cv_g4 *g, nx_error *err) {
    nx_status s;
    g->on = true;
    g->assistant = assistant;
#define I(key, req, def, lo, hi, dst) if ((s = nx_cv_cfg_int(c, key, req, def, lo, hi, dst, err))) return s
    I("num_hidden_layers", true, 0, 1, 4096, &g->n_layer);
    I("hidden_size", true, 0, 1, CV_MAX_DIM, &g->n_embd);
    I("intermediate_size", true, 0, 1, CV_MAX_DIM, &g->n_ff);
    I("num_attention_heads", true, 0, 1, 4096, &g->n_head);
    I("num_key_value_heads", false, g->n_head, 1, 4096, &g->n_kv_swa);
    I("num_global_key_value_heads", false, -1, 1, 4096, &g->n_kv_full);
    I("head_dim", true, 0, 2, CV_MAX_DIM, &g->hd_swa);
    I("global_head_dim", true, 0, 2, CV_MAX_DIM, &g->hd_full);
    I("vocab_size", true, 0, 1, 1 << 24, &g->n_vocab);
    I("max_position_embeddings", false, 131072, 1, INT32_MAX, &g->n_ctx);
    I("sliding_window", true, 0, 1, INT32_MAX / 2, &g->n_swa);
    I("num_kv_shared_layers", false, 0, 0, g->n_layer - 1, &g->n_shared);
    I("hidden_size_per_layer_input", false, 0, 0, CV_MAX_DIM, &g->P);
    if (assistant) {
        I("backbone_hidden_size", true, 0, 1, CV_MAX_DIM, &g->backbone);
        I("num_centroids", false, 0, 0, 1 << 24, &g->n_centroids);
        I("centroid_intermediate_top_k", false, 0, 0, 1 << 24, &g->centroid_top_k);
    }
#undef I
    static const char *const k_exp[] = {"num_local_experts", "num_experts", NULL};
    static const char *const k_used[] = {"num_experts_per_tok", "top_k_experts", NULL};
    static const char *const k_ffe[] = {"expert_intermediate_size", "moe_intermediate_size", NULL};
    if ((s = int_any(c, k_exp, 0, 0, 512, &g->n_expert, err)) || (s = int_any(c, k_used, 0, 0, 512, &g->n_expert_used, err)) ||
        (s = int_any(c, k_ffe, 0, 0, CV_MAX_DIM, &g->n_ff_exp, err)))
        return s;
    if (g->hd_swa % 2 || g->hd_full % 2)
        return nx_fail(err, NX_ERR_FORMAT, "%s: head_dim %d and global_head_dim %d must be even", c->path, g->hd_swa,
                       g->hd_full);
    const cJSON *v = nx_cv_cfg_get(c, "use_double_wide_mlp");
    g->double_wide = cJSON_IsTrue(v);
    v = nx_cv_cfg_get(c, "tie_word_embeddings");
    g->tied = !v || cJSON_IsTrue(v);
    if ((s = num(c, nx_cv_cfg_get(c, "rms_norm_eps"), "rms_norm_eps", false, 1e-6, &g->eps, err))) return s;
    v = nx_cv_cfg_get(c, "final_logit_softcapping");
    if ((s = num(c, v, "final_logit_softcapping", false, 0.0, &g->softcap, err))) return s;
    g->have_softcap = v && g->softcap != 0.0;   /* llama.cpp writes it when truthy */
    if (assistant) {
        v = nx_cv_cfg_get(c, "use_ordered_embeddings");
        g->have_ordered = cJSON_IsBool(v);
        g->use_ordered = cJSON_IsTrue(v);
    }
    /* layer_types -> the sliding-window pattern */
    const cJSON *lt = nx_cv_cfg_get(c, "layer_types");
    if (!cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != g->n_layer)
        return nx_fail(err, NX_ERR_FORMAT, "%s: 'layer_types' must list the %d layers' attention types", c->path,
                       g->n_layer);
    g->swa = malloc((size_t)g->n_layer);
    if (!g->swa) return nx_fail(err, NX_ERR_NOMEM, "out of memory");
    int il = 0;
    for (const cJSON *e = lt->child; e; e = e->next, il++) {
        const char *t = cJSON_GetStringValue(e);
        if (!t || (strcmp(t, "sliding_attention") && strcmp(t, "full_attention")))
            return nx_fail(err, NX_ERR_FORMAT, "%s: layer_types[%d] must be \"sliding_attention\" or \"full_attention\"",
                           c->path, il);
        g->swa[il] = !strcmp(t, "sliding_attention");
    }
    /* rope_parameters.{full_attention, sliding_attention} (transformers' per-layer-type form); the
     * sliding layers' partial factor: theirs, else rope_parameters' own (llama.cpp reads that), else 1 */
    const cJSON *full = obj_get(c->rope, "full_attention"), *slide = obj_get(c->rope, "sliding_attention");
    if (!cJSON_IsObject(full))
        return nx_fail(err, NX_ERR_FORMAT, "%s: missing 'rope_parameters.full_attention'", c->path);
    const char *rt = cJSON_GetStringValue(obj_get(full, "rope_type"));
    if (!rt || strcmp(rt, "proportional"))
        return nx_fail(err, NX_ERR_UNSUPPORTED, "%s: rope_parameters.full_attention.rope_type is '%s' (only "
                       "\"proportional\" is supported)", c->path, rt ? rt : "(missing)");
    if ((s = num(c, obj_get(full, "rope_theta"), "rope_parameters.full_attention.rope_theta", false, 1e6, &g->theta_full,
                 err)) ||
        (s = num(c, obj_get(full, "partial_rotary_factor"), "rope_parameters.full_attention.partial_rotary_factor", true,
                 0, &g->prf_full, err)) ||
        (s = num(c, obj_get(slide, "partial_rotary_factor") ? obj_get(slide, "partial_rotary_factor")
                                                            : obj_get(c->rope, "partial_rotary_factor"),
                 "partial_rotary_factor", false, 1.0, &g->prf_swa, err)))
        return s;
    g->have_theta_swa = obj_get(slide, "rope_theta") != NULL;
    if (g->have_theta_swa &&
        (s = num(c, obj_get(slide, "rope_theta"), "rope_parameters.sliding_attention.rope_theta", true, 0, &g->theta_swa, err)))
        return s;
    if (!(g->prf_full > 0 && g->prf_full <= 1) || !(g->prf_swa > 0 && g->prf_swa <= 1))
        return nx_fail(err, NX_ERR_FORMAT, "%s: partial_rotary_factor must be in (0, 1]", c->path);
    if (g->n_expert > 0 && (g->n_expert_used < 1 || g->n_expert_used > g->n_expert || g->n_ff_exp < 1))
        return nx_fail(err, NX_ERR_FORMAT, "%s: %d experts need top_k_experts in [1, %d] and expert_intermediate_size",
                       c->path, g->n_expert, g->n_expert);
    if (assistant && g->n_centroids > 0 && (g->n_vocab % g->n_centroids || g->centroid_top_k < 1 ||
                                            g->centroid_top_k > g->n_centroids))
        return nx_fail(err, NX_ERR_FORMAT, "%s: num_centroids %d must divide vocab_size %d and centroid_intermediate_top_k "
                       "%d lie in [1, num_centroids]", c->path, g->n_centroids, g->n_vocab, g->centroid_top_k);
    return NX_OK;
}

void nx_cv_g4_free(cv_g4 *g) {
    free(g->swa);
    g->swa = NULL;
}

/* ===== Names ===== */

/* Per layer: HF suffix -> GGUF suffix (llama.cpp's tensor map for MODEL_ARCH.GEMMA4). The MoE
 * tensors are also accepted under `mlp.` (where some transformers versions keep them). */
static const struct { const char *hf, *gguf; } G4_LAYER[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"self_attn.q_norm.weight", "attn_q_norm.weight"},
    {"self_attn.k_norm.weight", "attn_k_norm.weight"},
    {"post_attention_layernorm.weight", "post_attention_norm.weight"},
    {"pre_feedforward_layernorm.weight", "ffn_norm.weight"},
    {"post_feedforward_layernorm.weight", "post_ffw_norm.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
    {"layer_scalar", "layer_output_scale.weight"},
    {"per_layer_input_gate.weight", "inp_gate.weight"},
    {"per_layer_projection.weight", "proj.weight"},
    {"post_per_layer_input_norm.weight", "post_norm.weight"},
    {"router.proj.weight", "ffn_gate_inp.weight"},
    {"router.scale", "ffn_gate_inp.scale"},
    {"router.per_expert_scale", "ffn_down_exps.scale"},
    {"experts.gate_up_proj", "ffn_gate_up_exps.weight"},
    {"experts.down_proj", "ffn_down_exps.weight"},
    {"pre_feedforward_layernorm_2.weight", "pre_ffw_norm_2.weight"},
    {"post_feedforward_layernorm_1.weight", "post_ffw_norm_1.weight"},
    {"post_feedforward_layernorm_2.weight", "post_ffw_norm_2.weight"},
};

static const struct { const char *hf, *gguf; bool asst; } G4_TOP[] = {
    {"model.embed_tokens.weight", "token_embd.weight", false},
    {"model.norm.weight", "output_norm.weight", false},
    {"model.embed_tokens_per_layer.weight", "per_layer_token_embd.weight", false},
    {"model.per_layer_model_projection.weight", "per_layer_model_proj.weight", false},
    {"model.per_layer_projection_norm.weight", "per_layer_proj_norm.weight", false},
    {"pre_projection.weight", "nextn.pre_projection.weight", true},
    {"post_projection.weight", "nextn.post_projection.weight", true},
    {"masked_embedding.centroids.weight", "masked_embd_centroids.weight", true},
    {"masked_embedding.token_ordering", "masked_embd_ordering", true},
};

static bool skipped(const char *nm) {
    /* the vision / audio towers and their projectors are not the text model */
    static const char *const parts[] = {"vision_tower.", "embed_vision.", "audio_tower.", "embed_audio.",
                                        "multi_modal_projector.", NULL};
    for (const char *const *p = parts; *p; p++)
        if (strstr(nm, *p)) return true;
    return nx_cv_ends_with(nm, ".rotary_emb.inv_freq");
}

/* Expected HF shape of a mapped tensor, where the config fixes it (else leaves it unchecked). */
static bool shape_ok(const cv_g4 *g, const char *gguf, int il, const nx_st_tensor *s, char *why, size_t cap) {
    int64_t want[3] = {0, 0, 0};
    int nd = 0;
    const int E = g->n_embd, hd = il >= 0 ? (g->swa[il] ? g->hd_swa : g->hd_full) : 0;
    if (!strcmp(gguf, "token_embd.weight")) { want[0] = g->n_vocab; want[1] = E; nd = 2; }
    else if (!strcmp(gguf, "output_norm.weight")) { want[0] = E; nd = 1; }
    else if (!strcmp(gguf, "nextn.pre_projection.weight")) { want[0] = E; want[1] = 2LL * g->backbone; nd = 2; }
    else if (!strcmp(gguf, "nextn.post_projection.weight")) { want[0] = g->backbone; want[1] = E; nd = 2; }
    else if (!strcmp(gguf, "masked_embd_ordering")) { want[0] = g->n_vocab; nd = 1; }
    else if (!strcmp(gguf, "attn_q.weight")) { want[0] = (int64_t)g->n_head * hd; want[1] = E; nd = 2; }
    else if (!strcmp(gguf, "attn_q_norm.weight") || !strcmp(gguf, "attn_k_norm.weight")) { want[0] = hd; nd = 1; }
    else if (!strcmp(gguf, "layer_output_scale.weight")) { want[0] = 1; nd = 1; }
    if (!nd) return true;
    bool ok = s->n_dims == nd;
    for (int d = 0; d < nd && ok; d++) ok = s->shape[d] == want[d];
    if (!ok) {
        if (nd == 1) snprintf(why, cap, "shape should be (%lld) from config.json", (long long)want[0]);
        else snprintf(why, cap, "shape should be (%lld, %lld) from config.json", (long long)want[0], (long long)want[1]);
    }
    return ok;
}

int nx_cv_g4_map(const cv_g4 *g, const nx_st_tensor *s, cv_tensor *t, char *why, size_t why_cap) {
    char nm[256];
    const char *in = s->name;
    if (strlen(in) >= sizeof nm - 16) { snprintf(why, why_cap, "name too long"); return -1; }
    if (skipped(in)) return 0;
    /* Gemma4ForConditionalGeneration nests the text model; the assistant's heads may sit under model. */
    if (!strncmp(in, "model.language_model.", 21)) snprintf(nm, sizeof nm, "model.%s", in + 21);
    else snprintf(nm, sizeof nm, "%s", in);
    if (!strcmp(nm, "lm_head.weight")) {
        if (g->tied) return 0;   /* tied to the embedding: the same values */
        snprintf(t->name, sizeof t->name, "output.weight");
        t->order = INT32_MAX;
        return 1;
    }
    const char *top = nm;
    if (!strncmp(nm, "model.", 6) && strncmp(nm, "model.layers.", 13) &&
        (strstr(nm, "projection.weight") || strstr(nm, "masked_embedding.")) && strncmp(nm, "model.per_layer", 15))
        top = nm + 6;   /* model.pre_projection.weight -> pre_projection.weight */
    for (size_t i = 0; i < sizeof G4_TOP / sizeof G4_TOP[0]; i++)
        if (!strcmp(top, G4_TOP[i].hf)) {
            if (G4_TOP[i].asst && !g->assistant) {
                snprintf(why, why_cap, "an assistant tensor in a target checkpoint");
                return -1;
            }
            snprintf(t->name, sizeof t->name, "%s", G4_TOP[i].gguf);
            t->order = !strcmp(G4_TOP[i].gguf, "token_embd.weight") ? -1 : INT32_MAX;
            t->ints = !strcmp(G4_TOP[i].gguf, "masked_embd_ordering");
            if (!shape_ok(g, t->name, -1, s, why, why_cap)) return -1;
            return 1;
        }
    if (strncmp(nm, "model.layers.", 13)) {
        snprintf(why, why_cap, "no GGUF name for it");
        return -1;
    }
    char *end;
    long il = strtol(nm + 13, &end, 10);
    if (end == nm + 13 || *end != '.' || il < 0 || il >= g->n_layer) {
        snprintf(why, why_cap, "layer index outside num_hidden_layers %d", g->n_layer);
        return -1;
    }
    const char *rest = end + 1;
    if (!strncmp(rest, "mlp.", 4) && (strstr(rest, "router.") || strstr(rest, "experts.") || strstr(rest, "layernorm_")))
        rest += 4;
    for (size_t i = 0; i < sizeof G4_LAYER / sizeof G4_LAYER[0]; i++) {
        const char *h = G4_LAYER[i].hf;
        size_t hl = strlen(h);
        /* experts.* may carry a .weight suffix (llama.cpp appends one) */
        if (strcmp(rest, h) && !(strncmp(rest, h, hl) == 0 && !strcmp(rest + hl, ".weight") && !nx_cv_ends_with(h, ".weight")))
            continue;
        if ((strstr(h, "router.") || strstr(h, "experts.") || strstr(h, "layernorm_")) && g->n_expert <= 0) {
            snprintf(why, why_cap, "a MoE tensor but config.json gives no experts");
            return -1;
        }
        snprintf(t->name, sizeof t->name, "blk.%ld.%s", il, G4_LAYER[i].gguf);
        t->order = (int)il;
        if (!shape_ok(g, G4_LAYER[i].gguf, (int)il, s, why, why_cap)) return -1;
        return 1;
    }
    snprintf(why, why_cap, "no GGUF name for it");
    return -1;
}

/* rope_freqs.weight: the full layers rotate int(global_head_dim * partial_rotary_factor / 2)
 * pairs; a 1e30 factor leaves the others still under ggml's NEOX RoPE ("proportional" RoPE). */
nx_status nx_cv_g4_extra(cv_ctx *cx, nx_error *err) {
    const cv_g4 *g = &cx->g4;
    int half = g->hd_full / 2, n_rot = (int)(g->hd_full * g->prf_full / 2);
    cv_tensor *t = &cx->t[cx->n];
    *t = (cv_tensor){.src = -1, .cx = cx, .order = -2, .n_dims = 1, .ne = {half, 1, 1, 1}, .type = NX_TYPE_F32};
    snprintf(t->name, sizeof t->name, "rope_freqs.weight");
    t->gen = malloc((size_t)half * sizeof *t->gen);
    if (!t->gen) return nx_fail(err, NX_ERR_NOMEM, "out of memory");
    for (int i = 0; i < half; i++) t->gen[i] = i < n_rot ? 1.0f : 1e30f;
    cx->n++;
    return NX_OK;
}

/* ===== Metadata ===== */

const char *const nx_cv_g4_visible_tokens[] = {"<|channel>", "<channel|>", "<|tool_call>", "<tool_call|>",
                                               "<|tool_response>", "<tool_response|>", "<|\"|>", NULL};

/* The keys of llama.cpp's TextModel -> Gemma3Model -> Gemma4Model (-> Gemma4AssistantModel)
 * set_gguf_parameters, with the values they end with. */
nx_status nx_cv_g4_kv(nx_gguf_writer *w, const cv_g4 *g, const char *name, nx_type outtype) {
    const char *A = g->assistant ? "gemma4-assistant" : "gemma4";
    const int L = g->n_layer;
    char key[160];
    nx_status s = nx_gguf_set_str(w, "general.architecture", A);
#define U(k, v) if (!s) s = nx_cv_kv_u32(w, A, k, v)
#define F(k, v) if (!s) s = nx_cv_kv_f32(w, A, k, v)
#define ARR(k, type, p, n) if (!s) { snprintf(key, sizeof key, "%s.%s", A, k); s = nx_gguf_set_arr(w, key, type, p, n); }
    if (!s) s = nx_gguf_set_str(w, "general.type", "model");
    if (!s) s = nx_gguf_set_str(w, "general.name", name);
    int32_t *arr = malloc((size_t)L * sizeof *arr);
    if (!arr) return NX_ERR_NOMEM;
    U("block_count", L);
    U("context_length", g->n_ctx);
    U("embedding_length", g->n_embd);
    int first_shared = L - g->n_shared;
    if (g->double_wide) {
        for (int il = 0; il < L; il++) arr[il] = il < first_shared ? g->n_ff : 2 * g->n_ff;
        ARR("feed_forward_length", NX_GGUF_I32, arr, (uint64_t)L);
    } else {
        U("feed_forward_length", g->n_ff);
    }
    U("attention.head_count", g->n_head);
    if (g->n_kv_full > 0) {
        for (int il = 0; il < L; il++) arr[il] = g->swa[il] ? g->n_kv_swa : g->n_kv_full;
        ARR("attention.head_count_kv", NX_GGUF_I32, arr, (uint64_t)L);
    } else {
        U("attention.head_count_kv", g->n_kv_swa);
    }
    F("rope.freq_base", g->theta_full);
    if (g->have_theta_swa) F("rope.freq_base_swa", g->theta_swa);
    F("attention.layer_norm_rms_epsilon", g->eps);
    if (g->n_expert > 0) {
        U("expert_count", g->n_expert);
        U("expert_used_count", g->n_expert_used);
    }
    if (!s) s = nx_gguf_set_u32(w, "general.file_type", (uint32_t)nx_cv_ftype_of(outtype));
    U("attention.key_length", g->hd_full);
    U("attention.value_length", g->hd_full);
    if (g->have_softcap) F("final_logit_softcapping", g->softcap);
    U("attention.sliding_window", g->n_swa);
    U("attention.shared_kv_layers", g->n_shared);
    U("embedding_length_per_layer_input", g->P);
    ARR("attention.sliding_window_pattern", NX_GGUF_BOOL, g->swa, (uint64_t)L);
    U("attention.key_length_swa", g->hd_swa);
    U("attention.value_length_swa", g->hd_swa);
    if (g->n_ff_exp > 0) U("expert_feed_forward_length", g->n_ff_exp);
    U("rope.dimension_count", g->hd_full);
    U("rope.dimension_count_swa", (int64_t)(g->hd_swa * g->prf_swa));
    if (g->assistant) {
        U("embedding_length_out", g->backbone);
        U("nextn_predict_layers", L);
        if (g->n_centroids > 0) {   /* the ordered-embeddings head (nextn / S000 keys) */
            U("n_centroids", g->n_centroids);
            U("centroid_top_k", g->centroid_top_k);
            if (!s) {
                snprintf(key, sizeof key, "%s.use_ordered_embeddings", A);
                s = nx_gguf_set_bool(w, key, g->have_ordered ? g->use_ordered : true);
            }
        }
    }
    if (!s) s = nx_gguf_set_u32(w, "general.quantization_version", 2);
#undef U
#undef F
#undef ARR
    free(arr);
    return s;
}
