/* MPS split advisor on the reference campaigns (partitions_*): leave-one-
 * pair-out quality against the measured grids, no advised pair in its own
 * training, predictions and errors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kace/split.h"
#include "kace/store.h"
#include "testutil.h"

static kace_ctx *ctx;
static kace_dataset *ds;
static kace_split_grid *grids;
static size_t n_grids;

static const char *const campaigns[] = {"partitions_0505_train-inf", "partitions_0520_inf-inf",
                                        "partitions_0520_train-train", "partitions_0617_train-inf"};

static int setup(void **state)
{
    (void)state;
    ctx = kace_ctx_new();
    kace_store *store = NULL;
    char db[4096], rel[256];
    snprintf(db, sizeof db, "%s/kace.db", scratch_dir("split"));
    if (kace_store_open(ctx, db, &store))
        return -1;
    static const char *const files[] = {"profiles/system.csv", "profiles/exclusive_by_mps_pct.csv",
                                        "colocations/pairs.csv"};
    for (size_t i = 0; i < 3 + 4; i++) {
        if (i < 3)
            snprintf(rel, sizeof rel, "%s", files[i]);
        else
            snprintf(rel, sizeof rel, "colocations/raw/%s.csv", campaigns[i - 3]);
        kace_import_batch *b = NULL;
        if (kace_import_parse_file(ctx, ref_path(rel), NULL, &b) || kace_store_import(ctx, store, b, NULL, NULL)) {
            fprintf(stderr, "%s\n", kace_errmsg(ctx));
            return -1;
        }
        kace_import_batch_free(&b);
    }
    if (kace_store_load_dataset(ctx, store, "pairs", false, &ds))
        return -1;
    for (int c = 0; c < 4; c++) {
        kace_dataset *camp = NULL;
        if (kace_store_load_dataset(ctx, store, campaigns[c], true, &camp) ||
            kace_split_grids_collect(ctx, camp, ds, c, &grids, &n_grids))
            return -1;
        kace_dataset_free(&camp);
    }
    kace_store_close(&store);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    free(grids);
    kace_dataset_free(&ds);
    kace_ctx_free(&ctx);
    return 0;
}

static void test_leave_one_pair_out_quality(void **state)
{
    (void)state;
    kace_split_eval *e = NULL;
    assert_kace_ok(ctx, kace_split_evaluate(ctx, ds, grids, n_grids, &e));
    printf("%zu grids, %zu cases, %zu pairs (one fit each)\n", n_grids, e->n, e->n_pairs);
    printf("max-sum: advisor %.4f, fixed 50/50 %.4f, 100/100 %.4f of Oracle\n", e->advisor[0], e->fixed50[0],
           e->fixed100[0]);
    printf("max-min: advisor %.4f, fixed 50/50 %.4f, 100/100 %.4f of Oracle\n", e->advisor[1], e->fixed50[1],
           e->fixed100[1]);
    for (int t = 0; t < KACE_SPLIT_N_LS_TARGETS; t++)
        printf("LS >= %.0f%%: met %.4f of %zu (50/50 %.4f, 100/100 %.4f), best effort %.4f of Oracle\n",
               100 * kace_split_ls_targets[t], e->ls_met_rate[t], e->ls_cases[t], e->ls_met50_rate[t],
               e->ls_met100_rate[t], e->ls_be[t]);
    assert_true(e->n > 200);
    for (size_t i = 0; i < e->n; i++) {
        /* The advised pair never trains its own model. */
        assert_int_equal(e->cases[i].n_train_same_pair, 0);
        const kace_split_grid *g = &grids[e->cases[i].grid];
        size_t *rows = malloc(n_grids * sizeof *rows);
        size_t n = kace_split_training_rows(grids, n_grids, g->workload[0], g->workload[1], rows);
        assert_int_equal(n, e->cases[i].n_train);
        for (size_t r = 0; r < n; r++) {
            const int *w = grids[rows[r]].workload;
            assert_false((w[0] == g->workload[0] && w[1] == g->workload[1]) ||
                         (w[0] == g->workload[1] && w[1] == g->workload[0]));
        }
        free(rows);
        assert_true(e->cases[i].advisor[0] <= 1 + 1e-12 && e->cases[i].advisor[1] <= 1 + 1e-12);
    }
    /* Reached on the reference data, with a margin: the advisor beats both
     * fixed splits under each policy. */
    assert_true(e->advisor[0] > e->fixed50[0] && e->advisor[0] > e->fixed100[0]);
    assert_true(e->advisor[1] > e->fixed50[1] && e->advisor[1] > e->fixed100[1]);
    kace_split_eval_free(&e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_leave_one_pair_out_quality),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
