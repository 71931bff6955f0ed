/* Shared by the advisor's files (serve.c, serve_k8s.c): request parsing and
 * the GPU placement score. Not part of the public API. */
#ifndef KACE_SERVE_INTERNAL_H
#define KACE_SERVE_INTERNAL_H

#include <cjson/cJSON.h>

#include "kace/serve.h"

struct kace_advisor {
    kace_dataset *ds;
    kace_model *m;
    kace_advisor_options opt;
    kace_split_model *split; /* NULL: /v1/mps-split uses the profile rule */
    size_t split_grids;      /* grids the split model was fitted on */
};

/* Parses a request body that must be one JSON object (nothing after it).
 * Errors name "request body:<line>:<col>". */
kace_status kace_serve_parse_object(kace_ctx *ctx, const char *body, size_t len, cJSON **out);
/* Index of a workload named by a JSON string; `where` names the field in
 * messages ("job", "workloads[2]"). */
kace_status kace_serve_workload(kace_ctx *ctx, const kace_advisor *a, const cJSON *item, const char *where, int *w);
/* A list of 0..max workload names. */
kace_status kace_serve_workload_list(kace_ctx *ctx, const kace_advisor *a, const cJSON *arr, const char *where,
                                     int max, int *idx, int *n);

/* What placing a job on one GPU would do. Throughputs are normalized: each
 * workload's as a fraction of its exclusive throughput, summed. */
typedef struct kace_gpu_score {
    bool eligible;
    char reason[160];     /* why not eligible */
    double before, after; /* normalized throughput of the GPU without / with the job */
    double gain;          /* after - before: what the cluster gains */
    double job_fraction;  /* the job's share of its exclusive throughput */
    double confidence;    /* 0..1; 1 for an empty GPU */
} kace_gpu_score;

/* Scores job on a GPU running resident[0..n_resident). Fails only on a
 * model error; a full GPU is scored not eligible. */
kace_status kace_serve_score_gpu(kace_ctx *ctx, const kace_advisor *a, int job, const int *resident, int n_resident,
                                 int max_colocation, kace_gpu_score *out);

/* Adds a number that may be NaN (written as null). */
cJSON *kace_serve_add_number(cJSON *obj, const char *name, double v);

#endif
