#!/bin/sh
# faults.sh -- a host lost in the middle of a job (network namespaces with
# sshd, see lib.sh). 3 hosts x 1 rank loop allreduces (mh_loop.c), then:
#   killhorad  h2's horad is SIGKILLed: within seconds the ranks on h1 and
#              h3 report an error naming h2, horarun exits non-zero naming
#              h2;
#   linkdown   h2's cable is cut (--heartbeat-timeout 2): the same within
#              ~10 s, and h2's own horad, which lost horarun, ends its rank
#              and itself;
#   killrun    horarun itself is SIGKILLed (ranks sleeping on h1, h2, h3):
#              every horad and rank ends on its own;
#   sigterm    horarun gets SIGTERM: it ends the job on every host and
#              exits 143.
# After each, no process of the job is left on any host or the client.
. "$(dirname "$0")/lib.sh"
need "$HORARUN" "$HORAD" "$T/mh_loop"
mh_setup 3

hosts3="-np 3 -H h1:1,h2:1,h3:1 --heartbeat-timeout 2"
running='^\[[0-9]\]<stdout>:rank [0-9] of 3 on h[123]: running'

# lost NAME T0 SECONDS: after the loss of h2 at T0, the job ended within
# SECONDS; ranks 0 (h1) and 2 (h3) said their allreduce failed naming h2;
# horarun's stderr names h2
lost() {
  local _took _r
  hrun_wait "$1" 60
  _took=$(mh_elapsed "$2")
  expect_rc "$1" nonzero
  if awk -v t="$_took" -v l="$3" 'BEGIN { exit !(t > l) }'; then
    fail "$1: horarun ended ${_took}s after h2 was lost; expected within ${3}s"
  else
    say "$1: horarun ended ${_took}s after h2 was lost"
  fi
  for _r in 0 2; do
    expect_grep "$1" out "^\[$_r\]<stdout>:rank $_r: allreduce [0-9]+ failed: .*h2" \
      "rank $_r reports the failed allreduce, naming h2"
  done
  expect_nogrep "$1" out "FAIL" "no wrong result before that"
  expect_grep "$1" err '(^|[^a-z0-9])h2([^a-z0-9]|$)' "horarun's stderr names h2"
}

# h2_leftovers: processes on h2 other than its sshd and its sessions
h2_leftovers() {
  local _p
  for _p in $(mh_host_pids h2); do
    [ "$(mh_comm "$_p")" = sshd ] || grep -qx "$_p" "$MH_TMP/infra.pids" || echo "$_p"
  done
}

# ---- h2's horad SIGKILLed --------------------------------------------------
# shellcheck disable=SC2086 # $hosts3: a list of arguments
hrun_start killhorad $hosts3 "$T/mh_loop"
if wait_for killhorad out "$running" 3 60; then
  pids=$(mh_host_pids h2 horad)
  [ -n "$pids" ] || fail "killhorad: no horad process in h2's namespace"
  t0=$(date +%s.%N)
  # shellcheck disable=SC2086
  kill -9 $pids
  lost killhorad "$t0" 10
else
  fail "killhorad: the ranks did not all start looping within 60s"
  hrun_wait killhorad 5
  show killhorad
fi
mh_assert_no_job_procs "$MARK" 10

# ---- h2's cable cut ------------------------------------------------------------
# shellcheck disable=SC2086
hrun_start linkdown $hosts3 "$T/mh_loop"
if wait_for linkdown out "$running" 3 60; then
  t0=$(date +%s.%N)
  mh_link_down h2
  lost linkdown "$t0" 12
  # h2, cut off, must clean up by itself: its horad lost horarun
  while [ -n "$(h2_leftovers)" ] && ! mh_past "$t0" 15; do sleep 0.2; done
  left=$(h2_leftovers)
  if [ -n "$left" ]; then
    # shellcheck disable=SC2086
    fail "linkdown: 15s after the cut, processes of the job remain on h2:
$(mh_describe_pids $left)"
  else
    say "linkdown: h2 was clean $(mh_elapsed "$t0")s after the cut"
  fi
else
  fail "linkdown: the ranks did not all start looping within 60s"
  hrun_wait linkdown 5
  show linkdown
fi
mh_link_up h2
mh_assert_no_job_procs "$MARK" 10

# ---- horarun SIGKILLed ------------------------------------------------------------
hrun_start killrun -np 3 -H h1:1,h2:1,h3:1 --heartbeat-timeout 2 \
  sh -c 'echo "up on $(hostname)"; sleep 60; echo "FAIL: still here"'
if wait_for killrun out '^\[[0-9]\]<stdout>:up on h[123]$' 3 60; then
  kill -9 "$HRUN_PID"
  hrun_wait killrun 10
  expect_rc killrun 137
  mh_assert_no_job_procs "$MARK" 10
else
  fail "killrun: the ranks did not all start within 60s"
  hrun_wait killrun 5
  show killrun
  mh_assert_no_job_procs "$MARK" 10
fi

# ---- horarun SIGTERMed --------------------------------------------------------------
hrun_start sigterm -np 3 -H h1:1,h2:1,h3:1 sh -c 'echo "up on $(hostname)"; sleep 60; echo "FAIL: still here"'
if wait_for sigterm out '^\[[0-9]\]<stdout>:up on h[123]$' 3 60; then
  kill -TERM "$HRUN_PID"
  hrun_wait sigterm 30
  expect_rc sigterm 143
  expect_within sigterm 40 "ends soon after SIGTERM"
  expect_nogrep sigterm out "FAIL" "no rank outlived the job"
else
  fail "sigterm: the ranks did not all start within 60s"
  hrun_wait sigterm 5
  show sigterm
fi
mh_assert_no_job_procs "$MARK" 10
finish
