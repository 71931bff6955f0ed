/* nvidia-smi and DCGM samples -> the system profile of a workload run alone.
 *
 * What most sites have: the GPU's own counters sampled while a job ran.
 * Two CSV layouts are read, recognised by their header:
 *  - nvidia-smi --query-gpu=timestamp,index,utilization.gpu,utilization.memory,memory.used
 *    --format=csv[,nounits] -lms 500: "utilization.gpu [%]" and the like, values
 *    "45 %" or "45", "[N/A]" where the GPU does not say;
 *  - a DCGM export (dcgm-exporter's fields, e.g. from a Prometheus query, one
 *    column per field): DCGM_FI_DEV_GPU_UTIL, DCGM_FI_DEV_MEM_COPY_UTIL,
 *    DCGM_FI_DEV_FB_USED, DCGM_FI_PROF_PCIE_RX_BYTES, DCGM_FI_PROF_PCIE_TX_BYTES.
 * The mapping (docs/data.md's table says the same):
 *    utilization.gpu, DCGM_FI_DEV_GPU_UTIL          -> sm%    mean of the samples
 *    utilization.memory, DCGM_FI_DEV_MEM_COPY_UTIL  -> mem%   mean
 *    memory.used, DCGM_FI_DEV_FB_USED (MiB)         -> memcap peak, in GiB (MiB / 1024)
 *    DCGM_FI_PROF_PCIE_RX_BYTES, _TX_BYTES (B/s)    -> pcie_rx_MBps, pcie_tx_MBps  mean / 1e6
 * The paper's sm% and mem% are means of nvidia-smi pmon samples of the one
 * process; for a workload alone on its GPU the GPU's utilization is the
 * same quantity. A "workload" column names each row's workload; without
 * one the file is one workload's (its name, or --workload). A GPU column
 * (index, uuid, gpu, UUID, pci.bus_id) must hold one GPU per workload: the
 * samples of the GPU the workload ran on alone. Other columns (timestamp,
 * name, power.draw, ...) are read past. The exclusive throughput is not in
 * these files: it comes from a system profile or the colocation files. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batch.h"
#include "kace/workload_name.h"
#include "nvml_csv.h"

enum { MEAN, PEAK };

typedef struct source {
    const char *column; /* the header's name without its " [unit]" */
    const char *metric; /* where it goes */
    int how;            /* MEAN or PEAK over the samples */
    double scale;       /* to the metric's unit */
} source;

static const source sources[] = {
    {"utilization.gpu", "sm%", MEAN, 1},
    {"utilization.memory", "mem%", MEAN, 1},
    {"memory.used", "memcap", PEAK, 1.0 / 1024},
    {"DCGM_FI_DEV_GPU_UTIL", "sm%", MEAN, 1},
    {"DCGM_FI_DEV_MEM_COPY_UTIL", "mem%", MEAN, 1},
    {"DCGM_FI_DEV_FB_USED", "memcap", PEAK, 1.0 / 1024},
    {"DCGM_FI_PROF_PCIE_RX_BYTES", "pcie_rx_MBps", MEAN, 1e-6},
    {"DCGM_FI_PROF_PCIE_TX_BYTES", "pcie_tx_MBps", MEAN, 1e-6},
};
enum { N_SOURCES = sizeof sources / sizeof *sources };

static const char *const gpu_columns[] = {"index", "uuid", "gpu", "UUID", "pci.bus_id"};

/* The column's name: spaces around it and a trailing " [unit]" dropped. */
static void column_key(const char *field, char *out, size_t size)
{
    while (*field == ' ')
        field++;
    size_t n = strlen(field);
    const char *bracket = n && field[n - 1] == ']' ? strrchr(field, '[') : NULL;
    if (bracket)
        n = (size_t)(bracket - field);
    while (n && field[n - 1] == ' ')
        n--;
    if (n >= size)
        n = size - 1;
    memcpy(out, field, n);
    out[n] = '\0';
}

static int find_column(const kace_csv *h, const char *name)
{
    char key[128];
    for (size_t i = 0; i < h->n_fields; i++) {
        column_key(h->fields[i], key, sizeof key);
        if (strcmp(key, name) == 0)
            return (int)i;
    }
    return -1;
}

bool kace_nvml_csv_detect(const kace_csv *header)
{
    return find_column(header, "utilization.gpu") >= 0 || find_column(header, "DCGM_FI_DEV_GPU_UTIL") >= 0;
}

/* One workload's samples. */
typedef struct acc {
    char workload[KACE_NAME_MAX];
    char gpu[128];
    int gpu_line;
    double sum[N_SOURCES], peak[N_SOURCES];
    long n[N_SOURCES];
} acc;

/* A sample cell: *has false for an empty cell or one the GPU did not fill
 * ("[N/A]", "[Not Supported]", "N/A"); a unit after the number ("45 %",
 * "1234 MiB") is allowed. Anything else that is not a number >= 0 fails. */
static kace_status sample(kace_ctx *ctx, const kace_csv *csv, size_t i, const char *column, double *v, bool *has)
{
    const char *s = csv->fields[i];
    while (*s == ' ')
        s++;
    *has = false;
    if (!*s || *s == '[' || strcmp(s, "N/A") == 0)
        return KACE_OK;
    char *end = NULL;
    errno = 0;
    *v = strtod(s, &end);
    if (end == s || errno == ERANGE || !isfinite(*v) || *v < 0)
        return kace_csv_fail(ctx, csv, i, KACE_ERR_PARSE, "%s: expected a number >= 0 (a sample), got '%.40s'",
                             column, csv->fields[i]);
    while (*end == ' ')
        end++;
    for (const char *u = end; *u; u++)
        if (!isalpha((unsigned char)*u) && *u != '%' && *u != '/')
            return kace_csv_fail(ctx, csv, i, KACE_ERR_PARSE, "%s: expected a number and its unit, got '%.40s'",
                                 column, csv->fields[i]);
    *has = true;
    return KACE_OK;
}

kace_status kace_nvml_csv_parse_buffer(kace_ctx *ctx, const char *data, size_t len, const char *origin,
                                       const char *workload, kace_import_batch *batch)
{
    kace_csv hdr, csv;
    kace_csv_init(&hdr, data, len, origin);
    kace_csv_init(&csv, data, len, origin);
    acc *accs = NULL;
    size_t n_accs = 0;
    bool has = false;
    kace_status st = kace_csv_next(ctx, &hdr, &has);
    if (!st && !has)
        st = kace_fail(ctx, KACE_ERR_PARSE, "%s:1:1: empty file (expected a CSV header line)", origin);
    if (st)
        goto done;
    int col[N_SOURCES], workload_col = find_column(&hdr, "workload"), gpu_col = -1;
    for (int s = 0; s < N_SOURCES; s++)
        col[s] = find_column(&hdr, sources[s].column);
    for (size_t g = 0; g < sizeof gpu_columns / sizeof *gpu_columns && gpu_col < 0; g++)
        gpu_col = find_column(&hdr, gpu_columns[g]);
    char why[300];
    if (workload_col < 0 && (!workload || !kace_workload_name_ok(workload, NULL, why, sizeof why))) {
        st = kace_fail(ctx, KACE_ERR_INVALID,
                       "%s: workload name %s for the samples (a workload name is %s; name the file after the "
                       "workload, give --workload NAME or a workload column)",
                       origin, workload ? why : "missing", KACE_WORKLOAD_NAME_RULE);
        goto done;
    }
    csv.pos = hdr.pos;
    csv.line = hdr.line;
    while ((st = kace_csv_next(ctx, &csv, &has)) == KACE_OK && has) {
        if (csv.n_fields != hdr.n_fields) {
            st = kace_csv_fail(ctx, &csv, csv.n_fields < hdr.n_fields ? 0 : hdr.n_fields, KACE_ERR_PARSE,
                               "expected %zu fields as in the header, got %zu", hdr.n_fields, csv.n_fields);
            break;
        }
        char name[KACE_NAME_MAX];
        if (workload_col >= 0) {
            if ((st = kace_csv_workload_name(ctx, &csv, (size_t)workload_col, "workload", name, sizeof name)))
                break;
        } else {
            snprintf(name, sizeof name, "%s", workload);
        }
        acc *a = NULL;
        for (size_t i = 0; i < n_accs && !a; i++)
            if (strcmp(accs[i].workload, name) == 0)
                a = &accs[i];
        if (!a) {
            acc *grown = realloc(accs, (n_accs + 1) * sizeof *accs);
            if (!grown) {
                st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
                break;
            }
            accs = grown;
            a = &accs[n_accs++];
            memset(a, 0, sizeof *a);
            snprintf(a->workload, sizeof a->workload, "%s", name);
        }
        if (gpu_col >= 0) {
            const char *gpu = csv.fields[gpu_col];
            if (!a->gpu_line) {
                snprintf(a->gpu, sizeof a->gpu, "%s", gpu);
                a->gpu_line = csv.record_line;
            } else if (strcmp(a->gpu, gpu) != 0) {
                st = kace_csv_fail(ctx, &csv, (size_t)gpu_col, KACE_ERR_PARSE,
                                   "samples of two GPUs for workload '%s' ('%.40s' from line %d, '%.40s' here): "
                                   "export only the GPU it ran on alone (nvidia-smi --id=N)",
                                   a->workload, a->gpu, a->gpu_line, gpu);
                break;
            }
        }
        for (int s = 0; s < N_SOURCES && !st; s++) {
            double v;
            bool got;
            if (col[s] < 0 || (st = sample(ctx, &csv, (size_t)col[s], sources[s].column, &v, &got)) || !got)
                continue;
            char out_of_range[200];
            if (kace_metric_check(sources[s].metric, v * sources[s].scale, out_of_range, sizeof out_of_range)) {
                st = kace_csv_fail(ctx, &csv, (size_t)col[s], KACE_ERR_INVALID, "column '%s' as %s: %s",
                                   sources[s].column, sources[s].metric, out_of_range);
                break;
            }
            a->sum[s] += v * sources[s].scale;
            a->peak[s] = a->n[s] ? fmax(a->peak[s], v * sources[s].scale) : v * sources[s].scale;
            a->n[s]++;
        }
        if (st)
            break;
    }
    if (!st && n_accs == 0)
        st = kace_fail(ctx, KACE_ERR_PARSE, "%s:%d:1: no samples after the header (expected at least one row)",
                       origin, hdr.line);
    /* One value per workload and metric: the first source of a metric
     * that has samples (nvidia-smi's and DCGM's columns do not mix). */
    for (size_t i = 0; i < n_accs && !st; i++) {
        bool done_metric[N_SOURCES] = {false};
        for (int s = 0; s < N_SOURCES && !st; s++) {
            if (!accs[i].n[s])
                continue;
            bool seen = false;
            for (int t = 0; t < s; t++)
                seen |= done_metric[t] && strcmp(sources[t].metric, sources[s].metric) == 0;
            if (seen)
                continue;
            done_metric[s] = true;
            double v = sources[s].how == MEAN ? accs[i].sum[s] / (double)accs[i].n[s] : accs[i].peak[s];
            st = kace_batch_add_value(ctx, batch, accs[i].workload, sources[s].metric, v, false);
        }
    }
done:
    free(accs);
    kace_csv_release(&hdr);
    kace_csv_release(&csv);
    return st;
}
