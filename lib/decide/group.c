/* Best k-way group around a target: branch and bound over the slowdown
 * model, and plain enumeration as its reference.
 *
 * The bound. The slowdown model predicts each member's throughput from its
 * own profile and the SUM of its partners' profile metrics, through
 * features that never decrease when a partner sum grows. So if every
 * partner sum of a member lies in a box [lo, hi], the member's prediction
 * is at most what the model can reach inside that box: ridge part at the
 * box's best corner, tree part as the best reachable leaf of each tree
 * (kace_slowdown_member_upper). For a partial group S with r slots left,
 * drawn from the candidates after position i in search order:
 *  - a member of S has partners S minus itself plus r unknown jobs, so its
 *    partner sums lie in [sum + r * min, sum + r * max], min and max taken
 *    over those remaining candidates (suffix minima and maxima);
 *  - a job still to be chosen is bounded by u_c: its prediction with
 *    partners "target plus k-2 arbitrary pool jobs", computed once per
 *    query. Candidates are searched in decreasing u_c, so the best r
 *    remaining jobs contribute at most u[i] + ... + u[i+r-1].
 * The sum of these is an upper bound on every completion of S; a subtree
 * whose bound is below the incumbent is cut. Memory: the partial group's
 * memcap plus the r smallest remaining memcaps must fit.
 * Because candidates are sorted by u_c, once u[i..i+r-1] plus the S bound
 * (taken over the widest box, from the first remaining candidate) is below
 * the incumbent, every later candidate is too: the loop stops.
 * The last slot is scored chunk by chunk (16 similar candidates each): a
 * chunk whose metric box (of its candidates still open) bounds the partial
 * group below the incumbent is skipped whole, and a job is scored only if
 * the chunk's bound plus its own bound with the partial group as its
 * (known) partners still reaches the incumbent, and then the members'
 * ridge parts at their now known partner sums (nearly exact) do too. For
 * k = 2 every pair is simply scored (cheaper).
 * Cost: a member bound's tree part costs ~10x its ridge part and barely
 * tightens as the box shrinks, so tests first blend the ridge part over
 * the box with a tree part already computed over an enclosing box (the
 * node's members', the candidates' from the root), and compute tree parts
 * member by member only while the bound still reaches the incumbent, and
 * only at nodes with two or more open slots (below, the chunks' ridge
 * parts and the point test above cut for less); only the target's trees
 * are prepared for it, the candidates' are walked as the model has them.
 * A chunk's test starts
 * from the node's member bounds and replaces them one by one, largest
 * first, while it does not cut. A greedy group, improved by swaps and
 * scored before the search, gives the first incumbent. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "group_internal.h"
#include "model/bounds.h"

#define CHUNK 16
#define GREEDY_POOL 64

typedef struct candidate {
    int pos;      /* position in the caller's pool (tie order) */
    int workload; /* index into the dataset */
    double upper; /* u_c */
    double upper_trees; /* its tree part */
    double memcap;
    kace_member_bound *bound; /* prepared member bound (ridge part only) */
} candidate;

typedef struct search {
    const kace_dataset *ds;
    const kace_predictor *p;
    const kace_bound_ops *b; /* the predictor's bounds */
    const kace_group_query *q;
    kace_ctx *ctx;
    int k;
    double capacity;
    const kace_metric *metric; /* the model's metrics */
    int n_metric;
    candidate *cand;           /* in search order */
    size_t n;
    double *suf_min, *suf_max; /* (n + 1) x n_metric, over cand[i..n) */
    double *suf_min_mem;       /* n + 1 */
    double *u, *ut;            /* n: u_c in search order, and its tree part */
    double *v, *vt;            /* k x n: candidate bounds at each depth, and their tree parts */
    double *top;               /* k x (n + 1) x KACE_GROUP_MAX_K: suffix_top at each depth */
    /* The last slot is searched by chunks of CHUNK similar candidates
     * (similar_chunks): a chunk's metric box gives a far tighter bound on
     * the partial group than the whole suffix does. */
    size_t *sim;                   /* search positions, chunk after chunk */
    /* Per entry e of sim[]: the metric box of its chunk's entries from e
     * on (n x n_metric); each chunk's entries are in search order, so the
     * candidates of a chunk still open at a node are a suffix of it. */
    double *chunk_min, *chunk_max;
    double *chunk_vmax;            /* n_chunks: scratch for last_slot */
    size_t *chunk_order;
    /* Tree part of each member's bound at the current node of each depth
     * (members_bound): valid for any narrower box. */
    double node_trees[KACE_GROUP_MAX_K][KACE_GROUP_MAX_K];
    /* Each member's whole bound at the current node of each depth. */
    double node_member[KACE_GROUP_MAX_K][KACE_GROUP_MAX_K];
    /* The partial group: target at 0, then chosen candidates. */
    int chosen[KACE_GROUP_MAX_K];
    const kace_member_bound *chosen_bound[KACE_GROUP_MAX_K];
    kace_member_bound *bounds; /* one per distinct workload */
    size_t n_bounds;
    int depth;
    /* Metric sums at each depth (node_sums): each member's partners', and
     * the whole partial group's. */
    double partners[KACE_GROUP_MAX_K][KACE_GROUP_MAX_K][KACE_N_METRICS];
    double total[KACE_GROUP_MAX_K][KACE_N_METRICS];
    /* Scratch boxes of partner sums for members_bound*: only the model's
     * metrics are written, the rest stay 0 (zeroed once, not per call). */
    double box_lo[KACE_GROUP_MAX_K][KACE_N_METRICS], box_hi[KACE_GROUP_MAX_K][KACE_N_METRICS];
    /* The same for one box at a time: [1] for last_slot's own, [0] for
     * the bounds it and descend call (zeroing a box per call cost more
     * than filling it). */
    double one_lo[2][KACE_N_METRICS], one_hi[2][KACE_N_METRICS];
    /* For the last slot, per chunk: its entries of sim[] in search order,
     * and over each suffix of them the largest candidate bound of the
     * level that calls last_slot (chunk_suffix_max, set per such level). */
    double *chunk_sufmax;
    kace_group_result *best;
    double bar; /* the incumbent's prediction (-INFINITY: none yet) */
    int best_pos[KACE_GROUP_MAX_K]; /* sorted pool positions of the best group */
    kace_status st;
} search;

static bool profile_complete(const kace_dataset *ds, int w, const kace_metric *metric, int n_metric)
{
    for (int i = 0; i < n_metric; i++)
        if (isnan(ds->workloads[w].metric[metric[i]]))
            return false;
    return ds->workloads[w].metric[KACE_M_EXCLUSIVE] > 0;
}

static int by_position(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* True when sorted positions a come before b (lexicographic). */
static bool positions_before(const int *a, const int *b, int n)
{
    for (int i = 0; i < n; i++)
        if (a[i] != b[i])
            return a[i] < b[i];
    return false;
}

/* Scores one complete group (partners given by sorted pool positions) and
 * keeps it when it beats the best: higher prediction, or equal prediction
 * and partners earlier in the pool. Both searches score a group in the same
 * member order, so they compute the same number. */
kace_status kace_group_consider(kace_ctx *ctx, const kace_dataset *ds, const kace_predictor *p, const kace_group_query *q,
                                const int *pool, int *pos, int k, double capacity, kace_group_result *best,
                                int *best_pos)
{
    qsort(pos, (size_t)(k - 1), sizeof *pos, by_position);
    int group[KACE_GROUP_MAX_K];
    group[0] = q->target;
    double mem = ds->workloads[q->target].metric[KACE_M_MEMCAP];
    for (int i = 1; i < k; i++) {
        group[i] = pool[pos[i - 1]];
        mem += ds->workloads[group[i]].metric[KACE_M_MEMCAP];
    }
    if (!(mem <= capacity))
        return KACE_OK;
    if (q->filter && !q->filter(q->filter_user, group, k))
        return KACE_OK;
    double sum, member[KACE_GROUP_MAX_K];
    kace_status st;
    best->groups_scored++;
    if ((st = q->objective == KACE_OBJ_RAW ? kace_predict_group(ctx, p, ds, group, k, &sum, NULL, member)
                                           : kace_predict_objective(ctx, p, ds, group, k, q->objective, &sum, NULL,
                                                                    member)))
        return st;
    if (best->found && !(sum > best->predicted) &&
        !(sum == best->predicted && positions_before(pos, best_pos, k - 1)))
        return KACE_OK;
    best->found = true;
    best->predicted = sum;
    best->memcap_gb = mem;
    for (int i = 0; i < k; i++) {
        best->workload[i] = group[i];
        best->member[i] = member[i];
    }
    memcpy(best_pos, pos, (size_t)(k - 1) * sizeof *pos);
    return KACE_OK;
}

/* The default pool and argument checks shared by both searches. *own_pool
 * is set when the pool was built here (the caller frees it). */
static kace_status prepare(kace_ctx *ctx, const kace_dataset *ds, const kace_predictor *p, const kace_group_query *q,
                           const int **pool, size_t *n_pool, int **own_pool, double *capacity)
{
    *own_pool = NULL;
    if (!ds || !p || !q)
        return kace_fail(ctx, KACE_ERR_INVALID, "group search: missing dataset, model or query");
    if (q->k < 2 || q->k > KACE_GROUP_MAX_K)
        return kace_fail(ctx, KACE_ERR_INVALID, "a group has 2..%d workloads, not %d", KACE_GROUP_MAX_K, q->k);
    if (q->target < 0 || (size_t)q->target >= ds->n_workloads)
        return kace_fail(ctx, KACE_ERR_NOT_FOUND, "group search: unknown target workload");
    if (q->gpu_memory_gb < 0 || isnan(q->gpu_memory_gb))
        return kace_fail(ctx, KACE_ERR_INVALID, "GPU memory must be a positive number of GB");
    *capacity = q->gpu_memory_gb > 0 ? q->gpu_memory_gb : KACE_GPU_MEMORY_V100_GB;
    if ((int)q->objective < 0 || q->objective >= KACE_N_OBJECTIVES)
        return kace_fail(ctx, KACE_ERR_INVALID, "group search: unknown objective %d", (int)q->objective);
    /* The profile metrics the model reads: those of its metric set. */
    int n_all;
    const kace_metric *all_metric = kace_profile_metrics(&n_all);
    const kace_feature_set *fs = kace_predictor_features(p);
    kace_metric metric[KACE_N_METRICS];
    int n_metric = 0;
    for (int i = 0; i < n_all; i++)
        for (int j = 0; j < fs->n; j++)
            if (fs->metric[j] == all_metric[i]) {
                metric[n_metric++] = all_metric[i];
                break;
            }
    if (!profile_complete(ds, q->target, metric, n_metric))
        return kace_fail(ctx, KACE_ERR_INVALID, "target '%s' has no complete profile (needs %s, sm%%, mem%%, the "
                                                "Nsight throughputs, Threads and memcap)",
                         ds->workloads[q->target].name, kace_metric_name(KACE_M_EXCLUSIVE));
    if (q->pool) {
        for (size_t i = 0; i < q->n_pool; i++) {
            int w = q->pool[i];
            if (w < 0 || (size_t)w >= ds->n_workloads)
                return kace_fail(ctx, KACE_ERR_NOT_FOUND, "pool entry %zu is not a workload of the dataset", i);
            if (!profile_complete(ds, w, metric, n_metric))
                return kace_fail(ctx, KACE_ERR_INVALID, "pool workload '%s' has no complete profile",
                                 ds->workloads[w].name);
        }
        *pool = q->pool;
        *n_pool = q->n_pool;
        return KACE_OK;
    }
    int *all = malloc((ds->n_workloads ? ds->n_workloads : 1) * sizeof *all);
    if (!all)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    size_t n = 0;
    for (size_t w = 0; w < ds->n_workloads; w++)
        if ((int)w != q->target && profile_complete(ds, (int)w, metric, n_metric))
            all[n++] = (int)w;
    *own_pool = all;
    *pool = all;
    *n_pool = n;
    return KACE_OK;
}

static void result_reset(kace_group_result *out, int k)
{
    memset(out, 0, sizeof *out);
    out->k = k;
    out->predicted = NAN;
}

kace_status kace_group_enumerate(kace_ctx *ctx, const kace_dataset *ds, const kace_predictor *p,
                                 const kace_group_query *q, kace_group_result *out)
{
    const int *pool;
    size_t n;
    int *own = NULL;
    double capacity;
    if (out)
        result_reset(out, q ? q->k : 0);
    kace_status st = prepare(ctx, ds, p, q, &pool, &n, &own, &capacity);
    if (st)
        return st;
    int r = q->k - 1, idx[KACE_GROUP_MAX_K], pos[KACE_GROUP_MAX_K], best_pos[KACE_GROUP_MAX_K];
    if ((size_t)r <= n) {
        for (int i = 0; i < r; i++)
            idx[i] = i;
        for (;;) { /* combinations in lexicographic order */
            memcpy(pos, idx, sizeof idx);
            if ((st = kace_group_consider(ctx, ds, p, q, pool, pos, q->k, capacity, out, best_pos)))
                break;
            int i = r - 1;
            while (i >= 0 && idx[i] == (int)n - r + i)
                i--;
            if (i < 0)
                break;
            idx[i]++;
            for (int j = i + 1; j < r; j++)
                idx[j] = idx[j - 1] + 1;
        }
    }
    free(own);
    return st;
}

/* The box of partner sums of a member whose known partners sum to known[]
 * and which still gets r partners from candidates s.cand[from..) (widened
 * for rounding: the prediction sums in another order). */
static void suffix_box(const search *s, const double *known, int r, size_t from, double *lo, double *hi)
{
    for (int i = 0; i < s->n_metric; i++) {
        kace_metric mt = s->metric[i];
        lo[mt] = (known[i] + r * s->suf_min[from * (size_t)s->n_metric + (size_t)i]) * (1 - 1e-12);
        hi[mt] = (known[i] + r * s->suf_max[from * (size_t)s->n_metric + (size_t)i]) * (1 + 1e-12);
    }
}

/* Upper bound on member `who` when its partner sums lie in [lo, hi]: its
 * ridge part over the box, blended with `trees`, a bound on its tree part
 * over a box that contains this one. The tree part costs most and loosens
 * little with the box, so this cheap bound cuts most of what the full one
 * would. */
static double cheap_bound(const search *s, const kace_member_bound *who, const double *lo, const double *hi,
                          double trees)
{
    return s->b->ridge_blend(s->p, who, lo, hi, trees);
}

/* Fills the partial group's metric sums for the current depth from the
 * parent's: each member's partners' (the old members' plus the new one,
 * the new member's the parent's whole group; sums of a few nonnegative
 * terms in another order than the prediction's, which the bounds' 1e-12
 * widening covers) and the whole group's. */
static void node_sums(search *s)
{
    int d = s->depth;
    const double *x = s->ds->workloads[s->chosen[d]].metric;
    for (int i = 0; i < s->n_metric; i++) {
        double v = x[s->metric[i]];
        if (d == 0) {
            s->partners[0][0][i] = 0;
            s->total[0][i] = v;
            continue;
        }
        for (int j = 0; j < d; j++)
            s->partners[d][j][i] = s->partners[d - 1][j][i] + v;
        s->partners[d][d][i] = s->total[d - 1][i];
        s->total[d][i] = s->total[d - 1][i] + v;
    }
}

/* Worse than the incumbent: strictly below it (a tie may still win on
 * pool order, so it is explored). */
static bool cut(const search *s, double bound)
{
    return bound < s->bar;
}

/* Scores a complete group of the search (consider) and keeps s->bar. */
static void score(search *s, int *pos)
{
    s->st = kace_group_consider(s->ctx, s->ds, s->p, s->q, s->q->pool, pos, s->k, s->capacity, s->best, s->best_pos);
    if (s->best->found)
        s->bar = s->best->predicted;
}

/* Bound on the partial group's members, member j's partner sums in
 * [lo[j], hi[j]]. First the ridge parts with tree parts trees[j], bounded
 * over boxes containing these (cheap); then, while the bound plus `extra`
 * still reaches the incumbent, member by member (largest first) with tree
 * parts over their own boxes, kept in trees[]. *all_trees tells whether
 * every member got its own. */
static double members_bound_staged(search *s, double (*lo)[KACE_N_METRICS], double (*hi)[KACE_N_METRICS],
                                   double *trees, double extra, bool with_trees, bool *all_trees)
{
    int n = s->depth + 1, order[KACE_GROUP_MAX_K];
    double ridge[KACE_GROUP_MAX_K], b[KACE_GROUP_MAX_K], bound = 0;
    for (int j = 0; j < n; j++) {
        ridge[j] = s->b->ridge(s->p, s->chosen_bound[j], lo[j], hi[j]);
        b[j] = s->b->blend(s->p, ridge[j], trees[j]);
        bound += b[j];
        int at = j;
        for (; at > 0 && b[order[at - 1]] < b[j]; at--)
            order[at] = order[at - 1];
        order[at] = j;
    }
    s->best->nodes_bounded++;
    *all_trees = false;
    for (int o = 0; with_trees && o < n && !cut(s, bound + extra); o++) {
        int j = order[o];
        /* The target's trees are prepared (it is in every group); a
         * candidate's are walked as the model has them (preparing them
         * cost more than the few bounds they tighten). */
        double t = j ? s->b->trees_unprepared(s->p, s->chosen_bound[j], lo[j], hi[j])
                     : s->b->trees(s->p, s->chosen_bound[j], lo[j], hi[j]);
        if (t < trees[j])
            trees[j] = t;
        b[j] = s->b->blend(s->p, ridge[j], trees[j]);
        bound = 0;
        for (int i = 0; i < n; i++)
            bound += b[i];
        *all_trees = o == n - 1;
    }
    memcpy(s->node_member[s->depth], b, (size_t)n * sizeof *b);
    return bound;
}

/* Bound on the partial group's own members when each gets exactly one more
 * partner whose metrics lie in [lo_box, hi_box] (per model metric): their
 * node's bounds (over a box that contains this one), each replaced by its
 * ridge part over this box with the node's tree part, member by member
 * (in `order`: largest node bound first) while the bound plus `extra` still reaches the
 * incumbent. No tree parts: over one open slot they cost more than they
 * cut. */
static double members_bound_box(search *s, const double *lo_box, const double *hi_box, const int *order, double extra)
{
    int n = s->depth + 1;
    const double *node = s->node_member[s->depth];
    double b[KACE_GROUP_MAX_K], bound = 0;
    for (int j = 0; j < n; j++) {
        b[j] = node[j];
        bound += b[j];
    }
    s->best->nodes_bounded++;
    double *lo = s->one_lo[0], *hi = s->one_hi[0];
    for (int o = 0; o < n && !cut(s, bound + extra); o++) {
        int j = order[o];
        const double *known = s->partners[s->depth][j];
        for (int i = 0; i < s->n_metric; i++) {
            lo[s->metric[i]] = (known[i] + lo_box[i]) * (1 - 1e-12);
            hi[s->metric[i]] = (known[i] + hi_box[i]) * (1 + 1e-12);
        }
        double t = cheap_bound(s, s->chosen_bound[j], lo, hi, s->node_trees[s->depth][j]);
        if (t < b[j]) {
            b[j] = t;
            bound = 0;
            for (int m = 0; m < n; m++)
                bound += b[m];
        }
    }
    return bound;
}

/* members_bound for a node with one open slot, from the members' bounds
 * prior[] over boxes that contain theirs (the parent node's, and the new
 * member's candidate bound): each is replaced by its ridge part over its
 * own box, with tree part trees[j], member by member (largest first) while
 * the bound plus `extra` still reaches the incumbent. */
static double members_bound_last(search *s, size_t from, const double *trees, const double *prior, double extra)
{
    int n = s->depth + 1, order[KACE_GROUP_MAX_K];
    double *b = s->node_member[s->depth], *t = s->node_trees[s->depth], bound = 0;
    for (int j = 0; j < n; j++) {
        b[j] = prior[j];
        t[j] = trees[j];
        bound += b[j];
        int at = j;
        for (; at > 0 && prior[order[at - 1]] < prior[j]; at--)
            order[at] = order[at - 1];
        order[at] = j;
    }
    s->best->nodes_bounded++;
    double *lo = s->one_lo[0], *hi = s->one_hi[0];
    for (int o = 0; o < n && !cut(s, bound + extra); o++) {
        int j = order[o];
        suffix_box(s, s->partners[s->depth][j], 1, from, lo, hi);
        double x = cheap_bound(s, s->chosen_bound[j], lo, hi, t[j]);
        if (x < b[j]) {
            b[j] = x;
            bound = 0;
            for (int m = 0; m < n; m++)
                bound += b[m];
        }
    }
    return bound;
}

/* Bound on the partial group's own members when the last member is
 * workload w: their ridge parts at their (now known) partner sums, where
 * the ridge bound is nearly exact, with tree parts trees[] from a box that
 * contains w. Before a group is scored: the chunk's box is far looser. */
static double members_bound_point(search *s, int w, const double *trees)
{
    const double *x = s->ds->workloads[w].metric;
    double (*lo)[KACE_N_METRICS] = s->box_lo, (*hi)[KACE_N_METRICS] = s->box_hi, bound = 0;
    for (int j = 0; j <= s->depth; j++) {
        const double *known = s->partners[s->depth][j];
        for (int i = 0; i < s->n_metric; i++) {
            kace_metric mt = s->metric[i];
            lo[j][mt] = (known[i] + x[mt]) * (1 - 1e-12);
            hi[j][mt] = (known[i] + x[mt]) * (1 + 1e-12);
        }
        bound += cheap_bound(s, s->chosen_bound[j], lo[j], hi[j], trees[j]);
    }
    return bound;
}

/* Bound on the partial group's own members when each still gets r partners
 * from cand[from..), starting from tree parts trees[] (see
 * members_bound_staged). *all_trees: the node's tree parts are set. */
static double members_bound(search *s, int r, size_t from, const double *trees, double extra, bool *all_trees)
{
    double (*lo)[KACE_N_METRICS] = s->box_lo, (*hi)[KACE_N_METRICS] = s->box_hi;
    double *t = s->node_trees[s->depth];
    for (int j = 0; j <= s->depth; j++) {
        suffix_box(s, s->partners[s->depth][j], r, from, lo[j], hi[j]);
        t[j] = trees[j];
    }
    /* Tree parts only where more than one slot is open: below that, the
     * ridge parts over the chunks' boxes and the scored groups cut for less. */
    return members_bound_staged(s, lo, hi, t, extra, r > 1, all_trees);
}

static double partial_memory(const search *s)
{
    double mem = 0;
    for (int j = 0; j <= s->depth; j++)
        mem += s->ds->workloads[s->chosen[j]].metric[KACE_M_MEMCAP];
    return mem;
}


/* For every suffix cand[i..n), the sums of its q largest bounds v[] for
 * q = 1..r: top[i * KACE_GROUP_MAX_K + q]. */
static void suffix_top(const double *v, size_t from, size_t n, int r, double *top)
{
    double best[KACE_GROUP_MAX_K]; /* the r largest so far, descending */
    int have = 0;
    for (int q = 0; q <= r; q++)
        top[n * KACE_GROUP_MAX_K + (size_t)q] = q ? -INFINITY : 0;
    for (size_t i = n; i-- > from;) {
        int at = have < r ? have++ : r;
        while (at > 0 && best[at - 1] < v[i]) {
            if (at < r)
                best[at] = best[at - 1];
            at--;
        }
        if (at < r)
            best[at] = v[i];
        double sum = 0;
        top[i * KACE_GROUP_MAX_K] = 0;
        for (int q = 1; q <= r; q++) {
            sum += q <= have ? best[q - 1] : -INFINITY;
            top[i * KACE_GROUP_MAX_K + (size_t)q] = sum;
        }
    }
}

/* Cheap bounds on each candidate j >= from as the next member of the
 * partial group: its partners are the group plus r - 1 jobs from
 * cand[from..). The tree parts come from the parent's (their boxes contain
 * these), and the parent's bound also holds here. */
static void candidate_bounds(search *s, int r, size_t from, const double *parent, const double *parent_trees,
                             double rest, double *v, double *vt)
{
    double *lo = s->one_lo[0], *hi = s->one_hi[0];
    suffix_box(s, s->total[s->depth], r - 1, from, lo, hi);
    for (size_t j = from; j < s->n; j++) {
        vt[j] = parent_trees[j];
        v[j] = parent[j];
        if (cut(s, rest + parent[j]))
            continue; /* in no completion that can win: the parent's bound does */
        double b = cheap_bound(s, s->cand[j].bound, lo, hi, vt[j]);
        if (b < v[j])
            v[j] = b;
    }
    s->best->nodes_bounded++;
}

/* The last open slot: scores the groups that may still win, skipping whole
 * chunks of candidates whose box bound cannot reach the incumbent. */
static void last_slot(search *s, size_t from, const double *v, const double *vt, double wide, double mem,
                      const int *pos_stack)
{
    /* The last member's partners are the partial group itself: a point box,
     * where its ridge part is nearly exact. */
    double *lo = s->one_lo[1], *hi = s->one_hi[1];
    suffix_box(s, s->total[s->depth], 0, from, lo, hi);
    /* Chunks by their best candidate bound, most promising first: good
     * groups early raise the incumbent, and once one chunk is cut by that
     * bound, so are the rest. */
    size_t n_chunks = (s->n + CHUNK - 1) / CHUNK, n_live = 0;
    for (size_t chunk = 0; chunk < n_chunks; chunk++) {
        size_t e = chunk * CHUNK, end = e + CHUNK < s->n ? e + CHUNK : s->n;
        while (e < end && s->sim[e] < from)
            e++;
        if (e == end)
            continue; /* no candidate left in it */
        double vmax = s->chunk_sufmax[e];
        size_t at = n_live++;
        for (; at > 0 && s->chunk_vmax[at - 1] < vmax; at--) {
            s->chunk_vmax[at] = s->chunk_vmax[at - 1];
            s->chunk_order[at] = s->chunk_order[at - 1];
        }
        s->chunk_vmax[at] = vmax;
        s->chunk_order[at] = e; /* its first open entry */
    }
    /* The members by their node bounds, largest first: the order in which
     * each chunk's test replaces them. */
    int order[KACE_GROUP_MAX_K];
    const double *node = s->node_member[s->depth];
    for (int j = 0; j <= s->depth; j++) {
        int at = j;
        for (; at > 0 && node[order[at - 1]] < node[j]; at--)
            order[at] = order[at - 1];
        order[at] = j;
    }
    for (size_t live = 0; live < n_live && !s->st; live++) {
        size_t c0 = s->chunk_order[live], c1 = (c0 / CHUNK + 1) * CHUNK < s->n ? (c0 / CHUNK + 1) * CHUNK : s->n;
        double vmax = s->chunk_vmax[live];
        if (cut(s, wide + vmax))
            break;
        /* The box of the chunk's open candidates: the ridge parts over it
         * with the node's tree parts. */
        const double *box_lo = s->chunk_min + c0 * (size_t)s->n_metric, *box_hi = s->chunk_max + c0 * (size_t)s->n_metric;
        double bound = members_bound_box(s, box_lo, box_hi, order, vmax);
        if (cut(s, bound + vmax))
            continue;
        for (size_t e = c0; e < c1 && !s->st; e++) {
            size_t i = s->sim[e];
            const candidate *c = &s->cand[i];
            if (cut(s, bound + v[i]) || mem + c->memcap > s->capacity * (1 + 1e-12))
                continue;
            double own = cheap_bound(s, c->bound, lo, hi, vt[i]);
            if (cut(s, bound + own) || cut(s, members_bound_point(s, c->workload, s->node_trees[s->depth]) + own))
                continue;
            int pos[KACE_GROUP_MAX_K];
            memcpy(pos, pos_stack, (size_t)(s->k - 2) * sizeof *pos);
            pos[s->k - 2] = c->pos;
            score(s, pos);
        }
    }
}

/* Orders the candidates for the last slot into chunks of similar jobs:
 * each chunk starts at the first unplaced candidate in search order and
 * takes its CHUNK - 1 nearest unplaced neighbours (distance over the log
 * of the model's metrics, each scaled by its spread in the pool), so a
 * chunk's metric box stays narrow and its bound tight. */
static void similar_chunks(search *s)
{
    size_t n = s->n, d = (size_t)s->n_metric;
    double *x = malloc(n * d * sizeof *x), *dist = malloc(n * sizeof *dist);
    bool *placed = calloc(n ? n : 1, sizeof *placed);
    if (!x || !dist || !placed) { /* fall back to search order */
        for (size_t i = 0; i < n; i++)
            s->sim[i] = i;
        goto done;
    }
    for (size_t j = 0; j < d; j++) {
        double sum = 0, ss = 0;
        for (size_t i = 0; i < n; i++) {
            x[i * d + j] = log(s->ds->workloads[s->cand[i].workload].metric[s->metric[j]] + 1e-3);
            sum += x[i * d + j];
        }
        for (size_t i = 0; i < n; i++)
            ss += (x[i * d + j] - sum / (double)n) * (x[i * d + j] - sum / (double)n);
        double scale = ss > 0 ? 1 / sqrt(ss / (double)n) : 0;
        for (size_t i = 0; i < n; i++)
            x[i * d + j] *= scale;
    }
    size_t at = 0, lead = 0;
    while (at < n) {
        while (placed[lead])
            lead++;
        placed[lead] = true;
        s->sim[at++] = lead;
        for (size_t i = 0; i < n; i++) {
            dist[i] = 0;
            for (size_t j = 0; j < d; j++)
                dist[i] += (x[i * d + j] - x[lead * d + j]) * (x[i * d + j] - x[lead * d + j]);
        }
        for (int taken = 1; taken < CHUNK && at < n; taken++) {
            size_t near = n;
            for (size_t i = 0; i < n; i++)
                if (!placed[i] && (near == n || dist[i] < dist[near]))
                    near = i;
            placed[near] = true;
            s->sim[at++] = near;
        }
    }
done:
    free(x);
    free(dist);
    free(placed);
}

/* For the last slot below this node: per entry e of sim[], the largest
 * bound v[] among its chunk's entries from e on (entries before `from`
 * never count: no child opens them). */
static void chunk_suffix_max(search *s, size_t from, const double *v)
{
    for (size_t c0 = 0; c0 < s->n; c0 += CHUNK) {
        double best = -INFINITY;
        for (size_t e = c0 + CHUNK < s->n ? c0 + CHUNK : s->n; e-- > c0;) {
            if (s->sim[e] >= from && v[s->sim[e]] > best)
                best = v[s->sim[e]];
            s->chunk_sufmax[e] = best;
        }
    }
}

static int by_size_t(const void *a, const void *b)
{
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return (x > y) - (x < y);
}

/* Extends the partial group chosen[0..depth] with candidates from
 * cand[from..). parent[j] bounds candidate j as a member of any completion;
 * pos_stack holds the chosen candidates' pool positions. */
static void descend(search *s, size_t from, const double *parent, const double *parent_trees, int *pos_stack,
                    double wide)
{
    int r = s->k - 1 - s->depth; /* slots still open, >= 1 */
    double mem = partial_memory(s);
    /* Tighter candidate bounds now that the group is partly known; at the
     * last slot the parent's are used (computing them would cost as much as
     * scoring the groups). */
    if (r == 1) {
        last_slot(s, from, parent, parent_trees, wide, mem, pos_stack);
        return;
    }
    size_t level = (size_t)s->depth * s->n;
    double *v = s->v + level, *vt = s->vt + level, *top = s->top + (size_t)s->depth * (s->n + 1) * KACE_GROUP_MAX_K;
    if (s->depth > 0) {
        /* The node's bound plus the r - 1 best parent bounds of the suffix
         * bound every completion without candidate j but for j's own. */
        const double *parent_top = s->top + (size_t)(s->depth - 1) * (s->n + 1) * KACE_GROUP_MAX_K;
        candidate_bounds(s, r, from, parent, parent_trees, wide + parent_top[from * KACE_GROUP_MAX_K + (size_t)(r - 1)],
                         v, vt);
    } else {
        memcpy(v + from, parent + from, (s->n - from) * sizeof *v);
        memcpy(vt + from, parent_trees + from, (s->n - from) * sizeof *vt);
    }
    suffix_top(v, from, s->n, r, top);
    if (r == 2)
        chunk_suffix_max(s, from, v);
    for (size_t i = from; i + (size_t)r <= s->n && !s->st; i++) {
        if (cut(s, wide + top[i * KACE_GROUP_MAX_K + (size_t)r]))
            break; /* no completion from cand[i..) can win */
        const candidate *c = &s->cand[i];
        const double *rest = &top[(i + 1) * KACE_GROUP_MAX_K + (size_t)(r - 1)];
        if (cut(s, wide + v[i] + *rest))
            continue;
        double least = mem + c->memcap + (r - 1) * s->suf_min_mem[i + 1];
        if (least > s->capacity * (1 + 1e-12)) /* consider() decides the exact edge */
            continue;
        /* The child's tree parts: each old member's from this node, the new
         * one's from its candidate bound (their boxes contain the child's). */
        double trees[KACE_GROUP_MAX_K];
        memcpy(trees, s->node_trees[s->depth], (size_t)(s->depth + 1) * sizeof *trees);
        trees[s->depth + 1] = vt[i];
        s->chosen[++s->depth] = c->workload;
        s->chosen_bound[s->depth] = c->bound;
        pos_stack[s->depth - 1] = c->pos;
        node_sums(s);
        /* Valid for every completion from cand[i+1..): the members'
         * partners then come from there. Cheap first, then full. */
        bool all_trees;
        double child;
        if (r - 1 == 1) {
            double prior[KACE_GROUP_MAX_K];
            memcpy(prior, s->node_member[s->depth - 1], (size_t)s->depth * sizeof *prior);
            prior[s->depth] = v[i];
            child = members_bound_last(s, i + 1, trees, prior, *rest);
        } else {
            child = members_bound(s, r - 1, i + 1, trees, *rest, &all_trees);
        }
        if (!cut(s, child + *rest)) /* then every member got its own tree part */
            descend(s, i + 1, v, vt, pos_stack, child);
        s->depth--;
    }
}

/* A good group to start from, so the first bounds already cut: the
 * target's best partner by prediction, then the best third next to both,
 * and so on, among the GREEDY_POOL candidates with the highest bounds (all
 * of them cost more than they save); then, while swapping one partner for
 * another of those candidates raises the prediction, the best such swap
 * (a greedy start can sit 10% below the optimum, and every node the search
 * bounds against a low incumbent costs). It is scored like any other group. */
/* Upper bound on the prediction for the complete group target +
 * cand[idx[1..k)] (workloads group[]): each member's ridge part at its
 * partner sums with its tree part from the root (the target's over the
 * root's box, a candidate's from u_c). Cheaper than the prediction. */
static double group_point_bound(search *s, const int *group, const size_t *idx)
{
    double lo[KACE_N_METRICS] = {0}, hi[KACE_N_METRICS] = {0}, bound = 0;
    for (int j = 0; j < s->k; j++) {
        for (int i = 0; i < s->n_metric; i++) {
            kace_metric mt = s->metric[i];
            double sum = 0;
            for (int o = 0; o < s->k; o++)
                if (o != j)
                    sum += s->ds->workloads[group[o]].metric[mt];
            lo[mt] = sum * (1 - 1e-12);
            hi[mt] = sum * (1 + 1e-12);
        }
        const candidate *c = j ? &s->cand[idx[j]] : NULL;
        bound += cheap_bound(s, j ? c->bound : s->chosen_bound[0], lo, hi,
                             j ? c->upper_trees : s->node_trees[0][0]);
    }
    return bound;
}

static void greedy_start(search *s)
{
    int group[KACE_GROUP_MAX_K], pos[KACE_GROUP_MAX_K];
    size_t picked[KACE_GROUP_MAX_K] = {0};
    bool *taken = calloc(s->n ? s->n : 1, sizeof *taken);
    if (!taken)
        return; /* only a head start: the search does without */
    size_t pool_n = s->n < GREEDY_POOL ? s->n : GREEDY_POOL;
    group[0] = s->q->target;
    double mem = s->ds->workloads[s->q->target].metric[KACE_M_MEMCAP], current = -INFINITY;
    for (int slot = 1; slot < s->k; slot++) {
        double best = -INFINITY;
        size_t pick = s->n;
        for (size_t c = 0; c < pool_n; c++) {
            double least = mem + s->cand[c].memcap + (s->k - 1 - slot) * s->suf_min_mem[0];
            if (taken[c] || least > s->capacity)
                continue;
            double sum;
            group[slot] = s->cand[c].workload;
            picked[slot] = c;
            if (slot == s->k - 1 && !(group_point_bound(s, group, picked) > best))
                continue; /* cannot beat the best pick */
            if (kace_predict_group(s->ctx, s->p, s->ds, group, slot + 1, &sum, NULL, NULL) == KACE_OK &&
                sum > best) {
                best = sum;
                pick = c;
            }
        }
        if (pick == s->n) {
            free(taken);
            return;
        }
        taken[pick] = true;
        picked[slot] = pick;
        group[slot] = s->cand[pick].workload;
        mem += s->cand[pick].memcap;
        current = best;
    }
    for (int pass = 0; pass < 4 * s->k; pass++) {
        double best = current;
        int swap_slot = -1;
        size_t swap_in = 0;
        for (int slot = 1; slot < s->k; slot++) {
            int kept = group[slot];
            double without = mem - s->cand[picked[slot]].memcap;
            for (size_t c = 0; c < pool_n; c++) {
                if (taken[c] || without + s->cand[c].memcap > s->capacity)
                    continue;
                group[slot] = s->cand[c].workload;
                if (s->q->filter && !s->q->filter(s->q->filter_user, group, s->k))
                    continue;
                size_t idx[KACE_GROUP_MAX_K];
                memcpy(idx, picked, sizeof idx);
                idx[slot] = c;
                if (!(group_point_bound(s, group, idx) > best))
                    continue; /* cannot beat the best swap */
                double sum;
                if (kace_predict_group(s->ctx, s->p, s->ds, group, s->k, &sum, NULL, NULL) == KACE_OK &&
                    sum > best) {
                    best = sum;
                    swap_slot = slot;
                    swap_in = c;
                }
            }
            group[slot] = kept;
        }
        if (swap_slot < 0)
            break;
        taken[picked[swap_slot]] = false;
        mem += s->cand[swap_in].memcap - s->cand[picked[swap_slot]].memcap;
        taken[swap_in] = true;
        picked[swap_slot] = swap_in;
        group[swap_slot] = s->cand[swap_in].workload;
        current = best;
    }
    free(taken);
    for (int slot = 1; slot < s->k; slot++)
        pos[slot - 1] = s->cand[picked[slot]].pos;
    score(s, pos);
}

static int by_upper_desc(const void *a, const void *b)
{
    const candidate *x = a, *y = b;
    if (x->upper != y->upper)
        return x->upper < y->upper ? 1 : -1;
    return (x->pos > y->pos) - (x->pos < y->pos);
}

kace_status kace_group_best(kace_ctx *ctx, const kace_dataset *ds, const kace_predictor *p, const kace_group_query *q,
                            kace_group_result *out)
{
    const int *pool;
    size_t n;
    int *own = NULL;
    double capacity;
    if (out)
        result_reset(out, q ? q->k : 0);
    kace_status st = prepare(ctx, ds, p, q, &pool, &n, &own, &capacity);
    if (st)
        return st;
    search s = {.ds = ds, .p = p, .b = p ? p->ops->bounds : NULL, .q = q, .ctx = ctx, .k = q->k, .capacity = capacity, .best = out, .bar = -INFINITY, .n = n};
    if (!kace_predictor_can(p, KACE_PRED_BOUNDS) || !s.b) {
        free(own);
        return kace_fail(ctx, KACE_ERR_UNSUPPORTED,
                         "branch and bound needs a model that bounds its predictions (kace's slowdown model); "
                         "this %s model can only be searched by enumeration", kace_predictor_name(p));
    }
    /* The bounds are on the sum; the other objectives are searched by
     * scoring every group (exact, slower on large pools). */
    if (q->k == 2 || q->objective != KACE_OBJ_RAW) { /* scoring every pair costs less than bounding them */
        free(own);
        return kace_group_enumerate(ctx, ds, p, q, out);
    }
    if (s.b->pressure_member) { /* the pressure model: bounds on its partners' pressure sums */
        kace_group_query local = *q;
        local.pool = pool;
        local.n_pool = n;
        st = kace_group_best_pressure(ctx, ds, p, &local, capacity, out);
        free(own);
        return st;
    }
    s.metric = kace_profile_metrics(&s.n_metric);
    kace_group_query local = *q;
    local.pool = pool; /* consider() maps positions through it */
    local.n_pool = n;
    s.q = &local;
    s.cand = malloc((n ? n : 1) * sizeof *s.cand);
    s.suf_min = malloc((n + 1) * (size_t)s.n_metric * sizeof *s.suf_min);
    s.suf_max = malloc((n + 1) * (size_t)s.n_metric * sizeof *s.suf_max);
    s.suf_min_mem = malloc((n + 1) * sizeof *s.suf_min_mem);
    s.u = malloc((n ? n : 1) * sizeof *s.u);
    s.ut = malloc((n ? n : 1) * sizeof *s.ut);
    s.vt = malloc((size_t)q->k * (n ? n : 1) * sizeof *s.vt);
    s.v = malloc((size_t)q->k * (n ? n : 1) * sizeof *s.v);
    s.top = malloc((size_t)q->k * (n + 1) * KACE_GROUP_MAX_K * sizeof *s.top);
    size_t n_chunks = n / CHUNK + 1;
    s.chunk_min = malloc((n ? n : 1) * (size_t)s.n_metric * sizeof *s.chunk_min);
    s.chunk_max = malloc((n ? n : 1) * (size_t)s.n_metric * sizeof *s.chunk_max);
    s.chunk_sufmax = malloc((n ? n : 1) * sizeof *s.chunk_sufmax);
    s.bounds = calloc(n + 1, sizeof *s.bounds);
    s.sim = malloc((n ? n : 1) * sizeof *s.sim);
    s.chunk_vmax = malloc(n_chunks * sizeof *s.chunk_vmax);
    s.chunk_order = malloc(n_chunks * sizeof *s.chunk_order);
    if (!s.sim || !s.chunk_vmax || !s.chunk_order || !s.bounds || !s.chunk_min || !s.chunk_max || !s.chunk_sufmax || !s.cand || !s.suf_min || !s.suf_max || !s.suf_min_mem || !s.u || !s.v || !s.top ||
        !s.ut || !s.vt) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
        goto done;
    }
    if ((size_t)(q->k - 1) > n)
        goto done; /* not enough candidates: nothing found */
    /* u_c: candidate c next to the target and k-2 arbitrary pool jobs. */
    double pmin[KACE_N_METRICS], pmax[KACE_N_METRICS];
    for (int i = 0; i < s.n_metric; i++) {
        pmin[i] = INFINITY;
        pmax[i] = 0;
        for (size_t c = 0; c < n; c++) {
            double v = ds->workloads[pool[c]].metric[s.metric[i]];
            pmin[i] = fmin(pmin[i], v);
            pmax[i] = fmax(pmax[i], v);
        }
    }
    const double *target = ds->workloads[q->target].metric;
    /* Each workload's bound is prepared once; repeated jobs share it. */
    int *slot = malloc(ds->n_workloads * sizeof *slot);
    if (!slot) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (size_t w = 0; w < ds->n_workloads; w++)
        slot[w] = -1;
    for (size_t c = 0; c <= n && !st; c++) {
        int w = c < n ? pool[c] : q->target;
        if (slot[w] < 0 && !(st = s.b->member_init(ctx, p, ds->workloads[w].metric,
                                                                  &s.bounds[s.n_bounds])))
            slot[w] = (int)s.n_bounds++;
        if (c < n)
            s.cand[c].bound = &s.bounds[slot[w]];
    }
    s.chosen_bound[0] = st ? NULL : &s.bounds[slot[q->target]];
    if (!st) /* the target's tree part is bounded at every node with two open slots */
        st = s.b->member_trees(ctx, p, &s.bounds[slot[q->target]]);
    free(slot);
    if (st)
        goto done;
    for (size_t c = 0; c < n; c++) {
        double lo[KACE_N_METRICS] = {0}, hi[KACE_N_METRICS] = {0};
        for (int i = 0; i < s.n_metric; i++) {
            kace_metric mt = s.metric[i];
            lo[mt] = (target[mt] + (q->k - 2) * pmin[i]) * (1 - 1e-12);
            hi[mt] = (target[mt] + (q->k - 2) * pmax[i]) * (1 + 1e-12);
        }
        s.cand[c].pos = (int)c;
        s.cand[c].workload = pool[c];
        s.cand[c].memcap = ds->workloads[pool[c]].metric[KACE_M_MEMCAP];
        /* Unprepared: most candidates never have their tree part bounded
         * again, and preparing it costs ~15 such walks. */
        s.cand[c].upper_trees = s.b->trees_unprepared(p, s.cand[c].bound, lo, hi);
        s.cand[c].upper = s.b->blend(p, s.b->ridge(p, s.cand[c].bound, lo, hi),
                                                    s.cand[c].upper_trees);
    }
    qsort(s.cand, n, sizeof *s.cand, by_upper_desc);
    size_t d = (size_t)s.n_metric;
    for (int i = 0; i < s.n_metric; i++) {
        s.suf_min[n * d + (size_t)i] = INFINITY;
        s.suf_max[n * d + (size_t)i] = 0;
    }
    s.suf_min_mem[n] = INFINITY;
    for (size_t c = n; c-- > 0;) {
        for (int i = 0; i < s.n_metric; i++) {
            double v = ds->workloads[s.cand[c].workload].metric[s.metric[i]];
            s.suf_min[c * d + (size_t)i] = fmin(s.suf_min[(c + 1) * d + (size_t)i], v);
            s.suf_max[c * d + (size_t)i] = fmax(s.suf_max[(c + 1) * d + (size_t)i], v);
        }
        s.suf_min_mem[c] = fmin(s.suf_min_mem[c + 1], s.cand[c].memcap);
    }
    s.chosen[0] = q->target;
    s.depth = 0;
    node_sums(&s);
    int pos_stack[KACE_GROUP_MAX_K];
    for (size_t c = 0; c < n; c++)
    {
        s.u[c] = s.cand[c].upper;
        s.ut[c] = s.cand[c].upper_trees;
    }
    similar_chunks(&s);
    for (size_t c0 = 0; c0 < n; c0 += CHUNK) {
        size_t c1 = c0 + CHUNK < n ? c0 + CHUNK : n;
        qsort(s.sim + c0, c1 - c0, sizeof *s.sim, by_size_t);
        for (int i = 0; i < s.n_metric; i++) {
            double lo = INFINITY, hi = 0;
            for (size_t e = c1; e-- > c0;) {
                double v = ds->workloads[s.cand[s.sim[e]].workload].metric[s.metric[i]];
                lo = fmin(lo, v);
                hi = fmax(hi, v);
                s.chunk_min[e * (size_t)s.n_metric + (size_t)i] = lo;
                s.chunk_max[e * (size_t)s.n_metric + (size_t)i] = hi;
            }
        }
    }
    double no_trees[KACE_GROUP_MAX_K];
    for (int j = 0; j < KACE_GROUP_MAX_K; j++)
        no_trees[j] = INFINITY;
    /* The root's bound first (it cuts nothing yet): the greedy start
     * reads the target's tree part over it. */
    bool all_trees;
    double root = members_bound(&s, q->k - 1, 0, no_trees, INFINITY, &all_trees);
    greedy_start(&s);
    if (!s.st)
        descend(&s, 0, s.u, s.ut, pos_stack, root);
    st = s.st;
done:
    free(s.cand);
    free(s.suf_min);
    free(s.suf_max);
    free(s.suf_min_mem);
    free(s.u);
    free(s.ut);
    free(s.vt);
    free(s.v);
    free(s.top);
    free(s.sim);
    free(s.chunk_vmax);
    free(s.chunk_order);
    free(s.chunk_sufmax);
    free(s.chunk_min);
    free(s.chunk_max);
    for (size_t i = 0; i < s.n_bounds; i++)
        s.b->member_release(&s.bounds[i]);
    free(s.bounds);
    free(own);
    return st;
}

/* xorshift64*: a small seeded generator, the same on every platform. */
static double uniform_pm1(uint64_t *state)
{
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    uint64_t x = *state * 0x2545F4914F6CDD1Dull;
    return (double)(x >> 11) / (double)(1ull << 53) * 2 - 1;
}

kace_status kace_group_synthesize(kace_ctx *ctx, kace_dataset *ds, size_t n, double spread, uint64_t seed)
{
    if (!(spread >= 0 && spread <= 3))
        return kace_fail(ctx, KACE_ERR_INVALID, "synthetic pool: spread must be in [0, 3]");
    int n_metric;
    const kace_metric *metric = kace_profile_metrics(&n_metric);
    size_t n_real = ds->n_workloads;
    int *base = malloc((n_real ? n_real : 1) * sizeof *base);
    if (!base)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    size_t n_base = 0;
    for (size_t w = 0; w < n_real; w++)
        if (profile_complete(ds, (int)w, metric, n_metric))
            base[n_base++] = (int)w;
    kace_status st = KACE_OK;
    if (!n_base && n) {
        st = kace_fail(ctx, KACE_ERR_INVALID, "synthetic pool: no workload with a complete profile to start from");
        goto done;
    }
    uint64_t state = seed * 0x9E3779B97F4A7C15ull + 0x1234567ull;
    if (!state)
        state = 1;
    for (size_t i = 0; i < n; i++) {
        const kace_workload *from = &ds->workloads[base[i % n_base]];
        char name[KACE_NAME_MAX];
        snprintf(name, sizeof name, "synth%zu-%.100s", i, from->name);
        int w;
        double metric_copy[KACE_N_METRICS];
        memcpy(metric_copy, from->metric, sizeof metric_copy); /* intern may move the array */
        if ((st = kace_dataset_intern(ctx, ds, name, &w)))
            goto done;
        kace_workload *to = &ds->workloads[w];
        memcpy(to->metric, metric_copy, sizeof to->metric);
        for (int j = 0; j < n_metric; j++) {
            double v = to->metric[metric[j]] * exp(uniform_pm1(&state) * spread);
            if (kace_metric_is_percent(metric[j]) || metric[j] == KACE_M_SM_THROUGHPUT ||
                metric[j] == KACE_M_DRAM_THROUGHPUT || metric[j] == KACE_M_MEM_THROUGHPUT)
                v = fmin(v, 100);
            to->metric[metric[j]] = v;
        }
    }
done:
    free(base);
    return st;
}
