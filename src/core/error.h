/*
 * error.h — how errors travel inside libnextn.
 *
 * Internal functions take an `nx_error *err` (may be NULL) and return nx_status. On failure
 * they fill err with the status and a specific one-line message (file, byte offset, tensor
 * name, expected vs found...) via nx_fail(), and return that status. Nothing prints or exits.
 * Public API wrappers copy the message into the thread-local slot read by nx_last_error().
 */
#ifndef NX_CORE_ERROR_H
#define NX_CORE_ERROR_H

#include "nextn.h"
#include <stdarg.h>

#define NX_ERROR_MSG_MAX 512

typedef struct nx_error {
    nx_status code;                 /* NX_OK when nothing failed */
    char      msg[NX_ERROR_MSG_MAX];/* NUL-terminated message; "" when code == NX_OK */
} nx_error;

/* Record a failure and return `code`. err may be NULL (the message is dropped). */
nx_status nx_fail(nx_error *err, nx_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prefix an existing message: "<prefix>: <old message>". Returns err->code. */
nx_status nx_error_prefix(nx_error *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

void nx_error_clear(nx_error *err);

/* Publish err as the thread's last error (public API boundary); returns err->code. */
nx_status nx_error_publish(const nx_error *err);

#endif
