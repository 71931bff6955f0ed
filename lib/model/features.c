/* Colocation features, as the KACE paper aggregates them. */
#include <math.h>
#include <string.h>
#include <strings.h>

#include "kace/model.h"
#include "kace/predictor.h"

const kace_feature_set kace_features_kace = {
    "kace", 10,
    {KACE_M_THREADS, KACE_M_SM_THROUGHPUT, KACE_M_DRAM_THROUGHPUT, KACE_M_MEM_THROUGHPUT, KACE_M_REGISTERS,
     KACE_M_STATIC_SHMEM, KACE_M_EXCLUSIVE, KACE_M_SM_PCT, KACE_M_MEM_PCT, KACE_M_MEMCAP}};

const kace_feature_set kace_features_xu = {
    "xu", 10,
    {KACE_M_PCIE_READ, KACE_M_PCIE_WRITE, KACE_M_LONG_KERNEL, KACE_M_AVE_KERNEL_LENGTH, KACE_M_LONG_SHORT_RATIO,
     KACE_M_AVG_THREAD, KACE_M_SM_PCT, KACE_M_MEM_PCT, KACE_M_CPU_PCT, KACE_M_MAINMEM_PCT}};

/* Xu et al.'s features where no ncu PCIe section was taken (kace profile):
 * NVML's PCIe throughput of the run alone stands for ncu's PCIe read
 * (the device receives) and write (it sends) bandwidth. */
const kace_feature_set kace_features_xu_nvml = {
    "xu-nvml", 10,
    {KACE_M_PCIE_RX_MBPS, KACE_M_PCIE_TX_MBPS, KACE_M_LONG_KERNEL, KACE_M_AVE_KERNEL_LENGTH, KACE_M_LONG_SHORT_RATIO,
     KACE_M_AVG_THREAD, KACE_M_SM_PCT, KACE_M_MEM_PCT, KACE_M_CPU_PCT, KACE_M_MAINMEM_PCT}};

/* The feature sets above restricted to fewer metrics (kace_feature_set_restrict),
 * in their order. */
static const kace_feature_set kace_no_counters = {
    "kace-no-counters", 7,
    {KACE_M_THREADS, KACE_M_REGISTERS, KACE_M_STATIC_SHMEM, KACE_M_EXCLUSIVE, KACE_M_SM_PCT, KACE_M_MEM_PCT,
     KACE_M_MEMCAP}};
static const kace_feature_set kace_system = {
    "kace-system", 4, {KACE_M_EXCLUSIVE, KACE_M_SM_PCT, KACE_M_MEM_PCT, KACE_M_MEMCAP}};
static const kace_feature_set xu_no_counters = {
    "xu-no-counters", 8,
    {KACE_M_LONG_KERNEL, KACE_M_AVE_KERNEL_LENGTH, KACE_M_LONG_SHORT_RATIO, KACE_M_AVG_THREAD, KACE_M_SM_PCT,
     KACE_M_MEM_PCT, KACE_M_CPU_PCT, KACE_M_MAINMEM_PCT}};
static const kace_feature_set xu_system = {
    "xu-system", 4, {KACE_M_SM_PCT, KACE_M_MEM_PCT, KACE_M_CPU_PCT, KACE_M_MAINMEM_PCT}};
static const kace_feature_set xu_nvml_system = {
    "xu-nvml-system", 6,
    {KACE_M_PCIE_RX_MBPS, KACE_M_PCIE_TX_MBPS, KACE_M_SM_PCT, KACE_M_MEM_PCT, KACE_M_CPU_PCT, KACE_M_MAINMEM_PCT}};

/* Each base set and what it becomes without counters and with system metrics only. */
static const kace_feature_set *const restricted[][KACE_N_METRIC_SETS] = {
    {&kace_features_kace, &kace_no_counters, &kace_system},
    {&kace_features_xu, &xu_no_counters, &xu_system},
    {&kace_features_xu_nvml, &kace_features_xu_nvml, &xu_nvml_system},
};
enum { N_BASES = sizeof restricted / sizeof restricted[0] };

const kace_feature_set *kace_feature_set_find(const char *name)
{
    for (int b = 0; b < N_BASES; b++)
        for (int s = 0; s < KACE_N_METRIC_SETS; s++)
            if (strcasecmp(name, restricted[b][s]->name) == 0)
                return restricted[b][s];
    return NULL;
}

const char *kace_metric_set_name(kace_metric_set set)
{
    switch (set) {
    case KACE_METRICS_FULL: return "full";
    case KACE_METRICS_NO_COUNTERS: return "no-counters";
    case KACE_METRICS_SYSTEM: return "system";
    default: return "?";
    }
}

int kace_metric_set_from_name(const char *name)
{
    for (int s = 0; s < KACE_N_METRIC_SETS; s++)
        if (name && strcmp(name, kace_metric_set_name((kace_metric_set)s)) == 0)
            return s;
    return -1;
}

/* Kernel replay measures these (Nsight Compute's sections, CUPTI's profiler). */
static bool is_counter(kace_metric m)
{
    return m == KACE_M_SM_THROUGHPUT || m == KACE_M_DRAM_THROUGHPUT || m == KACE_M_MEM_THROUGHPUT ||
           m == KACE_M_PCIE_READ || m == KACE_M_PCIE_WRITE;
}

/* A kernel's launch record (CUPTI activity, Nsight Systems) gives these. */
static bool is_launch(kace_metric m)
{
    return m == KACE_M_THREADS || m == KACE_M_REGISTERS || m == KACE_M_STATIC_SHMEM || m == KACE_M_SHORT_KERNEL ||
           m == KACE_M_AVG_THREAD || m == KACE_M_LONG_KERNEL || m == KACE_M_AVE_KERNEL_LENGTH ||
           m == KACE_M_LONG_SHORT_RATIO;
}

bool kace_metric_set_has(kace_metric_set set, kace_metric metric)
{
    if (set == KACE_METRICS_FULL)
        return true;
    if (is_counter(metric))
        return false;
    return set == KACE_METRICS_NO_COUNTERS || !is_launch(metric);
}

const char *kace_metric_source(kace_metric metric)
{
    if (is_counter(metric))
        return "kernel counters: an Nsight Compute or kace profile import (or use a model without them: "
               "--metrics no-counters or system)";
    if (is_launch(metric))
        return "kernel launch records: a CUPTI activity, Nsight Systems or kace profile import (or use "
               "--metrics system)";
    if (metric == KACE_M_EXCLUSIVE)
        return "a solo run: its exclusive throughput";
    return "system metrics: an NVML, nvidia-smi, DCGM or kace profile import";
}

const kace_feature_set *kace_feature_set_restrict(const kace_feature_set *fs, kace_metric_set set)
{
    if ((int)set < 0 || set >= KACE_N_METRIC_SETS)
        return fs;
    for (int b = 0; b < N_BASES; b++)
        for (int s = 0; s < KACE_N_METRIC_SETS; s++)
            if (restricted[b][s] == fs)
                return restricted[b][s > (int)set ? s : (int)set];
    return fs;
}

kace_metric_set kace_feature_set_metrics(const kace_feature_set *fs)
{
    kace_metric_set set = KACE_METRICS_SYSTEM;
    for (int j = 0; j < fs->n; j++)
        while (set > KACE_METRICS_FULL && !kace_metric_set_has(set, fs->metric[j]))
            set = (kace_metric_set)(set - 1);
    return set;
}

kace_status kace_features_group(kace_ctx *ctx, const kace_dataset *ds, const kace_feature_set *fs,
                                const int *workloads, int k, double *x)
{
    if (k < 1 || k > KACE_MAX_K)
        return kace_fail(ctx, KACE_ERR_INVALID, "a group has 1..%d workloads, not %d", KACE_MAX_K, k);
    for (int j = 0; j < fs->n; j++) {
        kace_metric m = fs->metric[j];
        double sum = 0;
        for (int i = 0; i < k; i++) {
            const kace_workload *w = &ds->workloads[workloads[i]];
            double v = w->metric[m];
            if (isnan(v))
                return kace_fail(ctx, KACE_ERR_INVALID,
                                 "workload '%s' has no value for metric '%s' (needed by the %s features; import %s)",
                                 w->name, kace_metric_name(m), fs->name, kace_metric_source(m));
            sum += v;
        }
        /* The paper averages metrics whose name has '%' and sums the rest. */
        x[j] = kace_metric_is_percent(m) ? sum / k : sum;
    }
    return KACE_OK;
}

kace_status kace_features_build(kace_ctx *ctx, const kace_dataset *ds, const kace_feature_set *fs, const int *rows,
                                size_t n_rows, double *X)
{
    for (size_t r = 0; r < n_rows; r++) {
        const kace_colocation *c = &ds->colocations[rows[r]];
        kace_status st = kace_features_group(ctx, ds, fs, c->workload, c->k, X + r * (size_t)fs->n);
        if (st)
            return st;
    }
    return KACE_OK;
}

void kace_labels_build(const kace_dataset *ds, const int *rows, size_t n_rows, double *y)
{
    for (size_t r = 0; r < n_rows; r++)
        y[r] = kace_colocation_sum(&ds->colocations[rows[r]]);
}

void kace_fit_spec_restrict(kace_fit_spec *spec, kace_metric_set set)
{
    if (spec->features)
        spec->features = kace_feature_set_restrict(spec->features, set);
    spec->slowdown.metrics = set;
}

/* Whether workload w has every metric of the list that set holds. */
static bool has_all(const kace_workload *w, kace_metric_set set, const kace_metric *metric, int n)
{
    for (int j = 0; j < n; j++)
        if (kace_metric_set_has(set, metric[j]) && isnan(w->metric[metric[j]]))
            return false;
    return true;
}

kace_metric_set kace_metric_set_choose(const kace_dataset *ds, const int *rows, size_t n, const kace_fit_spec *spec)
{
    /* The slowdown model reads its own metrics; the others their features. */
    int n_metric;
    const kace_metric *metric;
    if (spec->kind == KACE_MODEL_LINEAR || spec->kind == KACE_MODEL_FOREST) {
        const kace_feature_set *fs = spec->features ? spec->features : &kace_features_kace;
        metric = fs->metric;
        n_metric = fs->n;
    } else {
        metric = kace_profile_metrics(&n_metric);
    }
    size_t n_rows = rows ? n : ds->n_colocations;
    for (int set = KACE_METRICS_FULL; set < KACE_METRICS_SYSTEM; set++) {
        bool all = true;
        for (size_t r = 0; r < n_rows && all; r++) {
            const kace_colocation *c = &ds->colocations[rows ? rows[r] : (int)r];
            for (int i = 0; i < c->k && all; i++)
                all = has_all(&ds->workloads[c->workload[i]], (kace_metric_set)set, metric, n_metric);
        }
        if (all)
            return (kace_metric_set)set;
    }
    return KACE_METRICS_SYSTEM;
}
