/*
 * spec_params.h — the speculative-decoding command-line options, parsed and checked in one place
 * so that `run`, `bench`, `eval` and the server accept exactly the same flags.
 *
 *   --spec-type LIST         comma-separated drafters, tried in order: mtp, assistant, draft,
 *                            ngram (e.g. "ngram,mtp"), none, or auto (the engine picks: with
 *                            --draft-model assistant or draft by the file, else mtp when the model
 *                            has a NextN layer, else none; the CLI's default). Unknown names fail with the list of known ones.
 *   --draft-max N            largest draft length (default 8; 1..NX_SPEC_DRAFT_CAP)
 *   --draft-min N            smallest draft length when drafting (default 0)
 *   --draft-p-min P          stop drafting when the drafter's top probability < P (default 0 = off)
 *   --draft-adaptive on|off  adaptive k (speculative.md §5, default on); off = fixed k = draft-max
 *   --ngram-max N            longest n-gram the ngram drafter matches (default 4; 1..16)
 *   --ngram-min N            shortest (default 1)
 *   --draft-model F          drafter GGUF for `assistant` / `draft` (aliases -md, --model-draft,
 *                            --mtp-head); with auto, an assistant GGUF means assistant, any other
 *                            model means draft
 *   --draft-sample on|off    sampled drafts at temperature > 0 (default off: greedy drafts)
 *   -cd, --ctx-size-draft N  the draft model's context (0: the target's)
 *   -td, --threads-draft N   the draft model's threads (0: the target's)
 *   -ctkd / -ctvd TYPE       the draft model's KV cache types (f16 default, f32, bf16, q8_0, q4_0)
 *   aliases (llama.cpp and its forks): --draft / --draft-n N (= --draft-max), --draft-block-size B
 *                            (= --draft-max B-1), --spec-type draft-mtp (= mtp) / draft-assistant
 *                            (= assistant), -mtp (= --spec-type mtp), -no-mtp (= none),
 *                            --mtp-adaptive (adaptive k with the wall-clock guard)
 *   --draft-positions constant|increment   assistant draft positions (default constant)
 *   --assistant-dense-head   the assistant scores with its dense head even when it has centroids
 *   --spec-trace FILE        NDJSON trace (env NEXTN_SPEC_TRACE when the flag is absent)
 *   --draft-vocab N          MTP draft head over the N most frequent tokens (draft_vocab.h; default
 *                            32768 when the vocabulary is larger, 0 = the whole vocabulary)
 *   --draft-vocab-file F     calibration text for those frequencies (default: BPE rank order)
 *   --draft-head-type T      MTP draft head requantized to T (e.g. q4_0; default: as stored)
 *   --spec-fallback          a drafter the model cannot support (mtp without an MTP layer) is a
 *                            warning and plain decoding instead of an error
 * Both "--flag VALUE" and "--flag=VALUE" are accepted.
 * Promises: strings point into argv (nothing is allocated); errors name the flag and the value.
 */
#ifndef NX_SPEC_PARAMS_H
#define NX_SPEC_PARAMS_H

#include <stdbool.h>
#include "core/error.h"
#include "tensor.h"
#include "spec/assistant.h"
#include "spec/drafter.h"
#include "spec/ngram.h"
#include "spec/policy.h"

typedef enum nx_spec_type {
    NX_SPEC_NONE = 0,
    NX_SPEC_MTP,                 /* NextN head inside the target GGUF */
    NX_SPEC_ASSISTANT,           /* Gemma 4 assistant (--draft-model) */
    NX_SPEC_DRAFT,               /* separate draft model (--draft-model) */
    NX_SPEC_NGRAM,               /* prompt / history lookup */
    NX_SPEC_TYPE_COUNT
} nx_spec_type;

typedef struct nx_spec_params {
    nx_spec_type types[NX_SPEC_MAX_STAGES];  /* chain order; n_types = 0: speculation off */
    int   n_types;
    int   draft_max, draft_min;
    float p_min;
    bool  adaptive;
    int   ngram_max, ngram_min;
    const char *draft_model;     /* NULL unless given */
    nx_asst_positions draft_positions;   /* assistant: constant (default) or increment */
    bool  assistant_dense_head;  /* assistant: dense head even with a centroid head */
    const char *trace_path;      /* NULL unless given (see nx_spec_params_trace_path) */
    bool  fallback;
    bool  auto_type;             /* n_types 0 + auto: the engine picks (mtp when the model has a NextN
                                    layer, assistant when draft_model is given, else none) */
    int   draft_vocab;           /* MTP draft head over the N most frequent tokens (-1: default, see
                                    draft_vocab.h; 0: the whole vocabulary) */
    const char *draft_vocab_file;/* calibration text for the token frequencies (NULL: rank order) */
    bool  draft_head_requant;    /* MTP draft head requantized to draft_head_type */
    nx_type draft_head_type;
    /* the `draft` drafter's own context (draft_model.h) */
    int   draft_n_ctx;           /* -cd: positions (0: the target context's) */
    int   draft_threads;         /* -td: threads (0: the target's) */
    nx_cache_type draft_type_k, draft_type_v;   /* -ctkd / -ctvd: F16 (default), F32, BF16, Q8_0, Q4_0 */
    bool  sample_drafts;         /* --draft-sample on: at temperature > 0 the model drafters (draft,
                                    mtp, assistant) draw their drafts from their own distribution after
                                    the request's chain; verified with q (exact rule). Default off */
    bool  guard;                 /* the wall-clock guard of the adaptive policy (default on;
                                    --mtp-adaptive turns adaptive mode and the guard on) */
} nx_spec_params;

/* Speculation off, the defaults listed above. */
nx_spec_params nx_spec_params_default(void);

/* "mtp" for NX_SPEC_MTP, ...; "?" for a bad value. */
const char *nx_spec_type_name(nx_spec_type t);
/* "mtp, assistant, draft, ngram, none" */
const char *nx_spec_type_list(void);
/* One name. Error: "unknown speculative type 'x' (known: mtp, assistant, draft, ngram, none)". */
nx_status nx_spec_type_parse(const char *name, nx_spec_type *out, nx_error *err);
/* A comma-separated list into out[0..*n-1] ("none" alone gives *n = 0). Errors: unknown names
 * (listing the known ones), empty entries, repeats, "none" mixed with others, more than cap. */
nx_status nx_spec_types_parse(const char *list, nx_spec_type *out, int cap, int *n, nx_error *err);

/* If argv[*i] is one of the flags above, parse it (and its value), advance *i past what it used
 * and set *consumed; otherwise leave *i alone and clear *consumed. Errors: missing or bad value. */
nx_status nx_spec_params_parse_arg(nx_spec_params *p, int argc, char **argv, int *i, bool *consumed, nx_error *err);
/* Cross-checks: draft_min <= draft_max, ngram_min <= ngram_max, assistant / draft need
 * --draft-model. */
nx_status nx_spec_params_validate(const nx_spec_params *p, nx_error *err);

bool nx_spec_params_has(const nx_spec_params *p, nx_spec_type t);
/* The trace file: --spec-trace, else $NEXTN_SPEC_TRACE (non-empty), else NULL. */
const char *nx_spec_params_trace_path(const nx_spec_params *p);
/* The policy / n-gram parameters these options imply (the policy's other fields at defaults). */
nx_spec_policy_params nx_spec_params_policy(const nx_spec_params *p);
nx_ngram_params       nx_spec_params_ngram(const nx_spec_params *p);
/* "ngram,mtp draft-max 8 draft-min 0 p-min 0 adaptive on" (or "off"); snprintf-style length. */
size_t nx_spec_params_describe(const nx_spec_params *p, char *buf, size_t size);
/* Help text for the flags, one per line, ending in '\n'. */
const char *nx_spec_params_usage(void);

#endif
