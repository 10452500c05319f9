#!/bin/sh
# run_horovod_suite_hosts.sh -- Horovod's own PyTorch test suite against
# hora, across hosts: 3 network-namespace hosts (tests/multihost/lib.sh),
# one rank each, horarun on the client machine.
#
#   sudo tests/compat/run_horovod_suite_hosts.sh PATH/TO/test_torch.py [horarun args...]
#
# It sets up h1, h2, h3 and the client (mh_setup 3; needs root, ip netns,
# sshd: see tests/multihost/README), then runs run_horovod_suite.sh from
# the client with
#
#   -np 3 -H h1:1,h2:1,h3:1 [horarun args]
#
# (give -np and -H yourself for another layout of those hosts, e.g.
# `-np 6 -H h1:2,h2:2,h3:2`), checks that no process of any job is left
# on any host, and tears everything down. Each rank runs on its host
# with the client's environment and working directory, as under ssh with
# a shared file system. TIMEOUT, TESTS, BUILD, PYTHON and LOGS mean what
# they mean to run_horovod_suite.sh (LOGS defaults to a directory that
# is kept). MH_HOSTS_N (default 3) is the number of hosts set up.
# The exit status is run_horovod_suite.sh's (0: nothing failed or hung),
# or 77 when this machine cannot set up the hosts.
set -u
if [ $# -lt 1 ] || [ ! -f "$1" ]; then
  echo "usage: $0 PATH/TO/test_torch.py [horarun args...]" >&2
  exit 2
fi
src=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
shift
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../multihost/lib.sh"
need "$HORARUN" "$HORAD"
nhosts=${MH_HOSTS_N:-3}
mh_setup "$nhosts"

has_np=no
for a in "$@"; do
  case "$a" in -np|--num-proc|-np=*|--num-proc=*) has_np=yes ;; esac
done
if [ $has_np = no ]; then
  hl=""
  for h in $MH_HOSTS; do hl="$hl${hl:+,}$h:1"; done
  set -- -np "$nhosts" -H "$hl" "$@"
fi

# the logs outlive the hosts (MH_TMP goes at teardown)
LOGS=${LOGS:-$(mktemp -d "${TMPDIR:-/tmp}/hora-compat-hosts.XXXXXX")}
mkdir -p "$LOGS" "$MH_TMP/tmp.suite"
say "the suite on $MH_HOSTS from the client: horarun $*"
mh_client env HORA_IT_MARK="$MARK" TMPDIR="$MH_TMP/tmp.suite" LOGS="$LOGS" \
  BUILD="$BUILD" sh "$here/run_horovod_suite.sh" "$src" "$@"
rc=$?
mh_assert_no_job_procs "$MARK" 10 || rc=1
exit $rc
