/* What kace reads and writes as text around Slurm, free of Slurm so that
 * it is fuzzed (fuzz/fuzz_slurm_text.c): a job's throughput report, the
 * pick word of a placed job's admin comment and --constraint expressions.
 *
 * A job's own report of the throughput it achieves, the channel kace owns
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
 */
#ifndef KACE_SLURM_TEXT_H
#define KACE_SLURM_TEXT_H

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

#define KACE_SLURM_PICK_MAX 32

/* The second word kace writes into a placed job's admin comment:
 * "kace:node=NODE,pick=TOKEN" (its preferred node and the token that
 * confirms the placement). Formats into buf; false when it does not fit. */
bool kace_slurm_pick_format(char *buf, size_t size, const char *node, const char *pick);
/* Finds that word in text; node and pick receive its fields. */
bool kace_slurm_pick_parse(const char *text, char node[KACE_NAME_MAX], char pick[KACE_SLURM_PICK_MAX]);

/* The third word kace writes into the admin comment of a job it placed on
 * a node with several GPUs: "kace:gpu=N", the index of the node's GPU it
 * chose. Formats into buf (false when it does not fit); the parser
 * answers N, or -1 when text has no such word. */
bool kace_slurm_gpu_format(char *buf, size_t size, int gpu);
int kace_slurm_gpu_parse(const char *text);

/* The GPU indices a running job holds of generic resource name, from its
 * Slurm gres detail ("gpu:2(IDX:0-1)", "shard:g1:2(IDX:1)", items joined
 * by ','): bit i set for GPU i (indices 0..63); 0 when name is absent or
 * carries no index. */
uint64_t kace_slurm_gres_indices(const char *detail, const char *name);

/* Whether item (len bytes) is one of a comma-separated list's items. */
bool kace_slurm_in_list(const char *list, const char *item, size_t len);

/* Evaluates a --constraint expression against a node's features ("a,b").
 * kace understands feature names joined by '&' or ',' (all of them) or by
 * '|' (any of them). 1: the node satisfies it, 0: it does not, -1: kace
 * cannot evaluate it (brackets, counts, parentheses, '!', mixed operators). */
int kace_slurm_constraint_matches(const char *expr, const char *features);

#endif
