/* job_submit/kace: steers a job that names its workload (--kace-workload,
 * from spank_kace.so) to the node whose shared GPU gives the best predicted
 * colocation with the jobs already there, with the MPS share kace chose.
 *
 * slurmctld calls job_submit() with its job lock held, so the decision must
 * be quick: it is taken on an in-memory snapshot (model, profiles, cluster
 * state) that a background thread rebuilds every refresh_seconds. Every
 * failure leaves the job as it was and logs one line: the plugin never
 * rejects a job and never takes slurmctld down.
 *
 * Configuration: kace.conf beside slurm.conf (or $KACE_SLURM_CONFIG), see
 * kace_place_config in include/kace/place.h and the README.
 */
#include <errno.h>
#include <inttypes.h>
#include <libgen.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <slurm/slurm.h>
#include <slurm/slurm_errno.h>

#include "cluster.h"
#include "kace/place.h"
#include "kace/store.h"

/* Slurm's allocator and log, exported by libslurmfull (slurmctld); not in
 * the public headers. Strings handed to slurmctld must come from xmalloc. */
extern char *slurm_xstrdup(const char *str);
extern void slurm_xfree(void **item);
extern void slurm_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
extern void slurm_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
extern void slurm_verbose(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
extern void slurm_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

const char plugin_name[] = "kace: kernel-aware placement of jobs on shared GPUs";
const char plugin_type[] = "job_submit/kace";
const uint32_t plugin_version = SLURM_VERSION_NUMBER;

/* What a decision needs, rebuilt as a whole by the refresher. */
typedef struct snapshot {
    kace_place_config cfg;
    kace_dataset *ds;
    kace_model *model;
    kace_slurm_cluster *cluster;
} snapshot;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
static pthread_t refresher;
static bool refresher_started, stopping;
static snapshot *current;        /* NULL until the first good load */
static char load_error[1024];    /* why there is no snapshot (or why the last load failed) */
static kace_ctx *decide_ctx;     /* used under lock only */
static int refresh_seconds = 30; /* until a configuration says otherwise */

static void log_to_slurm(void *user, kace_log_level level, const char *message)
{
    (void)user;
    if (level == KACE_LOG_WARN)
        slurm_error("kace: %s", message);
    else if (level == KACE_LOG_INFO)
        slurm_verbose("kace: %s", message);
    else
        slurm_debug("kace: %s", message);
}

static void snapshot_free(snapshot **s)
{
    if (!*s)
        return;
    kace_model_free(&(*s)->model);
    kace_dataset_free(&(*s)->ds);
    kace_slurm_cluster_free(&(*s)->cluster);
    free(*s);
    *s = NULL;
}

static void config_path(char *buf, size_t size)
{
    const char *env = getenv("KACE_SLURM_CONFIG");
    if (env && *env) {
        snprintf(buf, size, "%s", env);
        return;
    }
    const char *conf = getenv("SLURM_CONF");
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", conf && *conf ? conf : "/etc/slurm/slurm.conf");
    snprintf(buf, size, "%s/kace.conf", dirname(dir));
}

/* Builds a whole snapshot outside the lock: configuration, profiles,
 * model, cluster state. */
static kace_status load_snapshot(kace_ctx *ctx, snapshot **out)
{
    *out = NULL;
    snapshot *s = calloc(1, sizeof *s);
    kace_store *store = NULL;
    kace_status st;
    char path[1024];
    if (!s)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    config_path(path, sizeof path);
    kace_place_config_default(&s->cfg);
    if ((st = kace_place_config_load(ctx, path, &s->cfg)))
        goto done;
    if ((st = kace_store_open(ctx, s->cfg.store, &store)) ||
        /* every workload's profile; placing needs no measured runs (a large store holds millions) */
        (st = kace_store_load_around(ctx, store, NULL, 0, true, &s->ds)))
        goto done;
    st = s->cfg.model_file[0] ? kace_model_load(ctx, s->cfg.model_file, &s->model)
                              : kace_store_load_model(ctx, store, s->cfg.model, &s->model);
    if (st)
        goto done;
    if (!kace_predictor_can(kace_model_predictor(s->model), KACE_PRED_MEMBERS)) {
        st = kace_fail(ctx, KACE_ERR_MODEL, "the placer needs a slowdown model (kace train --kind slowdown)");
        goto done;
    }
    if ((st = kace_slurm_cluster_load(ctx, s->ds, s->cfg.gres, &s->cluster)))
        goto done;
    kace_place_prepare(ctx, kace_model_predictor(s->model), s->ds, s->cluster->gpus, s->cluster->n_gpus);
done:
    kace_store_close(&store);
    if (st)
        snapshot_free(&s);
    *out = s;
    return st;
}

static void *refresh_loop(void *arg)
{
    (void)arg;
    kace_ctx *ctx = kace_ctx_new();
    if (!ctx) {
        slurm_error("kace: out of memory, placement disabled");
        return NULL;
    }
    kace_ctx_set_log(ctx, log_to_slurm, NULL);
    pthread_mutex_lock(&lock);
    while (!stopping) {
        pthread_mutex_unlock(&lock);
        snapshot *fresh = NULL;
        kace_status st = load_snapshot(ctx, &fresh);
        pthread_mutex_lock(&lock);
        if (st) {
            /* Log a failure once, not at every refresh. */
            if (strcmp(load_error, kace_errmsg(ctx)) != 0)
                slurm_info("kace: cannot load the placer's state (jobs are left as submitted): %s", kace_errmsg(ctx));
            snprintf(load_error, sizeof load_error, "%s", kace_errmsg(ctx));
            /* A model that cannot be read any more is not trusted: jobs
             * go unchanged rather than by stale profiles. Only the cluster
             * state may be briefly unreachable (slurmctld busy). */
            if (st != KACE_ERR_IO || strncmp(load_error, "slurm_load_", 11) != 0)
                snapshot_free(&current);
        } else {
            if (!current || load_error[0] || memcmp(&current->cfg, &fresh->cfg, sizeof fresh->cfg) != 0)
                slurm_info("kace: placer ready: %zu workloads, %zu shared GPUs (gres/%s), refresh every %d s",
                           fresh->ds->n_workloads, fresh->cluster->n_gpus, fresh->cfg.gres,
                           fresh->cfg.refresh_seconds);
            load_error[0] = '\0';
            refresh_seconds = fresh->cfg.refresh_seconds;
            snapshot_free(&current);
            current = fresh;
        }
        if (stopping)
            break;
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        /* After a failure, try again soon: slurmctld may still be starting. */
        until.tv_sec += st ? (refresh_seconds < 2 ? refresh_seconds : 2) : refresh_seconds;
        while (!stopping && pthread_cond_timedwait(&wake, &lock, &until) != ETIMEDOUT)
            ;
    }
    pthread_mutex_unlock(&lock);
    kace_ctx_free(&ctx);
    return NULL;
}

int init(void)
{
    decide_ctx = kace_ctx_new();
    if (!decide_ctx) {
        slurm_error("kace: out of memory, placement disabled");
        return SLURM_SUCCESS;
    }
    kace_ctx_set_log(decide_ctx, log_to_slurm, NULL);
    snprintf(load_error, sizeof load_error, "not loaded yet");
    stopping = false;
    if (pthread_create(&refresher, NULL, refresh_loop, NULL) != 0)
        slurm_error("kace: cannot start the refresher thread, placement disabled");
    else
        refresher_started = true;
    slurm_info("kace: job_submit/kace loaded");
    return SLURM_SUCCESS;
}

int fini(void)
{
    pthread_mutex_lock(&lock);
    stopping = true;
    pthread_cond_broadcast(&wake);
    pthread_mutex_unlock(&lock);
    if (refresher_started)
        pthread_join(refresher, NULL);
    refresher_started = false;
    snapshot_free(&current);
    kace_ctx_free(&decide_ctx);
    return SLURM_SUCCESS;
}

/* The workload the job named with --kace-workload (the SPANK plugin puts
 * it into the job control environment as SPANK_KACE_WORKLOAD). */
static const char *job_workload(const job_desc_msg_t *job)
{
    static const char keys[][24] = {"SPANK_KACE_WORKLOAD=", "KACE_WORKLOAD="};
    for (uint32_t i = 0; job->spank_job_env && i < job->spank_job_env_size; i++)
        for (size_t k = 0; k < sizeof keys / sizeof *keys; k++)
            if (job->spank_job_env[i] && strncmp(job->spank_job_env[i], keys[k], strlen(keys[k])) == 0)
                return job->spank_job_env[i] + strlen(keys[k]);
    return NULL;
}

static void replace_string(char **field, const char *value)
{
    slurm_xfree((void **)field);
    *field = slurm_xstrdup(value);
}

/* The decision, under lock. Returns false (job unchanged) with a reason. */
static bool place(job_desc_msg_t *job, const char *workload, char *why, size_t why_size)
{
    if (!current) {
        snprintf(why, why_size, "no model loaded (%s)", load_error);
        return false;
    }
    snapshot *s = current;
    int w = kace_dataset_find(s->ds, workload);
    if (w < 0) {
        snprintf(why, why_size, "unknown workload '%s' (not in %s)", workload, s->cfg.store);
        return false;
    }
    if (job->req_nodes && *job->req_nodes) {
        snprintf(why, why_size, "the job names its nodes (%s)", job->req_nodes);
        return false;
    }
    if (job->tres_per_node && *job->tres_per_node) {
        snprintf(why, why_size, "the job asks for its own GPU resources (%s)", job->tres_per_node);
        return false;
    }
    if (job->min_nodes != NO_VAL && job->min_nodes > 1) {
        snprintf(why, why_size, "the job asks for %u nodes", job->min_nodes);
        return false;
    }
    /* Only nodes of the job's partitions are a choice (others would get
     * the job rejected): hide the rest for this decision. */
    kace_slurm_cluster *c = s->cluster;
    bool *hidden = calloc(c->n_gpus ? c->n_gpus : 1, sizeof *hidden);
    if (!hidden) {
        snprintf(why, why_size, "out of memory");
        return false;
    }
    for (size_t i = 0; i < c->n_gpus; i++)
        if (c->gpus[i].usable && !kace_slurm_gpu_in_partitions(c, i, job->partition)) {
            c->gpus[i].usable = false;
            hidden[i] = true;
        }
    kace_placement p;
    kace_status st = kace_place_job(decide_ctx, kace_model_predictor(s->model), s->ds, c->gpus, c->n_gpus, w, &s->cfg.options, &p);
    for (size_t i = 0; i < c->n_gpus; i++)
        if (hidden[i])
            c->gpus[i].usable = true;
    free(hidden);
    if (st) {
        snprintf(why, why_size, "%s (partition %s)", kace_errmsg(decide_ctx),
                 job->partition ? job->partition : c->default_partition);
        return false;
    }
    const kace_place_gpu *g = &s->cluster->gpus[p.gpu];
    long per_gpu = s->cluster->gres_per_gpu[p.gpu];
    /* Shares are percentages of the GPU; the gres counts in its units
     * (rounded down, so the job never gets more than is free). */
    long count = p.share * per_gpu / 100;
    if (count < 1) {
        snprintf(why, why_size, "a %d%% share is less than one %s of node %s", p.share, s->cfg.gres, g->node);
        return false;
    }
    p.share = (int)(count * 100 / per_gpu);
    char tres[64], tag[KACE_NAME_MAX + 32];
    snprintf(tres, sizeof tres, "gres:%s:%ld", s->cfg.gres, count);
    if (!kace_place_tag_format(tag, sizeof tag, workload, p.share)) {
        snprintf(why, why_size, "workload name too long");
        return false;
    }
    replace_string(&job->req_nodes, g->node);
    replace_string(&job->tres_per_node, tres);
    if (job->admin_comment && *job->admin_comment) {
        char *joined = malloc(strlen(job->admin_comment) + strlen(tag) + 2);
        if (joined) {
            sprintf(joined, "%s %s", job->admin_comment, tag);
            replace_string(&job->admin_comment, joined);
            free(joined);
        }
    } else {
        replace_string(&job->admin_comment, tag);
    }
    slurm_info("kace: %s -> node %s, %s (share %d%%, predicted normalized throughput %.3f, gain %.3f, "
               "confidence %.2f, %d GPUs considered)",
               workload, g->node, tres, p.share, p.score, p.gain, p.confidence, p.n_considered);
    /* Later submissions before the next refresh see this job there. */
    kace_slurm_cluster_add(s->cluster, (size_t)p.gpu, w, p.share);
    kace_place_prepare(decide_ctx, kace_model_predictor(s->model), s->ds, &s->cluster->gpus[p.gpu], 1);
    return true;
}

int job_submit(job_desc_msg_t *job_desc, uint32_t submit_uid, char **err_msg)
{
    (void)submit_uid;
    (void)err_msg;
    const char *workload = job_workload(job_desc);
    if (!workload) {
        slurm_debug("kace: job without --kace-workload left as submitted");
        return SLURM_SUCCESS;
    }
    char why[1200];
    pthread_mutex_lock(&lock);
    bool placed = decide_ctx && place(job_desc, workload, why, sizeof why);
    pthread_mutex_unlock(&lock);
    if (!placed)
        slurm_info("kace: job of workload %s left as submitted: %s", workload, decide_ctx ? why : "plugin not ready");
    return SLURM_SUCCESS;
}

int job_modify(job_desc_msg_t *job_desc, void *job_ptr, uint32_t submit_uid, char **err_msg)
{
    (void)job_desc;
    (void)job_ptr;
    (void)submit_uid;
    (void)err_msg;
    return SLURM_SUCCESS;
}
