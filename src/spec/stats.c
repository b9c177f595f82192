/*
 * stats.c — speculation counters, their summaries, and the NDJSON trace writer (stats.h).
 *
 * Owns nothing global: stats are caller-owned plain data, a trace is an object holding its FILE.
 * Promises: a trace line is one complete JSON object ending in '\n' (non-finite numbers become
 * null); a failed write is remembered and reported by every later call and by close.
 */
#include "spec/stats.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ===== Counters ===== */

void nx_spec_stats_reset(nx_spec_stats *st) {
    if (st) memset(st, 0, sizeof *st);
}

void nx_spec_stats_round(nx_spec_stats *st, int stage, int k, int n) {
    if (!st) return;
    if (k < 0) k = 0;
    if (k > NX_SPEC_DRAFT_CAP) k = NX_SPEC_DRAFT_CAP;
    if (n < 0) n = 0;
    if (n > k) n = k;
    st->n_rounds++;
    st->rounds_by_k[k]++;
    st->n_committed += (uint64_t)n + 1;
    if (!k) return;
    st->n_rounds_drafted++;
    st->n_drafted += (uint64_t)k;
    st->n_accepted += (uint64_t)n;
    st->acc_len[n]++;
    for (int i = 0; i < k; i++) {
        st->depth_drafted[i]++;
        if (i <= n) st->depth_reached[i]++;     /* d_{i+1} was judged: d_1..d_i all accepted */
        if (i < n) st->depth_accepted[i]++;
    }
    if (stage >= 0 && stage < NX_SPEC_MAX_STAGES) {
        st->stage_rounds[stage]++;
        st->stage_drafted[stage] += (uint64_t)k;
        st->stage_accepted[stage] += (uint64_t)n;
    }
}

static double add_secs(double acc, double t) {
    return isfinite(t) && t > 0 ? acc + t : acc;
}

void nx_spec_stats_add_time(nx_spec_stats *st, double t_draft, double t_verify, double t_other) {
    if (!st) return;
    st->t_draft = add_secs(st->t_draft, t_draft);
    st->t_verify = add_secs(st->t_verify, t_verify);
    st->t_other = add_secs(st->t_other, t_other);
}

void nx_spec_stats_shadow(nx_spec_stats *st, bool would_pass) {
    if (!st) return;
    st->n_shadow++;
    st->n_shadow_ok += would_pass;
}

void nx_spec_stats_merge(nx_spec_stats *dst, const nx_spec_stats *src) {
    if (!dst || !src) return;
    dst->n_shadow += src->n_shadow;
    dst->n_shadow_ok += src->n_shadow_ok;
    dst->n_rounds += src->n_rounds;
    dst->n_rounds_drafted += src->n_rounds_drafted;
    dst->n_drafted += src->n_drafted;
    dst->n_accepted += src->n_accepted;
    dst->n_committed += src->n_committed;
    for (int i = 0; i < NX_SPEC_DRAFT_CAP; i++) {
        dst->depth_drafted[i] += src->depth_drafted[i];
        dst->depth_reached[i] += src->depth_reached[i];
        dst->depth_accepted[i] += src->depth_accepted[i];
    }
    for (int i = 0; i <= NX_SPEC_DRAFT_CAP; i++) {
        dst->rounds_by_k[i] += src->rounds_by_k[i];
        dst->acc_len[i] += src->acc_len[i];
    }
    for (int s = 0; s < NX_SPEC_MAX_STAGES; s++) {
        dst->stage_rounds[s] += src->stage_rounds[s];
        dst->stage_drafted[s] += src->stage_drafted[s];
        dst->stage_accepted[s] += src->stage_accepted[s];
    }
    dst->t_draft += src->t_draft;
    dst->t_verify += src->t_verify;
    dst->t_other += src->t_other;
}

static double ratio(uint64_t a, uint64_t b) { return b ? (double)a / (double)b : 0.0; }

double nx_spec_stats_accept_rate(const nx_spec_stats *st) { return st ? ratio(st->n_accepted, st->n_drafted) : 0.0; }
double nx_spec_stats_mean_accepted(const nx_spec_stats *st) { return st ? ratio(st->n_accepted, st->n_rounds_drafted) : 0.0; }
double nx_spec_stats_tokens_per_round(const nx_spec_stats *st) { return st ? ratio(st->n_committed, st->n_rounds) : 0.0; }

double nx_spec_stats_tokens_per_s(const nx_spec_stats *st) {
    if (!st) return 0.0;
    double t = st->t_draft + st->t_verify + st->t_other;
    return t > 0 ? (double)st->n_committed / t : 0.0;
}

double nx_spec_stats_depth_rate(const nx_spec_stats *st, int depth) {
    if (!st || depth < 1 || depth > NX_SPEC_DRAFT_CAP || !st->depth_reached[depth - 1]) return NAN;
    return (double)st->depth_accepted[depth - 1] / (double)st->depth_reached[depth - 1];
}

void nx_spec_stats_depth_rates(const nx_spec_stats *st, double *a, int k) {
    double prev = 0.0;
    for (int i = 0; i < k; i++) {
        double r = nx_spec_stats_depth_rate(st, i + 1);
        a[i] = isnan(r) ? prev : r;
        prev = a[i];
    }
}

/* ===== Summaries ===== */

typedef struct sbuf { char *p; size_t size, len; } sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *dst = b->len < b->size ? b->p + b->len : NULL;
    size_t room = b->len < b->size ? b->size - b->len : 0;
    int w = vsnprintf(dst, room, fmt, ap);
    va_end(ap);
    if (w > 0) b->len += (size_t)w;
}

static int last_nonzero(const uint64_t *v, int n) {
    int last = -1;
    for (int i = 0; i < n; i++) if (v[i]) last = i;
    return last;
}

static const char *stage_name(const char *const *names, int s, char *tmp, size_t n) {
    if (names && names[s]) return names[s];
    snprintf(tmp, n, "stage %d", s);
    return tmp;
}

size_t nx_spec_stats_summary(const nx_spec_stats *st, const char *const *stage_names, char *buf, size_t size) {
    sbuf b = { buf, buf ? size : 0, 0 };
    if (b.size) buf[0] = '\0';
    if (!st) return 0;
    sb_printf(&b, "speculation: %llu rounds (%llu with drafts), drafted %llu, accepted %llu (%.1f%%), "
                  "mean accepted %.2f, %.2f tokens/round\n",
              (unsigned long long)st->n_rounds, (unsigned long long)st->n_rounds_drafted,
              (unsigned long long)st->n_drafted, (unsigned long long)st->n_accepted,
              100.0 * nx_spec_stats_accept_rate(st), nx_spec_stats_mean_accepted(st),
              nx_spec_stats_tokens_per_round(st));
    int last = last_nonzero(st->depth_drafted, NX_SPEC_DRAFT_CAP);
    if (last >= 0) {
        sb_printf(&b, "  acceptance by depth:");
        for (int i = 0; i <= last; i++) {
            double r = nx_spec_stats_depth_rate(st, i + 1);
            if (isnan(r)) sb_printf(&b, " %d:-", i + 1);
            else sb_printf(&b, " %d:%.3f", i + 1, r);
        }
        sb_printf(&b, "\n");
    }
    char tmp[32];
    int n_st = 0;
    for (int s = 0; s < NX_SPEC_MAX_STAGES; s++) if (st->stage_rounds[s]) n_st++;
    if (n_st > 1)
        for (int s = 0; s < NX_SPEC_MAX_STAGES; s++)
            if (st->stage_rounds[s])
                sb_printf(&b, "  %s: %llu rounds, drafted %llu, accepted %llu (%.1f%%)\n",
                          stage_name(stage_names, s, tmp, sizeof tmp), (unsigned long long)st->stage_rounds[s],
                          (unsigned long long)st->stage_drafted[s], (unsigned long long)st->stage_accepted[s],
                          100.0 * ratio(st->stage_accepted[s], st->stage_drafted[s]));
    if (st->t_draft + st->t_verify + st->t_other > 0)
        sb_printf(&b, "  time: draft %.3f s, verify %.3f s, other %.3f s; %.1f tokens/s\n",
                  st->t_draft, st->t_verify, st->t_other, nx_spec_stats_tokens_per_s(st));
    return b.len;
}

static bool add_num(cJSON *o, const char *k, double v) {
    cJSON *x = isfinite(v) ? cJSON_CreateNumber(v) : cJSON_CreateNull();
    return x && cJSON_AddItemToObject(o, k, x);
}

static bool add_u64_array(cJSON *o, const char *k, const uint64_t *v, int n) {
    cJSON *a = cJSON_CreateArray();
    if (!a || !cJSON_AddItemToObject(o, k, a)) { cJSON_Delete(a); return false; }
    int last = last_nonzero(v, n);
    for (int i = 0; i <= last; i++) {
        cJSON *x = cJSON_CreateNumber((double)v[i]);
        if (!x || !cJSON_AddItemToArray(a, x)) { cJSON_Delete(x); return false; }
    }
    return true;
}

cJSON *nx_spec_stats_json(const nx_spec_stats *st, const char *const *stage_names) {
    if (!st) return NULL;
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    bool ok = add_num(o, "rounds", (double)st->n_rounds) && add_num(o, "rounds_drafted", (double)st->n_rounds_drafted) &&
              add_num(o, "drafted", (double)st->n_drafted) && add_num(o, "accepted", (double)st->n_accepted) &&
              add_num(o, "committed", (double)st->n_committed) &&
              add_num(o, "accept_rate", nx_spec_stats_accept_rate(st)) &&
              add_num(o, "mean_accepted", nx_spec_stats_mean_accepted(st)) &&
              add_num(o, "tokens_per_round", nx_spec_stats_tokens_per_round(st)) &&
              add_num(o, "draft_s", st->t_draft) && add_num(o, "verify_s", st->t_verify) &&
              add_num(o, "other_s", st->t_other) && add_num(o, "tokens_per_s", nx_spec_stats_tokens_per_s(st));
    cJSON *depth = ok ? cJSON_CreateArray() : NULL;
    ok = depth && cJSON_AddItemToObject(o, "by_depth", depth);
    if (!ok) cJSON_Delete(depth);
    int last = last_nonzero(st->depth_drafted, NX_SPEC_DRAFT_CAP);
    for (int i = 0; ok && i <= last; i++) {
        cJSON *e = cJSON_CreateObject();
        ok = e && cJSON_AddItemToArray(depth, e);
        if (!ok) { cJSON_Delete(e); break; }
        ok = add_num(e, "depth", i + 1) && add_num(e, "drafted", (double)st->depth_drafted[i]) &&
             add_num(e, "reached", (double)st->depth_reached[i]) &&
             add_num(e, "accepted", (double)st->depth_accepted[i]) &&
             add_num(e, "rate", nx_spec_stats_depth_rate(st, i + 1));
    }
    ok = ok && add_u64_array(o, "rounds_by_k", st->rounds_by_k, NX_SPEC_DRAFT_CAP + 1) &&
         add_u64_array(o, "accepted_len", st->acc_len, NX_SPEC_DRAFT_CAP + 1);
    cJSON *stages = ok ? cJSON_CreateArray() : NULL;
    ok = stages && cJSON_AddItemToObject(o, "stages", stages);
    if (!ok) cJSON_Delete(stages);
    char tmp[32];
    for (int s = 0; ok && s < NX_SPEC_MAX_STAGES; s++) {
        if (!st->stage_rounds[s]) continue;
        cJSON *e = cJSON_CreateObject();
        ok = e && cJSON_AddItemToArray(stages, e);
        if (!ok) { cJSON_Delete(e); break; }
        cJSON *nm = cJSON_CreateString(stage_name(stage_names, s, tmp, sizeof tmp));
        ok = nm && cJSON_AddItemToObject(e, "name", nm);
        if (!ok) { cJSON_Delete(nm); break; }
        ok = add_num(e, "stage", s) && add_num(e, "rounds", (double)st->stage_rounds[s]) &&
             add_num(e, "drafted", (double)st->stage_drafted[s]) &&
             add_num(e, "accepted", (double)st->stage_accepted[s]);
    }
    if (!ok) { cJSON_Delete(o); return NULL; }
    return o;
}

double nx_spec_time_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ===== Trace ===== */

struct nx_spec_trace {
    FILE *f;
    bool own;                    /* fclose at close */
    bool failed;                 /* a write failed (sticky) */
    char path[256];
};

nx_status nx_spec_trace_open_stream(FILE *f, nx_spec_trace **out, nx_error *err) {
    if (!out) return nx_fail(err, NX_ERR_INVALID_ARG, "spec trace: no output pointer");
    *out = NULL;
    if (!f) return nx_fail(err, NX_ERR_INVALID_ARG, "spec trace: no stream");
    nx_spec_trace *t = calloc(1, sizeof *t);
    if (!t) return nx_fail(err, NX_ERR_NOMEM, "spec trace: out of memory");
    t->f = f;
    snprintf(t->path, sizeof t->path, "(stream)");
    *out = t;
    return NX_OK;
}

nx_status nx_spec_trace_open(const char *path, nx_spec_trace **out, nx_error *err) {
    if (!out) return nx_fail(err, NX_ERR_INVALID_ARG, "spec trace: no output pointer");
    *out = NULL;
    if (!path || !*path) return nx_fail(err, NX_ERR_INVALID_ARG, "spec trace: empty path");
    /* "-" is stderr: stdout carries the generated text, which the trace must never mix into */
    if (!strcmp(path, "-")) return nx_spec_trace_open_stream(stderr, out, err);
    FILE *f = fopen(path, "w");
    if (!f) return nx_fail(err, NX_ERR_IO, "spec trace: cannot create %s: %s", path, strerror(errno));
    nx_status st = nx_spec_trace_open_stream(f, out, err);
    if (st) { fclose(f); return st; }
    (*out)->own = true;
    snprintf((*out)->path, sizeof (*out)->path, "%s", path);
    return NX_OK;
}

static nx_status trace_check(nx_spec_trace *tr, int rc, nx_error *err) {
    if (rc < 0) tr->failed = true;
    return tr->failed ? nx_fail(err, NX_ERR_IO, "spec trace: write to %s failed", tr->path) : NX_OK;
}

static int put_tokens(FILE *f, const char *key, const nx_token *t, int n) {
    if (fprintf(f, ",\"%s\":[", key) < 0) return -1;
    for (int i = 0; i < n; i++)
        if (fprintf(f, i ? ",%d" : "%d", (int)t[i]) < 0) return -1;
    return fputc(']', f) == EOF ? -1 : 0;
}

/* A JSON string of a drafter name: only printable ASCII is kept, quotes and backslashes escaped. */
static int put_name(FILE *f, const char *s) {
    if (fputs(",\"src\":\"", f) == EOF) return -1;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c < 0x20 || c > 0x7e) continue;
        if ((c == '"' || c == '\\') && fputc('\\', f) == EOF) return -1;
        if (fputc(c, f) == EOF) return -1;
    }
    return fputc('"', f) == EOF ? -1 : 0;
}

nx_status nx_spec_trace_draft(nx_spec_trace *tr, nx_seq_id seq, nx_pos pos, int k, const char *src,
                              const nx_token *drafts, const float *p, int n, nx_error *err) {
    if (!tr) return nx_fail(err, NX_ERR_INVALID_ARG, "spec trace: no trace");
    if (n < 0 || (n > 0 && !drafts)) return nx_fail(err, NX_ERR_INVALID_ARG, "spec trace: bad drafts (%d)", n);
    if (tr->failed) return trace_check(tr, 0, err);
    FILE *f = tr->f;
    int rc = fprintf(f, "{\"evt\":\"draft\",\"seq\":%d,\"pos\":%d,\"k\":%d", (int)seq, (int)pos, k);
    if (rc >= 0) rc = put_tokens(f, "drafts", drafts, n);
    if (rc >= 0) rc = fputs(",\"p\":[", f) == EOF ? -1 : 0;
    for (int i = 0; rc >= 0 && p && i < n; i++) {
        if (i && fputc(',', f) == EOF) { rc = -1; break; }
        rc = isfinite(p[i]) ? fprintf(f, "%.6g", (double)p[i]) : fprintf(f, "null");
    }
    if (rc >= 0) rc = fputc(']', f) == EOF ? -1 : 0;
    if (rc >= 0 && src) rc = put_name(f, src);
    if (rc >= 0) rc = fputs("}\n", f) == EOF ? -1 : 0;
    return trace_check(tr, rc, err);
}

nx_status nx_spec_trace_accept(nx_spec_trace *tr, nx_seq_id seq, nx_pos pos, int n_accepted,
                               const nx_token *ids, int n_ids, nx_error *err) {
    if (!tr) return nx_fail(err, NX_ERR_INVALID_ARG, "spec trace: no trace");
    if (n_ids < 0 || (n_ids > 0 && !ids)) return nx_fail(err, NX_ERR_INVALID_ARG, "spec trace: bad ids (%d)", n_ids);
    if (tr->failed) return trace_check(tr, 0, err);
    FILE *f = tr->f;
    int rc = fprintf(f, "{\"evt\":\"accept\",\"seq\":%d,\"n\":%d,\"pos\":%d", (int)seq, n_accepted, (int)pos);
    if (rc >= 0 && ids) rc = put_tokens(f, "ids", ids, n_ids);
    if (rc >= 0) rc = fputs("}\n", f) == EOF ? -1 : 0;
    return trace_check(tr, rc, err);
}

nx_status nx_spec_trace_stats(nx_spec_trace *tr, const nx_spec_stats *st, const char *const *stage_names,
                              nx_error *err) {
    if (!tr || !st) return nx_fail(err, NX_ERR_INVALID_ARG, "spec trace: no trace or stats");
    if (tr->failed) return trace_check(tr, 0, err);
    cJSON *o = nx_spec_stats_json(st, stage_names);
    cJSON *evt = o ? cJSON_CreateString("stats") : NULL;
    if (!evt || !cJSON_AddItemToObject(o, "evt", evt)) {
        cJSON_Delete(evt);
        cJSON_Delete(o);
        return nx_fail(err, NX_ERR_NOMEM, "spec trace: out of memory for the stats line");
    }
    char *txt = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!txt) return nx_fail(err, NX_ERR_NOMEM, "spec trace: out of memory for the stats line");
    int rc = fprintf(tr->f, "%s\n", txt);
    cJSON_free(txt);
    return trace_check(tr, rc, err);
}

nx_status nx_spec_trace_close(nx_spec_trace *tr, nx_error *err) {
    if (!tr) return NX_OK;
    int rc = fflush(tr->f) == EOF ? -1 : 0;
    if (rc >= 0 && ferror(tr->f)) rc = -1;
    if (tr->own && fclose(tr->f) == EOF) rc = -1;
    if (rc < 0) tr->failed = true;
    nx_status st = tr->failed ? nx_fail(err, NX_ERR_IO, "spec trace: write to %s failed", tr->path) : NX_OK;
    free(tr);
    return st;
}
