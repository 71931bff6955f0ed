/* kace serve's lifecycle (kace/service.h): load, reload and swap of the
 * served model, and the extender's scheduler built from that same model. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "kace/learn.h"
#include "kace/sched_world.h"
#include "kace/service.h"

typedef struct file_stamp {
    bool exists;
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime;
} file_stamp;

struct kace_served {
    kace_advisor *advisor;
    kace_reply_cache *cache; /* this advisor's replies: a reload starts a new one */
    kace_sched_world *world; /* the extender's, predicted by advisor's model (NULL: none) */
    atomic_int refs;
};

struct kace_service {
    kace_service_config cfg;
    kace_serve_metrics *metrics;
    kace_k8s_cluster *cluster;
    pthread_mutex_t swap_lock;
    kace_served *current;
    file_stamp db, model, split; /* as last loaded, or seen changed */
};

static file_stamp stamp_of(const char *path)
{
    file_stamp s = {0};
    struct stat st;
    if (path && stat(path, &st) == 0) {
        s.exists = true;
        s.dev = st.st_dev;
        s.ino = st.st_ino;
        s.size = st.st_size;
        s.mtime = st.st_mtim;
    }
    return s;
}

static bool same_stamp(const file_stamp *a, const file_stamp *b)
{
    return a->exists == b->exists && a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
           a->mtime.tv_sec == b->mtime.tv_sec && a->mtime.tv_nsec == b->mtime.tv_nsec;
}

static double unix_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void served_free(kace_served *h)
{
    kace_reply_cache_free(&h->cache);
    kace_sched_world_free(&h->world); /* before the advisor: it predicts with its model */
    kace_advisor_free(&h->advisor);
    free(h);
}

kace_served *kace_service_acquire(kace_service *s)
{
    pthread_mutex_lock(&s->swap_lock);
    kace_served *h = s->current;
    if (h)
        atomic_fetch_add(&h->refs, 1);
    pthread_mutex_unlock(&s->swap_lock);
    return h;
}

void kace_served_release(kace_served **h)
{
    if (h && *h && atomic_fetch_sub(&(*h)->refs, 1) == 1)
        served_free(*h);
    if (h)
        *h = NULL;
}

const kace_advisor *kace_served_advisor(const kace_served *h)
{
    return h->advisor;
}

kace_reply_cache *kace_served_cache(const kace_served *h)
{
    return h->cache;
}

bool kace_served_schedules(const kace_served *h)
{
    return h->world != NULL;
}

kace_status kace_service_new(kace_ctx *ctx, const kace_service_config *cfg, kace_serve_metrics *metrics,
                             kace_k8s_cluster *cluster, kace_service **out)
{
    *out = NULL;
    if (!cfg->db)
        return kace_fail(ctx, KACE_ERR_INVALID, "kace serve needs a store");
    kace_service *s = calloc(1, sizeof *s);
    if (!s)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    if (pthread_mutex_init(&s->swap_lock, NULL) != 0) {
        free(s);
        return kace_fail(ctx, KACE_ERR_NOMEM, "cannot create a mutex");
    }
    s->cfg = *cfg;
    s->metrics = metrics;
    s->cluster = cluster;
    *out = s;
    return KACE_OK;
}

void kace_service_free(kace_service **s)
{
    if (!s || !*s)
        return;
    if ((*s)->cluster && (*s)->current && (*s)->current->world)
        kace_k8s_cluster_use_scheduler(NULL, (*s)->cluster, NULL); /* it would point into the freed world */
    kace_served_release(&(*s)->current);
    pthread_mutex_destroy(&(*s)->swap_lock);
    free(*s);
    *s = NULL;
}

bool kace_service_changed(kace_service *s)
{
    file_stamp db = stamp_of(s->cfg.db), model = stamp_of(s->cfg.model_file), split = stamp_of(s->cfg.split_train_db);
    if (same_stamp(&db, &s->db) && same_stamp(&model, &s->model) && same_stamp(&split, &s->split))
        return false;
    s->db = db;
    s->model = model;
    s->split = split;
    return true;
}

/* The MPS split model of /v1/mps-split, fitted once per load on the store's
 * split grids (partitions_* campaigns, a device dataset's mps-splits), or
 * on another store's (split_train_db: another GPU's, for a store whose few
 * grids cannot fit one). Too few measured cells with complete profiles is
 * not an error: the endpoint then uses its profile rule, and note says
 * which it is. */
static kace_status fit_split_model(kace_ctx *ctx, kace_store *store, const kace_dataset *ds, const char *train_db,
                                   kace_split_model **out, size_t *n_grids, char *note, size_t note_size)
{
    kace_store *other = NULL;
    kace_status st = train_db ? kace_store_open_flags(ctx, train_db, 0, &other) : KACE_OK;
    if (!st)
        st = kace_split_fit_store(ctx, other ? other : store, other ? NULL : ds, out, n_grids);
    kace_store_close(&other);
    if (st == KACE_ERR_MODEL) { /* no grids, or too few usable cells */
        snprintf(note, note_size, "mps-split: advising by the profile rule (%s%s%s)", train_db ? train_db : "",
                 train_db ? ": " : "", kace_errmsg(ctx));
        *n_grids = 0;
        st = KACE_OK;
    } else if (!st) {
        snprintf(note, note_size, "mps-split: split model fitted on %zu measured grids%s%s (ridge alpha %g by "
                 "cross-validation)", *n_grids, train_db ? " of " : "", train_db ? train_db : "",
                 kace_split_model_alpha(*out, NULL));
    }
    return st;
}

/* Drift's reference: the cross-validated error of the model's kind on the
 * set kace train fits by default (NaN when that set is too small). */
static double reference_cv_error(kace_store *store, const kace_model *m)
{
    kace_ctx *ctx = kace_ctx_new();
    double cv_error = NAN;
    kace_dataset *pairs = NULL;
    if (ctx && !kace_store_load_dataset(ctx, store, "pairs", false, &pairs) && pairs->n_colocations >= 10) {
        kace_fit_spec spec;
        kace_learn_spec_like(m, &spec);
        if (kace_learn_cv_error(ctx, pairs, NULL, 0, &spec, 5, &cv_error))
            cv_error = NAN;
    }
    kace_dataset_free(&pairs);
    kace_ctx_free(&ctx);
    return cv_error;
}

/* The extender's scheduler world, predicted by the advisor's model; NULL
 * (with the reason in note) when it cannot be built. */
static kace_sched_world *extender_world(kace_store *store, const kace_advisor *adv, char *note, size_t note_size)
{
    kace_ctx *ctx = kace_ctx_new();
    kace_sched_world *w = NULL;
    if (!ctx)
        snprintf(note, note_size, "out of memory");
    else if (kace_sched_world_new(ctx, store, kace_advisor_predictor(adv), &w))
        snprintf(note, note_size, "%s", kace_errmsg(ctx));
    kace_ctx_free(&ctx);
    return w;
}

/* Points the cluster's scheduler at h's world (or back to gain scoring),
 * before h is swapped in: the previous world stays valid until then. */
static void use_world(kace_service *s, kace_served *h, const char *why_not, char *note, size_t note_size)
{
    if (!s->cluster || s->cfg.extender_policy < 0) {
        if (s->cluster)
            snprintf(note, note_size, "the Kubernetes extender scores nodes by the served model's predicted gain "
                     "(--extender-policy gain)");
        return;
    }
    kace_k8s_scheduler w = {.profiles = NULL};
    kace_ctx *ctx = kace_ctx_new();
    char why[300];
    snprintf(why, sizeof why, "%s", why_not);
    if (h->world) {
        kace_sched_config_default(&w.config, (kace_sched_policy)s->cfg.extender_policy);
        if (s->cfg.options.objective >= 0) /* kace serve --objective, on every reload */
            w.config.objective = (kace_objective)s->cfg.options.objective;
        w.profiles = kace_sched_world_profiles(h->world);
        w.pool = kace_sched_world_pool(h->world, &w.n_pool);
        w.runnable = kace_sched_world_runnable(h->world);
        w.rates = kace_sched_world_rates(h->world);
        if (!ctx || kace_k8s_cluster_use_scheduler(ctx, s->cluster, &w)) {
            snprintf(why, sizeof why, "%s", ctx ? kace_errmsg(ctx) : "out of memory");
            kace_k8s_cluster_use_scheduler(ctx, s->cluster, NULL); /* first: it may point into the world */
            kace_sched_world_free(&h->world);
        }
    }
    if (h->world) {
        snprintf(note, note_size, "the Kubernetes extender places pods with kace schedule's scheduler (policy %s, "
                 "objective %s, %d workloads) on the served model", kace_sched_policy_name(w.config.policy),
                 kace_objective_name(w.config.objective), w.n_pool);
    } else {
        kace_k8s_cluster_use_scheduler(ctx, s->cluster, NULL);
        snprintf(note, note_size, "the Kubernetes extender scores nodes by predicted gain: kace schedule's scheduler "
                 "cannot be built from the served model: %s", why);
    }
    kace_ctx_free(&ctx);
}

kace_status kace_service_load(kace_ctx *ctx, kace_service *s, kace_service_notes *notes)
{
    memset(notes, 0, sizeof *notes);
    notes->refused = "load_error";
    const kace_service_config *cfg = &s->cfg;
    file_stamp db_stamp = stamp_of(cfg->db), model_stamp = stamp_of(cfg->model_file),
               split_stamp = stamp_of(cfg->split_train_db);
    kace_store *store = NULL;
    kace_dataset *ds = NULL;
    kace_model *m = NULL;
    kace_advisor *adv = NULL;
    kace_split_model *split = NULL;
    size_t n_grids = 0;
    kace_status st;
    if (!db_stamp.exists) {
        st = kace_fail(ctx, KACE_ERR_IO, "%s: no such store (kace import first)", cfg->db);
    } else if (!(st = kace_store_open_flags(ctx, cfg->db, 0, &store)) &&
               !(st = kace_store_load_dataset(ctx, store, NULL, false, &ds)) &&
               !(st = cfg->model_file ? kace_model_load(ctx, cfg->model_file, &m)
                                      : kace_store_load_model(ctx, store, cfg->model_name, &m)) &&
               !(st = fit_split_model(ctx, store, ds, cfg->split_train_db, &split, &n_grids, notes->split,
                                      sizeof notes->split))) {
        st = kace_advisor_new(ctx, &ds, &m, &cfg->options, &adv);
    }
    if (!st && !cfg->allow_partial_model && (st = kace_advisor_check_endpoints(ctx, adv)))
        notes->refused = "cannot_answer";
    kace_served *h = NULL;
    if (!st && (!(h = calloc(1, sizeof *h)) || kace_reply_cache_new(ctx, adv, &h->cache)))
        st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    if (st) {
        if (h)
            free(h);
        kace_dataset_free(&ds);
        kace_model_free(&m);
        kace_split_model_free(&split);
        kace_advisor_free(&adv);
        kace_store_close(&store);
        if (s->metrics)
            kace_serve_metrics_model_refused(s->metrics, notes->refused, kace_errmsg(ctx));
        return st;
    }
    notes->refused = NULL;
    kace_advisor_set_split_model(adv, &split, n_grids);
    h->advisor = adv;
    atomic_init(&h->refs, 1); /* the service's own reference */
    char why_not[300] = "";
    if (s->cluster && cfg->extender_policy >= 0)
        h->world = extender_world(store, adv, why_not, sizeof why_not);
    if (s->metrics)
        kace_serve_metrics_model_cv_error(s->metrics, reference_cv_error(store, kace_advisor_model(adv)));
    kace_store_close(&store);
    use_world(s, h, why_not, notes->extender, sizeof notes->extender);
    pthread_mutex_lock(&s->swap_lock);
    kace_served *old = s->current;
    s->current = h;
    pthread_mutex_unlock(&s->swap_lock);
    kace_served_release(&old);
    s->db = db_stamp;
    s->model = model_stamp;
    s->split = split_stamp;
    const file_stamp *age = cfg->model_file ? &model_stamp : &db_stamp;
    if (s->metrics)
        kace_serve_metrics_model_loaded(s->metrics, true, unix_now(),
                                        (double)age->mtime.tv_sec + (double)age->mtime.tv_nsec * 1e-9);
    return KACE_OK;
}
