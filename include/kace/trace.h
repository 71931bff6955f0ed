/* Production GPU cluster traces: the Alibaba 2023 "openb" node list and pod
 * lists (../shared/data/alibaba-gpu-2023), parsed for replay.
 *
 * Pod list columns (header line, any order): name, num_gpu, gpu_milli, qos,
 * creation_time, deletion_time are required; scheduled_time, cpu_milli,
 * memory_mib, gpu_spec, pod_phase are optional; any other column is an error.
 * Node list columns: sn, gpu, model required; cpu_milli, memory_mib optional.
 * Every error names file:line:column and what was expected; a parse either
 * returns every row or fails (no row is ever skipped).
 */
#ifndef KACE_TRACE_H
#define KACE_TRACE_H

#include <stddef.h>

#include "kace/kace.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KACE_TRACE_NAME_MAX 64
#define KACE_TRACE_MAX_GPUS_PER_JOB 64

typedef enum kace_qos {
    KACE_QOS_LS = 0,     /* latency sensitive */
    KACE_QOS_BE,         /* best effort */
    KACE_QOS_BURSTABLE,
    KACE_QOS_GUARANTEED,
    KACE_N_QOS
} kace_qos;

/* "LS", "BE", "Burstable", "Guaranteed". */
const char *kace_qos_name(kace_qos q);

typedef struct kace_trace_job {
    char name[KACE_TRACE_NAME_MAX];
    int num_gpu;     /* 0 = CPU-only pod, 1 = single GPU, more = gang of whole GPUs */
    int gpu_milli;   /* share of one GPU requested, 1..1000 (0 for CPU-only pods) */
    kace_qos qos;
    double arrival;  /* creation_time, seconds */
    /* Run time at exclusive speed, seconds: deletion_time - scheduled_time
     * (creation_time when the pod was never scheduled), at least 1 s so that
     * every job occupies its GPU for a while. */
    double work;
    int line;        /* source line */
} kace_trace_job;

typedef struct kace_trace {
    kace_trace_job *jobs; /* in file order */
    size_t n_jobs;
    size_t n_gpu_jobs;    /* jobs with num_gpu >= 1 */
} kace_trace;

typedef struct kace_trace_node {
    char name[KACE_TRACE_NAME_MAX];
    char model[KACE_TRACE_NAME_MAX]; /* "V100M32", "T4", ... */
    int n_gpus;
} kace_trace_node;

typedef struct kace_node_list {
    kace_trace_node *nodes;
    size_t n_nodes;
    size_t n_gpus;
} kace_node_list;

/* Parses a pod list held in memory; origin names it in messages. */
kace_status kace_trace_parse(kace_ctx *ctx, const char *data, size_t len, const char *origin, kace_trace **out);
kace_status kace_trace_load(kace_ctx *ctx, const char *path, kace_trace **out);
void kace_trace_free(kace_trace **t);

kace_status kace_node_list_parse(kace_ctx *ctx, const char *data, size_t len, const char *origin,
                                 kace_node_list **out);
kace_status kace_node_list_load(kace_ctx *ctx, const char *path, kace_node_list **out);
void kace_node_list_free(kace_node_list **n);

#ifdef __cplusplus
}
#endif

#endif
