#!/bin/sh
# slurm.sh -- horarun in a real Slurm cluster of the namespace hosts: the
# test starts munged (a fresh key), slurmctld on the client and one slurmd
# per host (h1, h2: their own node names and addresses), then, from the
# client:
#   salloc  -N2 -n4: horarun with no -H takes the allocation's nodes and
#           tasks (SLURM_JOB_NODELIST h[1-2], SLURM_TASKS_PER_NODE 2(x2))
#           and starts each horad as a job step (srun, the default there):
#           no ssh; a collective across the hosts; the step ends with it
#   sbatch  the same from a batch script, its output read back
#   --launcher ssh in an allocation; srun outside one is a usage error
# Needs root, namespaces and Slurm's daemons (Debian: slurmctld slurmd
# slurm-client munge); without them it says why and is skipped.
. "$(dirname "$0")/lib.sh"
need "$HORARUN" "$HORAD" "$T/it_coll"
for t in slurmctld slurmd srun salloc sbatch squeue munged munge; do
  command -v $t >/dev/null 2>&1 ||
    skip "no $t (Debian: slurmctld slurmd slurm-client munge; tests/deps.sh test installs them)"
done
mh_setup 2

S=$MH_TMP/slurm
mkdir -p "$S/state" "$S/spool" "$S/log" "$S/out" || exit 1
chmod 755 "$MH_TMP" "$S" "$S/out" # munge's socket: reachable by all
# munge: a fresh key, its own socket; one munged (on the client) serves
# every namespace (the socket is a file)
dd if=/dev/urandom of="$S/munge.key" bs=1024 count=1 2>/dev/null
chmod 600 "$S/munge.key"
mh_client munged -f --key-file="$S/munge.key" --socket="$S/munge.sock" \
  --pid-file="$S/munged.pid" --log-file="$S/log/munged.log" \
  --seed-file="$S/munge.seed" || fail "munged did not start"
cpus=$(nproc)
cat >"$S/slurm.conf" <<CONF
ClusterName=hora
SlurmctldHost=client($(mh_addr client))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$S/munge.sock
SlurmctldPort=16817
SlurmdPort=16818
StateSaveLocation=$S/state
SlurmdSpoolDir=$S/spool/%n
SlurmctldPidFile=$S/slurmctld.pid
SlurmdPidFile=$S/slurmd.%n.pid
SlurmctldLogFile=$S/log/slurmctld.log
SlurmdLogFile=$S/log/slurmd.%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SwitchType=switch/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
NodeName=h1 NodeAddr=$(mh_addr h1) CPUs=$cpus State=UNKNOWN
NodeName=h2 NodeAddr=$(mh_addr h2) CPUs=$cpus State=UNKNOWN
PartitionName=hora Nodes=h1,h2 Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
CONF
export SLURM_CONF="$S/slurm.conf"
mh_client slurmctld -f "$SLURM_CONF" || fail "slurmctld did not start"
# the hosts' /sys is a sysfs of their own: slurmd wants the cgroup
# hierarchies there as on a real node, the same as this machine's
# (linuxproc tracks the processes; nothing is confined)
awk '$3 == "cgroup2" && $2 == "/sys/fs/cgroup" { print "cgroup2", $2 }
     $3 == "cgroup" && $2 ~ "^/sys/fs/cgroup/" { print $4, $2 }' /proc/mounts \
  >"$S/cgroups"
for h in h1 h2; do
  mkdir -p "$S/spool/$h"
  mh_exec $h sh -c '
    mountpoint -q /sys/fs/cgroup && exit 0
    if grep -q "^cgroup2 " "$1"; then
      exec mount -t cgroup2 none /sys/fs/cgroup
    fi
    mount -t tmpfs -o mode=755 cgroup_root /sys/fs/cgroup || exit 1
    while read -r opts dir; do
      mkdir -p "$dir" && mount -t cgroup -o "$opts" cgroup "$dir" || exit 1
    done <"$1"' sh "$S/cgroups" || fail "cannot give $h a /sys/fs/cgroup"
  mh_exec $h slurmd -f "$SLURM_CONF" -N $h || fail "slurmd on $h did not start"
done
t0=$(date +%s.%N)
until [ "$(mh_client sinfo -h -o '%T %D' 2>/dev/null)" = "idle 2" ]; do
  if mh_past "$t0" 30; then
    fail "the nodes did not come up: $(mh_client sinfo 2>&1 | tr '\n' ' ')"
    tail -n 5 "$S"/log/*.log | sed 's/^/    | /'
    finish
  fi
  sleep 0.3
done
say "cluster up: $(mh_client sinfo -h -o '%P %D %T %N')"
# the cluster's daemons are infrastructure, not a job's leftovers
ctld=$(cat "$S/slurmctld.pid" 2>/dev/null)
{
  pgrep -f "$S/slurm.conf"
  pgrep -f "$S/munge.sock"
  [ -n "$ctld" ] && pgrep -P "$ctld"
} >>"$MH_TMP/infra.pids"

# ---- salloc: the allocation's hosts, horad started by srun ---------------------
# (run from the client, which is none of the hosts)
cat >"$S/job.sh" <<JOB
#!/bin/sh
echo "nodelist=\$SLURM_JOB_NODELIST tasks=\$SLURM_TASKS_PER_NODE"
exec "$HORARUN" --verbose "$T/it_coll" matrix -x 4 --marker=$MARK
JOB
chmod +x "$S/job.sh"
mh_client timeout 180 salloc -N2 -n4 --quiet "$S/job.sh" \
  >"$MH_TMP/salloc.out" 2>"$MH_TMP/salloc.err"
RC=$?
echo "$RC" >"$MH_TMP/salloc.rc"
echo "salloc -N2 -n4 job.sh (horarun --verbose it_coll matrix)" >"$MH_TMP/salloc.cmd"
expect_rc salloc 0 &&
  expect_grep salloc out "^nodelist=h\[1-2\] tasks=2\(x2\)$" "salloc's allocation: h[1-2], 2 tasks each" &&
  expect_count salloc out "^\[[0-3]\]<stdout>:rank [0-3] of 4: [0-9]+ checks, 0 failures" 4 \
    "every rank's results right" &&
  expect_grep salloc err "hosts: the Slurm allocation's, SLURM_JOB_NODELIST=h\[1-2\] SLURM_TASKS_PER_NODE=2\(x2\)" \
    "horarun took the allocation's hosts" &&
  expect_grep salloc err "rank 3: host h2, local_rank 1 of 2" "two ranks on each node" &&
  expect_grep salloc err "starting horad on host h1: srun --nodes=1 --ntasks=1 --nodelist=h1 --overlap" \
    "horad started on h1 as a job step" &&
  expect_grep salloc err "starting horad on host h2: srun --nodes=1 --ntasks=1 --nodelist=h2 --overlap" \
    "and on h2"
mh_assert_no_job_procs "$MARK"

# ---- sbatch: the same from a batch script -----------------------------------------
jid=$(mh_client sbatch --parsable -N2 -n4 -o "$S/out/batch.%j" "$S/job.sh" 2>"$MH_TMP/sbatch.err")
if [ -z "$jid" ]; then
  fail "sbatch refused the job: $(cat "$MH_TMP/sbatch.err")"
else
  t0=$(date +%s.%N)
  while [ -n "$(mh_client squeue -h -j "$jid" 2>/dev/null)" ] && ! mh_past "$t0" 180; do
    sleep 0.5
  done
  cp "$S/out/batch.$jid" "$MH_TMP/sbatch.out" 2>/dev/null || : >"$MH_TMP/sbatch.out"
  : >"$MH_TMP/sbatch.err"
  echo 0 >"$MH_TMP/sbatch.rc"
  echo "sbatch -N2 -n4 job.sh" >"$MH_TMP/sbatch.cmd"
  expect_count sbatch out "^\[[0-3]\]<stdout>:rank [0-3] of 4: [0-9]+ checks, 0 failures" 4 \
    "the batch job's ranks' results right" &&
    expect_grep sbatch out "starting horad on host h2: srun --nodes=1" "horad started by srun in the batch job"
  state=$(mh_client sacct -n -X -j "$jid" -o State 2>/dev/null | tr -d ' ')
  say "sbatch job $jid: ${state:-(no accounting)}"
fi
mh_assert_no_job_procs "$MARK"

# ---- --launcher ssh in an allocation; srun outside one --------------------------------
cat >"$S/ssh.sh" <<JOB
#!/bin/sh
exec "$HORARUN" --verbose --launcher ssh sh -c 'echo "r=\$HORA_RANK h=\$HORA_HOSTNAME"' --marker=$MARK
JOB
chmod +x "$S/ssh.sh"
mh_client timeout 120 salloc -N2 -n2 --quiet "$S/ssh.sh" \
  >"$MH_TMP/sshl.out" 2>"$MH_TMP/sshl.err"
echo $? >"$MH_TMP/sshl.rc"
echo "salloc -N2 -n2 horarun --launcher ssh" >"$MH_TMP/sshl.cmd"
RC=$(cat "$MH_TMP/sshl.rc")
expect_rc sshl 0 &&
  expect_grep sshl out "^\[1\]<stdout>:r=1 h=h2$" "rank 1 on h2" &&
  expect_grep sshl err "starting horad on host h2: ssh " "--launcher ssh: over ssh"
hrun nosrun 30 --launcher srun -np 2 -H h1:1,h2:1 true
expect_rc nosrun 2
expect_grep nosrun err "SLURM_JOB_ID is not set" "srun outside an allocation is refused"
mh_assert_no_job_procs "$MARK"
finish
