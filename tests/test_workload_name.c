/* The workload name rule (include/kace/workload_name.h): what it accepts,
 * where and why it refuses, and that its messages stay printable whatever
 * the name held. */
#include "testutil.h"

#include <stdio.h>
#include <string.h>

#include "kace/workload_name.h"

static void test_accepts_the_reference_names(void **state)
{
    (void)state;
    static const char *const good[] = {"bert-base-cased_batch8-train", "cuda-gemm2048_batch1-inf",
                                       "whisper-large-v2_batch16-inf", "albert-base-v2_batch2-train",
                                       "a", "_private", "9lives", "v1.2_batch4-inf"};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++)
        if (!kace_workload_name_ok(good[i], NULL, NULL, 0))
            fail_msg("'%s' refused", good[i]);
    char longest[KACE_WORKLOAD_NAME_MAX + 2];
    memset(longest, 'a', KACE_WORKLOAD_NAME_MAX);
    longest[KACE_WORKLOAD_NAME_MAX] = '\0';
    assert_true(kace_workload_name_ok(longest, NULL, NULL, 0));
    longest[KACE_WORKLOAD_NAME_MAX] = 'a';
    longest[KACE_WORKLOAD_NAME_MAX + 1] = '\0';
    size_t at = 0;
    assert_false(kace_workload_name_ok(longest, &at, NULL, 0));
    assert_int_equal(at, KACE_WORKLOAD_NAME_MAX);
}

static void test_refuses_where_and_why(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        size_t at;
        const char *why;
    } bad[] = {
        {"", 0, "'' is empty"},
        {"--db", 0, "'--db' starts with '-'"},
        {"-x", 0, "starts with '-'"},
        {".hidden", 0, "starts with '.'"},
        {"..", 0, "starts with '.'"},
        {"a,b", 1, "'a,b': byte 2 ',' is not one of A-Z a-z 0-9 . _ -"},
        {"bad name", 3, "byte 4 \\x20 is not one of"},
        {"x/../y", 1, "byte 2 '/'"},
        {"a+b", 1, "byte 2 '+'"},
        {"say\"hi\"", 3, "'say\"hi\"': byte 4 '\"'"},
        {"it's", 2, "byte 3 '''"},
        {"tab\there", 3, "'tab\\x09here': byte 4 \\x09"},
        {"caf\xc3\xa9", 3, "'caf\\xc3\\xa9': byte 4 \\xc3"},
        {"bad\xff", 3, "byte 4 \\xff"},
        {"back\\slash", 4, "'back\\x5cslash': byte 5 \\x5c"},
        {"a@b", 1, "byte 2 '@'"},
        {"a#b", 1, "byte 2 '#'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char why[300];
        size_t at = 99;
        if (kace_workload_name_ok(bad[i].name, &at, why, sizeof why))
            fail_msg("'%s' accepted", bad[i].name);
        if (at != bad[i].at || !strstr(why, bad[i].why))
            fail_msg("'%s': at %zu, '%s'; expected at %zu, '%s'", bad[i].name, at, why, bad[i].at, bad[i].why);
        for (const char *c = why; *c; c++)
            if (*c < 0x20 || *c >= 0x7f)
                fail_msg("'%s': unprintable byte in '%s'", bad[i].name, why);
    }
    /* A small buffer is filled and terminated, never overrun. */
    char small[8];
    memset(small, 'z', sizeof small);
    assert_false(kace_workload_name_ok("a,b", NULL, small, 6));
    assert_int_equal(strlen(small), 5);
    assert_int_equal(small[7], 'z');
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_accepts_the_reference_names),
        cmocka_unit_test(test_refuses_where_and_why),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
