#!/bin/sh
# exit.sh -- the first failed rank decides horarun's exit status, is named
# with its host, and its last stderr lines are shown; the other ranks are
# stopped. A rank killed by signal N gives 128+N; a program that cannot be
# started gives 127 (not found) or 126.
. "$(dirname "$0")/lib.sh"
use_horad
host=$(hostname)
export HORA_KILL_GRACE=3

# ---- all ranks exit 0 ------------------------------------------------------
run_hr -np 3 true
expect_rc 0 "all ranks exit 0"
[ -s "$TMP/err" ] && fail "success printed on stderr: $(cat "$TMP/err")"
note "all ranks exit 0 -> 0, nothing on stderr"

# ---- rank 1 exits 3 while rank 0 would sleep for long ----------------------
start=$(date +%s)
run_hr -np 2 sh -c "if [ \$HORA_RANK = 1 ]; then echo 'about to fail' >&2;
  echo 'the reason' >&2; exit 3; fi; exec sleep 60"
took=$(($(date +%s) - start))
expect_rc 3 "rank exits 3"
expect_in err "horarun: rank 1 on host $host exited with code 3" "names it"
expect_in err "last lines of its stderr:" "tail header"
grep -qx '    the reason' "$TMP/err" || fail "tail shows the last line"
grep -qx '    about to fail' "$TMP/err" || fail "tail shows the first line"
[ "$took" -lt 15 ] || fail "the sleeping rank was not stopped (${took}s)"
note "rank 1 exits 3 -> 3 in ${took}s: $(grep 'rank 1' "$TMP/err")"

# ---- only the last 10 stderr lines, in order -----------------------------------
run_hr -np 1 sh -c 'i=1; while [ $i -le 15 ]; do echo "line $i" >&2;
  i=$((i + 1)); done; echo "to stdout"; exit 1'
expect_rc 1 "exit 1"
sed -n '/last lines of its stderr:/,$p' "$TMP/err" | tail -n +2 >"$TMP/tail"
expect_file "$TMP/tail" '    line 6\n    line 7\n    line 8\n    line 9\n    line 10\n    line 11\n    line 12\n    line 13\n    line 14\n    line 15\n' \
  "last 10 stderr lines"
note "the last 10 stderr lines are shown, oldest first"

# ---- a progress line counts once in the tail ------------------------------------
run_hr -np 1 sh -c 'echo start >&2; printf "10%%\r50%%\r90%%\r" >&2; exit 4'
expect_rc 4 "exit 4"
sed -n '/last lines of its stderr:/,$p' "$TMP/err" | tail -n +2 >"$TMP/tail"
expect_file "$TMP/tail" '    start\n    90%%\n' "progress updates collapse"
note "progress updates collapse to their last state in the tail"

# ---- killed by a signal -------------------------------------------------------
run_hr -np 2 sh -c '[ $HORA_RANK = 0 ] && kill -KILL $$; exec sleep 60'
expect_rc 137 "rank killed by SIGKILL"
expect_in err "horarun: rank 0 on host $host was killed by signal SIGKILL" \
  "names the signal"
note "SIGKILL -> 137: $(grep 'rank 0' "$TMP/err")"

run_hr -np 1 sh -c 'kill -SEGV $$'
expect_rc 139 "rank killed by SIGSEGV"
expect_in err "was killed by signal SIGSEGV" "SIGSEGV"
note "SIGSEGV -> 139"

# ---- programs that cannot be started -----------------------------------------------
run_hr -np 2 no-such-program-$MARK arg
expect_rc 127 "nonexistent program"
expect_in err "could not be started" "nonexistent program"
expect_in err "no-such-program-$MARK" "names the program"
note "missing program -> 127: $(grep 'could not' "$TMP/err")"

printf 'not executable\n' >"$TMP/noexec"
chmod 644 "$TMP/noexec"
run_hr -np 1 "$TMP/noexec"
expect_rc 126 "not executable"
expect_in err "could not be started" "not executable"
note "non-executable program -> 126"

# ---- ranks failing because of the first failure are not "the failure" ----------------
run_hr -np 2 sh -c "if [ \$HORA_RANK = 0 ]; then sleep 0.3; exit 5; fi
  trap 'exit 7' TERM; while :; do sleep 0.1; done"
expect_rc 5 "first failure wins"
expect_in err "rank 0 on host $host exited with code 5" "first failure"
expect_not_in err "code 7" "a later failure is not reported as the failure"
note "a rank stopped by the teardown does not change the status"

# ---- the exit status of a rank's own exit code, up to 255 ---------------------------
run_hr -np 1 sh -c 'exit 255'
expect_rc 255 "exit 255"
exit 0
