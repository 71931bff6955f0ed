/* Reading a measurement file for import in batches of rows, so that a large
 * file is never held in memory whole (its bytes are mapped and handed back
 * as they are read). Internal: the store's import uses it. */
#ifndef KACE_LIB_IMPORT_READER_H
#define KACE_LIB_IMPORT_READER_H

#include "kace/import.h"

typedef struct kace_import_reader kace_import_reader;

/* Opens path and reads its header. What is not a regular file (a FIFO, a
 * device, a folder) is refused at once with KACE_ERR_IO: it is opened
 * without waiting for a writer and never read. */
kace_status kace_import_reader_open(kace_ctx *ctx, const char *path, const kace_import_options *opt,
                                    kace_import_reader **out);
kace_file_kind kace_import_reader_kind(const kace_import_reader *r);
/* Whether the file's rows come in batches (colocations, raw campaigns):
 * then a row repeated in another batch of the file is for the caller to
 * find. Files of other kinds come whole in one batch, checked whole. */
bool kace_import_reader_in_batches(const kace_import_reader *r);
/* The next batch: at most max_rows records of a file read in batches, the
 * whole file otherwise; *out NULL after the last one. Each batch is checked
 * as kace_import_parse_file checks a file (within the batch); a file with
 * no data rows fails on its last batch. Free each with
 * kace_import_batch_free. */
kace_status kace_import_reader_next(kace_ctx *ctx, kace_import_reader *r, size_t max_rows, kace_import_batch **out);
void kace_import_reader_close(kace_import_reader **r);

#endif
