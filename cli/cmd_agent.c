/* kace agent: the node daemon of kace on Kubernetes (docs/kubernetes.md).
 * Every --interval seconds it reads the node's GPUs (NVML through the GPU
 * backend table, or --gpus), lists the pods bound to the node from the API
 * server, and publishes what runs where: as the node annotation kace.io/gpus
 * (PATCH /api/v1/nodes/NAME) and to kace serve (POST /k8s/nodes). */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "cli.h"
#include "kace/agent.h"
#include "kace/gpu.h"
#include "kube_api.h"

#define MAX_GPUS 64

static volatile sig_atomic_t stop;
static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
}

static void usage(void)
{
    printf("usage: kace agent --node NAME [--kube-api URL|in-cluster] [--kube-token-file F] [--kube-ca-file F]\n"
           "                  [--serve URL] [--serve-token-file F] [--gpus UUID[,UUID...]] [--interval S] [--once]\n"
           "Publishes what kace placed on this node's GPUs: the pods bound to --node (from the API server)\n"
           "whose kace.io/gpu is one of the node's GPUs (NVML, or --gpus), as the node annotation\n"
           "kace.io/gpus (PATCH, with --kube-api) and to kace serve's node cache (POST URL/k8s/nodes, with\n"
           "--serve; bearer token from --serve-token-file). Every --interval seconds (default 10), or\n"
           "once with --once. --kube-api in-cluster: the pod's service account (docs/kubernetes.md).\n");
}

/* The node's GPU UUIDs from the GPU backend (NVML); the index where the
 * driver gives no UUID. */
static int read_gpus(char ids[][96], size_t *n)
{
    kace_ctx *ctx = kace_ctx_new();
    kace_gpu *g = NULL;
    unsigned count = 0;
    *n = 0;
    if (!ctx || kace_gpu_open(ctx, 0, &g) || kace_gpu_device_count(ctx, g, &count)) {
        fprintf(stderr, "kace agent: no GPUs: %s\n", ctx ? kace_errmsg(ctx) : "out of memory");
        kace_gpu_close(&g);
        kace_ctx_free(&ctx);
        return -1;
    }
    for (unsigned i = 0; i < count && *n < MAX_GPUS; i++) {
        if (kace_gpu_select(ctx, g, i) != KACE_OK)
            continue;
        const char *uuid = kace_gpu_device_uuid(g);
        if (uuid[0])
            snprintf(ids[*n], 96, "%s", uuid);
        else
            snprintf(ids[*n], 96, "%u", i);
        (*n)++;
    }
    kace_gpu_close(&g);
    kace_ctx_free(&ctx);
    return 0;
}

/* One round: list, build, publish. Returns 0 when everything asked for was published. */
static int round_once(const char *node, kube_api *api, bool has_api, kube_api *serve, bool has_serve,
                      const char *const *ids, size_t n_ids, const char *pods_file)
{
    char err[600];
    long status;
    char *pods = NULL;
    size_t pods_len = 0;
    if (has_api) {
        char path[400];
        snprintf(path, sizeof path, "/api/v1/pods?fieldSelector=spec.nodeName%%3D%s", node);
        if (kube_api_call(api, "GET", path, NULL, NULL, &status, &pods, err, sizeof err) != 0) {
            fprintf(stderr, "kace agent: listing the pods of %s: %s\n", node, err);
            free(pods);
            return -1;
        }
        pods_len = pods ? strlen(pods) : 0;
    } else if (pods_file) { /* tests and dry runs: a PodList from a file */
        FILE *f = fopen(pods_file, "rb");
        if (!f) {
            fprintf(stderr, "kace agent: --pods %s: %s\n", pods_file, strerror(errno));
            return -1;
        }
        pods = calloc(1, 64u << 20);
        pods_len = pods ? fread(pods, 1, (64u << 20) - 1, f) : 0;
        fclose(f);
    }
    kace_ctx *ctx = kace_ctx_new();
    char *state = NULL;
    size_t foreign = 0;
    kace_status st = ctx ? kace_agent_node_state(ctx, ids, n_ids, pods ? pods : "{\"items\": []}",
                                                 pods ? pods_len : 13, &state, &foreign)
                         : KACE_ERR_NOMEM;
    free(pods);
    if (st) {
        fprintf(stderr, "kace agent: %s\n", ctx ? kace_errmsg(ctx) : "out of memory");
        kace_ctx_free(&ctx);
        return -1;
    }
    kace_ctx_free(&ctx);
    if (foreign)
        fprintf(stderr, "kace agent: %zu pod(s) on %s name a GPU this node does not have\n", foreign, node);
    int rc = 0;
    if (has_api) { /* merge patch: the annotation's value is the state as a string */
        cJSON *patch = cJSON_CreateObject();
        cJSON *ann = cJSON_AddObjectToObject(cJSON_AddObjectToObject(patch, "metadata"), "annotations");
        cJSON_AddStringToObject(ann, "kace.io/gpus", state);
        char *body = cJSON_PrintUnformatted(patch);
        cJSON_Delete(patch);
        char path[400];
        snprintf(path, sizeof path, "/api/v1/nodes/%s", node);
        if (!body || kube_api_call(api, "PATCH", path, "application/merge-patch+json", body, &status, NULL, err,
                                   sizeof err) != 0) {
            fprintf(stderr, "kace agent: annotating %s: %s\n", node, body ? err : "out of memory");
            rc = -1;
        }
        free(body);
    }
    if (has_serve) {
        cJSON *report = cJSON_CreateObject();
        cJSON *gpus = cJSON_Parse(state);
        cJSON_AddStringToObject(report, "node", node);
        if (!cJSON_AddItemToObject(report, "gpus", gpus))
            cJSON_Delete(gpus);
        char *body = cJSON_PrintUnformatted(report);
        cJSON_Delete(report);
        if (!body ||
            kube_api_call(serve, "POST", "/k8s/nodes", "application/json", body, &status, NULL, err, sizeof err) != 0) {
            fprintf(stderr, "kace agent: reporting to kace serve: %s\n", body ? err : "out of memory");
            rc = -1;
        }
        free(body);
    }
    if (!has_api && !has_serve)
        printf("%s\n", state);
    else if (rc == 0)
        printf("kace agent: %s: %s\n", node, state);
    fflush(stdout);
    free(state);
    return rc;
}

int cmd_agent(int argc, char **argv)
{
    const char *node = NULL, *kube_token = NULL, *serve_token = NULL, *gpus = NULL, *pods_file = NULL;
    kube_api api = {0}, serve = {0};
    double interval = 10;
    bool once = false;
    enum { O_NODE = 256, O_KUBE, O_KUBE_TOKEN, O_KUBE_CA, O_SERVE, O_SERVE_TOKEN, O_GPUS, O_INTERVAL, O_ONCE, O_PODS };
    static const struct option longopts[] = {
        {"node", required_argument, 0, O_NODE},       {"kube-api", required_argument, 0, O_KUBE},
        {"kube-token-file", required_argument, 0, O_KUBE_TOKEN}, {"kube-ca-file", required_argument, 0, O_KUBE_CA},
        {"serve", required_argument, 0, O_SERVE},     {"serve-token-file", required_argument, 0, O_SERVE_TOKEN},
        {"gpus", required_argument, 0, O_GPUS},       {"interval", required_argument, 0, O_INTERVAL},
        {"once", no_argument, 0, O_ONCE},             {"pods", required_argument, 0, O_PODS},
        {"help", no_argument, 0, 'h'},                {0, 0, 0, 0}};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case O_NODE: node = optarg; break;
        case O_KUBE: api.url = optarg; break;
        case O_KUBE_TOKEN: kube_token = optarg; break;
        case O_KUBE_CA: api.ca_file = optarg; break;
        case O_SERVE: serve.url = optarg; break;
        case O_SERVE_TOKEN: serve_token = optarg; break;
        case O_GPUS: gpus = optarg; break;
        case O_PODS: pods_file = optarg; break;
        case O_ONCE: once = true; break;
        case O_INTERVAL:
            if (!cli_number("agent", "interval", optarg, 0.1, 86400, &interval))
                return EXIT_USAGE;
            break;
        case 'h': usage(); return EXIT_OK;
        default: return cli_usage("agent", "unknown option");
        }
    }
    if (!node || !node[0] || strlen(node) > 253 || strpbrk(node, "/?#% "))
        return cli_usage("agent", "--node NAME is required (a Kubernetes node name)");
    char err[300];
    if (api.url && kube_api_setup(&api, kube_token, err, sizeof err) != 0)
        return cli_usage("agent", "--kube-api: %s", err);
    if (serve.url && kube_api_setup(&serve, serve_token, err, sizeof err) != 0) {
        kube_api_cleanup(&api);
        return cli_usage("agent", "--serve: %s", err);
    }
    char ids[MAX_GPUS][96];
    size_t n_ids = 0;
    if (gpus) { /* given: a node without NVML here, or a simulated one */
        char **items = NULL;
        if (!cli_list("agent", "gpus", gpus, MAX_GPUS, &items, &n_ids)) {
            kube_api_cleanup(&api);
            kube_api_cleanup(&serve);
            return EXIT_USAGE;
        }
        for (size_t i = 0; i < n_ids; i++)
            snprintf(ids[i], sizeof ids[0], "%s", items[i]);
        free(items);
    } else if (read_gpus(ids, &n_ids) != 0) {
        kube_api_cleanup(&api);
        kube_api_cleanup(&serve);
        return EXIT_FAILURE_RUN;
    }
    const char *id_ptrs[MAX_GPUS];
    for (size_t i = 0; i < n_ids; i++)
        id_ptrs[i] = ids[i];
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    int rc = EXIT_OK;
    while (!stop) {
        int r = round_once(node, &api, api.url != NULL, &serve, serve.url != NULL, id_ptrs, n_ids, pods_file);
        if (once) {
            rc = r == 0 ? EXIT_OK : EXIT_FAILURE_RUN;
            break;
        }
        struct timespec t = {(time_t)interval, (long)((interval - (double)(time_t)interval) * 1e9)};
        while (!stop && nanosleep(&t, &t) != 0 && errno == EINTR)
            ;
    }
    kube_api_cleanup(&api);
    kube_api_cleanup(&serve);
    return rc;
}
