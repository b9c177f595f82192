/*
 * cmd_perplexity.c — `nextn perplexity`: llama-perplexity's estimate, KL divergence against a
 * base model's saved logits, and (a figure llama.cpp does not give) the MTP head's first-draft
 * acceptance on the same text.
 *
 *   nextn perplexity -m F.gguf -f TEXT [-c 512] [--chunks N] [-b 512] [-t N]
 *                    [--kl-divergence-base F [--kl-divergence]]
 *
 * Method (llama-perplexity): the text's tokens (BOS added as the vocabulary asks) are cut into
 * n = tokens / c chunks of c tokens; each chunk is decoded from an empty context (its first
 * token replaced by BOS when the vocabulary adds one); the second half is scored: for rows j in
 * [c/2, c-1) the negative log-likelihood of token j+1 under the row's softmax. Printed: the
 * running PPL after each chunk ([1]x,[2]y,...) and "Final estimate: PPL = exp(mean nll) +/-
 * PPL * sqrt((mean nll^2 - mean nll^2) / (N - 1))" over the N scored tokens, as llama.cpp.
 *
 * KL divergence (llama.cpp's two steps and file): `--kl-divergence-base F` alone writes the scored
 * rows' log-probabilities to F in llama-perplexity's layout ("_logits_", i32 n_ctx, i32 n_vocab,
 * i32 n_chunk, the chunks' i32 tokens, then per scored row 2*((n_vocab+1)/2) + 4 u16: f32 scale and
 * f32 min_log_prob, then per token q = nearest((logit - lo) / scale), lo = max(min logit, max logit
 * - 16), 0 below lo; log p = scale * q + min_log_prob), so files of either engine serve the other.
 * With `--kl-divergence` the model runs over the file's tokens (-f not needed) and is compared as
 * llama.cpp does (base log-probs <= -16 left out of the sum): mean PPL of both and their ratio,
 * KL(base || model) per token (mean +/- standard error, max, 99.9 / 99 / median percentiles, min),
 * the change of the correct token's probability and how often the top tokens agree.
 *
 * MTP: for a model with an MTP layer, every chunk also goes through the MTP head teacher-forced
 * (row q fed token q and the trunk's hidden q-1, as in speculation): the share of rows whose
 * draft equals the trunk's argmax at q is the greedy first-draft acceptance on this text.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/args.h"
#include "cli/cli.h"
#include "core/io.h"
#include "ctx.h"
#include "kernels/ops.h"
#include "model.h"
#include "spec/mtp.h"
#include "tokenizer.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: nextn perplexity -m F.gguf -f TEXT [-c 512] [--chunks N] [-b 512] [-t N] [--no-mtp]\n"
            "                        [--kl-divergence-base F [--kl-divergence]]\n"
            "Perplexity as llama-perplexity computes it (chunks of -c tokens, the second half of each scored);\n"
            "--kl-divergence-base F saves the logits to F; with --kl-divergence they are the base of a KL divergence\n"
            "(the tokens come from F). Models with an MTP layer also report the MTP head's first-draft acceptance.\n");
}

static const char KLD_MAGIC[8] = {'_', 'l', 'o', 'g', 'i', 't', 's', '_'};

/* log-softmax pieces of one row: max and log-sum-exp (natural log, double accumulation). */
static double row_lse(const float *l, int V, float *max_out) {
    float mx = l[0];
    for (int i = 1; i < V; i++) mx = l[i] > mx ? l[i] : mx;
    double s = 0;
    for (int i = 0; i < V; i++) s += exp((double)(l[i] - mx));
    *max_out = mx;
    return mx + log(s);
}

typedef struct kld_stats {
    double *kld;            /* per scored token */
    long n, cap;
    double sum_nll_q, sum_nll_b, sum_nll_q2, sum_nll_b2, sum_nll_qb;
    double sum_dp, sum_dp2;
    long same_top;
} kld_stats;

static int cmp_dbl(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* u16 per row in the base file: two floats, then the vocabulary padded to an even count */
static size_t row_u16(int V) { return 2 * (((size_t)V + 1) / 2) + 4; }

static void encode_row(const float *l, int V, uint16_t *row) {
    float mx, mn = l[0];
    const float lse = (float)(row_lse(l, V, &mx) - mx);
    for (int i = 1; i < V; i++) mn = l[i] < mn ? l[i] : mn;
    const float lo = mn > mx - 16 ? mn : mx - 16;
    const float scale = (mx - lo) / 65535.f, min_log_prob = lo - mx - lse;
    memcpy(row, &scale, 4);
    memcpy(row + 2, &min_log_prob, 4);
    uint16_t *q = row + 4;
    memset(q, 0, (row_u16(V) - 4) * sizeof *q);
    if (scale > 0)
        for (int i = 0; i < V; i++) {
            const long v = l[i] > lo ? lroundf((l[i] - lo) / scale) : 0;
            q[i] = (uint16_t)(v < 0 ? 0 : v > 65535 ? 65535 : v);
        }
}

int nx_cmd_perplexity(int argc, char **argv) {
    const char *model = NULL, *file = NULL, *kld_path = NULL;
    int n_ctx = 512, n_chunks_max = -1, n_threads = 0, n_ubatch = 512;
    bool kld = false, no_mtp = false;
    for (int i = 1; i < argc;) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        if (!strcmp(a, "--kl-divergence")) { kld = true; i++; continue; }
        if (!strcmp(a, "--no-mtp")) { no_mtp = true; i++; continue; }
        if (!v) { fprintf(stderr, "nextn perplexity: %s: unknown flag or missing value\n", a); usage(stderr); return 2; }
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) model = v;
        else if (!strcmp(a, "-f") || !strcmp(a, "--file")) file = v;
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) n_ctx = atoi(v);
        else if (!strcmp(a, "--chunks")) n_chunks_max = atoi(v);
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) n_threads = atoi(v);
        else if (!strcmp(a, "--kl-divergence-base")) kld_path = v;
        else if (!strcmp(a, "-b") || !strcmp(a, "--batch-size") || !strcmp(a, "-ub") || !strcmp(a, "--ubatch-size")) n_ubatch = atoi(v);
        else { fprintf(stderr, "nextn perplexity: unknown flag %s\n", a); usage(stderr); return 2; }
        i += 2;
    }
    if (!model || (!file && !kld) || (kld && !kld_path) || n_ctx < 8 || n_ctx > 1 << 16 || n_threads < 0 || n_ubatch < 1) {
        usage(stderr);
        return 2;
    }

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
    FILE *kf = NULL;
    uint16_t *krow = NULL;
    float *hid = NULL;
    int *tam = NULL;
    int32_t *ktok = NULL;
    kld_stats ks = {0};
    nx_model_params mp = nx_model_default_params();
    mp.n_threads = n_threads;
    if (nx_model_load(model, &mp, &m) != NX_OK) { fprintf(stderr, "nextn perplexity: %s\n", nx_last_error()); goto done; }
    const int V = nx_model_n_vocab(m), E = nx_model_n_embd(m);
    if (nx_tokenizer_from_gguf(m->gguf, &tok, &err) != NX_OK) { fprintf(stderr, "nextn perplexity: %s\n", err.msg); goto done; }
    const nx_tok_specials *sp = nx_tokenizer_specials(tok);
    const bool add_bos = sp->add_bos && sp->bos >= 0;

    int32_t hdr[3] = {0};   /* n_ctx, n_vocab, n_chunk */
    if (kld) {
        if (!(kf = fopen(kld_path, "rb"))) { fprintf(stderr, "nextn perplexity: cannot open %s\n", kld_path); goto done; }
        char mg[8];
        if (fread(mg, 1, 8, kf) != 8 || memcmp(mg, KLD_MAGIC, 8) || fread(hdr, 4, 3, kf) != 3) {
            fprintf(stderr, "nextn perplexity: %s is not a KL-divergence base file (llama-perplexity --kl-divergence-base)\n",
                    kld_path);
            goto done;
        }
        if (hdr[1] != V || hdr[0] < 8 || hdr[0] > 1 << 16 || hdr[2] < 1 || hdr[2] > 1 << 20) {
            fprintf(stderr, "nextn perplexity: %s: n_ctx %d, n_vocab %d (model: %d), %d chunks: does not fit this model\n",
                    kld_path, hdr[0], hdr[1], V, hdr[2]);
            goto done;
        }
        n_ctx = hdr[0];
        const size_t nt = (size_t)hdr[0] * (size_t)hdr[2];
        ktok = malloc(nt * sizeof *ktok);
        if (!ktok || fread(ktok, 4, nt, kf) != nt) {
            fprintf(stderr, "nextn perplexity: %s: truncated tokens\n", kld_path);
            goto done;
        }
        for (size_t i = 0; i < nt; i++)
            if (ktok[i] < 0 || ktok[i] >= V) { fprintf(stderr, "nextn perplexity: %s: bad token id\n", kld_path); goto done; }
        ids.ids = ktok;
        ids.n = nt;
        ktok = NULL;
    } else {
        if (nx_read_file(file, (size_t)1 << 30, &text, &len, &err) != NX_OK) {
            fprintf(stderr, "nextn perplexity: %s\n", err.msg);
            goto done;
        }
        if (nx_tokenize(tok, text, len, NX_TOK_ADD_SPECIAL, &ids, &err) != NX_OK) {
            fprintf(stderr, "nextn perplexity: %s\n", err.msg);
            goto done;
        }
    }
    if (ids.n < 2 * (size_t)n_ctx) {
        fprintf(stderr, "nextn perplexity: you need at least %d tokens to evaluate perplexity with a context of %d (the text has %zu)\n",
                2 * n_ctx, n_ctx, ids.n);
        goto done;
    }
    int n_chunk = (int)(ids.n / (size_t)n_ctx);
    if (n_chunks_max >= 0 && n_chunk > n_chunks_max) n_chunk = n_chunks_max;
    if (kld) n_chunk = hdr[2];
    const int first = n_ctx / 2;
    const size_t row_n = row_u16(V);
    if (kld_path && !kld) {
        if (!(kf = fopen(kld_path, "wb"))) { fprintf(stderr, "nextn perplexity: cannot create %s\n", kld_path); goto done; }
        const int32_t h[3] = {n_ctx, V, n_chunk};
        /* the text's tokens as they are (the BOS replacement happens at decode, as llama.cpp) */
        const bool ok = fwrite(KLD_MAGIC, 1, 8, kf) == 8 && fwrite(h, 4, 3, kf) == 3 &&
                        fwrite(ids.ids, 4, (size_t)n_chunk * n_ctx, kf) == (size_t)n_chunk * n_ctx;
        if (!ok) { fprintf(stderr, "nextn perplexity: write error on %s\n", kld_path); goto done; }
    }
    krow = malloc(row_n * sizeof *krow);
    if (!krow) { fprintf(stderr, "nextn perplexity: out of memory\n"); goto done; }

    nx_ctx_params cp = nx_ctx_default_params();
    cp.n_ctx = n_ctx;
    cp.n_ubatch = n_ctx < n_ubatch ? n_ctx : n_ubatch;   /* -b / -ub: rows per forward chunk (the result does not depend on it) */
    cp.n_threads = n_threads;
    if (nx_ctx_create(m, &cp, &ctx) != NX_OK) { fprintf(stderr, "nextn perplexity: %s\n", nx_last_error()); goto done; }
    const bool mtp = !no_mtp && nx_mtp_supported(m);
    if (mtp && nx_mtp_head_create(ctx, &head, &err) != NX_OK) { fprintf(stderr, "nextn perplexity: %s\n", err.msg); goto done; }
    b = nx_batch_create(n_ctx);
    hid = calloc((size_t)n_ctx * E, sizeof *hid);
    tam = malloc((size_t)n_ctx * sizeof *tam);
    if (!b || !hid || !tam) { fprintf(stderr, "nextn perplexity: out of memory\n"); goto done; }

    fprintf(stderr, "perplexity: calculating perplexity over %d chunks, n_ctx=%d, batch_size=%d, n_seq=1\n", n_chunk, n_ctx,
            cp.n_ubatch);
    double nll = 0, nll2 = 0;
    long count = 0, mtp_agree = 0, mtp_rows = 0;
    const double t0 = nx_cli_now();
    for (int c = 0; c < n_chunk; c++) {
        const nx_token *ct = ids.ids + (size_t)c * n_ctx;
        nx_seq_rm(ctx, 0, -1, -1);
        nx_batch_clear(b);
        for (int i = 0; i < n_ctx; i++) {
            const nx_token t = i == 0 && add_bos ? sp->bos : ct[i];
            nx_batch_add(b, t, i, 0, i >= first || mtp);
        }
        if (nx_decode(ctx, b) != NX_OK) { fprintf(stderr, "nextn perplexity: decode: %s\n", nx_last_error()); goto done; }
        for (int j = first; j < n_ctx - 1; j++) {
            const float *l = nx_ctx_logits(ctx, j);
            float mx;
            const double lse = row_lse(l, V, &mx);
            const int tgt = ct[j + 1];
            const double v = lse - l[tgt];
            nll += v;
            nll2 += v * v;
            count++;
            if (kld_path && !kld) {
                encode_row(l, V, krow);
                if (fwrite(krow, 2, row_n, kf) != row_n) { fprintf(stderr, "nextn perplexity: write error\n"); goto done; }
            } else if (kld) {
                if (fread(krow, 2, row_n, kf) != row_n) { fprintf(stderr, "nextn perplexity: %s: truncated\n", kld_path); goto done; }
                float scale, min_lp;
                memcpy(&scale, krow, 4);
                memcpy(&min_lp, krow + 2, 4);
                const uint16_t *bq = krow + 4;
                /* llama.cpp's sum: base log-probs at or below -16 are left out */
                double kl = 0, lp_max = 0;
                int am_b = 0, am_q = 0;
                for (int i = 0; i < V; i++) {
                    const double lb = (double)(scale * bq[i] + min_lp);
                    if (i == 0 || lb > lp_max) { lp_max = lb; am_b = i; }
                    if (lb > -16) kl += exp(lb) * (lb - (l[i] - lse));
                    if (l[i] > l[am_q]) am_q = i;
                }
                const double nb = -(double)(scale * bq[tgt] + min_lp);
                if (ks.n == ks.cap) {
                    ks.cap = ks.cap ? 2 * ks.cap : 4096;
                    double *nk = realloc(ks.kld, (size_t)ks.cap * sizeof *nk);
                    if (!nk) { fprintf(stderr, "nextn perplexity: out of memory\n"); goto done; }
                    ks.kld = nk;
                }
                ks.kld[ks.n++] = kl;
                ks.sum_nll_b += nb;
                ks.sum_nll_b2 += nb * nb;
                ks.sum_nll_q2 += v * v;
                ks.sum_nll_q += v;
                ks.sum_nll_qb += v * nb;
                const double dp = exp(-v) - exp(-nb);
                ks.sum_dp += dp;
                ks.sum_dp2 += dp * dp;
                ks.same_top += am_b == am_q;
            }
        }
        if (mtp) {
            /* teacher-forced MTP rows 0..n-2: row q = (token q, trunk hidden q-1) drafts token q+1 */
            memset(hid, 0, (size_t)E * sizeof *hid);
            for (int i = 0; i < n_ctx; i++) {
                tam[i] = nx_argmax(nx_ctx_logits(ctx, i), V);
                if (i + 1 < n_ctx) memcpy(hid + (size_t)(i + 1) * E, nx_ctx_hidden(ctx, i), (size_t)E * sizeof *hid);
            }
            nx_mtp_head_seq_trim(head, 0, 0);
            const int cap = nx_mtp_head_max_rows(head) < 512 ? nx_mtp_head_max_rows(head) : 512;
            nx_pos pos[512];
            nx_seq_id seq[512];
            int am[512];
            float ap[512];
            for (int r0 = 0; r0 < n_ctx - 1; r0 += cap) {
                const int k = n_ctx - 1 - r0 < cap ? n_ctx - 1 - r0 : cap;
                for (int i = 0; i < k; i++) { pos[i] = r0 + i; seq[i] = 0; }
                nx_token tk[512];
                for (int i = 0; i < k; i++) tk[i] = r0 + i == 0 && add_bos ? sp->bos : ct[r0 + i];
                if (nx_mtp_head_draft_rows(head, k, tk, pos, seq, hid + (size_t)r0 * E, NULL, am, ap, &err) != NX_OK) {
                    fprintf(stderr, "nextn perplexity: mtp: %s\n", err.msg);
                    goto done;
                }
                for (int i = 0; i < k; i++) mtp_agree += am[i] == tam[r0 + i];
                mtp_rows += k;
            }
        }
        if (c == 0)
            fprintf(stderr, "perplexity: %.2f seconds per pass - ETA %.2f minutes\n", nx_cli_now() - t0,
                    (nx_cli_now() - t0) * n_chunk / 60.0);
        printf("[%d]%.4f,", c + 1, exp(nll / (double)count));
        fflush(stdout);
    }
    printf("\n");
    nll /= (double)count;
    nll2 /= (double)count;
    const double ppl = exp(nll);
    const double var = nll2 - nll * nll;
    if (var > 0) printf("Final estimate: PPL = %.4f +/- %.5f\n", ppl, sqrt(var / (double)(count - 1)) * ppl);
    else printf("Final estimate: PPL = %.4f\n", ppl);
    if (mtp)
        printf("MTP first-draft acceptance (teacher-forced, greedy vs this model's argmax): %.4f (%ld / %ld)\n",
               mtp_rows ? (double)mtp_agree / mtp_rows : 0.0, mtp_agree, mtp_rows);
    if (kld && ks.n > 0) {
        const double n = (double)ks.n;
        const double mq = ks.sum_nll_q / n, mb = ks.sum_nll_b / n;
        const double vq = ks.sum_nll_q2 / n - mq * mq, vb = ks.sum_nll_b2 / n - mb * mb;
        const double cov = ks.sum_nll_qb / n - mq * mb;
        double skl = 0, skl2 = 0;
        for (long i = 0; i < ks.n; i++) { skl += ks.kld[i]; skl2 += ks.kld[i] * ks.kld[i]; }
        const double mkl = skl / n, ekl = sqrt(fmax(0, skl2 / n - mkl * mkl) / (n - 1));
        const double dr = mq - mb, vdr = vq + vb - 2 * cov;
        qsort(ks.kld, (size_t)ks.n, sizeof *ks.kld, cmp_dbl);
#define PCT(p) ks.kld[(long)((p) * (n - 1))]
        const double sp_ = ks.same_top / n, dpm = ks.sum_dp / n;
        printf("\n====== Perplexity statistics ======\n");
        printf("Mean PPL(Q)                   : %10.6f +/- %10.6f\n", exp(mq), exp(mq) * sqrt(vq / (n - 1)));
        printf("Mean PPL(base)                : %10.6f +/- %10.6f\n", exp(mb), exp(mb) * sqrt(vb / (n - 1)));
        printf("Cor(ln(PPL(Q)), ln(PPL(base))): %6.2f%%\n", vq > 0 && vb > 0 ? 100 * cov / sqrt(vq * vb) : 100.0);
        printf("Mean ln(PPL(Q)/PPL(base))     : %10.6f +/- %10.6f\n", dr, sqrt(fmax(0, vdr) / (n - 1)));
        printf("Mean PPL(Q)/PPL(base)         : %10.6f\n", exp(dr));
        printf("\n====== KL divergence statistics ======\n");
        printf("Mean    KLD: %10.6f +/- %10.6f\n", mkl, ekl);
        printf("Maximum KLD: %10.6f\n99.9%%   KLD: %10.6f\n99.0%%   KLD: %10.6f\nMedian  KLD: %10.6f\nMinimum KLD: %10.6f\n",
               ks.kld[ks.n - 1], PCT(0.999), PCT(0.99), PCT(0.5), ks.kld[0]);
#undef PCT
        printf("\n====== Token probability statistics ======\n");
        printf("Mean    Δp: %8.4f %%\nRMS Δp    : %8.4f %%\nSame top p: %8.4f +/- %6.4f %%\n", 100 * dpm,
               100 * sqrt(ks.sum_dp2 / n), 100 * sp_, 100 * sqrt(sp_ * (1 - sp_) / (n - 1)));
    }
    rc = 0;
done:
    if (kf) fclose(kf);
    free(ks.kld);
    free(krow);
    free(hid);
    free(tam);
    free(ktok);
    free(text);
    nx_token_vec_free(&ids);
    nx_mtp_head_free(head);
    nx_batch_free(b);
    nx_ctx_free(ctx);
    nx_tokenizer_free(tok);
    nx_model_free(m);
    return rc;
}
