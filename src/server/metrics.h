/*
 * metrics.h — the server's counters and histograms, rendered as Prometheus text (server.md
 * "Metrics"). Names:
 *   nextn_prompt_tokens_total                       counter   sum of timings.prompt_n
 *   nextn_generated_tokens_total                    counter   sum of timings.predicted_n
 *   nextn_requests_total{status}                    counter   completion requests by HTTP status
 *   nextn_requests_active                           gauge     completion requests in flight
 *   nextn_queue_depth                               gauge     requests waiting for a slot
 *   nextn_kv_cache_usage_ratio                      gauge     cached tokens / total context
 *   nextn_spec_drafted_total{drafter}               counter   sum of per-drafter drafted tokens
 *   nextn_spec_accepted_total{drafter}              counter   sum of per-drafter accepted tokens
 *   nextn_spec_accepted_by_depth_total{drafter,depth} counter accepted drafts at depth (1-based)
 *   nextn_decode_seconds                            histogram per request: first to last generated token
 *   nextn_time_to_first_token_seconds               histogram per request: arrival to first token
 * Every request that ends (completed, stopped, cancelled) adds its timings, so the counters equal
 * the sums of the `timings` of the responses. Thread-safe (one mutex).
 */
#ifndef NX_SERVER_METRICS_H
#define NX_SERVER_METRICS_H

#include "server/backend.h"
#include "server/sbuf.h"

typedef struct nx_metrics nx_metrics;

nx_metrics *nx_metrics_create(void);
void nx_metrics_free(nx_metrics *m);   /* NULL-safe */
/* A completion request answered with this HTTP status. */
void nx_metrics_request(nx_metrics *m, int http_status);
/* A generation ended: its timings; ttft_s < 0 when no token came. */
void nx_metrics_generation(nx_metrics *m, const nx_gen_timings *t, double ttft_s);
/* Append the Prometheus text exposition. */
void nx_metrics_render(nx_metrics *m, const nx_gen_load *load, int n_active, nx_sbuf *out);

#endif
