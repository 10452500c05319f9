#!/bin/sh
# fast.sh -- the fast path for small operations on one host (it_fast.c):
# results equal to horad's bit for bit, for every dtype x op, scale
# factors and broadcast roots, in the global set and in process sets;
# operations in different orders and more of them than slots; a burst in
# the same order, none given back (each its own slot); threads of
# a rank at once; a late rank, a mismatch, a name twice in flight, join, a
# rank that keeps out, a rank that dies; off with --no-fast-path and while
# the timeline records; counted in /metrics.
. "$(dirname "$0")/lib.sh"

ok() { # NAME NP MODE
  expect_rc "$1" 0 &&
    expect_count "$1" out "^\[[0-9]+\]<stdout>:rank [0-9]+: fast $3: [0-9]+ checks, 0 failures" "$2" \
      "every rank reports its checks, none failed"
}
used() { # NAME NP: every rank did some operations on the fast path
  expect_count "$1" err "^\[[0-9]+\]<stderr>:libhora\[[0-9]+\] DEBUG: rank [0-9]+: [1-9][0-9]* operations on the fast path" "$2" \
    "every rank did operations on the fast path"
}

for np in 2 3 4; do
  hrun check.np$np 300 HORA_LOG=client:debug -np $np "$T/it_fast" check 3
  ok check.np$np $np check && used check.np$np $np
done
# process sets {0,1,2} and {1,3}: each set's members meet by themselves
# (and unnamed operations in a set are named by their order in it)
hrun sets.np4 300 HORA_LOG=client:debug -np 4 "$T/it_fast" sets 3
ok sets.np4 4 sets && used sets.np4 4
for np in 2 3; do
  hrun order.np$np 120 HORA_LOG=client:debug -np $np "$T/it_fast" order 3
  ok order.np$np $np order && used order.np$np $np
  hrun dup.np$np 120 -np $np "$T/it_fast" dup
  ok dup.np$np $np dup &&
    expect_grep dup.np$np out "^\[0\]<stdout>:rank 0: dup error: rank 0 submitted tensor 'd' while an operation of the same name is still in flight" \
      "rank 0's second 'd' in flight was refused"
  hrun join.np$np 120 -np $np "$T/it_fast" join 5
  ok join.np$np $np join
  hrun mismatch.np$np 120 -np $np "$T/it_fast" mismatch
  ok mismatch.np$np $np mismatch &&
    expect_count mismatch.np$np out "^\[[0-9]+\]<stdout>:rank [0-9]+: mismatch error: Mismatched allreduce tensor shapes on tensor 'mm'" $np \
      "every rank got horad's mismatch error"
  hrun diverge.np$np 120 HORA_LOG=client:debug -np $np "$T/it_fast" diverge 5
  ok diverge.np$np $np diverge &&
    expect_grep diverge.np$np err "^\[0\]<stderr>:libhora\[[0-9]+\] DEBUG: rank 0: 0 operations on the fast path, [1-9][0-9]* given back to horad" \
      "rank 0 gave its operations back to horad"
done
# a burst of asynchronous operations: none meets another at a slot, so
# none is given back to horad (the wait limit of 2 s: no peer is ever that
# late here, while a rank sent to horad by a taken lane would hold its
# peers that long)
for np in 2 3; do
  hrun burst.np$np 120 HORA_LOG=client:debug HORA_FAST_PATH_WAIT_US=2000000 \
    -np $np "$T/it_fast" burst 5
  ok burst.np$np $np burst &&
    expect_count burst.np$np err "^\[[0-9]+\]<stderr>:libhora\[[0-9]+\] DEBUG: rank [0-9]+: [1-9][0-9]* operations on the fast path, 0 given back to horad" $np \
      "every rank took its learnt operations on the fast path, none given back"
done
for np in 2 3; do
  hrun threads.np$np 180 HORA_LOG=client:debug -np $np "$T/it_fast" threads 2000
  ok threads.np$np $np threads && used threads.np$np $np
done
hrun skew 120 -np 2 "$T/it_fast" skew 20
ok skew 2 skew

hrun kill 60 -np 2 "$T/it_fast" kill
expect_rc kill 3
expect_grep kill out "^\[0\]<stdout>:rank 0: kill: rc -2002 \(.*rank 1 on host .* exited with code 3\)" \
  "the waiting rank got the error that names the dead rank"

hrun off 120 HORA_LOG=client:debug --no-fast-path -np 2 "$T/it_fast" check 2
ok off 2 check &&
  expect_nogrep off err "operations on the fast path" \
    "with --no-fast-path the ranks get no fast path"
hrun tl 120 HORA_LOG=client:debug --timeline-filename "$IT_TMP/tl.json" -np 2 "$T/it_fast" order 2
ok tl 2 order &&
  expect_count tl err "DEBUG: rank [0-9]+: 0 operations on the fast path" 2 \
    "while the timeline records, every operation goes through horad" &&
  { grep -q '"ord\.3"' "$IT_TMP/tl.json" ||
    fail "tl: the timeline has no row for ord.3"; }

# /metrics counts them
if ! metrics_of metrics 120 "$IT_TMP/metrics.txt" -np 2 "$T/it_fast" order 2; then
  say "metrics: no curl here; not checked"
  assert_no_leftovers "$MARK"
  finish
fi
ok metrics 2 order
fastn=$(sed -n 's/^hora_fast_path_operations_total{.*collective="allreduce",dtype="float64"} \([0-9]*\)$/\1/p' "$IT_TMP/metrics.txt")
alln=$(sed -n 's/^hora_operations_total{.*collective="allreduce",dtype="float64",comm="0"} \([0-9]*\)$/\1/p' "$IT_TMP/metrics.txt")
if [ -n "$fastn" ] && [ "$fastn" -gt 0 ] && [ -n "$alln" ] && [ "$alln" -ge "$fastn" ]; then
  say "metrics: $fastn of $alln float64 allreduces on the fast path"
else
  fail "metrics: fast path operations '$fastn', all '$alln'"
  sed 's/^/    | /' "$IT_TMP/metrics.txt" | grep -i 'operations_total' | head
fi
assert_no_leftovers "$MARK"
finish
