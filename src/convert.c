/*
 * convert.c — `nextn convert`: a Hugging Face checkpoint directory -> GGUF (contract in convert.h).
 *
 * Three steps: read the config into a plan of hparams; map every checkpoint tensor to its GGUF
 * name, shape, type and value transform (one cv_tensor each); register each with the GGUF writer
 * as a streamed tensor whose stream callback reads, transforms, converts and writes it chunk by
 * chunk (gemma4 names and keys: convert_gemma4.c). The metadata keys
 * go in first, then the tokenizer's.
 */
#include "convert.h"
#include "convert_impl.h"
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "core/io.h"
#include "gguf.h"
#include "quant/quant.h"
#include "safetensors.h"
#include "tokenizer.h"

/* ===== Config ===== */

/* text_config first (llama.cpp merges it over the top level), then the top level. */
const cJSON *nx_cv_cfg_get(const cv_config *c, const char *key) {
    const cJSON *v = c->text_cfg ? cJSON_GetObjectItemCaseSensitive(c->text_cfg, key) : NULL;
    if (!v || cJSON_IsNull(v)) v = cJSON_GetObjectItemCaseSensitive(c->root, key);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

nx_status nx_cv_cfg_int(const cv_config *c, const char *key, bool required, int def, int lo, int hi, int *out,
                         nx_error *err) {
    const cJSON *v = nx_cv_cfg_get(c, key);
    if (!v) {
        if (required) return nx_fail(err, NX_ERR_FORMAT, "%s: missing '%s'", c->path, key);
        *out = def;
        return NX_OK;
    }
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < lo || v->valuedouble > hi)
        return nx_fail(err, NX_ERR_FORMAT, "%s: '%s' must be an integer in [%d, %d]", c->path, key, lo, hi);
    *out = (int)v->valuedouble;
    return NX_OK;
}

bool nx_cv_is_file(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

nx_status nx_cv_read_json(const char *path, char **text, cJSON **root, nx_error *err) {
    size_t len = 0;
    nx_status s = nx_read_file(path, (size_t)64 << 20, text, &len, err);
    if (s) return s;
    *root = cJSON_ParseWithLength(*text, len);
    if (!*root) return nx_fail(err, NX_ERR_FORMAT, "%s: not valid JSON", path);
    return NX_OK;
}


static nx_status read_hparams(const cv_config *c, cv_hparams *hp, nx_error *err) {
    nx_status s;
#define I(key, req, def, lo, hi, dst) if ((s = nx_cv_cfg_int(c, key, req, def, lo, hi, dst, err))) return s
    I("num_hidden_layers", true, 0, 1, 4096, &hp->n_layer);
    I("mtp_num_hidden_layers", false, 0, 0, 64, &hp->n_mtp);
    I("hidden_size", true, 0, 1, CV_MAX_DIM, &hp->n_embd);
    I("intermediate_size", !hp->moe, 0, 0, CV_MAX_DIM, &hp->n_ff);
    if (hp->moe) {
        I("num_experts", true, 0, 1, 512, &hp->n_expert);
        I("num_experts_per_tok", true, 0, 1, hp->n_expert, &hp->n_expert_used);
        I("moe_intermediate_size", true, 0, 1, CV_MAX_DIM, &hp->n_ff_exp);
        I("shared_expert_intermediate_size", false, 0, 0, CV_MAX_DIM, &hp->n_ff_shexp);
    }
    I("num_attention_heads", true, 0, 1, CV_MAX_DIM, &hp->n_head);
    I("num_key_value_heads", false, hp->n_head, 1, CV_MAX_DIM, &hp->n_head_kv);
    hp->head_dim_given = nx_cv_cfg_get(c, "head_dim") != NULL;
    I("head_dim", false, hp->n_embd / hp->n_head, 1, CV_MAX_DIM, &hp->head_dim);
    I("vocab_size", true, 0, 1, 1 << 24, &hp->n_vocab);
    I("max_position_embeddings", false, 0, 0, INT32_MAX, &hp->n_ctx);
    I("full_attention_interval", false, 4, 1, 4096, &hp->interval);
    I("linear_conv_kernel_dim", true, 0, 1, 64, &hp->d_conv);
    I("linear_key_head_dim", true, 0, 1, CV_MAX_DIM, &hp->dk);
    I("linear_value_head_dim", true, 0, 1, CV_MAX_DIM, &hp->dv);
    I("linear_num_key_heads", true, 0, 1, CV_MAX_DIM, &hp->nk);
    I("linear_num_value_heads", true, 0, 1, CV_MAX_DIM, &hp->nv);
#undef I
    if (hp->nv % hp->nk)
        return nx_fail(err, NX_ERR_FORMAT, "%s: linear_num_value_heads %d is not a multiple of linear_num_key_heads %d",
                       c->path, hp->nv, hp->nk);
    const cJSON *eps = nx_cv_cfg_get(c, "rms_norm_eps");
    if (!cJSON_IsNumber(eps)) return nx_fail(err, NX_ERR_FORMAT, "%s: missing 'rms_norm_eps'", c->path);
    hp->eps = eps->valuedouble;
    /* rope: rope_parameters (new transformers) or rope_scaling, rope_theta at the top as fallback */
    const cJSON *rt = c->rope ? cJSON_GetObjectItemCaseSensitive(c->rope, "rope_theta") : NULL;
    if (!cJSON_IsNumber(rt)) rt = nx_cv_cfg_get(c, "rope_theta");
    hp->rope_theta = cJSON_IsNumber(rt) ? rt->valuedouble : 0.0;
    const cJSON *prf = nx_cv_cfg_get(c, "partial_rotary_factor");
    if (!cJSON_IsNumber(prf) && c->rope) prf = cJSON_GetObjectItemCaseSensitive(c->rope, "partial_rotary_factor");
    double factor = cJSON_IsNumber(prf) ? prf->valuedouble : 0.25;
    if (!(factor > 0 && factor <= 1)) return nx_fail(err, NX_ERR_FORMAT, "%s: partial_rotary_factor %g is not in (0, 1]", c->path, factor);
    hp->n_rot = (int)(hp->head_dim * factor);
    /* M-RoPE sections, padded to 4; llama.cpp writes [11, 11, 10, 0] when the checkpoint has none */
    static const int def_sec[4] = {11, 11, 10, 0};
    memcpy(hp->sections, def_sec, sizeof def_sec);
    const cJSON *ms = c->rope ? cJSON_GetObjectItemCaseSensitive(c->rope, "mrope_section") : NULL;
    if (ms) {
        if (!cJSON_IsArray(ms) || cJSON_GetArraySize(ms) > 4)
            return nx_fail(err, NX_ERR_FORMAT, "%s: mrope_section must be an array of at most 4 integers", c->path);
        memset(hp->sections, 0, sizeof hp->sections);
        int k = 0;
        for (const cJSON *e = ms->child; e; e = e->next, k++) {
            if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble > CV_MAX_DIM)
                return nx_fail(err, NX_ERR_FORMAT, "%s: mrope_section element %d is not a small integer", c->path, k);
            hp->sections[k] = (int)e->valuedouble;
        }
    }
    hp->rope_type = c->rope ? cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c->rope, "rope_type")) : NULL;
    if (!hp->rope_type && c->rope) hp->rope_type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c->rope, "type"));
    const cJSON *rf = c->rope ? cJSON_GetObjectItemCaseSensitive(c->rope, "factor") : NULL;
    hp->rope_factor = cJSON_IsNumber(rf) ? rf->valuedouble : 0.0;
    return NX_OK;
}

/* ===== Tensor plan ===== */

bool nx_cv_ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

/* The per-layer HF -> GGUF names (llama.cpp's tensor map for qwen35), and the V-head reorder each
 * needs (hd 0 = the value head dim, 1 = one value per head). */
static const struct { const char *hf, *gguf; int vmode; int v_at; int hd1; } LAYER_MAP[] = {
    {"input_layernorm.weight", "attn_norm.weight", V_NONE, 0, 0},
    {"post_attention_layernorm.weight", "post_attention_norm.weight", V_NONE, 0, 0},
    {"self_attn.q_proj.weight", "attn_q.weight", V_NONE, 0, 0},
    {"self_attn.k_proj.weight", "attn_k.weight", V_NONE, 0, 0},
    {"self_attn.v_proj.weight", "attn_v.weight", V_NONE, 0, 0},
    {"self_attn.o_proj.weight", "attn_output.weight", V_NONE, 0, 0},
    {"self_attn.q_norm.weight", "attn_q_norm.weight", V_NONE, 0, 0},
    {"self_attn.k_norm.weight", "attn_k_norm.weight", V_NONE, 0, 0},
    {"linear_attn.in_proj_qkv.weight", "attn_qkv.weight", V_ROWS, 1, 0},
    {"linear_attn.in_proj_z.weight", "attn_gate.weight", V_ROWS, 0, 0},
    {"linear_attn.in_proj_b.weight", "ssm_beta.weight", V_ROWS, 0, 1},
    {"linear_attn.in_proj_a.weight", "ssm_alpha.weight", V_ROWS, 0, 1},
    {"linear_attn.conv1d.weight", "ssm_conv1d.weight", V_ROWS, 1, 0},
    {"linear_attn.dt_bias", "ssm_dt.bias", V_ROWS, 0, 1},
    {"linear_attn.A_log", "ssm_a", V_ROWS, 0, 1},
    {"linear_attn.norm.weight", "ssm_norm.weight", V_NONE, 0, 0},
    {"linear_attn.out_proj.weight", "ssm_out.weight", V_COLS, 0, 0},
    {"mlp.gate_proj.weight", "ffn_gate.weight", V_NONE, 0, 0},
    {"mlp.up_proj.weight", "ffn_up.weight", V_NONE, 0, 0},
    {"mlp.down_proj.weight", "ffn_down.weight", V_NONE, 0, 0},
    {"mlp.gate.weight", "ffn_gate_inp.weight", V_NONE, 0, 0},
    {"mlp.shared_expert.gate_proj.weight", "ffn_gate_shexp.weight", V_NONE, 0, 0},
    {"mlp.shared_expert.up_proj.weight", "ffn_up_shexp.weight", V_NONE, 0, 0},
    {"mlp.shared_expert.down_proj.weight", "ffn_down_shexp.weight", V_NONE, 0, 0},
    {"mlp.shared_expert_gate.weight", "ffn_gate_inp_shexp.weight", V_NONE, 0, 0},
    {"mlp.experts.down_proj", "ffn_down_exps.weight", V_NONE, 0, 0},
    {"mlp.experts.down_proj.weight", "ffn_down_exps.weight", V_NONE, 0, 0},
    /* the MTP block's own tensors, after the mtp.* -> model.layers.{n} remap */
    {"eh_proj.weight", "nextn.eh_proj.weight", V_NONE, 0, 0},
    {"enorm.weight", "nextn.enorm.weight", V_NONE, 0, 0},
    {"hnorm.weight", "nextn.hnorm.weight", V_NONE, 0, 0},
    {"shared_head.norm.weight", "nextn.shared_head_norm.weight", V_NONE, 0, 0},
};

/* Skip (return 0), map (1) or fail (-1) one checkpoint name. hf[] receives the remapped HF name
 * (model.layers.N.*) the norm rule looks at. */
static int map_name(const cv_hparams *hp, const char *in, char *hf, size_t hf_cap, cv_tensor *t, char *why,
                    size_t why_cap) {
    char nm[256];
    if (strlen(in) >= sizeof nm - 16) { snprintf(why, why_cap, "name too long"); return -1; }
    /* the text model of Qwen3_5ForConditionalGeneration; vision tower and projector are not ours */
    if (!strncmp(in, "model.language_model.", 21)) snprintf(nm, sizeof nm, "model.%s", in + 21);
    else if (!strncmp(in, "model.mtp.", 10)) snprintf(nm, sizeof nm, "%s", in + 6);
    else snprintf(nm, sizeof nm, "%s", in);
    if (strstr(nm, "visual.") || strstr(nm, "vision_") || nx_cv_ends_with(nm, ".rotary_emb.inv_freq")) return 0;
    /* mtp.* -> the NextN layer (llama.cpp's _Qwen35MtpMixin) */
    if (!strncmp(nm, "mtp.", 4)) {
        const char *rest = nm + 4;
        char tmp[256];
        static const struct { const char *hf, *to; } R[] = {
            {"fc.", "eh_proj."}, {"pre_fc_norm_embedding.", "enorm."}, {"pre_fc_norm_hidden.", "hnorm."},
            {"norm.", "shared_head.norm."},
        };
        if (!strncmp(rest, "layers.", 7)) {
            char *end;
            long k = strtol(rest + 7, &end, 10);
            if (end == rest + 7 || *end != '.' || k < 0 || k >= hp->n_mtp) {
                snprintf(why, why_cap, "MTP layer index outside mtp_num_hidden_layers %d", hp->n_mtp);
                return -1;
            }
            snprintf(tmp, sizeof tmp, "model.layers.%ld.%s", hp->n_layer + k, end + 1);
        } else {
            size_t i = 0;
            for (; i < sizeof R / sizeof R[0]; i++)
                if (!strncmp(rest, R[i].hf, strlen(R[i].hf))) break;
            if (i == sizeof R / sizeof R[0] || hp->n_mtp < 1) {
                snprintf(why, why_cap, hp->n_mtp < 1 ? "MTP tensor but mtp_num_hidden_layers is 0" : "unknown MTP tensor");
                return -1;
            }
            snprintf(tmp, sizeof tmp, "model.layers.%d.%s%s", hp->n_layer, R[i].to, rest + strlen(R[i].hf));
        }
        snprintf(nm, sizeof nm, "%s", tmp);
    }
    snprintf(hf, hf_cap, "%s", nm);
    t->order = INT32_MAX;
    if (!strcmp(nm, "model.embed_tokens.weight")) { snprintf(t->name, sizeof t->name, "token_embd.weight"); t->order = -1; }
    else if (!strcmp(nm, "model.norm.weight")) snprintf(t->name, sizeof t->name, "output_norm.weight");
    else if (!strcmp(nm, "lm_head.weight")) snprintf(t->name, sizeof t->name, "output.weight");
    else if (!strncmp(nm, "model.layers.", 13)) {
        char *end;
        long il = strtol(nm + 13, &end, 10);
        if (end == nm + 13 || *end != '.' || il < 0 || il >= hp->n_layer + hp->n_mtp) {
            snprintf(why, why_cap, "layer index outside num_hidden_layers + mtp_num_hidden_layers");
            return -1;
        }
        const char *rest = end + 1;
        size_t i = 0;
        for (; i < sizeof LAYER_MAP / sizeof LAYER_MAP[0]; i++)
            if (!strcmp(rest, LAYER_MAP[i].hf)) break;
        if (i == sizeof LAYER_MAP / sizeof LAYER_MAP[0]) {
            /* experts: one per tensor (stacked later) or gate_up fused (split later) */
            int x = -1;
            char proj[16] = "";
            if (hp->moe && (sscanf(rest, "mlp.experts.%d.%15[a-z_].weight", &x, proj) == 2 ||
                            !strcmp(rest, "mlp.experts.gate_up_proj") || !strcmp(rest, "mlp.experts.gate_up_proj.weight"))) {
                t->order = (int)il;
                t->expert = x;
                snprintf(t->name, sizeof t->name, "blk.%ld.%s", il, x < 0 ? "gate_up" : proj);
                return 2;
            }
            snprintf(why, why_cap, "no GGUF name for it%s", hp->moe ? "" : " (a MoE tensor in a dense model?)");
            return -1;
        }
        if (!strncmp(LAYER_MAP[i].gguf, "nextn.", 6) && il < hp->n_layer) {
            snprintf(why, why_cap, "NextN tensor on a trunk layer");
            return -1;
        }
        snprintf(t->name, sizeof t->name, "blk.%ld.%s", il, LAYER_MAP[i].gguf);
        t->order = (int)il;
        if (hp->nk != hp->nv && LAYER_MAP[i].vmode != V_NONE) {
            t->vmode = LAYER_MAP[i].vmode;
            t->v_off = LAYER_MAP[i].v_at ? 2LL * hp->nk * hp->dk : 0;
            t->v_hd = LAYER_MAP[i].hd1 ? 1 : hp->dv;
        }
        t->negexp = nx_cv_ends_with(rest, "A_log");
    } else {
        snprintf(why, why_cap, "no GGUF name for it");
        return -1;
    }
    /* llama.cpp: every "*norm.weight" but the DeltaNet gated norm holds w where the model uses 1 + w */
    t->plus1 = nx_cv_ends_with(nm, "norm.weight") && !nx_cv_ends_with(nm, "linear_attn.norm.weight");
    return 1;
}

nx_type nx_cv_pick_type(const cv_tensor *t, nx_type out) {
    const char *n = t->name;
    if (t->n_dims <= 1 || nx_cv_ends_with(n, "_norm.weight") || !nx_cv_ends_with(n, ".weight") || strstr(n, "ssm_conv1d") ||
        strstr(n, "ffn_gate_inp"))
        return NX_TYPE_F32;
    if (out == NX_TYPE_Q8_0 && t->ne[0] % 32) return NX_TYPE_F16;   /* llama.cpp's QuantError fallback */
    return out;
}

/* ===== Streaming fill ===== */

/* Grouped [nk][r][hd] -> tiled [r][nk][hd] over `count` blocks of `stride` floats each. */
static void reorder_blocks(float *p, float *tmp, int64_t nk, int64_t r, int64_t hd, int64_t stride) {
    for (int64_t j = 0; j < r; j++)
        for (int64_t k = 0; k < nk; k++)
            memcpy(tmp + ((j * nk + k) * hd) * stride, p + ((k * r + j) * hd) * stride, (size_t)(hd * stride) * sizeof *p);
    memcpy(p, tmp, (size_t)(nk * r * hd * stride) * sizeof *p);
}

/* Rows [row, row + nr) of f quantized into q and handed to the writer. */
static nx_status emit_rows(const cv_tensor *t, const float *f, int64_t nr, char *q, size_t rs, int64_t *row,
                           nx_gguf_out *out, nx_error *err) {
    const int64_t ne0 = t->ne[0];
    for (int64_t i = 0; i < nr; i++)
        if (nx_quantize_row(t->type, f + i * ne0, q + (size_t)i * rs, ne0) != rs)
            return nx_fail(err, NX_ERR_FORMAT, "%s: row %lld cannot be stored as %s (a NaN or infinity?)", t->name,
                           (long long)(*row + i), nx_type_name(t->type));
    *row += nr;
    return nx_gguf_out_write(out, q, (size_t)nr * rs, err);
}

/* The writer's stream callback: the tensor is read, transformed, converted and written in chunks
 * of about CV_CHUNK values, so memory stays at two chunk buffers whatever the tensor's size
 * (transformed 1-D tensors and generated ones are small and are prepared whole first). */
static nx_status cv_stream(void *user, const char *name, nx_gguf_out *out, size_t nbytes, nx_error *err) {
    cv_tensor *t = user;
    cv_ctx *cx = t->cx;
    const nx_st_tensor *src = t->src >= 0 ? nx_st_tensor_at(cx->st, t->src) : NULL;
    if (cx->o->progress)
        cx->o->progress(cx->o->user, cx->done++, cx->n, name, src ? nx_st_dtype_name(src->dtype) : "generated", t->type,
                        t->n_dims, t->ne);
    int64_t ne0 = t->ne[0], n = 1;
    for (int d = 0; d < t->n_dims; d++) n *= t->ne[d];
    int64_t nrows = ne0 ? n / ne0 : 0;
    size_t rs = nx_row_size(t->type, ne0);
    if ((size_t)nrows * rs != nbytes) return nx_fail(err, NX_ERR_INTERNAL, "%s: size mismatch", name);
    if (t->ints) {   /* a token permutation: I32, as small as the vocabulary */
        int32_t *v = malloc((size_t)(n > 0 ? n : 1) * sizeof *v);
        if (!v) return nx_fail(err, NX_ERR_NOMEM, "out of memory converting %s", name);
        nx_status s = nx_st_read_i32(cx->st, t->src, v, err);
        if (!s) s = nx_gguf_out_write(out, v, (size_t)n * sizeof *v, err);
        free(v);
        return s;
    }
    bool whole = t->gen || (!t->segs && (t->plus1 || t->negexp || t->vmode == V_ROWS));
    int64_t chunk_rows = CV_CHUNK / (ne0 ? ne0 : 1) > 0 ? CV_CHUNK / ne0 : 1;
    if (chunk_rows > nrows) chunk_rows = nrows;
    if (chunk_rows < 1) chunk_rows = 1;
    float *f = malloc((size_t)(whole ? (n > 0 ? n : 1) : chunk_rows * ne0) * sizeof *f);
    char *q = malloc((size_t)chunk_rows * rs);
    float *ctmp = NULL;   /* one row, for the column reorder of ssm_out */
    if (!whole && t->vmode == V_COLS) ctmp = malloc((size_t)ne0 * sizeof *ctmp);
    nx_status s = NX_OK;
    if (!f || !q || (!whole && t->vmode == V_COLS && !ctmp)) {
        s = nx_fail(err, NX_ERR_NOMEM, "out of memory converting %s (%lld values)", name, (long long)n);
        goto done;
    }
    int64_t row = 0;
    if (whole) {
        if (t->gen) {
            memcpy(f, t->gen, (size_t)n * sizeof *f);
        } else if (t->plus1 || t->negexp) {
            /* small 1-D tensors: the arithmetic in double, one rounding */
            double *d = malloc((size_t)n * sizeof *d);
            if (!d) { s = nx_fail(err, NX_ERR_NOMEM, "out of memory converting %s", name); goto done; }
            s = nx_st_read_f64(cx->st, t->src, d, err);
            for (int64_t i = 0; i < n && !s; i++) f[i] = (float)(t->plus1 ? d[i] + 1.0 : -exp(d[i]));
            free(d);
        } else {
            s = nx_st_read_f32(cx->st, t->src, f, err);
        }
        if (!s && !t->gen && t->vmode != V_NONE) {
            const cv_hparams *hp = &cx->hp;
            int64_t nk = hp->nk, r = hp->nv / hp->nk, hd = t->v_hd;
            int64_t rows = src->n_dims ? src->shape[0] : 1, cols = rows ? n / rows : 0;
            float *tmp = malloc((size_t)(t->vmode == V_ROWS ? nk * r * hd * cols : nk * r * hd) * sizeof *tmp);
            if (!tmp) { s = nx_fail(err, NX_ERR_NOMEM, "out of memory converting %s", name); goto done; }
            if (t->vmode == V_ROWS) reorder_blocks(f + t->v_off * cols, tmp, nk, r, hd, cols);
            else for (int64_t i = 0; i < rows; i++) reorder_blocks(f + i * cols, tmp, nk, r, hd, 1);
            free(tmp);
        }
        for (int64_t r0 = 0; r0 < nrows && !s; r0 += chunk_rows) {
            int64_t nr = nrows - r0 < chunk_rows ? nrows - r0 : chunk_rows;
            s = emit_rows(t, f + r0 * ne0, nr, q, rs, &row, out, err);
        }
        goto done;
    }
    cv_seg one = {t->src, 0, n};
    int n_segs = t->segs ? t->n_segs : 1;
    for (int k = 0; k < n_segs && !s; k++) {
        cv_seg sg = t->segs ? t->segs[k] : one;
        for (int64_t off = 0; off < sg.count && !s;) {
            int64_t nv = sg.count - off < chunk_rows * ne0 ? sg.count - off : chunk_rows * ne0;
            int64_t nr = nv / ne0;
            s = nx_st_read_f32_range(cx->st, sg.src, sg.first + off, nv, f, err);
            if (ctmp)
                for (int64_t i = 0; i < nr && !s; i++)
                    reorder_blocks(f + i * ne0, ctmp, cx->hp.nk, cx->hp.nv / cx->hp.nk, t->v_hd, 1);
            if (!s) s = emit_rows(t, f, nr, q, rs, &row, out, err);
            off += nv;
        }
    }
done:
    free(f);
    free(q);
    free(ctmp);
    if (s && s != NX_ERR_FORMAT) return nx_error_prefix(err, "converting %s", name);
    return s;
}

/* ===== Plan ===== */

static int cmp_name(const void *a, const void *b) {
    return strcmp(((const cv_tensor *)a)->name, ((const cv_tensor *)b)->name);
}

static int cmp_tensor(const void *a, const void *b) {
    const cv_tensor *x = a, *y = b;
    if (x->order != y->order) return x->order < y->order ? -1 : 1;
    return x->src < y->src ? -1 : x->src > y->src;
}

/* Expected HF shape checks for the tensors whose transforms index into them. */
static nx_status check_shape(const cv_ctx *cx, const cv_tensor *t, const nx_st_tensor *s, nx_error *err) {
    const cv_hparams *hp = &cx->hp;
    if (t->vmode == V_ROWS) {
        int64_t rows = s->n_dims ? s->shape[0] : 1;
        if (rows != t->v_off + (int64_t)hp->nv * t->v_hd)
            return nx_fail(err, NX_ERR_FORMAT, "tensor '%s' has %lld rows, the config gives %lld", s->name, (long long)rows,
                           (long long)(t->v_off + (int64_t)hp->nv * t->v_hd));
    } else if (t->vmode == V_COLS) {
        if (s->n_dims != 2 || s->shape[1] != (int64_t)hp->nv * hp->dv)
            return nx_fail(err, NX_ERR_FORMAT, "tensor '%s' should have %lld columns", s->name, (long long)hp->nv * hp->dv);
    }
    return NX_OK;
}

/* The V-head row reorder as segments: rows [0, v_off) as they are, then the V blocks of hd rows in
 * tiled order (block j * nk + k from grouped block k * r + j), so it streams like any tensor. */
static nx_status vrows_segments(cv_ctx *cx, cv_tensor *t, const nx_st_tensor *s, nx_error *err) {
    int64_t nk = cx->hp.nk, r = cx->hp.nv / cx->hp.nk, hd = t->v_hd, cols = s->numel / s->shape[0];
    t->segs = calloc((size_t)(nk * r + 1), sizeof *t->segs);
    if (!t->segs) return nx_fail(err, NX_ERR_NOMEM, "out of memory");
    int k0 = 0;
    if (t->v_off) t->segs[k0++] = (cv_seg){t->src, 0, t->v_off * cols};
    for (int64_t j = 0; j < r; j++)
        for (int64_t k = 0; k < nk; k++)
            t->segs[k0++] = (cv_seg){t->src, (t->v_off + (k * r + j) * hd) * cols, hd * cols};
    t->n_segs = k0;
    t->vmode = V_NONE;
    return NX_OK;
}

/* A new output tensor of segments (3-D experts), or the one already named. */
static cv_tensor *seg_tensor(cv_ctx *cx, const char *name, int order, int64_t ne0, int64_t ne1, nx_error *err) {
    /* backwards: a layer's tensors are adjacent in the (sorted) checkpoint, so the match is near the end */
    for (int64_t j = cx->n - 1; j >= 0; j--)
        if (!strcmp(cx->t[j].name, name)) {
            if (!cx->t[j].segs || cx->t[j].ne[0] != ne0 || cx->t[j].ne[1] != ne1) {
                nx_fail(err, NX_ERR_FORMAT, "%s: expert tensors of different shapes, or mixed with a fused one", name);
                return NULL;
            }
            return &cx->t[j];
        }
    int X = cx->hp.n_expert;
    cv_tensor *t = &cx->t[cx->n];
    *t = (cv_tensor){.src = -1, .cx = cx, .order = order, .n_dims = 3, .ne = {ne0, ne1, X, 1}, .n_segs = X};
    snprintf(t->name, sizeof t->name, "%s", name);
    t->segs = calloc((size_t)X, sizeof *t->segs);
    if (!t->segs) { nx_fail(err, NX_ERR_NOMEM, "out of memory"); return NULL; }
    t->type = nx_cv_pick_type(t, cx->outtype);
    cx->n++;
    return t;
}

/* Per-expert projections (mlp.experts.X.{gate,up,down}_proj.weight, stacked into
 * ffn_{gate,up,down}_exps {in, out, n_expert}) and the fused mlp.experts.gate_up_proj
 * (n_expert, 2F, E), split into ffn_gate_exps and ffn_up_exps (llama.cpp's Qwen2MoeModel). */
static nx_status plan_experts(cv_ctx *cx, int64_t i, const nx_st_tensor *s, const char *tag, int x, int order,
                              nx_error *err) {
    int X = cx->hp.n_expert;
    const char *blk_end = strchr(tag + 4, '.');
    int il = order;
    char name[128];
    if (x < 0) {
        if (s->n_dims != 3 || s->shape[0] != X || s->shape[1] % 2)
            return nx_fail(err, NX_ERR_FORMAT, "tensor '%s' should be (%d experts, 2 x n_ff, n_embd)", s->name, X);
        int64_t F = s->shape[1] / 2, E = s->shape[2];
        for (int half = 0; half < 2; half++) {
            snprintf(name, sizeof name, "blk.%d.%s", il, half ? "ffn_up_exps.weight" : "ffn_gate_exps.weight");
            cv_tensor *t = seg_tensor(cx, name, order, E, F, err);
            if (!t) return err->code;
            for (int k = 0; k < X; k++) t->segs[k] = (cv_seg){i, (2 * k + half) * F * E, F * E};
            t->src = i;
        }
        return NX_OK;
    }
    const char *proj = blk_end ? blk_end + 1 : "";
    const char *which = !strcmp(proj, "gate_proj") ? "ffn_gate_exps" : !strcmp(proj, "up_proj") ? "ffn_up_exps"
                      : !strcmp(proj, "down_proj") ? "ffn_down_exps" : NULL;
    if (!which || x >= X || s->n_dims != 2)
        return nx_fail(err, NX_ERR_UNSUPPORTED, "tensor '%s': not an expert projection of %d experts", s->name, X);
    snprintf(name, sizeof name, "blk.%d.%s.weight", il, which);
    cv_tensor *t = seg_tensor(cx, name, order, s->shape[1], s->shape[0], err);
    if (!t) return err->code;
    if (t->segs[x].count) return nx_fail(err, NX_ERR_FORMAT, "%s: expert %d appears twice", name, x);
    t->segs[x] = (cv_seg){i, 0, s->numel};
    if (t->src < 0 || i < t->src) t->src = i;
    return NX_OK;
}

static nx_status build_plan(cv_ctx *cx, nx_error *err) {
    int64_t n = nx_st_n_tensors(cx->st);
    cx->t = calloc((size_t)(2 * n + 2), sizeof *cx->t);   /* a fused gate_up gives two; + rope_freqs */
    if (!cx->t) return nx_fail(err, NX_ERR_NOMEM, "out of memory");
    for (int64_t i = 0; i < n; i++) {
        const nx_st_tensor *s = nx_st_tensor_at(cx->st, i);
        cv_tensor *t = &cx->t[cx->n];
        *t = (cv_tensor){.src = i, .cx = cx};
        char hf[256], why[160] = "";
        if (s->dtype == NX_ST_F8_E4M3 || s->dtype == NX_ST_F8_E5M2)
            return nx_fail(err, NX_ERR_UNSUPPORTED, "tensor '%s' has dtype %s: FP8 checkpoints are not supported "
                           "(convert the BF16 / F16 release of the model)", s->name, nx_st_dtype_name(s->dtype));
        int r = cx->g4.on ? nx_cv_g4_map(&cx->g4, s, t, why, sizeof why)
                          : map_name(&cx->hp, s->name, hf, sizeof hf, t, why, sizeof why);
        if (r < 0) return nx_fail(err, NX_ERR_UNSUPPORTED, "tensor '%s' (in %s): %s", s->name,
                                  nx_st_file_path(cx->st, s->file), why);
        if (r == 0) continue;
        if (!t->ints && !nx_st_dtype_is_float(s->dtype))
            return nx_fail(err, NX_ERR_UNSUPPORTED, "tensor '%s' has dtype %s (quantized checkpoints are not supported)",
                           s->name, nx_st_dtype_name(s->dtype));
        for (int d = 0; d < s->n_dims; d++)
            if (s->shape[d] == 0) return nx_fail(err, NX_ERR_FORMAT, "tensor '%s' is empty", s->name);
        if (r == 2) {
            nx_status st = plan_experts(cx, i, s, t->name, t->expert, t->order, err);
            if (st) return st;
            continue;
        }
        /* GGUF ne = the HF shape reversed; conv1d (C, 1, K) squeezed to (C, K) */
        int64_t shp[NX_ST_MAX_DIMS];
        int nd = 0;
        for (int d = 0; d < s->n_dims; d++)
            if (!(strstr(t->name, "ssm_conv1d") && s->shape[d] == 1)) shp[nd++] = s->shape[d];
        if (nd > 4 || nd < 1) return nx_fail(err, NX_ERR_UNSUPPORTED, "tensor '%s' has %d dimensions", s->name, s->n_dims);
        t->n_dims = nd;
        for (int d = 0; d < 4; d++) t->ne[d] = d < nd ? shp[nd - 1 - d] : 1;
        nx_status st = check_shape(cx, t, s, err);
        if (st) return st;
        if (t->vmode == V_ROWS && !t->plus1 && !t->negexp && t->n_dims >= 2 && (st = vrows_segments(cx, t, s, err)))
            return st;
        t->type = t->ints ? NX_TYPE_I32 : nx_cv_pick_type(t, cx->outtype);
        cx->n++;
    }
    if (cx->g4.on) {
        nx_status st = nx_cv_g4_extra(cx, err);
        if (st) return st;
    }
    for (int64_t i = 0; i < cx->n; i++)
        for (int k = 0; k < cx->t[i].n_segs; k++)
            if (!cx->t[i].segs[k].count)
                return nx_fail(err, NX_ERR_FORMAT, "%s: expert %d is missing from the checkpoint", cx->t[i].name, k);
    /* two checkpoint tensors mapping to one GGUF name (e.g. model.mtp.* beside mtp.*): sorted by name */
    qsort(cx->t, (size_t)cx->n, sizeof *cx->t, cmp_name);
    for (int64_t i = 1; i < cx->n; i++)
        if (!strcmp(cx->t[i - 1].name, cx->t[i].name))
            return nx_fail(err, NX_ERR_FORMAT, "two checkpoint tensors map to %s", cx->t[i].name);
    qsort(cx->t, (size_t)cx->n, sizeof *cx->t, cmp_tensor);
    for (int64_t i = 0; i < cx->n; i++) cx->t[i].cx = cx;
    if (!cx->n) return nx_fail(err, NX_ERR_FORMAT, "the checkpoint holds no text-model tensors");
    bool emb = false;
    for (int64_t i = 0; i < cx->n; i++) emb |= !strcmp(cx->t[i].name, "token_embd.weight");
    if (!emb) return nx_fail(err, NX_ERR_FORMAT, "the checkpoint has no model.embed_tokens.weight");
    return NX_OK;
}

/* ===== Metadata ===== */

int nx_cv_ftype_of(nx_type t) {
    switch (t) {
    case NX_TYPE_F32: return 0;     /* LLAMA_FTYPE_ALL_F32 */
    case NX_TYPE_F16: return 1;     /* MOSTLY_F16 */
    case NX_TYPE_Q8_0: return 7;    /* MOSTLY_Q8_0 */
    default: return 32;             /* MOSTLY_BF16 */
    }
}

static nx_status set_sampling(nx_gguf_writer *w, const char *dir, nx_error *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    if (!nx_cv_is_file(path)) return NX_OK;
    char *text = NULL;
    cJSON *g = NULL;
    nx_status s = nx_cv_read_json(path, &text, &g, err);
    static const struct { const char *hf, *key; bool is_int; } K[] = {
        {"top_k", "general.sampling.top_k", true}, {"top_p", "general.sampling.top_p", false},
        {"min_p", "general.sampling.min_p", false}, {"temperature", "general.sampling.temp", false},
        {"repetition_penalty", "general.sampling.penalty_repeat", false},
    };
    for (size_t i = 0; i < sizeof K / sizeof K[0] && !s; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(g, K[i].hf);
        if (!cJSON_IsNumber(v)) continue;
        s = K[i].is_int ? nx_gguf_set_i32(w, K[i].key, (int32_t)v->valuedouble) : nx_gguf_set_f32(w, K[i].key, (float)v->valuedouble);
    }
    cJSON_Delete(g);
    free(text);
    return s;
}

/* tokenizer_config.json's chat_template (a string, or llama.cpp's list of {name, template}),
 * else chat_template.jinja. */
static nx_status set_chat_template(nx_gguf_writer *w, const char *dir, const char *tok_cfg, nx_error *err) {
    nx_status s = NX_OK;
    bool have = false;
    if (tok_cfg) {
        char *text = NULL;
        cJSON *c = NULL;
        s = nx_cv_read_json(tok_cfg, &text, &c, err);
        const cJSON *ct = cJSON_GetObjectItemCaseSensitive(c, "chat_template");
        if (!s && cJSON_IsString(ct)) {
            s = nx_gguf_set_str(w, "tokenizer.chat_template", ct->valuestring);
            have = true;
        } else if (!s && cJSON_IsArray(ct)) {
            for (const cJSON *e = ct->child; e && !s; e = e->next) {
                const char *nm = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "name"));
                const char *tp = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "template"));
                if (!nm || !tp) continue;
                char key[300];
                if (!strcmp(nm, "default")) snprintf(key, sizeof key, "tokenizer.chat_template");
                else snprintf(key, sizeof key, "tokenizer.chat_template.%s", nm);
                s = nx_gguf_set_str(w, key, tp);
                have = true;
            }
        }
        cJSON_Delete(c);
        free(text);
        if (s) return s;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
    if (!have && nx_cv_is_file(path)) {
        char *text = NULL;
        size_t len = 0;
        if ((s = nx_read_file(path, (size_t)16 << 20, &text, &len, err))) return s;
        if (strlen(text) != len) s = nx_fail(err, NX_ERR_FORMAT, "%s holds a NUL byte", path);
        else s = nx_gguf_set_str(w, "tokenizer.chat_template", text);
        free(text);
    }
    return s;
}

nx_status nx_cv_kv_u32(nx_gguf_writer *w, const char *arch, const char *suffix, int64_t v) {
    char key[160];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return nx_gguf_set_u32(w, key, (uint32_t)v);
}

nx_status nx_cv_kv_f32(nx_gguf_writer *w, const char *arch, const char *suffix, double v) {
    char key[160];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return nx_gguf_set_f32(w, key, (float)v);
}

/* The keys and their order as llama.cpp's TextModel / Qwen2MoeModel / Qwen3NextModel /
 * _Qwen35MRopeMixin / _Qwen35MtpMixin set_gguf_parameters write them. */
static nx_status set_model_kv(nx_gguf_writer *w, const cv_hparams *hp, const char *name, nx_type outtype) {
    const char *A = hp->moe ? "qwen35moe" : "qwen35";
    char key[160];
    nx_status s = nx_gguf_set_str(w, "general.architecture", A);
#define U(k, v) if (!s) s = nx_cv_kv_u32(w, A, k, v)
#define F(k, v) if (!s) s = nx_cv_kv_f32(w, A, k, v)
    if (!s) s = nx_gguf_set_str(w, "general.type", "model");
    if (!s) s = nx_gguf_set_str(w, "general.name", name);
    U("block_count", hp->n_layer + hp->n_mtp);
    if (hp->n_ctx > 0) U("context_length", hp->n_ctx);
    U("embedding_length", hp->n_embd);
    if (hp->n_ff > 0) U("feed_forward_length", hp->n_ff);
    U("attention.head_count", hp->n_head);
    U("attention.head_count_kv", hp->n_head_kv);
    if (hp->rope_type && !strcmp(hp->rope_type, "linear") && hp->rope_factor > 0) {
        snprintf(key, sizeof key, "%s.rope.scaling.type", A);
        if (!s) s = nx_gguf_set_str(w, key, "linear");
        F("rope.scaling.factor", hp->rope_factor);
    }
    if (!s) {
        int32_t sec[4] = {hp->sections[0], hp->sections[1], hp->sections[2], hp->sections[3]};
        snprintf(key, sizeof key, "%s.rope.dimension_sections", A);
        s = nx_gguf_set_arr(w, key, NX_GGUF_I32, sec, 4);
    }
    if (hp->rope_theta > 0) F("rope.freq_base", hp->rope_theta);
    F("attention.layer_norm_rms_epsilon", hp->eps);
    if (hp->moe) {
        U("expert_count", hp->n_expert);
        U("expert_used_count", hp->n_expert_used);
    }
    if (hp->head_dim_given) {
        U("attention.key_length", hp->head_dim);
        U("attention.value_length", hp->head_dim);
    }
    if (!s) s = nx_gguf_set_u32(w, "general.file_type", (uint32_t)nx_cv_ftype_of(outtype));
    if (hp->moe) {
        U("expert_feed_forward_length", hp->n_ff_exp);
        if (hp->n_ff_shexp > 0) U("expert_shared_feed_forward_length", hp->n_ff_shexp);
    }
    U("ssm.conv_kernel", hp->d_conv);
    U("ssm.state_size", hp->dk);
    U("ssm.group_count", hp->nk);
    U("ssm.time_step_rank", hp->nv);
    U("ssm.inner_size", hp->dv * hp->nv);
    U("full_attention_interval", hp->interval);
    U("rope.dimension_count", hp->n_rot);
    if (hp->n_mtp > 0) U("nextn_predict_layers", hp->n_mtp);
    if (!s) s = nx_gguf_set_u32(w, "general.quantization_version", 2);
#undef U
#undef F
    return s;
}

/* ===== Entry ===== */

static const char *const SUPPORTED = "Qwen3_5ForCausalLM, Qwen3_5ForConditionalGeneration, Qwen3_5MoeForCausalLM, "
                                     "Qwen3_5MoeForConditionalGeneration, Gemma4ForCausalLM, "
                                     "Gemma4ForConditionalGeneration, Gemma4AssistantForCausalLM";

/* A quantized checkpoint (FP8, GPTQ, AWQ, ...) says so in config.json; its weights are not plain
 * floats, so it is refused up front with the method named. */
static nx_status check_not_quantized(const cv_config *c, nx_error *err) {
    const cJSON *q = nx_cv_cfg_get(c, "quantization_config");
    if (!q) return NX_OK;
    const char *m = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(q, "quant_method"));
    const char *fmt = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(q, "fmt"));
    bool fp8 = (m && !strcmp(m, "fp8")) || (fmt && strstr(fmt, "e4m3"));
    return nx_fail(err, NX_ERR_UNSUPPORTED, "%s: a quantized checkpoint (quantization_config.quant_method = %s)%s is not "
                   "supported: convert the BF16 / F16 release of the model", c->path, m ? m : "?",
                   fp8 ? ": FP8 weights" : "");
}

nx_status nx_convert_hf(const nx_convert_opts *o, nx_error *err) {
    if (!o || !o->hf_dir || !o->out_path) return nx_fail(err, NX_ERR_INVALID_ARG, "convert: a checkpoint directory and --out are required");
    if (o->outtype != NX_TYPE_F32 && o->outtype != NX_TYPE_F16 && o->outtype != NX_TYPE_BF16 && o->outtype != NX_TYPE_Q8_0)
        return nx_fail(err, NX_ERR_INVALID_ARG, "convert: --outtype must be f32, f16, bf16 or q8_0");
    struct stat sb;
    if (stat(o->hf_dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return nx_fail(err, NX_ERR_IO, "%s is not a directory", o->hf_dir);
    char cfg_path[4096], tok_path[4096], tok_cfg[4096];
    snprintf(cfg_path, sizeof cfg_path, "%s/config.json", o->hf_dir);
    snprintf(tok_path, sizeof tok_path, "%s/tokenizer.json", o->hf_dir);
    snprintf(tok_cfg, sizeof tok_cfg, "%s/tokenizer_config.json", o->hf_dir);
    if (!nx_cv_is_file(cfg_path)) return nx_fail(err, NX_ERR_IO, "missing %s", cfg_path);
    if (!nx_cv_is_file(tok_path))
        return nx_fail(err, NX_ERR_IO, "missing %s (only tokenizer.json vocabularies are supported; a Gemma 4 assistant "
                       "uses its target's: copy the target's tokenizer.json and tokenizer_config.json)", tok_path);
    bool have_tok_cfg = nx_cv_is_file(tok_cfg);

    cv_config c = {.path = cfg_path};
    cv_ctx cx = {.outtype = o->outtype, .o = o};
    nx_gguf_writer *w = NULL;
    nx_status s = nx_cv_read_json(cfg_path, &c.text, &c.root, err);
    if (s) goto done;
    if (!cJSON_IsObject(c.root)) { s = nx_fail(err, NX_ERR_FORMAT, "%s is not a JSON object", cfg_path); goto done; }
    const cJSON *archs = cJSON_GetObjectItemCaseSensitive(c.root, "architectures");
    const char *arch = cJSON_GetStringValue(cJSON_GetArrayItem(archs, 0));
    if (!arch) { s = nx_fail(err, NX_ERR_FORMAT, "%s: no 'architectures' list", cfg_path); goto done; }
    cx.hp.moe = !strcmp(arch, "Qwen3_5MoeForCausalLM") || !strcmp(arch, "Qwen3_5MoeForConditionalGeneration");
    bool asst = !strcmp(arch, "Gemma4AssistantForCausalLM");
    cx.g4.on = asst || !strcmp(arch, "Gemma4ForCausalLM") || !strcmp(arch, "Gemma4ForConditionalGeneration");
    if (strcmp(arch, "Qwen3_5ForCausalLM") && strcmp(arch, "Qwen3_5ForConditionalGeneration") && !cx.hp.moe && !cx.g4.on) {
        s = nx_fail(err, NX_ERR_UNSUPPORTED, "architecture %s is not supported (supported: %s)", arch, SUPPORTED);
        goto done;
    }
    c.text_cfg = cJSON_GetObjectItemCaseSensitive(c.root, "text_config");
    if (!cJSON_IsObject(c.text_cfg)) c.text_cfg = NULL;
    c.rope = nx_cv_cfg_get(&c, "rope_parameters");
    if (!cJSON_IsObject(c.rope)) c.rope = nx_cv_cfg_get(&c, "rope_scaling");
    if (!cJSON_IsObject(c.rope)) c.rope = NULL;
    if ((s = check_not_quantized(&c, err))) goto done;
    if (cx.g4.on) s = nx_cv_g4_hparams(&c, asst, &cx.g4, err);
    else s = read_hparams(&c, &cx.hp, err);
    if (s) goto done;
    if ((s = nx_st_open_dir(o->hf_dir, &cx.st, err))) goto done;
    if ((s = build_plan(&cx, err))) goto done;

    w = nx_gguf_writer_create();
    if (!w) { s = nx_fail(err, NX_ERR_NOMEM, "out of memory"); goto done; }
    const char *base = strrchr(o->hf_dir, '/');
    char name[256];
    snprintf(name, sizeof name, "%s", base && base[1] ? base + 1 : o->hf_dir);
    size_t nl = strlen(name);
    while (nl > 1 && name[nl - 1] == '/') name[--nl] = '\0';
    s = cx.g4.on ? nx_cv_g4_kv(w, &cx.g4, name, o->outtype) : set_model_kv(w, &cx.hp, name, o->outtype);
    if (s) { nx_fail(err, s, "building the GGUF metadata failed"); goto done; }
    nx_tok_convert_opts to = {.tokenizer_json = tok_path, .config_json = have_tok_cfg ? tok_cfg : NULL,
                              .n_vocab = cx.g4.on ? cx.g4.n_vocab : cx.hp.n_vocab,
                              .user_defined = cx.g4.on ? nx_cv_g4_visible_tokens : NULL};
    if ((s = nx_tokenizer_convert_kv(&to, w, err))) goto done;
    if ((s = set_chat_template(w, o->hf_dir, have_tok_cfg ? tok_cfg : NULL, err))) goto done;
    if ((s = set_sampling(w, o->hf_dir, err))) goto done;
    for (int64_t i = 0; i < cx.n && !s; i++)
        s = nx_gguf_add_tensor_stream(w, cx.t[i].name, cx.t[i].type, cx.t[i].n_dims, cx.t[i].ne, cv_stream, &cx.t[i]);
    if (s) { nx_fail(err, s, "registering the tensors failed"); goto done; }
    s = nx_gguf_writer_write(w, o->out_path, err);
done:
    nx_gguf_writer_free(w);
    nx_st_close(cx.st);
    for (int64_t i = 0; i < cx.n; i++) {
        free(cx.t[i].segs);
        free(cx.t[i].gen);
    }
    free(cx.t);
    nx_cv_g4_free(&cx.g4);
    cJSON_Delete(c.root);
    free(c.text);
    return s;
}
