/* The store: named models and the default. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "kace/predictor.h"
#include "store/store_internal.h"

kace_status kace_store_save_model(kace_ctx *ctx, kace_store *s, const char *name, const kace_model *m)
{
    char *text = NULL;
    kace_status st = kace_model_to_text(ctx, m, &text);
    if (st)
        return st;
    sqlite3_stmt *q = NULL;
    if ((st = store_prepare(ctx, s, "INSERT OR REPLACE INTO models(name, kind, created, body) VALUES(?,?,?,?)", &q))) {
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
        st = store_fail(ctx, s, "save model");
    sqlite3_finalize(q);
    free(text);
    return st;
}

kace_status kace_store_load_model(kace_ctx *ctx, kace_store *s, const char *name, kace_model **out)
{
    *out = NULL;
    sqlite3_stmt *q = NULL;
    kace_status st;
    if ((st = store_prepare(ctx, s, "SELECT body FROM models WHERE name=?", &q)))
        return st;
    sqlite3_bind_text(q, 1, name, -1, SQLITE_STATIC);
    int rc = sqlite3_step(q);
    if (rc == SQLITE_ROW) {
        const char *body = (const char *)sqlite3_column_text(q, 0);
        st = kace_model_from_text(ctx, body, (size_t)sqlite3_column_bytes(q, 0), "store", out);
    } else if (rc == SQLITE_DONE) {
        st = kace_fail(ctx, KACE_ERR_NOT_FOUND, "%s: no model named '%s' (run kace train first)", s->path, name);
    } else {
        st = store_fail(ctx, s, "load model");
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
    if ((st = store_prepare(ctx, s,
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
        st = store_fail(ctx, s, "promote model");
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
    if ((st = store_prepare(ctx, s,
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
        st = store_fail(ctx, s, "list models");
    sqlite3_finalize(q);
    if (st) {
        free(*out);
        *out = NULL;
        *n = 0;
    }
    return st;
}
