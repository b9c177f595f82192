/* test_assistant.c — the Gemma 4 assistant drafter (src/spec/assistant.c): goldens gemma4-tiny and
 * gemma4-tiny-centroid (3 chained greedy draft steps after the prompt: ids exact vs drafts.json,
 * logits / hidden vs f32kv/ at 1e-3 with an F32 KV cache and vs the engine files at 1e-2 with f16
 * K and V), the centroid-masked head (masked_head ids, masked_draft_* arrays), the dense head
 * forced by option, the drafter protocol (begin / process / draft / accept) in a greedy
 * speculative loop that must reproduce plain greedy decoding, increment positions, and load
 * errors (backbone width, vocab size and token text, head dims, requires_target_arch, a target given as assistant). */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <unistd.h>
#include "test.h"
#include "core/io.h"
#include "ctx.h"
#include "gguf.h"
#include "nextn.h"
#include "kernels/ops.h"
#include "spec/assistant.h"
#include "spec/drafter.h"

#define GOLDEN NX_SOURCE_DIR "/tests/data/golden/"

static char g_tmpdir[] = "/tmp/nx_test_assistant_XXXXXX";

static float *read_f32(const char *path, size_t *n) {
    char *buf = NULL;
    size_t len = 0;
    nx_error e = {0};
    if (nx_read_file(path, 1u << 26, &buf, &len, &e) != NX_OK) return NULL;
    float *x = malloc(len ? len : 1);
    memcpy(x, buf, len);
    free(buf);
    *n = len / sizeof(float);
    return x;
}

static cJSON *read_json(const char *path) {
    char *buf = NULL;
    nx_error e = {0};
    if (nx_read_file(path, 1u << 24, &buf, NULL, &e) != NX_OK) return NULL;
    cJSON *j = cJSON_Parse(buf);
    free(buf);
    return j;
}

static int json_ints(const cJSON *arr, int *out, int cap) {
    int n = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, arr) if (n < cap) out[n++] = (int)it->valuedouble;
    return n;
}

static double max_diff(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= m)) m = d;
    }
    return m;
}

typedef struct g4case {
    char dir[512];
    nx_model *m;
    cJSON *cs, *drafts;
    int ids[256], n;
} g4case;

static bool case_open(g4case *c, const char *name) {
    memset(c, 0, sizeof *c);
    snprintf(c->dir, sizeof c->dir, GOLDEN "%s", name);
    char p[600];
    snprintf(p, sizeof p, "%s/model.gguf", c->dir);
    if (access(p, R_OK) != 0) return false;
    nx_model_params mp = nx_model_default_params();
    mp.n_threads = 2;
    if (nx_model_load(p, &mp, &c->m) != NX_OK) return false;
    snprintf(p, sizeof p, "%s/case.json", c->dir);
    c->cs = read_json(p);
    snprintf(p, sizeof p, "%s/drafts.json", c->dir);
    c->drafts = read_json(p);
    if (!c->cs || !c->drafts) return false;
    c->n = json_ints(cJSON_GetObjectItem(cJSON_GetObjectItem(c->cs, "prompt"), "token_ids"), c->ids, 256);
    return c->n > 0;
}

static void case_close(g4case *c) {
    cJSON_Delete(c->cs);
    cJSON_Delete(c->drafts);
    nx_model_free(c->m);
}

static nx_ctx *make_ctx(nx_model *m, int n_seq, int ub, nx_cache_type t) {
    nx_ctx_params p = nx_ctx_default_params();
    p.n_ctx = 256;
    p.n_seq_max = n_seq;
    p.n_ubatch = ub;
    p.n_threads = 2;
    p.type_k = p.type_v = t;
    nx_ctx *c = NULL;
    if (nx_ctx_create(m, &p, &c) != NX_OK) fprintf(stderr, "  ctx: %s\n", nx_last_error());
    return c;
}

/* Decode the prompt of seq in one batch; returns id_last (greedy) and copies the last hidden. */
static int prompt(nx_ctx *ctx, const int *ids, int n, int seq, float *h_last, nx_drafter *d) {
    nx_batch *b = nx_batch_create(n);
    for (int i = 0; i < n; i++) nx_batch_add(b, ids[i], i, seq, i == n - 1);
    int r = -1;
    if (nx_decode(ctx, b) == NX_OK) {
        r = nx_argmax(nx_ctx_logits(ctx, n - 1), nx_model_n_vocab(ctx->model));
        const int E = nx_model_n_embd(ctx->model);
        if (h_last) memcpy(h_last, nx_ctx_hidden(ctx, n - 1), (size_t)E * sizeof(float));
        if (d) {
            nx_pos pos[256];
            nx_seq_id sq[256];
            for (int i = 0; i < n; i++) { pos[i] = i; sq[i] = seq; }
            nx_target_rows rows = {.kind = NX_ROWS_PROMPT, .n = n, .tok = ids, .pos = pos, .seq = sq,
                                   .hidden = nx_ctx_hidden(ctx, 0), .n_embd = E, .ctx = ctx};
            nx_error e = {0};
            if (nx_drafter_process(d, &rows, &e) != NX_OK) { fprintf(stderr, "  process: %s\n", e.msg); r = -1; }
        }
    }
    nx_batch_free(b);
    return r;
}

/* 3 chained steps through nx_assistant_forward; compares with the golden files of prefix
 * (draft_ / masked_draft_) in dir at bound. */
static void chain_check(nx_assistant *a, const float *h0, int id_last, int P, const int *want, const char *dir,
                        const char *prefix, double bound, const char *what) {
    const int V = 512, B = 64;
    float L[3 * 512], H[3 * 64], hin[64];
    int got[3];
    memcpy(hin, h0, sizeof hin);
    nx_token t = id_last;
    for (int s = 0; s < 3; s++) {
        nx_pos pos = P;
        nx_seq_id sq = 0;
        nx_token nx = -1;
        nx_error e = {0};
        nx_status st = nx_assistant_forward(a, 1, &t, &pos, &sq, NULL, hin, H + s * B, L + s * V, &nx, NULL, &e);
        CHECK_MSG(st == NX_OK, "%s: %s", what, e.msg);
        got[s] = nx;
        t = nx;
        memcpy(hin, H + s * B, sizeof hin);
    }
    for (int s = 0; s < 3; s++) CHECK_MSG(got[s] == want[s], "%s step %d: %d vs %d", what, s, got[s], want[s]);
    char p[700];
    size_t nl = 0, nh = 0;
    snprintf(p, sizeof p, "%s/%slogits.f32", dir, prefix);
    float *gl = read_f32(p, &nl);
    snprintf(p, sizeof p, "%s/%shidden.f32", dir, prefix);
    float *gh = read_f32(p, &nh);
    CHECK(gl && gh && nl == 3 * (size_t)V && nh == 3 * (size_t)B);
    if (gl && gh && nl == 3 * (size_t)V && nh == 3 * (size_t)B) {
        double dl = max_diff(L, gl, nl), dh = max_diff(H, gh, nh);
        printf("  %-40s logits %.2e hidden %.2e (bound %.0e)\n", what, dl, dh, bound);
        CHECK_MSG(dl <= bound, "%s logits %g", what, dl);
        CHECK_MSG(dh <= bound, "%s hidden %g", what, dh);
    }
    free(gl);
    free(gh);
}

static void golden_case(const char *name) {
    g4case c;
    if (!case_open(&c, name)) {
        CHECK_MSG(0, "golden %s missing or unreadable", name);
        if (c.m) case_close(&c);
        return;
    }
    int want[3], wmask[3] = {0};
    json_ints(cJSON_GetObjectItem(c.drafts, "draft_tokens"), want, 3);
    const cJSON *mh = cJSON_GetObjectItem(c.drafts, "masked_head");
    if (mh) json_ints(cJSON_GetObjectItem(mh, "draft_tokens"), wmask, 3);
    const int id_want = cJSON_GetObjectItem(c.drafts, "id_last")->valueint;
    char apath[600], f32dir[600];
    snprintf(apath, sizeof apath, "%s/assistant.gguf", c.dir);
    snprintf(f32dir, sizeof f32dir, "%s/f32kv", c.dir);
    for (int kvt = 0; kvt < 2; kvt++) {
        nx_ctx *ctx = make_ctx(c.m, 1, 64, kvt ? NX_CACHE_F16 : NX_CACHE_F32);
        CHECK(ctx);
        if (!ctx) continue;
        float h[64];
        const int id_last = prompt(ctx, c.ids, c.n, 0, h, NULL);
        CHECK_EQ_INT(id_last, id_want);
        const char *dir = kvt ? c.dir : f32dir;
        const double bound = kvt ? 1e-2 : 1e-3;
        nx_assistant_opts o = nx_assistant_default_opts();
        o.dense_head = true;
        nx_assistant *a = NULL;
        nx_error e = {0};
        CHECK_MSG(nx_assistant_load(ctx, apath, &o, 4, &a, &e) == NX_OK, "%s", e.msg);
        char what[128];
        if (a) {
            CHECK(!nx_assistant_masked(a));
            snprintf(what, sizeof what, "%s dense %s", name, kvt ? "f16kv" : "f32kv");
            chain_check(a, h, id_last, c.n, want, dir, "draft_", bound, what);
            nx_assistant_free(a);
        }
        if (mh) {
            a = NULL;
            CHECK_MSG(nx_assistant_load(ctx, apath, NULL, 4, &a, &e) == NX_OK, "%s", e.msg);
            if (a) {
                CHECK(nx_assistant_masked(a));
                snprintf(what, sizeof what, "%s masked %s", name, kvt ? "f16kv" : "f32kv");
                chain_check(a, h, id_last, c.n, wmask, dir, "masked_draft_", bound, what);
                nx_assistant_free(a);
            }
        }
        /* the drafter: fused 3-step draft after the prompt (masked head by default when present) */
        nx_drafter *d = NULL;
        CHECK_MSG(nx_assistant_create(ctx, apath, NULL, 1, &d, &e) == NX_OK, "%s", e.msg);
        if (d) {
            nx_seq_rm(ctx, 0, -1, -1);
            CHECK(nx_drafter_begin(d, 0, c.ids, c.n, &e) == NX_OK);
            CHECK_EQ_INT(prompt(ctx, c.ids, c.n, 0, NULL, d), id_want);
            nx_token out[8];
            float p[8];
            nx_draft_req rq = {.seq = 0, .pos = c.n, .id_last = id_want, .k_max = 3, .tok = out, .p = p};
            CHECK_MSG(nx_drafter_draft(d, &rq, 1, &e) == NX_OK, "%s", e.msg);
            CHECK_EQ_INT(rq.n, 3);
            const int *w = mh ? wmask : want;
            for (int s = 0; s < rq.n && s < 3; s++) CHECK_EQ_INT(out[s], w[s]);
            for (int s = 0; s < rq.n; s++) CHECK(p[s] > 0 && p[s] <= 1);
            /* p_min above every probability: step 0 is kept, then drafting stops */
            nx_draft_req r2 = rq;
            r2.n = 0;
            r2.stage = -1;
            r2.p_min = 0.999f;
            CHECK(nx_drafter_draft(d, &r2, 1, &e) == NX_OK);
            CHECK_EQ_INT(r2.n, 1);
            nx_drafter_free(d);
        }
        if (kvt == 0) {
            /* increment positions: step 1 is the same query, later steps differ in position */
            nx_assistant_opts oi = nx_assistant_default_opts();
            oi.positions = NX_ASST_POS_INCREMENT;
            oi.dense_head = true;
            d = NULL;
            CHECK_MSG(nx_assistant_create(ctx, apath, &oi, 1, &d, &e) == NX_OK, "%s", e.msg);
            if (d) {
                nx_seq_rm(ctx, 0, -1, -1);
                nx_drafter_begin(d, 0, c.ids, c.n, &e);
                prompt(ctx, c.ids, c.n, 0, NULL, d);
                nx_token out[8];
                nx_draft_req rq = {.seq = 0, .pos = c.n, .id_last = id_want, .k_max = 3, .tok = out};
                CHECK(nx_drafter_draft(d, &rq, 1, &e) == NX_OK);
                CHECK_EQ_INT(rq.n, 3);
                CHECK_EQ_INT(out[0], want[0]);
                nx_drafter_free(d);
            }
        }
        nx_ctx_free(ctx);
    }
    case_close(&c);
}

static void test_golden_tiny(void) { golden_case("gemma4-tiny"); }
static void test_golden_centroid(void) { golden_case("gemma4-tiny-centroid"); }

/* Greedy speculative decoding with the drafter on 4 sequences (prompts longer than the window,
 * draft lengths up to kmax) == plain greedy; first round's
 * drafts == drafts.json (F32 KV; other KV types change the drafts, never the output); trimming
 * the target KV alone handles rejection. kvt: the target's K and V cache type, which the
 * assistant's cross-attention reads. */
static void spec_loop(const char *name, bool dense, nx_asst_positions positions, int kmax, nx_cache_type kvt) {
    g4case c;
    if (!case_open(&c, name)) {
        CHECK_MSG(0, "golden %s missing or unreadable", name);
        if (c.m) case_close(&c);
        return;
    }
    enum { NP = 40, NS = 4 };
    const int V = nx_model_n_vocab(c.m);
    char apath[600];
    snprintf(apath, sizeof apath, "%s/assistant.gguf", c.dir);
    /* plain greedy reference, sequence 0 = the golden prompt, sequence 1 = its first 29 tokens */
    int plen[NS] = {c.n, 29, 12, 35}, ref[NS][NP];
    nx_ctx *ctx = make_ctx(c.m, NS, 16, kvt);
    CHECK(ctx);
    if (!ctx) { case_close(&c); return; }
    nx_batch *b = nx_batch_create(64);
    for (int s = 0; s < NS; s++) {
        int t = prompt(ctx, c.ids, plen[s], s, NULL, NULL);
        for (int i = 0; i < NP; i++) {
            ref[s][i] = t;
            nx_batch_clear(b);
            nx_batch_add(b, t, plen[s] + i, s, true);
            CHECK(nx_decode(ctx, b) == NX_OK);
            t = nx_argmax(nx_ctx_logits(ctx, 0), V);
        }
    }
    nx_ctx_free(ctx);
    ctx = make_ctx(c.m, NS, 16, kvt);
    nx_assistant_opts o = nx_assistant_default_opts();
    o.dense_head = dense;
    o.positions = positions;
    nx_drafter *d = NULL;
    nx_error e = {0};
    CHECK_MSG(nx_assistant_create(ctx, apath, &o, NS, &d, &e) == NX_OK, "%s", e.msg);
    if (!d) { nx_ctx_free(ctx); nx_batch_free(b); case_close(&c); return; }
    int got[NS][NP + 8], ng[NS] = {0}, P[NS], idl[NS], drafted = 0, accepted = 0, rounds = 0;
    for (int s = 0; s < NS; s++) {
        nx_drafter_begin(d, s, c.ids, plen[s], &e);
        idl[s] = prompt(ctx, c.ids, plen[s], s, NULL, d);
        P[s] = plen[s];
    }
    int wfirst[3];
    json_ints(cJSON_GetObjectItem(dense || !cJSON_GetObjectItem(c.drafts, "masked_head") ? c.drafts
                                  : cJSON_GetObjectItem(c.drafts, "masked_head"), "draft_tokens"), wfirst, 3);
    while (ng[0] < NP || ng[1] < NP || ng[2] < NP || ng[3] < NP) {
        nx_token dt[NS][8];
        nx_draft_req rq[NS];
        int nrq = 0, map[NS];
        for (int s = 0; s < NS; s++) {
            if (ng[s] >= NP) continue;
            int k = NP - ng[s] - 1;
            if (k > kmax) k = kmax;
            if (k < 0) k = 0;
            rq[nrq] = (nx_draft_req){.seq = s, .pos = P[s], .id_last = idl[s], .k_max = k, .tok = dt[s]};
            map[nrq++] = s;
        }
        CHECK_MSG(nx_drafter_draft(d, rq, nrq, &e) == NX_OK, "%s", e.msg);
        if (rounds == 0 && positions == NX_ASST_POS_CONSTANT && kvt == NX_CACHE_F32)
            for (int i = 0; i < 3 && i < rq[0].n; i++) CHECK_EQ_INT(rq[0].tok[i], wfirst[i]);
        nx_batch_clear(b);
        nx_seq_id sq[64];
        nx_pos ps[64];
        nx_token tk[64];
        int off[NS], nrow = 0;
        for (int i = 0; i < nrq; i++) {
            const int s = map[i];
            off[i] = nrow;
            for (int j = 0; j <= rq[i].n; j++) {
                tk[nrow] = j ? rq[i].tok[j - 1] : idl[s];
                ps[nrow] = P[s] + j;
                sq[nrow] = s;
                nx_batch_add(b, tk[nrow], ps[nrow], s, true);
                nrow++;
            }
        }
        nx_batch_set_snapshots(b, true);
        CHECK(nx_decode(ctx, b) == NX_OK);
        nx_target_rows rows = {.kind = NX_ROWS_VERIFY, .n = nrow, .tok = tk, .pos = ps, .seq = sq,
                               .hidden = nx_ctx_hidden(ctx, 0), .n_embd = nx_model_n_embd(c.m), .ctx = ctx};
        CHECK(nx_drafter_process(d, &rows, &e) == NX_OK);
        for (int i = 0; i < nrq; i++) {
            const int s = map[i];
            int a = 0;
            got[s][ng[s]++] = idl[s];
            int t = nx_argmax(nx_ctx_logits(ctx, off[i]), V);
            while (a < rq[i].n && t == rq[i].tok[a]) {
                got[s][ng[s]++] = t;
                a++;
                t = nx_argmax(nx_ctx_logits(ctx, off[i] + a), V);
            }
            drafted += rq[i].n;
            accepted += a;
            CHECK(nx_seq_rm(ctx, s, P[s] + a + 1, -1) == NX_OK);
            CHECK(nx_drafter_accept(d, s, a, &e) == NX_OK);
            P[s] += a + 1;
            idl[s] = t;
        }
        rounds++;
    }
    for (int s = 0; s < NS; s++)
        for (int i = 0; i < NP; i++) CHECK_MSG(got[s][i] == ref[s][i], "%s seq %d token %d: %d vs %d", name, s, i, got[s][i], ref[s][i]);
    printf("  spec %s %s %s k<=%d, %s KV: %d rounds, %d/%d drafts accepted (random weights: acceptance is not "
           "meaningful)\n", name, dense ? "dense" : "default", positions ? "increment" : "constant", kmax,
           nx_cache_type_name(kvt), rounds, accepted, drafted);
    nx_drafter_free(d);
    nx_batch_free(b);
    nx_ctx_free(ctx);
    case_close(&c);
}

static void test_spec_tiny(void) {
    spec_loop("gemma4-tiny", true, NX_ASST_POS_CONSTANT, 3, NX_CACHE_F32);
    spec_loop("gemma4-tiny", true, NX_ASST_POS_CONSTANT, 1, NX_CACHE_F32);
    spec_loop("gemma4-tiny", true, NX_ASST_POS_CONSTANT, 8, NX_CACHE_F32);
}
static void test_spec_centroid(void) { spec_loop("gemma4-tiny-centroid", false, NX_ASST_POS_CONSTANT, 3, NX_CACHE_F32); }
static void test_spec_increment(void) { spec_loop("gemma4-tiny", true, NX_ASST_POS_INCREMENT, 5, NX_CACHE_F32); }
/* Quantized target KV (the rings, the shared-KV layers and the drafter's cross-read all in
 * q8_0 / q4_0 blocks, or f16): still lossless. */
static void test_spec_quant_kv(void) {
    spec_loop("gemma4-tiny", true, NX_ASST_POS_CONSTANT, 3, NX_CACHE_F16);
    spec_loop("gemma4-tiny", true, NX_ASST_POS_CONSTANT, 3, NX_CACHE_Q8_0);
    spec_loop("gemma4-tiny", true, NX_ASST_POS_CONSTANT, 8, NX_CACHE_Q4_0);
    spec_loop("gemma4-tiny-centroid", false, NX_ASST_POS_CONSTANT, 3, NX_CACHE_Q8_0);
    spec_loop("gemma4-tiny", true, NX_ASST_POS_INCREMENT, 5, NX_CACHE_Q4_0);
}



/* The golden speculative run (spec_trace.json, the reference engine: dense head, f16 K and V,
 * draft n_max 3, p_min 0) reproduced round by round: positions, id_last, drafts (a differing
 * draft only on a near-tie: logit gap < 1e-2 along our chain), committed ids. */
static void test_spec_trace(void) {
    g4case c;
    if (!case_open(&c, "gemma4-tiny")) {
        CHECK_MSG(0, "golden %s missing or unreadable", "gemma4-tiny");
        if (c.m) case_close(&c);
        return;
    }
    char p[600];
    snprintf(p, sizeof p, "%s/spec_trace.json", c.dir);
    cJSON *tr = read_json(p);
    snprintf(p, sizeof p, "%s/assistant.gguf", c.dir);
    nx_ctx *ctx = make_ctx(c.m, 1, 16, NX_CACHE_F16);
    nx_assistant_opts o = nx_assistant_default_opts();
    o.dense_head = true;
    nx_drafter *d = NULL;
    nx_error e = {0};
    CHECK(tr && ctx);
    if (ctx) CHECK_MSG(nx_assistant_create(ctx, p, &o, 1, &d, &e) == NX_OK, "%s", e.msg);
    if (!tr || !ctx || !d) {
        cJSON_Delete(tr); nx_drafter_free(d); nx_ctx_free(ctx); case_close(&c);
        return;
    }
    const int V = nx_model_n_vocab(c.m), E = nx_model_n_embd(c.m);
    nx_batch *b = nx_batch_create(16);
    nx_drafter_begin(d, 0, c.ids, c.n, &e);
    int id_last = prompt(ctx, c.ids, c.n, 0, NULL, d), P = c.n, n_rounds = 0, n_ties = 0, bad = 0;
    float hprev[64];
    memcpy(hprev, nx_ctx_hidden(ctx, c.n - 1), sizeof hprev);
    const cJSON *r;
    cJSON_ArrayForEach(r, cJSON_GetObjectItem(tr, "rounds")) {
        const bool plain = cJSON_IsTrue(cJSON_GetObjectItem(r, "plain_decode"));
        int gd[8] = {0}, gids[10] = {0}, ngd = 0, ngi = 0, k = 0;
        if (!plain) {
            CHECK_EQ_INT(cJSON_GetObjectItem(r, "n_past")->valueint, P);
            CHECK_EQ_INT(cJSON_GetObjectItem(r, "id_last")->valueint, id_last);
            ngd = json_ints(cJSON_GetObjectItem(r, "drafts"), gd, 8);
            ngi = json_ints(cJSON_GetObjectItem(r, "ids"), gids, 10);
            k = cJSON_GetObjectItem(r, "n_max_used")->valueint;
        }
        nx_token dt[8];
        nx_draft_req rq = {.seq = 0, .pos = P, .id_last = id_last, .k_max = k, .tok = dt};
        if (k > 0) CHECK(nx_drafter_draft(d, &rq, 1, &e) == NX_OK);
        CHECK_EQ_INT(rq.n, ngd);
        for (int i = 0; i < rq.n && i < ngd; i++) {
            if (dt[i] == gd[i]) continue;
            /* recompute our chain's logits up to step i: a tie is a gap below 1e-2 */
            float L[512], hin[64], hout[64];
            memcpy(hin, hprev, sizeof hin);
            nx_token t = id_last;
            nx_pos pos = P;
            nx_seq_id sq = 0;
            for (int s = 0; s <= i; s++) {
                nx_assistant_forward(nx_assistant_drafter_model(d), 1, &t, &pos, &sq, NULL, hin, hout, L, NULL, NULL, &e);
                memcpy(hin, hout, sizeof hin);
                t = dt[s];
            }
            const double gap = (double)L[dt[i]] - (double)L[gd[i]];
            CHECK_MSG(gap >= 0 && gap < 1e-2, "round %d draft %d: %d vs %d, gap %g", n_rounds, i, dt[i], gd[i], gap);
            n_ties++;
            break;
        }
        nx_batch_clear(b);
        nx_token tk[9];
        nx_pos ps[9];
        nx_seq_id sq[9] = {0};
        for (int j = 0; j <= rq.n; j++) {
            tk[j] = j ? dt[j - 1] : id_last;
            ps[j] = P + j;
            nx_batch_add(b, tk[j], ps[j], 0, true);
        }
        CHECK(nx_decode(ctx, b) == NX_OK);
        nx_target_rows rows = {.kind = NX_ROWS_VERIFY, .n = rq.n + 1, .tok = tk, .pos = ps, .seq = sq,
                               .hidden = nx_ctx_hidden(ctx, 0), .n_embd = E, .ctx = ctx};
        CHECK(nx_drafter_process(d, &rows, &e) == NX_OK);
        int a = 0, ids[10], ni = 0, t = nx_argmax(nx_ctx_logits(ctx, 0), V);
        while (a < rq.n && t == dt[a]) {
            ids[ni++] = t;
            a++;
            t = nx_argmax(nx_ctx_logits(ctx, a), V);
        }
        ids[ni++] = t;
        memcpy(hprev, nx_ctx_hidden(ctx, a), sizeof hprev);
        if (plain) {
            CHECK_EQ_INT(t, cJSON_GetObjectItem(r, "token")->valueint);
        } else {
            CHECK_EQ_INT(ni, ngi);
            for (int j = 0; j < ni && j < ngi; j++) bad += ids[j] != gids[j];
        }
        if (a < rq.n) CHECK(nx_seq_rm(ctx, 0, P + a + 1, -1) == NX_OK);
        CHECK(nx_drafter_accept(d, 0, a, &e) == NX_OK);
        P += a + 1;
        id_last = t;
        n_rounds++;
    }
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_INT(n_rounds, cJSON_GetArraySize(cJSON_GetObjectItem(tr, "rounds")));
    printf("  spec_trace: %d rounds reproduced (%d draft near-ties)\n", n_rounds, n_ties);
    nx_batch_free(b);
    nx_drafter_free(d);
    nx_ctx_free(ctx);
    cJSON_Delete(tr);
    case_close(&c);
}

/* ===== the ik `gemma4_mtp` dialect ===== */

static void set_renamed(nx_gguf_writer *w, const nx_gguf *g, int64_t i, const char *key) {
    const nx_gguf_vtype t = nx_gguf_kv_type(g, i);
    if (t == NX_GGUF_ARRAY && nx_gguf_arr_type(g, i) != NX_GGUF_STRING && nx_gguf_arr_data(g, i)) {
        nx_gguf_set_arr(w, key, nx_gguf_arr_type(g, i), nx_gguf_arr_data(g, i), nx_gguf_arr_n(g, i));
    } else if (t == NX_GGUF_STRING) {
        uint64_t len = 0;
        const char *v = nx_gguf_kv_str(g, i, &len);
        char buf[256] = "";
        if (len < sizeof buf) memcpy(buf, v, (size_t)len);
        nx_gguf_set_str(w, key, buf);
    } else if (t != NX_GGUF_ARRAY) {
        uint64_t size = 0;
        nx_gguf_set_scalar(w, key, t, nx_gguf_kv_raw(g, i, &size));
    }
}

/* The centroid assistant rewritten as ik's converter would: gemma4_mtp.* keys, mtp_* tensor
 * names, the ordering as a token -> centroid map (F32). */
static bool write_mtp_dialect(char *out, size_t cap) {
    nx_gguf *g = NULL;
    nx_error e = {0};
    if (nx_gguf_open(GOLDEN "gemma4-tiny-centroid/assistant.gguf", &g, &e) != NX_OK) return false;
    nx_gguf_writer *w = nx_gguf_writer_create();
    const char *pfx = "gemma4-assistant.";
    int64_t n_c = 0;
    nx_gguf_get_int(g, "gemma4-assistant.n_centroids", &n_c);
    for (int64_t i = 0; i < nx_gguf_n_kv(g); i++) {
        const char *k = nx_gguf_key(g, i);
        char nk[256];
        if (!strncmp(k, pfx, strlen(pfx))) {
            const char *sfx = k + strlen(pfx);
            if (!strcmp(sfx, "embedding_length_out")) sfx = "backbone_embedding_length";
            if (!strcmp(sfx, "n_centroids")) sfx = "centroid_count";
            snprintf(nk, sizeof nk, "gemma4_mtp.%s", sfx);
            set_renamed(w, g, i, nk);
        } else if (!strcmp(k, "general.architecture")) {
            nx_gguf_set_str(w, k, "gemma4_mtp");
        } else {
            nx_gguf_copy_kv(w, g, i);
        }
    }
    static const char *ren[][2] = {{"nextn.pre_projection.weight", "mtp_pre_proj.weight"},
                                   {"nextn.post_projection.weight", "mtp_post_proj.weight"},
                                   {"masked_embd_centroids.weight", "mtp_centroids.weight"},
                                   {"masked_embd_ordering", "mtp_token_ordering.weight"}};
    float map[4096];
    bool ok = n_c > 0;
    for (int64_t i = 0; i < nx_gguf_n_tensors(g) && ok; i++) {
        const nx_tensor *t = nx_gguf_tensor(g, i);
        const char *name = t->name;
        for (int r = 0; r < 4; r++)
            if (!strcmp(name, ren[r][0])) name = ren[r][1];
        if (!strcmp(name, "mtp_token_ordering.weight")) {
            const int64_t nv = nx_tensor_nelements(t), vpc = nv / n_c;
            const int32_t *o = t->data;
            ok = nv <= 4096 && t->type == NX_TYPE_I32;
            for (int64_t j = 0; ok && j < nv; j++) map[o[j]] = (float)(j / vpc);   /* inv[o[j]] = j */
            int64_t ne[1] = {nv};
            nx_gguf_add_tensor(w, name, NX_TYPE_F32, 1, ne, map);
        } else {
            int64_t ne[4] = {t->ne[0], t->ne[1], t->ne[2], t->ne[3]};
            nx_gguf_add_tensor(w, name, t->type, t->n_dims, ne, t->data);
        }
    }
    snprintf(out, cap, "%s/mtp_dialect.gguf", g_tmpdir);
    ok = ok && nx_gguf_writer_write(w, out, &e) == NX_OK;
    nx_gguf_writer_free(w);
    nx_gguf_close(g);
    return ok;
}

static void test_mtp_dialect(void) {
    g4case c;
    if (!case_open(&c, "gemma4-tiny-centroid")) {
        CHECK_MSG(0, "golden %s missing or unreadable", "gemma4-tiny-centroid");
        if (c.m) case_close(&c);
        return;
    }
    char p[600];
    CHECK(write_mtp_dialect(p, sizeof p));
    int want[3], wmask[3];
    json_ints(cJSON_GetObjectItem(c.drafts, "draft_tokens"), want, 3);
    json_ints(cJSON_GetObjectItem(cJSON_GetObjectItem(c.drafts, "masked_head"), "draft_tokens"), wmask, 3);
    nx_ctx *ctx = make_ctx(c.m, 1, 64, NX_CACHE_F32);
    CHECK(ctx);
    for (int dense = 0; ctx && dense < 2; dense++) {
        nx_assistant_opts o = nx_assistant_default_opts();
        o.dense_head = dense;
        nx_drafter *d = NULL;
        nx_error e = {0};
        CHECK_MSG(nx_assistant_create(ctx, p, &o, 1, &d, &e) == NX_OK, "%s", e.msg);
        if (!d) continue;
        CHECK_EQ_INT(nx_assistant_masked(nx_assistant_drafter_model(d)), !dense);
        nx_seq_rm(ctx, 0, -1, -1);
        nx_drafter_begin(d, 0, c.ids, c.n, &e);
        const int id_last = prompt(ctx, c.ids, c.n, 0, NULL, d);
        nx_token out[4];
        nx_draft_req rq = {.seq = 0, .pos = c.n, .id_last = id_last, .k_max = 3, .tok = out};
        CHECK(nx_drafter_draft(d, &rq, 1, &e) == NX_OK);
        CHECK_EQ_INT(rq.n, 3);
        for (int s = 0; s < 3 && s < rq.n; s++) CHECK_EQ_INT(out[s], dense ? want[s] : wmask[s]);
        nx_drafter_free(d);
    }
    nx_ctx_free(ctx);
    case_close(&c);
}

/* ===== bad input ===== */

typedef enum { MUT_BB, MUT_VOCAB, MUT_HD, MUT_REQ, MUT_HEADS, MUT_TOKEN } mutation;

/* Copy of the tiny assistant with one mutation; returns the path. */
static bool write_mutant(mutation mu, char *out, size_t cap) {
    nx_gguf *g = NULL;
    nx_error e = {0};
    if (nx_gguf_open(GOLDEN "gemma4-tiny/assistant.gguf", &g, &e) != NX_OK) return false;
    nx_gguf_writer *w = nx_gguf_writer_create();
    for (int64_t i = 0; i < nx_gguf_n_kv(g); i++) nx_gguf_copy_kv(w, g, i);
    if (mu == MUT_BB) nx_gguf_set_u32(w, "gemma4-assistant.embedding_length_out", 48);
    if (mu == MUT_HD) nx_gguf_set_u32(w, "gemma4-assistant.attention.key_length_swa", 32);
    if (mu == MUT_REQ) nx_gguf_set_str(w, "gemma4-assistant.requires_target_arch", "llama");
    if (mu == MUT_HEADS) {
        int32_t hc[2] = {3, 3};
        nx_gguf_set_arr(w, "gemma4-assistant.attention.head_count", NX_GGUF_I32, hc, 2);
    }
    if (mu == MUT_TOKEN) {   /* same size, token 300's text changed: llama.cpp's rule refuses it */
        const int64_t k = nx_gguf_find_key(g, "tokenizer.ggml.tokens");
        const uint64_t n = k >= 0 ? nx_gguf_arr_n(g, k) : 0;
        const char **strs = calloc(n ? n : 1, sizeof *strs);
        uint64_t *lens = calloc(n ? n : 1, sizeof *lens);
        for (uint64_t j = 0; j < n; j++) strs[j] = nx_gguf_arr_str(g, k, j, &lens[j]);
        if (n > 300) { strs[300] = "<changed>"; lens[300] = 9; }
        nx_gguf_set_arr_str(w, "tokenizer.ggml.tokens", strs, lens, n);
        free(strs);
        free(lens);
    }
    for (int64_t i = 0; i < nx_gguf_n_tensors(g); i++) {
        const nx_tensor *t = nx_gguf_tensor(g, i);
        int64_t ne[4] = {t->ne[0], t->ne[1], t->ne[2], t->ne[3]};
        if (mu == MUT_VOCAB && !strcmp(t->name, "token_embd.weight")) ne[1] = 256;
        nx_gguf_add_tensor(w, t->name, t->type, t->n_dims, ne, t->data);
    }
    snprintf(out, cap, "%s/mut%d.gguf", g_tmpdir, (int)mu);
    bool ok = nx_gguf_writer_write(w, out, &e) == NX_OK;
    nx_gguf_writer_free(w);
    nx_gguf_close(g);
    return ok;
}

static void expect_refused(nx_ctx *ctx, const char *path, const char *s1, const char *s2) {
    nx_drafter *d = NULL;
    nx_error e = {0};
    nx_status st = nx_assistant_create(ctx, path, NULL, 1, &d, &e);
    CHECK_MSG(st != NX_OK && !d, "%s accepted", path);
    CHECK_MSG(strstr(e.msg, s1) && strstr(e.msg, s2), "message lacks '%s'/'%s': %s", s1, s2, e.msg);
    printf("  refused: %s\n", e.msg);
    nx_drafter_free(d);
}

static void test_bad_input(void) {
    g4case c;
    if (!case_open(&c, "gemma4-tiny")) {
        CHECK_MSG(0, "golden %s missing or unreadable", "gemma4-tiny");
        if (c.m) case_close(&c);
        return;
    }
    nx_ctx *ctx = make_ctx(c.m, 1, 16, NX_CACHE_F32);
    CHECK(ctx);
    char p[600];
    if (ctx) {
        if (write_mutant(MUT_BB, p, sizeof p)) expect_refused(ctx, p, "48", "64");
        if (write_mutant(MUT_VOCAB, p, sizeof p)) expect_refused(ctx, p, "256", "512");
        if (write_mutant(MUT_HD, p, sizeof p)) expect_refused(ctx, p, "32", "64");
        if (write_mutant(MUT_REQ, p, sizeof p)) expect_refused(ctx, p, "requires_target_arch", "llama");
        if (write_mutant(MUT_HEADS, p, sizeof p)) expect_refused(ctx, p, "3 heads", "kv heads");
        if (write_mutant(MUT_TOKEN, p, sizeof p)) expect_refused(ctx, p, "token 300", "<changed>");
        snprintf(p, sizeof p, "%s/model.gguf", c.dir);
        expect_refused(ctx, p, "gemma4", "not an assistant drafter");
        expect_refused(ctx, "/nonexistent/assistant.gguf", "assistant", "nonexistent");
        nx_drafter *d = NULL;
        nx_error e = {0};
        snprintf(p, sizeof p, "%s/assistant.gguf", c.dir);
        CHECK(nx_assistant_create(ctx, p, NULL, 2, &d, &e) != NX_OK);   /* more sequences than the context */
        CHECK(nx_assistant_file_is_drafter(p));
        snprintf(p, sizeof p, "%s/model.gguf", c.dir);
        CHECK(!nx_assistant_file_is_drafter(p));
        nx_asst_positions ps;
        CHECK(nx_assistant_parse_positions("increment", &ps, &e) == NX_OK && ps == NX_ASST_POS_INCREMENT);
        CHECK(nx_assistant_parse_positions("sideways", &ps, &e) != NX_OK);
        nx_ctx_free(ctx);
    }
    case_close(&c);
}

int main(void) {
    if (!mkdtemp(g_tmpdir)) return 1;
    RUN(test_golden_tiny);
    RUN(test_golden_centroid);
    RUN(test_spec_tiny);
    RUN(test_spec_centroid);
    RUN(test_spec_increment);
    RUN(test_spec_quant_kv);
    RUN(test_spec_trace);
    RUN(test_mtp_dialect);
    RUN(test_bad_input);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_tmpdir);
    if (system(cmd)) {}
    return test_summary();
}
