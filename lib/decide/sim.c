/* Event-driven cluster replay (include/kace/sim.h).
 *
 * Each job keeps its remaining work (seconds at exclusive speed), its
 * current rate (fraction of exclusive speed) and when those were last
 * settled. A GPU's group changes only when a job starts or ends on it; then
 * its jobs are settled at the old rates, given the measured rates of the new
 * group and one completion event is queued for the GPU. Events of a GPU
 * whose group changed since are stale and skipped (version numbers). */
#include "kace/sim.h"
#include "kace/place.h"
#include "kace/meter.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- truth ---- */

typedef struct truth_entry {
    uint64_t key;
    int k;
    double fraction[KACE_SCHED_MAX_GROUP]; /* members in sorted order */
    int runs;
} truth_entry;

struct kace_truth {
    truth_entry *slots; /* open addressing, key 0 = empty */
    size_t cap, n;
    kace_group_set *runnable;
};

/* Sorts group (k <= 3) and returns the permutation: sorted[i] = group[perm[i]]. */
static void sort_members(const int *group, int k, int *sorted, int *perm)
{
    for (int i = 0; i < k; i++)
        perm[i] = i;
    for (int i = 1; i < k; i++)
        for (int j = i; j > 0 && group[perm[j - 1]] > group[perm[j]]; j--) {
            int tmp = perm[j];
            perm[j] = perm[j - 1];
            perm[j - 1] = tmp;
        }
    for (int i = 0; i < k; i++)
        sorted[i] = group[perm[i]];
}

static uint64_t truth_key(const int *sorted, int k)
{
    uint64_t key = (uint64_t)k;
    for (int i = 0; i < k; i++)
        key |= ((uint64_t)sorted[i] + 1) << (2 + 20 * i);
    return key;
}

static truth_entry *truth_find(const kace_truth *t, uint64_t key)
{
    size_t mask = t->cap - 1;
    size_t j = (size_t)((key * 0x9e3779b97f4a7c15ULL) >> 20) & mask;
    while (t->slots[j].key && t->slots[j].key != key)
        j = (j + 1) & mask;
    return &t->slots[j];
}

void kace_truth_free(kace_truth **t)
{
    if (!t || !*t)
        return;
    free((*t)->slots);
    kace_group_set_free(&(*t)->runnable);
    free(*t);
    *t = NULL;
}

kace_status kace_truth_build(kace_ctx *ctx, const kace_dataset *const *sets, size_t n_sets, kace_truth **out)
{
    *out = NULL;
    size_t total = 0;
    for (size_t s = 0; s < n_sets; s++)
        total += sets[s] ? sets[s]->n_colocations : 0;
    kace_truth *t = calloc(1, sizeof *t);
    kace_status st = KACE_OK;
    if (!t)
        return kace_fail(ctx, KACE_ERR_NOMEM, "truth: out of memory");
    t->cap = 64;
    while (t->cap < 2 * total + 2)
        t->cap *= 2;
    t->slots = calloc(t->cap, sizeof *t->slots);
    if (!t->slots || (st = kace_group_set_new(ctx, &t->runnable))) {
        st = st ? st : kace_fail(ctx, KACE_ERR_NOMEM, "truth: out of memory");
        goto fail;
    }
    for (size_t s = 0; s < n_sets; s++) {
        const kace_dataset *ds = sets[s];
        for (size_t r = 0; ds && r < ds->n_colocations; r++) {
            const kace_colocation *c = &ds->colocations[r];
            if (c->k < 2 || c->k > KACE_SCHED_MAX_GROUP || c->status != KACE_RUN_OK)
                continue;
            bool full_mps = true;
            for (int i = 0; i < c->k; i++)
                full_mps = full_mps && c->mps_pct[i] == 100;
            if (!full_mps)
                continue;
            int sorted[KACE_SCHED_MAX_GROUP], perm[KACE_SCHED_MAX_GROUP];
            sort_members(c->workload, c->k, sorted, perm);
            double frac[KACE_SCHED_MAX_GROUP];
            for (int i = 0; i < c->k; i++) {
                const kace_workload *w = &ds->workloads[sorted[i]];
                double excl = w->metric[KACE_M_EXCLUSIVE];
                if (!(excl > 0)) {
                    st = kace_fail(ctx, KACE_ERR_INVALID, "truth: workload %s has no exclusive throughput", w->name);
                    goto fail;
                }
                frac[i] = c->throughput[perm[i]] / excl;
                if (!(frac[i] >= 0) || !isfinite(frac[i])) {
                    st = kace_fail(ctx, KACE_ERR_INVALID, "truth: colocation %zu has throughput %g for %s", r,
                                   c->throughput[perm[i]], w->name);
                    goto fail;
                }
            }
            truth_entry *e = truth_find(t, truth_key(sorted, c->k));
            if (!e->key) {
                e->key = truth_key(sorted, c->k);
                e->k = c->k;
                t->n++;
            }
            for (int i = 0; i < c->k; i++)
                e->fraction[i] += frac[i];
            e->runs++;
        }
    }
    for (size_t j = 0; j < t->cap; j++) {
        truth_entry *e = &t->slots[j];
        if (!e->key)
            continue;
        for (int i = 0; i < e->k; i++)
            e->fraction[i] /= e->runs;
    }
    /* Runnable: measured, every member made progress, sub-pairs measured. */
    for (size_t j = 0; j < t->cap; j++) {
        const truth_entry *e = &t->slots[j];
        if (!e->key)
            continue;
        int g[KACE_SCHED_MAX_GROUP];
        bool ok = true;
        for (int i = 0; i < e->k; i++) {
            g[i] = (int)((e->key >> (2 + 20 * i)) & 0xFFFFF) - 1;
            ok = ok && e->fraction[i] > 0;
        }
        if (e->k == 3) {
            int pairs[3][2] = {{g[0], g[1]}, {g[0], g[2]}, {g[1], g[2]}};
            for (int p = 0; p < 3 && ok; p++) {
                const truth_entry *sub = truth_find(t, truth_key(pairs[p], 2));
                ok = sub->key != 0;
                for (int i = 0; ok && i < 2; i++)
                    ok = sub->fraction[i] > 0;
            }
        }
        if (ok && (st = kace_group_set_add(ctx, t->runnable, g, e->k)))
            goto fail;
    }
    *out = t;
    return KACE_OK;
fail:
    kace_truth_free(&t);
    return st;
}

kace_status kace_truth_rates(kace_ctx *ctx, const kace_truth *t, const int *group, int k, double *fraction)
{
    if (k == 1) {
        fraction[0] = 1;
        return KACE_OK;
    }
    if (k < 1 || k > KACE_SCHED_MAX_GROUP)
        return kace_fail(ctx, KACE_ERR_INVALID, "truth: a group has 1..%d members, not %d", KACE_SCHED_MAX_GROUP, k);
    int sorted[KACE_SCHED_MAX_GROUP], perm[KACE_SCHED_MAX_GROUP];
    sort_members(group, k, sorted, perm);
    const truth_entry *e = truth_find(t, truth_key(sorted, k));
    if (!e->key)
        return kace_fail(ctx, KACE_ERR_NOT_FOUND, "truth: the group of %d workloads (%d, %d, ...) was never measured",
                         k, group[0], group[1]);
    for (int i = 0; i < k; i++)
        fraction[perm[i]] = e->fraction[i];
    return KACE_OK;
}

const kace_group_set *kace_truth_runnable(const kace_truth *t)
{
    return t->runnable;
}

static kace_status truth_source_rates(void *self, kace_ctx *ctx, const int *group, int k, double *fraction,
                                      double *confidence)
{
    if (confidence)
        *confidence = 1;
    return kace_truth_rates(ctx, self, group, k, fraction);
}

void kace_truth_rate_source(const kace_truth *t, kace_rate_source *out)
{
    out->rates = truth_source_rates;
    out->self = (void *)t;
}

kace_status kace_dataset_profiles_only(kace_ctx *ctx, const kace_dataset *ds, kace_dataset **out)
{
    kace_status st = kace_dataset_new(ctx, out);
    if (st)
        return st;
    for (size_t i = 0; i < ds->n_workloads; i++) {
        int idx = -1;
        if ((st = kace_dataset_intern(ctx, *out, ds->workloads[i].name, &idx))) {
            kace_dataset_free(out);
            return st;
        }
        (*out)->workloads[idx] = ds->workloads[i];
    }
    return KACE_OK;
}

/* ---- jobs and cluster from the trace ---- */

static uint64_t fnv1a(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 0x100000001b3ULL;
    }
    return h;
}

static bool is_inference(const char *name)
{
    size_t n = strlen(name);
    return n >= 4 && strcmp(name + n - 4, "-inf") == 0;
}

/* Insertion sort of a few workload indices by name. */
static void sort_by_name(const kace_dataset *ds, int *w, int n)
{
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && strcmp(ds->workloads[w[j - 1]].name, ds->workloads[w[j]].name) > 0; j--) {
            int tmp = w[j];
            w[j] = w[j - 1];
            w[j - 1] = tmp;
        }
}

kace_status kace_sim_jobs_from_trace(kace_ctx *ctx, const kace_trace *trace, const kace_dataset *profiles,
                                     const int *pool, int n_pool, kace_sim_job **jobs, size_t *n_jobs,
                                     size_t *n_cpu_only)
{
    *jobs = NULL;
    *n_jobs = *n_cpu_only = 0;
    int inf[KACE_SCHED_MAX_WORKLOADS], train[KACE_SCHED_MAX_WORKLOADS], n_inf = 0, n_train = 0;
    if (n_pool < 1 || n_pool > KACE_SCHED_MAX_WORKLOADS)
        return kace_fail(ctx, KACE_ERR_INVALID, "simulate: %d workloads in the pool (expected 1..%d)", n_pool,
                         KACE_SCHED_MAX_WORKLOADS);
    for (int i = 0; i < n_pool; i++) {
        if (pool[i] < 0 || (size_t)pool[i] >= profiles->n_workloads)
            return kace_fail(ctx, KACE_ERR_INVALID, "simulate: workload index %d is not in the profiles", pool[i]);
        if (is_inference(profiles->workloads[pool[i]].name))
            inf[n_inf++] = pool[i];
        else
            train[n_train++] = pool[i];
    }
    /* By name, so that the rule does not depend on the store's order. */
    sort_by_name(profiles, inf, n_inf);
    sort_by_name(profiles, train, n_train);
    if (!n_inf || !n_train)
        return kace_fail(ctx, KACE_ERR_INVALID,
                         "simulate: the workload pool needs inference (-inf) and training workloads (has %d and %d)",
                         n_inf, n_train);
    kace_sim_job *out = malloc((trace->n_gpu_jobs ? trace->n_gpu_jobs : 1) * sizeof *out);
    if (!out)
        return kace_fail(ctx, KACE_ERR_NOMEM, "simulate: out of memory");
    size_t n = 0;
    for (size_t i = 0; i < trace->n_jobs; i++) {
        const kace_trace_job *tj = &trace->jobs[i];
        if (tj->num_gpu == 0) {
            (*n_cpu_only)++;
            continue;
        }
        bool ls = tj->qos == KACE_QOS_LS;
        uint64_t h = fnv1a(tj->name);
        out[n] = (kace_sim_job){.arrival = tj->arrival,
                                .work = tj->work,
                                .workload = ls ? inf[h % (uint64_t)n_inf] : train[h % (uint64_t)n_train],
                                .ls = ls,
                                .gpu_milli = tj->gpu_milli,
                                .num_gpu = tj->num_gpu};
        n++;
    }
    *jobs = out;
    *n_jobs = n;
    return KACE_OK;
}

/* ---- a site's own history ---- */

/* Index of the stand-in for jobs without a workload, added on first use. */
static kace_status no_workload_index(kace_ctx *ctx, kace_dataset *profiles, double gpu_mem_gb, int *index)
{
    if (*index >= 0)
        return KACE_OK;
    if (kace_dataset_find(profiles, KACE_SIM_NO_WORKLOAD) >= 0)
        return kace_fail(ctx, KACE_ERR_INVALID, "simulate: the profiles already hold a workload named '%s'",
                         KACE_SIM_NO_WORKLOAD);
    kace_status st = kace_dataset_intern(ctx, profiles, KACE_SIM_NO_WORKLOAD, index);
    if (st)
        return st;
    kace_workload *w = &profiles->workloads[*index];
    w->metric[KACE_M_MEMCAP] = gpu_mem_gb;
    w->metric[KACE_M_SM_PCT] = 100;
    w->metric[KACE_M_MEM_PCT] = 100;
    return KACE_OK;
}

/* Index of a known workload by name, or -1. */
static int known_workload(const kace_dataset *profiles, const int *known, int n_known, const char *name)
{
    int w = kace_dataset_find(profiles, name);
    for (int i = 0; w >= 0 && i < n_known; i++)
        if (known[i] == w)
            return w;
    return -1;
}

kace_status kace_sim_jobs_from_sacct(kace_ctx *ctx, const kace_sacct *sacct, const kace_sacct_map *map,
                                     kace_dataset *profiles, const int *known, int n_known, double gpu_mem_gb,
                                     kace_sim_job **jobs, size_t **row,
                                     size_t *n_jobs, int *pool, int *n_pool, int *n_shareable,
                                     kace_sacct_counts *counts)
{
    *jobs = NULL;
    *row = NULL;
    *n_jobs = 0;
    *n_pool = *n_shareable = 0;
    memset(counts, 0, sizeof *counts);
    counts->rows = sacct->n_jobs;
    /* Every mapping rule must name a stored workload: a typo would otherwise
     * turn a whole class of jobs exclusive. */
    for (size_t i = 0; i < kace_sacct_map_n_rules(map); i++) {
        int line;
        const char *w = kace_sacct_map_rule(map, i, &line);
        if (strcmp(w, "-") != 0 && known_workload(profiles, known, n_known, w) < 0)
            return kace_fail(ctx, KACE_ERR_NOT_FOUND,
                             "mapping rule of line %d: '%s' is not a workload the model knows (a stored workload "
                             "with a profile, measured in pairs)", line, w);
    }
    size_t n_out = 0;
    double first = INFINITY;
    for (size_t i = 0; i < sacct->n_jobs; i++) {
        const kace_sacct_job *sj = &sacct->jobs[i];
        if (sj->ran && (sj->gpus > 0 || sj->gpu_shares > 0)) {
            n_out += (size_t)sj->n_nodes;
            first = fmin(first, sj->submit);
        }
    }
    kace_sim_job *out = malloc((n_out ? n_out : 1) * sizeof *out);
    size_t *rows = malloc((n_out ? n_out : 1) * sizeof *rows);
    if (!out || !rows) {
        free(out);
        free(rows);
        return kace_fail(ctx, KACE_ERR_NOMEM, "simulate: out of memory");
    }
    int stand_in = -1;
    int used_index[KACE_SCHED_MAX_WORKLOADS + 1], n_used = 0;
    size_t n = 0;
    kace_status st = KACE_OK;
    for (size_t i = 0; i < sacct->n_jobs; i++) {
        const kace_sacct_job *sj = &sacct->jobs[i];
        if (!sj->ran) {
            counts->not_run++;
            continue;
        }
        if (sj->gpus == 0 && sj->gpu_shares == 0) {
            counts->cpu_only++;
            continue;
        }
        counts->shared_before += sj->gpus == 0;
        int w = -1;
        size_t *by = NULL;
        int r = kace_sacct_map_match(map, sj);
        char tag_workload[KACE_NAME_MAX];
        int share;
        if (r >= 0) {
            const char *name = kace_sacct_map_rule(map, (size_t)r, NULL);
            if (strcmp(name, "-") != 0) {
                w = known_workload(profiles, known, n_known, name);
                by = &counts->by_rule;
            }
        } else if (kace_place_tag_parse(sj->admin_comment, tag_workload, &share) &&
                   (w = known_workload(profiles, known, n_known, tag_workload)) >= 0) {
            by = &counts->by_tag;
        } else if ((w = known_workload(profiles, known, n_known, sj->name)) >= 0) {
            by = &counts->by_name;
        }
        if (w < 0) {
            if ((st = no_workload_index(ctx, profiles, gpu_mem_gb, &stand_in)))
                goto fail;
            w = stand_in;
            by = NULL;
        }
        /* The pool: distinct workloads in order of first use. */
        int slot = 0;
        while (slot < n_used && used_index[slot] != w)
            slot++;
        if (slot == n_used) {
            if (n_used == KACE_SCHED_MAX_WORKLOADS) {
                st = kace_fail(ctx, KACE_ERR_INVALID, "simulate: the jobs run more than %d distinct workloads (line %d)",
                               KACE_SCHED_MAX_WORKLOADS - 1, sj->line);
                goto fail;
            }
            used_index[n_used++] = w;
        }
        int per_node = sj->gpus > 0 ? sj->gpus / sj->n_nodes : 1; /* a GPU share: one GPU */
        counts->multi_node += sj->n_nodes > 1;
        for (int node = 0; node < sj->n_nodes; node++) {
            out[n] = (kace_sim_job){.arrival = sj->submit - first,
                                    .work = fmax(sj->end - sj->start, 1.0),
                                    .workload = w,
                                    .ls = false,
                                    .gpu_milli = 1000,
                                    .num_gpu = per_node};
            rows[n++] = i;
            counts->gangs += per_node > 1;
            if (by)
                (*by)++;
            else
                counts->no_workload++;
            if (!by && r >= 0)
                counts->exclusive_rule++;
            if (!by && !counts->example_unmapped[0])
                snprintf(counts->example_unmapped, sizeof counts->example_unmapped, "%s", sj->name);
        }
    }
    for (int i = 0; i < n_used; i++)
        if (used_index[i] != stand_in)
            pool[(*n_pool)++] = used_index[i];
    *n_shareable = *n_pool;
    if (stand_in >= 0)
        pool[(*n_pool)++] = stand_in;
    counts->replayed = n;
    *jobs = out;
    *row = rows;
    *n_jobs = n;
    return KACE_OK;
fail:
    free(out);
    free(rows);
    return st;
}

kace_status kace_truth_complete(kace_ctx *ctx, const kace_dataset *const *sets, size_t n_sets,
                                const kace_rate_source *rates, const int *pool, int n_pool, int max_group,
                                kace_truth **out, size_t *n_measured, size_t *n_predicted)
{
    *out = NULL;
    *n_measured = *n_predicted = 0;
    if (n_pool < 0 || n_pool > KACE_SCHED_MAX_WORKLOADS || max_group < 1 || max_group > KACE_SCHED_MAX_GROUP)
        return kace_fail(ctx, KACE_ERR_INVALID, "truth: %d workloads and groups up to %d (expected <= %d and 1..%d)",
                         n_pool, max_group, KACE_SCHED_MAX_WORKLOADS, KACE_SCHED_MAX_GROUP);
    kace_truth *measured = NULL, *t = NULL;
    kace_status st = kace_truth_build(ctx, sets, n_sets, &measured);
    if (st)
        return st;
    t = calloc(1, sizeof *t);
    if (!t || (st = kace_group_set_new(ctx, &t->runnable))) {
        st = st ? st : kace_fail(ctx, KACE_ERR_NOMEM, "truth: out of memory");
        goto fail;
    }
    size_t groups = 0; /* tuples with repeats: C(n+k-1, k) for k = 2..3, bounded by n^3 */
    for (int k = 2; k <= max_group; k++) {
        size_t c = 1;
        for (int i = 0; i < k; i++)
            c = c * (size_t)(n_pool + i) / (size_t)(i + 1);
        groups += c;
    }
    t->cap = 64;
    while (t->cap < 2 * groups + 2)
        t->cap *= 2;
    t->slots = calloc(t->cap, sizeof *t->slots);
    if (!t->slots) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "truth: out of memory");
        goto fail;
    }
    for (int k = 2; k <= max_group && n_pool > 0; k++) {
        int ix[KACE_SCHED_MAX_GROUP] = {0, 0, 0};
        for (;;) {
            int g[KACE_SCHED_MAX_GROUP], sorted[KACE_SCHED_MAX_GROUP], perm[KACE_SCHED_MAX_GROUP];
            for (int i = 0; i < k; i++)
                g[i] = pool[ix[i]];
            sort_members(g, k, sorted, perm);
            truth_entry *e = truth_find(t, truth_key(sorted, k));
            if (!e->key) {
                double frac[KACE_SCHED_MAX_GROUP], conf = 1;
                const truth_entry *m = truth_find(measured, truth_key(sorted, k));
                if (m->key) {
                    memcpy(frac, m->fraction, sizeof frac);
                    (*n_measured)++;
                } else {
                    if ((st = rates->rates(rates->self, ctx, sorted, k, frac, &conf)))
                        goto fail;
                    for (int i = 0; i < k; i++)
                        if (!(frac[i] >= 0) || !isfinite(frac[i])) {
                            st = kace_fail(ctx, KACE_ERR_MODEL, "truth: the model predicts %g for a member of a group "
                                           "of %d", frac[i], k);
                            goto fail;
                        }
                    (*n_predicted)++;
                }
                e->key = truth_key(sorted, k);
                e->k = k;
                e->runs = 1;
                bool ok = true;
                for (int i = 0; i < k; i++) {
                    e->fraction[i] = frac[i];
                    ok = ok && frac[i] > 0;
                }
                if (k == 3) {
                    int pairs[3][2] = {{sorted[0], sorted[1]}, {sorted[0], sorted[2]}, {sorted[1], sorted[2]}};
                    for (int p = 0; p < 3 && ok; p++)
                        ok = kace_group_set_has(t->runnable, pairs[p], 2);
                }
                t->n++;
                if (ok && (st = kace_group_set_add(ctx, t->runnable, sorted, k)))
                    goto fail;
            }
            int i = k - 1;
            while (i >= 0 && ix[i] == n_pool - 1)
                i--;
            if (i < 0)
                break;
            ix[i]++;
            for (int j = i + 1; j < k; j++)
                ix[j] = ix[i];
        }
    }
    kace_truth_free(&measured);
    *out = t;
    return KACE_OK;
fail:
    kace_truth_free(&measured);
    kace_truth_free(&t);
    return st;
}

kace_status kace_sim_cluster(kace_ctx *ctx, const kace_node_list *nodes, size_t target_gpus, int **node_gpus,
                             size_t *n_nodes)
{
    *node_gpus = NULL;
    *n_nodes = 0;
    if (nodes->n_gpus == 0)
        return kace_fail(ctx, KACE_ERR_INVALID, "simulate: the node list has no GPU");
    if (target_gpus == 0 || target_gpus > nodes->n_gpus)
        target_gpus = nodes->n_gpus;
    int *out = malloc(nodes->n_nodes * sizeof *out);
    if (!out)
        return kace_fail(ctx, KACE_ERR_NOMEM, "simulate: out of memory");
    /* Walking the list, a node is taken while the GPUs taken so far are
     * behind target/total of the GPUs seen: an even sample of about target
     * GPUs that keeps the list's mix of node sizes. */
    size_t seen = 0, taken = 0, n = 0;
    for (size_t i = 0; i < nodes->n_nodes; i++) {
        seen += (size_t)nodes->nodes[i].n_gpus;
        if (nodes->nodes[i].n_gpus > 0 && taken * nodes->n_gpus < seen * target_gpus) {
            out[n++] = nodes->nodes[i].n_gpus;
            taken += (size_t)nodes->nodes[i].n_gpus;
        }
    }
    *node_gpus = out;
    *n_nodes = n;
    return KACE_OK;
}

static int largest_node(const int *node_gpus, size_t n_nodes)
{
    int most = 0;
    for (size_t i = 0; i < n_nodes; i++)
        if (node_gpus[i] > most)
            most = node_gpus[i];
    return most;
}

kace_status kace_sim_cluster_for(kace_ctx *ctx, const kace_node_list *nodes, size_t target_gpus,
                                 const kace_sim_job *jobs, size_t n_jobs, int **node_gpus, size_t *n_nodes)
{
    kace_status st = kace_sim_cluster(ctx, nodes, target_gpus, node_gpus, n_nodes);
    if (st)
        return st;
    size_t biggest = 0; /* the job asking for the most GPUs */
    for (size_t i = 1; i < n_jobs; i++)
        if (jobs[i].num_gpu > jobs[biggest].num_gpu)
            biggest = i;
    int most = largest_node(*node_gpus, *n_nodes);
    if (n_jobs == 0 || jobs[biggest].num_gpu <= most)
        return KACE_OK;
    /* The smallest target whose even sample takes a node that large: the
     * sample is not monotone in the target, so each one is tried. */
    size_t fits = 0;
    for (size_t t = target_gpus + 1; t <= nodes->n_gpus && !fits; t++) {
        int *trial = NULL;
        size_t n_trial = 0;
        if ((st = kace_sim_cluster(ctx, nodes, t, &trial, &n_trial)))
            break;
        if (largest_node(trial, n_trial) >= jobs[biggest].num_gpu)
            fits = t;
        free(trial);
    }
    int wanted = jobs[biggest].num_gpu;
    free(*node_gpus);
    *node_gpus = NULL;
    *n_nodes = 0;
    if (st)
        return st;
    if (!fits)
        return kace_fail(ctx, KACE_ERR_INVALID,
                         "simulate: GPU job %zu asks for %d GPUs on one node, but no node of the node list has %d",
                         biggest, wanted, wanted);
    return kace_fail(ctx, KACE_ERR_INVALID,
                     "simulate: a cluster of about %zu GPUs sampled from the node list has nodes of at most %d "
                     "GPUs, but GPU job %zu asks for %d on one node, so it could never start (the smallest "
                     "cluster that fits every job is about %zu GPUs)",
                     target_gpus, most, biggest, wanted, fits);
}

/* ---- the replay ---- */

typedef struct event {
    double time;
    int gpu;
    uint32_t version;
} event;

typedef struct sim_job {
    double remaining, rate, last, start, finish;
    bool started;
} sim_job;

typedef struct sim {
    kace_ctx *ctx;
    const kace_sim_config *cfg;
    const kace_dataset *profiles;
    const kace_truth *truth;
    const kace_sim_job *jobs;
    kace_sched *sched;
    sim_job *state;
    uint32_t *version;
    double *gpu_rate;
    double rate_sum;
    event *heap;
    size_t n_heap, cap_heap;
    int *dirty;
    size_t n_dirty, cap_dirty;
    double now;
    kace_status error; /* a failure inside the start callback */
    kace_sim_result *res;
    double job_seconds, shared_seconds;
} sim;

static bool heap_push(sim *S, event e)
{
    if (S->n_heap == S->cap_heap) {
        size_t cap = S->cap_heap ? S->cap_heap * 2 : 1024;
        event *h = realloc(S->heap, cap * sizeof *h);
        if (!h)
            return false;
        S->heap = h;
        S->cap_heap = cap;
    }
    size_t i = S->n_heap++;
    while (i > 0 && S->heap[(i - 1) / 2].time > e.time) {
        S->heap[i] = S->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    S->heap[i] = e;
    return true;
}

static event heap_pop(sim *S)
{
    event top = S->heap[0], last = S->heap[--S->n_heap];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= S->n_heap)
            break;
        if (c + 1 < S->n_heap && S->heap[c + 1].time < S->heap[c].time)
            c++;
        if (S->heap[c].time >= last.time)
            break;
        S->heap[i] = S->heap[c];
        i = c;
    }
    if (S->n_heap)
        S->heap[i] = last;
    return top;
}

static void on_start(void *user, int job_id, const int *gpus, int n)
{
    sim *S = user;
    sim_job *j = &S->state[job_id];
    j->started = true;
    j->start = S->now;
    j->last = S->now;
    j->rate = 0;
    j->remaining = S->jobs[job_id].work;
    S->res->gpu[job_id] = gpus[0];
    if (S->n_dirty == S->cap_dirty) {
        size_t cap = S->cap_dirty ? S->cap_dirty * 2 : 64;
        int *d = realloc(S->dirty, cap * sizeof *d);
        if (!d) {
            S->error = kace_fail(S->ctx, KACE_ERR_NOMEM, "simulate: out of memory");
            return;
        }
        S->dirty = d;
        S->cap_dirty = cap;
    }
    (void)n;
    S->dirty[S->n_dirty++] = gpus[0]; /* a gang is driven by its first GPU */
}

static void settle(sim *S, int id, bool shared)
{
    sim_job *j = &S->state[id];
    double dt = S->now - j->last;
    if (dt > 0) {
        double done = j->rate * dt;
        j->remaining -= done;
        S->res->work_done += done;
        S->job_seconds += dt;
        if (shared)
            S->shared_seconds += dt;
    }
    j->last = S->now;
}

/* The GPU's group changed (or its event came): settle its jobs at their
 * old rates, give them the measured rates of the group now on it, and
 * queue its next completion. */
static kace_status refresh(sim *S, int g)
{
    int ids[KACE_SCHED_MAX_GROUP];
    int k = kace_sched_gpu_jobs(S->sched, g, ids);
    double new_sum = 0;
    if (k > 0) {
        if (k > S->cfg->sched.max_group)
            return kace_fail(S->ctx, KACE_ERR_INVALID, "simulate: %d jobs on GPU %d (limit %d)", k, g,
                             S->cfg->sched.max_group);
        int w[KACE_SCHED_MAX_GROUP];
        double frac[KACE_SCHED_MAX_GROUP], mem = 0;
        for (int i = 0; i < k; i++) {
            w[i] = S->jobs[ids[i]].workload;
            mem += S->profiles->workloads[w[i]].metric[KACE_M_MEMCAP];
            settle(S, ids[i], k > 1);
        }
        if (k > 1 && mem > S->cfg->sched.gpu_mem_gb + 1e-9)
            return kace_fail(S->ctx, KACE_ERR_INVALID, "simulate: GPU %d holds %.1f GB of jobs (it has %.1f GB)", g,
                             mem, S->cfg->sched.gpu_mem_gb);
        if (k > S->res->max_group)
            S->res->max_group = k;
        if (k > 1 && mem > S->res->max_mem_gb)
            S->res->max_mem_gb = mem;
        kace_status st = kace_truth_rates(S->ctx, S->truth, w, k, frac);
        if (st)
            return st;
        double next = INFINITY;
        for (int i = 0; i < k; i++) {
            sim_job *j = &S->state[ids[i]];
            j->rate = frac[i];
            new_sum += frac[i] * S->jobs[ids[i]].num_gpu; /* a gang keeps all its GPUs busy */
            if (frac[i] > 0)
                next = fmin(next, S->now + fmax(j->remaining, 0) / frac[i]);
        }
        S->version[g]++;
        if (isfinite(next) && !heap_push(S, (event){next, g, S->version[g]}))
            return kace_fail(S->ctx, KACE_ERR_NOMEM, "simulate: out of memory");
    } else {
        S->version[g]++;
    }
    S->rate_sum += new_sum - S->gpu_rate[g];
    S->gpu_rate[g] = new_sum;
    return KACE_OK;
}

static kace_status refresh_dirty(sim *S)
{
    if (S->error)
        return S->error;
    for (size_t i = 0; i < S->n_dirty; i++) {
        kace_status st = refresh(S, S->dirty[i]);
        if (st)
            return st;
    }
    S->n_dirty = 0;
    return KACE_OK;
}

static double seconds_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct arrival_order {
    double arrival;
    size_t index;
} arrival_order;

static int cmp_arrival(const void *a, const void *b)
{
    const arrival_order *x = a, *y = b;
    if (x->arrival != y->arrival)
        return x->arrival < y->arrival ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

static bool record(sim *S, size_t *cap)
{
    kace_sim_result *r = S->res;
    if (!S->cfg->record_timeline)
        return true;
    if (r->n_samples == *cap) {
        size_t c = *cap ? *cap * 2 : 1024;
        kace_sim_sample *p = realloc(r->samples, c * sizeof *p);
        if (!p)
            return false;
        r->samples = p;
        *cap = c;
    }
    r->samples[r->n_samples++] = (kace_sim_sample){S->now, (int)kace_sched_n_busy(S->sched),
                                                   (int)kace_sched_n_queued(S->sched), S->rate_sum};
    return true;
}

void kace_sim_result_free(kace_sim_result **r)
{
    if (!r || !*r)
        return;
    free((*r)->start);
    free((*r)->finish);
    free((*r)->completions);
    free((*r)->gpu);
    free((*r)->submit_seconds);
    free((*r)->samples);
    free(*r);
    *r = NULL;
}

static void summarize(kace_sim_result *r, const kace_sim_job *jobs, size_t n, double ls_target, double first,
                      double *scratch)
{
    double sum_jct = 0, sum_q = 0, last = first;
    for (size_t i = 0; i < n; i++) {
        double jct = r->finish[i] - jobs[i].arrival;
        sum_jct += jct;
        sum_q += r->start[i] - jobs[i].arrival;
        last = fmax(last, r->finish[i]);
        if (jobs[i].ls) {
            r->n_ls++;
            /* The speed the job saw over its run, as a fraction of exclusive. */
            double speed = jobs[i].work / fmax(r->finish[i] - r->start[i], 1e-12);
            r->n_ls_met += speed >= ls_target - 1e-9;
        }
        scratch[i] = jct;
    }
    r->mean_jct = n ? sum_jct / (double)n : 0;
    r->mean_queue = n ? sum_q / (double)n : 0;
    qsort(scratch, n, sizeof *scratch, cmp_double);
    r->p95_jct = n ? scratch[(size_t)ceil(0.95 * (double)n) - 1] : 0;
    for (size_t i = 0; i < n; i++)
        scratch[i] = r->start[i] - jobs[i].arrival;
    qsort(scratch, n, sizeof *scratch, cmp_double);
    r->p95_queue = n ? scratch[(size_t)ceil(0.95 * (double)n) - 1] : 0;
    double sum_slow = 0;
    for (size_t i = 0; i < n; i++) {
        scratch[i] = (r->finish[i] - r->start[i]) / jobs[i].work;
        sum_slow += scratch[i];
    }
    r->mean_slowdown = n ? sum_slow / (double)n : 0;
    qsort(scratch, n, sizeof *scratch, cmp_double);
    r->p95_slowdown = n ? scratch[(size_t)ceil(0.95 * (double)n) - 1] : 0;
    r->makespan = last - first;
    r->jobs_per_hour = r->makespan > 0 ? (double)r->n_completed / (r->makespan / 3600.0) : 0;
}

kace_status kace_sim_run(kace_ctx *ctx, const kace_sim_config *cfg, const kace_dataset *profiles,
                         const kace_truth *truth, const int *pool, int n_pool, const kace_rate_source *rates,
                         const int *node_gpus, size_t n_nodes, const kace_sim_job *jobs, size_t n_jobs,
                         kace_sim_result **out)
{
    *out = NULL;
    if (profiles->n_colocations != 0)
        return kace_fail(ctx, KACE_ERR_INVALID,
                         "simulate: the policy's profiles hold %zu measured colocations; policies may see profiles "
                         "only (use kace_dataset_profiles_only)",
                         profiles->n_colocations);
    for (size_t i = 0; i < n_jobs; i++)
        if (!(jobs[i].arrival >= 0) || !isfinite(jobs[i].arrival) || !(jobs[i].work > 0) || !isfinite(jobs[i].work))
            return kace_fail(ctx, KACE_ERR_INVALID, "simulate: job %zu has arrival %g and work %g (expected >= 0, > 0)",
                             i, jobs[i].arrival, jobs[i].work);
    sim S;
    memset(&S, 0, sizeof S);
    S.ctx = ctx;
    S.cfg = cfg;
    S.profiles = profiles;
    S.truth = truth;
    S.jobs = jobs;
    kace_rate_source truth_rates;
    kace_truth_rate_source(truth, &truth_rates);
    const kace_rate_source *policy_rates = cfg->sched.policy == KACE_SCHED_ORACLE ? &truth_rates : rates;
    arrival_order *order = malloc((n_jobs ? n_jobs : 1) * sizeof *order);
    double *scratch = malloc((n_jobs ? n_jobs : 1) * sizeof *scratch);
    size_t cap_samples = 0;
    S.res = calloc(1, sizeof *S.res);
    S.state = calloc(n_jobs ? n_jobs : 1, sizeof *S.state);
    kace_status st = KACE_OK;
    if (!order || !scratch || !S.res || !S.state) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "simulate: out of memory for %zu jobs", n_jobs);
        goto done;
    }
    kace_sim_result *r = S.res;
    r->n_jobs = n_jobs;
    r->start = calloc(n_jobs ? n_jobs : 1, sizeof *r->start);
    r->finish = calloc(n_jobs ? n_jobs : 1, sizeof *r->finish);
    r->completions = calloc(n_jobs ? n_jobs : 1, sizeof *r->completions);
    r->gpu = calloc(n_jobs ? n_jobs : 1, sizeof *r->gpu);
    if (cfg->record_latency)
        r->submit_seconds = calloc(n_jobs ? n_jobs : 1, sizeof *r->submit_seconds);
    if (!r->start || !r->finish || !r->completions || !r->gpu || (cfg->record_latency && !r->submit_seconds)) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "simulate: out of memory for %zu jobs", n_jobs);
        goto done;
    }
    if ((st = kace_sched_new(ctx, &cfg->sched, profiles, pool, n_pool, kace_truth_runnable(truth), policy_rates,
                             node_gpus, n_nodes, on_start, &S, &S.sched)))
        goto done;
    size_t n_gpus = kace_sched_n_gpus(S.sched);
    S.version = calloc(n_gpus, sizeof *S.version);
    S.gpu_rate = calloc(n_gpus, sizeof *S.gpu_rate);
    if (!S.version || !S.gpu_rate) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "simulate: out of memory");
        goto done;
    }
    double gpu_work = 0;
    for (size_t i = 0; i < n_jobs; i++) {
        order[i] = (arrival_order){jobs[i].arrival, i};
        r->work_total += jobs[i].work;
        gpu_work += jobs[i].work * jobs[i].num_gpu;
    }
    qsort(order, n_jobs, sizeof *order, cmp_arrival);
    double first = n_jobs ? order[0].arrival : 0, gpu_seconds = 0;
    S.now = first;
    size_t next = 0;
    kace_meter_begin(ctx, "replaying", "jobs", (double)n_jobs);
    for (;;) {
        while (S.n_heap && S.heap[0].version != S.version[S.heap[0].gpu])
            heap_pop(&S);
        double t_arrival = next < n_jobs ? order[next].arrival : INFINITY;
        double t_event = S.n_heap ? S.heap[0].time : INFINITY;
        if (!isfinite(t_arrival) && !isfinite(t_event))
            break;
        double t = fmin(t_arrival, t_event);
        gpu_seconds += (double)kace_sched_n_busy(S.sched) * (t - S.now);
        S.now = t;
        double t0 = seconds_now();
        if (t_arrival <= t_event) {
            size_t id = order[next++].index;
            kace_sched_job sj = {(int)id, jobs[id].workload, jobs[id].ls, jobs[id].gpu_milli, jobs[id].num_gpu};
            st = kace_sched_submit(ctx, S.sched, &sj);
            double took = seconds_now() - t0;
            r->decide_seconds += took;
            if (r->submit_seconds)
                r->submit_seconds[id] = (float)took;
            if (st || (st = refresh_dirty(&S)))
                goto done;
        } else {
            event e = heap_pop(&S);
            int ids[KACE_SCHED_MAX_GROUP];
            int k = kace_sched_gpu_jobs(S.sched, e.gpu, ids);
            for (int i = 0; i < k; i++)
                settle(&S, ids[i], k > 1);
            int done_ids[KACE_SCHED_MAX_GROUP], n_done = 0;
            for (int i = 0; i < k; i++) {
                const sim_job *j = &S.state[ids[i]];
                /* Done when nothing is left, up to rounding: also when what is
                 * left would finish within the clock's resolution at this time
                 * (else its next event lands on now and the replay never moves). */
                double resolution = 4 * DBL_EPSILON * fabs(S.now) * j->rate;
                if (j->remaining <= fmax(1e-9 * fmax(1.0, jobs[ids[i]].work), resolution))
                    done_ids[n_done++] = ids[i];
            }
            for (int i = 0; i < n_done; i++) {
                sim_job *j = &S.state[done_ids[i]];
                r->work_done += j->remaining; /* rounding left over, bounded above */
                j->remaining = 0;
                j->rate = 0;
                j->finish = S.now;
                r->finish[done_ids[i]] = S.now;
                r->start[done_ids[i]] = j->start;
                r->completions[done_ids[i]]++;
                r->n_completed++;
                kace_meter_to(ctx, (double)r->n_completed);
                t0 = seconds_now();
                st = kace_sched_finish(ctx, S.sched, done_ids[i]);
                r->decide_seconds += seconds_now() - t0;
                if (st)
                    goto done;
            }
            if ((st = refresh(&S, e.gpu)) || (st = refresh_dirty(&S)))
                goto done;
        }
        if (!record(&S, &cap_samples)) {
            st = kace_fail(ctx, KACE_ERR_NOMEM, "simulate: out of memory");
            goto done;
        }
    }
    if (r->n_completed != n_jobs) {
        st = kace_fail(ctx, KACE_ERR_INVALID, "simulate: %zu of %zu jobs never completed (%zu still queued)",
                       n_jobs - r->n_completed, n_jobs, kace_sched_n_queued(S.sched));
        goto done;
    }
    r->gpu_hours = gpu_seconds / 3600.0;
    r->efficiency = gpu_seconds > 0 ? gpu_work / gpu_seconds : 0;
    r->shared_fraction = S.job_seconds > 0 ? S.shared_seconds / S.job_seconds : 0;
    summarize(r, jobs, n_jobs, cfg->sched.ls_target, first, scratch);
done:
    kace_meter_end(ctx);
    kace_sched_free(&S.sched);
    free(S.version);
    free(S.gpu_rate);
    free(S.heap);
    free(S.dirty);
    free(S.state);
    free(order);
    free(scratch);
    if (st)
        kace_sim_result_free(&S.res);
    *out = S.res;
    return st;
}

/* ---- threshold tuning ---- */

kace_status kace_sim_tune(kace_ctx *ctx, const kace_sched_config *base, const kace_dataset *profiles,
                          const kace_truth *truth, const int *pool, int n_pool, const kace_rate_source *rates,
                          const kace_tune_cell *cells, size_t n_cells, kace_tune_point points[KACE_TUNE_N_POINTS],
                          double *jct, size_t *best)
{
    static const double gains[] = {0, 0.05, 0.1, 0.2};
    static const double confidences[] = {0, 0.3, 0.6, 0.8};
    static const double queues[] = {-1, 0, 0.5, 2}; /* jobs waiting per GPU; -1: never overloaded */
    static const bool reserves[] = {false, true};
    enum { N_GAINS = 4, N_CONFIDENCES = 4, N_QUEUES = 4, N_RESERVES = 2 };
    *best = 0;
    if (n_cells < 1)
        return kace_fail(ctx, KACE_ERR_INVALID, "tuning needs at least one cell (a pod list on a cluster)");
    double best_score = INFINITY;
    for (size_t point = 0; point < KACE_TUNE_N_POINTS; point++) {
        kace_tune_point *t = &points[point];
        t->min_gain = gains[point / (N_CONFIDENCES * N_QUEUES * N_RESERVES)];
        t->min_confidence = confidences[point / (N_QUEUES * N_RESERVES) % N_CONFIDENCES];
        t->overload_queue = queues[point / N_RESERVES % N_QUEUES];
        t->reserve = reserves[point % N_RESERVES];
        kace_sim_config cfg = {.sched = *base, .record_timeline = false};
        cfg.sched.policy = KACE_SCHED_KACE;
        cfg.sched.min_gain = t->min_gain;
        cfg.sched.min_confidence = t->min_confidence;
        cfg.sched.overload_queue = t->overload_queue;
        cfg.sched.reserve = t->reserve;
        double log_sum = 0;
        for (size_t i = 0; i < n_cells; i++) {
            kace_sim_result *r = NULL;
            kace_status st = kace_sim_run(ctx, &cfg, profiles, truth, pool, n_pool, rates, cells[i].node_gpus,
                                          cells[i].n_nodes, cells[i].jobs, cells[i].n_jobs, &r);
            if (st)
                return st;
            double h = r->mean_jct / 3600;
            if (jct)
                jct[point * n_cells + i] = h;
            log_sum += log(h);
            kace_sim_result_free(&r);
        }
        t->geomean_jct_h = exp(log_sum / (double)n_cells);
        if (t->geomean_jct_h < best_score) {
            best_score = t->geomean_jct_h;
            *best = point;
        }
    }
    return KACE_OK;
}
