/* libkace_cupti.so: kernel metrics of any CUDA program, unchanged.
 *
 * The CUDA driver loads this library when CUDA_INJECTION64_PATH names it and
 * calls InitializeInjection() once. It writes a recording (format in
 * include/kace/kernels.h) to the file named by $KACE_CUPTI_OUTPUT:
 *  - every kernel's grid, block, registers per thread, static and dynamic
 *    shared memory and duration, from CUPTI Activity records
 *    (CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), with CLOCK_MONOTONIC times (a
 *    timestamp callback), so that kace can keep the kernels of the steady
 *    window; kernels launched inside CUDA graphs are recorded too;
 *  - for the first launch of each signature (kernel name, grid, block), up
 *    to $KACE_CUPTI_MAX_PROFILED (default 256) launches after
 *    $KACE_CUPTI_SKIP (default 0), the three Speed-Of-Light metrics ncu
 *    reports, with the Range Profiler in auto range + kernel replay mode:
 *      sm__throughput.avg.pct_of_peak_sustained_elapsed
 *      dram__throughput.avg.pct_of_peak_sustained_elapsed
 *      gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed
 *    ($KACE_CUPTI_COUNTERS=0 turns this off). Launches inside CUDA graphs
 *    produce no launch callbacks, so they never get counters.
 *    $KACE_CUPTI_REPLAY names a file of signatures, one a line
 *    ("gx gy gz bx by bz name"): then only those are replayed, and the
 *    profiler is released once each has been (kace profile writes it from
 *    the clean run's kernels: the ones that take most of the GPU's time).
 *
 * Why the Range Profiler and not PM sampling: the paper's metrics are per
 * kernel, duration-weighted, with ncu's definitions. The Range Profiler with
 * kernel replay measures exactly one kernel with the same metric definitions
 * as ncu, on any GPU from Volta on including Hopper under CUDA 13. PM
 * sampling mixes overlapping kernels and may lack the composite metrics.
 * Replay costs time, so each signature is profiled once, and kace profile
 * measures exclusive throughput in a separate run without this library.
 *
 * Threads. Launch callbacks run on the application's threads (PyTorch
 * launches from several). Two locks, never taken in the other order:
 *  - launch_lock serialises launches while counters are still being
 *    collected, from a launch's API enter to its API exit, so that no other
 *    thread's kernel lands inside a profiled range; once every profiling slot
 *    is used (or counters are off, or no context can have them) launches no
 *    longer touch it;
 *  - out_lock guards the recording file, only around writing it: it is never
 *    held while calling CUPTI.
 *
 * Launches never profiled: into a stream that is capturing a CUDA graph (no
 * kernel runs then, and replaying could invalidate the capture), NCCL
 * kernels (a replayed collective waits for peers that run it once), and
 * launches that fail (their range stays empty; the context is not blamed).
 *
 * One process writes $KACE_CUPTI_OUTPUT: the first to load the library
 * locks it (flock). A child CUDA process that inherits the environment
 * writes $KACE_CUPTI_OUTPUT.<pid> instead of overwriting it.
 *
 * The CUDA-start gate. $KACE_CUPTI_GATE names a FIFO that kace holds open:
 * InitializeInjection (the workload's first CUDA call, after its imports and
 * its model's build on the CPU) writes "kace-cupti: <pid> waits at the CUDA
 * start gate" to stderr and blocks until kace writes a byte into it, so that
 * kace can start workloads ahead and let each touch the GPU when its turn
 * comes. The wait is bounded: it fails (the message on stderr, exit status
 * 75) when kace's process ($KACE_CUPTI_GATE_PID) is gone, when every writer
 * has closed the FIFO, or after $KACE_CUPTI_GATE_TIMEOUT_S (default 3600).
 * The variable is removed once passed: a child that inherits the
 * environment does not wait again.
 *
 * $KACE_CUPTI_TRACE_UNTIL names a file: once it exists (checked at each
 * flush), activity recording stops (kace profile's clean run records its
 * warm-up's launches for the replay cap, and its steady window without
 * CUPTI's activity records).
 *
 * Delivery. CUPTI's periodic flush returns only full buffers, and kace ends
 * workloads with SIGTERM, which never runs atexit. So a helper thread asks
 * for completed buffers (cuptiActivityFlushAll(0)) every
 * $KACE_CUPTI_FLUSH_MS (default 200), and a SIGTERM/SIGINT handler wakes it
 * for a forced flush before the signal is delivered again with the
 * application's own disposition. At a normal exit, atexit does the same.
 *
 * Nothing here may crash or stop the workload: failures are written as
 * "error ..." records and the library carries on with what still works.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* open_memstream, flock */
#endif
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include <cuda.h>
#include <cupti.h>
#include "profiler_host.h"
#include "replay_list.h"
#include <cupti_profiler_target.h>
#include <cupti_range_profiler.h>
#include <cupti_target.h>

#define EXPORT __attribute__((visibility("default")))
#define BUFFER_SIZE (2u << 20) /* about 9.7k kernel records; flushed every 200 ms anyway */
#define MAX_SIGNATURES 8192
#define MAX_CONTEXTS 16
#define N_METRICS 3

static const char *metric_names[N_METRICS] = {
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
};

/* ---- the recording -------------------------------------------------------- */

/* Activity timestamps on the clock of kace's progress records. */
static uint64_t monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;
static FILE *out; /* guarded by out_lock */
/* Set in a fork()ed child: it shares the parent's recording and its locks'
 * state, so it writes nothing (a child that execs loads the library anew). */
static atomic_int in_forked_child;

static void vrecord(const char *fmt, va_list ap)
{
    if (atomic_load(&in_forked_child))
        return;
    pthread_mutex_lock(&out_lock);
    if (out) {
        vfprintf(out, fmt, ap);
        fflush(out);
    }
    pthread_mutex_unlock(&out_lock);
}

/* Writes one record line. Takes out_lock: never call it while holding it. */
static void record(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void record(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vrecord(fmt, ap);
    va_end(ap);
}

static const char *cupti_error(CUptiResult r)
{
    const char *s = NULL;
    if (cuptiGetResultString(r, &s) != CUPTI_SUCCESS || !s)
        s = "unknown CUPTI error";
    return s;
}

/* An error record for a failed CUPTI call, with what to do where that is known. */
static void record_failure(const char *call, CUptiResult r)
{
    record("error %s failed: %s%s\n", call, cupti_error(r),
           r == CUPTI_ERROR_INSUFFICIENT_PRIVILEGES
               ? " (the driver gives GPU performance counters to administrators only: profile as root, or load "
                 "the driver with NVreg_RestrictProfilingToAdminUsers=0)"
               : "");
}

#define TRY(call)                                                                                   \
    do {                                                                                            \
        CUptiResult r_ = (call);                                                                    \
        if (r_ != CUPTI_SUCCESS) {                                                                  \
            record_failure(#call, r_);                                                              \
            return -1;                                                                              \
        }                                                                                           \
    } while (0)

/* ---- activity records ------------------------------------------------------ */

static atomic_ulong n_incomplete; /* forced flushes may deliver kernels without an end time */

/* The correlation IDs of the launches chosen for counters. Should CUPTI give
 * a replayed launch one kernel record per pass, only the first is written:
 * the others would count one launch several times in the reduction's
 * weights. An open-addressing table; its own lock, never held across a
 * CUPTI call. Beyond half its slots, launches are no longer entered. */
#define REPLAYED_SLOTS 4096
static pthread_mutex_t replayed_lock = PTHREAD_MUTEX_INITIALIZER;
static struct replayed_launch {
    uint32_t correlation;
    uint8_t used, written;
} replayed[REPLAYED_SLOTS];
static size_t n_replayed, n_not_entered;

static struct replayed_launch *replayed_slot(uint32_t correlation)
{
    size_t i = (correlation * 2654435761u) & (REPLAYED_SLOTS - 1);
    while (replayed[i].used && replayed[i].correlation != correlation)
        i = (i + 1) & (REPLAYED_SLOTS - 1);
    return &replayed[i];
}

/* 0 is CUPTI_CORRELATION_ID_UNKNOWN: never entered, never matched. */
static void replayed_add(uint32_t correlation)
{
    pthread_mutex_lock(&replayed_lock);
    struct replayed_launch *s = correlation ? replayed_slot(correlation) : NULL;
    if (s && !s->used && n_replayed < REPLAYED_SLOTS / 2) {
        *s = (struct replayed_launch){correlation, 1, 0};
        n_replayed++;
    } else if (!s || !s->used) {
        n_not_entered++;
    }
    pthread_mutex_unlock(&replayed_lock);
}

/* Whether a record of this launch was written already: a replay pass's. */
static int replayed_again(uint32_t correlation)
{
    if (!correlation)
        return 0;
    int again = 0;
    pthread_mutex_lock(&replayed_lock);
    struct replayed_launch *s = replayed_slot(correlation);
    if (s->used) {
        again = s->written;
        s->written = 1;
    }
    pthread_mutex_unlock(&replayed_lock);
    return again;
}

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
    *buffer = aligned_alloc(8, BUFFER_SIZE);
    *size = *buffer ? BUFFER_SIZE : 0;
    *max_records = 0;
}

/* Runs on CUPTI's worker thread, or on the thread that flushes. The records
 * are formatted into memory first: out_lock is taken only to write them, so
 * it is never held across a CUPTI call. */
static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid)
{
    (void)size;
    char *text = NULL;
    size_t text_len = 0;
    FILE *mem = buffer ? open_memstream(&text, &text_len) : NULL;
    CUpti_Activity *rec = NULL;
    unsigned long incomplete = 0, passes = 0;
    CUptiResult r = CUPTI_ERROR_MAX_LIMIT_REACHED;
    while (mem && (r = cuptiActivityGetNextRecord(buffer, valid, &rec)) == CUPTI_SUCCESS) {
        if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && rec->kind != CUPTI_ACTIVITY_KIND_KERNEL)
            continue;
        const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)rec;
        if (k->end == 0 || k->end < k->start) { /* still running when a forced flush took it */
            incomplete++;
            continue;
        }
        if (replayed_again(k->correlationId)) {
            passes++;
            continue;
        }
        fprintf(mem, "kernel %llu %llu %d %d %d %d %d %d %u %d %d %s\n", (unsigned long long)k->start,
                (unsigned long long)k->end, k->gridX, k->gridY, k->gridZ, k->blockX, k->blockY, k->blockZ,
                (unsigned)k->registersPerThread, k->staticSharedMemory, k->dynamicSharedMemory,
                k->name && *k->name ? k->name : "<unknown>");
    }
    if (mem && r != CUPTI_ERROR_MAX_LIMIT_REACHED) /* an incomplete or unreadable record ends the walk */
        fprintf(mem, "# activity buffer cut at a record CUPTI could not read (%s): its later records are lost\n",
                cupti_error(r));
    size_t dropped = 0;
    if (mem && cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped) == CUPTI_SUCCESS && dropped)
        fprintf(mem, "dropped %zu\n", dropped);
    if (mem && incomplete)
        fprintf(mem, "# %lu kernel record(s) without an end time (in flight at a forced flush) skipped\n",
                incomplete);
    if (mem && passes)
        fprintf(mem, "# %lu kernel record(s) of replay passes skipped: one record per profiled launch\n", passes);
    if (mem && fclose(mem) == 0 && text_len && !atomic_load(&in_forked_child)) {
        pthread_mutex_lock(&out_lock);
        if (out) {
            fwrite(text, 1, text_len, out);
            fflush(out);
        }
        pthread_mutex_unlock(&out_lock);
    } else if (buffer && !mem) {
        record("error out of memory formatting an activity buffer: its records are lost\n");
    }
    free(text);
    atomic_fetch_add(&n_incomplete, incomplete);
    free(buffer);
}

/* ---- counters: one Range Profiler per context ------------------------------ */

/* A context whose profiled launches gave no counters this many times in a
 * row (failed replays, empty ranges) is given up. */
#define MAX_FAILURES_IN_ROW 3

typedef struct prof_ctx {
    CUcontext ctx;
    int broken;     /* set-up or collection failed for good: no more counters here */
    int configured; /* SetConfig done (once, as NVIDIA's samples do) */
    int config_per_range; /* this CUPTI wanted SetConfig again before a Start */
    int failures_in_row;
    int retired;    /* its context was destroyed: the slot is free again */
    int started;    /* a range is started (Start succeeded, Stop did not yet) */
    CUpti_Profiler_Host_Object *host;
    CUpti_RangeProfiler_Object *range;
    uint8_t *config_image, *counter_data;
    size_t config_size, counter_size;
} prof_ctx;

/* Everything below is guarded by launch_lock (held from a launch's enter to
 * its exit while counters_active), except the atomics. */
static pthread_mutex_t launch_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_int counters_active; /* 0: launches no longer take launch_lock */
static long max_profiled = 256, skip_launches, launches, profiled;
static int profiler_initialized, nccl_noted;
static prof_ctx contexts[MAX_CONTEXTS];
static size_t n_contexts, n_broken;
static uint64_t signatures[MAX_SIGNATURES];
static size_t n_signatures;
/* $KACE_CUPTI_REPLAY's signatures (hashes, sorted); NULL: every signature. */
static uint64_t *replay_only;
static size_t n_replay_only;
static atomic_long n_collected;         /* kernels with counters */
static atomic_ullong replay_ns;         /* time inside the profiled launches (their replay) */

/* Per thread: how deep in launch callbacks it is, and the launch it profiles. */
static __thread int launch_depth;
static __thread prof_ctx *profiling;
static __thread unsigned profiling_dims[6];
static __thread char *profiling_name; /* the whole name: counters join kernels on it */
static __thread uint64_t profiling_since;

static void free_prof_ctx(prof_ctx *p)
{
    free(p->config_image);
    free(p->counter_data);
    p->config_image = p->counter_data = NULL;
}

/* No more counters in p. Once no known context can have them, launches stop
 * taking launch_lock: serialising them would only slow the workload. */
/* Disables p's range profiler and frees its host object and images: kernels
 * after the last profiled launch then run without a profiler, and a context
 * about to be destroyed leaves none behind. Where Disable fails, CUPTI may
 * still point at the images: they are kept. launch_lock held. Returns
 * whether a profiler was enabled. */
static int profiler_release(prof_ctx *p)
{
    int was_enabled = p->range != NULL;
    int disabled = 1;
    if (p->range && p->started) { /* a failed collection left its range open: Stop comes before Disable */
        CUpti_RangeProfiler_Stop_Params sp = {.structSize = CUpti_RangeProfiler_Stop_Params_STRUCT_SIZE};
        sp.pRangeProfilerObject = p->range;
        CUptiResult r = cuptiRangeProfilerStop(&sp);
        if (r != CUPTI_SUCCESS)
            record_failure("cuptiRangeProfilerStop", r);
        else
            p->started = 0;
    }
    if (p->range) {
        CUpti_RangeProfiler_Disable_Params d = {.structSize = CUpti_RangeProfiler_Disable_Params_STRUCT_SIZE};
        d.pRangeProfilerObject = p->range;
        CUptiResult r = cuptiRangeProfilerDisable(&d);
        if (r != CUPTI_SUCCESS) {
            record_failure("cuptiRangeProfilerDisable", r);
            disabled = 0; /* kept: tried again when its context is destroyed */
        } else {
            p->range = NULL;
            p->started = 0;
        }
    }
    if (p->host && disabled) {
        CUpti_Profiler_Host_Deinitialize_Params h = {.structSize = CUpti_Profiler_Host_Deinitialize_Params_STRUCT_SIZE};
        h.pHostObject = p->host;
        CUptiResult r = cuptiProfilerHostDeinitialize(&h);
        if (r != CUPTI_SUCCESS)
            record_failure("cuptiProfilerHostDeinitialize", r);
        p->host = NULL;
    }
    if (disabled)
        free_prof_ctx(p);
    p->configured = 0;
    return was_enabled;
}

static void give_up(prof_ctx *p)
{
    if (p->broken)
        return;
    profiler_release(p);
    p->broken = 1;
    if (++n_broken == n_contexts && atomic_exchange(&counters_active, 0))
        record("# counters off: no CUDA context of this process can be profiled (see the errors above)\n");
}

static const char *support_word(CUpti_Profiler_Support_Level l)
{
    return l == CUPTI_PROFILER_CONFIGURATION_DISABLED ? "disabled" : "unsupported";
}

/* Whether the Profiling API works on dev; says why not. Carries on when
 * CUPTI cannot tell. */
static int device_supported(CUdevice dev)
{
    CUpti_Profiler_DeviceSupported_Params sup = {.structSize = CUpti_Profiler_DeviceSupported_Params_STRUCT_SIZE};
    sup.cuDevice = dev;
    sup.api = CUPTI_PROFILER_RANGE_PROFILING;
    CUptiResult r = cuptiProfilerDeviceSupported(&sup);
    if (r != CUPTI_SUCCESS) {
        record("# cuptiProfilerDeviceSupported failed (%s): trying the counters anyway\n", cupti_error(r));
        return 1;
    }
    if (sup.isSupported == CUPTI_PROFILER_CONFIGURATION_SUPPORTED)
        return 1;
    const struct {
        CUpti_Profiler_Support_Level level;
        const char *what;
    } parts[] = {{sup.architecture, "GPU architecture"}, {sup.sli, "SLI"},
                 {sup.vGpu, "vGPU profiling"},           {sup.confidentialCompute, "confidential computing"},
                 {sup.cmp, "crypto mining processor"},   {sup.wsl, "WSL"}};
    char why[256] = "";
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
        if (parts[i].level == CUPTI_PROFILER_CONFIGURATION_UNSUPPORTED ||
            parts[i].level == CUPTI_PROFILER_CONFIGURATION_DISABLED)
            snprintf(why + strlen(why), sizeof why - strlen(why), "%s%s %s", *why ? ", " : "", parts[i].what,
                     support_word(parts[i].level));
    record("error counters are not supported on device %d: %s\n", (int)dev, *why ? why : "CUPTI gives no reason");
    return 0;
}

static int profiler_setup(prof_ctx *p)
{
    if (!profiler_initialized) {
        CUpti_Profiler_Initialize_Params init = {.structSize = CUpti_Profiler_Initialize_Params_STRUCT_SIZE};
        TRY(cuptiProfilerInitialize(&init));
        profiler_initialized = 1;
    }
    CUdevice dev;
    if (cuCtxGetDevice(&dev) != CUDA_SUCCESS) {
        record("error cuCtxGetDevice failed: no counters for this context\n");
        return -1;
    }
    if (!device_supported(dev))
        return -1;
    int mps = 0;
    if (cuDeviceGetAttribute(&mps, CU_DEVICE_ATTRIBUTE_MPS_ENABLED, dev) == CUDA_SUCCESS && mps)
        record("# context %zu is an MPS client: CUPTI documents its profiling API as unsupported under MPS "
               "(profile without an MPS daemon if the counters fail)\n",
               (size_t)(p - contexts));
    CUpti_Device_GetChipName_Params chip = {.structSize = CUpti_Device_GetChipName_Params_STRUCT_SIZE};
    chip.deviceIndex = (size_t)dev;
    TRY(cuptiDeviceGetChipName(&chip));
    CUpti_Profiler_GetCounterAvailability_Params avail = {
        .structSize = CUpti_Profiler_GetCounterAvailability_Params_STRUCT_SIZE};
    avail.ctx = p->ctx;
    TRY(cuptiProfilerGetCounterAvailability(&avail));
    /* Kept until the configuration image is made, as NVIDIA's samples do. */
    uint8_t *avail_image = malloc(avail.counterAvailabilityImageSize ? avail.counterAvailabilityImageSize : 1);
    if (!avail_image) {
        record("error out of memory for the counter availability image\n");
        return -1;
    }
    avail.pCounterAvailabilityImage = avail_image;
    int rc = -1;
    const char *failed = NULL;
    CUptiResult r = cuptiProfilerGetCounterAvailability(&avail);
    if (r != CUPTI_SUCCESS) {
        failed = "cuptiProfilerGetCounterAvailability";
        goto done;
    }
    CUpti_Profiler_Host_Initialize_Params host = {.structSize = CUpti_Profiler_Host_Initialize_Params_STRUCT_SIZE};
    host.profilerType = CUPTI_PROFILER_TYPE_RANGE_PROFILER;
    host.pChipName = chip.pChipName;
    host.pCounterAvailabilityImage = avail_image;
    if ((r = cuptiProfilerHostInitialize(&host)) != CUPTI_SUCCESS) {
        failed = "cuptiProfilerHostInitialize";
        goto done;
    }
    p->host = host.pHostObject;
    CUpti_Profiler_Host_ConfigAddMetrics_Params add = {
        .structSize = CUpti_Profiler_Host_ConfigAddMetrics_Params_STRUCT_SIZE};
    add.pHostObject = p->host;
    add.ppMetricNames = metric_names;
    add.numMetrics = N_METRICS;
    if ((r = cuptiProfilerHostConfigAddMetrics(&add)) != CUPTI_SUCCESS) {
        failed = "cuptiProfilerHostConfigAddMetrics";
        goto done;
    }
    CUpti_Profiler_Host_GetConfigImageSize_Params csize = {
        .structSize = CUpti_Profiler_Host_GetConfigImageSize_Params_STRUCT_SIZE};
    csize.pHostObject = p->host;
    if ((r = cuptiProfilerHostGetConfigImageSize(&csize)) != CUPTI_SUCCESS) {
        failed = "cuptiProfilerHostGetConfigImageSize";
        goto done;
    }
    p->config_size = csize.configImageSize;
    if (!(p->config_image = malloc(p->config_size ? p->config_size : 1))) {
        record("error out of memory for the profiler configuration\n");
        goto done;
    }
    CUpti_Profiler_Host_GetConfigImage_Params cimg = {
        .structSize = CUpti_Profiler_Host_GetConfigImage_Params_STRUCT_SIZE};
    cimg.pHostObject = p->host;
    cimg.configImageSize = p->config_size;
    cimg.pConfigImage = p->config_image;
    if ((r = cuptiProfilerHostGetConfigImage(&cimg)) != CUPTI_SUCCESS) {
        failed = "cuptiProfilerHostGetConfigImage";
        goto done;
    }
    rc = 0;
done:
    free(avail_image);
    if (failed)
        record_failure(failed, r);
    if (rc != 0)
        return -1;
    CUpti_Profiler_Host_GetNumOfPasses_Params passes = {
        .structSize = CUpti_Profiler_Host_GetNumOfPasses_Params_STRUCT_SIZE};
    passes.configImageSize = p->config_size;
    passes.pConfigImage = p->config_image;
    if (cuptiProfilerHostGetNumOfPasses(&passes) == CUPTI_SUCCESS)
        record("# context %zu: chip %s, %zu replay passes per profiled kernel\n", (size_t)(p - contexts),
               chip.pChipName ? chip.pChipName : "?", passes.numOfPasses);

    CUpti_RangeProfiler_Enable_Params en = {.structSize = CUpti_RangeProfiler_Enable_Params_STRUCT_SIZE};
    en.ctx = p->ctx;
    TRY(cuptiRangeProfilerEnable(&en));
    p->range = en.pRangeProfilerObject;
    CUpti_RangeProfiler_GetCounterDataSize_Params ds = {
        .structSize = CUpti_RangeProfiler_GetCounterDataSize_Params_STRUCT_SIZE};
    ds.pRangeProfilerObject = p->range;
    ds.pMetricNames = metric_names;
    ds.numMetrics = N_METRICS;
    ds.maxNumOfRanges = 1;
    ds.maxNumRangeTreeNodes = 1;
    TRY(cuptiRangeProfilerGetCounterDataSize(&ds));
    p->counter_size = ds.counterDataSize;
    if (!(p->counter_data = malloc(p->counter_size ? p->counter_size : 1))) {
        record("error out of memory for the counter data image\n");
        return -1;
    }
    return 0;
}

/* Contexts destroyed while another thread held launch_lock (see
 * context_destroying): their slots are retired by the next context_of,
 * without CUPTI calls on objects of a context that is gone. */
#define MAX_PENDING_DESTROYED 8
static _Atomic(CUcontext) destroyed_pending[MAX_PENDING_DESTROYED];

static void retire(prof_ctx *p)
{
    if (!p->broken) {
        p->broken = 1;
        n_broken++;
    }
    p->retired = 1;
    p->ctx = NULL;
}

static void retire_pending(void)
{
    for (size_t d = 0; d < MAX_PENDING_DESTROYED; d++) {
        CUcontext gone = atomic_exchange(&destroyed_pending[d], NULL);
        if (!gone)
            continue;
        for (size_t i = 0; i < n_contexts; i++)
            if (!contexts[i].retired && contexts[i].ctx == gone) {
                /* The range profiler went with its context: no call on it. The
                 * host object and the images are the host's own. */
                contexts[i].range = NULL;
                contexts[i].started = 0;
                profiler_release(&contexts[i]);
                retire(&contexts[i]);
                record("# context %zu was destroyed while the profiler lock was held: its slot is freed\n", i);
            }
    }
}

/* The profiling state of ctx, set up on its first profiled launch; NULL when
 * it cannot have counters. */
static prof_ctx *context_of(CUcontext ctx)
{
    static int full_noted;
    retire_pending();
    prof_ctx *p = NULL;
    for (size_t i = 0; i < n_contexts; i++) {
        if (!contexts[i].retired && contexts[i].ctx == ctx)
            return contexts[i].broken ? NULL : &contexts[i];
        if (contexts[i].retired && !p)
            p = &contexts[i]; /* a destroyed context's slot: taken again */
    }
    if (p) {
        n_broken--; /* a retired slot counts as broken */
    } else if (n_contexts == MAX_CONTEXTS) {
        if (!full_noted) { /* say it once */
            full_noted = 1;
            record("error more than %d CUDA contexts: no counters for the others\n", MAX_CONTEXTS);
        }
        return NULL;
    } else {
        p = &contexts[n_contexts++];
    }
    memset(p, 0, sizeof *p);
    p->ctx = ctx;
    if (profiler_setup(p) != 0) {
        free_prof_ctx(p);
        give_up(p);
        return NULL;
    }
    return p;
}

static CUptiResult set_config(prof_ctx *p)
{
    CUpti_RangeProfiler_SetConfig_Params sc = {.structSize = CUpti_RangeProfiler_SetConfig_Params_STRUCT_SIZE};
    sc.pRangeProfilerObject = p->range;
    sc.configSize = p->config_size;
    sc.pConfig = p->config_image;
    sc.counterDataImageSize = p->counter_size;
    sc.pCounterDataImage = p->counter_data;
    sc.range = CUPTI_AutoRange;
    sc.replayMode = CUPTI_KernelReplay;
    sc.maxRangesPerPass = 1;
    sc.numNestingLevels = 1;
    sc.minNestingLevel = 1;
    sc.passIndex = 0;
    sc.targetNestingLevel = 1;
    return cuptiRangeProfilerSetConfig(&sc);
}

/* Initialises the counter data image in place and starts a range for one
 * launch. The configuration is set once, as NVIDIA's samples do; a CUPTI
 * that refuses a Start without it gets it before every range (noted once). */
static int profiler_arm(prof_ctx *p)
{
    CUpti_RangeProfiler_CounterDataImage_Initialize_Params ci = {
        .structSize = CUpti_RangeProfiler_CounterDataImage_Initialize_Params_STRUCT_SIZE};
    ci.pRangeProfilerObject = p->range;
    ci.counterDataSize = p->counter_size;
    ci.pCounterData = p->counter_data;
    TRY(cuptiRangeProfilerCounterDataImageInitialize(&ci));
    int fresh = !p->configured || p->config_per_range;
    if (fresh) {
        TRY(set_config(p));
        p->configured = 1;
    }
    CUpti_RangeProfiler_Start_Params st = {.structSize = CUpti_RangeProfiler_Start_Params_STRUCT_SIZE};
    st.pRangeProfilerObject = p->range;
    CUptiResult r = cuptiRangeProfilerStart(&st);
    if (r != CUPTI_SUCCESS && !fresh && set_config(p) == CUPTI_SUCCESS &&
        (r = cuptiRangeProfilerStart(&st)) == CUPTI_SUCCESS) {
        p->config_per_range = 1;
        record("# context %zu: the configuration is set again before each range (Start refused without it)\n",
               (size_t)(p - contexts));
    }
    if (r != CUPTI_SUCCESS) {
        record_failure("cuptiRangeProfilerStart", r);
        return -1;
    }
    p->started = 1;
    return 0;
}

/* Ends the range of the launch this thread profiles. 0: counters written;
 * 1: none for this launch, not the context's fault; -1: the context failed. */
static int profiler_collect(prof_ctx *p, CUresult launch_result)
{
    CUpti_RangeProfiler_Stop_Params sp = {.structSize = CUpti_RangeProfiler_Stop_Params_STRUCT_SIZE};
    sp.pRangeProfilerObject = p->range;
    TRY(cuptiRangeProfilerStop(&sp));
    p->started = 0;
    if (launch_result != CUDA_SUCCESS) {
        record("# launch of %s failed (CUresult %d): no counters for it\n", profiling_name, (int)launch_result);
        return 1;
    }
    if (!sp.isAllPassSubmitted) {
        record("# kernel replay did not submit every pass for %s: no counters for it\n", profiling_name);
        return 1;
    }
    CUpti_RangeProfiler_DecodeData_Params dd = {.structSize = CUpti_RangeProfiler_DecodeData_Params_STRUCT_SIZE};
    dd.pRangeProfilerObject = p->range;
    TRY(cuptiRangeProfilerDecodeData(&dd));
    CUpti_RangeProfiler_GetCounterDataInfo_Params info = {
        .structSize = CUpti_RangeProfiler_GetCounterDataInfo_Params_STRUCT_SIZE};
    info.pCounterDataImage = p->counter_data;
    info.counterDataImageSize = p->counter_size;
    TRY(cuptiRangeProfilerGetCounterDataInfo(&info));
    if (info.numTotalRanges == 0) {
        record("# no range in the counter data of %s (no kernel ran in it): no counters for it\n", profiling_name);
        return 1;
    }
    if (dd.numOfRangeDropped)
        record("# %zu range(s) beside %s's dropped (the image holds one)\n", dd.numOfRangeDropped, profiling_name);
    double values[N_METRICS] = {0, 0, 0};
    CUpti_Profiler_Host_EvaluateToGpuValues_Params ev = {
        .structSize = CUpti_Profiler_Host_EvaluateToGpuValues_Params_STRUCT_SIZE};
    ev.pHostObject = p->host;
    ev.pCounterDataImage = p->counter_data;
    ev.counterDataImageSize = p->counter_size;
    ev.rangeIndex = 0;
    ev.ppMetricNames = metric_names;
    ev.numMetrics = N_METRICS;
    ev.pMetricValues = values;
    TRY(cuptiProfilerHostEvaluateToGpuValues(&ev));
    /* Written as measured, nan or negative included: the reader decides. */
    record("counters %.4f %.4f %.4f %u %u %u %u %u %u %s\n", values[0], values[1], values[2], profiling_dims[0],
           profiling_dims[1], profiling_dims[2], profiling_dims[3], profiling_dims[4], profiling_dims[5],
           profiling_name);
    return 0;
}

static uint64_t signature_hash(const char *name, const unsigned d[6])
{
    uint64_t h = 1469598103934665603ULL;
    for (const char *p = name; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ULL;
    for (int i = 0; i < 6; i++)
        h = (h ^ d[i]) * 1099511628211ULL;
    return h ? h : 1;
}

static int compare_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Whether a signature may be replayed: every one, or one of the list's. */
static int replay_listed(uint64_t h)
{
    return !replay_only || bsearch(&h, replay_only, n_replay_only, sizeof h, compare_u64) != NULL;
}

/* Reads $KACE_CUPTI_REPLAY's signatures. A line that is not
 * "gx gy gz bx by bz name" is an error record and is skipped; a file that
 * cannot be read leaves every signature replayable (counters over a cap). */
static void load_replay_list(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        record("error cannot read the replay list %s: %s: every signature is replayed\n", path, strerror(errno));
        return;
    }
    char *line = NULL;
    size_t cap = 0, n = 0, room = 0, lineno = 0;
    uint64_t *list = NULL;
    ssize_t len;
    while ((len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        if (len > 0 && line[len - 1] == '\n')
            line[--len] = '\0';
        if (len == 0 || line[0] == '#')
            continue;
        unsigned d[6];
        const char *name = replay_list_line(line, d);
        if (!name) {
            record("error %s:%zu: expected \"gx gy gz bx by bz name\" (sizes from 1): the line is skipped\n", path,
                   lineno);
            continue;
        }
        if (n == room) {
            size_t grown = room ? 2 * room : 64;
            uint64_t *p = realloc(list, grown * sizeof *list);
            if (!p) {
                record("error out of memory reading the replay list: every signature is replayed\n");
                free(list);
                free(line);
                fclose(f);
                return;
            }
            list = p;
            room = grown;
        }
        list[n++] = signature_hash(name, d);
    }
    free(line);
    fclose(f);
    if (n)
        qsort(list, n, sizeof *list, compare_u64);
    replay_only = list ? list : malloc(1); /* an empty list replays nothing */
    n_replay_only = n;
    if (max_profiled > (long)n)
        max_profiled = (long)n; /* the profiler is released once every listed signature is profiled */
    record("# replay list: %zu signature(s) from %s: only these are replayed\n", n, path);
}

/* True the first time a signature is seen (and while there is room). */
static int first_launch_of(uint64_t h)
{
    for (size_t i = 0; i < n_signatures; i++)
        if (signatures[i] == h)
            return 0;
    if (n_signatures == MAX_SIGNATURES)
        return 0;
    signatures[n_signatures++] = h;
    return 1;
}

static int is_graph_launch(CUpti_CallbackId cbid)
{
    return cbid == CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch || cbid == CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz;
}

static int is_launch_ex(CUpti_CallbackId cbid)
{
    return cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx || cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz;
}

/* Grid, block and stream of a launch. cuLaunchKernel(_ptsz) and
 * cuLaunchCooperativeKernel(_ptsz) share their leading arguments. */
static CUstream launch_dims(CUpti_CallbackId cbid, const void *params, unsigned d[6])
{
    memset(d, 0, 6 * sizeof *d);
    if (!params)
        return NULL;
    if (is_launch_ex(cbid)) {
        const CUlaunchConfig *c = ((const cuLaunchKernelEx_params *)params)->config;
        if (!c)
            return NULL;
        d[0] = c->gridDimX, d[1] = c->gridDimY, d[2] = c->gridDimZ;
        d[3] = c->blockDimX, d[4] = c->blockDimY, d[5] = c->blockDimZ;
        return c->hStream;
    }
    const cuLaunchKernel_params *p = params;
    d[0] = p->gridDimX, d[1] = p->gridDimY, d[2] = p->gridDimZ;
    d[3] = p->blockDimX, d[4] = p->blockDimY, d[5] = p->blockDimZ;
    return p->hStream;
}

/* A launch into a stream capturing a CUDA graph runs no kernel: its range
 * would stay empty, and a replay could invalidate the capture. When CUDA
 * cannot tell (an implicit capture elsewhere), it counts as capturing. */
static int capturing(CUpti_CallbackId cbid, CUstream stream)
{
    int per_thread = cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz ||
                     cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz ||
                     cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz;
    if (!stream && per_thread)
        stream = CU_STREAM_PER_THREAD;
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    return cuStreamIsCapturing(stream, &status) != CUDA_SUCCESS || status != CU_STREAM_CAPTURE_STATUS_NONE;
}

/* NCCL's kernels wait for their peers: replayed alone, they would hang. */
static int is_collective(const char *name)
{
    return strstr(name, "ncclDevKernel") || strstr(name, "ncclKernel");
}

/* API enter of a launch, with launch_lock held: whether to profile it. */
static void choose(CUpti_CallbackId cbid, const CUpti_CallbackData *cb)
{
    if (is_graph_launch(cbid))
        return; /* held only so that the graph's kernels stay out of a profiled range */
    unsigned d[6];
    CUstream stream = launch_dims(cbid, cb->functionParams, d);
    long n = launches++;
    if (n < skip_launches || !cb->symbolName || !d[0] || !d[3])
        return;
    if (is_collective(cb->symbolName)) {
        if (!nccl_noted++)
            record("# NCCL kernels are not profiled (a replayed collective waits for peers that run it once)\n");
        return;
    }
    uint64_t h = signature_hash(cb->symbolName, d);
    if (!replay_listed(h))
        return; /* outside kace profile's cap: runs without replay */
    if (capturing(cbid, stream) || !first_launch_of(h))
        return; /* a captured launch keeps its signature for a launch that runs */
    prof_ctx *p = context_of(cb->context);
    if (!p)
        return;
    free(profiling_name);
    if (!(profiling_name = strdup(cb->symbolName))) {
        record("error out of memory for a kernel name\n");
        return;
    }
    memcpy(profiling_dims, d, sizeof d);
    if (profiler_arm(p) != 0) {
        give_up(p); /* keep the activity records; no more replays here */
        return;
    }
    replayed_add(cb->correlationId);
    profiling = p;
    profiling_since = monotonic_ns();
    ++profiled;
}

/* API exit of a launch this thread chose to profile, launch_lock held. */
static void finish(const CUpti_CallbackData *cb)
{
    prof_ctx *p = profiling;
    profiling = NULL;
    CUresult launched = cb->functionReturnValue ? *(const CUresult *)cb->functionReturnValue : CUDA_SUCCESS;
    int got = profiler_collect(p, launched);
    atomic_fetch_add(&replay_ns, monotonic_ns() - profiling_since);
    if (got == 0) {
        atomic_fetch_add(&n_collected, 1);
        p->failures_in_row = 0;
    } else if (got < 0 || ++p->failures_in_row >= MAX_FAILURES_IN_ROW) {
        if (got > 0)
            record("error %d profiled launches in a row gave no counters: no more counters in context %zu\n",
                   MAX_FAILURES_IN_ROW, (size_t)(p - contexts));
        give_up(p);
    }
    /* The last slot: only now, with its range closed, may launches skip the
     * lock; first every profiler is disabled, while no launch can run in a
     * range (they all wait for the lock until then). */
    if (profiled >= max_profiled && atomic_load(&counters_active)) {
        size_t n = 0;
        retire_pending(); /* no Disable on a profiler whose context is gone */
        for (size_t i = 0; i < n_contexts; i++)
            if (!contexts[i].broken)
                n += (size_t)profiler_release(&contexts[i]);
        record("# counters: the budget of %ld profiled launch(es) is spent: profiler disabled in %zu context(s)\n",
               max_profiled, n);
        atomic_store(&counters_active, 0);
    }
}

/* A context is about to be destroyed: its profiler is disabled now, and its
 * slot freed, so that a new context at the same address gets a profiler of
 * its own (before, it was taken for the old one). The lock is waited for
 * at most 2 s: a thread holding it inside a launch might wait for the
 * driver, which may hold its own lock while it calls this. */
static void context_destroying(CUcontext ctx)
{
    if (launch_depth > 0)
        return; /* cannot happen: no context is destroyed inside a launch */
    /* Noted first, so that whoever takes the lock next retires its slot
     * should this thread not get the lock in time. */
    size_t noted = MAX_PENDING_DESTROYED;
    for (size_t d = 0; d < MAX_PENDING_DESTROYED && noted == MAX_PENDING_DESTROYED; d++) {
        CUcontext none = NULL;
        if (atomic_compare_exchange_strong(&destroyed_pending[d], &none, ctx))
            noted = d;
    }
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 2;
    if (pthread_mutex_timedlock(&launch_lock, &until) != 0) {
        if (noted == MAX_PENDING_DESTROYED)
            record("error a CUDA context was destroyed while another thread held the profiler lock, and %d others "
                   "are waiting to be forgotten: a new context at its address would be taken for it\n",
                   MAX_PENDING_DESTROYED);
        return;
    }
    if (noted < MAX_PENDING_DESTROYED) {
        CUcontext mine = ctx; /* still there unless another thread's context_of retired it meanwhile */
        atomic_compare_exchange_strong(&destroyed_pending[noted], &mine, NULL);
    }
    /* An earlier context at this address, destroyed while the lock was held,
     * is not the one being destroyed: its slot is freed first. */
    retire_pending();
    for (size_t i = 0; i < n_contexts; i++) {
        prof_ctx *p = &contexts[i];
        if (p->retired || p->ctx != ctx)
            continue;
        int was_enabled = profiler_release(p);
        retire(p);
        record("# context %zu is destroyed%s\n", i, was_enabled ? ": its profiler is disabled" : "");
    }
    pthread_mutex_unlock(&launch_lock);
}

static void CUPTIAPI on_callback(void *user, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void *data)
{
    (void)user;
    if (domain == CUPTI_CB_DOMAIN_RESOURCE && cbid == CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING && data) {
        context_destroying(((const CUpti_ResourceData *)data)->context);
        return;
    }
    if (domain != CUPTI_CB_DOMAIN_DRIVER_API)
        return;
    const CUpti_CallbackData *cb = data;
    if (cb->callbackSite == CUPTI_API_ENTER) {
        if (launch_depth > 0) { /* a launch inside a launch: already serialised */
            launch_depth++;
            return;
        }
        if (!atomic_load(&counters_active))
            return;
        pthread_mutex_lock(&launch_lock);
        launch_depth = 1;
        if (atomic_load(&counters_active))
            choose(cbid, cb);
        return;
    }
    if (launch_depth == 0)
        return; /* its enter did not take the lock */
    if (--launch_depth > 0)
        return;
    if (profiling)
        finish(cb);
    pthread_mutex_unlock(&launch_lock);
}

/* ---- delivery: the flush thread, signals, exit ---------------------------- */

static sem_t flush_wake;
static atomic_int flush_stop, term_signal;
static const char *trace_until; /* $KACE_CUPTI_TRACE_UNTIL: NULL once activity recording stopped */
static pthread_t flusher;
static int flusher_started;
static long flush_ms = 200;
static struct sigaction previous_term, previous_int;

static int counters_on;

static void final_flush(const char *why)
{
    cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    if (counters_on) { /* what the counters cost: kace reports it beside ncu's */
        record("# counters: %ld kernel(s) profiled, %.3f s inside their launches\n", atomic_load(&n_collected),
               (double)atomic_load(&replay_ns) / 1e9);
        /* Profiled launches whose kernel record never came: their launch
         * callback's correlation ID matched no record, so replay-pass
         * records could not have been told apart either. */
        size_t unseen = 0, entered, not_entered;
        pthread_mutex_lock(&replayed_lock);
        for (size_t i = 0; i < REPLAYED_SLOTS; i++)
            unseen += replayed[i].used && !replayed[i].written;
        entered = n_replayed;
        not_entered = n_not_entered;
        pthread_mutex_unlock(&replayed_lock);
        if (unseen || not_entered)
            record("# profiled launches: %zu by correlation ID, %zu of them with no kernel record; %zu not told "
                   "apart (ID 0, or more than %d)\n",
                   entered, unseen, not_entered, REPLAYED_SLOTS / 2);
    }
    record("# end: %s\n", why);
}

/* Async-signal-safe: only wakes the flush thread, which flushes and then
 * delivers the signal again with the application's disposition. */
static void on_terminate(int sig)
{
    int expected = 0;
    if (atomic_compare_exchange_strong(&term_signal, &expected, sig))
        sem_post(&flush_wake);
}

static void *flush_loop(void *arg)
{
    (void)arg;
    for (;;) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += (flush_ms % 1000) * 1000000L;
        until.tv_sec += flush_ms / 1000 + until.tv_nsec / 1000000000L;
        until.tv_nsec %= 1000000000L;
        while (sem_timedwait(&flush_wake, &until) != 0 && errno == EINTR)
            ;
        int sig = atomic_load(&term_signal);
        if (sig) {
            final_flush(sig == SIGTERM ? "SIGTERM" : "SIGINT");
            sigaction(SIGTERM, &previous_term, NULL);
            sigaction(SIGINT, &previous_int, NULL);
            kill(getpid(), sig);
            return NULL;
        }
        if (atomic_load(&flush_stop))
            return NULL;
        if (trace_until && access(trace_until, F_OK) == 0) {
            /* Disabled first, so no record comes after the forced flush. */
            CUptiResult r = cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
            cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
            if (r == CUPTI_SUCCESS)
                record("# activity recording stopped at %llu: %s exists\n", (unsigned long long)monotonic_ns(),
                       trace_until);
            else
                record_failure("cuptiActivityDisable", r);
            trace_until = NULL;
            continue;
        }
        cuptiActivityFlushAll(0); /* buffers whose records are all complete, full or not */
    }
}

static void at_exit(void)
{
    if (atomic_load(&in_forked_child))
        return; /* the parent's flush thread is not here, nor is its recording ours */
    if (flusher_started && !atomic_load(&term_signal)) {
        atomic_store(&flush_stop, 1);
        sem_post(&flush_wake);
        pthread_join(flusher, NULL);
    }
    final_flush("exit");
    pthread_mutex_lock(&out_lock);
    if (out) {
        fclose(out);
        out = NULL;
    }
    pthread_mutex_unlock(&out_lock);
}

/* Catches SIGTERM/SIGINT only where the application left the default (or
 * has its own handler, which is then called after the flush); an ignored
 * signal stays ignored. */
static void install_signal(int sig, struct sigaction *previous)
{
    struct sigaction sa;
    if (sigaction(sig, NULL, previous) != 0 || previous->sa_handler == SIG_IGN)
        return;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_terminate;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(sig, &sa, NULL);
}

static long env_long(const char *name, long fallback)
{
    const char *s = getenv(name);
    char *end = NULL;
    long v = s ? strtol(s, &end, 10) : fallback;
    return (s && end && end != s && *end == '\0' && v >= 0) ? v : fallback;
}

static void in_child(void)
{
    atomic_store(&in_forked_child, 1);
}

/* The recording: $KACE_CUPTI_OUTPUT for the first process, which keeps it
 * locked; a child CUDA process that inherited the environment gets
 * $KACE_CUPTI_OUTPUT.<pid> (before, each truncated the other's). */
static FILE *open_recording(const char *path)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return NULL;
    char own[4096];
    const char *taken = NULL;
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        close(fd);
        snprintf(own, sizeof own, "%s.%ld", path, (long)getpid());
        if ((fd = open(own, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) < 0)
            return NULL;
        taken = path;
    } else if (ftruncate(fd, 0) != 0) {
        close(fd);
        return NULL;
    }
    FILE *f = fdopen(fd, "w");
    if (!f) {
        close(fd);
        return NULL;
    }
    fprintf(f, "kace-cupti 1\nclock monotonic\n");
    if (taken)
        fprintf(f, "# process %ld: %s is another process's recording\n", (long)getpid(), taken);
    fflush(f);
    return f;
}

static int setup(void)
{
    const char *path = getenv("KACE_CUPTI_OUTPUT");
    if (!path || !*path)
        return -1; /* not run by kace: do nothing */
    FILE *f = open_recording(path);
    if (!f)
        return -1;
    pthread_mutex_lock(&out_lock);
    out = f;
    pthread_mutex_unlock(&out_lock);
    pthread_atfork(NULL, NULL, in_child);
    max_profiled = env_long("KACE_CUPTI_MAX_PROFILED", 256);
    skip_launches = env_long("KACE_CUPTI_SKIP", 0);
    flush_ms = env_long("KACE_CUPTI_FLUSH_MS", 200);
    if (flush_ms < 10)
        flush_ms = 10;
    trace_until = getenv("KACE_CUPTI_TRACE_UNTIL");
    if (trace_until && !*trace_until)
        trace_until = NULL;
    const char *replay = getenv("KACE_CUPTI_REPLAY");
    if (env_long("KACE_CUPTI_COUNTERS", 1) != 0 && replay && *replay)
        load_replay_list(replay);
    counters_on = env_long("KACE_CUPTI_COUNTERS", 1) != 0 && max_profiled > 0;
    TRY(cuptiActivityRegisterTimestampCallback(monotonic_ns));
    TRY(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed));
    TRY(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
    if (sem_init(&flush_wake, 0, 0) == 0 && pthread_create(&flusher, NULL, flush_loop, NULL) == 0) {
        flusher_started = 1;
        install_signal(SIGTERM, &previous_term);
        install_signal(SIGINT, &previous_int);
    } else {
        record("error no flush thread: records are written at exit only\n");
    }
    atexit(at_exit);
    if (counters_on) {
        CUpti_SubscriberHandle subscriber;
        TRY(cuptiSubscribe(&subscriber, on_callback, NULL));
        static const CUpti_CallbackId launches_cb[] = {
            CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,   CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
            CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,
            CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel, CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz,
            CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch,    CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz,
        };
        for (size_t i = 0; i < sizeof launches_cb / sizeof launches_cb[0]; i++)
            TRY(cuptiEnableCallback(1, subscriber, CUPTI_CB_DOMAIN_DRIVER_API, launches_cb[i]));
        CUptiResult r = cuptiEnableCallback(1, subscriber, CUPTI_CB_DOMAIN_RESOURCE,
                                            CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING);
        if (r != CUPTI_SUCCESS) /* counters still work; a destroyed context's profiler stays enabled */
            record_failure("cuptiEnableCallback(CONTEXT_DESTROY_STARTING)", r);
        atomic_store(&counters_active, 1);
    }
    return 0;
}

/* Blocks at the CUDA-start gate, if one is named, until kace opens it; a
 * gate that cannot open ends the process (its CUDA work must not start
 * beside what kace measures). */
static void wait_at_gate(void)
{
    const char *gate = getenv("KACE_CUPTI_GATE");
    if (!gate || !*gate)
        return;
    long kace_pid = env_long("KACE_CUPTI_GATE_PID", 0);
    long timeout_s = env_long("KACE_CUPTI_GATE_TIMEOUT_S", 3600);
    const char *why = NULL;
    int fd = open(gate, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        why = strerror(errno);
    else
        fprintf(stderr, "kace-cupti: %ld waits at the CUDA start gate\n", (long)getpid());
    /* One-second slices only to notice kace gone; the byte wakes poll at once. */
    for (long waited = 0; !why; waited++) {
        if (waited >= timeout_s) {
            why = "not opened in time";
            break;
        }
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int r = poll(&p, 1, 1000);
        if (r < 0 && errno != EINTR) {
            why = strerror(errno);
        } else if (r > 0) {
            char c;
            ssize_t n = read(fd, &c, 1);
            if (n == 1)
                break; /* opened */
            if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
                why = "kace closed it";
        } else if (kace_pid > 0 && kill((pid_t)kace_pid, 0) != 0 && errno == ESRCH) {
            why = "kace is gone";
        }
    }
    if (fd >= 0)
        close(fd);
    if (why) {
        fprintf(stderr, "kace-cupti: the CUDA start gate %s did not open: %s\n", gate, why);
        _exit(75);
    }
    unsetenv("KACE_CUPTI_GATE");
}

EXPORT int InitializeInjection(void)
{
    static atomic_int done;
    if (atomic_exchange(&done, 1) == 0) {
        wait_at_gate();
        setup();
    }
    return 1; /* never fail the workload's CUDA initialisation */
}
