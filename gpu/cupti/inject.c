/* libkace_cupti.so: kernel metrics of any CUDA program, unchanged.
 *
 * The CUDA driver loads this library when CUDA_INJECTION64_PATH names it and
 * calls InitializeInjection() once. It writes a recording (format in
 * include/kace/kernels.h) to the file named by $KACE_CUPTI_OUTPUT:
 *  - every kernel's grid, block, registers per thread, static and dynamic
 *    shared memory and duration, from CUPTI Activity records
 *    (CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), with CLOCK_MONOTONIC times (a
 *    timestamp callback), so that kace can keep the kernels of the steady
 *    window;
 *  - for the first launch of each signature (kernel name, grid, block), up
 *    to $KACE_CUPTI_MAX_PROFILED (default 256) launches after
 *    $KACE_CUPTI_SKIP (default 0), the three Speed-Of-Light metrics ncu
 *    reports, with the Range Profiler in auto range + kernel replay mode:
 *      sm__throughput.avg.pct_of_peak_sustained_elapsed
 *      dram__throughput.avg.pct_of_peak_sustained_elapsed
 *      gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed
 *    ($KACE_CUPTI_COUNTERS=0 turns this off).
 *
 * Why the Range Profiler and not PM sampling: the paper's metrics are per
 * kernel, duration-weighted, with ncu's definitions. The Range Profiler with
 * kernel replay measures exactly one kernel with the same metric definitions
 * as ncu (ncu uses the same profiler), on any GPU from Volta on including
 * Hopper under CUDA 13. PM sampling samples the whole GPU at an interval:
 * no replay, but its values mix overlapping kernels, must be attributed to
 * kernels by time, and its metric list is a subset that may lack the
 * composite throughput metrics. The cost of replay is bounded here by
 * profiling each signature once (a training step repeats the same kernels),
 * while the Activity API, which is cheap, sees every launch.
 *
 * Nothing here may crash or stop the workload: failures are written as
 * "error ..." records and the library carries on with what still works.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda.h>
#include <cupti.h>
#include "profiler_host.h"
#include <cupti_profiler_target.h>
#include <cupti_range_profiler.h>
#include <cupti_target.h>

#define EXPORT __attribute__((visibility("default")))
#define BUFFER_SIZE (8u << 20)
#define MAX_SIGNATURES 8192

static const char *metric_names[3] = {
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static FILE *out;
static CUpti_SubscriberHandle subscriber;
static long max_profiled = 256, skip_launches = 0, launches, profiled;
static int counters_on = 1, counters_broken;

/* Range profiler state (one context: the first that launches a kernel). */
static CUcontext prof_ctx;
static CUpti_RangeProfiler_Object *range_obj;
static CUpti_Profiler_Host_Object *host_obj;
static uint8_t *config_image, *counter_data;
static size_t config_size, counter_size;
static __thread int active; /* this thread started a range around its launch */
static __thread unsigned active_dims[6];
static __thread char active_name[512];

static uint64_t signatures[MAX_SIGNATURES];
static size_t n_signatures;

static uint64_t monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Writes one record line (under the lock). */
static void record(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void record(const char *fmt, ...)
{
    if (!out)
        return;
    va_list ap;
    va_start(ap, fmt);
    pthread_mutex_lock(&lock);
    vfprintf(out, fmt, ap);
    fflush(out);
    pthread_mutex_unlock(&lock);
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

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
    *buffer = aligned_alloc(8, BUFFER_SIZE);
    *size = *buffer ? BUFFER_SIZE : 0;
    *max_records = 0;
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid)
{
    CUpti_Activity *rec = NULL;
    pthread_mutex_lock(&lock);
    while (out && cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
        if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && rec->kind != CUPTI_ACTIVITY_KIND_KERNEL)
            continue;
        const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)rec;
        fprintf(out, "kernel %llu %llu %d %d %d %d %d %d %u %d %d %s\n", (unsigned long long)k->start,
                (unsigned long long)k->end, k->gridX, k->gridY, k->gridZ, k->blockX, k->blockY, k->blockZ,
                (unsigned)k->registersPerThread, k->staticSharedMemory, k->dynamicSharedMemory,
                k->name ? k->name : "<unknown>");
    }
    size_t dropped = 0;
    if (out && cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped) == CUPTI_SUCCESS && dropped)
        fprintf(out, "dropped %zu\n", dropped);
    if (out)
        fflush(out);
    pthread_mutex_unlock(&lock);
    free(buffer);
}

/* ---- counters ------------------------------------------------------------- */

static int profiler_setup(CUcontext ctx)
{
    CUpti_Profiler_Initialize_Params init = {.structSize = CUpti_Profiler_Initialize_Params_STRUCT_SIZE};
    TRY(cuptiProfilerInitialize(&init));
    CUdevice dev;
    if (cuCtxGetDevice(&dev) != CUDA_SUCCESS) {
        record("error cuCtxGetDevice failed\n");
        return -1;
    }
    CUpti_Device_GetChipName_Params chip = {.structSize = CUpti_Device_GetChipName_Params_STRUCT_SIZE};
    chip.deviceIndex = (size_t)dev;
    TRY(cuptiDeviceGetChipName(&chip));
    CUpti_Profiler_GetCounterAvailability_Params avail = {.structSize = CUpti_Profiler_GetCounterAvailability_Params_STRUCT_SIZE};
    avail.ctx = ctx;
    TRY(cuptiProfilerGetCounterAvailability(&avail));
    uint8_t *avail_image = malloc(avail.counterAvailabilityImageSize);
    if (!avail_image)
        return -1;
    avail.pCounterAvailabilityImage = avail_image;
    TRY(cuptiProfilerGetCounterAvailability(&avail));

    CUpti_Profiler_Host_Initialize_Params host = {.structSize = CUpti_Profiler_Host_Initialize_Params_STRUCT_SIZE};
    host.profilerType = CUPTI_PROFILER_TYPE_RANGE_PROFILER;
    host.pChipName = chip.pChipName;
    host.pCounterAvailabilityImage = avail_image;
    TRY(cuptiProfilerHostInitialize(&host));
    host_obj = host.pHostObject;
    CUpti_Profiler_Host_ConfigAddMetrics_Params add = {.structSize = CUpti_Profiler_Host_ConfigAddMetrics_Params_STRUCT_SIZE};
    add.pHostObject = host_obj;
    add.ppMetricNames = metric_names;
    add.numMetrics = 3;
    TRY(cuptiProfilerHostConfigAddMetrics(&add));
    CUpti_Profiler_Host_GetConfigImageSize_Params csize = {.structSize = CUpti_Profiler_Host_GetConfigImageSize_Params_STRUCT_SIZE};
    csize.pHostObject = host_obj;
    TRY(cuptiProfilerHostGetConfigImageSize(&csize));
    config_size = csize.configImageSize;
    config_image = malloc(config_size);
    if (!config_image)
        return -1;
    CUpti_Profiler_Host_GetConfigImage_Params cimg = {.structSize = CUpti_Profiler_Host_GetConfigImage_Params_STRUCT_SIZE};
    cimg.pHostObject = host_obj;
    cimg.configImageSize = config_size;
    cimg.pConfigImage = config_image;
    TRY(cuptiProfilerHostGetConfigImage(&cimg));
    CUpti_Profiler_Host_GetNumOfPasses_Params passes = {.structSize = CUpti_Profiler_Host_GetNumOfPasses_Params_STRUCT_SIZE};
    passes.configImageSize = config_size;
    passes.pConfigImage = config_image;
    if (cuptiProfilerHostGetNumOfPasses(&passes) == CUPTI_SUCCESS)
        record("# chip %s, %zu replay passes per profiled kernel\n", chip.pChipName, passes.numOfPasses);

    CUpti_RangeProfiler_Enable_Params en = {.structSize = CUpti_RangeProfiler_Enable_Params_STRUCT_SIZE};
    en.ctx = ctx;
    TRY(cuptiRangeProfilerEnable(&en));
    range_obj = en.pRangeProfilerObject;
    CUpti_RangeProfiler_GetCounterDataSize_Params ds = {.structSize = CUpti_RangeProfiler_GetCounterDataSize_Params_STRUCT_SIZE};
    ds.pRangeProfilerObject = range_obj;
    ds.pMetricNames = metric_names;
    ds.numMetrics = 3;
    ds.maxNumOfRanges = 1;
    ds.maxNumRangeTreeNodes = 1;
    TRY(cuptiRangeProfilerGetCounterDataSize(&ds));
    counter_size = ds.counterDataSize;
    counter_data = malloc(counter_size);
    if (!counter_data)
        return -1;
    prof_ctx = ctx;
    return 0;
}

/* Prepares the counter data image and the configuration for one launch. */
static int profiler_arm(void)
{
    CUpti_RangeProfiler_CounterDataImage_Initialize_Params ci = {
        .structSize = CUpti_RangeProfiler_CounterDataImage_Initialize_Params_STRUCT_SIZE};
    ci.pRangeProfilerObject = range_obj;
    ci.counterDataSize = counter_size;
    ci.pCounterData = counter_data;
    TRY(cuptiRangeProfilerCounterDataImageInitialize(&ci));
    CUpti_RangeProfiler_SetConfig_Params sc = {.structSize = CUpti_RangeProfiler_SetConfig_Params_STRUCT_SIZE};
    sc.pRangeProfilerObject = range_obj;
    sc.configSize = config_size;
    sc.pConfig = config_image;
    sc.counterDataImageSize = counter_size;
    sc.pCounterDataImage = counter_data;
    sc.range = CUPTI_AutoRange;
    sc.replayMode = CUPTI_KernelReplay;
    sc.maxRangesPerPass = 1;
    sc.numNestingLevels = 1;
    sc.minNestingLevel = 1;
    sc.passIndex = 0;
    sc.targetNestingLevel = 1;
    TRY(cuptiRangeProfilerSetConfig(&sc));
    CUpti_RangeProfiler_Start_Params st = {.structSize = CUpti_RangeProfiler_Start_Params_STRUCT_SIZE};
    st.pRangeProfilerObject = range_obj;
    TRY(cuptiRangeProfilerStart(&st));
    return 0;
}

static int profiler_collect(void)
{
    CUpti_RangeProfiler_Stop_Params sp = {.structSize = CUpti_RangeProfiler_Stop_Params_STRUCT_SIZE};
    sp.pRangeProfilerObject = range_obj;
    TRY(cuptiRangeProfilerStop(&sp));
    if (!sp.isAllPassSubmitted) {
        record("error kernel replay did not submit every pass for %s\n", active_name);
        return -1;
    }
    CUpti_RangeProfiler_DecodeData_Params dd = {.structSize = CUpti_RangeProfiler_DecodeData_Params_STRUCT_SIZE};
    dd.pRangeProfilerObject = range_obj;
    TRY(cuptiRangeProfilerDecodeData(&dd));
    double values[3] = {0, 0, 0};
    CUpti_Profiler_Host_EvaluateToGpuValues_Params ev = {.structSize = CUpti_Profiler_Host_EvaluateToGpuValues_Params_STRUCT_SIZE};
    ev.pHostObject = host_obj;
    ev.pCounterDataImage = counter_data;
    ev.counterDataImageSize = counter_size;
    ev.rangeIndex = 0;
    ev.ppMetricNames = metric_names;
    ev.numMetrics = 3;
    ev.pMetricValues = values;
    TRY(cuptiProfilerHostEvaluateToGpuValues(&ev));
    record("counters %.4f %.4f %.4f %u %u %u %u %u %u %s\n", values[0], values[1], values[2], active_dims[0],
           active_dims[1], active_dims[2], active_dims[3], active_dims[4], active_dims[5], active_name);
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

static void launch_dims(CUpti_CallbackId cbid, const void *params, unsigned d[6])
{
    memset(d, 0, 6 * sizeof *d);
    if (cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx || cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz) {
        const CUlaunchConfig *c = ((const cuLaunchKernelEx_params *)params)->config;
        if (c) {
            d[0] = c->gridDimX, d[1] = c->gridDimY, d[2] = c->gridDimZ;
            d[3] = c->blockDimX, d[4] = c->blockDimY, d[5] = c->blockDimZ;
        }
    } else { /* cuLaunchKernel(_ptsz), cuLaunchCooperativeKernel: the same leading arguments */
        const cuLaunchKernel_params *p = params;
        d[0] = p->gridDimX, d[1] = p->gridDimY, d[2] = p->gridDimZ;
        d[3] = p->blockDimX, d[4] = p->blockDimY, d[5] = p->blockDimZ;
    }
}

static void CUPTIAPI on_callback(void *user, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void *data)
{
    if (domain != CUPTI_CB_DOMAIN_DRIVER_API || !counters_on)
        return;
    const CUpti_CallbackData *cb = data;
    if (cb->callbackSite == CUPTI_API_ENTER) {
        pthread_mutex_lock(&lock);
        int take = 0;
        unsigned d[6];
        launch_dims(cbid, cb->functionParams, d);
        long n = launches++;
        if (!counters_broken && n >= skip_launches && profiled < max_profiled && cb->symbolName && d[0] &&
            first_launch_of(signature_hash(cb->symbolName, d))) {
            if (!range_obj && !prof_ctx && profiler_setup(cb->context) != 0)
                counters_broken = 1;
            take = !counters_broken && cb->context == prof_ctx;
            if (take)
                profiled++;
        }
        pthread_mutex_unlock(&lock);
        if (take) {
            memcpy(active_dims, d, sizeof d);
            snprintf(active_name, sizeof active_name, "%s", cb->symbolName);
            active = profiler_arm() == 0;
        }
    } else if (active) {
        active = 0;
        if (profiler_collect() != 0) {
            pthread_mutex_lock(&lock);
            counters_broken = 1; /* one failure: stop replaying, keep the activity records */
            pthread_mutex_unlock(&lock);
        }
    }
}

/* ---- set-up and end --------------------------------------------------------- */

static void at_exit(void)
{
    cuptiActivityFlushAll(1);
    pthread_mutex_lock(&lock);
    if (out) {
        fclose(out);
        out = NULL;
    }
    pthread_mutex_unlock(&lock);
}

static long env_long(const char *name, long fallback)
{
    const char *s = getenv(name);
    char *end = NULL;
    long v = s ? strtol(s, &end, 10) : fallback;
    return (s && end && *end == '\0' && v >= 0) ? v : fallback;
}

static int setup(void)
{
    const char *path = getenv("KACE_CUPTI_OUTPUT");
    if (!path || !*path)
        return -1; /* not run by kace: do nothing */
    out = fopen(path, "w");
    if (!out)
        return -1;
    record("kace-cupti 1\nclock monotonic\n");
    max_profiled = env_long("KACE_CUPTI_MAX_PROFILED", 256);
    skip_launches = env_long("KACE_CUPTI_SKIP", 0);
    counters_on = env_long("KACE_CUPTI_COUNTERS", 1) != 0;
    TRY(cuptiActivityRegisterTimestampCallback(monotonic_ns));
    TRY(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed));
    TRY(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
    if (cuptiActivityFlushPeriod(500) != CUPTI_SUCCESS) /* records reach the file while the workload runs */
        record("error cuptiActivityFlushPeriod failed: records are written at exit only\n");
    atexit(at_exit);
    if (counters_on) {
        TRY(cuptiSubscribe(&subscriber, on_callback, NULL));
        static const CUpti_CallbackId launches_cb[] = {
            CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,   CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
            CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,
            CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel,
        };
        for (size_t i = 0; i < sizeof launches_cb / sizeof launches_cb[0]; i++)
            TRY(cuptiEnableCallback(1, subscriber, CUPTI_CB_DOMAIN_DRIVER_API, launches_cb[i]));
    }
    return 0;
}

EXPORT int InitializeInjection(void)
{
    setup();
    return 1; /* never fail the workload's CUDA initialisation */
}
