/* MPS thread split model, advisor and its leave-one-pair-out evaluation
 * (see include/kace/split.h). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lapacke.h>

#include "base/name_index.h"
#include "kace/split.h"

#define N_SPLIT_FEATURES 46
#define FRACTION_MIN 0.02
#define FRACTION_MAX 1.5
#define OVERSHOOT_QUANTILE 0.90

const double kace_split_ls_targets[KACE_SPLIT_N_LS_TARGETS] = {0.3, 0.5, 0.7, 0.9};
const double kace_split_alphas[KACE_SPLIT_N_ALPHAS] = {0.1, 1, 10, 100};

struct kace_split_model {
    double mean[N_SPLIT_FEATURES], std[N_SPLIT_FEATURES];
    double w[N_SPLIT_FEATURES + 1]; /* intercept, then z-scored features */
    double overshoot;
    double alpha;                        /* ridge penalty fitted with */
    double cv_mse[KACE_SPLIT_N_ALPHAS];  /* held-out error per candidate penalty (NaN: not chosen by CV) */
};

static const kace_metric share[5] = {KACE_M_SM_PCT, KACE_M_MEM_PCT, KACE_M_SM_THROUGHPUT, KACE_M_DRAM_THROUGHPUT,
                                     KACE_M_MEM_THROUGHPUT};

int kace_split_grid_pct(int s, int member)
{
    if (s >= KACE_SPLIT_GRID - 1)
        return 100;
    return member == 0 ? 10 * (s + 1) : 100 - 10 * (s + 1);
}

const char *kace_split_policy_name(kace_split_policy p)
{
    switch (p) {
    case KACE_SPLIT_MAX_SUM: return "max-sum";
    case KACE_SPLIT_MAX_MIN: return "max-min";
    case KACE_SPLIT_LATENCY: return "latency";
    default: return "?";
    }
}

bool kace_split_workload_ok(const kace_dataset *ds, int w)
{
    if (w < 0 || (size_t)w >= ds->n_workloads)
        return false;
    const double *m = ds->workloads[w].metric;
    for (int s = 0; s < 5; s++)
        if (isnan(m[share[s]]))
            return false;
    if (isnan(m[KACE_M_MEMCAP]) || !(m[KACE_M_EXCLUSIVE] > 0) || !(m[KACE_M_EXCLUSIVE_MPS100] > 0))
        return false;
    int measured = 0;
    for (int p = 0; p < 10; p++)
        measured += m[KACE_M_EXCLUSIVE_MPS10 + p] > 0;
    return measured >= KACE_SPLIT_MIN_CURVE_POINTS;
}

/* Exclusive throughput at thread percentage pct: linear between the
 * measured percentages around it (the 10% steps where all are measured);
 * below the lowest measured one, proportional to it. */
static double exclusive_at(const double *m, int pct)
{
    if (pct >= 100)
        return m[KACE_M_EXCLUSIVE_MPS100];
    int lo = 0, hi = 100; /* the nearest measured percentages below and above */
    for (int q = 10; q < 100; q += 10)
        if (m[KACE_M_EXCLUSIVE_MPS10 + q / 10 - 1] > 0) {
            if (q <= pct)
                lo = q;
            else if (q < hi)
                hi = q;
        }
    double at_hi = m[KACE_M_EXCLUSIVE_MPS10 + hi / 10 - 1];
    if (lo == 0)
        return at_hi * pct / hi;
    double at_lo = m[KACE_M_EXCLUSIVE_MPS10 + lo / 10 - 1];
    return pct == lo ? at_lo : at_lo + (double)(pct - lo) / (hi - lo) * (at_hi - at_lo);
}

double kace_split_exclusive_at(const double *metric, int pct)
{
    int measured = 0;
    for (int p = 0; p < 10; p++)
        measured += metric[KACE_M_EXCLUSIVE_MPS10 + p] > 0;
    if (!(metric[KACE_M_EXCLUSIVE_MPS100] > 0) || measured < KACE_SPLIT_MIN_CURVE_POINTS || pct < 1)
        return NAN;
    return exclusive_at(metric, pct > 100 ? 100 : pct);
}

/* Features of member i of a group at percentages pct. overlap is how far
 * the percentages exceed the GPU (0 when they partition it, 1 at 100/100
 * for a pair): only then do the partners compete for the same SMs. */
static void split_features(const kace_dataset *ds, const int *group, int k, const int *pct, int i, double *f)
{
    const double *own = ds->workloads[group[i]].metric;
    double other[5] = {0}, p_other = 0, mem_other = 0, total = 0;
    for (int j = 0; j < k; j++) {
        total += pct[j] / 100.0;
        if (j == i)
            continue;
        for (int s = 0; s < 5; s++)
            other[s] += ds->workloads[group[j]].metric[share[s]];
        p_other += pct[j] / 100.0;
        mem_other += ds->workloads[group[j]].metric[KACE_M_MEMCAP];
    }
    double overlap = fmax(total - 1, 0);
    double p_own = pct[i] / 100.0;
    int at = 0;
    for (int s = 0; s < 5; s++)
        f[at++] = own[share[s]] / 100;
    for (int s = 0; s < 5; s++)
        f[at++] = other[s] / 100;
    for (int s = 0; s < 5; s++)
        f[at++] = own[share[s]] * other[s] / 1e4 * overlap;
    for (int s = 0; s < 5; s++)
        f[at++] = other[s] / 100 * p_other;
    for (int s = 0; s < 5; s++)
        f[at++] = other[s] / (own[share[s]] + other[s] + 0.1) * overlap;
    f[at++] = p_own;
    f[at++] = p_other;
    f[at++] = overlap;
    f[at++] = log(exclusive_at(own, pct[i]) / own[KACE_M_EXCLUSIVE_MPS100]);
    f[at++] = log(own[KACE_M_EXCLUSIVE_MPS100]);
    f[at++] = own[KACE_M_MEMCAP] + mem_other;
    f[at++] = p_own * overlap;
    for (int s = 0; s < 5; s++)
        f[at++] = own[share[s]] * other[s] / 1e4 * p_other;
    for (int s = 0; s < 5; s++)
        f[at++] = own[share[s]] / 100 * p_own;
    f[at++] = log(p_own);
    f[at++] = log(p_other > 0 ? p_other : 0.01);
    f[at++] = log(exclusive_at(own, pct[i]) / own[KACE_M_EXCLUSIVE_MPS100]) * overlap;
    f[at++] = p_own * p_other;
}

/* The key of the ordered pair (a, b): a grid's roles (LS, BE) are not symmetric. */
static uint64_t ordered_key(int a, int b)
{
    return (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
}

kace_status kace_split_grids_collect(kace_ctx *ctx, const kace_dataset *from, const kace_dataset *into, int campaign,
                                     kace_split_grid **grids, size_t *n)
{
    /* This campaign's grids by their pair, so that a campaign of many pairs costs runs, not runs x pairs. */
    kace_key_index *of_pair = kace_key_index_new();
    kace_status st = KACE_OK;
    for (size_t i = 0; of_pair && i < *n; i++)
        if ((*grids)[i].campaign == campaign &&
            !kace_key_index_add(of_pair, ordered_key((*grids)[i].workload[0], (*grids)[i].workload[1]), (int)i, NULL))
            kace_key_index_free(&of_pair);
    if (!of_pair)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    for (size_t r = 0; r < from->n_colocations; r++) {
        const kace_colocation *c = &from->colocations[r];
        if (c->k != 2 || c->status != KACE_RUN_OK)
            continue;
        int s = -1;
        for (int t = 0; t < KACE_SPLIT_GRID; t++)
            if (c->mps_pct[0] == kace_split_grid_pct(t, 0) && c->mps_pct[1] == kace_split_grid_pct(t, 1))
                s = t;
        int a = kace_dataset_find(into, from->workloads[c->workload[0]].name);
        int b = kace_dataset_find(into, from->workloads[c->workload[1]].name);
        if (s < 0 || a < 0 || b < 0 || !isfinite(c->throughput[0]) || !isfinite(c->throughput[1]))
            continue;
        int found = kace_key_index_find(of_pair, ordered_key(a, b));
        size_t g = found >= 0 ? (size_t)found : *n;
        if (g == *n) {
            kace_split_grid *grown = realloc(*grids, (*n + 1) * sizeof *grown);
            if (!grown || !kace_key_index_add(of_pair, ordered_key(a, b), (int)*n, NULL)) {
                if (grown)
                    *grids = grown;
                st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
                break;
            }
            *grids = grown;
            kace_split_grid *ng = &grown[(*n)++];
            ng->workload[0] = a;
            ng->workload[1] = b;
            ng->campaign = campaign;
            for (int t = 0; t < KACE_SPLIT_GRID; t++)
                ng->thr[t][0] = ng->thr[t][1] = NAN;
        }
        kace_split_grid *gr = &(*grids)[g];
        if (isnan(gr->thr[s][0])) { /* a repeated cell: the first run counts */
            gr->thr[s][0] = c->throughput[0];
            gr->thr[s][1] = c->throughput[1];
        }
    }
    kace_key_index_free(&of_pair);
    return st;
}

static bool same_pair(const int *w, int a, int b)
{
    return (w[0] == a && w[1] == b) || (w[0] == b && w[1] == a);
}

static bool has_set(const kace_set_info *sets, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(sets[i].name, name) == 0)
            return true;
    return false;
}

/* A device dataset's grids (set mps-splits) lack the 100/100 cell: those
 * runs are in its pairs set. It is taken from there for the pairs that
 * have a grid of that campaign, in either member order. */
static void fill_full_share_cells(const kace_dataset *pairs, const kace_dataset *ds, int campaign,
                                  kace_split_grid *grids, size_t n)
{
    int full = -1;
    for (int t = 0; t < KACE_SPLIT_GRID; t++)
        if (kace_split_grid_pct(t, 0) == 100 && kace_split_grid_pct(t, 1) == 100)
            full = t;
    for (size_t r = 0; full >= 0 && r < pairs->n_colocations; r++) {
        const kace_colocation *c = &pairs->colocations[r];
        if (c->k != 2 || c->status != KACE_RUN_OK || c->mps_pct[0] != 100 || c->mps_pct[1] != 100 ||
            !isfinite(c->throughput[0]) || !isfinite(c->throughput[1]))
            continue;
        int a = kace_dataset_find(ds, pairs->workloads[c->workload[0]].name);
        int b = kace_dataset_find(ds, pairs->workloads[c->workload[1]].name);
        for (size_t g = 0; g < n; g++) {
            kace_split_grid *gr = &grids[g];
            if (gr->campaign != campaign || !isnan(gr->thr[full][0]) || !same_pair(gr->workload, a, b))
                continue;
            bool swapped = gr->workload[0] != a;
            gr->thr[full][0] = c->throughput[swapped ? 1 : 0];
            gr->thr[full][1] = c->throughput[swapped ? 0 : 1];
        }
    }
}

kace_status kace_split_grids_load(kace_ctx *ctx, kace_store *store, const kace_dataset *ds, kace_split_grid **grids,
                                  size_t *n)
{
    *grids = NULL;
    *n = 0;
    kace_set_info *sets = NULL;
    size_t n_sets = 0;
    kace_status st = kace_store_list_sets(ctx, store, &sets, &n_sets);
    int campaign = 0;
    for (size_t i = 0; i < n_sets && !st; i++) {
        /* The reference campaigns, and kace's device dataset's split file
         * (scripts/device: colocations/mps-splits.csv). */
        bool grids_set = strncmp(sets[i].name, "partitions_", 11) == 0 || strcmp(sets[i].name, "mps-splits") == 0;
        if (!grids_set || sets[i].k != 2)
            continue;
        kace_dataset *camp = NULL, *pairs = NULL;
        if (!(st = kace_store_load_dataset(ctx, store, sets[i].name, true, &camp)))
            st = kace_split_grids_collect(ctx, camp, ds, campaign, grids, n);
        if (!st && strcmp(sets[i].name, "mps-splits") == 0 && has_set(sets, n_sets, "pairs") &&
            !(st = kace_store_load_dataset(ctx, store, "pairs", true, &pairs)))
            fill_full_share_cells(pairs, ds, campaign, *grids, *n);
        campaign++;
        kace_dataset_free(&camp);
        kace_dataset_free(&pairs);
    }
    free(sets);
    if (st) {
        free(*grids);
        *grids = NULL;
        *n = 0;
    }
    return st;
}

kace_status kace_split_fit_store(kace_ctx *ctx, kace_store *store, const kace_dataset *ds, kace_split_model **out,
                                 size_t *n_grids)
{
    *out = NULL;
    *n_grids = 0;
    kace_dataset *own = NULL;
    kace_split_grid *grids = NULL;
    size_t *rows = NULL;
    kace_status st = ds ? KACE_OK : kace_store_load_dataset(ctx, store, NULL, false, &own);
    if (!st)
        st = kace_split_grids_load(ctx, store, ds ? ds : own, &grids, n_grids);
    if (!st && *n_grids == 0)
        st = kace_fail(ctx, KACE_ERR_MODEL, "split model: the store has no MPS split grids (partitions_* or "
                                            "mps-splits sets)");
    if (!st && !(rows = malloc(*n_grids * sizeof *rows)))
        st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    for (size_t i = 0; !st && i < *n_grids; i++)
        rows[i] = i;
    if (!st)
        st = kace_split_fit(ctx, ds ? ds : own, grids, rows, *n_grids, 0, out);
    free(rows);
    free(grids);
    kace_dataset_free(&own);
    return st;
}

void kace_split_model_free(kace_split_model **m)
{
    if (m) {
        free(*m);
        *m = NULL;
    }
}

double kace_split_model_overshoot(const kace_split_model *m)
{
    return m->overshoot;
}

double kace_split_model_alpha(const kace_split_model *m, double cv_mse[KACE_SPLIT_N_ALPHAS])
{
    if (cv_mse)
        memcpy(cv_mse, m->cv_mse, sizeof m->cv_mse);
    return m->alpha;
}

/* Raw moment sums of a set of cells; a training set's sums are the total's
 * minus its held-out fold's, so cross-validation costs one pass. */
typedef struct moments {
    double n, sy;
    double sx[N_SPLIT_FEATURES], sxy[N_SPLIT_FEATURES];
    double sxx[N_SPLIT_FEATURES * N_SPLIT_FEATURES]; /* lower triangle */
} moments;

static void moments_add(moments *mo, const double *x, double y)
{
    mo->n += 1;
    mo->sy += y;
    for (int j = 0; j < N_SPLIT_FEATURES; j++) {
        mo->sx[j] += x[j];
        mo->sxy[j] += x[j] * y;
        for (int l = 0; l <= j; l++)
            mo->sxx[j * N_SPLIT_FEATURES + l] += x[j] * x[l];
    }
}

/* out = total + sign x part (sign -1: a training set from the total and its
 * held-out fold). */
static void moments_combine(moments *out, const moments *total, const moments *part, double sign)
{
    out->n = total->n + sign * part->n;
    out->sy = total->sy + sign * part->sy;
    for (int j = 0; j < N_SPLIT_FEATURES; j++) {
        out->sx[j] = total->sx[j] + sign * part->sx[j];
        out->sxy[j] = total->sxy[j] + sign * part->sxy[j];
        for (int l = 0; l <= j; l++)
            out->sxx[j * N_SPLIT_FEATURES + l] =
                total->sxx[j * N_SPLIT_FEATURES + l] + sign * part->sxx[j * N_SPLIT_FEATURES + l];
    }
}

/* Ridge on z-scored features from moment sums: (Z'Z + alpha I) w = Z'y,
 * with Z'Z and Z'y from the centred moments. Sets mean, std and w. */
static kace_status ridge_solve(kace_ctx *ctx, const moments *mo, double alpha, kace_split_model *m)
{
    double n = mo->n, ymean = mo->sy / n;
    for (int j = 0; j < N_SPLIT_FEATURES; j++) {
        m->mean[j] = mo->sx[j] / n;
        double var = mo->sxx[j * N_SPLIT_FEATURES + j] / n - m->mean[j] * m->mean[j];
        /* Constant in these cells (up to rounding of the moment sums): unused. */
        m->std[j] = var > 1e-12 * (1 + m->mean[j] * m->mean[j]) ? sqrt(var) : 0;
    }
    double A[N_SPLIT_FEATURES * N_SPLIT_FEATURES], b[N_SPLIT_FEATURES];
    for (int j = 0; j < N_SPLIT_FEATURES; j++) {
        double sj = m->std[j];
        b[j] = sj > 0 ? (mo->sxy[j] - n * m->mean[j] * ymean) / sj : 0;
        for (int l = 0; l <= j; l++) {
            double sl = m->std[l];
            double c = sj > 0 && sl > 0
                           ? (mo->sxx[j * N_SPLIT_FEATURES + l] - n * m->mean[j] * m->mean[l]) / (sj * sl)
                           : 0;
            A[j * N_SPLIT_FEATURES + l] = A[l * N_SPLIT_FEATURES + j] = c;
        }
        A[j * N_SPLIT_FEATURES + j] += alpha;
    }
    lapack_int info = LAPACKE_dposv(LAPACK_ROW_MAJOR, 'L', N_SPLIT_FEATURES, 1, A, N_SPLIT_FEATURES, b, 1);
    if (info != 0)
        return kace_fail(ctx, KACE_ERR_MODEL, "split model: ridge system not solvable (LAPACKE_dposv info=%d)",
                         (int)info);
    m->w[0] = ymean;
    for (int j = 0; j < N_SPLIT_FEATURES; j++)
        m->w[j + 1] = m->std[j] > 0 ? b[j] : 0;
    return KACE_OK;
}

static double predict_log_fraction(const kace_split_model *m, const double *f)
{
    double z = m->w[0];
    for (int j = 0; j < N_SPLIT_FEATURES; j++)
        if (m->std[j] > 0)
            z += m->w[j + 1] * (f[j] - m->mean[j]) / m->std[j];
    return z;
}

int kace_split_cv_folds(const kace_dataset *ds, const kace_split_grid *grids, const size_t *rows, size_t n_rows,
                        int *fold)
{
    int n_pairs = 0;
    for (size_t r = 0; r < n_rows; r++) {
        const int *w = grids[rows[r]].workload;
        fold[r] = -1;
        if (!kace_split_workload_ok(ds, w[0]) || !kace_split_workload_ok(ds, w[1]))
            continue;
        size_t first = r;
        for (size_t q = 0; q < r && first == r; q++)
            if (fold[q] >= 0 && same_pair(grids[rows[q]].workload, w[0], w[1]))
                first = q;
        fold[r] = first < r ? fold[first] : n_pairs++ % KACE_SPLIT_CV_FOLDS;
    }
    return n_pairs < KACE_SPLIT_CV_FOLDS ? n_pairs : KACE_SPLIT_CV_FOLDS;
}

/* Chooses the penalty with the lowest pooled held-out squared error of
 * log(fraction) over the folds (ties: the earlier, smaller one). fold[f]
 * holds the moments of fold f's cells, total those of all cells. */
static kace_status choose_alpha(kace_ctx *ctx, const double *X, const double *y, const int *cell_fold, size_t n,
                                const moments *fold, int n_folds, const moments *total, double *alpha,
                                double *cv_mse)
{
    moments *train = malloc(sizeof *train);
    kace_split_model *cv = calloc(1, sizeof *cv);
    kace_status st = KACE_OK;
    double sse[KACE_SPLIT_N_ALPHAS] = {0};
    size_t held = 0;
    if (!train || !cv) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (int f = 0; f < n_folds; f++) {
        moments_combine(train, total, &fold[f], -1);
        if (fold[f].n == 0 || train->n == 0)
            continue;
        for (int a = 0; a < KACE_SPLIT_N_ALPHAS; a++) {
            if ((st = ridge_solve(ctx, train, kace_split_alphas[a], cv)))
                goto done;
            for (size_t i = 0; i < n; i++)
                if (cell_fold[i] == f) {
                    double e = predict_log_fraction(cv, X + i * N_SPLIT_FEATURES) - y[i];
                    sse[a] += e * e;
                }
        }
        held += (size_t)fold[f].n;
    }
    if (held == 0) {
        st = kace_fail(ctx, KACE_ERR_MODEL, "split model: cross-validation needs grids of at least 2 pairs");
        goto done;
    }
    int best = 0;
    for (int a = 0; a < KACE_SPLIT_N_ALPHAS; a++) {
        cv_mse[a] = sse[a] / (double)held;
        if (cv_mse[a] < cv_mse[best])
            best = a;
    }
    *alpha = kace_split_alphas[best];
done:
    free(train);
    free(cv);
    return st;
}

static double predict_member(const kace_split_model *m, const double *f, double excl_at_pct)
{
    double z = fmin(fmax(predict_log_fraction(m, f), log(FRACTION_MIN)), log(FRACTION_MAX));
    return excl_at_pct * exp(z);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

kace_status kace_split_fit(kace_ctx *ctx, const kace_dataset *ds, const kace_split_grid *grids, const size_t *rows,
                           size_t n_rows, double alpha, kace_split_model **out)
{
    *out = NULL;
    if (alpha < 0 || isnan(alpha))
        return kace_fail(ctx, KACE_ERR_INVALID, "split model: the ridge penalty must be >= 0");
    size_t cap = (n_rows ? n_rows : 1) * KACE_SPLIT_GRID * 2, n = 0;
    double *X = malloc(cap * N_SPLIT_FEATURES * sizeof *X), *y = malloc(cap * sizeof *y);
    double *excl = malloc(cap * sizeof *excl), *ratio = malloc(cap * sizeof *ratio);
    int *row_fold = malloc((n_rows ? n_rows : 1) * sizeof *row_fold), *cell_fold = malloc(cap * sizeof *cell_fold);
    /* Moments per cross-validation fold, then of all cells. */
    moments *mo = calloc(KACE_SPLIT_CV_FOLDS + 1, sizeof *mo), *all = mo ? &mo[KACE_SPLIT_CV_FOLDS] : NULL;
    kace_split_model *m = calloc(1, sizeof *m);
    kace_status st = KACE_OK;
    if (!X || !y || !excl || !ratio || !row_fold || !cell_fold || !mo || !m) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
        goto done;
    }
    int n_folds = kace_split_cv_folds(ds, grids, rows, n_rows, row_fold);
    for (size_t r = 0; r < n_rows; r++) {
        const kace_split_grid *g = &grids[rows[r]];
        if (row_fold[r] < 0)
            continue; /* a member without a complete profile */
        for (int s = 0; s < KACE_SPLIT_GRID; s++)
            for (int i = 0; i < 2; i++) {
                if (!(g->thr[s][i] > 0))
                    continue;
                int pct[2] = {kace_split_grid_pct(s, 0), kace_split_grid_pct(s, 1)};
                split_features(ds, g->workload, 2, pct, i, X + n * N_SPLIT_FEATURES);
                excl[n] = exclusive_at(ds->workloads[g->workload[i]].metric, pct[i]);
                double frac = g->thr[s][i] / excl[n];
                y[n] = log(fmin(fmax(frac, FRACTION_MIN), FRACTION_MAX));
                ratio[n] = g->thr[s][i];
                cell_fold[n] = row_fold[r];
                n++;
            }
    }
    if (n < 2 * N_SPLIT_FEATURES) {
        st = kace_fail(ctx, KACE_ERR_MODEL, "split model: %zu measured cells with complete profiles are too few "
                                            "(need %d: more MPS split grids and exclusive MPS curves, or a model "
                                            "fitted on another GPU's grids: --split-train-db)",
                       n, 2 * N_SPLIT_FEATURES);
        goto done;
    }
    for (int a = 0; a < KACE_SPLIT_N_ALPHAS; a++)
        m->cv_mse[a] = NAN;
    for (size_t i = 0; i < n; i++)
        moments_add(&mo[cell_fold[i]], X + i * N_SPLIT_FEATURES, y[i]);
    for (int f = 0; f < n_folds; f++)
        moments_combine(all, all, &mo[f], 1);
    if (alpha == 0 && (st = choose_alpha(ctx, X, y, cell_fold, n, mo, n_folds, all, &alpha, m->cv_mse)))
        goto done;
    m->alpha = alpha;
    if ((st = ridge_solve(ctx, all, alpha, m)))
        goto done;
    /* Over-prediction on the training cells: predicted / measured. */
    for (size_t i = 0; i < n; i++)
        ratio[i] = predict_member(m, X + i * N_SPLIT_FEATURES, excl[i]) / ratio[i];
    qsort(ratio, n, sizeof *ratio, cmp_double);
    m->overshoot = fmax(ratio[(size_t)(OVERSHOOT_QUANTILE * (double)(n - 1))], 1.0);
    *out = m;
    m = NULL;
done:
    free(X);
    free(y);
    free(excl);
    free(ratio);
    free(row_fold);
    free(cell_fold);
    free(mo);
    free(m);
    return st;
}

kace_status kace_split_predict(kace_ctx *ctx, const kace_split_model *m, const kace_dataset *ds, const int *group,
                               int k, const int *pct, double *thr)
{
    if (k < 1 || k > KACE_MAX_K)
        return kace_fail(ctx, KACE_ERR_INVALID, "a group has 1..%d workloads, not %d", KACE_MAX_K, k);
    for (int i = 0; i < k; i++) {
        if (!kace_split_workload_ok(ds, group[i]))
            return kace_fail(ctx, KACE_ERR_INVALID,
                             "workload '%s' lacks a metric the split model needs (sm%%, mem%%, the Nsight "
                             "throughputs, memcap, and exclusive throughput at 100%% MPS and at %d or more of "
                             "10, 20, ..., 100%%)",
                             group[i] >= 0 && (size_t)group[i] < ds->n_workloads ? ds->workloads[group[i]].name : "?",
                             KACE_SPLIT_MIN_CURVE_POINTS);
        if (pct[i] < 1 || pct[i] > 100)
            return kace_fail(ctx, KACE_ERR_INVALID, "thread percentage %d is outside 1..100", pct[i]);
    }
    for (int i = 0; i < k; i++) {
        double f[N_SPLIT_FEATURES];
        split_features(ds, group, k, pct, i, f);
        thr[i] = predict_member(m, f, exclusive_at(ds->workloads[group[i]].metric, pct[i]));
    }
    return KACE_OK;
}

double kace_split_value(const kace_split_goal *g, const double *thr, const double *exclusive, int k, double need)
{
    double v = 0;
    switch (g->policy) {
    case KACE_SPLIT_MAX_SUM:
        for (int i = 0; i < k; i++)
            v += thr[i];
        return v;
    case KACE_SPLIT_MAX_MIN:
        v = INFINITY;
        for (int i = 0; i < k; i++)
            v = fmin(v, thr[i] / exclusive[i]);
        return v;
    case KACE_SPLIT_LATENCY:
    default: {
        double ls = thr[g->ls_member] / exclusive[g->ls_member], want = g->ls_target * need;
        if (ls < want)
            return -1 - (want - ls); /* misses: the closest miss ranks first */
        for (int i = 0; i < k; i++)
            if (i != g->ls_member)
                v += thr[i];
        return v;
    }
    }
}

kace_status kace_split_advise(kace_ctx *ctx, const kace_split_model *m, const kace_dataset *ds, const int *group,
                              int k, const kace_split_goal *goal, const int *pcts, size_t n, size_t *choice,
                              double *pred)
{
    if (n == 0)
        return kace_fail(ctx, KACE_ERR_INVALID, "no candidate split to choose from");
    if (goal->policy == KACE_SPLIT_LATENCY &&
        (goal->ls_member < 0 || goal->ls_member >= k || !(goal->ls_target > 0 && goal->ls_target <= 1) ||
         goal->ls_margin < 0 || (goal->ls_margin > 0 && goal->ls_margin < 1)))
        return kace_fail(ctx, KACE_ERR_INVALID,
                         "latency policy: the LS member must be in the group, its target in (0, 1] and the margin "
                         ">= 1 (or 0 for the model's own)");
    double excl[KACE_MAX_K], thr[KACE_MAX_K], best = -INFINITY;
    for (int i = 0; i < k; i++)
        excl[i] = ds->workloads[group[i]].metric[KACE_M_EXCLUSIVE];
    double need = goal->ls_margin > 0 ? goal->ls_margin : m->overshoot;
    *choice = 0;
    for (size_t c = 0; c < n; c++) {
        kace_status st = kace_split_predict(ctx, m, ds, group, k, pcts + c * (size_t)k, thr);
        if (st)
            return st;
        if (pred)
            memcpy(pred + c * (size_t)k, thr, (size_t)k * sizeof *thr);
        double v = kace_split_value(goal, thr, excl, k, need);
        if (v > best) {
            best = v;
            *choice = c;
        }
    }
    return KACE_OK;
}

size_t kace_split_training_rows(const kace_split_grid *grids, size_t n_grids, int a, int b, size_t *rows)
{
    size_t n = 0;
    for (size_t i = 0; i < n_grids; i++) {
        const int *w = grids[i].workload;
        if (same_pair(w, a, b))
            continue;
        rows[n++] = i;
    }
    return n;
}

void kace_split_eval_free(kace_split_eval **e)
{
    if (e && *e) {
        free((*e)->cases);
        free(*e);
        *e = NULL;
    }
}

/* Scores the advised split of one grid under every policy. */
static kace_status score_grid(kace_ctx *ctx, const kace_split_model *m, const kace_dataset *ds,
                              const kace_split_grid *g, kace_split_case *c)
{
    int pcts[KACE_SPLIT_GRID * 2], measured[KACE_SPLIT_GRID];
    size_t n = 0;
    for (int s = 0; s < KACE_SPLIT_GRID; s++)
        if (g->thr[s][0] > 0 && g->thr[s][1] > 0) {
            pcts[2 * n] = kace_split_grid_pct(s, 0);
            pcts[2 * n + 1] = kace_split_grid_pct(s, 1);
            measured[n++] = s;
        }
    c->n_measured = (int)n;
    double excl[2] = {ds->workloads[g->workload[0]].metric[KACE_M_EXCLUSIVE],
                      ds->workloads[g->workload[1]].metric[KACE_M_EXCLUSIVE]};
    for (int p = 0; p < 2; p++) {
        kace_split_goal goal = {.policy = (kace_split_policy)p};
        size_t choice;
        kace_status st = kace_split_advise(ctx, m, ds, g->workload, 2, &goal, pcts, n, &choice, NULL);
        if (st)
            return st;
        double best = -INFINITY;
        for (size_t i = 0; i < n; i++)
            best = fmax(best, kace_split_value(&goal, g->thr[measured[i]], excl, 2, 1));
        c->chosen[p] = measured[choice];
        c->advisor[p] = kace_split_value(&goal, g->thr[measured[choice]], excl, 2, 1) / best;
        c->fixed50[p] = g->thr[4][0] > 0 && g->thr[4][1] > 0 ? kace_split_value(&goal, g->thr[4], excl, 2, 1) / best
                                                            : NAN;
        c->fixed100[p] = g->thr[9][0] > 0 && g->thr[9][1] > 0 ? kace_split_value(&goal, g->thr[9], excl, 2, 1) / best
                                                              : NAN;
    }
    for (int t = 0; t < KACE_SPLIT_N_LS_TARGETS; t++) {
        kace_split_goal goal = {.policy = KACE_SPLIT_LATENCY, .ls_member = 0, .ls_target = kace_split_ls_targets[t]};
        double target = kace_split_ls_targets[t] * excl[0], best_be = -INFINITY;
        for (size_t i = 0; i < n; i++)
            if (g->thr[measured[i]][0] >= target)
                best_be = fmax(best_be, g->thr[measured[i]][1]);
        c->ls_met[t] = c->ls_met50[t] = c->ls_met100[t] = -1;
        c->ls_be[t] = NAN;
        if (best_be == -INFINITY)
            continue;
        size_t choice;
        kace_status st = kace_split_advise(ctx, m, ds, g->workload, 2, &goal, pcts, n, &choice, NULL);
        if (st)
            return st;
        const double *got = g->thr[measured[choice]];
        c->ls_met[t] = got[0] >= target;
        c->ls_be[t] = c->ls_met[t] ? got[1] / best_be : 0;
        if (g->thr[4][0] > 0)
            c->ls_met50[t] = g->thr[4][0] >= target;
        if (g->thr[9][0] > 0)
            c->ls_met100[t] = g->thr[9][0] >= target;
    }
    return KACE_OK;
}

/* A test workload's index in the training dataset: the same one when they
 * are one dataset, else by name (-1: the training data never ran it). */
static int in_training(const kace_dataset *train_ds, const kace_dataset *test_ds, int w)
{
    return train_ds == test_ds ? w : kace_dataset_find(train_ds, test_ds->workloads[w].name);
}

kace_status kace_split_evaluate(kace_ctx *ctx, const kace_dataset *ds, const kace_split_grid *grids, size_t n_grids,
                                kace_split_eval **out)
{
    return kace_split_evaluate_across(ctx, ds, grids, n_grids, ds, grids, n_grids, out);
}

kace_status kace_split_evaluate_across(kace_ctx *ctx, const kace_dataset *train_ds, const kace_split_grid *train_grids,
                                       size_t n_train_grids, const kace_dataset *ds, const kace_split_grid *grids,
                                       size_t n_grids, kace_split_eval **out)
{
    *out = NULL;
    kace_split_eval *e = calloc(1, sizeof *e);
    size_t *rows = malloc((n_train_grids ? n_train_grids : 1) * sizeof *rows);
    bool *done = calloc(n_grids ? n_grids : 1, sizeof *done);
    kace_split_model *m = NULL;
    kace_status st = KACE_OK;
    if (!e || !rows || !done || !(e->cases = calloc(n_grids ? n_grids : 1, sizeof *e->cases))) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (size_t g = 0; g < n_grids; g++) {
        int a = grids[g].workload[0], b = grids[g].workload[1];
        if (done[g] || !kace_split_workload_ok(ds, a) || !kace_split_workload_ok(ds, b))
            continue;
        /* One fit per unordered pair, on every training grid of the other
         * pairs (by name across datasets: the pair measured on another GPU
         * is left out too). */
        int ta = in_training(train_ds, ds, a), tb = in_training(train_ds, ds, b);
        size_t n_train = kace_split_training_rows(train_grids, n_train_grids, ta, tb, rows), same = 0;
        for (size_t i = 0; i < n_train; i++) {
            const int *w = train_grids[rows[i]].workload;
            same += same_pair(w, ta, tb);
        }
        if (same) {
            st = kace_fail(ctx, KACE_ERR_MODEL, "internal: the advised pair is in its own training set");
            goto done;
        }
        /* alpha 0: the penalty is chosen by cross-validation over these
         * training rows only, so the advised pair never informs it. */
        if ((st = kace_split_fit(ctx, train_ds, train_grids, rows, n_train, 0, &m)))
            goto done;
        e->n_pairs++;
        double alpha = kace_split_model_alpha(m, NULL);
        for (int j = 0; j < KACE_SPLIT_N_ALPHAS; j++)
            e->alpha_fits[j] += alpha == kace_split_alphas[j];
        for (size_t h = g; h < n_grids; h++) {
            const int *w = grids[h].workload;
            if (done[h] || !same_pair(w, a, b))
                continue;
            done[h] = true;
            kace_split_case *c = &e->cases[e->n];
            c->grid = h;
            c->n_train = n_train;
            c->n_train_same_pair = same;
            c->alpha = alpha;
            int n_measured = 0;
            for (int s = 0; s < KACE_SPLIT_GRID; s++)
                n_measured += grids[h].thr[s][0] > 0 && grids[h].thr[s][1] > 0;
            if (n_measured < 2)
                continue; /* nothing to choose */
            if ((st = score_grid(ctx, m, ds, &grids[h], c)))
                goto done;
            e->n++;
        }
        kace_split_model_free(&m);
    }
    /* Means over cases (baselines over the cases where that split was measured). */
    for (int p = 0; p < 2; p++) {
        double sa = 0, s5 = 0, s1 = 0;
        int n5 = 0, n1 = 0;
        for (size_t i = 0; i < e->n; i++) {
            sa += e->cases[i].advisor[p];
            if (!isnan(e->cases[i].fixed50[p]))
                s5 += e->cases[i].fixed50[p], n5++;
            if (!isnan(e->cases[i].fixed100[p]))
                s1 += e->cases[i].fixed100[p], n1++;
        }
        e->advisor[p] = e->n ? sa / (double)e->n : NAN;
        e->fixed50[p] = n5 ? s5 / n5 : NAN;
        e->fixed100[p] = n1 ? s1 / n1 : NAN;
    }
    for (int t = 0; t < KACE_SPLIT_N_LS_TARGETS; t++) {
        size_t n = 0, met = 0, n5 = 0, m5 = 0, n1 = 0, m1 = 0;
        double be = 0;
        for (size_t i = 0; i < e->n; i++) {
            const kace_split_case *c = &e->cases[i];
            if (c->ls_met[t] < 0)
                continue;
            n++;
            met += (size_t)c->ls_met[t];
            be += c->ls_be[t];
            if (c->ls_met50[t] >= 0)
                n5++, m5 += (size_t)c->ls_met50[t];
            if (c->ls_met100[t] >= 0)
                n1++, m1 += (size_t)c->ls_met100[t];
        }
        e->ls_cases[t] = n;
        e->ls_met_rate[t] = n ? (double)met / (double)n : NAN;
        e->ls_be[t] = n ? be / (double)n : NAN;
        e->ls_met50_rate[t] = n5 ? (double)m5 / (double)n5 : NAN;
        e->ls_met100_rate[t] = n1 ? (double)m1 / (double)n1 : NAN;
    }
    *out = e;
    e = NULL;
done:
    kace_split_model_free(&m);
    kace_split_eval_free(&e);
    free(rows);
    free(done);
    return st;
}
