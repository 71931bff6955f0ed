#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/context.h"

const char *kace_strerror(kace_status status)
{
    switch (status) {
    case KACE_OK: return "success";
    case KACE_ERR_NOMEM: return "out of memory";
    case KACE_ERR_IO: return "input/output error";
    case KACE_ERR_PARSE: return "malformed input";
    case KACE_ERR_INVALID: return "invalid value";
    case KACE_ERR_NOT_FOUND: return "not found";
    case KACE_ERR_STORE: return "store error";
    case KACE_ERR_MODEL: return "model error";
    case KACE_ERR_UNSUPPORTED: return "not supported";
    }
    return "unknown error";
}

kace_ctx *kace_ctx_new(void)
{
    return calloc(1, sizeof(kace_ctx));
}

void kace_ctx_free(kace_ctx **ctx)
{
    if (ctx && *ctx) {
        free(*ctx);
        *ctx = NULL;
    }
}

const char *kace_errmsg(const kace_ctx *ctx)
{
    return ctx ? ctx->message : "";
}

void kace_ctx_set_log(kace_ctx *ctx, kace_log_fn fn, void *user)
{
    ctx->log = fn;
    ctx->log_user = user;
}

kace_status kace_fail(kace_ctx *ctx, kace_status status, const char *fmt, ...)
{
    if (ctx) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(ctx->message, sizeof ctx->message, fmt, ap);
        va_end(ap);
    }
    return status;
}

void kace_log(kace_ctx *ctx, kace_log_level level, const char *fmt, ...)
{
    if (!ctx || !ctx->log)
        return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ctx->log(ctx->log_user, level, msg);
}
