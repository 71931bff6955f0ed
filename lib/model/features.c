/* Colocation features, as the KACE paper aggregates them. */
#include <math.h>
#include <string.h>
#include <strings.h>

#include "kace/model.h"

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

const kace_feature_set *kace_feature_set_find(const char *name)
{
    if (strcasecmp(name, "xu-nvml") == 0)
        return &kace_features_xu_nvml;
    if (strcasecmp(name, "kace") == 0)
        return &kace_features_kace;
    if (strcasecmp(name, "xu") == 0)
        return &kace_features_xu;
    return NULL;
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
                                 "workload '%s' has no value for metric '%s' (needed by the %s features; import its "
                                 "profile)",
                                 w->name, kace_metric_name(m), fs->name);
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
