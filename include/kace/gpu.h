/* GPU access as run-time backends behind one table, as nvtop's per-vendor
 * tables and curl's TLS backends do: a backend is a kace_gpu_backend_ops
 * (name, capability bits, functions); callers open a kace_gpu handle and call
 * kace_gpu_*, testing capability bits, never asking which backend it is.
 *
 * The backends live in one list (lib/gpu/gpu.c): NVML (lib/gpu/nvml.c) is the
 * only real one; a future vendor is one more line there. kace_gpu_open takes
 * the first that opens, or the one $KACE_GPU_BACKEND names.
 * A value a backend cannot give is NaN (missing), never 0.
 */
#ifndef KACE_GPU_H
#define KACE_GPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kace/kace.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Names the backend kace_gpu_open uses (e.g. "nvml"); unset or empty: the
 * first in the list that opens. */
#define KACE_GPU_BACKEND_ENV "KACE_GPU_BACKEND"

typedef enum kace_gpu_field {
    KACE_GPU_SM_PCT,       /* SM utilization %: the workload's processes, else the device */
    KACE_GPU_MEM_PCT,      /* memory (controller) utilization %: the workload's processes, else the device */
    KACE_GPU_MEM_USED_MIB, /* GPU memory used, MiB: the workload's processes, else the device */
    KACE_GPU_POWER_W,      /* board power, W (device) */
    KACE_GPU_SM_CLOCK_MHZ, /* SM clock, MHz (device) */
    KACE_GPU_PCIE_TX_MBPS, /* PCIe transmit, MB/s (device) */
    KACE_GPU_PCIE_RX_MBPS, /* PCIe receive, MB/s (device) */
    KACE_GPU_N_FIELDS
} kace_gpu_field;

const char *kace_gpu_field_name(kace_gpu_field f);

typedef struct kace_gpu_sample {
    double v[KACE_GPU_N_FIELDS];           /* NaN = not available */
    bool per_process[KACE_GPU_N_FIELDS];   /* restricted to the workload's processes; false: the
                                              device's value (SM%, mem%, memory used fall back to it) */
    bool mps_client;                       /* a workload process is in NVML's MPS client list: its SM
                                              and memory utilization count for the MPS server, so the
                                              SM% and mem% here are the device's, never its own */
} kace_gpu_sample;

/* For a value stored as one workload's (a member of an MPS run, say): SM%,
 * mem% and memory used that are device-wide (per_process false) become NaN.
 * Returns how many values it dropped. */
int kace_gpu_sample_drop_device_wide(kace_gpu_sample *x);

/* A process in one of NVML's lists. */
typedef struct kace_gpu_process {
    int pid;
    double used_mib; /* NaN when NVML cannot say */
} kace_gpu_process;

/* Mean of samples per field (NaN samples skipped) and peak memory. */
typedef struct kace_gpu_stats {
    double sum[KACE_GPU_N_FIELDS];
    size_t count[KACE_GPU_N_FIELDS];
    size_t per_process[KACE_GPU_N_FIELDS]; /* samples that were per-process */
    size_t mps_client_samples;              /* samples with mps_client set */
    double peak_mem_mib;                    /* NaN until a memory sample */
    size_t samples;
} kace_gpu_stats;

void kace_gpu_stats_init(kace_gpu_stats *s);
void kace_gpu_stats_add(kace_gpu_stats *s, const kace_gpu_sample *x);
/* Mean of a field, NaN when no sample had it. */
double kace_gpu_stats_mean(const kace_gpu_stats *s, kace_gpu_field f);

/* Capability bits: what a backend (or an opened device) can give. */
enum {
    KACE_GPU_CAP_PER_PROCESS = 1u << 0, /* sample restricts SM%, mem%, memory used to process groups */
    KACE_GPU_CAP_MPS_LIST = 1u << 1,    /* mps_processes: the MPS client list */
    KACE_GPU_CAP_UUID = 1u << 2,        /* device_uuid */
    KACE_GPU_CAP_PCIE = 1u << 3,        /* sample gives PCIe transmit and receive */
};

/* One backend. impl is the backend's own handle. Required: name, open, close,
 * device_name, sample. Optional (NULL): caps_of (the capabilities this opened
 * device has; NULL: all of caps), device_count (NULL: 1), select (NULL: only
 * device 0), device_uuid (needs KACE_GPU_CAP_UUID), mps_processes (needs
 * KACE_GPU_CAP_MPS_LIST). Errors as in the kace_gpu_* calls below. */
typedef struct kace_gpu_backend_ops {
    const char *name;
    unsigned caps; /* KACE_GPU_CAP_* the backend can give at most */
    kace_status (*open)(kace_ctx *ctx, unsigned index, void **impl);
    void (*close)(void *impl);
    unsigned (*caps_of)(const void *impl);
    kace_status (*device_count)(kace_ctx *ctx, void *impl, unsigned *count);
    kace_status (*select)(kace_ctx *ctx, void *impl, unsigned index);
    const char *(*device_name)(const void *impl);
    const char *(*device_uuid)(const void *impl);
    kace_status (*sample)(kace_ctx *ctx, void *impl, const int *pgids, size_t n_pgids, kace_gpu_sample *out);
    kace_status (*mps_processes)(kace_ctx *ctx, void *impl, kace_gpu_process *out, size_t max, size_t *n_out);
} kace_gpu_backend_ops;

/* The backends kace_gpu_open tries, in order: the built-in list, then those
 * added with kace_gpu_register. *n gets their count. */
const kace_gpu_backend_ops *const *kace_gpu_backends(size_t *n);
/* Adds a backend after the built-in ones (at start-up, before any open; not
 * thread-safe). The table must outlive every open. KACE_ERR_INVALID when a
 * required function is missing or the name is taken, KACE_ERR_NOMEM when the
 * list is full. */
kace_status kace_gpu_register(kace_ctx *ctx, const kace_gpu_backend_ops *ops);

typedef struct kace_gpu kace_gpu;

/* Opens device `index` on the backend $KACE_GPU_BACKEND names, else on the
 * first backend in the list that opens. When none opens, the first backend's
 * error stands (NVML's: KACE_ERR_UNSUPPORTED, "no NVIDIA driver found ...");
 * an unknown name is KACE_ERR_UNSUPPORTED. */
kace_status kace_gpu_open(kace_ctx *ctx, unsigned index, kace_gpu **out);
/* Opens device `index` on this backend. */
kace_status kace_gpu_open_backend(kace_ctx *ctx, const kace_gpu_backend_ops *ops, unsigned index, kace_gpu **out);
/* Closes the backend's handle; *g becomes NULL (NULL and *g NULL: nothing). */
void kace_gpu_close(kace_gpu **g);
/* The backend's name, for messages ("" for NULL). */
const char *kace_gpu_backend_name(const kace_gpu *g);
/* The opened device's KACE_GPU_CAP_* bits (0 for NULL). */
unsigned kace_gpu_caps(const kace_gpu *g);
/* Whether every bit of cap is among kace_gpu_caps(g). */
bool kace_gpu_has(const kace_gpu *g, unsigned cap);
/* How many GPUs the backend sees (1 when it cannot say). */
kace_status kace_gpu_device_count(kace_ctx *ctx, kace_gpu *g, unsigned *count);
/* Makes device `index` the one sampled (name and UUID follow it).
 * KACE_ERR_NOT_FOUND when there is no such GPU; the previous one stays. */
kace_status kace_gpu_select(kace_ctx *ctx, kace_gpu *g, unsigned index);
/* The device's name ("" when unknown). */
const char *kace_gpu_device_name(const kace_gpu *g);
/* The device's UUID ("" when unknown or without KACE_GPU_CAP_UUID). */
const char *kace_gpu_device_uuid(const kace_gpu *g);
/* One sample (kace_nvml_sample describes NVML's). Without
 * KACE_GPU_CAP_PER_PROCESS the backend is asked for device-wide values only;
 * without KACE_GPU_CAP_PCIE the PCIe fields are NaN. */
kace_status kace_gpu_read(kace_ctx *ctx, kace_gpu *g, const int *pgids, size_t n_pgids, kace_gpu_sample *out);
/* The MPS client processes: up to max in out, their count in *n_out.
 * KACE_ERR_UNSUPPORTED without KACE_GPU_CAP_MPS_LIST. */
kace_status kace_gpu_mps_processes(kace_ctx *ctx, kace_gpu *g, kace_gpu_process *out, size_t max, size_t *n_out);

#ifdef __cplusplus
}
#endif

#endif
