/* kace agent's view of its node (include/kace/agent.h). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "kace/agent.h"

#define MAX_GPUS 64
#define MAX_PER_GPU 8 /* KACE_MAX_K: the extender skips a GPU with more */

static const char *annotation(const cJSON *pod, const char *key)
{
    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(pod, "metadata");
    const cJSON *ann = cJSON_GetObjectItemCaseSensitive(meta, "annotations");
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(ann, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static const char *meta_string(const cJSON *pod, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(pod, "metadata"), key);
    return cJSON_IsString(v) ? v->valuestring : "";
}

kace_status kace_agent_node_state(kace_ctx *ctx, const char *const *gpu_ids, size_t n_gpus, const char *pod_list,
                                  size_t len, char **out, size_t *n_foreign)
{
    *out = NULL;
    if (n_foreign)
        *n_foreign = 0;
    if (n_gpus > MAX_GPUS)
        return kace_fail(ctx, KACE_ERR_INVALID, "more than %d GPUs on one node", MAX_GPUS);
    cJSON *list = pod_list ? cJSON_ParseWithLength(pod_list, len) : NULL;
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(list, "items");
    if (!cJSON_IsObject(list) || !(cJSON_IsArray(items) || cJSON_IsNull(items))) {
        cJSON_Delete(list);
        return kace_fail(ctx, KACE_ERR_PARSE, "pod list: expected a PodList object with an 'items' array");
    }
    cJSON *state = cJSON_CreateObject();
    cJSON *per_gpu[MAX_GPUS];
    kace_status st = state ? KACE_OK : kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    for (size_t g = 0; g < n_gpus && !st; g++) {
        if (!gpu_ids[g] || !gpu_ids[g][0] || cJSON_GetObjectItemCaseSensitive(state, gpu_ids[g]))
            st = kace_fail(ctx, KACE_ERR_INVALID, "GPU %zu: its id is empty or repeated", g);
        else if (!(per_gpu[g] = cJSON_AddArrayToObject(state, gpu_ids[g])))
            st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    }
    int i = 0;
    for (const cJSON *pod = cJSON_IsArray(items) ? items->child : NULL; pod && !st; pod = pod->next, i++) {
        const char *gpu = annotation(pod, "kace.io/gpu"), *workload = annotation(pod, "kace.io/workload");
        const cJSON *phase = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(pod, "status"), "phase");
        bool ended = cJSON_IsString(phase) &&
                     (strcmp(phase->valuestring, "Succeeded") == 0 || strcmp(phase->valuestring, "Failed") == 0);
        if (!cJSON_IsObject(pod)) {
            st = kace_fail(ctx, KACE_ERR_PARSE, "pod list: items[%d] is not a Pod object", i);
            break;
        }
        if (!gpu || !workload || !workload[0] || ended || meta_string(pod, "deletionTimestamp")[0])
            continue; /* not placed by kace, or not on the GPU any more */
        if (strlen(workload) >= 128 || strlen(meta_string(pod, "uid")) >= 64)
            continue; /* not a name kace gives: kace serve would refuse the report */
        size_t g = 0;
        while (g < n_gpus && strcmp(gpu_ids[g], gpu) != 0)
            g++;
        if (g == n_gpus) {
            if (n_foreign)
                (*n_foreign)++;
            continue;
        }
        if (cJSON_GetArraySize(per_gpu[g]) >= MAX_PER_GPU)
            continue; /* more than kace places: the GPU is full either way */
        cJSON *m = cJSON_CreateObject();
        char name[330];
        snprintf(name, sizeof name, "%.63s/%.253s", meta_string(pod, "namespace")[0] ? meta_string(pod, "namespace") : "default",
                 meta_string(pod, "name"));
        const char *mps = annotation(pod, "kace.io/mps-percentage");
        char *end = NULL;
        double pct = mps ? strtod(mps, &end) : 0;
        if (!m || !cJSON_AddItemToArray(per_gpu[g], m)) {
            cJSON_Delete(m);
            st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
            break;
        }
        cJSON_AddStringToObject(m, "workload", workload);
        cJSON_AddStringToObject(m, "uid", meta_string(pod, "uid"));
        cJSON_AddStringToObject(m, "pod", name);
        if (mps && end && *end == '\0' && pct > 0 && pct <= 100)
            cJSON_AddNumberToObject(m, "mps", (int)pct);
    }
    if (!st && !(*out = cJSON_PrintUnformatted(state)))
        st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    cJSON_Delete(state);
    cJSON_Delete(list);
    return st;
}
