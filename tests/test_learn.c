/* The closed loop's library (include/kace/learn.h) on the V100 pairs:
 * which observations become training rows, the held-out slice never reaches
 * the candidate's fit (poisoned: scaled by 1000, the candidate is the same),
 * the promotion rule, refusal with too few observations, drift. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kace/learn.h"
#include "kace/store.h"
#include "testutil.h"

static kace_ctx *ctx;
static kace_dataset *pairs;

static int setup(void **state)
{
    (void)state;
    ctx = kace_ctx_new();
    kace_store *store = NULL;
    char db[4096];
    snprintf(db, sizeof db, "%s/kace.db", scratch_dir("learn"));
    const char *files[] = {"profiles/system.csv", "colocations/pairs.csv"};
    if (kace_store_open(ctx, db, &store) || import_reference(ctx, store, files, 2) ||
        kace_store_load_dataset(ctx, store, "pairs", false, &pairs)) {
        fprintf(stderr, "%s\n", kace_errmsg(ctx));
        return -1;
    }
    kace_store_close(&store);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    kace_dataset_free(&pairs);
    kace_ctx_free(&ctx);
    return 0;
}

/* Observations of pairs rows from..from+n, throughputs times factor[i]. */
typedef struct obs_set {
    kace_observed_colocation items[64];
    kace_observed_member members[64][2];
    kace_observed_list list;
} obs_set;

static void make_obs(obs_set *o, size_t n, const double *factor)
{
    for (size_t i = 0; i < n; i++) {
        const kace_colocation *c = &pairs->colocations[i];
        for (int j = 0; j < 2; j++)
            o->members[i][j] = (kace_observed_member){pairs->workloads[c->workload[j]].name, 100,
                                                      c->throughput[j] * factor[i], NAN};
        o->items[i] = (kace_observed_colocation){.origin = "test", .observed_at = (double)i, .n_members = 2,
                                                 .members = o->members[i]};
    }
    o->list.n = n;
    o->list.items = o->items;
}

static kace_dataset *copy_pairs(void)
{
    kace_dataset *ds = NULL;
    assert_kace_ok(ctx, kace_dataset_new(ctx, &ds));
    for (size_t w = 0; w < pairs->n_workloads; w++) {
        int idx;
        assert_kace_ok(ctx, kace_dataset_intern(ctx, ds, pairs->workloads[w].name, &idx));
        ds->workloads[idx] = pairs->workloads[w];
    }
    for (size_t r = 0; r < pairs->n_colocations; r++)
        assert_kace_ok(ctx, kace_dataset_add_colocation(ctx, ds, &pairs->colocations[r]));
    return ds;
}

static int *all_rows(size_t n)
{
    int *rows = malloc(n * sizeof *rows);
    for (size_t i = 0; i < n; i++)
        rows[i] = (int)i;
    return rows;
}

static void test_usable_observations(void **state)
{
    (void)state;
    obs_set o;
    double f[4] = {1, 1, 1, 1};
    make_obs(&o, 4, f);
    o.members[1][0].mps_pct = 50;  /* not at 100%: not a training row */
    o.items[2].n_members = 1;      /* alone: not a colocation */
    kace_dataset *ds = copy_pairs();
    int *rows = NULL;
    size_t n = 0;
    assert_kace_ok(ctx, kace_learn_append_observations(ctx, ds, &o.list, &rows, &n));
    assert_int_equal(n, 2);
    assert_int_equal(ds->n_colocations, pairs->n_colocations + 2);
    assert_int_equal(rows[0], (int)pairs->n_colocations);
    assert_float_equal(kace_colocation_sum(&ds->colocations[rows[1]]), kace_colocation_sum(&pairs->colocations[3]),
                       1e-9);
    free(rows);
    o.members[0][1].workload = "nope";
    assert_int_equal(kace_learn_append_observations(ctx, ds, &o.list, &rows, &n), KACE_ERR_NOT_FOUND);
    kace_dataset_free(&ds);
}

/* The held-out slice is the most recent quarter; poisoning it (x1000)
 * leaves the candidate exactly as it was, and changes only the errors. */
static void test_holdout_never_fitted(void **state)
{
    (void)state;
    size_t n = 40;
    double f[64], g[64];
    for (size_t i = 0; i < n; i++)
        f[i] = g[i] = 0.5;
    for (size_t i = 30; i < n; i++)
        g[i] = 1000; /* the 10 most recent: poisoned */
    obs_set a, b;
    make_obs(&a, n, f);
    make_obs(&b, n, g);
    kace_fit_spec spec = {.kind = KACE_MODEL_SLOWDOWN};
    kace_slowdown_params_default(&spec.slowdown);
    kace_retrain_options o;
    kace_retrain_options_default(&o);
    int *base = all_rows(pairs->n_colocations);
    kace_model *current = NULL, *ca = NULL, *cb = NULL;
    assert_kace_ok(ctx, kace_model_fit_rows(ctx, pairs, base, pairs->n_colocations, &spec, &current));
    kace_dataset *da = copy_pairs(), *db = copy_pairs();
    kace_retrain_report ra, rb;
    assert_kace_ok(ctx, kace_retrain(ctx, da, base, pairs->n_colocations, &a.list, current, &spec, &o, &ca, &ra));
    assert_kace_ok(ctx, kace_retrain(ctx, db, base, pairs->n_colocations, &b.list, current, &spec, &o, &cb, &rb));
    assert_int_equal(ra.n_holdout, 10);
    assert_int_equal(ra.n_obs_train, 30);
    assert_int_equal(ra.n_stored, pairs->n_colocations);
    char *ta = NULL, *tb = NULL;
    assert_kace_ok(ctx, kace_model_to_text(ctx, ca, &ta));
    assert_kace_ok(ctx, kace_model_to_text(ctx, cb, &tb));
    assert_string_equal(ta, tb);
    assert_true(rb.candidate_err > 90 && rb.current_err > 90); /* both far off the poisoned slice */
    /* Halved throughputs: the candidate, which saw 30 of them, is better on
     * the 10 recent ones than the model that saw none: promoted. */
    printf("held-out error on halved observations: current %.2f%%, candidate %.2f%%\n", ra.current_err,
           ra.candidate_err);
    assert_true(ra.candidate_err < ra.current_err);
    assert_true(ra.better);
    free(ta);
    free(tb);
    kace_model_free(&ca);
    kace_model_free(&cb);

    /* Older halved, recent as measured: the candidate is worse, not better. */
    double h[64];
    for (size_t i = 0; i < n; i++)
        h[i] = i < 30 ? 0.5 : 1.0;
    obs_set c;
    make_obs(&c, n, h);
    kace_dataset *dc = copy_pairs();
    kace_retrain_report rc;
    assert_kace_ok(ctx, kace_retrain(ctx, dc, base, pairs->n_colocations, &c.list, current, &spec, &o, &ca, &rc));
    assert_true(rc.candidate_err > rc.current_err);
    assert_false(rc.better);
    kace_model_free(&ca);

    /* Outlier-robust: 3 wild reports (x1000) among the 30 fitted ones are
     * left out, and the candidate is the one fitted without them. */
    double w[64];
    for (size_t i = 0; i < n; i++)
        w[i] = 1.0;
    w[4] = w[11] = w[20] = 1000;
    obs_set p, q;
    make_obs(&p, n, w);
    make_obs(&q, n, w);
    size_t nq = 0; /* q: the same observations without the three */
    for (size_t i = 0; i < n; i++)
        if (w[i] == 1.0) {
            q.items[nq] = q.items[i];
            q.items[nq].members = q.members[i];
            nq++;
        }
    q.list.n = nq;
    kace_dataset *dp = copy_pairs(), *dq = copy_pairs();
    kace_retrain_report rp, rq;
    kace_model *cp = NULL, *cq = NULL;
    assert_kace_ok(ctx, kace_retrain(ctx, dp, base, pairs->n_colocations, &p.list, current, &spec, &o, &cp, &rp));
    assert_kace_ok(ctx, kace_retrain(ctx, dq, base, pairs->n_colocations, &q.list, current, &spec, &o, &cq, &rq));
    assert_int_equal(rp.n_outliers, 3);
    assert_int_equal(rq.n_outliers, 0);
    assert_int_equal(rp.n_holdout, rq.n_holdout);
    char *tp = NULL, *tq = NULL;
    assert_kace_ok(ctx, kace_model_to_text(ctx, cp, &tp));
    assert_kace_ok(ctx, kace_model_to_text(ctx, cq, &tq));
    assert_string_equal(tp, tq);
    assert_int_equal(ra.n_outliers, 0); /* a shift all share (halved) is drift, kept */
    free(tp);
    free(tq);
    kace_model_free(&cp);
    kace_model_free(&cq);
    kace_dataset_free(&dp);
    kace_dataset_free(&dq);

    /* Too few observations: refused, no candidate. */
    obs_set d;
    make_obs(&d, 5, f);
    kace_dataset *dd = copy_pairs();
    assert_int_equal(kace_retrain(ctx, dd, base, pairs->n_colocations, &d.list, current, &spec, &o, &ca, &rc),
                     KACE_ERR_INVALID);
    assert_null(ca);
    assert_non_null(strstr(kace_errmsg(ctx), "5 usable observations"));

    /* Drift: the current model on the 20 recent halved observations, over
     * its cross-validated error. */
    kace_dataset *de = copy_pairs();
    kace_drift drift;
    assert_kace_ok(ctx, kace_learn_drift(ctx, de, base, pairs->n_colocations, &a.list, current, 20, &drift));
    assert_int_equal(drift.n_recent, 20);
    assert_true(drift.cv_err > 0 && drift.recent_err > drift.cv_err);
    assert_float_equal(drift.ratio, drift.recent_err / drift.cv_err, 1e-12);
    printf("drift on halved observations: %.2f (recent %.2f%%, cross-validated %.2f%%)\n", drift.ratio,
           drift.recent_err, drift.cv_err);
    kace_dataset_free(&da);
    kace_dataset_free(&db);
    kace_dataset_free(&dc);
    kace_dataset_free(&dd);
    kace_dataset_free(&de);
    kace_model_free(&current);
    free(base);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_usable_observations),
        cmocka_unit_test(test_holdout_never_fitted),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
