/* kace workload add|list, kace measure, and what they share with kace campaign. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "measure_cli.h"
#include "kace/workload_name.h"

/* ---- interruption ------------------------------------------------------- */

volatile sig_atomic_t cli_interrupted = 0;

static void on_interrupt(int sig)
{
    cli_interrupted = sig;
}

void cli_install_interrupt_handlers(void)
{
    /* No SA_RESTART: a blocking call returns, the runner sees the flag and
     * stops the workloads; then the MPS daemon is quit. */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_interrupt;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
}

int cli_interrupted_exit(void)
{
    return 128 + (int)cli_interrupted;
}

/* ---- shared options ------------------------------------------------------- */

void measure_cli_defaults(measure_cli_options *o)
{
    memset(o, 0, sizeof *o);
    o->warmup_s = 10;
    o->window_s = 30;
    o->stop_grace_max_s = 30;
    o->log_fd = -1;
}

bool measure_cli_option(measure_cli_options *o, int code, const char *arg, const char *cmd, bool *bad)
{
    switch (code) {
    case 1001:
    case 1002:
    case 1003: {
        double *dst = code == 1001 ? &o->warmup_s : code == 1002 ? &o->window_s : &o->timeout_s;
        if (!cli_parse_number(arg, 0, 86400, false, dst) || (code == 1002 && *dst <= 0)) {
            cli_usage(cmd, "--%s must be a number of seconds%s, not '%s'",
                      code == 1001 ? "warmup" : code == 1002 ? "window" : "timeout", code == 1002 ? " > 0" : "", arg);
            *bad = true;
        }
        return true;
    }
    case 1004: o->run_dir = arg; return true;
    case 1005: o->mps_control = arg; return true;
    case 1006: o->gpu = arg; return true;
    case 1007: o->log_path = arg; return true;
    case 1008: o->quiet = true; return true;
    case 1009: {
        double v = 0;
        if (!cli_parse_number(arg, 0, 63, true, &v)) {
            cli_usage(cmd, "--nvml-device must be a GPU index 0..63, not '%s'", arg);
            *bad = true;
        }
        o->nvml_device = (unsigned)v;
        return true;
    }
    case 1010:
        if (!cli_parse_number(arg, 1, 3600, false, &o->stop_grace_max_s)) {
            cli_usage(cmd, "--stop-grace-max must be a number of seconds from 1 to 3600, not '%s'", arg);
            *bad = true;
        }
        return true;
    }
    return false;
}

/* ---- progress bar ------------------------------------------------------- */

typedef struct progress_bar {
    const char *label;
    double warmup_s, window_s;
    int64_t start_ns;
    bool drawn;
} progress_bar;

static progress_bar bar;

static void draw_progress(void *user, const kace_run_view *v)
{
    progress_bar *b = user;
    if (!b->start_ns)
        b->start_ns = v->now_ns;
    char line[160];
    if (!v->window_start_ns || v->now_ns < v->window_start_ns) {
        snprintf(line, sizeof line, "%s  warming up %5.1f s", b->label, (double)(v->now_ns - b->start_ns) / 1e9);
    } else {
        double done = (double)(v->now_ns - v->window_start_ns) / 1e9;
        double f = done / b->window_s;
        if (f > 1)
            f = 1;
        char fill[31];
        int n = (int)(f * 30 + 0.5);
        for (int i = 0; i < 30; i++)
            fill[i] = i < n ? '#' : '.';
        fill[30] = '\0';
        snprintf(line, sizeof line, "%s  [%s] %5.1f/%.0f s", b->label, fill, done < b->window_s ? done : b->window_s,
                 b->window_s);
    }
    fprintf(stderr, "\r%-78.78s", line);
    fflush(stderr);
    b->drawn = true;
}

void measure_cli_progress_done(void)
{
    if (bar.drawn) {
        fprintf(stderr, "\r%78s\r", "");
        fflush(stderr);
        bar.drawn = false;
    }
}

void measure_cli_run_options(measure_cli_options *o, kace_run_options *run, const char *label)
{
    kace_run_options_init(run);
    run->warmup_s = o->warmup_s;
    run->window_s = o->window_s;
    run->timeout_s = o->timeout_s;
    run->term_grace_max_s = o->stop_grace_max_s;
    run->stderr_fd = o->log_fd;
    run->cancel = &cli_interrupted;
    /* A workload that speaks the control channel is stopped by a message at its next
     * report, not by a SIGTERM whose handler may not be in (docs/progress-protocol.md). */
    run->control = true;
    if (!o->quiet && isatty(STDERR_FILENO)) {
        bar = (progress_bar){.label = label, .warmup_s = o->warmup_s, .window_s = o->window_s};
        run->tick = draw_progress;
        run->tick_user = &bar;
        run->tick_s = 0.2;
    }
}

/* ---- MPS ------------------------------------------------------------------- */

static void print_log(void *user, kace_log_level level, const char *message)
{
    (void)user;
    if (level >= KACE_LOG_WARN)
        fprintf(stderr, "kace: warning: %s\n", message);
}

kace_status measure_cli_start_mps(kace_ctx *ctx, const measure_cli_options *o, kace_mps **mps)
{
    kace_mps_options mo = {.control = o->mps_control, .run_dir = o->run_dir};
    kace_ctx_set_log(ctx, print_log, NULL);
    return kace_mps_start(ctx, &mo, mps);
}

kace_status measure_cli_open_mps(kace_ctx *ctx, const measure_cli_options *o, kace_mps **mps)
{
    kace_mps_options mo = {.control = o->mps_control, .run_dir = o->run_dir};
    kace_ctx_set_log(ctx, print_log, NULL);
    return kace_mps_open(ctx, &mo, mps);
}

/* What stopping the daemon took, when it is news. */
static void report_stop(const kace_mps_stop_report *r, bool quiet, bool expect_running)
{
    if (!r->was_running) {
        if (expect_running)
            fprintf(stderr, "kace: warning: the MPS daemon had died before kace stopped it\n");
    } else if (r->sent_sigkill || r->sent_sigterm) {
        fprintf(stderr, "kace: warning: the MPS daemon ignored 'quit'; ended with %s\n",
                r->sent_sigkill ? "SIGKILL" : "SIGTERM");
    } else if (!quiet) {
        fprintf(stderr, "kace: MPS daemon stopped\n");
    }
}

int measure_cli_quit_mps(kace_ctx *ctx, kace_mps *mps, bool quiet)
{
    if (!mps || !kace_mps_alive(mps))
        return 0;
    kace_mps_stop_report r;
    kace_status st = kace_mps_quit(ctx, mps, &r);
    if (st) {
        cli_error(ctx, st);
        return 1;
    }
    report_stop(&r, true, true);
    if (!quiet)
        fprintf(stderr, "kace: MPS daemon quit for time-sliced runs\n");
    return 0;
}

int measure_cli_stop_mps(kace_ctx *ctx, kace_mps **mps, bool quiet, bool expect_running)
{
    if (!*mps)
        return 0;
    kace_mps_stop_report r;
    kace_status st = kace_mps_stop(ctx, mps, &r);
    if (st) {
        cli_error(ctx, st);
        return 1;
    }
    report_stop(&r, quiet, expect_running);
    return 0;
}

kace_gpu *measure_cli_open_gpu(const measure_cli_options *o)
{
    kace_ctx *ctx = kace_ctx_new();
    kace_gpu *n = NULL;
    if (ctx && kace_gpu_open(ctx, o->nvml_device, &n) != KACE_OK)
        fprintf(stderr, "kace: note: %s; MPS is verified through the control daemon's server and client lists only\n",
                kace_errmsg(ctx));
    else if (n && !kace_gpu_has(n, KACE_GPU_CAP_MPS_LIST))
        fprintf(stderr, "kace: note: this NVML has no MPS client list; MPS is verified through the control "
                        "daemon's server and client lists only\n");
    kace_ctx_free(&ctx);
    return n;
}

/* ---- printing ----------------------------------------------------------- */

static const char *run_status_word(kace_run_status s)
{
    switch (s) {
    case KACE_RUN_OK: return "ok";
    case KACE_RUN_OOM: return "oom";
    case KACE_RUN_TIMEOUT: return "timeout";
    case KACE_RUN_FAILED: break;
    }
    return "failed";
}

void measure_cli_print_result(const kace_measure_spec *spec, const kace_measure_result *r, bool verbose)
{
    /* The run's length, and how much of it went to starting: the last member's first report
     * (a PyTorch workload's imports and model), the share a warm workload would save. A member
     * started ahead counts from its gate's opening (kace_proc_result.gate_open_ns, set by the
     * pool), not from its spawn: the time it was held is not this run's. */
    double wall = 0, first = 0;
    bool all_reported = true;
    for (int i = 0; i < spec->k; i++) {
        const kace_proc_result *p = &r->proc[i];
        int64_t start = p->gate_open_ns > 0 ? p->gate_open_ns : p->start_ns;
        double held = p->gate_open_ns > 0 && p->start_ns > 0 ? (double)(p->gate_open_ns - p->start_ns) / 1e9 : 0;
        if (p->runtime_s - held > wall)
            wall = p->runtime_s - held;
        if (!(p->first_record_ns > 0 && start > 0))
            all_reported = false;
        else if ((double)(p->first_record_ns - start) / 1e9 > first)
            first = (double)(p->first_record_ns - start) / 1e9;
    }
    printf("run %lld (%s, %s, repetition %d): %s in %.1f s", r->run_id, r->set, spec->timeslice ? "time-slicing" : "MPS",
           spec->repetition, run_status_word(r->status), wall);
    if (all_reported)
        printf(" (every member's first report within %.1f s of its start)", first);
    printf("\n");
    if (verbose && !spec->timeslice && r->mps_server_pid > 0)
        printf("  served by MPS server %d%s%s\n", r->mps_server_pid,
               r->clients_verified ? "; every member among its clients" : "",
               r->nvml_verified ? "; every client in NVML's MPS client list" : "");
    if (verbose)
        printf("  %-40s %5s %-13s %12s %7s\n", "workload", "mps%", "status", "samples/s", "cv");
    for (int i = 0; i < spec->k; i++) {
        const kace_proc_result *p = &r->proc[i];
        bool ok = p->status == KACE_PROC_OK;
        if (verbose || !ok) {
            char ending[96];
            if (ok)
                printf("  %-40s %5d %-13s %12.4g %7.3f  %s\n", spec->workload[i], spec->mps_pct[i],
                       kace_proc_status_name(p->status), p->throughput.samples_per_s, p->throughput.cv,
                       kace_proc_ending(p, ending, sizeof ending));
            else
                printf("  %-40s %5d %-13s %12s %7s  %s (%s)\n", spec->workload[i], spec->mps_pct[i],
                       kace_proc_status_name(p->status), "-", "-", p->detail,
                       kace_proc_ending(p, ending, sizeof ending));
        }
        if (!ok && p->status != KACE_PROC_STOPPED && p->status != KACE_PROC_CANCELLED && p->stderr_tail[0]) {
            /* The last line of its stderr usually says why. */
            const char *tail = p->stderr_tail;
            size_t len = strlen(tail);
            while (len > 0 && tail[len - 1] == '\n')
                len--;
            const char *start = tail + len;
            while (start > tail && start[-1] != '\n')
                start--;
            fprintf(stderr, "kace: %s: %.*s\n", spec->workload[i], (int)(tail + len - start), start);
        }
    }
    if (r->exclusive_metric[0])
        printf("  stored as %s's %s (its exclusive throughput at %d%% MPS)\n", spec->workload[0], r->exclusive_metric,
               spec->mps_pct[0]);
    fflush(stdout);
}

/* ---- kace workload ---------------------------------------------------------- */

int cmd_workload(int argc, char **argv)
{
    const char *db = cli_default_db();
    static const struct option longopts[] = {{"db", required_argument, 0, 'd'}, {"help", no_argument, 0, 'h'},
                                             {0, 0, 0, 0}};
    /* Options count anywhere before "--" (kace workload add --db X NAME -- CMD); what follows "--" is
     * the workload's command, whose own options getopt never sees. */
    int opt_argc = argc;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--") == 0) {
            opt_argc = i;
            break;
        }
    /* The words between the options, in order: the verb, NAME, and (without "--") the command. */
    char **words = calloc((size_t)argc + 1, sizeof *words);
    if (!words) {
        fprintf(stderr, "kace: out of memory\n");
        return EXIT_FAILURE_RUN;
    }
    int n_words = 0, c;
    optind = 1;
    while (optind < opt_argc) {
        /* '+': getopt stops at each word, which is taken here before the options after it are read. */
        if ((c = getopt_long(opt_argc, argv, "+d:h", longopts, NULL)) == -1) {
            words[n_words++] = argv[optind++];
            continue;
        }
        switch (c) {
        case 'd': db = optarg; break;
        case 'h':
            free(words);
            printf("usage: kace workload add [--db PATH] NAME -- COMMAND [ARGS...]\n"
                   "       kace workload list [--db PATH]\n"
                   "add: stores the command that runs workload NAME (replacing an earlier one); kace measure and\n"
                   "kace campaign start it with $KACE_PROGRESS_FD set (docs/progress-protocol.md). NAME is %s\n"
                   "(docs/cli.md). Options may come anywhere before '--'; everything after it is the command.\n"
                   "list: every workload with its command.\n",
                   KACE_WORKLOAD_NAME_RULE);
            return EXIT_OK;
        default:
            free(words);
            return cli_usage("workload", "unknown option (the workload's command, with its options, goes after '--')");
        }
    }
    int rc = EXIT_USAGE;
    char **command = opt_argc < argc ? argv + opt_argc + 1 : words + 2;
    const char *verb = n_words > 0 ? words[0] : NULL, *name = n_words > 1 ? words[1] : NULL;
    bool add = verb && strcmp(verb, "add") == 0;
    char why[300];
    if (!verb)
        rc = cli_usage("workload", "expected 'add' or 'list'");
    else if (!add && strcmp(verb, "list") != 0)
        rc = cli_usage("workload", "expected 'add' or 'list', not '%s'", verb);
    else if (!add && (n_words > 1 || opt_argc < argc))
        rc = cli_usage("workload", "list takes no arguments");
    else if (add && !name)
        rc = cli_usage("workload", "add: expected NAME -- COMMAND...");
    else if (add && !kace_workload_name_ok(name, NULL, why, sizeof why))
        rc = cli_usage("workload", "add: workload name %s (a workload name is %s)", why, KACE_WORKLOAD_NAME_RULE);
    else if (add && opt_argc < argc && n_words > 2)
        rc = cli_usage("workload", "add %s: '%s' before '--' (expected NAME -- COMMAND...)", name, words[2]);
    else if (add && !*command)
        rc = cli_usage("workload", "add %s: expected a command after '--'", name);
    else
        rc = EXIT_OK;
    if (rc != EXIT_OK) {
        free(words);
        return rc;
    }
    kace_ctx *ctx = cli_ctx_new();
    kace_store *store = add ? cli_create_store(ctx, db, false) : cli_read_store(ctx, db);
    rc = EXIT_FAILURE_RUN;
    if (!store)
        goto done;
    if (add) {
        kace_status st = kace_store_set_command(ctx, store, name, command);
        if (st) {
            rc = cli_error(ctx, st);
            goto done;
        }
        printf("workload %s: command stored\n", name);
        rc = EXIT_OK;
        goto done;
    }
    kace_dataset *ds = NULL;
    kace_status st = kace_store_load_dataset(ctx, store, NULL, false, &ds);
    if (st) {
        rc = cli_error(ctx, st);
        goto done;
    }
    for (size_t i = 0; i < ds->n_workloads; i++) {
        char **cmd = NULL;
        if (kace_store_get_command(ctx, store, ds->workloads[i].name, &cmd) != KACE_OK)
            continue;
        printf("%s:", ds->workloads[i].name);
        for (char **a = cmd; *a; a++)
            printf(" %s", *a);
        printf("\n");
        free(cmd);
    }
    kace_dataset_free(&ds);
    rc = EXIT_OK;
done:
    free(words);
    kace_store_close(&store);
    kace_ctx_free(&ctx);
    return rc;
}

/* ---- kace measure ---------------------------------------------------------- */

static int measure_usage(void)
{
    printf("usage: kace measure [options] A B [C ...]\n"
           "Starts the workloads together (each with its stored command, see kace workload add), aligns\n"
           "their steady windows and records each one's throughput and status as one run in the store.\n"
           "Under MPS (default) kace starts its own MPS control daemon and quits it afterwards; the run is\n"
           "recorded only when MPS was seen serving it (a server in the daemon's list while the clients\n"
           "ran, and every client in NVML's MPS client list where NVML offers it).\n"
           "  --db PATH        the store\n"
           "  --mps-pct LIST   CUDA_MPS_ACTIVE_THREAD_PERCENTAGE of each, e.g. 30,70 (default 100 each)\n"
           "  --no-mps         plain time-slicing (to compare against): no MPS daemon of kace's runs meanwhile\n"
           "  --set NAME       colocation set (default pairs / triples / k<N>, timeslice-... without MPS)\n"
           MEASURE_CLI_USAGE
           "Exit status: 0 the run was ok, 1 it failed (recorded as failed / oom / timeout) or could not\n"
           "run, 2 usage, 128+N interrupted by signal N (nothing recorded, workloads and daemon stopped).\n");
    return EXIT_OK;
}

/* The first repetition number not stored yet for this colocation. */
static kace_status next_repetition(kace_ctx *ctx, kace_store *store, kace_measure_spec *spec)
{
    kace_plan_entry e = {.spec = *spec};
    if (!e.spec.set[0])
        kace_measure_default_set(&e.spec, e.spec.set, sizeof e.spec.set);
    for (int r = 0; r < 1000000; r++) {
        e.spec.repetition = r;
        kace_measured_run run;
        memset(&run, 0, sizeof run);
        run.set = e.spec.set;
        run.mode = e.spec.timeslice ? "timeslice" : "mps";
        run.repetition = r;
        run.k = e.spec.k;
        for (int i = 0; i < e.spec.k; i++) {
            run.member[i].workload = e.spec.workload[i];
            run.member[i].mps_pct = e.spec.mps_pct[i];
        }
        bool has = false;
        kace_status st = kace_store_has_measured_run(ctx, store, &run, &has);
        if (st)
            return st;
        if (!has) {
            spec->repetition = r;
            return KACE_OK;
        }
    }
    return kace_fail(ctx, KACE_ERR_INVALID, "too many repetitions of this colocation");
}

int cmd_measure(int argc, char **argv)
{
    const char *db = cli_default_db(), *pct_list = NULL, *set = NULL;
    bool no_mps = false;
    measure_cli_options mo;
    measure_cli_defaults(&mo);
    static const struct option longopts[] = {
        {"db", required_argument, 0, 'd'}, {"mps-pct", required_argument, 0, 'p'}, {"no-mps", no_argument, 0, 'n'},
        {"set", required_argument, 0, 's'}, {"help", no_argument, 0, 'h'},   MEASURE_CLI_LONGOPTS,
        {0, 0, 0, 0}};
    int c;
    bool bad = false;
    optind = 1;
    while ((c = getopt_long(argc, argv, "d:p:ns:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'd': db = optarg; break;
        case 'p': pct_list = optarg; break;
        case 'n': no_mps = true; break;
        case 's': set = optarg; break;
        case 'h': return measure_usage();
        default:
            if (!measure_cli_option(&mo, c, optarg, "measure", &bad))
                return cli_usage("measure", "unknown option");
            if (bad)
                return EXIT_USAGE;
        }
    }
    int k = argc - optind;
    if (k < 1 || k > KACE_MAX_K)
        return cli_usage("measure", "expected 1 to %d workloads, got %d", KACE_MAX_K, k);
    kace_measure_spec spec;
    memset(&spec, 0, sizeof spec);
    spec.k = k;
    spec.timeslice = no_mps;
    for (int i = 0; i < k; i++) {
        if (strlen(argv[optind + i]) >= KACE_NAME_MAX)
            return cli_usage("measure", "workload name too long: %.40s...", argv[optind + i]);
        snprintf(spec.workload[i], KACE_NAME_MAX, "%s", argv[optind + i]);
        spec.mps_pct[i] = 100;
    }
    if (set) {
        if (strlen(set) >= KACE_SET_NAME_MAX || !*set)
            return cli_usage("measure", "bad --set name");
        snprintf(spec.set, sizeof spec.set, "%s", set);
    }
    kace_ctx *ctx = cli_ctx_new();
    if (pct_list) {
        if (no_mps) {
            kace_ctx_free(&ctx);
            return cli_usage("measure", "--mps-pct needs MPS (drop --no-mps)");
        }
        kace_status st = kace_mps_pct_parse(ctx, pct_list, "--mps-pct", k, KACE_MAX_K, spec.mps_pct, NULL);
        if (st) {
            fprintf(stderr, "kace measure: %s (see kace measure --help)\n", kace_errmsg(ctx));
            kace_ctx_free(&ctx);
            return EXIT_USAGE;
        }
    }

    kace_store *store = cli_create_store(ctx, db, false);
    kace_mps *mps = NULL;
    kace_gpu *gpu = NULL;
    int rc = EXIT_FAILURE_RUN;
    kace_status st;
    if (!store)
        goto done;
    if (mo.log_path && (mo.log_fd = open(mo.log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644)) < 0) {
        fprintf(stderr, "kace: %s: %s\n", mo.log_path, strerror(errno));
        goto done;
    }
    /* Every command must be known before a daemon is started for nothing. */
    for (int i = 0; i < k; i++) {
        char **cmd = NULL;
        if ((st = kace_store_get_command(ctx, store, spec.workload[i], &cmd))) {
            rc = cli_error(ctx, st);
            goto done;
        }
        free(cmd);
    }
    if ((st = next_repetition(ctx, store, &spec))) {
        rc = cli_error(ctx, st);
        goto done;
    }
    cli_install_interrupt_handlers();
    /* Time-slicing holds the run folder too: no daemon of kace's may run meanwhile. */
    if ((st = no_mps ? measure_cli_open_mps(ctx, &mo, &mps) : measure_cli_start_mps(ctx, &mo, &mps))) {
        rc = cli_error(ctx, st);
        goto done;
    }
    if (!no_mps)
        gpu = measure_cli_open_gpu(&mo);
    kace_measure_options opt = {.mps = mps, .gpu_access = gpu, .gpu = mo.gpu};
    measure_cli_run_options(&mo, &opt.run, "measuring");
    kace_measure_result res;
    res.stored = false;
    if (!cli_interrupted) {
        st = kace_measure(ctx, store, &spec, &opt, &res);
        measure_cli_progress_done();
        if (st) {
            rc = cli_error(ctx, st);
        } else if (!res.cancelled) {
            measure_cli_print_result(&spec, &res, true);
            rc = res.status == KACE_RUN_OK ? EXIT_OK : EXIT_FAILURE_RUN;
        }
    }
    if (measure_cli_stop_mps(ctx, &mps, true, !no_mps) != 0)
        rc = EXIT_FAILURE_RUN;
    if (cli_interrupted) {
        fprintf(stderr, "kace: interrupted: %s; workloads%s stopped\n",
                res.stored ? "the run was recorded before" : "nothing recorded", no_mps ? "" : " and MPS daemon");
        rc = cli_interrupted_exit();
    }
done:
    kace_gpu_close(&gpu);
    if (mo.log_fd >= 0)
        close(mo.log_fd);
    kace_store_close(&store);
    kace_ctx_free(&ctx);
    return rc;
}
