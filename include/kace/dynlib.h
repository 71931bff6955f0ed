/* Optional shared libraries, loaded with dlopen the first time they are used.
 *
 * kace links only what every command needs (SQLite, cJSON, libc). The heavy
 * libraries (LAPACKE with its BLAS, libxgboost with libgomp and libstdc++,
 * libcurl with TLS and Kerberos, libmicrohttpd with GnuTLS, libslurm) used to
 * be loaded and relocated at every start: 51 libraries and ~9 ms before
 * main() for `kace predict`, which needs none of them. Now each is a small
 * forwarding file (lib/base/dl_lapacke.c, lib/base/dl_xgboost.c, cli/dl_curl.c,
 * cli/dl_mhd.c, cli/dl_slurm.c): it defines the library's own functions
 * (the callers are unchanged and compiled against the library's header), and
 * the first call loads the library and resolves every function it forwards.
 *
 * When a library cannot be loaded, the forwarding functions return the
 * library's own failure value (NULL, -1, an error code) and
 * kace_dynlib_failure() says which library, why, what needs it and which
 * Debian package has it; the CLI prints that line after the command's error.
 */
#ifndef KACE_DYNLIB_H
#define KACE_DYNLIB_H

#include <stdbool.h>
#include <stdatomic.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kace_dynlib {
    const char *soname;    /* what dlopen looks for, e.g. "libxgboost.so.0" */
    const char *env;       /* an environment variable that names another file (tests), or NULL */
    const char *package;   /* the Debian package that holds it */
    const char *needed_by; /* what needs it, for the error: "kace serve (HTTP)" */
    /* "NAME=VALUE" put in the environment while the library loads, unless NAME is
     * set already; taken out again after (programs kace starts never see it). */
    const char *load_env;
    bool global; /* RTLD_GLOBAL: for a library whose own plugins need its symbols (libslurm) */
    const char *const *names; /* the functions forwarded, n of them */
    void **fns;               /* filled in names' order by kace_dynlib_load */
    size_t n;
    atomic_int state; /* 0 not tried, 1 loaded, -1 failed; written once, under a lock */
    char error[512];
} kace_dynlib;

/* Loads lib once (thread-safe) and resolves all its functions: true when
 * they are all there. After a failure it stays failed and the message is in
 * lib->error (and kace_dynlib_failure()). */
bool kace_dynlib_load(kace_dynlib *lib);

/* The first failed load's message ("libxgboost.so.0 cannot be loaded: ...:
 * needed by ...; Debian package libxgboost0"), or NULL when none failed. */
const char *kace_dynlib_failure(void);


/* The forwarding files list their functions once, as
 *   #define FUNCTIONS(X) X(ret, name, (params), (args), value on failure) ...
 * and expand the list with these: an index per function, the names, the
 * forwarding definitions. Each file names its table dl_lib and its array dl_fns.
 * Built with KACE_DYNLIB_PROBE (packaging/dynlib_probe.c), a file instead takes
 * every real function's address, so that a program linked with the real
 * libraries shows which ones, and which symbols, kace uses (the .deb's Depends). */
#define KACE_DL_INDEX(ret, name, params, args, fail) KACE_DL_I_##name,
#define KACE_DL_NAME(ret, name, params, args, fail) #name,
#define KACE_DL_ADDRESS(ret, name, params, args, fail) (void (*)(void))name,
#define KACE_DL_FORWARD(ret, name, params, args, fail)                                                        \
    ret name params                                                                                           \
    {                                                                                                         \
        if (!kace_dynlib_load(&dl_lib))                                                                       \
            return fail;                                                                                      \
        return ((ret(*) params)dl_fns[KACE_DL_I_##name]) args;                                                \
    }
/* A function without a result: nothing happens when the library is missing. */
#define KACE_DL_FORWARD_VOID(ret, name, params, args, fail)                                                   \
    void name params                                                                                          \
    {                                                                                                         \
        if (kace_dynlib_load(&dl_lib))                                                                        \
            ((void(*) params)dl_fns[KACE_DL_I_##name]) args;                                                  \
    }

#ifdef __cplusplus
}
#endif

#endif
