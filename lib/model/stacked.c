/* The stacked model (stacked.c): the pressure model and the slowdown model
 * fitted on the same rows, each member's log throughput blended
 *
 *     log t_i = w * log t_i(pressure) + (1 - w) * log t_i(slowdown)
 *
 * with one weight w in {0, 0.1, ..., 1} chosen by cross-validation inside
 * the fitting rows only. The inner folds hold out whole families
 * (leave-one-family-out over the families of the fitting rows): a fold's
 * models are fitted on the rows with no member of the family and score
 * each w on the rows with one, as the evaluation scores partner choice (for
 * each held-out workload, the measured sum of the row predicted best over
 * the best measured one), ties going to the smaller summed absolute error
 * of the members' fractions, then to the larger w. The two models fail in
 * different places (the pressure model on families whose own calibration
 * no solo metric shows, the slowdown model on batch sizes its ridge part
 * extrapolates to); both are workloads the fit never saw, which is what an
 * inner family fold holds out.
 *
 * Both parts predict every member, so the blend does too; its confidence
 * and coverage are the slowdown part's. A member's blend rises with each
 * part's prediction, so the parts' upper bounds u_p, u_s would bound it by
 * u_p^w u_s^(1-w); the group search does not combine two kinds of bounds,
 * so a search over this model enumerates. Prediction costs both parts'.
 * Figures and what was tried: docs/pressure-model.md. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/text_buf.h"
#include "model_internal.h"
#include "stacked.h"

enum { PART_PRESSURE, PART_SLOWDOWN, N_PARTS };

#define N_WEIGHTS 11 /* w = 0, 0.1, ..., 1 */
#define FRACTION_MIN 0.02
#define FRACTION_MAX 3.0
#define MIN_FOLD_ROWS 4 /* fewer fitting rows in a fold: the fold is skipped */

typedef struct st_model {
    kace_model *part[N_PARTS];
    double w; /* the pressure part's weight */
} st_model;

static void state_free(st_model *sm)
{
    if (!sm)
        return;
    for (int q = 0; q < N_PARTS; q++)
        kace_model_free(&sm->part[q]);
    free(sm);
}

static double weight_at(int v)
{
    return (double)v / (N_WEIGHTS - 1);
}

static double blend(double w, double pressure, double slowdown)
{
    /* Both are throughputs > 0; a part that predicts none falls to the floor. */
    double lp = log(fmax(pressure, 1e-300)), ls = log(fmax(slowdown, 1e-300));
    return exp(w * lp + (1 - w) * ls);
}

/* The parts' member predictions of a group. */
static kace_status parts_predict(kace_ctx *ctx, kace_model *const *part, const kace_dataset *ds, const int *group,
                                 int k, double (*member)[KACE_MAX_K], double *confidence)
{
    for (int q = 0; q < N_PARTS; q++) {
        double sum;
        kace_status st = kace_predict_group(ctx, kace_model_predictor(part[q]), ds, group, k, &sum,
                                            q == PART_SLOWDOWN ? confidence : NULL, member[q]);
        if (st)
            return st;
    }
    return KACE_OK;
}

static kace_status fit_parts(kace_ctx *ctx, const kace_dataset *ds, const int *rows, size_t n,
                             const kace_fit_spec *spec, kace_model **part)
{
    kace_fit_spec ps = *spec, ss = *spec;
    ps.kind = KACE_MODEL_PRESSURE;
    ss.kind = KACE_MODEL_SLOWDOWN;
    kace_status st = kace_model_fit_rows(ctx, ds, rows, n, &ps, &part[PART_PRESSURE]);
    if (!st)
        st = kace_model_fit_rows(ctx, ds, rows, n, &ss, &part[PART_SLOWDOWN]);
    return st;
}

/* What a weight scores on the held-out rows of the inner folds: partner
 * choice as the evaluation scores it (for each held-out workload, the
 * measured sum of the row predicted best over the best measured), summed
 * over the held-out workloads, and the members' summed absolute error of
 * their fraction of the exclusive throughput (ties between choices). */
typedef struct fold_score {
    double choice[N_WEIGHTS], error[N_WEIGHTS];
    int targets;
} fold_score;

static double measured_sum(const kace_colocation *c)
{
    double t = 0;
    for (int i = 0; i < c->k; i++)
        t += c->throughput[i];
    return t;
}

static kace_status score_fold(kace_ctx *ctx, kace_model *const *part, const kace_dataset *ds, const int *rows,
                              size_t n, const int *fam, int held, fold_score *fs)
{
    double *pred = malloc((n ? n : 1) * N_WEIGHTS * sizeof *pred); /* row r, weight v: pred[r * N_WEIGHTS + v] */
    if (!pred)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    for (size_t r = 0; r < n; r++) {
        const kace_colocation *c = &ds->colocations[rows[r]];
        double member[N_PARTS][KACE_MAX_K];
        kace_status st = parts_predict(ctx, part, ds, c->workload, c->k, member, NULL);
        if (st) {
            free(pred);
            return st;
        }
        for (int v = 0; v < N_WEIGHTS; v++)
            pred[r * N_WEIGHTS + v] = 0;
        for (int i = 0; i < c->k; i++) {
            double excl = ds->workloads[c->workload[i]].metric[KACE_M_EXCLUSIVE];
            double meas = fmin(fmax(c->throughput[i] / excl, FRACTION_MIN), FRACTION_MAX);
            for (int v = 0; v < N_WEIGHTS; v++) {
                double t = blend(weight_at(v), member[PART_PRESSURE][i], member[PART_SLOWDOWN][i]);
                pred[r * N_WEIGHTS + v] += t;
                fs->error[v] += fabs(t / excl - meas);
            }
        }
    }
    /* Each held-out workload in turn, first seen in row r0. */
    for (size_t r0 = 0; r0 < n; r0++) {
        const kace_colocation *c0 = &ds->colocations[rows[r0]];
        for (int i0 = 0; i0 < c0->k; i0++) {
            int target = c0->workload[i0];
            bool first = fam[target] == held;
            for (size_t r = 0; first && r < r0; r++)
                for (int i = 0; i < ds->colocations[rows[r]].k; i++)
                    first &= ds->colocations[rows[r]].workload[i] != target;
            for (int i = 0; first && i < i0; i++)
                first &= c0->workload[i] != target;
            if (!first)
                continue;
            double best_meas = 0, pick_pred[N_WEIGHTS], pick_meas[N_WEIGHTS];
            for (int v = 0; v < N_WEIGHTS; v++)
                pick_pred[v] = -INFINITY, pick_meas[v] = 0;
            for (size_t r = r0; r < n; r++) {
                const kace_colocation *c = &ds->colocations[rows[r]];
                bool has = false;
                for (int i = 0; i < c->k; i++)
                    has |= c->workload[i] == target;
                if (!has)
                    continue;
                double meas = measured_sum(c);
                best_meas = fmax(best_meas, meas);
                for (int v = 0; v < N_WEIGHTS; v++)
                    if (pred[r * N_WEIGHTS + v] > pick_pred[v]) {
                        pick_pred[v] = pred[r * N_WEIGHTS + v];
                        pick_meas[v] = meas;
                    }
            }
            if (!(best_meas > 0))
                continue;
            for (int v = 0; v < N_WEIGHTS; v++)
                fs->choice[v] += pick_meas[v] / best_meas;
            fs->targets++;
        }
    }
    free(pred);
    return KACE_OK;
}

/* w by leave-one-family-out inside rows[0..n): a fold whose models cannot
 * be fitted (too few rows, a fit that fails) is left out; none left: 0.5. */
static kace_status choose_weight(kace_ctx *ctx, const kace_dataset *ds, const int *rows, size_t n,
                                 const kace_fit_spec *spec, double *w)
{
    *w = 0.5;
    int *fam = malloc((ds->n_workloads ? ds->n_workloads : 1) * sizeof *fam); /* workload -> family index */
    int *train = malloc((n ? n : 1) * sizeof *train), *test = malloc((n ? n : 1) * sizeof *test);
    if (!fam || !train || !test) {
        free(fam);
        free(train);
        free(test);
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    }
    /* Families of the fitting rows' members, numbered by first appearance. */
    int n_fam = 0;
    for (size_t v = 0; v < ds->n_workloads; v++)
        fam[v] = -1;
    for (size_t r = 0; r < n; r++) {
        const kace_colocation *c = &ds->colocations[rows[r]];
        for (int i = 0; i < c->k; i++) {
            int v = c->workload[i];
            if (fam[v] >= 0)
                continue;
            for (size_t u = 0; u < ds->n_workloads && fam[v] < 0; u++)
                if (fam[u] >= 0 && strcmp(ds->workloads[u].family, ds->workloads[v].family) == 0)
                    fam[v] = fam[u];
            if (fam[v] < 0)
                fam[v] = n_fam++;
        }
    }
    fold_score fs = {{0}, {0}, 0};
    int used = 0;
    kace_status st = KACE_OK;
    for (int f = 0; f < n_fam && !st; f++) {
        size_t n_train = 0, n_test = 0;
        for (size_t r = 0; r < n; r++) {
            const kace_colocation *c = &ds->colocations[rows[r]];
            bool held = false;
            for (int i = 0; i < c->k; i++)
                held |= fam[c->workload[i]] == f;
            if (held)
                test[n_test++] = rows[r];
            else
                train[n_train++] = rows[r];
        }
        if (n_train < MIN_FOLD_ROWS || n_test == 0)
            continue;
        kace_model *part[N_PARTS] = {NULL, NULL};
        if (fit_parts(ctx, ds, train, n_train, spec, part) == KACE_OK) {
            st = score_fold(ctx, part, ds, test, n_test, fam, f, &fs);
            used++;
        }
        for (int q = 0; q < N_PARTS; q++)
            kace_model_free(&part[q]);
    }
    if (!st && used) {
        /* The best choice; among equal choices the smaller error, then the
         * larger weight (the part that predicts groups of any k). */
        int best = N_WEIGHTS - 1;
        for (int v = N_WEIGHTS - 1; v >= 0; v--)
            if (fs.choice[v] > fs.choice[best] + 1e-9 ||
                (fabs(fs.choice[v] - fs.choice[best]) <= 1e-9 && fs.error[v] < fs.error[best]))
                best = v;
        *w = weight_at(best);
    }
    free(fam);
    free(train);
    free(test);
    return st;
}

static kace_status model_of(kace_ctx *ctx, st_model *sm, size_t n_fit, kace_model **out)
{
    kace_model *m = calloc(1, sizeof *m);
    if (!m)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    const kace_model *sd = sm->part[PART_SLOWDOWN];
    kace_model_set_kind(m, KACE_MODEL_STACKED);
    m->metrics = sd->metrics;
    m->features = sd->features;
    m->n_features = sd->n_features;
    memcpy(m->x_mean, sd->x_mean, sizeof m->x_mean);
    memcpy(m->x_std, sd->x_std, sizeof m->x_std);
    m->y_mean = sd->y_mean;
    m->y_std = sd->y_std;
    m->n_fit = n_fit;
    m->state = sm;
    *out = m;
    return KACE_OK;
}

kace_status kace_stacked_fit(kace_ctx *ctx, const kace_dataset *ds, const int *rows, size_t n,
                             const kace_fit_spec *spec, kace_model **out)
{
    *out = NULL;
    st_model *sm = calloc(1, sizeof *sm);
    if (!sm)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    kace_status st = fit_parts(ctx, ds, rows, n, spec, sm->part);
    if (!st)
        st = choose_weight(ctx, ds, rows, n, spec, &sm->w);
    if (!st)
        st = model_of(ctx, sm, n, out);
    if (st)
        state_free(sm);
    return st;
}

double kace_stacked_weight(const kace_model *m)
{
    return ((const st_model *)m->state)->w;
}

static kace_status fit_rows(kace_ctx *ctx, const kace_dataset *ds, const int *rows, size_t n,
                            const kace_fit_spec *spec, kace_model **out)
{
    if (rows)
        return kace_stacked_fit(ctx, ds, rows, n, spec, out);
    int *all = malloc((ds->n_colocations ? ds->n_colocations : 1) * sizeof *all);
    if (!all)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < ds->n_colocations; i++)
        all[i] = (int)i;
    kace_status st = kace_stacked_fit(ctx, ds, all, ds->n_colocations, spec, out);
    free(all);
    return st;
}

static kace_status predict_op(kace_ctx *ctx, const kace_predictor *p, const kace_dataset *ds, const int *group, int k,
                              double *sum, double *confidence, double *member_out)
{
    const kace_model *m = p->self;
    const st_model *sm = m->state;
    double member[N_PARTS][KACE_MAX_K];
    kace_status st = parts_predict(ctx, sm->part, ds, group, k, member, confidence);
    if (st)
        return st;
    double total = 0;
    for (int i = 0; i < k; i++) {
        double t = blend(sm->w, member[PART_PRESSURE][i], member[PART_SLOWDOWN][i]);
        if (member_out)
            member_out[i] = t;
        total += t;
    }
    *sum = total;
    return KACE_OK;
}

static void coverage_op(const kace_predictor *p, const kace_dataset *ds, const int *group, int k, kace_coverage *out)
{
    const st_model *sm = ((const kace_model *)p->self)->state;
    kace_predictor_coverage(kace_model_predictor(sm->part[PART_SLOWDOWN]), ds, group, k, out);
}

static const kace_feature_set *features_op(const kace_predictor *p)
{
    const kace_model *m = p->self;
    return m->features;
}

/* ---- the model file ----------------------------------------------------------
 *   stacked <w> <bytes of the pressure part> <bytes of the slowdown part>
 * then each part's own model file (from its "kace-model" line to its "end"). */

static kace_status write_op(kace_ctx *ctx, const kace_model *m, text_buf *t)
{
    const st_model *sm = m->state;
    char *text[N_PARTS] = {NULL, NULL};
    kace_status st = KACE_OK;
    for (int q = 0; q < N_PARTS && !st; q++)
        st = kace_model_to_text(ctx, sm->part[q], &text[q]);
    if (!st) {
        tb_printf(t, "stacked %.17g %zu %zu\n", sm->w, strlen(text[0]), strlen(text[1]));
        for (int q = 0; q < N_PARTS; q++)
            tb_printf(t, "%s", text[q]);
    }
    free(text[0]);
    free(text[1]);
    return st;
}

static const char *const part_name[N_PARTS] = {"pressure", "slowdown"};

/* A part's error, read with the part's name as its origin, told at this
 * file's line: "<origin>:<line + offset>:<col>: the <part> part: ...". */
static kace_status part_error(kace_ctx *ctx, kace_status st, const char *origin, int offset, const char *part)
{
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", kace_errmsg(ctx));
    size_t n = strlen(part);
    int line, col, used = 0;
    if (strncmp(msg, part, n) == 0 && sscanf(msg + n, ":%d:%d: %n", &line, &col, &used) == 2 && used > 0)
        return kace_fail(ctx, st, "%s:%d:%d: the %s part: %s", origin, line + offset, col, part, msg + n + used);
    return kace_fail(ctx, st, "%s:%d:1: model file: the %s part: %s", origin, offset + 1, part, msg);
}

static kace_status read_op(kace_ctx *ctx, kace_model *m, const char **p, const char *end, int *line,
                           const char *origin)
{
    const char *nl = memchr(*p, '\n', (size_t)(end - *p));
    char buf[128];
    size_t len = nl ? (size_t)(nl - *p) : (size_t)(end - *p);
    (*line)++;
    double w;
    unsigned long long bytes[N_PARTS];
    int used = 0;
    if (len >= sizeof buf)
        len = sizeof buf - 1;
    memcpy(buf, *p, len);
    buf[len] = '\0';
    if (sscanf(buf, "stacked %lf %llu %llu%n", &w, &bytes[0], &bytes[1], &used) != 3 || buf[used] != '\0' ||
        !(w >= 0 && w <= 1) || !nl || bytes[0] > (unsigned long long)(end - nl - 1) ||
        bytes[1] > (unsigned long long)(end - nl - 1) - bytes[0])
        return kace_fail(ctx, KACE_ERR_PARSE,
                         "%s:%d:1: model file: expected 'stacked <weight 0..1> <bytes> <bytes>' with both parts in "
                         "the file",
                         origin, *line);
    st_model *sm = calloc(1, sizeof *sm);
    if (!sm)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    sm->w = w;
    const char *at = nl + 1;
    kace_status st = KACE_OK;
    for (int q = 0; q < N_PARTS && !st; q++) {
        /* A part is a whole model file of its own kind (never a stacked
         * one: no nesting), its lines counted on from this file's. */
        int first = *line + 1;
        const char *kind = memchr(at, '\n', (size_t)bytes[q]);
        char want[32];
        snprintf(want, sizeof want, "kind %s\n", part_name[q]);
        size_t left = kind ? (size_t)(at + bytes[q] - kind - 1) : 0;
        if (!kind || left < strlen(want) || memcmp(kind + 1, want, strlen(want)) != 0)
            st = kace_fail(ctx, KACE_ERR_PARSE, "%s:%d:1: model file: expected the %s part here, a model file of "
                           "'kind %s'", origin, first + 1, part_name[q], part_name[q]);
        else if ((st = kace_model_from_text(ctx, at, (size_t)bytes[q], part_name[q], &sm->part[q])))
            st = part_error(ctx, st, origin, first - 1, part_name[q]);
        for (unsigned long long i = 0; !st && i < bytes[q]; i++)
            *line += at[i] == '\n';
        at += bytes[q];
    }
    if (st) {
        state_free(sm);
        return st;
    }
    *p = at;
    m->state = sm;
    return KACE_OK;
}

static void release_op(kace_model *m)
{
    state_free(m->state);
    m->state = NULL;
}

static const kace_model_ops model_ops = {
    .release = release_op,
    .write = write_op,
    .read = read_op,
};

const kace_predictor_ops kace_stacked_ops = {
    .name = "stacked",
    .policy = "kace",
    .caps = KACE_PRED_MEMBERS | KACE_PRED_CONFIDENCE | KACE_PRED_COVERAGE,
    .max_k = KACE_MAX_K,
    .predict = predict_op,
    .coverage = coverage_op,
    .features = features_op,
    .fit = fit_rows,
    .model = &model_ops,
};
