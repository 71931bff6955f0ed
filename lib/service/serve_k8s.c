/* The Kubernetes scheduler-extender protocol (filter, prioritize, bind) and
 * kace's node cache.
 *
 * The scheduler POSTs ExtenderArgs {"pod", "nodes": {"items": [...]},
 * "nodenames"}; filter answers an ExtenderFilterResult {"nodes" or
 * "nodenames", "failedNodes", "failedAndUnresolvableNodes", "error"},
 * prioritize a HostPriorityList [{"host", "score"}] with scores 0..10 (the
 * scheduler's MaxExtenderPriority), bind receives ExtenderBindingArgs
 * {"PodName", "PodNamespace", "PodUID", "Node"} and answers
 * ExtenderBindingResult {"Error"}. Keys are matched case-insensitively, as
 * the scheduler's Go decoder does (k8s.io/kube-scheduler/extender/v1 has no
 * JSON tags: it sends "Pod", "Nodes", "NodeNames").
 *
 * With a node cache (kace_k8s_cluster), nodes named only by name
 * (nodeCacheCapable: true) are judged from what the cache knows: the
 * kace.io/gpus annotation of the last full Node object seen, or the last
 * report of the node's kace agent (POST /k8s/nodes), plus the pods kace
 * bound there since (assumed until a report lists their UID, or for the
 * cache's assume time). Bind picks the GPU on the chosen node and the pod's
 * MPS share and gives the front end a Binding to create through the API
 * server; the Binding's annotations (kace.io/gpu, kace.io/mps-percentage)
 * are copied onto the pod by the API server, where the device plugin or the
 * pod's entry point reads them (docs/kubernetes.md).
 *
 * Conventions (docs/openapi.yaml, README):
 *  - a pod names its workload with the label (or annotation)
 *    "kace.io/workload";
 *  - a node says what runs on its GPUs with the annotation "kace.io/gpus",
 *    a JSON object {"<gpu id>": ["<workload>", ...], ...};
 *  - a pod without a kace workload, or one kace does not know, is not kace's
 *    business: every node passes and scores 0 (never block scheduling);
 *  - a node without the annotation, or whose GPUs are all full, fails the
 *    filter with the reason; a GPU running an unknown workload is skipped.
 * The score of a node is its best GPU's gain (normalized throughput added
 * to the cluster, 0..1, see kace_serve_score_gpu) times 10, rounded. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "advisor.h"
#include "serve_k8s.h"

#define WORKLOAD_KEY "kace.io/workload"
#define GPUS_KEY "kace.io/gpus"
#define GPU_KEY "kace.io/gpu"            /* on the pod: the GPU (UUID) kace chose */
#define MPS_KEY "kace.io/mps-percentage" /* on the pod: its CUDA_MPS_ACTIVE_THREAD_PERCENTAGE */
#define MAX_NODES 10000

static const cJSON *metadata_value(const cJSON *obj, const char *map, const char *key)
{
    const cJSON *meta = cJSON_GetObjectItem(obj, "metadata");
    const cJSON *m = meta ? cJSON_GetObjectItem(meta, map) : NULL;
    return m ? cJSON_GetObjectItem(m, key) : NULL;
}

/* The pod's workload, or -1 when it names none kace knows. */
static int pod_workload(const kace_advisor *a, const cJSON *pod)
{
    const cJSON *v = metadata_value(pod, "labels", WORKLOAD_KEY);
    if (!cJSON_IsString(v))
        v = metadata_value(pod, "annotations", WORKLOAD_KEY);
    return cJSON_IsString(v) ? kace_dataset_find(a->ds, v->valuestring) : -1;
}

static const char *node_name(const cJSON *node)
{
    const cJSON *meta = cJSON_GetObjectItem(node, "metadata");
    const cJSON *name = meta ? cJSON_GetObjectItem(meta, "name") : NULL;
    return cJSON_IsString(name) && name->valuestring[0] ? name->valuestring : NULL;
}


/* A number, or null when it is not finite (JSON has no NaN). */
static void add_number(cJSON *obj, const char *name, double v)
{
    if (isfinite(v))
        cJSON_AddNumberToObject(obj, name, v);
    else
        cJSON_AddNullToObject(obj, name);
}

/* ---- the node cache ------------------------------------------------------- */

#define MAX_PENDING 4096
#define MAX_CACHED_NODES 20000
#define MAX_NODE_GPUS 64

#define MAX_UID 64  /* bytes with the NUL */
#define MAX_POD 320 /* "namespace/name" */

/* Compact: a 5,000-node cluster's cache stays a few MB. */
typedef struct member {
    char *text;                       /* "workload\0uid\0pod\0", one allocation owned here */
    const char *workload, *uid, *pod; /* into text; uid and pod "" when not known */
    int mps;                          /* its MPS active-thread percentage, 0 when not known */
    double assumed_at;                /* NAN: reported; else when kace bound it */
} member;

typedef struct cached_gpu {
    char id[96];
    int n;
    member m[KACE_MAX_K];
} cached_gpu;

/* Fills a zeroed member (slots past a GPU's n may hold stale copies: never freed). */
static bool member_set(member *m, const char *workload, const char *uid, const char *pod)
{
    size_t a = strlen(workload) + 1, b = strlen(uid) + 1, c = strlen(pod) + 1;
    m->text = malloc(a + b + c);
    if (!m->text)
        return false;
    memcpy(m->text, workload, a);
    memcpy(m->text + a, uid, b);
    memcpy(m->text + a + b, pod, c);
    m->workload = m->text;
    m->uid = m->text + a;
    m->pod = m->text + a + b;
    return true;
}

static void member_clear(member *m)
{
    free(m->text);
    memset(m, 0, sizeof *m);
}

typedef struct cached_node {
    char name[254];
    double updated_at;
    const char *source; /* "node" (a Node object's annotation) or "agent" */
    int n_gpus;
    cached_gpu *gpus;
} cached_node;

typedef struct pending_pod {
    char uid[64], pod[320], workload[KACE_NAME_MAX];
    double seen_at;
} pending_pod;

struct kace_k8s_cluster {
    pthread_mutex_t lock;
    double assume_seconds;
    cached_node *nodes;
    size_t n_nodes, cap_nodes;
    pending_pod pending[MAX_PENDING];
    size_t n_pending;
    unsigned long long binds;
};

kace_status kace_k8s_cluster_new(kace_ctx *ctx, double assume_seconds, kace_k8s_cluster **out)
{
    *out = NULL;
    if (!(assume_seconds >= 0 && assume_seconds <= 86400))
        return kace_fail(ctx, KACE_ERR_INVALID, "assume time must be 0..86400 seconds");
    kace_k8s_cluster *c = calloc(1, sizeof *c);
    if (!c)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    if (pthread_mutex_init(&c->lock, NULL) != 0) {
        free(c);
        return kace_fail(ctx, KACE_ERR_NOMEM, "cannot create a mutex");
    }
    c->assume_seconds = assume_seconds;
    *out = c;
    return KACE_OK;
}

static void free_gpus(cached_gpu *gpus, int n)
{
    for (int g = 0; gpus && g < n; g++)
        for (int i = 0; i < gpus[g].n; i++)
            member_clear(&gpus[g].m[i]);
    free(gpus);
}

void kace_k8s_cluster_free(kace_k8s_cluster **c)
{
    if (!c || !*c)
        return;
    for (size_t i = 0; i < (*c)->n_nodes; i++)
        free_gpus((*c)->nodes[i].gpus, (*c)->nodes[i].n_gpus);
    free((*c)->nodes);
    pthread_mutex_destroy(&(*c)->lock);
    free(*c);
    *c = NULL;
}

static cached_node *find_node(kace_k8s_cluster *c, const char *name)
{
    for (size_t i = 0; i < c->n_nodes; i++) /* linear: fine for thousands of nodes */
        if (strcmp(c->nodes[i].name, name) == 0)
            return &c->nodes[i];
    return NULL;
}

/* Parses a node's GPU state: {"<gpu>": [member, ...], ...}, a member being a
 * workload name or {"workload", "uid", "pod", "mps"}. */
static kace_status parse_gpus(kace_ctx *ctx, const cJSON *gpus, cached_gpu **out, int *n_out)
{
    *out = NULL;
    *n_out = 0;
    if (!cJSON_IsObject(gpus))
        return kace_fail(ctx, KACE_ERR_INVALID, "%s must be a JSON object {\"<gpu>\": [workloads...]}", GPUS_KEY);
    int n = cJSON_GetArraySize(gpus);
    if (n > MAX_NODE_GPUS)
        return kace_fail(ctx, KACE_ERR_INVALID, "%s: more than %d GPUs", GPUS_KEY, MAX_NODE_GPUS);
    cached_gpu *list = calloc(n ? (size_t)n : 1, sizeof *list);
    if (!list)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    int i = 0;
    for (const cJSON *g = gpus->child; g; g = g->next, i++) {
        cached_gpu *cg = &list[i];
        if (!g->string[0] || strlen(g->string) >= sizeof cg->id || !cJSON_IsArray(g) ||
            cJSON_GetArraySize(g) > KACE_MAX_K) {
            free_gpus(list, n);
            return kace_fail(ctx, KACE_ERR_INVALID,
                             "%s: GPU '%.64s' must have an id of 1..95 bytes and a list of at most %d workloads",
                             GPUS_KEY, g->string, KACE_MAX_K);
        }
        snprintf(cg->id, sizeof cg->id, "%s", g->string);
        for (const cJSON *w = g->child; w; w = w->next) {
            member *m = &cg->m[cg->n++];
            m->assumed_at = NAN;
            const cJSON *name = cJSON_IsObject(w) ? cJSON_GetObjectItemCaseSensitive(w, "workload") : w;
            const cJSON *uid = cJSON_IsObject(w) ? cJSON_GetObjectItemCaseSensitive(w, "uid") : NULL;
            const cJSON *pod = cJSON_IsObject(w) ? cJSON_GetObjectItemCaseSensitive(w, "pod") : NULL;
            const cJSON *mps = cJSON_IsObject(w) ? cJSON_GetObjectItemCaseSensitive(w, "mps") : NULL;
            bool ok = cJSON_IsString(name) && name->valuestring[0] && strlen(name->valuestring) < KACE_NAME_MAX &&
                      (!uid || (cJSON_IsString(uid) && strlen(uid->valuestring) < MAX_UID)) &&
                      (!pod || (cJSON_IsString(pod) && strlen(pod->valuestring) < MAX_POD)) &&
                      (!mps || (cJSON_IsNumber(mps) && mps->valuedouble >= 0 && mps->valuedouble <= 100));
            if (!ok) {
                kace_fail(ctx, KACE_ERR_INVALID,
                          "%s: GPU '%.64s' member %d must be a workload name or {\"workload\", \"uid\", \"pod\", "
                          "\"mps\" (0..100)}",
                          GPUS_KEY, cg->id, cg->n - 1);
                free_gpus(list, n);
                return KACE_ERR_INVALID;
            }
            if (!member_set(m, name->valuestring, uid ? uid->valuestring : "", pod ? pod->valuestring : "")) {
                free_gpus(list, n);
                return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
            }
            m->mps = mps ? (int)mps->valuedouble : 0;
        }
    }
    *out = list;
    *n_out = n;
    return KACE_OK;
}

/* Replaces what the cache knows of a node's GPUs; pods kace bound there and
 * that the new state does not list yet stay assumed (until the assume time). */
static kace_status cache_node(kace_ctx *ctx, kace_k8s_cluster *c, const char *name, const cJSON *gpus,
                              const char *source, double now)
{
    cached_gpu *list;
    int n;
    kace_status st = parse_gpus(ctx, gpus, &list, &n);
    if (st)
        return st;
    cached_node *node = find_node(c, name);
    if (!node) {
        if (c->n_nodes == MAX_CACHED_NODES) {
            free_gpus(list, n);
            return kace_fail(ctx, KACE_ERR_INVALID, "the node cache is full (%d nodes)", MAX_CACHED_NODES);
        }
        if (c->n_nodes == c->cap_nodes) {
            size_t cap = c->cap_nodes ? 2 * c->cap_nodes : 16;
            cached_node *grown = realloc(c->nodes, cap * sizeof *grown);
            if (!grown) {
                free_gpus(list, n);
                return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
            }
            c->nodes = grown;
            c->cap_nodes = cap;
        }
        node = &c->nodes[c->n_nodes++];
        memset(node, 0, sizeof *node);
        snprintf(node->name, sizeof node->name, "%s", name);
    }
    /* carry over assumed members the new state does not list by UID */
    for (int g = 0; g < node->n_gpus; g++)
        for (int i = 0; i < node->gpus[g].n; i++) {
            member *m = &node->gpus[g].m[i];
            if (isnan(m->assumed_at) || now - m->assumed_at > c->assume_seconds)
                continue;
            bool listed = false;
            for (int h = 0; h < n && !listed; h++)
                for (int j = 0; j < list[h].n && !listed; j++)
                    listed = m->uid[0] && strcmp(list[h].m[j].uid, m->uid) == 0;
            for (int h = 0; h < n && !listed; h++)
                if (strcmp(list[h].id, node->gpus[g].id) == 0 && list[h].n < KACE_MAX_K) {
                    list[h].m[list[h].n++] = *m; /* moved: the old list no longer owns it */
                    memset(m, 0, sizeof *m);
                    listed = true;
                }
        }
    free_gpus(node->gpus, node->n_gpus);
    node->gpus = list;
    node->n_gpus = n;
    node->updated_at = now;
    node->source = source;
    return KACE_OK;
}

static void expire_assumed(kace_k8s_cluster *c, cached_node *node, double now)
{
    for (int g = 0; g < node->n_gpus; g++) {
        cached_gpu *cg = &node->gpus[g];
        int kept = 0;
        for (int i = 0; i < cg->n; i++)
            if (isnan(cg->m[i].assumed_at) || now - cg->m[i].assumed_at <= c->assume_seconds)
                cg->m[kept++] = cg->m[i];
            else
                free(cg->m[i].text);
        cg->n = kept;
    }
}

static void remember_pod(kace_k8s_cluster *c, const char *uid, const char *pod, const char *workload, double now)
{
    size_t at = c->n_pending;
    for (size_t i = 0; i < c->n_pending; i++)
        if (strcmp(c->pending[i].uid, uid) == 0 && strcmp(c->pending[i].pod, pod) == 0)
            at = i;
    if (at == c->n_pending && c->n_pending == MAX_PENDING) { /* full: replace the oldest */
        at = 0;
        for (size_t i = 1; i < c->n_pending; i++)
            if (c->pending[i].seen_at < c->pending[at].seen_at)
                at = i;
    } else if (at == c->n_pending) {
        c->n_pending++;
    }
    pending_pod *p = &c->pending[at];
    snprintf(p->uid, sizeof p->uid, "%s", uid);
    snprintf(p->pod, sizeof p->pod, "%s", pod);
    snprintf(p->workload, sizeof p->workload, "%s", workload);
    p->seen_at = now;
}

/* ---- judging a node --------------------------------------------------------- */

typedef struct node_verdict {
    bool pass;
    char reason[200];
    double best_gain; /* NaN when no GPU is eligible */
    int best_gpu;     /* index of the best GPU, -1 when none */
    int best_n;       /* workloads on it before the pod */
} node_verdict;

static kace_status judge_gpus(kace_ctx *ctx, const kace_advisor *a, int job, const cached_gpu *gpus, int n_gpus,
                              node_verdict *v)
{
    v->pass = false;
    v->best_gain = NAN;
    v->best_gpu = -1;
    v->best_n = 0;
    if (n_gpus == 0) {
        snprintf(v->reason, sizeof v->reason, "%s lists no GPU", GPUS_KEY);
        return KACE_OK;
    }
    snprintf(v->reason, sizeof v->reason, "no GPU can take the pod");
    for (int gi = 0; gi < n_gpus; gi++) {
        const cached_gpu *g = &gpus[gi];
        int resident[KACE_MAX_K], n = 0;
        bool known = g->n < KACE_MAX_K;
        for (int i = 0; i < g->n && known; i++)
            known = (resident[n++] = kace_dataset_find(a->ds, g->m[i].workload)) >= 0;
        if (!known) { /* cannot predict this GPU: leave it to others */
            snprintf(v->reason, sizeof v->reason, "GPU '%.64s' runs %d or more workloads, or ones kace does not know",
                     g->id, KACE_MAX_K);
            continue;
        }
        kace_gpu_score s;
        kace_status st = kace_serve_score_gpu(ctx, a, job, resident, n, a->opt.max_colocation, &s);
        if (st)
            return st;
        if (!s.eligible) {
            snprintf(v->reason, sizeof v->reason, "GPU '%.64s' %.120s", g->id, s.reason);
            continue;
        }
        if (s.confidence < a->opt.min_confidence || s.job_fraction < a->opt.min_fraction) {
            snprintf(v->reason, sizeof v->reason,
                     "GPU '%.64s': the pod would keep %.2f of its throughput at confidence %.2f (min %.2f, %.2f)",
                     g->id, s.job_fraction, s.confidence, a->opt.min_fraction, a->opt.min_confidence);
            continue;
        }
        v->pass = true;
        if (isnan(v->best_gain) || s.gain > v->best_gain) { /* ties: the first GPU listed */
            v->best_gain = s.gain;
            v->best_gpu = gi;
            v->best_n = n;
        }
    }
    if (v->pass)
        v->reason[0] = '\0';
    return KACE_OK;
}

/* A full Node object: judged from its annotation (and cached, with a cache). */
static kace_status judge_node(kace_ctx *ctx, const kace_advisor *a, kace_k8s_cluster *c, double now, int job,
                              const cJSON *node, node_verdict *v)
{
    v->pass = false;
    v->best_gain = NAN;
    v->best_gpu = -1;
    const cJSON *ann = metadata_value(node, "annotations", GPUS_KEY);
    if (!cJSON_IsString(ann)) {
        snprintf(v->reason, sizeof v->reason, "no %s annotation (not a kace GPU node)", GPUS_KEY);
        return KACE_OK;
    }
    cJSON *gpus = cJSON_Parse(ann->valuestring);
    cached_gpu *list = NULL;
    int n = 0;
    kace_ctx *scratch = kace_ctx_new(); /* a bad annotation fails this node only */
    kace_status st = scratch ? parse_gpus(scratch, gpus, &list, &n) : KACE_ERR_NOMEM;
    if (st == KACE_ERR_NOMEM) {
        cJSON_Delete(gpus);
        kace_ctx_free(&scratch);
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    }
    if (st) {
        snprintf(v->reason, sizeof v->reason, "%.190s", kace_errmsg(scratch));
        cJSON_Delete(gpus);
        kace_ctx_free(&scratch);
        return KACE_OK;
    }
    kace_ctx_free(&scratch);
    if (c) { /* the cache keeps kace's own binds on top of the annotation */
        free_gpus(list, n);
        list = NULL;
        const char *name = node_name(node);
        st = cache_node(ctx, c, name, gpus, "node", now);
        cJSON_Delete(gpus);
        if (st)
            return st;
        cached_node *cn = find_node(c, name);
        return judge_gpus(ctx, a, job, cn->gpus, cn->n_gpus, v);
    }
    cJSON_Delete(gpus);
    st = judge_gpus(ctx, a, job, list, n, v);
    free_gpus(list, n);
    return st;
}

/* A node named only by name: judged from the cache. */
static kace_status judge_named(kace_ctx *ctx, const kace_advisor *a, kace_k8s_cluster *c, double now, int job,
                               const char *name, node_verdict *v)
{
    cached_node *cn = find_node(c, name);
    if (!cn) {
        v->pass = false;
        v->best_gain = NAN;
        v->best_gpu = -1;
        snprintf(v->reason, sizeof v->reason,
                 "kace knows nothing of node '%.64s' (no kace agent report, no Node object with %s seen)", name,
                 GPUS_KEY);
        return KACE_OK;
    }
    expire_assumed(c, cn, now);
    return judge_gpus(ctx, a, job, cn->gpus, cn->n_gpus, v);
}

/* The pod and node list of ExtenderArgs; *items is NULL when the scheduler
 * sent node names only (nodeCacheCapable). */
static kace_status parse_args(kace_ctx *ctx, const cJSON *req, const cJSON **pod, const cJSON **items,
                              const cJSON **names)
{
    *pod = cJSON_GetObjectItem(req, "pod");
    const cJSON *nodes = cJSON_GetObjectItem(req, "nodes");
    *names = cJSON_GetObjectItem(req, "nodenames");
    *items = nodes && !cJSON_IsNull(nodes) ? cJSON_GetObjectItem(nodes, "items") : NULL;
    if (!cJSON_IsObject(*pod))
        return kace_fail(ctx, KACE_ERR_INVALID, "ExtenderArgs: field 'pod' must be an object");
    if (nodes && !cJSON_IsNull(nodes) && !cJSON_IsObject(nodes))
        return kace_fail(ctx, KACE_ERR_INVALID, "ExtenderArgs: field 'nodes' must be a NodeList object");
    if (*items && !cJSON_IsNull(*items) && !cJSON_IsArray(*items))
        return kace_fail(ctx, KACE_ERR_INVALID, "ExtenderArgs: nodes.items must be an array");
    if (*items && cJSON_IsNull(*items))
        *items = NULL;
    if (*names && cJSON_IsNull(*names))
        *names = NULL;
    if (*names && !cJSON_IsArray(*names))
        return kace_fail(ctx, KACE_ERR_INVALID, "ExtenderArgs: field 'nodenames' must be an array of strings");
    if (!*items && !*names)
        return kace_fail(ctx, KACE_ERR_INVALID, "ExtenderArgs: needs 'nodes' or 'nodenames'");
    if (cJSON_GetArraySize(*items ? *items : *names) > MAX_NODES)
        return kace_fail(ctx, KACE_ERR_INVALID, "ExtenderArgs: more than %d nodes", MAX_NODES);
    int i = 0;
    for (const cJSON *it = *items ? (*items)->child : (*names)->child; it; it = it->next, i++) {
        if (*items && (!cJSON_IsObject(it) || !node_name(it)))
            return kace_fail(ctx, KACE_ERR_INVALID, "ExtenderArgs: nodes.items[%d] has no metadata.name", i);
        if (!*items && (!cJSON_IsString(it) || !it->valuestring[0]))
            return kace_fail(ctx, KACE_ERR_INVALID, "ExtenderArgs: nodenames[%d] must be a non-empty string", i);
    }
    return KACE_OK;
}

/* The pod's identity: its UID and "namespace/name" ("" when absent). */
static void pod_identity(const cJSON *pod, char uid[64], char name[320])
{
    const cJSON *meta = cJSON_GetObjectItem(pod, "metadata");
    const cJSON *u = meta ? cJSON_GetObjectItem(meta, "uid") : NULL;
    const cJSON *ns = meta ? cJSON_GetObjectItem(meta, "namespace") : NULL;
    const cJSON *n = meta ? cJSON_GetObjectItem(meta, "name") : NULL;
    snprintf(uid, 64, "%.63s", cJSON_IsString(u) ? u->valuestring : "");
    snprintf(name, 320, "%.63s/%.253s", cJSON_IsString(ns) && ns->valuestring[0] ? ns->valuestring : "default",
             cJSON_IsString(n) ? n->valuestring : "");
}

/* Judges every candidate; verdicts[i] for the i-th node (object or name). */
static kace_status judge_all(kace_ctx *ctx, const kace_advisor *a, kace_k8s_cluster *c, double now, int job,
                             const cJSON *items, const cJSON *names, node_verdict **out)
{
    int n = cJSON_GetArraySize(items ? items : names);
    node_verdict *v = calloc(n ? (size_t)n : 1, sizeof *v);
    if (!v)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    kace_status st = KACE_OK;
    int i = 0;
    for (const cJSON *it = items ? items->child : names->child; it && !st; it = it->next, i++)
        st = items ? judge_node(ctx, a, c, now, job, it, &v[i]) : judge_named(ctx, a, c, now, job, it->valuestring, &v[i]);
    if (st) {
        free(v);
        return st;
    }
    *out = v;
    return KACE_OK;
}

kace_status kace_serve_k8s_filter(kace_ctx *ctx, const kace_advisor *a, kace_k8s_cluster *c, double now,
                                  const cJSON *req, cJSON *out, const char **decision)
{
    const cJSON *pod, *items, *names;
    kace_status st = parse_args(ctx, req, &pod, &items, &names);
    if (st)
        return st;
    int job = pod_workload(a, pod);
    bool can = kace_predictor_can(kace_advisor_predictor(a), KACE_PRED_MEMBERS);
    /* Nothing to judge: not kace's pod, a model without member predictions,
     * or node names without a cache. */
    if (job < 0 || !can || (!items && !c)) {
        if (items) {
            cJSON *nodes = cJSON_AddObjectToObject(out, "nodes");
            if (nodes)
                cJSON_AddItemToObject(nodes, "items", cJSON_Duplicate(items, true));
        } else {
            cJSON_AddItemToObject(out, "nodenames", cJSON_Duplicate(names, true));
        }
        cJSON_AddItemToObject(out, "failedNodes", cJSON_CreateObject());
        cJSON_AddItemToObject(out, "failedAndUnresolvableNodes", cJSON_CreateObject());
        cJSON_AddStringToObject(out, "error", "");
        *decision = "none";
        return KACE_OK;
    }
    if (c)
        pthread_mutex_lock(&c->lock);
    node_verdict *v = NULL;
    st = judge_all(ctx, a, c, now, job, items, names, &v);
    if (!st && c) {
        char uid[64], name[320];
        pod_identity(pod, uid, name);
        remember_pod(c, uid, name, a->ds->workloads[job].name, now);
    }
    if (c)
        pthread_mutex_unlock(&c->lock);
    if (st)
        return st;
    cJSON *failed = cJSON_CreateObject(), *passed = cJSON_CreateArray();
    int i = 0;
    for (const cJSON *it = items ? items->child : names->child; it && failed && passed; it = it->next, i++) {
        if (v[i].pass)
            cJSON_AddItemToArray(passed, cJSON_Duplicate(it, true));
        else
            cJSON_AddStringToObject(failed, items ? node_name(it) : it->valuestring, v[i].reason);
    }
    free(v);
    if (!failed || !passed) {
        cJSON_Delete(failed);
        cJSON_Delete(passed);
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    }
    if (items) {
        cJSON *nodes = cJSON_AddObjectToObject(out, "nodes");
        if (nodes)
            cJSON_AddItemToObject(nodes, "items", passed);
        else
            cJSON_Delete(passed);
    } else {
        cJSON_AddItemToObject(out, "nodenames", passed);
    }
    cJSON_AddItemToObject(out, "failedNodes", failed);
    cJSON_AddItemToObject(out, "failedAndUnresolvableNodes", cJSON_CreateObject());
    cJSON_AddStringToObject(out, "error", "");
    *decision = kace_advisor_policy(a);
    return KACE_OK;
}

kace_status kace_serve_k8s_prioritize(kace_ctx *ctx, const kace_advisor *a, kace_k8s_cluster *c, double now,
                                      const cJSON *req, cJSON **out, const char **decision)
{
    const cJSON *pod, *items, *names;
    kace_status st = parse_args(ctx, req, &pod, &items, &names);
    if (st)
        return st;
    int job = pod_workload(a, pod);
    bool judge = job >= 0 && kace_predictor_can(kace_advisor_predictor(a), KACE_PRED_MEMBERS) && (items || c);
    node_verdict *v = NULL;
    if (judge) {
        if (c)
            pthread_mutex_lock(&c->lock);
        st = judge_all(ctx, a, c, now, job, items, names, &v);
        if (!st && c) {
            char uid[64], name[320];
            pod_identity(pod, uid, name);
            remember_pod(c, uid, name, a->ds->workloads[job].name, now);
        }
        if (c)
            pthread_mutex_unlock(&c->lock);
        if (st)
            return st;
    }
    cJSON *list = cJSON_CreateArray();
    if (!list) {
        free(v);
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    }
    int i = 0;
    for (const cJSON *it = items ? items->child : names->child; it; it = it->next, i++) {
        double score = judge && v[i].pass ? round(10 * fmin(1, fmax(0, v[i].best_gain))) : 0;
        cJSON *h = cJSON_CreateObject();
        if (!cJSON_AddItemToArray(list, h))
            break;
        cJSON_AddStringToObject(h, "host", items ? node_name(it) : it->valuestring);
        cJSON_AddNumberToObject(h, "score", score);
    }
    free(v);
    *out = list;
    *decision = judge ? kace_advisor_policy(a) : "none";
    return KACE_OK;
}

/* ---- bind ------------------------------------------------------------------ */

static kace_status bind_string(kace_ctx *ctx, const cJSON *req, const char *key, size_t max, bool required,
                               const char **out)
{
    const cJSON *v = cJSON_GetObjectItem(req, key); /* case-insensitive: Go sends "PodName" */
    *out = "";
    if (!v && !required)
        return KACE_OK;
    if (!cJSON_IsString(v) || (required && !v->valuestring[0]) || strlen(v->valuestring) > max)
        return kace_fail(ctx, KACE_ERR_INVALID, "ExtenderBindingArgs: field '%s' must be a %sstring of at most %zu bytes",
                         key, required ? "non-empty " : "", max);
    *out = v->valuestring;
    return KACE_OK;
}

kace_status kace_serve_k8s_bind(kace_ctx *ctx, const kace_advisor *a, kace_k8s_cluster *c, double now,
                                const cJSON *req, cJSON *out, char **api_path, char **api_body, const char **decision)
{
    *api_path = *api_body = NULL;
    const char *name, *ns, *uid, *node;
    kace_status st;
    if ((st = bind_string(ctx, req, "PodName", 253, true, &name)) ||
        (st = bind_string(ctx, req, "PodNamespace", 63, false, &ns)) ||
        (st = bind_string(ctx, req, "PodUID", 63, false, &uid)) || (st = bind_string(ctx, req, "Node", 253, true, &node)))
        return st;
    if (!ns[0])
        ns = "default";
    for (const char *p = name; *p; p++) /* they go into a URL path */
        if (*p == '/' || *p == '?' || *p == '#' || *p == '%' || (unsigned char)*p <= ' ')
            return kace_fail(ctx, KACE_ERR_INVALID, "ExtenderBindingArgs: PodName '%.64s' is not a Kubernetes name", name);
    for (const char *p = ns; *p; p++)
        if (*p == '/' || *p == '?' || *p == '#' || *p == '%' || (unsigned char)*p <= ' ')
            return kace_fail(ctx, KACE_ERR_INVALID, "ExtenderBindingArgs: PodNamespace '%.64s' is not a Kubernetes name",
                             ns);
    if (!c)
        return kace_fail(ctx, KACE_ERR_UNSUPPORTED, "bind needs kace serve's node cache");
    char pod[320];
    snprintf(pod, sizeof pod, "%s/%s", ns, name);
    char gpu_id[96] = "", workload[KACE_NAME_MAX] = "", why[200] = "";
    int mps = 0;
    pthread_mutex_lock(&c->lock);
    const pending_pod *pp = NULL;
    for (size_t i = 0; i < c->n_pending && !pp; i++)
        if (strcmp(c->pending[i].pod, pod) == 0 && (!uid[0] || strcmp(c->pending[i].uid, uid) == 0))
            pp = &c->pending[i];
    int job = pp ? kace_dataset_find(a->ds, pp->workload) : -1;
    cached_node *cn = job >= 0 ? find_node(c, node) : NULL;
    if (job >= 0 && kace_predictor_can(kace_advisor_predictor(a), KACE_PRED_MEMBERS)) {
        node_verdict v;
        st = judge_named(ctx, a, c, now, job, node, &v);
        if (!st && v.pass && cn) {
            cached_gpu *g = &cn->gpus[v.best_gpu];
            member *m = &g->m[g->n];
            memset(m, 0, sizeof *m);
            if (!member_set(m, pp->workload, uid, pod)) {
                pthread_mutex_unlock(&c->lock);
                return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
            }
            g->n++;
            /* An equal share of the GPU's threads among the pods on it (the
             * running ones keep theirs: MPS fixes it when a client starts). */
            m->mps = mps = 100 / (v.best_n + 1);
            m->assumed_at = now;
            snprintf(gpu_id, sizeof gpu_id, "%s", g->id);
            snprintf(workload, sizeof workload, "%s", pp->workload);
            c->binds++;
        } else if (!st) {
            snprintf(why, sizeof why, "%s", v.reason);
        }
    }
    pthread_mutex_unlock(&c->lock);
    if (st)
        return st;
    if (why[0]) { /* the node changed since filter: the scheduler tries again */
        char msg[600];
        snprintf(msg, sizeof msg, "kace: node %.100s can no longer take pod %.100s: %.180s", node, pod, why);
        cJSON_AddStringToObject(out, "Error", msg);
        *decision = kace_advisor_policy(a);
        return KACE_OK;
    }
    /* The Binding the front end creates (POST .../pods/NAME/binding); the API
     * server copies its annotations onto the pod. */
    cJSON *b = cJSON_CreateObject();
    cJSON *meta = cJSON_AddObjectToObject(b, "metadata");
    cJSON *target = cJSON_AddObjectToObject(b, "target");
    if (!b || !meta || !target) {
        cJSON_Delete(b);
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    }
    cJSON_AddStringToObject(b, "apiVersion", "v1");
    cJSON_AddStringToObject(b, "kind", "Binding");
    cJSON_AddStringToObject(meta, "name", name);
    cJSON_AddStringToObject(meta, "namespace", ns);
    if (uid[0])
        cJSON_AddStringToObject(meta, "uid", uid);
    if (gpu_id[0]) {
        cJSON *ann = cJSON_AddObjectToObject(meta, "annotations");
        char pct[16];
        snprintf(pct, sizeof pct, "%d", mps);
        cJSON_AddStringToObject(ann, GPU_KEY, gpu_id);
        cJSON_AddStringToObject(ann, MPS_KEY, pct);
        cJSON_AddStringToObject(ann, WORKLOAD_KEY, workload);
    }
    cJSON_AddStringToObject(target, "apiVersion", "v1");
    cJSON_AddStringToObject(target, "kind", "Node");
    cJSON_AddStringToObject(target, "name", node);
    *api_body = cJSON_PrintUnformatted(b);
    cJSON_Delete(b);
    size_t len = strlen(ns) + strlen(name) + 64;
    *api_path = malloc(len);
    if (!*api_body || !*api_path) {
        free(*api_body);
        free(*api_path);
        *api_path = *api_body = NULL;
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    }
    snprintf(*api_path, len, "/api/v1/namespaces/%s/pods/%s/binding", ns, name);
    cJSON_AddStringToObject(out, "Error", "");
    if (gpu_id[0]) { /* what kace chose, for logs and tests (the scheduler ignores extra keys) */
        cJSON_AddStringToObject(out, "gpu", gpu_id);
        cJSON_AddNumberToObject(out, "mps_percentage", mps);
    }
    *decision = gpu_id[0] ? kace_advisor_policy(a) : "none";
    return KACE_OK;
}

void kace_k8s_cluster_unbind(kace_k8s_cluster *c, const char *node, const char *pod_namespace, const char *pod_name)
{
    char pod[320];
    snprintf(pod, sizeof pod, "%s/%s", pod_namespace && pod_namespace[0] ? pod_namespace : "default", pod_name);
    pthread_mutex_lock(&c->lock);
    cached_node *cn = find_node(c, node);
    cached_gpu *at = NULL; /* the newest assumed bind of the pod: an older one may be a good bind */
    int at_i = -1;
    for (int g = 0; cn && g < cn->n_gpus; g++)
        for (int i = 0; i < cn->gpus[g].n; i++) {
            const member *m = &cn->gpus[g].m[i];
            if (!isnan(m->assumed_at) && strcmp(m->pod, pod) == 0 &&
                (!at || m->assumed_at >= at->m[at_i].assumed_at)) {
                at = &cn->gpus[g];
                at_i = i;
            }
        }
    if (at) {
        member_clear(&at->m[at_i]);
        memmove(&at->m[at_i], &at->m[at_i + 1], (size_t)(at->n - at_i - 1) * sizeof *at->m);
        at->n--;
        c->binds--;
    }
    pthread_mutex_unlock(&c->lock);
}

/* ---- the agent's reports, and the cache's state ------------------------------ */

kace_status kace_serve_k8s_report(kace_ctx *ctx, kace_k8s_cluster *c, double now, const cJSON *req, cJSON *out)
{
    const cJSON *node = cJSON_GetObjectItemCaseSensitive(req, "node");
    const cJSON *gpus = cJSON_GetObjectItemCaseSensitive(req, "gpus");
    for (const cJSON *it = req->child; it; it = it->next)
        if (strcmp(it->string, "node") != 0 && strcmp(it->string, "gpus") != 0)
            return kace_fail(ctx, KACE_ERR_INVALID, "request body: unknown field '%.64s' (expected node, gpus)",
                             it->string);
    if (!cJSON_IsString(node) || !node->valuestring[0] || strlen(node->valuestring) > 253)
        return kace_fail(ctx, KACE_ERR_INVALID, "node must be a node name of 1..253 bytes");
    if (!gpus)
        return kace_fail(ctx, KACE_ERR_INVALID, "gpus is required: {\"<gpu>\": [workloads...]}");
    if (!c)
        return kace_fail(ctx, KACE_ERR_UNSUPPORTED, "node reports need kace serve's node cache");
    pthread_mutex_lock(&c->lock);
    kace_status st = cache_node(ctx, c, node->valuestring, gpus, "agent", now);
    pthread_mutex_unlock(&c->lock);
    if (st)
        return st;
    cJSON_AddStringToObject(out, "node", node->valuestring);
    cJSON_AddNumberToObject(out, "gpus", cJSON_GetArraySize(gpus));
    return KACE_OK;
}

kace_status kace_serve_k8s_state(kace_ctx *ctx, const kace_advisor *a, kace_k8s_cluster *c, double now, cJSON *out)
{
    if (!c)
        return kace_fail(ctx, KACE_ERR_UNSUPPORTED, "no node cache");
    kace_status st = KACE_OK;
    pthread_mutex_lock(&c->lock);
    cJSON *nodes = cJSON_AddArrayToObject(out, "nodes");
    cJSON_AddNumberToObject(out, "binds", (double)c->binds);
    for (size_t i = 0; nodes && i < c->n_nodes && !st; i++) {
        cached_node *cn = &c->nodes[i];
        expire_assumed(c, cn, now);
        cJSON *n = cJSON_CreateObject();
        if (!cJSON_AddItemToArray(nodes, n))
            break;
        cJSON_AddStringToObject(n, "name", cn->name);
        cJSON_AddStringToObject(n, "source", cn->source);
        cJSON_AddNumberToObject(n, "age_seconds", now - cn->updated_at);
        cJSON *gl = cJSON_AddArrayToObject(n, "gpus");
        for (int g = 0; gl && g < cn->n_gpus && !st; g++) {
            const cached_gpu *cg = &cn->gpus[g];
            cJSON *jg = cJSON_CreateObject();
            if (!cJSON_AddItemToArray(gl, jg))
                break;
            cJSON_AddStringToObject(jg, "id", cg->id);
            int group[KACE_MAX_K], k = 0;
            bool known = true;
            for (int m = 0; m < cg->n && known; m++)
                known = (group[k++] = kace_dataset_find(a->ds, cg->m[m].workload)) >= 0;
            double sum = NAN, conf = NAN, pred[KACE_MAX_K];
            for (int m = 0; m < KACE_MAX_K; m++)
                pred[m] = NAN;
            if (known && k >= 2 && kace_predictor_can(kace_advisor_predictor(a), KACE_PRED_MEMBERS)) {
                kace_ctx *scratch = kace_ctx_new();
                if (scratch && kace_predict_group(scratch, kace_advisor_predictor(a), a->ds, group, k, &sum, &conf,
                                                  pred) != KACE_OK)
                    sum = NAN;
                kace_ctx_free(&scratch);
            } else if (known && k == 1) {
                pred[0] = sum = a->ds->workloads[group[0]].metric[KACE_M_EXCLUSIVE];
                conf = 1;
            }
            cJSON *ml = cJSON_AddArrayToObject(jg, "members");
            double worst = NAN;
            for (int m = 0; ml && m < cg->n; m++) {
                cJSON *jm = cJSON_CreateObject();
                if (!cJSON_AddItemToArray(ml, jm))
                    break;
                cJSON_AddStringToObject(jm, "workload", cg->m[m].workload);
                cJSON_AddStringToObject(jm, "pod", cg->m[m].pod);
                cJSON_AddStringToObject(jm, "uid", cg->m[m].uid);
                cJSON_AddNumberToObject(jm, "mps_percentage", cg->m[m].mps);
                cJSON_AddBoolToObject(jm, "assumed", !isnan(cg->m[m].assumed_at));
                double excl = known ? a->ds->workloads[group[m]].metric[KACE_M_EXCLUSIVE] : NAN;
                double frac = excl > 0 && isfinite(pred[m]) ? pred[m] / excl : NAN;
                add_number(jm, "predicted", known ? pred[m] : NAN);
                add_number(jm, "exclusive", excl);
                add_number(jm, "fraction", frac);
                if (!isnan(frac) && (isnan(worst) || frac < worst))
                    worst = frac;
            }
            add_number(jg, "predicted_sum", sum);
            add_number(jg, "confidence", conf);
            /* interference: a member kept below the extender's minimum fraction */
            cJSON_AddBoolToObject(jg, "interference", !isnan(worst) && worst < fmax(a->opt.min_fraction, 0.5));
        }
    }
    pthread_mutex_unlock(&c->lock);
    return st;
}
