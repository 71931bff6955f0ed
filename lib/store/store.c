/* The SQLite store (see include/kace/store.h). */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <cjson/cJSON.h>
#include <sqlite3.h>

#include "base/name_index.h"
#include "kace/store.h"
#include "kace/meter.h"
#include "kace/predictor.h"

struct kace_store {
    sqlite3 *db;
    char path[1024];
};

static const char *const schema_sql =
    "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);"
    "CREATE TABLE IF NOT EXISTS workloads("
    "  id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, family TEXT NOT NULL, batch INTEGER NOT NULL);"
    "CREATE TABLE IF NOT EXISTS sources("
    "  id INTEGER PRIMARY KEY, gpu TEXT, tool TEXT, date TEXT, file TEXT NOT NULL,"
    "  UNIQUE(gpu, tool, date, file));"
    /* value NULL = the metric is known to be missing for this workload. */
    "CREATE TABLE IF NOT EXISTS profiles("
    "  workload_id INTEGER NOT NULL REFERENCES workloads(id), metric TEXT NOT NULL, value REAL,"
    "  source_id INTEGER NOT NULL REFERENCES sources(id), PRIMARY KEY(workload_id, metric));"
    /* A run is identified by its set, members and MPS split: importing the
     * same file twice finds every run already there. */
    "CREATE TABLE IF NOT EXISTS runs("
    "  id INTEGER PRIMARY KEY, set_name TEXT NOT NULL, k INTEGER NOT NULL, status TEXT NOT NULL,"
    "  run_key TEXT NOT NULL UNIQUE, source_id INTEGER NOT NULL REFERENCES sources(id));"
    "CREATE TABLE IF NOT EXISTS run_members("
    "  run_id INTEGER NOT NULL REFERENCES runs(id), slot INTEGER NOT NULL,"
    "  workload_id INTEGER NOT NULL REFERENCES workloads(id), mps_pct INTEGER NOT NULL, throughput REAL,"
    "  PRIMARY KEY(run_id, slot));"
    "CREATE TABLE IF NOT EXISTS splits("
    "  n_occur INTEGER NOT NULL, seed INTEGER NOT NULL, is_train INTEGER NOT NULL, paper_fit INTEGER NOT NULL,"
    "  workload1 TEXT NOT NULL, workload2 TEXT NOT NULL, PRIMARY KEY(n_occur, seed, workload1, workload2));"
    "CREATE TABLE IF NOT EXISTS models("
    "  name TEXT PRIMARY KEY, kind TEXT NOT NULL, created TEXT NOT NULL, body TEXT NOT NULL);"
    "CREATE INDEX IF NOT EXISTS run_members_workload ON run_members(workload_id);";

static kace_status db_fail(kace_ctx *ctx, kace_store *s, const char *what)
{
    return kace_fail(ctx, KACE_ERR_STORE, "%s: %s: %s", s->path, what, sqlite3_errmsg(s->db));
}

static kace_status exec(kace_ctx *ctx, kace_store *s, const char *sql)
{
    char *err = NULL;
    if (sqlite3_exec(s->db, sql, NULL, NULL, &err) != SQLITE_OK) {
        kace_status st = kace_fail(ctx, KACE_ERR_STORE, "%s: %s", s->path, err ? err : "SQLite error");
        sqlite3_free(err);
        return st;
    }
    return KACE_OK;
}

static int mkdir_parents(const char *path)
{
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    return 0;
}

/* Schema migrations, one step per version, each in its own transaction.
 * 1 -> 2 (kace measure): a measured run's mode (mps/timeslice), repetition,
 * time and window; each member's own status, spread and reason; the command
 * that runs a workload. */
static const char *const migrate_sql[] = {
    [1] = "ALTER TABLE runs ADD COLUMN mode TEXT;"
          "ALTER TABLE runs ADD COLUMN repetition INTEGER NOT NULL DEFAULT 0;"
          "ALTER TABLE runs ADD COLUMN measured_at TEXT;"
          "ALTER TABLE runs ADD COLUMN window_s REAL;"
          "ALTER TABLE run_members ADD COLUMN status TEXT;"
          "ALTER TABLE run_members ADD COLUMN throughput_cv REAL;"
          "ALTER TABLE run_members ADD COLUMN detail TEXT;"
          "CREATE TABLE IF NOT EXISTS workload_commands("
          "  workload_id INTEGER PRIMARY KEY REFERENCES workloads(id), argv TEXT NOT NULL);"
          "UPDATE meta SET value='2' WHERE key='schema_version';",
    /* 2 -> 3 (closed learning loop): colocations observed in production by
     * serve, Slurm or measure, with what the model had predicted. Apart from
     * runs because they are not controlled measurements: a throughput seen
     * under another tenant's load must not silently become training data. */
    [2] = "CREATE TABLE IF NOT EXISTS observations("
          "  id INTEGER PRIMARY KEY, origin TEXT NOT NULL, origin_id TEXT, observed_at REAL NOT NULL,"
          "  gpu TEXT, model TEXT, k INTEGER NOT NULL, UNIQUE(origin, origin_id));"
          "CREATE TABLE IF NOT EXISTS observation_members("
          "  observation_id INTEGER NOT NULL REFERENCES observations(id), slot INTEGER NOT NULL,"
          "  workload_id INTEGER NOT NULL REFERENCES workloads(id), mps_pct REAL NOT NULL,"
          "  throughput REAL NOT NULL, predicted REAL, PRIMARY KEY(observation_id, slot));"
          "CREATE INDEX IF NOT EXISTS observations_time ON observations(observed_at);"
          "UPDATE meta SET value='3' WHERE key='schema_version';",
    /* 3 -> 4: a re-import with --replace keeps what it replaced, with the
     * old value's source, when, and the source that replaced it; a profile
     * value copied from a colocation file is marked (a profile replaces it). */
    [3] = "ALTER TABLE profiles ADD COLUMN embedded INTEGER NOT NULL DEFAULT 0;"
          "CREATE TABLE IF NOT EXISTS profile_history("
          "  workload_id INTEGER NOT NULL REFERENCES workloads(id), metric TEXT NOT NULL, value REAL,"
          "  source_id INTEGER NOT NULL REFERENCES sources(id), replaced_at TEXT NOT NULL,"
          "  replaced_by INTEGER NOT NULL REFERENCES sources(id));"
          "CREATE TABLE IF NOT EXISTS run_history("
          "  run_id INTEGER NOT NULL REFERENCES runs(id), slot INTEGER NOT NULL, throughput REAL, status TEXT NOT NULL,"
          "  source_id INTEGER NOT NULL REFERENCES sources(id), replaced_at TEXT NOT NULL,"
          "  replaced_by INTEGER NOT NULL REFERENCES sources(id));"
          "CREATE TABLE IF NOT EXISTS split_history("
          "  n_occur INTEGER NOT NULL, seed INTEGER NOT NULL, workload1 TEXT NOT NULL, workload2 TEXT NOT NULL,"
          "  is_train INTEGER NOT NULL, paper_fit INTEGER NOT NULL, replaced_at TEXT NOT NULL,"
          "  replaced_by INTEGER NOT NULL REFERENCES sources(id));"
          "UPDATE meta SET value='4' WHERE key='schema_version';",
};

static kace_status migrate(kace_ctx *ctx, kace_store *s, int from)
{
    for (int v = from; v < KACE_STORE_SCHEMA_VERSION; v++) {
        kace_status st;
        if ((st = exec(ctx, s, "BEGIN IMMEDIATE;")))
            return st;
        if ((st = exec(ctx, s, migrate_sql[v])) || (st = exec(ctx, s, "COMMIT;"))) {
            exec(NULL, s, "ROLLBACK;");
            return st;
        }
    }
    return KACE_OK;
}

/* Whether path's folder exists (a store is never created in a mistyped one). */
static bool folder_exists(const char *path)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash)
        return true; /* the current folder */
    if (slash == dir)
        slash[1] = '\0';
    else
        *slash = '\0';
    struct stat sb;
    return stat(dir, &sb) == 0 && S_ISDIR(sb.st_mode);
}

kace_status kace_store_open(kace_ctx *ctx, const char *path, kace_store **out)
{
    return kace_store_open_flags(ctx, path, KACE_STORE_CREATE | KACE_STORE_CREATE_DIRS, out);
}

kace_status kace_store_open_flags(kace_ctx *ctx, const char *path, unsigned flags, kace_store **out)
{
    *out = NULL;
    if (strlen(path) >= sizeof((kace_store *)0)->path)
        return kace_fail(ctx, KACE_ERR_INVALID, "store path is too long");
    struct stat sb;
    bool exists = stat(path, &sb) == 0;
    if (!exists && !(flags & KACE_STORE_CREATE))
        return kace_fail(ctx, KACE_ERR_NOT_FOUND, "no such store: %s", path);
    if (exists && S_ISDIR(sb.st_mode))
        return kace_fail(ctx, KACE_ERR_IO, "%s: a folder, not a store", path);
    kace_store *s = calloc(1, sizeof *s);
    if (!s)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    snprintf(s->path, sizeof s->path, "%s", path);
    kace_status st = KACE_OK;
    if (!exists && (flags & KACE_STORE_CREATE_DIRS) && mkdir_parents(path) != 0) {
        st = kace_fail(ctx, KACE_ERR_IO, "%s: cannot create its folder: %s", path, strerror(errno));
        goto fail;
    }
    if (!exists && !folder_exists(path)) {
        st = kace_fail(ctx, KACE_ERR_NOT_FOUND, "%s: its folder does not exist (no store created)", path);
        goto fail;
    }
    if (sqlite3_open_v2(path, &s->db, SQLITE_OPEN_READWRITE | (exists ? 0 : SQLITE_OPEN_CREATE), NULL) != SQLITE_OK) {
        st = db_fail(ctx, s, "cannot open");
        goto fail;
    }
    /* Readers never wait for a writer in WAL mode; a writer waits this long
     * for another writer, then reports the lock clearly. */
    sqlite3_busy_timeout(s->db, 5000);
    if ((st = exec(ctx, s, "PRAGMA foreign_keys=ON;")))
        goto fail;
    sqlite3_stmt *q = NULL;
    int version = 0;
    int rc = sqlite3_prepare_v2(s->db, "SELECT value FROM meta WHERE key='schema_version'", -1, &q, NULL);
    if (rc == SQLITE_BUSY || rc == SQLITE_LOCKED) {
        st = kace_fail(ctx, KACE_ERR_STORE, "%s: store is locked by another process", path);
        goto fail;
    }
    if (rc == SQLITE_OK) {
        rc = sqlite3_step(q);
        if (rc == SQLITE_ROW)
            version = atoi((const char *)sqlite3_column_text(q, 0));
        sqlite3_finalize(q);
        if (rc == SQLITE_BUSY || rc == SQLITE_LOCKED) {
            st = kace_fail(ctx, KACE_ERR_STORE, "%s: store is locked by another process", path);
            goto fail;
        }
        if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
            st = db_fail(ctx, s, "read schema version");
            goto fail;
        }
        if (version < 1) {
            st = kace_fail(ctx, KACE_ERR_STORE, "%s: a kace store without a schema version", path);
            goto fail;
        }
    } else if (!strstr(sqlite3_errmsg(s->db), "no such table")) {
        st = kace_fail(ctx, KACE_ERR_STORE, "%s: not a kace store (%s)", path, sqlite3_errmsg(s->db));
        goto fail;
    } else {
        /* No meta table: a new database, or not a kace store at all. */
        int n_tables = -1;
        if (sqlite3_prepare_v2(s->db, "SELECT count(*) FROM sqlite_master", -1, &q, NULL) != SQLITE_OK) {
            st = kace_fail(ctx, KACE_ERR_STORE, "%s: not a SQLite database (%s)", path, sqlite3_errmsg(s->db));
            goto fail;
        }
        if (sqlite3_step(q) == SQLITE_ROW)
            n_tables = sqlite3_column_int(q, 0);
        sqlite3_finalize(q);
        if (n_tables != 0) {
            st = kace_fail(ctx, KACE_ERR_STORE, "%s: a SQLite database that is not a kace store", path);
            goto fail;
        }
        if (!(flags & KACE_STORE_CREATE)) {
            st = kace_fail(ctx, KACE_ERR_NOT_FOUND, "no such store: %s (an empty file)", path);
            goto fail;
        }
    }
    if (version > KACE_STORE_SCHEMA_VERSION) {
        st = kace_fail(ctx, KACE_ERR_STORE, "%s: schema version %d is newer than this kace supports (%d)", path,
                       version, KACE_STORE_SCHEMA_VERSION);
        goto fail;
    }
    if (version == 0) {
        if ((st = exec(ctx, s, "BEGIN IMMEDIATE;")))
            goto fail;
        if ((st = exec(ctx, s, schema_sql)) ||
            (st = exec(ctx, s, "INSERT OR REPLACE INTO meta VALUES('schema_version','1');")) ||
            (st = exec(ctx, s, "COMMIT;"))) {
            exec(NULL, s, "ROLLBACK;");
            goto fail;
        }
        version = 1;
    }
    if (version < KACE_STORE_SCHEMA_VERSION && (st = migrate(ctx, s, version)))
        goto fail;
    /* WAL: readers (predict, serve, eval) keep reading while an import or a
     * campaign writes. The mode stays with the file; switching needs a
     * moment without other connections, so a store in use switches later. */
    /* Pages read through a memory map, not a read() and a copy each: kace eval
     * reads most of the store (~1000 pages) and spends ~0.5 ms less. Writes go
     * through SQLite's journal as before; a failure here only costs that time. */
    exec(NULL, s, "PRAGMA mmap_size=268435456;");
    sqlite3_stmt *wal = NULL;
    if (sqlite3_prepare_v2(s->db, "PRAGMA journal_mode=WAL", -1, &wal, NULL) == SQLITE_OK)
        sqlite3_step(wal);
    sqlite3_finalize(wal);
    *out = s;
    return KACE_OK;
fail:
    if (s->db)
        sqlite3_close(s->db);
    free(s);
    return st;
}

void kace_store_close(kace_store **store)
{
    if (!store || !*store)
        return;
    sqlite3_close((*store)->db);
    free(*store);
    *store = NULL;
}

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

static kace_status prepare(kace_ctx *ctx, kace_store *s, const char *sql, sqlite3_stmt **q)
{
    if (sqlite3_prepare_v2(s->db, sql, -1, q, NULL) != SQLITE_OK)
        return db_fail(ctx, s, "prepare");
    return KACE_OK;
}

static void bind_text_or_null(sqlite3_stmt *q, int i, const char *v)
{
    if (v)
        sqlite3_bind_text(q, i, v, -1, SQLITE_STATIC);
    else
        sqlite3_bind_null(q, i);
}

static void bind_number_or_null(sqlite3_stmt *q, int i, double v)
{
    if (isnan(v))
        sqlite3_bind_null(q, i);
    else
        sqlite3_bind_double(q, i, v);
}

static const char *run_status_name(kace_run_status st)
{
    switch (st) {
    case KACE_RUN_OK: return "ok";
    case KACE_RUN_FAILED: return "failed";
    case KACE_RUN_OOM: return "oom";
    case KACE_RUN_TIMEOUT: return "timeout";
    }
    return "failed";
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
    kace_import_stats *stats;
    size_t n_conflicts;
    char conflicts[1200]; /* the first three, "; "-separated */
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
        return db_fail(j->ctx, j->s, "find workload");
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
        return db_fail(j->ctx, j->s, "insert workload");
    sqlite3_bind_int(q, 3, batch);
    if (sqlite3_step(q) != SQLITE_DONE)
        return db_fail(j->ctx, j->s, "insert workload");
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
    if ((st = prepare(j->ctx, j->s,
                      "INSERT INTO profile_history(workload_id, metric, value, source_id, replaced_at, replaced_by) "
                      "SELECT p.workload_id, p.metric, p.value, p.source_id, ?3, ?4 FROM profiles p JOIN sources s ON "
                      "s.id=p.source_id WHERE p.workload_id=?1 AND s.gpu IS NOT NULL AND s.gpu<>'' AND s.gpu<>?2",
                      &hist)) ||
        (st = prepare(j->ctx, j->s,
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
            st = db_fail(j->ctx, j->s, "move another GPU's profile to history");
        else
            j->stats->values_retired += (size_t)sqlite3_changes(j->s->db);
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
            return db_fail(j->ctx, j->s, "read profile");
        bool exists = rc == SQLITE_ROW;
        bool old_missing = exists && sqlite3_column_type(q->get_value, 0) == SQLITE_NULL;
        double old = exists && !old_missing ? sqlite3_column_double(q->get_value, 0) : NAN;
        bool old_embedded = exists && sqlite3_column_int(q->get_value, 3) != 0;
        /* Unchanged: a copy from a colocation file where the store has the
         * metric (copies only fill gaps); a missing cell where a value is
         * stored (missing is "not measured here", not a contradiction); the
         * same value, unless a profile now confirms what only a copy said. */
        if (exists && (v->embedded || isnan(v->value) || (old == v->value && !old_embedded))) {
            j->stats->values_unchanged++;
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
                return db_fail(j->ctx, j->s, "keep profile history");
        }
        sqlite3_reset(q->put_value);
        sqlite3_bind_int64(q->put_value, 1, wid);
        sqlite3_bind_text(q->put_value, 2, v->metric, -1, SQLITE_STATIC);
        bind_number_or_null(q->put_value, 3, v->value);
        sqlite3_bind_int64(q->put_value, 4, j->source);
        sqlite3_bind_int(q->put_value, 5, v->embedded);
        if (sqlite3_step(q->put_value) != SQLITE_DONE)
            return db_fail(j->ctx, j->s, "write profile");
        if (!exists)
            j->stats->values_added++;
        else if (old == v->value)
            j->stats->values_unchanged++; /* confirmed by a profile: only its source changed */
        else
            j->stats->values_updated++;
    }
    return KACE_OK;
}

/* Compares a stored run with r: *same, and a description of the first difference. */
static kace_status compare_run(import_job *j, sqlite3_int64 run_id, const char *old_status, const kace_import_run *r,
                               bool *same, char *diff, size_t size, int *slot_out)
{
    *slot_out = 0;
    *same = strcmp(old_status, run_status_name(r->status)) == 0;
    if (!*same)
        snprintf(diff, size, "status %s here, %s stored", run_status_name(r->status), old_status);
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
    return rc == SQLITE_DONE ? KACE_OK : db_fail(j->ctx, j->s, "read run members");
}

static kace_status import_runs(import_job *j)
{
    stmt_set *q = j->q;
    const kace_import_batch *b = j->b;
    kace_status st;
    for (size_t i = 0; i < b->n_runs; i++) {
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
            return db_fail(j->ctx, j->s, "find run");
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
                j->stats->runs_unchanged++;
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
                return db_fail(j->ctx, j->s, "keep run history");
            sqlite3_reset(q->upd_run);
            sqlite3_bind_int64(q->upd_run, 1, run_id);
            sqlite3_bind_text(q->upd_run, 2, run_status_name(r->status), -1, SQLITE_STATIC);
            sqlite3_bind_int64(q->upd_run, 3, j->source);
            if (sqlite3_step(q->upd_run) != SQLITE_DONE)
                return db_fail(j->ctx, j->s, "update run");
            for (int m = 0; m < r->k; m++) {
                sqlite3_reset(q->upd_member);
                sqlite3_bind_int64(q->upd_member, 1, run_id);
                sqlite3_bind_int(q->upd_member, 2, m);
                bind_number_or_null(q->upd_member, 3, r->throughput[m]);
                if (sqlite3_step(q->upd_member) != SQLITE_DONE)
                    return db_fail(j->ctx, j->s, "update run member");
            }
            j->stats->runs_updated++;
            continue;
        }
        if (rc != SQLITE_DONE)
            return db_fail(j->ctx, j->s, "find run");
        sqlite3_reset(q->ins_run);
        sqlite3_bind_text(q->ins_run, 1, b->set, -1, SQLITE_STATIC);
        sqlite3_bind_int(q->ins_run, 2, r->k);
        sqlite3_bind_text(q->ins_run, 3, run_status_name(r->status), -1, SQLITE_STATIC);
        if (sqlite3_bind_text(q->ins_run, 4, key, -1, SQLITE_TRANSIENT) != SQLITE_OK)
            return db_fail(j->ctx, j->s, "insert run");
        sqlite3_bind_int64(q->ins_run, 5, j->source);
        if (sqlite3_step(q->ins_run) != SQLITE_DONE)
            return db_fail(j->ctx, j->s, "insert run");
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
            bind_number_or_null(q->ins_member, 5, r->throughput[m]);
            if (sqlite3_step(q->ins_member) != SQLITE_DONE)
                return db_fail(j->ctx, j->s, "insert run member");
        }
        j->stats->runs_added++;
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
        return db_fail(ctx, s, "read pairs");
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
        return db_fail(j->ctx, j->s, "find split");
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
            j->stats->splits_unchanged++;
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
                st = db_fail(j->ctx, j->s, "replace split");
                break;
            }
            j->stats->splits_updated++;
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
            st = db_fail(j->ctx, j->s, "insert split");
            break;
        }
        j->stats->splits_added++;
    }
    for (size_t i = 0; i < n_keys; i++)
        free(keys[i]);
    free(keys);
    return st;
}

kace_status kace_store_import_files(kace_ctx *ctx, kace_store *s, const char *const *paths, size_t n,
                                    const kace_source *source, const kace_import_options *opt,
                                    kace_import_report report, void *user)
{
    kace_import_batch **batches = calloc(n ? n : 1, sizeof *batches);
    if (!batches)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    kace_status st = KACE_OK;
    double bytes = 0, rows = 0;
    for (size_t i = 0; i < n; i++) {
        struct stat sb;
        if (stat(paths[i], &sb) == 0)
            bytes += (double)sb.st_size;
    }
    kace_meter_begin(ctx, "reading", "bytes", bytes);
    for (size_t i = 0; i < n && !st; i++)
        st = kace_import_parse_file(ctx, paths[i], opt, &batches[i]);
    kace_meter_end(ctx);
    if (!st)
        st = kace_store_begin(ctx, s);
    if (!st) {
        for (size_t i = 0; i < n; i++)
            rows += (double)(batches[i]->n_values + batches[i]->n_runs + batches[i]->n_splits);
        kace_meter_begin(ctx, "storing", "rows", rows);
        for (int rank = 0; rank <= 5 && !st; rank++)
            for (size_t i = 0; i < n && !st; i++) {
                if (kace_file_kind_rank(batches[i]->kind) != rank)
                    continue;
                kace_import_stats stats;
                if (!(st = kace_store_import_with(ctx, s, batches[i], source, opt, &stats)) && report)
                    report(user, paths[i], batches[i], &stats);
            }
        if (st || (st = kace_store_commit(ctx, s)))
            kace_store_rollback(s);
        kace_meter_end(ctx);
    }
    for (size_t i = 0; i < n; i++)
        kace_import_batch_free(&batches[i]);
    free(batches);
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
    kace_import_stats stats;
    memset(&stats, 0, sizeof stats);
    stmt_set q;
    memset(&q, 0, sizeof q);
    import_job j;
    memset(&j, 0, sizeof j);
    j.ctx = ctx;
    j.s = s;
    j.q = &q;
    j.b = b;
    j.replace = opt && opt->replace;
    j.create_workloads = opt && opt->create_workloads;
    j.retire_gpu = opt && opt->retire_other_gpu && source && source->gpu && *source->gpu ? source->gpu : NULL;
    j.stats = &stats;
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(j.stamp, sizeof j.stamp, "%Y-%m-%dT%H:%M:%SZ", &tm);
    kace_status st;
    /* Inside a caller's transaction (kace_store_begin) a savepoint makes this
     * batch atomic on its own while the caller can still undo everything. */
    bool nested = sqlite3_get_autocommit(s->db) == 0;
    if ((st = exec(ctx, s, nested ? "SAVEPOINT kace_import;" : "BEGIN IMMEDIATE;")))
        return st;
    for (size_t i = 0; i < sizeof import_sql / sizeof *import_sql; i++)
        if ((st = prepare(ctx, s, import_sql[i].sql, (sqlite3_stmt **)((char *)&q + import_sql[i].at))))
            goto fail;

    const char *file = strrchr(b->origin, '/') ? strrchr(b->origin, '/') + 1 : b->origin;
    bind_text_or_null(q.ins_source, 1, source ? source->gpu : NULL);
    bind_text_or_null(q.ins_source, 2, source ? source->tool : NULL);
    bind_text_or_null(q.ins_source, 3, source ? source->date : NULL);
    sqlite3_bind_text(q.ins_source, 4, file, -1, SQLITE_STATIC);
    if (sqlite3_step(q.ins_source) != SQLITE_DONE) {
        st = db_fail(ctx, s, "insert source");
        goto fail;
    }
    bind_text_or_null(q.get_source, 1, source ? source->gpu : NULL);
    bind_text_or_null(q.get_source, 2, source ? source->tool : NULL);
    bind_text_or_null(q.get_source, 3, source ? source->date : NULL);
    sqlite3_bind_text(q.get_source, 4, file, -1, SQLITE_STATIC);
    if (sqlite3_step(q.get_source) != SQLITE_ROW) {
        st = db_fail(ctx, s, "find source");
        goto fail;
    }
    j.source = sqlite3_column_int64(q.get_source, 0);

    if ((st = check_run_workloads(&j)) || (j.retire_gpu && (st = retire_other_gpu_values(&j))) ||
        (st = import_values(&j)) || (st = import_runs(&j)) ||
        (st = import_splits(&j)))
        goto fail;
    if (j.n_conflicts) {
        st = kace_fail(ctx, KACE_ERR_INVALID,
                       "%s%s; %zu stored value(s) differ from this file's, and a re-import that changes stored data "
                       "is refused (--replace stores the file's values and keeps the old ones as history)",
                       j.conflicts, j.n_conflicts > 3 ? "; ..." : "", j.n_conflicts);
        goto fail;
    }
    finalize_all(&q);
    /* A source row that ended up unused (nothing new) is dropped again. */
    if ((st = exec(ctx, s,
                   "DELETE FROM sources WHERE id NOT IN (SELECT source_id FROM profiles) AND id NOT IN "
                   "(SELECT source_id FROM runs) AND id NOT IN (SELECT source_id FROM profile_history) AND id NOT IN "
                   "(SELECT replaced_by FROM profile_history) AND id NOT IN (SELECT source_id FROM run_history) AND "
                   "id NOT IN (SELECT replaced_by FROM run_history) AND id NOT IN (SELECT replaced_by FROM "
                   "split_history);")) ||
        (st = exec(ctx, s, nested ? "RELEASE kace_import;" : "COMMIT;"))) {
        exec(NULL, s, nested ? "ROLLBACK TO kace_import; RELEASE kace_import;" : "ROLLBACK;");
        return st;
    }
    if (stats_out)
        *stats_out = stats;
    return KACE_OK;
fail:
    finalize_all(&q);
    exec(NULL, s, nested ? "ROLLBACK TO kace_import; RELEASE kace_import;" : "ROLLBACK;");
    return st;
}

kace_status kace_store_begin(kace_ctx *ctx, kace_store *s)
{
    return exec(ctx, s, "BEGIN IMMEDIATE;");
}

kace_status kace_store_commit(kace_ctx *ctx, kace_store *s)
{
    return exec(ctx, s, "COMMIT;");
}

void kace_store_rollback(kace_store *s)
{
    exec(NULL, s, "ROLLBACK;");
}

static bool savepoint_name_ok(const char *name)
{
    if (!name || !*name || strlen(name) > 64)
        return false;
    for (const char *c = name; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || *c == '_'))
            return false;
    return true;
}

static kace_status savepoint_sql(kace_ctx *ctx, kace_store *s, const char *verb, const char *name)
{
    if (!savepoint_name_ok(name))
        return kace_fail(ctx, KACE_ERR_INVALID, "savepoint name '%.64s': letters and '_' only", name ? name : "");
    char sql[128];
    snprintf(sql, sizeof sql, "%s %s;", verb, name);
    return exec(ctx, s, sql);
}

kace_status kace_store_savepoint(kace_ctx *ctx, kace_store *s, const char *name)
{
    return savepoint_sql(ctx, s, "SAVEPOINT", name);
}

kace_status kace_store_release(kace_ctx *ctx, kace_store *s, const char *name)
{
    return savepoint_sql(ctx, s, "RELEASE", name);
}

void kace_store_rollback_to(kace_store *s, const char *name)
{
    if (savepoint_sql(NULL, s, "ROLLBACK TO", name) == KACE_OK)
        savepoint_sql(NULL, s, "RELEASE", name);
}

/* ---- loading ---------------------------------------------------------- */

/* The workloads, in id order so that indices are stable across loads, and their profiles. */
static kace_status load_workloads(kace_ctx *ctx, kace_store *s, kace_dataset *ds)
{
    sqlite3_stmt *q = NULL;
    kace_status st;
    if ((st = prepare(ctx, s, "SELECT name FROM workloads ORDER BY id", &q)))
        return st;
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        int idx;
        if ((st = kace_dataset_intern(ctx, ds, (const char *)sqlite3_column_text(q, 0), &idx)))
            goto done;
    }
    if (rc != SQLITE_DONE) {
        st = db_fail(ctx, s, "read workloads");
        goto done;
    }
    sqlite3_finalize(q);
    q = NULL;
    if ((st = prepare(ctx, s, "SELECT w.name, p.metric, p.value FROM profiles p JOIN workloads w ON w.id=p.workload_id",
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
        st = db_fail(ctx, s, "read profiles");
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
    if ((st = prepare(ctx, s, sql, &q)))
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
        st = db_fail(ctx, s, "read runs");
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
    return rc == SQLITE_DONE ? KACE_OK : db_fail(ctx, s, "read profiles");
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
        if ((st = prepare(ctx, s, "SELECT id, name FROM workloads ORDER BY id", &q)))
            goto fail;
        while ((rc = sqlite3_step(q)) == SQLITE_ROW)
            if ((st = around_workload(ctx, ds, by_id, sqlite3_column_int64(q, 0),
                                      (const char *)sqlite3_column_text(q, 1))))
                goto fail;
        if (rc != SQLITE_DONE) {
            st = db_fail(ctx, s, "read workloads");
            goto fail;
        }
        sqlite3_finalize(q);
        q = NULL;
    }
    if ((st = prepare(ctx, s, "SELECT id FROM workloads WHERE name=?", &q)))
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
            st = db_fail(ctx, s, "read workloads");
            goto fail;
        }
    }
    sqlite3_finalize(q);
    q = NULL;
    /* Profiles: one scan for every workload, an indexed lookup for a few. */
    if (every_workload) {
        if ((st = prepare(ctx, s, "SELECT workload_id, metric, value FROM profiles", &q)) ||
            (st = around_profiles(ctx, s, ds, by_id, q)))
            goto fail;
    } else {
        if ((st = prepare(ctx, s, "SELECT workload_id, metric, value FROM profiles WHERE workload_id=?", &q)))
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
    if ((st = prepare(ctx, s,
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
            st = db_fail(ctx, s, "read runs");
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
    if ((st = prepare(ctx, s, "SELECT n_occur, seed, is_train, paper_fit, workload1, workload2 FROM splits ORDER BY rowid",
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
        st = db_fail(ctx, s, "read splits");
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
    if ((st = prepare(ctx, s, "SELECT set_name, max(k), count(*) FROM runs GROUP BY set_name ORDER BY set_name", &q)))
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
    return rc == SQLITE_DONE ? KACE_OK : db_fail(ctx, s, "read sets");
}

kace_status kace_store_save_model(kace_ctx *ctx, kace_store *s, const char *name, const kace_model *m)
{
    char *text = NULL;
    kace_status st = kace_model_to_text(ctx, m, &text);
    if (st)
        return st;
    sqlite3_stmt *q = NULL;
    if ((st = prepare(ctx, s, "INSERT OR REPLACE INTO models(name, kind, created, body) VALUES(?,?,?,?)", &q))) {
        free(text);
        return st;
    }
    char created[32];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(created, sizeof created, "%Y-%m-%dT%H:%M:%SZ", &tm);
    sqlite3_bind_text(q, 1, name, -1, SQLITE_STATIC);
    /* The kind column is informative: loading reads the kind from the body,
     * so stores that recorded "forest" for a slowdown model still load. */
    sqlite3_bind_text(q, 2, kace_predictor_name(kace_model_predictor(m)), -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 3, created, -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 4, text, -1, SQLITE_STATIC);
    if (sqlite3_step(q) != SQLITE_DONE)
        st = db_fail(ctx, s, "save model");
    sqlite3_finalize(q);
    free(text);
    return st;
}

kace_status kace_store_load_model(kace_ctx *ctx, kace_store *s, const char *name, kace_model **out)
{
    *out = NULL;
    sqlite3_stmt *q = NULL;
    kace_status st;
    if ((st = prepare(ctx, s, "SELECT body FROM models WHERE name=?", &q)))
        return st;
    sqlite3_bind_text(q, 1, name, -1, SQLITE_STATIC);
    int rc = sqlite3_step(q);
    if (rc == SQLITE_ROW) {
        const char *body = (const char *)sqlite3_column_text(q, 0);
        st = kace_model_from_text(ctx, body, (size_t)sqlite3_column_bytes(q, 0), "store", out);
    } else if (rc == SQLITE_DONE) {
        st = kace_fail(ctx, KACE_ERR_NOT_FOUND, "%s: no model named '%s' (run kace train first)", s->path, name);
    } else {
        st = db_fail(ctx, s, "load model");
    }
    sqlite3_finalize(q);
    return st;
}

/* ---- named models and the default ----------------------------------------- */

kace_status kace_store_promote_model(kace_ctx *ctx, kace_store *s, const char *name)
{
    sqlite3_stmt *q = NULL;
    kace_status st;
    /* One statement: a reader sees the old default or the new one, never none. */
    if ((st = prepare(ctx, s,
                      "INSERT OR REPLACE INTO models(name, kind, created, body) "
                      "SELECT ?1, kind, ?3, body FROM models WHERE name=?2",
                      &q)))
        return st;
    char created[32];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(created, sizeof created, "%Y-%m-%dT%H:%M:%SZ", &tm);
    sqlite3_bind_text(q, 1, KACE_MODEL_DEFAULT, -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 2, name, -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 3, created, -1, SQLITE_STATIC);
    if (sqlite3_step(q) != SQLITE_DONE)
        st = db_fail(ctx, s, "promote model");
    else if (sqlite3_changes(s->db) == 0)
        st = kace_fail(ctx, KACE_ERR_NOT_FOUND, "%s: no model named '%s' to promote (kace info lists them)", s->path,
                       name);
    sqlite3_finalize(q);
    return st;
}

kace_status kace_store_list_models(kace_ctx *ctx, kace_store *s, kace_model_info **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    sqlite3_stmt *q = NULL;
    kace_status st;
    /* The default is a copy of the model promoted: the same body. */
    if ((st = prepare(ctx, s,
                      "SELECT m.name, m.kind, m.created, d.body IS NOT NULL AND d.body = m.body FROM models m "
                      "LEFT JOIN models d ON d.name=?1 ORDER BY m.name=?1 DESC, m.created, m.name",
                      &q)))
        return st;
    sqlite3_bind_text(q, 1, KACE_MODEL_DEFAULT, -1, SQLITE_STATIC);
    size_t cap = 0;
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        if (*n == cap) {
            cap = cap ? 2 * cap : 8;
            kace_model_info *grown = realloc(*out, cap * sizeof *grown);
            if (!grown) {
                st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
                break;
            }
            *out = grown;
        }
        kace_model_info *mi = &(*out)[(*n)++];
        snprintf(mi->name, sizeof mi->name, "%s", (const char *)sqlite3_column_text(q, 0));
        snprintf(mi->kind, sizeof mi->kind, "%s", (const char *)sqlite3_column_text(q, 1));
        snprintf(mi->created, sizeof mi->created, "%s", (const char *)sqlite3_column_text(q, 2));
        mi->is_default = sqlite3_column_int(q, 3) != 0;
    }
    if (!st && rc != SQLITE_DONE)
        st = db_fail(ctx, s, "list models");
    sqlite3_finalize(q);
    if (st) {
        free(*out);
        *out = NULL;
        *n = 0;
    }
    return st;
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
        kace_status st = prepare(ctx, s, sql[i], &q);
        if (st)
            return st;
        if (sqlite3_step(q) == SQLITE_ROW)
            *dst[i] = (size_t)sqlite3_column_int64(q, 0);
        sqlite3_finalize(q);
    }
    return KACE_OK;
}

/* ---- measured runs -------------------------------------------------------- */

static kace_status ensure_workload(kace_ctx *ctx, kace_store *s, const char *name, sqlite3_int64 *id)
{
    if (!name || !*name || strlen(name) >= KACE_NAME_MAX)
        return kace_fail(ctx, KACE_ERR_INVALID, "%s: bad workload name '%s'", s->path, name ? name : "");
    char family[KACE_NAME_MAX];
    int batch;
    kace_workload_parse_name(name, family, &batch);
    sqlite3_stmt *q = NULL;
    kace_status st = prepare(ctx, s, "INSERT OR IGNORE INTO workloads(name, family, batch) VALUES(?,?,?)", &q);
    if (st)
        return st;
    sqlite3_bind_text(q, 1, name, -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 2, family, -1, SQLITE_STATIC);
    sqlite3_bind_int(q, 3, batch);
    int rc = sqlite3_step(q);
    sqlite3_finalize(q);
    if (rc != SQLITE_DONE)
        return db_fail(ctx, s, "insert workload");
    if ((st = prepare(ctx, s, "SELECT id FROM workloads WHERE name=?", &q)))
        return st;
    sqlite3_bind_text(q, 1, name, -1, SQLITE_STATIC);
    rc = sqlite3_step(q);
    if (rc == SQLITE_ROW)
        *id = sqlite3_column_int64(q, 0);
    sqlite3_finalize(q);
    return rc == SQLITE_ROW ? KACE_OK : db_fail(ctx, s, "find workload");
}

kace_status kace_store_set_command(kace_ctx *ctx, kace_store *s, const char *workload, char *const *argv)
{
    if (!argv || !argv[0] || !*argv[0])
        return kace_fail(ctx, KACE_ERR_INVALID, "%s: empty command for workload '%s'", s->path, workload);
    cJSON *arr = cJSON_CreateArray();
    char *json = NULL;
    sqlite3_stmt *q = NULL;
    kace_status st = KACE_OK;
    for (size_t i = 0; arr && argv[i]; i++) {
        cJSON *item = cJSON_CreateString(argv[i]);
        if (!item || !cJSON_AddItemToArray(arr, item)) {
            cJSON_Delete(item);
            cJSON_Delete(arr);
            arr = NULL;
        }
    }
    if (!arr || !(json = cJSON_PrintUnformatted(arr))) {
        cJSON_Delete(arr);
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    }
    cJSON_Delete(arr);
    if ((st = exec(ctx, s, "SAVEPOINT kace_command;")))
        goto done;
    sqlite3_int64 id;
    if ((st = ensure_workload(ctx, s, workload, &id)) ||
        (st = prepare(ctx, s, "INSERT OR REPLACE INTO workload_commands(workload_id, argv) VALUES(?,?)", &q)))
        goto rollback;
    sqlite3_bind_int64(q, 1, id);
    sqlite3_bind_text(q, 2, json, -1, SQLITE_STATIC);
    if (sqlite3_step(q) != SQLITE_DONE) {
        st = db_fail(ctx, s, "store command");
        goto rollback;
    }
    st = exec(ctx, s, "RELEASE kace_command;");
    goto done;
rollback:
    exec(NULL, s, "ROLLBACK TO kace_command; RELEASE kace_command;");
done:
    sqlite3_finalize(q);
    cJSON_free(json);
    return st;
}

kace_status kace_store_add_profile(kace_ctx *ctx, kace_store *s, const kace_import_batch *batch,
                                   const kace_source *source, const char *workload, char *const *argv,
                                   kace_import_stats *stats)
{
    kace_status st = kace_store_begin(ctx, s);
    if (st)
        return st;
    kace_import_options again = {.replace = true, .retire_other_gpu = true};
    if ((st = kace_store_import_with(ctx, s, batch, source, &again, stats)) ||
        (st = kace_store_set_command(ctx, s, workload, argv)) || (st = kace_store_commit(ctx, s))) {
        kace_store_rollback(s);
        return st;
    }
    return KACE_OK;
}

kace_status kace_store_profile_other_gpu(kace_ctx *ctx, kace_store *s, const char *workload, const char *gpu,
                                         char *other, size_t size)
{
    if (size)
        other[0] = '\0';
    sqlite3_stmt *q = NULL;
    kace_status st = prepare(ctx, s,
                             "SELECT src.gpu FROM profiles p JOIN workloads w ON w.id=p.workload_id "
                             "JOIN sources src ON src.id=p.source_id WHERE w.name=?1 AND src.gpu IS NOT NULL AND "
                             "src.gpu<>'' AND src.gpu<>?2 ORDER BY src.gpu LIMIT 1",
                             &q);
    if (st)
        return st;
    sqlite3_bind_text(q, 1, workload, -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 2, gpu, -1, SQLITE_STATIC);
    int rc = sqlite3_step(q);
    if (rc == SQLITE_ROW)
        snprintf(other, size, "%s", (const char *)sqlite3_column_text(q, 0));
    else if (rc != SQLITE_DONE)
        st = db_fail(ctx, s, "read the GPU of a profile");
    sqlite3_finalize(q);
    return st;
}

kace_status kace_store_get_command(kace_ctx *ctx, kace_store *s, const char *workload, char ***argv_out)
{
    *argv_out = NULL;
    sqlite3_stmt *q = NULL;
    kace_status st = prepare(ctx, s,
                             "SELECT c.argv FROM workload_commands c JOIN workloads w ON w.id=c.workload_id "
                             "WHERE w.name=?",
                             &q);
    if (st)
        return st;
    sqlite3_bind_text(q, 1, workload, -1, SQLITE_STATIC);
    int rc = sqlite3_step(q);
    if (rc == SQLITE_DONE) {
        sqlite3_finalize(q);
        return kace_fail(ctx, KACE_ERR_NOT_FOUND,
                         "%s: workload '%s' has no command (register it: kace workload add %s -- COMMAND...)", s->path,
                         workload, workload);
    }
    if (rc != SQLITE_ROW) {
        sqlite3_finalize(q);
        return db_fail(ctx, s, "read command");
    }
    cJSON *arr = cJSON_Parse((const char *)sqlite3_column_text(q, 0));
    sqlite3_finalize(q);
    int n = cJSON_IsArray(arr) ? cJSON_GetArraySize(arr) : 0;
    size_t bytes = (size_t)(n + 1) * sizeof(char *);
    for (int i = 0; i < n; i++) {
        const cJSON *item = cJSON_GetArrayItem(arr, i);
        if (!cJSON_IsString(item)) {
            n = 0;
            break;
        }
        bytes += strlen(item->valuestring) + 1;
    }
    if (n == 0) {
        cJSON_Delete(arr);
        return kace_fail(ctx, KACE_ERR_STORE, "%s: the stored command of '%s' is not a list of strings", s->path,
                         workload);
    }
    /* One block: the pointers, then the strings. */
    char **argv = malloc(bytes);
    if (!argv) {
        cJSON_Delete(arr);
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    }
    char *text = (char *)(argv + n + 1);
    for (int i = 0; i < n; i++) {
        const char *v = cJSON_GetArrayItem(arr, i)->valuestring;
        size_t len = strlen(v) + 1;
        memcpy(text, v, len);
        argv[i] = text;
        text += len;
    }
    argv[n] = NULL;
    cJSON_Delete(arr);
    *argv_out = argv;
    return KACE_OK;
}

/* Member order of a run key: by name, then MPS percentage. */
static int member_cmp(const kace_measured_member *x, const kace_measured_member *y)
{
    int c = strcmp(x->workload, y->workload);
    return c ? c : x->mps_pct - y->mps_pct;
}

void kace_measured_run_key(const kace_measured_run *r, char *out, size_t size)
{
    /* Insertion sort of member indices by (name, pct): k is at most 8. */
    int order[KACE_MAX_K];
    int k = r->k < 0 ? 0 : (r->k > KACE_MAX_K ? KACE_MAX_K : r->k);
    for (int i = 0; i < k; i++) {
        int j = i;
        order[j] = i;
        while (j > 0 && member_cmp(&r->member[order[j - 1]], &r->member[order[j]]) > 0) {
            int t = order[j - 1];
            order[j - 1] = order[j];
            order[j] = t;
            j--;
        }
    }
    size_t at = (size_t)snprintf(out, size, "measured|%s|%s", r->set ? r->set : "", r->mode ? r->mode : "");
    for (int i = 0; i < k && at < size; i++)
        at += (size_t)snprintf(out + at, size - at, "|%s@%d", r->member[order[i]].workload, r->member[order[i]].mps_pct);
    if (at < size)
        snprintf(out + at, size - at, "|#%d", r->repetition);
}

kace_status kace_store_has_measured_run(kace_ctx *ctx, kace_store *s, const kace_measured_run *r, bool *has)
{
    char key[KACE_MAX_K * (KACE_NAME_MAX + 8) + 320];
    kace_measured_run_key(r, key, sizeof key);
    sqlite3_stmt *q = NULL;
    kace_status st = prepare(ctx, s, "SELECT 1 FROM runs WHERE run_key=?", &q);
    if (st)
        return st;
    sqlite3_bind_text(q, 1, key, -1, SQLITE_STATIC);
    int rc = sqlite3_step(q);
    sqlite3_finalize(q);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        return db_fail(ctx, s, "find run");
    *has = rc == SQLITE_ROW;
    return KACE_OK;
}

static void bind_double_or_null(sqlite3_stmt *q, int i, double v)
{
    if (isfinite(v))
        sqlite3_bind_double(q, i, v);
    else
        sqlite3_bind_null(q, i);
}

kace_status kace_store_add_measured_run(kace_ctx *ctx, kace_store *s, const kace_measured_run *r, long long *run_id)
{
    if (r->k < 1 || r->k > KACE_MAX_K || !r->set || !*r->set || !r->mode)
        return kace_fail(ctx, KACE_ERR_INVALID, "%s: a measured run needs 1..%d members, a set and a mode", s->path,
                         KACE_MAX_K);
    char key[KACE_MAX_K * (KACE_NAME_MAX + 8) + 320], date[32], stamp[32];
    kace_measured_run_key(r, key, sizeof key);
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(date, sizeof date, "%Y-%m-%d", &tm);
    strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", &tm);
    sqlite3_stmt *q = NULL;
    kace_status st;
    if ((st = exec(ctx, s, "SAVEPOINT kace_measured;")))
        return st;
    /* The source: this GPU, kace-measure, today. */
    if ((st = prepare(ctx, s, "INSERT OR IGNORE INTO sources(gpu, tool, date, file) VALUES(?,'kace-measure',?,'measure')",
                      &q)))
        goto fail;
    bind_text_or_null(q, 1, r->gpu);
    sqlite3_bind_text(q, 2, date, -1, SQLITE_STATIC);
    if (sqlite3_step(q) != SQLITE_DONE) {
        st = db_fail(ctx, s, "insert source");
        goto fail;
    }
    sqlite3_finalize(q);
    if ((st = prepare(ctx, s, "SELECT id FROM sources WHERE gpu IS ? AND tool='kace-measure' AND date=? AND file='measure'",
                      &q)))
        goto fail;
    bind_text_or_null(q, 1, r->gpu);
    sqlite3_bind_text(q, 2, date, -1, SQLITE_STATIC);
    if (sqlite3_step(q) != SQLITE_ROW) {
        st = db_fail(ctx, s, "find source");
        goto fail;
    }
    sqlite3_int64 source = sqlite3_column_int64(q, 0);
    sqlite3_finalize(q);

    if ((st = prepare(ctx, s,
                      "INSERT OR IGNORE INTO runs(set_name, k, status, run_key, source_id, mode, repetition, measured_at, "
                      "window_s) VALUES(?,?,?,?,?,?,?,?,?)",
                      &q)))
        goto fail;
    sqlite3_bind_text(q, 1, r->set, -1, SQLITE_STATIC);
    sqlite3_bind_int(q, 2, r->k);
    sqlite3_bind_text(q, 3, run_status_name(r->status), -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 4, key, -1, SQLITE_STATIC);
    sqlite3_bind_int64(q, 5, source);
    sqlite3_bind_text(q, 6, r->mode, -1, SQLITE_STATIC);
    sqlite3_bind_int(q, 7, r->repetition);
    sqlite3_bind_text(q, 8, stamp, -1, SQLITE_STATIC);
    bind_double_or_null(q, 9, r->window_s);
    if (sqlite3_step(q) != SQLITE_DONE) {
        st = db_fail(ctx, s, "insert run");
        goto fail;
    }
    if (sqlite3_changes(s->db) == 0) {
        st = kace_fail(ctx, KACE_ERR_INVALID, "%s: run %s is already stored", s->path, key);
        goto fail;
    }
    sqlite3_int64 id = sqlite3_last_insert_rowid(s->db);
    sqlite3_finalize(q);
    if ((st = prepare(ctx, s,
                      "INSERT INTO run_members(run_id, slot, workload_id, mps_pct, throughput, status, throughput_cv, "
                      "detail) VALUES(?,?,?,?,?,?,?,?)",
                      &q)))
        goto fail;
    for (int m = 0; m < r->k; m++) {
        const kace_measured_member *mb = &r->member[m];
        sqlite3_int64 wid;
        if ((st = ensure_workload(ctx, s, mb->workload, &wid)))
            goto fail;
        sqlite3_reset(q);
        sqlite3_bind_int64(q, 1, id);
        sqlite3_bind_int(q, 2, m);
        sqlite3_bind_int64(q, 3, wid);
        sqlite3_bind_int(q, 4, mb->mps_pct);
        bind_double_or_null(q, 5, mb->throughput);
        bind_text_or_null(q, 6, mb->status);
        bind_double_or_null(q, 7, mb->cv);
        bind_text_or_null(q, 8, mb->detail);
        if (sqlite3_step(q) != SQLITE_DONE) {
            st = db_fail(ctx, s, "insert run member");
            goto fail;
        }
    }
    sqlite3_finalize(q);
    if ((st = exec(ctx, s, "RELEASE kace_measured;")))
        goto fail_done;
    if (run_id)
        *run_id = (long long)id;
    return KACE_OK;
fail:
    sqlite3_finalize(q);
fail_done:
    exec(NULL, s, "ROLLBACK TO kace_measured; RELEASE kace_measured;");
    return st;
}

/* ---- observed colocations ------------------------------------------------- */

static bool is_origin_word(const char *w)
{
    if (!w || !*w || strlen(w) > 32)
        return false;
    for (const char *p = w; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_' || *p == '-'))
            return false;
    return true;
}

static kace_status check_observation(kace_ctx *ctx, const kace_observed_colocation *o)
{
    if (!o)
        return kace_fail(ctx, KACE_ERR_INVALID, "observation: none given");
    if (!is_origin_word(o->origin))
        return kace_fail(ctx, KACE_ERR_INVALID, "observation: origin '%s' is not a short word of [a-z0-9_-]",
                         o->origin ? o->origin : "");
    if (o->origin_id && (!*o->origin_id || strlen(o->origin_id) > 256))
        return kace_fail(ctx, KACE_ERR_INVALID, "observation from %s: origin_id must be 1..256 characters", o->origin);
    if (!isfinite(o->observed_at) || o->observed_at < 0)
        return kace_fail(ctx, KACE_ERR_INVALID, "observation from %s: observed_at %g is not a time (unix seconds >= 0)",
                         o->origin, o->observed_at);
    if ((o->gpu && strlen(o->gpu) > 256) || (o->model && strlen(o->model) > 256))
        return kace_fail(ctx, KACE_ERR_INVALID, "observation from %s: gpu or model name longer than 256", o->origin);
    if (o->n_members < 1 || o->n_members > KACE_MAX_K || !o->members)
        return kace_fail(ctx, KACE_ERR_INVALID, "observation from %s: %zu members (expected 1..%d)", o->origin,
                         o->n_members, KACE_MAX_K);
    for (size_t i = 0; i < o->n_members; i++) {
        const kace_observed_member *m = &o->members[i];
        if (!m->workload || !*m->workload || strlen(m->workload) >= KACE_NAME_MAX)
            return kace_fail(ctx, KACE_ERR_INVALID, "observation from %s: member %zu: bad workload name", o->origin, i + 1);
        if (!isfinite(m->mps_pct) || m->mps_pct <= 0 || m->mps_pct > 100)
            return kace_fail(ctx, KACE_ERR_INVALID, "observation from %s: member %zu (%s): mps_pct %g is not in (0, 100]",
                             o->origin, i + 1, m->workload, m->mps_pct);
        if (!isfinite(m->throughput) || m->throughput <= 0)
            return kace_fail(ctx, KACE_ERR_INVALID,
                             "observation from %s: member %zu (%s): throughput %g is not a finite positive number",
                             o->origin, i + 1, m->workload, m->throughput);
        if (!isnan(m->predicted) && (!isfinite(m->predicted) || m->predicted < 0))
            return kace_fail(ctx, KACE_ERR_INVALID,
                             "observation from %s: member %zu (%s): predicted %g is neither NAN nor a finite number >= 0",
                             o->origin, i + 1, m->workload, m->predicted);
    }
    return KACE_OK;
}

/* Whether the stored members of observation id equal o's (same order). */
static kace_status same_observation(kace_ctx *ctx, kace_store *s, sqlite3_int64 id, const kace_observed_colocation *o,
                                    const sqlite3_int64 *wid, bool *same)
{
    sqlite3_stmt *q = NULL;
    kace_status st = prepare(ctx, s,
                             "SELECT workload_id, mps_pct, throughput, predicted FROM observation_members "
                             "WHERE observation_id=? ORDER BY slot",
                             &q);
    if (st)
        return st;
    sqlite3_bind_int64(q, 1, id);
    size_t n = 0;
    int rc;
    *same = true;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        if (n >= o->n_members) {
            *same = false;
            n++;
            continue;
        }
        const kace_observed_member *m = &o->members[n];
        bool pred_null = sqlite3_column_type(q, 3) == SQLITE_NULL;
        if (sqlite3_column_int64(q, 0) != wid[n] || sqlite3_column_double(q, 1) != m->mps_pct ||
            sqlite3_column_double(q, 2) != m->throughput || pred_null != (bool)isnan(m->predicted) ||
            (!pred_null && sqlite3_column_double(q, 3) != m->predicted))
            *same = false;
        n++;
    }
    sqlite3_finalize(q);
    if (rc != SQLITE_DONE)
        return db_fail(ctx, s, "read observation");
    if (n != o->n_members)
        *same = false;
    return KACE_OK;
}

kace_status kace_store_add_observation(kace_ctx *ctx, kace_store *s, const kace_observed_colocation *o, bool *added)
{
    if (added)
        *added = false;
    kace_status st = check_observation(ctx, o);
    if (st)
        return st;
    sqlite3_int64 wid[KACE_MAX_K];
    sqlite3_stmt *q = NULL;
    if ((st = exec(ctx, s, "SAVEPOINT kace_observe;")))
        return st;
    /* Known workloads only: an observation of an unprofiled job teaches nothing. */
    if ((st = prepare(ctx, s, "SELECT id FROM workloads WHERE name=?", &q)))
        goto fail;
    for (size_t i = 0; i < o->n_members; i++) {
        sqlite3_reset(q);
        sqlite3_bind_text(q, 1, o->members[i].workload, -1, SQLITE_STATIC);
        int rc = sqlite3_step(q);
        if (rc == SQLITE_DONE) {
            st = kace_fail(ctx, KACE_ERR_NOT_FOUND,
                           "observation from %s: member %zu: unknown workload '%s' (profile it, or register it with "
                           "kace workload add)",
                           o->origin, i + 1, o->members[i].workload);
            goto fail;
        }
        if (rc != SQLITE_ROW) {
            st = db_fail(ctx, s, "find workload");
            goto fail;
        }
        wid[i] = sqlite3_column_int64(q, 0);
    }
    sqlite3_finalize(q);
    q = NULL;
    if (o->origin_id) {
        if ((st = prepare(ctx, s, "SELECT id FROM observations WHERE origin=? AND origin_id=?", &q)))
            goto fail;
        sqlite3_bind_text(q, 1, o->origin, -1, SQLITE_STATIC);
        sqlite3_bind_text(q, 2, o->origin_id, -1, SQLITE_STATIC);
        int rc = sqlite3_step(q);
        if (rc == SQLITE_ROW) {
            sqlite3_int64 old = sqlite3_column_int64(q, 0);
            sqlite3_finalize(q);
            q = NULL;
            bool same;
            if ((st = same_observation(ctx, s, old, o, wid, &same)))
                goto fail;
            if (!same) {
                st = kace_fail(ctx, KACE_ERR_INVALID,
                               "observation %s/%s is already stored with other members or values (not replaced)",
                               o->origin, o->origin_id);
                goto fail;
            }
            return exec(ctx, s, "RELEASE kace_observe;");
        }
        if (rc != SQLITE_DONE) {
            st = db_fail(ctx, s, "find observation");
            goto fail;
        }
        sqlite3_finalize(q);
        q = NULL;
    }
    if ((st = prepare(ctx, s, "INSERT INTO observations(origin, origin_id, observed_at, gpu, model, k) VALUES(?,?,?,?,?,?)",
                      &q)))
        goto fail;
    sqlite3_bind_text(q, 1, o->origin, -1, SQLITE_STATIC);
    bind_text_or_null(q, 2, o->origin_id);
    sqlite3_bind_double(q, 3, o->observed_at);
    bind_text_or_null(q, 4, o->gpu);
    bind_text_or_null(q, 5, o->model);
    sqlite3_bind_int(q, 6, (int)o->n_members);
    if (sqlite3_step(q) != SQLITE_DONE) {
        st = db_fail(ctx, s, "insert observation");
        goto fail;
    }
    sqlite3_int64 id = sqlite3_last_insert_rowid(s->db);
    sqlite3_finalize(q);
    if ((st = prepare(ctx, s,
                      "INSERT INTO observation_members(observation_id, slot, workload_id, mps_pct, throughput, predicted) "
                      "VALUES(?,?,?,?,?,?)",
                      &q)))
        goto fail;
    for (size_t i = 0; i < o->n_members; i++) {
        sqlite3_reset(q);
        sqlite3_bind_int64(q, 1, id);
        sqlite3_bind_int(q, 2, (int)i);
        sqlite3_bind_int64(q, 3, wid[i]);
        sqlite3_bind_double(q, 4, o->members[i].mps_pct);
        sqlite3_bind_double(q, 5, o->members[i].throughput);
        bind_double_or_null(q, 6, o->members[i].predicted);
        if (sqlite3_step(q) != SQLITE_DONE) {
            st = db_fail(ctx, s, "insert observation member");
            goto fail;
        }
    }
    sqlite3_finalize(q);
    q = NULL;
    if ((st = exec(ctx, s, "RELEASE kace_observe;")))
        goto fail;
    if (added)
        *added = true;
    return KACE_OK;
fail:
    sqlite3_finalize(q);
    exec(NULL, s, "ROLLBACK TO kace_observe; RELEASE kace_observe;");
    return st;
}

static void free_observation(kace_observed_colocation *o)
{
    free((char *)o->origin);
    free((char *)o->origin_id);
    free((char *)o->gpu);
    free((char *)o->model);
    for (size_t i = 0; o->members && i < o->n_members; i++)
        free((char *)o->members[i].workload);
    free((kace_observed_member *)o->members);
}

void kace_observed_list_free(kace_observed_list **list)
{
    if (!list || !*list)
        return;
    for (size_t i = 0; i < (*list)->n; i++)
        free_observation(&(*list)->items[i]);
    free((*list)->items);
    free(*list);
    *list = NULL;
}

static bool dup_column(sqlite3_stmt *q, int col, const char **out)
{
    *out = NULL;
    if (sqlite3_column_type(q, col) == SQLITE_NULL)
        return true;
    return (*out = strdup((const char *)sqlite3_column_text(q, col))) != NULL;
}

kace_status kace_store_list_observations(kace_ctx *ctx, kace_store *s, double since, kace_observed_list **out)
{
    *out = NULL;
    kace_observed_list *l = calloc(1, sizeof *l);
    if (!l)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    sqlite3_stmt *q = NULL;
    kace_status st = prepare(ctx, s,
                             "SELECT o.id, o.origin, o.origin_id, o.observed_at, o.gpu, o.model, o.k, m.slot, w.name, "
                             "m.mps_pct, m.throughput, m.predicted FROM observations o "
                             "JOIN observation_members m ON m.observation_id=o.id JOIN workloads w ON w.id=m.workload_id "
                             "WHERE ?1 IS NULL OR o.observed_at >= ?1 ORDER BY o.observed_at, o.id, m.slot",
                             &q);
    if (st)
        goto fail;
    if (isfinite(since))
        sqlite3_bind_double(q, 1, since);
    size_t cap = 0;
    sqlite3_int64 current = -1;
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        sqlite3_int64 id = sqlite3_column_int64(q, 0);
        int k = sqlite3_column_int(q, 6), slot = sqlite3_column_int(q, 7);
        if (k < 1 || k > KACE_MAX_K || slot < 0 || slot >= k) {
            st = kace_fail(ctx, KACE_ERR_STORE, "%s: observation %lld has a bad member slot %d of %d", s->path,
                           (long long)id, slot, k);
            goto fail;
        }
        if (id != current) {
            if (l->n == cap) {
                cap = cap ? cap * 2 : 64;
                kace_observed_colocation *p = realloc(l->items, cap * sizeof *p);
                if (!p)
                    goto nomem;
                l->items = p;
            }
            kace_observed_colocation *o = &l->items[l->n++];
            memset(o, 0, sizeof *o);
            current = id;
            kace_observed_member *m = calloc((size_t)k, sizeof *m);
            o->members = m;
            if (!m)
                goto nomem;
            o->n_members = (size_t)k;
            o->observed_at = sqlite3_column_double(q, 3);
            if (!dup_column(q, 1, &o->origin) || !dup_column(q, 2, &o->origin_id) || !dup_column(q, 4, &o->gpu) ||
                !dup_column(q, 5, &o->model))
                goto nomem;
        }
        kace_observed_colocation *o = &l->items[l->n - 1];
        kace_observed_member *m = (kace_observed_member *)&o->members[slot];
        free((char *)m->workload);
        if (!dup_column(q, 8, &m->workload))
            goto nomem;
        m->mps_pct = sqlite3_column_double(q, 9);
        m->throughput = sqlite3_column_double(q, 10);
        m->predicted = sqlite3_column_type(q, 11) == SQLITE_NULL ? NAN : sqlite3_column_double(q, 11);
    }
    if (rc != SQLITE_DONE) {
        st = db_fail(ctx, s, "read observations");
        goto fail;
    }
    sqlite3_finalize(q);
    *out = l;
    return KACE_OK;
nomem:
    st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
fail:
    sqlite3_finalize(q);
    kace_observed_list_free(&l);
    return st;
}
