/* Trace-driven, event-driven replay of a GPU cluster under a placement
 * policy (include/kace/sched.h).
 *
 * Jobs that share a GPU progress at their MEASURED colocated rate (the
 * "truth": pairs and triples of the reference set); a group never measured
 * cannot share. The policy never sees the truth: kace_sim_run takes the
 * profiles as a dataset without colocations and hands the scheduler only
 * those, the groups allowed to share and the caller's rate source (a model);
 * only the Oracle policy is given the truth as its rate source.
 */
#ifndef KACE_SIM_H
#define KACE_SIM_H

#include "kace/sacct.h"
#include "kace/sched.h"
#include "kace/trace.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Measured colocated rates: for each measured group (k = 2..3, 100% MPS),
 * the fraction of its exclusive throughput each member kept (runs of the
 * same group averaged). */
typedef struct kace_truth kace_truth;

/* Builds the truth from measured datasets of one store (same workload
 * indices), e.g. the "pairs" and "triples" sets; either may be NULL. */
kace_status kace_truth_build(kace_ctx *ctx, const kace_dataset *const *sets, size_t n_sets, kace_truth **out);
void kace_truth_free(kace_truth **t);
/* Fractions of the members of group (any order; written in that order);
 * KACE_ERR_NOT_FOUND when the group was never measured. */
kace_status kace_truth_rates(kace_ctx *ctx, const kace_truth *t, const int *group, int k, double *fraction);
/* The groups that may share a GPU: every measured group whose sub-groups
 * were measured too (so a job leaving a triple never leaves an unmeasured
 * pair behind). Owned by the truth. */
const kace_group_set *kace_truth_runnable(const kace_truth *t);
/* The truth as a rate source (confidence 1), for the Oracle only. */
void kace_truth_rate_source(const kace_truth *t, kace_rate_source *out);

/* A copy of ds with workloads and profiles only: what a policy may see. */
kace_status kace_dataset_profiles_only(kace_ctx *ctx, const kace_dataset *ds, kace_dataset **out);

typedef struct kace_sim_job {
    double arrival;  /* seconds */
    double work;     /* seconds at exclusive speed, > 0 */
    int workload;    /* index into the profiles */
    bool ls;
    int gpu_milli;   /* 1..1000 */
    int num_gpu;     /* >= 1 */
} kace_sim_job;

/* The documented rule that gives each trace job a workload: FNV-1a 64 of its
 * name, modulo the pool — LS jobs draw from the inference workloads
 * (names ending "-inf"), all others from the training ones. CPU-only pods
 * (num_gpu 0) need no GPU and are not replayed: they are counted in
 * *n_cpu_only. pool must hold at least one workload of each mode. */
kace_status kace_sim_jobs_from_trace(kace_ctx *ctx, const kace_trace *trace, const kace_dataset *profiles,
                                     const int *pool, int n_pool, kace_sim_job **jobs, size_t *n_jobs,
                                     size_t *n_cpu_only);

/* ---- a site's own history (kace simulate --sacct) ---- */

/* Where each replayed job of a sacct file came from, and what was left out
 * (never silently: the CLI prints every count). */
typedef struct kace_sacct_counts {
    size_t rows;            /* jobs in the file */
    size_t not_run;         /* never started or still running (Start or End not a time): not replayed */
    size_t cpu_only;        /* ran without a GPU: not replayed */
    size_t replayed;        /* sim jobs made (a multi-node job makes one per node) */
    size_t multi_node;      /* jobs on several nodes: one gang per node, started independently */
    size_t gangs;           /* sim jobs of several GPUs on a node: whole GPUs, never shared */
    size_t shared_before;   /* jobs that held a GPU share (gres/mps or gres/shard, no gres/gpu):
                               replayed as one GPU each, their run time (under sharing) as work */
    size_t by_rule, by_tag, by_name; /* sim jobs whose workload a mapping rule, kace's placement
                                        tag in AdminComment or the JobName named */
    size_t no_workload;     /* sim jobs with no stored workload (a '-' rule, or nothing matched
                               and the name is no stored workload): replayed exclusive */
    size_t exclusive_rule;  /* of those, by a '-' rule */
    char example_unmapped[KACE_SACCT_TEXT_MAX]; /* one JobName without a workload */
} kace_sacct_counts;

/* The stand-in workload of jobs without one: it fills a GPU's memory, so
 * no other job ever joins it (under any policy). */
#define KACE_SIM_NO_WORKLOAD "(no workload)"

/* Turns the jobs of a sacct file that ran on GPUs into sim jobs: arrival =
 * Submit (seconds after the first replayed job's), work = End - Start (as
 * if it had run alone; at least 1 s), num_gpu = its GPUs per node,
 * gpu_milli 1000, not LS. A job's workload: the first mapping rule that
 * matches (map may be NULL), else the workload of kace's placement tag in
 * its AdminComment, else its JobName; a name that is none of the workloads
 * known[0..n_known) (indices of profiles: those the model can predict)
 * makes it a job without a workload, which gets
 * KACE_SIM_NO_WORKLOAD (added to profiles with memcap gpu_mem_gb, sm% and
 * mem% 100). A rule that names an unknown workload is an error.
 * *pool receives the distinct workloads of the jobs (at most
 * KACE_SCHED_MAX_WORKLOADS), *n_shareable how many of them come first and
 * are real workloads (the stand-in, when used, is last). *jobs and *row
 * (per sim job, its index in sacct->jobs) are malloc'ed. */
kace_status kace_sim_jobs_from_sacct(kace_ctx *ctx, const kace_sacct *sacct, const kace_sacct_map *map,
                                     kace_dataset *profiles, const int *known, int n_known, double gpu_mem_gb,
                                     kace_sim_job **jobs, size_t **row,
                                     size_t *n_jobs, int *pool, int *n_pool, int *n_shareable,
                                     kace_sacct_counts *counts);

/* Rates for workloads that were never measured together: every group of
 * 2..max_group of pool[0..n_pool) (repeats allowed) gets the fractions
 * measured in sets (as kace_truth_build) where they were measured, else the
 * rate source's prediction (a model: the site's jobs never ran together).
 * Groups where a member keeps nothing may not share. *n_measured and
 * *n_predicted count the groups of each origin. */
kace_status kace_truth_complete(kace_ctx *ctx, const kace_dataset *const *sets, size_t n_sets,
                                const kace_rate_source *rates, const int *pool, int n_pool, int max_group,
                                kace_truth **out, size_t *n_measured, size_t *n_predicted);

/* GPUs per node of a cluster of about target_gpus GPUs sampled evenly
 * along the node list (every node when target_gpus is 0 or >= the list's
 * total). *node_gpus is malloc'ed. */
kace_status kace_sim_cluster(kace_ctx *ctx, const kace_node_list *nodes, size_t target_gpus, int **node_gpus,
                             size_t *n_nodes);
/* kace_sim_cluster for replaying jobs: refused (KACE_ERR_INVALID, before
 * any replay) when a job asks for more GPUs than the sample's largest node
 * has, since it could never start; the message names the job, the largest
 * node, and the smallest target_gpus whose sample fits every job. */
kace_status kace_sim_cluster_for(kace_ctx *ctx, const kace_node_list *nodes, size_t target_gpus,
                                 const kace_sim_job *jobs, size_t n_jobs, int **node_gpus, size_t *n_nodes);

typedef struct kace_sim_sample {
    double time;
    int busy_gpus;
    int queued;
    double rate_sum;  /* jobs' worth of exclusive speed the cluster delivers */
} kace_sim_sample;

typedef struct kace_sim_result {
    size_t n_jobs, n_completed, n_ls, n_ls_met;
    double mean_jct, p95_jct, mean_queue, p95_queue;
    double mean_slowdown, p95_slowdown; /* (finish - start) / work: 1 = as fast as alone */
    double makespan;          /* last completion - first arrival, s */
    double gpu_hours;         /* integral of busy GPUs */
    double jobs_per_hour;     /* n_completed / makespan */
    double efficiency;        /* GPU-seconds of work (at exclusive speed) per busy GPU-second:
                                 1 = exclusive, above 1 = sharing gained */
    double work_total, work_done;
    double shared_fraction;   /* of job-seconds spent sharing a GPU */
    int max_group;            /* largest group seen on a GPU */
    double max_mem_gb;        /* largest summed memcap seen on a GPU */
    double *start, *finish;   /* per job (input order) */
    int *completions;         /* per job: how many times it completed (must be 1) */
    int *gpu;                 /* per job: the (first) GPU it ran on */
    kace_sim_sample *samples; /* one per event, when asked for */
    size_t n_samples;
    double decide_seconds;    /* time spent in the scheduler's submit/finish */
    float *submit_seconds;    /* per job: how long its arrival decision took (record_latency) */
} kace_sim_result;

typedef struct kace_sim_config {
    kace_sched_config sched;
    bool record_timeline;
    bool record_latency;
} kace_sim_config;

/* Replays jobs on the cluster. profiles must have no colocations (see
 * kace_dataset_profiles_only); rates is the policy's rate source (KACE;
 * ignored otherwise: the Oracle is given the truth). */
kace_status kace_sim_run(kace_ctx *ctx, const kace_sim_config *cfg, const kace_dataset *profiles,
                         const kace_truth *truth, const int *pool, int n_pool, const kace_rate_source *rates,
                         const int *node_gpus, size_t n_nodes, const kace_sim_job *jobs, size_t n_jobs,
                         kace_sim_result **out);
void kace_sim_result_free(kace_sim_result **r);

/* ---- threshold tuning (kace simulate --tune) ---- */

/* One held-out cell of the tuning protocol: a job list on a cluster. */
typedef struct kace_tune_cell {
    const kace_sim_job *jobs;
    size_t n_jobs;
    const int *node_gpus;
    size_t n_nodes;
} kace_tune_cell;

/* One point of the fixed grid and its score. */
typedef struct kace_tune_point {
    double min_gain, min_confidence, overload_queue;
    bool reserve;
    double geomean_jct_h; /* geometric mean over the cells of kace's mean JCT, hours */
} kace_tune_point;

/* Points of the grid: min_gain {0, .05, .1, .2} x min_confidence {0, .3,
 * .6, .8} x overload_queue {-1, 0, .5, 2} x reserve {off, on}. */
enum { KACE_TUNE_N_POINTS = 128 };

/* The tuning protocol: for every grid point, base (a KACE configuration)
 * with those thresholds runs on every cell; points[p] receives the point
 * and its score, jct[p * n_cells + c] kace's mean JCT (h) on cell c
 * (jct may be NULL), *best the point with the lowest score (the first
 * wins ties). A geometric mean, so that each list and size weighs the same
 * in relative terms. */
kace_status kace_sim_tune(kace_ctx *ctx, const kace_sched_config *base, const kace_dataset *profiles,
                          const kace_truth *truth, const int *pool, int n_pool, const kace_rate_source *rates,
                          const kace_tune_cell *cells, size_t n_cells, kace_tune_point points[KACE_TUNE_N_POINTS],
                          double *jct, size_t *best);

#ifdef __cplusplus
}
#endif

#endif
