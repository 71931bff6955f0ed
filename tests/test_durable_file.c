/* The durable-write helper (lib/base/durable_file.c): the file holds the
 * whole text or what it held before, and no temporary file stays behind,
 * whether the write succeeds or fails. */
#include "testutil.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kace/kace.h"

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    static char buf[256];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    return buf;
}

/* Entries of dir other than . and .. */
static int entries(const char *dir)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(d);
    return n;
}

static void test_writes_and_replaces(void **state)
{
    (void)state;
    const char *dir = scratch_dir("durable_file_writes");
    char path[4200];
    snprintf(path, sizeof path, "%s/a.csv", dir);
    kace_ctx *ctx = kace_ctx_new();
    assert_kace_ok(ctx, kace_write_file_durable(ctx, path, "x,y\n1,2\n", 8));
    assert_string_equal(slurp(path), "x,y\n1,2\n");
    assert_kace_ok(ctx, kace_write_file_durable(ctx, path, "z\n", 2));
    assert_string_equal(slurp(path), "z\n");
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0644);
    assert_kace_ok(ctx, kace_write_file_durable(ctx, path, "", 0));
    assert_string_equal(slurp(path), "");
    assert_int_equal(entries(dir), 1); /* no temporary file left */
    kace_ctx_free(&ctx);
}

static void test_failures_leave_nothing(void **state)
{
    (void)state;
    const char *dir = scratch_dir("durable_file_failures");
    kace_ctx *ctx = kace_ctx_new();
    char path[4200];
    /* A missing folder: refused, naming the path. */
    snprintf(path, sizeof path, "%s/missing/a.csv", dir);
    assert_int_equal(kace_write_file_durable(ctx, path, "x\n", 2), KACE_ERR_IO);
    assert_non_null(strstr(kace_errmsg(ctx), "missing/a.csv"));
    /* A folder where the file should go: the rename fails, the temporary file goes. */
    snprintf(path, sizeof path, "%s/taken", dir);
    assert_int_equal(mkdir(path, 0755), 0);
    assert_int_equal(kace_write_file_durable(ctx, path, "x\n", 2), KACE_ERR_IO);
    assert_non_null(strstr(kace_errmsg(ctx), "cannot rename into place"));
    assert_int_equal(entries(dir), 1); /* the folder "taken" only */
    kace_ctx_free(&ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_writes_and_replaces),
        cmocka_unit_test(test_failures_leave_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
