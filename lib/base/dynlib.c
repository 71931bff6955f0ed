/* Optional libraries through dlopen, on first use (include/kace/dynlib.h). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kace/dynlib.h"

static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;
static const char *first_failure; /* under load_lock; read after a failed load */

static bool fail(kace_dynlib *lib, const char *why)
{
    snprintf(lib->error, sizeof lib->error, "%s cannot be loaded (%s): %s needs it (Debian package %s)",
             lib->soname, why, lib->needed_by, lib->package);
    if (!first_failure)
        first_failure = lib->error;
    return false;
}

static bool load(kace_dynlib *lib)
{
    const char *path = lib->env ? getenv(lib->env) : NULL;
    if (!path || !*path)
        path = lib->soname;
    char name[64] = "";
    const char *eq = lib->load_env ? strchr(lib->load_env, '=') : NULL;
    if (eq && (size_t)(eq - lib->load_env) < sizeof name) {
        memcpy(name, lib->load_env, (size_t)(eq - lib->load_env));
        name[eq - lib->load_env] = '\0';
        if (getenv(name) || setenv(name, eq + 1, 0) != 0)
            name[0] = '\0'; /* the user's value stands */
    }
    dlerror();
    /* RTLD_LAZY: as the libraries were bound when they were linked. RTLD_LOCAL unless
     * the library's plugins look its symbols up in the global scope (libslurm's
     * auth_munge.so needs slurm_conf); kace's forwarding functions are not exported,
     * so they never stand in front of the library's own. */
    void *h = dlopen(path, RTLD_LAZY | (lib->global ? RTLD_GLOBAL : RTLD_LOCAL));
    if (name[0])
        unsetenv(name);
    if (!h) {
        const char *why = dlerror();
        return fail(lib, why ? why : path);
    }
    for (size_t i = 0; i < lib->n; i++) {
        lib->fns[i] = dlsym(h, lib->names[i]);
        if (!lib->fns[i]) {
            char why[256];
            snprintf(why, sizeof why, "%s has no function %s: too old a version?", path, lib->names[i]);
            dlclose(h);
            return fail(lib, why);
        }
    }
    return true; /* never closed: the functions stay in use until exit */
}

bool kace_dynlib_load(kace_dynlib *lib)
{
    int state = atomic_load_explicit(&lib->state, memory_order_acquire);
    if (state)
        return state > 0;
    pthread_mutex_lock(&load_lock);
    state = atomic_load_explicit(&lib->state, memory_order_relaxed);
    if (!state) {
        state = load(lib) ? 1 : -1;
        atomic_store_explicit(&lib->state, state, memory_order_release);
    }
    pthread_mutex_unlock(&load_lock);
    return state > 0;
}

const char *kace_dynlib_failure(void)
{
    pthread_mutex_lock(&load_lock);
    const char *msg = first_failure;
    pthread_mutex_unlock(&load_lock);
    return msg;
}
