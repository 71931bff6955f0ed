/* The Kubernetes scheduler-extender endpoints and kace's node cache
 * (serve_k8s.c), routed by kace_advisor_handle (serve.c). Internal. */
#ifndef KACE_LIB_SERVICE_SERVE_K8S_H
#define KACE_LIB_SERVICE_SERVE_K8S_H

#include <cjson/cJSON.h>

#include "kace/serve.h"

/* Filter (ExtenderFilterResult into out) and prioritize (a HostPriorityList
 * into *out); decision: what kace_reply.decision reports. c may be NULL (no
 * node cache: nodes named only by name pass, unjudged). now: unix time. */
kace_status kace_serve_k8s_filter(kace_ctx *ctx, const kace_advisor *a, kace_k8s_cluster *c, double now,
                                  const cJSON *req, cJSON *out, const char **decision);
kace_status kace_serve_k8s_prioritize(kace_ctx *ctx, const kace_advisor *a, kace_k8s_cluster *c, double now,
                                      const cJSON *req, cJSON **out, const char **decision);
/* Bind (ExtenderBindingArgs): an ExtenderBindingResult into out, and the
 * Binding to create: POST *api_body (malloc'ed) to the API server at
 * *api_path (malloc'ed); both NULL when there is nothing to create. */
kace_status kace_serve_k8s_bind(kace_ctx *ctx, const kace_advisor *a, kace_k8s_cluster *c, double now,
                                const cJSON *req, cJSON *out, char **api_path, char **api_body, const char **decision);
/* A kace agent's report {"node", "gpus"} (POST /k8s/nodes). */
kace_status kace_serve_k8s_report(kace_ctx *ctx, kace_k8s_cluster *c, double now, const cJSON *req, cJSON *out);
/* The cache's nodes, GPUs, members and predictions (GET /k8s/state). */
kace_status kace_serve_k8s_state(kace_ctx *ctx, const kace_advisor *a, kace_k8s_cluster *c, double now, cJSON *out);

#endif
