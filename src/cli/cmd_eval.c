/*
 * cmd_eval.c — `nextn eval`: the golden interface (issue 4 item 7).
 *
 *   nextn eval -m FILE.gguf --prompt-ids 1,2,3 | --prompt-ids-file F [--logits-out FILE.f32]
 *              [--hidden-out FILE.f32] [--greedy N] [--greedy-logits-out FILE.f32] [--batch B]
 *              [-ub N] [-t N] [-c N] [-ctk TYPE] [-ctv TYPE]
 *              [--drafts K [--draft-model A] [--mtp-logits-out F] [--mtp-hidden-out F]
 *               [--draft-logits-out F] [--draft-hidden-out F]]
 *              [--spec N [--spec-slack S] [speculative flags, spec_params.h]]
 *
 * Decodes the prompt (one batch, or chunks of B rows; --batch 1 = token by token) at positions
 * 0..n-1 of sequence 0, writes the full-vocab logits of every prompt row ([n][n_vocab] float32
 * little-endian) and the post-norm hidden of every row ([n][n_embd]), then continues greedily
 * for N tokens (one decode per token) and prints them as a JSON array on stdout. Weights stay
 * as stored; the KV cache is F16 (as llama.cpp) unless -ctk / -ctv say otherwise (f32, bf16, q8_0, q4_0).
 *
 * --drafts K (issue 5 item 5): the drafter golden interface. The MTP head is warmed over the
 * prompt (row q = token q + hidden q-1, zeros for q = 0), id_last = the greedy token after the
 * prompt, then K chained greedy draft steps; prints the layout of golden drafts.json (id_last,
 * draft ids, per step the input, position, argmax, margin, softmax probability, top-10 ids and
 * logits) instead of the greedy array. --mtp-*-out write the prompt rows' MTP logits / hidden,
 * --draft-*-out the steps'.
 * --drafts K --draft-model A (issue 6 item 2): the same layout from the gemma4 assistant (no warmup: it
 * reads the target KV). Step 1 = (id_last, hidden n-1) at position n; step s+1 = (the token chosen
 * at step s, its post_projection output); positions constant n, or n+s with --draft-positions
 * increment. The top level is the dense-head chain; when the assistant has the centroid head a
 * `masked_head` section follows (the chain of masked-head choices: argmax = the masked choice,
 * margin / probability / top-10 of the dense logits, dense_argmax, and the centroid fields:
 * centroid_logits, top_centroids, masked_top10, masked_top1_top2_margin, n_candidates) unless
 * --assistant-dense-head;
 * --masked-head requires that head. --masked-draft-logits-out / --masked-draft-hidden-out write that
 * chain's dense logits / hidden.
 * --spec N: a greedy speculative run of N tokens in a fresh context (default --spec-type mtp; with
 * --draft-model / -md F: assistant for a Gemma 4 assistant GGUF, else draft; --draft-max 3, fixed k, p_min 0; --spec-slack 2 = the golden trace's budget rule) printed in the
 * layout of golden spec_trace.json (rounds with drafts, committed ids, accepted counts;
 * plain_decode rounds for k = 0).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "cli/cli.h"
#include "core/io.h"
#include "kernels/ops.h"
#include "nextn.h"
#include "spec/assistant.h"
#include "spec/engine.h"
#include "spec/mtp.h"

static void eval_usage(FILE *f) {
    fprintf(f,
            "usage: nextn eval -m FILE.gguf (--prompt-ids 1,2,3 | --prompt-ids-file F) [--logits-out FILE.f32]\n"
            "                  [--hidden-out FILE.f32] [--greedy N] [--greedy-logits-out FILE.f32] [--batch B]\n"
            "                  [-ub N] [-t N] [-c N] [-ctk TYPE] [-ctv TYPE]\n"
            "                  [--drafts K [--mtp-logits-out F] [--mtp-hidden-out F] [--draft-logits-out F]\n"
            "                   [--draft-hidden-out F] [--draft-model A [--masked-head] [--assistant-dense-head]\n"
            "                   [--draft-positions constant|increment] [--masked-draft-logits-out F]\n"
            "                   [--masked-draft-hidden-out F]]]\n"
            "                  [--spec N [--spec-slack S] [--spec-type T -md F --draft-max N ...]]\n"
            "Prompt logits [n][n_vocab] and post-norm hidden [n][n_embd] as float32 LE; the greedy continuation\n"
            "is printed as a JSON array of ids. --batch B decodes the prompt in chunks of B (1 = token by token).\n"
            "--drafts K prints K chained MTP drafts after the prompt (layout of golden drafts.json); --spec N runs\n"
            "N greedy speculative tokens and prints the rounds (layout of golden spec_trace.json); with -md F and\n"
            "no --spec-type, F drafts as an assistant (a Gemma 4 assistant GGUF) or as a draft model.\n");
}

/* Ids separated by commas / whitespace (a JSON array's brackets are accepted too). */
static int parse_ids(const char *s, int **out, int *n_out) {
    int cap = 64, n = 0;
    int *ids = malloc((size_t)cap * sizeof *ids);
    if (!ids) return -1;
    const char *p = s;
    for (;;) {
        while (*p && (*p == ',' || *p == ' ' || *p == '\t' || *p == '\n' || *p == '\r' || *p == '[' || *p == ']')) p++;
        if (!*p) break;
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > 0x7fffffff) { free(ids); return -1; }
        if (n == cap) {
            cap *= 2;
            int *q = realloc(ids, (size_t)cap * sizeof *ids);
            if (!q) { free(ids); return -1; }
            ids = q;
        }
        ids[n++] = (int)v;
        p = end;
    }
    *out = ids;
    *n_out = n;
    return 0;
}

static int parse_cache(const char *v, nx_cache_type *t) {
    return nx_cache_type_parse(v, t) ? 0 : -1;
}

static int write_f32(const char *path, const float *x, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) { fprintf(stderr, "nextn eval: cannot open %s: %s\n", path, strerror(errno)); return -1; }
    size_t w = fwrite(x, sizeof(float), n, f);
    if (fclose(f) != 0 || w != n) { fprintf(stderr, "nextn eval: cannot write %s\n", path); return -1; }
    return 0;
}

/* ===== --drafts K: the drafter golden interface ===== */

static cJSON *json_ints(const int *x, int n) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(x[i]));
    return a;
}

/* One drafts.json step of logits row (n_vocab V): input, position, argmax (chosen: the token the
 * chain feeds on; < 0 = the row's argmax), margin, argmax probability, top-10. *am = the row's argmax. */
static cJSON *step_json(int s, int tok, int p, const float *row, int V, int chosen, int *am) {
    int top[10] = {0}, got = 0;
    float topv[10] = {0};
    nx_error e = {0};
    if (nx_topk(row, V, V < 10 ? V : 10, top, topv, &got, &e) != NX_OK) {
        fprintf(stderr, "nextn eval: %s\n", e.msg);
        return NULL;
    }
    float prob = 0;
    *am = nx_argmax_prob(row, V, &prob);
    cJSON *st = cJSON_CreateObject(), *t10 = cJSON_CreateObject(), *tl = cJSON_CreateArray();
    if (!st || !t10 || !tl) {
        cJSON_Delete(st); cJSON_Delete(t10); cJSON_Delete(tl);
        fprintf(stderr, "nextn eval: out of memory\n");
        return NULL;
    }
    cJSON_AddNumberToObject(st, "step", s + 1);
    cJSON_AddNumberToObject(st, "input_token", tok);
    cJSON_AddNumberToObject(st, "position", p);
    cJSON_AddNumberToObject(st, "argmax", chosen >= 0 ? chosen : *am);
    cJSON_AddNumberToObject(st, "top1_top2_margin", got > 1 ? (double)topv[0] - (double)topv[1] : 0.0);
    cJSON_AddNumberToObject(st, "argmax_softmax_prob", prob);
    for (int i = 0; i < got; i++) cJSON_AddItemToArray(tl, cJSON_CreateNumber(topv[i]));
    cJSON_AddItemToObject(t10, "ids", json_ints(top, got));
    cJSON_AddItemToObject(t10, "logits", tl);
    cJSON_AddItemToObject(st, "top10", t10);
    return st;
}

static int print_json(cJSON *root) {
    char *txt = cJSON_Print(root);
    if (!txt) { fprintf(stderr, "nextn eval: out of memory\n"); return 1; }
    printf("%s\n", txt);
    cJSON_free(txt);
    return 0;
}

/* MTP rows over the prompt, then K chained greedy steps from id_last = argmax(last prompt row). */
static int eval_drafts(const nx_model *m, nx_ctx *ctx, const int *ids, int n, const float *hidden_all, const float *last, int K,
                       const char *mtp_logits_out, const char *mtp_hidden_out, const char *draft_logits_out,
                       const char *draft_hidden_out) {
    const int V = nx_model_n_vocab(m), E = nx_model_n_embd(m);
    nx_error e = {0};
    nx_mtp_head *h = NULL;
    if (nx_mtp_head_create(ctx, &h, &e) != NX_OK) {
        fprintf(stderr, "nextn eval: --drafts: %s\n", e.msg);
        return 1;
    }
    int rc = 1;
    float *hs = calloc((size_t)n, (size_t)E * sizeof(float));
    float *hm = malloc((size_t)n * E * sizeof(float));
    float *lg = mtp_logits_out ? malloc((size_t)n * V * sizeof(float)) : NULL;
    float *dl = malloc((size_t)(K > 0 ? K : 1) * V * sizeof(float)), *dh = malloc((size_t)(K > 0 ? K : 1) * E * sizeof(float));
    int *pos = malloc((size_t)n * sizeof(int)), *seq = calloc((size_t)n, sizeof(int)), *dt = malloc((size_t)(K + 1) * sizeof(int));
    cJSON *root = NULL;
    if (!hs || !hm || (mtp_logits_out && !lg) || !dl || !dh || !pos || !seq || !dt) {
        fprintf(stderr, "nextn eval: out of memory\n");
        goto done;
    }
    for (int i = 0; i < n; i++) pos[i] = i;
    memcpy(hs + E, hidden_all, (size_t)(n - 1) * E * sizeof(float));   /* row q: hidden q-1, zeros for q = 0 */
    if (nx_mtp_head_forward(h, n, ids, pos, seq, hs, hm, lg, &e) != NX_OK) {
        fprintf(stderr, "nextn eval: --drafts: %s\n", e.msg);
        goto done;
    }
    if (mtp_logits_out && write_f32(mtp_logits_out, lg, (size_t)n * V)) goto done;
    if (mtp_hidden_out && write_f32(mtp_hidden_out, hm, (size_t)n * E)) goto done;
    const int id_last = nx_argmax(last, V);
    root = cJSON_CreateObject();
    cJSON *steps = cJSON_CreateArray();
    cJSON_AddNumberToObject(root, "id_last", id_last);
    cJSON_AddNumberToObject(root, "id_last_position", n);
    int tok = id_last;
    const float *cond = hidden_all + (size_t)(n - 1) * E;
    for (int s = 0; s < K; s++) {
        int p = n + s, sq = 0;
        float *row = dl + (size_t)s * V, *hrow = dh + (size_t)s * E;
        if (nx_mtp_head_forward(h, 1, &tok, &p, &sq, cond, hrow, row, &e) != NX_OK) {
            fprintf(stderr, "nextn eval: --drafts: step %d: %s\n", s + 1, e.msg);
            goto done;
        }
        int am = 0;
        cJSON *st = step_json(s, tok, p, row, V, -1, &am);
        if (!st) goto done;
        cJSON_AddItemToArray(steps, st);
        dt[s] = am;
        tok = am;
        cond = hrow;
    }
    cJSON_AddItemToObject(root, "draft_tokens", json_ints(dt, K));
    cJSON_AddItemToObject(root, "steps", steps);
    if (draft_logits_out && write_f32(draft_logits_out, dl, (size_t)K * V)) goto done;
    if (draft_hidden_out && write_f32(draft_hidden_out, dh, (size_t)K * E)) goto done;
    rc = print_json(root);
done:
    cJSON_Delete(root);
    free(hs); free(hm); free(lg); free(dl); free(dh); free(pos); free(seq); free(dt);
    nx_mtp_head_free(h);
    return rc;
}

/* ===== --drafts K --draft-model A: the gemma4 assistant ===== */

typedef struct asst_args {
    const char *path;
    nx_asst_positions positions;
    bool dense_only, require_masked;
    const char *logits_out, *hidden_out, *masked_logits_out, *masked_hidden_out;
} asst_args;

/* The centroid-head fields of a masked step (drafts.json masked_head): centroid_logits, the
 * top_k centroids (ties: lower index), masked_top10 over their tokens' dense logits (ties: lower
 * id), its margin and n_candidates. row: the step's dense logits. */
static int masked_fields(const nx_assistant *a, const float *row, cJSON *st) {
    const int nc = nx_assistant_n_centroids(a), tk = nx_assistant_centroid_top_k(a);
    const float *cl = nx_assistant_last_centroid_logits(a, 0);
    if (!cl || nc <= 0 || tk <= 0 || tk > nc) {
        fprintf(stderr, "nextn eval: --drafts: the assistant computed no centroid logits\n");
        return 1;
    }
    int *top = malloc((size_t)tk * sizeof *top);
    bool *used = calloc((size_t)nc, sizeof *used);
    cJSON *cla = cJSON_CreateArray(), *tca = cJSON_CreateArray(), *m10 = cJSON_CreateObject();
    cJSON *mid = cJSON_CreateArray(), *mlg = cJSON_CreateArray();
    int rc = 1;
    if (!top || !used || !cla || !tca || !m10 || !mid || !mlg) {
        fprintf(stderr, "nextn eval: out of memory\n");
        goto done;
    }
    for (int c = 0; c < nc; c++) cJSON_AddItemToArray(cla, cJSON_CreateNumber(cl[c]));
    for (int k = 0; k < tk; k++) {   /* selection: top_k is small */
        int b = -1;
        for (int c = 0; c < nc; c++)
            if (!used[c] && (b < 0 || cl[c] > cl[b] || (isnan(cl[b]) && !isnan(cl[c])))) b = c;
        used[b] = true;
        top[k] = b;
        cJSON_AddItemToArray(tca, cJSON_CreateNumber(b));
    }
    /* best 10 candidates by insertion (ids ascending within a row is not promised) */
    int bid[10], nb = 0, n_cand = 0;
    float bv[10];
    for (int k = 0; k < tk; k++) {
        int cnt = 0;
        const int32_t *toks = nx_assistant_centroid_tokens(a, top[k], &cnt);
        for (int i = 0; toks && i < cnt; i++, n_cand++) {
            const int t = toks[i];
            const float v = isnan(row[t]) ? -INFINITY : row[t];
            int j = nb < 10 ? nb++ : 10;
            if (j == 10 && !(v > bv[9] || (v == bv[9] && t < bid[9]))) continue;
            if (j == 10) j = 9;
            while (j > 0 && (v > bv[j - 1] || (v == bv[j - 1] && t < bid[j - 1]))) {
                bv[j] = bv[j - 1];
                bid[j] = bid[j - 1];
                j--;
            }
            bv[j] = v;
            bid[j] = t;
        }
    }
    for (int i = 0; i < nb; i++) {
        cJSON_AddItemToArray(mid, cJSON_CreateNumber(bid[i]));
        cJSON_AddItemToArray(mlg, cJSON_CreateNumber(bv[i]));
    }
    cJSON_AddItemToObject(m10, "ids", mid);
    cJSON_AddItemToObject(m10, "logits", mlg);
    mid = mlg = NULL;
    cJSON_AddItemToObject(st, "centroid_logits", cla);
    cJSON_AddItemToObject(st, "top_centroids", tca);
    cJSON_AddItemToObject(st, "masked_top10", m10);
    cla = tca = m10 = NULL;
    cJSON_AddNumberToObject(st, "masked_top1_top2_margin", nb > 1 ? (double)bv[0] - (double)bv[1] : 0.0);
    cJSON_AddNumberToObject(st, "n_candidates", n_cand);
    rc = 0;
done:
    cJSON_Delete(cla); cJSON_Delete(tca); cJSON_Delete(m10); cJSON_Delete(mid); cJSON_Delete(mlg);
    free(top);
    free(used);
    return rc;
}

/* K chained steps of assistant a from (id_last, h0) at position n (constant) or n+s (increment);
 * steps JSON into *steps_out, chosen tokens into dt, dense logits [K][V] into dl, h_next [K][E]
 * into dh. masked: the chain follows the centroid head's choices and each step says dense_argmax. */
static int asst_chain(nx_assistant *a, int V, int E, int n, int id_last, const float *h0, int K,
                      nx_asst_positions positions, bool masked, float *dl, float *dh, int *dt, cJSON **steps_out) {
    cJSON *steps = cJSON_CreateArray();
    if (!steps) { fprintf(stderr, "nextn eval: out of memory\n"); return 1; }
    int tok = id_last;
    const float *cond = h0;
    for (int s = 0; s < K; s++) {
        nx_pos p = positions == NX_ASST_POS_INCREMENT ? n + s : n;
        nx_seq_id sq = 0;
        nx_token next = -1;
        nx_error e = {0};
        float *row = dl + (size_t)s * V, *hrow = dh + (size_t)s * E;
        if (nx_assistant_forward(a, 1, &tok, &p, &sq, NULL, cond, hrow, row, &next, NULL, &e) != NX_OK) {
            fprintf(stderr, "nextn eval: --drafts: step %d: %s\n", s + 1, e.msg);
            cJSON_Delete(steps);
            return 1;
        }
        int am = 0;
        cJSON *st = step_json(s, tok, (int)p, row, V, next, &am);
        if (!st) { cJSON_Delete(steps); return 1; }
        if (masked) cJSON_AddNumberToObject(st, "dense_argmax", am);
        if (masked && masked_fields(a, row, st)) {
            cJSON_Delete(st);
            cJSON_Delete(steps);
            return 1;
        }
        cJSON_AddItemToArray(steps, st);
        dt[s] = next;
        tok = next;
        cond = hrow;
    }
    *steps_out = steps;
    return 0;
}

static int eval_asst_drafts(nx_ctx *ctx, int V, int E, int n, const float *hidden_all, const float *last, int K,
                            const asst_args *aa) {
    nx_error e = {0};
    nx_assistant *ad = NULL, *am = NULL;
    nx_assistant_opts o = nx_assistant_default_opts();
    o.positions = aa->positions;
    int rc = 1;
    cJSON *root = NULL;
    const size_t k1 = (size_t)(K > 0 ? K : 1);
    float *dl = malloc(k1 * V * sizeof(float)), *dh = malloc(k1 * E * sizeof(float));
    float *ml = malloc(k1 * V * sizeof(float)), *mh = malloc(k1 * E * sizeof(float));
    int *dt = malloc(k1 * sizeof(int));
    if (!dl || !dh || !ml || !mh || !dt) { fprintf(stderr, "nextn eval: out of memory\n"); goto done; }
    /* the default load tells whether the file has a usable centroid head */
    if (nx_assistant_load(ctx, aa->path, &o, 1, &am, &e) != NX_OK) {
        fprintf(stderr, "nextn eval: --draft-model: %s\n", e.msg);
        goto done;
    }
    if (aa->require_masked && !nx_assistant_masked(am)) {
        fprintf(stderr, "nextn eval: --masked-head: %s has no centroid (masked) LM head\n", aa->path);
        goto done;
    }
    if (aa->require_masked && aa->dense_only) {
        fprintf(stderr, "nextn eval: --masked-head and --assistant-dense-head exclude each other\n");
        goto done;
    }
    if (!nx_assistant_masked(am) || aa->dense_only) {
        nx_assistant_free(am);
        am = NULL;
    }
    o.dense_head = true;
    if (nx_assistant_load(ctx, aa->path, &o, 1, &ad, &e) != NX_OK) {
        fprintf(stderr, "nextn eval: --draft-model: %s\n", e.msg);
        goto done;
    }
    const int id_last = nx_argmax(last, V);
    const float *h0 = hidden_all + (size_t)(n - 1) * E;
    root = cJSON_CreateObject();
    if (!root) { fprintf(stderr, "nextn eval: out of memory\n"); goto done; }
    cJSON_AddNumberToObject(root, "id_last", id_last);
    cJSON_AddNumberToObject(root, "id_last_position", n);
    cJSON_AddStringToObject(root, "convention",
                            aa->positions == NX_ASST_POS_INCREMENT
                                ? "gemma4 assistant, no KV of its own: step s (1-based) is one query at position n+s-1 "
                                  "over the target KV of the prompt; dense head"
                                : "gemma4 assistant, no KV of its own: every step is one query at the constant position "
                                  "n over the target KV of the prompt; dense head");
    cJSON *steps = NULL;
    if (asst_chain(ad, V, E, n, id_last, h0, K, aa->positions, false, dl, dh, dt, &steps)) goto done;
    cJSON_AddItemToObject(root, "draft_tokens", json_ints(dt, K));
    cJSON_AddItemToObject(root, "steps", steps);
    if (aa->logits_out && write_f32(aa->logits_out, dl, (size_t)K * V)) goto done;
    if (aa->hidden_out && write_f32(aa->hidden_out, dh, (size_t)K * E)) goto done;
    if (am) {
        cJSON *msteps = NULL, *mo = cJSON_CreateObject();
        if (!mo) { fprintf(stderr, "nextn eval: out of memory\n"); goto done; }
        cJSON_AddItemToObject(root, "masked_head", mo);
        cJSON_AddStringToObject(mo, "description", "chain of the centroid-routed (masked) head's choices; "
                                "margin, probability and top10 are of the dense logits along that chain");
        if (asst_chain(am, V, E, n, id_last, h0, K, aa->positions, true, ml, mh, dt, &msteps)) goto done;
        cJSON_AddItemToObject(mo, "draft_tokens", json_ints(dt, K));
        cJSON_AddItemToObject(mo, "steps", msteps);
        if (aa->masked_logits_out && write_f32(aa->masked_logits_out, ml, (size_t)K * V)) goto done;
        if (aa->masked_hidden_out && write_f32(aa->masked_hidden_out, mh, (size_t)K * E)) goto done;
    } else if (aa->masked_logits_out || aa->masked_hidden_out) {
        fprintf(stderr, "nextn eval: --masked-draft-*-out: no masked head in use (%s)\n",
                aa->dense_only ? "--assistant-dense-head" : "the assistant has no centroid head");
        goto done;
    }
    rc = print_json(root);
done:
    cJSON_Delete(root);
    free(dl); free(dh); free(ml); free(mh); free(dt);
    nx_assistant_free(ad);
    nx_assistant_free(am);
    return rc;
}

/* ===== --spec N: a speculative greedy run in the layout of spec_trace.json ===== */

typedef struct spec_rec {
    cJSON *rounds;
    int n_rounds;
} spec_rec;

static void spec_round(void *user, const nx_spec_round_info *r) {
    spec_rec *sr = user;
    cJSON *o = cJSON_CreateObject();
    if (!o) return;
    if (r->k == 0) {
        cJSON_AddNumberToObject(o, "round", sr->n_rounds);
        cJSON_AddTrueToObject(o, "plain_decode");
        cJSON_AddNumberToObject(o, "token", r->ids[0]);
        cJSON_AddNumberToObject(o, "n_past", r->pos + 1);
    } else {
        cJSON_AddNumberToObject(o, "n_past", r->pos);
        cJSON_AddNumberToObject(o, "id_last", r->id_last);
        cJSON_AddBoolToObject(o, "id_last_from_carry", sr->n_rounds > 0);
        cJSON_AddItemToObject(o, "drafts", json_ints(r->drafts, r->n_drafted));
        cJSON_AddNumberToObject(o, "n_max_used", r->k);
        cJSON_AddItemToObject(o, "ids", json_ints(r->ids, r->n_ids));
        cJSON_AddNumberToObject(o, "n_accepted", r->n_accepted);
        cJSON_AddNumberToObject(o, "round", sr->n_rounds);
    }
    cJSON_AddItemToArray(sr->rounds, o);
    sr->n_rounds++;
}

static int eval_spec(const nx_model *m, nx_ctx_params cp, const int *ids, int n, int N, const nx_spec_params *spec,
                     int slack) {
    nx_error e = {0};
    cp.n_ctx = cp.n_ctx > n + N ? cp.n_ctx : n + N;
    cp.n_seq_max = 1;
    nx_ctx *ctx = NULL;
    if (nx_ctx_create(m, &cp, &ctx) != NX_OK) { fprintf(stderr, "nextn eval: %s\n", nx_last_error()); return 1; }
    spec_rec sr = {.rounds = cJSON_CreateArray()};
    nx_spec_engine_params p = nx_spec_engine_default_params();
    p.spec = *spec;
    p.budget_slack = slack;
    p.on_round = spec_round;
    p.user = &sr;
    nx_spec_engine *en = NULL;
    int rc = 1;
    cJSON *root = NULL;
    nx_seq_id s = -1;
    nx_spec_request rq = {.prompt = ids, .n_prompt = n, .n_predict = N};
    if (nx_spec_engine_create(ctx, &p, &en, &e) != NX_OK || nx_spec_engine_add(en, &rq, &s, &e) != NX_OK) {
        fprintf(stderr, "nextn eval: --spec: %s\n", e.msg);
        goto done;
    }
    while (nx_spec_engine_n_active(en))
        if (nx_spec_engine_step(en, &e) != NX_OK) { fprintf(stderr, "nextn eval: --spec: %s\n", e.msg); goto done; }
    int n_out = 0;
    const nx_token *out = nx_spec_engine_output(en, s, &n_out);
    const nx_spec_stats *st = nx_spec_engine_stats_total(en);
    root = cJSON_CreateObject();
    cJSON_AddNumberToObject(root, "n_prompt", n);
    cJSON_AddNumberToObject(root, "n_predict", N);
    cJSON_AddItemToObject(root, "tokens", json_ints(out, n_out));
    cJSON_AddNumberToObject(root, "n_drafted", (double)st->n_drafted);
    cJSON_AddNumberToObject(root, "n_accepted", (double)st->n_accepted);
    cJSON_AddItemToObject(root, "rounds", sr.rounds);
    sr.rounds = NULL;
    rc = print_json(root);
done:
    cJSON_Delete(sr.rounds);
    cJSON_Delete(root);
    nx_spec_engine_free(en);
    nx_ctx_free(ctx);
    return rc;
}

int nx_cmd_eval(int argc, char **argv) {
    const char *model_path = NULL, *ids_arg = NULL, *ids_file = NULL, *logits_out = NULL, *hidden_out = NULL,
               *greedy_logits_out = NULL;
    const char *mtp_logits_out = NULL, *mtp_hidden_out = NULL, *draft_logits_out = NULL, *draft_hidden_out = NULL;
    const char *masked_logits_out = NULL, *masked_hidden_out = NULL;
    bool masked_head = false;
    int greedy = 0, batch = 0, threads = 0, n_ctx = 0, n_ubatch = 0, drafts = -1, spec_n = 0, spec_slack = 2;
    nx_ctx_params cp = nx_ctx_default_params();
    nx_spec_params spec = nx_spec_params_default();
    spec.draft_max = 3;
    spec.adaptive = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { eval_usage(stdout); return 0; }
        bool used = false;
        nx_error se = {0};
        if (nx_spec_params_parse_arg(&spec, argc, argv, &i, &used, &se) != NX_OK) {
            fprintf(stderr, "nextn eval: %s\n", se.msg);
            return 2;
        }
        if (used) { i--; continue; }
        if (!strcmp(a, "--masked-head")) { masked_head = true; continue; }
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) { fprintf(stderr, "nextn eval: %s needs a value\n", a); return 2; }
        char *end = NULL;
        long num = strtol(v, &end, 10);
        bool is_num = end && end != v && !*end && num >= 0 && num <= 0x7fffffff;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) model_path = v;
        else if (!strcmp(a, "--prompt-ids")) ids_arg = v;
        else if (!strcmp(a, "--prompt-ids-file")) ids_file = v;
        else if (!strcmp(a, "--logits-out")) logits_out = v;
        else if (!strcmp(a, "--hidden-out")) hidden_out = v;
        else if (!strcmp(a, "--greedy-logits-out")) greedy_logits_out = v;
        else if (!strcmp(a, "--greedy") && is_num) greedy = (int)num;
        else if (!strcmp(a, "--batch") && is_num) batch = (int)num;
        else if (!strcmp(a, "--drafts") && is_num && num <= NX_SPEC_DRAFT_CAP) drafts = (int)num;
        else if (!strcmp(a, "--spec") && is_num && num > 0) spec_n = (int)num;
        else if (!strcmp(a, "--spec-slack") && is_num && num >= 1 && num <= 64) spec_slack = (int)num;
        else if (!strcmp(a, "--mtp-logits-out")) mtp_logits_out = v;
        else if (!strcmp(a, "--mtp-hidden-out")) mtp_hidden_out = v;
        else if (!strcmp(a, "--draft-logits-out")) draft_logits_out = v;
        else if (!strcmp(a, "--draft-hidden-out")) draft_hidden_out = v;
        else if (!strcmp(a, "--masked-draft-logits-out")) masked_logits_out = v;
        else if (!strcmp(a, "--masked-draft-hidden-out")) masked_hidden_out = v;
        else if ((!strcmp(a, "-t") || !strcmp(a, "--threads")) && is_num) threads = (int)num;
        else if ((!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) && is_num) n_ctx = (int)num;
        else if ((!strcmp(a, "-ub") || !strcmp(a, "--ubatch-size")) && is_num && num > 0) n_ubatch = (int)num;
        else if ((!strcmp(a, "-ctk") || !strcmp(a, "--cache-type-k")) && !parse_cache(v, &cp.type_k)) {}
        else if ((!strcmp(a, "-ctv") || !strcmp(a, "--cache-type-v")) && !parse_cache(v, &cp.type_v)) {}
        else { fprintf(stderr, "nextn eval: bad option or value '%s %s'\n", a, v); eval_usage(stderr); return 2; }
        i++;
    }
    if (!model_path || (!ids_arg == !ids_file)) { eval_usage(stderr); return 2; }
    if (drafts >= 0 && spec_n > 0) {
        fprintf(stderr, "nextn eval: --drafts and --spec print different JSON; use one of them\n");
        return 2;
    }
    if ((masked_head || masked_logits_out || masked_hidden_out) && (drafts < 0 || !spec.draft_model)) {
        fprintf(stderr, "nextn eval: --masked-head / --masked-draft-*-out need --drafts K --draft-model A\n");
        return 2;
    }
    if (drafts >= 0 && spec.draft_model && (mtp_logits_out || mtp_hidden_out)) {
        fprintf(stderr, "nextn eval: --mtp-*-out are MTP-head outputs; the assistant (--draft-model) has no prompt rows\n");
        return 2;
    }
    if (spec_n > 0 && spec.n_types == 0) {
        /* a drafter file: assistant for a Gemma 4 assistant GGUF, else a draft model (--spec-type auto's rule) */
        if (spec.draft_model) spec.auto_type = true;
        else {
            spec.types[0] = NX_SPEC_MTP;
            spec.n_types = 1;
        }
    }
    int *ids = NULL, n = 0;
    char *text = NULL;
    if (ids_file) {
        nx_error e = {0};
        if (nx_read_file(ids_file, 64 << 20, &text, NULL, &e) != NX_OK) {
            fprintf(stderr, "nextn eval: %s\n", e.msg);
            return 1;
        }
        ids_arg = text;
    }
    if (parse_ids(ids_arg, &ids, &n) != 0 || n == 0) {
        fprintf(stderr, "nextn eval: prompt ids must be a non-empty list of non-negative integers\n");
        free(text);
        return 2;
    }
    free(text);

    int rc = 1;
    nx_model *m = NULL;
    nx_ctx *ctx = NULL;
    nx_batch *b = NULL;
    float *logits_all = NULL, *hidden_all = NULL, *greedy_rows = NULL;
    int *gen = NULL;
    nx_model_params mp = nx_model_default_params();
    mp.n_threads = threads;
    if (nx_model_load(model_path, &mp, &m) != NX_OK) { fprintf(stderr, "nextn eval: %s\n", nx_last_error()); goto done; }
    int need = n + (greedy > 1 ? greedy - 1 : 0);
    if (drafts > 0 && need < n + drafts) need = n + drafts;   /* the MTP head's positions n..n+K-1 */
    cp.n_ctx = n_ctx > 0 ? n_ctx : need;
    cp.n_threads = threads;
    cp.n_ubatch = n_ubatch;
    if (need > cp.n_ctx) {
        fprintf(stderr, "nextn eval: the prompt (%d tokens) and %d generated tokens need %d positions, but the context "
                "holds %d\n", n, greedy > 1 ? greedy - 1 : 0, need, cp.n_ctx);
        goto done;
    }
    if (nx_ctx_create(m, &cp, &ctx) != NX_OK) { fprintf(stderr, "nextn eval: %s\n", nx_last_error()); goto done; }
    const int V = nx_model_n_vocab(m), E = nx_model_n_embd(m);
    const int B = batch > 0 && batch < n ? batch : n;
    b = nx_batch_create(B);
    logits_all = logits_out ? malloc((size_t)n * V * sizeof(float)) : NULL;
    hidden_all = malloc((size_t)n * E * sizeof(float));
    greedy_rows = greedy > 0 ? malloc((size_t)greedy * V * sizeof(float)) : NULL;
    gen = greedy > 0 ? malloc((size_t)greedy * sizeof(int)) : NULL;
    float *last = malloc((size_t)V * sizeof(float));
    if (!b || (logits_out && !logits_all) || !hidden_all || (greedy > 0 && (!greedy_rows || !gen)) || !last) {
        free(last);
        fprintf(stderr, "nextn eval: out of memory\n");
        goto done;
    }
    for (int i0 = 0; i0 < n; i0 += B) {
        int nb = n - i0 < B ? n - i0 : B;
        nx_batch_clear(b);
        for (int r = 0; r < nb; r++) {
            bool want = logits_out || i0 + r == n - 1;
            nx_batch_add(b, ids[i0 + r], i0 + r, 0, want);
        }
        if (nx_decode(ctx, b) != NX_OK) { free(last); fprintf(stderr, "nextn eval: %s\n", nx_last_error()); goto done; }
        for (int r = 0; r < nb; r++) {
            memcpy(hidden_all + (size_t)(i0 + r) * E, nx_ctx_hidden(ctx, r), (size_t)E * sizeof(float));
            const float *lg = nx_ctx_logits(ctx, r);
            if (lg && logits_all) memcpy(logits_all + (size_t)(i0 + r) * V, lg, (size_t)V * sizeof(float));
            if (lg && i0 + r == n - 1) memcpy(last, lg, (size_t)V * sizeof(float));
        }
    }
    if (drafts >= 0 && spec.draft_model) {
        asst_args aa = {.path = spec.draft_model, .positions = spec.draft_positions,
                        .dense_only = spec.assistant_dense_head, .require_masked = masked_head,
                        .logits_out = draft_logits_out, .hidden_out = draft_hidden_out,
                        .masked_logits_out = masked_logits_out, .masked_hidden_out = masked_hidden_out};
        if (eval_asst_drafts(ctx, V, E, n, hidden_all, last, drafts, &aa) != 0) {
            free(last);
            goto done;
        }
    } else if (drafts >= 0 && eval_drafts(m, ctx, ids, n, hidden_all, last, drafts, mtp_logits_out, mtp_hidden_out,
                                          draft_logits_out, draft_hidden_out) != 0) {
        free(last);
        goto done;
    }
    for (int k = 0; k < greedy; k++) {
        memcpy(greedy_rows + (size_t)k * V, last, (size_t)V * sizeof(float));
        gen[k] = nx_argmax(last, V);
        if (k + 1 == greedy) break;
        nx_batch_clear(b);
        nx_batch_add(b, gen[k], n + k, 0, true);
        if (nx_decode(ctx, b) != NX_OK) { free(last); fprintf(stderr, "nextn eval: %s\n", nx_last_error()); goto done; }
        memcpy(last, nx_ctx_logits(ctx, 0), (size_t)V * sizeof(float));
    }
    free(last);
    if (logits_out && write_f32(logits_out, logits_all, (size_t)n * V)) goto done;
    if (hidden_out && write_f32(hidden_out, hidden_all, (size_t)n * E)) goto done;
    if (greedy_logits_out && greedy > 0 && write_f32(greedy_logits_out, greedy_rows, (size_t)greedy * V)) goto done;
    if (spec_n > 0) {
        rc = eval_spec(m, cp, ids, n, spec_n, &spec, spec_slack);
        goto done;
    }
    if (drafts < 0) {
        printf("[");
        for (int k = 0; k < greedy; k++) printf("%s%d", k ? ", " : "", gen[k]);
        printf("]\n");
    }
    rc = 0;
done:
    free(ids);
    free(logits_all);
    free(hidden_all);
    free(greedy_rows);
    free(gen);
    nx_batch_free(b);
    nx_ctx_free(ctx);
    nx_model_free(m);
    return rc;
}
