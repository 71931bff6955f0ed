/* kace top: an nvtop-like live view of the GPUs kace places on, fed by
 * kace serve (GET /k8s/state: nodes, GPUs, pods, MPS shares, predictions;
 * GET /metrics: observed throughput of reported colocations). Press q to quit. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "cli.h"
#include "kube_api.h"

static void usage(void)
{
    printf("usage: kace top [--serve URL] [--token-file F] [--interval S] [--once]\n"
           "A live view of kace's GPUs (default URL http://127.0.0.1:8080): per node and GPU, the pods kace\n"
           "placed there, their workload and MPS share, predicted throughput (samples/s, and the fraction of\n"
           "running alone), observed throughput where reported (POST /v1/observations), and an interference\n"
           "flag (!) where a pod is predicted to keep less than half its speed. Refreshes every --interval\n"
           "seconds (default 2); q quits. --once prints one frame and exits.\n");
}

/* Observed throughput sums by GPU UUID, from kace serve's metrics text. */
static double observed_for(const char *metrics, const char *uuid)
{
    if (!metrics)
        return NAN;
    char want[160];
    snprintf(want, sizeof want, "UUID=\"%.120s\"", uuid);
    double sum = NAN;
    for (const char *p = metrics; p && *p;) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        if (strncmp(p, "kace_colocation_throughput_samples_per_second{", 46) == 0) {
            char line[2048];
            snprintf(line, sizeof line, "%.*s", (int)(n < sizeof line - 1 ? n : sizeof line - 1), p);
            const char *space = strrchr(line, ' ');
            if (strstr(line, want) && strstr(line, "kind=\"observed\"") && space)
                sum = (isnan(sum) ? 0 : sum) + strtod(space + 1, NULL);
        }
        p = nl ? nl + 1 : NULL;
    }
    return sum;
}

static const char *str(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : "";
}

static double num(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

/* One frame into f. Returns 0, or -1 when kace serve could not be read. */
static int frame(FILE *f, const kube_api *serve, bool tty)
{
    char err[600], *state = NULL, *metrics = NULL;
    long status;
    int rc = kube_api_call(serve, "GET", "/k8s/state", NULL, NULL, &status, &state, err, sizeof err);
    if (rc == 0)
        kube_api_call(serve, "GET", "/metrics", NULL, NULL, &status, &metrics, err, sizeof err);
    time_t now = time(NULL);
    char clock[16];
    strftime(clock, sizeof clock, "%H:%M:%S", localtime(&now));
    if (tty)
        fputs("\033[H\033[2J", f);
    cJSON *j = rc == 0 && state ? cJSON_Parse(state) : NULL;
    if (!j) {
        fprintf(f, "kace top  %s  %s\ncannot read kace serve: %s\n", serve->url, clock, rc ? err : "not JSON");
        free(state);
        free(metrics);
        return -1;
    }
    int n_nodes = 0, n_gpus = 0, n_pods = 0, n_flag = 0;
    const cJSON *node, *gpu, *m;
    cJSON_ArrayForEach(node, cJSON_GetObjectItemCaseSensitive(j, "nodes"))
    {
        n_nodes++;
        cJSON_ArrayForEach(gpu, cJSON_GetObjectItemCaseSensitive(node, "gpus"))
        {
            n_gpus++;
            n_pods += cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(gpu, "members"));
            n_flag += cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(gpu, "interference"));
        }
    }
    fprintf(f, "kace top  %s  %s   nodes %d  GPUs %d  pods %d  interfering %d  binds %.0f\n", serve->url, clock,
            n_nodes, n_gpus, n_pods, n_flag, num(j, "binds"));
    fprintf(f, "%-16s %-24s %4s %12s %12s %s\n", "NODE", "GPU", "PODS", "PREDICTED/s", "OBSERVED/s", "FLAG");
    cJSON_ArrayForEach(node, cJSON_GetObjectItemCaseSensitive(j, "nodes"))
    {
        cJSON_ArrayForEach(gpu, cJSON_GetObjectItemCaseSensitive(node, "gpus"))
        {
            const cJSON *members = cJSON_GetObjectItemCaseSensitive(gpu, "members");
            double pred = num(gpu, "predicted_sum"), obs = observed_for(metrics, str(gpu, "id"));
            char p[32] = "-", o[32] = "-";
            if (!isnan(pred))
                snprintf(p, sizeof p, "%.1f", pred);
            if (!isnan(obs))
                snprintf(o, sizeof o, "%.1f", obs);
            bool flag = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(gpu, "interference"));
            fprintf(f, "%-16.16s %-24.24s %4d %12s %12s %s\n", str(node, "name"), str(gpu, "id"),
                    cJSON_GetArraySize(members), p, o, flag ? "! interference" : (cJSON_GetArraySize(members) ? "ok" : "idle"));
            cJSON_ArrayForEach(m, members)
            {
                double mp = num(m, "predicted"), fr = num(m, "fraction"), share = num(m, "mps_percentage");
                char ps[48] = "-", sh[16] = "-";
                if (!isnan(mp))
                    snprintf(ps, sizeof ps, "%.1f/s (%.2f)", mp, fr);
                if (share > 0)
                    snprintf(sh, sizeof sh, "%.0f%%", share);
                const char *pod = str(m, "pod");
                fprintf(f, "   %-22.22s %-36.36s MPS %-4s %-18s%s%s\n", pod[0] ? pod : "(unnamed)", str(m, "workload"), sh,
                        ps, cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(m, "assumed")) ? " assumed" : "",
                        !isnan(fr) && fr < 0.5 ? " !" : "");
            }
        }
    }
    if (tty)
        fputs("\nq: quit\n", f);
    fflush(f);
    cJSON_Delete(j);
    free(state);
    free(metrics);
    return 0;
}

int cmd_top(int argc, char **argv)
{
    kube_api serve = {.url = "http://127.0.0.1:8080", .timeout = 5};
    const char *token_file = NULL;
    double interval = 2;
    bool once = false;
    enum { O_SERVE = 256, O_TOKEN, O_INTERVAL, O_ONCE };
    static const struct option longopts[] = {{"serve", required_argument, 0, O_SERVE},
                                             {"token-file", required_argument, 0, O_TOKEN},
                                             {"interval", required_argument, 0, O_INTERVAL},
                                             {"once", no_argument, 0, O_ONCE},
                                             {"help", no_argument, 0, 'h'},
                                             {0, 0, 0, 0}};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case O_SERVE: serve.url = optarg; break;
        case O_TOKEN: token_file = optarg; break;
        case O_ONCE: once = true; break;
        case O_INTERVAL:
            if (!cli_number("top", "interval", optarg, 0.1, 3600, &interval))
                return EXIT_USAGE;
            break;
        case 'h': usage(); return EXIT_OK;
        default: return cli_usage("top", "unknown option");
        }
    }
    char err[300];
    if (kube_api_setup(&serve, token_file, err, sizeof err) != 0)
        return cli_usage("top", "%s", err);
    if (once) {
        int rc = frame(stdout, &serve, false);
        kube_api_cleanup(&serve);
        return rc == 0 ? EXIT_OK : EXIT_FAILURE_RUN;
    }
    bool tty = isatty(STDIN_FILENO);
    struct termios saved, raw;
    if (tty && tcgetattr(STDIN_FILENO, &saved) == 0) { /* keys without Enter, not echoed */
        raw = saved;
        raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
        tcsetattr(STDIN_FILENO, TCSANOW, &raw);
    } else {
        tty = false;
    }
    for (;;) {
        frame(stdout, &serve, isatty(STDOUT_FILENO));
        struct pollfd p = {.fd = STDIN_FILENO, .events = POLLIN};
        int r = poll(&p, 1, (int)(interval * 1000));
        if (r > 0) {
            char key = 0;
            ssize_t got = read(STDIN_FILENO, &key, 1);
            if (got <= 0 || key == 'q' || key == 'Q')
                break;
        } else if (r < 0 && errno != EINTR) {
            break;
        }
    }
    if (tty)
        tcsetattr(STDIN_FILENO, TCSANOW, &saved);
    kube_api_cleanup(&serve);
    return EXIT_OK;
}
