/* The hash indices of lib/base/name_index.c and the lookups built on them:
 * names and 64-bit keys found after many insertions and growths, absent
 * ones not found, the first value kept, the caller's strings not kept;
 * kace_dataset_find through the index (and the search for a dataset filled
 * by hand); kace_store_load_around against a filtered full load of the
 * reference store. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/name_index.h"
#include "kace/dataset.h"
#include "kace/store.h"

static void test_names_many(void **state)
{
    (void)state;
    kace_name_index *ix = kace_name_index_new();
    assert_non_null(ix);
    enum { N = 50000 };
    char name[64];
    for (int i = 0; i < N; i++) {
        /* long shared prefixes, as workload names have */
        snprintf(name, sizeof name, "bert-base-cased_batch%d-train", i);
        int stored = -1;
        assert_true(kace_name_index_add(ix, name, i, &stored));
        assert_int_equal(stored, i);
    }
    assert_int_equal(kace_name_index_count(ix), N);
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof name, "bert-base-cased_batch%d-train", i);
        assert_int_equal(kace_name_index_find(ix, name), i);
        snprintf(name, sizeof name, "bert-base-cased_batch%d-inf", i);
        assert_int_equal(kace_name_index_find(ix, name), -1);
    }
    assert_int_equal(kace_name_index_find(ix, ""), -1);
    assert_int_equal(kace_name_index_find(ix, "bert-base-cased_batch-train"), -1);
    kace_name_index_free(&ix);
    assert_null(ix);
    kace_name_index_free(&ix); /* NULL is fine */
    assert_int_equal(kace_name_index_find(NULL, "x"), -1);
    assert_int_equal(kace_name_index_count(NULL), 0);
}

static void test_names_first_kept_and_copied(void **state)
{
    (void)state;
    kace_name_index *ix = kace_name_index_new();
    assert_non_null(ix);
    char *mine = strdup("vit_h_14_batch2-train");
    assert_non_null(mine);
    int stored = -1;
    assert_true(kace_name_index_add(ix, mine, 7, &stored));
    assert_int_equal(stored, 7);
    assert_true(kace_name_index_add(ix, "vit_h_14_batch2-train", 9, &stored));
    assert_int_equal(stored, 7); /* the earlier value stays */
    assert_int_equal(kace_name_index_count(ix), 1);
    assert_true(kace_name_index_add(ix, "", 3, NULL)); /* the empty name is a name */
    assert_int_equal(kace_name_index_find(ix, ""), 3);
    assert_false(kace_name_index_add(ix, "negative", -1, NULL));
    assert_int_equal(kace_name_index_find(ix, "negative"), -1);
    /* the index holds its own copy */
    memset(mine, 'x', strlen(mine));
    free(mine);
    assert_int_equal(kace_name_index_find(ix, "vit_h_14_batch2-train"), 7);
    kace_name_index_free(&ix);
}

static void test_keys(void **state)
{
    (void)state;
    assert_true(kace_pair_key(3, 5) == kace_pair_key(5, 3));
    assert_true(kace_pair_key(3, 5) != kace_pair_key(3, 6));
    assert_true(kace_pair_key(0, 1) != kace_pair_key(1, 1));
    kace_key_index *ix = kace_key_index_new();
    assert_non_null(ix);
    enum { N = 300 };
    /* every pair (a <= b) of N: 45,150 keys differing in a few low bits */
    int v = 0;
    for (int a = 0; a < N; a++)
        for (int b = a; b < N; b++)
            assert_true(kace_key_index_add(ix, kace_pair_key(b, a), v++, NULL));
    assert_int_equal(kace_key_index_count(ix), (size_t)v);
    v = 0;
    for (int a = 0; a < N; a++)
        for (int b = a; b < N; b++)
            assert_int_equal(kace_key_index_find(ix, kace_pair_key(a, b)), v++);
    assert_int_equal(kace_key_index_find(ix, kace_pair_key(0, N)), -1);
    int stored = -1;
    assert_true(kace_key_index_add(ix, kace_pair_key(1, 2), 99, &stored));
    assert_int_not_equal(stored, 99);
    assert_true(kace_key_index_add(ix, UINT64_MAX, 5, &stored));
    assert_int_equal(kace_key_index_find(ix, UINT64_MAX), 5);
    assert_true(kace_key_index_add(ix, 0, 6, &stored)); /* key 0 = pair (0, 0), the first added */
    assert_int_equal(stored, 0);
    assert_false(kace_key_index_add(ix, 12345678901ull, -2, NULL));
    assert_int_equal(kace_key_index_find(ix, 12345678901ull), -1);
    kace_key_index_free(&ix);
    assert_null(ix);
    assert_int_equal(kace_key_index_find(NULL, 1), -1);
}

static void test_dataset_find(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    kace_dataset *ds = NULL;
    assert_kace_ok(ctx, kace_dataset_new(ctx, &ds));
    enum { N = 20000 };
    char name[64];
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof name, "w%d_batch%d-train", i / 4, 2 << (i % 4));
        int idx = -1;
        assert_kace_ok(ctx, kace_dataset_intern(ctx, ds, name, &idx));
        assert_int_equal(idx, i);
    }
    for (int i = N - 1; i >= 0; i--) {
        snprintf(name, sizeof name, "w%d_batch%d-train", i / 4, 2 << (i % 4));
        int idx = -1;
        assert_int_equal(kace_dataset_find(ds, name), i);
        assert_kace_ok(ctx, kace_dataset_intern(ctx, ds, name, &idx)); /* no new workload */
        assert_int_equal(idx, i);
    }
    assert_int_equal(ds->n_workloads, N);
    assert_int_equal(kace_dataset_find(ds, "w0_batch2-inf"), -1);
    assert_string_equal(ds->workloads[5].family, "w1-train");
    assert_int_equal(ds->workloads[5].batch, 4);
    /* appends keep every colocation */
    for (int i = 0; i < 1000; i++) {
        kace_colocation c = {.k = 2, .workload = {i, N - 1 - i}, .mps_pct = {100, 100}, .throughput = {i, 1}};
        assert_kace_ok(ctx, kace_dataset_add_colocation(ctx, ds, &c));
    }
    assert_int_equal(ds->n_colocations, 1000);
    assert_int_equal(ds->colocations[999].workload[1], N - 1000);
    assert_true(ds->colocations[421].throughput[0] == 421);
    kace_dataset_free(&ds);

    /* A dataset filled by hand (no index) is searched through, then indexed on its first intern. */
    kace_workload w[3];
    memset(w, 0, sizeof w);
    snprintf(w[0].name, sizeof w[0].name, "a");
    snprintf(w[1].name, sizeof w[1].name, "b");
    snprintf(w[2].name, sizeof w[2].name, "c");
    kace_dataset hand = {.workloads = w, .n_workloads = 3};
    assert_int_equal(kace_dataset_find(&hand, "c"), 2);
    assert_int_equal(kace_dataset_find(&hand, "d"), -1);
    kace_ctx_free(&ctx);
}

/* kace_store_load_around gives the named workloads with the profiles and
 * the 100% runs a full load gives them: the runs of the full load whose
 * members are all named and one of them is named (every run here). */
static void test_load_around(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    const char *dir = scratch_dir("test_name_index");
    char db[1024];
    snprintf(db, sizeof db, "%s/around.db", dir);
    remove(db);
    kace_store *s = NULL;
    assert_kace_ok(ctx, kace_store_open(ctx, db, &s));
    /* pairs and triples at 100% MPS, and a raw campaign of other splits (which a load leaves out) */
    static const char *const files[] = {"profiles/system.csv", "colocations/pairs.csv", "colocations/triples.csv",
                                        "colocations/raw/partitions_0505_train-inf.csv"};
    assert_kace_ok(ctx, import_reference(ctx, s, files, 4));
    kace_dataset *full = NULL, *some = NULL, *every = NULL;
    assert_kace_ok(ctx, kace_store_load_dataset(ctx, s, NULL, false, &full));
    const char *names[] = {"bert-base-cased_batch8-train", "bert-base-cased_batch8-inf", "no-such-workload",
                           "albert-base-v2_batch2-train", "bert-base-cased_batch8-train", "whisper-large-v2_batch2-inf"};
    assert_kace_ok(ctx, kace_store_load_around(ctx, s, names, 6, false, &some));
    assert_int_equal(some->n_workloads, 4); /* the unknown one left out, the repeated one once */
    assert_int_equal(kace_dataset_find(some, "no-such-workload"), -1);
    for (size_t i = 0; i < some->n_workloads; i++) {
        int f = kace_dataset_find(full, some->workloads[i].name);
        assert_true(f >= 0);
        for (int m = 0; m < KACE_N_METRICS; m++) {
            double a = full->workloads[f].metric[m], b = some->workloads[i].metric[m];
            assert_true((isnan(a) && isnan(b)) || a == b);
        }
    }
    /* the full load's runs among the named workloads, in order */
    size_t n = 0, with_target = 0;
    for (size_t r = 0; r < full->n_colocations; r++) {
        const kace_colocation *c = &full->colocations[r];
        bool inside = true, all100 = true;
        for (int j = 0; j < c->k; j++) {
            inside &= kace_dataset_find(some, full->workloads[c->workload[j]].name) >= 0;
            all100 &= c->mps_pct[j] == 100;
        }
        if (!inside || !all100)
            continue;
        assert_true(n < some->n_colocations);
        const kace_colocation *d = &some->colocations[n++];
        assert_int_equal(d->k, c->k);
        for (int j = 0; j < c->k; j++) {
            assert_string_equal(some->workloads[d->workload[j]].name, full->workloads[c->workload[j]].name);
            assert_true(d->throughput[j] == c->throughput[j]);
        }
        with_target += kace_colocation_has(d, kace_dataset_find(some, names[0]));
    }
    assert_int_equal(some->n_colocations, n);
    /* the store does hold runs of the named workloads at other splits: those were left out */
    kace_dataset *splits = NULL;
    assert_kace_ok(ctx, kace_store_load_dataset(ctx, s, NULL, true, &splits));
    size_t other_splits = 0;
    for (size_t r = 0; r < splits->n_colocations; r++) {
        const kace_colocation *c = &splits->colocations[r];
        bool inside = true, all100 = true;
        for (int j = 0; j < c->k; j++) {
            inside &= kace_dataset_find(some, splits->workloads[c->workload[j]].name) >= 0;
            all100 &= c->mps_pct[j] == 100;
        }
        other_splits += inside && !all100;
    }
    assert_true(other_splits > 0);
    kace_dataset_free(&splits);
    assert_true(n >= 4 && with_target >= 3); /* the reference data measured these pairs and triples */

    /* every_workload: the full load's workloads and indices; the runs of the target only */
    assert_kace_ok(ctx, kace_store_load_around(ctx, s, names, 1, true, &every));
    assert_int_equal(every->n_workloads, full->n_workloads);
    for (size_t i = 0; i < full->n_workloads; i++) {
        assert_string_equal(every->workloads[i].name, full->workloads[i].name);
        for (int m = 0; m < KACE_N_METRICS; m++) {
            double a = full->workloads[i].metric[m], b = every->workloads[i].metric[m];
            assert_true((isnan(a) && isnan(b)) || a == b);
        }
    }
    int t = kace_dataset_find(full, names[0]);
    size_t of_target = 0;
    for (size_t r = 0; r < full->n_colocations; r++)
        of_target += kace_colocation_has(&full->colocations[r], t);
    assert_int_equal(every->n_colocations, of_target);
    for (size_t r = 0; r < every->n_colocations; r++)
        assert_true(kace_colocation_has(&every->colocations[r], t));
    kace_dataset_free(&every);
    kace_dataset_free(&some);
    /* nothing named: nothing loaded */
    assert_kace_ok(ctx, kace_store_load_around(ctx, s, NULL, 0, false, &some));
    assert_int_equal(some->n_workloads, 0);
    assert_int_equal(some->n_colocations, 0);
    kace_dataset_free(&some);
    kace_dataset_free(&full);
    kace_store_close(&s);
    kace_ctx_free(&ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names_many),
        cmocka_unit_test(test_names_first_kept_and_copied),
        cmocka_unit_test(test_keys),
        cmocka_unit_test(test_dataset_find),
        cmocka_unit_test(test_load_around),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
