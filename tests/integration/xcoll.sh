#!/bin/sh
# xcoll.sh -- allgather (equal and per-rank counts), alltoall (equal and
# uneven splits), reducescatter (every op, remainder rows), allreduce with
# prescale/postscale, a shape mismatch; process sets (two disjoint sets
# busy at once, a set of one rank, non-members, duplicates, removal);
# join with every op, allgather, alltoall and reducescatter (it_xcoll.c),
# on 1 to 4 ranks of one host. Every rank checks its results against a
# reference it computes itself.
. "$(dirname "$0")/lib.sh"

for np in 1 2 3 4; do
  for mode in colls sets join groups; do
    hrun $mode.np$np 120 -np $np "$T/it_xcoll" $mode -x $np
    expect_rc $mode.np$np 0 &&
      expect_count $mode.np$np out "^\[[0-9]+\]<stdout>:rank [0-9]+ of $np: $mode: [0-9]+ checks, 0 failures" $np \
        "every rank reports its checks, none failed"
    expect_nogrep $mode.np$np out "FAIL" "no check failed"
  done
done
# more ranks than cores, and tensors in flight on two sets at once
hrun sets.np6 120 -np 6 "$T/it_xcoll" sets -x 6
expect_rc sets.np6 0
expect_nogrep sets.np6 out "FAIL" "no check failed"
assert_no_leftovers "$MARK"
finish
