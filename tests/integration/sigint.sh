#!/bin/sh
# sigint.sh -- SIGINT to horarun (as Ctrl-C would send it, but to horarun
# alone) while the ranks are
#   loop:    looping on barrier + 50 ms sleep (3 ranks, and 8 ranks);
#   blocked: rank 0 asleep, the others blocked in an allreduce it never
#            joins;
# horarun must exit 130 within a few seconds, and no process of the job
# (ranks, horad) may be left.
. "$(dirname "$0")/lib.sh"

# A background job of a non-interactive shell starts with SIGINT ignored;
# give horarun the default disposition, as an interactive shell would.
dfl=""
if env --default-signal=INT true 2>/dev/null; then
  dfl="--default-signal=INT"
fi

sigint_case() { # NAME NP MODE
  _n=$1 _np=$2 _mode=$3
  mkdir -p "$IT_TMP/tmp.$_n"
  : >"$IT_TMP/$_n.out" # before the background job opens it
  echo "horarun -np $_np it_fail $_mode, then SIGINT to horarun" >"$IT_TMP/$_n.cmd"
  # shellcheck disable=SC2086
  env $dfl HORA_IT_MARK="$MARK" TMPDIR="$IT_TMP/tmp.$_n" \
    "$HORARUN" -np "$_np" "$T/it_fail" "$_mode" "--marker=$MARK" \
    >"$IT_TMP/$_n.out" 2>"$IT_TMP/$_n.err" &
  _pid=$!
  # wait until every rank is in position (at most 30 s)
  _i=0
  while [ "$(grep -c 'ready' "$IT_TMP/$_n.out" 2>/dev/null || :)" -lt "$_np" ] &&
    [ $_i -lt 300 ]; do
    sleep 0.1
    _i=$((_i + 1))
  done
  if [ $_i -ge 300 ]; then
    fail "$_n: the ranks did not all report ready within 30 s"
  fi
  sleep 0.3 # let them block / loop
  _t0=$(date +%s.%N)
  kill -INT "$_pid"
  # wait at most 20 s (no watchdog process: poll), so a horarun that
  # ignores SIGINT cannot hang the test
  _i=0
  while [ $_i -lt 200 ]; do
    _st=$(awk '{ print $3 }' "/proc/$_pid/stat" 2>/dev/null)
    [ -z "$_st" ] || [ "$_st" = Z ] && break
    sleep 0.1
    _i=$((_i + 1))
  done
  _el=$(it_elapsed "$_t0")
  if [ $_i -ge 200 ]; then
    fail "$_n: horarun still running 20 s after SIGINT; killing it"
    kill -9 "$_pid" 2>/dev/null
  fi
  wait "$_pid"
  _rc=$?
  echo "$_rc" >"$IT_TMP/$_n.rc"
  echo "$_el" >"$IT_TMP/$_n.time"
  say "$_n: horarun exited $_rc ${_el}s after SIGINT; it said: $(head -n 2 "$IT_TMP/$_n.err" | tr '\n' ' ')"
  it_sanitized "$_n"
  expect_rc "$_n" 130
  if [ "${_el%.*}" -ge 10 ]; then
    fail "$_n: horarun took ${_el}s to exit after SIGINT (expected a few seconds)"
    show "$_n"
  fi
  expect_nogrep "$_n" out "FAIL" "no rank saw anything unexpected"
  assert_no_leftovers "$MARK" 5
  assert_clean_tmp "$_n"
}

sigint_case loop3 3 loop
sigint_case blocked3 3 blocked
sigint_case loop8 8 loop
finish
