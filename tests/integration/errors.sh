#!/bin/sh
# errors.sh -- errors come back as HORA_E* codes with a message, never a
# crash, and the job goes on:
#   badargs: calls before hora_init (HORA_ENOTINIT + message), NULL buffers
#     with count > 0, dtype/op 99 and -1, broadcast roots out of range,
#     bogus, stale and released handles (HORA_EBADHANDLE), NULL handle /
#     done pointers, absurd counts; each followed by checked allreduces;
#     with 1 (also without horarun), 2 and 3 ranks;
#   mismatch: for one name, rank 1 differs in count, dtype, op, broadcast
#     root, collective type (and several at once, and among async ops):
#     every rank gets HORA_EMISMATCH naming the name, both ranks and both
#     values; then the same name works again; duplicate names in flight
#     (HORA_EDUPNAME on the second submission, the first completes);
#     with 2, 3 and 4 ranks.
. "$(dirname "$0")/lib.sh"

solo badargs.solo 60 "$T/it_errors" badargs
expect_rc badargs.solo 0
expect_nogrep badargs.solo out "FAIL" "no check failed"
expect_grep badargs.solo out "^rank 0 of 1: badargs: [0-9]+ checks, 0 failures" "a job of one"

for np in 1 2 3; do
  hrun badargs.np$np 120 -np $np "$T/it_errors" badargs
  expect_rc badargs.np$np 0 &&
    expect_count badargs.np$np out "^\[[0-9]\]<stdout>:rank [0-9] of $np: badargs: [0-9]+ checks, 0 failures" $np \
      "every rank reports its checks, none failed"
  expect_nogrep badargs.np$np out "FAIL" "no check failed"
done

for np in 2 3 4; do
  hrun mismatch.np$np 120 IT_VERBOSE=1 -np $np "$T/it_errors" mismatch
  expect_rc mismatch.np$np 0 &&
    expect_count mismatch.np$np out "^\[[0-9]\]<stdout>:rank [0-9] of $np: mismatch: [0-9]+ checks, 0 failures" $np \
      "every rank reports its checks, none failed"
  expect_nogrep mismatch.np$np out "FAIL" "no check failed"
done
# what the messages look like (for the log)
grep -E "ok: (count|dtype|op|broadcast root|collective) mismatch|duplicate|second submission" \
  "$IT_TMP/mismatch.np3.out" | grep '^\[0\]' | cut -c1-300
assert_no_leftovers "$MARK"
finish
