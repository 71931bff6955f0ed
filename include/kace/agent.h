/* kace agent: what a GPU node runs, built from what the node's
 * kace agent reads: its GPUs (NVML, through the GPU backend table) and the
 * pods bound to it (the API server's PodList), whose kace.io/gpu,
 * kace.io/workload and kace.io/mps-percentage annotations kace's bind set.
 * The result is the node annotation kace.io/gpus and the body of a report to
 * kace serve (POST /k8s/nodes); docs/kubernetes.md. */
#ifndef KACE_AGENT_H
#define KACE_AGENT_H

#include <stddef.h>

#include "kace/kace.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The node's GPU state as JSON text {"<GPU UUID>": [{"workload", "uid",
 * "pod": "namespace/name", "mps"}...], ...}: every GPU in gpu_ids (an empty
 * list when idle), and each running or pending pod of pod_list (a PodList,
 * JSON text of len bytes) whose kace.io/gpu names one of them. Pods that
 * ended (Succeeded, Failed) or are being deleted are left out; a pod on a GPU
 * this node does not have is counted in *n_foreign (may be NULL). *out is
 * malloc'ed. Fails (input errors: what was expected, where) on a body that is
 * not a PodList. */
kace_status kace_agent_node_state(kace_ctx *ctx, const char *const *gpu_ids, size_t n_gpus, const char *pod_list,
                                  size_t len, char **out, size_t *n_foreign);

#ifdef __cplusplus
}
#endif

#endif
