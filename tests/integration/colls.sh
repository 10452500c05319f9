#!/bin/sh
# colls.sh -- allreduce / broadcast / barrier results with 1, 2, 3, 4 and 8
# ranks (more ranks than cores): every dtype x every op x in place / out of
# place x hora_alloc / malloc buffers (the two mixes of those, and a kind
# that differs from rank to rank), sizes 0, 1, 7,
# 33 and 4099 elements, broadcast from every root, a barrier check; then
# every dtype and op at just over 1 MiB (odd element counts) with 2 and 3
# ranks; and hand-picked values at the limits of the arithmetic hora.h
# documents. Each rank checks against a reference it computes itself
# (it_coll.c).
. "$(dirname "$0")/lib.sh"

for np in 1 2 3 4 8; do
  hrun matrix.np$np 120 -np $np "$T/it_coll" matrix -b -B "$IT_TMP/barrier.$np" -x $np
  expect_rc matrix.np$np 0 &&
    expect_count matrix.np$np out "^\[[0-9]+\]<stdout>:rank [0-9]+ of $np: [0-9]+ checks, 0 failures" $np \
      "every rank reports its checks, none failed"
  expect_nogrep matrix.np$np out "FAIL" "no check failed"
  expect_quiet matrix.np$np
  assert_no_leftovers "$MARK"
  assert_clean_tmp matrix.np$np
  # the limits of the documented arithmetic: int64 wrap, exact integer
  # averages truncated toward zero, float16 accumulated in float32
  hrun edges.np$np 60 -np $np "$T/it_coll" edges -x $np
  expect_rc edges.np$np 0
  expect_nogrep edges.np$np out "FAIL" "no check failed"
done

# just over 1 MiB per tensor, odd element counts; in place in the arena and
# out of place from malloc (copied through the arena); the other buffer
# kinds at 1 MiB + 3 bytes of int8 (average, max)
for np in 2 3; do
  hrun mib.np$np 120 -np $np "$T/it_coll" matrix -s b1M+3 -m ip_alloc,oop_malloc -b -x $np
  expect_rc mib.np$np 0
  expect_nogrep mib.np$np out "FAIL" "no check failed"
  expect_quiet mib.np$np
  hrun mibmodes.np$np 120 -np $np "$T/it_coll" matrix -s b1M+3 -t int8 -o average,max -x $np
  expect_rc mibmodes.np$np 0
  expect_nogrep mibmodes.np$np out "FAIL" "no check failed"
  expect_quiet mibmodes.np$np
done
assert_no_leftovers "$MARK"
finish
