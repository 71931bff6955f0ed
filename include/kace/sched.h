/* The online colocation scheduler: places each arriving job on a GPU of a
 * cluster, alone or next to the jobs already there.
 *
 * What a policy may know is fixed by this API: workload profiles (a dataset
 * whose colocations it never reads), the set of groups that are allowed to
 * share a GPU, and a rate source that says, for a group, the fraction of its
 * exclusive speed each member keeps and how sure that is. kace's rate source
 * is a trained model (kace_rate_source_model); only the simulator's Oracle is
 * given measured rates.
 *
 * Placement never scans the GPUs: idle GPUs are kept per node in buckets by
 * idle count, and shared GPUs in buckets by their resident set ("signature":
 * the sorted workload+QoS classes of the jobs on it). For each arriving class
 * the signatures it may join are ranked once, at creation, so a decision
 * walks that ranking to the first non-empty bucket.
 */
#ifndef KACE_SCHED_H
#define KACE_SCHED_H

#include <stdbool.h>
#include <stdint.h>

#include "kace/dataset.h"
#include "kace/policy.h"
#include "kace/predictor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KACE_SCHED_MAX_GROUP 3       /* most jobs on one GPU (measurements go to triples) */
#define KACE_SCHED_MAX_WORKLOADS 64  /* distinct workloads a scheduler knows */
#define KACE_SCHED_MAX_NODE_GPUS 64

typedef enum kace_sched_policy {
    KACE_SCHED_EXCLUSIVE = 0, /* one job per GPU */
    KACE_SCHED_PACKING,       /* the trace's own: best fit on gpu_milli, shares first */
    KACE_SCHED_RANDOM,        /* a uniformly random GPU that can take the job */
    KACE_SCHED_MEMCAP,        /* idle GPU first, else the group of lowest summed memcap */
    KACE_SCHED_SM,            /* idle GPU first, else the group of highest mean sm% (the paper's rule) */
    KACE_SCHED_MEM,           /* idle GPU first, else the group of lowest mean mem% */
    KACE_SCHED_KACE,          /* idle GPU first, else the best predicted throughput gain, else queue */
    KACE_SCHED_ORACLE,        /* KACE's decisions on measured rates (given by the caller's rate source) */
    KACE_SCHED_N_POLICIES
} kace_sched_policy;

const char *kace_sched_policy_name(kace_sched_policy p);
/* -1 when unknown; case is ignored ("memcap", "SM%", "oracle"). */
int kace_sched_policy_from_name(const char *name);

/* Where a group's rates come from. rates() fills fraction[i], the share of
 * its exclusive speed member group[i] keeps (workload indices of the
 * profile dataset; k members, any order), and *confidence in [0, 1]. */
typedef struct kace_rate_source {
    kace_status (*rates)(void *self, kace_ctx *ctx, const int *group, int k, double *fraction,
                         double *confidence);
    void *self;
} kace_rate_source;

/* A rate source backed by a predictor and profiles (kace_place_fractions);
 * both must outlive it. Fails unless the predictor gives each member's
 * throughput (KACE_PRED_MEMBERS). */
typedef struct kace_model_rates {
    const kace_predictor *predictor;
    const kace_dataset *profiles;
} kace_model_rates;
kace_status kace_rate_source_model(kace_ctx *ctx, kace_model_rates *holder, const kace_predictor *predictor,
                                   const kace_dataset *profiles, kace_rate_source *out);

/* A set of workload groups (sizes 2..KACE_SCHED_MAX_GROUP, order-free). */
typedef struct kace_group_set kace_group_set;
kace_status kace_group_set_new(kace_ctx *ctx, kace_group_set **out);
void kace_group_set_free(kace_group_set **s);
kace_status kace_group_set_add(kace_ctx *ctx, kace_group_set *s, const int *group, int k);
bool kace_group_set_has(const kace_group_set *s, const int *group, int k);
size_t kace_group_set_size(const kace_group_set *s);

/* kace's thresholds, chosen by `kace simulate --tune` on pod lists that are
 * never reported (README "Cluster scale" gives the protocol and its output). */
#define KACE_SCHED_TUNED_MIN_GAIN 0.2
#define KACE_SCHED_TUNED_MIN_CONFIDENCE 0.6
#define KACE_SCHED_TUNED_OVERLOAD_QUEUE 0.0
#define KACE_SCHED_TUNED_RESERVE true

typedef struct kace_sched_config {
    kace_sched_policy policy;
    int max_group;          /* 1..KACE_SCHED_MAX_GROUP */
    double gpu_mem_gb;      /* memory of every GPU; members' memcap sum must fit */
    double ls_target;       /* KACE/ORACLE: an LS job keeps at least this fraction (predicted) */
    double min_confidence;  /* KACE: share only on predictions at least this sure */
    double min_gain;        /* KACE/ORACLE: share only when the GPU gains at least this
                               (in jobs' worth of exclusive speed) */
    double overload_queue;  /* KACE/ORACLE: once this many jobs per GPU wait in the queue, a
                               job that would wait also joins groups below min_gain and
                               min_confidence, as long as their predicted throughput stays
                               >= overload_min_rate (waiting delivers nothing); < 0: never */
    double overload_min_rate; /* in jobs' worth of exclusive speed; 1 = sharing beats exclusive */
    bool reserve;           /* KACE/ORACLE, while overloaded with no GPU idle: the longest
                               waiting single-GPU job holds one shared GPU (nobody else joins
                               it) until it can start there, so it is not starved */
    uint64_t seed;          /* RANDOM */
    bool scan_all;          /* find the same kind of GPU by looking at every GPU per
                               decision: the naive peer the benchmark compares with */
    kace_objective objective; /* KACE/ORACLE: which of the GPUs past the gates is best: the
                               change in summed shares (normalized), in samples/s (raw), or
                               the smallest share left (fair); the gates stay in shares.
                               Raw needs every pool workload's exclusive throughput */
} kace_sched_config;

/* max_group 3, 32 GB, ls_target 0.5 (the LS guarantee), and the thresholds
 * `kace simulate --tune` chose on held-out pod lists (README "Cluster scale"):
 * KACE_SCHED_TUNED_*; overload_min_rate 1; objective normalized. */
void kace_sched_config_default(kace_sched_config *c, kace_sched_policy policy);

typedef struct kace_sched_job {
    int id;          /* the caller's handle, >= 0 (dense ids keep memory small) */
    int workload;    /* index into the profile dataset */
    bool ls;         /* latency sensitive: gets ls_target under KACE/ORACLE */
    int gpu_milli;   /* 1..1000: the share PACKING reserves; other policies ignore it */
    int num_gpu;     /* 1, or a gang of whole idle GPUs on one node (never shared) */
} kace_sched_job;

/* Called for every job that starts: on gpus[0..n) (one unless a gang). */
typedef void (*kace_sched_start_fn)(void *user, int job_id, const int *gpus, int n);

typedef struct kace_sched kace_sched;

/* A cluster of n_nodes nodes with node_gpus[i] GPUs each (GPU ids are
 * numbered node by node). pool[0..n_pool) are the workloads jobs may have
 * (indices of profiles, which needs memcap, sm% and mem% for each);
 * runnable lists the groups allowed to share; rates is consulted once per
 * group at creation (KACE, ORACLE) and must be given for them. The
 * scheduler keeps no pointer to profiles, runnable or rates. */
kace_status kace_sched_new(kace_ctx *ctx, const kace_sched_config *cfg, const kace_dataset *profiles,
                           const int *pool, int n_pool, const kace_group_set *runnable,
                           const kace_rate_source *rates, const int *node_gpus, size_t n_nodes,
                           kace_sched_start_fn on_start, void *user, kace_sched **out);
void kace_sched_free(kace_sched **s);

/* A job arrives: it starts now (on_start is called before this returns) or
 * waits in the queue. Fails on an unknown workload, a gang larger than every
 * node, or an id already in use. */
kace_status kace_sched_submit(kace_ctx *ctx, kace_sched *s, const kace_sched_job *job);
/* A running job ends: its GPUs are freed and queued jobs that now fit start
 * (on_start, oldest first). */
kace_status kace_sched_finish(kace_ctx *ctx, kace_sched *s, int job_id);

/* ---- driven from outside: the Kubernetes extender (lib/service/serve_k8s.c)
 * keeps a scheduler fed by what the cluster reports ---- */

/* A single-GPU job that already runs on GPU gpu (placed before kace knew of
 * it, or by someone else) starts there now, whatever the policy would say;
 * on_start is called. Fails on a gang, a GPU already holding
 * KACE_SCHED_MAX_GROUP jobs (or more than PACKING's whole share), and what
 * kace_sched_submit refuses. */
kace_status kace_sched_start_on(kace_ctx *ctx, kace_sched *s, const kace_sched_job *job, int gpu);
/* A job leaves: a running one finishes (kace_sched_finish), a queued one
 * leaves the queue; then queued jobs that now fit start. */
kace_status kace_sched_withdraw(kace_ctx *ctx, kace_sched *s, int job_id);

/* The jobs on a GPU (at most KACE_SCHED_MAX_GROUP; a gang job shows on each
 * of its GPUs). Returns how many. */
int kace_sched_gpu_jobs(const kace_sched *s, int gpu, int *job_ids);
size_t kace_sched_n_gpus(const kace_sched *s);
size_t kace_sched_n_queued(const kace_sched *s);
/* GPUs running at least one job. */
size_t kace_sched_n_busy(const kace_sched *s);

/* The decision path walks buckets; this counts the GPU and bucket visits
 * (for the benchmark's claim that placement does not scan GPUs). */
uint64_t kace_sched_visits(const kace_sched *s);

#ifdef __cplusplus
}
#endif

#endif
