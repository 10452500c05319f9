#!/bin/sh
# service.sh -- horad as a resident service on each host (horad --service,
# started by the test with a fresh cluster key; as root only with
# --allow-root, which is checked), and horarun --launcher service (network
# namespaces, see lib.sh):
#   job       a job over h1, h2, h3 through the services: every collective
#             of it_coll's matrix right, no ssh login on any host, each
#             service logged the job's horad
#   default   no --launcher: every host's service answers, so the job goes
#             through them (no ssh login; the probe is not logged as a
#             refusal); with a port where none answers, over ssh
#   local     horarun on h1: h1's horad starts through h1's service's unix
#             socket (--service-socket), the others' over TCP; a job of
#             h1 alone through it without a key file; as root: another
#             user at the socket refused (auth key), and a socket another
#             user bound passed over by horarun and refused by the client
#   localbad  at the socket, a request that passes no connection, two, a
#             pipe or a datagram socket, asks for --rendezvous, or for
#             --bootstrap without the line: refused, told and logged
#             (mh_probe)
#   sock      a second service on a live socket, or on a file that is not
#             a socket: refused, said; a stale socket replaced, and
#             removed when the service stops
#   activated socket activation (systemd-socket-activate, as horad.socket
#             does it): the service takes the TCP port and the unix socket
#             it is given, a job through each; the socket stays when the
#             service stops (systemd's); two TCP sockets: refused, said
#   twojobs   two jobs at once on the same hosts, both right
#   killed    a job's horarun SIGKILLed: its horads end (they lose horarun)
#             and the services go on: the next job runs
#   badkey    a client with another key: refused, horarun's error names
#             the host and says so, the service logs the refusal
#   badargs   with the key, a request to run horad otherwise than for a
#             job (--control-fd): refused and logged
#   forged    with the key, a launch request not sealed with the
#             connection's key (mh_probe): refused, told and logged
#   tamper    a bit of the service's first tagged frame flipped on the
#             way (mh_relay): the client ends, saying so; untouched, the
#             job's horad's words come through
#   badmode   a key file others may read: the client refuses to use it
#   badconf   a settings file with an unknown setting, a bad value, or
#             missing: the service says which file and line
#   conf      a service set up by its file alone (port, key, root, drain,
#             socket):
#             a job through it; SIGHUP with another key in the file: the
#             old key refused, the new one taken; SIGHUP with a broken
#             file: said, and the settings stay
#   drain     SIGTERM to that service (stop: drain) while a job runs: no
#             new job is taken, the running one finishes, then the
#             service ends; with --drain-timeout 1 the job is ended
#   stopped   SIGTERM to the services while a job runs: its horads end
#             (and its ranks), then the services; nothing is left
. "$(dirname "$0")/lib.sh"
need "$HORARUN" "$HORAD" "$T/mh_probe" "$T/mh_relay" "$T/it_coll" "$T/mh_loop"
command -v systemd-socket-activate >/dev/null 2>&1 || {
  echo "FAIL: no systemd-socket-activate (Debian: systemd)"
  exit 1
}
mh_setup 3

key=$MH_TMP/cluster.key
mh_key_file "$key"
port=17970
# as root, the service (and so its jobs) runs only when told to
allow=""
if [ "$(id -u)" = 0 ]; then
  mh_exec h1 "$HORAD" --service --port $port --key-file "$key" >"$MH_TMP/root.log" 2>&1
  rc=$?
  [ $rc = 2 ] && grep -q "that is root: run it as the jobs' user" "$MH_TMP/root.log" ||
    fail "as root without --allow-root, the service started (exit $rc): $(cat "$MH_TMP/root.log")"
  allow=--allow-root
fi
for h in h1 h2 h3; do
  # shellcheck disable=SC2086
  mh_service "$MH_TMP/svc.$h.log" "$h" --port $port --key-file "$key" $allow
  echo "$MH_SERVICE_PID" >"$MH_TMP/svc.$h.pid"
done
svc="--launcher service --service-key-file $key --service-port $port"
logins() { grep -c "Accepted publickey" "$MH_TMP/sshd.$1.log" 2>/dev/null; }

before="$(logins h1) $(logins h2) $(logins h3)"

ok() { # NAME NP
  expect_rc "$1" 0 &&
    expect_count "$1" out "^\[[0-9]+\]<stdout>:rank [0-9]+ of $2: [0-9]+ checks, 0 failures" "$2" \
      "every rank reports its checks, none failed"
}

# shellcheck disable=SC2086
hrun job 120 $svc -np 3 -H h1:1,h2:1,h3:1 "$T/it_coll" matrix -x 3
ok job 3
[ "$(logins h1) $(logins h2) $(logins h3)" = "$before" ] ||
  fail "job: an ssh login happened on a host (logins before: $before; after: $(logins h1) $(logins h2) $(logins h3))"
for h in h1 h2 h3; do
  grep -q "service: job [0-9]* from $(mh_addr client): horad [0-9]* started" "$MH_TMP/svc.$h.log" ||
    fail "job: the service on $h did not log the job"
done
mh_assert_no_job_procs "$MARK" 10

# no --launcher: every host's service answers, so the daemons start
# through them (no ssh login); a port where none answers: over ssh
before="$(logins h1) $(logins h2) $(logins h3)"
# shellcheck disable=SC2086
hrun default 120 --verbose --service-key-file "$key" -np 3 -H h1:1,h2:1,h3:1 "$T/it_coll" matrix -x 3 -q
ok default 3
expect_grep default err "every host's hora service answers on port $port" "horarun says it uses the services"
[ "$(logins h1) $(logins h2) $(logins h3)" = "$before" ] ||
  fail "default: an ssh login happened (before: $before; after: $(logins h1) $(logins h2) $(logins h3))"
grep -q "refused a connection" "$MH_TMP/svc.h1.log" &&
  fail "default: the service took horarun's probe for a refused client"
hrun fallback 60 --verbose --service-key-file "$key" --service-port 17999 -np 2 -H h1:1,h2:1 true
expect_rc fallback 0
expect_grep fallback err "starting the daemons over ssh: not through the hosts' hora services \(host h[12]: port 17999" \
  "horarun says why it uses ssh"
[ "$(logins h1) $(logins h2)" != "$(echo "$before" | cut -d' ' -f1,2)" ] ||
  fail "fallback: no ssh login on h1 or h2"
mh_assert_no_job_procs "$MARK" 10

# local: horarun on h1, whose horad starts through h1's service's unix
# socket (the kernel says who connects: no key for it), the others' over
# TCP; a job of h1 alone through it, with no key file at all
# shellcheck disable=SC2086
HRUN_FROM=h1 hrun local 120 --verbose $svc --service-socket "$MH_TMP/svc.h1.sock" \
  -np 3 -H h1:1,h2:1,h3:1 "$T/it_coll" matrix -x 3 -q
ok local 3
expect_grep local err "starting horad on host h1: .* --service-client $MH_TMP/svc.h1.sock -- --control-fd 3 --bootstrap" \
  "h1's horad starts through the service's socket"
HRUN_FROM=h1 hrun localonly 60 --launcher service --service-key-file "$MH_TMP/nosuch.key" \
  --service-socket "$MH_TMP/svc.h1.sock" -np 2 -H h1:2 "$T/it_coll" matrix -x 2 -q
ok localonly 2
[ "$(grep -c "service: job [0-9]* from local uid $(id -u) (pid [0-9]*): horad [0-9]* started" "$MH_TMP/svc.h1.log")" = 2 ] ||
  fail "local: h1's service did not log both jobs from its socket: $(grep local "$MH_TMP/svc.h1.log")"
mh_assert_no_job_procs "$MARK" 10
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null 2>&1; then
  # another user at the socket: auth key serves the service's user alone
  nob=$(id -u nobody)
  chmod 755 "$MH_TMP"
  HRUN_AS=nobody HRUN_FROM=h1 hrun localother 60 --launcher service \
    --service-socket "$MH_TMP/svc.h1.sock" -np 1 -H h1:1 true
  expect_rc localother nonzero
  expect_grep localother err "the service refused the request: uid $nob may not start jobs here" \
    "another user is refused, and told why"
  grep -q "refused a request from local uid $nob (pid [0-9]*): uid $nob may not start jobs here" "$MH_TMP/svc.h1.log" ||
    fail "localother: the service did not log the refusal"
  # a socket another user bound: horarun passes it over (its horad starts
  # directly) and the client does not send it the job's secret
  mkdir -p "$MH_TMP/squat" && chown nobody "$MH_TMP/squat"
  mh_exec h1 setpriv --reuid=nobody --regid="$(id -g nobody)" --clear-groups \
    "${PYTHON:-/usr/bin/python3}" -c '
import os, socket, sys, time
s = socket.socket(socket.AF_UNIX)
s.bind(sys.argv[1] + "/horad.sock")
s.listen()
with open(sys.argv[1] + "/pid.tmp", "w") as f:
    f.write(str(os.getpid()))
os.rename(sys.argv[1] + "/pid.tmp", sys.argv[1] + "/pid")
time.sleep(60)' "$MH_TMP/squat" &
  MH_BG="$MH_BG $!"
  t=0
  while [ ! -s "$MH_TMP/squat/pid" ] && [ $t -lt 50 ]; do t=$((t + 1)); sleep 0.1; done
  HRUN_FROM=h1 hrun squat 60 --verbose --launcher service \
    --service-socket "$MH_TMP/squat/horad.sock" -np 1 -H h1:1 true
  expect_rc squat 0
  expect_grep squat err "starting horad on host h1: [^ ]*horad --control-fd 3" \
    "horarun starts h1's horad directly, not through another user's socket"
  mh_exec h1 "$HORAD" --service-client "$MH_TMP/squat/horad.sock" -- --control-fd 3 \
    3</dev/null >"$MH_TMP/squat.out" 2>&1
  rc=$?
  [ $rc = 255 ] && grep -q "squat/horad.sock is served by uid $nob, neither root nor this user" "$MH_TMP/squat.out" ||
    fail "squat: the client took another user's socket: exit $rc, $(cat "$MH_TMP/squat.out")"
  kill "$(cat "$MH_TMP/squat/pid")" 2>/dev/null
  mh_assert_no_job_procs "$MARK" 10
else
  say "SKIP localother, squat: they need root and setpriv"
fi
# bad requests at the socket: refused, said and logged
for m in nofd:"did not pass one connection to horarun" \
  twofds:"did not pass one connection to horarun" \
  pipefd:"the connection passed with the request is not a unix stream socket" \
  dgram:"the connection passed with the request is not a unix stream socket" \
  rendezvous:"an argument the service does not take: '--rendezvous'" \
  nobootline:"with --bootstrap but no bootstrap line"; do
  mode=${m%%:*} want=${m#*:}
  mh_exec h1 "$T/mh_probe" local "$MH_TMP/svc.h1.sock" "$mode" >"$MH_TMP/local.$mode.out" 2>&1 ||
    fail "localbad: $mode: $(cat "$MH_TMP/local.$mode.out")"
  grep -qF "refused: horad: the service refused the request: " "$MH_TMP/local.$mode.out" &&
    grep -qF "$want" "$MH_TMP/local.$mode.out" ||
    fail "localbad: $mode: not told '$want': $(cat "$MH_TMP/local.$mode.out")"
  grep -F "refused a request from local uid" "$MH_TMP/svc.h1.log" | grep -qF "$want" ||
    fail "localbad: $mode: the service did not log '$want'"
done
# the socket's path: a live service's is left to it, a file that is not a
# socket is left alone, a stale socket is replaced and removed at the end
# shellcheck disable=SC2086
mh_exec h1 timeout 10 "$HORAD" --service --port 17976 --key-file "$key" $allow \
  --socket "$MH_TMP/svc.h1.sock" >"$MH_TMP/sock.log" 2>&1
rc=$?
[ $rc = 1 ] && grep -q "another service listens on $MH_TMP/svc.h1.sock" "$MH_TMP/sock.log" ||
  fail "sock: a second service on a live socket: exit $rc, $(cat "$MH_TMP/sock.log")"
: >"$MH_TMP/plain"
# shellcheck disable=SC2086
mh_exec h1 timeout 10 "$HORAD" --service --port 17976 --key-file "$key" $allow \
  --socket "$MH_TMP/plain" >"$MH_TMP/sock.log" 2>&1
rc=$?
[ $rc = 1 ] && grep -q "$MH_TMP/plain exists and is not a socket" "$MH_TMP/sock.log" && [ -f "$MH_TMP/plain" ] ||
  fail "sock: a plain file as the socket: exit $rc, $(cat "$MH_TMP/sock.log")"
"${PYTHON:-/usr/bin/python3}" -c '
import socket, sys
socket.socket(socket.AF_UNIX).bind(sys.argv[1])' "$MH_TMP/stale.sock"
# shellcheck disable=SC2086
mh_service "$MH_TMP/stale.log" h1 --port 17976 --key-file "$key" $allow
stalepid=$MH_SERVICE_PID
grep -q "port 17976 and $MH_TMP/stale.sock " "$MH_TMP/stale.log" ||
  fail "sock: the service did not take the stale socket's place: $(cat "$MH_TMP/stale.log")"
kill -TERM "$stalepid"
mh_wait_log "$MH_TMP/stale.log" "service: stopped" || fail "sock: the service did not stop"
[ -e "$MH_TMP/stale.sock" ] && fail "sock: the service left its socket behind"

# socket activation (horad.socket): systemd-socket-activate holds a TCP
# port and a unix socket on h2 and starts the service at the first
# connection with both; a job through each, the socket left to its owner
# shellcheck disable=SC2086
mh_exec h2 setsid systemd-socket-activate -l 17977 -l "$MH_TMP/act.sock" \
  "$HORAD" --service --key-file "$key" $allow </dev/null >"$MH_TMP/act.log" 2>&1 &
MH_BG="$MH_BG $!"
mh_wait_log "$MH_TMP/act.log" "Listening on $MH_TMP/act.sock" 100 ||
  fail "activated: systemd-socket-activate did not start: $(cat "$MH_TMP/act.log")"
hrun activated 60 --launcher service --service-key-file "$key" --service-port 17977 \
  -np 2 -H h2:2 "$T/it_coll" matrix -x 2 -q
ok activated 2
actpid=$(sed -n 's/^horad\[\([0-9]*\)\].*sockets from systemd.*/\1/p' "$MH_TMP/act.log" | head -n 1)
[ -n "$actpid" ] && echo "$actpid" >>"$MH_TMP/infra.pids"
grep -q "service: sockets from systemd (socket activation): port 17977 and $MH_TMP/act.sock " "$MH_TMP/act.log" ||
  fail "activated: the service did not say it took systemd's sockets: $(cat "$MH_TMP/act.log")"
grep -q "service: job [0-9]* from $(mh_addr client): horad [0-9]* started" "$MH_TMP/act.log" ||
  fail "activated: the service did not log the job over TCP"
HRUN_FROM=h2 hrun actlocal 60 --launcher service --service-socket "$MH_TMP/act.sock" \
  -np 2 -H h2:2 "$T/it_coll" matrix -x 2 -q
ok actlocal 2
grep -q "service: job [0-9]* from local uid $(id -u) (pid [0-9]*): horad [0-9]* started" "$MH_TMP/act.log" ||
  fail "actlocal: the service did not log the job from systemd's unix socket"
mh_assert_no_job_procs "$MARK" 10
if [ -n "$actpid" ]; then
  kill -TERM "$actpid"
  mh_wait_log "$MH_TMP/act.log" "service: stopped" || fail "activated: the service did not stop"
fi
[ -S "$MH_TMP/act.sock" ] || fail "activated: the service removed the socket systemd made"
# two TCP sockets: not horad's; the service says so and ends
mh_exec h2 setsid systemd-socket-activate -l 17978 -l 17979 \
  "$HORAD" --service --key-file "$key" $allow </dev/null >"$MH_TMP/act2.log" 2>&1 &
MH_BG="$MH_BG $!"
mh_wait_log "$MH_TMP/act2.log" "Listening on .*17979" 100 &&
  mh_exec h2 "${PYTHON:-/usr/bin/python3}" -c '
import socket
socket.create_connection(("127.0.0.1", 17978), 5).close()' 2>/dev/null
mh_wait_log "$MH_TMP/act2.log" "systemd passed" 100
grep -q "service: systemd passed two sockets of one kind: horad takes one TCP socket and one unix socket" "$MH_TMP/act2.log" ||
  fail "activated: two TCP sockets from systemd were not refused: $(cat "$MH_TMP/act2.log")"

# two jobs at once on the same hosts
# shellcheck disable=SC2086
hrun_start twoA $svc -np 3 -H h1:1,h2:1,h3:1 "$T/it_coll" matrix -x 3
# shellcheck disable=SC2086
hrun_start twoB $svc -np 3 -H h3:1,h2:1,h1:1 "$T/it_coll" matrix -x 3
hrun_wait twoA 180
hrun_wait twoB 180
ok twoA 3
ok twoB 3
mh_assert_no_job_procs "$MARK" 10

# a job's horarun killed: its horads end, the services stay
# shellcheck disable=SC2086
hrun_start killed $svc -np 2 -H h1:1,h2:1 "$T/mh_loop"
if wait_for killed out ": running$" 2 60; then
  kill -9 "$HRUN_PID"
  hrun_wait killed 30
else
  fail "killed: the ranks did not start looping within 60s"
  hrun_wait killed 5
fi
mh_assert_no_job_procs "$MARK" 20
for h in h1 h2 h3; do
  [ -n "$(mh_host_pids "$h" horad)" ] || fail "killed: the service on $h is gone"
done
# shellcheck disable=SC2086
hrun after 120 $svc -np 2 -H h1:1,h2:1 "$T/it_coll" matrix -x 2
ok after 2
mh_assert_no_job_procs "$MARK" 10

# another key: refused on both sides
other=$MH_TMP/other.key
mh_key_file "$other"
hrun badkey 60 --launcher service --service-key-file "$other" --service-port $port \
  -np 2 -H h1:1,h2:1 true
expect_rc badkey nonzero
expect_grep badkey err "h[12].*refused this client" "horarun's error names a host and the refusal"
expect_within badkey 20 "gives up at once"
grep -q "service: job [0-9]*: refused a connection from $(mh_addr client)" "$MH_TMP/svc.h1.log" "$MH_TMP/svc.h2.log" ||
  fail "badkey: no service logged the refusal"
mh_assert_no_job_procs "$MARK" 10

# with the key, a client may start horad jobs and nothing else
echo "HORA1 1 1 $(openssl rand -hex 32) 3" |
  mh_client "$HORAD" --service-client h1:$port --key-file "$key" -- --control-fd 0 \
    >"$MH_TMP/badargs.out" 2>&1
rc=$?
[ $rc = 255 ] || fail "badargs: the client exited with $rc, not 255"
grep -q "service: job [0-9]*: refused a request from $(mh_addr client): a launch request with an argument the service does not take: '--control-fd'" \
  "$MH_TMP/svc.h1.log" || fail "badargs: the service did not log the refusal"
grep -q "the service refused the request: a launch request with an argument" "$MH_TMP/badargs.out" ||
  fail "badargs: the client was not told why: $(cat "$MH_TMP/badargs.out")"

# with the key, a launch request that was not sealed with the connection's
# key (forged, or damaged on the way): refused, told and logged
mh_client "$T/mh_probe" h1 $port forgedlaunch service "$key" >"$MH_TMP/forged.out" 2>&1 ||
  fail "forged: $(cat "$MH_TMP/forged.out")"
grep -q "service: job [0-9]*: refused a request from $(mh_addr client): a launch request that does not open with the connection's key" \
  "$MH_TMP/svc.h1.log" || fail "forged: the service did not log the refusal"

# the service's frames tagged: a bit flipped on the way (mh_relay, a man in
# the middle on the client, before the service on h1) ends the client; the
# same relay flipping nothing changes nothing
relay() { # NAME FLIP-AT
  mh_client "$T/mh_relay" 17980 h1 $port "$2" >"$MH_TMP/$1.relay" 2>&1 &
  _rp=$!
  mh_wait_log "$MH_TMP/$1.relay" "listening" || mh_die "mh_relay did not start"
  echo "HORA1 1 1 $(openssl rand -hex 32) 3" |
    mh_client "$HORAD" --service-client client:17980 --key-file "$key" -- --rendezvous \
      >"$MH_TMP/$1.out" 2>&1
  rc=$?
  wait $_rp
}
relay tamper 100 # the tag of its first tagged frame (after the 80-byte challenge)
grep -q "^flipped$" "$MH_TMP/tamper.relay" || fail "tamper: the relay did not flip a bit"
[ $rc = 255 ] && grep -q "a frame whose tag does not match" "$MH_TMP/tamper.out" ||
  fail "tamper: the client exited with $rc: $(cat "$MH_TMP/tamper.out")"
relay untouched 100000000
grep -q "^not reached$" "$MH_TMP/untouched.relay" || fail "untouched: the relay flipped a bit"
grep -q "tag does not match\|untagged frame" "$MH_TMP/untouched.out" &&
  fail "untouched: the client saw a bad tag: $(cat "$MH_TMP/untouched.out")"
grep -q "connection to horarun (.*): cannot connect" "$MH_TMP/untouched.out" ||
  fail "untouched: the job's horad's words did not come through: $(cat "$MH_TMP/untouched.out")"

# a key file others may read is not used
chmod 644 "$other"
hrun badmode 60 --launcher service --service-key-file "$other" --service-port $port \
  -np 2 -H h1:1,h2:1 true
expect_rc badmode nonzero
expect_grep badmode err "no one else may read or write" "says what is wrong with the key file"
mh_assert_no_job_procs "$MARK" 10

# start-up through the services and over ssh, for the record (not judged:
# timings belong to benchmarks)
for i in 1 2 3; do
  # shellcheck disable=SC2086
  hrun viasvc$i 60 $svc -np 3 -H h1:1,h2:1,h3:1 true
  hrun viassh$i 60 -np 3 -H h1:1,h2:1,h3:1 true
done
say "a job of 3 hosts that runs 'true': through the services $(cat "$MH_TMP"/viasvc?.time | tr '\n' ' ')s, over ssh $(cat "$MH_TMP"/viassh?.time | tr '\n' ' ')s"
mh_assert_no_job_procs "$MARK" 10

# the settings file: errors name the file and line
conf=$MH_TMP/horad.yaml
printf 'port: 17972\nprot: 1\n' >"$conf"
# shellcheck disable=SC2086
mh_exec h1 "$HORAD" --service --config "$conf" $allow >"$MH_TMP/badconf.log" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "$conf:2: unknown setting 'prot'" "$MH_TMP/badconf.log" ||
  fail "badconf: an unknown setting: exit $rc, $(cat "$MH_TMP/badconf.log")"
printf 'port: 70000\n' >"$conf"
# shellcheck disable=SC2086
mh_exec h1 "$HORAD" --service --config "$conf" $allow >"$MH_TMP/badconf.log" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "$conf:1: bad port '70000': expected a port number" "$MH_TMP/badconf.log" ||
  fail "badconf: a bad port: exit $rc, $(cat "$MH_TMP/badconf.log")"
mh_exec h1 "$HORAD" --service --config "$MH_TMP/nosuch.yaml" >"$MH_TMP/badconf.log" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "nosuch.yaml: no such file" "$MH_TMP/badconf.log" ||
  fail "badconf: a missing --config: exit $rc, $(cat "$MH_TMP/badconf.log")"

# a service on h1 set up by its file alone: port, key, root, drain
old=$MH_TMP/old.key new=$MH_TMP/new.key
mh_key_file "$old" "$new"
{
  echo "# the test's horad.yaml"
  echo "port: 17972"
  echo "key_file: $old"
  [ -n "$allow" ] && echo "allow_root: true"
  echo "stop: drain"
  echo "drain_timeout: 30"
  echo "socket: $MH_TMP/conf.sock"
} >"$conf"
mh_service "$MH_TMP/conf.log" h1 --config "$conf"
confpid=$MH_SERVICE_PID
grep -q "port 17972 and $MH_TMP/conf.sock .*on stop: drain); settings from $conf" "$MH_TMP/conf.log" ||
  fail "conf: the service did not take its file: $(cat "$MH_TMP/conf.log")"
hrun conf 60 --launcher service --service-key-file "$old" --service-port 17972 \
  -np 2 -H h1:2 "$T/it_coll" matrix -x 2 -q
ok conf 2
# SIGHUP: the file again, now with another key
sed -i "s|^key_file: .*|key_file: $new|" "$conf"
kill -HUP "$confpid"
mh_wait_log "$MH_TMP/conf.log" "SIGHUP: the settings file and the key file were read again" ||
  fail "hup: the service did not say it read its file again: $(tail -n 3 "$MH_TMP/conf.log")"
hrun hupold 60 --launcher service --service-key-file "$old" --service-port 17972 -np 1 -H h1:1 true
expect_rc hupold nonzero
expect_grep hupold err "refused this client" "the old key is refused after SIGHUP"
hrun hupnew 60 --launcher service --service-key-file "$new" --service-port 17972 -np 1 -H h1:1 true
expect_rc hupnew 0
# SIGHUP with a broken file: said, and the settings stay as they were
cp "$conf" "$conf.good"
sed -i "s|^drain_timeout: .*|drain_timeout: soon|" "$conf"
kill -HUP "$confpid"
mh_wait_log "$MH_TMP/conf.log" "SIGHUP: $conf:[0-9]+: bad drain_timeout 'soon'.*the settings stay as they were" ||
  fail "hupbad: the service did not say its file is bad: $(tail -n 3 "$MH_TMP/conf.log")"
hrun hupbad 60 --launcher service --service-key-file "$new" --service-port 17972 -np 1 -H h1:1 true
expect_rc hupbad 0
mv "$conf.good" "$conf"
mh_assert_no_job_procs "$MARK" 10
# stop: drain: SIGTERM takes no new job and lets the running one finish
hrun_start drain --launcher service --service-key-file "$new" --service-port 17972 \
  -np 2 -H h1:2 "$T/mh_loop" -t 4
wait_for drain out ": running$" 2 60 || fail "drain: the ranks did not start looping"
kill -TERM "$confpid"
mh_wait_log "$MH_TMP/conf.log" "draining 1 running job" ||
  fail "drain: the service did not say it drains: $(tail -n 3 "$MH_TMP/conf.log")"
hrun late 30 --launcher service --service-key-file "$new" --service-port 17972 -np 1 -H h1:1 true
expect_rc late nonzero
expect_grep late err "cannot reach the service" "no new job while draining"
hrun_wait drain 60
expect_rc drain 0
expect_count drain out "^\[[01]\]<stdout>:rank [01] of 2: [0-9]+ allreduces, 0 failures" 2 \
  "the running job finished its loop"
mh_wait_log "$MH_TMP/conf.log" "service: stopped" ||
  fail "drain: the service did not stop after its job: $(tail -n 3 "$MH_TMP/conf.log")"
mh_assert_no_job_procs "$MARK" 10
# a drain that runs out of time ends the job
# shellcheck disable=SC2086
mh_service "$MH_TMP/drain2.log" h1 --port 17973 --key-file "$new" $allow --stop drain \
  --drain-timeout 1
d2pid=$MH_SERVICE_PID
hrun_start drain2 --launcher service --service-key-file "$new" --service-port 17973 \
  -np 2 -H h1:2 "$T/mh_loop"
wait_for drain2 out ": running$" 2 60 || fail "drain2: the ranks did not start looping"
kill -TERM "$d2pid"
hrun_wait drain2 30
expect_rc drain2 nonzero
expect_within drain2 20 "ends once the drain timeout passed"
grep -q "the drain timeout passed: ending the 1 job" "$MH_TMP/drain2.log" ||
  fail "drain2: the service did not say the timeout ended the job: $(tail -n 3 "$MH_TMP/drain2.log")"
mh_assert_no_job_procs "$MARK" 15

# SIGTERM ends the services, and the job they run
# shellcheck disable=SC2086
hrun_start stopped $svc -np 2 -H h1:1,h2:1 "$T/mh_loop"
wait_for stopped out ": running$" 2 60 || fail "stopped: the ranks did not start looping within 60s"
for h in h1 h2 h3; do
  for p in $(cat "$MH_TMP/svc.$h.pid"); do kill -TERM "$p" 2>/dev/null; done
done
t=0
while [ -n "$(mh_host_pids h1 horad)$(mh_host_pids h2 horad)$(mh_host_pids h3 horad)" ] && [ $t -lt 150 ]; do
  t=$((t + 1))
  sleep 0.1
done
hrun_wait stopped 60
expect_rc stopped nonzero
mh_assert_no_job_procs "$MARK" 20
# (the first service to stop ends the job: the other horads may end with
# it, through horarun, before their own service comes to them)
grep -q "service: job [0-9]*: stopping: ending horad [0-9]* (from" "$MH_TMP/svc.h1.log" "$MH_TMP/svc.h2.log" ||
  fail "no service ended its job on SIGTERM"
for h in h1 h2 h3; do
  grep -q "service: stopping" "$MH_TMP/svc.$h.log" || fail "the service on $h did not stop on SIGTERM"
  if grep -Eq 'ERROR: (Address|Leak)Sanitizer|runtime error:' "$MH_TMP/svc.$h.log"; then
    fail "the service on $h: a sanitizer report:
$(grep -E -A12 'Sanitizer|runtime error:' "$MH_TMP/svc.$h.log" | head -n 30)"
  fi
done
finish
