#!/bin/sh
# foreign.sh -- ranks started by another launcher (srun, mpirun, an MPI
# launcher's PMI, torchrun) and not by horarun join one hora job: rank 0
# starts horarun --join, its horad writes each rank's way in to
# $TMPDIR/hora-UID/join-KEY, and the ranks train together.
#   - each launcher's variables, set here for processes this test starts
#     (one node): the job trains on all ranks, the weights agree, and the
#     join directory is gone afterwards;
#   - a real mpirun (and MPICH's mpiexec, and torchrun, where installed), with
#     hora_init() again after hora_shutdown(), and a rank that dies: the
#     others' collectives fail naming it;
#   - a rank the launcher never started is named after the start timeout;
#     rank 0 that never comes is reported by the others; a horarun that
#     cannot start, a join directory left by an earlier job, a base
#     directory others may write to;
#   - what hora cannot join says why and what to run instead (ranks on
#     several hosts outside Slurm, srun's cyclic distribution, a launcher
#     that does not say how many ranks share the node); HORA_STANDALONE=1
#     runs each alone; a single rank of a launcher runs alone; horarun's
#     own ranks are not taken for joiners.
. "$(dirname "$0")/lib.sh"
use_horad
[ "$HORAD_KIND" = real ] || { echo "joining needs the real horad"; exit 77; }
prog=$BUILD/examples/logreg
[ -x "$prog" ] || { echo "no $prog: run make first"; exit 77; }
export TMPDIR="$TMP/tmp"
mkdir -p "$TMPDIR"
base="$TMPDIR/hora-$(id -u)"
unset OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE PMI_RANK PMI_SIZE SLURM_PROCID \
  SLURM_STEP_ID RANK WORLD_SIZE LOCAL_RANK HORA_HORARUN HORA_STANDALONE

# launch KIND NP [only=I] [VAR=VALUE...]: starts the NP ranks of $prog (or
# rank I alone) with KIND's variables, as that launcher would on one node,
# as children of this shell (MPICH's and torchrun's ranks share a parent);
# their output in $TMP/out.I and $TMP/err.I, their exit statuses in $rcs.
launch() {
  _kind=$1 _np=$2 _i=0 _only=
  shift 2
  case "${1:-}" in only=*) _only=${1#only=}; shift ;; esac
  _pids=
  while [ "$_i" -lt "$_np" ]; do
    if [ -n "$_only" ] && [ "$_i" != "$_only" ]; then
      _i=$((_i + 1))
      continue
    fi
    case $_kind in
    ompi) _v="OMPI_COMM_WORLD_RANK=$_i OMPI_COMM_WORLD_SIZE=$_np OMPI_COMM_WORLD_LOCAL_RANK=$_i OMPI_COMM_WORLD_LOCAL_SIZE=$_np PMIX_NAMESPACE=sim$$" ;;
    pmi) _v="PMI_RANK=$_i PMI_SIZE=$_np MPI_LOCALRANKID=$_i MPI_LOCALNRANKS=$_np" ;;
    srun) _v="SLURM_JOB_ID=sim$$ SLURM_STEP_ID=0 SLURM_PROCID=$_i SLURM_STEP_NUM_TASKS=$_np SLURM_LOCALID=$_i SLURM_NODEID=0 SLURM_STEP_NUM_NODES=1 SLURM_STEP_TASKS_PER_NODE=$_np" ;;
    srunpmi) _v="SLURM_JOB_ID=sim$$ SLURM_STEP_ID=0 SLURM_PROCID=$_i SLURM_STEP_NUM_TASKS=$_np SLURM_LOCALID=$_i SLURM_NODEID=0 SLURM_STEP_NUM_NODES=1 SLURM_STEP_TASKS_PER_NODE=$_np PMI_RANK=$_i PMI_SIZE=$_np" ;;
    torchrun) _v="RANK=$_i WORLD_SIZE=$_np LOCAL_RANK=$_i LOCAL_WORLD_SIZE=$_np GROUP_RANK=0 MASTER_PORT=2$$ TORCHELASTIC_RESTART_COUNT=0" ;;
    esac
    # shellcheck disable=SC2086
    env $_v "$@" "$prog" --epochs 3 >"$TMP/out.$_i" 2>"$TMP/err.$_i" &
    _pids="$_pids $!"
    _i=$((_i + 1))
  done
  rcs=
  for _p in $_pids; do
    wait "$_p"
    rcs="$rcs $?"
  done
  rcs=${rcs# }
}
show() { for _f in "$TMP"/out.* "$TMP"/err.*; do echo "--- $_f"; head -c 800 "$_f"; done; }
no_join_dirs() { # the horads end just after the ranks: wait up to 5 s
  _n=0
  while [ -n "$(ls -A "$base" 2>/dev/null)" ] && [ $_n -lt 50 ]; do
    sleep 0.1
    _n=$((_n + 1))
  done
  [ -z "$(ls -A "$base" 2>/dev/null)" ] || fail "$1: left $(ls -A "$base")"
  # (a horarun that outlived rank 0, its parent, is a zombie until init
  # reaps it: gone, not left)
  _left=$(for _p in $(pgrep -f "horarun --join [a-z]*-"); do
    case "$(ps -o stat= -p "$_p")" in Z*) ;; *) ps -o pid=,args= -p "$_p" ;; esac
  done | grep -e "sim$$" -e "-2$$-" -e "pmi-$$" || true)
  [ -z "$_left" ] || fail "$1: left processes: $_left"
}

for kind in ompi pmi srun torchrun; do
  rm -f "$TMP"/out.* "$TMP"/err.*
  launch $kind 3
  [ "$rcs" = "0 0 0" ] || { show; fail "$kind: exit statuses $rcs"; }
  grep -q "^logreg: 3 ranks," "$TMP/out.0" &&
    grep -q "weights identical on all 3 ranks" "$TMP/out.0" ||
    { show; fail "$kind: not one job of 3 ranks"; }
  no_join_dirs "$kind"
  note "$kind's variables: 3 ranks joined one job, weights identical, nothing left"
done

# Launchers inside launchers: the innermost one with several ranks counts.
rm -f "$TMP"/out.* "$TMP"/err.*
launch torchrun 3 SLURM_JOB_ID=sim$$ SLURM_STEP_ID=1 SLURM_PROCID=0 SLURM_STEP_NUM_TASKS=1
[ "$rcs" = "0 0 0" ] && grep -q "weights identical on all 3 ranks" "$TMP/out.0" ||
  { show; fail "torchrun inside a step of one task: $rcs"; }
rm -f "$TMP"/out.* "$TMP"/err.*
launch srunpmi 3
[ "$rcs" = "0 0 0" ] && grep -q "weights identical on all 3 ranks" "$TMP/out.0" ||
  { show; fail "srun --mpi=pmi2's variables: $rcs"; }
no_join_dirs "nested launchers"
note "torchrun inside an srun task of one, and srun --mpi=pmi2's PMI variables: one job each"

# A rank the launcher never started: named once the start timeout is over.
rm -f "$TMP"/out.* "$TMP"/err.*
launch ompi 2 only=0 HORA_START_TIMEOUT=2
[ "$rcs" != 0 ] || fail "rank 1 missing: rank 0 exited 0"
grep -q "rank 1 on host .* did not join the job within 2 s" "$TMP/err.0" ||
  { show; fail "rank 1 missing: rank 0 does not name it"; }
note "a rank that never came is named after HORA_START_TIMEOUT (2 s)"

# Rank 0 never comes: the others give up, saying where they looked.
rm -f "$TMP"/out.* "$TMP"/err.*
launch ompi 2 only=1 HORA_START_TIMEOUT=1
[ "$rcs" != 0 ] || fail "rank 0 missing: rank 1 exited 0"
grep -q "no horad for the job appeared in $base/join-ompi-sim$$ within 6 s" "$TMP/err.1" ||
  { show; fail "rank 0 missing: rank 1 does not say so"; }
note "without rank 0, the others say no horad came, and where they looked"

# horarun cannot start, or fails.
rm -f "$TMP"/out.* "$TMP"/err.*
launch torchrun 2 only=0 HORA_HORARUN=/nonexistent/horarun
grep -q "rank 0 of 2 started by torchrun cannot start /nonexistent/horarun" "$TMP/err.0" ||
  { show; fail "no horarun: rank 0 does not say so"; }
launch torchrun 2 only=0 HORA_HORARUN=/bin/false
grep -q "rank 0: horarun, started to join the 2 ranks of torchrun into one job, exited with code 1" "$TMP/err.0" ||
  { show; fail "failing horarun: rank 0 does not say so"; }
note "a horarun that cannot start or fails is reported by rank 0"

# What an earlier job of the same key left: refreshed, not followed.
mkdir -p "$base/join-ompi-sim$$"
chmod 700 "$base" "$base/join-ompi-sim$$"
for i in 0 1; do printf '@hora-gone-%s\n%032d\n' $$ 0 >"$base/join-ompi-sim$$/rank.$i"; done
rm -f "$TMP"/out.* "$TMP"/err.*
launch ompi 2
[ "$rcs" = "0 0" ] || { show; fail "stale join directory: exit statuses $rcs"; }
no_join_dirs "stale join directory"
note "an earlier job's join files are replaced, not followed"

# The same, its socket's name now bound by another user: not followed
# either (a rank speaks only to its own user's horad)
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null 2>&1 &&
  [ -x /usr/bin/python3 ]; then
  setpriv --reuid=65534 --regid=65534 --clear-groups /usr/bin/python3 -c '
import socket, sys, time
s = socket.socket(socket.AF_UNIX)
s.bind("\0hora-impostor-" + sys.argv[1]); s.listen(8)
time.sleep(30)' $$ &
  imp=$!
  n=0
  until grep -q "@hora-impostor-$$" /proc/net/unix || [ $n -ge 50 ]; do
    sleep 0.1
    n=$((n + 1))
  done
  grep -q "@hora-impostor-$$" /proc/net/unix || fail "the other user's socket did not come up"
  mkdir -p "$base/join-ompi-sim$$"
  chmod 700 "$base/join-ompi-sim$$"
  for i in 0 1; do printf '@hora-impostor-%s\n%032d\n' $$ 0 >"$base/join-ompi-sim$$/rank.$i"; done
  rm -f "$TMP"/out.* "$TMP"/err.*
  launch ompi 2
  kill $imp 2>/dev/null
  wait $imp 2>/dev/null
  [ "$rcs" = "0 0" ] || { show; fail "another user's socket in the join files: exit statuses $rcs"; }
  no_join_dirs "another user's socket"
  note "join files naming another user's socket are not followed"
fi

# A base directory others may write to is refused.
mkdir -p "$TMP/open/hora-$(id -u)"
chmod 777 "$TMP/open/hora-$(id -u)"
rm -f "$TMP"/out.* "$TMP"/err.*
launch srun 2 TMPDIR="$TMP/open"
[ "$rcs" = "1 1" ] || { show; fail "open base directory: exit statuses $rcs"; }
grep -q "hora-$(id -u) is not a directory private to uid $(id -u)" "$TMP/err.1" ||
  { show; fail "open base directory: no reason given"; }
note "a join base directory others may write to is refused"

refused() { # LAUNCHER-WORDS REASON VAR=VALUE...
  _who=$1 _why=$2
  shift 2
  env "$@" "$prog" >"$TMP/out" 2>"$TMP/err"
  rc=$?
  [ $rc = 1 ] || fail "$_who: exit $rc, not 1"
  grep -q "hora_init failed: HORA_EINVAL: this process is rank [0-9]* of [0-9]* started by $_who, not by horarun, and hora cannot join them into one job: $_why" "$TMP/err" ||
    fail "$_who: hora_init did not say why it cannot join"
  grep -q "Start the job with horarun -np" "$TMP/err" ||
    fail "$_who: no word of what to run instead"
  note "$_who, $_why: refused, saying so"
}
refused "an MPI launcher (PMI)" "its variables do not say how many" \
  PMI_RANK=0 PMI_SIZE=3
# a PMI launcher other than hydra's mpiexec on several hosts (the parent
# of this rank is this shell): nothing names its job on every host
refused "an MPI launcher (PMI)" "its ranks run on several hosts, and only MPICH's mpiexec (hydra) among PMI launchers" \
  PMI_RANK=0 PMI_SIZE=4 MPI_LOCALRANKID=0 MPI_LOCALNRANKS=2
# a C program of torchrun's on several hosts asks torch's store where the
# ranks are (through torchrun's Python): without MASTER_ADDR and
# MASTER_PORT nothing names them
env RANK=5 WORLD_SIZE=8 LOCAL_RANK=1 LOCAL_WORLD_SIZE=4 GROUP_RANK=1 "$prog" >"$TMP/out" 2>"$TMP/err"
rc=$?
[ $rc = 1 ] && grep -q "rank 5 of 8 started by torchrun on several hosts: hora cannot learn the ranks' hosts: nothing names them (HORA_JOIN_HOSTS, or torchrun's store: MASTER_ADDR and MASTER_PORT are not set)" "$TMP/err" ||
  fail "torchrun's C program on several hosts: exit $rc, $(cat "$TMP/err")"
note "a C program that torchrun started on several hosts, without MASTER_ADDR: told that nothing names the hosts"
# and where no store answers, a node's first rank says so
if /usr/bin/python3 -c "import torch" 2>/dev/null; then
  _port=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  env PATH="/usr/bin:$PATH" RANK=4 WORLD_SIZE=8 LOCAL_RANK=0 LOCAL_WORLD_SIZE=4 GROUP_RANK=1 \
    MASTER_ADDR=127.0.0.1 MASTER_PORT="$_port" HORA_START_TIMEOUT=1 \
    "$prog" >"$TMP/out" 2>"$TMP/err"
  rc=$?
  [ $rc = 1 ] && grep -q "rank 4 of 8 started by torchrun on several hosts: hora cannot learn the ranks' hosts: asking torch's store at 127.0.0.1:$_port through .*python.* failed (exit status 1" "$TMP/err" ||
    fail "torchrun's C program, no store: exit $rc, $(tail -n 3 "$TMP/err")"
  note "a C program that torchrun started on several hosts, with no store at MASTER_ADDR: told so"
fi
refused "srun" "it did not give each node consecutive ranks" \
  SLURM_JOB_ID=1 SLURM_STEP_ID=0 SLURM_PROCID=1 SLURM_STEP_NUM_TASKS=2 \
  SLURM_LOCALID=0 SLURM_NODEID=0 SLURM_STEP_NUM_NODES=2 SLURM_STEP_TASKS_PER_NODE='1(x2)'

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

# horarun's ranks with the same variables around them: their horad wins,
# and HORA_JOIN_KEY in horarun's environment does not make horad wait
OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=4 RANK=0 WORLD_SIZE=4 LOCAL_RANK=0 \
  HORA_JOIN_KEY=x run_hr -np 2 "$prog"
expect_rc 0 "horarun with foreign launcher variables in its environment"
grep -q "logreg: 2 ranks," "$TMP/out" || fail "horarun's job is not of 2 ranks"
note "under horarun the variables change nothing"

# Real launchers, where there are.
PY=/usr/bin/python3
job="$HORA_TOP/tests/python/workers/joined.py"
have_numpy=no
PYTHONPATH="$HORA_TOP/python" "$PY" -c "import numpy" 2>/dev/null && have_numpy=yes
export PYTHONPATH="$HORA_TOP/python" HORA_LIBRARY="$BUILD/lib/libhora.so"
# Python was not built with the sanitizers: their runtimes preloaded into
# the Python ranks alone (not into mpirun, ps or pgrep)
san=""
if ldd "$HORA_LIBRARY" | grep -q libasan; then
  san="LD_PRELOAD=$(gcc -print-file-name=libasan.so):$(gcc -print-file-name=libubsan.so)"
fi
pyrun() { # mpirun-args...: mpirun of $PY job.py, sanitizers preloaded
  # shellcheck disable=SC2086
  timeout 60 mpirun $root --oversubscribe ${san:+-x "$san" -x ASAN_OPTIONS=detect_leaks=0} \
    "$@" "$PY" "$job" >"$TMP/out.raw" 2>"$TMP/err"
  _rc=$?
  # mpirun may glue two ranks' lines together ("...joinedrank 0 ...")
  sed 's/\([^ ]\)rank /\1\nrank /g' "$TMP/out.raw" >"$TMP/out"
  return $_rc
}
if command -v mpirun >/dev/null 2>&1; then
  root=""
  [ "$(id -u)" = 0 ] && root=--allow-run-as-root
  # shellcheck disable=SC2086
  timeout 60 mpirun $root --oversubscribe -np 3 "$prog" --epochs 3 >"$TMP/out" 2>"$TMP/err"
  rc=$?
  [ $rc = 0 ] && grep -q "weights identical on all 3 ranks" "$TMP/out" ||
    fail "mpirun -np 3: exit $rc, not one job"
  note "mpirun -np 3: one job of 3 ranks, weights identical"
  if [ $have_numpy = yes ]; then
    pyrun -np 2
    rc=$?
    [ $rc = 0 ] && [ "$(grep -c "joined" "$TMP/out")" = 2 ] ||
      fail "mpirun python, init again: exit $rc"
    DIE=1 pyrun -x DIE -np 3
    for r in 0 2; do
      grep -q "rank $r: .*rank 1 on host .* left the job without shutting down hora" "$TMP/out" ||
        fail "mpirun, rank 1 dies: rank $r's collective did not fail naming it"
    done
    QUIT=1 pyrun -x QUIT -np 3
    for r in 0 2; do
      grep -q "rank $r: .*no new session can start: rank 1 on host .* has ended" "$TMP/out" ||
        fail "mpirun, rank 1 exits after shutdown: rank $r's hora_init again did not fail naming it"
    done
    note "mpirun python: init again works; a rank that dies fails the others' collectives, named"
  fi
else
  note "no mpirun here: the real launcher is not tried (Debian: openmpi-bin)"
fi
# MPICH's mpiexec (hydra): its ranks' job is named by where mpiexec
# listens, which a rank finds in its node's proxy's command line, also
# with a shell between them
if command -v mpiexec.mpich >/dev/null 2>&1; then
  timeout 60 mpiexec.mpich -n 3 sh -c 'exec "$0" --epochs 3' "$prog" \
    >"$TMP/out" 2>"$TMP/err"
  rc=$?
  [ $rc = 0 ] && grep -q "weights identical on all 3 ranks" "$TMP/out" ||
    { show; fail "mpiexec.mpich -n 3: exit $rc, not one job"; }
  # a second one at the same time: two jobs, two keys
  timeout 60 mpiexec.mpich -n 2 "$prog" --epochs 3 >"$TMP/out.a" 2>"$TMP/err.a" &
  _a=$!
  timeout 60 mpiexec.mpich -n 2 "$prog" --epochs 3 >"$TMP/out.b" 2>"$TMP/err.b"
  rc=$?
  wait $_a
  rca=$?
  [ $rc = 0 ] && [ $rca = 0 ] && grep -q "weights identical on all 2 ranks" "$TMP/out.a" &&
    grep -q "weights identical on all 2 ranks" "$TMP/out.b" ||
    fail "two mpiexec.mpich -n 2 at once: exit $rca and $rc"
  note "MPICH's mpiexec -n 3 (through a shell), and two of -n 2 at once: one job each"
else
  note "no MPICH here: its mpiexec is not tried (Debian: mpich)"
fi
if command -v torchrun >/dev/null 2>&1 && [ $have_numpy = yes ] &&
  "$(head -n 1 "$(command -v torchrun)" | sed 's/^#!//')" -c "import torch" 2>/dev/null; then
  # --redirects/--tee 1: torch 1.13's torchrun fails on Python 3.11 with
  # its default of 0 (no redirection)
  # shellcheck disable=SC2086
  env $san ${san:+ASAN_OPTIONS=detect_leaks=0} timeout 90 torchrun \
    --nproc_per_node 3 --redirects 1 --tee 1 "$job" >"$TMP/out" 2>"$TMP/err"
  rc=$?
  [ $rc = 0 ] && [ "$(grep -c "rank [0-2] of 3 joined" "$TMP/out")" = 3 ] ||
    fail "torchrun --nproc_per_node 3: exit $rc"
  note "torchrun --nproc_per_node 3: one job of 3 ranks"
else
  note "no torchrun with torch here: that real launcher is not tried (Debian: python3-torch)"
fi
no_join_dirs "real launchers"

# --join's own usage errors
run_hr --join "a/b" -np 2
expect_rc 2 "--join with a slash"
expect_in err "invalid --join value 'a/b': expected up to 150 letters"
run_hr --join k --doctor
expect_rc 2 "--join with --doctor"
expect_in err "--doctor and --join cannot be given together"
note "--join refuses a key that is no file name part, and --doctor"
