/* The CLI's one comma-list parser: every option that takes A,B,... goes
 * through here, so "--among ,,," and "--policies kace," are refused the
 * same way everywhere instead of reading as fewer items (or none). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

bool cli_list(const char *cmd, const char *name, const char *text, size_t max, char ***items, size_t *n)
{
    *items = NULL;
    *n = 0;
    size_t count = 1, len = strlen(text);
    for (const char *c = text; *c; c++)
        count += *c == ',';
    if (count > max) {
        cli_usage(cmd, "--%s: '%s' has %zu items (at most %zu)", name, text, count, max);
        return false;
    }
    /* One allocation: the pointers, then a copy of the text split in place. */
    char **out = malloc(count * sizeof *out + len + 1);
    if (!out) {
        cli_usage(cmd, "--%s: out of memory", name);
        return false;
    }
    char *copy = (char *)(out + count);
    memcpy(copy, text, len + 1);
    size_t k = 0;
    for (char *at = copy;;) {
        char *comma = strchr(at, ',');
        if (comma)
            *comma = '\0';
        if (!*at) {
            cli_usage(cmd, "--%s: item %zu of '%s' is empty (expected a comma-separated list, e.g. A,B)", name,
                      k + 1, text);
            free(out);
            return false;
        }
        out[k++] = at;
        if (!comma)
            break;
        at = comma + 1;
    }
    *items = out;
    *n = k;
    return true;
}
