/* kace plan: the device campaign's plan for a catalog's workloads, or a
 * stored plan extended with the workloads it does not hold yet. */
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "kace/catalog.h"
#include "kace/plan_make.h"

/* The whole of path, NUL-terminated (free it); NULL after a message. */
static char *read_text(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "kace plan: %s: %s\n", path, strerror(errno));
        return NULL;
    }
    char *text = NULL;
    size_t n = 0, cap = 0;
    bool failed = false;
    for (;;) {
        if (cap - n < 4096) {
            char *p = cap < ((size_t)64 << 20) ? realloc(text, cap ? cap * 2 : 8192) : NULL;
            if (!p) {
                fprintf(stderr, "kace plan: %s: %s\n", path, cap ? "larger than 64 MiB" : "out of memory");
                failed = true;
                break;
            }
            text = p;
            cap = cap ? cap * 2 : 8192;
        }
        size_t got = fread(text + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0) {
            if (ferror(f)) {
                fprintf(stderr, "kace plan: %s: read error\n", path);
                failed = true;
            }
            break;
        }
    }
    fclose(f);
    if (failed) {
        free(text);
        return NULL;
    }
    text[n] = '\0';
    *len = n;
    return text;
}

int cmd_plan(int argc, char **argv)
{
    const char *extend = NULL, *catalog = NULL;
    static const struct option longopts[] = {{"extend", required_argument, 0, 'e'},
                                             {"catalog", required_argument, 0, 'c'},
                                             {"help", no_argument, 0, 'h'},
                                             {0, 0, 0, 0}};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "e:c:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'e': extend = optarg; break;
        case 'c': catalog = optarg; break;
        case 'h':
            printf("usage: kace plan [--extend OLD_PLAN] [--catalog FILE | NAME...]\n"
                   "Prints the device campaign's plan (the format kace campaign reads) for the workloads\n"
                   "NAME... or those of the catalog FILE (workloads/catalog.txt's format), in that order:\n"
                   "every workload in >= 5 pairs (>= 30 pairs), 10 triples, 2 MPS split grids, 6 pairs\n"
                   "measured 3 times, 3 of them time-sliced too, and every workload alone at 100%% MPS\n"
                   "(the grids' workloads at each share). The same names give the same plan.\n"
                   "  --extend OLD_PLAN  print OLD_PLAN with the workloads it does not hold added, each in\n"
                   "                     >= N pairs (N: its occur N, else 5) and alone at 100%% MPS; what it\n"
                   "                     planned stays as it is\n"
                   "  --catalog FILE     the workloads of FILE's lines, in order (instead of NAME...)\n");
            return EXIT_OK;
        default: return cli_usage("plan", "unknown option");
        }
    }
    int n_args = argc - optind;
    if (catalog && n_args > 0)
        return cli_usage("plan", "--catalog FILE or NAME..., not both ('%s' after --catalog)", argv[optind]);
    if (!catalog && n_args == 0)
        return cli_usage("plan", "expected --catalog FILE or workload NAMEs");
    for (int i = optind; i < argc; i++) {
        char why[256];
        if (!kace_workload_name_ok(argv[i], NULL, why, sizeof why))
            return cli_usage("plan", "workload name %s (%s)", why, KACE_WORKLOAD_NAME_RULE);
    }

    kace_ctx *ctx = cli_ctx_new();
    kace_catalog cat = {0};
    const char **names = NULL;
    size_t n = 0;
    char *old = NULL, *text = NULL;
    size_t old_len = 0, len = 0;
    int rc = EXIT_OK;
    kace_status st = KACE_OK;
    if (catalog) {
        st = kace_catalog_load(ctx, &cat, catalog, NULL, 0);
        if (st == KACE_OK && cat.n == 0) {
            fprintf(stderr, "kace plan: %s: no workload in the catalog\n", catalog);
            rc = EXIT_FAILURE_RUN;
        }
        names = st == KACE_OK ? malloc((cat.n ? cat.n : 1) * sizeof *names) : NULL;
        if (st == KACE_OK && !names)
            st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
        for (size_t i = 0; names && i < cat.n; i++)
            names[n++] = cat.entries[i].name;
    } else {
        names = (const char **)(argv + optind);
        n = (size_t)n_args;
    }
    if (st == KACE_OK && rc == EXIT_OK && extend && !(old = read_text(extend, &old_len)))
        rc = EXIT_FAILURE_RUN;
    if (st == KACE_OK && rc == EXIT_OK)
        st = extend ? kace_plan_extend(ctx, old, old_len, extend, names, n, &text, &len)
                    : kace_plan_make(ctx, names, n, &text, &len);
    if (st != KACE_OK) {
        rc = cli_error(ctx, st);
    } else if (rc == EXIT_OK && (fwrite(text, 1, len, stdout) != len || fflush(stdout) != 0)) {
        fprintf(stderr, "kace plan: writing the plan: %s\n", strerror(errno));
        rc = EXIT_FAILURE_RUN;
    }
    free(text);
    free(old);
    if (catalog)
        free(names);
    kace_catalog_free(&cat);
    kace_ctx_free(&ctx);
    return rc;
}
