#!/bin/sh
# multihost.sh -- hora's allreduce between two hosts, beside OpenMPI's and
# beside what the link itself carries. The two hosts are network namespaces
# on this machine, joined by a bridge (tests/multihost/lib.sh: sshd in
# each, ssh between them as between real hosts). Runs, from a third
# namespace (the "client", as a user's machine):
#   iperf3       one TCP stream h1 -> h2 for IPERF_SECONDS: the ceiling
#   hora         horarun -H h1:1,h2:1 and -H h1:2,h2:2 allreduce_perf
#   OpenMPI      mpirun -H h1:1,h2:1 and -H h1:2,h2:2 mpi_allreduce_perf,
#                over TCP between the namespaces (btl tcp,self[,vader])
# shows each table as it comes, then one markdown table of bus bandwidth
# (GB/s) per size with the ratios hora/OpenMPI and hora/iperf3.
#
#   sh benchmarks/multihost.sh                  -b 1M -e 64M -f 4 (float32 sum)
#   sh benchmarks/multihost.sh -b 1M -e 256M -f 2 -n 10
#
# Arguments go to both benchmark programs unchanged (none means
# "-b 1M -e 64M -f 4"); -c allgather|alltoall|reducescatter|broadcast
# measures another collective (default allreduce); -d and -o other than
# float32 / sum work too, but the title says what they are only for the
# default. Environment:
#   BUILD          build directory (default build)
#   IPERF_SECONDS  length of the iperf3 run (default 5)
#   HORARUN_ARGS   extra horarun flags (e.g. "--arena-size 512M")
#   MPIRUN_ARGS    extra mpirun flags
# Needs root (namespaces), sshd, iperf3, mpirun (Debian: openssh-server
# iperf3 openmpi-bin libopenmpi-dev); without root/namespaces/sshd it says
# why and exits 77. A part that fails is reported and its columns show
# "failed"; the others still run. Exit status: non-zero when the hora or
# MPI runs failed or counted wrong elements.
#
# Every "host" shares this machine's cores and memory: the numbers compare
# runtimes on one link, they are not what two real machines would do. Where
# the processes outnumber the cores, OpenMPI is told to yield when idle
# (mpi_yield_when_idle 1; busy polling would starve the other host).
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top" || exit 1
HORA_TOP=$top
BUILD=$(cd "${BUILD:-build}" 2>/dev/null && pwd) || {
  echo "multihost.sh: no build directory ${BUILD:-build}; run make first" >&2
  exit 1
}
export BUILD HORA_TOP
[ $# -eq 0 ] && set -- -b 1M -e 64M -f 4
IPERF_SECONDS=${IPERF_SECONDS:-5}

. "$top/tests/multihost/lib.sh"

hperf=$BUILD/benchmarks/allreduce_perf
mperf=$BUILD/benchmarks/mpi_allreduce_perf
for f in "$HORARUN" "$HORAD" "$hperf"; do
  if [ ! -x "$f" ]; then
    echo "multihost.sh: $f is missing; run 'make' first" >&2
    exit 1
  fi
done

mpi_skip=""
if ! command -v mpirun >/dev/null 2>&1; then
  mpi_skip="mpirun not found (Debian: apt-get install openmpi-bin libopenmpi-dev)"
elif ! mpirun --version 2>&1 | grep -q "Open MPI"; then
  mpi_skip="mpirun is not OpenMPI's"
elif [ ! -x "$mperf" ]; then
  if command -v mpicc >/dev/null 2>&1; then
    mkdir -p "$BUILD/benchmarks" &&
      mpicc -O2 -std=c11 -D_GNU_SOURCE benchmarks/peers/mpi_allreduce_perf.c \
        -o "$mperf" || mpi_skip="building $mperf with mpicc failed"
  else
    mpi_skip="$mperf is missing and mpicc not found"
  fi
fi
iperf_skip=""
command -v iperf3 >/dev/null 2>&1 || iperf_skip="iperf3 not found (Debian: apt-get install iperf3)"

mh_setup 2
net="$MH_NET.0/24"
echo "== two hosts: h1 ($(mh_addr h1)), h2 ($(mh_addr h2)); runs start on the client ($(mh_addr client))"

# ---- iperf3: the link's own TCP throughput ---------------------------------------
echo
iperf_gbit=""
if [ -n "$iperf_skip" ]; then
  echo "== iperf3: skipped: $iperf_skip"
else
  echo "== iperf3: one TCP stream h1 -> h2, ${IPERF_SECONDS} s"
  mh_exec h2 iperf3 -s -1 -B "$(mh_addr h2)" >"$MH_TMP/iperf.server" 2>&1 &
  MH_BG="$MH_BG $!"
  t0=$(date +%s.%N)
  until mh_exec h2 ss -Hltn "sport = :5201" 2>/dev/null | grep -q 5201; do
    mh_past "$t0" 10 && break
    sleep 0.1
  done
  mh_exec h1 timeout $((IPERF_SECONDS + 30)) iperf3 -c h2 -t "$IPERF_SECONDS" -f g \
    >"$MH_TMP/iperf.client" 2>&1
  irc=$?
  sed -n '/^\[ ID\]/,$p' "$MH_TMP/iperf.client"
  iperf_gbit=$(awk '/receiver/ { for (i = 2; i <= NF; i++) if ($i == "Gbits/sec") v = $(i-1) } END { print v }' \
    "$MH_TMP/iperf.client")
  if [ $irc -ne 0 ] || [ -z "$iperf_gbit" ]; then
    echo "multihost.sh: iperf3 failed (exit $irc):"
    tail -n 5 "$MH_TMP/iperf.client" "$MH_TMP/iperf.server" | sed 's/^/    | /'
    iperf_gbit=""
  fi
fi

# ---- hora -----------------------------------------------------------------------------
# run_hora KEY NP HOSTS: rank 0's table, without horarun's "[0]<stdout>:"
run_hora() {
  echo
  echo "== hora, $1: horarun -np $2 -H $3 ${HORARUN_ARGS:+$HORARUN_ARGS }allreduce_perf $ARGS"
  # shellcheck disable=SC2086
  HRUN_NOMARK=1 hrun "hora.$1" 600 -np "$2" -H "$3" $HORARUN_ARGS "$hperf" $ARGS >/dev/null
  sed -n 's/^\[0\]<stdout>://p' "$MH_TMP/hora.$1.out" >"$MH_TMP/hora.$1.table"
  cat "$MH_TMP/hora.$1.table"
  if [ "$RC" -ne 0 ]; then
    echo "multihost.sh: hora's run ($1) failed: horarun exited with status $RC; last lines of its stderr:"
    tail -n 12 "$MH_TMP/hora.$1.err" | sed 's/^/    | /'
    echo "failed" >"$MH_TMP/hora.$1.failed"
    hora_failed=1
  fi
}
ARGS="$*"
hora_failed=0
run_hora 1 2 h1:1,h2:1
run_hora 2 4 h1:2,h2:2

# ---- OpenMPI ----------------------------------------------------------------------------
run_mpi() { # KEY NP HOSTS
  echo
  if [ -n "$mpi_skip" ]; then
    echo "== mpi, $1: skipped: $mpi_skip"
    echo "skipped" >"$MH_TMP/mpi.$1.failed"
    : >"$MH_TMP/mpi.$1.table"
    return
  fi
  # ssh reads the client's /etc/ssh/ssh_config (lib.sh): key, no prompts
  mflags="--allow-run-as-root -np $2 -H $3 --mca plm_rsh_agent ssh"
  mflags="$mflags --mca btl self,vader,tcp --mca btl_tcp_if_include $net --mca oob_tcp_if_include $net"
  [ "$2" -ge "$(nproc)" ] && mflags="$mflags --mca mpi_yield_when_idle 1"
  echo "== mpi, $1: mpirun $mflags${MPIRUN_ARGS:+ $MPIRUN_ARGS} mpi_allreduce_perf $ARGS"
  # shellcheck disable=SC2086
  mh_client timeout 600 mpirun $mflags $MPIRUN_ARGS "$mperf" $ARGS \
    >"$MH_TMP/mpi.$1.out" 2>&1
  mrc=$?
  grep -v '^\[' "$MH_TMP/mpi.$1.out" | sed -n '/^#/,$p' >"$MH_TMP/mpi.$1.table"
  cat "$MH_TMP/mpi.$1.table"
  if [ $mrc -ne 0 ]; then
    echo "multihost.sh: OpenMPI's run ($1) failed: mpirun exited with status $mrc; last lines:"
    tail -n 12 "$MH_TMP/mpi.$1.out" | sed 's/^/    | /'
    echo "failed" >"$MH_TMP/mpi.$1.failed"
    mpi_failed=1
  fi
}
mpi_failed=0
run_mpi 1 2 h1:1,h2:1
run_mpi 2 4 h1:2,h2:2

# ---- the table ----------------------------------------------------------------------------
# A data row ends with: size count type redop time algbw busbw #wrong.
echo
coll=allreduce
prev=""
for a in $ARGS; do
  case "$prev" in -c) coll=$a ;; esac
  prev=$a
done
title=$coll
case " $ARGS " in *" -d "*) ;; *) title="$title float32" ;; esac
case "$coll" in
allreduce | all_reduce | reducescatter | reduce_scatter)
  case " $ARGS " in *" -o "*) ;; *) title="$title sum" ;; esac ;;
esac
if [ -n "$iperf_gbit" ]; then
  ceiling="iperf3, one TCP stream h1 -> h2: $iperf_gbit Gbit/s = $(awk -v g="$iperf_gbit" 'BEGIN { printf "%.2f", g / 8 }') GB/s"
else
  ceiling="iperf3: no number"
fi
echo "== $title between two namespace hosts, bus bandwidth in GB/s ($ceiling)"
echo
for f in hora.1 hora.2 mpi.1 mpi.2; do
  [ -e "$MH_TMP/$f.table" ] || : >"$MH_TMP/$f.table"
  st=ok
  [ -e "$MH_TMP/$f.failed" ] && st=$(cat "$MH_TMP/$f.failed")
  echo "$st" >"$MH_TMP/$f.status"
done
awk -v gbit="$iperf_gbit" -v st_h1="$(cat "$MH_TMP/hora.1.status")" \
  -v st_h2="$(cat "$MH_TMP/hora.2.status")" -v st_m1="$(cat "$MH_TMP/mpi.1.status")" \
  -v st_m2="$(cat "$MH_TMP/mpi.2.status")" '
function isrow() {
  return NF >= 8 && $(NF-7) ~ /^[0-9]+$/ && $(NF-6) ~ /^[0-9]+$/ &&
         $(NF-3) ~ /^[0-9.]+$/ && $(NF-1) ~ /^[0-9.]+$/
}
function human(b) {
  if (b >= 1073741824 && b % 1073741824 == 0) return (b / 1073741824) " GiB"
  if (b >= 1048576 && b % 1048576 == 0) return (b / 1048576) " MiB"
  if (b >= 1024 && b % 1024 == 0) return (b / 1024) " KiB"
  return b " B"
}
function cell(k, s, st) {
  if ((k, s) in bw) return sprintf("%.2f", bw[k, s]) (wr[k, s] != "0" && wr[k, s] != "N/A" ? " (" wr[k, s] " wrong)" : "")
  return st == "ok" ? "-" : st
}
function ratio(a, b, s) { # time ratio b/a: same bytes and ranks
  if ((a, s) in t && (b, s) in t && t[a, s] > 0) return sprintf("%.2f", t[b, s] / t[a, s])
  return "-"
}
FNR == 1 { k = FILENAME; sub(/.*\//, "", k); sub(/\.table$/, "", k) }
!/^#/ && isrow() {
  s = $(NF-7)
  if (!(s in seen)) { seen[s] = 1; order[++n] = s }
  t[k, s] = $(NF-3); bw[k, s] = $(NF-1); wr[k, s] = $NF
}
END {
  print "| size | hora 1/host | OpenMPI 1/host | hora 2/host | OpenMPI 2/host | hora/OpenMPI 1/host | hora/OpenMPI 2/host | hora 1/host / iperf3 |"
  print "|---:|---:|---:|---:|---:|---:|---:|---:|"
  for (i = 1; i <= n; i++) {
    s = order[i]
    ri = "-"
    if (gbit != "" && ("hora.1", s) in bw) ri = sprintf("%.2f", bw["hora.1", s] / (gbit / 8))
    printf "| %s | %s | %s | %s | %s | %s | %s | %s |\n", human(s),
      cell("hora.1", s, st_h1), cell("mpi.1", s, st_m1),
      cell("hora.2", s, st_h2), cell("mpi.2", s, st_m2),
      ratio("hora.1", "mpi.1", s), ratio("hora.2", "mpi.2", s), ri
  }
  if (n == 0) print "| (no rows: every run failed) | | | | | | | |"
}' "$MH_TMP/hora.1.table" "$MH_TMP/mpi.1.table" "$MH_TMP/hora.2.table" "$MH_TMP/mpi.2.table"
echo
echo "1/host: 2 ranks, one per host; 2/host: 4 ranks, two per host. busbw = algbw x 2(n-1)/n"
echo "for n ranks (nccl-tests; allgather, alltoall, reducescatter: (n-1)/n of the whole array;"
echo "broadcast: 1); hora/OpenMPI is the inverse ratio of the times (same bytes,"
echo "same ranks). hora/iperf3 uses 1/host, where busbw is what crosses the link each way;"
echo "with 2/host busbw (allreduce: 1.5 x algbw) counts intra-host traffic too: the link carries ~algbw."
[ "$hora_failed" = 1 ] && echo "hora: a run failed (see above); its columns say so."
[ "$mpi_failed" = 1 ] && echo "OpenMPI: a run failed (see above); its columns say so."
wrong=$(cat "$MH_TMP"/hora.*.table "$MH_TMP"/mpi.*.table 2>/dev/null |
  awk '!/^#/ && NF >= 8 && $(NF-7) ~ /^[0-9]+$/ && $NF ~ /^[0-9]+$/ && $NF > 0 { n++ } END { print n + 0 }')
[ "$wrong" -gt 0 ] && echo "wrong results: $wrong rows counted wrong elements"
[ "$hora_failed" = 0 ] && [ "$mpi_failed" = 0 ] && [ "$wrong" -eq 0 ]
