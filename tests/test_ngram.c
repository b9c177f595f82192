/*
 * test_ngram.c — the ngram lookup drafter and drafter chains (src/spec/ngram.c, chain.c,
 * drafter.c): hand-made histories (longest match, most recent occurrence, k limit, no match,
 * periodic continuation), incremental updates through process/accept, a randomized comparison
 * with a brute-force reference, protocol errors, and chain fallback between stages.
 */
#include "test.h"

#include <time.h>
#include "spec/drafter.h"
#include "spec/ngram.h"

/* ===== helpers: drive the drafter protocol as the round engine will ===== */

static nx_drafter *mk_ngram(int nmax, int nmin, int n_seq) {
    nx_ngram_params p = { .ngram_max = nmax, .ngram_min = nmin };
    nx_drafter *d = NULL;
    nx_error err = {0};
    nx_status st = nx_ngram_create(&p, n_seq, &d, &err);
    CHECK_MSG(st == NX_OK, "%s", err.msg);
    return d;
}

/* Draft for one sequence; returns the number of drafts. */
static int draft1(nx_drafter *d, nx_seq_id seq, nx_pos pos, nx_token id_last, int k, nx_token *out) {
    float p[NX_SPEC_DRAFT_CAP];
    nx_draft_req r = { .seq = seq, .pos = pos, .id_last = id_last, .k_max = k, .tok = out, .p = p };
    nx_error err = {0};
    nx_status st = nx_drafter_draft(d, &r, 1, &err);
    CHECK_MSG(st == NX_OK, "%s", err.msg);
    for (int i = 0; i < r.n; i++) CHECK(p[i] == 1.0f);
    CHECK(r.n == 0 ? r.stage == -1 : r.stage == 0);
    return st == NX_OK ? r.n : -1;
}

/* One generation step: verify rows [id_last, drafts[0..k-1]] at pos.., then accept n. */
static void step(nx_drafter *d, nx_seq_id seq, nx_pos pos, nx_token id_last, const nx_token *drafts, int k, int n) {
    nx_token tok[NX_SPEC_DRAFT_CAP + 1];
    nx_pos ps[NX_SPEC_DRAFT_CAP + 1];
    nx_seq_id sq[NX_SPEC_DRAFT_CAP + 1];
    tok[0] = id_last;
    for (int i = 0; i < k; i++) tok[i + 1] = drafts[i];
    for (int i = 0; i <= k; i++) { ps[i] = pos + i; sq[i] = seq; }
    nx_target_rows rows = { .kind = NX_ROWS_VERIFY, .n = k + 1, .tok = tok, .pos = ps, .seq = sq };
    nx_error err = {0};
    nx_status st = nx_drafter_process(d, &rows, &err);
    CHECK_MSG(st == NX_OK, "%s", err.msg);
    st = nx_drafter_accept(d, seq, n, &err);
    CHECK_MSG(st == NX_OK, "%s", err.msg);
}

static void begin(nx_drafter *d, nx_seq_id seq, const nx_token *prompt, int n) {
    nx_error err = {0};
    nx_status st = nx_drafter_begin(d, seq, prompt, n, &err);
    CHECK_MSG(st == NX_OK, "%s", err.msg);
}

#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* ===== hand-made histories ===== */

static void test_longest_match_wins(void) {
    /* "1 2 3" occurs at 0..2 (then 4 50 51), "2 3" / "3" most recently at 7..8 (then 6 52 53) */
    const nx_token h[] = {1, 2, 3, 4, 50, 51, 9, 2, 3, 6, 52, 53, 1, 2};
    nx_token out[8];
    nx_drafter *d = mk_ngram(4, 1, 1);
    begin(d, 0, h, N_OF(h));
    CHECK_EQ_INT(draft1(d, 0, N_OF(h), 3, 3, out), 3);
    CHECK_EQ_INT(out[0], 4); CHECK_EQ_INT(out[1], 50); CHECK_EQ_INT(out[2], 51);
    nx_drafter_free(d);

    d = mk_ngram(2, 1, 1);                 /* only up to bigrams: the more recent "2 3" wins */
    begin(d, 0, h, N_OF(h));
    CHECK_EQ_INT(draft1(d, 0, N_OF(h), 3, 3, out), 3);
    CHECK_EQ_INT(out[0], 6); CHECK_EQ_INT(out[1], 52); CHECK_EQ_INT(out[2], 53);
    nx_drafter_free(d);
}

static void test_most_recent_and_periodic(void) {
    /* "5 6" ends at 1, 4, 7: the most recent (7) is followed by 3 7 5, then id_last 6, then the
     * drafts themselves (3 ...) */
    const nx_token h[] = {5, 6, 1, 5, 6, 2, 5, 6, 3, 7, 5};
    nx_token out[8];
    nx_drafter *d = mk_ngram(4, 1, 1);
    begin(d, 0, h, N_OF(h));
    CHECK_EQ_INT(draft1(d, 0, N_OF(h), 6, 6, out), 6);
    const nx_token want[] = {3, 7, 5, 6, 3, 7};
    for (int i = 0; i < 6; i++) CHECK_EQ_INT(out[i], want[i]);
    /* k limit */
    CHECK_EQ_INT(draft1(d, 0, N_OF(h), 6, 2, out), 2);
    CHECK_EQ_INT(out[0], 3); CHECK_EQ_INT(out[1], 7);
    CHECK_EQ_INT(draft1(d, 0, N_OF(h), 6, 0, out), 0);
    nx_drafter_free(d);

    /* a run of one token continues itself */
    const nx_token r[] = {7, 7, 7};
    d = mk_ngram(4, 1, 1);
    begin(d, 0, r, 3);
    CHECK_EQ_INT(draft1(d, 0, 3, 7, 5, out), 5);
    for (int i = 0; i < 5; i++) CHECK_EQ_INT(out[i], 7);
    nx_drafter_free(d);
}

static void test_no_match(void) {
    const nx_token h[] = {1, 2, 3};
    nx_token out[8];
    nx_drafter *d = mk_ngram(4, 1, 1);
    begin(d, 0, h, 3);
    CHECK_EQ_INT(draft1(d, 0, 3, 4, 4, out), 0);         /* 4 never seen */
    nx_drafter_free(d);

    d = mk_ngram(4, 2, 1);                               /* a unigram match is not enough */
    begin(d, 0, h, 3);
    CHECK_EQ_INT(draft1(d, 0, 3, 1, 4, out), 0);
    CHECK_EQ_INT(draft1(d, 0, 3, 9, 4, out), 0);
    nx_drafter_free(d);

    d = mk_ngram(4, 1, 1);                               /* empty prompt */
    begin(d, 0, NULL, 0);
    CHECK_EQ_INT(draft1(d, 0, 0, 5, 4, out), 0);
    nx_drafter_free(d);
}

static void test_incremental_accept(void) {
    const nx_token pr[] = {10, 11, 12};
    nx_token out[8];
    nx_drafter *d = mk_ngram(4, 1, 1);
    begin(d, 0, pr, 3);
    CHECK_EQ_INT(draft1(d, 0, 3, 13, 4, out), 0);        /* 13 is new */
    step(d, 0, 3, 13, NULL, 0, 0);                       /* plain step: 13 committed */
    CHECK_EQ_INT(nx_ngram_seq_len(d, 0), 4);
    CHECK_EQ_INT(draft1(d, 0, 4, 10, 3, out), 3);        /* "10" at 0 -> 11 12 13 */
    CHECK_EQ_INT(out[0], 11); CHECK_EQ_INT(out[1], 12); CHECK_EQ_INT(out[2], 13);
    step(d, 0, 4, 10, out, 3, 2);                        /* 11 12 accepted, 13 rejected */
    CHECK_EQ_INT(nx_ngram_seq_len(d, 0), 7);             /* 10 11 12 13 10 11 12 */
    /* the target said 20 instead of 13 */
    CHECK_EQ_INT(draft1(d, 0, 7, 20, 3, out), 0);
    step(d, 0, 7, 20, NULL, 0, 0);
    /* "20 10" unseen, "10" most recently at 4 -> 11 12 20: the accepted rows are indexed, the
     * rejected draft is not */
    CHECK_EQ_INT(draft1(d, 0, 8, 10, 3, out), 3);
    CHECK_EQ_INT(out[0], 11); CHECK_EQ_INT(out[1], 12); CHECK_EQ_INT(out[2], 20);
    step(d, 0, 8, 10, out, 3, 3);                        /* all accepted: 10 11 12 20 */
    CHECK_EQ_INT(nx_ngram_seq_len(d, 0), 12);
    CHECK_EQ_INT(draft1(d, 0, 12, 11, 2, out), 2);       /* only "11" recurs, last at 9 -> 12 20 */
    CHECK_EQ_INT(out[0], 12); CHECK_EQ_INT(out[1], 20);

    /* begin() again forgets everything */
    begin(d, 0, pr, 1);
    CHECK_EQ_INT(nx_ngram_seq_len(d, 0), 1);
    CHECK_EQ_INT(draft1(d, 0, 1, 12, 3, out), 0);
    nx_drafter_free(d);
}

static void test_prompt_rows_extend(void) {
    /* an engine may begin with part of the prompt and stream the rest as PROMPT rows */
    const nx_token pr[] = {1, 2, 3, 1, 2};
    nx_drafter *d = mk_ngram(3, 1, 1);
    begin(d, 0, pr, 2);
    nx_pos pos[5] = {0, 1, 2, 3, 4};
    nx_seq_id sq[5] = {0};
    nx_target_rows rows = { .kind = NX_ROWS_PROMPT, .n = 5, .tok = pr, .pos = pos, .seq = sq };
    nx_error err = {0};
    CHECK(nx_drafter_process(d, &rows, &err) == NX_OK);  /* rows 0, 1 known; 2..4 appended */
    CHECK_EQ_INT(nx_ngram_seq_len(d, 0), 5);
    nx_token out[4];
    CHECK_EQ_INT(draft1(d, 0, 5, 3, 2, out), 2);         /* "1 2 3" -> 1 2 */
    CHECK_EQ_INT(out[0], 1); CHECK_EQ_INT(out[1], 2);
    nx_drafter_free(d);
}

static void test_many_sequences(void) {
    const nx_token a[] = {1, 2, 3, 1}, b[] = {1, 9, 8, 1};
    nx_drafter *d = mk_ngram(4, 1, 3);
    begin(d, 0, a, 4);
    begin(d, 2, b, 4);
    nx_token o0[4], o2[4];
    nx_draft_req r[2] = {
        { .seq = 2, .pos = 4, .id_last = 9, .k_max = 2, .tok = o2 },
        { .seq = 0, .pos = 4, .id_last = 2, .k_max = 2, .tok = o0 },
    };
    nx_error err = {0};
    CHECK(nx_drafter_draft(d, r, 2, &err) == NX_OK);
    CHECK_EQ_INT(r[0].n, 2); CHECK_EQ_INT(o2[0], 8); CHECK_EQ_INT(o2[1], 1);
    CHECK_EQ_INT(r[1].n, 2); CHECK_EQ_INT(o0[0], 3); CHECK_EQ_INT(o0[1], 1);
    /* seq 1 was never begun */
    r[0].seq = 1;
    CHECK(nx_drafter_draft(d, r, 1, &err) == NX_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "not begun") != NULL);
    nx_drafter_free(d);
}

static void test_protocol_errors(void) {
    const nx_token h[] = {1, 2, 3};
    nx_drafter *d = mk_ngram(4, 1, 2);
    nx_error err = {0};
    nx_token out[4];
    begin(d, 0, h, 3);
    nx_draft_req r = { .seq = 0, .pos = 5, .id_last = 1, .k_max = 2, .tok = out };
    CHECK(nx_drafter_draft(d, &r, 1, &err) == NX_ERR_INVALID_ARG);     /* wrong position */
    CHECK(strstr(err.msg, "position 5") != NULL);
    r.pos = 3; r.seq = 2;
    CHECK(nx_drafter_draft(d, &r, 1, &err) == NX_ERR_INVALID_ARG);     /* seq out of range */
    r.seq = 0; r.k_max = NX_SPEC_DRAFT_CAP + 1;
    CHECK(nx_drafter_draft(d, &r, 1, &err) == NX_ERR_INVALID_ARG);     /* k too large */
    r.k_max = 2; r.tok = NULL;
    CHECK(nx_drafter_draft(d, &r, 1, &err) == NX_ERR_INVALID_ARG);     /* no buffer */
    nx_draft_req two[2] = { { .seq = 0, .pos = 3, .id_last = 1, .k_max = 1, .tok = out },
                            { .seq = 0, .pos = 3, .id_last = 1, .k_max = 1, .tok = out } };
    CHECK(nx_drafter_draft(d, two, 2, &err) == NX_ERR_INVALID_ARG);    /* same seq twice */
    CHECK(nx_drafter_accept(d, 0, 0, &err) == NX_ERR_INVALID_ARG);     /* nothing pending */
    CHECK(strstr(err.msg, "pending") != NULL);
    nx_pos pos[1] = {7};
    nx_seq_id sq[1] = {0};
    nx_token tk[1] = {4};
    nx_target_rows rows = { .kind = NX_ROWS_VERIFY, .n = 1, .tok = tk, .pos = pos, .seq = sq };
    CHECK(nx_drafter_process(d, &rows, &err) == NX_ERR_INVALID_ARG);   /* gap */
    pos[0] = 3;
    CHECK(nx_drafter_process(d, &rows, &err) == NX_OK);
    CHECK(nx_drafter_accept(d, 0, 1, &err) == NX_ERR_INVALID_ARG);     /* 1 row, 2 claimed */
    CHECK(nx_drafter_accept(d, 0, 0, &err) == NX_OK);
    sq[0] = 1;
    CHECK(nx_drafter_process(d, &rows, &err) == NX_ERR_INVALID_ARG);   /* seq 1 not begun */
    tk[0] = -3; sq[0] = 0;
    CHECK(nx_drafter_process(d, &rows, &err) == NX_ERR_INVALID_ARG);   /* bad token */
    CHECK(nx_drafter_begin(d, 0, NULL, 2, &err) == NX_ERR_INVALID_ARG);
    nx_ngram_params bad = { .ngram_max = 0, .ngram_min = 1 };
    nx_drafter *x = NULL;
    CHECK(nx_ngram_create(&bad, 1, &x, &err) == NX_ERR_INVALID_ARG && !x);
    bad = (nx_ngram_params){ .ngram_max = 3, .ngram_min = 4 };
    CHECK(nx_ngram_create(&bad, 1, &x, &err) == NX_ERR_INVALID_ARG && !x);
    CHECK(nx_ngram_create(NULL, 0, &x, &err) == NX_ERR_INVALID_ARG && !x);
    CHECK_STR(nx_drafter_name(d), "ngram");
    nx_drafter_free(d);
    nx_drafter_free(NULL);
}

/* ===== randomized: compare with a brute-force backward scan ===== */

typedef struct { uint64_t s; } lcg;
static uint32_t rnd(lcg *g) { g->s = g->s * 6364136223846793005ull + 1442695040888963407ull; return (uint32_t)(g->s >> 33); }

/* S[0..L-1] = history + id_last; writes up to k drafts, returns their number */
static int brute(const nx_token *S, int L, int nmax, int nmin, int k, nx_token *out) {
    nx_token ext[4096 + 64];
    memcpy(ext, S, (size_t)L * sizeof *S);
    for (int n = nmax < L ? nmax : L; n >= nmin; n--)
        for (int e = L - 2; e >= n - 1; e--) {
            int ok = 1;
            for (int i = 0; i < n && ok; i++) ok = S[e - i] == S[L - 1 - i];
            if (!ok) continue;
            for (int i = 0; i < k; i++) { out[i] = ext[e + 1 + i]; ext[L + i] = out[i]; }
            return k;
        }
    return 0;
}

static void test_random_vs_brute(void) {
    lcg g = { 12345 };
    for (int trial = 0; trial < 6; trial++) {
        int nmax = 1 + trial % 5, nmin = 1 + (trial / 2) % nmax, vocab = 3 + trial * 2;
        nx_drafter *d = mk_ngram(nmax, nmin, 1);
        nx_token S[4096 + 64];
        int L = 20;
        for (int i = 0; i < L; i++) S[i] = (nx_token)(rnd(&g) % (uint32_t)vocab);
        begin(d, 0, S, L);
        nx_token id_last = (nx_token)(rnd(&g) % (uint32_t)vocab);
        int mism = 0;
        while (L < 4000) {
            int k = (int)(rnd(&g) % 9);
            nx_token out[NX_SPEC_DRAFT_CAP], ref[NX_SPEC_DRAFT_CAP];
            int n = draft1(d, 0, L, id_last, k, out);
            S[L] = id_last;
            int nr = brute(S, L + 1, nmax, nmin, k, ref);
            if (n != nr || memcmp(out, ref, (size_t)n * sizeof *out)) mism++;
            /* the "target" accepts a random prefix and emits a random token */
            int acc = n ? (int)(rnd(&g) % (uint32_t)(n + 1)) : 0;
            step(d, 0, L, id_last, out, n, acc);
            L++;
            for (int i = 0; i < acc; i++) S[L++] = out[i];
            id_last = (nx_token)(rnd(&g) % (uint32_t)vocab);
        }
        CHECK_EQ_INT(nx_ngram_seq_len(d, 0), L);
        CHECK_MSG(mism == 0, "trial %d (n %d..%d, vocab %d): %d mismatches", trial, nmin, nmax, vocab, mism);
        nx_drafter_free(d);
    }
}

static void test_speed_incremental(void) {
    /* 400k committed tokens through process/accept, drafting every round: must stay linear */
    nx_drafter *d = mk_ngram(4, 1, 1);
    begin(d, 0, NULL, 0);
    lcg g = { 7 };
    int L = 0, drafted = 0;
    nx_token id_last = 0;
    double t0 = (double)clock() / CLOCKS_PER_SEC;
    while (L < 400000) {
        nx_token out[8];
        int n = draft1(d, 0, L, id_last, 4, out);
        drafted += n;
        int acc = n ? (int)(rnd(&g) % (uint32_t)(n + 1)) : 0;
        step(d, 0, L, id_last, out, n, acc);
        L += 1 + acc;
        id_last = (nx_token)(rnd(&g) % 5000u);
    }
    double t = (double)clock() / CLOCKS_PER_SEC - t0;
    fprintf(stderr, "  ngram: %d tokens committed, %d drafted, %.3f s (%.0f ns/token)\n", L, drafted, t, 1e9 * t / L);
    CHECK_EQ_INT(nx_ngram_seq_len(d, 0), L);
    CHECK(t < 10.0);
    nx_drafter_free(d);
}

/* ===== chains ===== */

/* A stand-in model drafter: proposes seq*100 + 1, +2, ... and counts the calls it gets. */
typedef struct fake {
    nx_drafter base;
    int n_begin, n_process, n_accept, n_draft_calls, n_draft_reqs;
    int propose;                 /* 0: propose nothing */
} fake;

static nx_status fk_begin(nx_drafter *d, nx_seq_id s, const nx_token *p, int n, nx_error *e) { ((fake *)d)->n_begin++; return NX_OK; }
static nx_status fk_process(nx_drafter *d, const nx_target_rows *r, nx_error *e) { ((fake *)d)->n_process++; return NX_OK; }
static nx_status fk_accept(nx_drafter *d, nx_seq_id s, int n, nx_error *e) { ((fake *)d)->n_accept++; return NX_OK; }
static nx_status fk_draft(nx_drafter *d, nx_draft_req *r, int n, nx_error *e) {
    fake *f = (fake *)d;
    f->n_draft_calls++;
    f->n_draft_reqs += n;
    for (int i = 0; i < n && f->propose; i++) {
        for (int j = 0; j < r[i].k_max; j++) r[i].tok[j] = r[i].seq * 100 + j + 1;
        r[i].n = r[i].k_max;
        r[i].stage = 0;
    }
    return NX_OK;
}
static void fk_free(nx_drafter *d) { free(d); }
static const nx_drafter_ops fake_ops = { "fake", fk_begin, fk_process, fk_draft, fk_accept, fk_free };

static fake *mk_fake(int n_seq, int propose) {
    fake *f = calloc(1, sizeof *f);
    f->base.ops = &fake_ops;
    f->base.n_seq = n_seq;
    f->propose = propose;
    return f;
}

static void test_chain_fallback(void) {
    nx_error err = {0};
    fake *f = mk_fake(3, 1);
    nx_drafter *st[2] = { mk_ngram(4, 1, 3), &f->base }, *c = NULL;
    CHECK(nx_drafter_chain_create(st, 2, 1, &c, &err) == NX_OK);
    CHECK_EQ_INT(nx_drafter_chain_n_stages(c), 2);
    CHECK(nx_drafter_chain_stage(c, 1) == &f->base);
    CHECK(nx_drafter_chain_stage(c, 2) == NULL);
    CHECK_STR(nx_drafter_name(nx_drafter_chain_stage(c, 0)), "ngram");

    const nx_token a[] = {1, 2, 3}, b[] = {4, 5, 6};
    CHECK(nx_drafter_begin(c, 0, a, 3, &err) == NX_OK);
    CHECK(nx_drafter_begin(c, 1, b, 3, &err) == NX_OK);
    CHECK(nx_drafter_begin(c, 2, a, 3, &err) == NX_OK);
    CHECK_EQ_INT(f->n_begin, 3);

    nx_token o[3][4];
    nx_draft_req r[3] = {
        { .seq = 0, .pos = 3, .id_last = 1, .k_max = 2, .tok = o[0] },   /* ngram: "1" -> 2 3 */
        { .seq = 1, .pos = 3, .id_last = 9, .k_max = 3, .tok = o[1] },   /* no match -> fake */
        { .seq = 2, .pos = 3, .id_last = 7, .k_max = 1, .tok = o[2] },   /* no match -> fake */
    };
    CHECK(nx_drafter_draft(c, r, 3, &err) == NX_OK);
    CHECK_EQ_INT(r[0].n, 2); CHECK_EQ_INT(r[0].stage, 0); CHECK_EQ_INT(o[0][0], 2); CHECK_EQ_INT(o[0][1], 3);
    CHECK_EQ_INT(r[1].n, 3); CHECK_EQ_INT(r[1].stage, 1); CHECK_EQ_INT(o[1][0], 101); CHECK_EQ_INT(o[1][2], 103);
    CHECK_EQ_INT(r[2].n, 1); CHECK_EQ_INT(r[2].stage, 1); CHECK_EQ_INT(o[2][0], 201);
    CHECK_EQ_INT(f->n_draft_calls, 1);                   /* one batch for both leftovers */
    CHECK_EQ_INT(f->n_draft_reqs, 2);

    /* process / accept reach every stage, whoever drafted: ngram learns the fake's drafts */
    nx_token tk[4] = {9, 101, 102, 103};
    nx_pos ps[4] = {3, 4, 5, 6};
    nx_seq_id sq[4] = {1, 1, 1, 1};
    nx_target_rows rows = { .kind = NX_ROWS_VERIFY, .n = 4, .tok = tk, .pos = ps, .seq = sq };
    CHECK(nx_drafter_process(c, &rows, &err) == NX_OK);
    CHECK(nx_drafter_accept(c, 1, 2, &err) == NX_OK);
    CHECK_EQ_INT(f->n_process, 1);
    CHECK_EQ_INT(f->n_accept, 1);
    CHECK_EQ_INT(nx_ngram_seq_len(nx_drafter_chain_stage(c, 0), 1), 6);  /* 4 5 6 9 101 102 */
    nx_draft_req r1 = { .seq = 1, .pos = 6, .id_last = 9, .k_max = 2, .tok = o[1] };
    CHECK(nx_drafter_draft(c, &r1, 1, &err) == NX_OK);
    CHECK_EQ_INT(r1.stage, 0); CHECK_EQ_INT(o[1][0], 101); CHECK_EQ_INT(o[1][1], 102);

    /* per-stage limits: stage 0 skipped -> the fake drafts */
    int lim[2] = {0, 2};
    nx_draft_req r0 = { .seq = 0, .pos = 3, .id_last = 1, .k_max = 4, .k_max_by_stage = lim, .tok = o[0] };
    CHECK(nx_drafter_draft(c, &r0, 1, &err) == NX_OK);
    CHECK_EQ_INT(r0.stage, 1); CHECK_EQ_INT(r0.n, 2);
    nx_drafter_free(c);

    /* min_len: a stage-0 proposal shorter than 3 falls through */
    f = mk_fake(1, 1);
    nx_drafter *st2[2] = { mk_ngram(4, 1, 1), &f->base };
    CHECK(nx_drafter_chain_create(st2, 2, 3, &c, &err) == NX_OK);
    CHECK(nx_drafter_begin(c, 0, a, 3, &err) == NX_OK);
    int lim2[2] = {2, 4};
    nx_draft_req rm = { .seq = 0, .pos = 3, .id_last = 1, .k_max = 4, .k_max_by_stage = lim2, .tok = o[0] };
    CHECK(nx_drafter_draft(c, &rm, 1, &err) == NX_OK);
    CHECK_EQ_INT(rm.stage, 1); CHECK_EQ_INT(rm.n, 4); CHECK_EQ_INT(o[0][0], 1);
    nx_drafter_free(c);

    /* nobody proposes: n = 0, stage = -1 */
    f = mk_fake(1, 0);
    nx_drafter *st3[2] = { mk_ngram(4, 1, 1), &f->base };
    CHECK(nx_drafter_chain_create(st3, 2, 1, &c, &err) == NX_OK);
    CHECK(nx_drafter_begin(c, 0, a, 3, &err) == NX_OK);
    nx_draft_req rn = { .seq = 0, .pos = 3, .id_last = 8, .k_max = 4, .tok = o[0] };
    CHECK(nx_drafter_draft(c, &rn, 1, &err) == NX_OK);
    CHECK_EQ_INT(rn.n, 0); CHECK_EQ_INT(rn.stage, -1);
    nx_drafter_free(c);

    /* bad chains free their stages (ASan checks) */
    nx_drafter *st4[2] = { mk_ngram(4, 1, 2), mk_ngram(4, 1, 3) };
    CHECK(nx_drafter_chain_create(st4, 2, 1, &c, &err) == NX_ERR_INVALID_ARG && !c);
    CHECK(strstr(err.msg, "sequences") != NULL);
    nx_drafter *st5[1] = { NULL };
    CHECK(nx_drafter_chain_create(st5, 1, 1, &c, &err) == NX_ERR_INVALID_ARG && !c);
}

int main(void) {
    RUN(test_longest_match_wins);
    RUN(test_most_recent_and_periodic);
    RUN(test_no_match);
    RUN(test_incremental_accept);
    RUN(test_prompt_rows_extend);
    RUN(test_many_sequences);
    RUN(test_protocol_errors);
    RUN(test_random_vs_brute);
    RUN(test_speed_incremental);
    RUN(test_chain_fallback);
    return test_summary();
}
