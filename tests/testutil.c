#include "testutil.h"

#include "kace/import.h"

#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

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

/* The groups fork_group started and kill_group has not yet ended. */
static pid_t groups[64];
static size_t n_groups;

static void kill_groups_at_exit(void)
{
    kill_groups(NULL);
}

pid_t fork_group(void)
{
    static bool at_exit;
    if (!at_exit)
        at_exit = atexit(kill_groups_at_exit) == 0;
    if (n_groups == sizeof groups / sizeof groups[0])
        fail_msg("fork_group: more than %zu groups at once", n_groups);
    pid_t parent = getpid();
    fflush(NULL); /* nothing buffered is written twice */
    pid_t pid = fork();
    if (pid < 0)
        fail_msg("fork: %s", strerror(errno));
    if (pid == 0) {
        n_groups = 0; /* the parent's groups are the parent's to end */
        setpgid(0, 0);
        /* The parent may have died before prctl: then nobody would kill us. */
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
            _exit(127);
        return 0;
    }
    setpgid(pid, pid); /* both sides: whichever runs first */
    groups[n_groups++] = pid;
    return pid;
}

void kill_group(pid_t pgid)
{
    for (size_t i = 0; i < n_groups; i++)
        if (groups[i] == pgid) {
            groups[i] = groups[--n_groups];
            break;
        }
    killpg(pgid, SIGKILL);
    while (waitpid(pgid, NULL, 0) < 0 && errno == EINTR)
        ;
}

int kill_groups(void **state)
{
    (void)state;
    while (n_groups > 0)
        kill_group(groups[n_groups - 1]);
    return 0;
}
