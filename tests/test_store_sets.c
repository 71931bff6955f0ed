/* kace_store_load_datasets (several sets in one read, as kace eval reads the
 * pairs and the triples) against one kace_store_load_dataset per set on the
 * reference store: the same workloads (names, families, every profile value,
 * bit for bit), the same colocations in the same order, with and without
 * all_splits, named sets only (one query with IN) and NULL (every set)
 * among them, a set named twice; an unknown set is empty. */
#include "testutil.h"

#include <sqlite3.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kace/dataset.h"
#include "kace/store.h"

static void assert_same_dataset(const kace_dataset *a, const kace_dataset *b, const char *what)
{
    if (a->n_workloads != b->n_workloads || a->n_colocations != b->n_colocations)
        fail_msg("%s: %zu workloads, %zu colocations; one at a time: %zu, %zu", what, a->n_workloads,
                 a->n_colocations, b->n_workloads, b->n_colocations);
    assert_memory_equal(a->workloads, b->workloads, a->n_workloads * sizeof *a->workloads);
    if (a->n_colocations)
        assert_memory_equal(a->colocations, b->colocations, a->n_colocations * sizeof *a->colocations);
}

/* The successful runs of set in the store (all of them, or those with every
 * member at 100% MPS), counted by SQLite itself. */
static size_t count_runs(const char *db, const char *set, bool all_splits)
{
    sqlite3 *h = NULL;
    sqlite3_stmt *q = NULL;
    assert_int_equal(sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(h,
                                        "SELECT count(*) FROM runs r WHERE r.status='ok' AND r.set_name=?1 AND (?2 OR "
                                        "NOT EXISTS (SELECT 1 FROM run_members m WHERE m.run_id=r.id AND m.mps_pct<>100))",
                                        -1, &q, NULL),
                     SQLITE_OK);
    sqlite3_bind_text(q, 1, set, -1, SQLITE_STATIC);
    sqlite3_bind_int(q, 2, all_splits);
    assert_int_equal(sqlite3_step(q), SQLITE_ROW);
    size_t n = (size_t)sqlite3_column_int64(q, 0);
    sqlite3_finalize(q);
    sqlite3_close(h);
    return n;
}

static void test_sets_at_once(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    const char *dir = scratch_dir("test_store_sets");
    char db[1024];
    snprintf(db, sizeof db, "%s/sets.db", dir);
    remove(db);
    kace_store *s = NULL;
    assert_kace_ok(ctx, kace_store_open(ctx, db, &s));
    static const char *const files[] = {"profiles/system.csv", "colocations/pairs.csv", "colocations/triples.csv",
                                        "colocations/raw/partitions_0505_train-inf.csv"};
    assert_kace_ok(ctx, import_reference(ctx, s, files, 4));
    const char *sets[] = {"pairs", "triples", NULL, "partitions_0505_train-inf", "no-such-set"};
    enum { N = sizeof sets / sizeof *sets };
    size_t campaign_100 = 0;
    /* Named sets only (one query over those sets), a set twice among them. */
    const char *named[] = {"triples", "pairs", "no-such-set", "pairs"};
    enum { N_NAMED = sizeof named / sizeof *named };
    kace_dataset *some[N_NAMED], *one = NULL;
    assert_kace_ok(ctx, kace_store_load_datasets(ctx, s, named, N_NAMED, false, some));
    for (int i = 0; i < N_NAMED; i++) {
        assert_kace_ok(ctx, kace_store_load_dataset(ctx, s, named[i], false, &one));
        assert_same_dataset(some[i], one, named[i]);
        assert_int_equal(some[i]->n_colocations, count_runs(db, named[i], false));
        kace_dataset_free(&one);
    }
    assert_true(some[0]->n_colocations > 100 && some[1]->n_colocations > 100 && some[2]->n_colocations == 0);
    for (int i = 0; i < N_NAMED; i++)
        kace_dataset_free(&some[i]);
    /* Every set (NULL) among them: no set filter in the query. */
    for (int all_splits = 0; all_splits < 2; all_splits++) {
        kace_dataset *many[N];
        assert_kace_ok(ctx, kace_store_load_datasets(ctx, s, sets, N, all_splits, many));
        for (int i = 0; i < N; i++) {
            assert_kace_ok(ctx, kace_store_load_dataset(ctx, s, sets[i], all_splits, &one));
            char what[128];
            snprintf(what, sizeof what, "set %s, all_splits %d", sets[i] ? sets[i] : "(every)", all_splits);
            assert_same_dataset(many[i], one, what);
            if (sets[i])
                assert_int_equal(many[i]->n_colocations, count_runs(db, sets[i], all_splits));
            kace_dataset_free(&one);
        }
        /* the sets hold what they should: pairs of 2, triples of 3 */
        assert_true(many[0]->n_colocations > 100 && many[0]->colocations[0].k == 2);
        assert_true(many[1]->n_colocations > 100 && many[1]->colocations[0].k == 3);
        assert_true(many[2]->n_colocations >= many[0]->n_colocations + many[1]->n_colocations);
        /* the raw campaign: its all-100% MPS runs alone, every successful run with all_splits */
        if (all_splits)
            assert_true(many[3]->n_colocations > campaign_100);
        else
            campaign_100 = many[3]->n_colocations;
        assert_int_equal(many[4]->n_colocations, 0);
        assert_true(many[4]->n_workloads > 0 && !isnan(many[4]->workloads[0].metric[KACE_M_SM_PCT]));
        for (int i = 0; i < N; i++)
            kace_dataset_free(&many[i]);
    }
    kace_store_close(&s);
    kace_ctx_free(&ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sets_at_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
