/* The library's progress (include/kace/meter.h) as one updating line on
 * stderr: "kace import: reading 41.2/82.0 MB (50%), 1.4 MB/s, 0:29 left".
 * Drawn only when stderr is a terminal and --quiet was not given; erased when
 * a phase ends, so that what the command prints stays as it was. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "kace/meter.h"

static struct {
    const char *label;
    const char *what;    /* the phase being drawn */
    double start, last;  /* when it began; when it was last drawn */
    double done0;        /* done at its first report */
    bool drawn;          /* a line is on the terminal */
} meter;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Bytes read as MB; other units as they are. */
static void amount(char *out, size_t size, double v, const char *unit)
{
    if (unit && strcmp(unit, "bytes") == 0)
        snprintf(out, size, "%.1f", v / 1e6);
    else
        snprintf(out, size, "%.0f", v);
}

void cli_meter_clear(void)
{
    if (meter.drawn)
        fputs("\r\033[K", stderr);
    meter.drawn = false;
}

static void draw(void *user, const kace_meter_state *s)
{
    (void)user;
    double t = now_s();
    if (!meter.what || meter.what != s->what || s->done < meter.done0) {
        meter.what = s->what;
        meter.start = t;
        meter.done0 = s->done;
        meter.last = 0;
    }
    if (s->finished) {
        cli_meter_clear();
        meter.what = NULL;
        return;
    }
    /* Ten lines a second at most; the first one at once. */
    if (meter.last > 0 && t - meter.last < 0.1)
        return;
    meter.last = t;
    const char *unit = s->unit && strcmp(s->unit, "bytes") == 0 ? "MB" : (s->unit ? s->unit : "");
    char done[32], total[32], line[256];
    amount(done, sizeof done, s->done, s->unit);
    int n;
    if (s->total > 0) {
        amount(total, sizeof total, s->total, s->unit);
        n = snprintf(line, sizeof line, "kace %s: %s %s/%s %s (%.0f%%)", meter.label, s->what, done, total, unit,
                     100 * s->done / s->total);
    } else {
        n = snprintf(line, sizeof line, "kace %s: %s %s %s", meter.label, s->what, done, unit);
    }
    double elapsed = t - meter.start, rate = elapsed > 0.2 ? (s->done - meter.done0) / elapsed : 0;
    if (rate > 0 && n > 0 && (size_t)n < sizeof line) {
        char r[32];
        amount(r, sizeof r, rate, s->unit);
        n += snprintf(line + n, sizeof line - (size_t)n, ", %s %s/s", r, unit);
        if (s->total > 0 && (size_t)n < sizeof line) {
            double left = (s->total - s->done) / rate;
            snprintf(line + n, sizeof line - (size_t)n, ", %d:%02d left", (int)(left / 60), (int)left % 60);
        }
    }
    fprintf(stderr, "\r\033[K%s", line);
    fflush(stderr);
    meter.drawn = true;
}

void cli_meter_attach(kace_ctx *ctx, const char *label, bool quiet)
{
    if (quiet || !isatty(STDERR_FILENO))
        return;
    meter.label = label;
    kace_ctx_set_meter(ctx, draw, NULL);
}
