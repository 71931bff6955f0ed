/* Features of a colocation and the models that predict its throughput.
 *
 * Features follow the KACE paper: each workload metric is summed over the k
 * colocated workloads and divided by k only when its name contains '%'. The
 * label is the colocated throughput sum. Models z-score features and label
 * with the statistics of their fitting rows.
 */
#ifndef KACE_MODEL_H
#define KACE_MODEL_H

#include <stdint.h>

#include "kace/dataset.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KACE_MAX_FEATURES 32

typedef struct kace_feature_set {
    const char *name;                  /* "kace", "xu" */
    int n;                             /* number of features */
    kace_metric metric[KACE_MAX_FEATURES];
} kace_feature_set;

/* KACE's 10 features: 6 kernel metrics, exclusive throughput, sm%, mem%, memcap. */
extern const kace_feature_set kace_features_kace;
/* Xu et al.: PCIe read/write, Long_Kernel, ave_Kernel_Length, long/short_Ratio,
 * avg_Thread, sm%, mem%, CPU%, MainMem%. */
extern const kace_feature_set kace_features_xu;
extern const kace_feature_set kace_features_xu_nvml; /* NVML's PCIe in place of ncu's */
/* Looks a feature set up by name; NULL when unknown. */
const kace_feature_set *kace_feature_set_find(const char *name);

/* Which of a workload's metrics a model reads: what a site can measure.
 *  full         kernel counters (Nsight Compute or CUPTI kernel replay:
 *               the SM, DRAM and memory throughputs, ncu's PCIe) with the
 *               rest below;
 *  no-counters  launch records (CUPTI activity or Nsight Systems: threads,
 *               registers, shared memory, kernel lengths) and system metrics;
 *  system       system metrics only (NVML or DCGM: sm%, mem%, memory used,
 *               PCIe, host CPU and memory) and the exclusive throughput.
 * Each set is contained in the one before it. */
typedef enum kace_metric_set {
    KACE_METRICS_FULL = 0,
    KACE_METRICS_NO_COUNTERS = 1,
    KACE_METRICS_SYSTEM = 2,
    KACE_N_METRIC_SETS
} kace_metric_set;

/* "full", "no-counters", "system". */
const char *kace_metric_set_name(kace_metric_set set);
/* -1 when unknown. */
int kace_metric_set_from_name(const char *name);
/* Whether the set holds the metric. */
bool kace_metric_set_has(kace_metric_set set, kace_metric metric);
/* What measures a metric, for messages that say what to import ("kernel
 * counters (Nsight Compute or kace profile)", ...). */
const char *kace_metric_source(kace_metric metric);
/* fs without the metrics set does not hold ("kace" -> "kace-system"); fs
 * itself when it has none outside the set. */
const kace_feature_set *kace_feature_set_restrict(const kace_feature_set *fs, kace_metric_set set);
/* The smallest metric set that holds every feature of fs. */
kace_metric_set kace_feature_set_metrics(const kace_feature_set *fs);

/* Fills X (n_rows x fs->n, row-major) with the aggregated features of the
 * given colocations. Fails with KACE_ERR_INVALID, naming workload and metric,
 * when a needed metric is missing. */
kace_status kace_features_build(kace_ctx *ctx, const kace_dataset *ds, const kace_feature_set *fs,
                                const int *rows, size_t n_rows, double *X);
/* Features of an arbitrary group of k workloads (indices into ds), one row. */
kace_status kace_features_group(kace_ctx *ctx, const kace_dataset *ds, const kace_feature_set *fs,
                                const int *workloads, int k, double *x);
/* y[i] = measured throughput sum of colocation rows[i]. */
void kace_labels_build(const kace_dataset *ds, const int *rows, size_t n_rows, double *y);

typedef enum kace_model_kind {
    KACE_MODEL_LINEAR = 0,  /* the paper's KACE: OLS on summed features */
    KACE_MODEL_FOREST = 1,  /* random forest (the Xu et al. baseline) */
    KACE_MODEL_SLOWDOWN = 2, /* kace's default: per-member slowdown, summed */
    KACE_MODEL_PRESSURE = 3, /* per-member sensitivity x partners' pressure (pressure.c) */
    KACE_MODEL_STACKED = 4   /* pressure and slowdown, each member's log throughput blended (stacked.c) */
} kace_model_kind;

/* How features are z-scored at prediction time. TRAIN uses the fitting rows'
 * statistics (the sound way). CANDIDATES uses the mean and sample std of the
 * rows being predicted together, as the published KACE code did ("paper
 * mode"); with a single row every z-score is 0. */
typedef enum kace_norm { KACE_NORM_TRAIN = 0, KACE_NORM_CANDIDATES = 1 } kace_norm;

typedef struct kace_model kace_model;

/* Ordinary least squares with intercept on z-scored features and label,
 * solved by LAPACKE_dgelsd (minimum-norm solution when rank-deficient).
 * Needs n >= 2 rows. */
kace_status kace_model_fit_linear(kace_ctx *ctx, const kace_feature_set *fs, const double *X,
                                  const double *y, size_t n, kace_model **out);

/* Random-forest hyper-parameters, as in scikit-learn's RandomForestRegressor. */
typedef struct kace_forest_params {
    int n_estimators;
    int max_features;    /* 0 = sqrt(d), 1 = log2(d), 2 = all */
    int max_depth;       /* 0 = unlimited */
    int min_samples_split;
    int min_samples_leaf;
    int bootstrap;       /* 1 = sample rows with replacement per tree */
} kace_forest_params;

typedef struct kace_forest_search {
    int n_iter;          /* random configurations tried */
    int n_folds;         /* cross-validation folds (5 in the paper) */
    uint64_t seed;
    int n_threads;       /* 0 = xgboost's default */
    double tree_scale;   /* n_estimators of the grid times this (0 or 1 = the
                            paper's 200..2000 trees); on a few dozen rows 0.05
                            scores the same and is 20x faster */
} kace_forest_search;

/* Fits a random forest (xgboost in random-forest mode) on z-scored features
 * and label with the given parameters. */
kace_status kace_model_fit_forest(kace_ctx *ctx, const kace_feature_set *fs, const double *X,
                                  const double *y, size_t n, const kace_forest_params *params,
                                  uint64_t seed, int n_threads, kace_model **out);
/* The Xu et al. procedure: randomized search over the paper's grid with
 * k-fold CV (mean squared error), then a refit of the best configuration on
 * all rows. best (may be NULL) receives the chosen parameters. */
kace_status kace_model_fit_forest_search(kace_ctx *ctx, const kace_feature_set *fs, const double *X,
                                         const double *y, size_t n, const kace_forest_search *search,
                                         kace_forest_params *best, kace_model **out);

/* The slowdown model predicts each member's throughput as a fraction of its
 * exclusive throughput from contention features (its own and its partners'
 * GPU shares) and sums them: a blend of ridge regression on log(fraction)
 * and gradient-boosted trees on the fraction. One model serves any k. */
typedef struct kace_slowdown_params {
    /* The metrics the member features read (KACE_METRICS_FULL = 0, the
     * default): the others count as 0 in training and prediction alike, so
     * the features made of them are constant and carry no weight. */
    kace_metric_set metrics;
    double ridge_alpha;   /* L2 penalty of the ridge part (z-scored features);
                             0 = chosen by 5-fold CV on the fitting rows */
    double tree_weight;   /* blend: 0 = ridge only, 1 = trees only */
    int n_rounds;         /* boosting rounds (0 = ridge only) */
    int max_depth;
    double learning_rate;
    double subsample;
    uint64_t seed;
    /* Which features the trees' fraction must not increase with:
     * KACE_MONOTONE_NONE, _SHARES (the partners' summed shares and their part
     * of each resource) or _PARTNERS (also the own x partners products and
     * the partners' thread count). */
    int monotone;
    /* true (the default): choose whether the trees are constrained (none or
     * the partners' shares) by 3-fold cross-validation over the fitting rows
     * (a colocation's members stay in one fold), scored as the evaluation
     * scores: for each workload, the measured sum of the colocation with
     * the best held-out prediction over the best measured one. monotone is
     * then only the fallback (fewer than 6 rows). */
    bool select;
} kace_slowdown_params;

enum { KACE_MONOTONE_NONE = 0, KACE_MONOTONE_SHARES = 1, KACE_MONOTONE_PARTNERS = 2 };

/* alpha by CV, weight 0.5, 100 rounds of depth-3 trees, eta 0.1, subsample
 * 0.8, monotone constraints chosen by CV (select on; fallback: shares). */
void kace_slowdown_params_default(kace_slowdown_params *p);

/* Fits the slowdown model on colocations rows[0..n) of ds (k may differ
 * between rows). params NULL = defaults. Needs the KACE profile metrics of
 * every member and a positive exclusive throughput. */
kace_status kace_model_fit_slowdown(kace_ctx *ctx, const kace_dataset *ds, const int *rows, size_t n,
                                    const kace_slowdown_params *params, kace_model **out);

/* The cross-validated choice select=true makes: *chosen = params with the
 * monotone set of the best held-out partner choice over rows[0..n) only,
 * and the ridge penalty chosen on those rows. */
kace_status kace_slowdown_select(kace_ctx *ctx, const kace_dataset *ds, const int *rows, size_t n,
                                 const kace_slowdown_params *params, kace_slowdown_params *chosen);

/* Predicted throughput sum of one group of k workloads (indices into ds).
 * confidence (may be NULL) is in [0, 1]: how well the two learners agree,
 * times the group's coverage (kace_slowdown_coverage_of).
 * member (may be NULL, k entries) receives each member's throughput. */
kace_status kace_slowdown_predict(kace_ctx *ctx, const kace_model *m, const kace_dataset *ds, const int *group,
                                  int k, double *sum, double *confidence, double *member);

/* Whether a group's members look like the workloads a slowdown model was
 * trained on. Each profile metric the model reads is compared, as
 * log(1 + value), with its range over the training rows' workloads; d is
 * the largest distance by which any member's metric lies outside. */
typedef struct kace_slowdown_coverage {
    double coverage;    /* e^-d in (0, 1]: 1 when every metric is inside its range */
    int member;         /* index into the group of the member furthest outside, -1 if none */
    kace_metric metric; /* its metric, its value and the training range */
    double value, lo, hi;
} kace_slowdown_coverage;
void kace_slowdown_coverage_of(const kace_model *m, const kace_dataset *ds, const int *group, int k,
                               kace_slowdown_coverage *out);

/* What to fit: a linear model, a forest chosen by randomized search, or the
 * slowdown model. */
typedef struct kace_fit_spec {
    kace_model_kind kind;
    const kace_feature_set *features; /* linear and forest */
    kace_forest_search search;        /* forests only */
    kace_slowdown_params slowdown;    /* slowdown only */
} kace_fit_spec;

/* The richest metric set (full, then no-counters, then system) in which
 * every member of colocations rows[0..n) of ds (every colocation when rows
 * is NULL) has every metric a model of spec's kind reads (spec->features
 * restricted to the set for linear and forest models). When none has,
 * KACE_METRICS_SYSTEM: fitting then names the workload and metric missing. */
kace_metric_set kace_metric_set_choose(const kace_dataset *ds, const int *rows, size_t n, const kace_fit_spec *spec);
/* spec made to read only the metrics of set: its features restricted, the
 * slowdown model's metric set set. */
void kace_fit_spec_restrict(kace_fit_spec *spec, kace_metric_set set);
/* The metric set a model reads (KACE_METRICS_FULL for a model file written
 * before models recorded it). */
kace_metric_set kace_model_metrics(const kace_model *m);

/* Builds the features and labels of colocations rows[0..n) of ds (every
 * colocation when rows is NULL) and fits the model the spec asks for. */
kace_status kace_model_fit_rows(kace_ctx *ctx, const kace_dataset *ds, const int *rows, size_t n,
                                const kace_fit_spec *spec, kace_model **out);

/* Predicted throughput sums of colocations rows[0..n) of ds, for any kind
 * of model (norm is used by linear and forest models only). */
kace_status kace_model_predict_rows(kace_ctx *ctx, const kace_model *m, kace_norm norm, const kace_dataset *ds,
                                    const int *rows, size_t n, double *pred);

/* Predicts n rows of features X; pred[i] is in label units (samples/s). */
kace_status kace_model_predict(kace_ctx *ctx, const kace_model *m, const double *X, size_t n,
                               kace_norm norm, double *pred);
/* Predicted z-scored label (what the paper ranks and scores MSE on). */
kace_status kace_model_predict_z(kace_ctx *ctx, const kace_model *m, const double *X, size_t n,
                                 kace_norm norm, double *pred_z);

kace_model_kind kace_model_get_kind(const kace_model *m);
const kace_feature_set *kace_model_features(const kace_model *m);
/* Linear models: number of coefficients (intercept first, then one per
 * feature, in z-units); NULL for forests. */
const double *kace_model_coefficients(const kace_model *m, int *n);
/* Mean and sample std of the label over the fitting rows. */
void kace_model_label_stats(const kace_model *m, double *mean, double *std);
/* Column statistics (mean, sample std with ddof=1) of row-major X (n x d). */
void kace_column_stats(const double *X, size_t n, int d, double *mean, double *std);
void kace_model_free(kace_model **m);

/* The name of the model that kace serve, the Slurm plugins and kace predict
 * use unless told otherwise. Only promotion (kace_store_promote_model)
 * stores a model under it: training never replaces it. */
#define KACE_MODEL_DEFAULT "default"
/* Whether name may name a trained model in the store: 1..63 bytes of
 * letters, digits, '.', '_' and '-', starting with a letter or digit, and
 * not KACE_MODEL_DEFAULT. KACE_ERR_INVALID with the reason otherwise. */
kace_status kace_model_name_check(kace_ctx *ctx, const char *name);

/* Versioned text file: keyword lines, numbers as %.17g. Written to a
 * temporary file in the same folder, fsync'ed, then renamed over path. */
kace_status kace_model_save(kace_ctx *ctx, const kace_model *m, const char *path);
kace_status kace_model_load(kace_ctx *ctx, const char *path, kace_model **out);
/* The same format in memory (for the store and for fuzzing). *text is
 * malloc'ed and owned by the caller. */
kace_status kace_model_to_text(kace_ctx *ctx, const kace_model *m, char **text);
/* origin names the text in error messages (a path or "store"). */
kace_status kace_model_from_text(kace_ctx *ctx, const char *text, size_t len, const char *origin,
                                 kace_model **out);

#ifdef __cplusplus
}
#endif

#endif
