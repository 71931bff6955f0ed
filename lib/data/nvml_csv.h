/* nvidia-smi and DCGM samples -> system profiles (nvml_csv.c). Internal. */
#ifndef KACE_LIB_DATA_NVML_CSV_H
#define KACE_LIB_DATA_NVML_CSV_H

#include <stdbool.h>

#include "base/csv.h"
#include "kace/import.h"

/* Whether a CSV header is nvidia-smi --query-gpu's or a DCGM export's: a
 * column of GPU utilization (utilization.gpu [%], DCGM_FI_DEV_GPU_UTIL). */
bool kace_nvml_csv_detect(const kace_csv *header);

/* The samples of data reduced to each workload's system profile: sm% and
 * mem% as means, memcap as the peak (GiB), NVML's PCIe throughput as means
 * (MB/s). The rows' workload is the "workload" column's, else workload. */
kace_status kace_nvml_csv_parse_buffer(kace_ctx *ctx, const char *data, size_t len, const char *origin,
                                       const char *workload, kace_import_batch *batch);

#endif
