/* Best k-way group around a target for the pressure model: branch and
 * bound over the partners' pressure sums.
 *
 * The bound. A member of the pressure model depends on its partners only
 * through one sum per part of the model, x[q] = the sum of its partners'
 * weights exp(p), and its prediction falls as any x[q] grows (bounds.h:
 * kace_pressure_member). So the smallest sums a member's partners can reach
 * give an upper bound on it, and at the known partners it is the
 * prediction itself. For a partial group S with r slots left, filled from
 * the candidates at positions >= from in search order:
 *  - a member of S has partners S minus itself plus r jobs of the suffix:
 *    their weights sum to at least the r smallest weights of the suffix
 *    (low[from][r], per part);
 *  - a job c still to be chosen has partners S plus r - 1 other jobs of
 *    the suffix: its bound v_c uses S's weights plus low[from][r - 1];
 *    the r best of these bound the new members together.
 * Choosing c at position j for the next slot leaves the suffix after j:
 * the child's bound is its members' (c included) over that suffix plus the
 * r - 1 largest v after j. A child whose bound is below the incumbent is
 * cut, and so is one whose memory (with the r - 1 smallest memcaps after
 * j) cannot fit. With one slot left the child's bound is its prediction
 * (up to rounding), so only groups that may win are scored.
 * Candidates are searched in decreasing u_c (c beside the target and the
 * k - 2 lightest pool jobs): good groups come first and raise the
 * incumbent early. Every group is scored by kace_group_consider, as
 * kace_group_enumerate scores it, so both return the same group. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "group_internal.h"
#include "model/bounds.h"

/* Bounds are computed in another order than the prediction's sums: one
 * this close to the incumbent is explored. */
#define ROUNDING 1e-9

typedef struct pcand {
    int pos;      /* position in the pool (tie order) */
    int workload; /* index into the dataset */
    double memcap;
    double upper; /* u_c */
    kace_pressure_member m;
} pcand;

typedef struct psearch {
    kace_ctx *ctx;
    const kace_dataset *ds;
    const kace_predictor *p;
    const kace_group_query *q;
    int k, parts;
    double capacity;
    pcand *cand; /* in search order */
    size_t n;
    /* low[(i * KACE_GROUP_MAX_K + r) * 2 + q]: the sum of the r smallest
     * part-q weights of cand[i..n) (+INF when fewer than r remain). */
    double *low;
    double *suf_min_mem; /* n + 1 */
    double *v;           /* k x n: the new members' bounds at each depth */
    double *top;         /* k x (n + 1) x KACE_GROUP_MAX_K: sums of the largest v of each suffix */
    /* The partial group: target at 0, then the chosen candidates. */
    const kace_pressure_member *member[KACE_GROUP_MAX_K];
    int pos[KACE_GROUP_MAX_K];
    int depth;
    double weight[2]; /* the partial group's summed weights */
    double mem;
    kace_group_result *best;
    double bar; /* the incumbent's prediction (-INFINITY: none yet) */
    int best_pos[KACE_GROUP_MAX_K];
    kace_status st;
} psearch;

static bool cut(const psearch *s, double bound)
{
    return bound * (1 + ROUNDING) < s->bar;
}

/* The sums of the r smallest weights of each suffix, r = 0..k-1, per part. */
static void suffix_low(psearch *s)
{
    for (int q = 0; q < s->parts; q++) {
        double least[KACE_GROUP_MAX_K]; /* the smallest so far, ascending */
        int have = 0, rmax = s->k - 1;
        for (size_t i = s->n + 1; i-- > 0;) {
            if (i < s->n) {
                double w = s->cand[i].m.weight[q];
                int at = have < rmax ? have++ : rmax;
                for (; at > 0 && least[at - 1] > w; at--)
                    if (at < rmax)
                        least[at] = least[at - 1];
                if (at < rmax)
                    least[at] = w;
            }
            double sum = 0;
            for (int r = 0; r < KACE_GROUP_MAX_K; r++) {
                s->low[(i * KACE_GROUP_MAX_K + (size_t)r) * 2 + (size_t)q] = r <= have ? sum : INFINITY;
                if (r < have)
                    sum += least[r];
            }
        }
    }
}

static double low(const psearch *s, size_t from, int r, int q)
{
    return s->low[(from * KACE_GROUP_MAX_K + (size_t)r) * 2 + (size_t)q];
}

/* Bound on the partial group's members (S plus `extra` when not NULL, with
 * weights `weight`) when r more partners come from cand[from..). */
static double members_bound(const psearch *s, const kace_pressure_member *extra, const double *weight, int r,
                            size_t from)
{
    double bound = 0, x[2];
    for (int j = 0; j <= s->depth + (extra != NULL); j++) {
        const kace_pressure_member *m = j <= s->depth ? s->member[j] : extra;
        for (int q = 0; q < s->parts; q++)
            x[q] = weight[q] - m->weight[q] + low(s, from, r, q);
        bound += kace_pressure_member_upper(m, x);
    }
    return bound;
}

/* For every suffix v[i..n) from `from` on, the sums of its q largest
 * entries for q = 0..r: top[i * KACE_GROUP_MAX_K + q] (-INF: fewer). */
static void suffix_top(const double *v, size_t from, size_t n, int r, double *top)
{
    double best[KACE_GROUP_MAX_K]; /* the largest so far, descending */
    int have = 0;
    for (size_t i = n + 1; i-- > from;) {
        if (i < n) {
            int at = have < r ? have++ : r;
            for (; at > 0 && best[at - 1] < v[i]; at--)
                if (at < r)
                    best[at] = best[at - 1];
            if (at < r)
                best[at] = v[i];
        }
        double sum = 0;
        for (int q = 0; q <= r; q++) {
            top[i * KACE_GROUP_MAX_K + (size_t)q] = q <= have ? sum : -INFINITY;
            if (q < have)
                sum += best[q];
        }
    }
}

static void descend(psearch *s, size_t from, int r)
{
    if (r == 0) {
        int pos[KACE_GROUP_MAX_K];
        memcpy(pos, s->pos + 1, (size_t)(s->k - 1) * sizeof *pos);
        s->st = kace_group_consider(s->ctx, s->ds, s->p, s->q, s->q->pool, pos, s->k, s->capacity, s->best,
                                    s->best_pos);
        if (s->best->found)
            s->bar = s->best->predicted;
        return;
    }
    /* The new members' bounds, for the r - 1 that join the next one. */
    double *v = s->v + (size_t)s->depth * s->n, *top = s->top + (size_t)s->depth * (s->n + 1) * KACE_GROUP_MAX_K;
    if (r > 1) {
        for (size_t j = from; j < s->n; j++) {
            double x[2];
            for (int q = 0; q < s->parts; q++)
                x[q] = s->weight[q] + low(s, from, r - 1, q);
            v[j] = kace_pressure_member_upper(&s->cand[j].m, x);
        }
        suffix_top(v, from, s->n, r - 1, top);
    }
    for (size_t j = from; j + (size_t)r <= s->n && !s->st; j++) {
        const pcand *c = &s->cand[j];
        double least = s->mem + c->memcap + (r > 1 ? (r - 1) * s->suf_min_mem[j + 1] : 0);
        if (least > s->capacity * (1 + 1e-12)) /* kace_group_consider decides the exact edge */
            continue;
        double weight[2];
        for (int q = 0; q < s->parts; q++)
            weight[q] = s->weight[q] + c->m.weight[q];
        double bound = members_bound(s, &c->m, weight, r - 1, j + 1);
        if (r > 1)
            bound += top[(j + 1) * KACE_GROUP_MAX_K + (size_t)(r - 1)];
        s->best->nodes_bounded++;
        if (cut(s, bound))
            continue;
        s->depth++;
        s->member[s->depth] = &c->m;
        s->pos[s->depth] = c->pos;
        double mem = s->mem, kept[2] = {s->weight[0], s->weight[1]};
        memcpy(s->weight, weight, sizeof weight);
        s->mem += c->memcap;
        descend(s, j + 1, r - 1);
        s->mem = mem;
        memcpy(s->weight, kept, sizeof kept);
        s->depth--;
    }
}

static int by_upper_desc(const void *a, const void *b)
{
    const pcand *x = a, *y = b;
    if (x->upper != y->upper)
        return x->upper < y->upper ? 1 : -1;
    return (x->pos > y->pos) - (x->pos < y->pos);
}

kace_status kace_group_best_pressure(kace_ctx *ctx, const kace_dataset *ds, const kace_predictor *p,
                                     const kace_group_query *q, double capacity, kace_group_result *out)
{
    const kace_bound_ops *b = p->ops->bounds;
    size_t n = q->n_pool;
    psearch s = {.ctx = ctx, .ds = ds, .p = p, .q = q, .k = q->k, .capacity = capacity, .n = n, .best = out,
                 .bar = -INFINITY};
    kace_pressure_member target;
    kace_status st = b->pressure_member(ctx, p, &ds->workloads[q->target], &target);
    if (st)
        return st;
    s.parts = target.n_parts;
    s.cand = malloc((n ? n : 1) * sizeof *s.cand);
    s.low = malloc((n + 1) * KACE_GROUP_MAX_K * 2 * sizeof *s.low);
    s.suf_min_mem = malloc((n + 1) * sizeof *s.suf_min_mem);
    s.v = malloc((size_t)s.k * (n ? n : 1) * sizeof *s.v);
    s.top = malloc((size_t)s.k * (n + 1) * KACE_GROUP_MAX_K * sizeof *s.top);
    if (!s.cand || !s.low || !s.suf_min_mem || !s.v || !s.top) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
        goto done;
    }
    /* Each workload's latents once (a workload the model was not fitted on
     * costs a kernel sum over the training workloads). */
    for (size_t c = 0; c < n && !st; c++) {
        int w = q->pool[c];
        s.cand[c] = (pcand){.pos = (int)c, .workload = w, .memcap = ds->workloads[w].metric[KACE_M_MEMCAP]};
        st = b->pressure_member(ctx, p, &ds->workloads[w], &s.cand[c].m);
    }
    if (st || (size_t)(s.k - 1) > n)
        goto done; /* an error, or not enough candidates: nothing found */
    /* u_c: c beside the target and the k - 2 lightest jobs of the pool. */
    suffix_low(&s);
    for (size_t c = 0; c < n; c++) {
        double x[2];
        for (int part = 0; part < s.parts; part++)
            x[part] = target.weight[part] + low(&s, 0, s.k - 2, part);
        s.cand[c].upper = kace_pressure_member_upper(&s.cand[c].m, x);
    }
    qsort(s.cand, n, sizeof *s.cand, by_upper_desc);
    suffix_low(&s);
    s.suf_min_mem[n] = INFINITY;
    for (size_t c = n; c-- > 0;)
        s.suf_min_mem[c] = fmin(s.suf_min_mem[c + 1], s.cand[c].memcap);
    s.member[0] = &target;
    s.pos[0] = -1;
    for (int part = 0; part < s.parts; part++)
        s.weight[part] = target.weight[part];
    s.mem = ds->workloads[q->target].metric[KACE_M_MEMCAP];
    descend(&s, 0, s.k - 1);
    st = s.st;
done:
    free(s.cand);
    free(s.low);
    free(s.suf_min_mem);
    free(s.v);
    free(s.top);
    return st;
}
