#!/bin/sh
# torch_allreduce.sh -- hora.torch on large tensors beside the C path and
# OpenMPI, on this host: each round runs, one after the other,
#   1. allreduce_perf (hora_alloc buffers: the C path)
#   2. torch_allreduce.py (hora.torch.allreduce_ of an ordinary tensor,
#      which libhora adopts into the rank's segment, and of an arena
#      tensor, hora.torch.arena_empty), then again with --adopt-size 0
#      (the ordinary tensor copied into the arena and back each time)
#   3. mpi_allreduce_perf under mpirun (when OpenMPI is there)
# all float32 sum, in place, NP ranks, the same sizes, and prints for each
# size the medians of the busbw (GB/s, for scale) and the median [min-max]
# of the per-round ratios to the C path (and of the C path to OpenMPI).
#
#   sh benchmarks/torch_allreduce.sh                 16M and 64M, 5 rounds
#   ROUNDS=3 sh benchmarks/torch_allreduce.sh -b 1M -e 64M -f 4
#
# Arguments (-b -e -f -w -n) go to all three programs (default
# -b 16M -e 64M -f 4 -w 5 -n 20). Environment: BUILD (build), PYTHON
# (/usr/bin/python3), NP (2), ROUNDS (5). Exit status: non-zero when a run
# failed.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top" || exit 1
BUILD=$(cd "${BUILD:-build}" 2>/dev/null && pwd) || {
  echo "torch_allreduce.sh: no build directory; run make" >&2; exit 1; }
PYTHON=${PYTHON:-/usr/bin/python3}
NP=${NP:-2}
ROUNDS=${ROUNDS:-5}
[ $# -eq 0 ] && set -- -b 16M -e 64M -f 4 -w 5 -n 20
export PYTHONPATH="$top/python${PYTHONPATH:+:$PYTHONPATH}"
export HORA_LIBRARY="$BUILD/lib/libhora.so"
"$PYTHON" -c 'import torch, hora.torch' 2>/dev/null || {
  echo "torch_allreduce.sh: $PYTHON cannot import torch and hora.torch" >&2
  exit 1; }
horarun=$BUILD/bin/horarun
mperf=$BUILD/benchmarks/mpi_allreduce_perf
if [ ! -x "$mperf" ] && command -v mpicc >/dev/null 2>&1; then
  mpicc -O2 -std=c11 -D_GNU_SOURCE benchmarks/peers/mpi_allreduce_perf.c \
    -o "$mperf" 2>/dev/null
fi
mflags=""
if [ -x "$mperf" ] && command -v mpirun >/dev/null 2>&1; then
  mflags="--oversubscribe"
  [ "$(id -u)" -eq 0 ] && mflags="--allow-run-as-root $mflags"
else
  echo "# OpenMPI's column skipped: no mpirun or mpicc (Debian: openmpi-bin libopenmpi-dev)"
  mperf=""
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/hora-bench.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM
rank0() { sed -n '/\[0\]<stdout>:/{s/^.*\[0\]<stdout>://;p;}'; }

failed=0
r=1
while [ "$r" -le "$ROUNDS" ]; do
  echo "== round $r of $ROUNDS (load $(cut -d' ' -f1 /proc/loadavg))"
  "$horarun" -np "$NP" "$BUILD/benchmarks/allreduce_perf" "$@" 2>&1 |
    rank0 > "$tmp/c.$r" || failed=1
  # size count type redop time algbw busbw wrong -> size busbw
  awk '$1 ~ /^[0-9]+$/ && NF >= 8 {print $1, $7}' "$tmp/c.$r" > "$tmp/cb.$r"
  "$horarun" -np "$NP" "$PYTHON" benchmarks/torch_allreduce.py "$@" 2>&1 |
    rank0 > "$tmp/t.$r" || failed=1
  # size ordinary-us busbw arena-us busbw ratio -> size ordinary arena
  awk '$1 ~ /^[0-9]+$/ && NF >= 6 {print $1, $3, $5}' "$tmp/t.$r" > "$tmp/tb.$r"
  grep -q WRONG "$tmp/t.$r" && { echo "wrong results:"; cat "$tmp/t.$r"; failed=1; }
  HORA_ADOPT_SIZE=0 "$horarun" -np "$NP" "$PYTHON" benchmarks/torch_allreduce.py "$@" 2>&1 |
    rank0 > "$tmp/x.$r" || failed=1
  awk '$1 ~ /^[0-9]+$/ && NF >= 6 {print $1, $3}' "$tmp/x.$r" > "$tmp/xb.$r"
  grep -q WRONG "$tmp/x.$r" && { echo "wrong results:"; cat "$tmp/x.$r"; failed=1; }
  if [ -n "$mperf" ]; then
    # shellcheck disable=SC2086 # mflags is a list of flags
    mpirun $mflags -np "$NP" "$mperf" "$@" > "$tmp/m.$r" 2>&1 || failed=1
    awk '$1 ~ /^[0-9]+$/ && NF >= 8 {print $1, $7}' "$tmp/m.$r" > "$tmp/mb.$r"
  else
    : > "$tmp/mb.$r"
  fi
  cat "$tmp/cb.$r" "$tmp/tb.$r" "$tmp/xb.$r" "$tmp/mb.$r" | sed 's/^/   /'
  [ -s "$tmp/cb.$r" ] && [ -s "$tmp/tb.$r" ] && [ -s "$tmp/xb.$r" ] || {
    echo "a run printed no table:"; cat "$tmp/c.$r" "$tmp/t.$r" "$tmp/x.$r"; failed=1; }
  r=$((r + 1))
done

# one line per round and size: size c ordinary arena mpi copied
r=1
while [ "$r" -le "$ROUNDS" ]; do
  awk -v m="$tmp/mb.$r" -v t="$tmp/tb.$r" -v x="$tmp/xb.$r" '
    BEGIN { while ((getline l < m) > 0) { split(l, a, " "); mb[a[1]] = a[2] }
            while ((getline l < t) > 0) { split(l, a, " "); to[a[1]] = a[2]; ta[a[1]] = a[3] }
            while ((getline l < x) > 0) { split(l, a, " "); tx[a[1]] = a[2] } }
    ($1 in to) && ($1 in tx) { print $1, $2, to[$1], ta[$1], ($1 in mb) ? mb[$1] : "-", tx[$1] }' \
    "$tmp/cb.$r"
  r=$((r + 1))
done > "$tmp/all"

echo
echo "hora.torch.allreduce_ beside the C path (allreduce_perf) and OpenMPI, $NP ranks, float32 sum, $ROUNDS rounds"
echo "busbw in GB/s (medians); ratios: median [min-max] of the rounds' ratios"
echo
echo "ordinary: adopted into the segment; copied: the same with --adopt-size 0"
echo
echo "| size | C path | torch ordinary | torch copied | torch arena | OpenMPI | ordinary / C | copied / C | arena / C | C / OpenMPI |"
echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
for size in $(cut -d' ' -f1 "$tmp/all" | sort -un); do
  awk -v s="$size" '
    function med(v, n,   i, j, x) {
      for (i = 2; i <= n; i++) { x = v[i]; for (j = i - 1; j >= 1 && v[j] > x; j--) v[j + 1] = v[j]; v[j + 1] = x }
      return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2 }
    function stat(v, n,   lo, hi, i) {
      if (!n) return "-"
      lo = hi = v[1]; for (i = 2; i <= n; i++) { if (v[i] < lo) lo = v[i]; if (v[i] > hi) hi = v[i] }
      return sprintf("%.2f [%.2f-%.2f]", med(v, n), lo, hi) }
    $1 == s { n++; c[n] = $2; o[n] = $3; a[n] = $4; x[n] = $6; ro[n] = $3 / $2; ra[n] = $4 / $2; rx[n] = $6 / $2
              if ($5 != "-") { k++; m[k] = $5; rm[k] = $2 / $5 } }
    END {
      mm = k ? sprintf("%.2f", med(m, k)) : "-"
      sz = s >= 1048576 ? sprintf("%d MiB", s / 1048576) : sprintf("%d B", s)
      printf "| %s | %.2f | %.2f | %.2f | %.2f | %s | %s | %s | %s | %s |\n", sz,
             med(c, n), med(o, n), med(x, n), med(a, n), mm, stat(ro, n), stat(rx, n),
             stat(ra, n), stat(rm, k) }' "$tmp/all"
done
exit $failed
