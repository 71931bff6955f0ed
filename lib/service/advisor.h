/* The advisor (advisor.c): what it holds, and the GPU placement score the
 * endpoints (serve.c) and the Kubernetes extender (serve_k8s.c) share.
 * Internal. */
#ifndef KACE_LIB_SERVICE_ADVISOR_H
#define KACE_LIB_SERVICE_ADVISOR_H

#include <stdbool.h>

#include "kace/policy.h"
#include "kace/serve.h"
#include "measured_index.h"

struct kace_advisor {
    kace_dataset *ds;
    kace_model *m;
    kace_advisor_options opt;
    kace_split_model *split; /* NULL: /v1/mps-split uses the profile rule */
    size_t split_grids;      /* grids the split model was fitted on */
    kace_measured_index *measured; /* ds's measured sums by group, built with the advisor */
};

/* The mean measured sum of the successful all-100% runs of exactly this
 * group, NaN when there is none: an index lookup, whatever the store's size. */
double kace_advisor_measured_group(const kace_advisor *a, const int *group, int k);
/* The same under objective o: the mean of the runs' values. */
double kace_advisor_measured_group_by(const kace_advisor *a, kace_objective o, const int *group, int k);

/* The objective a request without "objective" is answered under: the
 * advisor's (kace serve --objective), else the route's own (dflt). */
kace_objective kace_advisor_objective(const kace_advisor *a, kace_objective dflt);

/* kace_rank_partners_by (norm train) on the advisor's dataset and model,
 * each partner's measured value looked up in the index rather than found
 * by a pass over every colocation: the same ranking, the same values. */
kace_status kace_advisor_rank_partners(kace_ctx *ctx, const kace_advisor *a, kace_objective o, int target,
                                       const int *among, size_t n_among, kace_partner *out, size_t *n_out);

/* What placing a job on one GPU would do, under an objective
 * (kace_place_gain_by): normalized, each workload's throughput as a
 * fraction of its exclusive throughput, summed; raw, the throughput sum;
 * fair, the smallest fraction. */
typedef struct kace_gpu_score {
    bool eligible;
    char reason[160];     /* why not eligible */
    double before, after; /* the objective's value of the GPU without / with the job */
    double gain;          /* what the cluster gains: after - before (fair: after - 1) */
    double job_fraction;  /* the job's share of its exclusive throughput */
    double confidence;    /* 0..1; 1 for an empty GPU */
} kace_gpu_score;

/* Scores job on a GPU running resident[0..n_resident) under objective o.
 * Fails only on a model error; a full GPU is scored not eligible. */
kace_status kace_serve_score_gpu(kace_ctx *ctx, const kace_advisor *a, kace_objective o, int job, const int *resident,
                                 int n_resident, int max_colocation, kace_gpu_score *out);

#endif
