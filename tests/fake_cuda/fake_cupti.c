/* The fake CUPTI, libcupti.so.13 (see fake_cuda.h): the Activity, Callback
 * and Range Profiler calls that libkace_cupti.so makes, with the real
 * headers' structs. */
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cupti.h>
#include <cupti_profiler_target.h>
#include <cupti_range_profiler.h>
#include <cupti_target.h>

#include "fake_cuda.h"
#include "profiler_host.h"

#define EXPORT __attribute__((visibility("default")))
#define MAX_CBID 2048
#define MAX_PENDING 4096
#define MAX_RANGE_OBJECTS 64
#define CONFIG_IMAGE_SIZE 128
#define COUNTER_DATA_SIZE 256
#define AVAILABILITY_SIZE 64
#define CUPTI_CLOCK_OFFSET 1000000000000000ull /* CUPTI's own clock, when the client gives none */

static void violation(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- state -------------------------------------------------------------------- */

typedef struct buffer {
    uint8_t *data;
    size_t size, used;
    uint64_t last_end; /* the latest end time of its records */
} buffer;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
/* callbacks */
static CUpti_CallbackFunc subscriber_fn;
static void *subscriber_user;
static int subscribed;
static unsigned char enabled_cbid[MAX_CBID];
static int destroy_callback; /* CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING enabled */
/* activity */
static int kernel_activity;
static CUpti_BuffersCallbackRequestFunc requested_fn;
static CUpti_BuffersCallbackCompleteFunc completed_fn;
static CUpti_TimestampCallbackFunc timestamp_fn;
static buffer current;                 /* being filled */
static buffer pending[MAX_PENDING];    /* closed, not yet delivered */
static size_t n_pending;
static size_t dropped;
static pthread_t period_thread;
static int period_ms, period_started;
/* profiler */
static int profiler_initialized;

struct CUpti_RangeProfiler_Object {
    CUcontext ctx;
    int configured, started;
    int disabled; /* cuptiRangeProfilerDisable: the object is gone */
    int dead;     /* its context was destroyed while it was enabled */
    uint8_t *counter_data;
    size_t counter_size;
    int n_captured;          /* kernels run in the range since Start */
    double values[3];        /* of the first */
    atomic_int in_call;      /* concurrent calls on one object */
};
struct CUpti_Profiler_Host_Object {
    int n_metrics;
};
static int n_host_objects; /* initialised and not deinitialised */
static struct CUpti_RangeProfiler_Object *ranges[MAX_RANGE_OBJECTS];
static size_t n_ranges;

static const char *const known_metrics[3] = {
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
};

static void violation(const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "fake-cupti: violation: %s\n", msg);
}

static uint64_t timestamp(uint64_t monotonic)
{
    return timestamp_fn ? monotonic : monotonic + CUPTI_CLOCK_OFFSET;
}

/* ---- results and callbacks ------------------------------------------------------ */

EXPORT CUptiResult cuptiGetResultString(CUptiResult result, const char **str)
{
    *str = result == CUPTI_SUCCESS ? "CUPTI_SUCCESS" : "CUPTI_ERROR (fake)";
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiSubscribe(CUpti_SubscriberHandle *subscriber, CUpti_CallbackFunc callback, void *userdata)
{
    pthread_mutex_lock(&lock);
    if (subscribed) {
        pthread_mutex_unlock(&lock);
        return CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
    }
    subscribed = 1;
    subscriber_fn = callback;
    subscriber_user = userdata;
    *subscriber = (CUpti_SubscriberHandle)&subscribed;
    pthread_mutex_unlock(&lock);
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiEnableCallback(uint32_t enable, CUpti_SubscriberHandle subscriber, CUpti_CallbackDomain domain,
                                       CUpti_CallbackId cbid)
{
    if (subscriber != (CUpti_SubscriberHandle)&subscribed)
        return CUPTI_ERROR_INVALID_PARAMETER;
    if (domain == CUPTI_CB_DOMAIN_RESOURCE && cbid == CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING) {
        pthread_mutex_lock(&lock);
        destroy_callback = enable != 0;
        pthread_mutex_unlock(&lock);
        return CUPTI_SUCCESS;
    }
    if (domain != CUPTI_CB_DOMAIN_DRIVER_API || cbid >= MAX_CBID)
        return CUPTI_ERROR_INVALID_PARAMETER;
    pthread_mutex_lock(&lock);
    enabled_cbid[cbid] = enable != 0;
    pthread_mutex_unlock(&lock);
    return CUPTI_SUCCESS;
}

static void hook_api(CUcontext ctx, uint32_t context_id, int cbid, int site, const char *function, const char *symbol,
                     const void *params, uint32_t correlation, CUresult result)
{
    pthread_mutex_lock(&lock);
    CUpti_CallbackFunc fn = cbid >= 0 && cbid < MAX_CBID && enabled_cbid[cbid] ? subscriber_fn : NULL;
    void *user = subscriber_user;
    pthread_mutex_unlock(&lock);
    if (!fn)
        return;
    uint64_t correlation_data = 0;
    CUpti_CallbackData cb;
    memset(&cb, 0, sizeof cb);
    cb.callbackSite = site == 0 ? CUPTI_API_ENTER : CUPTI_API_EXIT;
    cb.functionName = function;
    cb.functionParams = params;
    cb.symbolName = symbol;
    cb.context = ctx;
    cb.contextUid = context_id;
    cb.correlationData = &correlation_data;
    cb.correlationId = correlation;
    cb.functionReturnValue = site == 0 ? NULL : &result; /* valid only at exit, as in CUPTI */
    fn(user, CUPTI_CB_DOMAIN_DRIVER_API, (CUpti_CallbackId)cbid, &cb); /* on the application's thread, no lock held */
}

/* ---- activity ------------------------------------------------------------------- */

EXPORT CUptiResult cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc requested,
                                                  CUpti_BuffersCallbackCompleteFunc completed)
{
    if (!requested || !completed)
        return CUPTI_ERROR_INVALID_PARAMETER;
    pthread_mutex_lock(&lock);
    requested_fn = requested;
    completed_fn = completed;
    pthread_mutex_unlock(&lock);
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiActivityRegisterTimestampCallback(CUpti_TimestampCallbackFunc fn)
{
    pthread_mutex_lock(&lock);
    timestamp_fn = fn;
    pthread_mutex_unlock(&lock);
    return CUPTI_SUCCESS;
}

/* Kernels that run after it get no record. */
EXPORT CUptiResult cuptiActivityDisable(CUpti_ActivityKind kind)
{
    if (kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && kind != CUPTI_ACTIVITY_KIND_KERNEL)
        return CUPTI_ERROR_NOT_COMPATIBLE;
    pthread_mutex_lock(&lock);
    kernel_activity = 0;
    pthread_mutex_unlock(&lock);
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiActivityEnable(CUpti_ActivityKind kind)
{
    if (kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && kind != CUPTI_ACTIVITY_KIND_KERNEL)
        return CUPTI_ERROR_NOT_COMPATIBLE;
    pthread_mutex_lock(&lock);
    int ok = requested_fn != NULL;
    kernel_activity = ok;
    pthread_mutex_unlock(&lock);
    return ok ? CUPTI_SUCCESS : CUPTI_ERROR_INVALID_OPERATION;
}

EXPORT CUptiResult cuptiActivityGetNumDroppedRecords(CUcontext context, uint32_t stream, size_t *n)
{
    (void)context, (void)stream;
    pthread_mutex_lock(&lock);
    *n = dropped;
    dropped = 0;
    pthread_mutex_unlock(&lock);
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiActivityGetNextRecord(uint8_t *data, size_t valid, CUpti_Activity **record)
{
    if (!data)
        return CUPTI_ERROR_INVALID_PARAMETER;
    uint8_t *next = *record ? (uint8_t *)*record + sizeof(CUpti_ActivityKernel10) : data;
    if ((size_t)(next - data) + sizeof(CUpti_ActivityKernel10) > valid)
        return CUPTI_ERROR_MAX_LIMIT_REACHED;
    *record = (CUpti_Activity *)next;
    return CUPTI_SUCCESS;
}

/* Takes the buffers to deliver (under lock). full_only: the periodic flush;
 * forced: everything, in-flight records given end = 0. */
static size_t take_buffers(buffer *out, size_t max, int full_only, int forced, uint64_t now)
{
    size_t n = 0;
    /* The buffer being filled is closed when a flush may return it. */
    if (current.data && current.used > 0 && !full_only && (forced || current.last_end <= now) && n_pending < MAX_PENDING) {
        pending[n_pending++] = current;
        memset(&current, 0, sizeof current);
    }
    size_t kept = 0;
    for (size_t i = 0; i < n_pending; i++) {
        buffer *b = &pending[i];
        int full = b->used + sizeof(CUpti_ActivityKernel10) > b->size;
        int complete = b->last_end <= now;
        if (n < max && (forced || (complete && (full || !full_only))))
            out[n++] = *b;
        else
            pending[kept++] = *b;
    }
    n_pending = kept;
    return n;
}

static void deliver(buffer *b, size_t n, uint64_t now)
{
    for (size_t i = 0; i < n; i++) {
        for (size_t at = 0; at + sizeof(CUpti_ActivityKernel10) <= b[i].used; at += sizeof(CUpti_ActivityKernel10)) {
            CUpti_ActivityKernel10 *k = (CUpti_ActivityKernel10 *)(b[i].data + at);
            if (k->end > timestamp(now))
                k->end = 0; /* incomplete: its end is not known yet */
        }
        completed_fn(NULL, 0, b[i].data, b[i].size, b[i].used);
    }
}

static CUptiResult flush(int full_only, int forced)
{
    static buffer out[MAX_PENDING];
    static pthread_mutex_t flush_lock = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&flush_lock); /* one flush at a time delivers in order */
    pthread_mutex_lock(&lock);
    if (!completed_fn) {
        pthread_mutex_unlock(&lock);
        pthread_mutex_unlock(&flush_lock);
        return CUPTI_ERROR_INVALID_OPERATION;
    }
    uint64_t now = fake_cuda_now_ns();
    size_t n = take_buffers(out, MAX_PENDING, full_only, forced, now);
    pthread_mutex_unlock(&lock);
    deliver(out, n, now); /* the client's callback runs without CUPTI's lock */
    pthread_mutex_unlock(&flush_lock);
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiActivityFlushAll(uint32_t flag)
{
    return flush(0, (flag & CUPTI_ACTIVITY_FLAG_FLUSH_FORCED) != 0);
}

static void *period_loop(void *arg)
{
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&lock);
        int ms = period_ms;
        pthread_mutex_unlock(&lock);
        struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
        if (ms > 0)
            flush(1, 0); /* only full buffers, as the header says */
    }
    return NULL;
}

EXPORT CUptiResult cuptiActivityFlushPeriod(uint32_t ms)
{
    pthread_mutex_lock(&lock);
    period_ms = (int)ms;
    int start = !period_started && ms > 0;
    period_started |= start;
    pthread_mutex_unlock(&lock);
    if (start && pthread_create(&period_thread, NULL, period_loop, NULL) == 0)
        pthread_detach(period_thread);
    return CUPTI_SUCCESS;
}

/* Appends a kernel record, asking the client for a buffer when needed.
 * Returns with lock released. */
static void add_kernel_record(const fake_kernel *k, uint64_t start, uint64_t end, uint32_t correlation,
                              uint32_t context_id)
{
    pthread_mutex_lock(&lock);
    if (!kernel_activity) {
        pthread_mutex_unlock(&lock);
        return;
    }
    if (current.data && current.used + sizeof(CUpti_ActivityKernel10) > current.size) {
        if (n_pending < MAX_PENDING)
            pending[n_pending++] = current;
        else
            dropped++;
        memset(&current, 0, sizeof current);
    }
    if (!current.data) {
        uint8_t *data = NULL;
        size_t size = 0, max_records = 0;
        CUpti_BuffersCallbackRequestFunc req = requested_fn;
        pthread_mutex_unlock(&lock);
        req(&data, &size, &max_records); /* on the launching thread, as CUPTI may */
        pthread_mutex_lock(&lock);
        if (!data || size < sizeof(CUpti_ActivityKernel10)) {
            dropped++;
            free(data);
            pthread_mutex_unlock(&lock);
            return;
        }
        if (current.data) { /* another thread got one meanwhile: keep theirs, close ours later */
            if (n_pending < MAX_PENDING)
                pending[n_pending++] = (buffer){data, size, 0, 0};
            else
                free(data);
        } else {
            current = (buffer){data, size, 0, 0};
        }
        if (current.used + sizeof(CUpti_ActivityKernel10) > current.size) {
            dropped++;
            pthread_mutex_unlock(&lock);
            return;
        }
    }
    CUpti_ActivityKernel10 *r = (CUpti_ActivityKernel10 *)(current.data + current.used);
    memset(r, 0, sizeof *r);
    r->kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
    r->start = timestamp(start);
    r->end = timestamp(end);
    r->gridX = (int32_t)k->grid[0], r->gridY = (int32_t)k->grid[1], r->gridZ = (int32_t)k->grid[2];
    r->blockX = (int32_t)k->block[0], r->blockY = (int32_t)k->block[1], r->blockZ = (int32_t)k->block[2];
    r->registersPerThread = (uint16_t)k->regs;
    r->staticSharedMemory = (int32_t)k->static_smem;
    r->dynamicSharedMemory = (int32_t)k->dynamic_smem;
    r->name = k->name; /* the application's string lives as long as the process */
    r->correlationId = correlation;
    r->contextId = context_id;
    current.used += sizeof *r;
    if (r->end > current.last_end)
        current.last_end = r->end;
    pthread_mutex_unlock(&lock);
}

/* KACE_FAKE_REPLAY_S: what replaying one launch costs beyond its passes'
 * kernel time (saving and restoring the memory it touches, the passes'
 * set-up), divided by KACE_FAKE_TIME_SCALE: a stand-in's first step then
 * slows in proportion to the signatures it replays, as on the H200 (BERT's
 * first training step took 22.4 s with 93 signatures replayed: 0.24 s each). */
static uint64_t replay_overhead_ns(void)
{
    const char *s = getenv("KACE_FAKE_REPLAY_S"), *f = getenv("KACE_FAKE_TIME_SCALE");
    double seconds = s && *s ? atof(s) : 0, scale = f && *f ? atof(f) : 1;
    if (!(seconds > 0))
        return 0;
    return (uint64_t)(seconds / (scale > 0 ? scale : 1) * 1e9);
}

/* FAKE_CUPTI_REPLAY_LOG: one line per replayed launch ("replay <name>"),
 * appended, so that tests count the replays a run made (never time them). */
static void log_replay(const fake_kernel *k)
{
    const char *path = getenv("FAKE_CUPTI_REPLAY_LOG");
    if (!path || !*path)
        return;
    FILE *f = fopen(path, "a");
    if (!f)
        return;
    fprintf(f, "replay %u %u %u %u %u %u %s\n", k->grid[0], k->grid[1], k->grid[2], k->block[0], k->block[1],
            k->block[2], k->name);
    fclose(f);
}

static double counter_value(const fake_kernel *k, int metric)
{
    if (strstr(k->name, "nan_counters"))
        return NAN;
    if (strstr(k->name, "negative_counters"))
        return -1.0;
    double sm = k->grid[0] % 97 + 0.5, dram = k->block[0] % 89 + 0.25;
    return metric == 0 ? sm : metric == 1 ? dram : (sm > dram ? sm : dram);
}

static uint64_t hook_kernel(CUcontext ctx, uint32_t context_id, const fake_kernel *k, uint64_t start, uint64_t end,
                            uint32_t correlation, int in_graph)
{
    (void)in_graph;
    uint64_t replay = 0;
    int captured = 0;
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < n_ranges; i++) {
        struct CUpti_RangeProfiler_Object *r = ranges[i];
        if (r->ctx != ctx || !r->started || r->disabled || r->dead)
            continue;
        if (r->n_captured++ == 0) {
            for (int m = 0; m < 3; m++)
                r->values[m] = counter_value(k, m);
            uint64_t d = end - start;
            replay = (FAKE_REPLAY_PASSES - 1) * (d < 200000 ? d : 200000); /* bounded, for test time */
            replay += replay_overhead_ns();
            captured = 1;
        } else {
            violation("kernel %s ran inside a range that already holds a kernel (auto range, one range per pass): "
                      "another thread's launch or a graph kernel polluted a profiled range", k->name);
        }
    }
    pthread_mutex_unlock(&lock);
    if (captured)
        log_replay(k);
    /* FAKE_CUPTI_NO_RECORD_PROFILED=1: a profiled (replayed) launch gets no kernel
     * record at all, as real CUPTI gave none for each of its 93 profiled launches
     * of BERT training on an H200 (CUDA 13.0, driver 580.159.04). */
    const char *no_record = getenv("FAKE_CUPTI_NO_RECORD_PROFILED");
    if (!(captured && no_record && *no_record == '1'))
        add_kernel_record(k, start, end, correlation, context_id);
    /* FAKE_CUPTI_RECORD_PER_PASS: the other passes of a replayed launch each
     * get a kernel record of their own, with the launch's correlation ID. */
    const char *per_pass = getenv("FAKE_CUPTI_RECORD_PER_PASS");
    if (captured && per_pass && *per_pass == '1') {
        uint64_t d = end - start, at = end;
        for (int pass = 1; pass < FAKE_REPLAY_PASSES; pass++, at += d + 1000)
            add_kernel_record(k, at + 1000, at + 1000 + d, correlation, context_id);
    }
    return replay;
}

/* cuCtxDestroy: the resource callback, on the destroying thread; then the
 * context's range profiler objects are stale. */
static void hook_context_destroy(CUcontext ctx)
{
    pthread_mutex_lock(&lock);
    CUpti_CallbackFunc fn = destroy_callback ? subscriber_fn : NULL;
    void *user = subscriber_user;
    pthread_mutex_unlock(&lock);
    if (fn) {
        CUpti_ResourceData rd;
        memset(&rd, 0, sizeof rd);
        rd.context = ctx;
        fn(user, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING, &rd);
    }
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < n_ranges; i++)
        if (ranges[i]->ctx == ctx && !ranges[i]->disabled)
            ranges[i]->dead = 1;
    pthread_mutex_unlock(&lock);
}

static const fake_cupti_hooks hooks = {hook_api, hook_kernel, hook_context_destroy};

/* What was left enabled: the tests read this line. */
__attribute__((destructor)) static void report_at_exit(void)
{
    pthread_mutex_lock(&lock);
    int enabled = 0;
    for (size_t i = 0; i < n_ranges; i++)
        enabled += !ranges[i]->disabled && !ranges[i]->dead;
    int hosts = n_host_objects;
    pthread_mutex_unlock(&lock);
    if (profiler_initialized)
        fprintf(stderr, "fake-cupti: at exit %d range profiler(s) enabled, %d host object(s) initialised\n", enabled,
                hosts);
}

__attribute__((constructor)) static void register_with_driver(void)
{
    fake_cuda_register_cupti(&hooks);
}

/* ---- profiler ------------------------------------------------------------------- */

#define CHECK_SIZE(p_, type_)                                                                          \
    do {                                                                                               \
        if (!(p_) || (p_)->structSize != type_##_STRUCT_SIZE) {                                        \
            violation("%s: structSize %zu, expected %zu", __func__, (p_) ? (p_)->structSize : 0,       \
                      (size_t)type_##_STRUCT_SIZE);                                                    \
            return CUPTI_ERROR_INVALID_PARAMETER;                                                      \
        }                                                                                              \
    } while (0)

EXPORT CUptiResult cuptiProfilerInitialize(CUpti_Profiler_Initialize_Params *p)
{
    CHECK_SIZE(p, CUpti_Profiler_Initialize_Params);
    pthread_mutex_lock(&lock);
    profiler_initialized = 1;
    pthread_mutex_unlock(&lock);
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiProfilerDeviceSupported(CUpti_Profiler_DeviceSupported_Params *p)
{
    CHECK_SIZE(p, CUpti_Profiler_DeviceSupported_Params);
    if (p->api != CUPTI_PROFILER_RANGE_PROFILING)
        violation("cuptiProfilerDeviceSupported: api %d, expected CUPTI_PROFILER_RANGE_PROFILING", (int)p->api);
    const char *u = getenv("FAKE_CUPTI_UNSUPPORTED");
    int unsupported = u && !strcmp(u, "1");
    CUpti_Profiler_Support_Level ok = CUPTI_PROFILER_CONFIGURATION_SUPPORTED;
    p->architecture = p->sli = p->confidentialCompute = p->cmp = p->wsl = ok;
    p->vGpu = unsupported ? CUPTI_PROFILER_CONFIGURATION_DISABLED : ok;
    p->isSupported = unsupported ? CUPTI_PROFILER_CONFIGURATION_UNSUPPORTED : ok;
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiDeviceGetChipName(CUpti_Device_GetChipName_Params *p)
{
    CHECK_SIZE(p, CUpti_Device_GetChipName_Params);
    if (p->deviceIndex != 0)
        return CUPTI_ERROR_INVALID_DEVICE;
    p->pChipName = "GH100";
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiProfilerGetCounterAvailability(CUpti_Profiler_GetCounterAvailability_Params *p)
{
    CHECK_SIZE(p, CUpti_Profiler_GetCounterAvailability_Params);
    if (!profiler_initialized)
        return CUPTI_ERROR_NOT_INITIALIZED;
    if (!p->pCounterAvailabilityImage) {
        p->counterAvailabilityImageSize = AVAILABILITY_SIZE;
        return CUPTI_SUCCESS;
    }
    if (p->counterAvailabilityImageSize < AVAILABILITY_SIZE)
        return CUPTI_ERROR_INVALID_PARAMETER;
    memset(p->pCounterAvailabilityImage, 0xA5, AVAILABILITY_SIZE);
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiProfilerHostInitialize(CUpti_Profiler_Host_Initialize_Params *p)
{
    CHECK_SIZE(p, CUpti_Profiler_Host_Initialize_Params);
    if (p->profilerType != CUPTI_PROFILER_TYPE_RANGE_PROFILER || !p->pChipName || strcmp(p->pChipName, "GH100") != 0)
        return CUPTI_ERROR_INVALID_PARAMETER;
    if (!p->pCounterAvailabilityImage || p->pCounterAvailabilityImage[0] != 0xA5)
        violation("cuptiProfilerHostInitialize: no counter availability image from this device");
    p->pHostObject = calloc(1, sizeof *p->pHostObject);
    if (!p->pHostObject)
        return CUPTI_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&lock);
    n_host_objects++;
    pthread_mutex_unlock(&lock);
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiProfilerHostDeinitialize(CUpti_Profiler_Host_Deinitialize_Params *p)
{
    CHECK_SIZE(p, CUpti_Profiler_Host_Deinitialize_Params);
    if (!p->pHostObject)
        return CUPTI_ERROR_INVALID_PARAMETER;
    free(p->pHostObject);
    pthread_mutex_lock(&lock);
    n_host_objects--;
    pthread_mutex_unlock(&lock);
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiProfilerHostConfigAddMetrics(CUpti_Profiler_Host_ConfigAddMetrics_Params *p)
{
    CHECK_SIZE(p, CUpti_Profiler_Host_ConfigAddMetrics_Params);
    for (size_t i = 0; i < p->numMetrics; i++) {
        int known = 0;
        for (int m = 0; m < 3; m++)
            known |= strcmp(p->ppMetricNames[i], known_metrics[m]) == 0;
        if (!known)
            return CUPTI_ERROR_INVALID_METRIC_NAME;
    }
    p->pHostObject->n_metrics = (int)p->numMetrics;
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiProfilerHostGetConfigImageSize(CUpti_Profiler_Host_GetConfigImageSize_Params *p)
{
    CHECK_SIZE(p, CUpti_Profiler_Host_GetConfigImageSize_Params);
    p->configImageSize = CONFIG_IMAGE_SIZE;
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiProfilerHostGetConfigImage(CUpti_Profiler_Host_GetConfigImage_Params *p)
{
    CHECK_SIZE(p, CUpti_Profiler_Host_GetConfigImage_Params);
    if (p->configImageSize < CONFIG_IMAGE_SIZE || !p->pConfigImage)
        return CUPTI_ERROR_INVALID_PARAMETER;
    memset(p->pConfigImage, 0x5A, CONFIG_IMAGE_SIZE);
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiProfilerHostGetNumOfPasses(CUpti_Profiler_Host_GetNumOfPasses_Params *p)
{
    CHECK_SIZE(p, CUpti_Profiler_Host_GetNumOfPasses_Params);
    p->numOfPasses = FAKE_REPLAY_PASSES;
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiProfilerHostEvaluateToGpuValues(CUpti_Profiler_Host_EvaluateToGpuValues_Params *p)
{
    CHECK_SIZE(p, CUpti_Profiler_Host_EvaluateToGpuValues_Params);
    if (!p->pCounterDataImage || p->counterDataImageSize < COUNTER_DATA_SIZE || p->rangeIndex != 0)
        return CUPTI_ERROR_INVALID_PARAMETER;
    double v[3];
    memcpy(v, p->pCounterDataImage + 16, sizeof v);
    if (p->pCounterDataImage[0] != 2) /* decoded */
        return CUPTI_ERROR_INVALID_OPERATION;
    for (size_t i = 0; i < p->numMetrics; i++)
        for (int m = 0; m < 3; m++)
            if (strcmp(p->ppMetricNames[i], known_metrics[m]) == 0)
                p->pMetricValues[i] = v[m];
    return CUPTI_SUCCESS;
}

/* A call on a range profiler object while another is in it. */
static int enter(struct CUpti_RangeProfiler_Object *r, const char *what)
{
    pthread_mutex_lock(&lock);
    int disabled = r->disabled, dead = r->dead;
    pthread_mutex_unlock(&lock);
    if (disabled || dead) {
        violation("%s: called on a range profiler %s", what,
                  disabled ? "that was disabled" : "whose context was destroyed (a new context at its address is "
                                                   "another context)");
        return 0;
    }
    if (atomic_fetch_add(&r->in_call, 1) != 0) {
        violation("%s: called while another thread is inside a call on the same range profiler", what);
        atomic_fetch_sub(&r->in_call, 1);
        return 0;
    }
    return 1;
}
static void leave(struct CUpti_RangeProfiler_Object *r)
{
    atomic_fetch_sub(&r->in_call, 1);
}

EXPORT CUptiResult cuptiRangeProfilerEnable(CUpti_RangeProfiler_Enable_Params *p)
{
    CHECK_SIZE(p, CUpti_RangeProfiler_Enable_Params);
    pthread_mutex_lock(&lock);
    CUptiResult res = CUPTI_SUCCESS;
    for (size_t i = 0; i < n_ranges; i++)
        if (ranges[i]->ctx == p->ctx && !ranges[i]->disabled && !ranges[i]->dead)
            res = CUPTI_ERROR_INVALID_OPERATION; /* once per context */
    if (res == CUPTI_SUCCESS && (n_ranges == MAX_RANGE_OBJECTS || !profiler_initialized))
        res = CUPTI_ERROR_INVALID_OPERATION;
    if (res == CUPTI_SUCCESS) {
        struct CUpti_RangeProfiler_Object *r = calloc(1, sizeof *r);
        if (!r) {
            res = CUPTI_ERROR_OUT_OF_MEMORY;
        } else {
            r->ctx = p->ctx;
            ranges[n_ranges++] = r;
            p->pRangeProfilerObject = r;
        }
    }
    pthread_mutex_unlock(&lock);
    return res;
}

EXPORT CUptiResult cuptiRangeProfilerDisable(CUpti_RangeProfiler_Disable_Params *p)
{
    CHECK_SIZE(p, CUpti_RangeProfiler_Disable_Params);
    struct CUpti_RangeProfiler_Object *r = p->pRangeProfilerObject;
    if (!r)
        return CUPTI_ERROR_INVALID_PARAMETER;
    if (!enter(r, __func__))
        return CUPTI_ERROR_INVALID_OPERATION;
    pthread_mutex_lock(&lock);
    int started = r->started;
    if (!started)
        r->disabled = 1; /* the object stays allocated, so later misuse is seen */
    pthread_mutex_unlock(&lock);
    leave(r);
    if (started) {
        violation("cuptiRangeProfilerDisable: a range is started (Stop it first)");
        return CUPTI_ERROR_INVALID_OPERATION;
    }
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiRangeProfilerGetCounterDataSize(CUpti_RangeProfiler_GetCounterDataSize_Params *p)
{
    CHECK_SIZE(p, CUpti_RangeProfiler_GetCounterDataSize_Params);
    if (!p->pRangeProfilerObject || p->maxNumOfRanges < 1)
        return CUPTI_ERROR_INVALID_PARAMETER;
    p->counterDataSize = COUNTER_DATA_SIZE;
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult
cuptiRangeProfilerCounterDataImageInitialize(CUpti_RangeProfiler_CounterDataImage_Initialize_Params *p)
{
    CHECK_SIZE(p, CUpti_RangeProfiler_CounterDataImage_Initialize_Params);
    if (!p->pRangeProfilerObject || !p->pCounterData || p->counterDataSize < COUNTER_DATA_SIZE)
        return CUPTI_ERROR_INVALID_PARAMETER;
    memset(p->pCounterData, 0, COUNTER_DATA_SIZE);
    p->pCounterData[0] = 1; /* initialised */
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiRangeProfilerSetConfig(CUpti_RangeProfiler_SetConfig_Params *p)
{
    CHECK_SIZE(p, CUpti_RangeProfiler_SetConfig_Params);
    struct CUpti_RangeProfiler_Object *r = p->pRangeProfilerObject;
    if (!r || !p->pConfig || p->configSize < CONFIG_IMAGE_SIZE || !p->pCounterDataImage ||
        p->pCounterDataImage[0] != 1)
        return CUPTI_ERROR_INVALID_PARAMETER;
    if (!enter(r, __func__))
        return CUPTI_ERROR_INVALID_OPERATION;
    pthread_mutex_lock(&lock);
    CUptiResult res = r->started ? CUPTI_ERROR_INVALID_OPERATION : CUPTI_SUCCESS;
    if (res == CUPTI_SUCCESS) {
        r->configured = 1;
        r->counter_data = p->pCounterDataImage;
        r->counter_size = p->counterDataImageSize;
    }
    pthread_mutex_unlock(&lock);
    leave(r);
    return res;
}

EXPORT CUptiResult cuptiRangeProfilerStart(CUpti_RangeProfiler_Start_Params *p)
{
    CHECK_SIZE(p, CUpti_RangeProfiler_Start_Params);
    struct CUpti_RangeProfiler_Object *r = p->pRangeProfilerObject;
    if (!r)
        return CUPTI_ERROR_INVALID_PARAMETER;
    if (!enter(r, __func__))
        return CUPTI_ERROR_INVALID_OPERATION;
    pthread_mutex_lock(&lock);
    CUptiResult res = !r->configured || r->started ? CUPTI_ERROR_INVALID_OPERATION : CUPTI_SUCCESS;
    if (res == CUPTI_SUCCESS && (!r->counter_data || r->counter_data[0] != 1)) {
        violation("cuptiRangeProfilerStart: the counter data image holds a previous range (initialise it again)");
        res = CUPTI_ERROR_INVALID_OPERATION;
    }
    if (res == CUPTI_SUCCESS) {
        r->started = 1;
        r->n_captured = 0;
    }
    pthread_mutex_unlock(&lock);
    leave(r);
    return res;
}

EXPORT CUptiResult cuptiRangeProfilerStop(CUpti_RangeProfiler_Stop_Params *p)
{
    CHECK_SIZE(p, CUpti_RangeProfiler_Stop_Params);
    struct CUpti_RangeProfiler_Object *r = p->pRangeProfilerObject;
    if (!r)
        return CUPTI_ERROR_INVALID_PARAMETER;
    if (!enter(r, __func__))
        return CUPTI_ERROR_INVALID_OPERATION;
    /* FAKE_CUPTI_STOP_SLEEP=N:MS: the N-th Stop takes MS ms, after making the
     * file FAKE_CUPTI_STOP_SLEEP_FLAG (the caller holds its lock meanwhile). */
    static atomic_int n_all_stops;
    int this_stop = atomic_fetch_add(&n_all_stops, 1) + 1;
    const char *slow = getenv("FAKE_CUPTI_STOP_SLEEP");
    int slow_at = 0, slow_ms = 0;
    if (slow && sscanf(slow, "%d:%d", &slow_at, &slow_ms) == 2 && this_stop == slow_at) {
        const char *flag = getenv("FAKE_CUPTI_STOP_SLEEP_FLAG");
        FILE *f = flag ? fopen(flag, "w") : NULL;
        if (f)
            fclose(f);
        nanosleep(&(struct timespec){slow_ms / 1000, (long)(slow_ms % 1000) * 1000000L}, NULL);
    }
    /* FAKE_CUPTI_STOP_FAILS=N: the N-th Stop fails and leaves its range started. */
    static int n_stops;
    const char *fails = getenv("FAKE_CUPTI_STOP_FAILS");
    pthread_mutex_lock(&lock);
    CUptiResult res = r->started ? CUPTI_SUCCESS : CUPTI_ERROR_INVALID_OPERATION;
    if (res == CUPTI_SUCCESS && fails && ++n_stops == atoi(fails))
        res = CUPTI_ERROR_UNKNOWN;
    else if (res == CUPTI_SUCCESS) {
        const char *per_range = getenv("FAKE_CUPTI_CONFIG_PER_RANGE");
        r->started = 0;
        if (per_range && !strcmp(per_range, "1"))
            r->configured = 0;
        p->isAllPassSubmitted = r->n_captured > 0;
        p->passIndex = FAKE_REPLAY_PASSES - 1;
    }
    pthread_mutex_unlock(&lock);
    leave(r);
    return res;
}

EXPORT CUptiResult cuptiRangeProfilerDecodeData(CUpti_RangeProfiler_DecodeData_Params *p)
{
    CHECK_SIZE(p, CUpti_RangeProfiler_DecodeData_Params);
    struct CUpti_RangeProfiler_Object *r = p->pRangeProfilerObject;
    if (!r)
        return CUPTI_ERROR_INVALID_PARAMETER;
    if (!enter(r, __func__))
        return CUPTI_ERROR_INVALID_OPERATION;
    pthread_mutex_lock(&lock);
    CUptiResult res = CUPTI_SUCCESS;
    if (r->started || !r->counter_data || r->n_captured == 0) {
        res = CUPTI_ERROR_INVALID_OPERATION;
    } else {
        r->counter_data[0] = 2; /* decoded */
        memcpy(r->counter_data + 16, r->values, sizeof r->values);
        p->numOfRangeDropped = (size_t)(r->n_captured - 1); /* one range fits the image */
    }
    pthread_mutex_unlock(&lock);
    leave(r);
    return res;
}

EXPORT CUptiResult cuptiRangeProfilerGetCounterDataInfo(CUpti_RangeProfiler_GetCounterDataInfo_Params *p)
{
    CHECK_SIZE(p, CUpti_RangeProfiler_GetCounterDataInfo_Params);
    if (!p->pCounterDataImage || p->counterDataImageSize < COUNTER_DATA_SIZE)
        return CUPTI_ERROR_INVALID_PARAMETER;
    p->numTotalRanges = p->pCounterDataImage[0] == 2 ? 1 : 0; /* decoded: one range */
    return CUPTI_SUCCESS;
}
