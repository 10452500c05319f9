#!/bin/sh
# partition.sh -- whom horarun blames when one host's network fails for a
# while (network namespaces with sshd, see lib.sh). Ranks loop checked
# allreduces (mh_loop.c) on 3 hosts x 1 rank, and then:
#   outage.N  h2's cable is out for 2.5 s (its veth end in the bridge
#             namespace down, then up), three times;
#   outage2   the same with 2 hosts (h1, h2): horarun, on the client,
#             tells them apart by its own links;
#   loss      30 % of the packets h2 sends and is sent are dropped
#             (iptables where they arrive, statistic match) for up to 40 s.
# A job may ride the fault out (it then ends well when rank 0 says so);
# one that ends because of it must end with horarun naming h2, the host
# whose network failed, and no other: the host every other lost, or the
# one that lost everyone, not the one whose report came first. After
# each, no process of the job is left on any host or the client.
. "$(dirname "$0")/lib.sh"
need "$HORARUN" "$HORAD" "$T/mh_loop"
mh_setup 3

running='^\[[0-9]\]<stdout>:rank [0-9] of [23] on h[123]: running'

# blamed_h2 NAME SECONDS: job NAME ended within SECONDS; if it failed, the
# verdict names h2 and no healthy host
blamed_h2() {
  hrun_wait "$1" "$2"
  if [ "$RC" = 0 ]; then
    say "$1: the job rode the fault out"
    expect_nogrep "$1" out "FAIL" "no wrong result"
    return 0
  fi
  expect_grep "$1" err '^horarun: error: host h2 \(rank 1\) is lost' \
    "horarun names h2, the host whose network failed"
  expect_nogrep "$1" err '^horarun: error: (host h[13] \(rank [0-9]\) is lost|the links between|lost contact with host h[13])' \
    "horarun blames no healthy host"
  expect_nogrep "$1" out "FAIL" "no wrong result before that"
  grep -E '^horarun: error:' "$MH_TMP/$1.err" | head -n 3 | sed 's/^/    | /'
}

# outage NAME HOSTS...: h2's cable out for 2.5 s while HOSTS loop
outage() {
  local _name
  _name=$1
  shift
  hrun_start "$_name" "$@" "$T/mh_loop" -t 12 -T 60
  if wait_for "$_name" out "$running" "$(echo "$*" | sed -n 's/.*-np \([0-9]*\).*/\1/p')" 60; then
    sleep 1
    ip -n "$MH_BR" link set p-h2 down
    sleep 2.5
    ip -n "$MH_BR" link set p-h2 up
    blamed_h2 "$_name" 90
  else
    fail "$_name: the ranks did not all start looping within 60s"
    hrun_wait "$_name" 5
    show "$_name"
  fi
  mh_link_up h2
  mh_assert_no_job_procs "$MARK" 10
}

for n in 1 2 3; do
  outage "outage.$n" -np 3 -H h1:1,h2:1,h3:1
done
outage outage2 -np 2 -H h1:1,h2:1

# ---- 30 % of h2's packets lost --------------------------------------------------
# loss_rules add|del: what h2 sends, and what it is sent, dropped at random
# where it arrives (as a lossy cable would)
loss_rules() {
  local _h _op
  _op=-A
  [ "$1" = del ] && _op=-D
  for _h in client h1 h3; do
    mh_exec "$_h" iptables "$_op" INPUT -s "$(mh_addr h2)" -m statistic \
      --mode random --probability 0.3 -j DROP || return 1
  done
  mh_exec h2 iptables "$_op" INPUT -i eth0 -m statistic --mode random \
    --probability 0.3 -j DROP
}
if ! command -v iptables >/dev/null 2>&1; then
  say "loss: skipped: no iptables (Debian: iptables)"
elif ! mh_exec client iptables -A INPUT -s "$(mh_addr h2)" -m statistic \
  --mode random --probability 0.3 -j DROP 2>"$MH_TMP/iptables.err"; then
  say "loss: skipped: iptables cannot drop at random here: $(head -n 1 "$MH_TMP/iptables.err")"
else
  mh_exec client iptables -D INPUT -s "$(mh_addr h2)" -m statistic \
    --mode random --probability 0.3 -j DROP
  hrun_start loss -np 3 -H h1:1,h2:1,h3:1 "$T/mh_loop" -t 40 -T 120
  if wait_for loss out "$running" 3 60; then
    loss_rules add || fail "loss: cannot install the iptables rules"
    blamed_h2 loss 120
  else
    fail "loss: the ranks did not all start looping within 60s"
    hrun_wait loss 5
    show loss
  fi
  loss_rules del
  mh_assert_no_job_procs "$MARK" 10
fi
finish
