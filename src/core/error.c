/* error.c — error records and the thread-local last-error slot of the public API. */
#include "core/error.h"
#include <stdio.h>
#include <string.h>

static _Thread_local char g_last_error[NX_ERROR_MSG_MAX];

nx_status nx_fail(nx_error *err, nx_status code, const char *fmt, ...) {
    if (!err) return code;
    err->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return code;
}

nx_status nx_error_prefix(nx_error *err, const char *fmt, ...) {
    if (!err) return NX_ERR_INTERNAL;
    char prefix[NX_ERROR_MSG_MAX], old[NX_ERROR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    snprintf(err->msg, sizeof err->msg, "%s: %s", prefix, old);
    return err->code;
}

void nx_error_clear(nx_error *err) {
    if (!err) return;
    err->code = NX_OK;
    err->msg[0] = '\0';
}

nx_status nx_error_publish(const nx_error *err) {
    if (!err) return NX_OK;
    snprintf(g_last_error, sizeof g_last_error, "%s", err->msg);
    return err->code;
}

const char *nx_last_error(void) { return g_last_error; }

const char *nx_status_str(nx_status s) {
    switch (s) {
    case NX_OK: return "NX_OK";
    case NX_ERR_INVALID_ARG: return "NX_ERR_INVALID_ARG";
    case NX_ERR_IO: return "NX_ERR_IO";
    case NX_ERR_FORMAT: return "NX_ERR_FORMAT";
    case NX_ERR_UNSUPPORTED: return "NX_ERR_UNSUPPORTED";
    case NX_ERR_NOMEM: return "NX_ERR_NOMEM";
    case NX_ERR_RANGE: return "NX_ERR_RANGE";
    case NX_ERR_INTERNAL: return "NX_ERR_INTERNAL";
    }
    return "NX_ERR_UNKNOWN";
}

#ifndef NX_VERSION_STRING
#define NX_VERSION_STRING "0.0.0"
#endif
const char *nx_version(void) { return NX_VERSION_STRING; }
