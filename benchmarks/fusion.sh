#!/bin/sh
# fusion.sh -- what tensor fusion buys across hosts: fusion_perf (a step of
# many float32 allreduces, async, then all waited for) between two hosts,
# 1 rank each, with fusion on (the default threshold, 128 MiB) and off
# (HOROVOD_FUSION_THRESHOLD=0), in turn, ROUNDS times (on off on off ...:
# the machine's noise falls on both). The hosts are network namespaces on
# this machine (tests/multihost/lib.sh), started from a third one, the
# client. Prints each run's line, then a markdown table of the median
# microseconds per step with the ratio off / on. A case is TENSORS:BYTES
# (that many tensors of that size), or the name of a torchvision model:
# its gradients' sizes, submitted last layer first (resnet50: 161 tensors,
# 256 B to 9 MiB, 97 MiB in all); ag:TENSORS:BYTES: allgathers of that
# many bytes from each rank (fusion_perf -A) instead of allreduces;
# rs:TENSORS:BYTES: reducescatters of tensors of that many bytes
# (fusion_perf -R), each rank getting its block.
#
#   sh benchmarks/fusion.sh            100 x 4K, 100 x 64K, 10 x 1M, resnet50,
#                                      100 allgathers of 4K, 100
#                                      reducescatters of 4K
#   CASES="200:1K 50:16K resnet18" sh benchmarks/fusion.sh
#
# Environment: BUILD (default build), CASES, ROUNDS (default 3), STEPS
# (timed steps per run, default 50), PYTHON (with torchvision, for model
# cases; default /usr/bin/python3). Needs root, iproute2 and sshd (as the
# multi-host tests); otherwise it says why and exits 77. Exit status
# non-zero when a run failed or counted wrong results.
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top" || exit 1
HORA_TOP=$top
BUILD=$(cd "${BUILD:-build}" 2>/dev/null && pwd) || {
  echo "fusion.sh: no build directory ${BUILD:-build}; run make first" >&2
  exit 1
}
export BUILD HORA_TOP
CASES=${CASES:-100:4K 100:64K 10:1M resnet50 ag:100:4K rs:100:4K}
ROUNDS=${ROUNDS:-3}
STEPS=${STEPS:-50}
PYTHON=${PYTHON:-/usr/bin/python3}
. "$top/tests/multihost/lib.sh"
perf=$BUILD/benchmarks/fusion_perf
for f in "$HORARUN" "$HORAD" "$perf"; do
  [ -x "$f" ] || { echo "fusion.sh: $f is missing; run 'make' first" >&2; exit 1; }
done
mh_setup 2
bad=0
res=$MH_TMP/results
: >"$res"

# args CASE: fusion_perf's arguments for it (a model: a file of its sizes)
args() {
  case $1 in
  ag:*) echo "-A $(args "${1#ag:}")" ;;
  rs:*) echo "-R $(args "${1#rs:}")" ;;
  *:*) echo "-t ${1%%:*} -b ${1#*:}" ;;
  *)
    "$PYTHON" -c "import sys
from torchvision import models
for p in getattr(models, sys.argv[1])().parameters():
    print(p.numel() * 4)" "$1" >"$MH_TMP/$1.sizes" 2>"$MH_TMP/$1.err" ||
      return 1
    echo "-S $MH_TMP/$1.sizes" ;;
  esac
}

for c in $CASES; do
  if ! a=$(args "$c"); then
    echo "$c: no sizes: $(tail -1 "$MH_TMP/$c.err")"
    bad=1
    continue
  fi
  r=0
  while [ "$r" -lt "$ROUNDS" ]; do
    for mode in on off; do
      env=""
      [ $mode = off ] && env="HOROVOD_FUSION_THRESHOLD=0"
      # shellcheck disable=SC2086
      line=$(mh_client env $env timeout 300 "$HORARUN" -np 2 -H h1:1,h2:1 \
        "$perf" $a -n "$STEPS" 2>"$MH_TMP/err" | grep 'fusion_perf:')
      rc=$?
      echo "$mode $c: ${line:-failed}"
      if [ $rc -ne 0 ] || ! echo "$line" | grep -q '#wrong 0$'; then
        bad=1
        sed 's/^/    | /' "$MH_TMP/err"
        continue
      fi
      us=$(echo "$line" | sed -n 's/.*: \([0-9.]*\) us per step.*/\1/p')
      n=$(echo "$line" | sed -n 's/.* ranks, \([0-9]*\) tensors (\([0-9]*\) bytes.*/\1 \2/p')
      echo "$c $mode $us $n" >>"$res"
    done
    r=$((r + 1))
  done
done
echo
echo "| case | tensors | bytes in all | fused us/step | unfused us/step | unfused / fused |"
echo "|------|--------:|-------------:|--------------:|----------------:|----------------:|"
for c in $CASES; do
  awk -v c="$c" '
    function med(v, n,   i, j, x) {
      for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++)
        if (v[j] < v[i]) { x = v[i]; v[i] = v[j]; v[j] = x }
      return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
    }
    $1 == c { t = $4; b = $5 }
    $1 == c && $2 == "on" { on[++non] = $3 }
    $1 == c && $2 == "off" { off[++noff] = $3 }
    END {
      if (!non || !noff) { printf "| %s | | | failed | failed | |\n", c; exit }
      a = med(on, non); z = med(off, noff)
      printf "| %s | %s | %s | %.0f | %.0f | %.2f |\n", c, t, b, a, z, z / a
    }' "$res"
done
exit $bad
