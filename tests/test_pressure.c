/* The pressure model (lib/model/pressure.c): it recovers a known
 * sensitivity x pressure law, a member only loses as its partners' pressure
 * grows, one fit predicts any k, the group search's bound is never below
 * the prediction and the search finds what enumeration finds, the model
 * file round-trips, and no row outside the fitting rows reaches a fit.
 *
 * `test_pressure figures [SEEDS]` instead prints its scores on the V100
 * data, clean mode, beside the slowdown model's (kace's default) and the
 * goals, each the mean over kace seeds 0..SEEDS-1 (default 4), through the
 * library's evaluation protocols (the folds of kace eval): the published
 * splits at n_occur 2 and 3, per-member error at n_occur 3, unseen
 * families, triples, leave one batch size out, and a pairs-only model
 * choosing among the triples (docs/pressure-model.md). `figures SEEDS SET`
 * has both models read only the metrics of SET (no-counters, system);
 * `figures SEEDS SET KIND...` scores those kinds instead (e.g. stacked
 * pressure slowdown), the first against the goals and the last.
 * `test_pressure search` prints what the group search's bounds save. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kace/eval.h"
#include "kace/group.h"
#include "kace/predictor.h"
#include "kace/protocol.h"
#include "kace/store.h"
#include "model/bounds.h"
#include "model/pressure.h"
#include "testutil.h"

static kace_ctx *ctx;
static kace_store *store;
static kace_dataset *pairs;
static int used[64], n_used; /* the workloads of the pairs' colocations */

static int setup(void **state)
{
    (void)state;
    ctx = kace_ctx_new();
    char db[4096];
    snprintf(db, sizeof db, "%s/kace.db", scratch_dir("pressure"));
    if (kace_store_open(ctx, db, &store))
        return -1;
    static const char *const files[] = {"profiles/system.csv", "colocations/pairs.csv"};
    if (import_reference(ctx, store, files, 2))
        return -1;
    if (kace_store_load_dataset(ctx, store, "pairs", false, &pairs))
        return -1;
    for (size_t w = 0; w < pairs->n_workloads && n_used < 64; w++)
        for (size_t i = 0; i < pairs->n_colocations; i++)
            if (kace_colocation_has(&pairs->colocations[i], (int)w)) {
                used[n_used++] = (int)w;
                break;
            }
    return n_used >= 20 ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    kace_dataset_free(&pairs);
    kace_store_close(&store);
    kace_ctx_free(&ctx);
    return 0;
}

static kace_model *fit(const kace_dataset *ds, const int *rows, size_t n)
{
    kace_fit_spec spec = {.kind = KACE_MODEL_PRESSURE};
    kace_model *m = NULL;
    assert_kace_ok(ctx, kace_model_fit_rows(ctx, ds, rows, n, &spec, &m));
    assert_non_null(m);
    return m;
}

static double predict(const kace_model *m, const kace_dataset *ds, const int *group, int k, double *member)
{
    double sum;
    assert_kace_ok(ctx, kace_predict_group(ctx, kace_model_predictor(m), ds, group, k, &sum, NULL, member));
    return sum;
}

/* ---- a synthetic set from a known law ------------------------------------ */

#define N_SYN 14

/* Workload w of the synthetic set: log threads spread over 3 e-folds, the
 * kernel mix varied independently of it. */
static void syn_metrics(int w, double *metric)
{
    double lw = 12 + 3.0 * w / (N_SYN - 1);
    metric[KACE_M_THREADS] = exp(lw);
    metric[KACE_M_SM_PCT] = 30 + 5 * (w % 5);
    metric[KACE_M_MEM_PCT] = 10 + 4 * (w % 3);
    metric[KACE_M_SM_THROUGHPUT] = 20 + 6 * (w % 4);
    metric[KACE_M_DRAM_THROUGHPUT] = 15 + 5 * (w % 6);
    metric[KACE_M_MEM_THROUGHPUT] = 25 + 3 * (w % 7);
    metric[KACE_M_REGISTERS] = 32 * metric[KACE_M_THREADS];
    metric[KACE_M_STATIC_SHMEM] = 0;
    metric[KACE_M_MEMCAP] = 2 + w % 3;
    metric[KACE_M_EXCLUSIVE] = 100 + 37 * w;
}

/* The law: s = 0.3 - 0.8 (lw - 13.5), p = 0.6 (lw - 13.5), a = 0. */
static void syn_law(const double *metric, double *s, double *p)
{
    double lw = log(metric[KACE_M_THREADS]) - 13.5;
    *s = 0.3 - 0.8 * lw;
    *p = 0.6 * lw;
}

static void syn_group(kace_dataset *ds, const int *w, int k, kace_colocation *c)
{
    memset(c, 0, sizeof *c);
    c->k = k;
    double s[KACE_MAX_K], p[KACE_MAX_K];
    for (int i = 0; i < k; i++) {
        c->workload[i] = w[i];
        c->mps_pct[i] = 100;
        syn_law(ds->workloads[w[i]].metric, &s[i], &p[i]);
    }
    for (int i = 0; i < k; i++) {
        double pressure = 0;
        for (int j = 0; j < k; j++)
            pressure += j == i ? 0 : exp(p[j]);
        c->throughput[i] = ds->workloads[w[i]].metric[KACE_M_EXCLUSIVE] / (1 + exp(s[i]) * pressure);
    }
}

/* Workloads 0..N_SYN-1 named syn<i>, their pairs among the even ones and
 * the odd ones apart (so the odd ones are never fitted), and a few triples. */
static kace_dataset *synthetic(size_t *n_train)
{
    kace_dataset *ds = NULL;
    assert_kace_ok(ctx, kace_dataset_new(ctx, &ds));
    for (int w = 0; w < N_SYN; w++) {
        char name[32];
        int at;
        snprintf(name, sizeof name, "syn%d_batch1-inf", w);
        assert_kace_ok(ctx, kace_dataset_intern(ctx, ds, name, &at));
        assert_int_equal(at, w);
        syn_metrics(w, ds->workloads[w].metric);
    }
    kace_colocation c;
    for (int i = 0; i < N_SYN; i += 2)
        for (int j = i + 2; j < N_SYN; j += 2) {
            syn_group(ds, (int[]){i, j}, 2, &c);
            assert_kace_ok(ctx, kace_dataset_add_colocation(ctx, ds, &c));
        }
    for (int i = 0; i + 4 < N_SYN; i += 2) {
        syn_group(ds, (int[]){i, i + 2, i + 4}, 3, &c);
        assert_kace_ok(ctx, kace_dataset_add_colocation(ctx, ds, &c));
    }
    *n_train = ds->n_colocations;
    return ds;
}

static void test_recovers_a_known_law(void **state)
{
    (void)state;
    size_t n;
    kace_dataset *ds = synthetic(&n);
    kace_model *m = fit(ds, NULL, 0);
    kace_pressure_info info;
    kace_pressure_describe(m, &info);
    assert_int_equal(info.n_parts, 2);
    assert_int_equal(info.n_workloads, N_SYN / 2); /* the even ones: 0, 2, ..., 12 */
    for (int q = 0; q < info.n_parts; q++) {
        assert_true(info.s1[q] < 0); /* big kernels suffer less ... */
        assert_true(info.p1[q] > 0); /* ... and press harder */
    }
    /* Groups it never saw, of workloads it never saw (the odd ones, inside the
     * envelope of the even ones) and of k up to 4: every member within 7.5% of
     * the law's throughput. */
    double worst = 0;
    kace_colocation c;
    for (int i = 1; i < N_SYN - 1; i += 2)
        for (int j = 0; j < N_SYN - 1; j++) {
            if (j == i)
                continue;
            for (int k = 2; k <= 4; k++) {
                int g[4] = {i, j, (j + 3) % (N_SYN - 1), (j + 5) % (N_SYN - 1)};
                syn_group(ds, g, k, &c);
                double member[4];
                predict(m, ds, g, k, member);
                for (int a = 0; a < k; a++)
                    worst = fmax(worst, fabs(member[a] / c.throughput[a] - 1));
            }
        }
    printf("  worst member error on unseen groups: %.2f%%\n", 100 * worst);
    assert_true(worst < 0.075);
    /* On its training rows, tighter. */
    worst = 0;
    for (size_t r = 0; r < n; r++) {
        const kace_colocation *t = &ds->colocations[r];
        double member[KACE_MAX_K];
        predict(m, ds, t->workload, t->k, member);
        for (int a = 0; a < t->k; a++)
            worst = fmax(worst, fabs(member[a] / t->throughput[a] - 1));
    }
    printf("  worst member error on training rows: %.2f%%\n", 100 * worst);
    assert_true(worst < 0.02);
    kace_model_free(&m);
    kace_dataset_free(&ds);
}

/* A member only loses as its partners' pressure grows: adding a partner
 * never raises any member's predicted throughput, for every workload of
 * the V100 pairs and every pair of partners. */
static void test_monotone_in_partner_pressure(void **state)
{
    (void)state;
    kace_model *m = fit(pairs, NULL, 0);
    int checked = 0;
    for (int a = 0; a < n_used; a++)
        for (int b = 0; b < n_used; b++)
            for (int c = 0; c < n_used; c++) {
                if (a == b || a == c || b == c)
                    continue;
                int i = used[a], j = used[b], l = used[c], o = used[(c + 1) % n_used];
                double two[2], three[3], four[4];
                predict(m, pairs, (int[]){i, j}, 2, two);
                predict(m, pairs, (int[]){i, j, l}, 3, three);
                predict(m, pairs, (int[]){i, j, l, o}, 4, four);
                assert_true(three[0] <= two[0]);
                assert_true(three[1] <= two[1]);
                assert_true(four[0] <= three[0]);
                checked++;
            }
    /* And each latent pressure is what orders them: a partner of higher
     * pressure (in both parts) costs a member more. */
    kace_pressure_info info;
    kace_pressure_describe(m, &info);
    int ordered = 0, first = used[0];
    for (int b = 1; b < n_used; b++)
        for (int c = 1; c < n_used; c++) {
            int j = used[b], l = used[c];
            double lj[2][3], ll[2][3];
            bool higher = true;
            for (int q = 0; q < info.n_parts; q++) {
                assert_kace_ok(ctx, kace_pressure_latents(ctx, m, q, &pairs->workloads[j], lj[q]));
                assert_kace_ok(ctx, kace_pressure_latents(ctx, m, q, &pairs->workloads[l], ll[q]));
                higher &= lj[q][2] > ll[q][2];
            }
            if (!higher)
                continue;
            double with_j[2], with_l[2];
            predict(m, pairs, (int[]){first, j}, 2, with_j);
            predict(m, pairs, (int[]){first, l}, 2, with_l);
            assert_true(with_j[0] <= with_l[0]);
            ordered++;
        }
    printf("  %d partner additions and %d pressure orderings checked\n", checked, ordered);
    assert_true(checked > 1000 && ordered > 50);
    kace_model_free(&m);
}

/* One fit on pairs predicts groups of any k: a 4-way group's members are
 * what the latents give by hand, the sum is theirs, and a workload alone
 * keeps its exclusive throughput. */
static void test_k_way_prediction(void **state)
{
    (void)state;
    kace_model *m = fit(pairs, NULL, 0);
    kace_pressure_info info;
    kace_pressure_describe(m, &info);
    int g[4] = {used[0], used[3], used[7], used[11]};
    double member[4], lat[2][4][3];
    double sum = predict(m, pairs, g, 4, member);
    for (int q = 0; q < info.n_parts; q++)
        for (int i = 0; i < 4; i++)
            assert_kace_ok(ctx, kace_pressure_latents(ctx, m, q, &pairs->workloads[g[i]], lat[q][i]));
    double total = 0;
    for (int i = 0; i < 4; i++) {
        double f = 0;
        for (int q = 0; q < info.n_parts; q++) {
            double pressure = 0;
            for (int j = 0; j < 4; j++)
                pressure += j == i ? 0 : exp(lat[q][j][2]);
            f += exp(lat[q][i][0]) / (1 + exp(lat[q][i][1]) * pressure) / info.n_parts;
        }
        double want = f * pairs->workloads[g[i]].metric[KACE_M_EXCLUSIVE];
        assert_true(fabs(member[i] - want) <= 1e-9 * want);
        assert_true(member[i] > 0);
        total += member[i];
    }
    assert_true(fabs(sum - total) <= 1e-9 * total);
    double alone;
    alone = predict(m, pairs, g, 1, NULL);
    assert_true(alone == pairs->workloads[g[0]].metric[KACE_M_EXCLUSIVE]);
    /* Eight at once, the most a colocation holds. */
    int eight[8] = {used[0], used[1], used[2], used[3], used[4], used[5], used[6], used[7]};
    double eight_member[8];
    double eight_sum = predict(m, pairs, eight, 8, eight_member);
    assert_true(eight_sum > 0 && isfinite(eight_sum));
    kace_model_free(&m);
}

/* Every workload of the V100 pairs that the model can predict (a complete
 * profile). */
static int predictable(const kace_predictor *p, int *w, int max)
{
    int n = 0;
    for (size_t v = 0; v < pairs->n_workloads && n < max; v++) {
        kace_pressure_member pm;
        if (p->ops->bounds->pressure_member(ctx, p, &pairs->workloads[v], &pm) == KACE_OK)
            w[n++] = (int)v;
    }
    return n;
}

/* The group search's bound: a member's prediction from the smallest
 * partner weight sums its partners can reach (model/bounds.h) is never
 * below its prediction, for every member of every pair and triple of V100
 * workloads and every subset of its partners taken as the known ones, and
 * with all of them known it is the prediction. Four workloads are left
 * out of the fit, so the offsets they inherit from the prior are bounded
 * too. */
static void test_bound_never_below_prediction(void **state)
{
    (void)state;
    int *rows = malloc(pairs->n_colocations * sizeof *rows);
    assert_non_null(rows);
    size_t n = 0;
    for (size_t r = 0; r < pairs->n_colocations; r++) {
        bool unseen = false;
        for (int u = 0; u < 4; u++)
            unseen |= kace_colocation_has(&pairs->colocations[r], used[u]);
        if (!unseen)
            rows[n++] = (int)r;
    }
    kace_model *m = fit(pairs, rows, n);
    free(rows);
    const kace_predictor *p = kace_model_predictor(m);
    assert_true(kace_predictor_can(p, KACE_PRED_BOUNDS));
    int every[128], n_every = predictable(p, every, 128);
    kace_pressure_member *pm = calloc((size_t)n_every, sizeof *pm);
    assert_non_null(pm);
    for (int a = 0; a < n_every; a++)
        assert_kace_ok(ctx, p->ops->bounds->pressure_member(ctx, p, &pairs->workloads[every[a]], &pm[a]));
    long checked = 0;
    double worst_gap = 0; /* the largest relative distance of a full bound from the prediction */
    for (int a = 0; a < n_every; a++)
        for (int b = a + 1; b < n_every; b++)
            for (int c = b; c < n_every; c++) {
                int idx[3] = {a, b, c}, k = c == b ? 2 : 3, g[3];
                for (int i = 0; i < k; i++)
                    g[i] = every[idx[i]];
                double member[3];
                predict(m, pairs, g, k, member);
                for (int i = 0; i < k; i++)
                    for (unsigned known = 0; known < 1u << (k - 1); known++) {
                        double x[2] = {0, 0};
                        for (int j = 0, bit = 0; j < k; j++) {
                            if (j == i)
                                continue;
                            if (known & 1u << bit++)
                                for (int q = 0; q < pm[idx[i]].n_parts; q++)
                                    x[q] += pm[idx[j]].weight[q];
                        }
                        double upper = kace_pressure_member_upper(&pm[idx[i]], x);
                        assert_true(upper >= member[i] * (1 - 1e-12));
                        if (known == (1u << (k - 1)) - 1)
                            worst_gap = fmax(worst_gap, fabs(upper - member[i]) / member[i]);
                        checked++;
                    }
            }
    printf("  %d workloads, %ld member bounds checked; all partners known: within %.1e of the prediction\n",
           n_every, checked, worst_gap);
    assert_true(n_every >= n_used && checked > 10000);
    assert_true(worst_gap < 1e-12);
    free(pm);
    kace_model_free(&m);
}

/* The branch and bound returns the group enumeration returns (same
 * partners, same prediction) for every V100 workload as the target, the
 * rest as the pool, at k = 3, and for every fourth at k = 4, with the
 * default memory and with 20 GB (memory cuts), and scores far fewer groups. */
static void test_group_best_matches_enumeration(void **state)
{
    (void)state;
    kace_model *m = fit(pairs, NULL, 0);
    const kace_predictor *p = kace_model_predictor(m);
    int every[128], n_every = predictable(p, every, 128), pool[128];
    uint64_t scored_best = 0, scored_all = 0;
    int searches = 0;
    for (int k = 3; k <= 4; k++)
        for (int t = 0; t < n_every; t += k == 3 ? 1 : 4)
            for (int memory = 0; memory < 2; memory++) {
                size_t n = 0;
                for (int a = 0; a < n_every; a++)
                    if (a != t)
                        pool[n++] = every[a];
                kace_group_query q = {.target = every[t], .k = k, .pool = pool, .n_pool = n,
                                      .gpu_memory_gb = memory ? 20 : 0};
                kace_group_result best, all;
                assert_kace_ok(ctx, kace_group_best(ctx, pairs, p, &q, &best));
                assert_kace_ok(ctx, kace_group_enumerate(ctx, pairs, p, &q, &all));
                assert_int_equal(best.found, all.found);
                if (all.found) {
                    assert_true(best.predicted == all.predicted);
                    for (int i = 0; i < k; i++)
                        assert_int_equal(best.workload[i], all.workload[i]);
                }
                scored_best += best.groups_scored;
                scored_all += all.groups_scored;
                searches++;
            }
    printf("  %d searches: %llu groups scored by branch and bound, %llu by enumeration\n", searches,
           (unsigned long long)scored_best, (unsigned long long)scored_all);
    assert_true(scored_best * 10 < scored_all);
    kace_model_free(&m);
}

/* The stored pairs with every metric outside set removed (NaN), so that
 * reading one would show. */
static kace_dataset *pairs_with(kace_metric_set set)
{
    kace_dataset *ds = NULL;
    assert_kace_ok(ctx, kace_store_load_dataset(ctx, store, "pairs", false, &ds));
    for (size_t w = 0; w < ds->n_workloads; w++)
        for (int m = 0; m < KACE_N_METRICS; m++)
            if (!kace_metric_set_has(set, (kace_metric)m))
                ds->workloads[w].metric[m] = NAN;
    return ds;
}

/* On a store holding only a set's metrics (full, no counters, system),
 * the set is chosen from what is stored, the model trains and predicts
 * every row, records its set in the model file and predicts the same after
 * a round trip, and its group search matches enumeration. A model on the
 * full set refuses the system-only store, naming what to import. */
static void test_metric_sets(void **state)
{
    (void)state;
    for (int set = 0; set < KACE_N_METRIC_SETS; set++) {
        kace_dataset *ds = pairs_with((kace_metric_set)set);
        kace_fit_spec spec = {.kind = KACE_MODEL_PRESSURE};
        kace_fit_spec_restrict(&spec, kace_metric_set_choose(ds, NULL, 0, &spec));
        kace_model *m = NULL, *back = NULL;
        assert_kace_ok(ctx, kace_model_fit_rows(ctx, ds, NULL, 0, &spec, &m));
        assert_int_equal(kace_model_metrics(m), set);
        assert_true((int)kace_feature_set_metrics(kace_predictor_features(kace_model_predictor(m))) <= set);
        char *text = NULL;
        assert_kace_ok(ctx, kace_model_to_text(ctx, m, &text));
        char line[64];
        snprintf(line, sizeof line, "\nmetrics %s\n", kace_metric_set_name((kace_metric_set)set));
        assert_true((strstr(text, line) != NULL) == (set != KACE_METRICS_FULL));
        assert_kace_ok(ctx, kace_model_from_text(ctx, text, strlen(text), "round trip", &back));
        assert_int_equal(kace_model_metrics(back), set);
        double err = 0;
        for (size_t r = 0; r < ds->n_colocations; r++) {
            const kace_colocation *c = &ds->colocations[r];
            double sum = predict(m, ds, c->workload, c->k, NULL), again = predict(back, ds, c->workload, c->k, NULL);
            assert_true(isfinite(sum) && sum > 0);
            assert_true(again == sum);
            err += fabs(sum - kace_colocation_sum(c)) / kace_colocation_sum(c) / (double)ds->n_colocations;
        }
        printf("  %s metrics: mean relative error of the sum in sample %.3f\n",
               kace_metric_set_name((kace_metric_set)set), err);
        assert_true(err < 0.1);
        kace_group_query q = {.target = ds->colocations[0].workload[0], .k = 3};
        kace_group_result best, all;
        assert_kace_ok(ctx, kace_group_best(ctx, ds, kace_model_predictor(back), &q, &best));
        assert_kace_ok(ctx, kace_group_enumerate(ctx, ds, kace_model_predictor(back), &q, &all));
        assert_true(best.found && best.predicted == all.predicted);
        free(text);
        kace_model_free(&m);
        kace_model_free(&back);
        kace_dataset_free(&ds);
    }
    kace_dataset *sys = pairs_with(KACE_METRICS_SYSTEM);
    kace_fit_spec full = {.kind = KACE_MODEL_PRESSURE};
    kace_model *m = NULL;
    assert_int_equal(kace_model_fit_rows(ctx, sys, NULL, 0, &full, &m), KACE_ERR_INVALID);
    assert_null(m);
    const char *msg = kace_errmsg(ctx);
    assert_non_null(strstr(msg, "no value for metric"));
    assert_non_null(strstr(msg, "import"));
    assert_non_null(strstr(msg, "--metrics"));
    kace_dataset_free(&sys);
}

static void test_model_file_round_trip(void **state)
{
    (void)state;
    kace_model *m = fit(pairs, NULL, 0), *back = NULL;
    char *text = NULL, *again = NULL;
    assert_kace_ok(ctx, kace_model_to_text(ctx, m, &text));
    assert_non_null(strstr(text, "kind pressure\n"));
    assert_kace_ok(ctx, kace_model_from_text(ctx, text, strlen(text), "test", &back));
    assert_int_equal(kace_model_get_kind(back), KACE_MODEL_PRESSURE);
    assert_kace_ok(ctx, kace_model_to_text(ctx, back, &again));
    assert_string_equal(text, again);
    for (int i = 0; i < n_used; i++)
        for (int j = 0; j < n_used; j++) {
            double a[2], b[2];
            predict(m, pairs, (int[]){used[i], used[j]}, 2, a);
            predict(back, pairs, (int[]){used[i], used[j]}, 2, b);
            assert_true(a[0] == b[0] && a[1] == b[1]);
        }
    /* Through a file, as kace train writes it. */
    char path[4200];
    snprintf(path, sizeof path, "%s/pressure.model", scratch_dir("pressure-file"));
    kace_model *loaded = NULL;
    assert_kace_ok(ctx, kace_model_save(ctx, m, path));
    assert_kace_ok(ctx, kace_model_load(ctx, path, &loaded));
    double a, b;
    a = predict(m, pairs, used + 1, 3, NULL);
    b = predict(loaded, pairs, used + 1, 3, NULL);
    assert_true(a == b);
    /* A damaged line is named with its line number. */
    char *bad = strdup(text);
    char *at = strstr(bad, "pworkload ");
    assert_non_null(at);
    memcpy(at, "pworkload x", 11);
    kace_model *none = NULL;
    assert_int_equal(kace_model_from_text(ctx, bad, strlen(bad), "bad.model", &none), KACE_ERR_PARSE);
    assert_null(none);
    assert_non_null(strstr(kace_errmsg(ctx), "bad.model:"));
    assert_non_null(strstr(kace_errmsg(ctx), "pworkload"));
    /* A truncated file too. */
    size_t cut = (size_t)(strstr(text, "pscale ") - text) + 3;
    assert_int_equal(kace_model_from_text(ctx, text, cut, "cut.model", &none), KACE_ERR_PARSE);
    free(bad);
    free(text);
    free(again);
    kace_model_free(&m);
    kace_model_free(&back);
    kace_model_free(&loaded);
}

/* The cross-validation sees the fitting rows only: with every other row
 * poisoned (NaN throughputs, which a fit refuses), the model is the same. */
static void test_other_rows_never_reach_the_fit(void **state)
{
    (void)state;
    size_t nc = pairs->n_colocations, n_train = 0;
    int *train = malloc(nc * sizeof *train);
    assert_non_null(train);
    for (size_t i = 0; i < nc; i++)
        if (i % 3 != 0)
            train[n_train++] = (int)i;
    kace_dataset poisoned = *pairs;
    poisoned.colocations = malloc(nc * sizeof *poisoned.colocations);
    assert_non_null(poisoned.colocations);
    memcpy(poisoned.colocations, pairs->colocations, nc * sizeof *poisoned.colocations);
    for (size_t i = 0; i < nc; i += 3)
        for (int j = 0; j < poisoned.colocations[i].k; j++)
            poisoned.colocations[i].throughput[j] = NAN;
    kace_model *clean = fit(pairs, train, n_train), *dirty = fit(&poisoned, train, n_train);
    char *a = NULL, *b = NULL;
    assert_kace_ok(ctx, kace_model_to_text(ctx, clean, &a));
    assert_kace_ok(ctx, kace_model_to_text(ctx, dirty, &b));
    assert_string_equal(a, b);
    /* And a poisoned row among the fitting rows is refused. */
    kace_fit_spec spec = {.kind = KACE_MODEL_PRESSURE};
    kace_model *none = NULL;
    int all[2] = {0, 1};
    assert_int_equal(kace_model_fit_rows(ctx, &poisoned, all, 2, &spec, &none), KACE_ERR_INVALID);
    assert_null(none);
    free(a);
    free(b);
    kace_model_free(&clean);
    kace_model_free(&dirty);
    free(poisoned.colocations);
    free(train);
}

/* A workload without a metric the model reads is named with the metric. */
static void test_missing_metric_is_named(void **state)
{
    (void)state;
    size_t n;
    kace_dataset *ds = synthetic(&n);
    ds->workloads[4].metric[KACE_M_DRAM_THROUGHPUT] = NAN;
    kace_fit_spec spec = {.kind = KACE_MODEL_PRESSURE};
    kace_model *m = NULL;
    assert_int_equal(kace_model_fit_rows(ctx, ds, NULL, 0, &spec, &m), KACE_ERR_INVALID);
    assert_non_null(strstr(kace_errmsg(ctx), "syn4_batch1-inf"));
    assert_non_null(strstr(kace_errmsg(ctx), kace_metric_name(KACE_M_DRAM_THROUGHPUT)));
    kace_dataset_free(&ds);
}

/* ---- the figures (not a test: `test_pressure figures`) -------------------- */

enum { F_N2, F_N3, F_MAE, F_UNSEEN, F_TRIPLES, F_B2, F_B8, F_B16, F_PT, N_FIG };

static const struct {
    const char *what;
    double goal;
    bool lower_is_better;
} figure[N_FIG] = {
    {"n_occur=2 (published splits)", NAN, false},
    {"n_occur=3 (published splits)", 0.961, false},
    {"per-member error at n_occur=3 (%)", 10, true},
    {"unseen family (pairs)", 0.949, false},
    {"triples (family-exclusion)", 0.978, false},
    {"held-out batch 2", 0.95, false},
    {"held-out batch 8", 0.95, false},
    {"held-out batch 16", 0.95, false},
    {"pairs-only model on triples", 0.97, false},
};

static double mean_kace(const kace_target_score *t, size_t n)
{
    double s = 0;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (!isnan(t[i].score[KACE_POL_SLOWDOWN])) {
            s += t[i].score[KACE_POL_SLOWDOWN];
            k++;
        }
    return k ? s / (double)k : NAN;
}

/* The metrics both models read in `figures` (its optional third argument). */
static kace_metric_set fig_metrics = KACE_METRICS_FULL;

static kace_status figures_of(kace_model_kind kind, uint64_t seed, kace_dataset *triples, kace_splits *splits,
                              kace_folds *batch, kace_dataset *both, kace_folds *pt, double *fig)
{
    kace_eval_options opt;
    kace_eval_options_default(&opt);
    opt.mode = KACE_MODE_CLEAN;
    opt.one_mode = true;
    opt.with_xu = false;
    opt.kace_kind = kind;
    opt.slowdown.seed = seed;
    opt.metrics = fig_metrics;
    kace_split_results *r = NULL;
    kace_status st = kace_eval_splits(ctx, pairs, splits, &opt, &r);
    if (st)
        return st;
    fig[F_N2] = kace_eval_mean(r, 2, KACE_POL_SLOWDOWN);
    fig[F_N3] = kace_eval_mean(r, 3, KACE_POL_SLOWDOWN);
    double mae = 0;
    int n_mae = 0;
    for (size_t i = 0; i < r->n; i++)
        if (r->items[i].n_occur == 3) {
            mae += r->items[i].slowdown_mae_pct;
            n_mae++;
        }
    fig[F_MAE] = mae / n_mae;
    kace_split_results_free(&r);
    kace_target_score *out[2] = {NULL, NULL};
    size_t n_out = 0;
    if ((st = kace_eval_unseen(ctx, pairs, &opt, out, &n_out, NULL)))
        return st;
    fig[F_UNSEEN] = mean_kace(out[KACE_MODE_CLEAN], n_out);
    free(out[0]);
    free(out[1]);
    if ((st = kace_eval_unseen(ctx, triples, &opt, out, &n_out, NULL)))
        return st;
    fig[F_TRIPLES] = mean_kace(out[KACE_MODE_CLEAN], n_out);
    free(out[0]);
    free(out[1]);
    kace_protocol_result *pr = NULL;
    if ((st = kace_eval_folds(ctx, pairs, batch, &opt, &pr)))
        return st;
    for (int b = 0; b < 3; b++)
        fig[F_B2 + b] = pr->folds[b].score[KACE_POL_SLOWDOWN];
    kace_protocol_result_free(&pr);
    if ((st = kace_eval_folds(ctx, both, pt, &opt, &pr)))
        return st;
    fig[F_PT] = mean_kace(pr->targets, pr->n_targets);
    kace_protocol_result_free(&pr);
    return KACE_OK;
}

/* The triples (rows 0..) and then the pairs in one dataset, and the folds
 * of leave-family-out that train on the pairs only and choose among the
 * triples (as tests/test_generalize.c). */
static kace_status pairs_to_triples(kace_dataset *both, kace_folds **folds)
{
    size_t n3 = both->n_colocations, n2 = pairs->n_colocations;
    kace_status st = KACE_OK;
    for (size_t i = 0; i < n2 && !st; i++) {
        kace_colocation c = pairs->colocations[i];
        for (int j = 0; j < c.k; j++)
            c.workload[j] = kace_dataset_find(both, pairs->workloads[c.workload[j]].name);
        st = kace_dataset_add_colocation(ctx, both, &c);
    }
    int *train = malloc(n2 * sizeof *train), *test = malloc(n3 * sizeof *test);
    if (!st && (!train || !test))
        st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    for (size_t i = 0; !st && i < n2; i++)
        train[i] = (int)(n3 + i);
    for (size_t i = 0; !st && i < n3; i++)
        test[i] = (int)i;
    kace_protocol_spec spec;
    kace_protocol_spec_default(&spec);
    spec.protocol = KACE_PROTO_LEAVE_FAMILY_OUT;
    spec.train_pool = train;
    spec.n_train_pool = n2;
    spec.test_pool = test;
    spec.n_test_pool = n3;
    if (!st)
        st = kace_protocol_folds(ctx, both, &spec, folds);
    free(train);
    free(test);
    return st;
}

static int print_figures(int seeds, const kace_model_kind *kinds, int n_kinds)
{
    static const char *const files[] = {"colocations/triples.csv", "splits.csv"};
    kace_dataset *triples = NULL, *both = NULL;
    kace_splits *splits = NULL;
    kace_folds *batch = NULL, *pt = NULL;
    kace_protocol_spec spec;
    kace_protocol_spec_default(&spec);
    spec.protocol = KACE_PROTO_LEAVE_BATCH_OUT;
    kace_status st = import_reference(ctx, store, files, 2);
    if (!st)
        st = kace_store_load_dataset(ctx, store, "triples", false, &triples);
    if (!st)
        st = kace_store_load_dataset(ctx, store, "triples", false, &both);
    if (!st)
        st = kace_store_load_splits(ctx, store, pairs, &splits);
    if (!st)
        st = kace_protocol_folds(ctx, pairs, &spec, &batch);
    if (!st)
        st = pairs_to_triples(both, &pt);
    double fig[4][N_FIG] = {{0}}, one[N_FIG];
    for (int k = 0; k < n_kinds && !st; k++)
        for (int s = 0; s < seeds && !st; s++) {
            if (!(st = figures_of(kinds[k], (uint64_t)s, triples, splits, batch, both, pt, one)))
                for (int f = 0; f < N_FIG; f++)
                    fig[k][f] += one[f] / seeds;
        }
    if (!st) {
        /* The first kind against the last (pressure against slowdown unless told). */
        const char *first = kace_model_kind_name(kinds[0]), *last = kace_model_kind_name(kinds[n_kinds - 1]);
        printf("V100 data, clean mode, %s metrics, mean over kace seeds 0..%d\n", kace_metric_set_name(fig_metrics),
               seeds - 1);
        printf("%-36s", "figure");
        for (int k = 0; k < n_kinds; k++)
            printf(" %9s", kace_model_kind_name(kinds[k]));
        printf(" %9s  %s vs %s\n", "goal", first, last);
        for (int f = 0; f < N_FIG; f++) {
            bool lower = figure[f].lower_is_better;
            double p = fig[0][f], d = fig[n_kinds - 1][f];
            char goal[32] = "-";
            if (!isnan(figure[f].goal))
                snprintf(goal, sizeof goal, "%s %.3g", lower ? "<=" : ">=", figure[f].goal);
            const char *cmp = fabs(p - d) < 5e-4 * (lower ? 10 : 1) ? "same" : (lower ? p < d : p > d) ? "better"
                                                                                                       : "worse";
            printf("%-36s", figure[f].what);
            for (int k = 0; k < n_kinds; k++)
                printf(" %9.4f", fig[k][f]);
            printf(" %9s  %s%s\n", goal, cmp,
                   isnan(figure[f].goal) ? ""
                   : (lower ? p <= figure[f].goal : p >= figure[f].goal) ? " (goal met)"
                                                                          : " (goal not met)");
        }
    } else {
        fprintf(stderr, "test_pressure figures: %s\n", kace_errmsg(ctx));
    }
    kace_folds_free(&batch);
    kace_folds_free(&pt);
    kace_splits_free(&splits);
    kace_dataset_free(&triples);
    kace_dataset_free(&both);
    return st ? 1 : 0;
}

static double seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* `test_pressure search`: what the bounds save. A model fitted on the V100
 * pairs searches k-way groups around every one of 10 targets in the V100
 * pool and in pools of synthetic workloads (kace_group_synthesize, spread
 * 0.4), by branch and bound and by enumeration (no bound): groups scored
 * and wall time of each. */
static int print_search(void)
{
    kace_model *m = NULL;
    kace_fit_spec spec = {.kind = KACE_MODEL_PRESSURE};
    if (kace_model_fit_rows(ctx, pairs, NULL, 0, &spec, &m))
        return 1;
    const kace_predictor *p = kace_model_predictor(m);
    size_t n_real = pairs->n_workloads;
    if (kace_group_synthesize(ctx, pairs, 400, 0.4, 1))
        return 1;
    int *pool = malloc(pairs->n_workloads * sizeof *pool);
    static const struct {
        int k;
        size_t synth;
    } runs[] = {{3, 0}, {4, 0}, {3, 100}, {4, 100}, {3, 400}};
    printf("%2s %6s %14s %14s %10s %10s %8s\n", "k", "pool", "scored (b&b)", "scored (all)", "b&b ms", "all ms",
           "pruned");
    int rc = 0;
    for (size_t r = 0; r < sizeof runs / sizeof *runs && !rc; r++) {
        uint64_t sb = 0, sa = 0;
        double tb = 0, ta = 0;
        size_t n = 0;
        for (int t = 0; t < 10 && !rc; t++) {
            n = 0;
            for (int a = 0; a < n_used; a++)
                if (a != t)
                    pool[n++] = used[a];
            for (size_t w = n_real; w < n_real + runs[r].synth; w++)
                pool[n++] = (int)w;
            kace_group_query q = {.target = used[t], .k = runs[r].k, .pool = pool, .n_pool = n};
            kace_group_result best, all;
            double t0 = seconds();
            rc |= kace_group_best(ctx, pairs, p, &q, &best) != KACE_OK;
            double t1 = seconds();
            rc |= kace_group_enumerate(ctx, pairs, p, &q, &all) != KACE_OK;
            double t2 = seconds();
            rc |= !rc && (best.predicted != all.predicted);
            tb += t1 - t0;
            ta += t2 - t1;
            sb += best.groups_scored;
            sa += all.groups_scored;
        }
        printf("%2d %6zu %14llu %14llu %10.1f %10.1f %7.2f%%\n", runs[r].k, n, (unsigned long long)sb,
               (unsigned long long)sa, tb * 1e3, ta * 1e3, 100.0 * (1 - (double)sb / (double)sa));
    }
    if (rc)
        fprintf(stderr, "test_pressure search: %s\n", kace_errmsg(ctx));
    free(pool);
    kace_model_free(&m);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "figures") == 0) {
        int seeds = argc > 2 ? atoi(argv[2]) : 4, set = argc > 3 ? kace_metric_set_from_name(argv[3]) : 0;
        kace_model_kind kinds[4] = {KACE_MODEL_PRESSURE, KACE_MODEL_SLOWDOWN};
        int n_kinds = argc > 4 ? argc - 4 : 2;
        bool known = n_kinds <= 4;
        for (int k = 0; known && argc > 4 && k < n_kinds; k++) {
            int kind = kace_model_kind_from_name(argv[4 + k]);
            known = kind >= KACE_MODEL_SLOWDOWN;
            kinds[k] = (kace_model_kind)kind;
        }
        if (seeds < 1 || seeds > 100 || set < 0 || !known || setup(NULL) != 0) {
            fprintf(stderr, "usage: test_pressure figures [SEEDS 1..100 [full|no-counters|system [KIND...]]] "
                            "(KIND: pressure, slowdown, stacked, at most 4; the first is scored against the goals "
                            "and the last; needs ../shared/data/kace-v100)\n");
            return 2;
        }
        fig_metrics = (kace_metric_set)set;
        int rc = print_figures(seeds, kinds, n_kinds);
        teardown(NULL);
        return rc;
    }
    if (argc > 1 && strcmp(argv[1], "search") == 0) {
        if (setup(NULL) != 0)
            return 2;
        int rc = print_search();
        teardown(NULL);
        return rc;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_recovers_a_known_law),
        cmocka_unit_test(test_monotone_in_partner_pressure),
        cmocka_unit_test(test_k_way_prediction),
        cmocka_unit_test(test_bound_never_below_prediction),
        cmocka_unit_test(test_group_best_matches_enumeration),
        cmocka_unit_test(test_metric_sets),
        cmocka_unit_test(test_model_file_round_trip),
        cmocka_unit_test(test_other_rows_never_reach_the_fit),
        cmocka_unit_test(test_missing_metric_is_named),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
