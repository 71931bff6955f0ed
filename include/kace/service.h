/* kace serve's lifecycle, without HTTP: what is loaded (a store, the model
 * it serves, the MPS split model), how a reload replaces it, and the one
 * model behind every answer, the Kubernetes extender's scheduler included.
 *
 * A load reads the store and the model, builds an advisor (kace/serve.h),
 * its reply cache and, for the extender, the scheduler's world
 * (kace/sched_world.h) predicted by the same model; then swaps them in
 * whole. Requests hold what they started with (kace_service_acquire) until
 * they release it, so no request waits for a reload or sees half of one. A
 * load that fails keeps the previous model. The HTTP front end
 * (cli/cmd_serve.c) calls kace_service_load at start-up, on SIGHUP and
 * when kace_service_changed sees the store or model file change (a
 * promotion writes the store). */
#ifndef KACE_SERVICE_H
#define KACE_SERVICE_H

#include <stdbool.h>

#include "kace/serve.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kace_service_config {
    const char *db;             /* the store */
    const char *model_name;     /* the store's model served, unless model_file */
    const char *model_file;     /* a model file (NULL: the store's model_name) */
    const char *split_train_db; /* /v1/mps-split's model is fitted on this store's grids (NULL: db's) */
    kace_advisor_options options;
    bool allow_partial_model;   /* serve a model that cannot answer every endpoint */
    int extender_policy;        /* the extender's scheduler policy (a kace_sched_policy), or -1: the
                                   extender scores nodes by predicted gain */
} kace_service_config;

typedef struct kace_service kace_service;

/* Nothing is loaded yet (kace_service_load). cfg's strings, metrics and
 * cluster (NULL: no extender) must outlive the service. */
kace_status kace_service_new(kace_ctx *ctx, const kace_service_config *cfg, kace_serve_metrics *metrics,
                             kace_k8s_cluster *cluster, kace_service **out);
/* After every request has released what it acquired. The cluster stops
 * using the service's scheduler world. */
void kace_service_free(kace_service **s);

/* What a load did, for the front end's log. */
typedef struct kace_service_notes {
    const char *refused; /* a failed load: "load_error" (reading failed) or "cannot_answer" */
    char split[320];     /* how /v1/mps-split advises */
    char extender[512];  /* how the extender decides ("" without a cluster) */
} kace_service_notes;

/* Loads the store and model and swaps them in; on failure the previous
 * ones stay (and the refusal is counted in the metrics). One load at a
 * time. A scheduler world that cannot be built from the model (a store
 * without measured pairs, a partial model) is no failure: the extender
 * then scores nodes by predicted gain, and notes->extender says why. */
kace_status kace_service_load(kace_ctx *ctx, kace_service *s, kace_service_notes *notes);

/* Whether the store, model file or split_train_db changed on disk since
 * the last load, or the last call that said so (a failed reload is not
 * retried until the next change). */
bool kace_service_changed(kace_service *s);

/* What a request answers with: the advisor and its reply cache, held until
 * released (thread-safe). NULL before the first successful load. */
typedef struct kace_served kace_served;
kace_served *kace_service_acquire(kace_service *s);
void kace_served_release(kace_served **h);
const kace_advisor *kace_served_advisor(const kace_served *h);
kace_reply_cache *kace_served_cache(const kace_served *h);
/* Whether the extender's scheduler decides with this model (false: it
 * scores by predicted gain). */
bool kace_served_schedules(const kace_served *h);

#ifdef __cplusplus
}
#endif

#endif
