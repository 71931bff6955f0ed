/* One colocation measurement: k workloads started together (under a private
 * MPS daemon, or plain time-slicing), their steady windows aligned by the
 * runner (include/kace/runner.h), each one's throughput and status stored as
 * one run in one transaction.
 *
 * What is stored: a run whose status is ok (every member reported through
 * its window), or failed / oom / timeout with each member's own status
 * (crashed, oom, timeout, stopped, ...). What is not: a run cancelled by the
 * caller (kace interrupted), a run whose MPS daemon died (the clients may have
 * run without MPS), an MPS run that MPS was not seen to serve (below), a
 * time-sliced run during which a process of kace's MPS instance was alive,
 * and a workload that could not be started at all (a setup error, not a
 * measurement).
 *
 * MPS is verified, not assumed: while every client runs, kace asks the
 * control daemon for its servers (get_server_list, every 0.5 s and when the
 * steady window starts); at least one answer must name a server. Where the
 * NVML handle offers NVML's MPS client list, every client's process group
 * must appear in it at least once as well. Otherwise nothing is stored and
 * the error says what was seen, with the server log's last lines.
 */
#ifndef KACE_MEASURE_H
#define KACE_MEASURE_H

#include <stdbool.h>

#include "kace/dataset.h"
#include "kace/mps.h"
#include "kace/gpu.h"
#include "kace/runner.h"
#include "kace/store.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KACE_SET_NAME_MAX 128

typedef struct kace_measure_spec {
    int k;
    char workload[KACE_MAX_K][KACE_NAME_MAX];
    int mps_pct[KACE_MAX_K]; /* 1..100 each (100 = no limit; must be 100 under time-slicing) */
    bool timeslice;          /* no MPS: the GPU time-slices between the processes */
    int repetition;          /* 0, 1, ...: which measurement of this colocation */
    char set[KACE_SET_NAME_MAX]; /* "" = default (kace_measure_default_set) */
} kace_measure_spec;

/* "pairs", "triples" or "k<N>" ("solo" for one workload); "timeslice-"
 * before it without MPS. MPS splits other than 100% go to the same set
 * (kace train uses only the 100% runs of a set). */
void kace_measure_default_set(const kace_measure_spec *spec, char *out, size_t size);

typedef struct kace_measure_options {
    kace_run_options run;   /* warm-up, window, timeout, cancel flag, tick callback (kace_measure
                               chains its own checks after the caller's tick); run.cpu_shares pins
                               a cold run's member i, and a pool's member i, to CPU share i */
    kace_mps *mps;          /* the daemon clients join (required unless spec->timeslice). Under
                               time-slicing: kace's instance, which must have no process alive
                               (kace_mps_quit it first); NULL: not checked */
    kace_gpu *gpu_access;   /* optional: a GPU with KACE_GPU_CAP_MPS_LIST (NVML's MPS client list)
                               verifies the clients */
    const char *gpu;        /* GPU name recorded with the run (NULL: gpu_access's NVML name, if any).
                               A member profiled on another GPU is refused (KACE_ERR_INVALID) */
    bool retry_failed;      /* a failed run stored under this identity is replaced by this one
                               (kace campaign, once the members' commands or code changed) */
    bool timeout_is_deadline; /* run.timeout_s is the caller's deadline, cut below the run's own bound:
                                 a run that reaches it did not fail, the time ran out, so it is not
                                 stored (res->cancelled) and a later call measures it (kace campaign) */
} kace_measure_options;

typedef struct kace_measure_result {
    kace_proc_result proc[KACE_MAX_K];
    kace_run_status status; /* ok, failed, oom or timeout */
    bool cancelled;         /* interrupted, or cut by the deadline (timeout_is_deadline): nothing stored */
    bool stored;
    bool retried;           /* it replaced a failed run of the same identity (retry_failed) */
    long long run_id;
    int mps_server_pid;     /* an MPS server seen while the clients ran (0: none, or time-sliced) */
    bool nvml_verified;     /* every client was in NVML's MPS client list */
    bool clients_verified;  /* every member was among the server's clients (get_client_list) */
    char set[KACE_SET_NAME_MAX];
    char exclusive_metric[32]; /* a solo MPS run at a multiple of 10%: the profile value it was
                                  also stored as (exclusive_mps<P>), else "" */
} kace_measure_result;

/* Measures spec (see the top of this file). Returns KACE_OK when the run took
 * place, whatever the workloads did (see result); an error when it could not
 * (unknown workload or command, bad spec, a member profiled on another GPU,
 * MPS daemon down, store error). */
kace_status kace_measure(kace_ctx *ctx, kace_store *store, const kace_measure_spec *spec,
                         const kace_measure_options *opt, kace_measure_result *result);

/* ---- a cold run started ahead ----------------------------------------------------
 *
 * A cold run's members started before its turn, so that their start-up
 * (a PyTorch workload's imports and model build) happens while something
 * else measures: kace_measure_start_ahead starts spec's members now under
 * the injection library cupti, each held at its CUDA start by the library's
 * gate (kace_pool_start_cold, include/kace/pool.h). An MPS run's members
 * carry opt->mps's client environment and are held by it (kace_mps_hold),
 * so quitting the daemon leaves them waiting. kace_measure_ahead_run, when
 * ahead holds its spec, opens their gate and measures them as kace_measure
 * measures a run started afresh (warm-up from each one's first record, the
 * same checks, the same store): its processes are new ones, stopped after
 * the run; only their start-up before CUDA is out of the run's time.
 * kace_measure_ahead_free ends what was not run (its gate never opens). */
typedef struct kace_measure_ahead kace_measure_ahead;

kace_status kace_measure_start_ahead(kace_ctx *ctx, kace_store *store, const kace_measure_spec *spec,
                                     const kace_measure_options *opt, const char *cupti, kace_measure_ahead **out);
/* Whether ahead holds spec's run (its members, shares, mode), not run yet. */
bool kace_measure_ahead_holds(const kace_measure_ahead *ahead, const kace_measure_spec *spec);
/* kace_measure, with spec's members from ahead when it holds them (else, or
 * ahead NULL, started afresh). The caller frees ahead after. */
kace_status kace_measure_ahead_run(kace_ctx *ctx, kace_store *store, const kace_measure_spec *spec,
                                   const kace_measure_options *opt, kace_measure_ahead *ahead,
                                   kace_measure_result *result);
void kace_measure_ahead_free(kace_measure_ahead **ahead);

/* ---- measuring in a warm pool (include/kace/pool.h) ---------------------------
 *
 * The MPS runs of a campaign with each (workload, MPS share) started once:
 * kace_measure_pool_start starts one member per distinct (workload, share)
 * of the given MPS specs (time-sliced ones are left out) as clients of
 * opt->mps, with opt->run's warm-up, window, timeouts and grace periods for
 * every run. kace_measure_in_pool then measures a spec whose members are all
 * in the pool as kace_measure does (MPS verified, the same store, the same
 * statuses), except that nothing is started: a member that crashed mid-run
 * fails that run (stored, as kace_measure stores a crash), and a run naming
 * a member that has ended is an error (KACE_ERR_IO, nothing measured): start
 * a fresh pool (and, after a crash under MPS, a fresh daemon). */
typedef struct kace_measure_pool kace_measure_pool;

/* max_members (1..KACE_POOL_MAX_MEMBERS; 0: that) bounds the pool: specs are
 * taken in order, whole, while their members fit (MPS servers accept a
 * limited number of clients, and each member holds its memory while it
 * waits); the first spec must fit. */
kace_status kace_measure_pool_start(kace_ctx *ctx, kace_store *store, const kace_measure_spec *specs, size_t n,
                                    size_t max_members, const kace_measure_options *opt, double timeout_s,
                                    kace_measure_pool **out);

/* The same start in two halves (kace_pool_start_ahead, include/kace/pool.h):
 * the pool's first max_ahead members start now under the injection library
 * cupti, held at their CUDA start (opt->mps names the daemon whose clients
 * they will be; it need not be up yet), and kace_measure_pool_open, once
 * the daemon is up, starts the others, opens the gate and waits as
 * kace_measure_pool_start does. kace_measure_pool_stop ends a pool that
 * was never opened too. */
kace_status kace_measure_pool_start_ahead(kace_ctx *ctx, kace_store *store, const kace_measure_spec *specs, size_t n,
                                          size_t max_members, const kace_measure_options *opt, const char *cupti,
                                          size_t max_ahead, kace_measure_pool **out);
kace_status kace_measure_pool_open(kace_ctx *ctx, kace_measure_pool *pool, const kace_measure_options *opt,
                                   double timeout_s);
/* Members started ahead (held at the gate until opened). */
size_t kace_measure_pool_started_ahead(const kace_measure_pool *pool);

/* Whether every member of spec (an MPS run) is in the pool. */
bool kace_measure_pool_has(const kace_measure_pool *pool, const kace_measure_spec *spec);

/* opt gives the MPS daemon (the pool's), the GPU, retry_failed and the
 * caller's tick; the windows and timeouts are the pool's. */
kace_status kace_measure_in_pool(kace_ctx *ctx, kace_store *store, kace_measure_pool *pool,
                                 const kace_measure_spec *spec, const kace_measure_options *opt,
                                 kace_measure_result *result);

/* Members, and the pool's own view of each (pid, starts, how it ended). */
const struct kace_pool *kace_measure_pool_members(const kace_measure_pool *pool);

/* Stops every member at its step boundary (kace_pool_stop), then frees. */
void kace_measure_pool_stop(kace_measure_pool **pool);

/* The env entry time-sliced clients get, so that they never join an MPS
 * daemon that happens to run on the machine. */
#define KACE_NO_MPS_PIPE_ENV "CUDA_MPS_PIPE_DIRECTORY=/nonexistent/kace-no-mps"

#ifdef __cplusplus
}
#endif

#endif
