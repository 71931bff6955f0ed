/* Failure injection for whole programs, as SQLite's test_malloc.c and jq's
 * inject_errors.c do for theirs: an LD_PRELOAD library that makes the Nth
 * allocation or the Nth write to a regular file fail, so that a test can
 * walk N = 1, 2, ... over a command and check that every failure ends in an
 * error message and leaves the store and the model file as they were.
 *
 *   KACE_FAIL_ALLOC=N   the Nth malloc/calloc/realloc/aligned allocation returns NULL (ENOMEM)
 *   KACE_FAIL_WRITE=N   the Nth write to a regular file fails (ENOSPC; fsync: EIO):
 *                       write, pwrite, pwrite64, writev, fwrite, fputs, fputc, fprintf,
 *                       vfprintf, fflush, fclose, fsync, fdatasync, ftruncate
 *   KACE_FAIL_LOG=FILE  appended at exit: "allocs A writes W failed F" (F: 1 when the
 *                       Nth call came and was failed, else 0)
 *   KACE_FAIL_MAIN_THREAD=1  count the main thread's calls only (under ASan: a thread's
 *                       start-up inside ASan allocates through malloc and aborts on NULL)
 * N = 0 (or unset) only counts. Counting starts when main starts (the loader's and
 * the libraries' start-up allocations are not the program's; nor are those inside
 * dlopen, where the libraries kace loads on first use start up: include/kace/dynlib.h,
 * and libgfortran, under LAPACK, exits on a failed allocation), covers every thread,
 * and stops in a child after fork; LD_PRELOAD and KACE_FAIL_* are taken out of the
 * environment at main, so programs that kace starts run without the shim.
 * One call fails, not every one after it (SQLite's "one-shot" mode).
 *
 * The real functions are found with dlsym(RTLD_NEXT), so under ASan (preloaded
 * first, with ASAN_OPTIONS=verify_asan_link_order=0) the calls that do not fail
 * reach ASan's allocator and its leak and access checks still hold. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

static atomic_long allocs, writes;
static long fail_alloc_at, fail_write_at;
static atomic_int failed;
static atomic_int armed;
static pid_t main_pid;
static pthread_t main_thread;
static int main_thread_only;
static char log_path[4096];

/* ---- the real functions ------------------------------------------------- */

static void *(*real_malloc)(size_t);
static void *(*real_calloc)(size_t, size_t);
static void *(*real_realloc)(void *, size_t);
static void (*real_free)(void *);
static int (*real_posix_memalign)(void **, size_t, size_t);
static void *(*real_aligned_alloc)(size_t, size_t);
static ssize_t (*real_write)(int, const void *, size_t);
static ssize_t (*real_pwrite)(int, const void *, size_t, off_t);
static ssize_t (*real_pwrite64)(int, const void *, size_t, off64_t);
static ssize_t (*real_writev)(int, const struct iovec *, int);
static size_t (*real_fwrite)(const void *, size_t, size_t, FILE *);
static int (*real_fputs)(const char *, FILE *);
static int (*real_fputc)(int, FILE *);
static int (*real_vfprintf)(FILE *, const char *, va_list);
static int (*real_fflush)(FILE *);
static int (*real_fclose)(FILE *);
static int (*real_fsync)(int);
static int (*real_fdatasync)(int);
static int (*real_ftruncate)(int, off_t);
static int (*real_ftruncate64)(int, off64_t);

/* dlsym may allocate before real_calloc is known: a small static arena. */
static _Alignas(16) char boot_arena[16384];
static size_t boot_used;
static int resolving;

static void *boot_alloc(size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if (boot_used + n > sizeof boot_arena)
        return NULL;
    void *p = boot_arena + boot_used;
    boot_used += n;
    return p;
}

static int in_boot(const void *p)
{
    return (const char *)p >= boot_arena && (const char *)p < boot_arena + sizeof boot_arena;
}

#define RESOLVE(name) real_##name = (__typeof__(real_##name))dlsym(RTLD_NEXT, #name)

static void resolve(void)
{
    if (real_malloc || resolving)
        return;
    resolving = 1;
    RESOLVE(calloc);
    RESOLVE(malloc);
    RESOLVE(realloc);
    RESOLVE(free);
    RESOLVE(posix_memalign);
    RESOLVE(aligned_alloc);
    RESOLVE(write);
    RESOLVE(pwrite);
    RESOLVE(pwrite64);
    RESOLVE(writev);
    RESOLVE(fwrite);
    RESOLVE(fputs);
    RESOLVE(fputc);
    RESOLVE(vfprintf);
    RESOLVE(fflush);
    RESOLVE(fclose);
    RESOLVE(fsync);
    RESOLVE(fdatasync);
    RESOLVE(ftruncate);
    RESOLVE(ftruncate64);
    resolving = 0;
}

/* ---- counting ------------------------------------------------------------- */

static _Thread_local int in_dlopen;

static int counting(void)
{
    /* After fork, the child is not the program under test. */
    return atomic_load(&armed) && !in_dlopen && getpid() == main_pid &&
           (!main_thread_only || pthread_equal(pthread_self(), main_thread));
}

EXPORT void *dlopen(const char *file, int mode)
{
    static void *(*real_dlopen)(const char *, int);
    if (!real_dlopen)
        real_dlopen = (void *(*)(const char *, int))dlsym(RTLD_NEXT, "dlopen");
    in_dlopen++;
    void *h = real_dlopen(file, mode);
    in_dlopen--;
    return h;
}

static int alloc_fails(void)
{
    if (!counting())
        return 0;
    long n = atomic_fetch_add(&allocs, 1) + 1;
    if (fail_alloc_at > 0 && n == fail_alloc_at) {
        atomic_store(&failed, 1);
        return 1;
    }
    return 0;
}

static int is_regular(int fd)
{
    struct stat st;
    return fd > 2 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
}

static int write_fails(int fd)
{
    if (!counting() || !is_regular(fd))
        return 0;
    long n = atomic_fetch_add(&writes, 1) + 1;
    if (fail_write_at > 0 && n == fail_write_at) {
        atomic_store(&failed, 1);
        return 1;
    }
    return 0;
}

static int stream_fails(FILE *f)
{
    return f && write_fails(fileno(f));
}

/* ---- allocation ------------------------------------------------------------ */

EXPORT void *malloc(size_t n)
{
    resolve();
    if (!real_malloc)
        return boot_alloc(n);
    if (alloc_fails()) {
        errno = ENOMEM;
        return NULL;
    }
    return real_malloc(n);
}

EXPORT void *calloc(size_t n, size_t size)
{
    resolve();
    if (!real_calloc)
        return boot_alloc(n * size); /* zeroed: the arena is static */
    if (alloc_fails()) {
        errno = ENOMEM;
        return NULL;
    }
    return real_calloc(n, size);
}

EXPORT void *realloc(void *p, size_t n)
{
    resolve();
    if (in_boot(p)) {
        void *q = malloc(n);
        size_t avail = (size_t)(boot_arena + sizeof boot_arena - (char *)p);
        if (q)
            memcpy(q, p, n < avail ? n : avail);
        return q;
    }
    if (n > 0 && alloc_fails()) {
        errno = ENOMEM;
        return NULL;
    }
    return real_realloc(p, n);
}

EXPORT void free(void *p)
{
    if (!p || in_boot(p))
        return;
    resolve();
    real_free(p);
}

EXPORT int posix_memalign(void **out, size_t align, size_t n)
{
    resolve();
    if (alloc_fails())
        return ENOMEM;
    return real_posix_memalign(out, align, n);
}

EXPORT void *aligned_alloc(size_t align, size_t n)
{
    resolve();
    if (alloc_fails()) {
        errno = ENOMEM;
        return NULL;
    }
    return real_aligned_alloc(align, n);
}

/* ---- writes ------------------------------------------------------------------ */

EXPORT ssize_t write(int fd, const void *buf, size_t n)
{
    resolve();
    if (write_fails(fd)) {
        errno = ENOSPC;
        return -1;
    }
    return real_write(fd, buf, n);
}

EXPORT ssize_t pwrite(int fd, const void *buf, size_t n, off_t at)
{
    resolve();
    if (write_fails(fd)) {
        errno = ENOSPC;
        return -1;
    }
    return real_pwrite(fd, buf, n, at);
}

EXPORT ssize_t pwrite64(int fd, const void *buf, size_t n, off64_t at)
{
    resolve();
    if (write_fails(fd)) {
        errno = ENOSPC;
        return -1;
    }
    return real_pwrite64(fd, buf, n, at);
}

EXPORT ssize_t writev(int fd, const struct iovec *iov, int n)
{
    resolve();
    if (write_fails(fd)) {
        errno = ENOSPC;
        return -1;
    }
    return real_writev(fd, iov, n);
}

EXPORT size_t fwrite(const void *p, size_t size, size_t n, FILE *f)
{
    resolve();
    if (stream_fails(f)) {
        errno = ENOSPC;
        return 0;
    }
    return real_fwrite(p, size, n, f);
}

EXPORT int fputs(const char *s, FILE *f)
{
    resolve();
    if (stream_fails(f)) {
        errno = ENOSPC;
        return EOF;
    }
    return real_fputs(s, f);
}

EXPORT int fputc(int c, FILE *f)
{
    resolve();
    if (stream_fails(f)) {
        errno = ENOSPC;
        return EOF;
    }
    return real_fputc(c, f);
}

EXPORT int vfprintf(FILE *f, const char *fmt, va_list ap)
{
    resolve();
    if (stream_fails(f)) {
        errno = ENOSPC;
        return -1;
    }
    return real_vfprintf(f, fmt, ap);
}

EXPORT int fprintf(FILE *f, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int r = vfprintf(f, fmt, ap);
    va_end(ap);
    return r;
}

EXPORT int fflush(FILE *f)
{
    resolve();
    if (stream_fails(f)) {
        errno = ENOSPC;
        return EOF;
    }
    return real_fflush(f);
}

EXPORT int fclose(FILE *f)
{
    resolve();
    int fail = stream_fails(f);
    int r = real_fclose(f); /* closed either way, as a real failing fclose does */
    if (fail) {
        errno = ENOSPC;
        return EOF;
    }
    return r;
}

EXPORT int fsync(int fd)
{
    resolve();
    if (write_fails(fd)) {
        errno = EIO;
        return -1;
    }
    return real_fsync(fd);
}

EXPORT int fdatasync(int fd)
{
    resolve();
    if (write_fails(fd)) {
        errno = EIO;
        return -1;
    }
    return real_fdatasync(fd);
}

EXPORT int ftruncate(int fd, off_t n)
{
    resolve();
    if (write_fails(fd)) {
        errno = EIO;
        return -1;
    }
    return real_ftruncate(fd, n);
}

EXPORT int ftruncate64(int fd, off64_t n)
{
    resolve();
    if (write_fails(fd)) {
        errno = EIO;
        return -1;
    }
    return real_ftruncate64(fd, n);
}

/* ---- arming at main ---------------------------------------------------------- */

static void report(void)
{
    if (!log_path[0] || getpid() != main_pid)
        return;
    atomic_store(&armed, 0);
    char line[128];
    int n = snprintf(line, sizeof line, "allocs %ld writes %ld failed %d\n", atomic_load(&allocs),
                     atomic_load(&writes), atomic_load(&failed));
    int fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) {
        if (real_write(fd, line, (size_t)n) < 0) {
            /* nothing to do: the test then sees no report and fails */
        }
        close(fd);
    }
}

static long env_number(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? strtol(v, NULL, 10) : 0;
}

static int (*real_main)(int, char **, char **);

static int wrapped_main(int argc, char **argv, char **envp)
{
    fail_alloc_at = env_number("KACE_FAIL_ALLOC");
    fail_write_at = env_number("KACE_FAIL_WRITE");
    main_thread_only = env_number("KACE_FAIL_MAIN_THREAD") != 0;
    main_thread = pthread_self();
    const char *lp = getenv("KACE_FAIL_LOG");
    snprintf(log_path, sizeof log_path, "%s", lp ? lp : "");
    /* Programs kace starts (workloads, the MPS daemon) run without the shim. */
    unsetenv("LD_PRELOAD");
    unsetenv("KACE_FAIL_ALLOC");
    unsetenv("KACE_FAIL_WRITE");
    unsetenv("KACE_FAIL_LOG");
    unsetenv("KACE_FAIL_MAIN_THREAD");
    main_pid = getpid();
    atexit(report);
    atomic_store(&armed, 1);
    return real_main(argc, argv, environ);
    (void)envp;
}

typedef int (*start_main_fn)(int (*)(int, char **, char **), int, char **, void (*)(void), void (*)(void),
                             void (*)(void), void *);

EXPORT int __libc_start_main(int (*main)(int, char **, char **), int argc, char **argv, void (*init)(void),
                             void (*fini)(void), void (*rtld_fini)(void), void *stack_end)
{
    resolve();
    start_main_fn real = (start_main_fn)dlsym(RTLD_NEXT, "__libc_start_main");
    real_main = main;
    return real(wrapped_main, argc, argv, init, fini, rtld_fini, stack_end);
}
