/* The QR least squares of lib/base/lstsq.c against LAPACKE_dgelsd (the solver
 * it stands in for): the same unknowns within 1e-12 relative on tall systems of
 * the paper models' shapes (11 unknowns, 11 to 300 rows, an intercept column,
 * correlated columns), A and b untouched; and refused (false) where dgelsd's
 * minimum-norm answer is the one to give: fewer rows than unknowns, a zero
 * column, two equal columns, a nearly dependent column, a value not finite. */
#include "testutil.h"

#include <lapacke.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/lstsq.h"

static unsigned long long rng_state = 88172645463325252ULL;

static double uniform(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 9007199254740992.0;
}

/* Column-major n x p: a column of ones, then columns mixing a few common
 * factors (correlated, as the performance counters are), z-scored-like. */
static void fill(double *A, double *b, size_t n, int p)
{
    for (size_t i = 0; i < n; i++) {
        double f1 = uniform() - 0.5, f2 = uniform() - 0.5;
        A[i] = 1.0;
        for (int j = 1; j < p; j++)
            A[(size_t)j * n + i] = (j % 3) * f1 + (j % 2) * f2 + 0.3 * (uniform() - 0.5);
        b[i] = 2 * f1 - f2 + 0.1 * (uniform() - 0.5);
    }
}

static double max_rel_diff(const double *x, const double *y, int p)
{
    double scale = 0, diff = 0;
    for (int j = 0; j < p; j++) {
        scale = fmax(scale, fabs(y[j]));
        diff = fmax(diff, fabs(x[j] - y[j]));
    }
    return diff / scale;
}

/* dgelsd's solution of the same system (it overwrites its inputs: copies). */
static void reference(const double *A, const double *b, size_t n, int p, double *x)
{
    size_t ldb = n > (size_t)p ? n : (size_t)p;
    double *a = malloc(n * (size_t)p * sizeof *a), *bb = calloc(ldb, sizeof *bb), s[KACE_LSTSQ_MAX_P];
    assert_non_null(a);
    assert_non_null(bb);
    memcpy(a, A, n * (size_t)p * sizeof *a);
    memcpy(bb, b, n * sizeof *bb);
    lapack_int rank = 0;
    assert_int_equal(LAPACKE_dgelsd(LAPACK_COL_MAJOR, (lapack_int)n, p, 1, a, (lapack_int)n, bb, (lapack_int)ldb, s,
                                    -1.0, &rank),
                     0);
    assert_int_equal(rank, p);
    memcpy(x, bb, (size_t)p * sizeof *x);
    free(a);
    free(bb);
}

static void test_same_as_dgelsd(void **state)
{
    (void)state;
    const int p = 11;
    const size_t sizes[] = {11, 12, 23, 52, 127, 140, 288, 300};
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        for (int rep = 0; rep < 5; rep++) {
            size_t n = sizes[k];
            double *A = malloc(n * (size_t)p * sizeof *A), *b = malloc(n * sizeof *b);
            assert_non_null(A);
            assert_non_null(b);
            fill(A, b, n, p);
            double *A0 = malloc(n * (size_t)p * sizeof *A0), *b0 = malloc(n * sizeof *b0);
            assert_non_null(A0);
            assert_non_null(b0);
            memcpy(A0, A, n * (size_t)p * sizeof *A);
            memcpy(b0, b, n * sizeof *b);
            double x[KACE_LSTSQ_MAX_P], want[KACE_LSTSQ_MAX_P];
            if (!kace_lstsq_qr(A, n, p, b, x))
                fail_msg("n=%zu rep %d: refused a well-conditioned system", n, rep);
            reference(A, b, n, p, want);
            double d = max_rel_diff(x, want, p);
            if (!(d < 1e-12))
                fail_msg("n=%zu rep %d: QR and dgelsd differ by %g relative", n, rep, d);
            assert_memory_equal(A, A0, n * (size_t)p * sizeof *A);
            assert_memory_equal(b, b0, n * sizeof *b);
            free(A);
            free(b);
            free(A0);
            free(b0);
        }
    }
}

static void test_refuses(void **state)
{
    (void)state;
    const int p = 11;
    size_t n = 60;
    double *A = malloc(n * (size_t)p * sizeof *A), *b = malloc(n * sizeof *b), x[KACE_LSTSQ_MAX_P];
    assert_non_null(A);
    assert_non_null(b);

    fill(A, b, n, p);
    assert_true(kace_lstsq_qr(A, n, p, b, x));
    assert_false(kace_lstsq_qr(A, (size_t)p - 1, p, b, x)); /* fewer rows than unknowns */
    assert_false(kace_lstsq_qr(A, n, KACE_LSTSQ_MAX_P + 1, b, x));

    fill(A, b, n, p);
    memset(A + 4 * n, 0, n * sizeof *A); /* a constant feature (x_std 0): a zero column */
    assert_false(kace_lstsq_qr(A, n, p, b, x));

    fill(A, b, n, p);
    memcpy(A + 7 * n, A + 2 * n, n * sizeof *A); /* two equal columns */
    assert_false(kace_lstsq_qr(A, n, p, b, x));

    fill(A, b, n, p);
    for (size_t i = 0; i < n; i++) /* nearly dependent: condition number ~1e8 */
        A[9 * n + i] = A[3 * n + i] + 1e-8 * (uniform() - 0.5);
    assert_false(kace_lstsq_qr(A, n, p, b, x));

    fill(A, b, n, p);
    A[5 * n + 17] = NAN;
    assert_false(kace_lstsq_qr(A, n, p, b, x));
    fill(A, b, n, p);
    b[3] = INFINITY;
    assert_false(kace_lstsq_qr(A, n, p, b, x));
    free(A);
    free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_as_dgelsd),
        cmocka_unit_test(test_refuses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
