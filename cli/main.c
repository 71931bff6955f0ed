/* kace: kernel-aware colocation for GPU sharing. Subcommand dispatch. */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "kace/dynlib.h"

typedef struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} command;

static const command commands[] = {
    {"demo", cmd_demo, "the main job: import the reference data, train, recommend, evaluate, draw figures"},
    {"import", cmd_import, "import measurement files or folders into the store"},
    {"import-ncu", cmd_import_ncu, "import an Nsight Compute --csv export as a workload's kernel profile"},
    {"info", cmd_info, "what the store holds"},
    {"export", cmd_export, "write the store's dataset as the CSV files kace import reads"},
    {"train", cmd_train, "fit a model on stored colocations and save it"},
    {"predict", cmd_predict, "rank colocation partners for a workload"},
    {"model", cmd_model, "list the stored models, or promote one to the default (kace model promote NAME)"},
    {"eval", cmd_eval, "the KACE paper's evaluation (paper and clean mode), tables, CSV, figures"},
    {"simulate", cmd_simulate, "replay a production GPU trace under every placement policy, table and figures"},
    {"schedule", cmd_schedule, "the online colocation scheduler: jobs in on stdin, placements out"},
    {"serve", cmd_serve, "HTTP colocation advisor: JSON endpoints, Kubernetes extender, Prometheus metrics"},
    {"top", cmd_top, "live view of kace's GPUs: pods, MPS shares, predicted vs observed, interference"},
    {"agent", cmd_agent, "Kubernetes node daemon: publish what kace placed on this node's GPUs"},
    {"profile", cmd_profile, "run a workload alone on the GPU and store its profile (CUPTI, NVML, throughput)"},
    {"slurm", cmd_slurm, "what runs where on the Slurm cluster's shared GPUs, predicted vs observed"},
    {"workload", cmd_workload, "register the command that runs a workload (kace workload add NAME -- CMD...)"},
    {"measure", cmd_measure, "run workloads together under MPS (or time-slicing) and record their throughput"},
    {"campaign", cmd_campaign, "measure a plan of colocations (pairs, triples, MPS splits), resumably"},
    {"plan", cmd_plan, "print the device campaign's plan for a catalog's workloads, or extend a plan"},
    {"import-cupti", cmd_import_cupti, "import a libkace_cupti.so kernel recording (e.g. from Slurm's --kace-profile)"},
    {"progress-from-output", cmd_progress_output,
     "report an unchanged command's progress to kace from its output lines (tqdm, logs)"},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: kace <command> [options]\n\ncommands:\n");
    int width = 0;
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
        if ((int)strlen(commands[i].name) > width)
            width = (int)strlen(commands[i].name);
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
        fprintf(f, "  %-*s %s\n", width, commands[i].name, commands[i].summary);
    fprintf(f, "\nRun 'kace <command> --help' for a command's options. Store: --db PATH (default %s).\n",
            cli_default_db());
}

/* ~/.local/share/kace/kace.db: the one store whose folder kace creates. */
static const char *home_db(void)
{
    static char path[4096];
    const char *home = getenv("HOME");
    snprintf(path, sizeof path, "%s/.local/share/kace/kace.db", home && *home ? home : ".");
    return path;
}

kace_ctx *cli_ctx_new(void)
{
    kace_ctx *ctx = kace_ctx_new();
    if (!ctx) {
        fprintf(stderr, "kace: out of memory\n");
        exit(EXIT_FAILURE_RUN);
    }
    return ctx;
}

const char *cli_default_db(void)
{
    const char *env = getenv("KACE_DB");
    if (env && *env)
        return env;
    return home_db();
}

int cli_error(kace_ctx *ctx, kace_status st)
{
    const char *msg = kace_errmsg(ctx);
    fprintf(stderr, "kace: %s\n", msg && *msg ? msg : kace_strerror(st));
    return EXIT_FAILURE_RUN;
}

int cli_usage(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "kace %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (see kace %s --help)\n", cmd);
    va_end(ap);
    return EXIT_USAGE;
}

static kace_store *open_store(kace_ctx *ctx, const char *path, unsigned flags)
{
    kace_store *s = NULL;
    kace_status st = kace_store_open_flags(ctx, path, flags, &s);
    if (st) {
        cli_error(ctx, st);
        return NULL;
    }
    return s;
}

kace_store *cli_open_store(kace_ctx *ctx, const char *path)
{
    return open_store(ctx, path, 0);
}

kace_store *cli_read_store(kace_ctx *ctx, const char *path)
{
    return open_store(ctx, path, KACE_STORE_READ_ONLY);
}

kace_store *cli_create_store(kace_ctx *ctx, const char *path, bool with_folders)
{
    bool dirs = with_folders || strcmp(path, home_db()) == 0;
    return open_store(ctx, path, KACE_STORE_CREATE | (dirs ? KACE_STORE_CREATE_DIRS : 0));
}

int cli_mkdirs(const char *path)
{
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || *p == '\0') {
            char c = *p;
            *p = '\0';
            if (mkdir(buf, 0755) != 0 && errno != EEXIST)
                return -1;
            *p = c;
            if (!c)
                break;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? EXIT_USAGE : EXIT_OK;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("kace %s\n", KACE_VERSION);
        return EXIT_OK;
    }
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
        if (strcmp(argv[1], commands[i].name) == 0) {
            int rc = commands[i].run(argc - 1, argv + 1);
            /* An optional library that could not be loaded (include/kace/dynlib.h): the
             * command's own error says what failed, this line why and what to install. */
            const char *missing = kace_dynlib_failure();
            if (missing)
                fprintf(stderr, "kace %s: %s\n", argv[1], missing);
            return rc;
        }
    fprintf(stderr, "kace: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return EXIT_USAGE;
}
