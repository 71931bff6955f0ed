/* kace export: the store's dataset as the CSV files kace import reads. */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "kace/store_export.h"

/* 1: path is a folder with something in it; 0: an empty folder; -1: not a
 * folder (errno: ENOENT when nothing is there). */
static int folder_has_entries(const char *path)
{
    DIR *d = opendir(path);
    if (!d)
        return -1;
    struct dirent *e;
    int any = 0;
    while (!any && (e = readdir(d)))
        any = strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(d);
    return any;
}

/* Whether the store holds a set of that name (an unknown --set is a typo,
 * not an empty export). */
static int check_sets(kace_ctx *ctx, kace_store *store, char **sets, size_t n)
{
    kace_set_info *info = NULL;
    size_t n_info = 0;
    kace_status st = kace_store_list_sets(ctx, store, &info, &n_info);
    if (st)
        return cli_error(ctx, st);
    int rc = EXIT_OK;
    for (size_t i = 0; i < n && rc == EXIT_OK; i++) {
        bool found = false;
        for (size_t j = 0; j < n_info && !found; j++)
            found = strcmp(info[j].name, sets[i]) == 0;
        if (!found) {
            fprintf(stderr, "kace export: the store holds no set '%s' (kace info lists them)\n", sets[i]);
            rc = EXIT_FAILURE_RUN;
        }
    }
    free(info);
    return rc;
}

int cmd_export(int argc, char **argv)
{
    const char *db = cli_default_db();
    bool force = false, quiet = false;
    char **sets = NULL;
    size_t n_sets = 0;
    static const struct option longopts[] = {{"db", required_argument, 0, 'd'}, {"set", required_argument, 0, 's'},
                                             {"force", no_argument, 0, 'f'},    {"quiet", no_argument, 0, 'q'},
                                             {"help", no_argument, 0, 'h'},     {0, 0, 0, 0}};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "d:s:fqh", longopts, NULL)) != -1) {
        switch (c) {
        case 'd': db = optarg; break;
        case 's': {
            char **p = realloc(sets, (n_sets + 1) * sizeof *p);
            if (!p) {
                free(sets);
                fprintf(stderr, "kace: out of memory\n");
                return EXIT_FAILURE_RUN;
            }
            sets = p;
            sets[n_sets++] = optarg;
            break;
        }
        case 'f': force = true; break;
        case 'q': quiet = true; break;
        case 'h':
            printf("usage: kace export [--db PATH] [--set NAME]... [--force] [--quiet] DIR\n"
                   "Writes the store's dataset into DIR as the CSV files kace import reads: per source (GPU,\n"
                   "tool, date) a folder with every workload's profile values and the runs of each set\n"
                   "(failed runs as a raw campaign), the published splits, and a README.md saying how to\n"
                   "import them (kace import --create-workloads DIR). --set: only these sets' runs (and no\n"
                   "splits). DIR is created; an existing DIR must be empty unless --force (files of the same\n"
                   "name are then replaced, others left). The store is only read.\n");
            free(sets);
            return EXIT_OK;
        default: free(sets); return cli_usage("export", "unknown option");
        }
    }
    if (optind != argc - 1) {
        free(sets);
        return cli_usage("export", optind >= argc ? "give the folder to write (DIR)" : "give one folder (DIR)");
    }
    const char *dir = argv[optind];
    int has = folder_has_entries(dir);
    if (has < 0 && errno != ENOENT) {
        struct stat sb;
        bool other = stat(dir, &sb) == 0 && !S_ISDIR(sb.st_mode);
        fprintf(stderr, "kace export: %s: %s\n", dir, other ? "not a folder" : strerror(errno));
        free(sets);
        return EXIT_FAILURE_RUN;
    }
    if (has > 0 && !force) {
        fprintf(stderr, "kace export: %s is not empty (pass --force to write into it: files of the same name are "
                        "replaced, others stay and kace import would read them too)\n", dir);
        free(sets);
        return EXIT_FAILURE_RUN;
    }
    kace_ctx *ctx = cli_ctx_new();
    kace_store *store = cli_read_store(ctx, db);
    int rc = store ? check_sets(ctx, store, sets, n_sets) : EXIT_FAILURE_RUN;
    /* The folder itself, not its parents: a missing parent is a mistyped path. */
    if (rc == EXIT_OK && has < 0 && mkdir(dir, 0755) != 0) {
        fprintf(stderr, "kace export: cannot create %s: %s\n", dir, strerror(errno));
        rc = EXIT_FAILURE_RUN;
    }
    if (rc == EXIT_OK) {
        kace_export_options opt = {.sets = (const char *const *)sets, .n_sets = n_sets};
        kace_export_stats stats;
        kace_status st = kace_store_export(ctx, store, dir, &opt, &stats);
        if (st) {
            rc = cli_error(ctx, st);
            fprintf(stderr, "kace export: %s is incomplete (each file in it is whole)\n", dir);
        } else {
            if (!quiet)
                printf("%s: %zu workloads, %zu profile values, %zu runs (%zu failed), %zu split rows in %zu files, "
                       "%zu source folder%s\n",
                       dir, stats.workloads, stats.profile_values, stats.runs, stats.failed_runs, stats.splits,
                       stats.files, stats.folders, stats.folders == 1 ? "" : "s");
            if (stats.runs_left_out)
                fprintf(stderr, "kace export: %zu failed run%s without any throughput left out (the import format "
                                "cannot say them)\n", stats.runs_left_out, stats.runs_left_out == 1 ? "" : "s");
        }
    }
    kace_store_close(&store);
    kace_ctx_free(&ctx);
    free(sets);
    return rc;
}
