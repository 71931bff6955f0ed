/* The warm pool: each workload started once, as one long-lived process
 * (per MPS share it needs: one member per share, its spec's extra_env
 * saying CUDA_MPS_ACTIVE_THREAD_PERCENTAGE), kept paused at a step boundary
 * between runs and driven on its control channel (docs/progress-protocol.md).
 *
 * A run of k members sends each "run", waits until every member's progress
 * records cover the common steady window (the runner's warm-up and window,
 * counted from each member's first record after it resumed), then sends
 * "pause" and reads each member's throughput over the window from its
 * records. A solo run at 100% MPS gives the exclusive throughput. A member
 * that does not speak the channel is paused with SIGSTOP and stopped with
 * SIGTERM (kace_live, include/kace/runner.h).
 *
 * The options' tick callback is called while a run's members run, as
 * kace_run calls it (kace_measure's MPS client checks): pgids are the run's
 * members, in the run's order.
 *
 * Every call has one deadline (its timeout_s, or the options' timeout_s),
 * and pausing or stopping after it gets the options' grace periods, as
 * kace_run's ending does. The pool never prints: the members' stderr goes
 * to the options' stderr_fd. */
#ifndef KACE_POOL_H
#define KACE_POOL_H

#include <stddef.h>

#include "kace/kace.h"
#include "kace/runner.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KACE_POOL_MAX_MEMBERS 32

typedef struct kace_pool kace_pool;

/* One member's outcome in one call. */
typedef struct kace_pool_result {
    kace_proc_status status;    /* KACE_PROC_OK: measured (a run) or paused and ready (the start) */
    int pid;                    /* the member's process (its group), 0 when it never started */
    kace_throughput throughput; /* over the run's window; samples_per_s NaN unless measured */
    size_t n_records;           /* progress records it wrote during this call */
    char detail[512];           /* why not OK, in words */
} kace_pool_result;

/* Starts the n members (1..KACE_POOL_MAX_MEMBERS) at once and waits until
 * each is paused at its first report, or has failed, or timeout_s (0: the
 * options' timeout_s, or 120 s) has passed. specs and everything they point
 * to must outlive the pool. started[i] says how member i stands (may be
 * NULL); a member that failed to start is ended, and any run it is in fails.
 * Returns an error only for bad arguments or when the runner cannot work. */
kace_status kace_pool_start(kace_ctx *ctx, const kace_proc_spec *specs, size_t n, const kace_run_options *opt,
                            double timeout_s, kace_pool **out, kace_pool_result *started);

/* One colocation run of the k members named (indices into the specs,
 * distinct, 1..KACE_RUN_MAX_PROCS of them); timeout_s 0: the options'
 * timeout_s (0 there: warmup + window + 120). results[i] describes
 * members[i]. A member that dies is a failed run (its status and detail say
 * how it ended) and the others are paused and kept; a run naming a member
 * that has ended fails at once. Returns KACE_OK when the run was tried. */
kace_status kace_pool_run(kace_ctx *ctx, kace_pool *pool, const size_t *members, size_t k, double timeout_s,
                          kace_pool_result *results);

/* Members, and how member i stands: its process (pid, speaks_control) and,
 * once it has ended, how (kace_proc_ending). */
size_t kace_pool_size(const kace_pool *pool);
const kace_proc_result *kace_pool_member(const kace_pool *pool, size_t i);
bool kace_pool_alive(const kace_pool *pool, size_t i);
/* How often member i's process was started (the warm pool: once). */
unsigned kace_pool_starts(const kace_pool *pool, size_t i);

/* Stops every member: "stop" to each (it exits at its step boundary, where
 * it is paused), SIGTERM as the fallback, SIGKILL at the end of the grace
 * period; after timeout_s (0: the options' term_grace_max_s) every grace is
 * the plain term_grace_s. Then kace_pool_member says how each ended. */
void kace_pool_stop(kace_pool *pool, double timeout_s);

/* Kills whatever is left (SIGKILL) and frees the pool. */
void kace_pool_free(kace_pool **pool);

#ifdef __cplusplus
}
#endif

#endif
