/* Best k-way groups: branch and bound returns exactly what enumeration
 * returns, on many random pools drawn from synthetic workloads made from
 * the real profiles; memory capacity is never exceeded; bad queries fail
 * with a message. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kace/group.h"
#include "kace/store.h"
#include "model/slowdown.h"
#include "model/trees.h"
#include "testutil.h"

static kace_ctx *ctx;
static kace_dataset *ds;   /* the real pairs + 120 synthetic workloads */
static kace_model *model;  /* slowdown model fitted on the real pairs */
static size_t n_real;

static int setup(void **state)
{
    (void)state;
    ctx = kace_ctx_new();
    kace_store *store = NULL;
    char db[4096];
    snprintf(db, sizeof db, "%s/kace.db", scratch_dir("group"));
    if (kace_store_open(ctx, db, &store))
        return -1;
    static const char *const files[] = {"profiles/system.csv", "colocations/pairs.csv"};
    if (import_reference(ctx, store, files, 2))
        return -1;
    if (kace_store_load_dataset(ctx, store, "pairs", false, &ds))
        return -1;
    kace_store_close(&store);
    if (kace_model_fit_slowdown(ctx, ds, NULL, 0, NULL, &model) == KACE_OK)
        return -1; /* zero rows must be refused */
    int *rows = malloc(ds->n_colocations * sizeof *rows);
    for (size_t i = 0; i < ds->n_colocations; i++)
        rows[i] = (int)i;
    kace_status st = kace_model_fit_slowdown(ctx, ds, rows, ds->n_colocations, NULL, &model);
    free(rows);
    if (st)
        return -1;
    n_real = ds->n_workloads;
    return kace_group_synthesize(ctx, ds, 120, 0.4, 7) ? -1 : 0;
}

static int teardown(void **state)
{
    (void)state;
    kace_model_free(&model);
    kace_dataset_free(&ds);
    kace_ctx_free(&ctx);
    return 0;
}

static uint64_t rng = 88172645463325252ull;
static size_t draw(size_t n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (size_t)(rng % n);
}

static bool complete(int w)
{
    const double *m = ds->workloads[w].metric;
    return !isnan(m[KACE_M_SM_THROUGHPUT]) && !isnan(m[KACE_M_MEMCAP]) && !isnan(m[KACE_M_SM_PCT]) &&
           m[KACE_M_EXCLUSIVE] > 0;
}

static void assert_same(const kace_group_result *a, const kace_group_result *b)
{
    assert_int_equal(a->found, b->found);
    if (!a->found)
        return;
    if (a->predicted != b->predicted)
        fail_msg("branch and bound %.17g vs enumeration %.17g", a->predicted, b->predicted);
    for (int i = 0; i < a->k; i++)
        assert_int_equal(a->workload[i], b->workload[i]);
}

static void test_equals_enumeration_on_random_pools(void **state)
{
    (void)state;
    int complete_ids[512];
    size_t n_complete = 0;
    for (size_t w = 0; w < ds->n_workloads; w++)
        if (complete((int)w))
            complete_ids[n_complete++] = (int)w;
    assert_true(n_complete > 100);
    uint64_t scored_bb = 0, scored_enum = 0;
    int cases = 0, capped = 0;
    for (int trial = 0; trial < 150; trial++) {
        int pool[60];
        size_t n_pool = 8 + draw(40);
        int target = complete_ids[draw(n_complete)];
        for (size_t i = 0; i < n_pool; i++)
            pool[i] = complete_ids[draw(n_complete)]; /* repeats allowed: two jobs of one kind */
        kace_group_query q = {.target = target, .k = 2 + (int)draw(3), .pool = pool, .n_pool = n_pool};
        /* Tight memory on some trials so the capacity prunes. */
        q.gpu_memory_gb = trial % 3 == 0 ? 12 + (double)draw(12) : 0;
        kace_group_result bb, en;
        assert_kace_ok(ctx, kace_group_best(ctx, ds, kace_model_predictor(model), &q, &bb));
        assert_kace_ok(ctx, kace_group_enumerate(ctx, ds, kace_model_predictor(model), &q, &en));
        assert_same(&bb, &en);
        double cap = q.gpu_memory_gb > 0 ? q.gpu_memory_gb : KACE_GPU_MEMORY_V100_GB;
        if (bb.found) {
            double mem = 0;
            for (int i = 0; i < bb.k; i++)
                mem += ds->workloads[bb.workload[i]].metric[KACE_M_MEMCAP];
            assert_true(mem <= cap);
            assert_true(fabs(mem - bb.memcap_gb) < 1e-9);
            assert_int_equal(bb.workload[0], target);
        }
        capped += q.gpu_memory_gb > 0;
        scored_bb += bb.groups_scored;
        scored_enum += en.groups_scored;
        cases++;
    }
    printf("%d random pools (%d with a tight memory cap): groups scored %llu by branch and bound, %llu by "
           "enumeration\n",
           cases, capped, (unsigned long long)scored_bb, (unsigned long long)scored_enum);
    assert_true(scored_bb < scored_enum); /* the bounds do cut */
}

/* Larger pools at k = 4, where the search prunes by chunks of similar
 * jobs: still exactly enumeration's group. */
static void test_equals_enumeration_on_large_pools(void **state)
{
    (void)state;
    size_t n_synth = ds->n_workloads - n_real;
    for (int trial = 0; trial < 4; trial++) {
        int pool[80];
        for (size_t i = 0; i < 80; i++)
            pool[i] = (int)(n_real + draw(n_synth));
        int target = (int)draw(n_real);
        while (!complete(target))
            target = (int)draw(n_real);
        kace_group_query q = {.target = target, .k = 4, .pool = pool, .n_pool = 60 + draw(21)};
        q.gpu_memory_gb = trial % 2 ? 16 + (double)draw(8) : 0;
        kace_group_result bb, en;
        assert_kace_ok(ctx, kace_group_best(ctx, ds, kace_model_predictor(model), &q, &bb));
        assert_kace_ok(ctx, kace_group_enumerate(ctx, ds, kace_model_predictor(model), &q, &en));
        assert_same(&bb, &en);
        assert_true(bb.groups_scored * 4 < en.groups_scored);
    }
}

/* The member bound the search prunes with: over a box spanning several
 * real partner groups it is at least each of their predictions, and on a
 * single group (a point box) it is close to the prediction itself. */
static void test_member_bound_covers_predictions(void **state)
{
    (void)state;
    int n_metric;
    const kace_metric *metric = kace_slowdown_needed_metrics(&n_metric);
    double worst_point = 0;
    for (int trial = 0; trial < 300; trial++) {
        int member = (int)(n_real + draw(ds->n_workloads - n_real));
        int groups[4][KACE_MAX_K], sizes[4];
        double lo[KACE_N_METRICS], hi[KACE_N_METRICS];
        for (int i = 0; i < KACE_N_METRICS; i++) {
            lo[i] = INFINITY;
            hi[i] = 0;
        }
        int n_groups = 1 + (int)draw(4);
        for (int g = 0; g < n_groups; g++) {
            sizes[g] = 2 + (int)draw(3);
            groups[g][0] = member;
            for (int i = 1; i < sizes[g]; i++)
                groups[g][i] = (int)(n_real + draw(ds->n_workloads - n_real));
            for (int j = 0; j < n_metric; j++) {
                double sum = 0;
                for (int i = 1; i < sizes[g]; i++)
                    sum += ds->workloads[groups[g][i]].metric[metric[j]];
                lo[metric[j]] = fmin(lo[metric[j]], sum * (1 - 1e-12));
                hi[metric[j]] = fmax(hi[metric[j]], sum * (1 + 1e-12));
            }
        }
        kace_member_bound mb;
        assert_kace_ok(ctx, kace_slowdown_member_bound_init(ctx, model, ds->workloads[member].metric, &mb));
        double bound = kace_slowdown_member_bound(model, &mb, lo, hi);
        kace_slowdown_member_bound_release(&mb);
        assert_true(bound == kace_slowdown_member_upper(model, ds->workloads[member].metric, lo, hi));
        /* In two steps (the search's): the ridge part alone, the trees walked
         * unprepared, then prepared lazily to the same bound as above. */
        kace_slowdown_member_bound_ridge(model, ds->workloads[member].metric, &mb);
        double raw = kace_slowdown_blend_upper(model, kace_slowdown_member_ridge(model, &mb, lo, hi),
                                               kace_slowdown_member_trees_unprepared(model, &mb, lo, hi));
        assert_kace_ok(ctx, kace_slowdown_member_bound_trees(ctx, model, &mb));
        assert_true(kace_slowdown_member_bound(model, &mb, lo, hi) == bound);
        kace_slowdown_member_bound_release(&mb);
        for (int g = 0; g < n_groups; g++) {
            double sum, each[KACE_MAX_K];
            assert_kace_ok(ctx, kace_slowdown_predict(ctx, model, ds, groups[g], sizes[g], &sum, NULL, each));
            if (!(each[0] <= bound))
                fail_msg("member prediction %.17g above its bound %.17g", each[0], bound);
            if (!(each[0] <= raw))
                fail_msg("member prediction %.17g above its unprepared bound %.17g", each[0], raw);
            if (n_groups == 1)
                worst_point = fmax(worst_point, bound / each[0]);
        }
    }
    printf("point boxes: bound / prediction at most %.6f\n", worst_point);
    assert_true(worst_point > 1 && worst_point < 1.01);
}

/* The bound's parts: blended they give the member bound, and a tree part
 * over a larger box is never below one over a box inside it (the search
 * reuses tree parts from enclosing boxes). */
static void test_bound_parts_nest(void **state)
{
    (void)state;
    int n_metric;
    const kace_metric *metric = kace_slowdown_needed_metrics(&n_metric);
    for (int trial = 0; trial < 200; trial++) {
        int member = (int)(n_real + draw(ds->n_workloads - n_real));
        double lo[KACE_N_METRICS] = {0}, hi[KACE_N_METRICS] = {0}, in_lo[KACE_N_METRICS] = {0},
               in_hi[KACE_N_METRICS] = {0};
        for (int j = 0; j < n_metric; j++) {
            double a = ds->workloads[n_real + draw(ds->n_workloads - n_real)].metric[metric[j]];
            double b = ds->workloads[n_real + draw(ds->n_workloads - n_real)].metric[metric[j]];
            lo[metric[j]] = fmin(a, b);
            hi[metric[j]] = 2 * fmax(a, b);
            double u = (double)draw(1000) / 1000, v = (double)draw(1000) / 1000;
            in_lo[metric[j]] = lo[metric[j]] + fmin(u, v) * (hi[metric[j]] - lo[metric[j]]);
            in_hi[metric[j]] = lo[metric[j]] + fmax(u, v) * (hi[metric[j]] - lo[metric[j]]);
        }
        kace_member_bound mb;
        assert_kace_ok(ctx, kace_slowdown_member_bound_init(ctx, model, ds->workloads[member].metric, &mb));
        double ridge = kace_slowdown_member_ridge(model, &mb, lo, hi), trees = kace_slowdown_member_trees(model, &mb, lo, hi);
        assert_true(kace_slowdown_blend_upper(model, ridge, trees) == kace_slowdown_member_bound(model, &mb, lo, hi));
        assert_true(kace_slowdown_member_trees(model, &mb, in_lo, in_hi) <= trees);
        assert_true(kace_slowdown_member_ridge(model, &mb, in_lo, in_hi) <= ridge);
        kace_slowdown_member_bound_release(&mb);
    }
}

/* kace_trees_find_monotone on trees built by hand: a split whose low side
 * pays more is non-increasing, the reverse non-decreasing, and a feature
 * whose direction depends on another feature neither. */
static void test_find_monotone_by_hand(void **state)
{
    (void)state;
    /* tree 0: x0 < 0.5 ? 2 : 1; tree 1: x0 < 0.5 ? 1 : 2;
     * tree 2: x1 < 0.5 ? (x0 < 0.3 ? 3 : 1) : (x0 < 0.7 ? 0 : 5) */
    kace_tree_node node[] = {
        {0.5f, 0, 1, 2, 1}, {2, -1, -1, -1, 0}, {1, -1, -1, -1, 0},
        {0.5f, 0, 4, 5, 1}, {1, -1, -1, -1, 0}, {2, -1, -1, -1, 0},
        {0.5f, 1, 7, 10, 1}, {0.3f, 0, 8, 9, 1}, {3, -1, -1, -1, 0}, {1, -1, -1, -1, 0},
        {0.7f, 0, 11, 12, 1}, {0, -1, -1, -1, 0}, {5, -1, -1, -1, 0},
    };
    int root[] = {0, 3, 6};
    kace_trees t = {.n_trees = 3, .n_nodes = 13, .tree_root = root, .node = node};
    kace_trees_find_monotone(&t, 2);
    assert_non_null(t.monotone);
    assert_int_equal(t.monotone[0 * 2 + 0], -1);
    assert_int_equal(t.monotone[1 * 2 + 0], 1);
    assert_int_equal(t.monotone[2 * 2 + 0], 0);
    assert_int_equal(t.monotone[2 * 2 + 1], 0); /* x1 raises (1 -> 5) and lowers (3 -> 0) */
    free(t.monotone);
}

/* What the fitted model's monotone table claims holds on its trees: raising
 * such a feature at random points never moves the tree the wrong way. */
static void test_model_monotone_claims_hold(void **state)
{
    (void)state;
    const kace_trees *all = &model->trees;
    assert_non_null(all->monotone);
    int claims = 0;
    for (int i = 0; i < all->n_trees; i++) {
        kace_trees one = {.n_trees = 1, .tree_root = &all->tree_root[i], .node = all->node};
        for (int trial = 0; trial < 20; trial++) {
            double x[KACE_MAX_FEATURES];
            int group[3] = {(int)(n_real + draw(ds->n_workloads - n_real)),
                            (int)(n_real + draw(ds->n_workloads - n_real)),
                            (int)(n_real + draw(ds->n_workloads - n_real))};
            /* a real member's features, each then moved up in turn */
            double other[KACE_N_METRICS] = {0};
            int n_metric;
            const kace_metric *metric = kace_slowdown_needed_metrics(&n_metric);
            for (int j = 0; j < n_metric; j++)
                other[metric[j]] = ds->workloads[group[1]].metric[metric[j]] + ds->workloads[group[2]].metric[metric[j]];
            kace_slowdown_member_features_of(ds->workloads[group[0]].metric, other, x);
            double base = kace_trees_predict(&one, x);
            for (int f = 0; f < kace_slowdown_member_features(); f++) {
                signed char dir = all->monotone[(size_t)i * (size_t)kace_slowdown_member_features() + (size_t)f];
                if (!dir)
                    continue;
                claims++;
                double keep = x[f];
                x[f] = keep + fabs(keep) * (double)(1 + draw(100)) / 50 + 1e-3;
                double moved = kace_trees_predict(&one, x);
                x[f] = keep;
                assert_true(dir < 0 ? moved <= base : moved >= base);
            }
        }
    }
    assert_true(claims > 0);
}

/* The memory cap holds even when the best unconstrained group does not fit:
 * the search returns the best group that does, never one over the cap. */
static void test_memory_cap_is_never_exceeded(void **state)
{
    (void)state;
    int target = -1;
    for (size_t w = 0; w < n_real; w++)
        if (complete((int)w) && strstr(ds->workloads[w].name, "vit_h_14_batch16")) /* 21 GB alone */
            target = (int)w;
    assert_true(target >= 0);
    for (int k = 2; k <= 4; k++)
        for (double cap = 22; cap <= 40; cap += 3) {
            kace_group_query q = {.target = target, .k = k, .gpu_memory_gb = cap};
            kace_group_result bb, en;
            assert_kace_ok(ctx, kace_group_best(ctx, ds, kace_model_predictor(model), &q, &bb));
            assert_kace_ok(ctx, kace_group_enumerate(ctx, ds, kace_model_predictor(model), &q, &en));
            assert_same(&bb, &en);
            if (bb.found)
                assert_true(bb.memcap_gb <= cap);
        }
    /* Below the target's own memory nothing can be proposed. */
    kace_group_query q = {.target = target, .k = 2, .gpu_memory_gb = 10};
    kace_group_result r;
    assert_kace_ok(ctx, kace_group_best(ctx, ds, kace_model_predictor(model), &q, &r));
    assert_false(r.found);
}

static bool only_even(void *user, const int *group, int k)
{
    int *calls = user;
    (*calls)++;
    for (int i = 1; i < k; i++)
        if (group[i] % 2)
            return false;
    return true;
}

static void test_filter_restricts_the_choice(void **state)
{
    (void)state;
    int target = 0, calls = 0;
    while (!complete(target))
        target++;
    kace_group_query q = {.target = target, .k = 3, .filter = only_even, .filter_user = &calls};
    kace_group_result bb, en;
    assert_kace_ok(ctx, kace_group_best(ctx, ds, kace_model_predictor(model), &q, &bb));
    assert_kace_ok(ctx, kace_group_enumerate(ctx, ds, kace_model_predictor(model), &q, &en));
    assert_same(&bb, &en);
    assert_true(bb.found);
    assert_true(calls > 0);
    for (int i = 1; i < 3; i++)
        assert_int_equal(bb.workload[i] % 2, 0);
}

static void test_bad_queries(void **state)
{
    (void)state;
    kace_group_result r;
    int t = 0;
    while (!complete(t))
        t++;
    kace_group_query q = {.target = t, .k = 5};
    assert_int_equal(kace_group_best(ctx, ds, kace_model_predictor(model), &q, &r), KACE_ERR_INVALID);
    assert_non_null(strstr(kace_errmsg(ctx), "2..4"));
    q.k = 3;
    q.target = (int)ds->n_workloads;
    assert_int_equal(kace_group_best(ctx, ds, kace_model_predictor(model), &q, &r), KACE_ERR_NOT_FOUND);
    q.target = t;
    q.gpu_memory_gb = -1;
    assert_int_equal(kace_group_enumerate(ctx, ds, kace_model_predictor(model), &q, &r), KACE_ERR_INVALID);
    int bad_pool[1] = {-3};
    kace_group_query p = {.target = t, .k = 2, .pool = bad_pool, .n_pool = 1};
    assert_int_equal(kace_group_best(ctx, ds, kace_model_predictor(model), &p, &r), KACE_ERR_NOT_FOUND);
    assert_int_equal(kace_group_synthesize(ctx, ds, 1, -1, 0), KACE_ERR_INVALID);
}

/* The unprepared tree bound's AVX-512 path (16 trees at once) gives what
 * the walk gives: the same best leaf per tree, summed in another order. */
static void test_unprepared_trees_simd_matches_walk(void **state)
{
    (void)state;
    int was = model->trees.simd;
    if (!kace_trees_use_simd(&model->trees, 1)) {
        printf("no AVX-512 here: only the walk is used\n");
        return;
    }
    int n_metric;
    const kace_metric *metric = kace_slowdown_needed_metrics(&n_metric);
    int inside = 0; /* bounds not clamped to the fraction's range */
    for (int trial = 0; trial < 300; trial++) {
        int member = (int)(n_real + draw(ds->n_workloads - n_real));
        double lo[KACE_N_METRICS] = {0}, hi[KACE_N_METRICS] = {0};
        for (int j = 0; j < n_metric; j++) {
            double a = ds->workloads[n_real + draw(ds->n_workloads - n_real)].metric[metric[j]];
            double b = ds->workloads[n_real + draw(ds->n_workloads - n_real)].metric[metric[j]];
            lo[metric[j]] = fmin(a, b) * (double)draw(2);
            hi[metric[j]] = fmax(a, b) * (double)(1 + draw(3));
        }
        kace_member_bound mb;
        kace_slowdown_member_bound_ridge(model, ds->workloads[member].metric, &mb);
        kace_trees_use_simd(&model->trees, 1);
        double simd = kace_slowdown_member_trees_unprepared(model, &mb, lo, hi);
        kace_trees_use_simd(&model->trees, 0);
        double walk = kace_slowdown_member_trees_unprepared(model, &mb, lo, hi);
        if (!(fabs(simd - walk) <= 1e-12 * walk))
            fail_msg("unprepared tree bound: AVX-512 %.17g, walk %.17g", simd, walk);
        double frac = walk / ds->workloads[member].metric[KACE_M_EXCLUSIVE];
        inside += frac > 0.03 && frac < 1.19;
        kace_slowdown_member_bound_release(&mb);
    }
    kace_trees_use_simd(&model->trees, was);
    printf("%d of 300 tree bounds inside the fraction's range\n", inside);
    assert_true(inside > 30);
}

/* The ridge part's bound is a bound on the ridge prediction anywhere in the
 * box, and nearly reached: with a ridge-only model, a member paired with a
 * probe workload whose metrics lie in the box (ends and inside) never
 * predicts above it, and the point box's bound is within 1e-4 of the
 * prediction. Boxes are wide (up to 3x the pool's metrics), so the share
 * terms' largest values fall inside some, at either end of others; half
 * are narrower (up to 2x), where a convex term's larger end varies. Runs
 * last: it adds the probe workload to the dataset. */
static void test_ridge_bound_covers_ridge_model(void **state)
{
    (void)state;
    int n_metric;
    const kace_metric *metric = kace_slowdown_needed_metrics(&n_metric);
    kace_slowdown_params prm;
    kace_slowdown_params_default(&prm);
    prm.n_rounds = 0;
    prm.tree_weight = 0;
    prm.select = false;
    int *rows = malloc(ds->n_colocations * sizeof *rows);
    for (size_t i = 0; i < ds->n_colocations; i++)
        rows[i] = (int)i;
    kace_model *rm = NULL;
    assert_kace_ok(ctx, kace_model_fit_slowdown(ctx, ds, rows, ds->n_colocations, &prm, &rm));
    free(rows);
    size_t n_pool = ds->n_workloads;
    int probe;
    assert_kace_ok(ctx, kace_dataset_intern(ctx, ds, "ridge-probe", &probe));
    unsigned both_seen = 0;
    int inside = 0;
    for (int trial = 0; trial < 200; trial++) {
        int member = (int)(n_real + draw(n_pool - n_real));
        double lo[KACE_N_METRICS] = {0}, hi[KACE_N_METRICS] = {0};
        for (int j = 0; j < n_metric; j++) {
            double a = ds->workloads[n_real + draw(n_pool - n_real)].metric[metric[j]] * (double)(1 + draw(300)) / 100;
            double b = trial % 2 ? ds->workloads[n_real + draw(n_pool - n_real)].metric[metric[j]] * (double)(1 + draw(300)) / 100
                                 : a * (1 + (double)draw(100) / 100); /* narrower */
            lo[metric[j]] = fmin(a, b);
            hi[metric[j]] = fmax(a, b);
        }
        kace_member_bound mb;
        kace_slowdown_member_bound_ridge(rm, ds->workloads[member].metric, &mb);
        for (int s = 0; s < 5; s++)
            if (mb.both_ends >> s & 1 && trial % 4 == 0) {
                /* a convex share term a*x + c*x/(d + x) with its minimum
                 * inside: a box from 0 to below where it is 0 again, where
                 * the low end is the larger */
                both_seen |= 1u << s;
                lo[metric[s]] = 0;
                hi[metric[s]] = (-mb.c[s] / mb.a[s] - mb.d[s]) * (double)draw(1000) / 1000;
            }
        for (int s = 0; s < 5; s++)
            inside += mb.at[s] > lo[metric[s]] && mb.at[s] < hi[metric[s]];
        double bound = kace_slowdown_member_ridge(rm, &mb, lo, hi);
        for (int s = 0; s < 5; s++) { /* no box inside this one bounds higher: each share at its low end */
            double at_lo[KACE_N_METRICS];
            memcpy(at_lo, hi, sizeof at_lo);
            at_lo[metric[s]] = lo[metric[s]];
            double inner = kace_slowdown_member_ridge(rm, &mb, lo, at_lo);
            if (!(inner <= bound))
                fail_msg("share %d: ridge bound %.17g over the box, %.17g over its low end", s, bound, inner);
        }
        int group[2] = {member, probe};
        memcpy(ds->workloads[probe].metric, ds->workloads[member].metric, sizeof ds->workloads[probe].metric);
        for (int point = 0; point < 60; point++) {
            double *x = ds->workloads[probe].metric;
            for (int j = 0; j < n_metric; j++) {
                double u = point < 2 ? point : (double)draw(1001) / 1000;
                x[metric[j]] = lo[metric[j]] + u * (hi[metric[j]] - lo[metric[j]]);
            }
            double sum, each[KACE_MAX_K];
            assert_kace_ok(ctx, kace_slowdown_predict(ctx, rm, ds, group, 2, &sum, NULL, each));
            if (!(each[0] <= bound))
                fail_msg("ridge prediction %.17g above its bound %.17g", each[0], bound);
            double point_bound = kace_slowdown_member_ridge(rm, &mb, x, x);
            if (!(each[0] <= point_bound && point_bound <= each[0] * (1 + 1e-4)))
                fail_msg("ridge prediction %.17g vs its point bound %.17g", each[0], point_bound);
        }
    }
    printf("share terms largest inside the box: %d times; low end of a convex one: shares %#x\n", inside, both_seen);
    assert_true(inside > 0 && both_seen);
    kace_model_free(&rm);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_equals_enumeration_on_random_pools),
        cmocka_unit_test(test_equals_enumeration_on_large_pools),
        cmocka_unit_test(test_member_bound_covers_predictions),
        cmocka_unit_test(test_bound_parts_nest),
        cmocka_unit_test(test_unprepared_trees_simd_matches_walk),
        cmocka_unit_test(test_find_monotone_by_hand),
        cmocka_unit_test(test_model_monotone_claims_hold),
        cmocka_unit_test(test_memory_cap_is_never_exceeded),
        cmocka_unit_test(test_filter_restricts_the_choice),
        cmocka_unit_test(test_bad_queries),
        cmocka_unit_test(test_ridge_bound_covers_ridge_model),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
