/* Metrics of `kace serve` in the Prometheus text format (version 0.0.4).
 *
 * Request counters and latency histograms are C11 atomics, so answering
 * threads never wait on each other; observations and model times, which
 * change rarely, sit behind a mutex. */
#include <math.h>
#include <stddef.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kace/gpu.h"
#include "kace/serve.h"

static const int status_codes[] = {200, 400, 401, 403, 404, 405, 413, 415, 422, 500, 503};
#define N_CODES (sizeof status_codes / sizeof *status_codes)
#define CODE_OTHER N_CODES /* every other status */

static const double buckets[] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                                 0.025,  0.05,    0.1,    0.25,  0.5,    1,     2.5};
#define N_BUCKETS (sizeof buckets / sizeof *buckets)

/* Decision policies: a fixed set keeps the number of series bounded. */
static const char *const policies[] = {"kace", "KACE", "Xu", "mps-profile", "confidence-fallback", "none"};
#define N_POLICIES (sizeof policies / sizeof *policies)
#define POLICY_OTHER N_POLICIES

#define MAX_OBSERVED 256

/* Reasons a model load is refused: a fixed set keeps the series bounded. */
static const char *const refusals[] = {"load_error", "cannot_answer"};
#define N_REFUSALS (sizeof refusals / sizeof *refusals)

static const char *const drop_names[KACE_N_DROPS] = {
    [KACE_DROP_HEADER_TIMEOUT] = "header_timeout",
    [KACE_DROP_BODY_TIMEOUT] = "body_timeout",
    [KACE_DROP_BODY_MEMORY] = "body_memory",
    [KACE_DROP_OBSERVATION_RATE] = "observation_rate",
    [KACE_DROP_PER_CLIENT] = "per_client_limit",
    [KACE_DROP_CONNECTIONS] = "connection_limit",
};

typedef struct observed {
    kace_observation obs;
    unsigned long long seq; /* when it was last reported (higher is newer) */
} observed;

struct kace_serve_metrics {
    atomic_ullong requests[KACE_N_ROUTES][N_CODES + 1];
    atomic_ullong bucket[KACE_N_ROUTES][N_BUCKETS]; /* non-cumulative; summed when rendered */
    atomic_ullong count[KACE_N_ROUTES];
    atomic_ullong sum_ns[KACE_N_ROUTES];
    atomic_ullong decisions[KACE_N_ROUTES][N_POLICIES + 1];
    atomic_ullong drops[KACE_N_DROPS];
    atomic_ullong pending_body_bytes, connections;

    pthread_mutex_t lock; /* the fields below */
    observed obs[MAX_OBSERVED];
    size_t n_obs;
    unsigned long long obs_seq;
    unsigned long long reloads_ok, reloads_failed;
    double loaded_at, model_mtime;
    double cv_error; /* % (drift's reference), NaN when unknown */
    /* refused loads by reason, and the latest refusal (cleared by a load) */
    unsigned long long refused[N_REFUSALS + 1];
    char refusal_reason[32], refusal_message[512];
    char hostname[64]; /* GPU series' Hostname label */
};

kace_status kace_serve_metrics_new(kace_ctx *ctx, kace_serve_metrics **out)
{
    kace_serve_metrics *m = calloc(1, sizeof *m);
    if (!m)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    /* calloc's zero bytes are valid zero atomics on every platform kace runs on */
    if (pthread_mutex_init(&m->lock, NULL) != 0) {
        free(m);
        return kace_fail(ctx, KACE_ERR_NOMEM, "cannot create a mutex");
    }
    m->loaded_at = m->model_mtime = m->cv_error = NAN;
    *out = m;
    return KACE_OK;
}

void kace_serve_metrics_free(kace_serve_metrics **m)
{
    if (m && *m) {
        pthread_mutex_destroy(&(*m)->lock);
        free(*m);
        *m = NULL;
    }
}

static int route_index(kace_route route)
{
    return route >= 0 && route < KACE_N_ROUTES ? (int)route : KACE_ROUTE_OTHER;
}

void kace_serve_metrics_request(kace_serve_metrics *m, kace_route route, int http_status, double seconds)
{
    int r = route_index(route);
    size_t code = CODE_OTHER;
    for (size_t i = 0; i < N_CODES; i++)
        if (status_codes[i] == http_status)
            code = i;
    atomic_fetch_add_explicit(&m->requests[r][code], 1, memory_order_relaxed);
    if (!(seconds >= 0))
        seconds = 0;
    for (size_t b = 0; b < N_BUCKETS; b++)
        if (seconds <= buckets[b]) {
            atomic_fetch_add_explicit(&m->bucket[r][b], 1, memory_order_relaxed);
            break;
        }
    atomic_fetch_add_explicit(&m->count[r], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&m->sum_ns[r], (unsigned long long)(fmin(seconds, 1e6) * 1e9), memory_order_relaxed);
}

void kace_serve_metrics_decision(kace_serve_metrics *m, kace_route route, const char *policy)
{
    if (!policy)
        return;
    size_t p = POLICY_OTHER;
    for (size_t i = 0; i < N_POLICIES; i++)
        if (strcmp(policies[i], policy) == 0)
            p = i;
    atomic_fetch_add_explicit(&m->decisions[route_index(route)][p], 1, memory_order_relaxed);
}

void kace_serve_metrics_observe(kace_serve_metrics *m, const kace_observation *o)
{
    pthread_mutex_lock(&m->lock);
    size_t at = m->n_obs;
    for (size_t i = 0; i < m->n_obs; i++)
        if (strcmp(m->obs[i].obs.gpu, o->gpu) == 0 && strcmp(m->obs[i].obs.label, o->label) == 0)
            at = i;
    if (at == m->n_obs && m->n_obs == MAX_OBSERVED) { /* full: replace the oldest */
        at = 0;
        for (size_t i = 1; i < m->n_obs; i++)
            if (m->obs[i].seq < m->obs[at].seq)
                at = i;
    } else if (at == m->n_obs) {
        m->n_obs++;
    }
    m->obs[at].obs = *o;
    m->obs[at].seq = ++m->obs_seq;
    pthread_mutex_unlock(&m->lock);
}

void kace_serve_metrics_model_cv_error(kace_serve_metrics *m, double cv_error_pct)
{
    pthread_mutex_lock(&m->lock);
    m->cv_error = cv_error_pct;
    pthread_mutex_unlock(&m->lock);
}

void kace_serve_metrics_set_hostname(kace_serve_metrics *m, const char *hostname)
{
    pthread_mutex_lock(&m->lock);
    snprintf(m->hostname, sizeof m->hostname, "%s", hostname ? hostname : "");
    pthread_mutex_unlock(&m->lock);
}

void kace_serve_metrics_model_loaded(kace_serve_metrics *m, bool ok, double when, double model_mtime)
{
    pthread_mutex_lock(&m->lock);
    if (ok) {
        m->reloads_ok++;
        m->loaded_at = when;
        m->model_mtime = model_mtime;
        m->refusal_reason[0] = m->refusal_message[0] = '\0';
    } else {
        m->reloads_failed++;
    }
    pthread_mutex_unlock(&m->lock);
}

void kace_serve_metrics_model_refused(kace_serve_metrics *m, const char *reason, const char *message)
{
    size_t r = N_REFUSALS; /* "other" */
    for (size_t i = 0; i < N_REFUSALS; i++)
        if (reason && strcmp(refusals[i], reason) == 0)
            r = i;
    pthread_mutex_lock(&m->lock);
    m->reloads_failed++;
    m->refused[r]++;
    snprintf(m->refusal_reason, sizeof m->refusal_reason, "%s", r < N_REFUSALS ? refusals[r] : "other");
    snprintf(m->refusal_message, sizeof m->refusal_message, "%s", message ? message : "");
    pthread_mutex_unlock(&m->lock);
}

void kace_serve_metrics_drop(kace_serve_metrics *m, kace_serve_drop why)
{
    if (why >= 0 && why < KACE_N_DROPS)
        atomic_fetch_add_explicit(&m->drops[why], 1, memory_order_relaxed);
}

void kace_serve_metrics_pending(kace_serve_metrics *m, size_t body_bytes, size_t connections)
{
    atomic_store_explicit(&m->pending_body_bytes, body_bytes, memory_order_relaxed);
    atomic_store_explicit(&m->connections, connections, memory_order_relaxed);
}

/* A label value with \, " and newline escaped, as the text format wants. */
static void put_label(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '\\' || *s == '"')
            fprintf(f, "\\%c", *s);
        else if (*s == '\n')
            fputs("\\n", f);
        else
            fputc(*s, f);
    }
    fputc('"', f);
}

/* "{UUID=...,colocation=..." (no closing brace): DCGM exporter's names for
 * what the reporter told (UUID is its "gpu"), left out when not sent. */
static void put_colocation_labels(FILE *f, const kace_observation *o)
{
    fputs("{UUID=", f);
    put_label(f, o->gpu);
    const struct {
        const char *name, *value;
    } extra[] = {{"Hostname", o->hostname}, {"pod", o->pod}, {"namespace", o->pod_namespace}};
    for (size_t i = 0; i < sizeof extra / sizeof *extra; i++)
        if (extra[i].value[0]) {
            fprintf(f, ",%s=", extra[i].name);
            put_label(f, extra[i].value);
        }
    fputs(",colocation=", f);
    put_label(f, o->label);
}

static void put_value(FILE *f, double v)
{
    if (isnan(v))
        fputs(" NaN\n", f);
    else
        fprintf(f, " %.17g\n", v);
}

kace_status kace_serve_metrics_render(kace_ctx *ctx, kace_serve_metrics *m, const kace_serve_gpu_sample *gpus,
                                      size_t n_gpus, double now, char **text)
{
    *text = NULL;
    size_t size = 0;
    FILE *f = open_memstream(text, &size);
    if (!f)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");

    fputs("# HELP kace_build_info The kace that serves (always 1; join on its labels).\n"
          "# TYPE kace_build_info gauge\nkace_build_info{version=\"" KACE_VERSION "\"} 1\n",
          f);
    fputs("# HELP kace_http_requests_total Requests answered, by endpoint and HTTP status.\n"
          "# TYPE kace_http_requests_total counter\n",
          f);
    for (int r = 0; r < KACE_N_ROUTES; r++)
        for (size_t c = 0; c <= N_CODES; c++) {
            unsigned long long n = atomic_load_explicit(&m->requests[r][c], memory_order_relaxed);
            if (!n && c != 0) /* the 200 series always exists, so a dashboard sees every endpoint */
                continue;
            char code[16] = "other";
            if (c != CODE_OTHER)
                snprintf(code, sizeof code, "%d", status_codes[c]);
            fprintf(f, "kace_http_requests_total{endpoint=\"%s\",code=\"%s\"} %llu\n", kace_route_name(r), code, n);
        }

    fputs("# HELP kace_http_request_duration_seconds Time to answer a request, by endpoint.\n"
          "# TYPE kace_http_request_duration_seconds histogram\n",
          f);
    for (int r = 0; r < KACE_N_ROUTES; r++) {
        unsigned long long cumulative = 0;
        for (size_t b = 0; b < N_BUCKETS; b++) {
            cumulative += atomic_load_explicit(&m->bucket[r][b], memory_order_relaxed);
            fprintf(f, "kace_http_request_duration_seconds_bucket{endpoint=\"%s\",le=\"%g\"} %llu\n",
                    kace_route_name(r), buckets[b], cumulative);
        }
        /* count is read after the buckets, so +Inf is never below a bucket */
        unsigned long long count = atomic_load_explicit(&m->count[r], memory_order_relaxed);
        if (count < cumulative)
            count = cumulative;
        fprintf(f, "kace_http_request_duration_seconds_bucket{endpoint=\"%s\",le=\"+Inf\"} %llu\n",
                kace_route_name(r), count);
        fprintf(f, "kace_http_request_duration_seconds_sum{endpoint=\"%s\"} %.9f\n", kace_route_name(r),
                (double)atomic_load_explicit(&m->sum_ns[r], memory_order_relaxed) * 1e-9);
        fprintf(f, "kace_http_request_duration_seconds_count{endpoint=\"%s\"} %llu\n", kace_route_name(r), count);
    }

    fputs("# HELP kace_decisions_total Placement and ranking decisions, by endpoint and the policy that made them.\n"
          "# TYPE kace_decisions_total counter\n",
          f);
    for (int r = 0; r < KACE_N_ROUTES; r++)
        for (size_t p = 0; p <= N_POLICIES; p++) {
            unsigned long long n = atomic_load_explicit(&m->decisions[r][p], memory_order_relaxed);
            if (n)
                fprintf(f, "kace_decisions_total{endpoint=\"%s\",policy=\"%s\"} %llu\n", kace_route_name(r),
                        p == POLICY_OTHER ? "other" : policies[p], n);
        }

    fputs("# HELP kace_http_dropped_total Connections dropped at a read deadline, and bodies refused (503) at the "
          "memory cap for partly received bodies.\n# TYPE kace_http_dropped_total counter\n",
          f);
    for (int d = 0; d < KACE_N_DROPS; d++)
        fprintf(f, "kace_http_dropped_total{reason=\"%s\"} %llu\n", drop_names[d],
                atomic_load_explicit(&m->drops[d], memory_order_relaxed));
    fprintf(f,
            "# HELP kace_http_pending_body_bytes Bytes reserved for partly received request bodies.\n"
            "# TYPE kace_http_pending_body_bytes gauge\nkace_http_pending_body_bytes %llu\n"
            "# HELP kace_http_connections Connections open.\n"
            "# TYPE kace_http_connections gauge\nkace_http_connections %llu\n",
            atomic_load_explicit(&m->pending_body_bytes, memory_order_relaxed),
            atomic_load_explicit(&m->connections, memory_order_relaxed));

    pthread_mutex_lock(&m->lock);
    fputs("# HELP kace_model_age_seconds Seconds since the served model was written (its file's or store's time).\n"
          "# TYPE kace_model_age_seconds gauge\n",
          f);
    fputs("kace_model_age_seconds", f);
    put_value(f, isnan(m->model_mtime) ? NAN : now - m->model_mtime);
    fputs("# HELP kace_model_loaded_timestamp_seconds When the served model was loaded (unix time).\n"
          "# TYPE kace_model_loaded_timestamp_seconds gauge\nkace_model_loaded_timestamp_seconds",
          f);
    put_value(f, m->loaded_at);
    fprintf(f,
            "# HELP kace_model_loads_total Model loads (startup and reloads), by result.\n"
            "# TYPE kace_model_loads_total counter\n"
            "kace_model_loads_total{result=\"ok\"} %llu\nkace_model_loads_total{result=\"error\"} %llu\n",
            m->reloads_ok, m->reloads_failed);
    fputs("# HELP kace_model_reload_failures_total Model loads refused (the previous model kept serving), by reason.\n"
          "# TYPE kace_model_reload_failures_total counter\n",
          f);
    for (size_t r = 0; r <= N_REFUSALS; r++)
        if (r < N_REFUSALS || m->refused[r])
            fprintf(f, "kace_model_reload_failures_total{reason=\"%s\"} %llu\n", r < N_REFUSALS ? refusals[r] : "other",
                    m->refused[r]);
    if (m->refusal_reason[0]) {
        fputs("# HELP kace_model_reload_error_info The latest refused model load since the last successful one.\n"
              "# TYPE kace_model_reload_error_info gauge\nkace_model_reload_error_info{reason=",
              f);
        put_label(f, m->refusal_reason);
        fputs(",message=", f);
        put_label(f, m->refusal_message);
        fputs("} 1\n", f);
    }
    /* Drift: the latest observation of each colocation, its prediction then. */
    double recent = 0;
    size_t n_recent = 0;
    for (size_t i = 0; i < m->n_obs; i++)
        if (m->obs[i].obs.observed_sum > 0 && isfinite(m->obs[i].obs.predicted_sum)) {
            recent += 100.0 * fabs(m->obs[i].obs.predicted_sum - m->obs[i].obs.observed_sum) / m->obs[i].obs.observed_sum;
            n_recent++;
        }
    recent = n_recent ? recent / (double)n_recent : NAN;
    fputs("# HELP kace_model_cv_error_percent Cross-validated error of the predicted throughput sum (%) of the served "
          "model's kind on its training set.\n# TYPE kace_model_cv_error_percent gauge\nkace_model_cv_error_percent",
          f);
    put_value(f, m->cv_error);
    fputs("# HELP kace_model_recent_error_percent Mean |predicted - observed| / observed of the sum (%) over the latest "
          "observation of each reported colocation.\n# TYPE kace_model_recent_error_percent gauge\n"
          "kace_model_recent_error_percent",
          f);
    put_value(f, recent);
    fputs("# HELP kace_model_drift_ratio Recent error over cross-validated error: well above 1, what is observed no "
          "longer looks like the training data.\n# TYPE kace_model_drift_ratio gauge\nkace_model_drift_ratio",
          f);
    put_value(f, m->cv_error > 0 ? recent / m->cv_error : NAN);

    if (m->n_obs) {
        fputs("# HELP kace_colocation_throughput_samples_per_second Throughput sum of a reported colocation, as "
              "observed and as kace predicts it.\n# TYPE kace_colocation_throughput_samples_per_second gauge\n",
              f);
        for (size_t i = 0; i < m->n_obs; i++)
            for (int kind = 0; kind < 2; kind++) {
                const kace_observation *o = &m->obs[i].obs;
                fputs("kace_colocation_throughput_samples_per_second", f);
                put_colocation_labels(f, o);
                fprintf(f, ",kind=\"%s\"}", kind ? "predicted" : "observed");
                put_value(f, kind ? o->predicted_sum : o->observed_sum);
            }
        fputs("# HELP kace_colocation_prediction_error_ratio (predicted - observed) / observed throughput sum of a "
              "reported colocation: above 0, kace promised more than it gives.\n"
              "# TYPE kace_colocation_prediction_error_ratio gauge\n",
              f);
        for (size_t i = 0; i < m->n_obs; i++) {
            const kace_observation *o = &m->obs[i].obs;
            if (!(o->observed_sum > 0) || !isfinite(o->predicted_sum))
                continue; /* no ratio: left out rather than NaN or Inf */
            fputs("kace_colocation_prediction_error_ratio", f);
            put_colocation_labels(f, o);
            fputc('}', f);
            put_value(f, (o->predicted_sum - o->observed_sum) / o->observed_sum);
        }
    }
    char host[sizeof m->hostname];
    memcpy(host, m->hostname, sizeof host);
    pthread_mutex_unlock(&m->lock);

    if (gpus && n_gpus) {
        static const struct {
            const char *name, *help;
            size_t offset;
        } series[] = {
            {"kace_gpu_utilization_ratio", "Share of time a kernel ran on the GPU (NVML).",
             offsetof(kace_serve_gpu_sample, utilization)},
            {"kace_gpu_memory_utilization_ratio", "Share of time GPU memory was read or written (NVML).",
             offsetof(kace_serve_gpu_sample, memory_utilization)},
        };
        for (size_t k = 0; k < sizeof series / sizeof *series; k++) {
            fprintf(f, "# HELP %s %s\n# TYPE %s gauge\n", series[k].name, series[k].help, series[k].name);
            for (size_t g = 0; g < n_gpus; g++) {
                double v = *(const double *)((const char *)&gpus[g] + series[k].offset);
                if (isnan(v))
                    continue; /* unreadable: left out, not 0 */
                /* DCGM exporter's labels, so that dashboards join on UUID or gpu + Hostname */
                fprintf(f, "%s{gpu=\"%u\",UUID=", series[k].name, gpus[g].index);
                put_label(f, gpus[g].id);
                fputs(",modelName=", f);
                put_label(f, gpus[g].name);
                if (host[0]) {
                    fputs(",Hostname=", f);
                    put_label(f, host);
                }
                fputc('}', f);
                put_value(f, v);
            }
        }
    }
    if (fclose(f) != 0 || !*text) {
        free(*text);
        *text = NULL;
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    }
    return KACE_OK;
}

/* ---- the GPU source: a GPU backend (include/kace/gpu.h), every GPU in turn ---- */

static kace_status gpu_source_open(kace_ctx *ctx, void **state)
{
    kace_gpu *n = NULL;
    kace_status st = kace_gpu_open(ctx, 0, &n);
    *state = n;
    return st;
}

static kace_status gpu_source_sample(kace_ctx *ctx, void *state, kace_serve_gpu_sample *out, size_t max,
                                      size_t *n_out)
{
    kace_gpu *n = state;
    unsigned count = 0;
    *n_out = 0;
    kace_status st = kace_gpu_device_count(ctx, n, &count);
    if (st)
        return st;
    for (unsigned i = 0; i < count && *n_out < max; i++) {
        kace_serve_gpu_sample *s = &out[*n_out];
        memset(s, 0, sizeof *s);
        s->utilization = s->memory_utilization = NAN; /* missing, not 0, when unreadable */
        if (kace_gpu_select(ctx, n, i) != KACE_OK)
            continue;
        if (kace_gpu_device_uuid(n)[0]) /* "" without KACE_GPU_CAP_UUID: the index */
            snprintf(s->id, sizeof s->id, "%s", kace_gpu_device_uuid(n));
        else
            snprintf(s->id, sizeof s->id, "%u", i);
        s->index = i;
        snprintf(s->name, sizeof s->name, "%s", kace_gpu_device_name(n));
        kace_gpu_sample x;
        if (kace_gpu_read(ctx, n, NULL, 0, &x) == KACE_OK) { /* device-wide: no process group given */
            s->utilization = x.v[KACE_GPU_SM_PCT] / 100.0;
            s->memory_utilization = x.v[KACE_GPU_MEM_PCT] / 100.0;
        }
        (*n_out)++;
    }
    return KACE_OK;
}

static void gpu_source_close(void **state)
{
    kace_gpu *n = *state;
    kace_gpu_close(&n);
    *state = NULL;
}

const kace_serve_gpu_source kace_serve_gpu_nvml = {"nvml", gpu_source_open, gpu_source_sample, gpu_source_close};
