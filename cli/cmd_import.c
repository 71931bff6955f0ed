/* kace import / import-ncu / info */
#include <dirent.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"

typedef struct path_list {
    char **items;
    size_t n, cap;
} path_list;

static int push_path(path_list *l, const char *p)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        char **items = realloc(l->items, cap * sizeof *items);
        if (!items)
            return -1;
        l->items = items;
        l->cap = cap;
    }
    l->items[l->n] = strdup(p);
    return l->items[l->n++] ? 0 : -1;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Collects the .csv files under a folder, sorted for a stable order. */
static int collect(const char *path, path_list *out, int depth)
{
    struct stat sb;
    if (stat(path, &sb) != 0) {
        fprintf(stderr, "kace: %s: no such file or folder\n", path);
        return -1;
    }
    if (!S_ISDIR(sb.st_mode))
        return push_path(out, path);
    if (depth > 8)
        return 0;
    DIR *d = opendir(path);
    if (!d) {
        fprintf(stderr, "kace: %s: cannot open folder\n", path);
        return -1;
    }
    path_list here = {0};
    struct dirent *e;
    int rc = 0;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char child[4096];
        snprintf(child, sizeof child, "%s/%s", path, e->d_name);
        struct stat cs;
        if (stat(child, &cs) != 0)
            continue;
        size_t len = strlen(e->d_name);
        if (S_ISDIR(cs.st_mode) || (len > 4 && strcmp(e->d_name + len - 4, ".csv") == 0))
            if (push_path(&here, child) != 0)
                rc = -1;
    }
    closedir(d);
    if (here.n > 1) /* an empty folder has no items array (qsort must not get NULL) */
        qsort(here.items, here.n, sizeof *here.items, cmp_str);
    for (size_t i = 0; i < here.n && rc == 0; i++)
        rc = collect(here.items[i], out, depth + 1);
    for (size_t i = 0; i < here.n; i++)
        free(here.items[i]);
    free(here.items);
    return rc;
}

static void report_file(void *user, const char *path, const kace_import_batch *b, const kace_import_stats *stats)
{
    if (*(const bool *)user) /* quiet */
        return;
    cli_meter_clear();
    if (b->kind == KACE_FILE_CAMPAIGN_RECORD) {
        printf("%-60s %-28s (each run of the campaign; the colocation files beside it hold their means)\n", path,
               kace_file_kind_name(b->kind));
        return;
    }
    printf("%-60s %-28s values +%zu ~%zu =%zu  runs +%zu ~%zu =%zu  splits +%zu ~%zu =%zu%s\n", path,
           kace_file_kind_name(b->kind), stats->values_added, stats->values_updated, stats->values_unchanged,
           stats->runs_added, stats->runs_updated, stats->runs_unchanged, stats->splits_added, stats->splits_updated,
           stats->splits_unchanged,
           stats->values_added + stats->values_updated + stats->runs_added + stats->runs_updated +
                       stats->splits_added + stats->splits_updated ==
                   0
               ? "  (no change)"
               : "");
}

int cli_import_paths(kace_ctx *ctx, kace_store *store, char **paths, int n, const kace_source *src,
                     const kace_import_options *opt, bool quiet)
{
    path_list files = {0};
    int rc = EXIT_OK;
    for (int i = 0; i < n; i++)
        if (collect(paths[i], &files, 0) != 0) {
            rc = EXIT_FAILURE_RUN;
            goto done;
        }
    if (files.n == 0) {
        fprintf(stderr, "kace: nothing to import (no .csv files found)\n");
        rc = EXIT_FAILURE_RUN;
        goto done;
    }
    /* The library opens every file first, then stores them in kind order, batch by batch. */
    kace_status st = kace_store_import_files(ctx, store, (const char *const *)files.items, files.n, src, opt,
                                             report_file, &quiet);
    if (st) {
        rc = cli_error(ctx, st);
        fprintf(stderr, "kace: nothing was imported\n");
    }
done:
    for (size_t i = 0; i < files.n; i++)
        free(files.items[i]);
    free(files.items);
    return rc;
}

static int import_main(int argc, char **argv, bool ncu)
{
    const char *cmd = ncu ? "import-ncu" : "import";
    const char *db = cli_default_db();
    kace_source src = {NULL, NULL, NULL};
    kace_import_options opt = {.workload = NULL};
    bool quiet = false;
    static const struct option longopts[] = {{"db", required_argument, 0, 'd'},  {"gpu", required_argument, 0, 'g'},
                                             {"tool", required_argument, 0, 't'}, {"date", required_argument, 0, 'D'},
                                             {"workload", required_argument, 0, 'w'}, {"quiet", no_argument, 0, 'q'},
                                             {"replace", no_argument, 0, 'R'},
                                             {"create-workloads", no_argument, 0, 'C'},
                                             {"help", no_argument, 0, 'h'},       {0, 0, 0, 0}};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "d:g:t:D:w:qRCh", longopts, NULL)) != -1) {
        switch (c) {
        case 'd': db = optarg; break;
        case 'g': src.gpu = optarg; break;
        case 't': src.tool = optarg; break;
        case 'D': src.date = optarg; break;
        case 'w': opt.workload = optarg; break;
        case 'q': quiet = true; break;
        case 'R': opt.replace = true; break;
        case 'C': opt.create_workloads = true; break;
        case 'h':
            printf("usage: kace %s [--db PATH] [--gpu MODEL] [--tool NAME] [--date YYYY-MM-DD]%s\n"
                   "       [--replace] [--create-workloads] [--quiet] FILE|FOLDER...\n"
                   "Imports reference CSV files (profiles, colocations of any k, raw MPS campaigns, splits) and\n"
                   "Nsight Compute exports (ncu --csv --print-details all). Folders are searched for .csv files.\n"
                   "Every file is parsed before anything is stored, and all is stored or nothing. Re-importing a\n"
                   "file changes nothing; a file that changes stored values is refused, naming them, unless\n"
                   "--replace (the old values are kept as history). Colocations may name only workloads that\n"
                   "are stored or profiled by the same import, unless --create-workloads.\n",
                   cmd, ncu ? " --workload NAME" : " [--workload NAME]");
            return EXIT_OK;
        default: return cli_usage(cmd, "unknown option");
        }
    }
    if (optind >= argc)
        return cli_usage(cmd, "give at least one file or folder to import");
    if (ncu && !opt.workload)
        return cli_usage(cmd, "--workload NAME is required (the workload the kernels belong to)");
    if (ncu && !src.tool)
        src.tool = "ncu";
    kace_ctx *ctx = cli_ctx_new();
    if (!ctx)
        return EXIT_FAILURE_RUN;
    cli_meter_attach(ctx, cmd, quiet);
    kace_store *store = cli_create_store(ctx, db, false);
    int rc = store ? cli_import_paths(ctx, store, argv + optind, argc - optind, &src, &opt, quiet) : EXIT_FAILURE_RUN;
    kace_store_close(&store);
    kace_ctx_free(&ctx);
    return rc;
}

int cmd_import(int argc, char **argv)
{
    return import_main(argc, argv, false);
}

int cmd_import_ncu(int argc, char **argv)
{
    return import_main(argc, argv, true);
}

int cmd_info(int argc, char **argv)
{
    const char *db = cli_default_db();
    bool upgrade = false;
    static const struct option longopts[] = {{"db", required_argument, 0, 'd'}, {"upgrade", no_argument, 0, 'u'},
                                             {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "d:uh", longopts, NULL)) != -1) {
        if (c == 'd')
            db = optarg;
        else if (c == 'u')
            upgrade = true;
        else if (c == 'h') {
            printf("usage: kace info [--db PATH] [--upgrade]\n\n"
                   "What the store holds. It is only read (a store in a folder you may not write can be read);\n"
                   "--upgrade first migrates a store of an older kace to this kace's schema.\n");
            return EXIT_OK;
        } else
            return cli_usage("info", "unknown option");
    }
    kace_ctx *ctx = cli_ctx_new();
    kace_store *store = upgrade ? cli_open_store(ctx, db) : cli_read_store(ctx, db);
    int rc = EXIT_FAILURE_RUN;
    kace_set_info *sets = NULL;
    size_t n_sets = 0;
    kace_store_counts counts;
    kace_status st;
    if (!store)
        goto done;
    if ((st = kace_store_count(ctx, store, &counts)) || (st = kace_store_list_sets(ctx, store, &sets, &n_sets))) {
        rc = cli_error(ctx, st);
        goto done;
    }
    printf("store %s\n", db);
    if (kace_store_older_version(store))
        printf("  schema version %d, older than this kace's: read through an upgraded copy in memory, the file "
               "unchanged (kace info --upgrade upgrades it once)\n",
               kace_store_older_version(store));
    printf("  workloads %zu\n  profile values %zu\n  runs %zu\n  split rows %zu\n  models %zu\n", counts.workloads,
           counts.profile_values, counts.runs, counts.splits, counts.models);
    for (size_t i = 0; i < n_sets; i++)
        printf("  set %-32s k=%d runs=%zu\n", sets[i].name, sets[i].k, sets[i].n_runs);
    rc = cli_print_models(ctx, store, "  ");
    if (rc == EXIT_OK)
        rc = cli_print_drift(ctx, store, "pairs", KACE_MODEL_DEFAULT, 20); /* observations and drift (cmd_learn.c) */
done:
    free(sets);
    kace_store_close(&store);
    kace_ctx_free(&ctx);
    return rc;
}
