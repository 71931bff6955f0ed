/* The online colocation scheduler (include/kace/sched.h).
 *
 * Data structures, all updated in O(1) per job start or end:
 *  - idle GPUs: a stack per node, and the nodes in lists by their idle
 *    count, so a single job takes an idle GPU from the node with the fewest
 *    (keeping whole nodes free for gangs) and a gang finds a node with
 *    enough idle GPUs by looking at <= 65 lists;
 *  - shared GPUs that can take one more job: arrays per (signature, level),
 *    where the signature is the sorted classes (workload x LS) of the jobs
 *    on it and the level is the gpu_milli used (PACKING only, in steps of
 *    10), with a position per GPU for O(1) removal;
 *  - per arriving class, the signatures it may join, ranked at creation by
 *    the policy's score; a bitset of non-empty signatures rejects a class
 *    that cannot share anywhere without walking its ranking;
 *  - queued jobs: a FIFO per class (and per gang size), and a bitset of the
 *    non-empty queues, so a finish looks only at classes that wait.
 * Per job id the scheduler keeps 4 bytes and per GPU 32 (see job_at and
 * gpu_state): at a million jobs these tables are what a finish touches at
 * random, and their size decides whether that stays in cache.
 */
#include "kace/sched.h"
#include "kace/place.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MILLI_STEP 10
#define N_LEVELS (1000 / MILLI_STEP + 1)
#define N_GANG_QUEUES (KACE_SCHED_MAX_NODE_GPUS + 1)

static const char *const sched_policy_names[KACE_SCHED_N_POLICIES] = {
    [KACE_SCHED_EXCLUSIVE] = "exclusive", [KACE_SCHED_PACKING] = "packing", [KACE_SCHED_RANDOM] = "random",
    [KACE_SCHED_MEMCAP] = "MEMCAP",       [KACE_SCHED_SM] = "SM%",          [KACE_SCHED_MEM] = "MEM%",
    [KACE_SCHED_KACE] = "kace",           [KACE_SCHED_ORACLE] = "Oracle",
};

const char *kace_sched_policy_name(kace_sched_policy p)
{
    return (unsigned)p < KACE_SCHED_N_POLICIES ? sched_policy_names[p] : "?";
}

int kace_sched_policy_from_name(const char *name)
{
    for (int p = 0; p < KACE_SCHED_N_POLICIES; p++)
        if (strcasecmp(name, sched_policy_names[p]) == 0)
            return p;
    if (strcasecmp(name, "sm") == 0)
        return KACE_SCHED_SM;
    if (strcasecmp(name, "mem") == 0)
        return KACE_SCHED_MEM;
    return -1;
}

void kace_sched_config_default(kace_sched_config *c, kace_sched_policy policy)
{
    memset(c, 0, sizeof *c);
    c->policy = policy;
    c->max_group = KACE_SCHED_MAX_GROUP;
    c->gpu_mem_gb = 32.0;
    c->ls_target = 0.5;
    c->min_confidence = KACE_SCHED_TUNED_MIN_CONFIDENCE;
    c->min_gain = KACE_SCHED_TUNED_MIN_GAIN;
    c->overload_queue = KACE_SCHED_TUNED_OVERLOAD_QUEUE;
    c->overload_min_rate = 1.0;
    c->reserve = KACE_SCHED_TUNED_RESERVE;
    c->seed = 1;
    c->objective = KACE_OBJ_NORMALIZED;
}

/* ---- rate source backed by a model ---- */

static kace_status model_rates(void *self, kace_ctx *ctx, const int *group, int k, double *fraction,
                               double *confidence)
{
    const kace_model_rates *h = self;
    return kace_place_fractions(ctx, h->predictor, h->profiles, group, k, fraction, confidence);
}

kace_status kace_rate_source_model(kace_ctx *ctx, kace_model_rates *holder, const kace_predictor *predictor,
                                   const kace_dataset *profiles, kace_rate_source *out)
{
    if (!predictor || !kace_predictor_can(predictor, KACE_PRED_MEMBERS))
        return kace_fail(ctx, KACE_ERR_MODEL, "the scheduler needs each member's predicted throughput, which the %s "
                                              "model does not give (kace train --kind slowdown)",
                         predictor ? kace_predictor_name(predictor) : "missing");
    holder->predictor = predictor;
    holder->profiles = profiles;
    out->rates = model_rates;
    out->self = holder;
    return KACE_OK;
}

/* ---- group sets: open addressing on a packed sorted tuple ---- */

struct kace_group_set {
    uint64_t *keys; /* 0 = empty slot */
    size_t n, cap;
};

static int sort_group(const int *group, int k, int *sorted)
{
    for (int i = 0; i < k; i++) {
        int v = group[i], j = i;
        while (j > 0 && sorted[j - 1] > v) {
            sorted[j] = sorted[j - 1];
            j--;
        }
        sorted[j] = v;
    }
    return k;
}

static uint64_t group_key(const int *group, int k)
{
    int s[KACE_SCHED_MAX_GROUP] = {0, 0, 0};
    sort_group(group, k, s);
    uint64_t key = (uint64_t)k;
    for (int i = 0; i < k; i++)
        key |= ((uint64_t)s[i] + 1) << (2 + 20 * i);
    return key;
}

static size_t key_slot(uint64_t key, size_t cap)
{
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdULL;
    key ^= key >> 33;
    return (size_t)key & (cap - 1);
}

kace_status kace_group_set_new(kace_ctx *ctx, kace_group_set **out)
{
    *out = calloc(1, sizeof **out);
    if (*out)
        (*out)->keys = calloc(64, sizeof *(*out)->keys);
    if (!*out || !(*out)->keys) {
        kace_group_set_free(out);
        return kace_fail(ctx, KACE_ERR_NOMEM, "group set: out of memory");
    }
    (*out)->cap = 64;
    return KACE_OK;
}

void kace_group_set_free(kace_group_set **s)
{
    if (!s || !*s)
        return;
    free((*s)->keys);
    free(*s);
    *s = NULL;
}

static bool valid_group(const int *group, int k)
{
    if (k < 2 || k > KACE_SCHED_MAX_GROUP)
        return false;
    for (int i = 0; i < k; i++)
        if (group[i] < 0 || group[i] >= (1 << 20) - 1)
            return false;
    return true;
}

kace_status kace_group_set_add(kace_ctx *ctx, kace_group_set *s, const int *group, int k)
{
    if (!valid_group(group, k))
        return kace_fail(ctx, KACE_ERR_INVALID, "group set: a group has 2..%d workloads with indices >= 0",
                         KACE_SCHED_MAX_GROUP);
    if (kace_group_set_has(s, group, k))
        return KACE_OK;
    if (2 * (s->n + 1) > s->cap) {
        size_t cap = s->cap * 2;
        uint64_t *keys = calloc(cap, sizeof *keys);
        if (!keys)
            return kace_fail(ctx, KACE_ERR_NOMEM, "group set: out of memory");
        for (size_t i = 0; i < s->cap; i++)
            if (s->keys[i]) {
                size_t j = key_slot(s->keys[i], cap);
                while (keys[j])
                    j = (j + 1) & (cap - 1);
                keys[j] = s->keys[i];
            }
        free(s->keys);
        s->keys = keys;
        s->cap = cap;
    }
    uint64_t key = group_key(group, k);
    size_t j = key_slot(key, s->cap);
    while (s->keys[j])
        j = (j + 1) & (s->cap - 1);
    s->keys[j] = key;
    s->n++;
    return KACE_OK;
}

bool kace_group_set_has(const kace_group_set *s, const int *group, int k)
{
    if (!s || !valid_group(group, k))
        return false;
    uint64_t key = group_key(group, k);
    for (size_t j = key_slot(key, s->cap); s->keys[j]; j = (j + 1) & (s->cap - 1))
        if (s->keys[j] == key)
            return true;
    return false;
}

size_t kace_group_set_size(const kace_group_set *s)
{
    return s ? s->n : 0;
}

/* ---- the scheduler ---- */

typedef struct int_vec {
    int *v;
    int n, cap;
} int_vec;

static bool vec_push(int_vec *a, int x)
{
    if (a->n == a->cap) {
        int cap = a->cap ? a->cap * 2 : 4;
        int *v = realloc(a->v, (size_t)cap * sizeof *v);
        if (!v)
            return false;
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = x;
    return true;
}

/* What the scheduler knows of a group of local workloads (sorted). */
typedef struct group_info {
    bool allowed;   /* may run together (measured, fits memory and the size limit) */
    float fraction[KACE_SCHED_MAX_GROUP];
    float confidence;
    float memcap, sm, mem; /* summed memcap, mean sm%, mean mem% */
} group_info;

/* What a job asks for. */
typedef struct job_state {
    uint8_t cls;     /* class (single-GPU jobs), < 2 * KACE_SCHED_MAX_WORKLOADS */
    uint8_t level;   /* gpu_milli in steps, PACKING (<= N_LEVELS - 1) */
    uint8_t num_gpu; /* <= KACE_SCHED_MAX_NODE_GPUS */
} job_state;

/* Per job id the scheduler keeps 4 bytes (job_at): a finish looks its job up
 * at a random id, and with a million ids a small entry keeps that lookup in
 * cache (at 40 bytes a job the table outgrew the last-level cache and each
 * finish paid a memory miss). A running job's class and level are on its
 * GPU; a queued job's request is in waiting[id], read only while it waits. */
enum { AT_NONE = 0, AT_QUEUE = 1, AT_GPU = 2 /* + first GPU */ };

typedef struct waiting {
    uint64_t seq;  /* arrival order */
    int next;      /* the next job in its queue, -1 at the tail */
    job_state ask;
} waiting;

/* 32 bytes (two a cache line) for the same reason. */
typedef struct gpu_state {
    int job[KACE_SCHED_MAX_GROUP];
    int bucket;                        /* (sig * n_levels + level), -1 when in none */
    int pos;                           /* in its bucket, or in its node's idle stack */
    int node;
    uint8_t level[KACE_SCHED_MAX_GROUP]; /* each job's gpu_milli / MILLI_STEP, as job[] */
    uint8_t n_jobs;
    uint8_t cls[KACE_SCHED_MAX_GROUP]; /* sorted, as job[] */
    bool gang : 1;                       /* a bit each: the entry stays 32 bytes */
    bool reserved : 1;                   /* held for the reserved job: nobody else joins it */
} gpu_state;
_Static_assert(sizeof(gpu_state) == 32, "the per-job and per-GPU entries stay small");
_Static_assert(2 * KACE_SCHED_MAX_WORKLOADS <= 256 && KACE_SCHED_MAX_NODE_GPUS <= 255 && N_LEVELS <= 256,
               "classes, gang sizes and levels fit a byte");

typedef struct node_state {
    int first_gpu, n_gpus;
    int n_idle;    /* idle GPUs: s->idle[first_gpu .. first_gpu + n_idle), a stack */
    int pos;       /* in nodes_by_idle[n_idle] */
} node_state;

typedef struct queue {
    int head, tail, n;
} queue;

struct kace_sched {
    kace_sched_config cfg;
    kace_sched_start_fn on_start;
    void *user;

    int n_pool;              /* W local workloads */
    double exclusive[KACE_SCHED_MAX_WORKLOADS]; /* each one's exclusive throughput (raw objective) */
    int *local_of;           /* dataset index -> local id or -1 */
    int n_dataset;
    int n_classes;           /* 2W */
    group_info *groups;      /* dense by group_index */

    int n_sigs, n_levels;
    int_vec *buckets;        /* n_sigs * n_levels */
    int *sig_count;          /* GPUs per signature (all levels) */
    uint64_t *sig_nonempty;  /* bitset over signatures */
    int sig_words;
    uint64_t *level_bits;    /* PACKING: per signature, bitset over levels (2 words) */
    int **rank;              /* per class: joinable signatures, best first; KACE/ORACLE: those
                                that pass the normal gate first, then overload-only ones */
    int *n_rank;
    int *n_normal;           /* per class: the first n_normal of rank pass the normal gate */
    uint64_t *feasible;      /* per class: bitset of its joinable signatures (normal gate) */
    uint64_t *feasible_over; /* per class: the same, overload gate included */
    int *rank_pos;           /* per class x signature: position in rank, -1 (naive scan) */

    gpu_state *gpus;
    size_t n_gpus, n_busy;
    node_state *nodes;
    int *idle;               /* each node's idle stack, at the node's first GPU */
    size_t n_nodes;
    int max_node_gpus;
    int_vec nodes_by_idle[KACE_SCHED_MAX_NODE_GPUS + 1];
    size_t n_idle;

    int *job_at;             /* per job id: AT_NONE, AT_QUEUE or AT_GPU + its first GPU */
    waiting *waiting;        /* per job id, set while it is queued */
    int cap_jobs;
    uint64_t next_seq;
    queue *queues;           /* n_classes single-GPU queues, then gang sizes */
    int n_queues;
    uint64_t queue_nonempty[(2 * KACE_SCHED_MAX_WORKLOADS + N_GANG_QUEUES + 63) / 64]; /* bitset over queues */
    size_t n_queued;

    int reserved_gpu, reserved_job; /* -1: no reservation */

    uint64_t rng;
    uint64_t visits;
};

static int group_index(int W, const int *sorted, int k)
{
    if (k == 1)
        return sorted[0];
    if (k == 2)
        return W + sorted[0] * W + sorted[1];
    return W + W * W + (sorted[0] * W + sorted[1]) * W + sorted[2];
}

static int sig_index(int C, const int *sorted_cls, int k)
{
    return k == 1 ? sorted_cls[0] : C + sorted_cls[0] * C + sorted_cls[1];
}

static uint64_t next_random(kace_sched *s)
{
    /* splitmix64: small, fast, reproducible across platforms. */
    uint64_t z = (s->rng += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Fills the group table: allowed groups and, for KACE/ORACLE, their rates. */
static kace_status build_groups(kace_ctx *ctx, kace_sched *s, const kace_dataset *ds, const int *pool,
                                const kace_group_set *runnable, const kace_rate_source *rates)
{
    int W = s->n_pool;
    bool predicted = s->cfg.policy == KACE_SCHED_KACE || s->cfg.policy == KACE_SCHED_ORACLE;
    for (int k = 1; k <= s->cfg.max_group; k++) {
        int t[KACE_SCHED_MAX_GROUP] = {0, 0, 0};
        /* Every sorted tuple t[0] <= t[1] <= ... of length k. */
        for (;;) {
            group_info *g = &s->groups[group_index(W, t, k)];
            int ds_group[KACE_SCHED_MAX_GROUP];
            for (int i = 0; i < k; i++) {
                const kace_workload *w = &ds->workloads[pool[t[i]]];
                ds_group[i] = pool[t[i]];
                g->memcap += (float)w->metric[KACE_M_MEMCAP];
                g->sm += (float)(w->metric[KACE_M_SM_PCT] / k);
                g->mem += (float)(w->metric[KACE_M_MEM_PCT] / k);
            }
            g->allowed = k == 1 || (g->memcap <= s->cfg.gpu_mem_gb && kace_group_set_has(runnable, ds_group, k));
            /* A triple also needs its pairs: a job leaving it leaves one behind. */
            if (k == 3 && g->allowed) {
                int p01[2] = {t[0], t[1]}, p02[2] = {t[0], t[2]}, p12[2] = {t[1], t[2]};
                g->allowed = s->groups[group_index(W, p01, 2)].allowed && s->groups[group_index(W, p02, 2)].allowed &&
                             s->groups[group_index(W, p12, 2)].allowed;
            }
            g->confidence = 1;
            for (int i = 0; i < k; i++)
                g->fraction[i] = 1;
            if (k > 1 && g->allowed && predicted) {
                double frac[KACE_SCHED_MAX_GROUP], conf = 1;
                kace_status st = rates->rates(rates->self, ctx, ds_group, k, frac, &conf);
                if (st)
                    return st;
                for (int i = 0; i < k; i++)
                    g->fraction[i] = (float)frac[i];
                g->confidence = (float)conf;
            }
            int i = k - 1;
            while (i >= 0 && t[i] == W - 1)
                i--;
            if (i < 0)
                break;
            t[i]++;
            for (int j = i + 1; j < k; j++)
                t[j] = t[i];
        }
    }
    return KACE_OK;
}

/* The group of signature classes plus one class, sorted; returns k. */
static int merge_classes(const int *cls, int k, int c, int *out)
{
    int n = 0, i = 0;
    while (i < k && cls[i] <= c)
        out[n++] = cls[i++];
    out[n++] = c;
    while (i < k)
        out[n++] = cls[i++];
    return n;
}

static const group_info *group_of_classes(const kace_sched *s, const int *cls, int k)
{
    int w[KACE_SCHED_MAX_GROUP];
    for (int i = 0; i < k; i++)
        w[i] = cls[i] / 2;
    return &s->groups[group_index(s->n_pool, w, k)];
}

/* The gain by the configured objective of classes before[0..k) becoming
 * after[0..n) (fractions kept); normalized is the summed shares' gain. */
static double objective_gain(const kace_sched *s, const int *before, int k, const double *frac_before,
                             const int *after, int n, const double *frac_after, double normalized)
{
    if (s->cfg.objective == KACE_OBJ_FAIR) {
        double least = 1;
        for (int i = 0; i < n; i++)
            least = fmin(least, frac_after[i]);
        return least - 1; /* the smallest share left; what was there before does not matter */
    }
    if (s->cfg.objective != KACE_OBJ_RAW)
        return normalized;
    double gain = 0;
    for (int i = 0; i < n; i++)
        gain += frac_after[i] * s->exclusive[after[i] / 2];
    for (int i = 0; i < k; i++)
        gain -= frac_before[i] * s->exclusive[before[i] / 2];
    return gain;
}

/* The policy's score for class c joining a GPU of signature classes
 * sig[0..k); false when it may not join at all. Higher is better. *overload
 * is set when KACE/ORACLE allow it only while overloaded. */
static bool join_score(const kace_sched *s, const int *sig, int k, int c, double *score, bool *overload)
{
    int g[KACE_SCHED_MAX_GROUP];
    int n = merge_classes(sig, k, c, g);
    *overload = false;
    if (n > s->cfg.max_group)
        return false;
    const group_info *after = group_of_classes(s, g, n);
    if (!after->allowed)
        return false;
    switch (s->cfg.policy) {
    case KACE_SCHED_EXCLUSIVE:
        return false;
    case KACE_SCHED_PACKING:
    case KACE_SCHED_RANDOM:
        *score = 0;
        return true;
    case KACE_SCHED_MEMCAP:
        *score = -after->memcap;
        return true;
    case KACE_SCHED_SM:
        *score = after->sm;
        return true;
    case KACE_SCHED_MEM:
        *score = -after->mem;
        return true;
    case KACE_SCHED_KACE:
    case KACE_SCHED_ORACLE: {
        const group_info *before = group_of_classes(s, sig, k);
        double frac_before[KACE_SCHED_MAX_GROUP], frac_after[KACE_SCHED_MAX_GROUP];
        for (int i = 0; i < n; i++) {
            frac_after[i] = after->fraction[i];
            /* The LS guarantee holds in every mode. */
            if ((g[i] & 1) && after->fraction[i] < s->cfg.ls_target)
                return false;
        }
        for (int i = 0; i < k; i++)
            frac_before[i] = before->fraction[i];
        kace_gain gain;
        kace_gain_of(frac_before, k, frac_after, n, &gain);
        double rate = gain.after;
        *score = objective_gain(s, sig, k, frac_before, g, n, frac_after, gain.gain);
        if (after->confidence >= s->cfg.min_confidence && gain.gain >= s->cfg.min_gain)
            return true;
        /* Overloaded, a job that would wait delivers nothing: any group
         * whose GPU still beats overload_min_rate is better than the queue. */
        *overload = true;
        return s->cfg.overload_queue >= 0 && rate >= s->cfg.overload_min_rate;
    }
    default:
        return false;
    }
}

/* Signature classes of index sig; returns k. */
static int sig_classes(int C, int sig, int *cls)
{
    if (sig < C) {
        cls[0] = sig;
        return 1;
    }
    cls[0] = (sig - C) / C;
    cls[1] = (sig - C) % C;
    return 2;
}

typedef struct ranked {
    int sig;
    bool overload; /* allowed only while overloaded: ranked after every normal one */
    double score;
} ranked;

static int cmp_ranked(const void *a, const void *b)
{
    const ranked *x = a, *y = b;
    if (x->overload != y->overload)
        return x->overload ? 1 : -1;
    if (x->score != y->score)
        return x->score > y->score ? -1 : 1;
    return x->sig - y->sig;
}

static kace_status build_ranks(kace_ctx *ctx, kace_sched *s)
{
    int C = s->n_classes;
    ranked *tmp = malloc((size_t)(s->n_sigs ? s->n_sigs : 1) * sizeof *tmp);
    if (!tmp)
        return kace_fail(ctx, KACE_ERR_NOMEM, "scheduler: out of memory");
    for (int c = 0; c < C; c++) {
        int n = 0;
        for (int sig = 0; sig < s->n_sigs; sig++) {
            s->rank_pos[(size_t)c * (size_t)s->n_sigs + (size_t)sig] = -1;
            int cls[2];
            int k = sig_classes(C, sig, cls);
            if (k == 2 && cls[0] > cls[1])
                continue; /* not a sorted signature */
            double score = 0;
            bool overload = false;
            if (join_score(s, cls, k, c, &score, &overload))
                tmp[n++] = (ranked){sig, overload, score};
        }
        qsort(tmp, (size_t)n, sizeof *tmp, cmp_ranked);
        s->rank[c] = malloc((size_t)(n ? n : 1) * sizeof *s->rank[c]);
        if (!s->rank[c]) {
            free(tmp);
            return kace_fail(ctx, KACE_ERR_NOMEM, "scheduler: out of memory");
        }
        s->n_rank[c] = n;
        s->n_normal[c] = 0;
        for (int i = 0; i < n; i++) {
            size_t word = (size_t)c * (size_t)s->sig_words + (size_t)(tmp[i].sig / 64);
            s->rank[c][i] = tmp[i].sig;
            s->rank_pos[(size_t)c * (size_t)s->n_sigs + (size_t)tmp[i].sig] = i;
            s->feasible_over[word] |= 1ULL << (tmp[i].sig % 64);
            if (!tmp[i].overload) {
                s->feasible[word] |= 1ULL << (tmp[i].sig % 64);
                s->n_normal[c] = i + 1;
            }
        }
    }
    free(tmp);
    return KACE_OK;
}

kace_status kace_sched_new(kace_ctx *ctx, const kace_sched_config *cfg, const kace_dataset *profiles,
                           const int *pool, int n_pool, const kace_group_set *runnable,
                           const kace_rate_source *rates, const int *node_gpus, size_t n_nodes,
                           kace_sched_start_fn on_start, void *user, kace_sched **out)
{
    *out = NULL;
    if (!cfg || (unsigned)cfg->policy >= KACE_SCHED_N_POLICIES)
        return kace_fail(ctx, KACE_ERR_INVALID, "scheduler: unknown policy");
    if (cfg->max_group < 1 || cfg->max_group > KACE_SCHED_MAX_GROUP)
        return kace_fail(ctx, KACE_ERR_INVALID, "scheduler: group size limit %d (expected 1..%d)", cfg->max_group,
                         KACE_SCHED_MAX_GROUP);
    if (!(cfg->gpu_mem_gb > 0) || !(cfg->ls_target >= 0 && cfg->ls_target <= 1) || isnan(cfg->min_gain) ||
        isnan(cfg->min_confidence) || isnan(cfg->overload_queue) || isnan(cfg->overload_min_rate))
        return kace_fail(ctx, KACE_ERR_INVALID, "scheduler: GPU memory must be > 0 and the LS target in 0..1");
    if ((unsigned)cfg->objective >= KACE_N_OBJECTIVES)
        return kace_fail(ctx, KACE_ERR_INVALID, "scheduler: unknown objective %d", (int)cfg->objective);
    if (n_pool < 1 || n_pool > KACE_SCHED_MAX_WORKLOADS)
        return kace_fail(ctx, KACE_ERR_INVALID, "scheduler: %d workloads (expected 1..%d)", n_pool,
                         KACE_SCHED_MAX_WORKLOADS);
    if (n_nodes < 1)
        return kace_fail(ctx, KACE_ERR_INVALID, "scheduler: the cluster has no node");
    bool predicted = cfg->policy == KACE_SCHED_KACE || cfg->policy == KACE_SCHED_ORACLE;
    if (predicted && (!rates || !rates->rates))
        return kace_fail(ctx, KACE_ERR_INVALID, "scheduler: policy %s needs a rate source",
                         kace_sched_policy_name(cfg->policy));
    for (int i = 0; i < n_pool; i++) {
        if (pool[i] < 0 || (size_t)pool[i] >= profiles->n_workloads)
            return kace_fail(ctx, KACE_ERR_INVALID, "scheduler: workload index %d is not in the profiles", pool[i]);
        const kace_workload *w = &profiles->workloads[pool[i]];
        static const kace_metric needed[] = {KACE_M_MEMCAP, KACE_M_SM_PCT, KACE_M_MEM_PCT};
        for (size_t m = 0; m < 3; m++)
            if (!isfinite(w->metric[needed[m]]))
                return kace_fail(ctx, KACE_ERR_INVALID, "scheduler: workload %s has no %s in its profile", w->name,
                                 kace_metric_name(needed[m]));
        if (predicted && cfg->objective == KACE_OBJ_RAW && !(w->metric[KACE_M_EXCLUSIVE] > 0))
            return kace_fail(ctx, KACE_ERR_INVALID,
                             "scheduler: the raw objective needs workload %s's exclusive throughput", w->name);
    }

    kace_sched *s = calloc(1, sizeof *s);
    kace_status st = KACE_OK;
    if (!s)
        return kace_fail(ctx, KACE_ERR_NOMEM, "scheduler: out of memory");
    s->cfg = *cfg;
    s->on_start = on_start;
    s->user = user;
    s->rng = cfg->seed;
    s->reserved_gpu = s->reserved_job = -1;
    s->n_pool = n_pool;
    for (int i = 0; i < n_pool; i++)
        s->exclusive[i] = profiles->workloads[pool[i]].metric[KACE_M_EXCLUSIVE];
    s->n_dataset = (int)profiles->n_workloads;
    s->n_classes = 2 * n_pool;
    int W = n_pool, C = s->n_classes;
    s->n_sigs = cfg->max_group >= 3 ? C + C * C : cfg->max_group == 2 ? C : 0;
    s->n_levels = cfg->policy == KACE_SCHED_PACKING ? N_LEVELS : 1;
    s->sig_words = (s->n_sigs + 63) / 64 + 1;
    s->n_queues = C + N_GANG_QUEUES;
    size_t n_groups = (size_t)W + (size_t)W * W + (size_t)W * W * W;
    s->local_of = malloc((profiles->n_workloads + 1) * sizeof *s->local_of);
    s->groups = calloc(n_groups, sizeof *s->groups);
    s->buckets = calloc((size_t)(s->n_sigs ? s->n_sigs : 1) * (size_t)s->n_levels, sizeof *s->buckets);
    s->sig_count = calloc((size_t)(s->n_sigs ? s->n_sigs : 1), sizeof *s->sig_count);
    s->sig_nonempty = calloc((size_t)s->sig_words, sizeof *s->sig_nonempty);
    s->level_bits = calloc((size_t)(s->n_sigs ? s->n_sigs : 1) * 2, sizeof *s->level_bits);
    s->rank = calloc((size_t)C, sizeof *s->rank);
    s->n_rank = calloc((size_t)C, sizeof *s->n_rank);
    s->n_normal = calloc((size_t)C, sizeof *s->n_normal);
    s->feasible = calloc((size_t)C * (size_t)s->sig_words, sizeof *s->feasible);
    s->feasible_over = calloc((size_t)C * (size_t)s->sig_words, sizeof *s->feasible_over);
    s->rank_pos = malloc((size_t)C * (size_t)(s->n_sigs ? s->n_sigs : 1) * sizeof *s->rank_pos);
    s->nodes = calloc(n_nodes, sizeof *s->nodes);
    s->queues = malloc((size_t)s->n_queues * sizeof *s->queues);
    if (!s->local_of || !s->groups || !s->buckets || !s->sig_count || !s->sig_nonempty || !s->level_bits ||
        !s->rank || !s->n_rank || !s->n_normal || !s->feasible || !s->feasible_over || !s->rank_pos || !s->nodes ||
        !s->queues) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "scheduler: out of memory");
        goto fail;
    }
    for (size_t i = 0; i <= profiles->n_workloads; i++)
        s->local_of[i] = -1;
    for (int i = 0; i < n_pool; i++) {
        if (s->local_of[pool[i]] >= 0) {
            st = kace_fail(ctx, KACE_ERR_INVALID, "scheduler: workload %s is twice in the pool",
                           profiles->workloads[pool[i]].name);
            goto fail;
        }
        s->local_of[pool[i]] = i;
    }
    for (int q = 0; q < s->n_queues; q++)
        s->queues[q] = (queue){-1, -1, 0};

    if ((st = build_groups(ctx, s, profiles, pool, runnable, rates)) || (st = build_ranks(ctx, s)))
        goto fail;

    size_t n_gpus = 0;
    for (size_t i = 0; i < n_nodes; i++) {
        if (node_gpus[i] < 0 || node_gpus[i] > KACE_SCHED_MAX_NODE_GPUS) {
            st = kace_fail(ctx, KACE_ERR_INVALID, "scheduler: node %zu has %d GPUs (expected 0..%d)", i, node_gpus[i],
                           KACE_SCHED_MAX_NODE_GPUS);
            goto fail;
        }
        n_gpus += (size_t)node_gpus[i];
    }
    if (n_gpus == 0 || n_gpus > (size_t)1 << 30) {
        st = kace_fail(ctx, KACE_ERR_INVALID, "scheduler: the cluster has %zu GPUs", n_gpus);
        goto fail;
    }
    s->gpus = calloc(n_gpus, sizeof *s->gpus);
    if (!s->gpus) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "scheduler: out of memory for %zu GPUs", n_gpus);
        goto fail;
    }
    s->n_gpus = n_gpus;
    s->n_nodes = n_nodes;
    s->idle = malloc(n_gpus * sizeof *s->idle);
    if (!s->idle) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "scheduler: out of memory for %zu GPUs", n_gpus);
        goto fail;
    }
    int g = 0;
    for (size_t i = 0; i < n_nodes; i++) {
        node_state *nd = &s->nodes[i];
        nd->first_gpu = g;
        nd->n_gpus = node_gpus[i];
        for (int j = 0; j < nd->n_gpus; j++, g++) {
            s->gpus[g] = (gpu_state){.node = (int)i, .bucket = -1, .pos = j};
            s->idle[g] = g;
        }
        nd->n_idle = nd->n_gpus;
        nd->pos = s->nodes_by_idle[nd->n_idle].n;
        if (!vec_push(&s->nodes_by_idle[nd->n_idle], (int)i)) {
            st = kace_fail(ctx, KACE_ERR_NOMEM, "scheduler: out of memory");
            goto fail;
        }
        if (nd->n_gpus > s->max_node_gpus)
            s->max_node_gpus = nd->n_gpus;
    }
    s->n_idle = n_gpus;
    *out = s;
    return KACE_OK;
fail:
    kace_sched_free(&s);
    return st;
}

void kace_sched_free(kace_sched **sp)
{
    if (!sp || !*sp)
        return;
    kace_sched *s = *sp;
    if (s->buckets)
        for (int i = 0; i < s->n_sigs * s->n_levels; i++)
            free(s->buckets[i].v);
    if (s->rank)
        for (int c = 0; c < s->n_classes; c++)
            free(s->rank[c]);
    for (int k = 0; k <= KACE_SCHED_MAX_NODE_GPUS; k++)
        free(s->nodes_by_idle[k].v);
    free(s->local_of);
    free(s->groups);
    free(s->buckets);
    free(s->sig_count);
    free(s->sig_nonempty);
    free(s->level_bits);
    free(s->rank);
    free(s->n_rank);
    free(s->n_normal);
    free(s->feasible);
    free(s->feasible_over);
    free(s->rank_pos);
    free(s->nodes);
    free(s->idle);
    free(s->queues);
    free(s->gpus);
    free(s->job_at);
    free(s->waiting);
    free(s);
    *sp = NULL;
}

/* ---- index maintenance ---- */

/* The gpu_milli used on a GPU, in MILLI_STEP steps. */
static int gpu_level(const gpu_state *gp)
{
    int level = 0;
    for (int i = 0; i < gp->n_jobs; i++)
        level += gp->level[i];
    return level;
}

/* The sorted classes of the jobs on a GPU; returns how many. */
static int gpu_classes(const gpu_state *gp, int *cls)
{
    for (int i = 0; i < gp->n_jobs; i++)
        cls[i] = gp->cls[i];
    return gp->n_jobs;
}

static bool node_move(kace_sched *s, int node, int new_idle)
{
    node_state *nd = &s->nodes[node];
    int_vec *from = &s->nodes_by_idle[nd->n_idle];
    int last = from->v[--from->n];
    from->v[nd->pos] = last;
    s->nodes[last].pos = nd->pos;
    nd->n_idle = new_idle;
    nd->pos = s->nodes_by_idle[new_idle].n;
    return vec_push(&s->nodes_by_idle[new_idle], node);
}

/* Takes GPU g (idle) out of its node's idle stack. */
static bool take_idle(kace_sched *s, int g)
{
    gpu_state *gp = &s->gpus[g];
    node_state *nd = &s->nodes[gp->node];
    int *idle = &s->idle[nd->first_gpu];
    int last = idle[nd->n_idle - 1];
    idle[gp->pos] = last;
    s->gpus[last].pos = gp->pos;
    s->n_idle--;
    s->n_busy++;
    return node_move(s, gp->node, nd->n_idle - 1);
}

static bool give_idle(kace_sched *s, int g)
{
    gpu_state *gp = &s->gpus[g];
    node_state *nd = &s->nodes[gp->node];
    s->idle[nd->first_gpu + nd->n_idle] = g;
    gp->pos = nd->n_idle;
    s->n_idle++;
    s->n_busy--;
    return node_move(s, gp->node, nd->n_idle + 1);
}

/* An idle GPU on the node with the fewest idle GPUs (>= need), or -1. */
static int find_idle_node(const kace_sched *s, int need)
{
    for (int k = need; k <= s->max_node_gpus; k++)
        if (s->nodes_by_idle[k].n)
            return s->nodes_by_idle[k].v[s->nodes_by_idle[k].n - 1];
    return -1;
}

static void bucket_remove(kace_sched *s, int g)
{
    gpu_state *gp = &s->gpus[g];
    if (gp->bucket < 0)
        return;
    int_vec *b = &s->buckets[gp->bucket];
    int last = b->v[--b->n];
    b->v[gp->pos] = last;
    s->gpus[last].pos = gp->pos;
    int sig = gp->bucket / s->n_levels, level = gp->bucket % s->n_levels;
    if (b->n == 0)
        s->level_bits[sig * 2 + level / 64] &= ~(1ULL << (level % 64));
    if (--s->sig_count[sig] == 0)
        s->sig_nonempty[sig / 64] &= ~(1ULL << (sig % 64));
    gp->bucket = -1;
}

/* Puts GPU g into the bucket of its residents when one more job may join. */
static bool bucket_insert(kace_sched *s, int g)
{
    gpu_state *gp = &s->gpus[g];
    if (gp->gang || gp->reserved || gp->n_jobs < 1 || gp->n_jobs >= s->cfg.max_group || s->n_sigs == 0)
        return true;
    int cls[KACE_SCHED_MAX_GROUP];
    int sig = sig_index(s->n_classes, cls, gpu_classes(gp, cls));
    int level = s->n_levels > 1 ? gpu_level(gp) : 0;
    gp->bucket = sig * s->n_levels + level;
    int_vec *b = &s->buckets[gp->bucket];
    gp->pos = b->n;
    if (!vec_push(b, g))
        return false;
    s->level_bits[sig * 2 + level / 64] |= 1ULL << (level % 64);
    if (s->sig_count[sig]++ == 0)
        s->sig_nonempty[sig / 64] |= 1ULL << (sig % 64);
    return true;
}

/* ---- decisions ---- */

typedef struct choice {
    int gpu;     /* -1: none */
    bool idle;   /* gpu is idle (taken whole) */
} choice;

/* KACE/ORACLE are overloaded once overload_queue jobs per GPU wait. */
static bool overloaded(const kace_sched *s)
{
    return s->cfg.overload_queue >= 0 && (double)s->n_queued >= s->cfg.overload_queue * (double)s->n_gpus;
}

/* How much of class c's ranking applies now. */
static int rank_limit(const kace_sched *s, int c)
{
    return overloaded(s) ? s->n_rank[c] : s->n_normal[c];
}

static bool may_share(const kace_sched *s, int c)
{
    const uint64_t *f = &(overloaded(s) ? s->feasible_over : s->feasible)[(size_t)c * (size_t)s->sig_words];
    for (int i = 0; i < s->sig_words; i++)
        if (f[i] & s->sig_nonempty[i])
            return true;
    return false;
}

static int idle_gpu(const kace_sched *s)
{
    int node = find_idle_node(s, 1);
    if (node < 0)
        return -1;
    const node_state *nd = &s->nodes[node];
    return s->idle[nd->first_gpu + nd->n_idle - 1];
}

/* PACKING: the GPU whose used share is the highest that still fits. */
static int best_fit(kace_sched *s, int c, int level)
{
    int best = -1, best_level = -1;
    for (int i = 0; i < s->n_rank[c]; i++) {
        int sig = s->rank[c][i];
        s->visits++;
        if (!s->sig_count[sig])
            continue;
        int max_level = N_LEVELS - 1 - level;
        for (int l = max_level; l > best_level; l--) {
            if (!(s->level_bits[sig * 2 + l / 64] & (1ULL << (l % 64))))
                continue;
            best_level = l;
            best = s->buckets[sig * s->n_levels + l].v[0];
            break;
        }
    }
    return best;
}

/* A uniformly random GPU among the idle ones and those it may join. */
static int random_gpu(kace_sched *s, int c)
{
    uint64_t total = s->n_idle;
    for (int i = 0; i < s->n_rank[c]; i++)
        total += (uint64_t)s->sig_count[s->rank[c][i]];
    s->visits += (uint64_t)s->n_rank[c];
    if (total == 0)
        return -1;
    uint64_t r = next_random(s) % total;
    if (r < s->n_idle) {
        /* The r-th idle GPU in node order would need a scan: any idle GPU
         * is as good, since all idle GPUs are alike for a single job. */
        return idle_gpu(s);
    }
    r -= s->n_idle;
    for (int i = 0; i < s->n_rank[c]; i++) {
        int sig = s->rank[c][i];
        if (r < (uint64_t)s->sig_count[sig])
            return s->buckets[sig * s->n_levels].v[r];
        r -= (uint64_t)s->sig_count[sig];
    }
    return -1;
}

static choice decide_indexed(kace_sched *s, const job_state *j)
{
    choice ch = {-1, false};
    int c = j->cls;
    switch (s->cfg.policy) {
    case KACE_SCHED_PACKING:
        if (j->level < N_LEVELS - 1 && may_share(s, c))
            ch.gpu = best_fit(s, c, j->level);
        break;
    case KACE_SCHED_RANDOM:
        ch.gpu = random_gpu(s, c);
        ch.idle = ch.gpu >= 0 && s->gpus[ch.gpu].n_jobs == 0;
        return ch;
    default:
        if (s->n_idle)
            break; /* idle first */
        if (may_share(s, c))
            for (int i = 0, n = rank_limit(s, c); i < n; i++) {
                int sig = s->rank[c][i];
                s->visits++;
                if (s->sig_count[sig]) {
                    ch.gpu = s->buckets[sig * s->n_levels].v[0];
                    break;
                }
            }
        break;
    }
    if (ch.gpu < 0 && s->n_idle) {
        ch.gpu = idle_gpu(s);
        ch.idle = true;
    }
    return ch;
}

/* The same decisions found by looking at every GPU: the benchmark's peer. */
static choice decide_scan(kace_sched *s, const job_state *j)
{
    choice ch = {-1, false};
    int c = j->cls;
    int first_idle = -1, best = -1;
    long best_key = -1;
    const int *pos = &s->rank_pos[(size_t)c * (size_t)s->n_sigs];
    int limit = rank_limit(s, c);
    for (size_t g = 0; g < s->n_gpus; g++) {
        const gpu_state *gp = &s->gpus[g];
        s->visits++;
        if (gp->n_jobs == 0) {
            if (first_idle < 0)
                first_idle = (int)g;
            continue;
        }
        if (gp->bucket < 0)
            continue;
        int sig = gp->bucket / s->n_levels;
        if (pos[sig] < 0 || pos[sig] >= limit)
            continue;
        long key;
        if (s->cfg.policy == KACE_SCHED_PACKING) {
            if (gpu_level(gp) + j->level > N_LEVELS - 1)
                continue;
            key = gpu_level(gp);
        } else {
            key = (long)s->n_sigs - pos[sig];
        }
        if (key > best_key) {
            best_key = key;
            best = (int)g;
        }
    }
    bool idle_first = s->cfg.policy != KACE_SCHED_PACKING && s->cfg.policy != KACE_SCHED_RANDOM;
    if (s->cfg.policy == KACE_SCHED_PACKING && j->level >= N_LEVELS - 1)
        best = -1;
    if (first_idle >= 0 && (idle_first || best < 0)) {
        ch.gpu = first_idle;
        ch.idle = true;
    } else {
        ch.gpu = best;
    }
    return ch;
}

static kace_status start_single(kace_ctx *ctx, kace_sched *s, int id, const job_state *j, choice ch)
{
    gpu_state *gp = &s->gpus[ch.gpu];
    if (ch.idle && !take_idle(s, ch.gpu))
        return kace_fail(ctx, KACE_ERR_NOMEM, "scheduler: out of memory");
    bucket_remove(s, ch.gpu);
    int before[KACE_SCHED_MAX_GROUP] = {0, 0, 0}, cls[KACE_SCHED_MAX_GROUP];
    int k = gpu_classes(gp, before);
    int n = merge_classes(before, k, j->cls, cls);
    /* Keep job ids in the order of their sorted classes. */
    int at = 0;
    while (at < k && gp->cls[at] <= j->cls)
        at++;
    for (int i = k; i > at; i--) {
        gp->job[i] = gp->job[i - 1];
        gp->level[i] = gp->level[i - 1];
    }
    gp->job[at] = id;
    gp->level[at] = j->level;
    for (int i = 0; i < n; i++)
        gp->cls[i] = (uint8_t)cls[i];
    gp->n_jobs++;
    if (!bucket_insert(s, ch.gpu))
        return kace_fail(ctx, KACE_ERR_NOMEM, "scheduler: out of memory");
    s->job_at[id] = AT_GPU + ch.gpu;
    if (s->on_start)
        s->on_start(s->user, id, &ch.gpu, 1);
    return KACE_OK;
}

static kace_status start_gang(kace_ctx *ctx, kace_sched *s, int id, const job_state *j, int node)
{
    node_state *nd = &s->nodes[node];
    int gpus[KACE_SCHED_MAX_NODE_GPUS];
    for (int i = 0; i < j->num_gpu; i++) {
        int g = s->idle[nd->first_gpu + nd->n_idle - 1];
        if (!take_idle(s, g))
            return kace_fail(ctx, KACE_ERR_NOMEM, "scheduler: out of memory");
        s->gpus[g].gang = true;
        s->gpus[g].n_jobs = 1;
        s->gpus[g].job[0] = id;
        s->gpus[g].level[0] = 0;
        gpus[i] = g;
    }
    s->job_at[id] = AT_GPU + gpus[0];
    if (s->on_start)
        s->on_start(s->user, id, gpus, j->num_gpu);
    return KACE_OK;
}

/* Where job j would start now: a GPU (single) or a node (gang); -1: nowhere. */
static int try_place(kace_sched *s, const job_state *j, choice *ch)
{
    if (j->num_gpu > 1)
        return find_idle_node(s, j->num_gpu);
    *ch = s->cfg.scan_all ? decide_scan(s, j) : decide_indexed(s, j);
    return ch->gpu;
}

/* Ends the reservation: its GPU takes joiners again. */
static bool release_reservation(kace_sched *s)
{
    int g = s->reserved_gpu;
    s->reserved_gpu = s->reserved_job = -1;
    if (g < 0)
        return true;
    s->gpus[g].reserved = false;
    return s->gpus[g].n_jobs == 0 || bucket_insert(s, g);
}

static kace_status start(kace_ctx *ctx, kace_sched *s, int id, const job_state *j, int where, choice ch)
{
    if (id == s->reserved_job && !release_reservation(s))
        return kace_fail(ctx, KACE_ERR_NOMEM, "scheduler: out of memory");
    return j->num_gpu > 1 ? start_gang(ctx, s, id, j, where) : start_single(ctx, s, id, j, ch);
}

static int queue_of(const kace_sched *s, const job_state *j)
{
    return j->num_gpu > 1 ? s->n_classes + j->num_gpu : j->cls;
}

static void enqueue(kace_sched *s, int id, const job_state *j, uint64_t seq)
{
    int qi = queue_of(s, j);
    queue *q = &s->queues[qi];
    s->job_at[id] = AT_QUEUE;
    s->waiting[id] = (waiting){.seq = seq, .next = -1, .ask = *j};
    if (q->tail >= 0)
        s->waiting[q->tail].next = id;
    else
        q->head = id;
    q->tail = id;
    if (q->n++ == 0)
        s->queue_nonempty[qi / 64] |= 1ULL << (qi % 64);
    s->n_queued++;
}

/* The first non-empty queue at or after qi, or -1: a finish looks at the
 * waiting classes only, not at every queue. */
static int next_queue(const kace_sched *s, int qi)
{
    for (int w = qi / 64; w * 64 < s->n_queues; w++) {
        uint64_t bits = s->queue_nonempty[w] & (w == qi / 64 ? ~0ULL << (qi % 64) : ~0ULL);
        if (bits) {
            int b = 0;
            while (!(bits & 1)) {
                bits >>= 1;
                b++;
            }
            return w * 64 + b;
        }
    }
    return -1;
}

static void dequeue_head(kace_sched *s, int qi)
{
    queue *q = &s->queues[qi];
    int id = q->head;
    q->head = s->waiting[id].next;
    if (q->head < 0)
        q->tail = -1;
    if (--q->n == 0)
        s->queue_nonempty[qi / 64] &= ~(1ULL << (qi % 64));
    s->n_queued--;
}

/* KACE/ORACLE with `reserve`, overloaded and no GPU idle: the longest
 * waiting single-GPU job (gangs wait for whole nodes) may never fit next to the jobs that keep refilling the shared
 * GPUs, so it holds one shared GPU (the least occupied: singletons first)
 * that nobody else may join until it can start there. */
static bool reserve_for_oldest(kace_sched *s)
{
    bool predicted = s->cfg.policy == KACE_SCHED_KACE || s->cfg.policy == KACE_SCHED_ORACLE;
    if (!predicted || !s->cfg.reserve || s->reserved_job >= 0 || s->n_idle || !s->n_queued || !overloaded(s))
        return true;
    int oldest = -1;
    for (int qi = next_queue(s, 0); qi >= 0 && qi < s->n_classes; qi = next_queue(s, qi + 1))
        if (oldest < 0 || s->waiting[s->queues[qi].head].seq < s->waiting[oldest].seq)
            oldest = s->queues[qi].head;
    if (oldest < 0)
        return true;
    /* Signatures are numbered singletons first, so the first non-empty one
     * has the fewest residents. */
    for (int i = 0; i < s->sig_words; i++) {
        s->visits++;
        if (!s->sig_nonempty[i])
            continue;
        int sig = i * 64;
        while (!(s->sig_nonempty[i] & (1ULL << (sig % 64))))
            sig++;
        int g = -1;
        for (int l = 0; l < s->n_levels && g < 0; l++)
            if (s->buckets[sig * s->n_levels + l].n)
                g = s->buckets[sig * s->n_levels + l].v[0];
        if (g < 0)
            return true;
        bucket_remove(s, g);
        s->gpus[g].reserved = true;
        s->reserved_gpu = g;
        s->reserved_job = oldest;
        return true;
    }
    return true;
}

/* The reserved job starts on its GPU once it may join what is left there
 * (an idle GPU is found by the normal path). */
static kace_status start_reserved(kace_ctx *ctx, kace_sched *s, bool *started)
{
    *started = false;
    int g = s->reserved_gpu, id = s->reserved_job;
    if (g < 0 || s->gpus[g].n_jobs == 0)
        return KACE_OK;
    const gpu_state *gp = &s->gpus[g];
    const job_state *j = &s->waiting[id].ask;
    int c = j->cls;
    int cls[KACE_SCHED_MAX_GROUP];
    int sig = sig_index(s->n_classes, cls, gpu_classes(gp, cls));
    int pos = gp->n_jobs < s->cfg.max_group ? s->rank_pos[(size_t)c * (size_t)s->n_sigs + (size_t)sig] : -1;
    if (pos < 0 || pos >= rank_limit(s, c))
        return KACE_OK;
    job_state ask = *j;
    dequeue_head(s, queue_of(s, &ask));
    *started = true;
    return start(ctx, s, id, &ask, g, (choice){g, false});
}

/* Starts queued jobs while one fits, the longest waiting first. Only the
 * head of each class's queue can be next: all of a queue's jobs are alike. */
static kace_status drain(kace_ctx *ctx, kace_sched *s)
{
    while (s->n_queued) {
        bool started = false;
        kace_status st = start_reserved(ctx, s, &started);
        if (st)
            return st;
        if (started)
            continue;
        int best_q = -1, best_where = -1;
        choice best_ch = {-1, false};
        uint64_t best_seq = UINT64_MAX;
        for (int qi = next_queue(s, 0); qi >= 0; qi = next_queue(s, qi + 1)) {
            const waiting *wt = &s->waiting[s->queues[qi].head];
            if (wt->seq >= best_seq)
                continue;
            choice ch = {-1, false};
            int where = try_place(s, &wt->ask, &ch);
            if (where >= 0) {
                best_q = qi;
                best_where = where;
                best_ch = ch;
                best_seq = wt->seq;
            }
        }
        if (best_q < 0)
            break;
        int id = s->queues[best_q].head;
        job_state ask = s->waiting[id].ask;
        dequeue_head(s, best_q);
        if ((st = start(ctx, s, id, &ask, best_where, best_ch)))
            return st;
    }
    return reserve_for_oldest(s) ? KACE_OK : kace_fail(ctx, KACE_ERR_NOMEM, "scheduler: out of memory");
}

/* Room for job ids up to id (amortised: the tables double). */
static bool grow_jobs(kace_sched *s, int id)
{
    int cap = s->cap_jobs ? s->cap_jobs : 1024;
    while (cap <= id)
        cap *= 2;
    int *p = realloc(s->job_at, (size_t)cap * sizeof *p);
    if (p)
        s->job_at = p;
    waiting *w = p ? realloc(s->waiting, (size_t)cap * sizeof *w) : NULL;
    if (!w)
        return false;
    memset(p + s->cap_jobs, 0, (size_t)(cap - s->cap_jobs) * sizeof *p);
    s->waiting = w;
    s->cap_jobs = cap;
    return true;
}

kace_status kace_sched_submit(kace_ctx *ctx, kace_sched *s, const kace_sched_job *job)
{
    if (job->id < 0 || job->id >= (1 << 30))
        return kace_fail(ctx, KACE_ERR_INVALID, "scheduler: job id %d (expected 0..2^30)", job->id);
    if (job->workload < 0 || job->workload >= s->n_dataset || s->local_of[job->workload] < 0)
        return kace_fail(ctx, KACE_ERR_NOT_FOUND, "scheduler: job %d has workload %d, which is not in the pool",
                         job->id, job->workload);
    if (job->num_gpu < 1 || job->num_gpu > s->max_node_gpus)
        return kace_fail(ctx, KACE_ERR_INVALID,
                         "scheduler: job %d asks for %d GPUs; the largest node has %d, so it could never start",
                         job->id, job->num_gpu, s->max_node_gpus);
    if (job->gpu_milli < 1 || job->gpu_milli > 1000)
        return kace_fail(ctx, KACE_ERR_INVALID, "scheduler: job %d asks for gpu_milli %d (expected 1..1000)", job->id,
                         job->gpu_milli);
    if (job->id >= s->cap_jobs && !grow_jobs(s, job->id))
        return kace_fail(ctx, KACE_ERR_NOMEM, "scheduler: out of memory for job id %d", job->id);
    if (s->job_at[job->id] != AT_NONE)
        return kace_fail(ctx, KACE_ERR_INVALID, "scheduler: job id %d is already in use", job->id);
    job_state j = {
        .cls = (uint8_t)(s->local_of[job->workload] * 2 + (job->ls ? 1 : 0)),
        /* Requests are rounded up to the 10-milli steps the packing index keeps. */
        .level = (uint8_t)((job->gpu_milli + MILLI_STEP - 1) / MILLI_STEP),
        .num_gpu = (uint8_t)job->num_gpu,
    };
    uint64_t seq = s->next_seq++;
    /* A new job may not pass others of its own class waiting in the queue. */
    choice ch = {-1, false};
    int where = -1;
    if (s->queues[queue_of(s, &j)].n == 0)
        where = try_place(s, &j, &ch);
    if (where < 0) {
        enqueue(s, job->id, &j, seq);
        return KACE_OK;
    }
    return start(ctx, s, job->id, &j, where, ch);
}

kace_status kace_sched_finish(kace_ctx *ctx, kace_sched *s, int job_id)
{
    if (job_id < 0 || job_id >= s->cap_jobs || s->job_at[job_id] < AT_GPU)
        return kace_fail(ctx, KACE_ERR_INVALID, "scheduler: job %d is not running", job_id);
    int first = s->job_at[job_id] - AT_GPU;
    if (s->gpus[first].gang) {
        const node_state *nd = &s->nodes[s->gpus[first].node];
        for (int g = nd->first_gpu; g < nd->first_gpu + nd->n_gpus; g++) {
            gpu_state *gp = &s->gpus[g];
            if (gp->gang && gp->job[0] == job_id) {
                gp->gang = false;
                gp->n_jobs = 0;
                if (!give_idle(s, g))
                    return kace_fail(ctx, KACE_ERR_NOMEM, "scheduler: out of memory");
            }
        }
    } else {
        int g = first;
        gpu_state *gp = &s->gpus[g];
        bucket_remove(s, g);
        int at = 0;
        while (at < gp->n_jobs && gp->job[at] != job_id)
            at++;
        for (int i = at; i + 1 < gp->n_jobs; i++) {
            gp->job[i] = gp->job[i + 1];
            gp->cls[i] = gp->cls[i + 1];
            gp->level[i] = gp->level[i + 1];
        }
        gp->n_jobs--;
        if (gp->n_jobs == 0) {
            if (!give_idle(s, g))
                return kace_fail(ctx, KACE_ERR_NOMEM, "scheduler: out of memory");
        } else if (!bucket_insert(s, g)) {
            return kace_fail(ctx, KACE_ERR_NOMEM, "scheduler: out of memory");
        }
    }
    s->job_at[job_id] = AT_NONE;
    return drain(ctx, s);
}

int kace_sched_gpu_jobs(const kace_sched *s, int gpu, int *job_ids)
{
    if (gpu < 0 || (size_t)gpu >= s->n_gpus)
        return 0;
    const gpu_state *gp = &s->gpus[gpu];
    for (int i = 0; i < gp->n_jobs; i++)
        job_ids[i] = gp->job[i];
    return gp->n_jobs;
}

size_t kace_sched_n_gpus(const kace_sched *s)
{
    return s->n_gpus;
}

size_t kace_sched_n_queued(const kace_sched *s)
{
    return s->n_queued;
}

size_t kace_sched_n_busy(const kace_sched *s)
{
    return s->n_busy;
}

uint64_t kace_sched_visits(const kace_sched *s)
{
    return s->visits;
}

/* ==== driven from outside (the Kubernetes extender) =========================
 * Kept apart from the decision path above: these only reuse its helpers. */

kace_status kace_sched_start_on(kace_ctx *ctx, kace_sched *s, const kace_sched_job *job, int gpu)
{
    if (job->num_gpu != 1)
        return kace_fail(ctx, KACE_ERR_INVALID, "scheduler: job %d: only a single-GPU job can be started on a given GPU",
                         job->id);
    if (gpu < 0 || (size_t)gpu >= s->n_gpus)
        return kace_fail(ctx, KACE_ERR_INVALID, "scheduler: job %d: no GPU %d (the cluster has %zu)", job->id, gpu,
                         s->n_gpus);
    const gpu_state *gp = &s->gpus[gpu];
    int level = (job->gpu_milli + MILLI_STEP - 1) / MILLI_STEP;
    if (gp->gang || gp->n_jobs >= KACE_SCHED_MAX_GROUP ||
        (s->n_levels > 1 && gpu_level(gp) + level > N_LEVELS - 1))
        return kace_fail(ctx, KACE_ERR_INVALID, "scheduler: job %d: GPU %d is full", job->id, gpu);
    if (job->id >= 0 && job->id < s->cap_jobs && s->job_at[job->id] != AT_NONE)
        return kace_fail(ctx, KACE_ERR_INVALID, "scheduler: job id %d is already in use", job->id);
    if (job->id < 0 || job->id >= (1 << 30))
        return kace_fail(ctx, KACE_ERR_INVALID, "scheduler: job id %d (expected 0..2^30)", job->id);
    if (job->workload < 0 || job->workload >= s->n_dataset || s->local_of[job->workload] < 0)
        return kace_fail(ctx, KACE_ERR_NOT_FOUND, "scheduler: job %d has workload %d, which is not in the pool",
                         job->id, job->workload);
    if (job->gpu_milli < 1 || job->gpu_milli > 1000)
        return kace_fail(ctx, KACE_ERR_INVALID, "scheduler: job %d asks for gpu_milli %d (expected 1..1000)", job->id,
                         job->gpu_milli);
    if (job->id >= s->cap_jobs && !grow_jobs(s, job->id))
        return kace_fail(ctx, KACE_ERR_NOMEM, "scheduler: out of memory for job id %d", job->id);
    job_state j = {.cls = (uint8_t)(s->local_of[job->workload] * 2 + (job->ls ? 1 : 0)), .level = (uint8_t)level,
                   .num_gpu = 1};
    s->next_seq++;
    return start(ctx, s, job->id, &j, gpu, (choice){gpu, gp->n_jobs == 0});
}

kace_status kace_sched_withdraw(kace_ctx *ctx, kace_sched *s, int job_id)
{
    if (job_id < 0 || job_id >= s->cap_jobs || s->job_at[job_id] == AT_NONE)
        return kace_fail(ctx, KACE_ERR_INVALID, "scheduler: job %d is neither running nor queued", job_id);
    if (s->job_at[job_id] >= AT_GPU)
        return kace_sched_finish(ctx, s, job_id);
    int qi = queue_of(s, &s->waiting[job_id].ask);
    queue *q = &s->queues[qi];
    int prev = -1;
    for (int id = q->head; id >= 0 && id != job_id; id = s->waiting[id].next)
        prev = id;
    if (prev < 0)
        q->head = s->waiting[job_id].next;
    else
        s->waiting[prev].next = s->waiting[job_id].next;
    if (q->tail == job_id)
        q->tail = prev;
    if (--q->n == 0)
        s->queue_nonempty[qi / 64] &= ~(1ULL << (qi % 64));
    s->n_queued--;
    s->job_at[job_id] = AT_NONE;
    if (job_id == s->reserved_job && !release_reservation(s))
        return kace_fail(ctx, KACE_ERR_NOMEM, "scheduler: out of memory");
    return drain(ctx, s);
}
