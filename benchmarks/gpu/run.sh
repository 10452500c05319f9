#!/bin/sh
# run.sh -- the one prepared command for a machine with an NVIDIA GPU.
#
#   sh benchmarks/gpu/run.sh [PATH/TO/horovod/test/parallel/test_torch.py]
#
# Builds hora (in build-gpu/; libuv, libyaml and the libssl headers come
# from benchmarks/gpu/debs/ when the machine lacks them: fetch-debs.sh
# fills it where apt works), then, on this machine's GPUs:
#   1. the GPU and the CUDA stack: nvidia-smi, torch's CUDA, the driver
#   2. libhora's device buffers with the real driver (tests/integration/
#      it_cuda.c): every collective, streamed ones, mixed host and device
#      buffers, 64 at once, a group, a name used again, in a job of one and
#      at 2 ranks (each on GPU local_rank modulo the GPUs: ranks share a
#      GPU where there is one)
#   3. which ways of sharing device memory between processes the machine
#      allows (benchmarks/gpu/ipc_probe.c: legacy CUDA IPC, and the
#      virtual-memory API's file descriptors); reported, not judged
#   4. hora.torch on CUDA tensors (tests/python/workers/torch_cuda.py) at
#      1 and 2 ranks: every collective against the CPU's result, the
#      current stream, DistributedOptimizer and DistributedDataParallel
#   5. Horovod's own suite with HOROVOD_TEST_GPU=1, when its file is given
#      and pytest is at hand (tests/compat), at 2 ranks where there are 2
#      GPUs, else 1 (the suite puts each rank on GPU local_rank; SUITE_NP
#      chooses), in SHARDS (default 4) runs side by side; with LOGDIR set,
#      the failing tests' logs are kept in LOGDIR/suite-failures.txt
#   6. hora.torch.allreduce_ on CUDA tensors beside CPU and arena tensors,
#      8 B to 64 MiB, 2 ranks (benchmarks/torch_allreduce.py --cuda);
#      SKIP_BENCH=1 leaves it out
# Every step prints PASS/FAIL (or SKIP and why); the last line says how
# many failed. Meant to finish well under 8 minutes.
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top" || exit 1
B=$top/build-gpu
fails=0
step() { echo; echo "== $*"; }
result() { # NAME RC
  if [ "$2" -eq 0 ]; then echo "PASS $1"; else echo "FAIL $1 (exit $2)"; fails=$((fails + 1)); fi
}
PY=${PYTHON:-python3}

step "dependencies"
mkdir -p "$B"
if ! pkg-config --exists libuv yaml-0.1 libcrypto 2>/dev/null; then
  debs=$top/benchmarks/gpu/debs
  if ! ls "$debs"/*.deb >/dev/null 2>&1; then
    echo "FAIL: libuv, libyaml or libssl's headers are missing, and $debs has no .deb (run benchmarks/gpu/fetch-debs.sh where apt works)"
    exit 1
  fi
  root=$B/deps
  rm -rf "$root" && mkdir -p "$root"
  for f in "$debs"/*.deb; do
    if command -v dpkg-deb >/dev/null; then
      dpkg-deb -x "$f" "$root"
    else
      t=$(mktemp -d) && (cd "$t" && ar x "$f" && tar -xf data.tar.* -C "$root") && rm -rf "$t"
    fi
  done
  lib=$(dirname "$(find "$root" -name 'libuv.so*' | head -n 1)")
  export PKG_CONFIG_SYSROOT_DIR="$root"
  export PKG_CONFIG_LIBDIR="$lib/pkgconfig:$root/usr/share/pkgconfig"
  export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  echo "using the packages unpacked in $root"
fi
pkg-config --modversion libuv yaml-0.1 libcrypto || exit 1

step "build"
make -j"$(nproc)" BUILD="$B" all "$B/tests/it_cuda" >"$B/make.log" 2>&1
rc=$?
tail -n 3 "$B/make.log"
result build $rc
[ $rc -eq 0 ] || exit 1
"$B/bin/horad" --version
export PATH="$B/bin:$PATH"
export HORA_LIBRARY="$B/lib/libhora.so"
export PYTHONPATH="$top/python:$top/tests/python/workers${PYTHONPATH:+:$PYTHONPATH}"

step "the GPU and the CUDA stack"
nvidia-smi -L || echo "(no nvidia-smi)"
$PY -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "devices", torch.cuda.device_count(), "nccl", torch.cuda.nccl.version() if torch.cuda.is_available() else None)'
ngpu=$($PY -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)

step "libhora's device buffers with the real driver (it_cuda)"
unset FAKECUDA_LIB
timeout 120 env -u HORA_DAEMON_SOCKET "$B/tests/it_cuda" solo
result "it_cuda solo (a job of one)" $?
timeout 180 horarun -np 2 --arena-size 8M "$B/tests/it_cuda" matrix
result "it_cuda matrix, 2 ranks, 8 MiB arena (streamed ones too)" $?
timeout 180 horarun -np 2 "$B/tests/it_cuda" late
result "it_cuda late (driver loaded after hora_init)" $?

step "sharing device memory between processes (ipc_probe.c)"
cuda=${CUDA_HOME:-/usr/local/cuda}
if cc -O2 -I"$cuda/include" benchmarks/gpu/ipc_probe.c -o "$B/ipc_probe" \
    -L"$cuda/lib64/stubs" -lcuda; then
  timeout 60 "$B/ipc_probe"
  echo "(ipc_probe: $? of the 2 mechanisms failed)"
else
  result "ipc_probe build" 1
fi

step "hora.torch on CUDA tensors (torch_cuda.py)"
if [ "$ngpu" -gt 0 ]; then
  timeout 300 $PY tests/python/workers/torch_cuda.py
  result "torch_cuda alone" $?
  timeout 300 horarun -np 2 $PY tests/python/workers/torch_cuda.py
  result "torch_cuda, 2 ranks" $?
else
  echo "SKIP: torch sees no CUDA device"
fi

step "Horovod's suite, GPU cases"
if [ $# -ge 1 ] && [ -f "$1" ] && $PY -c 'import pytest' 2>/dev/null; then
  # SHARDS runs side by side, each a share of the tests (SHARD=i/N).
  # The suite puts rank r's tensors on GPU local_rank: one GPU per rank.
  snp=${SUITE_NP:-$([ "$ngpu" -ge 2 ] && echo 2 || echo 1)}
  echo "at -np $snp ($ngpu GPUs)"
  n=${SHARDS:-4} i=1
  rm -rf "$B/suite" && mkdir -p "$B/suite"
  while [ "$i" -le "$n" ]; do
    HOROVOD_TEST_GPU=1 SHARD=$i/$n BUILD="$B" PYTHON=$(command -v $PY) TIMEOUT=120 \
      LOGS="$B/suite/logs" sh tests/compat/run_horovod_suite.sh "$1" -np "$snp" \
      >"$B/suite/shard$i.out" 2>&1 &
    i=$((i + 1))
  done
  wait
  grep -hE '^(PASS|FAIL|SKIP|HANG) ' "$B"/suite/shard*.out | sort -k2 | grep -v '^PASS' || true
  cat "$B"/suite/shard*.out | awk '/ passed, .* hung of /{p+=$1; f+=$3; s+=$5; h+=$7; t+=$10}
    END{printf "%d passed, %d failed, %d skipped, %d hung of %d\n", p, f, s, h, t; exit (f + h > 0)}'
  result "Horovod's test_torch.py, HOROVOD_TEST_GPU=1, $snp rank(s)" $?
  if [ -n "${LOGDIR:-}" ]; then
    for f in $(grep -lE 'FAILED|Error' "$B"/suite/logs/*.log 2>/dev/null); do
      echo "==== $f"; tail -n 60 "$f"
    done >"$LOGDIR/suite-failures.txt" 2>&1
  fi
else
  echo "SKIP: give Horovod's test/parallel/test_torch.py (and have pytest) to run it"
fi

step "hora.torch.allreduce_ on CUDA, CPU and arena tensors, 2 ranks"
if [ -n "${SKIP_BENCH:-}" ]; then
  echo "SKIP: SKIP_BENCH is set"
elif [ "$ngpu" -gt 0 ]; then
  timeout 300 horarun -np 2 $PY benchmarks/torch_allreduce.py --cuda -b 8 -e 64M -f 8 -w 3 -n 10
  result "torch_allreduce --cuda" $?
else
  echo "SKIP: torch sees no CUDA device"
fi

echo
echo "$fails failed"
[ "$fails" -eq 0 ]
