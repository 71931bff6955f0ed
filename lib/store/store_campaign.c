/* A campaign's state in the store (include/kace/store.h): the plans it
 * measured, each call (allocation) with its deadline and how it ended, and
 * what each step of a call did and left. The tables come with schema 5
 * (store_open.c); times are UTC text, as SQLite's strftime writes them. */
#include <stdio.h>
#include <string.h>

#include <sqlite3.h>

#include "kace/store.h"
#include "store/store_internal.h"

#define NOW_SQL "strftime('%Y-%m-%dT%H:%M:%fZ','now')"

static kace_status step_done(kace_ctx *ctx, kace_store *s, sqlite3_stmt *q, const char *what)
{
    int rc = sqlite3_step(q);
    sqlite3_finalize(q);
    return rc == SQLITE_DONE ? KACE_OK : store_fail(ctx, s, what);
}

kace_status kace_campaign_plan_note(kace_ctx *ctx, kace_store *s, const char *path, const char *text, size_t len,
                                    const char *fingerprint, int64_t *plan_id)
{
    sqlite3_stmt *q = NULL;
    kace_status st = store_prepare(ctx, s,
                                   "INSERT OR IGNORE INTO campaign_plans(fingerprint, path, text, added_at) "
                                   "VALUES(?1, ?2, ?3, " NOW_SQL ")",
                                   &q);
    if (st)
        return st;
    sqlite3_bind_text(q, 1, fingerprint, -1, SQLITE_TRANSIENT);
    store_bind_text_or_null(q, 2, path);
    sqlite3_bind_text(q, 3, text, (int)len, SQLITE_TRANSIENT);
    if ((st = step_done(ctx, s, q, "note the campaign's plan")))
        return st;
    if ((st = store_prepare(ctx, s, "SELECT id FROM campaign_plans WHERE fingerprint=?", &q)))
        return st;
    sqlite3_bind_text(q, 1, fingerprint, -1, SQLITE_TRANSIENT);
    int rc = sqlite3_step(q);
    *plan_id = rc == SQLITE_ROW ? sqlite3_column_int64(q, 0) : 0;
    sqlite3_finalize(q);
    return rc == SQLITE_ROW ? KACE_OK : store_fail(ctx, s, "find the campaign's plan");
}

kace_status kace_campaign_allocation_begin(kace_ctx *ctx, kace_store *s, int64_t plan_id, double seconds,
                                           int64_t *allocation_id, int *killed_before)
{
    *allocation_id = 0;
    *killed_before = 0;
    kace_status st = store_exec(ctx, s, "UPDATE campaign_allocations SET ending='killed' WHERE ending IS NULL;");
    if (st)
        return st;
    *killed_before = sqlite3_changes(s->db);
    sqlite3_stmt *q = NULL;
    if ((st = store_prepare(ctx, s,
                            "INSERT INTO campaign_allocations(plan_id, started_at, deadline_at) VALUES(?1, " NOW_SQL
                            ", strftime('%Y-%m-%dT%H:%M:%fZ','now', printf('%+.3f seconds', ?2)))",
                            &q)))
        return st;
    sqlite3_bind_int64(q, 1, plan_id);
    sqlite3_bind_double(q, 2, seconds);
    if ((st = step_done(ctx, s, q, "note the campaign's allocation")))
        return st;
    *allocation_id = sqlite3_last_insert_rowid(s->db);
    return KACE_OK;
}

kace_status kace_campaign_step_note(kace_ctx *ctx, kace_store *s, int64_t allocation_id, const char *step,
                                    size_t runs_done, size_t runs_left, double seconds)
{
    sqlite3_stmt *q = NULL;
    kace_status st = store_prepare(ctx, s,
                                   "INSERT OR REPLACE INTO campaign_steps(allocation_id, step, runs_done, runs_left, "
                                   "seconds) VALUES(?, ?, ?, ?, ?)",
                                   &q);
    if (st)
        return st;
    sqlite3_bind_int64(q, 1, allocation_id);
    sqlite3_bind_text(q, 2, step, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(q, 3, (sqlite3_int64)runs_done);
    sqlite3_bind_int64(q, 4, (sqlite3_int64)runs_left);
    sqlite3_bind_double(q, 5, seconds);
    return step_done(ctx, s, q, "note the campaign's step");
}

kace_status kace_campaign_allocation_end(kace_ctx *ctx, kace_store *s, int64_t allocation_id, const char *ending)
{
    sqlite3_stmt *q = NULL;
    kace_status st = store_prepare(ctx, s,
                                   "UPDATE campaign_allocations SET ended_at=" NOW_SQL ", ending=?2 WHERE id=?1",
                                   &q);
    if (st)
        return st;
    sqlite3_bind_int64(q, 1, allocation_id);
    sqlite3_bind_text(q, 2, ending, -1, SQLITE_TRANSIENT);
    return step_done(ctx, s, q, "note how the campaign's allocation ended");
}

kace_status kace_campaign_step_times(kace_ctx *ctx, kace_store *s, const char *step, size_t *runs, double *seconds)
{
    *runs = 0;
    *seconds = 0;
    sqlite3_stmt *q = NULL;
    kace_status st = store_prepare(ctx, s,
                                   "SELECT coalesce(sum(runs_done), 0), coalesce(sum(seconds), 0) FROM campaign_steps "
                                   "WHERE step=? AND runs_done > 0",
                                   &q);
    if (st)
        return st;
    sqlite3_bind_text(q, 1, step, -1, SQLITE_TRANSIENT);
    int rc = sqlite3_step(q);
    if (rc == SQLITE_ROW) {
        *runs = (size_t)sqlite3_column_int64(q, 0);
        *seconds = sqlite3_column_double(q, 1);
    }
    sqlite3_finalize(q);
    return rc == SQLITE_ROW ? KACE_OK : store_fail(ctx, s, "read the campaign's step times");
}
