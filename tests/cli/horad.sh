#!/bin/sh
# horad.sh -- horarun against a horad that misbehaves: missing, exits at
# once, never gets ready (--start-timeout), crashes mid-job, speaks
# garbage. Each ends with exit status 1 and one clear message naming the
# host; none hangs. Also: how horarun finds horad, and --verbose.
. "$(dirname "$0")/lib.sh"
host=$(hostname)
fake=$(fake_horad) || fail "cannot build the fake horad"

# ---- horad cannot be started ------------------------------------------------
export HORA_HORAD=$TMP/no-such-horad
run_hr -np 1 true
expect_rc 1 "missing horad"
expect_in err "cannot start horad ($TMP/no-such-horad)" "missing horad"
note "missing horad -> $(head -n 1 "$TMP/err")"

# ---- horad exits at once -------------------------------------------------------
printf '#!/bin/sh\nexit 0\n' >"$TMP/quitter"
chmod +x "$TMP/quitter"
export HORA_HORAD=$TMP/quitter
run_hr -np 1 true
expect_rc 1 "horad exits at once"
expect_in err "horad on host $host exited unexpectedly (code 0)" "quitter"
note "horad exits -> $(head -n 1 "$TMP/err")"

printf '#!/bin/sh\nkill -SEGV $$\n' >"$TMP/crasher"
chmod +x "$TMP/crasher"
export HORA_HORAD=$TMP/crasher
run_hr -np 1 true
expect_rc 1 "horad killed by a signal"
expect_in err "exited unexpectedly (signal SIGSEGV)" "crasher"
note "horad dies by signal -> $(head -n 1 "$TMP/err")"

# ---- horad never gets ready: --start-timeout ---------------------------------------
start=$(date +%s)
export FAKE_HORAD_MODE=noready HORA_HORAD=$fake
run_hr --start-timeout 1 -np 1 true
unset FAKE_HORAD_MODE
took=$(($(date +%s) - start))
expect_rc 1 "start timeout"
expect_in err "horad on host $host did not start within 1 s" "timeout"
expect_not_in err "exited unexpectedly" "one message only"
[ $took -le 4 ] || fail "start timeout took ${took}s"
note "start timeout -> $(head -n 1 "$TMP/err") (${took}s)"

# From the environment, Horovod's name too.
start=$(date +%s)
export FAKE_HORAD_MODE=noready HORA_HORAD=$fake HOROVOD_START_TIMEOUT=1
run_hr -np 1 true
unset FAKE_HORAD_MODE HOROVOD_START_TIMEOUT
took=$(($(date +%s) - start))
expect_rc 1 "HOROVOD_START_TIMEOUT"
[ $took -le 4 ] || fail "HOROVOD_START_TIMEOUT ignored (${took}s)"
note "HOROVOD_START_TIMEOUT=1 honoured"

# ---- horad crashes after READY, while ranks run -----------------------------------
export FAKE_HORAD_MODE=crash HORA_HORAD=$fake
run_hr -np 2 sleep 30
unset FAKE_HORAD_MODE
expect_rc 1 "horad crash"
expect_in err "horad on host $host exited unexpectedly (code 3)" "crash"
note "crash -> $(head -n 1 "$TMP/err")"

# ---- horad sends garbage ------------------------------------------------------------
export FAKE_HORAD_MODE=garbage HORA_HORAD=$fake
run_hr -np 1 true
unset FAKE_HORAD_MODE
expect_rc 1 "garbage"
expect_in err "protocol error from horad on host $host" "garbage"
[ "$(grep -c . "$TMP/err")" -eq 1 ] || fail "garbage: more than one message"
note "garbage -> $(head -n 1 "$TMP/err")"

# ---- horad closes its socket but lives on: killed after the grace period -----
printf '#!/bin/sh\nexec 3>&-\nexec sleep 60\n' >"$TMP/hanger"
chmod +x "$TMP/hanger"
export HORA_HORAD=$TMP/hanger HORA_KILL_GRACE=0
start=$(date +%s)
run_hr -np 1 true
took=$(($(date +%s) - start))
unset HORA_KILL_GRACE
expect_rc 1 "socket closed, horad alive"
expect_in err "horad on host $host closed its socket but did not exit" "hanger"
[ "$(grep -c . "$TMP/err")" -eq 1 ] || fail "hanger: more than one message"
[ $took -le 9 ] || fail "hanger took ${took}s"
note "hanger -> $(head -n 1 "$TMP/err") (${took}s)"

# ---- horad exits but a child keeps its socket open: not waited for ----------------
ln -s "$(command -v sleep)" "$TMP/sleep_$MARK"
printf '#!/bin/sh\n"%s" 60 &\nexit 0\n' "$TMP/sleep_$MARK" >"$TMP/leaver"
chmod +x "$TMP/leaver"
export HORA_HORAD=$TMP/leaver
start=$(date +%s)
run_hr -np 1 true
took=$(($(date +%s) - start))
kill_marked
expect_rc 1 "socket held by horad's child"
expect_in err "horad on host $host exited unexpectedly (code 0)" "leaver"
[ $took -le 4 ] || fail "leaver took ${took}s"
note "leaver -> $(head -n 1 "$TMP/err") (${took}s)"

# ---- finding horad -----------------------------------------------------------------
if [ -x "$BUILD/bin/horad" ]; then
  (unset HORA_HORAD; PATH=/usr/bin:/bin run_hr --verbose -np 1 true
   expect_rc 0 "horad beside horarun"
   expect_in err "starting horad on host $host: $BUILD/bin/horad --control-fd 3" \
     "horad found beside horarun") || exit 1
  note "horad found beside horarun"
fi
# A horarun with no horad beside it falls back to PATH.
mkdir -p "$TMP/bin" "$TMP/pathdir" && cp "$HORARUN" "$TMP/bin/horarun" &&
  ln -s "$fake" "$TMP/pathdir/horad" || fail "setup"
(unset HORA_HORAD; PATH=$TMP/pathdir:$PATH
 timeout 60 "$TMP/bin/horarun" --verbose -np 1 true >"$TMP/out" 2>"$TMP/err"
 rc=$?
 expect_rc 0 "horad on PATH"
 expect_in err "starting horad on host $host: horad --control-fd 3" \
   "horad from PATH") || exit 1
note "horad found on PATH"

# ---- --verbose shows the layout and the steps ------------------------------------------
export HORA_HORAD=$fake
run_hr --verbose -np 2 true
expect_rc 0 "verbose"
for s in "rank 1: host $host, local_rank 1 of 2, cross_rank 0 of 1" \
  "starting horad on host $host: $fake --control-fd 3" \
  "horad on host $host is up" "rank 0 on host $host exited with code 0" \
  "horad on host $host exited (code 0)"; do
  expect_in err "horarun: $s" "--verbose"
done
note "--verbose shows the layout and each step"
exit 0
