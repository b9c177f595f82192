/*
 * gemma4_assistant.h — the Gemma 4 assistant draft head (`gemma4-assistant`, also ik's `gemma4_mtp` dialect):
 * a small model that owns no KV cache and drafts by Q-only attention over the target's KV
 * (spec gemma4.md §4-5 and Decisions 1-6; tests/ref/README_gemma4.md points 16-22).
 *
 * One draft step, per row (token t, backbone hidden h, query position p, sequence s):
 *   x0 = pre_projection · concat(target token_embd[t]·sqrt(n_bb), h)    (embedding first, no norm)
 *   per layer: Q = rms(Wq·rms(x, attn_norm), attn_q_norm), roped with the TARGET's settings of the
 *     layer type (rope_freqs on full layers); attention (scale 1) over the target cache of the last
 *     KV-owning target layer of that type, positions [lo, min(p, kv_end-1)] with lo = p-n_swa+1
 *     on SWA layers (a draft query at p0 sees p0-n_swa+1..p0-1: its own position holds no cell);
 *     Wo, post_attention_norm, residual; GELU(tanh) FFN with ffn_norm / post_ffw_norm; optional
 *     layer_output_scale.
 *   hf = rms(x, output_norm); h_next = post_projection · hf; logits = head · hf (soft-capped only if
 *   the assistant GGUF carries final_logit_softcapping).
 *   Token: argmax of the logits, or of the centroid-routed masked head when the assistant has
 *   one (permutation semantics: ordering viewed [n_centroids][n_vocab/n_centroids], row c = the
 *   tokens of centroid c; the top centroid_top_k centroids of centroids·hf give the candidates).
 * Chaining: step 0 = (id_last, target post-norm hidden at p0-1) at p0; step k+1 = (argmax of
 * step k, h_next of step k); position constant p0 (default) or p0+k (increment option).
 *
 * Load-time validation (Decision 1), each a clear error naming the values: drafter arch
 * (`gemma4-assistant` / `gemma4_mtp`), target arch `gemma4`, `requires_target_arch` == gemma4,
 * backbone width == target n_embd, vocab == target vocab, head dims per layer type == target's,
 * q heads a multiple of the source layer's kv heads, window not wider than the target's, every
 * tensor shape, centroid head consistency.
 * Promises: never writes the target's KV or outputs (reads the KV, borrows its thread pool); rows
 * are independent of each other; no allocation per call after creation.
 * Never: print, exit, keep pointers into caller arrays after a call.
 */
#ifndef NX_ARCH_GEMMA4_ASSISTANT_H
#define NX_ARCH_GEMMA4_ASSISTANT_H

#include <stdbool.h>
#include <stdint.h>
#include "nextn.h"
#include "core/error.h"

typedef enum nx_asst_positions {
    NX_ASST_POS_CONSTANT = 0,    /* every draft step at p0 (HF / ik convention; default) */
    NX_ASST_POS_INCREMENT = 1,   /* step k at p0 + k (S000) */
} nx_asst_positions;

typedef struct nx_assistant_opts {
    nx_asst_positions positions;
    bool dense_head;             /* --assistant-dense-head: full-vocab head even with centroids */
} nx_assistant_opts;

nx_assistant_opts nx_assistant_default_opts(void);

/* Parse "constant" / "increment" (--draft-positions). */
nx_status nx_assistant_parse_positions(const char *s, nx_asst_positions *out, nx_error *err);

/* True if the file at path is an assistant drafter (arch gemma4-assistant / gemma4_mtp); false if
 * it is something else or cannot be read. */
bool nx_assistant_file_is_drafter(const char *path);

/* ===== The model ===== */

typedef struct nx_assistant nx_assistant;

/* Load the assistant at path for the target context (borrowed; it must outlive the assistant),
 * with scratch for max_rows rows per forward chunk. Errors: NX_ERR_FORMAT / NX_ERR_UNSUPPORTED
 * with the mismatching values, I/O errors, NX_ERR_NOMEM. */
nx_status nx_assistant_load(nx_ctx *target, const char *path, const nx_assistant_opts *opts, int max_rows,
                            nx_assistant **out, nx_error *err);
void      nx_assistant_free(nx_assistant *a);

bool nx_assistant_masked(const nx_assistant *a);      /* the centroid head is in use */
int  nx_assistant_n_embd(const nx_assistant *a);      /* the assistant's own width */
int  nx_assistant_n_layer(const nx_assistant *a);

/* Centroid head introspection (eval --drafts, tests). n_centroids / top_k are 0 without the masked
 * head in use. centroid_tokens: the token ids of centroid c (row c of the ordering), *n of them;
 * NULL when c is out of range. last_centroid_logits: the centroid logits [n_centroids] (centroids ·
 * hf) of row r of the last forward chunk that chose tokens (next or prob given), valid until the
 * next forward; NULL when that forward computed none or r is outside the chunk. */
int nx_assistant_n_centroids(const nx_assistant *a);
int nx_assistant_centroid_top_k(const nx_assistant *a);
const int32_t *nx_assistant_centroid_tokens(const nx_assistant *a, int c, int *n);
const float *nx_assistant_last_centroid_logits(const nx_assistant *a, int r);

/* One draft step for n rows (any sequences, any n: chunked internally). kv_end[r]: only target
 * cells at positions < kv_end[r] are visible (NULL: the sequence's length in the target KV).
 * h_in [n][n_bb]; outputs (each may be NULL): h_out [n][n_bb] post_projection output, logits
 * [n][n_vocab] dense (soft-capped if the file says so) logits, next [n] the chosen token (masked
 * head when in use, else dense argmax), prob [n] its softmax probability (over the candidates
 * for the masked head). Errors: NX_ERR_INVALID_ARG (token / sequence / position out of range). */
nx_status nx_assistant_forward(nx_assistant *a, int n, const nx_token *tok, const nx_pos *pos, const nx_seq_id *seq,
                               const nx_pos *kv_end, const float *h_in, float *h_out, float *logits, nx_token *next,
                               float *prob, nx_error *err);

/* What the drafter needs of the head: its backbone width (h rows), its positions option, the
 * target context's positions. */
int nx_assistant_n_bb(const nx_assistant *a);
nx_asst_positions nx_assistant_positions(const nx_assistant *a);
int nx_assistant_target_n_ctx(const nx_assistant *a);

#endif
