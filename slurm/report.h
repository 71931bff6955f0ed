/* A job's own report of the throughput it achieves, the channel kace owns
 * for observed throughput (not the job's comment): `kace slurm report`
 * writes one file per job into a spool directory on the node
 * (<dir>/<job>.report, replaced at each report), `kace slurm status` reads
 * them and stores them as observations. The text is "key = value" lines,
 * '#' comments:
 *
 *     job = 1234                 the Slurm job id (required)
 *     throughput = 12.5          samples/s, finite and > 0 (required)
 *     time = 1732440000.25       unix seconds of the report, 0..1e12 (required)
 *     workload = NAME            as the job named it (optional)
 *     node = NAME                where it ran (optional)
 *
 * Free of Slurm, so that it is fuzzed (fuzz/fuzz_slurm_report.c). */
#ifndef KACE_SLURM_REPORT_H
#define KACE_SLURM_REPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kace/dataset.h"

typedef struct kace_slurm_report {
    uint32_t job;
    double throughput;
    double time;
    char workload[KACE_NAME_MAX]; /* "" when absent */
    char node[KACE_NAME_MAX];     /* "" when absent */
} kace_slurm_report;

/* Formats r; false when it does not fit. */
bool kace_slurm_report_format(char *buf, size_t size, const kace_slurm_report *r);

/* Parses text (len bytes). KACE_ERR_PARSE naming origin:line:column and
 * what was expected: unknown or repeated keys, bad numbers, a missing
 * required key. */
kace_status kace_slurm_report_parse(kace_ctx *ctx, const char *text, size_t len, const char *origin,
                                    kace_slurm_report *out);

#endif
