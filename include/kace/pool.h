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
 * With the options' cpu_shares, member i runs on share i mod cpu_shares of
 * kace's CPUs, its thread counts bounded to it (kace_run_options.cpu_shares,
 * include/kace/runner.h): the same CPUs in every run it is in. Members
 * started ahead are in the options' held list (kace_run_options.held) while
 * they wait at their gate: every run, the pool's and kace_run's, moves them
 * off its members' CPUs at its start, and the gate's opening puts each back
 * on its own share (and sets its kace_proc_result.gate_open_ns) first.
 *
 * Every call has one deadline (its timeout_s, or the options' timeout_s),
 * and pausing or stopping after it gets the options' grace periods, as
 * kace_run's ending does. The pool never prints: the members' stderr goes
 * to the options' stderr_fd. */
#ifndef KACE_POOL_H
#define KACE_POOL_H

#include <stddef.h>

#include "kace/catalog.h"
#include "kace/kace.h"
#include "kace/mps.h"
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

/* The same start in two halves, so that members import and build on the
 * CPU while something else measures. kace_pool_start_ahead starts the
 * first n_ahead members (fewer than n when the host's memory holds no
 * more) under the injection library cupti (CUDA_INJECTION64_PATH, nothing
 * recorded), each held at its CUDA start by the library's gate
 * ($KACE_CUPTI_GATE, a FIFO the pool holds): not an MPS client yet, nor on
 * the GPU. cupti NULL or n_ahead 0: nothing starts ahead. kace_pool_open
 * (once the pool's turn has come and its MPS daemon is up) starts the
 * other members, opens the gate and waits as kace_pool_start does (same
 * timeout and results). A pool not opened runs nothing; stopping or
 * freeing it kills what waits at the gate. */
kace_status kace_pool_start_ahead(kace_ctx *ctx, const kace_proc_spec *specs, size_t n, const kace_run_options *opt,
                                  const char *cupti, size_t n_ahead, kace_pool **out);
kace_status kace_pool_open(kace_ctx *ctx, kace_pool *pool, double timeout_s, kace_pool_result *started);
/* Members started ahead, held at the gate until kace_pool_open. */
size_t kace_pool_started_ahead(const kace_pool *pool);

/* A cold run in two halves: its n members (1..KACE_RUN_MAX_PROCS) started
 * now under cupti, each held at its CUDA start as kace_pool_start_ahead
 * holds them (cupti NULL: they start at the run), and never paused: their
 * run (kace_pool_run_cold) opens the gate, measures them together from
 * each one's first record as kace_run measures processes started afresh
 * (warm-up, window, timeout and tick of run; results[i] for member i, pid
 * and n_records included) and stops them all at their step boundary (then
 * kace_pool_member says how each ended). Only the start-up before their
 * CUDA start moves out of the run: the processes are new ones. */
kace_status kace_pool_start_cold(kace_ctx *ctx, const kace_proc_spec *specs, size_t n, const kace_run_options *opt,
                                 const char *cupti, kace_pool **out);
kace_status kace_pool_run_cold(kace_ctx *ctx, kace_pool *pool, const kace_run_options *run,
                               kace_pool_result *results);

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

/* ---- the first minute's probe: sizing the pool and the window -----------------
 *
 * kace_pool_probe measures, against the MPS daemon the pool will use:
 *   clients  how many clients the MPS server accepts: copies of a trivial
 *            client (a cheap program that reports once its CUDA context is
 *            up) started in batches, each paused at its first report, until
 *            one fails to start (refused) or the cap is reached; then all
 *            stopped. The server lists a client only after its CUDA start.
 *   memory   MemAvailable (/proc/meminfo) before anything starts (or the
 *            memory cgroup's limit, when smaller), and the resident memory
 *            of one workload's process group once it runs (the most seen
 *            over its curve)
 *   curve    that workload alone as an MPS client at 100%: its progress
 *            records over curve_s, from skip_s after its first step -> the
 *            spread (coefficient of
 *            variation) of its throughput over sliding windows of lengths
 *            from 0.05 s up, doubling every two -> the window that gives the
 *            target relative error (kace_probe_window_rule)
 * and from the first two the pool's size (kace_probe_pool_size). Nothing
 * is stored and nothing printed: the result is the evidence. */

#define KACE_PROBE_WINDOWS 24

typedef struct kace_probe_options {
    kace_run_options run;          /* grace periods, stderr_fd, cancel; cpu_shares pins the workload */
    kace_mps *mps;                 /* the daemon whose server is probed (required) */
    const kace_proc_spec *client;  /* the trivial client (NULL: the client limit is not probed) */
    size_t client_cap;             /* stop counting at this many (0: max_members) */
    size_t client_margin;          /* clients left free below a limit the probe met (a client
                                      refused): the pool holds at most the accepted less these */
    size_t client_batch;           /* started at once (0: 16) */
    double client_start_s;         /* a batch's time to its first reports (0: 30 s); a client not
                                      there by then is stopped and counts as not accepted */
    const kace_proc_spec *workload; /* memory and curve (NULL: neither is probed) */
    double skip_s;                 /* its records in the first skip_s after its first step's end are
                                      left out, and that step (0: 1) */
    double curve_s;                /* the curve's length after that (0: 6) */
    double target_error;           /* the window's relative error wanted (0: 0.02) */
    double window_min_s, window_max_s; /* the window's bounds (0: 1 and 30) */
    double memory_fraction;        /* of MemAvailable the pool may hold (0: 0.8) */
    size_t max_members;            /* the caller's bound (0: KACE_POOL_MAX_MEMBERS) */
    double timeout_s;              /* the whole probe (0: 90) */
} kace_probe_options;

typedef struct kace_probe_result {
    /* clients */
    bool clients_probed;
    size_t clients_accepted;       /* clients the server took, at once */
    bool client_refused;           /* one failed to start: clients_accepted is the limit (else the
                                      cap or the timeout came first: the limit is at least that) */
    size_t clients_listed;         /* the server's client list with all accepted running (-1: unknown) */
    char refusal[512];             /* how the first client that failed ended, with its stderr's end */
    double clients_s;              /* their part's seconds */
    /* memory */
    unsigned long long mem_available_kib; /* 0: unknown */
    unsigned long long mem_limit_kib;     /* the memory cgroup's limit kace's processes inherit (0: none);
                                             the pool is sized to the smaller of the two */
    unsigned long long member_rss_kib;    /* the workload's group (Pss, else resident), the most seen
                                             (0: not measured) */
    /* curve */
    bool curve_ok;                 /* the workload reported through skip_s + curve_s */
    size_t curve_records;
    double curve_span_s, step_s;   /* the curve's span and its median time between records */
    double workload_start_s;       /* from its start to its first record */
    size_t n_windows;
    double window_len_s[KACE_PROBE_WINDOWS], window_cv[KACE_PROBE_WINDOWS]; /* cv NaN: too few data */
    double window_s;               /* the rule's window (NaN: none measured) */
    double window_error;           /* the relative error expected at window_s */
    const char *window_basis;      /* kace_probe_window_rule's */
    /* sizing */
    size_t cpus;                   /* kace's CPUs (kace_cpus_available) */
    size_t pool_members;           /* kace_probe_pool_size's (0: not one member fits) */
    const char *pool_bound;        /* what bounds it: "clients", "memory" or "caller" */
    double seconds;                /* the whole probe */
    char detail[512];              /* what went wrong, in words ("" when nothing) */
} kace_probe_result;

/* Runs the probe (above). Returns KACE_OK when it ran, whatever the
 * processes did (result's detail says what failed; a part that could not be
 * measured leaves its fields unknown and does not bound the pool); an error
 * only for bad arguments or when the runner cannot work. */
kace_status kace_pool_probe(kace_ctx *ctx, const kace_probe_options *opt, kace_probe_result *result);

/* kace_pool_probe with a catalog's workloads (opt's client and workload
 * are not used): its first CUDA C workload as the trivial client (none:
 * the client limit is not probed), its first PyTorch workload for memory
 * and the curve (else its first LLM, else its first workload); each as its
 * catalog line's command. */
kace_status kace_pool_probe_catalog(kace_ctx *ctx, const kace_catalog *cat, const kace_probe_options *opt,
                                    kace_probe_result *result);

/* The host's MemAvailable now (/proc/meminfo), in KiB; 0 when unknown. What
 * the probe reads, and what bounds how many processes start ahead. */
unsigned long long kace_probe_mem_available_kib(void);

/* The evidence in one line (buf, of size n): "probe: MPS clients N
 * (refused at N+1 | at least N) ...; host memory ...; curve ...; window W s
 * (basis, error E%); pool P members (bound by B) in S s". Returns buf. */
const char *kace_probe_describe(const kace_probe_result *r, char *buf, size_t n);

/* The pool's size: the fewest of clients (the MPS server's accepted
 * clients; SIZE_MAX: not probed), floor(memory_fraction x mem_available_kib
 * / member_kib) (either 0: unknown, no bound) and max_members (0:
 * KACE_POOL_MAX_MEMBERS). *bound (may be NULL) names the one that bound it:
 * "clients", "memory" or "caller". 0 when not one member fits. */
size_t kace_probe_pool_size(size_t clients, unsigned long long mem_available_kib, unsigned long long member_kib,
                            double memory_fraction, size_t max_members, const char **bound);

/* The window rule. len_s ascending, cv[i] the spread of throughput over
 * windows of len_s[i] (NaN: not measured). The shortest measured length
 * whose cv, and every longer measured length's, is at most target (a dip
 * of periodic noise at one length does not count unless longer windows
 * hold it): basis "measured". When even the longest measured is above
 * target, white noise's law from it, cv ~ 1/sqrt(len): basis
 * "extrapolated". Then bounded to [min_s, max_s]: basis "min" or "max" (at
 * max, *error says what the window gives). NaN with basis "unmeasured"
 * when no cv is finite. *error: the relative error expected (may be NULL). */
double kace_probe_window_rule(const double *len_s, const double *cv, size_t n, double target, double min_s,
                              double max_s, double *error, const char **basis);

#ifdef __cplusplus
}
#endif

#endif
