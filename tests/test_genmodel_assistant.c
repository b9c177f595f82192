/* test_genmodel_assistant.c — `gen-model --arch gemma4-assistant` (src/genmodel.c): a random
 * assistant generated from the same config as a random gemma4 target loads against it (dense and
 * centroid heads, F32 and Q8_0), and greedy speculative generation with --spec-type assistant
 * equals plain greedy for 1 and 4 sequences, draft lengths 1..8, prompts longer than the sliding
 * window. Also: bad assistant configs are refused, and an assistant generated for another width
 * is refused by the loader with the mismatching values. */
#include <stdint.h>
#include <unistd.h>
#include "test.h"
#include "genmodel.h"
#include "nextn.h"
#include "spec/assistant.h"
#include "spec/drafter.h"
#include "spec/engine.h"

static char g_tmpdir[] = "/tmp/nx_test_genmodel_assistant_XXXXXX";

/* The target config; the assistant is generated from it plus the extra keys. */
#define TARGET_CFG "\"n_embd\":64,\"n_layer\":6,\"sliding_window\":8,\"shared_kv_layers\":2,\"n_vocab\":512"

static bool gen(const char *arch, const char *cfg, nx_type t, const char *file, uint64_t seed, char *path,
                size_t cap) {
    snprintf(path, cap, "%s/%s", g_tmpdir, file);
    nx_error e = {0};
    nx_genmodel_opts o = {.arch = arch, .config_json = cfg, .seed = seed, .wtype = t, .out_path = path};
    if (nx_genmodel_write(&o, &e) != NX_OK) {
        fprintf(stderr, "  gen-model %s: %s\n", arch, e.msg);
        return false;
    }
    return true;
}

static nx_ctx *make_ctx(nx_model *m, int n_seq) {
    nx_ctx_params p = nx_ctx_default_params();
    p.n_ctx = 256;
    p.n_seq_max = n_seq;
    p.n_ubatch = 64;
    p.n_threads = 1;
    nx_ctx *c = NULL;
    if (nx_ctx_create(m, &p, &c) != NX_OK) fprintf(stderr, "  ctx: %s\n", nx_last_error());
    return c;
}

#define NP 4
#define NPRED 20
static const int g_lens[NP] = {5, 12, 23, 40};

static void prompt(int i, nx_token *ids) {
    for (int j = 0; j < g_lens[i]; j++) ids[j] = (nx_token)(((j % (3 + i * 2)) * 41 + i * 7 + 3) % 500);
}

typedef struct result {
    int n[NP];
    nx_token t[NP][NPRED];
    uint64_t drafted, accepted;
} result;

/* Prompts 0..NP-1, n_seq at a time, NPRED tokens each; asst NULL = speculation off. */
static bool run(nx_model *m, int n_seq, const char *asst, int k, result *res) {
    memset(res, 0, sizeof *res);
    nx_ctx *ctx = make_ctx(m, n_seq);
    if (!ctx) return false;
    nx_spec_engine_params p = nx_spec_engine_default_params();
    if (asst) {
        p.spec.types[0] = NX_SPEC_ASSISTANT;
        p.spec.n_types = 1;
        p.spec.draft_model = asst;
        p.spec.draft_max = k;
        p.spec.adaptive = false;
    }
    nx_error e = {0};
    nx_spec_engine *en = NULL;
    bool ok = nx_spec_engine_create(ctx, &p, &en, &e) == NX_OK;
    if (!ok) fprintf(stderr, "  engine: %s\n", e.msg);
    nx_token ids[NP][64];
    for (int i = 0; i < NP; i++) prompt(i, ids[i]);
    for (int i0 = 0; ok && i0 < NP; i0 += n_seq) {
        nx_seq_id sid[NP];
        for (int i = i0; ok && i < NP && i < i0 + n_seq; i++) {
            nx_spec_request rq = {.prompt = ids[i], .n_prompt = g_lens[i], .n_predict = NPRED};
            ok = nx_spec_engine_add(en, &rq, &sid[i - i0], &e) == NX_OK;
        }
        while (ok && nx_spec_engine_n_active(en)) ok = nx_spec_engine_step(en, &e) == NX_OK;
        for (int i = i0; ok && i < NP && i < i0 + n_seq; i++) {
            int n = 0;
            const nx_token *o = nx_spec_engine_output(en, sid[i - i0], &n);
            res->n[i] = n > NPRED ? NPRED : n;
            memcpy(res->t[i], o, (size_t)res->n[i] * sizeof *o);
            nx_spec_engine_release(en, sid[i - i0]);
        }
        if (!ok) fprintf(stderr, "  run: %s\n", e.msg);
    }
    if (en) {
        res->drafted = nx_spec_engine_stats_total(en)->n_drafted;
        res->accepted = nx_spec_engine_stats_total(en)->n_accepted;
    }
    nx_spec_engine_free(en);
    nx_ctx_free(ctx);
    return ok;
}

static bool same(const result *a, const result *b) {
    for (int i = 0; i < NP; i++)
        if (a->n[i] != b->n[i] || memcmp(a->t[i], b->t[i], (size_t)a->n[i] * sizeof(nx_token))) return false;
    return true;
}

static void test_lossless(void) {
    char tpath[600], dpath[600], cpath[600];
    const char *tcfg = "{" TARGET_CFG "}";
    const char *dcfg = "{" TARGET_CFG ",\"asst_final_logit_softcapping\":30}";
    const char *ccfg = "{" TARGET_CFG ",\"n_centroids\":16,\"centroid_top_k\":4,\"asst_n_layer\":3}";
    CHECK(gen("gemma4", tcfg, NX_TYPE_F32, "target.gguf", 11, tpath, sizeof tpath));
    CHECK(gen("gemma4-assistant", dcfg, NX_TYPE_F32, "dense.gguf", 12, dpath, sizeof dpath));
    CHECK(gen("gemma4-assistant", ccfg, NX_TYPE_Q8_0, "centroid.gguf", 13, cpath, sizeof cpath));
    nx_model *m = NULL;
    if (nx_model_load(tpath, NULL, &m) != NX_OK) {
        CHECK_MSG(false, "load target: %s", nx_last_error());
        return;
    }
    /* both assistants load against the target; the centroid one uses its masked head */
    nx_ctx *ctx = make_ctx(m, 4);
    CHECK(ctx != NULL);
    const char *paths[2] = {dpath, cpath};
    for (int i = 0; i < 2 && ctx; i++) {
        nx_drafter *d = NULL;
        nx_error e = {0};
        CHECK_MSG(nx_assistant_create(ctx, paths[i], NULL, 4, &d, &e) == NX_OK, "%s", e.msg);
        nx_assistant *a = d ? nx_assistant_drafter_model(d) : NULL;
        CHECK(a != NULL);
        if (a) {
            CHECK_EQ_INT(nx_assistant_masked(a), i == 1);
            CHECK_EQ_INT(nx_assistant_n_embd(a), 32);
            CHECK_EQ_INT(nx_assistant_n_layer(a), i == 1 ? 3 : 2);
        }
        nx_drafter_free(d);
    }
    nx_ctx_free(ctx);

    result base1, base4, r;
    CHECK(run(m, 1, NULL, 0, &base1));
    CHECK(run(m, 4, NULL, 0, &base4));
    CHECK(same(&base1, &base4));
    for (int i = 0; i < NP; i++) CHECK_EQ_INT(base1.n[i], NPRED);
    for (int h = 0; h < 2; h++)
        for (int n_seq = 1; n_seq <= 4; n_seq += 3)
            for (int k = 1; k <= 8; k++) {
                bool ok = run(m, n_seq, paths[h], k, &r);
                CHECK_MSG(ok, "%s k=%d n_seq=%d", h ? "centroid" : "dense", k, n_seq);
                CHECK_MSG(ok && same(&r, n_seq == 1 ? &base1 : &base4), "output differs: %s head, k=%d, %d sequences",
                          h ? "centroid" : "dense", k, n_seq);
                CHECK_MSG(r.drafted > 0, "%s k=%d n_seq=%d drafted nothing", h ? "centroid" : "dense", k, n_seq);
                CHECK(r.accepted <= r.drafted);
            }
    nx_model_free(m);
}

static void test_bad_config(void) {
    char path[600];
    static const char *bad[] = {
        "{\"asst_sliding_window\":16}",              /* wider than the target's window */
        "{\"n_centroids\":7}",                       /* does not divide n_vocab */
        "{\"n_centroids\":16,\"centroid_top_k\":17}",
        "{\"asst_n_head\":3}",                       /* not a multiple of 2 kv heads */
        "{\"full_interval\":0,\"asst_full_interval\":2}",   /* full assistant layer, no full target layer */
        "{\"asst_n_embd\":0}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(path, sizeof path, "%s/bad.gguf", g_tmpdir);
        nx_error e = {0};
        nx_genmodel_opts o = {.arch = "gemma4-assistant", .config_json = bad[i], .seed = 1, .wtype = NX_TYPE_F32,
                              .out_path = path};
        CHECK_MSG(nx_genmodel_write(&o, &e) == NX_ERR_INVALID_ARG, "%s accepted", bad[i]);
        CHECK(strstr(e.msg, "gemma4-assistant") != NULL);
    }
}

/* An assistant made for a 32-wide target is refused by a 64-wide one, naming both widths. */
static void test_mismatch(void) {
    char tpath[600], apath[600];
    CHECK(gen("gemma4", "{" TARGET_CFG "}", NX_TYPE_F32, "t2.gguf", 21, tpath, sizeof tpath));
    CHECK(gen("gemma4-assistant", "{\"n_embd\":32}", NX_TYPE_F32, "a2.gguf", 22, apath, sizeof apath));
    nx_model *m = NULL;
    if (nx_model_load(tpath, NULL, &m) != NX_OK) {
        CHECK_MSG(false, "load target: %s", nx_last_error());
        return;
    }
    nx_ctx *ctx = make_ctx(m, 1);
    nx_drafter *d = NULL;
    nx_error e = {0};
    CHECK(ctx && nx_assistant_create(ctx, apath, NULL, 1, &d, &e) != NX_OK);
    CHECK_MSG(strstr(e.msg, "32") && strstr(e.msg, "64"), "%s", e.msg);
    nx_drafter_free(d);
    nx_ctx_free(ctx);
    nx_model_free(m);
}

int main(void) {
    if (!mkdtemp(g_tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(test_lossless);
    RUN(test_bad_config);
    RUN(test_mismatch);
    static const char *files[] = {"target.gguf", "dense.gguf", "centroid.gguf", "bad.gguf", "t2.gguf", "a2.gguf"};
    char p[600];
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", g_tmpdir, files[i]);
        unlink(p);
    }
    rmdir(g_tmpdir);
    return test_summary();
}
