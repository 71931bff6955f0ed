/* job_submit/kace: steers a job that names its workload (--kace-workload,
 * from spank_kace.so) towards the node whose shared GPU gives the best
 * predicted colocation with the jobs already there, with the MPS share kace
 * chose.
 *
 * The steering is a preference, not a pin: the job gets --prefer=<a feature
 * only that node has> and the gres share (gres:mps:N or gres:shard:N), so
 * Slurm's scheduler and backfill may still start it elsewhere when that node
 * is busy. kace only changes a job whose every constraint it can check
 * (partitions, requested and excluded nodes, features, reservation, node
 * count, CPUs, memory) and that asks for no GPUs of its own; anything else
 * is left exactly as submitted, so kace never turns a job Slurm would accept
 * into one it rejects.
 *
 * slurmctld calls job_submit() with its job lock held, so the decision must
 * be quick: it is taken on an in-memory snapshot (model, profiles, cluster
 * state) that a background thread rebuilds every refresh_seconds. Each
 * GPU's gain for every workload is computed by that thread too
 * (kace_place_cache: only for GPUs whose jobs changed since it last looked),
 * so a decision looks gains up instead of predicting 400 GPUs; the thread
 * holds the lock only to swap snapshots and frees old ones after. A job
 * counts as placed only once slurmctld's job list shows it: each placement
 * is recorded as a "pick" with a token that kace also writes into the job's
 * admin comment, and the refresher re-reads the job list every
 * PICK_POLL_MS while picks wait; a pick whose job appears is confirmed (the
 * job is then in the cluster state like any other), one not seen within
 * PICK_GRACE_MS (rejected after job_submit, or --test-only) is dropped.
 * Decisions taken meanwhile do not count unconfirmed picks.
 *
 * Configuration: kace.conf beside slurm.conf (or $KACE_SLURM_CONFIG), see
 * kace_place_config in include/kace/place.h and docs/slurm.md.
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
#include <unistd.h>

#include <slurm/slurm.h>
#include <slurm/slurm_errno.h>

#include "cluster.h"
#include "files.h"
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

/* How long a placement may wait for slurmctld to show its job, and how
 * often the cluster is re-read meanwhile. */
#define PICK_GRACE_MS 2000
#define PICK_POLL_MS 250
#define MAX_PICKS 512

/* What a decision needs, rebuilt as a whole by the refresher. */
typedef struct snapshot {
    kace_place_config cfg;
    kace_dataset *ds;
    kace_model *model;
    kace_slurm_cluster *cluster; /* as slurmctld showed it: only accepted jobs */
    kace_place_cache *cache;     /* the cluster's GPUs' gains under model and ds */
    size_t missing;              /* jobs whose workload the store did not hold at the load */
    bool whole;                  /* every workload of the store (at most cfg.load_all_max) */
    size_t store_workloads;      /* how many the store held at the load */
} snapshot;

/* A placement not yet confirmed by slurmctld's job list. */
typedef struct pick {
    char token[KACE_SLURM_PICK_MAX];
    char node[KACE_NAME_MAX];
    char workload[KACE_NAME_MAX];
    struct timespec at; /* CLOCK_MONOTONIC */
} pick;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
static pthread_t refresher;
static bool refresher_started, stopping;
static snapshot *current;        /* NULL until the first good load */
static char load_error[1024];    /* why there is no snapshot (or why the last load failed) */
static kace_ctx *decide_ctx;     /* used under lock only */
static int refresh_seconds = 30; /* until a configuration says otherwise */
static pick picks[MAX_PICKS];
static size_t n_picks;
static unsigned long pick_serial;
static long pick_epoch; /* start time, so that tokens differ across restarts */
/* The workloads jobs asked for (under lock): a snapshot of a store of more
 * than load_all_max workloads holds only these and those of the jobs
 * slurmctld shows, not every workload of the store (loading all of a
 * million-workload store took slurmctld from 8 MB to 599 MB resident,
 * 855 MB at the peak: docs/slurm.md, Memory). A smaller store is loaded
 * whole, so that the first job of every workload is placed too.
 * absent: the last load found it not in the store. The oldest asked for
 * goes first when the list is full. */
#define MAX_WANTED 4096
typedef struct wanted_workload {
    char name[KACE_NAME_MAX];
    bool absent;
    unsigned long asked; /* serial of the last job that asked for it */
} wanted_workload;
static wanted_workload wanted[MAX_WANTED];
static size_t n_wanted;
static unsigned long asked_serial;
static bool want_full; /* a job asked for a workload no snapshot holds: reload now */
static bool files_refused; /* the last full load refused a file; the snapshot is older */
/* A decision's hidden GPUs (under lock), kept so that decisions allocate
 * nothing once it is big enough. */
static bool *hidden;
static size_t hidden_size;

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

static long ms_between(const struct timespec *a, const struct timespec *b)
{
    return (b->tv_sec - a->tv_sec) * 1000L + (b->tv_nsec - a->tv_nsec) / 1000000L;
}

static void snapshot_free(snapshot **s)
{
    if (!*s)
        return;
    kace_slurm_cluster_free(&(*s)->cluster);
    kace_place_cache_free(&(*s)->cache);
    kace_model_free(&(*s)->model);
    kace_dataset_free(&(*s)->ds);
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

/* Each GPU's score and cached gains (rows of GPUs whose jobs did not
 * change are found, not predicted again). Without memory for the cache,
 * decisions predict the GPUs left without a row, as before it. */
static void prepare(kace_ctx *ctx, kace_place_cache *cache, kace_slurm_cluster *c)
{
    if (kace_place_cache_prepare(ctx, cache, c->gpus, c->n_gpus))
        slurm_error("kace: %s", kace_errmsg(ctx));
}

/* The model file, read through a descriptor that kace_slurm_open_regular
 * checked (so that it cannot be swapped for a FIFO between check and read). */
static kace_status load_model_file(kace_ctx *ctx, const char *path, kace_model **out, bool *refused)
{
    int fd;
    kace_status st = kace_slurm_open_regular(ctx, path, "model file", &fd, refused);
    if (st)
        return st;
    char fd_path[64];
    snprintf(fd_path, sizeof fd_path, "/proc/self/fd/%d", fd);
    st = kace_model_load(ctx, fd_path, out);
    close(fd);
    if (st)
        st = kace_fail(ctx, st, "model file %s: %s", path, kace_errmsg(ctx));
    return st;
}

/* Builds a whole snapshot outside the lock: configuration, profiles (of
 * every workload when the store holds at most load_all_max, else of those
 * jobs name), model, cluster state, gains. *refused: a file it reads is not a regular
 * file (a FIFO would block the refresher for ever); the caller then keeps
 * the snapshot it has. */
static kace_status load_snapshot(kace_ctx *ctx, snapshot **out, bool *refused)
{
    *out = NULL;
    *refused = false;
    snapshot *s = calloc(1, sizeof *s);
    kace_store *store = NULL;
    kace_status st;
    char path[1024];
    int fd;
    const char **names = NULL;
    size_t n_names = 0;
    char (*wanted_names)[KACE_NAME_MAX] = NULL;
    if (!s)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    config_path(path, sizeof path);
    kace_place_config_default(&s->cfg);
    if ((st = kace_slurm_config_load(ctx, path, &s->cfg, refused)))
        goto done;
    /* The store is opened by path (SQLite also opens its -wal and -shm
     * beside it), so it is checked first; a store swapped for a FIFO in
     * between is not guarded against. */
    if ((st = kace_slurm_open_regular(ctx, s->cfg.store, "store", &fd, refused)))
        goto done;
    close(fd);
    /* The cluster first: its jobs name the workloads to load, with those
     * jobs asked for (under lock: job_submit adds to the list). */
    if ((st = kace_slurm_cluster_load(ctx, s->cfg.gres, &s->cluster)))
        goto done;
    names = malloc((s->cluster->n_jobs + MAX_WANTED + 1) * sizeof *names);
    if (!names) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < s->cluster->n_jobs; i++)
        if (s->cluster->jobs[i].workload[0])
            names[n_names++] = s->cluster->jobs[i].workload;
    pthread_mutex_lock(&lock);
    want_full = false;
    size_t n_asked = n_wanted;
    wanted_names = malloc((n_asked ? n_asked : 1) * sizeof *wanted_names);
    for (size_t i = 0; wanted_names && i < n_asked; i++) {
        memcpy(wanted_names[i], wanted[i].name, sizeof wanted_names[i]);
        names[n_names++] = wanted_names[i];
    }
    pthread_mutex_unlock(&lock);
    if (!wanted_names) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
        goto done;
    }
    kace_store_counts counts;
    if ((st = kace_store_open_flags(ctx, s->cfg.store, 0, &store) /* never creates one */) ||
        (st = kace_store_count(ctx, store, &counts)))
        goto done;
    s->store_workloads = counts.workloads;
    s->whole = counts.workloads <= (size_t)s->cfg.load_all_max;
    /* A small store whole (profiles, no runs); a big one only those
     * workloads' profiles (and their few runs): memory follows the jobs,
     * not the store's size. */
    st = s->whole ? kace_store_load_around(ctx, store, NULL, 0, true, &s->ds)
                  : kace_store_load_around(ctx, store, (const char *const *)names, n_names, false, &s->ds);
    if (st)
        goto done;
    st = s->cfg.model_file[0] ? load_model_file(ctx, s->cfg.model_file, &s->model, refused)
                              : kace_store_load_model(ctx, store, s->cfg.model, &s->model);
    if (st)
        goto done;
    if (!kace_predictor_can(kace_model_predictor(s->model), KACE_PRED_MEMBERS)) {
        st = kace_fail(ctx, KACE_ERR_MODEL, "the placer needs a slowdown model (kace train --kind slowdown)");
        goto done;
    }
    s->missing = kace_slurm_cluster_resolve(s->cluster, s->ds);
    if ((st = kace_place_cache_new(ctx, kace_model_predictor(s->model), s->ds, &s->cache)))
        goto done;
    prepare(ctx, s->cache, s->cluster);
done:
    kace_store_close(&store);
    free(names);
    free(wanted_names);
    if (st)
        snapshot_free(&s);
    *out = s;
    return st;
}

/* Under lock: drops the picks slurmctld's job list confirms (their jobs
 * are in the cluster now) and those it should show by now but does not
 * (rejected after job_submit, or --test-only); loaded_at is when the list
 * was asked for. c NULL: the list could not be read, old picks go. */
static void resolve_picks(const kace_slurm_cluster *c, const struct timespec *loaded_at)
{
    size_t kept = 0;
    for (size_t i = 0; i < n_picks; i++) {
        pick *p = &picks[i];
        uint32_t job = c ? kace_slurm_pick_job(c, p->token) : 0;
        if (job) {
            slurm_info("kace: placement %s of %s on %s confirmed: job %u", p->token, p->workload, p->node, job);
            continue;
        }
        if (ms_between(&p->at, loaded_at) >= PICK_GRACE_MS) {
            slurm_info("kace: placement %s of %s on %s not confirmed by slurmctld (%s): no longer counted", p->token,
                       p->workload, p->node, c ? "job rejected or --test-only" : "its job list could not be read");
            continue;
        }
        picks[kept++] = *p;
    }
    n_picks = kept;
}

static void log_unpreferable(const kace_slurm_cluster *c)
{
    for (size_t g = 0; g < c->n_gpus; g++)
        if (!c->nodes[g].feature[0])
            slurm_info("kace: node %s has no feature of its own, so kace cannot prefer it "
                       "(give it one in slurm.conf, e.g. Features=kace_%s)",
                       c->gpus[g].node, c->gpus[g].node);
}

/* Under lock, after a full load: which asked-for workloads the store does
 * not hold (a job of one is left as submitted, saying so). */
static void mark_absent(const kace_dataset *ds)
{
    for (size_t i = 0; i < n_wanted; i++) {
        bool absent = kace_dataset_find(ds, wanted[i].name) < 0;
        if (absent && !wanted[i].absent)
            slurm_info("kace: workload '%s' asked for by a job is not in the store", wanted[i].name);
        wanted[i].absent = absent;
    }
}

/* Which workloads a snapshot holds, for the log. */
static const char *loaded_what(const snapshot *s)
{
    return s->whole ? "all the store holds" : "those jobs name";
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
    struct timespec next_full = {0, 0};
    /* What the last swap replaced, freed outside the lock. */
    snapshot *old_snapshot = NULL;
    kace_slurm_cluster *old_cluster = NULL;
    pthread_mutex_lock(&lock);
    while (!stopping) {
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        bool full = !current || want_full || ms_between(&next_full, &now) >= 0;
        pthread_mutex_unlock(&lock);
        /* Only this thread replaces or frees `current` and prepares or
         * sweeps its cache, so using them here, outside the lock, is safe:
         * decisions only read rows that the current cluster's GPUs hold,
         * and rows never change. */
        snapshot_free(&old_snapshot);
        kace_slurm_cluster_free(&old_cluster);
        if (current)
            kace_place_cache_sweep(current->cache, current->cluster->gpus, current->cluster->n_gpus);
        snapshot *fresh = NULL;
        kace_slurm_cluster *cluster = NULL;
        bool refused = false;
        kace_status st = full ? load_snapshot(ctx, &fresh, &refused)
                              : kace_slurm_cluster_load(ctx, current->cfg.gres, &cluster);
        /* A job of a workload the snapshot does not hold (placed by an
         * earlier slurmctld, or asked for meanwhile): a full load next. */
        bool unloaded = !st && !full && kace_slurm_cluster_resolve(cluster, current->ds) > current->missing;
        if (!st && !full)
            prepare(ctx, current->cache, cluster);
        pthread_mutex_lock(&lock);
        if (st && refused && current) {
            files_refused = true;
            /* A file that is not a regular file (a FIFO blocks whoever
             * opens or reads it) is refused, and the placer goes on with
             * what it last read; logged once, not at every refresh. */
            if (strcmp(load_error, kace_errmsg(ctx)) != 0)
                slurm_error("kace: %s; keeping the placer's previous state", kace_errmsg(ctx));
            snprintf(load_error, sizeof load_error, "%s", kace_errmsg(ctx));
            next_full = now;
            next_full.tv_sec += refresh_seconds;
            resolve_picks(current->cluster, &now);
        } else if (st) {
            /* Log a failure once, not at every refresh. */
            if (strcmp(load_error, kace_errmsg(ctx)) != 0)
                slurm_info("kace: cannot load the placer's state (jobs are left as submitted): %s", kace_errmsg(ctx));
            snprintf(load_error, sizeof load_error, "%s", kace_errmsg(ctx));
            /* A model that cannot be read any more is not trusted: jobs
             * go unchanged rather than by stale profiles. Only the cluster
             * state may be briefly unreachable (slurmctld busy). */
            if (st != KACE_ERR_IO || strncmp(load_error, "slurm_load_", 11) != 0) {
                old_snapshot = current;
                current = NULL;
            }
            resolve_picks(NULL, &now);
        } else {
            if (full) {
                if (!current || load_error[0] || files_refused ||
                    memcmp(&current->cfg, &fresh->cfg, sizeof fresh->cfg) != 0) {
                    slurm_info("kace: placer ready: %zu workloads loaded (%s), %zu shared GPUs "
                               "(gres/%s), refresh every %d s",
                               fresh->ds->n_workloads, loaded_what(fresh), fresh->cluster->n_gpus, fresh->cfg.gres,
                               fresh->cfg.refresh_seconds);
                    log_unpreferable(fresh->cluster);
                } else if (current->ds->n_workloads != fresh->ds->n_workloads || current->whole != fresh->whole) {
                    slurm_info("kace: placer reloaded: %zu workloads loaded (%s)", fresh->ds->n_workloads,
                               loaded_what(fresh));
                }
                mark_absent(fresh->ds);
                files_refused = false;
                refresh_seconds = fresh->cfg.refresh_seconds;
                old_snapshot = current;
                current = fresh;
                next_full = now;
                next_full.tv_sec += refresh_seconds;
            } else {
                old_cluster = current->cluster;
                current->cluster = cluster;
                if (unloaded)
                    want_full = true;
            }
            /* A refused file is logged again only when it changes or
             * after a full load succeeded. */
            if (full || !files_refused)
                load_error[0] = '\0';
            resolve_picks(current->cluster, &now);
        }
        if (stopping)
            break;
        /* Unconfirmed picks: look again soon. After a failure: slurmctld
         * may still be starting. Else: at the next full refresh. */
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        long wait_ms = n_picks && !st ? PICK_POLL_MS : st ? (refresh_seconds < 2 ? refresh_seconds : 2) * 1000L
                                                   : refresh_seconds * 1000L;
        until.tv_sec += wait_ms / 1000;
        until.tv_nsec += (wait_ms % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        /* A new pick wakes this thread, which then gives slurmctld
         * PICK_POLL_MS to create the job before reading the list. */
        while (!stopping && !want_full && pthread_cond_timedwait(&wake, &lock, &until) != ETIMEDOUT)
            if (n_picks && wait_ms != PICK_POLL_MS) {
                clock_gettime(CLOCK_REALTIME, &until);
                until.tv_nsec += PICK_POLL_MS * 1000000L;
                if (until.tv_nsec >= 1000000000L) {
                    until.tv_sec++;
                    until.tv_nsec -= 1000000000L;
                }
                wait_ms = PICK_POLL_MS;
            }
    }
    pthread_mutex_unlock(&lock);
    snapshot_free(&old_snapshot);
    kace_slurm_cluster_free(&old_cluster);
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
    n_picks = 0;
    pick_epoch = (long)time(NULL);
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
    free(hidden);
    hidden = NULL;
    hidden_size = 0;
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

static bool set(const char *s)
{
    return s && *s;
}

/* Why kace leaves this job as submitted whatever the cluster looks like,
 * or NULL. Each is a constraint kace cannot honour with a share of one
 * GPU on one node, or cannot check. */
static const char *untouchable(const job_desc_msg_t *job, char *why, size_t size)
{
    if (job->het_job_offset != NO_VAL)
        snprintf(why, size, "a component of a heterogeneous job");
    else if (set(job->array_inx))
        snprintf(why, size, "a job array (%s)", job->array_inx);
    else if (job->shared == JOB_SHARED_NONE || job->shared == JOB_SHARED_USER || job->shared == JOB_SHARED_MCS)
        snprintf(why, size, "the job asks for whole nodes (--exclusive)");
    else if (set(job->tres_per_node) || set(job->tres_per_job) || set(job->tres_per_task) ||
             set(job->tres_per_socket) || set(job->cpus_per_tres) || set(job->mem_per_tres))
        snprintf(why, size, "the job asks for its own generic resources (%s%s%s%s)",
                 set(job->tres_per_job) ? job->tres_per_job : "", set(job->tres_per_node) ? job->tres_per_node : "",
                 set(job->tres_per_task) ? job->tres_per_task : "",
                 set(job->tres_per_socket) ? job->tres_per_socket : "");
    else if (set(job->prefer))
        snprintf(why, size, "the job has its own --prefer=%s", job->prefer);
    else if (set(job->features) && kace_slurm_constraint_matches(job->features, "") < 0)
        snprintf(why, size, "kace cannot evaluate --constraint=%s", job->features);
    else if (set(job->req_nodes) && kace_slurm_hostlist_count(job->req_nodes) != 1)
        snprintf(why, size, "the job names several nodes (%s)", job->req_nodes);
    else if ((job->min_nodes != NO_VAL && job->min_nodes > 1) ||
             (job->max_nodes != NO_VAL && job->max_nodes > 1))
        snprintf(why, size, "the job may use several nodes (-N %u-%u)", job->min_nodes, job->max_nodes);
    else if (set(job->reservation) && strchr(job->reservation, ','))
        snprintf(why, size, "the job names several reservations (%s)", job->reservation);
    else if (job->sockets_per_node != NO_VAL16 || job->cores_per_socket != NO_VAL16 ||
             job->threads_per_core != NO_VAL16)
        snprintf(why, size, "the job asks for a socket/core/thread layout");
    else
        return NULL;
    return why;
}

/* CPUs the job needs on its one node. */
static uint64_t cpus_needed(const job_desc_msg_t *job)
{
    uint64_t per_task = job->cpus_per_task == NO_VAL16 || job->cpus_per_task == 0 ? 1 : job->cpus_per_task;
    uint64_t tasks = job->num_tasks == NO_VAL || job->num_tasks == 0 ? 1 : job->num_tasks;
    if (job->ntasks_per_node != NO_VAL16 && job->ntasks_per_node > tasks)
        tasks = job->ntasks_per_node;
    uint64_t cpus = tasks * per_task;
    if (job->min_cpus != NO_VAL && job->min_cpus > cpus)
        cpus = job->min_cpus;
    if (job->pn_min_cpus != NO_VAL16 && job->pn_min_cpus > cpus)
        cpus = job->pn_min_cpus;
    return cpus;
}

/* The job's --nodelist and --exclude, parsed once per decision (NULL: not
 * given, or not a valid list: then no node is in it). */
typedef struct job_nodes {
    hostlist_t req, exc;
} job_nodes;

static bool in_list(hostlist_t hl, const char *node)
{
    return hl && slurm_hostlist_find(hl, node) >= 0;
}

/* Whether GPU entry g's node satisfies every constraint of the job. */
static bool eligible(const kace_slurm_cluster *c, size_t g, const job_desc_msg_t *job, const job_nodes *jn,
                     const kace_slurm_resv *resv, time_t now)
{
    const kace_slurm_node *n = &c->nodes[g];
    const char *node = c->gpus[g].node;
    if (!n->feature[0] || !kace_slurm_gpu_in_partitions(c, g, job->partition))
        return false;
    if (set(job->req_nodes) && !in_list(jn->req, node))
        return false;
    if (set(job->exc_nodes) && in_list(jn->exc, node))
        return false;
    if (set(job->features) && kace_slurm_constraint_matches(job->features, n->features) != 1)
        return false;
    if (resv) {
        if (!resv->holds[g])
            return false;
    } else {
        /* A reserved node is not this job's while the reservation runs,
         * nor before it when the job could still be running at its start
         * (no time limit known: assume so). */
        time_t ends = job->time_limit == NO_VAL || job->time_limit == INFINITE
                          ? (time_t)-1
                          : now + (time_t)job->time_limit * 60;
        for (size_t r = 0; r < c->n_resvs; r++) {
            const kace_slurm_resv *rv = &c->resvs[r];
            if (now >= rv->end || (ends != (time_t)-1 && ends <= rv->start))
                continue;
            if (rv->holds[g])
                return false;
        }
    }
    uint64_t cpus = cpus_needed(job);
    if (cpus > n->cpus)
        return false;
    if (job->pn_min_memory != NO_VAL64 && job->pn_min_memory != 0) {
        uint64_t mem = job->pn_min_memory & MEM_PER_CPU ? (job->pn_min_memory & ~MEM_PER_CPU) * cpus
                                                        : job->pn_min_memory;
        if (mem > n->memory_mb)
            return false;
    }
    if (job->pn_min_tmp_disk != NO_VAL && job->pn_min_tmp_disk > n->tmp_disk_mb)
        return false;
    return true;
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
    if (w < 0 && strlen(workload) < KACE_NAME_MAX) {
        wanted_workload *known = NULL;
        for (size_t i = 0; i < n_wanted && !known; i++)
            if (strcmp(wanted[i].name, workload) == 0)
                known = &wanted[i];
        if (known && known->absent) {
            known->asked = ++asked_serial;
            snprintf(why, why_size, "unknown workload '%s' (not in %s)", workload, s->cfg.store);
            return false;
        }
        if (!known) {
            /* A full list forgets the workload asked for longest ago. */
            size_t slot = n_wanted;
            if (n_wanted == MAX_WANTED) {
                slot = 0;
                for (size_t i = 1; i < n_wanted; i++)
                    if (wanted[i].asked < wanted[slot].asked)
                        slot = i;
            } else {
                n_wanted++;
            }
            known = &wanted[slot];
            snprintf(known->name, sizeof known->name, "%s", workload);
            known->absent = false;
        }
        known->asked = ++asked_serial;
        want_full = true;
        pthread_cond_broadcast(&wake);
        if (s->whole)
            snprintf(why, why_size, "workload '%s' not in %s at its last load: kace reloads it now, for the jobs "
                     "after this one", workload, s->cfg.store);
        else
            snprintf(why, why_size, "workload '%s' not loaded yet: kace loads it from %s now, for the jobs after "
                     "this one", workload, s->cfg.store);
        return false;
    }
    if (w < 0) {
        snprintf(why, why_size, "unknown workload '%s' (name too long)", workload);
        return false;
    }
    for (size_t i = 0; i < n_wanted; i++)
        if (strcmp(wanted[i].name, workload) == 0)
            wanted[i].asked = ++asked_serial;
    if (untouchable(job, why, why_size))
        return false;
    kace_slurm_cluster *c = s->cluster;
    const kace_slurm_resv *resv = NULL;
    if (set(job->reservation)) {
        for (size_t r = 0; r < c->n_resvs && !resv; r++)
            if (strcmp(c->resvs[r].name, job->reservation) == 0)
                resv = &c->resvs[r];
        if (!resv) {
            snprintf(why, why_size, "unknown reservation %s", job->reservation);
            return false;
        }
    }
    if (n_picks >= MAX_PICKS) {
        snprintf(why, why_size, "%zu placements wait for slurmctld to confirm them", n_picks);
        return false;
    }
    /* Only nodes that satisfy every constraint of the job are a choice:
     * hide the rest for this decision. */
    if (hidden_size < c->n_gpus) {
        bool *grown = realloc(hidden, c->n_gpus * sizeof *hidden);
        if (!grown) {
            snprintf(why, why_size, "out of memory");
            return false;
        }
        hidden = grown;
        hidden_size = c->n_gpus;
    }
    memset(hidden, 0, c->n_gpus * sizeof *hidden);
    job_nodes jn = {set(job->req_nodes) ? slurm_hostlist_create(job->req_nodes) : NULL,
                    set(job->exc_nodes) ? slurm_hostlist_create(job->exc_nodes) : NULL};
    time_t now = time(NULL);
    size_t n_eligible = 0;
    for (size_t i = 0; i < c->n_gpus; i++) {
        if (!c->gpus[i].usable)
            continue;
        if (eligible(c, i, job, &jn, resv, now)) {
            n_eligible++;
        } else {
            c->gpus[i].usable = false;
            hidden[i] = true;
        }
    }
    kace_placement p;
    kace_status st = n_eligible ? kace_place_job(decide_ctx, kace_model_predictor(s->model), s->ds, c->gpus, c->n_gpus,
                                                 w, &s->cfg.options, &p)
                                : KACE_ERR_NOT_FOUND;
    for (size_t i = 0; i < c->n_gpus; i++)
        if (hidden[i])
            c->gpus[i].usable = true;
    if (jn.req)
        slurm_hostlist_destroy(jn.req);
    if (jn.exc)
        slurm_hostlist_destroy(jn.exc);
    if (st) {
        if (n_eligible)
            snprintf(why, why_size, "%s", kace_errmsg(decide_ctx));
        else
            snprintf(why, why_size, "no node with a shared GPU (gres/%s) and a feature of its own satisfies the "
                     "job's partition, nodes, features, reservation, CPUs and memory", s->cfg.gres);
        return false;
    }
    const kace_place_gpu *g = &c->gpus[p.gpu];
    long per_gpu = c->gres_per_gpu[p.gpu];
    /* Shares are percentages of the GPU; the gres counts in its units
     * (rounded down, so the job never gets more than is free). */
    long count = p.share * per_gpu / 100;
    if (count < 1) {
        snprintf(why, why_size, "a %d%% share is less than one %s of node %s", p.share, s->cfg.gres, g->node);
        return false;
    }
    p.share = (int)(count * 100 / per_gpu);
    pick *pk = &picks[n_picks];
    snprintf(pk->token, sizeof pk->token, "%lx.%lu", pick_epoch, ++pick_serial);
    char tres[KACE_NAME_MAX + 64], tag[KACE_NAME_MAX + 32], word[KACE_NAME_MAX + KACE_SLURM_PICK_MAX + 32];
    /* On a node with several GPUs, the GPU kace chose: a request of its
     * gres type lands there (untyped, Slurm picks one), and the third
     * word of the comment keeps the choice while the job is pending. */
    const kace_slurm_node *nd = &c->nodes[p.gpu];
    char gpu_word[32] = "", where[KACE_NAME_MAX + 32];
    if (nd->gres_type[0])
        snprintf(tres, sizeof tres, "gres:%s:%s:%ld", s->cfg.gres, nd->gres_type, count);
    else
        snprintf(tres, sizeof tres, "gres:%s:%ld", s->cfg.gres, count);
    if (nd->n_gpus > 1) {
        kace_slurm_gpu_format(gpu_word, sizeof gpu_word, nd->gpu);
        snprintf(where, sizeof where, "node %s GPU %d", g->node, nd->gpu);
    } else {
        snprintf(where, sizeof where, "node %s", g->node);
    }
    if (!kace_place_tag_format(tag, sizeof tag, workload, p.share) ||
        !kace_slurm_pick_format(word, sizeof word, g->node, pk->token)) {
        snprintf(why, why_size, "workload name too long");
        return false;
    }
    const char *old = set(job->admin_comment) ? job->admin_comment : "";
    char *comment = malloc(strlen(old) + strlen(tag) + strlen(word) + strlen(gpu_word) + 4);
    if (!comment) {
        snprintf(why, why_size, "out of memory");
        return false;
    }
    sprintf(comment, "%s%s%s %s%s%s", old, *old ? " " : "", tag, word, *gpu_word ? " " : "", gpu_word);
    replace_string(&job->admin_comment, comment);
    free(comment);
    replace_string(&job->tres_per_node, tres);
    replace_string(&job->prefer, c->nodes[p.gpu].feature);
    slurm_info("kace: %s -> %s (--prefer=%s), %s (share %d%%, predicted normalized throughput %.3f, "
               "gain %.3f, confidence %.2f, %d GPUs considered, pick %s)",
               workload, where, c->nodes[p.gpu].feature, tres, p.share, p.score, p.gain, p.confidence,
               p.n_considered, pk->token);
    /* Counted once slurmctld's job list shows it (resolve_picks). */
    snprintf(pk->node, sizeof pk->node, "%s", g->node);
    snprintf(pk->workload, sizeof pk->workload, "%s", workload);
    clock_gettime(CLOCK_MONOTONIC, &pk->at);
    n_picks++;
    pthread_cond_broadcast(&wake);
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
