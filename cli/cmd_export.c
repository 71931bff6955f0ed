/* kace export: the store's dataset as the CSV files kace import reads. */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* ---- --dataset: a device campaign's dataset folder ------------------------ */

typedef struct file_list {
    char **items;
    size_t n;
} file_list;

static void file_list_free(file_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->items[i]);
    free(l->items);
    *l = (file_list){0};
}

/* Every file under root/rel, by its path relative to root. */
static int list_files(const char *root, const char *rel, file_list *l)
{
    char path[4096];
    snprintf(path, sizeof path, "%s%s%s", root, *rel ? "/" : "", rel);
    DIR *d = opendir(path);
    if (!d) {
        fprintf(stderr, "kace export: %s: %s\n", path, strerror(errno));
        return -1;
    }
    int rc = 0;
    struct dirent *e;
    while (rc == 0 && (e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        char sub[4096], full[8192];
        snprintf(sub, sizeof sub, "%s%s%s", rel, *rel ? "/" : "", e->d_name);
        snprintf(full, sizeof full, "%s/%s", root, sub);
        struct stat sb;
        if (stat(full, &sb) != 0) {
            rc = -1;
        } else if (S_ISDIR(sb.st_mode)) {
            rc = list_files(root, sub, l);
        } else {
            char **p = realloc(l->items, (l->n + 1) * sizeof *p);
            if (!p || !(p[l->n] = strdup(sub))) {
                if (p)
                    l->items = p;
                rc = -1;
            } else {
                l->items = p;
                l->n++;
            }
        }
    }
    closedir(d);
    return rc;
}

static bool listed(const file_list *l, const char *rel)
{
    for (size_t i = 0; i < l->n; i++)
        if (strcmp(l->items[i], rel) == 0)
            return true;
    return false;
}

/* Whether two files hold the same bytes. */
static bool same_bytes(const char *a, const char *b)
{
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    bool same = fa && fb;
    while (same) {
        char x[8192], y[8192];
        size_t na = fread(x, 1, sizeof x, fa), nb = fread(y, 1, sizeof y, fb);
        same = na == nb && memcmp(x, y, na) == 0;
        if (na < sizeof x)
            break;
    }
    if (fa)
        fclose(fa);
    if (fb)
        fclose(fb);
    return same;
}

/* The calls' lines (--calls FILE), malloc'ed; NULL with *rc set on failure. */
static char *read_calls(const char *path, int *rc)
{
    FILE *f = fopen(path, "rb");
    char *text = NULL;
    size_t len = 0, cap = 0;
    if (f) {
        char buf[4096];
        size_t n;
        while ((n = fread(buf, 1, sizeof buf, f)) > 0) {
            if (len + n + 1 > cap) {
                cap = 2 * (len + n + 1);
                char *p = realloc(text, cap);
                if (!p)
                    break;
                text = p;
            }
            memcpy(text + len, buf, n);
            len += n;
        }
        fclose(f);
    }
    if (!f || !text) {
        fprintf(stderr, "kace export: --calls %s: %s\n", path, f ? "out of memory or empty" : strerror(errno));
        free(text);
        *rc = EXIT_FAILURE_RUN;
        return NULL;
    }
    text[len] = '\0';
    return text;
}

/* --verify: dir must be exactly what the store gives (the store's archive,
 * campaign/store.tar.gz, aside), and what the store gives must import. */
static int verify_dataset(kace_ctx *ctx, kace_store *store, const char *dir, const char *calls)
{
    const char *tmp_root = getenv("TMPDIR");
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s/kace-verify.XXXXXX", tmp_root && *tmp_root ? tmp_root : "/tmp");
    if (!mkdtemp(tmp)) {
        fprintf(stderr, "kace export: cannot create a folder in %s: %s\n", tmp_root ? tmp_root : "/tmp",
                strerror(errno));
        return EXIT_FAILURE_RUN;
    }
    char again[4200];
    snprintf(again, sizeof again, "%s/dataset", tmp);
    int rc = EXIT_OK;
    kace_status st = mkdir(again, 0755) == 0 ? kace_store_export_dataset(ctx, store, again, calls, NULL)
                                              : kace_fail(ctx, KACE_ERR_IO, "%s: %s", again, strerror(errno));
    if (st)
        rc = cli_error(ctx, st);
    file_list have = {0}, want = {0};
    if (rc == EXIT_OK && (list_files(dir, "", &have) != 0 || list_files(again, "", &want) != 0))
        rc = EXIT_FAILURE_RUN;
    size_t problems = 0;
    for (size_t i = 0; rc == EXIT_OK && i < have.n; i++) {
        if (strcmp(have.items[i], "campaign/store.tar.gz") == 0)
            continue;
        char a[8192], b[8192];
        snprintf(a, sizeof a, "%s/%s", dir, have.items[i]);
        snprintf(b, sizeof b, "%s/%s", again, have.items[i]);
        const char *why = !listed(&want, have.items[i]) ? "not made by kace export --dataset"
                          : !same_bytes(a, b)           ? "differs from what the store gives"
                                                        : NULL;
        if (why) {
            fprintf(stderr, "%s  %s: %s\n", problems++ ? "" : "kace export: not what its store gives:\n",
                    have.items[i], why);
        }
    }
    for (size_t i = 0; rc == EXIT_OK && i < want.n; i++)
        if (!listed(&have, want.items[i]))
            fprintf(stderr, "%s  %s: missing\n", problems++ ? "" : "kace export: not what its store gives:\n",
                    want.items[i]);
    if (rc == EXIT_OK && problems)
        rc = EXIT_FAILURE_RUN;
    /* And what the store gives imports into a store of its own. */
    if (rc == EXIT_OK) {
        char db[4200];
        snprintf(db, sizeof db, "%s/check.db", tmp);
        kace_store *check = cli_create_store(ctx, db, false);
        kace_source src = {NULL, NULL, NULL};
        kace_import_options opt = {.workload = NULL, .create_workloads = true};
        char *paths[] = {again};
        rc = check ? cli_import_paths(ctx, check, paths, 1, &src, &opt, true) : EXIT_FAILURE_RUN;
        kace_store_close(&check);
        const char *suffixes[] = {"", "-wal", "-shm", "-journal"};
        for (size_t i = 0; i < sizeof suffixes / sizeof *suffixes; i++) {
            char f[4300];
            snprintf(f, sizeof f, "%s%s", db, suffixes[i]);
            unlink(f);
        }
        if (rc != EXIT_OK)
            fprintf(stderr, "kace export: %s: what the store gives does not import\n", dir);
    }
    if (rc == EXIT_OK)
        printf("%s: %zu files, all as its store gives, and it imports\n", dir, have.n);
    for (size_t i = 0; i < want.n; i++) {
        char f[8192];
        snprintf(f, sizeof f, "%s/%s", again, want.items[i]);
        unlink(f);
    }
    const char *subs[] = {"profiles", "colocations", "campaign", ""};
    for (size_t i = 0; i < sizeof subs / sizeof *subs; i++) {
        char f[8192];
        snprintf(f, sizeof f, "%s%s%s", again, *subs[i] ? "/" : "", subs[i]);
        rmdir(f);
    }
    rmdir(tmp);
    file_list_free(&have);
    file_list_free(&want);
    return rc;
}

int cmd_export(int argc, char **argv)
{
    const char *db = cli_default_db();
    bool force = false, quiet = false, dataset = false, verify = false;
    const char *calls_path = NULL;
    char **sets = NULL;
    size_t n_sets = 0;
    static const struct option longopts[] = {{"db", required_argument, 0, 'd'}, {"set", required_argument, 0, 's'},
                                             {"force", no_argument, 0, 'f'},    {"quiet", no_argument, 0, 'q'},
                                             {"help", no_argument, 0, 'h'},     {"dataset", no_argument, 0, 'D'},
                                             {"verify", no_argument, 0, 'V'},   {"calls", required_argument, 0, 'c'},
                                             {0, 0, 0, 0}};
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
        case 'D': dataset = true; break;
        case 'V': verify = true; break;
        case 'c': calls_path = optarg; break;
        case 'q': quiet = true; break;
        case 'h':
            printf("usage: kace export [--db PATH] [--set NAME]... [--force] [--quiet] DIR\n"
                   "       kace export --dataset [--verify] [--calls FILE] [--db PATH] [--force] [--quiet] DIR\n"
                   "Writes the store's dataset into DIR as the CSV files kace import reads: per source (GPU,\n"
                   "tool, date) a folder with every workload's profile values and the runs of each set\n"
                   "(failed runs as a raw campaign), the published splits, and a README.md saying how to\n"
                   "import them (kace import --create-workloads DIR). --set: only these sets' runs (and no\n"
                   "splits). DIR is created; an existing DIR must be empty unless --force (files of the same\n"
                   "name are then replaced, others left). The store is only read.\n"
                   "--dataset: a device campaign's dataset folder (data/h200's layout): profiles/, colocations/\n"
                   "(each colocation's mean over its ok repetitions), campaign/runs.csv, spread.csv, visits.tsv\n"
                   "(--calls FILE: the calls' GPU, driver, CUDA and torch, tab-separated) and a generated\n"
                   "README.md (the calls, dates, the noise floor, how the processes ended, the goals met).\n"
                   "--verify: writes nothing; fails unless DIR is exactly what the store gives (its\n"
                   "campaign/store.tar.gz aside) and what the store gives imports.\n");
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
    if (verify && !dataset) {
        free(sets);
        return cli_usage("export", "--verify goes with --dataset");
    }
    if (dataset && n_sets) {
        free(sets);
        return cli_usage("export", "--dataset writes every set's runs: no --set");
    }
    char *calls = NULL;
    int crc = EXIT_OK;
    if (calls_path && !(calls = read_calls(calls_path, &crc))) {
        free(sets);
        return crc;
    }
    if (verify) {
        kace_ctx *vctx = cli_ctx_new();
        kace_store *vstore = vctx ? cli_read_store(vctx, db) : NULL;
        int vrc = vstore ? verify_dataset(vctx, vstore, dir, calls) : EXIT_FAILURE_RUN;
        kace_store_close(&vstore);
        kace_ctx_free(&vctx);
        free(calls);
        free(sets);
        return vrc;
    }
    int has = folder_has_entries(dir);
    if (has < 0 && errno != ENOENT) {
        struct stat sb;
        bool other = stat(dir, &sb) == 0 && !S_ISDIR(sb.st_mode);
        fprintf(stderr, "kace export: %s: %s\n", dir, other ? "not a folder" : strerror(errno));
        free(calls);
        free(sets);
        return EXIT_FAILURE_RUN;
    }
    if (has > 0 && !force) {
        fprintf(stderr, "kace export: %s is not empty (pass --force to write into it: files of the same name are "
                        "replaced, others stay and kace import would read them too)\n", dir);
        free(calls);
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
    if (rc == EXIT_OK && dataset) {
        kace_dataset_stats ds;
        kace_status st = kace_store_export_dataset(ctx, store, dir, calls, &ds);
        if (st) {
            rc = cli_error(ctx, st);
            fprintf(stderr, "kace export: %s is incomplete (each file in it is whole)\n", dir);
        } else if (!quiet) {
            printf("%s: %zu workloads profiled, %zu runs (%zu failed), %zu colocations (%zu measured >= 3 times) "
                   "in %zu files and README.md\n",
                   dir, ds.workloads, ds.runs, ds.failed_runs, ds.colocations, ds.repeated, ds.files);
        }
    } else if (rc == EXIT_OK) {
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
    free(calls);
    free(sets);
    return rc;
}
