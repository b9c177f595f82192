/*
 * sample.c — the sampler chain, its final distribution, and speculative acceptance (contract in
 * sample.h).
 *
 * How the distribution is found without sorting the vocabulary:
 *   - logit bias and penalties touch few tokens, but the caller's logits are const, so a row is
 *     copied into the chain's scratch only when one of them is active;
 *   - top-k <= 64 is one SIMD pass (nx_topk, already sorted);
 *   - a larger top-k takes one histogram pass over (max - logit) to find a logit threshold with
 *     at least k tokens above it, then collects those;
 *   - top-p alone collects in logit bands below the max (max-8, -16, -32, -64, then everything)
 *     until the candidates hold enough probability mass; min-p's threshold bounds every
 *     collection (nothing below it can survive);
 *   - the top-k / top-p cut inside the candidates is a bucketed selection (histogram of logits
 *     by count or by mass, keep the buckets above the crossing one, recurse into it): linear
 *     time, exact, ties broken by lower token id.
 * Everything is kept in per-chain scratch, allocated on first use and grown when needed.
 * Never: global state, randomness inside nx_sampler_dist, writes to the caller's logits.
 */
#define _GNU_SOURCE
#include "sample.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "kernels/ops.h"

/* ===== RNG ===== */

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void nx_rng_seed(nx_rng *r, uint64_t seed) {
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);   /* never all zero */
}

static inline uint64_t rotl64(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t nx_rng_next(nx_rng *r) {
    uint64_t *s = r->s;
    const uint64_t out = rotl64(s[1] * 5, 7) * 9;
    const uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl64(s[3], 45);
    return out;
}

double nx_rng_uniform(nx_rng *r) { return (double)(nx_rng_next(r) >> 11) * 0x1.0p-53; }

/* ===== Chain state ===== */

/* Candidate tokens as parallel arrays (weights contiguous for the SIMD exp-sum). */
typedef struct cand { float *l; float *w; int32_t *id; } cand;

struct nx_sampler {
    nx_sampler_params p;          /* p.logit_bias points at bias */
    nx_logit_bias *bias;
    int32_t bias_cap;
    uint32_t seed;                /* resolved */
    nx_rng rng;
    bool pen_active;
    /* penalty history: a ring of hist_cap (= penalty_last_n) tokens, or a growing array with
     * head 0 when penalty_last_n == -1 */
    int32_t *hist;
    int32_t hist_alloc, hist_cap, hist_len, hist_head;
    /* scratch, allocated on first use */
    float *work;                  /* n_vocab: logits after bias + penalties */
    int32_t *counts;              /* n_vocab zeros: penalty counts, cleared after use */
    float *qdense;                /* n_vocab zeros: q for the residual, cleared after use */
    cand c;
    int32_t c_cap;
    nx_sample_dist tmp;           /* nx_sampler_sample's distribution */
};

nx_sampler_params nx_sampler_default_params(int32_t n_vocab) {
    nx_sampler_params p;
    memset(&p, 0, sizeof p);
    p.n_vocab = n_vocab;
    p.seed = NX_SAMPLER_SEED_RANDOM;
    p.temperature = 0.80f;
    p.top_k = 40;
    p.top_p = 0.95f;
    p.min_p = 0.05f;
    p.min_keep = 0;
    p.penalty_last_n = 64;
    p.repeat_penalty = 1.0f;
    p.frequency_penalty = 0.0f;
    p.presence_penalty = 0.0f;
    return p;
}

static uint32_t random_seed(void) {
    uint32_t v = 0;
    if (getrandom(&v, sizeof v, GRND_NONBLOCK) != (ssize_t)sizeof v) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t x = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
        v = (uint32_t)splitmix64(&x);
    }
    return v == NX_SAMPLER_SEED_RANDOM ? 0x9E3779B9u : v;  /* the resolved seed must replay */
}

static nx_status check_params(const nx_sampler_params *p, nx_error *err) {
    if (p->n_vocab <= 0) return nx_fail(err, NX_ERR_INVALID_ARG, "sampler: n_vocab = %d must be > 0", p->n_vocab);
    if (isnan(p->temperature)) return nx_fail(err, NX_ERR_INVALID_ARG, "sampler: temperature is NaN");
    if (isnan(p->top_p)) return nx_fail(err, NX_ERR_INVALID_ARG, "sampler: top_p is NaN");
    if (isnan(p->min_p)) return nx_fail(err, NX_ERR_INVALID_ARG, "sampler: min_p is NaN");
    if (p->min_keep < 0) return nx_fail(err, NX_ERR_INVALID_ARG, "sampler: min_keep = %d must be >= 0", p->min_keep);
    if (p->penalty_last_n < -1)
        return nx_fail(err, NX_ERR_INVALID_ARG, "sampler: penalty_last_n = %d must be >= -1", p->penalty_last_n);
    if (!isfinite(p->repeat_penalty) || p->repeat_penalty <= 0.0f)
        return nx_fail(err, NX_ERR_INVALID_ARG, "sampler: repeat_penalty = %g must be finite and > 0",
                       (double)p->repeat_penalty);
    if (!isfinite(p->frequency_penalty) || !isfinite(p->presence_penalty))
        return nx_fail(err, NX_ERR_INVALID_ARG, "sampler: frequency/presence penalties must be finite");
    if (p->n_logit_bias < 0 || (p->n_logit_bias > 0 && !p->logit_bias))
        return nx_fail(err, NX_ERR_INVALID_ARG, "sampler: bad logit bias list (%d entries)", p->n_logit_bias);
    for (int32_t i = 0; i < p->n_logit_bias; i++) {
        const nx_logit_bias *b = &p->logit_bias[i];
        if (b->token < 0 || b->token >= p->n_vocab)
            return nx_fail(err, NX_ERR_INVALID_ARG, "sampler: logit bias token %d outside [0, %d)", b->token, p->n_vocab);
        if (isnan(b->bias)) return nx_fail(err, NX_ERR_INVALID_ARG, "sampler: logit bias for token %d is NaN", b->token);
    }
    return NX_OK;
}

static void free_scratch(nx_sampler *s) {
    free(s->work);
    free(s->counts);
    free(s->qdense);
    free(s->c.l);
    free(s->c.w);
    free(s->c.id);
    nx_sample_dist_free(&s->tmp);
    s->work = NULL;
    s->counts = NULL;
    s->qdense = NULL;
    memset(&s->c, 0, sizeof s->c);
    s->c_cap = 0;
}

void nx_sampler_free(nx_sampler *s) {
    if (!s) return;
    free_scratch(s);
    free(s->bias);
    free(s->hist);
    free(s);
}

/* Copy params (bias list into s's own buffer) and size the history for them. */
static nx_status set_params(nx_sampler *s, const nx_sampler_params *p, nx_error *err) {
    if (p->n_logit_bias > s->bias_cap) {
        nx_logit_bias *nb = realloc(s->bias, sizeof *nb * (size_t)p->n_logit_bias);
        if (!nb) return nx_fail(err, NX_ERR_NOMEM, "sampler: out of memory (logit bias)");
        s->bias = nb;
        s->bias_cap = p->n_logit_bias;
    }
    if (p->n_logit_bias > 0) memcpy(s->bias, p->logit_bias, sizeof *s->bias * (size_t)p->n_logit_bias);
    if (s->p.n_vocab != p->n_vocab) free_scratch(s);
    s->p = *p;
    s->p.logit_bias = s->bias;
    s->pen_active = p->penalty_last_n != 0 &&
        !(p->repeat_penalty == 1.0f && p->frequency_penalty == 0.0f && p->presence_penalty == 0.0f);
    const int32_t want = !s->pen_active ? 0 : p->penalty_last_n > 0 ? p->penalty_last_n : 256;
    if (want > s->hist_alloc) {
        int32_t *nh = realloc(s->hist, sizeof *nh * (size_t)want);
        if (!nh) return nx_fail(err, NX_ERR_NOMEM, "sampler: out of memory (history of %d tokens)", want);
        s->hist = nh;
        s->hist_alloc = want;
    }
    s->hist_cap = !s->pen_active ? 0 : p->penalty_last_n > 0 ? p->penalty_last_n : s->hist_alloc;
    s->hist_len = 0;
    s->hist_head = 0;
    return NX_OK;
}

nx_status nx_sampler_create(const nx_sampler_params *params, nx_sampler **out, nx_error *err) {
    if (out) *out = NULL;
    if (!params || !out) return nx_fail(err, NX_ERR_INVALID_ARG, "sampler: NULL params or output");
    nx_status st = check_params(params, err);
    if (st) return st;
    nx_sampler *s = calloc(1, sizeof *s);
    if (!s) return nx_fail(err, NX_ERR_NOMEM, "sampler: out of memory");
    if ((st = set_params(s, params, err))) {
        nx_sampler_free(s);
        return st;
    }
    s->seed = params->seed == NX_SAMPLER_SEED_RANDOM ? random_seed() : params->seed;
    nx_rng_seed(&s->rng, s->seed);
    *out = s;
    return NX_OK;
}

nx_status nx_sampler_copy(nx_sampler *dst, const nx_sampler *src, nx_error *err) {
    if (!dst || !src) return nx_fail(err, NX_ERR_INVALID_ARG, "sampler copy: NULL chain");
    if (dst == src) return NX_OK;
    nx_status st = set_params(dst, &src->p, err);
    if (st) return st;
    if (src->hist_len > dst->hist_alloc) {
        int32_t *nh = realloc(dst->hist, sizeof *nh * (size_t)src->hist_alloc);
        if (!nh) return nx_fail(err, NX_ERR_NOMEM, "sampler copy: out of memory (history)");
        dst->hist = nh;
        dst->hist_alloc = src->hist_alloc;
    }
    /* the ring is stored linearized (oldest first) in dst */
    for (int32_t k = 0; k < src->hist_len; k++)
        dst->hist[k] = src->hist[(src->hist_head + k) % src->hist_cap];
    dst->hist_cap = src->p.penalty_last_n > 0 ? src->hist_cap : dst->hist_alloc;
    dst->hist_len = src->hist_len;
    dst->hist_head = 0;
    dst->seed = src->seed;
    dst->rng = src->rng;
    return NX_OK;
}

nx_status nx_sampler_clone(const nx_sampler *s, nx_sampler **out, nx_error *err) {
    if (out) *out = NULL;
    if (!s || !out) return nx_fail(err, NX_ERR_INVALID_ARG, "sampler clone: NULL chain or output");
    nx_sampler *c = calloc(1, sizeof *c);
    if (!c) return nx_fail(err, NX_ERR_NOMEM, "sampler clone: out of memory");
    nx_status st = nx_sampler_copy(c, s, err);
    if (st) {
        nx_sampler_free(c);
        return st;
    }
    *out = c;
    return NX_OK;
}

nx_status nx_sampler_accept(nx_sampler *s, int32_t token, nx_error *err) {
    if (!s) return nx_fail(err, NX_ERR_INVALID_ARG, "sampler accept: NULL chain");
    if (token < 0 || token >= s->p.n_vocab)
        return nx_fail(err, NX_ERR_INVALID_ARG, "sampler accept: token %d outside [0, %d)", token, s->p.n_vocab);
    if (!s->pen_active) return NX_OK;
    if (s->p.penalty_last_n > 0) {
        if (s->hist_len < s->hist_cap) {
            s->hist[(s->hist_head + s->hist_len) % s->hist_cap] = token;
            s->hist_len++;
        } else {
            s->hist[s->hist_head] = token;
            s->hist_head = (s->hist_head + 1) % s->hist_cap;
        }
        return NX_OK;
    }
    if (s->hist_len == s->hist_alloc) {   /* -1: the whole history, head stays 0 */
        if (s->hist_alloc > INT32_MAX / 2) return nx_fail(err, NX_ERR_NOMEM, "sampler accept: history too long");
        int32_t na = s->hist_alloc * 2;
        int32_t *nh = realloc(s->hist, sizeof *nh * (size_t)na);
        if (!nh) return nx_fail(err, NX_ERR_NOMEM, "sampler accept: out of memory (history of %d tokens)", na);
        s->hist = nh;
        s->hist_alloc = s->hist_cap = na;
    }
    s->hist[s->hist_len++] = token;
    return NX_OK;
}

void nx_sampler_reset(nx_sampler *s) {
    if (!s) return;
    s->hist_len = 0;
    s->hist_head = 0;
    nx_rng_seed(&s->rng, s->seed);
}

const nx_sampler_params *nx_sampler_get_params(const nx_sampler *s) { return s ? &s->p : NULL; }
uint32_t nx_sampler_seed(const nx_sampler *s) { return s ? s->seed : 0; }
bool nx_sampler_is_greedy(const nx_sampler *s) { return s && s->p.temperature <= 0.0f; }
int32_t nx_sampler_history_len(const nx_sampler *s) { return s ? s->hist_len : 0; }
nx_rng nx_sampler_rng_state(const nx_sampler *s) { return s ? s->rng : (nx_rng){{0, 0, 0, 0}}; }
void nx_sampler_set_rng(nx_sampler *s, nx_rng r) { if (s) s->rng = r; }

/* ===== Distributions ===== */

nx_status nx_sample_dist_init(nx_sample_dist *d, int32_t n_vocab, nx_error *err) {
    if (!d) return nx_fail(err, NX_ERR_INVALID_ARG, "sample dist: NULL");
    memset(d, 0, sizeof *d);
    if (n_vocab <= 0) return nx_fail(err, NX_ERR_INVALID_ARG, "sample dist: n_vocab = %d must be > 0", n_vocab);
    d->ids = malloc(sizeof *d->ids * (size_t)n_vocab);
    d->p = malloc(sizeof *d->p * (size_t)n_vocab);
    if (!d->ids || !d->p) {
        nx_sample_dist_free(d);
        return nx_fail(err, NX_ERR_NOMEM, "sample dist: out of memory (%d entries)", n_vocab);
    }
    d->cap = n_vocab;
    return NX_OK;
}

void nx_sample_dist_free(nx_sample_dist *d) {
    if (!d) return;
    free(d->ids);
    free(d->p);
    memset(d, 0, sizeof *d);
}

float nx_sample_dist_prob(const nx_sample_dist *d, int32_t token) {
    if (!d) return 0.0f;
    for (int32_t i = 0; i < d->n; i++)
        if (d->ids[i] == token) return d->p[i];
    return 0.0f;
}

nx_status nx_sample_dist_set(nx_sample_dist *d, const int32_t *ids, const float *w, int32_t n,
                             int32_t n_vocab, nx_error *err) {
    if (!d || !d->ids || (n > 0 && (!ids || !w)) || n < 0)
        return nx_fail(err, NX_ERR_INVALID_ARG, "sample dist set: NULL or negative input");
    if (n > d->cap) return nx_fail(err, NX_ERR_RANGE, "sample dist set: %d entries > room %d", n, d->cap);
    double sum = 0.0;
    for (int32_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= n_vocab)
            return nx_fail(err, NX_ERR_INVALID_ARG, "sample dist set: token %d outside [0, %d)", ids[i], n_vocab);
        if (!(w[i] >= 0.0f) || !isfinite(w[i]))
            return nx_fail(err, NX_ERR_INVALID_ARG, "sample dist set: weight %g of token %d", (double)w[i], ids[i]);
        for (int32_t j = 0; j < i; j++)
            if (ids[j] == ids[i]) return nx_fail(err, NX_ERR_INVALID_ARG, "sample dist set: token %d twice", ids[i]);
        sum += w[i];
    }
    if (!(sum > 0.0)) return nx_fail(err, NX_ERR_INVALID_ARG, "sample dist set: all weights are zero");
    int32_t k = 0;
    for (int32_t i = 0; i < n; i++) {
        if (w[i] == 0.0f) continue;
        d->ids[k] = ids[i];
        d->p[k] = (float)(w[i] / sum);
        k++;
    }
    d->n = k;
    d->sorted = false;
    return NX_OK;
}

/* ===== Steps 1-2: logit bias and penalties ===== */

static nx_status adjust_logits(nx_sampler *s, const float *logits, float *out, nx_error *err) {
    const int32_t n = s->p.n_vocab;
    if (out != logits) memcpy(out, logits, sizeof *out * (size_t)n);
    for (int32_t i = 0; i < s->p.n_logit_bias; i++) out[s->bias[i].token] += s->bias[i].bias;
    if (!s->pen_active || s->hist_len == 0) return NX_OK;
    if (!s->counts && !(s->counts = calloc((size_t)n, sizeof *s->counts)))
        return nx_fail(err, NX_ERR_NOMEM, "sampler: out of memory (penalty counts)");
    const float rp = s->p.repeat_penalty, fp = s->p.frequency_penalty, pp = s->p.presence_penalty;
    for (int32_t k = 0; k < s->hist_len; k++) s->counts[s->hist[(s->hist_head + k) % s->hist_cap]]++;
    for (int32_t k = 0; k < s->hist_len; k++) {
        const int32_t t = s->hist[(s->hist_head + k) % s->hist_cap];
        const int32_t c = s->counts[t];
        if (!c) continue;                /* already applied (a repeated token) */
        s->counts[t] = 0;
        float v = out[t];
        v = v <= 0.0f ? v * rp : v / rp;  /* dividing a negative logit would raise it */
        out[t] = v - ((float)c * fp + pp);
    }
    return NX_OK;
}

nx_status nx_sampler_apply_bias_penalties(nx_sampler *s, const float *logits, float *out, nx_error *err) {
    if (!s || !logits || !out) return nx_fail(err, NX_ERR_INVALID_ARG, "sampler: NULL chain, logits or output");
    return adjust_logits(s, logits, out, err);
}

/* The logits the rest of the chain sees: the caller's row itself when bias and penalties are
 * idle, else the adjusted copy in scratch. */
static nx_status chain_logits(nx_sampler *s, const float *logits, const float **L, nx_error *err) {
    *L = logits;
    if (s->p.n_logit_bias == 0 && !(s->pen_active && s->hist_len > 0)) return NX_OK;
    if (!s->work && !(s->work = malloc(sizeof *s->work * (size_t)s->p.n_vocab)))
        return nx_fail(err, NX_ERR_NOMEM, "sampler: out of memory (logit scratch)");
    nx_status st = adjust_logits(s, logits, s->work, err);
    *L = s->work;
    return st;
}

/* ===== Candidate selection ===== */

static nx_status cand_reserve(nx_sampler *s, int32_t need, nx_error *err) {
    if (need <= s->c_cap) return NX_OK;
    int64_t cap = s->c_cap ? s->c_cap : 4096;
    while (cap < need) cap *= 2;
    if (cap > s->p.n_vocab) cap = s->p.n_vocab > need ? s->p.n_vocab : need;
    float *l = realloc(s->c.l, sizeof *l * (size_t)cap);
    if (l) s->c.l = l;
    float *w = realloc(s->c.w, sizeof *w * (size_t)cap);
    if (w) s->c.w = w;
    int32_t *id = realloc(s->c.id, sizeof *id * (size_t)cap);
    if (id) s->c.id = id;
    if (!l || !w || !id) return nx_fail(err, NX_ERR_NOMEM, "sampler: out of memory (%lld candidates)", (long long)cap);
    s->c_cap = (int32_t)cap;
    return NX_OK;
}

static inline cand cand_at(cand c, int32_t off) { return (cand){c.l + off, c.w + off, c.id + off}; }

static inline void cand_swap(cand c, int32_t a, int32_t b) {
    float l = c.l[a]; c.l[a] = c.l[b]; c.l[b] = l;
    float w = c.w[a]; c.w[a] = c.w[b]; c.w[b] = w;
    int32_t id = c.id[a]; c.id[a] = c.id[b]; c.id[b] = id;
}

/* a ranks after b: smaller logit, or the same logit and a larger id */
static inline bool worse(cand c, int32_t a, int32_t b) {
    return c.l[a] < c.l[b] || (c.l[a] == c.l[b] && c.id[a] > c.id[b]);
}

static void sift_down(cand c, int32_t root, int32_t n) {
    for (;;) {
        int32_t child = 2 * root + 1;
        if (child >= n) return;
        if (child + 1 < n && worse(c, child + 1, child)) child++;
        if (!worse(c, child, root)) return;
        cand_swap(c, root, child);
        root = child;
    }
}

/* Sort best-ranked first (a heap of the worst, moved to the end one by one). */
static void cand_sort(cand c, int32_t n) {
    for (int32_t i = n / 2 - 1; i >= 0; i--) sift_down(c, i, n);
    for (int32_t end = n - 1; end > 0; end--) {
        cand_swap(c, 0, end);
        sift_down(c, 0, end);
    }
}

/* Prefix length of sorted candidates reaching target (by mass: sum of w; else a count). */
static int32_t scan_prefix(cand c, int32_t n, double target, bool by_mass) {
    if (!by_mass) return target >= n ? n : (int32_t)target;
    double cum = 0.0;
    for (int32_t i = 0; i < n; i++) {
        cum += c.w[i];
        if (cum >= target) return i + 1;
    }
    return n;
}

#define SEL_BUCKETS 256

static inline int32_t bucket_of(float l, float hi, double scale) {
    const double b = ((double)hi - (double)l) * scale;
    return b >= SEL_BUCKETS - 1 ? SEL_BUCKETS - 1 : (int32_t)b;
}

/* Rearrange c[0..n) so that [0, cut) holds the cut best-ranked candidates and return cut:
 * by_mass: the smallest cut whose w sum is >= target (n if none); else cut = target (a count).
 * Histogram the logits into buckets, keep the buckets above the one where the running count /
 * mass crosses the target, drop those below, and continue inside the crossing bucket. */
static int32_t select_prefix(cand c, int32_t n, double target, bool by_mass) {
    int32_t base = 0;
    double qty[SEL_BUCKETS];
    for (int iter = 0;; iter++) {
        const cand v = cand_at(c, base);
        float lo = v.l[0], hi = v.l[0];
        for (int32_t i = 1; i < n; i++) {
            lo = v.l[i] < lo ? v.l[i] : lo;
            hi = v.l[i] > hi ? v.l[i] : hi;
        }
        /* small, all equal (ties go by id) or adversarially spread: sort what is left */
        if (n <= 32 || lo == hi || iter >= 12) {
            cand_sort(v, n);
            return base + scan_prefix(v, n, target, by_mass);
        }
        const double scale = SEL_BUCKETS / ((double)hi - (double)lo);
        memset(qty, 0, sizeof qty);
        for (int32_t i = 0; i < n; i++) qty[bucket_of(v.l[i], hi, scale)] += by_mass ? (double)v.w[i] : 1.0;
        int32_t bs = 0;
        double acc = 0.0;
        for (; bs < SEL_BUCKETS; bs++) {
            if (acc + qty[bs] >= target) break;
            acc += qty[bs];
        }
        if (bs == SEL_BUCKETS) return base + n;       /* the target is more than everything */
        int32_t lt = 0, i = 0, gt = n;                /* [0,lt) above, [lt,gt) crossing bucket */
        while (i < gt) {
            const int32_t b = bucket_of(v.l[i], hi, scale);
            if (b < bs) cand_swap(v, lt++, i++);
            else if (b > bs) cand_swap(v, i, --gt);
            else i++;
        }
        base += lt;
        n = gt - lt;
        target -= acc;
    }
}

/* GCC generic vectors (plain SSE2 on x86-64, no target flags): a quick "any hit in these 16
 * logits?" test, since most passes reject almost every token. */
typedef float v4f __attribute__((vector_size(16)));
typedef int32_t v4i __attribute__((vector_size(16)));

static inline v4f load4(const float *x) {
    v4f v;
    memcpy(&v, x, sizeof v);
    return v;
}

/* Append every token with lo <= L[i] < hi (lo = -FLT_MAX excludes only -inf and NaN). Inside a
 * block with a hit every token is written and the count advances only on a hit (branch-free:
 * near a band edge a hit is a coin flip); the candidate arrays have room for n_vocab + 1. */
static int32_t collect(cand c, const float *L, int32_t n, float lo, float hi, int32_t k) {
    const v4f vlo = {lo, lo, lo, lo}, vhi = {hi, hi, hi, hi};
    int32_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const v4f a = load4(L + i), b = load4(L + i + 4), e = load4(L + i + 8), f = load4(L + i + 12);
        const v4i h = ((a >= vlo) & (a < vhi)) | ((b >= vlo) & (b < vhi)) |
                      ((e >= vlo) & (e < vhi)) | ((f >= vlo) & (f < vhi));
        uint64_t u[2];
        memcpy(u, &h, sizeof u);
        if (!(u[0] | u[1])) continue;
        for (int32_t j = i; j < i + 16; j++) {
            const float v = L[j];
            c.l[k] = v;
            c.id[k] = j;
            k += (v >= lo) & (v < hi);
        }
    }
    for (; i < n; i++) {
        const float v = L[i];
        c.l[k] = v;
        c.id[k] = i;
        k += (v >= lo) & (v < hi);
    }
    return k;
}

/* w = exp(l - m) for candidates [from, to); returns their sum. */
static double fill_weights(cand c, int32_t from, int32_t to, float m) {
    if (to <= from) return 0.0;
    return nx_ops_get()->exp_sum(c.w + from, c.l + from, m, to - from);
}

/* Collect in bands below the max m: m-8, m-16, m-32, m-64, then down to bottom, until the
 * candidates weigh want_mass (by_mass: weights are filled), else in one pass down to bottom. */
static int32_t collect_bands(cand c, const float *L, int32_t n, float m, float bottom, bool by_mass,
                             double want_mass) {
    float hi = INFINITY, d = 8.0f;
    double mass = 0.0;
    int32_t cnt = 0;
    for (;;) {
        float t = m - d;
        const bool last = !by_mass || !(t > bottom) || d > 64.0f;
        if (last) t = bottom;
        const int32_t start = cnt;
        cnt = collect(c, L, n, t, hi, cnt);
        if (by_mass) mass += fill_weights(c, start, cnt, m);
        if (last || mass >= want_mass) return cnt;
        hi = t;
        d *= 2.0f;
    }
}

/* A logit threshold with at least k tokens at or above it (fewer only when bottom cuts first):
 * one pass histogramming m - l in 1/8-logit buckets, 64 logits deep. */
static float count_threshold(const float *L, int32_t n, float m, int32_t k, float bottom) {
    enum { HB = 512 };
    const float scale = 8.0f;
    int32_t h[HB];
    memset(h, 0, sizeof h);
    for (int32_t i = 0; i < n; i++) {
        float d = (m - L[i]) * scale;
        d = d < (float)(HB - 1) ? d : (float)(HB - 1);   /* NaN and -inf land in the last bucket */
        h[(int32_t)d]++;
    }
    int64_t cum = 0;
    for (int32_t b = 0; b < HB - 1; b++) {
        cum += h[b];
        if (cum >= k) {
            /* one bucket of slack so float rounding cannot drop a token of bucket <= b */
            const float t = m - (float)(b + 2) / scale;
            return t > bottom ? t : bottom;
        }
    }
    return bottom;
}

/* ===== Steps 3-6: the distribution ===== */

static nx_status check_row_args(const nx_sampler *s, const void *row, const nx_sample_dist *out, nx_error *err) {
    if (!s || !row || !out || !out->ids || !out->p)
        return nx_fail(err, NX_ERR_INVALID_ARG, "sampler: NULL chain, logits or distribution");
    if (out->cap < s->p.n_vocab)
        return nx_fail(err, NX_ERR_INVALID_ARG, "sampler: distribution room %d < n_vocab %d", out->cap, s->p.n_vocab);
    return NX_OK;
}

static nx_status no_token(const nx_sampler *s, nx_error *err) {
    return nx_fail(err, NX_ERR_RANGE,
                   "sampler: no token left to sample (all %d logits are -inf or NaN after logit bias / penalties)",
                   s->p.n_vocab);
}

/* out->p[0..cnt) holds (logit - max) / temperature: exponentiate, normalise, drop underflows. */
static nx_status finish_dist(nx_sample_dist *out, int32_t cnt, bool sorted, float m, nx_error *err) {
    const double sum = cnt > 0 ? nx_ops_get()->exp_sum(out->p, out->p, 0.0f, cnt) : 0.0;
    if (!(sum > 0.5) || !isfinite(sum))           /* the max contributes exp(0) = 1 */
        return nx_fail(err, NX_ERR_INTERNAL, "sampler: distribution sum %g (max logit %g)", sum, (double)m);
    const float inv = (float)(1.0 / sum);
    int32_t k = 0;
    for (int32_t i = 0; i < cnt; i++) {            /* drop entries that underflowed (branch-free) */
        const float v = out->p[i] * inv;
        out->ids[k] = out->ids[i];
        out->p[k] = v;
        k += v > 0.0f;
    }
    out->n = k;
    out->sorted = sorted || k <= 1;
    return NX_OK;
}

nx_status nx_sampler_dist(nx_sampler *s, const float *logits, nx_sample_dist *out, nx_error *err) {
    nx_status st = check_row_args(s, logits, out, err);
    if (st) return st;
    const nx_sampler_params *P = &s->p;
    const int32_t n = P->n_vocab;
    const float *L;
    if ((st = chain_logits(s, logits, &L, err))) return st;

    const int32_t K = P->top_k > 0 && P->top_k < n ? P->top_k : 0;   /* 0: top-k off */
    const bool greedy = P->temperature <= 0.0f, small_k = K > 0 && K <= NX_TOPK_MAX;
    int idx[NX_TOPK_MAX];
    float val[NX_TOPK_MAX];
    int got = 0;
    int32_t am = 0;
    float m;
    if (small_k && !greedy) {                      /* the top-k pass also finds the max */
        if ((st = nx_topk(L, n, K, idx, val, &got, err))) return st;
        m = got > 0 ? val[0] : -INFINITY;
    } else {
        am = nx_argmax(L, n);
        m = L[am];
    }
    if (!(m > -INFINITY)) return no_token(s, err);
    if (greedy) {
        out->n = 1;
        out->ids[0] = am;
        out->p[0] = 1.0f;
        out->sorted = true;
        return NX_OK;
    }
    if (m == INFINITY) {                           /* forced tokens (+inf bias): uniform over them */
        int32_t k = 0;
        for (int32_t i = 0; i < n; i++)
            if (L[i] == INFINITY) out->ids[k++] = i;
        for (int32_t i = 0; i < k; i++) out->p[i] = 1.0f / (float)k;
        out->n = k;
        out->sorted = true;
        return NX_OK;
    }

    const bool use_p = P->top_p < 1.0f, use_minp = P->min_p > 0.0f;
    const float thr = use_minp ? m + logf(P->min_p) : -INFINITY;     /* min-p: logit >= thr */
    /* below thr nothing survives min-p (unless min_keep asks for more tokens than pass it); the
     * max always survives, so the bottom never goes above it */
    float bottom = -FLT_MAX;
    if (use_minp && P->min_keep <= 1 && thr > -FLT_MAX) bottom = thr < m ? thr : m;
    const int32_t keep_min = P->min_keep > 1 ? P->min_keep : 1;
    if ((st = cand_reserve(s, small_k ? NX_TOPK_MAX : n + 1, err))) return st;
    const cand c = s->c;
    int32_t cnt = 0;
    bool sorted = false, have_w = false;
    double z = 0.0;                                /* sum of exp(l - m) over the top-k set */

    /* step 3 (top-k) and candidate collection */
    if (small_k) {
        for (int i = 0; i < got; i++) {
            if (!(val[i] > -INFINITY)) break;      /* sorted: only -inf after this */
            c.l[cnt] = val[i];
            c.id[cnt] = idx[i];
            cnt++;
        }
        sorted = true;
    } else if (K > 0) {
        /* without top-p, min-p's threshold bounds the collection; with it, the whole top-k set
         * is needed as top-p's normaliser */
        const float t = count_threshold(L, n, m, K, use_p ? -FLT_MAX : bottom);
        cnt = collect(c, L, n, t, INFINITY, 0);
        if (cnt > K) {
            select_prefix(c, cnt, (double)K, false);
            cnt = K;
        }
    } else if (use_p) {
        z = nx_ops_get()->exp_sum(NULL, L, m, n);
        if (!(z > 0.5) || !isfinite(z)) {         /* NaN logits poison the SIMD sum: redo, skipping them */
            z = 0.0;
            for (int32_t i = 0; i < n; i++)
                if (L[i] > -INFINITY) z += expf(L[i] - m);
        }
        cnt = collect_bands(c, L, n, m, bottom, true, (double)P->top_p * z);
        have_w = true;
    } else if (use_minp || n <= NX_SAMPLE_SORT_MAX) {
        cnt = collect_bands(c, L, n, m, bottom, false, 0.0);
    } else {                                       /* no filter at all: every finite token, in id order */
        const float inv_t = 1.0f / P->temperature;
        int32_t k = 0;
        for (int32_t i = 0; i < n; i++) {
            const float v = L[i];
            out->ids[k] = i;
            out->p[k] = (v - m) * inv_t;
            k += v > -INFINITY;                    /* NaN and -inf are not candidates */
        }
        return finish_dist(out, k, false, m, err);
    }

    /* step 4: top-p over the probabilities after top-k */
    if (use_p && cnt > 1) {
        if (!have_w) {
            const double zk = fill_weights(c, 0, cnt, m);
            if (K > 0) z = zk;
            have_w = true;
        }
        const double target = (double)P->top_p * z;
        int32_t cut = cnt;
        if (sorted) {
            double cum = 0.0;
            for (int32_t i = 0; i < cnt; i++) {
                cum += c.w[i];
                if (cum >= target && i + 1 >= keep_min) {
                    cut = i + 1;
                    break;
                }
            }
        } else {
            cut = select_prefix(c, cnt, target, true);
            if (cut < keep_min && cut < cnt) {
                const int32_t want = keep_min < cnt ? keep_min : cnt;
                select_prefix(cand_at(c, cut), cnt - cut, (double)(want - cut), false);
                cut = want;
            }
        }
        cnt = cut;
    }

    /* step 5: min-p (the max always survives the earlier steps, so thr is still relative to it) */
    if (use_minp && cnt > 1) {
        if (sorted) {
            int32_t i = 1;
            while (i < cnt && (c.l[i] >= thr || i < keep_min)) i++;
            cnt = i;
        } else {
            int32_t j = 0;
            for (int32_t i = 0; i < cnt; i++)
                if (c.l[i] >= thr) cand_swap(c, i, j++);
            if (j >= keep_min) cnt = j;
            else {
                const int32_t want = keep_min < cnt ? keep_min : cnt;
                select_prefix(c, cnt, (double)want, false);
                cnt = want;
            }
        }
    }

    /* step 6: temperature and normalisation */
    if (!sorted && cnt <= NX_SAMPLE_SORT_MAX) {
        cand_sort(c, cnt);
        sorted = true;
    }
    const float inv_t = 1.0f / P->temperature;
    for (int32_t i = 0; i < cnt; i++) {
        out->ids[i] = c.id[i];
        out->p[i] = (c.l[i] - m) * inv_t;
    }
    return finish_dist(out, cnt, sorted, m, err);
}

/* ===== Step 7: sampling ===== */

/* Most probable entry, lowest id on ties. */
static int32_t dist_argmax(const nx_sample_dist *d) {
    if (d->sorted) return d->ids[0];
    int32_t best = 0;
    for (int32_t i = 1; i < d->n; i++)
        if (d->p[i] > d->p[best] || (d->p[i] == d->p[best] && d->ids[i] < d->ids[best])) best = i;
    return d->ids[best];
}

/* Sum of the positive entries of p[0..n), four accumulators (no long dependency chain). */
static double sum_pos(const float *p, int32_t n) {
    double a0 = 0.0, a1 = 0.0, a2 = 0.0, a3 = 0.0;
    int32_t i = 0;
    for (; i + 4 <= n; i += 4) {
        a0 += p[i] > 0.0f ? p[i] : 0.0f;
        a1 += p[i + 1] > 0.0f ? p[i + 1] : 0.0f;
        a2 += p[i + 2] > 0.0f ? p[i + 2] : 0.0f;
        a3 += p[i + 3] > 0.0f ? p[i + 3] : 0.0f;
    }
    for (; i < n; i++) a0 += p[i] > 0.0f ? p[i] : 0.0f;
    return (a0 + a1) + (a2 + a3);
}

/* Index of token t in d, or -1. */
static int32_t dist_find(const nx_sample_dist *d, int32_t t) {
    for (int32_t i = 0; i < d->n; i++)
        if (d->ids[i] == t) return i;
    return -1;
}

/* One draw from the positive weights of d, entry `skip` (an index, or -1) excluded; total = their
 * sum. The first entry whose running sum exceeds u * total, found block by block so that a
 * full-vocabulary distribution is not walked one dependent addition at a time. */
#define DRAW_BLOCK 256
static int32_t draw(nx_rng *rng, const nx_sample_dist *d, int32_t skip, double total) {
    const double r = nx_rng_uniform(rng) * total;
    double acc = 0.0;
    for (int32_t b = 0; b < d->n; b += DRAW_BLOCK) {
        const int32_t e = b + DRAW_BLOCK < d->n ? b + DRAW_BLOCK : d->n;
        double bs = sum_pos(d->p + b, e - b);
        if (skip >= b && skip < e && d->p[skip] > 0.0f) bs -= d->p[skip];
        if (!(r < acc + bs)) {
            acc += bs;
            continue;
        }
        for (int32_t i = b; i < e; i++) {
            if (i == skip || !(d->p[i] > 0.0f)) continue;
            acc += d->p[i];
            if (r < acc) return d->ids[i];
        }
    }
    for (int32_t i = d->n - 1; i >= 0; i--)        /* r landed on the rounding slack */
        if (i != skip && d->p[i] > 0.0f) return d->ids[i];
    return d->ids[0];
}

static nx_status check_dist(const nx_sample_dist *d, const char *what, nx_error *err) {
    if (!d || !d->ids || !d->p || d->n <= 0)
        return nx_fail(err, NX_ERR_INVALID_ARG, "sampler: %s distribution is NULL or empty", what);
    return NX_OK;
}

nx_status nx_sampler_sample_dist(nx_sampler *s, const nx_sample_dist *d, int32_t *token, nx_error *err) {
    if (!s || !token) return nx_fail(err, NX_ERR_INVALID_ARG, "sampler: NULL chain or output");
    nx_status st = check_dist(d, "the", err);
    if (st) return st;
    if (nx_sampler_is_greedy(s)) {
        *token = dist_argmax(d);
        return NX_OK;
    }
    const double total = sum_pos(d->p, d->n);
    if (!(total > 0.0)) return nx_fail(err, NX_ERR_INVALID_ARG, "sampler: distribution has no positive entry");
    *token = draw(&s->rng, d, -1, total);
    return NX_OK;
}

nx_status nx_sampler_sample(nx_sampler *s, const float *logits, int32_t *token, nx_error *err) {
    if (!s || !logits || !token) return nx_fail(err, NX_ERR_INVALID_ARG, "sampler: NULL chain, logits or output");
    nx_status st;
    if (nx_sampler_is_greedy(s)) {                 /* no distribution needed */
        const float *L;
        if ((st = chain_logits(s, logits, &L, err))) return st;
        const int32_t am = nx_argmax(L, s->p.n_vocab);
        if (!(L[am] > -INFINITY)) return no_token(s, err);
        *token = am;
        return NX_OK;
    }
    if (!s->tmp.ids && (st = nx_sample_dist_init(&s->tmp, s->p.n_vocab, err))) return st;
    if ((st = nx_sampler_dist(s, logits, &s->tmp, err))) return st;
    return nx_sampler_sample_dist(s, &s->tmp, token, err);
}

/* ===== Speculative acceptance ===== */

nx_status nx_sampler_spec_accept(nx_sampler *s, const nx_sample_dist *p, int32_t draft,
                                 const nx_sample_dist *q, bool *accepted, int32_t *replacement,
                                 nx_error *err) {
    if (!s || !accepted || !replacement) return nx_fail(err, NX_ERR_INVALID_ARG, "spec accept: NULL argument");
    nx_status st = check_dist(p, "target", err);
    if (st) return st;
    if (q && (st = check_dist(q, "draft", err))) return st;
    const int32_t nv = s->p.n_vocab;
    if (draft < 0 || draft >= nv)
        return nx_fail(err, NX_ERR_INVALID_ARG, "spec accept: draft token %d outside [0, %d)", draft, nv);

    if (nx_sampler_is_greedy(s)) {
        const int32_t best = dist_argmax(p);
        *accepted = best == draft;
        *replacement = best;
        return NX_OK;
    }

    const double pd = nx_sample_dist_prob(p, draft);
    const double qd = q ? nx_sample_dist_prob(q, draft) : 1.0;
    if (!(qd > 0.0))
        return nx_fail(err, NX_ERR_INVALID_ARG, "spec accept: draft token %d has probability 0 under its own q", draft);
    if (pd >= qd || nx_rng_uniform(&s->rng) < pd / qd) {
        *accepted = true;
        *replacement = draft;
        return NX_OK;
    }
    *accepted = false;

    if (!q) {                                      /* one-hot q: residual = p without the draft */
        const int32_t at = dist_find(p, draft);
        const double total = sum_pos(p->p, p->n) - (at >= 0 && p->p[at] > 0.0f ? p->p[at] : 0.0f);
        if (!(total > 0.0)) {                      /* p was (numerically) one-hot at the draft */
            *replacement = dist_argmax(p);
            return NX_OK;
        }
        *replacement = draw(&s->rng, p, at, total);
        return NX_OK;
    }

    /* full q: residual r = max(0, p - q) over p's support, with q scattered into a dense row */
    if (!s->qdense && !(s->qdense = calloc((size_t)nv, sizeof *s->qdense)))
        return nx_fail(err, NX_ERR_NOMEM, "spec accept: out of memory (q scratch)");
    for (int32_t i = 0; i < q->n; i++) {
        const int32_t t = q->ids[i];
        if (t < 0 || t >= nv) {
            for (int32_t j = 0; j < i; j++) s->qdense[q->ids[j]] = 0.0f;
            return nx_fail(err, NX_ERR_INVALID_ARG, "spec accept: draft distribution token %d outside [0, %d)", t, nv);
        }
        s->qdense[t] = q->p[i];
    }
    double total = 0.0;
    for (int32_t i = 0; i < p->n; i++) {
        const double r = (double)p->p[i] - s->qdense[p->ids[i]];
        if (r > 0.0) total += r;
    }
    if (total > 0.0) {
        const double u = nx_rng_uniform(&s->rng) * total;
        double acc = 0.0;
        int32_t pick = -1;
        for (int32_t i = 0; i < p->n; i++) {
            const double r = (double)p->p[i] - s->qdense[p->ids[i]];
            if (!(r > 0.0)) continue;
            acc += r;
            pick = p->ids[i];
            if (u < acc) break;
        }
        *replacement = pick;
    } else {
        /* p <= q everywhere means p == q up to rounding, where rejection has probability ~0 */
        *replacement = draw(&s->rng, p, -1, sum_pos(p->p, p->n));
    }
    for (int32_t i = 0; i < q->n; i++) s->qdense[q->ids[i]] = 0.0f;
    return NX_OK;
}
