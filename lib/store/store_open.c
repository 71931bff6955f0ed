/* The SQLite store (see include/kace/store.h): opening, the schema and its
 * migrations, transactions; the helpers the other store files share. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "store/store_internal.h"

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

kace_status store_fail(kace_ctx *ctx, kace_store *s, const char *what)
{
    return kace_fail(ctx, KACE_ERR_STORE, "%s: %s: %s", s->path, what, sqlite3_errmsg(s->db));
}

kace_status store_exec(kace_ctx *ctx, kace_store *s, const char *sql)
{
    char *err = NULL;
    if (sqlite3_exec(s->db, sql, NULL, NULL, &err) != SQLITE_OK) {
        kace_status st = kace_fail(ctx, KACE_ERR_STORE, "%s: %s", s->path, err ? err : "SQLite error");
        sqlite3_free(err);
        return st;
    }
    return KACE_OK;
}

kace_status store_prepare(kace_ctx *ctx, kace_store *s, const char *sql, sqlite3_stmt **q)
{
    if (sqlite3_prepare_v2(s->db, sql, -1, q, NULL) != SQLITE_OK)
        return store_fail(ctx, s, "prepare");
    return KACE_OK;
}

void store_bind_text_or_null(sqlite3_stmt *q, int i, const char *v)
{
    if (v)
        sqlite3_bind_text(q, i, v, -1, SQLITE_STATIC);
    else
        sqlite3_bind_null(q, i);
}

void store_bind_number_or_null(sqlite3_stmt *q, int i, double v)
{
    if (isnan(v))
        sqlite3_bind_null(q, i);
    else
        sqlite3_bind_double(q, i, v);
}

const char *store_run_status_name(kace_run_status st)
{
    switch (st) {
    case KACE_RUN_OK: return "ok";
    case KACE_RUN_FAILED: return "failed";
    case KACE_RUN_OOM: return "oom";
    case KACE_RUN_TIMEOUT: return "timeout";
    }
    return "failed";
}

void store_bind_double_or_null(sqlite3_stmt *q, int i, double v)
{
    if (isfinite(v))
        sqlite3_bind_double(q, i, v);
    else
        sqlite3_bind_null(q, i);
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

/* Schema migrations, one step per version, all in upgrade()'s transaction.
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
    /* 4 -> 5 (kace campaign --device): a campaign's state, readable with
     * SELECT: the plans it measured, each call (allocation) with its deadline
     * and how it ended (NULL while it runs: a row left so was killed), and
     * what each step of a call did and left (its run times project the next
     * call's). */
    [4] = "CREATE TABLE IF NOT EXISTS campaign_plans("
          "  id INTEGER PRIMARY KEY, fingerprint TEXT NOT NULL UNIQUE, path TEXT, text TEXT NOT NULL,"
          "  added_at TEXT NOT NULL);"
          "CREATE TABLE IF NOT EXISTS campaign_allocations("
          "  id INTEGER PRIMARY KEY, plan_id INTEGER NOT NULL REFERENCES campaign_plans(id),"
          "  started_at TEXT NOT NULL, deadline_at TEXT NOT NULL, ended_at TEXT,"
          "  ending TEXT CHECK(ending IN ('finished','deadline','killed','failed')));"
          "CREATE TABLE IF NOT EXISTS campaign_steps("
          "  allocation_id INTEGER NOT NULL REFERENCES campaign_allocations(id), step TEXT NOT NULL,"
          "  runs_done INTEGER NOT NULL, runs_left INTEGER NOT NULL, seconds REAL NOT NULL,"
          "  PRIMARY KEY(allocation_id, step));"
          "UPDATE meta SET value='5' WHERE key='schema_version';",
    /* 5 -> 6 (kace campaign --device --catalog): a call starts from a
     * catalog (a campaign_plans row whose kind is 'catalog') before any plan
     * is made; a plan made from it (kind 'made') names it. Each profile try
     * of a catalog workload, with its command key, so that the retry rules
     * (two failures drop a workload until its command or code changes; a try
     * that ran out of time gets half as long again) read the store, not files
     * beside it; and ncu's results, the call's last and optional step. Only
     * new tables: each step can run again on a store whose version alone was
     * set back. */
    [5] = "CREATE TABLE IF NOT EXISTS campaign_plan_kinds("
          "  plan_id INTEGER PRIMARY KEY REFERENCES campaign_plans(id),"
          "  kind TEXT NOT NULL CHECK(kind IN ('catalog','made')),"
          "  made_from INTEGER REFERENCES campaign_plans(id));"
          "CREATE TABLE IF NOT EXISTS campaign_profiles("
          "  id INTEGER PRIMARY KEY, allocation_id INTEGER REFERENCES campaign_allocations(id),"
          "  workload TEXT NOT NULL, command_key TEXT NOT NULL,"
          "  status TEXT NOT NULL CHECK(status IN ('ok','failed','timeout')),"
          "  seconds REAL NOT NULL, need_s REAL NOT NULL, attempted_at TEXT NOT NULL);"
          "CREATE INDEX IF NOT EXISTS campaign_profiles_workload ON campaign_profiles(workload, command_key);"
          "CREATE TABLE IF NOT EXISTS campaign_ncu("
          "  id INTEGER PRIMARY KEY, allocation_id INTEGER REFERENCES campaign_allocations(id),"
          "  workload TEXT NOT NULL, command_key TEXT NOT NULL,"
          "  status TEXT NOT NULL CHECK(status IN ('ok','failed','timeout')),"
          "  seconds REAL NOT NULL, cap_s REAL NOT NULL, output TEXT, measured_at TEXT NOT NULL);"
          "UPDATE meta SET value='6' WHERE key='schema_version';",
    /* 6 -> 7: the first minute's probe of a call from a catalog (MPS client
     * limit, host memory per pool member, a clean step-time curve), and the
     * pool size and window it gave, which later calls use too. */
    [6] = "CREATE TABLE IF NOT EXISTS campaign_probes("
          "  id INTEGER PRIMARY KEY, allocation_id INTEGER REFERENCES campaign_allocations(id),"
          "  clients_accepted INTEGER, client_refused INTEGER NOT NULL, mem_available_kib INTEGER,"
          "  member_rss_kib INTEGER, window_s REAL, window_basis TEXT, pool_members INTEGER NOT NULL,"
          "  pool_bound TEXT, seconds REAL NOT NULL, evidence TEXT NOT NULL, probed_at TEXT NOT NULL);"
          "UPDATE meta SET value='7' WHERE key='schema_version';",
};

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

static kace_status locked(kace_ctx *ctx, kace_store *s)
{
    return kace_fail(ctx, KACE_ERR_STORE, "%s: store is locked by another process", s->path);
}

/* The store's schema version, or 0 for a database without tables (a store
 * being created). A SQLite database of another program, or a file that is
 * not SQLite, fails. *sqlite_rc: SQLite's code of a failure to read.
 *
 * The first look is a query that is stepped, so that inside a transaction
 * it fixes the snapshot both looks read: a statement that fails to prepare
 * ("no such table: meta") reads the schema without holding it, and a
 * process that created the store between the two looks would make a new
 * store look like another program's. */
static kace_status read_version(kace_ctx *ctx, kace_store *s, int *version, int *sqlite_rc)
{
    *version = 0;
    sqlite3_stmt *q = NULL;
    int n_tables = -1, has_meta = 0;
    int rc = *sqlite_rc = sqlite3_prepare_v2(
        s->db, "SELECT count(*), coalesce(sum(type='table' AND name='meta'), 0) FROM sqlite_master", -1, &q, NULL);
    if (rc == SQLITE_OK) {
        rc = *sqlite_rc = sqlite3_step(q);
        if (rc == SQLITE_ROW) {
            n_tables = sqlite3_column_int(q, 0);
            has_meta = sqlite3_column_int(q, 1);
        }
    }
    sqlite3_finalize(q);
    if (rc == SQLITE_BUSY || rc == SQLITE_LOCKED)
        return locked(ctx, s);
    if (rc != SQLITE_ROW)
        return kace_fail(ctx, KACE_ERR_STORE, "%s: not a kace store (%s)", s->path, sqlite3_errmsg(s->db));
    *sqlite_rc = SQLITE_OK;
    if (!has_meta) { /* a new database, or not a kace store at all */
        if (n_tables != 0)
            return kace_fail(ctx, KACE_ERR_STORE, "%s: a SQLite database that is not a kace store", s->path);
        return KACE_OK;
    }
    rc = *sqlite_rc = sqlite3_prepare_v2(s->db, "SELECT value FROM meta WHERE key='schema_version'", -1, &q, NULL);
    if (rc == SQLITE_BUSY || rc == SQLITE_LOCKED)
        return locked(ctx, s);
    if (rc != SQLITE_OK)
        return kace_fail(ctx, KACE_ERR_STORE, "%s: not a kace store (%s)", s->path, sqlite3_errmsg(s->db));
    rc = *sqlite_rc = sqlite3_step(q);
    if (rc == SQLITE_ROW)
        *version = atoi((const char *)sqlite3_column_text(q, 0));
    sqlite3_finalize(q);
    if (rc == SQLITE_BUSY || rc == SQLITE_LOCKED)
        return locked(ctx, s);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        return store_fail(ctx, s, "read schema version");
    *sqlite_rc = SQLITE_OK;
    if (*version < 1)
        return kace_fail(ctx, KACE_ERR_STORE, "%s: a kace store without a schema version", s->path);
    return KACE_OK;
}

/* read_version with its two looks (which tables are there, then the
 * version) in one read transaction: a process creating the store between
 * them would otherwise make a new store look like another program's. */
static kace_status read_version_once(kace_ctx *ctx, kace_store *s, int *version, int *sqlite_rc)
{
    if (store_exec(NULL, s, "BEGIN;"))
        return read_version(ctx, s, version, sqlite_rc);
    kace_status st = read_version(ctx, s, version, sqlite_rc);
    store_exec(NULL, s, "COMMIT;");
    return st;
}

static kace_status check_not_newer(kace_ctx *ctx, kace_store *s, int version)
{
    if (version > KACE_STORE_SCHEMA_VERSION)
        return kace_fail(ctx, KACE_ERR_STORE, "%s: schema version %d is newer than this kace supports (%d)", s->path,
                         version, KACE_STORE_SCHEMA_VERSION);
    return KACE_OK;
}

/* Creates the schema or migrates it to KACE_STORE_SCHEMA_VERSION, all in
 * one transaction. BEGIN IMMEDIATE lets one writer in at a time: another
 * process opening the same new or older store waits for it (the busy
 * timeout) and then reads the version it left, so no step runs twice. */
static kace_status upgrade(kace_ctx *ctx, kace_store *s)
{
    kace_status st = store_exec(ctx, s, "BEGIN IMMEDIATE;");
    if (st)
        return st;
    int version, rc;
    if ((st = read_version(ctx, s, &version, &rc)) || (st = check_not_newer(ctx, s, version)))
        goto fail;
    if (version == 0) {
        if ((st = store_exec(ctx, s, schema_sql)) ||
            (st = store_exec(ctx, s, "INSERT INTO meta VALUES('schema_version','1');")))
            goto fail;
        version = 1;
    }
    for (int v = version; v < KACE_STORE_SCHEMA_VERSION; v++)
        if ((st = store_exec(ctx, s, migrate_sql[v])))
            goto fail;
    if ((st = store_exec(ctx, s, "COMMIT;")))
        goto fail;
    return KACE_OK;
fail:
    store_exec(NULL, s, "ROLLBACK;");
    return st;
}

/* "file:PATH?immutable=1": path with the characters a URI gives a meaning escaped. */
static void immutable_uri(const char *path, char *out, size_t size)
{
    size_t at = (size_t)snprintf(out, size, "file:");
    for (const char *c = path; *c && at + 4 < size; c++) {
        if (*c == '%' || *c == '?' || *c == '#')
            at += (size_t)snprintf(out + at, size - at, "%%%02X", (unsigned char)*c);
        else
            out[at++] = *c;
    }
    snprintf(out + at, size - at, "?immutable=1");
}

/* A reader of a WAL store in a folder it may not write can open it while
 * the store's -shm file exists; without one (no writer has it open) SQLite
 * cannot make one, and the file is read as immutable: no writer can be
 * changing it, since a writer would have left its -wal and -shm there. */
static bool reopen_immutable(kace_store *s)
{
    char wal[1100];
    snprintf(wal, sizeof wal, "%s-wal", s->path);
    struct stat sb;
    if (stat(wal, &sb) == 0 || errno != ENOENT)
        return false;
    char uri[3200];
    immutable_uri(s->path, uri, sizeof uri);
    sqlite3_close(s->db);
    s->db = NULL;
    return sqlite3_open_v2(uri, &s->db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, NULL) == SQLITE_OK;
}

/* A command that only reads an older store reads an upgraded copy of it in
 * memory: the file is neither migrated nor written (its folder may not be
 * writable, and the user did not ask for an upgrade), and every reader sees
 * the current schema. The copy costs the store's size in memory, once per
 * command, until someone upgrades the file (kace info --upgrade). */
static kace_status read_upgraded_copy(kace_ctx *ctx, kace_store *s)
{
    sqlite3 *mem = NULL;
    if (sqlite3_open_v2(":memory:", &mem, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK) {
        sqlite3_close(mem);
        return kace_fail(ctx, KACE_ERR_NOMEM, "%s: cannot open a copy in memory", s->path);
    }
    sqlite3_backup *b = sqlite3_backup_init(mem, "main", s->db, "main");
    int rc = b ? sqlite3_backup_step(b, -1) : sqlite3_errcode(mem);
    if (b)
        sqlite3_backup_finish(b);
    if (rc != SQLITE_DONE) {
        kace_status st = kace_fail(ctx, KACE_ERR_STORE, "%s: cannot copy the older store into memory: %s", s->path,
                                   sqlite3_errstr(rc));
        sqlite3_close(mem);
        return st;
    }
    sqlite3_close(s->db);
    s->db = mem;
    kace_status st = store_exec(ctx, s, "PRAGMA foreign_keys=ON;");
    if (!st)
        st = upgrade(ctx, s);
    if (!st)
        st = store_exec(ctx, s, "PRAGMA query_only=1;");
    return st;
}

int kace_store_older_version(const kace_store *s)
{
    return s->older_version;
}

static kace_status open_db(kace_ctx *ctx, kace_store *s, bool create)
{
    int oflags = s->read_only ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | (create ? SQLITE_OPEN_CREATE : 0);
    if (sqlite3_open_v2(s->path, &s->db, oflags, NULL) != SQLITE_OK)
        return store_fail(ctx, s, "cannot open");
    /* Readers never wait for a writer in WAL mode; a writer waits this long
     * for another writer, then reports the lock clearly. */
    sqlite3_busy_timeout(s->db, 5000);
    return store_exec(ctx, s, s->read_only ? "PRAGMA foreign_keys=ON; PRAGMA query_only=1;" : "PRAGMA foreign_keys=ON;");
}

kace_status kace_store_open_flags(kace_ctx *ctx, const char *path, unsigned flags, kace_store **out)
{
    *out = NULL;
    if (strlen(path) >= sizeof((kace_store *)0)->path)
        return kace_fail(ctx, KACE_ERR_INVALID, "store path is too long");
    if ((flags & KACE_STORE_READ_ONLY) && (flags & (KACE_STORE_CREATE | KACE_STORE_CREATE_DIRS)))
        return kace_fail(ctx, KACE_ERR_INVALID, "%s: a store opened read-only is never created", path);
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
    s->read_only = (flags & KACE_STORE_READ_ONLY) != 0;
    kace_status st = KACE_OK;
    if (!exists && (flags & KACE_STORE_CREATE_DIRS) && mkdir_parents(path) != 0) {
        st = kace_fail(ctx, KACE_ERR_IO, "%s: cannot create its folder: %s", path, strerror(errno));
        goto fail;
    }
    if (!exists && !folder_exists(path)) {
        st = kace_fail(ctx, KACE_ERR_NOT_FOUND, "%s: its folder does not exist (no store created)", path);
        goto fail;
    }
    if ((st = open_db(ctx, s, !exists)))
        goto fail;
    int version = 0, rc = SQLITE_OK;
    st = read_version_once(ctx, s, &version, &rc);
    bool cannot_open = (rc & 0xff) == SQLITE_CANTOPEN || (rc & 0xff) == SQLITE_READONLY;
    if (st && s->read_only && cannot_open && reopen_immutable(s))
        st = read_version(ctx, s, &version, &rc);
    cannot_open = (rc & 0xff) == SQLITE_CANTOPEN || (rc & 0xff) == SQLITE_READONLY;
    if (st && s->read_only && cannot_open)
        st = kace_fail(ctx, KACE_ERR_STORE,
                       "%s: cannot read the store here (%s): a writer has its -wal file but no -shm file beside "
                       "it that this user may read, and this user may not make one in the store's folder",
                       path, sqlite3_errstr(rc));
    if (st || (st = check_not_newer(ctx, s, version)))
        goto fail;
    if (version == 0 && !(flags & KACE_STORE_CREATE)) {
        st = kace_fail(ctx, KACE_ERR_NOT_FOUND, "no such store: %s (an empty file)", path);
        goto fail;
    }
    if (version < KACE_STORE_SCHEMA_VERSION && s->read_only) {
        if ((st = read_upgraded_copy(ctx, s)))
            goto fail;
        s->older_version = version;
    } else if (version < KACE_STORE_SCHEMA_VERSION && (st = upgrade(ctx, s)))
        goto fail;
    /* Pages read through a memory map, not a read() and a copy each: kace eval
     * reads most of the store (~1000 pages) and spends ~0.5 ms less. Writes go
     * through SQLite's journal as before; a failure here only costs that time. */
    store_exec(NULL, s, STORE_MMAP_PRAGMA);
    /* WAL: readers (predict, serve, eval) keep reading while an import or a
     * campaign writes. The mode stays with the file; switching needs a
     * moment without other connections, so a store in use switches later.
     * A reader leaves the mode as it is. */
    if (!s->read_only) {
        sqlite3_stmt *wal = NULL;
        if (sqlite3_prepare_v2(s->db, "PRAGMA journal_mode=WAL", -1, &wal, NULL) == SQLITE_OK)
            sqlite3_step(wal);
        sqlite3_finalize(wal);
    }
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

/* ---- transactions and savepoints ---------------------------------------- */

kace_status kace_store_begin(kace_ctx *ctx, kace_store *s)
{
    return store_exec(ctx, s, "BEGIN IMMEDIATE;");
}

kace_status kace_store_commit(kace_ctx *ctx, kace_store *s)
{
    return store_exec(ctx, s, "COMMIT;");
}

void kace_store_rollback(kace_store *s)
{
    store_exec(NULL, s, "ROLLBACK;");
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
    return store_exec(ctx, s, sql);
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
