#!/bin/sh
# hosts.sh -- a job over three hosts (network namespaces with sshd, see
# lib.sh), given every way horarun takes hosts: every rank runs where the
# layout says (its hostname is its host's), with HOROVOD_RANK and the
# config file's env, its output prefixed [rank]<stdout>: / <stderr>:
#   -H h1:2,h2:2,h3:2 from the client (a machine that is none of the hosts)
#   -H with one remote host (the whole job on h2, or h3)
#   -H with fewer ranks than slots, and hosts without slot counts
#   --hostfile ('h1 slots=2' lines)
#   --config-file: hosts (both item forms), ssh identity_file / port /
#     options, env; run where ssh has no default key, so the file's
#     identity_file is what lets it in
#   -p 22 -i KEY, also where ssh has no default key
#   horad_path in a config file: a wrapper that records each host it ran on
#   horarun on h1 with h1 in the list: h1's horad starts without ssh (h1's
#     sshd logs no login), h2's over ssh
#   --mpi: the horads started by mpirun; --gloo: by ssh
# After each, no process of the job is left on any host.
. "$(dirname "$0")/lib.sh"
need "$HORARUN" "$HORAD" "$T/it_coll"
mh_setup 3

# check_layout NAME NP H1 H2 H3: ranks 0..NP-1 ran on the hosts in order,
# Hi holding the number of ranks on hi
check_layout() {
  local _name="$1" _np="$2" _r=0 _h=1 _k
  shift 2
  for _k in "$@"; do
    while [ "$_k" -gt 0 ]; do
      expect_grep "$_name" out "^\[$_r\]<stdout>:rank $_r on h$_h\$" "rank $_r runs on h$_h"
      _r=$((_r + 1))
      _k=$((_k - 1))
    done
    _h=$((_h + 1))
  done
  expect_count "$_name" out '^\[[0-9]+\]<stdout>:rank [0-9]+ on ' "$_np" "one line from each of $_np ranks"
}

# every rank says where it is (its host's hostname, from its UTS namespace)
where='echo "rank $HOROVOD_RANK on $(hostname)"'

hrun dashH 60 -np 6 -H h1:2,h2:2,h3:2 sh -c "$where; echo \"err of \$HOROVOD_RANK\" >&2"
expect_rc dashH 0
check_layout dashH 6 2 2 2
expect_count dashH err '^\[[0-9]\]<stderr>:err of [0-9]$' 6 "each rank's stderr comes back prefixed"
expect_quiet dashH
mh_assert_no_job_procs "$MARK"

# one host, not this machine: its horad still connects back over TCP
hrun onehost 60 -np 2 -H h2:2 sh -c "$where"
expect_rc onehost 0
check_layout onehost 2 0 2
hrun onecoll 60 -np 2 -H h3:2 "$T/it_coll" matrix -x 2 -q
expect_rc onecoll 0
expect_count onecoll out "^\[[01]\]<stdout>:rank [01] of 2: [0-9]+ checks, 0 failures" 2 \
  "a collective on the one remote host is right"
mh_assert_no_job_procs "$MARK"

# fewer ranks than slots fill the hosts in order; a host alone has 1 slot
hrun fewer 60 -np 3 -H h1:2,h2:2,h3:2 sh -c "$where"
expect_rc fewer 0
check_layout fewer 3 2 1
hrun noslots 60 -H h1,h2,h3 sh -c "$where"
expect_rc noslots 0
check_layout noslots 3 1 1 1
mh_assert_no_job_procs "$MARK"

mh_write_hostfile "$MH_TMP/hostfile" h1:2 h2:1 h3:3
hrun hostfile 60 --hostfile "$MH_TMP/hostfile" sh -c "$where"
expect_rc hostfile 0
check_layout hostfile 6 2 1 3
mh_assert_no_job_procs "$MARK"

# the config file's identity_file is the only key that works here
mh_write_config "$MH_TMP/cluster.yaml" hosts=h1:2,h2:2,h3:1 identity="$MH_KEY" port=22 \
  opt=-o opt=ConnectTimeout=7 env=MH_CFG_VAR=from-the-config
HRUN_FROM=client-nokey hrun config 60 --config-file "$MH_TMP/cluster.yaml" \
  sh -c "$where; echo \"rank \$HOROVOD_RANK sees MH_CFG_VAR=\$MH_CFG_VAR\""
expect_rc config 0
check_layout config 5 2 2 1
expect_count config out '^\[[0-9]\]<stdout>:rank [0-9] sees MH_CFG_VAR=from-the-config$' 5 \
  "every rank has the config file's env"
expect_quiet config
mh_assert_no_job_procs "$MARK"

HRUN_FROM=client-nokey hrun dashi 60 -p 22 -i "$MH_KEY" -np 4 -H h2:2,h3:2 sh -c "$where"
expect_rc dashi 0
check_layout dashi 4 0 2 2
mh_assert_no_job_procs "$MARK"

# horad_path: a wrapper around the real horad that leaves a trace
cat >"$MH_TMP/horad-wrapper" <<EOF
#!/bin/sh
echo "wrapper ran on \$(hostname)" >>"$MH_TMP/wrapper.log"
exec "$HORAD" "\$@"
EOF
chmod +x "$MH_TMP/horad-wrapper"
mh_write_config "$MH_TMP/wrapper.yaml" horad="$MH_TMP/horad-wrapper"
hrun horad_path 60 -np 3 -H h1:1,h2:1,h3:1 --config-file "$MH_TMP/wrapper.yaml" sh -c "$where"
expect_rc horad_path 0
check_layout horad_path 3 1 1 1
for h in h1 h2 h3; do
  grep -qx "wrapper ran on $h" "$MH_TMP/wrapper.log" 2>/dev/null ||
    fail "horad_path: horad on $h was not started through the wrapper (log: $(tr '\n' ' ' <"$MH_TMP/wrapper.log" 2>/dev/null))"
done
mh_assert_no_job_procs "$MARK"

# from h1, with h1 in the list: h1 is this machine (no ssh login to h1)
logins() { grep -c "Accepted publickey" "$MH_TMP/sshd.$1.log" 2>/dev/null; }
l1=$(logins h1) l2=$(logins h2)
HRUN_FROM=h1 hrun fromh1 60 -np 4 -H h1:2,h2:2 sh -c "$where"
expect_rc fromh1 0
check_layout fromh1 4 2 2
[ "$(logins h1)" = "$l1" ] ||
  fail "fromh1: horarun on h1 logged in to h1 over ssh ($((l1)) -> $(logins h1) logins); h1 is this machine"
[ "$(logins h2)" -gt "$l2" ] || fail "fromh1: no ssh login to h2"
expect_quiet fromh1
mh_assert_no_job_procs "$MARK"

# --mpi (horovodrun's; --launcher mpirun): each host's horad is started by
# mpirun (which reaches h1 and h2 over ssh itself) and told where horarun
# listens; --gloo is ssh
if command -v mpirun >/dev/null 2>&1; then
  hrun mpi 120 --verbose --mpi -np 4 -H h1:2,h2:2 "$T/it_coll" matrix -x 4
  expect_rc mpi 0 &&
    expect_count mpi out "^\[[0-3]\]<stdout>:rank [0-3] of 4: [0-9]+ checks, 0 failures" 4 \
      "every rank's results right" &&
    expect_grep mpi err "starting horad on host h2: mpirun .*-np 1 -H h2 .*horad --rendezvous --launcher $(mh_addr client)" \
      "horad started by mpirun, told horarun's address on the way to h2"
  mh_assert_no_job_procs "$MARK"
else
  say "mpi: skipped: no mpirun (Debian: openmpi-bin)"
fi
hrun gloo 60 --verbose --gloo -np 2 -H h1:1,h2:1 sh -c 'echo "r=$HORA_RANK"'
expect_rc gloo 0 &&
  expect_grep gloo err "starting horad on host h2: ssh " "--gloo: over ssh"
mh_assert_no_job_procs "$MARK"
finish
