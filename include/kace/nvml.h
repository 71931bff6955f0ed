/* NVML sampler: GPU system metrics while a workload runs.
 *
 * libnvidia-ml.so.1 is opened at run time with dlopen (no NVML header or
 * library is needed to build), so one kace binary runs with and without a GPU
 * and says clearly when there is no driver. Newer versioned entry points are
 * tried first (nvmlInit_v2, then nvmlInit; ..._v3, _v2, then unversioned).
 * A value that NVML cannot give is NaN (missing), never 0.
 */
#ifndef KACE_NVML_H
#define KACE_NVML_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kace/gpu.h"
#include "kace/kace.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Overrides the library path (tests load fake libraries through it). */
#define KACE_NVML_LIBRARY_ENV "KACE_NVML_LIBRARY"

typedef struct kace_nvml kace_nvml;

/* NVML as a GPU backend (include/kace/gpu.h): the first entry of lib/gpu/gpu.c's
 * list. Callers open a kace_gpu; this table is for the list and for tests. */
extern const kace_gpu_backend_ops kace_gpu_backend_nvml;

/* Loads NVML (path NULL: $KACE_NVML_LIBRARY, else libnvidia-ml.so.1),
 * initialises it and opens device `index`. KACE_ERR_UNSUPPORTED with a clear
 * message when there is no driver, a symbol is missing, or NVML fails. */
kace_status kace_nvml_open(kace_ctx *ctx, const char *path, unsigned index, kace_nvml **out);
/* Shuts NVML down and unloads it. */
void kace_nvml_close(kace_nvml **n);
/* The device's name, e.g. "NVIDIA H100 80GB HBM3" ("" when unknown). */
const char *kace_nvml_device_name(const kace_nvml *n);
/* The device's UUID, e.g. "GPU-5f1c..." ("" when unknown). */
const char *kace_nvml_device_uuid(const kace_nvml *n);
/* How many GPUs NVML sees (1, the opened one, when the library lacks
 * nvmlDeviceGetCount). KACE_ERR_IO when the query fails. */
kace_status kace_nvml_device_count(kace_ctx *ctx, kace_nvml *n, unsigned *count);
/* Makes device `index` the one sampled (name and UUID follow it).
 * KACE_ERR_NOT_FOUND when NVML has no such GPU; the previous one stays. */
kace_status kace_nvml_select(kace_ctx *ctx, kace_nvml *n, unsigned index);
/* Which entry points were found, e.g. "nvmlInit_v2 ... ProcessUtilization",
 * for messages and tests. */
const char *kace_nvml_symbols(const kace_nvml *n);

/* One sample. Per-process values cover the processes whose process group is
 * one of pgids (n_pgids 0: device-wide values only): SM% and mem% from
 * nvmlDeviceGetProcessUtilization, memory from the compute process list or,
 * for MPS clients, the MPS process list. Where NVML has no per-process value
 * the device's is given with per_process false; under MPS that is always so
 * for SM% and mem% (NVML gives utilization to the MPS server only). Fails
 * (KACE_ERR_IO) when a required query (utilization, memory) fails. */
kace_status kace_nvml_sample(kace_ctx *ctx, kace_nvml *n, const int *pgids, size_t n_pgids, kace_gpu_sample *out);

/* Whether this NVML offers nvmlDeviceGetMPSComputeRunningProcesses. */
bool kace_nvml_has_mps_list(const kace_nvml *n);
/* NVML's MPS client processes (_v3, _v2, then the unversioned call): up to
 * max in out, their count in *n_out. KACE_ERR_UNSUPPORTED when the library
 * or the GPU does not offer the list; KACE_ERR_IO when the query fails. */
kace_status kace_nvml_mps_processes(kace_ctx *ctx, kace_nvml *n, kace_gpu_process *out, size_t max, size_t *n_out);

#ifdef __cplusplus
}
#endif

#endif
