/* The files job_submit/kace reads inside slurmctld (kace.conf, the model
 * file, the store), opened so that none of them can block the refresher:
 * a FIFO with no writer blocks open(2) for ever, and a device or a FIFO
 * blocks read(2). Each is opened with O_NONBLOCK and checked with fstat;
 * anything but a regular file is refused with an error that says what it
 * is. `kace slurm` reads kace.conf the same way.
 */
#ifndef KACE_SLURM_FILES_H
#define KACE_SLURM_FILES_H

#include "kace/place.h"

/* Opens path read-only without blocking and checks that it is a regular
 * file; *fd receives the descriptor (blocking again, close-on-exec).
 * KACE_ERR_IO naming path and, for anything but a regular file, what it is
 * ("a FIFO", "a character device", ...); *refused is then set true (false
 * for other failures such as a missing file). what names the file's role in
 * the message ("configuration", "model file", "store"). */
kace_status kace_slurm_open_regular(kace_ctx *ctx, const char *path, const char *what, int *fd, bool *refused);

/* kace_place_config_load through kace_slurm_open_regular. */
kace_status kace_slurm_config_load(kace_ctx *ctx, const char *path, kace_place_config *cfg, bool *refused);

#endif
