/* One colocation measurement (see include/kace/measure.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kace/campaign.h"
#include "kace/kernels.h"
#include "kace/measure.h"
#include "kace/pool.h"

void kace_measure_default_set(const kace_measure_spec *spec, char *out, size_t size)
{
    const char *prefix = spec->timeslice ? "timeslice-" : "";
    switch (spec->k) {
    case 1: snprintf(out, size, "%ssolo", prefix); break;
    case 2: snprintf(out, size, "%spairs", prefix); break;
    case 3: snprintf(out, size, "%striples", prefix); break;
    default: snprintf(out, size, "%sk%d", prefix, spec->k); break;
    }
}

static kace_status check_spec(kace_ctx *ctx, const kace_measure_spec *spec, const kace_measure_options *opt)
{
    if (spec->k < 1 || spec->k > KACE_MAX_K)
        return kace_fail(ctx, KACE_ERR_INVALID, "measure: %d workloads (expected 1 to %d)", spec->k, KACE_MAX_K);
    for (int i = 0; i < spec->k; i++) {
        if (!spec->workload[i][0])
            return kace_fail(ctx, KACE_ERR_INVALID, "measure: workload %d has no name", i + 1);
        if (spec->mps_pct[i] < 1 || spec->mps_pct[i] > 100)
            return kace_fail(ctx, KACE_ERR_INVALID, "measure: MPS percentage %d of %s (expected 1..100)",
                             spec->mps_pct[i], spec->workload[i]);
        if (spec->timeslice && spec->mps_pct[i] != 100)
            return kace_fail(ctx, KACE_ERR_INVALID,
                             "measure: MPS percentages (%s at %d%%) need MPS; time-slicing shares the whole GPU",
                             spec->workload[i], spec->mps_pct[i]);
    }
    if (spec->repetition < 0)
        return kace_fail(ctx, KACE_ERR_INVALID, "measure: repetition %d", spec->repetition);
    if (!spec->timeslice && !opt->mps)
        return kace_fail(ctx, KACE_ERR_INVALID, "measure: an MPS run needs a started MPS daemon");
    return KACE_OK;
}

/* Whether a member's status means the run was cut short, not measured: the
 * caller cancelled it, or it reached a timeout that was the caller's
 * deadline rather than its own bound. */
static bool cut_short(const kace_measure_options *opt, kace_proc_status status)
{
    return status == KACE_PROC_CANCELLED || (opt->timeout_is_deadline && status == KACE_PROC_TIMEOUT);
}

/* ok < failed < timeout < oom: the run takes its members' gravest outcome. */
static kace_run_status run_status_of(const kace_proc_result *r, int k)
{
    kace_run_status st = KACE_RUN_OK;
    for (int i = 0; i < k; i++) {
        switch (r[i].status) {
        case KACE_PROC_OK: break;
        case KACE_PROC_OOM: st = KACE_RUN_OOM; break;
        case KACE_PROC_TIMEOUT:
            if (st != KACE_RUN_OOM)
                st = KACE_RUN_TIMEOUT;
            break;
        default:
            if (st == KACE_RUN_OK)
                st = KACE_RUN_FAILED;
            break;
        }
    }
    return st;
}

/* ---- checks made while the workloads run --------------------------------- */

#define SERVER_CHECK_PERIOD_NS 500000000LL
#define MAX_SERVERS 16
#define MAX_MPS_PROCS 256

typedef struct run_checks {
    const kace_run_options *caller; /* its tick runs first */
    kace_mps *mps;
    kace_gpu *gpu;
    bool timeslice;
    kace_ctx *scratch; /* errors of the checks, kept apart from the caller's */
    int k;
    /* MPS: the daemon's servers and their clients */
    int64_t next_server_check_ns;
    bool checked_at_steady;
    size_t server_checks;
    int server_pid;
    char server_error[256];
    bool member_client[KACE_MAX_K]; /* among a server's clients (get_client_list) */
    bool client_list_failed;        /* this control program cannot list clients */
    char client_error[256];
    /* MPS: NVML's client list */
    bool use_nvml;
    size_t nvml_checks;
    bool member_seen[KACE_MAX_K];
    char nvml_error[256];
    /* time-slicing: kace's MPS instance must stay down */
    bool instance_seen;
} run_checks;

static bool all_running(const kace_run_view *v)
{
    for (size_t i = 0; i < v->n; i++)
        if (v->pgids[i] <= 0)
            return false;
    return v->n > 0;
}

/* Marks the members whose process group holds a client of one of the
 * daemon's servers. A server outlives its clients, so a server alone proves
 * nothing from a campaign's second run on: the clients do. kace started the
 * daemon, so their PIDs are of its own PID namespace (NVML's may not be). */
static void check_clients(run_checks *c, const kace_run_view *v, const int *servers, size_t n_servers)
{
    for (size_t s = 0; s < n_servers && !c->client_list_failed; s++) {
        int pids[MAX_MPS_PROCS];
        size_t n = 0;
        kace_status st = kace_mps_client_pids(c->scratch, c->mps, servers[s], pids, MAX_MPS_PROCS, &n);
        if (st == KACE_ERR_NOT_FOUND)
            continue; /* it went between get_server_list and this query: no server of the run; the next check asks again */
        if (!c->server_pid)
            c->server_pid = servers[s];
        if (st != KACE_OK) {
            snprintf(c->client_error, sizeof c->client_error, "%s", kace_errmsg(c->scratch));
            c->client_list_failed = true;
            return;
        }
        for (size_t i = 0; i < n; i++) {
            pid_t g = getpgid((pid_t)pids[i]);
            for (size_t m = 0; m < v->n && g > 0; m++)
                if (g == v->pgids[m])
                    c->member_client[m] = true;
        }
    }
}

static bool all_clients(const run_checks *c)
{
    for (int i = 0; i < c->k; i++)
        if (!c->member_client[i])
            return false;
    return true;
}

static void check_servers(run_checks *c, const kace_run_view *v)
{
    int pids[MAX_SERVERS];
    size_t n = 0;
    c->server_checks++;
    if (kace_mps_server_pids(c->scratch, c->mps, pids, MAX_SERVERS, &n) != KACE_OK) {
        snprintf(c->server_error, sizeof c->server_error, "%s", kace_errmsg(c->scratch));
        return;
    }
    check_clients(c, v, pids, n); /* sets server_pid: the first server that answered */
}

static void check_nvml(run_checks *c, const kace_run_view *v)
{
    kace_gpu_process procs[MAX_MPS_PROCS];
    size_t n = 0;
    c->nvml_checks++;
    if (kace_gpu_mps_processes(c->scratch, c->gpu, procs, MAX_MPS_PROCS, &n) != KACE_OK) {
        snprintf(c->nvml_error, sizeof c->nvml_error, "%s", kace_errmsg(c->scratch));
        return;
    }
    /* A client is its workload's process or any process of its group. */
    for (size_t i = 0; i < n; i++) {
        pid_t g = getpgid((pid_t)procs[i].pid);
        for (size_t m = 0; m < v->n && g > 0; m++)
            if (g == v->pgids[m])
                c->member_seen[m] = true;
    }
}

static void on_tick(void *user, const kace_run_view *v)
{
    run_checks *c = user;
    if (c->caller->tick)
        c->caller->tick(c->caller->tick_user, v);
    if (c->timeslice) {
        if (c->mps && kace_mps_alive(c->mps))
            c->instance_seen = true;
        return;
    }
    /* "While the clients run": every one of them started and not yet ended. */
    if (!all_running(v))
        return;
    bool steady_now = v->steady && !c->checked_at_steady;
    bool done = c->server_pid && (c->client_list_failed || all_clients(c));
    if (!done && (v->now_ns >= c->next_server_check_ns || steady_now)) {
        check_servers(c, v);
        c->next_server_check_ns = v->now_ns + SERVER_CHECK_PERIOD_NS;
    }
    if (steady_now)
        c->checked_at_steady = true;
    if (c->use_nvml) {
        bool all = true;
        for (int i = 0; i < c->k; i++)
            all &= c->member_seen[i];
        if (!all)
            check_nvml(c, v);
    }
}

/* A member that crashed, ran out of memory, exited or broke the protocol
 * on its own may end before the MPS server lists it as a client (a busy
 * machine lists late): its run is a failed run of that workload, stored as
 * such so that it is not measured again unchanged, not a run MPS failed to
 * serve. A member that hangs is not excused: waiting for a server is how a
 * client without MPS hangs. */
static bool member_ended_on_its_own(const kace_proc_result *proc, int k)
{
    for (int i = 0; i < k; i++)
        switch (proc[i].status) {
        case KACE_PROC_CRASHED:
        case KACE_PROC_OOM:
        case KACE_PROC_EXITED_EARLY:
        case KACE_PROC_BAD_PROGRESS:
            return true;
        default:
            break;
        }
    return false;
}

/* Fails (nothing is stored) when MPS was not seen serving the run; the
 * message says what was seen. Served: a server ran and every member was
 * among its clients (get_client_list). NVML's MPS client list is a second
 * witness: where the daemon lists the clients and NVML does not, NVML's PIDs
 * are another PID namespace's (a container), and the run counts; where the
 * control program cannot list clients, NVML's list decides, as before. */
static kace_status verify_mps(kace_ctx *ctx, const run_checks *c, const kace_measure_spec *spec,
                              kace_measure_result *res)
{
    res->mps_server_pid = c->server_pid;
    bool nvml_missing = false, not_client = false;
    char absent[KACE_MAX_K * (KACE_NAME_MAX + 2)] = "", strangers[KACE_MAX_K * (KACE_NAME_MAX + 2)] = "";
    for (int i = 0; i < spec->k; i++) {
        if (c->use_nvml && !c->member_seen[i]) {
            nvml_missing = true;
            size_t at = strlen(absent);
            snprintf(absent + at, sizeof absent - at, "%s%s", at ? ", " : "", spec->workload[i]);
        }
        if (!c->client_list_failed && !c->member_client[i]) {
            not_client = true;
            size_t at = strlen(strangers);
            snprintf(strangers + at, sizeof strangers - at, "%s%s", at ? ", " : "", spec->workload[i]);
        }
    }
    res->nvml_verified = c->use_nvml && !nvml_missing && c->nvml_checks > 0;
    res->clients_verified = c->server_pid && !c->client_list_failed && !not_client;
    bool served = c->server_pid && (res->clients_verified || (c->client_list_failed && !nvml_missing));
    if (served || member_ended_on_its_own(res->proc, spec->k))
        return KACE_OK;
    char server[512] = "", clients[1200] = "", nvml[2048] = "", log[600] = "";
    if (!c->server_pid)
        snprintf(server, sizeof server, "the control daemon named no MPS server in %zu check%s while the clients ran%s%s",
                 c->server_checks, c->server_checks == 1 ? "" : "s", c->server_error[0] ? " (last: " : "",
                 c->server_error);
    if (!c->server_pid && c->server_error[0])
        strncat(server, ")", sizeof server - strlen(server) - 1);
    if (c->server_pid && not_client)
        snprintf(clients, sizeof clients, "%s never appeared among the MPS server's clients (get_client_list, %zu "
                 "check%s); they ran without MPS?",
                 strangers, c->server_checks, c->server_checks == 1 ? "" : "s");
    if (c->server_pid && c->client_list_failed && nvml_missing)
        snprintf(nvml, sizeof nvml, "%s never appeared in NVML's MPS client list (%zu check%s%s%s; the control "
                 "program could not list clients: %s); they ran without MPS?",
                 absent, c->nvml_checks, c->nvml_checks == 1 ? "" : "s", c->nvml_error[0] ? ", last: " : "",
                 c->nvml_error, c->client_error);
    kace_mps_server_log_tail(c->mps, log, sizeof log);
    return kace_fail(ctx, KACE_ERR_IO, "%s: MPS did not serve this run: %s%s%s; %s; nothing recorded",
                     kace_mps_pipe_dir(c->mps), server, clients, nvml, log[0] ? log : "no MPS server log");
}

/* The GPU this run is on: the caller's name for it, else NVML's; NULL when unknown. */
static const char *run_gpu_name(const kace_measure_options *opt)
{
    if (opt->gpu && opt->gpu[0])
        return opt->gpu;
    const char *nvml = opt->gpu_access ? kace_gpu_device_name(opt->gpu_access) : NULL;
    return nvml && nvml[0] ? nvml : NULL;
}

/* A colocation's slowdown compares its throughput with the profile's, so a
 * run on one GPU model must not join profiles measured on another. */
static kace_status check_profiles_gpu(kace_ctx *ctx, kace_store *store, const kace_measure_spec *spec,
                                      const char *gpu)
{
    for (int i = 0; gpu && i < spec->k; i++) {
        char other[256];
        kace_status st = kace_store_profile_other_gpu(ctx, store, spec->workload[i], gpu, other, sizeof other);
        if (st)
            return st;
        if (other[0])
            return kace_fail(ctx, KACE_ERR_INVALID,
                             "measure: %s was profiled on '%s' and this GPU is '%s': profile it here first "
                             "(kace profile --name %s), or keep one store per GPU model; nothing measured",
                             spec->workload[i], other, gpu, spec->workload[i]);
    }
    return KACE_OK;
}

/* The profile value of a solo MPS run: a new measurement replaces a stored
 * one (kept as history), as profiling again does. */
static kace_status store_exclusive_at(kace_ctx *ctx, kace_store *store, const kace_measured_run *run, char *metric,
                                      size_t size)
{
    snprintf(metric, size, "exclusive_mps%d", run->member[0].mps_pct);
    kace_import_batch *batch = NULL;
    kace_import_options replace = {.replace = true};
    kace_source src = {.gpu = run->gpu, .tool = "kace-measure", .date = NULL};
    kace_status st;
    if (!(st = kace_profile_batch_new(ctx, "kace-measure", &batch)) &&
        !(st = kace_profile_batch_add(ctx, batch, run->member[0].workload, metric, run->member[0].throughput)))
        st = kace_store_import_with(ctx, store, batch, &src, &replace, NULL);
    kace_import_batch_free(&batch);
    return st;
}

/* A member's environment (env: 5 entries): a time-sliced one (mps NULL)
 * never joins an MPS daemon; an MPS client joins mps's at pct percent. */
static void member_env(kace_mps *mps, int pct, char *pct_env, size_t pct_size, const char *env[5])
{
    if (!mps) {
        env[0] = KACE_NO_MPS_PIPE_ENV;
        env[1] = NULL;
        return;
    }
    const char *const *client = kace_mps_client_env(mps);
    snprintf(pct_env, pct_size, "%s=%d", KACE_MPS_PCT_ENV, pct);
    env[0] = client[0];
    env[1] = client[1];
    env[2] = pct_env;
    /* The daemon has kace's CUDA_VISIBLE_DEVICES and MPS renumbers
     * its devices from 0: a client that kept "2" would ask for a
     * device the server does not have (NVIDIA's MPS docs). */
    env[3] = "CUDA_VISIBLE_DEVICES";
    env[4] = NULL;
}

static kace_status store_run(kace_ctx *ctx, kace_store *store, const kace_measure_spec *spec,
                             const kace_measure_options *opt, double window_s, const char *gpu_name,
                             const char *command_key, kace_measure_result *res);

/* ---- a cold run started ahead ------------------------------------------------ */

struct kace_measure_ahead {
    kace_measure_spec spec;
    kace_mps *mps; /* holds the members' groups (an MPS run), else NULL */
    int pid[KACE_MAX_K];
    kace_pool *pool;
    bool ran;
    char **argv[KACE_MAX_K];
    char pct_env[KACE_MAX_K][64];
    const char *env[KACE_MAX_K][5];
    kace_proc_spec procs[KACE_MAX_K];
};

/* The gate opens: the members become the daemon's clients. */
static void ahead_unhold(kace_measure_ahead *a)
{
    for (int i = 0; a->mps && i < a->spec.k; i++)
        kace_mps_unhold(a->mps, a->pid[i]);
    a->mps = NULL;
}

void kace_measure_ahead_free(kace_measure_ahead **ap)
{
    kace_measure_ahead *a = *ap;
    if (!a)
        return;
    kace_pool_free(&a->pool); /* kills what waits at the gate, then their groups are let go */
    ahead_unhold(a);
    for (int i = 0; i < a->spec.k; i++)
        free(a->argv[i]);
    free(a);
    *ap = NULL;
}

kace_status kace_measure_start_ahead(kace_ctx *ctx, kace_store *store, const kace_measure_spec *spec,
                                     const kace_measure_options *opt, const char *cupti, kace_measure_ahead **out)
{
    *out = NULL;
    kace_status st = check_spec(ctx, spec, opt);
    if (st)
        return st;
    if (!cupti || !*cupti)
        return kace_fail(ctx, KACE_ERR_INVALID, "measure: members start ahead only under the injection library");
    kace_measure_ahead *a = calloc(1, sizeof *a);
    if (!a)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory starting a run ahead");
    a->spec = *spec;
    for (int i = 0; i < spec->k && !st; i++) {
        if ((st = kace_store_get_command(ctx, store, spec->workload[i], &a->argv[i])))
            break;
        member_env(spec->timeslice ? NULL : opt->mps, spec->mps_pct[i], a->pct_env[i], sizeof a->pct_env[i],
                   a->env[i]);
        a->procs[i] = (kace_proc_spec){.name = a->spec.workload[i], .argv = a->argv[i], .extra_env = a->env[i]};
    }
    if (!st)
        st = kace_pool_start_cold(ctx, a->procs, (size_t)spec->k, &opt->run, cupti, &a->pool);
    if (!st && !spec->timeslice) {
        a->mps = opt->mps;
        for (int i = 0; i < spec->k; i++)
            kace_mps_hold(a->mps, a->pid[i] = kace_pool_member(a->pool, (size_t)i)->pid);
    }
    if (st) {
        kace_measure_ahead_free(&a);
        return st;
    }
    *out = a;
    return KACE_OK;
}

bool kace_measure_ahead_holds(const kace_measure_ahead *a, const kace_measure_spec *spec)
{
    if (!a || a->ran || a->spec.k != spec->k || a->spec.timeslice != spec->timeslice)
        return false;
    for (int i = 0; i < spec->k; i++)
        if (a->spec.mps_pct[i] != spec->mps_pct[i] || strcmp(a->spec.workload[i], spec->workload[i]) != 0)
            return false;
    return true;
}

/* Opens the run's gate and measures it (kace_pool_run_cold): proc as kace_run fills it. */
static kace_status run_ahead(kace_ctx *ctx, kace_measure_ahead *a, const kace_run_options *ro, kace_proc_result *proc)
{
    kace_pool_result pr[KACE_MAX_K];
    ahead_unhold(a);
    a->ran = true;
    kace_status st = kace_pool_run_cold(ctx, a->pool, ro, pr);
    for (int i = 0; i < a->spec.k && !st; i++) {
        proc[i] = *kace_pool_member(a->pool, (size_t)i);
        proc[i].status = pr[i].status;
        proc[i].throughput = pr[i].throughput;
        proc[i].n_records = pr[i].n_records;
        if (pr[i].status != KACE_PROC_OK)
            snprintf(proc[i].detail, sizeof proc[i].detail, "%s", pr[i].detail);
    }
    return st;
}

/* A pool member measured well: its process goes on, paused (it has no ending yet). */
static const char pool_paused[] = "reported through its steady window; paused in the pool";

kace_status kace_measure(kace_ctx *ctx, kace_store *store, const kace_measure_spec *spec,
                         const kace_measure_options *opt, kace_measure_result *res)
{
    return kace_measure_ahead_run(ctx, store, spec, opt, NULL, res);
}

kace_status kace_measure_ahead_run(kace_ctx *ctx, kace_store *store, const kace_measure_spec *spec,
                                   const kace_measure_options *opt, kace_measure_ahead *ahead,
                                   kace_measure_result *res)
{
    memset(res, 0, sizeof *res);
    res->run_id = -1;
    const char *gpu_name = run_gpu_name(opt);
    kace_status st = check_spec(ctx, spec, opt);
    if (!st)
        st = check_profiles_gpu(ctx, store, spec, gpu_name);
    if (st)
        return st;
    if (spec->set[0])
        snprintf(res->set, sizeof res->set, "%s", spec->set);
    else
        kace_measure_default_set(spec, res->set, sizeof res->set);

    char **argv[KACE_MAX_K] = {0};
    run_checks checks = {0};
    char pct_env[KACE_MAX_K][64];
    const char *env[KACE_MAX_K][5];
    kace_proc_spec procs[KACE_MAX_K];
    memset(procs, 0, sizeof procs);
    int k = spec->k;
    for (int i = 0; i < k; i++) {
        if ((st = kace_store_get_command(ctx, store, spec->workload[i], &argv[i])))
            goto done;
        member_env(spec->timeslice ? NULL : opt->mps, spec->mps_pct[i], pct_env[i], sizeof pct_env[i], env[i]);
        procs[i].name = spec->workload[i];
        procs[i].argv = argv[i];
        procs[i].extra_env = env[i];
    }
    /* What the run is measured with, noted with it: a failed run is tried again
     * only once this changes (kace_plan_should_measure). */
    const char *names[KACE_MAX_K];
    for (int i = 0; i < k; i++)
        names[i] = spec->workload[i];
    char command_key[KACE_COMMAND_KEY_SIZE];
    if ((st = kace_members_command_key(ctx, k, names, (char *const *const *)argv, command_key)))
        goto done;
    if (!spec->timeslice && !kace_mps_alive(opt->mps)) {
        st = kace_fail(ctx, KACE_ERR_IO, "%s: the MPS daemon is not running (it died?); nothing measured",
                       kace_mps_pipe_dir(opt->mps));
        goto done;
    }
    /* An idle MPS server would hold a context on the GPU during the run. */
    if (spec->timeslice && opt->mps && kace_mps_alive(opt->mps)) {
        st = kace_fail(ctx, KACE_ERR_INVALID,
                       "%s: kace's MPS daemon still runs: quit it before a time-sliced run (its idle server would "
                       "hold a context on the GPU); nothing measured",
                       kace_mps_pipe_dir(opt->mps));
        goto done;
    }
    checks = (run_checks){.caller = &opt->run, .mps = opt->mps, .gpu = opt->gpu_access, .timeslice = spec->timeslice,
                          .k = k, .use_nvml = !spec->timeslice && kace_gpu_has(opt->gpu_access, KACE_GPU_CAP_MPS_LIST)};
    if (!(checks.scratch = kace_ctx_new())) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
        goto done;
    }
    kace_run_options ro = opt->run;
    ro.tick = on_tick;
    ro.tick_user = &checks;
    if (kace_measure_ahead_holds(ahead, spec))
        st = run_ahead(ctx, ahead, &ro, res->proc);
    else
        st = kace_run(ctx, procs, (size_t)k, &ro, res->proc);
    if (st)
        goto done;

    for (int i = 0; i < k; i++) {
        if (cut_short(opt, res->proc[i].status))
            res->cancelled = true;
        if (res->proc[i].status == KACE_PROC_SPAWN_FAILED) {
            st = kace_fail(ctx, KACE_ERR_NOT_FOUND, "%s: could not start its command '%s': %s; nothing recorded",
                           spec->workload[i], argv[i][0], res->proc[i].detail);
            goto done;
        }
    }
    if (res->cancelled)
        goto done;
    /* Clients that found no daemon run without MPS: not an MPS measurement. */
    if (!spec->timeslice && !kace_mps_alive(opt->mps)) {
        st = kace_fail(ctx, KACE_ERR_IO, "%s: the MPS daemon died during the run; nothing recorded",
                       kace_mps_pipe_dir(opt->mps));
        goto done;
    }
    if (!spec->timeslice && (st = verify_mps(ctx, &checks, spec, res)))
        goto done;
    if (spec->timeslice && checks.instance_seen) {
        st = kace_fail(ctx, KACE_ERR_IO,
                       "%s: a process of kace's MPS instance was alive during the time-sliced run (the GPU was "
                       "not time-sliced alone); nothing recorded",
                       kace_mps_pipe_dir(opt->mps));
        goto done;
    }

    st = store_run(ctx, store, spec, opt, opt->run.window_s, gpu_name, command_key, res);
done:
    kace_ctx_free(&checks.scratch);
    for (int i = 0; i < k; i++)
        free(argv[i]);
    return st;
}

/* Stores a run that took place (MPS verified): the run, a solo's curve
 * value and its attempt, in one savepoint. */
static kace_status store_run(kace_ctx *ctx, kace_store *store, const kace_measure_spec *spec,
                             const kace_measure_options *opt, double window_s, const char *gpu_name,
                             const char *command_key, kace_measure_result *res)
{
    kace_status st;
    int k = spec->k;
    res->status = run_status_of(res->proc, k);
    kace_measured_run run;
    memset(&run, 0, sizeof run);
    run.set = res->set;
    run.mode = spec->timeslice ? "timeslice" : "mps";
    run.repetition = spec->repetition;
    run.k = k;
    run.status = res->status;
    run.window_s = window_s;
    run.gpu = gpu_name;
    /* How each process ended goes with the run: whether MPS clients stopped
     * at a step boundary or were killed mid-step is what keeps a server
     * healthy (NVIDIA's MPS documentation), and the first GPU visit measures it. */
    char detail[KACE_MAX_K][sizeof res->proc[0].detail + 128]; /* detail (ending) */
    for (int i = 0; i < k; i++) {
        const kace_proc_result *p = &res->proc[i];
        bool ok = p->status == KACE_PROC_OK;
        char ending[96];
        kace_proc_ending(p, ending, sizeof ending);
        if (ok && strcmp(p->detail, pool_paused) == 0)
            snprintf(detail[i], sizeof detail[i], "%s", pool_paused);
        else if (ok)
            snprintf(detail[i], sizeof detail[i], "%s", ending);
        else
            snprintf(detail[i], sizeof detail[i], "%s (%s)", p->detail, ending);
        run.member[i] = (kace_measured_member){
            .workload = spec->workload[i],
            .mps_pct = spec->mps_pct[i],
            .throughput = ok ? p->throughput.samples_per_s : NAN,
            .cv = ok ? p->throughput.cv : NAN,
            .status = kace_proc_status_name(p->status),
            .detail = detail[i],
        };
    }
    /* Alone under MPS at a multiple of 10%: the run is also the workload's
     * exclusive throughput at that share (profile value exclusive_mps<P>,
     * which the split advisor and the placer read), stored with the run. */
    bool solo_curve = k == 1 && !spec->timeslice && res->status == KACE_RUN_OK && spec->mps_pct[0] % 10 == 0;
    /* One savepoint: the failed run it replaces, the run, its curve value and its attempt. */
    char run_key[KACE_MAX_K * (KACE_NAME_MAX + 8) + 320];
    kace_measured_run_key(&run, run_key, sizeof run_key);
    bool retired = false;
    if ((st = kace_store_savepoint(ctx, store, "kace_measured_attempt")))
        return st;
    if ((opt->retry_failed && (st = kace_attempt_retire_failed(ctx, store, run_key, &retired))) ||
        (st = kace_store_add_measured_run(ctx, store, &run, &res->run_id)) ||
        (solo_curve && (st = store_exclusive_at(ctx, store, &run, res->exclusive_metric,
                                                sizeof res->exclusive_metric))) ||
        (st = kace_attempt_note(ctx, store, run_key, command_key, res->status)) ||
        (st = kace_store_release(ctx, store, "kace_measured_attempt"))) {
        kace_store_rollback_to(store, "kace_measured_attempt");
        res->exclusive_metric[0] = '\0';
        return st;
    }
    res->retried = retired;
    res->stored = true;
    return KACE_OK;
}

/* ---- measuring in a warm pool ------------------------------------------------ */

struct kace_measure_pool {
    kace_pool *pool;
    size_t n;
    char workload[KACE_POOL_MAX_MEMBERS][KACE_NAME_MAX];
    int pct[KACE_POOL_MAX_MEMBERS];
    char **argv[KACE_POOL_MAX_MEMBERS];
    char pct_env[KACE_POOL_MAX_MEMBERS][64];
    const char *env[KACE_POOL_MAX_MEMBERS][5];
    kace_proc_spec specs[KACE_POOL_MAX_MEMBERS];
    double window_s;
    run_checks *checks; /* the run being measured, NULL between runs */
    /* A process that was a client of the daemon's server stays one for its
     * life: what was seen (at the start, in verified runs) counts for later
     * runs, so a member that dies at once in a run is still known as a client. */
    int server_pid;
    bool client_seen[KACE_POOL_MAX_MEMBERS], nvml_seen[KACE_POOL_MAX_MEMBERS];
    /* Members started ahead, held by the daemon until the pool opens (kace_mps_hold). */
    kace_mps *held_by;
    int held[KACE_POOL_MAX_MEMBERS];
    size_t n_held;
};

static void pool_unhold(kace_measure_pool *mp)
{
    for (size_t i = 0; i < mp->n_held; i++)
        kace_mps_unhold(mp->held_by, mp->held[i]);
    mp->n_held = 0;
}

/* Which members the daemon's servers list as clients now (by process group). */
static void pool_see_clients(kace_measure_pool *mp, kace_mps *mps)
{
    kace_ctx *scratch = kace_ctx_new();
    int servers[MAX_SERVERS];
    size_t n_servers = 0;
    if (scratch && kace_mps_server_pids(scratch, mps, servers, MAX_SERVERS, &n_servers) == KACE_OK)
        for (size_t s = 0; s < n_servers; s++) {
            int pids[MAX_MPS_PROCS];
            size_t n = 0;
            if (kace_mps_client_pids(scratch, mps, servers[s], pids, MAX_MPS_PROCS, &n) != KACE_OK)
                continue;
            if (!mp->server_pid)
                mp->server_pid = servers[s];
            for (size_t i = 0; i < n; i++) {
                pid_t g = getpgid((pid_t)pids[i]);
                for (size_t m = 0; m < mp->n && g > 0; m++)
                    if (g == kace_pool_member(mp->pool, m)->pid)
                        mp->client_seen[m] = true;
            }
        }
    kace_ctx_free(&scratch);
}

/* The pool's tick goes to the run being measured. */
static void pool_tick(void *user, const kace_run_view *v)
{
    kace_measure_pool *mp = user;
    if (mp->checks)
        on_tick(mp->checks, v);
}

static size_t pool_index(const kace_measure_pool *mp, const char *workload, int pct)
{
    for (size_t i = 0; i < mp->n; i++)
        if (mp->pct[i] == pct && strcmp(mp->workload[i], workload) == 0)
            return i;
    return mp->n;
}

static void free_measure_pool(kace_measure_pool **mpp)
{
    kace_measure_pool *mp = *mpp;
    if (!mp)
        return;
    kace_pool_free(&mp->pool);
    pool_unhold(mp);
    for (size_t i = 0; i < mp->n; i++)
        free(mp->argv[i]);
    free(mp);
    *mpp = NULL;
}

/* How many members of spec are not in the pool yet. */
static size_t new_members(const kace_measure_pool *mp, const kace_measure_spec *spec)
{
    size_t n = 0;
    for (int i = 0; i < spec->k; i++) {
        bool earlier = false;
        for (int j = 0; j < i; j++)
            earlier |= spec->mps_pct[j] == spec->mps_pct[i] && strcmp(spec->workload[j], spec->workload[i]) == 0;
        n += !earlier && pool_index(mp, spec->workload[i], spec->mps_pct[i]) == mp->n;
    }
    return n;
}

bool kace_measure_pool_has(const kace_measure_pool *mp, const kace_measure_spec *spec)
{
    return !spec->timeslice && new_members(mp, spec) == 0;
}

kace_status kace_measure_pool_start_ahead(kace_ctx *ctx, kace_store *store, const kace_measure_spec *specs, size_t n,
                                          size_t max_members, const kace_measure_options *opt, const char *cupti,
                                          size_t max_ahead, kace_measure_pool **out)
{
    *out = NULL;
    if (max_members == 0 || max_members > KACE_POOL_MAX_MEMBERS)
        max_members = KACE_POOL_MAX_MEMBERS;
    if (!opt->mps)
        return kace_fail(ctx, KACE_ERR_INVALID, "measure: a pool's members are MPS clients: name the MPS daemon");
    kace_measure_pool *mp = calloc(1, sizeof *mp);
    if (!mp)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory starting a pool");
    kace_status st = KACE_OK;
    for (size_t s = 0; s < n && !st; s++) {
        if (specs[s].timeslice)
            continue;
        if ((st = check_spec(ctx, &specs[s], opt)))
            break;
        if (mp->n + new_members(mp, &specs[s]) > max_members) {
            if (mp->n == 0)
                st = kace_fail(ctx, KACE_ERR_INVALID, "measure: a run of %d members in a pool of at most %zu",
                               specs[s].k, max_members);
            break; /* whole specs only, in order */
        }
        for (int i = 0; i < specs[s].k && !st; i++) {
            if (pool_index(mp, specs[s].workload[i], specs[s].mps_pct[i]) < mp->n)
                continue;
            size_t m = mp->n;
            snprintf(mp->workload[m], sizeof mp->workload[m], "%s", specs[s].workload[i]);
            mp->pct[m] = specs[s].mps_pct[i];
            if ((st = kace_store_get_command(ctx, store, mp->workload[m], &mp->argv[m])))
                break;
            member_env(opt->mps, mp->pct[m], mp->pct_env[m], sizeof mp->pct_env[m], mp->env[m]);
            mp->specs[m] = (kace_proc_spec){.name = mp->workload[m], .argv = mp->argv[m], .extra_env = mp->env[m]};
            mp->n++;
        }
    }
    if (!st && mp->n == 0)
        st = kace_fail(ctx, KACE_ERR_INVALID, "measure: no MPS run to start a pool for");
    kace_run_options ro = opt->run;
    ro.tick = pool_tick;
    ro.tick_user = mp;
    mp->window_s = ro.window_s;
    if (!st)
        st = kace_pool_start_ahead(ctx, mp->specs, mp->n, &ro, cupti, max_ahead, &mp->pool);
    if (st) {
        free_measure_pool(&mp);
        return st;
    }
    mp->held_by = opt->mps;
    for (size_t i = 0; i < kace_pool_started_ahead(mp->pool); i++)
        if (kace_mps_hold(mp->held_by, kace_pool_member(mp->pool, i)->pid))
            mp->held[mp->n_held++] = kace_pool_member(mp->pool, i)->pid;
    *out = mp;
    return KACE_OK;
}

kace_status kace_measure_pool_open(kace_ctx *ctx, kace_measure_pool *mp, const kace_measure_options *opt,
                                   double timeout_s)
{
    if (!opt->mps || !kace_mps_alive(opt->mps))
        return kace_fail(ctx, KACE_ERR_INVALID, "measure: a pool's members are MPS clients: start the MPS daemon first");
    kace_pool_result started[KACE_POOL_MAX_MEMBERS];
    pool_unhold(mp); /* the gate opens: they become the daemon's clients */
    kace_status st = kace_pool_open(ctx, mp->pool, timeout_s, started);
    for (size_t m = 0; m < mp->n && !st; m++)
        if (started[m].status == KACE_PROC_SPAWN_FAILED)
            st = kace_fail(ctx, KACE_ERR_NOT_FOUND, "%s: could not start its command '%s': %s; nothing measured",
                           mp->workload[m], mp->argv[m][0], started[m].detail);
    if (!st)
        pool_see_clients(mp, opt->mps);
    return st;
}

size_t kace_measure_pool_started_ahead(const kace_measure_pool *mp)
{
    return kace_pool_started_ahead(mp->pool);
}

kace_status kace_measure_pool_start(kace_ctx *ctx, kace_store *store, const kace_measure_spec *specs, size_t n,
                                    size_t max_members, const kace_measure_options *opt, double timeout_s,
                                    kace_measure_pool **out)
{
    *out = NULL;
    if (!opt->mps || !kace_mps_alive(opt->mps))
        return kace_fail(ctx, KACE_ERR_INVALID, "measure: a pool's members are MPS clients: start the MPS daemon first");
    kace_measure_pool *mp;
    kace_status st = kace_measure_pool_start_ahead(ctx, store, specs, n, max_members, opt, NULL, 0, &mp);
    if (!st && (st = kace_measure_pool_open(ctx, mp, opt, timeout_s)))
        free_measure_pool(&mp);
    *out = mp;
    return st;
}

kace_status kace_measure_in_pool(kace_ctx *ctx, kace_store *store, kace_measure_pool *mp,
                                 const kace_measure_spec *spec, const kace_measure_options *opt,
                                 kace_measure_result *res)
{
    memset(res, 0, sizeof *res);
    res->run_id = -1;
    const char *gpu_name = run_gpu_name(opt);
    if (spec->timeslice)
        return kace_fail(ctx, KACE_ERR_INVALID, "measure: a time-sliced run cannot run in the pool (its members are "
                         "MPS clients)");
    kace_status st = check_spec(ctx, spec, opt); /* opt->mps: the pool's daemon, checked around the run */
    if (!st)
        st = check_profiles_gpu(ctx, store, spec, gpu_name);
    if (st)
        return st;
    if (spec->set[0])
        snprintf(res->set, sizeof res->set, "%s", spec->set);
    else
        kace_measure_default_set(spec, res->set, sizeof res->set);
    int k = spec->k;
    size_t idx[KACE_MAX_K];
    const char *names[KACE_MAX_K];
    char **argvs[KACE_MAX_K];
    for (int i = 0; i < k; i++) {
        idx[i] = pool_index(mp, spec->workload[i], spec->mps_pct[i]);
        if (idx[i] == mp->n)
            return kace_fail(ctx, KACE_ERR_INVALID, "measure: %s at %d%% is not in the pool", spec->workload[i],
                             spec->mps_pct[i]);
        if (!kace_pool_alive(mp->pool, idx[i]))
            return kace_fail(ctx, KACE_ERR_IO, "measure: %s at %d%% has ended in the pool (%s); start a fresh pool; "
                             "nothing measured", spec->workload[i], spec->mps_pct[i],
                             kace_pool_member(mp->pool, idx[i])->detail);
        names[i] = spec->workload[i];
        argvs[i] = mp->argv[idx[i]];
    }
    kace_mps *mps = opt->mps;
    char command_key[KACE_COMMAND_KEY_SIZE];
    if ((st = kace_members_command_key(ctx, k, names, (char *const *const *)argvs, command_key)))
        return st;
    if (!kace_mps_alive(mps))
        return kace_fail(ctx, KACE_ERR_IO, "%s: the MPS daemon is not running (it died?); nothing measured",
                         kace_mps_pipe_dir(mps));
    run_checks checks = {.caller = &opt->run, .mps = mps, .gpu = opt->gpu_access, .k = k,
                         .use_nvml = kace_gpu_has(opt->gpu_access, KACE_GPU_CAP_MPS_LIST)};
    if (!(checks.scratch = kace_ctx_new()))
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    checks.server_pid = mp->server_pid;
    for (int i = 0; i < k; i++) {
        checks.member_client[i] = mp->client_seen[idx[i]];
        checks.member_seen[i] = mp->nvml_seen[idx[i]];
    }
    kace_pool_result pr[KACE_MAX_K];
    mp->checks = &checks;
    int64_t t_run = kace_monotonic_ns();
    st = kace_pool_run(ctx, mp->pool, idx, (size_t)k, 0, pr);
    double run_s = (double)(kace_monotonic_ns() - t_run) / 1e9;
    mp->checks = NULL;
    for (int i = 0; i < k && !st; i++) {
        kace_proc_result *p = &res->proc[i];
        *p = *kace_pool_member(mp->pool, idx[i]);
        /* This run's times, not the member's life so far (nor its wait at a gate). */
        p->runtime_s = run_s;
        p->start_ns = t_run;
        p->gate_open_ns = 0;
        p->status = pr[i].status;
        p->throughput = pr[i].throughput;
        p->n_records = pr[i].n_records;
        snprintf(p->detail, sizeof p->detail, "%s",
                 pr[i].status == KACE_PROC_OK ? pool_paused : pr[i].detail);
        if (cut_short(opt, pr[i].status))
            res->cancelled = true;
    }
    if (!st && !res->cancelled && !kace_mps_alive(mps))
        st = kace_fail(ctx, KACE_ERR_IO, "%s: the MPS daemon died during the run; nothing recorded",
                       kace_mps_pipe_dir(mps));
    if (!st && !res->cancelled)
        st = verify_mps(ctx, &checks, spec, res);
    if (!st && !res->cancelled) {
        if (!mp->server_pid)
            mp->server_pid = checks.server_pid;
        for (int i = 0; i < k; i++) {
            mp->client_seen[idx[i]] |= checks.member_client[i];
            mp->nvml_seen[idx[i]] |= checks.member_seen[i];
        }
    }
    if (!st && !res->cancelled)
        st = store_run(ctx, store, spec, opt, mp->window_s, gpu_name, command_key, res);
    kace_ctx_free(&checks.scratch);
    return st;
}

const struct kace_pool *kace_measure_pool_members(const kace_measure_pool *mp)
{
    return mp->pool;
}

void kace_measure_pool_stop(kace_measure_pool **mpp)
{
    if (*mpp && (*mpp)->pool)
        kace_pool_stop((*mpp)->pool, 0);
    free_measure_pool(mpp);
}
