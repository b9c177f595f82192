/*
 * metrics.c — Prometheus counters / histograms of the server (see metrics.h).
 */
#include "server/metrics.h"
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define N_BUCKETS 13
#define MAX_DRAFTERS 8
#define MAX_STATUS 16

static const double bucket_le[N_BUCKETS] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};

typedef struct histo {
    uint64_t bucket[N_BUCKETS];   /* cumulative counts are computed at render */
    uint64_t count;
    double sum;
} histo;

typedef struct drafter_counts {
    char name[16];
    uint64_t drafted, accepted;
    uint64_t by_depth[NX_SPEC_DRAFT_CAP];
} drafter_counts;

struct nx_metrics {
    pthread_mutex_t mu;
    uint64_t prompt_tokens, generated_tokens;
    int status_code[MAX_STATUS];
    uint64_t status_n[MAX_STATUS];
    int n_status;
    drafter_counts drafter[MAX_DRAFTERS];
    int n_drafters;
    histo decode, ttft;
};

nx_metrics *nx_metrics_create(void) {
    nx_metrics *m = calloc(1, sizeof *m);
    if (m) pthread_mutex_init(&m->mu, NULL);
    return m;
}

void nx_metrics_free(nx_metrics *m) {
    if (!m) return;
    pthread_mutex_destroy(&m->mu);
    free(m);
}

void nx_metrics_request(nx_metrics *m, int http_status) {
    pthread_mutex_lock(&m->mu);
    int i = 0;
    while (i < m->n_status && m->status_code[i] != http_status) i++;
    if (i == m->n_status && m->n_status < MAX_STATUS) m->status_code[m->n_status++] = http_status;
    if (i < m->n_status) m->status_n[i]++;
    pthread_mutex_unlock(&m->mu);
}

static void observe(histo *h, double v) {
    if (!(v >= 0)) v = 0;
    for (int i = 0; i < N_BUCKETS; i++)
        if (v <= bucket_le[i]) { h->bucket[i]++; break; }
    h->count++;
    h->sum += v;
}

static drafter_counts *drafter_get(nx_metrics *m, const char *name) {
    for (int i = 0; i < m->n_drafters; i++)
        if (!strcmp(m->drafter[i].name, name)) return &m->drafter[i];
    if (m->n_drafters == MAX_DRAFTERS) return NULL;
    drafter_counts *d = &m->drafter[m->n_drafters++];
    snprintf(d->name, sizeof d->name, "%s", name);
    return d;
}

void nx_metrics_generation(nx_metrics *m, const nx_gen_timings *t, double ttft_s) {
    pthread_mutex_lock(&m->mu);
    m->prompt_tokens += (uint64_t)(t->prompt_n > 0 ? t->prompt_n : 0);
    m->generated_tokens += (uint64_t)(t->predicted_n > 0 ? t->predicted_n : 0);
    for (int s = 0; s < t->n_stages && s < NX_SPEC_MAX_STAGES; s++) {
        const nx_gen_stage_stats *st = &t->stage[s];
        drafter_counts *d = drafter_get(m, st->name);
        if (!d) continue;
        d->drafted += st->drafted;
        d->accepted += st->accepted;
        for (int i = 0; i < NX_SPEC_DRAFT_CAP; i++) d->by_depth[i] += st->depth_accepted[i];
    }
    if (t->predicted_n > 0) observe(&m->decode, t->predicted_ms / 1000.0);
    if (ttft_s >= 0) observe(&m->ttft, ttft_s);
    pthread_mutex_unlock(&m->mu);
}

static void head(nx_sbuf *o, const char *name, const char *type, const char *help) {
    nx_sbuf_addf(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void render_histo(nx_sbuf *o, const char *name, const char *help, const histo *h) {
    head(o, name, "histogram", help);
    uint64_t cum = 0;
    for (int i = 0; i < N_BUCKETS; i++) {
        cum += h->bucket[i];
        nx_sbuf_addf(o, "%s_bucket{le=\"%g\"} %llu\n", name, bucket_le[i], (unsigned long long)cum);
    }
    nx_sbuf_addf(o, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)h->count);
    nx_sbuf_addf(o, "%s_sum %.9g\n", name, h->sum);
    nx_sbuf_addf(o, "%s_count %llu\n", name, (unsigned long long)h->count);
}

void nx_metrics_render(nx_metrics *m, const nx_gen_load *load, int n_active, nx_sbuf *o) {
    pthread_mutex_lock(&m->mu);
    head(o, "nextn_prompt_tokens_total", "counter", "Prompt tokens evaluated (excluding tokens reused from a slot's cache).");
    nx_sbuf_addf(o, "nextn_prompt_tokens_total %llu\n", (unsigned long long)m->prompt_tokens);
    head(o, "nextn_generated_tokens_total", "counter", "Tokens generated.");
    nx_sbuf_addf(o, "nextn_generated_tokens_total %llu\n", (unsigned long long)m->generated_tokens);
    head(o, "nextn_requests_total", "counter", "Completion requests by HTTP status.");
    for (int i = 0; i < m->n_status; i++)
        nx_sbuf_addf(o, "nextn_requests_total{status=\"%d\"} %llu\n", m->status_code[i], (unsigned long long)m->status_n[i]);
    head(o, "nextn_requests_active", "gauge", "Completion requests in flight (queued or generating).");
    nx_sbuf_addf(o, "nextn_requests_active %d\n", n_active);
    head(o, "nextn_queue_depth", "gauge", "Requests waiting for a free slot.");
    nx_sbuf_addf(o, "nextn_queue_depth %d\n", load ? load->n_waiting : 0);
    head(o, "nextn_kv_cache_usage_ratio", "gauge", "Cached tokens over the total context of all slots.");
    nx_sbuf_addf(o, "nextn_kv_cache_usage_ratio %.6f\n", load ? load->kv_usage : 0.0);
    head(o, "nextn_spec_guard_off_slots", "gauge", "Generating slots whose draft policy holds speculation off (plain decoding measured faster).");
    nx_sbuf_addf(o, "nextn_spec_guard_off_slots %d\n", load ? load->n_guard_off : 0);
    head(o, "nextn_spec_guard_switches_total", "counter", "Times a slot's speculation guard switched speculation off or back on.");
    nx_sbuf_addf(o, "nextn_spec_guard_switches_total %llu\n", load ? (unsigned long long)load->guard_switches : 0ull);
    head(o, "nextn_spec_verify_cost_seconds", "gauge", "The draft policy's verify cost table: seconds of a target batch of n rows (measured row counts; engine-wide, spec/policy.h).");
    for (int n = 1; load && n < (int)(sizeof load->verify_s / sizeof *load->verify_s); n++)
        if (load->verify_s[n] > 0) nx_sbuf_addf(o, "nextn_spec_verify_cost_seconds{rows=\"%d\"} %.9g\n", n, load->verify_s[n]);
    head(o, "nextn_spec_memory_acceptance", "gauge", "Acceptance per draft depth that finished greedy requests measured; it seeds the next request's draft policy.");
    for (int i = 0; load && i < NX_SPEC_DRAFT_CAP; i++)
        if (load->accept_mem[i] > 0) nx_sbuf_addf(o, "nextn_spec_memory_acceptance{depth=\"%d\"} %.6f\n", i + 1, load->accept_mem[i]);
    head(o, "nextn_spec_drafted_total", "counter", "Draft tokens verified, per drafter.");
    for (int i = 0; i < m->n_drafters; i++)
        nx_sbuf_addf(o, "nextn_spec_drafted_total{drafter=\"%s\"} %llu\n", m->drafter[i].name,
                     (unsigned long long)m->drafter[i].drafted);
    head(o, "nextn_spec_accepted_total", "counter", "Draft tokens accepted, per drafter.");
    for (int i = 0; i < m->n_drafters; i++)
        nx_sbuf_addf(o, "nextn_spec_accepted_total{drafter=\"%s\"} %llu\n", m->drafter[i].name,
                     (unsigned long long)m->drafter[i].accepted);
    head(o, "nextn_spec_accepted_by_depth_total", "counter", "Draft tokens accepted at each depth (1 = first draft), per drafter.");
    for (int i = 0; i < m->n_drafters; i++) {
        int last = NX_SPEC_DRAFT_CAP;
        while (last > 1 && m->drafter[i].by_depth[last - 1] == 0) last--;
        for (int d = 0; d < last; d++)
            nx_sbuf_addf(o, "nextn_spec_accepted_by_depth_total{drafter=\"%s\",depth=\"%d\"} %llu\n", m->drafter[i].name,
                         d + 1, (unsigned long long)m->drafter[i].by_depth[d]);
    }
    render_histo(o, "nextn_decode_seconds", "Per request: seconds from the first generated token to the last.", &m->decode);
    render_histo(o, "nextn_time_to_first_token_seconds", "Per request: seconds from arrival to the first generated token.", &m->ttft);
    pthread_mutex_unlock(&m->mu);
}
