/* The store: importing measurement batches (kace import). */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "kace/meter.h"
#include "kace/predictor.h"
#include "data/import_reader.h"
#include "store/store_internal.h"

/* ---- import ---------------------------------------------------------- */

typedef struct stmt_set {
    sqlite3_stmt *ins_workload, *get_workload, *ins_source, *get_source, *get_value, *put_value, *hist_value,
        *ins_run, *get_run, *get_members, *hist_run, *upd_run, *upd_member, *ins_member, *get_split, *hist_split,
        *upd_split, *ins_split, *find_pair;
} stmt_set;

/* The import's statements, prepared together: where each goes in a
 * stmt_set, and its SQL. */
static const struct {
    size_t at;
    const char *sql;
} import_sql[] = {
    {offsetof(stmt_set, ins_workload), "INSERT INTO workloads(name, family, batch) VALUES(?,?,?)"},
    {offsetof(stmt_set, get_workload), "SELECT id FROM workloads WHERE name=?"},
    {offsetof(stmt_set, ins_source), "INSERT OR IGNORE INTO sources(gpu, tool, date, file) VALUES(?,?,?,?)"},
    {offsetof(stmt_set, get_source), "SELECT id FROM sources WHERE gpu IS ? AND tool IS ? AND date IS ? AND file=?"},
    {offsetof(stmt_set, get_value),
     "SELECT p.value, p.source_id, s.file, p.embedded FROM profiles p JOIN sources s ON "
     "s.id=p.source_id WHERE p.workload_id=? AND p.metric=?"},
    {offsetof(stmt_set, put_value),
     "INSERT OR REPLACE INTO profiles(workload_id, metric, value, source_id, embedded) "
     "VALUES(?,?,?,?,?)"},
    {offsetof(stmt_set, hist_value),
     "INSERT INTO profile_history(workload_id, metric, value, source_id, replaced_at, replaced_by) "
     "SELECT workload_id, metric, value, source_id, ?3, ?4 FROM profiles WHERE workload_id=?1 AND "
     "metric=?2"},
    {offsetof(stmt_set, ins_run), "INSERT INTO runs(set_name, k, status, run_key, source_id) VALUES(?,?,?,?,?)"},
    {offsetof(stmt_set, get_run),
     "SELECT r.id, r.status, s.file FROM runs r JOIN sources s ON s.id=r.source_id WHERE r.run_key=?"},
    {offsetof(stmt_set, get_members), "SELECT slot, throughput FROM run_members WHERE run_id=? ORDER BY slot"},
    {offsetof(stmt_set, hist_run),
     "INSERT INTO run_history(run_id, slot, throughput, status, source_id, replaced_at, replaced_by) "
     "SELECT m.run_id, m.slot, m.throughput, r.status, r.source_id, ?2, ?3 FROM run_members m "
     "JOIN runs r ON r.id=m.run_id WHERE m.run_id=?1"},
    {offsetof(stmt_set, upd_run), "UPDATE runs SET status=?2, source_id=?3 WHERE id=?1"},
    {offsetof(stmt_set, upd_member), "UPDATE run_members SET throughput=?3 WHERE run_id=?1 AND slot=?2"},
    {offsetof(stmt_set, ins_member),
     "INSERT INTO run_members(run_id, slot, workload_id, mps_pct, throughput) VALUES(?,?,?,?,?)"},
    {offsetof(stmt_set, get_split),
     "SELECT rowid, is_train, paper_fit FROM splits WHERE n_occur=?1 AND seed=?2 AND "
     "((workload1=?3 AND workload2=?4) OR (workload1=?4 AND workload2=?3))"},
    {offsetof(stmt_set, hist_split),
     "INSERT INTO split_history(n_occur, seed, workload1, workload2, is_train, paper_fit, replaced_at, "
     "replaced_by) SELECT n_occur, seed, workload1, workload2, is_train, paper_fit, ?2, ?3 FROM splits "
     "WHERE rowid=?1"},
    {offsetof(stmt_set, upd_split), "UPDATE splits SET is_train=?2, paper_fit=?3 WHERE rowid=?1"},
    {offsetof(stmt_set, ins_split), "INSERT INTO splits VALUES(?,?,?,?,?,?)"},
    {offsetof(stmt_set, find_pair),
     "SELECT wa.name, wb.name FROM runs r JOIN run_members a ON a.run_id=r.id AND a.slot=0 "
     "JOIN run_members b ON b.run_id=r.id AND b.slot=1 JOIN workloads wa ON wa.id=a.workload_id "
     "JOIN workloads wb ON wb.id=b.workload_id WHERE r.k=2"},
};
_Static_assert(sizeof import_sql / sizeof *import_sql == sizeof(stmt_set) / sizeof(sqlite3_stmt *),
               "every statement of stmt_set is prepared");

static void finalize_all(stmt_set *q)
{
    sqlite3_stmt **p = (sqlite3_stmt **)q;
    for (size_t i = 0; i < sizeof *q / sizeof *p; i++)
        sqlite3_finalize(p[i]);
}

/* One batch being stored: what it is compared with, and the conflicts found
 * so far when it may not replace stored values. */
typedef struct import_job {
    kace_ctx *ctx;
    kace_store *s;
    stmt_set *q;
    const kace_import_batch *b;
    bool replace, create_workloads;
    const char *retire_gpu; /* retire_other_gpu: the GPU whose profile this is */
    sqlite3_int64 source;
    char stamp[32]; /* when replaced values became history */
    kace_import_stats stats;
    size_t n_conflicts;
    char conflicts[1200]; /* the first three, "; "-separated */
    bool nested;          /* a savepoint inside the caller's transaction */
    bool count_rows;      /* the meter counts rows (it counts bytes when a file is read in batches) */
    sqlite3_stmt *seen;   /* a file read in batches: its runs so far (temp.kace_import_seen), or NULL */
    sqlite3_stmt *seen_line;
} import_job;

static void add_conflict(import_job *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add_conflict(import_job *j, const char *fmt, ...)
{
    if (j->n_conflicts++ >= 3)
        return;
    size_t at = strlen(j->conflicts);
    if (at && at + 2 < sizeof j->conflicts) {
        memcpy(j->conflicts + at, "; ", 3);
        at += 2;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(j->conflicts + at, sizeof j->conflicts - at, fmt, ap);
    va_end(ap);
}

/* The shortest text that reads back as v, as the file most likely had it. */
static void fmt_number(char *out, size_t size, double v)
{
    if (isnan(v)) {
        snprintf(out, size, "missing");
        return;
    }
    for (int digits = 6; digits <= 17; digits++) {
        snprintf(out, size, "%.*g", digits, v);
        if (strtod(out, NULL) == v)
            return;
    }
}

/* The id of a stored workload; *found false when there is none. */
static kace_status find_workload(import_job *j, const char *name, sqlite3_int64 *id, bool *found)
{
    sqlite3_stmt *q = j->q->get_workload;
    sqlite3_reset(q);
    sqlite3_bind_text(q, 1, name, -1, SQLITE_STATIC);
    int rc = sqlite3_step(q);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        return store_fail(j->ctx, j->s, "find workload");
    *found = rc == SQLITE_ROW;
    *id = *found ? sqlite3_column_int64(q, 0) : 0;
    return KACE_OK;
}

static kace_status create_workload(import_job *j, const char *name, sqlite3_int64 *id)
{
    bool found;
    kace_status st = find_workload(j, name, id, &found);
    if (st || found)
        return st;
    char family[KACE_NAME_MAX];
    int batch;
    kace_workload_parse_name(name, family, &batch);
    sqlite3_stmt *q = j->q->ins_workload;
    sqlite3_reset(q);
    sqlite3_bind_text(q, 1, name, -1, SQLITE_STATIC);
    /* A TRANSIENT bind copies, so it can run out of memory; unchecked, the
     * row would be stored with NULL there (or, under OR IGNORE, not at all). */
    if (sqlite3_bind_text(q, 2, family, -1, SQLITE_TRANSIENT) != SQLITE_OK)
        return store_fail(j->ctx, j->s, "insert workload");
    sqlite3_bind_int(q, 3, batch);
    if (sqlite3_step(q) != SQLITE_DONE)
        return store_fail(j->ctx, j->s, "insert workload");
    *id = sqlite3_last_insert_rowid(j->s->db);
    return KACE_OK;
}

/* Where a record came from, for messages: "file:line:col" or "file". */
static void place(const import_job *j, int line, int col, char *out, size_t size)
{
    if (line > 0)
        snprintf(out, size, "%s:%d:%d", j->b->origin, line, col > 0 ? col : 1);
    else
        snprintf(out, size, "%s", j->b->origin);
}

/* Colocation rows may only name workloads that are stored or profiled by
 * the same import (profiles are stored first), unless create_workloads. */
static kace_status check_run_workloads(import_job *j)
{
    for (size_t i = 0; i < j->b->n_runs; i++) {
        const kace_import_run *r = &j->b->runs[i];
        for (int m = 0; m < r->k; m++) {
            sqlite3_int64 id;
            bool found;
            kace_status st = j->create_workloads ? create_workload(j, r->workload[m], &id)
                                                 : find_workload(j, r->workload[m], &id, &found);
            if (st)
                return st;
            if (!j->create_workloads && !found) {
                char where[700];
                place(j, r->line, r->name_col[m], where, sizeof where);
                return kace_fail(j->ctx, KACE_ERR_NOT_FOUND,
                                 "%s: unknown workload '%s' (neither stored nor profiled by this import: import its "
                                 "profile with it, or pass --create-workloads)",
                                 where, r->workload[m]);
            }
        }
    }
    return KACE_OK;
}

/* retire_other_gpu: each of the batch's workloads keeps no profile value
 * that another GPU measured (sources naming no GPU stay: nothing says they
 * disagree). Runs before import_values, so a value that comes back
 * unchanged is stored again with this GPU's source. */
static kace_status retire_other_gpu_values(import_job *j)
{
    sqlite3_stmt *hist = NULL, *del = NULL;
    kace_status st = KACE_OK;
    if ((st = store_prepare(j->ctx, j->s,
                      "INSERT INTO profile_history(workload_id, metric, value, source_id, replaced_at, replaced_by) "
                      "SELECT p.workload_id, p.metric, p.value, p.source_id, ?3, ?4 FROM profiles p JOIN sources s ON "
                      "s.id=p.source_id WHERE p.workload_id=?1 AND s.gpu IS NOT NULL AND s.gpu<>'' AND s.gpu<>?2",
                      &hist)) ||
        (st = store_prepare(j->ctx, j->s,
                      "DELETE FROM profiles WHERE workload_id=?1 AND source_id IN (SELECT id FROM sources WHERE "
                      "gpu IS NOT NULL AND gpu<>'' AND gpu<>?2)",
                      &del)))
        goto done;
    const char *previous = NULL;
    for (size_t i = 0; i < j->b->n_values && !st; i++) {
        const kace_profile_value *v = &j->b->values[i];
        if (v->embedded || (previous && strcmp(previous, v->workload) == 0))
            continue; /* values come grouped by workload: each group once */
        previous = v->workload;
        sqlite3_int64 wid;
        bool found = false;
        if ((st = find_workload(j, v->workload, &wid, &found)) || !found)
            continue;
        sqlite3_reset(hist);
        sqlite3_bind_int64(hist, 1, wid);
        sqlite3_bind_text(hist, 2, j->retire_gpu, -1, SQLITE_STATIC);
        sqlite3_bind_text(hist, 3, j->stamp, -1, SQLITE_STATIC);
        sqlite3_bind_int64(hist, 4, j->source);
        sqlite3_reset(del);
        sqlite3_bind_int64(del, 1, wid);
        sqlite3_bind_text(del, 2, j->retire_gpu, -1, SQLITE_STATIC);
        if (sqlite3_step(hist) != SQLITE_DONE || sqlite3_step(del) != SQLITE_DONE)
            st = store_fail(j->ctx, j->s, "move another GPU's profile to history");
        else
            j->stats.values_retired += (size_t)sqlite3_changes(j->s->db);
    }
done:
    sqlite3_finalize(hist);
    sqlite3_finalize(del);
    return st;
}

static kace_status import_values(import_job *j)
{
    stmt_set *q = j->q;
    kace_status st;
    for (size_t i = 0; i < j->b->n_values; i++) {
        if (j->count_rows)
            kace_meter_add(j->ctx, 1);
        const kace_profile_value *v = &j->b->values[i];
        char where[700], why[200];
        place(j, v->line, v->col, where, sizeof where);
        /* The parsers check ranges already; this covers every other producer
         * (kace profile, import-cupti, ncu exports). */
        if (kace_metric_check(v->metric, v->value, why, sizeof why))
            return kace_fail(j->ctx, KACE_ERR_INVALID, "%s: workload %s: %s", where, v->workload, why);
        sqlite3_int64 wid;
        bool found = true;
        if ((st = v->embedded ? find_workload(j, v->workload, &wid, &found) : create_workload(j, v->workload, &wid)))
            return st;
        if (!found)
            return kace_fail(j->ctx, KACE_ERR_NOT_FOUND, "%s: unknown workload '%s' (pass --create-workloads)", where,
                             v->workload);
        sqlite3_reset(q->get_value);
        sqlite3_bind_int64(q->get_value, 1, wid);
        sqlite3_bind_text(q->get_value, 2, v->metric, -1, SQLITE_STATIC);
        int rc = sqlite3_step(q->get_value);
        if (rc != SQLITE_ROW && rc != SQLITE_DONE)
            return store_fail(j->ctx, j->s, "read profile");
        bool exists = rc == SQLITE_ROW;
        bool old_missing = exists && sqlite3_column_type(q->get_value, 0) == SQLITE_NULL;
        double old = exists && !old_missing ? sqlite3_column_double(q->get_value, 0) : NAN;
        bool old_embedded = exists && sqlite3_column_int(q->get_value, 3) != 0;
        /* Unchanged: a copy from a colocation file where the store has the
         * metric (copies only fill gaps); a missing cell where a value is
         * stored (missing is "not measured here", not a contradiction); the
         * same value, unless a profile now confirms what only a copy said. */
        if (exists && (v->embedded || isnan(v->value) || (old == v->value && !old_embedded))) {
            j->stats.values_unchanged++;
            continue;
        }
        /* Another value for one a profile gave: refused unless replacing.
         * A profile's value replaces a copy's without asking. */
        if (exists && !old_missing && !old_embedded && !j->replace) {
            char was[32], now[32];
            fmt_number(was, sizeof was, old);
            fmt_number(now, sizeof now, v->value);
            add_conflict(j, "%s: %s of %s is %s here, %s stored (from %s)", where, v->metric, v->workload, now, was,
                         (const char *)sqlite3_column_text(q->get_value, 2));
            continue;
        }
        if (exists) {
            sqlite3_reset(q->hist_value);
            sqlite3_bind_int64(q->hist_value, 1, wid);
            sqlite3_bind_text(q->hist_value, 2, v->metric, -1, SQLITE_STATIC);
            sqlite3_bind_text(q->hist_value, 3, j->stamp, -1, SQLITE_STATIC);
            sqlite3_bind_int64(q->hist_value, 4, j->source);
            if (sqlite3_step(q->hist_value) != SQLITE_DONE)
                return store_fail(j->ctx, j->s, "keep profile history");
        }
        sqlite3_reset(q->put_value);
        sqlite3_bind_int64(q->put_value, 1, wid);
        sqlite3_bind_text(q->put_value, 2, v->metric, -1, SQLITE_STATIC);
        store_bind_number_or_null(q->put_value, 3, v->value);
        sqlite3_bind_int64(q->put_value, 4, j->source);
        sqlite3_bind_int(q->put_value, 5, v->embedded);
        if (sqlite3_step(q->put_value) != SQLITE_DONE)
            return store_fail(j->ctx, j->s, "write profile");
        if (!exists)
            j->stats.values_added++;
        else if (old == v->value)
            j->stats.values_unchanged++; /* confirmed by a profile: only its source changed */
        else
            j->stats.values_updated++;
    }
    return KACE_OK;
}

/* Compares a stored run with r: *same, and a description of the first difference. */
static kace_status compare_run(import_job *j, sqlite3_int64 run_id, const char *old_status, const kace_import_run *r,
                               bool *same, char *diff, size_t size, int *slot_out)
{
    *slot_out = 0;
    *same = strcmp(old_status, store_run_status_name(r->status)) == 0;
    if (!*same)
        snprintf(diff, size, "status %s here, %s stored", store_run_status_name(r->status), old_status);
    sqlite3_stmt *q = j->q->get_members;
    sqlite3_reset(q);
    sqlite3_bind_int64(q, 1, run_id);
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        int slot = sqlite3_column_int(q, 0);
        if (slot < 0 || slot >= r->k)
            continue;
        double old = sqlite3_column_type(q, 1) == SQLITE_NULL ? NAN : sqlite3_column_double(q, 1);
        double now = r->throughput[slot];
        if ((isnan(old) != isnan(now)) || (!isnan(old) && old != now)) {
            if (*same) {
                char was[32], is[32];
                fmt_number(was, sizeof was, old);
                fmt_number(is, sizeof is, now);
                snprintf(diff, size, "throughput of %s %s here, %s stored", r->workload[slot], is, was);
                *slot_out = slot;
            }
            *same = false;
        }
    }
    return rc == SQLITE_DONE ? KACE_OK : store_fail(j->ctx, j->s, "read run members");
}

static kace_status import_runs(import_job *j)
{
    stmt_set *q = j->q;
    const kace_import_batch *b = j->b;
    kace_status st;
    for (size_t i = 0; i < b->n_runs; i++) {
        if (j->count_rows)
            kace_meter_add(j->ctx, 1);
        const kace_import_run *r = &b->runs[i];
        char where[700];
        place(j, r->line, r->col[0], where, sizeof where);
        for (int m = 0; m < r->k; m++)
            if (!isnan(r->throughput[m]) && !(r->throughput[m] > 0 && r->throughput[m] <= kace_throughput_max()) &&
                (place(j, r->line, r->col[m], where, sizeof where), true))
                return kace_fail(j->ctx, KACE_ERR_INVALID, "%s: throughput %g of %s is out of range (more than 0..%g)",
                                 where, r->throughput[m], r->workload[m], kace_throughput_max());
        char key[KACE_MAX_K * (KACE_NAME_MAX + 8) + 160];
        int at = snprintf(key, sizeof key, "%s", b->set);
        for (int m = 0; m < r->k; m++)
            at += snprintf(key + at, sizeof key - (size_t)at, "|%s@%d", r->workload[m], r->mps_pct[m]);
        sqlite3_reset(q->get_run);
        if (sqlite3_bind_text(q->get_run, 1, key, -1, SQLITE_TRANSIENT) != SQLITE_OK)
            return store_fail(j->ctx, j->s, "find run");
        int rc = sqlite3_step(q->get_run);
        if (rc == SQLITE_ROW) {
            sqlite3_int64 run_id = sqlite3_column_int64(q->get_run, 0);
            char old_status[16], old_file[600], diff[400] = "";
            snprintf(old_status, sizeof old_status, "%s", (const char *)sqlite3_column_text(q->get_run, 1));
            snprintf(old_file, sizeof old_file, "%s", (const char *)sqlite3_column_text(q->get_run, 2));
            bool same;
            int slot;
            if ((st = compare_run(j, run_id, old_status, r, &same, diff, sizeof diff, &slot)))
                return st;
            if (same) {
                j->stats.runs_unchanged++;
                continue;
            }
            if (!j->replace) {
                place(j, r->line, r->col[slot], where, sizeof where);
                add_conflict(j, "%s: run %s: %s (from %s)", where, key, diff, old_file);
                continue;
            }
            sqlite3_reset(q->hist_run);
            sqlite3_bind_int64(q->hist_run, 1, run_id);
            sqlite3_bind_text(q->hist_run, 2, j->stamp, -1, SQLITE_STATIC);
            sqlite3_bind_int64(q->hist_run, 3, j->source);
            if (sqlite3_step(q->hist_run) != SQLITE_DONE)
                return store_fail(j->ctx, j->s, "keep run history");
            sqlite3_reset(q->upd_run);
            sqlite3_bind_int64(q->upd_run, 1, run_id);
            sqlite3_bind_text(q->upd_run, 2, store_run_status_name(r->status), -1, SQLITE_STATIC);
            sqlite3_bind_int64(q->upd_run, 3, j->source);
            if (sqlite3_step(q->upd_run) != SQLITE_DONE)
                return store_fail(j->ctx, j->s, "update run");
            for (int m = 0; m < r->k; m++) {
                sqlite3_reset(q->upd_member);
                sqlite3_bind_int64(q->upd_member, 1, run_id);
                sqlite3_bind_int(q->upd_member, 2, m);
                store_bind_number_or_null(q->upd_member, 3, r->throughput[m]);
                if (sqlite3_step(q->upd_member) != SQLITE_DONE)
                    return store_fail(j->ctx, j->s, "update run member");
            }
            j->stats.runs_updated++;
            continue;
        }
        if (rc != SQLITE_DONE)
            return store_fail(j->ctx, j->s, "find run");
        sqlite3_reset(q->ins_run);
        sqlite3_bind_text(q->ins_run, 1, b->set, -1, SQLITE_STATIC);
        sqlite3_bind_int(q->ins_run, 2, r->k);
        sqlite3_bind_text(q->ins_run, 3, store_run_status_name(r->status), -1, SQLITE_STATIC);
        if (sqlite3_bind_text(q->ins_run, 4, key, -1, SQLITE_TRANSIENT) != SQLITE_OK)
            return store_fail(j->ctx, j->s, "insert run");
        sqlite3_bind_int64(q->ins_run, 5, j->source);
        if (sqlite3_step(q->ins_run) != SQLITE_DONE)
            return store_fail(j->ctx, j->s, "insert run");
        sqlite3_int64 run_id = sqlite3_last_insert_rowid(j->s->db);
        for (int m = 0; m < r->k; m++) {
            sqlite3_int64 wid;
            bool found;
            if ((st = find_workload(j, r->workload[m], &wid, &found)))
                return st;
            if (!found)
                return kace_fail(j->ctx, KACE_ERR_STORE, "%s: workload '%s' vanished", where, r->workload[m]);
            sqlite3_reset(q->ins_member);
            sqlite3_bind_int64(q->ins_member, 1, run_id);
            sqlite3_bind_int(q->ins_member, 2, m);
            sqlite3_bind_int64(q->ins_member, 3, wid);
            sqlite3_bind_int(q->ins_member, 4, r->mps_pct[m]);
            store_bind_number_or_null(q->ins_member, 5, r->throughput[m]);
            if (sqlite3_step(q->ins_member) != SQLITE_DONE)
                return store_fail(j->ctx, j->s, "insert run member");
        }
        j->stats.runs_added++;
    }
    return KACE_OK;
}

static int cmp_keys(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The stored pairs as sorted "a\x1fb" keys (both orders), so that each
 * split row is checked with a binary search instead of a join. */
static kace_status load_pair_keys(kace_ctx *ctx, kace_store *s, stmt_set *q, char ***keys, size_t *n)
{
    *keys = NULL;
    *n = 0;
    size_t cap = 0;
    int rc;
    while ((rc = sqlite3_step(q->find_pair)) == SQLITE_ROW) {
        const char *a = (const char *)sqlite3_column_text(q->find_pair, 0);
        const char *b = (const char *)sqlite3_column_text(q->find_pair, 1);
        if (*n + 2 > cap) {
            cap = cap ? cap * 2 : 1024;
            char **k = realloc(*keys, cap * sizeof *k);
            if (!k)
                return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
            *keys = k;
        }
        for (int order = 0; order < 2; order++) {
            size_t len = strlen(a) + strlen(b) + 2;
            char *key = malloc(len);
            if (!key)
                return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
            snprintf(key, len, "%s\x1f%s", order ? b : a, order ? a : b);
            (*keys)[(*n)++] = key;
        }
    }
    if (rc != SQLITE_DONE)
        return store_fail(ctx, s, "read pairs");
    qsort(*keys, *n, sizeof **keys, cmp_keys);
    return KACE_OK;
}

/* A stored split of the pair (either order) for sp's n_occur and seed: its
 * rowid, or 0. */
static kace_status find_split(import_job *j, const kace_import_split *sp, sqlite3_int64 *rowid, bool *train,
                              bool *paper_fit)
{
    sqlite3_stmt *q = j->q->get_split;
    sqlite3_reset(q);
    sqlite3_bind_int(q, 1, sp->n_occur);
    sqlite3_bind_int(q, 2, sp->seed);
    sqlite3_bind_text(q, 3, sp->workload1, -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 4, sp->workload2, -1, SQLITE_STATIC);
    int rc = sqlite3_step(q);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        return store_fail(j->ctx, j->s, "find split");
    *rowid = rc == SQLITE_ROW ? sqlite3_column_int64(q, 0) : 0;
    *train = rc == SQLITE_ROW && sqlite3_column_int(q, 1) != 0;
    *paper_fit = rc == SQLITE_ROW && sqlite3_column_int(q, 2) != 0;
    return KACE_OK;
}

static kace_status import_splits(import_job *j)
{
    const kace_import_batch *b = j->b;
    stmt_set *q = j->q;
    if (b->n_splits == 0)
        return KACE_OK;
    char **keys = NULL;
    size_t n_keys = 0;
    kace_status st = load_pair_keys(j->ctx, j->s, q, &keys, &n_keys);
    for (size_t i = 0; st == KACE_OK && i < b->n_splits; i++) {
        if (j->count_rows)
            kace_meter_add(j->ctx, 1);
        const kace_import_split *sp = &b->splits[i];
        /* A split must name a measured pair: otherwise it is a typo. */
        char key[2 * KACE_NAME_MAX + 2];
        snprintf(key, sizeof key, "%s\x1f%s", sp->workload1, sp->workload2);
        const char *kp = key;
        if (!bsearch(&kp, keys, n_keys, sizeof *keys, cmp_keys)) {
            st = kace_fail(j->ctx, KACE_ERR_NOT_FOUND,
                           "%s:%d:1: no measured pair (%s, %s) in the store (import the colocation file first, or "
                           "check the workload names)",
                           b->origin, sp->line, sp->workload1, sp->workload2);
            break;
        }
        sqlite3_int64 rowid = 0;
        bool train = false, paper_fit = false;
        if ((st = find_split(j, sp, &rowid, &train, &paper_fit)))
            break;
        if (rowid && train == sp->train && paper_fit == sp->paper_fit) {
            j->stats.splits_unchanged++;
            continue;
        }
        if (rowid && !j->replace) {
            add_conflict(j, "%s:%d:1: split (%s, %s) of n_occur %d seed %d is %s%s here, %s%s stored", b->origin,
                         sp->line, sp->workload1, sp->workload2, sp->n_occur, sp->seed, sp->train ? "train" : "test",
                         sp->paper_fit ? " paper_fit" : "", train ? "train" : "test", paper_fit ? " paper_fit" : "");
            continue;
        }
        if (rowid) {
            sqlite3_reset(q->hist_split);
            sqlite3_bind_int64(q->hist_split, 1, rowid);
            sqlite3_bind_text(q->hist_split, 2, j->stamp, -1, SQLITE_STATIC);
            sqlite3_bind_int64(q->hist_split, 3, j->source);
            sqlite3_reset(q->upd_split);
            sqlite3_bind_int64(q->upd_split, 1, rowid);
            sqlite3_bind_int(q->upd_split, 2, sp->train);
            sqlite3_bind_int(q->upd_split, 3, sp->paper_fit);
            if (sqlite3_step(q->hist_split) != SQLITE_DONE || sqlite3_step(q->upd_split) != SQLITE_DONE) {
                st = store_fail(j->ctx, j->s, "replace split");
                break;
            }
            j->stats.splits_updated++;
            continue;
        }
        sqlite3_reset(q->ins_split);
        sqlite3_bind_int(q->ins_split, 1, sp->n_occur);
        sqlite3_bind_int(q->ins_split, 2, sp->seed);
        sqlite3_bind_int(q->ins_split, 3, sp->train);
        sqlite3_bind_int(q->ins_split, 4, sp->paper_fit);
        sqlite3_bind_text(q->ins_split, 5, sp->workload1, -1, SQLITE_STATIC);
        sqlite3_bind_text(q->ins_split, 6, sp->workload2, -1, SQLITE_STATIC);
        if (sqlite3_step(q->ins_split) != SQLITE_DONE) {
            st = store_fail(j->ctx, j->s, "insert split");
            break;
        }
        j->stats.splits_added++;
    }
    for (size_t i = 0; i < n_keys; i++)
        free(keys[i]);
    free(keys);
    return st;
}

/* The rows of a file read in batches (kace_import_reader_in_batches) are
 * checked for repeats across its batches here, in a temporary table (in a
 * temporary file, as SQLite keeps temporary tables, not in memory): a run's
 * identity as the parser's check_run_rows sees it, with its line. */
static kace_status seen_begin(import_job *j)
{
    kace_status st;
    if ((st = store_exec(j->ctx, j->s,
                         "CREATE TEMP TABLE IF NOT EXISTS kace_import_seen(key TEXT PRIMARY KEY, line INTEGER NOT NULL) "
                         "WITHOUT ROWID; DELETE FROM temp.kace_import_seen;")) ||
        (st = store_prepare(j->ctx, j->s, "INSERT OR IGNORE INTO temp.kace_import_seen(key, line) VALUES(?,?)",
                            &j->seen)) ||
        (st = store_prepare(j->ctx, j->s, "SELECT line FROM temp.kace_import_seen WHERE key=?", &j->seen_line)))
        return st;
    return KACE_OK;
}

static void seen_end(import_job *j)
{
    sqlite3_finalize(j->seen);
    sqlite3_finalize(j->seen_line);
    j->seen = j->seen_line = NULL;
    store_exec(NULL, j->s, "DELETE FROM temp.kace_import_seen;");
}

/* Fails on a run that an earlier row of the file measured already: in a
 * colocation file members are unordered (A+B is B+A), in a raw campaign
 * the row's order is the split's roles. The message is check_run_rows'. */
static kace_status seen_run(import_job *j, const kace_import_run *r)
{
    int order[KACE_MAX_K];
    bool unordered = j->b->kind == KACE_FILE_COLOCATIONS;
    for (int m = 0; m < r->k; m++) {
        int i = m;
        order[i] = m;
        while (unordered && i > 0) {
            int c = strcmp(r->workload[order[i - 1]], r->workload[order[i]]);
            if (c < 0 || (c == 0 && r->mps_pct[order[i - 1]] <= r->mps_pct[order[i]]))
                break;
            int x = order[i - 1];
            order[i - 1] = order[i];
            order[i] = x;
            i--;
        }
    }
    char key[KACE_MAX_K * (KACE_NAME_MAX + 8) + 16];
    size_t at = (size_t)snprintf(key, sizeof key, "%d", r->k);
    for (int m = 0; m < r->k && at < sizeof key; m++)
        at += (size_t)snprintf(key + at, sizeof key - at, "|%s@%d", r->workload[order[m]], r->mps_pct[order[m]]);
    sqlite3_reset(j->seen);
    if (sqlite3_bind_text(j->seen, 1, key, -1, SQLITE_TRANSIENT) != SQLITE_OK)
        return store_fail(j->ctx, j->s, "check repeated rows");
    sqlite3_bind_int(j->seen, 2, r->line);
    if (sqlite3_step(j->seen) != SQLITE_DONE)
        return store_fail(j->ctx, j->s, "check repeated rows");
    if (sqlite3_changes(j->s->db) == 1)
        return KACE_OK;
    sqlite3_reset(j->seen_line);
    if (sqlite3_bind_text(j->seen_line, 1, key, -1, SQLITE_TRANSIENT) != SQLITE_OK ||
        sqlite3_step(j->seen_line) != SQLITE_ROW)
        return store_fail(j->ctx, j->s, "check repeated rows");
    int first = sqlite3_column_int(j->seen_line, 0);
    if (first == r->line)
        return KACE_OK; /* a raw campaign's row: one run per split, told apart by the percentages */
    char members[KACE_MAX_K * (KACE_NAME_MAX + 8)];
    at = 0;
    for (int m = 0; m < r->k && at < sizeof members; m++)
        at += (size_t)snprintf(members + at, sizeof members - at, "%s%s@%d", m ? " + " : "", r->workload[m],
                               r->mps_pct[m]);
    return kace_fail(j->ctx, KACE_ERR_PARSE, "%s:%d:%d: colocation %s is measured again here (first at line %d)",
                     j->b->origin, r->line, r->col[0], members, first);
}

static void job_cleanup(import_job *j)
{
    finalize_all(j->q);
    sqlite3_finalize(j->seen);
    sqlite3_finalize(j->seen_line);
    j->seen = j->seen_line = NULL;
}

/* Starts storing one file (or batch): a savepoint, the statements, the
 * source row (head->origin names the file). */
static kace_status job_begin(import_job *j, kace_ctx *ctx, kace_store *s, stmt_set *q, const kace_import_batch *head,
                             const kace_source *source, const kace_import_options *opt)
{
    memset(j, 0, sizeof *j);
    memset(q, 0, sizeof *q);
    j->ctx = ctx;
    j->s = s;
    j->q = q;
    j->b = head;
    j->count_rows = true;
    j->replace = opt && opt->replace;
    j->create_workloads = opt && opt->create_workloads;
    j->retire_gpu = opt && opt->retire_other_gpu && source && source->gpu && *source->gpu ? source->gpu : NULL;
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(j->stamp, sizeof j->stamp, "%Y-%m-%dT%H:%M:%SZ", &tm);
    kace_status st;
    /* Inside a caller's transaction (kace_store_begin) a savepoint makes this
     * batch atomic on its own while the caller can still undo everything. */
    j->nested = sqlite3_get_autocommit(s->db) == 0;
    if ((st = store_exec(ctx, s, j->nested ? "SAVEPOINT kace_import;" : "BEGIN IMMEDIATE;")))
        return st;
    for (size_t i = 0; i < sizeof import_sql / sizeof *import_sql; i++)
        if ((st = store_prepare(ctx, s, import_sql[i].sql, (sqlite3_stmt **)((char *)q + import_sql[i].at))))
            goto fail;

    const char *file = strrchr(head->origin, '/') ? strrchr(head->origin, '/') + 1 : head->origin;
    store_bind_text_or_null(q->ins_source, 1, source ? source->gpu : NULL);
    store_bind_text_or_null(q->ins_source, 2, source ? source->tool : NULL);
    store_bind_text_or_null(q->ins_source, 3, source ? source->date : NULL);
    sqlite3_bind_text(q->ins_source, 4, file, -1, SQLITE_STATIC);
    if (sqlite3_step(q->ins_source) != SQLITE_DONE) {
        st = store_fail(ctx, s, "insert source");
        goto fail;
    }
    store_bind_text_or_null(q->get_source, 1, source ? source->gpu : NULL);
    store_bind_text_or_null(q->get_source, 2, source ? source->tool : NULL);
    store_bind_text_or_null(q->get_source, 3, source ? source->date : NULL);
    sqlite3_bind_text(q->get_source, 4, file, -1, SQLITE_STATIC);
    if (sqlite3_step(q->get_source) != SQLITE_ROW) {
        st = store_fail(ctx, s, "find source");
        goto fail;
    }
    j->source = sqlite3_column_int64(q->get_source, 0);
    return KACE_OK;
fail:
    job_cleanup(j);
    store_exec(NULL, s, j->nested ? "ROLLBACK TO kace_import; RELEASE kace_import;" : "ROLLBACK;");
    return st;
}

/* Stores one batch of the job's file. */
static kace_status job_batch(import_job *j, const kace_import_batch *b)
{
    j->b = b;
    kace_status st;
    if (j->seen)
        for (size_t i = 0; i < b->n_runs; i++)
            if ((st = seen_run(j, &b->runs[i])))
                return st;
    if ((st = check_run_workloads(j)) || (j->retire_gpu && (st = retire_other_gpu_values(j))) ||
        (st = import_values(j)) || (st = import_runs(j)) || (st = import_splits(j)))
        return st;
    return KACE_OK;
}

/* Ends the job begun by job_begin, however st says it went: refuses the
 * file when it conflicts with stored values, drops a source row left
 * unused, and releases the savepoint, or rolls it back on a failure. */
static kace_status job_end(import_job *j, kace_status st)
{
    kace_ctx *ctx = j->ctx;
    kace_store *s = j->s;
    if (!st && j->n_conflicts)
        st = kace_fail(ctx, KACE_ERR_INVALID,
                       "%s%s; %zu stored value(s) differ from this file's, and a re-import that changes stored data "
                       "is refused (--replace stores the file's values and keeps the old ones as history)",
                       j->conflicts, j->n_conflicts > 3 ? "; ..." : "", j->n_conflicts);
    job_cleanup(j);
    /* A source row that ended up unused (nothing new) is dropped again. */
    if (!st)
        st = store_exec(ctx, s,
                        "DELETE FROM sources WHERE id NOT IN (SELECT source_id FROM profiles) AND id NOT IN "
                        "(SELECT source_id FROM runs) AND id NOT IN (SELECT source_id FROM profile_history) AND id NOT "
                        "IN (SELECT replaced_by FROM profile_history) AND id NOT IN (SELECT source_id FROM run_history) "
                        "AND id NOT IN (SELECT replaced_by FROM run_history) AND id NOT IN (SELECT replaced_by FROM "
                        "split_history);");
    if (!st)
        st = store_exec(ctx, s, j->nested ? "RELEASE kace_import;" : "COMMIT;");
    if (st)
        store_exec(NULL, s, j->nested ? "ROLLBACK TO kace_import; RELEASE kace_import;" : "ROLLBACK;");
    return st;
}

/* Records per batch of a file read in batches: memory holds one batch
 * (about 1.2 kB a run, and the values a colocation file copies), not the file. */
enum { IMPORT_BATCH_ROWS = 4096 };

/* Stores one file, batch by batch, in one savepoint. */
static kace_status import_file(kace_ctx *ctx, kace_store *s, kace_import_reader *r, const char *path,
                               const kace_source *source, const kace_import_options *opt, kace_import_report report,
                               void *user)
{
    kace_import_batch *b = NULL;
    kace_status st = kace_import_reader_next(ctx, r, IMPORT_BATCH_ROWS, &b);
    if (st)
        return st;
    kace_import_batch head; /* the file's kind and names, and then its counts */
    memset(&head, 0, sizeof head);
    head.kind = b->kind;
    memcpy(head.origin, b->origin, sizeof head.origin);
    memcpy(head.set, b->set, sizeof head.set);
    import_job j;
    stmt_set q;
    if ((st = job_begin(&j, ctx, s, &q, &head, source, opt))) {
        kace_import_batch_free(&b);
        return st;
    }
    j.count_rows = false; /* the reader meters the bytes it reads */
    if (kace_import_reader_in_batches(r))
        st = seen_begin(&j);
    while (!st && b) {
        head.n_values += b->n_values;
        head.n_runs += b->n_runs;
        head.n_splits += b->n_splits;
        st = job_batch(&j, b);
        kace_import_batch_free(&b);
        if (!st)
            st = kace_import_reader_next(ctx, r, IMPORT_BATCH_ROWS, &b);
    }
    kace_import_batch_free(&b);
    if (j.seen)
        seen_end(&j);
    j.b = &head;
    if ((st = job_end(&j, st)))
        return st;
    if (report)
        report(user, path, &head, &j.stats);
    return KACE_OK;
}

kace_status kace_store_import_files(kace_ctx *ctx, kace_store *s, const char *const *paths, size_t n,
                                    const kace_source *source, const kace_import_options *opt,
                                    kace_import_report report, void *user)
{
    /* Every file is opened first and its kind read from its header, so that
     * a file that cannot be read or is of no known kind fails before
     * anything is stored. Then each is read and stored batch by batch, in
     * the import order, in one transaction: a later failure undoes all. */
    kace_import_reader **readers = calloc(n ? n : 1, sizeof *readers);
    int *rank_of = calloc(n ? n : 1, sizeof *rank_of);
    if (!readers || !rank_of) {
        free(readers);
        free(rank_of);
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    }
    kace_status st = KACE_OK;
    double bytes = 0;
    for (size_t i = 0; i < n && !st; i++) {
        struct stat sb;
        if ((st = kace_import_reader_open(ctx, paths[i], opt, &readers[i])))
            break;
        rank_of[i] = kace_file_kind_rank(kace_import_reader_kind(readers[i]));
        if (stat(paths[i], &sb) == 0)
            bytes += (double)sb.st_size;
    }
    /* Pages are read into SQLite's cache, not through the store's memory
     * map: an import touches most of a large store (its lookups, the check
     * of unused sources), and mapped pages it touched would count as its
     * memory up to the map's 256 MB. */
    store_exec(NULL, s, "PRAGMA mmap_size=0;");
    if (!st)
        st = kace_store_begin(ctx, s);
    if (!st) {
        kace_meter_begin(ctx, "importing", "bytes", bytes);
        for (int rank = 0; rank <= 5 && !st; rank++)
            for (size_t i = 0; i < n && !st; i++) {
                if (rank_of[i] != rank)
                    continue;
                st = import_file(ctx, s, readers[i], paths[i], source, opt, report, user);
                kace_import_reader_close(&readers[i]); /* its map goes once it is stored */
            }
        if (st || (st = kace_store_commit(ctx, s)))
            kace_store_rollback(s);
        kace_meter_end(ctx);
    }
    store_exec(NULL, s, STORE_MMAP_PRAGMA);
    for (size_t i = 0; i < n; i++)
        kace_import_reader_close(&readers[i]);
    free(readers);
    free(rank_of);
    return st;
}

kace_status kace_store_import(kace_ctx *ctx, kace_store *s, const kace_import_batch *b, const kace_source *source,
                              kace_import_stats *stats_out)
{
    return kace_store_import_with(ctx, s, b, source, NULL, stats_out);
}

kace_status kace_store_import_with(kace_ctx *ctx, kace_store *s, const kace_import_batch *b,
                                   const kace_source *source, const kace_import_options *opt,
                                   kace_import_stats *stats_out)
{
    import_job j;
    stmt_set q;
    kace_status st = job_begin(&j, ctx, s, &q, b, source, opt);
    if (st)
        return st;
    if ((st = job_end(&j, job_batch(&j, b))))
        return st;
    if (stats_out)
        *stats_out = j.stats;
    return KACE_OK;
}
