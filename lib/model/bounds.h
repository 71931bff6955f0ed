/* Upper bounds on a member's predicted throughput (the predictor's
 * KACE_PRED_BOUNDS part): the types a kind fills (slowdown.c) and the
 * branch and bound of the group search (lib/decide/group.c) reads. Internal. */
#ifndef KACE_LIB_MODEL_BOUNDS_H
#define KACE_LIB_MODEL_BOUNDS_H

#include <stdbool.h>
#include <stdint.h>

#include "kace/predictor.h"

struct kace_pressure_member;

/* A workload's bound, prepared once for many boxes: the ridge terms of its
 * own metrics, and the trees specialized to its own features (their splits
 * on its own metrics resolved). */
typedef struct kace_member_node {
    float value;     /* split threshold, or the leaf's value */
    int32_t right;   /* index of the right child; the left child is next */
    int16_t feature; /* -1: a leaf; a member feature j: both ends of its range, j + 26 (the member feature
                        count): its low end only, j + 52: its high end only (the tree is monotone in j) */
} kace_member_node;

typedef struct kace_member_bound {
    double excl, own_memcap;
    double share[5];      /* own sm%, mem%, Nsight throughputs */
    double a[5], c[5];    /* ridge weights of a partner share in percent (own product folded in) and of its ratio */
    double d[5];          /* own share + 0.1, in percent (the ratio's denominator) */
    /* Where a share's ridge terms are largest over an interval of partner
     * shares: this point clamped into it (+INF: its high end, -INF: its low
     * end); shares with bit s of both_ends set: whichever end is larger. */
    double at[5];
    unsigned both_ends;
    double mag_share[5], mag_const; /* the terms' size: mag_share[s] * the partners' share + mag_const */
    double z_own, mag_own; /* ridge intercept plus own-feature terms, and their size */
    double tree_const, tree_const_mag; /* base score plus trees left with one leaf */
    float own_feature[26]; /* its own features as the trees compare them (the rest unused) */
    bool trees_ready;      /* the specialized trees below are set (member_trees) */
    kace_member_node *node;
    int n_nodes;
    int *active; /* first node of each tree that still splits on several features */
    int n_active;
    /* Trees left splitting on one partner feature, summed per feature into
     * a step function: thresholds step_thr[first .. first + n_thr), sorted,
     * and the sum's value in each of the n_thr + 1 cells between them,
     * step_cell[first + f .. first + f + n_thr] for step function f. */
    struct {
        int feature, first, n_thr;
    } step[32];
    int n_steps;
    float *step_thr;
    double *step_cell;
} kace_member_bound;

/* Upper bounds on a member's predicted throughput when its partners'
 * summed metrics lie in a box (the predictor's KACE_PRED_BOUNDS part; the
 * slowdown model's functions above, behind the predictor). */
typedef struct kace_bound_ops {
    /* The ridge part's preparation (cheap); member_trees then prepares the
     * tree part, which `trees` needs (costly: a search prepares it only for
     * the workloads whose tree part it bounds often). */
    kace_status (*member_init)(kace_ctx *ctx, const kace_predictor *p, const double *own, kace_member_bound *mb);
    kace_status (*member_trees)(kace_ctx *ctx, const kace_predictor *p, kace_member_bound *mb);
    /* The tree part's bound for a member whose trees are not prepared: the
     * model's trees walked as they are (looser than `trees`, no preparation). */
    double (*trees_unprepared)(const kace_predictor *p, const kace_member_bound *mb, const double *lo, const double *hi);
    void (*member_release)(kace_member_bound *mb);
    double (*ridge)(const kace_predictor *p, const kace_member_bound *mb, const double *lo, const double *hi);
    double (*trees)(const kace_predictor *p, const kace_member_bound *mb, const double *lo, const double *hi);
    double (*blend)(const kace_predictor *p, double ridge, double trees);
    /* blend(ridge(box), trees) in one call (the search's inner loops). */
    double (*ridge_blend)(const kace_predictor *p, const kace_member_bound *mb, const double *lo, const double *hi,
                          double trees);
    /* Set instead of the above by a model whose member depends on its
     * partners only through per-part sums of one weight per workload (the
     * pressure model): the group search then bounds with those sums
     * (lib/decide/group_pressure.c). */
    kace_status (*pressure_member)(kace_ctx *ctx, const kace_predictor *p, const kace_workload *w,
                                   struct kace_pressure_member *out);
} kace_bound_ops;

/* A member of the pressure model as the group search sees it: with its
 * partners' weights summing to x[q] in part q, it predicts
 *     sum over parts q of gain[q] / (1 + sens[q] * x[q]),
 * which never grows with any x[q]. */
typedef struct kace_pressure_member {
    int n_parts;
    double gain[2];   /* exclusive throughput x exp(a) / parts */
    double sens[2];   /* exp(s) */
    double weight[2]; /* exp(p): what it adds to each partner's sum */
} kace_pressure_member;

/* Upper bound on the member's prediction when its partners' weight sums
 * are at least x_lo[q]: the prediction there (it falls as they grow). */
static inline double kace_pressure_member_upper(const kace_pressure_member *m, const double *x_lo)
{
    double b = 0;
    for (int q = 0; q < m->n_parts; q++)
        b += m->gain[q] / (1 + m->sens[q] * x_lo[q]);
    return b;
}

#endif
