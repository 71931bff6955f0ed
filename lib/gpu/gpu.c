/* GPU access behind one table of backends (include/kace/gpu.h): the list,
 * the handle, the capability checks; the sample arithmetic shared by every
 * backend (field names, device-wide drops, means). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kace/gpu.h"
#include "kace/nvml.h"

#define MAX_BACKENDS 8

/* The backends, tried in this order: the built-in ones (a new vendor is one
 * more entry here), then those kace_gpu_register adds; NULL ends the list. */
static const kace_gpu_backend_ops *backends[MAX_BACKENDS + 1] = {
    &kace_gpu_backend_nvml,
};

static size_t count_backends(void)
{
    size_t n = 0;
    while (n < MAX_BACKENDS && backends[n])
        n++;
    return n;
}

struct kace_gpu {
    const kace_gpu_backend_ops *ops;
    void *impl;
    unsigned caps;
};

const kace_gpu_backend_ops *const *kace_gpu_backends(size_t *n)
{
    *n = count_backends();
    return backends;
}

kace_status kace_gpu_register(kace_ctx *ctx, const kace_gpu_backend_ops *ops)
{
    if (!ops || !ops->name || !ops->name[0] || !ops->open || !ops->close || !ops->device_name || !ops->sample)
        return kace_fail(ctx, KACE_ERR_INVALID, "a GPU backend needs a name, open, close, device_name and sample");
    size_t n_backends = count_backends();
    for (size_t i = 0; i < n_backends; i++)
        if (strcmp(backends[i]->name, ops->name) == 0)
            return kace_fail(ctx, KACE_ERR_INVALID, "a GPU backend named '%s' is already in the list", ops->name);
    if (n_backends >= MAX_BACKENDS)
        return kace_fail(ctx, KACE_ERR_NOMEM, "the GPU backend list is full (%d)", MAX_BACKENDS);
    backends[n_backends++] = ops;
    return KACE_OK;
}

kace_status kace_gpu_open_backend(kace_ctx *ctx, const kace_gpu_backend_ops *ops, unsigned index, kace_gpu **out)
{
    *out = NULL;
    kace_gpu *g = calloc(1, sizeof *g);
    if (!g)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    g->ops = ops;
    kace_status st = ops->open(ctx, index, &g->impl);
    if (st) {
        if (g->impl)
            ops->close(g->impl);
        free(g);
        return st;
    }
    /* What the opened device offers, never more than the table says; an
     * optional function that is absent takes its bit away. */
    g->caps = ops->caps & (ops->caps_of ? ops->caps_of(g->impl) : ~0u);
    if (!ops->device_uuid)
        g->caps &= ~(unsigned)KACE_GPU_CAP_UUID;
    if (!ops->mps_processes)
        g->caps &= ~(unsigned)KACE_GPU_CAP_MPS_LIST;
    *out = g;
    return KACE_OK;
}

kace_status kace_gpu_open(kace_ctx *ctx, unsigned index, kace_gpu **out)
{
    *out = NULL;
    size_t n_backends = count_backends();
    const char *want = getenv(KACE_GPU_BACKEND_ENV);
    if (want && want[0]) {
        char known[256] = "";
        size_t used = 0;
        for (size_t i = 0; i < n_backends; i++) {
            if (strcmp(backends[i]->name, want) == 0)
                return kace_gpu_open_backend(ctx, backends[i], index, out);
            int w = snprintf(known + used, sizeof known - used, "%s%s", i ? ", " : "", backends[i]->name);
            if (w > 0 && (size_t)w < sizeof known - used)
                used += (size_t)w;
        }
        return kace_fail(ctx, KACE_ERR_UNSUPPORTED, "unknown GPU backend '%s' in $%s (known: %s)", want,
                         KACE_GPU_BACKEND_ENV, known);
    }
    /* The first backend that opens; when none does, the first one's error. */
    kace_status first = KACE_ERR_UNSUPPORTED;
    char first_msg[1024] = "no GPU backend";
    for (size_t i = 0; i < n_backends; i++) {
        kace_status st = kace_gpu_open_backend(ctx, backends[i], index, out);
        if (st == KACE_OK)
            return KACE_OK;
        if (i == 0) {
            first = st;
            snprintf(first_msg, sizeof first_msg, "%s", kace_errmsg(ctx));
        }
    }
    return kace_fail(ctx, first, "%s", first_msg);
}

void kace_gpu_close(kace_gpu **g)
{
    if (!g || !*g)
        return;
    (*g)->ops->close((*g)->impl);
    free(*g);
    *g = NULL;
}

const char *kace_gpu_backend_name(const kace_gpu *g) { return g ? g->ops->name : ""; }

unsigned kace_gpu_caps(const kace_gpu *g) { return g ? g->caps : 0; }

bool kace_gpu_has(const kace_gpu *g, unsigned cap) { return g && (g->caps & cap) == cap; }

kace_status kace_gpu_device_count(kace_ctx *ctx, kace_gpu *g, unsigned *count)
{
    if (!g->ops->device_count) {
        *count = 1;
        return KACE_OK;
    }
    return g->ops->device_count(ctx, g->impl, count);
}

kace_status kace_gpu_select(kace_ctx *ctx, kace_gpu *g, unsigned index)
{
    if (!g->ops->select)
        return index == 0 ? KACE_OK
                          : kace_fail(ctx, KACE_ERR_NOT_FOUND, "GPU backend %s has only device 0", g->ops->name);
    return g->ops->select(ctx, g->impl, index);
}

const char *kace_gpu_device_name(const kace_gpu *g)
{
    const char *s = g ? g->ops->device_name(g->impl) : NULL;
    return s ? s : "";
}

const char *kace_gpu_device_uuid(const kace_gpu *g)
{
    const char *s = kace_gpu_has(g, KACE_GPU_CAP_UUID) ? g->ops->device_uuid(g->impl) : NULL;
    return s ? s : "";
}

kace_status kace_gpu_read(kace_ctx *ctx, kace_gpu *g, const int *pgids, size_t n_pgids, kace_gpu_sample *out)
{
    if (!(g->caps & KACE_GPU_CAP_PER_PROCESS)) {
        pgids = NULL;
        n_pgids = 0;
    }
    kace_status st = g->ops->sample(ctx, g->impl, pgids, n_pgids, out);
    if (st)
        return st;
    if (!(g->caps & KACE_GPU_CAP_PER_PROCESS)) {
        memset(out->per_process, 0, sizeof out->per_process);
        out->mps_client = false;
    }
    if (!(g->caps & KACE_GPU_CAP_PCIE))
        out->v[KACE_GPU_PCIE_TX_MBPS] = out->v[KACE_GPU_PCIE_RX_MBPS] = NAN;
    return KACE_OK;
}

kace_status kace_gpu_mps_processes(kace_ctx *ctx, kace_gpu *g, kace_gpu_process *out, size_t max, size_t *n_out)
{
    *n_out = 0;
    if (!kace_gpu_has(g, KACE_GPU_CAP_MPS_LIST))
        return kace_fail(ctx, KACE_ERR_UNSUPPORTED, "GPU backend %s offers no MPS client list",
                         g ? g->ops->name : "(none)");
    return g->ops->mps_processes(ctx, g->impl, out, max, n_out);
}

/* ---- samples and their means ------------------------------------------------ */

const char *kace_gpu_field_name(kace_gpu_field f)
{
    static const char *const names[KACE_GPU_N_FIELDS] = {"sm%", "mem%", "memused_MiB", "power_W",
                                                          "sm_clock_MHz", "pcie_tx_MBps", "pcie_rx_MBps"};
    return (unsigned)f < KACE_GPU_N_FIELDS ? names[f] : "?";
}

int kace_gpu_sample_drop_device_wide(kace_gpu_sample *x)
{
    static const kace_gpu_field own[] = {KACE_GPU_SM_PCT, KACE_GPU_MEM_PCT, KACE_GPU_MEM_USED_MIB};
    int dropped = 0;
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++)
        if (!x->per_process[own[i]] && !isnan(x->v[own[i]])) {
            x->v[own[i]] = NAN;
            dropped++;
        }
    return dropped;
}

void kace_gpu_stats_init(kace_gpu_stats *s)
{
    memset(s, 0, sizeof *s);
    s->peak_mem_mib = NAN;
}

void kace_gpu_stats_add(kace_gpu_stats *s, const kace_gpu_sample *x)
{
    s->samples++;
    if (x->mps_client)
        s->mps_client_samples++;
    for (int f = 0; f < KACE_GPU_N_FIELDS; f++) {
        if (isnan(x->v[f]))
            continue;
        s->sum[f] += x->v[f];
        s->count[f]++;
        if (x->per_process[f])
            s->per_process[f]++;
    }
    double mem = x->v[KACE_GPU_MEM_USED_MIB];
    if (!isnan(mem) && (isnan(s->peak_mem_mib) || mem > s->peak_mem_mib))
        s->peak_mem_mib = mem;
}

double kace_gpu_stats_mean(const kace_gpu_stats *s, kace_gpu_field f)
{
    return s->count[f] ? s->sum[f] / (double)s->count[f] : NAN;
}
