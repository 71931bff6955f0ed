/* kace campaign PLAN: measures a plan of colocations, resumably. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "kace/pool.h"
#include "measure_cli.h"

static int campaign_usage(void)
{
    printf("usage: kace campaign [options] PLAN\n"
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
           "  --pool-members N at most N processes in the pool at once (default 16; MPS servers accept a\n"
           "                   limited number of clients, and each member keeps its memory while it waits)\n"
           "  --device         one allocation's schedule (docs/measure.md): the time-sliced runs, then the\n"
           "                   MPS runs in the warm pool, interleaved, then a few cold repeats; each step\n"
           "                   only when its projected time fits before the deadline; what is left, the\n"
           "                   next call measures. Needs --minutes\n"
           "  --minutes M      with --device: the allocation's minutes of commands (the call's deadline)\n"
           MEASURE_CLI_USAGE
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
    size_t pool_max, runs, ok, failed;
    int64_t allocation_id;
    bool daemon_wanted;
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
    if (!st && (st = kace_members_command_key(d->ctx, spec->k, names, (char *const *const *)cmd, key)) == KACE_OK)
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
    double own = opt->run.timeout_s > 0 ? opt->run.timeout_s : opt->run.warmup_s + opt->run.window_s + 120;
    opt->run.timeout_s = own < timeout_s ? own : timeout_s;
    return KACE_OK;
}

/* The daemon for an MPS run: started for the first, again after time-sliced
 * runs or a failure (a fresh one), or when it died. */
static kace_status device_mps_up(device_call *d)
{
    if (kace_mps_alive(d->mps))
        return KACE_OK;
    kace_measure_pool_stop(&d->pool); /* clients of a daemon that has gone */
    if (d->daemon_wanted)
        fprintf(stderr, "kace: warning: the MPS daemon died; starting it again\n");
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
        if (measure_cli_quit_mps(d->ctx, d->mps, true) != 0)
            return kace_fail(d->ctx, KACE_ERR_IO, "the MPS daemon did not quit");
        d->daemon_wanted = false;
    }
    return KACE_OK;
}

static kace_status device_measure_cold(void *arg, const kace_measure_spec *spec, double timeout_s, bool *stored)
{
    device_call *d = arg;
    *stored = false;
    kace_measure_pool_stop(&d->pool); /* a cold run starts its processes alone on the GPU */
    kace_status st;
    if (spec->timeslice) {
        if (measure_cli_quit_mps(d->ctx, d->mps, d->mo->quiet) != 0)
            return kace_fail(d->ctx, KACE_ERR_IO, "the MPS daemon did not quit before a time-sliced run");
        d->daemon_wanted = false;
    } else if ((st = device_mps_up(d))) {
        return st;
    }
    kace_measure_options opt;
    char label[64];
    if ((st = device_options(d, spec, timeout_s, &opt, label, sizeof label)))
        return st;
    kace_measure_result res;
    st = kace_measure(d->ctx, d->store, spec, &opt, &res);
    measure_cli_progress_done();
    if (st || res.cancelled)
        return st;
    *stored = true;
    return device_after_run(d, spec, label, &res);
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
    if (d->pool && !kace_measure_pool_has(d->pool, spec))
        kace_measure_pool_stop(&d->pool); /* the next runs' members, in a fresh pool */
    if (!d->pool) {
        /* The start's timeout is the run's (cut to the deadline); the run gets what the start left. */
        int64_t t0 = kace_monotonic_ns();
        memcpy(d->pool_specs, specs + i, (n - i) * sizeof *specs);
        if ((st = kace_measure_pool_start(d->ctx, d->store, d->pool_specs, n - i, d->pool_max, &opt, 0, &d->pool)))
            return st;
        double left = timeout_s - (double)(kace_monotonic_ns() - t0) / 1e9;
        if (!(left > 0))
            return kace_fail(d->ctx, KACE_ERR_IO, "starting the pool took the call's time to its deadline");
        if (opt.run.timeout_s > left)
            opt.run.timeout_s = left;
    }
    kace_measure_result res;
    st = kace_measure_in_pool(d->ctx, d->store, d->pool, spec, &opt, &res);
    measure_cli_progress_done();
    if (st) {
        kace_measure_pool_stop(&d->pool);
        return st;
    }
    if (res.cancelled)
        return KACE_OK;
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

/* One call of the plan's schedule, its allocation recorded in the store. */
static int campaign_device(kace_ctx *ctx, const char *db, const char *plan_path, double minutes,
                           measure_cli_options *mo, long pool_max)
{
    kace_store *store = NULL;
    size_t len = 0;
    char *text = read_plan_text(ctx, plan_path, &len);
    kace_plan *plan = NULL;
    device_call d = {.ctx = ctx, .mo = mo, .pool_max = (size_t)pool_max};
    int rc = EXIT_FAILURE_RUN;
    char fingerprint[KACE_COMMAND_KEY_SIZE];
    int64_t plan_id = 0;
    int killed_before = 0;
    kace_status st;
    if (!text || (st = kace_plan_parse(ctx, text, len, plan_path, &plan))) {
        rc = cli_error(ctx, text ? st : KACE_ERR_IO);
        goto done;
    }
    if (!(d.store = store = cli_create_store(ctx, db, false))) /* after the plan: a bad one creates nothing */
        goto done;
    if (!(d.pool_specs = calloc(plan->n, sizeof *d.pool_specs))) {
        fprintf(stderr, "kace: out of memory\n");
        goto done;
    }
    kace_plan_fingerprint(text, len, fingerprint);
    if ((st = kace_campaign_plan_note(ctx, store, plan_path, text, len, fingerprint, &plan_id)) ||
        (st = kace_campaign_allocation_begin(ctx, store, plan_id, minutes * 60, &d.allocation_id, &killed_before))) {
        rc = cli_error(ctx, st);
        goto done;
    }
    if (killed_before)
        printf("campaign: %d earlier call%s ended without a word (killed); this one resumes\n", killed_before,
               killed_before == 1 ? "" : "s");
    printf("campaign --device: plan %s (%s), %zu runs; this call has %.1f minutes\n", plan_path, fingerprint,
           plan->n, minutes);
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
    kace_schedule_config config = {.allocation_s = minutes * 60,
                                   .warmup_s = mo->warmup_s,
                                   .window_s = mo->window_s,
                                   .pool_members = (size_t)pool_max};
    kace_schedule_ops ops = {.arg = &d,
                             .now_s = device_now_s,
                             .stored_times = device_stored_times,
                             .is_done = device_is_done,
                             .measure_cold = device_measure_cold,
                             .measure_warm = device_measure_warm,
                             .stop = device_stop,
                             .step_done = device_step_done};
    kace_schedule_outcome out;
    st = kace_schedule_run(ctx, plan, &config, &ops, &out);
    if (st)
        fprintf(stderr, "kace: %s\n", kace_errmsg(ctx));
    kace_measure_pool_stop(&d.pool);
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
    kace_mps_stop(ctx, &d.mps, NULL);
    kace_gpu_close(&d.gpu);
    if (mo->log_fd >= 0) {
        close(mo->log_fd);
        mo->log_fd = -1;
    }
    free(d.pool_specs);
    kace_plan_free(&plan);
    kace_store_close(&store);
    free(text);
    return rc;
}

int cmd_campaign(int argc, char **argv)
{
    const char *db = cli_default_db();
    bool dry_run = false, use_pool = false, device = false;
    long max_runs = -1, pool_max = 16;
    double minutes = 0;
    measure_cli_options mo;
    measure_cli_defaults(&mo);
    static const struct option longopts[] = {{"db", required_argument, 0, 'd'},
                                             {"dry-run", no_argument, 0, 'n'},
                                             {"max-runs", required_argument, 0, 'm'},
                                             {"pool", no_argument, 0, 'p'},
                                             {"pool-members", required_argument, 0, 'P'},
                                             {"device", no_argument, 0, 'D'},
                                             {"minutes", required_argument, 0, 'M'},
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
        case 'M':
            if (!cli_number("campaign", "minutes", optarg, 0.001, 100000, &minutes))
                return EXIT_USAGE;
            break;
        case 'P':
            if (!cli_whole("campaign", "pool-members", optarg, 1, KACE_POOL_MAX_MEMBERS, &pool_max))
                return EXIT_USAGE;
            break;
        case 'm':
            if (!cli_whole("campaign", "max-runs", optarg, 0, 1000000000L, &max_runs))
                return EXIT_USAGE;
            break;
        case 'h': return campaign_usage();
        default:
            if (!measure_cli_option(&mo, c, optarg, "campaign", &bad))
                return cli_usage("campaign", "unknown option");
            if (bad)
                return EXIT_USAGE;
        }
    }
    if (argc - optind != 1)
        return cli_usage("campaign", "expected one PLAN file");
    const char *plan_path = argv[optind];
    if (device != (minutes > 0))
        return cli_usage("campaign", "--device and --minutes go together");
    if (device && (dry_run || max_runs >= 0))
        return cli_usage("campaign", "--device takes neither --dry-run nor --max-runs (its deadline bounds it)");
    if (device) {
        kace_ctx *dctx = cli_ctx_new();
        int drc = campaign_device(dctx, db, plan_path, minutes, &mo, pool_max);
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
