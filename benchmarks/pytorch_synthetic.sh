#!/bin/sh
# pytorch_synthetic.sh -- scaling of hora.torch on the CPUs of this host.
#
# Runs examples/pytorch/pytorch_synthetic_benchmark.py (Horovod's synthetic
# benchmark) with resnet18 on 64x64 images, batch 16, on the CPU:
#   1. one rank with one thread  (horarun -np 1, OMP_NUM_THREADS=1, --num-threads 1)
#   2. two ranks with one thread each (horarun -np 2, same flags)
# and prints the 1-rank total img/sec, the 2-rank total, the scaling
# efficiency 2-rank / (2 x 1-rank) (target >= 0.80; Horovod 0.28.1 reached
# about 0.52 on a 2-core machine) and the share of step time the ranks
# waited on hora. Each run's full output is shown as it goes.
#
# Environment: BUILD (default build), PYTHON (default /usr/bin/python3),
# MODEL (resnet18), IMAGE_SIZE (64), BATCH (16), NP (2: the larger run),
# HORARUN_ARGS (extra horarun flags). Arguments are passed to the benchmark
# (e.g. --num-iters 5). Exit status: non-zero when a run failed (not when
# the target is missed).
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top" || exit 1
BUILD=${BUILD:-build}
PYTHON=${PYTHON:-/usr/bin/python3}
MODEL=${MODEL:-resnet18}
IMAGE_SIZE=${IMAGE_SIZE:-64}
BATCH=${BATCH:-16}
NP=${NP:-2}
HORARUN="$BUILD/bin/horarun"
[ -x "$HORARUN" ] || { echo "pytorch_synthetic.sh: $HORARUN is missing; run make" >&2; exit 1; }
[ -f "$BUILD/lib/libhora.so" ] || { echo "pytorch_synthetic.sh: $BUILD/lib/libhora.so is missing; run make" >&2; exit 1; }
export PYTHONPATH="$top/python${PYTHONPATH:+:$PYTHONPATH}"
export HORA_LIBRARY="${HORA_LIBRARY:-$top/$BUILD/lib/libhora.so}"
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONUNBUFFERED=1
"$PYTHON" -c 'import torch, torchvision, hora.torch' 2>/dev/null || {
  echo "pytorch_synthetic.sh: $PYTHON cannot import torch, torchvision and hora.torch" >&2; exit 1; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/hora-bench.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM

run() { # NP -> $tmp/np<NP>.log (rank 0's lines, prefix stripped)
  np=$1
  shift
  echo "== horarun -np $np: $MODEL, ${IMAGE_SIZE}x$IMAGE_SIZE, batch $BATCH, 1 thread per rank"
  # shellcheck disable=SC2086
  "$HORARUN" -np "$np" ${HORARUN_ARGS:-} "$PYTHON" \
    examples/pytorch/pytorch_synthetic_benchmark.py --no-cuda \
    --model "$MODEL" --image-size "$IMAGE_SIZE" --batch-size "$BATCH" \
    --num-threads 1 "$@" >"$tmp/np$np.raw" 2>&1
  rc=$?
  sed -n 's/^\[0\]<stdout>://p' "$tmp/np$np.raw" | tee "$tmp/np$np.log"
  if [ $rc -ne 0 ]; then
    echo "pytorch_synthetic.sh: the $np-rank run failed (exit $rc):" >&2
    tail -n 20 "$tmp/np$np.raw" >&2
    exit 1
  fi
}
total() { sed -n 's/^Total img\/sec on [0-9]* [CG]PU(s): \([0-9.]*\).*/\1/p' "$1"; }
wait_pct() { sed -n 's/^Wait on hora: \([0-9.]*\)%.*/\1/p' "$1"; }

run 1 "$@"
run "$NP" "$@"
t1=$(total "$tmp/np1.log")
tn=$(total "$tmp/np$NP.log")
w1=$(wait_pct "$tmp/np1.log")
wn=$(wait_pct "$tmp/np$NP.log")
[ -n "$t1" ] && [ -n "$tn" ] || { echo "pytorch_synthetic.sh: no 'Total img/sec' line" >&2; exit 1; }
echo
echo "== summary: $MODEL ${IMAGE_SIZE}x$IMAGE_SIZE batch $BATCH, CPU, 1 thread per rank"
awk -v t1="$t1" -v tn="$tn" -v np="$NP" -v w1="$w1" -v wn="$wn" 'BEGIN {
  printf "1 rank:   %8.1f img/sec total   (wait on hora %s%% of step time)\n", t1, w1
  printf "%d ranks:  %8.1f img/sec total   (wait on hora %s%% of step time)\n", np, tn, wn
  r = tn / (np * t1)
  printf "scaling efficiency %d-rank / (%d x 1-rank): %.2f (target >= 0.80; Horovod 0.28.1: ~0.52)\n", np, np, r
}'
