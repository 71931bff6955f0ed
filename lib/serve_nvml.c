/* GPU observations from NVML, opened at run time with dlopen so that one
 * kace binary runs on machines with and without an NVIDIA driver. Only the
 * few NVML types and functions used here are declared (their ABI is stable:
 * the _v2 entry points have not changed since CUDA 5). */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kace/serve.h"

typedef int nvml_return;     /* nvmlReturn_t; 0 = NVML_SUCCESS */
typedef void *nvml_device;   /* nvmlDevice_t */
typedef struct nvml_utilization {
    unsigned int gpu, memory; /* percent of the last sample period */
} nvml_utilization;

typedef struct nvml {
    void *lib;
    nvml_return (*shutdown)(void);
    nvml_return (*count)(unsigned int *);
    nvml_return (*handle)(unsigned int, nvml_device *);
    nvml_return (*utilization)(nvml_device, nvml_utilization *);
    nvml_return (*name)(nvml_device, char *, unsigned int); /* optional */
    nvml_return (*uuid)(nvml_device, char *, unsigned int); /* optional */
} nvml;

static void nvml_close(void **state)
{
    nvml *n = state ? *state : NULL;
    if (!n)
        return;
    if (n->shutdown)
        n->shutdown();
    if (n->lib)
        dlclose(n->lib);
    free(n);
    *state = NULL;
}

static void *symbol(void *lib, const char *newest, const char *older)
{
    void *p = dlsym(lib, newest);
    return p || !older ? p : dlsym(lib, older);
}

static kace_status nvml_open(kace_ctx *ctx, void **state)
{
    *state = NULL;
    nvml *n = calloc(1, sizeof *n);
    if (!n)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    n->lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!n->lib) {
        free(n);
        return kace_fail(ctx, KACE_ERR_UNSUPPORTED, "NVML: libnvidia-ml.so.1 not found (no NVIDIA driver)");
    }
    nvml_return (*init)(void) = (nvml_return(*)(void))symbol(n->lib, "nvmlInit_v2", "nvmlInit");
    n->shutdown = (nvml_return(*)(void))symbol(n->lib, "nvmlShutdown", NULL);
    n->count = (nvml_return(*)(unsigned int *))symbol(n->lib, "nvmlDeviceGetCount_v2", "nvmlDeviceGetCount");
    n->handle = (nvml_return(*)(unsigned int, nvml_device *))symbol(n->lib, "nvmlDeviceGetHandleByIndex_v2",
                                                                    "nvmlDeviceGetHandleByIndex");
    n->utilization =
        (nvml_return(*)(nvml_device, nvml_utilization *))symbol(n->lib, "nvmlDeviceGetUtilizationRates", NULL);
    n->name = (nvml_return(*)(nvml_device, char *, unsigned int))symbol(n->lib, "nvmlDeviceGetName", NULL);
    n->uuid = (nvml_return(*)(nvml_device, char *, unsigned int))symbol(n->lib, "nvmlDeviceGetUUID", NULL);
    if (!init || !n->count || !n->handle || !n->utilization) {
        n->shutdown = NULL;
        void *p = n;
        nvml_close(&p);
        return kace_fail(ctx, KACE_ERR_UNSUPPORTED, "NVML: libnvidia-ml.so.1 lacks nvmlInit/nvmlDeviceGetCount/"
                                                    "nvmlDeviceGetHandleByIndex/nvmlDeviceGetUtilizationRates");
    }
    nvml_return rc = init();
    if (rc != 0) {
        n->shutdown = NULL;
        void *p = n;
        nvml_close(&p);
        return kace_fail(ctx, KACE_ERR_UNSUPPORTED, "NVML: nvmlInit failed (error %d)", rc);
    }
    *state = n;
    return KACE_OK;
}

static kace_status nvml_sample(kace_ctx *ctx, void *state, kace_serve_gpu_sample *out, size_t max, size_t *n_out)
{
    nvml *n = state;
    unsigned int count = 0;
    *n_out = 0;
    if (n->count(&count) != 0)
        return kace_fail(ctx, KACE_ERR_IO, "NVML: cannot count the GPUs");
    for (unsigned int i = 0; i < count && *n_out < max; i++) {
        kace_serve_gpu_sample *s = &out[*n_out];
        memset(s, 0, sizeof *s);
        s->utilization = s->memory_utilization = NAN; /* missing, not 0, when unreadable */
        snprintf(s->id, sizeof s->id, "%u", i);
        nvml_device dev = NULL;
        if (n->handle(i, &dev) != 0)
            continue;
        if (n->uuid)
            n->uuid(dev, s->id, sizeof s->id);
        if (n->name)
            n->name(dev, s->name, sizeof s->name);
        s->id[sizeof s->id - 1] = s->name[sizeof s->name - 1] = '\0';
        nvml_utilization u;
        if (n->utilization(dev, &u) == 0) {
            s->utilization = u.gpu / 100.0;
            s->memory_utilization = u.memory / 100.0;
        }
        (*n_out)++;
    }
    return KACE_OK;
}

const kace_serve_gpu_source kace_serve_gpu_nvml = {"nvml", nvml_open, nvml_sample, nvml_close};
