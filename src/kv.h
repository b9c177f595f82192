/*
 * kv.h — per-sequence model state: the attention KV cache and the recurrent (conv + SSM) state.
 *
 * Attention: for every sequence and every attention layer a row of K (k_width values) and of V
 * (v_width values) per position 0..n_ctx-1, stored F32, F16 / BF16 (rounded to nearest even),
 * or in ggml's Q8_0 / Q4_0 blocks (32 values per 34 / 18-byte block, quantized by the
 * repository's reference quantizers, src/quant: a row is k_width / 32 blocks, so k_width and
 * v_width must be multiples of 32). A row takes nx_kv_row_bytes() bytes. A sequence holds the
 * positions [0, len); a decode appends at len (or restarts at 0).
 * Sliding-window layers may instead keep a ring of `cells` rows (slot = pos mod cells), so their
 * memory does not grow with the context: a query at p sees the window positions p-window+1..p,
 * which the ring holds as long as cells >= window - 1 + (rows of one sequence per forward
 * chunk). The ring remembers which position each cell holds, so removing a tail is refused
 * (nothing changed) when the window before the new end has already been overwritten.
 * Recurrent: for every sequence and recurrent layer a conv state and an SSM state (F32, layout
 * owned by the architecture). A decode marked "snapshot" keeps the state after every token of
 * a sequence: token t of the batch (t = pos - pos0) writes slot t, the last token writes the
 * live state; so restoring "the first j tokens" makes slot j-1 live (a buffer swap, not a
 * copy; nothing for j = n). Slots are zero-filled at reserve, so their pages are faulted in then.
 *
 * Promises: memory is allocated at creation (calloc: pages are touched only when used), except
 * snapshot slots, which grow on nx_kv_snap_reserve() only. seq_rm / seq_cp never leave a
 * sequence half-changed: a request that cannot be honoured (a hole in the middle, a recurrent
 * state that cannot be rewound to the asked position) fails with a message and changes nothing.
 * Must never: allocate in the per-token path, or let one sequence's calls touch another's rows.
 */
#ifndef NX_KV_H
#define NX_KV_H

#include <stdbool.h>
#include <stdint.h>
#include "core/error.h"
#include "tensor.h"

typedef struct nx_kv nx_kv;

typedef struct nx_kv_config {
    int n_seq;                  /* sequences (ids 0..n_seq-1) */
    int n_ctx;                  /* positions per sequence */
    nx_type type_k, type_v;     /* NX_TYPE_F32, F16, BF16, Q8_0 or Q4_0 (nx_kv_type_ok) */
    int n_attn;                 /* attention layers owning KV rows */
    const int64_t *k_width;     /* values per position, per attention layer */
    const int64_t *v_width;
    int n_rec;                  /* recurrent layers */
    const int64_t *conv_size;   /* floats per sequence, per recurrent layer */
    const int64_t *ssm_size;
    /* Optional (NULL: every attention layer keeps n_ctx rows). Per attention layer: 0 = n_ctx
     * rows, else a ring of ring_cells[l] rows for a sliding-window layer whose queries see the
     * last window[l] positions (self included); a ring as large as n_ctx is a plain cache. */
    const int *ring_cells;
    const int *window;
    /* Optional deferred SSM updates (NULL: snapshot slots hold whole states). log_size: per
     * recurrent layer, floats per token of the architecture's replay log; apply: see "deferred
     * SSM" below. */
    const int64_t *log_size;
    void (*apply)(void *user, const nx_kv *kv, int seq, float *rec, int n);
    void *apply_user;
    /* Optional (NULL: 1 each). Per attention layer: heads a row holds (k_width and v_width
     * split evenly). Each head's rows are stored as their own plane (nx_kv_head), so attention
     * over one head streams contiguous memory instead of every other part of a line. */
    const int *heads;
} nx_kv_config;

/* Cache types a KV cache can store. */
bool nx_kv_type_ok(nx_type t);
/* Values per block of a cache type (32 for Q8_0 / Q4_0, else 1): row widths and the per-head
 * slices kernels read must be multiples of it. */
int nx_kv_type_block(nx_type t);
/* Bytes of n values of cache type t (n a multiple of nx_kv_type_block(t)): the byte offset of
 * value n inside a row, e.g. of a head's slice. */
size_t nx_kv_type_bytes(nx_type t, int64_t n);
/* n values (a multiple of the block) of cache type t at src as floats: src itself for F32,
 * else dequantized into tmp (bit-exact with ggml's dequantizers). */
const float *nx_kv_to_f32(nx_type t, const void *src, int64_t n, float *tmp);

nx_status nx_kv_create(const nx_kv_config *cfg, nx_kv **out, nx_error *err);
void nx_kv_free(nx_kv *kv);

int     nx_kv_n_seq(const nx_kv *kv);
int     nx_kv_n_ctx(const nx_kv *kv);
int     nx_kv_n_rec(const nx_kv *kv);
nx_type nx_kv_type_k(const nx_kv *kv);
nx_type nx_kv_type_v(const nx_kv *kv);
/* Bytes of attention KV + recurrent state allocated for all sequences (no snapshots). */
size_t  nx_kv_bytes(const nx_kv *kv);
/* Per sequence: bytes one more position of context costs (K + V rows of every attention layer
 * that keeps n_ctx rows), and bytes that do not grow with the context (sliding-window rings,
 * recurrent state). nx_kv_bytes = n_seq * (n_ctx * per_pos + fixed). */
size_t  nx_kv_bytes_per_pos(const nx_kv *kv);
size_t  nx_kv_bytes_fixed(const nx_kv *kv);
/* Bytes of one K (v = false) or V (v = true) row (every head) of an attention layer. */
size_t  nx_kv_row_bytes(const nx_kv *kv, int layer, bool v);

/* ---- attention rows (callers pass valid seq / layer / pos: no checks in the hot path) ---- */

/* Store a K / V row (k_width / v_width floats), converting to the cache type. */
void nx_kv_put_k(nx_kv *kv, int seq, int layer, int pos, const float *src);
void nx_kv_put_v(nx_kv *kv, int seq, int layer, int pos, const float *src);
/* A K / V row as floats: a pointer into the cache for F32, else converted into tmp. */
const float *nx_kv_get_k(const nx_kv *kv, int seq, int layer, int pos, float *tmp);
const float *nx_kv_get_v(const nx_kv *kv, int seq, int layer, int pos, float *tmp);

/* Rows of a layer's K / V block: n_ctx, or the ring size of a sliding-window layer. Position
 * pos lives in row nx_kv_slot(kv, layer, pos) = pos mod cells. */
int nx_kv_cells(const nx_kv *kv, int layer);
static inline int nx_kv_slot_of(int cells, int pos) { return pos < cells ? pos : pos % cells; }
int nx_kv_slot(const nx_kv *kv, int layer, int pos);

/* Raw row 0 of a sequence's K / V block, for kernels that read many positions. With one head
 * per row (the default) rows follow every nx_kv_row_bytes() bytes, in the cache type; position
 * pos is row nx_kv_slot(pos). With more, use nx_kv_head. */
const void *nx_kv_k_base(const nx_kv *kv, int seq, int layer);
const void *nx_kv_v_base(const nx_kv *kv, int seq, int layer);
/* Heads per row of a layer (nx_kv_config.heads), and row 0 of head h's plane of K (v false) or
 * V: its rows follow every nx_kv_row_bytes() / heads bytes (position pos at row nx_kv_slot). */
int nx_kv_heads(const nx_kv *kv, int layer);
const void *nx_kv_head(const nx_kv *kv, int seq, int layer, int h, bool v);

/* Positions held by a sequence ([0, len)); set by the decoder after a step. */
int  nx_kv_seq_len(const nx_kv *kv, int seq);
void nx_kv_seq_set_len(nx_kv *kv, int seq, int len);

/* ---- recurrent state ---- */

/* Live state (slot < 0) or snapshot slot `slot` of a sequence's recurrent layer rl. The pointer
 * is valid until the next sequence operation (a rewind swaps the live and slot buffers).
 * Deferred: nx_kv_ssm has no slots (NULL) and the live SSM lacks the pending tokens. */
float *nx_kv_conv(nx_kv *kv, int seq, int rl, int slot);
float *nx_kv_ssm(nx_kv *kv, int seq, int rl, int slot);

/* Make room for n_slots snapshot slots of a sequence (grows only; NX_ERR_NOMEM on failure);
 * deferred: conv-only slots and logs for n_slots + 1 tokens. */
nx_status nx_kv_snap_reserve(nx_kv *kv, int seq, int n_slots, nx_error *err);
/* Record that the batch just started holds snapshots for tokens at pos0..pos0+n-1 of seq
 * (n = 0: none; any later decode of the sequence must call this again). */
void nx_kv_snap_set(nx_kv *kv, int seq, int pos0, int n);

/* ---- deferred SSM (configs with log_size) ----
 * A snapshot batch of n > 1 tokens leaves the live SSM state as it was before the batch and
 * logs each token's inputs instead (nx_kv_log_next, written by the architecture); the conv
 * state and its slots behave as above (slots then hold conv states only). After the batch n
 * logged tokens are pending; rewinding to "the first j tokens" makes j pending, with no copy.
 * The next forward of the sequence replays the pending tokens onto the state it reads anyway
 * (writing it back once), so a verify batch costs one state read + write like one token, and
 * a rewind costs nothing. Readers of the whole state outside a forward (rec_save, seq_cp) get
 * it with the pending tokens applied through cfg->apply(user, kv, seq, rec, n), which must
 * apply the first n tokens of nx_kv_log_prev to the SSM parts of rec (live layout) in place. */
bool   nx_kv_deferred(const nx_kv *kv);
/* Float offset of recurrent layer rl's SSM state in the live layout (nx_kv_rec_save's). */
int64_t nx_kv_ssm_offset(const nx_kv *kv, int rl);
/* Tokens of seq's last snapshot batch applied to nothing yet (0 when none). */
int    nx_kv_pending(const nx_kv *kv, int seq);
/* Log entry t (nx_kv_config.log_size[rl] floats) of recurrent layer rl: of the last snapshot
 * batch (prev; t < pending), or of the batch being decoded (next; t < its tokens). */
const float *nx_kv_log_prev(const nx_kv *kv, int seq, int rl, int t);
float       *nx_kv_log_next(nx_kv *kv, int seq, int rl, int t);
/* After a decode of seq: n > 1 tokens were a snapshot batch (they become pending, the next
 * log becomes prev), else the forward applied everything (nothing pending). */
void   nx_kv_log_commit(nx_kv *kv, int seq, int n);

/* ---- sequence operations ---- */

/* Empty a sequence: len 0, recurrent state zeroed, snapshots forgotten. */
void nx_kv_seq_reset(nx_kv *kv, int seq);

/* Remove positions [p0, p1) (p0 < 0: 0; p1 < 0: to the end). Removing everything resets the
 * sequence. Otherwise only a tail can go (p1 >= len), with recurrent layers only back to a
 * position whose state a snapshot holds (p0 - 1 in the last snapshot batch), and with ring
 * layers only while the rings still hold the window before p0. Errors: NX_ERR_INVALID_ARG
 * (bad seq), NX_ERR_UNSUPPORTED (a hole, no snapshot for p0, window overwritten). */
nx_status nx_kv_seq_rm(nx_kv *kv, int seq, int p0, int p1, nx_error *err);

/* ---- checkpoints of the recurrent state (prefix reuse) ---- */

/* Floats of one sequence's recurrent state, every layer (0 without recurrent layers). */
int64_t   nx_kv_rec_floats(const nx_kv *kv);
/* Copy seq's live recurrent state (nx_kv_rec_floats floats) into dst: taken right after position
 * p-1 was decoded, it is the state "after the first p positions". */
void      nx_kv_rec_save(const nx_kv *kv, int seq, float *dst);
/* Cut seq back to its first len positions (len <= positions held) and make `rec` (a copy from
 * nx_kv_rec_save taken after the first len positions) the live recurrent state. rec may be NULL
 * when len == positions held (the live state stays) or without recurrent layers. len 0 resets
 * the sequence. Snapshots are dropped. Errors (nothing changed): NX_ERR_INVALID_ARG (bad seq or
 * len, rec missing), NX_ERR_UNSUPPORTED (a ring layer no longer holds the window before len). */
nx_status nx_kv_seq_restore(nx_kv *kv, int seq, int len, const float *rec, nx_error *err);

/* Make dst a copy of the first n positions of src, n = p1 (p1 < 0 or p1 > len(src): len(src));
 * p0 must be <= 0 (prefix copies only). With recurrent layers the state after position n-1
 * must be live or in a snapshot; with ring layers the rings must hold the window before n.
 * dst's snapshots are dropped. */
nx_status nx_kv_seq_cp(nx_kv *kv, int src, int dst, int p0, int p1, nx_error *err);

#endif
