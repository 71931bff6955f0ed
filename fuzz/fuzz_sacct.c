/* libFuzzer harness for the sacct parsers (lib/data/sacct.c): the input is
 * read as `sacct --parsable2` output and as a job-to-workload mapping file.
 *
 * Checks, beyond the sanitizers:
 *  - a failure leaves no result and a message "<origin>:<line>:<col>: ..."
 *    (fuzz_check_failure);
 *  - a success keeps every data row (jobs = lines after the header), each
 *    job's line increases, a job that ran has start >= submit and end >=
 *    start and at least one node, GPUs split evenly over its nodes, node
 *    indices are in range and every node's GPU count is at most the largest
 *    job's (1 for a job on a GPU share);
 *  - a parsed map answers kace_sacct_map_match with -1 or a rule index. */
#include <math.h>

#include "fuzz_common.h"
#include "kace/sacct.h"

static const char origin[] = "fuzz/jobs.sacct";

static size_t count_lines(const char *data, size_t size)
{
    size_t n = 0;
    for (size_t i = 0; i < size; i++)
        n += data[i] == '\n';
    return n;
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
    kace_sacct *s = NULL;
    kace_status st = kace_sacct_parse(ctx, copy, size, origin, &s);
    if (st != KACE_OK) {
        FUZZ_CHECK(s == NULL, "failed parse returned jobs");
        fuzz_check_failure(ctx, st, origin);
    } else {
        size_t skip = size >= 3 && memcmp(copy, "\xEF\xBB\xBF", 3) == 0 ? 3 : 0;
        size_t lines = count_lines(copy + skip, size - skip);
        FUZZ_CHECK(s->n_jobs + 1 == lines, "%zu lines parsed into %zu jobs", lines, s->n_jobs);
        int last = 1, max_gpus = 0;
        for (size_t i = 0; i < s->n_jobs; i++) {
            const kace_sacct_job *j = &s->jobs[i];
            FUZZ_CHECK(j->line > last, "line %d after %d", j->line, last);
            last = j->line;
            FUZZ_CHECK(isfinite(j->submit) && j->submit >= 0, "submit %g", j->submit);
            FUZZ_CHECK(j->gpus >= 0 && j->gpus <= KACE_SACCT_MAX_GPUS, "gpus %d", j->gpus);
            FUZZ_CHECK(j->n_nodes >= 0 && j->n_nodes <= KACE_SACCT_MAX_NODES, "nodes %d", j->n_nodes);
            FUZZ_CHECK((j->n_nodes == 0) == (j->first_node < 0), "first node %d of %d", j->first_node, j->n_nodes);
            FUZZ_CHECK(j->first_node < (int)s->n_nodes, "first node %d of %zu", j->first_node, s->n_nodes);
            FUZZ_CHECK(fuzz_is_name(j->job_id, sizeof j->job_id), "job id");
            FUZZ_CHECK(fuzz_is_name(j->state, sizeof j->state), "state");
            if (j->ran) {
                FUZZ_CHECK(j->start >= j->submit && j->end >= j->start, "times %g %g %g", j->submit, j->start, j->end);
                FUZZ_CHECK(j->n_nodes > 0, "ran on no node");
            }
            FUZZ_CHECK(j->gpu_shares >= 0, "gpu shares %d", j->gpu_shares);
            if (j->gpus > 0 && j->n_nodes > 0) {
                FUZZ_CHECK(j->gpus % j->n_nodes == 0, "%d GPUs on %d nodes", j->gpus, j->n_nodes);
                if (j->gpus / j->n_nodes > max_gpus)
                    max_gpus = j->gpus / j->n_nodes;
            } else if (j->gpu_shares > 0 && j->n_nodes > 0 && max_gpus < 1) {
                max_gpus = 1; /* a share of one GPU */
            }
        }
        for (size_t i = 0; i < s->n_nodes; i++) {
            FUZZ_CHECK(s->node_gpus[i] >= 0 && s->node_gpus[i] <= max_gpus, "node gpus %d (max %d)", s->node_gpus[i],
                       max_gpus);
            FUZZ_CHECK(fuzz_is_name(s->nodes[i], sizeof s->nodes[i]), "node name");
        }
    }

    kace_sacct_map *m = NULL;
    st = kace_sacct_map_parse(ctx, copy, size, origin, &m);
    if (st != KACE_OK) {
        FUZZ_CHECK(m == NULL, "failed parse returned a map");
        fuzz_check_failure(ctx, st, origin);
    } else {
        for (size_t i = 0; s && i < s->n_jobs; i++) {
            int r = kace_sacct_map_match(m, &s->jobs[i]);
            FUZZ_CHECK(r >= -1 && r < (int)kace_sacct_map_n_rules(m), "rule %d", r);
        }
        for (size_t i = 0; i < kace_sacct_map_n_rules(m); i++) {
            int line = 0;
            const char *w = kace_sacct_map_rule(m, i, &line);
            FUZZ_CHECK(w && w[0] && line >= 1, "rule %zu", i);
        }
    }
    kace_sacct_map_free(&m);
    kace_sacct_free(&s);
    free(copy);
    kace_ctx_free(&ctx);
    return 0;
}
