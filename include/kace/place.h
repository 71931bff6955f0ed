/* Placing a job on a shared GPU of a cluster: which GPU's residents make the
 * best predicted colocation with it, and which MPS share it gets there.
 *
 * This is the decision the Slurm job_submit plugin (slurm/) takes at every
 * submission, kept free of Slurm so that it is tested and benchmarked here.
 * Scores are fractions of exclusive throughput ("normalized throughput"):
 * placing workload W on a GPU whose residents are R gains
 *     sum over R+W of predicted fraction kept  -  same sum over R alone,
 * so an idle GPU gains 1 and a shared one less; the best gain wins. Every
 * throughput comes from a predictor that gives each member's throughput
 * (KACE_PRED_MEMBERS). kace_place_gain is the one placement scorer: the
 * Slurm placer (here), serve's /v1/place and the Kubernetes extender, and
 * the scheduler (kace_gain_of, on its table of fractions) all use it.
 */
#ifndef KACE_PLACE_H
#define KACE_PLACE_H

#include <stdbool.h>

#include "kace/dataset.h"
#include "kace/policy.h"
#include "kace/predictor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One shared GPU of the cluster as the placer sees it. */
typedef struct kace_place_gpu {
    char node[KACE_NAME_MAX]; /* Slurm node name */
    int share_free;           /* MPS percentage not yet given to jobs, 0..100 */
    bool usable;              /* false: node down, drained or otherwise not a choice */
    int n_residents;          /* jobs running on this GPU */
    int resident[KACE_MAX_K]; /* their workloads (indices into the dataset); -1 = unknown */
    /* Filled by kace_place_prepare: the residents' own predicted score, or
     * NaN when it cannot be predicted (unknown resident, missing profile). */
    double base_score;
    /* Filled by kace_place_cache_prepare (NULL otherwise): every workload's
     * gain on these residents, computed once, so that kace_place_job only
     * looks it up. Used only while it still matches resident[] and the
     * predictor and dataset the decision is given. */
    const struct kace_place_row *row;
} kace_place_gpu;

typedef struct kace_place_options {
    double knee;           /* a job's share: the smallest MPS % keeping this fraction
                              of its exclusive throughput (profile exclusive_mps10..100) */
    int default_share;     /* share when the workload has no exclusive-by-MPS profile */
    int min_share;         /* no GPU with less than this free is a choice */
    double min_confidence; /* shared placements predicted with less confidence are skipped */
    kace_objective objective; /* what a GPU's jobs are worth (kace_place_value); the gain is
                                 its change, under fair the smallest share left minus 1 */
} kace_place_options;

/* knee 0.9, default_share 50, min_share 10, min_confidence 0, objective
 * normalized (the summed shares this placer has always used). */
void kace_place_options_default(kace_place_options *opt);

/* The decision for one job. */
typedef struct kace_placement {
    int gpu;           /* index into the gpus given, -1 when none fits */
    int share;         /* MPS percentage for the job, a multiple of 10 */
    double gain;       /* predicted gain under the options' objective (normalized throughput) */
    double score;      /* predicted objective of the GPU with the job */
    double confidence; /* of that prediction, 0..1 */
    int n_considered;  /* GPUs that could be predicted and had room */
} kace_placement;

/* MPS share workload w asks for under opt (see kace_place_options). */
int kace_place_share(const kace_dataset *ds, int w, const kace_place_options *opt);

/* Each member's predicted fraction of its exclusive throughput (0 for a
 * member without a positive exclusive throughput) and the confidence; a
 * workload alone keeps fraction 1 (confidence 1) without asking the model. */
kace_status kace_place_fractions(kace_ctx *ctx, const kace_predictor *p, const kace_dataset *ds, const int *group,
                                 int k, double *fraction, double *confidence);

/* What adding a job to a GPU does, in normalized throughput. */
typedef struct kace_gain {
    double before;       /* the residents' fractions, summed (0 for an idle GPU) */
    double after;        /* the same with the job */
    double gain;         /* after - before */
    double job_fraction; /* the job's own fraction */
    double confidence;   /* of the prediction with the job; 1 on an idle GPU */
} kace_gain;

/* The arithmetic of the gain from the members' fractions: before[0..n_before)
 * (the residents), after[0..n_after) (residents and job). Sets before, after
 * and gain. */
void kace_gain_of(const double *before, int n_before, const double *after, int n_after, kace_gain *out);

/* The placement scorer: predicts the residents (unless known_before, their
 * summed fractions, is given) and the residents with job, then kace_gain_of.
 * Fails when job has no positive exclusive throughput or a prediction fails. */
kace_status kace_place_gain(kace_ctx *ctx, const kace_predictor *p, const kace_dataset *ds, const int *resident,
                            int n_resident, int job, const double *known_before, kace_gain *out);

/* What members group[0..k) running at fraction[0..k) of their exclusive
 * throughputs are worth under o: raw = the throughput sum (samples/s),
 * normalized = the summed fractions, fair = the smallest fraction (1 when
 * k = 0: nobody has lost anything). */
double kace_place_value(kace_objective o, const kace_dataset *ds, const int *group, int k, const double *fraction);

/* kace_place_gain under objective o: before and after are
 * kace_place_value of the residents and of the residents with the job; the
 * gain is after - before, and under fair after - 1 (max-min fairness
 * prefers the GPU that leaves the highest smallest share, whatever the
 * residents had before). job_fraction and confidence as kace_place_gain. */
kace_status kace_place_gain_by(kace_ctx *ctx, const kace_predictor *p, const kace_dataset *ds, const int *resident,
                               int n_resident, int job, kace_objective o, kace_gain *out);

/* Predicted normalized throughput (sum of each member's fraction of its
 * exclusive throughput) of a group of k workloads; 0 for k = 0 and 1 for a
 * workload alone (with confidence 1). */
kace_status kace_place_group_score(kace_ctx *ctx, const kace_predictor *p, const kace_dataset *ds, const int *group,
                                   int k, double *score, double *confidence);

/* Computes base_score of every GPU (once per cluster snapshot, so that a
 * decision costs one prediction per GPU) and sets row to NULL. */
void kace_place_prepare(kace_ctx *ctx, const kace_predictor *p, const kace_dataset *ds, kace_place_gpu *gpus,
                        size_t n_gpus);

/* Cached gains (for the Slurm placer, which takes many decisions on a
 * cluster that changes a few GPUs at a time). A row holds, for one ordered
 * list of residents, kace_place_gain of every workload of the dataset
 * against them: exactly the numbers kace_place_job would compute, so
 * decisions are the same with or without the cache. Rows are shared by
 * GPUs with the same residents and kept until a sweep drops them. Not
 * thread-safe; rows, once made, never change, so another thread may
 * decide on GPUs prepared earlier while one thread prepares or sweeps,
 * given a lock between the prepare and the decision (see slurm/). */
#define KACE_PLACE_CACHE 1 /* this API exists (bench/bench_place.c builds without it too) */
typedef struct kace_place_cache kace_place_cache;
typedef struct kace_place_row kace_place_row;

/* A cache for predictor p and dataset ds (both must outlive it). */
kace_status kace_place_cache_new(kace_ctx *ctx, const kace_predictor *p, const kace_dataset *ds,
                                 kace_place_cache **out);
void kace_place_cache_free(kace_place_cache **cache);

/* kace_place_prepare, and each GPU's row: found, or made (one prediction
 * per workload) when its residents are new to the cache. Call it again
 * for the GPUs whose residents change (jobs start and end). Fails only
 * when out of memory; GPUs then keep row NULL (decided without cache). */
kace_status kace_place_cache_prepare(kace_ctx *ctx, kace_place_cache *cache, kace_place_gpu *gpus, size_t n_gpus);

/* Frees the rows none of gpus[0..n_gpus) uses (after the cluster changed). */
void kace_place_cache_sweep(kace_place_cache *cache, const kace_place_gpu *gpus, size_t n_gpus);

/* Rows held; predictions made since the cache was created. */
size_t kace_place_cache_rows(const kace_place_cache *cache);
size_t kace_place_cache_predictions(const kace_place_cache *cache);

/* Chooses the GPU for workload w among gpus (prepared). Fails with
 * KACE_ERR_NOT_FOUND (out->gpu = -1, the reason in the message) when w is
 * not a usable workload of ds or when no GPU has room and a prediction; the
 * first best GPU wins ties. A GPU with a matching cached row costs a
 * look-up, any other one prediction. */
kace_status kace_place_job(kace_ctx *ctx, const kace_predictor *p, const kace_dataset *ds, const kace_place_gpu *gpus,
                           size_t n_gpus, int w, const kace_place_options *opt, kace_placement *out);

/* The record a placed job carries (in Slurm: the job's admin comment) so
 * that later decisions see what runs where: "kace:workload=NAME,share=N".
 * Formats into buf; false when it does not fit. */
bool kace_place_tag_format(char *buf, size_t size, const char *workload, int share);
/* Finds a tag anywhere in text (other comment words may surround it). True
 * when found and well formed; workload receives the name, share the share. */
bool kace_place_tag_parse(const char *text, char workload[KACE_NAME_MAX], int *share);

/* Count of generic resource name in a Slurm gres string such as
 * "gpu:1,mps:100" or "gpu:v100:2(S:0),shard:8"; 0 when absent. */
long kace_place_gres_count(const char *gres, const char *name);

/* The placer's configuration file (slurm/kace.conf), "key = value" lines,
 * '#' comments. */
typedef struct kace_place_config {
    char store[1024];      /* store with the workloads' profiles (required) */
    char model_file[1024]; /* model file; empty = model `model` of the store */
    char model[KACE_NAME_MAX];
    char gres[16];         /* "mps" or "shard": what kace asks Slurm for */
    int refresh_seconds;   /* how often the model and the cluster state are reloaded */
    int load_all_max;      /* a store of at most this many workloads is loaded whole; a
                              bigger one only for the workloads jobs name */
    kace_place_options options;
} kace_place_config;

/* Defaults: model "default", gres "mps", refresh 30 s, load_all_max 20000,
 * default options. */
void kace_place_config_default(kace_place_config *cfg);
/* Parses text (len bytes, origin names it in messages) over cfg. Unknown
 * keys, bad numbers and values out of range fail with KACE_ERR_PARSE
 * naming origin:line:column. */
kace_status kace_place_config_parse(kace_ctx *ctx, const char *text, size_t len, const char *origin,
                                    kace_place_config *cfg);
/* Reads and parses a file (KACE_ERR_IO when it cannot be read). */
kace_status kace_place_config_load(kace_ctx *ctx, const char *path, kace_place_config *cfg);

#ifdef __cplusplus
}
#endif

#endif
