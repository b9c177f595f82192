/*
 * stats.h — what speculation did (speculative.md §6): counters per sequence or per run, their
 * summaries (text, JSON), and the `--spec-trace FILE` NDJSON writer.
 *
 * Counting, per generation step ("round") of one sequence: k drafts verified, n accepted.
 *   drafted / accepted         sum of k / n
 *   acceptance rate            accepted / drafted
 *   mean accepted length       accepted / rounds with drafts
 *   tokens per round           committed / rounds (committed = n + 1 per round)
 *   per depth i (1-based)      drafted_i = rounds with k >= i; reached_i = rounds with k >= i and
 *                              n >= i - 1 (d_i was actually judged); accepted_i = rounds with n >= i.
 *                              a_i = accepted_i / reached_i is the conditional acceptance the policy
 *                              models (policy.h); accepted_i / drafted_i is llama.cpp's draft_by_depth.
 *   histograms                 rounds by k (k = 0: plain steps) and drafting rounds by n
 *   per chain stage            rounds / drafted / accepted of the stage that drafted
 *   time                       draft, verify and other seconds as the engine measured them
 * Stats are plain data (no allocation): one per sequence, merged into a per-run total.
 *
 * Trace lines (one JSON object per line, speculative.md §6; extra keys are additions):
 *   {"evt":"draft","seq":S,"pos":P,"k":K,"drafts":[...],"p":[...],"src":"ngram"}
 *       pos = position of id_last (the verify batch starts there), k = drafts asked for,
 *       drafts / p = what the drafter proposed and its probabilities (null when not finite),
 *       src = the drafter (stage) that proposed them (omitted when unknown)
 *   {"evt":"accept","seq":S,"n":N,"pos":P,"ids":[...]}
 *       n = drafts accepted, ids = tokens committed by the round (accepted drafts + the target's
 *       token; omitted when not given)
 *   {"evt":"stats", ...nx_spec_stats_json...}   optional, e.g. at the end of a run
 * Never: print on its own, global state (the trace writer is an object the engine owns).
 */
#ifndef NX_SPEC_STATS_H
#define NX_SPEC_STATS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <cjson/cJSON.h>
#include "core/error.h"
#include "spec/drafter.h"

typedef struct nx_spec_stats {
    uint64_t n_rounds;                               /* generation steps, drafts or not */
    uint64_t n_rounds_drafted;                       /* steps with >= 1 draft */
    uint64_t n_drafted, n_accepted;                  /* draft tokens verified / accepted */
    uint64_t n_committed;                            /* tokens committed by rounds */
    uint64_t depth_drafted[NX_SPEC_DRAFT_CAP];       /* [i]: depth i + 1, see above */
    uint64_t depth_reached[NX_SPEC_DRAFT_CAP];
    uint64_t depth_accepted[NX_SPEC_DRAFT_CAP];
    uint64_t rounds_by_k[NX_SPEC_DRAFT_CAP + 1];     /* [k]: rounds with k drafts */
    uint64_t acc_len[NX_SPEC_DRAFT_CAP + 1];         /* [n]: drafting rounds with n accepted */
    uint64_t stage_rounds[NX_SPEC_MAX_STAGES];       /* drafting rounds per chain stage */
    uint64_t stage_drafted[NX_SPEC_MAX_STAGES];
    uint64_t stage_accepted[NX_SPEC_MAX_STAGES];
    double   t_draft, t_verify, t_other;             /* seconds */
    uint64_t n_shadow, n_shadow_ok;                  /* policy shadow drafts (policy.h): judged / would pass */
} nx_spec_stats;

void nx_spec_stats_reset(nx_spec_stats *st);
/* One round: `stage` = the chain stage that drafted (req.stage; < 0 or >= NX_SPEC_MAX_STAGES: not
 * counted per stage), k_drafted drafts verified, n_accepted of them accepted (clamped to
 * 0..k_drafted; k_drafted clamped to 0..NX_SPEC_DRAFT_CAP). */
void nx_spec_stats_round(nx_spec_stats *st, int stage, int k_drafted, int n_accepted);
/* One shadow draft (an extra draft the policy asked for and the round did not verify). */
void nx_spec_stats_shadow(nx_spec_stats *st, bool would_pass);
/* Add measured seconds (non-finite or negative values are ignored). */
void nx_spec_stats_add_time(nx_spec_stats *st, double t_draft, double t_verify, double t_other);
/* dst += src */
void nx_spec_stats_merge(nx_spec_stats *dst, const nx_spec_stats *src);

double nx_spec_stats_accept_rate(const nx_spec_stats *st);       /* 0 when nothing drafted */
double nx_spec_stats_mean_accepted(const nx_spec_stats *st);     /* 0 when no drafting round */
double nx_spec_stats_tokens_per_round(const nx_spec_stats *st);  /* 0 when no round */
/* Committed tokens per second of measured time (0 when no time was added). */
double nx_spec_stats_tokens_per_s(const nx_spec_stats *st);
/* a_depth = accepted / reached at depth 1..NX_SPEC_DRAFT_CAP; NAN when never reached. */
double nx_spec_stats_depth_rate(const nx_spec_stats *st, int depth);
/* a[0..k-1] = a_1..a_k for the formulas of policy.h; an unreached depth takes the value of the
 * depth below (0 for depth 1). */
void   nx_spec_stats_depth_rates(const nx_spec_stats *st, double *a, int k);

/* Human summary, a few lines ("drafted 159, accepted 7 (4.4%), ..."). stage_names[s] names chain
 * stage s (NULL array or entry: "stage s"). Returns the length it needed (snprintf style). */
size_t nx_spec_stats_summary(const nx_spec_stats *st, const char *const *stage_names, char *buf, size_t size);
/* The same as a JSON object (caller frees with cJSON_Delete); NULL when out of memory. Keys:
 * rounds, rounds_drafted, drafted, accepted, committed, accept_rate, mean_accepted,
 * tokens_per_round, draft_s, verify_s, other_s, tokens_per_s, by_depth [{depth, drafted, reached,
 * accepted, rate}], rounds_by_k [...], accepted_len [...], stages [{stage, name, rounds, drafted,
 * accepted}]. Arrays stop at their last non-zero entry. */
cJSON *nx_spec_stats_json(const nx_spec_stats *st, const char *const *stage_names);

/* Monotonic clock in seconds (for draft / verify timing). */
double nx_spec_time_now(void);

/* ===== --spec-trace writer ===== */

typedef struct nx_spec_trace nx_spec_trace;

/* Create / truncate `path` ("-": stderr, so a trace never mixes into generated text on stdout). Errors: NX_ERR_IO naming the path. */
nx_status nx_spec_trace_open(const char *path, nx_spec_trace **out, nx_error *err);
/* Write to a stream the caller keeps owning (close flushes but does not fclose it). */
nx_status nx_spec_trace_open_stream(FILE *f, nx_spec_trace **out, nx_error *err);
nx_status nx_spec_trace_draft(nx_spec_trace *tr, nx_seq_id seq, nx_pos pos, int k, const char *src,
                              const nx_token *drafts, const float *p, int n, nx_error *err);
nx_status nx_spec_trace_accept(nx_spec_trace *tr, nx_seq_id seq, nx_pos pos, int n_accepted,
                               const nx_token *ids, int n_ids, nx_error *err);
nx_status nx_spec_trace_stats(nx_spec_trace *tr, const nx_spec_stats *st, const char *const *stage_names,
                              nx_error *err);
/* Flush and close; NX_ERR_IO when any write failed. NULL-safe (NX_OK). */
nx_status nx_spec_trace_close(nx_spec_trace *tr, nx_error *err);

#endif
