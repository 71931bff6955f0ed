/* kace's node cache for the Kubernetes extender (lib/service/serve_k8s.c),
 * without sockets: node names judged from the cache, binds assumed until an
 * agent report lists the pod or the assume time passes, the Binding kace asks
 * the front end to create, and bad reports refused without touching the
 * cache. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "kace/import.h"
#include "kace/serve.h"
#include "kace/store.h"
#include "testutil.h"

static kace_ctx *ctx;
static kace_advisor *adv;

static const char *BERT8 = "bert-base-cased_batch8-train";
static const char *VIT2 = "vit-base-patch16-224_batch2-inf";

static int setup(void **state)
{
    (void)state;
    ctx = kace_ctx_new();
    char db[4200];
    snprintf(db, sizeof db, "%s/store.db", scratch_dir("test_k8s"));
    kace_store *store = NULL;
    static const char *const files[] = {"profiles/system.csv", "colocations/pairs.csv", "colocations/triples.csv"};
    kace_dataset *pairs = NULL, *all = NULL;
    kace_model *m = NULL;
    kace_fit_spec spec = {.kind = KACE_MODEL_SLOWDOWN, .features = kace_feature_set_find("kace")};
    kace_slowdown_params_default(&spec.slowdown);
    if (kace_store_open(ctx, db, &store) || import_reference(ctx, store, files, 3) ||
        kace_store_load_dataset(ctx, store, "pairs", false, &pairs) ||
        kace_model_fit_rows(ctx, pairs, NULL, 0, &spec, &m) ||
        kace_store_load_dataset(ctx, store, NULL, false, &all) || kace_advisor_new(ctx, &all, &m, NULL, &adv)) {
        fprintf(stderr, "setup: %s\n", kace_errmsg(ctx));
        return -1;
    }
    kace_dataset_free(&pairs);
    kace_store_close(&store);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    kace_advisor_free(&adv);
    kace_ctx_free(&ctx);
    return 0;
}

/* Sends body to route at time now; checks the status; returns the reply. */
static cJSON *ask(kace_k8s_cluster *c, double now, kace_route route, const char *body, int want, kace_reply *keep)
{
    kace_reply r;
    kace_advisor_handle_k8s(ctx, adv, c, now, route, body, body ? strlen(body) : 0, &r);
    if (r.http_status != want)
        fail_msg("%s %s: status %d (want %d): %s", kace_route_name(route), body ? body : "", r.http_status, want,
                 r.body ? r.body : "");
    cJSON *j = cJSON_Parse(r.body);
    assert_non_null(j);
    if (keep)
        *keep = r;
    else
        kace_reply_clear(&r);
    return j;
}

static char *names_args(const char *workload, const char *uid)
{
    static char text[1024];
    snprintf(text, sizeof text,
             "{\"Pod\": {\"metadata\": {\"name\": \"p-%s\", \"namespace\": \"ml\", \"uid\": \"%s\", \"labels\": "
             "{\"kace.io/workload\": \"%s\"}}}, \"Nodes\": null, \"NodeNames\": [\"n1\", \"n2\"]}",
             uid, uid, workload);
    return text;
}

/* The members kace's state lists on a node's GPU. */
static int members_on(kace_k8s_cluster *c, double now, const char *node, const char *gpu, int *assumed)
{
    cJSON *j = ask(c, now, KACE_ROUTE_K8S_STATE, NULL, 200, NULL);
    int n = -1;
    *assumed = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(j, "nodes"))
    {
        if (strcmp(cJSON_GetObjectItem(it, "name")->valuestring, node) != 0)
            continue;
        const cJSON *g;
        cJSON_ArrayForEach(g, cJSON_GetObjectItem(it, "gpus"))
        {
            if (strcmp(cJSON_GetObjectItem(g, "id")->valuestring, gpu) != 0)
                continue;
            n = cJSON_GetArraySize(cJSON_GetObjectItem(g, "members"));
            const cJSON *m;
            cJSON_ArrayForEach(m, cJSON_GetObjectItem(g, "members")) *assumed += cJSON_IsTrue(cJSON_GetObjectItem(m, "assumed"));
        }
    }
    cJSON_Delete(j);
    return n;
}

static void test_cache_bind_assume_report(void **state)
{
    (void)state;
    kace_k8s_cluster *c = NULL;
    assert_kace_ok(ctx, kace_k8s_cluster_new(ctx, 100, &c));
    char body[1024];

    /* nothing known yet: both nodes fail, with a reason */
    cJSON *j = ask(c, 0, KACE_ROUTE_K8S_FILTER, names_args(BERT8, "u1"), 200, NULL);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(j, "nodenames")), 0);
    assert_non_null(strstr(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "failedNodes"), "n1")->valuestring, "knows nothing"));
    cJSON_Delete(j);

    /* agent reports: n1 has one GPU running VIT2 twice, n2 an empty GPU */
    snprintf(body, sizeof body, "{\"node\": \"n1\", \"gpus\": {\"g1\": [\"%s\", \"%s\"]}}", VIT2, VIT2);
    cJSON_Delete(ask(c, 0, KACE_ROUTE_K8S_NODES, body, 200, NULL));
    cJSON_Delete(ask(c, 0, KACE_ROUTE_K8S_NODES, "{\"node\": \"n2\", \"gpus\": {\"g2\": []}}", 200, NULL));
    /* a bad report is refused and changes nothing */
    cJSON_Delete(ask(c, 0, KACE_ROUTE_K8S_NODES, "{\"node\": \"n2\", \"gpus\": {\"g2\": [\"a\", 7]}}", 400, NULL));
    int assumed;
    assert_int_equal(members_on(c, 0, "n2", "g2", &assumed), 0);

    j = ask(c, 1, KACE_ROUTE_K8S_PRIORITIZE, names_args(BERT8, "u1"), 200, NULL);
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(j, 1), "host")->valuestring, "n2");
    assert_true(cJSON_GetObjectItem(cJSON_GetArrayItem(j, 1), "score")->valuedouble == 10); /* an empty GPU */
    cJSON_Delete(j);

    /* bind u1 to n2: the Binding names the GPU and a whole GPU's MPS share */
    kace_reply r;
    j = ask(c, 2, KACE_ROUTE_K8S_BIND, "{\"PodName\": \"p-u1\", \"PodNamespace\": \"ml\", \"PodUID\": \"u1\", \"Node\": \"n2\"}",
            200, &r);
    assert_string_equal(cJSON_GetObjectItem(j, "Error")->valuestring, "");
    assert_non_null(r.api_path);
    assert_string_equal(r.api_path, "/api/v1/namespaces/ml/pods/p-u1/binding");
    cJSON *b = cJSON_Parse(r.api_body);
    cJSON *ann = cJSON_GetObjectItem(cJSON_GetObjectItem(b, "metadata"), "annotations");
    assert_string_equal(cJSON_GetObjectItem(ann, "kace.io/gpu")->valuestring, "g2");
    assert_string_equal(cJSON_GetObjectItem(ann, "kace.io/mps-percentage")->valuestring, "100");
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(b, "target"), "name")->valuestring, "n2");
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(b, "metadata"), "uid")->valuestring, "u1");
    cJSON_Delete(b);
    cJSON_Delete(j);
    kace_reply_clear(&r);
    assert_int_equal(members_on(c, 3, "n2", "g2", &assumed), 1);
    assert_int_equal(assumed, 1);

    /* a second pod sees the assumed one: n2's GPU now runs BERT8, a pair gives 50% */
    cJSON_Delete(ask(c, 4, KACE_ROUTE_K8S_PRIORITIZE, names_args(VIT2, "u2"), 200, NULL));
    j = ask(c, 5, KACE_ROUTE_K8S_BIND, "{\"PodName\": \"p-u2\", \"PodNamespace\": \"ml\", \"PodUID\": \"u2\", \"Node\": \"n2\"}",
            200, NULL);
    assert_true(cJSON_GetObjectItem(j, "mps_percentage")->valuedouble == 50);
    cJSON_Delete(j);
    assert_int_equal(members_on(c, 6, "n2", "g2", &assumed), 2);

    /* the agent reports u1 running (by UID) but not u2 yet: u1 is confirmed, u2 stays assumed */
    snprintf(body, sizeof body,
             "{\"node\": \"n2\", \"gpus\": {\"g2\": [{\"workload\": \"%s\", \"uid\": \"u1\", \"pod\": \"ml/p-u1\", "
             "\"mps\": 100}]}}",
             BERT8);
    cJSON_Delete(ask(c, 50, KACE_ROUTE_K8S_NODES, body, 200, NULL));
    assert_int_equal(members_on(c, 51, "n2", "g2", &assumed), 2);
    assert_int_equal(assumed, 1);
    /* past the assume time, an unconfirmed bind is forgotten */
    assert_int_equal(members_on(c, 200, "n2", "g2", &assumed), 1);
    assert_int_equal(assumed, 0);

    /* a refused Binding is undone: bind u3, the front end unbinds it */
    cJSON_Delete(ask(c, 201, KACE_ROUTE_K8S_FILTER, names_args(VIT2, "u3"), 200, NULL));
    cJSON_Delete(ask(c, 202, KACE_ROUTE_K8S_BIND,
                     "{\"PodName\": \"p-u3\", \"PodNamespace\": \"ml\", \"PodUID\": \"u3\", \"Node\": \"n2\"}", 200, NULL));
    assert_int_equal(members_on(c, 203, "n2", "g2", &assumed), 2);
    kace_k8s_cluster_unbind(c, "n2", "ml", "p-u3");
    assert_int_equal(members_on(c, 204, "n2", "g2", &assumed), 1);

    /* bad ExtenderBindingArgs: refused */
    cJSON_Delete(ask(c, 205, KACE_ROUTE_K8S_BIND, "{\"PodName\": \"a/b\", \"Node\": \"n2\"}", 400, NULL));
    cJSON_Delete(ask(c, 205, KACE_ROUTE_K8S_BIND, "{\"PodName\": \"a\"}", 400, NULL));
    /* without a cache (kace_advisor_handle): bind is not offered */
    kace_reply none;
    kace_advisor_handle(ctx, adv, KACE_ROUTE_K8S_BIND, "{\"PodName\": \"a\", \"Node\": \"n\"}", 31, &none);
    assert_int_not_equal(none.http_status, 200);
    assert_null(none.api_path);
    kace_reply_clear(&none);
    kace_k8s_cluster_free(&c);
    assert_null(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_cache_bind_assume_report)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
