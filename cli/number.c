/* The CLI's one number parser: every numeric option goes through here, so
 * "--top abc" and "--top 3x" are refused the same way everywhere. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "cli.h"

bool cli_parse_number(const char *text, double lo, double hi, bool whole, double *out)
{
    if (!text || !*text || isspace((unsigned char)*text))
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
