/* libFuzzer harness: the workload name rule (lib/base/workload_name.c),
 * the input up to its first NUL as a name.
 *
 * Invariants: the rule agrees with an independent reading of its contract
 * (1 to KACE_WORKLOAD_NAME_MAX bytes of A-Z a-z 0-9 . _ -, not starting
 * with . or -); a refusal's offset lies within the name (or is 0 for an
 * empty one, the limit for one too long) and its message is terminated,
 * fits, and is printable ASCII whatever bytes the name held (it is printed
 * and put into JSON); an accepted name needs no escaping in JSON, CSV or a
 * path, and splits from a comma list or an "a+b" label intact. */
#include "fuzz_common.h"
#include "kace/workload_name.h"

static bool contract(const char *name, size_t len)
{
    if (len == 0 || len > KACE_WORKLOAD_NAME_MAX || name[0] == '.' || name[0] == '-')
        return false;
    for (size_t i = 0; i < len; i++)
        if (!isalnum((unsigned char)name[i]) && !strchr("._-", name[i]))
            return false;
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *name = malloc(size + 1);
    if (!name)
        return 0;
    memcpy(name, data, size);
    name[size] = '\0';
    size_t len = strlen(name), at = (size_t)-1;
    char why[160];
    memset(why, 'x', sizeof why);
    bool ok = kace_workload_name_ok(name, &at, why, sizeof why);
    FUZZ_CHECK(ok == contract(name, len), "'%s' (%zu bytes): rule says %d", why, len, ok);
    if (ok) {
        FUZZ_CHECK(!strpbrk(name, ",+\"\\/ '"), "accepted a name with a separator: %s", name);
    } else {
        FUZZ_CHECK(memchr(why, '\0', sizeof why) != NULL, "message not terminated");
        for (const char *c = why; *c; c++)
            FUZZ_CHECK(*c >= 0x20 && *c < 0x7f, "message byte 0x%02x", (unsigned char)*c);
        FUZZ_CHECK(at <= len || (len > KACE_WORKLOAD_NAME_MAX && at == KACE_WORKLOAD_NAME_MAX), "offset %zu of %zu",
                   at, len);
        FUZZ_CHECK(len == 0 || at < len, "offset %zu of %zu", at, len);
    }
    /* NULLs for the optional outputs. */
    FUZZ_CHECK(kace_workload_name_ok(name, NULL, NULL, 0) == ok, "answer depends on the outputs asked for");
    free(name);
    return 0;
}
