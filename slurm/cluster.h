/* What runs where in a Slurm cluster, as kace's placer sees it: one shared
 * GPU per node (nodes with several GPUs are treated as one pool, see
 * README), the jobs on it with the workload and MPS share kace recorded in
 * their admin comment. Read through libslurm's public API (slurm_load_node,
 * slurm_load_jobs), so it works in slurmctld's plugins and in `kace slurm`.
 */
#ifndef KACE_SLURM_CLUSTER_H
#define KACE_SLURM_CLUSTER_H

#include <stdbool.h>
#include <stdint.h>

#include "kace/place.h"

typedef struct kace_slurm_job {
    uint32_t id;
    char node[KACE_NAME_MAX];
    char workload[KACE_NAME_MAX]; /* "" when the job carries no kace record */
    int share;                    /* MPS % kace gave it */
    bool running;                 /* false: pending, already steered to node */
    double observed;              /* samples/s the job reported ("kace:throughput=X"
                                     in its comment), NaN when none */
} kace_slurm_job;

typedef struct kace_slurm_cluster {
    kace_place_gpu *gpus; /* one per node with a GPU offering the configured gres */
    long *gres_per_gpu;   /* that gres's count per GPU on each entry's node */
    char **partitions;    /* each entry's node's partitions, "p1,p2" (may be NULL) */
    char default_partition[KACE_NAME_MAX];
    size_t n_gpus;
    kace_slurm_job *jobs; /* every pending or running job that uses a GPU */
    size_t n_jobs;
} kace_slurm_cluster;

/* Loads nodes and jobs from slurmctld. gres is "mps" or "shard". Residents
 * are resolved against ds (NULL: all unknown). KACE_ERR_IO when slurmctld
 * does not answer. */
kace_status kace_slurm_cluster_load(kace_ctx *ctx, const kace_dataset *ds, const char *gres,
                                    kace_slurm_cluster **out);
void kace_slurm_cluster_free(kace_slurm_cluster **c);

/* Adds a job kace just placed to entry g (until the next load shows it). */
void kace_slurm_cluster_add(kace_slurm_cluster *c, size_t g, int workload, int share);

/* True when entry g's node is in every partition of the comma-separated
 * list (NULL or empty: the default partition). A job steered to a node
 * outside its partitions would be rejected. */
bool kace_slurm_gpu_in_partitions(const kace_slurm_cluster *c, size_t g, const char *list);

/* Parses "kace:throughput=X" out of a job comment; NaN when absent. */
double kace_slurm_parse_throughput(const char *comment);

#endif
