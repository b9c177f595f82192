/*
 * sample.h — token sampling: a per-sequence sampler chain with llama.cpp's parameters and
 * defaults, the exact distribution it samples from, and the rejection-sampling step of
 * speculative decoding (speculative.md §2).
 *
 * The chain, in llama.cpp's default order (common/sampling: logit bias first, then the sampler
 * list penalties, top-k, top-p, min-p, temperature, then dist):
 *   1. logit bias      logit[t] += bias for every (t, bias) entry (-INFINITY bans t)
 *   2. penalties       for every token t seen c > 0 times in the last penalty_last_n accepted
 *                      tokens: logit = logit <= 0 ? logit * repeat : logit / repeat, then
 *                      logit -= c * frequency + presence
 *   3. top-k           keep the k largest logits (k <= 0 or k >= n_vocab: off)
 *   4. top-p           softmax (temperature 1) over what is left; keep the smallest prefix (by
 *                      descending probability) whose cumulative probability is >= top_p
 *                      (top_p >= 1: off); at least min_keep tokens
 *   5. min-p           keep logit >= max_logit + log(min_p), i.e. p >= min_p * p_max (min_p <= 0:
 *                      off); at least min_keep tokens
 *   6. temperature     p = softmax(logit / temperature) over the survivors. temperature <= 0 is
 *                      greedy: the argmax of the logits after steps 1-2 (lowest id on ties), with
 *                      probability 1, and no randomness is ever consumed.
 *   7. sample          one uniform draw from the chain's RNG.
 * Ties at a top-k / top-p boundary go to the lower token id. NaN logits count as -INFINITY.
 *
 * Promises:
 *   - nx_sampler_dist() returns exactly the distribution nx_sampler_sample() draws from, and
 *     consumes no randomness; sampling = dist + nx_sampler_sample_dist().
 *   - A chain's state is its params, its RNG state and its token history; nx_sampler_clone /
 *     nx_sampler_copy copy all three, so a clone produces the same tokens as the original.
 *   - nx_sampler_spec_accept() outputs tokens distributed exactly as p (Leviathan et al. 2023):
 *     accept the draft d with probability min(1, p(d)/q(d)), else sample from
 *     normalize(max(0, p - q)). Greedy chains: accept iff d == argmax p, no randomness.
 *   - Full vocabulary (151936) per token well under 1 ms: no full sort; top-k <= 64 uses the
 *     SIMD nx_topk, larger top-k / top-p use threshold bands + linear-time selection.
 * Never: global state, printing, touching the caller's logits, allocating in nx_sampler_dist /
 * nx_sampler_sample after the chain's first call (scratch is kept in the chain).
 * A chain is not thread-safe; use one per sequence (clones are independent).
 */
#ifndef NX_SAMPLE_H
#define NX_SAMPLE_H

#include <stdbool.h>
#include <stdint.h>
#include "core/error.h"

/* ===== RNG: xoshiro256** seeded by splitmix64 — small, fast, clonable by value ===== */

typedef struct nx_rng { uint64_t s[4]; } nx_rng;

void     nx_rng_seed(nx_rng *r, uint64_t seed);   /* any seed, 0 included */
uint64_t nx_rng_next(nx_rng *r);
double   nx_rng_uniform(nx_rng *r);               /* [0, 1), 53 random bits */

/* ===== Parameters ===== */

typedef struct nx_logit_bias {
    int32_t token;
    float   bias;                 /* added to the logit; -INFINITY bans the token */
} nx_logit_bias;

#define NX_SAMPLER_SEED_RANDOM 0xFFFFFFFFu   /* llama.cpp's LLAMA_DEFAULT_SEED: pick one at create */

typedef struct nx_sampler_params {
    int32_t  n_vocab;             /* logits per row; required (> 0) */
    uint32_t seed;                /* NX_SAMPLER_SEED_RANDOM (default) or a fixed seed */
    float    temperature;         /* 0.8; <= 0 = greedy */
    int32_t  top_k;               /* 40; <= 0 = off */
    float    top_p;               /* 0.95; >= 1 = off */
    float    min_p;               /* 0.05; <= 0 = off */
    int32_t  min_keep;            /* 0; top-p / min-p keep at least this many (and always >= 1) */
    int32_t  penalty_last_n;      /* 64; 0 = off; -1 = every token accepted since the last reset */
    float    repeat_penalty;      /* 1.0 = off */
    float    frequency_penalty;   /* 0.0 = off */
    float    presence_penalty;    /* 0.0 = off */
    const nx_logit_bias *logit_bias;  /* n_logit_bias entries (copied by create); a token may repeat (biases add) */
    int32_t  n_logit_bias;
} nx_sampler_params;

/* llama.cpp's common sampling defaults (listed above) for a vocabulary of n_vocab. */
nx_sampler_params nx_sampler_default_params(int32_t n_vocab);

/* ===== Distributions ===== */

/* A sparse probability distribution over token ids: the tokens with p > 0. Caller-owned;
 * nx_sample_dist_init allocates room for a whole vocabulary, and every function that fills one
 * reuses that room. */
typedef struct nx_sample_dist {
    int32_t  n;                   /* entries (>= 1 when filled by nx_sampler_dist) */
    int32_t  cap;                 /* room (n_vocab) */
    int32_t *ids;                 /* distinct token ids */
    float   *p;                   /* probabilities, > 0, summing to 1 up to float rounding */
    bool     sorted;              /* true: descending p, ties by lower id. nx_sampler_dist sorts
                                     whenever n <= NX_SAMPLE_SORT_MAX, else keeps id order or
                                     selection order */
} nx_sample_dist;

#define NX_SAMPLE_SORT_MAX 1024

nx_status nx_sample_dist_init(nx_sample_dist *d, int32_t n_vocab, nx_error *err);
void      nx_sample_dist_free(nx_sample_dist *d);           /* zeroes *d; NULL-safe */
float     nx_sample_dist_prob(const nx_sample_dist *d, int32_t token); /* 0 if absent; O(n) */
/* Fill d by hand (tests, drafters): ids[i] with weight w[i] >= 0 (normalized here, zero
 * weights dropped). Errors: n > d->cap, negative / non-finite weights, all zero, bad ids. */
nx_status nx_sample_dist_set(nx_sample_dist *d, const int32_t *ids, const float *w, int32_t n,
                             int32_t n_vocab, nx_error *err);

/* ===== The chain ===== */

typedef struct nx_sampler nx_sampler;

/* Validates params (n_vocab > 0, finite numbers, bias tokens in range, penalty_last_n >= -1,
 * repeat_penalty > 0, min_keep >= 0) and copies them, bias list included. */
nx_status nx_sampler_create(const nx_sampler_params *params, nx_sampler **out, nx_error *err);
void      nx_sampler_free(nx_sampler *s);                   /* NULL-safe */
/* A new independent chain with the same params, RNG state and token history. */
nx_status nx_sampler_clone(const nx_sampler *s, nx_sampler **out, nx_error *err);
/* Make dst a copy of src (params, RNG, history), reusing dst's buffers: the cheap way to
 * re-fork per-row chains every speculative round. */
nx_status nx_sampler_copy(nx_sampler *dst, const nx_sampler *src, nx_error *err);
/* Append a token to the penalty history (call it for every token committed to the sequence —
 * llama.cpp's common_sampler_accept; sampling does not do it by itself). Token out of range:
 * NX_ERR_INVALID_ARG. */
nx_status nx_sampler_accept(nx_sampler *s, int32_t token, nx_error *err);
/* Clear the history and restart the RNG stream from the chain's seed. */
void      nx_sampler_reset(nx_sampler *s);

const nx_sampler_params *nx_sampler_get_params(const nx_sampler *s); /* bias list owned by s */
uint32_t  nx_sampler_seed(const nx_sampler *s);     /* the seed in use (resolved if random) */
bool      nx_sampler_is_greedy(const nx_sampler *s);
int32_t   nx_sampler_history_len(const nx_sampler *s); /* tokens in the penalty window */
nx_rng    nx_sampler_rng_state(const nx_sampler *s);   /* a copy: to log it, or to check that a
                                                           call consumed no randomness */
/* Give s another RNG stream (a drafter's sampled drafts must draw independently of the
 * verification's draws on the target chain). */
void      nx_sampler_set_rng(nx_sampler *s, nx_rng r);

/* out[i] = logits[i] after logit bias and penalties (steps 1-2): what --n-probs style
 * reporting and tests look at. out may equal logits. */
nx_status nx_sampler_apply_bias_penalties(nx_sampler *s, const float *logits, float *out, nx_error *err);

/* The final distribution of the whole chain for one row of n_vocab logits, into out (room for
 * n_vocab). Consumes no randomness. NX_ERR_RANGE when no token is left (every logit -INF/NaN
 * after the bias). */
nx_status nx_sampler_dist(nx_sampler *s, const float *logits, nx_sample_dist *out, nx_error *err);

/* One token from a row of logits: greedy = argmax (no randomness), else one draw from
 * nx_sampler_dist. Does not call nx_sampler_accept. */
nx_status nx_sampler_sample(nx_sampler *s, const float *logits, int32_t *token, nx_error *err);

/* One draw from d with the chain's RNG (greedy chains take the most probable entry, lowest id
 * on ties, without randomness). */
nx_status nx_sampler_sample_dist(nx_sampler *s, const nx_sample_dist *d, int32_t *token, nx_error *err);

/* ===== Speculative acceptance (speculative.md §2 step 3) =====
 *
 * One round for one sequence whose chain `ch` has accepted every committed token, t included:
 *   nx_sampler_copy(row, ch);                        // a scratch chain, reused every round
 *   for i in 0..k: nx_sampler_dist(row, logits[i], &p[i]);  nx_sampler_accept(row, d[i+1]);
 *   for i in 1..k: nx_sampler_spec_accept(ch, &p[i-1], d[i], q_i or NULL, &ok, &rep); stop at !ok
 *   if all accepted: nx_sampler_sample_dist(ch, &p[k], &bonus);
 *   then nx_sampler_accept(ch, ...) for every committed token.
 * Only ch's RNG is drawn from (row's is never used), so results are reproducible per seed. */

/* One draft position: p = the target chain's distribution for this row (nx_sampler_dist of the
 * chain whose history includes every earlier draft), draft = the drafted token, q = the
 * drafter's distribution it was drawn from, or NULL for a one-hot q (greedy drafting).
 * Sets *accepted; when false, *replacement is the token to emit instead (and the round stops);
 * when true, *replacement = draft. Uses s's RNG:
 *   greedy chain (temperature <= 0): accepted iff draft == argmax p; replacement = argmax p;
 *                                    no randomness.
 *   otherwise: accept with probability min(1, p(draft) / q(draft)) (no draw when the ratio is
 *              >= 1); on rejection draw from normalize(max(0, p - q)) (q NULL: p without draft).
 * Errors: q given but q(draft) == 0 (a draft must come from q), bad token, empty p. */
nx_status nx_sampler_spec_accept(nx_sampler *s, const nx_sample_dist *p, int32_t draft,
                                 const nx_sample_dist *q, bool *accepted, int32_t *replacement,
                                 nx_error *err);

#endif
