/* Helpers shared by the cmocka tests. */
#ifndef KACE_TESTUTIL_H
#define KACE_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <cmocka.h>

#include "kace/kace.h"
#include "kace/store.h"

/* Path of a reference file: KACE_SHARED_DATA "/kace-v100/" rel. Static buffer. */
const char *ref_path(const char *rel);
/* A fresh scratch folder under the build tree for this test; returns its path. */
const char *scratch_dir(const char *test_name);
/* Writes text to dir/name and returns the full path (static buffer, one slot per call site avoided: copy it). */
char *write_file(const char *dir, const char *name, const char *text);

/* Imports the reference files (paths relative to kace-v100/) into store in
 * one transaction, in the library's import order (any order given); on
 * failure nothing is stored and the message stays on ctx. */
kace_status import_reference(kace_ctx *ctx, kace_store *store, const char *const *files, size_t n);

/* Processes a test forks must not outlive it on any exit path: a failed
 * assert longjmps out of the test, a crash or ctest's timeout ends the test
 * process. fork_group() forks a child that leads a process group of its own
 * and gets SIGKILL when the test process dies (PR_SET_PDEATHSIG); it returns
 * as fork() does (0 in the child). kill_group() SIGKILLs a group and reaps its
 * leader. kill_groups(), a cmocka teardown (state unused), and an exit handler
 * kill every group fork_group started that is still there. */
pid_t fork_group(void);
void kill_group(pid_t pgid);
int kill_groups(void **state);

/* Asserts that status is KACE_OK, printing the context's message otherwise. */
#define assert_kace_ok(ctx, expr)                                                   \
    do {                                                                            \
        kace_status st__ = (expr);                                                  \
        if (st__ != KACE_OK)                                                        \
            fail_msg("%s failed: %s (%s)", #expr, kace_errmsg(ctx), kace_strerror(st__)); \
    } while (0)

#endif
