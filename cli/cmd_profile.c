/* kace profile --name W [options] -- COMMAND...
 *
 * Runs one workload alone on the GPU twice (the recipe: kace_profile_run,
 * include/kace/profile.h: a clean run for its throughput and NVML metrics
 * and the replay cap's ranking, a counters run with libkace_cupti.so
 * replaying the capped signatures for its kernel metrics) and stores its
 * profile in one store transaction, with the command, so that `kace measure`
 * can run the workload without `kace workload add`. This file parses the
 * options, finds the injection library and a recording file, prints the
 * recipe's progress and failures, and stores. Both runs must succeed before
 * anything is stored. */
#include <errno.h>
#include <getopt.h>
#include <glob.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "kace/profile.h"

static volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
    interrupted = sig;
}

/* SIGINT/SIGTERM set a flag that the runner polls; it then kills the
 * workload's process group. No SA_RESTART, so waits return at once. */
static void install_handlers(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
}

static bool is_file(const char *p)
{
    struct stat sb;
    return p && stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* $KACE_CUPTI_LIBRARY, else libkace_cupti.so beside the kace binary. */
static const char *find_cupti(const char *given)
{
    static char path[PATH_MAX];
    if (given)
        return given;
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
    strcpy(slash + 1, "libkace_cupti.so");
    return path;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: kace profile --name W [--db PATH] [--warmup S] [--window S] [--counters-warmup S]\n"
               "                    [--counters-window S] [--timeout S] [--budget S] [--device N] [--cupti LIB]\n"
               "                    [--keep-recording FILE] [--stop-grace-max S] [--no-counters]\n"
               "                    [--replay-cover F] [--replay-max N] -- COMMAND [ARG...]\n"
               "Runs COMMAND alone on the GPU twice and stores workload W's profile, and COMMAND as W's command\n"
               "for kace measure:\n"
               "  1. clean run, with libkace_cupti.so recording its warm-up's kernel launches only (no replay):\n"
               "     exclusive throughput (samples/s, from the progress records of docs/progress-protocol.md)\n"
               "     and its sd; sm%%, mem%%, memcap, power, SM clock, PCIe (NVML); each kernel signature's GPU\n"
               "     time in the warm-up. --warmup S (default 10) and --window S (default 30).\n"
               "  2. counters run, with libkace_cupti.so: the six kernel metrics of the kernels in its steady\n"
               "     window. Its throughput is not stored (kernel replay slows it). --counters-warmup S\n"
               "     (default 10) and --counters-window S (default 15).\n"
               "Kernel replay is capped: the counters run replays only the signatures that take most of the\n"
               "clean run's warm-up's GPU time, the longest first, until they cover --replay-cover F of it\n"
               "(0.01..1, default 0.95), at most --replay-max N of them (0: no limit; default 40); the counter\n"
               "metrics are weighted over them, and the cap is stored with the profile. --replay-cover 1\n"
               "--replay-max 0: every signature replayed, the clean run without the library.\n"
               "--keep-recording FILE: keep the counters run's recording as FILE, and with the cap the clean\n"
               "run's (its warm-up's launches) as FILE.clean.\n"
               "Nothing is stored unless both runs succeed. --timeout S bounds each run (default its\n"
               "warm-up + window + 120). --budget S bounds both together: the counters run gets what the\n"
               "clean run left of S (its kernel replay makes it the longer, by an amount unknown in advance).\n"
               "--no-counters: one run, no kernel replay: the clean run with libkace_cupti.so recording kernel\n"
               "launches only (grid, block, registers, shared memory) beside its throughput and NVML values.\n"
               "The counter metrics are stored as missing, so models use the no-counters metric set.\n"
               "--device N: the NVML index of the GPU (default 0).\n"
               "--stop-grace-max S: the longest wait from kace's SIGTERM to SIGKILL (default 30): the wait is\n"
               "3 x the workload's longest step, at least 3 s, so that it stops at its next report.\n");
}

/* Prints the end of a workload's stderr, indented. */
static void print_tail(const char *tail)
{
    if (!tail[0])
        return;
    const char *p = tail + strlen(tail);
    int lines = 0;
    while (p > tail && lines < 8)
        if (*--p == '\n' && p[1])
            lines++;
    fprintf(stderr, "kace: the workload's last stderr lines:\n");
    for (const char *q = p == tail ? p : p + 1; *q;) {
        const char *nl = strchr(q, '\n');
        int n = nl ? (int)(nl - q) : (int)strlen(q);
        fprintf(stderr, "  | %.*s\n", n, q);
        q += n + (nl ? 1 : 0);
    }
}

/* "%.1f" of a value, or "missing" for NaN (what the store will hold). */
static const char *fmt1(double v, char *buf, size_t size)
{
    if (isnan(v))
        snprintf(buf, size, "missing");
    else
        snprintf(buf, size, "%.1f", v);
    return buf;
}

/* What the recipe's steps print (stderr), in order. */
typedef struct printer {
    const char *name, *gpu, *cupti;
    const kace_profile_options *opt;
    char sm_text[32], mem_text[32];
} printer;

static void on_progress(void *user, kace_profile_step step, const kace_profile_result *r)
{
    printer *p = user;
    switch (step) {
    case KACE_PROFILE_CLEAN_START:
        if (p->opt->no_counters)
            fprintf(stderr,
                    "kace profile: 1/1 clean run of %s on %s, %s recording launches only, no counters (warm-up %g s, "
                    "window %g s)\n",
                    p->name, p->gpu, p->cupti, p->opt->clean.warmup_s, p->opt->clean.window_s);
        else if (r->cap.on)
            fprintf(stderr,
                    "kace profile: 1/2 clean run of %s on %s, %s recording the warm-up's launches for the "
                    "replay cap (warm-up %g s, window %g s)\n",
                    p->name, p->gpu, p->cupti, p->opt->clean.warmup_s, p->opt->clean.window_s);
        else
            fprintf(stderr,
                    "kace profile: 1/2 clean run of %s on %s, without the CUPTI library (warm-up %g s, window %g s)\n",
                    p->name, p->gpu, p->opt->clean.warmup_s, p->opt->clean.window_s);
        break;
    case KACE_PROFILE_CLEAN_DONE:
        fmt1(kace_gpu_stats_mean(&r->steady, KACE_GPU_SM_PCT), p->sm_text, sizeof p->sm_text);
        fmt1(kace_gpu_stats_mean(&r->steady, KACE_GPU_MEM_PCT), p->mem_text, sizeof p->mem_text);
        char of[96] = "";
        if (r->host.mem_of_bytes > 0 && r->host.mem_of_bytes == r->host.mem_limit_bytes)
            snprintf(of, sizeof of, " (of the cgroup's memory limit, %.3g GiB)", r->host.mem_of_bytes / 1073741824.0);
        fprintf(stderr,
                "kace profile: %s done: %.4g samples/s (sd %.3g, %.1f s window), sm%% %s, mem%% %s, host CPU%% "
                "%.1f, MainMem%% %.2f%s\n",
                p->opt->no_counters ? "1/1" : "1/2", r->clean.throughput.samples_per_s, r->clean.throughput.sd, r->clean.throughput.window_s,
                p->sm_text, p->mem_text, kace_host_stats_cpu_pct(&r->host), kace_host_stats_mem_pct(&r->host), of);
        if (r->host_note[0])
            fprintf(stderr, "kace profile: W: %s\n", r->host_note);
        if (r->mps_client)
            fprintf(stderr, "kace profile: note: %s ran as an MPS client (it is in NVML's MPS process list: an MPS "
                            "daemon runs on this machine); NVML gives SM and memory utilization only to the MPS "
                            "server, so sm%% and mem%% are stored as missing, memcap from its MPS client memory\n",
                    p->name);
        break;
    case KACE_PROFILE_COUNTERS_START:
        fprintf(stderr, "kace profile: 2/2 counters run of %s with %s (warm-up %g s, window %g s)\n", p->name,
                p->cupti, p->opt->counters.warmup_s, p->opt->counters.window_s);
        if (r->cap.on)
            fprintf(stderr,
                    "kace profile: replay cap: %zu of %zu kernel signatures replayed, %.1f%% of the clean run's GPU "
                    "time (--replay-cover %g --replay-max %d)\n",
                    r->cap.replayed, r->cap.seen, 100 * r->cap.time_share, r->cap.cover, r->cap.max);
        else
            fprintf(stderr, "kace profile: replay cap: none, every kernel signature replayed\n");
        break;
    case KACE_PROFILE_LAUNCHES_DONE:
        if (r->info.n_errors)
            fprintf(stderr, "kace profile: warning: the CUPTI library reported %zu error(s), the first: %s\n",
                    r->info.n_errors, r->info.first_error);
        fprintf(stderr,
                "kace profile: 1/1 launches: %zu kernels in its window; metric set no-counters (SM/DRAM/memory "
                "throughput stored as missing)\n",
                r->kernels.n_kernels);
        break;
    case KACE_PROFILE_COUNTERS_DONE: {
        const kace_kernel_info *info = &r->info;
        const kace_kernel_summary *ks = &r->kernels;
        if (info->n_errors)
            fprintf(stderr, "kace profile: warning: the CUPTI library reported %zu error(s), the first: %s\n",
                    info->n_errors, info->first_error);
        if (info->n_skipped)
            fprintf(stderr, "kace profile: warning: %zu record(s) with unusable values were left out, the first: %s\n",
                    info->n_skipped, info->first_skipped);
        if (ks->n_with_counters == 0)
            fprintf(stderr,
                    "kace profile: warning: no counter values (SM/DRAM/memory throughput are left missing)\n");
        /* Kernels per sample: how many launches one step holds (x the
         * batch), so that a comparison with ncu can cover a whole step. */
        double samples = r->counters.throughput.samples_per_s * r->counters.throughput.window_s;
        char per_sample[64] = "";
        if (r->info.monotonic_clock && samples > 0 && isfinite(samples) && ks->n_kernels > 0) /* same window */
            snprintf(per_sample, sizeof per_sample, "; about %.4g kernels per sample", (double)ks->n_kernels / samples);
        fprintf(stderr,
                "kace profile: 2/2 done: %zu kernels in its window (%zu with counters, %.0f%% of kernel time); its "
                "%.4g samples/s (slowed by kernel replay) are not stored%s\n",
                ks->n_kernels, ks->n_with_counters, 100 * ks->counter_time_share,
                r->counters.throughput.samples_per_s, per_sample);
        break;
    }
    }
}

/* Prints why the recipe failed; returns the exit status for kace profile. */
static int print_failure(kace_ctx *ctx, kace_status st, const char *name, const kace_profile_result *r)
{
    const char *phase = r->failed_run == 1 ? (r->no_counters ? "clean run (1/1)" : "clean run (1/2)")
                                           : "counters run (2/2)";
    switch (r->failure) {
    case KACE_PROFILE_FAIL_RUN: {
        const kace_proc_result *res = r->failed_run == 1 ? &r->clean : &r->counters;
        fprintf(stderr, "kace profile: %s: workload %s %s: %s; its process group was ended, nothing was stored\n",
                phase, name, kace_proc_status_name(res->status), res->detail);
        print_tail(res->stderr_tail);
        return res->status == KACE_PROC_CANCELLED ? 128 + (int)interrupted : EXIT_FAILURE_RUN;
    }
    case KACE_PROFILE_FAIL_SAMPLING:
        fprintf(stderr, "kace profile: %s: NVML sampling failed: %s; nothing was stored\n", phase, kace_errmsg(ctx));
        return EXIT_FAILURE_RUN;
    case KACE_PROFILE_FAIL_NO_RECORDING:
        fprintf(stderr, "kace profile: %s: %s: is it a CUDA program? Nothing was stored\n", phase, kace_errmsg(ctx));
        return EXIT_FAILURE_RUN;
    case KACE_PROFILE_FAIL_KERNELS:
        fprintf(stderr, "kace profile: %s: %s: %s%s%s; nothing was stored\n", phase, name, kace_errmsg(ctx),
                r->info.n_errors ? "; the CUPTI library reported: " : "", r->info.first_error);
        return EXIT_FAILURE_RUN;
    default:
        return cli_error(ctx, st);
    }
}

/* The recordings of child CUDA processes that inherited the workload's
 * environment: the injection library gives each FILE.<pid>, so that only
 * the first process writes FILE. Said once; removed unless kept. */
static void other_recordings(const char *name, const char *recording, bool keep)
{
    char pattern[PATH_MAX + 8];
    snprintf(pattern, sizeof pattern, "%s.[0-9]*", recording);
    glob_t g;
    if (glob(pattern, 0, NULL, &g) != 0)
        return;
    fprintf(stderr,
            "note: %zu other CUDA process(es) of %s wrote recordings of their own (%s): the kernel metrics are the "
            "first process's%s\n",
            g.gl_pathc, name, g.gl_pathv[0], keep ? "" : " (removed; --keep-recording keeps them)");
    for (size_t i = 0; i < g.gl_pathc && !keep; i++)
        unlink(g.gl_pathv[i]);
    globfree(&g);
}

int cmd_profile(int argc, char **argv)
{
    const char *name = NULL, *db = cli_default_db(), *cupti = NULL, *keep = NULL;
    kace_profile_options po;
    kace_profile_options_init(&po);
    kace_run_options *ro = &po.clean, *co = &po.counters;
    unsigned device = 0;
    static const struct option longopts[] = {
        {"name", required_argument, 0, 'n'},    {"db", required_argument, 0, 'd'},
        {"warmup", required_argument, 0, 'w'},  {"window", required_argument, 0, 'W'},
        {"timeout", required_argument, 0, 't'}, {"device", required_argument, 0, 'g'},
        {"cupti", required_argument, 0, 'c'},   {"keep-recording", required_argument, 0, 'k'},
        {"counters-warmup", required_argument, 0, 'u'}, {"counters-window", required_argument, 0, 'U'},
        {"stop-grace-max", required_argument, 0, 'G'}, {"budget", required_argument, 0, 'B'},
        {"no-counters", no_argument, 0, 'N'},   {"replay-cover", required_argument, 0, 'r'},
        {"replay-max", required_argument, 0, 'R'},
        {"help", no_argument, 0, 'h'},          {0, 0, 0, 0},
    };
    optind = 1;
    int c;
    bool ok = true;
    while ((c = getopt_long(argc, argv, "+n:d:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'n': name = optarg; break;
        case 'd': db = optarg; break;
        case 'w': ok = cli_seconds("profile", "warmup", optarg, &ro->warmup_s); break;
        case 'W': ok = cli_seconds("profile", "window", optarg, &ro->window_s); break;
        case 'u': ok = cli_seconds("profile", "counters-warmup", optarg, &co->warmup_s); break;
        case 'U': ok = cli_seconds("profile", "counters-window", optarg, &co->window_s); break;
        case 't':
            ok = cli_seconds("profile", "timeout", optarg, &ro->timeout_s);
            co->timeout_s = ro->timeout_s;
            break;
        case 'B': ok = cli_seconds("profile", "budget", optarg, &po.budget_s); break;
        case 'G':
            ok = cli_parse_number(optarg, 1, 3600, false, &ro->term_grace_max_s);
            if (!ok)
                cli_usage("profile", "--stop-grace-max must be a number of seconds from 1 to 3600, not '%s'", optarg);
            co->term_grace_max_s = ro->term_grace_max_s;
            break;
        case 'g': {
            int d = 0;
            ok = cli_int("profile", "device", optarg, 0, 63, &d);
            device = (unsigned)d;
            break;
        }
        case 'c': cupti = optarg; break;
        case 'N': po.no_counters = true; break;
        case 'r': ok = cli_number("profile", "replay-cover", optarg, 0.01, 1, &po.replay_cover); break;
        case 'R': ok = cli_int("profile", "replay-max", optarg, 0, 8192, &po.replay_max); break;
        case 'k': keep = optarg; break;
        case 'h': usage(stdout); return EXIT_OK;
        default: return cli_usage("profile", "unknown option");
        }
        if (!ok)
            return EXIT_USAGE; /* the parser said why */
    }
    if (!name || !*name)
        return cli_usage("profile", "--name W is required (the workload's name in the store)");
    if (strlen(name) >= KACE_NAME_MAX)
        return cli_usage("profile", "--name is longer than %d bytes", KACE_NAME_MAX - 1);
    if (optind >= argc)
        return cli_usage("profile", "no command to run (expected: kace profile --name W -- COMMAND ...)");
    if (!(ro->window_s > 0))
        return cli_usage("profile", "--window must be > 0");
    if (!(co->window_s > 0))
        return cli_usage("profile", "--counters-window must be > 0");

    kace_ctx *ctx = cli_ctx_new();
    if (!ctx)
        return EXIT_FAILURE_RUN;
    int rc = EXIT_FAILURE_RUN;
    kace_gpu *dev = NULL;
    kace_profile_result res = {0};
    kace_import_batch *batch = NULL;
    kace_store *store = NULL;
    char recording[PATH_MAX] = "";

    /* A GPU with a driver, before anything else. */
    kace_status st = kace_gpu_open(ctx, device, &dev);
    if (st) {
        fprintf(stderr, "kace profile: %s\n", kace_errmsg(ctx));
        goto done;
    }
    cupti = find_cupti(cupti);
    if (!is_file(cupti)) {
        fprintf(stderr,
                "kace profile: the CUPTI injection library %s was not found (it is built only where the CUDA "
                "toolkit's CUPTI is installed; give its path with --cupti or $KACE_CUPTI_LIBRARY)\n",
                cupti ? cupti : "libkace_cupti.so");
        goto done;
    }
    if (keep) {
        snprintf(recording, sizeof recording, "%s", keep);
    } else {
        const char *tmp = getenv("TMPDIR");
        snprintf(recording, sizeof recording, "%s/kace-cupti-XXXXXX", tmp && *tmp ? tmp : "/tmp");
        int fd = mkstemp(recording);
        if (fd < 0) {
            fprintf(stderr, "kace profile: cannot create a recording file %s: %s\n", recording, strerror(errno));
            recording[0] = '\0';
            goto done;
        }
        close(fd);
    }
    install_handlers();
    const char *gpu = kace_gpu_device_name(dev)[0] ? kace_gpu_device_name(dev) : "GPU";

    /* The two runs and their checks (the library's recipe). */
    printer pr = {.name = name, .gpu = gpu, .cupti = cupti, .opt = &po};
    po.name = name;
    po.argv = argv + optind;
    po.cupti = cupti;
    po.recording = recording;
    char clean_kept[PATH_MAX + 8];
    if (keep) { /* the clean run's too, with the replay cap: its signatures' GPU times */
        snprintf(clean_kept, sizeof clean_kept, "%s.clean", keep);
        po.clean_recording = clean_kept;
    }
    po.cancel = &interrupted;
    po.progress = on_progress;
    po.user = &pr;
    if ((st = kace_profile_run(ctx, dev, &po, &res))) {
        rc = print_failure(ctx, st, name, &res);
        goto done;
    }

    /* One transaction: the clean run's throughput and NVML values, the
     * counters run's kernel metrics. */
    if ((st = kace_profile_batch(ctx, name, &res, &batch))) {
        cli_error(ctx, st);
        goto done;
    }
    if (!(store = cli_create_store(ctx, db, false)))
        goto done;
    char date[16];
    time_t now = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%d", localtime(&now));
    kace_source src = {kace_gpu_device_name(dev)[0] ? kace_gpu_device_name(dev) : NULL, "kace-profile", date};
    kace_import_stats stats;
    char other_gpu[256] = "";
    if ((src.gpu && (st = kace_store_profile_other_gpu(ctx, store, name, src.gpu, other_gpu, sizeof other_gpu))) ||
        (st = kace_store_add_profile(ctx, store, batch, &src, name, argv + optind, &stats))) {
        cli_error(ctx, st);
        goto done;
    }
    const kace_throughput *t = &res.clean.throughput;
    const kace_kernel_summary *ks = &res.kernels;
    if (res.no_counters)
        printf("%s: %.4g samples/s (sd %.3g, %.1f s window, clean run), sm%% %s, mem%% %s, memcap %.2f GB; %zu "
               "kernels (launch records, no counters) after %zu earlier kernels; metric set no-counters; stored with "
               "its command in %s\n",
               name, t->samples_per_s, t->sd, t->window_s, pr.sm_text, pr.mem_text, res.all.peak_mem_mib / 1024.0,
               ks->n_kernels, ks->n_before, db);
    else
        printf("%s: %.4g samples/s (sd %.3g, %.1f s window, clean run), sm%% %s, mem%% %s, memcap %.2f GB; %zu "
               "kernels (%zu with counters, %.0f%% of kernel time; counters run) after %zu earlier kernels; stored "
               "with its command in %s\n",
               name, t->samples_per_s, t->sd, t->window_s, pr.sm_text, pr.mem_text, res.all.peak_mem_mib / 1024.0,
               ks->n_kernels, ks->n_with_counters, 100 * ks->counter_time_share, ks->n_before, db);
    if (stats.values_retired)
        printf("%s: %zu stored profile values measured on '%s' moved to history (a profile is one GPU's)\n", name,
               stats.values_retired, other_gpu);
    rc = EXIT_OK;
done:
    if (recording[0])
        other_recordings(name, recording, keep != NULL);
    if (recording[0] && !keep)
        unlink(recording);
    kace_store_close(&store);
    kace_import_batch_free(&batch);
    kace_profile_result_release(&res);
    kace_gpu_close(&dev);
    kace_ctx_free(&ctx);
    return rc;
}
