/* Linear model (LAPACKE least squares), prediction and the model file. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <lapacke.h>

#include "base/csv.h"
#include "base/lstsq.h"
#include "base/text_buf.h"
#include "model_internal.h"

void kace_column_stats(const double *X, size_t n, int d, double *mean, double *std)
{
    for (int j = 0; j < d; j++) {
        double s = 0;
        for (size_t i = 0; i < n; i++)
            s += X[i * (size_t)d + (size_t)j];
        double mu = n ? s / (double)n : 0;
        double ss = 0;
        for (size_t i = 0; i < n; i++) {
            double e = X[i * (size_t)d + (size_t)j] - mu;
            ss += e * e;
        }
        mean[j] = mu;
        std[j] = n > 1 ? sqrt(ss / (double)(n - 1)) : 0;
    }
}

void kace_zscore(const double *X, size_t n, int d, const double *mean, const double *std, double *Z)
{
    for (size_t i = 0; i < n; i++)
        for (int j = 0; j < d; j++) {
            size_t at = i * (size_t)d + (size_t)j;
            Z[at] = std[j] > 0 ? (X[at] - mean[j]) / std[j] : 0;
        }
}

void kace_model_set_kind(kace_model *m, kace_model_kind kind)
{
    m->kind = kind;
    m->predictor.ops = kace_model_kind_ops(kind);
    m->predictor.self = m;
}

void kace_model_set_label_stats(kace_model *m, const kace_dataset *ds, const int *rows, size_t n)
{
    double ysum = 0, yss = 0;
    for (size_t r = 0; r < n; r++) {
        double label = kace_colocation_sum(&ds->colocations[rows[r]]);
        ysum += label;
        yss += label * label;
    }
    m->y_mean = ysum / (double)n;
    m->y_std = n > 1 ? sqrt(fmax(yss / (double)n - m->y_mean * m->y_mean, 0) * (double)n / (double)(n - 1)) : 0;
    if (!(m->y_std > 0))
        m->y_std = 1;
    for (int j = 0; j < m->n_features; j++)
        m->x_std[j] = 1;
}

/* The kind's part of the model object (NULL: none, as for the linear model). */
static const kace_model_ops *kind_ops(const kace_model *m)
{
    return m->predictor.ops ? m->predictor.ops->model : NULL;
}

static kace_model *model_new(const kace_feature_set *fs)
{
    kace_model *m = calloc(1, sizeof *m);
    if (m) {
        m->features = fs;
        m->metrics = kace_feature_set_metrics(fs);
        m->n_features = fs->n;
    }
    return m;
}

static kace_status check_rows(kace_ctx *ctx, const kace_feature_set *fs, const double *X, const double *y, size_t n)
{
    if (n < 2)
        return kace_fail(ctx, KACE_ERR_MODEL, "cannot fit a model on %zu row(s) (need at least 2)", n);
    if (fs->n < 1 || fs->n > KACE_MAX_FEATURES)
        return kace_fail(ctx, KACE_ERR_INVALID, "feature set '%s' has %d features", fs->name, fs->n);
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(y[i]))
            return kace_fail(ctx, KACE_ERR_INVALID, "label of row %zu is not finite", i);
        for (int j = 0; j < fs->n; j++)
            if (!isfinite(X[i * (size_t)fs->n + (size_t)j]))
                return kace_fail(ctx, KACE_ERR_INVALID, "feature %s of row %zu is not finite",
                                 kace_metric_name(fs->metric[j]), i);
    }
    return KACE_OK;
}

kace_status kace_model_fit_linear(kace_ctx *ctx, const kace_feature_set *fs, const double *X, const double *y,
                                  size_t n, kace_model **out)
{
    *out = NULL;
    kace_status st = check_rows(ctx, fs, X, y, n);
    if (st)
        return st;
    int d = fs->n;
    kace_model *m = model_new(fs);
    double *A = malloc(n * (size_t)(d + 1) * sizeof *A);
    /* Zeroed: with fewer rows than unknowns LAPACKE's NaN check reads all max(n, d+1)
     * rows of b, and uninitialised memory there failed fits at random (info=-7). */
    double *b = calloc(n > (size_t)(d + 1) ? n : (size_t)(d + 1), sizeof *b);
    double *sv = malloc((size_t)(d + 1) * sizeof *sv);
    if (!m || !A || !b || !sv) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
        goto done;
    }
    kace_model_set_kind(m, KACE_MODEL_LINEAR);
    m->n_fit = n;
    kace_column_stats(X, n, d, m->x_mean, m->x_std);
    kace_column_stats(y, n, 1, &m->y_mean, &m->y_std);
    if (!(m->y_std > 0)) {
        st = kace_fail(ctx, KACE_ERR_MODEL, "every fitting row has the same label: nothing to learn");
        goto done;
    }
    /* Column-major design matrix [1 | Z] for LAPACK. */
    for (size_t i = 0; i < n; i++) {
        A[i] = 1.0;
        for (int j = 0; j < d; j++) {
            double x = X[i * (size_t)d + (size_t)j];
            A[(size_t)(j + 1) * n + i] = m->x_std[j] > 0 ? (x - m->x_mean[j]) / m->x_std[j] : 0;
        }
        b[i] = (y[i] - m->y_mean) / m->y_std;
    }
    /* Tall and well conditioned (every fit of kace eval's paper models): QR, no
     * LAPACK to load (base/lstsq.h). Otherwise dgelsd: SVD-based least squares,
     * minimum-norm when rank-deficient (fewer rows than features happens at
     * small n_occur in family splits). */
    if (kace_lstsq_qr(A, n, d + 1, b, m->coef)) {
        *out = m;
        m = NULL;
        goto done;
    }
    lapack_int rank = 0;
    lapack_int info = LAPACKE_dgelsd(LAPACK_COL_MAJOR, (lapack_int)n, d + 1, 1, A, (lapack_int)n, b,
                                     (lapack_int)(n > (size_t)(d + 1) ? n : (size_t)(d + 1)), sv, -1.0, &rank);
    if (info != 0) {
        st = kace_fail(ctx, KACE_ERR_MODEL, "least squares failed (LAPACKE_dgelsd info=%d)", (int)info);
        goto done;
    }
    for (int j = 0; j <= d; j++)
        m->coef[j] = b[j];
    *out = m;
    m = NULL;
done:
    free(A);
    free(b);
    free(sv);
    kace_model_free(&m);
    return st;
}

kace_status kace_model_predict_z(kace_ctx *ctx, const kace_model *m, const double *X, size_t n, kace_norm norm,
                                 double *pred_z)
{
    int d = m->n_features;
    double mean[KACE_MAX_FEATURES], std[KACE_MAX_FEATURES];
    if (norm == KACE_NORM_CANDIDATES) {
        /* The published code scaled the candidates with their own statistics. */
        kace_column_stats(X, n, d, mean, std);
    } else {
        memcpy(mean, m->x_mean, sizeof mean);
        memcpy(std, m->x_std, sizeof std);
    }
    double *Z = malloc((n ? n : 1) * (size_t)d * sizeof *Z);
    if (!Z)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    kace_zscore(X, n, d, mean, std, Z);
    kace_status st = KACE_OK;
    if (m->kind == KACE_MODEL_LINEAR) {
        for (size_t i = 0; i < n; i++) {
            double p = m->coef[0];
            for (int j = 0; j < d; j++)
                p += m->coef[j + 1] * Z[i * (size_t)d + (size_t)j];
            pred_z[i] = p;
        }
    } else if (kind_ops(m) && kind_ops(m)->predict_z) {
        st = kind_ops(m)->predict_z(ctx, m, Z, n, pred_z);
    } else {
        st = kace_fail(ctx, KACE_ERR_MODEL, "a slowdown model predicts groups, not feature rows "
                                            "(use its predictor: kace_predict_group or kace_predict_rows)");
    }
    free(Z);
    return st;
}

kace_status kace_model_predict(kace_ctx *ctx, const kace_model *m, const double *X, size_t n, kace_norm norm,
                               double *pred)
{
    kace_status st = kace_model_predict_z(ctx, m, X, n, norm, pred);
    if (st)
        return st;
    for (size_t i = 0; i < n; i++)
        pred[i] = pred[i] * m->y_std + m->y_mean;
    return KACE_OK;
}

kace_model_kind kace_model_get_kind(const kace_model *m)
{
    return m->kind;
}

const kace_feature_set *kace_model_features(const kace_model *m)
{
    return m->features;
}

kace_metric_set kace_model_metrics(const kace_model *m)
{
    return m->metrics;
}

const double *kace_model_coefficients(const kace_model *m, int *n)
{
    if (m->kind != KACE_MODEL_LINEAR) {
        *n = 0;
        return NULL;
    }
    *n = m->n_features + 1;
    return m->coef;
}

void kace_model_free(kace_model **m)
{
    if (!m || !*m)
        return;
    const kace_model_ops *ops = kind_ops(*m);
    if (ops && ops->release)
        ops->release(*m); /* booster JSON and trees */
    free(*m);
    *m = NULL;
}

/* ---- text format ----------------------------------------------------------
 *   kace-model 2|3                              (3 when the metric set is not full)
 *   kind linear|forest|slowdown
 *   features kace|xu|xu-nvml[-no-counters|-system]
 *   metrics full|no-counters|system              (version 3 only)
 *   n_features 10
 *   n_fit 37
 *   y_stats <mean> <std>
 *   feature <metric name>\t<mean>\t<std>        (n_features lines, in order)
 *   coef <c0> <c1> ... <cd>                      (linear)
 *   forest <n_estimators> <max_features> <max_depth> <min_split> <min_leaf> <bootstrap>
 *   booster_json <bytes>\n<that many bytes>\n     (forest)
 *   end
 */


/* "booster_json <bytes>" and the JSON: held, or made now by the kind. */
static kace_status put_booster(kace_ctx *ctx, const kace_model *m, text_buf *t)
{
    const kace_model_ops *ops = kind_ops(m);
    const char *json = m->booster_json;
    size_t len = m->booster_json_len;
    char *made = NULL;
    if (!len && ops && ops->booster_json) {
        kace_status st = ops->booster_json(ctx, m, &made, &len);
        if (st)
            return st;
        json = made;
    }
    tb_printf(t, "booster_json %zu\n", len);
    tb_append(t, json, len);
    tb_printf(t, "\n");
    free(made);
    return KACE_OK;
}

kace_status kace_model_to_text(kace_ctx *ctx, const kace_model *m, char **text)
{
    *text = NULL;
    text_buf t = {0};
    bool full = m->metrics == KACE_METRICS_FULL;
    tb_printf(&t, "kace-model %d\n", full ? KACE_MODEL_FORMAT_FULL_METRICS : KACE_MODEL_FORMAT_VERSION);
    tb_printf(&t, "kind %s\n", kace_model_kind_name(m->kind));
    tb_printf(&t, "features %s\n", m->features->name);
    if (!full)
        tb_printf(&t, "metrics %s\n", kace_metric_set_name(m->metrics));
    tb_printf(&t, "n_features %d\n", m->n_features);
    tb_printf(&t, "n_fit %zu\n", m->n_fit);
    tb_printf(&t, "y_stats %.17g %.17g\n", m->y_mean, m->y_std);
    for (int j = 0; j < m->n_features; j++)
        tb_printf(&t, "feature %s\t%.17g\t%.17g\n", kace_metric_name(m->features->metric[j]), m->x_mean[j],
                  m->x_std[j]);
    if (m->kind == KACE_MODEL_LINEAR) {
        tb_printf(&t, "coef");
        for (int j = 0; j <= m->n_features; j++)
            tb_printf(&t, " %.17g", m->coef[j]);
        tb_printf(&t, "\n");
    } else if (kind_ops(m) && kind_ops(m)->write) {
        kace_status st = kind_ops(m)->write(ctx, m, &t);
        if (st) {
            free(t.p);
            return st;
        }
    } else if (m->kind == KACE_MODEL_SLOWDOWN) {
        tb_printf(&t, "slowdown %d %.17g %.17g\n", m->n_member_features, m->ridge_alpha, m->tree_weight);
        for (int j = 0; j < m->n_member_features; j++)
            tb_printf(&t, "member %.17g %.17g\n", m->m_mean[j], m->m_std[j]);
        tb_printf(&t, "ridge");
        for (int j = 0; j <= m->n_member_features; j++)
            tb_printf(&t, " %.17g", m->ridge[j]);
        int n_range;
        const kace_metric *ranged = kace_profile_metrics(&n_range);
        tb_printf(&t, "\nprofile_ranges %d\n", m->has_profile_range ? n_range : 0);
        for (int j = 0; m->has_profile_range && j < n_range; j++)
            tb_printf(&t, "range %s\t%.17g\t%.17g\n", kace_metric_name(ranged[j]), m->profile_lo[ranged[j]],
                      m->profile_hi[ranged[j]]);
        kace_status st = put_booster(ctx, m, &t);
        if (st) {
            free(t.p);
            return st;
        }
    } else {
        const kace_forest_params *f = &m->forest;
        tb_printf(&t, "forest %d %d %d %d %d %d\n", f->n_estimators, f->max_features, f->max_depth,
                  f->min_samples_split, f->min_samples_leaf, f->bootstrap);
        kace_status st = put_booster(ctx, m, &t);
        if (st) {
            free(t.p);
            return st;
        }
    }
    tb_printf(&t, "end\n");
    if (t.oom) {
        free(t.p);
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory writing the model");
    }
    *text = t.p;
    return KACE_OK;
}

/* A line reader over the model text that counts lines for messages. */
typedef struct line_reader {
    const char *p, *end, *origin;
    int line;
    char buf[4096];
} line_reader;

static bool next_line(line_reader *r)
{
    if (r->p >= r->end)
        return false;
    const char *nl = memchr(r->p, '\n', (size_t)(r->end - r->p));
    size_t n = nl ? (size_t)(nl - r->p) : (size_t)(r->end - r->p);
    if (n >= sizeof r->buf)
        n = sizeof r->buf - 1; /* over-long lines fail their keyword parse below */
    memcpy(r->buf, r->p, n);
    r->buf[n] = '\0';
    for (size_t i = 0; i < n; i++)
        if (r->buf[i] == '\0')
            r->buf[i] = '?';
    r->p = nl ? nl + 1 : r->end;
    r->line++;
    return true;
}

static kace_status bad(kace_ctx *ctx, const line_reader *r, const char *expected)
{
    return kace_fail(ctx, KACE_ERR_PARSE, "%s:%d:1: model file: expected %s, got '%.60s'", r->origin, r->line, expected,
                     r->buf);
}

static bool parse_double(const char **s, double *out)
{
    char *end = NULL;
    errno = 0;
    double v = strtod(*s, &end);
    if (end == *s || errno == ERANGE || !isfinite(v))
        return false;
    *s = end;
    *out = v;
    return true;
}

static bool parse_long(const char **s, long lo, long hi, long *out)
{
    char *end = NULL;
    errno = 0;
    long v = strtol(*s, &end, 10);
    if (end == *s || errno == ERANGE || v < lo || v > hi)
        return false;
    *s = end;
    *out = v;
    return true;
}

static bool at_end(const char *s)
{
    while (*s == ' ' || *s == '\r')
        s++;
    return *s == '\0';
}

/* "booster_json <bytes>" then that many bytes of JSON (no NUL byte). */
static kace_status read_booster(kace_ctx *ctx, line_reader *r, kace_model *m)
{
    long v;
    const char *s;
    if (!next_line(r) || strncmp(r->buf, "booster_json ", 13) != 0)
        return bad(ctx, r, "'booster_json <bytes>'");
    s = r->buf + 13;
    if (!parse_long(&s, 0, (long)(r->end - r->p), &v) || !at_end(s))
        return bad(ctx, r, "a byte count that fits in the file");
    if (memchr(r->p, '\0', (size_t)v) || (v > 0 && r->p[0] != '{'))
        return bad(ctx, r, "a JSON booster (text starting with '{', no NUL byte)");
    m->booster_json = malloc((size_t)v + 1);
    if (!m->booster_json)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    memcpy(m->booster_json, r->p, (size_t)v);
    m->booster_json[v] = '\0';
    m->booster_json_len = (size_t)v;
    for (long i = 0; i < v; i++)
        r->line += r->p[i] == '\n';
    r->p += v;
    if (r->p < r->end && *r->p == '\n')
        r->p++;
    return KACE_OK;
}

static int member_features(const kace_model *m)
{
    const kace_model_ops *ops = kind_ops(m);
    return ops && ops->member_features ? ops->member_features() : 0;
}

/* What a loaded model derives from its saved fields (the kind's trees). */
static kace_status restore(kace_ctx *ctx, kace_model *m)
{
    const kace_model_ops *ops = kind_ops(m);
    return ops && ops->restore ? ops->restore(ctx, m) : KACE_OK;
}

/* Version 2: "profile_ranges <0 or one per metric the model reads>", then
 * "range <metric>\t<lo>\t<hi>" for each, in kace_profile_metrics order
 * (the slowdown model's). */
static kace_status read_profile_ranges(kace_ctx *ctx, line_reader *r, kace_model *m)
{
    int n_range;
    const kace_metric *ranged = kace_profile_metrics(&n_range);
    const char *s;
    long v;
    if (!next_line(r) || strncmp(r->buf, "profile_ranges ", 15) != 0)
        return bad(ctx, r, "'profile_ranges <count>'");
    s = r->buf + 15;
    if (!parse_long(&s, 0, n_range, &v) || !at_end(s) || (v != 0 && v != n_range))
        return bad(ctx, r, "0 or the number of profile metrics the slowdown model reads");
    for (long j = 0; j < v; j++) {
        const char *name = kace_metric_name(ranged[j]);
        size_t len = strlen(name);
        if (!next_line(r) || strncmp(r->buf, "range ", 6) != 0 || strncmp(r->buf + 6, name, len) != 0 ||
            r->buf[6 + len] != '\t')
            return bad(ctx, r, "'range <metric>\\t<lo>\\t<hi>' for the next metric the model reads");
        s = r->buf + 6 + len;
        double lo, hi;
        if (!parse_double(&s, &lo) || !parse_double(&s, &hi) || !at_end(s) || lo > hi)
            return bad(ctx, r, "two finite numbers lo <= hi after the metric");
        m->profile_lo[ranged[j]] = lo;
        m->profile_hi[ranged[j]] = hi;
    }
    m->has_profile_range = v > 0;
    return KACE_OK;
}

static kace_status read_slowdown(kace_ctx *ctx, line_reader *r, int version, kace_model *m)
{
    const char *s;
    long v;
    if (!next_line(r) || strncmp(r->buf, "slowdown ", 9) != 0)
        return bad(ctx, r, "'slowdown <member features> <alpha> <tree weight>'");
    s = r->buf + 9;
    if (!parse_long(&s, 1, KACE_MAX_FEATURES, &v) || v != member_features(m) ||
        !parse_double(&s, &m->ridge_alpha) || !parse_double(&s, &m->tree_weight) || !at_end(s) ||
        !(m->ridge_alpha > 0) || m->tree_weight < 0 || m->tree_weight > 1)
        return bad(ctx, r, "the member feature count, alpha > 0 and a weight in [0, 1]");
    m->n_member_features = (int)v;
    for (int j = 0; j < m->n_member_features; j++) {
        if (!next_line(r) || strncmp(r->buf, "member ", 7) != 0)
            return bad(ctx, r, "'member <mean> <std>'");
        s = r->buf + 7;
        if (!parse_double(&s, &m->m_mean[j]) || !parse_double(&s, &m->m_std[j]) || !at_end(s) || m->m_std[j] < 0)
            return bad(ctx, r, "a finite mean and std >= 0");
    }
    if (!next_line(r) || strncmp(r->buf, "ridge", 5) != 0)
        return bad(ctx, r, "'ridge <intercept> <one per member feature>'");
    s = r->buf + 5;
    for (int j = 0; j <= m->n_member_features; j++)
        if (!parse_double(&s, &m->ridge[j]))
            return bad(ctx, r, "member features + 1 finite ridge coefficients");
    if (!at_end(s))
        return bad(ctx, r, "exactly member features + 1 ridge coefficients");
    kace_status st = version >= 2 ? read_profile_ranges(ctx, r, m) : KACE_OK;
    if (!st)
        st = read_booster(ctx, r, m);
    if (st)
        return st;
    if (m->booster_json_len == 0 && m->tree_weight > 0)
        return bad(ctx, r, "trees when the tree weight is above 0");
    if ((st = restore(ctx, m))) {
        char msg[768];
        snprintf(msg, sizeof msg, "%s", kace_errmsg(ctx));
        return kace_fail(ctx, st, "%s:%d:1: model file: %s", r->origin, r->line, msg);
    }
    return KACE_OK;
}

kace_status kace_model_from_text(kace_ctx *ctx, const char *text, size_t len, const char *origin, kace_model **out)
{
    *out = NULL;
    line_reader r = {.p = text, .end = text + len, .origin = origin ? origin : "<model>", .line = 0};
    kace_model *m = calloc(1, sizeof *m);
    if (!m)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    kace_status st = KACE_OK;
    long v;
    const char *s;
    if (!next_line(&r) || strncmp(r.buf, "kace-model ", 11) != 0) {
        st = bad(ctx, &r, "'kace-model <version>' on the first line");
        goto fail;
    }
    s = r.buf + 11;
    if (!parse_long(&s, 1, 1000000, &v) || !at_end(s)) {
        st = bad(ctx, &r, "a format version number");
        goto fail;
    }
    if (v < 1 || v > KACE_MODEL_FORMAT_VERSION) {
        st = kace_fail(ctx, KACE_ERR_PARSE, "%s:%d:12: model format version %ld is not supported (expected 1..%d)",
                       r.origin, r.line, v, KACE_MODEL_FORMAT_VERSION);
        goto fail;
    }
    int version = (int)v;
    if (!next_line(&r) || strncmp(r.buf, "kind ", 5) != 0) {
        st = bad(ctx, &r, "'kind linear', 'kind forest' or 'kind slowdown'");
        goto fail;
    }
    int kind = kace_model_kind_from_name(r.buf + 5);
    if (kind >= 0)
        kace_model_set_kind(m, (kace_model_kind)kind);
    else {
        st = bad(ctx, &r, "'kind linear', 'kind forest' or 'kind slowdown'");
        goto fail;
    }
    if (!next_line(&r) || strncmp(r.buf, "features ", 9) != 0 || !(m->features = kace_feature_set_find(r.buf + 9))) {
        st = bad(ctx, &r, "'features kace', 'features xu' or 'features xu-nvml' (or one of them restricted: "
                          "'kace-no-counters', 'kace-system', ...)");
        goto fail;
    }
    /* Before version 3 every model read every metric of its features. */
    m->metrics = kace_feature_set_metrics(m->features);
    if (version >= 3) {
        int set;
        if (!next_line(&r) || strncmp(r.buf, "metrics ", 8) != 0 || (set = kace_metric_set_from_name(r.buf + 8)) < 0) {
            st = bad(ctx, &r, "'metrics full', 'metrics no-counters' or 'metrics system'");
            goto fail;
        }
        m->metrics = (kace_metric_set)set;
        if (kace_feature_set_metrics(m->features) < m->metrics) {
            st = bad(ctx, &r, "a metric set that holds every feature of the features line");
            goto fail;
        }
    }
    if (!next_line(&r) || strncmp(r.buf, "n_features ", 11) != 0) {
        st = bad(ctx, &r, "'n_features <n>'");
        goto fail;
    }
    s = r.buf + 11;
    if (!parse_long(&s, 1, KACE_MAX_FEATURES, &v) || !at_end(s) || v != m->features->n) {
        st = bad(ctx, &r, "the feature set's number of features");
        goto fail;
    }
    m->n_features = (int)v;
    if (!next_line(&r) || strncmp(r.buf, "n_fit ", 6) != 0) {
        st = bad(ctx, &r, "'n_fit <rows>'");
        goto fail;
    }
    s = r.buf + 6;
    if (!parse_long(&s, 0, 1L << 40, &v) || !at_end(s)) {
        st = bad(ctx, &r, "a row count after n_fit");
        goto fail;
    }
    m->n_fit = (size_t)v;
    if (!next_line(&r) || strncmp(r.buf, "y_stats ", 8) != 0) {
        st = bad(ctx, &r, "'y_stats <mean> <std>'");
        goto fail;
    }
    s = r.buf + 8;
    if (!parse_double(&s, &m->y_mean) || !parse_double(&s, &m->y_std) || !at_end(s) || !(m->y_std > 0)) {
        st = bad(ctx, &r, "two finite numbers after y_stats, the std > 0");
        goto fail;
    }
    for (int j = 0; j < m->n_features; j++) {
        if (!next_line(&r) || strncmp(r.buf, "feature ", 8) != 0) {
            st = bad(ctx, &r, "'feature <name>\\t<mean>\\t<std>'");
            goto fail;
        }
        char *tab = strchr(r.buf + 8, '\t');
        if (!tab) {
            st = bad(ctx, &r, "a tab after the feature name");
            goto fail;
        }
        *tab = '\0';
        if (strcmp(r.buf + 8, kace_metric_name(m->features->metric[j])) != 0) {
            *tab = '\t';
            st = bad(ctx, &r, "the feature set's features in order");
            goto fail;
        }
        *tab = '\t';
        s = tab + 1;
        if (!parse_double(&s, &m->x_mean[j]) || !parse_double(&s, &m->x_std[j]) || !at_end(s) || m->x_std[j] < 0) {
            st = bad(ctx, &r, "finite mean and std >= 0 of the feature");
            goto fail;
        }
    }
    if (m->kind == KACE_MODEL_LINEAR) {
        if (!next_line(&r) || strncmp(r.buf, "coef", 4) != 0) {
            st = bad(ctx, &r, "'coef <intercept> <one per feature>'");
            goto fail;
        }
        s = r.buf + 4;
        for (int j = 0; j <= m->n_features; j++)
            if (!parse_double(&s, &m->coef[j])) {
                st = bad(ctx, &r, "n_features + 1 finite coefficients");
                goto fail;
            }
        if (!at_end(s)) {
            st = bad(ctx, &r, "exactly n_features + 1 coefficients");
            goto fail;
        }
    } else if (kind_ops(m) && kind_ops(m)->read) {
        if ((st = kind_ops(m)->read(ctx, m, &r.p, r.end, &r.line, r.origin)))
            goto fail;
    } else if (m->kind == KACE_MODEL_SLOWDOWN) {
        if ((st = read_slowdown(ctx, &r, version, m)))
            goto fail;
    } else {
        if (!next_line(&r) || strncmp(r.buf, "forest ", 7) != 0) {
            st = bad(ctx, &r, "'forest <6 parameters>'");
            goto fail;
        }
        s = r.buf + 7;
        long p[6];
        static const long lo[6] = {1, 0, 0, 2, 1, 0}, hi[6] = {100000, 2, 10000, 1000000, 1000000, 1};
        for (int i = 0; i < 6; i++)
            if (!parse_long(&s, lo[i], hi[i], &p[i])) {
                st = bad(ctx, &r, "six forest parameters in range");
                goto fail;
            }
        m->forest = (kace_forest_params){(int)p[0], (int)p[1], (int)p[2], (int)p[3], (int)p[4], (int)p[5]};
        if (!next_line(&r) || strncmp(r.buf, "booster_json ", 13) != 0) {
            st = bad(ctx, &r, "'booster_json <bytes>'");
            goto fail;
        }
        s = r.buf + 13;
        if (!parse_long(&s, 1, (long)(r.end - r.p), &v) || !at_end(s)) {
            st = bad(ctx, &r, "a byte count that fits in the file");
            goto fail;
        }
        m->booster_json = malloc((size_t)v + 1);
        if (!m->booster_json) {
            st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
            goto fail;
        }
        memcpy(m->booster_json, r.p, (size_t)v);
        m->booster_json[v] = '\0';
        m->booster_json_len = (size_t)v;
        for (long i = 0; i < v; i++)
            r.line += r.p[i] == '\n';
        r.p += v;
        if (r.p < r.end && *r.p == '\n')
            r.p++;
        if ((st = restore(ctx, m))) {
            char msg[768];
            snprintf(msg, sizeof msg, "%s", kace_errmsg(ctx));
            st = kace_fail(ctx, st, "%s:%d:1: model file: %s", r.origin, r.line, msg);
            goto fail;
        }
    }
    if (!next_line(&r) || strcmp(r.buf, "end") != 0) {
        st = bad(ctx, &r, "'end'");
        goto fail;
    }
    *out = m;
    return KACE_OK;
fail:
    kace_model_free(&m);
    return st;
}

kace_status kace_model_save(kace_ctx *ctx, const kace_model *m, const char *path)
{
    char *text = NULL;
    kace_status st = kace_model_to_text(ctx, m, &text);
    if (st)
        return st;
    /* a reader never sees half a model */
    st = kace_write_file_durable(ctx, path, text, strlen(text));
    free(text);
    return st;
}

kace_status kace_model_load(kace_ctx *ctx, const char *path, kace_model **out)
{
    *out = NULL;
    char *data = NULL;
    size_t len = 0;
    kace_status st = kace_read_file(ctx, path, &data, &len);
    if (st)
        return st;
    st = kace_model_from_text(ctx, data, len, path, out);
    free(data);
    return st;
}

void kace_model_label_stats(const kace_model *m, double *mean, double *std)
{
    *mean = m->y_mean;
    *std = m->y_std;
}

kace_status kace_model_name_check(kace_ctx *ctx, const char *name)
{
    if (!name || !*name)
        return kace_fail(ctx, KACE_ERR_INVALID, "a model name cannot be empty");
    size_t len = strlen(name);
    if (len > 63)
        return kace_fail(ctx, KACE_ERR_INVALID, "model name '%.40s...' is longer than 63 bytes", name);
    for (size_t i = 0; i < len; i++) {
        char c = name[i];
        bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
        if (!alnum && (i == 0 || (c != '.' && c != '_' && c != '-')))
            return kace_fail(ctx, KACE_ERR_INVALID,
                             "model name '%s': byte %zu ('%c') is not allowed (letters, digits, '.', '_', '-'; "
                             "a letter or digit first)",
                             name, i + 1, c >= ' ' && c < 127 ? c : '?');
    }
    /* The default is what serve and the Slurm plugins use: it changes only when asked (promotion). */
    if (strcmp(name, KACE_MODEL_DEFAULT) == 0)
        return kace_fail(ctx, KACE_ERR_INVALID,
                         "'%s' is the name of the promoted model: train under another name and promote it "
                         "(kace train --promote, kace model promote NAME)",
                         KACE_MODEL_DEFAULT);
    return KACE_OK;
}
