#!/bin/sh
# foreign.sh -- a program started by another launcher of several ranks
# (mpirun, an MPI launcher's PMI, srun, torchrun) and not by horarun:
# hora_init fails on every rank with HORA_EINVAL, saying which launcher
# and what to run instead, rather than training as separate jobs of one;
# a single rank of them, or no launcher, runs alone as before; the same
# variables in horarun's environment change nothing (horarun's ranks
# have their horad).
. "$(dirname "$0")/lib.sh"
use_horad
prog=$BUILD/examples/logreg
[ -x "$prog" ] || { echo "no $prog: run make first"; exit 77; }

refused() { # LAUNCHER-WORDS NP VAR=VALUE...
  _who=$1 _np=$2
  shift 2
  env "$@" "$prog" >"$TMP/out" 2>"$TMP/err"
  rc=$?
  [ $rc = 1 ] || fail "$_who: exit $rc, not 1"
  grep -q "hora_init failed: HORA_EINVAL: this process is rank [0-9]* of $_np started by $_who" "$TMP/err" ||
    fail "$_who: hora_init did not say who started it"
  grep -q "Start the job with horarun -np $_np" "$TMP/err" ||
    fail "$_who: no word of what to run instead"
  note "started by $_who ($*): refused, saying so"
}
refused "mpirun (Open MPI)" 4 OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=4
refused "an MPI launcher (PMI)" 3 PMI_RANK=0 PMI_SIZE=3
refused "srun" 2 SLURM_PROCID=1 SLURM_STEP_NUM_TASKS=2 SLURM_STEP_ID=0
refused "torchrun" 8 RANK=5 WORLD_SIZE=8 LOCAL_RANK=1

# HORA_STANDALONE=1: alone on purpose, whatever started it
env RANK=1 WORLD_SIZE=4 LOCAL_RANK=1 HORA_STANDALONE=1 "$prog" >"$TMP/out" 2>"$TMP/err"
rc=$?
[ $rc = 0 ] && grep -q "^logreg: 1 ranks," "$TMP/out" ||
  fail "HORA_STANDALONE=1: exit $rc, not a job of one: $(cat "$TMP/err")"
note "HORA_STANDALONE=1 under torchrun's variables: a job of one"

# one rank of a launcher, an allocation without a step, no launcher: alone
for e in "OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=1" \
  "SLURM_PROCID=0 SLURM_STEP_NUM_TASKS=4" "RANK=0 WORLD_SIZE=2" "A=1"; do
  # shellcheck disable=SC2086
  env $e "$prog" >"$TMP/out" 2>"$TMP/err"
  rc=$?
  [ $rc = 0 ] && grep -q "^logreg: 1 ranks," "$TMP/out" ||
    fail "with $e: exit $rc, not a job of one: $(cat "$TMP/err")"
done
note "a single rank, a step-less allocation, RANK without LOCAL_RANK: a job of one"

# horarun's ranks with the same variables around them: their horad wins
OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=4 RANK=0 WORLD_SIZE=4 LOCAL_RANK=0 \
  run_hr -np 2 "$prog"
expect_rc 0 "horarun with foreign launcher variables in its environment"
grep -q "logreg: 2 ranks," "$TMP/out" || fail "horarun's job is not of 2 ranks"
note "under horarun the variables change nothing"

# a real mpirun, where there is one
if command -v mpirun >/dev/null 2>&1; then
  root=""
  [ "$(id -u)" = 0 ] && root=--allow-run-as-root
  # shellcheck disable=SC2086
  timeout 60 mpirun $root --oversubscribe -np 2 "$prog" >"$TMP/out" 2>"$TMP/err"
  rc=$?
  [ $rc != 0 ] || fail "mpirun -np 2: exit 0"
  [ "$(grep -c "this process is rank [01] of 2 started by mpirun (Open MPI)" "$TMP/err")" = 2 ] ||
    fail "mpirun -np 2: not both ranks refused: $(head -c 600 "$TMP/err")"
  note "mpirun -np 2: both ranks refused, saying so"
else
  note "no mpirun here: the real launcher is not tried (Debian: openmpi-bin)"
fi
