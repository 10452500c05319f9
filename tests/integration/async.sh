#!/bin/sh
# async.sh -- names submitted in rank-dependent orders (each rank its own
# permutation, waited in yet another), 500 async allreduces of mixed sizes,
# dtypes, ops and buffer kinds outstanding at once (some polled with
# hora_test), unnamed operations matched by call order with named ones
# slipped in at rank-dependent places, names longer than a submission entry
# holds / empty / with blanks, tabs, newline, UTF-8; 2, 3, 4 and 8 ranks;
# then 4 threads per rank submitting at once. Every result is checked
# against the rank's own reference (it_coll.c).
. "$(dirname "$0")/lib.sh"

for np in 2 3 4; do
  hrun async.np$np 120 -np $np "$T/it_coll" async -x $np
  expect_rc async.np$np 0 &&
    expect_count async.np$np out "^\[[0-9]\]<stdout>:rank [0-9] of $np: [0-9]+ checks, 0 failures" $np \
      "every rank reports its checks, none failed"
  expect_nogrep async.np$np out "FAIL" "no check failed"
  expect_quiet async.np$np
done
# more ranks than cores (under ASan: fewer operations, the same patterns)
few=""
is_small && few="-k 32 -M 200 -U 30"
# shellcheck disable=SC2086
hrun async.np8 120 -np 8 "$T/it_coll" async $few -x 8
expect_rc async.np8 0 &&
  expect_count async.np8 out "^\[[0-9]\]<stdout>:rank [0-9] of 8: [0-9]+ checks, 0 failures" 8 \
    "every rank reports its checks, none failed"
expect_nogrep async.np8 out "FAIL" "no check failed"
expect_quiet async.np8

# several threads per rank submitting and waiting at once (4 x 400
# operations, 100 in flight per thread; some waited with hora_test)
for np in 2 3; do
  hrun threads.np$np 120 -np $np "$T/it_coll" threads -x $np
  expect_rc threads.np$np 0 &&
    expect_count threads.np$np out "^\[[0-9]\]<stdout>:rank [0-9] of $np: 1600 checks, 0 failures" $np \
      "every rank checked its 1600 operations, none failed"
  expect_nogrep threads.np$np out "FAIL" "no check failed"
  expect_quiet threads.np$np
done
assert_no_leftovers "$MARK"
finish
