/*
 * gemma4_assistant.c — the Gemma 4 assistant as a draft head (contract in gemma4_assistant.h):
 * loading and validating the assistant GGUF (both dialects), its forward pass over the target's
 * KV, the centroid-routed masked head. The `assistant` drafter (spec/assistant.c) drives it.
 * Owns: the assistant model handle, its scratch.
 * Never: writes the target's KV / logits / hidden rows, allocates after creation, prints.
 */
#include "arch/gemma4_assistant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "arch/attn_view.h"
#include "arch/gemma4.h"
#include "ctx.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "kv.h"
#include "model.h"
#include "quant/quant.h"

#define AS_MAX_DIM (1 << 20)

typedef struct as_layer {
    bool swa;
    int hd, nh, nkv, n_ff;
    int kv_layer;                   /* target cache layer read */
    const float *attn_norm, *q_norm, *post_attn_norm, *ffn_norm, *post_ffw_norm;
    const nx_tensor *wq, *wo, *gate, *up, *down;
    bool has_out_scale;
    float out_scale;
} as_layer;

typedef struct as_cand {
    float v;
    int i;
} as_cand;

struct nx_assistant {
    nx_ctx *tctx;                   /* borrowed target context */
    const g4_model *gm;
    nx_model *m;                    /* owned: the assistant file */
    nx_assistant_opts opts;
    int n_layer, E, n_bb, n_vocab, n_swa;
    float eps, softcap;
    as_layer *layers;
    const nx_tensor *pre, *post, *head;
    const float *output_norm;
    /* masked head */
    bool masked;
    int n_c, top_k, vpc;
    const nx_tensor *centroids;
    int cl_rows;                    /* rows of cl the last forward chunk filled (0: none) */
    int32_t *rows;                  /* [n_c][vpc]: row c = the tokens of centroid c */
    /* scratch for cap rows */
    int cap, max_q, max_ff, max_cells, max_hd;
    float *z, *x, *u, *a, *q, *o, *g, *up, *hf, *lg, *cl, *rc_full, *rc_swa, *thr, *drow, *cval;
    size_t thr_stride;
    int32_t *alo, *ahi;   /* [cap] visible target positions per row of the current layer */
    as_cand *cand;
    nx_pos *ends;                   /* [cap] visible end of the target cells per row */
    nx_matmul_scratch mm;
};

nx_assistant_opts nx_assistant_default_opts(void) {
    nx_assistant_opts o = {.positions = NX_ASST_POS_CONSTANT, .dense_head = false};
    return o;
}

nx_status nx_assistant_parse_positions(const char *s, nx_asst_positions *out, nx_error *err) {
    if (s && !strcmp(s, "constant")) *out = NX_ASST_POS_CONSTANT;
    else if (s && !strcmp(s, "increment")) *out = NX_ASST_POS_INCREMENT;
    else return nx_fail(err, NX_ERR_INVALID_ARG, "--draft-positions: '%s' is not constant or increment", s ? s : "");
    return NX_OK;
}

static bool is_drafter_arch(const char *arch) {
    return !strcmp(arch, "gemma4-assistant") || !strcmp(arch, "gemma4_mtp");
}

bool nx_assistant_file_is_drafter(const char *path) {
    nx_gguf *g = NULL;
    nx_error e = {0};
    if (!path || nx_gguf_open(path, &g, &e) != NX_OK) return false;
    uint64_t len = 0;
    const char *arch = nx_gguf_get_str(g, "general.architecture", &len);
    char buf[64] = "";
    if (arch && len < sizeof buf) memcpy(buf, arch, (size_t)len);
    bool r = is_drafter_arch(buf);
    nx_gguf_close(g);
    return r;
}

/* ===== loading ===== */

typedef struct as_loader {
    nx_assistant *a;
    nx_model *m;
    const char *path;
    nx_error *err;
    nx_status st;
} as_loader;

static bool key_present(const nx_model *m, const char *suffix) {
    char k[256];
    snprintf(k, sizeof k, "%s.%s", m->arch, suffix);
    return nx_gguf_find_key(m->gguf, k) >= 0;
}

/* Integer key <arch>.suffix (element il of an array); def when absent and not required. */
static int get_int(as_loader *L, const char *suffix, int il, bool required, int def, int lo, int hi) {
    if (L->st != NX_OK) return def;
    int64_t v = def;
    if (!key_present(L->m, suffix)) {
        if (required) L->st = nx_fail(L->err, NX_ERR_FORMAT, "%s: missing metadata key %s.%s", L->path, L->m->arch, suffix);
        return def;
    }
    if (!nx_model_key_int(L->m, suffix, il, &v)) {
        L->st = nx_fail(L->err, NX_ERR_FORMAT, "%s: metadata %s.%s is not an integer (or lacks layer %d)", L->path,
                        L->m->arch, suffix, il < 0 ? 0 : il);
        return def;
    }
    if (v < lo || v > hi) {
        L->st = nx_fail(L->err, NX_ERR_FORMAT, "%s: metadata %s.%s = %lld is outside [%d, %d]", L->path, L->m->arch,
                        suffix, (long long)v, lo, hi);
        return def;
    }
    return (int)v;
}

static const nx_tensor *tensor2(as_loader *L, const char *name, int64_t ne0, int64_t ne1, unsigned flags) {
    if (L->st != NX_OK) return NULL;
    int64_t ne[2] = {ne0, ne1};
    const nx_tensor *t = NULL;
    L->st = nx_model_tensor(L->m, name, ne1 == 1 && !(flags & NX_T_MATMUL) ? 1 : 2, ne, flags, &t, L->err);
    if (L->st != NX_OK && L->err) nx_error_prefix(L->err, "%s", L->path);
    return t;
}

static const float *vec(as_loader *L, const char *name, int64_t n, unsigned flags) {
    const nx_tensor *t = tensor2(L, name, n, 1, flags & NX_T_OPTIONAL);
    if (!t) return NULL;
    const float *p = NULL;
    L->st = nx_model_f32(L->m, t, &p, L->err);
    return p;
}

static bool has_tensor(const nx_model *m, const char *name) { return nx_gguf_find_tensor(m->gguf, name) >= 0; }

static const char *first_tensor(const nx_model *m, const char *const *names) {
    for (int i = 0; names[i]; i++)
        if (has_tensor(m, names[i])) return names[i];
    return NULL;
}

static int cmp_cand(const void *pa, const void *pb) {
    const as_cand *x = pa, *y = pb;
    if (x->v > y->v) return -1;
    if (x->v < y->v) return 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

/* The ordering tensor as rows [n_c][vpc]: a vocabulary permutation (HF / S000 semantics) is used
 * as is; ik's rewritten token -> centroid map is turned back into rows (order within a row does
 * not matter: the candidates are a set). */
static void load_ordering(as_loader *L, const char *oname) {
    nx_assistant *a = L->a;
    int64_t idx = nx_gguf_find_tensor(L->m->gguf, oname);
    const nx_tensor *t = nx_gguf_tensor(L->m->gguf, idx);
    const int64_t nv = a->n_vocab;
    if (nx_tensor_nelements(t) != nv || (t->type != NX_TYPE_I32 && t->type != NX_TYPE_F32)) {
        L->st = nx_fail(L->err, NX_ERR_FORMAT, "%s: %s must hold %lld I32 token ids (has %lld of type %d)", L->path, oname,
                        (long long)nv, (long long)nx_tensor_nelements(t), (int)t->type);
        return;
    }
    int32_t *v = malloc((size_t)nv * sizeof *v);
    int *cnt = calloc((size_t)(nv > a->n_c ? nv : a->n_c), sizeof *cnt);
    a->rows = malloc((size_t)nv * sizeof *a->rows);
    if (!v || !cnt || !a->rows) {
        free(v); free(cnt);
        L->st = nx_fail(L->err, NX_ERR_NOMEM, "out of memory");
        return;
    }
    bool ok = true;
    for (int64_t i = 0; i < nv && ok; i++) {
        double d = t->type == NX_TYPE_I32 ? (double)((const int32_t *)t->data)[i] : (double)((const float *)t->data)[i];
        if (!(d >= 0 && d < (double)nv) || d != floor(d)) ok = false;
        else v[i] = (int32_t)d;
    }
    bool perm = ok;
    for (int64_t i = 0; i < nv && perm; i++)
        if (cnt[v[i]]++) perm = false;
    if (perm) {
        memcpy(a->rows, v, (size_t)nv * sizeof *v);
    } else if (ok) {
        memset(cnt, 0, (size_t)a->n_c * sizeof *cnt);
        bool map = true;
        for (int64_t i = 0; i < nv && map; i++)
            if (v[i] >= a->n_c || cnt[v[i]]++ >= a->vpc) map = false;
        if (map) {
            memset(cnt, 0, (size_t)a->n_c * sizeof *cnt);
            for (int64_t i = 0; i < nv; i++) a->rows[(size_t)v[i] * (size_t)a->vpc + (size_t)cnt[v[i]]++] = (int32_t)i;
        }
        ok = map;
    }
    free(v);
    free(cnt);
    if (!ok)
        L->st = nx_fail(L->err, NX_ERR_FORMAT,
                        "%s: %s is neither a vocabulary permutation nor a token->centroid map (%d centroids of %d)",
                        L->path, oname, a->n_c, a->vpc);
}

static void load_masked_head(as_loader *L) {
    nx_assistant *a = L->a;
    nx_model *m = L->m;
    static const char *const cnames[] = {"masked_embd_centroids.weight", "mtp.centroids.weight", "mtp_centroids.weight",
                                         NULL};
    static const char *const onames[] = {"masked_embd_ordering", "mtp.token_ordering.weight",
                                         "mtp_token_ordering.weight", NULL};
    const char *cname = first_tensor(m, cnames), *oname = first_tensor(m, onames);
    char k[256];
    snprintf(k, sizeof k, "%s.use_ordered_embeddings", m->arch);
    bool use = true, has_use = nx_gguf_get_bool(m->gguf, k, &use);
    if (!cname || !oname) {
        if (has_use && use && !a->opts.dense_head)
            L->st = nx_fail(L->err, NX_ERR_FORMAT,
                            "%s: use_ordered_embeddings is set but the centroid tensors are missing (%s, %s)", L->path,
                            cname ? cname : "centroids", oname ? oname : "ordering");
        return;
    }
    if ((has_use && !use) || a->opts.dense_head) return;
    const nx_tensor *ct = nx_gguf_tensor(m->gguf, nx_gguf_find_tensor(m->gguf, cname));
    const bool mtp = !strcmp(m->arch, "gemma4_mtp");
    int64_t tc = ct->ne[1];
    a->n_c = get_int(L, mtp ? "centroid_count" : "n_centroids", -1, false, (int)(tc > 0 && tc < AS_MAX_DIM ? tc : 0), 1,
                     AS_MAX_DIM);
    a->top_k = get_int(L, "centroid_top_k", -1, true, 0, 1, AS_MAX_DIM);
    if (L->st != NX_OK) return;
    a->centroids = tensor2(L, cname, a->E, a->n_c, NX_T_MATMUL);
    if (L->st != NX_OK) return;
    if (a->n_vocab % a->n_c || a->top_k > a->n_c) {
        L->st = nx_fail(L->err, NX_ERR_FORMAT, "%s: n_vocab %d / n_centroids %d / centroid_top_k %d are inconsistent",
                        L->path, a->n_vocab, a->n_c, a->top_k);
        return;
    }
    a->vpc = a->n_vocab / a->n_c;
    load_ordering(L, oname);
    a->masked = L->st == NX_OK;
}

static void load_layers(as_loader *L) {
    nx_assistant *a = L->a;
    const g4_model *gm = a->gm;
    const g4_hparams *thp = &gm->hp;
    const int E = a->E;
    char name[128];
    for (int il = 0; il < a->n_layer && L->st == NX_OK; il++) {
        as_layer *l = &a->layers[il];
        l->swa = get_int(L, "attention.sliding_window_pattern", il, true, 0, 0, 1) != 0;
        l->nh = get_int(L, "attention.head_count", il, true, 0, 1, AS_MAX_DIM);
        if (L->st != NX_OK) return;
        const int j = gm->last_kv[l->swa ? 1 : 0];
        if (j < 0) {
            L->st = nx_fail(L->err, NX_ERR_UNSUPPORTED, "%s: layer %d (%s) has no KV-owning target layer of its type",
                            L->path, il, l->swa ? "SWA" : "full");
            return;
        }
        const g4_layer *tl = &gm->layers[j];
        l->hd = l->swa ? thp->hd_swa : thp->hd_full;
        l->nkv = tl->nkv;
        l->kv_layer = tl->kv_layer;
        if (l->nh % l->nkv) {
            L->st = nx_fail(L->err, NX_ERR_UNSUPPORTED,
                            "%s: layer %d: %d heads are not a multiple of target layer %d's %d kv heads", L->path, il,
                            l->nh, j, l->nkv);
            return;
        }
#define T(field, fmt, n0, n1, fl)                          \
    do {                                                   \
        snprintf(name, sizeof name, fmt, il);              \
        l->field = tensor2(L, name, n0, n1, fl);           \
    } while (0)
#define V(field, fmt, n)                                   \
    do {                                                   \
        snprintf(name, sizeof name, fmt, il);              \
        l->field = vec(L, name, n, 0);                     \
    } while (0)
        const int qd = l->nh * l->hd;
        V(attn_norm, "blk.%d.attn_norm.weight", E);
        T(wq, "blk.%d.attn_q.weight", E, qd, NX_T_MATMUL);
        V(q_norm, "blk.%d.attn_q_norm.weight", l->hd);
        T(wo, "blk.%d.attn_output.weight", qd, E, NX_T_MATMUL);
        V(post_attn_norm, "blk.%d.post_attention_norm.weight", E);
        V(ffn_norm, "blk.%d.ffn_norm.weight", E);
        V(post_ffw_norm, "blk.%d.post_ffw_norm.weight", E);
        snprintf(name, sizeof name, "blk.%d.ffn_gate_inp.weight", il);
        if (L->st == NX_OK && has_tensor(L->m, name)) {
            L->st = nx_fail(L->err, NX_ERR_UNSUPPORTED, "%s: layer %d: MoE FFN is not supported in an assistant", L->path,
                            il);
            return;
        }
        T(gate, "blk.%d.ffn_gate.weight", E, -1, NX_T_MATMUL);
        if (L->st != NX_OK) return;
        l->n_ff = (int)l->gate->ne[1];
        T(up, "blk.%d.ffn_up.weight", E, l->n_ff, NX_T_MATMUL);
        T(down, "blk.%d.ffn_down.weight", l->n_ff, E, NX_T_MATMUL);
        snprintf(name, sizeof name, "blk.%d.layer_output_scale.weight", il);
        const float *sc = L->st == NX_OK && has_tensor(L->m, name) ? vec(L, name, 1, 0) : NULL;
        if (sc) {
            l->has_out_scale = true;
            l->out_scale = sc[0];
        }
#undef T
#undef V
        if (qd > a->max_q) a->max_q = qd;
        if (l->n_ff > a->max_ff) a->max_ff = l->n_ff;
        if (l->hd > a->max_hd) a->max_hd = l->hd;
        int cells = nx_kv_cells(a->tctx->kv, l->kv_layer);
        if (cells > a->max_cells) a->max_cells = cells;
    }
}

static void validate_and_load(as_loader *L) {
    nx_assistant *a = L->a;
    nx_model *m = L->m;
    const g4_model *gm = a->gm;
    const g4_hparams *thp = &gm->hp;
    const bool mtp = !strcmp(m->arch, "gemma4_mtp");
    char k[256];
    snprintf(k, sizeof k, "%s.requires_target_arch", m->arch);
    uint64_t rl = 0;
    const char *req = nx_gguf_get_str(m->gguf, k, &rl);
    if (req && (rl != 6 || memcmp(req, "gemma4", 6))) {
        L->st = nx_fail(L->err, NX_ERR_UNSUPPORTED, "%s: requires_target_arch is '%.*s', but nextn drafts for 'gemma4'",
                        L->path, (int)(rl > 200 ? 200 : rl), req);
        return;
    }
    a->n_layer = get_int(L, "block_count", -1, true, 0, 1, 4096);
    a->E = get_int(L, "embedding_length", -1, true, 0, 1, AS_MAX_DIM);
    const char *bbk = mtp ? "backbone_embedding_length" : "embedding_length_out";
    const char *bbk2 = mtp ? "embedding_length_out" : "backbone_embedding_length";
    a->n_bb = get_int(L, key_present(m, bbk) || !key_present(m, bbk2) ? bbk : bbk2, -1, true, 0, 1, AS_MAX_DIM);
    if (L->st != NX_OK) return;
    if (a->n_bb != thp->n_embd) {
        L->st = nx_fail(L->err, NX_ERR_UNSUPPORTED,
                        "%s: backbone width %s.%s = %d does not match the target's n_embd %d (a drafter for another "
                        "model?)", L->path, m->arch, bbk, a->n_bb, thp->n_embd);
        return;
    }
    double eps = 0;
    if (!nx_model_key_float(m, "attention.layer_norm_rms_epsilon", &eps) || !(eps > 0 && eps < 1)) {
        L->st = nx_fail(L->err, NX_ERR_FORMAT, "%s: missing or bad %s.attention.layer_norm_rms_epsilon", L->path, m->arch);
        return;
    }
    a->eps = (float)eps;
    const int hd_full = get_int(L, "attention.key_length", -1, false, thp->hd_full, 1, AS_MAX_DIM);
    const int hd_swa = get_int(L, "attention.key_length_swa", -1, false, thp->hd_swa, 1, AS_MAX_DIM);
    const int vd_full = get_int(L, "attention.value_length", -1, false, hd_full, 1, AS_MAX_DIM);
    const int vd_swa = get_int(L, "attention.value_length_swa", -1, false, hd_swa, 1, AS_MAX_DIM);
    if (L->st != NX_OK) return;
    if (hd_full != thp->hd_full || hd_swa != thp->hd_swa || vd_full != thp->hd_full || vd_swa != thp->hd_swa) {
        L->st = nx_fail(L->err, NX_ERR_UNSUPPORTED,
                        "%s: head dims full/swa %d/%d (value %d/%d) do not match the target's %d/%d", L->path, hd_full,
                        hd_swa, vd_full, vd_swa, thp->hd_full, thp->hd_swa);
        return;
    }
    a->n_swa = get_int(L, "attention.sliding_window", -1, false, thp->n_swa, 1, 1 << 30);
    if (L->st != NX_OK) return;
    if (a->n_swa > thp->n_swa) {
        /* the target's SWA ring only keeps its own window */
        L->st = nx_fail(L->err, NX_ERR_UNSUPPORTED, "%s: sliding_window %d is wider than the target's %d", L->path,
                        a->n_swa, thp->n_swa);
        return;
    }
    double cap = 0;
    a->softcap = nx_model_key_float(m, "final_logit_softcapping", &cap) && cap > 0 ? (float)cap : 0.0f;
    /* vocabulary and head */
    const nx_tensor *te = tensor2(L, "token_embd.weight", a->E, -1, NX_T_MATMUL);
    if (L->st != NX_OK) return;
    a->n_vocab = (int)te->ne[1];
    if (te->ne[1] != thp->n_vocab) {
        L->st = nx_fail(L->err, NX_ERR_UNSUPPORTED, "%s: vocabulary size %lld does not match the target's %d", L->path,
                        (long long)te->ne[1], thp->n_vocab);
        return;
    }
    static const char *const heads[] = {"output_extra.weight", "output.weight", "token_embd.weight", NULL};
    a->head = tensor2(L, first_tensor(m, heads), a->E, a->n_vocab, NX_T_MATMUL);
    a->output_norm = vec(L, "output_norm.weight", a->E, 0);
    static const char *const pres[] = {"nextn.pre_projection.weight", "mtp_pre_proj.weight", NULL};
    static const char *const posts[] = {"nextn.post_projection.weight", "mtp_post_proj.weight", NULL};
    const char *pre = first_tensor(m, pres), *post = first_tensor(m, posts);
    if (L->st == NX_OK && (!pre || !post)) {
        L->st = nx_fail(L->err, NX_ERR_FORMAT, "%s: missing the pre/post projection (%s, %s)", L->path,
                        mtp ? "mtp_pre_proj.weight" : "nextn.pre_projection.weight",
                        mtp ? "mtp_post_proj.weight" : "nextn.post_projection.weight");
        return;
    }
    a->pre = tensor2(L, pre, 2 * (int64_t)a->n_bb, a->E, NX_T_MATMUL);
    a->post = tensor2(L, post, a->E, a->n_bb, NX_T_MATMUL);
    if (L->st != NX_OK) return;
    a->layers = calloc((size_t)a->n_layer, sizeof *a->layers);
    if (!a->layers) {
        L->st = nx_fail(L->err, NX_ERR_NOMEM, "out of memory");
        return;
    }
    load_layers(L);
    if (L->st == NX_OK) load_masked_head(L);
}

static nx_status alloc_scratch(nx_assistant *a, int cap, nx_error *err) {
    const g4_hparams *thp = &a->gm->hp;
    const size_t N = (size_t)cap, E = (size_t)a->E, B = (size_t)a->n_bb;
    const size_t EB = E > B ? E : B;
    a->cap = cap;
    a->z = malloc(N * 2 * B * sizeof(float));
    a->x = malloc(N * E * sizeof(float));
    a->u = malloc(N * EB * sizeof(float));
    a->a = malloc(N * E * sizeof(float));
    a->q = malloc(N * (size_t)a->max_q * sizeof(float));
    a->o = malloc(N * (size_t)a->max_q * sizeof(float));
    a->g = malloc(N * (size_t)a->max_ff * sizeof(float));
    a->up = malloc(N * (size_t)a->max_ff * sizeof(float));
    a->hf = malloc(N * E * sizeof(float));
    a->lg = malloc(N * (size_t)a->n_vocab * sizeof(float));
    a->rc_full = malloc(N * (size_t)(thp->n_rot_full > 0 ? thp->n_rot_full : 1) * sizeof(float));
    a->rc_swa = malloc(N * (size_t)(thp->n_rot_swa > 0 ? thp->n_rot_swa : 1) * sizeof(float));
    a->drow = malloc(E * sizeof(float));
    a->ends = malloc(N * sizeof *a->ends);
    const int nt = nx_threadpool_size(a->tctx->tp);
    size_t aw = 16;
    for (int il = 0; il < a->n_layer; il++) {
        const size_t w = nx_attend_work_floats(a->layers[il].nh, a->layers[il].nkv, a->layers[il].hd);
        if (w > aw) aw = w;
    }
    a->thr_stride = (aw + 15) & ~(size_t)15;
    a->alo = malloc(N * sizeof(int32_t));
    a->ahi = malloc(N * sizeof(int32_t));
    a->thr = malloc((size_t)nt * a->thr_stride * sizeof(float));
    bool ok = a->z && a->x && a->u && a->a && a->q && a->o && a->g && a->up && a->hf && a->lg && a->rc_full &&
              a->rc_swa && a->drow && a->ends && a->thr && a->alo && a->ahi;
    if (a->masked) {
        a->cl = malloc(N * (size_t)a->n_c * sizeof(float));
        a->cand = malloc((size_t)a->n_c * sizeof *a->cand);
        a->cval = malloc((size_t)a->top_k * (size_t)a->vpc * sizeof(float));
        ok = ok && a->cl && a->cand && a->cval;
    }
    return ok ? NX_OK : nx_fail(err, NX_ERR_NOMEM, "cannot allocate the assistant scratch for %d rows", cap);
}

void nx_assistant_free(nx_assistant *a) {
    if (!a) return;
    free(a->z); free(a->x); free(a->u); free(a->a); free(a->q); free(a->o); free(a->g); free(a->up); free(a->hf);
    free(a->lg); free(a->cl); free(a->rc_full); free(a->rc_swa); free(a->thr); free(a->drow); free(a->cval); free(a->ends);
    free(a->alo); free(a->ahi); free(a->cand); free(a->rows); free(a->layers);
    nx_matmul_scratch_free(&a->mm);
    nx_model_free(a->m);
    free(a);
}

nx_status nx_assistant_load(nx_ctx *target, const char *path, const nx_assistant_opts *opts, int max_rows,
                            nx_assistant **out, nx_error *err) {
    *out = NULL;
    if (!target || !path) return nx_fail(err, NX_ERR_INVALID_ARG, "assistant: no target context or no path");
    if (strcmp(target->model->arch, "gemma4") || !target->model->arch_data)
        return nx_fail(err, NX_ERR_UNSUPPORTED,
                       "the assistant drafter needs a gemma4 target; the target model's architecture is '%s'",
                       target->model->arch);
    nx_model_params mp = nx_model_default_params();
    mp.n_threads = 1;
    nx_model *m = NULL;
    nx_status st = nx_model_load(path, &mp, &m);
    if (st != NX_OK) return nx_fail(err, st, "assistant '%s': %s", path, nx_last_error());
    if (!is_drafter_arch(m->arch)) {
        st = nx_fail(err, NX_ERR_UNSUPPORTED,
                     "%s: architecture '%s' is not an assistant drafter (gemma4-assistant / gemma4_mtp)", path, m->arch);
        nx_model_free(m);
        return st;
    }
    nx_assistant *a = calloc(1, sizeof *a);
    if (!a) {
        nx_model_free(m);
        return nx_fail(err, NX_ERR_NOMEM, "out of memory");
    }
    a->tctx = target;
    a->gm = g4_of(target->model);
    a->m = m;
    a->opts = opts ? *opts : nx_assistant_default_opts();
    nx_matmul_scratch_init(&a->mm);
    as_loader L = {.a = a, .m = m, .path = path, .err = err, .st = NX_OK};
    validate_and_load(&L);
    if (L.st == NX_OK) L.st = alloc_scratch(a, max_rows > 0 ? max_rows : 1, err);
    if (L.st != NX_OK) {
        nx_assistant_free(a);
        return L.st;
    }
    *out = a;
    return NX_OK;
}

bool nx_assistant_masked(const nx_assistant *a) { return a && a->masked; }
int  nx_assistant_n_embd(const nx_assistant *a) { return a ? a->E : 0; }
int  nx_assistant_n_layer(const nx_assistant *a) { return a ? a->n_layer : 0; }
int  nx_assistant_n_centroids(const nx_assistant *a) { return a && a->masked ? a->n_c : 0; }
int  nx_assistant_centroid_top_k(const nx_assistant *a) { return a && a->masked ? a->top_k : 0; }

const int32_t *nx_assistant_centroid_tokens(const nx_assistant *a, int c, int *n) {
    if (n) *n = 0;
    if (!a || !a->masked || c < 0 || c >= a->n_c) return NULL;
    if (n) *n = a->vpc;
    return a->rows + (size_t)c * (size_t)a->vpc;
}

const float *nx_assistant_last_centroid_logits(const nx_assistant *a, int r) {
    if (!a || !a->masked || r < 0 || r >= a->cl_rows) return NULL;
    return a->cl + (size_t)r * (size_t)a->n_c;
}

/* ===== forward ===== */

typedef struct as_attn_job {
    nx_assistant *a;
    const as_layer *l;
    int n;
    const nx_pos *pos, *kv_end;
    const nx_seq_id *seq;
} as_attn_job;

static void attn_task(void *arg, int ith, int nth) {
    const as_attn_job *j = arg;
    nx_assistant *a = j->a;
    const as_layer *l = j->l;
    nx_attend_rows(a->tctx->kv, l->kv_layer, l->nh, l->nkv, l->hd, j->n, j->seq, a->alo, a->ahi, a->q,
                   (size_t)l->nh * l->hd, (size_t)l->hd, a->o, 1.0f, a->thr + (size_t)ith * a->thr_stride, ith, nth);
}

/* Visible target positions per row: causal by position (the query's own cell is not there), the
 * window on SWA layers, and a ring only holds its last cells. */
static void attn_ranges(nx_assistant *a, const as_layer *l, int n, const nx_pos *pos, const nx_pos *kv_end) {
    const nx_kv *kv = a->tctx->kv;
    const int cells = nx_kv_cells(kv, l->kv_layer), n_ctx = nx_kv_n_ctx(kv);
    for (int r = 0; r < n; r++) {
        const int p = pos[r], end = kv_end[r];
        a->ahi[r] = p < end - 1 ? p : end - 1;
        int lo = l->swa ? p - a->n_swa + 1 : 0;
        if (cells < n_ctx && lo < end - cells) lo = end - cells;
        a->alo[r] = lo;
    }
}

static inline nx_status mm(nx_assistant *a, const nx_tensor *w, const float *x, int n, int64_t ldx, float *y,
                           int64_t ldy, nx_error *err) {
    return nx_matmul(a->tctx->tp, &a->mm, w, x, n, ldx, y, ldy, err);
}

/* Logit of token t from hf (one head row), soft-capped like the dense logits. */
static float head_logit(nx_assistant *a, int t, const float *hf) {
    const nx_tensor *w = a->head;
    const char *row = (const char *)w->data + (size_t)t * w->nb[1];
    float v;
    if (w->type == NX_TYPE_F32) {
        v = nx_dot((const float *)row, hf, a->E);
    } else {
        nx_dequantize_row(w->type, row, a->drow, a->E);
        v = nx_dot(a->drow, hf, a->E);
    }
    if (a->softcap > 0) v = a->softcap * tanhf(v / a->softcap);
    return v;
}

/* Centroid-routed choice for one row: top_k centroids of cl, their tokens, argmax of the
 * tokens' logits (lg row when computed, else the head rows of the candidates only). Ties go to
 * the lowest token id, as an argmax over the full masked row would. prob: softmax over the
 * candidates. */
static nx_token masked_pick(nx_assistant *a, const float *cl, const float *lg, const float *hf, float *prob) {
    for (int c = 0; c < a->n_c; c++) {
        a->cand[c].v = isnan(cl[c]) ? -INFINITY : cl[c];
        a->cand[c].i = c;
    }
    qsort(a->cand, (size_t)a->n_c, sizeof *a->cand, cmp_cand);
    const int nc = a->top_k * a->vpc;
    int best = -1;
    float bv = -INFINITY;
    for (int k = 0, j = 0; k < a->top_k; k++) {
        const int32_t *row = a->rows + (size_t)a->cand[k].i * (size_t)a->vpc;
        for (int i = 0; i < a->vpc; i++, j++) {
            const int t = row[i];
            const float v = lg ? lg[t] : head_logit(a, t, hf);
            a->cval[j] = v;
            if (best < 0 || v > bv || (v == bv && t < best)) {
                best = t;
                bv = v;
            }
        }
    }
    if (prob) {
        double s = 0;
        for (int j = 0; j < nc; j++) s += exp((double)a->cval[j] - (double)bv);
        *prob = isfinite(bv) && s > 0 ? (float)(1.0 / s) : 0.0f;
    }
    return best < 0 ? 0 : best;
}

static nx_status forward_chunk(nx_assistant *a, int n, const nx_token *tok, const nx_pos *pos, const nx_seq_id *seq,
                               const nx_pos *kv_end, const float *h_in, float *h_out, float *logits, nx_token *next,
                               float *prob, nx_error *err) {
    const g4_model *gm = a->gm;
    const g4_hparams *thp = &gm->hp;
    const int E = a->E, B = a->n_bb, V = a->n_vocab;
    nx_status st;
    a->cl_rows = 0;
    /* x0 = pre_projection · [target embedding · sqrt(n_bb) ; h] */
    g4_embed(gm, tok, n, a->u);
    for (int r = 0; r < n; r++) {
        memcpy(a->z + (size_t)r * 2 * B, a->u + (size_t)r * B, (size_t)B * sizeof(float));
        memcpy(a->z + (size_t)r * 2 * B + B, h_in + (size_t)r * B, (size_t)B * sizeof(float));
        nx_rope_cache(&gm->rope_full, pos[r], a->rc_full + (size_t)r * thp->n_rot_full);
        nx_rope_cache(&gm->rope_swa, pos[r], a->rc_swa + (size_t)r * thp->n_rot_swa);
    }
    if ((st = mm(a, a->pre, a->z, n, 2 * (int64_t)B, a->x, E, err)) != NX_OK) return st;
    for (int il = 0; il < a->n_layer; il++) {
        const as_layer *l = &a->layers[il];
        const int H = l->nh, D = l->hd;
        const nx_rope_params *rp = g4_rope(gm, l->swa);   /* the target's settings (Decision: README 17) */
        const float *rc = l->swa ? a->rc_swa : a->rc_full;
        nx_rmsnorm_rows(a->u, a->x, l->attn_norm, E, n, a->eps);
        if ((st = mm(a, l->wq, a->u, n, E, a->q, (int64_t)H * D, err)) != NX_OK) return st;
        for (int r = 0; r < n; r++) {
            float *qr = a->q + (size_t)r * H * D;
            for (int h = 0; h < H; h++) nx_rmsnorm(qr + (size_t)h * D, qr + (size_t)h * D, l->q_norm, D, a->eps);
            nx_rope_apply(qr, H, D, rp, rc + (size_t)r * rp->n_rot);
        }
        attn_ranges(a, l, n, pos, kv_end);
        as_attn_job job = {.a = a, .l = l, .n = n, .pos = pos, .kv_end = kv_end, .seq = seq};
        nx_threadpool_run(a->tctx->tp, attn_task, &job);
        if ((st = mm(a, l->wo, a->o, n, (int64_t)H * D, a->a, E, err)) != NX_OK) return st;
        nx_rmsnorm_rows(a->a, a->a, l->post_attn_norm, E, n, a->eps);
        nx_add(a->x, a->x, a->a, n * E);
        const int F = l->n_ff;
        nx_rmsnorm_rows(a->u, a->x, l->ffn_norm, E, n, a->eps);
        if ((st = mm(a, l->gate, a->u, n, E, a->g, F, err)) != NX_OK) return st;
        if ((st = mm(a, l->up, a->u, n, E, a->up, F, err)) != NX_OK) return st;
        nx_geglu(a->g, a->g, a->up, n * F);
        if ((st = mm(a, l->down, a->g, n, F, a->a, E, err)) != NX_OK) return st;
        nx_rmsnorm_rows(a->a, a->a, l->post_ffw_norm, E, n, a->eps);
        nx_add(a->x, a->x, a->a, n * E);
        if (l->has_out_scale) nx_scale(a->x, a->x, l->out_scale, n * E);
    }
    nx_rmsnorm_rows(a->hf, a->x, a->output_norm, E, n, a->eps);
    if (h_out && (st = mm(a, a->post, a->hf, n, E, h_out, B, err)) != NX_OK) return st;
    /* dense logits only when asked for, or when the dense head chooses (argmax in place) */
    float *lg = logits ? logits : (!a->masked && (next || prob) ? a->lg : NULL);
    if (lg) {
        if ((st = mm(a, a->head, a->hf, n, E, lg, V, err)) != NX_OK) return st;
        if (a->softcap > 0) nx_softcap(lg, lg, n * V, a->softcap);
    }
    if (!next && !prob) return NX_OK;
    if (a->masked && (st = mm(a, a->centroids, a->hf, n, E, a->cl, a->n_c, err)) != NX_OK) return st;
    if (a->masked) a->cl_rows = n;
    for (int r = 0; r < n; r++) {
        float p = 0;
        nx_token t;
        if (a->masked)
            t = masked_pick(a, a->cl + (size_t)r * a->n_c, lg ? lg + (size_t)r * V : NULL, a->hf + (size_t)r * E, &p);
        else
            t = nx_argmax_prob(lg + (size_t)r * V, V, &p);
        if (next) next[r] = t;
        if (prob) prob[r] = p;
    }
    return NX_OK;
}

nx_status nx_assistant_forward(nx_assistant *a, int n, const nx_token *tok, const nx_pos *pos, const nx_seq_id *seq,
                               const nx_pos *kv_end, const float *h_in, float *h_out, float *logits, nx_token *next,
                               float *prob, nx_error *err) {
    if (!a || n < 0 || (n > 0 && (!tok || !pos || !seq || !h_in)))
        return nx_fail(err, NX_ERR_INVALID_ARG, "assistant forward: bad arguments");
    const nx_kv *kv = a->tctx->kv;
    const int n_seq = nx_kv_n_seq(kv), n_ctx = nx_kv_n_ctx(kv);
    nx_pos *ends = a->ends;
    for (int r0 = 0; r0 < n; r0 += a->cap) {
        const int nr = n - r0 < a->cap ? n - r0 : a->cap;
        for (int r = r0; r < r0 + nr; r++) {
            if (tok[r] < 0 || tok[r] >= a->n_vocab)
                return nx_fail(err, NX_ERR_INVALID_ARG, "assistant: token %d outside the vocabulary [0, %d)", tok[r],
                               a->n_vocab);
            if (seq[r] < 0 || seq[r] >= n_seq)
                return nx_fail(err, NX_ERR_INVALID_ARG, "assistant: sequence %d outside [0, %d)", seq[r], n_seq);
            if (pos[r] < 0 || pos[r] >= n_ctx)
                return nx_fail(err, NX_ERR_INVALID_ARG, "assistant: position %d outside [0, %d)", pos[r], n_ctx);
            const int len = nx_kv_seq_len(kv, seq[r]);
            const int e = kv_end && kv_end[r] < len ? kv_end[r] : len;
            ends[r - r0] = e < 0 ? 0 : e;
        }
        const size_t B = (size_t)a->n_bb, V = (size_t)a->n_vocab;
        nx_status st = forward_chunk(a, nr, tok + r0, pos + r0, seq + r0, ends, h_in + (size_t)r0 * B,
                                     h_out ? h_out + (size_t)r0 * B : NULL, logits ? logits + (size_t)r0 * V : NULL,
                                     next ? next + r0 : NULL, prob ? prob + r0 : NULL, err);
        if (st != NX_OK) return st;
    }
    return NX_OK;
}

int nx_assistant_n_bb(const nx_assistant *a) { return a ? a->n_bb : 0; }
nx_asst_positions nx_assistant_positions(const nx_assistant *a) { return a ? a->opts.positions : NX_ASST_POS_CONSTANT; }
int nx_assistant_target_n_ctx(const nx_assistant *a) { return a ? nx_ctx_n_ctx(a->tctx) : 0; }
