/* A small RFC 4180 CSV reader over a memory buffer that remembers where each
 * field started, so every error can name file:line:column. Internal. */
#ifndef KACE_LIB_CSV_H
#define KACE_LIB_CSV_H

#include <stdbool.h>
#include <stddef.h>

#include "kace/kace.h"

typedef struct kace_csv {
    const char *data;
    size_t len, pos;
    const char *origin; /* file name for messages */
    int line;           /* current line (1-based) of the reader */
    /* The current record. */
    int record_line;
    bool record_terminated; /* the record ended with a newline (not cut off at EOF) */
    size_t n_fields, cap_fields;
    char **fields;      /* NUL-terminated copies, unquoted */
    int *field_line;    /* where each field starts */
    int *field_col;     /* 1-based character column */
    char *buf;          /* storage behind fields */
    size_t buf_len, buf_cap;
    size_t metered;     /* bytes up to here were reported to the context's meter */
} kace_csv;

void kace_csv_init(kace_csv *csv, const char *data, size_t len, const char *origin);
void kace_csv_release(kace_csv *csv);
/* Reads the next record; *has_record is false at end of input. Blank lines
 * are skipped. Fails on an unterminated quote or stray characters after a
 * closing quote. */
kace_status kace_csv_next(kace_ctx *ctx, kace_csv *csv, bool *has_record);

enum {
    KACE_CSV_EMPTY_IS_MISSING = 1 << 0, /* "" reads as NaN instead of an error */
    KACE_CSV_NONNEGATIVE = 1 << 1       /* a value < 0 is an error */
};
/* Parses field i (named column_name in messages) as a finite double. NaN,
 * inf, trailing garbage and (with KACE_CSV_NONNEGATIVE) negatives are
 * errors that name file:line:column. */
kace_status kace_csv_number(kace_ctx *ctx, const kace_csv *csv, size_t i, const char *column_name,
                            unsigned flags, double *out);
/* Parses field i as an integer in [lo, hi]. */
kace_status kace_csv_int(kace_ctx *ctx, const kace_csv *csv, size_t i, const char *column_name, long lo,
                         long hi, long *out);
/* Fails unless field i is a usable workload or metric name (non-empty, fits
 * KACE_NAME_MAX, no control characters). */
kace_status kace_csv_name(kace_ctx *ctx, const kace_csv *csv, size_t i, const char *column_name, char *out,
                          size_t out_size);
/* kace_csv_name for a workload name, which must also follow the rule of
 * include/kace/workload_name.h; a refusal names the field's line and
 * column and the byte of the name that breaks the rule. */
kace_status kace_csv_workload_name(kace_ctx *ctx, const kace_csv *csv, size_t i, const char *column_name, char *out,
                                   size_t out_size);
/* Formats "origin:line:col" of field i into a failure with a message. */
kace_status kace_csv_fail(kace_ctx *ctx, const kace_csv *csv, size_t i, kace_status status, const char *fmt,
                          ...) __attribute__((format(printf, 5, 6)));

/* Reads a whole file into memory (NUL-terminated). Bounded to 1 GiB. */
kace_status kace_read_file(kace_ctx *ctx, const char *path, char **data, size_t *len);

#endif
