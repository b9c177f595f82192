/*
 * assistant.h — the `assistant` drafter over the Gemma 4 assistant draft head
 * (arch/gemma4_assistant.h: the model, its forward over the target's KV, the centroid head).
 */
#ifndef NX_SPEC_ASSISTANT_H
#define NX_SPEC_ASSISTANT_H

#include "arch/gemma4_assistant.h"
#include "spec/drafter.h"

/* ===== The drafter ===== */

/* The `assistant` drafter for sequences 0..n_seq-1 of the target context (borrowed; must
 * outlive the drafter; n_seq <= its n_seq_max). opts NULL = defaults. It keeps, per sequence,
 * only the conditioning hidden (the target's post-norm hidden of the last committed row) and the
 * pending verify rows; draft() runs all requests' steps fused (one forward per step for all
 * sequences, argmax in place), with --draft-p-min per sequence. Errors as nx_assistant_load. */
nx_status nx_assistant_create(nx_ctx *target, const char *path, const nx_assistant_opts *opts, int n_seq,
                              nx_drafter **out, nx_error *err);

/* For tests: the drafter's model (NULL if d is not an assistant drafter). */
nx_assistant *nx_assistant_drafter_model(nx_drafter *d);

#endif
