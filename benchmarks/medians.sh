#!/bin/sh
# medians.sh -- runs run.sh or multihost.sh RUNS times, the variants of
# each round one after the other (A B A B ...), and prints the median of
# the per-run figures: on a shared machine a single run says little, and
# only ratios taken within one run (hora against OpenMPI, or iperf3, right
# beside it) survive the load moving from run to run.
#
#   sh benchmarks/medians.sh run.sh -b 16M -e 64M -f 4 -n 10 -w 3
#   VARIANTS="-i 1;-i 0" sh benchmarks/medians.sh run.sh -b 16M -e 64M -f 4
#   SETS=2 sh benchmarks/medians.sh run.sh -c allreduce -b 8 -e 64M -f 8
#   RUNS=5 COLLS="allgather alltoall" sh benchmarks/medians.sh multihost.sh -b 16M -e 64M -f 4
#
# The first argument names the script (run.sh or multihost.sh, in this
# folder); the others go to it unchanged, then the variant's own. The
# environment goes through (COLLS, NP, SETS, RATIO_SIZES, ...). Options
# by environment:
#   RUNS      rounds (default 9)
#   VARIANTS  variants separated by ';', each a few more arguments (default
#             one, empty); each round runs every variant once, in order
#   KEEP      a folder: every run's output is kept there (default: dropped)
# For each variant, one markdown table per summary size of each collective:
# medians of the bandwidths (GB/s, for scale), and the median [min-max]
# of the per-run ratios; then the 1-minute load average at each run's
# start. Exit status: non-zero when a run failed.
here=$(cd "$(dirname "$0")" && pwd)
[ $# -ge 1 ] || {
  echo "usage: medians.sh run.sh|multihost.sh [ARGS...]" >&2
  exit 2
}
script=$1
shift
case "$script" in
run.sh | multihost.sh) ;;
*) echo "medians.sh: $script: run.sh or multihost.sh" >&2; exit 2 ;;
esac
RUNS=${RUNS:-9}
VARIANTS=${VARIANTS:-}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/hora-medians.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM

nv=0
IFS_SAVE=$IFS
IFS=';'
for v in ${VARIANTS:- }; do
  nv=$((nv + 1))
  echo "$v" >"$tmp/variant.$nv"
done
IFS=$IFS_SAVE
[ "$nv" -eq 0 ] && { nv=1; echo "" >"$tmp/variant.1"; }

failed=0
r=1
while [ "$r" -le "$RUNS" ]; do
  v=1
  while [ "$v" -le "$nv" ]; do
    va=$(cat "$tmp/variant.$v")
    load=$(cut -d' ' -f1 /proc/loadavg)
    echo "== run $r/$RUNS, variant $v (${va:-no extra arguments}): load average $load"
    echo "$load" >"$tmp/load.$r.$v"
    # shellcheck disable=SC2086 # the variant is a list of arguments
    sh "$here/$script" "$@" $va >"$tmp/out.$r.$v" 2>&1
    rc=$?
    if [ $rc -ne 0 ]; then
      echo "medians.sh: run $r, variant $v: $script exited with status $rc; its last lines:"
      tail -n 8 "$tmp/out.$r.$v" | sed 's/^/    | /'
      failed=1
    fi
    [ -n "${KEEP:-}" ] && mkdir -p "$KEEP" && cp "$tmp/out.$r.$v" "$KEEP/$script.$r.$v.out"
    v=$((v + 1))
  done
  r=$((r + 1))
done

v=1
while [ "$v" -le "$nv" ]; do
  va=$(cat "$tmp/variant.$v")
  echo
  echo "== $script $* ${va:+$va }: medians of $RUNS runs${SETS:+, SETS=$SETS}${COLLS:+, COLLS=\"$COLLS\"}"
  echo
  # shellcheck disable=SC2086
  cat $(r=1; while [ "$r" -le "$RUNS" ]; do echo "$tmp/out.$r.$v"; r=$((r + 1)); done) |
    awk -v script="$script" -v sets="${SETS:-}" '
function med(key,    n, i, j, x, v) { # median of vals[key, 1..cnt[key]]
  n = cnt[key]
  if (!n) return ""
  for (i = 1; i <= n; i++) v[i] = vals[key, i]
  for (i = 2; i <= n; i++) { x = v[i]; for (j = i - 1; j >= 1 && v[j] > x; j--) v[j+1] = v[j]; v[j+1] = x }
  lo = v[1]; hi = v[n]
  return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
}
function add(key, x) { if (x != "" && x != "-") { vals[key, ++cnt[key]] = x + 0 } }
function fmt(key, d,    m) { m = med(key); return m == "" ? "-" : sprintf("%." d "f", m) }
function fr(key,    m) { # median [min-max] of a ratio
  m = med(key)
  return m == "" ? "-" : sprintf("%.2fx [%.2f-%.2f]", m, lo, hi)
}
function human(b) {
  if (b >= 1048576 && b % 1048576 == 0) return (b / 1048576) " MiB"
  if (b >= 1024 && b % 1024 == 0) return (b / 1024) " KiB"
  return b " B"
}
function row(c, s) { if (!((c, s) in seen)) { seen[c, s] = 1; order[++nr] = c SUBSEP s } }
# run.sh: "  coll size | hora X | mpi Y | hora/mpi Zx"
script == "run.sh" && sets == "" && /\| hora\/mpi/ && $2 ~ /^[0-9]+$/ {
  row($1, $2); add("h" SUBSEP $1 SUBSEP $2, $5); add("m" SUBSEP $1 SUBSEP $2, $8)
  r = $11; sub(/x$/, "", r); add("r" SUBSEP $1 SUBSEP $2, r)
}
# run.sh SETS: "  coll size | together/alone: hora Ax | mpi Bx"
script == "run.sh" && sets != "" && /together\/alone: hora/ && $2 ~ /^[0-9]+$/ {
  row($1, $2); h = $6; m = $9; sub(/x$/, "", h); sub(/x$/, "", m)
  add("h" SUBSEP $1 SUBSEP $2, h); add("m" SUBSEP $1 SUBSEP $2, m)
}
# multihost.sh: "#S coll size th1 tm1 th2 tm2 busbw_h1 iperf iperf_bidir"
script == "multihost.sh" && $1 == "#S" {
  c = $2; s = $3; row(c, s)
  if ($4 != "-") add("bh1" SUBSEP c SUBSEP s, $9)
  if ($4 != "-" && $5 != "-") add("r1" SUBSEP c SUBSEP s, $5 / $4)
  if ($6 != "-" && $7 != "-") add("r2" SUBSEP c SUBSEP s, $7 / $6)
  if ($4 != "-" && $5 != "-") add("bm1" SUBSEP c SUBSEP s, $9 * $4 / $5)
  if ($4 != "-" && $10 != "-") { add("iu" SUBSEP c SUBSEP s, $10); add("ru" SUBSEP c SUBSEP s, $9 / $10) }
  if ($4 != "-" && $11 != "-") { add("ib" SUBSEP c SUBSEP s, $11); add("rb" SUBSEP c SUBSEP s, $9 / $11) }
}
# multihost.sh SETS: "#T coll size h1 alone all m1 alone all h2 ... m2 ..."
script == "multihost.sh" && $1 == "#T" {
  c = $2; s = $3; row(c, s)
  split("h1 m1 h2 m2", ks, " ")
  for (j = 1; j <= 4; j++)
    if ($(2 + 2 * j) != "-" && $(3 + 2 * j) != "-") add(ks[j] SUBSEP c SUBSEP s, $(3 + 2 * j) / $(2 + 2 * j))
}
END {
  if (script == "run.sh" && sets == "") {
    print "| collective | size | hora busbw (GB/s) | OpenMPI busbw (GB/s) | hora/OpenMPI, median [min-max] |"
    print "|---|---:|---:|---:|---:|"
  } else if (script == "run.sh") {
    print "| collective | size | hora: all sets at once / one alone | OpenMPI: all sets at once / one alone |"
    print "|---|---:|---:|---:|"
  } else if (sets == "") {
    print "| collective | size | hora 1/host (GB/s) | OpenMPI 1/host | hora/OpenMPI 1/host | hora/OpenMPI 2/host | iperf3 one way (GB/s) | hora/iperf3 | iperf3 both ways (GB/s, each) | hora/iperf3 both ways |"
    print "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
  } else {
    print "| collective | size | hora 1/host: all/alone | OpenMPI 1/host | hora 2/host | OpenMPI 2/host |"
    print "|---|---:|---:|---:|---:|---:|"
  }
  for (i = 1; i <= nr; i++) {
    split(order[i], cs, SUBSEP); c = cs[1]; s = cs[2]; k = c SUBSEP s
    if (script == "run.sh" && sets == "")
      printf "| %s | %s | %s | %s | %s |\n", c, human(s), fmt("h" SUBSEP k, 2), fmt("m" SUBSEP k, 2), fr("r" SUBSEP k)
    else if (script == "run.sh")
      printf "| %s | %s | %s | %s |\n", c, human(s), fr("h" SUBSEP k), fr("m" SUBSEP k)
    else if (sets == "")
      printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", c, human(s),
        fmt("bh1" SUBSEP k, 3), fmt("bm1" SUBSEP k, 3), fr("r1" SUBSEP k), fr("r2" SUBSEP k),
        fmt("iu" SUBSEP k, 3), fr("ru" SUBSEP k), fmt("ib" SUBSEP k, 3), fr("rb" SUBSEP k)
    else
      printf "| %s | %s | %s | %s | %s | %s |\n", c, human(s), fr("h1" SUBSEP k), fr("m1" SUBSEP k),
        fr("h2" SUBSEP k), fr("m2" SUBSEP k)
  }
  if (!nr) print "| (no summary lines in any run) |"
}'
  # shellcheck disable=SC2046
  cat $(r=1; while [ "$r" -le "$RUNS" ]; do echo "$tmp/load.$r.$v"; r=$((r + 1)); done) |
    awk '{ v[NR] = $1 } END {
      for (i = 2; i <= NR; i++) { x = v[i]; for (j = i - 1; j >= 1 && v[j] > x; j--) v[j+1] = v[j]; v[j+1] = x }
      if (NR) printf "\nload average (1 min) at the start of the runs: median %.2f, %.2f-%.2f\n",
        NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2, v[1], v[NR] }'
  v=$((v + 1))
done
[ "$failed" -eq 0 ]
