/* The SQLite store (lib/store/store.c): schema creation and versioning, refusal of
 * foreign and newer databases, idempotent imports with their statistics,
 * all-or-nothing batches, loading the reference data back, sources of
 * profile values, and a clear failure (not a hang) on a locked database. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sqlite3.h>

#include "kace/predictor.h"

#include "kace/kernels.h"
#include "kace/store.h"

/* ---- helpers ---------------------------------------------------------------- */

static char *db_path(const char *test, const char *name)
{
    const char *dir = scratch_dir(test);
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    assert_non_null(p);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static sqlite3 *raw_open(const char *path)
{
    sqlite3 *db = NULL;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL) != SQLITE_OK)
        fail_msg("sqlite3_open %s: %s", path, db ? sqlite3_errmsg(db) : "?");
    return db;
}

static void raw_exec(sqlite3 *db, const char *sql)
{
    char *err = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", err ? err : "?");
        sqlite3_free(err);
        fail_msg("%s: %s", sql, msg);
    }
}

/* First column of the first row as text ("" when no row / NULL). */
static char *raw_query(const char *path, const char *sql)
{
    static char out[512];
    sqlite3 *db = raw_open(path);
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(db, sql, -1, &q, NULL) != SQLITE_OK)
        fail_msg("%s: %s", sql, sqlite3_errmsg(db));
    out[0] = '\0';
    if (sqlite3_step(q) == SQLITE_ROW && sqlite3_column_text(q, 0))
        snprintf(out, sizeof out, "%s", (const char *)sqlite3_column_text(q, 0));
    sqlite3_finalize(q);
    sqlite3_close(db);
    return out;
}

static kace_import_batch *parse_text(kace_ctx *ctx, const char *text, const char *origin)
{
    kace_import_batch *b = NULL;
    assert_kace_ok(ctx, kace_import_parse_buffer(ctx, text, strlen(text), origin, NULL, &b));
    return b;
}

static kace_import_stats import_text(kace_ctx *ctx, kace_store *s, const char *text, const char *origin)
{
    kace_import_batch *b = parse_text(ctx, text, origin);
    kace_import_stats st;
    memset(&st, 0xAB, sizeof st);
    assert_kace_ok(ctx, kace_store_import(ctx, s, b, NULL, &st));
    kace_import_batch_free(&b);
    return st;
}

static void import_file(kace_ctx *ctx, kace_store *s, const char *rel)
{
    kace_import_batch *b = NULL;
    assert_kace_ok(ctx, kace_import_parse_file(ctx, ref_path(rel), NULL, &b));
    assert_kace_ok(ctx, kace_store_import(ctx, s, b, NULL, NULL));
    kace_import_batch_free(&b);
}

static void assert_counts(kace_ctx *ctx, kace_store *s, size_t workloads, size_t values, size_t runs, size_t splits,
                          size_t models)
{
    kace_store_counts c;
    assert_kace_ok(ctx, kace_store_count(ctx, s, &c));
    if (c.workloads != workloads || c.profile_values != values || c.runs != runs || c.splits != splits ||
        c.models != models)
        fail_msg("counts workloads %zu values %zu runs %zu splits %zu models %zu, expected %zu %zu %zu %zu %zu",
                 c.workloads, c.profile_values, c.runs, c.splits, c.models, workloads, values, runs, splits, models);
}

static double seconds_since(const struct timespec *t0)
{
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) + (double)(t1.tv_nsec - t0->tv_nsec) * 1e-9;
}

#define KERNEL_HDR "Threads,Compute (SM) Throughput,DRAM Throughput,Memory Throughput,Registers,Static Shared Memory,Type\n"
#define SYSTEM_TEXT                                                                                                 \
    "Type,Exclusive100,sm%,mem%,memcap,Exclusive50\n"                                                              \
    "a_batch2-inf,10,50,20,4,\n"                                                                                    \
    "b_batch8-train,20,60,30,8,12.5\n"
#define PAIRS_TEXT                                                                                                  \
    "workload1,workload2,w1throughput,w2throughput,w1_Threads,w2_Threads\n"                                        \
    "a_batch2-inf,b_batch8-train,5,7,999,2000\n"                                                                    \
    "a_batch2-inf,a_batch2-inf,4,4.5,999,999\n"
#define SPLITS_HDR "n_occur,seed,set,workload1,workload2,paper_fit\n"

/* ---- schema ------------------------------------------------------------------ */

static void test_open_creates_schema(void **state)
{
    (void)state;
    char *path = db_path("store_schema", "nested/folder/kace.db"); /* parent folders are created */
    kace_ctx *ctx = kace_ctx_new();
    kace_store *s = NULL;
    assert_kace_ok(ctx, kace_store_open(ctx, path, &s));
    assert_non_null(s);
    assert_counts(ctx, s, 0, 0, 0, 0, 0);
    kace_store_close(&s);
    assert_null(s);
    kace_store_close(&s); /* closing NULL is fine */

    char want[16];
    snprintf(want, sizeof want, "%d", KACE_STORE_SCHEMA_VERSION);
    assert_string_equal(raw_query(path, "SELECT value FROM meta WHERE key='schema_version'"), want);
    static const char *const tables[] = {"meta", "workloads", "sources", "profiles", "runs", "run_members", "splits",
                                         "models"};
    for (size_t i = 0; i < sizeof tables / sizeof *tables; i++) {
        char sql[160];
        snprintf(sql, sizeof sql, "SELECT count(*) FROM sqlite_master WHERE type='table' AND name='%s'", tables[i]);
        if (strcmp(raw_query(path, sql), "1") != 0)
            fail_msg("table %s was not created", tables[i]);
    }

    /* Reopening keeps the data and the schema version (no second meta row). */
    assert_kace_ok(ctx, kace_store_open(ctx, path, &s));
    import_text(ctx, s, SYSTEM_TEXT, "system.csv");
    assert_counts(ctx, s, 2, 10, 0, 0, 0);
    kace_store_close(&s);
    assert_kace_ok(ctx, kace_store_open(ctx, path, &s));
    assert_counts(ctx, s, 2, 10, 0, 0, 0);
    kace_store_close(&s);
    assert_string_equal(raw_query(path, "SELECT count(*) FROM meta WHERE key='schema_version'"), "1");
    assert_string_equal(raw_query(path, "SELECT value FROM meta WHERE key='schema_version'"), want);
    kace_ctx_free(&ctx);
    free(path);
}

static void test_refuses_foreign_and_newer(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    kace_store *s = (kace_store *)(uintptr_t)1;

    /* A SQLite database of some other program. */
    char *foreign = db_path("store_foreign", "other.db");
    sqlite3 *db = raw_open(foreign);
    raw_exec(db, "CREATE TABLE customers(id INTEGER PRIMARY KEY, name TEXT); INSERT INTO customers VALUES(1, 'x');");
    sqlite3_close(db);
    assert_int_equal(kace_store_open(ctx, foreign, &s), KACE_ERR_STORE);
    assert_null(s);
    assert_non_null(strstr(kace_errmsg(ctx), foreign));
    assert_non_null(strstr(kace_errmsg(ctx), "not a kace store"));
    /* ... and it was left alone. */
    assert_string_equal(raw_query(foreign, "SELECT count(*) FROM sqlite_master"), "1");
    assert_string_equal(raw_query(foreign, "SELECT name FROM customers"), "x");

    /* A file that is not SQLite at all. */
    char *text = db_path("store_text", "notes.db");
    free(write_file(scratch_dir("store_text"), "notes.db",
                    "these are notes, not a database; long enough to be more than a header........\n"));
    s = (kace_store *)(uintptr_t)1;
    assert_int_equal(kace_store_open(ctx, text, &s), KACE_ERR_STORE);
    assert_null(s);
    assert_non_null(strstr(kace_errmsg(ctx), text));

    /* A kace store written by a newer kace. */
    char *newer = db_path("store_newer", "kace.db");
    assert_kace_ok(ctx, kace_store_open(ctx, newer, &s));
    kace_store_close(&s);
    db = raw_open(newer);
    char sql[128];
    snprintf(sql, sizeof sql, "UPDATE meta SET value='%d' WHERE key='schema_version'", KACE_STORE_SCHEMA_VERSION + 1);
    raw_exec(db, sql);
    sqlite3_close(db);
    s = (kace_store *)(uintptr_t)1;
    assert_int_equal(kace_store_open(ctx, newer, &s), KACE_ERR_STORE);
    assert_null(s);
    assert_non_null(strstr(kace_errmsg(ctx), newer));
    assert_non_null(strstr(kace_errmsg(ctx), "newer"));
    /* The version was not rewritten. */
    char want[16];
    snprintf(want, sizeof want, "%d", KACE_STORE_SCHEMA_VERSION + 1);
    assert_string_equal(raw_query(newer, "SELECT value FROM meta WHERE key='schema_version'"), want);

    free(foreign);
    free(text);
    free(newer);
    kace_ctx_free(&ctx);
}

/* ---- import ------------------------------------------------------------------ */

static void test_import_stats_and_idempotence(void **state)
{
    (void)state;
    char *path = db_path("store_stats", "kace.db");
    kace_ctx *ctx = kace_ctx_new();
    kace_store *s = NULL;
    assert_kace_ok(ctx, kace_store_open(ctx, path, &s));

    kace_import_stats st = import_text(ctx, s, SYSTEM_TEXT, "profiles/system.csv");
    assert_int_equal(st.values_added, 10);
    assert_int_equal(st.values_updated, 0);
    assert_int_equal(st.values_unchanged, 0);
    assert_int_equal(st.runs_added + st.runs_unchanged + st.splits_added + st.splits_unchanged, 0);
    st = import_text(ctx, s, SYSTEM_TEXT, "profiles/system.csv");
    assert_int_equal(st.values_added, 0);
    assert_int_equal(st.values_updated, 0);
    assert_int_equal(st.values_unchanged, 10); /* the missing Exclusive50 too */
    assert_counts(ctx, s, 2, 10, 0, 0, 0);

    /* Colocations: 2 runs, 4 embedded Threads values of which a's is the
     * same for both rows. */
    st = import_text(ctx, s, PAIRS_TEXT, "colocations/pairs.csv");
    assert_int_equal(st.runs_added, 2);
    assert_int_equal(st.runs_unchanged, 0);
    assert_int_equal(st.values_added, 2);     /* a/Threads, b/Threads */
    assert_int_equal(st.values_unchanged, 2); /* a/Threads again (twice) */
    st = import_text(ctx, s, PAIRS_TEXT, "colocations/pairs.csv");
    assert_int_equal(st.runs_added, 0);
    assert_int_equal(st.runs_unchanged, 2);
    assert_int_equal(st.values_added + st.values_updated, 0);
    assert_int_equal(st.values_unchanged, 4);
    assert_counts(ctx, s, 2, 12, 2, 0, 0);

    /* A kernel profile overrides the embedded Threads (an update) ... */
    st = import_text(ctx, s, KERNEL_HDR "100,1,2,3,4,5,a_batch2-inf\n", "profiles/kernel/a_batch2-inf.csv");
    assert_int_equal(st.values_added, 5);
    assert_int_equal(st.values_updated, 1);
    assert_int_equal(st.values_unchanged, 0);
    /* ... and re-importing the colocations does not put the embedded one back. */
    st = import_text(ctx, s, PAIRS_TEXT, "colocations/pairs.csv");
    assert_int_equal(st.values_added + st.values_updated, 0);
    assert_string_equal(raw_query(path, "SELECT p.value FROM profiles p JOIN workloads w ON w.id=p.workload_id "
                                        "WHERE w.name='a_batch2-inf' AND p.metric='Threads'"),
                        "100.0");

    /* Splits: added, then unchanged. */
    const char *splits = SPLITS_HDR "2,10,train,a_batch2-inf,b_batch8-train,1\n"
                                    "2,20,test,b_batch8-train,a_batch2-inf,\n"; /* unordered match */
    st = import_text(ctx, s, splits, "splits.csv");
    assert_int_equal(st.splits_added, 2);
    assert_int_equal(st.splits_unchanged, 0);
    st = import_text(ctx, s, splits, "splits.csv");
    assert_int_equal(st.splits_added, 0);
    assert_int_equal(st.splits_unchanged, 2);
    assert_counts(ctx, s, 2, 17, 2, 2, 0);

    /* The same run in another file is another set's run. */
    st = import_text(ctx, s, PAIRS_TEXT, "colocations/pairs-again.csv");
    assert_int_equal(st.runs_added, 2);
    kace_set_info *sets = NULL;
    size_t n_sets = 0;
    assert_kace_ok(ctx, kace_store_list_sets(ctx, s, &sets, &n_sets));
    assert_int_equal(n_sets, 2);
    assert_string_equal(sets[0].name, "pairs");
    assert_string_equal(sets[1].name, "pairs-again");
    assert_int_equal(sets[0].k, 2);
    assert_int_equal(sets[0].n_runs, 2);
    free(sets);

    kace_store_close(&s);
    kace_ctx_free(&ctx);
    free(path);
}

/* Appends to a hand-built batch (the struct is public). */
static void *grow_array(void *p, size_t n, size_t size)
{
    void *q = realloc(p, (n + 1) * size);
    assert_non_null(q);
    return q;
}

static void test_failed_batch_rolls_back(void **state)
{
    (void)state;
    char *path = db_path("store_rollback", "kace.db");
    kace_ctx *ctx = kace_ctx_new();
    kace_store *s = NULL;
    assert_kace_ok(ctx, kace_store_open(ctx, path, &s));
    import_text(ctx, s, SYSTEM_TEXT, "system.csv");
    import_text(ctx, s, PAIRS_TEXT, "pairs.csv");
    assert_counts(ctx, s, 2, 12, 2, 0, 0);
    char before[512];
    snprintf(before, sizeof before, "%s",
             raw_query(path, "SELECT group_concat(id || name) FROM (SELECT * FROM workloads ORDER BY id)"));

    /* A splits file whose first row is good and whose third names a pair
     * never measured: nothing of it may stay. */
    kace_import_batch *b = parse_text(ctx,
                                      SPLITS_HDR "2,10,train,a_batch2-inf,b_batch8-train,1\n"
                                                 "2,10,test,a_batch2-inf,a_batch2-inf,\n"
                                                 "2,10,train,b_batch8-train,b_batch8-train,0\n",
                                      "dir/splits.csv");
    kace_import_stats stats;
    memset(&stats, 0, sizeof stats);
    assert_int_equal(kace_store_import(ctx, s, b, NULL, &stats), KACE_ERR_NOT_FOUND);
    assert_non_null(strstr(kace_errmsg(ctx), "dir/splits.csv:4:1: "));
    assert_non_null(strstr(kace_errmsg(ctx), "b_batch8-train"));
    kace_import_batch_free(&b);
    assert_counts(ctx, s, 2, 12, 2, 0, 0);

    /* A batch with new values, new runs and new workloads, and a bad split
     * last: the values and runs written before the failure are rolled back. */
    b = calloc(1, sizeof *b);
    assert_non_null(b);
    b->kind = KACE_FILE_COLOCATIONS;
    snprintf(b->origin, sizeof b->origin, "mixed.csv");
    snprintf(b->set, sizeof b->set, "mixed");
    b->values = grow_array(b->values, b->n_values, sizeof *b->values);
    kace_profile_value *v = &b->values[b->n_values++];
    memset(v, 0, sizeof *v);
    snprintf(v->workload, sizeof v->workload, "new_batch2-inf");
    snprintf(v->metric, sizeof v->metric, "sm%%");
    v->value = 12;
    b->values = grow_array(b->values, b->n_values, sizeof *b->values);
    v = &b->values[b->n_values++];
    memset(v, 0, sizeof *v);
    snprintf(v->workload, sizeof v->workload, "a_batch2-inf");
    snprintf(v->metric, sizeof v->metric, "sm%%");
    v->value = 99; /* an update of an existing value */
    b->runs = grow_array(b->runs, b->n_runs, sizeof *b->runs);
    kace_import_run *r = &b->runs[b->n_runs++];
    memset(r, 0, sizeof *r);
    r->k = 2;
    snprintf(r->workload[0], KACE_NAME_MAX, "new_batch2-inf");
    snprintf(r->workload[1], KACE_NAME_MAX, "other_batch2-inf");
    r->mps_pct[0] = r->mps_pct[1] = 100;
    r->throughput[0] = 1;
    r->throughput[1] = 2;
    r->line = 2;
    b->splits = grow_array(b->splits, b->n_splits, sizeof *b->splits);
    kace_import_split *sp = &b->splits[b->n_splits++];
    memset(sp, 0, sizeof *sp);
    sp->n_occur = 2;
    sp->seed = 10;
    sp->train = true;
    snprintf(sp->workload1, KACE_NAME_MAX, "new_batch2-inf");
    snprintf(sp->workload2, KACE_NAME_MAX, "nosuch_batch2-inf");
    sp->line = 7;
    kace_source src = {"Tesla V100-SXM2-32GB", "test", "2024-01-01"};
    kace_import_options both = {.replace = true, .create_workloads = true};
    assert_int_equal(kace_store_import_with(ctx, s, b, &src, &both, &stats), KACE_ERR_NOT_FOUND);
    assert_non_null(strstr(kace_errmsg(ctx), "mixed.csv:7:1: "));
    assert_non_null(strstr(kace_errmsg(ctx), "nosuch_batch2-inf"));
    assert_counts(ctx, s, 2, 12, 2, 0, 0);
    assert_string_equal(raw_query(path, "SELECT group_concat(id || name) FROM (SELECT * FROM workloads ORDER BY id)"),
                        before);
    assert_string_equal(raw_query(path, "SELECT p.value FROM profiles p JOIN workloads w ON w.id=p.workload_id "
                                        "WHERE w.name='a_batch2-inf' AND p.metric='sm%'"),
                        "50.0");
    assert_string_equal(raw_query(path, "SELECT count(*) FROM sources WHERE tool='test'"), "0");
    assert_string_equal(raw_query(path, "SELECT count(*) FROM run_members"), "4");

    /* Without the bad split the same batch goes in whole. */
    b->n_splits = 0;
    assert_kace_ok(ctx, kace_store_import_with(ctx, s, b, &src, &both, &stats));
    assert_int_equal(stats.values_added, 1);
    assert_int_equal(stats.values_updated, 1);
    assert_int_equal(stats.runs_added, 1);
    assert_counts(ctx, s, 4, 13, 3, 0, 0);
    kace_import_batch_free(&b);
    assert_null(b);

    /* The store is still usable after the failures. */
    import_text(ctx, s, SPLITS_HDR "2,10,train,a_batch2-inf,b_batch8-train,1\n", "splits.csv");
    assert_counts(ctx, s, 4, 13, 3, 1, 0);
    kace_store_close(&s);
    kace_ctx_free(&ctx);
    free(path);
}

/* Savepoints nest in a caller's transaction: a rolled-back one leaves what
 * was written before it, and the caller's commit keeps that. */
static void test_savepoints_nest(void **state)
{
    (void)state;
    char *path = db_path("store_savepoint", "kace.db");
    kace_ctx *ctx = kace_ctx_new();
    kace_store *s = NULL;
    assert_kace_ok(ctx, kace_store_open(ctx, path, &s));
    assert_kace_ok(ctx, kace_store_begin(ctx, s));
    import_text(ctx, s, SYSTEM_TEXT, "system.csv");
    assert_kace_ok(ctx, kace_store_savepoint(ctx, s, "inner"));
    import_text(ctx, s, PAIRS_TEXT, "pairs.csv");
    kace_store_rollback_to(s, "inner");
    assert_kace_ok(ctx, kace_store_commit(ctx, s));
    assert_counts(ctx, s, 2, 10, 0, 0, 0); /* the profiles, not the pairs */
    /* Alone, a savepoint is a transaction of its own. */
    assert_kace_ok(ctx, kace_store_savepoint(ctx, s, "alone"));
    import_text(ctx, s, PAIRS_TEXT, "pairs.csv");
    assert_kace_ok(ctx, kace_store_release(ctx, s, "alone"));
    assert_counts(ctx, s, 2, 12, 2, 0, 0);
    assert_int_equal(kace_store_savepoint(ctx, s, "bad name;"), KACE_ERR_INVALID);
    assert_int_equal(kace_store_release(ctx, s, "never_made"), KACE_ERR_STORE);
    kace_store_close(&s);
    kace_ctx_free(&ctx);
    free(path);
}

static void test_profile_values_keep_their_source(void **state)
{
    (void)state;
    char *path = db_path("store_source", "kace.db");
    kace_ctx *ctx = kace_ctx_new();
    kace_store *s = NULL;
    assert_kace_ok(ctx, kace_store_open(ctx, path, &s));
    kace_import_batch *b = parse_text(ctx, KERNEL_HDR "100,1,2,3,4,5,a_batch2-inf\n", "/some/where/kernel-a.csv");
    kace_source src = {"Tesla V100-SXM2-32GB", "ncu", "2024-06-24"};
    assert_kace_ok(ctx, kace_store_import(ctx, s, b, &src, NULL));
    kace_import_batch_free(&b);
    /* No source given: NULLs, and another source row. */
    import_text(ctx, s, SYSTEM_TEXT, "profiles/system.csv");
    kace_store_close(&s);

    assert_string_equal(raw_query(path, "SELECT s.gpu || '|' || s.tool || '|' || s.date || '|' || s.file "
                                        "FROM profiles p JOIN workloads w ON w.id=p.workload_id "
                                        "JOIN sources s ON s.id=p.source_id WHERE w.name='a_batch2-inf' "
                                        "AND p.metric='Registers'"),
                        "Tesla V100-SXM2-32GB|ncu|2024-06-24|kernel-a.csv");
    assert_string_equal(raw_query(path, "SELECT coalesce(s.gpu, 'null') || '|' || coalesce(s.tool, 'null') || '|' || "
                                        "s.file FROM profiles p JOIN workloads w ON w.id=p.workload_id "
                                        "JOIN sources s ON s.id=p.source_id WHERE w.name='b_batch8-train' "
                                        "AND p.metric='memcap'"),
                        "null|null|system.csv");
    assert_string_equal(raw_query(path, "SELECT count(DISTINCT source_id) FROM profiles"), "2");
    /* A missing value is stored as NULL (known to be missing), not 0. */
    assert_string_equal(raw_query(path, "SELECT count(*) FROM profiles p JOIN workloads w ON w.id=p.workload_id "
                                        "WHERE w.name='a_batch2-inf' AND p.metric='Exclusive50' AND p.value IS NULL"),
                        "1");
    /* Family and batch come from the name. */
    assert_string_equal(raw_query(path, "SELECT family || '|' || batch FROM workloads WHERE name='b_batch8-train'"),
                        "b-train|8");
    kace_ctx_free(&ctx);
    free(path);
}

/* kace profile's write: the profile and the profiled command in one
 * transaction, so a command that cannot be stored leaves no profile. */
static void test_profile_and_command_together(void **state)
{
    (void)state;
    char *path = db_path("store_profile", "kace.db");
    kace_ctx *ctx = kace_ctx_new();
    kace_store *s = NULL;
    assert_kace_ok(ctx, kace_store_open(ctx, path, &s));
    kace_import_batch *b = NULL;
    assert_kace_ok(ctx, kace_profile_batch_new(ctx, "kace-profile", &b));
    assert_kace_ok(ctx, kace_profile_batch_add(ctx, b, "p_batch4-train", "exclusive_throughput", 123.5));
    assert_kace_ok(ctx, kace_profile_batch_add(ctx, b, "p_batch4-train", "sm%", 61));
    kace_source src = {"NVIDIA H100", "kace-profile", "2025-01-02"};

    /* An empty command is refused: neither the profile nor a command stays. */
    char *empty[] = {NULL};
    assert_int_equal(kace_store_add_profile(ctx, s, b, &src, "p_batch4-train", empty, NULL), KACE_ERR_INVALID);
    assert_non_null(strstr(kace_errmsg(ctx), "empty command"));
    assert_string_equal(raw_query(path, "SELECT count(*) FROM profiles"), "0");
    assert_string_equal(raw_query(path, "SELECT count(*) FROM workloads"), "0");

    char *argv[] = {"python3", "bert.py", "--batch", "4", NULL};
    kace_import_stats stats;
    assert_kace_ok(ctx, kace_store_add_profile(ctx, s, b, &src, "p_batch4-train", argv, &stats));
    assert_int_equal(stats.values_added, 2);
    char **got = NULL;
    assert_kace_ok(ctx, kace_store_get_command(ctx, s, "p_batch4-train", &got));
    for (int i = 0; i < 5; i++)
        if (argv[i])
            assert_string_equal(got[i], argv[i]);
        else
            assert_null(got[i]);
    free(got);
    /* Profiling again with another command replaces the command. */
    char *again[] = {"./gemm", NULL};
    assert_kace_ok(ctx, kace_store_add_profile(ctx, s, b, &src, "p_batch4-train", again, &stats));
    assert_int_equal(stats.values_unchanged, 2);
    assert_string_equal(raw_query(path, "SELECT argv FROM workload_commands"), "[\"./gemm\"]");
    kace_store_close(&s);
    assert_string_equal(raw_query(path, "SELECT value FROM profiles p JOIN workloads w ON w.id=p.workload_id "
                                        "WHERE w.name='p_batch4-train' AND p.metric='sm%'"),
                        "61.0");
    kace_import_batch_free(&b);
    kace_ctx_free(&ctx);
    free(path);
}

/* A profile is one GPU's: profiling on another GPU moves every value the
 * old GPU measured to history, also one that comes back unchanged (it is
 * stored again with the new GPU's source) and one the new profile lacks
 * (counters that did not work there); values from sources naming no GPU
 * stay. kace measure's GPU check then passes. */
static void test_profile_on_another_gpu_replaces_it_whole(void **state)
{
    (void)state;
    char *path = db_path("store_profile_gpu", "kace.db");
    kace_ctx *ctx = kace_ctx_new();
    kace_store *s = NULL;
    assert_kace_ok(ctx, kace_store_open(ctx, path, &s));
    char *argv[] = {"./gemm", NULL};
    const char *w = "g_batch1-inf";
    kace_import_batch *b = NULL;
    assert_kace_ok(ctx, kace_profile_batch_new(ctx, "kace-profile", &b));
    assert_kace_ok(ctx, kace_profile_batch_add(ctx, b, w, "exclusive_throughput", 100));
    assert_kace_ok(ctx, kace_profile_batch_add(ctx, b, w, "Threads", 4096));
    assert_kace_ok(ctx, kace_profile_batch_add(ctx, b, w, "DRAM Throughput", 40));
    kace_source h100 = {"NVIDIA H100", "kace-profile", "2026-01-02"};
    kace_import_stats st;
    assert_kace_ok(ctx, kace_store_add_profile(ctx, s, b, &h100, w, argv, &st));
    assert_int_equal(st.values_retired, 0);
    kace_import_batch_free(&b);
    /* A value from a file that names no GPU. */
    assert_kace_ok(ctx, kace_profile_batch_new(ctx, "system.csv", &b));
    assert_kace_ok(ctx, kace_profile_batch_add(ctx, b, w, "memcap", 2.5));
    assert_kace_ok(ctx, kace_store_import(ctx, s, b, NULL, &st));
    kace_import_batch_free(&b);

    char other[64];
    assert_kace_ok(ctx, kace_store_profile_other_gpu(ctx, s, w, "NVIDIA H200", other, sizeof other));
    assert_string_equal(other, "NVIDIA H100");

    /* On the H200: the same Threads, another throughput, no DRAM counter. */
    assert_kace_ok(ctx, kace_profile_batch_new(ctx, "kace-profile", &b));
    assert_kace_ok(ctx, kace_profile_batch_add(ctx, b, w, "exclusive_throughput", 140));
    assert_kace_ok(ctx, kace_profile_batch_add(ctx, b, w, "Threads", 4096));
    kace_source h200 = {"NVIDIA H200", "kace-profile", "2026-01-03"};
    assert_kace_ok(ctx, kace_store_add_profile(ctx, s, b, &h200, w, argv, &st));
    assert_int_equal(st.values_retired, 3);
    assert_int_equal(st.values_added, 2);
    assert_kace_ok(ctx, kace_store_profile_other_gpu(ctx, s, w, "NVIDIA H200", other, sizeof other));
    assert_string_equal(other, "");
    assert_kace_ok(ctx, kace_store_profile_other_gpu(ctx, s, w, "NVIDIA H100", other, sizeof other));
    assert_string_equal(other, "NVIDIA H200");
    /* Profiling again on the H200 retires nothing. */
    assert_kace_ok(ctx, kace_store_add_profile(ctx, s, b, &h200, w, argv, &st));
    assert_int_equal(st.values_retired, 0);
    assert_int_equal(st.values_unchanged, 2);
    kace_import_batch_free(&b);
    kace_store_close(&s);
    assert_string_equal(raw_query(path, "SELECT group_concat(p.metric || '=' || p.value || '@' || ifnull(s.gpu, '-'), "
                                        "' ') FROM (SELECT * FROM profiles ORDER BY metric) p JOIN sources s ON "
                                        "s.id=p.source_id"),
                        "Threads=4096.0@NVIDIA H200 exclusive_throughput=140.0@NVIDIA H200 memcap=2.5@-");
    assert_string_equal(raw_query(path, "SELECT group_concat(h.metric, ' ') FROM (SELECT * FROM profile_history ORDER "
                                        "BY metric) h JOIN sources s ON s.id=h.source_id WHERE s.gpu='NVIDIA H100'"),
                        "DRAM Throughput Threads exclusive_throughput");
    kace_ctx_free(&ctx);
    free(path);
}

/* ---- the reference data ------------------------------------------------------- */

static void test_reference_dataset(void **state)
{
    (void)state;
    char *path = db_path("store_reference", "kace.db");
    kace_ctx *ctx = kace_ctx_new();
    kace_store *s = NULL;
    assert_kace_ok(ctx, kace_store_open(ctx, path, &s));
    /* Profiles first, then colocations, then the splits (which name pairs). */
    static const char *const files[] = {"profiles/system.csv",
                                        "profiles/system-xu.csv",
                                        "profiles/exclusive_by_mps_pct.csv",
                                        "profiles/kernel/bert-base-cased_batch8-train.csv",
                                        "colocations/pairs.csv",
                                        "colocations/triples.csv",
                                        "colocations/raw/MPS100_0624_train-train.csv",
                                        "splits.csv"};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++)
        import_file(ctx, s, files[i]);

    kace_dataset *ds = NULL;
    assert_kace_ok(ctx, kace_store_load_dataset(ctx, s, "pairs", false, &ds));
    assert_int_equal(ds->n_colocations, 181);
    size_t n_self = 0;
    for (size_t i = 0; i < ds->n_colocations; i++) {
        const kace_colocation *c = &ds->colocations[i];
        assert_int_equal(c->k, 2);
        assert_true(c->workload[0] >= 0 && (size_t)c->workload[0] < ds->n_workloads);
        assert_true(c->workload[1] >= 0 && (size_t)c->workload[1] < ds->n_workloads);
        assert_int_equal(c->mps_pct[0], 100);
        assert_int_equal(c->status, KACE_RUN_OK);
        n_self += c->workload[0] == c->workload[1];
    }
    assert_int_equal(n_self, 16); /* README: self-pairs included (16) */
    /* Profile values of a workload, as in the files. */
    int w = kace_dataset_find(ds, "bert-base-cased_batch8-train");
    assert_true(w >= 0);
    const kace_workload *wl = &ds->workloads[w];
    assert_string_equal(wl->family, "bert-base-cased-train");
    assert_int_equal(wl->batch, 8);
    for (int m = 0; m < 10; m++)
        if (isnan(wl->metric[m]))
            fail_msg("metric %s of %s is missing", kace_metric_name((kace_metric)m), wl->name);
    assert_true(wl->metric[KACE_M_THREADS] > 0);
    const kace_colocation *c0 = &ds->colocations[0];
    assert_true(c0->throughput[0] > 0 && c0->throughput[1] > 0);
    kace_dataset_free(&ds);
    assert_null(ds);

    assert_kace_ok(ctx, kace_store_load_dataset(ctx, s, "triples", false, &ds));
    assert_int_equal(ds->n_colocations, 400);
    for (size_t i = 0; i < ds->n_colocations; i++)
        assert_int_equal(ds->colocations[i].k, 3);
    kace_dataset_free(&ds);

    /* An unknown set has no colocations (but the workloads). */
    assert_kace_ok(ctx, kace_store_load_dataset(ctx, s, "no-such-set", false, &ds));
    assert_int_equal(ds->n_colocations, 0);
    assert_true(ds->n_workloads > 0);
    kace_dataset_free(&ds);

    /* Every set, only 100% runs unless all_splits. */
    kace_dataset *all = NULL;
    assert_kace_ok(ctx, kace_store_load_dataset(ctx, s, NULL, false, &ds));
    assert_kace_ok(ctx, kace_store_load_dataset(ctx, s, NULL, true, &all));
    assert_true(ds->n_colocations >= 181 + 400);
    assert_true(all->n_colocations >= ds->n_colocations);
    kace_dataset_free(&all);

    /* The published splits resolve against the pairs. */
    kace_dataset *pairs = NULL;
    assert_kace_ok(ctx, kace_store_load_dataset(ctx, s, "pairs", false, &pairs));
    kace_splits *sp = NULL;
    assert_kace_ok(ctx, kace_store_load_splits(ctx, s, pairs, &sp));
    assert_int_equal(sp->n, 8145);
    for (size_t i = 0; i < sp->n; i++)
        assert_true(sp->rows[i].colocation >= 0 && (size_t)sp->rows[i].colocation < pairs->n_colocations);
    kace_splits_free(&sp);
    assert_null(sp);
    kace_dataset_free(&pairs);
    kace_dataset_free(&ds);

    /* Re-importing every file changes nothing. */
    kace_store_counts before, after;
    assert_kace_ok(ctx, kace_store_count(ctx, s, &before));
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        kace_import_batch *b = NULL;
        kace_import_stats st;
        assert_kace_ok(ctx, kace_import_parse_file(ctx, ref_path(files[i]), NULL, &b));
        assert_kace_ok(ctx, kace_store_import(ctx, s, b, NULL, &st));
        if (st.values_added || st.values_updated || st.runs_added || st.splits_added)
            fail_msg("re-importing %s: values +%zu ~%zu runs +%zu splits +%zu", files[i], st.values_added,
                     st.values_updated, st.runs_added, st.splits_added);
        kace_import_batch_free(&b);
    }
    assert_kace_ok(ctx, kace_store_count(ctx, s, &after));
    assert_memory_equal(&before, &after, sizeof before);
    kace_store_close(&s);
    kace_ctx_free(&ctx);
    free(path);
}

/* ---- models ---------------------------------------------------------------- */

static void test_models_by_name(void **state)
{
    (void)state;
    char *path = db_path("store_models", "kace.db");
    kace_ctx *ctx = kace_ctx_new();
    kace_store *s = NULL;
    assert_kace_ok(ctx, kace_store_open(ctx, path, &s));
    const kace_feature_set *fs = kace_feature_set_find("kace");
    assert_non_null(fs);
    enum { N = 24 };
    double X[N * KACE_MAX_FEATURES], y[N];
    for (int i = 0; i < N; i++) {
        y[i] = 0;
        for (int j = 0; j < fs->n; j++) {
            X[i * fs->n + j] = (double)((i * 7 + j * 13) % 17) + 0.25 * j;
            y[i] += (j + 1) * X[i * fs->n + j];
        }
    }
    kace_model *m = NULL, *back = NULL;
    assert_kace_ok(ctx, kace_model_fit_linear(ctx, fs, X, y, N, &m));
    assert_int_equal(kace_store_load_model(ctx, s, "default", &back), KACE_ERR_NOT_FOUND);
    assert_null(back);
    assert_non_null(strstr(kace_errmsg(ctx), "default"));
    assert_kace_ok(ctx, kace_store_save_model(ctx, s, "default", m));
    assert_kace_ok(ctx, kace_store_save_model(ctx, s, "default", m)); /* replaces */
    assert_counts(ctx, s, 0, 0, 0, 0, 1);
    assert_kace_ok(ctx, kace_store_load_model(ctx, s, "default", &back));
    double p1[N], p2[N];
    assert_kace_ok(ctx, kace_model_predict(ctx, m, X, N, KACE_NORM_TRAIN, p1));
    assert_kace_ok(ctx, kace_model_predict(ctx, back, X, N, KACE_NORM_TRAIN, p2));
    assert_memory_equal(p1, p2, sizeof p1);
    kace_model_free(&back);
    kace_model_free(&m);
    kace_store_close(&s);
    kace_ctx_free(&ctx);
    free(path);
}

/* The import recipe orders files by kind: splits given before the pairs
 * they name still import; one unreadable file and nothing is stored. */
static void test_import_files_in_kind_order(void **state)
{
    (void)state;
    char *path = db_path("store_import_order", "kace.db");
    kace_ctx *ctx = kace_ctx_new();
    kace_store *s = NULL;
    assert_kace_ok(ctx, kace_store_open(ctx, path, &s));
    char files[4][4096];
    snprintf(files[0], sizeof files[0], "%s", ref_path("splits.csv"));
    snprintf(files[1], sizeof files[1], "%s", ref_path("colocations/pairs.csv"));
    snprintf(files[2], sizeof files[2], "%s", ref_path("profiles/system.csv"));
    snprintf(files[3], sizeof files[3], "%s", ref_path("no-such-file.csv"));
    const char *paths[4] = {files[0], files[1], files[2], files[3]};
    assert_int_not_equal(kace_store_import_files(ctx, s, paths, 4, NULL, NULL, NULL, NULL), KACE_OK);
    assert_non_null(strstr(kace_errmsg(ctx), "no-such-file.csv"));
    assert_counts(ctx, s, 0, 0, 0, 0, 0);
    assert_true(kace_file_kind_rank(KACE_FILE_SYSTEM_PROFILE) < kace_file_kind_rank(KACE_FILE_COLOCATIONS));
    assert_true(kace_file_kind_rank(KACE_FILE_COLOCATIONS) < kace_file_kind_rank(KACE_FILE_SPLITS));
    assert_kace_ok(ctx, kace_store_import_files(ctx, s, paths, 3, NULL, NULL, NULL, NULL));
    kace_store_counts c;
    assert_kace_ok(ctx, kace_store_count(ctx, s, &c));
    assert_true(c.splits > 0 && c.runs > 0 && c.profile_values > 0);
    kace_store_close(&s);
    kace_ctx_free(&ctx);
    free(path);
}

/* The models table's kind column names the kind the model is (it said
 * "forest" for slowdown models once); loading reads the kind from the body,
 * so such older rows still load as what they are. */
static void test_model_kind_recorded(void **state)
{
    (void)state;
    char *path = db_path("store_model_kind", "kace.db");
    kace_ctx *ctx = kace_ctx_new();
    kace_store *s = NULL;
    kace_dataset *ds = NULL;
    assert_kace_ok(ctx, kace_store_open(ctx, path, &s));
    assert_kace_ok(ctx, kace_dataset_new(ctx, &ds));
    int n_metric;
    const kace_metric *needed = kace_profile_metrics(&n_metric);
    enum { W = 6 };
    for (int w = 0; w < W; w++) {
        char name[16];
        int at;
        snprintf(name, sizeof name, "w%d", w);
        assert_kace_ok(ctx, kace_dataset_intern(ctx, ds, name, &at));
        for (int i = 0; i < n_metric; i++)
            ds->workloads[w].metric[needed[i]] = 10 + (w * 7 + i * 3) % 11;
        ds->workloads[w].metric[KACE_M_EXCLUSIVE] = 100 + 10 * w;
    }
    for (int a = 0; a < W; a++)
        for (int b = a + 1; b < W; b++) {
            kace_colocation c = {.k = 2, .workload = {a, b}, .mps_pct = {100, 100},
                                 .throughput = {60 + a + 2 * b, 50 + 3 * a + b}, .status = KACE_RUN_OK};
            assert_kace_ok(ctx, kace_dataset_add_colocation(ctx, ds, &c));
        }
    kace_fit_spec spec = {.kind = KACE_MODEL_SLOWDOWN};
    kace_slowdown_params_default(&spec.slowdown);
    spec.slowdown.n_rounds = 0; /* ridge only: quick */
    spec.slowdown.select = false;
    spec.slowdown.ridge_alpha = 1;
    kace_model *m = NULL, *back = NULL;
    assert_kace_ok(ctx, kace_model_fit_rows(ctx, ds, NULL, 0, &spec, &m));
    assert_kace_ok(ctx, kace_store_save_model(ctx, s, "sd", m));
    kace_store_close(&s);
    assert_string_equal(raw_query(path, "SELECT kind FROM models WHERE name = 'sd'"), "slowdown");
    sqlite3 *db = raw_open(path);
    raw_exec(db, "UPDATE models SET kind = 'forest' WHERE name = 'sd'"); /* as older kace wrote it */
    sqlite3_close(db);
    assert_kace_ok(ctx, kace_store_open(ctx, path, &s));
    assert_kace_ok(ctx, kace_store_load_model(ctx, s, "sd", &back));
    assert_string_equal(kace_predictor_name(kace_model_predictor(back)), "slowdown");
    kace_model_free(&back);
    kace_model_free(&m);
    kace_dataset_free(&ds);
    kace_store_close(&s);
    kace_ctx_free(&ctx);
    free(path);
}

/* ---- locking ---------------------------------------------------------------- */

/* A writer locked out by another fails promptly and clearly; readers are not locked out. */
static void test_locked_store_fails_promptly(void **state)
{
    (void)state;
    char *path = db_path("store_locked", "kace.db");
    kace_ctx *ctx = kace_ctx_new();
    kace_store *s = NULL;
    assert_kace_ok(ctx, kace_store_open(ctx, path, &s));
    import_text(ctx, s, SYSTEM_TEXT, "system.csv");

    sqlite3 *other = raw_open(path);
    raw_exec(other, "BEGIN EXCLUSIVE;");

    kace_import_batch *b = parse_text(ctx, PAIRS_TEXT, "pairs.csv");
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    kace_status st = kace_store_import(ctx, s, b, NULL, NULL);
    double waited = seconds_since(&t0);
    assert_int_equal(st, KACE_ERR_STORE);
    assert_non_null(strstr(kace_errmsg(ctx), path));
    assert_non_null(strstr(kace_errmsg(ctx), "locked"));
    if (waited > 8.0)
        fail_msg("import waited %.1f s on the lock", waited);

    /* A reader still opens the store and reads it (WAL), without waiting. */
    kace_store *s2 = NULL;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    assert_kace_ok(ctx, kace_store_open_flags(ctx, path, 0, &s2));
    assert_counts(ctx, s2, 2, 10, 0, 0, 0);
    kace_dataset *ds = NULL;
    assert_kace_ok(ctx, kace_store_load_dataset(ctx, s2, NULL, false, &ds));
    assert_int_equal(ds->n_workloads, 2);
    kace_dataset_free(&ds);
    waited = seconds_since(&t0);
    kace_store_close(&s2);
    if (waited > 1.0)
        fail_msg("reading waited %.1f s on the writer", waited);

    /* Once the other connection lets go, the same import works. */
    raw_exec(other, "ROLLBACK;");
    sqlite3_close(other);
    assert_counts(ctx, s, 2, 10, 0, 0, 0);
    assert_kace_ok(ctx, kace_store_import(ctx, s, b, NULL, NULL));
    assert_counts(ctx, s, 2, 12, 2, 0, 0);
    kace_import_batch_free(&b);
    kace_store_close(&s);
    /* And the schema version survived the locked open attempt. */
    char version[16];
    snprintf(version, sizeof version, "%d", KACE_STORE_SCHEMA_VERSION);
    assert_string_equal(raw_query(path, "SELECT value FROM meta WHERE key='schema_version'"), version);
    kace_ctx_free(&ctx);
    free(path);
}

/* ---- observed colocations ------------------------------------------------------ */

static void test_observations(void **state)
{
    (void)state;
    char *path = db_path("store_observations", "kace.db");
    kace_ctx *ctx = kace_ctx_new();
    kace_store *s = NULL;
    assert_kace_ok(ctx, kace_store_open(ctx, path, &s));
    import_text(ctx, s, SYSTEM_TEXT, "system.csv");

    kace_observed_member m[2] = {{"a_batch2-inf", 50, 3.5, 4.0}, {"b_batch8-train", 50, 6.25, NAN}};
    kace_observed_colocation o = {.origin = "serve", .origin_id = "req-1", .observed_at = 1000.5, .gpu = "H100",
                          .model = "default", .n_members = 2, .members = m};
    bool added = false;
    assert_kace_ok(ctx, kace_store_add_observation(ctx, s, &o, &added));
    assert_true(added);
    /* The same observation again (a retried POST): ignored, reported as such. */
    assert_kace_ok(ctx, kace_store_add_observation(ctx, s, &o, &added));
    assert_false(added);
    /* The same key with another throughput: refused, the stored one kept. */
    m[1].throughput = 9;
    assert_int_equal(kace_store_add_observation(ctx, s, &o, &added), KACE_ERR_INVALID);
    assert_non_null(strstr(kace_errmsg(ctx), "serve/req-1"));
    m[1].throughput = 6.25;
    /* Without an origin_id nothing is a duplicate; another origin has its own keys. */
    kace_observed_member solo[1] = {{"a_batch2-inf", 100, 8, NAN}};
    kace_observed_colocation o2 = {.origin = "slurm", .origin_id = NULL, .observed_at = 900, .n_members = 1, .members = solo};
    assert_kace_ok(ctx, kace_store_add_observation(ctx, s, &o2, &added));
    assert_true(added);
    assert_kace_ok(ctx, kace_store_add_observation(ctx, s, &o2, &added));
    assert_true(added);
    kace_observed_colocation o3 = o;
    o3.origin = "measure";
    o3.observed_at = 2000;
    assert_kace_ok(ctx, kace_store_add_observation(ctx, s, &o3, &added));
    assert_true(added);
    assert_string_equal(raw_query(path, "SELECT count(*) FROM observations"), "4");

    /* Invalid values name the member and the field; nothing is stored. */
    struct {
        double mps, tp, pred;
        const char *workload, *origin, *want;
    } bad[] = {
        {0, 1, NAN, "a_batch2-inf", "serve", "mps_pct"},        {100.5, 1, NAN, "a_batch2-inf", "serve", "mps_pct"},
        {NAN, 1, NAN, "a_batch2-inf", "serve", "mps_pct"},      {50, 0, NAN, "a_batch2-inf", "serve", "throughput"},
        {50, -3, NAN, "a_batch2-inf", "serve", "throughput"},   {50, INFINITY, NAN, "a_batch2-inf", "serve", "throughput"},
        {50, NAN, NAN, "a_batch2-inf", "serve", "throughput"},  {50, 1, INFINITY, "a_batch2-inf", "serve", "predicted"},
        {50, 1, -1, "a_batch2-inf", "serve", "predicted"},      {50, 1, NAN, "nobody_batch1-inf", "serve", "nobody_batch1-inf"},
        {50, 1, NAN, "a_batch2-inf", "Serve!", "origin"},       {50, 1, NAN, "a_batch2-inf", "", "origin"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        kace_observed_member bm[2] = {{"b_batch8-train", 50, 2, NAN}, {bad[i].workload, bad[i].mps, bad[i].tp, bad[i].pred}};
        kace_observed_colocation bo = {.origin = bad[i].origin, .origin_id = "bad", .observed_at = 5, .n_members = 2, .members = bm};
        added = true;
        kace_status st = kace_store_add_observation(ctx, s, &bo, &added);
        if (st == KACE_OK || !strstr(kace_errmsg(ctx), bad[i].want))
            fail_msg("bad observation %zu: status %d, message '%s' (expected one naming %s)", i, st, kace_errmsg(ctx),
                     bad[i].want);
        assert_false(added);
    }
    kace_observed_colocation none = {.origin = "serve", .observed_at = 5, .n_members = 0, .members = m};
    assert_int_equal(kace_store_add_observation(ctx, s, &none, NULL), KACE_ERR_INVALID);
    kace_observed_colocation when = o;
    when.origin_id = "t";
    when.observed_at = NAN;
    assert_int_equal(kace_store_add_observation(ctx, s, &when, NULL), KACE_ERR_INVALID);
    assert_string_equal(raw_query(path, "SELECT count(*) FROM observations"), "4");
    assert_string_equal(raw_query(path, "SELECT count(*) FROM observation_members"), "6");

    /* Listing: by time, filtered by since, every field back. */
    kace_observed_list *l = NULL;
    assert_kace_ok(ctx, kace_store_list_observations(ctx, s, -INFINITY, &l));
    assert_int_equal(l->n, 4);
    assert_string_equal(l->items[0].origin, "slurm");
    assert_null(l->items[0].origin_id);
    assert_null(l->items[0].gpu);
    assert_null(l->items[0].model);
    assert_int_equal(l->items[0].n_members, 1);
    assert_true(isnan(l->items[0].members[0].predicted));
    const kace_observed_colocation *r = &l->items[2];
    assert_string_equal(r->origin, "serve");
    assert_string_equal(r->origin_id, "req-1");
    assert_true(r->observed_at == 1000.5);
    assert_string_equal(r->gpu, "H100");
    assert_string_equal(r->model, "default");
    assert_int_equal(r->n_members, 2);
    assert_string_equal(r->members[0].workload, "a_batch2-inf");
    assert_string_equal(r->members[1].workload, "b_batch8-train");
    assert_true(r->members[0].mps_pct == 50 && r->members[0].throughput == 3.5 && r->members[0].predicted == 4.0);
    assert_true(r->members[1].throughput == 6.25 && isnan(r->members[1].predicted));
    assert_string_equal(l->items[3].origin, "measure");
    kace_observed_list_free(&l);
    assert_null(l);
    assert_kace_ok(ctx, kace_store_list_observations(ctx, s, 1000.5, &l));
    assert_int_equal(l->n, 2);
    assert_string_equal(l->items[0].origin_id, "req-1");
    kace_observed_list_free(&l);
    assert_kace_ok(ctx, kace_store_list_observations(ctx, s, 3000, &l));
    assert_int_equal(l->n, 0);
    kace_observed_list_free(&l);
    kace_store_close(&s);
    kace_ctx_free(&ctx);
    free(path);
}

/* A store of schema 2 (before observations and history) is upgraded in place, its data kept. */
static void test_migrates_to_observations(void **state)
{
    (void)state;
    char *path = db_path("store_migrate", "kace.db");
    kace_ctx *ctx = kace_ctx_new();
    kace_store *s = NULL;
    assert_kace_ok(ctx, kace_store_open(ctx, path, &s));
    import_text(ctx, s, SYSTEM_TEXT, "system.csv");
    kace_store_close(&s);
    sqlite3 *db = raw_open(path);
    raw_exec(db, "DROP TABLE observation_members; DROP TABLE observations;"
                 "DROP TABLE profile_history; DROP TABLE run_history; DROP TABLE split_history;"
                 "ALTER TABLE profiles DROP COLUMN embedded;"
                 "UPDATE meta SET value='2' WHERE key='schema_version';");
    sqlite3_close(db);
    assert_kace_ok(ctx, kace_store_open(ctx, path, &s));
    assert_counts(ctx, s, 2, 10, 0, 0, 0);
    kace_observed_member m[1] = {{"b_batch8-train", 100, 7, NAN}};
    kace_observed_colocation o = {.origin = "measure", .observed_at = 1, .n_members = 1, .members = m};
    assert_kace_ok(ctx, kace_store_add_observation(ctx, s, &o, NULL));
    kace_store_close(&s);
    char want[16];
    snprintf(want, sizeof want, "%d", KACE_STORE_SCHEMA_VERSION);
    assert_string_equal(raw_query(path, "SELECT value FROM meta WHERE key='schema_version'"), want);
    assert_string_equal(raw_query(path, "SELECT count(*) FROM observations"), "1");
    assert_string_equal(raw_query(path, "SELECT count(*) FROM profile_history"), "0");
    assert_string_equal(raw_query(path, "SELECT sum(embedded) FROM profiles"), "0");
    kace_ctx_free(&ctx);
    free(path);
}

/* A re-import that changes stored data is refused, naming the rows, unless
 * replace, which keeps the old values as history with their source. */
static void test_reimport_conflicts_and_history(void **state)
{
    (void)state;
    char *path = db_path("store_conflicts", "kace.db");
    kace_ctx *ctx = kace_ctx_new();
    kace_store *s = NULL;
    assert_kace_ok(ctx, kace_store_open(ctx, path, &s));
    import_text(ctx, s, SYSTEM_TEXT, "profiles/system.csv");
    import_text(ctx, s, PAIRS_TEXT, "colocations/pairs.csv");
    char before[64];
    snprintf(before, sizeof before, "%s", raw_query(path, "SELECT total(value) FROM profiles"));

    const char *sys2 = "Type,Exclusive100,sm%,mem%,memcap,Exclusive50\n"
                       "a_batch2-inf,10,55,20,4,\n"
                       "b_batch8-train,20,60,30,8,12.5\n";
    kace_import_batch *b = parse_text(ctx, sys2, "fixed/system.csv");
    kace_import_stats st;
    assert_int_equal(kace_store_import(ctx, s, b, NULL, &st), KACE_ERR_INVALID);
    const char *msg = kace_errmsg(ctx);
    if (!strstr(msg, "fixed/system.csv:2:17: sm% of a_batch2-inf is 55 here, 50 stored (from system.csv)") ||
        !strstr(msg, "--replace"))
        fail_msg("message: %s", msg);
    assert_string_equal(raw_query(path, "SELECT total(value) FROM profiles"), before);
    kace_import_options replace = {.replace = true};
    assert_kace_ok(ctx, kace_store_import_with(ctx, s, b, NULL, &replace, &st));
    assert_int_equal(st.values_updated, 1);
    assert_int_equal(st.values_unchanged, 9);
    assert_string_equal(raw_query(path, "SELECT h.value || ' ' || s.file || ' ' || r.file FROM profile_history h "
                                        "JOIN sources s ON s.id=h.source_id JOIN sources r ON r.id=h.replaced_by "
                                        "WHERE h.metric='sm%'"),
                        "50.0 system.csv system.csv");
    assert_kace_ok(ctx, kace_store_import(ctx, s, b, NULL, &st)); /* identical again: a no-op */
    assert_int_equal(st.values_unchanged, 10);
    assert_int_equal(st.values_added + st.values_updated, 0);
    kace_import_batch_free(&b);

    /* Runs: another throughput for a stored run. */
    const char *pairs2 = "workload1,workload2,w1throughput,w2throughput\n"
                         "a_batch2-inf,b_batch8-train,5,7.5\n";
    b = parse_text(ctx, pairs2, "new/pairs.csv");
    assert_int_equal(kace_store_import(ctx, s, b, NULL, &st), KACE_ERR_INVALID);
    msg = kace_errmsg(ctx);
    if (!strstr(msg, "new/pairs.csv:2:31: ") || !strstr(msg, "7.5 here, 7 stored (from pairs.csv)"))
        fail_msg("message: %s", msg);
    assert_kace_ok(ctx, kace_store_import_with(ctx, s, b, NULL, &replace, &st));
    assert_int_equal(st.runs_updated, 1);
    assert_string_equal(raw_query(path, "SELECT group_concat(throughput, ' ') FROM (SELECT throughput FROM run_history "
                                        "ORDER BY slot)"),
                        "5.0 7.0");
    assert_string_equal(raw_query(path, "SELECT count(*) FROM run_members WHERE throughput=7.5"), "1");
    kace_import_batch_free(&b);

    /* Splits: a pair moved from train to test. */
    import_text(ctx, s, SPLITS_HDR "2,10,train,a_batch2-inf,b_batch8-train,1\n", "splits.csv");
    b = parse_text(ctx, SPLITS_HDR "2,10,test,b_batch8-train,a_batch2-inf,\n", "splits.csv");
    assert_int_equal(kace_store_import(ctx, s, b, NULL, &st), KACE_ERR_INVALID);
    assert_non_null(strstr(kace_errmsg(ctx), "splits.csv:2:1: "));
    assert_kace_ok(ctx, kace_store_import_with(ctx, s, b, NULL, &replace, &st));
    assert_int_equal(st.splits_updated, 1);
    assert_string_equal(raw_query(path, "SELECT is_train || paper_fit FROM split_history"), "11");
    assert_string_equal(raw_query(path, "SELECT count(*) || is_train FROM splits"), "10");
    kace_import_batch_free(&b);

    /* Colocations of unknown workloads: refused unless create_workloads. */
    b = parse_text(ctx, "workload1,workload2,w1throughput,w2throughput\na_batch2-inf,new_batch4-inf,1,2\n", "more.csv");
    assert_int_equal(kace_store_import(ctx, s, b, NULL, &st), KACE_ERR_NOT_FOUND);
    assert_non_null(strstr(kace_errmsg(ctx), "more.csv:2:14: unknown workload 'new_batch4-inf'"));
    kace_import_options create = {.create_workloads = true};
    assert_kace_ok(ctx, kace_store_import_with(ctx, s, b, NULL, &create, &st));
    assert_int_equal(st.runs_added, 1);
    kace_import_batch_free(&b);

    /* Profiling again (kace profile) is a new measurement: replaced, with history. */
    b = parse_text(ctx, "Type,Exclusive100,sm%\na_batch2-inf,11,55\n", "kace-profile");
    char *argv[] = {"true", NULL};
    assert_kace_ok(ctx, kace_store_add_profile(ctx, s, b, NULL, "a_batch2-inf", argv, &st));
    assert_int_equal(st.values_updated, 1);
    assert_string_equal(raw_query(path, "SELECT count(*) FROM profile_history WHERE metric='exclusive_throughput'"), "1");
    kace_import_batch_free(&b);

    /* Values out of range are refused at the store too, whatever made them. */
    b = parse_text(ctx, "Type,Exclusive100,sm%\na_batch2-inf,11,55\n", "handmade");
    b->values[1].value = 250;
    assert_int_equal(kace_store_import(ctx, s, b, NULL, &st), KACE_ERR_INVALID);
    assert_non_null(strstr(kace_errmsg(ctx), "0..100"));
    kace_import_batch_free(&b);
    kace_store_close(&s);
    kace_ctx_free(&ctx);
    free(path);
}

/* Open modes: readers never create a store; writers create the file but
 * not missing folders unless asked; stores are in WAL mode. */
static void test_open_modes(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    const char *dir = scratch_dir("store_modes");
    char path[1024], nested[1024];
    snprintf(path, sizeof path, "%s/kace.db", dir);
    snprintf(nested, sizeof nested, "%s/a/b/kace.db", dir);
    kace_store *s = (kace_store *)(uintptr_t)1;
    assert_int_equal(kace_store_open_flags(ctx, path, 0, &s), KACE_ERR_NOT_FOUND);
    assert_null(s);
    char want[1100];
    snprintf(want, sizeof want, "no such store: %s", path);
    assert_string_equal(kace_errmsg(ctx), want);
    FILE *f = fopen(path, "r");
    assert_null(f); /* nothing created */
    assert_int_equal(kace_store_open_flags(ctx, nested, KACE_STORE_CREATE, &s), KACE_ERR_NOT_FOUND);
    assert_non_null(strstr(kace_errmsg(ctx), "folder does not exist"));
    char parent[1024];
    snprintf(parent, sizeof parent, "%s/a", dir);
    assert_null(fopen(parent, "r"));
    /* An empty file is no store for a reader either, and stays empty. */
    free(write_file(dir, "empty.db", ""));
    char empty[1024];
    snprintf(empty, sizeof empty, "%s/empty.db", dir);
    assert_int_equal(kace_store_open_flags(ctx, empty, 0, &s), KACE_ERR_NOT_FOUND);
    f = fopen(empty, "r");
    assert_non_null(f);
    assert_int_equal(fgetc(f), EOF);
    fclose(f);
    /* Writers: the file in an existing folder; folders only with CREATE_DIRS. */
    assert_kace_ok(ctx, kace_store_open_flags(ctx, path, KACE_STORE_CREATE, &s));
    kace_store_close(&s);
    assert_kace_ok(ctx, kace_store_open_flags(ctx, path, 0, &s)); /* now it exists */
    kace_store_close(&s);
    assert_kace_ok(ctx, kace_store_open_flags(ctx, nested, KACE_STORE_CREATE | KACE_STORE_CREATE_DIRS, &s));
    kace_store_close(&s);
    assert_string_equal(raw_query(path, "PRAGMA journal_mode"), "wal");
    kace_ctx_free(&ctx);
}

/* Four processes open one store at once: each succeeds, and the store ends
 * at this version with its data (the migration ran once, not four times). */
static void open_four_at_once(const char *path)
{
    pid_t pid[4];
    for (int i = 0; i < 4; i++) {
        pid[i] = fork();
        assert_true(pid[i] >= 0);
        if (pid[i] == 0) {
            kace_ctx *ctx = kace_ctx_new();
            kace_store *s = NULL;
            kace_status st = kace_store_open(ctx, path, &s);
            if (st)
                fprintf(stderr, "child %d: %s\n", i, kace_errmsg(ctx));
            kace_store_close(&s);
            _exit(st ? 1 : 0);
        }
    }
    int ok = 0;
    for (int i = 0; i < 4; i++) {
        int status = 0;
        assert_int_equal(waitpid(pid[i], &status, 0), pid[i]);
        ok += WIFEXITED(status) && WEXITSTATUS(status) == 0;
    }
    assert_int_equal(ok, 4);
    char want[16];
    snprintf(want, sizeof want, "%d", KACE_STORE_SCHEMA_VERSION);
    assert_string_equal(raw_query(path, "SELECT value FROM meta WHERE key='schema_version'"), want);
    assert_string_equal(raw_query(path, "SELECT count(*) FROM meta"), "1");
}

static void test_parallel_opens_migrate_once(void **state)
{
    (void)state;
    for (int round = 0; round < 3; round++) {
        char name[32];
        snprintf(name, sizeof name, "new%d.db", round);
        char *fresh = db_path("store_parallel", name);
        open_four_at_once(fresh);
        free(fresh);

        snprintf(name, sizeof name, "old%d.db", round);
        char *path = db_path("store_parallel", name);
        kace_ctx *ctx = kace_ctx_new();
        kace_store *s = NULL;
        assert_kace_ok(ctx, kace_store_open(ctx, path, &s));
        import_text(ctx, s, SYSTEM_TEXT, "system.csv");
        kace_store_close(&s);
        sqlite3 *db = raw_open(path);
        raw_exec(db, "DROP TABLE observation_members; DROP TABLE observations;"
                     "DROP TABLE profile_history; DROP TABLE run_history; DROP TABLE split_history;"
                     "DROP TABLE workload_commands; ALTER TABLE profiles DROP COLUMN embedded;"
                     "ALTER TABLE runs DROP COLUMN mode; ALTER TABLE runs DROP COLUMN repetition;"
                     "ALTER TABLE runs DROP COLUMN measured_at; ALTER TABLE runs DROP COLUMN window_s;"
                     "ALTER TABLE run_members DROP COLUMN status; ALTER TABLE run_members DROP COLUMN throughput_cv;"
                     "ALTER TABLE run_members DROP COLUMN detail;"
                     "UPDATE meta SET value='1' WHERE key='schema_version';");
        sqlite3_close(db);
        open_four_at_once(path);
        assert_string_equal(raw_query(path, "SELECT count(*) FROM profiles"), "10");
        free(path);
        kace_ctx_free(&ctx);
    }
}

/* A reader never migrates nor creates: an older schema is refused, naming
 * the store, its version and the command that upgrades it. */
static void test_read_only_open(void **state)
{
    (void)state;
    char *path = db_path("store_read_only", "kace.db");
    kace_ctx *ctx = kace_ctx_new();
    kace_store *s = (kace_store *)(uintptr_t)1;
    assert_int_equal(kace_store_open_flags(ctx, path, KACE_STORE_READ_ONLY, &s), KACE_ERR_NOT_FOUND);
    assert_null(s);
    assert_int_equal(kace_store_open_flags(ctx, path, KACE_STORE_READ_ONLY | KACE_STORE_CREATE, &s),
                     KACE_ERR_INVALID);
    assert_kace_ok(ctx, kace_store_open(ctx, path, &s));
    import_text(ctx, s, SYSTEM_TEXT, "system.csv");
    kace_store_close(&s);
    assert_kace_ok(ctx, kace_store_open_flags(ctx, path, KACE_STORE_READ_ONLY, &s));
    assert_counts(ctx, s, 2, 10, 0, 0, 0);
    /* Nothing can be written through it. */
    assert_int_not_equal(kace_store_promote_model(ctx, s, "none"), KACE_OK);
    kace_store_close(&s);
    sqlite3 *db = raw_open(path);
    raw_exec(db, "DROP TABLE profile_history; DROP TABLE run_history; DROP TABLE split_history;"
                 "ALTER TABLE profiles DROP COLUMN embedded; UPDATE meta SET value='3' WHERE key='schema_version';");
    sqlite3_close(db);
    /* An older schema is read through an upgraded copy in memory; the file
     * keeps its version and nothing is written through the copy either. */
    assert_kace_ok(ctx, kace_store_open_flags(ctx, path, KACE_STORE_READ_ONLY, &s));
    assert_int_equal(kace_store_older_version(s), 3);
    assert_counts(ctx, s, 2, 10, 0, 0, 0);
    assert_int_not_equal(kace_store_promote_model(ctx, s, "none"), KACE_OK);
    kace_store_close(&s);
    assert_string_equal(raw_query(path, "SELECT value FROM meta WHERE key='schema_version'"), "3");
    assert_kace_ok(ctx, kace_store_open(ctx, path, &s));
    assert_int_equal(kace_store_older_version(s), 0);
    kace_store_close(&s);
    assert_string_not_equal(raw_query(path, "SELECT value FROM meta WHERE key='schema_version'"), "3");
    kace_ctx_free(&ctx);
    free(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_open_creates_schema),
        cmocka_unit_test(test_refuses_foreign_and_newer),
        cmocka_unit_test(test_import_stats_and_idempotence),
        cmocka_unit_test(test_failed_batch_rolls_back),
        cmocka_unit_test(test_savepoints_nest),
        cmocka_unit_test(test_profile_values_keep_their_source),
        cmocka_unit_test(test_profile_and_command_together),
        cmocka_unit_test(test_profile_on_another_gpu_replaces_it_whole),
        cmocka_unit_test(test_reference_dataset),
        cmocka_unit_test(test_models_by_name),
        cmocka_unit_test(test_model_kind_recorded),
        cmocka_unit_test(test_import_files_in_kind_order),
        cmocka_unit_test(test_locked_store_fails_promptly),
        cmocka_unit_test(test_open_modes),
        cmocka_unit_test(test_observations),
        cmocka_unit_test(test_reimport_conflicts_and_history),
        cmocka_unit_test(test_migrates_to_observations),
        cmocka_unit_test(test_parallel_opens_migrate_once),
        cmocka_unit_test(test_read_only_open),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
