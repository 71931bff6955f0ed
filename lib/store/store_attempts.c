/* The store's record of campaign attempts (include/kace/store.h): which
 * command key each measurement of a planned run was made with, so that a
 * failed run is measured again only once its commands or code change. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <sqlite3.h>

#include "kace/store.h"
#include "store/store_internal.h"

static kace_status attempts_table_exists(kace_ctx *ctx, kace_store *s, bool *exists)
{
    sqlite3_stmt *q = NULL;
    kace_status st =
        store_prepare(ctx, s, "SELECT 1 FROM sqlite_master WHERE type='table' AND name='campaign_attempts'", &q);
    if (st)
        return st;
    int rc = sqlite3_step(q);
    sqlite3_finalize(q);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        return store_fail(ctx, s, "look for the campaign attempts");
    *exists = rc == SQLITE_ROW;
    return KACE_OK;
}

kace_status kace_attempt_state_load(kace_ctx *ctx, kace_store *s, const char *run_key, const char *current_key,
                                    kace_attempt_state *out)
{
    memset(out, 0, sizeof *out);
    snprintf(out->current_key, sizeof out->current_key, "%s", current_key ? current_key : "");
    sqlite3_stmt *q = NULL;
    kace_status st = store_prepare(ctx, s, "SELECT status FROM runs WHERE run_key=?", &q);
    if (st)
        return st;
    sqlite3_bind_text(q, 1, run_key, -1, SQLITE_TRANSIENT);
    int rc = sqlite3_step(q);
    if (rc == SQLITE_ROW) {
        out->stored = true;
        const char *status = (const char *)sqlite3_column_text(q, 0);
        out->failed = status && strcmp(status, "ok") != 0;
    }
    sqlite3_finalize(q);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        return store_fail(ctx, s, "find run");
    bool table = false;
    if (!out->failed || (st = attempts_table_exists(ctx, s, &table)) || !table)
        return st;
    if ((st = store_prepare(ctx, s,
                            "SELECT command_key FROM campaign_attempts WHERE run_key=? ORDER BY attempt DESC LIMIT 1",
                            &q)))
        return st;
    sqlite3_bind_text(q, 1, run_key, -1, SQLITE_TRANSIENT);
    rc = sqlite3_step(q);
    if (rc == SQLITE_ROW) {
        out->key_known = true;
        snprintf(out->failed_key, sizeof out->failed_key, "%s", (const char *)sqlite3_column_text(q, 0));
    }
    sqlite3_finalize(q);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        return store_fail(ctx, s, "find the run's attempts");
    return KACE_OK;
}

kace_status kace_attempt_note(kace_ctx *ctx, kace_store *s, const char *run_key, const char *command_key,
                              kace_run_status status)
{
    kace_status st = store_exec(ctx, s,
                                "CREATE TABLE IF NOT EXISTS campaign_attempts(run_key TEXT NOT NULL, "
                                "attempt INTEGER NOT NULL, command_key TEXT NOT NULL, status TEXT NOT NULL, "
                                "attempted_at TEXT NOT NULL, PRIMARY KEY(run_key, attempt));");
    if (st)
        return st;
    char stamp[32];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", &tm);
    sqlite3_stmt *q = NULL;
    if ((st = store_prepare(ctx, s,
                            "INSERT INTO campaign_attempts(run_key, attempt, command_key, status, attempted_at) "
                            "VALUES(?1, (SELECT coalesce(max(attempt), 0) + 1 FROM campaign_attempts "
                            "WHERE run_key=?1), ?2, ?3, ?4)",
                            &q)))
        return st;
    sqlite3_bind_text(q, 1, run_key, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(q, 2, command_key, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(q, 3, store_run_status_name(status), -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 4, stamp, -1, SQLITE_TRANSIENT);
    int rc = sqlite3_step(q);
    sqlite3_finalize(q);
    return rc == SQLITE_DONE ? KACE_OK : store_fail(ctx, s, "note the campaign attempt");
}

kace_status kace_attempt_retire_failed(kace_ctx *ctx, kace_store *s, const char *run_key, bool *retired)
{
    *retired = false;
    sqlite3_stmt *q = NULL;
    kace_status st = store_prepare(ctx, s, "SELECT id FROM runs WHERE run_key=? AND status != 'ok'", &q);
    if (st)
        return st;
    sqlite3_bind_text(q, 1, run_key, -1, SQLITE_TRANSIENT);
    int rc = sqlite3_step(q);
    sqlite3_int64 id = rc == SQLITE_ROW ? sqlite3_column_int64(q, 0) : 0;
    sqlite3_finalize(q);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        return store_fail(ctx, s, "find the failed run");
    if (!id)
        return KACE_OK;
    const char *sql[] = {"DELETE FROM run_members WHERE run_id=?", "DELETE FROM runs WHERE id=?"};
    for (size_t i = 0; i < 2; i++) {
        if ((st = store_prepare(ctx, s, sql[i], &q)))
            return st;
        sqlite3_bind_int64(q, 1, id);
        rc = sqlite3_step(q);
        sqlite3_finalize(q);
        if (rc != SQLITE_DONE)
            return store_fail(ctx, s, "replace the failed run");
    }
    *retired = true;
    return KACE_OK;
}
