/* kace — kernel-aware colocation for GPU sharing.
 *
 * Umbrella header of libkace. Conventions used by every public function:
 *  - Functions return a kace_status; KACE_OK is 0. On failure the context
 *    holds a message with the detail a user needs (file, line, column, value).
 *  - The library never prints and never exits. Diagnostics go to the log
 *    callback set with kace_ctx_set_log (none by default).
 *  - Objects returned through an out-pointer are owned by the caller and are
 *    released with the matching *_free(&p) function, which sets p to NULL.
 */
#ifndef KACE_KACE_H
#define KACE_KACE_H

#include <stdarg.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KACE_VERSION "0.1.0"

typedef enum kace_status {
    KACE_OK = 0,
    KACE_ERR_NOMEM,       /* allocation failed */
    KACE_ERR_IO,          /* a file could not be opened, read or written */
    KACE_ERR_PARSE,       /* malformed input: the message names file:line:column */
    KACE_ERR_INVALID,     /* bad argument or value (NaN, negative, out of range) */
    KACE_ERR_NOT_FOUND,   /* unknown workload, model, split, ... */
    KACE_ERR_STORE,       /* SQLite error, locked or incompatible store */
    KACE_ERR_MODEL,       /* model cannot be fitted or used */
    KACE_ERR_UNSUPPORTED  /* feature not available in this build or machine */
} kace_status;

/* A short, static description of a status code. */
const char *kace_strerror(kace_status status);

typedef enum kace_log_level { KACE_LOG_DEBUG, KACE_LOG_INFO, KACE_LOG_WARN } kace_log_level;
typedef void (*kace_log_fn)(void *user, kace_log_level level, const char *message);

/* The context carries the last error message and the log callback. It is
 * not thread-safe: use one per thread. */
typedef struct kace_ctx kace_ctx;

/* Returns NULL only when out of memory. */
kace_ctx *kace_ctx_new(void);
void kace_ctx_free(kace_ctx **ctx);
/* The message of the last failure ("" when none). Valid until the next call
 * that fails on the same context. */
const char *kace_errmsg(const kace_ctx *ctx);
void kace_ctx_set_log(kace_ctx *ctx, kace_log_fn fn, void *user);

/* The one way kace writes a file that must never be seen half-written: the
 * whole of data[0..len) goes to a temporary dot file in the same folder, is
 * fsync'ed, renamed over path (mode 0644) and the folder fsync'ed, so that a
 * reader sees the old file or the new one and the rename survives a crash.
 * On failure path is as it was and no temporary file stays (KACE_ERR_IO). */
kace_status kace_write_file_durable(kace_ctx *ctx, const char *path, const char *data, size_t len);

/* Records a failure on ctx and returns status (for the library's own use and
 * for front ends that want one place for messages). */
kace_status kace_fail(kace_ctx *ctx, kace_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void kace_log(kace_ctx *ctx, kace_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#ifdef __cplusplus
}
#endif

#endif
