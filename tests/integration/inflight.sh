#!/bin/sh
# inflight.sh -- many operations in flight must cost time in proportion to
# their number: every rank submits N async allreduces of arena tensors,
# then waits for each and checks it. Their completions outgrow the
# completion ring and wait in horad's backlog, which must hand them over in
# constant time each (it used to move the whole backlog for every batch:
# 400,000 took 24 s where 100,000 took 0.5 s).
. "$(dirname "$0")/lib.sh"

n=400000 limit=8
is_small && n=100000 limit=30 # sanitized: slower, and what counts is the shape
for np in 2; do
  hrun many.np$np 120 -np $np "$T/it_flood" many $n
  expect_rc many.np$np 0 &&
    expect_count many.np$np out "^\[[0-9]\]<stdout>:rank [0-9]: $n operations: .*, 0 wrong" $np \
      "every rank checked its $n operations"
  expect_quiet many.np$np
  worst=$(sed -n 's/.*all done in \([0-9.]*\) s.*/\1/p' "$IT_TMP/many.np$np.out" | sort -n | tail -n 1)
  say "many.np$np: $n operations each, done in ${worst:-?} s"
  awk -v w="${worst:-999}" -v l="$limit" 'BEGIN { exit !(w < l) }' ||
    fail "many.np$np: $n operations took ${worst:-?} s (expected under $limit s)"
done
assert_no_leftovers "$MARK"
finish
