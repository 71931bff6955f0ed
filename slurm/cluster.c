/* Cluster state from slurmctld (see cluster.h). */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <slurm/slurm.h>
#include <slurm/slurm_errno.h>

#include "cluster.h"
#include "text.h"

static bool node_usable(uint32_t state)
{
    uint32_t base = state & NODE_STATE_BASE;
    if (base == NODE_STATE_DOWN || base == NODE_STATE_FUTURE || base == NODE_STATE_UNKNOWN)
        return false;
    return !(state & (NODE_STATE_DRAIN | NODE_STATE_NO_RESPOND | NODE_STATE_FAIL));
}

/* A job uses a GPU when it asks for gpu, mps or shard in any form. */
static bool mentions_gpu(const char *tres)
{
    return tres && (strstr(tres, "gpu") || strstr(tres, "mps") || strstr(tres, "shard"));
}

static bool uses_gpu(const slurm_job_info_t *j)
{
    return mentions_gpu(j->tres_per_node) || mentions_gpu(j->tres_per_job) || mentions_gpu(j->tres_per_task) ||
           mentions_gpu(j->tres_per_socket);
}

static int find_gpu(const kace_slurm_cluster *c, const char *node)
{
    for (size_t i = 0; i < c->n_gpus; i++)
        if (strcmp(c->gpus[i].node, node) == 0)
            return (int)i;
    return -1;
}

void kace_slurm_cluster_add(kace_place_gpu *gpu, int workload, int share)
{
    if (gpu->n_residents < KACE_MAX_K)
        gpu->resident[gpu->n_residents] = workload;
    gpu->n_residents++;
    gpu->share_free = share > gpu->share_free ? 0 : gpu->share_free - share;
}

/* A feature of node i that no other node of the cluster has. */
static void unique_feature(const node_info_msg_t *nodes, uint32_t i, char *out, size_t size)
{
    out[0] = '\0';
    const char *own = nodes->node_array[i].features_act ? nodes->node_array[i].features_act
                                                         : nodes->node_array[i].features;
    for (const char *p = own; p && *p;) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        bool shared = n == 0 || n >= size;
        for (uint32_t k = 0; k < nodes->record_count && !shared; k++) {
            const node_info_t *o = &nodes->node_array[k];
            if (k != i && kace_slurm_in_list(o->features_act ? o->features_act : o->features, p, n))
                shared = true;
        }
        if (!shared) {
            memcpy(out, p, n);
            out[n] = '\0';
            return;
        }
        p = end ? end + 1 : NULL;
    }
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
    size_t n = nodes->record_count ? nodes->record_count : 1;
    c->gpus = calloc(n, sizeof *c->gpus);
    c->gres_per_gpu = calloc(n, sizeof *c->gres_per_gpu);
    c->nodes = calloc(n, sizeof *c->nodes);
    if (!c->gpus || !c->gres_per_gpu || !c->nodes) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory for %u nodes", nodes->record_count);
        goto done;
    }
    for (uint32_t i = 0; i < nodes->record_count; i++) {
        const node_info_t *ni = &nodes->node_array[i];
        if (!ni->name || strlen(ni->name) >= KACE_NAME_MAX)
            continue;
        long n_gpus = kace_place_gres_count(ni->gres, "gpu");
        long count = kace_place_gres_count(ni->gres, gres);
        if (n_gpus < 1 || count < 1)
            continue;
        kace_place_gpu *g = &c->gpus[c->n_gpus];
        kace_slurm_node *node = &c->nodes[c->n_gpus];
        snprintf(g->node, sizeof g->node, "%s", ni->name);
        g->share_free = 100;
        g->usable = node_usable(ni->node_state);
        g->base_score = NAN;
        c->gres_per_gpu[c->n_gpus] = count / n_gpus;
        const char *features = ni->features_act ? ni->features_act : ni->features;
        node->features = features ? strdup(features) : NULL;
        node->partitions = ni->partitions ? strdup(ni->partitions) : NULL;
        unique_feature(nodes, i, node->feature, sizeof node->feature);
        node->cpus = ni->cpus;
        node->memory_mb = ni->real_memory;
        node->tmp_disk_mb = ni->tmp_disk;
        c->n_gpus++;
    }
done:
    slurm_free_node_info_msg(nodes);
    slurm_free_partition_info_msg(parts);
    return st;
}

static kace_status load_resvs(kace_ctx *ctx, kace_slurm_cluster *c)
{
    reserve_info_msg_t *resvs = NULL;
    if (slurm_load_reservations(0, &resvs) != SLURM_SUCCESS)
        return kace_fail(ctx, KACE_ERR_IO, "slurm_load_reservations: %s", slurm_strerror(slurm_get_errno()));
    kace_status st = KACE_OK;
    c->resvs = calloc(resvs->record_count ? resvs->record_count : 1, sizeof *c->resvs);
    if (!c->resvs) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory for %u reservations", resvs->record_count);
        goto done;
    }
    for (uint32_t i = 0; i < resvs->record_count; i++) {
        const reserve_info_t *r = &resvs->reservation_array[i];
        if (!r->name)
            continue;
        kace_slurm_resv *out = &c->resvs[c->n_resvs++];
        out->name = strdup(r->name);
        out->nodes = strdup(r->node_list ? r->node_list : "");
        out->start = r->start_time;
        out->end = r->end_time;
        if (!out->name || !out->nodes) {
            st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory for reservation %s", r->name);
            break;
        }
    }
done:
    slurm_free_reservation_info_msg(resvs);
    return st;
}

static kace_status load_jobs(kace_ctx *ctx, kace_slurm_cluster *c, const kace_dataset *ds)
{
    job_info_msg_t *jobs = NULL;
    if (slurm_load_jobs(0, &jobs, SHOW_ALL) != SLURM_SUCCESS)
        return kace_fail(ctx, KACE_ERR_IO, "slurm_load_jobs: %s", slurm_strerror(slurm_get_errno()));
    kace_status st = KACE_OK;
    size_t n = jobs->record_count ? jobs->record_count : 1;
    c->jobs = calloc(n, sizeof *c->jobs);
    c->picks = calloc(n, sizeof *c->picks);
    c->pick_jobs = calloc(n, sizeof *c->pick_jobs);
    if (!c->jobs || !c->picks || !c->pick_jobs) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory for %u jobs", jobs->record_count);
        goto done;
    }
    for (uint32_t i = 0; i < jobs->record_count; i++) {
        const slurm_job_info_t *j = &jobs->job_array[i];
        uint32_t state = j->job_state & JOB_STATE_BASE;
        char workload[KACE_NAME_MAX], preferred[KACE_NAME_MAX], pick[KACE_SLURM_PICK_MAX];
        int share = 0;
        bool tagged = kace_place_tag_parse(j->admin_comment, workload, &share);
        bool picked = kace_slurm_pick_parse(j->admin_comment, preferred, pick);
        /* Any job slurmctld holds, in any state, confirms its placement. */
        if (picked) {
            c->pick_jobs[c->n_picks] = j->job_id;
            memcpy(c->picks[c->n_picks++], pick, sizeof pick);
        }
        /* Running jobs are where slurmctld put them; pending ones kace
         * placed count where kace prefers them. */
        const char *node = state == JOB_RUNNING ? j->nodes
                                                : (state == JOB_PENDING && tagged && picked ? preferred : NULL);
        if (!node || !*node || (!tagged && !uses_gpu(j)))
            continue;
        int g = find_gpu(c, node);
        if (g < 0)
            continue; /* several nodes, or a node without a shared GPU */
        kace_slurm_job *job = &c->jobs[c->n_jobs++];
        job->id = j->job_id;
        job->user_id = j->user_id;
        snprintf(job->node, sizeof job->node, "%s", node);
        snprintf(job->workload, sizeof job->workload, "%s", tagged ? workload : "");
        job->share = share;
        job->running = state == JOB_RUNNING;
        job->start_time = j->start_time;
        job->observed = NAN;
        /* A job on whole GPUs, or one kace does not know, leaves nothing
         * kace can predict on its GPU (resident -1). */
        kace_slurm_cluster_add(&c->gpus[g], tagged && ds ? kace_dataset_find(ds, workload) : -1,
                               tagged ? share : 100);
    }
done:
    slurm_free_job_info_msg(jobs);
    return st;
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
        if (!kace_slurm_in_list(c->nodes[g].partitions, p, n))
            return false;
        if (!end)
            break;
        p = end + 1;
    }
    return true;
}

uint32_t kace_slurm_pick_job(const kace_slurm_cluster *c, const char *pick)
{
    for (size_t i = 0; i < c->n_picks; i++)
        if (strcmp(c->picks[i], pick) == 0)
            return c->pick_jobs[i];
    return 0;
}

bool kace_slurm_hostlist_has(const char *list, const char *node)
{
    if (!list || !*list)
        return false;
    hostlist_t hl = slurm_hostlist_create(list);
    if (!hl)
        return false;
    bool found = slurm_hostlist_find(hl, node) >= 0;
    slurm_hostlist_destroy(hl);
    return found;
}

int kace_slurm_hostlist_count(const char *list)
{
    if (!list || !*list)
        return 0;
    hostlist_t hl = slurm_hostlist_create(list);
    if (!hl)
        return 0;
    int n = slurm_hostlist_count(hl);
    slurm_hostlist_destroy(hl);
    return n;
}

/* Which GPU entries' nodes each reservation holds. */
static kace_status resv_nodes(kace_ctx *ctx, kace_slurm_cluster *c)
{
    for (size_t r = 0; r < c->n_resvs; r++) {
        kace_slurm_resv *rv = &c->resvs[r];
        rv->holds = calloc(c->n_gpus ? c->n_gpus : 1, sizeof *rv->holds);
        if (!rv->holds)
            return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory for reservation %s", rv->name);
        bool all = strcmp(rv->nodes, "ALL") == 0;
        hostlist_t hl = all || !*rv->nodes ? NULL : slurm_hostlist_create(rv->nodes);
        for (size_t g = 0; g < c->n_gpus; g++)
            rv->holds[g] = all || (hl && slurm_hostlist_find(hl, c->gpus[g].node) >= 0);
        if (hl)
            slurm_hostlist_destroy(hl);
    }
    return KACE_OK;
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
        st = load_resvs(ctx, c);
    if (!st)
        st = load_jobs(ctx, c, ds);
    if (!st)
        st = resv_nodes(ctx, c);
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
    kace_slurm_cluster *x = *c;
    for (size_t i = 0; x->nodes && i < x->n_gpus; i++) {
        free(x->nodes[i].features);
        free(x->nodes[i].partitions);
    }
    for (size_t i = 0; i < x->n_resvs; i++) {
        free(x->resvs[i].name);
        free(x->resvs[i].nodes);
        free(x->resvs[i].holds);
    }
    free(x->gpus);
    free(x->gres_per_gpu);
    free(x->nodes);
    free(x->resvs);
    free(x->jobs);
    free(x->picks);
    free(x->pick_jobs);
    free(x);
    *c = NULL;
}
