#!/bin/sh
# run_horovod_suite.sh -- runs Horovod's own PyTorch test suite against hora.
#
#   tests/compat/run_horovod_suite.sh PATH/TO/test_torch.py [horarun args...]
#
# PATH/TO/test_torch.py is test/parallel/test_torch.py of a Horovod checkout
# (it is not part of hora). The file is copied to a temporary directory with
# one change, `import horovod.torch as hvd` -> `import hora.torch as hvd`,
# next to a stand-in of our own for the helpers it imports from Horovod's
# test/utils/common.py (tests/compat/horovod_common.py). Every test of
# TorchTests then runs as a job of its own:
#
#   horarun -np 2 [horarun args] python -m pytest -q -x FILE::TorchTests::test_x
#
# The horarun args choose the layout (default: -np 2; e.g. `-np 3`, or
# `-np 4 -H localhost:2,127.0.0.1:2`). Across hosts of their own (network
# namespaces, as root): run_horovod_suite_hosts.sh, which runs this script
# from the client of tests/multihost/lib.sh with -np 3 -H h1:1,h2:1,h3:1.
# One line per test is printed,
#   PASS test_x (3.1s) | FAIL test_x: reason | SKIP test_x: reason | HANG test_x
# then "N passed, N failed, N skipped, N hung of M". Exit status 0 when
# nothing failed or hung.
#
# A test whose ranks part ways (some fail an assertion and go to tearDown's
# barrier while the others go on to their next collective) would wait
# forever under Horovod; here hora's stall inspector ends it: it warns
# after STALL_WARN seconds (default 10) and fails the stalled operations,
# naming the missing ranks, after STALL seconds (default 30; 0: never, as
# Horovod's default, and the test then hangs until TIMEOUT).
#
# LAUNCHER starts the ranks some other way, for hora to join them: the
# launcher's command words, then the script's arguments (its own, then),
# then python -m pytest ..., e.g.
#
#   LAUNCHER="mpirun --oversubscribe" run_horovod_suite.sh FILE -np 2
#   LAUNCHER="srun" run_horovod_suite.sh FILE -n 2
#   LAUNCHER="torchrun --no_python" run_horovod_suite.sh FILE --nproc_per_node 2
#
# (torch 1.13's torchrun on Python 3.11, Debian 12's, needs --redirects 1
# --tee 1 besides: its default of 0 fails before it starts the ranks.)
#
# Environment: TIMEOUT (seconds per test, default 120), TESTS (an extended
# regular expression: only the tests whose name matches), SHARD (I/N: only
# every Nth test from the Ith, 1-based, of those chosen, so that N runs side
# by side share the suite), BUILD (hora's
# build directory, default build), PYTHON (default /usr/bin/python3), LOGS
# (where each test's output is kept; default a directory in the temporary
# one, named at the end).
set -u
if [ $# -lt 1 ] || [ ! -f "$1" ]; then
  echo "usage: $0 PATH/TO/test_torch.py [horarun args...]" >&2
  exit 2
fi
src=$1; shift
top=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$top/build}
PYTHON=${PYTHON:-/usr/bin/python3}
TIMEOUT=${TIMEOUT:-120}
export HORA_STALL_CHECK_TIME_SECONDS=${STALL_WARN:-10}
export HORA_STALL_SHUTDOWN_TIME_SECONDS=${STALL:-30}
if [ -n "${LAUNCHER:-}" ]; then
  horarun=
  export HORA_HORARUN=${HORA_HORARUN:-$BUILD/bin/horarun}
elif [ -x "$BUILD/bin/horarun" ]; then
  horarun=$BUILD/bin/horarun
else
  horarun=$(command -v horarun) || { echo "horarun not found: build hora (make) or put it on PATH" >&2; exit 2; }
fi
export PYTHONPATH="$top/python${PYTHONPATH:+:$PYTHONPATH}"
[ -f "$BUILD/lib/libhora.so" ] && export HORA_LIBRARY="$BUILD/lib/libhora.so"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} PYTHONUNBUFFERED=1 COLUMNS=200

# The layout: -np 2 unless the arguments name a number of processes.
has_np=no
for a in "$@"; do
  case "$a" in -np|--num-proc|-np=*|--num-proc=*) has_np=yes ;; esac
done
[ $has_np = no ] && [ -z "${LAUNCHER:-}" ] && set -- -np 2 "$@"

work=$(mktemp -d "${TMPDIR:-/tmp}/hora-compat.XXXXXX") || exit 1
mkdir -p "$work/test/parallel" "$work/test/utils"
name=$(basename "$src")
sed 's/^import horovod\.torch as hvd$/import hora.torch as hvd/' "$src" >"$work/test/parallel/$name"
if ! grep -q '^import hora\.torch as hvd$' "$work/test/parallel/$name"; then
  echo "$src has no line 'import horovod.torch as hvd'" >&2
  exit 2
fi
cp "$top/tests/compat/horovod_common.py" "$work/test/utils/common.py"
LOGS=${LOGS:-$work/logs}
mkdir -p "$LOGS"

# The tests of TorchTests, in file order.
tests=$("$PYTHON" - "$work/test/parallel/$name" <<'EOF'
import ast, sys
tree = ast.parse(open(sys.argv[1]).read())
for node in tree.body:
    if isinstance(node, ast.ClassDef) and node.name == "TorchTests":
        for f in node.body:
            if isinstance(f, ast.FunctionDef) and f.name.startswith("test"):
                print(f.name)
EOF
) || exit 2
if [ -n "${TESTS:-}" ]; then
  tests=$(printf '%s\n' "$tests" | grep -E -- "$TESTS")
fi
if [ -n "${SHARD:-}" ]; then
  case "$SHARD" in
    */*) si=${SHARD%/*} sn=${SHARD#*/} ;;
    *) si=x sn=x ;;
  esac
  case "$si$sn" in
    *[!0-9]*|'') echo "SHARD=$SHARD: expected I/N, e.g. 1/4" >&2; exit 2 ;;
  esac
  if [ "$sn" -lt 1 ] || [ "$si" -lt 1 ] || [ "$si" -gt "$sn" ]; then
    echo "SHARD=$SHARD: expected 1 <= I <= N" >&2; exit 2
  fi
  tests=$(printf '%s\n' "$tests" | awk -v i="$si" -v n="$sn" '(NR - i) % n == 0')
fi

# The reason a test failed or was skipped, from its log: the first line of
# the exception pytest shows ("E   ..."), pytest's summary line ("SKIPPED [1]
# file:line: reason"), or the last line that says why.
strip_prefix() { sed -E 's/^\[[0-9]+\]<std(out|err)>://; s/^\[[a-z]+[0-9]+\]://'; }
reason() { # log kind
  if [ "$2" = FAILED ]; then
    r=$(strip_prefix <"$1" | grep -E '^E  ' | head -n 1 | sed -E 's/^E +//')
  else
    r=$(strip_prefix <"$1" | grep -E '^SKIPPED ' | head -n 1 |
        sed -E 's/^SKIPPED \[[0-9]+\] [^ ]*: //')
  fi
  if [ -z "$r" ]; then
    r=$(strip_prefix <"$1" | grep -E '(Error|error|Exception|exited|failed)' | tail -n 1)
  fi
  printf '%s' "$r" | cut -c 1-300
}

pass=0 fail=0 skip=0 hang=0 total=0
for t in $tests; do
  total=$((total+1))
  log="$LOGS/$t.log"
  start=$(date +%s.%N)
  # shellcheck disable=SC2086 # LAUNCHER: its words
  (cd "$work/test" && timeout -k 10 "$TIMEOUT" ${LAUNCHER:-"$horarun"} "$@" "$PYTHON" -m pytest -q -x -rfEs \
      -p no:cacheprovider "parallel/$name::TorchTests::$t") >"$log" 2>&1 </dev/null
  rc=$?
  secs=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN{printf "%.1f", e-s}')
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    hang=$((hang+1)); echo "HANG $t (killed after ${TIMEOUT}s)"
  elif [ $rc -eq 0 ] && grep -Eq '[0-9]+ passed' "$log"; then
    pass=$((pass+1)); echo "PASS $t (${secs}s)"
  elif [ $rc -eq 0 ] && grep -Eq '[0-9]+ skipped' "$log"; then
    skip=$((skip+1)); echo "SKIP $t: $(reason "$log" SKIPPED)"
  else
    fail=$((fail+1)); echo "FAIL $t (exit $rc, ${secs}s): $(reason "$log" FAILED)"
  fi
done
echo "logs: $LOGS"
echo "$pass passed, $fail failed, $skip skipped, $hang hung of $total"
[ $fail -eq 0 ] && [ $hang -eq 0 ]
