/* In-memory view of workloads, their profiles and measured colocations.
 *
 * A dataset is what models and policies work on. It is filled from the store
 * (kace_store_load_dataset) or built directly by tests. Profile metrics are
 * doubles indexed by kace_metric; a metric that was not measured is NaN
 * ("missing"), never 0.
 */
#ifndef KACE_DATASET_H
#define KACE_DATASET_H

#include <stdbool.h>
#include <stddef.h>

#include "kace/kace.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The metrics kace knows by name. The store keeps any metric name; these are
 * the ones features are built from. Names match the reference data. */
typedef enum kace_metric {
    /* Kernel metrics (Nsight Compute or CUPTI), duration-weighted over kernels. */
    KACE_M_THREADS,
    KACE_M_SM_THROUGHPUT,   /* "Compute (SM) Throughput", % of peak */
    KACE_M_DRAM_THROUGHPUT, /* "DRAM Throughput", % of peak */
    KACE_M_MEM_THROUGHPUT,  /* "Memory Throughput", % of peak */
    KACE_M_REGISTERS,       /* threads x registers per thread */
    KACE_M_STATIC_SHMEM,    /* grid size x static shared memory per block */
    /* System metrics (NVML / nvidia-smi) and exclusive throughput. */
    KACE_M_EXCLUSIVE,       /* samples/s alone, MPS 100% */
    KACE_M_SM_PCT,          /* "sm%" */
    KACE_M_MEM_PCT,         /* "mem%" */
    KACE_M_MEMCAP,          /* peak GPU memory used, GB */
    /* Xu et al. (HotCloud'19) baseline metrics. */
    KACE_M_PCIE_READ,
    KACE_M_PCIE_WRITE,
    KACE_M_SHORT_KERNEL,
    KACE_M_AVG_THREAD,
    KACE_M_LONG_KERNEL,
    KACE_M_AVE_KERNEL_LENGTH,
    KACE_M_LONG_SHORT_RATIO,
    KACE_M_CPU_PCT,         /* host CPU% of the workload */
    KACE_M_MAINMEM_PCT,     /* host memory% of the workload */
    /* Exclusive throughput at MPS active-thread percentage 10, 20, ..., 100. */
    KACE_M_EXCLUSIVE_MPS10,
    KACE_M_EXCLUSIVE_MPS100 = KACE_M_EXCLUSIVE_MPS10 + 9,
    /* NVML's PCIe throughput during the workload's run alone (kace profile),
     * MB/s: the device sends (tx) and receives (rx). */
    KACE_M_PCIE_TX_MBPS,
    KACE_M_PCIE_RX_MBPS,
    KACE_N_METRICS
} kace_metric;

/* The canonical name of a metric, as stored ("Threads", "sm%", ...). */
const char *kace_metric_name(kace_metric metric);
/* Looks a canonical name up; returns -1 when the name is not a known metric. */
int kace_metric_from_name(const char *name);
/* True when the paper aggregates this metric by mean ('%' in its name). */
bool kace_metric_is_percent(kace_metric metric);

/* The metrics the store accepts: those above plus the extra ones kace
 * profile and the reference files record (Exclusive50, power_W, ...), each
 * with a physical range (lib/data/metric_range.c, docs/data.md). */
bool kace_metric_is_stored(const char *name);
/* NULL when value is usable for metric name (NaN = missing is); otherwise
 * writes why into buf ("sm% = 200 is out of range (a percentage: 0..100)",
 * or "unknown metric 'x'") and returns buf. */
const char *kace_metric_check(const char *name, double value, char *buf, size_t size);
/* Largest throughput (samples/s) kace accepts anywhere; the least is > 0. */
double kace_throughput_max(void);

#define KACE_NAME_MAX 128
#define KACE_MAX_K 8 /* most workloads in one colocation */

typedef struct kace_workload {
    char name[KACE_NAME_MAX];   /* e.g. "bert-base-cased_batch8-train" */
    char family[KACE_NAME_MAX]; /* model + mode, e.g. "bert-base-cased-train" */
    int batch;                  /* 0 when the name has no _batch<B> */
    double metric[KACE_N_METRICS];
} kace_workload;

typedef enum kace_run_status {
    KACE_RUN_OK = 0,
    KACE_RUN_FAILED,  /* crashed or no throughput recorded */
    KACE_RUN_OOM,
    KACE_RUN_TIMEOUT
} kace_run_status;

/* One measured colocation of k workloads (indices into the dataset). */
typedef struct kace_colocation {
    int k;
    int workload[KACE_MAX_K];
    int mps_pct[KACE_MAX_K];     /* CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, 100 = all */
    double throughput[KACE_MAX_K]; /* samples/s of each while colocated */
    kace_run_status status;
} kace_colocation;

typedef struct kace_dataset {
    kace_workload *workloads;
    size_t n_workloads;
    kace_colocation *colocations;
    size_t n_colocations;
    /* Kept by kace_dataset_intern / _add_colocation, read by nobody else:
     * the room allocated, and the workload-name index that keeps
     * kace_dataset_find constant-time on stores of 100k workloads. */
    size_t workloads_cap, colocations_cap;
    struct kace_name_index *names;
} kace_dataset;

kace_status kace_dataset_new(kace_ctx *ctx, kace_dataset **out);
void kace_dataset_free(kace_dataset **ds);
/* Adds a workload (metrics all missing) or returns the existing one's index. */
kace_status kace_dataset_intern(kace_ctx *ctx, kace_dataset *ds, const char *name, int *index);
/* Index of a workload by name, or -1 (a hash lookup). */
int kace_dataset_find(const kace_dataset *ds, const char *name);
kace_status kace_dataset_add_colocation(kace_ctx *ctx, kace_dataset *ds, const kace_colocation *c);
/* Sum of the colocation's measured throughputs (the paper's label). */
double kace_colocation_sum(const kace_colocation *c);
/* True when colocation c contains workload w. */
bool kace_colocation_has(const kace_colocation *c, int w);

/* Splits a name "<model>_batch<B>-<mode>" into family "<model>-<mode>" and B.
 * A name without that shape is its own family with batch 0. */
void kace_workload_parse_name(const char *name, char family[KACE_NAME_MAX], int *batch);

#ifdef __cplusplus
}
#endif

#endif
