/*
 * test_spec_stats.c — speculation counters, summaries and the --spec-trace NDJSON writer
 * (src/spec/stats.c). Every trace line is parsed back with cJSON.
 */
#include "test.h"

#include <cjson/cJSON.h>
#include <unistd.h>
#include "spec/stats.h"

static void test_counters(void) {
    nx_spec_stats st;
    nx_spec_stats_reset(&st);
    nx_spec_stats_round(&st, 0, 3, 0);
    nx_spec_stats_round(&st, 1, 3, 3);
    nx_spec_stats_round(&st, 1, 3, 1);
    nx_spec_stats_round(&st, -1, 0, 0);
    nx_spec_stats_round(&st, 0, 2, 5);          /* n clamped to k */
    CHECK_EQ_INT(st.n_rounds, 5);
    CHECK_EQ_INT(st.n_rounds_drafted, 4);
    CHECK_EQ_INT(st.n_drafted, 11);
    CHECK_EQ_INT(st.n_accepted, 6);
    CHECK_EQ_INT(st.n_committed, 11);           /* 1 + 4 + 2 + 1 + 3 */
    CHECK_NEAR(nx_spec_stats_accept_rate(&st), 6.0 / 11.0, 1e-12);
    CHECK_NEAR(nx_spec_stats_mean_accepted(&st), 6.0 / 4.0, 1e-12);
    CHECK_NEAR(nx_spec_stats_tokens_per_round(&st), 11.0 / 5.0, 1e-12);
    /* depth 1: drafted 4, reached 4, accepted 3; depth 2: drafted 4, reached 3, accepted 2;
     * depth 3: drafted 3, reached 1 (round 2 only), accepted 1 */
    CHECK_EQ_INT(st.depth_drafted[0], 4); CHECK_EQ_INT(st.depth_reached[0], 4); CHECK_EQ_INT(st.depth_accepted[0], 3);
    CHECK_EQ_INT(st.depth_drafted[1], 4); CHECK_EQ_INT(st.depth_reached[1], 3); CHECK_EQ_INT(st.depth_accepted[1], 2);
    CHECK_EQ_INT(st.depth_drafted[2], 3); CHECK_EQ_INT(st.depth_reached[2], 1); CHECK_EQ_INT(st.depth_accepted[2], 1);
    CHECK_NEAR(nx_spec_stats_depth_rate(&st, 1), 0.75, 1e-12);
    CHECK_NEAR(nx_spec_stats_depth_rate(&st, 2), 2.0 / 3.0, 1e-12);
    CHECK_NEAR(nx_spec_stats_depth_rate(&st, 3), 1.0, 1e-12);
    CHECK(isnan(nx_spec_stats_depth_rate(&st, 4)));
    CHECK(isnan(nx_spec_stats_depth_rate(&st, 0)));
    double a[5];
    nx_spec_stats_depth_rates(&st, a, 5);
    CHECK_NEAR(a[1], 2.0 / 3.0, 1e-12);
    CHECK_NEAR(a[2], 1.0, 1e-12);
    CHECK_NEAR(a[4], 1.0, 1e-12);               /* unreached: carried */
    CHECK_EQ_INT(st.rounds_by_k[0], 1); CHECK_EQ_INT(st.rounds_by_k[3], 3); CHECK_EQ_INT(st.rounds_by_k[2], 1);
    CHECK_EQ_INT(st.acc_len[0], 1); CHECK_EQ_INT(st.acc_len[1], 1); CHECK_EQ_INT(st.acc_len[2], 1); CHECK_EQ_INT(st.acc_len[3], 1);
    CHECK_EQ_INT(st.stage_rounds[0], 2); CHECK_EQ_INT(st.stage_drafted[0], 5); CHECK_EQ_INT(st.stage_accepted[0], 2);
    CHECK_EQ_INT(st.stage_rounds[1], 2); CHECK_EQ_INT(st.stage_accepted[1], 4);

    nx_spec_stats_add_time(&st, 0.5, 1.5, 0.0);
    nx_spec_stats_add_time(&st, NAN, -1.0, 0.2);  /* ignored, ignored, added */
    CHECK_NEAR(nx_spec_stats_tokens_per_s(&st), 11.0 / 2.2, 1e-9);

    nx_spec_stats tot;
    nx_spec_stats_reset(&tot);
    nx_spec_stats_merge(&tot, &st);
    nx_spec_stats_merge(&tot, &st);
    CHECK_EQ_INT(tot.n_drafted, 22);
    CHECK_EQ_INT(tot.depth_reached[2], 2);
    CHECK_NEAR(tot.t_verify, 3.0, 1e-12);
    CHECK_NEAR(nx_spec_stats_depth_rate(&tot, 2), 2.0 / 3.0, 1e-12);

    nx_spec_stats z;
    nx_spec_stats_reset(&z);
    CHECK_NEAR(nx_spec_stats_accept_rate(&z), 0.0, 0);
    CHECK_NEAR(nx_spec_stats_mean_accepted(&z), 0.0, 0);
    CHECK_NEAR(nx_spec_stats_tokens_per_s(&z), 0.0, 0);
    double t0 = nx_spec_time_now(), t1 = nx_spec_time_now();
    CHECK(t1 >= t0 && t0 > 0);
}

static void fill(nx_spec_stats *st) {
    nx_spec_stats_reset(st);
    nx_spec_stats_round(st, 0, 3, 2);
    nx_spec_stats_round(st, 1, 2, 0);
    nx_spec_stats_round(st, -1, 0, 0);
    nx_spec_stats_add_time(st, 0.25, 0.75, 0.0);
}

static void test_summary_and_json(void) {
    nx_spec_stats st;
    fill(&st);
    const char *names[2] = {"ngram", "mtp"};
    char buf[1024];
    size_t n = nx_spec_stats_summary(&st, names, buf, sizeof buf);
    CHECK(n == strlen(buf));
    CHECK(strstr(buf, "drafted 5, accepted 2 (40.0%)") != NULL);
    CHECK(strstr(buf, "acceptance by depth: 1:0.500 2:1.000 3:0.000") != NULL);
    CHECK(strstr(buf, "ngram: 1 rounds") != NULL && strstr(buf, "mtp: 1 rounds") != NULL);
    CHECK(strstr(buf, "draft 0.250 s, verify 0.750 s") != NULL);
    char small[10];
    size_t need = nx_spec_stats_summary(&st, NULL, small, sizeof small);
    CHECK(need > sizeof small);                          /* truncated, reports the full length */
    CHECK(strlen(small) == sizeof small - 1);
    CHECK(nx_spec_stats_summary(&st, NULL, NULL, 0) > 0);

    cJSON *o = nx_spec_stats_json(&st, names);
    CHECK(o != NULL);
    char *txt = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    cJSON *j = cJSON_Parse(txt);
    cJSON_free(txt);
    CHECK(j != NULL);
    if (!j) return;
    CHECK_EQ_INT(cJSON_GetObjectItem(j, "drafted")->valuedouble, 5);
    CHECK_EQ_INT(cJSON_GetObjectItem(j, "rounds")->valuedouble, 3);
    CHECK_NEAR(cJSON_GetObjectItem(j, "accept_rate")->valuedouble, 0.4, 1e-12);
    CHECK_NEAR(cJSON_GetObjectItem(j, "tokens_per_s")->valuedouble, 5.0, 1e-12);  /* 5 committed / 1 s */
    cJSON *bd = cJSON_GetObjectItem(j, "by_depth");
    CHECK(cJSON_IsArray(bd) && cJSON_GetArraySize(bd) == 3);
    cJSON *d2 = cJSON_GetArrayItem(bd, 1);
    CHECK_EQ_INT(cJSON_GetObjectItem(d2, "depth")->valuedouble, 2);
    CHECK_EQ_INT(cJSON_GetObjectItem(d2, "reached")->valuedouble, 1);
    CHECK_NEAR(cJSON_GetObjectItem(d2, "rate")->valuedouble, 1.0, 0);
    cJSON *rk = cJSON_GetObjectItem(j, "rounds_by_k");
    CHECK(cJSON_GetArraySize(rk) == 4);                          /* k = 0..3 */
    cJSON *sg = cJSON_GetObjectItem(j, "stages");
    CHECK(cJSON_GetArraySize(sg) == 2);
    CHECK_STR(cJSON_GetObjectItem(cJSON_GetArrayItem(sg, 1), "name")->valuestring, "mtp");
    cJSON_Delete(j);

    nx_spec_stats z;                                             /* empty stats: unreached -> null */
    nx_spec_stats_reset(&z);
    nx_spec_stats_round(&z, 0, 2, 0);
    o = nx_spec_stats_json(&z, NULL);
    bd = cJSON_GetObjectItem(o, "by_depth");
    CHECK(cJSON_IsNull(cJSON_GetObjectItem(cJSON_GetArrayItem(bd, 1), "rate")));
    CHECK_STR(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(o, "stages"), 0), "name")->valuestring, "stage 0");
    cJSON_Delete(o);
}

/* Read every line of f (rewound) and parse it. */
static int read_lines(FILE *f, cJSON **out, int cap) {
    char line[4096];
    int n = 0;
    rewind(f);
    while (n < cap && fgets(line, sizeof line, f)) {
        CHECK(strchr(line, '\n') != NULL);
        out[n] = cJSON_Parse(line);
        CHECK_MSG(out[n] != NULL, "line %d does not parse: %s", n, line);
        n++;
    }
    return n;
}

static int arr_int(const cJSON *o, const char *k, int i) {
    return (int)cJSON_GetArrayItem(cJSON_GetObjectItem(o, k), i)->valuedouble;
}

static void test_trace_lines(void) {
    FILE *f = tmpfile();
    CHECK(f != NULL);
    if (!f) return;
    nx_spec_trace *tr = NULL;
    nx_error err = {0};
    CHECK(nx_spec_trace_open_stream(f, &tr, &err) == NX_OK);
    const nx_token d[3] = {97, 302, 115};
    const float p[3] = {0.75f, NAN, 1.0f};
    const nx_token ids[2] = {97, 249};
    CHECK(nx_spec_trace_draft(tr, 0, 38, 3, "mtp", d, p, 3, &err) == NX_OK);
    CHECK(nx_spec_trace_accept(tr, 0, 38, 1, ids, 2, &err) == NX_OK);
    CHECK(nx_spec_trace_draft(tr, 2, 7, 4, NULL, NULL, NULL, 0, &err) == NX_OK);   /* nothing drafted */
    CHECK(nx_spec_trace_accept(tr, 2, 7, 0, NULL, 0, &err) == NX_OK);
    CHECK(nx_spec_trace_draft(tr, 1, 5, 1, "we\"ird\n", d, p, 1, &err) == NX_OK);  /* escaped name */
    nx_spec_stats st;
    fill(&st);
    CHECK(nx_spec_trace_stats(tr, &st, NULL, &err) == NX_OK);
    CHECK(nx_spec_trace_draft(tr, 0, 0, 1, NULL, NULL, NULL, 2, &err) == NX_ERR_INVALID_ARG);
    CHECK(nx_spec_trace_close(tr, &err) == NX_OK);

    cJSON *l[8] = {0};
    int n = read_lines(f, l, 8);
    fclose(f);
    CHECK_EQ_INT(n, 6);
    if (n == 6) {
        CHECK_STR(cJSON_GetObjectItem(l[0], "evt")->valuestring, "draft");
        CHECK_EQ_INT(cJSON_GetObjectItem(l[0], "seq")->valuedouble, 0);
        CHECK_EQ_INT(cJSON_GetObjectItem(l[0], "pos")->valuedouble, 38);
        CHECK_EQ_INT(cJSON_GetObjectItem(l[0], "k")->valuedouble, 3);
        CHECK_EQ_INT(cJSON_GetArraySize(cJSON_GetObjectItem(l[0], "drafts")), 3);
        CHECK_EQ_INT(arr_int(l[0], "drafts", 2), 115);
        cJSON *pa = cJSON_GetObjectItem(l[0], "p");
        CHECK_NEAR(cJSON_GetArrayItem(pa, 0)->valuedouble, 0.75, 1e-6);
        CHECK(cJSON_IsNull(cJSON_GetArrayItem(pa, 1)));
        CHECK_STR(cJSON_GetObjectItem(l[0], "src")->valuestring, "mtp");
        CHECK_STR(cJSON_GetObjectItem(l[1], "evt")->valuestring, "accept");
        CHECK_EQ_INT(cJSON_GetObjectItem(l[1], "n")->valuedouble, 1);
        CHECK_EQ_INT(arr_int(l[1], "ids", 1), 249);
        CHECK_EQ_INT(cJSON_GetArraySize(cJSON_GetObjectItem(l[2], "drafts")), 0);
        CHECK(cJSON_GetObjectItem(l[2], "src") == NULL);
        CHECK(cJSON_GetObjectItem(l[3], "ids") == NULL);
        CHECK_STR(cJSON_GetObjectItem(l[4], "src")->valuestring, "we\"ird");
        CHECK_STR(cJSON_GetObjectItem(l[5], "evt")->valuestring, "stats");
        CHECK_EQ_INT(cJSON_GetObjectItem(l[5], "drafted")->valuedouble, 5);
    }
    for (int i = 0; i < n; i++) cJSON_Delete(l[i]);
}

static void test_trace_files(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/test_spec_stats_%d.ndjson", NX_BINARY_DIR, (int)getpid());
    nx_spec_trace *tr = NULL;
    nx_error err = {0};
    CHECK(nx_spec_trace_open(path, &tr, &err) == NX_OK);
    const nx_token d[2] = {1, 2};
    for (int r = 0; r < 100; r++) {
        CHECK(nx_spec_trace_draft(tr, r % 4, r, 2, "ngram", d, NULL, 2, &err) == NX_OK);
        CHECK(nx_spec_trace_accept(tr, r % 4, r, r % 3, d, 1, &err) == NX_OK);
    }
    CHECK(nx_spec_trace_close(tr, &err) == NX_OK);
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    if (f) {
        cJSON *l[256] = {0};
        int n = read_lines(f, l, 256);
        CHECK_EQ_INT(n, 200);
        if (n == 200) {
            CHECK_EQ_INT(cJSON_GetObjectItem(l[199], "pos")->valuedouble, 99);
            CHECK_EQ_INT(cJSON_GetArraySize(cJSON_GetObjectItem(l[198], "p")), 0);   /* p not given */
        }
        for (int i = 0; i < n; i++) cJSON_Delete(l[i]);
        fclose(f);
    }
    remove(path);

    CHECK(nx_spec_trace_open("/nonexistent-dir/x/trace.ndjson", &tr, &err) == NX_ERR_IO && !tr);
    CHECK(strstr(err.msg, "/nonexistent-dir/x/trace.ndjson") != NULL);
    CHECK(nx_spec_trace_open("", &tr, &err) == NX_ERR_INVALID_ARG);
    CHECK(nx_spec_trace_close(NULL, &err) == NX_OK);

    /* a failing device: the error surfaces (at the latest at close) */
    if (access("/dev/full", W_OK) == 0) {
        CHECK(nx_spec_trace_open("/dev/full", &tr, &err) == NX_OK);
        nx_status st = NX_OK;
        for (int r = 0; r < 2000 && st == NX_OK; r++) st = nx_spec_trace_accept(tr, 0, r, 0, d, 2, &err);
        nx_status cl = nx_spec_trace_close(tr, &err);
        CHECK(st == NX_ERR_IO || cl == NX_ERR_IO);
        CHECK(strstr(err.msg, "failed") != NULL);
    }
}

int main(void) {
    RUN(test_counters);
    RUN(test_summary_and_json);
    RUN(test_trace_lines);
    RUN(test_trace_files);
    return test_summary();
}
