/* The colocation advisor behind `kace serve`: JSON requests in, JSON replies
 * out, with no sockets, so that every endpoint can be unit-tested and fuzzed.
 *
 * An advisor holds a dataset (workload profiles and measured colocations)
 * and a model; it is immutable once built, so many threads may answer
 * requests with one advisor at the same time (each with its own kace_ctx).
 * The HTTP front end (cli/cmd_serve.c) swaps advisors to reload a model.
 *
 * Request and reply shapes are documented in docs/openapi.yaml. Keys are
 * matched case-insensitively everywhere (the Kubernetes extender protocol
 * is decoded that way by the scheduler, so kace does the same for its own
 * endpoints).
 *
 * Metrics (kace_serve_metrics) are a thread-safe registry rendered in the
 * Prometheus text format; GPU sources (kace_serve_gpu_source) are function
 * tables, NVML being the real one (opened with dlopen).
 */
#ifndef KACE_SERVE_H
#define KACE_SERVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kace/dataset.h"
#include "kace/predictor.h"
#include "kace/sched.h"
#include "kace/split.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The JSON endpoints, in the order metrics list them. */
typedef enum kace_route {
    KACE_ROUTE_PREDICT = 0,    /* POST /v1/predict */
    KACE_ROUTE_PARTNERS,       /* POST /v1/partners */
    KACE_ROUTE_PLACE,          /* POST /v1/place */
    KACE_ROUTE_MPS_SPLIT,      /* POST /v1/mps-split */
    KACE_ROUTE_OBSERVE,        /* POST /v1/observations */
    KACE_ROUTE_WORKLOADS,      /* GET  /v1/workloads */
    KACE_ROUTE_K8S_FILTER,     /* POST /k8s/filter */
    KACE_ROUTE_K8S_PRIORITIZE, /* POST /k8s/prioritize */
    KACE_ROUTE_K8S_BIND,       /* POST /k8s/bind */
    KACE_ROUTE_K8S_NODES,      /* POST /k8s/nodes (kace agent reports) */
    KACE_ROUTE_K8S_STATE,      /* GET  /k8s/state (the node cache, for kace top) */
    KACE_ROUTE_HEALTH,         /* GET  /healthz */
    KACE_ROUTE_METRICS,        /* GET  /metrics */
    KACE_ROUTE_OTHER,          /* anything else (404 / 405) */
    KACE_N_ROUTES
} kace_route;

/* The endpoint's label in metrics ("predict", "k8s_filter", ...). */
const char *kace_route_name(kace_route route);
/* Route of a method and path; KACE_ROUTE_OTHER when none. *method_ok is
 * false when the path is known but the method is not the route's. */
kace_route kace_route_find(const char *method, const char *path, bool *method_ok);

typedef struct kace_advisor_options {
    double min_confidence; /* /v1/place: below this a shared GPU is not trusted
                              and an empty one is preferred (0 = always trust) */
    int max_colocation;    /* most workloads on one GPU (2..KACE_MAX_K) */
    double min_fraction;   /* k8s filter: a node passes only when the pod keeps
                              at least this fraction of its exclusive throughput */
    int objective;         /* a kace_objective: what requests without "objective" and the
                              extender's scheduler rank by (kace serve --objective); -1: each
                              their own, raw for /v1/predict and /v1/partners, normalized for
                              /v1/place and the scheduler */
} kace_advisor_options;

/* min_confidence 0, max_colocation 3, min_fraction 0, objective -1. */
void kace_advisor_options_default(kace_advisor_options *opt);

typedef struct kace_advisor kace_advisor;

/* Builds an advisor. It takes ownership of *ds and *m (both set to NULL),
 * also on failure. opt NULL = defaults. */
kace_status kace_advisor_new(kace_ctx *ctx, kace_dataset **ds, kace_model **m, const kace_advisor_options *opt,
                             kace_advisor **out);
void kace_advisor_free(kace_advisor **a);
/* Gives the advisor an MPS split model fitted on the advisor's own dataset
 * (kace_split_fit on the grids of kace_split_grids_load), taking ownership
 * of *split (set to NULL); n_grids is how many grids it was fitted on.
 * POST /v1/mps-split then advises with it; without one it uses the profile
 * rule (docs/openapi.yaml). Call it before the advisor is shared. */
void kace_advisor_set_split_model(kace_advisor *a, kace_split_model **split, size_t n_grids);
/* The advisor's split model (NULL when none) and its number of grids. */
const kace_split_model *kace_advisor_split_model(const kace_advisor *a, size_t *n_grids);
const kace_dataset *kace_advisor_dataset(const kace_advisor *a);
const kace_model *kace_advisor_model(const kace_advisor *a);
/* The predictor of the advisor's model (valid as long as the advisor). */
const kace_predictor *kace_advisor_predictor(const kace_advisor *a);
/* The policy label of the advisor's model decisions: "kace" for the
 * slowdown model, "KACE" for the paper's linear model, "Xu" for a forest. */
const char *kace_advisor_policy(const kace_advisor *a);

/* A colocation reported by whoever runs it (POST /v1/observations), with
 * kace's prediction for it: metrics show predicted against observed. */
typedef struct kace_observation {
    char gpu[64];
    int k;
    int workload[KACE_MAX_K];
    double observed[KACE_MAX_K];  /* samples/s */
    double predicted[KACE_MAX_K]; /* NaN when the model gives no per-member value */
    double observed_sum, predicted_sum;
    char label[KACE_MAX_K * KACE_NAME_MAX]; /* "a+b", members in request order */
    char id[65];                  /* the reporter's id for it ("" when none): stored observations dedupe on it */
    /* Optional, so its series join DCGM exporter's; "" when not sent. */
    char hostname[64];            /* the node the GPU is in (DCGM's Hostname) */
    char pod[254], pod_namespace[64]; /* the Kubernetes pod running the colocation */
} kace_observation;

/* The answer to one request. */
typedef struct kace_reply {
    int http_status;       /* 200, or the 4xx/5xx the error maps to */
    char *body;            /* JSON text, malloc'ed, owned by the caller */
    const char *decision;  /* policy that made a decision ("kace" or the model's policy,
                              "split-model", "mps-profile", "confidence-fallback", "none"), NULL when
                              the route decides nothing */
    bool has_observation;  /* KACE_ROUTE_OBSERVE: observation is filled */
    kace_observation observation;
    /* KACE_ROUTE_K8S_BIND: the Binding the front end must create, POSTing
     * api_body to the API server at api_path (malloc'ed; NULL when none).
     * If that fails, it calls kace_k8s_cluster_unbind and answers an
     * ExtenderBindingResult with the error. */
    char *api_path, *api_body;
} kace_reply;

/* Request bodies: the JSON endpoints take at most KACE_SERVE_MAX_BODY_DEFAULT
 * bytes; the Kubernetes extender's (ExtenderArgs with full Node objects,
 * about 4.2 KB a node: 21 MB for 5,000 nodes) take up to the front end's
 * --max-extender-body (default KACE_SERVE_MAX_EXTENDER_BODY_DEFAULT), at most
 * KACE_SERVE_MAX_EXTENDER_BODY_LIMIT. The front end refuses larger ones (413);
 * the handlers refuse what is over kace_serve_body_limit too. */
#define KACE_SERVE_MAX_BODY_DEFAULT (1u << 20)
#define KACE_SERVE_MAX_EXTENDER_BODY_DEFAULT (32u << 20)
#define KACE_SERVE_MAX_EXTENDER_BODY_LIMIT (1u << 30)

/* Whether a route is one of the Kubernetes extender's (/k8s/...). */
bool kace_route_is_extender(kace_route route);
/* The largest body the handler of a route accepts. */
size_t kace_serve_body_limit(kace_route route);

/* Whether every endpoint can be answered with this advisor's model: /v1/place
 * and the extender need each member's predicted throughput
 * (KACE_PRED_MEMBERS), which linear and forest models do not give. Fails
 * with KACE_ERR_UNSUPPORTED and a message naming the model, the endpoints
 * it cannot answer and how to get one that can. */
kace_status kace_advisor_check_endpoints(kace_ctx *ctx, const kace_advisor *a);

/* ---- who may ask: Origin, Content-Type, bearer token ------------------------ */

/* What the admission check reads of a request (header values NULL when absent). */
typedef struct kace_serve_head {
    const char *method;
    kace_route route;
    const char *host;          /* Host */
    const char *origin;        /* Origin */
    const char *content_type;  /* Content-Type */
    const char *authorization; /* Authorization */
    /* Came through the extender's own listener (kace serve --extender-listen),
     * one only kube-scheduler reaches: loopback in its pod, or HTTPS whose
     * client certificate kace serve verified. */
    bool extender_listener;
} kace_serve_head;

/* The agents that may report (kace serve --agent-tokens FILE): each a name
 * and a bearer token of its own, so that a sender is who holds a token, not
 * a client address anyone on the host can take. */
typedef struct kace_agent_tokens kace_agent_tokens;

/* Parses an agent tokens file: one agent a line, "NAME TOKEN" (spaces or
 * tabs between), blank lines and lines starting with '#' ignored. NAME is
 * what the store keeps as the origin of the agent's observations: 1..32 of
 * [a-z0-9_-]; TOKEN is 1..4096 printable characters without spaces. Names
 * and tokens are each unique; at least one agent. Errors are
 * KACE_ERR_PARSE "origin:line:col: what was expected". */
kace_status kace_agent_tokens_parse(kace_ctx *ctx, const char *origin, const char *text, size_t len,
                                    kace_agent_tokens **out);
void kace_agent_tokens_free(kace_agent_tokens **t);
size_t kace_agent_tokens_count(const kace_agent_tokens *t);
/* The name of the agent whose token follows "Bearer " in authorization, or
 * NULL. Every token is compared, each in constant time. */
const char *kace_agent_of(const kace_agent_tokens *t, const char *authorization);
/* Whether one of the agents' tokens is token (no token may be two things). */
bool kace_agent_tokens_has(const kace_agent_tokens *t, const char *token);

typedef struct kace_serve_guard {
    const char *token;             /* bearer token of the write endpoints; NULL = no authentication */
    /* With agents, POST /v1/observations needs one of their tokens (not
     * g->token); POST /k8s/nodes takes either. */
    const kace_agent_tokens *agents;
    const char *const *origins;    /* further allowed origins ("https://ui.example:8443") */
    size_t n_origins;
    bool extender_elsewhere;       /* the extender has its own listener: its routes are refused on this one */
} kace_serve_guard;

/* Whether a request may go on, before its body is read. Returns 0 when it
 * may, else the HTTP status with a message in msg:
 *  403 a state-changing request (any method but GET/HEAD/OPTIONS) whose
 *      Origin is neither the server's own (scheme://Host) nor listed;
 *  404 on the extender listener, any route but the extender's and /healthz;
 *      elsewhere, the extender's routes when g->extender_elsewhere;
 *  401 when g->token is set, any request but GET /healthz without
 *      "Authorization: Bearer <token>", the extender's routes included:
 *      kube-scheduler cannot send a token, so it reaches them through the
 *      extender listener, whose requests need none (the listener is the
 *      credential); with g->agents, POST /v1/observations without one of
 *      the agents' tokens (whether g->token is set or not), and POST
 *      /k8s/nodes without an agent's token or g->token;
 *  415 a POST whose Content-Type is not application/json.
 * Browsers send Origin on every cross-site POST and cannot send
 * application/json cross-site without a CORS preflight (which kace never
 * grants), so a web page cannot make kace act. */
int kace_serve_admit(const kace_serve_guard *g, const kace_serve_head *h, char *msg, size_t msg_size);

/* Whether two tokens are equal, in time that depends only on their lengths
 * (never on where they differ). */
bool kace_serve_token_equal(const char *given, const char *expected);

/* Answers a request to a JSON route (not /metrics). On failure it still fills
 * reply with an error body ({"error": {"status", "code", "message"}}) and
 * the matching status (400 malformed or wrong types, 422 unknown workloads
 * or what the model cannot do, 500 otherwise) and returns the status, with
 * the message in ctx. reply->body is NULL only when out of memory. */
kace_status kace_advisor_handle(kace_ctx *ctx, const kace_advisor *a, kace_route route, const char *body, size_t len,
                                kace_reply *reply);
void kace_reply_clear(kace_reply *reply);

/* kace's cache of the cluster's GPU nodes for the Kubernetes extender
 * (docs/kubernetes.md): fed by the Node objects the scheduler sends, by kace
 * agents (POST /k8s/nodes) and by kace's own binds, which stay "assumed" for
 * assume_seconds or until a report lists the pod. Thread-safe. */
typedef struct kace_k8s_cluster kace_k8s_cluster;
kace_status kace_k8s_cluster_new(kace_ctx *ctx, double assume_seconds, kace_k8s_cluster **out);
void kace_k8s_cluster_free(kace_k8s_cluster **c);
/* Forgets a bind whose Binding the API server refused. */
void kace_k8s_cluster_unbind(kace_k8s_cluster *c, const char *node, const char *pod_namespace, const char *pod_name);
/* The extender decides with `kace schedule`'s own scheduler (lib/decide/
 * sched.c, docs/kubernetes.md): the GPUs of the nodes the cache knows (nodes
 * sorted by name, their GPUs by id, numbered as `kace schedule --cluster`
 * numbers them) make a kace_sched cluster; a pod kace sees for the first time
 * is submitted to it; filter passes only the node of the GPU the scheduler
 * started it on (none while it is queued: kube-scheduler retries it),
 * prioritize scores that node 10, bind records it and gives it an equal MPS
 * share; a bound pod that its node's kace agent no longer lists has ended
 * (kace_sched_finish, so queued pods may start); pods an agent lists that
 * kace did not place are started where they run (kace_sched_start_on).
 * config, profiles, pool, runnable and rates are kace_sched_new's and must
 * outlive c, or the next call. Without this call the extender scores nodes
 * by predicted gain. Called again (a reload: the served model changed), the
 * scheduler is rebuilt at once on the new world with the pods it holds
 * (by workload name; those of workloads the new pool lacks are forgotten);
 * w NULL goes back to scoring by predicted gain. */
typedef struct kace_k8s_scheduler {
    kace_sched_config config;
    const kace_dataset *profiles;
    const int *pool;
    int n_pool;
    const kace_group_set *runnable;
    const kace_rate_source *rates;
} kace_k8s_scheduler;
kace_status kace_k8s_cluster_use_scheduler(kace_ctx *ctx, kace_k8s_cluster *c, const kace_k8s_scheduler *w);
/* kace_advisor_handle with the node cache c (NULL: as kace_advisor_handle)
 * at unix time now: the extender judges nodes named only by name from the
 * cache, and /k8s/bind, /k8s/nodes and /k8s/state work. */
kace_status kace_advisor_handle_k8s(kace_ctx *ctx, const kace_advisor *a, kace_k8s_cluster *c, double now,
                                    kace_route route, const char *body, size_t len, kace_reply *reply);

/* Replies kept for one advisor: a partner ranking without
 * "among" is rendered once per objective and target and then answered, for any "top", by
 * joining the rendered pieces, byte for byte what the computed reply would
 * be. Entries are built by the first request that needs them (thread-safe,
 * lock-free) and kept, up to 32 MiB, as long as the cache: make one per
 * advisor and free it with the advisor, so that a reload (a new advisor)
 * starts with an empty one. */
typedef struct kace_reply_cache kace_reply_cache;
kace_status kace_reply_cache_new(kace_ctx *ctx, const kace_advisor *a, kace_reply_cache **out);
void kace_reply_cache_free(kace_reply_cache **c);
/* Targets whose ranking is held (for tests). */
size_t kace_reply_cache_entries(const kace_reply_cache *c);
/* kace_advisor_handle_k8s answering from cache where it can (cache NULL, or
 * made for another advisor: not used). */
kace_status kace_advisor_handle_cached(kace_ctx *ctx, const kace_advisor *a, kace_reply_cache *cache,
                                       kace_k8s_cluster *c, double now, kace_route route, const char *body, size_t len,
                                       kace_reply *reply);

/* An error body for the front end's own refusals (404, 405, 413, 503).
 * Returns NULL when out of memory; the caller frees it. */
char *kace_serve_error_json(int http_status, const char *message);
/* The HTTP status a library status maps to. */
int kace_serve_http_status(kace_status st);

/* ---- metrics --------------------------------------------------------- */

typedef struct kace_serve_metrics kace_serve_metrics;

kace_status kace_serve_metrics_new(kace_ctx *ctx, kace_serve_metrics **out);
void kace_serve_metrics_free(kace_serve_metrics **m);
/* One answered request (thread-safe, lock-free). */
void kace_serve_metrics_request(kace_serve_metrics *m, kace_route route, int http_status, double seconds);
/* One decision by policy (thread-safe). Policies beyond a small fixed
 * number of distinct labels are counted as "other". */
void kace_serve_metrics_decision(kace_serve_metrics *m, kace_route route, const char *policy);
/* Keeps the latest observation of each colocation (by GPU and members); at
 * most 256 colocations are kept, the oldest replaced first. */
void kace_serve_metrics_observe(kace_serve_metrics *m, const kace_observation *obs);
/* The node name GPU series carry as DCGM exporter's `Hostname` label
 * (kace serve: $NODE_NAME, else the host name). Copied; NULL clears it. */
void kace_serve_metrics_set_hostname(kace_serve_metrics *m, const char *hostname);
/* One model (re)load, successful or not, at unix time `when`. */
void kace_serve_metrics_model_loaded(kace_serve_metrics *m, bool ok, double when, double model_mtime);
/* Drift: the served model's cross-validated error (%) of the
 * predicted sum, set at load (NaN: unknown). Rendered with the recent error
 * over the kept observations and their ratio, kace_model_drift_ratio. */
void kace_serve_metrics_model_cv_error(kace_serve_metrics *m, double cv_error_pct);
/* A model (re)load refused, and why: reason is a short label
 * ("load_error", "cannot_answer"), message the log's sentence. Counts a
 * failed load and shows the latest refusal until a load succeeds. */
void kace_serve_metrics_model_refused(kace_serve_metrics *m, const char *reason, const char *message);

/* Why the front end dropped a connection or refused a body. */
typedef enum kace_serve_drop {
    KACE_DROP_HEADER_TIMEOUT = 0, /* request headers not complete within --header-timeout */
    KACE_DROP_BODY_TIMEOUT,       /* body not complete within --body-timeout */
    KACE_DROP_BODY_MEMORY,        /* partly received bodies at --max-pending-bodies: 503 */
    KACE_DROP_OBSERVATION_RATE,   /* a sender past its --observation-rate: 429 */
    KACE_DROP_PER_CLIENT,         /* a connection past --max-per-client from its address: refused */
    KACE_DROP_CONNECTIONS,        /* a connection past --max-connections of its listener: refused */
    KACE_N_DROPS
} kace_serve_drop;
void kace_serve_metrics_drop(kace_serve_metrics *m, kace_serve_drop why);
/* Bytes now held by partly received bodies, and connections open (gauges). */
void kace_serve_metrics_pending(kace_serve_metrics *m, size_t body_bytes, size_t connections);

/* One GPU as a GPU source saw it. A value that could not be read is NAN. */
typedef struct kace_serve_gpu_sample {
    char id[96];            /* UUID (metrics label UUID), or the index where the driver has none */
    char name[96];          /* product name (label modelName) */
    double utilization;     /* 0..1, share of time a kernel ran */
    double memory_utilization; /* 0..1, share of time memory was read or written */
    unsigned index;         /* the driver's index (label gpu, as DCGM exporter's) */
} kace_serve_gpu_sample;

/* A source of GPU observations. open fails with KACE_ERR_UNSUPPORTED where
 * the library or GPU is absent; sample fills up to max entries. */
typedef struct kace_serve_gpu_source {
    const char *name;
    kace_status (*open)(kace_ctx *ctx, void **state);
    kace_status (*sample)(kace_ctx *ctx, void *state, kace_serve_gpu_sample *out, size_t max, size_t *n);
    void (*close)(void **state);
} kace_serve_gpu_source;

/* The GPU backend kace_gpu_open picks (include/kace/gpu.h: $KACE_GPU_BACKEND,
 * else the first that opens: NVML, dlopen of $KACE_NVML_LIBRARY, else
 * libnvidia-ml.so.1): every GPU it sees. */
extern const kace_serve_gpu_source kace_serve_gpu_nvml;

/* Renders every metric in the Prometheus text format (version 0.0.4).
 * GPU series carry DCGM exporter's labels (gpu, UUID, modelName, Hostname)
 * and colocation series UUID, Hostname, pod and namespace where reported,
 * so that dashboards join them with DCGM's (docs/kubernetes.md).
 * gpus may be NULL (no GPU source: the GPU series are left out). now is the
 * current unix time (model age). *text is malloc'ed, owned by the caller. */
kace_status kace_serve_metrics_render(kace_ctx *ctx, kace_serve_metrics *m, const kace_serve_gpu_sample *gpus,
                                      size_t n_gpus, double now, char **text);

#ifdef __cplusplus
}
#endif

#endif
