/* The host side of a workload's run (lib/gpu/host.c): the CPU time and
 * resident memory of its process groups, read from Linux's /proc. kace
 * profile turns them into CPU% and MainMem%, the host features of the Xu et
 * al. baseline (the KACE artifact's AvgCPU and AvgMem, docker stats' CPU %
 * and MEM % of a container that runs the workload alone). */
#ifndef KACE_HOST_H
#define KACE_HOST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kace/kace.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kace_host_usage {
    double cpu_s;           /* user + system CPU time the processes and the children they
                               waited for have used so far */
    double rss_bytes;       /* their resident memory now: the proportional set size (Pss)
                               where smaps_rollup can be read, else the resident set */
    double mem_total_bytes; /* the host's memory (MemTotal of meminfo) */
    size_t n_processes;     /* processes found in the groups */
    size_t n_pss;           /* of them, those whose Pss was read */
} kace_host_usage;

/* One /proc/PID/stat line: the process group, user + system time of the
 * process and of the children it waited for in clock ticks, and resident
 * pages. KACE_ERR_PARSE names where:1:column and what was expected there. */
kace_status kace_host_parse_stat(kace_ctx *ctx, const char *where, const char *text, size_t len, int *pgrp,
                                 uint64_t *ticks, uint64_t *rss_pages);

/* Sums over every process whose process group is one of pgids (0 entries
 * are skipped). proc_root is "/proc" when NULL; tests give a folder laid
 * out like it. A process that ends while it is read is left out, as is
 * one being reaped (state X) and a zombie whose line cannot be read: any
 * process on the host may be exiting, and none of them fails the read. */
kace_status kace_host_read(kace_ctx *ctx, const char *proc_root, const int *pgids, size_t n_pgids,
                           kace_host_usage *out);

/* /proc/self/cgroup: the cgroup path of the memory controller, from a
 * cgroup v1 line "N:...,memory,...:PATH" where there is one (hybrid hosts),
 * else from the v2 line "0::PATH"; *v2 says which. path is "" when neither
 * line is there. KACE_ERR_PARSE names where:line:column. */
kace_status kace_host_parse_cgroup(kace_ctx *ctx, const char *where, const char *text, size_t len, char *path,
                                   size_t path_size, bool *v2);

/* A cgroup memory limit file: "max" (INFINITY) or a number of bytes, then
 * at most a newline. KACE_ERR_PARSE names where:1:column. */
kace_status kace_host_parse_memory_limit(kace_ctx *ctx, const char *where, const char *text, size_t len,
                                         double *bytes);

/* /proc/self/mountinfo: where the hierarchy of the memory controller is
 * mounted (a "cgroup" filesystem whose super options list "memory" for v1,
 * "cgroup2" for v2) and which cgroup is the mount's root, with mountinfo's
 * octal escapes decoded; *found false when none is listed.
 * KACE_ERR_PARSE names where:line:column. */
kace_status kace_host_parse_mountinfo(kace_ctx *ctx, const char *where, const char *text, size_t len, bool v2,
                                      char *mount_point, size_t mount_point_size, char *mount_root,
                                      size_t mount_root_size, bool *found);

/* The memory kace's workloads may use besides the host's: the smallest
 * limit set on kace's cgroup or an ancestor (v2 memory.max, v1
 * memory.limit_in_bytes), which the workloads it starts inherit; INFINITY
 * where none is set, no memory cgroup is listed, or kace's cgroup is not
 * under the hierarchy's mount. The hierarchy is found in mountinfo (a v1
 * memory controller may be mounted with others, e.g. at "cpu,memory"),
 * else at /sys/fs/cgroup[/memory]. docker stats' MEM %, the artifact's
 * AvgMem, is a share of the container's limit. proc_root is "/proc" when
 * NULL; mount_prefix (tests: a folder laid out like the root) goes before
 * every mount point, "" when NULL. */
kace_status kace_host_memory_limit(kace_ctx *ctx, const char *proc_root, const char *mount_prefix, double *bytes);

/* CPU% and memory% over a window, from reads taken in it. */
typedef struct kace_host_stats {
    int64_t last_ns;     /* time of the last read (0: none yet) */
    double last_cpu_s;
    double busy_s, span_s; /* CPU time and wall time of the intervals counted */
    double mem_pct_sum;
    double mem_limit_bytes;   /* a cgroup's limit below MemTotal, if any (0 or INFINITY: none) */
    double mem_of_bytes;      /* what the last read's memory% is a share of */
    size_t n_reads, n_skipped; /* intervals left out: a process ended in them */
} kace_host_stats;

void kace_host_stats_init(kace_host_stats *s);
void kace_host_stats_add(kace_host_stats *s, int64_t now_ns, const kace_host_usage *u);
/* CPU time over wall time, in percent summed over cores (100 = one core
 * busy); NaN with fewer than two reads. */
double kace_host_stats_cpu_pct(const kace_host_stats *s);
/* Mean resident memory, in percent of the host's MemTotal, or of
 * mem_limit_bytes where that is smaller; NaN without reads. */
double kace_host_stats_mem_pct(const kace_host_stats *s);

#ifdef __cplusplus
}
#endif

#endif
