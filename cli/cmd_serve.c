/* kace serve: the colocation advisor over HTTP (libmicrohttpd).
 *
 * Requests are answered by the library's pure handlers (kace/serve.h) on a
 * pool of libmicrohttpd threads, each polling its share of the connections
 * with epoll, so that idle or slow connections cost a file descriptor and a
 * little memory, never a thread. What they answer with (the advisor, its
 * reply cache and the extender's scheduler, all on the one served model) is
 * the library's (kace/service.h): a reload builds them anew and swaps them
 * in whole, so no request ever waits for a reload or sees half of one. This
 * file keeps the HTTP, the options and the signals. Signals are
 * blocked in every thread and taken by the main thread with sigtimedwait:
 * SIGHUP reloads, SIGTERM/SIGINT stop taking connections, wait for the
 * requests in progress (up to 10 s) and exit.
 *
 * Against hostile clients (docs/serve.md): connections per client address
 * and in all (libmicrohttpd refuses the rest), an idle timeout, deadlines for
 * the headers and for the body of each request (a reaper thread shuts down
 * connections past theirs: a slow sender that keeps the idle timer alive
 * still meets them), a body limit per endpoint and one cap on the bytes
 * reserved by partly received bodies (refused with 503 when reached), then
 * the admission check of the library (Origin, Content-Type, bearer token).
 *
 * Who may ask (docs/kubernetes.md): kube-scheduler cannot send a bearer
 * token to an extender, only talk HTTPS with a client certificate. So the
 * extender's routes get a listener of their own (--extender-listen): on
 * loopback (kace serve as a sidecar in the scheduler's pod), or HTTPS whose
 * clients must show a certificate signed by --extender-client-ca; every
 * other route is on the main listener, where --token-file guards all but
 * /healthz. */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <getopt.h>
#include <malloc.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "kube_api.h"

#include <microhttpd.h>

#include "cli.h"
#include "kace/serve.h"
#include "kace/service.h"

#define MAX_GPUS 64
#define MAX_ORIGINS 16
#define MAX_TOKEN 4096
#define TRIM_AFTER (1u << 20) /* bodies larger than this give their memory back to the system */

/* Where a connection is, for the reaper's deadlines. */
typedef enum conn_phase {
    PHASE_HEADERS, /* waiting for a request's headers (also between keep-alive requests) */
    PHASE_BODY,    /* headers in, body not yet complete */
    PHASE_REPLY,   /* answered after the whole body: only the idle timeout applies */
} conn_phase;

typedef struct conn_track {
    struct conn_track *prev, *next;
    const void *via; /* its listener */
    char peer[INET6_ADDRSTRLEN];
    int fd;
    conn_phase phase;
    struct timespec since;
    bool dropped; /* shut down by the reaper (once) */
} conn_track;

/* Observations each sender (the agent of --agent-tokens, else the client
 * address) may post: a token bucket of `burst` refilled at `per_minute`.
 * Senders past the table's size replace the one idle longest. */
#define RATE_SLOTS 1024
typedef struct sender_rate {
    char sender[33];
    double tokens;
    struct timespec last;
} sender_rate;

typedef struct server {
    /* what to load, and what is loaded */
    kace_service_config cfg;
    kace_service *service;
    bool quiet;
    bool store_observations;       /* --store-observations: POST /v1/observations also go to the store */
    double obs_per_minute, obs_burst; /* --observation-rate N[/BURST] per sender; 0: no limit */
    pthread_mutex_t rate_lock;
    sender_rate *rates; /* RATE_SLOTS of them */
    pthread_mutex_t store_lock;    /* one writer of observations at a time */
    /* limits */
    size_t max_body, max_extender_body, max_pending;
    unsigned max_connections, per_ip, idle_timeout;
    double header_timeout, body_timeout;
    kace_serve_guard guard;
    /* Kubernetes: the node cache, and the API server bind calls */
    kace_k8s_cluster *cluster;
    kube_api kube;
    bool has_kube;
    /* metrics and GPUs */
    kace_serve_metrics *metrics;
    const kace_serve_gpu_source *gpu_source;
    void *gpu_state;
    pthread_mutex_t gpu_lock;
    atomic_int in_flight;
    /* connections and partly received bodies */
    atomic_size_t pending; /* bytes reserved by bodies being received */
    pthread_mutex_t conn_lock;
    conn_track conns; /* list head */
    size_t n_conns;
    atomic_bool stopping;
} server;

/* A listening socket: the main one, or the extender's. */
typedef struct listener {
    struct server *s;
    bool extender;      /* serves the extender's routes (and /healthz) only */
    bool verify_client; /* HTTPS: a client certificate signed by --extender-client-ca is required */
    const char *client_name; /* --extender-client-name: and its CN or a DNS name of its SAN must be this */
} listener;

typedef struct request {
    const listener *via;
    char peer[INET6_ADDRSTRLEN]; /* the client's address ("" when unknown) */
    char sender[33];             /* POST /v1/observations: who sends it, the store's origin */
    kace_route route;
    bool method_ok, answered;
    int refusal; /* 413 or 503 found while reading a body, answered at its end */
    conn_track *track;
    char *body;
    size_t len, cap, reserved;
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

/* ---- loading: the library's (kace/service.h) ---------------------------- */

static void reload(server *s, const char *why)
{
    kace_ctx *ctx = kace_ctx_new();
    kace_service_notes notes = {.refused = "load_error"};
    kace_status st = ctx ? kace_service_load(ctx, s->service, &notes) : KACE_ERR_NOMEM;
    if (st) {
        const char *msg = ctx ? kace_errmsg(ctx) : "out of memory";
        if (!ctx)
            kace_serve_metrics_model_refused(s->metrics, notes.refused, msg);
        fprintf(stderr, "kace serve: reload (%s) refused, still serving the previous model: %s\n", why, msg);
    } else {
        say(s, "%s", notes.split);
        kace_served *h = kace_service_acquire(s->service);
        say(s, "reloaded (%s): %zu workloads, policy %s", why, kace_advisor_dataset(kace_served_advisor(h))->n_workloads,
            kace_advisor_policy(kace_served_advisor(h)));
        kace_served_release(&h);
        if (notes.extender[0])
            say(s, "%s", notes.extender);
    }
    kace_ctx_free(&ctx);
}

/* ---- connections: tracking, deadlines, body memory ------------------------- */

static void set_phase(server *s, conn_track *t, conn_phase phase)
{
    if (!t)
        return;
    pthread_mutex_lock(&s->conn_lock);
    t->phase = phase;
    clock_gettime(CLOCK_MONOTONIC, &t->since);
    pthread_mutex_unlock(&s->conn_lock);
}

static void peer_address(struct MHD_Connection *c, char *out, size_t size);

/* libmicrohttpd's connection start and end. The socket is closed only after
 * CLOSED returns, so the reaper (which shuts sockets down under conn_lock)
 * never touches a descriptor that another connection reuses. */
static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
    server *s = ((listener *)cls)->s;
    conn_track *t = *socket_context;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *info = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (!info || !(t = calloc(1, sizeof *t)))
            return; /* untracked: only the idle timeout applies to it */
        t->fd = info->connect_fd;
        t->via = cls;
        peer_address(c, t->peer, sizeof t->peer);
        t->phase = PHASE_HEADERS;
        clock_gettime(CLOCK_MONOTONIC, &t->since);
        pthread_mutex_lock(&s->conn_lock);
        t->next = s->conns.next;
        t->prev = &s->conns;
        s->conns.next->prev = t;
        s->conns.next = t;
        s->n_conns++;
        pthread_mutex_unlock(&s->conn_lock);
        *socket_context = t;
    } else if (t) {
        pthread_mutex_lock(&s->conn_lock);
        t->prev->next = t->next;
        t->next->prev = t->prev;
        s->n_conns--;
        pthread_mutex_unlock(&s->conn_lock);
        free(t);
        *socket_context = NULL;
    }
}

/* Before libmicrohttpd takes a connection: each listener has its own
 * --max-connections and --max-per-client (so that the main listener's
 * clients, loopback ones included, never use up kube-scheduler's), and
 * every refusal is counted in /metrics (libmicrohttpd's own limits refuse
 * silently). Connections are counted once started (on_connection), so a
 * burst of accepts may pass a limit by the listener's thread count. */
static enum MHD_Result on_accept(void *cls, const struct sockaddr *addr, socklen_t addrlen)
{
    const listener *l = cls;
    server *s = l->s;
    char peer[INET6_ADDRSTRLEN] = "";
    if (addr->sa_family == AF_INET && addrlen >= sizeof(struct sockaddr_in))
        inet_ntop(AF_INET, &((const struct sockaddr_in *)addr)->sin_addr, peer, sizeof peer);
    else if (addr->sa_family == AF_INET6 && addrlen >= sizeof(struct sockaddr_in6))
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)addr)->sin6_addr, peer, sizeof peer);
    size_t mine = 0, same = 0;
    pthread_mutex_lock(&s->conn_lock);
    for (conn_track *t = s->conns.next; t != &s->conns; t = t->next)
        if (t->via == l) {
            mine++;
            same += strcmp(t->peer, peer) == 0;
        }
    pthread_mutex_unlock(&s->conn_lock);
    if (mine >= s->max_connections) {
        kace_serve_metrics_drop(s->metrics, KACE_DROP_CONNECTIONS);
        return MHD_NO;
    }
    if (s->per_ip && same >= s->per_ip) {
        kace_serve_metrics_drop(s->metrics, KACE_DROP_PER_CLIENT);
        return MHD_NO;
    }
    return MHD_YES;
}

/* Every 100 ms: shuts down connections past their header or body deadline
 * (libmicrohttpd then sees the end of the stream and closes them). */
static void *reaper(void *arg)
{
    server *s = arg;
    while (!atomic_load(&s->stopping)) {
        struct timespec nap = {0, 100 * 1000 * 1000}, now;
        nanosleep(&nap, NULL);
        clock_gettime(CLOCK_MONOTONIC, &now);
        pthread_mutex_lock(&s->conn_lock);
        for (conn_track *t = s->conns.next; t != &s->conns; t = t->next) {
            if (t->dropped || t->phase == PHASE_REPLY)
                continue;
            double limit = t->phase == PHASE_HEADERS ? s->header_timeout : s->body_timeout;
            double age = (double)(now.tv_sec - t->since.tv_sec) + (double)(now.tv_nsec - t->since.tv_nsec) * 1e-9;
            if (age > limit) {
                shutdown(t->fd, SHUT_RDWR);
                t->dropped = true;
                kace_serve_metrics_drop(s->metrics, t->phase == PHASE_HEADERS ? KACE_DROP_HEADER_TIMEOUT
                                                                              : KACE_DROP_BODY_TIMEOUT);
            }
        }
        size_t n_conns = s->n_conns;
        pthread_mutex_unlock(&s->conn_lock);
        kace_serve_metrics_pending(s->metrics, atomic_load(&s->pending), n_conns);
    }
    return NULL;
}

/* Reserves n bytes of the cap on partly received bodies; false when that
 * would pass it. */
static bool reserve(server *s, request *r, size_t n)
{
    size_t cur = atomic_load(&s->pending);
    do {
        if (n > s->max_pending - cur)
            return false;
    } while (!atomic_compare_exchange_weak(&s->pending, &cur, cur + n));
    r->reserved += n;
    return true;
}

static void unreserve(server *s, request *r)
{
    atomic_fetch_sub(&s->pending, r->reserved);
    r->reserved = 0;
}

static size_t route_body_limit(const server *s, kace_route route)
{
    return kace_route_is_extender(route) ? s->max_extender_body : s->max_body;
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
    if (status == 401)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer realm=\"kace\"");
    if (status == 503 || status == 429)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, "1");
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
    pthread_mutex_lock(&s->conn_lock);
    size_t n_conns = s->n_conns;
    pthread_mutex_unlock(&s->conn_lock);
    kace_serve_metrics_pending(s->metrics, atomic_load(&s->pending), n_conns);
    char *text = NULL;
    kace_status st = kace_serve_metrics_render(ctx, s->metrics, gpus, n_gpus, unix_now(), &text);
    kace_ctx_free(&ctx);
    if (st)
        return send_reply(c, s, r, 500, NULL, "application/json");
    return send_reply(c, s, r, 200, text, "text/plain; version=0.0.4; charset=utf-8");
}

static enum MHD_Result send_too_large(struct MHD_Connection *c, server *s, request *r)
{
    char msg[128];
    snprintf(msg, sizeof msg, "request body larger than %zu bytes (the limit of this endpoint)",
             route_body_limit(s, r->route));
    return send_error(c, s, r, 413, msg);
}

static enum MHD_Result send_busy(struct MHD_Connection *c, server *s, request *r)
{
    char msg[160];
    kace_serve_metrics_drop(s->metrics, KACE_DROP_BODY_MEMORY);
    snprintf(msg, sizeof msg, "busy: partly received request bodies hold %zu of the %zu bytes allowed; retry later",
             atomic_load(&s->pending), s->max_pending);
    return send_error(c, s, r, 503, msg);
}

/* The store's origin of an observation without --agent-tokens: its client
 * address, so that kace train --from-observations can tell senders apart
 * (an origin is a word of [a-z0-9_-], at most 32): "serve-127-0-0-1", or a
 * hash of an IPv6 address. Anyone who may use several addresses (all of
 * 127/8 on one host) poses as several senders: --agent-tokens names them. */
static void sender_origin(const char *peer, char out[33])
{
    if (!peer[0]) {
        snprintf(out, 33, "serve");
    } else if (strchr(peer, ':')) {
        unsigned long long h = 1469598103934665603ULL; /* FNV-1a */
        for (const char *p = peer; *p; p++)
            h = (h ^ (unsigned char)*p) * 1099511628211ULL;
        snprintf(out, 33, "serve-v6-%016llx", h);
    } else {
        snprintf(out, 33, "serve-%.26s", peer); /* dotted IPv4: at most 15 */
        for (char *p = out; *p; p++)
            if (*p == '.')
                *p = '-';
    }
}

/* --store-observations: the observation goes to the store (origin: its
 * sender, deduplicated on the request's id); when it cannot, the reply says so. */
static void store_observation(kace_ctx *ctx, server *s, const request *r, const kace_served *h, kace_reply *reply)
{
    const char *origin = r->sender;
    const kace_observation *o = &reply->observation;
    const kace_dataset *ds = kace_advisor_dataset(kace_served_advisor(h));
    kace_observed_member members[KACE_MAX_K];
    for (int i = 0; i < o->k; i++)
        members[i] = (kace_observed_member){ds->workloads[o->workload[i]].name, 100, o->observed[i], o->predicted[i]};
    kace_observed_colocation oc = {.origin = origin, .origin_id = o->id[0] ? o->id : NULL, .observed_at = unix_now(),
                                   .gpu = o->gpu, .model = s->cfg.model_file ? s->cfg.model_file : s->cfg.model_name,
                                   .n_members = (size_t)o->k, .members = members};
    kace_store *store = NULL;
    pthread_mutex_lock(&s->store_lock);
    kace_status st = kace_store_open_flags(ctx, s->cfg.db, 0, &store);
    if (!st)
        st = kace_store_add_observation(ctx, store, &oc, NULL);
    kace_store_close(&store);
    pthread_mutex_unlock(&s->store_lock);
    if (st) {
        int status = kace_serve_http_status(st);
        char msg[1200];
        snprintf(msg, sizeof msg, "observation not stored: %s", kace_errmsg(ctx));
        free(reply->body);
        reply->body = kace_serve_error_json(status, msg);
        reply->http_status = status;
    }
}

/* Bind: creates the Binding kace's extender chose through the API
 * server; on failure the cache forgets the bind and the scheduler gets the
 * error in its ExtenderBindingResult (and tries the pod again). */
static void create_binding(server *s, const request *r, kace_reply *reply)
{
    char err[600] = "";
    long status = 0;
    int failed = 1;
    if (!s->has_kube)
        snprintf(err, sizeof err, "kace serve has no --kube-api: it cannot create the Binding");
    else
        failed = kube_api_call(&s->kube, "POST", reply->api_path, "application/json", reply->api_body, &status, NULL,
                               err, sizeof err);
    if (!failed) {
        say(s, "bound: %s", reply->api_body);
        return;
    }
    cJSON *args = cJSON_ParseWithLength(r->body, r->len);
    const cJSON *ns = cJSON_GetObjectItem(args, "PodNamespace"), *name = cJSON_GetObjectItem(args, "PodName"),
                *node = cJSON_GetObjectItem(args, "Node");
    if (cJSON_IsString(name) && cJSON_IsString(node))
        kace_k8s_cluster_unbind(s->cluster, node->valuestring, cJSON_IsString(ns) ? ns->valuestring : "",
                                name->valuestring);
    cJSON_Delete(args);
    say(s, "bind failed: %s", err);
    cJSON *out = cJSON_CreateObject();
    cJSON_AddStringToObject(out, "Error", err);
    char *text = cJSON_PrintUnformatted(out);
    cJSON_Delete(out);
    if (text) {
        free(reply->body);
        reply->body = text;
    }
}

static enum MHD_Result answer(struct MHD_Connection *c, server *s, request *r)
{
    set_phase(s, r->track, PHASE_REPLY);
    if (r->refusal == 413)
        return send_too_large(c, s, r);
    if (r->refusal == 503)
        return send_busy(c, s, r);
    if (r->route == KACE_ROUTE_METRICS)
        return send_metrics(c, s, r);
    kace_ctx *ctx = kace_ctx_new();
    if (!ctx)
        return send_reply(c, s, r, 500, NULL, "application/json");
    kace_served *h = kace_service_acquire(s->service);
    kace_reply reply;
    kace_advisor_handle_cached(ctx, kace_served_advisor(h), kace_served_cache(h), s->cluster, unix_now(), r->route,
                               r->body, r->len, &reply);
    if (reply.api_path)
        create_binding(s, r, &reply);
    if (reply.decision)
        kace_serve_metrics_decision(s->metrics, r->route, reply.decision);
    if (reply.has_observation)
        kace_serve_metrics_observe(s->metrics, &reply.observation);
    if (reply.has_observation && s->store_observations)
        store_observation(ctx, s, r, h, &reply);
    kace_served_release(&h);
    kace_ctx_free(&ctx);
    enum MHD_Result ok = send_reply(c, s, r, reply.http_status, reply.body, "application/json");
    reply.body = NULL; /* owned by the response now */
    kace_reply_clear(&reply); /* the Binding's path and body */
    return ok;
}

/* Whether the TLS client showed a certificate that --extender-client-ca
 * signed and that is valid now. libmicrohttpd asks the client for one
 * (MHD_OPTION_HTTPS_MEM_TRUST) but leaves checking it to the application,
 * through GnuTLS, which libmicrohttpd has loaded already: its functions
 * are looked up there, so kace needs no GnuTLS of its own. */
typedef struct tls_datum { /* gnutls_datum_t */
    unsigned char *data;
    unsigned int size;
} tls_datum;
typedef int (*gnutls_verify_fn)(void *session, unsigned int *status);
typedef const tls_datum *(*gnutls_peers_fn)(void *session, unsigned int *list_size);
typedef int (*gnutls_crt_init_fn)(void **cert);
typedef void (*gnutls_crt_deinit_fn)(void *cert);
typedef int (*gnutls_crt_import_fn)(void *cert, const tls_datum *data, int format);
typedef int (*gnutls_crt_dn_fn)(void *cert, const char *oid, unsigned indx, unsigned raw, void *buf, size_t *size);
typedef int (*gnutls_crt_san_fn)(void *cert, unsigned seq, void *san, size_t *size, unsigned *critical);
static gnutls_verify_fn gnutls_verify;
static gnutls_peers_fn gnutls_peers;
static gnutls_crt_init_fn gnutls_crt_init;
static gnutls_crt_deinit_fn gnutls_crt_deinit;
static gnutls_crt_import_fn gnutls_crt_import;
static gnutls_crt_dn_fn gnutls_crt_dn;
static gnutls_crt_san_fn gnutls_crt_san;
#define TLS_X509_FMT_DER 0          /* GNUTLS_X509_FMT_DER */
#define TLS_SAN_DNSNAME 1           /* GNUTLS_SAN_DNSNAME */
#define TLS_OID_COMMON_NAME "2.5.4.3" /* GNUTLS_OID_X520_COMMON_NAME */
#define TLS_E_SHORT_MEMORY_BUFFER (-51) /* GNUTLS_E_SHORT_MEMORY_BUFFER */

static void resolve_gnutls(void)
{
    void *lib = dlopen("libgnutls.so.30", RTLD_NOW | RTLD_NOLOAD);
    if (!lib)
        lib = dlopen("libgnutls.so.30", RTLD_NOW);
    if (lib) {
        *(void **)&gnutls_verify = dlsym(lib, "gnutls_certificate_verify_peers2");
        *(void **)&gnutls_peers = dlsym(lib, "gnutls_certificate_get_peers");
        *(void **)&gnutls_crt_init = dlsym(lib, "gnutls_x509_crt_init");
        *(void **)&gnutls_crt_deinit = dlsym(lib, "gnutls_x509_crt_deinit");
        *(void **)&gnutls_crt_import = dlsym(lib, "gnutls_x509_crt_import");
        *(void **)&gnutls_crt_dn = dlsym(lib, "gnutls_x509_crt_get_dn_by_oid");
        *(void **)&gnutls_crt_san = dlsym(lib, "gnutls_x509_crt_get_subject_alt_name");
    }
}

/* Whether the (verified) client certificate cert names want: a Common Name
 * or a DNS name of its subjectAltName equal to it (ASCII case aside), exactly:
 * no wildcard, no embedded NUL. The CA of a cluster signs the certificates of
 * every node and user, not only kube-scheduler's. */
static bool certificate_names(const tls_datum *der, const char *want, char *msg, size_t msg_size)
{
    void *cert = NULL;
    if (!gnutls_crt_init || !gnutls_crt_deinit || !gnutls_crt_import || !gnutls_crt_dn || !gnutls_crt_san) {
        snprintf(msg, msg_size, "cannot read the client certificate's names (GnuTLS's x509 functions not found)");
        return false;
    }
    if (gnutls_crt_init(&cert) != 0 || gnutls_crt_import(cert, der, TLS_X509_FMT_DER) != 0) {
        if (cert)
            gnutls_crt_deinit(cert);
        snprintf(msg, msg_size, "cannot read the client certificate");
        return false;
    }
    char name[256], first_cn[80] = "";
    size_t want_len = strlen(want);
    bool found = false;
    for (unsigned i = 0; i < 16 && !found; i++) {
        size_t size = sizeof name;
        if (gnutls_crt_dn(cert, TLS_OID_COMMON_NAME, i, 0, name, &size) != 0)
            break;
        if (i == 0)
            snprintf(first_cn, sizeof first_cn, "%.79s", name);
        found = size == want_len && strlen(name) == want_len && strcasecmp(name, want) == 0;
    }
    for (unsigned i = 0; i < 64 && !found; i++) {
        size_t size = sizeof name - 1;
        unsigned critical = 0;
        int type = gnutls_crt_san(cert, i, name, &size, &critical);
        if (type < 0 && type != TLS_E_SHORT_MEMORY_BUFFER) /* too long to be want: next; other errors: no more */
            break;
        if (type == TLS_SAN_DNSNAME && size < sizeof name) {
            name[size] = '\0';
            found = size == want_len && strlen(name) == want_len && strcasecmp(name, want) == 0;
        }
    }
    gnutls_crt_deinit(cert);
    if (!found)
        snprintf(msg, msg_size, "the client certificate (CN '%s') is not --extender-client-name's '%.120s'",
                 first_cn, want);
    return found;
}

static bool client_certificate_ok(struct MHD_Connection *c, const char *want_name, char *msg, size_t msg_size)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, resolve_gnutls);
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(c, MHD_CONNECTION_INFO_GNUTLS_SESSION);
    unsigned int n = 0, status = 1;
    const tls_datum *peers = NULL;
    if (!gnutls_verify || !gnutls_peers || !info || !info->tls_session) {
        snprintf(msg, msg_size, "cannot check the client certificate (GnuTLS not found beside libmicrohttpd)");
        return false;
    }
    if (!(peers = gnutls_peers(info->tls_session, &n)) || n == 0) {
        snprintf(msg, msg_size, "this listener needs a client certificate signed by kace serve's --extender-client-ca");
        return false;
    }
    if (gnutls_verify(info->tls_session, &status) != 0 || status != 0) {
        snprintf(msg, msg_size, "the client certificate is not signed by --extender-client-ca, or not valid now "
                                "(GnuTLS status 0x%x)", status);
        return false;
    }
    return !want_name || certificate_names(&peers[0], want_name, msg, msg_size);
}

/* The client's address as text. */
static void peer_address(struct MHD_Connection *c, char *out, size_t size)
{
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    const struct sockaddr *sa = info ? info->client_addr : NULL;
    out[0] = '\0';
    if (sa && sa->sa_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, out, (socklen_t)size);
    else if (sa && sa->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, out, (socklen_t)size);
}

/* Whether sender may post one more observation now. */
static bool observation_allowed(server *s, const char *sender)
{
    if (s->obs_per_minute <= 0 || !s->rates)
        return true;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    pthread_mutex_lock(&s->rate_lock);
    sender_rate *slot = NULL, *spare = NULL; /* spare: an empty slot, else the one idle longest */
    for (size_t i = 0; i < RATE_SLOTS && !slot; i++) {
        sender_rate *e = &s->rates[i];
        if (e->sender[0] && strcmp(e->sender, sender) == 0)
            slot = e;
        else if (!spare || (spare->sender[0] && (!e->sender[0] || e->last.tv_sec < spare->last.tv_sec)))
            spare = e;
    }
    if (!slot) { /* a new sender: a full bucket */
        slot = spare;
        snprintf(slot->sender, sizeof slot->sender, "%s", sender);
        slot->tokens = s->obs_burst;
        slot->last = now;
    }
    double dt = (double)(now.tv_sec - slot->last.tv_sec) + (double)(now.tv_nsec - slot->last.tv_nsec) * 1e-9;
    slot->tokens = fmin(s->obs_burst, slot->tokens + dt * s->obs_per_minute / 60.0);
    slot->last = now;
    bool ok = slot->tokens >= 1;
    if (ok)
        slot->tokens -= 1;
    pthread_mutex_unlock(&s->rate_lock);
    return ok;
}

/* The first call, with the headers only: refuses what can be refused before
 * reading a body (unknown route, method, admission, size, memory cap). */
static enum MHD_Result on_headers(struct MHD_Connection *c, server *s, request *r, const char *method)
{
    if (r->route == KACE_ROUTE_OTHER)
        return send_error(c, s, r, 404, "no such endpoint (see docs/openapi.yaml)");
    if (!r->method_ok)
        return send_error(c, s, r, 405, "method not allowed for this endpoint");
    kace_serve_head head = {
        .method = method,
        .route = r->route,
        .host = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST),
        .origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_ORIGIN),
        .content_type = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE),
        .authorization = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION),
        .extender_listener = r->via->extender,
    };
    char msg[600];
    if (r->via->verify_client && !client_certificate_ok(c, r->via->client_name, msg, sizeof msg))
        return send_error(c, s, r, 401, msg);
    int refused = kace_serve_admit(&s->guard, &head, msg, sizeof msg);
    if (refused)
        return send_error(c, s, r, refused, msg);
    if (r->route == KACE_ROUTE_OBSERVE) { /* admitted: with agents, the token is one of theirs */
        const char *agent = kace_agent_of(s->guard.agents, head.authorization);
        if (agent)
            snprintf(r->sender, sizeof r->sender, "%s", agent);
        else
            sender_origin(r->peer, r->sender);
    }
    if (r->route == KACE_ROUTE_OBSERVE && !observation_allowed(s, r->sender)) {
        kace_serve_metrics_drop(s->metrics, KACE_DROP_OBSERVATION_RATE);
        snprintf(msg, sizeof msg, "too many observations from %s: at most %g a minute (bursts of %g; "
                 "--observation-rate)", r->sender, s->obs_per_minute, s->obs_burst);
        return send_error(c, s, r, 429, msg);
    }
    const char *length = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (length) {
        errno = 0;
        char *end = NULL;
        unsigned long long n = strtoull(length, &end, 10);
        if (errno || end == length || n > route_body_limit(s, r->route)) /* refuse before reading it */
            return send_too_large(c, s, r);
        /* the whole body is reserved now (memory is touched only as it
         * arrives), so a request either fits or is refused at once */
        if (n > 0 && !reserve(s, r, (size_t)n + 1))
            return send_busy(c, s, r);
    }
    return MHD_YES;
}

/* Keeps n more bytes of body. */
static enum MHD_Result take_body(server *s, request *r, const char *data, size_t n)
{
    if (r->refusal)
        return MHD_YES; /* keep reading (a chunked body has no length), keep nothing */
    if (r->len + n > route_body_limit(s, r->route)) {
        r->refusal = 413;
        return MHD_YES;
    }
    if (r->len + n + 1 > r->cap) {
        size_t cap = r->cap ? r->cap : 4096;
        while (cap < r->len + n + 1)
            cap *= 2;
        if (r->reserved >= r->len + n + 1) /* a declared length: allocated once */
            cap = r->reserved;
        if (cap > r->reserved && !reserve(s, r, cap - r->reserved)) {
            r->refusal = 503;
            return MHD_YES;
        }
        char *body = realloc(r->body, cap);
        if (!body)
            return MHD_NO;
        r->body = body;
        r->cap = cap;
    }
    memcpy(r->body + r->len, data, n);
    r->len += n;
    r->body[r->len] = '\0';
    return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_size, void **con_cls)
{
    const listener *l = cls;
    server *s = l->s;
    request *r = *con_cls;
    (void)version;
    if (!r) { /* first call: headers only */
        r = calloc(1, sizeof *r);
        if (!r)
            return MHD_NO;
        clock_gettime(CLOCK_MONOTONIC, &r->t0);
        r->via = l;
        peer_address(c, r->peer, sizeof r->peer);
        r->route = kace_route_find(method, url, &r->method_ok);
        const union MHD_ConnectionInfo *info = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        r->track = info ? info->socket_context : NULL;
        set_phase(s, r->track, PHASE_BODY);
        *con_cls = r;
        atomic_fetch_add(&s->in_flight, 1);
        return on_headers(c, s, r, method);
    }
    if (r->answered) { /* refused early: drop what still arrives */
        *upload_size = 0;
        return MHD_YES;
    }
    if (*upload_size) {
        size_t n = *upload_size;
        *upload_size = 0;
        return take_body(s, r, upload_data, n);
    }
    return answer(c, s, r);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode why)
{
    server *s = ((listener *)cls)->s;
    request *r = *con_cls;
    (void)c;
    (void)why;
    if (!r)
        return;
    set_phase(s, r->track, PHASE_HEADERS); /* the next request on this connection */
    unreserve(s, r);
    /* a large body was parsed into many small blocks (an extender request of
     * 21 MB: about 280 MB of JSON tree) that glibc keeps once freed */
    bool trim = r->cap > TRIM_AFTER;
    free(r->body);
    free(r);
    if (trim)
        malloc_trim(0);
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
    double port;
    if (!cli_parse_number(colon + 1, 0, 65535, true, &port))
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

/* Written durably (kace_write_file_durable) so that a waiting script never
 * reads half a number; -1 with errno set when it cannot be written. */
static int write_port_file(const char *path, unsigned port)
{
    char text[32];
    snprintf(text, sizeof text, "%u\n", port);
    kace_ctx *ctx = kace_ctx_new();
    kace_status st = ctx ? kace_write_file_durable(ctx, path, text, strlen(text)) : KACE_ERR_NOMEM;
    int saved = errno;
    kace_ctx_free(&ctx);
    errno = st ? (saved ? saved : EIO) : 0;
    return st ? -1 : 0;
}

/* Whether an address is loopback (127.0.0.0/8, ::1): reachable only from
 * this host, or this pod's network namespace. */
static bool is_loopback(const struct sockaddr_storage *addr)
{
    if (addr->ss_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)addr)->sin_addr.s_addr) >> 24) == 127;
    return addr->ss_family == AF_INET6 && IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)addr)->sin6_addr);
}

/* A PEM file's whole text (NULL, said on stderr, when it cannot be read). */
static char *read_pem(const char *option, const char *path)
{
    FILE *f = fopen(path, "r");
    char *text = NULL;
    size_t len = 0, cap = 0;
    if (!f) {
        fprintf(stderr, "kace serve: --%s %s: %s\n", option, path, strerror(errno));
        return NULL;
    }
    for (;;) {
        if (len + 4096 + 1 > cap) {
            char *grown = cap < (1u << 20) ? realloc(text, cap = cap ? 2 * cap : 8192) : NULL;
            if (!grown) {
                fprintf(stderr, "kace serve: --%s %s: larger than 1 MiB, or out of memory\n", option, path);
                free(text);
                fclose(f);
                return NULL;
            }
            text = grown;
        }
        size_t n = fread(text + len, 1, cap - len - 1, f);
        len += n;
        if (n == 0)
            break;
    }
    fclose(f);
    text[len] = '\0';
    if (!strstr(text, "-----BEGIN ")) {
        fprintf(stderr, "kace serve: --%s %s: not a PEM file (no -----BEGIN line)\n", option, path);
        free(text);
        return NULL;
    }
    return text;
}

/* The PEM texts of the extender listener's HTTPS (all NULL: plain HTTP). */
typedef struct tls_files {
    char *cert, *key, *client_ca;
} tls_files;

/* Starts one listener's daemon on addr. */
static struct MHD_Daemon *start_listener(server *s, listener *l, const struct sockaddr_storage *addr, bool v6,
                                         unsigned threads, const tls_files *tls)
{
    unsigned int flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ITC | (v6 ? MHD_USE_IPv6 : 0);
    bool https = tls && tls->cert;
    if (https)
        flags |= MHD_USE_TLS;
    /* The TLS options go last: an absent one ends the list early. */
    /* libmicrohttpd's own limits stay as a backstop, past kace's (on_accept) */
    unsigned backstop = s->max_connections + threads + 1;
    return MHD_start_daemon(flags, 0, on_accept, l, on_request, l, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)addr,
                            MHD_OPTION_THREAD_POOL_SIZE, threads, MHD_OPTION_NOTIFY_COMPLETED, on_completed, l,
                            MHD_OPTION_NOTIFY_CONNECTION, on_connection, l, MHD_OPTION_CONNECTION_TIMEOUT,
                            s->idle_timeout, MHD_OPTION_CONNECTION_LIMIT, backstop,
                            MHD_OPTION_PER_IP_CONNECTION_LIMIT, s->per_ip ? s->per_ip + threads + 1 : 0,
                            MHD_OPTION_LISTEN_BACKLOG_SIZE,
                            (unsigned int)1024, https ? MHD_OPTION_HTTPS_MEM_CERT : MHD_OPTION_END,
                            https ? tls->cert : NULL, MHD_OPTION_HTTPS_MEM_KEY, https ? tls->key : NULL,
                            tls && tls->client_ca ? MHD_OPTION_HTTPS_MEM_TRUST : MHD_OPTION_END,
                            tls ? tls->client_ca : NULL, MHD_OPTION_END);
}

static unsigned listener_port(struct MHD_Daemon *d)
{
    const union MHD_DaemonInfo *info = d ? MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT) : NULL;
    return info ? info->port : 0;
}

static void usage(void)
{
    printf("usage: kace serve [--listen HOST:PORT] [--db PATH] [--model NAME | --model-file F] [--threads N]\n"
           "                  [--min-confidence X] [--max-colocation K] [--min-fraction X] [--allow-partial-model]\n"
           "                  [--watch SECONDS] [--no-nvml] [--port-file F] [--quiet] [--store-observations]\n"
           "                  [--token-file F] [--allow-origin ORIGIN]... [--max-body BYTES] [--max-extender-body BYTES]\n"
           "                  [--max-pending-bodies BYTES] [--max-connections N] [--max-per-client N]\n"
           "                  [--idle-timeout S] [--header-timeout S] [--body-timeout S]\n"
           "                  [--kube-api URL|in-cluster] [--kube-token-file F] [--kube-ca-file F] [--assume-seconds S]\n"
           "                  [--extender-policy P] [--split-train-db OTHER] [--extender-listen HOST:PORT]\n"
           "                  [--extender-port-file F] [--extender-tls-cert F --extender-tls-key F]\n"
           "                  [--extender-client-ca F] [--insecure-no-token] [--observation-rate N[/BURST]]\n"
           "                  [--extender-client-name NAME] [--agent-tokens F] [--objective raw|normalized|fair]\n"
           "Answers colocation questions over HTTP (JSON; docs/openapi.yaml) and exports Prometheus metrics:\n"
           "  POST /v1/predict /v1/partners /v1/place /v1/mps-split /v1/observations, GET /v1/workloads,\n"
           "  POST /k8s/filter /k8s/prioritize /k8s/bind (Kubernetes scheduler extender), POST /k8s/nodes,\n"
           "  GET /k8s/state /metrics /healthz.\n"
           "--listen defaults to 127.0.0.1:8080 (port 0 = any free port, written to --port-file).\n"
           "SIGHUP, or a change of the store, model file or --split-train-db (checked every --watch seconds, default 1,\n"
           "0 = never), reloads the model without dropping requests; SIGTERM stops gracefully.\n"
           "POSTs need Content-Type application/json; a foreign Origin is refused (403); with --token-file,\n"
           "every route but /healthz needs 'Authorization: Bearer <the file's token>' (401). A --listen address\n"
           "that is not loopback needs --token-file (or --insecure-no-token). Limits: docs/serve.md.\n"
           "--extender-listen HOST:PORT: a second listener for kube-scheduler, which cannot send a token: it\n"
           "serves /k8s/filter, /k8s/prioritize, /k8s/bind and /healthz only, and the main listener refuses\n"
           "those three. Loopback (a sidecar in the scheduler's pod), or HTTPS (--extender-tls-cert/-key, PEM)\n"
           "with --extender-client-ca CA: only clients showing a certificate CA signed get in (kube-scheduler's\n"
           "enableHTTPS and tlsConfig certFile/keyFile); with --extender-client-name NAME, only those whose\n"
           "certificate's CN or a DNS name of its subjectAltName is NAME (a cluster CA signs many).\n"
           "--extender-port-file F: its port, as --port-file.\n"
           "Port files are removed when kace serve exits.\n"
           "--store-observations: POST /v1/observations are also stored (origin serve, deduplicated on the\n"
           "request's optional \"id\") for kace train --from-observations (docs/eval.md); the origin names the\n"
           "sender (serve-<client address>, which anyone able to use several addresses can pose as).\n"
           "--agent-tokens F: lines 'NAME TOKEN' (F not readable by other users): POST /v1/observations then\n"
           "needs one of these bearer tokens (401 otherwise, --token-file's included) and its sender is NAME;\n"
           "POST /k8s/nodes takes them too. --observation-rate N[/BURST]: each sender may post N\n"
           "observations a minute, in bursts of BURST (default 120/120; 0 = no limit); past it, 429.\n"
           "Kubernetes (docs/kubernetes.md): POST /k8s/bind creates the Binding through --kube-api URL\n"
           "('in-cluster': the pod's service account) with --kube-token-file F and --kube-ca-file F;\n"
           "POST /k8s/nodes takes kace agent reports, GET /k8s/state shows the node cache; a bind stays\n"
           "assumed for --assume-seconds (default 120) or until the node's agent reports the pod.\n"
           "--extender-policy P: the extender places pods with kace schedule's scheduler under policy P\n"
           "(default kace; exclusive, packing, random, MEMCAP, SM%%, MEM%%), predicting with the served model\n"
           "(rebuilt on every reload); 'gain' scores each node by its best GPU's predicted gain instead.\n"
           "--objective O: what /v1/predict, /v1/partners and /v1/place rank by when a request names no\n"
           "\"objective\", and the extender's scheduler: raw (throughput sum), normalized (the sum of each member's\n"
           "share of its exclusive throughput) or fair (the smallest share). Default: raw for /v1/predict and\n"
           "/v1/partners, normalized for /v1/place and the scheduler (docs/serve.md).\n"
           "--split-train-db OTHER: /v1/mps-split's model is fitted on OTHER's split grids (another GPU's) and\n"
           "reads this store's profiles and curves; a change of OTHER reloads, as one of the store does.\n");
}

/* The token of --token-file: its first line, without trailing white space. */
static char *read_token(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "kace serve: --token-file %s: %s\n", path, strerror(errno));
        return NULL;
    }
    char *token = calloc(1, MAX_TOKEN + 2);
    struct stat st;
    /* group-readable is how a Kubernetes Secret with fsGroup reaches a non-root server (0440) */
    if (token && fstat(fileno(f), &st) == 0 && (st.st_mode & 007))
        fprintf(stderr, "kace serve: warning: --token-file %s can be read by other users (chmod o-rwx it)\n", path);
    if (token && !fgets(token, MAX_TOKEN + 2, f))
        token[0] = '\0';
    fclose(f);
    if (!token) {
        fprintf(stderr, "kace serve: out of memory\n");
        return NULL;
    }
    size_t n = strlen(token);
    while (n > 0 && (token[n - 1] == '\n' || token[n - 1] == '\r' || token[n - 1] == ' ' || token[n - 1] == '\t'))
        token[--n] = '\0';
    bool printable = n > 0 && n <= MAX_TOKEN;
    for (size_t i = 0; i < n; i++)
        if (token[i] <= ' ' || token[i] == 127)
            printable = false;
    if (!printable) {
        fprintf(stderr, "kace serve: --token-file %s: the first line must be a token of 1..%d printable characters "
                        "without spaces\n", path, MAX_TOKEN);
        free(token);
        return NULL;
    }
    return token;
}

/* The agents of --agent-tokens: a file only its owner (and group) may
 * read, since its tokens let their holders speak for the agents. */
static kace_agent_tokens *read_agent_tokens(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "kace serve: --agent-tokens %s: %s\n", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    const char *wrong = fstat(fileno(f), &st) != 0 ? strerror(errno)
                        : !S_ISREG(st.st_mode)     ? "not a regular file"
                        : (st.st_mode & 007) ? "other users may read it: chmod o-rwx it (its tokens let anyone send "
                                               "as the agents)"
                        : st.st_size > (1 << 20) ? "larger than 1 MiB"
                                                 : NULL;
    if (wrong) {
        fprintf(stderr, "kace serve: --agent-tokens %s: %s\n", path, wrong);
        fclose(f);
        return NULL;
    }
    size_t cap = (size_t)st.st_size + 1, len = 0;
    char *text = malloc(cap);
    if (text)
        len = fread(text, 1, cap - 1, f);
    fclose(f);
    kace_ctx *ctx = kace_ctx_new();
    kace_agent_tokens *agents = NULL;
    if (!text || !ctx || kace_agent_tokens_parse(ctx, path, text, len, &agents))
        fprintf(stderr, "kace serve: --agent-tokens: %s\n", ctx && text ? kace_errmsg(ctx) : "out of memory");
    free(text);
    kace_ctx_free(&ctx);
    return agents;
}

/* Raises the soft limit on open files to the hard one (each connection is
 * a descriptor) and returns the soft limit in force. */
static rlim_t raise_nofile(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return 1024;
    if (rl.rlim_cur < rl.rlim_max) {
        rlim_t want = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > 1u << 20 ? 1u << 20 : rl.rlim_max;
        if (want > rl.rlim_cur) {
            rl.rlim_cur = want;
            if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
                getrlimit(RLIMIT_NOFILE, &rl);
        }
    }
    return rl.rlim_cur == RLIM_INFINITY ? 1u << 20 : rl.rlim_cur;
}

/* GPU series' Hostname, as DCGM exporter's: the Kubernetes node name where set. */
static void set_gpu_hostname(server *s)
{
    char host[64] = "";
    const char *node = getenv("NODE_NAME");
    if (node && node[0])
        snprintf(host, sizeof host, "%s", node);
    else if (gethostname(host, sizeof host) != 0)
        host[0] = '\0';
    host[sizeof host - 1] = '\0';
    kace_serve_metrics_set_hostname(s->metrics, host);
}

/* Until SIGTERM or SIGINT: SIGHUP reloads, and so does a change of the
 * watched files (checked every watch seconds; 0: never). */
static void take_signals(server *s, const sigset_t *signals, double watch)
{
    for (;;) {
        struct timespec wait = {.tv_sec = watch > 0 ? (time_t)watch : 3600,
                                .tv_nsec = watch > 0 ? (long)((watch - floor(watch)) * 1e9) : 0};
        int sig = sigtimedwait(signals, NULL, &wait);
        if (sig == SIGTERM || sig == SIGINT)
            return;
        if (sig == SIGHUP) {
            reload(s, "SIGHUP");
        } else if (watch > 0 && kace_service_changed(s->service)) {
            /* let a writer finish (a model is renamed into place whole; an
             * import or a promotion is one transaction) */
            reload(s, "file changed");
        }
    }
}

/* Stops taking connections and waits (up to 10 s) for the requests in progress. */
static void quiesce(server *s, struct MHD_Daemon *d, struct MHD_Daemon *ext_d)
{
    say(s, "stopping: no new connections; waiting for %d request(s) in progress", atomic_load(&s->in_flight));
    MHD_socket listening = MHD_quiesce_daemon(d);
    if (listening != MHD_INVALID_SOCKET)
        close(listening);
    if (ext_d && (listening = MHD_quiesce_daemon(ext_d)) != MHD_INVALID_SOCKET)
        close(listening);
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (atomic_load(&s->in_flight) > 0 && seconds_since(&t0) < 10) {
        struct timespec nap = {0, 10 * 1000 * 1000};
        nanosleep(&nap, NULL);
    }
}

int cmd_serve(int argc, char **argv)
{
    server s = {.cfg = {.db = cli_default_db(), .model_name = "default", .extender_policy = KACE_SCHED_KACE},
                .max_body = KACE_SERVE_MAX_BODY_DEFAULT,
                .max_extender_body = KACE_SERVE_MAX_EXTENDER_BODY_DEFAULT,
                .max_pending = 40u << 20,
                .per_ip = 64,
                .idle_timeout = 10,
                .header_timeout = 10,
                .body_timeout = 30,
                .obs_per_minute = 120,
                .obs_burst = 120};
    kace_advisor_options_default(&s.cfg.options);
    const char *listen = "127.0.0.1:8080", *port_file = NULL, *token_file = NULL, *kube_token = NULL;
    const char *ext_listen = NULL, *ext_port_file = NULL, *tls_cert = NULL, *tls_key = NULL, *client_ca = NULL;
    const char *agents_file = NULL, *client_name = NULL;
    bool no_token_ok = false;
    double assume = 120;
    const char *origins[MAX_ORIGINS];
    size_t n_origins = 0;
    double threads = 0, watch = 1, max_body = (double)s.max_body, max_ext = (double)s.max_extender_body,
           max_pending = (double)s.max_pending, max_k = s.cfg.options.max_colocation, max_conns = 0,
           per_ip = s.per_ip, idle = s.idle_timeout;
    bool use_nvml = true;
    enum { O_TOKEN = 256, O_ORIGIN, O_MAX_EXT, O_MAX_PENDING, O_MAX_CONNS, O_PER_IP, O_IDLE, O_HEADER_T, O_BODY_T,
           O_PARTIAL, O_STORE_OBS, O_KUBE_API, O_KUBE_TOKEN, O_KUBE_CA, O_ASSUME, O_EXT_POLICY, O_SPLIT_TRAIN_DB,
           O_EXT_LISTEN, O_EXT_PORT_FILE, O_TLS_CERT, O_TLS_KEY, O_CLIENT_CA, O_NO_TOKEN, O_OBS_RATE,
           O_AGENT_TOKENS, O_CLIENT_NAME, O_OBJECTIVE };
    static const struct option longopts[] = {
        {"listen", required_argument, 0, 'l'},        {"db", required_argument, 0, 'd'},
        {"model", required_argument, 0, 'm'},         {"model-file", required_argument, 0, 'M'},
        {"threads", required_argument, 0, 't'},       {"max-body", required_argument, 0, 'b'},
        {"min-confidence", required_argument, 0, 'c'}, {"max-colocation", required_argument, 0, 'k'},
        {"min-fraction", required_argument, 0, 'f'},  {"watch", required_argument, 0, 'w'},
        {"no-nvml", no_argument, 0, 'N'},             {"port-file", required_argument, 0, 'p'},
        {"quiet", no_argument, 0, 'q'},               {"help", no_argument, 0, 'h'},
        {"store-observations", no_argument, 0, O_STORE_OBS},
        {"token-file", required_argument, 0, O_TOKEN}, {"allow-origin", required_argument, 0, O_ORIGIN},
        {"max-extender-body", required_argument, 0, O_MAX_EXT},
        {"max-pending-bodies", required_argument, 0, O_MAX_PENDING},
        {"max-connections", required_argument, 0, O_MAX_CONNS}, {"max-per-client", required_argument, 0, O_PER_IP},
        {"idle-timeout", required_argument, 0, O_IDLE}, {"header-timeout", required_argument, 0, O_HEADER_T},
        {"body-timeout", required_argument, 0, O_BODY_T}, {"allow-partial-model", no_argument, 0, O_PARTIAL},
        {"kube-api", required_argument, 0, O_KUBE_API}, {"kube-token-file", required_argument, 0, O_KUBE_TOKEN},
        {"kube-ca-file", required_argument, 0, O_KUBE_CA}, {"assume-seconds", required_argument, 0, O_ASSUME},
        {"extender-policy", required_argument, 0, O_EXT_POLICY},
        {"split-train-db", required_argument, 0, O_SPLIT_TRAIN_DB},
        {"extender-listen", required_argument, 0, O_EXT_LISTEN},
        {"extender-port-file", required_argument, 0, O_EXT_PORT_FILE},
        {"extender-tls-cert", required_argument, 0, O_TLS_CERT}, {"extender-tls-key", required_argument, 0, O_TLS_KEY},
        {"extender-client-ca", required_argument, 0, O_CLIENT_CA},
        {"insecure-no-token", no_argument, 0, O_NO_TOKEN},
        {"observation-rate", required_argument, 0, O_OBS_RATE},
        {"agent-tokens", required_argument, 0, O_AGENT_TOKENS},
        {"extender-client-name", required_argument, 0, O_CLIENT_NAME},
        {"objective", required_argument, 0, O_OBJECTIVE},
        {0, 0, 0, 0}};
    int opt;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "l:d:m:M:t:b:c:k:f:w:Np:qh", longopts, NULL)) != -1) {
        switch (opt) {
        case 'l': listen = optarg; break;
        case 'd': s.cfg.db = optarg; break;
        case 'm': s.cfg.model_name = optarg; break;
        case 'M': s.cfg.model_file = optarg; break;
        case O_SPLIT_TRAIN_DB: s.cfg.split_train_db = optarg; break;
        case 't':
            if (!cli_parse_number(optarg, 1, 256, true, &threads))
                return cli_usage("serve", "--threads must be an integer 1..256");
            break;
        case 'b':
            if (!cli_parse_number(optarg, 1, KACE_SERVE_MAX_BODY_DEFAULT, true, &max_body))
                return cli_usage("serve", "--max-body must be 1..%u bytes", KACE_SERVE_MAX_BODY_DEFAULT);
            break;
        case 'c':
            if (!cli_parse_number(optarg, 0, 1, false, &s.cfg.options.min_confidence))
                return cli_usage("serve", "--min-confidence must be a number in [0, 1]");
            break;
        case 'k':
            if (!cli_parse_number(optarg, 2, KACE_MAX_K, true, &max_k))
                return cli_usage("serve", "--max-colocation must be an integer 2..%d", KACE_MAX_K);
            break;
        case 'f':
            if (!cli_parse_number(optarg, 0, 1, false, &s.cfg.options.min_fraction))
                return cli_usage("serve", "--min-fraction must be a number in [0, 1]");
            break;
        case 'w':
            if (!cli_parse_number(optarg, 0, 3600, false, &watch))
                return cli_usage("serve", "--watch must be 0..3600 seconds");
            break;
        case 'N': use_nvml = false; break;
        case 'p': port_file = optarg; break;
        case 'q': s.quiet = true; break;
        case O_STORE_OBS: s.store_observations = true; break;
        case O_KUBE_API: s.kube.url = optarg; break;
        case O_KUBE_TOKEN: kube_token = optarg; break;
        case O_KUBE_CA: s.kube.ca_file = optarg; break;
        case O_ASSUME:
            if (!cli_parse_number(optarg, 0, 86400, false, &assume))
                return cli_usage("serve", "--assume-seconds must be 0..86400");
            break;
        case O_OBJECTIVE:
            if ((s.cfg.options.objective = kace_objective_from_name(optarg)) < 0)
                return cli_usage("serve", "--objective: '%s' is not raw, normalized or fair", optarg);
            break;
        case O_EXT_POLICY:
            s.cfg.extender_policy = strcmp(optarg, "gain") == 0 ? -1 : kace_sched_policy_from_name(optarg);
            if (strcmp(optarg, "gain") != 0 && (s.cfg.extender_policy < 0 || s.cfg.extender_policy == KACE_SCHED_ORACLE))
                return cli_usage("serve", "--extender-policy: '%s' is not gain or an online policy (exclusive, packing, "
                                          "random, MEMCAP, SM%%, MEM%%, kace)", optarg);
            break;
        case 'h': usage(); return EXIT_OK;
        case O_TOKEN: token_file = optarg; break;
        case O_ORIGIN:
            if (n_origins == MAX_ORIGINS || !strstr(optarg, "://"))
                return cli_usage("serve", "--allow-origin takes SCHEME://HOST[:PORT], at most %d times", MAX_ORIGINS);
            origins[n_origins++] = optarg;
            break;
        case O_MAX_EXT:
            if (!cli_number("serve", "max-extender-body", optarg, 1, KACE_SERVE_MAX_EXTENDER_BODY_LIMIT, &max_ext))
                return EXIT_USAGE;
            break;
        case O_MAX_PENDING:
            if (!cli_number("serve", "max-pending-bodies", optarg, 1, 64.0 * (1u << 30), &max_pending))
                return EXIT_USAGE;
            break;
        case O_MAX_CONNS:
            if (!cli_number("serve", "max-connections", optarg, 1, 1u << 20, &max_conns))
                return EXIT_USAGE;
            break;
        case O_PER_IP:
            if (!cli_number("serve", "max-per-client", optarg, 0, 1u << 20, &per_ip))
                return EXIT_USAGE;
            break;
        case O_IDLE:
            if (!cli_number("serve", "idle-timeout", optarg, 1, 86400, &idle))
                return EXIT_USAGE;
            break;
        case O_HEADER_T:
            if (!cli_parse_number(optarg, 0.1, 86400, false, &s.header_timeout))
                return cli_usage("serve", "--header-timeout must be 0.1..86400 seconds");
            break;
        case O_BODY_T:
            if (!cli_parse_number(optarg, 0.1, 86400, false, &s.body_timeout))
                return cli_usage("serve", "--body-timeout must be 0.1..86400 seconds");
            break;
        case O_PARTIAL: s.cfg.allow_partial_model = true; break;
        case O_EXT_LISTEN: ext_listen = optarg; break;
        case O_EXT_PORT_FILE: ext_port_file = optarg; break;
        case O_TLS_CERT: tls_cert = optarg; break;
        case O_TLS_KEY: tls_key = optarg; break;
        case O_CLIENT_CA: client_ca = optarg; break;
        case O_NO_TOKEN: no_token_ok = true; break;
        case O_AGENT_TOKENS: agents_file = optarg; break;
        case O_CLIENT_NAME:
            if (!optarg[0] || strlen(optarg) > 200)
                return cli_usage("serve", "--extender-client-name must be 1..200 characters (kube-scheduler's "
                                          "certificate's CN, e.g. system:kube-scheduler)");
            client_name = optarg;
            break;
        case O_OBS_RATE: {
            char *slash = strchr(optarg, '/');
            if (slash)
                *slash = '\0';
            bool ok = cli_parse_number(optarg, 0, 1e6, false, &s.obs_per_minute) &&
                      (!slash || cli_parse_number(slash + 1, 1, 1e6, false, &s.obs_burst));
            if (slash)
                *slash = '/';
            if (!ok)
                return cli_usage("serve", "--observation-rate must be N[/BURST]: N a minute per sender (0: no "
                                          "limit), bursts of BURST (default N, at least 1)");
            if (!slash)
                s.obs_burst = fmax(1, s.obs_per_minute);
            break;
        }
        default: return cli_usage("serve", "unknown option");
        }
    }
    if (optind < argc)
        return cli_usage("serve", "unexpected argument '%s'", argv[optind]);
    s.cfg.options.max_colocation = (int)max_k;
    s.max_body = (size_t)max_body;
    s.max_extender_body = (size_t)max_ext;
    s.max_pending = (size_t)max_pending;
    s.per_ip = (unsigned)per_ip;
    s.idle_timeout = (unsigned)idle;
    if (s.max_pending < s.max_body + 1 || s.max_pending < s.max_extender_body + 1)
        return cli_usage("serve", "--max-pending-bodies (%zu) must exceed --max-body (%zu) and --max-extender-body (%zu)",
                         s.max_pending, s.max_body, s.max_extender_body);
    struct sockaddr_storage addr;
    bool v6 = false;
    if (!parse_listen(listen, &addr, &v6))
        return cli_usage("serve", "--listen must be HOST:PORT (e.g. 127.0.0.1:8080 or [::1]:8080), not '%s'", listen);
    struct sockaddr_storage ext_addr;
    bool ext_v6 = false;
    if (ext_listen && !parse_listen(ext_listen, &ext_addr, &ext_v6))
        return cli_usage("serve", "--extender-listen must be HOST:PORT (e.g. 127.0.0.1:8081), not '%s'", ext_listen);
    if (!ext_listen && (ext_port_file || tls_cert || tls_key || client_ca))
        return cli_usage("serve", "--extender-port-file and --extender-tls-* / --extender-client-ca need --extender-listen");
    if (client_name && !client_ca)
        return cli_usage("serve", "--extender-client-name needs --extender-client-ca");
    if (!tls_cert != !tls_key || (client_ca && !tls_cert))
        return cli_usage("serve", "HTTPS needs both --extender-tls-cert and --extender-tls-key (and --extender-client-ca "
                                  "needs them)");
    /* Nobody but kube-scheduler may reach the extender: anyone who can binds
     * any pod to any node with kace's pods/binding right. */
    if (ext_listen && !is_loopback(&ext_addr) && !client_ca)
        return cli_usage("serve", "--extender-listen %s is not loopback: give --extender-client-ca (with "
                                  "--extender-tls-cert/-key) so that only kube-scheduler's certificate is let in",
                         ext_listen);
    if (!is_loopback(&addr) && !token_file && !no_token_ok)
        return cli_usage("serve", "--listen %s is not loopback: give --token-file (or --insecure-no-token to let "
                                  "anyone who reaches it act)", listen);
    if (threads == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        threads = n > 0 ? (double)(n < 16 ? n : 16) : 2;
    }
    /* a descriptor per connection, and some for the store, logs and epoll */
    rlim_t nofile = raise_nofile();
    rlim_t fd_room = nofile > 64 + 2 * (rlim_t)threads ? nofile - 64 - 2 * (rlim_t)threads : 1;
    if (max_conns == 0)
        max_conns = fd_room < 4096 ? (double)fd_room : 4096;
    else if ((rlim_t)max_conns > fd_room)
        return cli_usage("serve", "--max-connections %.0f needs more open files than the limit allows (%llu; ulimit -n)",
                         max_conns, (unsigned long long)nofile);
    s.max_connections = (unsigned)max_conns;
    char *token = NULL;
    if (token_file && !(token = read_token(token_file)))
        return EXIT_USAGE;
    kace_agent_tokens *agents = NULL;
    if (agents_file && !(agents = read_agent_tokens(agents_file))) {
        free(token);
        return EXIT_USAGE;
    }
    if (token && kace_agent_tokens_has(agents, token)) {
        kace_agent_tokens_free(&agents);
        free(token);
        return cli_usage("serve", "--agent-tokens %s: an agent's token is --token-file's: give each its own",
                         agents_file);
    }
    if (s.kube.url || kube_token) {
        char err[300];
        if (!s.kube.url) {
            free(token);
            kace_agent_tokens_free(&agents);
            return cli_usage("serve", "--kube-token-file needs --kube-api");
        }
        if (kube_api_setup(&s.kube, kube_token, err, sizeof err) != 0) {
            free(token);
            kace_agent_tokens_free(&agents);
            return cli_usage("serve", "--kube-api: %s", err);
        }
        s.has_kube = true;
    }
    s.guard.token = token;
    s.guard.agents = agents;
    s.guard.origins = origins;
    s.guard.n_origins = n_origins;
    s.guard.extender_elsewhere = ext_listen != NULL;
    tls_files tls = {0};
    if ((tls_cert && !(tls.cert = read_pem("extender-tls-cert", tls_cert))) ||
        (tls_key && !(tls.key = read_pem("extender-tls-key", tls_key))) ||
        (client_ca && !(tls.client_ca = read_pem("extender-client-ca", client_ca)))) {
        free(tls.cert);
        free(tls.key);
        free(tls.client_ca);
        free(token);
        kace_agent_tokens_free(&agents);
        return EXIT_USAGE;
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
    struct MHD_Daemon *d = NULL, *ext_d = NULL;
    listener main_listener = {.s = &s}, ext_listener = {.s = &s, .extender = true, .verify_client = client_ca != NULL,
                                                                 .client_name = client_name};
    bool wrote_port = false, wrote_ext_port = false;
    kace_ctx *ctx = cli_ctx_new();
    pthread_mutex_init(&s.gpu_lock, NULL);
    pthread_mutex_init(&s.store_lock, NULL);
    pthread_mutex_init(&s.conn_lock, NULL);
    pthread_mutex_init(&s.rate_lock, NULL);
    s.rates = calloc(RATE_SLOTS, sizeof *s.rates);
    s.conns.next = s.conns.prev = &s.conns;
    atomic_init(&s.in_flight, 0);
    atomic_init(&s.pending, 0);
    atomic_init(&s.stopping, false);
    pthread_t reaper_thread;
    bool reaper_started = false;
    kace_status st;
    kace_service_notes notes;
    if (!ctx || (st = kace_serve_metrics_new(ctx, &s.metrics)) ||
        (st = kace_k8s_cluster_new(ctx, assume, &s.cluster)) ||
        (st = kace_service_new(ctx, &s.cfg, s.metrics, s.cluster, &s.service)) ||
        (st = kace_service_load(ctx, s.service, &notes))) {
        fprintf(stderr, "kace serve: %s\n", ctx ? kace_errmsg(ctx) : "out of memory");
        goto done;
    }
    say(&s, "%s", notes.split);
    if (notes.extender[0])
        say(&s, "%s", notes.extender);
    set_gpu_hostname(&s);
    if (use_nvml) {
        s.gpu_source = &kace_serve_gpu_nvml;
        if (s.gpu_source->open(ctx, &s.gpu_state)) {
            say(&s, "no GPU metrics: %s", kace_errmsg(ctx));
            s.gpu_state = NULL;
        }
    }
    if (pthread_create(&reaper_thread, NULL, reaper, &s) != 0) {
        fprintf(stderr, "kace serve: cannot start a thread: %s\n", strerror(errno));
        goto done;
    }
    reaper_started = true;
    d = start_listener(&s, &main_listener, &addr, v6, (unsigned)threads, NULL);
    if (!d) {
        fprintf(stderr, "kace serve: cannot listen on %s: %s\n", listen, strerror(errno));
        goto done;
    }
    if (ext_listen && !(ext_d = start_listener(&s, &ext_listener, &ext_addr, ext_v6, 2, &tls))) {
        fprintf(stderr, "kace serve: cannot listen on %s (--extender-listen%s): %s\n", ext_listen,
                tls.cert ? ", HTTPS: check the certificate and key" : "", errno ? strerror(errno) : "refused");
        goto done;
    }
    unsigned port = listener_port(d), ext_port = listener_port(ext_d);
    /* written once every listener is up, so a waiting script can call both */
    if (ext_port_file && !(wrote_ext_port = write_port_file(ext_port_file, ext_port) == 0)) {
        fprintf(stderr, "kace serve: cannot write %s: %s\n", ext_port_file, strerror(errno));
        goto done;
    }
    if (port_file && !(wrote_port = write_port_file(port_file, port) == 0)) {
        fprintf(stderr, "kace serve: cannot write %s: %s\n", port_file, strerror(errno));
        goto done;
    }
    if (ext_d)
        say(&s, "extender listener on %s (port %u, %s): /k8s/filter, /k8s/prioritize, /k8s/bind and /healthz only; the "
                "main listener refuses them", ext_listen, ext_port,
            client_ca && client_name ? "HTTPS, client certificates signed by --extender-client-ca, named "
                                       "--extender-client-name"
            : client_ca              ? "HTTPS, client certificates signed by --extender-client-ca"
            : tls.cert               ? "HTTPS"
                                     : "HTTP");
    {
        kace_served *h = kace_service_acquire(s.service);
        say(&s, "listening on %s (port %u, %d threads): %zu workloads, model %s, policy %s", listen, port,
            (int)threads, kace_advisor_dataset(kace_served_advisor(h))->n_workloads,
            s.cfg.model_file ? s.cfg.model_file : s.cfg.model_name, kace_advisor_policy(kace_served_advisor(h)));
        kace_served_release(&h);
        say(&s,
            "limits: %u connections (%u per client), idle %u s, headers %g s, body %g s; bodies %zu B (extender %zu B), "
            "%zu B pending in all; %s",
            s.max_connections, s.per_ip, s.idle_timeout, s.header_timeout, s.body_timeout, s.max_body,
            s.max_extender_body, s.max_pending,
            token ? "every route but /healthz needs the bearer token" : "no token: anyone who connects may act");
        if (agents)
            say(&s, "observations: senders are the %zu agents of --agent-tokens, each by its token",
                kace_agent_tokens_count(agents));
        else if (s.store_observations)
            say(&s, "observations: senders are client addresses (--agent-tokens names them)");
    }

    take_signals(&s, &signals, watch);
    quiesce(&s, d, ext_d);
    rc = EXIT_OK;
done:
    if (reaper_started) { /* before the daemon: it shuts down descriptors the daemon owns */
        atomic_store(&s.stopping, true);
        pthread_join(reaper_thread, NULL);
    }
    if (d)
        MHD_stop_daemon(d);
    if (ext_d)
        MHD_stop_daemon(ext_d);
    /* a port file names a port only while kace serve listens on it */
    if (wrote_port)
        unlink(port_file);
    if (wrote_ext_port)
        unlink(ext_port_file);
    free(tls.cert);
    free(tls.key);
    free(tls.client_ca);
    if (s.gpu_state)
        s.gpu_source->close(&s.gpu_state);
    kace_service_free(&s.service); /* before the cluster and metrics it uses */
    kace_serve_metrics_free(&s.metrics);
    kace_k8s_cluster_free(&s.cluster);
    kube_api_cleanup(&s.kube);
    pthread_mutex_destroy(&s.gpu_lock);
    pthread_mutex_destroy(&s.store_lock);
    pthread_mutex_destroy(&s.conn_lock);
    pthread_mutex_destroy(&s.rate_lock);
    free(s.rates);
    kace_ctx_free(&ctx);
    free(token);
    kace_agent_tokens_free(&agents);
    if (rc == EXIT_OK)
        say(&s, "stopped");
    return rc;
}
