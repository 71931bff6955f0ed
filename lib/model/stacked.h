/* The stacked model (stacked.c): the pressure and slowdown models fitted on
 * the same rows, each member's log throughput blended with a weight chosen
 * by leave-one-family-out inside the fitting rows. Internal. */
#ifndef KACE_LIB_MODEL_STACKED_H
#define KACE_LIB_MODEL_STACKED_H

#include "model_internal.h"

extern const kace_predictor_ops kace_stacked_ops;

/* Fits both parts on colocations rows[0..n) of ds (spec's slowdown
 * parameters and seed serve both) and chooses the blend's weight. */
kace_status kace_stacked_fit(kace_ctx *ctx, const kace_dataset *ds, const int *rows, size_t n,
                             const kace_fit_spec *spec, kace_model **out);

/* The pressure part's weight w in [0, 1] (the slowdown part's is 1 - w). */
double kace_stacked_weight(const kace_model *m);

#endif
