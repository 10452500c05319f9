#!/bin/sh
# priority.sh -- hora_request_t.priority on one host (it_priority.c): each
# rank queues 8 allreduces of 8 MiB streamed through a small arena, then
# one more; given a higher priority, that one overtakes the queued ones
# (at least two are still pending when it completes); given the same,
# it completes after all of them. Every result is checked either way.
. "$(dirname "$0")/lib.sh"

ok() { # NAME NP
  expect_rc "$1" 0 &&
    expect_count "$1" out "^\[[0-9]+\]<stdout>:rank [0-9]+: priority: [0-9]+ checks, 0 failures" "$2" \
      "every rank reports its checks, none failed"
}

for np in 2 3; do
  hrun prio.np$np 120 --arena-size 16M -np $np "$T/it_priority" prio
  ok prio.np$np $np
  expect_count prio.np$np out "^\[[0-9]+\]<stdout>:rank [0-9]+: high done with [0-6] of 8 low done" $np \
    "the late operation of priority 10 overtook queued ones on every rank"
  hrun fifo.np$np 120 --arena-size 16M -np $np "$T/it_priority" fifo
  ok fifo.np$np $np
  expect_count fifo.np$np out "^\[[0-9]+\]<stdout>:rank [0-9]+: high done with 8 of 8 low done" $np \
    "of the same priority, it ran after every queued one"
done
assert_no_leftovers "$MARK"
finish
