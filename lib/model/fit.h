/* The predictor tables of the models on summed features (fit.c). Internal. */
#ifndef KACE_LIB_MODEL_FIT_H
#define KACE_LIB_MODEL_FIT_H

#include "kace/predictor.h"

extern const kace_predictor_ops kace_linear_ops, kace_forest_ops;

#endif
