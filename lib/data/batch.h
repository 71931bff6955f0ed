/* Filling an import batch (batch.c), for the parsers: import.c, ncu.c,
 * kernels.c. Internal. */
#ifndef KACE_LIB_DATA_BATCH_H
#define KACE_LIB_DATA_BATCH_H

#include "kace/import.h"

/* Appends one profile value (NaN = missing) to the batch. */
kace_status kace_batch_add_value(kace_ctx *ctx, kace_import_batch *b, const char *workload, const char *metric,
                                 double value, bool embedded);
kace_status kace_batch_add_run(kace_ctx *ctx, kace_import_batch *b, const kace_import_run *run);
kace_status kace_batch_add_split(kace_ctx *ctx, kace_import_batch *b, const kace_import_split *s);

#endif
