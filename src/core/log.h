/*
 * log.h — the logger, the one piece of global mutable state in libnextn.
 *
 * nx_log() formats a line and hands it to the installed callback (nextn.h nx_log_set), else to
 * the default sink: stderr, or the file nx_log_open_file() opened. Two formats:
 *   text: "2026-12-01T21:14:29.123Z nextn info: MSG"; an event adds "EVENT key=value ..." (values
 *         with spaces, quotes or '=' are quoted with \" and \\ escaped);
 *   json: one object per line, {"time":"...Z","level":"info","msg":MSG} or, for an event,
 *         {"time":...,"level":...,"event":EVENT, key: value, ...}.
 * A callback gets the line without the time and "nextn LEVEL:" prefix in text, the whole object
 * in json. nx_log_render() is the formatter itself (tests check its lines).
 * nx_log_install_crash_handler(): SIGSEGV / SIGBUS / SIGABRT / SIGFPE / SIGILL write one line
 * (write(2) only: async-signal-safe) to stderr and the log file, then the signal goes on to the
 * handler that was there before (the default: the process dies with it; a sanitizer's: it reports).
 */
#ifndef NX_CORE_LOG_H
#define NX_CORE_LOG_H

#include <stddef.h>
#include "nextn.h"
#include "core/error.h"

void nx_log(nx_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define NX_DEBUG(...) nx_log(NX_LOG_DEBUG, __VA_ARGS__)
#define NX_INFO(...)  nx_log(NX_LOG_INFO, __VA_ARGS__)
#define NX_WARN(...)  nx_log(NX_LOG_WARN, __VA_ARGS__)
#define NX_ERROR(...) nx_log(NX_LOG_ERROR, __VA_ARGS__)

typedef enum nx_log_format { NX_LOG_TEXT = 0, NX_LOG_JSON } nx_log_format;

typedef enum nx_log_kind { NX_LOG_STR = 0, NX_LOG_INT, NX_LOG_NUM, NX_LOG_BOOL } nx_log_kind;

/* One key = value of an event line. */
typedef struct nx_log_field {
    const char *key;
    nx_log_kind kind;
    const char *s;              /* NX_LOG_STR (NULL: null / empty) */
    long long   i;              /* NX_LOG_INT, NX_LOG_BOOL */
    double      num;            /* NX_LOG_NUM (non-finite: null) */
} nx_log_field;

#define NX_LF_STR(k, v) ((nx_log_field){.key = (k), .kind = NX_LOG_STR, .s = (v)})
#define NX_LF_INT(k, v) ((nx_log_field){.key = (k), .kind = NX_LOG_INT, .i = (long long)(v)})
#define NX_LF_NUM(k, v) ((nx_log_field){.key = (k), .kind = NX_LOG_NUM, .num = (double)(v)})

void nx_log_set_format(nx_log_format f);
nx_log_format nx_log_get_format(void);
/* Append the default sink's lines to `path` (created 0644) instead of stderr; NULL: stderr again. */
nx_status nx_log_open_file(const char *path, nx_error *err);
/* A structured line (event + fields). */
void nx_log_event(nx_log_level level, const char *event, const nx_log_field *f, int n);
/* Format one line (no newline) into buf; with_prefix: the text sink's time + "nextn LEVEL: ".
 * event NULL: a plain message. Returns the length (truncated to cap - 1). */
size_t nx_log_render(char *buf, size_t cap, nx_log_format fmt, bool with_prefix, nx_log_level level, double unix_time,
                     const char *event, const char *msg, const nx_log_field *f, int n);
void nx_log_install_crash_handler(void);

#endif
