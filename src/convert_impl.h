/*
 * convert_impl.h — what the `nextn convert` modules share (not a public interface): the parsed
 * config, the tensor plan (one cv_tensor per GGUF tensor: its source ranges, shape, type and value
 * transform) and the metadata helpers. convert.c owns the entry point, the qwen35 mapping and the
 * streamed fill; convert_gemma4.c the gemma4 / gemma4-assistant config, names and keys.
 */
#ifndef NX_CONVERT_IMPL_H
#define NX_CONVERT_IMPL_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>
#include "convert.h"
#include "gguf.h"
#include "safetensors.h"

#define CV_MAX_DIM (1 << 20)
#define CV_CHUNK ((int64_t)1 << 20)   /* values per streamed read */

/* Gemma 4 hyper-parameters (llama.cpp's Gemma4Model / Gemma4AssistantModel read the same keys). */
typedef struct cv_g4 {
    bool on, assistant;
    int n_layer, n_embd, n_ff, n_head, n_kv_swa, n_kv_full;   /* n_kv_full -1: no num_global_key_value_heads */
    int hd_full, hd_swa, n_vocab, n_ctx, n_swa, n_shared, P;
    int n_expert, n_expert_used, n_ff_exp;
    bool double_wide, tied;
    bool have_softcap, have_theta_swa;
    double eps, theta_full, theta_swa, prf_full, prf_swa, softcap;
    uint8_t *swa;            /* [n_layer] 1 = sliding_attention (owned) */
    int backbone, n_centroids, centroid_top_k;   /* assistant */
    bool have_ordered, use_ordered;
} cv_g4;

typedef struct cv_hparams {
    int n_layer;       /* num_hidden_layers (trunk) */
    int n_mtp;         /* mtp_num_hidden_layers */
    int n_embd, n_ff, n_head, n_head_kv, head_dim, n_vocab, n_ctx;
    int interval, d_conv, dk, dv, nk, nv, n_rot;
    int sections[4];
    bool moe;
    bool head_dim_given;   /* llama.cpp writes key_length / value_length only then */
    int n_expert, n_expert_used, n_ff_exp, n_ff_shexp;
    double eps, rope_theta, rope_factor;
    const char *rope_type;
} cv_hparams;

typedef struct cv_config {
    char  *text;
    cJSON *root;
    const cJSON *text_cfg;   /* text_config, or NULL */
    const cJSON *rope;       /* rope_parameters / rope_scaling, or NULL */
    const char *path;
} cv_config;

enum { V_NONE, V_ROWS, V_COLS };

/* A run of source values: an output tensor is one or more (stacked experts, split gate_up). */
typedef struct cv_seg {
    int64_t src, first, count;   /* safetensors index, value range */
} cv_seg;

typedef struct cv_tensor {
    char     name[128];
    int64_t  src;            /* safetensors index (of the first segment) */
    cv_seg  *segs;           /* NULL: the whole of src; else n_segs runs (owned) */
    int      n_segs;
    nx_type  type;
    int      n_dims;
    int64_t  ne[4];
    bool     plus1;          /* stored 1 + w */
    bool     negexp;         /* stored -exp(w) */
    int      vmode;          /* V-head reorder: rows from v_off, or columns */
    int64_t  v_off, v_hd;
    int      order;          /* sort key: -1 token_embd, layer, INT32_MAX the rest */
    int      expert;         /* planning only: expert id of a per-expert tensor (-1 fused) */
    bool     ints;           /* an integer source written as I32 (a token permutation) */
    float   *gen;            /* generated values (no source, src -1; owned), e.g. rope_freqs */
    struct cv_ctx *cx;
} cv_tensor;

typedef struct cv_ctx {
    nx_safetensors *st;
    cv_hparams hp;           /* qwen35 */
    cv_g4 g4;                /* gemma4 / gemma4-assistant (g4.on) */
    nx_type outtype;
    cv_tensor *t;
    int64_t n;
    int64_t done;
    const nx_convert_opts *o;
} cv_ctx;


/* config.json access: text_config first (llama.cpp merges it over the top level), then the top level. */
const cJSON *nx_cv_cfg_get(const cv_config *c, const char *key);
nx_status nx_cv_cfg_int(const cv_config *c, const char *key, bool required, int def, int lo, int hi, int *out,
                        nx_error *err);
bool nx_cv_is_file(const char *path);
nx_status nx_cv_read_json(const char *path, char **text, cJSON **root, nx_error *err);
bool nx_cv_ends_with(const char *s, const char *suf);
/* llama.cpp's output type rule for one planned tensor (1-D, norms, routers stay F32). */
nx_type nx_cv_pick_type(const cv_tensor *t, nx_type out);
int nx_cv_ftype_of(nx_type t);
nx_status nx_cv_kv_u32(nx_gguf_writer *w, const char *arch, const char *suffix, int64_t v);
nx_status nx_cv_kv_f32(nx_gguf_writer *w, const char *arch, const char *suffix, double v);

/* gemma4 (convert_gemma4.c). hparams: config -> g (g->swa owned; free with nx_cv_g4_free).
 * map: one checkpoint tensor -> t (name, order, ints): 1 mapped, 0 skipped, -1 fails with why.
 * extra: the generated tensors (rope_freqs) appended to cx->t. kv: the model keys. */
nx_status nx_cv_g4_hparams(const cv_config *c, bool assistant, cv_g4 *g, nx_error *err);
void      nx_cv_g4_free(cv_g4 *g);
int       nx_cv_g4_map(const cv_g4 *g, const nx_st_tensor *s, cv_tensor *t, char *why, size_t why_cap);
nx_status nx_cv_g4_extra(cv_ctx *cx, nx_error *err);
/* Added tokens llama.cpp's Gemma4Model types USER_DEFINED so the chat parser sees them. */
extern const char *const nx_cv_g4_visible_tokens[];
nx_status nx_cv_g4_kv(nx_gguf_writer *w, const cv_g4 *g, const char *name, nx_type outtype);

#endif
