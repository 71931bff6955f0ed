/* libxgboost (with libgomp, libdmlc and libstdc++), loaded when a random forest
 * is fitted or used (include/kace/dynlib.h): Xu et al.'s baseline in kace eval,
 * kace train --kind forest, and forest models. */
#include <xgboost/c_api.h>

#include "kace/dynlib.h"
#include "kace_sonames.h"

#define FUNCTIONS(X)                                                                                               \
    X(int, XGDMatrixCreateFromMat,                                                                                 \
      (const float *data, bst_ulong nrow, bst_ulong ncol, float missing, DMatrixHandle *out),                      \
      (data, nrow, ncol, missing, out), -1)                                                                        \
    X(int, XGDMatrixSetFloatInfo, (DMatrixHandle handle, const char *field, const float *array, bst_ulong len),    \
      (handle, field, array, len), -1)                                                                             \
    X(int, XGDMatrixFree, (DMatrixHandle handle), (handle), -1)                                                    \
    X(int, XGBoosterCreate, (const DMatrixHandle dmats[], bst_ulong len, BoosterHandle *out), (dmats, len, out),   \
      -1)                                                                                                          \
    X(int, XGBoosterSetParam, (BoosterHandle handle, const char *name, const char *value), (handle, name, value),  \
      -1)                                                                                                          \
    X(int, XGBoosterUpdateOneIter, (BoosterHandle handle, int iter, DMatrixHandle dtrain), (handle, iter, dtrain), \
      -1)                                                                                                          \
    X(int, XGBoosterPredictFromDMatrix,                                                                            \
      (BoosterHandle handle, DMatrixHandle dmat, char const *config, bst_ulong const **out_shape,                  \
       bst_ulong *out_dim, float const **out_result),                                                              \
      (handle, dmat, config, out_shape, out_dim, out_result), -1)                                                  \
    X(int, XGBoosterSaveModelToBuffer,                                                                             \
      (BoosterHandle handle, char const *config, bst_ulong *out_len, char const **out_dptr),                       \
      (handle, config, out_len, out_dptr), -1)                                                                     \
    X(int, XGBoosterFree, (BoosterHandle handle), (handle), -1)                                                    \
    X(const char *, XGBGetLastError, (void), (), dl_lib.error)

#ifdef KACE_DYNLIB_PROBE
void (*const kace_probe_xgboost[])(void) = {FUNCTIONS(KACE_DL_ADDRESS) NULL};
#else
enum { FUNCTIONS(KACE_DL_INDEX) N_FUNCTIONS };
static const char *const dl_names[] = {FUNCTIONS(KACE_DL_NAME)};
static void *dl_fns[N_FUNCTIONS];
static kace_dynlib dl_lib = {
    .soname = KACE_SONAME_XGBOOST,
    .env = "KACE_XGBOOST_LIBRARY",
    .package = "libxgboost0",
    .needed_by = "the random forest (kace eval's Xu et al. baseline, kace train --kind forest, forest models)",
    .names = dl_names,
    .fns = dl_fns,
    .n = N_FUNCTIONS,
};
FUNCTIONS(KACE_DL_FORWARD)
#endif
