/* Campaign plans: which colocations `kace campaign` measures, in which order.
 *
 * A plan is a text file, one statement per line ('#' starts a comment):
 *
 *   workloads NAME...            add workloads to the plan's set
 *   repeat N                     following statements: N measurements each (1..100; default 1)
 *   mode mps|timeslice           following statements: under MPS (default) or time-slicing
 *   set NAME                     following statements: store into this colocation set
 *                                (default: pairs / triples / k<N>, "timeslice-" before it)
 *   pairs                        every pair of the set, 100% MPS each
 *   triples                      every triple of the set
 *   occur N [seed S]             the n_occur training plan of the KACE protocol: pairs
 *                                drawn (seeded) until every workload is in >= N of them
 *   splits P... [on A B]         every pair planned so far (or A B only) again at each
 *                                MPS split P/(100-P), P in 1..99
 *   run A B [C...] [@ P1,P2,...] one colocation (percentages default to 100)
 *
 * A repeat, mode or set that no pairs, triples, occur, splits or run follows
 * is an error: it would change nothing.
 *
 * The expanded plan lists each colocation once per repetition: first every
 * colocation's repetition 0, then every repetition 1, ... so that an
 * interrupted campaign has covered the most colocations, and repetitions of
 * one colocation are measured apart in time (their spread then includes
 * drift, as it should). Duplicates (A B = B A, same percentages, mode, set
 * and repetition) are listed once.
 */
#ifndef KACE_CAMPAIGN_H
#define KACE_CAMPAIGN_H

#include "kace/catalog.h"
#include "kace/measure.h"
#include "kace/pool.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KACE_PLAN_MAX_WORKLOADS 256
#define KACE_PLAN_MAX_ENTRIES 50000
#define KACE_PLAN_MAX_LINE 4096

typedef struct kace_plan_entry {
    kace_measure_spec spec; /* spec.set is always filled in */
    int line;               /* the plan line that asked for it */
} kace_plan_entry;

typedef struct kace_plan {
    kace_plan_entry *entries;
    size_t n;
    int n_workloads;        /* in the `workloads` set */
    int max_repeat;
} kace_plan;

/* Parses and expands a plan. Errors name origin:line:column and what was
 * expected; *out is NULL then. */
kace_status kace_plan_parse(kace_ctx *ctx, const char *text, size_t len, const char *origin, kace_plan **out);
kace_status kace_plan_parse_file(kace_ctx *ctx, const char *path, kace_plan **out);
void kace_plan_free(kace_plan **plan);

/* The stored run's identity of an entry: set, mode, repetition, members and
 * their MPS percentages (no throughputs). Its strings point into e. */
kace_measured_run kace_plan_entry_run(const kace_plan_entry *e);
/* The identity under which entry's run is stored (see kace_measured_run_key). */
void kace_plan_entry_key(const kace_plan_entry *e, char *out, size_t size);

/* ---- attempts: retrying a failed run once its commands or code change ---- */

/* A fingerprint of a command and its code: argv's words and the contents of
 * each word that names a readable regular file (a script, a binary; over 64
 * MiB: its size and time of change), as 16 hex digits. A fixed command line
 * or a fixed script gives another key. */
kace_status kace_command_key(kace_ctx *ctx, char *const *argv, char out[KACE_COMMAND_KEY_SIZE]);

/* The same for a command as written (a catalog line, its placeholders
 * unreplaced) and run as argv: written's text and the contents of the files
 * argv's words name, not their paths, so that the key is the same wherever
 * a bundle is unpacked and changes with a fix to the line or its code. */
kace_status kace_written_command_key(kace_ctx *ctx, const char *written, char *const *argv,
                                     char out[KACE_COMMAND_KEY_SIZE]);

/* The key of a colocation's commands: its k members' names with their
 * command keys (argvs[i] is names[i]'s command), in name order. */
kace_status kace_members_command_key(kace_ctx *ctx, int k, const char *const *names, char *const *const *argvs,
                                     char out[KACE_COMMAND_KEY_SIZE]);

/* Command keys remembered for one call: each command (its line as written,
 * if any, and its argv) has its files read once. Done checks ask for every
 * planned run's key before each step, and a multi-MB binary read each time
 * made a check take seconds. A file changed during the call keeps the key
 * it had when first asked for; the next call reads it again. */
typedef struct kace_key_cache kace_key_cache;

kace_key_cache *kace_key_cache_new(void); /* NULL: out of memory */
void kace_key_cache_free(kace_key_cache **cache);

/* kace_written_command_key (written non-NULL) or kace_command_key (written
 * NULL), computed once per (written, argv) in cache (NULL: every time). */
kace_status kace_cached_command_key(kace_ctx *ctx, kace_key_cache *cache, const char *written, char *const *argv,
                                    char out[KACE_COMMAND_KEY_SIZE]);

/* kace_members_command_key, each member's command key from cache. */
kace_status kace_cached_members_key(kace_ctx *ctx, kace_key_cache *cache, int k, const char *const *names,
                                    char *const *const *argvs, char out[KACE_COMMAND_KEY_SIZE]);

/* The retry rule: measure a planned run unless it is stored, and it either
 * succeeded or failed with the very commands and code it has now. A failed
 * run stored before attempts were noted (its key unknown) gets one more try. */
bool kace_plan_should_measure(const kace_attempt_state *s);

/* The attempts themselves are kept by the store (kace_attempt_state_load,
 * kace_attempt_note, kace_attempt_retire_failed in kace/store.h). */

/* ---- one allocation's schedule (kace campaign --device --minutes M) ----
 *
 * One call measures what fits of a plan before its deadline, in this order:
 *   timeslice     the time-sliced runs, each started afresh (no MPS)
 *   pool          the MPS runs, 100% and split shares, in the warm pool,
 *                 interleaved in batches the pool holds (kace_schedule_pool_order)
 *   cold-repeats  KACE_SCHEDULE_COLD_REPEATS MPS colocations of the plan again
 *                 with their processes started afresh, stored in set
 *                 "cold-SET": the first ones the plan repeats (so that their
 *                 spread across restarted processes sits beside the pool's
 *                 repetitions of them), then, if too few, the first others:
 *                 the between-process noise beside the pool's
 * Each step's time is projected from the run times its earlier calls stored
 * (campaign_steps), else from the plan's warm-up and window plus a start-up
 * allowance; kace_schedule_fit says how many of its runs the call measures.
 * Whatever a call leaves, the next call measures (a stored run is done). */

#define KACE_SCHEDULE_COLD_REPEATS 3
/* A run's time beyond its warm-up and window before any is measured: a cold
 * start (a PyTorch workload needed 17.5 s before its first report on the
 * H200), and a warm run's resume and pause. */
#define KACE_SCHEDULE_COLD_START_S 20.0
#define KACE_SCHEDULE_WARM_START_S 2.0

/* Reorders specs in place so that consecutive runs share no workload where
 * it can: each next run, among the next 64 left, shares none with the run
 * before and its workloads ran least recently; ties go to the given order.
 * A greedy rule (it may leave a pair adjacent that a search would part).
 * Deterministic: the same input gives the same order. */
void kace_schedule_interleave(kace_measure_spec *specs, size_t n);

/* The pool step's order: the runs cut, in order, into batches whose
 * members (distinct workload and MPS share) fit a pool of max_members (0:
 * KACE_POOL_MAX_MEMBERS), each batch interleaved. A warm pool started for a
 * batch then serves all of it: the interleave does not make it restart. */
void kace_schedule_pool_order(kace_measure_spec *specs, size_t n, size_t max_members);

/* The time-fit rule: how many of a step's n runs, run_s seconds each, to
 * measure with remaining_s left, where a whole next call would have
 * allocation_s seconds (0: no next call is counted on). All when they fit;
 * none when they do not fit now but would fit a whole next call (the step
 * is left whole to it, which stops this one at a step boundary); a step
 * longer than that: as many as fit. */
size_t kace_schedule_fit(double remaining_s, double allocation_s, double run_s, size_t n);

typedef struct kace_schedule_config {
    double allocation_s;       /* the call's seconds of commands: its deadline */
    double used_s;             /* of them, spent by the call's steps before these (profiles, plan) */
    double warmup_s, window_s; /* each run's (the projection before any run time is stored) */
    size_t pool_members;       /* the warm pool's bound (kace_schedule_pool_order; 0: the most) */
    double allowance_scale;    /* the start allowances (KACE_SCHEDULE_*_START_S) times this (0: 1); below 1
                                  only for stand-ins that run faster than the real thing (a test) */
    double cold_start_s, warm_start_s; /* a run's time beyond its warm-up and window before any is stored
                                          (0: the start allowances; a fit's expected costs) */
    double next_call_s;        /* the next call's seconds, for the rule that leaves a step whole to it
                                  (kace_schedule_fit): 0, as many as this call's; KACE_SCHEDULE_NO_NEXT_CALL,
                                  none is counted on (a visit's last call: a step that does not fit the
                                  time left measures as many runs as fit) */
} kace_schedule_config;

#define KACE_SCHEDULE_NO_NEXT_CALL (-1.0)

/* What one step of a call did. */
typedef struct kace_schedule_report {
    const char *step;  /* "timeslice", "pool", "cold-repeats" */
    size_t planned;    /* its runs in the plan */
    size_t done_before; /* stored before this call */
    size_t measured;   /* by this call */
    size_t left;       /* for the next call */
    double run_s;      /* projected seconds per run */
    bool measured_run_s; /* run_s is from stored run times (else from the plan's windows) */
    double seconds;    /* this call's time in the step */
} kace_schedule_report;

/* How the caller measures: the library neither starts MPS nor prints. Each
 * callback gets arg. */
typedef struct kace_schedule_ops {
    void *arg;
    double (*now_s)(void *arg); /* a monotonic clock, in seconds */
    /* Seconds per run and runs of step's earlier calls (0 runs: none). */
    kace_status (*stored_times)(void *arg, const char *step, size_t *runs, double *seconds);
    /* Whether spec's run is stored and not to be measured again. */
    kace_status (*is_done)(void *arg, const kace_measure_spec *spec, bool *done);
    /* Measures specs[i], started afresh (cold) or in the warm pool that
     * serves specs[i..n) (warm), within timeout_s. *stored: the run was
     * stored (false when a signal cancelled it); an error stops the call. */
    kace_status (*measure_cold)(void *arg, const kace_measure_spec *spec, double timeout_s, bool *stored);
    kace_status (*measure_warm)(void *arg, const kace_measure_spec *specs, size_t n, size_t i, double timeout_s,
                                bool *stored);
    /* Optional: told before each run, the runs the call measures after it
     * (specs[0..n), of step `step`, in order): the rest of this step's, or,
     * before a step's last run, the next step's that are not done, so that
     * the caller may start their processes ahead of their turn (include/kace/
     * measure.h). Only a hint: a run told may not come (the deadline). */
    void (*coming)(void *arg, const char *step, const kace_measure_spec *specs, size_t n);
    /* Whether to stop now (a signal); checked before each run. */
    bool (*stop)(void *arg);
    /* Each step's report, as it ends (NULL: none wanted). */
    kace_status (*step_done)(void *arg, const kace_schedule_report *r);
} kace_schedule_ops;

/* How a call ended (campaign_allocations.ending). */
#define KACE_ENDING_FINISHED "finished" /* the plan is done */
#define KACE_ENDING_DEADLINE "deadline" /* runs are left for the next call */
#define KACE_ENDING_KILLED "killed"     /* stopped (or its row left open: killed -9) */
#define KACE_ENDING_FAILED "failed"     /* an error stopped it */

typedef struct kace_schedule_outcome {
    size_t measured, left;
    const char *ending; /* one of KACE_ENDING_* */
} kace_schedule_outcome;

/* Runs one call of plan's schedule. An error from a callback stops it and
 * is returned (out->ending "failed"). */
kace_status kace_schedule_run(kace_ctx *ctx, const kace_plan *plan, const kace_schedule_config *config,
                              const kace_schedule_ops *ops, kace_schedule_outcome *out);

/* ---- the whole allocation's call (kace campaign --device --catalog) ----
 *
 * One call does an allocation's work from a catalog of workloads, its steps
 * in this order, each run only when wanted (kace_campaign_step_wanted, from
 * what the store holds) and within the call's one deadline:
 *   probe     the first minute: MPS client limit, pool size, window (a hook:
 *             wanted only where the caller has a probe)
 *   profile   each catalog workload not profiled yet, GPU alone, no MPS
 *             (kace/profile.h), unless dropped (kace_profile_dropped); each
 *             try bounded by its need (kace_profile_need_s) and the deadline
 *   plan      once every catalog workload is profiled or dropped: a plan
 *             made from the catalog, or the stored one extended with the
 *             names it lacks, frozen in the store
 *   measure   the plan's schedule (kace_schedule_run: timeslice, pool,
 *             cold-repeats), its time the call's left
 *   ncu       last and optional: only once the plan is measured, each
 *             profiled workload capped, with time left
 *   export    the store's dataset as CSV files (kace/store_export.h), given
 *             KACE_CAMPAIGN_EXPORT_RESERVE_S that the steps before leave it
 * Each step's outcome goes to campaign_steps. A step never holds state of
 * its own between calls: a killed call loses no stored run and the next
 * call's done checks resume it. */

typedef enum kace_campaign_step {
    KACE_STEP_PROBE,
    KACE_STEP_PROFILE,
    KACE_STEP_PLAN,
    KACE_STEP_MEASURE,
    KACE_STEP_NCU,
    KACE_STEP_EXPORT,
    KACE_STEP_COUNT
} kace_campaign_step;

/* "probe", "profile", "plan", "measure", "ncu", "export". */
const char *kace_campaign_step_name(kace_campaign_step step);

/* What the store holds, for the done checks. */
typedef struct kace_campaign_progress {
    bool can_probe;      /* the caller has a probe (lib/measure/probe.c) */
    bool probed;         /* ... and the store holds its findings */
    size_t to_profile;   /* catalog workloads neither profiled nor dropped */
    size_t profiled;     /* catalog workloads profiled */
    size_t unplanned;    /* profiled catalog workloads the stored plan lacks (all, without a plan) */
    bool have_plan;      /* a plan is stored (made, or given as a file) */
    size_t runs_left;    /* its runs not stored for good */
    bool can_ncu;        /* an ncu was given */
    size_t ncu_left;     /* profiled workloads ncu has neither measured nor given up on */
    bool can_export;     /* an output folder was given */
} kace_campaign_progress;

/* The step selection rule: whether step has work this call, given p. A
 * plan waits until no workload is left to profile (a plan made before would
 * lack them or be remade); ncu waits until the plan is measured; export is
 * wanted whenever it has a folder (it writes what the store holds). */
bool kace_campaign_step_wanted(kace_campaign_step step, const kace_campaign_progress *p);

/* Seconds the steps before export leave it (a store's CSV files take seconds). */
#define KACE_CAMPAIGN_EXPORT_RESERVE_S 10.0

/* ---- the profile step's retry rules ---- */

/* Failures under one command key that drop a workload: it is not tried
 * again until its command or code changes (kace_command_key). */
#define KACE_PROFILE_MAX_FAILURES 2
/* A try that ran out of time: the next gets this much longer. */
#define KACE_PROFILE_RAN_OUT_GROWTH 1.5
/* A profile's time beyond its four windows before any of its kind was
 * measured (kace_profile_start_s): a CUDA C program starts in a second or
 * two and replays one signature; a PyTorch or LLM workload needed 17.5 s
 * before its first report on the H200 and its first step under kernel
 * replay took 22.4 s, in each of the two runs; any other command, two
 * cold starts. */
#define KACE_PROFILE_START_CUDA_S 30.0
#define KACE_PROFILE_START_TORCH_S 110.0
#define KACE_PROFILE_START_S (2 * KACE_SCHEDULE_COLD_START_S)
/* The longest profile measured, by this much, bounds the next workload's
 * (a larger model starts and replays longer than the first one measured). */
#define KACE_PROFILE_LONGEST_MARGIN 1.25

/* Whether a workload with failures failed tries under its current command
 * key is dropped. */
bool kace_profile_dropped(int failures);

/* A kind's start allowance: KACE_PROFILE_START_CUDA_S, _TORCH_S (torch
 * and llm) or KACE_PROFILE_START_S. */
double kace_profile_start_s(kace_catalog_kind kind);

/* A profile try's time need: its windows_s (both runs' warm-ups and
 * windows) and start_s (its kind's allowance); at least the longest
 * successful profile of its kind so far by KACE_PROFILE_LONGEST_MARGIN (0:
 * none yet); at least KACE_PROFILE_RAN_OUT_GROWTH x its own longest try
 * that ran out of time (0: none); at most cap_s (0: no cap). */
double kace_profile_need_s(double windows_s, double start_s, double longest_ok_s, double ran_out_s, double cap_s);

/* ---- one call's driver ---- */

typedef struct kace_campaign_config {
    double allocation_s;    /* the call's seconds of commands: its deadline */
    double allowance_scale; /* KACE_CAMPAIGN_EXPORT_RESERVE_S times this (0: 1; kace_schedule_config's) */
} kace_campaign_config;

/* What a step did (the caller stores it in campaign_steps). */
typedef struct kace_campaign_step_report {
    kace_campaign_step step;
    size_t done;      /* units done by this call (profiles, plans, runs, ncu tries, files) */
    size_t left;      /* units left for the next call (a step not run: all it had) */
    double seconds;   /* this call's time in it */
    bool ran;         /* false: its time need (need_s) was more than the call had left (until_s) */
    double need_s, until_s;
} kace_campaign_step_report;

typedef struct kace_campaign_ops {
    void *arg;
    double (*now_s)(void *arg); /* a monotonic clock, in seconds */
    /* The done checks, read from the store before each step. */
    kace_status (*progress)(void *arg, kace_campaign_progress *p);
    /* A wanted step's time need: the least time in which it does any of its
     * work (one profile try, the probe, one ncu try); with less left the
     * step is left to the next call (NULL: no need but time left). */
    double (*need_s)(void *arg, kace_campaign_step step);
    /* Runs step with until_s seconds left before its deadline (for the
     * steps before export: less its reserve) and used_s spent by the call
     * so far; fills r's done and left. */
    kace_status (*run)(void *arg, kace_campaign_step step, double until_s, double used_s,
                       kace_campaign_step_report *r);
    bool (*stop)(void *arg); /* a signal: no further step */
    /* Each step's report as it ends (NULL: none wanted). */
    kace_status (*step_done)(void *arg, const kace_campaign_step_report *r);
} kace_campaign_ops;

typedef struct kace_campaign_outcome {
    unsigned ran;       /* bit (1u << step) for each step run */
    size_t left;        /* units left after the call (profiles, plan runs, ncu) */
    const char *ending; /* one of KACE_ENDING_* */
} kace_campaign_outcome;

/* Runs the steps that are wanted, in order, each with the time the call
 * has left; a step whose time need that time does not hold is not run (its
 * report says so: nothing done, seconds 0). An error from a
 * callback stops the call and is returned (out->ending "failed"); a stop
 * ends it "killed"; work left, "deadline"; none, "finished". */
kace_status kace_campaign_run(kace_ctx *ctx, const kace_campaign_config *config, const kace_campaign_ops *ops,
                              kace_campaign_outcome *out);

/* The measuring steps' runs of plan not stored for good (ops->is_done),
 * cold repeats included: the measure step's done check. *cold (NULL: not
 * wanted): of them, those started afresh (time-sliced runs, cold repeats). */
kace_status kace_schedule_left(kace_ctx *ctx, const kace_plan *plan, const kace_schedule_config *config,
                               const kace_schedule_ops *ops, size_t *left, size_t *cold);

/* ---- a window sized to a time (kace campaign --fit-minutes) ----
 *
 * A site whose GPU time is short may want the whole dataset in it, at more
 * noise per run, rather than part of it at the probe's bound on noise: the
 * window is shortened until what is left fits, never below
 * KACE_FIT_WINDOW_MIN_S (the probe's shortest). The rule expects each run
 * and profile to take its warm-ups, its windows and an expected cost
 * besides. These costs are not the allowances above, which bound a run's
 * time: they are what the device dry run measured, whose stand-ins start,
 * step and replay kernels as BERT did on the H200 (docs/gpu.md), with
 * processes started ahead as the engine starts them. */
#define KACE_FIT_WINDOW_MIN_S 1.0
/* The share of its time the fit plans: the rest is for what it cannot see
 * (kace's own work between runs, a run's edges past its window, a
 * straggler); in the dry run's visit, fitting the whole time left 2 of 34
 * pool runs to the next call. */
#define KACE_FIT_SHARE 0.9
#define KACE_FIT_WARM_RUN_S 0.5      /* a pool run: its resume, its window's edges, storing it */
#define KACE_FIT_COLD_RUN_S 2.0      /* a run started afresh (ahead, at its gate): its start and end */
#define KACE_FIT_PROFILE_TORCH_S 8.0 /* a PyTorch or LLM profile: its replayed first step, two starts */
#define KACE_FIT_PROFILE_S 1.0       /* any other profile */

/* What is left of a dataset, for kace_fit_window. */
typedef struct kace_fit_work {
    size_t profiles_torch, profiles_other; /* profiles left: PyTorch or LLM workloads, others */
    size_t cold_runs, warm_runs;           /* the plan's runs left (kace_schedule_left) */
    double profile_windows;                /* a profile's windows that are the runs' window (the clean run's and
                                              the counters run's share: 1.5 by default; 0 when both are given) */
    double profile_fixed_s;                /* a profile's warm-ups and the windows it was given */
    double run_warmup_s;                   /* each run's warm-up */
    double scale;                          /* the expected costs times this (0: 1; below 1 for stand-ins) */
} kace_fit_work;

/* The longest window in [min_s, max_s] with which w takes at most
 * KACE_FIT_SHARE of seconds: max_s when it fits so, min_s when it fits
 * with none (or seconds is not positive). *need_s (NULL: not wanted): w's
 * expected time at the window. */
double kace_fit_window(const kace_fit_work *w, double seconds, double min_s, double max_s, double *need_s);

/* A plan's fingerprint: its text's FNV-1a, 16 hex digits. */
void kace_plan_fingerprint(const char *text, size_t len, char out[KACE_COMMAND_KEY_SIZE]);
/* The campaign's state in the store: kace/store.h (kace_campaign_plan_note ...). */

#ifdef __cplusplus
}
#endif

#endif
