/* What runs where in a Slurm cluster, as kace's placer sees it: one entry
 * per GPU of each node with the configured shared gres (a node with
 * gres gpu:2 is two entries, GPU 0 and GPU 1), the jobs on each with the
 * workload and MPS share kace recorded in their admin comment (a running
 * job's GPU comes from its gres detail, "IDX:1"), and what a job's
 * constraints are checked against (node features, CPUs, memory,
 * partitions, reservations). Read through libslurm's public API
 * (slurm_load_node, slurm_load_jobs, ...), so it works in slurmctld's
 * plugins and in `kace slurm`.
 */
#ifndef KACE_SLURM_CLUSTER_H
#define KACE_SLURM_CLUSTER_H

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "kace/place.h"
#include "text.h"

typedef struct kace_slurm_job {
    uint32_t id;
    uint32_t user_id;
    char node[KACE_NAME_MAX];     /* where it runs; for a pending job, where kace prefers it */
    size_t entry;                 /* its GPU entry (index into the cluster's gpus) */
    int gpu;                      /* that GPU's index on the node */
    char workload[KACE_NAME_MAX]; /* "" when the job carries no kace record */
    int share;                    /* MPS % kace gave it (100: whole GPU, or not kace's) */
    bool shares;                  /* it holds the shared gres (mps or shard) on this GPU */
    bool running;                 /* false: pending (node = kace's preference) */
    time_t start_time;            /* when it started (running jobs) */
    double observed;              /* samples/s the job reported (kace report), NaN when none */
    double observed_at;           /* unix seconds of that report */
} kace_slurm_job;

/* What a node offers a job, beside its GPU, and which of its GPUs an
 * entry is. */
typedef struct kace_slurm_node {
    int gpu;                       /* this entry's GPU index on the node, 0.. */
    int n_gpus;                    /* GPUs of the node (entries with its name) */
    char gres_type[KACE_NAME_MAX]; /* the shared gres's type on this GPU ("" untyped):
                                      a request of that type lands on this GPU */
    char *features;                /* active features "a,b" (NULL: none) */
    char feature[KACE_NAME_MAX];   /* a feature no other node has: what kace prefers; "" none */
    char *partitions;              /* "p1,p2" (NULL: none) */
    uint32_t cpus;
    uint64_t memory_mb;
    uint32_t tmp_disk_mb;
} kace_slurm_node;

typedef struct kace_slurm_resv {
    char *name;
    char *nodes; /* hostlist expression, or "ALL" */
    time_t start, end;
    bool *holds; /* per GPU entry: the reservation holds its node (parsed once, not at each decision) */
} kace_slurm_resv;

typedef struct kace_slurm_cluster {
    kace_place_gpu *gpus;  /* one per GPU of each node offering the configured gres */
    long *gres_per_gpu;    /* that gres's count per GPU on each entry's node */
    kace_slurm_node *nodes; /* each entry's node */
    char default_partition[KACE_NAME_MAX];
    size_t n_gpus;
    kace_slurm_job *jobs; /* every pending or running job that uses a GPU */
    size_t n_jobs;
    kace_slurm_resv *resvs;
    size_t n_resvs;
    char (*picks)[KACE_SLURM_PICK_MAX]; /* the pick tokens of every job slurmctld holds */
    uint32_t *pick_jobs;                /* and those jobs' ids */
    size_t n_picks;
} kace_slurm_cluster;

/* Loads nodes, partitions, reservations and jobs from slurmctld. gres is
 * "mps" or "shard". Residents are left unknown until
 * kace_slurm_cluster_resolve. KACE_ERR_IO when slurmctld does not answer.
 * With gres "mps", a node with several GPUs offers only one of them:
 * Slurm (22.05) puts every MPS job of a node on one GPU at a time (the one
 * its running MPS jobs use, else the first idle one). */
kace_status kace_slurm_cluster_load(kace_ctx *ctx, const char *gres, kace_slurm_cluster **out);
/* (Re)computes every GPU's residents and free share from the jobs, their
 * workloads looked up in ds (NULL: all unknown). Returns how many jobs
 * name a workload ds does not hold. */
size_t kace_slurm_cluster_resolve(kace_slurm_cluster *c, const kace_dataset *ds);
/* A GPU entry's name for people: "n1" on a one-GPU node, "n2/gpu1" else. */
const char *kace_slurm_gpu_name(const kace_slurm_cluster *c, size_t g, char *buf, size_t size);
void kace_slurm_cluster_free(kace_slurm_cluster **c);

/* Adds a job to GPU entry g (a resident with that workload and share). */
void kace_slurm_cluster_add(kace_place_gpu *gpu, int workload, int share);

/* True when entry g's node is in every partition of the comma-separated
 * list (NULL or empty: the default partition). A job steered to a node
 * outside its partitions would be rejected. */
bool kace_slurm_gpu_in_partitions(const kace_slurm_cluster *c, size_t g, const char *list);

/* The id of the job slurmctld holds that carries the pick token, 0 when none. */
uint32_t kace_slurm_pick_job(const kace_slurm_cluster *c, const char *pick);

/* True when hostlist expression list (e.g. "n[1-3],gpu7") names node. */
bool kace_slurm_hostlist_has(const char *list, const char *node);
/* How many hosts a hostlist expression names (0 for NULL or empty). */
int kace_slurm_hostlist_count(const char *list);

#endif
