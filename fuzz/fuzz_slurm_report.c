/* libFuzzer harness for the Slurm throughput report (slurm/report.c, built
 * in here: the Slurm part of kace is not in the library).
 *
 * Checks, beyond the sanitizers: failure is KACE_ERR_PARSE with a message
 * starting with the origin; a parsed report has a job id > 0, a finite
 * throughput > 0 and a time in [0, 1e12), and formatting it again parses to
 * the same values. */
#include "fuzz_common.h"

#include "../slurm/report.c"

static const char origin[] = "fuzz/1.report";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_copy(data, size);
    if (!text)
        return 0;
    kace_ctx *ctx = kace_ctx_new();
    kace_slurm_report r, again;
    kace_status st = kace_slurm_report_parse(ctx, text, size, origin, &r);
    if (st) {
        FUZZ_CHECK(st == KACE_ERR_PARSE, "status %d", st);
        FUZZ_CHECK(strncmp(kace_errmsg(ctx), origin, strlen(origin)) == 0, "message '%s'", kace_errmsg(ctx));
    } else {
        FUZZ_CHECK(r.job > 0 && isfinite(r.throughput) && r.throughput > 0 && isfinite(r.time) && r.time >= 0,
                   "job %u throughput %g time %g", r.job, r.throughput, r.time);
        char buf[1024];
        FUZZ_CHECK(kace_slurm_report_format(buf, sizeof buf, &r), "format");
        FUZZ_CHECK(kace_slurm_report_parse(ctx, buf, strlen(buf), origin, &again) == KACE_OK, "reparse: %s",
                   kace_errmsg(ctx));
        FUZZ_CHECK(again.job == r.job && again.throughput == r.throughput &&
                       strcmp(again.workload, r.workload) == 0 && strcmp(again.node, r.node) == 0 &&
                       fabs(again.time - r.time) <= 1e-6 * (1 + r.time),
                   "round trip");
    }
    kace_ctx_free(&ctx);
    free(text);
    return 0;
}
