/* kace_metric_is_percent's table against its definition: a metric is
 * aggregated by mean exactly when its canonical name holds '%' (the paper's
 * rule); every known metric, and out-of-range values (false). */
#include "testutil.h"

#include <string.h>

#include "kace/dataset.h"

static void test_percent_is_the_name(void **state)
{
    (void)state;
    int n_percent = 0;
    for (int m = 0; m < KACE_N_METRICS; m++) {
        bool by_name = strchr(kace_metric_name((kace_metric)m), '%') != NULL;
        if (kace_metric_is_percent((kace_metric)m) != by_name)
            fail_msg("metric %d (%s): is_percent %d, name says %d", m, kace_metric_name((kace_metric)m),
                     kace_metric_is_percent((kace_metric)m), by_name);
        n_percent += by_name;
    }
    assert_int_equal(n_percent, 4); /* sm%, mem%, CPU%, MainMem% */
    assert_false(kace_metric_is_percent((kace_metric)-1));
    assert_false(kace_metric_is_percent((kace_metric)KACE_N_METRICS));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_percent_is_the_name),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
