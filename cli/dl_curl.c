/* libcurl (with OpenSSL, nghttp2, libssh2, LDAP, Kerberos...), loaded when kace
 * talks to the Kubernetes API server (include/kace/dynlib.h): kace serve's
 * bind, kace agent, kace top. */
#define CURL_DISABLE_TYPECHECK /* curl.h would make curl_easy_setopt a macro */
#include <stdarg.h>

#include <curl/curl.h>

#include "kace/dynlib.h"
#include "kace_sonames.h"

#define FORWARDED(X)                                                                                             \
    X(CURLcode, curl_global_init, (long flags), (flags), CURLE_FAILED_INIT)                                     \
    X(CURL *, curl_easy_init, (void), (), NULL)                                                                  \
    X(CURLcode, curl_easy_perform, (CURL * curl), (curl), CURLE_FAILED_INIT)                                     \
    X(struct curl_slist *, curl_slist_append, (struct curl_slist * list, const char *data), (list, data), NULL)  \
    X(const char *, curl_easy_strerror, (CURLcode code), (code), dl_lib.error)
#define FORWARDED_VOID(X)                                                                                        \
    X(void, curl_easy_cleanup, (CURL * curl), (curl), 0)                                                         \
    X(void, curl_slist_free_all, (struct curl_slist * list), (list), 0)
/* Variadic: forwarded by hand below. */
#define BY_HAND(X)                                                                                               \
    X(CURLcode, curl_easy_setopt, (), (), 0)                                                                     \
    X(CURLcode, curl_easy_getinfo, (), (), 0)
#define FUNCTIONS(X) FORWARDED(X) FORWARDED_VOID(X) BY_HAND(X)

#ifdef KACE_DYNLIB_PROBE
void (*const kace_probe_curl[])(void) = {FUNCTIONS(KACE_DL_ADDRESS) NULL};
#else
enum { FUNCTIONS(KACE_DL_INDEX) N_FUNCTIONS };
static const char *const dl_names[] = {FUNCTIONS(KACE_DL_NAME)};
static void *dl_fns[N_FUNCTIONS];
static kace_dynlib dl_lib = {
    .soname = KACE_SONAME_CURL,
    .env = "KACE_CURL_LIBRARY",
    .package = "libcurl4",
    .needed_by = "talking to the Kubernetes API server (kace serve --kube-api, kace agent, kace top)",
    .names = dl_names,
    .fns = dl_fns,
    .n = N_FUNCTIONS,
};
FORWARDED(KACE_DL_FORWARD)
FORWARDED_VOID(KACE_DL_FORWARD_VOID)

/* The option's number says the type of its one argument, as in curl itself. */
CURLcode curl_easy_setopt(CURL *curl, CURLoption option, ...)
{
    if (!kace_dynlib_load(&dl_lib))
        return CURLE_FAILED_INIT;
    typedef void (*any_function)(void);
    CURLcode (*setopt)(CURL *, CURLoption, ...) = (CURLcode(*)(CURL *, CURLoption, ...))dl_fns[KACE_DL_I_curl_easy_setopt];
    va_list ap;
    va_start(ap, option);
    CURLcode rc;
    if (option < CURLOPTTYPE_OBJECTPOINT)
        rc = setopt(curl, option, va_arg(ap, long));
    else if (option < CURLOPTTYPE_FUNCTIONPOINT)
        rc = setopt(curl, option, va_arg(ap, void *));
    else if (option < CURLOPTTYPE_OFF_T)
        rc = setopt(curl, option, va_arg(ap, any_function));
    else if (option < CURLOPTTYPE_BLOB)
        rc = setopt(curl, option, va_arg(ap, curl_off_t));
    else
        rc = setopt(curl, option, va_arg(ap, void *));
    va_end(ap);
    return rc;
}

/* Every CURLINFO takes one pointer to where the answer goes. */
CURLcode curl_easy_getinfo(CURL *curl, CURLINFO info, ...)
{
    if (!kace_dynlib_load(&dl_lib))
        return CURLE_FAILED_INIT;
    CURLcode (*getinfo)(CURL *, CURLINFO, ...) = (CURLcode(*)(CURL *, CURLINFO, ...))dl_fns[KACE_DL_I_curl_easy_getinfo];
    va_list ap;
    va_start(ap, info);
    CURLcode rc = getinfo(curl, info, va_arg(ap, void *));
    va_end(ap);
    return rc;
}
#endif
