/* The host side of a profile (lib/gpu/host.c): /proc/PID/stat lines, the
 * sums over process groups (a folder laid out like /proc, and this
 * machine's own /proc with a busy child), and the window's CPU% and
 * memory%. */
#include "testutil.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kace/host.h"
#include "kace/runner.h"

/* A stat line with group pgrp, utime, stime, rss; the name holds spaces and ')'. */
static void stat_line(char *buf, size_t size, int pid, const char *name, int pgrp, unsigned long utime,
                      unsigned long stime, long rss)
{
    snprintf(buf, size,
             "%d (%s) S 1 %d %d 0 -1 4194560 100 0 0 0 %lu %lu 0 0 20 0 3 0 12345 1000000 %ld 18446744073709551615 1 1 "
             "0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n",
             pid, name, pgrp, pgrp, utime, stime, rss);
}

static void test_parse_stat(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    char line[512];
    stat_line(line, sizeof line, 42, "python3 (x) y", 4000, 250, 50, 1024);
    int pgrp = 0;
    uint64_t ticks = 0, rss = 0;
    assert_int_equal(kace_host_parse_stat(ctx, "stat", line, strlen(line), &pgrp, &ticks, &rss), KACE_OK);
    assert_int_equal(pgrp, 4000);
    assert_int_equal(ticks, 300);
    assert_int_equal(rss, 1024);

    /* Bad lines: the column of what is wrong, and what was expected there. */
    static const struct {
        const char *text, *message;
    } bad[] = {
        {"42 python3 S 1 2 3", "stat:1:1: expected 'PID (NAME) STATE ...'"},
        {"42 (a) S 1 2", "stat:1:13: expected a space before field 6 of 24"},
        {"42 (a) S 1 x7 3 0 -1 4 1 0 0 0 5 6 0 0 20 0 3 0 1 1 9", "stat:1:12: expected a number in field 5"},
        {"42 (a) S 1 2 3 0 -1 4 1 0 0 0 5 6 0 0 20 0 3 0 1 1 -", "stat:1:52: expected a number in field 24, found '-'"},
        {"42 (a) S 1 2 3 0 -1 4 1 0 0 0 99999999999999999999999 6 0 0 20 0 3 0 1 1 9",
         "stat:1:31: field 14 is out of range"},
        {"42 (a) S 1 2 3 0 -1 4 1 0 0 0 5  6", "stat:1:33: expected field 15, found nothing"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        kace_status st = kace_host_parse_stat(ctx, "stat", bad[i].text, strlen(bad[i].text), &pgrp, &ticks, &rss);
        if (st != KACE_ERR_PARSE || !strstr(kace_errmsg(ctx), bad[i].message))
            fail_msg("'%s': status %d, message '%s', expected '%s'", bad[i].text, st, kace_errmsg(ctx),
                     bad[i].message);
    }
    /* The time of children it waited for counts (a DataLoader worker that ended). */
    const char *children = "42 (a) S 1 7 3 0 -1 4 1 0 0 0 5 6 100 200 20 0 3 0 1 1 9";
    assert_int_equal(kace_host_parse_stat(ctx, "stat", children, strlen(children), &pgrp, &ticks, &rss), KACE_OK);
    assert_int_equal(pgrp, 7);
    assert_int_equal(ticks, 311);
    assert_int_equal(rss, 9);
    /* An old kernel's negative rss reads as none. */
    const char *negative = "42 (a) S 1 2 3 0 -1 4 1 0 0 0 5 6 0 0 20 0 3 0 1 1 -3";
    assert_int_equal(kace_host_parse_stat(ctx, "stat", negative, strlen(negative), &pgrp, &ticks, &rss), KACE_OK);
    assert_int_equal(rss, 0);
    kace_ctx_free(&ctx);
}

static void put_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* A folder laid out like /proc: only the groups' processes count. */
static void test_read_sums_the_groups(void **state)
{
    (void)state;
    char root[] = "/tmp/kace-test-host-XXXXXX";
    assert_non_null(mkdtemp(root));
    char path[256], line[512];
    snprintf(path, sizeof path, "%s/meminfo", root);
    put_file(path, "MemFree:  1000 kB\nMemTotal:  4000000 kB\n");
    static const struct {
        int pid, pgrp;
        unsigned long utime, stime;
        long rss;
    } procs[] = {{100, 100, 300, 100, 1000}, {101, 100, 50, 50, 500}, {200, 200, 1000, 1000, 9999},
                 {300, 300, 7, 3, 10}};
    for (size_t i = 0; i < sizeof procs / sizeof procs[0]; i++) {
        snprintf(path, sizeof path, "%s/%d", root, procs[i].pid);
        mkdir(path, 0755);
        snprintf(path, sizeof path, "%s/%d/stat", root, procs[i].pid);
        stat_line(line, sizeof line, procs[i].pid, "w", procs[i].pgrp, procs[i].utime, procs[i].stime, procs[i].rss);
        put_file(path, line);
    }
    /* 101 shares pages with 100: its proportional share is what counts. */
    snprintf(path, sizeof path, "%s/101/smaps_rollup", root);
    put_file(path, "00400000-7fff00000000 ---p 00000000 00:00 0  [rollup]\nRss:  9999 kB\nPss:  1 kB\n");
    snprintf(path, sizeof path, "%s/400", root); /* a process that ended: no stat */
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/self", root); /* not a process number */
    mkdir(path, 0755);

    kace_ctx *ctx = kace_ctx_new();
    int groups[] = {100, 0, 300};
    kace_host_usage u;
    assert_int_equal(kace_host_read(ctx, root, groups, 3, &u), KACE_OK);
    long tck = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
    assert_int_equal(u.n_processes, 3);
    assert_true(fabs(u.cpu_s - (500.0 + 10.0) / (double)tck) < 1e-9);
    assert_int_equal(u.n_pss, 1);
    assert_true(fabs(u.rss_bytes - ((1000.0 + 10.0) * (double)page + 1024.0)) < 1e-3);
    assert_true(fabs(u.mem_total_bytes - 4000000.0 * 1024) < 1e-3);

    /* A malformed stat names its file. */
    snprintf(path, sizeof path, "%s/300/stat", root);
    put_file(path, "300 (w S 1 300");
    assert_int_equal(kace_host_read(ctx, root, groups, 3, &u), KACE_ERR_PARSE);
    assert_non_null(strstr(kace_errmsg(ctx), "/300/stat:1:1: expected 'PID (NAME)"));
    /* No MemTotal. */
    snprintf(path, sizeof path, "%s/meminfo", root);
    put_file(path, "MemFree: 1 kB\n");
    assert_int_equal(kace_host_read(ctx, root, groups, 3, &u), KACE_ERR_PARSE);
    assert_non_null(strstr(kace_errmsg(ctx), "MemTotal"));
    kace_ctx_free(&ctx);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    assert_int_equal(system(cmd), 0);
}

/* The CPU time this process has used, by its own clock. */
static double own_cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Spins until this process has used `seconds` more CPU, however long that
 * takes on a loaded machine. */
static void spin_cpu(double seconds)
{
    volatile unsigned long x = 0;
    for (double end = own_cpu_s() + seconds; own_cpu_s() < end;)
        x++;
}

/* This machine's /proc: a child in a group of its own spins 0.2 s of its own
 * CPU at a time, then writes the CPU time it has used (its own clock,
 * CLOCK_PROCESS_CPUTIME_ID) and waits for the next go. The meter's reading of
 * the group, taken while the child waits, is that time within what /proc's
 * clock ticks round off; and with the child's own CPU clock as the time line,
 * the group is busy 100% of it. Nothing here depends on how much of a core
 * the child got: a loaded machine only makes it take longer. */
static void test_read_a_busy_group(void **state)
{
    (void)state;
    int report[2], go[2];
    assert_int_equal(pipe(report), 0);
    assert_int_equal(pipe(go), 0);
    pid_t child = fork_group();
    if (child == 0) {
        close(report[0]);
        close(go[1]);
        char byte;
        do {
            spin_cpu(0.2);
            double used = own_cpu_s();
            if (write(report[1], &used, sizeof used) != sizeof used)
                _exit(1);
        } while (read(go[0], &byte, 1) == 1);
        _exit(0);
    }
    close(report[1]);
    close(go[0]);
    /* The test's own group is not counted: its CPU time would show. */
    spin_cpu(0.1);
    kace_ctx *ctx = kace_ctx_new();
    int groups[] = {child};
    kace_host_stats s;
    kace_host_stats_init(&s);
    const double tick_s = 1.0 / (double)sysconf(_SC_CLK_TCK);
    double first_s = 0, last_s = 0;
    for (int i = 0; i < 4; i++) {
        double used = 0;
        assert_int_equal(read(report[0], &used, sizeof used), sizeof used);
        kace_host_usage u;
        assert_int_equal(kace_host_read(ctx, NULL, groups, 1, &u), KACE_OK);
        assert_int_equal(u.n_processes, 1);
        assert_true(u.rss_bytes > 0);
        /* utime and stime are each rounded down to a tick. */
        if (!(u.cpu_s > used - 3 * tick_s && u.cpu_s < used + tick_s))
            fail_msg("the meter read %g s of CPU; the child says it used %g s", u.cpu_s, used);
        kace_host_stats_add(&s, (int64_t)(used * 1e9), &u);
        if (i == 0)
            first_s = used;
        last_s = used;
        assert_int_equal(write(go[1], "g", 1), 1);
    }
    kill_group(child);
    close(report[0]);
    close(go[1]);
    double cpu = kace_host_stats_cpu_pct(&s), mem = kace_host_stats_mem_pct(&s);
    /* 100% of the child's own time line, give or take 3 ticks at either end. */
    double slack = 100 * 2 * 3 * tick_s / (last_s - first_s);
    if (!(fabs(cpu - 100) < slack))
        fail_msg("a spinning child's CPU%% by its own clock is %g, expected 100 +- %.3g", cpu, slack);
    assert_true(mem > 0 && mem < 5);
    kace_ctx_free(&ctx);
}

/* An interval in which CPU time went down (a process ended) is left out. */
static void test_stats(void **state)
{
    (void)state;
    kace_host_stats s;
    kace_host_stats_init(&s);
    assert_true(isnan(kace_host_stats_cpu_pct(&s)) && isnan(kace_host_stats_mem_pct(&s)));
    kace_host_usage u = {.cpu_s = 10, .rss_bytes = 10, .mem_total_bytes = 100};
    kace_host_stats_add(&s, 1000000000, &u);
    assert_true(isnan(kace_host_stats_cpu_pct(&s)));
    u.cpu_s = 11.5; /* 1.5 s of CPU in 1 s: 150% */
    u.rss_bytes = 30;
    kace_host_stats_add(&s, 2000000000, &u);
    u.cpu_s = 3; /* a process ended */
    kace_host_stats_add(&s, 3000000000, &u);
    u.cpu_s = 3.5; /* 0.5 s in 1 s */
    kace_host_stats_add(&s, 4000000000, &u);
    assert_true(fabs(kace_host_stats_cpu_pct(&s) - 100.0) < 1e-9); /* (1.5 + 0.5) / 2 */
    assert_int_equal(s.n_skipped, 1);
    assert_true(fabs(kace_host_stats_mem_pct(&s) - (10 + 30 + 30 + 30) / 4.0) < 1e-9);
    assert_true(s.mem_of_bytes == 100);

    /* A cgroup limit below MemTotal is what memory% is a share of; one above it is not. */
    kace_host_stats_init(&s);
    s.mem_limit_bytes = 40;
    kace_host_stats_add(&s, 1000000000, &u);
    assert_true(fabs(kace_host_stats_mem_pct(&s) - 30 / 40.0 * 100) < 1e-9 && s.mem_of_bytes == 40);
    kace_host_stats_init(&s);
    s.mem_limit_bytes = INFINITY;
    kace_host_stats_add(&s, 1000000000, &u);
    assert_true(fabs(kace_host_stats_mem_pct(&s) - 30) < 1e-9 && s.mem_of_bytes == 100);
}

static void test_parse_cgroup(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    char path[64];
    bool v2 = false;
    /* cgroup v2 alone */
    const char *unified = "0::/system.slice/docker-1.scope\n";
    assert_int_equal(kace_host_parse_cgroup(ctx, "cg", unified, strlen(unified), path, sizeof path, &v2), KACE_OK);
    assert_string_equal(path, "/system.slice/docker-1.scope");
    assert_true(v2);
    /* hybrid: the v1 memory controller wins, before or after the v2 line */
    const char *hybrid[] = {"9:name=systemd:/\n4:cpu,memory:/job/7\n0::/\n", "0::/\n4:memory:/job/7\n1:cpu:/x\n"};
    for (int i = 0; i < 2; i++) {
        assert_int_equal(kace_host_parse_cgroup(ctx, "cg", hybrid[i], strlen(hybrid[i]), path, sizeof path, &v2),
                         KACE_OK);
        assert_string_equal(path, "/job/7");
        assert_false(v2);
    }
    /* no memory cgroup: an empty path, not an error; "memoryx" is not "memory" */
    const char *none = "3:memoryx:/a\n1:cpu:/\n";
    assert_int_equal(kace_host_parse_cgroup(ctx, "cg", none, strlen(none), path, sizeof path, &v2), KACE_OK);
    assert_string_equal(path, "");
    static const struct {
        const char *text, *message;
    } bad[] = {
        {"0::/\nx:memory:/a\n", "cg:2:1: expected 'ID:CONTROLLERS:PATH'"},
        {"4:memory\n", "cg:1:9: expected ':' after the controllers"},
        {"4:memory:a/b\n", "cg:1:10: expected a cgroup path starting with '/'"},
        {"0::\n", "cg:1:4: expected a cgroup path"},
        {"0::/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n", "at most 63"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(kace_host_parse_cgroup(ctx, "cg", bad[i].text, strlen(bad[i].text), path, sizeof path, &v2),
                         KACE_ERR_PARSE);
        if (!strstr(kace_errmsg(ctx), bad[i].message))
            fail_msg("'%s': got '%s', expected '%s'", bad[i].text, kace_errmsg(ctx), bad[i].message);
    }
    double b = 0;
    assert_int_equal(kace_host_parse_memory_limit(ctx, "m", "max\n", 4, &b), KACE_OK);
    assert_true(isinf(b));
    assert_int_equal(kace_host_parse_memory_limit(ctx, "m", "2147483648\n", 11, &b), KACE_OK);
    assert_true(b == 2147483648.0);
    assert_int_equal(kace_host_parse_memory_limit(ctx, "m", "9223372036854771712", 19, &b), KACE_OK);
    static const struct {
        const char *text, *message;
    } bad_limit[] = {{"12ab\n", "m:1:3: expected 'max' or a number"},
                     {"", "m:1:1: expected 'max' or a number of bytes, not an empty file"},
                     {"max \n", "m:1:1:"},
                     {"99999999999999999999999\n", "m:1:20:"},
                     {"1\n\n", "m:1:2:"}};
    for (size_t i = 0; i < sizeof bad_limit / sizeof bad_limit[0]; i++) {
        assert_int_equal(kace_host_parse_memory_limit(ctx, "m", bad_limit[i].text, strlen(bad_limit[i].text), &b),
                         KACE_ERR_PARSE);
        if (!strstr(kace_errmsg(ctx), bad_limit[i].message))
            fail_msg("'%s': got '%s', expected '%s'", bad_limit[i].text, kace_errmsg(ctx), bad_limit[i].message);
    }
    kace_ctx_free(&ctx);
}

static void make_file(const char *root, const char *rel, const char *text)
{
    char path[512], cmd[600];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    snprintf(cmd, sizeof cmd, "mkdir -p \"$(dirname '%s')\"", path);
    assert_int_equal(system(cmd), 0);
    put_file(path, text);
}

/* The smallest limit on the way from kace's cgroup to the root, in folders
 * laid out like /proc and the root: v2 at /sys/fs/cgroup, v1 at
 * /sys/fs/cgroup/memory, or wherever mountinfo says (co-mounted
 * controllers, a container's bind mount of its own subtree). */
static void test_memory_limit(void **state)
{
    (void)state;
    char root[] = "/tmp/kace-test-cgroup-XXXXXX";
    assert_non_null(mkdtemp(root));
    char proc[256];
    snprintf(proc, sizeof proc, "%s/proc", root);
    kace_ctx *ctx = kace_ctx_new();
    double b = 0;
    /* No /proc/self/cgroup (not Linux's cgroups): no limit. */
    assert_int_equal(kace_host_memory_limit(ctx, proc, root, &b), KACE_OK);
    assert_true(isinf(b));
    /* v2, no mountinfo: the usual place. */
    make_file(root, "proc/self/cgroup", "0::/kubepods/pod1/c1\n");
    make_file(root, "sys/fs/cgroup/kubepods/pod1/c1/memory.max", "max\n");
    make_file(root, "sys/fs/cgroup/kubepods/pod1/memory.max", "8589934592\n");
    make_file(root, "sys/fs/cgroup/kubepods/memory.max", "17179869184\n");
    assert_int_equal(kace_host_memory_limit(ctx, proc, root, &b), KACE_OK);
    assert_true(b == 8589934592.0);
    make_file(root, "sys/fs/cgroup/memory.max", "4294967296\n"); /* the namespace's root, as in a container */
    assert_int_equal(kace_host_memory_limit(ctx, proc, root, &b), KACE_OK);
    assert_true(b == 4294967296.0);
    make_file(root, "sys/fs/cgroup/kubepods/pod1/memory.max", "8 GiB\n");
    assert_int_equal(kace_host_memory_limit(ctx, proc, root, &b), KACE_ERR_PARSE);
    assert_non_null(strstr(kace_errmsg(ctx), "sys/fs/cgroup/kubepods/pod1/memory.max:1:2: expected 'max' or a number"));
    /* v1 (a hybrid host), no mountinfo: the memory controller's folder and file. */
    make_file(root, "proc/self/cgroup", "4:memory:/slurm/job_9\n0::/\n");
    make_file(root, "sys/fs/cgroup/memory/slurm/job_9/memory.limit_in_bytes", "1073741824\n");
    make_file(root, "sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
    assert_int_equal(kace_host_memory_limit(ctx, proc, root, &b), KACE_OK);
    assert_true(b == 1073741824.0);
    /* v1 co-mounted with cpu, as mountinfo says: read there, not at .../memory. */
    make_file(root, "proc/self/cgroup", "4:cpu,memory:/slurm/job_9\n");
    make_file(root, "proc/self/mountinfo",
              "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
              "35 31 0:32 / /sys/fs/cgroup/cpu,memory rw,relatime shared:9 - cgroup cgroup rw,cpu,memory\n");
    make_file(root, "sys/fs/cgroup/cpu,memory/slurm/job_9/memory.limit_in_bytes", "536870912\n");
    assert_int_equal(kace_host_memory_limit(ctx, proc, root, &b), KACE_OK);
    assert_true(b == 536870912.0);
    /* A container's bind mount of its own subtree (root /docker/abc) at a path with a space. */
    make_file(root, "proc/self/cgroup", "0::/docker/abc/app\n");
    make_file(root, "proc/self/mountinfo",
              "40 31 0:33 /docker/abc /sys/fs/my\\040cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n");
    make_file(root, "sys/fs/my cgroup/app/memory.max", "max\n");
    make_file(root, "sys/fs/my cgroup/memory.max", "2147483648\n");
    assert_int_equal(kace_host_memory_limit(ctx, proc, root, &b), KACE_OK);
    assert_true(b == 2147483648.0);
    /* kace's cgroup outside the mounted subtree: nothing to read, no limit. */
    make_file(root, "proc/self/cgroup", "0::/elsewhere\n");
    assert_int_equal(kace_host_memory_limit(ctx, proc, root, &b), KACE_OK);
    assert_true(isinf(b));
    /* Malformed files name themselves. */
    make_file(root, "proc/self/mountinfo", "40 31 0:33 / /sys/fs/cgroup rw - cgroup2\n");
    make_file(root, "proc/self/cgroup", "0::/\n");
    assert_int_equal(kace_host_memory_limit(ctx, proc, root, &b), KACE_ERR_PARSE);
    assert_non_null(strstr(kace_errmsg(ctx), "proc/self/mountinfo:1:"));
    make_file(root, "proc/self/cgroup", "memory\n");
    assert_int_equal(kace_host_memory_limit(ctx, proc, root, &b), KACE_ERR_PARSE);
    assert_non_null(strstr(kace_errmsg(ctx), "proc/self/cgroup:1:1:"));
    /* This machine's own: read without error, a positive limit or none. */
    assert_int_equal(kace_host_memory_limit(ctx, NULL, NULL, &b), KACE_OK);
    assert_true(b > 0);
    kace_ctx_free(&ctx);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    assert_int_equal(system(cmd), 0);
}

static void test_parse_mountinfo(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    char mp[64], mr[64];
    bool found = true;
    const char *hybrid = "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
                         "35 31 0:32 /k /sys/fs/cgroup/memory rw,relatime master:1 shared:2 - cgroup cgroup rw,memory\n"
                         "36 31 0:33 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n";
    assert_int_equal(kace_host_parse_mountinfo(ctx, "mi", hybrid, strlen(hybrid), false, mp, sizeof mp, mr, sizeof mr,
                                               &found), KACE_OK);
    assert_true(found);
    assert_string_equal(mp, "/sys/fs/cgroup/memory");
    assert_string_equal(mr, "/k");
    assert_int_equal(kace_host_parse_mountinfo(ctx, "mi", hybrid, strlen(hybrid), true, mp, sizeof mp, mr, sizeof mr,
                                               &found), KACE_OK);
    assert_true(found);
    assert_string_equal(mp, "/sys/fs/cgroup/unified");
    const char *none = "31 23 0:28 / /sys rw - sysfs sysfs rw\n";
    assert_int_equal(kace_host_parse_mountinfo(ctx, "mi", none, strlen(none), false, mp, sizeof mp, mr, sizeof mr,
                                               &found), KACE_OK);
    assert_false(found);
    static const struct {
        const char *text, *message;
    } bad[] = {
        {"31 23 0:28 / /sys rw sysfs sysfs rw\n", "mi:1:"},                  /* no "-" */
        {"31 23 0:28 / /sys rw - cgroup2 cgroup2\n", "mi:1:"},               /* no super options */
        {"1 2\n", "mi:1:4: expected 'ID PARENT"},
        {"40 31 0:33 / /a\\09 rw - cgroup2 c rw\n", "mi:1:16: expected an octal escape"},
        {"40 31 0:33 / /aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa rw - cgroup2 c rw\n",
         "a path longer than kace reads"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(kace_host_parse_mountinfo(ctx, "mi", bad[i].text, strlen(bad[i].text), true, mp, sizeof mp, mr,
                                                   sizeof mr, &found), KACE_ERR_PARSE);
        if (!strstr(kace_errmsg(ctx), bad[i].message))
            fail_msg("'%s': got '%s', expected '%s'", bad[i].text, kace_errmsg(ctx), bad[i].message);
    }
    kace_ctx_free(&ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_stat),
        cmocka_unit_test(test_read_sums_the_groups),
        cmocka_unit_test_teardown(test_read_a_busy_group, kill_groups),
        cmocka_unit_test(test_stats),
        cmocka_unit_test(test_parse_cgroup),
        cmocka_unit_test(test_memory_limit),
        cmocka_unit_test(test_parse_mountinfo),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
