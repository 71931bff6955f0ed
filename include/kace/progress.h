/* Progress records of a workload and its steady-window throughput.
 *
 * The protocol is described in docs/progress-protocol.md: a workload writes
 * lines "done <samples> [<t_ns>]" (cumulative samples, CLOCK_MONOTONIC ns) to
 * the descriptor kace passes in $KACE_PROGRESS_FD. The parser is incremental
 * (bytes arrive from a pipe in arbitrary pieces) and pure: it never touches
 * the descriptor itself.
 */
#ifndef KACE_PROGRESS_H
#define KACE_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>

#include "kace/kace.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KACE_PROGRESS_FD_ENV "KACE_PROGRESS_FD"
#define KACE_PROGRESS_VERSION 1
#define KACE_PROGRESS_MAX_LINE 512      /* longer lines are an error */
#define KACE_PROGRESS_MAX_SAMPLES 1e15  /* larger counts are an error */

typedef struct kace_progress_record {
    int64_t t_ns;   /* CLOCK_MONOTONIC nanoseconds */
    double samples; /* cumulative samples done */
    bool stamped;   /* t_ns came with the record (else: when kace read it) */
} kace_progress_record;

typedef struct kace_progress kace_progress;

/* A parser for one workload's stream; origin names it in messages. */
kace_status kace_progress_new(kace_ctx *ctx, const char *origin, kace_progress **out);
void kace_progress_free(kace_progress **p);

/* Feeds bytes as they arrive; received_ns is the time they were read (used for
 * records that carry no time). Complete lines are parsed at once. After the
 * first error every later call returns the same error (the stream is
 * unusable); the message names origin:line:column. */
kace_status kace_progress_feed(kace_ctx *ctx, kace_progress *p, const char *data, size_t len, int64_t received_ns);

/* The records parsed so far (valid until the next feed). */
const kace_progress_record *kace_progress_records(const kace_progress *p, size_t *n);
/* Bytes of an unfinished last line (ignored at the end, see the protocol). */
size_t kace_progress_pending(const kace_progress *p);

typedef struct kace_throughput {
    double samples_per_s; /* NaN when the window could not be measured */
    double sd;            /* standard deviation of the pieces' rates, samples/s */
    double cv;            /* sd / samples_per_s */
    double window_s;      /* length actually measured */
    double samples;       /* samples counted in the window */
    int n_pieces;         /* pieces the spread was computed from */
    int64_t start_ns, end_ns; /* the window's first and last record */
} kace_throughput;

/* Steady-window throughput of records (sorted by time, as the parser gives
 * them): the window starts at the first record at or after window_start_ns
 * and ends at the first record at or after its start + window_s (or at the
 * last record, when allow_short is true and the stream ends before). Fails
 * with KACE_ERR_INVALID when fewer than two records fall in the window or no
 * time passes between them. */
kace_status kace_progress_throughput(kace_ctx *ctx, const kace_progress_record *r, size_t n, int64_t window_start_ns,
                                     double window_s, int allow_short, kace_throughput *out);

/* ---- progress from a command's own output ----------------------------------
 *
 * For commands that do not speak the protocol (`kace progress-from-output`):
 * each output line that matches a POSIX extended regular expression counts.
 * Without a count group a match adds samples_per_match. With one (group 1 by
 * default, where the pattern has a group), the group is a cumulative count
 * (a step or iteration number, as in tqdm's "60/500 [") and the total is
 * count x samples_per_match; a count below the last one starts again (a new
 * epoch's bar), and what was counted before is kept. Only the first
 * KACE_LINE_COUNTER_MAX_LINE bytes of a line are matched, up to a NUL byte. */
#define KACE_LINE_COUNTER_MAX_LINE 4096

typedef struct kace_line_counter kace_line_counter;

/* count_group: the group that holds the count; -1: group 1 where the pattern
 * has a group, else none; 0: none (each match adds samples_per_match). A
 * pattern that does not compile, or has fewer groups than count_group, is
 * KACE_ERR_INVALID with the reason; samples_per_match must be > 0. */
kace_status kace_line_counter_new(kace_ctx *ctx, const char *pattern, int count_group, double samples_per_match,
                                  kace_line_counter **out);
void kace_line_counter_free(kace_line_counter **c);

/* One line, without its end. origin and line_no name it in messages.
 * *counted: the total grew; *total: the cumulative samples. A count group
 * that matched no count, or a total past KACE_PROGRESS_MAX_SAMPLES, is
 * KACE_ERR_PARSE naming origin:line_no:column; the counter is unchanged and
 * takes the next line. */
kace_status kace_line_counter_feed(kace_ctx *ctx, kace_line_counter *c, const char *origin, long line_no,
                                   const char *line, size_t len, bool *counted, double *total);

/* One output stream cut into lines: a line ends at \n, \r (a progress bar
 * that redraws itself) or \r\n, whatever the pieces the bytes arrive in.
 * Several streams (stdout, stderr) may feed one counter; each numbers its
 * own lines. */
typedef struct kace_line_stream kace_line_stream;

kace_status kace_line_stream_new(kace_ctx *ctx, const char *origin, kace_line_stream **out);
void kace_line_stream_free(kace_line_stream **s);

/* Called for each line that counted (st == KACE_OK, total) or failed (st,
 * kace_errmsg(ctx) says why); lines that did not match are not reported. */
typedef void (*kace_line_report_fn)(void *arg, kace_ctx *ctx, kace_status st, double total);

/* Feeds bytes as they arrive; every line they complete goes to counter. */
void kace_line_stream_take(kace_ctx *ctx, kace_line_stream *s, kace_line_counter *counter, const char *data,
                           size_t len, kace_line_report_fn report, void *arg);
/* Lines ended so far, and the bytes of an unended last line (never counted). */
long kace_line_stream_lines(const kace_line_stream *s);
size_t kace_line_stream_pending(const kace_line_stream *s);

#ifdef __cplusplus
}
#endif

#endif
