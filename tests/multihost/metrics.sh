#!/bin/sh
# metrics.sh -- /metrics and the straggler across hosts: 3 hosts x 2 ranks,
# rank 3 (on h2) sleeping 20 ms before each allreduce. Every host's horad
# serves /metrics on the port given to horarun (--metrics-port), read
# with Prometheus' own parser from the client: each counts the job's
# operations and bytes and its links to the other two hosts; h1, the
# coordinator, places every rank by the offsets in the hosts' NEGO_READY
# (no clocks compared) and finds rank 3 last; horarun names it at the
# end. A job without a straggler names none.
. "$(dirname "$0")/lib.sh"
need "$HORARUN" "$HORAD" "$T/it_late"
PY=${PYTHON:-/usr/bin/python3}
$PY -c 'import prometheus_client' 2>/dev/null ||
  skip "no python3-prometheus-client (tests/deps.sh test installs it)"
CHECK="$HORA_TOP/tests/integration/metrics_check.py"
mh_setup 3

OPS=30 COUNT=1000 PORT=9464
HOLD=$MH_TMP/hold
hrun_start live IT_HOLD="$HOLD" --metrics-port $PORT -np 6 \
  -H h1:2,h2:2,h3:2 "$T/it_late" $OPS 3 20 $COUNT
i=0
while [ ! -e "$HOLD.done" ] && [ $i -lt 600 ] && hrun_running live; do
  sleep 0.1
  i=$((i + 1))
done
if [ -e "$HOLD.done" ]; then
  for h in h1 h2 h3; do
    role="--peers 2"
    [ $h = h1 ] || role="$role --member"
    # shellcheck disable=SC2086
    if ! mh_client $PY "$CHECK" "$(mh_addr $h)" $PORT $OPS $COUNT 3 6 $role \
      >"$MH_TMP/check.$h" 2>&1; then
      fail "live: /metrics of $h does not hold what the job did:"
      sed 's/^/    | /' "$MH_TMP/check.$h"
    else
      say "live: /metrics of $h parsed and right"
    fi
  done
else
  fail "live: rank 0 never finished its operations"
fi
: >"$HOLD.go"
hrun_wait live 120
expect_rc live 0
expect_count live out '^\[[0-5]\]<stdout>:rank [0-5]: ok$' 6 "every rank's results right"
expect_grep live err '^horarun: rank 3 \(host h2\) was last to submit in (9[0-9]|100) % of operations, median (1[89]|2[0-9])(\.[0-9]+)? ms behind the first$' \
  "horarun names rank 3 on h2 as the straggler"
mh_assert_no_job_procs "$MARK"

hrun even 60 -np 6 -H h1:2,h2:2,h3:2 "$T/it_late" $OPS 3 0 $COUNT
expect_rc even 0
expect_nogrep even err 'was last to submit' "no straggler named in an even job"
mh_assert_no_job_procs "$MARK"

# a straggler on the coordinator's own host, 2 hosts
hrun h1slow 60 -np 4 -H h1:2,h2:2 "$T/it_late" $OPS 1 15 $COUNT
expect_rc h1slow 0
expect_grep h1slow err '^horarun: rank 1 \(host h1\) was last to submit in (9[0-9]|100) % of operations, median 1[3-9](\.[0-9]+)? ms behind the first$' \
  "horarun names rank 1 on h1"
mh_assert_no_job_procs "$MARK"
finish
