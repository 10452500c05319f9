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
# With HOSTS=1, the ranks run on network namespace hosts of one rank each
# (tests/multihost/lib.sh; root, sshd): the 1-rank run on h1, the NP-rank
# run on h1..hNP, horarun started from the namespaces' client over ssh.
#
# Environment: BUILD (default build), PYTHON (default /usr/bin/python3),
# MODEL (resnet18), IMAGE_SIZE (64), BATCH (16), NP (2: the larger run),
# HOSTS (empty: this host; 1: one namespace host per rank), HORARUN_ARGS
# (extra horarun flags). Arguments are passed to the benchmark (e.g.
# --num-iters 5, --fp16-allreduce, --ddp, --torch-ddp). Exit status:
# non-zero when a run failed (not when the target is missed).
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top" || exit 1
BUILD=$(cd "${BUILD:-build}" 2>/dev/null && pwd) || {
  echo "pytorch_synthetic.sh: no build directory ${BUILD:-build}; run make" >&2; exit 1; }
PYTHON=${PYTHON:-/usr/bin/python3}
MODEL=${MODEL:-resnet18}
IMAGE_SIZE=${IMAGE_SIZE:-64}
BATCH=${BATCH:-16}
NP=${NP:-2}
HOSTS=${HOSTS:-}
HORARUN="$BUILD/bin/horarun"
[ -x "$HORARUN" ] || { echo "pytorch_synthetic.sh: $HORARUN is missing; run make" >&2; exit 1; }
[ -f "$BUILD/lib/libhora.so" ] || { echo "pytorch_synthetic.sh: $BUILD/lib/libhora.so is missing; run make" >&2; exit 1; }
export PYTHONPATH="$top/python${PYTHONPATH:+:$PYTHONPATH}"
export HORA_LIBRARY="${HORA_LIBRARY:-$BUILD/lib/libhora.so}"
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONUNBUFFERED=1
"$PYTHON" -c 'import torch, torchvision, hora.torch' 2>/dev/null || {
  echo "pytorch_synthetic.sh: $PYTHON cannot import torch, torchvision and hora.torch" >&2; exit 1; }

if [ -n "$HOSTS" ]; then
  HORA_TOP=$top
  export BUILD HORA_TOP
  . "$top/tests/multihost/lib.sh"
  mh_setup "$NP"
  tmp=$MH_TMP # (lib.sh removes it, and the hosts, at the end)
  where="1 namespace host per rank"
else
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/hora-bench.XXXXXX") || exit 1
  trap 'rm -rf "$tmp"' EXIT INT TERM
  where="this host"
fi

# launch NP ARGS...: horarun -np NP ARGS, here or from the hosts' client
launch() {
  _np=$1
  shift
  if [ -z "$HOSTS" ]; then
    "$HORARUN" -np "$_np" "$@"
    return
  fi
  _hl=""
  _i=1
  while [ "$_i" -le "$_np" ]; do
    _hl="$_hl${_hl:+,}h$_i:1"
    _i=$((_i + 1))
  done
  mh_client "$HORARUN" -np "$_np" -H "$_hl" "$@"
}

run() { # NP -> $tmp/np<NP>.log (rank 0's lines, prefix stripped)
  np=$1
  shift
  echo "== horarun -np $np ($where): $MODEL, ${IMAGE_SIZE}x$IMAGE_SIZE, batch $BATCH, 1 thread per rank"
  # shellcheck disable=SC2086
  launch "$np" ${HORARUN_ARGS:-} "$PYTHON" \
    "$top/examples/pytorch/pytorch_synthetic_benchmark.py" --no-cuda \
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
echo "== summary: $MODEL ${IMAGE_SIZE}x$IMAGE_SIZE batch $BATCH, CPU, 1 thread per rank, $where${*:+ ($*)}${HORARUN_ARGS:+ (horarun $HORARUN_ARGS)}"
awk -v t1="$t1" -v tn="$tn" -v np="$NP" -v w1="$w1" -v wn="$wn" '
function w(p) { return p == "" ? "not measured" : p "% of step time" }
BEGIN {
  printf "1 rank:   %8.1f img/sec total   (wait on hora: %s)\n", t1, w(w1)
  printf "%d ranks:  %8.1f img/sec total   (wait on hora: %s)\n", np, tn, w(wn)
  r = tn / (np * t1)
  printf "scaling efficiency %d-rank / (%d x 1-rank): %.2f (target >= 0.80; Horovod 0.28.1: ~0.52)\n", np, np, r
}'
