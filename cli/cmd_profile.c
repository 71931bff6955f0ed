/* kace profile --name W [options] -- COMMAND...
 *
 * Runs one workload alone on the GPU twice and stores its profile in one
 * store transaction, with the command, so that `kace measure` can run the
 * workload without `kace workload add`:
 *   1. a clean run, without the CUPTI injection library (an inherited
 *      CUDA_INJECTION64_PATH is removed too): exclusive throughput from its
 *      progress records, and the NVML system metrics;
 *   2. a counters run with libkace_cupti.so: the kernel metrics of the
 *      recording's kernels in that run's steady window. The library replays
 *      profiled kernels for their counters, so this run's throughput and NVML
 *      values are not the workload's own and are not stored.
 * Both must succeed before anything is stored. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "kace/kernels.h"
#include "kace/nvml.h"
#include "kace/runner.h"

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

typedef struct sampler {
    kace_ctx *ctx;
    kace_nvml *nvml;
    kace_gpu_stats all, steady;
    bool mps_client; /* the workload ran as an MPS client (a daemon on the machine) */
    char error[512];
} sampler;

static void on_tick(void *user, const kace_run_view *v)
{
    sampler *s = user;
    if (s->error[0])
        return;
    kace_gpu_sample x;
    if (kace_nvml_sample(s->ctx, s->nvml, v->pgids, v->n, &x) != KACE_OK) {
        snprintf(s->error, sizeof s->error, "%s", kace_errmsg(s->ctx));
        return;
    }
    /* Under MPS the device's SM%/mem% include the server's other clients:
     * only what NVML gives per client may be stored as the workload's. */
    if (x.mps_client) {
        s->mps_client = true;
        kace_gpu_sample_drop_device_wide(&x);
    }
    kace_gpu_stats_add(&s->all, &x);
    if (v->steady)
        kace_gpu_stats_add(&s->steady, &x);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: kace profile --name W [--db PATH] [--warmup S] [--window S] [--counters-warmup S]\n"
               "                    [--counters-window S] [--timeout S] [--device N] [--cupti LIB]\n"
               "                    [--keep-recording FILE] -- COMMAND [ARG...]\n"
               "Runs COMMAND alone on the GPU twice and stores workload W's profile, and COMMAND as W's command\n"
               "for kace measure:\n"
               "  1. clean run, without the CUPTI library: exclusive throughput (samples/s, from the progress\n"
               "     records of docs/progress-protocol.md) and its sd; sm%%, mem%%, memcap, power, SM clock,\n"
               "     PCIe (NVML). --warmup S (default 10) and --window S (default 30).\n"
               "  2. counters run, with libkace_cupti.so: the six kernel metrics of the kernels in its steady\n"
               "     window. Its throughput is not stored (kernel replay slows it). --counters-warmup S\n"
               "     (default 10) and --counters-window S (default 15).\n"
               "Nothing is stored unless both runs succeed. --timeout S bounds each run (default its\n"
               "warm-up + window + 120). --device N: the NVML index of the GPU (default 0).\n");
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

/* One phase's run; prints why it failed. Returns 0 when the workload
 * reported through its window, else the exit status for kace profile. */
static int run_phase(kace_ctx *ctx, const char *phase, const char *name, const kace_proc_spec *spec,
                     const kace_run_options *ro, kace_proc_result *res)
{
    kace_status st = kace_run(ctx, spec, 1, ro, res);
    if (st)
        return cli_error(ctx, st);
    if (res->status == KACE_PROC_OK)
        return 0;
    fprintf(stderr, "kace profile: %s: workload %s %s: %s; its process group was ended, nothing was stored\n", phase,
            name, kace_proc_status_name(res->status), res->detail);
    print_tail(res->stderr_tail);
    return res->status == KACE_PROC_CANCELLED ? 128 + (int)interrupted : EXIT_FAILURE_RUN;
}

int cmd_profile(int argc, char **argv)
{
    const char *name = NULL, *db = cli_default_db(), *cupti = NULL, *keep = NULL;
    kace_run_options ro, co;
    kace_run_options_init(&ro);
    kace_run_options_init(&co);
    co.warmup_s = 10;
    co.window_s = 15;
    unsigned device = 0;
    static const struct option longopts[] = {
        {"name", required_argument, 0, 'n'},    {"db", required_argument, 0, 'd'},
        {"warmup", required_argument, 0, 'w'},  {"window", required_argument, 0, 'W'},
        {"timeout", required_argument, 0, 't'}, {"device", required_argument, 0, 'g'},
        {"cupti", required_argument, 0, 'c'},   {"keep-recording", required_argument, 0, 'k'},
        {"counters-warmup", required_argument, 0, 'u'}, {"counters-window", required_argument, 0, 'U'},
        {"help", no_argument, 0, 'h'},          {0, 0, 0, 0},
    };
    optind = 1;
    int c;
    bool ok = true;
    while ((c = getopt_long(argc, argv, "+n:d:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'n': name = optarg; break;
        case 'd': db = optarg; break;
        case 'w': ok = cli_seconds("profile", "warmup", optarg, &ro.warmup_s); break;
        case 'W': ok = cli_seconds("profile", "window", optarg, &ro.window_s); break;
        case 'u': ok = cli_seconds("profile", "counters-warmup", optarg, &co.warmup_s); break;
        case 'U': ok = cli_seconds("profile", "counters-window", optarg, &co.window_s); break;
        case 't':
            ok = cli_seconds("profile", "timeout", optarg, &ro.timeout_s);
            co.timeout_s = ro.timeout_s;
            break;
        case 'g': {
            int d = 0;
            ok = cli_int("profile", "device", optarg, 0, 63, &d);
            device = (unsigned)d;
            break;
        }
        case 'c': cupti = optarg; break;
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
    if (!(ro.window_s > 0))
        return cli_usage("profile", "--window must be > 0");
    if (!(co.window_s > 0))
        return cli_usage("profile", "--counters-window must be > 0");

    kace_ctx *ctx = kace_ctx_new();
    if (!ctx)
        return EXIT_FAILURE_RUN;
    int rc = EXIT_FAILURE_RUN;
    sampler smp = {.ctx = ctx};
    kace_kernel_recording *rec = NULL;
    kace_import_batch *batch = NULL;
    kace_store *store = NULL;
    char recording[PATH_MAX] = "";

    /* 1. A GPU with a driver, before anything else. */
    kace_status st = kace_nvml_open(ctx, NULL, device, &smp.nvml);
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
    const char *gpu = kace_nvml_device_name(smp.nvml)[0] ? kace_nvml_device_name(smp.nvml) : "GPU";

    /* 2. The clean run: no injection library, so no kernel replay; its
     *    throughput and NVML values are the workload's own. Entries without
     *    '=' remove inherited variables. */
    const char *clean_env[] = {"CUDA_INJECTION64_PATH", KACE_CUPTI_OUTPUT_ENV, NULL};
    kace_proc_spec clean = {.name = name, .argv = argv + optind, .extra_env = clean_env};
    kace_gpu_stats_init(&smp.all);
    kace_gpu_stats_init(&smp.steady);
    ro.stderr_fd = -1;
    ro.cancel = &interrupted;
    ro.tick = on_tick;
    ro.tick_user = &smp;
    ro.tick_s = 0.1;
    fprintf(stderr, "kace profile: 1/2 clean run of %s on %s, without the CUPTI library (warm-up %g s, window %g s)\n",
            name, gpu, ro.warmup_s, ro.window_s);
    kace_proc_result res;
    if ((rc = run_phase(ctx, "clean run (1/2)", name, &clean, &ro, &res)) != 0)
        goto done;
    rc = EXIT_FAILURE_RUN;
    if (smp.error[0]) {
        fprintf(stderr, "kace profile: clean run (1/2): NVML sampling failed: %s; nothing was stored\n", smp.error);
        goto done;
    }
    char sm_text[32], mem_text[32];
    fmt1(kace_gpu_stats_mean(&smp.steady, KACE_GPU_SM_PCT), sm_text, sizeof sm_text);
    fmt1(kace_gpu_stats_mean(&smp.steady, KACE_GPU_MEM_PCT), mem_text, sizeof mem_text);
    fprintf(stderr, "kace profile: 1/2 done: %.4g samples/s (sd %.3g, %.1f s window), sm%% %s, mem%% %s\n",
            res.throughput.samples_per_s, res.throughput.sd, res.throughput.window_s, sm_text, mem_text);
    if (smp.mps_client)
        fprintf(stderr, "kace profile: note: %s ran as an MPS client (it is in NVML's MPS process list: an MPS "
                        "daemon runs on this machine); NVML gives SM and memory utilization only to the MPS "
                        "server, so sm%% and mem%% are stored as missing, memcap from its MPS client memory\n",
                name);

    /* 3. The counters run: the injection library records every kernel and
     *    replays the first launch of each signature for its counters. */
    char inject_env[PATH_MAX + 32], output_env[PATH_MAX + 32];
    snprintf(inject_env, sizeof inject_env, "CUDA_INJECTION64_PATH=%s", cupti);
    snprintf(output_env, sizeof output_env, "%s=%s", KACE_CUPTI_OUTPUT_ENV, recording);
    const char *counters_env[] = {inject_env, output_env, NULL};
    kace_proc_spec counters = {.name = name, .argv = argv + optind, .extra_env = counters_env};
    co.stderr_fd = -1;
    co.cancel = &interrupted;
    fprintf(stderr, "kace profile: 2/2 counters run of %s with %s (warm-up %g s, window %g s)\n", name, cupti,
            co.warmup_s, co.window_s);
    kace_proc_result cres;
    if ((rc = run_phase(ctx, "counters run (2/2)", name, &counters, &co, &cres)) != 0)
        goto done;
    rc = EXIT_FAILURE_RUN;

    /* 4. Kernel metrics of the counters run's steady window. */
    struct stat sb;
    if (stat(recording, &sb) != 0 || sb.st_size == 0) {
        fprintf(stderr,
                "kace profile: counters run (2/2): %s never initialised CUDA (no kernel recording from %s): is it a "
                "CUDA program? Nothing was stored\n",
                name, cupti);
        goto done;
    }
    if ((st = kace_kernels_parse_file(ctx, recording, &rec))) {
        cli_error(ctx, st);
        goto done;
    }
    kace_kernel_info info;
    kace_kernels_info(rec, &info);
    kace_kernel_summary ks;
    int64_t from = info.monotonic_clock ? cres.throughput.start_ns : 0;
    int64_t to = info.monotonic_clock ? cres.throughput.end_ns : 0;
    if ((st = kace_kernels_reduce(ctx, rec, from, to, &ks))) {
        fprintf(stderr, "kace profile: counters run (2/2): %s: %s%s%s; nothing was stored\n", name, kace_errmsg(ctx),
                info.n_errors ? "; the CUPTI library reported: " : "", info.first_error);
        goto done;
    }
    if (info.n_errors)
        fprintf(stderr, "kace profile: warning: the CUPTI library reported %zu error(s), the first: %s\n",
                info.n_errors, info.first_error);
    if (info.n_skipped)
        fprintf(stderr, "kace profile: warning: %zu record(s) with unusable values were left out, the first: %s\n",
                info.n_skipped, info.first_skipped);
    if (ks.n_with_counters == 0)
        fprintf(stderr, "kace profile: warning: no counter values (SM/DRAM/memory throughput are left missing)\n");
    fprintf(stderr,
            "kace profile: 2/2 done: %zu kernels in its window (%zu with counters, %.0f%% of kernel time); its %.4g "
            "samples/s (slowed by kernel replay) are not stored\n",
            ks.n_kernels, ks.n_with_counters, 100 * ks.counter_time_share, cres.throughput.samples_per_s);

    /* 5. One transaction: the clean run's throughput and NVML values, the
     *    counters run's kernel metrics. */
    if ((st = kace_profile_batch_new(ctx, "kace-profile", &batch)) ||
        (st = kace_profile_batch_add_kernels(ctx, batch, name, &ks)) ||
        (st = kace_profile_batch_add(ctx, batch, name, "exclusive_throughput", res.throughput.samples_per_s)) ||
        (st = kace_profile_batch_add(ctx, batch, name, "exclusive_throughput_sd",
                                     isnan(res.throughput.sd) ? NAN : res.throughput.sd)) ||
        (st = kace_profile_batch_add(ctx, batch, name, "sm%", kace_gpu_stats_mean(&smp.steady, KACE_GPU_SM_PCT))) ||
        (st = kace_profile_batch_add(ctx, batch, name, "mem%", kace_gpu_stats_mean(&smp.steady, KACE_GPU_MEM_PCT))) ||
        (st = kace_profile_batch_add(ctx, batch, name, "memcap", smp.all.peak_mem_mib / 1024.0)) ||
        (st = kace_profile_batch_add(ctx, batch, name, "power_W", kace_gpu_stats_mean(&smp.steady, KACE_GPU_POWER_W))) ||
        (st = kace_profile_batch_add(ctx, batch, name, "sm_clock_MHz",
                                     kace_gpu_stats_mean(&smp.steady, KACE_GPU_SM_CLOCK_MHZ))) ||
        (st = kace_profile_batch_add(ctx, batch, name, "pcie_tx_MBps",
                                     kace_gpu_stats_mean(&smp.steady, KACE_GPU_PCIE_TX_MBPS))) ||
        (st = kace_profile_batch_add(ctx, batch, name, "pcie_rx_MBps",
                                     kace_gpu_stats_mean(&smp.steady, KACE_GPU_PCIE_RX_MBPS)))) {
        cli_error(ctx, st);
        goto done;
    }
    if (!(store = cli_open_store(ctx, db)))
        goto done;
    char date[16];
    time_t now = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%d", localtime(&now));
    kace_source src = {kace_nvml_device_name(smp.nvml)[0] ? kace_nvml_device_name(smp.nvml) : NULL, "kace-profile",
                       date};
    kace_import_stats stats;
    if ((st = kace_store_add_profile(ctx, store, batch, &src, name, argv + optind, &stats))) {
        cli_error(ctx, st);
        goto done;
    }
    printf("%s: %.4g samples/s (sd %.3g, %.1f s window, clean run), sm%% %s, mem%% %s, memcap %.2f GB; %zu "
           "kernels (%zu with counters, %.0f%% of kernel time; counters run); stored with its command in %s\n",
           name, res.throughput.samples_per_s, res.throughput.sd, res.throughput.window_s, sm_text, mem_text,
           smp.all.peak_mem_mib / 1024.0, ks.n_kernels, ks.n_with_counters, 100 * ks.counter_time_share, db);
    rc = EXIT_OK;
done:
    if (recording[0] && !keep)
        unlink(recording);
    kace_store_close(&store);
    kace_import_batch_free(&batch);
    kace_kernels_free(&rec);
    kace_nvml_close(&smp.nvml);
    kace_ctx_free(&ctx);
    return rc;
}
