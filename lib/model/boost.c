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
 * the same rows: CV folds), each node keeps its rows as a stretch of one
 * list (a split partitions it in place) and its gradient sums over its
 * non-empty bins only (the smaller child's summed from its rows, the
 * larger one's by subtraction from the parent's), and only those bins are
 * scanned. tests/test_boost.c checks that it grows the same trees as
 * libxgboost on the same data.
 *
 * Where the CPU has AVX-512, the histogram passes move 8 bins a step, and
 * the split scans take 8 candidates a step whenever the round's gradient
 * sums are exact in any order (kace_boost_sums_exact: each gradient is a
 * difference of two floats, so on data like kace's, whose values span a
 * few binades, every sum of a few hundred of them fits a double's 53
 * bits): the left sums are then vector prefix sums, equal to the serial
 * chain's, and the children's sums come from the chosen candidate. Either
 * way the trees are the same bit for bit (test_boost compares).
 *
 * The trees are written (kace_boost_json, on demand) in the JSON layout of
 * an xgboost model, so they are stored, read back and checked exactly like
 * xgboost's (kace_trees_from_json). */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/text_buf.h"
#include "boost.h"

/* The AVX-512 paths of the histogram passes (x86-64 with GCC or Clang:
 * those functions alone are compiled for AVX-512, the CPU is asked at run
 * time). They move the same numbers as the portable loops and do the same
 * subtractions, so the trees are the same bit for bit (test_boost). */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define BOOST_AVX512 1
#include <immintrin.h>
#define AVX512_FN __attribute__((target("avx512f,avx512vl,popcnt")))
#else
#define BOOST_AVX512 0
#endif
/* A vector pass writes whole vectors of 8 at the end of a list: each
 * node's lists have this many spare entries. */
#define LIST_PAD 8

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
    double best_GL; /* the left sum of the best split */
    int best_feature;
    float best_threshold;
} boost_node;

/* A float's order as an unsigned key (-0 and +0 equal, as they compare). */
static uint32_t order_key(float v)
{
    uint32_t u;
    if (v == 0)
        v = 0; /* -0 -> +0 */
    memcpy(&u, &v, sizeof u);
    return u & 0x80000000u ? ~u : u | 0x80000000u;
}

/* Sorts row[0..n) by key[0..n) (moved along), equal keys keeping their
 * order: a stable radix sort, 8 bits a pass; tmp arrays of n. */
static void sort_rows(uint32_t *key, int *row, uint32_t *key_tmp, int *row_tmp, int n)
{
    for (int shift = 0; shift < 32; shift += 8) {
        int count[257] = {0};
        for (int i = 0; i < n; i++)
            count[((key[i] >> shift) & 255) + 1]++;
        for (int k = 0; k < 256; k++)
            count[k + 1] += count[k];
        for (int i = 0; i < n; i++) {
            int at = count[(key[i] >> shift) & 255]++;
            key_tmp[at] = key[i];
            row_tmp[at] = row[i];
        }
        uint32_t *k = key;
        key = key_tmp;
        key_tmp = k;
        int *r = row;
        row = row_tmp;
        row_tmp = r;
    }
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

/* A histogram cell of the scratch histogram: gradient sum and row count
 * side by side (one cache line per bin touched). */
typedef struct hist_cell {
    double g, h;
} hist_cell;

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
    /* The sampled rows, ascending within each node: node v's are
     * rows[row_at[v] .. row_at[v] + row_n[v]) (a split partitions its
     * parent's stretch in place, stably). */
    int *rows, *rows_right;
    int row_at[BOOST_MAX_NODES], row_n[BOOST_MAX_NODES];
    hist_cell *scratch; /* per bin; all zero between uses */
    /* Per node above the leaves: its histogram over its non-empty bins
     * only, ascending (a child's are a subset of its parent's, so deep
     * nodes cost little): bin, gradient sum, row count, and where each
     * feature's start (d + 1 entries). */
    int *nz_bin, *nz_h;
    double *nz_g;
    int *feature_start, *n_nonempty;
    boost_node node[BOOST_MAX_NODES];
    int n_nodes;
    bool simd; /* the AVX-512 passes */
    /* This round's gradient sums are exact in any order
     * (kace_boost_sums_exact): the AVX-512 scans may then add them as
     * vectors, and a split's children take their sums from its candidate. */
    bool exact_sums;
} booster;

/* The best split of node nd on feature j from the node's histogram over
 * that feature's non-empty bins (bins, gradient sums hg and counts hh,
 * m entries, ascending): candidates lie between consecutive ones. The
 * unconstrained gain bounds the constrained one, so most candidates cost
 * two products and a compare. */
static void best_split_of(boost_node *nd, double parent_gain, int j, int c, const int *bins, const double *hg,
                          const int *hh, const float *value, int m, const double *inverse)
{
    if (m < 2)
        return;
    int H = (int)nd->H, HL = hh[0];
    double GL = hg[0], G = nd->G, best = nd->best_gain;
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
            GL += hg[i];
            HL += hh[i];
        }
        if (at) {
            nd->best_gain = best;
            nd->best_feature = j;
            nd->best_threshold = between(value[bins[at - 1]], value[bins[at]]);
            nd->best_wl = -at_GL * inverse[at_HL];
            nd->best_wr = -(G - at_GL) * inverse[H - at_HL];
            nd->best_GL = at_GL;
        }
        return;
    }
    for (int i = 1; i < m; i++) {
        double GR = G - GL;
        int HR = H - HL;
        double open = GL * GL * inverse[HL] + GR * GR * inverse[HR] - parent_gain;
        if (open > best) { /* split between value[bins[i - 1]] and value[bins[i]] */
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
                    nd->best_threshold = between(value[bins[i - 1]], value[bins[i]]);
                    nd->best_wl = wl;
                    nd->best_wr = wr;
                    nd->best_GL = GL;
                }
            }
        }
        GL += hg[i];
        HL += hh[i];
    }
}

static size_t hist_at(const booster *b, int v)
{
    return (size_t)v * ((size_t)b->first[b->d] + LIST_PAD);
}

static int *feature_start_of(const booster *b, int v)
{
    return b->feature_start + (size_t)v * (size_t)(b->d + 1);
}

/* Sums the gradients and counts of node v's rows per bin into the
 * scratch histogram, rows in ascending order. */
static void scatter_rows(booster *b, int v)
{
    hist_cell *s = b->scratch;
    const int *rows = b->rows + b->row_at[v];
    int d = b->d;
    for (int i = 0; i < b->row_n[v]; i++) {
        int r = rows[i];
        double g = b->grad[r];
        const int *bins = b->bin + (size_t)r * (size_t)d;
        for (int j = 0; j < d; j++) {
            hist_cell *cell = &s[bins[j]];
            cell->g += g;
            cell->h += 1;
        }
    }
}

#if BOOST_AVX512
/* root_hist's pass over the scratch, 8 bins at a time: the non-empty ones
 * compressed into the root's lists, the cells cleared. */
AVX512_FN static void root_keep_avx512(booster *b, int *bin, double *hg, int *hh, int *start)
{
    hist_cell *s = b->scratch;
    const __m512i even = _mm512_setr_epi64(0, 2, 4, 6, 8, 10, 12, 14), odd = _mm512_setr_epi64(1, 3, 5, 7, 9, 11, 13, 15);
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m512d zero = _mm512_setzero_pd();
    int m = 0;
    for (int j = 0; j < b->d; j++) {
        start[j] = m;
        int k = b->first[j], end = b->first[j + 1];
        for (; k + 8 <= end; k += 8) {
            double *cell = &s[k].g;
            __m512d lo = _mm512_loadu_pd(cell), hi = _mm512_loadu_pd(cell + 8);
            __m512d g = _mm512_permutex2var_pd(lo, even, hi), h = _mm512_permutex2var_pd(lo, odd, hi);
            __mmask8 keep = _mm512_cmp_pd_mask(h, zero, _CMP_NEQ_OQ);
            __m256i hi32 = _mm512_cvttpd_epi32(h), k32 = _mm256_add_epi32(_mm256_set1_epi32(k), lane);
            _mm512_storeu_pd(hg + m, _mm512_maskz_compress_pd(keep, g));
            _mm256_storeu_si256((__m256i *)(hh + m), _mm256_maskz_compress_epi32(keep, hi32));
            _mm256_storeu_si256((__m256i *)(bin + m), _mm256_maskz_compress_epi32(keep, k32));
            _mm512_storeu_pd(cell, zero);
            _mm512_storeu_pd(cell + 8, zero);
            m += __builtin_popcount(keep);
        }
        for (; k < end; k++) {
            int h = (int)s[k].h;
            bin[m] = k;
            hg[m] = s[k].g;
            hh[m] = h;
            m += h != 0;
            s[k] = (hist_cell){0, 0};
        }
    }
    start[b->d] = m;
    b->n_nonempty[0] = m;
}

/* split_hists' pass, 8 of the parent's bins at a time over its whole list
 * (the features' lists one after another, the last block masked): the
 * small child's sums loaded from the scratch, the large one's by
 * subtraction, each compressed to its non-empty bins; where a feature's
 * list starts inside a block, the children's starts are counted from the
 * bins kept before it. The scratch is cleared afterwards from the small
 * child's list (the only cells its rows touched). */
AVX512_FN static void split_keep_avx512(booster *b, int v, int small, int big)
{
    size_t at = hist_at(b, v), at_s = hist_at(b, small), at_b = hist_at(b, big);
    const int *pbin = b->nz_bin + at, *ph = b->nz_h + at, *start = feature_start_of(b, v);
    const double *pg = b->nz_g + at;
    int *bin_s = b->nz_bin + at_s, *h_s = b->nz_h + at_s, *start_s = feature_start_of(b, small);
    int *bin_b = b->nz_bin + at_b, *h_b = b->nz_h + at_b, *start_b = feature_start_of(b, big);
    double *g_s = b->nz_g + at_s, *g_b = b->nz_g + at_b;
    hist_cell *s = b->scratch;
    const __m512d zero = _mm512_setzero_pd();
    const __m512i even = _mm512_setr_epi64(0, 2, 4, 6, 8, 10, 12, 14), odd = _mm512_setr_epi64(1, 3, 5, 7, 9, 11, 13, 15);
    int ms = 0, mb = 0, m = start[b->d], next = 0;
    for (int i = 0; i < m; i += 8) {
        __mmask8 lanes = (__mmask8)(m - i >= 8 ? 0xFF : (1u << (m - i)) - 1);
        int tail[8];
        const int *q = pbin + i;
        if (lanes != 0xFF) { /* the last block: bins past the list read cell 0 */
            _mm256_storeu_si256((__m256i *)tail, _mm256_maskz_loadu_epi32(lanes, q));
            q = tail;
        }
        __m256i k = _mm256_loadu_si256((const __m256i *)q);
        __m512 c0 = _mm512_castps128_ps512(_mm_loadu_ps((const float *)&s[q[0]]));
        __m512 c1 = _mm512_castps128_ps512(_mm_loadu_ps((const float *)&s[q[4]]));
        c0 = _mm512_insertf32x4(c0, _mm_loadu_ps((const float *)&s[q[1]]), 1);
        c1 = _mm512_insertf32x4(c1, _mm_loadu_ps((const float *)&s[q[5]]), 1);
        c0 = _mm512_insertf32x4(c0, _mm_loadu_ps((const float *)&s[q[2]]), 2);
        c1 = _mm512_insertf32x4(c1, _mm_loadu_ps((const float *)&s[q[6]]), 2);
        c0 = _mm512_insertf32x4(c0, _mm_loadu_ps((const float *)&s[q[3]]), 3);
        c1 = _mm512_insertf32x4(c1, _mm_loadu_ps((const float *)&s[q[7]]), 3);
        __m512d lo = _mm512_castps_pd(c0), hi = _mm512_castps_pd(c1);
        __m512d gs = _mm512_permutex2var_pd(lo, even, hi), hsd = _mm512_permutex2var_pd(lo, odd, hi);
        __m256i hs = _mm512_cvttpd_epi32(hsd);
        __m256i hb = _mm256_sub_epi32(_mm256_maskz_loadu_epi32(lanes, ph + i), hs);
        __m512d gb = _mm512_sub_pd(_mm512_maskz_loadu_pd(lanes, pg + i), gs);
        __mmask8 keep_s = _mm512_mask_cmp_pd_mask(lanes, hsd, zero, _CMP_NEQ_OQ);
        __mmask8 keep_b = _mm256_mask_cmpneq_epi32_mask(lanes, hb, _mm256_setzero_si256());
        while (next < b->d && start[next] < i + 8) { /* features starting in this block */
            unsigned before = (1u << (start[next] - i)) - 1;
            start_s[next] = ms + __builtin_popcount(keep_s & before);
            start_b[next] = mb + __builtin_popcount(keep_b & before);
            next++;
        }
        _mm512_storeu_pd(g_s + ms, _mm512_maskz_compress_pd(keep_s, gs));
        _mm256_storeu_si256((__m256i *)(h_s + ms), _mm256_maskz_compress_epi32(keep_s, hs));
        _mm256_storeu_si256((__m256i *)(bin_s + ms), _mm256_maskz_compress_epi32(keep_s, k));
        _mm512_storeu_pd(g_b + mb, _mm512_maskz_compress_pd(keep_b, gb));
        _mm256_storeu_si256((__m256i *)(h_b + mb), _mm256_maskz_compress_epi32(keep_b, hb));
        _mm256_storeu_si256((__m256i *)(bin_b + mb), _mm256_maskz_compress_epi32(keep_b, k));
        ms += __builtin_popcount(keep_s);
        mb += __builtin_popcount(keep_b);
    }
    for (; next <= b->d; next++) { /* features with no bins (none here: a node has rows) and the end */
        start_s[next] = ms;
        start_b[next] = mb;
    }
    b->n_nonempty[small] = ms;
    b->n_nonempty[big] = mb;
    for (int i = 0; i < ms; i++)
        s[bin_s[i]] = (hist_cell){0, 0};
}
#endif

/* The root's histogram: its rows summed per bin, then the non-empty bins
 * kept (and the scratch cleared) in one pass over all bins. */
static void root_hist(booster *b)
{
    scatter_rows(b, 0);
    size_t at = hist_at(b, 0);
    int *bin = b->nz_bin + at, *hh = b->nz_h + at, *start = feature_start_of(b, 0);
    double *hg = b->nz_g + at;
    hist_cell *s = b->scratch;
    int m = 0;
#if BOOST_AVX512
    if (b->simd) {
        root_keep_avx512(b, bin, hg, hh, start);
        return;
    }
#endif
    for (int j = 0; j < b->d; j++) {
        start[j] = m;
        for (int k = b->first[j]; k < b->first[j + 1]; k++) {
            int h = (int)s[k].h;
            bin[m] = k;
            hg[m] = s[k].g;
            hh[m] = h;
            m += h != 0;
            s[k].g = 0;
            s[k].h = 0;
        }
    }
    start[b->d] = m;
    b->n_nonempty[0] = m;
}

/* After a split of node v: the smaller child's histogram from its rows,
 * the larger one's by subtraction (small's from the parent's), both kept
 * over their non-empty bins, in one pass over v's non-empty bins (the
 * children's are among them; the scratch is cleared on the way). */
static void split_hists(booster *b, int v, int small, int big)
{
    scatter_rows(b, small);
#if BOOST_AVX512
    if (b->simd) {
        split_keep_avx512(b, v, small, big);
        return;
    }
#endif
    size_t at = hist_at(b, v), at_s = hist_at(b, small), at_b = hist_at(b, big);
    const int *pbin = b->nz_bin + at, *ph = b->nz_h + at, *start = feature_start_of(b, v);
    const double *pg = b->nz_g + at;
    int *bin_s = b->nz_bin + at_s, *h_s = b->nz_h + at_s, *start_s = feature_start_of(b, small);
    int *bin_b = b->nz_bin + at_b, *h_b = b->nz_h + at_b, *start_b = feature_start_of(b, big);
    double *g_s = b->nz_g + at_s, *g_b = b->nz_g + at_b;
    hist_cell *s = b->scratch;
    int ms = 0, mb = 0;
    for (int j = 0; j < b->d; j++) {
        start_s[j] = ms;
        start_b[j] = mb;
#pragma GCC unroll 4 /* short loops: ~1.5% of the fit */
        for (int i = start[j]; i < start[j + 1]; i++) {
            int k = pbin[i], hs = (int)s[k].h, hb = ph[i] - hs;
            double gs = s[k].g;
            s[k].g = 0;
            s[k].h = 0;
            bin_s[ms] = k;
            g_s[ms] = gs;
            h_s[ms] = hs;
            bin_b[mb] = k;
            g_b[mb] = pg[i] - gs;
            h_b[mb] = hb;
            ms += hs != 0;
            mb += hb != 0;
        }
    }
    start_s[b->d] = ms;
    start_b[b->d] = mb;
    b->n_nonempty[small] = ms;
    b->n_nonempty[big] = mb;
}

/* One feature's scan on the open gain (no bounds, no constraint), as
 * best_split_of does it: the best candidate in locals. */
typedef struct open_scan {
    const int *hh;
    const double *hg;
    int m, HL, at, at_HL;
    double GL, best, at_GL;
} open_scan;

static inline void open_start(open_scan *s, const int *hh, const double *hg, int m, double best)
{
    *s = (open_scan){.hh = hh, .hg = hg, .m = m, .HL = m ? hh[0] : 0, .GL = m ? hg[0] : 0, .best = best};
}

static inline void open_step(open_scan *s, int i, double G, int H, double parent_gain, const double *inverse)
{
    double GL = s->GL, GR = G - GL;
    int HL = s->HL, HR = H - HL;
    double open = GL * GL * inverse[HL] + GR * GR * inverse[HR] - parent_gain;
    if (open > s->best) {
        s->best = open;
        s->at = i;
        s->at_GL = GL;
        s->at_HL = HL;
    }
    s->GL = GL + s->hg[i];
    s->HL = HL + s->hh[i];
}

/* Writes a scan's best candidate to the node if it beats the node's best
 * so far: a scan started from a lower best finds the same first maximum
 * whenever that maximum beats the higher one. */
static inline void open_finish(boost_node *nd, const open_scan *s, int j, const int *bins, const float *value,
                               const double *inverse)
{
    if (!s->at || !(s->best > nd->best_gain))
        return;
    int H = (int)nd->H;
    nd->best_gain = s->best;
    nd->best_feature = j;
    nd->best_threshold = between(value[bins[s->at - 1]], value[bins[s->at]]);
    nd->best_wl = -s->at_GL * inverse[s->at_HL];
    nd->best_wr = -(nd->G - s->at_GL) * inverse[H - s->at_HL];
    nd->best_GL = s->at_GL;
}

/* Features j and j + 1 on the open gain, their scans interleaved (each
 * sums its gradients in a serial chain of additions: two chains overlap). */
static void best_split_of_two(boost_node *nd, double parent_gain, int j, const int *start, const int *bins,
                              const double *hg, const int *hh, const float *value, const double *inverse)
{
    open_scan a, c;
    int ma = start[j + 1] - start[j], mc = start[j + 2] - start[j + 1];
    open_start(&a, hh + start[j], hg + start[j], ma, nd->best_gain);
    open_start(&c, hh + start[j + 1], hg + start[j + 1], mc, nd->best_gain);
    double G = nd->G;
    int H = (int)nd->H, both = ma < mc ? ma : mc, i = 1;
#pragma GCC unroll 2 /* ~1% of the fit */
    for (; i < both; i++) {
        open_step(&a, i, G, H, parent_gain, inverse);
        open_step(&c, i, G, H, parent_gain, inverse);
    }
    for (int k = i; k < ma; k++)
        open_step(&a, k, G, H, parent_gain, inverse);
    for (int k = i; k < mc; k++)
        open_step(&c, k, G, H, parent_gain, inverse);
    open_finish(nd, &a, j, bins + start[j], value, inverse);
    open_finish(nd, &c, j + 1, bins + start[j + 1], value, inverse);
}

/* The best split of every node of the level from its histogram, scanning
 * each feature's non-empty bins. */
#if BOOST_AVX512
/* Node v's candidate at lane k of a scan's block, whose open gain beat the
 * best so far: best_split_of's test of the weights, constraint and bounds. */
static void accept_candidate(boost_node *nd, double parent_gain, int j, int c, bool bounded, const int *bins,
                             const float *value, const double *inverse, int i, double GL, int HL, double open)
{
    double G = nd->G, GR = G - GL;
    int HR = (int)nd->H - HL;
    double wl = -GL * inverse[HL], wr = -GR * inverse[HR];
    if (bounded) {
        wl = clip(wl, nd->lower, nd->upper);
        wr = clip(wr, nd->lower, nd->upper);
    }
    if ((c < 0 && wl < wr) || (c > 0 && wl > wr))
        return;
    double g = bounded ? gain_at(GL, HL, wl) + gain_at(GR, HR, wr) - parent_gain : open;
    if (g > nd->best_gain) {
        nd->best_gain = g;
        nd->best_feature = j;
        nd->best_threshold = between(value[bins[i - 1]], value[bins[i]]);
        nd->best_wl = wl;
        nd->best_wr = wr;
        nd->best_GL = GL;
    }
}

/* The inclusive prefix sums of x's 8 lanes (exact sums: any order). */
AVX512_FN static inline __m512d prefix8(__m512d x)
{
    const __m512i by1 = _mm512_setr_epi64(0, 0, 1, 2, 3, 4, 5, 6), by2 = _mm512_setr_epi64(0, 0, 0, 1, 2, 3, 4, 5),
                  by4 = _mm512_setr_epi64(0, 0, 0, 0, 0, 1, 2, 3);
    x = _mm512_add_pd(x, _mm512_maskz_permutexvar_pd(0xFE, by1, x));
    x = _mm512_add_pd(x, _mm512_maskz_permutexvar_pd(0xFC, by2, x));
    return _mm512_add_pd(x, _mm512_maskz_permutexvar_pd(0xF0, by4, x));
}

/* find_splits when this round's sums are exact: each feature's candidates
 * 8 at a time, their left sums as vector prefix sums (the same numbers as
 * the serial chain of additions, since every partial sum is exact) and
 * their open gains computed with the same operations in the same order.
 * A block whose open gains all fall at or below the best so far is passed
 * over; the others' candidates go through best_split_of's tests in order,
 * so the node gets the same split as the serial scan. */
AVX512_FN static void find_splits_avx512(booster *b, int level)
{
    const __m512d one = _mm512_set1_pd(1.0);
    const __m512i last = _mm512_set1_epi64(7);
    for (int v = 0; v < b->n_nodes; v++) {
        boost_node *nd = &b->node[v];
        if (nd->depth != level)
            continue;
        nd->best_gain = MIN_GAIN;
        nd->best_feature = -1;
        double parent_gain = gain_at(nd->G, nd->H, node_weight(nd));
        size_t at = hist_at(b, v);
        const int *bins = b->nz_bin + at, *hh = b->nz_h + at, *start = feature_start_of(b, v);
        const double *hg = b->nz_g + at;
        bool bounded = isfinite(nd->lower) || isfinite(nd->upper);
        const __m512d G = _mm512_set1_pd(nd->G), H = _mm512_set1_pd(nd->H), pg = _mm512_set1_pd(parent_gain);
        for (int j = 0; j < b->d; j++) {
            int first = start[j], m = start[j + 1] - first;
            if (m < 2)
                continue;
            int c = b->monotone ? b->monotone[j] : 0;
            __m512d carry_g = _mm512_setzero_pd(), carry_h = _mm512_setzero_pd();
            for (int t = 0; t < m; t += 8) {
                __mmask8 lanes = (__mmask8)(m - t >= 8 ? 0xFF : (1u << (m - t)) - 1);
                __m512d g = _mm512_maskz_loadu_pd(lanes, hg + first + t);
                __m512d h = _mm512_cvtepi32_pd(_mm256_maskz_loadu_epi32(lanes, hh + first + t));
                __m512d sum_g = _mm512_add_pd(carry_g, prefix8(g)), sum_h = _mm512_add_pd(carry_h, prefix8(h));
                /* the candidate before entry t + k: left sums exclude it */
                __m512d GL = _mm512_sub_pd(sum_g, g), HL = _mm512_sub_pd(sum_h, h);
                __m512d GR = _mm512_sub_pd(G, GL), HR = _mm512_sub_pd(H, HL);
                __m512d open = _mm512_sub_pd(
                    _mm512_add_pd(_mm512_mul_pd(_mm512_mul_pd(GL, GL), _mm512_div_pd(one, HL)),
                                  _mm512_mul_pd(_mm512_mul_pd(GR, GR), _mm512_div_pd(one, HR))),
                    pg);
                __mmask8 hits = _mm512_mask_cmp_pd_mask((__mmask8)(t == 0 ? lanes & 0xFE : lanes), open,
                                                        _mm512_set1_pd(nd->best_gain), _CMP_GT_OQ);
                if (hits) {
                    double gl[8], hl[8], op[8];
                    _mm512_storeu_pd(gl, GL);
                    _mm512_storeu_pd(hl, HL);
                    _mm512_storeu_pd(op, open);
                    for (int k = 0; k < 8; k++)
                        if ((hits >> k & 1) && op[k] > nd->best_gain)
                            accept_candidate(nd, parent_gain, j, c, bounded, bins + first, b->value, b->inverse,
                                             t + k, gl[k], (int)hl[k], op[k]);
                }
                carry_g = _mm512_permutexvar_pd(last, sum_g);
                carry_h = _mm512_permutexvar_pd(last, sum_h);
            }
        }
    }
}
#endif

static void find_splits(booster *b, int level)
{
#if BOOST_AVX512
    if (b->simd && b->exact_sums) {
        find_splits_avx512(b, level);
        return;
    }
#endif
    for (int v = 0; v < b->n_nodes; v++) {
        boost_node *nd = &b->node[v];
        if (nd->depth != level)
            continue;
        nd->best_gain = MIN_GAIN;
        nd->best_feature = -1;
        double parent_gain = gain_at(nd->G, nd->H, node_weight(nd));
        size_t at = hist_at(b, v);
        const int *bins = b->nz_bin + at, *hh = b->nz_h + at, *start = feature_start_of(b, v);
        const double *hg = b->nz_g + at;
        bool bounded = isfinite(nd->lower) || isfinite(nd->upper);
        for (int j = 0; j < b->d; j++) {
            int c = b->monotone ? b->monotone[j] : 0;
            if (!bounded && c == 0 && j + 1 < b->d && (b->monotone ? b->monotone[j + 1] : 0) == 0) {
                best_split_of_two(nd, parent_gain, j, start, bins, hg, hh, b->value, b->inverse);
                j++;
                continue;
            }
            best_split_of(nd, parent_gain, j, c, bins + start[j], hg + start[j], hh + start[j], b->value,
                          start[j + 1] - start[j], b->inverse);
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

/* g where keep, else +0.0, without a branch (a branch on a row's side
 * mispredicts half the time). Adding +0.0 leaves a sum that started at
 * +0.0 unchanged (it is never -0.0), so a sum can take every row. */
static inline double kept(double g, bool keep)
{
    uint64_t u;
    memcpy(&u, &g, sizeof u);
    u &= -(uint64_t)keep;
    memcpy(&g, &u, sizeof g);
    return g;
}

/* Sends node v's rows to its children: a stable partition of its stretch
 * of rows (left ones first), summing each child's gradients in row order. */
static void partition_rows(booster *b, int v)
{
    boost_node *nd = &b->node[v];
    int *rows = b->rows + b->row_at[v], *right = b->rows_right, n = b->row_n[v];
    const float *x = b->col + (size_t)nd->feature * (size_t)b->n;
    float t = nd->threshold;
    double GL = 0, GR = 0;
    int nl = 0, nr = 0;
    if (b->exact_sums) { /* the children's sums are the split's: the scan had them */
        for (int i = 0; i < n; i++) {
            int r = rows[i];
            bool go_left = x[r] < t;
            rows[nl] = r;
            right[nr] = r;
            nl += go_left;
            nr += !go_left;
        }
        GL = nd->best_GL;
        GR = nd->G - GL;
    } else {
        for (int i = 0; i < n; i++) {
            int r = rows[i];
            double g = b->grad[r];
            bool go_left = x[r] < t;
            rows[nl] = r;
            right[nr] = r;
            GL += kept(g, go_left);
            GR += kept(g, !go_left);
            nl += go_left;
            nr += !go_left;
        }
    }
    memcpy(rows + nl, right, (size_t)nr * sizeof *rows);
    boost_node *l = &b->node[nd->left], *r = &b->node[nd->right];
    l->G = GL;
    l->H = nl;
    r->G = GR;
    r->H = nr;
    b->row_at[nd->left] = b->row_at[v];
    b->row_n[nd->left] = nl;
    b->row_at[nd->right] = b->row_at[v] + nl;
    b->row_n[nd->right] = nr;
}

/* Grows one tree of depth <= max_depth on the rows with pos >= 0 (all at
 * the root); leaves pos at each of them's leaf. Each split builds the
 * histogram of its smaller child from its rows and gets the larger one's
 * by subtraction from the parent's. */
static void grow_tree(booster *b, int max_depth)
{
    b->n_nodes = 0;
    add_node(b, 2147483647, 0, -INFINITY, INFINITY);
    int m = 0;
    double G = 0;
    for (int r = 0; r < b->n; r++) {
        bool in = b->pos[r] >= 0;
        b->rows[m] = r;
        G += kept(b->grad[r], in);
        m += in;
    }
    b->node[0].G = G;
    b->node[0].H = m;
    b->row_at[0] = 0;
    b->row_n[0] = m;
    root_hist(b);
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
            partition_rows(b, v);
        }
        if (b->n_nodes == first_child)
            break;
        if (level + 1 == max_depth)
            break; /* the children are leaves: no histograms needed */
        for (int v = 0; v < n_open; v++)
            if (b->node[v].depth == level && b->node[v].feature >= 0) {
                const boost_node *nd = &b->node[v];
                bool left_small = b->node[nd->left].H <= b->node[nd->right].H;
                split_hists(b, v, left_small ? nd->left : nd->right, left_small ? nd->right : nd->left);
            }
    }
    for (int v = 0; v < b->n_nodes; v++)
        if (b->node[v].feature < 0)
            for (int i = 0; i < b->row_n[v]; i++)
                b->pos[b->rows[b->row_at[v] + i]] = v;
}

/* The tree just grown as a walk of exactly max_depth steps without a
 * branch: a leaf leads to itself; a node goes to next[1] unless its
 * feature's value is below the threshold (the test kace_trees_predict
 * makes). */
typedef struct walk_node {
    int feature;
    float threshold;
    int next[2];
} walk_node;

static void walk_nodes(const booster *b, walk_node *w)
{
    for (int v = 0; v < b->n_nodes; v++) {
        const boost_node *nd = &b->node[v];
        w[v] = nd->feature < 0 ? (walk_node){0, 0, {v, v}}
                               : (walk_node){nd->feature, nd->threshold, {nd->left, nd->right}};
    }
}

/* The leaf of row r of the column-major data. */
static int walk_col(const walk_node *w, int depth, const float *col, int n, int r)
{
    int v = 0;
    for (int k = 0; k < depth; k++)
        v = w[v].next[!(col[(size_t)w[v].feature * (size_t)n + (size_t)r] < w[v].threshold)];
    return v;
}

/* The leaf of a row given as d floats. */
static int walk_row(const walk_node *w, int depth, const float *x)
{
    int v = 0;
    for (int k = 0; k < depth; k++)
        v = w[v].next[!(x[w[v].feature] < w[v].threshold)];
    return v;
}

/* The binade of a float: its exponent field (1 for subnormals, whose
 * spacing is that of the smallest normal binade). */
int kace_boost_binade(float v)
{
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    int e = (int)(u >> 23 & 0xFF);
    return e ? e : 1;
}

/* A gradient is the float difference of two floats: a multiple of the
 * finer spacing of the two, 2^(binade - 150), and it has fewer than
 * 2^(binade(g) - 126) in magnitude; a sum of n of them fits the 53 bits of
 * a double when the binades span at most 29 - log2(n). On kace's data they
 * span about 18 less than that. */
bool kace_boost_sums_exact(int finest, int widest, int n)
{
    int log2n = 0;
    while (log2n < 31 && (1L << log2n) < n)
        log2n++;
    return widest - finest + log2n <= 29;
}

/* x mod d for d >= 1 by a multiplication (Barrett reduction): magic is
 * floor((2^64 - 1) / d), which puts the quotient at most 1 low. Fisher-Yates
 * takes one per drawn row, and a 64-bit division costs several times
 * more. */
uint64_t kace_boost_mod_by(uint64_t x, uint64_t d, uint64_t magic)
{
#ifdef __SIZEOF_INT128__
    uint64_t q = (uint64_t)(((unsigned __int128)x * magic) >> 64), r = x - q * d;
    return r >= d ? r - d : r;
#else
    (void)magic;
    return x % d;
#endif
}

/* The binned training matrix: every feature's distinct values, sorted
 * once, shared by every fit on these rows (cross-validation folds). */
struct kace_boost_data {
    int n, d;
    float *col;     /* d columns of n floats */
    float *value;   /* see booster */
    int *first, *bin;
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
    uint32_t *key = malloc(2 * (size_t)n * sizeof *key);
    int *row = malloc(2 * (size_t)n * sizeof *row);
    if (x) {
        x->n = n;
        x->d = d;
        x->col = malloc(cells * sizeof *x->col);
        x->value = malloc(cells * sizeof *x->value);
        x->first = malloc(((size_t)d + 1) * sizeof *x->first);
        x->bin = malloc(cells * sizeof *x->bin);
        x->inverse = malloc(((size_t)n + 1) * sizeof *x->inverse);
    }
    if (!x || !key || !row || !x->col || !x->value || !x->first || !x->bin || !x->inverse) {
        free(key);
        free(row);
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
            key[i] = order_key(x->col[(size_t)j * (size_t)n + (size_t)i]);
            row[i] = i;
        }
        /* ascending values, equal ones in row order */
        sort_rows(key, row, key + n, row + n, n);
        x->first[j] = n_values;
        for (int i = 0; i < n; i++) {
            if (i == 0 || key[i] != key[i - 1])
                x->value[n_values++] = x->col[(size_t)j * (size_t)n + (size_t)row[i]];
            x->bin[(size_t)row[i] * (size_t)d + (size_t)j] = n_values - 1;
        }
    }
    x->first[d] = n_values;
    free(key);
    free(row);
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

kace_status kace_boost_json(kace_ctx *ctx, const kace_trees *trees, int n_features, char **json, size_t *json_len)
{
    *json = NULL;
    *json_len = 0;
    text_buf t = {0};
    tb_printf(&t, "{\"learner\":{\"learner_model_param\":{\"base_score\":\"%.17g\",\"num_feature\":\"%d\"},"
        "\"gradient_booster\":{\"model\":{\"trees\":[",
        trees->base_score, n_features);
    for (int id = 0; id < trees->n_trees; id++) {
        int base = trees->tree_root[id], n = (id + 1 < trees->n_trees ? trees->tree_root[id + 1] : trees->n_nodes) - base;
        const kace_tree_node *node = trees->node + base;
        int parent[BOOST_MAX_NODES];
        if (n < 1 || n > BOOST_MAX_NODES) {
            free(t.p);
            return kace_fail(ctx, KACE_ERR_INVALID, "boosted trees: tree %d has %d nodes", id, n);
        }
        parent[0] = 2147483647; /* as xgboost writes a root's parent */
        for (int v = 0; v < n; v++)
            if (node[v].left >= 0) {
                parent[node[v].left - base] = v;
                parent[node[v].right - base] = v;
            }
        tb_printf(&t, "%s{\"id\":%d,\"tree_param\":{\"num_nodes\":\"%d\",\"num_feature\":\"%d\",\"size_leaf_vector\":\"0\"}",
            id ? "," : "", id, n, n_features);
        tb_printf(&t, ",\"left_children\":[");
        for (int v = 0; v < n; v++)
            tb_printf(&t, "%s%d", v ? "," : "", node[v].left < 0 ? -1 : node[v].left - base);
        tb_printf(&t, "],\"right_children\":[");
        for (int v = 0; v < n; v++)
            tb_printf(&t, "%s%d", v ? "," : "", node[v].right < 0 ? -1 : node[v].right - base);
        tb_printf(&t, "],\"split_indices\":[");
        for (int v = 0; v < n; v++)
            tb_printf(&t, "%s%d", v ? "," : "", node[v].feature);
        tb_printf(&t, "],\"split_conditions\":[");
        for (int v = 0; v < n; v++)
            tb_printf(&t, "%s%.9g", v ? "," : "", (double)node[v].threshold);
        tb_printf(&t, "],\"default_left\":[");
        for (int v = 0; v < n; v++)
            tb_printf(&t, "%s%d", v ? "," : "", node[v].default_left);
        tb_printf(&t, "],\"parents\":[");
        for (int v = 0; v < n; v++)
            tb_printf(&t, "%s%d", v ? "," : "", parent[v]);
        tb_printf(&t, "]}");
    }
    tb_printf(&t, "],\"tree_info\":[");
    for (int id = 0; id < trees->n_trees; id++)
        tb_printf(&t, "%s0", id ? "," : "");
    tb_printf(&t, "]}}}}");
    if (t.oom || !t.p) {
        free(t.p);
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory writing boosted trees");
    }
    *json = t.p;
    *json_len = t.len;
    return KACE_OK;
}

/* Room in trees for the fit's n_rounds trees. */
static kace_status trees_alloc(kace_ctx *ctx, const kace_boost_params *p, kace_trees *trees)
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
    return KACE_OK;
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
                 .inverse = data->inverse,
                 .monotone = p->monotone};
#if BOOST_AVX512
    b.simd = !p->scalar && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl");
#endif
    double *pred = malloc((size_t)n * sizeof *pred);
    b.grad = malloc((size_t)n * sizeof *b.grad);
    b.pos = malloc((size_t)n * sizeof *b.pos);
    /* a histogram for each node above the leaves' level (ids < 2^max_depth - 1) */
    size_t n_hist_nodes = ((size_t)1 << p->max_depth) - 1, total_bins = (size_t)data->first[d];
    size_t list_room = n_hist_nodes * (total_bins + LIST_PAD);
    b.nz_bin = malloc(list_room * sizeof *b.nz_bin);
    b.nz_h = malloc(list_room * sizeof *b.nz_h);
    b.nz_g = malloc(list_room * sizeof *b.nz_g);
    b.n_nonempty = malloc(n_hist_nodes * sizeof *b.n_nonempty);
    b.feature_start = malloc(n_hist_nodes * ((size_t)d + 1) * sizeof *b.feature_start);
    b.scratch = calloc(total_bins, sizeof *b.scratch);
    b.rows = malloc((size_t)n * sizeof *b.rows);
    b.rows_right = malloc((size_t)n * sizeof *b.rows_right);
    int *used = malloc((size_t)n_used * sizeof *used), *pick = malloc((size_t)n_used * sizeof *pick);
    uint64_t *magic = malloc((size_t)n_used * sizeof *magic); /* Barrett constants of the draws' ranges */
    float *acc = calloc((size_t)n, sizeof *acc); /* the trees' summed outputs */
    float *x_eval = malloc((n_eval ? n_eval : 1) * (size_t)d * sizeof *x_eval);
    float *acc_eval = calloc(n_eval ? n_eval : 1, sizeof *acc_eval);
    kace_trees own = {0}; /* the trees, when only their JSON is asked for */
    kace_status st = KACE_OK;
    if (json_out && !trees && !(st = trees_alloc(ctx, p, &own)))
        trees = &own;
    if (st)
        goto done;
    if (!pred || !b.grad || !b.pos || !b.nz_bin || !b.nz_h || !b.nz_g || !b.n_nonempty || !b.feature_start ||
        !b.scratch || !b.rows || !b.rows_right ||
        !used || !pick || !magic || !acc || !x_eval || !acc_eval) {
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
    int finest_label = 255;
    for (int u = 0; u < n_used; u++) {
        int e = kace_boost_binade((float)y[used[u]]);
        finest_label = e < finest_label ? e : finest_label;
    }
    for (int i = 0; i < n_sample && n_sample < n_used; i++)
        magic[i] = UINT64_MAX / (uint64_t)(n_used - i);
    for (int round = 0; round < p->n_rounds; round++) {
        int finest = finest_label, widest = 0;
        for (int u = 0; u < n_used; u++) {
            int i = used[u];
            /* in float, as xgboost computes gradients: the same data then
             * gives the same trees */
            float pf = (float)pred[i], g = pf - (float)y[i];
            b.grad[i] = (double)g;
            b.pos[i] = n_sample == n_used ? 0 : -1;
            int ep = kace_boost_binade(pf), eg = kace_boost_binade(g);
            finest = ep < finest ? ep : finest;
            widest = eg > widest ? eg : widest;
        }
        if (n_sample < n_used) { /* n_sample rows without replacement (partial Fisher-Yates) */
            memcpy(pick, used, (size_t)n_used * sizeof *pick);
            for (int i = 0; i < n_sample; i++) {
                int k = i + (int)kace_boost_mod_by(splitmix64(&rng), (uint64_t)(n_used - i), magic[i]);
                int tmp = pick[i];
                pick[i] = pick[k];
                pick[k] = tmp;
                b.pos[pick[i]] = 0;
            }
        }
        b.exact_sums = kace_boost_sums_exact(finest, widest, n_used);
        grow_tree(&b, p->max_depth);
        if (trees)
            keep_tree(&b, p->learning_rate, trees);
        /* leaf values as stored: float */
        float leaf_value[BOOST_MAX_NODES];
        walk_node walk[BOOST_MAX_NODES];
        for (int v = 0; v < b.n_nodes; v++)
            leaf_value[v] = b.node[v].feature < 0 ? (float)(p->learning_rate * node_weight(&b.node[v])) : 0;
        walk_nodes(&b, walk);
        for (size_t i = 0; i < n_eval; i++)
            acc_eval[i] += leaf_value[walk_row(walk, p->max_depth, x_eval + i * (size_t)d)];
        /* A sampled row already sits at its leaf (grow_tree moved it there
         * by the same test a walk makes): only the others walk. */
        for (int u = 0; u < n_used; u++) { /* in float, as kace_trees_predict sums */
            int i = used[u];
            acc[i] += leaf_value[b.pos[i] >= 0 ? b.pos[i] : walk_col(walk, p->max_depth, b.col, n, i)];
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
    if (json_out)
        st = kace_boost_json(ctx, trees, d, json_out, json_len);
done:
    kace_trees_free(&own);
    free(b.nz_bin);
    free(b.nz_h);
    free(b.nz_g);
    free(b.scratch);
    free(b.rows);
    free(b.rows_right);
    free(b.n_nonempty);
    free(b.feature_start);
    free(x_eval);
    free(acc_eval);
    free(pred);
    free(b.grad);
    free(b.pos);
    free(used);
    free(pick);
    free(magic);
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
    kace_status st = trees_alloc(ctx, p, trees);
    if (!st && (st = train(ctx, data, y, NULL, p, json, json_len, NULL, 0, NULL, trees)))
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
