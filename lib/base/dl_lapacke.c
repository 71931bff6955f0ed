/* LAPACKE (and the BLAS under it), loaded on the first fit (include/kace/dynlib.h).
 * kace calls two routines; with OpenBLAS the library would otherwise be loaded,
 * relocated and start its thread pool in every command, predictions included. */
#include <lapacke.h>

#include "kace/dynlib.h"
#include "kace_sonames.h"

/* A negative info is "argument -info was illegal" to LAPACKE's callers; this one is
 * out of range for both routines, and kace_dynlib_failure() says what happened. */
#define NOT_LOADED ((lapack_int)-1000)

#define FUNCTIONS(X)                                                                                                \
    X(lapack_int, LAPACKE_dgelsd,                                                                                   \
      (int layout, lapack_int m, lapack_int n, lapack_int nrhs, double *a, lapack_int lda, double *b,              \
       lapack_int ldb, double *s, double rcond, lapack_int *rank),                                                  \
      (layout, m, n, nrhs, a, lda, b, ldb, s, rcond, rank), NOT_LOADED)                                             \
    X(lapack_int, LAPACKE_dposv,                                                                                    \
      (int layout, char uplo, lapack_int n, lapack_int nrhs, double *a, lapack_int lda, double *b, lapack_int ldb), \
      (layout, uplo, n, nrhs, a, lda, b, ldb), NOT_LOADED)

#ifdef KACE_DYNLIB_PROBE
void (*const kace_probe_lapacke[])(void) = {FUNCTIONS(KACE_DL_ADDRESS) NULL};
#else
enum { FUNCTIONS(KACE_DL_INDEX) N_FUNCTIONS };
static const char *const dl_names[] = {FUNCTIONS(KACE_DL_NAME)};
static void *dl_fns[N_FUNCTIONS];
static kace_dynlib dl_lib = {
    .soname = KACE_SONAME_LAPACKE,
    .env = "KACE_LAPACKE_LIBRARY",
    .package = "liblapacke",
    .needed_by = "fitting a model (kace train, eval, demo, learn; serve's retraining)",
    /* OpenBLAS starts a thread per core when it loads, and they spin while the process
     * lives; kace's systems are far below the size OpenBLAS would split over threads. */
    .load_env = "OPENBLAS_NUM_THREADS=1",
    .names = dl_names,
    .fns = dl_fns,
    .n = N_FUNCTIONS,
};
FUNCTIONS(KACE_DL_FORWARD)
#endif
