#!/bin/sh
# slurm.sh -- horarun inside a Slurm allocation (launcher/slurm.c), its
# variables set as sbatch and salloc set them: without -H or --hostfile
# the job runs on the allocation's nodes (SLURM_JOB_NODELIST, hostlist
# syntax) with SLURM_TASKS_PER_NODE as their slots, -np defaulting to
# all of them; across hosts through the fake ssh of lib.sh (horad
# --rendezvous on this machine); -H still wins; a malformed variable is a
# usage error that names it.
. "$(dirname "$0")/lib.sh"
[ -x "$BUILD/bin/horad" ] || { echo "no $BUILD/bin/horad: run make first"; exit 77; }
unset HORA_HORAD SLURM_JOB_ID SLURM_JOB_NODELIST SLURM_NODELIST \
  SLURM_TASKS_PER_NODE SLURM_NTASKS_PER_NODE
use_fake_ssh
me=$(hostname)
show='echo "r=$HORA_RANK/$HORA_SIZE l=$HORA_LOCAL_RANK/$HORA_LOCAL_SIZE h=$HORA_HOSTNAME"'

# ---- this machine's allocation: its tasks are the job's ranks -----------------
SLURM_JOB_NODELIST=$me SLURM_TASKS_PER_NODE=3 run_hr --verbose sh -c "$show"
expect_rc 0 "one node, 3 tasks"
for r in 0 1 2; do
  expect_in out "[$r]<stdout>:r=$r/3 l=$r/3 h=$me" "one node, rank $r"
done
expect_in err "hosts: the Slurm allocation's, SLURM_JOB_NODELIST=$me SLURM_TASKS_PER_NODE=3" \
  "--verbose names where the hosts came from"
note "a one-node allocation of 3 tasks runs 3 ranks, -np from the tasks"

SLURM_JOB_NODELIST=$me SLURM_TASKS_PER_NODE=3 run_hr -np 2 sh -c "$show"
expect_rc 0 "one node, -np 2"
expect_in out "[1]<stdout>:r=1/2 l=1/2 h=$me" "-np below the tasks"
note "-np below the allocation's tasks"

SLURM_JOB_NODELIST=$me SLURM_TASKS_PER_NODE=2 run_hr -np 3 true
expect_rc 2 "more processes than tasks"
expect_in err "requested 3 processes but the hosts give only 2 slots" "too many"
note "-np above the allocation's tasks is refused"

# ---- several nodes: this machine and fake ones, tasks "2,1(x2)" -----------------
: >"$TMP/ssh.hosts"
SLURM_JOB_NODELIST="$me,fakenode[01-02]" SLURM_TASKS_PER_NODE="2,1(x2)" \
  run_hr sh -c "$show"
expect_rc 0 "three nodes"
expect_in out "[0]<stdout>:r=0/4 l=0/2" "rank 0 on the first node"
expect_in out "[1]<stdout>:r=1/4 l=1/2" "rank 1 on the first node"
expect_in out "[2]<stdout>:r=2/4 l=0/1 h=fakenode01" "rank 2 on fakenode01"
expect_in out "[3]<stdout>:r=3/4 l=0/1 h=fakenode02" "rank 3 on fakenode02"
expect_in ssh.hosts "fakenode01" "ssh to fakenode01"
expect_in ssh.hosts "fakenode02" "ssh to fakenode02"
note "an allocation of three nodes (hostlist ranges, tasks 2,1(x2)): 4 ranks, ssh to the others"

# the older name, and one count for every node (SLURM_NTASKS_PER_NODE)
SLURM_NODELIST="$me,fakenode7" SLURM_NTASKS_PER_NODE=1 run_hr sh -c "$show"
expect_rc 0 "SLURM_NODELIST"
expect_in out "[1]<stdout>:r=1/2 l=0/1 h=fakenode7" "SLURM_NODELIST and SLURM_NTASKS_PER_NODE"
note "SLURM_NODELIST and SLURM_NTASKS_PER_NODE"

# ---- -H wins over the allocation ----------------------------------------------
SLURM_JOB_NODELIST="fakenode[01-02]" SLURM_TASKS_PER_NODE="2(x2)" \
  run_hr -np 1 -H localhost:1 sh -c "$show"
expect_rc 0 "-H inside an allocation"
expect_in out "[0]<stdout>:r=0/1" "-H: one rank here"
note "-H is used inside an allocation too"

# ---- malformed variables ---------------------------------------------------------
SLURM_JOB_NODELIST="node[1-" run_hr true
expect_rc 2 "bad SLURM_JOB_NODELIST"
expect_in err "horarun: error: SLURM_JOB_NODELIST 'node[1-': a '[' without its ']'" \
  "the node list's error"
SLURM_JOB_NODELIST="$me" SLURM_TASKS_PER_NODE="2(y3)" run_hr true
expect_rc 2 "bad SLURM_TASKS_PER_NODE"
expect_in err "horarun: error: SLURM_TASKS_PER_NODE '2(y3)': expected counts like 2(x3),1 (SLURM_JOB_NODELIST has 1 node)" \
  "the tasks' error"
note "malformed SLURM_JOB_NODELIST and SLURM_TASKS_PER_NODE are usage errors naming them"
kill_marked
exit 0
