#!/bin/sh
# run_horovod_suite_slurm.sh -- Horovod's own PyTorch test suite against
# hora, its ranks started by srun in a real Slurm cluster: two network-
# namespace hosts h1 and h2 with a slurmd each, slurmctld and munged on
# the client (tests/multihost/lib.sh, mh_slurm_up).
#
#   sudo tests/compat/run_horovod_suite_slurm.sh PATH/TO/test_torch.py [srun args...]
#
# Every test runs as `srun [srun args] python -m pytest ...` from the
# client: srun starts the ranks, and they join one hora job themselves
# (rank 0 starts horarun --join, whose horads start as job steps). The
# srun args choose the layout (default: -N2 -n2, one rank per host; e.g.
# -N2 -n4, or -N1 -n2 for one host). TIMEOUT, TESTS, BUILD, PYTHON and
# LOGS mean what they mean to run_horovod_suite.sh (LOGS defaults to a
# directory that is kept). The exit status is run_horovod_suite.sh's (0:
# nothing failed or hung), or 77 when this machine cannot set the
# cluster up.
set -u
if [ $# -lt 1 ] || [ ! -f "$1" ]; then
  echo "usage: $0 PATH/TO/test_torch.py [srun args...]" >&2
  exit 2
fi
src=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
shift
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../multihost/lib.sh"
need "$HORARUN" "$HORAD"
mh_slurm_up
[ $# -gt 0 ] || set -- -N2 -n2

LOGS=${LOGS:-$(mktemp -d "${TMPDIR:-/tmp}/hora-compat-slurm.XXXXXX")}
mkdir -p "$LOGS" "$MH_TMP/tmp.suite"
say "the suite under srun $* from the client"
mh_client env TMPDIR="$MH_TMP/tmp.suite" LOGS="$LOGS" BUILD="$BUILD" \
  HORA_HORARUN="$HORARUN" LAUNCHER="srun --quiet" \
  sh "$here/run_horovod_suite.sh" "$src" "$@"
rc=$?
left=$(for p in $(pgrep -f "horarun --join slurm-|horad --rendezvous"); do
  case "$(ps -o stat= -p "$p")" in Z*) ;; *) ps -o pid=,args= -p "$p" ;; esac
done)
[ -z "$left" ] || { echo "hora's processes left: $left"; rc=1; }
exit $rc
