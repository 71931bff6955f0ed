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
 * With kace_k8s_cluster_use_scheduler, kace schedule's scheduler decides
 * (the section "the scheduler" below): only the node of the GPU it starts a
 * pod on passes and scores 10. Without it (--extender-policy gain), the
 * score of a node is its best GPU's gain (normalized throughput added to the
 * cluster, 0..1, see kace_serve_score_gpu) times 10, rounded. */
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
#define QOS_KEY "kace.io/qos"            /* on the pod: LS (latency sensitive) or BE, as kace schedule's jobs */
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
    bool agent;         /* a kace agent has reported it: its reports, not Node objects, say when pods end */
    int n_gpus;
    cached_gpu *gpus;
} cached_node;

typedef struct pending_pod {
    char uid[64], pod[320], workload[KACE_NAME_MAX];
    double seen_at;
} pending_pod;

/* A pod kace's scheduler knows (kace_k8s_cluster_use_scheduler). */
enum { POD_QUEUED = 1, POD_CHOSEN, POD_BOUND };
typedef struct sched_pod {
    char uid[MAX_UID], pod[MAX_POD];
    int job;        /* its kace_sched job id */
    int workload;   /* index in the scheduler's profiles */
    bool ls;
    int state;      /* POD_* */
    int gpu;        /* the scheduler's GPU while chosen or bound */
    bool confirmed; /* a report listed it since it was bound */
    int rebinds;    /* binds of it while bound (the API server refuses them: nothing to undo) */
    double since;   /* when chosen, or bound */
    double judged;  /* when kube-scheduler last asked about it (filter, prioritize) */
} sched_pod;

/* Pods judged but not bound that kace tracks at most: past it, new pods are
 * failed (kube-scheduler retries them) instead of growing the queue. */
#define MAX_UNBOUND 4096

/* A GPU of the scheduler's cluster: its node and id (sorted, so numbered as
 * `kace schedule --cluster NxG` numbers GPUs). */
typedef struct topo_gpu {
    char node[254];
    char id[96];
} topo_gpu;

#define MAX_FINISHED 1024

struct kace_k8s_cluster {
    pthread_mutex_t lock;
    double assume_seconds;
    cached_node *nodes;
    size_t n_nodes, cap_nodes;
    pending_pod pending[MAX_PENDING];
    size_t n_pending;
    unsigned long long binds;
    /* the scheduler, when used */
    bool has_sched;
    kace_k8s_scheduler world;
    kace_sched *sched; /* NULL until a pod needs it and some node has GPUs */
    bool stale;        /* sched was built on a previous world: rebuild it */
    topo_gpu *topo;
    int n_topo;
    sched_pod *pods; /* in arrival order */
    size_t n_pods, cap_pods;
    int next_job;
    char finished[MAX_FINISHED][MAX_UID]; /* recently ended pods' UIDs: a stale report does not revive them */
    size_t next_finished;
    unsigned long long ended;
    double now; /* for on_start */
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
    kace_sched_free(&(*c)->sched);
    free((*c)->topo);
    free((*c)->pods);
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

/* ---- the scheduler: `kace schedule`'s policy over the cached nodes ------------ */

static void forget_pod(kace_k8s_cluster *c, sched_pod *p);
static kace_status ensure_sched(kace_ctx *ctx, kace_k8s_cluster *c, double now);

/* The pods kace knows keep their workloads by name in a new world: a pod
 * whose workload the new pool lacks is forgotten (kube-scheduler asks again,
 * and the pod is judged anew). */
static void rename_workloads(kace_k8s_cluster *c, const kace_k8s_scheduler *w)
{
    for (size_t i = 0; i < c->n_pods;) {
        sched_pod *p = &c->pods[i];
        int to = kace_dataset_find(w->profiles, c->world.profiles->workloads[p->workload].name);
        bool in_pool = false;
        for (int k = 0; to >= 0 && k < w->n_pool && !in_pool; k++)
            in_pool = w->pool[k] == to;
        if (in_pool) {
            p->workload = to;
            i++;
        } else {
            forget_pod(c, p);
        }
    }
}

kace_status kace_k8s_cluster_use_scheduler(kace_ctx *ctx, kace_k8s_cluster *c, const kace_k8s_scheduler *w)
{
    kace_status st = KACE_OK;
    if (!w) { /* back to scoring by predicted gain: the scheduler and what it held go */
        pthread_mutex_lock(&c->lock);
        kace_sched_free(&c->sched);
        free(c->topo);
        c->topo = NULL;
        c->n_topo = 0;
        c->n_pods = 0;
        c->has_sched = false;
        memset(&c->world, 0, sizeof c->world);
        pthread_mutex_unlock(&c->lock);
        return KACE_OK;
    }
    /* A one-GPU trial checks the configuration now rather than at the first pod. */
    int one = 1;
    kace_sched *trial = NULL;
    st = kace_sched_new(ctx, &w->config, w->profiles, w->pool, w->n_pool, w->runnable, w->rates, &one, 1, NULL, NULL,
                        &trial);
    kace_sched_free(&trial);
    if (st)
        return st;
    pthread_mutex_lock(&c->lock);
    if (c->has_sched)
        rename_workloads(c, w);
    c->world = *w;
    c->has_sched = true;
    /* A scheduler built on the previous world (its rates are read once, at
     * creation) is rebuilt now on this one, with the pods where they are:
     * the caller may free the previous world as soon as this returns. */
    if (c->sched) {
        c->stale = true;
        st = ensure_sched(ctx, c, c->now);
    }
    pthread_mutex_unlock(&c->lock);
    return st;
}

static sched_pod *pod_of_job(kace_k8s_cluster *c, int job)
{
    for (size_t i = 0; i < c->n_pods; i++)
        if (c->pods[i].job == job)
            return &c->pods[i];
    return NULL;
}

static void on_start(void *user, int job, const int *gpus, int n)
{
    kace_k8s_cluster *c = user;
    sched_pod *p = pod_of_job(c, job);
    if (p && n >= 1) {
        p->state = POD_CHOSEN;
        p->gpu = gpus[0];
        p->since = c->now;
    }
}

/* The pod a uid or "namespace/name" names ("" matches nothing). */
static sched_pod *find_pod(kace_k8s_cluster *c, const char *uid, const char *pod)
{
    for (size_t i = 0; i < c->n_pods; i++) {
        const sched_pod *p = &c->pods[i];
        if ((uid[0] && strcmp(p->uid, uid) == 0) || (!uid[0] && pod[0] && strcmp(p->pod, pod) == 0))
            return &c->pods[i];
    }
    return NULL;
}

static bool recently_finished(const kace_k8s_cluster *c, const char *uid)
{
    for (size_t i = 0; uid[0] && i < MAX_FINISHED; i++)
        if (strcmp(c->finished[i], uid) == 0)
            return true;
    return false;
}

static void forget_pod(kace_k8s_cluster *c, sched_pod *p)
{
    if (p->uid[0]) {
        snprintf(c->finished[c->next_finished], MAX_UID, "%s", p->uid);
        c->next_finished = (c->next_finished + 1) % MAX_FINISHED;
    }
    size_t i = (size_t)(p - c->pods);
    memmove(&c->pods[i], &c->pods[i + 1], (c->n_pods - i - 1) * sizeof *c->pods);
    c->n_pods--;
}

static sched_pod *add_pod(kace_k8s_cluster *c, const char *uid, const char *pod, int workload, bool ls)
{
    if (c->n_pods == c->cap_pods) {
        size_t cap = c->cap_pods ? 2 * c->cap_pods : 64;
        sched_pod *grown = realloc(c->pods, cap * sizeof *grown);
        if (!grown)
            return NULL;
        c->pods = grown;
        c->cap_pods = cap;
    }
    sched_pod *p = &c->pods[c->n_pods++];
    memset(p, 0, sizeof *p);
    snprintf(p->uid, sizeof p->uid, "%s", uid);
    snprintf(p->pod, sizeof p->pod, "%s", pod);
    p->job = c->next_job++;
    p->workload = workload;
    p->ls = ls;
    p->state = POD_QUEUED;
    p->gpu = -1;
    return p;
}

static kace_sched_job job_of(const sched_pod *p)
{
    return (kace_sched_job){.id = p->job, .workload = p->workload, .ls = p->ls, .gpu_milli = 1000, .num_gpu = 1};
}

/* A pod leaves the scheduler (ended, or never bound): its GPU is freed and
 * queued pods that now fit start (on_start). */
static kace_status end_pod(kace_ctx *ctx, kace_k8s_cluster *c, sched_pod *p)
{
    int job = p->job;
    forget_pod(c, p); /* first: on_start must not find it */
    c->ended++;
    return c->sched ? kace_sched_withdraw(ctx, c->sched, job) : KACE_OK;
}

static int cmp_topo(const void *x, const void *y)
{
    const topo_gpu *a = x, *b = y;
    int d = strcmp(a->node, b->node);
    return d ? d : strcmp(a->id, b->id);
}

static int topo_find(const kace_k8s_cluster *c, const char *node, const char *id)
{
    topo_gpu key;
    snprintf(key.node, sizeof key.node, "%s", node);
    snprintf(key.id, sizeof key.id, "%s", id);
    const topo_gpu *t = c->n_topo ? bsearch(&key, c->topo, (size_t)c->n_topo, sizeof key, cmp_topo) : NULL;
    return t ? (int)(t - c->topo) : -1;
}

/* How the scheduler names a member: its UID, else its pod, else (a bare
 * workload name in an annotation) its place: node, GPU, workload, ordinal. */
static void member_ident(const cached_node *cn, const cached_gpu *g, int i, char uid[MAX_UID], char pod[MAX_POD])
{
    const member *m = &g->m[i];
    snprintf(uid, MAX_UID, "%s", m->uid);
    if (m->uid[0] || m->pod[0]) {
        snprintf(pod, MAX_POD, "%s", m->pod);
        return;
    }
    int k = 0;
    for (int j = 0; j < i; j++)
        k += !g->m[j].uid[0] && !g->m[j].pod[0] && strcmp(g->m[j].workload, m->workload) == 0;
    snprintf(pod, MAX_POD, "~%.100s/%.90s/%.100s#%d", cn->name, g->id, m->workload, k);
}

/* Starts the pods a node's state lists that kace did not place (placed before
 * kace serve started, or by someone else) where they run. Best effort: a pod
 * of a workload outside the scheduler's pool cannot be counted. */
static void add_unplaced(kace_k8s_cluster *c, const cached_node *cn, double now)
{
    if (!c->sched)
        return;
    for (int g = 0; g < cn->n_gpus; g++)
        for (int i = 0; i < cn->gpus[g].n; i++) {
            const member *m = &cn->gpus[g].m[i];
            char uid[MAX_UID], pod[MAX_POD];
            member_ident(cn, &cn->gpus[g], i, uid, pod);
            if (!isnan(m->assumed_at) || find_pod(c, uid, pod) || recently_finished(c, uid))
                continue;
            int gpu = topo_find(c, cn->name, cn->gpus[g].id);
            int w = kace_dataset_find(c->world.profiles, m->workload);
            if (gpu < 0 || w < 0)
                continue;
            sched_pod *p = add_pod(c, uid, pod, w, false);
            if (!p)
                return;
            kace_ctx *scratch = kace_ctx_new();
            kace_sched_job job = job_of(p);
            if (!scratch || kace_sched_start_on(scratch, c->sched, &job, gpu) != KACE_OK) {
                c->n_pods--; /* the last one: not in the scheduler */
            } else {
                p->state = POD_BOUND;
                p->gpu = gpu;
                p->confirmed = true;
                p->since = now;
            }
            kace_ctx_free(&scratch);
        }
}

/* (Re)builds the scheduler when the cached nodes' GPUs changed, replaying the
 * pods it knows: those running where they run, then the queued ones in
 * arrival order. */
static kace_status ensure_sched(kace_ctx *ctx, kace_k8s_cluster *c, double now)
{
    c->now = now;
    /* A pod judged but never bound for the assume time is forgotten: chosen,
     * the scheduler gave up on it; queued, it was deleted, or asked about by
     * someone other than kube-scheduler (which asks again at least every
     * few minutes: a forgotten pod is simply queued anew). So no pod holds a
     * GPU, or a place in the queue, that nobody will bind. */
    for (size_t i = 0; i < c->n_pods;) {
        sched_pod *p = &c->pods[i];
        double idle = now - fmax(p->since, p->judged);
        if ((p->state == POD_CHOSEN || p->state == POD_QUEUED) && idle > c->assume_seconds) {
            kace_status st = end_pod(ctx, c, p);
            if (st)
                return st;
        } else {
            i++;
        }
    }
    int n = 0;
    for (size_t i = 0; i < c->n_nodes; i++)
        n += c->nodes[i].n_gpus;
    if (n == 0)
        return KACE_OK;
    bool same = c->sched && !c->stale && n == c->n_topo;
    topo_gpu *t = malloc((size_t)n * sizeof *t);
    int *node_gpus = calloc(c->n_nodes, sizeof *node_gpus);
    if (!t || !node_gpus) {
        free(t);
        free(node_gpus);
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    }
    int k = 0;
    for (size_t i = 0; i < c->n_nodes; i++)
        for (int g = 0; g < c->nodes[i].n_gpus; g++, k++) {
            snprintf(t[k].node, sizeof t[k].node, "%s", c->nodes[i].name);
            snprintf(t[k].id, sizeof t[k].id, "%s", c->nodes[i].gpus[g].id);
        }
    qsort(t, (size_t)n, sizeof *t, cmp_topo);
    for (int i = 0; same && i < n; i++)
        same = cmp_topo(&t[i], &c->topo[i]) == 0;
    size_t n_nodes = 0;
    for (int i = 0; i < n; i++) {
        if (i == 0 || strcmp(t[i].node, t[i - 1].node) != 0)
            n_nodes++;
        node_gpus[n_nodes - 1]++;
    }
    kace_sched *fresh = NULL;
    kace_status st = same ? KACE_OK
                          : kace_sched_new(ctx, &c->world.config, c->world.profiles, c->world.pool, c->world.n_pool,
                                           c->world.runnable, c->world.rates, node_gpus, n_nodes, on_start, c, &fresh);
    free(node_gpus);
    if (same || st) {
        free(t);
        return st;
    }
    topo_gpu *old_topo = c->topo;
    kace_sched *old = c->sched;
    c->sched = fresh;
    c->stale = false;
    c->topo = t;
    c->n_topo = n;
    kace_ctx *scratch = kace_ctx_new();
    /* running pods where they run; a bound pod whose GPU is gone has ended */
    for (size_t i = 0; i < c->n_pods;) {
        sched_pod *p = &c->pods[i];
        if (p->state == POD_QUEUED) {
            i++;
            continue;
        }
        int gpu = topo_find(c, old_topo[p->gpu].node, old_topo[p->gpu].id);
        kace_sched_job job = job_of(p);
        int state = p->state;
        double since = p->since;
        if (gpu >= 0 && scratch && kace_sched_start_on(scratch, fresh, &job, gpu) == KACE_OK) {
            p->state = state;
            p->since = since;
            i++;
        } else if (state == POD_CHOSEN) {
            p->state = POD_QUEUED; /* decided again below */
            i++;
        } else {
            forget_pod(c, p);
        }
    }
    free(old_topo);
    kace_sched_free(&old);
    for (size_t i = 0; i < c->n_pods && !st; i++)
        if (c->pods[i].state == POD_QUEUED) {
            kace_sched_job job = job_of(&c->pods[i]);
            st = kace_sched_submit(ctx, fresh, &job);
        }
    kace_ctx_free(&scratch);
    for (size_t i = 0; i < c->n_nodes && !st; i++)
        add_unplaced(c, &c->nodes[i], now);
    return st;
}

/* After a node's state was replaced: a bound pod it lists is confirmed; one it
 * no longer lists has ended when it was confirmed before (or bound longer
 * than the assume time ago). authoritative: the state comes from the node's
 * agent (a Node object the scheduler sends may be older than its report). */
static kace_status reconcile(kace_ctx *ctx, kace_k8s_cluster *c, const char *node, bool authoritative, double now)
{
    if (!c->sched)
        return KACE_OK;
    c->now = now;
    cached_node *cn = find_node(c, node);
    if (!cn)
        return KACE_OK;
    for (size_t i = 0; i < c->n_pods;) {
        sched_pod *p = &c->pods[i];
        if (p->state != POD_BOUND || strcmp(c->topo[p->gpu].node, node) != 0) {
            i++;
            continue;
        }
        bool listed = false;
        for (int g = 0; g < cn->n_gpus && !listed; g++)
            for (int j = 0; j < cn->gpus[g].n && !listed; j++) {
                char uid[MAX_UID], pod[MAX_POD];
                member_ident(cn, &cn->gpus[g], j, uid, pod);
                listed = isnan(cn->gpus[g].m[j].assumed_at) &&
                         ((p->uid[0] && strcmp(uid, p->uid) == 0) || (!p->uid[0] && strcmp(pod, p->pod) == 0));
            }
        if (listed) {
            p->confirmed = true;
            i++;
        } else if (authoritative && (p->confirmed || now - p->since > c->assume_seconds)) {
            kace_status st = end_pod(ctx, c, p);
            if (st)
                return st;
        } else {
            i++;
        }
    }
    add_unplaced(c, cn, now);
    return KACE_OK;
}

/* The pod's workload name (label, else annotation), or NULL. */
static const char *pod_workload_name(const cJSON *pod)
{
    const cJSON *v = metadata_value(pod, "labels", WORKLOAD_KEY);
    if (!cJSON_IsString(v))
        v = metadata_value(pod, "annotations", WORKLOAD_KEY);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* ---- judging a node --------------------------------------------------------- */

typedef struct node_verdict {
    bool pass;
    bool unresolvable; /* failed for a reason evicting pods there cannot change (failedAndUnresolvableNodes) */
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
        v->unresolvable = true;
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
        /* by gain in normalized throughput whatever the objective: the
         * score is 10 * gain, which only shares make a 0..10 scale of */
        kace_status st =
            kace_serve_score_gpu(ctx, a, KACE_OBJ_NORMALIZED, job, resident, n, a->opt.max_colocation, &s);
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
        v->unresolvable = true;
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
        v->unresolvable = true;
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
        v->unresolvable = true;
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

static size_t n_unbound(const kace_k8s_cluster *c)
{
    size_t n = 0;
    for (size_t i = 0; i < c->n_pods; i++)
        n += c->pods[i].state != POD_BOUND;
    return n;
}

/* Whether kube-scheduler offered the node (Node objects, or names). */
static bool offered(const cJSON *items, const cJSON *names, const char *node)
{
    for (const cJSON *it = items ? items->child : names->child; it; it = it->next) {
        const char *name = items ? node_name(it) : it->valuestring;
        if (name && strcmp(name, node) == 0)
            return true;
    }
    return false;
}

/* The scheduler chose a GPU on a node kube-scheduler did not offer: the
 * choice is let go (the GPU is free for others at once) and the pod starts
 * on the least busy GPU of an offered node instead (an idle one only, under
 * the exclusive policy), ties to the first in kace schedule's order. When
 * none can take it, the pod is forgotten (*p NULL): it holds nothing, and
 * kube-scheduler's next try submits it anew. The policy's own ranking thus
 * decides only when its choice is offered. */
static kace_status choose_among_offered(kace_ctx *ctx, kace_k8s_cluster *c, sched_pod **p, const char *uid,
                                        const char *pname, const cJSON *items, const cJSON *names, double now)
{
    kace_sched_job job = job_of(*p);
    c->now = now;
    kace_status st = kace_sched_withdraw(ctx, c->sched, job.id);
    if (st)
        return st;
    *p = find_pod(c, uid, pname); /* other pods may have started (on_start) */
    (*p)->state = POD_QUEUED;
    (*p)->gpu = -1;
    int ids[KACE_SCHED_MAX_GROUP];
    int best = -1, best_load = 0;
    for (int g = 0; g < c->n_topo; g++) {
        if (!offered(items, names, c->topo[g].node))
            continue;
        int load = kace_sched_gpu_jobs(c->sched, g, ids);
        if (c->world.config.policy == KACE_SCHED_EXCLUSIVE && load > 0)
            continue;
        if (best < 0 || load < best_load) {
            best = g;
            best_load = load;
        }
    }
    kace_ctx *scratch = kace_ctx_new();
    bool started = best >= 0 && scratch && kace_sched_start_on(scratch, c->sched, &job, best) == KACE_OK;
    kace_ctx_free(&scratch);
    *p = find_pod(c, uid, pname);
    if (!started || (*p)->state != POD_CHOSEN) {
        forget_pod(c, *p);
        *p = NULL;
    }
    return KACE_OK;
}

/* Filter and prioritize with the scheduler. *handled is false when the pod
 * is not the scheduler's (no workload of its pool): the caller lets it pass. */
static kace_status sched_judge(kace_ctx *ctx, kace_k8s_cluster *c, double now, const cJSON *pod, const cJSON *items,
                               const cJSON *names, node_verdict **out, bool *handled)
{
    *out = NULL;
    *handled = false;
    const char *wname = pod_workload_name(pod);
    int w = wname ? kace_dataset_find(c->world.profiles, wname) : -1;
    bool in_pool = false;
    for (int i = 0; w >= 0 && i < c->world.n_pool; i++)
        in_pool = in_pool || c->world.pool[i] == w;
    if (!in_pool)
        return KACE_OK;
    *handled = true;
    int n = cJSON_GetArraySize(items ? items : names);
    node_verdict *v = calloc(n ? (size_t)n : 1, sizeof *v);
    if (!v)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    kace_status st = KACE_OK;
    pthread_mutex_lock(&c->lock);
    /* Full Node objects (nodeCacheCapable false): their annotations refresh the cache. */
    for (const cJSON *it = items ? items->child : NULL; it && !st; it = it->next) {
        const cJSON *ann = metadata_value(it, "annotations", GPUS_KEY);
        const char *name = node_name(it);
        if (!cJSON_IsString(ann))
            continue;
        cached_node *before = find_node(c, name);
        bool authoritative = !before || !before->agent;
        cJSON *gpus = cJSON_Parse(ann->valuestring);
        kace_ctx *scratch = kace_ctx_new(); /* a bad annotation leaves the node as it was */
        kace_status bad = !scratch ? KACE_ERR_NOMEM : gpus ? cache_node(scratch, c, name, gpus, "node", now) : KACE_ERR_INVALID;
        cJSON_Delete(gpus);
        kace_ctx_free(&scratch);
        if (bad == KACE_ERR_NOMEM)
            st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
        else if (!bad)
            st = reconcile(ctx, c, name, authoritative, now);
    }
    if (!st)
        st = ensure_sched(ctx, c, now);
    char uid[64], pname[320];
    pod_identity(pod, uid, pname);
    sched_pod *p = NULL;
    if (!st && c->sched && !(p = find_pod(c, uid, pname)) && n_unbound(c) < MAX_UNBOUND) {
        const cJSON *qos = metadata_value(pod, "labels", QOS_KEY);
        bool ls = cJSON_IsString(qos) && strcmp(qos->valuestring, "LS") == 0;
        if (!(p = add_pod(c, uid, pname, w, ls))) {
            st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
        } else {
            kace_sched_job job = job_of(p);
            c->now = now;
            if ((st = kace_sched_submit(ctx, c->sched, &job)))
                c->n_pods--; /* the last one */
            p = st ? NULL : find_pod(c, uid, pname);
        }
    }
    if (p)
        p->judged = now;
    /* kube-scheduler offers only the nodes its own filters passed (taints,
     * affinity, resources): a choice elsewhere is moved among them, or let go */
    bool let_go = !st && p && p->state == POD_CHOSEN && !offered(items, names, c->topo[p->gpu].node);
    if (let_go)
        st = choose_among_offered(ctx, c, &p, uid, pname, items, names, now);
    int i = 0;
    for (const cJSON *it = items ? items->child : names->child; it && !st; it = it->next, i++) {
        const char *name = items ? node_name(it) : it->valuestring;
        v[i].best_gpu = -1;
        v[i].best_gain = NAN;
        const cached_node *cn = find_node(c, name);
        v[i].unresolvable = true; /* but where kace's scheduler has no GPU now */
        if (!c->sched || (!cn && !items))
            snprintf(v[i].reason, sizeof v[i].reason,
                     "kace knows nothing of node '%.64s' (no kace agent report, no Node object with %s seen)", name,
                     GPUS_KEY);
        else if (!cn)
            snprintf(v[i].reason, sizeof v[i].reason, "no %s annotation (not a kace GPU node)", GPUS_KEY);
        else if (!p && let_go) {
            v[i].unresolvable = false;
            snprintf(v[i].reason, sizeof v[i].reason, "kace's scheduler (policy %s) has no GPU for the pod on the "
                     "offered nodes now", kace_sched_policy_name(c->world.config.policy));
        } else if (!p) {
            v[i].unresolvable = false;
            snprintf(v[i].reason, sizeof v[i].reason, "kace tracks %d pods waiting for a GPU already; asked again later",
                     MAX_UNBOUND);
        } else if (p->state == POD_QUEUED) {
            v[i].unresolvable = false;
            snprintf(v[i].reason, sizeof v[i].reason,
                     "kace's scheduler (policy %s) queues the pod: no GPU of the offered nodes takes it now (%zu pod(s) "
                     "wait)", kace_sched_policy_name(c->world.config.policy), kace_sched_n_queued(c->sched));
        } else if (strcmp(c->topo[p->gpu].node, name) != 0)
            snprintf(v[i].reason, sizeof v[i].reason, "kace's scheduler placed the pod on GPU '%.64s' of node '%.64s'",
                     c->topo[p->gpu].id, c->topo[p->gpu].node);
        else
            v[i].pass = true;
    }
    pthread_mutex_unlock(&c->lock);
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
    node_verdict *v = NULL;
    bool handled = false; /* by the scheduler */
    if (c && c->has_sched && (st = sched_judge(ctx, c, now, pod, items, names, &v, &handled)))
        return st;
    /* Nothing to judge: not kace's pod, a model without member predictions,
     * or node names without a cache. */
    if (!handled && (job < 0 || !can || (!items && !c))) {
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
    if (!handled) {
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
    /* Preemption (evicting lower-priority pods) is tried only on failedNodes:
     * a node kace does not know, without kace's GPUs, or not the one kace's
     * scheduler chose, goes to failedAndUnresolvableNodes, so that no pod is
     * evicted for nothing. */
    cJSON *failed = cJSON_CreateObject(), *unresolvable = cJSON_CreateObject(), *passed = cJSON_CreateArray();
    int i = 0;
    for (const cJSON *it = items ? items->child : names->child; it && failed && unresolvable && passed;
         it = it->next, i++) {
        if (v[i].pass)
            cJSON_AddItemToArray(passed, cJSON_Duplicate(it, true));
        else
            cJSON_AddStringToObject(v[i].unresolvable ? unresolvable : failed, items ? node_name(it) : it->valuestring,
                                    v[i].reason);
    }
    free(v);
    if (!failed || !unresolvable || !passed) {
        cJSON_Delete(failed);
        cJSON_Delete(unresolvable);
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
    cJSON_AddItemToObject(out, "failedAndUnresolvableNodes", unresolvable);
    cJSON_AddStringToObject(out, "error", "");
    *decision = handled ? kace_sched_policy_name(c->world.config.policy) : kace_advisor_policy(a);
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
    bool handled = false; /* by the scheduler: its node scores 10, the others 0 */
    if (c && c->has_sched && (st = sched_judge(ctx, c, now, pod, items, names, &v, &handled)))
        return st;
    if (handled)
        judge = false;
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
        double score = handled ? (v[i].pass ? 10 : 0) : judge && v[i].pass ? round(10 * fmin(1, fmax(0, v[i].best_gain))) : 0;
        cJSON *h = cJSON_CreateObject();
        if (!cJSON_AddItemToArray(list, h))
            break;
        cJSON_AddStringToObject(h, "host", items ? node_name(it) : it->valuestring);
        cJSON_AddNumberToObject(h, "score", score);
    }
    free(v);
    *out = list;
    *decision = handled ? kace_sched_policy_name(c->world.config.policy) : judge ? kace_advisor_policy(a) : "none";
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

/* Bind with the scheduler: the pod goes where the scheduler started it. */
static kace_status sched_bind(kace_ctx *ctx, kace_k8s_cluster *c, sched_pod *p, const char *node, const char *uid,
                              const char *pod, double now, char gpu_id[96], char workload[KACE_NAME_MAX], int *mps,
                              char why[200])
{
    if (p->state == POD_QUEUED) {
        snprintf(why, 200, "kace's scheduler queues the pod: no GPU takes it now");
        return KACE_OK;
    }
    const topo_gpu *t = &c->topo[p->gpu];
    if (strcmp(t->node, node) != 0) {
        snprintf(why, 200, "kace's scheduler placed the pod on GPU '%.64s' of node '%.64s'", t->id, t->node);
        return KACE_OK;
    }
    int jobs[KACE_SCHED_MAX_GROUP];
    int k = kace_sched_gpu_jobs(c->sched, p->gpu, jobs);
    /* An equal share of the GPU's threads among the pods on it, this one
     * included (the running ones keep theirs: MPS fixes it when a client starts). */
    *mps = 100 / (k > 0 ? k : 1);
    if (p->state == POD_CHOSEN) {
        cached_node *cn = find_node(c, node);
        cached_gpu *g = NULL;
        for (int i = 0; cn && i < cn->n_gpus && !g; i++)
            if (strcmp(cn->gpus[i].id, t->id) == 0)
                g = &cn->gpus[i];
        if (g && g->n < KACE_MAX_K) { /* shown assumed until the agent reports it */
            member *m = &g->m[g->n];
            memset(m, 0, sizeof *m);
            if (!member_set(m, c->world.profiles->workloads[p->workload].name, uid, pod))
                return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
            g->n++;
            m->mps = *mps;
            m->assumed_at = now;
        }
        p->state = POD_BOUND;
        p->since = now;
        p->confirmed = false;
        c->binds++;
    } else {
        p->rebinds++;
    }
    snprintf(gpu_id, 96, "%s", t->id);
    snprintf(workload, KACE_NAME_MAX, "%s", c->world.profiles->workloads[p->workload].name);
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
    sched_pod *sp = NULL;
    if (c->has_sched) {
        st = ensure_sched(ctx, c, now);
        if (!st && !(sp = find_pod(c, uid, pod)) && uid[0])
            sp = find_pod(c, "", pod);
    }
    if (sp) {
        st = sched_bind(ctx, c, sp, node, uid, pod, now, gpu_id, workload, &mps, why);
    } else if (!st) {
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
    *decision = !gpu_id[0] ? "none" : c->has_sched ? kace_sched_policy_name(c->world.config.policy) : kace_advisor_policy(a);
    return KACE_OK;
}

void kace_k8s_cluster_unbind(kace_k8s_cluster *c, const char *node, const char *pod_namespace, const char *pod_name)
{
    char pod[320];
    snprintf(pod, sizeof pod, "%s/%s", pod_namespace && pod_namespace[0] ? pod_namespace : "default", pod_name);
    pthread_mutex_lock(&c->lock);
    sched_pod *sp = c->has_sched ? find_pod(c, "", pod) : NULL;
    if (sp && sp->rebinds > 0) { /* a bind of a pod already bound: the first one stands */
        sp->rebinds--;
        pthread_mutex_unlock(&c->lock);
        return;
    }
    if (sp && sp->state == POD_BOUND) { /* still the scheduler's choice: the retried bind goes there */
        sp->state = POD_CHOSEN;
        sp->since = c->now;
    }
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
    if (!st) {
        find_node(c, node->valuestring)->agent = true;
        st = reconcile(ctx, c, node->valuestring, true, now);
    }
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
    if (c->has_sched) { /* what kace's scheduler holds: pods by state */
        cJSON *js = cJSON_AddObjectToObject(out, "scheduler");
        size_t by_state[POD_BOUND + 1] = {0};
        for (size_t i = 0; i < c->n_pods; i++)
            by_state[c->pods[i].state]++;
        cJSON_AddStringToObject(js, "policy", kace_sched_policy_name(c->world.config.policy));
        cJSON_AddNumberToObject(js, "gpus", c->sched ? c->n_topo : 0);
        cJSON_AddNumberToObject(js, "queued", (double)by_state[POD_QUEUED]);
        cJSON_AddNumberToObject(js, "chosen", (double)by_state[POD_CHOSEN]);
        cJSON_AddNumberToObject(js, "bound", (double)by_state[POD_BOUND]);
        cJSON_AddNumberToObject(js, "ended", (double)c->ended);
    }
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
