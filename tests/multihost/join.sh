#!/bin/sh
# join.sh -- ranks that mpirun or torchrun started on several hosts join one
# hora job (network namespaces, see lib.sh; srun's are in slurm.sh):
#   mpirun    mpirun -H h1:2,h2:2 -np 4 from the client: libhora learns the
#             ranks' hosts through MPI itself (Open MPI, loaded at run
#             time), rank 0 (on h1) starts horarun --join -H h1:2,h2:2,
#             whose horad on h2 starts over ssh; every collective of
#             it_coll's matrix right; nothing left on any host
#   mpich     the same through MPICH's mpiexec (hydra): MPICH's MPI
#             gathers the hosts
#   cyclic    mpirun --map-by node: the ranks of a node are not consecutive,
#             so every rank refuses, saying which ranks and what to use
#   torchrun  one torchrun per host (--nnodes 2, static rendezvous at h1):
#             hora learns the hosts through torch's store; a Python job of
#             4 ranks (init, allreduce, shutdown, init again), then a C
#             one (--no_python: libhora asks the store through torchrun's
#             Python), every collective of it_coll's matrix right
. "$(dirname "$0")/lib.sh"
need "$HORARUN" "$HORAD" "$T/it_coll"
command -v mpirun >/dev/null 2>&1 ||
  skip "no mpirun (Debian: openmpi-bin; tests/deps.sh test installs it)"
mh_setup 2
root=""
[ "$(id -u)" = 0 ] && root=--allow-run-as-root
# Under AddressSanitizer: Open MPI's MPI_Init (which libhora calls for
# the hosts) leaves allocations LeakSanitizer reports, not hora's; Python
# needs the sanitizer's runtimes preloaded
san_mpi="" san_env="" san_preload=""
if ldd "$BUILD/lib/libhora.so" | grep -q libasan; then
  san_mpi="-x ASAN_OPTIONS=detect_leaks=0"
  san_preload="$(gcc -print-file-name=libasan.so):$(gcc -print-file-name=libubsan.so)"
  san_env="LD_PRELOAD=$san_preload ASAN_OPTIONS=detect_leaks=0"
fi

# run NAME SECONDS COMMAND...: from the client, its output in NAME.out/.err
run() {
  _n=$1 _s=$2
  shift 2
  echo "$*" >"$MH_TMP/$_n.cmd"
  mh_client timeout "$_s" "$@" >"$MH_TMP/$_n.out" 2>"$MH_TMP/$_n.err"
  echo $? >"$MH_TMP/$_n.rc"
}
hora_left() { # hora's processes on any host
  for h in client $MH_HOSTS; do
    for p in $(mh_host_pids "$h"); do
      case "$(mh_comm "$p") $(ps -o stat= -p "$p")" in
      "horad Z"* | "horarun Z"*) ;; # gone; init reaps it
      horad* | horarun*) echo "$h:$p" ;;
      esac
    done
  done
}
# shellcheck disable=SC2086
run mpirun 120 mpirun $root $san_mpi -H h1:2,h2:2 -np 4 -x HORA_HORARUN="$HORARUN" \
  "$T/it_coll" matrix -x 4 --marker=$MARK
expect_rc mpirun 0 &&
  expect_count mpirun out "^rank [0-3] of 4: [0-9]+ checks, 0 failures" 4 \
    "mpirun's 4 ranks on h1 and h2 joined one job; every rank's results right"
mh_assert_no_job_procs "$MARK"
sleep 0.5
[ -z "$(hora_left)" ] || fail "mpirun: hora's processes left: $(hora_left)"
say "mpirun: $(grep -c "0 failures" "$MH_TMP/mpirun.out") of 4 ranks right across h1 and h2"

# shellcheck disable=SC2086
run cyclic 60 mpirun $root $san_mpi -H h1:2,h2:2 -np 4 --map-by node \
  -x HORA_HORARUN="$HORARUN" "$T/it_coll" matrix -x 4 --marker=$MARK
expect_rc cyclic nonzero &&
  expect_grep cyclic out "ranks 0 and 2 run on the same node, but not next to each other" \
    "--map-by node: refused, naming the ranks"
mh_assert_no_job_procs "$MARK"
say "cyclic: $(grep -c "not next to each other" "$MH_TMP/cyclic.out") ranks refused"

# MPICH's mpiexec (hydra), which reaches h1 and h2 over ssh itself: the
# ranks' job is named by where mpiexec listens (its proxies' command
# line), their hosts gathered through MPICH's own MPI_Allgather
if command -v mpiexec.mpich >/dev/null 2>&1; then
  # shellcheck disable=SC2086
  run mpich 120 mpiexec.mpich -hosts h1:2,h2:2 -n 4 -genv HORA_HORARUN "$HORARUN" \
    ${san_env:+-genv ASAN_OPTIONS detect_leaks=0} "$T/it_coll" matrix -x 4 --marker=$MARK
  expect_rc mpich 0 &&
    expect_count mpich out "^rank [0-3] of 4: [0-9]+ checks, 0 failures" 4 \
      "MPICH's 4 ranks on h1 and h2 joined one job; every rank's results right"
  mh_assert_no_job_procs "$MARK"
  sleep 0.5
  [ -z "$(hora_left)" ] || fail "mpich: hora's processes left: $(hora_left)"
  say "mpich: $(grep -c "0 failures" "$MH_TMP/mpich.out") of 4 ranks right across h1 and h2"
  # Python ranks (hora's module), init and shutdown twice
  # shellcheck disable=SC2086
  run mpichpy 120 mpiexec.mpich -hosts h1:2,h2:2 -n 4 -genv HORA_HORARUN "$HORARUN" \
    -genv PYTHONPATH "$HORA_TOP/python" -genv HORA_LIBRARY "$BUILD/lib/libhora.so" \
    ${san_preload:+-genv LD_PRELOAD "$san_preload" -genv ASAN_OPTIONS detect_leaks=0} /usr/bin/python3 \
    "$HORA_TOP/tests/python/workers/joined.py"
  sed -i 's/\([^ ]\)rank /\1\nrank /g' "$MH_TMP/mpichpy.out" # glued lines
  expect_rc mpichpy 0 &&
    expect_count mpichpy out "rank [01] of 4 joined on h1, local [01] of 2" 2 "MPICH: Python ranks 0 and 1 on h1" &&
    expect_count mpichpy out "rank [23] of 4 joined on h2, local [01] of 2" 2 \
      "MPICH: Python ranks 2 and 3 on h2, one job of 4"
  sleep 0.5
  [ -z "$(hora_left)" ] || fail "mpich python: hora's processes left: $(hora_left)"
else
  say "mpich: skipped: no MPICH (Debian: mpich; tests/deps.sh test installs it)"
fi

PY=/usr/bin/python3
TR=$(command -v torchrun || true)
if [ -n "$TR" ] && "$(head -n 1 "$TR" | sed 's/^#!//')" -c "import torch, numpy" 2>/dev/null; then
  # torchrun2 NAME PORT WHAT ARGS...: one torchrun per host (--nnodes 2,
  # static rendezvous at h1:PORT), 2 ranks each, with hora's Python module
  # and library of this build; NAME0 and NAME1 hold each host's output and
  # status.
  # --redirects/--tee 1: torch 1.13's torchrun fails on Python 3.11 with
  # its default of 0
  torchrun2() {
    _n=$1 _p=$2 _w=$3
    shift 3
    for k in 0 1; do
      # shellcheck disable=SC2086
      mh_exec h$((k + 1)) env $san_env PYTHONPATH="$HORA_TOP/python" \
        HORA_LIBRARY="$BUILD/lib/libhora.so" HORA_HORARUN="$HORARUN" \
        timeout 120 "$TR" --nnodes 2 --node_rank $k --nproc_per_node 2 \
        --master_addr h1 --master_port "$_p" --redirects 1 --tee 1 "$@" \
        >"$MH_TMP/$_n$k.out" 2>"$MH_TMP/$_n$k.err" &
      eval "trpid$k=\$!"
    done
    # shellcheck disable=SC2154
    wait "$trpid0"
    echo $? >"$MH_TMP/${_n}0.rc"
    wait "$trpid1"
    echo $? >"$MH_TMP/${_n}1.rc"
    echo "$_w" >"$MH_TMP/${_n}0.cmd"
    cp "$MH_TMP/${_n}0.cmd" "$MH_TMP/${_n}1.cmd"
  }
  torchrun2 tr 29577 "torchrun --nnodes 2 on h1 and h2" \
    "$HORA_TOP/tests/python/workers/joined.py"
  expect_rc tr0 0 && expect_rc tr1 0 &&
    expect_count tr0 out "rank [01] of 4 joined on h1, local [01] of 2" 2 "ranks 0 and 1 on h1" &&
    expect_count tr1 out "rank [23] of 4 joined on h2, local [01] of 2" 2 \
      "ranks 2 and 3 on h2: one job of 4 across the hosts"
  sleep 0.5
  [ -z "$(hora_left)" ] || fail "torchrun: hora's processes left: $(hora_left)"
  say "torchrun: $(cat "$MH_TMP"/tr?.out | grep -c "of 4 joined") ranks joined across h1 and h2"
  # a C program (--no_python): libhora asks torch's store through
  # torchrun's own Python
  torchrun2 trc 29578 "torchrun --no_python it_coll on h1 and h2" \
    --no_python "$T/it_coll" matrix -x 4 --marker=$MARK
  expect_rc trc0 0 && expect_rc trc1 0 &&
    expect_count trc0 out "rank [01] of 4: [0-9]+ checks, 0 failures" 2 "C ranks 0 and 1 right on h1" &&
    expect_count trc1 out "rank [23] of 4: [0-9]+ checks, 0 failures" 2 \
      "C ranks 2 and 3 right on h2: one job of 4 across the hosts, learnt from torch's store"
  mh_assert_no_job_procs "$MARK"
  sleep 0.5
  [ -z "$(hora_left)" ] || fail "torchrun C: hora's processes left: $(hora_left)"
else
  say "torchrun: skipped: no torchrun with torch and numpy (Debian: python3-torch)"
fi
finish
