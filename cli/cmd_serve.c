/* kace serve: the colocation advisor over HTTP (libmicrohttpd).
 *
 * Requests are answered by the library's pure handlers (kace/serve.h) on a
 * pool of libmicrohttpd threads. The advisor (dataset + model) they use is
 * held by reference count: a reload builds a new advisor, swaps the pointer
 * under a short lock and drops the old one when its last request is done,
 * so no request ever waits for a reload or sees half of one. Signals are
 * blocked in every thread and taken by the main thread with sigtimedwait:
 * SIGHUP reloads, SIGTERM/SIGINT stop taking connections, wait for the
 * requests in progress (up to 10 s) and exit. */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>

#include "cli.h"
#include "kace/serve.h"

#define MAX_GPUS 64

typedef struct held_advisor {
    kace_advisor *advisor;
    atomic_int refs;
} held_advisor;

typedef struct file_stamp {
    bool exists;
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime;
} file_stamp;

typedef struct server {
    /* what to load */
    const char *db, *model_name, *model_file;
    kace_advisor_options options;
    size_t max_body;
    bool quiet;
    /* the advisor in use */
    pthread_mutex_t swap_lock;
    held_advisor *current;
    file_stamp db_stamp, model_stamp;
    /* metrics and GPUs */
    kace_serve_metrics *metrics;
    const kace_serve_gpu_source *gpu_source;
    void *gpu_state;
    pthread_mutex_t gpu_lock;
    atomic_int in_flight;
} server;

typedef struct request {
    kace_route route;
    bool method_ok, too_large, answered;
    char *body;
    size_t len, cap;
    struct timespec t0;
} request;

static double seconds_since(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0->tv_sec) + (double)(t.tv_nsec - t0->tv_nsec) * 1e-9;
}

static double unix_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static file_stamp stamp_of(const char *path)
{
    file_stamp s = {0};
    struct stat st;
    if (path && stat(path, &st) == 0) {
        s.exists = true;
        s.dev = st.st_dev;
        s.ino = st.st_ino;
        s.size = st.st_size;
        s.mtime = st.st_mtim;
    }
    return s;
}

static bool same_stamp(const file_stamp *a, const file_stamp *b)
{
    return a->exists == b->exists && a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
           a->mtime.tv_sec == b->mtime.tv_sec && a->mtime.tv_nsec == b->mtime.tv_nsec;
}

static void say(const server *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(const server *s, const char *fmt, ...)
{
    if (s->quiet)
        return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "kace serve: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* ---- the advisor, reference-counted ------------------------------------- */

static held_advisor *acquire(server *s)
{
    pthread_mutex_lock(&s->swap_lock);
    held_advisor *h = s->current;
    atomic_fetch_add(&h->refs, 1);
    pthread_mutex_unlock(&s->swap_lock);
    return h;
}

static void release(held_advisor *h)
{
    if (h && atomic_fetch_sub(&h->refs, 1) == 1) {
        kace_advisor_free(&h->advisor);
        free(h);
    }
}

/* The MPS split model of /v1/mps-split, fitted once per load on the store's
 * partitions_* campaigns. No campaigns, or too few measured cells with
 * complete profiles, is not an error: the endpoint then uses its profile
 * rule, and note says which it is. */
static kace_status fit_split_model(kace_ctx *ctx, kace_store *store, const kace_dataset *ds, kace_split_model **out,
                                   size_t *n_grids, char *note, size_t note_size)
{
    kace_split_grid *grids = NULL;
    size_t *rows = NULL;
    kace_status st = kace_split_grids_load(ctx, store, ds, &grids, n_grids);
    if (st)
        return st;
    if (*n_grids == 0) {
        snprintf(note, note_size, "mps-split: no partitions_* campaigns in the store, advising by the profile rule");
        return KACE_OK;
    }
    if (!(rows = malloc(*n_grids * sizeof *rows))) {
        free(grids);
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < *n_grids; i++)
        rows[i] = i;
    st = kace_split_fit(ctx, ds, grids, rows, *n_grids, 0, out);
    if (st == KACE_ERR_MODEL) { /* too few usable cells */
        snprintf(note, note_size, "mps-split: advising by the profile rule (%s)", kace_errmsg(ctx));
        *n_grids = 0;
        st = KACE_OK;
    } else if (!st) {
        snprintf(note, note_size, "mps-split: split model fitted on %zu measured grids (ridge alpha %g by cross-validation)",
                 *n_grids, kace_split_model_alpha(*out, NULL));
    }
    free(rows);
    free(grids);
    return st;
}

/* Loads dataset and model; on success swaps them in. Requests in progress
 * keep the advisor they started with. */
static kace_status load(kace_ctx *ctx, server *s)
{
    file_stamp db_stamp = stamp_of(s->db), model_stamp = stamp_of(s->model_file);
    kace_store *store = NULL;
    kace_dataset *ds = NULL;
    kace_model *m = NULL;
    kace_advisor *adv = NULL;
    kace_status st;
    if (!db_stamp.exists)
        return kace_fail(ctx, KACE_ERR_IO, "%s: no such store (kace import first)", s->db);
    kace_split_model *split = NULL;
    size_t n_grids = 0;
    char split_note[256] = "";
    if ((st = kace_store_open(ctx, s->db, &store)) || (st = kace_store_load_dataset(ctx, store, NULL, false, &ds)) ||
        (st = s->model_file ? kace_model_load(ctx, s->model_file, &m)
                            : kace_store_load_model(ctx, store, s->model_name, &m)) ||
        (st = fit_split_model(ctx, store, ds, &split, &n_grids, split_note, sizeof split_note)) ||
        (st = kace_advisor_new(ctx, &ds, &m, &s->options, &adv))) {
        kace_dataset_free(&ds);
        kace_model_free(&m);
        kace_split_model_free(&split);
        kace_store_close(&store);
        return st;
    }
    kace_store_close(&store);
    kace_advisor_set_split_model(adv, &split, n_grids);
    say(s, "%s", split_note);
    held_advisor *h = malloc(sizeof *h);
    if (!h) {
        kace_advisor_free(&adv);
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    }
    h->advisor = adv;
    atomic_init(&h->refs, 1); /* the server's own reference */
    pthread_mutex_lock(&s->swap_lock);
    held_advisor *old = s->current;
    s->current = h;
    pthread_mutex_unlock(&s->swap_lock);
    release(old);
    s->db_stamp = db_stamp;
    s->model_stamp = model_stamp;
    const file_stamp *age = s->model_file ? &model_stamp : &db_stamp;
    kace_serve_metrics_model_loaded(s->metrics, true, unix_now(),
                                    (double)age->mtime.tv_sec + (double)age->mtime.tv_nsec * 1e-9);
    return KACE_OK;
}

static void reload(server *s, const char *why)
{
    kace_ctx *ctx = kace_ctx_new();
    kace_status st = ctx ? load(ctx, s) : KACE_ERR_NOMEM;
    if (st) {
        kace_serve_metrics_model_loaded(s->metrics, false, unix_now(), NAN);
        fprintf(stderr, "kace serve: reload (%s) failed, still serving the previous model: %s\n", why,
                ctx ? kace_errmsg(ctx) : "out of memory");
    } else {
        held_advisor *h = acquire(s);
        say(s, "reloaded (%s): %zu workloads, policy %s", why, kace_advisor_dataset(h->advisor)->n_workloads,
            kace_advisor_policy(h->advisor));
        release(h);
    }
    kace_ctx_free(&ctx);
}

/* ---- HTTP ------------------------------------------------------------------ */

static enum MHD_Result send_reply(struct MHD_Connection *c, server *s, request *r, int status, char *body,
                                  const char *content_type)
{
    r->answered = true;
    if (!body) { /* out of memory: a fixed body */
        static const char oom[] = "{\"error\":{\"status\":500,\"code\":\"internal\",\"message\":\"out of memory\"}}";
        status = 500;
        body = strdup(oom);
        if (!body)
            return MHD_NO;
    }
    struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    if (status == 405)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, r->route == KACE_ROUTE_WORKLOADS ||
                                                                     r->route == KACE_ROUTE_HEALTH ||
                                                                     r->route == KACE_ROUTE_METRICS
                                                                 ? "GET, HEAD"
                                                                 : "POST");
    enum MHD_Result ok = MHD_queue_response(c, (unsigned int)status, resp);
    MHD_destroy_response(resp);
    kace_serve_metrics_request(s->metrics, r->route, status, seconds_since(&r->t0));
    return ok;
}

static enum MHD_Result send_error(struct MHD_Connection *c, server *s, request *r, int status, const char *msg)
{
    return send_reply(c, s, r, status, kace_serve_error_json(status, msg), "application/json");
}

static enum MHD_Result send_metrics(struct MHD_Connection *c, server *s, request *r)
{
    kace_serve_gpu_sample gpus[MAX_GPUS];
    size_t n_gpus = 0;
    kace_ctx *ctx = kace_ctx_new();
    if (!ctx)
        return send_reply(c, s, r, 500, NULL, "application/json");
    if (s->gpu_state) {
        pthread_mutex_lock(&s->gpu_lock);
        if (s->gpu_source->sample(ctx, s->gpu_state, gpus, MAX_GPUS, &n_gpus))
            n_gpus = 0; /* a failed sample leaves the GPU series out this time */
        pthread_mutex_unlock(&s->gpu_lock);
    }
    char *text = NULL;
    kace_status st = kace_serve_metrics_render(ctx, s->metrics, gpus, n_gpus, unix_now(), &text);
    kace_ctx_free(&ctx);
    if (st)
        return send_reply(c, s, r, 500, NULL, "application/json");
    return send_reply(c, s, r, 200, text, "text/plain; version=0.0.4; charset=utf-8");
}

static enum MHD_Result answer(struct MHD_Connection *c, server *s, request *r)
{
    if (r->route == KACE_ROUTE_OTHER)
        return send_error(c, s, r, 404, "no such endpoint (see docs/openapi.yaml)");
    if (!r->method_ok)
        return send_error(c, s, r, 405, "method not allowed for this endpoint");
    if (r->too_large) {
        char msg[96];
        snprintf(msg, sizeof msg, "request body larger than %zu bytes", s->max_body);
        return send_error(c, s, r, 413, msg);
    }
    if (r->route == KACE_ROUTE_METRICS)
        return send_metrics(c, s, r);
    kace_ctx *ctx = kace_ctx_new();
    if (!ctx)
        return send_reply(c, s, r, 500, NULL, "application/json");
    held_advisor *h = acquire(s);
    kace_reply reply;
    kace_advisor_handle(ctx, h->advisor, r->route, r->body, r->len, &reply);
    if (reply.decision)
        kace_serve_metrics_decision(s->metrics, r->route, reply.decision);
    if (reply.has_observation)
        kace_serve_metrics_observe(s->metrics, &reply.observation);
    release(h);
    kace_ctx_free(&ctx);
    enum MHD_Result ok = send_reply(c, s, r, reply.http_status, reply.body, "application/json");
    reply.body = NULL; /* owned by the response now */
    return ok;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_size, void **con_cls)
{
    server *s = cls;
    request *r = *con_cls;
    (void)version;
    if (!r) { /* first call: headers only */
        r = calloc(1, sizeof *r);
        if (!r)
            return MHD_NO;
        clock_gettime(CLOCK_MONOTONIC, &r->t0);
        r->route = kace_route_find(method, url, &r->method_ok);
        *con_cls = r;
        atomic_fetch_add(&s->in_flight, 1);
        const char *length = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (length) {
            errno = 0;
            char *end = NULL;
            unsigned long long n = strtoull(length, &end, 10);
            if (errno || end == length || n > s->max_body) { /* refuse before reading it */
                r->too_large = true;
                return answer(c, s, r);
            }
        }
        return MHD_YES;
    }
    if (r->answered) { /* refused early: drop what still arrives */
        *upload_size = 0;
        return MHD_YES;
    }
    if (*upload_size) {
        size_t n = *upload_size;
        *upload_size = 0;
        if (r->too_large || r->len + n > s->max_body) {
            r->too_large = true; /* keep reading (chunked bodies have no length), keep nothing */
            return MHD_YES;
        }
        if (r->len + n + 1 > r->cap) {
            size_t cap = r->cap ? r->cap : 4096;
            while (cap < r->len + n + 1)
                cap *= 2;
            char *body = realloc(r->body, cap);
            if (!body)
                return MHD_NO;
            r->body = body;
            r->cap = cap;
        }
        memcpy(r->body + r->len, upload_data, n);
        r->len += n;
        r->body[r->len] = '\0';
        return MHD_YES;
    }
    return answer(c, s, r);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode why)
{
    server *s = cls;
    request *r = *con_cls;
    (void)c;
    (void)why;
    if (!r)
        return;
    free(r->body);
    free(r);
    *con_cls = NULL;
    atomic_fetch_sub(&s->in_flight, 1);
}

/* "HOST:PORT", "[V6]:PORT" or ":PORT" (loopback). */
static bool parse_listen(const char *text, struct sockaddr_storage *addr, bool *v6)
{
    char host[128];
    const char *colon = strrchr(text, ':');
    if (!colon || (size_t)(colon - text) >= sizeof host)
        return false;
    memcpy(host, text, (size_t)(colon - text));
    host[colon - text] = '\0';
    char *end = NULL;
    long port = strtol(colon + 1, &end, 10);
    if (!*(colon + 1) || *end || port < 0 || port > 65535)
        return false;
    memset(addr, 0, sizeof *addr);
    size_t hl = strlen(host);
    if (hl >= 2 && host[0] == '[' && host[hl - 1] == ']') {
        struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)addr;
        host[hl - 1] = '\0';
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)port);
        *v6 = true;
        return inet_pton(AF_INET6, host + 1, &a6->sin6_addr) == 1;
    }
    struct sockaddr_in *a4 = (struct sockaddr_in *)addr;
    a4->sin_family = AF_INET;
    a4->sin_port = htons((uint16_t)port);
    *v6 = false;
    return inet_pton(AF_INET, hl ? host : "127.0.0.1", &a4->sin_addr) == 1;
}

/* Written whole (temporary file + rename) so that a waiting script never
 * reads half a number. */
static int write_port_file(const char *path, unsigned port)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return -1;
    fprintf(f, "%u\n", port);
    if (fclose(f) != 0 || rename(tmp, path) != 0)
        return -1;
    return 0;
}

static void usage(void)
{
    printf("usage: kace serve [--listen HOST:PORT] [--db PATH] [--model NAME | --model-file F] [--threads N]\n"
           "                  [--max-body BYTES] [--min-confidence X] [--max-colocation K] [--min-fraction X]\n"
           "                  [--watch SECONDS] [--no-nvml] [--port-file F] [--quiet]\n"
           "Answers colocation questions over HTTP (JSON; docs/openapi.yaml) and exports Prometheus metrics:\n"
           "  POST /v1/predict /v1/partners /v1/place /v1/mps-split /v1/observations, GET /v1/workloads,\n"
           "  POST /k8s/filter /k8s/prioritize (Kubernetes scheduler extender), GET /metrics /healthz.\n"
           "--listen defaults to 127.0.0.1:8080 (port 0 = any free port, written to --port-file).\n"
           "SIGHUP, or a change of the store or model file (checked every --watch seconds, default 1,\n"
           "0 = never), reloads the model without dropping requests; SIGTERM stops gracefully.\n");
}

int cmd_serve(int argc, char **argv)
{
    server s = {.db = cli_default_db(), .model_name = "default", .max_body = KACE_SERVE_MAX_BODY_DEFAULT};
    kace_advisor_options_default(&s.options);
    const char *listen = "127.0.0.1:8080", *port_file = NULL;
    double threads = 0, watch = 1, max_body = (double)s.max_body, max_k = s.options.max_colocation;
    bool use_nvml = true;
    static const struct option longopts[] = {
        {"listen", required_argument, 0, 'l'},        {"db", required_argument, 0, 'd'},
        {"model", required_argument, 0, 'm'},         {"model-file", required_argument, 0, 'M'},
        {"threads", required_argument, 0, 't'},       {"max-body", required_argument, 0, 'b'},
        {"min-confidence", required_argument, 0, 'c'}, {"max-colocation", required_argument, 0, 'k'},
        {"min-fraction", required_argument, 0, 'f'},  {"watch", required_argument, 0, 'w'},
        {"no-nvml", no_argument, 0, 'N'},             {"port-file", required_argument, 0, 'p'},
        {"quiet", no_argument, 0, 'q'},               {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    int opt;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "l:d:m:M:t:b:c:k:f:w:Np:qh", longopts, NULL)) != -1) {
        switch (opt) {
        case 'l': listen = optarg; break;
        case 'd': s.db = optarg; break;
        case 'm': s.model_name = optarg; break;
        case 'M': s.model_file = optarg; break;
        case 't':
            if (!cli_parse_number(optarg, 1, 256, true, &threads))
                return cli_usage("serve", "--threads must be an integer 1..256");
            break;
        case 'b':
            if (!cli_parse_number(optarg, 1, KACE_SERVE_MAX_BODY_DEFAULT, false, &max_body))
                return cli_usage("serve", "--max-body must be 1..%u bytes", KACE_SERVE_MAX_BODY_DEFAULT);
            break;
        case 'c':
            if (!cli_parse_number(optarg, 0, 1, false, &s.options.min_confidence))
                return cli_usage("serve", "--min-confidence must be a number in [0, 1]");
            break;
        case 'k':
            if (!cli_parse_number(optarg, 2, KACE_MAX_K, true, &max_k))
                return cli_usage("serve", "--max-colocation must be an integer 2..%d", KACE_MAX_K);
            break;
        case 'f':
            if (!cli_parse_number(optarg, 0, 1, false, &s.options.min_fraction))
                return cli_usage("serve", "--min-fraction must be a number in [0, 1]");
            break;
        case 'w':
            if (!cli_parse_number(optarg, 0, 3600, false, &watch))
                return cli_usage("serve", "--watch must be 0..3600 seconds");
            break;
        case 'N': use_nvml = false; break;
        case 'p': port_file = optarg; break;
        case 'q': s.quiet = true; break;
        case 'h': usage(); return EXIT_OK;
        default: return cli_usage("serve", "unknown option");
        }
    }
    if (optind < argc)
        return cli_usage("serve", "unexpected argument '%s'", argv[optind]);
    s.options.max_colocation = (int)max_k;
    s.max_body = (size_t)max_body;
    struct sockaddr_storage addr;
    bool v6 = false;
    if (!parse_listen(listen, &addr, &v6))
        return cli_usage("serve", "--listen must be HOST:PORT (e.g. 127.0.0.1:8080 or [::1]:8080), not '%s'", listen);
    if (threads == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        threads = n > 0 ? (double)(n < 16 ? n : 16) : 2;
    }

    /* Every thread started from here on inherits the blocked signals, so only
     * sigtimedwait below sees them. */
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGHUP);
    sigaddset(&signals, SIGTERM);
    sigaddset(&signals, SIGINT);
    pthread_sigmask(SIG_BLOCK, &signals, NULL);
    signal(SIGPIPE, SIG_IGN);

    int rc = EXIT_FAILURE_RUN;
    struct MHD_Daemon *d = NULL;
    kace_ctx *ctx = kace_ctx_new();
    pthread_mutex_init(&s.swap_lock, NULL);
    pthread_mutex_init(&s.gpu_lock, NULL);
    atomic_init(&s.in_flight, 0);
    kace_status st;
    if (!ctx || (st = kace_serve_metrics_new(ctx, &s.metrics)) || (st = load(ctx, &s))) {
        fprintf(stderr, "kace serve: %s\n", ctx ? kace_errmsg(ctx) : "out of memory");
        goto done;
    }
    if (use_nvml) {
        s.gpu_source = &kace_serve_gpu_nvml;
        if (s.gpu_source->open(ctx, &s.gpu_state)) {
            say(&s, "no GPU metrics: %s", kace_errmsg(ctx));
            s.gpu_state = NULL;
        }
    }
    unsigned int flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ITC | (v6 ? MHD_USE_IPv6 : 0);
    d = MHD_start_daemon(flags, 0, NULL, NULL, on_request, &s, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
                         MHD_OPTION_THREAD_POOL_SIZE, (unsigned int)threads, MHD_OPTION_NOTIFY_COMPLETED, on_completed,
                         &s, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)30, MHD_OPTION_CONNECTION_LIMIT,
                         (unsigned int)1000, MHD_OPTION_LISTEN_BACKLOG_SIZE, (unsigned int)1024, MHD_OPTION_END);
    if (!d) {
        fprintf(stderr, "kace serve: cannot listen on %s: %s\n", listen, strerror(errno));
        goto done;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    unsigned port = info ? info->port : 0;
    if (port_file && write_port_file(port_file, port) != 0) {
        fprintf(stderr, "kace serve: cannot write %s: %s\n", port_file, strerror(errno));
        goto done;
    }
    {
        held_advisor *h = acquire(&s);
        say(&s, "listening on %s (port %u, %d threads): %zu workloads, model %s, policy %s", listen, port,
            (int)threads, kace_advisor_dataset(h->advisor)->n_workloads,
            s.model_file ? s.model_file : s.model_name, kace_advisor_policy(h->advisor));
        release(h);
    }

    for (;;) {
        struct timespec wait = {.tv_sec = watch > 0 ? (time_t)watch : 3600,
                                .tv_nsec = watch > 0 ? (long)((watch - floor(watch)) * 1e9) : 0};
        int sig = sigtimedwait(&signals, NULL, &wait);
        if (sig == SIGTERM || sig == SIGINT)
            break;
        if (sig == SIGHUP) {
            reload(&s, "SIGHUP");
        } else if (watch > 0) {
            file_stamp db_now = stamp_of(s.db), model_now = stamp_of(s.model_file);
            if (!same_stamp(&db_now, &s.db_stamp) || !same_stamp(&model_now, &s.model_stamp)) {
                /* let a writer finish (a model is renamed into place whole;
                 * an import is one transaction) */
                reload(&s, "file changed");
                s.db_stamp = db_now; /* a failed reload is not retried until the next change */
                s.model_stamp = model_now;
            }
        }
    }
    say(&s, "stopping: no new connections; waiting for %d request(s) in progress", atomic_load(&s.in_flight));
    MHD_socket listener = MHD_quiesce_daemon(d);
    if (listener != MHD_INVALID_SOCKET)
        close(listener);
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (atomic_load(&s.in_flight) > 0 && seconds_since(&t0) < 10) {
        struct timespec nap = {0, 10 * 1000 * 1000};
        nanosleep(&nap, NULL);
    }
    rc = EXIT_OK;
done:
    if (d)
        MHD_stop_daemon(d);
    if (s.gpu_state)
        s.gpu_source->close(&s.gpu_state);
    release(s.current);
    kace_serve_metrics_free(&s.metrics);
    pthread_mutex_destroy(&s.swap_lock);
    pthread_mutex_destroy(&s.gpu_lock);
    kace_ctx_free(&ctx);
    if (rc == EXIT_OK)
        say(&s, "stopped");
    return rc;
}
