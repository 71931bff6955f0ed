/* Regression trees in flat arrays (trees.h): read from xgboost's JSON and
 * checked, evaluated by kace itself (the forest, the slowdown model's trees
 * and kace's own booster share them). */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "trees.h"

/* The AVX-512 path for depth-3 trees: x86-64 with GCC or Clang, which
 * compile one function for AVX-512 while the rest stays portable; the CPU
 * is asked at build time (kace_trees_finish). */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TREES_AVX512 1
#include <immintrin.h>
#define AVX512_FN __attribute__((target("avx512f")))
#else
#define TREES_AVX512 0
#endif

/* xgboost trusts a model buffer: a cyclic tree makes prediction loop forever
 * and inconsistent counts crash the loader. So a booster read from a file is
 * checked here first: tree count, feature count, node arrays, children. */
static int json_int(const cJSON *o, const char *key, long *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (cJSON_IsNumber(v)) {
        *out = (long)v->valuedouble;
        return v->valuedouble == (double)*out ? 0 : -1;
    }
    if (cJSON_IsString(v)) {
        char *end = NULL;
        *out = strtol(v->valuestring, &end, 10);
        return (end != v->valuestring && *end == '\0') ? 0 : -1;
    }
    return -1;
}

static const cJSON *json_path(const cJSON *o, const char *const *keys, int n)
{
    for (int i = 0; i < n && o; i++)
        o = cJSON_GetObjectItemCaseSensitive(o, keys[i]);
    return o;
}

void kace_trees_free(kace_trees *m)
{
    free(m->tree_root);
    free(m->node);
    free(m->c_feature);
    free(m->c_threshold);
    free(m->c_leaf);
    free(m->monotone);
    free(m->v_feature);
    free(m->v_threshold);
    free(m->v_leaf);
    memset(m, 0, sizeof *m);
}

#define MONOTONE_MAX_LEAVES 32

typedef struct leaf_region {
    float value;
    float lo[KACE_MAX_FEATURES], hi[KACE_MAX_FEATURES]; /* lo <= x < hi on the leaf's path */
} leaf_region;

/* The leaves under node v and the regions their paths carve out; -1 when
 * there are more than MONOTONE_MAX_LEAVES. */
static int leaf_regions(const kace_trees *t, int v, float *lo, float *hi, int nf, leaf_region *out, int n)
{
    if (n < 0 || n >= MONOTONE_MAX_LEAVES)
        return -1;
    const kace_tree_node *nd = &t->node[v];
    if (nd->left < 0) {
        out[n].value = nd->threshold;
        memcpy(out[n].lo, lo, (size_t)nf * sizeof *lo);
        memcpy(out[n].hi, hi, (size_t)nf * sizeof *hi);
        return n + 1;
    }
    int f = nd->feature;
    float keep = hi[f];
    hi[f] = fminf(keep, nd->threshold);
    n = leaf_regions(t, nd->left, lo, hi, nf, out, n);
    hi[f] = keep;
    keep = lo[f];
    lo[f] = fmaxf(keep, nd->threshold);
    n = leaf_regions(t, nd->right, lo, hi, nf, out, n);
    lo[f] = keep;
    return n;
}

/* A tree is monotone in feature j when any two points that differ only in
 * j are ordered by value. Two such points lie in leaves whose regions
 * overlap in every feature but j (and are apart in j), so it is enough to
 * compare the leaves of each such pair. */
void kace_trees_find_monotone(kace_trees *t, int n_features)
{
    free(t->monotone);
    t->monotone = NULL;
    if (n_features < 1 || n_features > KACE_MAX_FEATURES || t->n_trees < 1)
        return;
    signed char *mono = calloc((size_t)t->n_trees * (size_t)n_features, 1);
    leaf_region *leaf = malloc(MONOTONE_MAX_LEAVES * sizeof *leaf);
    if (!mono || !leaf) {
        free(mono);
        free(leaf);
        return;
    }
    for (int i = 0; i < t->n_trees; i++) {
        float lo[KACE_MAX_FEATURES], hi[KACE_MAX_FEATURES];
        for (int f = 0; f < n_features; f++) {
            lo[f] = -INFINITY;
            hi[f] = INFINITY;
        }
        int n = leaf_regions(t, t->tree_root[i], lo, hi, n_features, leaf, 0);
        if (n < 0)
            continue; /* too large to check: 0s */
        bool falls[KACE_MAX_FEATURES], rises[KACE_MAX_FEATURES]; /* somewhere, as the feature grows */
        memset(falls, 0, sizeof falls);
        memset(rises, 0, sizeof rises);
        for (int a = 0; a < n; a++)
            for (int b = a + 1; b < n; b++) {
                int apart = 0, j = -1;
                for (int f = 0; f < n_features && apart < 2; f++)
                    if (!(fmaxf(leaf[a].lo[f], leaf[b].lo[f]) < fminf(leaf[a].hi[f], leaf[b].hi[f]))) {
                        apart++;
                        j = f;
                    }
                if (apart != 1)
                    continue; /* no two points differing in one feature only */
                const leaf_region *low = &leaf[a], *high = &leaf[b];
                if (leaf[b].hi[j] <= leaf[a].lo[j]) {
                    low = &leaf[b];
                    high = &leaf[a];
                } else if (!(leaf[a].hi[j] <= leaf[b].lo[j])) {
                    falls[j] = rises[j] = true; /* an empty region: do not decide */
                    continue;
                }
                falls[j] |= high->value < low->value;
                rises[j] |= high->value > low->value;
            }
        for (int f = 0; f < n_features; f++)
            mono[(size_t)i * (size_t)n_features + (size_t)f] = (signed char)(!rises[f] ? -1 : !falls[f] ? 1 : 0);
    }
    free(leaf);
    t->monotone = mono;
}

/* Writes the subtree of node v at position p (depth d) of a complete tree
 * of depth D. A leaf above depth D becomes splits that always go left
 * (threshold +inf) down to the leftmost leaf slot, which holds its value. */
static void complete_fill(const kace_trees *t, int v, int p, int d, int D, int *feat, float *thr, float *leaf)
{
    const kace_tree_node *nd = &t->node[v];
    if (d == D) {
        leaf[p - ((1 << D) - 1)] = nd->threshold;
        return;
    }
    if (nd->left < 0) {
        feat[p] = 0;
        thr[p] = INFINITY;
        complete_fill(t, v, 2 * p + 1, d + 1, D, feat, thr, leaf);
        complete_fill(t, v, 2 * p + 2, d + 1, D, feat, thr, leaf); /* never reached, kept defined */
        return;
    }
    feat[p] = nd->feature;
    thr[p] = nd->threshold;
    complete_fill(t, nd->left, 2 * p + 1, d + 1, D, feat, thr, leaf);
    complete_fill(t, nd->right, 2 * p + 2, d + 1, D, feat, thr, leaf);
}

/* The blocks of 16 depth-3 trees of the AVX-512 path, from the complete
 * trees. Padding trees split on feature 0 and have leaves 0; their leaves
 * are never added. */
static void build_blocks(kace_trees *t)
{
    int nb = (t->n_trees + 15) / 16;
    size_t n_split = (size_t)nb * 7 * 16, n_leaf = (size_t)nb * 8 * 16; /* multiples of 64 bytes */
    t->v_feature = aligned_alloc(64, n_split * sizeof *t->v_feature);
    t->v_threshold = aligned_alloc(64, n_split * sizeof *t->v_threshold);
    t->v_leaf = aligned_alloc(64, n_leaf * sizeof *t->v_leaf);
    if (!t->v_feature || !t->v_threshold || !t->v_leaf) {
        free(t->v_feature);
        free(t->v_threshold);
        free(t->v_leaf);
        t->v_feature = NULL;
        t->v_threshold = t->v_leaf = NULL;
        return; /* the portable path still works */
    }
    t->v_max_feature = 0;
    for (int i = 0; i < nb * 16; i++) {
        size_t b = (size_t)(i / 16), lane = (size_t)(i % 16);
        for (size_t p = 0; p < 7; p++) {
            int f = i < t->n_trees ? t->c_feature[(size_t)i * 7 + p] : 0;
            t->v_feature[(b * 7 + p) * 16 + lane] = f;
            t->v_threshold[(b * 7 + p) * 16 + lane] = i < t->n_trees ? t->c_threshold[(size_t)i * 7 + p] : 0;
            if (f > t->v_max_feature)
                t->v_max_feature = f;
        }
        for (size_t l = 0; l < 8; l++)
            t->v_leaf[(b * 8 + l) * 16 + lane] = i < t->n_trees ? t->c_leaf[(size_t)i * 8 + l] : 0;
    }
    t->n_blocks = nb;
}

int kace_trees_use_simd(kace_trees *t, int on)
{
    t->simd = 0;
#if TREES_AVX512
    if (on && t->n_blocks > 0 && __builtin_cpu_supports("avx512f"))
        t->simd = 1;
#else
    (void)on;
#endif
    return t->simd;
}

static void build_complete(kace_trees *t)
{
    int D = t->max_depth;
    if (D < 1 || D > 4)
        return;
    int n_split = (1 << D) - 1, n_leaf = 1 << D;
    t->c_feature = malloc((size_t)t->n_trees * (size_t)n_split * sizeof *t->c_feature);
    t->c_threshold = malloc((size_t)t->n_trees * (size_t)n_split * sizeof *t->c_threshold);
    t->c_leaf = malloc((size_t)t->n_trees * (size_t)n_leaf * sizeof *t->c_leaf);
    if (!t->c_feature || !t->c_threshold || !t->c_leaf) {
        free(t->c_feature);
        free(t->c_threshold);
        free(t->c_leaf);
        t->c_feature = NULL;
        t->c_threshold = NULL;
        t->c_leaf = NULL;
        return; /* the general walker still works */
    }
    for (int i = 0; i < t->n_trees; i++)
        complete_fill(t, t->tree_root[i], 0, 0, D, t->c_feature + (size_t)i * n_split,
                      t->c_threshold + (size_t)i * n_split, t->c_leaf + (size_t)i * n_leaf);
    t->complete_depth = D;
    if (D == 3) {
        build_blocks(t);
        kace_trees_use_simd(t, 1);
    }
}

void kace_trees_finish(kace_trees *t)
{
    build_complete(t);
}

/* Checks one tree (node arrays of num_nodes finite numbers, every node
 * reached once from the root with a matching parent, splits on known
 * features) and appends it to the model's arrays at *at. */
static bool tree_load(const cJSON *tree, long n_features, unsigned char *seen, kace_trees *m, int *at, int cap)
{
    const cJSON *param = cJSON_GetObjectItemCaseSensitive(tree, "tree_param");
    long n = 0, nf = 0, leaf_vector = -1;
    if (!param || json_int(param, "num_nodes", &n) || n < 1 || n > cap - *at || json_int(param, "num_feature", &nf) ||
        nf != n_features || json_int(param, "size_leaf_vector", &leaf_vector) || leaf_vector != 0)
        return false;
    static const char *const names[] = {"left_children", "right_children", "split_indices", "split_conditions",
                                        "default_left", "parents"};
    const cJSON *arr[6];
    for (size_t i = 0; i < 6; i++) {
        arr[i] = cJSON_GetObjectItemCaseSensitive(tree, names[i]);
        if (!cJSON_IsArray(arr[i]) || cJSON_GetArraySize(arr[i]) != n)
            return false;
        /* Node indices, features, flags and parents are read as long:
         * beyond int's range they are not one (xgboost's root parent is
         * INT_MAX), and a cast of a larger double would be undefined. */
        double most = i == 3 ? 3.0e38 : 2147483647.0;
        for (const cJSON *e = arr[i]->child; e; e = e->next)
            if (!cJSON_IsNumber(e) || !isfinite(e->valuedouble) || fabs(e->valuedouble) > most)
                return false;
    }
    const cJSON *cats = cJSON_GetObjectItemCaseSensitive(tree, "categories_nodes");
    if (cJSON_IsArray(cats) && cJSON_GetArraySize(cats) != 0)
        return false; /* kace never fits categorical splits */
    int base = *at;
    const cJSON *l = arr[0]->child, *r = arr[1]->child, *f = arr[2]->child, *c = arr[3]->child, *dl = arr[4]->child,
                *pa = arr[5]->child;
    long *parent = malloc((size_t)n * sizeof *parent);
    if (!parent)
        return false;
    bool ok = true;
    for (long i = 0; i < n; i++, l = l->next, r = r->next, f = f->next, c = c->next, dl = dl->next, pa = pa->next) {
        long lc = (long)l->valuedouble, rc = (long)r->valuedouble, fi = (long)f->valuedouble;
        parent[i] = (long)pa->valuedouble;
        bool leaf = lc == -1 && rc == -1;
        if (!leaf && (lc < 1 || lc >= n || rc < 1 || rc >= n || lc == rc || fi < 0 || fi >= n_features))
            ok = false;
        m->node[base + i].left = leaf ? -1 : base + (int)lc;
        m->node[base + i].right = leaf ? -1 : base + (int)rc;
        m->node[base + i].feature = ok && !leaf ? (int)fi : 0;
        m->node[base + i].threshold = (float)c->valuedouble;
        m->node[base + i].default_left = dl->valuedouble != 0;
    }
    /* A tree: every node but the root is the child of exactly one node. */
    ok = ok && parent[0] == 2147483647;
    memset(seen, 0, (size_t)n);
    long children = 0;
    for (long i = 0; ok && i < n; i++) {
        if (m->node[base + i].left < 0)
            continue;
        long lc = m->node[base + i].left - base, rc = m->node[base + i].right - base;
        if (seen[lc] || seen[rc] || parent[lc] != i || parent[rc] != i)
            ok = false;
        seen[lc] = seen[rc] = 1;
        children += 2;
    }
    ok = ok && children == n - 1;
    /* Depth of every node: parents come before their children in xgboost's
     * numbering, but do not rely on it: relax until nothing changes. */
    if (ok) {
        int *depth = calloc((size_t)n, sizeof *depth);
        if (!depth) {
            free(parent);
            return false;
        }
        for (bool changed = true; changed;) {
            changed = false;
            for (long i = 0; i < n; i++)
                if (m->node[base + i].left >= 0)
                    for (int side = 0; side < 2; side++) {
                        long ch = (side ? m->node[base + i].right : m->node[base + i].left) - base;
                        if (depth[ch] != depth[i] + 1) {
                            depth[ch] = depth[i] + 1;
                            changed = true;
                        }
                    }
        }
        for (long i = 0; i < n; i++)
            if (depth[i] > m->max_depth)
                m->max_depth = depth[i];
        free(depth);
    }
    free(parent);
    if (ok)
        *at += (int)n;
    return ok;
}

/* Reads the trees out of an xgboost JSON model into flat arrays. */
kace_status kace_trees_from_json(kace_ctx *ctx, const char *json, size_t json_len, int n_features, kace_trees *m)
{
    memset(m, 0, sizeof *m);
    if (!json || json_len == 0 || memchr(json, '\0', json_len) || json[0] != '{')
        return kace_fail(ctx, KACE_ERR_MODEL, "random forest: the booster is not JSON text");
    cJSON *root = cJSON_ParseWithLength(json, json_len);
    if (!root)
        return kace_fail(ctx, KACE_ERR_MODEL, "random forest: the booster is not valid JSON");
    kace_status st = KACE_OK;
    unsigned char *seen = NULL;
    static const char *const model_path[] = {"learner", "gradient_booster", "model"};
    static const char *const lparam_path[] = {"learner", "learner_model_param"};
    const cJSON *model = json_path(root, model_path, 3);
    const cJSON *lparam = json_path(root, lparam_path, 2);
    const cJSON *trees = model ? cJSON_GetObjectItemCaseSensitive(model, "trees") : NULL;
    const cJSON *info = model ? cJSON_GetObjectItemCaseSensitive(model, "tree_info") : NULL;
    const cJSON *base = lparam ? cJSON_GetObjectItemCaseSensitive(lparam, "base_score") : NULL;
    long num_feature = -1;
    int num_trees = cJSON_IsArray(trees) ? cJSON_GetArraySize(trees) : 0;
    if (!cJSON_IsArray(info) || json_int(lparam, "num_feature", &num_feature) || num_trees < 1 || num_trees > 100000 ||
        cJSON_GetArraySize(info) != num_trees || num_feature != n_features || !cJSON_IsString(base)) {
        st = kace_fail(ctx, KACE_ERR_MODEL,
                       "random forest: the booster's trees or feature count are not as expected (%d features)",
                       n_features);
        goto done;
    }
    char *end = NULL;
    m->base_score = strtod(base->valuestring, &end);
    if (end == base->valuestring || *end || !isfinite(m->base_score)) {
        st = kace_fail(ctx, KACE_ERR_MODEL, "random forest: bad base_score in the booster");
        goto done;
    }
    for (const cJSON *g = info->child; g; g = g->next)
        if (!cJSON_IsNumber(g) || g->valuedouble != 0) {
            st = kace_fail(ctx, KACE_ERR_MODEL, "random forest: the booster has more than one output group");
            goto done;
        }
    /* Node capacity is bounded by the text: every node takes several bytes. */
    size_t cap_sz = json_len / 8 + 1;
    int cap = cap_sz < (1u << 24) ? (int)cap_sz : (1 << 24);
    m->tree_root = malloc((size_t)num_trees * sizeof *m->tree_root);
    m->node = malloc((size_t)cap * sizeof *m->node);
    seen = malloc((size_t)cap);
    if (!m->tree_root || !m->node || !seen) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory reading the forest");
        goto done;
    }
    int t = 0, at = 0;
    for (const cJSON *tree = trees->child; tree; tree = tree->next, t++) {
        long id = -1;
        m->tree_root[t] = at;
        if (json_int(tree, "id", &id) || id != t || !tree_load(tree, num_feature, seen, m, &at, cap)) {
            st = kace_fail(ctx, KACE_ERR_MODEL, "random forest: tree %d of the booster is malformed", t);
            goto done;
        }
    }
    m->n_trees = num_trees;
    m->n_nodes = at;
    build_complete(m);
done:
    free(seen);
    cJSON_Delete(root);
    if (st)
        kace_trees_free(m);
    return st;
}

double kace_trees_predict(const kace_trees *t, const double *x)
{
    float sum = 0;
    for (int i = 0; i < t->n_trees; i++) {
        const kace_tree_node *v = &t->node[t->tree_root[i]];
        while (v->left >= 0) {
            double xv = x[v->feature];
            bool go_left = isnan(xv) ? v->default_left : (float)xv < v->threshold;
            v = &t->node[go_left ? v->left : v->right];
        }
        sum += v->threshold;
    }
    return (double)sum + t->base_score;
}

/* The leaf a row falls into in complete depth-3 tree (f, h): all seven
 * comparisons at once (independent loads), the leaf index picked from the
 * bits by conditional moves, no branch. (Measured on this machine: walking
 * three dependent levels, p = 2p + 1 + bit, was slower: each level waits
 * for the previous one's loads.) !(x < h) sends NaN right. */
static inline int d3_leaf(const float *xr, const int *f, const float *h)
{
    int b0 = !(xr[f[0]] < h[0]), b1 = !(xr[f[1]] < h[1]), b2 = !(xr[f[2]] < h[2]);
    int b3 = !(xr[f[3]] < h[3]), b4 = !(xr[f[4]] < h[4]), b5 = !(xr[f[5]] < h[5]);
    int b6 = !(xr[f[6]] < h[6]);
    int second = b0 ? b2 : b1;
    int third = b0 ? (second ? b6 : b5) : (second ? b4 : b3);
    return 4 * b0 + 2 * second + third;
}

static void d3_rows2(const kace_trees *t, const float *x, int d, double *out)
{
    const float *x0 = x, *x1 = x0 + d;
    float s0 = 0, s1 = 0;
    for (int i = 0; i < t->n_trees; i++) {
        const int *f = t->c_feature + (size_t)i * 7;
        const float *h = t->c_threshold + (size_t)i * 7, *leaf = t->c_leaf + (size_t)i * 8;
        s0 += leaf[d3_leaf(x0, f, h)];
        s1 += leaf[d3_leaf(x1, f, h)];
    }
    out[0] = (double)s0 + t->base_score;
    out[1] = (double)s1 + t->base_score;
}

static void d3_rows1(const kace_trees *t, const float *x, double *out)
{
    float s = 0;
    for (int i = 0; i < t->n_trees; i++)
        s += t->c_leaf[(size_t)i * 8 + (size_t)d3_leaf(x, t->c_feature + (size_t)i * 7, t->c_threshold + (size_t)i * 7)];
    out[0] = (double)s + t->base_score;
}

#if TREES_AVX512
/* The leaves one row reaches in a block of 16 depth-3 trees, one tree per
 * lane. The row's (at most 32) features sit in two registers, so reading
 * each tree's split feature is one permute; all seven splits are compared
 * at once (!(x < h), as the portable path: NaN goes right) and the leaf is
 * picked bottom-up, each node choosing between its children's picks by its
 * own comparison. */
AVX512_FN static inline __m512 d3_block(__m512 lo, __m512 hi, const int *f, const float *h, const float *leaf)
{
#define RIGHT(p)                                                                                                      \
    _mm512_cmp_ps_mask(_mm512_permutex2var_ps(lo, _mm512_load_si512((const void *)(f + 16 * (p))), hi),              \
                       _mm512_load_ps(h + 16 * (p)), _CMP_NLT_UQ)
    __mmask16 r0 = RIGHT(0), r1 = RIGHT(1), r2 = RIGHT(2), r3 = RIGHT(3), r4 = RIGHT(4), r5 = RIGHT(5), r6 = RIGHT(6);
#undef RIGHT
    __m512 n3 = _mm512_mask_blend_ps(r3, _mm512_load_ps(leaf), _mm512_load_ps(leaf + 16));
    __m512 n4 = _mm512_mask_blend_ps(r4, _mm512_load_ps(leaf + 32), _mm512_load_ps(leaf + 48));
    __m512 n5 = _mm512_mask_blend_ps(r5, _mm512_load_ps(leaf + 64), _mm512_load_ps(leaf + 80));
    __m512 n6 = _mm512_mask_blend_ps(r6, _mm512_load_ps(leaf + 96), _mm512_load_ps(leaf + 112));
    __m512 n1 = _mm512_mask_blend_ps(r1, n3, n4);
    __m512 n2 = _mm512_mask_blend_ps(r2, n5, n6);
    return _mm512_mask_blend_ps(r0, n1, n2);
}

/* A row's (d <= 32) features in two registers. */
AVX512_FN static inline void load_row(const float *x, int d, __m512 *lo, __m512 *hi)
{
    __mmask16 mlo = (__mmask16)(d >= 16 ? 0xffffu : (1u << d) - 1);
    __mmask16 mhi = (__mmask16)(d <= 16 ? 0u : d >= 32 ? 0xffffu : (1u << (d - 16)) - 1);
    *lo = _mm512_maskz_loadu_ps(mlo, x);
    *hi = _mm512_maskz_loadu_ps(mhi, x + 16);
}

/* Adds a block's leaves to the sums s (one lane per row), tree by tree in
 * tree order: tree j's leaves are the four floats at buf + off(j). */
#define ADD_TREE(j, off) s = _mm_add_ps(s, _mm_load_ps(buf + off(j)))
#define ADD_BLOCK(left, off)                                                                                          \
    do {                                                                                                              \
        if ((left) >= 16) { /* unrolled: one load-and-add per tree */                                                 \
            ADD_TREE(0, off), ADD_TREE(1, off), ADD_TREE(2, off), ADD_TREE(3, off), ADD_TREE(4, off);                 \
            ADD_TREE(5, off), ADD_TREE(6, off), ADD_TREE(7, off), ADD_TREE(8, off), ADD_TREE(9, off);                 \
            ADD_TREE(10, off), ADD_TREE(11, off), ADD_TREE(12, off), ADD_TREE(13, off), ADD_TREE(14, off);            \
            ADD_TREE(15, off);                                                                                        \
        } else {                                                                                                      \
            for (int j = 0; j < (left); j++)                                                                          \
                ADD_TREE(j, off);                                                                                     \
        }                                                                                                             \
    } while (0)
#define IN_ORDER(j) (4 * (j))
#define TRANSPOSED(j) (16 * ((j) % 4) + 4 * ((j) / 4))

/* Two rows through depth-3 trees in blocks of 16 (x1 may be x0: then out[1]
 * is not written). Each row's leaves are still added one by one in tree
 * order (a chain of float additions, bit-identical to the portable path's):
 * tree j's leaves for the two rows go to lanes 0 and 1 of 16 aligned bytes,
 * so one addition per tree (its operand read from memory: loads are cheaper
 * here than extracting lanes, which compete with the comparisons) advances
 * both chains, and each block's additions overlap the next block's
 * comparisons. Lanes 2 and 3 repeat them and are not read. */
AVX512_FN static void d3_simd_rows2(const kace_trees *t, const float *x0, const float *x1, int d, double *out)
{
    /* output k, lanes 4m..4m+3: tree 4k+m of rows 0, 1, 0, 1 */
    const __m512i slot0 = _mm512_set_epi32(19, 3, 19, 3, 18, 2, 18, 2, 17, 1, 17, 1, 16, 0, 16, 0);
    const __m512i step = _mm512_set1_epi32(4);
    const __m512i slot1 = _mm512_add_epi32(slot0, step), slot2 = _mm512_add_epi32(slot1, step);
    const __m512i slot3 = _mm512_add_epi32(slot2, step);
    __m512 lo0, hi0, lo1, hi1;
    load_row(x0, d, &lo0, &hi0);
    load_row(x1, d, &lo1, &hi1);
    __m128 s = _mm_setzero_ps();
    _Alignas(64) float buf[64];
    for (int b = 0, left = t->n_trees; b < t->n_blocks; b++, left -= 16) {
        const int *f = t->v_feature + (size_t)b * 112;
        const float *h = t->v_threshold + (size_t)b * 112, *leaf = t->v_leaf + (size_t)b * 128;
        __m512 l0 = d3_block(lo0, hi0, f, h, leaf), l1 = d3_block(lo1, hi1, f, h, leaf);
        _mm512_store_ps(buf, _mm512_permutex2var_ps(l0, slot0, l1));
        _mm512_store_ps(buf + 16, _mm512_permutex2var_ps(l0, slot1, l1));
        _mm512_store_ps(buf + 32, _mm512_permutex2var_ps(l0, slot2, l1));
        _mm512_store_ps(buf + 48, _mm512_permutex2var_ps(l0, slot3, l1));
        __asm__("" : "+m"(buf)); /* read back through memory, not by extracting lanes */
        ADD_BLOCK(left, IN_ORDER);
    }
    _Alignas(16) float sum[4];
    _mm_store_ps(sum, s);
    out[0] = (double)sum[0] + t->base_score;
    if (x1 != x0)
        out[1] = (double)sum[1] + t->base_score;
}

/* The same for four rows (x3 may be x2: then out[3] is not written): the
 * four chains in the four lanes of one addition per tree. */
AVX512_FN static void d3_simd_rows4(const kace_trees *t, const float *x0, const float *x1, const float *x2,
                                    const float *x3, int d, double *out)
{
    __m512 lo0, hi0, lo1, hi1, lo2, hi2, lo3, hi3;
    load_row(x0, d, &lo0, &hi0);
    load_row(x1, d, &lo1, &hi1);
    load_row(x2, d, &lo2, &hi2);
    load_row(x3, d, &lo3, &hi3);
    __m128 s = _mm_setzero_ps();
    /* tree j's leaves for the four rows at TRANSPOSED(j): a 4x16 transpose
     * by unpacking */
    _Alignas(64) float buf[64];
    for (int b = 0, left = t->n_trees; b < t->n_blocks; b++, left -= 16) {
        const int *f = t->v_feature + (size_t)b * 112;
        const float *h = t->v_threshold + (size_t)b * 112, *leaf = t->v_leaf + (size_t)b * 128;
        __m512 l0 = d3_block(lo0, hi0, f, h, leaf), l1 = d3_block(lo1, hi1, f, h, leaf);
        __m512 l2 = d3_block(lo2, hi2, f, h, leaf), l3 = d3_block(lo3, hi3, f, h, leaf);
        __m512d t0 = _mm512_castps_pd(_mm512_unpacklo_ps(l0, l1)), t1 = _mm512_castps_pd(_mm512_unpackhi_ps(l0, l1));
        __m512d t2 = _mm512_castps_pd(_mm512_unpacklo_ps(l2, l3)), t3 = _mm512_castps_pd(_mm512_unpackhi_ps(l2, l3));
        _mm512_store_pd((double *)buf, _mm512_unpacklo_pd(t0, t2));
        _mm512_store_pd((double *)(buf + 16), _mm512_unpackhi_pd(t0, t2));
        _mm512_store_pd((double *)(buf + 32), _mm512_unpacklo_pd(t1, t3));
        _mm512_store_pd((double *)(buf + 48), _mm512_unpackhi_pd(t1, t3));
        __asm__("" : "+m"(buf));
        ADD_BLOCK(left, TRANSPOSED);
    }
    _Alignas(16) float sum[4];
    _mm_store_ps(sum, s);
    for (int r = 0; r < 3; r++)
        out[r] = (double)sum[r] + t->base_score;
    if (x3 != x2)
        out[3] = (double)sum[3] + t->base_score;
}

/* Rows of d <= 32 features: four at a time, then two (a colocation of k
 * workloads is k rows; a missing row repeats the last one). */
AVX512_FN static void d3_simd_rows(const kace_trees *t, const float *x, int d, int n, double *out)
{
    int r = 0;
    for (; n - r >= 3; r += 4) {
        const float *x0 = x + (size_t)r * (size_t)d;
        d3_simd_rows4(t, x0, x0 + d, x0 + 2 * d, n - r > 3 ? x0 + 3 * d : x0 + 2 * d, d, out + r);
    }
    if (r < n) {
        const float *x0 = x + (size_t)r * (size_t)d;
        d3_simd_rows2(t, x0, n - r > 1 ? x0 + d : x0, d, out + r);
    }
}
#endif

void kace_trees_predict_rows_f(const kace_trees *t, const float *x, int d, int n, double *out)
{
#if TREES_AVX512
    if (t->simd && d <= 32 && t->v_max_feature < d) {
        d3_simd_rows(t, x, d, n, out);
        return;
    }
#endif
    int D = t->complete_depth;
    if (D == 0) { /* deep trees: the general walker */
        double xd[KACE_MAX_FEATURES];
        for (int r = 0; r < n; r++) {
            for (int j = 0; j < d && j < KACE_MAX_FEATURES; j++)
                xd[j] = x[(size_t)r * (size_t)d + (size_t)j];
            out[r] = kace_trees_predict(t, xd);
        }
        return;
    }
    int n_split = (1 << D) - 1, n_leaf = 1 << D;
    const int *feat = t->c_feature;
    const float *thr = t->c_threshold, *leaf = t->c_leaf;
    int r = 0;
    if (D == 3) {
        /* The common shape (depth-3 boosting). Each row's leaf sum is a
         * chain of float additions in tree order (kept: the sums are
         * bit-identical to the walker's), so two rows go through the trees
         * together: two independent chains, and each tree's splits loaded
         * once for both (a colocation of k workloads is k rows; four rows
         * at a time measured no better). */
        for (; r + 1 < n; r += 2)
            d3_rows2(t, x + (size_t)r * (size_t)d, d, out + r);
        if (r < n)
            d3_rows1(t, x + (size_t)r * (size_t)d, out + r);
        return;
    }
    /* Two rows at a time: two independent walks per tree for the CPU to
     * overlap (a colocation of k workloads is k rows). */
    for (; r + 1 < n; r += 2) {
        const float *x0 = x + (size_t)r * (size_t)d, *x1 = x0 + d;
        float s0 = 0, s1 = 0;
        for (int i = 0; i < t->n_trees; i++) {
            const int *f = feat + (size_t)i * n_split;
            const float *h = thr + (size_t)i * n_split;
            int p0 = 0, p1 = 0;
            for (int level = 0; level < D; level++) {
                p0 = 2 * p0 + 1 + !(x0[f[p0]] < h[p0]);
                p1 = 2 * p1 + 1 + !(x1[f[p1]] < h[p1]);
            }
            s0 += leaf[(size_t)i * n_leaf + (size_t)(p0 - n_split)];
            s1 += leaf[(size_t)i * n_leaf + (size_t)(p1 - n_split)];
        }
        out[r] = (double)s0 + t->base_score;
        out[r + 1] = (double)s1 + t->base_score;
    }
    for (; r < n; r++) {
        const float *xr = x + (size_t)r * (size_t)d;
        float sum = 0;
        for (int i = 0; i < t->n_trees; i++) {
            const int *f = feat + (size_t)i * n_split;
            const float *h = thr + (size_t)i * n_split;
            /* D steps by index arithmetic, no branch. */
            int p = 0;
            for (int level = 0; level < D; level++)
                p = 2 * p + 1 + !(xr[f[p]] < h[p]);
            sum += leaf[(size_t)i * n_leaf + (size_t)(p - n_split)];
        }
        out[r] = (double)sum + t->base_score;
    }
}
