/* kace progress protocol, version 1 (docs/progress-protocol.md): header-only
 * helper for C and CUDA C workloads.
 *
 *   #include "kace_progress.h"
 *   ...
 *   kace_progress_report(samples_done_so_far);   // cumulative count
 *
 * Writes "done <samples> <CLOCK_MONOTONIC ns>\n" with one write(2) to the
 * descriptor named by $KACE_PROGRESS_FD; does nothing when the variable is
 * absent (the program was not started by kace) or invalid. Thread-safe: one
 * write per record, and pipe writes under 512 bytes are atomic. Write errors
 * are ignored; when kace has gone the write raises SIGPIPE, which ends the
 * workload as kace would have.
 */
#ifndef KACE_PROGRESS_CLIENT_H
#define KACE_PROGRESS_CLIENT_H

#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The descriptor from $KACE_PROGRESS_FD, or -1. Looked up once. */
static inline int kace_progress_fd(void)
{
    static int fd = -2;
    if (fd == -2) {
        const char *s = getenv("KACE_PROGRESS_FD");
        char *end = NULL;
        long v = s ? strtol(s, &end, 10) : -1;
        fd = (s && *s && end && *end == '\0' && v >= 0 && v < 1 << 20) ? (int)v : -1;
    }
    return fd;
}

/* Reports the total number of samples done so far. */
static inline void kace_progress_report(unsigned long long samples_total)
{
    int fd = kace_progress_fd();
    if (fd < 0)
        return;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    char line[96];
    int n = snprintf(line, sizeof line, "done %llu %lld\n", samples_total,
                     (long long)ts.tv_sec * 1000000000LL + (long long)ts.tv_nsec);
    if (n > 0 && (size_t)n < sizeof line) {
        ssize_t w = write(fd, line, (size_t)n);
        (void)w;
    }
}

#ifdef __cplusplus
}
#endif

#endif
