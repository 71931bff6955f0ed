/* A private NVIDIA MPS control daemon for one measurement session.
 *
 * kace starts its own `nvidia-cuda-mps-control -d` with its own
 * CUDA_MPS_PIPE_DIRECTORY and CUDA_MPS_LOG_DIRECTORY (under a run folder), so
 * it never talks to, or disturbs, a daemon someone else runs. Clients get
 * those two variables (kace_mps_client_env) plus their own
 * CUDA_MPS_ACTIVE_THREAD_PERCENTAGE. kace_mps_stop sends `quit` through the
 * control program, waits until every process of this instance (daemon and
 * MPS server: every process whose environment names our pipe folder, except
 * the process groups held at their CUDA start, kace_mps_hold) is gone,
 * and escalates to SIGTERM, then SIGKILL, when they do not leave.
 *
 * Each daemon start moves an earlier daemon's control.log / server.log to
 * *.old, so that the log lines quoted in messages are this daemon's.
 *
 * A daemon that is alive does not prove that MPS served a run: the server
 * starts when the first client connects. kace_mps_server_pids asks the
 * daemon which servers run (kace_measure checks it while clients run).
 *
 * kace never changes the GPU's compute mode, clocks or MIG layout.
 *
 * The run folder is locked (flock) while a session holds it, so two kace
 * processes never share a daemon; a daemon left behind by a kace that was
 * killed with SIGKILL is found there and shut down before a new one starts.
 */
#ifndef KACE_MPS_H
#define KACE_MPS_H

#include <stdbool.h>
#include <stddef.h>

#include "kace/kace.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KACE_MPS_CONTROL_ENV "KACE_MPS_CONTROL" /* overrides the control program (tests: a stand-in) */
#define KACE_MPS_DEFAULT_CONTROL "nvidia-cuda-mps-control"
#define KACE_MPS_PCT_ENV "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"

typedef struct kace_mps_options {
    const char *control;    /* control program (NULL: $KACE_MPS_CONTROL, else nvidia-cuda-mps-control in PATH) */
    const char *run_dir;    /* holds pipe/, log/ and the lock (NULL: $TMPDIR or /tmp, + /kace-mps-<uid>) */
    double start_timeout_s; /* -d must return and the daemon be seen within this (0: 10 s) */
    double quit_timeout_s;  /* after `quit`, before SIGTERM (0: 10 s) */
    double kill_grace_s;    /* SIGTERM -> SIGKILL (0: 3 s) */
} kace_mps_options;

typedef struct kace_mps kace_mps;

/* Takes the run folder (lock; a daemon left there by a killed kace is shut
 * down) without starting a daemon: what a time-sliced session holds so that
 * no MPS process of this instance runs while it measures. The control
 * program need not exist until kace_mps_restart. */
kace_status kace_mps_open(kace_ctx *ctx, const kace_mps_options *opt, kace_mps **out);

/* kace_mps_open, then starts the daemon. On failure nothing of it is left
 * running, the folder is released and the message says why (with the end
 * of the daemon's own log when there is one). */
kace_status kace_mps_start(kace_ctx *ctx, const kace_mps_options *opt, kace_mps **out);

/* The MPS server PIDs the daemon reports (`get_server_list` on the control
 * program's stdin; the answer is one PID per line, blank lines ignored):
 * up to max of them in pids, their count in *n (0: no server runs, e.g.
 * before the first client connected). Errors: the control program failed
 * (KACE_ERR_IO) or answered something else than PIDs (KACE_ERR_PARSE,
 * "get_server_list:LINE:COL: ..."). */
kace_status kace_mps_server_pids(kace_ctx *ctx, kace_mps *m, int *pids, size_t max, size_t *n);
/* The PIDs of the clients connected to MPS server server_pid
 * (get_client_list), as kace_mps_server_pids. kace started the daemon, so
 * they are PIDs of kace's own PID namespace, where NVML's may not be. */
kace_status kace_mps_client_pids(kace_ctx *ctx, kace_mps *m, int server_pid, int *pids, size_t max, size_t *n);
/* The last lines of the MPS server's log (else the control daemon's),
 * joined by " | " and prefixed with the file's name; "" when neither has
 * any. For messages that say why MPS did not serve a run. */
void kace_mps_server_log_tail(const kace_mps *m, char *out, size_t size);

/* "CUDA_MPS_PIPE_DIRECTORY=...", "CUDA_MPS_LOG_DIRECTORY=...", NULL: what
 * every client needs in its environment. Owned by m. */
const char *const *kace_mps_client_env(const kace_mps *m);
const char *kace_mps_pipe_dir(const kace_mps *m);
const char *kace_mps_log_dir(const kace_mps *m);
/* A process group kace started and holds at its CUDA start (the injection
 * library's gate, include/kace/pool.h): it has our pipe folder in its
 * environment but is no MPS client yet, so it is not a process of the
 * instance: kace_mps_alive does not count it and quitting the daemon
 * neither waits for it nor signals it (a time-sliced run may measure while
 * the next pool's members wait). Unhold it before its gate opens. False
 * when m is NULL, pgid <= 0 or 64 groups are held already. */
bool kace_mps_hold(kace_mps *m, int pgid);
void kace_mps_unhold(kace_mps *m, int pgid);
/* Whether a process of this instance is still alive (false: the daemon died, or m is NULL). */
bool kace_mps_alive(const kace_mps *m);

typedef struct kace_mps_stop_report {
    bool was_running;   /* a process of the instance was alive when stop began */
    bool quit_accepted; /* the control program delivered `quit` (exit status 0) */
    bool sent_sigterm, sent_sigkill; /* escalation kace needed */
    int n_processes;    /* processes of the instance seen when stop began */
} kace_mps_stop_report;

/* Shuts the daemon down (see the top of this file), releases the lock and
 * frees *m (set to NULL). Returns KACE_OK when every process of the instance
 * is gone, whatever it took (report says what); an error only when some
 * survived SIGKILL. report may be NULL. Safe on *m == NULL. */
kace_status kace_mps_stop(kace_ctx *ctx, kace_mps **m, kace_mps_stop_report *report);

/* Quits the daemon (as kace_mps_stop) but keeps m and its lock, e.g. before
 * a time-sliced run: an idle MPS server would hold a context on the GPU.
 * KACE_OK when no process of the instance is left. report may be NULL. */
kace_status kace_mps_quit(kace_ctx *ctx, kace_mps *m, kace_mps_stop_report *report);
/* Starts the daemon again when no process of the instance is alive (no-op
 * when it is). */
kace_status kace_mps_restart(kace_ctx *ctx, kace_mps *m);

/* Parses a list of MPS percentages "50,50" (1..100 each, k of them; k = 0:
 * any count up to max) into pct; origin names the input in messages
 * ("<origin>:1:<col>: ..."). */
kace_status kace_mps_pct_parse(kace_ctx *ctx, const char *text, const char *origin, int k, int max, int *pct,
                               int *n_out);
/* Same, for a list found at line:col0 of a larger input (messages say so). */
kace_status kace_mps_pct_parse_at(kace_ctx *ctx, const char *text, const char *origin, int line, int col0, int k,
                                  int max, int *pct, int *n_out);

#ifdef __cplusplus
}
#endif

#endif
