# Shared by kace's MPS Prolog, Epilog and TaskProlog (sourced, POSIX sh).
#
# One MPS control daemon per node, shared by every job there that uses
# gres/mps or gres/shard: jobs that share a GPU must reach the same MPS
# server to run their kernels side by side (two servers on one GPU would
# time-slice it). Under $KACE_MPS_ROOT/<node>/:
#   pipe/          CUDA_MPS_PIPE_DIRECTORY of the daemon and of the jobs
#   log/           CUDA_MPS_LOG_DIRECTORY (control.log, server.log)
#   jobs/<job>     one file per job using the daemon: its MPS percentage;
#                  the last job's Epilog stops the daemon
#   lock           flock: Prologs and Epilogs of jobs starting and ending
#                  at once take turns
#
# Settings, from $KACE_MPS_CONF (default /etc/kace/mps.conf, "NAME=value"
# lines) or the environment:
#   KACE_MPS_CONTROL   the control program (default nvidia-cuda-mps-control)
#   KACE_MPS_ROOT      where the folders above go (default /run/kace-mps)
#   KACE_MPS_WAIT      seconds to wait for the daemon to start or stop (10)
# Slurm runs Prolog and Epilog without PATH: give full paths there.

PATH=${PATH:-/usr/sbin:/usr/bin:/sbin:/bin}
[ -n "${PATH##*/usr/bin*}" ] && PATH=$PATH:/usr/sbin:/usr/bin:/sbin:/bin
export PATH
conf=${KACE_MPS_CONF:-/etc/kace/mps.conf}
# shellcheck disable=SC1090
[ -r "$conf" ] && . "$conf"
KACE_MPS_CONTROL=${KACE_MPS_CONTROL:-nvidia-cuda-mps-control}
KACE_MPS_ROOT=${KACE_MPS_ROOT:-/run/kace-mps}
KACE_MPS_WAIT=${KACE_MPS_WAIT:-10}
node_dir=$KACE_MPS_ROOT/${SLURMD_NODENAME:-$(hostname -s)}
# shellcheck disable=SC2034  # used by the scripts that source this
job_file=$node_dir/jobs/${SLURM_JOB_ID:-none}

kace_mps_log() {
    logger -t kace-mps "job ${SLURM_JOB_ID:-?} on ${SLURMD_NODENAME:-?}: $*" 2>/dev/null
    echo "kace-mps: job ${SLURM_JOB_ID:-?}: $*" >>"$node_dir/log/kace-mps.log" 2>/dev/null
}

# True when a daemon answers on the node's pipe.
kace_mps_alive() {
    [ -p "$node_dir/pipe/control" ] || return 1
    echo get_server_list | CUDA_MPS_PIPE_DIRECTORY=$node_dir/pipe CUDA_MPS_LOG_DIRECTORY=$node_dir/log \
        timeout 5 "$KACE_MPS_CONTROL" >/dev/null 2>&1
}
