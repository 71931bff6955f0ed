/* The context's fields, for the files of lib/base that keep state on it
 * (context.c: message and log; meter.c: progress). Internal. */
#ifndef KACE_LIB_CONTEXT_H
#define KACE_LIB_CONTEXT_H

#include "kace/kace.h"
#include "kace/meter.h"

struct kace_ctx {
    char message[1024];
    kace_log_fn log;
    void *log_user;
    /* Progress (meter.c): the callback, the current phase, and the count at
     * which the callback is called next (about every 0.1% of the total). */
    kace_meter_fn meter;
    void *meter_user;
    kace_meter_state phase;
    double meter_next;
    int phase_open;
};

#endif
