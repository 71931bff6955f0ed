/* Gradient-boosted regression trees for small training sets.
 *
 * Why not libxgboost here: the slowdown model fits ~250 member samples, and
 * at that size xgboost's fixed cost per boosting round (~0.4 ms) is the
 * whole fit (40+ ms for 100 rounds, against the 50 ms budget), which also
 * rules out choosing settings by cross-validation. This booster does the
 * same algorithm as xgboost's exact greedy method on squared error (no L2
 * on leaves, min_child_weight 1, gamma 0, monotone constraints enforced by
 * bounding the leaf weights) in ~1/20 of the time: every feature is sorted
 * once, and each tree level is one pass over every feature.
 * tests/test_boost.c checks it against libxgboost on the same data.
 *
 * The result is written in the JSON layout of an xgboost model, so the
 * trees are stored, read back and checked exactly like xgboost's
 * (kace_trees_from_json). */
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_internal.h"

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
    double *hist_g; /* per open node of a level, per bin: gradient sum */
    int *hist_h;    /* ... and row count */
    int *nonempty;  /* scratch: a node's non-empty bins */
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

/* Sums the gradients and counts of the rows of the marked nodes per bin
 * (one pass over the rows). */
static void build_hists(booster *b, const bool *marked)
{
    size_t total_bins = (size_t)b->first[b->d];
    for (int v = 0; v < b->n_nodes; v++)
        if (marked[v]) {
            memset(hist_g_of(b, v), 0, total_bins * sizeof *b->hist_g);
            memset(hist_h_of(b, v), 0, total_bins * sizeof *b->hist_h);
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

/* The best split of every node of the level from its histogram: its
 * non-empty bins are listed first (deep nodes have few), then each
 * feature's are scanned. */
static void find_splits(booster *b, int level)
{
    int total_bins = b->first[b->d];
    for (int v = 0; v < b->n_nodes; v++) {
        boost_node *nd = &b->node[v];
        if (nd->depth != level)
            continue;
        nd->best_gain = MIN_GAIN;
        nd->best_feature = -1;
        double parent_gain = gain_at(nd->G, nd->H, node_weight(nd));
        const double *hg = hist_g_of(b, v);
        const int *hh = hist_h_of(b, v);
        int m = 0;
        for (int k = 0; k < total_bins; k++) { /* branch-free compaction */
            b->nonempty[m] = k;
            m += hh[k] != 0;
        }
        int at = 0;
        for (int j = 0; j < b->d; j++) {
            int from = at;
            while (at < m && b->nonempty[at] < b->first[j + 1])
                at++;
            best_split_of(nd, parent_gain, j, b->monotone ? b->monotone[j] : 0, hg, hh, b->value,
                          b->nonempty + from, at - from, b->inverse);
        }
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
    size_t total_bins = (size_t)b->first[b->d];
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
                const double *pg = hist_g_of(b, v), *sg = hist_g_of(b, small);
                const int *ph = hist_h_of(b, v), *sh = hist_h_of(b, small);
                double *bg = hist_g_of(b, big);
                int *bh = hist_h_of(b, big);
                for (size_t k = 0; k < total_bins; k++) {
                    bg[k] = pg[k] - sg[k];
                    bh[k] = ph[k] - sh[k];
                }
            }
    }
}

/* A growable text buffer; fails once and stays failed. */
typedef struct text {
    char *p;
    size_t len, cap;
    bool failed;
} text;

static void put(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(text *t, const char *fmt, ...)
{
    if (t->failed)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int w = vsnprintf(t->p + t->len, t->cap - t->len, fmt, ap);
        va_end(ap);
        if (w < 0) {
            t->failed = true;
            return;
        }
        if ((size_t)w < t->cap - t->len) {
            t->len += (size_t)w;
            return;
        }
        size_t cap = t->cap * 2 + (size_t)w + 1;
        char *p = realloc(t->p, cap);
        if (!p) {
            t->failed = true;
            return;
        }
        t->p = p;
        t->cap = cap;
    }
}

static void put_tree(text *t, const booster *b, int id, double eta)
{
    const char *sep = id ? "," : "";
    put(t, "%s{\"id\":%d,\"tree_param\":{\"num_nodes\":\"%d\",\"num_feature\":\"%d\",\"size_leaf_vector\":\"0\"}",
        sep, id, b->n_nodes, b->d);
    put(t, ",\"left_children\":[");
    for (int v = 0; v < b->n_nodes; v++)
        put(t, "%s%d", v ? "," : "", b->node[v].left);
    put(t, "],\"right_children\":[");
    for (int v = 0; v < b->n_nodes; v++)
        put(t, "%s%d", v ? "," : "", b->node[v].right);
    put(t, "],\"split_indices\":[");
    for (int v = 0; v < b->n_nodes; v++)
        put(t, "%s%d", v ? "," : "", b->node[v].feature < 0 ? 0 : b->node[v].feature);
    put(t, "],\"split_conditions\":[");
    for (int v = 0; v < b->n_nodes; v++) {
        const boost_node *nd = &b->node[v];
        float value = nd->feature >= 0 ? nd->threshold : (float)(eta * node_weight(nd));
        put(t, "%s%.9g", v ? "," : "", (double)value);
    }
    put(t, "],\"default_left\":[");
    for (int v = 0; v < b->n_nodes; v++)
        put(t, "%s%d", v ? "," : "", 0);
    put(t, "],\"parents\":[");
    for (int v = 0; v < b->n_nodes; v++)
        put(t, "%s%d", v ? "," : "", b->node[v].parent);
    put(t, "]}");
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

kace_status kace_boost_fit(kace_ctx *ctx, const double *X, const double *y, size_t n_rows, int d,
                           const kace_boost_params *p, char **json_out, size_t *json_len, const double *X_eval,
                           size_t n_eval, double *eval_out)
{
    if (json_out) {
        *json_out = NULL;
        *json_len = 0;
    }
    if (n_rows < 1 || n_rows > (1u << 24) || d < 1 || d > KACE_MAX_FEATURES || p->n_rounds < 1 ||
        p->n_rounds > 100000 || p->max_depth < 1 || p->max_depth > BOOST_MAX_DEPTH || !(p->learning_rate > 0) ||
        !(p->subsample > 0 && p->subsample <= 1))
        return kace_fail(ctx, KACE_ERR_INVALID, "boosted trees: parameters out of range");
    int n = (int)n_rows;
    for (size_t i = 0; i < n_rows * (size_t)d; i++)
        if (!isfinite(X[i]) || fabs(X[i]) > 3.0e38)
            return kace_fail(ctx, KACE_ERR_INVALID, "boosted trees: feature %zu of row %zu is not finite",
                             i % (size_t)d, i / (size_t)d);
    for (size_t i = 0; i < n_eval * (size_t)d; i++)
        if (!isfinite(X_eval[i]) || fabs(X_eval[i]) > 3.0e38)
            return kace_fail(ctx, KACE_ERR_INVALID, "boosted trees: feature %zu of row %zu to predict is not finite",
                             i % (size_t)d, i / (size_t)d);
    for (int i = 0; i < n; i++)
        if (!isfinite(y[i]))
            return kace_fail(ctx, KACE_ERR_INVALID, "boosted trees: label of row %d is not finite", i);
    booster b = {.n = n, .d = d, .monotone = p->monotone};
    float *col = malloc((size_t)n * (size_t)d * sizeof *col);
    float *value = malloc((size_t)n * (size_t)d * sizeof *value);
    sort_item *sorted = malloc((size_t)n * sizeof *sorted);
    int *first = malloc(((size_t)d + 1) * sizeof *first), *bin = malloc((size_t)n * (size_t)d * sizeof *bin);
    double *inverse = malloc(((size_t)n + 1) * sizeof *inverse);
    double *pred = malloc((size_t)n * sizeof *pred);
    b.grad = malloc((size_t)n * sizeof *b.grad);
    b.pos = malloc((size_t)n * sizeof *b.pos);
    /* a histogram for each node above the leaves' level (ids < 2^max_depth - 1) */
    size_t hist_size = (((size_t)1 << p->max_depth) - 1) * (size_t)n * (size_t)d;
    b.hist_g = malloc(hist_size * sizeof *b.hist_g);
    b.hist_h = malloc(hist_size * sizeof *b.hist_h);
    b.nonempty = malloc((size_t)n * (size_t)d * sizeof *b.nonempty);
    int *pick = malloc((size_t)n * sizeof *pick);
    float *acc = calloc((size_t)n, sizeof *acc); /* the trees' summed outputs */
    float *x_eval = malloc((n_eval ? n_eval : 1) * (size_t)d * sizeof *x_eval);
    float *acc_eval = calloc(n_eval ? n_eval : 1, sizeof *acc_eval);
    text t = {.cap = json_out ? 4096 : 0};
    t.p = json_out ? malloc(t.cap) : NULL;
    kace_status st = KACE_OK;
    if (!col || !value || !sorted || !first || !bin || !inverse || !pred || !b.grad || !b.pos || !b.hist_g ||
        !b.hist_h || !b.nonempty || !pick || !acc || !x_eval ||
        !acc_eval || (json_out && !t.p)) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory fitting boosted trees");
        goto done;
    }
    b.col = col;
    b.value = value;
    b.first = first;
    b.bin = bin;
    b.inverse = inverse;
    inverse[0] = 0;
    for (int k = 1; k <= n; k++)
        inverse[k] = 1.0 / k;
    double mean = 0;
    for (int i = 0; i < n; i++)
        mean += y[i] / n;
    int n_values = 0;
    for (int j = 0; j < d; j++) {
        for (int i = 0; i < n; i++) {
            col[(size_t)j * (size_t)n + (size_t)i] = (float)X[(size_t)i * (size_t)d + (size_t)j];
            sorted[i].value = col[(size_t)j * (size_t)n + (size_t)i];
            sorted[i].row = i;
        }
        qsort(sorted, (size_t)n, sizeof *sorted, by_value);
        first[j] = n_values;
        for (int i = 0; i < n; i++) {
            if (i == 0 || sorted[i].value > sorted[i - 1].value)
                value[n_values++] = sorted[i].value;
            bin[(size_t)sorted[i].row * (size_t)d + (size_t)j] = n_values - 1;
        }
    }
    first[d] = n_values;
    for (int i = 0; i < n; i++)
        pred[i] = mean;
    int n_sample = p->subsample < 1 ? (int)floor(p->subsample * n) : n;
    if (n_sample < 1)
        n_sample = 1;
    for (size_t i = 0; i < n_eval * (size_t)d; i++)
        x_eval[i] = (float)X_eval[i];
    uint64_t rng = p->seed ^ 0x6b616365u;
    if (json_out)
        put(&t, "{\"learner\":{\"learner_model_param\":{\"base_score\":\"%.17g\",\"num_feature\":\"%d\"},"
            "\"gradient_booster\":{\"model\":{\"trees\":[",
        mean, d);
    for (int round = 0; round < p->n_rounds; round++) {
        for (int i = 0; i < n; i++) {
            /* in float, as xgboost computes gradients: the same data then
             * gives the same trees */
            b.grad[i] = (double)((float)pred[i] - (float)y[i]);
            b.pos[i] = n_sample == n ? 0 : -1;
        }
        if (n_sample < n) { /* n_sample rows without replacement (partial Fisher-Yates) */
            for (int i = 0; i < n; i++)
                pick[i] = i;
            for (int i = 0; i < n_sample; i++) {
                int k = i + (int)(splitmix64(&rng) % (uint64_t)(n - i));
                int tmp = pick[i];
                pick[i] = pick[k];
                pick[k] = tmp;
                b.pos[pick[i]] = 0;
            }
        }
        grow_tree(&b, p->max_depth);
        if (json_out)
            put_tree(&t, &b, round, p->learning_rate);
        for (size_t i = 0; i < n_eval; i++)
            acc_eval[i] += tree_value_at(&b, x_eval + i * (size_t)d, p->learning_rate);
        for (int i = 0; i < n; i++) { /* in float, as kace_trees_predict sums */
            acc[i] += tree_value(&b, i, p->learning_rate);
            pred[i] = (double)(acc[i] + (float)mean);
        }
    }
    for (size_t i = 0; i < n_eval; i++)
        eval_out[i] = (double)acc_eval[i] + mean;
    if (!json_out)
        goto done;
    put(&t, "],\"tree_info\":[");
    for (int round = 0; round < p->n_rounds; round++)
        put(&t, "%s0", round ? "," : "");
    put(&t, "]}}}}");
    if (t.failed) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory writing boosted trees");
        goto done;
    }
    *json_out = t.p;
    *json_len = t.len;
    t.p = NULL;
done:
    free(t.p);
    free(col);
    free(value);
    free(sorted);
    free(first);
    free(bin);
    free(inverse);
    free(b.hist_g);
    free(b.hist_h);
    free(b.nonempty);
    free(x_eval);
    free(acc_eval);
    free(pred);
    free(b.grad);
    free(b.pos);
    free(pick);
    free(acc);
    return st;
}
