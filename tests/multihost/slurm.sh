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
#   srun -N2 -n4 it_coll: srun starts the ranks, which join one job (rank
#           0 starts horarun --join; its horads start as steps); -n3
#           --mpi=pmi2 (tasks 2,1); -m cyclic refused by every rank
#   --launcher ssh in an allocation; srun outside one is a usage error
# Needs root, namespaces and Slurm's daemons (Debian: slurmctld slurmd
# slurm-client munge); without them it says why and is skipped.
. "$(dirname "$0")/lib.sh"
need "$HORARUN" "$HORAD" "$T/it_coll"
mh_slurm_up

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

# ---- srun starts the ranks: they join one job --------------------------------------
# rank 0 (on h1) starts horarun --join; its horads start as steps of the same
# allocation on the step's nodes, and each writes its node's ranks' way in
mh_client timeout 120 env HORA_HORARUN="$HORARUN" srun -N2 -n4 --quiet \
  "$T/it_coll" matrix -x 4 --marker=$MARK \
  >"$MH_TMP/srunj.out" 2>"$MH_TMP/srunj.err"
echo $? >"$MH_TMP/srunj.rc"
echo "srun -N2 -n4 it_coll matrix (the ranks join)" >"$MH_TMP/srunj.cmd"
RC=$(cat "$MH_TMP/srunj.rc")
expect_rc srunj 0 &&
  expect_count srunj out "^rank [0-3] of 4: [0-9]+ checks, 0 failures" 4 \
    "srun's 4 ranks on h1 and h2 joined one job; every rank's results right"
mh_assert_no_job_procs "$MARK"
left=$(for p in $(pgrep -f "horarun --join slurm-|horad --rendezvous"); do
  case "$(ps -o stat= -p "$p")" in Z*) ;; *) ps -o pid=,args= -p "$p" ;; esac
done)
[ -z "$left" ] || fail "srun's ranks: hora's processes left: $left"

# uneven tasks (2 on h1, 1 on h2) with srun's PMI-2 variables around them
mh_client timeout 120 env HORA_HORARUN="$HORARUN" srun -N2 -n3 --mpi=pmi2 \
  --quiet "$T/it_coll" matrix -x 3 --marker=$MARK \
  >"$MH_TMP/srunp.out" 2>"$MH_TMP/srunp.err"
echo $? >"$MH_TMP/srunp.rc"
echo "srun -N2 -n3 --mpi=pmi2 it_coll matrix" >"$MH_TMP/srunp.cmd"
expect_rc srunp 0 &&
  expect_count srunp out "^rank [0-2] of 3: [0-9]+ checks, 0 failures" 3 \
    "srun -N2 -n3 --mpi=pmi2 (tasks 2,1): one job of 3"
mh_assert_no_job_procs "$MARK"
# srun -m cyclic: every rank refuses at once, saying why
mh_client timeout 60 env HORA_HORARUN="$HORARUN" srun -N2 -n4 -m cyclic \
  --quiet "$T/it_coll" matrix -x 4 --marker=$MARK \
  >"$MH_TMP/srunc.out" 2>"$MH_TMP/srunc.err"
echo $? >"$MH_TMP/srunc.rc"
echo "srun -N2 -n4 -m cyclic it_coll matrix" >"$MH_TMP/srunc.cmd"
expect_rc srunc nonzero &&
  expect_count srunc out "did not give each node consecutive ranks" 4 \
    "srun -m cyclic: each of the 4 ranks refuses, saying why"
mh_assert_no_job_procs "$MARK"
jd=${TMPDIR:-/tmp}/hora-$(id -u)
n=0
while ls "$jd" 2>/dev/null | grep -q "^join-slurm-" && [ $n -lt 50 ]; do
  sleep 0.1
  n=$((n + 1))
done
! ls "$jd" 2>/dev/null | grep -q "^join-slurm-" ||
  fail "srun's ranks: join directories left in $jd: $(ls "$jd")"

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
