/* The KACE paper's published numbers, recomputed from ../shared/data/kace-v100
 * through the whole stack: import into a fresh store, load, evaluate. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kace/eval.h"
#include "kace/store.h"
#include "testutil.h"

static kace_ctx *ctx;
static kace_store *store;
static kace_dataset *pairs, *triples;
static kace_splits *splits;

static void import_file(const char *rel)
{
    kace_import_batch *b = NULL;
    assert_kace_ok(ctx, kace_import_parse_file(ctx, ref_path(rel), NULL, &b));
    assert_kace_ok(ctx, kace_store_import(ctx, store, b, NULL, NULL));
    kace_import_batch_free(&b);
}

static int setup(void **state)
{
    (void)state;
    ctx = kace_ctx_new();
    char db[4096];
    snprintf(db, sizeof db, "%s/kace.db", scratch_dir("reproduce"));
    if (kace_store_open(ctx, db, &store))
        return -1;
    static const char *const kernel[] = {
        "albert-base-v2_batch16-train", "albert-base-v2_batch2-train", "albert-base-v2_batch8-train",
        "bert-base-cased_batch16-inf", "bert-base-cased_batch16-train", "bert-base-cased_batch2-inf",
        "bert-base-cased_batch2-train", "bert-base-cased_batch8-inf", "bert-base-cased_batch8-train",
        "vit-base-patch16-224_batch16-inf", "vit-base-patch16-224_batch2-inf", "vit-base-patch16-224_batch8-inf",
        "vit_h_14_batch16-train", "vit_h_14_batch2-train", "vit_h_14_batch8-train", "wav2vec2-base-960h_batch16-inf",
        "wav2vec2-base-960h_batch2-inf", "wav2vec2-base-960h_batch8-inf", "whisper-large-v2_batch16-inf",
        "whisper-large-v2_batch2-inf", "whisper-large-v2_batch8-inf"};
    for (size_t i = 0; i < sizeof kernel / sizeof *kernel; i++) {
        char rel[256];
        snprintf(rel, sizeof rel, "profiles/kernel/%s.csv", kernel[i]);
        import_file(rel);
        snprintf(rel, sizeof rel, "profiles/kernel-xu/%s.csv", kernel[i]);
        import_file(rel);
    }
    import_file("profiles/system.csv");
    import_file("profiles/system-xu.csv");
    import_file("colocations/pairs.csv");
    import_file("colocations/triples.csv");
    import_file("splits.csv");
    if (kace_store_load_dataset(ctx, store, "pairs", false, &pairs) ||
        kace_store_load_dataset(ctx, store, "triples", false, &triples) ||
        kace_store_load_splits(ctx, store, pairs, &splits))
        return -1;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    kace_splits_free(&splits);
    kace_dataset_free(&pairs);
    kace_dataset_free(&triples);
    kace_store_close(&store);
    kace_ctx_free(&ctx);
    return 0;
}

static void assert_3dp(double got, double want, const char *what)
{
    if (fabs(got - want) > 0.0005 + 1e-12)
        fail_msg("%s: got %.4f, the paper reports %.3f", what, got, want);
}

static void test_dataset_shape(void **state)
{
    (void)state;
    assert_int_equal(pairs->n_colocations, 181);
    assert_int_equal(triples->n_colocations, 400);
    assert_int_equal(splits->n, 8145);
}

static kace_split_results *run(kace_eval_mode mode)
{
    kace_eval_options opt;
    kace_eval_options_default(&opt);
    opt.mode = mode;
    opt.with_xu = false;
    kace_split_results *r = NULL;
    assert_kace_ok(ctx, kace_eval_splits(ctx, pairs, splits, &opt, &r));
    return r;
}

static void test_paper_mode_n_occur_3(void **state)
{
    (void)state;
    kace_split_results *r = run(KACE_MODE_PAPER);
    assert_int_equal(r->n, 45);
    assert_3dp(kace_eval_mean(r, 3, KACE_POL_KACE), 0.906, "KACE");
    assert_3dp(kace_eval_mean(r, 3, KACE_POL_BEST_RULE), 0.837, "Best rule");
    assert_3dp(kace_eval_mean(r, 3, KACE_POL_MEMCAP), 0.785, "MEMCAP");
    assert_3dp(kace_eval_mean(r, 3, KACE_POL_SM), 0.354, "SM%");
    assert_3dp(kace_eval_mean(r, 3, KACE_POL_MEM), 0.718, "MEM%");
    assert_3dp(kace_eval_mean(r, 3, KACE_POL_RANDOM), 0.543, "Random");
    assert_3dp(kace_eval_mean(r, 3, KACE_POL_ORACLE), 1.000, "Oracle");
    kace_split_results_free(&r);
}

static void test_paper_mode_training_size(void **state)
{
    (void)state;
    static const double kace[] = {0.876, 0.906, 0.921, 0.930, 0.921, 0.940, 0.930, 0.957, 0.946};
    static const double best[] = {0.825, 0.837, 0.862, 0.866, 0.883, 0.890, 0.898, 0.914, 0.937};
    kace_split_results *r = run(KACE_MODE_PAPER);
    for (int n = 2; n <= 10; n++) {
        char what[64];
        snprintf(what, sizeof what, "KACE at n_occur=%d", n);
        assert_3dp(kace_eval_mean(r, n, KACE_POL_KACE), kace[n - 2], what);
        snprintf(what, sizeof what, "Best rule at n_occur=%d", n);
        assert_3dp(kace_eval_mean(r, n, KACE_POL_BEST_RULE), best[n - 2], what);
    }
    /* Paper mode fits only the paper_fit rows: ~80% of the training rows. */
    for (size_t i = 0; i < r->n; i++)
        assert_true(r->items[i].n_fit < r->items[i].n_train);
    kace_split_results_free(&r);
}

static void test_clean_mode(void **state)
{
    (void)state;
    kace_split_results *r = run(KACE_MODE_CLEAN);
    assert_3dp(kace_eval_mean(r, 3, KACE_POL_KACE), 0.918, "clean-mode KACE");
    for (size_t i = 0; i < r->n; i++)
        assert_int_equal(r->items[i].n_fit, r->items[i].n_train);
    kace_split_results_free(&r);
}

static void test_unseen_families(void **state)
{
    (void)state;
    kace_eval_options opt;
    kace_eval_options_default(&opt);
    opt.with_xu = false;
    kace_target_score *modes[2], *t;
    size_t n = 0;
    assert_kace_ok(ctx, kace_eval_unseen(ctx, pairs, &opt, modes, &n, NULL));
    t = modes[KACE_MODE_PAPER];
    assert_int_equal(n, 21);
    double kace = 0, memcap = 0;
    for (size_t i = 0; i < n; i++) {
        kace += t[i].score[KACE_POL_KACE] / (double)n;
        memcap += t[i].score[KACE_POL_MEMCAP] / (double)n;
    }
    if (fabs(kace - 0.888) > 0.01)
        fail_msg("unseen KACE %.4f is not within 0.01 of the paper's 0.888", kace);
    assert_3dp(memcap, 0.793, "unseen MEMCAP");
    /* Clean mode scales candidates with training statistics: 0.795. */
    double clean = 0;
    for (size_t i = 0; i < n; i++)
        clean += modes[KACE_MODE_CLEAN][i].score[KACE_POL_KACE] / (double)n;
    assert_3dp(clean, 0.795, "unseen KACE, clean mode");
    free(modes[0]);
    free(modes[1]);
}

/* opt.one_mode (kace eval --mode paper or clean): the asked mode's scores are
 * those of a run scoring both, bit for bit; the other mode's rows name their
 * targets and hold NaN. */
static void test_unseen_one_mode(void **state)
{
    (void)state;
    kace_eval_options opt;
    kace_eval_options_default(&opt);
    opt.with_xu = false;
    opt.with_slowdown = false;
    kace_target_score *both[2], *one[2];
    size_t n = 0, n_one = 0;
    assert_kace_ok(ctx, kace_eval_unseen(ctx, pairs, &opt, both, &n, NULL));
    assert_int_equal(n, 21);
    opt.one_mode = true;
    for (int mode = 0; mode < 2; mode++) {
        opt.mode = (kace_eval_mode)mode;
        assert_kace_ok(ctx, kace_eval_unseen(ctx, pairs, &opt, one, &n_one, NULL));
        assert_int_equal(n_one, n);
        for (size_t i = 0; i < n; i++) {
            assert_memory_equal(&one[mode][i], &both[mode][i], sizeof one[mode][i]);
            assert_int_equal(one[1 - mode][i].target, both[1 - mode][i].target);
            for (int p = 0; p < KACE_N_POLICIES; p++)
                assert_true(isnan(one[1 - mode][i].score[p]));
        }
        free(one[0]);
        free(one[1]);
    }
    free(both[0]);
    free(both[1]);
}

static void test_triples(void **state)
{
    (void)state;
    kace_eval_options opt;
    kace_eval_options_default(&opt);
    opt.with_xu = false;
    kace_target_score *modes[2], *t;
    size_t n = 0;
    assert_kace_ok(ctx, kace_eval_unseen(ctx, triples, &opt, modes, &n, NULL));
    t = modes[KACE_MODE_PAPER];
    assert_int_equal(n, 14);
    double kace = 0, memcap = 0, mem = 0, sm = 0, rnd = 0;
    for (size_t i = 0; i < n; i++) {
        kace += t[i].score[KACE_POL_KACE] / (double)n;
        memcap += t[i].score[KACE_POL_MEMCAP] / (double)n;
        mem += t[i].score[KACE_POL_MEM] / (double)n;
        sm += t[i].score[KACE_POL_SM] / (double)n;
        rnd += t[i].score[KACE_POL_RANDOM] / (double)n;
    }
    if (fabs(kace - 0.958) > 0.01)
        fail_msg("3-way KACE %.4f is not within 0.01 of the paper's 0.958", kace);
    assert_3dp(memcap, 0.630, "3-way MEMCAP");
    assert_3dp(mem, 0.748, "3-way MEM%");
    assert_3dp(sm, 0.237, "3-way SM%");
    assert_3dp(rnd, 0.432, "3-way Random");
    free(modes[0]);
    free(modes[1]);
}

/* Xu et al. at n_occur=3: a random forest is not bit-identical across
 * libraries, so within 0.03 of the published 0.813. */
static void test_xu_n_occur_3(void **state)
{
    (void)state;
    kace_splits only3 = {malloc(splits->n * sizeof *splits->rows), 0};
    assert_non_null(only3.rows);
    for (size_t i = 0; i < splits->n; i++)
        if (splits->rows[i].n_occur == 3)
            only3.rows[only3.n++] = splits->rows[i];
    kace_eval_options opt;
    kace_eval_options_default(&opt);
    kace_split_results *r = NULL;
    assert_kace_ok(ctx, kace_eval_splits(ctx, pairs, &only3, &opt, &r));
    double xu = kace_eval_mean(r, 3, KACE_POL_XU);
    printf("Xu et al. at n_occur=3, paper mode: %.4f (paper 0.813)\n", xu);
    if (!(fabs(xu - 0.813) <= 0.03))
        fail_msg("Xu et al. %.4f is not within 0.03 of 0.813", xu);
    kace_split_results_free(&r);
    free(only3.rows);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dataset_shape),       cmocka_unit_test(test_paper_mode_n_occur_3),
        cmocka_unit_test(test_paper_mode_training_size), cmocka_unit_test(test_clean_mode),
        cmocka_unit_test(test_unseen_families),     cmocka_unit_test(test_unseen_one_mode),
        cmocka_unit_test(test_triples),
        cmocka_unit_test(test_xu_n_occur_3),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
