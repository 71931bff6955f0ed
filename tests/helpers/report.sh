#!/bin/sh
# A stand-in workload in shell: reports 10 samples every 0.1 s through
# $KACE_PROGRESS_FD without times (kace stamps them on receipt), then keeps a
# background sleep in its process group so that kace must end the group.
sleep 1000 &
n=0
while :; do
    echo "done $n" >&"$KACE_PROGRESS_FD"
    sleep 0.1
    n=$((n + 10))
done
