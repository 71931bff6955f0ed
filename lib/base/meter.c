/* Progress reports through the context's meter callback (include/kace/meter.h).
 * Reports are thinned here, by count, so that a loop may call kace_meter_add
 * for every row; the front end thins them again by time. */
#include "base/context.h"

void kace_ctx_set_meter(kace_ctx *ctx, kace_meter_fn fn, void *user)
{
    if (!ctx)
        return;
    ctx->meter = fn;
    ctx->meter_user = user;
    ctx->phase_open = 0;
}

static void report(kace_ctx *ctx)
{
    double step = ctx->phase.total > 0 ? ctx->phase.total / 1000 : 1;
    ctx->meter_next = ctx->phase.done + (step < 1 ? 1 : step);
    ctx->meter(ctx->meter_user, &ctx->phase);
}

void kace_meter_begin(kace_ctx *ctx, const char *what, const char *unit, double total)
{
    if (!ctx || !ctx->meter)
        return;
    if (ctx->phase_open)
        kace_meter_end(ctx);
    ctx->phase = (kace_meter_state){.what = what, .unit = unit, .done = 0, .total = total > 0 ? total : 0};
    ctx->phase_open = 1;
    report(ctx);
}

void kace_meter_to(kace_ctx *ctx, double done)
{
    if (!ctx || !ctx->meter || !ctx->phase_open)
        return;
    if (ctx->phase.total > 0 && done > ctx->phase.total)
        done = ctx->phase.total;
    ctx->phase.done = done;
    if (done >= ctx->meter_next)
        report(ctx);
}

void kace_meter_add(kace_ctx *ctx, double units)
{
    if (ctx && ctx->meter && ctx->phase_open)
        kace_meter_to(ctx, ctx->phase.done + units);
}

void kace_meter_end(kace_ctx *ctx)
{
    if (!ctx || !ctx->meter || !ctx->phase_open)
        return;
    ctx->phase.finished = 1;
    ctx->phase_open = 0;
    ctx->meter(ctx->meter_user, &ctx->phase);
}
