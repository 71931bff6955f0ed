#include "testutil.h"

#include "kace/import.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

const char *ref_path(const char *rel)
{
    static char buf[4096];
    snprintf(buf, sizeof buf, "%s/kace-v100/%s", KACE_SHARED_DATA, rel);
    return buf;
}

const char *scratch_dir(const char *test_name)
{
    static char buf[4096];
    char cmd[2 * sizeof buf + 64];
    snprintf(buf, sizeof buf, "%s/scratch/%s", KACE_BUILD_DIR, test_name);
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", buf, buf);
    if (system(cmd) != 0)
        fail_msg("cannot create %s", buf);
    return buf;
}

char *write_file(const char *dir, const char *name, const char *text)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *path = malloc(n);
    assert_non_null(path);
    snprintf(path, n, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    return path;
}

kace_status import_reference(kace_ctx *ctx, kace_store *store, const char *const *files, size_t n)
{
    /* The library orders the files by kind (kace_store_import_files). */
    char **paths = calloc(n ? n : 1, sizeof *paths);
    kace_status st = paths ? KACE_OK : kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n && !st; i++)
        if (!(paths[i] = strdup(ref_path(files[i]))))
            st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    if (!st)
        st = kace_store_import_files(ctx, store, (const char *const *)paths, n, NULL, NULL, NULL, NULL);
    for (size_t i = 0; paths && i < n; i++)
        free(paths[i]);
    free(paths);
    return st;
}
