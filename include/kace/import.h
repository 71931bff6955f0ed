/* Parsing of measurement files into an import batch (no store involved), so
 * that every parser can be fuzzed on its own and a batch is either stored
 * whole or not at all.
 *
 * Recognised files (by their header line):
 *  - kernel profiles      Threads,...,Type            (profiles/kernel*, one row per workload)
 *  - system profiles      Type,Exclusive100,sm%,...   (profiles/system*.csv)
 *  - exclusive by MPS %   workload,10,20,...,100
 *  - colocations          workload1..workloadK + w1throughput..wKthroughput (any k)
 *  - raw MPS campaigns    workload1,workload2[,workload3],"(LS10, BE90)",...
 *  - published splits     n_occur,seed,set,workload1,workload2,paper_fit
 *  - Nsight Compute       ncu --csv --print-details all (raw per-kernel export)
 *  - nvidia-smi / DCGM    utilization.gpu [%],... or DCGM_FI_DEV_GPU_UTIL,... samples
 *                         of one workload alone (lib/data/nvml_csv.c): its system profile
 * Every error names the file, line and column and what was expected.
 */
#ifndef KACE_IMPORT_H
#define KACE_IMPORT_H

#include "kace/dataset.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KACE_METRIC_NAME_MAX 96

typedef enum kace_file_kind {
    KACE_FILE_UNKNOWN = 0,
    KACE_FILE_KERNEL_PROFILE,
    KACE_FILE_SYSTEM_PROFILE,
    KACE_FILE_EXCLUSIVE_BY_MPS,
    KACE_FILE_COLOCATIONS,
    KACE_FILE_RAW_CAMPAIGN,
    KACE_FILE_SPLITS,
    KACE_FILE_NCU,
    /* A device campaign's own records (kace export --dataset: runs.csv,
     * spread.csv): recognised and stored nowhere, since the colocation files
     * beside them hold the same runs' means. */
    KACE_FILE_CAMPAIGN_RECORD,
    /* nvidia-smi --query-gpu or DCGM samples of workloads run alone: their
     * sm%, mem%, memcap (and NVML's PCIe), lib/data/nvml_csv.c. */
    KACE_FILE_NVML_SAMPLES
} kace_file_kind;

const char *kace_file_kind_name(kace_file_kind kind);
/* Where a kind goes in the import order: profiles (kernel, Nsight Compute)
 * first, then system profiles and exclusive-by-MPS curves, colocation sets,
 * raw campaigns, and splits last (they name stored colocations). */
int kace_file_kind_rank(kace_file_kind kind);

typedef struct kace_profile_value {
    char workload[KACE_NAME_MAX];
    char metric[KACE_METRIC_NAME_MAX];
    double value;  /* NaN = missing (an empty cell) */
    bool embedded; /* copied from a colocation file: only fills a missing value */
    int line, col; /* where in the file (0 = not from one cell, e.g. an ncu reduction) */
} kace_profile_value;

typedef struct kace_import_run {
    int k;
    char workload[KACE_MAX_K][KACE_NAME_MAX];
    int mps_pct[KACE_MAX_K];
    double throughput[KACE_MAX_K]; /* NaN when the run failed */
    kace_run_status status;
    int line;                      /* source line, for messages */
    int col[KACE_MAX_K];           /* column of each member's throughput cell */
    int name_col[KACE_MAX_K];      /* column of each member's name */
} kace_import_run;

typedef struct kace_import_split {
    int n_occur, seed;
    bool train, paper_fit;
    char workload1[KACE_NAME_MAX], workload2[KACE_NAME_MAX];
    int line;
} kace_import_split;

typedef struct kace_import_batch {
    kace_file_kind kind;
    char origin[512];   /* the file name given */
    char set[128];      /* name of the colocation set: file basename without extension */
    kace_profile_value *values;
    size_t n_values, cap_values;
    kace_import_run *runs;
    size_t n_runs, cap_runs;
    kace_import_split *splits;
    size_t n_splits, cap_splits;
} kace_import_batch;

typedef struct kace_import_options {
    const char *workload; /* ncu exports: the workload the kernels belong to
                             (default: file basename without extension) */
    /* Storing (kace_store_import_files): */
    bool replace;          /* stored values that differ from the file's are
                              replaced (the old ones kept as history);
                              otherwise such an import is refused */
    bool create_workloads; /* colocation rows may name workloads that are
                              neither stored nor profiled by the same import */
    bool retire_other_gpu; /* the batch is a whole profile measured on the
                              source's GPU: its workloads' stored values that
                              another GPU measured go to history, also those
                              the batch does not give again (no GPU mixing) */
} kace_import_options;

/* Parses one file. On failure *out stays NULL and the message names
 * file:line:column. Refused besides malformed cells: duplicate or unknown
 * header columns, a workload row or a colocation repeated in one file
 * (naming both lines), values outside their metric's physical range
 * (kace_metric_check) and throughputs that are not finite and > 0. */
kace_status kace_import_parse_file(kace_ctx *ctx, const char *path, const kace_import_options *opt,
                                   kace_import_batch **out);
/* Same, from memory; origin is the name used in messages and for the set. */
kace_status kace_import_parse_buffer(kace_ctx *ctx, const char *data, size_t len, const char *origin,
                                     const kace_import_options *opt, kace_import_batch **out);
void kace_import_batch_free(kace_import_batch **b);

/* The six kernel metrics of the paper (plus the Xu et al. kernel metrics)
 * reduced from an Nsight Compute raw export by duration-weighted means. */
kace_status kace_ncu_parse_buffer(kace_ctx *ctx, const char *data, size_t len, const char *origin,
                                  const char *workload, kace_import_batch *batch);

#ifdef __cplusplus
}
#endif

#endif
