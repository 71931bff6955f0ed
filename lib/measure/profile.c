/* kace profile's recipe (include/kace/profile.h): the clean run, the
 * counters run, their checks, and the profile batch. */
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kace/profile.h"

void kace_profile_options_init(kace_profile_options *opt)
{
    memset(opt, 0, sizeof *opt);
    kace_run_options_init(&opt->clean);
    kace_run_options_init(&opt->counters);
    opt->counters.warmup_s = 10;
    opt->counters.window_s = 15;
    opt->counters_steady_share = 0.1;
    opt->replay_cover = 0.95;
    opt->replay_max = 40;
}

size_t kace_replay_cap_count(const kace_kernel_signature *s, size_t n, double cover, int max, double *share)
{
    double total = 0, covered = 0;
    for (size_t i = 0; i < n; i++)
        total += s[i].time_s;
    size_t k = 0;
    /* The fewest that reach the cover; a total of 0 (no timed kernel) covers nothing more by replaying. */
    while (k < n && (max <= 0 || k < (size_t)max) && total > 0 && covered < cover * total)
        covered += s[k++].time_s;
    *share = total > 0 ? covered / total : 1;
    return k;
}

/* The cap's signatures, the longest GPU time first, from the clean run's
 * recording: the second half of its warm-up, up to where the library
 * stopped recording, just inside the steady window (the whole recording
 * where its clock is not kace's); written to `list` for the injection
 * library ($KACE_CUPTI_REPLAY), one "gx gy gz bx by bz name" a line. */
static kace_status choose_replayed(kace_ctx *ctx, const kace_profile_options *opt, const char *list,
                                   kace_profile_result *out)
{
    out->failed_run = 1;
    struct stat sb;
    if (stat(opt->recording, &sb) != 0 || sb.st_size == 0) {
        out->failure = KACE_PROFILE_FAIL_NO_RECORDING;
        return kace_fail(ctx, KACE_ERR_NOT_FOUND, "%s never initialised CUDA (no kernel recording from %s)",
                         opt->name, opt->cupti);
    }
    kace_kernel_recording *rec = NULL;
    kace_kernel_signature *sig = NULL;
    size_t n = 0;
    kace_status st = kace_kernels_parse_file(ctx, opt->recording, &rec);
    if (!st) {
        kace_kernel_info info;
        kace_kernels_info(rec, &info);
        /* The second half of the warm-up (its first steps may hold one-off kernels), and
         * what was recorded of the window before the library stopped. */
        int64_t half = (int64_t)(opt->clean.warmup_s / 2 * 1e9);
        int64_t from = info.monotonic_clock ? out->clean.throughput.start_ns - half : 0;
        st = kace_kernels_signatures(ctx, rec, from, 0, &sig, &n);
        if (!st && n == 0 && from > 0) /* none there (no warm-up): all it recorded */
            st = kace_kernels_signatures(ctx, rec, 0, 0, &sig, &n);
        if (!st && n == 0)
            st = kace_fail(ctx, KACE_ERR_INVALID,
                           "%s: no kernel recorded in the clean run (expected the workload to launch CUDA kernels "
                           "in its warm-up): no signature to replay",
                           opt->name);
    }
    if (st) {
        out->failure = st == KACE_ERR_INVALID ? KACE_PROFILE_FAIL_KERNELS : KACE_PROFILE_FAIL_ERROR;
        free(sig);
        kace_kernels_free(&rec);
        return st;
    }
    kace_replay_cap *cap = &out->cap;
    cap->seen = n;
    cap->replayed = kace_replay_cap_count(sig, n, cap->cover, cap->max, &cap->time_share);
    FILE *f = fopen(list, "w");
    bool ok = f != NULL;
    for (size_t i = 0; ok && i < cap->replayed; i++)
        ok = fprintf(f, "%u %u %u %u %u %u %s\n", sig[i].grid[0], sig[i].grid[1], sig[i].grid[2], sig[i].block[0],
                     sig[i].block[1], sig[i].block[2], sig[i].name) > 0;
    if (f && fclose(f) != 0)
        ok = false;
    free(sig);
    kace_kernels_free(&rec);
    if (ok && opt->clean_recording && rename(opt->recording, opt->clean_recording) != 0) {
        out->failure = KACE_PROFILE_FAIL_ERROR;
        return kace_fail(ctx, KACE_ERR_IO, "cannot keep the clean run's recording as %s", opt->clean_recording);
    }
    if (!ok) {
        out->failure = KACE_PROFILE_FAIL_ERROR;
        return kace_fail(ctx, KACE_ERR_IO, "cannot write the replay list %s", list);
    }
    out->failed_run = 0;
    return KACE_OK;
}

/* NVML samples of the clean run, taken on the runner's ticks. */
typedef struct sampler {
    kace_ctx *ctx;
    kace_gpu *gpu;
    kace_profile_result *r;
    char error[512]; /* the first sampling failure */
    int64_t host_read_ns;  /* the last /proc read */
    int64_t host_every_ns; /* a second, or a quarter of a shorter window: each read opens every process's stat */
    const char *trace_until; /* made when the steady window starts: the injection library stops recording */
    bool trace_stopped;
} sampler;

static void read_host(sampler *s, const kace_run_view *v)
{
    if (s->r->host_failed || v->now_ns - s->host_read_ns < s->host_every_ns)
        return;
    kace_host_usage u;
    if (kace_host_read(s->ctx, NULL, v->pgids, v->n, &u) != KACE_OK) {
        s->r->host_failed = true;
        snprintf(s->r->host_note, sizeof s->r->host_note,
                 "host CPU%% and MainMem%% not measured (stored as missing): %s", kace_errmsg(s->ctx));
        return;
    }
    s->host_read_ns = v->now_ns;
    kace_host_stats_add(&s->r->host, v->now_ns, &u);
}

static void on_tick(void *user, const kace_run_view *v)
{
    sampler *s = user;
    if (s->error[0])
        return;
    kace_gpu_sample x;
    if (kace_gpu_read(s->ctx, s->gpu, v->pgids, v->n, &x) != KACE_OK) {
        snprintf(s->error, sizeof s->error, "%s", kace_errmsg(s->ctx));
        return;
    }
    /* Under MPS the device's SM%/mem% include the server's other clients:
     * only what NVML gives per client may be stored as the workload's. */
    if (x.mps_client) {
        s->r->mps_client = true;
        kace_gpu_sample_drop_device_wide(&x);
    }
    kace_gpu_stats_add(&s->r->all, &x);
    if (v->steady && s->trace_until && !s->trace_stopped) {
        /* The replay cap's launches are recorded in the warm-up: the window runs without
         * CUPTI's activity records (the library checks for the file every 50 ms). */
        FILE *f = fopen(s->trace_until, "w");
        if (f)
            fclose(f);
        s->trace_stopped = true;
    }
    if (v->steady) {
        kace_gpu_stats_add(&s->r->steady, &x);
        read_host(s, v);
    }
}

static void progress(const kace_profile_options *opt, kace_profile_step step, const kace_profile_result *r)
{
    if (opt->progress)
        opt->progress(opt->user, step, r);
}

/* One run; KACE_OK only when its workload reported through its window. */
static kace_status run_one(kace_ctx *ctx, int which, const kace_proc_spec *spec, const kace_run_options *ro,
                           kace_proc_result *res, kace_profile_result *out)
{
    kace_status st = kace_run(ctx, spec, 1, ro, res);
    if (st) {
        out->failure = KACE_PROFILE_FAIL_ERROR;
    } else if (res->status != KACE_PROC_OK) {
        out->failure = KACE_PROFILE_FAIL_RUN;
        st = kace_fail(ctx, KACE_ERR_INVALID, "workload %s %s: %s", spec->name, kace_proc_status_name(res->status),
                       res->detail);
    }
    if (st)
        out->failed_run = which;
    return st;
}

/* The kernel metrics of run `which` (res): its recording, reduced over its
 * steady window. */
static kace_status reduce_recording(kace_ctx *ctx, const kace_profile_options *opt, int which,
                                    const kace_proc_result *res, kace_profile_result *out)
{
    out->failed_run = which;
    struct stat sb;
    if (stat(opt->recording, &sb) != 0 || sb.st_size == 0) {
        out->failure = KACE_PROFILE_FAIL_NO_RECORDING;
        return kace_fail(ctx, KACE_ERR_NOT_FOUND, "%s never initialised CUDA (no kernel recording from %s)",
                         opt->name, opt->cupti);
    }
    kace_status st = kace_kernels_parse_file(ctx, opt->recording, &out->recording);
    if (st) {
        out->failure = KACE_PROFILE_FAIL_ERROR;
        return st;
    }
    kace_kernels_info(out->recording, &out->info);
    int64_t from = out->info.monotonic_clock ? res->throughput.start_ns : 0;
    int64_t to = out->info.monotonic_clock ? res->throughput.end_ns : 0;
    if ((st = kace_kernels_reduce(ctx, out->recording, from, to, &out->kernels))) {
        out->failure = KACE_PROFILE_FAIL_KERNELS;
        return st;
    }
    out->failed_run = 0;
    return KACE_OK;
}

kace_status kace_profile_run(kace_ctx *ctx, kace_gpu *gpu, const kace_profile_options *opt,
                             kace_profile_result *out)
{
    memset(out, 0, sizeof *out);
    kace_gpu_stats_init(&out->all);
    kace_gpu_stats_init(&out->steady);
    kace_host_stats_init(&out->host);
    if (!gpu || !opt || !opt->name || !opt->argv || !opt->argv[0] || !opt->cupti || !opt->recording) {
        out->failure = KACE_PROFILE_FAIL_ERROR;
        return kace_fail(ctx, KACE_ERR_INVALID, "kace_profile_run: a GPU, a workload name, a command, the "
                                                "injection library and a recording file are needed");
    }
    /* MainMem% is a share of what the workload may use: a cgroup's limit
     * (a container's) where that is below the host's memory. */
    double limit = INFINITY;
    if (kace_host_memory_limit(ctx, NULL, NULL, &limit) != KACE_OK) {
        out->host_mem_failed = true;
        snprintf(out->host_note, sizeof out->host_note,
                 "MainMem%% not measured (stored as missing): no memory limit could be read: %s", kace_errmsg(ctx));
    }
    out->host.mem_limit_bytes = limit;
    sampler smp = {.ctx = ctx, .gpu = gpu, .r = out, .host_every_ns = 1000000000};
    if (opt->clean.window_s > 0 && opt->clean.window_s < 4)
        smp.host_every_ns = (int64_t)(opt->clean.window_s / 4 * 1e9);

    /* 1. The clean run: no kernel replay; its throughput and NVML values
     *    are the workload's own. Without a replay cap, without the injection
     *    library (entries without '=' remove inherited variables); with one,
     *    the library records the warm-up's launches only (below). Without
     *    counters the library records launches throughout (activity records
     *    cost no replay), so this run gives the launch metrics too. */
    char inject_env[PATH_MAX + 32], output_env[PATH_MAX + 32];
    snprintf(inject_env, sizeof inject_env, "CUDA_INJECTION64_PATH=%s", opt->cupti);
    snprintf(output_env, sizeof output_env, "%s=%s", KACE_CUPTI_OUTPUT_ENV, opt->recording);
    const char *clean_env[] = {"CUDA_INJECTION64_PATH", KACE_CUPTI_OUTPUT_ENV, NULL};
    const char *launches_env[] = {inject_env, output_env, "KACE_CUPTI_COUNTERS=0", NULL, NULL, NULL};
    out->no_counters = opt->no_counters;
    kace_replay_cap *cap = &out->cap;
    cap->cover = opt->replay_cover;
    cap->max = opt->replay_max;
    cap->on = !opt->no_counters && !(opt->replay_cover >= 1 && opt->replay_max == 0);
    if (!(opt->replay_cover > 0 && opt->replay_cover <= 1) || opt->replay_max < 0) {
        out->failure = KACE_PROFILE_FAIL_ERROR;
        return kace_fail(ctx, KACE_ERR_INVALID,
                         "kace_profile_run: the replay cover is %g and the replay maximum %d (expected a share in "
                         "(0, 1] and a count >= 0)",
                         opt->replay_cover, opt->replay_max);
    }
    /* With a cap, the clean run records launches (activity records, no
     * replay) in its warm-up, so that the cap can rank the signatures by
     * GPU time; the library stops recording when the window starts. */
    char until[PATH_MAX], until_env[PATH_MAX + 32];
    if (cap->on) {
        snprintf(until, sizeof until, "%s.steady", opt->recording);
        snprintf(until_env, sizeof until_env, "KACE_CUPTI_TRACE_UNTIL=%s", until);
        unlink(until);
        launches_env[3] = until_env;
        launches_env[4] = "KACE_CUPTI_FLUSH_MS=50";
        smp.trace_until = until;
    }
    kace_proc_spec clean = {.name = opt->name, .argv = opt->argv,
                            .extra_env = opt->no_counters || cap->on ? launches_env : clean_env};
    kace_run_options ro = opt->clean;
    ro.stderr_fd = -1;
    ro.cancel = opt->cancel;
    ro.tick = on_tick;
    ro.tick_user = &smp;
    ro.tick_s = 0.1;
    /* A budget: the clean run may use what the counters run's warm-up and window leave. */
    if (opt->budget_s > 0) {
        double counters_min = opt->no_counters ? 0 : opt->counters.warmup_s + opt->counters.window_s;
        double clean_max = opt->budget_s - counters_min;
        if (!(clean_max > 0)) {
            out->failure = KACE_PROFILE_FAIL_ERROR;
            out->failed_run = 1;
            return kace_fail(ctx, KACE_ERR_INVALID,
                             "%s: a budget of %.1f s is not more than the counters run's warm-up and window (%.1f s)",
                             opt->name, opt->budget_s, counters_min);
        }
        if (!(ro.timeout_s > 0 && ro.timeout_s <= clean_max))
            ro.timeout_s = clean_max;
    }
    progress(opt, KACE_PROFILE_CLEAN_START, out);
    int64_t clean_start = kace_monotonic_ns();
    kace_status st = run_one(ctx, 1, &clean, &ro, &out->clean, out);
    if (cap->on)
        unlink(until);
    if (st)
        return st;
    if (smp.error[0]) {
        out->failure = KACE_PROFILE_FAIL_SAMPLING;
        out->failed_run = 1;
        return kace_fail(ctx, KACE_ERR_UNSUPPORTED, "%s", smp.error);
    }
    double mem_pct = kace_host_stats_mem_pct(&out->host);
    if (!out->host_failed && !out->host_mem_failed && mem_pct > 100)
        snprintf(out->host_note, sizeof out->host_note,
                 "MainMem%% %.1f is above 100 (resident memory counted per process, without Pss): stored as missing",
                 mem_pct);
    progress(opt, KACE_PROFILE_CLEAN_DONE, out);
    if (opt->no_counters) {
        if ((st = reduce_recording(ctx, opt, 1, &out->clean, out)))
            return st;
        progress(opt, KACE_PROFILE_LAUNCHES_DONE, out);
        return KACE_OK;
    }

    /* 2. The counters run: the injection library records every kernel and
     *    replays the first launch of each signature for its counters; with
     *    a cap, only of the signatures the list names. */
    char list[PATH_MAX], list_env[PATH_MAX + 32];
    const char *counters_env[] = {inject_env, output_env, NULL, NULL};
    if (cap->on) {
        snprintf(list, sizeof list, "%s.replay", opt->recording);
        if ((st = choose_replayed(ctx, opt, list, out))) {
            unlink(list);
            return st;
        }
        snprintf(list_env, sizeof list_env, "KACE_CUPTI_REPLAY=%s", list);
        counters_env[2] = list_env;
    }
    kace_proc_spec counters = {.name = opt->name, .argv = opt->argv, .extra_env = counters_env};
    double clean_rate = out->clean.throughput.samples_per_s;
    if (opt->counters_steady_share > 0 && clean_rate > 0 && isfinite(clean_rate))
        counters.steady_samples_per_s = opt->counters_steady_share * clean_rate;
    kace_run_options co = opt->counters;
    co.stderr_fd = -1;
    co.cancel = opt->cancel;
    if (opt->budget_s > 0) {
        double used = (double)(kace_monotonic_ns() - clean_start) / 1e9, left = opt->budget_s - used;
        if (left < co.warmup_s + co.window_s) {
            if (cap->on)
                unlink(list);
            out->failure = KACE_PROFILE_FAIL_ERROR;
            out->failed_run = 2;
            return kace_fail(ctx, KACE_ERR_INVALID,
                             "%s: the clean run took %.1f s of the %.1f s budget; the %.1f s left are less than "
                             "the counters run's warm-up and window (%.1f s)",
                             opt->name, used, opt->budget_s, left > 0 ? left : 0, co.warmup_s + co.window_s);
        }
        if (!(co.timeout_s > 0 && co.timeout_s <= left))
            co.timeout_s = left;
    }
    progress(opt, KACE_PROFILE_COUNTERS_START, out);
    st = run_one(ctx, 2, &counters, &co, &out->counters, out);
    if (cap->on)
        unlink(list);
    if (st)
        return st;

    /* 3. Kernel metrics of the counters run's steady window. */
    if ((st = reduce_recording(ctx, opt, 2, &out->counters, out)))
        return st;
    progress(opt, KACE_PROFILE_COUNTERS_DONE, out);
    return KACE_OK;
}

void kace_profile_result_release(kace_profile_result *r)
{
    if (r)
        kace_kernels_free(&r->recording);
}

/* MainMem% as stored: missing after a failed read, and above 100 (a
 * percentage of the host's memory; see kace_profile_run's note). */
static double host_mem_pct(const kace_profile_result *r)
{
    double v = kace_host_stats_mem_pct(&r->host);
    return r->host_failed || r->host_mem_failed || v > 100 ? NAN : v;
}

/* The cap the counters run's replay had, so that a profile says over what
 * its counter metrics are weighted: without a cap every signature was
 * replayed (share 1; how many is not known then, stored as missing). A
 * profile without counters stores none. */
static kace_status add_replay_cap(kace_ctx *ctx, kace_import_batch *batch, const char *name,
                                  const kace_profile_result *r)
{
    const kace_replay_cap *c = &r->cap;
    if (r->no_counters)
        return KACE_OK;
    kace_status st;
    if ((st = kace_profile_batch_add(ctx, batch, name, "replay_signatures", c->on ? (double)c->replayed : NAN)) ||
        (st = kace_profile_batch_add(ctx, batch, name, "replay_signatures_seen", c->on ? (double)c->seen : NAN)) ||
        (st = kace_profile_batch_add(ctx, batch, name, "replay_time_share", c->on ? c->time_share : 1)) ||
        (st = kace_profile_batch_add(ctx, batch, name, "replay_cover", c->cover)) ||
        (st = kace_profile_batch_add(ctx, batch, name, "replay_max", c->max)))
        return st;
    /* What the counter metrics are weighted over in the counters run's window. */
    double share = r->kernels.counter_time_share;
    return kace_profile_batch_add(ctx, batch, name, "counters_time_share",
                                  isfinite(share) && share >= 0 && share <= 1 ? share : NAN);
    return KACE_OK;
}

kace_status kace_profile_batch(kace_ctx *ctx, const char *name, const kace_profile_result *r,
                               kace_import_batch **out)
{
    *out = NULL;
    kace_import_batch *batch = NULL;
    const kace_gpu_stats *s = &r->steady;
    const kace_throughput *t = &r->clean.throughput;
    /* Once any sample showed the workload as an MPS client, none of its
     * device-wide utilization is its own, including samples taken before
     * NVML listed it (the first ticks of a run). */
    bool mps = r->mps_client;
    kace_status st;
    if ((st = kace_profile_batch_new(ctx, "kace-profile", &batch)))
        return st;
    /* Without counters the store says so: the counter metrics as missing
     * (a new workload's profile then has the "no-counters" metric set). */
    static const kace_metric counter_metrics[] = {KACE_M_SM_THROUGHPUT, KACE_M_DRAM_THROUGHPUT,
                                                  KACE_M_MEM_THROUGHPUT};
    for (size_t i = 0; r->no_counters && i < sizeof counter_metrics / sizeof *counter_metrics; i++)
        if ((st = kace_profile_batch_add(ctx, batch, name, kace_metric_name(counter_metrics[i]), NAN))) {
            kace_import_batch_free(&batch);
            return st;
        }
    if ((st = kace_profile_batch_add_kernels(ctx, batch, name, &r->kernels)) ||
        (st = kace_profile_batch_add(ctx, batch, name, "exclusive_throughput", t->samples_per_s)) ||
        (st = kace_profile_batch_add(ctx, batch, name, "exclusive_throughput_sd", isnan(t->sd) ? NAN : t->sd)) ||
        (st = kace_profile_batch_add(ctx, batch, name, "sm%", mps ? NAN : kace_gpu_stats_mean(s, KACE_GPU_SM_PCT))) ||
        (st = kace_profile_batch_add(ctx, batch, name, "mem%", mps ? NAN : kace_gpu_stats_mean(s, KACE_GPU_MEM_PCT))) ||
        (st = kace_profile_batch_add(ctx, batch, name, "memcap", r->all.peak_mem_mib / 1024.0)) ||
        (st = kace_profile_batch_add(ctx, batch, name, "power_W", kace_gpu_stats_mean(s, KACE_GPU_POWER_W))) ||
        (st = kace_profile_batch_add(ctx, batch, name, "sm_clock_MHz",
                                     kace_gpu_stats_mean(s, KACE_GPU_SM_CLOCK_MHZ))) ||
        (st = kace_profile_batch_add(ctx, batch, name, "pcie_tx_MBps",
                                     kace_gpu_stats_mean(s, KACE_GPU_PCIE_TX_MBPS))) ||
        (st = kace_profile_batch_add(ctx, batch, name, "pcie_rx_MBps",
                                     kace_gpu_stats_mean(s, KACE_GPU_PCIE_RX_MBPS))) ||
        (st = kace_profile_batch_add(ctx, batch, name, "CPU%", r->host_failed ? NAN : kace_host_stats_cpu_pct(&r->host))) ||
        (st = kace_profile_batch_add(ctx, batch, name, "MainMem%", host_mem_pct(r))) ||
        (st = add_replay_cap(ctx, batch, name, r))) {
        kace_import_batch_free(&batch);
        return st;
    }
    *out = batch;
    return KACE_OK;
}
