/* A campaign's state in the store (include/kace/store.h): the plans it
 * measured, each call (allocation) with its deadline and how it ended, and
 * what each step of a call did and left (schema 5); a call's catalog, the
 * plans made from it, each profile and ncu try (schema 6), the first
 * minute's probe (schema 7, store_open.c).
 * Times are UTC text, as SQLite's strftime writes them. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
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

/* A plan or catalog row, once per fingerprint; a catalog or made plan's
 * kind beside it (campaign_plan_kinds, as the first note gave it). */
static kace_status input_note(kace_ctx *ctx, kace_store *s, const char *kind, int64_t made_from, const char *path,
                              const char *text, size_t len, const char *fingerprint, int64_t *plan_id)
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
    if (rc != SQLITE_ROW)
        return store_fail(ctx, s, "find the campaign's plan");
    if (!kind)
        return KACE_OK;
    if ((st = store_prepare(ctx, s,
                            "INSERT OR IGNORE INTO campaign_plan_kinds(plan_id, kind, made_from) VALUES(?, ?, ?)",
                            &q)))
        return st;
    sqlite3_bind_int64(q, 1, *plan_id);
    sqlite3_bind_text(q, 2, kind, -1, SQLITE_STATIC);
    if (made_from > 0)
        sqlite3_bind_int64(q, 3, made_from);
    else
        sqlite3_bind_null(q, 3);
    return step_done(ctx, s, q, "note the campaign's plan's kind");
}

kace_status kace_campaign_plan_note(kace_ctx *ctx, kace_store *s, const char *path, const char *text, size_t len,
                                    const char *fingerprint, int64_t *plan_id)
{
    return input_note(ctx, s, NULL, 0, path, text, len, fingerprint, plan_id);
}

kace_status kace_campaign_catalog_note(kace_ctx *ctx, kace_store *s, const char *path, const char *text, size_t len,
                                       const char *fingerprint, int64_t *catalog_id)
{
    return input_note(ctx, s, "catalog", 0, path, text, len, fingerprint, catalog_id);
}

kace_status kace_campaign_made_plan_note(kace_ctx *ctx, kace_store *s, int64_t catalog_id, const char *text,
                                         size_t len, const char *fingerprint, int64_t *plan_id)
{
    return input_note(ctx, s, "made", catalog_id, NULL, text, len, fingerprint, plan_id);
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

kace_status kace_campaign_made_plan(kace_ctx *ctx, kace_store *s, char **text, size_t *len, int64_t *plan_id)
{
    *text = NULL;
    *len = 0;
    *plan_id = 0;
    sqlite3_stmt *q = NULL;
    kace_status st = store_prepare(ctx, s,
                                   "SELECT p.id, p.text FROM campaign_plans p "
                                   "JOIN campaign_plan_kinds k ON k.plan_id=p.id "
                                   "WHERE k.kind='made' ORDER BY p.id DESC LIMIT 1",
                                   &q);
    if (st)
        return st;
    int rc = sqlite3_step(q);
    if (rc == SQLITE_ROW) {
        const void *t = sqlite3_column_blob(q, 1);
        size_t n = (size_t)sqlite3_column_bytes(q, 1);
        if (!(*text = malloc(n + 1))) {
            sqlite3_finalize(q);
            return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
        }
        if (n)
            memcpy(*text, t, n);
        (*text)[n] = '\0';
        *len = n;
        *plan_id = sqlite3_column_int64(q, 0);
    }
    sqlite3_finalize(q);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? KACE_OK : store_fail(ctx, s, "read the campaign's made plan");
}

kace_status kace_campaign_profile_tries(kace_ctx *ctx, kace_store *s, const char *workload, const char *command_key,
                                        kace_profile_tries *out)
{
    memset(out, 0, sizeof *out);
    sqlite3_stmt *q = NULL;
    kace_status st = store_prepare(
        ctx, s,
        "SELECT EXISTS(SELECT 1 FROM profiles p JOIN workloads w ON w.id=p.workload_id "
        "              WHERE w.name=?1 AND p.metric='exclusive_throughput' AND p.value IS NOT NULL),"
        " (SELECT count(*) FROM campaign_profiles WHERE workload=?1 AND command_key=?2 AND status!='ok'),"
        " (SELECT coalesce(max(seconds), 0) FROM campaign_profiles WHERE workload=?1 AND command_key=?2"
        "  AND status='timeout'),"
        " (SELECT coalesce(max(seconds), 0) FROM campaign_profiles WHERE status='ok'),"
        " (SELECT coalesce(max(seconds), 0) FROM campaign_profiles WHERE workload=?1 AND status='ok')",
        &q);
    if (st)
        return st;
    sqlite3_bind_text(q, 1, workload, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(q, 2, command_key, -1, SQLITE_TRANSIENT);
    int rc = sqlite3_step(q);
    if (rc == SQLITE_ROW) {
        out->profiled = sqlite3_column_int(q, 0) != 0;
        out->failures = sqlite3_column_int(q, 1);
        out->ran_out_s = sqlite3_column_double(q, 2);
        out->longest_ok_s = sqlite3_column_double(q, 3);
        out->own_ok_s = sqlite3_column_double(q, 4);
    }
    sqlite3_finalize(q);
    return rc == SQLITE_ROW ? KACE_OK : store_fail(ctx, s, "read the workload's profile tries");
}

kace_status kace_campaign_profile_note(kace_ctx *ctx, kace_store *s, int64_t allocation_id, const char *workload,
                                       const char *command_key, const char *status, double seconds, double need_s)
{
    sqlite3_stmt *q = NULL;
    kace_status st = store_prepare(ctx, s,
                                   "INSERT INTO campaign_profiles(allocation_id, workload, command_key, status, "
                                   "seconds, need_s, attempted_at) VALUES(?, ?, ?, ?, ?, ?, " NOW_SQL ")",
                                   &q);
    if (st)
        return st;
    if (allocation_id > 0)
        sqlite3_bind_int64(q, 1, allocation_id);
    else
        sqlite3_bind_null(q, 1);
    sqlite3_bind_text(q, 2, workload, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(q, 3, command_key, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(q, 4, status, -1, SQLITE_TRANSIENT);
    sqlite3_bind_double(q, 5, seconds);
    sqlite3_bind_double(q, 6, need_s);
    return step_done(ctx, s, q, "note the workload's profile try");
}

kace_status kace_campaign_ncu_tries(kace_ctx *ctx, kace_store *s, const char *workload, const char *command_key,
                                    int *ok, int *failures)
{
    *ok = *failures = 0;
    sqlite3_stmt *q = NULL;
    kace_status st = store_prepare(ctx, s,
                                   "SELECT coalesce(sum(status='ok'), 0), coalesce(sum(status!='ok'), 0) "
                                   "FROM campaign_ncu WHERE workload=? AND command_key=?",
                                   &q);
    if (st)
        return st;
    sqlite3_bind_text(q, 1, workload, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(q, 2, command_key, -1, SQLITE_TRANSIENT);
    int rc = sqlite3_step(q);
    if (rc == SQLITE_ROW) {
        *ok = sqlite3_column_int(q, 0);
        *failures = sqlite3_column_int(q, 1);
    }
    sqlite3_finalize(q);
    return rc == SQLITE_ROW ? KACE_OK : store_fail(ctx, s, "read the workload's ncu tries");
}

kace_status kace_campaign_ncu_note(kace_ctx *ctx, kace_store *s, int64_t allocation_id, const char *workload,
                                   const char *command_key, const char *status, double seconds, double cap_s,
                                   const char *output)
{
    sqlite3_stmt *q = NULL;
    kace_status st = store_prepare(ctx, s,
                                   "INSERT INTO campaign_ncu(allocation_id, workload, command_key, status, seconds, "
                                   "cap_s, output, measured_at) VALUES(?, ?, ?, ?, ?, ?, ?, " NOW_SQL ")",
                                   &q);
    if (st)
        return st;
    if (allocation_id > 0)
        sqlite3_bind_int64(q, 1, allocation_id);
    else
        sqlite3_bind_null(q, 1);
    sqlite3_bind_text(q, 2, workload, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(q, 3, command_key, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(q, 4, status, -1, SQLITE_TRANSIENT);
    sqlite3_bind_double(q, 5, seconds);
    sqlite3_bind_double(q, 6, cap_s);
    store_bind_text_or_null(q, 7, output);
    return step_done(ctx, s, q, "note the workload's ncu try");
}

kace_status kace_campaign_probe_note(kace_ctx *ctx, kace_store *s, int64_t allocation_id,
                                     const kace_campaign_probe_row *row)
{
    sqlite3_stmt *q = NULL;
    kace_status st = store_prepare(ctx, s,
                                   "INSERT INTO campaign_probes(allocation_id, clients_accepted, client_refused, "
                                   "mem_available_kib, member_rss_kib, window_s, window_basis, pool_members, "
                                   "pool_bound, seconds, evidence, probed_at) "
                                   "VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, " NOW_SQL ")",
                                   &q);
    if (st)
        return st;
    if (allocation_id > 0)
        sqlite3_bind_int64(q, 1, allocation_id);
    else
        sqlite3_bind_null(q, 1);
    if (row->clients_accepted >= 0)
        sqlite3_bind_int64(q, 2, row->clients_accepted);
    else
        sqlite3_bind_null(q, 2);
    sqlite3_bind_int(q, 3, row->client_refused);
    if (row->mem_available_kib)
        sqlite3_bind_int64(q, 4, (sqlite3_int64)row->mem_available_kib);
    else
        sqlite3_bind_null(q, 4);
    if (row->member_rss_kib)
        sqlite3_bind_int64(q, 5, (sqlite3_int64)row->member_rss_kib);
    else
        sqlite3_bind_null(q, 5);
    store_bind_double_or_null(q, 6, row->window_s);
    store_bind_text_or_null(q, 7, row->window_basis);
    sqlite3_bind_int64(q, 8, (sqlite3_int64)row->pool_members);
    store_bind_text_or_null(q, 9, row->pool_bound);
    sqlite3_bind_double(q, 10, row->seconds);
    sqlite3_bind_text(q, 11, row->evidence ? row->evidence : "", -1, SQLITE_TRANSIENT);
    return step_done(ctx, s, q, "note the campaign's probe");
}

kace_status kace_campaign_probe_latest(kace_ctx *ctx, kace_store *s, bool *found, size_t *pool_members,
                                       double *window_s)
{
    *found = false;
    *pool_members = 0;
    *window_s = NAN;
    sqlite3_stmt *q = NULL;
    kace_status st = store_prepare(ctx, s,
                                   "SELECT pool_members, window_s FROM campaign_probes ORDER BY id DESC LIMIT 1", &q);
    if (st)
        return st;
    int rc = sqlite3_step(q);
    if (rc == SQLITE_ROW) {
        *found = true;
        *pool_members = (size_t)sqlite3_column_int64(q, 0);
        if (sqlite3_column_type(q, 1) != SQLITE_NULL)
            *window_s = sqlite3_column_double(q, 1);
    }
    sqlite3_finalize(q);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? KACE_OK : store_fail(ctx, s, "read the campaign's probe");
}
