/* The warm pool (include/kace/pool.h): long-lived workloads driven through
 * the runner's kace_live, measured run after run without a cold start. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kace/kernels.h"
#include "kace/pool.h"
#include "kace/profile.h"

/* A gated member's environment: its spec's entries, then the gate's. */
#define GATE_ENV_N 5
#define MEMBER_ENV_MAX 24

struct kace_pool {
    size_t n;
    const kace_proc_spec *specs;
    kace_proc_spec pinned[KACE_POOL_MAX_MEMBERS]; /* with opt.cpu_shares: specs with each member's share */
    int *cpus;                                    /* the shares' CPUs, member i's from i * cpus_per */
    size_t cpus_per;
    kace_run_options opt;
    kace_live *live[KACE_POOL_MAX_MEMBERS];
    unsigned starts[KACE_POOL_MAX_MEMBERS];
    bool stopped;
    /* Started ahead: members 0..n_gated-1 wait at the injection library's
     * CUDA start gate, the FIFO gate_fifo that the pool holds open (read and
     * write, so that a byte written before a member reached the gate waits
     * for it); the others start at kace_pool_open. */
    bool opened;
    bool cold; /* one cold run (kace_pool_start_cold): never paused, stopped after it */
    size_t n_gated;
    char gate_dir[PATH_MAX], gate_fifo[PATH_MAX + 8];
    int gate_fd;
    char gate_env[GATE_ENV_N][PATH_MAX + 48];
    const char *env[KACE_POOL_MAX_MEMBERS][MEMBER_ENV_MAX + 1];
    kace_proc_spec gated[KACE_POOL_MAX_MEMBERS];
    /* The caller's list of processes held ahead (opt.held at the start): the
     * members held here are in it until their gate opens. */
    kace_held *held;
};

static const char *label(const kace_pool *pool, size_t i)
{
    const kace_proc_spec *s = &pool->specs[i];
    return s->name ? s->name : s->argv[0];
}

static int64_t deadline_after(double s)
{
    return kace_monotonic_ns() + (int64_t)(s * 1e9);
}

static void set_result(kace_pool_result *r, kace_proc_status st, int pid, const char *detail)
{
    memset(r, 0, sizeof *r);
    r->status = st;
    r->pid = pid;
    r->throughput.samples_per_s = NAN;
    snprintf(r->detail, sizeof r->detail, "%.*s", (int)sizeof r->detail - 1, detail);
}

/* A member whose process has ended: how, from the runner's result. */
static void ended_result(const kace_pool *pool, size_t i, kace_pool_result *r)
{
    const kace_proc_result *pr = kace_live_result(pool->live[i]);
    char ending[256], detail[2 * sizeof r->detail];
    kace_proc_ending(pr, ending, sizeof ending);
    snprintf(detail, sizeof detail, "%s: %s (%s)", label(pool, i), pr->detail[0] ? pr->detail : "ended", ending);
    set_result(r, pr->status == KACE_PROC_OK ? KACE_PROC_CRASHED : pr->status, pr->pid, detail);
}

/* Whether member i is paused at a step boundary: it answered "paused" since
 * `before`, or it does not speak the channel and has been sent SIGSTOP. */
static bool paused_since(const kace_pool *pool, size_t i, size_t before)
{
    const kace_live *l = pool->live[i];
    return !kace_live_result(l)->speaks_control || kace_live_answers(l).paused > before;
}

/* With opt.cpu_shares, member i runs on share i mod cpu_shares of kace's
 * CPUs (a spec with CPUs of its own keeps them): the pool's copies of the
 * specs say so. A member's share is the same whichever run it is in. */
static kace_status pin_members(kace_ctx *ctx, kace_pool *pool)
{
    if (pool->opt.cpu_shares == 0)
        return KACE_OK;
    int avail[1024];
    size_t n_avail = kace_cpus_available(avail, sizeof avail / sizeof *avail);
    if (n_avail == 0)
        return KACE_OK; /* unknown: left unpinned, as the runner leaves it */
    pool->cpus_per = (n_avail + pool->opt.cpu_shares - 1) / pool->opt.cpu_shares;
    if (!(pool->cpus = calloc(pool->n * pool->cpus_per, sizeof *pool->cpus)))
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory sharing the CPUs among a pool");
    for (size_t i = 0; i < pool->n; i++) {
        pool->pinned[i] = pool->specs[i];
        if (pool->specs[i].cpus && pool->specs[i].n_cpus > 0)
            continue;
        int *mine = pool->cpus + i * pool->cpus_per;
        pool->pinned[i].cpus = mine;
        pool->pinned[i].n_cpus = kace_cpu_share(avail, n_avail, pool->opt.cpu_shares, i, mine, pool->cpus_per);
    }
    pool->specs = pool->pinned;
    return KACE_OK;
}

/* The gate's FIFO and the environment of members started ahead: the
 * injection library only for its gate (without an output it records
 * nothing, as kace profile's gated clean run). */
static kace_status make_gate(kace_ctx *ctx, kace_pool *pool, const char *cupti)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(pool->gate_dir, sizeof pool->gate_dir, "%s/kace-pool-gate-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(pool->gate_dir)) {
        pool->gate_dir[0] = '\0';
        return kace_fail(ctx, KACE_ERR_IO, "cannot make a folder for a pool's CUDA start gate: %s", strerror(errno));
    }
    snprintf(pool->gate_fifo, sizeof pool->gate_fifo, "%s/gate", pool->gate_dir);
    if (mkfifo(pool->gate_fifo, 0600) != 0 ||
        (pool->gate_fd = open(pool->gate_fifo, O_RDWR | O_NONBLOCK | O_CLOEXEC)) < 0)
        return kace_fail(ctx, KACE_ERR_IO, "cannot make the pool's CUDA start gate %s: %s", pool->gate_fifo,
                         strerror(errno));
    snprintf(pool->gate_env[0], sizeof pool->gate_env[0], "CUDA_INJECTION64_PATH=%s", cupti);
    snprintf(pool->gate_env[1], sizeof pool->gate_env[1], "%s", KACE_CUPTI_OUTPUT_ENV);
    snprintf(pool->gate_env[2], sizeof pool->gate_env[2], "KACE_CUPTI_COUNTERS=0");
    snprintf(pool->gate_env[3], sizeof pool->gate_env[3], "%s=%s", KACE_CUPTI_GATE_ENV, pool->gate_fifo);
    snprintf(pool->gate_env[4], sizeof pool->gate_env[4], "%s=%ld", KACE_CUPTI_GATE_PID_ENV, (long)getpid());
    return KACE_OK;
}

/* Takes member i's process out of the caller's list of held processes. */
static void unhold(kace_pool *pool, size_t i)
{
    kace_held *h = pool->held;
    int pid = pool->live[i] ? kace_live_result(pool->live[i])->pid : 0;
    for (size_t j = 0; h && pid > 0 && j < h->n; j++)
        if (h->pgids[j] == pid) {
            h->pgids[j] = h->pgids[--h->n];
            break;
        }
}

/* At a run's start: the processes held ahead leave the CPUs of its k
 * members m (none is left for them when one of these is not pinned). */
static void move_held_off(const kace_pool *pool, const size_t *m, size_t k)
{
    int cpus[KACE_RUN_MAX_PROCS * 64];
    size_t n = 0;
    for (size_t j = 0; j < k; j++) {
        const kace_proc_spec *s = &pool->specs[m[j]];
        if (!s->cpus || s->n_cpus == 0)
            return;
        for (size_t c = 0; c < s->n_cpus && n < sizeof cpus / sizeof *cpus; c++)
            cpus[n++] = s->cpus[c];
    }
    kace_held_move_off(pool->held, cpus, n);
}

/* Starts member i (its first start): held at the gate when gated. */
static kace_status start_member(kace_ctx *ctx, kace_pool *pool, size_t i, bool gated)
{
    const kace_proc_spec *spec = &pool->specs[i];
    if (gated) {
        size_t k = 0;
        for (size_t e = 0; spec->extra_env && spec->extra_env[e]; e++) {
            if (k + GATE_ENV_N >= MEMBER_ENV_MAX)
                return kace_fail(ctx, KACE_ERR_INVALID, "%s: too many environment entries to start it ahead",
                                 label(pool, i));
            pool->env[i][k++] = spec->extra_env[e];
        }
        for (size_t e = 0; e < GATE_ENV_N; e++)
            pool->env[i][k++] = pool->gate_env[e];
        pool->env[i][k] = NULL;
        pool->gated[i] = *spec;
        pool->gated[i].extra_env = pool->env[i];
        spec = &pool->gated[i];
    }
    kace_status st = kace_live_start(ctx, spec, &pool->opt, &pool->live[i]);
    if (st)
        return st;
    pool->starts[i]++;
    int pid = kace_live_result(pool->live[i])->pid;
    if (gated && pool->held && pool->held->n < KACE_HELD_MAX && pid > 0)
        pool->held->pgids[pool->held->n++] = pid;
    /* Waits in the socket until its first report, which then pauses there. */
    if (!pool->cold)
        kace_live_send(pool->live[i], KACE_CONTROL_PAUSE);
    return KACE_OK;
}

static kace_status start_ahead(kace_ctx *ctx, const kace_proc_spec *specs, size_t n, const kace_run_options *opt,
                               const char *cupti, size_t n_ahead, bool cold, kace_pool **out)
{
    *out = NULL;
    if (n < 1 || n > KACE_POOL_MAX_MEMBERS)
        return kace_fail(ctx, KACE_ERR_INVALID, "a pool of %zu workloads (expected 1 to %d)", n,
                         KACE_POOL_MAX_MEMBERS);
    kace_pool *pool = calloc(1, sizeof *pool);
    if (!pool)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory starting a pool");
    pool->n = n;
    pool->specs = specs;
    pool->opt = *opt;
    pool->gate_fd = -1;
    pool->cold = cold;
    pool->held = opt->held;
    kace_status st = pin_members(ctx, pool);
    if (!st && cupti && *cupti && n_ahead > 0) {
        pool->n_gated = n_ahead < n ? n_ahead : n;
        st = make_gate(ctx, pool, cupti);
    }
    for (size_t i = 0; i < pool->n_gated && !st; i++)
        st = start_member(ctx, pool, i, true);
    if (st) {
        kace_pool_free(&pool);
        return st;
    }
    *out = pool;
    return KACE_OK;
}

kace_status kace_pool_start_ahead(kace_ctx *ctx, const kace_proc_spec *specs, size_t n, const kace_run_options *opt,
                                  const char *cupti, size_t n_ahead, kace_pool **out)
{
    return start_ahead(ctx, specs, n, opt, cupti, n_ahead, false, out);
}

kace_status kace_pool_start_cold(kace_ctx *ctx, const kace_proc_spec *specs, size_t n, const kace_run_options *opt,
                                 const char *cupti, kace_pool **out)
{
    if (n > KACE_RUN_MAX_PROCS)
        return kace_fail(ctx, KACE_ERR_INVALID, "a cold run of %zu workloads (expected 1 to %d)", n,
                         KACE_RUN_MAX_PROCS);
    return start_ahead(ctx, specs, n, opt, cupti, n, true, out);
}

size_t kace_pool_started_ahead(const kace_pool *pool)
{
    return pool->n_gated;
}

/* One byte per member held at the gate: each takes one as it passes. Each
 * is back on its own share first (moved off while others measured): kace's
 * CPUs when it has none. */
static kace_status open_gate(kace_ctx *ctx, kace_pool *pool)
{
    for (size_t i = 0; i < pool->n_gated; i++) {
        if (!pool->live[i] || kace_live_ended(pool->live[i]))
            continue;
        if (pool->held) {
            unhold(pool, i);
            kace_pin_group(kace_live_result(pool->live[i])->pid, pool->specs[i].cpus, pool->specs[i].n_cpus);
        }
        kace_live_gate_opened(pool->live[i]);
    }
    char bytes[KACE_POOL_MAX_MEMBERS];
    memset(bytes, 'g', sizeof bytes);
    if (pool->n_gated > 0 && write(pool->gate_fd, bytes, pool->n_gated) != (ssize_t)pool->n_gated)
        return kace_fail(ctx, KACE_ERR_IO, "cannot open the pool's CUDA start gate %s: %s", pool->gate_fifo,
                         strerror(errno));
    return KACE_OK;
}

kace_status kace_pool_open(kace_ctx *ctx, kace_pool *pool, double timeout_s, kace_pool_result *started)
{
    if (pool->opened)
        return kace_fail(ctx, KACE_ERR_INVALID, "the pool is open already");
    if (pool->cold)
        return kace_fail(ctx, KACE_ERR_INVALID, "a cold run's pool opens with its run (kace_pool_run_cold)");
    if (!(timeout_s >= 0))
        return kace_fail(ctx, KACE_ERR_INVALID, "pool start timeout %g s (expected >= 0)", timeout_s);
    const kace_run_options *opt = &pool->opt;
    size_t n = pool->n;
    if (!(timeout_s > 0))
        timeout_s = opt->timeout_s > 0 ? opt->timeout_s : 120;
    int64_t deadline = deadline_after(timeout_s);
    pool->opened = true;
    kace_status st;
    for (size_t i = pool->n_gated; i < n; i++)
        if ((st = start_member(ctx, pool, i, false)))
            return st;
    if ((st = open_gate(ctx, pool)))
        return st;
    bool ready[KACE_POOL_MAX_MEMBERS] = {false};
    for (;;) {
        bool all = true;
        for (size_t i = 0; i < n; i++) {
            kace_live *l = pool->live[i];
            if (ready[i] || kace_live_ended(l))
                continue;
            size_t nr;
            kace_live_records(l, &nr);
            const kace_proc_result *pr = kace_live_result(l);
            if (pr->speaks_control && kace_live_answers(l).paused > 0)
                ready[i] = true;
            else if (!pr->speaks_control && nr > 0) /* reported without hello: SIGSTOP instead */
                ready[i] = kace_live_send(l, KACE_CONTROL_PAUSE);
            if (!ready[i])
                all = false;
        }
        if (all || kace_monotonic_ns() >= deadline || (opt->cancel && *opt->cancel))
            break;
        kace_live_wait(pool->live, n, deadline);
    }
    for (size_t i = 0; i < n; i++) {
        kace_pool_result r;
        const kace_proc_result *pr = kace_live_result(pool->live[i]);
        if (ready[i]) {
            set_result(&r, KACE_PROC_OK, pr->pid, "paused at its first report");
        } else if (kace_live_ended(pool->live[i])) {
            ended_result(pool, i, &r);
        } else {
            kace_live_stop(&pool->live[i], 1, deadline_after(pool->opt.term_grace_s));
            char detail[sizeof r.detail];
            snprintf(detail, sizeof detail, "%s: %s within the %g s start timeout; stopped", label(pool, i),
                     pr->speaks_control ? "not paused at its first report" : "no progress record", timeout_s);
            set_result(&r, (opt->cancel && *opt->cancel) ? KACE_PROC_CANCELLED : KACE_PROC_TIMEOUT, pr->pid,
                       detail);
        }
        size_t nr;
        kace_live_records(pool->live[i], &nr);
        r.n_records = nr;
        if (started)
            started[i] = r;
    }
    return KACE_OK;
}

kace_status kace_pool_start(kace_ctx *ctx, const kace_proc_spec *specs, size_t n, const kace_run_options *opt,
                            double timeout_s, kace_pool **out, kace_pool_result *started)
{
    *out = NULL;
    if (!(timeout_s >= 0))
        return kace_fail(ctx, KACE_ERR_INVALID, "pool start timeout %g s (expected >= 0)", timeout_s);
    kace_pool *pool;
    kace_status st = kace_pool_start_ahead(ctx, specs, n, opt, NULL, 0, &pool);
    if (!st && (st = kace_pool_open(ctx, pool, timeout_s, started)))
        kace_pool_free(&pool);
    *out = pool;
    return st;
}

/* The common window's start: the last member's first record after it
 * resumed (from[i] on), plus the warm-up; 0 while a member has none. */
static int64_t window_start(const kace_pool *pool, const size_t *m, size_t k, const size_t *from, int64_t resumed)
{
    int64_t start = 0;
    for (size_t j = 0; j < k; j++) {
        size_t nr;
        const kace_progress_record *r = kace_live_records(pool->live[m[j]], &nr);
        size_t i = from[j];
        while (i < nr && r[i].stamped && r[i].t_ns < resumed)
            i++;
        if (i >= nr)
            return 0;
        int64_t end = r[i].t_ns + (int64_t)(pool->opt.warmup_s * 1e9);
        if (end > start)
            start = end;
    }
    return start;
}

typedef struct run_wait {
    int64_t wstart; /* the common window's start (0: not known) */
    size_t failed;  /* the first member that ended (k: none) */
    bool complete, cancelled;
} run_wait;

/* Waits until every member's records (from from[j] on, stamped after
 * resumed) cover the common window, one member ends, the caller cancels or
 * the deadline passes; the options' tick is called meanwhile. */
static void await_window(const kace_pool *pool, kace_live *const *live, const size_t *m, size_t k, const size_t *from,
                         int64_t resumed, int64_t deadline, run_wait *out)
{
    const kace_run_options *opt = &pool->opt;
    double window_s = opt->window_s > 0 ? opt->window_s : 30;
    int64_t wstart = 0, next_tick = kace_monotonic_ns();
    size_t failed = k;
    bool complete = false, cancelled = false;
    for (;;) {
        kace_live_wait(live, k, deadline);
        int64_t now = kace_monotonic_ns();
        if (opt->tick && now >= next_tick) { /* the caller's checks while the members run (MPS clients) */
            int pg[KACE_RUN_MAX_PROCS];
            for (size_t j = 0; j < k; j++)
                pg[j] = kace_live_ended(live[j]) ? 0 : kace_live_result(live[j])->pid;
            kace_run_view v = {.n = k, .pgids = pg, .now_ns = now, .window_start_ns = wstart,
                               .steady = wstart > 0 && now >= wstart};
            opt->tick(opt->tick_user, &v);
            next_tick = now + (int64_t)((opt->tick_s > 0 ? opt->tick_s : 0.1) * 1e9);
        }
        for (size_t j = 0; j < k && failed == k; j++)
            if (kace_live_ended(live[j]))
                failed = j;
        if (failed < k)
            break;
        wstart = window_start(pool, m, k, from, resumed);
        complete = wstart > 0;
        for (size_t j = 0; j < k && complete; j++) {
            size_t nr;
            const kace_progress_record *r = kace_live_records(live[j], &nr);
            kace_throughput tp;
            complete = nr - from[j] >= 2 &&
                       kace_progress_throughput(NULL, r + from[j], nr - from[j], wstart, window_s, 0, &tp) == KACE_OK;
        }
        if (complete)
            break;
        if ((cancelled = opt->cancel && *opt->cancel) || kace_monotonic_ns() >= deadline)
            break;
    }
    *out = (run_wait){.wstart = wstart, .failed = failed, .complete = complete, .cancelled = cancelled};
}

kace_status kace_pool_run(kace_ctx *ctx, kace_pool *pool, const size_t *m, size_t k, double timeout_s,
                          kace_pool_result *res)
{
    if (k < 1 || k > KACE_RUN_MAX_PROCS)
        return kace_fail(ctx, KACE_ERR_INVALID, "a pool run of %zu workloads (expected 1 to %d)", k,
                         KACE_RUN_MAX_PROCS);
    for (size_t j = 0; j < k; j++) {
        if (m[j] >= pool->n)
            return kace_fail(ctx, KACE_ERR_INVALID, "pool member %zu of a pool of %zu", m[j] + 1, pool->n);
        for (size_t i = 0; i < j; i++)
            if (m[i] == m[j])
                return kace_fail(ctx, KACE_ERR_INVALID, "pool member %zu named twice in one run", m[j] + 1);
    }
    if (!(timeout_s >= 0))
        return kace_fail(ctx, KACE_ERR_INVALID, "pool run timeout %g s (expected >= 0)", timeout_s);
    if (!pool->opened)
        return kace_fail(ctx, KACE_ERR_INVALID, "a pool run before the pool was opened (kace_pool_open)");
    const kace_run_options *opt = &pool->opt;
    double window_s = opt->window_s > 0 ? opt->window_s : 30;
    if (!(timeout_s > 0))
        timeout_s = opt->timeout_s > 0 ? opt->timeout_s : opt->warmup_s + window_s + 120;

    kace_live *live[KACE_RUN_MAX_PROCS];
    for (size_t j = 0; j < k; j++) {
        live[j] = pool->live[m[j]];
        set_result(&res[j], KACE_PROC_OK, kace_live_result(live[j])->pid, "");
    }
    /* A member that has ended fails the run before it starts. */
    kace_live_wait(live, k, 0);
    size_t dead = k;
    for (size_t j = 0; j < k && dead == k; j++)
        if (pool->stopped || kace_live_ended(live[j]))
            dead = j;
    if (dead < k) {
        char detail[sizeof res->detail];
        if (pool->stopped)
            snprintf(detail, sizeof detail, "not run: the pool was stopped");
        else
            snprintf(detail, sizeof detail, "not run: %s has ended", label(pool, m[dead]));
        for (size_t j = 0; j < k; j++) {
            if (!pool->stopped && kace_live_ended(live[j]))
                ended_result(pool, m[j], &res[j]);
            else
                set_result(&res[j], KACE_PROC_STOPPED, res[j].pid, detail);
        }
        return KACE_OK;
    }

    size_t from[KACE_RUN_MAX_PROCS];
    for (size_t j = 0; j < k; j++)
        kace_live_records(live[j], &from[j]);
    move_held_off(pool, m, k);
    int64_t resumed = kace_monotonic_ns();
    int64_t deadline = deadline_after(timeout_s);
    for (size_t j = 0; j < k; j++)
        kace_live_send(live[j], KACE_CONTROL_RUN);

    /* Until every member's records cover the window, one fails, or the deadline. */
    run_wait w;
    await_window(pool, live, m, k, from, resumed, deadline, &w);
    int64_t wstart = w.wstart;
    size_t failed = w.failed;
    bool complete = w.complete, cancelled = w.cancelled;

    /* Pause the live members at their next step boundary (the grace period
     * past the deadline, as kace_run's ending); one that does not pause is
     * stopped, since it would run through later runs. */
    size_t before[KACE_RUN_MAX_PROCS];
    for (size_t j = 0; j < k; j++) {
        before[j] = kace_live_answers(live[j]).paused;
        if (!kace_live_ended(live[j]))
            kace_live_send(live[j], KACE_CONTROL_PAUSE);
    }
    int64_t pause_deadline = deadline_after(opt->term_grace_max_s > 0 ? opt->term_grace_max_s : 30);
    for (;;) {
        bool all = true;
        for (size_t j = 0; j < k; j++)
            if (!kace_live_ended(live[j]) && !paused_since(pool, m[j], before[j]))
                all = false;
        if (all || kace_monotonic_ns() >= pause_deadline)
            break;
        kace_live_wait(live, k, pause_deadline);
    }
    kace_live_wait(live, k, 0); /* the records written before "paused" */

    for (size_t j = 0; j < k; j++) {
        kace_pool_result *r = &res[j];
        size_t nr;
        const kace_progress_record *rec = kace_live_records(live[j], &nr);
        r->n_records = nr - from[j];
        bool not_paused = !kace_live_ended(live[j]) && !paused_since(pool, m[j], before[j]);
        if (kace_live_ended(live[j])) {
            ended_result(pool, m[j], r);
            r->n_records = nr - from[j];
        } else if (failed < k) {
            char detail[sizeof r->detail];
            snprintf(detail, sizeof detail, "paused: %s of the run failed", label(pool, m[failed]));
            set_result(r, KACE_PROC_STOPPED, r->pid, detail);
            r->n_records = nr - from[j];
        } else if (cancelled) {
            set_result(r, KACE_PROC_CANCELLED, r->pid, "cancelled (kace was interrupted)");
        } else if (!complete) {
            char detail[sizeof r->detail];
            snprintf(detail, sizeof detail, "timeout after %g s: %zu progress record%s in this run, the steady window "
                     "was not complete (hung or too slow?)", timeout_s, nr - from[j], nr - from[j] == 1 ? "" : "s");
            set_result(r, KACE_PROC_TIMEOUT, r->pid, detail);
            r->n_records = nr - from[j];
        } else if (kace_progress_throughput(ctx, rec + from[j], nr - from[j], wstart, window_s, 1, &r->throughput)) {
            set_result(r, KACE_PROC_BAD_PROGRESS, r->pid, kace_errmsg(ctx));
        }
        if (not_paused) {
            kace_live_stop(&live[j], 1, deadline_after(opt->term_grace_s));
            size_t len = strlen(r->detail);
            snprintf(r->detail + len, sizeof r->detail - len, "%snot paused within %g s; stopped",
                     len ? "; " : "", opt->term_grace_max_s);
        }
    }
    return KACE_OK;
}

kace_status kace_pool_run_cold(kace_ctx *ctx, kace_pool *pool, const kace_run_options *run, kace_pool_result *res)
{
    if (!pool->cold || pool->opened)
        return kace_fail(ctx, KACE_ERR_INVALID, "a cold run needs a pool of kace_pool_start_cold, run once");
    if (run->warmup_s < 0 || !(run->window_s >= 0) || !(run->timeout_s >= 0))
        return kace_fail(ctx, KACE_ERR_INVALID, "warm-up %g s, window %g s, timeout %g s (expected >= 0)",
                         run->warmup_s, run->window_s, run->timeout_s);
    /* This run's windows, timeout, tick and cancel flag; the members keep how they were started. */
    pool->opt = *run;
    const kace_run_options *opt = &pool->opt;
    double window_s = opt->window_s > 0 ? opt->window_s : 30;
    double timeout_s = opt->timeout_s > 0 ? opt->timeout_s : opt->warmup_s + window_s + 120;
    size_t k = pool->n, m[KACE_RUN_MAX_PROCS] = {0}, from[KACE_RUN_MAX_PROCS] = {0};
    for (size_t j = 0; j < k; j++) {
        m[j] = j;
        set_result(&res[j], KACE_PROC_OK, 0, "");
    }
    int64_t deadline = deadline_after(timeout_s);
    for (size_t j = 0; j < pool->n_gated; j++)
        unhold(pool, j); /* its own members run now, on their shares (open_gate) */
    move_held_off(pool, m, k);
    pool->opened = true;
    kace_status st = KACE_OK;
    for (size_t i = pool->n_gated; i < k && !st; i++)
        st = start_member(ctx, pool, i, false);
    if (!st)
        st = open_gate(ctx, pool);
    if (st) {
        kace_pool_stop(pool, 0);
        return st;
    }
    /* From each member's first record, as a run started afresh (kace_run). */
    run_wait w;
    await_window(pool, pool->live, m, k, from, 0, deadline, &w);
    for (size_t j = 0; j < k; j++) {
        kace_pool_result *r = &res[j];
        kace_live *l = pool->live[j];
        size_t nr;
        const kace_progress_record *rec = kace_live_records(l, &nr);
        r->pid = kace_live_result(l)->pid;
        r->n_records = nr;
        if (kace_live_ended(l)) {
            ended_result(pool, j, r);
        } else if (w.failed < k) {
            char detail[sizeof r->detail];
            snprintf(detail, sizeof detail, "stopped: %s of the run failed", label(pool, w.failed));
            set_result(r, KACE_PROC_STOPPED, r->pid, detail);
        } else if (w.cancelled) {
            set_result(r, KACE_PROC_CANCELLED, r->pid, "cancelled (kace was interrupted)");
        } else if (!w.complete) {
            char detail[sizeof r->detail];
            snprintf(detail, sizeof detail, "timeout after %g s: %zu progress record%s, the steady window was not "
                     "complete (hung or too slow?)", timeout_s, nr, nr == 1 ? "" : "s");
            set_result(r, KACE_PROC_TIMEOUT, r->pid, detail);
        } else if (kace_progress_throughput(ctx, rec, nr, w.wstart, window_s, 1, &r->throughput)) {
            set_result(r, KACE_PROC_BAD_PROGRESS, r->pid, kace_errmsg(ctx));
        }
        r->n_records = nr;
    }
    /* A cold run's processes end with it: stopped at their step boundary. */
    kace_pool_stop(pool, 0);
    return KACE_OK;
}

size_t kace_pool_size(const kace_pool *pool)
{
    return pool->n;
}

const kace_proc_result *kace_pool_member(const kace_pool *pool, size_t i)
{
    return kace_live_result(pool->live[i]);
}

bool kace_pool_alive(const kace_pool *pool, size_t i)
{
    return pool->opened && !pool->stopped && pool->live[i] && !kace_live_ended(pool->live[i]);
}

unsigned kace_pool_starts(const kace_pool *pool, size_t i)
{
    return pool->starts[i];
}

void kace_pool_stop(kace_pool *pool, double timeout_s)
{
    if (!pool->opened) {
        /* Members held at the gate have no CUDA context to end well. */
        for (size_t i = 0; i < pool->n; i++) {
            unhold(pool, i);
            kace_live_free(&pool->live[i]);
        }
        pool->stopped = true;
        return;
    }
    if (!(timeout_s > 0))
        timeout_s = pool->opt.term_grace_max_s > 0 ? pool->opt.term_grace_max_s : 30;
    kace_live *started[KACE_POOL_MAX_MEMBERS]; /* an open that failed may have left some unstarted */
    size_t n = 0;
    for (size_t i = 0; i < pool->n; i++)
        if (pool->live[i])
            started[n++] = pool->live[i];
    kace_live_stop(started, n, deadline_after(timeout_s));
    pool->stopped = true;
}

void kace_pool_free(kace_pool **pp)
{
    kace_pool *pool = *pp;
    if (!pool)
        return;
    for (size_t i = 0; i < pool->n; i++) {
        if (!pool->opened)
            unhold(pool, i);
        kace_live_free(&pool->live[i]); /* members still at the gate too */
    }
    if (pool->gate_fd >= 0)
        close(pool->gate_fd);
    if (pool->gate_fifo[0])
        unlink(pool->gate_fifo);
    if (pool->gate_dir[0])
        rmdir(pool->gate_dir);
    free(pool->cpus);
    free(pool);
    *pp = NULL;
}
