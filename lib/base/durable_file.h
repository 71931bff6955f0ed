/* The one way kace writes a file that must never be seen half-written: the
 * whole text goes to a temporary file in the same folder (a dot file, so
 * that a folder reader such as kace import skips it), is fsync'ed, renamed
 * over the path, and the folder is fsync'ed so that the rename itself
 * survives a crash. */
#ifndef KACE_LIB_DURABLE_FILE_H
#define KACE_LIB_DURABLE_FILE_H

#include <stddef.h>

#include "kace/kace.h"

/* Writes data[0..len) to path (mode 0644) durably; on failure the path is
 * as it was and no temporary file stays behind (KACE_ERR_IO naming it). */
kace_status kace_write_file_durable(kace_ctx *ctx, const char *path, const char *data, size_t len);

#endif
