/* The host meter (lib/gpu/host.c) on a host where other processes are
 * exiting: a folder laid out like /proc holds, beside the measured group,
 * a process being reaped (state X, its line cut short), a zombie whose line
 * is cut short, and a process that vanished between readdir and read. None
 * of them fails the read, none is counted; a living process's bad line
 * still does. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kace/host.h"

static void put(const char *root, const char *rel, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void folder(const char *root, const char *rel)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    assert_int_equal(mkdir(path, 0755), 0);
}

/* A full stat line: group pgrp, utime, stime, rss pages, in state st. */
static void stat_of(const char *root, int pid, char st, int pgrp, unsigned long utime, unsigned long stime, long rss)
{
    char rel[64], line[512];
    snprintf(rel, sizeof rel, "%d", pid);
    folder(root, rel);
    snprintf(line, sizeof line,
             "%d (w) %c 1 %d %d 0 -1 4194560 100 0 0 0 %lu %lu 0 0 20 0 3 0 12345 1000000 %ld 1 1 1 "
             "0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n",
             pid, st, pgrp, pgrp, utime, stime, rss);
    snprintf(rel, sizeof rel, "%d/stat", pid);
    put(root, rel, line);
}

static void test_exiting_processes_are_skipped(void **state)
{
    (void)state;
    char root[] = "/tmp/kace-test-host-exiting-XXXXXX";
    assert_non_null(mkdtemp(root));
    put(root, "meminfo", "MemTotal:  4000000 kB\n");
    stat_of(root, 100, 'R', 100, 300, 100, 1000); /* the group measured */
    stat_of(root, 101, 'S', 100, 50, 50, 500);
    stat_of(root, 200, 'S', 200, 1000, 1000, 9999); /* another group */
    /* Being reaped, in the measured group: its times are its parent's now,
     * and its line stops after the state. */
    folder(root, "300");
    put(root, "300/stat", "300 (dying) X 1 100 100 0 -1");
    /* Being reaped with a whole line, in the measured group: not counted. */
    stat_of(root, 301, 'X', 100, 5000, 5000, 0);
    /* A zombie of another group, its line cut short. */
    folder(root, "400");
    put(root, "400/stat", "400 (gone (z)) Z 1 ");
    /* Vanished between readdir and read: the folder is listed, its stat
     * cannot be opened; and an empty read. */
    folder(root, "500");
    folder(root, "501");
    put(root, "501/stat", "");

    kace_ctx *ctx = kace_ctx_new();
    int groups[] = {100};
    kace_host_usage u;
    assert_kace_ok(ctx, kace_host_read(ctx, root, groups, 1, &u));
    long tck = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
    assert_int_equal(u.n_processes, 2);
    assert_true(fabs(u.cpu_s - 500.0 / (double)tck) < 1e-9);
    assert_true(fabs(u.rss_bytes - 1500.0 * (double)page) < 1e-3);

    /* A living process's line that cannot be read is still an error,
     * naming its file. */
    put(root, "200/stat", "200 (w) S 1 200");
    assert_int_equal(kace_host_read(ctx, root, groups, 1, &u), KACE_ERR_PARSE);
    assert_non_null(strstr(kace_errmsg(ctx), "/200/stat:1:"));
    kace_ctx_free(&ctx);

    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exiting_processes_are_skipped),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
