/* The Kubernetes scheduler-extender endpoints (serve_k8s.c), routed by
 * kace_advisor_handle (serve.c). Internal. */
#ifndef KACE_LIB_SERVICE_SERVE_K8S_H
#define KACE_LIB_SERVICE_SERVE_K8S_H

#include <cjson/cJSON.h>

#include "kace/serve.h"

/* Filter (ExtenderFilterResult into out) and prioritize (a HostPriorityList
 * into *out); decision: what kace_reply.decision reports. */
kace_status kace_serve_k8s_filter(kace_ctx *ctx, const kace_advisor *a, const cJSON *req, cJSON *out,
                                  const char **decision);
kace_status kace_serve_k8s_prioritize(kace_ctx *ctx, const kace_advisor *a, const cJSON *req, cJSON **out,
                                      const char **decision);

#endif
