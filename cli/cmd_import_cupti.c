/* kace import-cupti --workload W FILE
 *
 * Stores the kernel metrics of a recording that libkace_cupti.so wrote
 * outside `kace profile`: a Slurm task run with --kace-profile (the SPANK
 * plugin points CUDA_INJECTION64_PATH and KACE_CUPTI_OUTPUT at it), or any
 * program started by hand with those two variables. There is no steady
 * window here (no progress records), so every kernel of the recording counts;
 * exclusive throughput and the NVML metrics are not part of a recording. */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "kace/kernels.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: kace import-cupti --workload W [--db PATH] [--gpu MODEL] [--date YYYY-MM-DD] FILE\n"
               "Stores the six kernel metrics (and Xu et al.'s kernel-length metrics) of a kernel recording\n"
               "written by libkace_cupti.so (CUDA_INJECTION64_PATH + KACE_CUPTI_OUTPUT, e.g. by the Slurm\n"
               "plugin's --kace-profile) as workload W's kernel profile, in one transaction. All kernels of the\n"
               "recording count (no warm-up is dropped); exclusive throughput, sm%%, mem%% and memcap need\n"
               "`kace profile`.\n");
}

int cmd_import_cupti(int argc, char **argv)
{
    const char *db = cli_default_db(), *workload = NULL;
    kace_source src = {NULL, "kace-cupti", NULL};
    static const struct option longopts[] = {{"workload", required_argument, 0, 'w'}, {"db", required_argument, 0, 'd'},
                                             {"gpu", required_argument, 0, 'g'},      {"date", required_argument, 0, 'D'},
                                             {"help", no_argument, 0, 'h'},           {0, 0, 0, 0}};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "w:d:g:D:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'w': workload = optarg; break;
        case 'd': db = optarg; break;
        case 'g': src.gpu = optarg; break;
        case 'D': src.date = optarg; break;
        case 'h': usage(stdout); return EXIT_OK;
        default: return cli_usage("import-cupti", "unknown option");
        }
    }
    if (!workload || !*workload || strlen(workload) >= KACE_NAME_MAX)
        return cli_usage("import-cupti", "--workload W is required (at most %d bytes)", KACE_NAME_MAX - 1);
    if (optind != argc - 1)
        return cli_usage("import-cupti", "give exactly one recording file");
    const char *path = argv[optind];

    kace_ctx *ctx = cli_ctx_new();
    if (!ctx)
        return EXIT_FAILURE_RUN;
    int rc = EXIT_FAILURE_RUN;
    kace_kernel_recording *rec = NULL;
    kace_import_batch *batch = NULL;
    kace_store *store = NULL;
    kace_status st;
    kace_kernel_info info;
    kace_kernel_summary ks;
    if ((st = kace_kernels_parse_file(ctx, path, &rec))) {
        rc = cli_error(ctx, st);
        goto done;
    }
    kace_kernels_info(rec, &info);
    if ((st = kace_kernels_reduce(ctx, rec, 0, 0, &ks))) {
        fprintf(stderr, "kace import-cupti: %s: %s%s%s; nothing was stored\n", path, kace_errmsg(ctx),
                info.n_errors ? "; the CUPTI library reported: " : "", info.first_error);
        goto done;
    }
    if (info.n_errors)
        fprintf(stderr, "kace import-cupti: warning: the CUPTI library reported %zu error(s), the first: %s\n",
                info.n_errors, info.first_error);
    if (info.n_skipped)
        fprintf(stderr, "kace import-cupti: warning: %zu record(s) with unusable values were left out, the first: %s\n",
                info.n_skipped, info.first_skipped);
    if (!src.gpu && info.device[0])
        src.gpu = info.device;
    if ((st = kace_profile_batch_new(ctx, path, &batch)) ||
        (st = kace_profile_batch_add_kernels(ctx, batch, workload, &ks))) {
        rc = cli_error(ctx, st);
        goto done;
    }
    if (!(store = cli_create_store(ctx, db, false)))
        goto done;
    kace_import_stats stats;
    if ((st = kace_store_import(ctx, store, batch, &src, &stats))) {
        rc = cli_error(ctx, st);
        goto done;
    }
    printf("%s: %zu kernels (%zu with counters, %.0f%% of kernel time) from %s; values +%zu ~%zu =%zu\n", workload,
           ks.n_kernels, ks.n_with_counters, 100 * ks.counter_time_share, path, stats.values_added,
           stats.values_updated, stats.values_unchanged);
    rc = EXIT_OK;
done:
    kace_store_close(&store);
    kace_import_batch_free(&batch);
    kace_kernels_free(&rec);
    kace_ctx_free(&ctx);
    return rc;
}
