#!/bin/sh
# startup.sh -- what horarun adds to a trivial job: `horarun -np 2 true`
# against running `true` twice. Prints the overhead; fails only past a
# generous bound (2 s), since test machines are noisy. The goal is 0.2 s.
. "$(dirname "$0")/lib.sh"
use_horad
runs=${RUNS:-20}

# seconds RUNS CMD...: average wall time of CMD over RUNS runs.
seconds() {
  n=$1
  shift
  start=$(date +%s.%N)
  i=0
  while [ $i -lt "$n" ]; do
    "$@" >/dev/null 2>&1 || fail "$* failed"
    i=$((i + 1))
  done
  awk -v s="$start" -v e="$(date +%s.%N)" -v n="$n" \
    'BEGIN { printf "%.4f", (e - s) / n }'
}

two_trues() { true_bin=$(command -v true); "$true_bin"; "$true_bin"; }
"$HORARUN" -np 2 true || fail "horarun -np 2 true"
base=$(seconds "$runs" two_trues)
job=$(seconds "$runs" "$HORARUN" -np 2 true)
over=$(awk -v a="$job" -v b="$base" 'BEGIN { printf "%.4f", a - b }')
echo "horarun -np 2 true: ${job}s; true twice: ${base}s; overhead: ${over}s" \
  "($HORAD_KIND horad, mean of $runs runs)"
awk -v o="$over" 'BEGIN { exit !(o > 0.2) }' &&
  echo "warning: the overhead is over the 0.2 s goal"
awk -v o="$over" 'BEGIN { exit !(o > 2) }' && fail "overhead ${over}s > 2 s"

run_hr -np 8 true
expect_rc 0 "-np 8 true"
note "horarun -np 2 true adds ${over}s"
exit 0
