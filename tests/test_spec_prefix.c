/* test_spec_prefix.c — non-blocking requests of the speculative engine (nx_spec_engine_submit):
 *   prefix reuse   a request reusing its sequence's cache (attention KV trimmed, recurrent state
 *                  from a checkpoint or the live end, the MTP drafter's own state kept) gives the
 *                  same logprobs (last prompt row included), greedy output and final context state
 *                  as a fresh run, bit for bit: shared prefixes below / at / above a checkpoint, the
 *                  whole cache, a prompt inside the cache, too few checkpoints; speculation off and
 *                  mtp; 1 and 3 sequences; an attention-only model (gemma4 rings);
 *   chunked        prompts decoded max_prompt_rows at a time inside the step's batch while another
 *                  sequence decodes: it advances every step, outputs equal solo runs. */
#include <unistd.h>
#include "test.h"
#include "ctx.h"
#include "genmodel.h"
#include "kv.h"
#include "spec/engine.h"
#include "spec/mtp.h"
#include "nextn.h"

#ifdef __SANITIZE_ADDRESS__
#define SLOW 1
#else
#define SLOW 0
#endif

static char g_tmpdir[] = "/tmp/nx_test_spec_prefix_XXXXXX";
static nx_model *g_model;
static int g_V;

static nx_model *gen_load(const char *arch, const char *file, uint64_t seed) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", g_tmpdir, file);
    nx_error e = {0};
    nx_genmodel_opts o = {.arch = arch, .config_json = "{}", .seed = seed, .wtype = NX_TYPE_F32, .out_path = path};
    if (nx_genmodel_write(&o, &e) != NX_OK) { fprintf(stderr, "  gen-model: %s\n", e.msg); return NULL; }
    nx_model *m = NULL;
    if (nx_model_load(path, NULL, &m) != NX_OK) fprintf(stderr, "  load: %s\n", nx_last_error());
    return m;
}

#define NCTX 160
#define NPROBS 20

typedef struct setup {
    const char *types;           /* "" = speculation off */
    int n_seq;
    int interval, max_ck, max_rows;
} setup;

typedef struct eng {
    nx_ctx *ctx;
    nx_spec_engine *en;
} eng;

static bool eng_open(eng *g, const setup *su) {
    memset(g, 0, sizeof *g);
    nx_ctx_params cp = nx_ctx_default_params();
    cp.n_ctx = NCTX;
    cp.n_seq_max = su->n_seq;
    cp.n_ubatch = 16;
    cp.n_threads = 1;
    if (nx_ctx_create(g_model, &cp, &g->ctx) != NX_OK) { fprintf(stderr, "  ctx: %s\n", nx_last_error()); return false; }
    nx_spec_engine_params p = nx_spec_engine_default_params();
    nx_error e = {0};
    if (*su->types && nx_spec_types_parse(su->types, p.spec.types, NX_SPEC_MAX_STAGES, &p.spec.n_types, &e) != NX_OK)
        return false;
    p.spec.draft_max = 3;
    p.spec.adaptive = false;
    p.checkpoint_interval = su->interval;
    p.max_checkpoints = su->max_ck;
    p.max_prompt_rows = su->max_rows;
    if (nx_spec_engine_create(g->ctx, &p, &g->en, &e) != NX_OK) {
        fprintf(stderr, "  engine: %s\n", e.msg);
        return false;
    }
    return true;
}

static void eng_close(eng *g) {
    nx_spec_engine_free(g->en);
    nx_ctx_free(g->ctx);
}

/* What a request produced: tokens and every token's logprobs. */
typedef struct res {
    int n;
    nx_token t[64];
    nx_token_prob chosen[64], top[64][NPROBS];
    int n_reused;
} res;

static void collect(const eng *g, nx_seq_id s, res *r) {
    const nx_token *o = nx_spec_engine_output(g->en, s, &r->n);
    memcpy(r->t, o, (size_t)r->n * sizeof *o);
    for (int i = 0; i < r->n; i++) CHECK_EQ_INT(nx_spec_engine_logprobs(g->en, s, i, &r->chosen[i], r->top[i], NPROBS), NPROBS);
    r->n_reused = nx_spec_engine_n_reused(g->en, s);
}

static bool same_res(const res *a, const res *b) {
    if (a->n != b->n || memcmp(a->t, b->t, (size_t)a->n * sizeof(nx_token))) return false;
    for (int i = 0; i < a->n; i++)
        if (memcmp(&a->chosen[i], &b->chosen[i], sizeof a->chosen[i]) || memcmp(a->top[i], b->top[i], sizeof a->top[i]))
            return false;
    return true;
}

/* Run requests (seq[i], prompt[i]) submitted together until all are done; results per request. */
typedef struct job {
    nx_seq_id seq;
    const nx_token *prompt;
    int n_prompt, n_predict;
    bool reuse;
} job;

static bool run_jobs(eng *g, const job *jobs, int n, res *out) {
    nx_error e = {0};
    for (int i = 0; i < n; i++) {
        nx_spec_request rq = {.prompt = jobs[i].prompt, .n_prompt = jobs[i].n_prompt, .n_predict = jobs[i].n_predict,
                              .n_probs = NPROBS, .reuse_prefix = jobs[i].reuse};
        if (nx_spec_engine_submit(g->en, &rq, jobs[i].seq, &e) != NX_OK) {
            fprintf(stderr, "  submit: %s\n", e.msg);
            return false;
        }
    }
    int guard = 0;
    while (nx_spec_engine_n_active(g->en) && guard++ < 1000)
        if (nx_spec_engine_step(g->en, &e) != NX_OK) {
            fprintf(stderr, "  step: %s\n", e.msg);
            return false;
        }
    for (int i = 0; i < n; i++) {
        collect(g, jobs[i].seq, &out[i]);
        nx_spec_engine_release(g->en, jobs[i].seq);
    }
    return true;
}

static nx_drafter *mtp_stage(nx_spec_engine *en) {
    nx_drafter *dr = nx_spec_engine_drafter(en);
    for (int s = 0; dr && s < nx_drafter_chain_n_stages(dr); s++)
        if (nx_mtp_drafter_head(nx_drafter_chain_stage(dr, s))) return nx_drafter_chain_stage(dr, s);
    return NULL;
}

/* The state of seq in a and b after their last requests (the same tokens): the recurrent state
 * bit for bit, the MTP drafter's next proposals, and the logits / hidden of one more decoded
 * token (attention KV included). Leaves both engines unusable for that sequence. */
static bool same_state(const eng *a, const eng *b, nx_seq_id s, nx_token id_last) {
    nx_kv *ka = a->ctx->kv, *kb = b->ctx->kv;
    const int len = nx_kv_seq_len(ka, s);
    if (len != nx_kv_seq_len(kb, s) || len + 1 >= NCTX) return false;
    const int64_t R = nx_kv_rec_floats(ka);
    float *ra = malloc((size_t)(R + 1) * sizeof(float)), *rb = malloc((size_t)(R + 1) * sizeof(float));
    nx_kv_rec_save(ka, s, ra);
    nx_kv_rec_save(kb, s, rb);
    bool same = !memcmp(ra, rb, (size_t)R * sizeof(float));
    free(ra);
    free(rb);
    nx_drafter *da = mtp_stage(a->en), *db = mtp_stage(b->en);
    if ((da != NULL) != (db != NULL)) return false;
    nx_error e = {0};
    if (da) {
        nx_token t1[4], t2[4];
        float p1[4], p2[4];
        nx_draft_req q1 = {.seq = s, .pos = len, .id_last = id_last, .k_max = 4, .tok = t1, .p = p1};
        nx_draft_req q2 = q1;
        q2.tok = t2;
        q2.p = p2;
        CHECK(nx_drafter_draft(da, &q1, 1, &e) == NX_OK);
        CHECK(nx_drafter_draft(db, &q2, 1, &e) == NX_OK);
        if (q1.n != q2.n || memcmp(t1, t2, (size_t)q1.n * sizeof *t1) || memcmp(p1, p2, (size_t)q1.n * sizeof *p1))
            same = false;
    }
    const int V = g_V, E = nx_model_n_embd(g_model);
    nx_batch *bt = nx_batch_create(1);
    nx_batch_add(bt, id_last, len, s, true);
    CHECK(nx_decode(a->ctx, bt) == NX_OK);
    CHECK(nx_decode(b->ctx, bt) == NX_OK);
    if (memcmp(nx_ctx_logits(a->ctx, 0), nx_ctx_logits(b->ctx, 0), (size_t)V * sizeof(float)) ||
        memcmp(nx_ctx_hidden(a->ctx, 0), nx_ctx_hidden(b->ctx, 0), (size_t)E * sizeof(float)))
        same = false;
    nx_batch_free(bt);
    return same;
}

/* A fixed pseudo-random prompt. */
static void fill(nx_token *t, int n, uint32_t seed) {
    for (int i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        t[i] = (nx_token)((seed >> 8) % (uint32_t)g_V);
    }
}

/* ===== prefix reuse ===== */

/* Request A (40-token prompt, 12 tokens) in seq, then request B reusing seq's cache, sharing
 * `shared` tokens with A's cache (cache = A's prompt + 11 generated tokens); B's results, state
 * and reuse count against a fresh engine. Other sequences (n_seq 3) run requests alongside. */
static int check_reuse(const setup *su, int shared, int nb_extra, int expect_reused) {
    enum { NA = 40, GA = 12 };
    nx_token pa[NA], pb[128], other[2][30];
    fill(pa, NA, 11);
    fill(other[0], 30, 21);
    fill(other[1], 30, 31);
    eng g, f;
    CHECK(eng_open(&g, su));
    CHECK(eng_open(&f, su));
    const nx_seq_id s = su->n_seq > 1 ? 1 : 0;
    job ja[3] = {{s, pa, NA, GA, false}};
    int nja = 1;
    for (int o = 0; o < su->n_seq - 1; o++) ja[nja++] = (job){o == 0 ? 0 : 2, other[o], 30 - 7 * o, 9, false};
    res ra[3];
    CHECK(run_jobs(&g, ja, nja, ra));
    int n_cache = 0;
    const nx_token *cache = nx_spec_engine_cached(g.en, s, &n_cache);
    CHECK_EQ_INT(n_cache, NA + GA - 1);
    CHECK(cache && !memcmp(cache, pa, sizeof pa) && !memcmp(cache + NA, ra[0].t, (GA - 1) * sizeof(nx_token)));
    /* B: the first `shared` cache tokens, then its own */
    memcpy(pb, cache, (size_t)shared * sizeof(nx_token));
    fill(pb + shared, nb_extra, 77);
    if (nb_extra > 0 && shared < n_cache && pb[shared] == cache[shared]) pb[shared] = (cache[shared] + 1) % g_V;
    const int nb = shared + nb_extra;
    job jb[3] = {{s, pb, nb, 10, true}};
    int njb = 1;
    for (int o = 0; o < su->n_seq - 1; o++) jb[njb++] = (job){o == 0 ? 0 : 2, other[1 - o], 20 + 5 * o, 8, o == 1};
    res rb[3], fb[3];
    CHECK(run_jobs(&g, jb, njb, rb));
    for (int i = 0; i < njb; i++) jb[i].reuse = false;
    CHECK(run_jobs(&f, jb, njb, fb));
    int bad = 0;
    for (int i = 0; i < njb; i++) bad += !same_res(&rb[i], &fb[i]);
    if (rb[0].n_reused != expect_reused) {
        fprintf(stderr, "  shared %d: reused %d, expected %d\n", shared, rb[0].n_reused, expect_reused);
        bad++;
    }
    CHECK_EQ_INT(fb[0].n_reused, 0);
    if (!same_state(&g, &f, s, rb[0].t[rb[0].n - 1])) bad++;
    eng_close(&g);
    eng_close(&f);
    return bad;
}

static void test_reuse(void) {
    /* cache: 40 prompt + 11 generated = 51 tokens; checkpoints (interval 8) at 8..40 (40 = the
     * prompt's end as well); max_ck 3 keeps 24, 32, 40 */
    typedef struct rc { int shared, extra, ck, reused; } rc;
    const rc cases[] = {
        {23, 10, 8, 16},    /* below a checkpoint */
        {24, 10, 8, 24},    /* at one */
        {25, 10, 8, 24},    /* above */
        {51, 6, 8, 51},     /* the whole cache: its live end */
        {40, 0, 8, 32},     /* B = A's prompt: the last prompt token is decoded again */
        {51, 0, 8, 40},     /* B = the whole cache: back to the prompt-end checkpoint */
        {45, 5, 8, 40},     /* into the generated part */
        {19, 12, 3, 0},     /* the checkpoints below 24 were dropped: nothing reusable */
        {30, 12, 3, 24},
        {5, 20, 8, 0},      /* shorter than any checkpoint */
    };
    const char *types[] = {"", "mtp", "ngram,mtp"};
    int bad = 0, runs = 0;
    for (int t = 0; t < 3; t++)
        for (int ns = 1; ns <= 3; ns += 2)
            for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
                if (SLOW && t == 2 && c % 3 != 0) continue;
                setup su = {types[t], ns, 8, cases[c].ck, ns > 1 ? 5 : 0};
                int b = check_reuse(&su, cases[c].shared, cases[c].extra, cases[c].reused);
                CHECK_MSG(b == 0, "spec '%s', %d sequences, shared %d: %d differences", types[t], ns, cases[c].shared, b);
                bad += b;
                runs++;
            }
    fprintf(stderr, "  %d reuse runs, %d different\n", runs, bad);
}

/* A model without recurrent layers (gemma4: sliding-window rings): any shared length is kept
 * while the rings still hold the window before it, else nothing. */
static void test_reuse_attention_only(void) {
    nx_model *qm = g_model;
    const int qv = g_V;
    g_model = gen_load("gemma4", "g4.gguf", 5);
    CHECK(g_model != NULL);
    if (g_model) {
        g_V = nx_model_n_vocab(g_model);
        const int shared[] = {44, 37, 10, 47}, expect[] = {44, 37, 0, 47};
        int bad = 0;
        for (int t = 0; t < 2; t++)
            for (int i = 0; i < 4; i++) {
                setup su = {t ? "ngram" : "", 1, 8, 8, 0};
                int b = check_reuse(&su, shared[i], 6, expect[i]);
                CHECK_MSG(b == 0, "gemma4, spec '%s', shared %d: %d differences", su.types, shared[i], b);
                bad += b;
            }
        nx_model_free(g_model);
    }
    g_model = qm;
    g_V = qv;
}

/* reuse_prefix without a cache, or after nx_spec_engine_forget / a plain request, reuses nothing;
 * submit's argument errors. */
static void test_reuse_edges(void) {
    setup su = {"mtp", 2, 8, 8, 0};
    eng g;
    CHECK(eng_open(&g, &su));
    nx_token p[30];
    fill(p, 30, 5);
    nx_error e = {0};
    job j = {0, p, 30, 4, true};
    res r, r2;
    CHECK(run_jobs(&g, &j, 1, &r));
    CHECK_EQ_INT(r.n_reused, 0);
    CHECK(run_jobs(&g, &j, 1, &r2));
    CHECK_EQ_INT(r2.n_reused, 24);     /* 29 shared tokens: the checkpoint at 24 */
    CHECK(same_res(&r, &r2));
    nx_spec_engine_forget(g.en, 0);
    CHECK(run_jobs(&g, &j, 1, &r2));
    CHECK_EQ_INT(r2.n_reused, 0);
    /* a blocking add restarts the sequence; its cache (no checkpoints) serves the live end only */
    nx_seq_id s = -1;
    nx_spec_request rq = {.prompt = p, .n_prompt = 20, .n_predict = 1};
    CHECK(nx_spec_engine_add(g.en, &rq, &s, &e) == NX_OK);
    CHECK_EQ_INT(s, 0);
    nx_spec_engine_release(g.en, 0);
    job j2 = {0, p, 30, 4, true};
    CHECK(run_jobs(&g, &j2, 1, &r2));
    CHECK_EQ_INT(r2.n_reused, 20);
    CHECK(same_res(&r, &r2));
    /* errors */
    rq = (nx_spec_request){.prompt = p, .n_prompt = 10, .n_predict = 3};
    CHECK(nx_spec_engine_submit(g.en, &rq, 2, &e) == NX_ERR_INVALID_ARG);
    CHECK(nx_spec_engine_submit(g.en, &rq, -1, &e) == NX_ERR_INVALID_ARG);
    CHECK(nx_spec_engine_submit(g.en, &rq, 1, &e) == NX_OK);
    CHECK(nx_spec_engine_prompt_pending(g.en, 1));
    CHECK(nx_spec_engine_active(g.en, 1));
    CHECK(nx_spec_engine_submit(g.en, &rq, 1, &e) == NX_ERR_INVALID_ARG);   /* busy */
    rq.n_probs = NX_SPEC_MAX_PROBS + 1;
    CHECK(nx_spec_engine_submit(g.en, &rq, 0, &e) == NX_ERR_INVALID_ARG);
    rq.n_probs = 0;
    rq.n_prompt = NCTX;
    CHECK(nx_spec_engine_submit(g.en, &rq, 0, &e) == NX_ERR_RANGE);
    /* released while its prompt is pending: the part decoded so far stays reusable */
    nx_spec_engine_release(g.en, 1);
    CHECK(!nx_spec_engine_active(g.en, 1));
    CHECK(nx_spec_engine_step(g.en, &e) == NX_OK);
    eng_close(&g);
}

/* nx_kv_rec_save / nx_kv_seq_restore directly: argument errors and a ring that no longer holds
 * the window change nothing; a restore sets the length and the recurrent state. */
static void test_kv_restore(void) {
    const int64_t w = 4, cs = 3, ss = 5;
    const int ring = 6, win = 3;
    nx_kv_config c = {.n_seq = 2, .n_ctx = 32, .type_k = NX_TYPE_F32, .type_v = NX_TYPE_F32, .n_attn = 1,
                      .k_width = &w, .v_width = &w, .n_rec = 1, .conv_size = &cs, .ssm_size = &ss,
                      .ring_cells = &ring, .window = &win};
    nx_kv *kv = NULL;
    nx_error e = {0};
    CHECK(nx_kv_create(&c, &kv, &e) == NX_OK);
    if (!kv) return;
    CHECK_EQ_INT(nx_kv_rec_floats(kv), 8);
    float row[4] = {1, 2, 3, 4}, save[8], other[8], now[8];
    for (int p = 0; p < 10; p++) {
        nx_kv_put_k(kv, 0, 0, p, row);
        nx_kv_put_v(kv, 0, 0, p, row);
    }
    nx_kv_seq_set_len(kv, 0, 10);
    float *live = nx_kv_conv(kv, 0, 0, -1);   /* conv then ssm: one block of 8 */
    for (int i = 0; i < 8; i++) { live[i] = (float)(i + 1); other[i] = (float)(100 + i); }
    nx_kv_rec_save(kv, 0, save);
    CHECK(save[0] == 1 && save[7] == 8);
    CHECK(nx_kv_seq_restore(kv, 0, 11, save, &e) == NX_ERR_INVALID_ARG);
    CHECK(nx_kv_seq_restore(kv, 0, 8, NULL, &e) == NX_ERR_INVALID_ARG);    /* a recurrent state is needed */
    CHECK(nx_kv_seq_restore(kv, 0, 2, other, &e) == NX_ERR_UNSUPPORTED);   /* positions 0, 1 overwritten */
    CHECK(nx_kv_seq_restore(kv, 2, 2, other, &e) == NX_ERR_INVALID_ARG);
    CHECK_EQ_INT(nx_kv_seq_len(kv, 0), 10);
    nx_kv_rec_save(kv, 0, now);
    CHECK(!memcmp(now, save, sizeof now));
    CHECK(nx_kv_seq_restore(kv, 0, 10, NULL, &e) == NX_OK);                /* the live end */
    CHECK(nx_kv_seq_restore(kv, 0, 8, other, &e) == NX_OK);
    CHECK_EQ_INT(nx_kv_seq_len(kv, 0), 8);
    nx_kv_rec_save(kv, 0, now);
    CHECK(!memcmp(now, other, sizeof now));
    CHECK(nx_kv_seq_restore(kv, 0, 0, NULL, &e) == NX_OK);
    CHECK_EQ_INT(nx_kv_seq_len(kv, 0), 0);
    nx_kv_rec_save(kv, 0, now);
    CHECK(now[0] == 0 && now[7] == 0);
    nx_kv_free(kv);
}

/* ===== chunked prompts ===== */

static void check_chunked(const char *types) {
    enum { MAXR = 5, NL = 70 };
    setup su = {types, 3, 8, 8, MAXR};
    eng g, f;
    CHECK(eng_open(&g, &su));
    CHECK(eng_open(&f, &su));
    nx_token p0[6], p1[NL], p2[33];
    fill(p0, 6, 1);
    fill(p1, NL, 2);
    fill(p2, 33, 3);
    nx_error e = {0};
    nx_spec_request r0 = {.prompt = p0, .n_prompt = 6, .n_predict = 60, .n_probs = NPROBS};
    CHECK(nx_spec_engine_submit(g.en, &r0, 0, &e) == NX_OK);
    int steps = 0;
    while (nx_spec_engine_prompt_pending(g.en, 0)) {
        CHECK(nx_spec_engine_step(g.en, &e) == NX_OK);
        steps++;
    }
    CHECK_EQ_INT(steps, 2);   /* 5 rows, then 1 */
    int n0 = 0;
    nx_spec_engine_output(g.en, 0, &n0);
    CHECK_EQ_INT(n0, 1);
    /* two long prompts arrive while sequence 0 decodes */
    nx_spec_request r1 = {.prompt = p1, .n_prompt = NL, .n_predict = 12, .n_probs = NPROBS};
    nx_spec_request r2 = {.prompt = p2, .n_prompt = 33, .n_predict = 7, .n_probs = NPROBS};
    CHECK(nx_spec_engine_submit(g.en, &r1, 1, &e) == NX_OK);
    CHECK(nx_spec_engine_submit(g.en, &r2, 2, &e) == NX_OK);
    int bad_rows = 0, starved = 0, prompt_steps = 0;
    while (nx_spec_engine_n_active(g.en)) {
        const int before0 = n0;
        const bool act0 = nx_spec_engine_active(g.en, 0);
        const int pend = nx_spec_engine_prompt_pending(g.en, 1) + nx_spec_engine_prompt_pending(g.en, 2);
        const int l1 = nx_seq_pos_next(g.ctx, 1), l2 = nx_seq_pos_next(g.ctx, 2);
        const bool p1_was = nx_spec_engine_prompt_pending(g.en, 1), p2_was = nx_spec_engine_prompt_pending(g.en, 2);
        CHECK(nx_spec_engine_step(g.en, &e) == NX_OK);
        nx_spec_engine_output(g.en, 0, &n0);
        if (act0 && n0 <= before0) starved++;
        int rows = 0;
        if (p1_was) rows += nx_seq_pos_next(g.ctx, 1) - l1;
        if (p2_was) rows += nx_seq_pos_next(g.ctx, 2) - l2;
        if (rows > MAXR) bad_rows++;
        if (pend) prompt_steps++;
    }
    CHECK_EQ_INT(starved, 0);
    CHECK_EQ_INT(bad_rows, 0);
    CHECK(prompt_steps >= (NL + 33) / MAXR);
    /* every output equals its solo run */
    res got[3], solo;
    const nx_spec_request *rs[3] = {&r0, &r1, &r2};
    for (int i = 0; i < 3; i++) collect(&g, i, &got[i]);
    for (int i = 0; i < 3; i++) {
        job j = {i, rs[i]->prompt, rs[i]->n_prompt, rs[i]->n_predict, false};
        CHECK(run_jobs(&f, &j, 1, &solo));
        CHECK_MSG(same_res(&got[i], &solo), "spec '%s': sequence %d differs from its solo run", types, i);
    }
    eng_close(&g);
    eng_close(&f);
}

static void test_chunked(void) {
    check_chunked("");
    check_chunked("mtp");
    check_chunked("ngram,mtp");
}

#define TRUN(fn) do { double t0_ = nx_spec_time_now(); RUN(fn); \
    fprintf(stderr, "     (%.2f s)\n", nx_spec_time_now() - t0_); } while (0)

int main(void) {
    if (!mkdtemp(g_tmpdir)) { perror("mkdtemp"); return 1; }
    g_model = gen_load("qwen35", "prefix.gguf", 17);
    CHECK(g_model != NULL);
    if (g_model) {
        g_V = nx_model_n_vocab(g_model);
        TRUN(test_kv_restore);
        TRUN(test_reuse_edges);
        TRUN(test_reuse);
        TRUN(test_reuse_attention_only);
        TRUN(test_chunked);
    }
    nx_model_free(g_model);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", g_tmpdir);
    return test_summary();
}
