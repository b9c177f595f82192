/* test_spec_engine.c — the speculative engine (src/spec/engine.c), the three invariants of
 * speculative.md §1:
 *   losslessness   greedy output identical with speculation off, mtp, ngram, ngram+mtp, draft
 *                  lengths 1..8, adaptive on/off, p_min, 1 and 4 concurrent sequences, on generated
 *                  qwen35 / qwen35moe models and on the bundled trained model;
 *   distribution   at temperature 0.8 the first 3 tokens over 2000 seeded runs with speculation on
 *                  match speculation off (chi-square, p > 0.01, deterministic seeds);
 *   state          after any accept/reject pattern the next-token logits and hidden (context: KV +
 *                  recurrent state) and the MTP drafter's proposals equal a fresh run over the
 *                  committed tokens, bit for bit.
 * Plus: the API (take / release / reuse, stop tokens, budget, context end), trace file, bad input;
 * per-request overrides (n_max, stage mask, fixed k above the engine's) and logprobs (equal with
 * speculation on and off, equal to the log-softmax of a plain evaluation, sorted). */
#include <unistd.h>
#include "test.h"
#include "dist_util.h"
#include "genmodel.h"
#include "spec/engine.h"
#include "spec/mtp.h"
#include "tokenizer.h"
#include "nextn.h"

#ifdef __SANITIZE_ADDRESS__
#define SLOW 1
#else
#define SLOW 0
#endif

static char g_tmpdir[] = "/tmp/nx_test_spec_engine_XXXXXX";

static nx_model *gen_load(const char *arch, const char *cfg, nx_type t, const char *file, uint64_t seed) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", g_tmpdir, file);
    nx_error e = {0};
    nx_genmodel_opts o = {.arch = arch, .config_json = cfg, .seed = seed, .wtype = t, .out_path = path};
    if (nx_genmodel_write(&o, &e) != NX_OK) { fprintf(stderr, "  gen-model: %s\n", e.msg); return NULL; }
    nx_model *m = NULL;
    if (nx_model_load(path, NULL, &m) != NX_OK) fprintf(stderr, "  load: %s\n", nx_last_error());
    return m;
}

static nx_model *trained(void) {
    nx_model *m = NULL;
    if (nx_model_load(NX_SOURCE_DIR "/models/tiny-qwen35-mtp-q8_0.gguf", NULL, &m) != NX_OK) return NULL;
    return m;
}

/* The KV cache type of every context the tests make (the default, f16, unless a test sets it). */
static nx_cache_type g_kv = NX_CACHE_F16;

static nx_ctx *make_ctx(nx_model *m, int n_ctx, int n_seq) {
    nx_ctx_params p = nx_ctx_default_params();
    p.n_ctx = n_ctx;
    p.n_seq_max = n_seq;
    p.n_ubatch = 64;
    p.n_threads = 1;
    p.type_k = p.type_v = g_kv;
    nx_ctx *c = NULL;
    if (nx_ctx_create(m, &p, &c) != NX_OK) fprintf(stderr, "  ctx: %s\n", nx_last_error());
    return c;
}

/* ===== prompts ===== */

#define MAXP 4
typedef struct prompts {
    int n;
    int len[MAXP];
    nx_token ids[MAXP][160];
} prompts;

/* Four prompts of different lengths; the later ones repeat themselves so the n-gram drafter finds
 * matches. */
static void make_prompts(prompts *p, int V) {
    static const int lens[MAXP] = {5, 12, 23, 40};
    p->n = MAXP;
    for (int i = 0; i < MAXP; i++) {
        p->len[i] = lens[i];
        for (int j = 0; j < lens[i]; j++) p->ids[i][j] = (nx_token)((j % (3 + i * 2)) * 41 + i * 7 + 3) % V;
    }
}

/* Text prompts through the model's tokenizer (the trained model). */
static bool text_prompts(prompts *p, const char *model_path) {
    static const char *texts[MAXP] = {
        "import os\nimport sys\n\n\ndef main():\n",
        "class Reader:\n    def __init__(self, path):\n        self.path = path\n",
        "def parse(line):\n    key, _, value = line.partition('=')\n    return key.strip(), value.strip()\n",
        "for i in range(10):\n    if i % 2 == 0:\n        print(i)\n",
    };
    nx_tokenizer *t = NULL;
    nx_error e = {0};
    if (nx_tokenizer_load(model_path, &t, &e) != NX_OK) { fprintf(stderr, "  tokenizer: %s\n", e.msg); return false; }
    p->n = MAXP;
    bool ok = true;
    for (int i = 0; i < MAXP && ok; i++) {
        nx_token_vec v = {0};
        ok = nx_tokenize(t, texts[i], strlen(texts[i]), 0, &v, &e) == NX_OK && v.n > 0 && v.n <= 160;
        if (ok) {
            p->len[i] = (int)v.n;
            memcpy(p->ids[i], v.ids, v.n * sizeof(nx_token));
        }
        nx_token_vec_free(&v);
    }
    nx_tokenizer_free(t);
    return ok;
}

/* ===== running the engine ===== */

typedef struct cfg {
    const char *types;       /* "" = off */
    int k;
    bool adaptive;
    float p_min;
    int draft_vocab;         /* MTP draft head over this many tokens (0: all) */
    const char *head_type;   /* MTP draft head requantized to this type (NULL: as stored) */
} cfg;

typedef struct result {
    int n[MAXP];
    nx_token t[MAXP][256];
    uint64_t drafted, accepted;
} result;

/* Run prompts 0..n_seq-1 concurrently (n_seq sequences) or one after another (n_seq = 1,
 * sequence reused), n_predict tokens each, greedy unless sp is given. */
static bool run(nx_model *m, const prompts *pr, int n_prompts, int n_seq, int n_predict, const cfg *c,
                const nx_sampler_params *sp, result *res) {
    memset(res, 0, sizeof *res);
    nx_ctx *ctx = make_ctx(m, 256, n_seq);
    if (!ctx) return false;
    nx_spec_engine_params p = nx_spec_engine_default_params();
    nx_error e = {0};
    if (*c->types && nx_spec_types_parse(c->types, p.spec.types, NX_SPEC_MAX_STAGES, &p.spec.n_types, &e) != NX_OK) {
        fprintf(stderr, "  %s\n", e.msg);
        nx_ctx_free(ctx);
        return false;
    }
    p.spec.draft_max = c->k;
    p.spec.adaptive = c->adaptive;
    p.spec.p_min = c->p_min;
    p.spec.draft_vocab = c->draft_vocab;
    if (c->head_type) {
        p.spec.draft_head_requant = nx_type_from_name(c->head_type, &p.spec.draft_head_type);
        if (!p.spec.draft_head_requant) fprintf(stderr, "  unknown head type %s\n", c->head_type);
    }
    if (sp) p.sampler = *sp;
    nx_spec_engine *en = NULL;
    bool ok = nx_spec_engine_create(ctx, &p, &en, &e) == NX_OK;
    if (!ok) fprintf(stderr, "  engine: %s\n", e.msg);
    for (int i0 = 0; ok && i0 < n_prompts; i0 += n_seq) {
        nx_seq_id ids[MAXP];
        for (int i = i0; ok && i < n_prompts && i < i0 + n_seq; i++) {
            nx_spec_request rq = {.prompt = pr->ids[i], .n_prompt = pr->len[i], .n_predict = n_predict};
            ok = nx_spec_engine_add(en, &rq, &ids[i - i0], &e) == NX_OK;
        }
        while (ok && nx_spec_engine_n_active(en)) ok = nx_spec_engine_step(en, &e) == NX_OK;
        for (int i = i0; ok && i < n_prompts && i < i0 + n_seq; i++) {
            int n = 0;
            const nx_token *o = nx_spec_engine_output(en, ids[i - i0], &n);
            res->n[i] = n;
            memcpy(res->t[i], o, (size_t)n * sizeof *o);
            nx_spec_engine_release(en, ids[i - i0]);
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

/* Plain greedy decoding without the engine: one nx_decode per token. */
static void naive_greedy(nx_model *m, const prompts *pr, int n_prompts, int n_predict, result *res) {
    const int V = nx_model_n_vocab(m);
    for (int i = 0; i < n_prompts; i++) {
        nx_ctx *c = make_ctx(m, 256, 1);
        nx_batch *b = nx_batch_create(pr->len[i]);
        for (int j = 0; j < pr->len[i]; j++) nx_batch_add(b, pr->ids[i][j], j, 0, j == pr->len[i] - 1);
        CHECK(nx_decode(c, b) == NX_OK);
        const float *lg = nx_ctx_logits(c, pr->len[i] - 1);
        for (int k = 0; k < n_predict; k++) {
            int am = 0;
            for (int v = 1; v < V; v++) if (lg[v] > lg[am]) am = v;
            res->t[i][k] = am;
            res->n[i] = k + 1;
            if (k + 1 == n_predict) break;
            nx_batch_clear(b);
            nx_batch_add(b, am, pr->len[i] + k, 0, true);
            CHECK(nx_decode(c, b) == NX_OK);
            lg = nx_ctx_logits(c, 0);
        }
        nx_batch_free(b);
        nx_ctx_free(c);
    }
}

static bool same_result(const result *a, const result *b, int n_prompts) {
    for (int i = 0; i < n_prompts; i++)
        if (a->n[i] != b->n[i] || memcmp(a->t[i], b->t[i], (size_t)a->n[i] * sizeof(nx_token))) return false;
    return true;
}

/* Greedy: every configuration gives the plain output, for 1 and 4 sequences (full: every k). */
static void check_lossless(nx_model *m, const prompts *pr, int n_predict, bool full) {
    CHECK(m != NULL);
    if (!m) return;
    result ref, r;
    naive_greedy(m, pr, pr->n, n_predict, &ref);
    cfg off = {"", 8, true, 0};
    CHECK(run(m, pr, pr->n, 1, n_predict, &off, NULL, &r));
    CHECK(same_result(&ref, &r, pr->n));
    cfg cfgs[40];
    int nc = 0;
    const int ks_full[] = {1, 2, 3, 4, 5, 6, 7, 8}, ks_short[] = {1, 3, 8};
    const int *ks = full && !SLOW ? ks_full : ks_short, nk = full && !SLOW ? 8 : 3;
    for (int i = 0; i < nk; i++) cfgs[nc++] = (cfg){"mtp", ks[i], false, 0};
    cfgs[nc++] = (cfg){"mtp", 8, true, 0};
    cfgs[nc++] = (cfg){"mtp", 4, false, 0.3f};
    cfgs[nc++] = (cfg){"ngram", 3, false, 0};
    cfgs[nc++] = (cfg){"ngram", 8, true, 0};
    cfgs[nc++] = (cfg){"ngram,mtp", 2, false, 0};
    cfgs[nc++] = (cfg){"ngram,mtp", 5, false, 0};
    cfgs[nc++] = (cfg){"ngram,mtp", 8, true, 0};
    cfgs[nc++] = (cfg){"mtp,ngram", 3, false, 0};
    /* cheaper draft heads: a quarter / half of the vocabulary, a Q4_0 copy, both, adaptive */
    const int V = nx_model_n_vocab(m);
    cfgs[nc++] = (cfg){"mtp", 3, false, 0, V / 4, NULL};
    cfgs[nc++] = (cfg){"mtp", 4, false, 0, 0, "q4_0"};
    cfgs[nc++] = (cfg){"mtp", 8, true, 0, V / 2, "q4_0"};
    cfgs[nc++] = (cfg){"ngram,mtp", 3, false, 0, V / 4, "q8_0"};
    uint64_t drafted = 0, accepted = 0;
    for (int i = 0; i < nc; i++) {
        for (int ns = 1; ns <= 4; ns += 3) {
            bool ok = run(m, pr, pr->n, ns, n_predict, &cfgs[i], NULL, &r);
            bool same = ok && same_result(&ref, &r, pr->n);
            CHECK_MSG(same, "%s k=%d adaptive=%d p_min=%g, %d sequences", cfgs[i].types, cfgs[i].k, cfgs[i].adaptive,
                      (double)cfgs[i].p_min, ns);
            drafted += r.drafted;
            accepted += r.accepted;
        }
    }
    fprintf(stderr, "  %d configurations x {1, 4} sequences: drafted %llu, accepted %llu\n", nc,
            (unsigned long long)drafted, (unsigned long long)accepted);
    CHECK(drafted > 0 && accepted > 0);   /* both paths were exercised */
    CHECK(accepted < drafted);
}

static void test_lossless_qwen35(void) {
    nx_model *m = gen_load("qwen35", "{}", NX_TYPE_Q8_0, "dense.gguf", 7);
    prompts pr;
    if (m) make_prompts(&pr, nx_model_n_vocab(m));
    check_lossless(m, &pr, SLOW ? 20 : 28, true);
    nx_model_free(m);
}

static void test_lossless_qwen35moe(void) {
    nx_model *m = gen_load("qwen35moe", "{\"n_expert\":8,\"n_expert_used\":3}", NX_TYPE_F32, "moe.gguf", 8);
    prompts pr;
    if (m) make_prompts(&pr, nx_model_n_vocab(m));
    check_lossless(m, &pr, SLOW ? 20 : 28, true);
    nx_model_free(m);
}

/* q8_0 / q4_0 KV (trunk and MTP head caches in 32-value blocks) on the trained model (its drafts
 * are accepted often, so both the accept and the reject paths run): MTP, n-gram and both still
 * give the plain greedy output (with the same KV type), 1 and 4 sequences. */
static void test_lossless_quant_kv(void) {
    nx_model *m = trained();
    REQUIRE_MSG(m, "models/tiny-qwen35-mtp-q8_0.gguf");
    prompts pr;
    CHECK(text_prompts(&pr, NX_SOURCE_DIR "/models/tiny-qwen35-mtp-q8_0.gguf"));
    if (SLOW) pr.n = 2;
    const nx_cache_type types[2] = {NX_CACHE_Q8_0, NX_CACHE_Q4_0};
    for (int i = 0; i < 2; i++) {
        g_kv = types[i];
        fprintf(stderr, "  KV %s:\n", nx_cache_type_name(g_kv));
        check_lossless(m, &pr, SLOW ? 16 : 24, false);
    }
    g_kv = NX_CACHE_F16;
    nx_model_free(m);
}

static void test_lossless_trained(void) {
    nx_model *m = trained();
    if (!m) SKIP("models/tiny-qwen35-mtp-q8_0.gguf not found");
    prompts pr;
    CHECK(text_prompts(&pr, NX_SOURCE_DIR "/models/tiny-qwen35-mtp-q8_0.gguf"));
    if (SLOW) pr.n = 2;
    check_lossless(m, &pr, SLOW ? 24 : 40, false);
    nx_model_free(m);
}

/* ===== state invariance ===== */

/* Run `rounds` rounds of every sequence, then compare: the engine context's next-token logits /
 * hidden for id_last (KV + recurrent state after all the rollbacks) with a fresh context that
 * decoded the committed tokens in one batch; and the MTP drafter's next proposals with a fresh
 * drafter warmed over the same tokens. */
static int check_state_once(nx_model *m, const prompts *pr, int n_seq, const cfg *c, int rounds) {
    const int V = nx_model_n_vocab(m), E = nx_model_n_embd(m);
    nx_ctx *ctx = make_ctx(m, 256, n_seq);
    nx_spec_engine_params p = nx_spec_engine_default_params();
    nx_error e = {0};
    CHECK(nx_spec_types_parse(c->types, p.spec.types, NX_SPEC_MAX_STAGES, &p.spec.n_types, &e) == NX_OK);
    p.spec.draft_max = c->k;
    p.spec.adaptive = c->adaptive;
    nx_spec_engine *en = NULL;
    CHECK_MSG(nx_spec_engine_create(ctx, &p, &en, &e) == NX_OK, "%s", e.msg);
    if (!en) { nx_ctx_free(ctx); return 1; }
    nx_seq_id ids[MAXP];
    for (int i = 0; i < n_seq; i++) {
        nx_spec_request rq = {.prompt = pr->ids[i], .n_prompt = pr->len[i], .n_predict = -1};
        CHECK(nx_spec_engine_add(en, &rq, &ids[i], &e) == NX_OK);
    }
    for (int r = 0; r < rounds; r++) CHECK(nx_spec_engine_step(en, &e) == NX_OK);
    int bad = 0;
    nx_drafter *dr = nx_spec_engine_drafter(en), *mtp = NULL;
    for (int s = 0; dr && s < nx_drafter_chain_n_stages(dr); s++)
        if (nx_mtp_drafter_head(nx_drafter_chain_stage(dr, s))) mtp = nx_drafter_chain_stage(dr, s);
    nx_batch *b = nx_batch_create(256);
    for (int i = 0; i < n_seq; i++) {
        int n_out = 0;
        const nx_token *out = nx_spec_engine_output(en, ids[i], &n_out);
        const int P = pr->len[i] + n_out - 1;   /* id_last = out[n_out - 1] sits at P */
        nx_token all[512];
        memcpy(all, pr->ids[i], (size_t)pr->len[i] * sizeof(nx_token));
        memcpy(all + pr->len[i], out, (size_t)n_out * sizeof(nx_token));
        /* the drafter first (it may not see a decode the engine does not know about) */
        nx_token d1[8], d2[8];
        float p1[8], p2[8];
        int n1 = 0, n2 = 0;
        if (mtp) {
            nx_draft_req rq = {.seq = ids[i], .pos = P, .id_last = all[P], .k_max = 4, .tok = d1, .p = p1};
            CHECK(nx_drafter_draft(mtp, &rq, 1, &e) == NX_OK);
            n1 = rq.n;
        }
        nx_batch_clear(b);
        nx_batch_add(b, all[P], P, ids[i], true);
        CHECK(nx_decode(ctx, b) == NX_OK);
        float *L1 = malloc((size_t)V * 4), *H1 = malloc((size_t)E * 4);
        memcpy(L1, nx_ctx_logits(ctx, 0), (size_t)V * 4);
        memcpy(H1, nx_ctx_hidden(ctx, 0), (size_t)E * 4);
        /* fresh: committed tokens + id_last in one batch */
        nx_ctx *f = make_ctx(m, 256, 1);
        nx_batch_clear(b);
        for (int j = 0; j <= P; j++) nx_batch_add(b, all[j], j, 0, j == P);
        CHECK(nx_decode(f, b) == NX_OK);
        if (memcmp(L1, nx_ctx_logits(f, P), (size_t)V * 4) || memcmp(H1, nx_ctx_hidden(f, P), (size_t)E * 4)) bad++;
        if (mtp) {
            nx_drafter *fd = NULL;
            CHECK(nx_mtp_drafter_create(f, &fd, &e) == NX_OK);
            CHECK(nx_drafter_begin(fd, 0, all, P, &e) == NX_OK);
            float *H = malloc((size_t)P * E * 4);
            for (int j = 0; j < P; j++) memcpy(H + (size_t)j * E, nx_ctx_hidden(f, j), (size_t)E * 4);
            nx_seq_id zs[512] = {0};
            nx_pos ps[512];
            for (int j = 0; j < P; j++) ps[j] = j;
            nx_target_rows rows = {.kind = NX_ROWS_PROMPT, .n = P, .tok = all, .pos = ps, .seq = zs, .hidden = H,
                                   .n_embd = E, .ctx = f};
            CHECK(nx_drafter_process(fd, &rows, &e) == NX_OK);
            nx_draft_req rq = {.seq = 0, .pos = P, .id_last = all[P], .k_max = 4, .tok = d2, .p = p2};
            CHECK(nx_drafter_draft(fd, &rq, 1, &e) == NX_OK);
            n2 = rq.n;
            if (n1 != n2 || memcmp(d1, d2, (size_t)n1 * sizeof *d1) || memcmp(p1, p2, (size_t)n1 * sizeof *p1)) bad++;
            free(H);
            nx_drafter_free(fd);
        }
        nx_ctx_free(f);
        free(L1);
        free(H1);
    }
    nx_batch_free(b);
    nx_spec_engine_free(en);
    nx_ctx_free(ctx);
    return bad;
}

static void check_state(nx_model *m, const prompts *pr) {
    const cfg cfgs[] = {{"mtp", 3, false, 0}, {"mtp", 8, false, 0}, {"ngram,mtp", 4, false, 0}, {"mtp", 6, true, 0}};
    int bad = 0, checks = 0;
    for (size_t c = 0; c < sizeof cfgs / sizeof *cfgs; c++)
        for (int rounds = 1; rounds <= (SLOW ? 4 : 9); rounds += SLOW ? 3 : 2)
            for (int ns = 1; ns <= 4; ns += 3) {
                bad += check_state_once(m, pr, ns, &cfgs[c], rounds);
                checks += ns;
            }
    fprintf(stderr, "  %d sequence states compared, %d different\n", checks, bad);
    CHECK_EQ_INT(bad, 0);
}

static void test_state_qwen35(void) {
    nx_model *m = gen_load("qwen35", "{}", NX_TYPE_F32, "state.gguf", 9);
    CHECK(m != NULL);
    if (!m) return;
    prompts pr;
    make_prompts(&pr, nx_model_n_vocab(m));
    check_state(m, &pr);
    nx_model_free(m);
}

static void test_state_trained(void) {
    nx_model *m = trained();
    if (!m) SKIP("models/tiny-qwen35-mtp-q8_0.gguf not found");
    prompts pr;
    CHECK(text_prompts(&pr, NX_SOURCE_DIR "/models/tiny-qwen35-mtp-q8_0.gguf"));
    if (SLOW) pr.n = 2;
    check_state(m, &pr);
    nx_model_free(m);
}

/* ===== distribution preservation ===== */

/* The trained model (its MTP head agrees with the trunk, so drafts are accepted and rejected
 * often), temperature 0.8 with the default chain (top-k 40, top-p 0.95, min-p 0.05). Each run: a
 * short prompt, 4 tokens (the round after the first token drafts 2), seeds disjoint per arm;
 * compared: each of the first 3 tokens and the 3-token prefix (hashed into buckets). */
static void test_distribution(void) {
    nx_model *m = trained();
    if (!m) SKIP("models/tiny-qwen35-mtp-q8_0.gguf not found");
    const int V = nx_model_n_vocab(m), runs = SLOW ? 400 : 2000, n_seq = 8;   /* fewer under ASan */
    prompts pr;
    CHECK(text_prompts(&pr, NX_SOURCE_DIR "/models/tiny-qwen35-mtp-q8_0.gguf"));
    dist_counts *cnt = calloc(3, sizeof *cnt);   /* arms: off, mtp, mtp with a cheap head (a quarter of the vocabulary, Q4_0) */
    for (int arm = 0; arm < 3; arm++) {
        nx_ctx_params cp = nx_ctx_default_params();
        cp.n_ctx = 16;
        cp.n_seq_max = n_seq;
        cp.n_ubatch = 32;
        cp.n_threads = 1;
        nx_ctx *ctx = NULL;
        CHECK(nx_ctx_create(m, &cp, &ctx) == NX_OK);
        nx_spec_engine_params p = nx_spec_engine_default_params();
        if (arm >= 1) {
            p.spec.types[0] = NX_SPEC_MTP;
            p.spec.n_types = 1;
            p.spec.draft_max = 3;
            p.spec.adaptive = false;
        }
        if (arm == 2) {
            p.spec.draft_vocab = V / 4;
            p.spec.draft_head_requant = true;
            p.spec.draft_head_type = NX_TYPE_Q4_0;
        }
        p.sampler = nx_sampler_default_params(V);
        p.sampler.temperature = 0.8f;
        nx_spec_engine *en = NULL;
        nx_error e = {0};
        CHECK(nx_spec_engine_create(ctx, &p, &en, &e) == NX_OK);
        /* disjoint seeds per arm */
        dist_count(en, &p.sampler, pr.ids[0], 6, arm ? 4 : 3, n_seq, (uint32_t)(1000 + arm * 100000), runs, &cnt[arm]);
        nx_spec_engine_free(en);
        nx_ctx_free(ctx);
    }
    dist_compare("mtp", &cnt[0], &cnt[1], 4);
    dist_compare("mtp cheap head", &cnt[0], &cnt[2], 4);
    CHECK(cnt[1].accepted > 100 && cnt[1].accepted < cnt[1].drafted);
    CHECK(cnt[2].accepted > 100 && cnt[2].accepted < cnt[2].drafted);
    free(cnt);
    nx_model_free(m);
}

/* ===== API ===== */

static void test_api(void) {
    nx_model *m = gen_load("qwen35", "{}", NX_TYPE_F32, "api.gguf", 3);
    CHECK(m != NULL);
    if (!m) return;
    const int V = nx_model_n_vocab(m);
    prompts pr;
    make_prompts(&pr, V);
    nx_ctx *ctx = make_ctx(m, 48, 2);
    nx_spec_engine_params p = nx_spec_engine_default_params();
    nx_error e = {0};
    char trace[600];
    snprintf(trace, sizeof trace, "%s/trace.ndjson", g_tmpdir);
    CHECK(nx_spec_types_parse("ngram,mtp", p.spec.types, NX_SPEC_MAX_STAGES, &p.spec.n_types, &e) == NX_OK);
    p.spec.trace_path = trace;
    nx_spec_engine *en = NULL;
    CHECK_MSG(nx_spec_engine_create(ctx, &p, &en, &e) == NX_OK, "%s", e.msg);
    if (!en) { nx_ctx_free(ctx); nx_model_free(m); return; }
    int n_names = 0;
    const char *const *names = nx_spec_engine_stage_names(en, &n_names);
    CHECK(n_names == 2 && !strcmp(names[0], "ngram") && !strcmp(names[1], "mtp"));
    /* bad requests */
    nx_seq_id s = -1;
    nx_spec_request rq = {.prompt = pr.ids[3], .n_prompt = 48, .n_predict = 5};
    CHECK(nx_spec_engine_add(en, &rq, &s, &e) == NX_ERR_RANGE);   /* no room for a generated token */
    rq.n_prompt = 0;
    CHECK(nx_spec_engine_add(en, &rq, &s, &e) == NX_ERR_INVALID_ARG);
    nx_token badp[2] = {1, (nx_token)V};
    rq.prompt = badp;
    rq.n_prompt = 2;
    CHECK(nx_spec_engine_add(en, &rq, &s, &e) == NX_ERR_INVALID_ARG);
    /* until the context is full: 40-token prompt, 48 positions -> 9 tokens (the last is never decoded) */
    rq.prompt = pr.ids[3];
    rq.n_prompt = 40;
    rq.n_predict = -1;
    nx_seq_id s0 = -1, s1 = -1, s2 = -1;
    CHECK(nx_spec_engine_add(en, &rq, &s0, &e) == NX_OK);
    /* a stop token: the greedy output of this prompt, its 3rd token */
    result ref;
    naive_greedy(m, &pr, 2, 6, &ref);
    nx_spec_request r1 = {.prompt = pr.ids[1], .n_prompt = pr.len[1], .n_predict = 50, .stop = &ref.t[1][2], .n_stop = 1};
    CHECK(nx_spec_engine_add(en, &r1, &s1, &e) == NX_OK);
    CHECK(nx_spec_engine_add(en, &r1, &s2, &e) == NX_ERR_RANGE);  /* both sequences busy */
    int taken = 0;
    while (nx_spec_engine_n_active(en)) {
        CHECK(nx_spec_engine_step(en, &e) == NX_OK);
        const nx_token *t;
        taken += nx_spec_engine_take(en, s0, &t);
    }
    int n0 = 0, n1 = 0;
    nx_spec_engine_output(en, s0, &n0);
    const nx_token *o1 = nx_spec_engine_output(en, s1, &n1);
    CHECK_EQ_INT(n0, 9);
    CHECK_EQ_INT(taken, 9);
    int first_stop = 0;
    while (ref.t[1][first_stop] != ref.t[1][2]) first_stop++;
    CHECK_EQ_INT(n1, first_stop + 1);
    CHECK(n1 > 0 && o1[n1 - 1] == ref.t[1][2]);
    /* release and reuse: the same output again */
    nx_spec_engine_release(en, s1);
    CHECK(nx_spec_engine_add(en, &r1, &s2, &e) == NX_OK);
    CHECK_EQ_INT(s2, s1);
    while (nx_spec_engine_n_active(en)) CHECK(nx_spec_engine_step(en, &e) == NX_OK);
    int n2 = 0;
    nx_spec_engine_output(en, s2, &n2);
    CHECK_EQ_INT(n2, n1);
    const nx_spec_stats *st = nx_spec_engine_stats_total(en);
    CHECK(st->n_rounds > 0 && st->t_verify > 0);
    nx_spec_engine_free(en);
    /* the trace: draft and accept lines */
    FILE *f = fopen(trace, "r");
    CHECK(f != NULL);
    int n_draft = 0, n_acc = 0;
    char line[4096];
    while (f && fgets(line, sizeof line, f)) {
        n_draft += strstr(line, "\"evt\":\"draft\"") != NULL;
        n_acc += strstr(line, "\"evt\":\"accept\"") != NULL;
    }
    if (f) fclose(f);
    CHECK(n_draft > 0 && n_acc >= n_draft);
    /* verify sweep */
    double sec[9] = {0};
    nx_spec_costs costs;
    CHECK(nx_seq_pos_next(ctx, 0) > 0 || 1);
    nx_ctx *c2 = make_ctx(m, 128, 1);
    nx_batch *b = nx_batch_create(4);
    nx_batch_add(b, 1, 0, 0, false);
    CHECK(nx_decode(c2, b) == NX_OK);
    CHECK_MSG(nx_spec_verify_sweep(c2, 0, 8, 3, sec, &costs, &e) == NX_OK, "%s", e.msg);
    CHECK(sec[1] > 0 && sec[8] > 0 && nx_spec_costs_verify(&costs, 8) >= nx_spec_costs_verify(&costs, 1));
    CHECK(nx_spec_verify_sweep(c2, 0, 8, 100, sec, &costs, &e) == NX_ERR_RANGE);
    nx_batch_free(b);
    nx_ctx_free(c2);
    nx_ctx_free(ctx);
    nx_model_free(m);
}

/* ===== per-request overrides and logprobs ===== */

typedef struct round_log { int max_k[4]; int rounds[4]; } round_log;

static void log_round(void *user, const nx_spec_round_info *info) {
    round_log *l = user;
    if (info->seq < 0 || info->seq >= 4) return;
    if (info->k > l->max_k[info->seq]) l->max_k[info->seq] = info->k;
    l->rounds[info->seq]++;
}

/* Two sequences side by side, sequence 0 with overrides o; returns the drafts counted for each. */
static void run_overrides(nx_model *m, const prompts *pr, const char *types, int k, const nx_spec_overrides *o,
                          uint64_t drafted[2], result *res, round_log *log) {
    nx_ctx *ctx = make_ctx(m, 256, 2);
    nx_spec_engine_params p = nx_spec_engine_default_params();
    nx_error e = {0};
    CHECK(nx_spec_types_parse(types, p.spec.types, NX_SPEC_MAX_STAGES, &p.spec.n_types, &e) == NX_OK);
    p.spec.draft_max = k;
    p.spec.adaptive = false;
    memset(log, 0, sizeof *log);
    p.on_round = log_round;
    p.user = log;
    nx_spec_engine *en = NULL;
    CHECK_MSG(nx_spec_engine_create(ctx, &p, &en, &e) == NX_OK, "%s", e.msg);
    memset(res, 0, sizeof *res);
    for (int i = 0; en && i < 2; i++) {
        nx_spec_request rq = {.prompt = pr->ids[i + 2], .n_prompt = pr->len[i + 2], .n_predict = 24,
                              .spec = i == 0 ? o : NULL};
        CHECK_MSG(nx_spec_engine_submit(en, &rq, i, &e) == NX_OK, "%s", e.msg);
    }
    while (en && nx_spec_engine_n_active(en)) CHECK(nx_spec_engine_step(en, &e) == NX_OK);
    for (int i = 0; en && i < 2; i++) {
        const nx_token *t = nx_spec_engine_output(en, i, &res->n[i + 2]);
        memcpy(res->t[i + 2], t, (size_t)res->n[i + 2] * sizeof *t);
        drafted[i] = nx_spec_engine_stats(en, i)->n_drafted;
    }
    nx_spec_engine_free(en);
    nx_ctx_free(ctx);
}

static void test_overrides(void) {
    nx_model *m = gen_load("qwen35", "{}", NX_TYPE_F32, "ovr.gguf", 12);
    CHECK(m != NULL);
    if (!m) return;
    prompts pr;
    make_prompts(&pr, nx_model_n_vocab(m));
    result ref, r;
    naive_greedy(m, &pr, 4, 24, &ref);
    ref.n[0] = ref.n[1] = 0;
    uint64_t d[2];
    round_log log;
    /* n_max 0: no drafting for that request, the other one drafts */
    nx_spec_overrides o = {.has_n_max = true, .n_max = 0};
    run_overrides(m, &pr, "mtp", 4, &o, d, &r, &log);
    CHECK(same_result(&ref, &r, 4));
    CHECK(d[0] == 0 && d[1] > 0);
    CHECK(log.max_k[0] == 0 && log.rounds[0] > 0 && log.max_k[1] == 4);
    /* a stage mask without the only stage */
    o = (nx_spec_overrides){.stage_mask = 2};
    run_overrides(m, &pr, "mtp", 4, &o, d, &r, &log);
    CHECK(same_result(&ref, &r, 4));
    CHECK(d[0] == 0 && d[1] > 0);
    /* a chain restricted to its second stage (mtp): every draft of the request is mtp's */
    o = (nx_spec_overrides){.stage_mask = 2};
    nx_ctx *ctx = make_ctx(m, 256, 1);
    nx_spec_engine_params p = nx_spec_engine_default_params();
    nx_error e = {0};
    CHECK(nx_spec_types_parse("ngram,mtp", p.spec.types, NX_SPEC_MAX_STAGES, &p.spec.n_types, &e) == NX_OK);
    p.spec.draft_max = 3;
    p.spec.adaptive = false;
    nx_spec_engine *en = NULL;
    CHECK(nx_spec_engine_create(ctx, &p, &en, &e) == NX_OK);
    nx_spec_request rq = {.prompt = pr.ids[3], .n_prompt = pr.len[3], .n_predict = 24, .spec = &o};
    CHECK(nx_spec_engine_submit(en, &rq, 0, &e) == NX_OK);
    while (en && nx_spec_engine_n_active(en)) CHECK(nx_spec_engine_step(en, &e) == NX_OK);
    const nx_spec_stats *st = nx_spec_engine_stats(en, 0);
    CHECK(st->stage_drafted[0] == 0 && st->stage_drafted[1] > 0 && st->n_drafted == st->stage_drafted[1]);
    int n = 0;
    const nx_token *t = nx_spec_engine_output(en, 0, &n);
    CHECK(n == ref.n[3] && !memcmp(t, ref.t[3], (size_t)n * sizeof *t));
    nx_spec_engine_free(en);
    nx_ctx_free(ctx);
    /* n_max above the engine's draft length, fixed k; n_min / adaptive accepted */
    o = (nx_spec_overrides){.has_n_max = true, .n_max = 6, .has_adaptive = true, .adaptive = false, .has_n_min = true,
                            .n_min = 1, .has_p_min = true, .p_min = 0.0f};
    run_overrides(m, &pr, "mtp", 2, &o, d, &r, &log);
    CHECK(same_result(&ref, &r, 4));
    CHECK(log.max_k[0] == 6 && log.max_k[1] == 2);
    /* bad overrides */
    ctx = make_ctx(m, 256, 1);
    p = nx_spec_engine_default_params();
    CHECK(nx_spec_engine_create(ctx, &p, &en, &e) == NX_OK);
    nx_spec_overrides bad[] = {{.has_n_max = true, .n_max = NX_SPEC_DRAFT_CAP + 1}, {.has_n_min = true, .n_min = -1},
                               {.has_n_max = true, .n_max = 2, .has_n_min = true, .n_min = 3},
                               {.has_p_min = true, .p_min = 1.5f}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        rq.spec = &bad[i];
        CHECK(nx_spec_engine_submit(en, &rq, 0, &e) == NX_ERR_INVALID_ARG);
        nx_seq_id s = -1;
        CHECK(nx_spec_engine_add(en, &rq, &s, &e) == NX_ERR_INVALID_ARG);
    }
    nx_spec_engine_free(en);
    nx_ctx_free(ctx);
    nx_model_free(m);
}

/* Logprobs: equal with speculation on and off; the chosen token's equals the log-softmax of a
 * plain evaluation's logits; the alternatives sorted, the greedy token first. */
static void test_logprobs(void) {
    nx_model *m = trained();   /* its MTP head agrees with the trunk: drafts get accepted */
    if (!m) SKIP("models/tiny-qwen35-mtp-q8_0.gguf not found");
    const int V = nx_model_n_vocab(m), NP = 7, NPRED = 20;
    prompts pr;
    CHECK(text_prompts(&pr, NX_SOURCE_DIR "/models/tiny-qwen35-mtp-q8_0.gguf"));
    static nx_token_prob ch[2][2][32], top[2][2][32][NX_SPEC_MAX_PROBS];
    memset(top, 0, sizeof top);
    int nout[2][2] = {{0}};
    nx_token out[2][2][32];
    const char *types[2] = {"", "mtp"};
    for (int a = 0; a < 2; a++) {
        nx_ctx *ctx = make_ctx(m, 256, 2);
        nx_spec_engine_params p = nx_spec_engine_default_params();
        nx_error e = {0};
        if (*types[a]) CHECK(nx_spec_types_parse(types[a], p.spec.types, NX_SPEC_MAX_STAGES, &p.spec.n_types, &e) == NX_OK);
        p.spec.draft_max = 4;
        nx_spec_engine *en = NULL;
        CHECK(nx_spec_engine_create(ctx, &p, &en, &e) == NX_OK);
        nx_spec_request r0 = {.prompt = pr.ids[2], .n_prompt = pr.len[2], .n_predict = NPRED, .n_probs = NP};
        nx_spec_request r1 = {.prompt = pr.ids[3], .n_prompt = pr.len[3], .n_predict = NPRED, .n_probs = NX_SPEC_MAX_PROBS};
        nx_seq_id s0 = -1;
        CHECK(nx_spec_engine_add(en, &r0, &s0, &e) == NX_OK);    /* blocking add keeps logprobs too */
        CHECK(nx_spec_engine_submit(en, &r1, 1, &e) == NX_OK);
        while (nx_spec_engine_n_active(en)) CHECK(nx_spec_engine_step(en, &e) == NX_OK);
        for (int s = 0; s < 2; s++) {
            const nx_token *o = nx_spec_engine_output(en, s, &nout[a][s]);
            memcpy(out[a][s], o, (size_t)nout[a][s] * sizeof *o);
            for (int i = 0; i < nout[a][s]; i++)
                CHECK_EQ_INT(nx_spec_engine_logprobs(en, s, i, &ch[a][s][i], top[a][s][i], NX_SPEC_MAX_PROBS),
                             s == 0 ? NP : NX_SPEC_MAX_PROBS);
            CHECK_EQ_INT(nx_spec_engine_logprobs(en, s, nout[a][s], &ch[a][s][0], NULL, 0), -1);
            CHECK_EQ_INT(nx_spec_engine_logprobs(en, s, 0, NULL, top[a][s][0], 3), 3);
        }
        if (a == 1) CHECK(nx_spec_engine_stats_total(en)->n_accepted > 0);
        nx_spec_request r2 = {.prompt = pr.ids[0], .n_prompt = pr.len[0], .n_predict = 2};
        nx_spec_engine_release(en, 0);
        CHECK(nx_spec_engine_add(en, &r2, &s0, &e) == NX_OK);
        CHECK_EQ_INT(nx_spec_engine_logprobs(en, s0, 0, &ch[a][0][31], NULL, 0), -1);   /* not asked for */
        nx_spec_engine_free(en);
        nx_ctx_free(ctx);
    }
    for (int s = 0; s < 2; s++) {
        CHECK(nout[0][s] == NPRED && nout[1][s] == NPRED && !memcmp(out[0][s], out[1][s], sizeof out[0][s][0] * NPRED));
        CHECK(!memcmp(ch[0][s], ch[1][s], sizeof ch[0][s][0] * NPRED));
        CHECK(!memcmp(top[0][s], top[1][s], sizeof top[0][s][0] * NPRED));
    }
    /* against a plain evaluation of sequence 1's prompt + output */
    nx_ctx *c = make_ctx(m, 256, 1);
    nx_batch *b = nx_batch_create(256);
    const int L = pr.len[3];
    for (int j = 0; j < L; j++) nx_batch_add(b, pr.ids[3][j], j, 0, true);
    for (int j = 0; j + 1 < NPRED; j++) nx_batch_add(b, out[0][1][j], L + j, 0, true);
    CHECK(nx_decode(c, b) == NX_OK);
    int bad = 0;
    for (int i = 0; i < NPRED; i++) {
        const float *lg = nx_ctx_logits(c, L - 1 + i);
        double mx = lg[0], sum = 0;
        for (int v = 1; v < V; v++) if (lg[v] > mx) mx = lg[v];
        for (int v = 0; v < V; v++) sum += exp(lg[v] - mx);
        const double lse = mx + log(sum);
        const nx_token_prob *tp = top[0][1][i];
        if (ch[0][1][i].id != out[0][1][i] || fabs(ch[0][1][i].logprob - (lg[out[0][1][i]] - lse)) > 1e-5) bad++;
        if (tp[0].id != out[0][1][i] || tp[0].logprob != ch[0][1][i].logprob) bad++;   /* greedy: the best */
        for (int j = 0; j < NX_SPEC_MAX_PROBS; j++) {
            if (fabs(tp[j].logprob - (lg[tp[j].id] - lse)) > 1e-5) bad++;
            if (j && !(tp[j].logprob <= tp[j - 1].logprob)) bad++;
            int greater = 0;   /* exactly j tokens rank above the j-th */
            for (int v = 0; v < V; v++) greater += lg[v] > lg[tp[j].id];
            if (greater > j) bad++;
        }
    }
    CHECK_EQ_INT(bad, 0);
    nx_batch_free(b);
    nx_ctx_free(c);
    nx_model_free(m);
}

#define TRUN(fn) do { double t0_ = nx_spec_time_now(); RUN(fn); \
    fprintf(stderr, "     (%.2f s)\n", nx_spec_time_now() - t0_); } while (0)

int main(void) {
    if (!mkdtemp(g_tmpdir)) { perror("mkdtemp"); return 1; }
    TRUN(test_api);
    TRUN(test_lossless_qwen35);
    TRUN(test_lossless_qwen35moe);
    TRUN(test_lossless_quant_kv);
    TRUN(test_lossless_trained);
    TRUN(test_state_qwen35);
    TRUN(test_state_trained);
    TRUN(test_distribution);
    TRUN(test_overrides);
    TRUN(test_logprobs);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", g_tmpdir);
    return test_summary();
}
