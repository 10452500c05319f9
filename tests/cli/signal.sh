#!/bin/sh
# signal.sh -- SIGINT/SIGTERM/SIGHUP to horarun stop the whole job and leave
# no process behind (ranks, their children, horad); horarun exits 128+N. A
# second ^C keeps waiting while horad escalates to SIGKILL. A signal horarun
# was started ignoring stays ignored (nohup, background jobs of a script).
# Killing horarun with SIGKILL also ends the job (horad sees its socket
# close).
. "$(dirname "$0")/lib.sh"
use_horad
export HORA_KILL_GRACE=2

if ! env --default-signal=INT true 2>/dev/null; then
  echo "env --default-signal is missing (coreutils < 8.31)"
  exit 77
fi

# The ranks run a sleep in the background and one in the foreground, both
# under a name holding $MARK, so leftovers can be found by name.
ln -s "$(command -v sleep)" "$TMP/sleep_$MARK" || fail "symlink"
S="$TMP/sleep_$MARK"
RANK="echo \$PPID; \"$S\" 300 & \"$S\" 300; wait"

# start_job NP [horarun options...]: starts horarun in the background with
# the default action for the stop signals; sets $pid.
start_job() {
  np=$1
  shift
  : >"$TMP/out"
  env --default-signal=INT,TERM,HUP "$HORARUN" "$@" -np "$np" sh -c "$RANK" \
    >"$TMP/out" 2>"$TMP/err" &
  pid=$!
  want=$((np * 2))
  i=0
  while [ "$(leftovers | grep -c "sleep_$MARK")" -lt $want ]; do
    i=$((i + 1))
    [ $i -gt 100 ] && fail "the ranks did not start: $(leftovers)"
    sleep 0.1
  done
}

# finish_job EXPECTED-STATUS WHAT: waits for horarun, checks its status and
# that no rank, rank child or horad is left.
finish_job() {
  wait $pid
  rc=$?
  expect_rc "$1" "$2"
  i=0
  while [ -n "$(leftovers)" ]; do
    i=$((i + 1))
    [ $i -gt 50 ] && fail "$2: processes left: $(leftovers)"
    sleep 0.1
  done
  for hpid in $(sed -n 's/^\[[0-9]*\]<stdout>://p' "$TMP/out" | sort -u); do
    kill -0 "$hpid" 2>/dev/null && fail "$2: horad (pid $hpid) is still there"
  done
  true
}

for sig in INT TERM HUP; do
  start_job 3
  kill -$sig $pid
  case $sig in INT) st=130 ;; TERM) st=143 ;; HUP) st=129 ;; esac
  finish_job $st "SIG$sig"
  expect_in err "horarun: interrupted by SIG$sig, stopping the job" "SIG$sig"
  note "SIG$sig -> $st, no process left"
done

# ---- a second ^C while ranks ignore SIGTERM: horad's SIGKILL ends them ----------
RANK_SAVED=$RANK
RANK="trap '' TERM; echo \$PPID; \"$S\" 300 & \"$S\" 300; wait"
start_job 2
start=$(date +%s)
kill -INT $pid
sleep 0.5
kill -INT $pid
finish_job 130 "two SIGINTs"
took=$(($(date +%s) - start))
expect_in err "SIGINT again" "second SIGINT answered"
note "second SIGINT: kept waiting, ended in ${took}s by the grace period"
RANK=$RANK_SAVED

# ---- started with SIGINT ignored: ^C is ignored, SIGTERM still works -----------
: >"$TMP/out"
(trap '' INT && exec "$HORARUN" -np 1 sh -c "$RANK") >"$TMP/out" \
  2>"$TMP/err" &
pid=$!
i=0
until leftovers | grep -q "sleep_$MARK"; do
  i=$((i + 1)); [ $i -gt 100 ] && fail "ignored-INT job did not start"
  sleep 0.1
done
kill -INT $pid
sleep 0.5
kill -0 $pid 2>/dev/null || fail "an ignored SIGINT stopped horarun"
kill -TERM $pid
finish_job 143 "SIGTERM after an ignored SIGINT"
note "a SIGINT ignored at start stays ignored"

# ---- SIGKILL to horarun: horad tears the job down ------------------------------
start_job 2
kill -KILL $pid
wait $pid 2>/dev/null
i=0
while [ -n "$(leftovers)" ]; do
  i=$((i + 1))
  [ $i -gt 100 ] && fail "after SIGKILL to horarun, left: $(leftovers)"
  sleep 0.1
done
note "SIGKILL to horarun: horad ended the ranks"
exit 0
