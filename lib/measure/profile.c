/* kace profile's recipe (include/kace/profile.h): the clean run, the
 * counters run, their checks, and the profile batch. */
#include <errno.h>
#include <fcntl.h>
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

/* ---- runs started ahead, held at their CUDA start -------------------------
 *
 * A workload's process is started (kace_live_start) with the injection
 * library and $KACE_CUPTI_GATE naming a FIFO: it imports and builds on the
 * CPU, then waits in its first CUDA call until kace writes a byte into the
 * FIFO. kace holds the FIFO open for reading and writing, so the byte waits
 * there even when kace writes it before the workload has reached the gate. */

#define GATED_ENV_MAX 8

typedef struct gated_run {
    bool started;
    char dir[PATH_MAX], fifo[PATH_MAX + 8];
    int fd;
    char env_text[GATED_ENV_MAX][PATH_MAX + 48];
    const char *env[GATED_ENV_MAX + 1];
    kace_proc_spec spec;
    kace_live *live;
} gated_run;

struct kace_profile_ahead {
    bool has_clean;
    gated_run clean, counters;
};

static void gated_free(gated_run *g)
{
    if (!g->started)
        return;
    kace_live_free(&g->live); /* SIGKILL to what is left of its group, then reaped */
    if (g->fd >= 0)
        close(g->fd);
    g->fd = -1;
    if (g->fifo[0])
        unlink(g->fifo);
    if (g->dir[0])
        rmdir(g->dir);
    g->started = false;
}

/* Starts argv with env (NULL-terminated "NAME=value" or "NAME" entries) and
 * the gate's two variables, held at its CUDA start. */
static kace_status gated_start(kace_ctx *ctx, gated_run *g, const kace_profile_options *opt, const char *const *env,
                               const kace_run_options *ro)
{
    memset(g, 0, sizeof *g);
    g->fd = -1;
    g->started = true;
    const char *tmp = getenv("TMPDIR");
    snprintf(g->dir, sizeof g->dir, "%s/kace-gate-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(g->dir)) {
        g->dir[0] = '\0';
        return kace_fail(ctx, KACE_ERR_IO, "cannot make a folder for a CUDA start gate: %s", strerror(errno));
    }
    snprintf(g->fifo, sizeof g->fifo, "%s/gate", g->dir);
    if (mkfifo(g->fifo, 0600) != 0 || (g->fd = open(g->fifo, O_RDWR | O_NONBLOCK | O_CLOEXEC)) < 0) {
        kace_status st = kace_fail(ctx, KACE_ERR_IO, "cannot make the CUDA start gate %s: %s", g->fifo, strerror(errno));
        gated_free(g);
        return st;
    }
    size_t k = 0;
    for (size_t i = 0; env && env[i] && k + 2 < GATED_ENV_MAX; i++)
        snprintf(g->env_text[k++], sizeof g->env_text[0], "%s", env[i]);
    snprintf(g->env_text[k++], sizeof g->env_text[0], "%s=%s", KACE_CUPTI_GATE_ENV, g->fifo);
    snprintf(g->env_text[k++], sizeof g->env_text[0], "%s=%ld", KACE_CUPTI_GATE_PID_ENV, (long)getpid());
    for (size_t i = 0; i < k; i++)
        g->env[i] = g->env_text[i];
    g->env[k] = NULL;
    g->spec = (kace_proc_spec){.name = opt->name, .argv = opt->argv, .extra_env = g->env};
    kace_status st = kace_live_start(ctx, &g->spec, ro, &g->live);
    if (st)
        gated_free(g);
    return st;
}

/* Where the warm-up starts: the first record, or with fast > 0 the first
 * that ends an interval of at least 0.1 s (one step where steps are longer)
 * at least that fast, as kace_run finds it. */
#define GATED_SPAN_NS 100000000LL

static bool gated_warmup_base(const kace_progress_record *r, size_t n, double fast, int64_t *base)
{
    if (n == 0)
        return false;
    if (!(fast > 0)) {
        *base = r[0].t_ns;
        return true;
    }
    size_t j = 0;
    for (size_t i = 1; i < n; i++) {
        if (r[i].t_ns - r[0].t_ns < GATED_SPAN_NS)
            continue;
        while (j + 1 < i && r[i].t_ns - r[j + 1].t_ns >= GATED_SPAN_NS)
            j++;
        double dt = (double)(r[i].t_ns - r[j].t_ns) / 1e9;
        if (dt > 0 && (r[i].samples - r[j].samples) / dt >= fast) {
            *base = r[i].t_ns;
            return true;
        }
    }
    return false;
}

/* The records from when the gate opened: a workload that reported before
 * its CUDA start (or never uses CUDA) ran while another was measured, and
 * what it did then is not its run's. */
static const kace_progress_record *since_gate(const kace_live *l, int64_t gate_ns, size_t *n)
{
    size_t nr, i = 0;
    const kace_progress_record *r = kace_live_records(l, &nr);
    while (i < nr && r[i].t_ns < gate_ns)
        i++;
    *n = nr - i;
    return r + i;
}

/* Opens g's gate and measures it as kace_run measures one workload (ro's
 * warm-up, window, timeout from now, cancel and tick), then stops it through
 * the runner. *gate_ns: when the gate opened. Returns an error only when the
 * gate could not be opened; the run's outcome is res->status. */
static kace_status gated_run_now(kace_ctx *ctx, gated_run *g, const kace_run_options *ro, double fast,
                                 kace_proc_result *res, int64_t *gate_ns)
{
    double timeout_s = ro->timeout_s > 0 ? ro->timeout_s : ro->warmup_s + ro->window_s + 120;
    double grace_s = ro->term_grace_max_s > 0 ? ro->term_grace_max_s : 30;
    if (write(g->fd, "1", 1) != 1)
        return kace_fail(ctx, KACE_ERR_IO, "cannot open the CUDA start gate %s: %s", g->fifo, strerror(errno));
    int64_t now = kace_monotonic_ns();
    *gate_ns = now;
    int64_t deadline = now + (int64_t)(timeout_s * 1e9), next_tick = now;
    int64_t tick_every = (int64_t)((ro->tick_s > 0 ? ro->tick_s : 0.1) * 1e9);
    kace_ctx *scratch = kace_ctx_new();
    if (!scratch)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory measuring %s", g->spec.name);
    bool complete = false, cancelled = false;
    int64_t wstart = 0;
    for (;;) {
        kace_live_wait(&g->live, 1, next_tick < deadline ? next_tick : deadline);
        now = kace_monotonic_ns();
        if (ro->cancel && *ro->cancel) {
            cancelled = true;
            break;
        }
        if (kace_live_ended(g->live))
            break;
        size_t nr;
        const kace_progress_record *r = since_gate(g->live, *gate_ns, &nr);
        int64_t base;
        if (!wstart && gated_warmup_base(r, nr, fast, &base))
            wstart = base + (int64_t)(ro->warmup_s * 1e9);
        kace_throughput tp;
        if (wstart && nr >= 2 && kace_progress_throughput(scratch, r, nr, wstart, ro->window_s, 0, &tp) == KACE_OK) {
            complete = true;
            break;
        }
        if (now >= deadline)
            break;
        if (ro->tick && now >= next_tick) {
            int pgid = kace_live_result(g->live)->pid;
            kace_run_view v = {.n = 1, .pgids = &pgid, .now_ns = now, .window_start_ns = wstart,
                               .steady = wstart > 0 && now >= wstart};
            ro->tick(ro->tick_user, &v);
            next_tick = now + tick_every;
        }
    }
    bool ended = kace_live_ended(g->live);
    kace_live_stop(&g->live, 1, kace_monotonic_ns() + (int64_t)(grace_s * 1e9));
    *res = *kace_live_result(g->live);
    size_t nr;
    const kace_progress_record *r = since_gate(g->live, *gate_ns, &nr);
    res->throughput.samples_per_s = NAN;
    if (wstart && nr >= 2 && res->status != KACE_PROC_BAD_PROGRESS)
        kace_progress_throughput(scratch, r, nr, wstart, ro->window_s, 1, &res->throughput);
    kace_ctx_free(&scratch);
    if (cancelled) {
        res->status = KACE_PROC_CANCELLED;
        snprintf(res->detail, sizeof res->detail, "cancelled (kace was interrupted)");
    } else if (complete) {
        res->status = KACE_PROC_OK;
        snprintf(res->detail, sizeof res->detail, "reported through its steady window; stopped by kace");
    } else if (ended) {
        if (res->status == KACE_PROC_OK) {
            res->status = KACE_PROC_EXITED_EARLY;
            snprintf(res->detail, sizeof res->detail, "exited before its steady window was complete");
        }
    } else {
        res->status = KACE_PROC_TIMEOUT;
        snprintf(res->detail, sizeof res->detail,
                 nr == 0 ? "no progress record within the %g s timeout after its CUDA start gate opened"
                         : "timeout after %g s from its CUDA start gate: the steady window was not complete",
                 timeout_s);
    }
    return KACE_OK;
}

/* The two runs' environments (strings in buf, entries in env). */
typedef struct run_envs {
    char inject[PATH_MAX + 32], output[PATH_MAX + 32], until[PATH_MAX + 32], list[PATH_MAX + 32];
    const char *clean[8], *counters[8];
} run_envs;

static void make_envs(const kace_profile_options *opt, bool cap_on, bool gated_clean, run_envs *e)
{
    snprintf(e->inject, sizeof e->inject, "CUDA_INJECTION64_PATH=%s", opt->cupti);
    snprintf(e->output, sizeof e->output, "%s=%s", KACE_CUPTI_OUTPUT_ENV, opt->recording);
    snprintf(e->until, sizeof e->until, "KACE_CUPTI_TRACE_UNTIL=%s.steady", opt->recording);
    snprintf(e->list, sizeof e->list, "KACE_CUPTI_REPLAY=%s.replay", opt->recording);
    size_t k = 0;
    if (opt->no_counters || cap_on) {
        /* Launch records only; with a cap, until the steady window starts. */
        e->clean[k++] = e->inject;
        e->clean[k++] = e->output;
        e->clean[k++] = "KACE_CUPTI_COUNTERS=0";
        if (cap_on && !opt->no_counters) {
            e->clean[k++] = e->until;
            e->clean[k++] = "KACE_CUPTI_FLUSH_MS=50";
        }
    } else if (gated_clean) {
        /* The library only for its gate: without an output it records nothing. */
        e->clean[k++] = e->inject;
        e->clean[k++] = KACE_CUPTI_OUTPUT_ENV;
        e->clean[k++] = "KACE_CUPTI_COUNTERS=0";
    } else {
        /* Without the library (entries without '=' remove inherited variables). */
        e->clean[k++] = "CUDA_INJECTION64_PATH";
        e->clean[k++] = KACE_CUPTI_OUTPUT_ENV;
    }
    e->clean[k] = NULL;
    k = 0;
    e->counters[k++] = e->inject;
    e->counters[k++] = e->output;
    if (cap_on)
        e->counters[k++] = e->list; /* read after the gate, once the clean run has written it */
    e->counters[k] = NULL;
}

static bool cap_wanted(const kace_profile_options *opt)
{
    return !opt->no_counters && !(opt->replay_cover >= 1 && opt->replay_max == 0);
}

static kace_status ahead_start(kace_ctx *ctx, const kace_profile_options *opt, bool with_clean, kace_profile_ahead **out)
{
    *out = NULL;
    if (!opt || !opt->name || !opt->argv || !opt->argv[0] || !opt->cupti || !opt->recording)
        return kace_fail(ctx, KACE_ERR_INVALID, "kace_profile_ahead_start: a workload name, a command, the injection "
                                                "library and a recording file are needed");
    kace_profile_ahead *a = calloc(1, sizeof *a);
    if (!a)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory starting %s ahead", opt->name);
    a->clean.fd = a->counters.fd = -1;
    run_envs e;
    make_envs(opt, cap_wanted(opt), true, &e);
    kace_run_options ro = opt->clean;
    ro.stderr_fd = -1; /* as kace_profile_run's own runs */
    kace_status st = KACE_OK;
    if (with_clean) {
        a->has_clean = true;
        st = gated_start(ctx, &a->clean, opt, e.clean, &ro);
    }
    if (!st && !opt->no_counters) {
        ro = opt->counters;
        ro.stderr_fd = -1;
        st = gated_start(ctx, &a->counters, opt, e.counters, &ro);
    }
    if (st) {
        kace_profile_ahead_free(&a);
        return st;
    }
    *out = a;
    return KACE_OK;
}

kace_status kace_profile_ahead_start(kace_ctx *ctx, const kace_profile_options *opt, kace_profile_ahead **out)
{
    return ahead_start(ctx, opt, true, out);
}

void kace_profile_ahead_free(kace_profile_ahead **a)
{
    if (!a || !*a)
        return;
    gated_free(&(*a)->clean);
    gated_free(&(*a)->counters);
    free(*a);
    *a = NULL;
}

static void progress(const kace_profile_options *opt, kace_profile_step step, const kace_profile_result *r)
{
    if (opt->progress)
        opt->progress(opt->user, step, r);
}

/* One run, started ahead (g, its gate opened now) or now; KACE_OK only
 * when its workload reported through its window. */
static kace_status run_one(kace_ctx *ctx, int which, gated_run *g, double fast, const kace_proc_spec *spec,
                           const kace_run_options *ro, kace_proc_result *res, kace_profile_result *out)
{
    kace_status st = g && g->started ? gated_run_now(ctx, g, ro, fast, res, which == 1 ? &out->clean_gate_ns
                                                                                      : &out->counters_gate_ns)
                                     : kace_run(ctx, spec, 1, ro, res);
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

static kace_status profile_run(kace_ctx *ctx, kace_gpu *gpu, const kace_profile_options *opt,
                               kace_profile_ahead *ahead, kace_profile_result *out)
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
    out->no_counters = opt->no_counters;
    kace_replay_cap *cap = &out->cap;
    cap->cover = opt->replay_cover;
    cap->max = opt->replay_max;
    cap->on = cap_wanted(opt);
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
    run_envs envs;
    make_envs(opt, cap->on, false, &envs);
    char until[PATH_MAX];
    if (cap->on) {
        snprintf(until, sizeof until, "%s.steady", opt->recording);
        unlink(until);
        smp.trace_until = until;
    }
    kace_proc_spec clean = {.name = opt->name, .argv = opt->argv, .extra_env = envs.clean};
    gated_run *clean_ahead = ahead && ahead->has_clean ? &ahead->clean : NULL;
    gated_run *counters_ahead = ahead && ahead->counters.started ? &ahead->counters : NULL;
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
    kace_status st = run_one(ctx, 1, clean_ahead, 0, &clean, &ro, &out->clean, out);
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
    char list[PATH_MAX];
    if (cap->on) {
        snprintf(list, sizeof list, "%s.replay", opt->recording);
        if ((st = choose_replayed(ctx, opt, list, out))) {
            unlink(list);
            return st;
        }
    }
    kace_proc_spec counters = {.name = opt->name, .argv = opt->argv, .extra_env = envs.counters};
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
    st = run_one(ctx, 2, counters_ahead, counters.steady_samples_per_s, &counters, &co, &out->counters, out);
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

kace_status kace_profile_run(kace_ctx *ctx, kace_gpu *gpu, const kace_profile_options *opt,
                             kace_profile_result *out)
{
    /* Without processes started ahead, the counters run's is started now,
     * held at its CUDA start, so that it imports while the clean run measures. */
    kace_profile_ahead *own = NULL;
    kace_profile_ahead *ahead = opt ? opt->ahead : NULL;
    if (!ahead && gpu && opt && !opt->no_counters && opt->name && opt->argv && opt->argv[0] && opt->cupti &&
        opt->recording) {
        kace_status st = ahead_start(ctx, opt, false, &own);
        if (st) {
            memset(out, 0, sizeof *out);
            out->failure = KACE_PROFILE_FAIL_ERROR;
            out->failed_run = 2;
            return st;
        }
        ahead = own;
    }
    kace_status st = profile_run(ctx, gpu, opt, ahead, out);
    kace_profile_ahead_free(&own);
    return st;
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
