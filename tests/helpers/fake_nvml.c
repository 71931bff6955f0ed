/* A fake libnvidia-ml.so for the NVML sampler tests, built in variants:
 *   FAKE_NVML_FULL     newest entry points (nvmlInit_v2, ..._v3), scripted values
 *   FAKE_NVML_OLD      only the unversioned entry points, no per-process utilization, no PCIe
 *   FAKE_NVML_MISSING  lacks nvmlDeviceGetUtilizationRates (required)
 *   FAKE_NVML_FAILING  initialises, then every device query fails (GPU lost)
 *   FAKE_NVML_NODRIVER nvmlInit_v2 fails with "driver not loaded"
 *   FAKE_NVML_MPS      as FULL, but the workload runs as an MPS client: its
 *                      utilization samples belong to the MPS server (pid
 *                      $KACE_FAKE_NVML_SERVER_PID, default 2), the compute
 *                      list holds only the server, and
 *                      nvmlDeviceGetMPSComputeRunningProcesses_v3 lists the
 *                      clients with their memory (FULL's MPS list is empty)
 *
 * The MPS list of FAKE_NVML_MPS: the pid in $KACE_FAKE_NVML_PID (proc_used_MiB),
 * every direct child of the calling process (the workloads kace started;
 * 1 MiB each) and a foreign client (pid 1, 100 MiB). With
 * $KACE_FAKE_NVML_MPS_CLIENTS=none only the foreign client is listed (the
 * workloads ran without MPS).
 *
 * Scripted values: the file named by $KACE_FAKE_NVML_SCRIPT, one sample per
 * line (the last line repeats):
 *   sm mem used_MiB power_mW sm_MHz pcie_tx_KBps pcie_rx_KBps proc_sm proc_mem proc_used_MiB
 * A sample is taken at each nvmlDeviceGetUtilizationRates call. The
 * per-process values belong to the pid in $KACE_FAKE_NVML_PID; a second,
 * foreign process (pid 1) adds 7% SM and 100 MiB that must not be counted. */
#include <ctype.h>
#include <stdbool.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int nvmlReturn_t;
typedef struct fake_device *nvmlDevice_t;
typedef struct {
    unsigned int gpu, memory;
} nvmlUtilization_t;
typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;
typedef struct {
    unsigned int pid;
    unsigned long long timeStamp;
    unsigned int smUtil, memUtil, encUtil, decUtil;
} nvmlProcessUtilizationSample_t;
typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;
typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
} nvmlProcessInfo_v1_t;

#define EXPORT __attribute__((visibility("default")))
enum { OK = 0, NOT_SUPPORTED = 3, NOT_FOUND = 6, INSUFFICIENT_SIZE = 7, DRIVER_NOT_LOADED = 9, GPU_IS_LOST = 15 };

static struct fake_device {
    int dummy;
} the_device;
static double row[10];
static int sample_no = -1;
static unsigned long long clock_us = 1000;

__attribute__((unused)) static void load_row(void)
{
    const char *path = getenv("KACE_FAKE_NVML_SCRIPT");
    FILE *f = path ? fopen(path, "r") : NULL;
    if (!f)
        return;
    double r[10];
    int line = 0;
    while (line <= sample_no) {
        int got = fscanf(f, "%lf %lf %lf %lf %lf %lf %lf %lf %lf %lf", &r[0], &r[1], &r[2], &r[3], &r[4], &r[5],
                         &r[6], &r[7], &r[8], &r[9]);
        if (got != 10)
            break;
        memcpy(row, r, sizeof row);
        line++;
    }
    fclose(f);
}

static unsigned int own_pid(void)
{
    const char *s = getenv("KACE_FAKE_NVML_PID");
    return s ? (unsigned int)strtoul(s, NULL, 10) : 0;
}

/* The pid whose utilization samples NVML reports: the MPS server under MPS. */
__attribute__((unused)) static unsigned int util_pid(void)
{
#ifdef FAKE_NVML_MPS
    const char *s = getenv("KACE_FAKE_NVML_SERVER_PID");
    return s ? (unsigned int)strtoul(s, NULL, 10) : 2;
#else
    return own_pid();
#endif
}

EXPORT const char *nvmlErrorString(nvmlReturn_t r)
{
    switch (r) {
    case DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case GPU_IS_LOST: return "GPU is lost";
    default: return "Unknown Error";
    }
}

#if defined(FAKE_NVML_OLD)
EXPORT nvmlReturn_t nvmlInit(void) { return OK; }
EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int i, nvmlDevice_t *d)
{
    *d = &the_device;
    return i == 0 ? OK : NOT_FOUND;
}
EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int *n)
{
    *n = 1;
    return OK;
}
#else
/* Two GPUs are counted; the second cannot be opened (lost), which a
 * caller watching every GPU must step over. */
EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *n)
{
    *n = 2;
    return OK;
}
EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *uuid, unsigned int len)
{
    snprintf(uuid, len, "GPU-fake-0");
    return OK;
}
EXPORT nvmlReturn_t nvmlInit_v2(void)
{
#ifdef FAKE_NVML_NODRIVER
    return DRIVER_NOT_LOADED;
#else
    return OK;
#endif
}
EXPORT nvmlReturn_t nvmlInit(void) { return NOT_SUPPORTED; } /* must not be used when _v2 exists */
EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *d)
{
    *d = &the_device;
    return i == 0 ? OK : NOT_FOUND;
}
#endif
EXPORT nvmlReturn_t nvmlShutdown(void) { return OK; }

EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned int len)
{
    const char *given = getenv("KACE_FAKE_GPU_NAME"); /* the device dry run's nvidia-smi says the same */
    snprintf(name, len, "%s", given && *given ? given : "Fake GPU 80GB");
    return OK;
}

#ifndef FAKE_NVML_MISSING
EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t *u)
{
#ifdef FAKE_NVML_FAILING
    return GPU_IS_LOST;
#endif
    sample_no++;
    load_row();
    clock_us += 100000;
    u->gpu = (unsigned int)row[0];
    u->memory = (unsigned int)row[1];
    return OK;
}
#endif

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m)
{
#ifdef FAKE_NVML_FAILING
    return GPU_IS_LOST;
#endif
    m->total = 80ULL << 30;
    m->used = (unsigned long long)(row[2] * 1048576.0);
    m->free = m->total - m->used;
    return OK;
}

EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned int *mw)
{
    *mw = (unsigned int)row[3];
    return OK;
}

EXPORT nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t d, int type, unsigned int *mhz)
{
    if (type != 1)
        return NOT_SUPPORTED;
    *mhz = (unsigned int)row[4];
    return OK;
}

#ifndef FAKE_NVML_OLD
EXPORT nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t d, int counter, unsigned int *kbps)
{
    *kbps = (unsigned int)(counter == 0 ? row[5] : row[6]);
    return OK;
}

EXPORT nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t d, nvmlProcessUtilizationSample_t *s,
                                                    unsigned int *count, unsigned long long last_seen)
{
    if (last_seen >= clock_us)
        return NOT_FOUND;
    /* Two samples of our process (the scripted value +-2) and one foreign. */
    if (!s || *count < 3) {
        *count = 3;
        return INSUFFICIENT_SIZE;
    }
    unsigned int sm = (unsigned int)row[7], mem = (unsigned int)row[8];
    s[0] = (nvmlProcessUtilizationSample_t){util_pid(), clock_us - 50000, sm - 2, mem - 1, 0, 0};
    s[1] = (nvmlProcessUtilizationSample_t){1, clock_us - 40000, 7, 7, 0, 0};
    s[2] = (nvmlProcessUtilizationSample_t){util_pid(), clock_us, sm + 2, mem + 1, 0, 0};
    *count = 3;
    return OK;
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *count, nvmlProcessInfo_t *p)
{
    if (*count < 2) {
        *count = 2;
        return INSUFFICIENT_SIZE;
    }
    p[0] = (nvmlProcessInfo_t){1, 100ULL << 20, 0, 0};
    p[1] = (nvmlProcessInfo_t){util_pid(), (unsigned long long)(row[9] * 1048576.0), 0, 0};
    *count = 2;
    return OK;
}

/* Direct children of the calling process, at most max. */
static unsigned int children(unsigned int *pids, unsigned int max)
{
    unsigned int n = 0;
    DIR *d = opendir("/proc");
    if (!d)
        return 0;
    struct dirent *e;
    long self = (long)getpid();
    while ((e = readdir(d)) != NULL && n < max) {
        if (!isdigit((unsigned char)e->d_name[0]))
            continue;
        char path[300], buf[512];
        snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        size_t got = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[got] = '\0';
        const char *paren = strrchr(buf, ')');
        char state;
        long ppid;
        if (paren && sscanf(paren + 1, " %c %ld", &state, &ppid) == 2 && ppid == self && state != 'Z')
            pids[n++] = (unsigned int)strtoul(e->d_name, NULL, 10);
    }
    closedir(d);
    return n;
}

EXPORT nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *count,
                                                               nvmlProcessInfo_t *p)
{
#ifdef FAKE_NVML_MPS
    unsigned int kids[64], n_kids = 0, n = 1;
    const char *who = getenv("KACE_FAKE_NVML_MPS_CLIENTS");
    bool listed = !(who && strcmp(who, "none") == 0);
    if (listed) {
        n_kids = children(kids, 64);
        n += 1 + n_kids;
    }
    if (*count < n) {
        *count = n;
        return INSUFFICIENT_SIZE;
    }
    p[0] = (nvmlProcessInfo_t){1, 100ULL << 20, 0, 0};
    if (listed) {
        p[1] = (nvmlProcessInfo_t){own_pid(), (unsigned long long)(row[9] * 1048576.0), 0, 0};
        for (unsigned int i = 0; i < n_kids; i++)
            p[2 + i] = (nvmlProcessInfo_t){kids[i], 1ULL << 20, 0, 0};
    }
    *count = n;
#else
    (void)children;
    *count = 0; /* no MPS */
#endif
    return OK;
}
#else
EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t d, unsigned int *count, nvmlProcessInfo_v1_t *p)
{
    if (*count < 2) {
        *count = 2;
        return INSUFFICIENT_SIZE;
    }
    p[0] = (nvmlProcessInfo_v1_t){1, 100ULL << 20};
    p[1] = (nvmlProcessInfo_v1_t){own_pid(), (unsigned long long)(row[9] * 1048576.0)};
    *count = 2;
    return OK;
}
#endif
