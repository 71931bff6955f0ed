/* What the store's files share (lib/store/store_*.c): the connection, its
 * error and statement helpers, and the one routine that inserts a
 * colocation with its members (measured runs and observations). */
#ifndef KACE_STORE_INTERNAL_H
#define KACE_STORE_INTERNAL_H

#include <sqlite3.h>

#include "kace/store.h"

struct kace_store {
    sqlite3 *db;
    char path[1024];
    bool read_only; /* opened with KACE_STORE_READ_ONLY: no migration, no writes */
    int older_version; /* read only, an older schema: read through an upgraded copy in memory; else 0 */
};

/* The store's pages are read through a memory map of this size (PRAGMA
 * mmap_size), except during an import. */
#define STORE_MMAP_PRAGMA "PRAGMA mmap_size=268435456;"

/* Fails with KACE_ERR_STORE: "PATH: what: SQLite's message". */
kace_status store_fail(kace_ctx *ctx, kace_store *s, const char *what);
/* Runs SQL (several statements allowed); ctx NULL: failure unreported. */
kace_status store_exec(kace_ctx *ctx, kace_store *s, const char *sql);
kace_status store_prepare(kace_ctx *ctx, kace_store *s, const char *sql, sqlite3_stmt **q);

void store_bind_text_or_null(sqlite3_stmt *q, int i, const char *v);
/* NaN (a missing value) as NULL. */
void store_bind_number_or_null(sqlite3_stmt *q, int i, double v);
/* Any non-finite value as NULL. */
void store_bind_double_or_null(sqlite3_stmt *q, int i, double v);
const char *store_run_status_name(kace_run_status st);

/* A colocation and its members, as measured runs and observations are
 * stored: head_sql inserts the colocation (bind_head binds its values),
 * member_sql one member: ?1 the colocation's id, ?2 the slot, ?3 the
 * member's workload id, from ?4 what bind_member binds. */
typedef struct store_colocation_insert {
    const char *head_sql;
    void (*bind_head)(sqlite3_stmt *q, const void *row);
    const char *member_sql;
    void (*bind_member)(sqlite3_stmt *q, const void *row, size_t slot);
    const char *what; /* "run", "observation": for messages */
} store_colocation_insert;

/* Inserts row (head, then members 0..n_members with workload_id[]), inside
 * the caller's savepoint. *inserted false when the head was ignored (an
 * INSERT OR IGNORE that found it stored): no members are written then. */
kace_status store_insert_colocation(kace_ctx *ctx, kace_store *s, const store_colocation_insert *ins,
                                    const void *row, size_t n_members, const sqlite3_int64 *workload_id,
                                    sqlite3_int64 *id, bool *inserted);

/* CSV cells for the store's exports (store_export.c): a field quoted when it
 * holds a comma, a quote or a line break (NULL: empty); a double in the
 * fewest digits that read back as it (NaN: empty). */
struct text_buf;
void csv_field(struct text_buf *t, const char *s);
void csv_number(struct text_buf *t, double v);

#endif
