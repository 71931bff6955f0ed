/* libFuzzer harness for the trace parsers (lib/data/trace.c): the input is read
 * as a pod list and as a node list.
 *
 * Checks, beyond the sanitizers:
 *  - a failure leaves no result and a message "<origin>:<line>:<col>: ..."
 *    (fuzz_check_failure);
 *  - a success keeps every data row: the number of jobs (nodes) equals the
 *    number of records after the header; jobs have arrival >= 0, work >= 1,
 *    num_gpu 0..64, gpu_milli 0..1000 (0 exactly for CPU-only pods, 1000 for
 *    gangs), a known QoS, and lines that increase. */
#include <math.h>

#include "base/csv.h"
#include "fuzz_common.h"
#include "kace/trace.h"

static const char origin[] = "fuzz/trace.csv";

/* Records after the header, counted with the project's CSV reader. */
static size_t count_records(kace_ctx *ctx, const char *data, size_t size)
{
    kace_csv csv;
    kace_csv_init(&csv, data, size, origin);
    bool has = false;
    size_t n = 0;
    while (kace_csv_next(ctx, &csv, &has) == KACE_OK && has)
        n++;
    kace_csv_release(&csv);
    return n ? n - 1 : 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    kace_ctx *ctx = kace_ctx_new();
    char *copy = fuzz_copy(data, size);
    if (!ctx || !copy) {
        kace_ctx_free(&ctx);
        free(copy);
        return 0;
    }
    kace_trace *t = NULL;
    kace_status st = kace_trace_parse(ctx, copy, size, origin, &t);
    if (st != KACE_OK) {
        FUZZ_CHECK(t == NULL, "failed parse returned a trace");
        fuzz_check_failure(ctx, st, origin);
    } else {
        size_t records = count_records(ctx, copy, size);
        FUZZ_CHECK(t->n_jobs == records, "%zu records parsed into %zu jobs", records, t->n_jobs);
        size_t gpu_jobs = 0;
        int last_line = 1;
        for (size_t i = 0; i < t->n_jobs; i++) {
            const kace_trace_job *j = &t->jobs[i];
            FUZZ_CHECK(j->arrival >= 0 && isfinite(j->arrival), "arrival %g", j->arrival);
            FUZZ_CHECK(j->work >= 1 && isfinite(j->work), "work %g", j->work);
            FUZZ_CHECK(j->num_gpu >= 0 && j->num_gpu <= KACE_TRACE_MAX_GPUS_PER_JOB, "num_gpu %d", j->num_gpu);
            FUZZ_CHECK(j->gpu_milli >= 0 && j->gpu_milli <= 1000, "gpu_milli %d", j->gpu_milli);
            FUZZ_CHECK((j->num_gpu == 0) == (j->gpu_milli == 0), "num_gpu %d with gpu_milli %d", j->num_gpu,
                       j->gpu_milli);
            FUZZ_CHECK(j->num_gpu <= 1 || j->gpu_milli == 1000, "gang with gpu_milli %d", j->gpu_milli);
            FUZZ_CHECK((unsigned)j->qos < KACE_N_QOS, "qos %d", (int)j->qos);
            FUZZ_CHECK(j->line > last_line, "line %d after %d", j->line, last_line);
            FUZZ_CHECK(fuzz_is_name(j->name, sizeof j->name), "job name");
            last_line = j->line;
            gpu_jobs += j->num_gpu > 0;
        }
        FUZZ_CHECK(gpu_jobs == t->n_gpu_jobs, "%zu GPU jobs counted as %zu", gpu_jobs, t->n_gpu_jobs);
    }
    kace_trace_free(&t);

    kace_node_list *nl = NULL;
    st = kace_node_list_parse(ctx, copy, size, origin, &nl);
    if (st != KACE_OK) {
        FUZZ_CHECK(nl == NULL, "failed parse returned a node list");
        fuzz_check_failure(ctx, st, origin);
    } else {
        size_t records = count_records(ctx, copy, size), gpus = 0;
        FUZZ_CHECK(nl->n_nodes == records, "%zu records parsed into %zu nodes", records, nl->n_nodes);
        for (size_t i = 0; i < nl->n_nodes; i++) {
            FUZZ_CHECK(nl->nodes[i].n_gpus >= 0 && nl->nodes[i].n_gpus <= KACE_TRACE_MAX_GPUS_PER_JOB, "gpus");
            gpus += (size_t)nl->nodes[i].n_gpus;
        }
        FUZZ_CHECK(gpus == nl->n_gpus && gpus > 0, "GPU total %zu vs %zu", gpus, nl->n_gpus);
    }
    kace_node_list_free(&nl);
    free(copy);
    kace_ctx_free(&ctx);
    return 0;
}
