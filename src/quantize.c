/*
 * quantize.c — `nextn quantize`: presets, llama.cpp's per-tensor type rules, and the streamed
 * rewrite of a GGUF (quantize.h). The row kernels are src/quant/'s; this file decides types,
 * copies metadata and feeds rows through them on the thread pool.
 */
#include "quantize.h"
#include <ctype.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "gguf.h"
#include "quant/quant.h"
#include "threads.h"

/* ===== Presets (llama_ftype ids) ===== */

enum {
    FT_F32 = 0, FT_F16 = 1, FT_Q4_0 = 2, FT_Q4_1 = 3, FT_Q8_0 = 7, FT_Q5_0 = 8, FT_Q5_1 = 9,
    FT_Q2_K = 10, FT_Q3_K_S = 11, FT_Q3_K_M = 12, FT_Q3_K_L = 13, FT_Q4_K_S = 14, FT_Q4_K_M = 15,
    FT_Q5_K_S = 16, FT_Q5_K_M = 17, FT_Q6_K = 18, FT_IQ4_NL = 25, FT_IQ4_XS = 30, FT_BF16 = 32,
};

static const nx_quant_preset g_presets[] = {
    {"Q4_0", FT_Q4_0, NX_TYPE_Q4_0, "4.5 bpw, 32-value blocks, one scale"},
    {"Q4_1", FT_Q4_1, NX_TYPE_Q4_1, "5.0 bpw, scale + min"},
    {"Q5_0", FT_Q5_0, NX_TYPE_Q5_0, "5.5 bpw"},
    {"Q5_1", FT_Q5_1, NX_TYPE_Q5_1, "6.0 bpw"},
    {"Q2_K", FT_Q2_K, NX_TYPE_Q2_K, "2.6 bpw K-quant mix"},
    {"Q3_K_S", FT_Q3_K_S, NX_TYPE_Q3_K, "3.4 bpw"},
    {"Q3_K_M", FT_Q3_K_M, NX_TYPE_Q3_K, "3.9 bpw mix"},
    {"Q3_K_L", FT_Q3_K_L, NX_TYPE_Q3_K, "4.3 bpw mix"},
    {"IQ4_NL", FT_IQ4_NL, NX_TYPE_IQ4_NL, "4.5 bpw non-linear"},
    {"IQ4_XS", FT_IQ4_XS, NX_TYPE_IQ4_XS, "4.25 bpw non-linear"},
    {"Q4_K_S", FT_Q4_K_S, NX_TYPE_Q4_K, "4.6 bpw"},
    {"Q4_K_M", FT_Q4_K_M, NX_TYPE_Q4_K, "4.9 bpw mix (Q6_K output, attn_v / ffn_down in some layers)"},
    {"Q5_K_S", FT_Q5_K_S, NX_TYPE_Q5_K, "5.5 bpw"},
    {"Q5_K_M", FT_Q5_K_M, NX_TYPE_Q5_K, "5.7 bpw mix"},
    {"Q6_K", FT_Q6_K, NX_TYPE_Q6_K, "6.6 bpw"},
    {"Q8_0", FT_Q8_0, NX_TYPE_Q8_0, "8.5 bpw"},
    {"F16", FT_F16, NX_TYPE_F16, "16 bpw"},
    {"BF16", FT_BF16, NX_TYPE_BF16, "16 bpw, bfloat16"},
    {"F32", FT_F32, NX_TYPE_F32, "32 bpw"},
};
#define N_PRESETS ((int)(sizeof g_presets / sizeof g_presets[0]))

const nx_quant_preset *nx_quant_preset_at(int i) { return i >= 0 && i < N_PRESETS ? &g_presets[i] : NULL; }

const nx_quant_preset *nx_quant_preset_find(const char *name) {
    if (!name || !*name) return NULL;
    static const struct { const char *alias, *name; } aliases[] = {{"Q4_K", "Q4_K_M"}, {"Q5_K", "Q5_K_M"}, {"Q3_K", "Q3_K_M"}};
    for (size_t a = 0; a < sizeof aliases / sizeof aliases[0]; a++)
        if (!strcasecmp(name, aliases[a].alias)) name = aliases[a].name;
    char *end;
    const long id = strtol(name, &end, 10);
    for (int i = 0; i < N_PRESETS; i++)
        if (*end ? !strcasecmp(name, g_presets[i].name) : g_presets[i].ftype == id) return &g_presets[i];
    return NULL;
}

/* ===== Per-tensor rules ===== */

bool nx_quant_use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

static bool ends_with(const char *s, const char *suf) {
    size_t n = strlen(s), k = strlen(suf);
    return n >= k && !strcmp(s + n - k, suf);
}

bool nx_quant_wants(const char *name, int n_dims, bool leave_output) {
    if (n_dims < 2 || !ends_with(name, "weight")) return false;
    static const char *const never[] = {"_norm.weight", "ffn_gate_inp.weight", "ssm_conv1d.weight", "shortconv.conv.weight",
                                        "attn_rel_b.weight", "time_mix_first.weight"};
    for (size_t i = 0; i < sizeof never / sizeof never[0]; i++)
        if (strstr(name, never[i])) return false;
    if (!strcmp(name, "position_embd.weight") || !strcmp(name, "token_types.weight")) return false;
    if (leave_output && !strcmp(name, "output.weight")) return false;
    return true;
}

nx_type nx_quant_fallback_type(nx_type t, int64_t ne0) {
    const nx_type_traits *tr = nx_type_info(t);
    if (!tr || ne0 % tr->blck_size == 0) return t;
    nx_type f;
    switch (t) {
    case NX_TYPE_Q2_K: case NX_TYPE_Q3_K: case NX_TYPE_IQ4_XS: f = NX_TYPE_IQ4_NL; break;
    case NX_TYPE_Q4_K: f = NX_TYPE_Q5_0; break;
    case NX_TYPE_Q5_K: f = NX_TYPE_Q5_1; break;
    case NX_TYPE_Q6_K: f = NX_TYPE_Q8_0; break;
    default: f = NX_TYPE_F16; break;
    }
    return ne0 % nx_type_info(f)->blck_size == 0 ? f : NX_TYPE_F16;
}

/* Which layer of how many: MoE files name their layers (their ffn_down tensors are several per
 * layer); dense ones count ffn_down tensors in file order (llama.cpp's layer_info). */
static void layer_of(const nx_quant_ctx *q, const char *name, int counter, int *i, int *n) {
    *i = counter;
    *n = q->n_layer;
    int il;
    if (q->n_expert > 1 && sscanf(name, "blk.%d.", &il) == 1) *i = il;
}

nx_type nx_quant_rule_type(const nx_quant_preset *p, nx_quant_ctx *q, const char *name, const int64_t *ne) {
    const int ft = p->ftype;
    nx_type t = p->type;
    if (!strcmp(name, "output.weight") || (!q->has_output && !strcmp(name, "token_embd.weight"))) {
        if (ne[0] % NX_QK_K != 0) t = NX_TYPE_Q8_0;
        else if (t != NX_TYPE_Q8_0) t = NX_TYPE_Q6_K;
    } else if (strstr(name, "attn_v.weight")) {
        const int i = q->i_attention_wv, n = q->n_attention_wv;
        if (ft == FT_Q2_K) t = q->n_gqa >= 4 ? NX_TYPE_Q4_K : NX_TYPE_Q3_K;
        else if (ft == FT_Q3_K_M) t = i < 2 ? NX_TYPE_Q5_K : NX_TYPE_Q4_K;
        else if (ft == FT_Q3_K_L) t = NX_TYPE_Q5_K;
        else if ((ft == FT_IQ4_NL || ft == FT_IQ4_XS) && q->n_gqa >= 4) t = NX_TYPE_Q5_K;
        else if ((ft == FT_Q4_K_M || ft == FT_Q5_K_M) && nx_quant_use_more_bits(i, n)) t = NX_TYPE_Q6_K;
        else if (ft == FT_Q4_K_S && i < 4) t = NX_TYPE_Q5_K;
        if (q->n_expert == 8) t = NX_TYPE_Q8_0;   /* shared by all experts: cheap to keep good */
        q->i_attention_wv++;
    } else if (strstr(name, "ffn_down")) {
        int i, n;
        layer_of(q, name, q->i_ffn_down, &i, &n);
        if (ft == FT_Q2_K) t = NX_TYPE_Q3_K;
        else if (ft == FT_Q3_K_M) t = i < n / 16 ? NX_TYPE_Q5_K : NX_TYPE_Q4_K;
        else if (ft == FT_Q3_K_L) t = NX_TYPE_Q5_K;
        else if ((ft == FT_Q4_K_M || ft == FT_Q5_K_M) && nx_quant_use_more_bits(i, n)) t = NX_TYPE_Q6_K;
        else if (ft == FT_Q4_K_S && i < n / 8) t = NX_TYPE_Q5_K;
        else if ((ft == FT_IQ4_NL || ft == FT_IQ4_XS) && i < n / 8 && !q->has_imatrix) t = NX_TYPE_Q5_K;
        else if (ft == FT_Q4_0 && q->has_imatrix && i < n / 8) t = NX_TYPE_Q4_1;
        else if (ft == FT_Q5_0 && q->has_imatrix && i < n / 8) t = NX_TYPE_Q5_1;
        q->i_ffn_down++;
    } else if (strstr(name, "attn_output.weight")) {
        if (q->n_expert == 8) {
            if (ft == FT_Q2_K || ft == FT_Q3_K_S || ft == FT_Q3_K_M || ft == FT_IQ4_NL || ft == FT_Q4_K_S ||
                ft == FT_Q4_K_M || ft == FT_IQ4_XS)
                t = NX_TYPE_Q5_K;
        } else if (ft == FT_Q2_K) t = NX_TYPE_Q3_K;
        else if (ft == FT_Q3_K_M) t = NX_TYPE_Q4_K;
        else if (ft == FT_Q3_K_L) t = NX_TYPE_Q5_K;
    } else if (strstr(name, "attn_qkv.weight")) {
        if (ft == FT_Q3_K_M || ft == FT_Q3_K_L) t = NX_TYPE_Q4_K;
        else if (ft == FT_Q4_K_M) t = NX_TYPE_Q5_K;
        else if (ft == FT_Q5_K_M) t = NX_TYPE_Q6_K;
    }
    return nx_quant_fallback_type(t, ne[0]);
}

/* ===== The streamed rewrite ===== */

typedef struct qjob {
    const nx_tensor *t;
    nx_type to;
    float *imat;            /* [n_mat][ne0] importances, or NULL */
    int64_t n_mat;
    nx_threadpool *tp;
    float *rows;            /* [nth][ne0] dequantized rows */
    /* per fill call */
    char *dst;
    int64_t bad_row;        /* first row that failed (-1: none) */
} qjob;

/* Drop the source pages of a tensor once it is written: the input is a private read-only file
 * mapping, so this only un-maps them from the process (they come back from the file if read
 * again) and resident memory stays at about one tensor instead of growing to the file size. */
static void release_pages(const void *p, size_t n) {
    const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE), a = ((uintptr_t)p + pg - 1) & ~(pg - 1),
                    b = ((uintptr_t)p + n) & ~(pg - 1);
    if (b > a) madvise((void *)a, b - a, MADV_DONTNEED);
}

static void q_task(void *arg, int ith, int nth) {
    qjob *j = arg;
    const nx_tensor *t = j->t;
    const int64_t ne0 = t->ne[0], nrows = nx_tensor_nrows(t), per_mat = nrows / (j->n_mat ? j->n_mat : 1);
    const size_t rs_in = t->nb[1], rs_out = nx_row_size(j->to, ne0);
    float *f = j->rows + (size_t)ith * (size_t)ne0;
    long lo, hi;
    nx_split_range((long)nrows, ith, nth, &lo, &hi);
    for (long r = lo; r < hi; r++) {
        const float *qw = j->imat ? j->imat + (size_t)(r / per_mat) * (size_t)ne0 : NULL;
        if (!nx_dequantize_row(t->type, (const char *)t->data + (size_t)r * rs_in, f, ne0) ||
            nx_quantize_row_imat(j->to, f, j->dst + (size_t)r * rs_out, ne0, qw) != rs_out) {
            __atomic_compare_exchange_n(&j->bad_row, &(int64_t){-1}, (int64_t)r, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
            return;
        }
    }
}

static nx_status q_fill(void *user, const char *name, void *dst, size_t nbytes, nx_error *err) {
    qjob *j = user;
    if (j->to == j->t->type) {   /* copied as it is */
        memcpy(dst, j->t->data, nbytes);
        release_pages(j->t->data, j->t->nbytes);
        return NX_OK;
    }
    j->dst = dst;
    j->bad_row = -1;
    nx_threadpool_run(j->tp, q_task, j);
    release_pages(j->t->data, j->t->nbytes);
    if (j->bad_row >= 0)
        return nx_fail(err, NX_ERR_FORMAT, "quantize: %s row %lld: cannot convert %s -> %s (non-finite values?)", name,
                       (long long)j->bad_row, nx_type_name(j->t->type), nx_type_name(j->to));
    return NX_OK;
}

static bool is_float_type(nx_type t) { return t == NX_TYPE_F32 || t == NX_TYPE_F16 || t == NX_TYPE_BF16; }

static int get_hp(const nx_gguf *g, const char *arch, const char *suffix) {
    char key[256];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    int64_t v;
    return nx_gguf_get_int(g, key, &v) && v > 0 && v < (1 << 30) ? (int)v : 0;
}

/* The importances of tensor t from entry e, one row of ne0 per matrix (expert); NULL + error on
 * a shape mismatch. */
static float *imatrix_rows(const nx_imatrix_entry *e, const nx_tensor *t, int64_t *n_mat, nx_error *err) {
    const int64_t ne0 = t->ne[0], nm = t->n_dims >= 3 ? t->ne[2] * t->ne[3] : 1;
    float *v = malloc((size_t)(ne0 * nm) * sizeof *v);
    if (!v) { nx_fail(err, NX_ERR_NOMEM, "quantize: out of memory"); return NULL; }
    if (e->n_per_mat == ne0 && e->n_mat == nm) {
        for (int64_t m = 0; m < nm; m++) nx_imatrix_values(e, m, v + m * ne0);
    } else if (e->n_mat == 1 && e->n_per_mat == ne0 * nm) {   /* legacy files fold the experts into one row */
        nx_imatrix_values(e, 0, v);
    } else {
        free(v);
        nx_fail(err, NX_ERR_INVALID_ARG, "quantize: imatrix entry %s has %lld x %lld values, the tensor needs %lld x %lld",
                t->name, (long long)e->n_per_mat, (long long)e->n_mat, (long long)ne0, (long long)nm);
        return NULL;
    }
    *n_mat = nm;
    return v;
}

static bool same_file(const char *a, const char *b) {
    struct stat sa, sb;
    if (!strcmp(a, b)) return true;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

nx_status nx_quantize_model(const nx_quantize_opts *o, nx_quantize_info *info, nx_error *err) {
    if (!o || !o->in_path || !o->out_path || !o->preset) return nx_fail(err, NX_ERR_INVALID_ARG, "quantize: missing arguments");
    if (same_file(o->in_path, o->out_path))
        return nx_fail(err, NX_ERR_INVALID_ARG, "quantize: the output would overwrite the input %s", o->in_path);
    nx_gguf *g = NULL;
    nx_status st = nx_gguf_open(o->in_path, &g, err);
    if (st != NX_OK) return st;
    const int64_t nt = nx_gguf_n_tensors(g);
    nx_gguf_writer *w = nx_gguf_writer_create();
    qjob *jobs = calloc((size_t)(nt ? nt : 1), sizeof *jobs);
    nx_threadpool *tp = NULL;
    nx_quantize_info inf = {0};
    regex_t *rx = calloc((size_t)(o->n_overrides > 0 ? o->n_overrides : 1), sizeof *rx);
    int n_rx = 0;
    int64_t max_ne0 = 0;
    if (!w || !jobs || !rx) { st = nx_fail(err, NX_ERR_NOMEM, "quantize: out of memory"); goto done; }
    for (; n_rx < o->n_overrides; n_rx++)
        if (regcomp(&rx[n_rx], o->overrides[n_rx].pattern, REG_EXTENDED | REG_NOSUB) != 0) {
            st = nx_fail(err, NX_ERR_INVALID_ARG, "quantize: --tensor-type: bad regular expression '%s'", o->overrides[n_rx].pattern);
            goto done;
        }

    /* metadata: everything but the split bookkeeping, then the new file type */
    for (int64_t i = 0; i < nx_gguf_n_kv(g); i++) {
        const char *k = nx_gguf_key(g, i);
        if (!strncmp(k, "split.", 6)) continue;
        if ((st = nx_gguf_copy_kv(w, g, i)) != NX_OK) { nx_fail(err, st, "quantize: cannot copy key %s", k); goto done; }
    }
    nx_gguf_set_u32(w, "general.quantization_version", 2);
    nx_gguf_set_u32(w, "general.file_type", (uint32_t)o->preset->ftype);
    if (o->imatrix) {
        const nx_imatrix *im = o->imatrix;
        nx_gguf_set_str(w, "quantize.imatrix.file", o->imatrix_path ? o->imatrix_path : "");
        if (nx_imatrix_n_datasets(im)) nx_gguf_set_str(w, "quantize.imatrix.dataset", nx_imatrix_dataset(im, 0));
        nx_gguf_set_i32(w, "quantize.imatrix.entries_count", (int32_t)nx_imatrix_n_entries(im));
        nx_gguf_set_i32(w, "quantize.imatrix.chunks_count", nx_imatrix_chunk_count(im));
    }

    /* what the rules need: llama.cpp's counts over the tensor list */
    uint64_t alen;
    const char *arch_s = nx_gguf_get_str(g, "general.architecture", &alen);
    char arch[128] = "";
    if (arch_s) snprintf(arch, sizeof arch, "%.*s", (int)(alen < 120 ? alen : 120), arch_s);
    nx_quant_ctx q = {.n_layer = get_hp(g, arch, "block_count"), .n_expert = get_hp(g, arch, "expert_count"),
                      .has_imatrix = o->imatrix != NULL};
    const int nh = get_hp(g, arch, "attention.head_count"), nkv = get_hp(g, arch, "attention.head_count_kv");
    q.n_gqa = nh && nkv ? nh / nkv : 0;
    for (int64_t i = 0; i < nt; i++) {
        const char *nm = nx_gguf_tensor(g, i)->name;
        if (strstr(nm, "attn_v.weight") || strstr(nm, "attn_qkv.weight") || strstr(nm, "attn_kv_b.weight")) q.n_attention_wv++;
        if (!strcmp(nm, "output.weight")) q.has_output = true;
    }
    const bool quant_default = nx_type_info(o->preset->type)->blck_size > 1;

    for (int64_t i = 0; i < nt; i++) {
        const nx_tensor *t = nx_gguf_tensor(g, i);
        qjob *j = &jobs[i];
        j->t = t;
        j->to = t->type;
        if (nx_quant_wants(t->name, t->n_dims, o->leave_output)) {
            nx_type to = o->pure || !quant_default ? nx_quant_fallback_type(o->preset->type, t->ne[0])
                                                   : nx_quant_rule_type(o->preset, &q, t->name, t->ne);
            if (o->embd_type != NX_TYPE_COUNT && !strcmp(t->name, "token_embd.weight")) to = o->embd_type;
            if (o->output_type != NX_TYPE_COUNT && !strcmp(t->name, "output.weight")) to = o->output_type;
            for (int r = 0; r < n_rx; r++)
                if (regexec(&rx[r], t->name, 0, NULL, 0) == 0) { to = o->overrides[r].type; break; }
            j->to = nx_quant_fallback_type(to, t->ne[0]);
        }
        const uint64_t out_bytes = (uint64_t)nx_row_size(j->to, t->ne[0]) * (uint64_t)nx_tensor_nrows(t);
        inf.bytes_in += t->nbytes;
        inf.bytes_out += out_bytes;
        bool weighted = false;
        if (j->to == t->type) {
            st = nx_gguf_add_tensor_fill(w, t->name, t->type, t->n_dims, t->ne, q_fill, j);
        } else {
            if (!is_float_type(t->type) && !o->allow_requantize) {
                st = nx_fail(err, NX_ERR_INVALID_ARG,
                             "quantize: requantizing from type %s is disabled (tensor %s; --allow-requantize)",
                             nx_type_name(t->type), t->name);
                goto done;
            }
            if (!nx_can_dequantize(t->type) || !nx_can_quantize(j->to)) {
                st = nx_fail(err, NX_ERR_UNSUPPORTED, "quantize: %s: cannot convert %s -> %s", t->name,
                             nx_type_name(t->type), nx_type_name(j->to));
                goto done;
            }
            const nx_imatrix_entry *e = o->imatrix && nx_quant_uses_imatrix(j->to) ? nx_imatrix_find(o->imatrix, t->name) : NULL;
            if (e && !(j->imat = imatrix_rows(e, t, &j->n_mat, err))) { st = err ? err->code : NX_ERR_INVALID_ARG; goto done; }
            weighted = j->imat != NULL;
            inf.n_quantized++;
            inf.n_weighted += weighted;
            if (t->ne[0] > max_ne0) max_ne0 = t->ne[0];
            st = nx_gguf_add_tensor_fill(w, t->name, j->to, t->n_dims, t->ne, q_fill, j);
        }
        if (st != NX_OK) { nx_fail(err, st, "quantize: cannot add tensor %s", t->name); goto done; }
        if (o->progress)
            o->progress(o->progress_user, (int)i, (int)nt, t->name, t->ne, t->type, j->to, t->nbytes, out_bytes, weighted);
    }
    inf.n_tensors = (int)nt;

    tp = nx_threadpool_create(o->n_threads, err);
    if (!tp) { st = nx_fail(err, NX_ERR_NOMEM, "quantize: cannot create the thread pool"); goto done; }
    float *rows = malloc((size_t)nx_threadpool_size(tp) * (size_t)(max_ne0 ? max_ne0 : 1) * sizeof(float));
    if (!rows) { st = nx_fail(err, NX_ERR_NOMEM, "quantize: out of memory"); goto done; }
    for (int64_t i = 0; i < nt; i++) {
        jobs[i].tp = tp;
        jobs[i].rows = rows;
    }
    st = nx_gguf_writer_write(w, o->out_path, err);
    free(rows);
done:
    for (int r = 0; r < n_rx; r++) regfree(&rx[r]);
    free(rx);
    if (jobs)
        for (int64_t i = 0; i < nt; i++) free(jobs[i].imat);
    free(jobs);
    nx_threadpool_free(tp);
    nx_gguf_writer_free(w);
    nx_gguf_close(g);
    if (st == NX_OK && info) *info = inf;
    return st;
}
