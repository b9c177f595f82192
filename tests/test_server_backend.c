/*
 * test_server_backend.c — the server's parts below HTTP: the text filter (UTF-8 assembly + stop
 * strings), chat rendering and format detection, request parsing / validation, timings
 * bookkeeping, and the fake backend driven directly through streams (ordering, cancellation,
 * queue limit, slot pinning, prefix cache).
 */
#include <pthread.h>
#include <unistd.h>
#include "test.h"
#include "server/backend.h"
#include "server/chat.h"
#include "server/request.h"

/* Feed pieces one by one; returns everything released + flushed, and the stop index. */
static char *run_textout(const char *const *pieces, int n, const char *const *stops, int n_stops, int *stop_out,
                         int *max_chunk_broken) {
    nx_gen_textout o;
    nx_gen_textout_init(&o, stops, NULL, n_stops);
    char *all = calloc(1, 4096), *buf = NULL;
    size_t n_all = 0, nb = 0, cap = 0;
    *stop_out = -1;
    *max_chunk_broken = 0;
    for (int i = 0; i < n; i++) {
        nb = 0;
        int st = nx_gen_textout_feed(&o, pieces[i], strlen(pieces[i]), &buf, &nb, &cap);
        /* A released chunk never ends inside a UTF-8 character. */
        if (nb && ((unsigned char)buf[nb - 1] & 0xC0) == 0xC0) (*max_chunk_broken)++;
        if (nb && ((unsigned char)buf[0] & 0xC0) == 0x80) (*max_chunk_broken)++;
        memcpy(all + n_all, buf ? buf : "", nb);
        n_all += nb;
        if (st >= 0) { *stop_out = st; break; }
    }
    nb = 0;
    nx_gen_textout_flush(&o, &buf, &nb, &cap);
    memcpy(all + n_all, buf ? buf : "", nb);
    n_all += nb;
    all[n_all] = 0;
    free(buf);
    nx_gen_textout_free(&o);
    return all;
}

static void test_textout(void) {
    int stop, broken;
    const char *p1[] = {"Hel", "lo ", "wo", "rld"};
    const char *s1[] = {"lo w"};
    char *r = run_textout(p1, 4, s1, 1, &stop, &broken);
    CHECK_STR(r, "Hel");
    CHECK_EQ_INT(stop, 0);
    free(r);
    /* A partial match that fails is released in full. */
    const char *s2[] = {"low!"};
    r = run_textout(p1, 4, s2, 1, &stop, &broken);
    CHECK_STR(r, "Hello world");
    CHECK_EQ_INT(stop, -1);
    free(r);
    /* UTF-8 split over single bytes: chunks are whole characters. */
    const char *p3[] = {"a", "\xC3", "\xA9", "\xE2", "\x82", "\xAC", "\xF0", "\x9F", "\x98", "\x80", "z"};
    r = run_textout(p3, 11, NULL, 0, &stop, &broken);
    CHECK_STR(r, "a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80z");
    CHECK_EQ_INT(broken, 0);
    free(r);
    /* The earliest of several stops wins; a stop made of a multi-byte character. */
    const char *p4[] = {"x", "\xC3", "\xA9", "yz"};
    const char *s4[] = {"yz", "\xC3\xA9"};
    r = run_textout(p4, 4, s4, 2, &stop, &broken);
    CHECK_STR(r, "x");
    CHECK_EQ_INT(stop, 1);
    free(r);
    /* An incomplete character at the end is flushed, not lost. */
    const char *p5[] = {"ok", "\xE2\x82"};
    r = run_textout(p5, 2, NULL, 0, &stop, &broken);
    CHECK_EQ_INT(strlen(r), 4);
    free(r);
}

static void test_chat(void) {
    nx_chat_msg m[] = {{"system", "Be brief.", 9}, {"user", "Hi", 2}, {"assistant", "Hello", 5}, {"user", "Bye", 3}};
    char *out = NULL;
    size_t n = 0;
    CHECK(nx_chat_render(NX_CHAT_CHATML, m, 4, true, &out, &n, NULL) == NX_OK);
    CHECK_STR(out, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                   "<|im_start|>assistant\nHello<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n");
    CHECK_EQ_INT(n, strlen(out));
    free(out);
    CHECK(nx_chat_render(NX_CHAT_GEMMA, m, 4, true, &out, &n, NULL) == NX_OK);
    CHECK_STR(out, "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello<end_of_turn>\n"
                   "<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n");
    free(out);
    nx_chat_msg bad[] = {{"wizard", "x", 1}};
    nx_error err = {0};
    CHECK(nx_chat_render(NX_CHAT_CHATML, bad, 1, true, &out, &n, &err) == NX_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "wizard") != NULL);
    CHECK(nx_chat_render(NX_CHAT_CHATML, m, 0, true, &out, &n, &err) == NX_ERR_INVALID_ARG);
    CHECK(nx_chat_format_detect("{% for m in messages %}<|im_start|>{{m.role}}", NULL) == NX_CHAT_CHATML);
    CHECK(nx_chat_format_detect("{{ '<start_of_turn>' + role }}", "qwen35") == NX_CHAT_GEMMA);
    CHECK(nx_chat_format_detect(NULL, "gemma4") == NX_CHAT_GEMMA);
    CHECK(nx_chat_format_detect(NULL, "qwen35") == NX_CHAT_CHATML);
    CHECK_STR(nx_chat_stop_texts(NX_CHAT_GEMMA)[0], "<end_of_turn>");
}

static nx_gen_info test_info(void) {
    nx_gen_info info;
    memset(&info, 0, sizeof info);
    snprintf(info.alias, sizeof info.alias, "m");
    info.ready = true;
    info.n_slots = 2;
    info.n_ctx_slot = 64;
    info.n_vocab = 258;
    info.n_drafters = 1;
    info.drafters[0] = NX_SPEC_MTP;
    info.spec = nx_spec_params_default();
    return info;
}

static int http_of(nx_api_kind k, const char *body, char *msg, size_t msg_size) {
    nx_gen_info info = test_info();
    nx_api_request r;
    nx_api_error e = {0};
    nx_status st = nx_api_parse(k, body, strlen(body), &info, &r, &e);
    if (msg) snprintf(msg, msg_size, "%s", e.msg);
    if (st == NX_OK) nx_api_request_free(&r);
    return st == NX_OK ? 200 : e.http;
}

static void test_request(void) {
    nx_gen_info info = test_info();
    nx_api_request r;
    nx_api_error e = {0};
    const char *ok = "{\"model\":\"m-slot1\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},"
                     "{\"type\":\"text\",\"text\":\"b\"}]}],\"max_tokens\":7,\"stop\":[\"x\",\"\",\"yy\"],\"seed\":5,"
                     "\"logit_bias\":{\"65\":-1.5,\"66\":false},\"speculative\":{\"n_max\":3,\"type\":\"mtp\"},"
                     "\"stream\":true,\"stream_options\":{\"include_usage\":true},\"temperature\":0}";
    CHECK(nx_api_parse(NX_API_CHAT, ok, strlen(ok), &info, &r, &e) == NX_OK);
    CHECK_STR(r.prompt_text, "<|im_start|>user\nab<|im_end|>\n<|im_start|>assistant\n");
    CHECK_EQ_INT(r.gen.n_predict, 7);
    CHECK_EQ_INT(r.gen.n_stop, 2);
    CHECK_STR(r.gen.stop[1], "yy");
    CHECK_EQ_INT(r.gen.id_slot, 1);
    CHECK_EQ_INT(r.gen.sampling.seed, 5);
    CHECK_EQ_INT(r.gen.sampling.n_logit_bias, 2);
    CHECK(r.gen.sampling.logit_bias[1].bias < -1e30f);
    CHECK(r.gen.spec.has_type && r.gen.spec.type == NX_SPEC_MTP);
    CHECK_EQ_INT(r.gen.spec.n_max, 3);
    CHECK(r.stream && r.include_usage);
    nx_api_request_free(&r);
    const char *toks = "{\"prompt\":[1,2,3],\"n_predict\":2,\"n_probs\":3,\"speculative.n_max\":2}";
    CHECK(nx_api_parse(NX_API_NATIVE, toks, strlen(toks), &info, &r, &e) == NX_OK);
    CHECK_EQ_INT(r.n_prompt_tokens, 3);
    CHECK_EQ_INT(r.gen.n_probs, 3);
    CHECK_EQ_INT(r.gen.spec.n_max, 2);
    nx_api_request_free(&r);
    /* the fork's per-request switch: speculative.mtp_adaptive = adaptive k with the guard; "-sN" pins a slot */
    const char *ma = "{\"model\":\"m-s1\",\"prompt\":\"x\",\"speculative\":{\"mtp_adaptive\":false}}";
    CHECK(nx_api_parse(NX_API_NATIVE, ma, strlen(ma), &info, &r, &e) == NX_OK);
    CHECK_EQ_INT(r.gen.spec.adaptive, 0);
    CHECK_EQ_INT(r.gen.id_slot, 1);
    nx_api_request_free(&r);
    const char *ma2 = "{\"prompt\":\"x\",\"speculative.mtp_adaptive\":true}";
    CHECK(nx_api_parse(NX_API_NATIVE, ma2, strlen(ma2), &info, &r, &e) == NX_OK);
    CHECK_EQ_INT(r.gen.spec.adaptive, 1);
    nx_api_request_free(&r);
    CHECK_EQ_INT(http_of(NX_API_NATIVE, "{\"prompt\":\"x\",\"speculative\":{\"mtp_adaptive\":3}}", NULL, 0), 400);

    char msg[NX_ERROR_MSG_MAX];
    CHECK_EQ_INT(http_of(NX_API_CHAT, "{", msg, sizeof msg), 400);
    CHECK(strstr(msg, "malformed JSON") != NULL);
    CHECK_EQ_INT(http_of(NX_API_CHAT, "[1]", NULL, 0), 400);
    CHECK_EQ_INT(http_of(NX_API_CHAT, "{\"messages\":[]}", NULL, 0), 400);
    CHECK_EQ_INT(http_of(NX_API_CHAT, "{\"messages\":[{\"role\":1}]}", NULL, 0), 400);
    CHECK_EQ_INT(http_of(NX_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}", NULL, 0), 400);
    CHECK_EQ_INT(http_of(NX_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":2}", msg, sizeof msg), 400);
    CHECK(strstr(msg, "'n'") != NULL);
    CHECK_EQ_INT(http_of(NX_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":\"5\"}", msg, sizeof msg), 400);
    CHECK(strstr(msg, "max_tokens") != NULL);
    CHECK_EQ_INT(http_of(NX_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":1.5}", NULL, 0), 400);
    CHECK_EQ_INT(http_of(NX_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stream\":1}", NULL, 0), 400);
    CHECK_EQ_INT(http_of(NX_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stop\":[1]}", NULL, 0), 400);
    CHECK_EQ_INT(http_of(NX_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{}]}", NULL, 0), 400);
    /* a slot past the last is no model this server serves */
    CHECK_EQ_INT(http_of(NX_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"model\":\"m-slot9\"}", NULL, 0), 404);
    CHECK_EQ_INT(http_of(NX_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"model\":\"gpt-4\"}", NULL, 0), 404);
    CHECK_EQ_INT(http_of(NX_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"model\":\"m-s1\"}", NULL, 0), 200);
    CHECK_EQ_INT(http_of(NX_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"temperature\":-0.5}", NULL, 0), 400);
    CHECK_EQ_INT(http_of(NX_API_NATIVE, "{\"prompt\":\"a\",\"temperature\":-0.5}", NULL, 0), 200);
    CHECK_EQ_INT(http_of(NX_API_COMPLETIONS, "{\"prompt\":\"a\",\"max_tokens\":0}", NULL, 0), 400);
    CHECK_EQ_INT(http_of(NX_API_NATIVE, "{\"prompt\":\"a\",\"max_tokens\":-1}", NULL, 0), 200);
    CHECK_EQ_INT(http_of(NX_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logit_bias\":{\"999\":1}}", NULL, 0), 400);
    CHECK_EQ_INT(http_of(NX_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"speculative\":{\"type\":\"ngram\"}}", msg, sizeof msg), 400);
    CHECK(strstr(msg, "speculative.type") && strstr(msg, "allowed: mtp, none"));
    CHECK_EQ_INT(http_of(NX_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"speculative\":{\"type\":\"bogus\"}}", NULL, 0), 400);
    CHECK_EQ_INT(http_of(NX_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"speculative\":{\"n_max\":99}}", NULL, 0), 400);
    CHECK_EQ_INT(http_of(NX_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"speculative\":{\"type\":\"none\"}}", NULL, 0), 200);
    CHECK_EQ_INT(http_of(NX_API_COMPLETIONS, "{\"prompt\":[\"a\",\"b\"]}", NULL, 0), 400);
    CHECK_EQ_INT(http_of(NX_API_COMPLETIONS, "{\"prompt\":[\"a\"]}", NULL, 0), 200);
    CHECK_EQ_INT(http_of(NX_API_COMPLETIONS, "{\"prompt\":[300]}", NULL, 0), 400);
    CHECK_EQ_INT(http_of(NX_API_COMPLETIONS, "{\"prompt\":\"a\",\"echo\":true}", NULL, 0), 400);
    CHECK_EQ_INT(http_of(NX_API_COMPLETIONS, "{}", NULL, 0), 400);
    CHECK_EQ_INT(http_of(NX_API_NATIVE, "{\"prompt\":\"a\",\"id_slot\":2}", NULL, 0), 400);
    CHECK_EQ_INT(http_of(NX_API_NATIVE, "{\"prompt\":\"a\",\"top_p\":2}", NULL, 0), 400);
}

/* Which model names a server knows: the alias, the file's base name, their -slotN / -sN forms. */
static void test_model_names(void) {
    nx_gen_info info;
    memset(&info, 0, sizeof info);
    snprintf(info.alias, sizeof info.alias, "tiny");
    snprintf(info.model_path, sizeof info.model_path, "models/tiny-qwen35-mtp-q8_0.gguf");
    info.n_slots = 4;
    static const struct { const char *name; bool known; int slot; } cases[] = {
        {"tiny", true, -1}, {"tiny-slot0", true, 0}, {"tiny-slot3", true, 3}, {"tiny-s2", true, 2},
        {"tiny-qwen35-mtp-q8_0", true, -1}, {"tiny-qwen35-mtp-q8_0.gguf", true, -1}, {"tiny-qwen35-mtp-q8_0-slot1", true, 1},
        {"tiny-slot4", false, 0}, {"tiny-slot", false, 0}, {"tiny-slot01", false, 0}, {"tiny-slot1x", false, 0},
        {"tin", false, 0}, {"tinyx", false, 0}, {"", false, 0}, {"models/tiny-qwen35-mtp-q8_0.gguf", false, 0},
        {"tiny-s-1", false, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int slot = -7;
        bool k = nx_api_model_known(&info, cases[i].name, &slot);
        CHECK_MSG(k == cases[i].known, "'%s': known %d", cases[i].name, k);
        if (k) CHECK_MSG(slot == cases[i].slot, "'%s': slot %d", cases[i].name, slot);
    }
    CHECK(!nx_api_model_known(&info, NULL, NULL));
}

static void test_timings(void) {
    nx_gen_timings t;
    nx_gen_timings_init(&t);
    const char *names[] = {"ngram", "mtp"};
    nx_gen_timings_set_stages(&t, names, 2);
    nx_gen_timings_round(&t, 0, 3, 2);
    nx_gen_timings_round(&t, 1, 2, 0);
    nx_gen_timings_round(&t, 1, 0, 0);
    nx_gen_timings_round(&t, 1, 5, 9);   /* n clamped to k */
    CHECK_EQ_INT(t.draft_n, 10);
    CHECK_EQ_INT(t.draft_n_accepted, 7);
    CHECK_EQ_INT(t.depth_drafted[0], 3);
    CHECK_EQ_INT(t.depth_accepted[0], 2);
    CHECK_EQ_INT(t.depth_drafted[4], 1);
    CHECK_EQ_INT(t.stage[0].drafted, 3);
    CHECK_EQ_INT(t.stage[1].accepted, 5);
    CHECK_STR(t.stage[1].name, "mtp");
}

/* ===== The fake backend through streams ===== */

static nx_gen_backend *make_fake(int slots, int queue_max, int step_us, int n_ctx) {
    nx_gen_fake_params p = nx_gen_fake_default_params();
    p.n_slots = slots;
    p.n_ctx_slot = n_ctx;
    p.queue_max = queue_max;
    p.step_us = step_us;
    p.spec.n_types = 1;
    p.spec.types[0] = NX_SPEC_MTP;
    nx_gen_backend *be = NULL;
    nx_error err = {0};
    CHECK(nx_gen_fake_create(&p, &be, &err) == NX_OK);
    return be;
}

static nx_gen_stream *submit_text(nx_gen_backend *be, const char *text, int n_predict, bool ignore_eos, int id_slot,
                                  nx_status *st_out) {
    nx_token_vec v = {0};
    be->ops->tokenize(be, text, strlen(text), true, false, &v, NULL);
    nx_gen_request r;
    nx_gen_request_init(&r, 258);
    r.prompt = v.ids;
    r.n_prompt = (int)v.n;
    r.n_predict = n_predict;
    r.ignore_eos = ignore_eos;
    r.id_slot = id_slot;
    nx_gen_stream *s = NULL;
    nx_status st = nx_gen_submit(be, &r, &s, NULL);
    if (st_out) *st_out = st;
    nx_token_vec_free(&v);
    return s;
}

/* Collect a stream's text until its end (bounded); returns the final event kind. */
static int collect(nx_gen_stream *s, char *out, size_t cap, nx_gen_event *end) {
    size_t n = 0;
    double until = nx_gen_now() + 10;
    while (nx_gen_now() < until) {
        nx_gen_event ev;
        if (!nx_gen_stream_next(s, &ev, 50)) continue;
        if (ev.n_text && n + ev.n_text < cap) {
            memcpy(out + n, ev.text, ev.n_text);
            n += ev.n_text;
        }
        int k = ev.kind;
        if (k != NX_GEN_EV_TOKEN) {
            out[n] = 0;
            if (end) {
                *end = ev;
                end->text = NULL;
            }
            nx_gen_event_clear(&ev);
            return k;
        }
        nx_gen_event_clear(&ev);
    }
    out[n] = 0;
    return 0;
}

static void test_fake(void) {
    nx_gen_backend *be = make_fake(2, 1, 100, 128);
    char out[512];
    nx_gen_event end;
    nx_gen_stream *s = submit_text(be, "Hello, World", -1, false, -1, NULL);
    CHECK(s != NULL);
    CHECK_EQ_INT(collect(s, out, sizeof out, &end), NX_GEN_EV_DONE);
    CHECK_STR(out, "Uryyb, Jbeyq");
    CHECK_EQ_INT(end.finish, NX_GEN_FINISH_EOS);
    CHECK_EQ_INT(end.timings.predicted_n, 13);   /* 12 bytes + EOS */
    CHECK_EQ_INT(end.timings.n_prompt, 13);
    CHECK(end.timings.draft_n > 0);
    nx_gen_stream_release(s);
    /* The same prompt again reuses the slot's cache. */
    s = submit_text(be, "Hello, World", 3, false, -1, NULL);
    CHECK_EQ_INT(collect(s, out, sizeof out, &end), NX_GEN_EV_DONE);
    CHECK_STR(out, "Ury");
    CHECK_EQ_INT(end.finish, NX_GEN_FINISH_LENGTH);
    CHECK_EQ_INT(end.timings.cache_n, 12);
    CHECK_EQ_INT(end.timings.prompt_n, 1);
    nx_gen_stream_release(s);
    /* Queue: 2 slots + 1 waiting; the fourth is refused. Cancelling frees a slot at once. A slow
     * backend with a long context, so that nothing ends by itself meanwhile. */
    nx_gen_backend *slow = make_fake(2, 1, 2000, 100000);
    nx_gen_backend *keep = be;
    be = slow;
    nx_status st;
    nx_gen_stream *a = submit_text(be, "aaaa", -1, true, 0, &st);
    nx_gen_stream *b = submit_text(be, "bbbb", -1, true, 1, &st);
    usleep(20000);
    nx_gen_stream *c = submit_text(be, "cccc", -1, true, -1, &st);
    CHECK(c != NULL);
    nx_gen_stream *d = submit_text(be, "dddd", -1, true, -1, &st);
    CHECK(d == NULL);
    CHECK_EQ_INT(st, NX_ERR_NOMEM);
    nx_gen_load load;
    be->ops->slots(be, NULL, 0, &load);
    CHECK_EQ_INT(load.n_busy, 2);
    CHECK_EQ_INT(load.n_waiting, 1);
    nx_gen_stream_cancel(a);
    CHECK_EQ_INT(collect(a, out, sizeof out, &end), NX_GEN_EV_DONE);
    CHECK_EQ_INT(end.finish, NX_GEN_FINISH_CANCELLED);
    nx_gen_stream_release(a);
    usleep(20000);
    be->ops->slots(be, NULL, 0, &load);
    CHECK_EQ_INT(load.n_waiting, 0);   /* c took slot 0 */
    nx_gen_stream_release(b);
    nx_gen_stream_release(c);
    for (int i = 0; i < 100; i++) {
        be->ops->slots(be, NULL, 0, &load);
        if (load.n_busy == 0) break;
        usleep(10000);
    }
    CHECK_EQ_INT(load.n_busy, 0);
    nx_gen_backend_free(slow);
    be = keep;
    /* The context limit ends a generation that ignores EOS. */
    s = submit_text(be, "xy", -1, true, -1, NULL);
    CHECK_EQ_INT(collect(s, out, sizeof out, &end), NX_GEN_EV_DONE);
    CHECK_EQ_INT(end.finish, NX_GEN_FINISH_CONTEXT);
    nx_gen_stream_release(s);
    /* Validation in nx_gen_submit. */
    nx_gen_request r;
    nx_gen_request_init(&r, 258);
    nx_token big[200] = {0};
    r.prompt = big;
    r.n_prompt = 200;
    nx_error err = {0};
    CHECK(nx_gen_submit(be, &r, &s, &err) == NX_ERR_RANGE);
    CHECK(strstr(err.msg, "200") && strstr(err.msg, "128"));
    r.n_prompt = 4;
    r.spec.has_type = true;
    r.spec.type = NX_SPEC_NGRAM;
    CHECK(nx_gen_submit(be, &r, &s, &err) == NX_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "mtp") != NULL);
    /* Shutdown: everything in flight ends cancelled, new requests are refused. */
    s = submit_text(be, "long", -1, true, -1, NULL);
    be->ops->cancel_all(be);
    CHECK_EQ_INT(collect(s, out, sizeof out, &end), NX_GEN_EV_DONE);
    CHECK_EQ_INT(end.finish, NX_GEN_FINISH_CANCELLED);
    nx_gen_stream_release(s);
    CHECK(submit_text(be, "late", 1, false, -1, &st) == NULL);
    CHECK_EQ_INT(st, NX_ERR_UNSUPPORTED);
    nx_gen_backend_free(be);
}

/* Streams released while the backend still produces, from many threads at once. */
static void *racer(void *arg) {
    nx_gen_backend *be = arg;
    for (int i = 0; i < 30; i++) {
        nx_gen_stream *s = submit_text(be, "race condition", i % 3 ? -1 : 4, i % 2, -1, NULL);
        if (!s) continue;
        nx_gen_event ev;
        for (int k = 0; k < i % 5; k++)
            if (nx_gen_stream_next(s, &ev, 5)) nx_gen_event_clear(&ev);
        nx_gen_stream_release(s);
    }
    return NULL;
}

static void test_fake_race(void) {
    nx_gen_backend *be = make_fake(3, 64, 50, 128);
    pthread_t th[4];
    for (int i = 0; i < 4; i++) pthread_create(&th[i], NULL, racer, be);
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    nx_gen_load load;
    for (int i = 0; i < 200; i++) {
        be->ops->slots(be, NULL, 0, &load);
        if (load.n_busy == 0 && load.n_waiting == 0) break;
        usleep(5000);
    }
    CHECK_EQ_INT(load.n_busy, 0);
    CHECK_EQ_INT(load.n_waiting, 0);
    nx_gen_backend_free(be);
}

int main(void) {
    RUN(test_textout);
    RUN(test_chat);
    RUN(test_request);
    RUN(test_model_names);
    RUN(test_timings);
    RUN(test_fake);
    RUN(test_fake_race);
    return test_summary();
}
