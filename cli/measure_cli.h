/* Pieces shared by kace measure and kace campaign (cli/cmd_measure.c). */
#ifndef KACE_MEASURE_CLI_H
#define KACE_MEASURE_CLI_H

#include <signal.h>

#include "kace/campaign.h"
#include "kace/measure.h"
#include "kace/mps.h"
#include "kace/gpu.h"
#include "kace/runner.h"

/* Set by SIGINT / SIGTERM / SIGHUP (the signal number) once the handlers are installed. */
extern volatile sig_atomic_t cli_interrupted;
void cli_install_interrupt_handlers(void);
/* 128 + the signal, the shell's convention for "ended by a signal". */
int cli_interrupted_exit(void);

/* Options both commands take. */
typedef struct measure_cli_options {
    double warmup_s, window_s, timeout_s;
    double stop_grace_max_s; /* kace_run_options.term_grace_max_s */
    const char *run_dir, *mps_control, *gpu, *log_path;
    bool quiet;       /* no progress bar even on a terminal */
    int log_fd;       /* workloads' stderr copied here (-1: none) */
    unsigned nvml_device; /* NVML index of the GPU the workloads use (MPS client check) */
} measure_cli_options;

void measure_cli_defaults(measure_cli_options *o);
/* Handles one of the shared long options (by its getopt code); returns false
 * when it is not one of them, sets *bad on a bad value. */
bool measure_cli_option(measure_cli_options *o, int code, const char *arg, const char *cmd, bool *bad);
/* Fills run options (warm-up, window, timeout, cancel flag, progress bar). */
void measure_cli_run_options(measure_cli_options *o, kace_run_options *run, const char *label);
/* Ends the progress bar line, if one was drawn. */
void measure_cli_progress_done(void);
kace_status measure_cli_start_mps(kace_ctx *ctx, const measure_cli_options *o, kace_mps **mps);
/* Takes kace's MPS run folder without a daemon (time-sliced runs only):
 * a daemon a killed kace left there is shut down first. */
kace_status measure_cli_open_mps(kace_ctx *ctx, const measure_cli_options *o, kace_mps **mps);
/* Quits the daemon before a time-sliced run (no-op when none runs); 0 or 1. */
int measure_cli_quit_mps(kace_ctx *ctx, kace_mps *mps, bool quiet);
/* Stops the daemon, printing what it took; returns 0 or 1. expect_running
 * false: a daemon that is not running (quit for time-slicing) is no news. */
int measure_cli_stop_mps(kace_ctx *ctx, kace_mps **mps, bool quiet, bool expect_running);
/* The GPU (kace_gpu_open: NVML, say) for checking that MPS clients are MPS
 * clients; NULL (with a note on stderr) when no GPU backend opens. */
kace_gpu *measure_cli_open_gpu(const measure_cli_options *o);
/* Prints one run's outcome (members, throughputs, reasons). */
void measure_cli_print_result(const kace_measure_spec *spec, const kace_measure_result *r, bool verbose);

#define MEASURE_CLI_LONGOPTS                                                                                   \
    {"warmup", required_argument, 0, 1001}, {"window", required_argument, 0, 1002},                           \
        {"timeout", required_argument, 0, 1003}, {"run-dir", required_argument, 0, 1004},                     \
        {"mps-control", required_argument, 0, 1005}, {"gpu", required_argument, 0, 1006},                     \
        {"log", required_argument, 0, 1007}, {"quiet", no_argument, 0, 1008},                                 \
        {"nvml-device", required_argument, 0, 1009}, {"stop-grace-max", required_argument, 0, 1010}

#define MEASURE_CLI_USAGE                                                                                     \
    "  --warmup S       seconds discarded after each workload's first progress record (default 10)\n"         \
    "  --window S       steady window, aligned across the workloads (default 30)\n"                           \
    "  --timeout S      the whole run (default warm-up + window + 120)\n"                                     \
    "  --run-dir DIR    MPS pipe/log folder and lock (default $TMPDIR or /tmp + /kace-mps-<uid>)\n"           \
    "  --mps-control P  the MPS control program (default $KACE_MPS_CONTROL, else nvidia-cuda-mps-control)\n"   \
    "  --gpu NAME       GPU name recorded with the runs (default: NVML's, under MPS); a workload\n"           \
    "                   profiled on another GPU is refused\n"                                                 \
    "  --log FILE       append the workloads' stderr to FILE\n"                                               \
    "  --quiet          no progress bar (it is drawn only when stderr is a terminal anyway)\n"              \
    "  --nvml-device N  NVML index of the GPU the workloads use (default 0): under MPS every client\n"       \
    "                   must appear in its MPS client list, and a server in the daemon's server list\n"       \
    "  --stop-grace-max S\n"                                                                                \
    "                   longest wait from kace's SIGTERM to SIGKILL (default 30): the wait is 3 x\n"         \
    "                   the workload's longest step, at least 3 s, so it stops at its next report\n"

#endif
