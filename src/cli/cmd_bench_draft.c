/*
 * cmd_bench_draft.c — `nextn bench-draft`: what a cheaper MTP draft head costs and gives up.
 *
 *   nextn bench-draft -m F.gguf [-f TEXT] [-c 256] [-t N] [--draft-vocab N] [--draft-vocab-file F]
 *                     [--draft-head-type T] [--steps 64]
 *
 * Acceptance: teacher-forced over TEXT in non-overlapping windows of -c tokens (the trunk decodes
 * the window; row q of the MTP head is fed (token q, trunk hidden q-1) as in speculation), the
 * share of rows where the draft head's argmax equals the trunk's argmax at q — the greedy
 * acceptance of a first draft on that text. Printed for the model's full head and for the head the
 * flags ask for, on the same rows.
 * Cost: the median time of one draft step of one sequence (one head row + its LM head), for each
 * head, and the bytes of each LM head.
 * Without -f the text is a built-in Python snippet; a model without an MTP layer is an error.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/args.h"
#include "cli/cli.h"
#include "core/io.h"
#include "kernels/ops.h"
#include "ctx.h"
#include "model.h"
#include "spec/draft_vocab.h"
#include "spec/engine.h"
#include "spec/mtp.h"
#include "tokenizer.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: nextn bench-draft -m F.gguf [-f TEXT] [-c 256] [-t N] [--draft-vocab N] [--draft-vocab-file F]\n"
            "                         [--draft-head-type T] [--steps 64]\n"
            "Greedy first-draft acceptance of the MTP head on TEXT (teacher-forced, windows of -c tokens) and the\n"
            "cost of one draft step, for the model's full LM head and for the draft head the flags ask for.\n");
}

static const char *DEFAULT_TEXT =
    "import os\nimport sys\n\n\ndef main(argv=None):\n    \"\"\"Print the size of every file below a folder.\"\"\"\n"
    "    if argv is None:\n        argv = sys.argv[1:]\n    total = 0\n    for root, dirs, files in os.walk(argv[0]):\n"
    "        for name in files:\n            path = os.path.join(root, name)\n            try:\n"
    "                size = os.path.getsize(path)\n            except OSError:\n                continue\n"
    "            total += size\n            print(f\"{size:>12} {path}\")\n    print(f\"{total:>12} total\")\n"
    "    return 0\n\n\nif __name__ == \"__main__\":\n    sys.exit(main())\n";

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct head_run {
    nx_mtp_head *h;
    long agree, rows;
    double step_s;
} head_run;

/* Rows [0, n) of a decoded window through head h: agreement with the trunk's argmax. */
static nx_status window_through(head_run *r, const nx_token *tok, const float *hid_prev, const int *trunk_am, int n,
                                int E, nx_error *err) {
    const int cap = nx_mtp_head_max_rows(r->h);
    nx_pos pos[512];
    nx_seq_id seq[512];
    int am[512];
    float ap[512];
    nx_mtp_head_seq_trim(r->h, 0, 0);
    for (int r0 = 0; r0 < n; r0 += cap) {
        const int c = n - r0 < cap ? n - r0 : cap;
        for (int i = 0; i < c; i++) { pos[i] = r0 + i; seq[i] = 0; }
        nx_status st = nx_mtp_head_draft_rows(r->h, c, tok + r0, pos, seq, hid_prev + (size_t)r0 * E, NULL, am, ap, err);
        if (st != NX_OK) return st;
        for (int i = 0; i < c; i++) r->agree += am[i] == trunk_am[r0 + i];
        r->rows += c;
    }
    return NX_OK;
}

/* Median of `steps` single-row draft steps at position p (the row is dropped after each). */
static nx_status step_cost(head_run *r, nx_token t, int p, const float *h, int steps, nx_error *err) {
    double *ts = malloc((size_t)steps * sizeof *ts);
    if (!ts) return nx_fail(err, NX_ERR_NOMEM, "out of memory");
    nx_seq_id s = 0;
    int am;
    float ap;
    nx_status st = NX_OK;
    for (int i = 0; i < steps && st == NX_OK; i++) {
        nx_mtp_head_seq_trim(r->h, 0, p);
        double t0 = nx_cli_now();
        st = nx_mtp_head_draft_rows(r->h, 1, &t, &p, &s, h, NULL, &am, &ap, err);
        ts[i] = nx_cli_now() - t0;
    }
    if (st == NX_OK) {
        qsort(ts, (size_t)steps, sizeof *ts, cmp_d);
        r->step_s = ts[steps / 2];
    }
    free(ts);
    return st;
}

int nx_cmd_bench_draft(int argc, char **argv) {
    const char *model = NULL, *file = NULL;
    int n_win = 256, n_threads = 0, steps = 64;
    nx_spec_params sp = nx_spec_params_default();
    nx_error err = {0};
    for (int i = 1; i < argc;) {
        bool used = false;
        if (nx_spec_params_parse_arg(&sp, argc, argv, &i, &used, &err) != NX_OK) {
            fprintf(stderr, "nextn bench-draft: %s\n", err.msg);
            return 2;
        }
        if (used) continue;
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        if (!v) { fprintf(stderr, "nextn bench-draft: %s: unknown flag or missing value\n", a); usage(stderr); return 2; }
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) model = v;
        else if (!strcmp(a, "-f") || !strcmp(a, "--file")) file = v;
        else if (!strcmp(a, "-c")) n_win = atoi(v);
        else if (!strcmp(a, "-t")) n_threads = atoi(v);
        else if (!strcmp(a, "--steps")) steps = atoi(v);
        else { fprintf(stderr, "nextn bench-draft: unknown flag %s\n", a); usage(stderr); return 2; }
        i += 2;
    }
    if (!model || n_win < 2 || n_win > 512 || steps < 1 || n_threads < 0) { usage(stderr); return 2; }

    int rc = 1;
    nx_model *m = NULL;
    nx_tokenizer *tok = NULL;
    nx_ctx *ctx = NULL;
    nx_batch *b = NULL;
    char *text = NULL;
    size_t len = 0;
    nx_token_vec ids = {0};
    head_run full = {0}, cheap = {0};
    int32_t *sub = NULL;
    float *hid = NULL;
    int *tam = NULL;
    nx_model_params mp = nx_model_default_params();
    mp.n_threads = n_threads;
    if (nx_model_load(model, &mp, &m) != NX_OK) { fprintf(stderr, "nextn bench-draft: %s\n", nx_last_error()); goto done; }
    if (!nx_mtp_supported(m)) { nx_mtp_unsupported_error(m, &err); fprintf(stderr, "nextn bench-draft: %s\n", err.msg); goto done; }
    if (nx_tokenizer_from_gguf(m->gguf, &tok, &err) != NX_OK) { fprintf(stderr, "nextn bench-draft: %s\n", err.msg); goto done; }
    if (file && nx_read_file(file, (size_t)1 << 28, &text, &len, &err) != NX_OK) {
        fprintf(stderr, "nextn bench-draft: %s\n", err.msg);
        goto done;
    }
    const char *src = text ? text : DEFAULT_TEXT;
    if (nx_tokenize(tok, src, text ? len : strlen(src), 0, &ids, &err) != NX_OK || ids.n < 2) {
        fprintf(stderr, "nextn bench-draft: text: %s\n", ids.n < 2 ? "fewer than 2 tokens" : err.msg);
        goto done;
    }
    nx_ctx_params cp = nx_ctx_default_params();
    cp.n_ctx = n_win;
    cp.n_ubatch = n_win;
    cp.n_threads = n_threads;
    if (nx_ctx_create(m, &cp, &ctx) != NX_OK) { fprintf(stderr, "nextn bench-draft: %s\n", nx_last_error()); goto done; }
    const int V = nx_model_n_vocab(m), E = nx_model_n_embd(m);
    nx_mtp_head_opts o = {.requant = sp.draft_head_requant, .head_type = sp.draft_head_type};
    if (nx_draft_vocab_build(m->gguf, V, sp.draft_vocab, sp.draft_vocab_file, &sub, &o.n_vocab, &err) != NX_OK) {
        fprintf(stderr, "nextn bench-draft: %s\n", err.msg);
        goto done;
    }
    o.vocab = sub;
    if (nx_mtp_head_create(ctx, &full.h, &err) != NX_OK || nx_mtp_head_create_opts(ctx, &o, &cheap.h, &err) != NX_OK) {
        fprintf(stderr, "nextn bench-draft: %s\n", err.msg);
        goto done;
    }
    b = nx_batch_create(n_win);
    hid = calloc((size_t)n_win * E, sizeof *hid);
    tam = malloc((size_t)n_win * sizeof *tam);
    if (!b || !hid || !tam) { fprintf(stderr, "nextn bench-draft: out of memory\n"); goto done; }
    for (size_t w0 = 0; w0 + 1 < ids.n; w0 += (size_t)n_win) {
        const int n = (int)(ids.n - w0 < (size_t)n_win ? ids.n - w0 : (size_t)n_win);
        nx_batch_clear(b);
        for (int i = 0; i < n; i++) nx_batch_add(b, ids.ids[w0 + i], i, 0, true);
        if (nx_decode(ctx, b) != NX_OK) { fprintf(stderr, "nextn bench-draft: decode: %s\n", nx_last_error()); goto done; }
        memset(hid, 0, (size_t)E * sizeof *hid);   /* row 0 is fed zeros */
        for (int i = 0; i < n; i++) {
            tam[i] = nx_argmax(nx_ctx_logits(ctx, i), V);
            if (i + 1 < n) memcpy(hid + (size_t)(i + 1) * E, nx_ctx_hidden(ctx, i), (size_t)E * sizeof *hid);
        }
        /* the last row drafts a token the window cannot check: drop it */
        if (window_through(&full, ids.ids + w0, hid, tam, n - 1, E, &err) != NX_OK ||
            window_through(&cheap, ids.ids + w0, hid, tam, n - 1, E, &err) != NX_OK) {
            fprintf(stderr, "nextn bench-draft: %s\n", err.msg);
            goto done;
        }
        nx_seq_rm(ctx, 0, -1, -1);
    }
    const int p = (int)(ids.n < (size_t)n_win ? ids.n : (size_t)n_win) / 2;
    for (int rep = 0; rep < 2; rep++)   /* alternate: both heads see the same machine state */
        if (step_cost(&full, ids.ids[p], p, hid + (size_t)p * E, steps, &err) != NX_OK ||
            step_cost(&cheap, ids.ids[p], p, hid + (size_t)p * E, steps, &err) != NX_OK) {
            fprintf(stderr, "nextn bench-draft: %s\n", err.msg);
            goto done;
        }
    char what[96];
    snprintf(what, sizeof what, "%lld of %d tokens, %s", (long long)nx_mtp_head_draft_vocab(cheap.h), V,
             nx_type_name(nx_mtp_head_draft_type(cheap.h)));
    printf("text: %s, %zu tokens in windows of %d; %d threads\n", file ? file : "(built-in)", ids.n, n_win,
           nx_threadpool_size(ctx->tp));
    printf("| draft head | LM head MiB | step ms | first-draft acceptance |\n| --- | ---: | ---: | ---: |\n");
    printf("| full (%d tokens, %s) | %.2f | %.4f | %.4f (%ld / %ld) |\n", V, nx_type_name(nx_mtp_head_draft_type(full.h)),
           nx_mtp_head_draft_bytes(full.h) / 1048576.0, full.step_s * 1e3, full.rows ? (double)full.agree / full.rows : 0,
           full.agree, full.rows);
    printf("| %s | %.2f | %.4f | %.4f (%ld / %ld) |\n", what, nx_mtp_head_draft_bytes(cheap.h) / 1048576.0,
           cheap.step_s * 1e3, cheap.rows ? (double)cheap.agree / cheap.rows : 0, cheap.agree, cheap.rows);
    printf("acceptance change %+.2f points; step cost x%.3f\n",
           100.0 * ((cheap.rows ? (double)cheap.agree / cheap.rows : 0) - (full.rows ? (double)full.agree / full.rows : 0)),
           full.step_s > 0 ? cheap.step_s / full.step_s : 0);
    rc = 0;
done:
    nx_mtp_head_free(full.h);
    nx_mtp_head_free(cheap.h);
    nx_batch_free(b);
    free(hid);
    free(tam);
    free(sub);
    free(text);
    nx_token_vec_free(&ids);
    nx_ctx_free(ctx);
    nx_tokenizer_free(tok);
    nx_model_free(m);
    return rc;
}
