/* libmicrohttpd (with GnuTLS), loaded when kace serve starts its HTTP server
 * (include/kace/dynlib.h): no other command pays for loading it. */
#include <stdarg.h>
#include <stdint.h>
#include <sys/socket.h>

#include <microhttpd.h>

#include "kace/dynlib.h"
#include "kace_sonames.h"

#define FORWARDED(X)                                                                                             \
    X(struct MHD_Response *, MHD_create_response_from_buffer,                                                    \
      (size_t size, void *buffer, enum MHD_ResponseMemoryMode mode), (size, buffer, mode), NULL)                 \
    X(enum MHD_Result, MHD_add_response_header, (struct MHD_Response * response, const char *header,             \
      const char *content), (response, header, content), MHD_NO)                                                 \
    X(enum MHD_Result, MHD_queue_response, (struct MHD_Connection * connection, unsigned int status_code,         \
      struct MHD_Response *response), (connection, status_code, response), MHD_NO)                               \
    X(const char *, MHD_lookup_connection_value, (struct MHD_Connection * connection, enum MHD_ValueKind kind,    \
      const char *key), (connection, kind, key), NULL)                                                           \
    X(MHD_socket, MHD_quiesce_daemon, (struct MHD_Daemon * daemon), (daemon), MHD_INVALID_SOCKET)
#define FORWARDED_VOID(X)                                                                                        \
    X(void, MHD_destroy_response, (struct MHD_Response * response), (response), 0)                               \
    X(void, MHD_stop_daemon, (struct MHD_Daemon * daemon), (daemon), 0)
/* Variadic: forwarded by hand below. */
#define BY_HAND(X)                                                                                               \
    X(struct MHD_Daemon *, MHD_start_daemon_va, (), (), NULL)                                                    \
    X(const union MHD_ConnectionInfo *, MHD_get_connection_info, (), (), NULL)                                   \
    X(const union MHD_DaemonInfo *, MHD_get_daemon_info, (), (), NULL)
#define FUNCTIONS(X) FORWARDED(X) FORWARDED_VOID(X) BY_HAND(X)

#ifdef KACE_DYNLIB_PROBE
void (*const kace_probe_mhd[])(void) = {FUNCTIONS(KACE_DL_ADDRESS) NULL};
#else
enum { FUNCTIONS(KACE_DL_INDEX) N_FUNCTIONS };
static const char *const dl_names[] = {FUNCTIONS(KACE_DL_NAME)};
static void *dl_fns[N_FUNCTIONS];
static kace_dynlib dl_lib = {
    .soname = KACE_SONAME_MHD,
    .env = "KACE_MHD_LIBRARY",
    .package = "libmicrohttpd12",
    .needed_by = "kace serve (its HTTP server)",
    .names = dl_names,
    .fns = dl_fns,
    .n = N_FUNCTIONS,
};
FORWARDED(KACE_DL_FORWARD)
FORWARDED_VOID(KACE_DL_FORWARD_VOID)

struct MHD_Daemon *MHD_start_daemon(unsigned int flags, uint16_t port, MHD_AcceptPolicyCallback apc, void *apc_cls,
                                    MHD_AccessHandlerCallback dh, void *dh_cls, ...)
{
    if (!kace_dynlib_load(&dl_lib))
        return NULL;
    typedef struct MHD_Daemon *(*start_va)(unsigned int, uint16_t, MHD_AcceptPolicyCallback, void *,
                                           MHD_AccessHandlerCallback, void *, va_list);
    va_list ap;
    va_start(ap, dh_cls);
    struct MHD_Daemon *d = ((start_va)dl_fns[KACE_DL_I_MHD_start_daemon_va])(flags, port, apc, apc_cls, dh, dh_cls, ap);
    va_end(ap);
    return d;
}

/* The information kinds kace asks for take no further argument. */
const union MHD_ConnectionInfo *MHD_get_connection_info(struct MHD_Connection *connection,
                                                        enum MHD_ConnectionInfoType info_type, ...)
{
    if (!kace_dynlib_load(&dl_lib))
        return NULL;
    typedef const union MHD_ConnectionInfo *(*get)(struct MHD_Connection *, enum MHD_ConnectionInfoType, ...);
    return ((get)dl_fns[KACE_DL_I_MHD_get_connection_info])(connection, info_type);
}

const union MHD_DaemonInfo *MHD_get_daemon_info(struct MHD_Daemon *daemon, enum MHD_DaemonInfoType info_type, ...)
{
    if (!kace_dynlib_load(&dl_lib))
        return NULL;
    typedef const union MHD_DaemonInfo *(*get)(struct MHD_Daemon *, enum MHD_DaemonInfoType, ...);
    return ((get)dl_fns[KACE_DL_I_MHD_get_daemon_info])(daemon, info_type);
}
#endif
