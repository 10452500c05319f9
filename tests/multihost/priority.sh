#!/bin/sh
# priority.sh -- hora_request_t.priority across hosts (network namespaces,
# see lib.sh), with it_priority (tests/integration/it_priority.c): each
# rank queues 8 allreduces of 8 MiB streamed through a small arena (not
# adopted into the segment: --adopt-size 0), then one more. The coordinator holds the decisions it makes while its host
# has work queued and sends them highest priority first: given priority
# 10, the late one overtakes queued ones on every rank of every host;
# given the same priority, it runs after all of them. Then a large one in
# the arena (32 MiB) and, 1 ms later, a small one (1 KiB: its result comes
# with the coordinator's decision): of priority 10 it completes on every
# host while the large one still runs; of priority 0, after it. The same
# with 1 MiB (round the ring, in its urgent lane beside the large one),
# and with 2 MiB after four large ones already queued on every host. 2 x 1
# and 3 x 1, every result checked. Last, a rank lost while the lane runs.
. "$(dirname "$0")/lib.sh"
need "$HORARUN" "$HORAD" "$T/it_priority"
mh_setup 3

ok() { # NAME NP
  expect_rc "$1" 0 &&
    expect_count "$1" out "^\[[0-9]+\]<stdout>:rank [0-9]+: priority: [0-9]+ checks, 0 failures" "$2" \
      "every rank reports its checks, none failed"
  mh_assert_no_job_procs "$MARK"
}

for n in 2 3; do
  hosts=h1:1,h2:1
  [ $n = 3 ] && hosts=h1:1,h2:1,h3:1
  hrun prio.${n}x1 240 --arena-size 16M --adopt-size 0 -np $n -H $hosts "$T/it_priority" prio
  ok prio.${n}x1 $n
  expect_count prio.${n}x1 out "^\[[0-9]+\]<stdout>:rank [0-9]+: high done with [0-7] of 8 low done" $n \
    "the late operation of priority 10 overtook queued ones on every rank"
  hrun fifo.${n}x1 240 --arena-size 16M --adopt-size 0 -np $n -H $hosts "$T/it_priority" fifo
  ok fifo.${n}x1 $n
  expect_count fifo.${n}x1 out "^\[[0-9]+\]<stdout>:rank [0-9]+: high done with 8 of 8 low done" $n \
    "of the same priority, it ran after every queued one"
  hrun inarena.${n}x1 240 --arena-size 64M -np $n -H $hosts "$T/it_priority" inarena 1 32
  ok inarena.${n}x1 $n
  expect_count inarena.${n}x1 out "^\[[0-9]+\]<stdout>:rank [0-9]+: high done with 0 of 1 low done" $n \
    "the small urgent one completed while the large one ran, on every host"
  hrun fifoarena.${n}x1 240 --arena-size 64M -np $n -H $hosts "$T/it_priority" fifoarena 1 32
  ok fifoarena.${n}x1 $n
  expect_count fifoarena.${n}x1 out "^\[[0-9]+\]<stdout>:rank [0-9]+: high done with 1 of 1 low done" $n \
    "of the same priority, it waited for the large one"
  # 1 MiB goes round the ring: in its urgent lane, beside the large one
  hrun lane.${n}x1 240 HORA_LOG=engine:debug --arena-size 64M -np $n -H $hosts "$T/it_priority" inarena 1 32 1024
  ok lane.${n}x1 $n
  expect_count lane.${n}x1 out "^\[[0-9]+\]<stdout>:rank [0-9]+: high done with 0 of 1 low done" $n \
    "1 MiB of priority 10 completed while the large one ran, on every host"
  expect_grep lane.${n}x1 err "DEBUG: allreduce 'high' overtakes 'low.0' in the urgent lane" \
    "it ran in the ring's urgent lane"
  hrun fifolane.${n}x1 240 --arena-size 64M -np $n -H $hosts "$T/it_priority" fifoarena 1 32 1024
  ok fifolane.${n}x1 $n
  expect_count fifolane.${n}x1 out "^\[[0-9]+\]<stdout>:rank [0-9]+: high done with 1 of 1 low done" $n \
    "1 MiB of the same priority waited for the large one"
  # 4 large ones decided and queued on every host before it: it runs
  # beside one of them, not after the last
  hrun lanequeued.${n}x1 240 --arena-size 64M -np $n -H $hosts "$T/it_priority" inarena 4 8 2048
  ok lanequeued.${n}x1 $n
  expect_count lanequeued.${n}x1 out "^\[[0-9]+\]<stdout>:rank [0-9]+: high done with [0-3] of 4 low done" $n \
    "2 MiB of priority 10 overtook large ones already queued, on every host"
done
# a rank lost while the urgent lane runs (8 MiB of priority 10 beside 64
# MiB; the last rank exits 8 ms after submitting it): what had not
# completed fails at once on the other host, naming the rank (as its
# host's loss, or as the job's stop, whichever news comes first), and the
# job ends with nothing left behind
hrun lanedie.2x1 240 HORA_LOG=engine:debug IT_PRIORITY_DIE=1 --arena-size 96M -np 2 \
  -H h1:1,h2:1 "$T/it_priority" inarena 1 64 8192
expect_rc lanedie.2x1 9 &&
  expect_grep lanedie.2x1 err "host h1: .*DEBUG: allreduce 'high' overtakes 'low.0' in the urgent lane" \
    "the urgent one ran in the lane" &&
  expect_grep lanedie.2x1 out "rank 0: FAIL (test )?low.0: allreduce 'low.0' cannot complete: .*rank 1 .*exited with code 9" \
    "the large one failed on the other host, naming the rank"
if grep "FAIL high:" "$MH_TMP/lanedie.2x1.out" | grep -vq "rank 1 .*exited with code 9"; then
  fail "lanedie.2x1: the urgent one failed without naming the rank lost"
  show lanedie.2x1
fi
mh_assert_no_job_procs "$MARK"
grep -h "high done" "$MH_TMP"/prio.*.out "$MH_TMP"/fifo.*.out \
  "$MH_TMP"/inarena.*.out "$MH_TMP"/fifoarena.*.out "$MH_TMP"/lane.*.out \
  "$MH_TMP"/fifolane.*.out "$MH_TMP"/lanequeued.*.out | sed 's/^/    /'
finish
