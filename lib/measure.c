/* One colocation measurement (see include/kace/measure.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kace/measure.h"

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

kace_status kace_measure(kace_ctx *ctx, kace_store *store, const kace_measure_spec *spec,
                         const kace_measure_options *opt, kace_measure_result *res)
{
    memset(res, 0, sizeof *res);
    res->run_id = -1;
    kace_status st = check_spec(ctx, spec, opt);
    if (st)
        return st;
    if (spec->set[0])
        snprintf(res->set, sizeof res->set, "%s", spec->set);
    else
        kace_measure_default_set(spec, res->set, sizeof res->set);

    char **argv[KACE_MAX_K] = {0};
    char pct_env[KACE_MAX_K][64];
    const char *env[KACE_MAX_K][4];
    kace_proc_spec procs[KACE_MAX_K];
    memset(procs, 0, sizeof procs);
    int k = spec->k;
    for (int i = 0; i < k; i++) {
        if ((st = kace_store_get_command(ctx, store, spec->workload[i], &argv[i])))
            goto done;
        if (spec->timeslice) {
            env[i][0] = KACE_NO_MPS_PIPE_ENV;
            env[i][1] = NULL;
        } else {
            const char *const *client = kace_mps_client_env(opt->mps);
            snprintf(pct_env[i], sizeof pct_env[i], "%s=%d", KACE_MPS_PCT_ENV, spec->mps_pct[i]);
            env[i][0] = client[0];
            env[i][1] = client[1];
            env[i][2] = pct_env[i];
            env[i][3] = NULL;
        }
        procs[i].name = spec->workload[i];
        procs[i].argv = argv[i];
        procs[i].extra_env = env[i];
    }
    if (!spec->timeslice && !kace_mps_alive(opt->mps)) {
        st = kace_fail(ctx, KACE_ERR_IO, "%s: the MPS daemon is not running (it died?); nothing measured",
                       kace_mps_pipe_dir(opt->mps));
        goto done;
    }
    if ((st = kace_run(ctx, procs, (size_t)k, &opt->run, res->proc)))
        goto done;

    for (int i = 0; i < k; i++) {
        if (res->proc[i].status == KACE_PROC_CANCELLED)
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

    res->status = run_status_of(res->proc, k);
    kace_measured_run run;
    memset(&run, 0, sizeof run);
    run.set = res->set;
    run.mode = spec->timeslice ? "timeslice" : "mps";
    run.repetition = spec->repetition;
    run.k = k;
    run.status = res->status;
    run.window_s = opt->run.window_s;
    run.gpu = opt->gpu;
    for (int i = 0; i < k; i++) {
        const kace_proc_result *p = &res->proc[i];
        bool ok = p->status == KACE_PROC_OK;
        run.member[i] = (kace_measured_member){
            .workload = spec->workload[i],
            .mps_pct = spec->mps_pct[i],
            .throughput = ok ? p->throughput.samples_per_s : NAN,
            .cv = ok ? p->throughput.cv : NAN,
            .status = kace_proc_status_name(p->status),
            .detail = ok ? NULL : p->detail,
        };
    }
    if ((st = kace_store_add_measured_run(ctx, store, &run, &res->run_id)))
        goto done;
    res->stored = true;
done:
    for (int i = 0; i < k; i++)
        free(argv[i]);
    return st;
}
