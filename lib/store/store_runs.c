/* The store: workload commands, measured runs and observed colocations. */
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

#include "store/store_internal.h"

/* ---- one colocation with its members: runs and observations ------------- */

kace_status store_insert_colocation(kace_ctx *ctx, kace_store *s, const store_colocation_insert *ins,
                                    const void *row, size_t n_members, const sqlite3_int64 *workload_id,
                                    sqlite3_int64 *id, bool *inserted)
{
    char what[64];
    *inserted = false;
    sqlite3_stmt *q = NULL;
    kace_status st = store_prepare(ctx, s, ins->head_sql, &q);
    if (st)
        return st;
    ins->bind_head(q, row);
    if (sqlite3_step(q) != SQLITE_DONE) {
        snprintf(what, sizeof what, "insert %s", ins->what);
        st = store_fail(ctx, s, what);
        goto done;
    }
    if (sqlite3_changes(s->db) == 0)
        goto done;
    *id = sqlite3_last_insert_rowid(s->db);
    *inserted = true;
    sqlite3_finalize(q);
    if ((st = store_prepare(ctx, s, ins->member_sql, &q)))
        return st;
    for (size_t m = 0; m < n_members; m++) {
        sqlite3_reset(q);
        sqlite3_bind_int64(q, 1, *id);
        sqlite3_bind_int(q, 2, (int)m);
        sqlite3_bind_int64(q, 3, workload_id[m]);
        ins->bind_member(q, row, m);
        if (sqlite3_step(q) != SQLITE_DONE) {
            snprintf(what, sizeof what, "insert %s member", ins->what);
            st = store_fail(ctx, s, what);
            break;
        }
    }
done:
    sqlite3_finalize(q);
    return st;
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
    kace_status st = store_prepare(ctx, s, "INSERT OR IGNORE INTO workloads(name, family, batch) VALUES(?,?,?)", &q);
    if (st)
        return st;
    sqlite3_bind_text(q, 1, name, -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 2, family, -1, SQLITE_STATIC);
    sqlite3_bind_int(q, 3, batch);
    int rc = sqlite3_step(q);
    sqlite3_finalize(q);
    if (rc != SQLITE_DONE)
        return store_fail(ctx, s, "insert workload");
    if ((st = store_prepare(ctx, s, "SELECT id FROM workloads WHERE name=?", &q)))
        return st;
    sqlite3_bind_text(q, 1, name, -1, SQLITE_STATIC);
    rc = sqlite3_step(q);
    if (rc == SQLITE_ROW)
        *id = sqlite3_column_int64(q, 0);
    sqlite3_finalize(q);
    return rc == SQLITE_ROW ? KACE_OK : store_fail(ctx, s, "find workload");
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
    if ((st = store_exec(ctx, s, "SAVEPOINT kace_command;")))
        goto done;
    sqlite3_int64 id;
    if ((st = ensure_workload(ctx, s, workload, &id)) ||
        (st = store_prepare(ctx, s, "INSERT OR REPLACE INTO workload_commands(workload_id, argv) VALUES(?,?)", &q)))
        goto rollback;
    sqlite3_bind_int64(q, 1, id);
    sqlite3_bind_text(q, 2, json, -1, SQLITE_STATIC);
    if (sqlite3_step(q) != SQLITE_DONE) {
        st = store_fail(ctx, s, "store command");
        goto rollback;
    }
    st = store_exec(ctx, s, "RELEASE kace_command;");
    goto done;
rollback:
    store_exec(NULL, s, "ROLLBACK TO kace_command; RELEASE kace_command;");
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
    kace_status st = store_prepare(ctx, s,
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
        st = store_fail(ctx, s, "read the GPU of a profile");
    sqlite3_finalize(q);
    return st;
}

kace_status kace_store_get_command(kace_ctx *ctx, kace_store *s, const char *workload, char ***argv_out)
{
    *argv_out = NULL;
    sqlite3_stmt *q = NULL;
    kace_status st = store_prepare(ctx, s,
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
        return store_fail(ctx, s, "read command");
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
    kace_status st = store_prepare(ctx, s, "SELECT 1 FROM runs WHERE run_key=?", &q);
    if (st)
        return st;
    sqlite3_bind_text(q, 1, key, -1, SQLITE_STATIC);
    int rc = sqlite3_step(q);
    sqlite3_finalize(q);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        return store_fail(ctx, s, "find run");
    *has = rc == SQLITE_ROW;
    return KACE_OK;
}

/* A measured run as store_insert_colocation binds it. */
typedef struct measured_row {
    const kace_measured_run *r;
    const char *key;
    sqlite3_int64 source;
    const char *stamp;
} measured_row;

static void bind_run(sqlite3_stmt *q, const void *row)
{
    const measured_row *m = row;
    sqlite3_bind_text(q, 1, m->r->set, -1, SQLITE_STATIC);
    sqlite3_bind_int(q, 2, m->r->k);
    sqlite3_bind_text(q, 3, store_run_status_name(m->r->status), -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 4, m->key, -1, SQLITE_STATIC);
    sqlite3_bind_int64(q, 5, m->source);
    sqlite3_bind_text(q, 6, m->r->mode, -1, SQLITE_STATIC);
    sqlite3_bind_int(q, 7, m->r->repetition);
    sqlite3_bind_text(q, 8, m->stamp, -1, SQLITE_STATIC);
    store_bind_double_or_null(q, 9, m->r->window_s);
}

static void bind_run_member(sqlite3_stmt *q, const void *row, size_t slot)
{
    const kace_measured_member *mb = &((const measured_row *)row)->r->member[slot];
    sqlite3_bind_int(q, 4, mb->mps_pct);
    store_bind_double_or_null(q, 5, mb->throughput);
    store_bind_text_or_null(q, 6, mb->status);
    store_bind_double_or_null(q, 7, mb->cv);
    store_bind_text_or_null(q, 8, mb->detail);
}

/* A run already stored under its key is ignored here and refused by the caller. */
static const store_colocation_insert run_insert = {
    .head_sql = "INSERT OR IGNORE INTO runs(set_name, k, status, run_key, source_id, mode, repetition, measured_at, "
                "window_s) VALUES(?,?,?,?,?,?,?,?,?)",
    .bind_head = bind_run,
    .member_sql = "INSERT INTO run_members(run_id, slot, workload_id, mps_pct, throughput, status, throughput_cv, "
                  "detail) VALUES(?,?,?,?,?,?,?,?)",
    .bind_member = bind_run_member,
    .what = "run",
};

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
    if ((st = store_exec(ctx, s, "SAVEPOINT kace_measured;")))
        return st;
    /* The source: this GPU, kace-measure, today. */
    if ((st = store_prepare(ctx, s, "INSERT OR IGNORE INTO sources(gpu, tool, date, file) VALUES(?,'kace-measure',?,'measure')",
                      &q)))
        goto fail;
    store_bind_text_or_null(q, 1, r->gpu);
    sqlite3_bind_text(q, 2, date, -1, SQLITE_STATIC);
    if (sqlite3_step(q) != SQLITE_DONE) {
        st = store_fail(ctx, s, "insert source");
        goto fail;
    }
    sqlite3_finalize(q);
    if ((st = store_prepare(ctx, s, "SELECT id FROM sources WHERE gpu IS ? AND tool='kace-measure' AND date=? AND file='measure'",
                      &q)))
        goto fail;
    store_bind_text_or_null(q, 1, r->gpu);
    sqlite3_bind_text(q, 2, date, -1, SQLITE_STATIC);
    if (sqlite3_step(q) != SQLITE_ROW) {
        st = store_fail(ctx, s, "find source");
        goto fail;
    }
    sqlite3_int64 source = sqlite3_column_int64(q, 0);
    sqlite3_finalize(q);
    q = NULL;

    sqlite3_int64 wid[KACE_MAX_K], id = 0;
    for (int m = 0; m < r->k; m++)
        if ((st = ensure_workload(ctx, s, r->member[m].workload, &wid[m])))
            goto fail;
    const measured_row row = {r, key, source, stamp};
    bool inserted = false;
    if ((st = store_insert_colocation(ctx, s, &run_insert, &row, (size_t)r->k, wid, &id, &inserted)))
        goto fail;
    if (!inserted) {
        st = kace_fail(ctx, KACE_ERR_INVALID, "%s: run %s is already stored", s->path, key);
        goto fail;
    }
    if ((st = store_exec(ctx, s, "RELEASE kace_measured;")))
        goto fail_done;
    if (run_id)
        *run_id = (long long)id;
    return KACE_OK;
fail:
    sqlite3_finalize(q);
fail_done:
    store_exec(NULL, s, "ROLLBACK TO kace_measured; RELEASE kace_measured;");
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
    kace_status st = store_prepare(ctx, s,
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
        return store_fail(ctx, s, "read observation");
    if (n != o->n_members)
        *same = false;
    return KACE_OK;
}

static void bind_observation(sqlite3_stmt *q, const void *row)
{
    const kace_observed_colocation *o = row;
    sqlite3_bind_text(q, 1, o->origin, -1, SQLITE_STATIC);
    store_bind_text_or_null(q, 2, o->origin_id);
    sqlite3_bind_double(q, 3, o->observed_at);
    store_bind_text_or_null(q, 4, o->gpu);
    store_bind_text_or_null(q, 5, o->model);
    sqlite3_bind_int(q, 6, (int)o->n_members);
}

static void bind_observation_member(sqlite3_stmt *q, const void *row, size_t slot)
{
    const kace_observed_member *m = &((const kace_observed_colocation *)row)->members[slot];
    sqlite3_bind_double(q, 4, m->mps_pct);
    sqlite3_bind_double(q, 5, m->throughput);
    store_bind_double_or_null(q, 6, m->predicted);
}

static const store_colocation_insert observation_insert = {
    .head_sql = "INSERT INTO observations(origin, origin_id, observed_at, gpu, model, k) VALUES(?,?,?,?,?,?)",
    .bind_head = bind_observation,
    .member_sql = "INSERT INTO observation_members(observation_id, slot, workload_id, mps_pct, throughput, predicted) "
                  "VALUES(?,?,?,?,?,?)",
    .bind_member = bind_observation_member,
    .what = "observation",
};

kace_status kace_store_add_observation(kace_ctx *ctx, kace_store *s, const kace_observed_colocation *o, bool *added)
{
    if (added)
        *added = false;
    kace_status st = check_observation(ctx, o);
    if (st)
        return st;
    sqlite3_int64 wid[KACE_MAX_K];
    sqlite3_stmt *q = NULL;
    if ((st = store_exec(ctx, s, "SAVEPOINT kace_observe;")))
        return st;
    /* Known workloads only: an observation of an unprofiled job teaches nothing. */
    if ((st = store_prepare(ctx, s, "SELECT id FROM workloads WHERE name=?", &q)))
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
            st = store_fail(ctx, s, "find workload");
            goto fail;
        }
        wid[i] = sqlite3_column_int64(q, 0);
    }
    sqlite3_finalize(q);
    q = NULL;
    if (o->origin_id) {
        if ((st = store_prepare(ctx, s, "SELECT id FROM observations WHERE origin=? AND origin_id=?", &q)))
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
            return store_exec(ctx, s, "RELEASE kace_observe;");
        }
        if (rc != SQLITE_DONE) {
            st = store_fail(ctx, s, "find observation");
            goto fail;
        }
        sqlite3_finalize(q);
        q = NULL;
    }
    sqlite3_int64 id = 0;
    bool inserted = false;
    if ((st = store_insert_colocation(ctx, s, &observation_insert, o, o->n_members, wid, &id, &inserted)))
        goto fail;
    if ((st = store_exec(ctx, s, "RELEASE kace_observe;")))
        goto fail;
    if (added)
        *added = true;
    return KACE_OK;
fail:
    sqlite3_finalize(q);
    store_exec(NULL, s, "ROLLBACK TO kace_observe; RELEASE kace_observe;");
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
    kace_status st = store_prepare(ctx, s,
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
        st = store_fail(ctx, s, "read observations");
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
