# lib.sh -- helpers shared by the integration drivers (tests/integration/*.sh).
#
# A driver sources it:   . "$(dirname "$0")/lib.sh"
# and then, typically:
#   hrun NAME TIMEOUT -np 3 "$T/it_coll" matrix ...   # horarun, captured
#   expect_rc NAME 0
#   expect_grep NAME out '^\[0\]<stdout>:rank 0 of 3' "rank 0 reports 3 ranks"
#   assert_no_leftovers "$MARK"
#   finish                                             # exit 0 / 1
#
# Every job gets:
#   --marker=$MARK appended to the program's arguments, and HORA_IT_MARK=$MARK
#   in the environment of horarun (hence horad and the ranks), so that
#   assert_no_leftovers finds any process of the job by its command line or
#   its environment;
#   TMPDIR=$IT_TMP/tmp.NAME (and no XDG_RUNTIME_DIR), so that a socket
#   directory horad leaves behind is seen (assert_clean_tmp).
# Failures are counted, not fatal: a driver runs all its steps and prints
# what was expected and what happened for each failed one.
#
# Environment: BUILD (build dir; default HORA_TOP/build), HORA_TOP (repo root),
# HORARUN (default $BUILD/bin/horarun), HORA_TEST_SCALE=small to shrink the
# largest cases (automatic when BUILD ends in build-asan).
#
# Run directly (sh lib.sh, as tests/run.sh does for every *.sh here), it
# tests its own helpers.

HORA_TOP=${HORA_TOP:-$(cd "$(dirname "$0")/../.." && pwd)}
BUILD=$(cd "${BUILD:-$HORA_TOP/build}" && pwd) || exit 1
HORARUN=${HORARUN:-$BUILD/bin/horarun}
# shellcheck disable=SC2034 # used by the drivers
T=$BUILD/tests
IT_NAME=$(basename "$0" .sh)
IT_START=$(date +%s.%N)
IT_FAILURES=0
MARK="hora-it-$IT_NAME-$$-$(od -An -N4 -tx4 /dev/urandom | tr -d ' ')"
IT_TMP=$(mktemp -d "${TMPDIR:-/tmp}/hora-it-$IT_NAME.XXXXXX") || exit 1
T_JOBS=$IT_TMP # where each job's files go (tests/expect.sh)
. "$HORA_TOP/tests/expect.sh"
asan_build && HORA_TEST_SCALE=${HORA_TEST_SCALE:-small}
HORA_TEST_SCALE=${HORA_TEST_SCALE:-full}
# A sanitized build's ranks ask for absurd allocations on purpose (tests of
# hora_alloc); let malloc say NULL instead of aborting.
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}allocator_may_return_null=1"
export ASAN_OPTIONS
unset XDG_RUNTIME_DIR

it_cleanup() {
  # processes of this driver's jobs that are still around: ours to end
  for p in $(it_marked_pids "$MARK"); do kill -9 "$p" 2>/dev/null; done
  rm -rf "$IT_TMP"
}
trap it_cleanup EXIT
trap 'exit 130' INT TERM

it_elapsed() {
  awk -v s="$1" -v e="$(date +%s.%N)" 'BEGIN { printf "%.2f", e - s }'
}

# say MESSAGE: a progress line with the time since the driver started.
say() { echo "[$IT_NAME +$(it_elapsed "$IT_START")s] $*"; }

# fail MESSAGE: one failure; the driver goes on and exits 1 in finish.

skip() {
  echo "$*"
  exit 77
}

is_small() { [ "$HORA_TEST_SCALE" = small ]; }

# hrun NAME TIMEOUT [VAR=value ...] HORARUN-ARGS...
# Runs horarun under a timeout, with the job's marker, in a private TMPDIR;
# stdout/stderr go to $IT_TMP/NAME.{out,err}. Sets RC and ELAPSED.
hrun() {
  _name=$1 _limit=$2
  shift 2
  _envs=""
  while [ $# -gt 0 ]; do
    case "$1" in
    [A-Z_]*=*) _envs="$_envs $1"; shift ;;
    *) break ;;
    esac
  done
  mkdir -p "$IT_TMP/tmp.$_name"
  echo "${_envs# } horarun $* (timeout ${_limit}s)" >"$IT_TMP/$_name.cmd"
  _t0=$(date +%s.%N)
  # shellcheck disable=SC2086
  timeout -k 5 "$_limit" env HORA_IT_MARK="$MARK" TMPDIR="$IT_TMP/tmp.$_name" \
    $_envs "$HORARUN" "$@" "--marker=$MARK" \
    >"$IT_TMP/$_name.out" 2>"$IT_TMP/$_name.err"
  RC=$?
  ELAPSED=$(it_elapsed "$_t0")
  echo "$RC" >"$IT_TMP/$_name.rc"
  echo "$ELAPSED" >"$IT_TMP/$_name.time"
  say "$_name: exit $RC in ${ELAPSED}s"
  it_sanitized "$_name"
  if [ "$RC" -eq 124 ] || [ "$RC" -eq 137 ] && [ "$(it_elapsed "$_t0" | cut -d. -f1)" -ge "$_limit" ]; then
    fail "$_name: did not finish within ${_limit}s (killed by timeout)"
    show "$_name"
  fi
  return 0
}

# it_sanitized NAME: a sanitizer report in the job's output (ranks, horad
# or horarun) is a failure, whatever the exit status.
it_sanitized() {
  if grep -Eq 'ERROR: (Address|Leak|Thread|Memory)Sanitizer|runtime error:|SUMMARY: UndefinedBehaviorSanitizer' \
    "$IT_TMP/$1.out" "$IT_TMP/$1.err" 2>/dev/null; then
    fail "$1: a sanitizer reported an error:"
    grep -Eh -A12 'ERROR: (Address|Leak|Thread|Memory)Sanitizer|runtime error:' \
      "$IT_TMP/$1.out" "$IT_TMP/$1.err" | head -n 40 | sed 's/^/    | /'
  fi
}

# free_port: a free TCP port of this machine
free_port() {
  ${PYTHON:-/usr/bin/python3} -c 'import socket
s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])'
}

# held HOLD: waits (60 s at most) until a job run with IT_HOLD=HOLD
# (it_hold.h) holds; status 1 if it never did
held() {
  _hi=0
  while [ ! -e "$1.done" ] && [ $_hi -lt 600 ]; do
    sleep 0.1
    _hi=$((_hi + 1))
  done
  [ -e "$1.done" ]
}

# metrics_of NAME TIMEOUT FILE ARGS...: job NAME (hrun NAME TIMEOUT with
# --metrics-port and ARGS) held alive (IT_HOLD, it_hold.h) while horad's
# /metrics is read into FILE; status 1, nothing run, without curl.
metrics_of() {
  command -v curl >/dev/null || return 1
  _mn=$1 _mt=$2 _mf=$3
  shift 3
  _mport=$(free_port)
  _mhold=$IT_TMP/$_mn.hold
  (hrun "$_mn" "$_mt" IT_HOLD="$_mhold" --metrics-port "$_mport" "$@") &
  _mjob=$!
  held "$_mhold"
  curl -s -m 5 "http://127.0.0.1:$_mport/metrics" >"$_mf"
  : >"$_mhold.go"
  wait $_mjob
  return 0
}

# solo NAME TIMEOUT PROGRAM ARGS...: a program run without horarun (and
# without anything horarun would have set), captured like hrun.
solo() {
  _name=$1 _limit=$2
  shift 2
  echo "$* (no horarun; timeout ${_limit}s)" >"$IT_TMP/$_name.cmd"
  _t0=$(date +%s.%N)
  timeout -k 5 "$_limit" env -u HORA_DAEMON_SOCKET -u HORA_RANK \
    -u HORA_RANK_TOKEN -u HORA_SIZE HORA_IT_MARK="$MARK" "$@" "--marker=$MARK" \
    >"$IT_TMP/$_name.out" 2>"$IT_TMP/$_name.err"
  RC=$?
  ELAPSED=$(it_elapsed "$_t0")
  echo "$RC" >"$IT_TMP/$_name.rc"
  echo "$ELAPSED" >"$IT_TMP/$_name.time"
  say "$_name: exit $RC in ${ELAPSED}s"
  it_sanitized "$_name"
}

# show, fail and the expect_* verdicts: tests/expect.sh. expect_quiet: no
# warning or error logged by horad, libhora or horarun (a healthy job has
# nothing to complain about).
QUIET_RE='(^|>:)(horad|hora|libhora|horarun)(\[[0-9]+\])?:? (WARNING|ERROR|FATAL)'
# it_marked_pids MARKER: processes (not this shell) whose command line or
# environment holds MARKER.
it_marked_pids() {
  {
    pgrep -f -- "$1" 2>/dev/null
    grep -laF -- "$1" /proc/[0-9]*/environ 2>/dev/null |
      sed -n 's|^/proc/\([0-9]*\)/environ$|\1|p'
  } | sort -un | while read -r _p; do
    [ "$_p" = "$$" ] && continue
    # zombies are gone but for their parent's wait; ignore them
    _st=$(awk '{ print $3 }' "/proc/$_p/stat" 2>/dev/null)
    [ -z "$_st" ] || [ "$_st" = Z ] && continue
    echo "$_p"
  done
}

# assert_no_leftovers MARKER [SECONDS]: within SECONDS (default 5), no
# process of the job may be left (ranks, horad, horarun). Leftovers are
# listed, then killed.
assert_no_leftovers() {
  _mark=$1 _secs=${2:-5}
  _t0=$(date +%s.%N)
  while :; do
    _left=$(it_marked_pids "$_mark")
    [ -z "$_left" ] && return 0
    if awk -v s="$_t0" -v e="$(date +%s.%N)" -v l="$_secs" 'BEGIN { exit !(e - s >= l) }'; then
      break
    fi
    sleep 0.1
  done
  fail "processes of the job are still alive ${_secs}s after it ended (marker $_mark):"
  for _p in $_left; do
    ps -o pid=,ppid=,stat=,etime=,args= -p "$_p" 2>/dev/null | cut -c1-200 | sed 's/^/    | /'
  done
  for _p in $_left; do kill -9 "$_p" 2>/dev/null; done
  return 1
}

# assert_clean_tmp NAME: horad of job NAME removed its socket directory.
assert_clean_tmp() {
  _left=""
  for _f in "$IT_TMP/tmp.$1"/hora-*; do
    [ -e "$_f" ] && _left="$_left ${_f##*/}"
  done
  if [ -n "$_left" ]; then
    fail "$1: horad left$_left in the job's TMPDIR"
    return 1
  fi
  return 0
}

# finish: the driver's verdict, with its total time.
finish() {
  _t=$(it_elapsed "$IT_START")
  [ -d "$BUILD/test-logs" ] && echo "$IT_NAME $_t" >>"$BUILD/test-logs/integration-times.txt"
  if [ "$IT_FAILURES" -gt 0 ]; then
    echo "$IT_NAME: $IT_FAILURES failure(s) in ${_t}s"
    exit 1
  fi
  echo "$IT_NAME: all passed in ${_t}s"
  exit 0
}

# ---- run directly: a self-test of the helpers ------------------------------
if [ "$IT_NAME" = lib ]; then
  say "self-test of the integration helpers"
  # nothing carries a fresh marker
  assert_no_leftovers "$MARK" 1 || echo "  (unexpected)"
  # a process with the marker on its command line is found...
  sh -c 'while :; do sleep 0.1; done' "$MARK-argv" &
  _p1=$!
  # ...and one with it only in its environment
  env "HORA_IT_MARK=$MARK-env" sh -c 'while :; do sleep 0.1; done' &
  _p2=$!
  sleep 0.3
  _f0=$IT_FAILURES
  assert_no_leftovers "$MARK-argv" 0.5 >/dev/null
  assert_no_leftovers "$MARK-env" 0.5 >/dev/null
  if [ $((IT_FAILURES - _f0)) -ne 2 ]; then
    IT_FAILURES=$((_f0 + 1))
    echo "FAIL: assert_no_leftovers missed a marked process"
  else
    IT_FAILURES=$_f0
  fi
  kill "$_p1" "$_p2" 2>/dev/null
  wait 2>/dev/null
  assert_no_leftovers "$MARK-argv" 2
  assert_no_leftovers "$MARK-env" 2
  [ -x "$HORARUN" ] || fail "no horarun at $HORARUN"
  finish
fi
