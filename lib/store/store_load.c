/* The store: loading datasets, splits and sets; counting what is stored. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "base/name_index.h"
#include "kace/predictor.h"
#include "store/store_internal.h"

/* ---- loading ---------------------------------------------------------- */

/* The workloads, in id order so that indices are stable across loads, and their profiles. */
static kace_status load_workloads(kace_ctx *ctx, kace_store *s, kace_dataset *ds)
{
    sqlite3_stmt *q = NULL;
    kace_status st;
    if ((st = store_prepare(ctx, s, "SELECT name FROM workloads ORDER BY id", &q)))
        return st;
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        int idx;
        if ((st = kace_dataset_intern(ctx, ds, (const char *)sqlite3_column_text(q, 0), &idx)))
            goto done;
    }
    if (rc != SQLITE_DONE) {
        st = store_fail(ctx, s, "read workloads");
        goto done;
    }
    sqlite3_finalize(q);
    q = NULL;
    if ((st = store_prepare(ctx, s, "SELECT w.name, p.metric, p.value FROM profiles p JOIN workloads w ON w.id=p.workload_id",
                      &q)))
        goto done;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        int m = kace_metric_from_name((const char *)sqlite3_column_text(q, 1));
        if (m < 0 || sqlite3_column_type(q, 2) == SQLITE_NULL)
            continue;
        int w = kace_dataset_find(ds, (const char *)sqlite3_column_text(q, 0));
        if (w >= 0)
            ds->workloads[w].metric[m] = sqlite3_column_double(q, 2);
    }
    if (rc != SQLITE_DONE)
        st = store_fail(ctx, s, "read profiles");
done:
    sqlite3_finalize(q);
    return st;
}

/* The successful runs of sets[0..n) (NULL: every set) into out[0..n), in one
 * query: each run goes to every dataset whose set it is in. The datasets
 * hold the same workloads in the same order. */
static kace_status load_runs(kace_ctx *ctx, kace_store *s, const char *const *sets, size_t n, bool all_splits,
                             kace_dataset **out)
{
    bool every = false;
    for (size_t i = 0; i < n; i++)
        every |= !sets[i];
    size_t size = 512 + 12 * n;
    char *sql = malloc(size);
    bool *in = calloc(n, sizeof *in);
    sqlite3_stmt *q = NULL;
    kace_status st = KACE_OK;
    if (!sql || !in) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
        goto done;
    }
    size_t len = (size_t)snprintf(sql, size,
                                  "SELECT r.id, r.k, m.slot, w.name, m.mps_pct, m.throughput, r.set_name FROM runs r "
                                  "JOIN run_members m ON m.run_id=r.id JOIN workloads w ON w.id=m.workload_id "
                                  "WHERE r.status='ok'%s",
                                  every ? "" : " AND r.set_name IN (");
    for (size_t i = 0; !every && i < n; i++)
        len += (size_t)snprintf(sql + len, size - len, "%s?%zu", i ? "," : "", i + 1);
    snprintf(sql + len, size - len, "%s ORDER BY r.id, m.slot", every ? "" : ")");
    if ((st = store_prepare(ctx, s, sql, &q)))
        goto done;
    for (size_t i = 0; !every && i < n; i++)
        sqlite3_bind_text(q, (int)i + 1, sets[i], -1, SQLITE_STATIC);
    kace_colocation c;
    memset(&c, 0, sizeof c);
    sqlite3_int64 current = -1;
    bool pending = false;
    int rc;
    for (;;) {
        rc = sqlite3_step(q);
        sqlite3_int64 id = rc == SQLITE_ROW ? sqlite3_column_int64(q, 0) : -2;
        if (pending && id != current) {
            bool all100 = true;
            for (int k = 0; k < c.k; k++)
                all100 &= c.mps_pct[k] == 100;
            for (size_t i = 0; i < n && (all100 || all_splits); i++)
                if (in[i] && (st = kace_dataset_add_colocation(ctx, out[i], &c)))
                    goto done;
            pending = false;
        }
        if (rc != SQLITE_ROW)
            break;
        if (id != current) {
            memset(&c, 0, sizeof c);
            c.k = sqlite3_column_int(q, 1);
            const char *set = (const char *)sqlite3_column_text(q, 6);
            for (size_t i = 0; i < n; i++)
                in[i] = !sets[i] || (set && strcmp(sets[i], set) == 0);
            current = id;
            pending = true;
        }
        int slot = sqlite3_column_int(q, 2);
        if (slot < 0 || slot >= KACE_MAX_K || slot >= c.k) {
            st = kace_fail(ctx, KACE_ERR_STORE, "%s: run %lld has a bad member slot %d", s->path, (long long)id, slot);
            goto done;
        }
        c.workload[slot] = kace_dataset_find(out[0], (const char *)sqlite3_column_text(q, 3));
        c.mps_pct[slot] = sqlite3_column_int(q, 4);
        c.throughput[slot] = sqlite3_column_double(q, 5);
    }
    if (rc != SQLITE_DONE)
        st = store_fail(ctx, s, "read runs");
done:
    sqlite3_finalize(q);
    free(sql);
    free(in);
    return st;
}

kace_status kace_store_load_datasets(kace_ctx *ctx, kace_store *s, const char *const *sets, size_t n,
                                     bool all_splits, kace_dataset **out)
{
    for (size_t i = 0; i < n; i++)
        out[i] = NULL;
    kace_status st = KACE_OK;
    for (size_t i = 0; i < n && !st; i++)
        st = kace_dataset_new(ctx, &out[i]);
    if (st || !n || (st = load_workloads(ctx, s, out[0])))
        goto fail;
    /* The other sets' workloads are the first's, in the same order. */
    for (size_t i = 1; i < n; i++)
        for (size_t w = 0; w < out[0]->n_workloads; w++) {
            int idx;
            if ((st = kace_dataset_intern(ctx, out[i], out[0]->workloads[w].name, &idx)))
                goto fail;
            memcpy(out[i]->workloads[idx].metric, out[0]->workloads[w].metric, sizeof out[0]->workloads[w].metric);
        }
    if ((st = load_runs(ctx, s, sets, n, all_splits, out)))
        goto fail;
    return KACE_OK;
fail:
    for (size_t i = 0; i < n; i++)
        kace_dataset_free(&out[i]);
    return st;
}

kace_status kace_store_load_dataset(kace_ctx *ctx, kace_store *s, const char *set, bool all_splits, kace_dataset **out)
{
    return kace_store_load_datasets(ctx, s, &set, 1, all_splits, out);
}

/* ---- a dataset around a few workloads (kace predict) ------------------- */

/* Interns the workload of store id `id` and maps id -> its index. */
static kace_status around_workload(kace_ctx *ctx, kace_dataset *ds, kace_key_index *by_id, sqlite3_int64 id,
                                   const char *name)
{
    int idx;
    kace_status st = kace_dataset_intern(ctx, ds, name, &idx);
    if (st)
        return st;
    return kace_key_index_add(by_id, (uint64_t)id, idx, NULL) ? KACE_OK
                                                              : kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
}

/* Reads rows (workload_id, metric, value) of q into ds's profiles. */
static kace_status around_profiles(kace_ctx *ctx, kace_store *s, kace_dataset *ds, const kace_key_index *by_id,
                                   sqlite3_stmt *q)
{
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        int w = kace_key_index_find(by_id, (uint64_t)sqlite3_column_int64(q, 0));
        int m = kace_metric_from_name((const char *)sqlite3_column_text(q, 1));
        if (w >= 0 && m >= 0 && sqlite3_column_type(q, 2) != SQLITE_NULL)
            ds->workloads[w].metric[m] = sqlite3_column_double(q, 2);
    }
    return rc == SQLITE_DONE ? KACE_OK : store_fail(ctx, s, "read profiles");
}

typedef struct around_run {
    sqlite3_int64 id;
    kace_colocation col;
    bool keep;
} around_run;

static int by_run_id(const void *a, const void *b)
{
    sqlite3_int64 x = ((const around_run *)a)->id, y = ((const around_run *)b)->id;
    return (x > y) - (x < y);
}

/* Appends run c to runs[0..*n) unless left out or there already. */
static kace_status around_keep(kace_ctx *ctx, kace_key_index *seen, const around_run *c, around_run **runs,
                               size_t *n, size_t *cap)
{
    if (!c->keep || c->col.k < 1 || kace_key_index_find(seen, (uint64_t)c->id) >= 0)
        return KACE_OK;
    if (*n == *cap) {
        size_t grown_cap = *cap ? 2 * *cap : 64;
        around_run *grown = realloc(*runs, grown_cap * sizeof *grown);
        if (!grown)
            return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
        *runs = grown;
        *cap = grown_cap;
    }
    if (!kace_key_index_add(seen, (uint64_t)c->id, 0, NULL))
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    (*runs)[(*n)++] = *c;
    return KACE_OK;
}

kace_status kace_store_load_around(kace_ctx *ctx, kace_store *s, const char *const *names, size_t n,
                                   bool every_workload, kace_dataset **out)
{
    *out = NULL;
    kace_dataset *ds = NULL;
    sqlite3_stmt *q = NULL;
    kace_key_index *by_id = kace_key_index_new(), *seen = kace_key_index_new();
    sqlite3_int64 *named = malloc((n ? n : 1) * sizeof *named);
    around_run *runs = NULL;
    size_t n_named = 0, n_runs = 0, cap_runs = 0;
    kace_status st = kace_dataset_new(ctx, &ds);
    int rc = SQLITE_DONE;
    if (st)
        goto fail;
    if (!by_id || !seen || !named) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
        goto fail;
    }
    /* Every workload in id order first (the indices of a full load), or only the named ones. */
    if (every_workload) {
        if ((st = store_prepare(ctx, s, "SELECT id, name FROM workloads ORDER BY id", &q)))
            goto fail;
        while ((rc = sqlite3_step(q)) == SQLITE_ROW)
            if ((st = around_workload(ctx, ds, by_id, sqlite3_column_int64(q, 0),
                                      (const char *)sqlite3_column_text(q, 1))))
                goto fail;
        if (rc != SQLITE_DONE) {
            st = store_fail(ctx, s, "read workloads");
            goto fail;
        }
        sqlite3_finalize(q);
        q = NULL;
    }
    if ((st = store_prepare(ctx, s, "SELECT id FROM workloads WHERE name=?", &q)))
        goto fail;
    for (size_t i = 0; i < n; i++) {
        sqlite3_reset(q);
        sqlite3_bind_text(q, 1, names[i], -1, SQLITE_STATIC);
        if ((rc = sqlite3_step(q)) == SQLITE_ROW) {
            sqlite3_int64 id = sqlite3_column_int64(q, 0);
            if (kace_key_index_find(seen, (uint64_t)id) >= 0)
                continue; /* named twice */
            if ((st = around_workload(ctx, ds, by_id, id, names[i])))
                goto fail;
            if (!kace_key_index_add(seen, (uint64_t)id, 0, NULL)) {
                st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
                goto fail;
            }
            named[n_named++] = id;
        } else if (rc != SQLITE_DONE) {
            st = store_fail(ctx, s, "read workloads");
            goto fail;
        }
    }
    sqlite3_finalize(q);
    q = NULL;
    /* Profiles: one scan for every workload, an indexed lookup for a few. */
    if (every_workload) {
        if ((st = store_prepare(ctx, s, "SELECT workload_id, metric, value FROM profiles", &q)) ||
            (st = around_profiles(ctx, s, ds, by_id, q)))
            goto fail;
    } else {
        if ((st = store_prepare(ctx, s, "SELECT workload_id, metric, value FROM profiles WHERE workload_id=?", &q)))
            goto fail;
        for (size_t i = 0; i < n_named && !st; i++) {
            sqlite3_reset(q);
            sqlite3_bind_int64(q, 1, named[i]);
            st = around_profiles(ctx, s, ds, by_id, q);
        }
        if (st)
            goto fail;
    }
    sqlite3_finalize(q);
    q = NULL;
    /* The successful all-100% runs of each named workload, members and all, in one query per workload;
     * each run once (a run of two named workloads comes twice), then in id order as a full load has them. */
    kace_key_index_free(&seen);
    if (!(seen = kace_key_index_new())) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
        goto fail;
    }
    if ((st = store_prepare(ctx, s,
                      "SELECT r.id, r.k, m.slot, m.workload_id, m.throughput FROM run_members t "
                      "JOIN runs r ON r.id=t.run_id JOIN run_members m ON m.run_id=r.id "
                      "WHERE t.workload_id=?1 AND r.status='ok' AND NOT EXISTS "
                      "(SELECT 1 FROM run_members x WHERE x.run_id=r.id AND x.mps_pct<>100) ORDER BY r.id, m.slot",
                      &q)))
        goto fail;
    for (size_t i = 0; i < n_named; i++) {
        sqlite3_reset(q);
        sqlite3_bind_int64(q, 1, named[i]);
        around_run c = {.id = -1};
        for (;;) {
            rc = sqlite3_step(q);
            sqlite3_int64 id = rc == SQLITE_ROW ? sqlite3_column_int64(q, 0) : -2;
            if (c.id >= 0 && id != c.id && (st = around_keep(ctx, seen, &c, &runs, &n_runs, &cap_runs)))
                goto fail;
            if (rc != SQLITE_ROW)
                break;
            if (id != c.id) {
                memset(&c, 0, sizeof c);
                c.id = id;
                c.col.k = sqlite3_column_int(q, 1);
                c.keep = true;
            }
            int slot = sqlite3_column_int(q, 2);
            if (slot < 0 || slot >= KACE_MAX_K || slot >= c.col.k) {
                st = kace_fail(ctx, KACE_ERR_STORE, "%s: run %lld has a bad member slot %d", s->path, (long long)id,
                               slot);
                goto fail;
            }
            c.col.workload[slot] = kace_key_index_find(by_id, (uint64_t)sqlite3_column_int64(q, 3));
            c.col.mps_pct[slot] = 100;
            c.col.throughput[slot] = sqlite3_column_double(q, 4);
            c.keep = c.keep && c.col.workload[slot] >= 0; /* every member in the dataset */
        }
        if (rc != SQLITE_DONE) {
            st = store_fail(ctx, s, "read runs");
            goto fail;
        }
    }
    if (n_runs)
        qsort(runs, n_runs, sizeof *runs, by_run_id);
    for (size_t i = 0; i < n_runs; i++)
        if ((st = kace_dataset_add_colocation(ctx, ds, &runs[i].col)))
            goto fail;
    sqlite3_finalize(q);
    kace_key_index_free(&by_id);
    kace_key_index_free(&seen);
    free(named);
    free(runs);
    *out = ds;
    return KACE_OK;
fail:
    sqlite3_finalize(q);
    kace_key_index_free(&by_id);
    kace_key_index_free(&seen);
    free(named);
    free(runs);
    kace_dataset_free(&ds);
    return st;
}

/* The first pair colocation of each unordered pair of workloads, by
 * kace_pair_key: a split row is resolved in constant time. */
static kace_status index_pairs(kace_ctx *ctx, const kace_dataset *ds, kace_key_index **out)
{
    kace_key_index *ix = kace_key_index_new();
    for (size_t i = 0; ix && i < ds->n_colocations; i++) {
        const kace_colocation *c = &ds->colocations[i];
        if (c->k == 2 && !kace_key_index_add(ix, kace_pair_key(c->workload[0], c->workload[1]), (int)i, NULL))
            kace_key_index_free(&ix);
    }
    *out = ix;
    return ix ? KACE_OK : kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
}

kace_status kace_store_load_splits(kace_ctx *ctx, kace_store *s, const kace_dataset *ds, kace_splits **out)
{
    *out = NULL;
    sqlite3_stmt *q = NULL;
    kace_splits *sp = calloc(1, sizeof *sp);
    if (!sp)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    kace_key_index *pairs = NULL;
    kace_status st = index_pairs(ctx, ds, &pairs);
    size_t cap = 0;
    if (st)
        goto fail;
    /* rowid order = file order, which the paper's row order depends on. */
    if ((st = store_prepare(ctx, s, "SELECT n_occur, seed, is_train, paper_fit, workload1, workload2 FROM splits ORDER BY rowid",
                      &q)))
        goto fail;
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        const char *w1 = (const char *)sqlite3_column_text(q, 4), *w2 = (const char *)sqlite3_column_text(q, 5);
        int a = kace_dataset_find(ds, w1), b = kace_dataset_find(ds, w2);
        int c = (a >= 0 && b >= 0) ? kace_key_index_find(pairs, kace_pair_key(a, b)) : -1;
        if (c < 0) {
            st = kace_fail(ctx, KACE_ERR_NOT_FOUND, "split names the pair (%s, %s), which the pair set does not hold", w1,
                           w2);
            goto fail;
        }
        if (sp->n == cap) {
            cap = cap ? cap * 2 : 1024;
            kace_split_row *r = realloc(sp->rows, cap * sizeof *r);
            if (!r) {
                st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
                goto fail;
            }
            sp->rows = r;
        }
        kace_split_row *r = &sp->rows[sp->n++];
        r->n_occur = sqlite3_column_int(q, 0);
        r->seed = sqlite3_column_int(q, 1);
        r->train = sqlite3_column_int(q, 2) != 0;
        r->paper_fit = sqlite3_column_int(q, 3) != 0;
        r->colocation = c;
    }
    if (rc != SQLITE_DONE) {
        st = store_fail(ctx, s, "read splits");
        goto fail;
    }
    sqlite3_finalize(q);
    kace_key_index_free(&pairs);
    *out = sp;
    return KACE_OK;
fail:
    sqlite3_finalize(q);
    kace_key_index_free(&pairs);
    kace_splits_free(&sp);
    return st;
}

void kace_splits_free(kace_splits **s)
{
    if (!s || !*s)
        return;
    free((*s)->rows);
    free(*s);
    *s = NULL;
}

kace_status kace_store_list_sets(kace_ctx *ctx, kace_store *s, kace_set_info **sets, size_t *n)
{
    *sets = NULL;
    *n = 0;
    sqlite3_stmt *q = NULL;
    kace_status st;
    if ((st = store_prepare(ctx, s, "SELECT set_name, max(k), count(*) FROM runs GROUP BY set_name ORDER BY set_name", &q)))
        return st;
    size_t cap = 0;
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        if (*n == cap) {
            cap = cap ? cap * 2 : 16;
            kace_set_info *p = realloc(*sets, cap * sizeof *p);
            if (!p) {
                sqlite3_finalize(q);
                free(*sets);
                *sets = NULL;
                *n = 0;
                return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
            }
            *sets = p;
        }
        kace_set_info *si = &(*sets)[(*n)++];
        snprintf(si->name, sizeof si->name, "%s", (const char *)sqlite3_column_text(q, 0));
        si->k = sqlite3_column_int(q, 1);
        si->n_runs = (size_t)sqlite3_column_int64(q, 2);
    }
    sqlite3_finalize(q);
    return rc == SQLITE_DONE ? KACE_OK : store_fail(ctx, s, "read sets");
}

kace_status kace_store_count(kace_ctx *ctx, kace_store *s, kace_store_counts *c)
{
    memset(c, 0, sizeof *c);
    static const char *const sql[] = {"SELECT count(*) FROM workloads", "SELECT count(*) FROM profiles",
                                      "SELECT count(*) FROM runs", "SELECT count(*) FROM splits",
                                      "SELECT count(*) FROM models"};
    size_t *dst[] = {&c->workloads, &c->profile_values, &c->runs, &c->splits, &c->models};
    for (int i = 0; i < 5; i++) {
        sqlite3_stmt *q = NULL;
        kace_status st = store_prepare(ctx, s, sql[i], &q);
        if (st)
            return st;
        if (sqlite3_step(q) == SQLITE_ROW)
            *dst[i] = (size_t)sqlite3_column_int64(q, 0);
        sqlite3_finalize(q);
    }
    return KACE_OK;
}
