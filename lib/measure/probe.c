/* The first minute's probe (include/kace/pool.h): the MPS server's client
 * limit, host memory per pool member and one clean step-time curve, and
 * from them the pool's size and the measuring window. */
#include <ctype.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kace/host.h"
#include "kace/pool.h"
#include "probe_internal.h"

/* ---- the pure rules ---------------------------------------------------------- */

size_t kace_probe_pool_size(size_t clients, unsigned long long mem_available_kib, unsigned long long member_kib,
                            double memory_fraction, size_t max_members, const char **bound)
{
    size_t n = max_members > 0 && max_members < KACE_POOL_MAX_MEMBERS ? max_members : KACE_POOL_MAX_MEMBERS;
    const char *why = "caller";
    if (clients < n) {
        n = clients;
        why = "clients";
    }
    if (mem_available_kib > 0 && member_kib > 0 && memory_fraction > 0) {
        double fit = floor(memory_fraction * (double)mem_available_kib / (double)member_kib);
        if (fit < (double)n) {
            n = (size_t)fit;
            why = "memory";
        }
    }
    if (bound)
        *bound = why;
    return n;
}

double kace_probe_window_rule(const double *len_s, const double *cv, size_t n, double target, double min_s,
                              double max_s, double *error, const char **basis)
{
    /* The shortest measured length from which on every measured cv holds the target. */
    size_t last = n, pick = n;
    for (size_t i = n; i-- > 0;) {
        if (!isfinite(cv[i]))
            continue;
        if (last == n)
            last = i;
        if (cv[i] > target)
            break;
        pick = i;
    }
    double w, err;
    const char *why;
    if (last == n) {
        if (error)
            *error = NAN;
        if (basis)
            *basis = "unmeasured";
        return NAN;
    }
    if (pick < n) {
        w = len_s[pick];
        err = cv[pick];
        why = "measured";
    } else { /* white noise: cv ~ 1 / sqrt(len) */
        double ratio = cv[last] / target;
        w = len_s[last] * ratio * ratio;
        err = target;
        why = "extrapolated";
    }
    if (w < min_s) {
        w = min_s;
        why = "min";
    } else if (w > max_s) {
        /* The error at max_s, by the same law from the longest measured. */
        err = cv[last] * sqrt(len_s[last] / max_s);
        if (err < target)
            err = target;
        w = max_s;
        why = "max";
    }
    if (error)
        *error = err;
    if (basis)
        *basis = why;
    return w;
}

double kace_probe_window_cv(const kace_progress_record *r, size_t n, double window_s)
{
    if (n < 2 || !(window_s > 0))
        return NAN;
    int64_t w = (int64_t)(window_s * 1e9);
    if (r[n - 1].t_ns - r[0].t_ns < 2 * w)
        return NAN;
    double sum = 0, sum2 = 0;
    size_t k = 0, j = 0;
    for (size_t i = 0; i < n; i++) {
        if (j < i)
            j = i;
        while (j < n && r[j].t_ns - r[i].t_ns < w)
            j++;
        if (j >= n)
            break;
        double tp = (r[j].samples - r[i].samples) / ((double)(r[j].t_ns - r[i].t_ns) / 1e9);
        sum += tp;
        sum2 += tp * tp;
        k++;
    }
    if (k < 3)
        return NAN;
    double mean = sum / (double)k;
    double var = sum2 / (double)k - mean * mean;
    if (!(mean > 0))
        return NAN;
    return var > 0 ? sqrt(var) / mean : 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double kace_probe_median_gap_s(const kace_progress_record *r, size_t n)
{
    if (n < 2)
        return NAN;
    double *gap = malloc((n - 1) * sizeof *gap);
    if (!gap)
        return NAN;
    for (size_t i = 1; i < n; i++)
        gap[i - 1] = (double)(r[i].t_ns - r[i - 1].t_ns) / 1e9;
    qsort(gap, n - 1, sizeof *gap, cmp_double);
    double m = (n - 1) % 2 ? gap[(n - 1) / 2] : (gap[(n - 1) / 2 - 1] + gap[(n - 1) / 2]) / 2;
    free(gap);
    return m;
}

bool kace_probe_kib_field(const char *text, const char *key, unsigned long long *kib)
{
    size_t len = strlen(key);
    for (const char *line = text; line && *line; line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
        if (strncmp(line, key, len) != 0 || line[len] != ':')
            continue;
        const char *p = line + len + 1;
        while (*p == ' ' || *p == '\t')
            p++;
        if (!isdigit((unsigned char)*p))
            return false;
        char *end;
        unsigned long long v = strtoull(p, &end, 10);
        while (*end == ' ' || *end == '\t')
            end++;
        if (strncmp(end, "kB", 2) != 0 || (end[2] != '\n' && end[2] != '\0'))
            return false;
        *kib = v;
        return true;
    }
    return false;
}

/* ---- reading /proc ------------------------------------------------------------ */

static bool read_text(const char *path, char *buf, size_t size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    size_t at = 0;
    ssize_t got;
    while (at + 1 < size && (got = read(fd, buf + at, size - 1 - at)) > 0)
        at += (size_t)got;
    close(fd);
    buf[at] = '\0';
    return at > 0;
}

unsigned long long kace_probe_mem_available_kib(void)
{
    char buf[8192];
    unsigned long long kib = 0;
    if (!read_text("/proc/meminfo", buf, sizeof buf) || !kace_probe_kib_field(buf, "MemAvailable", &kib))
        return 0;
    return kib;
}

/* A group's resident memory (kace_host_read: its processes' Pss where
 * smaps_rollup can be read, else their resident sets); 0 when unknown. */
static unsigned long long group_rss_kib(int pgid)
{
    kace_ctx *scratch = kace_ctx_new();
    kace_host_usage u;
    unsigned long long kib = 0;
    if (scratch && kace_host_read(scratch, NULL, &pgid, 1, &u) == KACE_OK && u.rss_bytes > 0)
        kib = (unsigned long long)(u.rss_bytes / 1024);
    kace_ctx_free(&scratch);
    return kib;
}

/* The memory cgroup's limit kace's processes inherit (0: none). */
static unsigned long long cgroup_limit_kib(void)
{
    kace_ctx *scratch = kace_ctx_new();
    double bytes = INFINITY;
    if (!scratch || kace_host_memory_limit(scratch, NULL, NULL, &bytes) != KACE_OK)
        bytes = INFINITY;
    kace_ctx_free(&scratch);
    return isfinite(bytes) && bytes > 0 ? (unsigned long long)(bytes / 1024) : 0;
}

/* ---- the probe ------------------------------------------------------------------- */

static int64_t after_s(double s)
{
    return kace_monotonic_ns() + (int64_t)(s * 1e9);
}

static double since_s(int64_t t0)
{
    return (double)(kace_monotonic_ns() - t0) / 1e9;
}

static void add_detail(kace_probe_result *r, const char *what)
{
    size_t len = strlen(r->detail);
    snprintf(r->detail + len, sizeof r->detail - len, "%s%s", len ? "; " : "", what);
}

/* A spec's copy as an MPS client of m at 100%: its own extra entries, then
 * the daemon's pipe and log folders, the share, and CUDA_VISIBLE_DEVICES
 * removed (as kace_measure's members: MPS renumbers the devices from 0). */
typedef struct client_spec {
    kace_proc_spec spec;
    const char **env;
} client_spec;

static kace_status client_spec_make(kace_ctx *ctx, const kace_proc_spec *base, kace_mps *m, client_spec *out)
{
    size_t n = 0;
    while (base->extra_env && base->extra_env[n])
        n++;
    out->env = calloc(n + 5, sizeof *out->env);
    if (!out->env)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory building a probe client's environment");
    const char *const *client = kace_mps_client_env(m);
    size_t k = 0;
    out->env[k++] = client[0];
    out->env[k++] = client[1];
    out->env[k++] = KACE_MPS_PCT_ENV "=100";
    out->env[k++] = "CUDA_VISIBLE_DEVICES";
    for (size_t i = 0; i < n; i++)
        out->env[k++] = base->extra_env[i]; /* the spec's own word wins */
    out->spec = *base;
    out->spec.extra_env = out->env;
    return KACE_OK;
}

/* The server's clients with the accepted ones running (SIZE_MAX: unknown). */
static size_t listed_clients(kace_mps *m)
{
    kace_ctx *scratch = kace_ctx_new();
    int servers[8], clients[1024];
    size_t ns = 0, nc = 0, listed = SIZE_MAX;
    if (scratch && kace_mps_server_pids(scratch, m, servers, 8, &ns) == KACE_OK) {
        listed = 0;
        for (size_t i = 0; i < ns; i++)
            if (kace_mps_client_pids(scratch, m, servers[i], clients, 1024, &nc) == KACE_OK)
                listed += nc;
    }
    kace_ctx_free(&scratch);
    return listed;
}

static kace_status probe_clients(kace_ctx *ctx, const kace_probe_options *opt, int64_t deadline,
                                 kace_probe_result *r)
{
    /* No need to count past what the pool may hold. */
    size_t cap = opt->client_cap > 0 ? opt->client_cap : opt->max_members > 0 ? opt->max_members : KACE_POOL_MAX_MEMBERS;
    size_t batch = opt->client_batch > 0 ? opt->client_batch : 16;
    double start_s = opt->client_start_s > 0 ? opt->client_start_s : 30;
    if (batch > KACE_POOL_MAX_MEMBERS)
        batch = KACE_POOL_MAX_MEMBERS;
    int64_t t0 = kace_monotonic_ns();
    client_spec cs;
    kace_status st = client_spec_make(ctx, opt->client, opt->mps, &cs);
    if (st)
        return st;
    size_t n_pools = (cap + batch - 1) / batch;
    kace_pool **pools = calloc(n_pools, sizeof *pools);
    kace_proc_spec *specs = calloc(batch, sizeof *specs);
    kace_pool_result *started = calloc(batch, sizeof *started);
    if (!pools || !specs || !started) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory probing the MPS clients");
        goto done;
    }
    for (size_t i = 0; i < batch; i++)
        specs[i] = cs.spec;
    kace_run_options ro = opt->run;
    ro.cpu_shares = 0; /* trivial clients: nothing to bound */
    r->clients_probed = true;
    bool stop = false;
    for (size_t p = 0; p < n_pools && !stop; p++) {
        size_t b = cap - r->clients_accepted < batch ? cap - r->clients_accepted : batch;
        double left = (double)(deadline - kace_monotonic_ns()) / 1e9;
        if (b == 0 || left <= 0)
            break;
        if (left > start_s)
            left = start_s; /* a server that queues clients must not take the whole probe */
        if ((st = kace_pool_start(ctx, specs, b, &ro, left, &pools[p], started)))
            goto done;
        for (size_t i = 0; i < b; i++) {
            if (started[i].status == KACE_PROC_OK) {
                r->clients_accepted++;
                continue;
            }
            stop = true;
            if (started[i].status == KACE_PROC_TIMEOUT || started[i].status == KACE_PROC_CANCELLED) {
                if (!r->detail[0])
                    add_detail(r, started[i].status == KACE_PROC_TIMEOUT ?
                               "a probe client did not start in time: the client limit is at least the "
                               "clients accepted" : "a probe client was cancelled");
                continue;
            }
            r->client_refused = true;
            if (!r->refusal[0]) {
                const kace_proc_result *pr = kace_pool_member(pools[p], i);
                const char *tail = pr->stderr_tail;
                size_t len = strlen(tail);
                while (len > 0 && tail[len - 1] == '\n')
                    len--;
                const char *line = tail + len;
                while (line > tail && line[-1] != '\n')
                    line--;
                snprintf(r->refusal, sizeof r->refusal, "%.300s%s%.*s", started[i].detail, len ? ": " : "",
                         (int)(tail + len - line), line);
            }
        }
        if (opt->run.cancel && *opt->run.cancel)
            stop = true;
    }
    r->clients_listed = listed_clients(opt->mps);
done:
    for (size_t p = 0; pools && p < n_pools; p++)
        if (pools[p])
            kace_pool_stop(pools[p], 0);
    for (size_t p = 0; pools && p < n_pools; p++)
        kace_pool_free(&pools[p]);
    free(pools);
    free(specs);
    free(started);
    free(cs.env);
    r->clients_s = since_s(t0);
    return st;
}

/* The workload alone: its first record, then skip_s + curve_s of records,
 * its group's memory read as they come (at most every 0.25 s). */
static kace_status probe_workload(kace_ctx *ctx, const kace_probe_options *opt, int64_t deadline,
                                  kace_probe_result *r)
{
    double skip_s = opt->skip_s > 0 ? opt->skip_s : 1, curve_s = opt->curve_s > 0 ? opt->curve_s : 6;
    client_spec cs;
    kace_status st = client_spec_make(ctx, opt->workload, opt->mps, &cs);
    if (st)
        return st;
    kace_proc_spec spec = cs.spec;
    int cpus[1024];
    if (opt->run.cpu_shares > 0 && !(spec.cpus && spec.n_cpus > 0)) { /* as pool member 0 would run */
        int avail[1024];
        size_t n = kace_cpus_available(avail, 1024);
        spec.cpus = cpus;
        spec.n_cpus = kace_cpu_share(avail, n, opt->run.cpu_shares, 0, cpus, 1024);
    }
    kace_live *l = NULL;
    if ((st = kace_live_start(ctx, &spec, &opt->run, &l))) {
        free(cs.env);
        return st;
    }
    const kace_proc_result *pr = kace_live_result(l);
    int64_t next_rss = 0, end = 0;
    const kace_progress_record *rec = NULL;
    size_t nr = 0;
    for (;;) {
        kace_live_wait(&l, 1, deadline);
        rec = kace_live_records(l, &nr);
        int64_t now = kace_monotonic_ns();
        if (nr > 0 && r->workload_start_s == 0)
            r->workload_start_s = (double)(rec[0].t_ns - pr->start_ns) / 1e9;
        if (nr > 1 && end == 0) /* from its first step's end: however long that step took */
            end = rec[1].t_ns + (int64_t)((skip_s + curve_s) * 1e9);
        if (nr > 0 && now >= next_rss && !kace_live_ended(l)) {
            unsigned long long kib = group_rss_kib(pr->pid);
            if (kib > r->member_rss_kib)
                r->member_rss_kib = kib;
            next_rss = now + 250000000LL;
        }
        if (kace_live_ended(l) || (end > 0 && nr > 0 && rec[nr - 1].t_ns >= end) || now >= deadline ||
            (opt->run.cancel && *opt->run.cancel))
            break;
    }
    bool ended = kace_live_ended(l);
    r->curve_ok = !ended && end > 0 && nr > 0 && rec[nr - 1].t_ns >= end;
    if (!r->curve_ok) {
        char what[700];
        if (ended)
            snprintf(what, sizeof what, "the probe's workload ended before its curve was complete: %.500s",
                     pr->detail);
        else
            snprintf(what, sizeof what, "the probe's workload wrote %zu progress records before the probe's "
                     "deadline: its curve was not complete", nr);
        add_detail(r, what);
    }
    /* The curve: the records from skip_s after the first step's end, copied
     * before the stop reads more (one record alone is no curve). */
    size_t from = nr > 1 ? 1 : nr;
    while (nr > 1 && from < nr && rec[from].t_ns < rec[1].t_ns + (int64_t)(skip_s * 1e9))
        from++;
    size_t n = nr - from;
    kace_progress_record *curve = n ? malloc(n * sizeof *curve) : NULL;
    if (n && !curve) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory keeping the probe's curve");
        n = 0;
    }
    if (curve)
        memcpy(curve, rec + from, n * sizeof *curve);
    kace_live_stop(&l, 1, after_s(opt->run.term_grace_max_s > 0 ? opt->run.term_grace_max_s : 30));
    kace_live_free(&l);
    free(cs.env);

    r->curve_records = n;
    r->curve_span_s = n >= 2 ? (double)(curve[n - 1].t_ns - curve[0].t_ns) / 1e9 : 0;
    r->step_s = kace_probe_median_gap_s(curve, n);
    double max_s = opt->window_max_s > 0 ? opt->window_max_s : 30;
    r->n_windows = 0;
    for (double w = 0.05; r->n_windows < KACE_PROBE_WINDOWS && w <= max_s * 1.0001; w *= 1.4142135623730951) /* two lengths an octave */ {
        double cv = kace_probe_window_cv(curve, n, w);
        if (!isfinite(cv) && r->n_windows > 0)
            break; /* longer ones have even fewer data */
        r->window_len_s[r->n_windows] = w;
        r->window_cv[r->n_windows++] = cv;
    }
    free(curve);
    return st;
}

kace_status kace_pool_probe(kace_ctx *ctx, const kace_probe_options *opt, kace_probe_result *r)
{
    memset(r, 0, sizeof *r);
    r->clients_listed = SIZE_MAX;
    r->window_s = r->window_error = r->step_s = NAN;
    r->window_basis = "unmeasured";
    if (!opt->mps || !kace_mps_alive(opt->mps)) /* else its clients would run without MPS, all "accepted" */
        return kace_fail(ctx, KACE_ERR_INVALID, "the probe's clients join an MPS daemon: start it first");
    double target = opt->target_error > 0 ? opt->target_error : 0.02;
    double min_s = opt->window_min_s > 0 ? opt->window_min_s : 1, max_s = opt->window_max_s > 0 ? opt->window_max_s : 30;
    if (!(min_s <= max_s) || !(target < 1) || !(opt->timeout_s >= 0) || !(opt->curve_s >= 0) || !(opt->skip_s >= 0))
        return kace_fail(ctx, KACE_ERR_INVALID, "probe options: window %g..%g s, target %g, timeout %g s, curve %g s "
                         "after %g s (expected min <= max, target < 1, none negative)", min_s, max_s, target,
                         opt->timeout_s, opt->curve_s, opt->skip_s);
    int64_t t0 = kace_monotonic_ns();
    int64_t deadline = after_s(opt->timeout_s > 0 ? opt->timeout_s : 90);
    int cpus[1024];
    r->cpus = kace_cpus_available(cpus, 1024);
    r->mem_available_kib = kace_probe_mem_available_kib(); /* before anything of the probe runs */
    r->mem_limit_kib = cgroup_limit_kib();
    kace_status st = KACE_OK;
    if (opt->client && (st = probe_clients(ctx, opt, deadline, r)))
        return st;
    if (opt->workload && !(opt->run.cancel && *opt->run.cancel) && (st = probe_workload(ctx, opt, deadline, r)))
        return st;
    r->window_s = kace_probe_window_rule(r->window_len_s, r->window_cv, r->n_windows, target, min_s, max_s,
                                         &r->window_error, &r->window_basis);
    double fraction = opt->memory_fraction > 0 ? opt->memory_fraction : 0.8;
    unsigned long long mem = r->mem_available_kib;
    if (r->mem_limit_kib > 0 && (mem == 0 || r->mem_limit_kib < mem))
        mem = r->mem_limit_kib; /* a job's limit below the host's free memory */
    /* A limit the probe met is the server's: the pool stays client_margin
     * below it, room for clients that are not the pool's. */
    size_t clients = r->clients_probed ? r->clients_accepted : SIZE_MAX;
    if (r->clients_probed && r->client_refused)
        clients = clients > opt->client_margin ? clients - opt->client_margin : 0;
    r->pool_members = kace_probe_pool_size(clients, mem,
                                           r->member_rss_kib, fraction, opt->max_members, &r->pool_bound);
    r->seconds = since_s(t0);
    return KACE_OK;
}

static const kace_catalog_entry *first_of(const kace_catalog *cat, kace_catalog_kind kind)
{
    for (size_t i = 0; i < cat->n; i++)
        if (cat->entries[i].kind == kind)
            return &cat->entries[i];
    return NULL;
}

kace_status kace_pool_probe_catalog(kace_ctx *ctx, const kace_catalog *cat, const kace_probe_options *opt,
                                    kace_probe_result *result)
{
    const kace_catalog_entry *client = first_of(cat, KACE_CATALOG_CUDA), *curve = first_of(cat, KACE_CATALOG_TORCH);
    if (!curve)
        curve = first_of(cat, KACE_CATALOG_LLM);
    if (!curve && cat->n > 0)
        curve = &cat->entries[0];
    kace_proc_spec client_proc = {0}, curve_proc = {0};
    if (client)
        client_proc = (kace_proc_spec){.name = client->name, .argv = client->argv};
    if (curve)
        curve_proc = (kace_proc_spec){.name = curve->name, .argv = curve->argv};
    kace_probe_options o = *opt;
    o.client = client ? &client_proc : NULL;
    o.workload = curve ? &curve_proc : NULL;
    return kace_pool_probe(ctx, &o, result);
}

const char *kace_probe_describe(const kace_probe_result *r, char *buf, size_t n)
{
    char clients[160] = "not probed", memory[160] = "not measured", curve[200] = "none", listed[48] = "";
    if (r->clients_probed) {
        if (r->clients_listed != SIZE_MAX)
            snprintf(listed, sizeof listed, ", %zu listed", r->clients_listed);
        snprintf(clients, sizeof clients, "%zu accepted%s (%s) in %.1f s", r->clients_accepted, listed,
                 r->client_refused ? "the next refused: the limit" : "none refused: the limit is at least that",
                 r->clients_s);
    }
    char limit[64] = "";
    if (r->mem_limit_kib > 0)
        snprintf(limit, sizeof limit, " (cgroup limit %.1f GiB)", (double)r->mem_limit_kib / (1024 * 1024));
    if (r->member_rss_kib > 0)
        snprintf(memory, sizeof memory, "%.0f MiB a member, %.1f GiB available%s", (double)r->member_rss_kib / 1024,
                 (double)r->mem_available_kib / (1024 * 1024), limit);
    else if (r->mem_available_kib > 0)
        snprintf(memory, sizeof memory, "a member not measured, %.1f GiB available%s",
                 (double)r->mem_available_kib / (1024 * 1024), limit);
    if (r->curve_records > 0)
        snprintf(curve, sizeof curve, "%zu records over %.1f s, a step %.3f s, first record %.1f s after start%s",
                 r->curve_records, r->curve_span_s, r->step_s, r->workload_start_s,
                 r->curve_ok ? "" : " (incomplete)");
    char window[96] = "none";
    if (isfinite(r->window_s))
        snprintf(window, sizeof window, "%.2f s (%s, error %.1f%%)", r->window_s, r->window_basis,
                 100 * r->window_error);
    char cpus[64];
    if (r->pool_members > 0 && r->cpus >= r->pool_members)
        snprintf(cpus, sizeof cpus, "%zu CPUs, %zu a member", r->cpus, r->cpus / r->pool_members);
    else
        snprintf(cpus, sizeof cpus, "%zu CPUs%s", r->cpus, r->pool_members > 0 ? ", shared" : "");
    snprintf(buf, n, "probe: MPS clients %s; host memory %s; curve %s; window %s; pool %zu members (bound by %s) "
             "on %s; %.1f s%s%s", clients, memory, curve, window, r->pool_members, r->pool_bound ? r->pool_bound : "-",
             cpus, r->seconds, r->detail[0] ? "; " : "", r->detail);
    return buf;
}
