/*
 * cmd_serve.c — `nextn serve`: the OpenAI-compatible HTTP server (src/server/server.h).
 *
 *   nextn serve -m FILE [--host 127.0.0.1] [--port 8080] [-np 4] [-c CTX] [--alias NAME]
 *               [--api-key K] [--max-body BYTES] [--queue-max N] [--chat-format chatml|gemma]
 *               [--chat-template-file F] [--reasoning-format deepseek|auto|deepseek-legacy|none]
 *               [--shutdown-grace S] [-ub N] [-ctk T] [-ctv T] [--ctx-checkpoint-interval N] [--ctx-checkpoints N]
 *               [--max-connections N] [--max-connections-per-ip N] [--read-timeout S]
 *               [--log-format text|json] [--log-file F]
 *               [speculation flags: --spec-type ... (spec_params.h)]
 *
 * Logs (core/log.h) go to stderr or --log-file: one access line per request, errors, warnings,
 * and a line when the process dies of a fatal signal.
 *
 * The model backend (src/server/backend_model.h) loads FILE and runs every slot through one
 * speculative engine; the hidden `--fake-backend` runs the deterministic byte-echo backend the
 * tests use instead (`--fake-step-us N` sets its per-step sleep). SIGINT / SIGTERM
 * stop it gracefully: no new connections, streams get --shutdown-grace seconds (default 5) to
 * finish, the rest are cancelled, exit 0. The listening address is printed as one line on stdout:
 * "nextn serve: listening on http://HOST:PORT" (with --port 0 the port is the one chosen).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include "cli/cli.h"
#include "cli/env_args.h"
#include "core/io.h"
#include "core/log.h"
#include "server/backend_model.h"
#include "server/server.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: nextn serve -m FILE [options]\n"
            "  --host ADDR            bind address (default 127.0.0.1)\n"
            "  --port N               port (default 8080; 0 = any free port)\n"
            "  -np, --parallel N      slots (default 4)\n"
            "  -c, --ctx-size N       total context, split over the slots (default 4096)\n"
            "  --alias NAME           model name in the API (default: the file's base name)\n"
            "  --api-key K            require 'Authorization: Bearer K' (or env NEXTN_API_KEY)\n"
            "  --max-body BYTES       largest request body (default 8388608)\n"
            "  --queue-max N          requests that may wait for a slot (default 64)\n"
            "  --chat-format F        chatml | gemma (default: from the GGUF)\n"
            "  --reasoning-format F   deepseek | auto | deepseek-legacy | none: a chat answer's <think>\n"
            "                         block goes to reasoning_content (auto = deepseek; legacy: streams\n"
            "                         send it in content as <think>...</think>), or stays in content\n"
            "                         (default auto)\n"
            "  --chat-template-file F Jinja chat template (default: the GGUF's tokenizer.chat_template;\n"
            "                         the built-in formats only when the GGUF has none)\n"
            "  --shutdown-grace S     seconds streams get to finish on SIGINT/SIGTERM (default 5)\n"
            "  --timeout S            close idle connections after S seconds (default 60)\n"
            "  --read-timeout S       a request's headers and body must arrive within S seconds, however\n"
            "                         slowly they trickle (default 20; 0 = no limit)\n"
            "  --max-connections N    open connections at most (default 256)\n"
            "  --max-connections-per-ip N  per client address (default 64; 0 = no limit; raise it\n"
            "                         behind a reverse proxy, where every client has its address)\n"
            "  --log-format F         text | json (default text): the access and error log lines\n"
            "  --log-file F           append the log to F instead of stderr\n"
            "  -t, --threads N        compute threads (default: physical cores)\n"
            "  --no-mmap              read the weights into (huge-page) memory instead of mapping the file\n"
            "  -ub, --ubatch-size N   prompt rows per forward chunk, and per step over all slots while\n"
            "                         prompts are read beside decoding slots (default 512)\n"
            "  -ctk, --cache-type-k T / -ctv, --cache-type-v T  KV cache types: f16 (default), f32, bf16,\n"
            "                         q8_0, q4_0\n"
            "  --ctx-checkpoint-interval N  recurrent-state checkpoint every N prompt tokens, so a\n"
            "                         later request sharing the prefix resumes there (default 512, 0 = off)\n"
            "  --ctx-checkpoints N    checkpoints kept per slot (default 8)\n"
            "%s%s",
            nx_spec_params_usage(), nx_cli_env_usage());
}

static bool parse_int(const char *s, long lo, long hi, long *out) {
    char *end;
    long v = s ? strtol(s, &end, 10) : 0;
    if (!s || !*s || *end || v < lo || v > hi) return false;
    *out = v;
    return true;
}

int nx_cmd_serve(int argc, char **argv) {
    nx_server_params sp = nx_server_default_params();
    nx_spec_params spec = nx_spec_params_default();
    spec.auto_type = true;   /* speculation on by default where the model carries a drafter */
    const char *model = NULL, *alias = NULL, *chat = NULL, *log_file = NULL, *tmpl_file = NULL;
    nx_log_format log_fmt = NX_LOG_TEXT;
    const char *api_key = getenv("NEXTN_API_KEY");
    long n_slots = 4, n_ctx = 4096, queue_max = 64, step_us = 1000, timeout_s = 60, n_threads = 0, n_ubatch = 0;
    long ckpt_interval = 512, ckpt_max = 8;
    double grace = 5.0;
    bool fake = false, no_mmap = false;
    nx_cache_type type_k = NX_CACHE_F16, type_v = NX_CACHE_F16;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        long x;
        nx_error err = {0};
        bool consumed = false;
        if (nx_spec_params_parse_arg(&spec, argc, argv, &i, &consumed, &err) != NX_OK) {
            fprintf(stderr, "nextn serve: %s\n", err.msg);
            return 2;
        }
        if (consumed) { i--; continue; }   /* i is already past the flag; the loop adds one */
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        else if (!strcmp(a, "--fake-backend")) { fake = true; continue; }
        else if (!strcmp(a, "--no-mmap")) { no_mmap = true; continue; }
        else if (!v) { fprintf(stderr, "nextn serve: %s needs a value (or is unknown)\n", a); usage(stderr); return 2; }
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) model = v;
        else if (!strcmp(a, "--host")) sp.host = v;
        else if (!strcmp(a, "--port")) { if (!parse_int(v, 0, 65535, &x)) goto bad; sp.port = (int)x; }
        else if (!strcmp(a, "-np") || !strcmp(a, "--parallel")) { if (!parse_int(v, 1, 256, &n_slots)) goto bad; }
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) { if (!parse_int(v, 8, 1L << 24, &n_ctx)) goto bad; }
        else if (!strcmp(a, "--alias")) alias = v;
        else if (!strcmp(a, "--api-key")) api_key = v;
        else if (!strcmp(a, "--max-body")) { if (!parse_int(v, 64, 1L << 30, &x)) goto bad; sp.max_body = (size_t)x; }
        else if (!strcmp(a, "--queue-max")) { if (!parse_int(v, 0, 1 << 20, &queue_max)) goto bad; }
        else if (!strcmp(a, "--chat-format")) chat = v;
        else if (!strcmp(a, "--chat-template-file")) tmpl_file = v;
        else if (!strcmp(a, "--reasoning-format")) { if (!nx_reasoning_format_parse(v, &sp.reasoning_format)) goto bad; }
        else if (!strcmp(a, "--timeout")) { if (!parse_int(v, 1, 86400, &timeout_s)) goto bad; }
        else if (!strcmp(a, "--read-timeout")) { if (!parse_int(v, 0, 86400, &x)) goto bad; sp.read_timeout_s = (double)x; }
        else if (!strcmp(a, "--max-connections")) { if (!parse_int(v, 1, 65536, &x)) goto bad; sp.max_connections = (int)x; }
        else if (!strcmp(a, "--max-connections-per-ip")) { if (!parse_int(v, 0, 65536, &x)) goto bad; sp.max_connections_per_ip = (int)x; }
        else if (!strcmp(a, "--log-format")) {
            if (!strcmp(v, "text")) log_fmt = NX_LOG_TEXT;
            else if (!strcmp(v, "json")) log_fmt = NX_LOG_JSON;
            else goto bad;
        }
        else if (!strcmp(a, "--log-file")) log_file = v;
        else if (!strcmp(a, "--shutdown-grace")) { char *e; grace = strtod(v, &e); if (*e || grace < 0 || grace > 3600) goto bad; }
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) { if (!parse_int(v, 1, 1024, &n_threads)) goto bad; }
        else if (!strcmp(a, "-ub") || !strcmp(a, "--ubatch-size")) { if (!parse_int(v, 1, 1 << 16, &n_ubatch)) goto bad; }
        else if (!strcmp(a, "-ctk") || !strcmp(a, "--cache-type-k")) { if (!nx_cache_type_parse(v, &type_k)) goto bad; }
        else if (!strcmp(a, "-ctv") || !strcmp(a, "--cache-type-v")) { if (!nx_cache_type_parse(v, &type_v)) goto bad; }
        else if (!strcmp(a, "--ctx-checkpoint-interval")) { if (!parse_int(v, 0, 1 << 24, &ckpt_interval)) goto bad; }
        else if (!strcmp(a, "--ctx-checkpoints")) { if (!parse_int(v, 0, 4096, &ckpt_max)) goto bad; }
        else if (!strcmp(a, "--fake-step-us")) { if (!parse_int(v, 0, 10000000, &step_us)) goto bad; }
        else { fprintf(stderr, "nextn serve: unknown option '%s'\n", a); usage(stderr); return 2; }
        i++;
        continue;
    bad:
        fprintf(stderr, "nextn serve: bad value '%s' for %s\n", v, a);
        return 2;
    }
    nx_error err = {0};
    nx_log_set_format(log_fmt);
    if (log_file && nx_log_open_file(log_file, &err) != NX_OK) {
        fprintf(stderr, "nextn serve: %s\n", err.msg);
        return 2;
    }
    nx_log_install_crash_handler();
    if (nx_spec_params_validate(&spec, &err) != NX_OK) {
        fprintf(stderr, "nextn serve: %s\n", err.msg);
        return 2;
    }
    nx_chat_format cf = NX_CHAT_CHATML;
    if (chat && !nx_chat_format_parse(chat, &cf)) {
        fprintf(stderr, "nextn serve: unknown chat format '%s' (known: chatml, gemma)\n", chat);
        return 2;
    }
    if (!fake && !model) { fprintf(stderr, "nextn serve: -m FILE is required\n"); usage(stderr); return 2; }
    if (n_ctx / n_slots < 8) {
        fprintf(stderr, "nextn serve: -c %ld over %ld slots leaves fewer than 8 positions per slot\n", n_ctx, n_slots);
        return 2;
    }
    char base[128] = "fake";
    if (model) {
        const char *b = strrchr(model, '/');
        snprintf(base, sizeof base, "%s", b ? b + 1 : model);
        char *dot = strstr(base, ".gguf");
        if (dot) *dot = 0;
    }
    nx_gen_fake_params fp = nx_gen_fake_default_params();
    fp.alias = alias ? alias : base;
    fp.n_slots = (int)n_slots;
    fp.n_ctx_slot = (int)(n_ctx / n_slots);
    fp.queue_max = (int)queue_max;
    fp.step_us = (int)step_us;
    fp.chat_format = cf;
    fp.spec = spec;
    sp.api_key = api_key;
    sp.conn_timeout_s = (int)timeout_s;

    /* Signals are taken by sigwait() below: block them before any thread starts, so that every
     * thread (libmicrohttpd's, the scheduler) inherits the mask. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    nx_gen_model_params mp = nx_gen_model_default_params();
    mp.model_path = model;
    mp.alias = alias;
    mp.n_slots = (int)n_slots;
    mp.n_ctx = (int)n_ctx;
    mp.n_ubatch = (int)n_ubatch;
    mp.n_threads = (int)n_threads;
    mp.type_k = type_k;
    mp.type_v = type_v;
    mp.use_mmap = !no_mmap;
    mp.queue_max = (int)queue_max;
    mp.has_chat_format = chat != NULL;
    mp.chat_format = cf;
    char *tmpl = NULL;
    if (tmpl_file) {
        size_t tl = 0;
        if (nx_read_file(tmpl_file, 16u << 20, &tmpl, &tl, &err) != NX_OK) {
            fprintf(stderr, "nextn serve: %s\n", err.msg);
            return 1;
        }
        mp.chat_template = tmpl;
        fp.chat_template = tmpl;
    }
    mp.spec = spec;
    mp.checkpoint_interval = (int)ckpt_interval;
    mp.max_checkpoints = (int)ckpt_max;

    nx_gen_backend *be = NULL;
    nx_status cst = fake ? nx_gen_fake_create(&fp, &be, &err) : nx_gen_model_create(&mp, &be, &err);
    free(tmpl);   /* the backend keeps the parsed template */
    if (cst != NX_OK) {
        fprintf(stderr, "nextn serve: %s\n", err.msg);
        return 1;
    }
    nx_server *srv = NULL;
    if (nx_server_start(&sp, be, &srv, &err) != NX_OK) {
        fprintf(stderr, "nextn serve: %s\n", err.msg);
        nx_gen_backend_free(be);
        return 1;
    }
    const char *host = sp.host ? sp.host : "127.0.0.1";
    bool v6 = strchr(host, ':') != NULL;
    printf("nextn serve: listening on http://%s%s%s:%d\n", v6 ? "[" : "", host, v6 ? "]" : "", nx_server_port(srv));
    fflush(stdout);
    int sig = 0;
    sigwait(&set, &sig);
    NX_INFO("server: %s received, shutting down", sig == SIGINT ? "SIGINT" : "SIGTERM");
    nx_server_stop(srv, grace);
    nx_server_free(srv);
    nx_gen_backend_free(be);
    return 0;
}
