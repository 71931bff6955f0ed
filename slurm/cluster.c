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

/* The entry of GPU gpu of node (its first GPU when gpu < 0), -1 when none. */
static int find_gpu(const kace_slurm_cluster *c, const char *node, int gpu)
{
    for (size_t i = 0; i < c->n_gpus; i++)
        if (strcmp(c->gpus[i].node, node) == 0 && (gpu < 0 || c->nodes[i].gpu == gpu))
            return (int)i;
    return -1;
}

const char *kace_slurm_gpu_name(const kace_slurm_cluster *c, size_t g, char *buf, size_t size)
{
    if (c->nodes[g].n_gpus > 1)
        snprintf(buf, size, "%s/gpu%d", c->gpus[g].node, c->nodes[g].gpu);
    else
        snprintf(buf, size, "%s", c->gpus[g].node);
    return buf;
}

/* The type of the i-th item of generic resource name in a node's gres
 * string ("gpu:g0:1,gpu:g1:1,shard:g0:4,shard:g1:4": shard 1 is "g1"),
 * "" when that item is untyped or absent. Slurm lists a node's typed
 * items in the order of its gres.conf, which is its devices' order. */
static void gres_type(const char *gres, const char *name, int i, char *out, size_t size)
{
    out[0] = '\0';
    size_t name_len = strlen(name);
    int seen = 0;
    for (const char *p = gres; p && *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len > name_len + 1 && strncmp(p, name, name_len) == 0 && p[name_len] == ':') {
            const char *type = p + name_len + 1;
            const char *colon = memchr(type, ':', len - name_len - 1);
            if (seen++ == i) {
                size_t n = colon ? (size_t)(colon - type) : 0;
                /* "name:count" has no type; "name:type:count(...)" has. */
                if (n > 0 && n < size && !isdigit((unsigned char)type[0])) {
                    memcpy(out, type, n);
                    out[n] = '\0';
                }
                return;
            }
        }
        p = end ? end + 1 : NULL;
    }
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
    size_t n = 0;
    for (uint32_t i = 0; i < nodes->record_count; i++) {
        long gpus = kace_place_gres_count(nodes->node_array[i].gres, "gpu");
        n += gpus > 0 && gpus < 64 ? (size_t)gpus : gpus >= 64 ? 64 : 0;
    }
    n = n ? n : 1;
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
        if (n_gpus > 64)
            n_gpus = 64; /* the indices a job's gres detail can name here */
        char feature[KACE_NAME_MAX];
        unique_feature(nodes, i, feature, sizeof feature);
        /* Typed per GPU only when every GPU's share has a type of its own. */
        bool typed = true;
        char types[64][KACE_NAME_MAX];
        for (long k = 0; k < n_gpus; k++) {
            gres_type(ni->gres, gres, (int)k, types[k], sizeof types[k]);
            typed = typed && types[k][0];
        }
        for (long k = 0; k < n_gpus; k++) {
            kace_place_gpu *g = &c->gpus[c->n_gpus];
            kace_slurm_node *node = &c->nodes[c->n_gpus];
            snprintf(g->node, sizeof g->node, "%s", ni->name);
            g->share_free = 100;
            g->usable = node_usable(ni->node_state);
            g->base_score = NAN;
            c->gres_per_gpu[c->n_gpus] = count / n_gpus;
            node->gpu = (int)k;
            node->n_gpus = (int)n_gpus;
            if (typed && n_gpus > 1)
                snprintf(node->gres_type, sizeof node->gres_type, "%s", types[k]);
            const char *features = ni->features_act ? ni->features_act : ni->features;
            node->features = features ? strdup(features) : NULL;
            node->partitions = ni->partitions ? strdup(ni->partitions) : NULL;
            snprintf(node->feature, sizeof node->feature, "%s", feature);
            node->cpus = ni->cpus;
            node->memory_mb = ni->real_memory;
            node->tmp_disk_mb = ni->tmp_disk;
            c->n_gpus++;
        }
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

/* Appends a job record on GPU entry g. */
static bool add_job(kace_slurm_cluster *c, size_t *cap, const slurm_job_info_t *j, const char *node, size_t g,
                    const char *workload, int share, bool tagged, bool shares)
{
    if (c->n_jobs == *cap) {
        size_t grown = *cap ? *cap * 2 : 64;
        kace_slurm_job *jobs = realloc(c->jobs, grown * sizeof *jobs);
        if (!jobs)
            return false;
        c->jobs = jobs;
        *cap = grown;
    }
    kace_slurm_job *job = &c->jobs[c->n_jobs++];
    memset(job, 0, sizeof *job);
    job->id = j->job_id;
    job->user_id = j->user_id;
    snprintf(job->node, sizeof job->node, "%s", node);
    job->entry = g;
    job->gpu = c->nodes[g].gpu;
    snprintf(job->workload, sizeof job->workload, "%s", tagged ? workload : "");
    /* A job on whole GPUs, or one kace does not know, leaves nothing kace
     * can predict on its GPU (share 100, resident unknown). */
    job->share = tagged ? share : 100;
    job->shares = shares;
    job->running = (j->job_state & JOB_STATE_BASE) == JOB_RUNNING;
    job->start_time = j->start_time;
    job->observed = NAN;
    return true;
}

static kace_status load_jobs(kace_ctx *ctx, kace_slurm_cluster *c, const char *gres)
{
    job_info_msg_t *jobs = NULL;
    /* SHOW_DETAIL: running jobs' gres detail, which says which GPU of a
     * node each job holds. */
    if (slurm_load_jobs(0, &jobs, SHOW_ALL | SHOW_DETAIL) != SLURM_SUCCESS)
        return kace_fail(ctx, KACE_ERR_IO, "slurm_load_jobs: %s", slurm_strerror(slurm_get_errno()));
    kace_status st = KACE_OK;
    size_t n = jobs->record_count ? jobs->record_count : 1, cap = 0;
    c->picks = calloc(n, sizeof *c->picks);
    c->pick_jobs = calloc(n, sizeof *c->pick_jobs);
    if (!c->picks || !c->pick_jobs) {
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
        int first = find_gpu(c, node, -1);
        if (first < 0)
            continue; /* several nodes, or a node without a shared GPU */
        /* Which of the node's GPUs: for a running job, the indices of its
         * gres detail (the shared gres's, else whole GPUs'); else kace's
         * choice (its comment); else the node's first GPU. */
        uint64_t mask = 0;
        bool shares = tagged;
        if (state == JOB_RUNNING && j->gres_detail_cnt > 0 && j->gres_detail_str) {
            mask = kace_slurm_gres_indices(j->gres_detail_str[0], gres);
            shares = mask != 0;
            if (!mask)
                mask = kace_slurm_gres_indices(j->gres_detail_str[0], "gpu");
        }
        if (!mask) {
            int gpu = kace_slurm_gpu_parse(j->admin_comment);
            if (gpu >= 0 && gpu < 64)
                mask = (uint64_t)1 << gpu;
        }
        if (!mask)
            mask = 1;
        for (int k = 0; k < 64; k++) {
            if (!(mask & ((uint64_t)1 << k)))
                continue;
            int g = find_gpu(c, node, k);
            if (g >= 0 && !add_job(c, &cap, j, node, (size_t)g, workload, share, tagged, shares)) {
                st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory for %u jobs", jobs->record_count);
                goto done;
            }
        }
    }
done:
    slurm_free_job_info_msg(jobs);
    return st;
}

size_t kace_slurm_cluster_resolve(kace_slurm_cluster *c, const kace_dataset *ds)
{
    for (size_t g = 0; g < c->n_gpus; g++) {
        c->gpus[g].n_residents = 0;
        c->gpus[g].share_free = 100;
        c->gpus[g].base_score = NAN;
        c->gpus[g].row = NULL;
    }
    size_t missing = 0;
    for (size_t i = 0; i < c->n_jobs; i++) {
        const kace_slurm_job *job = &c->jobs[i];
        int w = job->workload[0] && ds ? kace_dataset_find(ds, job->workload) : -1;
        if (job->workload[0] && w < 0)
            missing++;
        kace_slurm_cluster_add(&c->gpus[job->entry], w, job->share);
    }
    return missing;
}

/* Slurm (22.05) runs every MPS job of a node on one of its GPUs at a time
 * (a job asking for MPS on another GPU waits, measured), so of a node with
 * several GPUs only that one is a choice for gres/mps: the GPU its MPS jobs
 * use, else its first GPU with nothing on it, else its first. */
static void one_mps_gpu(kace_slurm_cluster *c)
{
    for (size_t g = 0; g < c->n_gpus; g++) {
        if (c->nodes[g].gpu != 0 || c->nodes[g].n_gpus < 2)
            continue;
        size_t n = (size_t)c->nodes[g].n_gpus, chosen = g;
        bool found = false;
        for (size_t i = 0; i < c->n_jobs && !found; i++)
            if (c->jobs[i].entry >= g && c->jobs[i].entry < g + n && c->jobs[i].shares) {
                chosen = c->jobs[i].entry;
                found = true;
            }
        if (!found) {
            for (size_t k = g; k < g + n; k++) {
                bool idle = true;
                for (size_t i = 0; i < c->n_jobs && idle; i++)
                    idle = c->jobs[i].entry != k;
                if (idle) {
                    chosen = k;
                    break;
                }
            }
        }
        for (size_t k = g; k < g + n; k++)
            if (k != chosen)
                c->gpus[k].usable = false;
    }
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

kace_status kace_slurm_cluster_load(kace_ctx *ctx, const char *gres, kace_slurm_cluster **out)
{
    *out = NULL;
    kace_slurm_cluster *c = calloc(1, sizeof *c);
    if (!c)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    kace_status st = load_nodes(ctx, c, gres);
    if (!st)
        st = load_resvs(ctx, c);
    if (!st)
        st = load_jobs(ctx, c, gres);
    if (!st)
        st = resv_nodes(ctx, c);
    if (st) {
        kace_slurm_cluster_free(&c);
        return st;
    }
    if (strcmp(gres, "mps") == 0)
        one_mps_gpu(c);
    kace_slurm_cluster_resolve(c, NULL);
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
