#!/bin/sh
# remote.sh -- jobs over "remote" hosts without sshd: a fake ssh
# (use_fake_ssh in lib.sh) runs horad --rendezvous on this machine, so
# every host but localhost takes horarun's multi-host path (ssh, the
# rendezvous, the mesh). Checks: a scoped IPv6 host reaches ssh with its
# zone; one host whose ssh fails is the only one reported; a flood of
# silent connections on the rendezvous port does not keep the daemons out.
. "$(dirname "$0")/lib.sh"
[ -x "$BUILD/bin/horad" ] || { echo "no $BUILD/bin/horad: run make first"; exit 77; }
unset HORA_HORAD
use_fake_ssh

# ---- a two-host job through the fake ssh ------------------------------------
run_hr -np 3 -H localhost:1,fakehost:2 sh -c 'echo "r=$HORA_RANK"'
expect_rc 0 "two hosts"
for r in 0 1 2; do expect_in out "[$r]<stdout>:r=$r" "two hosts, rank $r"; done
note "a job on localhost and one fake remote host"

# ---- --mpi with a host that does not resolve: said, naming the host -------------
run_hr --mpi -np 2 -H localhost:1,no-such-host.invalid:1 true
expect_rc 1 "--mpi, unresolvable host"
expect_in err "horarun: error: host no-such-host.invalid: cannot find a route to it (does its name resolve?)" \
  "--mpi: the host without a route is named"
note "--mpi: a host without a route is an error naming it"

# ---- a scoped IPv6 host: the zone reaches ssh ---------------------------------
: >"$TMP/ssh.hosts"
run_hr -np 2 -H 'localhost:1,[fe80::1%eth0]:1' sh -c 'echo "h=$HORA_HOSTNAME"'
expect_rc 0 "scoped IPv6 host"
expect_in ssh.hosts "fe80::1%eth0" "ssh is given the zone"
expect_in out "[1]<stdout>:h=fe80::1%eth0" "the rank's host name"
printf 'localhost slots=1\n[fe80::2%%eth0] slots=1\n' >"$TMP/hosts"
run_hr --hostfile "$TMP/hosts" true
expect_rc 0 "scoped IPv6 in a host file"
expect_in ssh.hosts "fe80::2%eth0" "host file: ssh is given the zone"
printf 'hosts:\n  - localhost\n  - "[fe80::3%%eth0]"\n  - {name: n4, address: "fe80::4%%eth0"}\n' \
  >"$TMP/c.yaml"
run_hr --config-file "$TMP/c.yaml" true
expect_rc 0 "scoped IPv6 in a config file"
expect_in ssh.hosts "fe80::3%eth0" "config name: ssh is given the zone"
expect_in ssh.hosts "fe80::4%eth0" "config address: ssh is given the zone"
note "[fe80::1%eth0] in -H, a host file and a config file reaches ssh whole"

# ---- one host's ssh fails: only that failure is reported -----------------------
FAKE_SSH_FAIL=badhost && export FAKE_SSH_FAIL
run_hr -np 3 -H localhost:1,fakehost:1,badhost:1 true
expect_rc 1 "a failed ssh"
expect_in err "cannot start horad on host badhost: ssh exited with code 255" \
  "the failed ssh"
expect_in err "Could not resolve hostname badhost" "what ssh said"
expect_not_in err "exited unexpectedly" "no false report about the others"
n=$(grep -c '^horarun: error:' "$TMP/err")
[ "$n" -eq 1 ] || fail "a failed ssh: $n error lines, expected 1"
unset FAKE_SSH_FAIL
note "a failed ssh: one error, about that host only"

# ---- a flood of silent connections on the rendezvous port ----------------------
# 200 strangers connect, and stay silent, before the remote horad does.
FAKE_SSH_FLOOD=200 && export FAKE_SSH_FLOOD
start=$(date +%s)
run_hr --start-timeout 30 -np 2 -H localhost:1,fakehost:1 \
  sh -c 'echo "r=$HORA_RANK"'
unset FAKE_SSH_FLOOD
expect_rc 0 "a flood of silent connections"
expect_in out "[1]<stdout>:r=1" "the remote rank ran"
expect_not_in err "error:" "no error"
el=$(($(date +%s) - start))
[ "$el" -lt 15 ] || fail "the flood delayed the job by ${el}s"
note "200 silent connections on the rendezvous port: the job runs (${el}s)"
kill_marked
exit 0
