#!/bin/sh
# multihost.sh -- hora's collectives between two hosts, beside OpenMPI's
# and beside what the link itself carries. The two hosts are network
# namespaces on this machine, joined by a bridge (tests/multihost/lib.sh:
# sshd in each, ssh between them as between real hosts). Runs, from a
# third namespace (the "client", as a user's machine):
#   iperf3       one TCP stream h1 -> h2 for IPERF_SECONDS, then one each
#                way at once (--bidir): the ceilings, one way and both ways
#   pingpong     8 B back and forth on one TCP connection h1 <-> h2
#                (benchmarks/pingpong.c, 2000 trips), with reads that poll
#                (the round trip small collectives are measured against:
#                no sleep and wake-up, as OpenMPI's and horad's polling)
#                and with blocking reads
#   then, for each collective, one after the other:
#   hora         horarun -H h1:1,h2:1 allreduce_perf
#   OpenMPI      mpirun -H h1:1,h2:1 mpi_allreduce_perf, over TCP between
#                the namespaces (btl tcp,self[,vader])
#   hora, OpenMPI  the same with -H h1:2,h2:2
# shows each table as it comes, then per collective one markdown table of
# bus bandwidth (GB/s) per size with the ratios hora/OpenMPI, hora/iperf3
# and hora's time over the round trip, and "#S" summary lines
# (benchmarks/medians.sh reads them; "#R rtt_us POLLING BLOCKING" gives the
# round trips' medians).
#
#   sh benchmarks/multihost.sh                  -b 1M -e 64M -f 4 (float32 sum)
#   sh benchmarks/multihost.sh -b 1M -e 256M -f 2 -n 10
#   COLLS="allgather alltoall" sh benchmarks/multihost.sh -b 16M -e 64M -f 4
#   SETS=2 sh benchmarks/multihost.sh -b 8 -e 64M -f 8
#
# Arguments go to both benchmark programs unchanged (none means
# "-b 1M -e 64M -f 4"); -c allgather|alltoall|reducescatter|broadcast
# measures another collective (default allreduce); without -c, each of
# COLLS in turn. -d and -o other than float32 / sum work too, but the
# title says what they are only for the default. Environment:
#   BUILD          build directory (default build)
#   COLLS          collectives, when the arguments have no -c (default
#                  allreduce)
#   IPERF_SECONDS  length of each iperf3 run (default 5)
#   SETS           K: four hosts h1..h4 of one rank each instead, K process
#                  sets of 4/K consecutive ranks (--sets K: each set alone,
#                  then all at once; with 2, {0,1} on h1,h2 and {2,3} on
#                  h3,h4), beside MPI_Comm_split's; and -H h1:2,h2:2, each
#                  set on a host of its own
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
SETS=${SETS:-}

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

# A -c among the arguments names the one collective to run.
given=""
prev=""
for a in "$@"; do
  case "$prev" in -c) given=$a ;; esac
  prev=$a
done
COLLS=${given:-${COLLS:-allreduce}}

if [ -n "$SETS" ]; then
  case "$SETS" in 1 | 2 | 4) ;; *) echo "multihost.sh: SETS must be 1, 2 or 4" >&2; exit 2 ;; esac
  mh_setup 4
  CONF1="4 h1:1,h2:1,h3:1,h4:1" # key 1: four hosts, sets across hosts
  SETARGS="--sets $SETS"
else
  mh_setup 2
  CONF1="2 h1:1,h2:1"
  SETARGS=""
fi
CONF2="4 h1:2,h2:2"
net="$MH_NET.0/24"
echo "== hosts: $MH_HOSTS ($(for h in $MH_HOSTS; do printf '%s ' "$(mh_addr "$h")"; done)); runs start on the client ($(mh_addr client))"

# ---- iperf3: the link's own TCP throughput ---------------------------------------
# iperf_run KEY IPERF3-ARGS: h1 -> h2; prints the receiver's lines
iperf_run() {
  _k=$1
  shift
  mh_exec h2 timeout $((IPERF_SECONDS + 40)) iperf3 -s -1 -B "$(mh_addr h2)" \
    >"$MH_TMP/iperf.$_k.server" 2>&1 &
  _srv=$!
  MH_BG="$MH_BG $_srv"
  t0=$(date +%s.%N)
  until mh_exec h2 ss -Hltn "sport = :5201" 2>/dev/null | grep -q 5201; do
    mh_past "$t0" 10 && break
    sleep 0.1
  done
  mh_exec h1 timeout $((IPERF_SECONDS + 30)) iperf3 -c h2 -t "$IPERF_SECONDS" -f g "$@" \
    >"$MH_TMP/iperf.$_k.client" 2>&1
  _rc=$?
  wait "$_srv" 2>/dev/null # -1: the server ends after one test
  MH_BG=$(echo "$MH_BG" | tr ' ' '\n' | grep -vx "$_srv" | tr '\n' ' ')
  sed -n '/^- - -/,$p' "$MH_TMP/iperf.$_k.client" | grep -E 'receiver|sender' | grep -v '^$'
  return $_rc
}
# the mean of the receivers' Gbit/s in file $1 (one line one way, two with --bidir)
iperf_gbit() {
  awk '/receiver/ { for (i = 2; i <= NF; i++) if ($i == "Gbits/sec") { s += $(i-1); n++ } }
       END { if (n) printf "%.3f", s / n }' "$1"
}
echo
iperf_uni=""
iperf_bi=""
if [ -n "$iperf_skip" ]; then
  echo "== iperf3: skipped: $iperf_skip"
else
  echo "== iperf3: one TCP stream h1 -> h2, ${IPERF_SECONDS} s"
  iperf_run uni
  irc=$?
  iperf_uni=$(iperf_gbit "$MH_TMP/iperf.uni.client")
  echo "== iperf3 --bidir: one TCP stream each way at once, ${IPERF_SECONDS} s"
  iperf_run bi --bidir
  brc=$?
  iperf_bi=$(iperf_gbit "$MH_TMP/iperf.bi.client")
  for k in uni bi; do
    eval "v=\$iperf_$k"
    if [ -z "$v" ]; then
      echo "multihost.sh: iperf3 ($k) failed (exit $irc $brc):"
      tail -n 5 "$MH_TMP/iperf.$k.client" "$MH_TMP/iperf.$k.server" | sed 's/^/    | /'
    fi
  done
fi

# ---- the round trip of one TCP connection ------------------------------------------
echo
rtt=""
pp=$BUILD/benchmarks/pingpong
if [ -x "$pp" ]; then
  echo "== TCP round trip h1 <-> h2: pingpong 8 B, 2000 trips, TCP_NODELAY"
  for mode in poll block; do
    flag=""
    [ $mode = poll ] && flag=-p
    mh_exec h2 timeout 60 "$pp" -s "$(mh_addr h2)" 5202 $flag >/dev/null 2>&1 &
    _srv=$!
    MH_BG="$MH_BG $_srv"
    mh_exec h1 timeout 60 "$pp" -c h2 5202 -b 8 $flag >"$MH_TMP/pingpong.$mode" 2>&1
    wait "$_srv" 2>/dev/null
    MH_BG=$(echo "$MH_BG" | tr ' ' '\n' | grep -vx "$_srv" | tr '\n' ' ')
    cat "$MH_TMP/pingpong.$mode"
  done
  rtt=$(awk '$1 == "rtt_us" { print $6 }' "$MH_TMP/pingpong.poll")
  rttb=$(awk '$1 == "rtt_us" { print $6 }' "$MH_TMP/pingpong.block")
  [ -n "$rtt" ] && echo "#R rtt_us $rtt ${rttb:--}"
else
  echo "== TCP round trip: skipped: $pp is missing (make)"
fi

# ---- hora and OpenMPI ----------------------------------------------------------------
# run_hora COLL KEY NP HOSTS: rank 0's table, without horarun's "[0]<stdout>:"
run_hora() {
  echo
  echo "== hora, $2: horarun -np $3 -H $4 ${HORARUN_ARGS:+$HORARUN_ARGS }allreduce_perf $ARGS"
  # shellcheck disable=SC2086
  HRUN_NOMARK=1 hrun "hora.$1.$2" 600 -np "$3" -H "$4" $HORARUN_ARGS "$hperf" $ARGS >/dev/null
  sed -n 's/^\[0\]<stdout>://p' "$MH_TMP/hora.$1.$2.out" >"$MH_TMP/hora.$1.$2.table"
  cat "$MH_TMP/hora.$1.$2.table"
  if [ "$RC" -ne 0 ]; then
    echo "multihost.sh: hora's run ($1, $2) failed: horarun exited with status $RC; last lines of its stderr:"
    tail -n 12 "$MH_TMP/hora.$1.$2.err" | sed 's/^/    | /'
    echo "failed" >"$MH_TMP/hora.$1.$2.failed"
    hora_failed=1
  fi
}

run_mpi() { # COLL KEY NP HOSTS
  echo
  if [ -n "$mpi_skip" ]; then
    echo "== mpi, $2: skipped: $mpi_skip"
    echo "skipped" >"$MH_TMP/mpi.$1.$2.failed"
    : >"$MH_TMP/mpi.$1.$2.table"
    return
  fi
  # ssh reads the client's /etc/ssh/ssh_config (lib.sh): key, no prompts
  mflags="--allow-run-as-root -np $3 -H $4 --mca plm_rsh_agent ssh"
  mflags="$mflags --mca btl self,vader,tcp --mca btl_tcp_if_include $net --mca oob_tcp_if_include $net"
  [ "$3" -ge "$(nproc)" ] && mflags="$mflags --mca mpi_yield_when_idle 1"
  echo "== mpi, $2: mpirun $mflags${MPIRUN_ARGS:+ $MPIRUN_ARGS} mpi_allreduce_perf $ARGS"
  # shellcheck disable=SC2086
  mh_client timeout 600 mpirun $mflags $MPIRUN_ARGS "$mperf" $ARGS \
    >"$MH_TMP/mpi.$1.$2.out" 2>&1
  mrc=$?
  grep -v '^\[' "$MH_TMP/mpi.$1.$2.out" | sed -n '/^#/,$p' >"$MH_TMP/mpi.$1.$2.table"
  cat "$MH_TMP/mpi.$1.$2.table"
  if [ $mrc -ne 0 ]; then
    echo "multihost.sh: OpenMPI's run ($1, $2) failed: mpirun exited with status $mrc; last lines:"
    tail -n 12 "$MH_TMP/mpi.$1.$2.out" | sed 's/^/    | /'
    echo "failed" >"$MH_TMP/mpi.$1.$2.failed"
    mpi_failed=1
  fi
}

hora_failed=0
mpi_failed=0
# the tables of one collective, side by side
table() { # COLL
  coll=$1
  title=$coll
  case " $ARGS " in *" -d "*) ;; *) title="$title float32" ;; esac
  case "$coll" in
  allreduce | all_reduce | reducescatter | reduce_scatter)
    case " $ARGS " in *" -o "*) ;; *) title="$title sum" ;; esac ;;
  esac
  ceiling="iperf3, one TCP stream h1 -> h2: ${iperf_uni:-no number} Gbit/s; both ways at once: ${iperf_bi:-no number} Gbit/s each way"
  for f in hora.1 hora.2 mpi.1 mpi.2; do
    [ -e "$MH_TMP/${f%%.*}.$coll.${f#*.}.table" ] || : >"$MH_TMP/${f%%.*}.$coll.${f#*.}.table"
    st=ok
    [ -e "$MH_TMP/${f%%.*}.$coll.${f#*.}.failed" ] && st=$(cat "$MH_TMP/${f%%.*}.$coll.${f#*.}.failed")
    echo "$st" >"$MH_TMP/$f.status"
  done
  echo
  if [ -n "$SETS" ]; then
    echo "== $title, $SETS sets: one set alone and all at once (times in us), hora and OpenMPI"
    echo
    awk -v coll="$coll" '
function isrow() { return NF == 12 && $1 ~ /^[0-9]+$/ && $5 ~ /^[0-9.]+$/ && $8 ~ /^[0-9.]+$/ }
function human(b) {
  if (b >= 1048576 && b % 1048576 == 0) return (b / 1048576) " MiB"
  if (b >= 1024 && b % 1024 == 0) return (b / 1024) " KiB"
  return b " B"
}
function cell(k, s) {
  if (!((k, s) in t)) return "- | - | -"
  return sprintf("%.1f | %.1f | %.2f", a[k, s], t[k, s], t[k, s] / a[k, s]) \
    (wr[k, s] != "0" && wr[k, s] != "N/A" ? " (" wr[k, s] " wrong)" : "")
}
FNR == 1 { k = FILENAME; sub(/.*\//, "", k); sub(/\.table$/, "", k); sub(/\.[a-z_]+\./, ".", k) }
!/^#/ && isrow() {
  s = $1
  if (!(s in seen)) { seen[s] = 1; order[++n] = s }
  a[k, s] = $5; t[k, s] = $8; wr[k, s] = $11
}
END {
  print "| size | hora 1/host alone | all | all/alone | OpenMPI 1/host alone | all | all/alone | hora 2/host alone | all | all/alone | OpenMPI 2/host alone | all | all/alone |"
  print "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
  for (i = 1; i <= n; i++) {
    s = order[i]
    printf "| %s | %s | %s | %s | %s |\n", human(s), cell("hora.1", s), cell("mpi.1", s), cell("hora.2", s), cell("mpi.2", s)
  }
  # for benchmarks/medians.sh: alone and all (us) of hora 1/host, OpenMPI
  # 1/host, hora 2/host, OpenMPI 2/host
  for (i = 1; i <= n; i++) {
    s = order[i]
    printf "#T %s %s", coll, s
    split("hora.1 mpi.1 hora.2 mpi.2", ks, " ")
    for (j = 1; j <= 4; j++)
      printf " %s %s", ((ks[j], s) in t) ? a[ks[j], s] : "-", ((ks[j], s) in t) ? t[ks[j], s] : "-"
    printf "\n"
  }
}' "$MH_TMP/hora.$coll.1.table" "$MH_TMP/mpi.$coll.1.table" "$MH_TMP/hora.$coll.2.table" "$MH_TMP/mpi.$coll.2.table"
    echo
    echo "1/host: $(echo "$CONF1" | cut -d' ' -f2) (each set across two hosts); 2/host: $(echo "$CONF2" | cut -d' ' -f2) (each set on a host of its own)."
    echo "all/alone: the time of all sets at once over that of one set alone (1: no slower; $SETS: as if one after the other)."
    return
  fi
  echo "== $title between two namespace hosts, bus bandwidth in GB/s ($ceiling; TCP round trip, polling reads: ${rtt:-not measured} us)"
  echo
  awk -v coll="$coll" -v gbit="$iperf_uni" -v bgbit="$iperf_bi" -v rtt="$rtt" -v st_h1="$(cat "$MH_TMP/hora.1.status")" \
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
# busbw of 2 ranks from the time, unrounded: the bytes that cross the link
# each way per second (broadcast: the root to the other)
function bus(k, s) {
  f = (coll ~ /^(allreduce|all_reduce|broadcast|bcast)$/) ? 1 : 0.5
  return s * f / t[k, s] / 1e3
}
FNR == 1 { k = FILENAME; sub(/.*\//, "", k); sub(/\.table$/, "", k); sub(/\.[a-z_]+\./, ".", k) }
!/^#/ && isrow() {
  s = $(NF-7)
  if (!(s in seen)) { seen[s] = 1; order[++n] = s }
  t[k, s] = $(NF-3); bw[k, s] = $(NF-1); wr[k, s] = $NF
}
END {
  oneway = coll ~ /^(broadcast|bcast)$/
  print "| size | hora 1/host | OpenMPI 1/host | hora 2/host | OpenMPI 2/host | hora/OpenMPI 1/host | hora/OpenMPI 2/host | hora 1/host / iperf3 | hora 1/host / iperf3 both ways | hora 1/host time / round trip | OpenMPI 1/host time / round trip |"
  print "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
  for (i = 1; i <= n; i++) {
    s = order[i]
    ri = rb = "-"
    if (gbit != "" && ("hora.1", s) in t) ri = sprintf("%.2f", bus("hora.1", s) / (gbit / 8))
    if (bgbit != "" && ("hora.1", s) in t && !oneway) rb = sprintf("%.2f", bus("hora.1", s) / (bgbit / 8))
    th = tm = "-"
    if (rtt != "" && ("hora.1", s) in t) th = sprintf("%.2f", t["hora.1", s] / rtt)
    if (rtt != "" && ("mpi.1", s) in t) tm = sprintf("%.2f", t["mpi.1", s] / rtt)
    printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", human(s),
      cell("hora.1", s, st_h1), cell("mpi.1", s, st_m1),
      cell("hora.2", s, st_h2), cell("mpi.2", s, st_m2),
      ratio("hora.1", "mpi.1", s), ratio("hora.2", "mpi.2", s), ri, rb, th, tm
  }
  if (n == 0) print "| (no rows: every run failed) | | | | | | | | | | |"
  # one line per size for benchmarks/medians.sh: times (us) of hora and
  # OpenMPI, 1/host and 2/host, busbw of hora 1/host, iperf3 (GB/s)
  for (i = 1; i <= n; i++) {
    s = order[i]
    printf "#S %s %s", coll, s
    split("hora.1 mpi.1 hora.2 mpi.2", ks, " ")
    for (j = 1; j <= 4; j++) printf " %s", ((ks[j], s) in t) ? t[ks[j], s] : "-"
    printf " %s %s %s\n", ("hora.1", s) in t ? sprintf("%.4f", bus("hora.1", s)) : "-",
      gbit != "" ? sprintf("%.4f", gbit / 8) : "-", (bgbit != "" && !oneway) ? sprintf("%.4f", bgbit / 8) : "-"
  }
}' "$MH_TMP/hora.$coll.1.table" "$MH_TMP/mpi.$coll.1.table" "$MH_TMP/hora.$coll.2.table" "$MH_TMP/mpi.$coll.2.table"
  echo
}

for coll in $COLLS; do
  if [ -n "$given" ]; then ARGS="$*"; else ARGS="-c $coll $*"; fi
  ARGS="$ARGS${SETARGS:+ $SETARGS}"
  # interleaved: each configuration's hora run right before OpenMPI's
  # shellcheck disable=SC2086
  run_hora "$coll" 1 $CONF1
  # shellcheck disable=SC2086
  run_mpi "$coll" 1 $CONF1
  # shellcheck disable=SC2086
  run_hora "$coll" 2 $CONF2
  # shellcheck disable=SC2086
  run_mpi "$coll" 2 $CONF2
done
for coll in $COLLS; do table "$coll"; done

if [ -z "$SETS" ]; then
  echo "1/host: 2 ranks, one per host; 2/host: 4 ranks, two per host. busbw = algbw x 2(n-1)/n"
  echo "for n ranks (nccl-tests; allgather, alltoall, reducescatter: (n-1)/n of the whole array;"
  echo "broadcast: 1); hora/OpenMPI is the inverse ratio of the times (same bytes,"
  echo "same ranks). hora/iperf3 uses 1/host, where busbw is what crosses the link each way"
  echo "(broadcast: one way); every collective but broadcast sends both ways at once, as"
  echo "iperf3 --bidir does. With 2/host busbw (allreduce: 1.5 x algbw) counts intra-host"
  echo "traffic too: the link carries ~algbw."
fi
[ "$hora_failed" = 1 ] && echo "hora: a run failed (see above); its columns say so."
[ "$mpi_failed" = 1 ] && echo "OpenMPI: a run failed (see above); its columns say so."
wrong=$(cat "$MH_TMP"/hora.*.table "$MH_TMP"/mpi.*.table 2>/dev/null |
  awk '!/^#/ && NF == 8 && $1 ~ /^[0-9]+$/ && $NF ~ /^[0-9]+$/ && $NF > 0 { n++ }
       !/^#/ && NF == 12 && $1 ~ /^[0-9]+$/ && $11 ~ /^[0-9]+$/ && $11 > 0 { n++ }
       END { print n + 0 }')
[ "$wrong" -gt 0 ] && echo "wrong results: $wrong rows counted wrong elements"
[ "$hora_failed" = 0 ] && [ "$mpi_failed" = 0 ] && [ "$wrong" -eq 0 ]
