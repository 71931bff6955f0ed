/* A Slurm site's job history: the output of
 *
 *   sacct -a -X --parsable2 --noconvert --starttime=... --endtime=... \
 *         --format=JobID,JobName,User,Account,Partition,Submit,Start,End,Elapsed,AllocTRES,NodeList,State,Comment,AdminComment
 *
 * parsed for `kace simulate --sacct` (docs/slurm.md "What-if on a site's own
 * history"), and the mapping of its jobs to stored workloads.
 *
 * The first line names the columns, '|' between them (--parsable2: no
 * trailing '|', no quoting). Required: JobID, JobName, Submit, Start, End,
 * AllocTRES, NodeList, State. Optional: User, Account, Partition, Elapsed,
 * Comment, AdminComment, WCKey, ReqTRES, NNodes. Any other column is an
 * error (a renamed column would otherwise be read as missing). Every field is
 * checked: job ids (123, 123_4, 123+0; a step such as 123.batch is refused:
 * run sacct with -X), times (YYYY-MM-DDTHH:MM:SS, or Unknown/None where a job
 * never started or ended), Elapsed ([D-]HH:MM:SS), TRES lists (key=count,
 * memory with a K/M/G/T suffix; GPUs from gres/gpu, GPU shares from
 * gres/mps and gres/shard), host lists (n[1-3,5],m2 or "None assigned"),
 * states (COMPLETED, CANCELLED by UID, ...). Every error names
 * origin:line:column and what was expected; a parse returns every row or
 * fails.
 */
#ifndef KACE_SACCT_H
#define KACE_SACCT_H

#include <stdbool.h>
#include <stddef.h>

#include "kace/kace.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KACE_SACCT_TEXT_MAX 128 /* longest JobName, User, Comment, ... kept (longer: an error) */
#define KACE_SACCT_MAX_NODES 4096 /* distinct nodes of one file */
#define KACE_SACCT_MAX_GPUS 1024  /* GPUs of one job */

typedef struct kace_sacct_job {
    char job_id[32];
    char name[KACE_SACCT_TEXT_MAX];
    char user[KACE_SACCT_TEXT_MAX];        /* "" when the column is absent */
    char account[KACE_SACCT_TEXT_MAX];
    char partition[KACE_SACCT_TEXT_MAX];
    char comment[KACE_SACCT_TEXT_MAX];
    char admin_comment[KACE_SACCT_TEXT_MAX];
    char wckey[KACE_SACCT_TEXT_MAX];
    char state[32];    /* the base state: "COMPLETED", "CANCELLED" (without "by UID"), ... */
    /* Seconds since 1970-01-01 reading the times as UTC (sacct prints the
     * site's local time without a zone: only differences are used). */
    double submit;
    double start, end; /* valid when ran */
    bool ran;          /* Start and End are times: the job held its allocation for end - start */
    int gpus;          /* whole GPUs allocated (AllocTRES gres/gpu), 0 = none */
    int gpu_shares;    /* gres/mps + gres/shard allocated (a share of one GPU per node), 0 = none */
    int n_nodes;       /* nodes of NodeList (0: "None assigned") */
    int first_node;    /* index of its first node in kace_sacct.nodes (-1 when none) */
    int line;          /* source line */
} kace_sacct_job;

typedef struct kace_sacct {
    kace_sacct_job *jobs; /* in file order */
    size_t n_jobs;
    /* The distinct nodes of every NodeList, in order of appearance, and the
     * most GPUs one job held on each (a job's GPUs / its nodes; 1 for a job
     * with a GPU share). */
    char (*nodes)[64];
    int *node_gpus;
    size_t n_nodes;
} kace_sacct;

/* Parses sacct --parsable2 output held in memory; origin names it in messages. */
kace_status kace_sacct_parse(kace_ctx *ctx, const char *data, size_t len, const char *origin, kace_sacct **out);
kace_status kace_sacct_load(kace_ctx *ctx, const char *path, kace_sacct **out);
void kace_sacct_free(kace_sacct **s);

/* ---- which stored workload a job ran: the mapping file ----
 *
 * One rule per line, first match wins; '#' starts a comment:
 *
 *   FIELD  PATTERN  WORKLOAD
 *
 * FIELD is name, user, account, partition, comment, admincomment or wckey;
 * PATTERN a shell glob (fnmatch: * ? [..]) matched against that field;
 * WORKLOAD a stored workload's name, or '-' for "no workload: replay it
 * exclusive". The fallbacks when no rule matches (kace's placement tag in
 * AdminComment, then the JobName) are kace_sim_jobs_from_sacct's
 * (include/kace/sim.h). */
typedef struct kace_sacct_map kace_sacct_map;

kace_status kace_sacct_map_parse(kace_ctx *ctx, const char *data, size_t len, const char *origin,
                                 kace_sacct_map **out);
kace_status kace_sacct_map_load(kace_ctx *ctx, const char *path, kace_sacct_map **out);
void kace_sacct_map_free(kace_sacct_map **m);
size_t kace_sacct_map_n_rules(const kace_sacct_map *m);
/* The workload of rule i ("-" for none) and its source line. */
const char *kace_sacct_map_rule(const kace_sacct_map *m, size_t i, int *line);
/* The first rule of m that matches job j, or -1 (also when m is NULL). */
int kace_sacct_map_match(const kace_sacct_map *m, const kace_sacct_job *j);

#ifdef __cplusplus
}
#endif

#endif
