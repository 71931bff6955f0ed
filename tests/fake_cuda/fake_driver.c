/* The fake CUDA driver, libcuda.so.1 (see fake_cuda.h). */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cupti.h>

#include "fake_cuda.h"

#define EXPORT __attribute__((visibility("default")))

#define MAX_CAPTURED 64

struct CUstream_st {
    int capturing;
    int n_captured;
    fake_kernel captured[MAX_CAPTURED];
};

struct CUctx_st {
    int device;
    uint32_t id;
    pthread_mutex_t lock;
    uint64_t busy_until; /* the stream's last kernel ends then */
};

static pthread_mutex_t driver_lock = PTHREAD_MUTEX_INITIALIZER;
static const fake_cupti_hooks *hooks; /* set once, when the injection loads CUPTI */
static atomic_uint next_ctx_id, next_correlation;
static __thread CUcontext current;
static CUcontext primary;

EXPORT uint64_t fake_cuda_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void sleep_until(uint64_t t)
{
    for (;;) {
        uint64_t now = fake_cuda_now_ns();
        if (now >= t)
            return;
        struct timespec ts = {(time_t)((t - now) / 1000000000ull), (long)((t - now) % 1000000000ull)};
        nanosleep(&ts, NULL);
    }
}

EXPORT void fake_cuda_register_cupti(const fake_cupti_hooks *h)
{
    pthread_mutex_lock(&driver_lock);
    hooks = h;
    pthread_mutex_unlock(&driver_lock);
}

static const fake_cupti_hooks *get_hooks(void)
{
    pthread_mutex_lock(&driver_lock);
    const fake_cupti_hooks *h = hooks;
    pthread_mutex_unlock(&driver_lock);
    return h;
}

static void load_injection(void)
{
    const char *path = getenv("CUDA_INJECTION64_PATH");
    if (!path || !*path)
        return;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "fake-cuda: cannot load the injection library %s: %s\n", path, dlerror());
        return;
    }
    int (*init)(void) = (int (*)(void))dlsym(h, "InitializeInjection");
    if (!init) {
        fprintf(stderr, "fake-cuda: %s has no InitializeInjection\n", path);
        return;
    }
    init();
}

/* cuInit loads the injection library, as the real driver does. */
EXPORT CUresult cuInit(unsigned int flags)
{
    (void)flags;
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, load_injection);
    return CUDA_SUCCESS;
}

/* The driver keeps every context it made, as the real one does until
 * cuCtxDestroy. A destroyed context's memory is given to the next one. */
#define MAX_FAKE_CONTEXTS 256
static CUcontext all_contexts[MAX_FAKE_CONTEXTS];
static CUcontext destroyed; /* its memory, for the next context */

static CUcontext new_ctx(int device)
{
    pthread_mutex_lock(&driver_lock);
    CUcontext c = destroyed;
    destroyed = NULL;
    pthread_mutex_unlock(&driver_lock);
    if (c)
        memset(c, 0, sizeof *c);
    else if (!(c = calloc(1, sizeof *c)))
        abort();
    c->device = device;
    c->id = atomic_fetch_add(&next_ctx_id, 1) + 1;
    pthread_mutex_init(&c->lock, NULL);
    pthread_mutex_lock(&driver_lock);
    if (c->id <= MAX_FAKE_CONTEXTS)
        all_contexts[c->id - 1] = c;
    pthread_mutex_unlock(&driver_lock);
    return c;
}

EXPORT CUcontext fake_ctx_create(int device)
{
    current = new_ctx(device);
    return current;
}

EXPORT void fake_ctx_set_current(CUcontext ctx)
{
    current = ctx;
}

static void sync_ctx(CUcontext ctx);

EXPORT void fake_ctx_destroy(CUcontext ctx)
{
    sync_ctx(ctx);
    const fake_cupti_hooks *h = get_hooks();
    if (h && h->context_destroy)
        h->context_destroy(ctx);
    if (current == ctx)
        current = NULL;
    pthread_mutex_lock(&driver_lock);
    if (ctx->id <= MAX_FAKE_CONTEXTS)
        all_contexts[ctx->id - 1] = NULL;
    if (primary == ctx)
        primary = NULL;
    pthread_mutex_destroy(&ctx->lock);
    free(destroyed);
    destroyed = ctx;
    pthread_mutex_unlock(&driver_lock);
}

/* The primary context, made current on first use (as the runtime does). */
static CUcontext ctx_of_thread(void)
{
    if (!current) {
        static pthread_mutex_t primary_lock = PTHREAD_MUTEX_INITIALIZER;
        pthread_mutex_lock(&primary_lock);
        if (!primary)
            primary = new_ctx(0);
        current = primary;
        pthread_mutex_unlock(&primary_lock);
    }
    return current;
}

EXPORT CUresult cuCtxGetDevice(CUdevice *device)
{
    if (!current)
        return CUDA_ERROR_INVALID_CONTEXT;
    *device = current->device;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetAttribute(int *value, CUdevice_attribute attribute, CUdevice device)
{
    (void)device;
    const char *mps = getenv("FAKE_CUDA_MPS");
    *value = attribute == CU_DEVICE_ATTRIBUTE_MPS_ENABLED && mps && !strcmp(mps, "1");
    return CUDA_SUCCESS;
}

EXPORT CUstream fake_stream_create(void)
{
    CUstream s = calloc(1, sizeof *s);
    if (!s)
        abort();
    return s;
}

EXPORT void fake_stream_destroy(CUstream s)
{
    free(s);
}

EXPORT void fake_stream_begin_capture(CUstream s)
{
    s->capturing = 1;
    s->n_captured = 0;
}

EXPORT int fake_stream_end_capture(CUstream s, const fake_kernel **kernels)
{
    s->capturing = 0;
    *kernels = s->captured;
    return s->n_captured;
}

/* NULL and the per-thread default stream never capture here. */
EXPORT CUresult cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus *status)
{
    *status = s && s != CU_STREAM_PER_THREAD && s != CU_STREAM_LEGACY && s->capturing ? CU_STREAM_CAPTURE_STATUS_ACTIVE
                                                                                       : CU_STREAM_CAPTURE_STATUS_NONE;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxGetCurrent(CUcontext *ctx)
{
    *ctx = current;
    return CUDA_SUCCESS;
}

/* Runs one kernel on ctx's stream: queued after the previous one. */
static void run_kernel(const fake_cupti_hooks *h, CUcontext ctx, const fake_kernel *k, uint32_t correlation,
                       int in_graph)
{
    pthread_mutex_lock(&ctx->lock);
    uint64_t now = fake_cuda_now_ns();
    uint64_t start = ctx->busy_until > now ? ctx->busy_until : now;
    uint64_t end = start + (k->duration_ns ? k->duration_ns : 1000);
    ctx->busy_until = end;
    pthread_mutex_unlock(&ctx->lock);
    uint64_t blocked = h ? h->kernel(ctx, ctx->id, k, start, end, correlation, in_graph) : 0;
    if (blocked) /* kernel replay: the launch returns after every pass */
        sleep_until(fake_cuda_now_ns() + blocked);
}

EXPORT CUresult fake_launch(const fake_kernel *k, int api)
{
    return fake_launch_on(k, api, NULL);
}

EXPORT CUresult fake_launch_on(const fake_kernel *k, int api, CUstream stream)
{
    CUcontext ctx = ctx_of_thread();
    const fake_cupti_hooks *h = get_hooks();
    uint32_t correlation = atomic_fetch_add(&next_correlation, 1) + 1;
    cuLaunchKernel_params lp;
    memset(&lp, 0, sizeof lp);
    lp.gridDimX = k->grid[0], lp.gridDimY = k->grid[1], lp.gridDimZ = k->grid[2];
    lp.blockDimX = k->block[0], lp.blockDimY = k->block[1], lp.blockDimZ = k->block[2];
    lp.sharedMemBytes = k->dynamic_smem;
    lp.hStream = stream;
    CUlaunchConfig config;
    memset(&config, 0, sizeof config);
    config.gridDimX = k->grid[0], config.gridDimY = k->grid[1], config.gridDimZ = k->grid[2];
    config.blockDimX = k->block[0], config.blockDimY = k->block[1], config.blockDimZ = k->block[2];
    config.sharedMemBytes = k->dynamic_smem;
    config.hStream = stream;
    cuLaunchKernelEx_params ep = {.config = &config};
    const void *params = &lp;
    int cbid = CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel;
    const char *function = "cuLaunchKernel";
    if (api == FAKE_LAUNCH_EX) {
        params = &ep;
        cbid = CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx;
        function = "cuLaunchKernelEx";
    } else if (api == FAKE_LAUNCH_COOPERATIVE) {
        cbid = CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel;
        function = "cuLaunchCooperativeKernel";
    }
    if (h)
        h->api(ctx, ctx->id, cbid, 0, function, k->name, params, correlation, CUDA_SUCCESS);
    CUresult result = CUDA_SUCCESS;
    if ((uint64_t)k->block[0] * k->block[1] * k->block[2] > 1024)
        result = CUDA_ERROR_INVALID_VALUE; /* too many threads per block: nothing runs */
    else if (stream && stream->capturing) {
        if (stream->n_captured < MAX_CAPTURED)
            stream->captured[stream->n_captured++] = *k; /* runs when the graph is launched */
    } else
        run_kernel(h, ctx, k, correlation, 0);
    if (h)
        h->api(ctx, ctx->id, cbid, 1, function, k->name, params, correlation, result);
    return result;
}

EXPORT CUresult fake_graph_launch(const fake_kernel *kernels, int n)
{
    CUcontext ctx = ctx_of_thread();
    const fake_cupti_hooks *h = get_hooks();
    uint32_t correlation = atomic_fetch_add(&next_correlation, 1) + 1;
    cuGraphLaunch_params gp = {0};
    if (h)
        h->api(ctx, ctx->id, CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch, 0, "cuGraphLaunch", NULL, &gp, correlation,
               CUDA_SUCCESS);
    for (int i = 0; i < n; i++) /* no launch callbacks for a graph's kernels */
        run_kernel(h, ctx, &kernels[i], correlation, 1);
    if (h)
        h->api(ctx, ctx->id, CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch, 1, "cuGraphLaunch", NULL, &gp, correlation,
               CUDA_SUCCESS);
    return CUDA_SUCCESS;
}

static void sync_ctx(CUcontext ctx)
{
    pthread_mutex_lock(&ctx->lock);
    uint64_t t = ctx->busy_until;
    pthread_mutex_unlock(&ctx->lock);
    sleep_until(t);
}

EXPORT void fake_synchronize(void)
{
    sync_ctx(ctx_of_thread());
}
