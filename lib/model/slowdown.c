/* The slowdown model: kace's default predictor.
 *
 * Instead of regressing the colocation's throughput sum on summed features
 * (the paper's KACE), it predicts what fraction of its exclusive throughput
 * each member keeps next to its partners, then sums fraction x exclusive.
 * The fraction depends on contention, so the member features are shares of
 * the GPU: the member's own sm%, mem% and Nsight "% of peak" throughputs, the
 * partners' summed ones, their products and the member's share of each
 * resource, plus log sizes and memory capacity. Two learners are averaged:
 *  - ridge regression on log(fraction) (z-scored features), and
 *  - gradient-boosted trees (boost.c) on the fraction, either free or
 *    constrained to be non-increasing in the partners' usage
 *    (monotone_constraints): 3-fold cross-validation on the training rows
 *    decides (kace_slowdown_select).
 * A pair gives two training samples and a k-way group k, and one model serves
 * any k: the partners' features are sums. */
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lapacke.h>

#include "boost.h"
#include "forest.h"
#include "slowdown.h"
#include "trees.h"

#define N_MEMBER 26
#define FRACTION_MIN 0.02
#define FRACTION_MAX 1.2

static const kace_metric needed[] = {KACE_M_SM_PCT,          KACE_M_MEM_PCT, KACE_M_SM_THROUGHPUT,
                                     KACE_M_DRAM_THROUGHPUT, KACE_M_MEM_THROUGHPUT, KACE_M_EXCLUSIVE,
                                     KACE_M_THREADS,         KACE_M_MEMCAP};

static void use_reduced_ops(kace_model *m);

void kace_slowdown_params_default(kace_slowdown_params *p)
{
    p->ridge_alpha = 0; /* chosen by cross-validation on the training rows */
    p->tree_weight = 0.5;
    p->n_rounds = 100;
    p->max_depth = 3;
    p->learning_rate = 0.1;
    p->subsample = 0.8;
    p->seed = 0;
    p->monotone = KACE_MONOTONE_SHARES;
    p->select = true;
    p->metrics = KACE_METRICS_FULL;
}

enum { N_NEEDED = sizeof needed / sizeof *needed };

/* A workload's metrics as a model on metric set `set` reads them: those
 * outside the set as 0 (in buf, which only the needed metrics of are
 * written), so that their features are constant and weigh nothing. */
static const double *metrics_read(kace_metric_set set, const double *metric, double *buf)
{
    if (set == KACE_METRICS_FULL)
        return metric;
    for (size_t i = 0; i < N_NEEDED; i++)
        buf[needed[i]] = kace_metric_set_has(set, needed[i]) ? metric[needed[i]] : 0;
    return buf;
}

static kace_status check_workload(kace_ctx *ctx, kace_metric_set set, const kace_dataset *ds, int w)
{
    for (size_t i = 0; i < N_NEEDED; i++)
        if (kace_metric_set_has(set, needed[i]) && isnan(ds->workloads[w].metric[needed[i]]))
            return kace_fail(ctx, KACE_ERR_INVALID,
                             "workload '%s' has no value for metric '%s' (needed by the slowdown model on the %s "
                             "metrics; import %s)",
                             ds->workloads[w].name, kace_metric_name(needed[i]), kace_metric_set_name(set),
                             kace_metric_source(needed[i]));
    if (!(ds->workloads[w].metric[KACE_M_EXCLUSIVE] > 0))
        return kace_fail(ctx, KACE_ERR_INVALID, "workload '%s' has no positive exclusive throughput",
                         ds->workloads[w].name);
    return KACE_OK;
}

/* Member features from the member's own metrics and its partners' summed
 * metrics. Every feature is nondecreasing in every partner sum (own metrics
 * are nonnegative), which is what makes kace_slowdown_member_upper sound. */
static void contention_features(const double *own, const double *other, double *f)
{
    static const kace_metric share[5] = {KACE_M_SM_PCT, KACE_M_MEM_PCT, KACE_M_SM_THROUGHPUT, KACE_M_DRAM_THROUGHPUT,
                                         KACE_M_MEM_THROUGHPUT};
    int at = 0;
    for (int s = 0; s < 5; s++)
        f[at++] = own[share[s]] / 100;
    for (int s = 0; s < 5; s++)
        f[at++] = other[share[s]] / 100;
    for (int s = 0; s < 5; s++)
        f[at++] = own[share[s]] * other[share[s]] / 1e4;
    for (int s = 0; s < 5; s++)
        f[at++] = (other[share[s]] / 100) / (own[share[s]] / 100 + other[share[s]] / 100 + 1e-3);
    f[at++] = log(own[KACE_M_EXCLUSIVE]);
    f[at++] = log(own[KACE_M_THREADS] > 1 ? own[KACE_M_THREADS] : 1);
    f[at++] = log1p(other[KACE_M_THREADS]);
    f[at++] = own[KACE_M_MEMCAP];
    f[at++] = other[KACE_M_MEMCAP];
    f[at++] = own[KACE_M_MEMCAP] + other[KACE_M_MEMCAP];
}

/* Features of member i of a group of k workloads, reading the metrics of set. */
static void member_features(kace_metric_set set, const kace_dataset *ds, const int *group, int k, int i, double *f)
{
    double other[KACE_N_METRICS] = {0}, buf[KACE_N_METRICS];
    for (int j = 0; j < k; j++)
        if (j != i) {
            const double *metric = metrics_read(set, ds->workloads[group[j]].metric, buf);
            for (size_t m = 0; m < N_NEEDED; m++)
                other[needed[m]] += metric[needed[m]];
        }
    contention_features(metrics_read(set, ds->workloads[group[i]].metric, buf), other, f);
}

static double clamp(double v, double lo, double hi)
{
    return v < lo ? lo : (v > hi ? hi : v);
}

/* Folds the z-scoring into the ridge coefficients, so prediction is one
 * dot product on the raw member features. */
static void prepare_ridge(kace_model *m)
{
    m->ridge_raw[0] = m->ridge[0];
    for (int j = 0; j < N_MEMBER; j++) {
        double w = m->m_std[j] > 0 ? m->ridge[j + 1] / m->m_std[j] : 0;
        m->ridge_raw[j + 1] = w;
        m->ridge_raw[0] -= w * m->m_mean[j];
    }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define SLOWDOWN_AVX512 1
#include <immintrin.h>

/* contention_features for every member of a group at once, with AVX-512:
 * a member's eight needed metrics fill one register (in needed[] order),
 * the partner sums are added in the same order as member_features adds
 * them, and the share features are the same IEEE operations lane by lane,
 * so f (k x N_MEMBER) holds the same bits. Each member's own metrics are
 * read and transformed once per query. fx gets f in float. */
#define AVX512_FN __attribute__((target("avx512f")))

/* The eight needed metrics of a metric array (indexed by kace_metric) in
 * one register, in needed[] order. */
AVX512_FN static inline __m512d needed_lanes(const double *metric)
{
    _Static_assert(KACE_M_THREADS == 0 && KACE_M_SM_THROUGHPUT == 1 && KACE_M_DRAM_THROUGHPUT == 2 &&
                       KACE_M_MEM_THROUGHPUT == 3 && KACE_M_EXCLUSIVE == 6 && KACE_M_SM_PCT == 7 &&
                       KACE_M_MEM_PCT == 8 && KACE_M_MEMCAP == 9 && KACE_N_METRICS >= 16,
                   "the lanes follow needed[] and kace_metric's order");
    const __m512i pick = _mm512_set_epi64(9, 0, 6, 3, 2, 1, 8, 7);
    return _mm512_permutex2var_pd(_mm512_loadu_pd(metric), pick, _mm512_loadu_pd(metric + 8));
}

/* check_workload's test for every member at once: 1 when all pass. Also
 * sets *in_range when every needed metric lies within the profile range,
 * where kace_slowdown_coverage_of would find coverage 1. */
AVX512_FN static int group_check_avx512(const kace_model *m, const kace_dataset *ds, const int *group, int k,
                                        int *in_range)
{
    __m512d lo = needed_lanes(m->profile_lo), hi = needed_lanes(m->profile_hi);
    __mmask8 bad = 0, out = 0;
    for (int i = 0; i < k; i++) {
        const double *mt = ds->workloads[group[i]].metric;
        __m512d v = needed_lanes(mt);
        bad |= _mm512_cmp_pd_mask(v, v, _CMP_UNORD_Q);
        out |= _mm512_cmp_pd_mask(v, hi, _CMP_GT_OQ) | _mm512_cmp_pd_mask(v, lo, _CMP_LT_OQ);
        if (!(mt[KACE_M_EXCLUSIVE] > 0))
            bad = 1;
    }
    *in_range = !m->has_profile_range || !out;
    return !bad;
}

AVX512_FN static void group_features_avx512(const kace_dataset *ds, const int *group, int k, double *f, float *fx)
{
    const __m512d hundred = _mm512_set1_pd(100), ten_k = _mm512_set1_pd(1e4), eps = _mm512_set1_pd(1e-3);
    __m512d own[KACE_MAX_K];
    for (int i = 0; i < k; i++)
        own[i] = needed_lanes(ds->workloads[group[i]].metric);
    for (int i = 0; i < k; i++) {
        __m512d other = _mm512_setzero_pd();
        for (int j = 0; j < k; j++)
            if (j != i)
                other = _mm512_add_pd(other, own[j]);
        __m512d a = _mm512_div_pd(own[i], hundred), b = _mm512_div_pd(other, hundred);
        __m512d c = _mm512_div_pd(_mm512_mul_pd(own[i], other), ten_k);
        __m512d share = _mm512_div_pd(b, _mm512_add_pd(_mm512_add_pd(a, b), eps));
        double *fi = f + (size_t)i * N_MEMBER;
        _mm512_mask_storeu_pd(fi, 0x1f, a);
        _mm512_mask_storeu_pd(fi + 5, 0x1f, b);
        _mm512_mask_storeu_pd(fi + 10, 0x1f, c);
        _mm512_mask_storeu_pd(fi + 15, 0x1f, share);
        _Alignas(64) double o[8], t[8];
        _mm512_store_pd(o, own[i]);
        _mm512_store_pd(t, other);
        fi[20] = log(o[5]);
        fi[21] = log(o[6] > 1 ? o[6] : 1);
        fi[22] = log1p(t[6]);
        fi[23] = o[7];
        fi[24] = t[7];
        fi[25] = o[7] + t[7];
        float *xi = fx + (size_t)i * N_MEMBER;
        _mm256_storeu_ps(xi, _mm512_cvtpd_ps(_mm512_loadu_pd(fi)));
        _mm256_storeu_ps(xi + 8, _mm512_cvtpd_ps(_mm512_loadu_pd(fi + 8)));
        _mm256_storeu_ps(xi + 16, _mm512_cvtpd_ps(_mm512_loadu_pd(fi + 16)));
        xi[24] = (float)fi[24];
        xi[25] = (float)fi[25];
    }
}
#else
#define SLOWDOWN_AVX512 0
#endif

/* Member features of a group (k x N_MEMBER), in double and in float,
 * portably: partner sums as member_features adds them (same order, so the
 * same bits), but only of the metrics the features read. */
static void group_features(kace_metric_set set, const kace_dataset *ds, const int *group, int k, double *f,
                           float *fx)
{
    double other[KACE_N_METRICS], buf[KACE_N_METRICS];
    for (int i = 0; i < k; i++) {
        for (size_t m2 = 0; m2 < N_NEEDED; m2++) {
            kace_metric mt = needed[m2];
            double s = 0;
            if (kace_metric_set_has(set, mt))
                for (int j = 0; j < k; j++)
                    if (j != i)
                        s += ds->workloads[group[j]].metric[mt];
            other[mt] = s;
        }
        contention_features(metrics_read(set, ds->workloads[group[i]].metric, buf), other, f + (size_t)i * N_MEMBER);
        for (int j = 0; j < N_MEMBER; j++)
            fx[i * N_MEMBER + j] = (float)f[i * N_MEMBER + j];
    }
}

/* Predicted throughput of every member of a group and their sum, by the
 * ridge part, the tree part and the blend. The AVX-512 features go with the
 * trees' AVX-512 path (kace_trees_use_simd turns both on or off). */
static void predict_group(const kace_model *m, const kace_dataset *ds, const int *group, int k, double *blend,
                          double *ridge_sum, double *tree_sum, double *member)
{
    double f[KACE_MAX_K * N_MEMBER], tree_frac[KACE_MAX_K], ridge_part[KACE_MAX_K];
    float fx[KACE_MAX_K * N_MEMBER]; /* finite by construction: the float fast path */
#if SLOWDOWN_AVX512
    if (m->trees.simd && m->metrics == KACE_METRICS_FULL)
        group_features_avx512(ds, group, k, f, fx);
    else
#endif
        group_features(m->metrics, ds, group, k, f, fx);
    for (int i = 0; i < k; i++) {
        double z = m->ridge_raw[0];
        for (int j = 0; j < N_MEMBER; j++)
            z += m->ridge_raw[j + 1] * f[i * N_MEMBER + j];
        ridge_part[i] = ds->workloads[group[i]].metric[KACE_M_EXCLUSIVE] *
                        exp(clamp(z, log(FRACTION_MIN), log(FRACTION_MAX)));
    }
    if (m->trees.n_trees)
        kace_trees_predict_rows_f(&m->trees, fx, N_MEMBER, k, tree_frac);
    *ridge_sum = *tree_sum = 0;
    for (int i = 0; i < k; i++) {
        double excl = ds->workloads[group[i]].metric[KACE_M_EXCLUSIVE];
        double r = ridge_part[i];
        double t = m->trees.n_trees ? excl * clamp(tree_frac[i], FRACTION_MIN, FRACTION_MAX) : r;
        *ridge_sum += r;
        *tree_sum += t;
        if (member)
            member[i] = (1 - m->tree_weight) * r + m->tree_weight * t;
    }
    *blend = (1 - m->tree_weight) * *ridge_sum + m->tree_weight * *tree_sum;
}

/* Distance, in log(1 + value), of v beyond [lo, hi]; 0 inside. Only
 * values outside pay for a logarithm, which keeps prediction cheap. */
static double beyond(double v, double lo, double hi)
{
    if (v > hi)
        return log1p(v) - log1p(hi);
    if (v < lo)
        return log1p(lo) - log1p(fmax(v, 0));
    return 0;
}

void kace_slowdown_coverage_of(const kace_model *m, const kace_dataset *ds, const int *group, int k,
                               kace_slowdown_coverage *out)
{
    *out = (kace_slowdown_coverage){.coverage = 1, .member = -1, .metric = needed[0], .value = NAN, .lo = NAN,
                                    .hi = NAN};
    if (!m->has_profile_range)
        return;
    double furthest = 0;
    for (int i = 0; i < k; i++)
        for (size_t j = 0; j < N_NEEDED; j++) {
            kace_metric metric = needed[j];
            if (!kace_metric_set_has(m->metrics, metric))
                continue;
            double v = ds->workloads[group[i]].metric[metric];
            double d = beyond(v, m->profile_lo[metric], m->profile_hi[metric]);
            if (d > furthest) {
                furthest = d;
                *out = (kace_slowdown_coverage){exp(-d), i, metric, v, m->profile_lo[metric], m->profile_hi[metric]};
            }
        }
}

kace_status kace_slowdown_predict(kace_ctx *ctx, const kace_model *m, const kace_dataset *ds, const int *group, int k,
                                  double *sum, double *confidence, double *member)
{
    if (m->kind != KACE_MODEL_SLOWDOWN)
        return kace_fail(ctx, KACE_ERR_MODEL, "not a slowdown model");
    if (k < 1 || k > KACE_MAX_K)
        return kace_fail(ctx, KACE_ERR_INVALID, "a group has 1..%d workloads, not %d", KACE_MAX_K, k);
    int checked = 0, in_range = 0; /* in_range: coverage 1, known without kace_slowdown_coverage_of */
#if SLOWDOWN_AVX512
    checked = m->trees.simd && m->metrics == KACE_METRICS_FULL && group_check_avx512(m, ds, group, k, &in_range);
#endif
    for (int i = 0; i < k && !checked; i++) { /* also names what the AVX-512 check found missing */
        kace_status st = check_workload(ctx, m->metrics, ds, group[i]);
        if (st)
            return st;
    }
    double r, t;
    predict_group(m, ds, group, k, sum, &r, &t, member);
    /* The two learners agree when the colocation looks like the training
     * data; their gap is the uncertainty a scheduler can act on. But both
     * extrapolate flat or linearly from the training workloads, so they can
     * agree on a member unlike any of them: coverage says how unlike. */
    if (confidence) {
        double agreement = m->trees.n_trees && r + t > 0 ? clamp(1.0 - fabs(r - t) / (0.5 * (r + t)), 0, 1) : 1.0;
        kace_slowdown_coverage c = {.coverage = 1};
        if (!in_range)
            kace_slowdown_coverage_of(m, ds, group, k, &c);
        *confidence = agreement * c.coverage;
    }
    return KACE_OK;
}

/* The normal equations of ridge on z-scored features: the column means and
 * (population) stds go into m, Z'Z's upper triangle into gram (row-major),
 * Z'(y - mean) into rhs. */
static void ridge_normal(kace_model *m, const double *X, const double *y, size_t n, double *gram, double *rhs,
                         double *ymean)
{
    int d = N_MEMBER;
    for (int j = 0; j < d; j++) {
        double s = 0, ss = 0;
        for (size_t i = 0; i < n; i++)
            s += X[i * d + j];
        m->m_mean[j] = s / (double)n;
        for (size_t i = 0; i < n; i++)
            ss += (X[i * d + j] - m->m_mean[j]) * (X[i * d + j] - m->m_mean[j]);
        m->m_std[j] = sqrt(ss / (double)n);
        if (m->m_std[j] < 1e-12)
            m->m_std[j] = 0;
    }
    *ymean = 0;
    for (size_t i = 0; i < n; i++)
        *ymean += y[i] / (double)n;
    memset(gram, 0, (size_t)d * (size_t)d * sizeof *gram);
    memset(rhs, 0, (size_t)d * sizeof *rhs);
    double z[N_MEMBER];
    for (size_t i = 0; i < n; i++) {
        for (int j = 0; j < d; j++)
            z[j] = m->m_std[j] > 0 ? (X[i * d + j] - m->m_mean[j]) / m->m_std[j] : 0;
        double yi = y[i] - *ymean;
        for (int j = 0; j < d; j++) {
            rhs[j] += z[j] * yi;
            for (int l = j; l < d; l++)
                gram[j * d + l] += z[j] * z[l];
        }
    }
}

/* Solves (Z'Z + alpha I) w = Z'(y - mean) by Cholesky into m's ridge
 * coefficients: well conditioned, as the features are z-scored and
 * alpha >= 0.3, and a tenth of the cost of an SVD least-squares solve. */
static kace_status ridge_solve(kace_ctx *ctx, kace_model *m, const double *gram, const double *rhs, double ymean,
                               double alpha)
{
    int d = N_MEMBER;
    double a[N_MEMBER * N_MEMBER], w[N_MEMBER];
    memcpy(a, gram, sizeof a);
    memcpy(w, rhs, sizeof w);
    for (int j = 0; j < d; j++)
        a[j * d + j] += alpha;
    /* the upper triangle, row-major, is the lower one column-major */
    lapack_int info = LAPACKE_dposv(LAPACK_COL_MAJOR, 'L', d, 1, a, d, w, d);
    if (info != 0)
        return kace_fail(ctx, KACE_ERR_MODEL, "ridge regression failed (LAPACKE_dposv info=%d)", (int)info);
    m->ridge[0] = ymean;
    for (int j = 0; j < d; j++)
        m->ridge[j + 1] = w[j];
    return KACE_OK;
}

static kace_status fit_ridge(kace_ctx *ctx, kace_model *m, const double *X, const double *y, size_t n, double alpha)
{
    double gram[N_MEMBER * N_MEMBER], rhs[N_MEMBER], ymean;
    ridge_normal(m, X, y, n, gram, rhs, &ymean);
    return ridge_solve(ctx, m, gram, rhs, ymean, alpha);
}

/* Deals n items into n_folds folds by a seeded shuffle (xorshift). */
static void deal_folds(size_t n, int n_folds, uint64_t seed, int *fold)
{
    uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++)
        fold[i] = (int)(i % (size_t)n_folds);
    for (size_t i = n; i > 1; i--) {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        size_t j = (size_t)(state % i);
        int t = fold[i - 1];
        fold[i - 1] = fold[j];
        fold[j] = t;
    }
}

/* Chooses the ridge penalty by k-fold cross-validation over the training
 * colocations (a colocation's members stay in one fold): the alpha with the
 * lowest held-out squared error of log(fraction). Only the rows given to
 * the fit are used. */
static kace_status choose_alpha(kace_ctx *ctx, const double *X, const double *y, const size_t *row_of, size_t n_samples,
                                size_t n_rows, uint64_t seed, double *alpha)
{
    static const double grid[] = {0.3, 1, 3, 10, 30};
    int n_folds = n_rows < 5 ? (int)n_rows : 5;
    int *fold_of_row = malloc(n_rows * sizeof *fold_of_row);
    double *Xt = malloc(n_samples * N_MEMBER * sizeof *Xt), *yt = malloc(n_samples * sizeof *yt);
    kace_model *tmp = calloc(1, sizeof *tmp);
    kace_status st = KACE_OK;
    if (!fold_of_row || !Xt || !yt || !tmp) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
        goto done;
    }
    deal_folds(n_rows, n_folds, seed, fold_of_row);
    /* Folds outside, penalties inside: each fold's normal equations are
     * built once and solved for every penalty. */
    enum { N_GRID = sizeof grid / sizeof *grid };
    double sse[N_GRID] = {0};
    for (int f = 0; f < n_folds && !st; f++) {
        size_t nt = 0;
        for (size_t i = 0; i < n_samples; i++)
            if (fold_of_row[row_of[i]] != f) {
                memcpy(Xt + nt * N_MEMBER, X + i * N_MEMBER, N_MEMBER * sizeof *X);
                yt[nt++] = y[i];
            }
        if (nt < 2)
            continue;
        double gram[N_MEMBER * N_MEMBER], rhs[N_MEMBER], ymean;
        ridge_normal(tmp, Xt, yt, nt, gram, rhs, &ymean);
        for (int g = 0; g < N_GRID && !st; g++) {
            if ((st = ridge_solve(ctx, tmp, gram, rhs, ymean, grid[g])))
                break;
            for (size_t i = 0; i < n_samples; i++)
                if (fold_of_row[row_of[i]] == f) {
                    double z = tmp->ridge[0];
                    for (int j = 0; j < N_MEMBER; j++)
                        z += tmp->ridge[j + 1] *
                             (tmp->m_std[j] > 0 ? (X[i * N_MEMBER + j] - tmp->m_mean[j]) / tmp->m_std[j] : 0);
                    sse[g] += (z - y[i]) * (z - y[i]);
                }
        }
    }
    double best = INFINITY;
    *alpha = grid[0];
    for (int g = 0; g < N_GRID && !st; g++)
        if (sse[g] < best) {
            best = sse[g];
            *alpha = grid[g];
        }
done:
    free(fold_of_row);
    free(Xt);
    free(yt);
    free(tmp);
    return st;
}

/* Domain knowledge: a workload cannot keep more of its speed when its
 * partners use more of the GPU. The trees' fraction is made non-increasing
 * in the partners' summed shares (features 5..9) and the partners' part of
 * each resource (15..19); KACE_MONOTONE_PARTNERS adds the own x partners
 * products (10..14) and the partners' thread count (22). See
 * member_features for the layout. */
static void monotone_constraints(int which, signed char *out)
{
    for (int j = 0; j < N_MEMBER; j++) {
        bool shares = (j >= 5 && j < 10) || (j >= 15 && j < 20);
        bool partners = shares || (j >= 10 && j < 15) || j == 22;
        bool down = which == KACE_MONOTONE_PARTNERS ? partners : (which == KACE_MONOTONE_SHARES && shares);
        out[j] = down ? -1 : 0;
    }
}

/* Boosted trees on the fraction, as scikit-learn's GradientBoostingRegressor
 * (squared error, no L2 on leaves, starting from the mean), fitted by
 * kace's own booster (boost.c): xgboost's algorithm at a twentieth of its
 * cost on a few hundred rows. */
static kace_status fit_trees(kace_ctx *ctx, kace_model *m, const kace_boost_data *data, const double *frac,
                             const kace_slowdown_params *p)
{
    signed char monotone[N_MEMBER];
    monotone_constraints(p->monotone, monotone);
    kace_boost_params bp = {.n_rounds = p->n_rounds,
                            .max_depth = p->max_depth,
                            .learning_rate = p->learning_rate,
                            .subsample = p->subsample,
                            .seed = p->seed,
                            .monotone = monotone};
    /* no JSON: slowdown_booster_json makes it if the model is saved */
    kace_status st = kace_boost_train_trees(ctx, data, frac, &bp, NULL, NULL, &m->trees);
    if (!st)
        kace_trees_find_monotone(&m->trees, N_MEMBER); /* for the member bounds */
    return st;
}

/* The member samples of colocations rows[0..n): features, fraction of
 * exclusive throughput, its clamped log, the exclusive throughput, and the
 * colocation (index into rows) each came from. */
typedef struct member_samples {
    size_t n;
    double *X, *frac, *logf, *exclusive;
    size_t *row_of;
    kace_boost_data *boost; /* X binned for the booster, built once (samples_boost_data) */
} member_samples;

static void member_samples_free(member_samples *s)
{
    free(s->X);
    free(s->frac);
    free(s->logf);
    free(s->exclusive);
    free(s->row_of);
    kace_boost_data_free(&s->boost);
    memset(s, 0, sizeof *s);
}

/* The binned samples the booster fits on: the selection's folds and the
 * final fit share them (sorting every feature once). */
static kace_status samples_boost_data(kace_ctx *ctx, member_samples *s)
{
    return s->boost ? KACE_OK : kace_boost_data_new(ctx, s->X, s->n, N_MEMBER, &s->boost);
}

static kace_status member_samples_of(kace_ctx *ctx, kace_metric_set set, const kace_dataset *ds, const int *rows,
                                     size_t n, member_samples *s)
{
    memset(s, 0, sizeof *s);
    for (size_t r = 0; r < n; r++)
        s->n += (size_t)ds->colocations[rows[r]].k;
    s->X = malloc((s->n ? s->n : 1) * N_MEMBER * sizeof *s->X);
    s->frac = malloc((s->n ? s->n : 1) * sizeof *s->frac);
    s->logf = malloc((s->n ? s->n : 1) * sizeof *s->logf);
    s->exclusive = malloc((s->n ? s->n : 1) * sizeof *s->exclusive);
    s->row_of = malloc((s->n ? s->n : 1) * sizeof *s->row_of);
    kace_status st = KACE_OK;
    if (!s->X || !s->frac || !s->logf || !s->exclusive || !s->row_of) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
        goto fail;
    }
    size_t at = 0;
    for (size_t r = 0; r < n; r++) {
        const kace_colocation *c = &ds->colocations[rows[r]];
        if (!isfinite(kace_colocation_sum(c))) {
            st = kace_fail(ctx, KACE_ERR_INVALID, "colocation %d has no finite throughput", rows[r]);
            goto fail;
        }
        for (int i = 0; i < c->k; i++) {
            if ((st = check_workload(ctx, set, ds, c->workload[i])))
                goto fail;
            member_features(set, ds, c->workload, c->k, i, s->X + at * N_MEMBER);
            s->exclusive[at] = ds->workloads[c->workload[i]].metric[KACE_M_EXCLUSIVE];
            s->frac[at] = c->throughput[i] / s->exclusive[at];
            s->logf[at] = log(clamp(s->frac[at], FRACTION_MIN, 1.5));
            s->row_of[at] = r;
            at++;
        }
    }
    return KACE_OK;
fail:
    member_samples_free(s);
    return st;
}

static kace_status select_on(kace_ctx *ctx, const kace_dataset *ds, const int *rows, size_t n,
                             member_samples *s, const kace_slowdown_params *params,
                             kace_slowdown_params *chosen);

/* The range of each metric the model reads over the workloads of the
 * training rows (check_workload has made sure they are all there); 0..0
 * for a needed metric outside the model's set (it reads it as 0). */
static void profile_range(const kace_dataset *ds, const int *rows, size_t n, kace_model *m)
{
    double buf[KACE_N_METRICS];
    for (size_t j = 0; j < N_NEEDED; j++) {
        bool read = kace_metric_set_has(m->metrics, needed[j]);
        m->profile_lo[needed[j]] = read ? INFINITY : 0;
        m->profile_hi[needed[j]] = read ? -INFINITY : 0;
    }
    for (size_t r = 0; r < n; r++) {
        const kace_colocation *c = &ds->colocations[rows[r]];
        for (int i = 0; i < c->k; i++)
            for (size_t j = 0; j < N_NEEDED; j++) {
                double v = metrics_read(m->metrics, ds->workloads[c->workload[i]].metric, buf)[needed[j]];
                m->profile_lo[needed[j]] = fmin(m->profile_lo[needed[j]], v);
                m->profile_hi[needed[j]] = fmax(m->profile_hi[needed[j]], v);
            }
    }
    m->has_profile_range = true;
}

kace_status kace_model_fit_slowdown(kace_ctx *ctx, const kace_dataset *ds, const int *rows, size_t n,
                                    const kace_slowdown_params *params, kace_model **out)
{
    *out = NULL;
    kace_slowdown_params p;
    if (params)
        p = *params;
    else
        kace_slowdown_params_default(&p);
    if (p.ridge_alpha < 0 || p.tree_weight < 0 || p.tree_weight > 1 || p.n_rounds < 0 || p.n_rounds > 100000 ||
        p.max_depth < 1 || p.max_depth > 6 || !(p.learning_rate > 0) || !(p.subsample > 0 && p.subsample <= 1) ||
        p.monotone < KACE_MONOTONE_NONE || p.monotone > KACE_MONOTONE_PARTNERS || (int)p.metrics < 0 ||
        p.metrics >= KACE_N_METRIC_SETS)
        return kace_fail(ctx, KACE_ERR_INVALID, "slowdown model: parameters out of range");
    if (n < 2)
        return kace_fail(ctx, KACE_ERR_MODEL, "cannot fit a model on %zu colocation(s) (need at least 2)", n);
    member_samples s;
    kace_status st = member_samples_of(ctx, p.metrics, ds, rows, n, &s);
    if (st)
        return st;
    kace_model *m = NULL;
    /* The ridge penalty is chosen by CV here, or by the selection below
     * (the same choice on the same rows, made once). */
    if (p.ridge_alpha == 0 && (st = choose_alpha(ctx, s.X, s.logf, s.row_of, s.n, n, p.seed, &p.ridge_alpha)))
        goto fail;
    if (p.select && (st = select_on(ctx, ds, rows, n, &s, &p, &p)))
        goto fail;
    m = calloc(1, sizeof *m);
    if (!m) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
        goto fail;
    }
    kace_model_set_kind(m, KACE_MODEL_SLOWDOWN);
    m->metrics = p.metrics;
    use_reduced_ops(m);
    m->features = kace_feature_set_restrict(&kace_features_kace, p.metrics);
    m->n_features = m->features->n;
    m->n_member_features = N_MEMBER;
    m->n_fit = n;
    m->tree_weight = p.n_rounds > 0 ? p.tree_weight : 0;
    kace_model_set_label_stats(m, ds, rows, n);
    m->ridge_alpha = p.ridge_alpha;
    profile_range(ds, rows, n, m);
    if ((st = fit_ridge(ctx, m, s.X, s.logf, s.n, p.ridge_alpha)))
        goto fail;
    prepare_ridge(m);
    if (p.n_rounds > 0 && ((st = samples_boost_data(ctx, &s)) || (st = fit_trees(ctx, m, s.boost, s.frac, &p))))
        goto fail;
    member_samples_free(&s);
    *out = m;
    return KACE_OK;
fail:
    member_samples_free(&s);
    kace_model_free(&m);
    return st;
}

kace_status kace_slowdown_restore(kace_ctx *ctx, kace_model *m)
{
    use_reduced_ops(m);
    prepare_ridge(m);
    kace_trees_free(&m->trees);
    if (!m->booster_json_len)
        return KACE_OK; /* ridge only */
    kace_status st = kace_trees_from_json(ctx, m->booster_json, m->booster_json_len, N_MEMBER, &m->trees);
    if (!st)
        kace_trees_find_monotone(&m->trees, N_MEMBER); /* for the member bounds */
    return st;
}

/* Member bounds: an upper bound on a member's predicted throughput when
 * its partners' summed metrics lie in a box (see model_internal.h).
 *
 * Why it holds: every feature depends on the member's own metrics and on
 * ONE partner sum, and is nondecreasing in that sum (own metrics are
 * nonnegative). So each feature's range over the box is [f(lo), f(hi)].
 * - Ridge: z is a sum of one-variable functions of the partner sums, so its
 *   maximum over the box is the sum of each function's maximum over its
 *   interval (share_term_max): exact, where taking each feature at its own
 *   best end would not be (one partner share feeds three features whose
 *   weights pull opposite ways).
 * - Trees: the best leaf each tree can reach inside the box. The member's
 *   own features are fixed, so each tree is first specialized to the
 *   member (its own-feature splits resolved, trees left with one leaf
 *   folded into a constant); only splits on partner features remain.
 *   Where a tree is monotone in a partner feature (kace_trees_find_monotone:
 *   xgboost's monotone constraints make most share features so), its
 *   maximum over the box lies at that feature's low end (never rising) or
 *   high end (never falling), so the walk takes only the side that end
 *   falls on: same maximum, fewer branches.
 * The tree part costs most, and a bound over a larger box is still a bound,
 * so callers may compute the ridge part alone and reuse a tree part
 * computed for a box that contains this one (kace_slowdown_member_bound_parts). */

static double max2(double a, double b)
{
    return a > b ? a : b;
}

/* The ridge terms one partner share contributes, a*x + c*x/(d + x), in
 * percent (x = the partners' share, d = the member's own share plus 0.1:
 * the features' shares over 100, folded into a and d). Their
 * largest value over an interval is at one point of it, known once per
 * member (kace_member_bound.at, set by share_term_at), so a box's bound
 * takes one division per share; the rare convex case with a minimum
 * inside takes both ends. */
static double share_term(double a, double c, double d, double x)
{
    return a * x + c * x / (d + x);
}

/* Where share_term is largest over [lo, hi], as a point clamped into it:
 * when c > 0 the terms are concave, rising while x < the stationary point
 * (everywhere when a >= 0) and falling after; when c <= 0 they are convex
 * or linear (slope between a + c/d at x = 0 and a), so rising everywhere
 * when a + c/d >= 0, falling when a <= 0, and otherwise largest at one end
 * or the other (*both set). An end picked exactly is within rounding of
 * the other end's value, which the bound's slack covers. */
static double share_term_at(double a, double c, double d, bool *both)
{
    *both = false;
    if (c > 0)
        return a < 0 ? sqrt(-c * d / a) - d : INFINITY;
    if (a + c / d >= 0)
        return INFINITY;
    if (a <= 0)
        return -INFINITY;
    *both = true;
    return INFINITY;
}

/* Features that depend on the member alone. */
static bool own_feature(int j)
{
    return j < 5 || j == 20 || j == 21 || j == 23;
}

/* The next float below / above x (x finite): the features are computed in
 * double and compared in float, so a box edge is widened by one step. */
static float float_down(float x)
{
    if (x == 0)
        return -FLT_TRUE_MIN;
    uint32_t b;
    memcpy(&b, &x, sizeof b);
    b += x > 0 ? (uint32_t)-1 : 1u;
    memcpy(&x, &b, sizeof x);
    return x;
}

static float float_up(float x)
{
    return -float_down(-x);
}

/* Copies node v of tree `tree` into mb->node in preorder (left child next,
 * right child at .right), following the member's own features through
 * their splits, and renumbering splits on features the tree is monotone in
 * (see kace_member_node). */
static void specialize(const kace_trees *t, int tree, int v, const float *own_f, kace_member_bound *mb)
{
    const kace_tree_node *nd = &t->node[v];
    while (nd->left >= 0 && own_feature(nd->feature)) /* no NaN: x < threshold goes left */
        nd = &t->node[own_f[nd->feature] < nd->threshold ? nd->left : nd->right];
    int at = mb->n_nodes++; /* room for every node of the model (init) */
    mb->node[at].value = nd->threshold;
    if (nd->left < 0) {
        mb->node[at].feature = -1;
        return;
    }
    int mono = t->monotone ? t->monotone[(size_t)tree * N_MEMBER + (size_t)nd->feature] : 0;
    mb->node[at].feature = (int16_t)(nd->feature + (mono < 0 ? N_MEMBER : mono > 0 ? 2 * N_MEMBER : 0));
    specialize(t, tree, nd->left, own_f, mb);
    mb->node[at].right = mb->n_nodes;
    specialize(t, tree, nd->right, own_f, mb);
}

/* The one member feature the specialized tree at node[first .. end) splits
 * on, or -1 when it splits on several. */
static int tree_feature(const kace_member_node *node, int first, int end)
{
    int feature = -1;
    for (int i = first; i < end; i++)
        if (node[i].feature >= 0) {
            int j = node[i].feature % N_MEMBER;
            if (feature >= 0 && j != feature)
                return -1;
            feature = j;
        }
    return feature;
}

/* The leaf a one-feature tree gives for feature value x. */
static float point_leaf(const kace_member_node *node, int i, float x)
{
    while (node[i].feature >= 0)
        i = x < node[i].value ? i + 1 : node[i].right;
    return node[i].value;
}

/* Sums the active trees that split on one feature, feature by feature,
 * into step functions (kace_member_bound.step) and drops them from the
 * walked trees. The step function's maximum over a range is at most the sum
 * of the trees' maxima, so the bound only tightens, and one scan of sorted
 * thresholds replaces many walks. Nonzero when out of memory. */
static int merge_step_trees(kace_member_bound *mb)
{
    int n_active = mb->n_active, *feature = malloc((size_t)(n_active ? n_active : 1) * 3 * sizeof *feature);
    int *tree = feature + n_active; /* one-feature trees, grouped by feature */
    int *start = tree + n_active;   /* each tree's first node (mb->active is compacted) */
    mb->step_thr = malloc((size_t)(mb->n_nodes ? mb->n_nodes : 1) * sizeof *mb->step_thr);
    mb->step_cell = malloc((size_t)(mb->n_nodes + N_MEMBER) * sizeof *mb->step_cell);
    if (!feature || !mb->step_thr || !mb->step_cell) {
        free(feature);
        return 1;
    }
    int count[N_MEMBER + 1] = {0}, kept = 0; /* count[j]: where feature j's trees start in tree[] */
    memcpy(start, mb->active, (size_t)n_active * sizeof *start);
    for (int i = 0; i < n_active; i++) {
        feature[i] = tree_feature(mb->node, start[i], i + 1 < n_active ? start[i + 1] : mb->n_nodes);
        if (feature[i] >= 0)
            count[feature[i] + 1]++;
    }
    for (int j = 0; j < N_MEMBER; j++)
        count[j + 1] += count[j];
    int at[N_MEMBER + 1];
    memcpy(at, count, sizeof at);
    for (int i = 0; i < n_active; i++)
        if (feature[i] >= 0)
            tree[at[feature[i]]++] = i;
        else
            mb->active[kept++] = mb->active[i]; /* still walked */
    int n_thr_all = 0;
    for (int j = 0; j < N_MEMBER; j++) {
        int first = n_thr_all, n_thr = 0;
        for (int e = count[j]; e < count[j + 1]; e++) {
            int i = tree[e], end = i + 1 < n_active ? start[i + 1] : mb->n_nodes;
            float mag = 0;
            for (int v = start[i]; v < end; v++) {
                float x = mb->node[v].value;
                if (mb->node[v].feature >= 0) { /* insert x, keeping thresholds sorted and distinct */
                    int p = n_thr;
                    while (p > 0 && mb->step_thr[first + p - 1] > x)
                        p--;
                    if (p > 0 && mb->step_thr[first + p - 1] == x)
                        continue;
                    memmove(mb->step_thr + first + p + 1, mb->step_thr + first + p,
                            (size_t)(n_thr - p) * sizeof *mb->step_thr);
                    mb->step_thr[first + p] = x;
                    n_thr++;
                } else if (fabsf(x) > mag) {
                    mag = fabsf(x);
                }
            }
            mb->tree_const_mag += mag; /* covers the leaf a cell takes from this tree */
        }
        if (!n_thr)
            continue;
        const float *thr = mb->step_thr + first;
        int f = mb->n_steps++;
        mb->step[f].feature = j;
        mb->step[f].first = first;
        mb->step[f].n_thr = n_thr;
        /* cell c holds [thr[c-1], thr[c]); its lowest point stands for it */
        for (int c = 0; c <= n_thr; c++) {
            float x = c ? thr[c - 1] : -INFINITY;
            double sum = 0;
            for (int e = count[j]; e < count[j + 1]; e++)
                sum += point_leaf(mb->node, start[tree[e]], x);
            mb->step_cell[first + f + c] = sum;
        }
        n_thr_all += n_thr;
    }
    mb->n_active = kept;
    free(feature);
    return 0;
}

static const kace_metric share_metric[5] = {KACE_M_SM_PCT, KACE_M_MEM_PCT, KACE_M_SM_THROUGHPUT,
                                            KACE_M_DRAM_THROUGHPUT, KACE_M_MEM_THROUGHPUT};

/* The ridge part's preparation, and the member's own features for the
 * trees (kace_slowdown_member_bound_trees prepares those). */
void kace_slowdown_member_bound_ridge(const kace_model *m, const double *own, kace_member_bound *mb)
{
    memset(mb, 0, sizeof *mb);
    double none[KACE_N_METRICS] = {0}, f[N_MEMBER];
    contention_features(own, none, f);
    const double *w = m->ridge_raw + 1;
    mb->excl = own[KACE_M_EXCLUSIVE];
    mb->own_memcap = own[KACE_M_MEMCAP];
    mb->z_own = m->ridge_raw[0];
    mb->mag_own = fabs(m->ridge_raw[0]);
    for (int j = 0; j < N_MEMBER; j++)
        if (own_feature(j)) {
            mb->z_own += w[j] * f[j];
            mb->mag_own += fabs(w[j] * f[j]);
        }
    for (int s = 0; s < 5; s++) {
        double a = w[5 + s] + w[10 + s] * own[share_metric[s]] / 100, c = w[15 + s];
        double d = own[share_metric[s]] / 100 + 1e-3;
        mb->share[s] = own[share_metric[s]];
        /* in percent: a*x/100 + c*(x/100)/(d + x/100) = (a/100)*x + c*x/(100d + x) */
        mb->a[s] = a / 100;
        mb->c[s] = c;
        mb->d[s] = 100 * d;
        bool both;
        mb->at[s] = share_term_at(mb->a[s], c, mb->d[s], &both);
        mb->both_ends |= (unsigned)both << s;
        mb->mag_share[s] = (fabs(w[5 + s]) + fabs(w[10 + s] * own[share_metric[s]] / 100)) / 100;
        mb->mag_const += fabs(w[15 + s]);
    }
    mb->tree_const = m->trees.base_score;
    mb->tree_const_mag = fabs(m->trees.base_score);
    _Static_assert(sizeof mb->own_feature / sizeof *mb->own_feature == N_MEMBER, "kace_member_bound.own_feature");
    for (int j = 0; j < N_MEMBER; j++)
        mb->own_feature[j] = (float)f[j];
}

kace_status kace_slowdown_member_bound_trees(kace_ctx *ctx, const kace_model *m, kace_member_bound *mb)
{
    if (mb->trees_ready)
        return KACE_OK;
    if (!m->trees.n_trees) {
        mb->trees_ready = true;
        return KACE_OK;
    }
    const float *own_f = mb->own_feature;
    mb->active = malloc((size_t)m->trees.n_trees * sizeof *mb->active);
    mb->node = malloc((size_t)m->trees.n_nodes * sizeof *mb->node);
    if (!mb->active || !mb->node)
        goto nomem;
    for (int i = 0; i < m->trees.n_trees; i++) {
        int first = mb->n_nodes;
        specialize(&m->trees, i, m->trees.tree_root[i], own_f, mb);
        if (mb->node[first].feature < 0) { /* one leaf left: a constant */
            mb->tree_const += mb->node[first].value;
            mb->tree_const_mag += fabs(mb->node[first].value);
            mb->n_nodes = first;
        } else {
            mb->active[mb->n_active++] = first;
        }
    }
    if (merge_step_trees(mb))
        goto nomem;
    kace_member_node *fit = realloc(mb->node, (size_t)(mb->n_nodes ? mb->n_nodes : 1) * sizeof *fit);
    if (fit) /* else keep the larger block */
        mb->node = fit;
    mb->trees_ready = true;
    return KACE_OK;
nomem:
    kace_slowdown_member_bound_release(mb);
    return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
}

kace_status kace_slowdown_member_bound_init(kace_ctx *ctx, const kace_model *m, const double *own,
                                            kace_member_bound *mb)
{
    kace_slowdown_member_bound_ridge(m, own, mb);
    return kace_slowdown_member_bound_trees(ctx, m, mb);
}

void kace_slowdown_member_bound_release(kace_member_bound *mb)
{
    free(mb->node);
    free(mb->active);
    free(mb->step_thr);
    free(mb->step_cell);
    mb->step_thr = NULL;
    mb->step_cell = NULL;
    mb->n_steps = 0;
    mb->node = NULL;
    mb->active = NULL;
    mb->n_nodes = mb->n_active = 0;
    mb->trees_ready = false;
}

/* Highest leaf reachable from node i for features in [lo, hi]; a split
 * sends x left when x < threshold. */
static float reach_upper(const kace_member_node *node, int i, const float *lo, const float *hi)
{
    for (;;) {
        const kace_member_node *v = &node[i];
        if (v->feature < 0)
            return v->value;
        bool left = lo[v->feature] < v->value, right = !(hi[v->feature] < v->value);
        if (left && right) {
            float l = reach_upper(node, i + 1, lo, hi), r = reach_upper(node, v->right, lo, hi);
            return l > r ? l : r;
        }
        i = left ? i + 1 : v->right;
    }
}

/* The partner features' ranges over the box, as floats widened by a step
 * (lo[j], hi[j]), then each low end alone (j + N_MEMBER) and each high end
 * alone (j + 2 * N_MEMBER), for monotone splits. */
static void partner_ranges(const kace_member_bound *mb, const double *other_lo, const double *other_hi, float *lo,
                           float *hi)
{
    /* The partner features at the box's two corners, as contention_features
     * computes them. */
    double flo[N_MEMBER], fhi[N_MEMBER];
    for (int s = 0; s < 5; s++) {
        double own = mb->share[s];
        for (int e = 0; e < 2; e++) {
            double other = (e ? other_hi : other_lo)[share_metric[s]], *f = e ? fhi : flo;
            f[5 + s] = other / 100;
            f[10 + s] = own * other / 1e4;
            f[15 + s] = (other / 100) / (own / 100 + other / 100 + 1e-3);
        }
    }
    flo[22] = log1p(other_lo[KACE_M_THREADS]);
    fhi[22] = log1p(other_hi[KACE_M_THREADS]);
    flo[24] = other_lo[KACE_M_MEMCAP];
    fhi[24] = other_hi[KACE_M_MEMCAP];
    flo[25] = mb->own_memcap + other_lo[KACE_M_MEMCAP];
    fhi[25] = mb->own_memcap + other_hi[KACE_M_MEMCAP];
    for (int j = 5; j < N_MEMBER; j++)
        if (!own_feature(j)) {
            lo[j] = lo[j + N_MEMBER] = hi[j + N_MEMBER] = float_down((float)flo[j]);
            hi[j] = lo[j + 2 * N_MEMBER] = hi[j + 2 * N_MEMBER] = float_up((float)fhi[j]);
        }
}

/* The tree part's bound for partner sums in [other_lo, other_hi]. */
static double trees_upper(const kace_member_bound *mb, const double *other_lo, const double *other_hi)
{
    if (!mb->trees_ready) /* a clamped fraction of the exclusive throughput at most */
        return mb->excl * FRACTION_MAX * (1 + 1e-9);
    float lo[3 * N_MEMBER], hi[3 * N_MEMBER];
    partner_ranges(mb, other_lo, other_hi, lo, hi);
    double t = mb->tree_const, tmag = mb->tree_const_mag;
    for (int i = 0; i < mb->n_active; i++) {
        float leaf = reach_upper(mb->node, mb->active[i], lo, hi);
        t += leaf;
        tmag += fabsf(leaf);
    }
    for (int f = 0; f < mb->n_steps; f++) {
        const float *thr = mb->step_thr + mb->step[f].first;
        const double *cell = mb->step_cell + mb->step[f].first + f;
        int j = mb->step[f].feature, n = mb->step[f].n_thr, c = 0;
        while (c < n && !(lo[j] < thr[c])) /* the cell lo[j] falls in */
            c++;
        double best = cell[c];
        while (c < n && !(hi[j] < thr[c])) /* and each cell up to hi[j]'s */
            if (cell[++c] > best)
                best = cell[c];
        t += best;
    }
    t += 1e-5 * tmag; /* the prediction sums the leaves in float */
    return mb->excl * clamp(t, FRACTION_MIN, FRACTION_MAX);
}

/* Highest leaf reachable from node i of the model's trees for partner
 * features in [lo, hi] and the member's own features own_f; *mag: the
 * largest size of those leaves so far. */
static float reach_upper_raw(const kace_tree_node *node, int i, const float *own_f, const float *lo,
                             const float *hi, float *mag)
{
    for (;;) {
        const kace_tree_node *v = &node[i];
        if (v->left < 0) {
            if (fabsf(v->threshold) > *mag)
                *mag = fabsf(v->threshold);
            return v->threshold;
        }
        int f = v->feature;
        if (own_feature(f)) {
            i = own_f[f] < v->threshold ? v->left : v->right;
            continue;
        }
        bool left = lo[f] < v->threshold, right = !(hi[f] < v->threshold);
        if (left && right) {
            float l = reach_upper_raw(node, v->left, own_f, lo, hi, mag);
            float r = reach_upper_raw(node, v->right, own_f, lo, hi, mag);
            return l > r ? l : r;
        }
        i = left ? v->left : v->right;
    }
}

#if SLOWDOWN_AVX512
/* trees_upper_raw's sums for the AVX-512 trees (blocks of 16 depth-3 trees,
 * kace_trees.v_*): per tree, its best leaf among those the ranges [lo, hi]
 * reach and the largest size among them, 16 trees at once. A split is
 * passed on the left when lo < threshold and on the right unless
 * hi < threshold (the walk's tests); an own feature's range is its value.
 * A leaf is reachable when every split on its path is; each node keeps the
 * larger of its reachable children (-inf / 0 when none). Padding trees
 * (past n_trees) are masked out. */
AVX512_FN static void trees_upper_simd(const kace_trees *tr, const float *lo, const float *hi, double *t,
                                       double *tmag)
{
    __m512 lo0 = _mm512_loadu_ps(lo), lo1 = _mm512_maskz_loadu_ps((__mmask16)((1u << (N_MEMBER - 16)) - 1), lo + 16);
    __m512 hi0 = _mm512_loadu_ps(hi), hi1 = _mm512_maskz_loadu_ps((__mmask16)((1u << (N_MEMBER - 16)) - 1), hi + 16);
    const __m512 none = _mm512_set1_ps(-INFINITY), zero = _mm512_setzero_ps();
    __m512d sum = _mm512_setzero_pd(), mag = _mm512_setzero_pd();
    for (int b = 0, left = tr->n_trees; b < tr->n_blocks; b++, left -= 16) {
        const int *f = tr->v_feature + (size_t)b * 112;
        const float *h = tr->v_threshold + (size_t)b * 112, *leaf = tr->v_leaf + (size_t)b * 128;
        __mmask16 go_l[7], go_r[7];
        for (int p = 0; p < 7; p++) {
            __m512i idx = _mm512_load_si512((const void *)(f + 16 * p));
            __m512 thr = _mm512_load_ps(h + 16 * p);
            go_l[p] = _mm512_cmp_ps_mask(_mm512_permutex2var_ps(lo0, idx, lo1), thr, _CMP_LT_OQ);
            go_r[p] = _mm512_cmp_ps_mask(_mm512_permutex2var_ps(hi0, idx, hi1), thr, _CMP_NLT_UQ);
        }
        __m512 best[7], size[7];
        for (int p = 3; p < 7; p++) { /* the last splits choose among leaves */
            __m512 l = _mm512_load_ps(leaf + 32 * (p - 3)), r = _mm512_load_ps(leaf + 32 * (p - 3) + 16);
            best[p] = _mm512_max_ps(_mm512_mask_mov_ps(none, go_l[p], l), _mm512_mask_mov_ps(none, go_r[p], r));
            size[p] = _mm512_max_ps(_mm512_mask_mov_ps(zero, go_l[p], _mm512_abs_ps(l)),
                                    _mm512_mask_mov_ps(zero, go_r[p], _mm512_abs_ps(r)));
        }
        for (int p = 2; p >= 0; p--) {
            best[p] = _mm512_max_ps(_mm512_mask_mov_ps(none, go_l[p], best[2 * p + 1]),
                                    _mm512_mask_mov_ps(none, go_r[p], best[2 * p + 2]));
            size[p] = _mm512_max_ps(_mm512_mask_mov_ps(zero, go_l[p], size[2 * p + 1]),
                                    _mm512_mask_mov_ps(zero, go_r[p], size[2 * p + 2]));
        }
        __mmask16 real = (__mmask16)(left >= 16 ? 0xffffu : (1u << left) - 1);
        __m512 root = _mm512_mask_mov_ps(zero, real, best[0]), root_size = _mm512_mask_mov_ps(zero, real, size[0]);
        sum = _mm512_add_pd(sum, _mm512_cvtps_pd(_mm512_castps512_ps256(root)));
        sum = _mm512_add_pd(sum, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(root), 1))));
        mag = _mm512_add_pd(mag, _mm512_cvtps_pd(_mm512_castps512_ps256(root_size)));
        mag = _mm512_add_pd(mag,
                            _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(root_size), 1))));
    }
    *t += _mm512_reduce_add_pd(sum);
    *tmag += _mm512_reduce_add_pd(mag);
}
#endif

/* The tree part's bound without the member's prepared trees: each tree's
 * best reachable leaf, walking the model's trees (the same maximum per
 * tree; the prepared bound also merges one-feature trees, so it can be
 * tighter). */
static double trees_upper_raw(const kace_model *m, const kace_member_bound *mb, const double *other_lo,
                              const double *other_hi)
{
    float lo[3 * N_MEMBER], hi[3 * N_MEMBER];
    partner_ranges(mb, other_lo, other_hi, lo, hi);
    double t = m->trees.base_score, tmag = fabs(m->trees.base_score);
#if SLOWDOWN_AVX512
    if (m->trees.simd) {
        for (int j = 0; j < N_MEMBER; j++)
            if (own_feature(j))
                lo[j] = hi[j] = mb->own_feature[j];
        trees_upper_simd(&m->trees, lo, hi, &t, &tmag);
        t += 1e-5 * tmag; /* the prediction sums the leaves in float */
        return mb->excl * clamp(t, FRACTION_MIN, FRACTION_MAX);
    }
#endif
    for (int i = 0; i < m->trees.n_trees; i++) {
        float mag = 0, leaf = reach_upper_raw(m->trees.node, m->trees.tree_root[i], mb->own_feature, lo, hi, &mag);
        t += leaf;
        tmag += mag;
    }
    t += 1e-5 * tmag; /* the prediction sums the leaves in float */
    return mb->excl * clamp(t, FRACTION_MIN, FRACTION_MAX);
}

/* e where x = 2^e * m, m in [1, 2), for x >= 1 (finite). */
static int binary_exponent(double x)
{
    uint64_t b;
    memcpy(&b, &x, sizeof b);
    return (int)(b >> 52) - 1023;
}

/* The ridge part's bound for partner sums in [other_lo, other_hi]. */
static double ridge_upper(const kace_model *m, const kace_member_bound *mb, const double *other_lo,
                          const double *other_hi)
{
    const double *w = m->ridge_raw + 1;
    double z = mb->z_own, mag = mb->mag_own + mb->mag_const;
    for (int s = 0; s < 5; s++) {
        double lo = other_lo[share_metric[s]], hi = other_hi[share_metric[s]];
        double x = mb->at[s] < lo ? lo : mb->at[s];
        x = x > hi ? hi : x;
        double t = share_term(mb->a[s], mb->c[s], mb->d[s], x);
        if (mb->both_ends >> s & 1) /* x is hi */
            t = max2(t, share_term(mb->a[s], mb->c[s], mb->d[s], lo));
        z += t;
        mag += mb->mag_share[s] * other_hi[share_metric[s]]; /* the terms' size at hi */
    }
    /* Partners' threads: monotone, so the better end. logf costs far less
     * than log1p and stays within a few float steps of it (at most ~1e-5
     * here); 1e-4 more toward the bound's side covers that. */
    double threads_end = (w[22] < 0 ? other_lo : other_hi)[KACE_M_THREADS];
    double threads = logf((float)(1 + threads_end)) + (w[22] < 0 ? -1e-4 : 1e-4);
    z += w[22] * threads;
    /* Partners' memcap and the group's memcap: linear in the same sum. */
    double mem_lo = other_lo[KACE_M_MEMCAP], mem_hi = other_hi[KACE_M_MEMCAP];
    z += max2(w[24] * mem_lo + w[25] * (mb->own_memcap + mem_lo), w[24] * mem_hi + w[25] * (mb->own_memcap + mem_hi));
    /* The threads term's size for the slack: log(1 + hi) < e * ln 2 where
     * 1 + hi < 2^e (no second logarithm). */
    double threads_hi = w[22] < 0 ? (binary_exponent(1 + other_hi[KACE_M_THREADS]) + 1) * 0.6931471805599453 + 1e-4
                                  : threads;
    mag += fabs(w[22] * threads_hi) + fabs(w[24] * mem_hi) + fabs(w[25] * (mb->own_memcap + mem_hi));
    z += 1e-9 * mag + 1e-12; /* rounding: the prediction sums in another order */
    /* expf in place of exp, for speed: z as a float and expf's own error
     * stay far below the 1e-5 added. */
    return mb->excl * (double)expf((float)clamp(z, log(FRACTION_MIN), log(FRACTION_MAX))) * (1 + 1e-5);
}

double kace_slowdown_member_ridge(const kace_model *m, const kace_member_bound *mb, const double *other_lo,
                                  const double *other_hi)
{
    return ridge_upper(m, mb, other_lo, other_hi);
}

double kace_slowdown_member_trees(const kace_model *m, const kace_member_bound *mb, const double *other_lo,
                                  const double *other_hi)
{
    return m->trees.n_trees ? trees_upper(mb, other_lo, other_hi) : 0;
}

double kace_slowdown_member_trees_unprepared(const kace_model *m, const kace_member_bound *mb,
                                             const double *other_lo, const double *other_hi)
{
    return m->trees.n_trees ? trees_upper_raw(m, mb, other_lo, other_hi) : 0;
}

double kace_slowdown_blend_upper(const kace_model *m, double ridge, double trees)
{
    if (!m->trees.n_trees)
        return ridge * (1 + 1e-9);
    return ((1 - m->tree_weight) * ridge + m->tree_weight * trees) * (1 + 1e-9);
}

double kace_slowdown_member_bound(const kace_model *m, const kace_member_bound *mb, const double *other_lo,
                                  const double *other_hi)
{
    return kace_slowdown_blend_upper(m, ridge_upper(m, mb, other_lo, other_hi),
                                     kace_slowdown_member_trees(m, mb, other_lo, other_hi));
}

double kace_slowdown_member_upper(const kace_model *m, const double *own, const double *other_lo,
                                  const double *other_hi)
{
    kace_member_bound mb;
    if (kace_slowdown_member_bound_init(NULL, m, own, &mb))
        return INFINITY; /* out of memory: no bound, still an upper one */
    double b = kace_slowdown_member_bound(m, &mb, other_lo, other_hi);
    kace_slowdown_member_bound_release(&mb);
    return b;
}

int kace_slowdown_member_features(void)
{
    return N_MEMBER;
}

void kace_slowdown_member_features_of(const double *own, const double *other, double *f)
{
    contention_features(own, other, f);
}

const kace_metric *kace_slowdown_needed_metrics(int *n)
{
    *n = (int)(sizeof needed / sizeof *needed);
    return needed;
}


/* Ranks the candidates as the evaluation does: for every workload, the
 * measured sum of the training colocation with the highest held-out
 * prediction, over the best measured one, averaged over workloads. One pass
 * over the rows (the first of equal predictions wins, as a pass over each
 * workload's rows in order would pick), not one per workload: training on a
 * subset of a store of 100k workloads must not cost workloads x rows. */
static kace_status ranking_score(kace_ctx *ctx, const kace_dataset *ds, const int *rows, size_t n, const double *pred,
                                 double *score)
{
    size_t nw = ds->n_workloads ? ds->n_workloads : 1;
    double *top_pred = malloc(nw * sizeof *top_pred), *picked = calloc(nw, sizeof *picked),
           *top = calloc(nw, sizeof *top);
    if (!top_pred || !picked || !top) {
        free(top_pred);
        free(picked);
        free(top);
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    }
    for (size_t v = 0; v < ds->n_workloads; v++)
        top_pred[v] = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        const kace_colocation *c = &ds->colocations[rows[i]];
        double truth = kace_colocation_sum(c);
        for (int j = 0; j < c->k; j++) {
            int v = c->workload[j];
            bool again = false; /* a workload twice in one run counts once */
            for (int e = 0; e < j; e++)
                again |= c->workload[e] == v;
            if (again)
                continue;
            if (pred[i] > top_pred[v]) {
                top_pred[v] = pred[i];
                picked[v] = truth;
            }
            top[v] = fmax(top[v], truth);
        }
    }
    double sum = 0;
    int n_workloads = 0;
    for (size_t v = 0; v < ds->n_workloads; v++)
        if (top[v] > 0) {
            sum += picked[v] / top[v];
            n_workloads++;
        }
    *score = n_workloads ? sum / n_workloads : 0;
    free(top_pred);
    free(picked);
    free(top);
    return KACE_OK;
}

/* kace_slowdown_select on the member samples s of rows[0..n). */
static kace_status select_on(kace_ctx *ctx, const kace_dataset *ds, const int *rows, size_t n,
                             member_samples *sp, const kace_slowdown_params *params,
                             kace_slowdown_params *chosen)
{
    kace_slowdown_params base;
    if (params)
        base = *params;
    else
        kace_slowdown_params_default(&base);
    base.select = false;
    *chosen = base;
    /* Three folds, not five: the selection's cost is 3 x 2 tree fits on
     * top of the final one, within the 50 ms training budget. The question
     * is binary (are the trees constrained or not), and the score is the
     * evaluation's own: the partner each workload would be given. */
    enum { N_FOLDS = 3, N_MONO = 2 };
    /* Too few rows to hold any out, or no trees: keep the fallback. */
    if (n < 2 * N_FOLDS || base.n_rounds == 0)
        return KACE_OK;
    /* Ties keep the earlier entry: the fallback. */
    static const int monotone[N_MONO] = {KACE_MONOTONE_SHARES, KACE_MONOTONE_NONE};
    const member_samples s = *sp;
    kace_status st = KACE_OK;
    int *fold = malloc(n * sizeof *fold);
    double *Xt = malloc(s.n * N_MEMBER * sizeof *Xt), *lt = malloc(s.n * sizeof *lt);
    unsigned char *use = malloc(s.n);
    const kace_boost_data *data = NULL;
    double *Xh = malloc(s.n * N_MEMBER * sizeof *Xh), *tree_frac = malloc(s.n * sizeof *tree_frac);
    size_t *held = malloc(s.n * sizeof *held);
    double *ridge_sum = calloc(n, sizeof *ridge_sum), *tree_sum = calloc(N_MONO * n, sizeof *tree_sum);
    double *blend = malloc(n * sizeof *blend);
    kace_model *tmp = calloc(1, sizeof *tmp);
    if (!fold || !Xt || !use || !lt || !Xh || !tree_frac || !held || !ridge_sum || !tree_sum || !blend || !tmp) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
        goto done;
    }
    /* The ridge penalty: chosen once on all the rows (it does not depend on
     * the trees), then kept for every fold and for the final fit. */
    if (base.ridge_alpha == 0 &&
        (st = choose_alpha(ctx, s.X, s.logf, s.row_of, s.n, n, base.seed, &base.ridge_alpha)))
        goto done;
    chosen->ridge_alpha = base.ridge_alpha;
    if ((st = samples_boost_data(ctx, sp)))
        goto done;
    data = sp->boost;
    deal_folds(n, N_FOLDS, base.seed ^ 0x5E1EC7ull, fold);
    for (int f = 0; f < N_FOLDS && !st; f++) {
        size_t nt = 0, nh = 0;
        for (size_t i = 0; i < s.n; i++) {
            use[i] = fold[s.row_of[i]] != f;
            if (use[i]) {
                memcpy(Xt + nt * N_MEMBER, s.X + i * N_MEMBER, N_MEMBER * sizeof *Xt);
                lt[nt++] = s.logf[i];
            } else {
                memcpy(Xh + nh * N_MEMBER, s.X + i * N_MEMBER, N_MEMBER * sizeof *Xh);
                held[nh++] = i;
            }
        }
        if (nt < 2 || nh == 0)
            continue;
        if ((st = fit_ridge(ctx, tmp, Xt, lt, nt, base.ridge_alpha)))
            break;
        prepare_ridge(tmp);
        for (size_t h = 0; h < nh; h++) {
            const double *x = Xh + h * N_MEMBER;
            double z = tmp->ridge_raw[0];
            for (int j = 0; j < N_MEMBER; j++)
                z += tmp->ridge_raw[j + 1] * x[j];
            size_t i = held[h];
            ridge_sum[s.row_of[i]] += s.exclusive[i] * exp(clamp(z, log(FRACTION_MIN), log(FRACTION_MAX)));
        }
        for (int c = 0; c < N_MONO && !st; c++) {
            signed char mono[N_MEMBER];
            monotone_constraints(monotone[c], mono);
            kace_boost_params bp = {.n_rounds = base.n_rounds,
                                    .max_depth = base.max_depth,
                                    .learning_rate = base.learning_rate,
                                    .subsample = base.subsample,
                                    .seed = base.seed,
                                    .monotone = mono};
            if ((st = kace_boost_train(ctx, data, s.frac, use, &bp, NULL, NULL, Xh, nh, tree_frac)))
                break;
            for (size_t h = 0; h < nh; h++) {
                size_t i = held[h];
                tree_sum[c * n + s.row_of[i]] += s.exclusive[i] * clamp(tree_frac[h], FRACTION_MIN, FRACTION_MAX);
            }
        }
    }
    if (st)
        goto done;
    double best = -INFINITY;
    for (int c = 0; c < N_MONO; c++) {
        for (size_t i = 0; i < n; i++)
            blend[i] = (1 - base.tree_weight) * ridge_sum[i] + base.tree_weight * tree_sum[c * n + i];
        double score = 0;
        if ((st = ranking_score(ctx, ds, rows, n, blend, &score)))
            goto done;
        if (score > best + 1e-12) {
            best = score;
            chosen->monotone = monotone[c];
        }
    }
done:
    free(fold);
    free(Xt);
    free(use);
    free(lt);
    free(Xh);
    free(tree_frac);
    free(held);
    free(ridge_sum);
    free(tree_sum);
    free(blend);
    free(tmp);
    return st;
}

kace_status kace_slowdown_select(kace_ctx *ctx, const kace_dataset *ds, const int *rows, size_t n,
                                 const kace_slowdown_params *params, kace_slowdown_params *chosen)
{
    member_samples s;
    kace_status st = member_samples_of(ctx, params ? params->metrics : KACE_METRICS_FULL, ds, rows, n, &s);
    if (!st)
        st = select_on(ctx, ds, rows, n, &s, params, chosen);
    member_samples_free(&s);
    return st;
}

/* ---- behind the predictor interface --------------------------------------- */

static kace_status fit_rows(kace_ctx *ctx, const kace_dataset *ds, const int *rows, size_t n,
                            const kace_fit_spec *spec, kace_model **out)
{
    *out = NULL;
    if (rows)
        return kace_model_fit_slowdown(ctx, ds, rows, n, &spec->slowdown, out);
    int *all = malloc((ds->n_colocations ? ds->n_colocations : 1) * sizeof *all);
    if (!all)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < ds->n_colocations; i++)
        all[i] = (int)i;
    kace_status st = kace_model_fit_slowdown(ctx, ds, all, ds->n_colocations, &spec->slowdown, out);
    free(all);
    return st;
}

static kace_status predict_op(kace_ctx *ctx, const kace_predictor *p, const kace_dataset *ds, const int *group, int k,
                              double *sum, double *confidence, double *member)
{
    return kace_slowdown_predict(ctx, p->self, ds, group, k, sum, confidence, member);
}

static void coverage_op(const kace_predictor *p, const kace_dataset *ds, const int *group, int k, kace_coverage *out)
{
    kace_slowdown_coverage_of(p->self, ds, group, k, out);
}

static const kace_feature_set *features_op(const kace_predictor *p)
{
    return kace_model_features(p->self);
}

static double ridge_op(const kace_predictor *p, const kace_member_bound *mb, const double *lo, const double *hi)
{
    return kace_slowdown_member_ridge(p->self, mb, lo, hi);
}

static double trees_op(const kace_predictor *p, const kace_member_bound *mb, const double *lo, const double *hi)
{
    return kace_slowdown_member_trees(p->self, mb, lo, hi);
}

static kace_status ridge_init_op(kace_ctx *ctx, const kace_predictor *p, const double *own, kace_member_bound *mb)
{
    (void)ctx;
    kace_slowdown_member_bound_ridge(p->self, own, mb);
    return KACE_OK;
}

static kace_status trees_init_op(kace_ctx *ctx, const kace_predictor *p, kace_member_bound *mb)
{
    return kace_slowdown_member_bound_trees(ctx, p->self, mb);
}

static double trees_raw_op(const kace_predictor *p, const kace_member_bound *mb, const double *lo, const double *hi)
{
    return kace_slowdown_member_trees_unprepared(p->self, mb, lo, hi);
}

static double blend_op(const kace_predictor *p, double ridge, double trees)
{
    return kace_slowdown_blend_upper(p->self, ridge, trees);
}

static double ridge_blend_op(const kace_predictor *p, const kace_member_bound *mb, const double *lo, const double *hi,
                             double trees)
{
    return kace_slowdown_blend_upper(p->self, ridge_upper(p->self, mb, lo, hi), trees);
}

static const kace_bound_ops bounds = {
    .member_init = ridge_init_op,
    .member_trees = trees_init_op,
    .trees_unprepared = trees_raw_op,
    .member_release = kace_slowdown_member_bound_release,
    .ridge = ridge_op,
    .trees = trees_op,
    .blend = blend_op,
    .ridge_blend = ridge_blend_op,
};

/* A fitted model's booster JSON, made from its trees when it is saved
 * (most fitted models never are: kace eval's). */
static kace_status slowdown_booster_json(kace_ctx *ctx, const kace_model *m, char **json, size_t *len)
{
    *json = NULL;
    *len = 0;
    return m->trees.n_trees ? kace_boost_json(ctx, &m->trees, N_MEMBER, json, len) : KACE_OK;
}

/* Its part of the model object: the trees kept as the forest keeps them. */
static const kace_model_ops model_ops = {
    .restore = kace_slowdown_restore,
    .release = kace_forest_release,
    .member_features = kace_slowdown_member_features,
    .booster_json = slowdown_booster_json,
};

const kace_predictor_ops kace_slowdown_ops = {
    .name = "slowdown",
    .policy = "kace",
    .caps = KACE_PRED_MEMBERS | KACE_PRED_CONFIDENCE | KACE_PRED_BOUNDS | KACE_PRED_COVERAGE,
    .max_k = KACE_MAX_K,
    .predict = predict_op,
    .coverage = coverage_op,
    .features = features_op,
    .bounds = &bounds,
    .fit = fit_rows,
    .model = &model_ops,
};

/* The same model on fewer metrics: no member bounds (they are derived for
 * the full metrics a group search sums over the pool), so group searches
 * enumerate. */
static const kace_predictor_ops reduced_ops = {
    .name = "slowdown",
    .policy = "kace",
    .caps = KACE_PRED_MEMBERS | KACE_PRED_CONFIDENCE | KACE_PRED_COVERAGE,
    .max_k = KACE_MAX_K,
    .predict = predict_op,
    .coverage = coverage_op,
    .features = features_op,
    .fit = fit_rows,
    .model = &model_ops,
};

static void use_reduced_ops(kace_model *m)
{
    if (m->metrics != KACE_METRICS_FULL)
        m->predictor.ops = &reduced_ops;
}
