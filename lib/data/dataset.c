#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/name_index.h"
#include "kace/dataset.h"

static const char *const metric_names[KACE_N_METRICS] = {
    [KACE_M_THREADS] = "Threads",
    [KACE_M_SM_THROUGHPUT] = "Compute (SM) Throughput",
    [KACE_M_DRAM_THROUGHPUT] = "DRAM Throughput",
    [KACE_M_MEM_THROUGHPUT] = "Memory Throughput",
    [KACE_M_REGISTERS] = "Registers",
    [KACE_M_STATIC_SHMEM] = "Static Shared Memory",
    [KACE_M_EXCLUSIVE] = "exclusive_throughput",
    [KACE_M_SM_PCT] = "sm%",
    [KACE_M_MEM_PCT] = "mem%",
    [KACE_M_MEMCAP] = "memcap",
    [KACE_M_PCIE_READ] = "PCIe read bandwidth",
    [KACE_M_PCIE_WRITE] = "PCIe write bandwidth",
    [KACE_M_SHORT_KERNEL] = "Short_Kernel",
    [KACE_M_AVG_THREAD] = "avg_Thread",
    [KACE_M_LONG_KERNEL] = "Long_Kernel",
    [KACE_M_AVE_KERNEL_LENGTH] = "ave_Kernel_Length",
    [KACE_M_LONG_SHORT_RATIO] = "long/short_Ratio",
    [KACE_M_CPU_PCT] = "CPU%",
    [KACE_M_MAINMEM_PCT] = "MainMem%",
    [KACE_M_EXCLUSIVE_MPS10 + 0] = "exclusive_mps10",
    [KACE_M_EXCLUSIVE_MPS10 + 1] = "exclusive_mps20",
    [KACE_M_EXCLUSIVE_MPS10 + 2] = "exclusive_mps30",
    [KACE_M_EXCLUSIVE_MPS10 + 3] = "exclusive_mps40",
    [KACE_M_EXCLUSIVE_MPS10 + 4] = "exclusive_mps50",
    [KACE_M_EXCLUSIVE_MPS10 + 5] = "exclusive_mps60",
    [KACE_M_EXCLUSIVE_MPS10 + 6] = "exclusive_mps70",
    [KACE_M_EXCLUSIVE_MPS10 + 7] = "exclusive_mps80",
    [KACE_M_EXCLUSIVE_MPS10 + 8] = "exclusive_mps90",
    [KACE_M_EXCLUSIVE_MPS10 + 9] = "exclusive_mps100",
    [KACE_M_PCIE_TX_MBPS] = "pcie_tx_MBps",
    [KACE_M_PCIE_RX_MBPS] = "pcie_rx_MBps",
};

const char *kace_metric_name(kace_metric metric)
{
    return (metric >= 0 && metric < KACE_N_METRICS) ? metric_names[metric] : "?";
}

int kace_metric_from_name(const char *name)
{
    for (int i = 0; i < KACE_N_METRICS; i++)
        if (strcmp(metric_names[i], name) == 0)
            return i;
    return -1;
}

/* The metrics with '%' in their names (tests/test_metric.c checks the two agree):
 * a table, as feature building asks for every feature of every row. */
static const bool metric_percent[KACE_N_METRICS] = {
    [KACE_M_SM_PCT] = true,
    [KACE_M_MEM_PCT] = true,
    [KACE_M_CPU_PCT] = true,
    [KACE_M_MAINMEM_PCT] = true,
};

bool kace_metric_is_percent(kace_metric metric)
{
    return metric >= 0 && metric < KACE_N_METRICS && metric_percent[metric];
}

void kace_workload_parse_name(const char *name, char family[KACE_NAME_MAX], int *batch)
{
    *batch = 0;
    snprintf(family, KACE_NAME_MAX, "%s", name);
    const char *b = strstr(name, "_batch");
    if (!b)
        return;
    const char *digits = b + 6;
    char *end = NULL;
    long v = strtol(digits, &end, 10);
    if (end == digits || v <= 0 || v > 1000000)
        return;
    *batch = (int)v;
    /* "<model>_batch<B>-<mode>" -> "<model>-<mode>"; "<model>_batch<B>" -> "<model>" */
    snprintf(family, KACE_NAME_MAX, "%.*s%s", (int)(b - name), name, end);
}

kace_status kace_dataset_new(kace_ctx *ctx, kace_dataset **out)
{
    *out = calloc(1, sizeof(kace_dataset));
    return *out ? KACE_OK : kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
}

void kace_dataset_free(kace_dataset **ds)
{
    if (!ds || !*ds)
        return;
    free((*ds)->workloads);
    free((*ds)->colocations);
    kace_name_index_free(&(*ds)->names);
    free(*ds);
    *ds = NULL;
}

int kace_dataset_find(const kace_dataset *ds, const char *name)
{
    /* The index holds every workload interned; a dataset filled some other
     * way (none in kace) is searched through. */
    if (ds->names && kace_name_index_count(ds->names) == ds->n_workloads)
        return kace_name_index_find(ds->names, name);
    for (size_t i = 0; i < ds->n_workloads; i++)
        if (strcmp(ds->workloads[i].name, name) == 0)
            return (int)i;
    return -1;
}

/* array with room for element n (of size bytes), doubling *cap so that n
 * appends cost O(n) copies; NULL (array unchanged) when out of memory. */
static void *room_for(void *array, size_t *cap, size_t n, size_t size)
{
    if (n < *cap)
        return array;
    size_t grown = *cap ? *cap * 2 : 64;
    void *p = realloc(array, grown * size);
    if (p)
        *cap = grown;
    return p;
}

/* The name index over every workload so far (built on first use). */
static bool index_names(kace_dataset *ds)
{
    if (ds->names)
        return true;
    if (!(ds->names = kace_name_index_new()))
        return false;
    for (size_t i = 0; i < ds->n_workloads; i++)
        if (!kace_name_index_add(ds->names, ds->workloads[i].name, (int)i, NULL)) {
            kace_name_index_free(&ds->names);
            return false;
        }
    return true;
}

kace_status kace_dataset_intern(kace_ctx *ctx, kace_dataset *ds, const char *name, int *index)
{
    int found = kace_dataset_find(ds, name);
    if (found >= 0) {
        *index = found;
        return KACE_OK;
    }
    if (strlen(name) >= KACE_NAME_MAX)
        return kace_fail(ctx, KACE_ERR_INVALID, "workload name '%.40s...' is longer than %d bytes", name,
                         KACE_NAME_MAX - 1);
    if (ds->n_workloads >= (size_t)INT_MAX)
        return kace_fail(ctx, KACE_ERR_INVALID, "more than %d workloads", INT_MAX);
    kace_workload *w = room_for(ds->workloads, &ds->workloads_cap, ds->n_workloads, sizeof *w);
    if (!w)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    ds->workloads = w;
    if (!index_names(ds) || !kace_name_index_add(ds->names, name, (int)ds->n_workloads, NULL))
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    kace_workload *nw = &ds->workloads[ds->n_workloads];
    memset(nw, 0, sizeof *nw);
    snprintf(nw->name, sizeof nw->name, "%s", name);
    kace_workload_parse_name(name, nw->family, &nw->batch);
    for (int m = 0; m < KACE_N_METRICS; m++)
        nw->metric[m] = NAN;
    *index = (int)ds->n_workloads++;
    return KACE_OK;
}

kace_status kace_dataset_add_colocation(kace_ctx *ctx, kace_dataset *ds, const kace_colocation *c)
{
    if (c->k < 1 || c->k > KACE_MAX_K)
        return kace_fail(ctx, KACE_ERR_INVALID, "a colocation has 1..%d workloads, not %d", KACE_MAX_K, c->k);
    for (int i = 0; i < c->k; i++)
        if (c->workload[i] < 0 || (size_t)c->workload[i] >= ds->n_workloads)
            return kace_fail(ctx, KACE_ERR_INVALID, "colocation member %d is not a workload of the dataset", i);
    kace_colocation *n = room_for(ds->colocations, &ds->colocations_cap, ds->n_colocations, sizeof *n);
    if (!n)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    ds->colocations = n;
    ds->colocations[ds->n_colocations++] = *c;
    return KACE_OK;
}

double kace_colocation_sum(const kace_colocation *c)
{
    double s = 0;
    for (int i = 0; i < c->k; i++)
        s += c->throughput[i];
    return s;
}

bool kace_colocation_has(const kace_colocation *c, int w)
{
    for (int i = 0; i < c->k; i++)
        if (c->workload[i] == w)
            return true;
    return false;
}
