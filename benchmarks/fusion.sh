#!/bin/sh
# fusion.sh -- what tensor fusion buys across hosts: fusion_perf (T float32
# allreduces of B bytes each per step, async, then all waited for) between
# two hosts, 1 rank each, with fusion on (the default threshold, 128 MiB)
# and off (HOROVOD_FUSION_THRESHOLD=0), in turn, ROUNDS times (on off on
# off ...: the machine's noise falls on both). The hosts are network
# namespaces on this machine (tests/multihost/lib.sh), started from a
# third one, the client. Prints each run's line, then a markdown table of
# the median microseconds per step with the ratio off / on.
#
#   sh benchmarks/fusion.sh                 100 x 4K, 100 x 64K, 10 x 1M
#   CASES="200:1K 50:16K" sh benchmarks/fusion.sh
#
# Environment: BUILD (default build), CASES (tensors:bytes pairs), ROUNDS
# (default 3), STEPS (timed steps per run, default 50). Needs root,
# iproute2 and sshd (as the multi-host tests); otherwise it says why and
# exits 77. Exit status non-zero when a run failed or counted wrong results.
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top" || exit 1
HORA_TOP=$top
BUILD=$(cd "${BUILD:-build}" 2>/dev/null && pwd) || {
  echo "fusion.sh: no build directory ${BUILD:-build}; run make first" >&2
  exit 1
}
export BUILD HORA_TOP
CASES=${CASES:-100:4K 100:64K 10:1M}
ROUNDS=${ROUNDS:-3}
STEPS=${STEPS:-50}
. "$top/tests/multihost/lib.sh"
perf=$BUILD/benchmarks/fusion_perf
for f in "$HORARUN" "$HORAD" "$perf"; do
  [ -x "$f" ] || { echo "fusion.sh: $f is missing; run 'make' first" >&2; exit 1; }
done
mh_setup 2
bad=0
res=$MH_TMP/results
: >"$res"
for c in $CASES; do
  t=${c%%:*} b=${c#*:}
  r=0
  while [ "$r" -lt "$ROUNDS" ]; do
    for mode in on off; do
      env=""
      [ $mode = off ] && env="HOROVOD_FUSION_THRESHOLD=0"
      # shellcheck disable=SC2086
      line=$(mh_client env $env timeout 300 "$HORARUN" -np 2 -H h1:1,h2:1 \
        "$perf" -t "$t" -b "$b" -n "$STEPS" 2>"$MH_TMP/err" | grep 'fusion_perf:')
      rc=$?
      echo "$mode $t x $b: ${line:-failed}"
      if [ $rc -ne 0 ] || ! echo "$line" | grep -q '#wrong 0$'; then
        bad=1
        sed 's/^/    | /' "$MH_TMP/err"
        continue
      fi
      us=$(echo "$line" | sed -n 's/.*: \([0-9.]*\) us per step.*/\1/p')
      echo "$t $b $mode $us" >>"$res"
    done
    r=$((r + 1))
  done
done
echo
echo "| tensors | bytes each | fused us/step | unfused us/step | unfused / fused |"
echo "|--------:|-----------:|--------------:|----------------:|----------------:|"
for c in $CASES; do
  t=${c%%:*} b=${c#*:}
  awk -v t="$t" -v b="$b" '
    function med(v, n,   i, j, x) {
      for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++)
        if (v[j] < v[i]) { x = v[i]; v[i] = v[j]; v[j] = x }
      return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
    }
    $1 == t && $2 == b && $3 == "on" { on[++non] = $4 }
    $1 == t && $2 == b && $3 == "off" { off[++noff] = $4 }
    END {
      if (!non || !noff) { printf "| %s | %s | failed | failed | |\n", t, b; exit }
      a = med(on, non); z = med(off, noff)
      printf "| %s | %s | %.0f | %.0f | %.2f |\n", t, b, a, z, z / a
    }' "$res"
done
exit $bad
