#!/bin/sh
# stall.sh -- the stall inspector: two ranks submit names the other never
# does; horad warns (naming the missing rank) after the warning time and
# fails the operation with HORA_ESTALL after the shutdown time; the job
# goes on. (Both ranks wait on each other: deadlock detection, on by
# default, would end it first: tests/integration/deadlock.sh.)
. "$(dirname "$0")/lib.sh"

hrun stall 60 HORA_DEADLOCK_ACTION=off HORA_STALL_CHECK_TIME_SECONDS=1 \
  HORA_STALL_SHUTDOWN_TIME_SECONDS=3 -np 2 "$T/it_stall"
expect_rc stall 0
for r in 0 1; do
  o=$((1 - r))
  expect_grep stall out "^\[$r\]<stdout>:rank $r stalled op: HORA_ESTALL: allreduce 'only-on-rank-$r' stalled for [0-9]+ s: rank\(s\) $o never submitted it" "rank $r gets HORA_ESTALL naming rank $o"
  expect_grep stall out "^\[$r\]<stdout>:rank $r after: rc 0 sum 2\$" "rank $r: the next allreduce works"
  expect_grep stall err "WARNING: stall: allreduce 'only-on-rank-$r' has waited [0-9]+ s for rank\(s\) $o" "horad warns about rank $o"
done
assert_no_leftovers "$MARK"
finish
