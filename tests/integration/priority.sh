#!/bin/sh
# priority.sh -- hora_request_t.priority on one host (it_priority.c): each
# rank queues 8 allreduces of 8 MiB streamed through a small arena, then
# one more (--adopt-size 0: their malloc'd buffers are not adopted into
# the segment, where they would run at once, without queueing); given a
# higher priority, that one overtakes the queued ones
# (at least one is still pending when it completes); given the same,
# it completes after all of them. A small urgent one also runs between the
# chunks of a large streamed one, and between the chunk-sized pieces of a
# large one in the arena. Every result is checked either way.
. "$(dirname "$0")/lib.sh"

ok() { # NAME NP
  expect_rc "$1" 0 &&
    expect_count "$1" out "^\[[0-9]+\]<stdout>:rank [0-9]+: priority: [0-9]+ checks, 0 failures" "$2" \
      "every rank reports its checks, none failed"
}

for np in 2 3; do
  hrun prio.np$np 120 --arena-size 16M --adopt-size 0 -np $np "$T/it_priority" prio
  ok prio.np$np $np
  expect_count prio.np$np out "^\[[0-9]+\]<stdout>:rank [0-9]+: high done with [0-7] of 8 low done" $np \
    "the late operation of priority 10 overtook queued ones on every rank"
  hrun fifo.np$np 120 --arena-size 16M --adopt-size 0 -np $np "$T/it_priority" fifo
  ok fifo.np$np $np
  expect_count fifo.np$np out "^\[[0-9]+\]<stdout>:rank [0-9]+: high done with 8 of 8 low done" $np \
    "of the same priority, it ran after every queued one"
done
# a large streamed allreduce of priority 0 (64 MiB through a 16 MiB arena),
# then a small one in the arena: of priority 10 it runs between the large
# one's chunks and completes first; of priority 0, after it
for np in 2 3; do
  hrun split.np$np 120 --arena-size 16M --adopt-size 0 -np $np "$T/it_priority" split 1 64
  ok split.np$np $np
  expect_count split.np$np out "^\[[0-9]+\]<stdout>:rank [0-9]+: high done with 0 of 1 low done" $np \
    "the small urgent one did not wait for the large one"
  hrun nosplit.np$np 120 --arena-size 16M --adopt-size 0 -np $np "$T/it_priority" nosplit 1 64
  ok nosplit.np$np $np
  expect_count nosplit.np$np out "^\[[0-9]+\]<stdout>:rank [0-9]+: high done with 1 of 1 low done" $np \
    "of the same priority, it waited for the large one"
done
# a large allreduce of priority 0 in the arena (128 MiB, hora_alloc), run
# where it lies a chunk at a time, then 1 ms later a small one: of
# priority 10 it runs between two pieces and completes first; of
# priority 0, after it
for np in 2 3; do
  hrun inarena.np$np 120 --arena-size 256M -np $np "$T/it_priority" inarena 1 128
  ok inarena.np$np $np
  expect_count inarena.np$np out "^\[[0-9]+\]<stdout>:rank [0-9]+: high done with 0 of 1 low done" $np \
    "the small urgent one ran between the pieces of the large one in the arena"
  hrun fifoarena.np$np 120 --arena-size 256M -np $np "$T/it_priority" fifoarena 1 128
  ok fifoarena.np$np $np
  expect_count fifoarena.np$np out "^\[[0-9]+\]<stdout>:rank [0-9]+: high done with 1 of 1 low done" $np \
    "of the same priority, it waited for the large one"
done
assert_no_leftovers "$MARK"
finish
