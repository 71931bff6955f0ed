/* NVML sampler through dlopen. Only the NVML types and functions used here
 * are declared (from the NVML API reference); no NVML header is needed. */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kace/nvml.h"

/* ---- the NVML subset ------------------------------------------------------ */

typedef int nvml_return;
typedef struct nvml_device_st *nvml_device;
enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_CLOCK_SM = 1,
    NVML_PCIE_UTIL_TX_BYTES = 0,
    NVML_PCIE_UTIL_RX_BYTES = 1,
};
typedef struct {
    unsigned int gpu, memory;
} nvml_utilization;
typedef struct {
    unsigned long long total, free, used;
} nvml_memory;
typedef struct {
    unsigned int pid;
    unsigned long long timestamp; /* microseconds */
    unsigned int sm_util, mem_util, enc_util, dec_util;
} nvml_process_util_sample;
typedef struct { /* nvmlProcessInfo_t of _v2 and _v3 */
    unsigned int pid;
    unsigned long long used_gpu_memory;
    unsigned int gpu_instance_id, compute_instance_id;
} nvml_process_info_v2;
typedef struct { /* the unversioned call's nvmlProcessInfo_v1_t */
    unsigned int pid;
    unsigned long long used_gpu_memory;
} nvml_process_info_v1;
#define NVML_VALUE_NOT_AVAILABLE (~0ULL)

typedef nvml_return (*fn_void)(void);
typedef const char *(*fn_error_string)(nvml_return);
typedef nvml_return (*fn_handle_by_index)(unsigned int, nvml_device *);
typedef nvml_return (*fn_name)(nvml_device, char *, unsigned int);
typedef nvml_return (*fn_utilization)(nvml_device, nvml_utilization *);
typedef nvml_return (*fn_memory)(nvml_device, nvml_memory *);
typedef nvml_return (*fn_uint)(nvml_device, unsigned int *);
typedef nvml_return (*fn_uint_count)(unsigned int *);
typedef nvml_return (*fn_uint_arg)(nvml_device, int, unsigned int *);
typedef nvml_return (*fn_process_util)(nvml_device, nvml_process_util_sample *, unsigned int *, unsigned long long);
typedef nvml_return (*fn_processes)(nvml_device, unsigned int *, void *);

struct kace_nvml {
    void *lib;
    nvml_device dev;
    char name[96];
    char uuid[96];
    char symbols[512];
    /* required */
    fn_void init, shutdown;
    fn_handle_by_index handle_by_index;
    fn_utilization utilization;
    fn_memory memory;
    /* optional (NULL when absent) */
    fn_error_string error_string;
    fn_name device_name, device_uuid;
    fn_uint_count count;
    fn_uint power;
    fn_uint_arg clock, pcie;
    fn_process_util process_util;
    fn_processes processes;
    bool processes_v1; /* the unversioned call with the short struct */
    fn_processes mps_processes; /* MPS clients (nvmlDeviceGetMPSComputeRunningProcesses*) */
    bool mps_processes_v1;
    unsigned long long last_seen_us;
};

/* The first of the names that the library exports; records which in symbols. */
static void *find_symbol(kace_nvml *n, const char *const *names, const char **found)
{
    for (; *names; names++) {
        void *p = dlsym(n->lib, *names);
        if (p) {
            size_t used = strlen(n->symbols);
            snprintf(n->symbols + used, sizeof n->symbols - used, "%s%s", used ? " " : "", *names);
            if (found)
                *found = *names;
            return p;
        }
    }
    return NULL;
}

static const char *nvml_error(const kace_nvml *n, nvml_return r)
{
    const char *s = n->error_string ? n->error_string(r) : NULL;
    return s ? s : "unknown NVML error";
}

void kace_nvml_close(kace_nvml **pn)
{
    if (!pn || !*pn)
        return;
    kace_nvml *n = *pn;
    if (n->shutdown && n->dev)
        n->shutdown();
    if (n->lib)
        dlclose(n->lib);
    free(n);
    *pn = NULL;
}

/* Name and UUID of the current device ("" when NVML cannot say). */
static void read_identity(kace_nvml *n)
{
    if (!n->device_name || n->device_name(n->dev, n->name, sizeof n->name) != NVML_SUCCESS)
        n->name[0] = '\0';
    n->name[sizeof n->name - 1] = '\0';
    if (!n->device_uuid || n->device_uuid(n->dev, n->uuid, sizeof n->uuid) != NVML_SUCCESS)
        n->uuid[0] = '\0';
    n->uuid[sizeof n->uuid - 1] = '\0';
}

kace_status kace_nvml_open(kace_ctx *ctx, const char *path, unsigned index, kace_nvml **out)
{
    *out = NULL;
    if (!path || !*path)
        path = getenv(KACE_NVML_LIBRARY_ENV);
    if (!path || !*path)
        path = "libnvidia-ml.so.1";
    kace_nvml *n = calloc(1, sizeof *n);
    if (!n)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory opening NVML");
    kace_status st = KACE_OK;
    dlerror();
    n->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!n->lib) {
        const char *why = dlerror();
        st = kace_fail(ctx, KACE_ERR_UNSUPPORTED,
                       "no NVIDIA driver found: cannot load %s (%s); GPU metrics need a machine with an NVIDIA GPU "
                       "and its driver",
                       path, why ? why : "unknown reason");
        goto fail;
    }
    static const char *const init_names[] = {"nvmlInit_v2", "nvmlInit", NULL};
    static const char *const shutdown_names[] = {"nvmlShutdown", NULL};
    static const char *const handle_names[] = {"nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex", NULL};
    static const char *const util_names[] = {"nvmlDeviceGetUtilizationRates", NULL};
    static const char *const mem_names[] = {"nvmlDeviceGetMemoryInfo", NULL};
    const struct {
        const char *const *names;
        void **slot;
    } required[] = {
        {init_names, (void **)&n->init},          {shutdown_names, (void **)&n->shutdown},
        {handle_names, (void **)&n->handle_by_index}, {util_names, (void **)&n->utilization},
        {mem_names, (void **)&n->memory},
    };
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++) {
        *required[i].slot = find_symbol(n, required[i].names, NULL);
        if (!*required[i].slot) {
            st = kace_fail(ctx, KACE_ERR_UNSUPPORTED,
                           "%s lacks %s, which kace needs (an NVIDIA driver too old, or not NVML at all)", path,
                           required[i].names[0]);
            goto fail;
        }
    }
    static const char *const err_names[] = {"nvmlErrorString", NULL};
    static const char *const name_names[] = {"nvmlDeviceGetName", NULL};
    static const char *const power_names[] = {"nvmlDeviceGetPowerUsage", NULL};
    static const char *const clock_names[] = {"nvmlDeviceGetClockInfo", NULL};
    static const char *const pcie_names[] = {"nvmlDeviceGetPcieThroughput", NULL};
    static const char *const putil_names[] = {"nvmlDeviceGetProcessUtilization", NULL};
    static const char *const procs_names[] = {"nvmlDeviceGetComputeRunningProcesses_v3",
                                              "nvmlDeviceGetComputeRunningProcesses_v2",
                                              "nvmlDeviceGetComputeRunningProcesses", NULL};
    /* For callers that watch every GPU (kace serve's /metrics). */
    static const char *const count_names[] = {"nvmlDeviceGetCount_v2", "nvmlDeviceGetCount", NULL};
    static const char *const uuid_names[] = {"nvmlDeviceGetUUID", NULL};
    n->count = (fn_uint_count)find_symbol(n, count_names, NULL);
    n->device_uuid = (fn_name)find_symbol(n, uuid_names, NULL);
    n->error_string = (fn_error_string)find_symbol(n, err_names, NULL);
    n->device_name = (fn_name)find_symbol(n, name_names, NULL);
    n->power = (fn_uint)find_symbol(n, power_names, NULL);
    n->clock = (fn_uint_arg)find_symbol(n, clock_names, NULL);
    n->pcie = (fn_uint_arg)find_symbol(n, pcie_names, NULL);
    n->process_util = (fn_process_util)find_symbol(n, putil_names, NULL);
    const char *procs_found = NULL;
    n->processes = (fn_processes)find_symbol(n, procs_names, &procs_found);
    n->processes_v1 = procs_found && strcmp(procs_found, "nvmlDeviceGetComputeRunningProcesses") == 0;
    static const char *const mps_names[] = {"nvmlDeviceGetMPSComputeRunningProcesses_v3",
                                            "nvmlDeviceGetMPSComputeRunningProcesses_v2",
                                            "nvmlDeviceGetMPSComputeRunningProcesses", NULL};
    const char *mps_found = NULL;
    n->mps_processes = (fn_processes)find_symbol(n, mps_names, &mps_found);
    n->mps_processes_v1 = mps_found && strcmp(mps_found, "nvmlDeviceGetMPSComputeRunningProcesses") == 0;

    nvml_return r = n->init();
    if (r != NVML_SUCCESS) {
        n->shutdown = NULL; /* nothing to shut down */
        st = kace_fail(ctx, KACE_ERR_UNSUPPORTED, "%s: %s (NVML error %d: %s)", path,
                       r == NVML_ERROR_DRIVER_NOT_LOADED ? "no NVIDIA driver is loaded"
                                                         : "NVML could not be initialised",
                       r, nvml_error(n, r));
        goto fail;
    }
    r = n->handle_by_index(index, &n->dev);
    if (r != NVML_SUCCESS) {
        n->init = NULL;
        st = kace_fail(ctx, KACE_ERR_UNSUPPORTED, "NVML has no GPU %u (NVML error %d: %s)", index, r,
                       nvml_error(n, r));
        n->shutdown();
        n->shutdown = NULL;
        goto fail;
    }
    read_identity(n);
    *out = n;
    return KACE_OK;
fail:
    kace_nvml_close(&n);
    return st;
}

const char *kace_nvml_device_name(const kace_nvml *n)
{
    return n->name;
}

const char *kace_nvml_device_uuid(const kace_nvml *n)
{
    return n->uuid;
}

kace_status kace_nvml_device_count(kace_ctx *ctx, kace_nvml *n, unsigned *count)
{
    *count = 1; /* without nvmlDeviceGetCount: the device opened */
    if (!n->count)
        return KACE_OK;
    unsigned int c = 0;
    nvml_return r = n->count(&c);
    if (r != NVML_SUCCESS)
        return kace_fail(ctx, KACE_ERR_IO, "nvmlDeviceGetCount failed (NVML error %d: %s)", r, nvml_error(n, r));
    *count = c;
    return KACE_OK;
}

kace_status kace_nvml_select(kace_ctx *ctx, kace_nvml *n, unsigned index)
{
    nvml_device dev = NULL;
    nvml_return r = n->handle_by_index(index, &dev);
    if (r != NVML_SUCCESS)
        return kace_fail(ctx, KACE_ERR_NOT_FOUND, "NVML has no GPU %u (NVML error %d: %s)", index, r,
                         nvml_error(n, r));
    n->dev = dev;
    read_identity(n);
    return KACE_OK;
}

const char *kace_nvml_symbols(const kace_nvml *n)
{
    return n->symbols;
}

static bool in_groups(unsigned int pid, const int *pgids, size_t n)
{
    pid_t g = getpgid((pid_t)pid);
    if (g < 0)
        return false;
    for (size_t i = 0; i < n; i++)
        if (pgids[i] > 0 && g == pgids[i])
            return true;
    return false;
}

/* One of NVML's process lists (compute or MPS) as pid + used memory in
 * bytes (NVML_VALUE_NOT_AVAILABLE kept). Returns the NVML status; *out is
 * malloc'ed (free it) when it is NVML_SUCCESS. */
static nvml_return list_processes(kace_nvml *n, fn_processes fn, bool v1, nvml_process_info_v2 **out,
                                  unsigned int *count_out)
{
    *out = NULL;
    *count_out = 0;
    unsigned int count = 64;
    size_t item = v1 ? sizeof(nvml_process_info_v1) : sizeof(nvml_process_info_v2);
    void *buf = NULL;
    nvml_return r = NVML_ERROR_INSUFFICIENT_SIZE;
    for (int attempt = 0; attempt < 3 && r == NVML_ERROR_INSUFFICIENT_SIZE; attempt++) {
        free(buf);
        if (count > 100000)
            return NVML_ERROR_INSUFFICIENT_SIZE;
        count += 16; /* processes may start between the calls */
        buf = calloc(count, item);
        if (!buf)
            return NVML_ERROR_INSUFFICIENT_SIZE;
        r = fn(n->dev, &count, buf);
    }
    if (r != NVML_SUCCESS) {
        free(buf);
        return r;
    }
    nvml_process_info_v2 *list = calloc(count ? count : 1, sizeof *list);
    if (!list) {
        free(buf);
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned int i = 0; i < count; i++) {
        if (v1) {
            nvml_process_info_v1 *p = (nvml_process_info_v1 *)buf + i;
            list[i].pid = p->pid;
            list[i].used_gpu_memory = p->used_gpu_memory;
        } else {
            list[i] = ((nvml_process_info_v2 *)buf)[i];
        }
    }
    free(buf);
    *out = list;
    *count_out = count;
    return NVML_SUCCESS;
}

/* Sum over the workload's processes in a process list of their GPU memory;
 * *listed: some of them are in the list; false return: none of them has a
 * memory value (or NVML cannot say). */
static bool listed_memory(kace_nvml *n, fn_processes fn, bool v1, const int *pgids, size_t n_pgids, double *mib,
                          bool *listed)
{
    *listed = false;
    if (!fn || n_pgids == 0)
        return false;
    nvml_process_info_v2 *list = NULL;
    unsigned int count = 0;
    if (list_processes(n, fn, v1, &list, &count) != NVML_SUCCESS)
        return false;
    bool found = false;
    double bytes = 0;
    for (unsigned int i = 0; i < count; i++) {
        if (!in_groups(list[i].pid, pgids, n_pgids))
            continue;
        *listed = true;
        if (list[i].used_gpu_memory != NVML_VALUE_NOT_AVAILABLE) {
            bytes += (double)list[i].used_gpu_memory;
            found = true;
        }
    }
    free(list);
    if (found)
        *mib = bytes / 1048576.0;
    return found;
}

bool kace_nvml_has_mps_list(const kace_nvml *n)
{
    return n && n->mps_processes;
}

kace_status kace_nvml_mps_processes(kace_ctx *ctx, kace_nvml *n, kace_gpu_process *out, size_t max, size_t *n_out)
{
    *n_out = 0;
    if (!n->mps_processes)
        return kace_fail(ctx, KACE_ERR_UNSUPPORTED,
                         "this NVML has no nvmlDeviceGetMPSComputeRunningProcesses (driver older than 418?)");
    nvml_process_info_v2 *list = NULL;
    unsigned int count = 0;
    nvml_return r = list_processes(n, n->mps_processes, n->mps_processes_v1, &list, &count);
    if (r == NVML_ERROR_NOT_SUPPORTED)
        return kace_fail(ctx, KACE_ERR_UNSUPPORTED, "NVML lists no MPS processes on this GPU (NVML error %d: %s)", r,
                         nvml_error(n, r));
    if (r != NVML_SUCCESS)
        return kace_fail(ctx, KACE_ERR_IO, "nvmlDeviceGetMPSComputeRunningProcesses failed (NVML error %d: %s)", r,
                         nvml_error(n, r));
    for (unsigned int i = 0; i < count && i < max; i++) {
        out[i].pid = (int)list[i].pid;
        out[i].used_mib = list[i].used_gpu_memory == NVML_VALUE_NOT_AVAILABLE
                              ? NAN
                              : (double)list[i].used_gpu_memory / 1048576.0;
    }
    *n_out = count < max ? count : max;
    free(list);
    return KACE_OK;
}

/* The workload's SM and memory utilization since the last sample: each
 * process's samples averaged, summed over its processes. */
static bool process_utilization(kace_nvml *n, const int *pgids, size_t n_pgids, double *sm, double *mem)
{
    if (!n->process_util || n_pgids == 0)
        return false;
    unsigned int count = 0;
    nvml_return r = n->process_util(n->dev, NULL, &count, n->last_seen_us);
    if ((r != NVML_SUCCESS && r != NVML_ERROR_INSUFFICIENT_SIZE) || count == 0 || count > 100000)
        return false;
    count += 8;
    nvml_process_util_sample *s = calloc(count, sizeof *s);
    if (!s)
        return false;
    r = n->process_util(n->dev, s, &count, n->last_seen_us);
    bool found = false;
    if (r == NVML_SUCCESS) {
        /* Per pid: mean of its samples; then the sum over pids. */
        double sum_sm = 0, sum_mem = 0;
        for (unsigned int i = 0; i < count; i++) {
            if (s[i].timestamp > n->last_seen_us)
                n->last_seen_us = s[i].timestamp;
            bool first = true;
            for (unsigned int j = 0; j < i && first; j++)
                first = s[j].pid != s[i].pid;
            if (!first || !in_groups(s[i].pid, pgids, n_pgids))
                continue;
            double a = 0, b = 0;
            int k = 0;
            for (unsigned int j = i; j < count; j++)
                if (s[j].pid == s[i].pid) {
                    a += s[j].sm_util;
                    b += s[j].mem_util;
                    k++;
                }
            sum_sm += a / k;
            sum_mem += b / k;
            found = true;
        }
        if (found) {
            *sm = sum_sm > 100 ? 100 : sum_sm;
            *mem = sum_mem > 100 ? 100 : sum_mem;
        }
    }
    free(s);
    return found;
}

kace_status kace_nvml_sample(kace_ctx *ctx, kace_nvml *n, const int *pgids, size_t n_pgids, kace_gpu_sample *out)
{
    for (int f = 0; f < KACE_GPU_N_FIELDS; f++) {
        out->v[f] = NAN;
        out->per_process[f] = false;
    }
    out->mps_client = false;
    nvml_utilization u;
    nvml_return r = n->utilization(n->dev, &u);
    if (r != NVML_SUCCESS)
        return kace_fail(ctx, KACE_ERR_IO, "nvmlDeviceGetUtilizationRates failed (NVML error %d: %s)", r,
                         nvml_error(n, r));
    nvml_memory m;
    r = n->memory(n->dev, &m);
    if (r != NVML_SUCCESS)
        return kace_fail(ctx, KACE_ERR_IO, "nvmlDeviceGetMemoryInfo failed (NVML error %d: %s)", r, nvml_error(n, r));
    out->v[KACE_GPU_SM_PCT] = u.gpu;
    out->v[KACE_GPU_MEM_PCT] = u.memory;
    out->v[KACE_GPU_MEM_USED_MIB] = (double)m.used / 1048576.0;

    double sm, mem, mib;
    if (process_utilization(n, pgids, n_pgids, &sm, &mem)) {
        out->v[KACE_GPU_SM_PCT] = sm;
        out->v[KACE_GPU_MEM_PCT] = mem;
        out->per_process[KACE_GPU_SM_PCT] = out->per_process[KACE_GPU_MEM_PCT] = true;
    }
    /* An MPS client is listed with its own memory in the MPS list (and
     * perhaps in the compute list, beside its server). */
    bool listed = false, mps_listed = false;
    double mps_mib = NAN;
    bool own = listed_memory(n, n->processes, n->processes_v1, pgids, n_pgids, &mib, &listed);
    bool own_mps = listed_memory(n, n->mps_processes, n->mps_processes_v1, pgids, n_pgids, &mps_mib, &mps_listed);
    if (own || own_mps) {
        out->v[KACE_GPU_MEM_USED_MIB] = own ? mib : mps_mib;
        out->per_process[KACE_GPU_MEM_USED_MIB] = true;
    }
    out->mps_client = mps_listed;
    unsigned int x;
    if (n->power && n->power(n->dev, &x) == NVML_SUCCESS)
        out->v[KACE_GPU_POWER_W] = x / 1000.0;
    if (n->clock && n->clock(n->dev, NVML_CLOCK_SM, &x) == NVML_SUCCESS)
        out->v[KACE_GPU_SM_CLOCK_MHZ] = x;
    if (n->pcie && n->pcie(n->dev, NVML_PCIE_UTIL_TX_BYTES, &x) == NVML_SUCCESS)
        out->v[KACE_GPU_PCIE_TX_MBPS] = x / 1000.0; /* KB/s -> MB/s */
    if (n->pcie && n->pcie(n->dev, NVML_PCIE_UTIL_RX_BYTES, &x) == NVML_SUCCESS)
        out->v[KACE_GPU_PCIE_RX_MBPS] = x / 1000.0;
    return KACE_OK;
}

/* ---- NVML as a GPU backend (include/kace/gpu.h) ---------------------------- */

static kace_status backend_open(kace_ctx *ctx, unsigned index, void **impl)
{
    kace_nvml *n = NULL;
    kace_status st = kace_nvml_open(ctx, NULL, index, &n);
    *impl = n;
    return st;
}

static void backend_close(void *impl)
{
    kace_nvml *n = impl;
    kace_nvml_close(&n);
}

static unsigned backend_caps(const void *impl)
{
    unsigned caps = KACE_GPU_CAP_PER_PROCESS | KACE_GPU_CAP_UUID | KACE_GPU_CAP_PCIE;
    return kace_nvml_has_mps_list(impl) ? caps | KACE_GPU_CAP_MPS_LIST : caps;
}

static kace_status backend_device_count(kace_ctx *ctx, void *impl, unsigned *count)
{
    return kace_nvml_device_count(ctx, impl, count);
}

static kace_status backend_select(kace_ctx *ctx, void *impl, unsigned index)
{
    return kace_nvml_select(ctx, impl, index);
}

static const char *backend_name(const void *impl) { return kace_nvml_device_name(impl); }
static const char *backend_uuid(const void *impl) { return kace_nvml_device_uuid(impl); }

static kace_status backend_sample(kace_ctx *ctx, void *impl, const int *pgids, size_t n_pgids, kace_gpu_sample *out)
{
    return kace_nvml_sample(ctx, impl, pgids, n_pgids, out);
}

static kace_status backend_mps(kace_ctx *ctx, void *impl, kace_gpu_process *out, size_t max, size_t *n_out)
{
    return kace_nvml_mps_processes(ctx, impl, out, max, n_out);
}

const kace_gpu_backend_ops kace_gpu_backend_nvml = {
    .name = "nvml",
    .caps = KACE_GPU_CAP_PER_PROCESS | KACE_GPU_CAP_MPS_LIST | KACE_GPU_CAP_UUID | KACE_GPU_CAP_PCIE,
    .open = backend_open,
    .close = backend_close,
    .caps_of = backend_caps,
    .device_count = backend_device_count,
    .select = backend_select,
    .device_name = backend_name,
    .device_uuid = backend_uuid,
    .sample = backend_sample,
    .mps_processes = backend_mps,
};
