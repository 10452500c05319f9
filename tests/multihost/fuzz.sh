#!/bin/sh
# fuzz.sh -- strangers on a running job's TCP ports (network namespaces with
# sshd, see lib.sh). While 2 hosts x 1 rank loop checked allreduces
# (mh_loop.c), mh_probe.c connects to horarun's rendezvous port (from h2)
# and to h1's horad mesh port (from the client) and sends: random garbage,
# a truncated frame, a frame announcing an oversize payload, a frame of
# another protocol version, the handshake with a wrong secret, a hello of
# the wrong purpose, a hello and then EOF. Each connection must be closed by
# the job's side (EOF or reset, within 5 s), each logged on horarun's stderr
# as rejected/dropped with the stranger's address, and the job must go on:
# it ends with exit 0 and every result correct. Nothing of it is left.
. "$(dirname "$0")/lib.sh"
need "$HORARUN" "$HORAD" "$T/mh_loop" "$T/mh_probe"
mh_setup 2

modes="garbage truncated oversize badversion wrongsecret wrongpurpose hello-then-close"
nmodes=$(echo "$modes" | wc -w)

# long enough for every probe, even if each took its full 5 s
hrun_start job --verbose -np 2 -H h1:1,h2:1 "$T/mh_loop" -t 15
if ! wait_for job out '^\[[01]\]<stdout>:rank [01] of 2 on h[12]: running' 2 60 ||
  ! wait_for job err "$MH_RE_MESH_PORT" 2 10; then
  fail "job: did not start (or horarun --verbose did not print the mesh ports)"
  kill -9 "$HRUN_PID" 2>/dev/null
  hrun_wait job 5
  show job
  finish
fi
rdv=$(mh_port job "$MH_RE_RDV_PORT" 1)
mesh=$(mh_port job "$MH_RE_MESH_PORT" 2 h1)
if [ -z "$rdv" ] || [ -z "$mesh" ]; then
  fail "cannot find the ports in horarun's stderr (rendezvous '$rdv', h1's mesh '$mesh'); /$MH_RE_RDV_PORT/ and /$MH_RE_MESH_PORT/ in lib.sh"
  show job
fi
say "rendezvous port $rdv (on the client), h1's mesh port $mesh"

# every probe at once: the job must shrug all of them off together
for m in $modes; do
  mh_exec h2 "$T/mh_probe" client "$rdv" "$m" control >"$MH_TMP/probe.rdv.$m" 2>&1 &
  echo $! >"$MH_TMP/probe.rdv.$m.pid"
  mh_client "$T/mh_probe" h1 "$mesh" "$m" mesh >"$MH_TMP/probe.mesh.$m" 2>&1 &
  echo $! >"$MH_TMP/probe.mesh.$m.pid"
done
for m in $modes; do
  for where in rdv mesh; do
    wait "$(cat "$MH_TMP/probe.$where.$m.pid")"
    rc=$?
    if [ $rc -ne 0 ]; then
      fail "probe $m on the $where port: exit $rc: $(cat "$MH_TMP/probe.$where.$m")"
    else
      say "  $(cat "$MH_TMP/probe.$where.$m")"
    fi
  done
done
# the probes are over before the job; let the logs arrive
sleep 1
hrun_running job || fail "job: ended while (or soon after) being probed"

hrun_wait job 90
expect_rc job 0
expect_count job out '^\[[01]\]<stdout>:rank [01] of 2: [0-9]+ allreduces, 0 failures$' 2 \
  "both ranks looped to the end, every result correct"
expect_nogrep job out 'FAIL|failed' "no allreduce failed"
# horarun logs the rendezvous strangers (from h2), horad on h1 the mesh
# ones (from the client), each with its address
n=$(grep -Ec "($MH_RE_REJECT).*$(mh_addr h2)([^0-9]|$)" "$MH_TMP/job.err")
[ "$n" -ge "$nmodes" ] ||
  fail "job: $n of $nmodes strangers on the rendezvous port (from $(mh_addr h2)) were logged as rejected/dropped"
n=$(grep -Ec "($MH_RE_REJECT).*$(mh_addr client)([^0-9]|$)" "$MH_TMP/job.err")
[ "$n" -ge "$nmodes" ] ||
  fail "job: $n of $nmodes strangers on h1's mesh port (from $(mh_addr client)) were logged as rejected/dropped"
[ "$IT_FAILURES" -eq 0 ] || show job 40
mh_assert_no_job_procs "$MARK" 10
finish
