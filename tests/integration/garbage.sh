#!/bin/sh
# garbage.sh -- garbage on horad's job socket (HORA_DAEMON_SOCKET): rank 0
# before hora_init and the last rank after it (with an allreduce in flight)
# connect raw sockets and send random bytes, truncated headers and
# payloads, bad magic / version / type, huge lengths, messages of the wrong
# direction, HELLOs with wrong or malformed tokens, a second HELLO of a
# connected rank, a hundred connections at once, and keep two half-open
# connections until they exit. horad must drop each bad connection (where
# the input is complete and wrong) and keep serving: every rank then runs
# checked allreduces, a broadcast and barriers, and the job exits 0.
. "$(dirname "$0")/lib.sh"

for np in 1 3; do
  hrun garbage.np$np 120 -np $np "$T/it_garbage"
  expect_rc garbage.np$np 0 &&
    expect_count garbage.np$np out "^\[[0-9]\]<stdout>:rank [0-9] of $np: garbage: [0-9]+ checks, 0 failures" $np \
      "every rank reports its checks, none failed"
  expect_nogrep garbage.np$np out "FAIL" "no check failed"
  assert_no_leftovers "$MARK"
  assert_clean_tmp garbage.np$np
done
say "horad's complaints (np 3): $(grep -c 'connection dropped' "$IT_TMP/garbage.np3.err") connections dropped"
finish
