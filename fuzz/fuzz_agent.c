/* libFuzzer harness for kace agent's PodList reader (lib/service/agent.c):
 * kace_agent_node_state on any text, with three GPUs. Invariants: it fails
 * with a message or gives JSON listing every GPU, each with at most 8 pods
 * that all carry a workload. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "fuzz_common.h"
#include "kace/agent.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const gpus[] = {"GPU-a", "GPU-b", "GPU-c"};
    kace_ctx *ctx = kace_ctx_new();
    if (!ctx)
        return 0;
    char *out = NULL;
    size_t foreign = 0;
    kace_status st = kace_agent_node_state(ctx, gpus, 3, (const char *)data, size, &out, &foreign);
    if (st) {
        FUZZ_CHECK(!out, "output on failure");
        FUZZ_CHECK(kace_errmsg(ctx)[0], "failure without a message");
    } else {
        cJSON *j = cJSON_Parse(out);
        FUZZ_CHECK(cJSON_IsObject(j) && cJSON_GetArraySize(j) == 3, "not every GPU listed: %.200s", out);
        for (const cJSON *g = j->child; g; g = g->next) {
            FUZZ_CHECK(cJSON_IsArray(g) && cJSON_GetArraySize(g) <= 8, "GPU %s: bad list", g->string);
            for (const cJSON *m = g->child; m; m = m->next)
                FUZZ_CHECK(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(m, "workload")), "a pod without workload");
        }
        cJSON_Delete(j);
    }
    free(out);
    kace_ctx_free(&ctx);
    return 0;
}
