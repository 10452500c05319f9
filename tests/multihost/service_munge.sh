#!/bin/sh
# service_munge.sh -- horad services that authenticate users with MUNGE
# (horad --service --auth munge, as root) and run each job as its user
# (network namespaces, see lib.sh). The test starts munged with a fresh
# key (one munged serves every namespace: its socket is a file), the
# services on h1 and h2, and makes two users (hora-mu1, hora-mu2, both in
# the group hora-mg), removed at the end:
#   whoami    a job of hora-mu1's through the services: its ranks run as
#             hora-mu1, with its groups; the services log the user
#   local     from h1: hora-mu1's horad there starts through the service's
#             unix socket with no credential and runs as hora-mu1; root
#             at the socket refused
#   twousers  jobs of both users at once on the same hosts; meanwhile, as
#             hora-mu2: hora-mu1's ranks cannot be signalled, their
#             environment (the rank's token) and descriptors (the shared
#             memory) cannot be read, their horad's socket refuses the
#             connection. Then hora-mu1's rank is killed: that job fails,
#             hora-mu2's goes on to a clean end
#   killed    hora-mu2's horarun SIGKILLed: its horads and ranks end, the
#             services go on, the next job runs
#   refused   a forged, an expired, a replayed credential and one made for
#             another connection: refused, the client told why and the
#             service logs it; a service whose munged is not there says
#             so; root's job refused (no --allow-root); a client with the
#             cluster key refused, told to use MUNGE
# Needs root, namespaces, munged and libmunge (Debian: munge); without
# them it says why and is skipped.
. "$(dirname "$0")/lib.sh"
need "$HORARUN" "$HORAD" "$T/it_coll" "$T/mh_loop" "$T/mh_munge"
for t in munged useradd userdel groupadd groupdel setpriv; do
  command -v $t >/dev/null 2>&1 || skip "no $t (Debian: munge passwd util-linux)"
done
[ "$(id -u)" = 0 ] || skip "needs root (the service runs each job as its user)"
ldconfig -p 2>/dev/null | grep -q 'libmunge\.so\.2 ' || skip "no libmunge.so.2 (Debian: munge)"

U1=hora-mu1 U2=hora-mu2 G=hora-mg
mu_made=""
mu_exit() {
  _mu_rc=$?
  mh_teardown
  for _u in $mu_made; do userdel "$_u" >/dev/null 2>&1; done
  getent group $G >/dev/null && groupdel $G >/dev/null 2>&1
  exit $_mu_rc
}
mh_setup 2
trap 'mu_exit' EXIT
getent group $G >/dev/null || groupadd -r $G || mh_die "groupadd $G failed"
for u in $U1 $U2; do
  if ! id "$u" >/dev/null 2>&1; then
    useradd -r -M -d /nonexistent -s /usr/sbin/nologin -G $G "$u" || mh_die "useradd $u failed"
  fi
  mu_made="$mu_made $u"
done
UID1=$(id -u $U1) UID2=$(id -u $U2)
chmod 755 "$MH_TMP" # the users' horarun and munged's socket live there

S=$MH_TMP/munge
mkdir -p "$S" && chmod 755 "$S"
dd if=/dev/urandom of="$S/munge.key" bs=1024 count=1 2>/dev/null
chmod 600 "$S/munge.key"
mh_client munged -f --key-file="$S/munge.key" --socket="$S/munge.sock" \
  --pid-file="$S/munged.pid" --log-file="$S/munged.log" \
  --seed-file="$S/munge.seed" || mh_die "munged did not start"
cat "$S/munged.pid" >>"$MH_TMP/infra.pids"
port=17971
for h in h1 h2; do
  mh_service "$MH_TMP/svc.$h.log" "$h" --auth munge --munge-socket "$S/munge.sock" --port $port
done
svc="--launcher service --service-auth munge --munge-socket $S/munge.sock --service-port $port"
hosts="-np 2 -H h1:1,h2:1"

# whoami: the ranks run as the user, with its groups
HRUN_AS=$U1 hrun whoami 60 $svc $hosts sh -c 'echo "uid $(id -u) gid $(id -g) groups $(id -Gn)"'
expect_rc whoami 0
expect_count whoami out "^\[[01]\]<stdout>:uid $UID1 gid $(id -g $U1) groups .*\b$G\b" 2 \
  "each rank runs as $U1 (uid, gid) with its group $G"
for h in h1 h2; do
  grep -q "service: job [0-9]* from $(mh_addr client) (user $U1, uid $UID1): horad [0-9]* started" \
    "$MH_TMP/svc.$h.log" || fail "whoami: the service on $h did not log the job's user"
done
mh_assert_no_job_procs "$MARK" 10

# local: from h1, the user's horad there starts through h1's service's
# unix socket, without a credential (the kernel says who connects), and
# runs as the user; root at the socket is refused as over TCP
HRUN_AS=$U1 HRUN_FROM=h1 hrun localuser 60 $svc --service-socket "$MH_TMP/svc.h1.sock" \
  $hosts sh -c 'echo "uid $(id -u) gid $(id -g) groups $(id -Gn)"'
expect_rc localuser 0
expect_count localuser out "^\[[01]\]<stdout>:uid $UID1 gid $(id -g $U1) groups .*\b$G\b" 2 \
  "each rank runs as $U1 (uid, gid) with its group $G"
grep -q "service: job [0-9]* from local uid $UID1 (pid [0-9]*) (user $U1, uid $UID1): horad [0-9]* started" \
  "$MH_TMP/svc.h1.log" || fail "localuser: h1's service did not log the job from its socket"
HRUN_FROM=h1 hrun localroot 60 $svc --service-socket "$MH_TMP/svc.h1.sock" -np 1 -H h1:1 true
expect_rc localroot nonzero
expect_grep localroot err "the service refused the request: jobs as root are not taken here" \
  "root at the socket is refused, and told why"
mh_assert_no_job_procs "$MARK" 10

# twousers: both users' jobs at once; one cannot touch the other's
HRUN_AS=$U1 hrun_start one $svc $hosts "$T/mh_loop"
HRUN_AS=$U2 hrun_start two $svc $hosts "$T/mh_loop" -t 8
wait_for one out ": running$" 2 60 || fail "twousers: $U1's ranks did not start looping"
wait_for two out ": running$" 2 60 || fail "twousers: $U2's ranks did not start looping"
rank1=""
for p in $(mh_host_pids h1 mh_loop); do
  [ "$(stat -c %u "/proc/$p")" = "$UID1" ] && rank1=$p
done
hd1=""
for p in $(mh_host_pids h1 horad); do
  [ "$(stat -c %u "/proc/$p")" = "$UID1" ] && hd1=$p
done
if [ -z "$rank1" ] || [ -z "$hd1" ]; then
  fail "twousers: no rank or horad of $U1's on h1 (rank '$rank1', horad '$hd1')"
else
  as2="setpriv --reuid=$U2 --regid=$(id -g $U2) --init-groups"
  # shellcheck disable=SC2086
  mh_exec h1 $as2 kill -0 "$rank1" 2>/dev/null &&
    fail "twousers: $U2 may signal $U1's rank"
  # shellcheck disable=SC2086
  mh_exec h1 $as2 cat "/proc/$rank1/environ" >/dev/null 2>&1 &&
    fail "twousers: $U2 may read $U1's rank's environment (its token)"
  # shellcheck disable=SC2086
  mh_exec h1 $as2 ls "/proc/$rank1/fd" >/dev/null 2>&1 &&
    fail "twousers: $U2 may list $U1's rank's descriptors (its shared memory)"
  sock=$(mh_exec h1 sed -n "s/.* @\(hora-$hd1-[0-9a-f]*\)$/\1/p" /proc/net/unix | head -n 1)
  if [ -z "$sock" ]; then
    fail "twousers: no socket of $U1's horad ($hd1) on h1"
  else
    # shellcheck disable=SC2086
    got=$(mh_exec h1 $as2 "${PYTHON:-/usr/bin/python3}" -c '
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(5)
s.connect("\0" + sys.argv[1])
try:
    s.sendall(b"HORA")
    print("closed" if s.recv(16) == b"" else "answered")
except socket.timeout:
    print("open")
except OSError:  # reset, or closed before we wrote
    print("closed")
' "$sock" 2>&1)
    [ "$got" = closed ] || fail "twousers: $U2's connection to $U1's horad: '$got', not closed"
    wait_for one err "connection from uid $UID2 refused" 1 10 ||
      fail "twousers: $U1's horad did not say it refused uid $UID2"
  fi
  kill -9 "$rank1"
fi
hrun_wait one 60
expect_rc one nonzero
hrun_running two || fail "twousers: $U2's job ended with $U1's"
hrun_wait two 90
expect_rc two 0
expect_count two out "^\[[01]\]<stdout>:rank [01] of 2: [0-9]+ allreduces, 0 failures" 2 \
  "$U2's ranks end cleanly"
mh_assert_no_job_procs "$MARK" 15

# killed: a user's horarun SIGKILLed; the services go on
HRUN_AS=$U2 hrun_start killed $svc $hosts "$T/mh_loop"
if wait_for killed out ": running$" 2 60; then
  kill -9 "$HRUN_PID"
else
  fail "killed: the ranks did not start looping"
fi
hrun_wait killed 30
mh_assert_no_job_procs "$MARK" 20
for h in h1 h2; do
  [ -n "$(mh_host_pids "$h" horad)" ] || fail "killed: the service on $h is gone"
done
HRUN_AS=$U1 hrun after 120 $svc $hosts "$T/it_coll" matrix -x 2
expect_rc after 0
expect_count after out "^\[[0-9]+\]<stdout>:rank [0-9]+ of 2: [0-9]+ checks, 0 failures" 2 \
  "every rank reports its checks, none failed"
mh_assert_no_job_procs "$MARK" 10

# refused: bad credentials, root, the cluster key
for m in forged expired replayed othernonce; do
  mh_client "$T/mh_munge" h1 $port "$S/munge.sock" $m >"$MH_TMP/$m.out" 2>&1 ||
    fail "refused: $m: $(cat "$MH_TMP/$m.out")"
done
refusal() { # MODE ERE: the client was told, the service logged it
  grep -Eq "^refused: horad: the service refused the request: $2" "$MH_TMP/$1.out" ||
    fail "refused: $1: the client was not told '$2': $(cat "$MH_TMP/$1.out")"
  grep -Eq "service: job [0-9]+: refused a request from $(mh_addr client): $2" "$MH_TMP/svc.h1.log" ||
    fail "refused: $1: the service did not log '$2'"
}
refusal forged "an invalid MUNGE credential \(munged: "
refusal expired "an expired MUNGE credential of uid 0 \(munged: Expired"
refusal replayed "a replayed MUNGE credential of uid 0 \(munged: Replayed"
refusal othernonce "a MUNGE credential \(uid 0\) not made for this connection"
# a service whose munged is not there: it says so, not that the
# credential is bad
mh_service "$MH_TMP/nomunged.log" h2 --auth munge --munge-socket "$MH_TMP/nosuch.sock" --port 17975
mh_client "$T/mh_munge" h2 17975 "$S/munge.sock" othernonce >"$MH_TMP/nomunged.out" 2>&1
grep -q "^refused: horad: the service refused the request: the service cannot check MUNGE credentials (munged: " \
  "$MH_TMP/nomunged.out" || fail "nomunged: the client was not told: $(cat "$MH_TMP/nomunged.out")"
hrun rootjob 60 $svc $hosts true
expect_rc rootjob nonzero
expect_grep rootjob err "jobs as root are not taken here" "root's job refused, and told why"
key=$MH_TMP/cluster.key
mh_key_file "$key"
hrun keyjob 60 --launcher service --service-key-file "$key" --service-port $port $hosts true
expect_rc keyjob nonzero
expect_grep keyjob err "this service authenticates users with MUNGE" "a key client is told to use MUNGE"
mh_assert_no_job_procs "$MARK" 10
for h in h1 h2; do
  if grep -Eq 'ERROR: (Address|Leak)Sanitizer|runtime error:' "$MH_TMP/svc.$h.log"; then
    fail "the service on $h: a sanitizer report:
$(grep -E -A12 'Sanitizer|runtime error:' "$MH_TMP/svc.$h.log" | head -n 30)"
  fi
done
finish
