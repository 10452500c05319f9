#!/bin/sh
# doctor.sh -- horarun --doctor on 3 namespace hosts (lib.sh), healthy and
# with one problem planted at a time. Each problem must be named in the
# table, on its row's host, and the exit status must say whether a job
# would fail (1) or could run (0: warnings only):
#   healthy   h1..h3: every check ok, every link both ways, exit 0; the
#             same from a host file, a config file, and from h1 itself
#   nohorad   h2 has no horad (an empty directory mounted over the build's
#             bin/ in h2's mount namespace): "h2 horad FAIL", exit 1
#   noiface   a config file gives h2 an interface it lacks (eth9): "h2
#             iface FAIL", exit 1
#   dropped   h2 drops new TCP connections to its ports above 1023
#             (iptables, SYN only): h1->h2 and h3->h2 FAIL, h2->h1 and
#             h2->h3 ok, exit 1
#   tinyshm   a 1 MiB tmpfs over /dev/shm in h3's mount namespace: "h3 shm
#             FAIL", exit 1
#   slow      h3's cable slowed both ways: tc netem (20 ms delay, 50
#             Mbit/s) on its eth0 and its bridge end, or tbf (50 Mbit/s)
#             where the kernel has no netem: the links of h3 WARN slow,
#             exit 0
#   sshfail   hx (nothing listens on its port 22): "hx ssh FAIL", exit 1
# After each run no process of it (probe, ssh) is left on any host.
. "$(dirname "$0")/lib.sh"
need "$HORARUN" "$HORAD"
mh_setup 3

# doc NAME TIMEOUT ARGS...: horarun --doctor ARGS on the client
doc() {
  _dn=$1 _dt=$2
  shift 2
  HRUN_NOMARK=1 hrun "$_dn" "$_dt" --doctor "$@"
}

# row NAME HOST CHECK RESULT WHAT: the table of job NAME has the row
row() {
  expect_grep "$1" out "^$2 +$3 +$4 " "$5"
}

# no_fail NAME WHAT
no_fail() {
  expect_nogrep "$1" out '^[^ ]+ +[a-z]+ +FAIL ' "$2"
}

healthy_rows() {
  for _h in h1 h2 h3; do
    row "$1" "$_h" ssh ok "$1: $_h reached over ssh"
    row "$1" "$_h" horad ok "$1: horad on $_h"
    row "$1" "$_h" shm ok "$1: /dev/shm on $_h"
    row "$1" "$_h" memory ok "$1: memory on $_h"
    for _o in h1 h2 h3; do
      [ "$_o" = "$_h" ] && continue
      expect_grep "$1" out "^$_h->$_o +link +(ok|WARN) +.*round trip" \
        "$1: the link $_h->$_o was measured"
    done
  done
}

# ---- healthy ---------------------------------------------------------------
doc healthy 90 -H h1:1,h2:2,h3:1
expect_rc healthy 0
healthy_rows healthy
no_fail healthy "healthy: nothing fails"
expect_grep healthy out '^h2 +memory +ok .*its 2 ranks' "healthy: h2's 2 ranks"
expect_grep healthy out 'a job can run on these hosts' "healthy: the verdict"
mh_assert_no_job_procs "$MARK" 10

mh_write_hostfile "$MH_TMP/hosts.txt" h1:1 h2:1 h3:1
doc hostfile 90 --hostfile "$MH_TMP/hosts.txt"
expect_rc hostfile 0
healthy_rows hostfile
mh_assert_no_job_procs "$MARK" 10

mh_write_config "$MH_TMP/healthy.yaml" hosts=h1:1,h2:1,h3:1
doc config 90 --config-file "$MH_TMP/healthy.yaml" --network-interface eth0
expect_rc config 0
healthy_rows config
row config h2 iface ok "config: h2's eth0"
expect_grep config out "^h2 +iface +ok +eth0 $(mh_addr h2)" \
  "config: h2's eth0 address"
mh_assert_no_job_procs "$MARK" 10

# from h1, with h1 in the list: its probe runs without ssh, and the others
# reach it at the address they reach horarun at
HRUN_FROM=h1 doc fromh1 90 -H h1:1,h2:1
expect_rc fromh1 0
expect_nogrep fromh1 out '^h1 +ssh ' "fromh1: no ssh to h1"
row fromh1 h2 ssh ok "fromh1: h2 over ssh"
expect_grep fromh1 out "^h2->h1 +link +(ok|WARN) .*$(mh_addr h1)" \
  "fromh1: h2 reaches h1 at its address"
mh_assert_no_job_procs "$MARK" 10

# ---- a host without horad ----------------------------------------------------
mkdir -p "$MH_TMP/empty"
mh_exec h2 mount --bind "$MH_TMP/empty" "$BUILD/bin" ||
  fail "cannot hide bin/ on h2"
doc nohorad 90 -H h1:1,h2:1,h3:1
mh_exec h2 umount "$BUILD/bin"
expect_rc nohorad 1
row nohorad h2 horad FAIL "nohorad: h2's horad is missing"
expect_grep nohorad out '^ +fix: install hora' "nohorad: the fix"
row nohorad h1 horad ok "nohorad: h1 is fine"
row nohorad h3 horad ok "nohorad: h3 is fine"
expect_grep nohorad out '^h1->h3 +link +(ok|WARN) ' \
  "nohorad: h1->h3 still tested"
expect_grep nohorad out 'a job on these hosts would fail' "nohorad: the verdict"
mh_assert_no_job_procs "$MARK" 10

# ---- an interface a host lacks -----------------------------------------------
cat >"$MH_TMP/noiface.yaml" <<EOF
hosts:
  - h1
  - {name: h2, network_interface: eth9}
  - h3
EOF
doc noiface 90 --config-file "$MH_TMP/noiface.yaml" --network-interface eth0
expect_rc noiface 1
row noiface h2 iface FAIL "noiface: h2 has no eth9"
expect_grep noiface out "^h2 +iface +FAIL .*'eth9'.*lo,eth0" \
  "noiface: what h2 has"
row noiface h1 iface ok "noiface: h1's eth0"
mh_assert_no_job_procs "$MARK" 10

# ---- an interface others cannot reach -------------------------------------
drop="INPUT -p tcp --syn --dport 1024:65535 -j DROP"
# shellcheck disable=SC2086
if mh_exec h2 iptables -A $drop 2>"$MH_TMP/ipt.err"; then
  doc dropped 120 -H h1:1,h2:1,h3:1
  # shellcheck disable=SC2086
  mh_exec h2 iptables -D $drop
  expect_rc dropped 1
  row dropped h1-\>h2 link FAIL "dropped: h1 cannot reach h2"
  row dropped h3-\>h2 link FAIL "dropped: h3 cannot reach h2"
  expect_grep dropped out "^h1->h2 +link +FAIL .*$(mh_addr h2)" \
    "dropped: the address h1 tried"
  expect_grep dropped out '^h2->h1 +link +(ok|WARN) ' "dropped: h2 reaches h1"
  expect_grep dropped out '^h2->h3 +link +(ok|WARN) ' "dropped: h2 reaches h3"
  row dropped h2 horad ok "dropped: h2's horad is fine"
  mh_assert_no_job_procs "$MARK" 10
else
  say "dropped: skipped: iptables: $(head -n 1 "$MH_TMP/ipt.err")"
fi

# ---- a tiny /dev/shm --------------------------------------------------------
mh_exec h3 mount -t tmpfs -o size=1m hora-mh-shm /dev/shm ||
  fail "cannot mount on h3"
doc tinyshm 90 -H h1:1,h2:1,h3:1
mh_exec h3 umount /dev/shm
expect_rc tinyshm 1
row tinyshm h3 shm FAIL "tinyshm: h3's /dev/shm"
expect_grep tinyshm out '^h3 +shm +FAIL +/dev/shm has 1\.0 MiB free' \
  "tinyshm: its size"
expect_grep tinyshm out 'fix: enlarge /dev/shm on h3' "tinyshm: the fix"
row tinyshm h2 shm ok "tinyshm: h2's /dev/shm"
mh_assert_no_job_procs "$MARK" 10

# ---- a slowed link ----------------------------------------------------------
# h3's cable slowed both ways (its eth0, and its end in the bridge): netem
# where the kernel has it, else tbf (the rate alone)
slowed=""
for _q in "netem delay 20ms rate 50mbit" \
  "tbf rate 50mbit burst 32kbit latency 400ms"; do
  # shellcheck disable=SC2086
  if mh_exec h3 tc qdisc add dev eth0 root $_q 2>"$MH_TMP/tc.err"; then
    # shellcheck disable=SC2086
    ip netns exec "$MH_BR" tc qdisc add dev p-h3 root $_q ||
      fail "slow: tc on p-h3"
    slowed=${_q%% *}
    break
  fi
done
if [ -n "$slowed" ]; then
  doc slow 120 -H h1:1,h2:1,h3:1
  mh_exec h3 tc qdisc del dev eth0 root
  ip netns exec "$MH_BR" tc qdisc del dev p-h3 root
  expect_rc slow 0
  for _l in h3-\>h1 h3-\>h2 h1-\>h3 h2-\>h3; do
    row slow "$_l" link WARN "slow ($slowed): $_l is slow"
  done
  if [ "$slowed" = netem ]; then
    expect_grep slow out '^h3->h1 +link +WARN +slow: round trip [0-9]{5,} us' \
      "slow: h3->h1's round trip of 40 ms"
    expect_nogrep slow out \
      '^h1->h2 +link +WARN +slow: round trip [0-9]{5,} us' \
      "slow: h1->h2 is not delayed"
  fi
  expect_grep slow out \
    '^h3->h1 +link +WARN +.* 0\.0[0-9] Gb/s.*a quarter of the link' \
    "slow ($slowed): h3->h1 at 50 Mbit/s"
  expect_grep slow out '^h1->h2 +link +(ok|WARN) ' "slow: h1->h2 measured"
  no_fail slow "slow: nothing fails"
  mh_assert_no_job_procs "$MARK" 10
else
  say "slow: skipped: neither netem nor tbf: $(head -n 1 "$MH_TMP/tc.err")"
fi

# ---- ssh cannot reach a host ------------------------------------------------
doc sshfail 90 -H h1:1,hx:1
expect_rc sshfail 1
row sshfail hx ssh FAIL "sshfail: hx"
expect_grep sshfail out '^hx +ssh +FAIL .*Connection refused' \
  "sshfail: ssh's words"
row sshfail h1 ssh ok "sshfail: h1"
mh_assert_no_job_procs "$MARK" 10

finish
