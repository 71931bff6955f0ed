/* Gradient-boosted regression trees for small training sets.
 *
 * Why not libxgboost here: the slowdown model fits ~250 member samples, and
 * at that size xgboost's fixed cost per boosting round (~0.4 ms) is the
 * whole fit (40+ ms for 100 rounds, against the 50 ms budget), which also
 * rules out choosing settings by cross-validation. This booster does the
 * same algorithm as xgboost's exact greedy method on squared error (no L2
 * on leaves, min_child_weight 1, gamma 0, monotone constraints enforced by
 * bounding the leaf weights) in a fraction of the time: every feature is
 * sorted once into bins of its distinct values (shared by every fit on
 * the same rows: CV folds), each node sums its rows' gradients per bin (the
 * larger child by subtraction from its parent), and only non-empty bins
 * are scanned. tests/test_boost.c checks that it grows the same trees as
 * libxgboost on the same data.
 *
 * The result is written in the JSON layout of an xgboost model, so the
 * trees are stored, read back and checked exactly like xgboost's
 * (kace_trees_from_json). */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/text_buf.h"
#include "boost.h"

#define BOOST_MAX_DEPTH 6
#define BOOST_MAX_NODES ((1 << (BOOST_MAX_DEPTH + 1)) - 1)
#define MIN_GAIN 1e-6 /* a split must lower the loss by more than this */

typedef struct boost_node {
    double G, H;          /* sums of gradients and hessians of its samples */
    double lower, upper;  /* bounds on its weight (monotone constraints) */
    int depth, feature;   /* feature -1: a leaf */
    float threshold;
    int left, right, parent;
    /* best split found at this level */
    double best_gain, best_wl, best_wr;
    int best_feature;
    float best_threshold;
} boost_node;

typedef struct sort_item {
    float value;
    int row;
} sort_item;

static int by_value(const void *a, const void *b)
{
    const sort_item *x = a, *y = b;
    if (x->value != y->value)
        return x->value < y->value ? -1 : 1;
    return x->row - y->row;
}

static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static double clip(double w, double lo, double hi)
{
    return w < lo ? lo : w > hi ? hi : w;
}

/* Loss reduction of giving weight w to samples with sums G, H (squared
 * error, no L2): -(2 G w + H w^2), which is G^2 / H at the optimum. */
static double gain_at(double G, double H, double w)
{
    return -(2.0 * G * w + H * w * w);
}

static double node_weight(const boost_node *v)
{
    return v->H > 0 ? clip(-v->G / v->H, v->lower, v->upper) : 0;
}

/* A float threshold t with a < t <= b, so that "x < t goes left" sends a
 * left and b right. */
static float between(float a, float b)
{
    float t = (float)(((double)a + (double)b) * 0.5);
    return t > a ? t : b;
}

typedef struct booster {
    int n, d;
    const float *col; /* d columns of n floats */
    /* Each feature's distinct values, ascending: feature j's are
     * value[first[j] .. first[j + 1]), and row r's is value[bin[r * d + j]]. Splits only fall between distinct values, so
     * gradient sums per bin find exactly the splits a scan of the sorted
     * rows would, with one gain evaluation per distinct value. */
    const int *first;
    const float *value;
    const int *bin;
    const double *inverse; /* inverse[k] = 1 / k: hessians are row counts */
    const signed char *monotone;
    double *grad;
    int *pos; /* each row's node, -1 when not in this round's sample */
    double *hist_g; /* per node above the leaves, per bin: gradient sum */
    int *hist_h;    /* ... and row count */
    /* Per node above the leaves: its non-empty bins, ascending (a child's
     * are a subset of its parent's, so deep nodes cost little), with where
     * each feature's start (d + 1 entries). */
    int *nonempty, *n_nonempty, *feature_start;
    const int *all_bins; /* 0, 1, ..., total - 1 */
    boost_node node[BOOST_MAX_NODES];
    int n_nodes;
} booster;

/* The best split of node nd on feature j from the node's non-empty bins
 * of that feature (nz[0..m), ascending): candidates lie between
 * consecutive ones. The unconstrained gain bounds the constrained one, so
 * most candidates cost two products and a compare. */
static void best_split_of(boost_node *nd, double parent_gain, int j, int c, const double *hg, const int *hh,
                          const float *value, const int *nz, int m, const double *inverse)
{
    if (m < 2)
        return;
    int H = (int)nd->H, HL = hh[nz[0]];
    double GL = hg[nz[0]], G = nd->G, best = nd->best_gain;
    bool bounded = isfinite(nd->lower) || isfinite(nd->upper);
    if (!bounded && c == 0) { /* the gain is the open one: the best candidate in locals, written once */
        int at = 0, at_HL = 0;
        double at_GL = 0;
        for (int i = 1; i < m; i++) {
            double GR = G - GL;
            int HR = H - HL;
            double open = GL * GL * inverse[HL] + GR * GR * inverse[HR] - parent_gain;
            if (open > best) {
                best = open;
                at = i;
                at_GL = GL;
                at_HL = HL;
            }
            GL += hg[nz[i]];
            HL += hh[nz[i]];
        }
        if (at) {
            nd->best_gain = best;
            nd->best_feature = j;
            nd->best_threshold = between(value[nz[at - 1]], value[nz[at]]);
            nd->best_wl = -at_GL * inverse[at_HL];
            nd->best_wr = -(G - at_GL) * inverse[H - at_HL];
        }
        return;
    }
    for (int i = 1; i < m; i++) {
        int k = nz[i];
        double GR = G - GL;
        int HR = H - HL;
        double open = GL * GL * inverse[HL] + GR * GR * inverse[HR] - parent_gain;
        if (open > best) { /* split between value[nz[i - 1]] and value[k] */
            double wl = -GL * inverse[HL], wr = -GR * inverse[HR];
            if (bounded) {
                wl = clip(wl, nd->lower, nd->upper);
                wr = clip(wr, nd->lower, nd->upper);
            }
            if (!((c < 0 && wl < wr) || (c > 0 && wl > wr))) {
                double g = bounded ? gain_at(GL, HL, wl) + gain_at(GR, HR, wr) - parent_gain : open;
                if (g > best) {
                    best = g;
                    nd->best_gain = g;
                    nd->best_feature = j;
                    nd->best_threshold = between(value[nz[i - 1]], value[k]);
                    nd->best_wl = wl;
                    nd->best_wr = wr;
                }
            }
        }
        GL += hg[k];
        HL += hh[k];
    }
}

static double *hist_g_of(const booster *b, int v)
{
    return b->hist_g + (size_t)v * (size_t)b->first[b->d];
}

static int *hist_h_of(const booster *b, int v)
{
    return b->hist_h + (size_t)v * (size_t)b->first[b->d];
}

static int *nonempty_of(const booster *b, int v)
{
    return b->nonempty + (size_t)v * (size_t)b->first[b->d];
}

/* Lists node v's non-empty bins among the candidates (ascending), feature
 * j's candidates being candidates[start[j] .. start[j + 1]), and where each
 * feature's start in the list: branch-free. */
static void list_nonempty(booster *b, int v, const int *candidates, const int *start)
{
    const int *hh = hist_h_of(b, v);
    int *out = nonempty_of(b, v), *out_start = b->feature_start + (size_t)v * (size_t)(b->d + 1);
    int m = 0;
    for (int j = 0; j < b->d; j++) {
        out_start[j] = m;
        for (int i = start[j]; i < start[j + 1]; i++) {
            int k = candidates[i];
            out[m] = k;
            m += hh[k] != 0;
        }
    }
    out_start[b->d] = m;
    b->n_nonempty[v] = m;
}

/* After a split of node v: the larger child's histogram by subtraction
 * (small's from big's parent), and both children's non-empty bins, in one
 * pass over v's non-empty bins (the children's are among them). */
static void split_hists(booster *b, int v, int small, int big)
{
    const double *pg = hist_g_of(b, v), *sg = hist_g_of(b, small);
    const int *ph = hist_h_of(b, v), *sh = hist_h_of(b, small);
    double *bg = hist_g_of(b, big);
    int *bh = hist_h_of(b, big);
    const int *list = nonempty_of(b, v), *start = b->feature_start + (size_t)v * (size_t)(b->d + 1);
    int *out_s = nonempty_of(b, small), *out_b = nonempty_of(b, big);
    int *start_s = b->feature_start + (size_t)small * (size_t)(b->d + 1);
    int *start_b = b->feature_start + (size_t)big * (size_t)(b->d + 1);
    int ms = 0, mb = 0;
    for (int j = 0; j < b->d; j++) {
        start_s[j] = ms;
        start_b[j] = mb;
        for (int i = start[j]; i < start[j + 1]; i++) {
            int k = list[i], hs = sh[k], hb = ph[k] - hs;
            bg[k] = pg[k] - sg[k];
            bh[k] = hb;
            out_s[ms] = k;
            out_b[mb] = k;
            ms += hs != 0;
            mb += hb != 0;
        }
    }
    start_s[b->d] = ms;
    start_b[b->d] = mb;
    b->n_nonempty[small] = ms;
    b->n_nonempty[big] = mb;
}

/* Sums the gradients and counts of the rows of the marked nodes per bin
 * (one pass over the rows). Only the bins listed for each marked node's
 * parent are cleared: the only ones read later. */
static void build_hists(booster *b, const bool *marked)
{
    for (int v = 0; v < b->n_nodes; v++)
        if (marked[v]) {
            double *hg = hist_g_of(b, v);
            int *hh = hist_h_of(b, v);
            if (v == 0) {
                memset(hg, 0, (size_t)b->first[b->d] * sizeof *hg);
                memset(hh, 0, (size_t)b->first[b->d] * sizeof *hh);
            } else {
                int parent = b->node[v].parent, m = b->n_nonempty[parent];
                const int *list = nonempty_of(b, parent);
                for (int i = 0; i < m; i++) {
                    hg[list[i]] = 0;
                    hh[list[i]] = 0;
                }
            }
        }
    for (int r = 0; r < b->n; r++) {
        int v = b->pos[r];
        if (v < 0 || !marked[v])
            continue;
        double g = b->grad[r];
        double *hg = hist_g_of(b, v);
        int *hh = hist_h_of(b, v);
        const int *bins = b->bin + (size_t)r * (size_t)b->d;
        for (int j = 0; j < b->d; j++) {
            hg[bins[j]] += g;
            hh[bins[j]]++;
        }
    }
}

/* The best split of every node of the level from its histogram, scanning
 * each feature's non-empty bins. */
static void find_splits(booster *b, int level)
{
    for (int v = 0; v < b->n_nodes; v++) {
        boost_node *nd = &b->node[v];
        if (nd->depth != level)
            continue;
        nd->best_gain = MIN_GAIN;
        nd->best_feature = -1;
        double parent_gain = gain_at(nd->G, nd->H, node_weight(nd));
        const double *hg = hist_g_of(b, v);
        const int *hh = hist_h_of(b, v), *list = nonempty_of(b, v);
        const int *start = b->feature_start + (size_t)v * (size_t)(b->d + 1);
        for (int j = 0; j < b->d; j++)
            best_split_of(nd, parent_gain, j, b->monotone ? b->monotone[j] : 0, hg, hh, b->value, list + start[j],
                          start[j + 1] - start[j], b->inverse);
    }
}

static int add_node(booster *b, int parent, int depth, double lower, double upper)
{
    boost_node *nd = &b->node[b->n_nodes];
    memset(nd, 0, sizeof *nd);
    nd->parent = parent;
    nd->depth = depth;
    nd->lower = lower;
    nd->upper = upper;
    nd->feature = -1;
    nd->left = nd->right = -1;
    return b->n_nodes++;
}

/* Grows one tree of depth <= max_depth on the rows with pos >= 0 (all at
 * the root). Each split builds the histogram of its smaller child from its
 * rows and gets the larger one's by subtraction from the parent's. */
static void grow_tree(booster *b, int max_depth)
{
    bool marked[BOOST_MAX_NODES] = {true};
    b->n_nodes = 0;
    add_node(b, 2147483647, 0, -INFINITY, INFINITY);
    for (int r = 0; r < b->n; r++)
        if (b->pos[r] >= 0) {
            b->node[0].G += b->grad[r];
            b->node[0].H += 1;
        }
    build_hists(b, marked);
    list_nonempty(b, 0, b->all_bins, b->first);
    for (int level = 0; level < max_depth; level++) {
        find_splits(b, level);
        int first_child = b->n_nodes, n_open = b->n_nodes;
        for (int v = 0; v < n_open; v++) {
            boost_node *nd = &b->node[v];
            if (nd->depth != level || nd->best_feature < 0)
                continue;
            int c = b->monotone ? b->monotone[nd->best_feature] : 0;
            double mid = (nd->best_wl + nd->best_wr) * 0.5;
            double l_lo = nd->lower, l_hi = nd->upper, r_lo = nd->lower, r_hi = nd->upper;
            if (c < 0) { /* never rising: left >= mid >= right */
                l_lo = mid;
                r_hi = mid;
            } else if (c > 0) {
                l_hi = mid;
                r_lo = mid;
            }
            nd->feature = nd->best_feature;
            nd->threshold = nd->best_threshold;
            nd->left = add_node(b, v, level + 1, l_lo, l_hi);
            nd->right = add_node(b, v, level + 1, r_lo, r_hi);
        }
        if (b->n_nodes == first_child)
            break;
        for (int r = 0; r < b->n; r++) {
            int v = b->pos[r];
            if (v < 0 || b->node[v].feature < 0)
                continue;
            const boost_node *nd = &b->node[v];
            int child = b->col[(size_t)nd->feature * (size_t)b->n + (size_t)r] < nd->threshold ? nd->left : nd->right;
            b->pos[r] = child;
            b->node[child].G += b->grad[r];
            b->node[child].H += 1;
        }
        if (level + 1 == max_depth)
            break; /* the children are leaves: no histograms needed */
        memset(marked, 0, sizeof marked);
        for (int v = 0; v < n_open; v++)
            if (b->node[v].depth == level && b->node[v].feature >= 0) {
                const boost_node *nd = &b->node[v];
                marked[b->node[nd->left].H <= b->node[nd->right].H ? nd->left : nd->right] = true;
            }
        build_hists(b, marked);
        for (int v = 0; v < n_open; v++)
            if (b->node[v].depth == level && b->node[v].feature >= 0) {
                const boost_node *nd = &b->node[v];
                int small = marked[nd->left] ? nd->left : nd->right, big = small == nd->left ? nd->right : nd->left;
                split_hists(b, v, small, big);
            }
    }
}

static void put_tree(text_buf *t, const booster *b, int id, double eta)
{
    const char *sep = id ? "," : "";
    tb_printf(t, "%s{\"id\":%d,\"tree_param\":{\"num_nodes\":\"%d\",\"num_feature\":\"%d\",\"size_leaf_vector\":\"0\"}",
        sep, id, b->n_nodes, b->d);
    tb_printf(t, ",\"left_children\":[");
    for (int v = 0; v < b->n_nodes; v++)
        tb_printf(t, "%s%d", v ? "," : "", b->node[v].left);
    tb_printf(t, "],\"right_children\":[");
    for (int v = 0; v < b->n_nodes; v++)
        tb_printf(t, "%s%d", v ? "," : "", b->node[v].right);
    tb_printf(t, "],\"split_indices\":[");
    for (int v = 0; v < b->n_nodes; v++)
        tb_printf(t, "%s%d", v ? "," : "", b->node[v].feature < 0 ? 0 : b->node[v].feature);
    tb_printf(t, "],\"split_conditions\":[");
    for (int v = 0; v < b->n_nodes; v++) {
        const boost_node *nd = &b->node[v];
        float value = nd->feature >= 0 ? nd->threshold : (float)(eta * node_weight(nd));
        tb_printf(t, "%s%.9g", v ? "," : "", (double)value);
    }
    tb_printf(t, "],\"default_left\":[");
    for (int v = 0; v < b->n_nodes; v++)
        tb_printf(t, "%s%d", v ? "," : "", 0);
    tb_printf(t, "],\"parents\":[");
    for (int v = 0; v < b->n_nodes; v++)
        tb_printf(t, "%s%d", v ? "," : "", b->node[v].parent);
    tb_printf(t, "]}");
}

/* The tree's prediction for row r of the column-major data (leaf values as
 * stored: float). */
static float tree_value(const booster *b, int r, double eta)
{
    int v = 0;
    while (b->node[v].feature >= 0) {
        const boost_node *nd = &b->node[v];
        v = b->col[(size_t)nd->feature * (size_t)b->n + (size_t)r] < nd->threshold ? nd->left : nd->right;
    }
    return (float)(eta * node_weight(&b->node[v]));
}

/* The same for a row given as d floats. */
static float tree_value_at(const booster *b, const float *x, double eta)
{
    int v = 0;
    while (b->node[v].feature >= 0) {
        const boost_node *nd = &b->node[v];
        v = x[nd->feature] < nd->threshold ? nd->left : nd->right;
    }
    return (float)(eta * node_weight(&b->node[v]));
}

/* The binned training matrix: every feature's distinct values, sorted
 * once, shared by every fit on these rows (cross-validation folds). */
struct kace_boost_data {
    int n, d;
    float *col;     /* d columns of n floats */
    float *value;   /* see booster */
    int *first, *bin, *all_bins;
    double *inverse;
};

void kace_boost_data_free(kace_boost_data **data)
{
    if (!data || !*data)
        return;
    kace_boost_data *x = *data;
    free(x->col);
    free(x->value);
    free(x->first);
    free(x->bin);
    free(x->all_bins);
    free(x->inverse);
    free(x);
    *data = NULL;
}

kace_status kace_boost_data_new(kace_ctx *ctx, const double *X, size_t n_rows, int d, kace_boost_data **out)
{
    *out = NULL;
    if (n_rows < 1 || n_rows > (1u << 24) || d < 1 || d > KACE_MAX_FEATURES)
        return kace_fail(ctx, KACE_ERR_INVALID, "boosted trees: %zu rows of %d features is out of range", n_rows, d);
    for (size_t i = 0; i < n_rows * (size_t)d; i++)
        if (!isfinite(X[i]) || fabs(X[i]) > 3.0e38)
            return kace_fail(ctx, KACE_ERR_INVALID, "boosted trees: feature %zu of row %zu is not finite",
                             i % (size_t)d, i / (size_t)d);
    int n = (int)n_rows;
    size_t cells = (size_t)n * (size_t)d;
    kace_boost_data *x = calloc(1, sizeof *x);
    sort_item *sorted = malloc((size_t)n * sizeof *sorted);
    if (x) {
        x->n = n;
        x->d = d;
        x->col = malloc(cells * sizeof *x->col);
        x->value = malloc(cells * sizeof *x->value);
        x->first = malloc(((size_t)d + 1) * sizeof *x->first);
        x->bin = malloc(cells * sizeof *x->bin);
        x->all_bins = malloc(cells * sizeof *x->all_bins);
        x->inverse = malloc(((size_t)n + 1) * sizeof *x->inverse);
    }
    if (!x || !sorted || !x->col || !x->value || !x->first || !x->bin || !x->all_bins ||
        !x->inverse) {
        free(sorted);
        kace_boost_data_free(&x);
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory fitting boosted trees");
    }
    x->inverse[0] = 0;
    for (int k = 1; k <= n; k++)
        x->inverse[k] = 1.0 / k;
    int n_values = 0;
    for (int j = 0; j < d; j++) {
        for (int i = 0; i < n; i++) {
            x->col[(size_t)j * (size_t)n + (size_t)i] = (float)X[(size_t)i * (size_t)d + (size_t)j];
            sorted[i].value = x->col[(size_t)j * (size_t)n + (size_t)i];
            sorted[i].row = i;
        }
        qsort(sorted, (size_t)n, sizeof *sorted, by_value);
        x->first[j] = n_values;
        for (int i = 0; i < n; i++) {
            if (i == 0 || sorted[i].value > sorted[i - 1].value)
                x->value[n_values++] = sorted[i].value;
            x->bin[(size_t)sorted[i].row * (size_t)d + (size_t)j] = n_values - 1;
        }
    }
    x->first[d] = n_values;
    for (int k = 0; k < n_values; k++)
        x->all_bins[k] = k;
    free(sorted);
    *out = x;
    return KACE_OK;
}

/* Appends the tree just grown to trees (capacity checked by the caller). */
static void keep_tree(const booster *b, double eta, kace_trees *trees)
{
    int base = trees->n_nodes;
    trees->tree_root[trees->n_trees++] = base;
    for (int v = 0; v < b->n_nodes; v++) {
        const boost_node *nd = &b->node[v];
        kace_tree_node *out = &trees->node[base + v];
        bool leaf = nd->feature < 0;
        out->feature = leaf ? 0 : nd->feature;
        out->threshold = leaf ? (float)(eta * node_weight(nd)) : nd->threshold;
        out->left = leaf ? -1 : base + nd->left;
        out->right = leaf ? -1 : base + nd->right;
        out->default_left = 0;
        if (nd->depth > trees->max_depth)
            trees->max_depth = nd->depth;
    }
    trees->n_nodes += b->n_nodes;
}

static kace_status train(kace_ctx *ctx, const kace_boost_data *data, const double *y, const unsigned char *use,
                         const kace_boost_params *p, char **json_out, size_t *json_len, const double *X_eval,
                         size_t n_eval, double *eval_out, kace_trees *trees)
{
    if (json_out) {
        *json_out = NULL;
        *json_len = 0;
    }
    int n = data->n, d = data->d;
    if (p->n_rounds < 1 || p->n_rounds > 100000 || p->max_depth < 1 || p->max_depth > BOOST_MAX_DEPTH ||
        !(p->learning_rate > 0) || !(p->subsample > 0 && p->subsample <= 1))
        return kace_fail(ctx, KACE_ERR_INVALID, "boosted trees: parameters out of range");
    for (size_t i = 0; i < n_eval * (size_t)d; i++)
        if (!isfinite(X_eval[i]) || fabs(X_eval[i]) > 3.0e38)
            return kace_fail(ctx, KACE_ERR_INVALID, "boosted trees: feature %zu of row %zu to predict is not finite",
                             i % (size_t)d, i / (size_t)d);
    int n_used = 0;
    for (int i = 0; i < n; i++) {
        if (use && !use[i])
            continue;
        if (!isfinite(y[i]))
            return kace_fail(ctx, KACE_ERR_INVALID, "boosted trees: label of row %d is not finite", i);
        n_used++;
    }
    if (n_used < 1)
        return kace_fail(ctx, KACE_ERR_INVALID, "boosted trees: no rows to fit");
    booster b = {.n = n,
                 .d = d,
                 .col = data->col,
                 .value = data->value,
                 .first = data->first,
                 .bin = data->bin,
                 .all_bins = data->all_bins,
                 .inverse = data->inverse,
                 .monotone = p->monotone};
    double *pred = malloc((size_t)n * sizeof *pred);
    b.grad = malloc((size_t)n * sizeof *b.grad);
    b.pos = malloc((size_t)n * sizeof *b.pos);
    /* a histogram for each node above the leaves' level (ids < 2^max_depth - 1) */
    size_t n_hist_nodes = ((size_t)1 << p->max_depth) - 1, total_bins = (size_t)data->first[d];
    b.hist_g = malloc(n_hist_nodes * total_bins * sizeof *b.hist_g);
    b.hist_h = malloc(n_hist_nodes * total_bins * sizeof *b.hist_h);
    b.nonempty = malloc(n_hist_nodes * total_bins * sizeof *b.nonempty);
    b.n_nonempty = malloc(n_hist_nodes * sizeof *b.n_nonempty);
    b.feature_start = malloc(n_hist_nodes * ((size_t)d + 1) * sizeof *b.feature_start);
    int *used = malloc((size_t)n_used * sizeof *used), *pick = malloc((size_t)n_used * sizeof *pick);
    float *acc = calloc((size_t)n, sizeof *acc); /* the trees' summed outputs */
    float *x_eval = malloc((n_eval ? n_eval : 1) * (size_t)d * sizeof *x_eval);
    float *acc_eval = calloc(n_eval ? n_eval : 1, sizeof *acc_eval);
    text_buf t = {0};
    kace_status st = KACE_OK;
    if (!pred || !b.grad || !b.pos || !b.hist_g || !b.hist_h || !b.nonempty || !b.n_nonempty || !b.feature_start ||
        !used || !pick || !acc || !x_eval || !acc_eval) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory fitting boosted trees");
        goto done;
    }
    double mean = 0;
    for (int i = 0, at = 0; i < n; i++)
        if (!use || use[i])
            used[at++] = i;
    for (int u = 0; u < n_used; u++)
        mean += y[used[u]] / n_used;
    for (int i = 0; i < n; i++) {
        pred[i] = mean;
        b.pos[i] = -1;
    }
    int n_sample = p->subsample < 1 ? (int)floor(p->subsample * n_used) : n_used;
    if (n_sample < 1)
        n_sample = 1;
    for (size_t i = 0; i < n_eval * (size_t)d; i++)
        x_eval[i] = (float)X_eval[i];
    uint64_t rng = p->seed ^ 0x6b616365u;
    if (json_out)
        tb_printf(&t, "{\"learner\":{\"learner_model_param\":{\"base_score\":\"%.17g\",\"num_feature\":\"%d\"},"
            "\"gradient_booster\":{\"model\":{\"trees\":[",
            mean, d);
    for (int round = 0; round < p->n_rounds; round++) {
        for (int u = 0; u < n_used; u++) {
            int i = used[u];
            /* in float, as xgboost computes gradients: the same data then
             * gives the same trees */
            b.grad[i] = (double)((float)pred[i] - (float)y[i]);
            b.pos[i] = n_sample == n_used ? 0 : -1;
        }
        if (n_sample < n_used) { /* n_sample rows without replacement (partial Fisher-Yates) */
            memcpy(pick, used, (size_t)n_used * sizeof *pick);
            for (int i = 0; i < n_sample; i++) {
                int k = i + (int)(splitmix64(&rng) % (uint64_t)(n_used - i));
                int tmp = pick[i];
                pick[i] = pick[k];
                pick[k] = tmp;
                b.pos[pick[i]] = 0;
            }
        }
        grow_tree(&b, p->max_depth);
        if (json_out)
            put_tree(&t, &b, round, p->learning_rate);
        if (trees)
            keep_tree(&b, p->learning_rate, trees);
        for (size_t i = 0; i < n_eval; i++)
            acc_eval[i] += tree_value_at(&b, x_eval + i * (size_t)d, p->learning_rate);
        /* A sampled row already sits at its leaf (grow_tree moved it there
         * by the same test a walk makes): only the others walk. */
        float leaf_value[BOOST_MAX_NODES];
        for (int v = 0; v < b.n_nodes; v++)
            leaf_value[v] = b.node[v].feature < 0 ? (float)(p->learning_rate * node_weight(&b.node[v])) : 0;
        for (int u = 0; u < n_used; u++) { /* in float, as kace_trees_predict sums */
            int i = used[u];
            acc[i] += b.pos[i] >= 0 ? leaf_value[b.pos[i]] : tree_value(&b, i, p->learning_rate);
            pred[i] = (double)(acc[i] + (float)mean);
        }
    }
    for (size_t i = 0; i < n_eval; i++)
        eval_out[i] = (double)acc_eval[i] + mean;
    if (trees) {
        /* the base score as the JSON text gives it back */
        char text_of_mean[32];
        snprintf(text_of_mean, sizeof text_of_mean, "%.17g", mean);
        trees->base_score = strtod(text_of_mean, NULL);
        kace_trees_finish(trees);
    }
    if (!json_out)
        goto done;
    tb_printf(&t, "],\"tree_info\":[");
    for (int round = 0; round < p->n_rounds; round++)
        tb_printf(&t, "%s0", round ? "," : "");
    tb_printf(&t, "]}}}}");
    if (t.oom || !t.p) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory writing boosted trees");
        goto done;
    }
    *json_out = t.p;
    *json_len = t.len;
    t.p = NULL;
done:
    free(t.p);
    free(b.hist_g);
    free(b.hist_h);
    free(b.nonempty);
    free(b.n_nonempty);
    free(b.feature_start);
    free(x_eval);
    free(acc_eval);
    free(pred);
    free(b.grad);
    free(b.pos);
    free(used);
    free(pick);
    free(acc);
    return st;
}

kace_status kace_boost_train(kace_ctx *ctx, const kace_boost_data *data, const double *y, const unsigned char *use,
                             const kace_boost_params *p, char **json, size_t *json_len, const double *X_eval,
                             size_t n_eval, double *eval_out)
{
    return train(ctx, data, y, use, p, json, json_len, X_eval, n_eval, eval_out, NULL);
}

kace_status kace_boost_train_trees(kace_ctx *ctx, const kace_boost_data *data, const double *y,
                                   const kace_boost_params *p, char **json, size_t *json_len, kace_trees *trees)
{
    memset(trees, 0, sizeof *trees);
    if (p->max_depth < 1 || p->max_depth > BOOST_MAX_DEPTH || p->n_rounds < 1 || p->n_rounds > 100000)
        return kace_fail(ctx, KACE_ERR_INVALID, "boosted trees: parameters out of range");
    int per_tree = (1 << (p->max_depth + 1)) - 1;
    trees->tree_root = malloc((size_t)p->n_rounds * sizeof *trees->tree_root);
    trees->node = malloc((size_t)p->n_rounds * (size_t)per_tree * sizeof *trees->node);
    if (!trees->tree_root || !trees->node) {
        kace_trees_free(trees);
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory fitting boosted trees");
    }
    kace_status st = train(ctx, data, y, NULL, p, json, json_len, NULL, 0, NULL, trees);
    if (st)
        kace_trees_free(trees);
    return st;
}

kace_status kace_boost_fit(kace_ctx *ctx, const double *X, const double *y, size_t n_rows, int d,
                           const kace_boost_params *p, char **json_out, size_t *json_len, const double *X_eval,
                           size_t n_eval, double *eval_out)
{
    if (json_out) {
        *json_out = NULL;
        *json_len = 0;
    }
    kace_boost_data *data = NULL;
    kace_status st = kace_boost_data_new(ctx, X, n_rows, d, &data);
    if (!st)
        st = train(ctx, data, y, NULL, p, json_out, json_len, X_eval, n_eval, eval_out, NULL);
    kace_boost_data_free(&data);
    return st;
}
