#!/bin/sh
# startup.sh -- how long a job takes to start and end: `horarun ... true`
# on three hosts of two ranks each (network namespaces on this machine,
# tests/multihost/lib.sh), started through the hosts' hora services and
# over ssh, beside a bare `true` in the same namespace, in turns (service,
# ssh, bare; RUNS times). Prints each run's times, then the medians and
# the service's time over a bare process:
#
#   sh benchmarks/startup.sh            # as root; RUNS=15 by default
#   RUNS=31 sh benchmarks/startup.sh
#
# The services are started by this script (horad --service with a fresh
# cluster key) and stopped at its end. "#S startup service_ms ssh_ms
# bare_ms" is the summary line.
top=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$top/build}
case "$BUILD" in /*) ;; *) BUILD=$top/$BUILD ;; esac
[ -d "$BUILD" ] || {
  echo "startup.sh: no build directory $BUILD; run make first" >&2
  exit 1
}
export BUILD HORA_TOP=$top
RUNS=${RUNS:-15}
. "$top/tests/multihost/lib.sh"
need "$HORARUN" "$HORAD"
mh_setup 3
key=$MH_TMP/cluster.key
mh_key_file "$key"
port=17972
allow=""
[ "$(id -u)" = 0 ] && allow=--allow-root
for h in h1 h2 h3; do
  # shellcheck disable=SC2086
  mh_service "$MH_TMP/svc.$h.log" "$h" --port $port --key-file "$key" $allow
done
hosts=-H\ h1:2,h2:2,h3:2
ms() { # COMMAND...: its wall time in ms, from the client
  _t0=$(date +%s%N)
  mh_client "$@" >/dev/null 2>&1 || echo "startup.sh: '$*' failed" >&2
  echo $((($(date +%s%N) - _t0) / 1000000))
}
# shellcheck disable=SC2086
ms "$HORARUN" --launcher service --service-key-file "$key" --service-port $port -np 6 $hosts true >/dev/null
: >"$MH_TMP/svc.ms"
: >"$MH_TMP/ssh.ms"
: >"$MH_TMP/bare.ms"
i=0
while [ $i -lt "$RUNS" ]; do
  # shellcheck disable=SC2086
  a=$(ms "$HORARUN" --launcher service --service-key-file "$key" --service-port $port -np 6 $hosts true)
  # shellcheck disable=SC2086
  b=$(ms "$HORARUN" --launcher ssh -np 6 $hosts true)
  c=$(ms true)
  echo "$a" >>"$MH_TMP/svc.ms"
  echo "$b" >>"$MH_TMP/ssh.ms"
  echo "$c" >>"$MH_TMP/bare.ms"
  echo "run $((i + 1)): service $a ms, ssh $b ms, bare $c ms"
  i=$((i + 1))
done
med() { sort -n "$1" | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
s=$(med "$MH_TMP/svc.ms") x=$(med "$MH_TMP/ssh.ms") b=$(med "$MH_TMP/bare.ms")
echo "medians of $RUNS: through the services $s ms, over ssh $x ms, a bare process $b ms"
echo "the services' start over a bare process: $((s - b)) ms; ssh's: $((x - b)) ms"
echo "#S startup $s $x $b"
finish
