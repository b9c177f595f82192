/*
 * cmd_run.c — `nextn run`: generate text from a prompt, streamed to stdout.
 *
 *   nextn run -m FILE.gguf (-p PROMPT | -f FILE) [-n N] [-t N] [-c N] [-ub N] [-ctk/-ctv TYPE]
 *             [--temp T] [--top-k K] [--top-p P] [--min-p M] [-s/--seed S] [--repeat-penalty R]
 *             [--repeat-last-n N] [--presence-penalty P] [--frequency-penalty F] [--chat]
 *             [--spec-type mtp|ngram|ngram,mtp|... --draft-max N ... (spec/spec_params.h)]
 *
 * Tokenizes the prompt (BOS if the vocabulary asks for it, special-token text parsed as
 * llama.cpp does), refuses a prompt longer than the context, decodes it in ubatches, then
 * generates until an end-of-generation token, -n tokens or a full context. Generation always goes
 * through the speculative engine (spec/engine.h): with speculation off it has no drafters and
 * commits one token per round, so the output with any --spec-type is the same by construction
 * (greedy: identical; sampled: the same distribution). Tokens are streamed as rounds commit them.
 * stdout carries only the generated text, whole UTF-8 characters, flushed after every token
 * (plus a final newline when stdout is a terminal); stderr gets one summary line with the
 * prompt and generation speeds ("decodes" = engine rounds = target forward passes), followed with
 * speculation on by the acceptance summary (nx_spec_stats_summary). --chat wraps the prompt as one
 * ChatML user turn.
 * Exit codes: 0 ok, 1 runtime error (model, prompt too long, decode), 2 bad flags.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "chat/chat_template.h"
#include "cli/args.h"
#include "core/io.h"
#include "cli/cli.h"
#include "cli/env_args.h"
#include "model.h"
#include "sample.h"
#include "spec/engine.h"
#include "spec/mtp.h"
#include "tokenizer.h"

#define RUN_FLAGS (NX_ARGS_MODEL | NX_ARGS_PROMPT | NX_ARGS_PREDICT | NX_ARGS_RUNTIME | NX_ARGS_SAMPLING | NX_ARGS_SPEC)

static void run_usage(FILE *f) {
    fprintf(f,
            "usage: nextn run -m FILE.gguf (-p PROMPT | -f FILE) [options]\n"
            "  -m, --model FILE         model GGUF\n"
            "  -p, --prompt TEXT        prompt (special-token text such as <|im_start|> is parsed)\n"
            "  -f, --file FILE          read the prompt from FILE ('-' = stdin)\n"
            "  --chat                   wrap the prompt as one user turn: the GGUF's chat template, else ChatML\n"
            "  --chat-template-file F   the Jinja chat template for --chat (implies --chat)\n"
            "  -n, --n-predict N        tokens to generate (default -1: until end of generation / full context)\n"
            "  -t, --threads N          threads (default: physical cores)\n"
            "  -c, --ctx-size N         context positions (default 0: the model's, at most 4096)\n"
            "  -ub, --ubatch-size N     prompt rows per forward chunk (default 512)\n"
            "  -ctk, -ctv TYPE          KV cache type: f16 (default), f32, bf16, q8_0, q4_0\n"
            "  --no-mmap                read the weights into (huge-page) memory instead of mapping the file\n"
            "sampling (llama.cpp defaults; --temp 0 = greedy):\n"
            "  --temp 0.8  --top-k 40  --top-p 0.95  --min-p 0.05  -s, --seed -1 (random)\n"
            "  --repeat-penalty 1.0  --repeat-last-n 64  --presence-penalty 0  --frequency-penalty 0\n"
            "speculative decoding (default --spec-type auto: mtp when the model has an MTP layer; greedy output\n"
            "is identical to --spec-type none; with sampling and a fixed --seed auto stays off):\n%s"
            "stdout: the generated text only; stderr: a summary line (prompt and generation tok/s),\n"
            "then with speculation on the acceptance summary.\n%s",
            nx_spec_params_usage(), nx_cli_env_usage());
}

/* The prompt as one user turn through a Jinja chat template (file, else the GGUF's); *done =
 * false when there is none. */
static nx_status chat_template_tokenize(const nx_tokenizer *tok, const nx_gguf *g, const char *file, const char *text,
                                        size_t len, nx_token_vec *out, bool *done, nx_error *err) {
    *done = false;
    char *src = NULL;
    size_t sl = 0;
    uint64_t gl = 0;
    const char *gs = NULL;
    if (file) {
        nx_status st = nx_read_file(file, 16u << 20, &src, &sl, err);
        if (st != NX_OK) return st;
    } else if (!(gs = nx_gguf_get_str(g, "tokenizer.chat_template", &gl))) return NX_OK;
    const nx_tok_specials *sp = nx_tokenizer_specials(tok);
    size_t bl = 0, el = 0;
    const char *b = sp->bos >= 0 ? nx_token_text(tok, sp->bos, &bl) : NULL, *e = sp->eos >= 0 ? nx_token_text(tok, sp->eos, &el) : NULL;
    char bz[256] = "", ez[256] = "";
    if (b) snprintf(bz, sizeof bz, "%.*s", (int)bl, b);
    if (e) snprintf(ez, sizeof ez, "%.*s", (int)el, e);
    nx_chat_template *ct = NULL;
    nx_status st = nx_chat_template_create(file ? src : gs, file ? sl : (size_t)gl, bz, ez, &ct, err);
    free(src);
    if (st != NX_OK) return nx_error_prefix(err, "chat template");
    cJSON *msgs = cJSON_CreateArray(), *m = cJSON_CreateObject();
    char *t = malloc(len + 1), *prompt = NULL;
    size_t pl = 0;
    bool raised = false;
    if (!msgs || !m || !t) st = nx_fail(err, NX_ERR_NOMEM, "out of memory");
    else {
        memcpy(t, text, len);
        t[len] = 0;
        cJSON_AddStringToObject(m, "role", "user");
        cJSON_AddStringToObject(m, "content", t);
        cJSON_AddItemToArray(msgs, m);
        m = NULL;
        st = nx_chat_template_render(ct, msgs, NULL, NULL, true, &prompt, &pl, &raised, err);
    }
    if (st == NX_OK) {
        /* the template writes bos_token itself: no second one from add_bos */
        const char *p = prompt;
        if (sp->add_bos && bz[0] && strncmp(p, bz, strlen(bz)) == 0) { p += strlen(bz); pl -= strlen(bz); }
        st = nx_tokenize(tok, p, pl, NX_TOK_ADD_SPECIAL | NX_TOK_PARSE_SPECIAL, out, err);
        *done = st == NX_OK;
    }
    free(prompt);
    free(t);
    cJSON_Delete(m);
    cJSON_Delete(msgs);
    nx_chat_template_free(ct);
    return st;
}

/* Prompt text -> tokens; --chat wraps it as one user turn: the chat template (--chat-template-file
 * or the GGUF's), else ChatML. */
static nx_status run_tokenize(const nx_tokenizer *tok, const nx_gguf *g, const char *tmpl_file, const char *text,
                              size_t len, bool chat, nx_token_vec *out, nx_error *err) {
    const unsigned flags = NX_TOK_ADD_SPECIAL | NX_TOK_PARSE_SPECIAL;
    if (!chat) return nx_tokenize(tok, text, len, flags, out, err);
    bool done = false;
    nx_status st = chat_template_tokenize(tok, g, tmpl_file, text, len, out, &done, err);
    if (st != NX_OK || done) return st;
    static const char head[] = "<|im_start|>user\n", tail[] = "<|im_end|>\n<|im_start|>assistant\n";
    if (nx_token_find(tok, "<|im_start|>", 12) < 0 || nx_token_find(tok, "<|im_end|>", 10) < 0)
        return nx_fail(err, NX_ERR_UNSUPPORTED, "--chat needs ChatML, but the vocabulary has no <|im_start|> / <|im_end|> token");
    size_t n = sizeof head - 1 + len + sizeof tail - 1;
    char *s = malloc(n + 1);
    if (!s) return nx_fail(err, NX_ERR_NOMEM, "out of memory");
    memcpy(s, head, sizeof head - 1);
    memcpy(s + sizeof head - 1, text, len);
    memcpy(s + sizeof head - 1 + len, tail, sizeof tail);
    st = nx_tokenize(tok, s, n, flags, out, err);
    free(s);
    return st;
}

/* Write a token's bytes through the UTF-8 assembler (only whole characters), then flush. */
static void emit_piece(nx_utf8_asm *as, const char *p, size_t n) {
    char buf[256 + 4];
    while (n > 0) {
        size_t k = n < 256 ? n : 256;
        size_t w = nx_utf8_asm_feed(as, p, k, buf);
        if (w) fwrite(buf, 1, w, stdout);
        p += k;
        n -= k;
    }
    fflush(stdout);
}

typedef struct run_stats {
    int n_prompt, n_gen, n_gen_decodes;
    double n_round_tokens;
    double t_load, t_prompt, t_gen;
    const char *stop;
} run_stats;

static void print_summary(const run_stats *s, const nx_sampler *smp) {
    char gen_rate[32];
    /* tokens the rounds committed (the first one comes from the prompt pass) per second of rounds */
    if (s->n_gen_decodes > 0 && s->t_gen > 0) snprintf(gen_rate, sizeof gen_rate, "%.2f tok/s", s->n_round_tokens / s->t_gen);
    else snprintf(gen_rate, sizeof gen_rate, "- tok/s");
    char seed[40] = "";
    if (!nx_sampler_is_greedy(smp)) snprintf(seed, sizeof seed, " | seed %u", nx_sampler_seed(smp));
    fprintf(stderr,
            "nextn run: prompt %d tokens, %.2f tok/s | generated %d tokens (%d decodes), %s | stop: %s | load %.2f s%s\n",
            s->n_prompt, s->t_prompt > 0 ? s->n_prompt / s->t_prompt : 0.0, s->n_gen, s->n_gen_decodes, gen_rate,
            s->stop, s->t_load, seed);
}

int nx_cmd_run(int argc, char **argv) {
    nx_cli_args a;
    nx_cli_args_init(&a);
    a.spec.auto_type = true;   /* speculation on by default where the model carries a drafter */
    nx_error err = {0};
    if (nx_cli_args_parse(&a, RUN_FLAGS, argc, argv, &err) != NX_OK) {
        fprintf(stderr, "nextn run: %s (see nextn run --help)\n", err.msg);
        return 2;
    }
    if (a.help) { run_usage(stdout); return 0; }
    if (!a.model) { fprintf(stderr, "nextn run: no model: give -m FILE.gguf (see nextn run --help)\n"); return 2; }

    char *text = NULL;
    size_t text_len = 0;
    nx_status st = nx_cli_read_prompt(&a, &text, &text_len, &err);
    if (st != NX_OK) {
        fprintf(stderr, "nextn run: %s\n", err.msg);
        return st == NX_ERR_INVALID_ARG ? 2 : 1;
    }

    int rc = 1;
    nx_model *m = NULL;
    nx_tokenizer *tok = NULL;
    nx_ctx *ctx = NULL;
    nx_sampler *smp = NULL;
    nx_spec_engine *en = NULL;
    nx_token_vec ids = {0};
    run_stats s = {.stop = "end of generation"};

    double t0 = nx_cli_now();
    if (nx_cli_load_model(&a, &m, &err) != NX_OK) { fprintf(stderr, "nextn run: %s\n", err.msg); goto done; }
    s.t_load = nx_cli_now() - t0;
    /* A fixed seed with sampling asks for the same text every time; adaptive k follows measured
     * timings, which would change where the random draws fall. So auto stays off then. */
    const bool keep_seed = a.spec.auto_type && a.spec.n_types == 0 && a.temp > 0 && a.seed != NX_SAMPLER_SEED_RANDOM;
    if (!keep_seed) nx_spec_params_resolve_auto(&a.spec, m);
    a.spec.auto_type = false;
    if (keep_seed && nx_mtp_supported(m))
        fprintf(stderr, "nextn run: --seed with sampling: speculation off so the text repeats (--spec-type mtp "
                        "--draft-adaptive off speculates and repeats too)\n");
    if (nx_tokenizer_from_gguf(m->gguf, &tok, &err) != NX_OK) { fprintf(stderr, "nextn run: %s: %s\n", a.model, err.msg); goto done; }
    if (run_tokenize(tok, m->gguf, a.chat_template_file, text, text_len, a.chat, &ids, &err) != NX_OK) { fprintf(stderr, "nextn run: %s\n", err.msg); goto done; }
    if (ids.n == 0) { fprintf(stderr, "nextn run: the prompt is empty (0 tokens)\n"); goto done; }

    nx_ctx_params cp = nx_cli_ctx_params(&a);
    if (nx_ctx_create(m, &cp, &ctx) != NX_OK) { fprintf(stderr, "nextn run: %s\n", nx_last_error()); goto done; }
    const int n_ctx = nx_ctx_n_ctx(ctx), V = nx_model_n_vocab(m);
    /* one position must stay free for the first generated token's decode */
    if ((long)ids.n >= (long)n_ctx) {
        fprintf(stderr, "nextn run: the prompt is %zu tokens but the context holds %d (raise -c or shorten the prompt)\n",
                ids.n, n_ctx);
        goto done;
    }
    for (size_t i = 0; i < ids.n; i++)
        if (ids.ids[i] < 0 || ids.ids[i] >= V) {
            fprintf(stderr, "nextn run: prompt token %d is outside the model's vocabulary (%d)\n", ids.ids[i], V);
            goto done;
        }
    nx_sampler_params sp = nx_cli_sampler_params(&a, V);
    /* resolve a random seed here so the summary can report the one the engine's chain uses */
    if (nx_sampler_create(&sp, &smp, &err) != NX_OK) { fprintf(stderr, "nextn run: %s\n", err.msg); goto done; }
    sp.seed = nx_sampler_seed(smp);

    nx_spec_engine_params ep = nx_spec_engine_default_params();
    ep.spec = a.spec;
    ep.sampler = sp;
    if (nx_spec_engine_create(ctx, &ep, &en, &err) != NX_OK) { fprintf(stderr, "nextn run: %s\n", err.msg); goto done; }
    const nx_token *stop = NULL;
    const int n_stop = nx_tokenizer_eog_ids(tok, &stop);
    /* -n 0: the prompt pass only (the engine always samples one token; it is not shown) */
    nx_spec_request rq = {.prompt = ids.ids, .n_prompt = (int)ids.n, .n_predict = a.n_predict == 0 ? 1 : a.n_predict,
                          .stop = stop, .n_stop = n_stop};
    s.n_prompt = (int)ids.n;
    nx_seq_id seq = -1;
    t0 = nx_cli_now();
    if (nx_spec_engine_add(en, &rq, &seq, &err) != NX_OK) { fprintf(stderr, "nextn run: %s\n", err.msg); goto done; }
    s.t_prompt = nx_cli_now() - t0;

    /* ---- generation: one engine round at a time, streaming what it committed ---- */
    nx_utf8_asm as = {0};
    bool eog = false;
    t0 = nx_cli_now();
    for (;;) {
        const nx_token *tk = NULL;
        const int n = a.n_predict == 0 ? 0 : nx_spec_engine_take(en, seq, &tk);
        for (int i = 0; i < n && !eog; i++) {
            if (nx_token_is_eog(tok, tk[i])) { eog = true; break; }   /* ends the output, not shown */
            size_t plen = 0;
            const char *piece = nx_token_piece(tok, tk[i], false, &plen);
            emit_piece(&as, piece, plen);
            s.n_gen++;
        }
        if (!nx_spec_engine_n_active(en)) break;
        if (nx_spec_engine_step(en, &err) != NX_OK) {
            fprintf(stderr, "\nnextn run: generation failed at token %d: %s\n", s.n_gen, err.msg);
            goto done;
        }
    }
    s.t_gen = nx_cli_now() - t0;
    const nx_spec_stats *tot = nx_spec_engine_stats_total(en);
    s.n_gen_decodes = (int)tot->n_rounds;
    s.n_round_tokens = (double)tot->n_committed;
    if (eog) s.stop = "end of generation";
    else if (a.n_predict >= 0 && s.n_gen >= a.n_predict) s.stop = "-n limit";
    else s.stop = "context full";
    char tail[4];
    size_t nt = nx_utf8_asm_flush(&as, tail);
    if (nt) fwrite(tail, 1, nt, stdout);
    if (isatty(STDOUT_FILENO) && s.n_gen > 0) fputc('\n', stdout);
    fflush(stdout);
    print_summary(&s, smp);
    if (a.spec.n_types > 0) {
        int n_names = 0;
        const char *const *names = nx_spec_engine_stage_names(en, &n_names);
        char desc[256], sum[2048];
        nx_spec_params_describe(&a.spec, desc, sizeof desc);
        nx_spec_stats_summary(tot, n_names > 0 ? names : NULL, sum, sizeof sum);
        fprintf(stderr, "nextn run: speculation %s | acceptance %.3f, mean accepted length %.2f\n%s", desc,
                nx_spec_stats_accept_rate(tot), nx_spec_stats_mean_accepted(tot), sum);
    }
    rc = 0;
done:
    free(text);
    nx_token_vec_free(&ids);
    nx_spec_engine_free(en);
    nx_sampler_free(smp);
    nx_ctx_free(ctx);
    nx_tokenizer_free(tok);
    nx_model_free(m);
    return rc;
}
