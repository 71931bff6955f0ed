/* The CLI's one number parser: every numeric option goes through here, so
 * "--top abc" and "--top 3x" are refused the same way everywhere. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

bool cli_parse_number(const char *text, double lo, double hi, bool whole, double *out)
{
    if (!text || !*text)
        return false;
    /* Decimal only: strtod would also take " 3", "0x10", "inf" and "nan". */
    for (const char *c = text; *c; c++)
        if (!isdigit((unsigned char)*c) && !strchr("+-.eE", *c))
            return false;
    char *end = NULL;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || end == text || *end || !isfinite(v) || !(v >= lo && v <= hi) || (whole && v != floor(v)))
        return false;
    *out = v;
    return true;
}

bool cli_number(const char *cmd, const char *name, const char *text, double lo, double hi, double *out)
{
    if (cli_parse_number(text, lo, hi, false, out))
        return true;
    cli_usage(cmd, "--%s: '%s' is not a number in %g..%g", name, text, lo, hi);
    return false;
}

bool cli_whole(const char *cmd, const char *name, const char *text, long lo, long hi, long *out)
{
    double v;
    if (cli_parse_number(text, (double)lo, (double)hi, true, &v)) {
        *out = (long)v;
        return true;
    }
    cli_usage(cmd, "--%s: '%s' is not a whole number in %ld..%ld", name, text, lo, hi);
    return false;
}

bool cli_int(const char *cmd, const char *name, const char *text, int lo, int hi, int *out)
{
    long v;
    if (!cli_whole(cmd, name, text, lo, hi, &v))
        return false;
    *out = (int)v;
    return true;
}

bool cli_seconds(const char *cmd, const char *name, const char *text, double *out)
{
    if (cli_parse_number(text, 0, 86400 * 365.0, false, out))
        return true;
    cli_usage(cmd, "--%s: '%s' is not a number of seconds >= 0", name, text);
    return false;
}

bool cli_whole_list(const char *cmd, const char *name, const char *text, long lo, long hi)
{
    char **items = NULL;
    size_t n = 0;
    if (!cli_list(cmd, name, text, SIZE_MAX / 2, &items, &n))
        return false;
    double v = 0;
    for (size_t i = 0; i < n; i++)
        if (!cli_parse_number(items[i], (double)lo, (double)hi, true, &v)) {
            cli_usage(cmd, "--%s: '%s' is not a comma-separated list of whole numbers in %ld..%ld", name, text, lo,
                      hi);
            free(items);
            return false;
        }
    free(items);
    return true;
}

bool cli_dims(const char *cmd, const char *name, const char *text, long max_a, long max_b, long *a, long *b)
{
    const char *x = strchr(text, 'x');
    char first[64];
    double va, vb;
    if (x && (size_t)(x - text) < sizeof first) {
        memcpy(first, text, (size_t)(x - text));
        first[x - text] = '\0';
        if (cli_parse_number(first, 1, (double)max_a, true, &va) && cli_parse_number(x + 1, 1, (double)max_b, true, &vb)) {
            *a = (long)va;
            *b = (long)vb;
            return true;
        }
    }
    cli_usage(cmd, "--%s: '%s' is not AxB with whole numbers A in 1..%ld and B in 1..%ld", name, text, max_a, max_b);
    return false;
}
