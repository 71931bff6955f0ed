/* kace's node cache for the Kubernetes extender (lib/service/serve_k8s.c),
 * without sockets: node names judged from the cache, binds assumed until an
 * agent report lists the pod or the assume time passes, the Binding kace asks
 * the front end to create, and bad reports refused without touching the
 * cache; kace_sched_start_on/withdraw and the extender deciding with kace
 * schedule's scheduler (queueing, ends, pods it did not place, a new node). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "kace/import.h"
#include "kace/sched_world.h"
#include "kace/serve.h"
#include "kace/sim.h"
#include "kace/store.h"
#include "testutil.h"

static kace_ctx *ctx;
static kace_advisor *adv;
static char db_path[4200];

static const char *BERT8 = "bert-base-cased_batch8-train";
static const char *VIT2 = "vit-base-patch16-224_batch2-inf";

static int setup(void **state)
{
    (void)state;
    ctx = kace_ctx_new();
    char *db = db_path;
    snprintf(db_path, sizeof db_path, "%s/store.db", scratch_dir("test_k8s"));
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
    assert_non_null(strstr(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "failedAndUnresolvableNodes"), "n1")->valuestring,
                           "knows nothing"));
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

/* The extender's scheduler world, on the served model (kace/sched_world.h),
 * with its parts at hand. */
typedef struct world {
    kace_sched_world *sw;
    const kace_dataset *profiles;
    const kace_truth *truth;
    kace_rate_source rates;
    const int *pool;
    int n_pool;
} world;

static void world_open(world *w)
{
    memset(w, 0, sizeof *w);
    kace_store *store = NULL;
    assert_kace_ok(ctx, kace_store_open(ctx, db_path, &store));
    assert_kace_ok(ctx, kace_sched_world_new(ctx, store, kace_advisor_predictor(adv), &w->sw));
    kace_store_close(&store);
    w->profiles = kace_sched_world_profiles(w->sw);
    w->truth = kace_sched_world_truth(w->sw);
    w->rates = *kace_sched_world_rates(w->sw);
    w->pool = kace_sched_world_pool(w->sw, &w->n_pool);
    assert_true(w->n_pool > 0);
}

static void world_close(world *w)
{
    kace_sched_world_free(&w->sw);
    assert_null(w->sw);
}

static int n_started;
static void count_start(void *user, int job, const int *gpus, int n)
{
    (void)user;
    (void)job;
    (void)gpus;
    (void)n;
    n_started++;
}

/* kace_sched_start_on and kace_sched_withdraw, the calls the extender adds. */
static void test_sched_start_on_withdraw(void **state)
{
    (void)state;
    world w;
    world_open(&w);
    kace_sched_config cfg;
    kace_sched_config_default(&cfg, KACE_SCHED_EXCLUSIVE);
    int two = 2, ids[KACE_SCHED_MAX_GROUP];
    kace_sched *s = NULL;
    assert_kace_ok(ctx, kace_sched_new(ctx, &cfg, w.profiles, w.pool, w.n_pool, kace_truth_runnable(w.truth), &w.rates,
                                       &two, 1, count_start, NULL, &s));
    kace_sched_job j = {.workload = w.pool[0], .gpu_milli = 1000, .num_gpu = 1};
    n_started = 0;
    for (j.id = 0; j.id < 3; j.id++)
        assert_kace_ok(ctx, kace_sched_submit(ctx, s, &j));
    assert_int_equal(n_started, 2);
    assert_int_equal(kace_sched_n_queued(s), 1);
    assert_kace_ok(ctx, kace_sched_withdraw(ctx, s, 2)); /* a queued job leaves the queue */
    assert_int_equal(kace_sched_n_queued(s), 0);
    assert_int_not_equal(kace_sched_withdraw(ctx, s, 2), KACE_OK);
    int g0 = kace_sched_gpu_jobs(s, 0, ids) ? 0 : 1; /* a busy GPU */
    /* where pods already run, whatever the (exclusive) policy says */
    j.id = 3;
    assert_kace_ok(ctx, kace_sched_start_on(ctx, s, &j, g0));
    j.id = 4;
    assert_kace_ok(ctx, kace_sched_start_on(ctx, s, &j, g0));
    assert_int_equal(kace_sched_gpu_jobs(s, g0, ids), 3);
    j.id = 5;
    assert_int_not_equal(kace_sched_start_on(ctx, s, &j, g0), KACE_OK); /* full */
    assert_non_null(strstr(kace_errmsg(ctx), "full"));
    j.id = 3;
    assert_int_not_equal(kace_sched_start_on(ctx, s, &j, 1 - g0), KACE_OK); /* id in use */
    j.id = 6;
    assert_int_not_equal(kace_sched_start_on(ctx, s, &j, 7), KACE_OK); /* no such GPU */
    /* a queued job starts when a GPU frees, not before */
    n_started = 0;
    assert_kace_ok(ctx, kace_sched_submit(ctx, s, &j));
    assert_int_equal(kace_sched_n_queued(s), 1);
    int on_g0 = kace_sched_gpu_jobs(s, g0, ids);
    assert_kace_ok(ctx, kace_sched_withdraw(ctx, s, ids[0])); /* a running job: finished */
    assert_int_equal(kace_sched_gpu_jobs(s, g0, ids), on_g0 - 1);
    assert_int_equal(kace_sched_n_queued(s), 1);
    assert_int_equal(kace_sched_gpu_jobs(s, 1 - g0, ids), 1);
    assert_kace_ok(ctx, kace_sched_withdraw(ctx, s, ids[0]));
    assert_int_equal(kace_sched_n_queued(s), 0);
    assert_int_equal(n_started, 1);
    kace_sched_free(&s);
    world_close(&w);
}

static const cJSON *sched_state(const cJSON *state, const char *key)
{
    return cJSON_GetObjectItem(cJSON_GetObjectItem(state, "scheduler"), key);
}

static char *pod_args(const char *workload, const char *uid, const char *nodes)
{
    static char text[1024];
    snprintf(text, sizeof text,
             "{\"Pod\": {\"metadata\": {\"name\": \"p-%s\", \"namespace\": \"ml\", \"uid\": \"%s\", \"labels\": "
             "{\"kace.io/workload\": \"%s\"}}}, \"Nodes\": null, \"NodeNames\": [%s]}",
             uid, uid, workload, nodes);
    return text;
}

static char *bind_args(const char *uid, const char *node)
{
    static char text[256];
    snprintf(text, sizeof text, "{\"PodName\": \"p-%s\", \"PodNamespace\": \"ml\", \"PodUID\": \"%s\", \"Node\": \"%s\"}",
             uid, uid, node);
    return text;
}

/* The extender with kace schedule's scheduler (exclusive policy here, so that
 * queueing is easy to reach): decisions, queueing and ends, pods kace did not
 * place, a node set that changes, a choice never bound. */
static void test_extender_with_scheduler(void **state)
{
    (void)state;
    world w;
    world_open(&w);
    kace_k8s_cluster *c = NULL;
    assert_kace_ok(ctx, kace_k8s_cluster_new(ctx, 100, &c));
    kace_k8s_scheduler ks = {.profiles = w.profiles, .pool = w.pool, .n_pool = w.n_pool,
                             .runnable = kace_truth_runnable(w.truth), .rates = &w.rates};
    kace_sched_config_default(&ks.config, KACE_SCHED_EXCLUSIVE);
    assert_kace_ok(ctx, kace_k8s_cluster_use_scheduler(ctx, c, &ks));
    char body[1024];
    /* n1's GPU runs two pods kace did not place (bare names); n2's GPU is idle */
    snprintf(body, sizeof body, "{\"node\": \"n1\", \"gpus\": {\"g1\": [\"%s\", \"%s\"]}}", VIT2, VIT2);
    cJSON_Delete(ask(c, 0, KACE_ROUTE_K8S_NODES, body, 200, NULL));
    cJSON_Delete(ask(c, 0, KACE_ROUTE_K8S_NODES, "{\"node\": \"n2\", \"gpus\": {\"g2\": []}}", 200, NULL));

    cJSON *j = ask(c, 1, KACE_ROUTE_K8S_FILTER, pod_args(BERT8, "u1", "\"n1\", \"n2\""), 200, NULL);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(j, "nodenames")), 1);
    assert_string_equal(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "nodenames"), 0)->valuestring, "n2");
    assert_non_null(strstr(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "failedAndUnresolvableNodes"), "n1")->valuestring,
                           "placed the pod on GPU 'g2'"));
    cJSON_Delete(j);
    j = ask(c, 1, KACE_ROUTE_K8S_STATE, NULL, 200, NULL);
    assert_true(sched_state(j, "bound")->valuedouble == 2); /* the two pods on g1 count */
    assert_true(sched_state(j, "chosen")->valuedouble == 1);
    cJSON_Delete(j);
    j = ask(c, 2, KACE_ROUTE_K8S_PRIORITIZE, pod_args(BERT8, "u1", "\"n1\", \"n2\""), 200, NULL);
    assert_true(cJSON_GetObjectItem(cJSON_GetArrayItem(j, 0), "score")->valuedouble == 0);
    assert_true(cJSON_GetObjectItem(cJSON_GetArrayItem(j, 1), "score")->valuedouble == 10);
    cJSON_Delete(j);
    /* a bind to another node is refused (the scheduler retries); to n2 it binds */
    j = ask(c, 3, KACE_ROUTE_K8S_BIND, bind_args("u1", "n1"), 200, NULL);
    assert_non_null(strstr(cJSON_GetObjectItem(j, "Error")->valuestring, "GPU 'g2' of node 'n2'"));
    cJSON_Delete(j);
    j = ask(c, 3, KACE_ROUTE_K8S_BIND, bind_args("u1", "n2"), 200, NULL);
    assert_string_equal(cJSON_GetObjectItem(j, "Error")->valuestring, "");
    assert_string_equal(cJSON_GetObjectItem(j, "gpu")->valuestring, "g2");
    assert_true(cJSON_GetObjectItem(j, "mps_percentage")->valuedouble == 100);
    cJSON_Delete(j);

    /* no GPU left (exclusive): u2 is queued, every node fails */
    j = ask(c, 4, KACE_ROUTE_K8S_FILTER, pod_args(BERT8, "u2", "\"n1\", \"n2\""), 200, NULL);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(j, "nodenames")), 0);
    assert_non_null(strstr(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "failedNodes"), "n2")->valuestring, "queues"));
    cJSON_Delete(j);
    j = ask(c, 4, KACE_ROUTE_K8S_BIND, bind_args("u2", "n2"), 200, NULL);
    assert_non_null(strstr(cJSON_GetObjectItem(j, "Error")->valuestring, "queues"));
    cJSON_Delete(j);

    /* n2's agent lists u1 (confirmed), then no longer: u1 has ended and u2 starts on g2 */
    snprintf(body, sizeof body, "{\"node\": \"n2\", \"gpus\": {\"g2\": [{\"workload\": \"%s\", \"uid\": \"u1\"}]}}", BERT8);
    cJSON_Delete(ask(c, 5, KACE_ROUTE_K8S_NODES, body, 200, NULL));
    j = ask(c, 5, KACE_ROUTE_K8S_FILTER, pod_args(BERT8, "u2", "\"n1\", \"n2\""), 200, NULL);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(j, "nodenames")), 0); /* still running */
    cJSON_Delete(j);
    cJSON_Delete(ask(c, 6, KACE_ROUTE_K8S_NODES, "{\"node\": \"n2\", \"gpus\": {\"g2\": []}}", 200, NULL));
    j = ask(c, 7, KACE_ROUTE_K8S_STATE, NULL, 200, NULL);
    assert_true(sched_state(j, "ended")->valuedouble == 1);
    assert_true(sched_state(j, "queued")->valuedouble == 0);
    assert_true(sched_state(j, "chosen")->valuedouble == 1);
    cJSON_Delete(j);
    j = ask(c, 7, KACE_ROUTE_K8S_BIND, bind_args("u2", "n2"), 200, NULL);
    assert_string_equal(cJSON_GetObjectItem(j, "gpu")->valuestring, "g2");
    cJSON_Delete(j);
    /* a stale report still listing u1 does not revive it */
    cJSON_Delete(ask(c, 8, KACE_ROUTE_K8S_NODES, body, 200, NULL));
    j = ask(c, 8, KACE_ROUTE_K8S_STATE, NULL, 200, NULL);
    assert_true(sched_state(j, "bound")->valuedouble == 3); /* g1's two and u2 */
    cJSON_Delete(j);

    /* a new node: the scheduler is rebuilt with u2 where it runs; u3 takes n3's GPU */
    cJSON_Delete(ask(c, 9, KACE_ROUTE_K8S_NODES, "{\"node\": \"n3\", \"gpus\": {\"g3\": []}}", 200, NULL));
    j = ask(c, 9, KACE_ROUTE_K8S_FILTER, pod_args(VIT2, "u3", "\"n1\", \"n2\", \"n3\""), 200, NULL);
    assert_string_equal(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "nodenames"), 0)->valuestring, "n3");
    cJSON_Delete(j);
    j = ask(c, 9, KACE_ROUTE_K8S_STATE, NULL, 200, NULL);
    assert_true(sched_state(j, "gpus")->valuedouble == 3);
    assert_true(sched_state(j, "bound")->valuedouble == 3);
    cJSON_Delete(j);
    /* never bound within the assume time: the scheduler lets g3 go */
    j = ask(c, 200, KACE_ROUTE_K8S_FILTER, pod_args(VIT2, "u4", "\"n1\", \"n2\", \"n3\""), 200, NULL);
    assert_string_equal(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "nodenames"), 0)->valuestring, "n3");
    cJSON_Delete(j);
    kace_k8s_cluster_free(&c);
    world_close(&w);
}

/* kube-scheduler binds asynchronously: the next pod's filter may come before
 * this pod's bind, and a pod may be filtered again (a retry). The first
 * filter decides and holds the GPU, so neither changes the decisions. */
static void test_scheduler_async_binds_and_retries(void **state)
{
    (void)state;
    world w;
    world_open(&w);
    kace_k8s_cluster *c = NULL;
    assert_kace_ok(ctx, kace_k8s_cluster_new(ctx, 100, &c));
    kace_k8s_scheduler ks = {.profiles = w.profiles, .pool = w.pool, .n_pool = w.n_pool,
                             .runnable = kace_truth_runnable(w.truth), .rates = &w.rates};
    kace_sched_config_default(&ks.config, KACE_SCHED_EXCLUSIVE);
    assert_kace_ok(ctx, kace_k8s_cluster_use_scheduler(ctx, c, &ks));
    cJSON_Delete(ask(c, 0, KACE_ROUTE_K8S_NODES, "{\"node\": \"n1\", \"gpus\": {\"g1\": []}}", 200, NULL));
    cJSON_Delete(ask(c, 0, KACE_ROUTE_K8S_NODES, "{\"node\": \"n2\", \"gpus\": {\"g2\": []}}", 200, NULL));
    char first[16], again[16], second[16];
    cJSON *j = ask(c, 1, KACE_ROUTE_K8S_FILTER, pod_args(BERT8, "a", "\"n1\", \"n2\""), 200, NULL);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(j, "nodenames")), 1);
    snprintf(first, sizeof first, "%s", cJSON_GetArrayItem(cJSON_GetObjectItem(j, "nodenames"), 0)->valuestring);
    cJSON_Delete(j);
    j = ask(c, 2, KACE_ROUTE_K8S_FILTER, pod_args(BERT8, "a", "\"n1\", \"n2\""), 200, NULL); /* a retry */
    snprintf(again, sizeof again, "%s", cJSON_GetArrayItem(cJSON_GetObjectItem(j, "nodenames"), 0)->valuestring);
    cJSON_Delete(j);
    assert_string_equal(first, again);
    j = ask(c, 3, KACE_ROUTE_K8S_FILTER, pod_args(VIT2, "b", "\"n1\", \"n2\""), 200, NULL); /* before a's bind */
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(j, "nodenames")), 1);
    snprintf(second, sizeof second, "%s", cJSON_GetArrayItem(cJSON_GetObjectItem(j, "nodenames"), 0)->valuestring);
    cJSON_Delete(j);
    assert_string_not_equal(first, second);
    j = ask(c, 4, KACE_ROUTE_K8S_BIND, bind_args("b", second), 200, NULL);
    assert_string_equal(cJSON_GetObjectItem(j, "Error")->valuestring, "");
    cJSON_Delete(j);
    j = ask(c, 5, KACE_ROUTE_K8S_BIND, bind_args("a", first), 200, NULL);
    assert_string_equal(cJSON_GetObjectItem(j, "Error")->valuestring, "");
    cJSON_Delete(j);
    /* both GPUs taken: a third pod waits */
    j = ask(c, 6, KACE_ROUTE_K8S_FILTER, pod_args(BERT8, "c", "\"n1\", \"n2\""), 200, NULL);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(j, "nodenames")), 0);
    cJSON_Delete(j);
    kace_k8s_cluster_free(&c);
    world_close(&w);
}

static const char *first_name(const cJSON *j)
{
    const cJSON *n = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "nodenames"), 0);
    return n ? n->valuestring : "";
}

/* kube-scheduler's semantics: kace decides only among the nodes offered
 * (its own filters already ran), says which failures preemption cannot
 * help, and forgets pods it judged that are never bound (deleted, or made
 * up), so that they hold no GPU and no place in the queue. */
static void test_scheduler_offered_nodes_only(void **state)
{
    (void)state;
    world w;
    world_open(&w);
    kace_k8s_cluster *c = NULL;
    assert_kace_ok(ctx, kace_k8s_cluster_new(ctx, 100, &c));
    kace_k8s_scheduler ks = {.profiles = w.profiles, .pool = w.pool, .n_pool = w.n_pool,
                             .runnable = kace_truth_runnable(w.truth), .rates = &w.rates};
    kace_sched_config_default(&ks.config, KACE_SCHED_EXCLUSIVE);
    assert_kace_ok(ctx, kace_k8s_cluster_use_scheduler(ctx, c, &ks));
    char body[512];
    snprintf(body, sizeof body, "{\"node\": \"gpu-node-0\", \"gpus\": {\"g0\": [\"%s\"]}}", VIT2);
    cJSON_Delete(ask(c, 0, KACE_ROUTE_K8S_NODES, body, 200, NULL));
    cJSON_Delete(ask(c, 0, KACE_ROUTE_K8S_NODES, "{\"node\": \"gpu-node-1\", \"gpus\": {\"g1\": []}}", 200, NULL));

    /* offered gpu-node-0 only (busy; exclusive policy): no decision on gpu-node-1, nothing held there */
    for (int t = 1; t <= 3; t++) { /* and again: kube-scheduler retries */
        cJSON *j = ask(c, t, KACE_ROUTE_K8S_FILTER, pod_args(BERT8, "u1", "\"gpu-node-0\""), 200, NULL);
        assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(j, "nodenames")), 0);
        const cJSON *failed = cJSON_GetObjectItem(j, "failedNodes");
        assert_int_equal(cJSON_GetArraySize(failed), 1);
        assert_null(strstr(cJSON_GetObjectItem(failed, "gpu-node-0")->valuestring, "gpu-node-1"));
        assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(j, "failedAndUnresolvableNodes")), 0);
        cJSON_Delete(j);
        j = ask(c, t, KACE_ROUTE_K8S_PRIORITIZE, pod_args(BERT8, "u1", "\"gpu-node-0\""), 200, NULL);
        assert_int_equal(cJSON_GetArraySize(j), 1);
        assert_true(cJSON_GetObjectItem(cJSON_GetArrayItem(j, 0), "score")->valuedouble == 0);
        cJSON_Delete(j);
        j = ask(c, t, KACE_ROUTE_K8S_STATE, NULL, 200, NULL);
        assert_true(sched_state(j, "chosen")->valuedouble == 0);
        cJSON_Delete(j);
    }
    /* so gpu-node-1's GPU is free for the next pod offered it */
    cJSON *j = ask(c, 5, KACE_ROUTE_K8S_FILTER, pod_args(VIT2, "u2", "\"gpu-node-0\", \"gpu-node-1\""), 200, NULL);
    assert_string_equal(first_name(j), "gpu-node-1");
    /* gpu-node-0: kace chose another node, evicting pods there cannot change that */
    assert_non_null(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "failedAndUnresolvableNodes"), "gpu-node-0"));
    cJSON_Delete(j);
    /* u2 is retried with gpu-node-0 only (gpu-node-1 became unschedulable for it): the choice moves or goes */
    j = ask(c, 6, KACE_ROUTE_K8S_FILTER, pod_args(VIT2, "u2", "\"gpu-node-0\""), 200, NULL);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(j, "nodenames")), 0);
    cJSON_Delete(j);
    j = ask(c, 6, KACE_ROUTE_K8S_STATE, NULL, 200, NULL);
    assert_true(sched_state(j, "chosen")->valuedouble == 0);
    cJSON_Delete(j);

    /* u3 chosen on gpu-node-1, its bind fails at the API server (the pod was
     * deleted): the GPU goes back once the assume time has passed unbound */
    j = ask(c, 10, KACE_ROUTE_K8S_FILTER, pod_args(BERT8, "u3", "\"gpu-node-0\", \"gpu-node-1\""), 200, NULL);
    assert_string_equal(first_name(j), "gpu-node-1");
    cJSON_Delete(j);
    j = ask(c, 10, KACE_ROUTE_K8S_BIND, bind_args("u3", "gpu-node-1"), 200, NULL);
    assert_string_equal(cJSON_GetObjectItem(j, "Error")->valuestring, "");
    cJSON_Delete(j);
    kace_k8s_cluster_unbind(c, "gpu-node-1", "ml", "p-u3");
    j = ask(c, 20, KACE_ROUTE_K8S_FILTER, pod_args(VIT2, "u4", "\"gpu-node-1\""), 200, NULL);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(j, "nodenames")), 0); /* u3 may yet be bound */
    cJSON_Delete(j);
    j = ask(c, 200, KACE_ROUTE_K8S_FILTER, pod_args(VIT2, "u4", "\"gpu-node-1\""), 200, NULL);
    assert_string_equal(first_name(j), "gpu-node-1");
    cJSON_Delete(j);

    /* a flood of made-up pods: queued, then forgotten when nobody asks again */
    for (int i = 0; i < 40; i++) {
        char uid[32];
        snprintf(uid, sizeof uid, "flood-%d", i);
        cJSON_Delete(ask(c, 201, KACE_ROUTE_K8S_FILTER, pod_args(BERT8, uid, "\"gpu-node-0\", \"gpu-node-1\""), 200, NULL));
    }
    j = ask(c, 201, KACE_ROUTE_K8S_STATE, NULL, 200, NULL);
    assert_true(sched_state(j, "queued")->valuedouble >= 39);
    cJSON_Delete(j);
    cJSON_Delete(ask(c, 400, KACE_ROUTE_K8S_FILTER, pod_args(BERT8, "real", "\"gpu-node-0\", \"gpu-node-1\""), 200, NULL));
    j = ask(c, 400, KACE_ROUTE_K8S_STATE, NULL, 200, NULL);
    assert_true(sched_state(j, "queued")->valuedouble <= 1); /* the real pod at most */
    cJSON_Delete(j);
    kace_k8s_cluster_free(&c);
    world_close(&w);
}

/* A reload gives the extender a new world (the newly served model): the
 * scheduler is rebuilt on it at once, with the pods where they are, and the
 * previous world may go; without a world the extender scores by gain. */
static void test_scheduler_new_world(void **state)
{
    (void)state;
    world w1, w2;
    world_open(&w1);
    world_open(&w2);
    kace_k8s_cluster *c = NULL;
    assert_kace_ok(ctx, kace_k8s_cluster_new(ctx, 100, &c));
    kace_k8s_scheduler ks = {.profiles = w1.profiles, .pool = w1.pool, .n_pool = w1.n_pool,
                             .runnable = kace_truth_runnable(w1.truth), .rates = &w1.rates};
    kace_sched_config_default(&ks.config, KACE_SCHED_EXCLUSIVE);
    assert_kace_ok(ctx, kace_k8s_cluster_use_scheduler(ctx, c, &ks));
    cJSON_Delete(ask(c, 0, KACE_ROUTE_K8S_NODES, "{\"node\": \"n1\", \"gpus\": {\"g1\": []}}", 200, NULL));
    cJSON_Delete(ask(c, 0, KACE_ROUTE_K8S_NODES, "{\"node\": \"n2\", \"gpus\": {\"g2\": []}}", 200, NULL));
    cJSON *j = ask(c, 1, KACE_ROUTE_K8S_FILTER, pod_args(BERT8, "u1", "\"n1\", \"n2\""), 200, NULL);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(j, "nodenames")), 1);
    char first[8], other[8]; /* u1's node, and the other one */
    snprintf(first, sizeof first, "%s", cJSON_GetArrayItem(cJSON_GetObjectItem(j, "nodenames"), 0)->valuestring);
    snprintf(other, sizeof other, "%s", strcmp(first, "n1") == 0 ? "n2" : "n1");
    cJSON_Delete(j);

    /* the new world; the old one is freed at once (ASan sees any use of it) */
    ks = (kace_k8s_scheduler){.profiles = w2.profiles, .pool = w2.pool, .n_pool = w2.n_pool,
                              .runnable = kace_truth_runnable(w2.truth), .rates = &w2.rates};
    kace_sched_config_default(&ks.config, KACE_SCHED_EXCLUSIVE);
    assert_kace_ok(ctx, kace_k8s_cluster_use_scheduler(ctx, c, &ks));
    world_close(&w1);
    j = ask(c, 2, KACE_ROUTE_K8S_STATE, NULL, 200, NULL);
    assert_true(sched_state(j, "chosen")->valuedouble == 1); /* u1 kept its GPU */
    assert_true(sched_state(j, "gpus")->valuedouble == 2);
    cJSON_Delete(j);
    j = ask(c, 2, KACE_ROUTE_K8S_FILTER, pod_args(BERT8, "u1", "\"n1\", \"n2\""), 200, NULL);
    assert_string_equal(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "nodenames"), 0)->valuestring, first);
    cJSON_Delete(j);
    j = ask(c, 2, KACE_ROUTE_K8S_FILTER, pod_args(BERT8, "u2", "\"n1\", \"n2\""), 200, NULL);
    assert_string_equal(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "nodenames"), 0)->valuestring, other);
    cJSON_Delete(j);
    j = ask(c, 2, KACE_ROUTE_K8S_FILTER, pod_args(BERT8, "u3", "\"n1\", \"n2\""), 200, NULL);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(j, "nodenames")), 0); /* exclusive: queued */
    cJSON_Delete(j);

    /* no world: back to scoring by predicted gain, nothing held */
    assert_kace_ok(ctx, kace_k8s_cluster_use_scheduler(ctx, c, NULL));
    world_close(&w2);
    j = ask(c, 3, KACE_ROUTE_K8S_STATE, NULL, 200, NULL);
    assert_null(cJSON_GetObjectItem(j, "scheduler"));
    cJSON_Delete(j);
    j = ask(c, 3, KACE_ROUTE_K8S_FILTER, pod_args(BERT8, "u4", "\"n1\", \"n2\""), 200, NULL);
    assert_true(cJSON_GetArraySize(cJSON_GetObjectItem(j, "nodenames")) >= 1);
    cJSON_Delete(j);
    kace_k8s_cluster_free(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_cache_bind_assume_report),
                                       cmocka_unit_test(test_sched_start_on_withdraw),
                                       cmocka_unit_test(test_extender_with_scheduler),
                                       cmocka_unit_test(test_scheduler_async_binds_and_retries),
                                       cmocka_unit_test(test_scheduler_offered_nodes_only),
                                       cmocka_unit_test(test_scheduler_new_world)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
