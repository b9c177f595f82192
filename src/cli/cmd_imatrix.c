/*
 * cmd_imatrix.c — `nextn imatrix`: llama-imatrix's importance matrix, with the MTP layer.
 *
 *   nextn imatrix -m F.gguf -f TEXT [-o imatrix.gguf] [--output-format gguf|dat] [-c 512] [--chunks N]
 *                 [--chunk N] [--in-file F]... [--process-output] [--no-mtp-warmup] [-t N]
 * (--chunk N skips the first N chunks; --in-file adds earlier imatrix files, GGUF or .dat, to the sums.)
 *
 * As llama-imatrix: the text is cut into chunks of -c tokens (BOS first when the vocabulary adds
 * one), each decoded from an empty context; every matmul whose weight is a `blk.*` tensor (and
 * output.weight with --process-output) adds the squares of its activation rows per input column
 * (dense products of fewer than 16 rows are skipped, as llama.cpp; MoE experts count per expert).
 * MTP warmup (ik_llama.cpp's idea, on by default for a model with an MTP layer): the trunk never
 * runs the NextN layer, so each chunk is also fed through the MTP head teacher-forced (row q =
 * token q with the trunk's hidden q-1), and its matmuls (eh_proj, attention, FFN) are collected
 * too, its LM matrix included (an entry when it is the layer's own nextn.shared_head_head).
 * The running perplexity of the second half of each chunk is printed as llama-imatrix does.
 * Output: GGUF (default) or the legacy .dat (-o *.dat or --output-format dat); imatrix.h.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/args.h"
#include "cli/cli.h"
#include "core/io.h"
#include "ctx.h"
#include "gguf.h"
#include "imatrix.h"
#include "model.h"
#include "spec/mtp.h"
#include "tokenizer.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: nextn imatrix -m F.gguf -f TEXT [-o imatrix.gguf] [--output-format gguf|dat] [-c 512] [--chunks N]\n"
            "                     [--chunk N] [--in-file F]... [--process-output] [--no-mtp-warmup] [-t N]\n"
            "Sums of squared activations per input column of every blk.* matmul over TEXT (llama-imatrix's\n"
            "importance matrix), the MTP layer's included (its head runs over every chunk, teacher-forced).\n");
}

typedef struct collector {
    nx_imatrix *im;
    const nx_gguf *g;
    bool process_output;
    nx_status st;
    nx_error err;
    long skipped_small;
} collector;

static void observe(void *user, const nx_tensor *w, const float *x, int64_t n_rows, int64_t ldx) {
    collector *c = user;
    if (c->st != NX_OK || !w->name) return;
    if (strncmp(w->name, "blk.", 4) && !(c->process_output && !strcmp(w->name, "output.weight"))) return;
    const int64_t gi = nx_gguf_find_tensor(c->g, w->name);
    const nx_tensor *base = gi >= 0 ? nx_gguf_tensor(c->g, gi) : NULL;
    int64_t n_mat = 1, m = 0;
    if (base && base->n_dims >= 3 && base->ne[2] > 1) {
        /* an expert's view of a 3-D tensor: which expert is where its data starts */
        const char *p = w->data, *b0 = base->data;
        if (p < b0 || p >= b0 + base->nbytes) return;
        n_mat = base->ne[2];
        m = (int64_t)((size_t)(p - b0) / base->nb[2]);
    } else if (n_rows < 16) {
        c->skipped_small++;
        return;
    }
    c->st = nx_imatrix_add(c->im, w->name, w->ne[0], n_mat, m, x, n_rows, ldx, &c->err);
}

int nx_cmd_imatrix(int argc, char **argv) {
    const char *model = NULL, *file = NULL, *out = "imatrix.gguf", *fmt = NULL;
    int n_ctx = 512, n_chunks_max = -1, n_threads = 0, skip_chunks = 0, n_in = 0;
    const char *in_files[32];
    bool process_output = false, warmup = true;
    for (int i = 1; i < argc;) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        if (!strcmp(a, "--process-output")) { process_output = true; i++; continue; }
        if (!strcmp(a, "--no-mtp-warmup")) { warmup = false; i++; continue; }
        if (!v) { fprintf(stderr, "nextn imatrix: %s: unknown flag or missing value\n", a); usage(stderr); return 2; }
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) model = v;
        else if (!strcmp(a, "-f") || !strcmp(a, "--file")) file = v;
        else if (!strcmp(a, "-o") || !strcmp(a, "--output-file")) out = v;
        else if (!strcmp(a, "--output-format")) fmt = v;
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) n_ctx = atoi(v);
        else if (!strcmp(a, "--chunks")) n_chunks_max = atoi(v);
        else if (!strcmp(a, "--chunk")) skip_chunks = atoi(v);
        else if (!strcmp(a, "--in-file") && n_in < 32) in_files[n_in++] = v;
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) n_threads = atoi(v);
        else { fprintf(stderr, "nextn imatrix: unknown flag %s\n", a); usage(stderr); return 2; }
        i += 2;
    }
    if (!model || !file || skip_chunks < 0 || n_ctx < 16 || n_ctx > 1 << 16 || n_threads < 0 || (fmt && strcmp(fmt, "gguf") && strcmp(fmt, "dat"))) {
        usage(stderr);
        return 2;
    }
    const size_t ol = strlen(out);
    const bool legacy = fmt ? !strcmp(fmt, "dat") : ol > 4 && !strcmp(out + ol - 4, ".dat");

    int rc = 1;
    nx_error err = {0};
    nx_model *m = NULL;
    nx_tokenizer *tok = NULL;
    nx_ctx *ctx = NULL;
    nx_batch *b = NULL;
    nx_mtp_head *head = NULL;
    char *text = NULL;
    size_t len = 0;
    nx_token_vec ids = {0};
    float *hid = NULL;
    nx_token *htok = NULL;
    nx_pos *hpos = NULL;
    nx_seq_id *hseq = NULL;
    int *am = NULL;
    float *ap = NULL;
    collector col = {.im = nx_imatrix_create(), .process_output = process_output};
    nx_model_params mp = nx_model_default_params();
    mp.n_threads = n_threads;
    if (!col.im) { fprintf(stderr, "nextn imatrix: out of memory\n"); goto done; }
    int chunks_in = 0;
    for (int k = 0; k < n_in; k++) {   /* earlier files: their sums and counts continue */
        nx_imatrix *prev = NULL;
        if (nx_imatrix_load(in_files[k], n_ctx, &prev, &err) != NX_OK) { fprintf(stderr, "nextn imatrix: %s\n", err.msg); goto done; }
        for (int64_t i = 0; i < nx_imatrix_n_entries(prev) && err.code == NX_OK; i++) {
            const nx_imatrix_entry *e = nx_imatrix_entry_at(prev, i);
            if (nx_imatrix_merge_entry(col.im, e, &err) != NX_OK) break;
        }
        for (int64_t i = 0; i < nx_imatrix_n_datasets(prev) && err.code == NX_OK; i++)
            nx_imatrix_add_dataset(col.im, nx_imatrix_dataset(prev, i), &err);
        chunks_in += nx_imatrix_chunk_count(prev);
        nx_imatrix_free(prev);
        if (err.code != NX_OK) { fprintf(stderr, "nextn imatrix: %s: %s\n", in_files[k], err.msg); goto done; }
    }
    if (nx_model_load(model, &mp, &m) != NX_OK) { fprintf(stderr, "nextn imatrix: %s\n", nx_last_error()); goto done; }
    col.g = m->gguf;
    const int V = nx_model_n_vocab(m), E = nx_model_n_embd(m);
    if (nx_tokenizer_from_gguf(m->gguf, &tok, &err) != NX_OK) { fprintf(stderr, "nextn imatrix: %s\n", err.msg); goto done; }
    const nx_tok_specials *sp = nx_tokenizer_specials(tok);
    const bool add_bos = sp->add_bos && sp->bos >= 0;
    if (nx_read_file(file, (size_t)1 << 30, &text, &len, &err) != NX_OK ||
        nx_tokenize(tok, text, len, NX_TOK_ADD_SPECIAL, &ids, &err) != NX_OK) {
        fprintf(stderr, "nextn imatrix: %s\n", err.msg);
        goto done;
    }
    if (ids.n < 2 * (size_t)n_ctx) {   /* llama-imatrix's rule */
        fprintf(stderr, "nextn imatrix: you need at least %d tokens for a context of %d (the text has %zu)\n", 2 * n_ctx,
                n_ctx, ids.n);
        goto done;
    }
    int n_chunk = (int)(ids.n / (size_t)n_ctx) - skip_chunks;
    if (n_chunks_max >= 0 && n_chunk > n_chunks_max) n_chunk = n_chunks_max;
    if (n_chunk < 1) { fprintf(stderr, "nextn imatrix: --chunk %d leaves no chunk of the text\n", skip_chunks); goto done; }
    nx_ctx_params cp = nx_ctx_default_params();
    cp.n_ctx = n_ctx;
    cp.n_ubatch = n_ctx < 512 ? n_ctx : 512;
    cp.n_threads = n_threads;
    if (nx_ctx_create(m, &cp, &ctx) != NX_OK) { fprintf(stderr, "nextn imatrix: %s\n", nx_last_error()); goto done; }
    ctx->mm.observe = observe;
    ctx->mm.observe_user = &col;
    const bool mtp = warmup && nx_mtp_supported(m);
    /* created after the observer is set: the head inherits it */
    if (mtp && nx_mtp_head_create(ctx, &head, &err) != NX_OK) { fprintf(stderr, "nextn imatrix: %s\n", err.msg); goto done; }
    b = nx_batch_create(n_ctx);
    hid = calloc((size_t)n_ctx * E, sizeof *hid);
    htok = malloc((size_t)n_ctx * sizeof *htok);
    hpos = malloc((size_t)n_ctx * sizeof *hpos);
    hseq = calloc((size_t)n_ctx, sizeof *hseq);
    am = malloc((size_t)n_ctx * sizeof *am);
    ap = malloc((size_t)n_ctx * sizeof *ap);
    if (!b || !hid || !htok || !hpos || !hseq || !am || !ap) { fprintf(stderr, "nextn imatrix: out of memory\n"); goto done; }
    fprintf(stderr, "imatrix: %d chunks of %d tokens%s\n", n_chunk, n_ctx, mtp ? ", with the MTP warmup" : "");
    const int first = n_ctx / 2;
    double nll = 0;
    long count = 0;
    for (int c = 0; c < n_chunk; c++) {
        const nx_token *ct = ids.ids + (size_t)(c + skip_chunks) * n_ctx;
        nx_batch_clear(b);
        for (int i = 0; i < n_ctx; i++) {
            htok[i] = i == 0 && add_bos ? sp->bos : ct[i];
            hpos[i] = i;
            nx_batch_add(b, htok[i], i, 0, i >= first);
        }
        if (nx_decode(ctx, b) != NX_OK) { fprintf(stderr, "nextn imatrix: decode: %s\n", nx_last_error()); goto done; }
        if (col.st != NX_OK) { fprintf(stderr, "nextn imatrix: %s\n", col.err.msg); goto done; }
        for (int j = first; j < n_ctx - 1; j++) {
            const float *l = nx_ctx_logits(ctx, j);
            float mx = l[0];
            for (int i = 1; i < V; i++) mx = l[i] > mx ? l[i] : mx;
            double s = 0;
            for (int i = 0; i < V; i++) s += exp((double)(l[i] - mx));
            nll += mx + log(s) - l[ct[j + 1]];
            count++;
        }
        if (mtp) {
            memset(hid, 0, (size_t)E * sizeof *hid);
            for (int i = 0; i + 1 < n_ctx; i++) memcpy(hid + (size_t)(i + 1) * E, nx_ctx_hidden(ctx, i), (size_t)E * sizeof *hid);
            nx_mtp_head_seq_trim(head, 0, 0);
            /* drafting rows: the head's LM matrix runs too (collected when it is the layer's own
             * blk.N.nextn.shared_head_head) */
            const int cap = nx_mtp_head_max_rows(head);
            for (int r0 = 0; r0 < n_ctx - 1; r0 += cap) {
                const int k = n_ctx - 1 - r0 < cap ? n_ctx - 1 - r0 : cap;
                if (nx_mtp_head_draft_rows(head, k, htok + r0, hpos + r0, hseq + r0, hid + (size_t)r0 * E, NULL, am, ap,
                                           &err) != NX_OK) {
                    fprintf(stderr, "nextn imatrix: mtp: %s\n", err.msg);
                    goto done;
                }
            }
            if (col.st != NX_OK) { fprintf(stderr, "nextn imatrix: %s\n", col.err.msg); goto done; }
        }
        nx_seq_rm(ctx, 0, -1, -1);
        printf("[%d]%.4f,", c + 1, exp(nll / (double)count));
        fflush(stdout);
    }
    printf("\n");
    nx_imatrix_set_chunks(col.im, chunks_in + n_chunk, n_ctx);
    if (nx_imatrix_add_dataset(col.im, file, &err) != NX_OK || nx_imatrix_save(col.im, out, legacy, &err) != NX_OK) {
        fprintf(stderr, "nextn imatrix: %s\n", err.msg);
        goto done;
    }
    /* entries of the MTP layers: blk.N with N >= block_count - nextn_predict_layers */
    int n_mtp = 0;
    {
        uint64_t al;
        const char *as = nx_gguf_get_str(m->gguf, "general.architecture", &al);
        char key[160];
        int64_t bc = 0, nn = 0;
        snprintf(key, sizeof key, "%.*s.block_count", (int)(as && al < 100 ? al : 0), as ? as : "");
        nx_gguf_get_int(m->gguf, key, &bc);
        snprintf(key, sizeof key, "%.*s.nextn_predict_layers", (int)(as && al < 100 ? al : 0), as ? as : "");
        nx_gguf_get_int(m->gguf, key, &nn);
        for (int64_t i = 0; i < nx_imatrix_n_entries(col.im); i++) {
            int il;
            if (sscanf(nx_imatrix_entry_at(col.im, i)->name, "blk.%d.", &il) == 1 && nn > 0 && il >= bc - nn) n_mtp++;
        }
    }
    printf("imatrix: %lld entries (%d of the MTP layer) from %d chunks (+%d from --in-file) written to %s (%s)\n",
           (long long)nx_imatrix_n_entries(col.im), n_mtp, n_chunk, chunks_in, out, legacy ? "legacy .dat" : "GGUF");
    rc = 0;
done:
    free(text);
    free(hid);
    free(htok);
    free(hpos);
    free(hseq);
    free(am);
    free(ap);
    nx_token_vec_free(&ids);
    nx_mtp_head_free(head);
    nx_batch_free(b);
    nx_ctx_free(ctx);
    nx_tokenizer_free(tok);
    nx_model_free(m);
    nx_imatrix_free(col.im);
    return rc;
}
