#!/bin/sh
# reinit.sh -- hora_shutdown() then hora_init() again, several times, ranks
# arriving at different times (it_reinit.c): every session starts clean
# (same rank and size, process sets numbered from 1 again), on 1 to 4
# ranks of one host.
. "$(dirname "$0")/lib.sh"

for np in 1 2 4; do
  hrun reinit.np$np 60 -np $np "$T/it_reinit" 4
  expect_rc reinit.np$np 0 &&
    expect_count reinit.np$np out "^\[[0-9]+\]<stdout>:rank [0-9]+: reinit: 4 rounds, 0 failures" $np \
      "every rank ran every round"
  expect_nogrep reinit.np$np out "FAIL" "no check failed"
  expect_quiet reinit.np$np
done
assert_no_leftovers "$MARK"
finish
