#!/bin/sh
# metrics.sh -- horad's /metrics during a real job (horarun --metrics-port),
# read with Prometheus' own text parser: the operations and bytes the ranks
# ran, latency histograms, each rank's lateness, a straggler (rank 2 sleeps
# 20 ms before each allreduce); the HTTP server's answers to strangers;
# horarun's end-of-job word on the straggler (and none without one); a
# port that cannot be had; horad --metrics-port; HORA_LOG by subsystem.
. "$(dirname "$0")/lib.sh"
PY=${PYTHON:-/usr/bin/python3}
$PY -c 'import prometheus_client' 2>/dev/null ||
  skip "no python3-prometheus-client (tests/deps.sh test installs it)"
command -v curl >/dev/null || skip "no curl"

OPS=30 COUNT=1000
PORT=$(free_port)
HOLD=$IT_TMP/hold
(hrun live 120 IT_HOLD="$HOLD" --metrics-port "$PORT" -np 3 \
  "$T/it_late" $OPS 2 20 $COUNT) &
job=$!
if held "$HOLD"; then
  if ! $PY "$(dirname "$0")/metrics_check.py" 127.0.0.1 "$PORT" $OPS $COUNT \
    2 3 --edges >"$IT_TMP/check.out" 2>&1; then
    fail "live: /metrics does not hold what the job did:"
    sed 's/^/    | /' "$IT_TMP/check.out"
  else
    say "live: /metrics parsed; operations, bytes, histograms, lateness right"
  fi
else
  fail "live: rank 0 never finished its operations"
fi
: >"$HOLD.go"
wait $job
expect_rc live 0
expect_count live out '^\[[0-2]\]<stdout>:rank [0-2]: ok$' 3 \
  "every rank's results right"
expect_grep live err '^horarun: rank 2 \(host [^)]+\) was last to submit in (9[0-9]|100) % of operations, median (1[89]|2[0-9])(\.[0-9]+)? ms behind the first$' \
  "horarun names rank 2 as the straggler"
# the port is closed once the job is over
curl -s -m 2 "http://127.0.0.1:$PORT/metrics" >/dev/null &&
  fail "live: /metrics still answers after the job"

hrun even 60 -np 3 "$T/it_late" $OPS 2 0 $COUNT
expect_rc even 0
expect_nogrep even err 'was last to submit' "no straggler named in an even job"

hrun few 60 -np 3 "$T/it_late" 10 2 20 $COUNT
expect_rc few 0
expect_nogrep few err 'was last to submit' \
  "no straggler named after 10 operations"

# a port already taken: the job is refused, saying so
$PY -c 'import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("", 0)); s.listen(1); print(s.getsockname()[1]); sys.stdout.flush()
time.sleep(30)' >"$IT_TMP/busy.port" &
holder=$!
i=0
while [ ! -s "$IT_TMP/busy.port" ] && [ $i -lt 50 ]; do
  sleep 0.1
  i=$((i + 1))
done
BUSY=$(cat "$IT_TMP/busy.port")
hrun busy 60 HORA_METRICS_PORT="$BUSY" -np 2 "$T/it_late" 2 1 0 10
kill $holder 2>/dev/null
expect_rc busy nonzero
expect_grep busy err \
  "cannot serve metrics on port $BUSY: address already in use \[H5001\]" \
  "horad says the port is taken, with its message id"

hrun badport 30 HORA_METRICS_PORT=70000 -np 1 "$T/it_late" 1 0 0 1
expect_rc badport nonzero
expect_grep badport err "HORA_METRICS_PORT.*70000.*expected a whole number from 0 to 65535" \
  "horarun refuses a port past 65535"

# horad's own flag serves from the start (horarun runs a wrapper that
# adds it)
FPORT=$(free_port)
cat >"$IT_TMP/horad-mp" <<EOT
#!/bin/sh
exec "$BUILD/bin/horad" --metrics-port $FPORT "\$@"
EOT
chmod +x "$IT_TMP/horad-mp"
rm -f "$HOLD.done" "$HOLD.go"
(hrun flag 120 HORA_HORAD="$IT_TMP/horad-mp" IT_HOLD="$HOLD" -np 2 \
  "$T/it_late" 25 1 20 100) &
job=$!
held "$HOLD"
if ! $PY "$(dirname "$0")/metrics_check.py" 127.0.0.1 "$FPORT" 25 100 1 2 \
  >"$IT_TMP/check.flag" 2>&1; then
  fail "flag: /metrics of horad --metrics-port is not right:"
  sed 's/^/    | /' "$IT_TMP/check.flag"
fi
: >"$HOLD.go"
wait $job
expect_rc flag 0
expect_grep flag err '^horarun: rank 1 \(host [^)]+\) was last to submit' \
  "horad --metrics-port: rank 1 named"

# horad's own flag, refused values
"$BUILD/bin/horad" --metrics-port 0 --control-fd 9 >"$IT_TMP/flag.out" 2>&1
[ $? -eq 2 ] && grep -q "bad --metrics-port '0'" "$IT_TMP/flag.out" ||
  fail "horad --metrics-port 0: $(cat "$IT_TMP/flag.out")"
"$BUILD/bin/horad" --help | grep -q -- "--metrics-port PORT" ||
  fail "horad --help does not list --metrics-port"

# HORA_LOG: the metrics subsystem at info says where it serves; others
# at info, or a bare level above it, do not
hrun log_on 60 HORA_LOG=metrics:info HORA_METRICS_PORT="$(free_port)" -np 2 \
  "$T/it_late" 2 1 0 10
expect_rc log_on 0
expect_grep log_on err '^horad\[[0-9]+\] INFO: serving metrics at http://' \
  "HORA_LOG=metrics:info: horad's metrics line"
expect_nogrep log_on err 'INFO: (connection|rank|spawn)' \
  "HORA_LOG=metrics:info: no other subsystem at info"
hrun log_off 60 HORA_LOG=warning,nego:info HORA_METRICS_PORT="$(free_port)" \
  -np 2 "$T/it_late" 2 1 0 10
expect_rc log_off 0
expect_nogrep log_off err 'serving metrics' \
  "HORA_LOG=warning,nego:info: no metrics line"
hrun log_all 60 HORA_LOG_LEVEL=error HORA_LOG=info \
  HORA_METRICS_PORT="$(free_port)" -np 2 "$T/it_late" 2 1 0 10
expect_rc log_all 0
expect_grep log_all err 'INFO: serving metrics' \
  "HORA_LOG=info: every subsystem at info, over HORA_LOG_LEVEL"
hrun log_bad 30 HORA_LOG=mesh:loud -np 1 "$T/it_late" 1 0 0 1
expect_rc log_bad nonzero
expect_grep log_bad err "HORA_LOG.*mesh:loud.*unknown level 'loud'" \
  "a bad HORA_LOG is refused, naming the entry"
assert_no_leftovers "$MARK"
finish
