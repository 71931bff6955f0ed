/* libFuzzer harness for what kace reads as text around Slurm (slurm/text.c,
 * built in here: the Slurm part of kace is not in the library): a job's
 * throughput report, the pick word of an admin comment and --constraint
 * expressions (user input that job_submit/kace evaluates inside slurmctld).
 *
 * Checks, beyond the sanitizers:
 *  - report: failure is KACE_ERR_PARSE with a message starting with the
 *    origin; a parsed report has a job id > 0, a finite throughput > 0 and a
 *    time in [0, 1e12), and formatting it again parses to the same values;
 *  - pick: a parsed word has a node and token without spaces, and
 *    formatting it again parses to the same;
 *  - gpu word: -1 or an index that formats and parses back the same; gres
 *    detail indices: no crash;
 *  - constraint: the answer is -1, 0 or 1; a node with no features never
 *    satisfies an expression kace can evaluate unless it is empty. */
#include "fuzz_common.h"

#include "../slurm/text.c"

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
        FUZZ_CHECK(r.job > 0 && isfinite(r.throughput) && r.throughput > 0 && isfinite(r.time) && r.time >= 0 &&
                       r.time < 1e12,
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

    /* The same bytes as a NUL-terminated comment and constraint. */
    char *str = malloc(size + 1);
    if (str) {
        memcpy(str, data, size);
        str[size] = '\0';
        char node[KACE_NAME_MAX], pick[KACE_SLURM_PICK_MAX], node2[KACE_NAME_MAX], pick2[KACE_SLURM_PICK_MAX];
        char word[KACE_NAME_MAX + KACE_SLURM_PICK_MAX + 32];
        if (kace_slurm_pick_parse(str, node, pick)) {
            FUZZ_CHECK(node[0] && pick[0], "empty field");
            for (const char *p = node; *p; p++)
                FUZZ_CHECK(!isspace((unsigned char)*p) && *p != ',', "node '%s'", node);
            FUZZ_CHECK(kace_slurm_pick_format(word, sizeof word, node, pick), "format");
            FUZZ_CHECK(kace_slurm_pick_parse(word, node2, pick2) && strcmp(node, node2) == 0 &&
                           strcmp(pick, pick2) == 0,
                       "round trip '%s'", word);
        }
        int gpu = kace_slurm_gpu_parse(str);
        FUZZ_CHECK(gpu >= -1 && gpu < 10000, "gpu %d", gpu);
        if (gpu >= 0) {
            char gpu_word[32];
            FUZZ_CHECK(kace_slurm_gpu_format(gpu_word, sizeof gpu_word, gpu) && kace_slurm_gpu_parse(gpu_word) == gpu,
                       "gpu round trip %d", gpu);
        }
        /* Any mask is an answer; this must only not crash or loop. */
        (void)kace_slurm_gres_indices(str, "shard");
        (void)kace_slurm_gres_indices(str, "gpu");
        int m = kace_slurm_constraint_matches(str, "a,b,kace_n1");
        FUZZ_CHECK(m >= -1 && m <= 1, "answer %d", m);
        int none = kace_slurm_constraint_matches(str, NULL);
        FUZZ_CHECK(none == -1 || str[0] == '\0' || none == 0, "'%s' matches a node without features", str);
        free(str);
    }
    kace_ctx_free(&ctx);
    free(text);
    return 0;
}
