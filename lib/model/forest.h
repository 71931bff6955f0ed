/* The random forest on libxgboost (forest.c). Internal. */
#ifndef KACE_LIB_MODEL_FOREST_H
#define KACE_LIB_MODEL_FOREST_H

#include "model_internal.h"

kace_status kace_forest_predict_z(kace_ctx *ctx, const kace_model *m, const double *Z, size_t n, double *pred_z);
kace_status kace_forest_restore(kace_ctx *ctx, kace_model *m); /* validated trees from booster_json */
void kace_forest_release(kace_model *m);
/* Its part of the model object (restore, release, predict_z), for
 * kace_forest_ops (fit.c) and the slowdown model, which keeps its trees the
 * same way. */
extern const kace_model_ops kace_forest_model_ops;

#endif
