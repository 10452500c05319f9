#!/bin/sh
# run.sh -- runs every hora test, each in its own process under a timeout,
# and ends with "N passed, N failed[, N skipped]".
#   unit tests:        $BUILD/tests/test_*        (exit 0 = pass)
#   script tests:      tests/{build,cli,integration,multihost,python}/*.sh
#                      (exit 0 = pass, 77 = skipped, else fail)
# TESTS=pattern runs only the tests whose name contains the pattern.
BUILD=${BUILD:-build}
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top" || exit 1
BUILD=$(cd "$BUILD" && pwd)
export BUILD HORA_TOP="$top"
export PATH="$BUILD/bin:$PATH"
# run inside a Slurm allocation, horarun without -H would use its nodes:
# the tests' jobs are meant for this machine (cli/slurm.sh sets its own)
unset SLURM_JOB_ID SLURM_JOB_NODELIST SLURM_NODELIST SLURM_TASKS_PER_NODE \
  SLURM_NTASKS_PER_NODE
logdir="$BUILD/test-logs"
rm -rf "$logdir"; mkdir -p "$logdir"
pass=0 fail=0 skip=0 failed=""

run_one() { # name timeout cmd...
  name=$1 limit=$2; shift 2
  case "$name" in *"${TESTS:-}"*) ;; *) return ;; esac
  log="$logdir/$(echo "$name" | tr '/' '_').log"
  start=$(date +%s.%N)
  timeout -k 5 "$limit" "$@" >"$log" 2>&1
  rc=$?
  t=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN{printf "%.2f", e-s}')
  if [ $rc -eq 0 ]; then
    pass=$((pass+1)); echo "PASS $name (${t}s)"
  elif [ $rc -eq 77 ]; then
    skip=$((skip+1)); echo "SKIP $name: $(tail -n 1 "$log")"
  else
    fail=$((fail+1)); failed="$failed $name"
    [ $rc -eq 124 ] && echo "timed out after ${limit}s" >>"$log"
    echo "FAIL $name (exit $rc, ${t}s) -- last lines of $log:"
    tail -n 15 "$log" | sed 's/^/    /'
  fi
}

for t in "$BUILD"/tests/test_*; do
  [ -x "$t" ] || continue
  run_one "unit/$(basename "$t")" 300 "$t"
done
for t in tests/build/*.sh tests/cli/*.sh tests/integration/*.sh tests/multihost/*.sh tests/python/*.sh; do
  [ -f "$t" ] || continue
  run_one "${t#tests/}" 600 sh "$t"
done

[ -n "$failed" ] && echo "failed:$failed"
if [ $skip -gt 0 ]; then
  echo "$pass passed, $fail failed, $skip skipped"
else
  echo "$pass passed, $fail failed"
fi
[ $fail -eq 0 ]
