/* Cluster state from slurmctld (see cluster.h). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <slurm/slurm.h>
#include <slurm/slurm_errno.h>

#include "cluster.h"

static bool node_usable(uint32_t state)
{
    uint32_t base = state & NODE_STATE_BASE;
    if (base == NODE_STATE_DOWN || base == NODE_STATE_FUTURE || base == NODE_STATE_UNKNOWN)
        return false;
    return !(state & (NODE_STATE_DRAIN | NODE_STATE_NO_RESPOND | NODE_STATE_FAIL));
}

/* A job uses a GPU when it asks for gpu, mps or shard per node. */
static bool uses_gpu(const char *tres_per_node)
{
    return tres_per_node && (strstr(tres_per_node, "gpu") || strstr(tres_per_node, "mps") ||
                             strstr(tres_per_node, "shard"));
}

double kace_slurm_parse_throughput(const char *comment)
{
    static const char key[] = "kace:throughput=";
    const char *p = comment ? strstr(comment, key) : NULL;
    if (!p)
        return NAN;
    char *end;
    errno = 0;
    double v = strtod(p + sizeof key - 1, &end);
    if (errno || end == p + sizeof key - 1 || !isfinite(v) || v < 0)
        return NAN;
    return v;
}

static int find_gpu(const kace_slurm_cluster *c, const char *node)
{
    for (size_t i = 0; i < c->n_gpus; i++)
        if (strcmp(c->gpus[i].node, node) == 0)
            return (int)i;
    return -1;
}

void kace_slurm_cluster_add(kace_slurm_cluster *c, size_t g, int workload, int share)
{
    kace_place_gpu *gpu = &c->gpus[g];
    if (gpu->n_residents < KACE_MAX_K)
        gpu->resident[gpu->n_residents] = workload;
    gpu->n_residents++;
    gpu->share_free = share > gpu->share_free ? 0 : gpu->share_free - share;
}

static kace_status load_nodes(kace_ctx *ctx, kace_slurm_cluster *c, const char *gres)
{
    node_info_msg_t *nodes = NULL;
    partition_info_msg_t *parts = NULL;
    if (slurm_load_partitions(0, &parts, SHOW_ALL) != SLURM_SUCCESS)
        return kace_fail(ctx, KACE_ERR_IO, "slurm_load_partitions: %s", slurm_strerror(slurm_get_errno()));
    if (slurm_load_node(0, &nodes, SHOW_ALL) != SLURM_SUCCESS) {
        slurm_free_partition_info_msg(parts);
        return kace_fail(ctx, KACE_ERR_IO, "slurm_load_node: %s", slurm_strerror(slurm_get_errno()));
    }
    for (uint32_t i = 0; i < parts->record_count; i++)
        if ((parts->partition_array[i].flags & PART_FLAG_DEFAULT) && parts->partition_array[i].name)
            snprintf(c->default_partition, sizeof c->default_partition, "%s", parts->partition_array[i].name);
    /* Fills each node's partitions (slurm_load_node leaves them out). */
    slurm_populate_node_partitions(nodes, parts);
    kace_status st = KACE_OK;
    c->gpus = calloc(nodes->record_count ? nodes->record_count : 1, sizeof *c->gpus);
    c->gres_per_gpu = calloc(nodes->record_count ? nodes->record_count : 1, sizeof *c->gres_per_gpu);
    c->partitions = calloc(nodes->record_count ? nodes->record_count : 1, sizeof *c->partitions);
    if (!c->gpus || !c->gres_per_gpu || !c->partitions) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory for %u nodes", nodes->record_count);
        goto done;
    }
    for (uint32_t i = 0; i < nodes->record_count; i++) {
        const node_info_t *n = &nodes->node_array[i];
        if (!n->name || strlen(n->name) >= KACE_NAME_MAX)
            continue;
        long n_gpus = kace_place_gres_count(n->gres, "gpu");
        long count = kace_place_gres_count(n->gres, gres);
        if (n_gpus < 1 || count < 1)
            continue;
        kace_place_gpu *g = &c->gpus[c->n_gpus];
        snprintf(g->node, sizeof g->node, "%s", n->name);
        g->share_free = 100;
        g->usable = node_usable(n->node_state);
        g->base_score = NAN;
        c->gres_per_gpu[c->n_gpus] = count / n_gpus;
        c->partitions[c->n_gpus] = n->partitions ? strdup(n->partitions) : NULL;
        c->n_gpus++;
    }
done:
    slurm_free_node_info_msg(nodes);
    slurm_free_partition_info_msg(parts);
    return st;
}

static kace_status load_jobs(kace_ctx *ctx, kace_slurm_cluster *c, const kace_dataset *ds)
{
    job_info_msg_t *jobs = NULL;
    if (slurm_load_jobs(0, &jobs, SHOW_ALL) != SLURM_SUCCESS)
        return kace_fail(ctx, KACE_ERR_IO, "slurm_load_jobs: %s", slurm_strerror(slurm_get_errno()));
    kace_status st = KACE_OK;
    c->jobs = calloc(jobs->record_count ? jobs->record_count : 1, sizeof *c->jobs);
    if (!c->jobs) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory for %u jobs", jobs->record_count);
        goto done;
    }
    for (uint32_t i = 0; i < jobs->record_count; i++) {
        const slurm_job_info_t *j = &jobs->job_array[i];
        uint32_t state = j->job_state & JOB_STATE_BASE;
        char workload[KACE_NAME_MAX];
        int share = 0;
        bool tagged = kace_place_tag_parse(j->admin_comment, workload, &share);
        /* Running jobs are where slurmctld put them; pending ones kace
         * steered are bound to their required node already. */
        const char *node = state == JOB_RUNNING ? j->nodes : (state == JOB_PENDING && tagged ? j->req_nodes : NULL);
        if (!node || !*node || (!tagged && !uses_gpu(j->tres_per_node)))
            continue;
        int g = find_gpu(c, node);
        if (g < 0)
            continue; /* several nodes, or a node without a shared GPU */
        kace_slurm_job *job = &c->jobs[c->n_jobs++];
        job->id = j->job_id;
        snprintf(job->node, sizeof job->node, "%s", node);
        snprintf(job->workload, sizeof job->workload, "%s", tagged ? workload : "");
        job->share = share;
        job->running = state == JOB_RUNNING;
        job->observed = kace_slurm_parse_throughput(j->comment);
        kace_slurm_cluster_add(c, (size_t)g, tagged && ds ? kace_dataset_find(ds, workload) : -1, share);
    }
done:
    slurm_free_job_info_msg(jobs);
    return st;
}

static bool in_list(const char *list, const char *item, size_t len)
{
    for (const char *p = list; p && *p;) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if (n == len && strncmp(p, item, len) == 0)
            return true;
        p = end ? end + 1 : NULL;
    }
    return false;
}

bool kace_slurm_gpu_in_partitions(const kace_slurm_cluster *c, size_t g, const char *list)
{
    if (!list || !*list)
        list = c->default_partition;
    if (!*list)
        return false;
    for (const char *p = list; *p;) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if (!in_list(c->partitions[g], p, n))
            return false;
        if (!end)
            break;
        p = end + 1;
    }
    return true;
}

kace_status kace_slurm_cluster_load(kace_ctx *ctx, const kace_dataset *ds, const char *gres,
                                    kace_slurm_cluster **out)
{
    *out = NULL;
    kace_slurm_cluster *c = calloc(1, sizeof *c);
    if (!c)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    kace_status st = load_nodes(ctx, c, gres);
    if (!st)
        st = load_jobs(ctx, c, ds);
    if (st) {
        kace_slurm_cluster_free(&c);
        return st;
    }
    *out = c;
    return KACE_OK;
}

void kace_slurm_cluster_free(kace_slurm_cluster **c)
{
    if (!c || !*c)
        return;
    free((*c)->gpus);
    free((*c)->gres_per_gpu);
    for (size_t i = 0; (*c)->partitions && i < (*c)->n_gpus; i++)
        free((*c)->partitions[i]);
    free((*c)->partitions);
    free((*c)->jobs);
    free(*c);
    *c = NULL;
}
