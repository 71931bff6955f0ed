/* spank_kace.so: the job side of kace's Slurm integration.
 *
 *  --kace-workload=NAME  the job's workload as kace knows it. In sbatch,
 *                        salloc and srun the name goes into the job control
 *                        environment (SPANK_KACE_WORKLOAD), where
 *                        job_submit/kace reads it to place the job.
 *  --kace-profile        record the job's CUDA kernels with kace's CUPTI
 *                        injection library: every task gets
 *                        CUDA_INJECTION64_PATH=<profiler=PATH of
 *                        plugstack.conf, libkace_cupti.so> and
 *                        KACE_CUPTI_OUTPUT=<profile_dir>/kace-<job>.<step>.<task>.cupti
 *                        (profile_dir=DIR of plugstack.conf, else the job's
 *                        submit directory), plus KACE_PROFILE=1. The CUDA
 *                        driver loads the library into every CUDA process of
 *                        the task, unchanged; `kace import-cupti --workload W
 *                        FILE` stores the recording's kernel metrics after
 *                        the job. The task itself is not wrapped: a SPANK
 *                        plugin cannot replace the program slurmstepd
 *                        executes, so exclusive throughput and NVML metrics
 *                        (which need `kace profile` to run the program alone
 *                        and read its progress) are not collected.
 *
 * On the node (slurmstepd), every task gets KACE_WORKLOAD, KACE_REPORT_DIR
 * (plugstack.conf's report_dir=DIR: where `kace slurm report` writes the
 * job's observed throughput) and the MPS share kace chose as
 * CUDA_MPS_ACTIVE_THREAD_PERCENTAGE. job_submit/kace encodes
 * the share in the job's gres: for gres/mps Slurm itself exports the
 * percentage (count / count per GPU); for gres/shard this plugin computes it
 * from SLURM_SHARDS_ON_NODE and the plugstack.conf argument
 * shards_per_gpu=N.
 */
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <slurm/slurm.h>
#include <slurm/spank.h>

SPANK_PLUGIN(kace, 1);

#define NAME_MAX_LEN 128

static char workload[NAME_MAX_LEN];
static int profile;
static char profiler[1024];
static char profile_dir[1024];
static char report_dir[1024];
static long shards_per_gpu;

static int workload_option(int val, const char *optarg, int remote)
{
    (void)val;
    (void)remote;
    size_t n = optarg ? strlen(optarg) : 0;
    if (n == 0 || n >= sizeof workload) {
        slurm_error("kace: --kace-workload needs a workload name of 1 to %d characters", NAME_MAX_LEN - 1);
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        if (isspace((unsigned char)optarg[i]) || optarg[i] == ',' || optarg[i] == '=') {
            slurm_error("kace: --kace-workload '%s': a workload name has no spaces, ',' or '='", optarg);
            return -1;
        }
    memcpy(workload, optarg, n + 1);
    return 0;
}

static int profile_option(int val, const char *optarg, int remote)
{
    (void)val;
    (void)optarg;
    (void)remote;
    profile = 1;
    return 0;
}

static struct spank_option options[] = {
    {"kace-workload", "NAME", "Workload of this job as kace knows it (kace info lists them); job_submit/kace "
                              "places the job on the shared GPU where it is predicted to run best",
     1, 0, workload_option},
    {"kace-profile", NULL, "Record the job's CUDA kernels with kace's CUPTI library (kace import-cupti stores them)",
     0, 0, profile_option},
    SPANK_OPTIONS_TABLE_END};

static int parse_args(int ac, char **av)
{
    for (int i = 0; i < ac; i++) {
        if (strncmp(av[i], "profiler=", 9) == 0) {
            snprintf(profiler, sizeof profiler, "%s", av[i] + 9);
        } else if (strncmp(av[i], "profile_dir=", 12) == 0) {
            snprintf(profile_dir, sizeof profile_dir, "%s", av[i] + 12);
        } else if (strncmp(av[i], "report_dir=", 11) == 0) {
            snprintf(report_dir, sizeof report_dir, "%s", av[i] + 11);
        } else if (strncmp(av[i], "shards_per_gpu=", 15) == 0) {
            char *end;
            shards_per_gpu = strtol(av[i] + 15, &end, 10);
            if (*end || shards_per_gpu < 1 || shards_per_gpu > 100000) {
                slurm_error("kace: plugstack.conf: shards_per_gpu must be a positive integer, not '%s'", av[i] + 15);
                return -1;
            }
        } else {
            slurm_error("kace: plugstack.conf: unknown argument '%s' (expected profiler=PATH, profile_dir=DIR, report_dir=DIR, shards_per_gpu=N)",
                        av[i]);
            return -1;
        }
    }
    return 0;
}

int slurm_spank_init(spank_t sp, int ac, char **av)
{
    if (parse_args(ac, av))
        return -1;
    for (struct spank_option *o = options; o->name; o++)
        if (spank_option_register(sp, o) != ESPANK_SUCCESS) {
            slurm_error("kace: cannot register option --%s", o->name);
            return -1;
        }
    return 0;
}

/* Client side: hand the workload to job_submit/kace. */
int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    spank_context_t where = spank_context();
    if ((where != S_CTX_LOCAL && where != S_CTX_ALLOCATOR) || !workload[0])
        return 0;
    spank_err_t err = spank_job_control_setenv(sp, "KACE_WORKLOAD", workload, 1);
    if (err != ESPANK_SUCCESS) {
        slurm_error("kace: cannot record the workload: %s", spank_strerror(err));
        return -1;
    }
    return 0;
}

/* The share kace chose for this job, 0 when none. */
static int chosen_share(spank_t sp)
{
    char buf[32];
    char *end;
    if (shards_per_gpu > 0 && spank_getenv(sp, "SLURM_SHARDS_ON_NODE", buf, sizeof buf) == ESPANK_SUCCESS) {
        long v = strtol(buf, &end, 10);
        if (*end == '\0' && v >= 1 && v <= shards_per_gpu)
            return (int)(v * 100 / shards_per_gpu);
    }
    return 0;
}

/* --kace-profile on the node: point the CUDA driver at the injection
 * library and the library at a recording file of its own for this task.
 * Without a readable library the task runs unprofiled (and says why in the
 * job's log): a missing CUDA_INJECTION64_PATH target would make CUDA fail. */
static void setup_profile(spank_t sp)
{
    spank_setenv(sp, "KACE_PROFILE", "1", 1);
    if (!profiler[0] || access(profiler, R_OK) != 0) {
        slurm_error("kace: --kace-profile: no CUPTI library %s%s (plugstack.conf: profiler=PATH of "
                    "libkace_cupti.so); the task runs without recording",
                    profiler[0] ? "at " : "configured", profiler);
        return;
    }
    char dir[1024] = "", path[1400];
    if (profile_dir[0])
        snprintf(dir, sizeof dir, "%s", profile_dir);
    else if (spank_getenv(sp, "SLURM_SUBMIT_DIR", dir, sizeof dir) != ESPANK_SUCCESS)
        snprintf(dir, sizeof dir, "/tmp");
    uint32_t job = 0, step = 0, task = 0;
    spank_get_item(sp, S_JOB_ID, &job);
    spank_get_item(sp, S_JOB_STEPID, &step);
    spank_get_item(sp, S_TASK_GLOBAL_ID, &task);
    char step_name[16];
    if (step == SLURM_BATCH_SCRIPT)
        snprintf(step_name, sizeof step_name, "batch");
    else if (step == SLURM_EXTERN_CONT || step == SLURM_INTERACTIVE_STEP)
        snprintf(step_name, sizeof step_name, "%s", step == SLURM_EXTERN_CONT ? "extern" : "interactive");
    else
        snprintf(step_name, sizeof step_name, "%u", step);
    snprintf(path, sizeof path, "%s/kace-%u.%s.%u.cupti", dir, job, step_name, task);
    if (spank_setenv(sp, "CUDA_INJECTION64_PATH", profiler, 1) != ESPANK_SUCCESS ||
        spank_setenv(sp, "KACE_CUPTI_OUTPUT", path, 1) != ESPANK_SUCCESS)
        slurm_error("kace: --kace-profile: cannot set the task's environment");
}

/* Node side: configure every task of the job. */
int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    char buf[32];
    int share = chosen_share(sp);
    if (share > 0) {
        snprintf(buf, sizeof buf, "%d", share);
        if (spank_setenv(sp, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", buf, 1) != ESPANK_SUCCESS)
            slurm_error("kace: cannot set CUDA_MPS_ACTIVE_THREAD_PERCENTAGE");
    }
    if (workload[0])
        spank_setenv(sp, "KACE_WORKLOAD", workload, 1);
    if (report_dir[0])
        spank_setenv(sp, "KACE_REPORT_DIR", report_dir, 1);
    if (profile)
        setup_profile(sp);
    return 0;
}
