/*
 * log.h — the logger, the one piece of global mutable state in libnextn.
 * nx_log() formats a line and hands it to the installed callback (default: stderr).
 */
#ifndef NX_CORE_LOG_H
#define NX_CORE_LOG_H

#include "nextn.h"

void nx_log(nx_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define NX_DEBUG(...) nx_log(NX_LOG_DEBUG, __VA_ARGS__)
#define NX_INFO(...)  nx_log(NX_LOG_INFO, __VA_ARGS__)
#define NX_WARN(...)  nx_log(NX_LOG_WARN, __VA_ARGS__)
#define NX_ERROR(...) nx_log(NX_LOG_ERROR, __VA_ARGS__)

#endif
