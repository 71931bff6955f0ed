/* kace slurm status | place | report: what kace's Slurm placer sees and
 * would do, and the jobs' own throughput reports (slurm/report.h). */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <libgen.h>
#include <math.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "kace/place.h"
#include "kace/store.h"

/* Where jobs' reports go (see report_dir). */
#define DEFAULT_REPORT_DIR "/var/spool/kace/reports"

#ifdef KACE_HAVE_SLURM
#include "cluster.h"
#include "files.h"
#include "text.h"

/* Where jobs' reports go: --reports, else $KACE_REPORT_DIR (the SPANK
 * plugin sets it in every task from plugstack.conf's report_dir=), else
 * this. */

static const char *report_dir(const char *given)
{
    const char *env = getenv("KACE_REPORT_DIR");
    return given ? given : env && *env ? env : DEFAULT_REPORT_DIR;
}

/* kace slurm report: the job's throughput into <dir>/<job>.report, written
 * to a temporary file and renamed, so a reader never sees half of it. */
static int slurm_report(const char *dir, const char *job_arg, const char *throughput_arg, const char *workload)
{
    const char *job_text = job_arg ? job_arg : getenv("SLURM_JOB_ID");
    if (!job_text || !*job_text)
        return cli_usage("slurm", "report needs --job ID (or run it inside the job: $SLURM_JOB_ID)");
    double job_v = 0, x = NAN;
    if (!cli_parse_number(job_text, 1, UINT32_MAX, true, &job_v) || !isdigit((unsigned char)job_text[0]))
        return cli_usage("slurm", "--job '%s': expected a Slurm job id", job_text);
    unsigned long long job = (unsigned long long)job_v;
    if (!throughput_arg || !cli_parse_number(throughput_arg, 0, 1e15, false, &x) || x <= 0)
        return cli_usage("slurm", "report needs --throughput X in samples/s (a finite number > 0)%s%s%s",
                         throughput_arg ? ", not '" : "", throughput_arg ? throughput_arg : "",
                         throughput_arg ? "'" : "");
    kace_slurm_report r = {.job = (uint32_t)job, .throughput = x};
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    r.time = (double)now.tv_sec + now.tv_nsec / 1e9;
    const char *w = workload ? workload : getenv("KACE_WORKLOAD");
    const char *node = getenv("SLURMD_NODENAME");
    if (w && strlen(w) < sizeof r.workload)
        snprintf(r.workload, sizeof r.workload, "%s", w);
    if (node && strlen(node) < sizeof r.node)
        snprintf(r.node, sizeof r.node, "%s", node);
    for (char *p = r.workload; *p; p++)
        if (!isgraph((unsigned char)*p))
            *p = '_';
    char text[1024], path[4200];
    if (!kace_slurm_report_format(text, sizeof text, &r) || strlen(dir) > 4000) {
        fprintf(stderr, "kace: report too long\n");
        return EXIT_FAILURE_RUN;
    }
    snprintf(path, sizeof path, "%s/%llu.report", dir, job);
    kace_ctx *ctx = kace_ctx_new();
    kace_status st = ctx ? kace_write_file_durable(ctx, path, text, strlen(text)) : KACE_ERR_NOMEM;
    if (st) {
        fprintf(stderr, "kace: cannot write a report in %s: %s (the site's report_dir; see docs/slurm.md)\n", dir,
                ctx ? kace_errmsg(ctx) : "out of memory");
        kace_ctx_free(&ctx);
        return EXIT_FAILURE_RUN;
    }
    kace_ctx_free(&ctx);
    return EXIT_OK;
}

/* The job's report when there is a trustworthy one: a regular file of the
 * job's user (or root), for this job, not older than the job. Says on
 * stderr why a report that exists is not used. */
static bool read_report(kace_ctx *ctx, const char *dir, const kace_slurm_job *job, kace_slurm_report *r)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%u.report", dir, job->id);
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) {
        if (errno != ENOENT)
            fprintf(stderr, "kace: %s: %s (ignored)\n", path, strerror(errno));
        return false;
    }
    struct stat st;
    char text[4096];
    ssize_t n = -1;
    bool ok = false;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
        fprintf(stderr, "kace: %s: not a regular file (ignored)\n", path);
    else if (st.st_uid != job->user_id && st.st_uid != 0)
        fprintf(stderr, "kace: %s: written by uid %u, not by job %u's user %u (ignored)\n", path, (unsigned)st.st_uid,
                job->id, job->user_id);
    else if (st.st_size >= (off_t)sizeof text || (n = read(fd, text, sizeof text)) < 0)
        fprintf(stderr, "kace: %s: unreadable or over %zu bytes (ignored)\n", path, sizeof text - 1);
    else if (kace_slurm_report_parse(ctx, text, (size_t)n, path, r))
        fprintf(stderr, "kace: %s (ignored)\n", kace_errmsg(ctx));
    else if (r->job != job->id)
        fprintf(stderr, "kace: %s: a report of job %u (ignored)\n", path, r->job);
    else if (job->start_time > 0 && r->time + 1 < (double)job->start_time)
        fprintf(stderr, "kace: %s: older than job %u (an earlier job with its id; ignored)\n", path, job->id);
    else
        ok = true;
    close(fd);
    return ok;
}

typedef struct slurm_view {
    kace_place_config cfg;
    const char *reports; /* report directory */
    bool store_observations;
    size_t n_stored, n_known, n_partial;
    kace_store *store;
    kace_dataset *ds;
    kace_model *model;
    kace_slurm_cluster *cluster;
} slurm_view;

static void view_free(slurm_view *v)
{
    kace_slurm_cluster_free(&v->cluster);
    kace_model_free(&v->model);
    kace_dataset_free(&v->ds);
    kace_store_close(&v->store);
}

/* Whether slurmctld answers: a TCP connection to the SlurmctldHost (or
 * ControlMachine) and SlurmctldPort of slurm.conf, given up after 1 s.
 * libslurm itself retries a controller that is down for about a minute
 * before it fails; this says so at once. True (let libslurm decide) when
 * slurm.conf cannot be read or names no host. */
static bool controller_answers(const char *slurm_conf, char *why, size_t why_size)
{
    FILE *f = fopen(slurm_conf, "r");
    char line[1024], host[256] = "", port[16] = "6817";
    while (f && fgets(line, sizeof line, f)) {
        char *p = line;
        while (isspace((unsigned char)*p))
            p++;
        char *hash = strchr(p, '#');
        if (hash)
            *hash = '\0';
        const char *value = NULL;
        if (!strncasecmp(p, "SlurmctldHost=", 14))
            value = p + 14;
        else if (!strncasecmp(p, "ControlMachine=", 15))
            value = p + 15;
        if (value && !host[0]) { /* the first (primary) controller: "name" or "name(address)" */
            const char *open = strchr(value, '(');
            const char *start = open ? open + 1 : value;
            size_t n = strcspn(start, open ? ")" : " \t\r\n,");
            snprintf(host, sizeof host, "%.*s", (int)(n < sizeof host ? n : sizeof host - 1), start);
        } else if (!strncasecmp(p, "SlurmctldPort=", 14)) {
            size_t n = strspn(p + 14, "0123456789");
            if (n > 0 && n < sizeof port)
                snprintf(port, sizeof port, "%.*s", (int)n, p + 14);
        }
    }
    if (f)
        fclose(f);
    if (!host[0])
        return true;
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
    if (getaddrinfo(host, port, &hints, &res) != 0) {
        snprintf(why, why_size, "slurmctld's host '%s' (%s) does not resolve", host, slurm_conf);
        return false;
    }
    bool ok = false;
    int err = ETIMEDOUT;
    for (struct addrinfo *a = res; a && !ok; a = a->ai_next) {
        int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0)
            continue;
        if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
            ok = true;
        } else if (errno == EINPROGRESS) {
            struct pollfd pfd = {.fd = fd, .events = POLLOUT};
            socklen_t len = sizeof err;
            if (poll(&pfd, 1, 1000) == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0)
                ok = true;
        } else {
            err = errno;
        }
        close(fd);
    }
    freeaddrinfo(res);
    if (!ok)
        snprintf(why, why_size, "no slurmctld answers at %s:%s (%s; %s): is it running?", host, port, strerror(err),
                 slurm_conf);
    return ok;
}

/* The placer's configuration: --config, else kace.conf beside $SLURM_CONF,
 * with --db / --model / --model-file over it. */
static int view_load(kace_ctx *ctx, slurm_view *v, const char *config, const char *db, const char *model,
                     const char *model_file)
{
    char path[1100];
    kace_status st;
    kace_place_config_default(&v->cfg);
    if (!config) {
        const char *conf = getenv("SLURM_CONF");
        char dir[1024];
        snprintf(dir, sizeof dir, "%s", conf && *conf ? conf : "/etc/slurm/slurm.conf");
        snprintf(path, sizeof path, "%s/kace.conf", dirname(dir));
        FILE *f = fopen(path, "r");
        if (f) {
            fclose(f);
            config = path;
        }
    }
    bool refused;
    if (config && (st = kace_slurm_config_load(ctx, config, &v->cfg, &refused)))
        return cli_error(ctx, st);
    if (db)
        snprintf(v->cfg.store, sizeof v->cfg.store, "%s", db);
    else if (!v->cfg.store[0])
        snprintf(v->cfg.store, sizeof v->cfg.store, "%s", cli_default_db());
    if (model)
        snprintf(v->cfg.model, sizeof v->cfg.model, "%s", model);
    if (model_file)
        snprintf(v->cfg.model_file, sizeof v->cfg.model_file, "%s", model_file);
    if ((st = kace_store_open_flags(ctx, v->cfg.store, 0, &v->store)) ||
        (st = kace_store_load_around(ctx, v->store, NULL, 0, true, &v->ds)) || /* profiles, no runs */
        (st = v->cfg.model_file[0] ? kace_model_load(ctx, v->cfg.model_file, &v->model)
                                   : kace_store_load_model(ctx, v->store, v->cfg.model, &v->model)))
        return cli_error(ctx, st);
    if (!kace_predictor_can(kace_model_predictor(v->model), KACE_PRED_MEMBERS)) {
        fprintf(stderr, "kace: the placer needs a slowdown model (kace train --kind slowdown)\n");
        return EXIT_FAILURE_RUN;
    }
    const char *slurm_conf = getenv("SLURM_CONF");
    char why[600];
    if (!controller_answers(slurm_conf && *slurm_conf ? slurm_conf : "/etc/slurm/slurm.conf", why, sizeof why)) {
        fprintf(stderr, "kace: %s\n", why);
        return EXIT_FAILURE_RUN;
    }
    if ((st = kace_slurm_cluster_load(ctx, v->cfg.gres, &v->cluster)))
        return cli_error(ctx, st);
    kace_slurm_cluster_resolve(v->cluster, v->ds);
    for (size_t j = 0; j < v->cluster->n_jobs; j++) {
        kace_slurm_job *job = &v->cluster->jobs[j];
        kace_slurm_report r;
        if (job->running && read_report(ctx, v->reports, job, &r)) {
            job->observed = r.throughput;
            job->observed_at = r.time;
        }
    }
    kace_place_prepare(ctx, kace_model_predictor(v->model), v->ds, v->cluster->gpus, v->cluster->n_gpus);
    return EXIT_OK;
}

/* Stores what one GPU's jobs reported as an observation (origin "slurm"):
 * only when every job there was placed by kace, is known to the store and
 * reported. Its key (node, jobs, time of the latest report) makes running
 * status again harmless. */
static void store_gpu(kace_ctx *ctx, slurm_view *v, size_t g, const kace_slurm_job **jobs, int k,
                      const double *member)
{
    kace_observed_member m[KACE_MAX_K];
    char key[512], name[KACE_NAME_MAX + 16];
    int used = snprintf(key, sizeof key, "%s:", kace_slurm_gpu_name(v->cluster, g, name, sizeof name));
    double latest = 0;
    for (int i = 0; i < k; i++) {
        m[i] = (kace_observed_member){.workload = jobs[i]->workload, .mps_pct = jobs[i]->share,
                                      .throughput = jobs[i]->observed, .predicted = member ? member[i] : NAN};
        if (jobs[i]->observed_at > latest)
            latest = jobs[i]->observed_at;
        if (used > 0 && (size_t)used < sizeof key)
            used += snprintf(key + used, sizeof key - (size_t)used, "%s%u", i ? "+" : "", jobs[i]->id);
    }
    if (used > 0 && (size_t)used < sizeof key)
        snprintf(key + used, sizeof key - (size_t)used, "@%.3f", latest);
    kace_observed_colocation obs = {.origin = "slurm", .origin_id = key, .observed_at = latest,
                                    .model = v->cfg.model_file[0] ? v->cfg.model_file : v->cfg.model,
                                    .n_members = (size_t)k, .members = m};
    bool added = false;
    if (kace_store_add_observation(ctx, v->store, &obs, &added)) {
        fprintf(stderr, "kace: observation %s not stored: %s\n", key, kace_errmsg(ctx));
        return;
    }
    if (added)
        v->n_stored++;
    else
        v->n_known++;
}

/* One GPU: its jobs, predicted and observed throughput. */
static void print_gpu(kace_ctx *ctx, slurm_view *v, size_t g)
{
    const kace_place_gpu *gpu = &v->cluster->gpus[g];
    int group[KACE_MAX_K], k = 0;
    const kace_slurm_job *members[KACE_MAX_K];
    bool predictable = gpu->n_residents <= KACE_MAX_K, storable = true;
    double observed = 0;
    int n_observed = 0, n_jobs = 0;
    for (size_t j = 0; j < v->cluster->n_jobs; j++) {
        const kace_slurm_job *job = &v->cluster->jobs[j];
        if (job->entry != g)
            continue;
        n_jobs++;
        int w = job->workload[0] ? kace_dataset_find(v->ds, job->workload) : -1;
        if (w < 0 || k >= KACE_MAX_K) {
            predictable = false;
        } else {
            members[k] = job;
            group[k++] = w;
        }
        if (!isnan(job->observed)) {
            observed += job->observed;
            n_observed++;
        }
        if (!job->running || isnan(job->observed) || job->share <= 0)
            storable = false;
    }
    double sum = NAN, conf = NAN, member[KACE_MAX_K];
    if (predictable && k > 0 && kace_predict_group(ctx, kace_model_predictor(v->model), v->ds, group, k, &sum, &conf, member))
        predictable = false;
    char pred[32] = "-", obs[32] = "-", ratio[32] = "-", norm[32] = "-";
    if (predictable && k > 0) {
        snprintf(pred, sizeof pred, "%.2f", sum);
        snprintf(norm, sizeof norm, "%.3f", gpu->base_score);
    }
    if (n_jobs > 0 && n_observed == n_jobs) {
        snprintf(obs, sizeof obs, "%.2f", observed);
        if (predictable && sum > 0)
            snprintf(ratio, sizeof ratio, "%.3f", observed / sum);
    }
    char name[KACE_NAME_MAX + 16];
    printf("%-12s %-6s %5d %4d%% %12s %10s %12s %9s\n", kace_slurm_gpu_name(v->cluster, g, name, sizeof name),
           gpu->usable ? "up" : "down", n_jobs,
           100 - gpu->share_free, pred, norm, obs, ratio);
    int m = 0;
    for (size_t j = 0; j < v->cluster->n_jobs; j++) {
        const kace_slurm_job *job = &v->cluster->jobs[j];
        if (job->entry != g)
            continue;
        char mine[32] = "-", seen[32] = "-";
        int w = job->workload[0] ? kace_dataset_find(v->ds, job->workload) : -1;
        if (predictable && w >= 0)
            snprintf(mine, sizeof mine, "%.2f", member[m++]);
        if (!isnan(job->observed))
            snprintf(seen, sizeof seen, "%.2f", job->observed);
        printf("  job %-8u %-36s %3d%% %-8s predicted %10s observed %10s\n", job->id,
               job->workload[0] ? job->workload : "(not placed by kace)", job->share,
               job->running ? "running" : "pending", mine, seen);
    }
    if (n_jobs == 0 || !v->store_observations)
        return;
    if (storable && k == n_jobs)
        store_gpu(ctx, v, g, members, k, predictable ? member : NULL);
    else
        v->n_partial++;
}

static int slurm_status(kace_ctx *ctx, slurm_view *v)
{
    printf("shared GPUs (%s): predicted and observed throughput sums in samples/s; norm = predicted sum of\n"
           "fractions of exclusive throughput; observed = what jobs reported with kace slurm report (in %s)\n",
           v->cfg.gres, v->reports);
    printf("%-12s %-6s %5s %5s %12s %10s %12s %9s\n", "node", "state", "jobs", "share", "predicted", "norm",
           "observed", "obs/pred");
    for (size_t g = 0; g < v->cluster->n_gpus; g++)
        print_gpu(ctx, v, g);
    if (v->store_observations)
        printf("observations (origin slurm) in %s: %zu stored now, %zu stored before; %zu GPUs with jobs not "
               "all placed by kace and reporting\n",
               v->cfg.store, v->n_stored, v->n_known, v->n_partial);
    return EXIT_OK;
}

static int slurm_place(kace_ctx *ctx, slurm_view *v, const char *workload)
{
    int w = kace_dataset_find(v->ds, workload);
    if (w < 0) {
        fprintf(stderr, "kace: unknown workload '%s' (not in %s; see kace info)\n", workload, v->cfg.store);
        return EXIT_FAILURE_RUN;
    }
    kace_placement p;
    kace_status st = kace_place_job(ctx, kace_model_predictor(v->model), v->ds, v->cluster->gpus, v->cluster->n_gpus, w,
                                    &v->cfg.options, &p);
    if (st)
        return cli_error(ctx, st);
    printf("node=%s gpu=%d share=%d gain=%.3f score=%.3f confidence=%.2f considered=%d\n",
           v->cluster->gpus[p.gpu].node, v->cluster->nodes[p.gpu].gpu, p.share, p.gain, p.score, p.confidence,
           p.n_considered);
    return EXIT_OK;
}
#endif

int cmd_slurm(int argc, char **argv)
{
    const char *config = NULL, *db = NULL, *model = NULL, *model_file = NULL, *workload = NULL;
    const char *reports = NULL, *job = NULL, *throughput = NULL;
    bool store = true;
    static const struct option longopts[] = {
        {"config", required_argument, 0, 'c'}, {"db", required_argument, 0, 'd'},
        {"model", required_argument, 0, 'm'},  {"model-file", required_argument, 0, 'M'},
        {"workload", required_argument, 0, 'w'}, {"reports", required_argument, 0, 'r'},
        {"job", required_argument, 0, 'j'},    {"throughput", required_argument, 0, 't'},
        {"no-store", no_argument, 0, 'n'},     {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "c:d:m:M:w:r:j:t:nh", longopts, NULL)) != -1) {
        switch (c) {
        case 'c': config = optarg; break;
        case 'd': db = optarg; break;
        case 'm': model = optarg; break;
        case 'M': model_file = optarg; break;
        case 'w': workload = optarg; break;
        case 'r': reports = optarg; break;
        case 'j': job = optarg; break;
        case 't': throughput = optarg; break;
        case 'n': store = false; break;
        case 'h':
            printf("usage: kace slurm status [--config kace.conf] [--db PATH] [--model NAME | --model-file F]\n"
                   "                         [--reports DIR] [--no-store]\n"
                   "       kace slurm place --workload W [same options]\n"
                   "       kace slurm report --throughput X [--job ID] [--workload W] [--reports DIR]\n"
                   "status: every shared GPU of the Slurm cluster ($SLURM_CONF), the jobs kace placed there,\n"
                   "        predicted vs observed throughput; stores each GPU whose jobs all reported as an\n"
                   "        observation (origin slurm) in the store, unless --no-store.\n"
                   "place:  where job_submit/kace would put W now.\n"
                   "report: inside a job, what it achieves (samples/s) into DIR/<job>.report.\n"
                   "DIR: --reports, else $KACE_REPORT_DIR (set in jobs by spank_kace.so's report_dir=), else\n"
                   "     " DEFAULT_REPORT_DIR ". The configuration defaults to kace.conf beside slurm.conf.\n");
            return EXIT_OK;
        default: return cli_usage("slurm", "unknown option");
        }
    }
    if (optind >= argc)
        return cli_usage("slurm", "expected status, place or report");
    const char *action = argv[optind];
    if (strcmp(action, "status") != 0 && strcmp(action, "place") != 0 && strcmp(action, "report") != 0)
        return cli_usage("slurm", "unknown action '%s' (expected status, place or report)", action);
    if (strcmp(action, "place") == 0 && !workload)
        return cli_usage("slurm", "place needs --workload W");
    if (optind + 1 < argc)
        return cli_usage("slurm", "unexpected argument '%s'", argv[optind + 1]);
#ifdef KACE_HAVE_SLURM
    if (strcmp(action, "report") == 0)
        return slurm_report(report_dir(reports), job, throughput, workload);
    kace_ctx *ctx = cli_ctx_new();
    if (!ctx)
        return EXIT_FAILURE_RUN;
    slurm_view v = {.reports = report_dir(reports), .store_observations = store};
    int rc = view_load(ctx, &v, config, db, model, model_file);
    if (rc == EXIT_OK)
        rc = strcmp(action, "status") == 0 ? slurm_status(ctx, &v) : slurm_place(ctx, &v, workload);
    view_free(&v);
    kace_ctx_free(&ctx);
    return rc;
#else
    (void)config, (void)db, (void)model, (void)model_file, (void)reports, (void)job, (void)throughput, (void)store;
    fprintf(stderr, "kace: this kace was built without Slurm (install libslurm-dev and rebuild)\n");
    return EXIT_FAILURE_RUN;
#endif
}
