/* The kace store: one SQLite database holding workloads, profiles (metric ->
 * value with its source), colocation runs, published splits and trained
 * models. The schema is versioned; every write is one transaction, so a
 * failed import leaves the store exactly as it was.
 */
#ifndef KACE_STORE_H
#define KACE_STORE_H

#include <stdint.h>

#include "kace/dataset.h"
#include "kace/import.h"
#include "kace/model.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KACE_STORE_SCHEMA_VERSION 7

typedef struct kace_store kace_store;

/* How kace_store_open_flags treats a path where no store is. */
enum {
    KACE_STORE_CREATE = 1u << 0,     /* create the store file (its folder must exist) */
    KACE_STORE_CREATE_DIRS = 1u << 1, /* with KACE_STORE_CREATE: create missing parent folders too */
    KACE_STORE_READ_ONLY = 1u << 2    /* never written: not created, migrated or switched to WAL */
};

/* Opens the store at path. Without KACE_STORE_CREATE a missing file (or an
 * empty one) fails with KACE_ERR_NOT_FOUND "no such store: PATH" and
 * nothing is created. Fails with KACE_ERR_STORE on a newer or foreign
 * schema, or when locked. An older schema is migrated (one process at a
 * time: others opening it meanwhile wait, then find it migrated). The
 * store is switched to WAL mode, so readers keep reading while another
 * process writes; a writer waits up to 5 s for another writer.
 * With KACE_STORE_READ_ONLY (commands that only read) nothing is written,
 * so a store in a folder the caller may not write can be read, and any
 * write through the store fails; an older schema is then not migrated but
 * read through an upgraded copy in memory (kace_store_older_version). */
kace_status kace_store_open_flags(kace_ctx *ctx, const char *path, unsigned flags, kace_store **out);
/* The schema version of an older store opened read-only (read through an
 * upgraded copy in memory: it costs the store's size in memory at every
 * open until the file is upgraded), else 0. */
int kace_store_older_version(const kace_store *store);
/* kace_store_open_flags with KACE_STORE_CREATE | KACE_STORE_CREATE_DIRS. */
kace_status kace_store_open(kace_ctx *ctx, const char *path, kace_store **out);
void kace_store_close(kace_store **store);

typedef struct kace_import_stats {
    size_t values_added, values_updated, values_unchanged;
    size_t values_retired; /* measured on another GPU, moved to history (retire_other_gpu) */
    size_t runs_added, runs_updated, runs_unchanged;
    size_t splits_added, splits_updated, splits_unchanged;
} kace_import_stats;

typedef struct kace_source {
    const char *gpu;  /* "Tesla V100-SXM2-32GB", NULL = unknown */
    const char *tool; /* "ncu", "nvidia-smi", "kace-profile", ... */
    const char *date; /* ISO date of the measurement, NULL = unknown */
} kace_source;

/* Called after each file kace_store_import_files stores, in import order. */
typedef void (*kace_import_report)(void *user, const char *path, const kace_import_batch *batch,
                                   const kace_import_stats *stats);

/* The import recipe: opens every file of paths[0..n) and reads its header
 * (what is not a regular file, a FIFO say, is refused without waiting),
 * then reads and stores the files in the order of kace_file_kind_rank
 * (files of one rank in the order given), in one transaction: when one
 * fails to parse or to store, nothing is stored. Colocation files and raw
 * campaigns are read and stored in batches of rows, so memory holds a
 * batch, not the file. report may be NULL. */
kace_status kace_store_import_files(kace_ctx *ctx, kace_store *store, const char *const *paths, size_t n,
                                    const kace_source *source, const kace_import_options *opt,
                                    kace_import_report report, void *user);

/* Stores one batch (a savepoint inside a caller's transaction). Importing
 * the same data again changes nothing. A stored value (profile value,
 * run's status and throughputs, split's set) that the batch gives another
 * value is a conflict: without opt->replace the batch is refused, the
 * message naming the first conflicts (file:line:col, both values, the old
 * one's source file); with it the batch's value is stored and the old one
 * kept in profile_history / run_history / split_history. A missing (empty)
 * cell never conflicts with a stored value, and values copied into a
 * colocation file only fill missing ones. Colocations may name only stored
 * workloads (profiles of the same import are stored first) unless
 * opt->create_workloads. Values outside their metric's range
 * (kace_metric_check) are refused whatever their producer. opt may be NULL
 * (no replace, no create). */
kace_status kace_store_import_with(kace_ctx *ctx, kace_store *store, const kace_import_batch *batch,
                                   const kace_source *source, const kace_import_options *opt,
                                   kace_import_stats *stats);
/* kace_store_import_with without options. */
kace_status kace_store_import(kace_ctx *ctx, kace_store *store, const kace_import_batch *batch,
                              const kace_source *source, kace_import_stats *stats);

/* An outer transaction around several imports (all or nothing): imports in
 * between are savepoints inside it. */
kace_status kace_store_begin(kace_ctx *ctx, kace_store *store);
kace_status kace_store_commit(kace_ctx *ctx, kace_store *store);
void kace_store_rollback(kace_store *store);

/* A savepoint around several writes: unlike kace_store_begin it nests in a
 * caller's transaction or savepoint. name: letters and '_' only.
 * kace_store_rollback_to undoes what was written since, and ends it. */
kace_status kace_store_savepoint(kace_ctx *ctx, kace_store *store, const char *name);
kace_status kace_store_release(kace_ctx *ctx, kace_store *store, const char *name);
void kace_store_rollback_to(kace_store *store, const char *name);

/* Loads every workload with its profile and the successful runs of one
 * colocation set (NULL: every set). Runs at other than 100% MPS for all
 * members are skipped unless all_splits is true. */
kace_status kace_store_load_dataset(kace_ctx *ctx, kace_store *store, const char *set, bool all_splits,
                                    kace_dataset **out);
/* The same for n sets at once (out[0..n) in sets' order; NULL each on
 * failure): the workloads and profiles read once, the runs of every set in
 * one query (kace eval reads the pairs and the triples). */
kace_status kace_store_load_datasets(kace_ctx *ctx, kace_store *store, const char *const *sets, size_t n,
                                     bool all_splits, kace_dataset **out);

/* A dataset for questions about a few workloads (kace predict), loaded in
 * time that does not grow with the store's runs: the workloads names[0..n)
 * (every workload, in the order kace_store_load_dataset gives, when
 * every_workload) with their profiles, and the successful all-100% MPS runs
 * of any set that involve a named workload and whose members are all in
 * the dataset (no names and every_workload: every profile and no runs, what
 * placement needs). A name the store does not hold is left out
 * (kace_dataset_find then answers -1). */
kace_status kace_store_load_around(kace_ctx *ctx, kace_store *store, const char *const *names, size_t n,
                                   bool every_workload, kace_dataset **out);

typedef struct kace_split_row {
    int n_occur, seed;
    bool train, paper_fit;
    int colocation; /* index into the dataset the splits were resolved against */
} kace_split_row;

typedef struct kace_splits {
    kace_split_row *rows;
    size_t n;
} kace_splits;

/* Loads the published splits, resolving each pair to a colocation of ds
 * (unordered match on the two workload names). */
kace_status kace_store_load_splits(kace_ctx *ctx, kace_store *store, const kace_dataset *ds,
                                   kace_splits **out);
void kace_splits_free(kace_splits **s);

/* Names of the stored colocation sets with their run counts. */
typedef struct kace_set_info {
    char name[128];
    int k;
    size_t n_runs;
} kace_set_info;
kace_status kace_store_list_sets(kace_ctx *ctx, kace_store *store, kace_set_info **sets, size_t *n);

/* Models are stored by name (replacing an older one of that name). The one
 * that kace serve, the Slurm plugins and kace predict use is the one named
 * KACE_MODEL_DEFAULT (kace/model.h): load it with
 * kace_store_load_model(ctx, store, KACE_MODEL_DEFAULT, &m). `kace train`
 * saves under other names (kace_model_name_check); only promotion writes the
 * default. */
kace_status kace_store_save_model(kace_ctx *ctx, kace_store *store, const char *name, const kace_model *m);
kace_status kace_store_load_model(kace_ctx *ctx, kace_store *store, const char *name, kace_model **out);
/* Makes the stored model `name` the default: a copy of it under
 * KACE_MODEL_DEFAULT, created = the time of promotion, written in one
 * statement (a reader sees the old default or the new one). KACE_ERR_NOT_FOUND
 * when no model has that name. */
kace_status kace_store_promote_model(kace_ctx *ctx, kace_store *store, const char *name);

typedef struct kace_model_info {
    char name[128];
    char kind[32];     /* the kind recorded when saved (informative) */
    char created[32];  /* UTC, ISO 8601; for the default: when it was promoted */
    bool is_default;   /* the default is a copy of this model (true for the default itself) */
} kace_model_info;
/* Every stored model, the default first, then oldest first. *out is
 * malloc'ed (free it); NULL with n = 0 when there are none. */
kace_status kace_store_list_models(kace_ctx *ctx, kace_store *store, kace_model_info **out, size_t *n);

typedef struct kace_store_counts {
    size_t workloads, profile_values, runs, splits, models;
} kace_store_counts;
kace_status kace_store_count(kace_ctx *ctx, kace_store *store, kace_store_counts *counts);

/* ---- measured runs (kace measure / kace campaign) ---------------------- */

/* The command line that runs a workload (argv NULL-terminated, argv[0]
 * searched in PATH), stored with the workload (created when new). */
kace_status kace_store_set_command(kace_ctx *ctx, kace_store *store, const char *workload, char *const *argv);
/* *argv is NULL-terminated and one allocation: free(*argv). Fails with
 * KACE_ERR_NOT_FOUND when the workload has no command. */
kace_status kace_store_get_command(kace_ctx *ctx, kace_store *store, const char *workload, char ***argv);

/* Stores a workload's profile batch (kace profile) and the command that was
 * profiled in one transaction: both or neither, so a profiled workload can
 * be measured (kace measure) without a separate `kace workload add`.
 * Profiling again is a new measurement: it replaces the stored values,
 * keeping the old ones as history. A profile from another GPU than the
 * stored one replaces all of that GPU's values of the workload, those it
 * does not measure too, so that no profile mixes two GPUs. */
kace_status kace_store_add_profile(kace_ctx *ctx, kace_store *store, const kace_import_batch *batch,
                                   const kace_source *source, const char *workload, char *const *argv,
                                   kace_import_stats *stats);

/* A GPU other than gpu that some of the workload's stored profile values
 * were measured on (their source's GPU), in *other; "" when there is none
 * (no profile, or sources that name no GPU). */
kace_status kace_store_profile_other_gpu(kace_ctx *ctx, kace_store *store, const char *workload, const char *gpu,
                                         char *other, size_t size);

typedef struct kace_measured_member {
    const char *workload;
    int mps_pct;        /* CUDA_MPS_ACTIVE_THREAD_PERCENTAGE (100 under time-slicing) */
    double throughput;  /* samples/s in the steady window; NaN when not measured */
    double cv;          /* spread of the window (sd / mean); NaN when unknown */
    const char *status; /* the runner's word: ok, crashed, oom, timeout, stopped, ... */
    const char *detail; /* why, for a member that did not finish, and how its process
                           ended (kace_proc_ending; may be NULL) */
} kace_measured_member;

typedef struct kace_measured_run {
    const char *set;   /* colocation set, e.g. "pairs" */
    const char *mode;  /* "mps" or "timeslice" */
    int repetition;    /* 0, 1, ...: repeated measurements of one colocation */
    int k;
    kace_measured_member member[KACE_MAX_K];
    kace_run_status status;
    double window_s;
    const char *gpu;   /* GPU name (NULL: unknown) */
} kace_measured_run;

/* The identity of a measured run: set, mode, members with their MPS
 * percentages (in name order, so A+B is B+A) and repetition. */
void kace_measured_run_key(const kace_measured_run *r, char *out, size_t size);

/* Stores a measured run and its members in one transaction (a savepoint
 * inside a caller's transaction). KACE_ERR_INVALID when a run of that
 * identity is already stored. run_id may be NULL. */
kace_status kace_store_add_measured_run(kace_ctx *ctx, kace_store *store, const kace_measured_run *r,
                                        long long *run_id);
/* Whether a run of r's identity is stored (only the identity fields are read). */
kace_status kace_store_has_measured_run(kace_ctx *ctx, kace_store *store, const kace_measured_run *r, bool *has);

/* ---- observed colocations (the closed learning loop) -------------------- */

/* One workload of an observed colocation. */
typedef struct kace_observed_member {
    const char *workload; /* a stored workload (profiled or added) */
    double mps_pct;       /* 0 < mps_pct <= 100 */
    double throughput;    /* samples/s while colocated: finite, > 0 */
    double predicted;     /* what the model predicted (finite, >= 0), NAN if none */
} kace_observed_member;

/* A colocation seen in production: by `kace serve` (POST /v1/observations),
 * the Slurm throughput channel or `kace measure`. */
typedef struct kace_observed_colocation {
    const char *origin;    /* "serve", "slurm", "measure": a short word [a-z0-9_-] */
    const char *origin_id; /* dedupe key within origin; NULL = never a duplicate */
    double observed_at;    /* unix seconds, finite, >= 0 */
    const char *gpu;       /* GPU name, NULL = unknown */
    const char *model;     /* name of the model that predicted, NULL = none */
    size_t n_members;      /* 1..KACE_MAX_K */
    const kace_observed_member *members;
} kace_observed_colocation;

/* Stores an observation in one transaction (a savepoint inside a caller's).
 * Checks every field first (KACE_ERR_INVALID naming the field and member;
 * KACE_ERR_NOT_FOUND naming an unknown workload). An observation whose
 * (origin, origin_id) is already stored with the same members, throughputs
 * and predictions is ignored with *added = false; with different ones it is
 * refused (KACE_ERR_INVALID). added may be NULL. */
kace_status kace_store_add_observation(kace_ctx *ctx, kace_store *store, const kace_observed_colocation *obs, bool *added);

/* Observations owned by a list: every string points into the list. */
typedef struct kace_observed_list {
    size_t n;
    kace_observed_colocation *items; /* by observed_at, then insertion order */
} kace_observed_list;

/* Every observation with observed_at >= since (-INFINITY or 0: all). */
kace_status kace_store_list_observations(kace_ctx *ctx, kace_store *store, double since, kace_observed_list **out);
void kace_observed_list_free(kace_observed_list **list);

/* ---- campaign attempts: retrying a failed run once its commands or code change ---- */

#define KACE_COMMAND_KEY_SIZE 17 /* 16 hex digits and a NUL */

/* What the store says about one planned run, for the retry rule
 * (kace_plan_should_measure in kace/campaign.h). */
typedef struct kace_attempt_state {
    bool stored;    /* a run of this identity is stored */
    bool failed;    /* ... and it failed (failed, oom or timeout) */
    bool key_known; /* the key it failed with is known (kept since attempts are noted) */
    char failed_key[KACE_COMMAND_KEY_SIZE];  /* its members' command key then */
    char current_key[KACE_COMMAND_KEY_SIZE]; /* its members' command key now */
} kace_attempt_state;

/* Fills *out for the run stored under run_key (kace_measured_run_key), with
 * current_key as its members' key now. */
kace_status kace_attempt_state_load(kace_ctx *ctx, kace_store *store, const char *run_key, const char *current_key,
                                    kace_attempt_state *out);
/* Notes a measurement of run_key with command_key (the store's campaign_attempts
 * table, made by the first note) and its status. */
kace_status kace_attempt_note(kace_ctx *ctx, kace_store *store, const char *run_key, const char *command_key,
                              kace_run_status status);
/* Removes the failed run stored under run_key, so that its retry can be
 * stored (its attempt stays noted); *retired says whether there was one.
 * Call it inside the transaction that stores the retry. */
kace_status kace_attempt_retire_failed(kace_ctx *ctx, kace_store *store, const char *run_key, bool *retired);

/* ---- the campaign's state in the store (schema 5; more below, schema 6) ----
 *   campaign_plans(id, fingerprint, path, text, added_at)
 *   campaign_allocations(id, plan_id, started_at, deadline_at, ended_at, ending)
 *   campaign_steps(allocation_id, step, runs_done, runs_left, seconds) */

/* Notes a plan (once per fingerprint); *plan_id its row. */
kace_status kace_campaign_plan_note(kace_ctx *ctx, kace_store *store, const char *path, const char *text, size_t len,
                                    const char *fingerprint, int64_t *plan_id);
/* Starts an allocation's row, its deadline seconds from now. A row left
 * without an ending (its call was killed) is closed as killed first;
 * *killed_before counts them. */
kace_status kace_campaign_allocation_begin(kace_ctx *ctx, kace_store *store, int64_t plan_id, double seconds,
                                           int64_t *allocation_id, int *killed_before);
kace_status kace_campaign_step_note(kace_ctx *ctx, kace_store *store, int64_t allocation_id, const char *step,
                                    size_t runs_done, size_t runs_left, double seconds);
kace_status kace_campaign_allocation_end(kace_ctx *ctx, kace_store *store, int64_t allocation_id, const char *ending);
/* The runs and seconds that step's earlier calls measured, summed. */
kace_status kace_campaign_step_times(kace_ctx *ctx, kace_store *store, const char *step, size_t *runs,
                                     double *seconds);

/* ---- a call from a catalog (schema 6) ----
 *   campaign_plan_kinds(plan_id, kind, made_from)   a campaign_plans row that is a call's
 *                     catalog (kind 'catalog') or a plan made from one ('made', made_from
 *                     the catalog); a plan given as a file has no row here
 *   campaign_profiles(id, allocation_id, workload, command_key, status, seconds, need_s,
 *                     attempted_at)   each profile try of a catalog workload
 *   campaign_ncu(id, allocation_id, workload, command_key, status, seconds, cap_s, output,
 *                measured_at)         each ncu try, output its CSV (or its error's end)
 * A status is 'ok', 'failed' or 'timeout' (the try ran out of time). An
 * allocation's plan_id is what its call was given: a plan or a catalog. */

/* Notes a catalog (once per fingerprint); *catalog_id its row. */
kace_status kace_campaign_catalog_note(kace_ctx *ctx, kace_store *store, const char *path, const char *text,
                                       size_t len, const char *fingerprint, int64_t *catalog_id);
/* Notes a plan made from catalog_id (once per fingerprint); *plan_id its row. */
kace_status kace_campaign_made_plan_note(kace_ctx *ctx, kace_store *store, int64_t catalog_id, const char *text,
                                         size_t len, const char *fingerprint, int64_t *plan_id);
/* The newest plan made from a catalog: its text (free it) and row; *text
 * NULL and *plan_id 0 when none was made. */
kace_status kace_campaign_made_plan(kace_ctx *ctx, kace_store *store, char **text, size_t *len, int64_t *plan_id);

/* What the store says about a workload's profile tries. */
typedef struct kace_profile_tries {
    bool profiled;       /* its exclusive throughput is stored (kace profile, or an import) */
    int failures;        /* tries under command_key that failed or ran out of time */
    double ran_out_s;    /* the longest try under command_key that ran out of time (0: none) */
    double longest_ok_s; /* the longest successful try of any workload (0: none yet) */
    double own_ok_s;     /* its own longest successful try, under any key (0: none) */
} kace_profile_tries;

kace_status kace_campaign_profile_tries(kace_ctx *ctx, kace_store *store, const char *workload,
                                        const char *command_key, kace_profile_tries *out);
/* status: "ok", "failed" or "timeout"; need_s the time the try was given. */
kace_status kace_campaign_profile_note(kace_ctx *ctx, kace_store *store, int64_t allocation_id, const char *workload,
                                       const char *command_key, const char *status, double seconds, double need_s);
/* ncu's tries of a workload under command_key: *ok successful, *failures the others. */
kace_status kace_campaign_ncu_tries(kace_ctx *ctx, kace_store *store, const char *workload, const char *command_key,
                                    int *ok, int *failures);
/* ---- the first minute's probe (schema 7) ----
 *   campaign_probes(id, allocation_id, clients_accepted, client_refused, mem_available_kib,
 *                   member_rss_kib, window_s, window_basis, pool_members, pool_bound, seconds,
 *                   evidence, probed_at)
 * one row a probe (kace_pool_probe, kace/pool.h); NULL where a part was not measured. */
typedef struct kace_campaign_probe_row {
    long long clients_accepted;           /* < 0: not probed */
    bool client_refused;
    unsigned long long mem_available_kib, member_rss_kib; /* 0: unknown */
    double window_s;                      /* NaN: none measured */
    const char *window_basis;
    size_t pool_members;                  /* 0: not one member fits, or unknown */
    const char *pool_bound;
    double seconds;
    const char *evidence;                 /* kace_probe_describe's line */
} kace_campaign_probe_row;

kace_status kace_campaign_probe_note(kace_ctx *ctx, kace_store *store, int64_t allocation_id,
                                     const kace_campaign_probe_row *row);
/* The newest probe's pool size and window (*found false: none stored;
 * *window_s NaN where it measured none). */
kace_status kace_campaign_probe_latest(kace_ctx *ctx, kace_store *store, bool *found, size_t *pool_members,
                                       double *window_s);

kace_status kace_campaign_ncu_note(kace_ctx *ctx, kace_store *store, int64_t allocation_id, const char *workload,
                                   const char *command_key, const char *status, double seconds, double cap_s,
                                   const char *output);

#ifdef __cplusplus
}
#endif


#endif
