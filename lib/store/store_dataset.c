/* kace export --dataset: a device campaign's store as the dataset folder kept
 * in the repository (data/h200): the CSV files kace import reads, sorted by
 * what they hold (profiles/, colocations/), the campaign's own records
 * (campaign/runs.csv, spread.csv, visits.tsv) and a README generated from
 * them, so that the folder is exactly what its store gives. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kace/kace.h"
#include "base/text_buf.h"
#include "kace/import.h"
#include "kace/store_export.h"
#include "store/store_internal.h"

/* ---- small helpers ------------------------------------------------------ */

static double column_number(sqlite3_stmt *q, int i)
{
    return sqlite3_column_type(q, i) == SQLITE_NULL ? NAN : sqlite3_column_double(q, i);
}

static char *column_text(sqlite3_stmt *q, int i)
{
    const unsigned char *s = sqlite3_column_text(q, i);
    return strdup(s ? (const char *)s : "");
}

static kace_status write_out(kace_ctx *ctx, const char *dir, const char *name, text_buf *t, size_t *files)
{
    if (t->oom)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    kace_status st = kace_write_file_durable(ctx, path, t->p ? t->p : "", t->len);
    if (!st && files)
        (*files)++;
    return st;
}

/* ---- profiles ----------------------------------------------------------- */

typedef struct prof_row {
    char *name, *metric;
    double value; /* NaN: known missing */
} prof_row;

typedef struct profiles {
    prof_row *rows;
    size_t n;
    size_t *first; /* rows of workload i: [first[i], first[i + 1]) */
    size_t n_names;
} profiles;

static void profiles_free(profiles *p)
{
    for (size_t i = 0; i < p->n; i++) {
        free(p->rows[i].name);
        free(p->rows[i].metric);
    }
    free(p->rows);
    free(p->first);
}

static kace_status load_profiles(kace_ctx *ctx, kace_store *s, profiles *p)
{
    sqlite3_stmt *q = NULL;
    kace_status st = store_prepare(ctx, s,
                                   "SELECT w.name, p.metric, p.value FROM profiles p JOIN workloads w "
                                   "ON w.id = p.workload_id ORDER BY w.name, p.metric",
                                   &q);
    size_t cap = 0;
    int rc;
    while (!st && (rc = sqlite3_step(q)) == SQLITE_ROW) {
        if (p->n == cap) {
            cap = cap ? 2 * cap : 64;
            prof_row *r = realloc(p->rows, cap * sizeof *r);
            if (!r) {
                st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
                break;
            }
            p->rows = r;
        }
        prof_row *r = &p->rows[p->n++];
        r->name = column_text(q, 0);
        r->metric = column_text(q, 1);
        r->value = column_number(q, 2);
        if (!r->name || !r->metric)
            st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    }
    if (!st && rc != SQLITE_DONE)
        st = store_fail(ctx, s, "reading the profiles");
    sqlite3_finalize(q);
    if (st)
        return st;
    if (!(p->first = malloc((p->n + 1) * sizeof *p->first)))
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < p->n; i++)
        if (i == 0 || strcmp(p->rows[i].name, p->rows[i - 1].name) != 0)
            p->first[p->n_names++] = i;
    p->first[p->n_names] = p->n;
    return KACE_OK;
}

/* The value of workload i's metric; false when the store holds none. */
static bool prof_get(const profiles *p, size_t i, const char *metric, double *v)
{
    for (size_t r = p->first[i]; r < p->first[i + 1]; r++)
        if (strcmp(p->rows[r].metric, metric) == 0) {
            *v = p->rows[r].value;
            return true;
        }
    return false;
}

static bool prof_has(const profiles *p, size_t i, const char *metric)
{
    double v;
    return prof_get(p, i, metric, &v);
}

static bool any_has(const profiles *p, const char *metric)
{
    for (size_t i = 0; i < p->n_names; i++)
        if (prof_has(p, i, metric))
            return true;
    return false;
}

static void prof_cell(text_buf *t, const profiles *p, size_t i, const char *metric)
{
    double v;
    if (prof_get(p, i, metric, &v))
        csv_number(t, v);
}

static const char *const kernel_cols[] = {"Threads",   "Compute (SM) Throughput", "DRAM Throughput",
                                          "Memory Throughput", "Registers", "Static Shared Memory"};
static const char *const kernel_more[] = {"Short_Kernel", "avg_Thread", "Long_Kernel", "ave_Kernel_Length",
                                          "long/short_Ratio"};
static const char *const system_cols[] = {"sm%", "mem%", "memcap"};
static const char *const system_more[] = {"exclusive_throughput_sd", "pcie_tx_MBps", "pcie_rx_MBps", "power_W",
                                          "sm_clock_MHz", "CPU%", "MainMem%"};
#define N_OF(a) (sizeof(a) / sizeof(a)[0])

/* The exclusive throughput (Exclusive100), the paper's: alone under MPS at
 * 100%, measured in the pool (exclusive_mps100) where the store has it,
 * else the profile's clean run, alone without MPS (exclusive_throughput).
 * *mps says which; false when the workload has neither. */
static bool exclusive100(const profiles *p, size_t i, double *v, bool *mps)
{
    *mps = prof_get(p, i, "exclusive_mps100", v);
    return *mps || prof_get(p, i, "exclusive_throughput", v);
}

/* The clean run's exclusive throughput, alone without MPS: exclusive_nomps
 * once a dataset with that column was imported (its exclusive_throughput is
 * then the dataset's Exclusive100), else the profile's exclusive_throughput. */
static bool exclusive_nomps(const profiles *p, size_t i, double *v)
{
    return prof_get(p, i, "exclusive_nomps", v) || prof_get(p, i, "exclusive_throughput", v);
}

/* system.csv's rows: the workloads profiled alone (a clean run). */
static bool system_row(const profiles *p, size_t i)
{
    return prof_has(p, i, "exclusive_throughput");
}

/* Whether system.csv has the exclusive_nomps column: once a workload's
 * Exclusive100 is not its clean run (or a dataset with it was imported). */
static bool nomps_column(const profiles *p)
{
    for (size_t i = 0; i < p->n_names; i++)
        if (system_row(p, i) && (prof_has(p, i, "exclusive_mps100") || prof_has(p, i, "exclusive_nomps")))
            return true;
    return false;
}

static kace_status write_profiles(kace_ctx *ctx, const profiles *p, const char *dir, kace_dataset_stats *stats)
{
    const char *cols[N_OF(kernel_cols) + N_OF(kernel_more)];
    size_t n_cols = 0;
    for (size_t c = 0; c < N_OF(kernel_cols); c++)
        cols[n_cols++] = kernel_cols[c];
    for (size_t c = 0; c < N_OF(kernel_more); c++)
        if (any_has(p, kernel_more[c]))
            cols[n_cols++] = kernel_more[c];
    text_buf t = {0};
    for (size_t c = 0; c < n_cols; c++)
        tb_printf(&t, "%s,", cols[c]);
    tb_printf(&t, "Type\n");
    for (size_t i = 0; i < p->n_names; i++) {
        bool kernel = false;
        for (size_t c = 0; c < N_OF(kernel_cols); c++)
            kernel = kernel || prof_has(p, i, kernel_cols[c]);
        if (!kernel)
            continue;
        for (size_t c = 0; c < n_cols; c++) {
            prof_cell(&t, p, i, cols[c]);
            tb_append(&t, ",", 1);
        }
        csv_field(&t, p->rows[p->first[i]].name);
        tb_append(&t, "\n", 1);
        stats->kernel_profiles++;
    }
    /* A file of no rows would not import: none is written. */
    kace_status st = stats->kernel_profiles ? write_out(ctx, dir, "profiles/kernel.csv", &t, &stats->files) : KACE_OK;
    free(t.p);
    if (st)
        return st;

    t = (text_buf){0};
    bool nomps = nomps_column(p);
    tb_printf(&t, "Type,Exclusive100,sm%%,mem%%,memcap%s", nomps ? ",exclusive_nomps" : "");
    for (size_t c = 0; c < N_OF(system_more); c++)
        if (any_has(p, system_more[c]))
            tb_printf(&t, ",%s", system_more[c]);
    tb_append(&t, "\n", 1);
    for (size_t i = 0; i < p->n_names; i++) {
        if (!system_row(p, i))
            continue;
        csv_field(&t, p->rows[p->first[i]].name);
        double v;
        bool mps;
        tb_append(&t, ",", 1);
        if (exclusive100(p, i, &v, &mps))
            csv_number(&t, v);
        for (size_t c = 0; c < N_OF(system_cols); c++) {
            tb_append(&t, ",", 1);
            prof_cell(&t, p, i, system_cols[c]);
        }
        if (nomps) {
            tb_append(&t, ",", 1);
            if (exclusive_nomps(p, i, &v))
                csv_number(&t, v);
        }
        for (size_t c = 0; c < N_OF(system_more); c++)
            if (any_has(p, system_more[c])) {
                tb_append(&t, ",", 1);
                prof_cell(&t, p, i, system_more[c]);
            }
        tb_append(&t, "\n", 1);
        stats->workloads++;
    }
    st = stats->workloads ? write_out(ctx, dir, "profiles/system.csv", &t, &stats->files) : KACE_OK;
    free(t.p);
    if (st)
        return st;

    /* Alone under MPS at a share (kace measure W --mps-pct P stores exclusive_mps<P>):
     * a column per share measured. */
    bool pct[101] = {false};
    size_t n_pct = 0;
    for (size_t r = 0; r < p->n; r++) {
        char *end;
        if (strncmp(p->rows[r].metric, "exclusive_mps", 13) != 0)
            continue;
        long v = strtol(p->rows[r].metric + 13, &end, 10);
        if (end != p->rows[r].metric + 13 && !*end && v >= 1 && v <= 100 && !pct[v]) {
            pct[v] = true;
            n_pct++;
        }
    }
    if (!n_pct)
        return KACE_OK;
    t = (text_buf){0};
    tb_printf(&t, "workload");
    for (int v = 1; v <= 100; v++)
        if (pct[v])
            tb_printf(&t, ",%d", v);
    tb_append(&t, "\n", 1);
    for (size_t i = 0; i < p->n_names; i++) {
        bool any = false;
        char m[32];
        for (int v = 1; v <= 100 && !any; v++) {
            snprintf(m, sizeof m, "exclusive_mps%d", v);
            any = pct[v] && prof_has(p, i, m);
        }
        if (!any)
            continue;
        csv_field(&t, p->rows[p->first[i]].name);
        for (int v = 1; v <= 100; v++)
            if (pct[v]) {
                snprintf(m, sizeof m, "exclusive_mps%d", v);
                tb_append(&t, ",", 1);
                prof_cell(&t, p, i, m);
            }
        tb_append(&t, "\n", 1);
        stats->exclusive_curves++;
    }
    st = write_out(ctx, dir, "profiles/exclusive-by-mps.csv", &t, &stats->files);
    free(t.p);
    return st;
}

/* ---- measured runs -------------------------------------------------------- */

typedef struct member_row {
    long long run;
    char *set, *mode, *run_status, *measured_at, *name, *status, *detail, *run_key;
    long long repetition, slot, pct;
    double window_s, throughput, cv;
} member_row;

typedef struct runs {
    member_row *m;
    size_t n;
} runs;

static void runs_free(runs *r)
{
    for (size_t i = 0; i < r->n; i++) {
        member_row *m = &r->m[i];
        free(m->set), free(m->mode), free(m->run_status), free(m->measured_at);
        free(m->name), free(m->status), free(m->detail), free(m->run_key);
    }
    free(r->m);
}

static kace_status load_runs(kace_ctx *ctx, kace_store *s, runs *r)
{
    sqlite3_stmt *q = NULL;
    kace_status st = store_prepare(
        ctx, s,
        "SELECT r.id, r.set_name, r.mode, r.repetition, r.status, r.measured_at, r.window_s, m.slot, w.name, "
        "m.mps_pct, m.throughput, m.throughput_cv, m.status, m.detail, r.run_key FROM runs r JOIN run_members m "
        "ON m.run_id = r.id JOIN workloads w ON w.id = m.workload_id WHERE r.mode IS NOT NULL ORDER BY r.id, m.slot",
        &q);
    size_t cap = 0;
    int rc;
    while (!st && (rc = sqlite3_step(q)) == SQLITE_ROW) {
        if (r->n == cap) {
            cap = cap ? 2 * cap : 64;
            member_row *m = realloc(r->m, cap * sizeof *m);
            if (!m) {
                st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
                break;
            }
            r->m = m;
        }
        member_row *m = &r->m[r->n++];
        *m = (member_row){.run = sqlite3_column_int64(q, 0),
                          .set = column_text(q, 1),
                          .mode = column_text(q, 2),
                          .repetition = sqlite3_column_int64(q, 3),
                          .run_status = column_text(q, 4),
                          .measured_at = column_text(q, 5),
                          .window_s = column_number(q, 6),
                          .slot = sqlite3_column_int64(q, 7),
                          .name = column_text(q, 8),
                          .pct = sqlite3_column_int64(q, 9),
                          .throughput = column_number(q, 10),
                          .cv = column_number(q, 11),
                          .status = column_text(q, 12),
                          .detail = column_text(q, 13),
                          .run_key = column_text(q, 14)};
        if (!m->set || !m->mode || !m->run_status || !m->measured_at || !m->name || !m->status || !m->detail ||
            !m->run_key)
            st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    }
    if (!st && rc != SQLITE_DONE)
        st = store_fail(ctx, s, "reading the measured runs");
    sqlite3_finalize(q);
    return st;
}

static kace_status write_runs(kace_ctx *ctx, const runs *r, const char *dir, kace_dataset_stats *stats)
{
    text_buf t = {0};
    tb_printf(&t, "run,set,mode,repetition,run_status,measured_at,window_s,slot,workload,mps_pct,throughput,"
                  "throughput_cv,status,detail\n");
    for (size_t i = 0; i < r->n; i++) {
        const member_row *m = &r->m[i];
        tb_printf(&t, "%lld,", m->run);
        csv_field(&t, m->set);
        tb_append(&t, ",", 1);
        csv_field(&t, m->mode);
        tb_printf(&t, ",%lld,", m->repetition);
        csv_field(&t, m->run_status);
        tb_append(&t, ",", 1);
        csv_field(&t, m->measured_at);
        tb_append(&t, ",", 1);
        csv_number(&t, m->window_s);
        tb_printf(&t, ",%lld,", m->slot);
        csv_field(&t, m->name);
        tb_printf(&t, ",%lld,", m->pct);
        csv_number(&t, m->throughput);
        tb_append(&t, ",", 1);
        csv_number(&t, m->cv);
        tb_append(&t, ",", 1);
        csv_field(&t, m->status);
        tb_append(&t, ",", 1);
        csv_field(&t, m->detail);
        tb_append(&t, "\n", 1);
        if (i == 0 || m->run != r->m[i - 1].run) {
            stats->runs++;
            stats->failed_runs += strcmp(m->run_status, "ok") != 0;
        }
    }
    kace_status st = write_out(ctx, dir, "campaign/runs.csv", &t, &stats->files);
    free(t.p);
    return st;
}

/* ---- colocations: the mean over each one's ok repetitions ----------------- */

/* One colocation (mode, members and their shares, whatever set measured it):
 * its repetitions, each member's rows in the slot order of the first. */
typedef struct coloc {
    char kind[32];
    char *identity;    /* mode and sorted "name@pct" words */
    const char *key;   /* the first repetition's run key less its "|#R" */
    size_t k, n_reps, order;
    const member_row **reps; /* n_reps * k */
} coloc;

static char *base_key(const member_row *m)
{
    char tail[32];
    snprintf(tail, sizeof tail, "|#%lld", m->repetition);
    char *key = strdup(m->run_key);
    if (!key)
        return NULL;
    char *at = strstr(key, tail);
    if (at)
        memmove(at, at + strlen(tail), strlen(at + strlen(tail)) + 1);
    return key;
}

static int cmp_member_ptr(const void *a, const void *b)
{
    const member_row *x = *(const member_row *const *)a, *y = *(const member_row *const *)b;
    int c = strcmp(x->name, y->name);
    return c ? c : (x->pct > y->pct) - (x->pct < y->pct);
}

static char *identity_of(const member_row *first, size_t k)
{
    const member_row *sorted[64];
    if (k > 64)
        return NULL;
    for (size_t i = 0; i < k; i++)
        sorted[i] = &first[i];
    qsort(sorted, k, sizeof *sorted, cmp_member_ptr);
    text_buf t = {0};
    tb_printf(&t, "%s", first->mode);
    for (size_t i = 0; i < k; i++)
        tb_printf(&t, " %s@%lld", sorted[i]->name, sorted[i]->pct);
    if (t.oom) {
        free(t.p);
        return NULL;
    }
    return t.p;
}

static void kind_of(const member_row *first, size_t k, char *kind, size_t size)
{
    bool all100 = true;
    for (size_t i = 0; i < k; i++)
        all100 = all100 && first[i].pct == 100;
    bool mps = strcmp(first->mode, "mps") == 0;
    const char *named = !mps ? (k == 2 ? "timeslice-pairs" : NULL)
                        : all100 ? (k == 2 ? "pairs" : k == 3 ? "triples" : NULL)
                                 : (k == 2 ? "mps-splits" : NULL);
    if (named)
        snprintf(kind, size, "%s", named);
    else
        snprintf(kind, size, "%s%zu", !mps ? "timeslice-k" : all100 ? "k" : "mps-splits-k", k % 1000);
}

typedef struct colocs {
    coloc *c;
    size_t n;
    char **keys; /* owned base keys */
} colocs;

static void colocs_free(colocs *cs)
{
    for (size_t i = 0; i < cs->n; i++) {
        free(cs->c[i].identity);
        free(cs->c[i].reps);
        free(cs->keys[i]);
    }
    free(cs->c);
    free(cs->keys);
}

static kace_status add_rep(kace_ctx *ctx, colocs *cs, const member_row *first, size_t k)
{
    char kind[32];
    kind_of(first, k, kind, sizeof kind);
    char *id = identity_of(first, k);
    if (!id)
        return kace_fail(ctx, k > 64 ? KACE_ERR_INVALID : KACE_ERR_NOMEM, "run %lld: %zu members", first->run, k);
    coloc *c = NULL;
    for (size_t i = 0; i < cs->n && !c; i++)
        if (strcmp(cs->c[i].kind, kind) == 0 && strcmp(cs->c[i].identity, id) == 0)
            c = &cs->c[i];
    if (c) {
        free(id);
    } else {
        coloc *more = realloc(cs->c, (cs->n + 1) * sizeof *more);
        char **keys = more ? realloc(cs->keys, (cs->n + 1) * sizeof *keys) : NULL;
        if (more)
            cs->c = more;
        if (keys)
            cs->keys = keys;
        char *key = keys ? base_key(first) : NULL;
        if (!key) {
            free(id);
            return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
        }
        c = &cs->c[cs->n];
        *c = (coloc){.identity = id, .key = key, .k = k, .order = cs->n};
        snprintf(c->kind, sizeof c->kind, "%s", kind);
        cs->keys[cs->n++] = key;
    }
    const member_row **reps = realloc(c->reps, (c->n_reps + 1) * k * sizeof *reps);
    if (!reps)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    c->reps = reps;
    const member_row **row = &reps[c->n_reps * k];
    bool used[64] = {false};
    for (size_t i = 0; i < k; i++) {
        /* The first repetition's slot order: the same workloads and shares, maybe measured as B + A. */
        const member_row *want = c->n_reps ? reps[i] : &first[i];
        for (size_t j = 0; j < k; j++)
            if (!used[j] && strcmp(first[j].name, want->name) == 0 && first[j].pct == want->pct) {
                used[j] = true;
                row[i] = &first[j];
                break;
            }
    }
    c->n_reps++;
    return KACE_OK;
}

static kace_status group_colocs(kace_ctx *ctx, const runs *r, colocs *cs)
{
    for (size_t i = 0; i < r->n;) {
        size_t j = i;
        while (j < r->n && r->m[j].run == r->m[i].run)
            j++;
        /* A solo run is a profile value (exclusive-by-mps.csv); a failed run is in runs.csv only. */
        if (j - i >= 2 && strcmp(r->m[i].run_status, "ok") == 0) {
            kace_status st = add_rep(ctx, cs, &r->m[i], j - i);
            if (st)
                return st;
        }
        i = j;
    }
    return KACE_OK;
}

static double rep_mean(const coloc *c, size_t slot, size_t *n)
{
    double sum = 0;
    *n = 0;
    for (size_t r = 0; r < c->n_reps; r++) {
        double v = c->reps[r * c->k + slot]->throughput;
        if (!isnan(v)) {
            sum += v;
            (*n)++;
        }
    }
    return *n ? sum / (double)*n : NAN;
}

static int cmp_coloc(const void *a, const void *b)
{
    const coloc *x = a, *y = b;
    int c = strcmp(x->reps[0]->name, y->reps[0]->name);
    if (!c)
        c = strcmp(x->reps[1]->name, y->reps[1]->name);
    return c ? c : (x->order > y->order) - (x->order < y->order);
}

static kace_status write_colocs(kace_ctx *ctx, colocs *cs, const char *dir, kace_dataset_stats *stats)
{
    if (cs->n)
        qsort(cs->c, cs->n, sizeof *cs->c, cmp_coloc);
    kace_status st = KACE_OK;
    bool *done = calloc(cs->n + 1, sizeof *done);
    if (!done)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < cs->n && !st; i++) {
        if (done[i])
            continue;
        const char *kind = cs->c[i].kind;
        size_t k = cs->c[i].k;
        text_buf t = {0};
        for (size_t s = 1; s <= k; s++)
            tb_printf(&t, "workload%zu,", s);
        for (size_t s = 1; s <= k; s++)
            tb_printf(&t, "w%zuthroughput,", s);
        for (size_t s = 1; s <= k; s++)
            tb_printf(&t, "w%zumps_pct%s", s, s == k ? "\n" : ",");
        for (size_t j = i; j < cs->n; j++) {
            const coloc *c = &cs->c[j];
            if (strcmp(c->kind, kind) != 0)
                continue;
            done[j] = true;
            for (size_t s = 0; s < k; s++) {
                csv_field(&t, c->reps[s]->name);
                tb_append(&t, ",", 1);
            }
            for (size_t s = 0; s < k; s++) {
                size_t n;
                csv_number(&t, rep_mean(c, s, &n));
                tb_append(&t, ",", 1);
            }
            for (size_t s = 0; s < k; s++)
                tb_printf(&t, "%lld%s", c->reps[s]->pct, s + 1 == k ? "\n" : ",");
            stats->colocations++;
        }
        char name[64];
        snprintf(name, sizeof name, "colocations/%s.csv", kind);
        st = write_out(ctx, dir, name, &t, &stats->files);
        free(t.p);
    }
    free(done);
    return st;
}

/* ---- spread: each member of each colocation measured ok >= 2 times -------- */

typedef struct spread_row {
    const char *key, *name;
    size_t n;
    double mean, sd, cv;
    size_t order;
} spread_row;

static int cmp_spread(const void *a, const void *b)
{
    const spread_row *x = a, *y = b;
    double cx = isnan(x->cv) ? 0 : x->cv, cy = isnan(y->cv) ? 0 : y->cv;
    if (cx != cy)
        return cx < cy ? 1 : -1;
    return (x->order > y->order) - (x->order < y->order);
}

static kace_status write_spread(kace_ctx *ctx, const colocs *cs, const char *dir, spread_row **out, size_t *n_out,
                                kace_dataset_stats *stats)
{
    size_t cap = 0, n = 0;
    spread_row *rows = NULL;
    for (size_t i = 0; i < cs->n; i++) {
        const coloc *c = &cs->c[i];
        if (c->n_reps < 2)
            continue;
        if (c->n_reps >= 3)
            stats->repeated++;
        for (size_t s = 0; s < c->k; s++) {
            size_t m;
            double mean = rep_mean(c, s, &m);
            if (m < 2)
                continue;
            double sq = 0;
            for (size_t r = 0; r < c->n_reps; r++) {
                double v = c->reps[r * c->k + s]->throughput;
                if (!isnan(v))
                    sq += v * v;
            }
            double var = sq / (double)m - mean * mean;
            double sd = sqrt(var > 0 ? var : 0);
            if (n == cap) {
                cap = cap ? 2 * cap : 32;
                spread_row *more = realloc(rows, cap * sizeof *more);
                if (!more) {
                    free(rows);
                    return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
                }
                rows = more;
            }
            rows[n] = (spread_row){.key = c->key, .name = c->reps[s]->name, .n = m, .mean = mean, .sd = sd,
                                   .cv = mean != 0 ? sd / mean : NAN, .order = n};
            n++;
        }
    }
    if (n)
        qsort(rows, n, sizeof *rows, cmp_spread);
    text_buf t = {0};
    tb_printf(&t, "colocation,workload,repetitions,mean,sd,cv\n");
    for (size_t i = 0; i < n; i++) {
        csv_field(&t, rows[i].key);
        tb_append(&t, ",", 1);
        csv_field(&t, rows[i].name);
        tb_printf(&t, ",%zu,", rows[i].n);
        csv_number(&t, rows[i].mean);
        tb_append(&t, ",", 1);
        csv_number(&t, rows[i].sd);
        tb_append(&t, ",", 1);
        csv_number(&t, rows[i].cv);
        tb_append(&t, "\n", 1);
    }
    kace_status st = write_out(ctx, dir, "campaign/spread.csv", &t, &stats->files);
    free(t.p);
    if (st) {
        free(rows);
        return st;
    }
    *out = rows;
    *n_out = n;
    return KACE_OK;
}

/* ---- kace against Nsight Compute ------------------------------------------- */

/* The engine's ncu step stores ncu's CSV export with each try (campaign_ncu,
 * schema 6). Each workload's latest stored export is reduced as kace
 * import-ncu reduces one (duration-weighted means) and set beside the
 * workload's own profile: ncu/compare.csv, one row per kernel metric, and the
 * README's table. */
#define NCU_TOLERANCE 0.10

static kace_status has_table(kace_ctx *ctx, kace_store *s, const char *table, bool *has)
{
    sqlite3_stmt *q = NULL;
    kace_status st = store_prepare(ctx, s, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", &q);
    if (st)
        return st;
    sqlite3_bind_text(q, 1, table, -1, SQLITE_STATIC);
    *has = sqlite3_step(q) == SQLITE_ROW;
    sqlite3_finalize(q);
    return KACE_OK;
}

static bool batch_value(const kace_import_batch *b, const char *metric, double *v)
{
    for (size_t i = 0; i < b->n_values; i++)
        if (strcmp(b->values[i].metric, metric) == 0 && !isnan(b->values[i].value)) {
            *v = b->values[i].value;
            return true;
        }
    return false;
}

static kace_status write_ncu(kace_ctx *ctx, kace_store *s, const profiles *p, const char *dir, text_buf *readme,
                             kace_dataset_stats *stats)
{
    bool has = false;
    kace_status st = has_table(ctx, s, "campaign_ncu", &has);
    sqlite3_stmt *q = NULL;
    if (!st && has)
        st = store_prepare(ctx, s,
                           "SELECT workload, output FROM campaign_ncu WHERE id IN (SELECT max(id) FROM campaign_ncu "
                           "WHERE status = 'ok' AND output IS NOT NULL GROUP BY workload) ORDER BY workload",
                           &q);
    text_buf csv = {0}, table = {0};
    size_t judged = 0, within = 0, unread = 0;
    tb_printf(&csv, "workload,metric,kace,ncu,rel_diff,within_10pct\n");
    tb_printf(&table, "| workload |");
    for (size_t c = 0; c < N_OF(kernel_cols); c++)
        tb_printf(&table, " %s |", kernel_cols[c]);
    tb_printf(&table, "\n|---|");
    for (size_t c = 0; c < N_OF(kernel_cols); c++)
        tb_printf(&table, "---|");
    tb_append(&table, "\n", 1);
    int rc = SQLITE_DONE;
    while (!st && q && (rc = sqlite3_step(q)) == SQLITE_ROW) {
        const char *name = (const char *)sqlite3_column_text(q, 0);
        const char *out = (const char *)sqlite3_column_text(q, 1);
        kace_import_batch *b = calloc(1, sizeof *b);
        if (!b) {
            st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
            break;
        }
        /* An export ncu cut short is not a comparison: the workload is counted apart. */
        if (!name || !out || kace_ncu_parse_buffer(ctx, out, strlen(out), "campaign_ncu", name, b) != KACE_OK) {
            unread++;
            kace_import_batch_free(&b);
            continue;
        }
        size_t i = 0;
        while (i < p->n_names && strcmp(p->rows[p->first[i]].name, name) != 0)
            i++;
        tb_printf(&table, "| `%s` |", name);
        for (size_t c = 0; c < N_OF(kernel_cols); c++) {
            double x = NAN, y = NAN, rel = NAN;
            if (i < p->n_names)
                prof_get(p, i, kernel_cols[c], &x);
            batch_value(b, kernel_cols[c], &y);
            if (!isnan(x) && !isnan(y))
                rel = y != 0 ? (x - y) / y : x == 0 ? 0 : NAN;
            bool ok = !isnan(rel) && fabs(rel) <= NCU_TOLERANCE;
            csv_field(&csv, name);
            tb_printf(&csv, ",%s,", kernel_cols[c]);
            csv_number(&csv, x);
            tb_append(&csv, ",", 1);
            csv_number(&csv, y);
            tb_append(&csv, ",", 1);
            csv_number(&csv, rel);
            tb_printf(&csv, ",%s\n", isnan(x) || isnan(y) ? "" : ok ? "yes" : "no");
            if (isnan(x) || isnan(y))
                tb_printf(&table, " missing |");
            else if (isnan(rel))
                tb_printf(&table, " **ncu 0** |");
            else
                tb_printf(&table, ok ? " %+.1f%% |" : " **%+.1f%%** |", 100 * rel);
            judged += !isnan(x) && !isnan(y);
            within += ok;
        }
        tb_append(&table, "\n", 1);
        stats->ncu_workloads++;
        kace_import_batch_free(&b);
    }
    if (!st && q && rc != SQLITE_DONE)
        st = store_fail(ctx, s, "reading the ncu tries");
    sqlite3_finalize(q);
    if (!st && stats->ncu_workloads) {
        char sub[4096];
        snprintf(sub, sizeof sub, "%s/ncu", dir);
        if (mkdir(sub, 0755) != 0 && errno != EEXIST)
            st = kace_fail(ctx, KACE_ERR_IO, "%s: cannot create the folder: %s", sub, strerror(errno));
        if (!st)
            st = write_out(ctx, dir, "ncu/compare.csv", &csv, &stats->files);
    }
    if (!st) {
        if (stats->ncu_workloads) {
            tb_printf(readme, "kace's value minus ncu's, relative to ncu's (`ncu/compare.csv`), for each workload's "
                              "latest ncu\nexport the campaign stored; **bold**: outside 10%%.\n\n");
            tb_append(readme, table.p, table.len);
            tb_printf(readme, "\n%zu of %zu metric values within 10%% of ncu's.\n", within, judged);
        } else {
            tb_printf(readme, "Not measured yet: the campaign's ncu step (`--ncu`, last, with time left) has stored no "
                              "export.\n");
        }
        if (unread)
            tb_printf(readme, "%zu stored export%s could not be read as an ncu CSV.\n", unread, unread == 1 ? "" : "s");
    }
    free(csv.p);
    free(table.p);
    return st;
}

/* ---- README ------------------------------------------------------------- */

/* How a member's process ended (kace_proc_ending's phrases; the first match
 * counts: a group killed by SIGKILL is counted so even when its leader
 * stopped at its report). */
static const struct {
    const char *phrase, *words;
} endings[] = {
    {"killed by SIGKILL", "killed by SIGKILL, themselves or part of their group, at the end of the grace"},
    {"before its next report", "ended before their next report (mid-step: by the signal, or by a handler of "
                               "their own)"},
    {"stopped at its next report after SIGTERM", "stopped at their next report after SIGTERM (the step-boundary "
                                                 "stop)"},
    {"after kace's stop message", "stopped at a step boundary after kace's stop message (the control pipe)"},
    {"paused in the pool", "paused at a step boundary in the warm pool, kept for later runs"},
    {"on its own", "ended on their own (a crash, an early exit)"},
};

/* Which of endings[] a member's detail says (N_OF(endings): another ending,
 * N_OF(endings) + 1: none recorded). */
static size_t ending_of(const char *detail)
{
    size_t e = 0;
    while (e < N_OF(endings) && !strstr(detail, endings[e].phrase))
        e++;
    if (e == N_OF(endings) && !strstr(detail, "after SIGTERM") && !strstr(detail, "never started"))
        e++;
    return e;
}

static int cmp_str_ptr(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* How the members' processes ended: in all, then workload by workload. */
static kace_status readme_endings(kace_ctx *ctx, text_buf *t, const runs *r)
{
    if (!r->n) {
        tb_printf(t, "No run measured yet.\n");
        return KACE_OK;
    }
    enum { N_ENDS = N_OF(endings) + 2 };
    size_t count[N_ENDS] = {0};
    for (size_t i = 0; i < r->n; i++)
        count[ending_of(r->m[i].detail)]++;
    tb_printf(t, "Each member of each run (`campaign/runs.csv`, column `detail`), by how its process ended.\n"
                 "NVIDIA's MPS documentation warns that a client ended with GPU work outstanding can leave the "
                 "server\nand its other clients in an undefined state: the step-boundary stop is meant to avoid "
                 "that.\n\n");
    for (size_t e = 0; e < N_OF(endings); e++)
        if (count[e] || e < 3 || e == N_OF(endings) - 1) /* the rarer ones once seen */
            tb_printf(t, "- %zu %s\n", count[e], endings[e].words);
    if (count[N_OF(endings)])
        tb_printf(t, "- %zu otherwise (another exit or signal after SIGTERM, or never started)\n", count[N_OF(endings)]);
    if (count[N_OF(endings) + 1])
        tb_printf(t, "- %zu not recorded (measured by a kace that did not store it)\n", count[N_OF(endings) + 1]);

    /* Workload by workload, a column for each ending seen. */
    const char **names = malloc(r->n * sizeof *names);
    if (!names)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < r->n; i++)
        names[i] = r->m[i].name;
    qsort(names, r->n, sizeof *names, cmp_str_ptr);
    static const char *const short_words[N_ENDS] = {"SIGKILL", "before its report", "at its report (SIGTERM)",
                                                   "at a step boundary (stop message)", "paused in the pool",
                                                   "on its own", "otherwise", "not recorded"};
    tb_printf(t, "\n| workload | members |");
    for (size_t e = 0; e < N_ENDS; e++)
        if (count[e])
            tb_printf(t, " %s |", short_words[e]);
    tb_printf(t, "\n|---|---|");
    for (size_t e = 0; e < N_ENDS; e++)
        if (count[e])
            tb_printf(t, "---|");
    tb_append(t, "\n", 1);
    for (size_t i = 0; i < r->n;) {
        size_t j = i, per[N_ENDS] = {0};
        while (j < r->n && strcmp(names[j], names[i]) == 0)
            j++;
        for (size_t m = 0; m < r->n; m++)
            if (strcmp(r->m[m].name, names[i]) == 0)
                per[ending_of(r->m[m].detail)]++;
        tb_printf(t, "| `%s` | %zu |", names[i], j - i);
        for (size_t e = 0; e < N_ENDS; e++)
            if (count[e])
                tb_printf(t, " %zu |", per[e]);
        tb_append(t, "\n", 1);
        i = j;
    }
    free(names);
    return KACE_OK;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The calls' table: one line per call, tab-separated (UTC start; GPU,
 * driver, memory; CUDA; torch; bundle). */
static void readme_calls(text_buf *t, const char *calls, char *gpu, size_t gpu_size)
{
    tb_printf(t, "| call (UTC start) | GPU, driver, memory | CUDA | torch | bundle |\n|---|---|---|---|---|\n");
    size_t n = 0;
    for (const char *line = calls; line && *line;) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        if (len) {
            const char *f = line;
            tb_append(t, "|", 1);
            for (int col = 0; col < 5; col++) {
                const char *tab = f && f < line + len ? memchr(f, '\t', (size_t)(line + len - f)) : NULL;
                size_t flen = !f || f >= line + len ? 0 : tab ? (size_t)(tab - f) : (size_t)(line + len - f);
                tb_append(t, " ", 1);
                if (flen)
                    tb_append(t, f, flen);
                else
                    tb_append(t, "?", 1);
                tb_append(t, " |", 2);
                if (col == 1 && n == 0 && flen) {
                    const char *comma = memchr(f, ',', flen);
                    snprintf(gpu, gpu_size, "%.*s", (int)(comma ? (size_t)(comma - f) : flen), f);
                }
                f = tab ? tab + 1 : NULL;
            }
            tb_append(t, "\n", 1);
            n++;
        }
        line = end ? end + 1 : line + len;
    }
    if (!n)
        tb_printf(t, "| (not recorded) | | | | |\n");
}

/* The goals of kace's Hopper dataset: what the folder holds against them. */
static void readme_goals(text_buf *t, const colocs *cs, const kace_dataset_stats *stats)
{
    size_t pairs = 0, triples = 0, timeslice_beside = 0, grids = 0;
    for (size_t i = 0; i < cs->n; i++) {
        const coloc *c = &cs->c[i];
        pairs += strcmp(c->kind, "pairs") == 0;
        triples += strcmp(c->kind, "triples") == 0;
        if (strcmp(c->kind, "timeslice-pairs") == 0)
            for (size_t j = 0; j < cs->n; j++)
                if (strcmp(cs->c[j].kind, "pairs") == 0 &&
                    ((strcmp(cs->c[j].reps[0]->name, c->reps[0]->name) == 0 &&
                      strcmp(cs->c[j].reps[1]->name, c->reps[1]->name) == 0) ||
                     (strcmp(cs->c[j].reps[0]->name, c->reps[1]->name) == 0 &&
                      strcmp(cs->c[j].reps[1]->name, c->reps[0]->name) == 0))) {
                    timeslice_beside++;
                    break;
                }
        /* A split grid: >= 5 splits of one pair (the first split of each pair counts them). */
        if (strcmp(c->kind, "mps-splits") == 0) {
            size_t splits = 0;
            bool first = true;
            for (size_t j = 0; j < cs->n; j++) {
                const coloc *d = &cs->c[j];
                if (strcmp(d->kind, "mps-splits") != 0)
                    continue;
                bool same = (strcmp(d->reps[0]->name, c->reps[0]->name) == 0 &&
                             strcmp(d->reps[1]->name, c->reps[1]->name) == 0) ||
                            (strcmp(d->reps[0]->name, c->reps[1]->name) == 0 &&
                             strcmp(d->reps[1]->name, c->reps[0]->name) == 0);
                if (same && j < i)
                    first = false;
                splits += same;
            }
            grids += first && splits >= 5;
        }
    }
    const struct {
        const char *what;
        size_t have, goal;
    } goals[] = {{"workloads profiled alone", stats->workloads, 12},
                 {"pairs at 100/100 MPS", pairs, 30},
                 {"triples at 100/100 MPS", triples, 10},
                 {"MPS split grids (>= 5 splits of one pair)", grids, 2},
                 {"colocations measured >= 3 times", stats->repeated, 6},
                 {"time-sliced pairs beside their MPS pair", timeslice_beside, 3},
                 {"workloads compared with ncu (3 CUDA C, 2 PyTorch)", stats->ncu_workloads, 5}};
    tb_printf(t, "| part | have | goal | |\n|---|---|---|---|\n");
    for (size_t g = 0; g < N_OF(goals); g++)
        tb_printf(t, "| %s | %zu | %zu | %s |\n", goals[g].what, goals[g].have, goals[g].goal,
                  goals[g].have >= goals[g].goal ? "met" : "**missing**");
}

static kace_status write_readme(kace_ctx *ctx, const char *dir, const char *calls, const profiles *p, const runs *r,
                                const colocs *cs, const spread_row *spread, size_t n_spread, const text_buf *ncu,
                                kace_dataset_stats *stats)
{
    text_buf t = {0}, calls_table = {0};
    char gpu[200] = "";
    readme_calls(&calls_table, calls, gpu, sizeof gpu);
    tb_printf(&t, "# kace's own dataset: %s\n\n", *gpu ? gpu : "a GPU not recorded");
    tb_printf(&t, "Generated by `kace export --dataset` from the device campaign's store (`campaign/store.tar.gz`);\n"
                  "do not edit by hand (`scripts/device/dataset.sh --verify` checks it). Measured by kace itself\n"
                  "(kace profile, kace campaign under its own MPS daemon); see docs/gpu.md.\n\n");
    tb_printf(&t, "## Where and when\n\n");
    tb_append(&t, calls_table.p ? calls_table.p : "", calls_table.len);
    free(calls_table.p);
    tb_append(&t, "\n", 1);
    const char *first = NULL, *last = NULL;
    for (size_t i = 0; i < r->n; i++) {
        const char *at = r->m[i].measured_at;
        if (!*at)
            continue;
        if (!first || strcmp(at, first) < 0)
            first = at;
        if (!last || strcmp(at, last) > 0)
            last = at;
    }
    if (first)
        tb_printf(&t, "Colocation runs measured from %s to %s (%zu runs, %zu of them failed).\n\n", first, last,
                  stats->runs, stats->failed_runs);
    tb_printf(&t, "## What it holds, against the dataset's goals\n\n");
    readme_goals(&t, cs, stats);
    tb_printf(&t, "\nWorkloads: ");
    size_t shown = 0;
    for (size_t i = 0; i < p->n_names; i++)
        if (prof_has(p, i, "exclusive_throughput"))
            tb_printf(&t, "%s`%s`", shown++ ? ", " : "", p->rows[p->first[i]].name);
    tb_printf(&t, "%s.\nKernel metrics for %zu of them.\n", shown ? "" : "none", stats->kernel_profiles);
    /* Where each workload's Exclusive100 comes from: the paper's definition
     * where measured, the clean run (no MPS) otherwise, by name. */
    size_t n_mps = 0, n_clean = 0;
    text_buf clean = {0};
    for (size_t i = 0; i < p->n_names; i++) {
        double v;
        bool mps;
        if (!system_row(p, i) || !exclusive100(p, i, &v, &mps))
            continue;
        if (mps)
            n_mps++;
        else
            tb_printf(&clean, "%s`%s`", n_clean++ ? ", " : "", p->rows[p->first[i]].name);
    }
    if (clean.oom) {
        free(t.p);
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    }
    if (n_mps + n_clean) {
        tb_printf(&t,
                  "Exclusive throughput (`Exclusive100` in `profiles/system.csv`), as in the paper, is a workload "
                  "alone\nunder MPS at 100%% (`exclusive_mps100`, measured in the pool): %zu of %zu workloads.\n",
                  n_mps, n_mps + n_clean);
        if (n_clean)
            tb_printf(&t,
                      "Not measured so yet, hence the profile's clean run, alone without MPS "
                      "(`exclusive_throughput`), for %zu:\n%s.\n",
                      n_clean, clean.p);
        if (nomps_column(p))
            tb_printf(&t, "Column `exclusive_nomps` holds each workload's clean run, alone without MPS.\n");
    }
    free(clean.p);
    if (stats->exclusive_curves)
        tb_printf(&t, "Exclusive throughput alone under MPS at other shares (`profiles/exclusive-by-mps.csv`): "
                      "%zu workload(s).\n",
                  stats->exclusive_curves);
    else
        tb_printf(&t, "Exclusive throughput alone under MPS at other shares: not measured yet.\n");
    tb_printf(&t, "\n## Noise floor\n\n");
    double *cv = n_spread ? malloc(n_spread * sizeof *cv) : NULL;
    size_t n_cv = 0;
    if (n_spread && !cv) {
        free(t.p);
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < n_spread; i++)
        if (!isnan(spread[i].cv))
            cv[n_cv++] = spread[i].cv;
    if (n_cv) {
        qsort(cv, n_cv, sizeof *cv, cmp_double);
        double median = n_cv % 2 ? cv[n_cv / 2] : (cv[n_cv / 2 - 1] + cv[n_cv / 2]) / 2;
        tb_printf(&t,
                  "Run-to-run coefficient of variation of each member's throughput over the colocations measured "
                  "more\nthan once (`campaign/spread.csv`, %zu members): median %.2f%%, largest %.2f%%. Differences "
                  "between\npolicies smaller than this are noise.\n",
                  n_cv, 100 * median, 100 * cv[n_cv - 1]);
    } else {
        tb_printf(&t, "No colocation was measured twice yet: the noise floor is unknown.\n");
    }
    free(cv);
    tb_printf(&t, "\n## How the workloads' processes ended\n\n");
    kace_status st = readme_endings(ctx, &t, r);
    if (st) {
        free(t.p);
        return st;
    }
    tb_printf(&t, "\n## kace against Nsight Compute\n\n");
    tb_append(&t, ncu->p ? ncu->p : "", ncu->len);
    tb_printf(&t, "\n## Files\n\n"
                  "- `profiles/kernel.csv`, `profiles/system.csv`: each workload alone (CUPTI kernel metrics, NVML "
                  "system\n  metrics, exclusive throughput and its spread; `Exclusive100` alone under MPS at 100%% "
                  "where measured,\n  else without MPS, and `exclusive_nomps` without MPS once they differ); "
                  "`profiles/exclusive-by-mps.csv`:\n  alone under MPS at a thread percentage, when measured.\n"
                  "- `colocations/pairs.csv`, `triples.csv` (100/100 MPS), `mps-splits.csv` (other MPS splits),\n"
                  "  `timeslice-pairs.csv` (no MPS): each member's throughput, the mean over its ok repetitions.\n"
                  "- `campaign/runs.csv` (every run and member, failed ones included), `spread.csv` (run-to-run "
                  "spread),\n  `visits.tsv` (the calls): the campaign's own records, which `kace import` reads "
                  "past.\n"
                  "- `ncu/compare.csv`, once measured: kace's six kernel metrics against Nsight Compute's.\n"
                  "- `campaign/store.tar.gz`: the campaign's store as the last call left it; the next call "
                  "resumes from it.\n\n"
                  "## The commands\n\n```\n"
                  "make device-bundle                                          # here\n"
                  "bash scripts/device/campaign.sh OUT --minutes 8 [--store DIR/campaign/store.tar.gz]  # on the GPU "
                  "server\n"
                  "bash scripts/device/dataset.sh OUT/store.tar.gz DIR         # here: this folder\n"
                  "bash scripts/device/dataset.sh --verify DIR                  # it is what its store gives\n"
                  "```\n");
    st = write_out(ctx, dir, "README.md", &t, NULL);
    free(t.p);
    return st;
}

/* ---- the folder ------------------------------------------------------------ */

kace_status kace_store_export_dataset(kace_ctx *ctx, kace_store *s, const char *dir, const char *calls,
                                      kace_dataset_stats *stats)
{
    kace_dataset_stats local;
    if (!stats)
        stats = &local;
    *stats = (kace_dataset_stats){0};
    const char *subs[] = {"profiles", "colocations", "campaign"};
    for (size_t i = 0; i < N_OF(subs); i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, subs[i]);
        if (mkdir(path, 0755) != 0 && errno != EEXIST)
            return kace_fail(ctx, KACE_ERR_IO, "%s: cannot create the folder: %s", path, strerror(errno));
    }
    profiles p = {0};
    runs r = {0};
    colocs cs = {0};
    spread_row *spread = NULL;
    size_t n_spread = 0;
    kace_status st = load_profiles(ctx, s, &p);
    if (!st)
        st = write_profiles(ctx, &p, dir, stats);
    if (!st)
        st = load_runs(ctx, s, &r);
    if (!st)
        st = write_runs(ctx, &r, dir, stats);
    if (!st)
        st = group_colocs(ctx, &r, &cs);
    if (!st)
        st = write_colocs(ctx, &cs, dir, stats);
    if (!st)
        st = write_spread(ctx, &cs, dir, &spread, &n_spread, stats);
    if (!st && calls) {
        text_buf t = {0};
        tb_append(&t, calls, strlen(calls));
        st = write_out(ctx, dir, "campaign/visits.tsv", &t, &stats->files);
        free(t.p);
    }
    text_buf ncu = {0};
    if (!st)
        st = write_ncu(ctx, s, &p, dir, &ncu, stats);
    if (!st && ncu.oom)
        st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    if (!st)
        st = write_readme(ctx, dir, calls, &p, &r, &cs, spread, n_spread, &ncu, stats);
    free(ncu.p);
    free(spread);
    colocs_free(&cs);
    runs_free(&r);
    profiles_free(&p);
    return st;
}
