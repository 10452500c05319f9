#!/bin/sh
# run.sh -- hora's collectives beside OpenMPI's: for each collective, runs
# allreduce_perf -c COLL under horarun and mpi_allreduce_perf -c COLL under
# mpirun with the same sweep, shows both tables as they come, then one
# merged table:
#   size | hora time, busbw | mpi time, busbw | busbw hora/mpi
# and at the end one summary of the ratios at 16 and 64 MiB.
#
#   sh benchmarks/run.sh                    -b 8 -e 64M -f 2 on 2 ranks,
#                                           all five collectives
#   sh benchmarks/run.sh -c allgather -b 1M -e 64M -f 4
#   NP=4 COLLS="allreduce alltoall" sh benchmarks/run.sh -b 8 -e 1M -f 4
#   SETS=2 sh benchmarks/run.sh -c allreduce   two process sets of 2 ranks,
#                                           each alone, then both at once
#
# Arguments go to both programs unchanged (see benchmarks/README.md); none
# means "-b 8 -e 64M -f 2". With a -c among them, only that collective
# runs; otherwise each of COLLS, with "-c COLL" put first. Environment:
#   BUILD         build directory (default build)
#   NP            ranks (default 2; with SETS, 2 per set)
#   SETS          K: both programs get --sets K (K process sets of NP/K
#                 ranks); the tables then show each set alone, all at
#                 once, and together/alone
#   COLLS         collectives (default: allreduce allgather alltoall
#                 reducescatter broadcast)
#   RATIO_SIZES   the sizes (bytes) of the summary (default 16M and 64M)
#   HORARUN_ARGS  extra horarun flags, e.g. "--arena-size 512M"
#   MPIRUN_ARGS   extra mpirun flags
# Without mpirun/mpicc (or for a dtype MPI lacks) the MPI half is skipped
# with a note. Exit status: non-zero when either benchmark failed (a failed
# hora call, or #wrong > 0) for any collective; a skipped MPI run does not
# count.
BUILD=${BUILD:-build}
SETS=${SETS:-}
if [ -n "$SETS" ]; then NP=${NP:-$((2 * SETS))}; else NP=${NP:-2}; fi
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top" || exit 1
BUILD=$(cd "$BUILD" 2>/dev/null && pwd) || {
  echo "run.sh: no build directory $BUILD; run make first" >&2
  exit 1
}
[ $# -eq 0 ] && set -- -b 8 -e 64M -f 2
[ -n "$SETS" ] && set -- "$@" --sets "$SETS"
COLLS=${COLLS:-allreduce allgather alltoall reducescatter broadcast}
RATIO_SIZES=${RATIO_SIZES:-16777216 67108864}

# A -c among the arguments names the one collective to run.
given=""
prev=""
for a in "$@"; do
  case "$prev" in -c) given=$a ;; esac
  case "$a" in -c?*) given=${a#-c} ;; esac
  prev=$a
done
[ -n "$given" ] && COLLS=$given

horarun=$BUILD/bin/horarun
hperf=$BUILD/benchmarks/allreduce_perf
mperf=$BUILD/benchmarks/mpi_allreduce_perf
for f in "$horarun" "$hperf"; do
  if [ ! -x "$f" ]; then
    echo "run.sh: $f is missing; run 'make' (or 'make bench') first" >&2
    exit 1
  fi
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/hora-bench.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM

# ---- MPI: can it run? --------------------------------------------------------
mpi_skip=""
case " $* " in
*" -d float16 "* | *" -d bfloat16 "* | *" -d half "* | *" -d bf16 "*)
  mpi_skip="MPI has no float16/bfloat16" ;;
esac
if [ -z "$mpi_skip" ] && ! command -v mpirun >/dev/null 2>&1; then
  mpi_skip="mpirun not found (Debian: apt-get install openmpi-bin libopenmpi-dev)"
fi
if [ -z "$mpi_skip" ] && [ ! -x "$mperf" ]; then
  if command -v mpicc >/dev/null 2>&1; then
    mkdir -p "$BUILD/benchmarks" &&
      mpicc -O2 -std=c11 -D_GNU_SOURCE benchmarks/peers/mpi_allreduce_perf.c \
        -o "$mperf" || mpi_skip="building $mperf with mpicc failed"
  else
    mpi_skip="$mperf is missing and mpicc not found"
  fi
fi
mflags=""
if [ -z "$mpi_skip" ] && mpirun --version 2>&1 | grep -q "Open MPI"; then
  mflags="--oversubscribe"
  [ "$(id -u)" -eq 0 ] && mflags="--allow-run-as-root $mflags"
fi

# run_one COLL ARGS...: both programs, then the merged table; the tables
# stay in $tmp/hora.COLL.out and $tmp/mpi.COLL.out for the summary.
failed=0
run_one() {
  coll=$1
  shift
  hout=$tmp/hora.$coll.out
  mout=$tmp/mpi.$coll.out
  # horarun prefixes each line with "[rank]<stdout>:"; keep rank 0's stdout
  # (the table) without it, drop the other ranks' stdout, and pass
  # everything else (stderr, horarun's own messages) through as it is.
  echo
  echo "== hora: $horarun -np $NP ${HORARUN_ARGS:+$HORARUN_ARGS }allreduce_perf $*"
  {
    # shellcheck disable=SC2086 # HORARUN_ARGS is a list of flags
    "$horarun" -np "$NP" $HORARUN_ARGS "$hperf" "$@" 2>&1
    echo $? >"$tmp/hora.rc"
  } | sed -n -e '/\[0\]<stdout>:/{s/^.*\[0\]<stdout>://;p;d;}' \
             -e '/<stdout>:/!p' | tee "$hout"
  hrc=$(cat "$tmp/hora.rc")
  if [ "$hrc" -ne 0 ]; then
    echo "run.sh: hora's allreduce_perf ($coll) exited with status $hrc"
    failed=1
  fi

  echo
  if [ -n "$mpi_skip" ]; then
    echo "== mpi: skipped: $mpi_skip"
    : >"$mout"
  else
    echo "== mpi: mpirun $mflags${MPIRUN_ARGS:+ $MPIRUN_ARGS} -np $NP mpi_allreduce_perf $*"
    {
      # shellcheck disable=SC2086
      mpirun $mflags $MPIRUN_ARGS -np "$NP" "$mperf" "$@" 2>&1
      echo $? >"$tmp/mpi.rc"
    } | tee "$mout"
    mrc=$(cat "$tmp/mpi.rc")
    if [ "$mrc" -ne 0 ]; then
      echo "run.sh: mpi_allreduce_perf ($coll) exited with status $mrc"
      failed=1
    fi
  fi

  echo
  if [ -n "$SETS" ]; then
    merge_sets "$coll" "$@"
    return
  fi
  # A data row ends with: size count type redop time algbw busbw #wrong.
  echo "== $coll, hora vs mpi, $NP ranks: $*"
  awk '
function isrow() {
  return NF >= 8 && $(NF-7) ~ /^[0-9]+$/ && $(NF-6) ~ /^[0-9]+$/ &&
         $(NF-3) ~ /^[0-9.]+$/ && $(NF-1) ~ /^[0-9.]+$/
}
FNR == 1 { file = FILENAME ~ /\/hora\.[a-z_]+\.out$/ ? 1 : 2 }
/Avg bus bandwidth/ { avg[file] = $NF }
!/^#/ && isrow() {
  s = $(NF-7)
  if (!(s in seen)) { seen[s] = 1; order[++n] = s; type[s] = $(NF-5); op[s] = $(NF-4) }
  t[file, s] = $(NF-3); bw[file, s] = $(NF-1); wr[file, s] = $NF
}
END {
  printf "# %10s  %8s  %5s | %10s %9s %6s | %10s %9s %6s | %9s\n",
    "size", "type", "redop", "hora time", "busbw", "#wrong",
    "mpi time", "busbw", "#wrong", "busbw"
  printf "# %10s  %8s  %5s | %10s %9s %6s | %10s %9s %6s | %9s\n",
    "(B)", "", "", "(us)", "(GB/s)", "", "(us)", "(GB/s)", "", "hora/mpi"
  for (i = 1; i <= n; i++) {
    s = order[i]
    ht = (1, s) in t ? sprintf("%10.2f %9.2f %6s", t[1, s], bw[1, s], wr[1, s]) \
                     : sprintf("%10s %9s %6s", "-", "-", "-")
    mt = (2, s) in t ? sprintf("%10.2f %9.2f %6s", t[2, s], bw[2, s], wr[2, s]) \
                     : sprintf("%10s %9s %6s", "-", "-", "-")
    # Same bytes and ranks on both sides, so the busbw ratio is the
    # inverse time ratio; it stays meaningful where busbw rounds to 0.00.
    r = ((1, s) in t && (2, s) in t && t[1, s] > 0) ? \
        sprintf("%8.2fx", t[2, s] / t[1, s]) : sprintf("%9s", "-")
    printf "  %10s  %8s  %5s | %s | %s | %s\n", s, type[s], op[s], ht, mt, r
  }
  printf "# Avg bus bandwidth (GB/s): hora %s, mpi %s\n",
    (1 in avg) ? avg[1] : "-", (2 in avg) ? avg[2] : "-"
}' "$hout" "$mout"
}

# merge_sets COLL ARGS...: the --sets tables side by side. A data row:
# size count type redop time algbw busbw time algbw busbw #wrong ratio
# (one set alone, then all sets at once, then together/alone).
merge_sets() {
  coll=$1
  shift
  echo "== $coll, $SETS sets of $((NP / SETS)) ranks, hora vs mpi: $*"
  awk '
function isrow() {
  return NF == 12 && $1 ~ /^[0-9]+$/ && $5 ~ /^[0-9.]+$/ && $8 ~ /^[0-9.]+$/
}
FNR == 1 { file = FILENAME ~ /\/hora\.[a-z_]+\.out$/ ? 1 : 2 }
!/^#/ && isrow() {
  s = $1
  if (!(s in seen)) { seen[s] = 1; order[++n] = s; type[s] = $3; op[s] = $4 }
  a[file, s] = $5; t[file, s] = $8; wr[file, s] = $11
}
END {
  printf "# %10s  %8s  %5s | %9s %9s %8s %6s | %9s %9s %8s %6s | %9s\n",
    "size", "type", "redop", "hora", "hora", "together", "#wrong",
    "mpi", "mpi", "together", "#wrong", "together"
  printf "# %10s  %8s  %5s | %9s %9s %8s %6s | %9s %9s %8s %6s | %9s\n",
    "(B)", "", "", "alone(us)", "all(us)", "/alone", "",
    "alone(us)", "all(us)", "/alone", "", "hora/mpi"
  for (i = 1; i <= n; i++) {
    s = order[i]
    for (f = 1; f <= 2; f++)
      c[f] = (f, s) in t ? sprintf("%9.2f %9.2f %7.2fx %6s", a[f, s], t[f, s], \
                                   t[f, s] / a[f, s], wr[f, s]) \
                         : sprintf("%9s %9s %8s %6s", "-", "-", "-", "-")
    # busbw of all sets at once, hora over mpi: the inverse time ratio
    r = ((1, s) in t && (2, s) in t && t[1, s] > 0) ? \
        sprintf("%8.2fx", t[2, s] / t[1, s]) : sprintf("%9s", "-")
    printf "  %10s  %8s  %5s | %s | %s | %s\n", s, type[s], op[s], c[1], c[2], r
  }
}' "$hout" "$mout"
}

for coll in $COLLS; do
  case "$coll" in
  allreduce | allgather | alltoall | reducescatter | broadcast) ;;
  all_reduce | all_gather | all_to_all | reduce_scatter | bcast) ;;
  *)
    echo "run.sh: unknown collective '$coll' (allreduce allgather alltoall reducescatter broadcast)" >&2
    exit 2
    ;;
  esac
  if [ -n "$given" ]; then
    run_one "$coll" "$@"
  else
    run_one "$coll" -c "$coll" "$@"
  fi
done

# ---- the summary: busbw at RATIO_SIZES -------------------------------------------
echo
if [ -n "$SETS" ]; then
  echo "== $SETS sets of $((NP / SETS)) ranks, at $RATIO_SIZES bytes: all sets at once over one alone, in this run: $*"
  for coll in $COLLS; do
    awk -v coll="$coll" -v sizes="$RATIO_SIZES" '
FNR == 1 { file = FILENAME ~ /\/hora\.[a-z_]+\.out$/ ? 1 : 2 }
!/^#/ && NF == 12 && $1 ~ /^[0-9]+$/ { a[file, $1] = $5; t[file, $1] = $8 }
END {
  k = split(sizes, sz, " ")
  for (i = 1; i <= k; i++) {
    s = sz[i]
    h = (1, s) in t ? sprintf("%7.2fx", t[1, s] / a[1, s]) : sprintf("%8s", "-")
    m = (2, s) in t ? sprintf("%7.2fx", t[2, s] / a[2, s]) : sprintf("%8s", "-")
    if (!((1, s) in t) && !((2, s) in t)) continue
    printf "  %-13s %10s | together/alone: hora %s | mpi %s\n", coll, s, h, m
  }
}' "$tmp/hora.$coll.out" "$tmp/mpi.$coll.out"
  done
  [ "$failed" -eq 0 ]
  exit
fi
echo "== busbw (GB/s) at $RATIO_SIZES bytes, $NP ranks, hora vs mpi in this run: $*"
for coll in $COLLS; do
  awk -v coll="$coll" -v sizes="$RATIO_SIZES" '
function isrow() {
  return NF >= 8 && $(NF-7) ~ /^[0-9]+$/ && $(NF-6) ~ /^[0-9]+$/ &&
         $(NF-3) ~ /^[0-9.]+$/ && $(NF-1) ~ /^[0-9.]+$/
}
FNR == 1 { file = FILENAME ~ /\/hora\.[a-z_]+\.out$/ ? 1 : 2 }
!/^#/ && isrow() { t[file, $(NF-7)] = $(NF-3); bw[file, $(NF-7)] = $(NF-1) }
END {
  k = split(sizes, sz, " ")
  for (i = 1; i <= k; i++) {
    s = sz[i]
    if (!((1, s) in t) && !((2, s) in t)) continue
    h = (1, s) in bw ? sprintf("%9.2f", bw[1, s]) : sprintf("%9s", "-")
    m = (2, s) in bw ? sprintf("%9.2f", bw[2, s]) : sprintf("%9s", "-")
    r = ((1, s) in t && (2, s) in t && t[1, s] > 0) ? \
        sprintf("%8.2fx", t[2, s] / t[1, s]) : sprintf("%9s", "-")
    printf "  %-13s %10s | hora %s | mpi %s | hora/mpi %s\n", coll, s, h, m, r
  }
}' "$tmp/hora.$coll.out" "$tmp/mpi.$coll.out"
done

[ "$failed" -eq 0 ]
