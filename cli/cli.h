/* Shared pieces of the kace command-line tool. */
#ifndef KACE_CLI_H
#define KACE_CLI_H

#include <stdbool.h>
#include <stdio.h>

#include "kace/eval.h"
#include "kace/import.h"
#include "kace/kace.h"
#include "kace/model.h"
#include "kace/policy.h"
#include "kace/predictor.h"
#include "kace/store.h"

/* Exit codes. */
enum { EXIT_OK = 0, EXIT_FAILURE_RUN = 1, EXIT_USAGE = 2 };

/* The default store: $KACE_DB, else ~/.local/share/kace/kace.db. */
const char *cli_default_db(void);
/* A context for a command's start; out of memory, says so and exits 1
 * (nothing has been done yet). */
kace_ctx *cli_ctx_new(void);
/* Prints "kace: <message>" for a failed library call and returns 1. */
int cli_error(kace_ctx *ctx, kace_status st);
/* Prints a usage error and returns 2. */
int cli_usage(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The one number parser (cli/number.c): the whole of text is a finite
 * number in lo..hi (whole: an integer), no leading space, no suffix. */
bool cli_parse_number(const char *text, double lo, double hi, bool whole, double *out);
/* The same for option --name of command cmd; false after a usage message
 * ("kace CMD: --NAME: 'TEXT' is not a number in LO..HI"). */
bool cli_number(const char *cmd, const char *name, const char *text, double lo, double hi, double *out);
bool cli_whole(const char *cmd, const char *name, const char *text, long lo, long hi, long *out);
bool cli_int(const char *cmd, const char *name, const char *text, int lo, int hi, int *out);
/* A duration: a number of seconds >= 0 (at most a year). */
bool cli_seconds(const char *cmd, const char *name, const char *text, double *out);
/* The one comma-list parser (cli/list.c): the items of option --name's
 * text, in order. An empty list, an empty item ("a,,b", "a,", ",a") or
 * more than max items is refused with a usage message (false). *items is
 * one allocation holding the pointers and the text: free(*items). */
bool cli_list(const char *cmd, const char *name, const char *text, size_t max, char ***items, size_t *n);
/* A comma-separated list of whole numbers in lo..hi (checked only: the
 * caller splits it where it uses it). */
bool cli_whole_list(const char *cmd, const char *name, const char *text, long lo, long hi);
/* "AxB" (e.g. --cluster 4x8): whole A in 1..max_a, B in 1..max_b. */
bool cli_dims(const char *cmd, const char *name, const char *text, long max_a, long max_b, long *a, long *b);
/* Progress of the library's long work on ctx (cli/meter.c): one updating
 * line on stderr, only when it is a terminal and not quiet. cli_meter_clear
 * erases a line left drawn (before printing while a phase runs). */
void cli_meter_attach(kace_ctx *ctx, const char *label, bool quiet);
void cli_meter_clear(void);
/* Opens an existing store, reporting failures ("no such store: PATH"):
 * a command never creates one at a mistyped path unless it adds data. */
kace_store *cli_open_store(kace_ctx *ctx, const char *path);
/* The same for commands that only read (info, predict, eval, model list,
 * simulate, workload list): the store is opened read-only, never migrated or written, so
 * it can be read from a folder the user may not write. */
kace_store *cli_read_store(kace_ctx *ctx, const char *path);
/* Opens the store, creating the file when absent (commands that add data).
 * Missing folders are created only for ~/.local/share/kace (the default)
 * or when with_folders. */
kace_store *cli_create_store(kace_ctx *ctx, const char *path, bool with_folders);
/* Creates a folder (and parents); 0 on success. */
int cli_mkdirs(const char *path);

int cmd_import(int argc, char **argv);
int cmd_import_ncu(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_predict(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_demo(int argc, char **argv);
int cmd_simulate(int argc, char **argv);
int cmd_schedule(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_agent(int argc, char **argv);
int cmd_top(int argc, char **argv);
int cmd_profile(int argc, char **argv);
int cmd_slurm(int argc, char **argv);
int cmd_workload(int argc, char **argv);
int cmd_measure(int argc, char **argv);
int cmd_campaign(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_import_cupti(int argc, char **argv);
int cmd_progress_output(int argc, char **argv);
int cmd_model(int argc, char **argv);
int cmd_export(int argc, char **argv);
/* Prints the default model and every stored model, one per line after indent. */
int cli_print_models(kace_ctx *ctx, kace_store *store, const char *indent);

/* Imports every reference file under dir (profiles first, splits last);
 * all files are parsed before anything is stored. */
int cli_import_paths(kace_ctx *ctx, kace_store *store, char **paths, int n, const kace_source *src,
                     const kace_import_options *opt, bool quiet);

/* Runs the evaluation and writes tables, CSV and figures under out_dir. */
typedef struct eval_request {
    const char *out_dir;       /* NULL: print only */
    const char *pairs_set, *triples_set;
    bool paper, clean;
    bool with_xu;
    int xu_iter;
    double xu_tree_scale;      /* 0 = library default (0.05); 1 = the paper's tree counts */
    kace_slowdown_params slowdown; /* kace's model */
    int kace_kind;                 /* its kind: KACE_MODEL_SLOWDOWN (0 here: the default) or _PRESSURE */
    int kace_seeds;                /* kace's scores: mean over seeds slowdown.seed .. + kace_seeds - 1 */
    bool without_slowdown;         /* leave kace's model out (the paper's policies only) */
    bool figures;
    bool groups, splits;           /* kace eval --groups --splits: the beyond-pairs sections only */
    /* kace eval --protocol (cmd_eval_protocol.c); pairs_set is the set evaluated. */
    int protocol;                  /* a kace_protocol; -1 or paper: the paper's experiments above */
    const char *train_set;         /* NULL: train on the evaluated set's own rows */
    const char *train_db;          /* another store (another GPU) whose set trains: transfer across GPUs */
    const char *targets;           /* comma-separated workload names, NULL: every one */
    const char *candidates;        /* a candidate-list file, NULL: every colocation */
    int folds;                     /* kfold: K */
    unsigned long long seed;       /* kfold: the shuffle */
    bool csv;                      /* print one CSV instead of the tables */
    int learning_curve;            /* kace eval --learning-curve [--every N]: retrain every N observations (0: off) */
    bool made_splits;              /* --made-splits: splits made the artifact's way even where published ones are stored */
    int metrics;                   /* --metrics: a kace_metric_set, -1: chosen from what the store holds */
    int objective;                 /* --objective: a kace_objective (0: raw) */
    bool ablation;                 /* --ablation: every metric set under every protocol (cmd_eval_ablation.c) */
} eval_request;
const kace_feature_set *cli_xu_features(const kace_dataset *const *sets, size_t n_sets, kace_metric_set metrics,
                                        bool quiet);
/* The metric set the models of an evaluation read: req->metrics, or the
 * richest one every member of the sets' colocations has (said on stdout
 * unless quiet, when it is not the full one). */
kace_metric_set cli_eval_metrics(const eval_request *req, const kace_dataset *const *sets, size_t n_sets, bool quiet);
int cli_eval_ablation(kace_ctx *ctx, kace_store *store, const eval_request *req);
kace_status cli_load_splits(kace_ctx *ctx, kace_store *store, const kace_dataset *ds, bool made, kace_splits **out,
                            const char **origin);
int cli_run_eval(kace_ctx *ctx, kace_store *store, const eval_request *req);
int cli_eval_protocol(kace_ctx *ctx, kace_store *store, const eval_request *req);

/* The closed learning loop (cmd_learn.c): kace train --from-observations
 * fits a candidate on set + observations and promotes it over model
 * current_name only when it does at least as well on the held-out slice;
 * kace info's drift line for model name over the last window observations. */
int cli_train_from_observations(kace_ctx *ctx, kace_store *store, const char *set, const kace_fit_spec *spec,
                                const char *current_name, const char *candidate_name, double holdout);
int cli_print_drift(kace_ctx *ctx, kace_store *store, const char *set, const char *name, size_t window);
/* kace eval --learning-curve: the loop simulated on the set's measurements. */
int cli_learning_curve(kace_ctx *ctx, kace_store *store, const char *set, const char *out_dir, bool figures,
                       int every, uint64_t seed);

/* Beyond pairs (cmd_beyond.c): best k-way group, MPS split advice, and
 * their evaluation sections. */
int cli_predict_group(kace_ctx *ctx, const kace_dataset *ds, const kace_model *m, int target, int k, const int *among,
                      size_t n_among, double gpu_memory_gb, bool enumerate, kace_objective objective);
int cli_predict_split(kace_ctx *ctx, kace_store *store, const kace_dataset *ds, const int *group, int k,
                      const char *policy, double ls_target, const char *train_db);
int cli_eval_beyond(kace_ctx *ctx, kace_store *store, const eval_request *req);

#endif
