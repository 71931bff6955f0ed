/* Runs K workloads at once, each in its own process group, and measures
 * their steady-window throughput from progress records
 * (docs/progress-protocol.md).
 *
 * Every run has a timeout; a run ends with every process group gone:
 * SIGTERM to the leader (a workload using workloads/kace_progress.* stops at
 * its next report; its helpers, DataLoader workers say, are its to end),
 * SIGTERM to the group once the leader has gone or at 2/3 of a grace period,
 * SIGKILL at its end, then waiting until no process of the group is left. On Linux the calling process becomes a child
 * subreaper (prctl PR_SET_CHILD_SUBREAPER) so that processes a workload leaves
 * behind are reaped here and not left as zombies; only the runner's own
 * process groups are waited for. The runner never prints: the workloads'
 * stderr goes where the caller says, and its last bytes are kept per process.
 */
#ifndef KACE_RUNNER_H
#define KACE_RUNNER_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "kace/kace.h"
#include "kace/progress.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KACE_RUN_MAX_PROCS 16
#define KACE_STDERR_TAIL 2048

/* The control channel (docs/progress-protocol.md): the number of a socket
 * in the workload on which kace sends one message a line and the workload
 * answers at its step boundaries. */
#define KACE_CONTROL_FD_ENV "KACE_CONTROL_FD"

typedef enum kace_control_msg {
    KACE_CONTROL_RUN,   /* "run": go on (after a pause) */
    KACE_CONTROL_PAUSE, /* "pause": wait at the next step boundary for run or stop */
    KACE_CONTROL_STOP   /* "stop": exit with status 0 at the next step boundary */
} kace_control_msg;

/* The message's word on the channel ("run", "pause", "stop"). */
const char *kace_control_msg_name(kace_control_msg m);

typedef struct kace_proc_spec {
    const char *name;               /* label for messages (NULL: argv[0]) */
    char *const *argv;              /* NULL-terminated; argv[0] searched in PATH */
    const char *const *extra_env;   /* NULL-terminated "NAME=value" entries added to
                                       (or replacing in) the caller's environment, e.g.
                                       "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50"; an entry
                                       "NAME" without '=' removes NAME (an inherited
                                       CUDA_INJECTION64_PATH, say); may be NULL */
    const char *stdout_path;        /* workload stdout to this file (NULL: /dev/null) */
    double steady_samples_per_s;    /* > 0: its warm-up starts at the first record that ends an
                                       interval at least this fast, not at its first record: a
                                       first step slowed by kernel replay (22 s for BERT's on an
                                       H200, against 0.047 s) is then never in the window */
    const int *cpus;                /* the CPUs the process (its threads and children) runs on, n_cpus
                                       of them (sched_setaffinity before exec; NULL: none of its own,
                                       kace_run_options.cpu_shares may give it some). A pinned process
                                       gets KACE_THREAD_ENV_NAMES set to its CPU count, unless extra_env
                                       names them */
    size_t n_cpus;
} kace_proc_spec;

/* The thread-count variables a pinned process gets, bounded to its CPUs:
 * OpenMP, MKL and OpenBLAS read theirs; workloads/kace_progress.py applies
 * KACE_TORCH_THREADS with torch.set_num_threads when torch is imported. */
#define KACE_TORCH_THREADS_ENV "KACE_TORCH_THREADS"
#define KACE_THREAD_ENV_NAMES "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", KACE_TORCH_THREADS_ENV

/* The CPUs this process may run on (sched_getaffinity: a job's cgroup
 * cpuset shows there), ascending, up to max; 0 when unknown. */
size_t kace_cpus_available(int *cpus, size_t max);

/* Share i (mod shares) of the n CPUs cpus, into out (up to max): with
 * n >= shares, the i-th of `shares` disjoint runs of consecutive entries,
 * their sizes n / shares or one more; with fewer CPUs than shares, the one
 * CPU cpus[i mod n] (shares then overlap). Returns its size (0: n or shares
 * is 0). */
size_t kace_cpu_share(const int *cpus, size_t n, size_t shares, size_t i, int *out, size_t max);

/* Pins every thread of every process in process group pgid to the n CPUs
 * cpus (n 0: kace's CPUs, kace_cpus_available), with sched_setaffinity
 * thread by thread (/proc/PID/task); passes repeat while they find threads
 * the last pass had not, so that one created meanwhile is caught. Returns
 * the threads pinned (0: the group has gone), or a negative errno when one
 * could not be pinned. */
int kace_pin_group(int pgid, const int *cpus, size_t n);

/* Processes started ahead and held at their CUDA start gate while other
 * runs measure (the warm pool's, include/kace/pool.h, adds and removes
 * them): a list the caller owns and names in kace_run_options.held. */
#define KACE_HELD_MAX 64
typedef struct kace_held {
    int pgids[KACE_HELD_MAX];
    size_t n;
} kace_held;

/* At a run's start: moves every group held (h may be NULL) onto kace's
 * CPUs minus the run's n CPUs run_cpus (as kace_pin_group, one /proc scan
 * for all), so that their imports do not compete with the measured members
 * for their CPUs. With none left (a small machine) they stay where they
 * are. Returns the groups held when it moved them, else 0. */
size_t kace_held_move_off(const kace_held *h, const int *run_cpus, size_t n);

typedef enum kace_proc_status {
    KACE_PROC_OK = 0,      /* reported through its whole steady window */
    KACE_PROC_CRASHED,     /* exited non-zero or was killed by a signal it did not get from kace */
    KACE_PROC_OOM,         /* crashed and its stderr says it ran out of (GPU) memory, or the OOM killer struck */
    KACE_PROC_TIMEOUT,     /* hung, never reported, or too slow to finish its window in time */
    KACE_PROC_EXITED_EARLY,/* exited with status 0 before its window was complete */
    KACE_PROC_BAD_PROGRESS,/* wrote records that break the protocol */
    KACE_PROC_STOPPED,     /* stopped by kace because another workload of the run failed */
    KACE_PROC_CANCELLED,   /* the caller cancelled the run (SIGINT/SIGTERM in the CLI) */
    KACE_PROC_SPAWN_FAILED /* could not be started (command not found, ...) */
} kace_proc_status;

const char *kace_proc_status_name(kace_proc_status s);

typedef struct kace_proc_result {
    kace_proc_status status;
    int pid;                 /* also the process group id */
    int exit_code;           /* -1 when it did not exit normally */
    int term_signal;         /* signal that ended it, 0 when none */
    bool got_sigterm, got_sigkill; /* what kace had to send (SIGTERM: to the leader, at least) */
    bool leader_got_sigterm; /* the leader itself was sent SIGTERM while it ran (not only what it left) */
    bool reported_after_sigterm; /* a progress record is stamped after the leader's first stop
                                    request (its SIGTERM, or the stop message) */
    bool speaks_control;     /* it answered "hello" on the control channel (kace_run_options.control) */
    unsigned n_cpus;         /* the CPUs it was pinned to (0: not pinned) */
    bool got_stop_message;   /* kace asked it to stop with a message, not SIGTERM */
    bool paused_at_stop;     /* the stop message found it paused at a step boundary (a long-lived
                                workload, kace_live): it answered "paused" and was sent nothing since */
    double term_grace_s;     /* the grace period it was given, from the first SIGTERM (0: none sent) */
    double runtime_s;        /* from start to the end of its group */
    kace_throughput throughput;    /* samples_per_s is NaN when not measured */
    size_t n_records;        /* progress records received */
    int64_t first_record_ns; /* 0 when none */
    int64_t start_ns;        /* when kace started it (CLOCK_MONOTONIC; 0: never started) */
    int64_t gate_open_ns;    /* started ahead (include/kace/pool.h): when its CUDA start gate
                                opened, its run's start for it (0: not held at a gate) */
    char detail[512];        /* human-readable reason ("exited with status 3", ...) */
    char stderr_tail[KACE_STDERR_TAIL]; /* last bytes of its stderr */
} kace_proc_result;

/* How the process ended, in words (buf, of size n): "stopped at its next
 * report after SIGTERM" (the step-boundary stop), "ended by SIGTERM before
 * its next report", "killed by SIGKILL after a grace of G s", "exited with
 * status N after SIGTERM, before its next report", "exited on its own with
 * status N", ..., then
 * "; the rest of its group was killed by SIGKILL" where that happened.
 * Returns buf. */
const char *kace_proc_ending(const kace_proc_result *r, char *buf, size_t n);

/* The step-boundary stop: the leader got kace's stop message or SIGTERM,
 * reported once more and exited with status 0, no signal; or the stop
 * message found it paused at a step boundary and it exited with status 0. */
bool kace_proc_stopped_at_report(const kace_proc_result *r);

/* Ended by a signal, or part of its group by SIGKILL, or exited after
 * kace's SIGTERM before reporting again (a SIGTERM handler of its own): it
 * may have left GPU work outstanding (NVIDIA's MPS documentation: its
 * server and the server's other clients may then be in an undefined state). */
bool kace_proc_ended_mid_step(const kace_proc_result *r);

/* What the tick callback sees while the run goes on. */
typedef struct kace_run_view {
    size_t n;                    /* processes */
    const int *pgids;            /* process group ids (0 when not running) */
    int64_t now_ns;              /* CLOCK_MONOTONIC */
    int64_t window_start_ns;     /* 0 until every workload has passed its warm-up */
    bool steady;                 /* now inside the steady window */
} kace_run_view;

typedef struct kace_run_options {
    double warmup_s;      /* discarded after each workload's first record, or its first fast one
                             (kace_proc_spec.steady_samples_per_s) (default 10; 0 = none) */
    double window_s;      /* steady window (default 30) */
    double timeout_s;     /* the whole run, from start (0: warmup + window + 120) */
    double term_grace_s;  /* first SIGTERM -> SIGKILL (default 3), at least 3 x the longest time
                             between the workload's progress records (its step, for most), so
                             that it reaches its next report; the group gets SIGTERM at 2/3 */
    double term_grace_max_s; /* ... but at most this (default 30; below term_grace_s: term_grace_s);
                                a cancelled or failed run gives every workload term_grace_s */
    bool keep_going;      /* false (default): one failure stops the others */
    bool control;         /* offer each workload the control channel ($KACE_CONTROL_FD): one that
                             answers "hello" is stopped by a "stop" message that it reads at its
                             next report, with SIGTERM only as the fallback (at 2/3 of the grace
                             period); one that does not is stopped by SIGTERM (default false) */
    int stderr_fd;        /* workload stderr copied here (-1: only the tail is kept) */
    volatile sig_atomic_t *cancel; /* when it becomes non-zero the run stops (NULL: never) */
    unsigned cpu_shares;  /* > 0: host contention controlled: kace's CPUs (kace_cpus_available) are
                             cut into this many shares (kace_cpu_share) and kace_run's process i, the
                             warm pool's member i, is pinned to share i mod cpu_shares (a spec's own
                             cpus win), its thread counts bounded to it. The same share for a solo
                             and a colocated run, so that a partner's host threads do not take the
                             CPUs a workload had alone (default 0: not pinned; kace_live_start pins
                             only by the spec) */
    kace_held *held;      /* processes held ahead at their gate (NULL: none): each run, kace_run's
                             and the warm pool's, moves them off its members' CPUs at its start
                             (kace_held_move_off); the pool adds its held members and, when their
                             gate opens, takes them out and pins them to their own share */
    double tick_s;        /* tick callback period (default 0.1) */
    void (*tick)(void *user, const kace_run_view *view);
    void *tick_user;
} kace_run_options;

/* Sets every field to its default; change fields after this call. A run
 * gives window_s, timeout_s, term_grace_s, term_grace_max_s and tick_s left at 0
 * their default. */
void kace_run_options_init(kace_run_options *opt);

/* Runs n (1..KACE_RUN_MAX_PROCS) workloads at once until every one has
 * reported through its steady window, or fails, or the timeout. results[i]
 * describes spec[i]. Returns KACE_OK when the run took place (whatever the
 * processes did: see each status); an error only for bad arguments or when
 * the runner itself could not work (pipes, fork). */
kace_status kace_run(kace_ctx *ctx, const kace_proc_spec *spec, size_t n, const kace_run_options *opt,
                     kace_proc_result *results);

/* ---- long-lived workloads ------------------------------------------------------
 *
 * A workload started once and driven by messages on its control channel for
 * as long as the caller likes (the warm pool, include/kace/pool.h): run,
 * pause at the next step boundary, and at the end stop, with the same
 * fallbacks as kace_run (SIGTERM at 2/3 of the grace period, SIGKILL at its
 * end). A workload that does not speak the channel is paused with SIGSTOP to
 * its group and continued with SIGCONT: not at a step boundary, but it does
 * not run while others are measured. The caller polls (kace_live_wait);
 * nothing runs in the background. */

typedef struct kace_live kace_live;

/* What a workload has answered on the control channel so far. */
typedef struct kace_control_answers {
    size_t paused, running, stopping;
} kace_control_answers;

/* Starts spec (which, with everything it points to, must outlive the
 * workload) with the control channel. opt gives the grace periods and the
 * stderr copy (opt->stderr_fd); a failure to start is the workload's state
 * (kace_live_result: KACE_PROC_SPAWN_FAILED), not an error, as in kace_run. */
kace_status kace_live_start(kace_ctx *ctx, const kace_proc_spec *spec, const kace_run_options *opt,
                            kace_live **out);

/* Waits until something arrives from one of the n workloads (a record, an
 * answer, stderr, an exit) or until deadline_ns (CLOCK_MONOTONIC), at most
 * 20 ms, and reads everything that has come. Ended workloads are skipped;
 * past the first KACE_LIVE_WAIT_MAX, workloads are read but not waited for. */
#define KACE_LIVE_WAIT_MAX 64
void kace_live_wait(kace_live *const *live, size_t n, int64_t deadline_ns);

/* Sends run, pause or stop. To a workload that did not say hello by its
 * first record: run and pause are SIGCONT and SIGSTOP to its group, stop is
 * kace_live_stop's ending. False when it could not be sent (it has ended). */
bool kace_live_send(kace_live *l, kace_control_msg m);

/* Ends the n workloads as kace_run ends its own: the stop message to those
 * that speak the channel (SIGTERM to the others), the group's SIGTERM at 2/3
 * of the grace period, SIGKILL at its end, and waits until every group is
 * gone. After deadline_ns every grace period is the plain term_grace_s. */
void kace_live_stop(kace_live *const *live, size_t n, int64_t deadline_ns);

/* Its progress records so far (valid until the next wait), its answers, and
 * whether it has said hello (it answers at its first report, before its
 * first record). */
const kace_progress_record *kace_live_records(const kace_live *l, size_t *n);
kace_control_answers kace_live_answers(const kace_live *l);
/* Ended: its leader has exited (or never started). */
bool kace_live_ended(const kace_live *l);
/* How it stands or ended: pid, speaks_control, exit code, signal, detail,
 * stderr tail. status and detail are set once it ended (KACE_PROC_CRASHED,
 * KACE_PROC_OOM, KACE_PROC_EXITED_EARLY, KACE_PROC_BAD_PROGRESS, ...), or
 * KACE_PROC_OK with kace_live_stop's ending. */
const kace_proc_result *kace_live_result(const kace_live *l);

/* Its CUDA start gate has opened now (kace_proc_result.gate_open_ns). */
void kace_live_gate_opened(kace_live *l);

/* Kills what is left of it (SIGKILL to its group) and frees it. */
void kace_live_free(kace_live **l);

/* CLOCK_MONOTONIC in nanoseconds (the progress records' clock). */
int64_t kace_monotonic_ns(void);

#ifdef __cplusplus
}
#endif

#endif
