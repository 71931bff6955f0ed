/* libslurm, loaded when `kace slurm` reads the cluster (include/kace/dynlib.h).
 * Only in kace itself: the Slurm plugins get these functions from slurmctld. */
#ifdef KACE_HAVE_SLURM
#include <stdint.h>
#include <time.h>

#include <slurm/slurm.h>
#include <slurm/slurm_errno.h>

#include "kace/dynlib.h"
#include "kace_sonames.h"

#define FORWARDED(X)                                                                                             \
    X(int, slurm_load_jobs, (time_t update_time, job_info_msg_t * *resp, uint16_t show_flags),                  \
      (update_time, resp, show_flags), SLURM_ERROR)                                                              \
    X(int, slurm_load_node, (time_t update_time, node_info_msg_t * *resp, uint16_t show_flags),                 \
      (update_time, resp, show_flags), SLURM_ERROR)                                                              \
    X(int, slurm_load_partitions, (time_t update_time, partition_info_msg_t * *resp, uint16_t show_flags),      \
      (update_time, resp, show_flags), SLURM_ERROR)                                                              \
    X(int, slurm_load_reservations, (time_t update_time, reserve_info_msg_t * *resp), (update_time, resp),      \
      SLURM_ERROR)                                                                                               \
    X(int, slurm_get_errno, (void), (), SLURM_ERROR)                                                             \
    X(char *, slurm_strerror, (int errnum), (errnum), dl_lib.error)                                              \
    X(hostlist_t, slurm_hostlist_create, (const char *hostlist), (hostlist), NULL)                               \
    X(int, slurm_hostlist_count, (hostlist_t hl), (hl), 0)                                                       \
    X(int, slurm_hostlist_find, (hostlist_t hl, const char *hostname), (hl, hostname), -1)
#define FORWARDED_VOID(X)                                                                                        \
    X(void, slurm_populate_node_partitions, (node_info_msg_t * nodes, partition_info_msg_t * parts),            \
      (nodes, parts), 0)                                                                                         \
    X(void, slurm_free_job_info_msg, (job_info_msg_t * msg), (msg), 0)                                           \
    X(void, slurm_free_node_info_msg, (node_info_msg_t * msg), (msg), 0)                                         \
    X(void, slurm_free_partition_info_msg, (partition_info_msg_t * msg), (msg), 0)                               \
    X(void, slurm_free_reservation_info_msg, (reserve_info_msg_t * msg), (msg), 0)                               \
    X(void, slurm_hostlist_destroy, (hostlist_t hl), (hl), 0)
#define FUNCTIONS(X) FORWARDED(X) FORWARDED_VOID(X)

#ifdef KACE_DYNLIB_PROBE
void (*const kace_probe_slurm[])(void) = {FUNCTIONS(KACE_DL_ADDRESS) NULL};
#else
enum { FUNCTIONS(KACE_DL_INDEX) N_FUNCTIONS };
static const char *const dl_names[] = {FUNCTIONS(KACE_DL_NAME)};
static void *dl_fns[N_FUNCTIONS];
static kace_dynlib dl_lib = {
    .soname = KACE_SONAME_SLURM,
    .env = "KACE_SLURM_LIBRARY",
    .package = "libslurm38 (or the site's Slurm)",
    .needed_by = "kace slurm (reading the cluster)",
    .global = true, /* libslurm's plugins (auth/munge, hash/k12) use its symbols */
    .names = dl_names,
    .fns = dl_fns,
    .n = N_FUNCTIONS,
};
FORWARDED(KACE_DL_FORWARD)
FORWARDED_VOID(KACE_DL_FORWARD_VOID)
#endif
#endif
