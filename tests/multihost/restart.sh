#!/bin/sh
# restart.sh -- --restart-failed-ranks across hosts (network namespaces,
# see lib.sh): 2 hosts x 2 ranks train with tests/python/workers/
# elastic_train.py (torch, DistributedOptimizer, ElasticSampler, a commit
# after every step, hora.elastic.run):
#   rank      rank 3 (h2) SIGKILLed mid-epoch: horarun says horad starts it
#             again; the other three ranks' processes live on (their
#             reset waits in hora_init() for it), the new rank 3 takes the
#             state from rank 0 and all four go on from the last commit
#             within 10 s of the kill; every sample used once per epoch,
#             the same weights everywhere, exit status 0
#   root      rank 0 (h1: the coordinator's host and the rank whose state
#             a sync gives) SIGKILLed: the state comes from rank 1
#   onehost   4 ranks on h2 alone, rank 1 SIGKILLed
#   limit     --restart-failed-ranks 1, rank 2 SIGKILLed twice: started
#             again once, then the job ends naming it, at once
#   plain     a program without hora.elastic (mh_loop: its ranks exit
#             on the lost rank's error): the job ends at once, naming
#             rank 3, and the rank started again does not wait alone
# After each, no process of the job is left on any host.
. "$(dirname "$0")/lib.sh"
need "$HORARUN" "$HORAD" "$T/mh_loop"
mh_python "torch" "python3-torch"
mh_setup 2

# rank_pid HOST RANK: the pid of job rank RANK's program on HOST
rank_pid() {
  local _p
  for _p in $(mh_host_pids "$1"); do
    tr '\0' '\n' <"/proc/$_p/environ" 2>/dev/null |
      grep -qx "HORA_RANK=$2" || continue
    case "$(mh_comm "$_p")" in python* | mh_loop) echo "$_p"; return 0 ;; esac
  done
  return 1
}

started() { # NAME COUNT: COUNT lines said a rank began (or began again)
  wait_for "$1" out "^\[[0-9]+\]<stdout>:rank [0-9]+ of [0-9]+: start 1 at " "$2" 90
}

# kill_rank NAME HOST RANK: SIGKILLs it; T0 the time of the kill
kill_rank() {
  local _pid
  _pid=$(rank_pid "$2" "$3")
  if [ -z "$_pid" ]; then
    fail "$1: no process of rank $3 on $2"
    return 1
  fi
  T0=$(date +%s.%N)
  kill -9 "$_pid"
}

# back NAME RANK LIMIT: rank RANK began again (after restart 1) within
# LIMIT s of T0, and the others went on with it from the last commit
back() {
  local _late _t
  if ! wait_for "$1" out "^\[$2\]<stdout>:rank $2 of 4: start 1 at .* after restart 1 \(" 1 60; then
    fail "$1: rank $2 did not begin again"
    return 1
  fi
  _t=$(sed -n "s/^\[$2\]<stdout>:rank $2 of 4: start 1 at .* after restart 1 (\([0-9.]*\))\$/\1/p" \
    "$MH_TMP/$1.out" | head -n 1)
  _late=$(awk -v a="$T0" -v b="$_t" 'BEGIN { printf "%.2f", b - a }')
  say "$1: rank $2 trained again ${_late}s after the kill"
  awk -v l="$_late" -v m="$3" 'BEGIN { exit !(l <= m) }' ||
    fail "$1: rank $2 began again ${_late}s after the kill (expected at most $3s)"
}

# trained NAME: every rank passed its checks and holds the same weights
trained() {
  expect_rc "$1" 0
  expect_count "$1" out "^\[[0-9]+\]<stdout>:rank [0-9]+ of 4: elastic_train: [0-9]+ checks, 0 failures, weights " 4 \
    "each of the 4 ranks passed its checks"
  expect_nogrep "$1" out "FAIL" "no check failed (every sample used once per epoch)"
  [ "$(sed -n 's/^.*elastic_train: .* weights //p' "$MH_TMP/$1.out" | sort -u | wc -l)" = 1 ] ||
    fail "$1: the ranks ended with different weights"
}

# survivors NAME PIDS: these processes still live (were not started again)
survivors() {
  local _p
  for _p in $2; do
    _st=$(mh_state "$_p")
    if [ -z "$_st" ] || [ "$_st" = Z ]; then
      fail "$1: process $_p, a rank that did not crash, is gone"
      return 1
    fi
  done
  say "$1: the other ranks' processes ($2) live on"
}

# ---- a rank of h2 crashes: started again, the others wait for it -----------
HRUN_NOMARK=1 hrun_start rank EPOCHS=3 STEP_SLEEP=0.1 -np 4 -H h1:2,h2:2 \
  --restart-failed-ranks 2 $PY "$W/elastic_train.py"
if started rank 4; then
  sleep 1.5
  others="$(rank_pid h1 0) $(rank_pid h1 1) $(rank_pid h2 2)"
  if kill_rank rank h2 3; then
    back rank 3 10
    survivors rank "$others"
  fi
  hrun_wait rank 180
  trained rank
  expect_grep rank err "rank 3 on host h2 was killed by signal SIGKILL: horad starts it again \(restart 1 of 2\)" \
    "horarun says rank 3 is started again"
  expect_count rank out "^\[[0-9]+\]<stdout>:rank [0-9]+ of 4: start 1 at " 8 \
    "each rank began twice: at the start, and after rank 3 came back"
  expect_nogrep rank err "error" "no error"
else
  fail "rank: the 4 ranks did not start within 90 s"
  hrun_wait rank 10
  show rank
fi
mh_assert_no_job_procs "$MARK" 10

# ---- rank 0 crashes: the state comes from rank 1 ----------------------------
HRUN_NOMARK=1 hrun_start root EPOCHS=3 STEP_SLEEP=0.1 -np 4 -H h1:2,h2:2 \
  --restart-failed-ranks 1 $PY "$W/elastic_train.py"
if started root 4; then
  sleep 1.5
  kill_rank root h1 0 && back root 0 10
  hrun_wait root 180
  trained root
  expect_grep root err "rank 0 on host h1 was killed by signal SIGKILL: horad starts it again \(restart 1 of 1\)" \
    "horarun says rank 0 is started again"
else
  fail "root: the 4 ranks did not start within 90 s"
  hrun_wait root 10
  show root
fi
mh_assert_no_job_procs "$MARK" 10

# ---- one host (no mesh: the new session starts there alone) -----------------
HRUN_NOMARK=1 hrun_start onehost EPOCHS=3 STEP_SLEEP=0.1 -np 4 -H h2:4 \
  --restart-failed-ranks 1 $PY "$W/elastic_train.py"
if started onehost 4; then
  sleep 1.5
  kill_rank onehost h2 1 && back onehost 1 10
  hrun_wait onehost 180
  trained onehost
else
  fail "onehost: the 4 ranks did not start within 90 s"
  hrun_wait onehost 10
  show onehost
fi
mh_assert_no_job_procs "$MARK" 10

# ---- restarts used up: the job ends naming the rank -------------------------
HRUN_NOMARK=1 hrun_start limit EPOCHS=3 STEP_SLEEP=0.1 -np 4 -H h1:2,h2:2 \
  --restart-failed-ranks 1 $PY "$W/elastic_train.py"
if started limit 4; then
  sleep 1.5
  if kill_rank limit h2 2 && back limit 2 10; then
    sleep 1
    kill_rank limit h2 2
  fi
  hrun_wait limit 60
  expect_rc limit 137
  expect_within limit 30 "the job ends at once"
  expect_count limit err "horad starts it again" 1 "rank 2 was started again once"
  expect_grep limit err "^horarun: rank 2 on host h2 was killed by signal SIGKILL\$" \
    "horarun names rank 2 as the cause"
else
  fail "limit: the 4 ranks did not start within 90 s"
  hrun_wait limit 10
  show limit
fi
mh_assert_no_job_procs "$MARK" 10

# ---- a program that does not reset: the job ends ----------------------------
hrun_start plain -np 4 -H h1:2,h2:2 --restart-failed-ranks 1 "$T/mh_loop"
if wait_for plain out "^\[[0-9]+\]<stdout>:rank [0-9]+ of 4 on [a-z0-9]+: running" 4 60; then
  kill_rank plain h2 3
  hrun_wait plain 60
  expect_rc plain nonzero
  expect_within plain 30 "the job ends at once"
  # the cause, whether or not horad had started rank 3 again when the
  # others' exits ended the wait for it
  expect_grep plain err "rank 3 on host h2 was killed by signal SIGKILL" \
    "horarun names rank 3"
  expect_count plain out "allreduce [0-9]+ failed: .*rank 3 on host h2 was killed by signal SIGKILL; horad starts it again" 3 \
    "the other ranks' error names rank 3"
else
  fail "plain: the 4 ranks did not start within 60 s"
  hrun_wait plain 10
  show plain
fi
mh_assert_no_job_procs "$MARK" 10
finish
