/* The pressure model: a member's fraction of its exclusive throughput is
 *
 *     f_i = exp(a_i) / (1 + exp(s_i) * sum_{j in partners} exp(p_j))
 *
 * Its partners press on it (pressure p, summed over partners, so one member
 * function serves pairs, triples and any k) and it yields to them as much as
 * its sensitivity s says; a is a calibration (0 unless the workload's own
 * colocations show it runs off its exclusive throughput). f falls as the
 * partners' pressure grows, whatever was fitted.
 *
 * Latents of a workload w, from scale-free solo metrics z-scored over the
 * training members:
 *     s_w = s0 + s1 * z_lw(w) + offset_s(w)    s1 <= 0 (big kernels suffer less)
 *     p_w =      p1 * z_lw(w) + offset_p(w)    p1 >= 0 (big kernels press harder)
 *     a_w =                     offset_a(w)
 * lw = log threads per kernel. The offsets of the training workloads carry
 * what no solo metric shows. Their prior is a Gaussian process over the
 * workload's profile g (log sm%, log mem%, SM/DRAM/memory throughput, log
 * threads) with covariance K = exp(-|g - g'|^2 / 2 l^2) + tau I: a workload
 * the model never saw inherits the offsets of workloads with a similar
 * profile (posterior mean k_w^T K^-1 d), one it saw keeps its own. The
 * model is the mean of the fractions of two fits: this smooth prior and
 * independent offsets (K = I; an unseen workload gets none).
 *
 * Fitting (targets y = log(clip(throughput / exclusive, 0.02, 3)) of every
 * member of every training colocation): first the slopes (s0, s1, p1) with
 * the offsets at 0 and penalty lambda (s1^2 + p1^2), a violated sign fixing
 * that slope at 0; then the 3n offsets with penalty mu d^T K^-1 d.
 * Levenberg-Marquardt with the analytic Jacobian does both. mu is chosen by
 * cross-validation inside the fitting rows (colocations dealt into folds by
 * a seeded shuffle, a colocation's members in one fold, criterion the sum
 * of absolute member errors of the fraction), warm-started along the mu
 * path.
 *
 * Metric sets: without kernel counters the throughput features are
 * constant (they drop out of the prior); with system metrics only, log sm%
 * stands in for log threads as the slopes' feature. The set is the model
 * file's (common header). The design: ../shared/docs/model-pressure.md;
 * figures and what was tried: docs/pressure-model.md. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/text_buf.h"
#include "bounds.h"
#include "pressure.h"

#define NF 6 /* raw features: lw, ld, lm, smt, dram, memt */
#define NG 6 /* kernel-mix features: all but lw, then lw when the prior reads it */
#define FRACTION_MIN 0.02
#define FRACTION_MAX 3.0
#define MAX_WORKLOADS 600 /* the offsets' dense solve is O((3n)^3) */

static const kace_metric needed[] = {KACE_M_THREADS,        KACE_M_SM_PCT,          KACE_M_MEM_PCT,
                                     KACE_M_SM_THROUGHPUT,  KACE_M_DRAM_THROUGHPUT, KACE_M_MEM_THROUGHPUT,
                                     KACE_M_EXCLUSIVE};

static const double mu_path[] = {10, 3, 1, 0.3, 0.1}; /* most regularized first: warm starts */
enum { N_MU = sizeof mu_path / sizeof *mu_path };

void kace_pressure_params_default(kace_pressure_params *p)
{
    p->lambda = 1;
    p->mu = 0;
    p->tau = 0.3;
    p->length = 1.5;
    p->prior_lw = true;
    p->folds = 3;
    p->seed = 0;
    p->independent = false;
    p->blend = true;
    p->metrics = KACE_METRICS_FULL;
}

/* ---- a fitted model's state ------------------------------------------- */

typedef struct pr_workload {
    char name[KACE_NAME_MAX];
    double g[NG];     /* z-scored kernel-mix features */
    double off[3];    /* its own offsets: a, s, p */
    double alpha[3];  /* K^-1 d of each latent, at this workload */
    double lw;        /* its log threads when fitted */
    double e[3];      /* exp of its latents a, s, p at that lw (derived: the prediction's fast path) */
} pr_workload;

typedef struct pr_state {
    double mean[NF], std[NF];
    double s0, s1, p1;
    kace_pressure_params params;
    int n;
    pr_workload *w;
    int *slot; /* open-addressing name index: workload index + 1, 0 = empty */
    size_t mask;
} pr_state;

/* The model's state: one fit, or the mean of the fractions of two (the
 * smooth prior and independent offsets). */
typedef struct pr_model {
    int n_parts;
    pr_state *part[2];
} pr_model;

static void state_free(pr_state *st)
{
    if (!st)
        return;
    free(st->w);
    free(st->slot);
    free(st);
}

static uint64_t name_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static kace_status index_names(kace_ctx *ctx, pr_state *st)
{
    size_t size = 4;
    while (size < 2 * (size_t)st->n)
        size *= 2;
    free(st->slot);
    st->slot = calloc(size, sizeof *st->slot);
    if (!st->slot)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    st->mask = size - 1;
    for (int i = 0; i < st->n; i++) {
        size_t h = (size_t)name_hash(st->w[i].name) & st->mask;
        while (st->slot[h]) {
            if (strcmp(st->w[st->slot[h] - 1].name, st->w[i].name) == 0)
                return kace_fail(ctx, KACE_ERR_INVALID, "pressure model: workload '%s' is listed twice",
                                 st->w[i].name);
            h = (h + 1) & st->mask;
        }
        st->slot[h] = i + 1;
    }
    return KACE_OK;
}

static int find_name(const pr_state *st, const char *name)
{
    if (!st->slot)
        return -1;
    for (size_t h = (size_t)name_hash(name) & st->mask; st->slot[h]; h = (h + 1) & st->mask)
        if (strcmp(st->w[st->slot[h] - 1].name, name) == 0)
            return st->slot[h] - 1;
    return -1;
}

/* ---- features ----------------------------------------------------------- */

static kace_status check_workload(kace_ctx *ctx, kace_metric_set set, const kace_workload *w)
{
    for (size_t i = 0; i < sizeof needed / sizeof *needed; i++)
        if (kace_metric_set_has(set, needed[i]) && isnan(w->metric[needed[i]]))
            return kace_fail(ctx, KACE_ERR_INVALID,
                             "workload '%s' has no value for metric '%s' (needed by the pressure model on the %s "
                             "metrics; import %s)",
                             w->name, kace_metric_name(needed[i]), kace_metric_set_name(set),
                             kace_metric_source(needed[i]));
    if (!(w->metric[KACE_M_EXCLUSIVE] > 0))
        return kace_fail(ctx, KACE_ERR_INVALID, "workload '%s' has no positive exclusive throughput", w->name);
    return KACE_OK;
}

/* The feature the slopes s1 and p1 read: log threads per kernel; without
 * launch records (system metrics only), log sm%, the share of the SMs the
 * workload keeps busy, which also grows with its kernels' size. */
static double size_feature(kace_metric_set set, const kace_workload *w)
{
    if (kace_metric_set_has(set, KACE_M_THREADS))
        return log(fmax(w->metric[KACE_M_THREADS], 1));
    return log(fmax(w->metric[KACE_M_SM_PCT] / 100, 0.01));
}

/* The raw features of a workload; those the metric set lacks are 0
 * (constant: z-scoring leaves them 0, so they weigh nothing). */
static void raw_features(kace_metric_set set, const kace_workload *w, double *x)
{
    const double *m = w->metric;
    /* Threads per SM wave would only shift log threads: z-scoring removes it. */
    x[0] = size_feature(set, w);
    x[1] = log(fmax(m[KACE_M_SM_PCT] / 100, 0.01));
    x[2] = log(fmax(m[KACE_M_MEM_PCT] / 100, 0.01));
    bool counters = kace_metric_set_has(set, KACE_M_SM_THROUGHPUT);
    x[3] = counters ? m[KACE_M_SM_THROUGHPUT] / 100 : 0;
    x[4] = counters ? m[KACE_M_DRAM_THROUGHPUT] / 100 : 0;
    x[5] = counters ? m[KACE_M_MEM_THROUGHPUT] / 100 : 0;
}

static double zscore(const pr_state *st, int j, double v)
{
    return (v - st->mean[j]) / st->std[j];
}

/* The prior's features of a workload with raw features x. */
static void mix_features(const pr_state *st, const double *x, double *g)
{
    for (int j = 0; j < NF - 1; j++)
        g[j] = zscore(st, j + 1, x[j + 1]);
    /* Without threads the size feature is log sm%, already there. */
    bool lw = st->params.prior_lw && kace_metric_set_has(st->params.metrics, KACE_M_THREADS);
    g[NF - 1] = lw ? zscore(st, 0, x[0]) : 0;
}

static double kernel(const pr_state *st, const double *g, const double *h)
{
    if (st->params.independent)
        return g == h ? 1 : 0;
    double d2 = 0;
    for (int j = 0; j < NG; j++)
        d2 += (g[j] - h[j]) * (g[j] - h[j]);
    return exp(-d2 / (2 * st->params.length * st->params.length));
}

/* Latents a, s, p of a workload (metrics checked by the caller). */
static void latents(const pr_state *st, const kace_workload *w, double *lat)
{
    double x[NF];
    raw_features(st->params.metrics, w, x);
    double zl = zscore(st, 0, x[0]);
    double off[3] = {0, 0, 0};
    int known = find_name(st, w->name);
    if (known >= 0) {
        memcpy(off, st->w[known].off, sizeof off);
    } else if (!st->params.independent) {
        double g[NG];
        mix_features(st, x, g);
        for (int v = 0; v < st->n; v++) {
            double kv = kernel(st, g, st->w[v].g);
            for (int t = 0; t < 3; t++)
                off[t] += kv * st->w[v].alpha[t];
        }
    }
    lat[0] = off[0];
    lat[1] = st->s0 + st->s1 * zl + off[1];
    lat[2] = st->p1 * zl + off[2];
}

/* The fast path's exp(a), exp(s), exp(p) of each training workload. */
static void derive(pr_state *st)
{
    for (int v = 0; v < st->n; v++) {
        pr_workload *w = &st->w[v];
        double zl = zscore(st, 0, w->lw);
        w->e[0] = exp(w->off[0]);
        w->e[1] = exp(st->s0 + st->s1 * zl + w->off[1]);
        w->e[2] = exp(st->p1 * zl + w->off[2]);
    }
}

/* Each member's fraction of its exclusive throughput, from the latents. */
static void fractions(const double (*lat)[3], int k, double *f)
{
    double ep[KACE_MAX_K], total = 0;
    for (int j = 0; j < k; j++)
        total += ep[j] = exp(lat[j][2]);
    for (int i = 0; i < k; i++)
        f[i] = k == 1 ? 1 : exp(lat[i][0]) / (1 + exp(lat[i][1]) * fmax(total - ep[i], 0));
}

/* ---- the fitting problem ------------------------------------------------- */

typedef struct problem {
    int n;          /* training workloads (local indices) */
    int *ds_of;     /* local -> ds index */
    double *zl;     /* z-scored log threads per local workload */
    double *g;      /* n x NG kernel-mix features */
    double *kinv;   /* n x n: K^-1 */
    size_t m;       /* member samples */
    int *who;       /* local index of each sample's member */
    double *y;      /* log fraction target */
    double *frac;   /* clipped fraction */
    size_t *first;  /* partners of sample i: partner[first[i] .. first[i + 1]) */
    int *partner;
    pr_state st;    /* scaling and slopes; its workloads are filled at the end */
    double lambda, mu;
    unsigned fixed; /* stage 1: bit 1 s1 fixed at 0, bit 2 p1 fixed at 0 */
} problem;

static void problem_free(problem *pb)
{
    free(pb->ds_of);
    free(pb->zl);
    free(pb->g);
    free(pb->kinv);
    free(pb->who);
    free(pb->y);
    free(pb->frac);
    free(pb->first);
    free(pb->partner);
    memset(pb, 0, sizeof *pb);
}

static double softplus(double u)
{
    return u > 0 ? u + log1p(exp(-u)) : log1p(exp(u));
}

/* Cholesky of the d x d matrix A in place (lower triangle); false if not
 * positive definite. */
static bool cholesky(double *A, int d)
{
    for (int j = 0; j < d; j++) {
        double s = A[(size_t)j * d + j];
        for (int k = 0; k < j; k++)
            s -= A[(size_t)j * d + k] * A[(size_t)j * d + k];
        if (!(s > 0))
            return false;
        double l = sqrt(s);
        A[(size_t)j * d + j] = l;
        for (int i = j + 1; i < d; i++) {
            double t = A[(size_t)i * d + j];
            for (int k = 0; k < j; k++)
                t -= A[(size_t)i * d + k] * A[(size_t)j * d + k];
            A[(size_t)i * d + j] = t / l;
        }
    }
    return true;
}

/* Solves L L^T x = b in place (b becomes x). */
static void chol_solve(const double *L, int d, double *b)
{
    for (int i = 0; i < d; i++) {
        double s = b[i];
        for (int k = 0; k < i; k++)
            s -= L[(size_t)i * d + k] * b[k];
        b[i] = s / L[(size_t)i * d + i];
    }
    for (int i = d - 1; i >= 0; i--) {
        double s = b[i];
        for (int k = i + 1; k < d; k++)
            s -= L[(size_t)k * d + i] * b[k];
        b[i] = s / L[(size_t)i * d + i];
    }
}

/* u = s_i + logsumexp of the partners' p; the prediction a_i - softplus(u),
 * h = sigmoid(u) and each partner's softmax weight w. */
static double member(const problem *pb, size_t i, const double *a, const double *s, const double *p, double *h,
                     double *w)
{
    size_t b = pb->first[i], e = pb->first[i + 1];
    double pmax = -INFINITY;
    for (size_t q = b; q < e; q++)
        pmax = fmax(pmax, p[pb->partner[q]]);
    double z = 0;
    for (size_t q = b; q < e; q++)
        z += w[q - b] = exp(p[pb->partner[q]] - pmax);
    for (size_t q = b; q < e; q++)
        w[q - b] /= z;
    double u = s[pb->who[i]] + pmax + log(z);
    *h = 1 / (1 + exp(-u));
    return a[pb->who[i]] - softplus(u);
}

/* The latents of every local workload for slopes theta1 and offsets d
 * (3 x n: a, s, p; NULL = 0). */
static void local_latents(const problem *pb, const double *theta1, const double *d, double *a, double *s, double *p)
{
    for (int v = 0; v < pb->n; v++) {
        a[v] = d ? d[v] : 0;
        s[v] = theta1[0] + theta1[1] * pb->zl[v] + (d ? d[pb->n + v] : 0);
        p[v] = theta1[2] * pb->zl[v] + (d ? d[2 * pb->n + v] : 0);
    }
}

typedef struct lm_work {
    double *a, *s, *p, *w;
} lm_work;

/* Stage 1: objective of the slopes; H (3 x 3) and g when not NULL. */
static double stage1(const problem *pb, const double *theta, double *H, double *gr, const lm_work *wk)
{
    local_latents(pb, theta, NULL, wk->a, wk->s, wk->p);
    if (H) {
        memset(H, 0, 9 * sizeof *H);
        memset(gr, 0, 3 * sizeof *gr);
    }
    double obj = 0;
    for (size_t i = 0; i < pb->m; i++) {
        double h;
        double r = member(pb, i, wk->a, wk->s, wk->p, &h, wk->w) - pb->y[i];
        obj += r * r;
        if (!H)
            continue;
        double wz = 0;
        for (size_t q = pb->first[i]; q < pb->first[i + 1]; q++)
            wz += wk->w[q - pb->first[i]] * pb->zl[pb->partner[q]];
        double J[3] = {-h, -h * pb->zl[pb->who[i]], -h * wz};
        for (int u = 0; u < 3; u++) {
            gr[u] += J[u] * r;
            for (int v = 0; v < 3; v++)
                H[u * 3 + v] += J[u] * J[v];
        }
    }
    obj += pb->lambda * (theta[1] * theta[1] + theta[2] * theta[2]);
    if (H) {
        for (int u = 1; u < 3; u++) {
            gr[u] += pb->lambda * theta[u];
            H[u * 3 + u] += pb->lambda;
        }
        for (int u = 1; u < 3; u++)
            if (pb->fixed & (1u << u)) {
                for (int v = 0; v < 3; v++)
                    H[u * 3 + v] = H[v * 3 + u] = 0;
                H[u * 3 + u] = 1;
                gr[u] = 0;
            }
    }
    return obj;
}

/* Stage 2: objective of the offsets d (3n) with the slopes pb->st fixed. */
static double stage2(const problem *pb, const double *d, double *H, double *gr, const lm_work *wk)
{
    int n = pb->n, dim = 3 * n;
    double theta1[3] = {pb->st.s0, pb->st.s1, pb->st.p1};
    local_latents(pb, theta1, d, wk->a, wk->s, wk->p);
    if (H) {
        memset(H, 0, (size_t)dim * dim * sizeof *H);
        memset(gr, 0, (size_t)dim * sizeof *gr);
    }
    double obj = 0;
    int col[KACE_MAX_K + 1];
    double J[KACE_MAX_K + 1];
    for (size_t i = 0; i < pb->m; i++) {
        double h;
        double r = member(pb, i, wk->a, wk->s, wk->p, &h, wk->w) - pb->y[i];
        obj += r * r;
        if (!H)
            continue;
        int c = 0;
        col[c] = pb->who[i];
        J[c++] = 1;
        col[c] = n + pb->who[i];
        J[c++] = -h;
        for (size_t q = pb->first[i]; q < pb->first[i + 1]; q++) {
            col[c] = 2 * n + pb->partner[q];
            J[c++] = -h * wk->w[q - pb->first[i]];
        }
        for (int u = 0; u < c; u++) {
            gr[col[u]] += J[u] * r;
            for (int v = 0; v < c; v++)
                H[(size_t)col[u] * dim + col[v]] += J[u] * J[v];
        }
    }
    for (int t = 0; t < 3; t++) {
        const double *dt = d + (size_t)t * n;
        for (int u = 0; u < n; u++) {
            double kd = 0;
            for (int v = 0; v < n; v++)
                kd += pb->kinv[(size_t)u * n + v] * dt[v];
            obj += pb->mu * dt[u] * kd;
            if (H) {
                gr[t * n + u] += pb->mu * kd;
                for (int v = 0; v < n; v++)
                    H[(size_t)(t * n + u) * dim + t * n + v] += pb->mu * pb->kinv[(size_t)u * n + v];
            }
        }
    }
    return obj;
}

typedef double (*objective_fn)(const problem *pb, const double *theta, double *H, double *gr, const lm_work *wk);

/* Levenberg-Marquardt from theta (dim unknowns), in place. */
static kace_status levenberg(kace_ctx *ctx, const problem *pb, objective_fn f, int dim, double *theta,
                             const lm_work *wk)
{
    size_t dd = (size_t)dim * dim;
    double *H = malloc(dd * sizeof *H), *A = malloc(dd * sizeof *A), *gr = malloc((size_t)dim * sizeof *gr),
           *step = malloc((size_t)dim * sizeof *step), *next = malloc((size_t)dim * sizeof *next);
    if (!H || !A || !gr || !step || !next) {
        free(H), free(A), free(gr), free(step), free(next);
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    }
    double damp = 1e-3;
    double obj = f(pb, theta, H, gr, wk);
    for (int it = 0; it < 100; it++) {
        bool moved = false;
        for (int tries = 0; tries < 12 && !moved; tries++) {
            memcpy(A, H, dd * sizeof *A);
            for (int u = 0; u < dim; u++)
                A[(size_t)u * dim + u] += damp * (H[(size_t)u * dim + u] + 1e-9);
            for (int u = 0; u < dim; u++)
                step[u] = -gr[u];
            if (!cholesky(A, dim)) {
                damp *= 10;
                continue;
            }
            chol_solve(A, dim, step);
            for (int u = 0; u < dim; u++)
                next[u] = theta[u] + step[u];
            double o = f(pb, next, NULL, NULL, wk);
            if (o < obj) {
                double gain = obj - o;
                memcpy(theta, next, (size_t)dim * sizeof *theta);
                obj = f(pb, theta, H, gr, wk);
                damp = fmax(damp / 3, 1e-9);
                moved = true;
                if (gain < 1e-10 * (1 + obj))
                    it = 1000; /* converged */
            } else {
                damp *= 4;
            }
        }
        if (!moved)
            break;
    }
    free(H), free(A), free(gr), free(step), free(next);
    return KACE_OK;
}

static kace_status lm_work_new(kace_ctx *ctx, const problem *pb, lm_work *wk)
{
    size_t n = (size_t)(pb->n ? pb->n : 1);
    wk->a = malloc(n * sizeof *wk->a);
    wk->s = malloc(n * sizeof *wk->s);
    wk->p = malloc(n * sizeof *wk->p);
    wk->w = malloc(KACE_MAX_K * sizeof *wk->w);
    if (!wk->a || !wk->s || !wk->p || !wk->w)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    return KACE_OK;
}

static void lm_work_free(lm_work *wk)
{
    free(wk->a), free(wk->s), free(wk->p), free(wk->w);
}

/* The samples, scaling and prior of colocations rows[0..n). */
static kace_status problem_of(kace_ctx *ctx, const kace_dataset *ds, const int *rows, size_t n,
                              const kace_pressure_params *prm, problem *pb)
{
    memset(pb, 0, sizeof *pb);
    pb->st.params = *prm;
    pb->lambda = prm->lambda;
    int *local = malloc((ds->n_workloads ? ds->n_workloads : 1) * sizeof *local);
    pb->ds_of = malloc((ds->n_workloads ? ds->n_workloads : 1) * sizeof *pb->ds_of);
    kace_status st = KACE_OK;
    if (!local || !pb->ds_of) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (size_t w = 0; w < ds->n_workloads; w++)
        local[w] = -1;
    for (size_t r = 0; r < n; r++) {
        const kace_colocation *c = &ds->colocations[rows[r]];
        if (c->k < 2 || c->k > KACE_MAX_K) {
            st = kace_fail(ctx, KACE_ERR_INVALID, "colocation %d has %d workloads (the pressure model fits 2..%d)",
                           rows[r], c->k, KACE_MAX_K);
            goto done;
        }
        if (!isfinite(kace_colocation_sum(c))) {
            st = kace_fail(ctx, KACE_ERR_INVALID, "colocation %d has no finite throughput", rows[r]);
            goto done;
        }
        for (int i = 0; i < c->k; i++) {
            int w = c->workload[i];
            if ((st = check_workload(ctx, prm->metrics, &ds->workloads[w])))
                goto done;
            if (local[w] < 0) {
                local[w] = pb->n;
                pb->ds_of[pb->n++] = w;
            }
            pb->m++;
        }
    }
    if (pb->n > MAX_WORKLOADS) {
        st = kace_fail(ctx, KACE_ERR_MODEL, "the pressure model fits at most %d workloads (got %d)", MAX_WORKLOADS,
                       pb->n);
        goto done;
    }
    size_t m = pb->m ? pb->m : 1, nw = (size_t)(pb->n ? pb->n : 1);
    pb->who = malloc(m * sizeof *pb->who);
    pb->y = malloc(m * sizeof *pb->y);
    pb->frac = malloc(m * sizeof *pb->frac);
    pb->first = malloc((m + 1) * sizeof *pb->first);
    pb->partner = malloc(m * (KACE_MAX_K - 1) * sizeof *pb->partner);
    pb->zl = malloc(nw * sizeof *pb->zl);
    pb->g = malloc(nw * NG * sizeof *pb->g);
    pb->kinv = malloc(nw * nw * sizeof *pb->kinv);
    double *raw = malloc(nw * NF * sizeof *raw);
    if (!pb->who || !pb->y || !pb->frac || !pb->first || !pb->partner || !pb->zl || !pb->g || !pb->kinv || !raw) {
        free(raw);
        st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (int v = 0; v < pb->n; v++)
        raw_features(prm->metrics, &ds->workloads[pb->ds_of[v]], raw + (size_t)v * NF);
    /* Samples, and the feature statistics over them (each member of each
     * colocation counts once). */
    double sum[NF] = {0}, ss[NF] = {0};
    size_t at = 0, q = 0;
    for (size_t r = 0; r < n; r++) {
        const kace_colocation *c = &ds->colocations[rows[r]];
        for (int i = 0; i < c->k; i++) {
            int v = local[c->workload[i]];
            double f = c->throughput[i] / ds->workloads[c->workload[i]].metric[KACE_M_EXCLUSIVE];
            f = fmin(fmax(f, FRACTION_MIN), FRACTION_MAX);
            pb->who[at] = v;
            pb->frac[at] = f;
            pb->y[at] = log(f);
            pb->first[at] = q;
            for (int j = 0; j < c->k; j++)
                if (j != i)
                    pb->partner[q++] = local[c->workload[j]];
            for (int j = 0; j < NF; j++) {
                sum[j] += raw[(size_t)v * NF + j];
                ss[j] += raw[(size_t)v * NF + j] * raw[(size_t)v * NF + j];
            }
            at++;
        }
    }
    pb->first[at] = q;
    for (int j = 0; j < NF; j++) {
        double mean = sum[j] / (double)pb->m;
        double var = pb->m > 1 ? (ss[j] - sum[j] * mean) / (double)(pb->m - 1) : 0;
        pb->st.mean[j] = mean;
        pb->st.std[j] = var > 1e-24 ? sqrt(var) : 1;
    }
    for (int v = 0; v < pb->n; v++) {
        pb->zl[v] = zscore(&pb->st, 0, raw[(size_t)v * NF]);
        mix_features(&pb->st, raw + (size_t)v * NF, pb->g + (size_t)v * NG);
    }
    free(raw);
    /* K^-1 (columns solved one by one: n is small). */
    size_t nn = (size_t)pb->n * (size_t)pb->n;
    double *L = malloc((nn ? nn : 1) * sizeof *L);
    if (!L) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (int u = 0; u < pb->n; u++)
        for (int v = 0; v < pb->n; v++)
            L[(size_t)u * pb->n + v] = kernel(&pb->st, pb->g + (size_t)u * NG, pb->g + (size_t)v * NG) +
                                       (u == v ? prm->tau + 1e-6 : 0);
    if (!cholesky(L, pb->n)) {
        free(L);
        st = kace_fail(ctx, KACE_ERR_MODEL, "pressure model: the offsets' prior is not positive definite");
        goto done;
    }
    double *col = malloc(nw * sizeof *col);
    if (!col) {
        free(L);
        st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (int v = 0; v < pb->n; v++) {
        for (int u = 0; u < pb->n; u++)
            col[u] = u == v;
        chol_solve(L, pb->n, col);
        for (int u = 0; u < pb->n; u++)
            pb->kinv[(size_t)u * pb->n + v] = col[u];
    }
    free(col);
    free(L);
done:
    free(local);
    if (st)
        problem_free(pb);
    return st;
}

/* Stage 1: the slopes, sign-constrained (s1 <= 0, p1 >= 0). */
static kace_status fit_slopes(kace_ctx *ctx, problem *pb, const lm_work *wk)
{
    double theta[3];
    kace_status st = KACE_OK;
    for (pb->fixed = 0;;) {
        theta[0] = 0;
        theta[1] = pb->fixed & 2u ? 0 : -0.02;
        theta[2] = pb->fixed & 4u ? 0 : 0.02;
        if ((st = levenberg(ctx, pb, stage1, 3, theta, wk)))
            return st;
        unsigned more = pb->fixed | (theta[1] > 0 ? 2u : 0) | (theta[2] < 0 ? 4u : 0);
        if (more == pb->fixed)
            break;
        pb->fixed = more;
    }
    pb->st.s0 = theta[0];
    pb->st.s1 = pb->fixed & 2u ? 0 : theta[1];
    pb->st.p1 = pb->fixed & 4u ? 0 : theta[2];
    return KACE_OK;
}

/* Stage 2: the offsets d (3n, warm start in, solution out) at penalty mu. */
static kace_status fit_offsets(kace_ctx *ctx, problem *pb, double mu, double *d, const lm_work *wk)
{
    pb->mu = mu;
    return levenberg(ctx, pb, stage2, 3 * pb->n, d, wk);
}

/* A state (owned by the caller) from a solved problem and its offsets. */
static kace_status state_of(kace_ctx *ctx, const problem *pb, const kace_dataset *ds, const double *d,
                            pr_state **out)
{
    *out = NULL;
    pr_state *st = calloc(1, sizeof *st);
    if (!st)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    *st = pb->st;
    st->params.mu = pb->mu;
    st->w = calloc((size_t)(pb->n ? pb->n : 1), sizeof *st->w);
    st->slot = NULL;
    if (!st->w) {
        free(st);
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    }
    st->n = pb->n;
    for (int v = 0; v < pb->n; v++) {
        pr_workload *w = &st->w[v];
        snprintf(w->name, sizeof w->name, "%s", ds->workloads[pb->ds_of[v]].name);
        double x[NF];
        raw_features(pb->st.params.metrics, &ds->workloads[pb->ds_of[v]], x);
        w->lw = x[0];
        memcpy(w->g, pb->g + (size_t)v * NG, sizeof w->g);
        for (int t = 0; t < 3; t++) {
            w->off[t] = d[(size_t)t * pb->n + v];
            double s = 0;
            for (int u = 0; u < pb->n; u++)
                s += pb->kinv[(size_t)v * pb->n + u] * d[(size_t)t * pb->n + u];
            w->alpha[t] = s;
        }
    }
    kace_status rc = index_names(ctx, st);
    if (rc) {
        state_free(st);
        return rc;
    }
    derive(st);
    *out = st;
    return KACE_OK;
}

/* Sum of |predicted - measured| member fractions over rows[0..n). */
static double held_out_error(const pr_state *st, const kace_dataset *ds, const int *rows, size_t n)
{
    double err = 0, lat[KACE_MAX_K][3], f[KACE_MAX_K];
    for (size_t r = 0; r < n; r++) {
        const kace_colocation *c = &ds->colocations[rows[r]];
        for (int i = 0; i < c->k; i++)
            latents(st, &ds->workloads[c->workload[i]], lat[i]);
        fractions((const double(*)[3])lat, c->k, f);
        for (int i = 0; i < c->k; i++) {
            double meas = c->throughput[i] / ds->workloads[c->workload[i]].metric[KACE_M_EXCLUSIVE];
            err += fabs(f[i] - fmin(fmax(meas, FRACTION_MIN), FRACTION_MAX));
        }
    }
    return err;
}

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* mu by cross-validation over rows[0..n) only. */
static kace_status choose_mu(kace_ctx *ctx, const kace_dataset *ds, const int *rows, size_t n,
                             const kace_pressure_params *prm, double *mu)
{
    int folds = prm->folds;
    *mu = 1;
    if (folds < 2 || n < (size_t)(2 * folds))
        return KACE_OK;
    int *order = malloc(n * sizeof *order), *train = malloc(n * sizeof *train), *test = malloc(n * sizeof *test);
    kace_status st = KACE_OK;
    if (!order || !train || !test) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < n; i++)
        order[i] = rows[i];
    uint64_t s = prm->seed ^ 0x5052455353ull;
    for (size_t i = n - 1; i > 0; i--) {
        size_t j = (size_t)(splitmix(&s) % (i + 1));
        int t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    double err[N_MU] = {0};
    for (int f = 0; f < folds && !st; f++) {
        size_t nt = 0, ne = 0;
        for (size_t i = 0; i < n; i++) {
            if ((int)(i % (size_t)folds) == f)
                test[ne++] = order[i];
            else
                train[nt++] = order[i];
        }
        problem pb;
        if ((st = problem_of(ctx, ds, train, nt, prm, &pb)))
            break;
        lm_work wk = {0};
        double *d = calloc((size_t)3 * (size_t)(pb.n ? pb.n : 1), sizeof *d);
        if (!d)
            st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
        if (!st)
            st = lm_work_new(ctx, &pb, &wk);
        if (!st)
            st = fit_slopes(ctx, &pb, &wk);
        for (int k = 0; k < N_MU && !st; k++) {
            pr_state *fold_state = NULL;
            if (!(st = fit_offsets(ctx, &pb, mu_path[k], d, &wk)) &&
                !(st = state_of(ctx, &pb, ds, d, &fold_state)))
                err[k] += held_out_error(fold_state, ds, test, ne);
            state_free(fold_state);
        }
        free(d);
        lm_work_free(&wk);
        problem_free(&pb);
    }
    if (!st) {
        int best = 0;
        for (int k = 1; k < N_MU; k++)
            if (err[k] < err[best])
                best = k;
        *mu = mu_path[best];
    }
done:
    free(order);
    free(train);
    free(test);
    return st;
}

/* One fit of the latents under prior prm. */
static kace_status fit_part(kace_ctx *ctx, const kace_dataset *ds, const int *rows, size_t n,
                            const kace_pressure_params *params, pr_state **out)
{
    *out = NULL;
    kace_pressure_params prm = *params;
    problem pb;
    kace_status st = problem_of(ctx, ds, rows, n, &prm, &pb); /* validates every row first */
    if (st)
        return st;
    double mu = prm.mu;
    lm_work wk = {0};
    double *d = NULL;
    if (mu == 0 && (st = choose_mu(ctx, ds, rows, n, &prm, &mu)))
        goto done;
    d = calloc((size_t)3 * (size_t)(pb.n ? pb.n : 1), sizeof *d);
    if (!d) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
        goto done;
    }
    if ((st = lm_work_new(ctx, &pb, &wk)) || (st = fit_slopes(ctx, &pb, &wk)))
        goto done;
    /* Along the same path as the cross-validation, for the same optimum. */
    for (int k = 0; k < N_MU && !st && mu_path[k] >= mu; k++)
        st = fit_offsets(ctx, &pb, mu_path[k], d, &wk);
    if (!st && pb.mu != mu)
        st = fit_offsets(ctx, &pb, mu, d, &wk);
    if (!st)
        st = state_of(ctx, &pb, ds, d, out);
done:
    free(d);
    lm_work_free(&wk);
    problem_free(&pb);
    return st;
}

static void model_state_free(pr_model *pm)
{
    if (!pm)
        return;
    for (int i = 0; i < pm->n_parts; i++)
        state_free(pm->part[i]);
    free(pm);
}

kace_status kace_pressure_fit(kace_ctx *ctx, const kace_dataset *ds, const int *rows, size_t n,
                              const kace_pressure_params *params, kace_model **out)
{
    *out = NULL;
    kace_pressure_params prm;
    if (params)
        prm = *params;
    else
        kace_pressure_params_default(&prm);
    if (!(prm.lambda >= 0) || !(prm.mu >= 0) || !(prm.tau >= 0) || !(prm.length > 0) || prm.folds < 0 ||
        prm.folds > 20 || (int)prm.metrics < 0 || prm.metrics >= KACE_N_METRIC_SETS)
        return kace_fail(ctx, KACE_ERR_INVALID, "pressure model: parameters out of range");
    if (n < 2)
        return kace_fail(ctx, KACE_ERR_MODEL, "cannot fit a model on %zu colocation(s) (need at least 2)", n);
    kace_status st = KACE_OK;
    kace_model *m = NULL;
    pr_model *state = calloc(1, sizeof *state);
    if (!state)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    state->n_parts = prm.blend ? 2 : 1;
    for (int i = 0; i < state->n_parts && !st; i++) {
        kace_pressure_params part = prm;
        part.independent = prm.independent || i == 1;
        st = fit_part(ctx, ds, rows, n, &part, &state->part[i]);
    }
    if (st)
        goto done;
    m = calloc(1, sizeof *m);
    if (!m) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
        goto done;
    }
    kace_model_set_kind(m, KACE_MODEL_PRESSURE);
    m->metrics = prm.metrics;
    m->features = kace_feature_set_restrict(&kace_features_kace, prm.metrics);
    m->n_features = m->features->n;
    m->n_fit = n;
    kace_model_set_label_stats(m, ds, rows, n);
    m->state = state;
    state = NULL;
    *out = m;
    m = NULL;
done:
    model_state_free(state);
    kace_model_free(&m);
    return st;
}

/* ---- prediction ---------------------------------------------------------- */

/* exp(a), exp(s), exp(p) of a workload under each part of the model: the
 * parts list the same workloads in the same order (one lookup), and a
 * training workload with the metrics it was fitted with has them ready. */
static void member_exps(const pr_model *pm, const kace_workload *w, double (*e)[3])
{
    double lw = size_feature(pm->part[0]->params.metrics, w);
    int known = find_name(pm->part[0], w->name);
    for (int q = 0; q < pm->n_parts; q++) {
        const pr_state *st = pm->part[q];
        if (known >= 0 && st->w[known].lw == lw) {
            memcpy(e[q], st->w[known].e, sizeof e[q]);
            continue;
        }
        double lat[3];
        latents(st, w, lat);
        for (int t = 0; t < 3; t++)
            e[q][t] = exp(lat[t]);
    }
}

/* Each member's fraction: the mean over the model's parts. */
static void predict_fractions(const pr_model *pm, const kace_workload *const *w, int k, double *f)
{
    double e[KACE_MAX_K][2][3];
    for (int i = 0; i < k; i++)
        member_exps(pm, w[i], e[i]);
    for (int i = 0; i < k; i++)
        f[i] = k == 1 ? 1 : 0;
    for (int q = 0; q < pm->n_parts && k > 1; q++) {
        double total = 0;
        for (int j = 0; j < k; j++)
            total += e[j][q][2];
        for (int i = 0; i < k; i++)
            f[i] += e[i][q][0] / (1 + e[i][q][1] * fmax(total - e[i][q][2], 0)) / pm->n_parts;
    }
}

kace_status kace_pressure_latents(kace_ctx *ctx, const kace_model *m, int part, const kace_workload *w, double *lat)
{
    const pr_model *pm = m->state;
    if (part < 0 || part >= pm->n_parts)
        return kace_fail(ctx, KACE_ERR_INVALID, "the pressure model has %d part(s), not %d", pm->n_parts, part + 1);
    kace_status st = check_workload(ctx, pm->part[0]->params.metrics, w);
    if (!st)
        latents(pm->part[part], w, lat);
    return st;
}

void kace_pressure_describe(const kace_model *m, kace_pressure_info *info)
{
    const pr_model *pm = m->state;
    info->n_parts = pm->n_parts;
    for (int q = 0; q < pm->n_parts; q++) {
        const pr_state *st = pm->part[q];
        info->s1[q] = st->s1;
        info->p1[q] = st->p1;
        info->mu[q] = st->params.mu;
        info->n_workloads = st->n;
    }
}

static kace_status predict_op(kace_ctx *ctx, const kace_predictor *p, const kace_dataset *ds, const int *group, int k,
                              double *sum, double *confidence, double *member_out)
{
    (void)confidence;
    const kace_model *m = p->self;
    const kace_workload *w[KACE_MAX_K];
    double f[KACE_MAX_K];
    for (int i = 0; i < k; i++) {
        if (group[i] < 0 || (size_t)group[i] >= ds->n_workloads)
            return kace_fail(ctx, KACE_ERR_INVALID, "workload index %d out of range", group[i]);
        w[i] = &ds->workloads[group[i]];
        kace_status st = check_workload(ctx, ((const pr_model *)m->state)->part[0]->params.metrics, w[i]);
        if (st)
            return st;
    }
    predict_fractions(m->state, w, k, f);
    double total = 0;
    for (int i = 0; i < k; i++) {
        double t = f[i] * w[i]->metric[KACE_M_EXCLUSIVE];
        if (member_out)
            member_out[i] = t;
        total += t;
    }
    *sum = total;
    return KACE_OK;
}

/* The group search's view of a member (model/bounds.h): its prediction as
 * a function of its partners' summed weights, one sum per part. */
static kace_status pressure_member_op(kace_ctx *ctx, const kace_predictor *p, const kace_workload *w,
                                      kace_pressure_member *out)
{
    const kace_model *m = p->self;
    const pr_model *pm = m->state;
    kace_status st = check_workload(ctx, pm->part[0]->params.metrics, w);
    if (st)
        return st;
    double e[2][3];
    member_exps(pm, w, e);
    out->n_parts = pm->n_parts;
    for (int q = 0; q < pm->n_parts; q++) {
        out->gain[q] = w->metric[KACE_M_EXCLUSIVE] * e[q][0] / pm->n_parts;
        out->sens[q] = e[q][1];
        out->weight[q] = e[q][2];
    }
    return KACE_OK;
}

static const kace_bound_ops bounds = {.pressure_member = pressure_member_op};

static kace_status fit_rows(kace_ctx *ctx, const kace_dataset *ds, const int *rows, size_t n,
                            const kace_fit_spec *spec, kace_model **out)
{
    kace_pressure_params prm;
    kace_pressure_params_default(&prm);
    prm.seed = spec->slowdown.seed;
    prm.metrics = spec->slowdown.metrics;
    if (rows)
        return kace_pressure_fit(ctx, ds, rows, n, &prm, out);
    int *all = malloc((ds->n_colocations ? ds->n_colocations : 1) * sizeof *all);
    if (!all)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < ds->n_colocations; i++)
        all[i] = (int)i;
    kace_status st = kace_pressure_fit(ctx, ds, all, ds->n_colocations, &prm, out);
    free(all);
    return st;
}

static const kace_feature_set *features_op(const kace_predictor *p)
{
    const kace_model *m = p->self;
    return m->features;
}

/* ---- the model file ----------------------------------------------------------
 *   pressure_parts <1 or 2>
 * then for each part:
 *   pressure <workloads> <s0> <s1> <p1> <lambda> <mu> <tau> <length> <independent 0|1> <prior reads lw 0|1>
 *   pscale <mean> <std>                       (6 lines: lw, ld, lm, smt, dram, memt)
 *   pworkload <lw> <a> <s> <p> <alpha a> <alpha s> <alpha p> <g x 6>\t<name>
 */

static kace_status write_op(kace_ctx *ctx, const kace_model *m, text_buf *t)
{
    const pr_model *pm = m->state;
    tb_printf(t, "pressure_parts %d\n", pm->n_parts);
    for (int q = 0; q < pm->n_parts; q++) {
        const pr_state *st = pm->part[q];
        tb_printf(t, "pressure %d %.17g %.17g %.17g %.17g %.17g %.17g %.17g %d %d\n", st->n, st->s0, st->s1, st->p1,
                  st->params.lambda, st->params.mu, st->params.tau, st->params.length, st->params.independent,
                  st->params.prior_lw);
        for (int j = 0; j < NF; j++)
            tb_printf(t, "pscale %.17g %.17g\n", st->mean[j], st->std[j]);
        for (int v = 0; v < st->n; v++) {
            const pr_workload *w = &st->w[v];
            if (strpbrk(w->name, "\t\n\r"))
                return kace_fail(ctx, KACE_ERR_INVALID, "workload name '%s' has a tab or newline", w->name);
            tb_printf(t, "pworkload %.17g", w->lw);
            for (int i = 0; i < 3; i++)
                tb_printf(t, " %.17g", w->off[i]);
            for (int i = 0; i < 3; i++)
                tb_printf(t, " %.17g", w->alpha[i]);
            for (int i = 0; i < NG; i++)
                tb_printf(t, " %.17g", w->g[i]);
            tb_printf(t, "\t%s\n", w->name);
        }
    }
    return KACE_OK;
}

/* One line of the text at *p into buf (NUL-terminated); false at the end. */
static bool take_line(const char **p, const char *end, int *line, char *buf, size_t size)
{
    if (*p >= end)
        return false;
    const char *nl = memchr(*p, '\n', (size_t)(end - *p));
    size_t n = nl ? (size_t)(nl - *p) : (size_t)(end - *p);
    size_t c = n < size - 1 ? n : size - 1;
    memcpy(buf, *p, c);
    buf[c] = '\0';
    if (memchr(buf, '\0', c) || n >= size)
        buf[0] = '\0'; /* a NUL byte or an over-long line fails its keyword check */
    *p = nl ? nl + 1 : end;
    (*line)++;
    return true;
}

static bool numbers(const char **s, double *v, int n)
{
    for (int i = 0; i < n; i++) {
        char *e;
        v[i] = strtod(*s, &e);
        if (e == *s || !isfinite(v[i]))
            return false;
        *s = e;
    }
    return true;
}

static bool rest_blank(const char *s)
{
    return strspn(s, " \r") == strlen(s);
}

typedef struct reader {
    const char **p, *end, *origin;
    int *line;
    char buf[1024];
    const char *expected;
} reader;

static kace_status read_error(kace_ctx *ctx, reader *r)
{
    r->buf[60] = '\0';
    return kace_fail(ctx, KACE_ERR_PARSE, "%s:%d:1: model file: expected %s, got '%s'", r->origin, *r->line,
                     r->expected, r->buf);
}

static kace_status read_part(kace_ctx *ctx, reader *r, long max_workloads, pr_state **out)
{
    *out = NULL;
    pr_state *st = calloc(1, sizeof *st);
    if (!st)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    const char *s;
    char *e;
    double v[NG + 7];
    r->expected = "'pressure <workloads> <s0> <s1 <= 0> <p1 >= 0> <lambda> <mu> <tau> <length> <0|1> <0|1>'";
    if (!take_line(r->p, r->end, r->line, r->buf, sizeof r->buf) || strncmp(r->buf, "pressure ", 9) != 0)
        goto bad;
    s = r->buf + 9;
    long nw = strtol(s, &e, 10);
    if (e == s || nw < 0 || nw > max_workloads)
        goto bad;
    s = e;
    if (!numbers(&s, v, 9) || !rest_blank(s) || v[1] > 0 || v[2] < 0 || v[3] < 0 || v[4] < 0 || v[5] < 0 ||
        !(v[6] > 0) || (v[7] != 0 && v[7] != 1) || (v[8] != 0 && v[8] != 1))
        goto bad;
    st->n = (int)nw;
    st->s0 = v[0], st->s1 = v[1], st->p1 = v[2];
    st->params.lambda = v[3], st->params.mu = v[4], st->params.tau = v[5], st->params.length = v[6];
    st->params.independent = v[7] == 1;
    st->params.prior_lw = v[8] == 1;
    for (int j = 0; j < NF; j++) {
        r->expected = "'pscale <mean> <std > 0>'";
        if (!take_line(r->p, r->end, r->line, r->buf, sizeof r->buf) || strncmp(r->buf, "pscale ", 7) != 0)
            goto bad;
        s = r->buf + 7;
        if (!numbers(&s, v, 2) || !rest_blank(s) || !(v[1] > 0))
            goto bad;
        st->mean[j] = v[0];
        st->std[j] = v[1];
    }
    st->w = calloc((size_t)(nw ? nw : 1), sizeof *st->w);
    if (!st->w) {
        state_free(st);
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    }
    for (long i = 0; i < nw; i++) {
        r->expected = "'pworkload <13 numbers>\\t<workload name>'";
        if (!take_line(r->p, r->end, r->line, r->buf, sizeof r->buf) || strncmp(r->buf, "pworkload ", 10) != 0)
            goto bad;
        char *tab = strchr(r->buf, '\t');
        if (!tab)
            goto bad;
        *tab = '\0';
        char *name = tab + 1;
        name[strcspn(name, "\r")] = '\0';
        s = r->buf + 10;
        if (!*name || strlen(name) >= KACE_NAME_MAX || !numbers(&s, v, NG + 7) || !rest_blank(s)) {
            *tab = '\t';
            goto bad;
        }
        pr_workload *w = &st->w[i];
        snprintf(w->name, sizeof w->name, "%s", name);
        w->lw = v[0];
        for (int q = 0; q < 3; q++) {
            w->off[q] = v[1 + q];
            w->alpha[q] = v[4 + q];
        }
        memcpy(w->g, v + 7, sizeof w->g);
    }
    kace_status rc = index_names(ctx, st);
    if (rc) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", kace_errmsg(ctx));
        state_free(st);
        return kace_fail(ctx, KACE_ERR_PARSE, "%s:%d:1: model file: %s", r->origin, *r->line, msg);
    }
    derive(st);
    *out = st;
    return KACE_OK;
bad:
    state_free(st);
    return read_error(ctx, r);
}

static kace_status read_op(kace_ctx *ctx, kace_model *m, const char **p, const char *end, int *line,
                           const char *origin)
{
    reader r = {.p = p, .end = end, .origin = origin, .line = line, .buf = "", .expected = "'pressure_parts <1 or 2>'"};
    pr_model *pm = calloc(1, sizeof *pm);
    if (!pm)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    kace_status st = KACE_OK;
    if (!take_line(p, end, line, r.buf, sizeof r.buf) || strncmp(r.buf, "pressure_parts ", 15) != 0 ||
        (strcmp(r.buf + 15, "1") != 0 && strcmp(r.buf + 15, "2") != 0)) {
        st = read_error(ctx, &r);
    } else {
        int parts = r.buf[15] - '0';
        /* Each workload takes a line: the count cannot exceed what is left. */
        long max_workloads = (long)(end - *p) / 20;
        for (int q = 0; q < parts && !st; q++, pm->n_parts++)
            st = read_part(ctx, &r, max_workloads, &pm->part[q]);
        if (st)
            pm->n_parts--;
        bool same = true;
        for (int v = 0; !st && parts == 2 && v < pm->part[0]->n; v++)
            same &= pm->part[0]->n == pm->part[1]->n && strcmp(pm->part[0]->w[v].name, pm->part[1]->w[v].name) == 0;
        if (!st && (!same || (parts == 2 && pm->part[0]->n != pm->part[1]->n)))
            st = kace_fail(ctx, KACE_ERR_PARSE, "%s:%d:1: model file: the two parts must list the same workloads in "
                           "the same order", origin, *line);
    }
    if (st) {
        model_state_free(pm);
        return st;
    }
    for (int q = 0; q < pm->n_parts; q++) /* the common header's metric set */
        pm->part[q]->params.metrics = m->metrics;
    m->state = pm;
    return KACE_OK;
}

static void release_op(kace_model *m)
{
    model_state_free(m->state);
    m->state = NULL;
}

static const kace_model_ops model_ops = {
    .release = release_op,
    .write = write_op,
    .read = read_op,
};

const kace_predictor_ops kace_pressure_ops = {
    .name = "pressure",
    .policy = "kace",
    .caps = KACE_PRED_MEMBERS | KACE_PRED_BOUNDS,
    .max_k = KACE_MAX_K,
    .predict = predict_op,
    .features = features_op,
    .fit = fit_rows,
    .model = &model_ops,
    .bounds = &bounds,
};
