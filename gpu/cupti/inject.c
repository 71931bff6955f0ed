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
 * launches from several). Three locks, never taken in the other order:
 *  - launch_lock serialises launches while counters are still being
 *    collected, from a launch's API enter to its API exit, so that no other
 *    thread's kernel lands inside a profiled range; once every profiling slot
 *    is used (or counters are off or broken) launches no longer touch it;
 *  - out_lock guards the recording file; record() takes it, and nothing that
 *    holds it calls back into code that takes launch_lock.
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
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda.h>
#include <cupti.h>
#include "profiler_host.h"
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

static void vrecord(const char *fmt, va_list ap)
{
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

#define TRY(call)                                                                                   \
    do {                                                                                            \
        CUptiResult r_ = (call);                                                                    \
        if (r_ != CUPTI_SUCCESS) {                                                                  \
            record("error %s failed: %s\n", #call, cupti_error(r_));                                \
            return -1;                                                                              \
        }                                                                                           \
    } while (0)

/* ---- activity records ------------------------------------------------------ */

static atomic_ulong n_incomplete; /* forced flushes may deliver kernels without an end time */

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
    *buffer = aligned_alloc(8, BUFFER_SIZE);
    *size = *buffer ? BUFFER_SIZE : 0;
    *max_records = 0;
}

/* Runs on CUPTI's worker thread, or on the thread that flushes. */
static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid)
{
    (void)size;
    CUpti_Activity *rec = NULL;
    unsigned long incomplete = 0;
    pthread_mutex_lock(&out_lock);
    while (out && buffer && cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
        if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && rec->kind != CUPTI_ACTIVITY_KIND_KERNEL)
            continue;
        const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)rec;
        if (k->end == 0 || k->end < k->start) { /* still running when a forced flush took it */
            incomplete++;
            continue;
        }
        fprintf(out, "kernel %llu %llu %d %d %d %d %d %d %u %d %d %s\n", (unsigned long long)k->start,
                (unsigned long long)k->end, k->gridX, k->gridY, k->gridZ, k->blockX, k->blockY, k->blockZ,
                (unsigned)k->registersPerThread, k->staticSharedMemory, k->dynamicSharedMemory,
                k->name && *k->name ? k->name : "<unknown>");
    }
    size_t dropped = 0;
    if (out && cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped) == CUPTI_SUCCESS && dropped)
        fprintf(out, "dropped %zu\n", dropped);
    if (out && incomplete)
        fprintf(out, "# %lu kernel record(s) without an end time (in flight at a forced flush) skipped\n",
                incomplete);
    if (out)
        fflush(out);
    pthread_mutex_unlock(&out_lock);
    atomic_fetch_add(&n_incomplete, incomplete);
    free(buffer);
}

/* ---- counters: one Range Profiler per context ------------------------------ */

typedef struct prof_ctx {
    CUcontext ctx;
    int broken; /* set-up or a collection failed: no more counters here */
    CUpti_Profiler_Host_Object *host;
    CUpti_RangeProfiler_Object *range;
    uint8_t *config_image, *counter_data;
    size_t config_size, counter_size;
} prof_ctx;

/* Everything below is guarded by launch_lock (held from a launch's enter to
 * its exit while counters_active), except counters_active itself. */
static pthread_mutex_t launch_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_int counters_active; /* 0: launches no longer take launch_lock */
static long max_profiled = 256, skip_launches, launches, profiled;
static int profiler_initialized;
static prof_ctx contexts[MAX_CONTEXTS];
static size_t n_contexts;
static uint64_t signatures[MAX_SIGNATURES];
static size_t n_signatures;

/* Per thread: how deep in launch callbacks it is, and the launch it profiles. */
static __thread int launch_depth;
static __thread prof_ctx *profiling;
static __thread unsigned profiling_dims[6];
static __thread char profiling_name[512];

static void free_prof_ctx(prof_ctx *p)
{
    free(p->config_image);
    free(p->counter_data);
    p->config_image = p->counter_data = NULL;
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
    CUpti_Device_GetChipName_Params chip = {.structSize = CUpti_Device_GetChipName_Params_STRUCT_SIZE};
    chip.deviceIndex = (size_t)dev;
    TRY(cuptiDeviceGetChipName(&chip));
    CUpti_Profiler_GetCounterAvailability_Params avail = {
        .structSize = CUpti_Profiler_GetCounterAvailability_Params_STRUCT_SIZE};
    avail.ctx = p->ctx;
    TRY(cuptiProfilerGetCounterAvailability(&avail));
    uint8_t *avail_image = malloc(avail.counterAvailabilityImageSize ? avail.counterAvailabilityImageSize : 1);
    if (!avail_image) {
        record("error out of memory for the counter availability image\n");
        return -1;
    }
    avail.pCounterAvailabilityImage = avail_image;
    CUptiResult r = cuptiProfilerGetCounterAvailability(&avail);
    if (r != CUPTI_SUCCESS) {
        free(avail_image);
        record("error cuptiProfilerGetCounterAvailability failed: %s\n", cupti_error(r));
        return -1;
    }
    CUpti_Profiler_Host_Initialize_Params host = {.structSize = CUpti_Profiler_Host_Initialize_Params_STRUCT_SIZE};
    host.profilerType = CUPTI_PROFILER_TYPE_RANGE_PROFILER;
    host.pChipName = chip.pChipName;
    host.pCounterAvailabilityImage = avail_image;
    r = cuptiProfilerHostInitialize(&host);
    free(avail_image); /* the host object keeps what it needs */
    if (r != CUPTI_SUCCESS) {
        record("error cuptiProfilerHostInitialize failed: %s\n", cupti_error(r));
        return -1;
    }
    p->host = host.pHostObject;
    CUpti_Profiler_Host_ConfigAddMetrics_Params add = {
        .structSize = CUpti_Profiler_Host_ConfigAddMetrics_Params_STRUCT_SIZE};
    add.pHostObject = p->host;
    add.ppMetricNames = metric_names;
    add.numMetrics = N_METRICS;
    TRY(cuptiProfilerHostConfigAddMetrics(&add));
    CUpti_Profiler_Host_GetConfigImageSize_Params csize = {
        .structSize = CUpti_Profiler_Host_GetConfigImageSize_Params_STRUCT_SIZE};
    csize.pHostObject = p->host;
    TRY(cuptiProfilerHostGetConfigImageSize(&csize));
    p->config_size = csize.configImageSize;
    if (!(p->config_image = malloc(p->config_size ? p->config_size : 1))) {
        record("error out of memory for the profiler configuration\n");
        return -1;
    }
    CUpti_Profiler_Host_GetConfigImage_Params cimg = {
        .structSize = CUpti_Profiler_Host_GetConfigImage_Params_STRUCT_SIZE};
    cimg.pHostObject = p->host;
    cimg.configImageSize = p->config_size;
    cimg.pConfigImage = p->config_image;
    TRY(cuptiProfilerHostGetConfigImage(&cimg));
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

/* The profiling state of ctx, set up on its first profiled launch; NULL when
 * it cannot have counters. */
static prof_ctx *context_of(CUcontext ctx)
{
    static int full_noted;
    for (size_t i = 0; i < n_contexts; i++)
        if (contexts[i].ctx == ctx)
            return contexts[i].broken ? NULL : &contexts[i];
    if (n_contexts == MAX_CONTEXTS) {
        if (!full_noted) { /* say it once */
            full_noted = 1;
            record("error more than %d CUDA contexts: no counters for the others\n", MAX_CONTEXTS);
        }
        return NULL;
    }
    prof_ctx *p = &contexts[n_contexts++];
    memset(p, 0, sizeof *p);
    p->ctx = ctx;
    if (profiler_setup(p) != 0) {
        p->broken = 1;
        free_prof_ctx(p);
        return NULL;
    }
    return p;
}

/* Prepares the counter data image and the configuration for one launch. */
static int profiler_arm(prof_ctx *p)
{
    CUpti_RangeProfiler_CounterDataImage_Initialize_Params ci = {
        .structSize = CUpti_RangeProfiler_CounterDataImage_Initialize_Params_STRUCT_SIZE};
    ci.pRangeProfilerObject = p->range;
    ci.counterDataSize = p->counter_size;
    ci.pCounterData = p->counter_data;
    TRY(cuptiRangeProfilerCounterDataImageInitialize(&ci));
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
    TRY(cuptiRangeProfilerSetConfig(&sc));
    CUpti_RangeProfiler_Start_Params st = {.structSize = CUpti_RangeProfiler_Start_Params_STRUCT_SIZE};
    st.pRangeProfilerObject = p->range;
    TRY(cuptiRangeProfilerStart(&st));
    return 0;
}

static int profiler_collect(prof_ctx *p)
{
    CUpti_RangeProfiler_Stop_Params sp = {.structSize = CUpti_RangeProfiler_Stop_Params_STRUCT_SIZE};
    sp.pRangeProfilerObject = p->range;
    TRY(cuptiRangeProfilerStop(&sp));
    if (!sp.isAllPassSubmitted) {
        record("error kernel replay did not submit every pass for %s\n", profiling_name);
        return -1;
    }
    CUpti_RangeProfiler_DecodeData_Params dd = {.structSize = CUpti_RangeProfiler_DecodeData_Params_STRUCT_SIZE};
    dd.pRangeProfilerObject = p->range;
    TRY(cuptiRangeProfilerDecodeData(&dd));
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

static void launch_dims(CUpti_CallbackId cbid, const void *params, unsigned d[6])
{
    memset(d, 0, 6 * sizeof *d);
    if (!params)
        return;
    if (cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx || cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz) {
        const CUlaunchConfig *c = ((const cuLaunchKernelEx_params *)params)->config;
        if (c) {
            d[0] = c->gridDimX, d[1] = c->gridDimY, d[2] = c->gridDimZ;
            d[3] = c->blockDimX, d[4] = c->blockDimY, d[5] = c->blockDimZ;
        }
    } else { /* cuLaunchKernel(_ptsz), cuLaunchCooperativeKernel(_ptsz): the same leading arguments */
        const cuLaunchKernel_params *p = params;
        d[0] = p->gridDimX, d[1] = p->gridDimY, d[2] = p->gridDimZ;
        d[3] = p->blockDimX, d[4] = p->blockDimY, d[5] = p->blockDimZ;
    }
}

/* API enter of a launch, with launch_lock held: whether to profile it. */
static void choose(CUpti_CallbackId cbid, const CUpti_CallbackData *cb)
{
    if (is_graph_launch(cbid))
        return; /* held only so that the graph's kernels stay out of a profiled range */
    unsigned d[6];
    launch_dims(cbid, cb->functionParams, d);
    long n = launches++;
    if (n < skip_launches || !cb->symbolName || !d[0] || !d[3] || !first_launch_of(signature_hash(cb->symbolName, d)))
        return;
    prof_ctx *p = context_of(cb->context);
    if (!p)
        return;
    memcpy(profiling_dims, d, sizeof d);
    snprintf(profiling_name, sizeof profiling_name, "%s", cb->symbolName);
    if (profiler_arm(p) != 0) {
        p->broken = 1; /* keep the activity records; no more replays here */
        return;
    }
    profiling = p;
    if (++profiled >= max_profiled)
        atomic_store(&counters_active, 0); /* later launches skip the lock */
}

static void CUPTIAPI on_callback(void *user, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void *data)
{
    (void)user;
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
    if (profiling) {
        if (profiler_collect(profiling) != 0)
            profiling->broken = 1;
        profiling = NULL;
    }
    pthread_mutex_unlock(&launch_lock);
}

/* ---- delivery: the flush thread, signals, exit ---------------------------- */

static sem_t flush_wake;
static atomic_int flush_stop, term_signal;
static pthread_t flusher;
static int flusher_started;
static long flush_ms = 200;
static struct sigaction previous_term, previous_int;

static void final_flush(const char *why)
{
    cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
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
        cuptiActivityFlushAll(0); /* buffers whose records are all complete, full or not */
    }
}

static void at_exit(void)
{
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

static int setup(void)
{
    const char *path = getenv("KACE_CUPTI_OUTPUT");
    if (!path || !*path)
        return -1; /* not run by kace: do nothing */
    FILE *f = fopen(path, "we");
    if (!f)
        return -1;
    pthread_mutex_lock(&out_lock);
    out = f;
    pthread_mutex_unlock(&out_lock);
    record("kace-cupti 1\nclock monotonic\n");
    max_profiled = env_long("KACE_CUPTI_MAX_PROFILED", 256);
    skip_launches = env_long("KACE_CUPTI_SKIP", 0);
    flush_ms = env_long("KACE_CUPTI_FLUSH_MS", 200);
    if (flush_ms < 10)
        flush_ms = 10;
    int counters_on = env_long("KACE_CUPTI_COUNTERS", 1) != 0 && max_profiled > 0;
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
        atomic_store(&counters_active, 1);
    }
    return 0;
}

EXPORT int InitializeInjection(void)
{
    static atomic_int done;
    if (atomic_exchange(&done, 1) == 0)
        setup();
    return 1; /* never fail the workload's CUDA initialisation */
}
