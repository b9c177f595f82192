/*
 * genmodel_inflate.c — `gen-model --inflate`: a real model made large without changing what it
 * predicts (contract in genmodel.h).
 *
 * Plan first, write second: every output tensor is either borrowed from the source mapping
 * (unchanged bytes) or a job that the GGUF writer's fill callback runs when it reaches that
 * tensor (zeroed projections, widened FFNs). So the writer streams the file and memory holds
 * one tensor at a time. Random rows are drawn from a splitmix64 stream seeded per tensor: the
 * output is the same for a given seed on every machine and whatever order tensors are made in.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "genmodel.h"
#include "gguf.h"
#include "quant/quant.h"

#define IF_MAX_LAYERS 4096

/* What the fill callback does for one output tensor. */
typedef enum {
    IF_ZERO,        /* every value 0 (dead layers' output projections and ffn_down) */
    IF_WIDEN_ROWS,  /* ffn_gate / ffn_up: the source rows, then random rows */
    IF_WIDEN_COLS,  /* ffn_down: each source row, then zero columns */
} if_op;

typedef struct if_job {
    const nx_tensor *src;
    if_op    op;
    nx_type  type;          /* output type */
    int64_t  ne0, rows;     /* output shape (2-D) */
    uint64_t seed;
    float    scale;         /* std of the random rows */
} if_job;

typedef struct if_layer {
    int  src;               /* source block index */
    bool dead;              /* appended trunk layer: output projections and ffn_down zero */
} if_layer;

static uint64_t if_next(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t if_hash(const char *s) {
    uint64_t h = 1469598103934665603ull;   /* FNV-1a */
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

/* ===== The fill callback: one output tensor's bytes ===== */

static nx_status if_fill(void *user, const char *name, void *dst, size_t nbytes, nx_error *err) {
    const if_job *j = user;
    const size_t row = nx_row_size(j->type, j->ne0);
    if (row * (size_t)j->rows != nbytes) return nx_fail(err, NX_ERR_INTERNAL, "inflate: %s: size mismatch", name);
    float *x = calloc((size_t)j->ne0, sizeof *x);
    if (!x) return nx_fail(err, NX_ERR_NOMEM, "inflate: out of memory for %s", name);
    char *out = dst;
    nx_status st = NX_OK;
    const nx_tensor *s = j->src;
    const size_t srow = s->nb[1];
    const bool same = s->type == j->type;
    const int64_t src_rows = nx_tensor_nrows(s), src_ne0 = s->ne[0];
    uint64_t rng = j->seed;
    /* uniform on [-a, a] has std a / sqrt(3) */
    const float a = j->scale * 1.7320508f, inv = 1.0f / 9007199254740992.0f;
    for (int64_t r = 0; r < j->rows && st == NX_OK; r++) {
        char *o = out + (size_t)r * row;
        bool q = true;   /* quantize x into o */
        if (j->op == IF_ZERO) {
            if (r > 0) { memcpy(o, out, row); q = false; }   /* x stays all zero */
        } else if (j->op == IF_WIDEN_ROWS && r < src_rows) {
            if (same) { memcpy(o, (const char *)s->data + (size_t)r * srow, row); q = false; }
            else if (!nx_dequantize_row(s->type, (const char *)s->data + (size_t)r * srow, x, j->ne0)) st = NX_ERR_UNSUPPORTED;
        } else if (j->op == IF_WIDEN_ROWS) {
            for (int64_t i = 0; i < j->ne0; i++)
                x[i] = a * (2.0f * (float)(if_next(&rng) >> 11) * inv - 1.0f);
        } else if (same) {   /* IF_WIDEN_COLS: the source bytes exactly, then the zero tail (x is all zero) */
            const size_t head = nx_row_size(j->type, src_ne0);
            memcpy(o, (const char *)s->data + (size_t)r * srow, head);
            if (nx_quantize_row(j->type, x, o + head, j->ne0 - src_ne0) != row - head) st = NX_ERR_UNSUPPORTED;
            q = false;
        } else if (!nx_dequantize_row(s->type, (const char *)s->data + (size_t)r * srow, x, src_ne0)) {
            st = NX_ERR_UNSUPPORTED;   /* x[src_ne0..) stays zero */
        }
        if (st == NX_OK && q && nx_quantize_row(j->type, x, o, j->ne0) != row) st = NX_ERR_UNSUPPORTED;
    }
    free(x);
    if (st != NX_OK)
        return nx_fail(err, st, "inflate: cannot convert %s from %s to %s", name, nx_type_name(s->type),
                       nx_type_name(j->type));
    return NX_OK;
}

/* ===== Planning ===== */

typedef struct if_plan {
    const nx_gguf *g;
    const char    *arch;
    int n_block, n_main, n_nextn, interval;
    int L;                       /* trunk layers out */
    int64_t n_ff_in, n_ff_out, n_embd;
    if_layer *layers;            /* L + n_nextn */
    if_job   *jobs;              /* the fill callbacks' state (borrowed by the writer until it writes) */
    size_t    n_jobs;
} if_plan;

/* The source block of tensor i and the name after "blk.N."; -1 for a non-layer tensor. */
static int if_block_of(const nx_gguf *g, int64_t i, const char **suffix) {
    const char *nm = nx_gguf_tensor(g, i)->name;
    int b = -1, n = 0;
    if (sscanf(nm, "blk.%d.%n", &b, &n) == 1 && n > 0) { *suffix = nm + n; return b; }
    *suffix = nm;
    return -1;
}

static const nx_tensor *if_find(const nx_gguf *g, int block, const char *suffix) {
    char nm[256];
    snprintf(nm, sizeof nm, "blk.%d.%s", block, suffix);
    int64_t i = nx_gguf_find_tensor(g, nm);
    return i < 0 ? NULL : nx_gguf_tensor(g, i);
}

static bool if_is_ffn(const char *sfx) {
    return !strcmp(sfx, "ffn_gate.weight") || !strcmp(sfx, "ffn_up.weight") || !strcmp(sfx, "ffn_down.weight");
}

static bool if_is_out_proj(const char *sfx) {
    return !strcmp(sfx, "ssm_out.weight") || !strcmp(sfx, "attn_output.weight");
}

/* Checks the source and chooses, for every output layer, the source layer it copies. */
static nx_status if_plan_layers(if_plan *p, const nx_inflate_opts *o, nx_error *err) {
    const nx_gguf *g = p->g;
    uint64_t len = 0;
    const char *arch = nx_gguf_get_str(g, "general.architecture", &len);
    if (!arch || len != 6 || memcmp(arch, "qwen35", 6))
        return nx_fail(err, NX_ERR_UNSUPPORTED, "inflate: %s: only qwen35 models (dense FFN) are supported",
                       o->from_path);
    p->arch = "qwen35";
    int64_t v;
    if (!nx_gguf_get_int(g, "qwen35.block_count", &v) || v < 1 || v > IF_MAX_LAYERS)
        return nx_fail(err, NX_ERR_FORMAT, "inflate: bad or missing qwen35.block_count");
    p->n_block = (int)v;
    p->n_nextn = nx_gguf_get_int(g, "qwen35.nextn_predict_layers", &v) ? (int)v : 0;
    if (p->n_nextn < 0 || p->n_nextn >= p->n_block)
        return nx_fail(err, NX_ERR_FORMAT, "inflate: nextn_predict_layers %d with block_count %d", p->n_nextn, p->n_block);
    p->n_main = p->n_block - p->n_nextn;
    p->interval = nx_gguf_get_int(g, "qwen35.full_attention_interval", &v) ? (int)v : 4;
    if (p->interval < 1) return nx_fail(err, NX_ERR_FORMAT, "inflate: full_attention_interval %d", p->interval);
    p->L = o->n_layer > 0 ? o->n_layer : p->n_main;
    if (p->L < p->n_main || p->L + p->n_nextn > IF_MAX_LAYERS)
        return nx_fail(err, NX_ERR_INVALID_ARG, "inflate: --n-layer %d: must be %d (the source's trunk) .. %d", p->L,
                       p->n_main, IF_MAX_LAYERS - p->n_nextn);
    /* FFN widths from the tensors themselves: every block has a dense FFN or none */
    for (int64_t i = 0; i < nx_gguf_n_tensors(g); i++) {
        const char *sfx;
        if (if_block_of(g, i, &sfx) < 0) continue;
        if (strstr(sfx, "_exps") || strstr(sfx, "_shexp") || !strncmp(sfx, "ffn_gate_inp", 12))
            return nx_fail(err, NX_ERR_UNSUPPORTED, "inflate: %s: MoE FFNs are not supported", nx_gguf_tensor(g, i)->name);
    }
    for (int b = 0; b < p->n_block; b++) {
        const nx_tensor *gt = if_find(g, b, "ffn_gate.weight"), *up = if_find(g, b, "ffn_up.weight"),
                        *dn = if_find(g, b, "ffn_down.weight");
        if (!gt && !up && !dn) continue;
        if (!gt || !up || !dn || gt->n_dims != 2 || up->n_dims != 2 || dn->n_dims != 2 || gt->ne[1] != up->ne[1] ||
            gt->ne[1] != dn->ne[0] || gt->ne[0] != dn->ne[1] || up->ne[0] != gt->ne[0])
            return nx_fail(err, NX_ERR_FORMAT, "inflate: block %d: ffn_gate/ffn_up/ffn_down missing or of mismatched shapes", b);
        if (gt->ne[1] > p->n_ff_in) p->n_ff_in = gt->ne[1];
        p->n_embd = gt->ne[0];
    }
    if (p->n_ff_in == 0) return nx_fail(err, NX_ERR_FORMAT, "inflate: %s has no dense FFN", o->from_path);
    p->n_ff_out = o->n_ff > 0 ? o->n_ff : p->n_ff_in;
    if (p->n_ff_out < p->n_ff_in)
        return nx_fail(err, NX_ERR_INVALID_ARG, "inflate: --n-ff %lld is below the source's %lld",
                       (long long)p->n_ff_out, (long long)p->n_ff_in);
    p->layers = calloc((size_t)(p->L + p->n_nextn), sizeof *p->layers);
    if (!p->layers) return nx_fail(err, NX_ERR_NOMEM, "inflate: out of memory");
    for (int l = 0; l < p->n_main; l++) p->layers[l] = (if_layer){l, false};
    for (int l = p->n_main; l < p->L; l++) {
        /* the kind the pattern gives this index; the source's kinds by tensor presence */
        const bool want_ssm = (l + 1) % p->interval != 0;
        int src = -1;
        for (int k = 0; k < p->n_main && src < 0; k++) {
            int j = (l + k) % p->n_main;   /* the layer one source cycle back, else the next of that kind */
            if ((if_find(g, j, "ssm_conv1d.weight") != NULL) == want_ssm &&
                (want_ssm || if_find(g, j, "attn_q.weight") != NULL))
                src = j;
        }
        if (src < 0)
            return nx_fail(err, NX_ERR_UNSUPPORTED, "inflate: layer %d should be %s but the source has no such layer", l,
                           want_ssm ? "Gated DeltaNet" : "full attention");
        p->layers[l] = (if_layer){src, true};
    }
    for (int l = 0; l < p->n_nextn; l++) p->layers[p->L + l] = (if_layer){p->n_main + l, false};
    return NX_OK;
}

static nx_status if_add_kv(if_plan *p, nx_gguf_writer *w, nx_error *err) {
    const nx_gguf *g = p->g;
    const int n_out = p->L + p->n_nextn;
    for (int64_t i = 0; i < nx_gguf_n_kv(g); i++) {
        const char *key = nx_gguf_key(g, i);
        nx_status st = nx_gguf_copy_kv(w, g, i);
        if (st) return nx_fail(err, st, "inflate: cannot copy key %s", key);
        if (strncmp(key, "qwen35.", 7)) continue;
        const char *k = key + 7;
        if (!strcmp(k, "block_count")) {
            st = nx_gguf_set_u32(w, key, (uint32_t)n_out);
        } else if (!strcmp(k, "feed_forward_length") && nx_gguf_kv_type(g, i) != NX_GGUF_ARRAY) {
            st = nx_gguf_set_u32(w, key, (uint32_t)p->n_ff_out);
        } else if (nx_gguf_kv_type(g, i) == NX_GGUF_ARRAY && nx_gguf_arr_n(g, i) == (uint64_t)p->n_block &&
                   strcmp(k, "rope.dimension_sections")) {
            /* a per-layer array: each output layer takes its source layer's entry */
            const nx_gguf_vtype et = nx_gguf_arr_type(g, i);
            const size_t es = et == NX_GGUF_U8 || et == NX_GGUF_I8 || et == NX_GGUF_BOOL ? 1
                            : et == NX_GGUF_U16 || et == NX_GGUF_I16                     ? 2
                            : et == NX_GGUF_U32 || et == NX_GGUF_I32 || et == NX_GGUF_F32 ? 4
                            : et == NX_GGUF_U64 || et == NX_GGUF_I64 || et == NX_GGUF_F64 ? 8 : 0;
            const uint8_t *src = nx_gguf_arr_data(g, i);
            const bool ffl = !strcmp(k, "feed_forward_length");
            if (!es || !src || (ffl && et != NX_GGUF_U32 && et != NX_GGUF_I32))
                return nx_fail(err, NX_ERR_UNSUPPORTED, "inflate: per-layer key %s of element type %s", key,
                               nx_gguf_vtype_name(et));
            uint8_t *dst = malloc((size_t)n_out * es);
            if (!dst) return nx_fail(err, NX_ERR_NOMEM, "inflate: out of memory");
            for (int l = 0; l < n_out; l++) {
                memcpy(dst + (size_t)l * es, src + (size_t)p->layers[l].src * es, es);
                uint32_t f;
                memcpy(&f, dst + (size_t)l * es, 4);
                if (ffl && f) { f = (uint32_t)p->n_ff_out; memcpy(dst + (size_t)l * es, &f, 4); }
            }
            st = nx_gguf_set_arr(w, key, et, dst, (uint64_t)n_out);
            free(dst);
        }
        if (st) return nx_fail(err, st, "inflate: cannot set %s", key);
    }
    uint64_t len = 0;
    const char *name = nx_gguf_get_str(g, "general.name", &len);
    char nm[256];
    snprintf(nm, sizeof nm, "%.*s-inflated-L%d-ff%lld", name ? (int)(len < 160 ? len : 160) : 5, name ? name : "model",
             p->L, (long long)p->n_ff_out);
    nx_status st = nx_gguf_set_str(w, "general.name", nm);
    return st ? nx_fail(err, st, "inflate: cannot set general.name") : NX_OK;
}

/* One output layer's tensors, in the source layer's order. */
static nx_status if_add_layer(if_plan *p, nx_gguf_writer *w, const nx_inflate_opts *o, int l, nx_error *err) {
    const nx_gguf *g = p->g;
    const if_layer *ly = &p->layers[l];
    for (int64_t i = 0; i < nx_gguf_n_tensors(g); i++) {
        const char *sfx;
        if (if_block_of(g, i, &sfx) != ly->src) continue;
        const nx_tensor *t = nx_gguf_tensor(g, i);
        char nm[300];
        snprintf(nm, sizeof nm, "blk.%d.%s", l, sfx);
        const char *own = nm;   /* the writer copies names */
        const bool ffn = if_is_ffn(sfx), zero = ly->dead && (if_is_out_proj(sfx) || !strcmp(sfx, "ffn_down.weight"));
        if (!ffn && !zero) {
            nx_status st = nx_gguf_add_tensor(w, own, t->type, t->n_dims, t->ne, t->data);
            if (st) return nx_fail(err, st, "inflate: cannot add %s", own);
            continue;
        }
        if (t->n_dims != 2) return nx_fail(err, NX_ERR_FORMAT, "inflate: %s is not 2-D", t->name);
        if_job *j = &p->jobs[p->n_jobs++];
        const bool down = !strcmp(sfx, "ffn_down.weight");
        *j = (if_job){.src = t, .type = ffn && o->set_wtype ? o->wtype : t->type, .ne0 = t->ne[0], .rows = t->ne[1],
                      .seed = o->seed ^ if_hash(nm), .scale = 1.0f / sqrtf((float)p->n_embd)};
        if (ffn && down) j->ne0 = p->n_ff_out;
        else if (ffn) j->rows = p->n_ff_out;
        j->op = zero ? IF_ZERO : down ? IF_WIDEN_COLS : IF_WIDEN_ROWS;
        const nx_type_traits *tr = nx_type_info(j->type);
        if (!tr || !tr->quantizable || !nx_can_quantize(j->type) ||
            (j->type != t->type && !nx_can_dequantize(t->type)))
            return nx_fail(err, NX_ERR_UNSUPPORTED, "inflate: cannot write %s as %s", own, nx_type_name(j->type));
        if (j->ne0 % tr->blck_size)
            return nx_fail(err, NX_ERR_INVALID_ARG, "inflate: %s: %lld columns are not a multiple of %s's block size %lld"
                           "%s", own, (long long)j->ne0, nx_type_name(j->type), (long long)tr->blck_size,
                           down ? " (choose --n-ff accordingly)" : "");
        int64_t ne[2] = {j->ne0, j->rows};
        nx_status st = nx_gguf_add_tensor_fill(w, own, j->type, 2, ne, if_fill, j);
        if (st) return nx_fail(err, st, "inflate: cannot add %s", own);
    }
    return NX_OK;
}

nx_status nx_genmodel_inflate(const nx_inflate_opts *o, nx_inflate_info *info, nx_error *err) {
    if (!o || !o->from_path || !o->out_path) return nx_fail(err, NX_ERR_INVALID_ARG, "inflate: NULL argument");
    if_plan p = {0};
    nx_gguf *g = NULL;
    nx_gguf_writer *w = NULL;
    nx_status st = nx_gguf_open(o->from_path, &g, err);
    if (st) return st;
    p.g = g;
    st = if_plan_layers(&p, o, err);
    const int64_t n_t = nx_gguf_n_tensors(g);
    /* each output layer has at most as many tensors as the largest source block: n_t bounds it */
    const size_t cap = (size_t)n_t * (size_t)(p.L + p.n_nextn + 1);
    if (!st) {
        p.jobs = calloc(cap, sizeof *p.jobs);
        w = nx_gguf_writer_create();
        if (!p.jobs || !w) st = nx_fail(err, NX_ERR_NOMEM, "inflate: out of memory");
    }
    if (!st) st = if_add_kv(&p, w, err);
    for (int64_t i = 0; !st && i < n_t; i++) {   /* non-layer tensors first, as the source has them */
        const char *sfx;
        if (if_block_of(g, i, &sfx) >= 0) continue;
        const nx_tensor *t = nx_gguf_tensor(g, i);
        st = nx_gguf_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data);
        if (st) st = nx_fail(err, st, "inflate: cannot add %s", t->name);
    }
    for (int l = 0; !st && l < p.L + p.n_nextn; l++) st = if_add_layer(&p, w, o, l, err);
    if (!st) st = nx_gguf_writer_write(w, o->out_path, err);
    if (!st && info) {
        struct stat sb;
        *info = (nx_inflate_info){p.n_main, p.L, p.n_nextn, p.n_ff_in, p.n_ff_out,
                                  stat(o->out_path, &sb) == 0 ? (uint64_t)sb.st_size : 0};
    }
    nx_gguf_writer_free(w);
    free(p.jobs);
    free(p.layers);
    nx_gguf_close(g);
    return st;
}
