/* kace profile's recipe (lib/measure/profile.c): one workload alone on the
 * GPU twice, then its profile as one import batch.
 *   1. a clean run, with the CUPTI injection library recording its
 *      warm-up's launches only (no replay), or without a replay cap without
 *      the library at all (an inherited CUDA_INJECTION64_PATH is removed
 *      too): exclusive throughput from its progress records, the NVML
 *      system metrics of its steady window, and the warm-up's kernel
 *      signatures by GPU time;
 *   2. a counters run with the injection library: the kernel metrics of the
 *      recording's kernels in that run's steady window. The library replays
 *      profiled kernels for their counters (with a cap, only the signatures
 *      with most of the clean run's GPU time: kace_replay_cap), so this
 *      run's throughput and NVML values are not the workload's own and are
 *      not used.
 * Without counters (no_counters), one run: the clean run with the injection
 * library recording kernel launches only (no replay), so that its
 * throughput and NVML values stay the workload's own and its launch records
 * give the launch metrics (threads, registers, static shared memory); the
 * counter metrics are stored as missing, so models train on the
 * "no-counters" metric set.
 * The library prints nothing: progress goes to a callback, a failure is a
 * status, a kace_profile_failure saying which check failed, and the message
 * on the context. */
#ifndef KACE_PROFILE_H
#define KACE_PROFILE_H

#include <signal.h>
#include <stdbool.h>

#include "kace/kace.h"
#include "kace/kernels.h"
#include "kace/gpu.h"
#include "kace/host.h"
#include "kace/runner.h"

/* Where kace_profile_run stands, for the progress callback. */
typedef enum kace_profile_step {
    KACE_PROFILE_CLEAN_START,    /* the clean run starts */
    KACE_PROFILE_CLEAN_DONE,     /* it succeeded: clean, all, steady, mps_client are set */
    KACE_PROFILE_COUNTERS_START, /* the counters run starts */
    KACE_PROFILE_COUNTERS_DONE,  /* it succeeded: counters, info, kernels are set */
    KACE_PROFILE_LAUNCHES_DONE,  /* no_counters: the clean run's launch records are reduced:
                                    info, kernels are set */
} kace_profile_step;

/* Which check failed (kace_profile_result.failure). */
typedef enum kace_profile_failure {
    KACE_PROFILE_OK,
    KACE_PROFILE_FAIL_ERROR,        /* the runner or a parser failed: the message on the context */
    KACE_PROFILE_FAIL_RUN,          /* a run's workload did not report through its window: see the
                                       run's kace_proc_result (status, detail, stderr_tail) */
    KACE_PROFILE_FAIL_SAMPLING,     /* NVML sampling failed during the clean run (the message on
                                       the context is NVML's) */
    KACE_PROFILE_FAIL_NO_RECORDING, /* the counters run left an empty or no recording: the
                                       workload never initialised CUDA */
    KACE_PROFILE_FAIL_KERNELS,      /* no kernel metrics from the recording's window (the message
                                       on the context; info.n_errors, info.first_error say what the
                                       injection library reported) */
} kace_profile_failure;

/* The cap on the counters run's kernel replay: the signatures of the clean
 * run's warm-up, the longest GPU time first, until they cover
 * `cover` of its GPU time, at most `max` of them. Stored with the profile
 * (replay_signatures, replay_signatures_seen, replay_time_share,
 * replay_cover, replay_max; and counters_time_share, the share of the
 * counters run's window kernel time that has counters). */
typedef struct kace_replay_cap {
    bool on;           /* a cap was asked (cover < 1 or max > 0): the clean run recorded launches */
    double cover;      /* the option: a share of GPU time, (0, 1] */
    int max;           /* the option: at most this many signatures (0: no limit) */
    size_t seen;       /* signatures ranked: the clean run's warm-up's second half */
    size_t replayed;   /* of which the counters run replays (the first ones by GPU time) */
    double time_share; /* the replayed ones' share of the ranked GPU time */
} kace_replay_cap;

/* How many of n signatures (the longest GPU time first) the cap replays:
 * the fewest whose time covers `cover` of the total, at most max (0: no
 * limit); *share gets their share of the total (1 when the total is 0). */
size_t kace_replay_cap_count(const kace_kernel_signature *s, size_t n, double cover, int max, double *share);

/* A profile's processes started ahead of their turn (kace_profile_ahead_start). */
typedef struct kace_profile_ahead kace_profile_ahead;

/* The CUDA-start gate (gpu/cupti/inject.c): the injection library, at the
 * workload's first CUDA call, waits until kace writes a byte into the FIFO
 * this variable names; KACE_CUPTI_GATE_PID_ENV names kace's process, whose
 * end fails the wait. */
#define KACE_CUPTI_GATE_ENV "KACE_CUPTI_GATE"
#define KACE_CUPTI_GATE_PID_ENV "KACE_CUPTI_GATE_PID"

typedef struct kace_profile_result {
    kace_profile_failure failure;
    int failed_run;                 /* 1 (clean) or 2 (counters): the run a failure belongs to */
    bool no_counters;               /* one clean run with launch records only; counters unused */
    kace_proc_result clean, counters;
    kace_gpu_stats all, steady;     /* NVML over the clean run, and over its steady window */
    bool mps_client;                /* the workload ran as an MPS client (device-wide values dropped) */
    kace_host_stats host;           /* its process group's host CPU and memory over the clean run's
                                       steady window (/proc, once a second) */
    bool host_failed;               /* a /proc read failed: CPU% and MainMem% are stored as missing */
    bool host_mem_failed;           /* the cgroup memory limit could not be read: MainMem% is missing */
    char host_note[320];            /* why a host value is stored as missing ("" when none is) */
    kace_kernel_recording *recording; /* the counters run's recording, or the clean run's without
                                         counters (owned: kace_profile_result_release) */
    kace_kernel_info info;          /* about it (its strings live as long as the recording) */
    kace_kernel_summary kernels;    /* its kernels in that run's steady window */
    kace_replay_cap cap;            /* what the counters run replayed (set before COUNTERS_START) */
    /* The runs' processes were started ahead, each held at its CUDA start
     * until its gate opened (clean.start_ns, counters.start_ns: when they
     * were started; these: when their gates opened, 0 when not gated). */
    int64_t clean_gate_ns, counters_gate_ns;
} kace_profile_result;

typedef struct kace_profile_options {
    const char *name;               /* the workload */
    char *const *argv;              /* its command, NULL-terminated */
    const char *cupti;              /* the injection library (libkace_cupti.so) */
    const char *recording;          /* the file the counters run (or the clean run, without
                                       counters) records into */
    const char *clean_recording;    /* with a replay cap: where the clean run's recording is
                                       moved once ranked (NULL: overwritten by the counters run) */
    /* Profile without kernel replay: one clean run recording launches only
     * (counters, counters_steady_share unused). Cheap enough for a running
     * job's workload; models then use the "no-counters" metric set. */
    bool no_counters;
    /* warmup_s, window_s, timeout_s of each run (kace_run_options_init, then
     * set; the recipe sets stderr_fd, cancel and the NVML tick itself). */
    kace_run_options clean, counters;
    /* The counters run's warm-up starts at its first record that ends an interval at
     * least this share of the clean run's throughput (default 0.1; 0: at its first
     * record). The library replays each kernel signature's first launch, so the first
     * steps are slow: on an H200, BERT's first training step took 22.4 s against a
     * steady 0.047 s (0.2%), while kernel tracing left the launch-bound latency
     * workload's counters run at 60% of its clean rate. Counted from the first record,
     * the warm-up could end among steps still replaying (an LLM's first decode steps
     * launch kernels its prefill did not), whose kernels would then weigh in. */
    double counters_steady_share;
    /* Both runs within this many seconds (0: no bound but each run's timeout_s): the
     * clean run gets at most what the counters run's warm-up and window leave, the
     * counters run what the clean run left (a budget not above those fails at once). A
     * workload's start, and the counters run's kernel replay, make its runs' lengths
     * unequal and unknown in advance; a caller with a fixed time (a batch tool's call)
     * would otherwise have to split it between them blind. */
    double budget_s;
    /* The cap on kernel replay (kace_replay_cap; defaults 0.95 and 40). A replayed
     * signature cost about 0.24 s on an H200 (BERT: 93 in a 22.4 s first step), and a
     * PyTorch step has hundreds: the counters run replays only the signatures that take
     * most of the GPU's time, ranked from the clean run's warm-up, which then runs with
     * the injection library recording launches only (no replay; the library stops at
     * the steady window). replay_cover 1 and replay_max 0: no cap, every signature
     * replayed, the clean run without the library, as before. */
    double replay_cover;
    int replay_max;
    volatile sig_atomic_t *cancel;  /* non-zero stops the run (NULL: never) */
    /* The processes kace_profile_ahead_start started for these options (NULL:
     * kace_profile_run starts the counters run's process itself, gated, before
     * the clean run, so that it imports while the clean run measures). */
    kace_profile_ahead *ahead;
    /* Called at each step with the result so far (may be NULL). */
    void (*progress)(void *user, kace_profile_step step, const kace_profile_result *r);
    void *user;
} kace_profile_options;

/* Sets the defaults: clean run warm-up 10 s, window 30 s; counters run
 * warm-up 10 s, window 15 s, steady share 0.1; replay cap 0.95 of the GPU
 * time, at most 40 signatures; no callback. */
void kace_profile_options_init(kace_profile_options *opt);

/* Runs the two runs on the GPU gpu samples (opened by the caller) and
 * checks them. KACE_OK: *out holds both runs' results; otherwise
 * out->failure says which check failed (KACE_PROFILE_FAIL_RUN also when a
 * run was cancelled: its status is KACE_PROC_CANCELLED). */
kace_status kace_profile_run(kace_ctx *ctx, kace_gpu *gpu, const kace_profile_options *opt,
                             kace_profile_result *out);

/* Starts both runs' processes of the profile opt describes (the clean
 * run's only without counters), each held at its CUDA start by the
 * injection library's gate, so that a caller profiling workloads one after
 * another lets the next ones import and build on the CPU while one is
 * measured: kace_profile_run with opt->ahead set to *out opens each gate
 * when that run's turn comes, given options for the same workload, command
 * and recording (its budget and timeouts may be set then). opt's name and
 * command must outlive *out (opt itself need not). Through the runner (kace_live_start), each in its own process group;
 * a process that fails to start is that run's failure later, not an
 * error here. */
kace_status kace_profile_ahead_start(kace_ctx *ctx, const kace_profile_options *opt, kace_profile_ahead **out);

/* Kills what is left of the processes (their groups) and removes the
 * gates; NULL-safe. */
void kace_profile_ahead_free(kace_profile_ahead **a);

/* Frees what a kace_profile_run result owns (the recording); the result
 * may come from a failed run. */
void kace_profile_result_release(kace_profile_result *r);

/* The profile of a successful kace_profile_run as one batch (origin
 * "kace-profile"): the clean run's exclusive throughput, its sd and NVML
 * values, the counters run's kernel metrics (without counters: the clean
 * run's launch metrics, and the counter metrics as missing). The caller frees *out
 * (kace_import_batch_free). */
kace_status kace_profile_batch(kace_ctx *ctx, const char *name, const kace_profile_result *r,
                               kace_import_batch **out);

#endif
