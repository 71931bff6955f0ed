/* kace campaign PLAN: measures a plan of colocations, resumably.
 * kace campaign --device --catalog FILE --minutes M: one GPU allocation's
 * whole work (include/kace/campaign.h, docs/campaign.md). */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <glob.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "kace/catalog.h"
#include "kace/plan_make.h"
#include "kace/pool.h"
#include "kace/profile.h"
#include "kace/store_export.h"
#include "measure_cli.h"

/* With --device, the defaults of the options a user may give (seconds;
 * times KACE_CAMPAIGN_TIME_SCALE's 1/F for stand-ins): a run's warm-up (a
 * profile's counters run's too), a profile's clean run's, and the counters
 * run's window as a share of the clean run's (see profile_windows). The device dry run passes the same values,
 * scaled, and checks that the usage states them. */
#define DEVICE_WARMUP_S 1.0
#define DEVICE_PROFILE_WARMUP_S 2.0
#define DEVICE_COUNTERS_WINDOW_SHARE 0.5

/* A cold run's members start ahead this many runs before their turn: their
 * start-up (a PyTorch workload's 10-18 s) then hides behind that many runs
 * even where the runs before are short ones (a CUDA C pair). */
#define COLD_AHEAD 2

/* What a --device call was given. */
typedef struct device_args {
    const char *db;
    const char *plan;          /* a plan file (no catalog) */
    const char *catalog;       /* --catalog: the whole allocation from it */
    double minutes;
    const char *out_dir;       /* --out: export's folder */
    const char *workloads_dir; /* @W@ (default: the catalog's folder) */
    const char *python;        /* @PY@ (default python3) */
    const char *kace;          /* @KACE@: this program */
    const char *ncu;           /* --ncu PATH (NULL: none) */
    double profile_warmup_s;   /* < 0: DEVICE_PROFILE_WARMUP_S */
    double profile_window_s;   /* <= 0: the runs' window (the probe's) */
    double counters_window_s;  /* <= 0: DEVICE_COUNTERS_WINDOW_SHARE of the profile window */
    double fit_minutes;        /* --fit-minutes: what is left fits this from the call's start (0: no fit) */
    bool window_given;         /* --window: the probe's window is not used */
    bool pool_given;           /* --pool-members: the probe may lower the pool, never raise it */
    double time_scale;         /* the engine's allowances times this (engine.scale) */
} device_args;

static int campaign_usage(void)
{
    printf("usage: kace campaign [options] PLAN\n"
           "       kace campaign --device --minutes M [--catalog FILE | PLAN] [--out DIR] [options]\n"
           "Measures every colocation of PLAN (see include/kace/campaign.h or the README for the format:\n"
           "workloads, pairs, triples, occur N [seed S], splits P..., run A B @ P,Q, repeat N, mode, set)\n"
           "that the store does not hold yet, so an interrupted campaign continues where it stopped.\n"
           "One MPS daemon serves the campaign's MPS runs; it is quit before each time-sliced run and started\n"
           "again for the next MPS run. A run that fails is recorded and not retried; an MPS run that MPS\n"
           "was not seen serving is not recorded and stops the campaign.\n"
           "  --db PATH        the store\n"
           "  --dry-run        list the plan (done / to do) and measure nothing\n"
           "  --max-runs N     stop after measuring N runs (device time is short: continue later)\n"
           "  --pool           measure the MPS runs in a warm pool: each (workload, MPS share) started once\n"
           "                   and paused between runs; the time-sliced runs come after them, started afresh\n"
           "  --pool-members N at most N processes in the pool at once (default 16, or with --device the\n"
           "                   probe's size, up to 32; MPS servers accept a limited number of clients, and\n"
           "                   each member keeps its memory while it waits)\n"
           "  --device         one allocation's call (docs/campaign.md), each step only when the store says\n"
           "                   it has work and its time fits before the deadline; what is left, the next\n"
           "                   call does. With --catalog: probe once (the pool's size, and the window unless\n"
           "                   --window is given), profile each workload not profiled yet (GPU alone), make\n"
           "                   or extend the plan, measure it, ncu, export. With PLAN: its measuring\n"
           "                   steps (time-sliced runs, the warm pool, cold repeats), ncu, export. Needs --minutes\n"
           "  --minutes M      with --device: the allocation's minutes of commands (the call's deadline)\n"
           "  --catalog FILE   with --device: the workloads (workloads/catalog.txt: NAME KIND COMMAND...)\n"
           "  --workloads-dir D  @W@ in the catalog's commands (default: the catalog's folder)\n"
           "  --python P       @PY@ in the catalog's commands (default python3)\n"
           "  --out DIR        with --device: export the store's dataset (CSV files) into DIR at the end\n"
           "  --ncu PATH|none  with --device: ncu, last, on each profiled workload, with time left (default none)\n"
           "  --profile-warmup S, --profile-window S, --counters-window S\n"
           "                   with --catalog: each profile's clean run's warm-up (default 2: its launches\n"
           "                   rank the kernels for the replay cap; the counters run's warm-up is --warmup's,\n"
           "                   from its first step at speed, after the replayed one), its window (default: the\n"
           "                   runs' window, the probe's) and its counters run's window (default half the\n"
           "                   clean run's: it needs whole steps for the kernel mix, not the throughput's\n"
           "                   bound on noise)\n"
           "  --fit-minutes F  with --device: shorten the window (never below 1 s, never above the probe's or\n"
           "                   --window's) so that all that is left, profiles and runs, is expected to take F\n"
           "                   minutes from the call's start: the whole dataset at more noise per run, rather\n"
           "                   than part of it (F may exceed --minutes: a visit of several calls; each call\n"
           "                   sizes it again before it profiles and before it measures; default: no fit)\n"
           MEASURE_CLI_USAGE
           "With --device, --warmup defaults to 1 (a pool member resumes warm at its next step, and a\n"
           "cold run's warm-up starts at its first progress record, after its first, slow step) and\n"
           "--window to the probe's (sized from a clean run's noise; 30 without a probe).\n"
           "Exit status: 0 the plan is done or --max-runs reached (--device: or the deadline came),\n"
           "1 an error stopped it, 2 usage, 128+N interrupted by signal N (finished runs are kept, the current\n"
           "one is not recorded).\n");
    return EXIT_OK;
}

static void describe(const kace_measure_spec *s, char *out, size_t size)
{
    size_t at = 0;
    for (int i = 0; i < s->k && at < size; i++)
        at += (size_t)snprintf(out + at, size - at, "%s%s", i ? " + " : "", s->workload[i]);
    bool split = false;
    for (int i = 0; i < s->k; i++)
        split |= s->mps_pct[i] != 100;
    if (split)
        for (int i = 0; i < s->k && at < size; i++)
            at += (size_t)snprintf(out + at, size - at, "%s%d", i ? "," : " @", s->mps_pct[i]);
    if (at < size)
        snprintf(out + at, size - at, "%s #%d", s->timeslice ? " (time-slicing)" : "", s->repetition);
}

/* ---- --device: one allocation's schedule (kace_schedule_run) ---- */

typedef struct device_call {
    kace_ctx *ctx;
    kace_store *store;
    measure_cli_options *mo;
    kace_mps *mps;
    kace_gpu *gpu;
    kace_measure_pool *pool;
    kace_measure_spec *pool_specs; /* the pool's members' specs: they outlive it */
    kace_measure_pool *next;       /* the next pool, its members started ahead (held at their CUDA start) */
    kace_measure_spec *next_specs; /* its members' specs */
    const char *cupti;             /* the injection library whose gate holds them (NULL: none started ahead) */
    /* Cold runs whose members started ahead, held at their CUDA start
     * (start_cold_ahead): the one about to run and the next COLD_AHEAD told. */
    kace_measure_ahead *cold[COLD_AHEAD + 1];
    kace_measure_spec cold_told[COLD_AHEAD];
    size_t n_cold_told;
    /* Every process held ahead (the next pool's, the next cold runs'): each
     * run moves them off its members' CPUs (kace_run_options.held). */
    kace_held held;
    unsigned long long member_kib; /* one member's memory as this call's probe measured it (0: unknown) */
    size_t pool_max, runs, ok, failed;
    int64_t allocation_id;
    bool daemon_wanted;
    kace_key_cache *keys; /* the call's command keys: each workload's files read once */
} device_call;

static double device_now_s(void *arg)
{
    (void)arg;
    return (double)kace_monotonic_ns() / 1e9;
}

static kace_status device_stored_times(void *arg, const char *step, size_t *runs, double *seconds)
{
    device_call *d = arg;
    return kace_campaign_step_times(d->ctx, d->store, step, runs, seconds);
}

/* Whether spec is stored for good (kace_plan_should_measure), and whether it
 * is a failed run to measure again. */
static kace_status device_state(device_call *d, const kace_measure_spec *spec, bool *done, bool *retry)
{
    kace_plan_entry e = {.spec = *spec};
    char **cmd[KACE_MAX_K] = {0};
    const char *names[KACE_MAX_K];
    char key[KACE_COMMAND_KEY_SIZE], run_key[KACE_MAX_K * (KACE_NAME_MAX + 8) + 320];
    kace_attempt_state state;
    kace_status st = KACE_OK;
    for (int m = 0; m < spec->k && !st; m++) {
        names[m] = spec->workload[m];
        st = kace_store_get_command(d->ctx, d->store, spec->workload[m], &cmd[m]);
    }
    kace_plan_entry_key(&e, run_key, sizeof run_key);
    if (!st && (st = kace_cached_members_key(d->ctx, d->keys, spec->k, names, (char *const *const *)cmd, key)) ==
                   KACE_OK)
        st = kace_attempt_state_load(d->ctx, d->store, run_key, key, &state);
    for (int m = 0; m < spec->k; m++)
        free(cmd[m]);
    if (st)
        return st;
    *done = !kace_plan_should_measure(&state);
    *retry = !*done && state.stored;
    return KACE_OK;
}

static kace_status device_is_done(void *arg, const kace_measure_spec *spec, bool *done)
{
    bool retry;
    return device_state(arg, spec, done, &retry);
}

static bool device_stop(void *arg)
{
    (void)arg;
    return cli_interrupted != 0;
}

/* The options of one run, its timeout cut to what the deadline leaves. */
static kace_status device_options(device_call *d, const kace_measure_spec *spec, double timeout_s,
                                  kace_measure_options *opt, char *label, size_t label_size)
{
    bool done, retry;
    kace_status st = device_state(d, spec, &done, &retry);
    if (st)
        return st;
    snprintf(label, label_size, "[%zu]", d->runs + 1);
    *opt = (kace_measure_options){.mps = d->mps, .gpu_access = d->gpu, .gpu = d->mo->gpu, .retry_failed = retry};
    measure_cli_run_options(d->mo, &opt->run, label);
    /* Host contention controlled: a share of kace's CPUs per pool member (the
     * probe's pool size once it ran), the same share for a cold run's member i. */
    opt->run.cpu_shares = (unsigned)d->pool_max;
    double own = opt->run.timeout_s > 0 ? opt->run.timeout_s : opt->run.warmup_s + opt->run.window_s + 120;
    opt->run.timeout_s = own < timeout_s ? own : timeout_s;
    opt->timeout_is_deadline = timeout_s < own; /* cut there: the next call measures it */
    return KACE_OK;
}

/* The daemon for an MPS run: started for the first, again after time-sliced
 * runs or a failure (a fresh one), or when it died. */
static kace_status device_mps_up(device_call *d)
{
    if (kace_mps_alive(d->mps))
        return KACE_OK;
    kace_measure_pool_stop(&d->pool); /* clients of a daemon that has gone */
    if (d->daemon_wanted) { /* it died: a fresh start; members held at the gate outlive a quit (kace_mps_hold) */
        kace_measure_pool_stop(&d->next);
        fprintf(stderr, "kace: warning: the MPS daemon died; starting it again\n");
    }
    kace_status st = kace_mps_restart(d->ctx, d->mps);
    d->daemon_wanted = st == KACE_OK;
    return st;
}

/* After a run: a failure or a member that ended mid-step under MPS gets the
 * next MPS run a fresh daemon and pool (as a campaign without --device). */
static kace_status device_after_run(device_call *d, const kace_measure_spec *spec, const char *label,
                                    kace_measure_result *res)
{
    char what[1200];
    describe(spec, what, sizeof what);
    d->runs++;
    if (res->status == KACE_RUN_OK)
        d->ok++;
    else
        d->failed++;
    printf("%s %s: ", label, what);
    measure_cli_print_result(spec, res, false);
    bool mid_step = false;
    for (int m = 0; m < spec->k; m++)
        mid_step |= kace_proc_ended_mid_step(&res->proc[m]);
    if (!spec->timeslice && (res->status != KACE_RUN_OK || mid_step)) {
        fprintf(stderr, "kace: %s %s under MPS: the next MPS run starts a fresh MPS daemon\n", label,
                res->status != KACE_RUN_OK ? "failed" : "ended mid-step");
        kace_measure_pool_stop(&d->pool);
        kace_measure_pool_stop(&d->next); /* the daemon's instance is every process with its pipe in its environment */
        if (measure_cli_quit_mps(d->ctx, d->mps, true) != 0)
            return kace_fail(d->ctx, KACE_ERR_IO, "the MPS daemon did not quit");
        d->daemon_wanted = false;
    }
    return KACE_OK;
}

/* A run not measured: cancelled by a signal (said when the call ends), or
 * cut by the deadline (during its window, or its pool's start), which a
 * later call measures. */
static kace_status device_cut(const kace_measure_spec *spec, const char *label)
{
    if (!cli_interrupted) {
        char what[1200];
        describe(spec, what, sizeof what);
        printf("%s %s: the deadline came before it was measured: not stored, the next call measures it\n", label,
               what);
    }
    return KACE_OK;
}

static size_t ahead_room(const device_call *d);

/* Starts ahead the members of the next cold runs told (up to COLD_AHEAD
 * of specs), each held at its CUDA start, so that their start-up happens
 * while the runs before measure. Without the injection library, the memory
 * or a free slot, a run starts afresh at its turn. */
static void start_cold_ahead(device_call *d, const kace_measure_spec *specs, size_t n)
{
    d->n_cold_told = n < COLD_AHEAD ? n : COLD_AHEAD;
    memcpy(d->cold_told, specs, d->n_cold_told * sizeof *specs);
    for (size_t t = 0; t < d->n_cold_told && d->cupti; t++) {
        const kace_measure_spec *next = &d->cold_told[t];
        size_t free_slot = COLD_AHEAD + 1;
        bool held = false;
        for (size_t i = 0; i <= COLD_AHEAD; i++) {
            held |= kace_measure_ahead_holds(d->cold[i], next);
            if (!d->cold[i] && free_slot > COLD_AHEAD)
                free_slot = i;
        }
        kace_measure_options opt;
        char label[64];
        if (held || free_slot > COLD_AHEAD || ahead_room(d) < (size_t)next->k ||
            device_options(d, next, INFINITY, &opt, label, sizeof label))
            continue;
        opt.run.held = &d->held;
        kace_ctx *scratch = kace_ctx_new();
        kace_status st = scratch ? kace_measure_start_ahead(scratch, d->store, next, &opt, d->cupti,
                                                            &d->cold[free_slot])
                                 : KACE_ERR_NOMEM;
        if (st)
            fprintf(stderr, "kace: warning: a cold run's members not started ahead: %s\n",
                    scratch ? kace_errmsg(scratch) : "out of memory");
        kace_ctx_free(&scratch);
    }
}

/* Takes the run started ahead for spec, if any (the caller frees it), and
 * ends those started for runs no longer told (they will not come). */
static kace_measure_ahead *take_cold_ahead(device_call *d, const kace_measure_spec *spec)
{
    kace_measure_ahead *mine = NULL;
    for (size_t i = 0; i <= COLD_AHEAD; i++) {
        if (!mine && kace_measure_ahead_holds(d->cold[i], spec)) {
            mine = d->cold[i];
            d->cold[i] = NULL;
            continue;
        }
        bool told = false;
        for (size_t t = 0; t < d->n_cold_told && d->cold[i]; t++)
            told |= kace_measure_ahead_holds(d->cold[i], &d->cold_told[t]);
        if (!told)
            kace_measure_ahead_free(&d->cold[i]);
    }
    return mine;
}

static void cold_ahead_free(device_call *d)
{
    for (size_t i = 0; i <= COLD_AHEAD; i++)
        kace_measure_ahead_free(&d->cold[i]);
    d->n_cold_told = 0;
}

static kace_status device_measure_cold(void *arg, const kace_measure_spec *spec, double timeout_s, bool *stored)
{
    device_call *d = arg;
    *stored = false;
    /* A cold run starts its processes alone on the GPU; those held at their
     * CUDA start (the next runs' and pool's) are not on it yet. */
    kace_measure_pool_stop(&d->pool);
    kace_measure_ahead *mine = take_cold_ahead(d, spec);
    kace_status st;
    if (spec->timeslice) {
        if (measure_cli_quit_mps(d->ctx, d->mps, d->mo->quiet) != 0) {
            kace_measure_ahead_free(&mine);
            return kace_fail(d->ctx, KACE_ERR_IO, "the MPS daemon did not quit before a time-sliced run");
        }
        d->daemon_wanted = false;
    } else if ((st = device_mps_up(d))) {
        kace_measure_ahead_free(&mine);
        return st;
    }
    kace_measure_options opt;
    char label[64];
    if ((st = device_options(d, spec, timeout_s, &opt, label, sizeof label))) {
        kace_measure_ahead_free(&mine);
        return st;
    }
    opt.run.held = &d->held;
    kace_measure_result res;
    st = kace_measure_ahead_run(d->ctx, d->store, spec, &opt, mine, &res);
    kace_measure_ahead_free(&mine);
    measure_cli_progress_done();
    if (st || res.cancelled)
        return st ? st : device_cut(spec, label);
    *stored = true;
    return device_after_run(d, spec, label, &res);
}

/* The next pool's members started ahead (kace_measure_pool_start_ahead):
 * they import and build on the CPU while this pool measures, held at their
 * CUDA start, neither MPS clients nor on the GPU until their pool opens. At
 * most as many as the host's MemAvailable holds (AHEAD_MEM_FRACTION of it,
 * a member taking what the probe measured, else AHEAD_MEM_GIB); the rest
 * start when it opens. */
#define AHEAD_MEM_GIB 4.0
#define AHEAD_MEM_FRACTION 0.8

static size_t ahead_room(const device_call *d)
{
    double kib = (double)kace_probe_mem_available_kib();
    double member = d->member_kib > 0 ? (double)d->member_kib : AHEAD_MEM_GIB * 1024 * 1024;
    return kib > 0 ? (size_t)(AHEAD_MEM_FRACTION * kib / member) : 0;
}

/* Starts ahead the pool for specs[j..n) (as many whole runs as it holds). */
static void start_ahead(device_call *d, const kace_measure_spec *specs, size_t n, size_t j,
                        const kace_measure_options *opt)
{
    size_t room = ahead_room(d);
    if (j >= n || room == 0)
        return;
    memcpy(d->next_specs, specs + j, (n - j) * sizeof *specs);
    kace_ctx *scratch = kace_ctx_new();
    kace_status st = scratch ? kace_measure_pool_start_ahead(scratch, d->store, d->next_specs, n - j, d->pool_max, opt,
                                                             d->cupti, room, &d->next)
                             : KACE_ERR_NOMEM;
    if (st) {
        fprintf(stderr, "kace: warning: pool members not started ahead in this call: %s\n",
                scratch ? kace_errmsg(scratch) : "out of memory");
        d->cupti = NULL; /* not tried again */
    }
    kace_ctx_free(&scratch);
}

/* Starts ahead the pool that follows the current one: the first of specs
 * after i that the current pool does not hold, and the runs after it. */
static void start_next_ahead(device_call *d, const kace_measure_spec *specs, size_t n, size_t i,
                             const kace_measure_options *opt)
{
    if (d->next || !d->cupti || !d->pool)
        return;
    size_t j = i + 1;
    while (j < n && (specs[j].timeslice || kace_measure_pool_has(d->pool, &specs[j])))
        j++;
    start_ahead(d, specs, n, j, opt);
}

/* The schedule's next runs (kace_schedule_ops.coming), told before each
 * run: a cold run's members, or the first pool's while the time-sliced
 * runs measure, start ahead now (the pool step starts its next pools
 * itself, start_next_ahead). */
static void device_coming(void *arg, const char *step, const kace_measure_spec *specs, size_t n)
{
    device_call *d = arg;
    if (n == 0 || !d->cupti)
        return;
    if (strcmp(step, "pool") != 0) {
        start_cold_ahead(d, specs, n);
        return;
    }
    kace_measure_options opt;
    char label[64];
    if (d->pool || d->next || device_options(d, &specs[0], INFINITY, &opt, label, sizeof label))
        return;
    opt.run.held = &d->held;
    start_ahead(d, specs, n, 0, &opt);
}

static kace_status device_measure_warm(void *arg, const kace_measure_spec *specs, size_t n, size_t i,
                                       double timeout_s, bool *stored)
{
    device_call *d = arg;
    *stored = false;
    const kace_measure_spec *spec = &specs[i];
    kace_status st = device_mps_up(d);
    kace_measure_options opt;
    char label[64];
    if (st || (st = device_options(d, spec, timeout_s, &opt, label, sizeof label)))
        return st;
    opt.run.held = &d->held;
    if (d->pool && !kace_measure_pool_has(d->pool, spec))
        kace_measure_pool_stop(&d->pool); /* the next runs' members, in a fresh pool */
    if (!d->pool) {
        /* The start's timeout is the run's (cut to the deadline); the run gets what the start left. */
        int64_t t0 = kace_monotonic_ns();
        if (d->next && kace_measure_pool_has(d->next, spec)) {
            /* Started ahead: its gates open now that the last pool's clients have left. */
            kace_measure_spec *t = d->pool_specs;
            d->pool_specs = d->next_specs;
            d->next_specs = t;
            d->pool = d->next;
            d->next = NULL;
            if ((st = kace_measure_pool_open(d->ctx, d->pool, &opt, 0))) {
                kace_measure_pool_stop(&d->pool);
                return st;
            }
        } else {
            kace_measure_pool_stop(&d->next);
            memcpy(d->pool_specs, specs + i, (n - i) * sizeof *specs);
            if ((st = kace_measure_pool_start(d->ctx, d->store, d->pool_specs, n - i, d->pool_max, &opt, 0, &d->pool)))
                return st;
        }
        double left = timeout_s - (double)(kace_monotonic_ns() - t0) / 1e9;
        if (!(left > 0)) { /* the deadline came while the pool started: a call's end, not a failure */
            kace_measure_pool_stop(&d->pool);
            return device_cut(spec, label);
        }
        if (opt.run.timeout_s > left) {
            opt.run.timeout_s = left;
            opt.timeout_is_deadline = true;
        }
    }
    start_next_ahead(d, specs, n, i, &opt);
    kace_measure_result res;
    st = kace_measure_in_pool(d->ctx, d->store, d->pool, spec, &opt, &res);
    measure_cli_progress_done();
    if (st) {
        kace_measure_pool_stop(&d->pool);
        return st;
    }
    if (res.cancelled)
        return device_cut(spec, label);
    *stored = true;
    return device_after_run(d, spec, label, &res);
}

static kace_status device_step_done(void *arg, const kace_schedule_report *r)
{
    device_call *d = arg;
    printf("step %s: %zu runs planned, %zu stored before, %zu measured in %.1f s, %zu left for the next call "
           "(%.1f s a run, %s)\n",
           r->step, r->planned, r->done_before, r->measured, r->seconds, r->left, r->run_s,
           r->measured_run_s ? "measured" : "from the plan's windows");
    return kace_campaign_step_note(d->ctx, d->store, d->allocation_id, r->step, r->measured, r->left, r->seconds);
}

static char *read_plan_text(kace_ctx *ctx, const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    size_t cap = 0;
    *len = 0;
    if (!f) {
        kace_fail(ctx, KACE_ERR_IO, "%s: %s", path, strerror(errno));
        return NULL;
    }
    for (;;) {
        if (*len == cap) {
            char *b = cap < ((size_t)64 << 20) ? realloc(buf, cap ? cap * 2 : 4096) : NULL;
            if (!b) {
                kace_fail(ctx, KACE_ERR_INVALID, "%s: out of memory or a plan larger than 64 MiB", path);
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = b;
            cap = cap ? cap * 2 : 4096;
        }
        size_t got = fread(buf + *len, 1, cap - *len, f);
        *len += got;
        if (got == 0)
            break;
    }
    bool bad = ferror(f);
    fclose(f);
    if (bad) {
        kace_fail(ctx, KACE_ERR_IO, "%s: read error", path);
        free(buf);
        return NULL;
    }
    return buf;
}

/* ---- the whole allocation's call: the engine's steps (kace_campaign_run) ----
 *
 * From a catalog: profile (GPU alone, no MPS), plan (made or extended in C),
 * measure (the plan's schedule above), ncu, export. From a plan file: its
 * measuring steps, ncu and export. Each step reads its done check from the
 * store, so a killed call loses nothing stored and the next resumes. */

typedef struct engine {
    device_call *d;
    const device_args *args;
    double allocation_s;
    kace_catalog catalog; /* empty without --catalog */
    int64_t catalog_id;
    char *plan_text;      /* the plan measured (a file's, or the one made from the catalog) */
    size_t plan_len;
    kace_plan *plan;
    const char **profiled; /* the catalog's profiled workloads, in catalog order */
    size_t n_profiled, n_dropped;
    const char **plannable; /* those profiled or still to profile (not dropped), in catalog order */
    size_t n_plannable;
    size_t torch_to_profile; /* of those to profile, PyTorch or LLM workloads */
    double window_bound_s;   /* --fit-minutes: the window before any fit (the probe's or --window's) */
    const char *cupti;
    bool probe_applied;    /* the stored probe's pool size and window are this call's */
    bool ncu_boost;        /* ncu --help lists --pipeline-boost-state */
    bool ncu_checked;
    double scale;          /* the engine's fixed allowances times this: 1, or for stand-ins that run
                              F times faster 1/F ($KACE_CAMPAIGN_TIME_SCALE, docs/campaign.md) */
} engine;

/* $KACE_CUPTI_LIBRARY, else libkace_cupti.so beside the kace binary (as kace profile finds it). */
static const char *find_cupti(void)
{
    static char path[PATH_MAX];
    const char *env = getenv("KACE_CUPTI_LIBRARY");
    if (env && *env)
        return env;
    ssize_t n = readlink("/proc/self/exe", path, sizeof path - 32);
    if (n <= 0)
        return NULL;
    path[n] = '\0';
    char *slash = strrchr(path, '/');
    if (!slash)
        return NULL;
    snprintf(slash + 1, sizeof path - (size_t)(slash + 1 - path), "libkace_cupti.so");
    return path;
}

static bool is_file(const char *p)
{
    struct stat sb;
    return p && stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

static double now_s(void)
{
    return (double)kace_monotonic_ns() / 1e9;
}

/* A workload's command key: a catalog entry's as written (the same wherever
 * the bundle is unpacked), else its command's (kace/campaign.h). */
static kace_status target_key(kace_ctx *ctx, kace_key_cache *keys, const char *written, char *const *argv,
                              char key[KACE_COMMAND_KEY_SIZE])
{
    return kace_cached_command_key(ctx, keys, written, argv, key);
}

/* The plan (re)parsed from text, replacing the one held. */
static kace_status engine_set_plan(engine *e, char *text, size_t len, const char *origin)
{
    kace_plan *plan = NULL;
    kace_status st = kace_plan_parse(e->d->ctx, text, len, origin, &plan);
    if (st) {
        free(text);
        return st;
    }
    kace_measure_spec *specs = calloc(plan->n ? plan->n : 1, sizeof *specs);
    if (!specs) {
        free(text);
        kace_plan_free(&plan);
        return kace_fail(e->d->ctx, KACE_ERR_NOMEM, "out of memory");
    }
    kace_measure_spec *next_specs = calloc(plan->n ? plan->n : 1, sizeof *next_specs);
    if (!next_specs) {
        free(specs);
        free(text);
        kace_plan_free(&plan);
        return kace_fail(e->d->ctx, KACE_ERR_NOMEM, "out of memory");
    }
    kace_measure_pool_stop(&e->d->next); /* its specs go with the old plan */
    free(e->d->pool_specs);
    free(e->d->next_specs);
    e->d->pool_specs = specs;
    e->d->next_specs = next_specs;
    kace_plan_free(&e->plan);
    free(e->plan_text);
    e->plan = plan;
    e->plan_text = text;
    e->plan_len = len;
    return KACE_OK;
}

static kace_schedule_ops schedule_ops(device_call *d)
{
    return (kace_schedule_ops){.arg = d,
                               .now_s = device_now_s,
                               .stored_times = device_stored_times,
                               .is_done = device_is_done,
                               .measure_cold = device_measure_cold,
                               .measure_warm = device_measure_warm,
                               .coming = device_coming,
                               .stop = device_stop,
                               .step_done = device_step_done};
}

/* With --fit-minutes, the schedule projects runs not yet stored as the fit
 * does (its expected costs, not the start allowances), and counts on a next
 * call only for what the fit has beyond this one: a step that does not fit
 * the time left is not left whole to a call that may not come. */
static kace_schedule_config schedule_config(const engine *e)
{
    double reserve = e->args->out_dir ? KACE_CAMPAIGN_EXPORT_RESERVE_S * e->scale : 0;
    kace_schedule_config c = {.allocation_s = e->allocation_s - reserve,
                              .warmup_s = e->d->mo->warmup_s,
                              .window_s = e->d->mo->window_s,
                              .pool_members = e->d->pool_max,
                              .allowance_scale = e->scale};
    if (e->args->fit_minutes > 0) {
        double beyond = e->args->fit_minutes * 60 - e->allocation_s;
        c.cold_start_s = KACE_FIT_COLD_RUN_S * e->scale;
        c.warm_start_s = KACE_FIT_WARM_RUN_S * e->scale;
        c.next_call_s = beyond > 0 ? beyond : KACE_SCHEDULE_NO_NEXT_CALL;
    }
    return c;
}

/* The profile windows: both runs' warm-ups and windows. The clean run's
 * throughput and NVML values have the runs' bound on noise, so its window
 * is theirs (the probe sized it); the counters run's window gives the
 * kernel mix of whole steps (BERT's step on the H200: 0.047 s), so half of
 * that is ample, as kace profile's defaults are (30 and 15 s). The clean
 * run's warm-up also ranks the kernels for the replay cap; the counters
 * run's starts once a step runs at speed after the replayed first one, a
 * cold run's warm-up like any other (the H200's BERT ran steady from the
 * step after its first), so it is the runs'. */
static void profile_windows(const engine *e, kace_profile_options *po)
{
    const device_args *a = e->args;
    po->clean.warmup_s = a->profile_warmup_s >= 0 ? a->profile_warmup_s : DEVICE_PROFILE_WARMUP_S * e->scale;
    po->counters.warmup_s = e->d->mo->warmup_s;
    po->clean.window_s = a->profile_window_s > 0 ? a->profile_window_s : e->d->mo->window_s;
    po->counters.window_s =
        a->counters_window_s > 0 ? a->counters_window_s : DEVICE_COUNTERS_WINDOW_SHARE * po->clean.window_s;
}

static double profile_windows_s(const engine *e)
{
    kace_profile_options po;
    kace_profile_options_init(&po);
    profile_windows(e, &po);
    return po.clean.warmup_s + po.clean.window_s + po.counters.warmup_s + po.counters.window_s;
}

/* The probe's pool size is the pool's: below the default when the clients
 * or the memory allow fewer, above it (up to KACE_POOL_MAX_MEMBERS) when
 * they allow more, since a larger pool has fewer starts; --pool-members
 * stays the upper bound. Its window is the runs' unless --window was given. */
static void probe_apply(engine *e, size_t members, double window_s)
{
    if (members > 0 && (members < e->d->pool_max || !e->args->pool_given))
        e->d->pool_max = members;
    bool window = isfinite(window_s) && window_s > 0 && !e->args->window_given;
    if (window)
        e->d->mo->window_s = window_s;
    printf("probe: this call's pool holds at most %zu members; its window is %.2f s%s\n", e->d->pool_max,
           e->d->mo->window_s, window ? " (the probe's)" : "");
}

/* MPS clients the pool leaves free below the server's limit when the probe
 * met it. */
#define PROBE_CLIENT_MARGIN 2

static kace_status step_probe(engine *e, double until_s, kace_campaign_step_report *r)
{
    device_call *d = e->d;
    kace_ctx *ctx = d->ctx;
    kace_status st = device_mps_up(d); /* the daemon the pool will use */
    if (st)
        return st;
    double most = 90 * e->scale;
    /* Without --pool-members the pool may grow to what the server and the
     * memory allow: the clients are counted the margin past the most, so
     * that a limit met bounds the pool only when it lies below it. */
    size_t max = e->args->pool_given ? d->pool_max : KACE_POOL_MAX_MEMBERS;
    kace_probe_options o = {.mps = d->mps,
                            .max_members = max,
                            .client_cap = e->args->pool_given ? max : max + PROBE_CLIENT_MARGIN,
                            .client_margin = PROBE_CLIENT_MARGIN,
                            .timeout_s = until_s < most ? until_s : most};
    if (e->scale != 1) { /* the curve (1 + 6 s) and the window's bounds (1 and 30 s) for stand-ins that run faster */
        o.skip_s = 1 * e->scale;
        o.curve_s = 6 * e->scale;
        o.window_min_s = 1 * e->scale;
        o.window_max_s = 30 * e->scale;
    }
    kace_run_options_init(&o.run);
    o.run.cancel = &cli_interrupted;
    o.run.stderr_fd = d->mo->log_fd;
    o.run.term_grace_max_s = d->mo->stop_grace_max_s;
    kace_probe_result res;
    if ((st = kace_pool_probe_catalog(ctx, &e->catalog, &o, &res)) || cli_interrupted)
        return st;
    /* Past the default only on evidence: the server's clients counted and a
     * member's memory measured. */
    if (!e->args->pool_given && res.pool_members > d->pool_max && (!res.clients_probed || res.member_rss_kib == 0)) {
        res.pool_members = d->pool_max;
        res.pool_bound = "caller";
    }
    d->member_kib = res.member_rss_kib;
    char evidence[1200];
    kace_probe_describe(&res, evidence, sizeof evidence);
    printf("%s\n", evidence);
    kace_campaign_probe_row row = {.clients_accepted = res.clients_probed ? (long long)res.clients_accepted : -1,
                                   .client_refused = res.client_refused,
                                   .mem_available_kib = res.mem_available_kib,
                                   .member_rss_kib = res.member_rss_kib,
                                   .window_s = res.window_s,
                                   .window_basis = res.window_basis,
                                   .pool_members = res.pool_members,
                                   .pool_bound = res.pool_bound,
                                   .seconds = res.seconds,
                                   .evidence = evidence};
    if ((st = kace_campaign_probe_note(ctx, d->store, d->allocation_id, &row)))
        return st;
    r->done = 1;
    return KACE_OK;
}

/* ncu's workloads: the catalog's profiled ones, or a plan file's that have
 * a stored command; argv owned where fetched from the store. */
typedef struct ncu_target {
    const char *name;
    char **argv;
    const char *written; /* its catalog line (NULL: a plan file's workload) */
    bool owned;
} ncu_target;

static void ncu_targets_free(ncu_target *t, size_t n)
{
    for (size_t i = 0; t && i < n; i++)
        if (t[i].owned)
            free(t[i].argv);
    free(t);
}

static kace_status ncu_targets(engine *e, ncu_target **out, size_t *n)
{
    kace_ctx *ctx = e->d->ctx;
    size_t cap = e->catalog.n > 0 ? e->n_profiled : (e->plan ? e->plan->n * KACE_MAX_K : 0);
    ncu_target *t = calloc(cap ? cap : 1, sizeof *t);
    *out = NULL;
    *n = 0;
    if (!t)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    size_t k = 0;
    if (e->catalog.n > 0) {
        for (size_t i = 0; i < e->n_profiled; i++) {
            const kace_catalog_entry *w = kace_catalog_find(&e->catalog, e->profiled[i]);
            t[k++] = (ncu_target){w->name, w->argv, w->text, false};
        }
    } else {
        for (size_t i = 0; e->plan && i < e->plan->n; i++)
            for (int m = 0; m < e->plan->entries[i].spec.k; m++) {
                const char *name = e->plan->entries[i].spec.workload[m];
                bool seen = false;
                for (size_t j = 0; j < k && !seen; j++)
                    seen = strcmp(t[j].name, name) == 0;
                char **argv = NULL;
                if (seen || kace_store_get_command(ctx, e->d->store, name, &argv) != KACE_OK)
                    continue; /* no command: nothing for ncu to run */
                t[k++] = (ncu_target){name, argv, NULL, true};
            }
    }
    *out = t;
    *n = k;
    return KACE_OK;
}

/* A profile try's need (kace_profile_need_s): its kind's start allowance,
 * the longest profile of its kind so far, its own try that ran out of time. */
static kace_status profile_need(engine *e, const kace_catalog_entry *w, const kace_profile_tries *t, double *need)
{
    double longest = 0;
    for (size_t i = 0; i < e->catalog.n; i++) {
        const kace_catalog_entry *o = &e->catalog.entries[i];
        kace_profile_tries ot;
        if (o->kind != w->kind)
            continue;
        kace_status st = kace_campaign_profile_tries(e->d->ctx, e->d->store, o->name, "", &ot);
        if (st)
            return st;
        if (ot.own_ok_s > longest)
            longest = ot.own_ok_s;
    }
    double cap = e->allocation_s - (e->args->out_dir ? KACE_CAMPAIGN_EXPORT_RESERVE_S * e->scale : 0);
    *need = kace_profile_need_s(profile_windows_s(e), kace_profile_start_s(w->kind) * e->scale, longest,
                                t->ran_out_s, cap);
    return KACE_OK;
}

/* The done checks (kace_campaign_ops.progress). */
static kace_status engine_progress(void *arg, kace_campaign_progress *p)
{
    engine *e = arg;
    kace_ctx *ctx = e->d->ctx;
    kace_status st = KACE_OK;
    memset(p, 0, sizeof *p);
    e->n_profiled = e->n_dropped = e->n_plannable = e->torch_to_profile = 0;
    for (size_t i = 0; i < e->catalog.n; i++) {
        const kace_catalog_entry *w = &e->catalog.entries[i];
        char key[KACE_COMMAND_KEY_SIZE];
        kace_profile_tries t;
        if ((st = target_key(ctx, e->d->keys, w->text, w->argv, key)) ||
            (st = kace_campaign_profile_tries(ctx, e->d->store, w->name, key, &t)))
            return st;
        bool dropped = !t.profiled && kace_profile_dropped(t.failures);
        if (!dropped)
            e->plannable[e->n_plannable++] = w->name;
        if (t.profiled) {
            e->profiled[e->n_profiled++] = w->name;
        } else if (dropped) {
            e->n_dropped++;
        } else {
            p->to_profile++;
            e->torch_to_profile += w->kind == KACE_CATALOG_TORCH || w->kind == KACE_CATALOG_LLM;
        }
    }
    p->profiled = e->n_profiled;
    if (e->catalog.n > 0) {
        char *text = NULL;
        size_t len = 0;
        int64_t plan_id = 0;
        if ((st = kace_campaign_made_plan(ctx, e->d->store, &text, &len, &plan_id)))
            return st;
        if (text && (!e->plan_text || len != e->plan_len || memcmp(text, e->plan_text, len) != 0)) {
            if ((st = engine_set_plan(e, text, len, "the stored plan")))
                return st;
        } else {
            free(text);
        }
        if (!e->plan) {
            p->unplanned = e->n_profiled >= 3 ? e->n_profiled : 0; /* a plan needs 3 (kace_plan_make) */
        } else {
            char *ext = NULL;
            size_t ext_len = 0;
            if ((st = kace_plan_extend(ctx, e->plan_text, e->plan_len, "the stored plan", e->profiled, e->n_profiled,
                                       &ext, &ext_len)))
                return st;
            p->unplanned = ext_len != e->plan_len || memcmp(ext, e->plan_text, ext_len) != 0;
            free(ext);
        }
    }
    p->have_plan = e->plan != NULL;
    if (e->plan) {
        kace_schedule_ops ops = schedule_ops(e->d);
        kace_schedule_config config = schedule_config(e);
        if ((st = kace_schedule_left(ctx, e->plan, &config, &ops, &p->runs_left, NULL)))
            return st;
    }
    p->can_ncu = e->args->ncu != NULL;
    ncu_target *t = NULL;
    size_t n_t = 0;
    if (p->can_ncu && (st = ncu_targets(e, &t, &n_t)))
        return st;
    for (size_t i = 0; i < n_t && !st; i++) {
        char key[KACE_COMMAND_KEY_SIZE];
        int ok = 0, failures = 0;
        if (!(st = target_key(ctx, e->d->keys, t[i].written, t[i].argv, key)) &&
            !(st = kace_campaign_ncu_tries(ctx, e->d->store, t[i].name, key, &ok, &failures)))
            p->ncu_left += ok == 0 && failures < KACE_PROFILE_MAX_FAILURES;
    }
    ncu_targets_free(t, n_t);
    if (st)
        return st;
    p->can_export = e->args->out_dir != NULL;
    /* The first minute's probe, once a campaign (its findings size every
     * later call's pool and window too): from a catalog, whose workloads it runs. */
    p->can_probe = e->catalog.n > 0;
    size_t members = 0;
    double window_s = NAN;
    if ((st = kace_campaign_probe_latest(ctx, e->d->store, &p->probed, &members, &window_s)))
        return st;
    if (p->probed && !e->probe_applied) {
        e->probe_applied = true;
        probe_apply(e, members, window_s);
    }
    return KACE_OK;
}

static void unlink_recordings(const char *recording)
{
    char pattern[PATH_MAX + 8];
    snprintf(pattern, sizeof pattern, "%s.[0-9]*", recording);
    glob_t g;
    if (glob(pattern, 0, NULL, &g) == 0) {
        for (size_t i = 0; i < g.gl_pathc; i++)
            unlink(g.gl_pathv[i]);
        globfree(&g);
    }
    unlink(recording);
}

/* Whether a failed profile ran out of time: a run's timeout, or the clean
 * run leaving the counters run too little of the budget. */
static bool profile_ran_out(const kace_profile_result *r, const char *msg)
{
    if (r->failure == KACE_PROFILE_FAIL_RUN)
        return (r->failed_run == 1 ? &r->clean : &r->counters)->status == KACE_PROC_TIMEOUT;
    return r->failure == KACE_PROFILE_FAIL_ERROR && strstr(msg, " budget") != NULL;
}

/* One profile try of w within need_s; its outcome noted. *cancelled: a
 * signal stopped it (nothing noted). */
/* A profile's options for w, recording into `recording`, within need_s. */
static void profile_options(engine *e, const kace_catalog_entry *w, const char *recording, double need_s,
                            kace_profile_options *po)
{
    kace_profile_options_init(po);
    profile_windows(e, po);
    po->name = w->name;
    po->argv = w->argv;
    po->cupti = e->cupti;
    po->recording = recording;
    po->cancel = &cli_interrupted;
    po->budget_s = need_s; /* both runs within the need: the runner's timeouts hold the deadline */
    po->clean.timeout_s = po->counters.timeout_s = need_s;
    po->clean.term_grace_max_s = po->counters.term_grace_max_s = e->d->mo->stop_grace_max_s;
    po->clean.stderr_fd = po->counters.stderr_fd = e->d->mo->log_fd;
}

static kace_status new_recording(kace_ctx *ctx, char *recording, size_t n)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(recording, n, "%s/kace-cupti-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    int fd = mkstemp(recording);
    if (fd < 0)
        return kace_fail(ctx, KACE_ERR_IO, "cannot create a recording file %s: %s", recording, strerror(errno));
    close(fd);
    return KACE_OK;
}

/* Workloads started ahead of their profile (kace_profile_ahead_start): their
 * clean and counters processes import and build on the CPU while another
 * is profiled, each held at its CUDA start until its turn. At most
 * PROFILE_AHEAD workloads, and another only while the host has
 * PROFILE_AHEAD_MEM_GIB available (MemAvailable) for each of its two
 * processes (a PyTorch model built on the CPU holds a few GiB). */
#define PROFILE_AHEAD 3
#define PROFILE_AHEAD_MEM_GIB 4.0

typedef struct profile_ahead {
    size_t index;            /* its catalog entry */
    char recording[PATH_MAX];
    kace_profile_options po; /* what it was started with (outlives it) */
    kace_profile_ahead *ahead;
} profile_ahead;

static bool ahead_memory_ok(void)
{
    return (double)kace_probe_mem_available_kib() >= 2 * PROFILE_AHEAD_MEM_GIB * 1024 * 1024;
}

static void ahead_end(profile_ahead *a)
{
    kace_profile_ahead_free(&a->ahead); /* kills what is left of its process groups */
    unlink_recordings(a->recording);
}

/* One profile try of w within need_s, with its processes started ahead
 * (pa, or NULL); its outcome noted. *cancelled: a signal stopped it
 * (nothing noted). */
static kace_status profile_one(engine *e, const kace_catalog_entry *w, const char *key, double need_s,
                               profile_ahead *pa, bool *cancelled)
{
    device_call *d = e->d;
    kace_ctx *ctx = d->ctx;
    *cancelled = false;
    char recording[PATH_MAX];
    kace_status made = pa ? KACE_OK : new_recording(ctx, recording, sizeof recording);
    if (made)
        return made;
    if (pa)
        memcpy(recording, pa->recording, sizeof recording);
    kace_profile_options po;
    profile_options(e, w, recording, need_s, &po);
    po.ahead = pa ? pa->ahead : NULL;
    kace_profile_result res = {0};
    kace_import_batch *batch = NULL;
    double t0 = now_s();
    printf("profile %s: %s alone on the GPU, within %.0f s\n", w->name, kace_catalog_kind_name(w->kind), need_s);
    fflush(stdout);
    kace_status st = kace_profile_run(ctx, d->gpu, &po, &res);
    double took = now_s() - t0;
    const char *status = "ok";
    char why[600] = "";
    if (st) {
        snprintf(why, sizeof why, "%s", kace_errmsg(ctx));
        const kace_proc_result *pr = res.failed_run == 2 ? &res.counters : &res.clean;
        /* A signal's doing, not the workload's: nothing is noted, and the
         * call ends as killed (not failed) with what is left counted. */
        if ((res.failure == KACE_PROFILE_FAIL_RUN && pr->status == KACE_PROC_CANCELLED) || cli_interrupted) {
            *cancelled = true;
            st = KACE_OK;
            goto done;
        }
        if (res.failure == KACE_PROFILE_FAIL_RUN) {
            snprintf(why, sizeof why, "run %d %s: %s", res.failed_run, kace_proc_status_name(pr->status),
                     pr->detail);
        }
        status = profile_ran_out(&res, why) ? "timeout" : "failed";
        st = KACE_OK;
    } else {
        char date[16];
        time_t now = time(NULL);
        strftime(date, sizeof date, "%Y-%m-%d", localtime(&now));
        const char *gpu_name = kace_gpu_device_name(d->gpu);
        kace_source src = {gpu_name && gpu_name[0] ? gpu_name : NULL, "kace-profile", date};
        kace_import_stats stats;
        if ((st = kace_profile_batch(ctx, w->name, &res, &batch)) ||
            (st = kace_store_add_profile(ctx, d->store, batch, &src, w->name, w->argv, &stats)))
            goto done;
    }
    st = kace_campaign_profile_note(ctx, d->store, d->allocation_id, w->name, key, status, took, need_s);
    if (!st && strcmp(status, "ok") == 0)
        printf("profile %s: stored (%.4g samples/s) in %.1f s\n", w->name, res.clean.throughput.samples_per_s, took);
    else if (!st)
        printf("profile %s: %s after %.1f s: %s\n", w->name,
               strcmp(status, "timeout") == 0 ? "ran out of time" : "failed", took, why);
done:
    if (pa)
        kace_profile_ahead_free(&pa->ahead);
    unlink_recordings(recording);
    kace_import_batch_free(&batch);
    kace_profile_result_release(&res);
    return st;
}

/* Starts ahead the next workloads after catalog entry i that this pass
 * would profile (not profiled, not dropped, their need within what is left),
 * up to PROFILE_AHEAD of them started at once. */
static kace_status ahead_fill(engine *e, size_t i, double left_s, profile_ahead *ahead, size_t *n_ahead)
{
    kace_ctx *ctx = e->d->ctx;
    for (size_t j = i + 1; j < e->catalog.n && *n_ahead < PROFILE_AHEAD; j++) {
        bool started = false;
        for (size_t k = 0; k < *n_ahead; k++)
            started |= ahead[k].index == j;
        if (started)
            continue;
        if (!ahead_memory_ok())
            break;
        const kace_catalog_entry *w = &e->catalog.entries[j];
        char key[KACE_COMMAND_KEY_SIZE];
        kace_profile_tries t;
        double need = 0;
        kace_status st;
        if ((st = target_key(ctx, e->d->keys, w->text, w->argv, key)) ||
            (st = kace_campaign_profile_tries(ctx, e->d->store, w->name, key, &t)))
            return st;
        if (t.profiled || kace_profile_dropped(t.failures))
            continue;
        if ((st = profile_need(e, w, &t, &need)))
            return st;
        if (need > left_s)
            continue;
        profile_ahead *a = &ahead[*n_ahead];
        memset(a, 0, sizeof *a);
        a->index = j;
        if ((st = new_recording(ctx, a->recording, sizeof a->recording)))
            return st;
        profile_options(e, w, a->recording, need, &a->po);
        if ((st = kace_profile_ahead_start(ctx, &a->po, &a->ahead))) {
            unlink_recordings(a->recording);
            return st;
        }
        (*n_ahead)++;
    }
    return KACE_OK;
}

/* Takes catalog entry i's started-ahead processes out of the list (into
 * *out; false when there are none). */
static bool ahead_take(profile_ahead *ahead, size_t *n_ahead, size_t i, profile_ahead *out)
{
    for (size_t k = 0; k < *n_ahead; k++)
        if (ahead[k].index == i) {
            *out = ahead[k];
            out->po.recording = out->recording; /* its own copy's */
            ahead[k] = ahead[--*n_ahead];
            ahead[k].po.recording = ahead[k].recording;
            return true;
        }
    return false;
}

static kace_status step_profile(engine *e, double until_s, kace_campaign_step_report *r)
{
    device_call *d = e->d;
    kace_ctx *ctx = d->ctx;
    if (!d->gpu)
        return kace_fail(ctx, KACE_ERR_UNSUPPORTED, "profiling needs a GPU that NVML opens (see the note above)");
    if (!is_file(e->cupti = find_cupti()))
        return kace_fail(ctx, KACE_ERR_NOT_FOUND,
                         "the CUPTI injection library %s was not found (give its path in $KACE_CUPTI_LIBRARY)",
                         e->cupti ? e->cupti : "libkace_cupti.so");
    /* GPU alone, no MPS: a daemon left running (by a killed call) goes first. */
    kace_measure_pool_stop(&d->pool);
    if (measure_cli_quit_mps(ctx, d->mps, true) != 0)
        return kace_fail(ctx, KACE_ERR_IO, "the MPS daemon did not quit before the profiles");
    d->daemon_wanted = false;
    double t0 = now_s();
    bool *failed_now = calloc(e->catalog.n ? e->catalog.n : 1, sizeof *failed_now);
    if (!failed_now)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    kace_status st = KACE_OK;
    profile_ahead ahead[PROFILE_AHEAD];
    size_t n_ahead = 0;
    /* Two passes: the second tries again, with time left, what failed once in
     * the first (a dropped workload then no longer holds the plan back a call).
     * The first starts the next workloads ahead while one is profiled. */
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < e->catalog.n && !st && !cli_interrupted; i++) {
            const kace_catalog_entry *w = &e->catalog.entries[i];
            char key[KACE_COMMAND_KEY_SIZE];
            kace_profile_tries t;
            if (pass == 1 && !failed_now[i])
                continue;
            if ((st = target_key(ctx, e->d->keys, w->text, w->argv, key)) ||
                (st = kace_campaign_profile_tries(ctx, d->store, w->name, key, &t)))
                break;
            if (t.profiled || kace_profile_dropped(t.failures))
                continue;
            double need = 0;
            profile_ahead mine;
            bool started_ahead = ahead_take(ahead, &n_ahead, i, &mine);
            if ((st = profile_need(e, w, &t, &need))) {
                if (started_ahead)
                    ahead_end(&mine);
                break;
            }
            if (need > until_s - (now_s() - t0)) {
                if (started_ahead)
                    ahead_end(&mine);
                continue; /* left to the next call; a shorter need may still fit */
            }
            if (pass == 0 && (st = ahead_fill(e, i, until_s - (now_s() - t0) - need, ahead, &n_ahead))) {
                if (started_ahead)
                    ahead_end(&mine);
                break;
            }
            bool cancelled = false;
            st = profile_one(e, w, key, need, started_ahead ? &mine : NULL, &cancelled);
            if (started_ahead)
                ahead_end(&mine);
            if (st || cancelled)
                break;
            kace_profile_tries after;
            if ((st = kace_campaign_profile_tries(ctx, d->store, w->name, key, &after)))
                break;
            if (after.profiled) {
                r->done++;
            } else if (kace_profile_dropped(after.failures)) {
                printf("profile %s: failed %d times with this command and code: dropped until they change\n",
                       w->name, after.failures);
            } else {
                failed_now[i] = true;
            }
        }
    for (size_t k = 0; k < n_ahead; k++) /* not profiled after all (an error, a signal, the end) */
        ahead_end(&ahead[k]);
    free(failed_now);
    /* What is left: neither profiled nor dropped. */
    for (size_t i = 0; i < e->catalog.n && !st; i++) {
        char key[KACE_COMMAND_KEY_SIZE];
        kace_profile_tries t;
        if (!(st = target_key(ctx, e->d->keys, e->catalog.entries[i].text, e->catalog.entries[i].argv, key)) &&
            !(st = kace_campaign_profile_tries(ctx, d->store, e->catalog.entries[i].name, key, &t)))
            r->left += !t.profiled && !kace_profile_dropped(t.failures);
    }
    return st;
}

static kace_status step_plan(engine *e, kace_campaign_step_report *r)
{
    kace_ctx *ctx = e->d->ctx;
    char *text = NULL;
    size_t len = 0;
    kace_status st = e->plan ? kace_plan_extend(ctx, e->plan_text, e->plan_len, "the stored plan", e->profiled,
                                                e->n_profiled, &text, &len)
                             : kace_plan_make(ctx, e->profiled, e->n_profiled, &text, &len);
    if (st)
        return st;
    char fingerprint[KACE_COMMAND_KEY_SIZE];
    int64_t plan_id = 0;
    kace_plan_fingerprint(text, len, fingerprint);
    bool extended = e->plan != NULL;
    if ((st = kace_campaign_made_plan_note(ctx, e->d->store, e->catalog_id, text, len, fingerprint, &plan_id))) {
        free(text);
        return st;
    }
    if ((st = engine_set_plan(e, text, len, "the plan made"))) /* it owns text now */
        return st;
    printf("plan %s: %s from %zu profiled workloads (%zu dropped), %zu runs (campaign_plans id %lld)\n", fingerprint,
           extended ? "extended" : "made", e->n_profiled, e->n_dropped, e->plan->n, (long long)plan_id);
    r->done = 1;
    return KACE_OK;
}

static kace_status step_measure(engine *e, double used_s, kace_campaign_step_report *r)
{
    device_call *d = e->d;
    kace_schedule_ops ops = schedule_ops(d);
    kace_schedule_config config = schedule_config(e);
    config.used_s = used_s;
    kace_schedule_outcome out;
    kace_status st = kace_schedule_run(d->ctx, e->plan, &config, &ops, &out);
    /* The pool and the daemon end with the step: ncu and the next call find the GPU alone. */
    kace_measure_pool_stop(&d->pool);
    kace_measure_pool_stop(&d->next);
    cold_ahead_free(d);
    r->done = out.measured;
    r->left = out.left;
    return st;
}

/* Whether ncu's --help lists --pipeline-boost-state: its whole output read
 * from a file, so that no early-closing reader makes ncu die of SIGPIPE. */
static bool ncu_has_boost_option(engine *e)
{
    char out_path[PATH_MAX];
    const char *tmp = getenv("TMPDIR");
    snprintf(out_path, sizeof out_path, "%s/kace-ncu-help-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    int fd = mkstemp(out_path);
    if (fd < 0)
        return false;
    close(fd);
    char *argv[] = {(char *)e->args->ncu, "--help", NULL};
    kace_proc_spec spec = {.name = "ncu --help", .argv = argv, .stdout_path = out_path};
    kace_run_options ro;
    kace_run_options_init(&ro);
    ro.warmup_s = 0;
    ro.window_s = 1;
    ro.timeout_s = 30;
    ro.cancel = &cli_interrupted;
    kace_proc_result res;
    bool found = false;
    if (kace_run(e->d->ctx, &spec, 1, &ro, &res) == KACE_OK) {
        FILE *f = fopen(out_path, "r");
        char line[4096];
        while (f && !found && fgets(line, sizeof line, f))
            found = strstr(line, "--pipeline-boost-state") != NULL;
        if (f)
            fclose(f);
    }
    unlink(out_path);
    return found;
}

/* ncu's seconds a workload at most: its try is cut there. */
#define NCU_CAP_S 120.0
#define NCU_LAUNCHES "20"
#define NCU_OUTPUT_MAX ((size_t)1 << 20)

static char *read_small(const char *path, size_t max)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = malloc(max + 1);
    size_t n = buf ? fread(buf, 1, max, f) : 0;
    fclose(f);
    if (buf)
        buf[n] = '\0';
    return buf;
}

static kace_status step_ncu(engine *e, double until_s, kace_campaign_step_report *r)
{
    device_call *d = e->d;
    kace_ctx *ctx = d->ctx;
    if (!e->ncu_checked) {
        e->ncu_boost = ncu_has_boost_option(e);
        e->ncu_checked = true;
    }
    double t0 = now_s();
    ncu_target *targets = NULL;
    size_t n_targets = 0;
    kace_status st = ncu_targets(e, &targets, &n_targets);
    for (size_t i = 0; i < n_targets && !st && !cli_interrupted; i++) {
        const ncu_target *w = &targets[i];
        int argc = 0;
        while (w->argv[argc])
            argc++;
        char key[KACE_COMMAND_KEY_SIZE];
        int ok = 0, failures = 0;
        if ((st = target_key(ctx, e->d->keys, w->written, w->argv, key)) ||
            (st = kace_campaign_ncu_tries(ctx, d->store, w->name, key, &ok, &failures)))
            break;
        if (ok > 0 || failures >= KACE_PROFILE_MAX_FAILURES)
            continue;
        double most = NCU_CAP_S * e->scale, left = until_s - (now_s() - t0), cap = left < most ? left : most;
        if (cap < most / 4) { /* too little time for a try: the next call's */
            r->left++;
            continue;
        }
        /* As the device scripts ran it: clocks left as they are (kace's profiles ran at the GPU's
         * own), the workload ended by ncu once its launches are profiled (--kill yes), the two
         * sections kace's kernel metrics are compared with, the results as CSV on stdout. */
        const char *head[] = {e->args->ncu, "--clock-control", "none", "--apply-rules", "no", "--kill", "yes",
                              "--launch-count", NCU_LAUNCHES, "--section", "SpeedOfLight", "--section",
                              "LaunchStats", "--target-processes", "all", "--csv"};
        size_t n_head = sizeof head / sizeof head[0], at = 0;
        char **argv = calloc(n_head + 4 + (size_t)argc, sizeof *argv);
        if (!argv) {
            st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
            break;
        }
        for (size_t j = 0; j < n_head; j++) {
            argv[at++] = (char *)head[j];
            if (j == 0 && e->ncu_boost) {
                argv[at++] = "--pipeline-boost-state";
                argv[at++] = "dynamic";
            }
        }
        argv[at++] = "--";
        for (int j = 0; j < argc; j++)
            argv[at++] = w->argv[j];
        char out_path[PATH_MAX];
        const char *tmp = getenv("TMPDIR");
        snprintf(out_path, sizeof out_path, "%s/kace-ncu-XXXXXX", tmp && *tmp ? tmp : "/tmp");
        int fd = mkstemp(out_path);
        if (fd < 0) {
            free(argv);
            st = kace_fail(ctx, KACE_ERR_IO, "cannot create ncu's output file: %s", strerror(errno));
            break;
        }
        close(fd);
        kace_proc_spec spec = {.name = w->name, .argv = argv, .stdout_path = out_path};
        kace_run_options ro;
        kace_run_options_init(&ro);
        ro.warmup_s = 0;
        ro.window_s = cap; /* ncu ends the workload itself (--kill yes); the cap bounds it */
        ro.timeout_s = cap;
        ro.term_grace_max_s = d->mo->stop_grace_max_s;
        ro.stderr_fd = d->mo->log_fd;
        ro.cancel = &cli_interrupted;
        kace_proc_result res;
        double ts = now_s();
        printf("ncu %s: %s launches, within %.0f s\n", w->name, NCU_LAUNCHES, cap);
        fflush(stdout);
        st = kace_run(ctx, &spec, 1, &ro, &res);
        free(argv);
        char *output = st ? NULL : read_small(out_path, NCU_OUTPUT_MAX);
        unlink(out_path);
        if (st || res.status == KACE_PROC_CANCELLED) {
            free(output);
            break;
        }
        bool csv = output && strstr(output, "\"ID\"") != NULL;
        const char *status = csv ? "ok" : res.status == KACE_PROC_TIMEOUT ? "timeout" : "failed";
        st = kace_campaign_ncu_note(ctx, d->store, d->allocation_id, w->name, key, status, now_s() - ts, cap,
                                    csv ? output : res.detail);
        printf("ncu %s: %s\n", w->name, csv ? "stored" : status);
        free(output);
        r->done += csv;
        r->left += !csv;
    }
    ncu_targets_free(targets, n_targets);
    return st;
}

static kace_status step_export(engine *e, kace_campaign_step_report *r)
{
    if (cli_mkdirs(e->args->out_dir) != 0)
        return kace_fail(e->d->ctx, KACE_ERR_IO, "%s: cannot create the folder: %s", e->args->out_dir,
                         strerror(errno));
    kace_export_stats stats;
    kace_status st = kace_store_export(e->d->ctx, e->d->store, e->args->out_dir, NULL, &stats);
    if (st)
        return st;
    printf("export: %zu files into %s (%zu workloads, %zu runs)\n", stats.files, e->args->out_dir, stats.workloads,
           stats.runs);
    r->done = stats.files;
    return KACE_OK;
}

static kace_status none_done(void *arg, const kace_measure_spec *spec, bool *done)
{
    (void)arg;
    (void)spec;
    *done = false;
    return KACE_OK;
}

/* The plan's runs left, started afresh and in the pool: the stored plan's,
 * else (profiles still to come) the plan the workloads not dropped would
 * make, as if each profile succeeds. */
static kace_status runs_left(engine *e, size_t *cold, size_t *warm)
{
    kace_ctx *ctx = e->d->ctx;
    kace_plan *made = NULL;
    const kace_plan *plan = e->plan;
    *cold = *warm = 0;
    if (!plan && e->n_plannable >= 3) { /* a plan needs 3 (kace_plan_make) */
        char *text = NULL;
        size_t len = 0;
        kace_status st = kace_plan_make(ctx, e->plannable, e->n_plannable, &text, &len);
        if (!st)
            st = kace_plan_parse(ctx, text, len, "the plan to come", &made);
        free(text);
        if (st)
            return st;
        plan = made;
    }
    size_t left = 0;
    kace_status st = KACE_OK;
    if (plan) {
        kace_schedule_ops ops = schedule_ops(e->d);
        if (made)
            ops.is_done = none_done; /* its workloads are not in the store yet, nor any of its runs */
        kace_schedule_config config = schedule_config(e);
        st = kace_schedule_left(ctx, plan, &config, &ops, &left, cold);
        *warm = left - *cold;
    }
    kace_plan_free(&made);
    return st;
}

/* --fit-minutes: the window with which what is left (profiles to come and
 * the plan's runs) is expected to end by the fit's end, at most the window
 * the call had before any fit (kace_fit_window). Sized before the profiles
 * and again before the runs, from what is left then. */
static kace_status fit_window(engine *e, double used_s)
{
    measure_cli_options *mo = e->d->mo;
    if (!(e->window_bound_s > 0))
        e->window_bound_s = mo->window_s;
    kace_fit_work w = {.profiles_torch = e->torch_to_profile,
                       .run_warmup_s = mo->warmup_s,
                       .scale = e->scale};
    kace_status st = runs_left(e, &w.cold_runs, &w.warm_runs);
    if (st)
        return st;
    size_t to_profile = e->n_plannable - e->n_profiled;
    w.profiles_other = to_profile - w.profiles_torch;
    /* A profile's windows that follow the runs' (profile_windows), counted
     * in runs' windows: those it has with a window of 1 s. */
    kace_profile_options po;
    kace_profile_options_init(&po);
    mo->window_s = 1;
    profile_windows(e, &po);
    bool clean_follows = !(e->args->profile_window_s > 0);
    bool counters_follows = clean_follows && !(e->args->counters_window_s > 0);
    w.profile_windows = (clean_follows ? po.clean.window_s : 0) + (counters_follows ? po.counters.window_s : 0);
    w.profile_fixed_s = po.clean.warmup_s + po.counters.warmup_s + (clean_follows ? 0 : po.clean.window_s) +
                        (counters_follows ? 0 : po.counters.window_s);
    double reserve = e->args->out_dir ? KACE_CAMPAIGN_EXPORT_RESERVE_S * e->scale : 0;
    double seconds = e->args->fit_minutes * 60 - used_s - reserve, need = 0;
    mo->window_s = kace_fit_window(&w, seconds, KACE_FIT_WINDOW_MIN_S * e->scale, e->window_bound_s, &need);
    printf("fit: %zu profiles and %zu runs left (%zu started afresh) are expected to take %.1f s of the %.1f s "
           "left of --fit-minutes with windows of %.3f s (at most %.3f s)\n",
           to_profile, w.cold_runs + w.warm_runs, w.cold_runs, need, seconds > 0 ? seconds : 0, mo->window_s,
           e->window_bound_s);
    return KACE_OK;
}

static kace_status engine_step(engine *e, kace_campaign_step step, double until_s, double used_s,
                               kace_campaign_step_report *r)
{
    switch (step) {
    case KACE_STEP_PROBE: return step_probe(e, until_s, r);
    case KACE_STEP_PROFILE: return step_profile(e, until_s, r);
    case KACE_STEP_PLAN: return step_plan(e, r);
    case KACE_STEP_MEASURE: return step_measure(e, used_s, r);
    case KACE_STEP_NCU: return step_ncu(e, until_s, r);
    case KACE_STEP_EXPORT: return step_export(e, r);
    default: return KACE_OK;
    }
}

static kace_status engine_run(void *arg, kace_campaign_step step, double until_s, double used_s,
                              kace_campaign_step_report *r)
{
    engine *e = arg;
    kace_status st = KACE_OK;
    if ((step == KACE_STEP_PROFILE || step == KACE_STEP_MEASURE) && e->args->fit_minutes > 0)
        st = fit_window(e, used_s);
    if (!st)
        st = engine_step(e, step, until_s, used_s, r);
    /* An error after a signal is the signal's (a run cut short): the call
     * is recorded as killed, what is left counted, not as failed. */
    if (st && cli_interrupted) {
        fprintf(stderr, "kace: step %s stopped by the signal: %s\n", kace_campaign_step_name(step),
                kace_errmsg(e->d->ctx));
        st = KACE_OK;
    }
    return st;
}

/* The probe's least time: its curve and a batch of clients (kace_pool_probe
 * takes at most 90 s; a probe cut short would size the pool on too little). */
#define PROBE_NEED_S 30.0

/* Each step's time need (kace_campaign_ops.need_s): the probe's, the
 * shortest profile try's, one ncu try's. */
static double engine_need_s(void *arg, kace_campaign_step step)
{
    engine *e = arg;
    kace_ctx *ctx = e->d->ctx;
    if (step == KACE_STEP_PROBE)
        return PROBE_NEED_S * e->scale;
    if (step == KACE_STEP_NCU)
        return NCU_CAP_S / 4 * e->scale;
    if (step != KACE_STEP_PROFILE)
        return 0;
    double least = INFINITY;
    for (size_t i = 0; i < e->catalog.n; i++) {
        char key[KACE_COMMAND_KEY_SIZE];
        kace_profile_tries t;
        if (target_key(ctx, e->d->keys, e->catalog.entries[i].text, e->catalog.entries[i].argv, key) ||
            kace_campaign_profile_tries(ctx, e->d->store, e->catalog.entries[i].name, key, &t))
            return 0; /* the step itself meets the error and says it */
        double need = 0;
        if (!t.profiled && !kace_profile_dropped(t.failures) && !profile_need(e, &e->catalog.entries[i], &t, &need)) {
            if (need < least)
                least = need;
        }
    }
    return isfinite(least) ? least : 0;
}

static bool engine_stop(void *arg)
{
    (void)arg;
    return cli_interrupted != 0;
}

/* Each step's row in campaign_steps; the measure step's are its own steps' (timeslice, pool, cold-repeats). */
static kace_status engine_step_done(void *arg, const kace_campaign_step_report *r)
{
    engine *e = arg;
    if (r->step == KACE_STEP_MEASURE)
        return KACE_OK;
    const char *name = kace_campaign_step_name(r->step);
    if (!r->ran)
        printf("step %s: needs %.0f s, the call has %.0f s left: left whole to the next call\n", name, r->need_s,
               r->until_s > 0 ? r->until_s : 0);
    else
        printf("step %s: %zu done in %.1f s, %zu left for the next call\n", name, r->done, r->seconds, r->left);
    return kace_campaign_step_note(e->d->ctx, e->d->store, e->d->allocation_id, name, r->done, r->left, r->seconds);
}

static bool same_argv(char *const *a, char *const *b)
{
    size_t i = 0;
    for (; a[i] && b[i]; i++)
        if (strcmp(a[i], b[i]) != 0)
            return false;
    return !a[i] && !b[i];
}

/* The stored command of each catalog workload becomes the catalog's: the
 * bundle may be unpacked elsewhere than where it was profiled (its key, as
 * written, stays the same: kace_written_command_key). */
static kace_status sync_commands(engine *e)
{
    kace_ctx *ctx = e->d->ctx;
    size_t moved = 0;
    for (size_t i = 0; i < e->catalog.n; i++) {
        const kace_catalog_entry *w = &e->catalog.entries[i];
        char **stored = NULL;
        kace_status st = kace_store_get_command(ctx, e->d->store, w->name, &stored);
        if (st == KACE_ERR_NOT_FOUND)
            continue; /* not profiled yet: its profile stores it */
        if (st)
            return st;
        bool same = same_argv(stored, w->argv);
        free(stored);
        if (!same) {
            if ((st = kace_store_set_command(ctx, e->d->store, w->name, w->argv)))
                return st;
            moved++;
        }
    }
    if (moved)
        printf("campaign: %zu stored command%s updated to the catalog's\n", moved, moved == 1 ? "" : "s");
    return KACE_OK;
}

/* One call: a catalog's whole allocation, or a plan file's measuring steps. */
static int campaign_device(kace_ctx *ctx, const device_args *args, measure_cli_options *mo, long pool_max)
{
    kace_store *store = NULL;
    size_t len = 0;
    const char *input = args->catalog ? args->catalog : args->plan;
    char *text = read_plan_text(ctx, input, &len);
    device_call d = {.ctx = ctx, .mo = mo, .pool_max = (size_t)pool_max, .keys = kace_key_cache_new()};
    engine e = {.d = &d, .args = args, .allocation_s = args->minutes * 60, .scale = args->time_scale};
    /* Pool members start ahead only under the injection library's gate. */
    d.cupti = is_file(find_cupti()) ? find_cupti() : NULL;
    int rc = EXIT_FAILURE_RUN;
    char fingerprint[KACE_COMMAND_KEY_SIZE];
    int64_t input_id = 0;
    int killed_before = 0;
    kace_status st = KACE_OK;
    if (!text) {
        rc = cli_error(ctx, KACE_ERR_IO);
        goto done;
    }
    if (!d.keys) {
        fprintf(stderr, "kace: out of memory\n");
        goto done;
    }
    /* The input parses before the store is opened: a bad one creates nothing. */
    if (args->catalog) {
        kace_catalog_values values = {.workloads = args->workloads_dir, .python = args->python, .kace = args->kace};
        if ((st = kace_catalog_parse(ctx, &e.catalog, text, len, input, &values, 0))) {
            rc = cli_error(ctx, st);
            goto done;
        }
        if (!(e.profiled = calloc(e.catalog.n ? e.catalog.n : 1, sizeof *e.profiled)) ||
            !(e.plannable = calloc(e.catalog.n ? e.catalog.n : 1, sizeof *e.plannable))) {
            fprintf(stderr, "kace: out of memory\n");
            goto done;
        }
    } else {
        char *copy = malloc(len + 1);
        if (!copy) {
            fprintf(stderr, "kace: out of memory\n");
            goto done;
        }
        memcpy(copy, text, len);
        copy[len] = '\0';
        if ((st = engine_set_plan(&e, copy, len, input))) {
            rc = cli_error(ctx, st);
            goto done;
        }
    }
    if (!(d.store = store = cli_create_store(ctx, args->db, false)))
        goto done;
    kace_plan_fingerprint(text, len, fingerprint);
    st = args->catalog ? kace_campaign_catalog_note(ctx, store, input, text, len, fingerprint, &input_id)
                       : kace_campaign_plan_note(ctx, store, input, text, len, fingerprint, &input_id);
    e.catalog_id = args->catalog ? input_id : 0;
    if (st || (st = kace_campaign_allocation_begin(ctx, store, input_id, e.allocation_s, &d.allocation_id,
                                                     &killed_before))) {
        rc = cli_error(ctx, st);
        goto done;
    }
    if (killed_before)
        printf("campaign: %d earlier call%s ended without a word (killed); this one resumes\n", killed_before,
               killed_before == 1 ? "" : "s");
    if ((st = sync_commands(&e))) {
        rc = cli_error(ctx, st);
        goto done;
    }
    if (args->catalog)
        printf("campaign --device: catalog %s (%s), %zu workloads; this call has %.1f minutes\n", input, fingerprint,
               e.catalog.n, args->minutes);
    else
        printf("campaign --device: plan %s (%s), %zu runs; this call has %.1f minutes\n", input, fingerprint,
               e.plan->n, args->minutes);
    if (mo->log_path && (mo->log_fd = open(mo->log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644)) < 0) {
        fprintf(stderr, "kace: %s: %s\n", mo->log_path, strerror(errno));
        goto done;
    }
    cli_install_interrupt_handlers();
    if ((st = measure_cli_open_mps(ctx, mo, &d.mps))) {
        rc = cli_error(ctx, st);
        goto done;
    }
    d.gpu = measure_cli_open_gpu(mo);
    kace_campaign_config config = {.allocation_s = e.allocation_s, .allowance_scale = e.scale};
    kace_campaign_ops ops = {.arg = &e,
                             .now_s = device_now_s,
                             .progress = engine_progress,
                             .need_s = engine_need_s,
                             .run = engine_run,
                             .stop = engine_stop,
                             .step_done = engine_step_done};
    kace_campaign_outcome out;
    st = kace_campaign_run(ctx, &config, &ops, &out);
    if (st)
        fprintf(stderr, "kace: %s\n", kace_errmsg(ctx));
    else if (args->catalog && !e.plan && out.left == 0 && !cli_interrupted) /* every workload tried */
        fprintf(stderr, "kace: warning: %zu catalog workloads profiled (%zu dropped): a plan needs 3\n",
                e.n_profiled, e.n_dropped);
    kace_measure_pool_stop(&d.pool);
    kace_measure_pool_stop(&d.next);
    bool mps_ok = measure_cli_stop_mps(ctx, &d.mps, true, d.daemon_wanted) == 0;
    kace_status end_st = kace_campaign_allocation_end(ctx, store, d.allocation_id, out.ending);
    if (end_st)
        fprintf(stderr, "kace: %s\n", kace_errmsg(ctx));
    printf("campaign: %zu runs measured (%zu ok, %zu failed), %zu left for the next call; ended: %s\n", d.runs, d.ok,
           d.failed, out.left, out.ending);
    if (cli_interrupted) {
        fprintf(stderr, "kace: interrupted: %zu runs kept, the current one not recorded; rerun to continue\n",
                d.runs);
        rc = cli_interrupted_exit();
    } else {
        rc = st || end_st || !mps_ok ? EXIT_FAILURE_RUN : EXIT_OK;
    }
done:
    kace_measure_pool_stop(&d.pool);
    kace_measure_pool_stop(&d.next);
    cold_ahead_free(&d);
    kace_mps_stop(ctx, &d.mps, NULL);
    kace_gpu_close(&d.gpu);
    if (mo->log_fd >= 0) {
        close(mo->log_fd);
        mo->log_fd = -1;
    }
    free(d.pool_specs);
    free(d.next_specs);
    kace_key_cache_free(&d.keys);
    kace_plan_free(&e.plan);
    free(e.plan_text);
    free(e.profiled);
    free(e.plannable);
    kace_catalog_free(&e.catalog);
    kace_store_close(&store);
    free(text);
    return rc;
}

int cmd_campaign(int argc, char **argv)
{
    const char *db = cli_default_db();
    bool dry_run = false, use_pool = false, device = false, warmup_given = false;
    long max_runs = -1, pool_max = 16;
    double minutes = 0;
    device_args args = {.python = "python3", .profile_warmup_s = -1, .time_scale = 1};
    measure_cli_options mo;
    measure_cli_defaults(&mo);
    static const struct option longopts[] = {{"db", required_argument, 0, 'd'},
                                             {"dry-run", no_argument, 0, 'n'},
                                             {"max-runs", required_argument, 0, 'm'},
                                             {"pool", no_argument, 0, 'p'},
                                             {"pool-members", required_argument, 0, 'P'},
                                             {"device", no_argument, 0, 'D'},
                                             {"minutes", required_argument, 0, 'M'},
                                             {"catalog", required_argument, 0, 'C'},
                                             {"out", required_argument, 0, 'O'},
                                             {"workloads-dir", required_argument, 0, 'W'},
                                             {"python", required_argument, 0, 'Y'},
                                             {"ncu", required_argument, 0, 'N'},
                                             {"profile-warmup", required_argument, 0, 'u'},
                                             {"profile-window", required_argument, 0, 'U'},
                                             {"counters-window", required_argument, 0, 'w'},
                                             {"fit-minutes", required_argument, 0, 'F'},
                                             {"help", no_argument, 0, 'h'},
                                             MEASURE_CLI_LONGOPTS,
                                             {0, 0, 0, 0}};
    int c;
    bool bad = false;
    optind = 1;
    while ((c = getopt_long(argc, argv, "d:nm:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'd': db = optarg; break;
        case 'n': dry_run = true; break;
        case 'p': use_pool = true; break;
        case 'D': device = true; break;
        case 'C': args.catalog = optarg; break;
        case 'O': args.out_dir = optarg; break;
        case 'W': args.workloads_dir = optarg; break;
        case 'Y': args.python = optarg; break;
        case 'N': args.ncu = strcmp(optarg, "none") == 0 ? NULL : optarg; break;
        case 'u':
            if (!cli_seconds("campaign", "profile-warmup", optarg, &args.profile_warmup_s))
                return EXIT_USAGE;
            break;
        case 'U':
            if (!cli_number("campaign", "profile-window", optarg, 0.001, 3600, &args.profile_window_s))
                return EXIT_USAGE;
            break;
        case 'w':
            if (!cli_number("campaign", "counters-window", optarg, 0.001, 3600, &args.counters_window_s))
                return EXIT_USAGE;
            break;
        case 'F':
            if (!cli_number("campaign", "fit-minutes", optarg, 0.001, 100000, &args.fit_minutes))
                return EXIT_USAGE;
            break;
        case 'M':
            if (!cli_number("campaign", "minutes", optarg, 0.001, 100000, &minutes))
                return EXIT_USAGE;
            break;
        case 'P':
            if (!cli_whole("campaign", "pool-members", optarg, 1, KACE_POOL_MAX_MEMBERS, &pool_max))
                return EXIT_USAGE;
            args.pool_given = true;
            break;
        case 'm':
            if (!cli_whole("campaign", "max-runs", optarg, 0, 1000000000L, &max_runs))
                return EXIT_USAGE;
            break;
        case 'h': return campaign_usage();
        default:
            args.window_given |= c == 1002; /* --window (MEASURE_CLI_LONGOPTS) */
            warmup_given |= c == 1001;
            if (!measure_cli_option(&mo, c, optarg, "campaign", &bad))
                return cli_usage("campaign", "unknown option");
            if (bad)
                return EXIT_USAGE;
        }
    }
    bool engine_options = args.catalog || args.out_dir || args.workloads_dir || args.ncu ||
                          args.profile_warmup_s >= 0 || args.profile_window_s > 0 || args.counters_window_s > 0 ||
                          args.fit_minutes > 0;
    if (device != (minutes > 0))
        return cli_usage("campaign", "--device and --minutes go together");
    if (engine_options && !device)
        return cli_usage("campaign",
                         "--catalog, --out, --ncu, --workloads-dir, --profile-* and --fit-minutes go with --device");
    if (device && (dry_run || max_runs >= 0))
        return cli_usage("campaign", "--device takes neither --dry-run nor --max-runs (its deadline bounds it)");
    if (args.catalog ? argc - optind != 0 : argc - optind != 1)
        return cli_usage("campaign", args.catalog ? "--catalog takes no PLAN file (the plan is made from the catalog)"
                                                  : "expected one PLAN file");
    const char *plan_path = args.catalog ? NULL : argv[optind];
    /* For tests only: stand-ins that run F times faster than the real thing
     * (the device dry run's) get allowances F times shorter. */
    const char *time_scale = getenv("KACE_CAMPAIGN_TIME_SCALE");
    if (device && time_scale && *time_scale) {
        char *end = NULL;
        double f = strtod(time_scale, &end);
        if (*end || !(f >= 1 && f <= 1000))
            return cli_usage("campaign", "KACE_CAMPAIGN_TIME_SCALE must be a number from 1 to 1000");
        args.time_scale = 1 / f;
    }
    if (device && !warmup_given)
        mo.warmup_s = DEVICE_WARMUP_S * args.time_scale;
    if (device) {
        static char self[PATH_MAX], folder[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
        self[n > 0 ? n : 0] = '\0';
        args.kace = n > 0 ? self : "kace";
        if (args.catalog && !args.workloads_dir) {
            snprintf(folder, sizeof folder, "%s", args.catalog);
            args.workloads_dir = dirname(folder);
        }
        args.db = db;
        args.plan = plan_path;
        args.minutes = minutes;
        kace_ctx *dctx = cli_ctx_new();
        int drc = campaign_device(dctx, &args, &mo, pool_max);
        kace_ctx_free(&dctx);
        return drc;
    }

    kace_ctx *ctx = cli_ctx_new();
    kace_plan *plan = NULL;
    kace_store *store = NULL;
    kace_mps *mps = NULL;
    kace_gpu *gpu = NULL;
    bool *done_before = NULL, *retry = NULL;
    size_t *order = NULL;
    kace_measure_spec *pool_specs = NULL;
    kace_measure_pool *pool = NULL;
    size_t pool_runs = 0, pool_members = 0;
    double pool_start_s = 0, pool_run_s = 0; /* what the stand-ins' time scale applies to (the device dry run) */
    int rc = EXIT_FAILURE_RUN;
    kace_status st = kace_plan_parse_file(ctx, plan_path, &plan);
    if (st) {
        rc = cli_error(ctx, st);
        goto done;
    }
    if (!(store = cli_create_store(ctx, db, false)))
        goto done;
    if (!(done_before = calloc(plan->n, sizeof *done_before)) || !(retry = calloc(plan->n, sizeof *retry)) ||
        !(order = calloc(plan->n, sizeof *order)) || !(pool_specs = calloc(plan->n, sizeof *pool_specs))) {
        fprintf(stderr, "kace: out of memory\n");
        goto done;
    }
    /* What is left, and whether every workload can be started. */
    /* A stored run is done unless it failed and its members' commands or code have
     * changed since (kace_plan_should_measure): then it is measured again. */
    size_t todo = 0, todo_mps = 0, retries = 0;
    for (size_t i = 0; i < plan->n; i++) {
        const kace_measure_spec *spec = &plan->entries[i].spec;
        char **cmd[KACE_MAX_K] = {0};
        const char *names[KACE_MAX_K];
        char key[KACE_COMMAND_KEY_SIZE], run_key[KACE_MAX_K * (KACE_NAME_MAX + 8) + 320];
        kace_attempt_state state;
        bool no_command = false;
        for (int m = 0; m < spec->k && !st; m++) {
            names[m] = spec->workload[m];
            if ((st = kace_store_get_command(ctx, store, spec->workload[m], &cmd[m]))) {
                fprintf(stderr, "kace: %s:%d: %s\n", plan_path, plan->entries[i].line, kace_errmsg(ctx));
                no_command = true;
            }
        }
        kace_plan_entry_key(&plan->entries[i], run_key, sizeof run_key);
        if (!st && (st = kace_members_command_key(ctx, spec->k, names, (char *const *const *)cmd, key)) == KACE_OK)
            st = kace_attempt_state_load(ctx, store, run_key, key, &state);
        for (int m = 0; m < spec->k; m++)
            free(cmd[m]);
        if (st) {
            if (!no_command)
                rc = cli_error(ctx, st);
            goto done;
        }
        done_before[i] = !kace_plan_should_measure(&state);
        retry[i] = !done_before[i] && state.stored;
        retries += retry[i];
        if (!done_before[i]) {
            todo++;
            todo_mps += !spec->timeslice;
        }
    }
    printf("plan %s: %zu runs (%d workloads, up to %d repetitions); %zu stored already, %zu to measure", plan_path,
           plan->n, plan->n_workloads, plan->max_repeat, plan->n - todo, todo);
    if (retries)
        printf(" (%zu of them failed before and are tried again: their commands or code changed)", retries);
    printf("\n");
    if (dry_run) {
        for (size_t i = 0; i < plan->n; i++) {
            char what[1200];
            describe(&plan->entries[i].spec, what, sizeof what);
            printf("  %-6s %-12s %s\n", done_before[i] ? "done" : retry[i] ? "retry" : "to do",
                   plan->entries[i].spec.set, what);
        }
        rc = EXIT_OK;
        goto done;
    }
    if (mo.log_path && (mo.log_fd = open(mo.log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644)) < 0) {
        fprintf(stderr, "kace: %s: %s\n", mo.log_path, strerror(errno));
        goto done;
    }
    cli_install_interrupt_handlers();
    /* The run folder is held for the whole campaign; the daemon runs only
     * for MPS runs (started before the first one, quit before a time-sliced one). */
    if (todo > 0 && max_runs != 0 && (st = measure_cli_open_mps(ctx, &mo, &mps))) {
        rc = cli_error(ctx, st);
        goto done;
    }
    if (todo_mps > 0 && max_runs != 0)
        gpu = measure_cli_open_gpu(&mo);
    bool daemon_wanted = false; /* started by kace and not quit on purpose */

    /* The plan's order; with a pool, its MPS runs first (the pool's members are
     * clients of the daemon that a time-sliced run needs quit). */
    size_t n_order = 0;
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < plan->n; i++)
            if (use_pool ? plan->entries[i].spec.timeslice == (pass == 1) : pass == 0)
                order[n_order++] = i;

    size_t measured = 0, ok = 0, failed = 0, index = 0;
    bool stopped_by_error = false;
    for (size_t oi = 0; oi < n_order && !cli_interrupted; oi++) {
        size_t i = order[oi];
        if (done_before[i])
            continue;
        if (max_runs >= 0 && (long)measured >= max_runs)
            break;
        index++;
        kace_plan_entry *e = &plan->entries[i];
        if (e->spec.timeslice) {
            /* An idle MPS server would hold a context during a time-sliced run;
             * the pool's members are its clients and go first. */
            kace_measure_pool_stop(&pool);
            if (measure_cli_quit_mps(ctx, mps, mo.quiet) != 0) {
                stopped_by_error = true;
                break;
            }
            daemon_wanted = false;
        } else if (!kace_mps_alive(mps)) {
            kace_measure_pool_stop(&pool); /* clients of a daemon that has gone */
            /* Started for the first MPS run, again after time-sliced ones or when it died. */
            if (daemon_wanted)
                fprintf(stderr, "kace: warning: the MPS daemon died; starting it again\n");
            if ((st = kace_mps_restart(ctx, mps))) {
                cli_error(ctx, st);
                stopped_by_error = true;
                break;
            }
            daemon_wanted = true;
        }
        char what[1200], label[64];
        describe(&e->spec, what, sizeof what);
        snprintf(label, sizeof label, "[%zu/%zu]", index, todo);
        kace_measure_options opt = {.mps = mps, .gpu_access = gpu, .gpu = mo.gpu, .retry_failed = retry[i]};
        measure_cli_run_options(&mo, &opt.run, label);
        if (pool && !e->spec.timeslice && !kace_measure_pool_has(pool, &e->spec))
            kace_measure_pool_stop(&pool); /* the next runs' members, in a fresh pool */
        if (use_pool && !e->spec.timeslice && !pool) {
            /* One member per (workload, share) of the MPS runs still to do, as many as fit. */
            size_t n_specs = 0;
            for (size_t oj = oi; oj < n_order; oj++)
                if (!done_before[order[oj]] && !plan->entries[order[oj]].spec.timeslice)
                    pool_specs[n_specs++] = plan->entries[order[oj]].spec;
            int64_t t_start = kace_monotonic_ns();
            st = kace_measure_pool_start(ctx, store, pool_specs, n_specs, (size_t)pool_max, &opt, 0, &pool);
            pool_start_s += (double)(kace_monotonic_ns() - t_start) / 1e9;
            if (st) {
                fprintf(stderr, "kace: %s starting the pool: %s\n", label, kace_errmsg(ctx));
                stopped_by_error = true;
                break;
            }
            pool_members += kace_pool_size(kace_measure_pool_members(pool));
        }
        kace_measure_result res;
        if (pool && !e->spec.timeslice) {
            int64_t t_run = kace_monotonic_ns();
            st = kace_measure_in_pool(ctx, store, pool, &e->spec, &opt, &res);
            pool_run_s += (double)(kace_monotonic_ns() - t_run) / 1e9;
            pool_runs += !st && !res.cancelled;
        } else {
            st = kace_measure(ctx, store, &e->spec, &opt, &res);
        }
        measure_cli_progress_done();
        if (st) {
            fprintf(stderr, "kace: %s %s: %s\n", label, what, kace_errmsg(ctx));
            kace_measure_pool_stop(&pool); /* a member or the daemon has gone: a fresh pool next */
            /* A daemon that died during the run: the run is left to do; go on. */
            if (st == KACE_ERR_IO && !e->spec.timeslice && !kace_mps_alive(mps))
                continue;
            stopped_by_error = true;
            break;
        }
        if (res.cancelled)
            break;
        measured++;
        if (res.status == KACE_RUN_OK)
            ok++;
        else
            failed++;
        printf("%s %s: ", label, what);
        measure_cli_print_result(&e->spec, &res, false);
        /* NVIDIA's MPS docs: a client that ends with GPU work outstanding
         * (a crash, an out-of-memory, a signal mid-step) can leave its server
         * and the next clients in an undefined state. The next MPS run gets a
         * fresh one. A member that ended mid-step (by a signal, by a handler
         * of its own before its next report, or whose group had to be
         * killed: the CUDA client may be a child of a launcher) may have had
         * work outstanding even in a run that measured well. */
        int killed = -1;
        for (int m = 0; m < e->spec.k && killed < 0; m++)
            if (kace_proc_ended_mid_step(&res.proc[m]))
                killed = m;
        if (!e->spec.timeslice && (res.status != KACE_RUN_OK || killed >= 0)) {
            char ending[96];
            if (res.status != KACE_RUN_OK)
                fprintf(stderr, "kace: %s failed under MPS: the next MPS run starts a fresh MPS daemon\n", label);
            else
                fprintf(stderr, "kace: %s %s ended mid-step (%s) under MPS: the next MPS run starts a "
                        "fresh MPS daemon\n", label, e->spec.workload[killed],
                        kace_proc_ending(&res.proc[killed], ending, sizeof ending));
            kace_measure_pool_stop(&pool); /* its members are the old daemon's clients */
            if (measure_cli_quit_mps(ctx, mps, true) != 0) {
                stopped_by_error = true;
                break;
            }
            daemon_wanted = false;
        }
    }
    kace_measure_pool_stop(&pool);
    if (use_pool)
        printf("pool: %zu MPS runs measured by %zu member processes, each started once; starting them took "
               "%.1f s, the runs %.1f s\n", pool_runs, pool_members, pool_start_s, pool_run_s);
    if (measure_cli_stop_mps(ctx, &mps, true, daemon_wanted) != 0)
        stopped_by_error = true;
    size_t left = todo - measured;
    printf("campaign: %zu runs measured (%zu ok, %zu failed), %zu were stored before, %zu left\n", measured, ok,
           failed, plan->n - todo, left);
    if (cli_interrupted) {
        fprintf(stderr, "kace: interrupted: %zu runs kept, the current one not recorded; rerun to continue\n",
                measured);
        rc = cli_interrupted_exit();
    } else {
        rc = stopped_by_error ? EXIT_FAILURE_RUN : EXIT_OK;
    }
done:
    kace_measure_pool_stop(&pool); /* before its daemon */
    kace_mps_stop(ctx, &mps, NULL); /* an early error: the folder is released */
    kace_gpu_close(&gpu);
    if (mo.log_fd >= 0)
        close(mo.log_fd);
    free(done_before);
    free(retry);
    free(order);
    free(pool_specs);
    kace_plan_free(&plan);
    kace_store_close(&store);
    kace_ctx_free(&ctx);
    return rc;
}
