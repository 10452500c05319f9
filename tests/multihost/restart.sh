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
#   gone      the program's script removed, then rank 1 SIGKILLed: started
#             again, it ends before it comes back; the others, waiting in
#             hora_init() for it, are told so and the job ends, naming it
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
  local _re
  _re="^\[$2\]<stdout>:rank $2 of 4: start 1 at .* after restart 1 pid [0-9]+ \("
  if ! wait_for "$1" out "$_re" 1 60; then
    fail "$1: rank $2 did not begin again"
    return 1
  fi
  expect_since_t0 "$1" "$_re" "$3" "rank $2 trained again" "the kill"
}

# survivors NAME PIDS: these processes still live (were not started again)
survivors() {
  local _p _st
  for _p in $2; do
    _st=$(mh_state "$_p")
    if [ -z "$_st" ] || [ "$_st" = Z ]; then
      fail "$1: process $_p, a rank that did not crash, is gone"
      return 1
    fi
  done
  say "$1: the other ranks' processes ($2) live on"
}

# crash NAME HOSTS HOST RANK N [OTHER...]: a job of 4 ranks on HOSTS with
# --restart-failed-ranks N; rank RANK (on HOST) SIGKILLed mid-epoch: it
# comes back within 10 s, the job trains to its end, horarun says so; the
# processes of the OTHER ranks (HOST:RANK each) live on
crash() {
  local _name _o _others
  _name=$1
  HRUN_NOMARK=1 hrun_start "$_name" EPOCHS=2 STEP_SLEEP=0.1 -np 4 -H "$2" \
    --restart-failed-ranks "$5" $PY "$W/elastic_train.py"
  if started "$_name" 4; then
    sleep 1.5
    _others=""
    for _o in $6; do _others="$_others $(rank_pid "${_o%:*}" "${_o#*:}")"; done
    if kill_rank "$_name" "$3" "$4" && back "$_name" "$4" 10; then
      [ -z "$6" ] || survivors "$_name" "${_others# }"
    fi
    hrun_wait "$_name" 180
    expect_trained "$_name" 4
    expect_grep "$_name" err "rank $4 on host $3 was killed by signal SIGKILL: horad starts it again \(restart 1 of $5\)" \
      "horarun says rank $4 is started again"
  else
    fail "$_name: the 4 ranks did not start within 90 s"
    hrun_wait "$_name" 10
    show "$_name"
  fi
  mh_assert_no_job_procs "$MARK" 10
}

crash rank h1:2,h2:2 h2 3 2 "h1:0 h1:1 h2:2"
expect_count rank out "^\[[0-9]+\]<stdout>:rank [0-9]+ of 4: start 1 at " 8 \
  "each rank began twice: at the start, and after rank 3 came back"
expect_nogrep rank err "error" "no error"
crash root h1:2,h2:2 h1 0 1
crash onehost h2:4 h2 1 1

# ---- started again, the program ends before it comes back --------------------
mkdir -p "$MH_TMP/gone"
cp "$W/elastic_train.py" "$W/_check.py" "$MH_TMP/gone/"
HRUN_NOMARK=1 hrun_start gone EPOCHS=3 STEP_SLEEP=0.1 -np 4 -H h1:2,h2:2 \
  --restart-failed-ranks 1 $PY "$MH_TMP/gone/elastic_train.py"
if started gone 4; then
  sleep 1.5
  rm "$MH_TMP/gone/elastic_train.py"
  kill_rank gone h1 1
  hrun_wait gone 60
  expect_rc gone nonzero
  expect_within gone 40 "the job ends, nobody waits for rank 1 any more"
  expect_count gone err "horad starts it again" 1 "rank 1 was started again"
  expect_grep gone err "^horarun: rank 1 on host h1 exited with code 2\$" \
    "horarun names rank 1, which ended again"
  # (told while they wait, or on their hello once it has ended)
  expect_grep gone err "no new session can start: rank 1 on host h1 (exited with code 2|has ended)" \
    "the others waiting for it are told why"
else
  fail "gone: the 4 ranks did not start within 90 s"
  hrun_wait gone 10
  show gone
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
  # and the others' errors name it first, whether their operation
  # failed while horad started it again or after another rank's exit
  # ended that ("...; not started again: rank 1 ... exited")
  expect_count plain out "allreduce [0-9]+ failed: .*: rank 3 on host h2 was killed by signal SIGKILL; (horad starts it again|not started again: )" 3 \
    "the other ranks' error names rank 3"
else
  fail "plain: the 4 ranks did not start within 60 s"
  hrun_wait plain 10
  show plain
fi
mh_assert_no_job_procs "$MARK" 10
finish
