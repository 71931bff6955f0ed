/* The workload name rule (include/kace/workload_name.h). */
#include <stdio.h>
#include <string.h>

#include "kace/workload_name.h"

static bool allowed(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
           c == '-';
}

/* The first 40 bytes of name between quotes, bytes outside printable ASCII
 * as \xHH: a refused name may hold anything, and the message is printed. */
static void quote(char *out, size_t size, const char *name)
{
    size_t at = 0;
    int n = snprintf(out, size, "'");
    at = n > 0 ? (size_t)n : 0;
    size_t i = 0;
    for (; name[i] && i < 40 && at + 8 < size; i++) {
        unsigned char c = (unsigned char)name[i];
        n = (c >= 0x20 && c < 0x7f && c != '\\') ? snprintf(out + at, size - at, "%c", c)
                                                  : snprintf(out + at, size - at, "\\x%02x", c);
        at += n > 0 ? (size_t)n : 0;
    }
    snprintf(out + at, size - at, "%s'", name[i] ? "..." : "");
}

bool kace_workload_name_ok(const char *name, size_t *bad_at, char *why, size_t why_size)
{
    char quoted[200];
    size_t len = strlen(name), at = 0;
    const char *problem = NULL;
    char byte[8] = "";
    if (len == 0) {
        problem = "is empty";
    } else if (len > KACE_WORKLOAD_NAME_MAX) {
        at = KACE_WORKLOAD_NAME_MAX;
        problem = "is longer than 127 bytes";
    } else if (name[0] == '.' || name[0] == '-') {
        problem = "starts with";
    } else {
        while (at < len && allowed((unsigned char)name[at]))
            at++;
        if (at == len)
            return true;
        problem = "is not one of A-Z a-z 0-9 . _ -";
    }
    if (bad_at)
        *bad_at = at;
    if (why && why_size) {
        quote(quoted, sizeof quoted, name);
        if (at < len) {
            unsigned char c = (unsigned char)name[at];
            if (c > 0x20 && c < 0x7f && c != '\\')
                snprintf(byte, sizeof byte, "'%c'", c);
            else
                snprintf(byte, sizeof byte, "\\x%02x", c);
        }
        if (len == 0 || len > KACE_WORKLOAD_NAME_MAX)
            snprintf(why, why_size, "%s %s", quoted, problem);
        else if (strcmp(problem, "starts with") == 0)
            snprintf(why, why_size, "%s starts with %s", quoted, byte);
        else
            snprintf(why, why_size, "%s: byte %zu %s %s", quoted, at + 1, byte, problem);
    }
    return false;
}
