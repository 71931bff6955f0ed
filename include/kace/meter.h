/* Progress of long work (an import, an evaluation, a replay), for front ends
 * that show it. The library never prints: it reports through the meter
 * callback set on the context, and the front end decides whether and how to
 * draw it (kace's CLI: one updating line on a terminal, nothing otherwise).
 */
#ifndef KACE_METER_H
#define KACE_METER_H

#include "kace/kace.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kace_meter_state {
    const char *what; /* the phase: "reading", "storing", "evaluating", "replaying" (static strings) */
    const char *unit; /* what done and total count: "bytes", "rows", "tasks", "jobs" */
    double done;      /* units done so far in this phase */
    double total;     /* units in the phase; 0 when unknown */
    int finished;     /* 1 on the phase's last report (done == total when it ran to its end) */
} kace_meter_state;

typedef void (*kace_meter_fn)(void *user, const kace_meter_state *state);

/* Sets (fn NULL: removes) the progress callback of ctx. It is called on the
 * thread that owns ctx, at the start of a phase, at most about a thousand
 * times during it, and once at its end. */
void kace_ctx_set_meter(kace_ctx *ctx, kace_meter_fn fn, void *user);

/* For the library's own long loops (no-ops without a callback or a ctx). A
 * phase begins with begin, advances with add (units more) or to (units in
 * all), and ends with end; a new begin ends the phase before it. */
void kace_meter_begin(kace_ctx *ctx, const char *what, const char *unit, double total);
void kace_meter_add(kace_ctx *ctx, double units);
void kace_meter_to(kace_ctx *ctx, double done);
void kace_meter_end(kace_ctx *ctx);

#ifdef __cplusplus
}
#endif

#endif
