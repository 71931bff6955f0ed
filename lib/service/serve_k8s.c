/* The Kubernetes scheduler-extender protocol (filter and prioritize).
 *
 * The scheduler POSTs ExtenderArgs {"pod", "nodes": {"items": [...]},
 * "nodenames"}; filter answers an ExtenderFilterResult {"nodes" or
 * "nodenames", "failedNodes", "failedAndUnresolvableNodes", "error"},
 * prioritize a HostPriorityList [{"host", "score"}] with scores 0..10 (the
 * scheduler's MaxExtenderPriority). Keys are matched case-insensitively, as
 * the scheduler's Go decoder does.
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "advisor.h"
#include "serve_k8s.h"

#define WORKLOAD_KEY "kace.io/workload"
#define GPUS_KEY "kace.io/gpus"
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

typedef struct node_verdict {
    bool pass;
    char reason[200];
    double best_gain; /* NaN when no GPU is eligible */
} node_verdict;

static kace_status judge_node(kace_ctx *ctx, const kace_advisor *a, int job, const cJSON *node, node_verdict *v)
{
    v->pass = false;
    v->best_gain = NAN;
    const cJSON *ann = metadata_value(node, "annotations", GPUS_KEY);
    if (!cJSON_IsString(ann)) {
        snprintf(v->reason, sizeof v->reason, "no %s annotation (not a kace GPU node)", GPUS_KEY);
        return KACE_OK;
    }
    cJSON *gpus = cJSON_Parse(ann->valuestring);
    if (!cJSON_IsObject(gpus) || !gpus->child) {
        snprintf(v->reason, sizeof v->reason, "%s must be a JSON object {\"<gpu>\": [workloads...]}", GPUS_KEY);
        cJSON_Delete(gpus);
        return KACE_OK;
    }
    kace_status st = KACE_OK;
    snprintf(v->reason, sizeof v->reason, "no GPU can take the pod");
    for (const cJSON *g = gpus->child; g; g = g->next) {
        int resident[KACE_MAX_K], n = 0;
        bool known = cJSON_IsArray(g) && cJSON_GetArraySize(g) < KACE_MAX_K;
        for (const cJSON *w = known ? g->child : NULL; w && known; w = w->next) {
            known = cJSON_IsString(w) && (resident[n] = kace_dataset_find(a->ds, w->valuestring)) >= 0;
            n++;
        }
        if (!known) { /* cannot predict this GPU: leave it to others */
            snprintf(v->reason, sizeof v->reason, "GPU '%.64s' runs %d or more workloads, or ones kace does not know",
                     g->string, KACE_MAX_K);
            continue;
        }
        kace_gpu_score s;
        if ((st = kace_serve_score_gpu(ctx, a, job, resident, n, a->opt.max_colocation, &s)))
            break;
        if (!s.eligible) {
            snprintf(v->reason, sizeof v->reason, "GPU '%.64s' %.120s", g->string, s.reason);
            continue;
        }
        if (s.confidence < a->opt.min_confidence || s.job_fraction < a->opt.min_fraction) {
            snprintf(v->reason, sizeof v->reason,
                     "GPU '%.64s': the pod would keep %.2f of its throughput at confidence %.2f (min %.2f, %.2f)",
                     g->string, s.job_fraction, s.confidence, a->opt.min_fraction, a->opt.min_confidence);
            continue;
        }
        v->pass = true;
        if (isnan(v->best_gain) || s.gain > v->best_gain)
            v->best_gain = s.gain;
    }
    cJSON_Delete(gpus);
    if (v->pass)
        v->reason[0] = '\0';
    return st;
}

static const char *node_name(const cJSON *node)
{
    const cJSON *meta = cJSON_GetObjectItem(node, "metadata");
    const cJSON *name = meta ? cJSON_GetObjectItem(meta, "name") : NULL;
    return cJSON_IsString(name) && name->valuestring[0] ? name->valuestring : NULL;
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

kace_status kace_serve_k8s_filter(kace_ctx *ctx, const kace_advisor *a, const cJSON *req, cJSON *out,
                                  const char **decision)
{
    const cJSON *pod, *items, *names;
    kace_status st = parse_args(ctx, req, &pod, &items, &names);
    if (st)
        return st;
    int job = pod_workload(a, pod);
    cJSON *failed = cJSON_CreateObject();
    if (!failed)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    /* Without node objects (or a kace workload) there is nothing to judge. */
    if (job < 0 || !kace_predictor_can(kace_advisor_predictor(a), KACE_PRED_MEMBERS) || !items) {
        if (items) {
            cJSON *nodes = cJSON_AddObjectToObject(out, "nodes");
            if (nodes)
                cJSON_AddItemToObject(nodes, "items", cJSON_Duplicate(items, true));
        } else {
            cJSON_AddItemToObject(out, "nodenames", cJSON_Duplicate(names, true));
        }
        cJSON_AddItemToObject(out, "failedNodes", failed);
        cJSON_AddItemToObject(out, "failedAndUnresolvableNodes", cJSON_CreateObject());
        cJSON_AddStringToObject(out, "error", "");
        *decision = "none";
        return KACE_OK;
    }
    cJSON *passed = cJSON_CreateArray();
    if (!passed) {
        cJSON_Delete(failed);
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    }
    for (const cJSON *node = items->child; node; node = node->next) {
        node_verdict v;
        if ((st = judge_node(ctx, a, job, node, &v)))
            break;
        if (v.pass)
            cJSON_AddItemToArray(passed, cJSON_Duplicate(node, true));
        else
            cJSON_AddStringToObject(failed, node_name(node), v.reason);
    }
    if (st) {
        cJSON_Delete(failed);
        cJSON_Delete(passed);
        return st;
    }
    cJSON *nodes = cJSON_AddObjectToObject(out, "nodes");
    if (nodes)
        cJSON_AddItemToObject(nodes, "items", passed);
    else
        cJSON_Delete(passed);
    cJSON_AddItemToObject(out, "failedNodes", failed);
    cJSON_AddItemToObject(out, "failedAndUnresolvableNodes", cJSON_CreateObject());
    cJSON_AddStringToObject(out, "error", "");
    *decision = kace_advisor_policy(a);
    return KACE_OK;
}

kace_status kace_serve_k8s_prioritize(kace_ctx *ctx, const kace_advisor *a, const cJSON *req, cJSON **out,
                                      const char **decision)
{
    const cJSON *pod, *items, *names;
    kace_status st = parse_args(ctx, req, &pod, &items, &names);
    if (st)
        return st;
    int job = pod_workload(a, pod);
    bool judge = job >= 0 && kace_predictor_can(kace_advisor_predictor(a), KACE_PRED_MEMBERS) && items;
    cJSON *list = cJSON_CreateArray();
    if (!list)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    for (const cJSON *it = items ? items->child : names->child; it; it = it->next) {
        double score = 0;
        if (judge) {
            node_verdict v;
            if ((st = judge_node(ctx, a, job, it, &v))) {
                cJSON_Delete(list);
                return st;
            }
            if (v.pass)
                score = round(10 * fmin(1, fmax(0, v.best_gain)));
        }
        cJSON *h = cJSON_CreateObject();
        if (!cJSON_AddItemToArray(list, h))
            break;
        cJSON_AddStringToObject(h, "host", items ? node_name(it) : it->valuestring);
        cJSON_AddNumberToObject(h, "score", score);
    }
    *out = list;
    *decision = judge ? kace_advisor_policy(a) : "none";
    return KACE_OK;
}
