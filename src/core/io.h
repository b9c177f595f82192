/* io.h — small file helpers (whole-file read with a size limit). */
#ifndef NX_CORE_IO_H
#define NX_CORE_IO_H

#include <stddef.h>
#include "core/error.h"

/* Read a whole file into a NUL-terminated malloc'ed buffer (caller frees). Files larger than
 * max_bytes are refused with NX_ERR_RANGE. path "-" reads standard input. */
nx_status nx_read_file(const char *path, size_t max_bytes, char **out, size_t *len, nx_error *err);

#endif
